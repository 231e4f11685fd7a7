package polccli

import (
	"os"
	"testing"

	"polc.dev/polc/sandbox"
)

// polcTestMainEnv makes the test binary run as polc (Main) instead of the
// tests: tests that need the real program in another process (polc mcp
// over stdio, against an MCP client) start os.Args[0] with it set.
const polcTestMainEnv = "POLC_TEST_MAIN"

func TestMain(m *testing.M) {
	sandbox.Init() // the landlock backend re-executes this binary as its launcher
	if os.Getenv(polcTestMainEnv) == "polc" {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}
