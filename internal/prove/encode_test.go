package prove

import (
	"math/rand/v2"
	"strings"
	"testing"

	"polc.dev/polc/internal/pattern"
)

// encodePath is the encoding of a (workspace, path) pair (see pathMatcher),
// and false for a pair the encoding leaves out: a path outside the
// workspace whose lowercase is under the workspace's lowercase.
func encodePath(ws, path string) (string, bool) {
	switch {
	case ws == "/":
		return string(rootWS) + path[1:], true
	case path == ws:
		return string(underWS) + ws + string(sep), true
	case strings.HasPrefix(path, ws+"/"):
		return string(underWS) + ws + string(sep) + path[len(ws)+1:], true
	case within(strings.ToLower(ws), strings.ToLower(path)):
		return "", false
	}
	return string(outsideWS) + path, true
}

// engineMatch is how the engines match a path pattern (decision's
// pathSet): absolute patterns against the path, relative ones against the
// path relative to the workspace; folded, both lowercased first.
func engineMatch(p, ws, path string, fold bool) bool {
	if fold {
		ws, path = strings.ToLower(ws), strings.ToLower(path)
	}
	if strings.HasPrefix(p, "/") {
		return pattern.Match(pattern.Path, p, path)
	}
	switch {
	case path == ws:
		return pattern.Match(pattern.Path, p, "")
	case ws == "/":
		return pattern.Match(pattern.Path, p, path[1:])
	case strings.HasPrefix(path, ws+"/"):
		return pattern.Match(pattern.Path, p, path[len(ws)+1:])
	}
	return false
}

// TestPathEncoding checks pathMatcher against the engines' path matching
// on every pair of a small universe of clean workspaces and paths, case
// variants included.
func TestPathEncoding(t *testing.T) {
	var paths []string
	var walk func(prefix string, depth int)
	walk = func(prefix string, depth int) {
		if depth == 0 {
			return
		}
		for _, s := range []string{"a", "B", "b"} {
			p := prefix + "/" + s
			paths = append(paths, p)
			walk(p, depth-1)
		}
	}
	walk("", 3)
	paths = append(paths, "/")
	r := rand.New(rand.NewPCG(4, 4))
	segs := []string{"a", "b", "B", "*", "**", "?"}
	for range 300 {
		var ps []string
		for range 1 + r.IntN(3) {
			ps = append(ps, segs[r.IntN(len(segs))])
		}
		p := strings.Join(ps, "/")
		if r.IntN(2) == 0 {
			p = "/" + p
		}
		if pattern.Validate(pattern.Path, p) != nil {
			continue
		}
		for _, fold := range []bool{false, true} {
			pp := p
			if fold {
				pp = strings.ToLower(p)
			}
			n := pathMatcher(pp, fold)
			for _, ws := range paths {
				for _, path := range paths {
					enc, ok := encodePath(ws, path)
					if !ok {
						continue
					}
					if got, want := n.Match(enc), engineMatch(pp, ws, path, fold); got != want {
						t.Fatalf("pattern %q (fold %v), workspace %q, path %q: encoded %v, engine %v", pp, fold, ws, path, got, want)
					}
				}
			}
		}
	}
}

// TestPathDomain: the encoded domain holds exactly the encodings of clean
// pairs.
func TestPathDomain(t *testing.T) {
	req, forbid := pathDomain(true)
	in := func(s string) bool {
		if !req.Match(s) {
			return false
		}
		for _, f := range forbid {
			if f.Match(s) {
				return false
			}
		}
		return true
	}
	for s, want := range map[string]bool{
		"O/a/b": true, "O/": true, "O/a/": false, "O/a//b": false, "O/a/./b": false, "O/..": false, "O/a/..x": true,
		"R": true, "Ra/b": true, "R/a": false, "R.": false,
		"U/w\x00": true, "U/w\x00a": true, "U/\x00a": false, "U/w/..\x00a": false, "U/w\x00..": false, "U/w\x00a/": false,
	} {
		if got := in(s); got != want {
			t.Errorf("%q in the path domain: %v, want %v", s, got, want)
		}
	}
}
