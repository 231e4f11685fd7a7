package decision_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRuntimeNeedsNoExecutor keeps the embedding promise of
// docs/architecture.md: a runtime that normalizes and decides requests
// imports normalize and decision, and they link neither the executor (its
// stages, stores and processes) nor the compiler, CUE or OPA.
func TestRuntimeNeedsNoExecutor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "polc.dev/polc/decision", "polc.dev/polc/normalize").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(pkg, "cuelang.org/"), strings.HasPrefix(pkg, "github.com/open-policy-agent/"),
			strings.HasPrefix(pkg, "polc.dev/polc/executor"), pkg == "polc.dev/polc/compiler":
			t.Errorf("normalize and decision link %s", pkg)
		}
	}
}
