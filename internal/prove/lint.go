package prove

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/algebra"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/snapshot"
)

// Finding codes of Lint (docs/prove.md, "polc vet").
const (
	// CodeNeverEffective: a grant or an approval that no request can take
	// effect through: every value it matches is denied, or (an approval)
	// not allowed in the first place.
	CodeNeverEffective = diag.CodeRuleNeverEffective
	// CodeUnmatchable: a rule that matches no value a request can carry.
	CodeUnmatchable = diag.CodeRuleUnmatchable
	// CodeRedundant: a rule every value of which other rules of its kind
	// already match: removing it changes no decision's disposition.
	CodeRedundant = diag.CodeRuleRedundant
	// CodeFacetEmptied: a child allows no value of a facet its parent
	// allows some of.
	CodeFacetEmptied = diag.CodeFacetEmptied
	// CodeUnanalysed: rules (or facets) whose questions needed more work
	// than the Prover's budget allows: no finding is reported for them,
	// and one finding of this code names them.
	CodeUnanalysed = diag.CodeRulesUnanalysed
)

// Finding is one result of Lint, about a rule (RuleID) or a facet.
type Finding struct {
	Code    string
	RuleID  string
	Facet   string
	Message string
	// Shadowed: a grant one deny of its facet covers, which the
	// compiler reports already (allow_shadowed).
	Shadowed bool
}

// maxNamed bounds the rules a finding names as the cause.
const maxNamed = 3

// Lint decides, for the rules a policy declares itself (its own
// provenance), which can never take effect, which match nothing, and
// which are redundant, and, given the parent, which facets the policy
// empties. Each finding names the rules that cause it.
//
// A finding about a rule says it can go, so each is reported only when
// the policy without it decides every request as the policy does (its
// disposition: deny, escalate or allow), which the algebra decides
// exactly, both ways, as never_allows_beyond does. That counts what the
// searches above do not see: a grant covered by other grants may be the
// one that puts its facet's "not allowed" in a blocking gate, and a
// subprocess grant every argv of which is denied may be the one that
// allows shell control alone. Of rules each of which would make another
// removable (two denies of one meaning), only the later ones in
// declaration order are reported: they are removed one after another,
// last declared first, each checked against what the previous ones left,
// so following every finding changes no decision.
func (pr *Prover) Lint(p, parent *Policy) ([]Finding, error) {
	return pr.LintContext(context.Background(), p, parent)
}

// lintQuestions bounds the work of one Lint: as many questions' budgets,
// so that a policy of thousands of rules each near its bound is not
// judged for hours (docs/prove.md, "Budget").
const lintQuestions = 50

// LintContext is Lint, stopped by ctx. Each rule is one question with its
// own budget (Prover.Budget), and the policy has lintQuestions of them: a
// rule whose questions need more than is left is not judged on a partial
// search but left out, and a last finding of code CodeUnanalysed says
// which rules were.
func (pr *Prover) LintContext(ctx context.Context, p, parent *Policy) ([]Finding, error) {
	c := &pr.cache
	defer func() { c.budget = nil }()
	left := lintQuestions * pr.units()
	// ask starts the next question, within what the policy has left.
	ask := func() {
		if c.budget != nil {
			left -= c.budget.Spent()
		}
		pr.question(ctx, min(pr.units(), max(left, 0)))
	}
	var cands []candidate
	var unanalysed []string
	// bounded reports whether err is the budget's: the rule is left out.
	bounded := func(err error, id string) bool {
		if !errors.Is(err, algebra.ErrTooLarge) {
			return false
		}
		if !slices.Contains(unanalysed, id) {
			unanalysed = append(unanalysed, id)
		}
		return true
	}
	own := ownRules(p.Snap)
	ask()
	viable, err := pr.viableShapes(p)
	if err != nil && !errors.Is(err, algebra.ErrTooLarge) {
		return nil, err
	}
	viableKnown := err == nil
	for _, r := range p.rules {
		if !own[r.id] || r.facet == decision.FacetShell {
			continue
		}
		ask()
		if r.onAction {
			f, err := pr.lintAction(p, r)
			if bounded(err, r.id) {
				continue
			}
			if err != nil {
				return nil, err
			}
			for _, x := range f {
				cands = append(cands, candidate{r: r, f: x})
			}
			continue
		}
		// Unmatchable: no shape the rule reads has a value it matches.
		matchable := false
		for _, s := range shapes() {
			for i := range s.atoms {
				if !r.reads(s, i, strings.ToLower(s.action())) {
					continue
				}
				_, ok, err := solvePart(c, s.valueDomain(i, false), part{require: [][]term{{mt(r.m)}}}, nil)
				if bounded(err, r.id) {
					matchable = true // not known: no finding
					break
				}
				if err != nil {
					return nil, err
				}
				matchable = matchable || ok
			}
			if matchable {
				break
			}
		}
		if slices.Contains(unanalysed, r.id) {
			continue
		}
		if !matchable {
			cands = append(cands, candidate{r: r, f: Finding{Code: CodeUnmatchable, RuleID: r.id, Message: fmt.Sprintf("%s matches no value a request can carry (docs/prove.md): it never applies", r.id)}})
			continue
		}
		switch r.role {
		case roleGrant, roleEscalate:
			if !viableKnown {
				bounded(algebra.ErrTooLarge, r.id)
				continue
			}
			eff, by, err := pr.effective(p, r, viable)
			if bounded(err, r.id) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if !eff && len(by) > 0 {
				what := "every value it allows is denied"
				if r.role == roleEscalate {
					what = "every request it matches is denied before it could escalate"
				}
				cands = append(cands, candidate{r: r, f: Finding{Code: CodeNeverEffective, RuleID: r.id, Message: fmt.Sprintf("%s can never take effect: %s%s", r.id, what, byRules(by)),
					Shadowed: r.role == roleGrant && p.shadowedByOne(r)}})
				continue
			}
		}
		if r.role == roleGrant || r.role == roleBlock {
			others := p.sameKind(r)
			red, err := pr.covered(r, others)
			if bounded(err, r.id) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if red {
				cands = append(cands, candidate{r: r, f: Finding{Code: CodeRedundant, RuleID: r.id}, others: others})
			}
		}
	}
	out, err := pr.removable(p, cands, ask, bounded)
	if err != nil {
		return nil, err
	}
	if parent != nil {
		f, err := pr.emptied(ask, p, parent, &unanalysed)
		if err != nil {
			return nil, err
		}
		out = append(out, f...)
	}
	if len(unanalysed) > 0 {
		named := unanalysed[:min(len(unanalysed), maxNamed)]
		more := ""
		if len(unanalysed) > maxNamed {
			more = fmt.Sprintf(", and %d more", len(unanalysed)-maxNamed)
		}
		out = append(out, Finding{Code: CodeUnanalysed, Message: fmt.Sprintf("%d of its rules were not analysed (%s%s): their questions need more than the search's work bound of %d units a question, %d a policy (docs/prove.md, \"Budget\"), so no finding is reported for them",
			len(unanalysed), strings.Join(named, ", "), more, pr.units(), lintQuestions*pr.units())})
	}
	return out, nil
}

// DeclaredOrder ranks rule ids by the positions that declared them (a
// source map's rules), for Policy.Declared.
func DeclaredOrder(pos map[string]diag.Pos) map[string]int {
	ids := slices.Collect(maps.Keys(pos))
	slices.SortFunc(ids, func(a, b string) int {
		if c := pos[a].Compare(pos[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	out := make(map[string]int, len(ids))
	for i, id := range ids {
		out[id] = i
	}
	return out
}

// candidate is a finding the searches made about a rule, before it is
// checked that the rule can go.
type candidate struct {
	r *rule
	f Finding
	// others: for a redundant rule, the rules of its kind that may cover
	// it.
	others []*rule
}

// removable keeps the candidates whose rules can be removed, one after
// another, last declared first, without changing a disposition (Lint),
// and writes the redundant ones' messages with the rules left.
//
// Each check is a question of its own (ask starts it); a check that
// exceeds its bound keeps the rule and reports it to bounded, which lists
// it as not analysed.
func (pr *Prover) removable(p *Policy, cands []candidate, ask func(), bounded func(error, string) bool) ([]Finding, error) {
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	rank := func(id string) (int, bool) {
		r, ok := p.Declared[id]
		return r, ok
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := cands[a].r.id, cands[b].r.id
		rx, okx := rank(x)
		ry, oky := rank(y)
		switch {
		case okx && oky && rx != ry:
			return ry - rx
		case okx != oky:
			if okx {
				return 1 // declared ones are kept before the others
			}
			return -1
		}
		return strings.Compare(y, x)
	})
	cur := p
	removed := map[*rule]bool{}
	keep := make([]bool, len(cands))
	for _, i := range order {
		q, err := cur.without(cands[i].r.id)
		if err != nil {
			return nil, err
		}
		ask()
		same, err := pr.sameDecisions(cur, q, cands[i].r.id)
		if bounded(err, cands[i].r.id) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if same {
			keep[i], cur, removed[cands[i].r] = true, q, true
		}
	}
	var out []Finding
	for i, cd := range cands {
		if !keep[i] {
			continue
		}
		if cd.f.Code == CodeRedundant {
			var left []*rule
			for _, o := range cd.others {
				if !removed[o] {
					left = append(left, o)
				}
			}
			ask()
			msg, err := pr.redundantMessage(cd.r, left)
			if err != nil {
				return nil, err
			}
			cd.f.Message = msg
		}
		out = append(out, cd.f)
	}
	return out, nil
}

// without is the policy with the rule id removed: the rule and its gate
// binding, the facets' gates computed again as the engines do.
func (p *Policy) without(id string) (*Policy, error) {
	s := *p.Snap
	s.CompiledRules = slices.DeleteFunc(slices.Clone(s.CompiledRules), func(r snapshot.Rule) bool { return r.Base().RuleID == id })
	s.GateBindings = slices.Clone(s.GateBindings)
	for i := range s.GateBindings {
		s.GateBindings[i].RuleIDs = slices.DeleteFunc(slices.Clone(s.GateBindings[i].RuleIDs), func(x string) bool { return x == id })
	}
	q, err := NewPolicy(&s)
	if err != nil {
		return nil, err
	}
	q.Engine, q.Declared = p.Engine, p.Declared
	return q, nil
}

// sameDecisions reports whether p and q, p without the rule id, decide
// every request alike: no request of any shape is treated more
// permissively by one than by the other. A case left undecided counts as
// a difference; one whose search exceeded its bound is algebra.ErrTooLarge. A shape whose
// requests the rule does not read is decided alike by both when the
// facets' gates and the shell grant did not change with it: every
// condition on it is built from the same rules.
func (pr *Prover) sameDecisions(p, q *Policy, id string) (bool, error) {
	same := p.need == q.need && p.hasShellAllow == q.hasShellAllow
	for _, s := range shapes() {
		if same && !p.sets(s).reads(id) {
			continue
		}
		for _, pair := range [2][2]*Policy{{p, q}, {q, p}} {
			for _, c := range beyondCases(pair[0], pair[1], s) {
				_, found, err := solve(&pr.cache, s, c, pr.Now, nil)
				switch {
				case errors.Is(err, algebra.ErrTooLarge):
					// Not known: the rule stays, listed as not
					// analysed (Lint).
					return false, err
				case found, errors.Is(err, errUndecided):
					return false, nil
				case err != nil:
					return false, err
				}
			}
		}
	}
	return true, nil
}

func byRules(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return " (by " + strings.Join(ids, ", ") + ")"
}

// ownRules are the ids of the rules a snapshot's policy declares itself.
func ownRules(s *snapshot.Snapshot) map[string]bool {
	out := map[string]bool{}
	for _, r := range s.CompiledRules {
		for _, o := range r.Base().Provenance {
			if o.Policy == s.Name {
				out[r.Base().RuleID] = true
			}
		}
	}
	return out
}

// viableShapes are the shapes whose action part the policy can allow or
// escalate: some action id of the shape granted and not blocked. An
// error (the budget's) leaves them unknown: judging by a subset of them
// could report a rule or a facet that some other shape makes effective.
func (pr *Prover) viableShapes(p *Policy) ([]shape, error) {
	var out []shape
	for _, s := range shapes() {
		ok := p.ok(s)
		if ok.dead {
			continue
		}
		_, found, err := solvePart(&pr.cache, s.actionDomain(), ok.action, nil)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, s)
		}
	}
	return out, nil
}

// effective reports whether some request of a viable shape is not denied
// and has r match one of its values; when not, by names blocking rules
// that overlap r. A grant that no viable shape presents a value to (no
// action the policy allows presents its facet) is effective: the
// containment backends enforce filesystem and network grants on what an
// allowed program does, beyond the requests decided.
func (pr *Prover) effective(p *Policy, r *rule, viable []shape) (bool, []string, error) {
	c := &pr.cache
	var blockers []*rule
	presented := false
	for _, s := range viable {
		lower := strings.ToLower(s.action())
		ok := p.ok(s)
		for i := range s.atoms {
			if !r.reads(s, i, lower) {
				continue
			}
			pt := ok.values[i].and(part{require: [][]term{{mt(r.m)}}})
			for _, dom := range lintDomains(s, i) {
				_, found, err := solvePart(c, dom, pt, nil)
				if err != nil {
					return false, nil, err
				}
				if found {
					return true, nil, nil
				}
			}
			for _, b := range p.sets(s).values[i].blocks {
				if !slices.Contains(blockers, b) {
					blockers = append(blockers, b)
				}
			}
			presented = true
		}
	}
	if !presented {
		return true, nil, nil
	}
	return false, overlapping(c, r, blockers), nil
}

// overlapping names the rules of rs that share a value with r.
func overlapping(c *cache, r *rule, rs []*rule) []string {
	var out []string
	for _, b := range rs {
		if b == r || len(out) == maxNamed {
			continue
		}
		if _, found, err := algebra.Intersect(c.nfa(r.m), c.nfa(b.m)); err == nil && found {
			out = append(out, b.id)
		}
	}
	return out
}

// shadowedByOne reports whether one deny of the grant's facet covers it,
// which the compiler already reports as allow_shadowed.
func (p *Policy) shadowedByOne(r *rule) bool {
	for _, b := range p.rules {
		if b.role == roleBlock && b.onAction == r.onAction && b.qualAction == "" && b.target == r.target && covers(b.m, r.m) {
			return true
		}
	}
	return false
}

// sameKind are the rules that may make r redundant: of its role, facet
// and target, that apply wherever r does. Of two rules of one pattern,
// the one with the larger id is left out (the other is kept).
func (p *Policy) sameKind(r *rule) []*rule {
	var others []*rule
	for _, o := range p.rules {
		if o == r || o.role != r.role || o.onAction || o.target != r.target || o.facet != r.facet {
			continue
		}
		// A qualified rule applies to its action's requests only: it
		// covers another of the same action, never an unqualified one.
		if o.qualAction != "" && o.qualAction != r.qualAction {
			continue
		}
		if o.m == r.m && o.id > r.id {
			continue
		}
		others = append(others, o)
	}
	return others
}

// coverDomains are the domains in which "others cover r" is decided: an
// absolute path pattern matches by the path alone, and so does every
// other absolute one; a relative one only adds matches where there is a
// workspace, so outside it decides.
func coverDomains(r *rule) []domain {
	var doms []domain
	for _, s := range shapes() {
		for i, a := range s.atoms {
			if a == r.target && doms == nil {
				doms = lintDomains(s, i)
			}
		}
	}
	if r.target == atomPath && strings.HasPrefix(r.m.pattern, "/") {
		doms = doms[:1]
	}
	return doms
}

// covered reports whether every value r matches is matched by one of
// others.
func (pr *Prover) covered(r *rule, others []*rule) (bool, error) {
	if len(others) == 0 {
		return false, nil
	}
	for _, dom := range coverDomains(r) {
		_, found, err := solvePart(&pr.cache, dom, part{require: [][]term{{mt(r.m)}}, forbid: terms(others)}, nil)
		if err != nil || found {
			return false, err
		}
	}
	return true, nil
}

// maxMinimize bounds the rules a cover is made minimal among, one search
// each; past it the message names some and counts the rest.
const maxMinimize = 8

// redundantMessage says which rules match every value r matches: one
// rule that does alone, else a minimal set of those overlapping it (no
// member can be left out), else, among many, the first few and how many
// more. A rule whose remaining cover is gone (the rules that covered it
// were reported themselves) is redundant for a reason the searches do
// not name, and the message says only that.
func (pr *Prover) redundantMessage(r *rule, others []*rule) (string, error) {
	c := &pr.cache
	plain := fmt.Sprintf("%s is redundant: the policy decides every request alike without it", r.id)
	for _, o := range others {
		if covers(o.m, r.m) {
			return fmt.Sprintf("%s is redundant: every value it matches is matched by %s", r.id, o.id), nil
		}
	}
	var ov []*rule
	for _, o := range others {
		if _, found, err := algebra.Intersect(c.nfa(r.m), c.nfa(o.m)); err != nil || found {
			ov = append(ov, o)
		}
	}
	// The finding stands on its own check (removable); naming what covers
	// the rule is a further search, which the budget may cut short: the
	// plain message then says what is known.
	if ok, err := pr.covered(r, ov); errors.Is(err, algebra.ErrTooLarge) || err == nil && !ok {
		return plain, nil
	} else if err != nil {
		return "", err
	}
	if len(ov) <= maxMinimize {
		for i := len(ov) - 1; i >= 0 && len(ov) > 1; i-- {
			rest := slices.Delete(slices.Clone(ov), i, i+1)
			ok, err := pr.covered(r, rest)
			if errors.Is(err, algebra.ErrTooLarge) {
				break // ov covers it: named as it is, unminimized
			}
			if err != nil {
				return "", err
			}
			if ok {
				ov = rest
			}
		}
	}
	ids := make([]string, 0, maxNamed)
	for _, o := range ov[:min(len(ov), maxNamed)] {
		ids = append(ids, o.id)
	}
	by := strings.Join(ids, ", ")
	if n := len(ov) - len(ids); n > 0 {
		by += fmt.Sprintf(" and %d more rules of its kind", n)
	}
	return fmt.Sprintf("%s is redundant: every value it matches is matched by %s", r.id, by), nil
}

// lintDomains are the domains a lint question about value i of shape s is
// asked in, cheapest first: for a path, outside the workspace (no
// workspace to search), then every pair; else the value's loose domain.
func lintDomains(s shape, i int) []domain {
	if s.atoms[i] == atomPath {
		return []domain{cachedDomain("path outside", func() domain {
			req, forbid := outsideDomain()
			return domain{[]*algebra.NFA{req}, forbid}
		}), s.valueDomain(i, false)}
	}
	return []domain{s.valueDomain(i, false)}
}

// lintAction checks an action rule of the policy's own: an unqualified
// approval that every action it matches is denied for, an action grant
// that every id it allows is denied.
func (pr *Prover) lintAction(p *Policy, r *rule) ([]Finding, error) {
	if r.role != roleGrant && r.role != roleEscalate {
		return nil, nil
	}
	var blocks []*rule
	for _, b := range p.rules {
		if b.onAction && b.role == roleBlock {
			blocks = append(blocks, b)
		}
	}
	dom := domain{require: []*algebra.NFA{algebra.Plus(actionIDChars)}}
	_, found, err := solvePart(&pr.cache, dom, part{require: [][]term{{mt(r.m)}}, forbid: terms(blocks)}, nil)
	if err != nil || found {
		return nil, err
	}
	return []Finding{{Code: CodeNeverEffective, RuleID: r.id, Message: fmt.Sprintf("%s can never take effect: every action it matches is denied%s", r.id, byRules(overlapping(&pr.cache, r, blocks))),
		Shadowed: r.role == roleGrant && p.shadowedByOne(r)}}, nil
}

// facetNames of the value facets a child may empty.
var emptiable = []int{decision.FacetPathRead, decision.FacetPathWrite, decision.FacetPathExecute, decision.FacetCommand,
	decision.FacetHost, decision.FacetEnv, decision.FacetMCPTool, decision.FacetMCPResource}

// emptied lists the facets of which the parent allows some value and the
// child none (granted and not blocked, for some viable shape). Each facet
// is a question; one past the budget is added to unanalysed.
func (pr *Prover) emptied(ask func(), child, parent *Policy, unanalysed *[]string) ([]Finding, error) {
	var out []Finding
	for _, f := range emptiable {
		ask()
		pv, _, err := pr.facetAllows(parent, f)
		emptied := false
		if err == nil && pv {
			var cv, presented bool
			cv, presented, err = pr.facetAllows(child, f)
			emptied = !cv && presented
		}
		if errors.Is(err, algebra.ErrTooLarge) {
			*unanalysed = append(*unanalysed, "facet "+decision.FacetNames[f])
			continue
		}
		if err != nil {
			return nil, err
		}
		if emptied {
			out = append(out, Finding{Code: CodeFacetEmptied, Facet: decision.FacetNames[f],
				Message: fmt.Sprintf("allows no %s value, which its parent %q allows some of: its narrowing (or a deny) emptied the facet", decision.FacetNames[f], parent.Name())})
		}
	}
	return out, nil
}

// facetAllows reports whether a request of some viable shape presenting
// facet f can have that value granted and not blocked; presented, whether
// a viable shape presents the facet at all (a child that allows no action
// presenting it narrowed its actions, not the facet).
func (pr *Prover) facetAllows(p *Policy, f int) (allows, presented bool, err error) {
	if !p.need[f] {
		return true, true, nil // not checked: every value passes
	}
	viable, err := pr.viableShapes(p)
	if err != nil {
		return false, false, err
	}
	for _, s := range viable {
		ok := p.ok(s)
		for i := range s.atoms {
			if !slices.Contains(s.facets(i), f) {
				continue
			}
			presented = true
			_, found, err := solvePart(&pr.cache, s.valueDomain(i, false), ok.values[i], nil)
			if err != nil {
				return false, true, err
			}
			if found {
				return true, true, nil
			}
		}
	}
	return false, presented, nil
}
