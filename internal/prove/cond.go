package prove

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/algebra"
	"polc.dev/polc/normalize"
)

// part is a condition on one part of a request: for each group of
// require, some automaton accepts the part's string; no automaton of
// forbid does.
type part struct {
	require [][]term
	forbid  []term
}

func (a part) and(b part) part {
	return part{require: append(slices.Clone(a.require), b.require...), forbid: append(slices.Clone(a.forbid), b.forbid...)}
}

// cond is a condition on a request of one shape: a conjunction of
// conditions on its independent parts (values: one per value of the
// shape; nil when the condition says nothing of them).
type cond struct {
	principal, tenant, action part
	values                    []part
	// dead: no request of the shape satisfies it.
	dead bool
	// timeIn and timeOut: windows the request time must fall in, and out
	// of.
	timeIn, timeOut []window
	// usageMin[k] <= usage of k < usageMax[k].
	usageMin, usageMax map[string]int64
}

func (c cond) and(d cond) cond {
	out := cond{
		principal: c.principal.and(d.principal), tenant: c.tenant.and(d.tenant),
		action: c.action.and(d.action), values: andValues(c.values, d.values),
		dead:   c.dead || d.dead,
		timeIn: append(slices.Clone(c.timeIn), d.timeIn...), timeOut: append(slices.Clone(c.timeOut), d.timeOut...),
		usageMin: maps.Clone(c.usageMin), usageMax: maps.Clone(c.usageMax),
	}
	if out.usageMin == nil {
		out.usageMin = map[string]int64{}
	}
	if out.usageMax == nil {
		out.usageMax = map[string]int64{}
	}
	for k, v := range d.usageMin {
		out.usageMin[k] = max(out.usageMin[k], v)
	}
	for k, v := range d.usageMax {
		if cur, ok := out.usageMax[k]; !ok || v < cur {
			out.usageMax[k] = v
		}
	}
	return out
}

func andValues(a, b []part) []part {
	n := max(len(a), len(b))
	out := make([]part, n)
	for i := range n {
		var x, y part
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		out[i] = x.and(y)
	}
	return out
}

// onValue is the condition pt on value i of a shape.
func onValue(i int, pt part) cond {
	c := cond{values: make([]part, i+1)}
	c.values[i] = pt
	return c
}

func req(rs []*rule) [][]term { return [][]term{terms(rs)} }

// ok is the condition under which p does not deny a request of shape s:
// every needed facet granted, no blocking rule matching, the time in the
// policy's window and usage under every limit.
func (p *Policy) ok(s shape) cond {
	k := s.key()
	p.mu.Lock()
	c, ok := p.okMemo[k]
	p.mu.Unlock()
	if ok {
		return c
	}
	c = p.buildOK(s)
	p.mu.Lock()
	if p.okMemo == nil {
		p.okMemo = map[string]cond{}
	}
	p.okMemo[k] = c
	p.mu.Unlock()
	return c
}

func (p *Policy) buildOK(s shape) cond {
	st := p.sets(s)
	var c cond
	if p.need[decision.FacetPrincipal] {
		c.principal.require = [][]term{p.scope}
	}
	if p.need[decision.FacetTenant] {
		c.tenant.require = [][]term{p.tscope}
	}
	if p.need[decision.FacetAction] {
		c.action.require = req(st.actionGrants)
	}
	c.action.forbid = terms(st.actionBlocks)
	c.values = make([]part, len(s.atoms))
	for i, v := range st.values {
		for _, f := range s.facets(i) {
			if p.need[f] {
				c.values[i].require = append(c.values[i].require, terms(v.grants[f]))
			}
		}
		c.values[i].forbid = terms(v.blocks)
	}
	c.dead = st.shellDenied
	if p.window != nil && p.need[decision.FacetExpiry] {
		c.timeIn = []window{*p.window}
	}
	if p.need[decision.FacetBudget] && len(p.budgets) > 0 {
		c.usageMax = map[string]int64{}
		for _, b := range p.budgets {
			c.usageMax[b.kind] = b.limit
		}
	}
	return c
}

// allowed is the condition under which p allows a request of shape s:
// not denied and no approval escalating.
func (p *Policy) allowed(s shape) cond {
	st := p.sets(s)
	esc := cond{action: part{forbid: terms(st.actionEsc)}, values: make([]part, len(s.atoms))}
	for i, v := range st.values {
		esc.values[i].forbid = terms(v.esc)
	}
	return p.ok(s).and(esc)
}

// denied lists conditions of which each makes p deny a request of shape
// s, and one holds whenever p denies one: a part out of scope, a facet not
// granted, a blocking rule matching, the time out of the window, a budget
// spent, shell control not allowed.
func (p *Policy) denied(s shape) []cond {
	st := p.sets(s)
	var out []cond
	if p.need[decision.FacetPrincipal] {
		out = append(out, cond{principal: part{forbid: p.scope}})
	}
	if p.need[decision.FacetTenant] {
		out = append(out, cond{tenant: part{forbid: p.tscope}})
	}
	if p.need[decision.FacetAction] {
		out = append(out, cond{action: part{forbid: terms(st.actionGrants)}})
	}
	if len(st.actionBlocks) > 0 {
		out = append(out, cond{action: part{require: req(st.actionBlocks)}})
	}
	for i, v := range st.values {
		for _, f := range s.facets(i) {
			if p.need[f] {
				out = append(out, onValue(i, part{forbid: terms(v.grants[f])}))
			}
		}
		if len(v.blocks) > 0 {
			out = append(out, onValue(i, part{require: req(v.blocks)}))
		}
	}
	if st.shellDenied {
		out = append(out, cond{})
	}
	if p.window != nil && p.need[decision.FacetExpiry] {
		out = append(out, cond{timeOut: []window{*p.window}})
	}
	if p.need[decision.FacetBudget] {
		for _, b := range p.budgets {
			out = append(out, cond{usageMin: map[string]int64{b.kind: b.limit}})
		}
	}
	return out
}

// escalated lists conditions of which each makes p escalate a request of
// shape s, and one holds whenever p escalates one.
func (p *Policy) escalated(s shape) []cond {
	st := p.sets(s)
	ok := p.ok(s)
	var out []cond
	if len(st.actionEsc) > 0 {
		out = append(out, ok.and(cond{action: part{require: req(st.actionEsc)}}))
	}
	for i, v := range st.values {
		if len(v.esc) > 0 {
			out = append(out, ok.and(onValue(i, part{require: req(v.esc)})))
		}
	}
	return out
}

// errUndecided marks a part that has a value in the loose domain (what the
// normalizer may produce) and none in the tight one (what a witness can
// be made of): the question is left open rather than answered.
var errUndecided = errors.New("undecided")

// solvePart returns a string of the domain satisfying pt. Before the
// search, a required rule that a forbidden one covers is dropped (every
// string it accepts is forbidden): a child's grants within its parent's,
// its denies that repeat the parent's, cost nothing then. A large group of
// required rules (a facet's grants) is searched one member at a time: a
// string some member accepts is one that member accepts, and each member
// alone bounds the search by its prefix, where the union of hundreds
// would have the search explore every one of them at once.
func solvePart(c *cache, dom domain, pt part, exclude []string) (string, bool, error) {
	ix := newCoverIndex(pt.forbid)
	split := -1
	for i, g := range pt.require {
		if len(g) > smallGroup && !slices.ContainsFunc(g, func(t term) bool { return t.m == nil }) && (split < 0 || len(g) > len(pt.require[split])) {
			split = i
		}
	}
	if split < 0 {
		return solveOnce(c, ix, dom, pt, exclude)
	}
	for _, t := range pt.require[split] {
		if ix.covered(t.m) {
			continue
		}
		one := part{require: slices.Clone(pt.require), forbid: pt.forbid}
		one.require[split] = []term{t}
		w, found, err := solveOnce(c, ix, dom, one, exclude)
		if err != nil || found {
			return w, found, err
		}
	}
	return "", false, nil
}

// smallGroup is the size up to which a required group is searched whole,
// and bounds the others by its members' prefixes.
const smallGroup = 4

func solveOnce(c *cache, ix *coverIndex, dom domain, pt part, exclude []string) (string, bool, error) {
	// Small required groups (a property's pattern, one grant) bound the
	// strings a witness can be: terms whose prefixes no member of such a
	// group shares are dropped too, their automata never built.
	var bounds []anchors
	for _, g := range pt.require {
		if len(g) <= smallGroup {
			bounds = append(bounds, newAnchors(g))
		}
	}
	irrelevant := func(t term, own int) bool {
		if t.m == nil {
			return false
		}
		for i, b := range bounds {
			if i != own && b.excludes(t.m) {
				return true
			}
		}
		return false
	}
	q := algebra.Query{Budget: c.budget}
	for _, d := range dom.require {
		q.Require = append(q.Require, []*algebra.NFA{d})
	}
	bi := 0
	for _, g := range pt.require {
		own := -1
		if len(g) <= smallGroup {
			own, bi = bi, bi+1
		}
		var ns []*algebra.NFA
		for _, t := range g {
			if t.m != nil && (ix.covered(t.m) || irrelevant(t, own)) {
				continue
			}
			ns = append(ns, t.nfa(c))
		}
		if len(ns) == 0 {
			return "", false, nil
		}
		q.Require = append(q.Require, ns)
	}
	q.Forbid = append(q.Forbid, dom.forbid...)
	for _, t := range pt.forbid {
		if irrelevant(t, -1) {
			continue
		}
		q.Forbid = append(q.Forbid, t.nfa(c))
	}
	for _, x := range exclude {
		q.Forbid = append(q.Forbid, lit(x))
	}
	return q.Solve()
}

var textDomain = domain{require: []*algebra.NFA{text}}

// solveText solves a principal or tenant part, and makes a witness that
// ends where a glob's '*' matched nothing ("agent:") read better when it
// can ("agent:x").
func solveText(c *cache, pt part) (string, bool, error) {
	w, ok, err := solvePart(c, textDomain, pt, nil)
	if err != nil || !ok {
		return w, ok, err
	}
	if n := len(w); n == 0 || strings.ContainsRune(":/-_.@", rune(w[n-1])) {
		if longer := w + "x"; satisfies(c, pt, longer) {
			return longer, true, nil
		}
	}
	return w, true, nil
}

// satisfies reports whether s meets pt.
func satisfies(c *cache, pt part, s string) bool {
	for _, g := range pt.require {
		if !slices.ContainsFunc(g, func(t term) bool { return t.nfa(c).Match(s) }) {
			return false
		}
	}
	return !slices.ContainsFunc(pt.forbid, func(t term) bool { return t.nfa(c).Match(s) })
}

// solve finds a request of shape s satisfying c: ok=false when there is
// none; errUndecided when only values no witness can be made of satisfy
// it; algebra.ErrTooLarge when the search was too large.
func solve(ch *cache, s shape, c cond, now time.Time, exclude []string) (Witness, bool, error) {
	w := Witness{shape: s}
	if c.dead {
		return w, false, nil
	}
	t, ok := solveTime(c.timeIn, c.timeOut, now)
	if !ok {
		return w, false, nil
	}
	w.time = t
	for k, lo := range c.usageMin {
		if hi, bounded := c.usageMax[k]; bounded && lo >= hi {
			return w, false, nil
		}
		setUsage(&w.usage, k, lo)
	}
	for _, hi := range c.usageMax {
		if hi <= 0 {
			return w, false, nil // usage is never negative
		}
	}
	var err error
	if w.principal, ok, err = solveText(ch, c.principal); err != nil || !ok {
		return w, false, err
	}
	if w.tenant, ok, err = solveText(ch, c.tenant); err != nil || !ok {
		return w, false, err
	}
	if w.action, ok, err = solvePart(ch, s.actionDomain(), c.action, nil); err != nil || !ok {
		return w, false, err
	}
	w.values = make([]string, len(s.atoms))
	for i := range s.atoms {
		var pt part
		if i < len(c.values) {
			pt = c.values[i]
		}
		var ex []string
		if i == 0 {
			ex = exclude
		}
		found := false
		for _, dom := range s.valueTiers(i) {
			if w.values[i], found, err = solvePart(ch, dom, pt, ex); err != nil {
				return w, false, err
			}
			if found {
				break
			}
		}
		if found {
			continue
		}
		if a := s.atoms[i]; a == atomHost || a == atomEnv || a == atomMCP {
			// The tight domain is smaller than the real one here.
			if v, loose, err := solvePart(ch, s.valueDomain(i, false), pt, nil); err != nil {
				return w, false, err
			} else if loose {
				w.values[i] = v
				return w, false, errUndecided
			}
		}
		return w, false, nil
	}
	return w, true, nil
}

func setUsage(u *normalize.Usage, kind string, v int64) {
	switch kind {
	case "calls":
		u.Calls = v
	case "tokens":
		u.Tokens = v
	case "cost_microunits":
		u.CostMicrounits = v
	case "wall_microseconds":
		u.WallMicroseconds = v
	}
}

// solveTime returns a request time in every window of in and in none of
// out, preferring now: the times at which the answer can change are the
// windows' ends, so now, each end and the instant before each end are
// enough to try.
func solveTime(in, out []window, now time.Time) (string, bool) {
	cands := []string{chain.FormatTime(now)}
	for _, w := range append(slices.Clone(in), out...) {
		for _, e := range []string{w.notBefore, w.expiresAt} {
			if e == "" {
				continue
			}
			cands = append(cands, e)
			if t, err := time.Parse(normalize.TimeLayout, e); err == nil {
				cands = append(cands, chain.FormatTime(t.Add(-time.Microsecond)))
			}
		}
	}
	inside := func(w window, t string) bool {
		return (w.notBefore == "" || t >= w.notBefore) && (w.expiresAt == "" || t < w.expiresAt)
	}
	for _, t := range cands {
		good := true
		for _, w := range in {
			good = good && inside(w, t)
		}
		for _, w := range out {
			good = good && !inside(w, t)
		}
		if good {
			return t, true
		}
	}
	return "", false
}
