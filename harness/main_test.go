package harness_test

import (
	"os"
	"testing"

	"polc.dev/polc/sandbox"
)

// TestMain lets this test binary act as polc's sandbox launcher: spawns of
// plans with sandbox: polc re-execute it (sandbox.Init).
func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}
