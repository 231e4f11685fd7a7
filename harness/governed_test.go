package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/harness"
)

// TestGovernedSpawnWaitsForTheSessionClose: polc mcp writes the
// certificate once the provider is gone (its stdin closes), so Spawn must
// let the processes the provider left finish before it kills the process
// group. The fake provider leaves a process that writes the certificate a
// second after the provider exited; Spawn must report it.
func TestGovernedSpawnWaitsForTheSessionClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	cert := filepath.Join(dir, "cert.json")
	script := filepath.Join(dir, "codex")
	os.WriteFile(script, []byte("#!/bin/sh\n(sleep 1; echo '{}' > '"+cert+"') </dev/null >/dev/null 2>&1 &\necho '{\"type\":\"thread.started\",\"thread_id\":\"t\"}'\n"), 0o755)
	s := specFrom(t, dir, `package h
harnesses: h: {
	provider: "codex"
	workspace: root: "ws"
	governed: {session: "s.yaml", evidence: "ev", cert: "cert.json"}
	resources: wall_clock: "30s"
}
`)
	p := probeAt(t, fakeProbe("codex", false), script)
	_, rep, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.All() {
		if r.Status != harness.Enforced {
			s.AllowDegraded = append(s.AllowDegraded, r.Capability)
		}
	}
	plan, _, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "hi", Getenv: fixedEnv})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	if res.Certificate != cert {
		t.Fatalf("certificate %q, want %s", res.Certificate, cert)
	}
}

// TestGovernedSpawnWithoutCertificateFails: a governed run whose session
// left no certificate is an error, not a run that looks complete.
func TestGovernedSpawnWithoutCertificateFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	script := filepath.Join(dir, "codex")
	os.WriteFile(script, []byte("#!/bin/sh\necho '{\"type\":\"thread.started\",\"thread_id\":\"t\"}'\n"), 0o755)
	s := specFrom(t, dir, `package h
harnesses: h: {
	provider: "codex"
	workspace: root: "ws"
	governed: {session: "s.yaml", evidence: "ev", cert: "cert.json"}
	resources: wall_clock: "30s"
}
`)
	p := probeAt(t, fakeProbe("codex", false), script)
	_, rep, _ := harness.Compile(s, p)
	for _, r := range rep.All() {
		if r.Status != harness.Enforced {
			s.AllowDegraded = append(s.AllowDegraded, r.Capability)
		}
	}
	plan, _, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "hi", Getenv: fixedEnv}); err == nil {
		t.Fatal("a governed run without a certificate succeeded")
	}
}

// TestGovernedGeminiPolicyAllowsPolcTools: Gemini CLI prefixes a rule's
// toolName from its mcpName, so the admin policy must name polc's tools
// unprefixed ("*"); the prefixed spelling (mcp_polc_*) became
// mcp_polc_mcp_polc_*, matched nothing, and deny * hid every polc tool
// (TestRealGovernedGeminiCLI shows it with the real CLI). A declared
// server's listed tool is named bare too.
func TestGovernedGeminiPolicyAllowsPolcTools(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	s := specFrom(t, dir, `package h
harnesses: h: {
	provider: "gemini-cli"
	workspace: root: "ws"
	mcp: servers: other: {command: "/bin/true", tools: ["t1"]}
	governed: {session: "s.yaml", evidence: "ev", cert: "c.json"}
}
`)
	plan, rep, err := harness.Compile(s, fakeProbe("gemini-cli", false))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := rep.Lookup(harness.CapToolsGoverned); r.Status != harness.Degraded {
		t.Errorf("%s with a foreign MCP server is %s, want degraded", harness.CapToolsGoverned, r.Status)
	}
	var policy, settings string
	for _, f := range plan.Files {
		switch {
		case strings.HasSuffix(f.Path, "/policy.toml"):
			policy = f.Content
		case strings.HasSuffix(f.Path, "/settings.json"):
			settings = f.Content
		}
	}
	for _, want := range []string{
		"toolName = \"*\"\nmcpName = \"polc\"\ndecision = \"allow\"",
		"toolName = \"t1\"\nmcpName = \"other\"\ndecision = \"allow\"",
		"toolName = \"*\"\ndecision = \"deny\"\npriority = 1\n",
	} {
		if !strings.Contains(policy, want) {
			t.Errorf("the admin policy lacks %q:\n%s", want, policy)
		}
	}
	if strings.Contains(policy, "mcp_") {
		t.Errorf("the admin policy names a prefixed MCP tool, which Gemini prefixes again:\n%s", policy)
	}
	if !strings.Contains(settings, `"core": []`) {
		t.Errorf("settings register built-in tools:\n%s", settings)
	}
}
