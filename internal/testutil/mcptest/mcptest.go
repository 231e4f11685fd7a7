// Package mcptest is a real MCP server for tests: the Go SDK's server over
// stdin and stdout, with tools that record every call they receive, so
// that a test can tell whether a call reached it. Tests run it as a
// program (their own binary, dispatched in TestMain or by testscript).
package mcptest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RecordEnv names the file each call is appended to, one JSON line
// {"tool", "arguments"} per call; the server's first line is {"pid"}.
const RecordEnv = "POLC_MCPTEST_RECORD"

// Schemas are the input schemas of the tools, as the server lists them.
var Schemas = map[string]map[string]any{
	"echo": {"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}},
		"required": []any{"text"}, "additionalProperties": false},
	"danger": {"type": "object", "properties": map[string]any{"target": map[string]any{"type": "string"}}},
	"fail":   {"type": "object"},
	"sleep":  {"type": "object", "properties": map[string]any{"ms": map[string]any{"type": "integer"}}},
	"big":    {"type": "object", "properties": map[string]any{"bytes": map[string]any{"type": "integer"}}},
	// Names a coding agent cannot take as part of a tool name: the proxy
	// must not offer them.
	"dotted.name":              {"type": "object"},
	strings.Repeat("long", 16): {"type": "object"},
}

// OfferedTools are the tools whose names a proxy can offer as
// SERVER__TOOL (for a short server name).
var OfferedTools = []string{"big", "danger", "echo", "fail", "sleep"}

// Main serves the tools on stdin and stdout until stdin ends, and returns
// the exit status.
func Main() int {
	rec := &recorder{path: os.Getenv(RecordEnv)}
	rec.write(map[string]any{"pid": os.Getpid()})
	s := mcp.NewServer(&mcp.Implementation{Name: "polc-mcptest", Version: "1.0.0"}, nil)
	for name, schema := range Schemas {
		s.AddTool(&mcp.Tool{Name: name, Description: "the test tool " + name, InputSchema: schema}, rec.handler(name))
	}
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

type recorder struct {
	path string
	mu   sync.Mutex
}

// write appends v as one line to the record file.
func (r *recorder) write(v any) {
	if r.path == "" {
		return
	}
	b, _ := json.Marshal(v)
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	f.Write(append(b, '\n'))
}

func (r *recorder) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args map[string]any
		if len(req.Params.Arguments) > 0 {
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				return nil, err
			}
		}
		r.write(map[string]any{"tool": name, "arguments": args})
		text := func(s string) *mcp.CallToolResult {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
		}
		switch name {
		case "echo":
			s, ok := args["text"].(string)
			if !ok {
				// As a server that checks its arguments answers.
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "echo: text must be a string"}
			}
			return text(s), nil
		case "danger":
			// Writes the file target names, when it names one: what a
			// sandbox must stop outside the policy's grants.
			if target, _ := args["target"].(string); target != "" && filepath.IsAbs(target) {
				if err := os.WriteFile(target, []byte("danger\n"), 0o644); err != nil {
					return text("cannot write " + target + ": " + err.Error()), nil
				}
				return text("wrote " + target), nil
			}
			return text("danger done"), nil
		case "fail":
			r := text("the upstream tool failed")
			r.IsError = true
			return r, nil
		case "sleep":
			ms, _ := args["ms"].(float64)
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return text("slept " + strconv.Itoa(int(ms))), nil
		case "big":
			n, _ := args["bytes"].(float64)
			return text(strings.Repeat("x", int(n))), nil
		}
		return text("called " + name), nil
	}
}

// Calls reads the record file: the calls received, in order, and the
// server's pid (the last one started, when it was restarted).
func Calls(path string) (calls []map[string]any, pid int) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if p, ok := m["pid"].(float64); ok {
			pid = int(p)
			continue
		}
		calls = append(calls, m)
	}
	return calls, pid
}
