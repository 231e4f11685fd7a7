package algebra

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/internal/pattern"
)

// universe returns every string of at most n runes over alphabet.
func universe(alphabet string, n int) []string {
	out := []string{""}
	frontier := []string{""}
	for range n {
		var next []string
		for _, f := range frontier {
			for _, c := range alphabet {
				next = append(next, f+string(c))
			}
		}
		out = append(out, next...)
		frontier = next
	}
	return out
}

// grammar is a pattern kind with a generator of valid patterns over a
// small alphabet and a universe of strings over the same alphabet (and the
// separators), large enough to hold every distinction the patterns draw.
type grammar struct {
	kind pattern.Kind
	gen  func(r *rand.Rand) string
	uni  []string
}

func pick(r *rand.Rand, xs ...string) string { return xs[r.IntN(len(xs))] }

func segPattern(r *rand.Rand, dstar bool) string {
	var segs []string
	for range 1 + r.IntN(3) {
		if dstar && r.IntN(4) == 0 {
			segs = append(segs, "**")
			continue
		}
		segs = append(segs, pick(r, "a", "b", "*", "?", "a*", "*b", "ab", "?a"))
	}
	return strings.Join(segs, "/")
}

func grammars() []grammar {
	sep := pattern.ArgvSep
	return []grammar{
		{pattern.Action, func(r *rand.Rand) string {
			return pick(r, "a", "b", "*", "?", "a*", "*a", "a?b", "**", "*a*", "ab", "?")
		}, universe("ab:", 5)},
		{pattern.Principal, func(r *rand.Rand) string { return pick(r, "a", "*", "a:*", "?:a", "*:*", "a*b") }, universe("ab:", 5)},
		{pattern.Path, func(r *rand.Rand) string {
			p := segPattern(r, true)
			if r.IntN(2) == 0 {
				p = "/" + p
			}
			if r.IntN(10) == 0 {
				p = "/"
			}
			return p
		}, universe("ab/", 6)},
		{pattern.Namespace, func(r *rand.Rand) string { return segPattern(r, true) }, universe("ab/", 6)},
		{pattern.MCP, func(r *rand.Rand) string { return pick(r, "a", "*", "?", "a*") + "/" + pick(r, "b", "*", "**", "b?") }, universe("ab/", 5)},
		{pattern.MCPResource, func(r *rand.Rand) string {
			return pick(r, "a", "*") + "/" + strings.Join([]string{pick(r, "", "a", "*", "**"), pick(r, "b", "*", "**")}[:1+r.IntN(2)], "/")
		}, universe("ab/", 6)},
		{pattern.Command, func(r *rand.Rand) string {
			var toks []string
			for range 1 + r.IntN(3) {
				toks = append(toks, pick(r, "a", "b", "*", "a*", "?", "*b"))
			}
			return strings.Join(toks, " ")
		}, universe("ab"+sep, 5)},
		{pattern.Host, func(r *rand.Rand) string {
			h := pick(r, "*", "a", "a.b", "*.a", "*.b.a", "[a:b]")
			if h == "*" {
				return h
			}
			return h + pick(r, "", "", ":1", ":12")
		}, universe("ab.:1", 6)},
	}
}

// TestOfAgreesWithMatch checks, for generated patterns of every grammar,
// that the automaton accepts exactly the strings pattern.Match accepts,
// over every string of a bounded universe.
func TestOfAgreesWithMatch(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, g := range grammars() {
		seen := map[string]bool{}
		for range 300 {
			p := g.gen(r)
			if seen[p] || pattern.Validate(g.kind, p) != nil {
				continue
			}
			seen[p] = true
			n := Of(g.kind, p)
			for _, s := range g.uni {
				if got, want := n.Match(s), pattern.Match(g.kind, p, s); got != want {
					t.Fatalf("%s %q on %q: automaton %v, Match %v", g.kind, p, s, got, want)
				}
			}
		}
		if len(seen) < 5 {
			t.Errorf("%s: only %d patterns exercised", g.kind, len(seen))
		}
	}
}

// TestFoldAgreesWithToLower: a folded automaton accepts s exactly when the
// pattern matches strings.ToLower(s), for runes whose lowercase is another
// rune (ASCII capitals, the Kelvin sign, dotted capital I).
func TestFoldAgreesWithToLower(t *testing.T) {
	uni := universe("aAkK\u212aiI\u0130/", 4)
	for _, p := range []string{"a", "k*", "*i", "?k", "/a/**", "ak", "i/**", "**/k"} {
		for _, k := range []pattern.Kind{pattern.Action, pattern.Path} {
			if pattern.Validate(k, p) != nil {
				continue
			}
			n := Of(k, p).Fold()
			for _, s := range uni {
				if got, want := n.Match(s), pattern.Match(k, p, strings.ToLower(s)); got != want {
					t.Fatalf("%s %q folded on %q: automaton %v, Match(ToLower) %v", k, p, s, got, want)
				}
			}
		}
	}
}

// TestSetOperationsAgreeWithEnumeration checks intersection, inclusion
// and emptiness against brute-force enumeration: every witness the search
// returns is checked with pattern.Match, and every "none" or "included"
// answer is checked against every string of the universe.
func TestSetOperationsAgreeWithEnumeration(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, g := range grammars() {
		var included, notIncluded, disjoint, overlapping int
		for range 400 {
			a, b := g.gen(r), g.gen(r)
			if pattern.Validate(g.kind, a) != nil || pattern.Validate(g.kind, b) != nil {
				continue
			}
			na, nb := Of(g.kind, a), Of(g.kind, b)
			// Intersection.
			w, found, err := Intersect(na, nb)
			if err != nil {
				t.Fatal(err)
			}
			if found {
				overlapping++
				if !pattern.Match(g.kind, a, w) || !pattern.Match(g.kind, b, w) {
					t.Fatalf("%s: witness %q of %q ∩ %q is not in both", g.kind, w, a, b)
				}
			} else {
				disjoint++
				for _, s := range g.uni {
					if pattern.Match(g.kind, a, s) && pattern.Match(g.kind, b, s) {
						t.Fatalf("%s: %q ∩ %q reported empty, but %q is in both", g.kind, a, b, s)
					}
				}
			}
			// Inclusion L(b) ⊆ L(a).
			ok, counter, err := Includes(nb, na)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				included++
				for _, s := range g.uni {
					if pattern.Match(g.kind, b, s) && !pattern.Match(g.kind, a, s) {
						t.Fatalf("%s: %q ⊆ %q reported, but %q is only in the first", g.kind, b, a, s)
					}
				}
			} else {
				notIncluded++
				if !pattern.Match(g.kind, b, counter) || pattern.Match(g.kind, a, counter) {
					t.Fatalf("%s: counterexample %q to %q ⊆ %q is not one", g.kind, counter, b, a)
				}
			}
			// Covers is a sound proof of the same inclusion.
			if pattern.Covers(g.kind, a, b) && !ok {
				t.Fatalf("%s: Covers(%q, %q) but %q is a counterexample", g.kind, a, b, counter)
			}
		}
		t.Logf("%s: %d included, %d not, %d disjoint, %d overlapping", g.kind, included, notIncluded, disjoint, overlapping)
		if included == 0 || notIncluded == 0 || overlapping == 0 {
			t.Errorf("%s: a class of answers was never exercised", g.kind)
		}
	}
}

// TestExactWhereCoversIsNot: inclusions that pattern.Covers, a
// structural proof, does not show and the algebra decides, and
// non-inclusions with a shortest counterexample.
func TestExactWhereCoversIsNot(t *testing.T) {
	cases := []struct {
		kind        pattern.Kind
		sup, sub    string
		want        bool
		counter     string
		coversKnows bool
	}{
		{pattern.Namespace, "*/**", "**/**", true, "", false},
		{pattern.Namespace, "**/*", "a/**/**", true, "", false},
		{pattern.MCPResource, "a/**/*", "a//**", true, "", false},
		{pattern.Command, "* *", "*", true, "", false},
		{pattern.Path, "/a/**", "/a/*/**", true, "", true},
		{pattern.Path, "/a/**", "/a*", false, "/ax", false},
		{pattern.Command, "git push *", "git *", false, "git", false},
		{pattern.Host, "*.a.b", "*.a.b:1", true, "", true},
		{pattern.Host, "*.a.b:1", "*.a.b", false, "x.a.b:0", false},
	}
	for _, c := range cases {
		if err := pattern.Validate(c.kind, c.sup); err != nil {
			t.Fatal(err)
		}
		if err := pattern.Validate(c.kind, c.sub); err != nil {
			t.Fatal(err)
		}
		ok, counter, err := Includes(Of(c.kind, c.sub), Of(c.kind, c.sup))
		if err != nil {
			t.Fatal(err)
		}
		if ok != c.want {
			t.Errorf("%s: %q ⊆ %q = %v, want %v (counter %q)", c.kind, c.sub, c.sup, ok, c.want, counter)
		}
		if got := strings.ReplaceAll(counter, pattern.ArgvSep, " "); !ok && got != c.counter {
			t.Errorf("%s: counterexample to %q ⊆ %q = %q, want %q", c.kind, c.sub, c.sup, got, c.counter)
		}
		if pattern.Covers(c.kind, c.sup, c.sub) != c.coversKnows {
			t.Errorf("%s: Covers(%q, %q) = %v, want %v", c.kind, c.sup, c.sub, !c.coversKnows, c.coversKnows)
		}
	}
}

// TestUnionInclusion: a pattern can be covered by several together and by
// none alone, which pairwise coverage never shows.
func TestUnionInclusion(t *testing.T) {
	sub := Of(pattern.Action, "a?")
	ok, _, err := Includes(sub, Of(pattern.Action, "ab"), Of(pattern.Action, "a[")) // "a[" literal
	if err != nil || ok {
		t.Fatalf("a? ⊆ ab ∪ a[: %v %v, want false", ok, err)
	}
	ok, counter, err := Includes(Of(pattern.Path, "/x/*"), Of(pattern.Path, "/x/a*"), Of(pattern.Path, "/x/*b"), Of(pattern.Path, "/x/?"))
	if err != nil || ok || counter != "/x/" {
		// "/x/" (an empty last segment) matches /x/* and none of the others.
		t.Fatalf("/x/* ⊆ /x/a* ∪ /x/*b ∪ /x/?: %v %q %v", ok, counter, err)
	}
	ok, counter, err = Includes(Of(pattern.Path, "/x/*"), Of(pattern.Path, "/x/a*"), Of(pattern.Path, "/x/*"))
	if err != nil || !ok {
		t.Fatalf("/x/* ⊆ /x/a* ∪ /x/*: %v %q %v", ok, counter, err)
	}
}

// TestSearchBound: a product larger than the bound is undecided, not
// answered.
func TestSearchBound(t *testing.T) {
	var ns []*NFA
	for _, p := range []string{"*a*b*", "*b*a*", "*a*a*", "*b*b*", "*ab*"} {
		ns = append(ns, Of(pattern.Action, p))
	}
	_, _, err := Query{Require: [][]*NFA{{ns[0]}}, Forbid: ns[1:], Budget: NewBudget(nil, 3)}.Solve()
	if err != ErrTooLarge {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

// FuzzOf checks automata against pattern.Match on fuzzed patterns and
// strings of every grammar.
func FuzzOf(f *testing.F) {
	f.Add(uint8(0), "a*", "ab")
	f.Add(uint8(2), "/a/**/b", "/a/x/b")
	f.Add(uint8(6), "git *", "git\x00push")
	f.Add(uint8(7), "*.a:1", "x.a:1")
	kinds := []pattern.Kind{pattern.Action, pattern.Principal, pattern.Path, pattern.Namespace, pattern.MCP, pattern.MCPResource, pattern.Command, pattern.Host, pattern.Env}
	f.Fuzz(func(t *testing.T, k uint8, p, s string) {
		kind := kinds[int(k)%len(kinds)]
		if len(p) > 40 || len(s) > 40 || pattern.Validate(kind, p) != nil {
			return
		}
		n := Of(kind, p)
		if got, want := n.Match(s), pattern.Match(kind, p, s); got != want {
			t.Fatalf("%s %q on %q: automaton %v, Match %v", kind, p, s, got, want)
		}
		if got, want := n.Fold().Match(s), pattern.Match(kind, p, strings.ToLower(s)); got != want {
			t.Fatalf("%s %q folded on %q: automaton %v, Match(ToLower) %v", kind, p, s, got, want)
		}
		if w, found, err := Witness(n); err == nil && found && !pattern.Match(kind, p, w) {
			t.Fatalf("%s %q: witness %q does not match", kind, p, w)
		}
	})
}

// TestAfterAndJoined checks the two encodings' constructions against their
// definitions by enumeration.
func TestAfterAndJoined(t *testing.T) {
	uni := universe("ab/", 5)
	for _, p := range []string{"/a/**", "/**", "/", "/a", "/*/b", "/a*/**/b"} {
		n := Of(pattern.Path, p)
		after := n.After('/')
		for _, s := range uni {
			if got, want := after.Match(s), pattern.Match(pattern.Path, p, "/"+s); got != want {
				t.Fatalf("%q after '/' on %q: %v, want %v", p, s, got, want)
			}
		}
		j := n.Joined('#', '/')
		for _, s := range universe("ab/#", 5) {
			x, y, ok := strings.Cut(s, "#")
			want := false
			if ok && !strings.Contains(y, "#") {
				if y == "" {
					want = pattern.Match(pattern.Path, p, x)
				} else {
					want = pattern.Match(pattern.Path, p, x+"/"+y)
				}
			}
			if got := j.Match(s); got != want {
				t.Fatalf("%q joined on %q: %v, want %v", p, s, got, want)
			}
		}
	}
}

// adversarial is a path pattern of the shapes that make products large:
// "**" segments and segments of several '*' between short literals
// ("/**/*ab*b*/**"), over the alphabet {a, b}.
func adversarial(r *rand.Rand) string {
	var segs []string
	for range 1 + r.IntN(3) {
		if r.IntN(3) == 0 {
			segs = append(segs, "**")
			continue
		}
		var g strings.Builder
		for range 1 + r.IntN(3) {
			g.WriteString(pick(r, "*", "a", "b", "ab", "?"))
		}
		segs = append(segs, g.String())
	}
	return "/" + strings.Join(segs, "/")
}

// TestUnionInclusionAgreesWithEnumeration: L(sub) ⊆ L(sup1) ∪ … ∪
// L(supN) for many adversarial patterns at once, the question whose
// product the antichain keeps small, checked against every string of a
// universe: a counterexample must be one and be shortest, and "included"
// must hold of every string. Each query has a budget; one that runs out
// is undecided (ErrTooLarge), and then its budget is spent, never more
// than a few units over.
func TestUnionInclusionAgreesWithEnumeration(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 17))
	uni := universe("ab/", 6)
	counts := map[string]int{}
	for range 300 {
		pats, fold, units := unionQuery(r)
		counts[checkUnionInclusion(t, uni, pats, fold, units)]++
	}
	t.Logf("answers: %v", counts)
	if counts["included"] == 0 || counts["counterexample"] == 0 || counts["undecided"] == 0 {
		t.Errorf("a class of answers was never exercised: %v", counts)
	}
}

// FuzzUnionInclusion is TestUnionInclusionAgreesWithEnumeration on
// queries drawn from fuzzed seeds.
func FuzzUnionInclusion(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(13), uint64(17))
	uni := universe("ab/", 5)
	f.Fuzz(func(t *testing.T, a, b uint64) {
		pats, fold, units := unionQuery(rand.New(rand.NewPCG(a, b)))
		checkUnionInclusion(t, uni, pats, fold, units)
	})
}

// unionQuery draws 2 to 10 adversarial patterns (the first the subset),
// whether the others are folded as denies are, and a budget.
func unionQuery(r *rand.Rand) ([]string, bool, int64) {
	var pats []string
	for n := 2 + r.IntN(9); len(pats) < n; {
		if p := adversarial(r); pattern.Validate(pattern.Path, p) == nil {
			pats = append(pats, p)
		}
	}
	return pats, r.IntN(2) == 0, int64(50 + r.IntN(2000))
}

// checkUnionInclusion decides L(pats[0]) ⊆ L(pats[1]) ∪ … with the
// budget given and checks the answer against every string of uni: a
// counterexample must be one and be shortest, "included" must hold of
// every string, and ErrTooLarge must mean the budget was spent. It
// returns which answer it was.
func checkUnionInclusion(t *testing.T, uni, pats []string, fold bool, units int64) string {
	t.Helper()
	sub, sups := Of(pattern.Path, pats[0]), make([]*NFA, len(pats)-1)
	for i, p := range pats[1:] {
		if sups[i] = Of(pattern.Path, p); fold {
			sups[i] = sups[i].Fold() // the alphabet has no capitals: the same language
		}
	}
	in := func(s string) bool { return pattern.Match(pattern.Path, pats[0], s) }
	out := func(s string) bool {
		return slices.ContainsFunc(pats[1:], func(p string) bool { return pattern.Match(pattern.Path, p, s) })
	}
	b := NewBudget(nil, units)
	w, found, err := Query{Require: [][]*NFA{{sub}}, Forbid: sups, Budget: b}.Solve()
	switch {
	case err == ErrTooLarge:
		if !b.Exhausted() {
			t.Fatalf("%q ⊆ ∪%q: ErrTooLarge with %d of %d units spent", pats[0], pats[1:], b.Spent(), units)
		}
		return "undecided"
	case err != nil:
		t.Fatal(err)
	case found:
		if !in(w) || out(w) {
			t.Fatalf("%q ⊆ ∪%q: counterexample %q is not one", pats[0], pats[1:], w)
		}
		for _, s := range uni {
			if len(s) < len(w) && in(s) && !out(s) {
				t.Fatalf("%q ⊆ ∪%q: counterexample %q, but %q is shorter", pats[0], pats[1:], w, s)
			}
		}
		return "counterexample"
	}
	for _, s := range uni {
		if in(s) && !out(s) {
			t.Fatalf("%q ⊆ ∪%q reported, but %q is only in the first", pats[0], pats[1:], s)
		}
	}
	return "included"
}

// TestBudgetBoundsBlowup: a deny of "/**/*x*y*/**" against the union of
// sixty others is the product that took gigabytes; the antichain
// decides it in a small part of the default budget, and a budget too
// small, or a context already cancelled, stops it.
func TestBudgetBoundsBlowup(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	word := func() string {
		b := make([]byte, 1+r.IntN(3))
		for i := range b {
			b[i] = byte('a' + r.IntN(16))
		}
		return string(b)
	}
	var ns []*NFA
	for range 60 {
		ns = append(ns, Of(pattern.Path, "/**/*"+word()+"*"+word()+"*/**").Fold())
	}
	worst := int64(0)
	for i := range ns {
		b := NewBudget(nil, DefaultBudget)
		if _, _, err := (Query{Require: [][]*NFA{{ns[i]}}, Forbid: append(slices.Clone(ns[:i]), ns[i+1:]...), Budget: b}).Solve(); err != nil {
			t.Fatalf("deny %d: %v", i, err)
		}
		worst = max(worst, b.Spent())
	}
	t.Logf("most units one question spent: %d of %d", worst, DefaultBudget)
	if worst > DefaultBudget/4 {
		t.Errorf("a question spent %d units, over a quarter of the default budget", worst)
	}
	q := Query{Require: [][]*NFA{{ns[0]}}, Forbid: ns[1:]}
	q.Budget = NewBudget(nil, 1000)
	if _, _, err := q.Solve(); err != ErrTooLarge {
		t.Errorf("1000 units: err = %v, want ErrTooLarge", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q.Budget = NewBudget(ctx, DefaultBudget)
	if _, _, err := q.Solve(); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v, want context.Canceled", err)
	}
}
