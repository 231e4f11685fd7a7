package algebra

import (
	"encoding/binary"
	"slices"
	"strconv"
)

// Query asks for a string that, for every group of Require, some automaton
// of the group accepts, and that no automaton of Forbid accepts. Every
// Boolean question about patterns this package answers is one: emptiness
// (one group, one automaton), intersection (one group per automaton),
// inclusion (the subset required, the superset forbidden), and a
// decision's "some grant matches, no deny does" (docs/prove.md).
type Query struct {
	Require [][]*NFA
	Forbid  []*NFA
	// Budget bounds the work of the search (nil: a budget of
	// DefaultBudget units for this query alone); when it is spent, Solve
	// fails with ErrTooLarge rather than answer without having looked
	// everywhere. Queries that share a Budget share its units.
	Budget *Budget
}

// prefer are the runes a witness uses, in this order, for a position where
// any rune no class names will do.
const prefer = "xyzabcdefghijklmnopqrstuvw0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_-.+"

// Solve returns a shortest string the query asks for (the first by the
// runes tried: runes the automata name, in order, then one rune for all
// the others), or found=false when there is none. The exploration is a
// breadth-first search of the product of the automata, built lazily from
// the start, that stops at the first witness. It drops a combination of
// states as soon as it can lead nowhere: when a group of Require has no
// automaton left that can still accept, or when an automaton of Forbid
// accepts every continuation. And it keeps only an antichain of the
// combinations (De Wulf, Doyen, Henzinger and Raskin's inclusion check):
// a combination whose required states are those of one already reached,
// and whose forbidding states include that one's, is dropped — every
// continuation that would make a witness of it makes one of the other,
// no longer — so that the strings that only advance forbidding automata
// (the runes of a hundred denies the required pattern does not name)
// are not each explored.
func (q Query) Solve() (witness string, found bool, err error) {
	b := q.Budget
	if b == nil {
		b = NewBudget(nil, DefaultBudget)
	}
	if err := b.spend(1); err != nil {
		return "", false, err
	}
	// Required automata get the low indexes, so that a set's entries for
	// them come first and a step can stop before the forbidden ones. An
	// automaton both required and forbidden gets an index for each role:
	// the antichain needs every index to be one or the other.
	var autos []*NFA
	index := map[*NFA]int{}
	for _, ns := range q.Require {
		for _, n := range ns {
			if _, ok := index[n]; !ok {
				index[n] = len(autos)
				autos = append(autos, n.ready())
			}
		}
	}
	nreq := len(autos)
	groups := make([][]int, len(q.Require))
	for g, ns := range q.Require {
		for _, n := range ns {
			groups[g] = append(groups[g], index[n])
		}
		if len(groups[g]) == 0 {
			return "", false, nil // a group no automaton can satisfy
		}
	}
	findex := map[*NFA]int{}
	for _, n := range q.Forbid {
		if _, ok := findex[n]; !ok {
			findex[n] = len(autos)
			autos = append(autos, n.ready())
		}
	}
	forbid := make([]bool, len(autos))
	for a := nreq; a < len(autos); a++ {
		forbid[a] = true
	}
	groupOf := make([][]int, len(autos))
	for g, as := range groups {
		for _, a := range as {
			groupOf[a] = append(groupOf[a], g)
		}
	}
	type node struct {
		set    []uint64 // sorted (automaton<<32 | state), live states only
		parent int
		r      rune
	}
	add := func(set []uint64, a int, s int32) []uint64 {
		n := autos[a]
		for _, t := range n.closures[s] {
			if n.live[t] {
				set = append(set, uint64(a)<<32|uint64(uint32(t)))
			}
		}
		return set
	}
	var start []uint64
	for a, n := range autos {
		if len(n.states) > 0 {
			start = add(start, a, n.start)
		}
	}
	slices.Sort(start)
	start = slices.Compact(start)

	inGroup := make([]bool, len(groups))
	accepts := func(set []uint64) bool {
		clear(inGroup)
		for _, v := range set {
			a, s := int(v>>32), int32(uint32(v))
			if !autos[a].states[s].accept {
				continue
			}
			if forbid[a] {
				return false
			}
			for _, g := range groupOf[a] {
				inGroup[g] = true
			}
		}
		return !slices.Contains(inGroup, false)
	}
	// possible: every group has a live automaton among the entries.
	possible := func(set []uint64) bool {
		clear(inGroup)
		for _, v := range set {
			a := int(v >> 32)
			if a >= nreq {
				break
			}
			for _, g := range groupOf[a] {
				inGroup[g] = true
			}
		}
		return !slices.Contains(inGroup, false)
	}
	universal := map[string]bool{}
	// doomed: an automaton of Forbid accepts every continuation.
	doomed := func(set []uint64) (bool, error) {
		for i := 0; i < len(set); {
			a := int(set[i] >> 32)
			j := i
			acc := false
			for j < len(set) && int(set[j]>>32) == a {
				acc = acc || autos[a].states[int32(uint32(set[j]))].accept
				j++
			}
			if forbid[a] && acc {
				k := setKey(set[i:j])
				u, ok := universal[k]
				if !ok {
					states := make([]int32, j-i)
					for x := i; x < j; x++ {
						states[x-i] = int32(uint32(set[x]))
					}
					var err error
					if u, err = autos[a].universalFrom(states, b); err != nil {
						return false, err
					}
					universal[k] = u
				}
				if u {
					return true, nil
				}
			}
			i = j
		}
		return false, nil
	}
	// chains[key of the required entries] is the antichain of the
	// forbidding entries reached with them: no member includes another.
	chains := map[string][][]uint64{}
	// subsumed reports whether a combination is no better than one
	// reached already, and else records it.
	subsumed := func(set []uint64, req int) (bool, error) {
		k := setKey(set[:req])
		f := set[req:]
		chain := chains[k]
		kept := chain[:0]
		drop := false
		for i, g := range chain {
			if err := b.spend(int64(min(len(g), len(f))) + 1); err != nil {
				return false, err
			}
			if subset(g, f) {
				drop = true
				kept = append(kept, chain[i:]...)
				break
			}
			if !subset(f, g) {
				kept = append(kept, g)
			}
		}
		clear(chain[len(kept):]) // members dropped for f: let them go
		if !drop {
			kept = append(kept, f)
		}
		chains[k] = kept
		return drop, nil
	}
	if _, err := subsumed(start, reqLen(start, nreq)); err != nil {
		return "", false, err
	}

	nodes := []node{{set: start, parent: -1}}
	var runes []rune
	for i := 0; i < len(nodes); i++ {
		cur := nodes[i].set
		if !possible(cur) {
			continue
		}
		if d, err := doomed(cur); err != nil {
			return "", false, err
		} else if d {
			continue
		}
		if accepts(cur) {
			var rs []rune
			for j := i; nodes[j].parent >= 0; j = nodes[j].parent {
				rs = append(rs, nodes[j].r)
			}
			slices.Reverse(rs)
			return string(rs), true, nil
		}
		// The runes the classes of cur's edges name; every other rune
		// moves cur to one set, which other stands for.
		runes = runes[:0]
		for _, v := range cur {
			a, s := int(v>>32), int32(uint32(v))
			for _, e := range autos[a].states[s].edges {
				runes = append(runes, e.c.Runes...)
			}
		}
		slices.Sort(runes)
		runes = slices.Compact(runes)
		other := representative(runes)
		try := append(runes, other)
		for _, r := range try {
			if !validRune(r) && r != 0 {
				continue
			}
			var next []uint64
			k := 0
			for ; k < len(cur) && int(cur[k]>>32) < nreq; k++ {
				a, s := int(cur[k]>>32), int32(uint32(cur[k]))
				for _, e := range autos[a].states[s].edges {
					if e.c.Has(r) {
						next = add(next, a, e.to)
					}
				}
			}
			slices.Sort(next)
			next = slices.Compact(next)
			if err := b.spend(int64(len(next)) + 1); err != nil {
				return "", false, err
			}
			if !possible(next) {
				continue
			}
			req := len(next)
			for ; k < len(cur); k++ {
				a, s := int(cur[k]>>32), int32(uint32(cur[k]))
				for _, e := range autos[a].states[s].edges {
					if e.c.Has(r) {
						next = add(next, a, e.to)
					}
				}
			}
			slices.Sort(next[req:])
			next = slices.Compact(next)
			if err := b.spend(int64(len(next) - req)); err != nil {
				return "", false, err
			}
			if drop, err := subsumed(next, req); err != nil {
				return "", false, err
			} else if drop {
				continue
			}
			if err := b.spend(nodeUnits); err != nil {
				return "", false, err
			}
			nodes = append(nodes, node{set: next, parent: i, r: r})
		}
		nodes[i].set = nil // its successors are made; the chains keep what is compared
	}
	return "", false, nil
}

// nodeUnits is what keeping a combination costs beyond its entries: its
// node and its place in a chain, in units of an entry's 8 bytes.
const nodeUnits = 8

// reqLen is the number of entries of a sorted set that belong to
// required automata (indexes below nreq).
func reqLen(set []uint64, nreq int) int {
	n, _ := slices.BinarySearch(set, uint64(nreq)<<32)
	return n
}

// subset reports whether the sorted set a is included in the sorted set b.
func subset(a, b []uint64) bool {
	if len(a) > len(b) {
		return false
	}
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j == len(b) || b[j] != x {
			return false
		}
		j++
	}
	return true
}

func setKey(set []uint64) string {
	b := make([]byte, 8*len(set))
	for i, v := range set {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return string(b)
}

// universalBound bounds the subsets universalFrom explores.
const universalBound = 64

// universalFrom reports whether n accepts every string from the states
// given (an ε-closed set): every subset reachable from them accepts. Past
// universalBound subsets it answers false, which only costs pruning. Its
// work is charged to b.
func (n *NFA) universalFrom(states []int32, b *Budget) (bool, error) {
	seen := map[string]bool{}
	k := func(ss []int32) string {
		b := make([]byte, 4*len(ss))
		for i, s := range ss {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(s))
		}
		return string(b)
	}
	queue := [][]int32{states}
	seen[k(states)] = true
	var runes []rune
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if !slices.ContainsFunc(cur, func(s int32) bool { return n.states[s].accept }) {
			return false, nil
		}
		runes = runes[:0]
		for _, s := range cur {
			for _, e := range n.states[s].edges {
				runes = append(runes, e.c.Runes...)
			}
		}
		slices.Sort(runes)
		runes = slices.Compact(runes)
		for _, r := range append(runes, representative(runes)) {
			var next []int32
			for _, s := range cur {
				for _, e := range n.states[s].edges {
					if e.c.Has(r) {
						next = append(next, n.closures[e.to]...)
					}
				}
			}
			slices.Sort(next)
			next = slices.Compact(next)
			if err := b.spend(int64(len(next)) + 1); err != nil {
				return false, err
			}
			kk := k(next)
			if seen[kk] {
				continue
			}
			if len(seen) >= universalBound {
				return false, nil
			}
			seen[kk] = true
			queue = append(queue, next)
		}
	}
	return true, nil
}

// representative is a rune outside named (sorted), preferring readable
// ones: it stands for every rune no class of the current states names.
func representative(named []rune) rune {
	for _, r := range prefer {
		if _, found := slices.BinarySearch(named, r); !found {
			return r
		}
	}
	for r := rune(0xA1); ; r++ {
		if _, found := slices.BinarySearch(named, r); !found && validRune(r) {
			return r
		}
	}
}

// Witness returns a shortest string of L(n), or false when L(n) is empty.
func Witness(n *NFA) (string, bool, error) {
	return Query{Require: [][]*NFA{{n}}}.Solve()
}

// IsEmpty reports whether L(n) is empty.
func IsEmpty(n *NFA) (bool, error) {
	_, found, err := Witness(n)
	return !found, err
}

// Intersect returns a shortest string in every language given, or false
// when their intersection is empty.
func Intersect(ns ...*NFA) (string, bool, error) {
	req := make([][]*NFA, len(ns))
	for i, n := range ns {
		req[i] = []*NFA{n}
	}
	return Query{Require: req}.Solve()
}

// Includes reports whether L(sub) ⊆ L(sup1) ∪ L(sup2) ∪ …; when it does
// not, counter is a shortest string of sub that no sup accepts.
func Includes(sub *NFA, sups ...*NFA) (included bool, counter string, err error) {
	w, found, err := Query{Require: [][]*NFA{{sub}}, Forbid: sups}.Solve()
	return !found, w, err
}

// Equal reports whether L(a) = L(b); when not, counter is a shortest
// string in one and not the other.
func Equal(a, b *NFA) (bool, string, error) {
	ok, w, err := Includes(a, b)
	if err != nil || !ok {
		return false, w, err
	}
	ok, w, err = Includes(b, a)
	return ok, w, err
}

// String describes the automaton's size, for messages and tests.
func (n *NFA) String() string { return "NFA(" + strconv.Itoa(len(n.states)) + " states)" }
