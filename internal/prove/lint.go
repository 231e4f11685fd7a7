package prove

import (
	"context"
	"errors"
	"fmt"
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
	var out []Finding
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
			out = append(out, f...)
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
			out = append(out, Finding{Code: CodeUnmatchable, RuleID: r.id, Message: fmt.Sprintf("%s matches no value a request can carry (docs/prove.md): it never applies", r.id)})
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
				out = append(out, Finding{Code: CodeNeverEffective, RuleID: r.id, Message: fmt.Sprintf("%s can never take effect: %s%s", r.id, what, byRules(by)),
					Shadowed: r.role == roleGrant && p.shadowedByOne(r)})
				continue
			}
		}
		if r.role == roleGrant || r.role == roleBlock {
			red, by, err := pr.redundant(p, r)
			if bounded(err, r.id) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if red {
				out = append(out, Finding{Code: CodeRedundant, RuleID: r.id, Message: fmt.Sprintf("%s is redundant: every value it matches is matched by %s", r.id, strings.Join(by, ", "))})
			}
		}
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

// redundant reports whether every value r matches is matched by other
// rules of its role that apply wherever r does, and names them.
func (pr *Prover) redundant(p *Policy, r *rule) (bool, []string, error) {
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
			continue // two rules of one pattern: the first by id is kept
		}
		others = append(others, o)
	}
	if len(others) == 0 {
		return false, nil, nil
	}
	var doms []domain
	for _, s := range shapes() {
		for i, a := range s.atoms {
			if a == r.target && doms == nil {
				doms = lintDomains(s, i)
			}
		}
	}
	if r.target == atomPath && strings.HasPrefix(r.m.pattern, "/") {
		// An absolute pattern matches by the path alone, and so does
		// every other absolute one; a relative one only adds matches
		// where there is a workspace: outside it decides.
		doms = doms[:1]
	}
	for _, dom := range doms {
		_, found, err := solvePart(&pr.cache, dom, part{require: [][]term{{mt(r.m)}}, forbid: terms(others)}, nil)
		if err != nil || found {
			return false, nil, err
		}
	}
	return true, overlapping(&pr.cache, r, others), nil
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
