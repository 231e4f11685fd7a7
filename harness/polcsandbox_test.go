package harness_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/harness"
	"polc.dev/polc/sandbox"
)

// TestPolcSandboxFollowsKernel: the claims of polc's sandbox are what the
// kernel probe says: enforced facets keep the table's enforced rows, a
// degraded facet degrades the claim with its reason, an unsupported one
// makes it unsupported. The plan records the sandbox choice, so the digest
// differs from the provider-sandbox plan's.
func TestPolcSandboxFollowsKernel(t *testing.T) {
	facets := func(fs, deny, net sandbox.State) func() sandbox.Report {
		return func() sandbox.Report {
			return sandbox.Report{LandlockABI: 9, Facets: []sandbox.Facet{
				{Name: sandbox.FacetFilesystem, State: fs, Reason: "fs-reason"},
				{Name: sandbox.FacetFilesystemDeny, State: deny, Reason: "deny-reason"},
				{Name: sandbox.FacetNetwork, State: net, Reason: "net-reason"},
			}}
		}
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "ws"), 0o755)
	src := `package h
harnesses: h: {
	provider: "gemini-cli"
	%s
	endpoint: base_url: "http://127.0.0.1:9"
	workspace: root: "ws"
	tools: allow: ["bash"]
	filesystem: {read: [], deny: ["ws/secrets"]}
}
`
	polc := specFrom(t, dir, strings.Replace(src, "%s", `sandbox: "polc"`, 1))
	prov := specFrom(t, dir, strings.Replace(src, "%s", "", 1))
	p := fakeProbe("gemini-cli", true)
	for _, c := range []struct {
		name          string
		probe         func() sandbox.Report
		write, deny   harness.Status
		egress        harness.Status
		reasonContain string
	}{
		{"all enforced", facets(sandbox.Enforced, sandbox.Enforced, sandbox.Enforced), harness.Enforced, harness.Enforced, harness.Enforced, ""},
		{"fs degraded", facets(sandbox.Degraded, sandbox.Enforced, sandbox.Enforced), harness.Degraded, harness.Degraded, harness.Enforced, "fs-reason"},
		{"deny degraded", facets(sandbox.Enforced, sandbox.Degraded, sandbox.Enforced), harness.Enforced, harness.Degraded, harness.Enforced, "deny-reason"},
		{"no namespaces", facets(sandbox.Enforced, sandbox.Enforced, sandbox.Unsupported), harness.Enforced, harness.Enforced, harness.Unsupported, "net-reason"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer harness.SetKernelProbe(c.probe)()
			plan, rep, err := harness.Compile(polc, p)
			if err != nil {
				t.Fatal(err)
			}
			for capability, want := range map[string]harness.Status{harness.CapFSWriteRoots: c.write, harness.CapFSDenyPaths: c.deny, harness.CapNetEgress: c.egress} {
				r, _ := rep.Lookup(capability)
				if r.Status != want {
					t.Errorf("%s is %s (%s), want %s", capability, r.Status, r.Reason, want)
				}
				if r.Status != harness.Unsupported && !strings.Contains(r.Sources[len(r.Sources)-1].By, "landlock (polc)") {
					t.Errorf("%s sources %v name no landlock", capability, r.Sources)
				}
			}
			all := ""
			for _, r := range rep.All() {
				all += r.Reason
			}
			if c.reasonContain != "" && !strings.Contains(all, c.reasonContain) {
				t.Errorf("no claim gives the facet's reason %q", c.reasonContain)
			}
			if plan.OSSandbox == nil || plan.OSSandbox.Network != "deny" || plan.OSSandbox.ModelForward != "127.0.0.1:9" {
				t.Errorf("os_sandbox %+v", plan.OSSandbox)
			}
			pp, _, err := harness.Compile(prov, p)
			if err != nil {
				t.Fatal(err)
			}
			if pp.OSSandbox != nil || pp.Digest == plan.Digest {
				t.Errorf("the provider-sandbox plan has os_sandbox %+v, digest %s (polc plan %s)", pp.OSSandbox, pp.Digest, plan.Digest)
			}
		})
	}
}

// TestCodexUnderPolcSandbox: with sandbox: polc a Codex plan switches
// Codex's own sandbox off (danger-full-access: its bubblewrap fails every
// command inside Landlock with "error building bubblewrap command:
// Permission denied"), pins no bubblewrap, and claims the filesystem and
// network rows for polc's sandbox alone: Codex has no file tool that
// confines itself, so no row names the provider as a filesystem source.
func TestCodexUnderPolcSandbox(t *testing.T) {
	defer harness.SetKernelProbe(func() sandbox.Report {
		return sandbox.Report{LandlockABI: 9, Facets: []sandbox.Facet{
			{Name: sandbox.FacetFilesystem, State: sandbox.Enforced},
			{Name: sandbox.FacetFilesystemDeny, State: sandbox.Enforced},
			{Name: sandbox.FacetNetwork, State: sandbox.Enforced},
		}}
	})()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "ws"), 0o755)
	s := specFrom(t, dir, `package h
harnesses: h: {
	provider: "codex"
	sandbox: "polc"
	endpoint: base_url: "http://127.0.0.1:9"
	workspace: root: "ws"
	tools: allow: ["bash"]
	filesystem: {read: [], write: ["out"], deny: ["ws/secrets"]}
	network: mode: "off"
}
`)
	p := fakeProbe("codex", false)
	p.BundledBwrap = "/opt/codex-bwrap"
	plan, rep, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(plan.Argv, " ")
	if !strings.Contains(argv, " -s danger-full-access ") || strings.Contains(argv, "workspace-write") || strings.Contains(argv, "--add-dir") {
		t.Errorf("argv %q: want danger-full-access and no workspace-write or --add-dir", argv)
	}
	if len(plan.SandboxHelpers) != 0 {
		t.Errorf("sandbox helpers %v: Codex's own sandbox is off", plan.SandboxHelpers)
	}
	for _, e := range plan.Env {
		if e.Name == "PATH" && strings.Contains(e.Value, "codex-bin") {
			t.Errorf("PATH %q pins the bundled bubblewrap", e.Value)
		}
	}
	if plan.OSSandbox == nil || !slices.Contains(plan.OSSandbox.Write, filepath.Join(dir, "out")) || plan.OSSandbox.Network != "deny" {
		t.Errorf("os_sandbox %+v", plan.OSSandbox)
	}
	for _, c := range []string{harness.CapFSWriteRoots, harness.CapFSReadRoots, harness.CapFSDenyPaths, harness.CapNetEgress} {
		r, _ := rep.Lookup(c)
		if r.Status != harness.Enforced || !strings.HasSuffix(r.Evidence, "TestRealEnforcedRows/codex/polc") {
			t.Errorf("%s is %s, evidence %q", c, r.Status, r.Evidence)
		}
		for _, src := range r.Sources {
			if src.By == harness.SourceProvider && c != harness.CapNetEgress || strings.Contains(src.By, "bubblewrap") {
				t.Errorf("%s names source %s (%s): Codex's own sandbox is off", c, src.By, src.Scope)
			}
		}
		if !slices.Contains(r.Settings, "sandbox: polc") || slices.Contains(r.Settings, "-s workspace-write") {
			t.Errorf("%s settings %v", c, r.Settings)
		}
	}
	if r, _ := rep.Lookup(harness.CapApprovalHeadless); r.Status != harness.Enforced || !strings.HasSuffix(r.Evidence, "codex/polc") {
		t.Errorf("approval.headless is %s, evidence %q", r.Status, r.Evidence)
	}
}
