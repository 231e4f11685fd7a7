package pattern

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

func naiveMatch(k Kind, p, s string) bool {
	if k == Command {
		s = strings.ReplaceAll(s, " ", ArgvSep)
	}
	return Match(k, p, s)
}

func randPattern(r *rand.Rand, alphabet []string, n int) string {
	var b strings.Builder
	for range 1 + r.IntN(n) {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// strings of length <= n over alphabet
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

// TestCoversSound checks, against a naive matcher over every string of a
// bounded universe, that Covers never claims coverage that does not hold.
func TestCoversSound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		kind     Kind
		alphabet []string
		uni      []string
	}{
		{Action, []string{"a", "b", "*", "?"}, universe("ab", 5)},
		{Path, []string{"a", "b", "*", "?", "/", "/**"}, pathUniverse()},
		{Command, []string{"a", "b", "*", " ", " *"}, universe("ab ", 5)},
	}
	for _, c := range cases {
		proven := 0
		for range 4000 {
			p, ch := randPattern(r, c.alphabet, 5), randPattern(r, c.alphabet, 5)
			if c.kind == Path && (Validate(Path, p) != nil || Validate(Path, ch) != nil) {
				continue
			}
			if c.kind == Command && (Validate(Command, p) != nil || Validate(Command, ch) != nil) {
				continue
			}
			if !Covers(c.kind, p, ch) {
				continue
			}
			proven++
			for _, s := range c.uni {
				if naiveMatch(c.kind, ch, s) && !naiveMatch(c.kind, p, s) {
					t.Fatalf("%s: Covers(%q, %q) but %q matches only the child", c.kind, p, ch, s)
				}
			}
		}
		if proven < 100 {
			t.Errorf("%s: only %d coverage proofs exercised", c.kind, proven)
		}
	}
}

func pathUniverse() []string {
	var out []string
	segs := universe("ab", 2)[1:]
	var rec func(prefix string, depth int)
	rec = func(prefix string, depth int) {
		out = append(out, prefix)
		if depth == 3 {
			return
		}
		for _, s := range segs {
			rec(prefix+"/"+s, depth+1)
		}
	}
	rec("", 0)
	for _, s := range segs { // relative paths too
		out = append(out, s, s+"/a", s+"/b/a")
	}
	return out
}

func TestCoversExamples(t *testing.T) {
	cases := []struct {
		kind          Kind
		parent, child string
		want          bool
	}{
		{Path, "/repo/**", "/repo", true},
		{Path, "/repo/**", "/repo/a/b/*.go", true},
		// A relative pattern is under the workspace, an absolute one
		// anywhere: neither covers the other, "**" included.
		{Path, "**", "/**", false},
		{Path, "**", "/etc/passwd", false},
		{Path, "**/x", "/a/x", false},
		{Path, "/**", "**", false},
		{Path, "**", "src/**", true},
		{Path, "/repo/*/src/**", "/repo/**", false},
		{Path, "src/**", "/src/x", false},
		{Path, "/**", "/", true},
		{Path, "/a/**/b", "/a/b", true},
		{Path, "/a/*", "/a/**", false},
		{Command, "git *", "git", true},
		{Command, "git *", "git push --force *", true},
		{Command, "git push *", "git *", false},
		{Command, "git", "git *", false},
		{Command, "* status", "git status", true},
		{Host, "*.github.com", "api.github.com:443", true},
		{Host, "*.github.com", "github.com", false},
		{Host, "*.github.com:443", "*.api.github.com:443", true},
		{Host, "github.com:443", "github.com", false},
		{Host, "*", "anything.example:1", true},
		{MCP, "github/*", "github/create_issue", true},
		{MCP, "*/create_*", "github/delete_x", false},
		{MCPResource, "github/repo/**", "github/repo/a/b", true},
		{MCPResource, "github/repo/*", "github/repo/a/b", false},
		{Action, "read_*", "read_file", true},
		{Action, "read_?ile", "read_*", false},
		{Env, "GO*", "GO?", true},
	}
	for _, c := range cases {
		if err := Validate(c.kind, c.parent); err != nil {
			t.Fatalf("%s %q: %v", c.kind, c.parent, err)
		}
		if got := Covers(c.kind, c.parent, c.child); got != c.want {
			t.Errorf("Covers(%s, %q, %q) = %v, want %v", c.kind, c.parent, c.child, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []struct {
		kind Kind
		p    string
	}{
		{Path, "/a//b"}, {Path, "/a/../b"}, {Path, "/a/b**"}, {Path, "/a/"},
		{Host, "GitHub.com"}, {Host, "a.*.com"}, {Host, "a.com:99999"}, {Host, "a.com:"}, {Host, "[::1"},
		{Command, " git"}, {Command, "git  push"}, {Action, "a/b"}, {Action, "a:b"},
		{MCP, "github"}, {MCP, "a/b/c"}, {Env, "A-B"}, {Namespace, "a//b"}, {Principal, "a b"},
		{MCPResource, "github"}, {Path, ""},
	}
	for _, c := range bad {
		if Validate(c.kind, c.p) == nil {
			t.Errorf("Validate(%s, %q) = nil, want an error", c.kind, c.p)
		}
	}
	good := []struct {
		kind Kind
		p    string
	}{
		{Path, "/"}, {Path, "src/**"}, {Host, "[::1]:8080"}, {Host, "*.a.b:1"}, {Host, "10.0.0.1"},
		{Command, "git push *"}, {MCPResource, "fs/file:///tmp/**"}, {Namespace, "ci/*"},
	}
	for _, c := range good {
		if err := Validate(c.kind, c.p); err != nil {
			t.Errorf("Validate(%s, %q) = %v", c.kind, c.p, err)
		}
	}
	if _, _, _, err := ValidateQualified("deploy:prod"); err == nil {
		t.Error("a qualified pattern on an action without targets must be rejected")
	}
	if a, k, target, err := ValidateQualified("bash:git push *"); err != nil || a != "bash" || k != Command || target != "git push *" {
		t.Errorf("ValidateQualified(bash:git push *) = %q %q %q %v", a, k, target, err)
	}
}

// TestValidateText: every grammar refuses a pattern that is no text. The
// engines read one differently (OPA sees U+FFFD for invalid UTF-8; the
// native command matcher joins argv words with NUL, so "git\x00push"
// matched the argv [git push] there and not in OPA), and no request holds
// either. U+FFFD written as such is text.
func TestValidateText(t *testing.T) {
	base := map[Kind]string{Action: "bash", Path: "/ws/a", Command: "git push", Host: "a.com", MCP: "gh/read",
		MCPResource: "fs/a", Env: "HOME", Namespace: "ci/a", Principal: "agent:a"}
	for k, p := range base {
		if err := Validate(k, p); err != nil {
			t.Fatalf("Validate(%s, %q): %v", k, p, err)
		}
		for _, bad := range []string{"\x00", "\xff", "\xc3", "\xed\xa0\x80", "\xc0\x80"} {
			q := p[:2] + bad + p[2:]
			if err := Validate(k, q); err == nil || !strings.Contains(err.Error(), "NUL in pattern") && !strings.Contains(err.Error(), "UTF-8 in pattern") {
				t.Errorf("Validate(%s, %q) = %v, want a refusal as no text", k, q, err)
			}
		}
	}
	for k, p := range map[Kind]string{Path: "/ws/\ufffd/**", Command: "cat \ufffd *", MCPResource: "fs/\ufffd"} {
		if err := Validate(k, p); err != nil {
			t.Errorf("Validate(%s, %q): %v", k, p, err)
		}
	}
}

func TestMatchGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"subprocess.*", "subprocess.allow:git *", true},
		{"action.deny:*", "action.allow:bash", false},
		{"*", "", true},
		{"a?c", "abc", true},
	} {
		if got := MatchGlob(c.p, c.s); got != c.want {
			t.Errorf("MatchGlob(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

func FuzzCovers(f *testing.F) {
	f.Add("/a/**", "/a/b")
	f.Add("git *", "git push")
	f.Fuzz(func(t *testing.T, p, c string) {
		for _, k := range []Kind{Path, Command, Action} {
			if Validate(k, p) != nil || Validate(k, c) != nil || len(p) > 12 || len(c) > 12 {
				continue
			}
			if !Covers(k, p, c) {
				continue
			}
			// A child string built from the child pattern by replacing
			// wildcards must match the parent too.
			s := strings.NewReplacer("**", "x", "*", "", "?", "q").Replace(c)
			if naiveMatch(k, c, s) && !naiveMatch(k, p, s) {
				t.Fatalf("%s: Covers(%q, %q) but %q matches only the child", k, p, c, s)
			}
		}
	})
}

// TestRegexpMatchesReference checks the RE2 lowering against Match on random
// patterns of every grammar over a bounded universe of values.
func TestRegexpMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	type gen struct {
		kind     Kind
		alphabet []string
		values   []string
	}
	hostVals := []string{"a.com:443", "b.a.com:443", "x.b.a.com:80", "a.com:80", "com:443", "[::1]:443", "ab.com:443"}
	cmdVals := []string{}
	for _, v := range universe("ab ", 4) {
		if v != "" && !strings.HasPrefix(v, " ") && !strings.HasSuffix(v, " ") && !strings.Contains(v, "  ") {
			cmdVals = append(cmdVals, strings.ReplaceAll(v, " ", ArgvSep))
		}
	}
	gens := []gen{
		{Action, []string{"a", "b", "*", "?", "."}, universe("ab.\n", 4)},
		{Env, []string{"A", "*", "?"}, universe("A\n", 3)},
		{Principal, []string{"a", ":", "*", "?"}, universe("a:\n", 3)},
		{Path, []string{"a", "b", "*", "?", "/", "/**"}, pathUniverse()},
		{Command, []string{"a", "b", "*", " ", " *"}, cmdVals},
		{MCP, []string{"a", "b", "*", "?"}, []string{"a/b", "ab/ba", "a/", "b/aa", "aa/b"}},
		{MCPResource, []string{"a", "b", "*", "/", "/**"}, []string{"a/b", "a/b/c", "ab/b/a/b", "a/", "b/a//b", "a/ab/b"}},
		{Namespace, []string{"a", "b", "*", "/"}, []string{"a", "a/b", "ab/ba", "b/b/b"}},
	}
	for _, g := range gens {
		checked := 0
		for range 3000 {
			p := randPattern(r, g.alphabet, 6)
			if g.kind == MCP || g.kind == MCPResource {
				p = randPattern(r, []string{"a", "b", "*"}, 2) + "/" + p
			}
			if Validate(g.kind, p) != nil {
				continue
			}
			re := regexp.MustCompile(Regexp(g.kind, p))
			for _, v := range g.values {
				if g.kind == Path && strings.HasPrefix(p, "/") != strings.HasPrefix(v, "/") {
					continue // relative patterns match workspace-relative values only
				}
				if want, got := Match(g.kind, p, v), re.MatchString(v); want != got {
					t.Fatalf("%s %q on %q: Match=%v Regexp(%s)=%v", g.kind, p, v, want, re, got)
				}
			}
			checked++
		}
		if checked < 200 {
			t.Errorf("%s: only %d patterns checked", g.kind, checked)
		}
	}
	for _, p := range []string{"*", "a.com", "*.a.com", "a.com:443", "*.a.com:80", "[::1]:443", "[::1]"} {
		re := regexp.MustCompile(Regexp(Host, p))
		for _, v := range hostVals {
			if want, got := Match(Host, p, v), re.MatchString(v); want != got {
				t.Fatalf("host %q on %q: Match=%v Regexp=%v", p, v, want, got)
			}
		}
	}
}

// TestHostPatternURL: a URL where a host pattern is expected is named as
// a URL, with the host[:port] to write, not reported as the "port" after
// the scheme's colon.
func TestHostPatternURL(t *testing.T) {
	cases := []struct{ p, want string }{
		{"https://github.com", `a URL, not a host pattern: write host[:port], without scheme or path (here "github.com:443", or "github.com" for any port)`},
		{"http://X.com:8080/a", `a URL, not a host pattern: write host[:port], without scheme or path (here "x.com:8080", or "x.com" for any port)`},
		{"https://[::1]/", `a URL, not a host pattern: write host[:port], without scheme or path (here "[::1]:443", or "[::1]" for any port)`},
		{"ftp://files.example", `a URL, not a host pattern: write host[:port], without scheme or path (here "files.example")`},
		{"https://", `a URL, not a host pattern: write host[:port], without scheme or path`},
	}
	for _, c := range cases {
		err := Validate(Host, c.p)
		if err == nil || err.Error() != c.want {
			t.Errorf("Validate(Host, %q) = %v\nwant %s", c.p, err, c.want)
		}
	}
	_, _, _, err := ValidateQualified("http_get:https://x.com/")
	want := `target of http_get: a URL, not a host pattern: write host[:port], without scheme or path (here "x.com:443", or "x.com" for any port)`
	if err == nil || err.Error() != want {
		t.Errorf("ValidateQualified(http_get:https://x.com/) = %v\nwant %s", err, want)
	}
}

// TestActionPatternQualified: a qualified action where only action ids
// are allowed says so, instead of rejecting the ':' as a character.
func TestActionPatternQualified(t *testing.T) {
	err := Validate(Action, "http_get:https://x.com/")
	if err == nil || !strings.Contains(err.Error(), "qualified actions (http_get:<target>) are for deny and approval patterns") {
		t.Errorf("Validate(Action, http_get:https://x.com/) = %v", err)
	}
}
