package pattern

import "strings"

// Covers reports whether parent provably matches every string child matches,
// both patterns being valid in grammar k. It never reports true without a
// proof; false may mean "not provable".
//
// Both patterns are compared as written: callers that match
// case-insensitively (deny and approval patterns) lowercase both first.
func Covers(k Kind, parent, child string) bool {
	if parent == child {
		return true
	}
	switch k {
	case Path:
		// A relative pattern is under the workspace, an absolute one
		// anywhere: neither covers the other (splitPath's leading ""
		// segment alone would let a relative "**" consume it).
		if strings.HasPrefix(parent, "/") != strings.HasPrefix(child, "/") {
			return false
		}
		return coverSegments(splitPath(parent), splitPath(child), true)
	case Command:
		return coverTokens(strings.Split(parent, " "), strings.Split(child, " "))
	case Host:
		return coverHost(parent, child)
	case MCPResource:
		ps, pr, _ := strings.Cut(parent, "/")
		cs, cr, _ := strings.Cut(child, "/")
		return coverGlob(ps, cs) && coverSegments(strings.Split(pr, "/"), strings.Split(cr, "/"), true)
	case MCP:
		return coverSegments(strings.Split(parent, "/"), strings.Split(child, "/"), false)
	case Namespace:
		return coverSegments(strings.Split(parent, "/"), strings.Split(child, "/"), true)
	default: // Action, Env, Principal: one segment.
		return coverGlob(parent, child)
	}
}

// splitPath keeps absoluteness as a leading "" segment so that an absolute
// pattern never covers a relative one or the reverse.
func splitPath(p string) []string {
	if p == "/" {
		return []string{""}
	}
	return strings.Split(p, "/")
}

// coverSegments matches child segments against parent segments; with
// doubleStar, a parent "**" consumes zero or more whole child segments and a
// child "**" can only be consumed by a parent "**".
func coverSegments(parent, child []string, doubleStar bool) bool {
	if len(parent) == 0 {
		return len(child) == 0
	}
	if doubleStar && parent[0] == "**" {
		for i := 0; i <= len(child); i++ {
			if coverSegments(parent[1:], child[i:], doubleStar) {
				return true
			}
		}
		return false
	}
	if len(child) == 0 || (doubleStar && child[0] == "**") {
		return false
	}
	return coverGlob(parent[0], child[0]) && coverSegments(parent[1:], child[1:], doubleStar)
}

// coverTokens handles command patterns: a trailing parent "*" token covers
// any remaining child tokens (including a child trailing "*"); a child
// trailing "*" needs a parent trailing "*".
func coverTokens(parent, child []string) bool {
	if len(parent) > 0 && parent[len(parent)-1] == "*" {
		head := parent[:len(parent)-1]
		if len(child) < len(head) {
			return false
		}
		for i, p := range head {
			if i == len(child)-1 && child[i] == "*" {
				return false // child's trailing "*" may be zero tokens
			}
			if !coverGlob(p, child[i]) {
				return false
			}
		}
		return true
	}
	if len(child) != len(parent) || (len(child) > 0 && child[len(child)-1] == "*") {
		return false
	}
	for i := range parent {
		if !coverGlob(parent[i], child[i]) {
			return false
		}
	}
	return true
}

// coverGlob decides L(child) ⊆ L(parent) for single-segment globs by matching
// the child's symbols (literals, '?', '*') against the parent: a parent '*'
// consumes any run of child symbols, a parent '?' one literal or '?', a
// parent literal only the same literal. Sound, and complete for the patterns
// authors write.
func coverGlob(parent, child string) bool {
	p, c := []rune(parent), []rune(child)
	// Iterative glob matching with backtracking on the last parent '*'.
	pi, ci, star, mark := 0, 0, -1, 0
	for ci < len(c) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ci
			pi++
		case pi < len(p) && (p[pi] == c[ci] && c[ci] != '*' || p[pi] == '?' && c[ci] != '*'):
			pi++
			ci++
		case star >= 0:
			pi = star + 1
			mark++
			ci = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

func coverHost(parent, child string) bool {
	if parent == "*" {
		return true
	}
	if child == "*" {
		return false
	}
	ph, pp, _ := SplitHostPort(parent)
	ch, cp, _ := SplitHostPort(child)
	if pp != "" && pp != cp {
		return false
	}
	if ph == ch {
		return true
	}
	if suffix, ok := strings.CutPrefix(ph, "*."); ok {
		// *.s covers a.s, a.b.s and *.x.s, but not s itself or *.s's peers.
		name := strings.TrimPrefix(ch, "*.")
		return strings.HasSuffix(name, "."+suffix)
	}
	return false
}
