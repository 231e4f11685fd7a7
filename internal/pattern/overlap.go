package pattern

import "strings"

// Overlaps reports whether some string matches both a and b, valid
// patterns of grammar k. It is exact for Namespace (the grammar whose
// entries the compiler layers: a narrower secret exposure inside a wider
// one); for every other grammar it answers true ("not proven disjoint"),
// which callers treat as an overlap.
func Overlaps(k Kind, a, b string) bool {
	if a == b {
		return true
	}
	if k != Namespace {
		return true
	}
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	memo := map[[2]int]bool{}
	var ovl func(i, j int) bool
	ovl = func(i, j int) bool {
		key := [2]int{i, j}
		if v, ok := memo[key]; ok {
			return v
		}
		var r bool
		switch {
		case i < len(as) && as[i] == "**":
			// zero segments, or one of b's (a "**" of b's included)
			r = ovl(i+1, j) || j < len(bs) && ovl(i, j+1)
		case j < len(bs) && bs[j] == "**":
			r = ovl(i, j+1) || i < len(as) && ovl(i+1, j)
		case i == len(as) || j == len(bs):
			r = i == len(as) && j == len(bs)
		default:
			r = overlapGlob([]rune(as[i]), []rune(bs[j])) && ovl(i+1, j+1)
		}
		memo[key] = r
		return r
	}
	return ovl(0, 0)
}

// overlapGlob reports whether some string matches both single-segment
// globs ('*' any run, '?' one character, anything else itself).
func overlapGlob(a, b []rune) bool {
	memo := map[[2]int]bool{}
	var ovl func(i, j int) bool
	ovl = func(i, j int) bool {
		key := [2]int{i, j}
		if v, ok := memo[key]; ok {
			return v
		}
		var r bool
		switch {
		case i < len(a) && a[i] == '*':
			// a's star matches nothing more, or takes b's next symbol
			// (a character, or part of what b's own star matches).
			r = ovl(i+1, j) || j < len(b) && ovl(i, j+1)
		case j < len(b) && b[j] == '*':
			r = ovl(i, j+1) || i < len(a) && ovl(i+1, j)
		case i == len(a) || j == len(b):
			r = i == len(a) && j == len(b)
		default:
			r = (a[i] == b[j] || a[i] == '?' || b[j] == '?') && ovl(i+1, j+1)
		}
		memo[key] = r
		return r
	}
	return ovl(0, 0)
}
