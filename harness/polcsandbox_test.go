package harness_test

import (
	"os"
	"path/filepath"
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
