package executor_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"polc.dev/polc/decision"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// encodingNow is the normalizer's clock in these tests.
func encodingNow() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }

// fffdPolicy allows `cat �` (U+FFFD, written as such) and nothing else
// that cat may take: the pattern invalid UTF-8 turned into when OPA read
// it.
func fffdPolicy(t *testing.T) (*snapshot.Snapshot, *regoeval.Engine) {
	t.Helper()
	res := compiletest.Decls(t, map[string]any{"p": map[string]any{
		"version": "1", "principals": []string{"*"}, "tenants": []string{"*"},
		"actions":    map[string]any{"allow": []string{"bash", "mcp"}},
		"subprocess": map[string]any{"mode": "allowlist", "shell": "allow", "allow": []string{"cat \ufffd"}},
		"filesystem": map[string]any{"read": []string{"/**"}},
		"mcp":        map[string]any{"servers": []any{map[string]any{"server": "fs", "tools": []string{"read"}, "resources": []string{"\ufffd/**"}}}},
	}})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	eng := compiletest.OPA(t, res.Snapshots)
	return res.Snapshots[0], eng
}

// TestInvalidUTF8NeverReachesAnEngine: the native engine matched the bytes
// of `cat $'\xff'` (the byte 0xff, as bash passes it) and denied, while OPA,
// reading its input as JSON, saw U+FFFD and allowed under `cat �`. Every
// string that is not text, given by the caller or decoded by the
// normalizer, is now refused at normalization with invalid_encoding; a
// U+FFFD written as such is text, and both engines agree on it.
func TestInvalidUTF8NeverReachesAnEngine(t *testing.T) {
	snap, eng := fffdPolicy(t)
	pol, err := decision.Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	n := &normalize.Normalizer{Now: encodingNow}
	request := func(action string, args map[string]any) normalize.ActionRequest {
		return normalize.ActionRequest{Action: action, Arguments: args, Principal: "agent:a", Tenant: "t", Workspace: "/ws"}
	}
	bash := func(cmd string) normalize.ActionRequest { return request("bash", map[string]any{"command": cmd}) }
	refused := []struct {
		name string
		req  normalize.ActionRequest
	}{
		{"hex escape", bash(`cat $'\xff'`)},
		{"octal escape", bash(`cat $'\377'`)},
		{"truncated sequence", bash(`cat $'\xc3'`)},
		{"encoded surrogate", bash(`cat $'\xed\xa0\x80'`)},
		{"overlong NUL", bash(`cat $'\xc0\x80'`)},
		{"above U+10FFFF", bash(`cat $'\xf4\x90\x80\x80'`)},
		{"second command", bash(`true; cat $'\xff'`)},
		{"redirection target", bash(`cat < $'\xff'`)},
		{"raw byte in the command", bash("cat \xff")},
		{"raw byte in a path", request("read_file", map[string]any{"path": "/ws/\xff"})},
		{"raw byte in content", request("write_file", map[string]any{"path": "/ws/a", "content": "\xff"})},
		{"raw byte in a member name", request("write_file", map[string]any{"path": "/ws/a", "content": "x", "\xff": "y"})},
		{"raw byte in an MCP tool", request("mcp", map[string]any{"server": "fs", "tool": "read\xff"})},
		{"percent-encoded byte in a resource", request("mcp", map[string]any{"server": "fs", "tool": "read", "resource": "repo/%ff"})},
		{"twice percent-encoded byte", request("mcp", map[string]any{"server": "fs", "tool": "read", "resource": "repo/%25ff"})},
		{"percent-encoded NUL", request("mcp", map[string]any{"server": "fs", "tool": "read", "resource": "repo/a%00.txt"})},
		{"principal", normalize.ActionRequest{Action: "bash", Arguments: map[string]any{"command": "true"}, Principal: "agent:\xff", Tenant: "t", Workspace: "/ws"}},
		{"principal with NUL", normalize.ActionRequest{Action: "bash", Arguments: map[string]any{"command": "true"}, Principal: "agent:a\x00", Tenant: "t", Workspace: "/ws"}},
		{"tenant", normalize.ActionRequest{Action: "bash", Arguments: map[string]any{"command": "true"}, Principal: "agent:a", Tenant: "t\xfe", Workspace: "/ws"}},
	}
	for _, c := range refused {
		got, nerr := n.Normalize(c.req)
		if nerr == nil || nerr.Reason != normalize.ReasonInvalidEncoding {
			t.Errorf("%s: got %v (%+v), want %s", c.name, nerr, got, normalize.ReasonInvalidEncoding)
		}
	}
	// What the engines decide for text, U+FFFD included: the same.
	for _, c := range []struct {
		req         normalize.ActionRequest
		disposition string
	}{
		{bash("cat \ufffd"), decision.Allow},
		{bash(`cat $'\xef\xbf\xbd'`), decision.Allow}, // U+FFFD's own bytes
		{bash(`cat $'\xc3'$'\xa9'`), decision.Deny},   // é, across two words' escapes
		{bash("cat x"), decision.Deny},
		{request("mcp", map[string]any{"server": "fs", "tool": "read", "resource": "\ufffd/a"}), decision.Allow},
		{request("mcp", map[string]any{"server": "fs", "tool": "read", "resource": "\ufffd/%C3%A9"}), decision.Allow},
	} {
		req, nerr := n.Normalize(c.req)
		if nerr != nil {
			t.Fatalf("%v: %v", c.req.Arguments, nerr)
		}
		nat, _ := pol.Evaluate(req)
		opa, err := eng.Evaluate(context.Background(), snap.Name, req)
		if err != nil {
			t.Fatal(err)
		}
		if nat.Disposition != c.disposition || opa.Disposition != c.disposition {
			t.Errorf("%v: native %s %v, OPA %s %v; want %s from both", c.req.Arguments, nat.Disposition, nat.Reasons, opa.Disposition, opa.Reasons, c.disposition)
		}
	}
}

// TestShellEscapesDecodeAsBashDoes: the words refused above are refused
// because bash itself passes bytes that are not UTF-8 for them (checked
// against the real bash), and the words it passes as UTF-8 are accepted
// with exactly bash's bytes.
func TestShellEscapesDecodeAsBashDoes(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	n := &normalize.Normalizer{Now: encodingNow}
	for _, word := range []string{`$'\xff'`, `$'\377'`, `$'\xc3'`, `$'\xed\xa0\x80'`, `$'\xc3'$'\xa9'`, `$'\xef\xbf\xbd'`, `$'a\x00b'`, `x$'\xe2\x82'$'\xac'`} {
		out, err := exec.Command(bash, "-c", "printf %s "+word).Output()
		if err != nil {
			t.Fatalf("%s: %v", word, err)
		}
		req, nerr := n.Normalize(normalize.ActionRequest{Action: "bash", Arguments: map[string]any{"command": "cat " + word}, Principal: "a", Tenant: "t", Workspace: "/ws"})
		switch {
		case !utf8.Valid(out):
			if nerr == nil || nerr.Reason != normalize.ReasonInvalidEncoding {
				t.Errorf("%s: bash passes %q, the normalizer gives %v %v", word, out, req, nerr)
			}
		case nerr != nil:
			t.Errorf("%s: bash passes %q, the normalizer refuses: %v", word, out, nerr)
		case len(req.Commands) != 1 || len(req.Commands[0]) != 2 || req.Commands[0][1] != string(out):
			t.Errorf("%s: bash passes %q, the normalizer judges %q", word, out, req.Commands)
		}
	}
}

// TestNormalizedTextRefused: a normalized request holding a string that is
// not text (built by a Go caller, or decoded from JSON with \u0000) is
// refused by Validate and never reaches OPA; the native engine's callers
// get it only through the normalizer or ParseNormalized.
func TestNormalizedTextRefused(t *testing.T) {
	_, eng := fffdPolicy(t)
	base := func() *normalize.Normalized {
		return &normalize.Normalized{Principal: "agent:a", Tenant: "t", Action: "bash", Workspace: "/ws", Time: "2026-11-30T12:00:00.000000Z",
			Paths: []normalize.PathAccess{}, Commands: [][]string{{"cat", "x"}}, Hosts: []string{}, Env: []string{}, Secrets: []string{}}
	}
	res, badRes := "r", "\xff"
	for name, mutate := range map[string]func(*normalize.Normalized){
		"argv invalid": func(n *normalize.Normalized) { n.Commands[0][1] = "\xff" },
		"argv NUL":     func(n *normalize.Normalized) { n.Commands[0][1] = "a\x00b" },
		"path":         func(n *normalize.Normalized) { n.Paths = []normalize.PathAccess{{Path: "/ws/\xff", Access: "read"}} },
		"path NUL":     func(n *normalize.Normalized) { n.Paths = []normalize.PathAccess{{Path: "/ws/a\x00", Access: "read"}} },
		"host":         func(n *normalize.Normalized) { n.Hosts = []string{"a\xff:443"} },
		"env":          func(n *normalize.Normalized) { n.Env = []string{"A\x00"} },
		"secret":       func(n *normalize.Normalized) { n.Secrets = []string{"ci/\xc3"} },
		"principal":    func(n *normalize.Normalized) { n.Principal = "\xff" },
		"mcp resource": func(n *normalize.Normalized) { n.MCP = &normalize.MCPTarget{Server: "s", Tool: "t", Resource: &badRes} },
		"mcp server NUL": func(n *normalize.Normalized) {
			n.MCP = &normalize.MCPTarget{Server: "s\x00", Tool: "t", Resource: &res}
		},
		"encoded surrogate": func(n *normalize.Normalized) { n.Commands[0][0] = "\xed\xa0\x80" },
	} {
		n := base()
		mutate(n)
		if err := n.Validate(); err == nil || !strings.Contains(err.Error(), "at byte") {
			t.Errorf("%s: Validate: %v", name, err)
		}
		if err := n.CheckText(); err == nil {
			t.Errorf("%s: CheckText accepts", name)
		}
		if d, err := eng.Evaluate(context.Background(), "p", n); err == nil {
			t.Errorf("%s: OPA evaluated it: %+v", name, d)
		}
	}
	n := base()
	n.Commands[0][1] = "\ufffd"
	if err := n.Validate(); err != nil {
		t.Fatalf("U+FFFD as written: %v", err)
	}
}

// TestExecuteRefusesInvalidUTF8Arguments: a Go caller's argument that is not
// UTF-8 was copied through encoding/json, which made it U+FFFD: the policy
// judged, and the callable received, another value than the one asked.
// Stage 2 now denies it, before any callable runs.
func TestExecuteRefusesInvalidUTF8Arguments(t *testing.T) {
	r := newRig(t, nil, nil)
	ec := r.ctx(executor.ProfileMinimal, nil)
	for i, args := range []map[string]any{
		{"text": "a\xffb"},
		{"text": "\xed\xa0\x80"},
		{"\xff": "x"},
	} {
		before := r.calls["nothing"].Load()
		out := r.exec.Execute(context.Background(), req(string(rune('a'+i)), "nothing", args), ec)
		if out.Kind() != executor.KindDenied || out.Base().ReasonCode != normalize.ReasonInvalidEncoding {
			t.Errorf("%q: got %s %q, want denied %s; trail %+v", args, out.Kind(), out.Base().ReasonCode, normalize.ReasonInvalidEncoding, out.Base().Trail)
		}
		if r.calls["nothing"].Load() != before {
			t.Errorf("%q: the callable ran", args)
		}
	}
	// A principal the context authenticated is judged as text too.
	bad := ec
	bad.Principal.ID = "a\xff"
	if out := r.exec.Execute(context.Background(), req("p", "nothing", nil), bad); out.Base().ReasonCode != normalize.ReasonInvalidEncoding {
		t.Errorf("principal: got %s %q", out.Kind(), out.Base().ReasonCode)
	}
	// U+FFFD as written is an argument like any other.
	if out := r.exec.Execute(context.Background(), req("ok", "nothing", map[string]any{"text": "\ufffd"}), ec); out.Kind() != executor.KindSucceeded {
		t.Errorf("U+FFFD: got %s %q", out.Kind(), out.Base().ReasonCode)
	}
	// A transformer returning bytes that are not UTF-8 fails its stage.
	tr := newRig(t, nil, func(c *executor.Config) {
		c.Transformers = []executor.Transformer{{Name: "bytes", Transform: func(_ context.Context, _ string, args map[string]any) (map[string]any, error) {
			args["text"] = "\xff"
			return args, nil
		}}}
	})
	if out := tr.exec.Execute(context.Background(), req("t", "nothing", map[string]any{"text": "x"}), tr.ctx(executor.ProfileMinimal, nil)); out.Kind() != executor.KindDenied || tr.calls["nothing"].Load() != 0 {
		t.Errorf("transformer: got %s %q", out.Kind(), out.Base().ReasonCode)
	}
}
