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
