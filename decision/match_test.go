package decision

import (
	"math/rand/v2"
	"strings"
	"testing"

	"polc.dev/polc/internal/pattern"
)

// randPattern joins 1..n random pieces of alpha.
func randPattern(r *rand.Rand, alpha []string, n int) string {
	var b strings.Builder
	for range 1 + r.IntN(n) {
		b.WriteString(alpha[r.IntN(len(alpha))])
	}
	return b.String()
}

// TestMatchersAgreeWithPattern checks every fast matcher of the native
// evaluator (globSet, segTrie in each grammar's "**" mode, cmdTrie,
// hostSet) against pattern.Match, the reference, on random patterns and
// values (non-ASCII and U+FFFD included). It found the leading "**" of an
// MCP server matching several segments.
func TestMatchersAgreeWithPattern(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	segA := []string{"a", "b", "*", "?", "/", "**", "é", "\uFFFD"}
	vals := []string{}
	for range 400 {
		vals = append(vals, randPattern(r, []string{"a", "b", "/", "é", "\uFFFD", ""}, 6))
	}
	bad := 0
	report := func(k pattern.Kind, p, v string, want, got bool) {
		if bad < 30 {
			t.Errorf("%s %q on %q: ref=%v fast=%v", k, p, v, want, got)
		}
		bad++
	}
	for range 3000 {
		// single-segment globs (action/env)
		p := randPattern(r, []string{"a", "b", "*", "?", "é", "\uFFFD"}, 5)
		var g globSet
		g.add(p, 0)
		for _, v := range vals {
			if want, got := pattern.Match(pattern.Env, p, v), g.match(v, nil); want != got {
				report(pattern.Env, p, v, want, got)
			}
		}
		// namespaces / mcp via segTrie
		for _, k := range []pattern.Kind{pattern.Namespace, pattern.MCP, pattern.MCPResource, pattern.Path} {
			p := randPattern(r, segA, 6)
			if k == pattern.MCP || k == pattern.MCPResource {
				p = randPattern(r, []string{"a", "b", "*", "**"}, 2) + "/" + p
			}
			if pattern.Validate(k, p) != nil {
				continue
			}
			var tr segTrie
			switch k {
			case pattern.MCP:
				tr.dstarFrom = noDStar
			case pattern.MCPResource:
				tr.dstarFrom = 1
			}
			tr.add(p, 0)
			for _, v := range vals {
				if k == pattern.Path && (strings.HasPrefix(p, "/") != strings.HasPrefix(v, "/")) {
					continue
				}
				if k == pattern.MCP && strings.Count(v, "/") != 1 || k == pattern.MCPResource && !strings.Contains(v, "/") {
					continue
				}
				if want, got := pattern.Match(k, p, v), tr.match(v, nil); want != got {
					report(k, p, v, want, got)
				}
			}
		}
		// commands
		cp := randPattern(r, []string{"a", "b", "*", " ", " *", "?", "é"}, 5)
		if pattern.Validate(pattern.Command, cp) == nil {
			var ct cmdTrie
			ct.add(cp, 0)
			for _, v := range vals {
				argv := strings.Split(v, "/")
				if want, got := pattern.Match(pattern.Command, cp, strings.Join(argv, pattern.ArgvSep)), ct.match(argv, false, nil); want != got {
					report(pattern.Command, cp, v, want, got)
				}
			}
		}
	}
	hostVals := []string{"a.com:443", "b.a.com:443", "x.b.a.com:80", "a.com:80", "com:443", "[::1]:443", "ab.com:443", ".a.com:443", "a..a.com:443", "a.com", "é.a.com:443", "x.:443", "a.com.:443", ":443", "a:b.a.com:443"}
	for _, p := range []string{"*", "a.com", "*.a.com", "a.com:443", "*.a.com:80", "[::1]:443", "[::1]", "*.com", "com"} {
		var h hostSet
		h.add(p, 0)
		for _, v := range hostVals {
			if want, got := pattern.Match(pattern.Host, p, v), h.match(v, nil); want != got {
				report(pattern.Host, p, v, want, got)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d disagreements", bad)
	}
}
