package harness_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/harness"
)

// fakeProbe is a probe result for the pinned version; Compile runs
// nothing, so the report can be checked without the CLI installed.
func fakeProbe(provider string, bwrap bool) *harness.ProbeResult {
	versions := map[string]string{"claude-code": "2.1.328", "codex": "0.169.0", "gemini-cli": "0.61.0"}
	p := &harness.ProbeResult{Provider: provider, Executable: "/opt/" + provider, Resolved: "/opt/" + provider,
		SHA256: strings.Repeat("0", 64), Version: versions[provider], Supported: true}
	if bwrap {
		p.Bwrap, p.Socat = "/usr/bin/bwrap", "/usr/bin/socat"
	}
	return p
}

// probeAt points a fake probe at a real file: its path and hash, so that
// Spawn finds the executable it was planned for.
func probeAt(t *testing.T, p *harness.ProbeResult, path string) *harness.ProbeResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	p.Executable, p.Resolved, p.SHA256 = path, path, hex.EncodeToString(sum[:])
	return p
}

const lockedDown = `package h
harnesses: h: {
	provider: %q
	workspace: {root: "ws", extra_dirs: ["extra"]}
	tools: allow: ["read_file", "edit_file", "list_files", "search_files"]
	network: mode: "off"
	filesystem: read: []
	resources: {turns: 20, wall_clock: "10m"}
}
`

// asksTooMuch asks for controls no provider can fully enforce with a
// shell that runs interpreters and no host sandbox.
const asksTooMuch = `package h
harnesses: h: {
	provider: %q
	workspace: root: "ws"
	tools: allow: ["bash", "read_file", "edit_file"]
	subprocess: allow: ["python3 *", "git status"]
	network: {mode: "allowlist", allow: ["registry.npmjs.org"]}
	filesystem: deny: ["ws/secrets"]
	environment: secrets: TOKEN: "env:TOKEN"
	resources: {cost_microusd: 5000000}
	required_capabilities: ["net.allowlist/v1", "fs.deny_paths/v1", "attestation.launch/v1"]
}
`

func status(r *harness.CapabilityReport) map[string]harness.Status {
	m := map[string]harness.Status{}
	for _, c := range r.All() {
		m[c.Capability] = c.Status
	}
	return m
}

func compileFor(t *testing.T, src, provider string, bwrap bool) (*harness.Plan, *harness.CapabilityReport) {
	t.Helper()
	dir := t.TempDir()
	s := specFrom(t, dir, fmt.Sprintf(src, provider))
	plan, rep, err := harness.Compile(s, fakeProbe(provider, bwrap))
	if err != nil {
		t.Fatal(err)
	}
	// Every requested control appears exactly once.
	seen := map[string]int{}
	for _, c := range rep.All() {
		seen[c.Capability]++
	}
	for _, c := range harness.Requested(s) {
		if seen[c] != 1 {
			t.Errorf("%s: %s appears %d times in the report", provider, c, seen[c])
		}
	}
	if len(seen) != len(harness.Requested(s)) {
		t.Errorf("%s: report has %d controls, spec requested %d", provider, len(seen), len(harness.Requested(s)))
	}
	return plan, rep
}

func TestReportLockedDown(t *testing.T) {
	want := map[string]map[string]harness.Status{
		"claude-code": {"fs.write_roots/v1": "enforced", "fs.read_roots/v1": "enforced", "net.egress/v1": "enforced",
			"tools.allowlist/v1": "enforced", "config.isolation/v1": "enforced", "resources.turns/v1": "enforced"},
		"codex": {"fs.write_roots/v1": "enforced", "fs.read_roots/v1": "unsupported", "net.egress/v1": "enforced",
			"tools.allowlist/v1": "degraded", "resources.turns/v1": "unsupported", "config.isolation/v1": "enforced"},
		"gemini-cli": {"fs.write_roots/v1": "enforced", "fs.read_roots/v1": "enforced", "net.egress/v1": "enforced",
			"tools.allowlist/v1": "enforced", "resources.turns/v1": "enforced", "config.isolation/v1": "degraded"},
	}
	for provider, w := range want {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			_, rep := compileFor(t, lockedDown, provider, false)
			got := status(rep)
			for c, st := range w {
				if got[c] != st {
					t.Errorf("%s = %s, want %s", c, got[c], st)
				}
			}
		})
	}
}

func TestReportAsksTooMuch(t *testing.T) {
	want := map[string]map[string]harness.Status{
		"claude-code": {"net.allowlist/v1": "unsupported", "fs.deny_paths/v1": "degraded", "fs.write_roots/v1": "degraded",
			"subprocess.allow/v1": "degraded", "env.secret_isolation/v1": "unsupported", "resources.budget/v1": "enforced",
			"attestation.launch/v1": "enforced"},
		"codex": {"net.allowlist/v1": "unsupported", "fs.deny_paths/v1": "unsupported", "fs.write_roots/v1": "enforced",
			"subprocess.allow/v1": "unsupported", "env.secret_isolation/v1": "enforced", "resources.budget/v1": "unsupported",
			"attestation.launch/v1": "unsupported"},
		"gemini-cli": {"net.allowlist/v1": "unsupported", "fs.deny_paths/v1": "unsupported", "fs.write_roots/v1": "degraded",
			"subprocess.allow/v1": "degraded", "env.secret_isolation/v1": "degraded", "resources.budget/v1": "unsupported",
			"attestation.launch/v1": "unsupported"},
	}
	for provider, w := range want {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			plan, rep := compileFor(t, asksTooMuch, provider, false)
			got := status(rep)
			for c, st := range w {
				if got[c] != st {
					t.Errorf("%s = %s, want %s", c, got[c], st)
				}
			}
			blocking := map[string]bool{}
			for _, c := range rep.Blocking() {
				blocking[c.Capability] = true
			}
			if !blocking["net.allowlist/v1"] || !blocking["fs.deny_paths/v1"] {
				t.Errorf("required controls that are not enforced must block: %v", blocking)
			}
			// Spawn refuses before anything runs (the executable does not exist).
			_, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x"})
			var ne *harness.NotEnforcedError
			if !errors.As(err, &ne) {
				t.Fatalf("Spawn = %v, want *NotEnforcedError", err)
			}
			if strings.Contains(string(mustJSON(t, plan)), "env:TOKEN") == false {
				t.Errorf("the plan must carry the secret reference")
			}
		})
	}
}

func mustJSON(t *testing.T, p *harness.Plan) []byte {
	b, err := p.MarshalCanonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNoProviderOnlyClaimUnderShell: with a shell that may run any command
// and no OS sandbox, no filesystem or network control is reported enforced
// on the strength of provider-process rules alone.
func TestNoProviderOnlyClaimUnderShell(t *testing.T) {
	src := `package h
harnesses: h: {
	provider: %q
	workspace: root: "ws"
	tools: allow: ["bash", "read_file", "write_file", "web_fetch"]
	network: mode: "off"
	filesystem: {read: [], deny: ["ws/private"]}
}
`
	for _, provider := range harness.Providers {
		_, rep := compileFor(t, src, provider, false)
		for _, c := range rep.Enforced {
			if !strings.HasPrefix(c.Capability, "fs.") && !strings.HasPrefix(c.Capability, "net.") {
				continue
			}
			osBacked := false
			for _, s := range c.Sources {
				if strings.HasPrefix(s.By, harness.SourceOSSandboxPrefix) {
					osBacked = true
				}
			}
			if !osBacked {
				t.Errorf("%s: %s claimed enforced by %v with an unconfined shell", provider, c.Capability, c.Sources)
			}
		}
	}
}

// TestSandboxChangesClaims: with bwrap and socat on the host, Claude's
// Bash runs sandboxed and the claims name the OS sandbox.
func TestSandboxChangesClaims(t *testing.T) {
	_, rep := compileFor(t, `package h
harnesses: h: {
	provider: %q
	workspace: root: "ws"
	tools: allow: ["bash"]
	subprocess: allow: ["ls *"]
	network: mode: "off"
}
`, "claude-code", true)
	c, _ := rep.Lookup(harness.CapNetEgress)
	if c.Status != harness.Enforced || len(c.Sources) != 2 || c.Sources[1].By != "os-sandbox:bubblewrap" {
		t.Errorf("net.egress = %+v", c)
	}
}

func TestUnknownVersionIsUnsupported(t *testing.T) {
	dir := t.TempDir()
	s := specFrom(t, dir, fmt.Sprintf(lockedDown, "codex"))
	p := fakeProbe("codex", false)
	p.Version, p.Supported = "0.170.0", false
	plan, rep, err := harness.Compile(s, p)
	var uv *harness.UnsupportedVersionError
	if !errors.As(err, &uv) || plan != nil {
		t.Fatalf("Compile = %v, %v", plan, err)
	}
	if len(rep.Enforced)+len(rep.Degraded) != 0 || len(rep.Unsupported) != len(harness.Requested(s)) {
		t.Errorf("report = %+v", rep)
	}
}

func TestYoloLegacyProfiles(t *testing.T) {
	for _, provider := range harness.Providers {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
		s := specFrom(t, dir, fmt.Sprintf("package h\nharnesses: h: {provider: %q, yolo: true, workspace: root: \"ws\"}\n", provider))
		plan, rep, err := harness.Compile(s, fakeProbe(provider, false))
		if err != nil {
			t.Fatal(err)
		}
		if plan.Profile != provider+".legacy-yolo" {
			t.Errorf("profile = %s", plan.Profile)
		}
		st := status(rep)
		switch provider {
		case "codex":
			// workspace-write still sandboxes, but /tmp stays writable.
			if st[harness.CapFSWriteRoots] != harness.Degraded || st[harness.CapApprovalHeadless] != harness.Enforced {
				t.Errorf("codex legacy yolo: %v", st)
			}
		default:
			if st[harness.CapApprovalHeadless] != harness.Unsupported || st[harness.CapFSWriteRoots] != harness.Unsupported {
				t.Errorf("%s legacy yolo: %v", provider, st)
			}
		}
	}
}

func TestPlanDigestStable(t *testing.T) {
	p1, _ := compileFor(t, lockedDown, "claude-code", false)
	p2, _ := compileFor(t, lockedDown, "claude-code", false)
	// Different temp dirs give different workspace paths: digests differ.
	if p1.Digest == p2.Digest {
		t.Errorf("plans for different workspaces share a digest")
	}
	p1.Argv = append(p1.Argv, "--yolo")
	if _, err := harness.Spawn(context.Background(), p1, harness.SpawnOptions{}); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("a changed plan must be refused, got %v", err)
	}
}
