package decision_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// The differential's text checks. Both engines must see the same bytes,
// so what is not text -- a byte sequence that is not UTF-8 (a stray
// continuation byte, a truncated, overlong or surrogate sequence, one
// above U+10FFFF) or a NUL -- never reaches either: a request holding it
// is refused at normalization (invalid_encoding), a normalized request by
// Validate and by regoeval, a declaration by the compiler at its position
// and a snapshot pattern by snapshot.Validate. The generator's vocabulary
// holds U+FFFD written as such, which is text and on which the engines
// must agree like on any other.

// badTexts are the sequences the generator puts into strings.
var badTexts = []string{"\xff", "\x80", "\xc3", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x00"}

// insertBad returns s with bad inserted at a character boundary.
func (g gen) insertBad(s, bad string) string {
	var at []int
	for i := range len(s) + 1 {
		if i == len(s) || utf8.RuneStart(s[i]) {
			at = append(at, i)
		}
	}
	i := at[g.R.IntN(len(at))]
	return s[:i] + bad + s[i:]
}

// corrupt returns a copy of req with one of its strings made no text.
func (g gen) corrupt(req *normalize.Normalized) *normalize.Normalized {
	c := *req
	c.Paths = append([]normalize.PathAccess(nil), req.Paths...)
	c.Commands = nil
	for _, argv := range req.Commands {
		c.Commands = append(c.Commands, append([]string(nil), argv...))
	}
	c.Hosts = append([]string(nil), req.Hosts...)
	c.Env = append([]string(nil), req.Env...)
	c.Secrets = append([]string(nil), req.Secrets...)
	fields := []*string{&c.Principal, &c.Tenant, &c.Action, &c.Workspace, &c.Time}
	for i := range c.Paths {
		fields = append(fields, &c.Paths[i].Path)
	}
	for _, argv := range c.Commands {
		for j := range argv {
			fields = append(fields, &argv[j])
		}
	}
	for _, l := range [][]string{c.Hosts, c.Env, c.Secrets} {
		for i := range l {
			fields = append(fields, &l[i])
		}
	}
	if req.MCP != nil {
		m := *req.MCP
		if m.Resource != nil {
			r := *m.Resource
			m.Resource = &r
			fields = append(fields, m.Resource)
		}
		c.MCP = &m
		fields = append(fields, &m.Server, &m.Tool)
	}
	f := fields[g.R.IntN(len(fields))]
	*f = g.insertBad(*f, badTexts[g.R.IntN(len(badTexts))])
	return &c
}

// holdsFFFD reports whether a command word or a path of req holds U+FFFD.
func holdsFFFD(req *normalize.Normalized) bool {
	for _, argv := range req.Commands {
		for _, w := range argv {
			if strings.ContainsRune(w, utf8.RuneError) {
				return true
			}
		}
	}
	for _, p := range req.Paths {
		if strings.ContainsRune(p.Path, utf8.RuneError) {
			return true
		}
	}
	return false
}

// ansiC quotes word as bash's $'…' with every byte outside a small safe
// set written \xHH: bash decodes it to exactly those bytes.
func ansiC(word string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(word); i++ {
		c := word[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("./_-", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// corruptAction returns an action request that carries something that is
// no text to the normalizer: as raw bytes in an argument or an identity
// member, or encoded so that only decoding makes it (a $'\xHH' escape in a
// command, a %HH escape in an MCP resource), with the words of argv.
func (g gen) corruptAction(argv []string) (normalize.ActionRequest, string) {
	bad := badTexts[g.R.IntN(len(badTexts))]
	req := normalize.ActionRequest{Action: "bash", Principal: "agent:a", Tenant: "t1", Workspace: "/ws"}
	words := append([]string(nil), argv...)
	switch g.R.IntN(5) {
	case 0:
		if bad == "\x00" {
			bad = "\xff" // bash ends a $'…' word at a NUL: nothing to refuse
		}
		i := g.R.IntN(len(words))
		words[i] = g.insertBad(words[i], bad)
		for k, w := range words {
			words[k] = ansiC(w)
		}
		req.Arguments = map[string]any{"command": strings.Join(words, " ")}
		return req, "a $'…' escape in a command"
	case 1:
		for k, w := range words {
			words[k] = ansiC(w)
		}
		req.Arguments = map[string]any{"command": g.insertBad(strings.Join(words, " "), bad)}
		return req, "raw bytes in a command"
	case 2:
		req.Action = "read_file"
		req.Arguments = map[string]any{"path": g.insertBad("/ws/"+strings.Join(words, "/"), bad)}
		return req, "raw bytes in a path"
	case 3:
		var enc strings.Builder
		for i := 0; i < len(bad); i++ {
			fmt.Fprintf(&enc, "%%%02X", bad[i])
		}
		req.Action = "mcp:fs/read"
		// No '/' from the words: a "." segment is refused as such.
		req.Arguments = map[string]any{"resource": "repo/w" + strings.ReplaceAll(strings.Join(words, "-"), "/", "_") + enc.String()}
		return req, "a percent-encoded MCP resource"
	}
	req.Principal = g.insertBad(req.Principal, bad)
	req.Arguments = map[string]any{"command": "true"}
	return req, "raw bytes in the principal"
}

// checkTextRefused checks that req, a valid generated request, and what
// corrupt and corruptAction make of it are treated as described above.
func checkTextRefused(t *testing.T, g gen, eng *regoeval.Engine, policy string, req *normalize.Normalized) {
	t.Helper()
	if err := req.CheckText(); err != nil {
		t.Fatalf("a generated request is no text: %v", err)
	}
	bad := g.corrupt(req)
	if err := bad.Validate(); err == nil || bad.CheckText() == nil {
		rb, _ := json.Marshal(bad)
		t.Fatalf("a request that is no text validates (%v): %q", err, rb)
	}
	if d, err := eng.Evaluate(context.Background(), policy, bad); err == nil {
		t.Fatalf("OPA evaluated a request that is no text: %+v", d)
	}
	argv := g.argv()
	if len(req.Commands) > 0 {
		argv = req.Commands[0]
	}
	ar, how := g.corruptAction(argv)
	n := normalize.Normalizer{Now: difftextNow}
	if got, nerr := n.Normalize(ar); nerr == nil || nerr.Reason != normalize.ReasonInvalidEncoding {
		t.Fatalf("%s: %q normalizes to %+v, %v; want %s", how, ar.Arguments, got, nerr, normalize.ReasonInvalidEncoding)
	}
}

// checkPatternTextRefused writes decl, one generated policy, with one of
// its strings made no text -- raw bytes in the file, or an escaped NUL --
// and checks that the compiler refuses it with invalid_encoding at a line
// and column and compiles nothing.
func checkPatternTextRefused(t *testing.T, g gen, decl map[string]any) {
	t.Helper()
	var cp map[string]any
	b, _ := json.Marshal(decl)
	json.Unmarshal(b, &cp)
	var lists [][]any
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		case []any:
			if len(v) > 0 {
				if _, ok := v[0].(string); ok {
					lists = append(lists, v)
				}
			}
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(cp)
	const marker = "MARKER-NO-TEXT"
	l := lists[g.R.IntN(len(lists))]
	i := g.R.IntN(len(l))
	l[i] = g.insertBad(l[i].(string), marker)
	src, _ := json.Marshal(map[string]any{"policies": map[string]any{"p": cp}})
	bad := badTexts[g.R.IntN(len(badTexts))]
	if g.Chance(0.3) {
		bad = `\u0000` // an escape: the file is text, the string is not
	}
	src = bytes.Replace(src, []byte(marker), []byte(bad), 1)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.json"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.json"})
	for _, d := range res.Diagnostics {
		if d.Code == diag.CodeInvalidEncoding && d.Pos.Line > 0 && d.Pos.Col > 0 {
			if len(res.Snapshots) > 0 {
				t.Fatalf("%q: refused (%v) and compiled", src, d)
			}
			return
		}
	}
	t.Fatalf("%q: no positioned invalid_encoding: %v", src, res.Diagnostics)
}

// checkSnapshotTextRefused checks that s, with one of its path or command
// patterns made no text, is no valid snapshot: a hand-made one (--parent,
// eval) would otherwise reach the engines, which read a NUL in a command
// pattern differently.
func checkSnapshotTextRefused(t *testing.T, g gen, s *snapshot.Snapshot) {
	t.Helper()
	raw, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c, err := snapshot.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var patterns []*string
	for _, r := range c.CompiledRules {
		switch r := r.(type) {
		case *snapshot.SubprocessRule:
			patterns = append(patterns, &r.Pattern)
		case *snapshot.FilesystemRule:
			patterns = append(patterns, &r.Pattern)
		}
	}
	if len(patterns) == 0 {
		return
	}
	p := patterns[g.R.IntN(len(patterns))]
	*p = g.insertBad(*p, badTexts[g.R.IntN(len(badTexts))])
	// The rule's id no longer matches its pattern either: the pattern is
	// checked first, and the error must say that it is no text.
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "UTF-8 in pattern") && !strings.Contains(err.Error(), "NUL in pattern") {
		t.Fatalf("a snapshot with pattern %q: %v", *p, err)
	}
}

// difftextNow is the normalizer's clock in these tests.
func difftextNow() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
