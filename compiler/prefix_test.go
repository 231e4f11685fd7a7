package compiler

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"

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
// OPA's regex.match) begins with its prefix and ends with its suffix, over random patterns of each
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
		pre, suf := regexPrefix(re.String()), regexSuffix(re.String())
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
				if !strings.HasSuffix(v, suf) {
					t.Fatalf("%s pattern %q (%s) matches %q, which does not end with its suffix %q", k, p, re, v, suf)
				}
			}
		}
	}
	if valid < 5000 || matched < 5000 {
		t.Fatalf("only %d valid patterns and %d matches: the generator is too weak", valid, matched)
	}
}

// TestMatchBodiesAgreeWithMatch: the rule bodies a pattern is lowered to
// (matchBodies: equality, startswith or endswith for the indexer, and a
// regular expression where those do not decide) hold, in the real OPA,
// exactly for the values pattern.Match says the pattern matches — for
// random patterns of every grammar, values made from them and values
// made from other patterns.
func TestMatchBodiesAgreeWithMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 17))
	kinds := []pattern.Kind{pattern.Path, pattern.Command, pattern.Host, pattern.Action, pattern.MCP, pattern.Namespace, pattern.Env, pattern.Principal, pattern.MCPResource}
	alpha := map[pattern.Kind][]string{
		pattern.Path: {"a", "b", "/", "*", "?", ".", "**/", "/**"}, pattern.Command: {"a", "b", " ", "*", "?", "-"},
		pattern.Host: {"a", "b", ".", "*.", ":443", ":80"}, pattern.Action: {"a", "b", "_", "*", "?", "."},
		pattern.MCP: {"a", "b", "/", "*", "?", "_"}, pattern.Namespace: {"a", "b", "/", "*", "?", "**/", "/**"},
		pattern.Env: {"A", "B", "_", "*", "?"}, pattern.Principal: {"a", "b", ":", "*", "?"},
		pattern.MCPResource: {"a", "b", "/", "*", "?", ":", "/**"},
	}
	fill := []string{"", "a", "b", "/", ".", ":", "x", "a/b", pattern.ArgvSep, "A", "é"}
	type tc struct {
		k    pattern.Kind
		p    string
		vals []string
	}
	var cases []tc
	for len(cases) < 500 {
		k := kinds[rng.IntN(len(kinds))]
		var pb strings.Builder
		for range 1 + rng.IntN(6) {
			pb.WriteString(alpha[k][rng.IntN(len(alpha[k]))])
		}
		p := pb.String()
		if k == pattern.Host && rng.IntN(8) == 0 {
			p = "*"
		}
		if pattern.Validate(k, p) != nil {
			continue
		}
		c := tc{k: k, p: p}
		for range 6 {
			var vb strings.Builder
			for _, r := range strings.ReplaceAll(p, " ", pattern.ArgvSep) {
				switch r {
				case '*', '?':
					vb.WriteString(fill[rng.IntN(len(fill))])
				default:
					vb.WriteRune(r)
				}
			}
			v := vb.String()
			if k == pattern.Host && rng.IntN(3) > 0 {
				v += []string{":443", ":80", ":x", ""}[rng.IntN(4)]
			}
			c.vals = append(c.vals, v, v+fill[rng.IntN(len(fill))], fill[rng.IntN(len(fill))]+v)
		}
		cases = append(cases, c)
	}
	var mod strings.Builder
	mod.WriteString("package t\n\nimport rego.v1\n\n")
	for i, c := range cases {
		rs := &ruleSet{name: "hits"}
		rs.add(fmt.Sprint(i), nil, present("input.v", matchBodies(c.k, c.p, "input.v", "input.h")))
		rs.write(&mod)
	}
	mod.WriteString(hostHelpers)
	// As the policy modules do: the value, the value followed by its
	// separator, the host without its port.
	mod.WriteString("res := [[i, j, h] | some i, c in input.cases; some j, v in c.vals; h := hits with input as {\"v\": v, \"vs\": concat(\"\", [v, c.sep]), \"h\": host_part(v)}]\n")
	var in []any
	for _, c := range cases {
		sep := "/"
		if c.k == pattern.Command {
			sep = pattern.ArgvSep
		}
		in = append(in, map[string]any{"vals": c.vals, "sep": sep})
	}
	ctx := context.Background()
	rs, err := rego.New(rego.Query("data.t.res"), rego.Module("t.rego", mod.String()), rego.Input(map[string]any{"cases": in})).Eval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	matched := 0
	for _, row := range rs[0].Expressions[0].Value.([]any) {
		r := row.([]any)
		i, _ := r[0].(json.Number).Int64()
		j, _ := r[1].(json.Number).Int64()
		c := cases[i]
		got := false
		for _, h := range r[2].([]any) {
			n, _ := h.(json.Number).Int64()
			got = got || n == i
		}
		want := pattern.Match(c.k, c.p, c.vals[j])
		if got != want {
			t.Errorf("%s pattern %q, value %q: the Rego bodies say %v, pattern.Match %v\n%q", c.k, c.p, c.vals[j], got, want, matchBodies(c.k, c.p, "input.v", "input.h"))
		}
		if want {
			matched++
		}
	}
	if matched < 1000 {
		t.Fatalf("only %d matching pairs: the generator is too weak", matched)
	}
}
