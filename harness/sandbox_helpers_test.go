package harness_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/harness"
)

// fakeHelpers makes a directory holding a bwrap that "creates a sandbox"
// (exits 0) and a socat.
func fakeHelpers(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"bwrap", "socat"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestProbeHelpersOnProviderPath: Claude Code and Gemini CLI look bwrap
// and socat up on their own PATH, which is not polc's: a plan that does not
// allowlist PATH gives them the node directory and /usr/local/sbin:…:/bin.
// The probe used to report the helpers it found on polc's PATH, so a host
// with them only there got sandboxed claims (fs.write_roots/v1,
// net.egress/v1 enforced by os-sandbox:bubblewrap) while Claude Code then
// refused to start and Gemini CLI's shell failed. The probe now reports
// the helpers on the provider's PATH, and those on polc's PATH apart, for
// plans that allowlist PATH.
func TestProbeHelpersOnProviderPath(t *testing.T) {
	helpers := fakeHelpers(t)
	dir, script := fakeProvider(t, `echo "2.1.328 (Claude Code)"`+"\n")
	p, err := harness.Probe(context.Background(), "claude-code", script, harness.ProbeOptions{CacheDir: "-", SearchPath: helpers})
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(helpers, "bwrap")
	if p.Bwrap == fake || p.Socat == filepath.Join(helpers, "socat") {
		t.Fatalf("probe reports helpers only polc's PATH has as the provider's: bwrap %q socat %q", p.Bwrap, p.Socat)
	}
	if p.InheritedBwrap != fake || p.InheritedSocat != filepath.Join(helpers, "socat") {
		t.Fatalf("helpers on polc's PATH: bwrap %q socat %q", p.InheritedBwrap, p.InheritedSocat)
	}
	for _, allowPath := range []bool{false, true} {
		src := `package h
harnesses: h: {
	provider: "claude-code"
	workspace: root: "ws"
	tools: allow: ["bash"]
	subprocess: allow: ["touch *"]
}
`
		if allowPath {
			src = strings.Replace(src, `tools:`, `environment: allow: ["PATH"]
	tools:`, 1)
		}
		plan, rep, err := harness.Compile(specFrom(t, dir, src), p)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := rep.Lookup(harness.CapFSWriteRoots)
		sandboxed := slices.ContainsFunc(r.Sources, func(s harness.Source) bool { return strings.HasPrefix(s.By, harness.SourceOSSandboxPrefix) })
		uses := slices.ContainsFunc(plan.SandboxHelpers, func(h harness.SandboxHelper) bool { return strings.HasPrefix(h.Path, helpers) })
		switch {
		case !allowPath && uses:
			t.Errorf("PATH not allowlisted: the plan rests on %v, which the provider's PATH does not find", plan.SandboxHelpers)
		case !allowPath && sandboxed != (p.Bwrap != "" && p.Socat != ""):
			t.Errorf("PATH not allowlisted: fs.write_roots/v1 sources %v, but the provider's PATH has bwrap %q socat %q", r.Sources, p.Bwrap, p.Socat)
		case allowPath && (!uses || !sandboxed):
			t.Errorf("PATH allowlisted: the provider inherits polc's PATH, whose helpers the plan should use: helpers %v, sources %v", plan.SandboxHelpers, r.Sources)
		}
	}
}

// TestSpawnRefusesMissingSandboxHelper: a plan whose sandbox claims rest on
// a helper is not run when the PATH the provider gets finds another or
// none (an allowlisted PATH that differs at spawn, a helper removed since
// the probe): the report would say more than the run gets.
func TestSpawnRefusesMissingSandboxHelper(t *testing.T) {
	helpers := fakeHelpers(t)
	dir, script := fakeProvider(t, `echo '{"type":"thread.started","thread_id":"t1"}'
echo '{"type":"turn.completed"}'
`)
	plan, _ := fakeCodexPlan(t, dir, script, `environment: allow: ["PATH"]`)
	plan.SandboxHelpers = []harness.SandboxHelper{{Name: "bwrap", Path: filepath.Join(helpers, "bwrap")}}
	if err := plan.Seal(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		ok   bool
	}{{helpers + ":/usr/bin:/bin", true}, {"/nonexistent:" + helpers, true}, {t.TempDir(), false}} {
		_, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x", Getenv: func(k string) (string, bool) {
			if k == "PATH" {
				return c.path, true
			}
			return "", false
		}})
		var ce *harness.CompileError
		switch {
		case c.ok && err != nil:
			t.Errorf("PATH %s finds the helper, but Spawn = %v", c.path, err)
		case !c.ok && (!errors.As(err, &ce) || !strings.Contains(err.Error(), "sandbox helper bwrap")):
			t.Errorf("PATH %s lacks the helper, but Spawn = %v", c.path, err)
		}
	}
}

// TestCodexPinsBundledBwrap: Codex runs the first bwrap on its PATH and
// its bundled one only when there is none, and a host's older bubblewrap
// (Debian 12's 0.8.0 has no --argv0) failed every command. A plan that
// does not allowlist PATH puts a private directory first whose bwrap runs
// the bundled one; one that does cannot, and relies on nothing.
func TestCodexPinsBundledBwrap(t *testing.T) {
	p := fakeProbe("codex", false)
	p.BundledBwrap = "/opt/codex/codex-resources/bwrap"
	for _, allowPath := range []bool{false, true} {
		extra := ""
		if allowPath {
			extra = `environment: allow: ["PATH"]`
		}
		s := specFrom(t, t.TempDir(), `package h
harnesses: h: {
	provider: "codex"
	workspace: root: "ws"
	tools: allow: ["bash"]
	`+extra+`
}
`)
		plan, _, err := harness.Compile(s, p)
		if err != nil {
			t.Fatal(err)
		}
		var path string
		for _, e := range plan.Env {
			if e.Name == "PATH" {
				path = e.Value
			}
		}
		shim := ""
		for _, f := range plan.Files {
			if strings.HasSuffix(f.Path, "/codex-bin/bwrap") {
				shim = f.Content
			}
		}
		switch {
		case !allowPath && (!strings.HasPrefix(path, harness.RunDir+"/codex-bin:") || !strings.Contains(shim, "exec '/opt/codex/codex-resources/bwrap' \"$@\"") ||
			len(plan.SandboxHelpers) != 1 || plan.SandboxHelpers[0].Path != harness.RunDir+"/codex-bin/bwrap"):
			t.Errorf("PATH %q, shim %q, helpers %v: want the bundled bwrap first on PATH", path, shim, plan.SandboxHelpers)
		case allowPath && (shim != "" || len(plan.SandboxHelpers) != 0):
			t.Errorf("PATH allowlisted: shim %q, helpers %v: the plan cannot change an inherited PATH", shim, plan.SandboxHelpers)
		}
	}
}
