package compiler

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"polc.dev/polc/internal/pattern"
)

// TestRegexPrefix: the prefix the bundle tests before regex.match is read
// off each grammar's expression as expected (non-trivial where the
// pattern starts with literal text, empty where it cannot).
func TestRegexPrefix(t *testing.T) {
	for _, tc := range []struct {
		k       pattern.Kind
		p, want string
	}{
		{pattern.Path, "/repo/mod1/**", "/repo/mod1"},
		{pattern.Path, "/a/b*/c", "/a/b"},
		{pattern.Path, "src/*.go", "src/"},
		{pattern.Path, "**/.env", ""},
		{pattern.Command, "git push *", "git" + pattern.ArgvSep + "push"},
		{pattern.Command, "*", ""},
		{pattern.Host, "*.example.com", ""},
		{pattern.Host, "example.com", "example.com:"},
		{pattern.Action, "tool?x", "tool"},
		{pattern.MCP, "github/op*", "github/op"},
		{pattern.Namespace, "a/**/b", "a"},
	} {
		if got := regexPrefix(pattern.Regexp(tc.k, tc.p)); got != tc.want {
			t.Errorf("regexPrefix(%s %q: %s) = %q, want %q", tc.k, tc.p, pattern.Regexp(tc.k, tc.p), got, tc.want)
		}
	}
	for re, want := range map[string]string{`abc`: "", `(?i)^abc`: "", `^(?:ab|ac)`: "a", `(`: "", `^a*b`: ""} {
		if got := regexPrefix(re); got != want {
			t.Errorf("regexPrefix(%q) = %q, want %q", re, got, want)
		}
	}
}

// TestRegexPrefixSound: every value an expression matches (by RE2, as
// OPA's regex.match) begins with its prefix, over random patterns of each
// grammar and values made from them by filling their wildcards.
func TestRegexPrefixSound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	kinds := []pattern.Kind{pattern.Path, pattern.Command, pattern.Host, pattern.Action, pattern.MCP, pattern.Namespace, pattern.Env, pattern.Principal, pattern.MCPResource}
	alpha := map[pattern.Kind]string{
		pattern.Path: "ab/*?.", pattern.Command: "ab *?-", pattern.Host: "ab.*:1", pattern.Action: "ab_*?.",
		pattern.MCP: "ab/*?_", pattern.Namespace: "ab/*?", pattern.Env: "AB_*?", pattern.Principal: "ab:*?", pattern.MCPResource: "ab/*?:",
	}
	fill := "ab/. :1x" + pattern.ArgvSep
	matched, valid := 0, 0
	for range 60000 {
		k := kinds[rng.IntN(len(kinds))]
		var pb strings.Builder
		if k == pattern.Path && rng.IntN(2) == 0 {
			pb.WriteByte('/')
		}
		for range 1 + rng.IntN(7) {
			pb.WriteByte(alpha[k][rng.IntN(len(alpha[k]))])
		}
		p := pb.String()
		if rng.IntN(4) == 0 {
			p = strings.Replace(p, "*", "**", 1)
		}
		if pattern.Validate(k, p) != nil {
			continue
		}
		valid++
		re := regexp.MustCompile(pattern.Regexp(k, p))
		pre := regexPrefix(re.String())
		for range 8 {
			var vb strings.Builder
			for _, c := range strings.ReplaceAll(p, " ", pattern.ArgvSep) {
				switch c {
				case '*':
					for range rng.IntN(4) {
						vb.WriteByte(fill[rng.IntN(len(fill))])
					}
				case '?':
					vb.WriteByte(fill[rng.IntN(len(fill))])
				default:
					vb.WriteRune(c)
				}
			}
			if k == pattern.Host && !strings.Contains(p, ":") {
				vb.WriteString(":443")
			}
			v := vb.String()
			if re.MatchString(v) {
				matched++
				if !strings.HasPrefix(v, pre) {
					t.Fatalf("%s pattern %q (%s) matches %q, which does not begin with its prefix %q", k, p, re, v, pre)
				}
			}
		}
	}
	if valid < 5000 || matched < 5000 {
		t.Fatalf("only %d valid patterns and %d matches: the generator is too weak", valid, matched)
	}
}
