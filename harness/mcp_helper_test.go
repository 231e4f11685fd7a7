package harness_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// mcpHelperArg marks a run of the test binary as the MCP server of a real
// CLI test (mcpServerArgs): it serves until stdin closes, then exits.
const mcpHelperArg = "polc-mcp-helper"

// mcpServerArgs are the command and arguments of an MCP stdio server with
// two tools, "allowed" and "forbidden": calling one creates a file of its
// name in dir. It is this test binary, run as TestHelperMCPServer.
func mcpServerArgs(t *testing.T, dir string) (string, []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe, []string{"-test.run=^TestHelperMCPServer$", "--", mcpHelperArg, dir}
}

// TestHelperMCPServer is not a test: run by mcpServerArgs, it is a minimal
// MCP server (newline-delimited JSON-RPC on stdin and stdout).
func TestHelperMCPServer(t *testing.T) {
	args := flag.Args()
	if len(args) != 2 || args[0] != mcpHelperArg {
		return
	}
	dir := args[1]
	out := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	tool := func(name string) map[string]any {
		return map[string]any{"name": name, "description": "creates a file named " + name,
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{}}}
	}
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Name            string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || len(req.ID) == 0 {
			continue // a notification, or not JSON
		}
		reply := map[string]any{"jsonrpc": "2.0", "id": req.ID}
		switch req.Method {
		case "initialize":
			v := req.Params.ProtocolVersion
			if v == "" {
				v = "2025-06-18"
			}
			reply["result"] = map[string]any{"protocolVersion": v, "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "polc-test", "version": "1.0.0"}}
		case "tools/list":
			reply["result"] = map[string]any{"tools": []any{tool("allowed"), tool("forbidden")}}
		case "tools/call":
			os.WriteFile(filepath.Join(dir, filepath.Base(req.Params.Name)), nil, 0o644)
			reply["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": "called " + req.Params.Name}}}
		case "ping":
			reply["result"] = map[string]any{}
		default:
			reply["error"] = map[string]any{"code": -32601, "message": "method not found"}
		}
		out.Encode(reply)
	}
	os.Exit(0)
}
