package polccli

import (
	"os"
	"testing"

	"polc.dev/polc/internal/testutil/mcptest"
	"polc.dev/polc/sandbox"
)

// polcTestMainEnv makes the test binary run as polc (Main) instead of the
// tests: tests that need the real program in another process (polc mcp
// over stdio, against an MCP client) start os.Args[0] with it set.
const polcTestMainEnv = "POLC_TEST_MAIN"

// mcpUpstreamMain, as POLC_TEST_MAIN, makes the test binary the test MCP
// server (mcptest) that sessions declare as their upstream server.
const mcpUpstreamMain = "mcp-upstream"

func TestMain(m *testing.M) {
	sandbox.Init() // the landlock backend re-executes this binary as its launcher
	switch os.Getenv(polcTestMainEnv) {
	case "polc":
		os.Exit(Main())
	case mcpUpstreamMain:
		os.Exit(mcptest.Main())
	}
	os.Exit(m.Run())
}
