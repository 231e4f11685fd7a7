package harness_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/harness"
	"polc.dev/polc/internal/diag"
)

// TestGeminiReadRootsAreNotWriteRoots: Gemini has no read-only workspace
// directory, so a read root passed with --include-directories is writable
// by write_file and replace. fs.write_roots/v1 must then not be enforced.
func TestGeminiReadRootsAreNotWriteRoots(t *testing.T) {
	plan, rep := compileFor(t, `package h
harnesses: h: {
	provider: %q
	workspace: root: "ws"
	tools: allow: ["read_file", "write_file", "edit_file"]
	filesystem: read: ["reference"]
}
`, "gemini-cli", false)
	ro := ""
	for i, a := range plan.Argv {
		if a == "--include-directories" && strings.HasSuffix(plan.Argv[i+1], "/reference") {
			ro = plan.Argv[i+1]
		}
	}
	if ro == "" {
		t.Skipf("the read root is not a workspace directory any more: %q", plan.Argv)
	}
	if r, _ := rep.Lookup(harness.CapFSWriteRoots); r.Status == harness.Enforced {
		t.Errorf("fs.write_roots/v1 enforced (%s), but the read root %s is a Gemini workspace directory that write_file may write", r.Reason, ro)
	}
	// Without a write tool the read root stays unwritten.
	_, rep = compileFor(t, `package h
harnesses: h: {
	provider: %q
	workspace: root: "ws"
	tools: allow: ["read_file"]
	filesystem: read: ["reference"]
}
`, "gemini-cli", false)
	if r, _ := rep.Lookup(harness.CapFSWriteRoots); r.Status != harness.Enforced {
		t.Errorf("fs.write_roots/v1 = %s without any write tool, want enforced", r.Status)
	}
}

// TestRequiredButNotDeclaredIsNotEnforced: a required capability whose
// section the spec leaves open (network on, reads not confined, no turn
// limit) has nothing in the plan that enforces it; it must not be
// reported enforced, so the spawn is refused.
func TestRequiredButNotDeclaredIsNotEnforced(t *testing.T) {
	cases := []struct{ cap, body string }{
		{"net.egress/v1", `network: mode: "on"`},
		{"net.egress/v1", `network: {mode: "allowlist", allow: ["example.com"]}`},
		{"net.allowlist/v1", `network: mode: "on"`},
		{"fs.read_roots/v1", ``},
		{"resources.turns/v1", ``},
		{"resources.budget/v1", ``},
	}
	for _, provider := range harness.Providers {
		for _, c := range cases {
			src := fmt.Sprintf(`package h
harnesses: h: {
	provider: %%q
	workspace: root: "ws"
	tools: allow: ["read_file", "web_fetch"]
	%s
	required_capabilities: [%q]
}
`, c.body, c.cap)
			_, rep := compileFor(t, src, provider, false)
			r, ok := rep.Lookup(c.cap)
			if !ok {
				t.Fatalf("%s: %s not in the report", provider, c.cap)
			}
			if r.Status == harness.Enforced {
				t.Errorf("%s: required %s with %q reported enforced: %s", provider, c.cap, c.body, r.Reason)
			}
			if !slices.ContainsFunc(rep.Blocking(), func(b harness.CapabilityResult) bool { return b.Capability == c.cap }) {
				t.Errorf("%s: required %s with %q does not block the spawn", provider, c.cap, c.body)
			}
		}
	}
}

// TestModelIsNeverAnOption: a model name that starts with '-' would be read
// by a provider's option parser as an option of its own (yargs does not
// take "-m --include-directories=/" as a value); it is an error, at the
// model's position.
func TestModelIsNeverAnOption(t *testing.T) {
	dir := t.TempDir()
	src := `package h
harnesses: h: {
	provider: "gemini-cli"
	model:    "--include-directories=/"
	workspace: root: "ws"
}
`
	if err := os.WriteFile(filepath.Join(dir, "h.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	d, diags := compiler.Load(compiler.Config{Dir: dir}, []string{"h.cue"})
	if diags.HasErrors() {
		t.Fatalf("load: %v", diags)
	}
	s, diags := harness.FromDeclaration(d.LookupHarness("h"), dir)
	if !diags.HasErrors() {
		t.Fatalf("model %q accepted; argv would be %q", s.Model, func() []string {
			p, _, _ := harness.Compile(s, fakeProbe("gemini-cli", false))
			return p.Argv
		}())
	}
	found := false
	for _, x := range diags {
		if x.Code == diag.CodeInvalidValue && x.Pos.Line == 4 {
			found = true
		}
	}
	if !found {
		t.Errorf("want an invalid_value error at line 4, got %v", diags)
	}
}

// TestSpawnOversizedLine: a stdout line beyond the parser's limit is
// reported as an error observation and parsing goes on; it neither stops
// the parse silently nor leaves the provider blocked on a full pipe until
// the wall clock kills it.
func TestSpawnOversizedLine(t *testing.T) {
	dir, script := fakeProvider(t, `echo '{"type":"thread.started","thread_id":"t1"}'
head -c 17000000 /dev/zero | tr '\0' 'x'
echo
echo '{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"after"}}'
echo '{"type":"turn.completed"}'
`)
	plan, rep := fakeCodexPlan(t, dir, script, "")
	if b := rep.Blocking(); len(b) > 0 {
		t.Fatalf("blocking: %v", b)
	}
	start := time.Now()
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stopped != "" || time.Since(start) > 15*time.Second {
		t.Errorf("stopped %q after %v: the provider was blocked on its stdout", res.Stopped, time.Since(start))
	}
	var kinds []string
	sawTooLong, sawAfter := false, false
	for _, o := range res.Observations {
		kinds = append(kinds, string(o.Kind)+"@"+fmt.Sprint(o.Line))
		if o.Kind == harness.ObsError && o.Line == 2 {
			sawTooLong = true
		}
		if o.Kind == harness.ObsMessage && o.Text == "after" && o.Line == 3 {
			sawAfter = true
		}
	}
	if !sawTooLong || !sawAfter {
		t.Errorf("observations %v: want an error for line 2 and the message of line 3", kinds)
	}
}

// TestParseStreamOversizedLine: ParseStream reports an oversized line as an
// error observation and parses the lines after it.
func TestParseStreamOversizedLine(t *testing.T) {
	in := `{"type":"thread.started","thread_id":"t1"}` + "\n" + strings.Repeat("x", 17<<20) + "\n" + `{"type":"turn.completed"}` + "\n"
	obs, err := harness.ParseStream("codex", strings.NewReader(in))
	if err != nil {
		t.Fatalf("ParseStream: %v", err)
	}
	if len(obs) != 3 || obs[1].Kind != harness.ObsError || obs[1].Line != 2 || obs[2].Kind != harness.ObsEnd || obs[2].Line != 3 {
		t.Errorf("observations %+v", obs)
	}
}

// TestProbeNodeScriptVersionChange: a provider CLI that is a Node.js shim
// (Codex's bin/codex.js is the same file in every release) is not
// identified by the shim's hash alone: after the package is upgraded in
// place the probe must report the new version, not the cached one.
func TestProbeNodeScriptVersionChange(t *testing.T) {
	node := ""
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if fi, err := os.Stat(filepath.Join(d, "node")); err == nil && !fi.IsDir() {
			node = filepath.Join(d, "node")
			break
		}
	}
	if node == "" {
		t.Skip("node not on PATH")
	}
	pkg := filepath.Join(t.TempDir(), "pkg")
	os.MkdirAll(filepath.Join(pkg, "bin"), 0o755)
	shim := filepath.Join(pkg, "bin", "gemini.js")
	os.WriteFile(shim, []byte("#!/usr/bin/env node\nconsole.log(require('../package.json').version)\n"), 0o755)
	cache := t.TempDir()
	for _, v := range []string{"0.61.0", "0.62.0"} {
		os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name":"fake-gemini","version":"`+v+`"}`), 0o644)
		p, err := harness.Probe(context.Background(), "gemini-cli", shim, harness.ProbeOptions{CacheDir: cache, SearchPath: filepath.Dir(node)})
		if err != nil {
			t.Fatal(err)
		}
		if p.Version != v {
			t.Fatalf("probe after installing %s reports %s (cached %v, supported %v)", v, p.Version, p.Cached, p.Supported)
		}
	}
}

// TestSecretMayNotReplaceHarnessVariables: the harness sets HOME, PATH and
// each provider's own variables (CLAUDE_CONFIG_DIR, CODEX_HOME,
// GEMINI_CLI_HOME, …) to keep the provider's configuration private; a
// secret of the same name used to replace them (secrets won in the
// environment), undoing config isolation. The plan is now refused.
func TestSecretMayNotReplaceHarnessVariables(t *testing.T) {
	for provider, own := range map[string]string{"claude-code": "CLAUDE_CONFIG_DIR", "codex": "CODEX_HOME", "gemini-cli": "GEMINI_CLI_HOME"} {
		for _, name := range []string{"HOME", "PATH", own} {
			s := &harness.Spec{Name: "h", Provider: provider, Workspace: harness.Workspace{Root: "/ws"},
				Secrets: []harness.Secret{{Name: name, Ref: "env:X"}}}
			_, _, err := harness.Compile(s, fakeProbe(provider, false))
			var ce *harness.CompileError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), "secret "+name) {
				t.Errorf("%s, secret %s: %v, want a CompileError naming the secret", provider, name, err)
			}
		}
		s := &harness.Spec{Name: "h", Provider: provider, Workspace: harness.Workspace{Root: "/ws"},
			Secrets: []harness.Secret{{Name: "ANTHROPIC_API_KEY", Ref: "env:X"}}}
		if _, _, err := harness.Compile(s, fakeProbe(provider, false)); err != nil {
			t.Errorf("%s, an ordinary secret: %v", provider, err)
		}
	}
}

// TestSpawnToolBeforeInitStops: Claude's system/init must come before any
// tool event; a stream whose first tool event comes earlier is stopped at
// that event (it used to be flagged only after the provider had finished,
// its tools run).
func TestSpawnToolBeforeInitStops(t *testing.T) {
	dir, script := fakeProvider(t, `echo '{"type":"assistant","message":{"content":[{"id":"toolu_1","input":{"command":"ls"},"name":"Bash","type":"tool_use"}],"id":"m","role":"assistant","type":"message"},"session_id":"s","uuid":"u1"}'
sleep 10
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s","uuid":"u2"}'
`)
	s := specFrom(t, dir, `package h
harnesses: h: {
	provider: "claude-code"
	workspace: root: "ws"
	tools: allow: ["read_file"]
	resources: wall_clock: "20s"
}
`)
	p := fakeProbe("claude-code", false)
	probeAt(t, p, script)
	plan, _, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Attestation == nil {
		t.Fatal("the claude plan has no attestation")
	}
	start := time.Now()
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x"})
	var ae *harness.AttestationError
	if !errors.As(err, &ae) || res == nil || res.Stopped != "attestation" {
		t.Fatalf("err %v, result %+v: want an AttestationError and the run stopped for it", err, res)
	}
	if el := time.Since(start); el > 8*time.Second {
		t.Errorf("stopped after %v: the provider ran on after its tool event", el)
	}
}

// fakeProvider makes a directory with a workspace "ws" and an executable
// shell script of body standing in for a provider CLI (its validators,
// `doctor`, `app-server` and `execpolicy`, pass without running body).
func fakeProvider(t *testing.T, body string) (dir, script string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "fake-provider")
	// The offline validators Spawn runs first pass, as the real ones do
	// on a valid plan.
	validators := `case "$1" in doctor|app-server) exit 0;; execpolicy) echo '{"decision":"forbidden"}'; exit 0;; esac` + "\n"
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"+validators+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, script
}
