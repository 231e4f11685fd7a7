package harness_test

import (
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/harness"
)

// specFrom loads the CUE source (one harness, named h) in a temp dir.
func specFrom(t *testing.T, dir, src string) *harness.Spec {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "h.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	d, diags := compiler.Load(compiler.Config{Dir: dir}, []string{"h.cue"})
	if diags.HasErrors() {
		t.Fatalf("load: %v", diags)
	}
	h := d.LookupHarness("h")
	if h == nil {
		t.Fatal("no harness h")
	}
	s, diags := harness.FromDeclaration(h, dir)
	if diags.HasErrors() {
		t.Fatalf("spec: %v", diags)
	}
	return s
}

// fakeCodexPlan compiles harness h for a fake codex script (in dir, whose
// workspace is "ws"): read_file only, a 20 s wall clock, the tool
// allowlist allowed degraded; extra is more CUE inside the harness.
func fakeCodexPlan(t *testing.T, dir, script, extra string) (*harness.Plan, *harness.CapabilityReport) {
	t.Helper()
	s := specFrom(t, dir, `package h
harnesses: h: {
	provider: "codex"
	workspace: root: "ws"
	tools: allow: ["read_file"]
	resources: wall_clock: "20s"
	allow_degraded: ["tools.allowlist/v1"]
	`+extra+`
}
`)
	plan, rep, err := harness.Compile(s, probeAt(t, fakeProbe("codex", false), script))
	if err != nil {
		t.Fatal(err)
	}
	return plan, rep
}
