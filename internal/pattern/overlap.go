package pattern

import "strings"

// Overlaps reports whether some string matches both a and b, valid
// patterns of grammar k. It is exact for Namespace (the grammar whose
// entries the compiler layers: a narrower secret exposure inside a wider
// one) and for Action (one glob: the compiler asks whether two approval
// rules can match one action); for every other grammar it answers true
// ("not proven disjoint"), which callers treat as an overlap.
func Overlaps(k Kind, a, b string) bool {
	if a == b {
		return true
	}
	if k == Action {
		return overlapSeq([]rune(a), []rune(b), isStar, sameRune)
	}
	if k != Namespace {
		return true
	}
	// Segments: "**" is zero or more whole segments; two other segments
	// overlap when some text matches both globs.
	return overlapSeq(strings.Split(a, "/"), strings.Split(b, "/"),
		func(s string) bool { return s == "**" },
		func(x, y string) bool { return overlapSeq([]rune(x), []rune(y), isStar, sameRune) })
}

func isStar(r rune) bool { return r == '*' }

// sameRune: '?' is any one character, anything else itself.
func sameRune(x, y rune) bool { return x == y || x == '?' || y == '?' }

// overlapSeq reports whether some sequence matches both a and b, whose
// elements are a star (any run of items, star reports which) or an item
// pattern that one item matches when one reports it for the two
// patterns.
func overlapSeq[T any](a, b []T, star func(T) bool, one func(T, T) bool) bool {
	memo := map[[2]int]bool{}
	var ovl func(i, j int) bool
	ovl = func(i, j int) bool {
		key := [2]int{i, j}
		if v, ok := memo[key]; ok {
			return v
		}
		var r bool
		switch {
		case i < len(a) && star(a[i]):
			// a's star matches nothing more, or takes b's next element
			// (an item, or part of what b's own star matches).
			r = ovl(i+1, j) || j < len(b) && ovl(i, j+1)
		case j < len(b) && star(b[j]):
			r = ovl(i, j+1) || i < len(a) && ovl(i+1, j)
		case i == len(a) || j == len(b):
			r = i == len(a) && j == len(b)
		default:
			r = one(a[i], b[j]) && ovl(i+1, j+1)
		}
		memo[key] = r
		return r
	}
	return ovl(0, 0)
}
