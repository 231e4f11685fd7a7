package harness_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"polc.dev/polc/certificate"
	"polc.dev/polc/harness"
	"polc.dev/polc/snapshot"
)

// compiledSnapshot is governedPolicy compiled once per test binary (polc
// compile, this binary as polc): the snapshot of writeSession's sessions.
var compiledSnapshot = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "polc-governed-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(governedPolicy), 0o644)
	if err := polcCmd(dir, "compile", "policy.cue", "-o", "out"); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(dir, "out", "snapshots", "gov.json"))
})

// writeSession writes a certifiable polc session file at dir/name whose
// snapshot, governedPolicy compiled, is at dir/snap; extra is more YAML
// (a backend, another profile). It returns the snapshot's digest.
func writeSession(t *testing.T, dir, name, snap, extra string) string {
	t.Helper()
	data, err := compiledSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{snap: string(data),
		name: "snapshot: " + snap + "\nprofile: certifiable\nworkspace: ws\nprincipal: agent:gov\ntenant: acme\n" + extra} {
		path = filepath.Join(dir, path)
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s.Digest
}

// fakeCertificate is a certificate of the snapshot digest, as polc mcp
// would write it unsigned.
func fakeCertificate(t *testing.T, digest string) []byte {
	t.Helper()
	c := &certificate.Certificate{CertificateID: "00000000-0000-4000-8000-000000000001", TaskBoundaryID: "00000000-0000-4000-8000-000000000002",
		ChainID: "00000000-0000-4000-8000-000000000003", PolicyID: "00000000-0000-4000-8000-000000000004", PolicyVersion: "1.0.0",
		PolicyDigest: digest, EvidenceChainHead: strings.Repeat("ab", 32), TreeSize: 3,
		MerkleRoot: base64.StdEncoding.EncodeToString(make([]byte, 32)), ProcessGrade: certificate.GradeFull, MintedAt: "2026-03-15T12:00:00.000000Z"}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certificate.Parse(b); err != nil {
		t.Fatalf("the fake certificate does not parse: %v", err)
	}
	return append(b, '\n')
}

// governedCodexPlan compiles the governed harness h of src (a fake codex
// script in dir, every control not enforced allowed degraded).
func governedCodexPlan(t *testing.T, dir, script, src string) *harness.Plan {
	t.Helper()
	s := specFrom(t, dir, src)
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
	return plan
}

// governedCodexSrc is a governed codex harness over session.yaml.
const governedCodexSrc = `package h
harnesses: h: {
	provider: "codex"
	workspace: root: "ws"
	governed: {session: "session.yaml", evidence: "ev", cert: "cert.json"}
	resources: wall_clock: "30s"
}
`

// TestGovernedSpawnWaitsForTheSessionClose: polc mcp writes the
// certificate once the provider is gone (its stdin closes), so Spawn must
// let the processes the provider left finish before it kills the process
// group. The fake provider leaves a process that writes the certificate a
// second after the provider exited; Spawn must report it.
func TestGovernedSpawnWaitsForTheSessionClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	digest := writeSession(t, dir, "session.yaml", "out/gov.json", "")
	cert := filepath.Join(dir, "cert.json")
	os.WriteFile(filepath.Join(dir, "made.json"), fakeCertificate(t, digest), 0o644)
	script := filepath.Join(dir, "codex")
	os.WriteFile(script, []byte("#!/bin/sh\n(sleep 1; cp '"+filepath.Join(dir, "made.json")+"' '"+cert+"') </dev/null >/dev/null 2>&1 &\necho '{\"type\":\"thread.started\",\"thread_id\":\"t\"}'\n"), 0o755)
	plan := governedCodexPlan(t, dir, script, governedCodexSrc)
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
	writeSession(t, dir, "session.yaml", "out/gov.json", "")
	script := filepath.Join(dir, "codex")
	os.WriteFile(script, []byte("#!/bin/sh\necho '{\"type\":\"thread.started\",\"thread_id\":\"t\"}'\n"), 0o755)
	plan := governedCodexPlan(t, dir, script, governedCodexSrc)
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
	writeSession(t, dir, "session.yaml", "out/gov.json", "")
	s := specFrom(t, dir, `package h
harnesses: h: {
	provider: "gemini-cli"
	workspace: root: "ws"
	mcp: servers: other: {command: "/bin/true", tools: ["t1"]}
	governed: {session: "session.yaml", evidence: "ev", cert: "c.json"}
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
