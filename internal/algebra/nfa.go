// Package algebra decides questions about polc's patterns exactly: every
// grammar of package pattern describes a regular language, which this
// package compiles to a nondeterministic automaton over runes (Of). On
// automata it decides emptiness, intersection and inclusion — with a
// witness string whenever the answer is "some string" — by exploring the
// product of the automata lazily (Search), so no solver is needed and the
// answers are exact, unlike pattern.Covers, which is a conservative proof.
//
// Alphabets are symbolic: an edge carries a class of runes, a finite set or
// the complement of one. Any two runes that no class on the way names are
// indistinguishable, so a search tries each rune a class names plus one
// representative of all the others, and the infinite alphabet of Unicode
// costs nothing.
//
// polc prove (docs/prove.md) builds its request encodings and questions on
// this package; its tests check every construction against pattern.Match
// by brute force over small alphabets.
package algebra

import (
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Class is a set of runes: the runes listed, or with Neg every rune but
// those. The list is sorted and holds no duplicates.
type Class struct {
	Neg   bool
	Runes []rune
}

// Any is the class of every rune.
var Any = Class{Neg: true}

// Lit is the class of the runes given.
func Lit(rs ...rune) Class {
	c := Class{Runes: slices.Clone(rs)}
	slices.Sort(c.Runes)
	c.Runes = slices.Compact(c.Runes)
	return c
}

// Not is the class of every rune but those given.
func Not(rs ...rune) Class {
	c := Lit(rs...)
	c.Neg = true
	return c
}

// Has reports whether r is in c.
func (c Class) Has(r rune) bool {
	_, found := slices.BinarySearch(c.Runes, r)
	return found != c.Neg
}

// empty reports whether c holds no rune.
func (c Class) empty() bool { return !c.Neg && len(c.Runes) == 0 }

// fold is {r : unicode.ToLower(r) ∈ c}: what a class matches when the
// input is lowercased before matching (strings.ToLower maps rune by rune
// with unicode.ToLower), as deny and approval patterns match.
func (c Class) fold() Class {
	var rs []rune
	for _, r := range c.Runes {
		if unicode.ToLower(r) == r {
			rs = append(rs, r)
		}
		rs = append(rs, upperOf()[r]...)
	}
	out := Lit(rs...)
	out.Neg = c.Neg
	return out
}

// NFA is a nondeterministic automaton with ε-moves over runes. The zero
// value accepts nothing. NFAs are immutable once built; every function
// here returns a new one.
type NFA struct {
	states []state
	start  int32
	// closures[i] is the ε-closure of state i, sorted, and live[i]
	// reports whether an accepting state is reachable from i: computed
	// once, when first needed (ready), since most automata built are only
	// parts of larger ones.
	closures [][]int32
	live     []bool
	once     sync.Once
}

// ready computes closures and liveness if not done yet.
func (n *NFA) ready() *NFA {
	n.once.Do(n.prepare)
	return n
}

type state struct {
	eps    []int32
	edges  []edge
	accept bool
}

type edge struct {
	c  Class
	to int32
}

// builder assembles an NFA.
type builder struct{ s []state }

func (b *builder) add(accept bool) int32 {
	b.s = append(b.s, state{accept: accept})
	return int32(len(b.s) - 1)
}

func (b *builder) edge(from, to int32, c Class) {
	if c.empty() {
		return
	}
	b.s[from].edges = append(b.s[from].edges, edge{c, to})
}

func (b *builder) eps(from, to int32) { b.s[from].eps = append(b.s[from].eps, to) }

// embed copies n's states into b and returns the offset of its states.
func (b *builder) embed(n *NFA) int32 {
	off := int32(len(b.s))
	for _, s := range n.states {
		t := state{accept: s.accept}
		for _, e := range s.eps {
			t.eps = append(t.eps, e+off)
		}
		for _, e := range s.edges {
			t.edges = append(t.edges, edge{e.c, e.to + off})
		}
		b.s = append(b.s, t)
	}
	return off
}

func (b *builder) done(start int32) *NFA {
	return &NFA{states: b.s, start: start}
}

// prepare computes ε-closures and liveness.
func (n *NFA) prepare() {
	k := len(n.states)
	n.closures = make([][]int32, k)
	stamp := make([]int32, k) // stamp[s] == i+1: s is in i's closure
	var stack []int32
	for i := range k {
		if len(n.states[i].eps) == 0 {
			n.closures[i] = []int32{int32(i)}
			continue
		}
		c := []int32{int32(i)}
		stamp[i] = int32(i) + 1
		stack = append(stack[:0], int32(i))
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, t := range n.states[s].eps {
				if stamp[t] != int32(i)+1 {
					stamp[t] = int32(i) + 1
					c = append(c, t)
					stack = append(stack, t)
				}
			}
		}
		slices.Sort(c)
		n.closures[i] = c
	}
	// Liveness: reverse reachability from accepting states.
	rev := make([][]int32, k)
	for i, s := range n.states {
		for _, t := range s.eps {
			rev[t] = append(rev[t], int32(i))
		}
		for _, e := range s.edges {
			rev[e.to] = append(rev[e.to], int32(i))
		}
	}
	n.live = make([]bool, k)
	stack = stack[:0]
	for i, s := range n.states {
		if s.accept {
			n.live[i] = true
			stack = append(stack, int32(i))
		}
	}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range rev[s] {
			if !n.live[p] {
				n.live[p] = true
				stack = append(stack, p)
			}
		}
	}
}

// Size is the number of states.
func (n *NFA) Size() int { return len(n.states) }

// Match reports whether n accepts s (a direct simulation, for tests and
// for checking witnesses).
func (n *NFA) Match(s string) bool {
	if len(n.states) == 0 {
		return false
	}
	n.ready()
	cur := slices.Clone(n.closures[n.start])
	for _, r := range s {
		var next []int32
		for _, q := range cur {
			for _, e := range n.states[q].edges {
				if e.c.Has(r) {
					next = append(next, n.closures[e.to]...)
				}
			}
		}
		slices.Sort(next)
		cur = slices.Compact(next)
		if len(cur) == 0 {
			return false
		}
	}
	return slices.ContainsFunc(cur, func(q int32) bool { return n.states[q].accept })
}

// Empty is the automaton of the empty language.
func Empty() *NFA { return (&builder{}).done(0) }

// Epsilon is the automaton of the empty string alone.
func Epsilon() *NFA {
	b := &builder{}
	return b.done(b.add(true))
}

// Literal is the automaton of s alone.
func Literal(s string) *NFA {
	b := &builder{}
	cur := b.add(false)
	start := cur
	for _, r := range s {
		next := b.add(false)
		b.edge(cur, next, Lit(r))
		cur = next
	}
	b.s[cur].accept = true
	return b.done(start)
}

// Star is the automaton of every string of runes in c (c*).
func Star(c Class) *NFA {
	b := &builder{}
	s := b.add(true)
	b.edge(s, s, c)
	return b.done(s)
}

// Plus is the automaton of every non-empty string of runes in c (c+).
func Plus(c Class) *NFA {
	b := &builder{}
	s, t := b.add(false), b.add(true)
	b.edge(s, t, c)
	b.edge(t, t, c)
	return b.done(s)
}

// One is the automaton of every one-rune string in c.
func One(c Class) *NFA {
	b := &builder{}
	s, t := b.add(false), b.add(true)
	b.edge(s, t, c)
	return b.done(s)
}

// Concat is the automaton of the concatenation of the languages.
func Concat(ns ...*NFA) *NFA {
	if len(ns) == 0 {
		return Epsilon()
	}
	b := &builder{}
	var start int32 = -1
	var prevFinal []int32
	for _, n := range ns {
		if len(n.states) == 0 {
			return Empty()
		}
		off := b.embed(n)
		if start < 0 {
			start = n.start + off
		}
		for _, f := range prevFinal {
			b.s[f].accept = false
			b.eps(f, n.start+off)
		}
		prevFinal = prevFinal[:0]
		for i, s := range n.states {
			if s.accept {
				prevFinal = append(prevFinal, int32(i)+off)
			}
		}
	}
	return b.done(start)
}

// Union is the automaton of the union of the languages.
func Union(ns ...*NFA) *NFA {
	b := &builder{}
	start := b.add(false)
	for _, n := range ns {
		if len(n.states) == 0 {
			continue
		}
		off := b.embed(n)
		b.eps(start, n.start+off)
	}
	return b.done(start)
}

// Opt is the automaton of L(n) ∪ {""}.
func Opt(n *NFA) *NFA { return Union(n, Epsilon()) }

// Repeat is the automaton of L(n)* (zero or more).
func Repeat(n *NFA) *NFA {
	b := &builder{}
	start := b.add(true)
	if len(n.states) > 0 {
		off := b.embed(n)
		b.eps(start, n.start+off)
		for i, s := range n.states {
			if s.accept {
				b.eps(int32(i)+off, start)
			}
		}
	}
	return b.done(start)
}

// Fold is {s : strings.ToLower(s) ∈ L(n)}: the strings n matches when
// they are lowercased first, as the engines match deny and approval
// patterns.
func (n *NFA) Fold() *NFA {
	b := &builder{}
	b.embed(n)
	for i := range b.s {
		for j := range b.s[i].edges {
			b.s[i].edges[j].c = b.s[i].edges[j].c.fold()
		}
	}
	return b.done(n.start)
}

// Map is {s : f(s) ∈ L(n)} for a rune-to-rune substitution f given as the
// classes each rune of n's alphabet stands for: every edge class c is
// replaced by sub(c). It is how an encoding renames a separator.
func (n *NFA) Map(sub func(Class) Class) *NFA {
	b := &builder{}
	b.embed(n)
	for i := range b.s {
		for j := range b.s[i].edges {
			b.s[i].edges[j].c = sub(b.s[i].edges[j].c)
		}
	}
	return b.done(n.start)
}

// upperOf maps a rune to every other rune that unicode.ToLower maps to it
// (A for a, K and the Kelvin sign for k, İ for i, …). Only runes in
// unicode.CaseRanges change under ToLower.
var upperOf = func() func() map[rune][]rune {
	var m map[rune][]rune
	return func() map[rune][]rune {
		if m != nil {
			return m
		}
		mm := map[rune][]rune{}
		for _, cr := range unicode.CaseRanges {
			for r := rune(cr.Lo); r <= rune(cr.Hi); r++ {
				if l := unicode.ToLower(r); l != r {
					mm[l] = append(mm[l], r)
				}
			}
		}
		m = mm
		return m
	}
}()

func init() { upperOf() } // built once, before any concurrent use

// validRune reports whether r can be part of request text: a Unicode
// scalar value other than NUL (requests hold no NUL, and invalid UTF-8 is
// refused before any engine).
func validRune(r rune) bool { return r != 0 && utf8.ValidRune(r) }

// After is the left quotient {s : string(r)+s ∈ L(n)}: the strings that
// complete n after the rune r.
func (n *NFA) After(r rune) *NFA {
	if len(n.states) == 0 {
		return Empty()
	}
	n.ready()
	b := &builder{}
	off := b.embed(n)
	start := b.add(false)
	for _, q := range n.closures[n.start] {
		for _, e := range n.states[q].edges {
			if e.c.Has(r) {
				b.eps(start, e.to+off)
			}
		}
	}
	return b.done(start)
}

// Joined is the language of the strings x+string(sep)+y, neither x nor y
// holding sep, such that x ∈ L(n) when y is empty and x+string(join)+y ∈
// L(n) otherwise: sep stands for join between two parts and for nothing at
// the end. polc prove encodes a path under a workspace as workspace, sep,
// relative path, where the path is the workspace itself when the relative
// path is empty.
func (n *NFA) Joined(sep, join rune) *NFA {
	if len(n.states) == 0 {
		return Empty()
	}
	n.ready()
	b := &builder{}
	first := b.embed(n)  // x: no state accepts, sep is no input
	second := b.embed(n) // y: n's own acceptance
	for i := range n.states {
		b.s[int32(i)+first].accept = false
	}
	for i := range b.s {
		for j := range b.s[i].edges {
			b.s[i].edges[j].c = b.s[i].edges[j].c.without(sep)
		}
	}
	for q := range n.states {
		// h is reached from q on sep: it accepts when q's closure does
		// (y empty), and continues in the second copy as q would after
		// join.
		accept := false
		for _, t := range n.closures[q] {
			accept = accept || n.states[t].accept
		}
		h := b.add(accept)
		b.edge(int32(q)+first, h, Lit(sep))
		for _, t := range n.closures[q] {
			for _, e := range n.states[t].edges {
				if !e.c.Has(join) {
					continue
				}
				for _, u := range n.closures[e.to] {
					for _, e2 := range n.states[u].edges {
						b.edge(h, e2.to+second, e2.c.without(sep))
					}
				}
			}
		}
	}
	return b.done(n.start + first)
}

// without is c minus the rune r.
func (c Class) without(r rune) Class {
	if c.Neg {
		return Not(append(slices.Clone(c.Runes), r)...)
	}
	return Lit(slices.DeleteFunc(slices.Clone(c.Runes), func(x rune) bool { return x == r })...)
}

// Builder assembles an automaton state by state, for encodings the
// combinators do not express.
type Builder struct{ b builder }

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder { return &Builder{} }

// State adds a state and returns its number.
func (b *Builder) State(accept bool) int32 { return b.b.add(accept) }

// Edge adds an edge on the runes of c.
func (b *Builder) Edge(from, to int32, c Class) { b.b.edge(from, to, c) }

// Eps adds an ε-move.
func (b *Builder) Eps(from, to int32) { b.b.eps(from, to) }

// Build returns the automaton starting at start; b must not be used
// after.
func (b *Builder) Build(start int32) *NFA { return b.b.done(start) }
