package harness_test

import (
	"os"
	"testing"

	"polc.dev/polc/internal/polccli"
	"polc.dev/polc/sandbox"
)

// polcMainEnv makes this test binary run as polc (runPolc).
const polcMainEnv = "POLC_HARNESS_TEST_POLC"

// TestMain lets this test binary act as polc's sandbox launcher: spawns of
// plans with sandbox: polc re-execute it (sandbox.Init). It also acts as
// polc itself: a governed plan's provider starts it (harness.PolcExecutable
// is this binary) as `mcp SESSION …`, which no test binary is run with.
func TestMain(m *testing.M) {
	sandbox.Init()
	if os.Getenv(polcMainEnv) != "" || len(os.Args) > 1 && os.Args[1] == "mcp" {
		os.Exit(polccli.Main())
	}
	os.Exit(m.Run())
}
