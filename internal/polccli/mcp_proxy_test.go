package polccli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"polc.dev/polc/internal/testutil/mcptest"
	"polc.dev/polc/normalize"
	"polc.dev/polc/sandbox"
)

// mcpProxyPolicy allows the upstream server up's tools but danger, and
// echo through bash.
const mcpProxyPolicy = `package p

policies: "mcp-proxy": {
	version: "1.0.0"
	principals: ["agent:mcp"]
	tenants: ["acme"]
	actions: allow: ["bash", "mcp"]
	subprocess: {
		mode: "allowlist"
		allow: ["echo *"]
	}
	mcp: {
		servers: [{server: "up", tools: ["*"]}]
		deny: ["up/danger"]
	}
}
`

// mcpProxySetup compiles mcpProxyPolicy in a new directory and writes
// session.yaml with profile, declaring the test MCP server (this test
// binary, mcptest) as up, recording its calls to calls.jsonl. It returns
// the directory and the record file.
func mcpProxySetup(t *testing.T, profile string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(mcpProxyPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := Run(context.Background(), []string{"compile", "policy.cue", "-o", "out"}, e); code != 0 {
		t.Fatalf("compile: %d\n%s", code, stderr.String())
	}
	rec := filepath.Join(dir, "calls.jsonl")
	writeFile(t, filepath.Join(dir, "session.yaml"), mcpProxySession(profile, rec, ""))
	return dir, rec
}

// mcpProxySession is a session file declaring the test server as up,
// with extra appended.
func mcpProxySession(profile, rec, extra string) string {
	exe, _ := os.Executable()
	return fmt.Sprintf(`snapshot: out/snapshots/mcp-proxy.json
profile: %s
workspace: ws
principal: agent:mcp
tenant: acme
mcp_servers:
  up:
    command: [%q]
    env: {%s: %s, %s: %q}
%s`, profile, exe, polcTestMainEnv, mcpUpstreamMain, mcptest.RecordEnv, rec, extra)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// upstreamCalls are the names of the tools the test server was called
// with, in order.
func upstreamCalls(rec string) []string {
	calls, _ := mcptest.Calls(rec)
	var names []string
	for _, c := range calls {
		names = append(names, fmt.Sprint(c["tool"]))
	}
	return names
}

func resultText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestMCPProxy runs the real polc mcp over stdio, governed, with a
// session declaring the real test MCP server: polc offers each of its
// tools as up__TOOL with the upstream's own input schema (not those whose
// names a coding agent cannot take, which it warns about), and a call is
// the mcp action, decided by the policy's MCP rules: the allowed echo
// returns the upstream's content, the denied danger is a tool error and
// never reaches the server, an upstream tool error is a failed outcome
// with its class and the upstream's text. The chain records each call as
// an mcp action on up/TOOL.
func TestMCPProxy(t *testing.T) {
	dir, rec := mcpProxySetup(t, "governed")
	cs, _, stderr := connectStdio(t, dir, "session.yaml", "--evidence", "ev")
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, tool := range res.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		var s any
		json.Unmarshal(b, &s)
		got[tool.Name] = s
		if strings.Contains(tool.Name, "__") && !strings.Contains(tool.Description, "governed by polc (action mcp:up/") {
			t.Errorf("%s: description %q", tool.Name, tool.Description)
		}
	}
	want := map[string]any{}
	for _, d := range normalize.BuiltinDescriptors() {
		if d.ID != "mcp" { // offered as each upstream tool instead
			var s any
			json.Unmarshal(d.Arguments, &s)
			want[d.ID] = s
		}
	}
	for _, name := range mcptest.OfferedTools {
		b, _ := json.Marshal(mcptest.Schemas[name])
		var s any
		json.Unmarshal(b, &s)
		want["up__"+name] = s
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tools:\n%v\nwant\n%v", got, want)
	}
	outcomeRecords := map[string][]string{}
	keep := func(tool string, r *mcp.CallToolResult) {
		meta, _ := r.Meta[outcomeMetaKey].(map[string]any)
		ids, _ := meta["records"].([]any)
		for _, id := range ids {
			outcomeRecords[tool] = append(outcomeRecords[tool], fmt.Sprint(id))
		}
	}
	callAll(t, cs, []mcpCall{
		{tool: "up__echo", args: map[string]any{"text": "hello upstream"}, kind: "succeeded",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				keep("up__echo", r)
				if resultText(r) != "hello upstream" || len(r.Content) != 1 {
					t.Errorf("echo: %q", resultText(r))
				}
			}},
		{tool: "up__danger", args: map[string]any{"target": "prod"}, kind: "denied", reason: "denied:mcp.deny:up/danger",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				keep("up__danger", r)
				if sc["call_executed"] != false {
					t.Errorf("danger: %v", sc)
				}
			}},
		{tool: "up__fail", kind: "failed", reason: "mcp_tool_error",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if sc["class"] != "mcp_tool_error" || !strings.Contains(resultText(r), "\nthe upstream tool failed") {
					t.Errorf("fail: %v %q", sc, resultText(r))
				}
			}},
		{tool: "up__big", args: map[string]any{"bytes": 2 << 20}, kind: "succeeded",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if n := len(resultText(r)); n > 1<<20+100 || !strings.Contains(resultText(r), "[polc: the result was cut") {
					t.Errorf("big: %d bytes", n)
				}
			}},
		// The upstream's own refusal of its arguments: the executor ran
		// the call, the server answered a JSON-RPC error.
		{tool: "up__echo", args: map[string]any{"text": 3}, kind: "failed", reason: "mcp_protocol_error",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if !strings.Contains(resultText(r), "text must be a string") {
					t.Errorf("echo 3: %q", resultText(r))
				}
			}},
	})
	if calls := upstreamCalls(rec); !reflect.DeepEqual(calls, []string{"echo", "fail", "big", "echo"}) {
		t.Errorf("the upstream server received %v (danger was denied)", calls)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	_, chainData := verifyClosedChain(t, dir)
	// Each call is an mcp operation: the allowed echo's records end in
	// callable_completed, the denied danger's in operation_denied by the
	// policy's mcp.deny rule.
	records := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(chainData)), "\n") {
		var r map[string]any
		json.Unmarshal([]byte(line), &r)
		records[fmt.Sprint(r["record_id"])] = fmt.Sprint(r["record_type"], " ", r["payload_json"])
	}
	for tool, want := range map[string][]string{"up__echo": {`"tool_id":"mcp"`, "callable_completed"}, "up__danger": {`"tool_id":"mcp"`, "mcp.deny:up/danger", "operation_denied"}} {
		var trail []string
		for _, id := range outcomeRecords[tool] {
			trail = append(trail, records[id])
		}
		for _, w := range want {
			if !strings.Contains(strings.Join(trail, "\n"), w) {
				t.Errorf("%s: its records %v do not hold %s", tool, trail, w)
			}
		}
	}
	for _, warn := range []string{`tool "dotted.name" is not offered`, `tool "` + strings.Repeat("long", 16) + `" is not offered`} {
		if !strings.Contains(stderr.String(), warn) {
			t.Errorf("no warning %s in %s", warn, stderr.String())
		}
	}
}

// TestMCPProxyUpstreamKilled: once the upstream server is killed, a call
// to its tools is a tool error of class mcp_unavailable — no hang, no
// panic — while polc mcp goes on serving its other tools and closes
// cleanly.
func TestMCPProxyUpstreamKilled(t *testing.T) {
	dir, rec := mcpProxySetup(t, "governed")
	cs, cmd, stderr := connectStdio(t, dir, "session.yaml", "--evidence", "ev", "--timeout", "20s")
	callAll(t, cs, []mcpCall{{tool: "up__echo", args: map[string]any{"text": "before"}, kind: "succeeded"}})
	_, pid := mcptest.Calls(rec)
	if pid == 0 {
		t.Fatal("no upstream pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "up__echo", Arguments: map[string]any{"text": "after"}})
		if err != nil {
			t.Fatalf("polc mcp broke: %v\n%s", err, stderr.String())
		}
		sc, _ := r.StructuredContent.(map[string]any)
		if !r.IsError {
			t.Fatalf("a call to the killed server succeeded: %q", resultText(r))
		}
		if sc["kind"] == "failed" && sc["class"] == "mcp_unavailable" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a call to the killed server: %v", sc)
		}
		time.Sleep(50 * time.Millisecond)
	}
	callAll(t, cs, []mcpCall{
		{tool: "bash", args: map[string]any{"command": "echo still here"}, kind: "succeeded"},
		{tool: "up__echo", args: map[string]any{"text": "again"}, kind: "failed", reason: "mcp_unavailable"},
	})
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("polc mcp exited %d\n%s", code, stderr.String())
	}
	verifyClosedChain(t, dir)
}

// TestMCPProxyCloseEndsUpstream: the session's close ends the upstream
// server.
func TestMCPProxyCloseEndsUpstream(t *testing.T) {
	dir, rec := mcpProxySetup(t, "minimal")
	cs, _, stderr := connectStdio(t, dir, "session.yaml")
	callAll(t, cs, []mcpCall{{tool: "up__echo", args: map[string]any{"text": "x"}, kind: "succeeded"}})
	_, pid := mcptest.Calls(rec)
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("the upstream server %d is still there after the session closed: %v", pid, err)
	}
}

// TestConcurrentMCPProxyCalls drives one polc mcp session (in this
// process, so that the race detector sees polc's side) with concurrent
// calls of an upstream tool: each gets its own answer, every call
// reaches the server once, and denied calls none.
func TestConcurrentMCPProxyCalls(t *testing.T) {
	dir, rec := mcpProxySetup(t, "governed")
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	stderr := &lockedBuffer{}
	e := &env{stdin: serverIn, stdout: serverOut, stderr: stderr, dir: dir}
	p := &mcpParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", now: "2026-03-15T12:00:00Z", idSeed: 9}, grace: defaultCloseGrace}
	done := make(chan error, 1)
	go func() {
		err := runMCP(context.Background(), e, p)
		serverOut.Close()
		done <- err
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "polc-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	const callers = 32
	var wg sync.WaitGroup
	errs := make(chan string, 4*callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("caller %d", i)
			r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "up__echo", Arguments: map[string]any{"text": want}})
			if err != nil {
				errs <- err.Error()
			} else if r.IsError || resultText(r) != want {
				errs <- fmt.Sprintf("caller %d got %q", i, resultText(r))
			}
			r, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "up__danger", Arguments: map[string]any{}})
			if err != nil {
				errs <- err.Error()
			} else if sc, _ := r.StructuredContent.(map[string]any); sc["kind"] != "denied" {
				errs <- fmt.Sprintf("danger %d: %v", i, sc)
			}
		}()
	}
	wg.Wait()
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "up__sleep", Arguments: map[string]any{"ms": 500}}); err != nil || r.IsError {
				errs <- fmt.Sprintf("sleep: %v %v", r, err)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > 3*time.Second {
		errs <- fmt.Sprintf("eight 500ms upstream calls took %v: not concurrent", d)
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	cs.Close()
	if err := <-done; err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	calls := upstreamCalls(rec)
	if n := len(slices.DeleteFunc(slices.Clone(calls), func(s string) bool { return s != "echo" })); n != callers || slices.Contains(calls, "danger") {
		t.Errorf("the upstream received %d echo calls (want %d) and %v", n, callers, calls)
	}
	verifyClosedChain(t, dir)
}

// TestMCPServersRefused: a bad mcp_servers declaration is a positioned
// invalid_input error and exit 2 for polc mcp and polc serve,
// before anything starts.
func TestMCPServersRefused(t *testing.T) {
	dir, rec := mcpProxySetup(t, "minimal")
	head := "snapshot: out/snapshots/mcp-proxy.json\nprofile: minimal\nworkspace: ws\nprincipal: agent:mcp\ntenant: acme\n"
	cases := []struct {
		name, session, want string
	}{
		{"unknown field", head + "mcp_servers:\n  up:\n    command: [x]\n    cwd: /tmp\n", `session.yaml:9:5: invalid_input: unknown field "cwd"`},
		{"double underscore", head + "mcp_servers:\n  a__b: {command: [x]}\n", `session.yaml:7:3: invalid_input: mcp_servers: server name "a__b": want 1 to 32 letters, digits and '-', with single '_' between them`},
		{"trailing underscore", head + "mcp_servers:\n  a_: {command: [x]}\n", `session.yaml:7:3: invalid_input: mcp_servers: server name "a_": want`},
		{"dot", head + "mcp_servers:\n  a.b: {command: [x]}\n", `session.yaml:7:3: invalid_input: mcp_servers: server name "a.b": want`},
		{"missing command", head + "mcp_servers:\n  up: {env: {A: b}}\n", `session.yaml:7:3: invalid_input: mcp_servers.up: needs a command`},
		{"empty command", head + "mcp_servers:\n  up: {command: []}\n", `session.yaml:7:8: invalid_input: mcp_servers.up.command: needs a program`},
		{"command not a list", head + "mcp_servers:\n  up: {command: server}\n", `session.yaml:7:8: invalid_input: mcp_servers.up.command: want a list`},
		{"number argument", head + "mcp_servers:\n  up: {command: [x, 3]}\n", `session.yaml:7:21: invalid_input: mcp_servers.up.command[1]: want a string`},
		{"null server", head + "mcp_servers:\n  up: null\n", `session.yaml:7:3: invalid_input: mcp_servers.up: want a mapping`},
		{"bad env name", head + "mcp_servers:\n  up: {command: [x], env: {1A: b}}\n", `session.yaml:7:28: invalid_input: mcp_servers.up.env: "1A" is not a variable name`},
		{"env number", head + "mcp_servers:\n  up: {command: [x], env: {A: 1}}\n", `session.yaml:7:28: invalid_input: mcp_servers.up.env.A: want a string`},
		{"not a mapping", head + "mcp_servers: [up]\n", `session.yaml:6:1: invalid_input: mcp_servers: want a mapping`},
		{"not found", head + "mcp_servers:\n  up: {command: [polc-no-such-server]}\n", `session.yaml:7:3: invalid_input: mcp_servers.up: command "polc-no-such-server": not found in the server's PATH`},
		{"cannot start", head + "mcp_servers:\n  up: {command: [./missing/server]}\n", `session.yaml:7:3: invalid_input: mcp_servers.up: cannot start: fork/exec ` + filepath.Join(dir, "missing", "server")},
		{"exits", head + "mcp_servers:\n  up: {command: [/bin/sh, -c, 'exit 3']}\n", `session.yaml:7:3: invalid_input: mcp_servers.up: cannot start: initialize: the server exited (exit status 3)`},
	}
	for _, c := range cases {
		for _, cmd := range [][]string{{"mcp", "session.yaml"}, {"serve", "session.yaml", "--listen", "unix:" + filepath.Join(dir, "s.sock")}} {
			t.Run(c.name+"/"+cmd[0], func(t *testing.T) {
				writeFile(t, filepath.Join(dir, "session.yaml"), c.session)
				var stdout, stderr lockedBuffer
				e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
				if code := Run(context.Background(), cmd, e); code != 2 || !strings.HasPrefix(stderr.String(), c.want) {
					t.Errorf("exit %d, stderr %q; want 2, %q", code, stderr.String(), c.want)
				}
			})
		}
	}
	if calls, pid := mcptest.Calls(rec); pid != 0 || len(calls) != 0 {
		t.Errorf("a refused session started the server")
	}
}

// TestRunMCPProxy: polc run calls a declared server's tools through the
// mcp action, mcp:<server>/<tool> or mcp with server and tool: the
// policy decides, an allowed call returns the upstream's content, a
// denied one never reaches the server. The scenario is checked first: a
// server it does not declare, or the mcp action with no server declared,
// is a positioned error and nothing starts.
func TestRunMCPProxy(t *testing.T) {
	dir, rec := mcpProxySetup(t, "minimal")
	writeFile(t, filepath.Join(dir, "scenario.yaml"), mcpProxySession("minimal", rec, `actions:
  - {id: short, action: "mcp:up/echo", arguments: {arguments: {text: hi}}, expect: succeeded}
  - {id: long, action: mcp, arguments: {server: up, tool: echo, arguments: {text: there}}, expect: succeeded}
  - {id: danger, action: "mcp:up/danger", expect: {kind: denied, reason: "denied:mcp.deny:up/danger"}}
  - {id: fail, action: "mcp:up/fail", expect: {kind: failed, reason: mcp_tool_error}}
  - {id: missing, action: "mcp:up/nope", expect: {kind: failed, reason: mcp_unknown_tool}}
`))
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	if code := Run(context.Background(), []string{"run", "scenario.yaml", "--show-output", "--format", "json"}, e); code != 0 {
		t.Fatalf("polc run: %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	var rep struct {
		Outcomes []struct {
			ID     string
			Kind   string
			Output map[string]any
		}
	}
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatal(err)
	}
	if o := rep.Outcomes[0]; !strings.Contains(fmt.Sprint(o.Output), "text:hi") {
		t.Errorf("short: %+v", o)
	}
	if calls := upstreamCalls(rec); !reflect.DeepEqual(calls, []string{"echo", "echo", "fail"}) {
		t.Errorf("the upstream server received %v", calls)
	}

	head := "snapshot: out/snapshots/mcp-proxy.json\nprofile: minimal\nworkspace: ws\nprincipal: agent:mcp\n"
	for _, c := range []struct{ scenario, want string }{
		{head + "actions:\n  - {id: a, action: \"mcp:up/echo\"}\n", `scenario.yaml:6:13: invalid_input: actions[0] (id a): action "mcp:up/echo": the scenario declares no mcp_servers`},
		{mcpProxySession("minimal", rec, "actions:\n  - {id: a, action: \"mcp:down/echo\"}\n"), `scenario.yaml:11:13: invalid_input: actions[0] (id a): mcp server "down" is not declared in mcp_servers (declared: up)`},
		{mcpProxySession("minimal", rec, "actions:\n  - {id: a, action: mcp, arguments: {server: down, tool: x}}\n"), `scenario.yaml:11:38: invalid_input: actions[0] (id a): mcp server "down" is not declared`},
		{mcpProxySession("minimal", rec, "actions:\n  - {id: a, action: \"mcp:up\"}\n"), `scenario.yaml:11:13: invalid_input: actions[0] (id a): action "mcp:up": want mcp:<server>/<tool>`},
		{mcpProxySession("minimal", rec, "actions:\n  - {id: a, action: \"mcp:up/echo\", arguments: {tool: x}}\n"), `scenario.yaml:11:13: invalid_input: actions[0] (id a): action "mcp:up/echo" conflicts with argument tool=x`},
		{mcpProxySession("minimal", rec, "actions:\n  - {id: a, action: \"mcp:up/echo\", arguments: {argz: {}}}\n"), `scenario.yaml:11:48: invalid_input: actions[0] (id a): arguments of mcp: unknown argument "argz"`},
	} {
		os.Remove(rec)
		writeFile(t, filepath.Join(dir, "scenario.yaml"), c.scenario)
		stdout, stderr = lockedBuffer{}, lockedBuffer{}
		e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
		if code := Run(context.Background(), []string{"run", "scenario.yaml"}, e); code != 2 || !strings.HasPrefix(stderr.String(), c.want) {
			t.Errorf("exit %d, stderr %q; want 2, %q", code, stderr.String(), c.want)
		}
		if _, pid := mcptest.Calls(rec); pid != 0 {
			t.Errorf("a refused scenario started the server")
		}
	}
}

// TestMCPProxyLandlock: under the landlock backend the upstream server
// runs, for its whole life, in the sandbox a call of the session's policy
// gets: its program must be one the policy lets run (here the test
// server, copied into the workspace's bin, which the policy grants
// execute on), and it writes where the policy grants writes and nowhere
// else, whatever a tool call asks of it.
func TestMCPProxyLandlock(t *testing.T) {
	if os.Getenv("POLC_REQUIRE_SANDBOX") == "" {
		if f, _ := sandbox.Probe().Facet(sandbox.FacetFilesystem); f.State == sandbox.Unsupported {
			t.Skipf("the kernel cannot hold a process here: %+v", f)
		}
	}
	dir := t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	writeFile(t, filepath.Join(dir, "policy.cue"), `package p

policies: "mcp-proxy": {
	version: "1.0.0"
	principals: ["agent:mcp"]
	tenants: ["acme"]
	actions: allow: ["mcp"]
	filesystem: {
		read: ["**"]
		write: ["rec/**"]
		execute: ["bin/**"]
	}
	mcp: servers: [{server: "up", tools: ["*"]}]
}
`)
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	if code := Run(context.Background(), []string{"compile", "policy.cue", "-o", "out"}, e); code != 0 {
		t.Fatalf("compile: %d\n%s", code, stderr.String())
	}
	exe, _ := os.Executable()
	bin := filepath.Join(dir, "ws", "bin", "upstream")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.MkdirAll(filepath.Join(dir, "ws", "rec"), 0o755)
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, bin, string(data))
	os.Chmod(bin, 0o755)
	rec := filepath.Join(dir, "ws", "rec", "calls.jsonl")
	writeFile(t, filepath.Join(dir, "session.yaml"), fmt.Sprintf(`snapshot: out/snapshots/mcp-proxy.json
profile: minimal
workspace: ws
principal: agent:mcp
tenant: acme
backend: landlock
mcp_servers:
  up:
    command: [ws/bin/upstream]
    env: {%s: %s, %s: %q}
`, polcTestMainEnv, mcpUpstreamMain, mcptest.RecordEnv, rec))
	cs, _, serr := connectStdio(t, dir, "session.yaml")
	inside, outside := filepath.Join(dir, "ws", "rec", "granted.txt"), filepath.Join(dir, "outside.txt")
	callAll(t, cs, []mcpCall{
		{tool: "up__echo", args: map[string]any{"text": "contained"}, kind: "succeeded"},
		{tool: "up__danger", args: map[string]any{"target": inside}, kind: "succeeded",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if resultText(r) != "wrote "+inside {
					t.Errorf("a write the policy grants: %q", resultText(r))
				}
			}},
		{tool: "up__danger", args: map[string]any{"target": outside}, kind: "succeeded",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if !strings.HasPrefix(resultText(r), "cannot write "+outside) {
					t.Errorf("a write the policy does not grant: %q", resultText(r))
				}
			}},
	})
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, serr.String())
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Errorf("the contained server wrote outside its grants: %v", err)
	}
	if _, err := os.Stat(inside); err != nil {
		t.Errorf("the contained server could not write where the policy grants: %v", err)
	}

	// A program the policy does not let run: the session is refused.
	writeFile(t, filepath.Join(dir, "session.yaml"), fmt.Sprintf(`snapshot: out/snapshots/mcp-proxy.json
profile: minimal
workspace: ws
principal: agent:mcp
tenant: acme
backend: landlock
mcp_servers:
  up:
    command: [%q]
    env: {%s: %s}
`, exe, polcTestMainEnv, mcpUpstreamMain))
	stderr = lockedBuffer{}
	e = &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	if code := Run(context.Background(), []string{"mcp", "session.yaml"}, e); code != 2 ||
		!strings.Contains(stderr.String(), "\nsession.yaml:8:3: invalid_input: mcp_servers.up: cannot start: initialize: the server exited (exit status 126)\n") ||
		!strings.HasPrefix(stderr.String(), "polc: mcp server up: polc sandbox: exec ") {
		t.Errorf("a server the policy does not let run: exit %d, %q", code, stderr.String())
	}
}

// TestServeMCPProxy: polc serve's session calls a declared server's
// tools through the same action: POST /v1/execute of mcp:up/echo runs on
// the server, mcp:up/danger is denied and never reaches it, and the close
// ends the server.
func TestServeMCPProxy(t *testing.T) {
	dir, rec := mcpProxySetup(t, "governed")
	stderr := &lockedBuffer{}
	e := &env{stdin: strings.NewReader(""), stdout: &lockedBuffer{}, stderr: stderr, dir: dir}
	sock := filepath.Join(dir, "polc.sock")
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev"},
		listen: "unix:polc.sock", ready: func(addr string) { ready <- addr }}
	go func() { done <- runServe(context.Background(), e, p) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, stderr.String())
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(path, body string) map[string]any {
		t.Helper()
		resp, err := client.Post("http://polc"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %v", path, body, resp.StatusCode, err)
		}
		return m
	}
	m := post("/v1/execute", `{"action":"mcp:up/echo","arguments":{"arguments":{"text":"served"}}}`)
	if m["kind"] != "succeeded" || !strings.Contains(fmt.Sprint(m["result"]), "text:served") {
		t.Errorf("echo: %v", m)
	}
	if m := post("/v1/execute", `{"action":"mcp:up/danger","arguments":{"arguments":{}}}`); m["kind"] != "denied" || m["call_executed"] != false {
		t.Errorf("danger: %v", m)
	}
	_, pid := mcptest.Calls(rec)
	post("/v1/close", `{}`)
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
	if calls := upstreamCalls(rec); !reflect.DeepEqual(calls, []string{"echo"}) {
		t.Errorf("the upstream server received %v", calls)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("the upstream server %d is still there after the close: %v", pid, err)
	}
}

// TestMCPServerFilesProtected: a server whose program and script lie in
// the workspace, where the policy lets the agent write. The agent used
// to rewrite them (write_file, or a contained shell under landlock) and
// every later call of the server ran its code. Now the program and each
// argument naming an existing file are protected like the polc
// executable: a write to them is denied guard:protected_path, the kernel
// refuses a contained process's own write, and nothing changes them;
// another file of the workspace stays writable. Under landlock the
// carve-out takes the files whole, so such a server cannot start and the
// session is refused.
func TestMCPServerFilesProtected(t *testing.T) {
	for _, backend := range []string{"inprocess", "landlock"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "landlock" && os.Getenv("POLC_REQUIRE_SANDBOX") == "" {
				if f, _ := sandbox.Probe().Facet(sandbox.FacetFilesystem); f.State == sandbox.Unsupported {
					t.Skipf("the kernel cannot hold a process here: %+v", f)
				}
			}
			dir, _ := filepath.EvalSymlinks(t.TempDir())
			writeFile(t, filepath.Join(dir, "policy.cue"), `package p

policies: "mcp-proxy": {
	version: "1.0.0"
	principals: ["agent:mcp"]
	tenants: ["acme"]
	actions: allow: ["mcp", "write_file", "bash"]
	filesystem: {read: ["**"], write: ["**"], execute: ["**"]}
	subprocess: {mode: "allowlist", allow: ["sh *", "echo *"], shell: "allow"}
	mcp: servers: [{server: "up", tools: ["*"]}]
}
`)
			var stdout, stderr lockedBuffer
			e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
			if code := Run(context.Background(), []string{"compile", "policy.cue", "-o", "out"}, e); code != 0 {
				t.Fatalf("compile: %d\n%s", code, stderr.String())
			}
			exe, _ := os.Executable()
			data, err := os.ReadFile(exe)
			if err != nil {
				t.Fatal(err)
			}
			bin, script := filepath.Join(dir, "ws", "bin", "upstream"), filepath.Join(dir, "ws", "srv.conf")
			os.MkdirAll(filepath.Dir(bin), 0o755)
			writeFile(t, bin, string(data))
			os.Chmod(bin, 0o755)
			writeFile(t, script, "server\n")
			writeFile(t, filepath.Join(dir, "session.yaml"), fmt.Sprintf(`snapshot: out/snapshots/mcp-proxy.json
profile: minimal
workspace: ws
principal: agent:mcp
tenant: acme
backend: %s
mcp_servers:
  up:
    command: [ws/bin/upstream, srv.conf, not-a-file]
    env: {%s: %s}
`, backend, polcTestMainEnv, mcpUpstreamMain))
			if backend == "landlock" {
				// The write grant covers the server's files, so the
				// sandbox carves them out whole: the server cannot run
				// its own program and the session is refused.
				stderr = lockedBuffer{}
				if code := Run(context.Background(), []string{"mcp", "session.yaml"}, e); code != 2 ||
					!strings.Contains(stderr.String(), "invalid_input: mcp_servers.up: cannot start") {
					t.Errorf("a server whose files the policy lets the agent write: exit %d, %q", code, stderr.String())
				}
				return
			}
			cs, _, serr := connectStdio(t, dir, "session.yaml")
			callAll(t, cs, []mcpCall{
				{tool: "up__echo", args: map[string]any{"text": "hi"}, kind: "succeeded"},
				{tool: "write_file", args: map[string]any{"path": "srv.conf", "content": "evil\n"}, kind: "denied", reason: "guard:protected_path"},
				{tool: "write_file", args: map[string]any{"path": "bin/upstream", "content": "evil\n"}, kind: "denied", reason: "guard:protected_path"},
				{tool: "bash", args: map[string]any{"command": "echo ok > other.txt"}, kind: "succeeded"},
				{tool: "bash", args: map[string]any{"command": "echo evil > srv.conf"}, kind: "denied", reason: "guard:protected_path"},
			})
			if err := cs.Close(); err != nil {
				t.Fatalf("polc mcp: %v\n%s", err, serr.String())
			}
			if b, _ := os.ReadFile(script); string(b) != "server\n" {
				t.Errorf("the server's file was changed: %q", b)
			}
			if b, _ := os.ReadFile(bin); string(b) != string(data) {
				t.Error("the server's program was changed")
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "ws", "other.txt")); string(b) != "ok\n" {
				t.Errorf("the control write: %q", b)
			}
		})
	}
}
