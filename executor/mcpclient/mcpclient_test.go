package mcpclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/executor/mcpclient"
	"polc.dev/polc/internal/testutil/mcptest"
)

// serverEnv makes this test binary the test MCP server (TestMain).
const serverEnv = "POLC_MCPCLIENT_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		os.Exit(mcptest.Main())
	}
	os.Exit(m.Run())
}

// upstream is the test server, recording to a file in a new directory.
func upstream(t *testing.T, name string) (mcpclient.Server, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rec := filepath.Join(dir, "calls.jsonl")
	return mcpclient.Server{Name: name, Argv: []string{exe}, Dir: dir,
		Env: []string{serverEnv + "=1", mcptest.RecordEnv + "=" + rec}}, rec
}

func start(t *testing.T, o mcpclient.Options, servers ...mcpclient.Server) *mcpclient.Client {
	t.Helper()
	c, err := mcpclient.Start(servers, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func classOf(err error) string {
	var ec executor.ErrorClass
	if errors.As(err, &ec) {
		return ec.ErrorClass()
	}
	return ""
}

func call(c *mcpclient.Client, server, tool string, arguments map[string]any) (any, error) {
	return c.Call(context.Background(), map[string]any{"server": server, "tool": tool, "arguments": arguments})
}

// TestCall: the tools a real server lists, with their schemas, and each
// kind of answer a call gets.
func TestCall(t *testing.T) {
	srv, rec := upstream(t, "up")
	var warnings []string
	c := start(t, mcpclient.Options{MaxResultBytes: 100, Warn: func(m string) { warnings = append(warnings, m) }}, srv)
	tools := c.Tools()
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
		var schema map[string]any
		if err := json.Unmarshal(tool.InputSchema, &schema); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(mcptest.Schemas[tool.Name])
		var w map[string]any
		json.Unmarshal(want, &w)
		if !reflect.DeepEqual(schema, w) || tool.Server != "up" || tool.Description != "the test tool "+tool.Name {
			t.Errorf("tool %+v: schema %v, want %v", tool, schema, w)
		}
	}
	if want := []string{"big", "danger", "dotted.name", "echo", "fail", strings.Repeat("long", 16), "sleep"}; !reflect.DeepEqual(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %v", warnings)
	}

	res, err := call(c, "up", "echo", map[string]any{"text": "hello"})
	want := map[string]any{"content": []any{map[string]any{"type": "text", "text": "hello"}}}
	if err != nil || !reflect.DeepEqual(res, want) {
		t.Errorf("echo: %v %v, want %v", res, err, want)
	}
	res, err = call(c, "up", "fail", nil)
	if classOf(err) != mcpclient.ClassToolError || !strings.Contains(fmt.Sprint(res), "the upstream tool failed") {
		t.Errorf("fail: %v %v", res, err)
	}
	res, err = call(c, "up", "big", map[string]any{"bytes": 1000})
	if m, _ := res.(map[string]any); err != nil || m["truncated"] != true || len(fmt.Sprint(m["content"])) > 200 {
		t.Errorf("big: %v %v", res, err)
	}
	// A call the server refuses with a JSON-RPC error: its code and
	// message are the result.
	res, err = call(c, "up", "echo", map[string]any{"nope": 1})
	if want := map[string]any{"code": int64(-32602), "message": "echo: text must be a string"}; classOf(err) != mcpclient.ClassProtocolError || !reflect.DeepEqual(res, want) {
		t.Errorf("echo with bad arguments: %#v %v", res, err)
	}
	for _, c2 := range []struct {
		args  map[string]any
		class string
	}{
		{map[string]any{"server": "up", "tool": "nope"}, mcpclient.ClassUnknownTool},
		{map[string]any{"server": "down", "tool": "echo"}, mcpclient.ClassUnknownServer},
		{map[string]any{"server": "up", "tool": "echo", "resource": "r"}, mcpclient.ClassResourceUnsupported},
	} {
		if _, err := c.Call(context.Background(), c2.args); classOf(err) != c2.class {
			t.Errorf("%v: %v, want class %s", c2.args, err, c2.class)
		}
	}
	calls, _ := mcptest.Calls(rec)
	var got []string
	for _, cl := range calls {
		got = append(got, cl["tool"].(string))
	}
	// The calls refused by polc never reached the server.
	if want := []string{"echo", "fail", "big"}; !reflect.DeepEqual(got[:3], want) || len(got) > 4 {
		t.Errorf("the server received %v", got)
	}
}

// TestCallTimeout: a call ends with its context, whatever the server.
func TestCallTimeout(t *testing.T) {
	srv, _ := upstream(t, "up")
	c := start(t, mcpclient.Options{}, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := c.Call(ctx, map[string]any{"server": "up", "tool": "sleep", "arguments": map[string]any{"ms": 60000}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(begin) > 10*time.Second {
		t.Fatalf("%v after %v", err, time.Since(begin))
	}
	// The server goes on serving.
	if _, err := call(c, "up", "echo", map[string]any{"text": "x"}); err != nil {
		t.Fatal(err)
	}
}

// TestServerCrash: once the server is killed its calls fail
// mcp_unavailable, without a hang, and Close still returns.
func TestServerCrash(t *testing.T) {
	srv, rec := upstream(t, "up")
	c := start(t, mcpclient.Options{}, srv)
	_, pid := mcptest.Calls(rec)
	if pid == 0 {
		t.Fatal("no pid recorded")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := call(c, "up", "echo", map[string]any{"text": "x"})
		if classOf(err) == mcpclient.ClassUnavailable && !errors.Is(err, executor.ErrAmbiguous) {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("a call to a killed server: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
}

// TestCloseEndsServerAndCalls: Close ends a call in flight and the
// server, and the process group the server started.
func TestCloseEndsServerAndCalls(t *testing.T) {
	srv, rec := upstream(t, "up")
	c, err := mcpclient.Start([]mcpclient.Server{srv}, mcpclient.Options{CloseTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, pid := mcptest.Calls(rec)
	errc := make(chan error, 1)
	go func() {
		_, err := call(c, "up", "sleep", map[string]any{"ms": 60000})
		errc <- err
	}()
	for calls, _ := mcptest.Calls(rec); len(calls) == 0; calls, _ = mcptest.Calls(rec) {
		time.Sleep(10 * time.Millisecond)
	}
	begin := time.Now()
	c.Close()
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("Close took %v", d)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Error("the call in flight succeeded after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight did not end with Close")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the server %d is still there after Close: %v", pid, err)
	}
	if _, err := call(c, "up", "echo", map[string]any{"text": "x"}); classOf(err) != mcpclient.ClassUnavailable {
		t.Errorf("a call after Close: %v", err)
	}
}

// TestStartFailures: a server that cannot start, exits at once or never
// answers is a StartError, in bounded time, with nothing left running.
func TestStartFailures(t *testing.T) {
	sh := "/bin/sh"
	for name, s := range map[string]mcpclient.Server{
		"missing": {Name: "x", Argv: []string{"/nonexistent/server"}},
		"exits":   {Name: "x", Argv: []string{sh, "-c", "exit 3"}},
		"silent":  {Name: "x", Argv: []string{sh, "-c", "exec sleep 60"}},
		"garbage": {Name: "x", Argv: []string{sh, "-c", "echo not-json; exec sleep 60"}},
	} {
		t.Run(name, func(t *testing.T) {
			begin := time.Now()
			_, err := mcpclient.Start([]mcpclient.Server{s}, mcpclient.Options{StartTimeout: time.Second, CloseTimeout: 200 * time.Millisecond})
			var se *mcpclient.StartError
			if !errors.As(err, &se) || se.Server != "x" {
				t.Fatalf("%v", err)
			}
			if d := time.Since(begin); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestStderrPrefixed: a server's stderr lines reach Options.Stderr with
// its name in front, each line bounded.
func TestStderrPrefixed(t *testing.T) {
	var buf lockedBuffer
	s := mcpclient.Server{Name: "noisy", Argv: []string{"/bin/sh", "-c", "echo first >&2; head -c 10000 /dev/zero | tr '\\0' y >&2; echo >&2; exit 1"}}
	mcpclient.Start([]mcpclient.Server{s}, mcpclient.Options{StartTimeout: 5 * time.Second, Stderr: &buf})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || lines[0] != "polc: mcp server noisy: first" || !strings.HasSuffix(lines[1], " [cut]") || len(lines[1]) > 5000 {
		t.Errorf("stderr %q", buf.String())
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConcurrentCalls: calls from many goroutines each get their own
// answer (the SDK's client session is safe for concurrent use), and run
// together.
func TestConcurrentCalls(t *testing.T) {
	srv, _ := upstream(t, "up")
	c := start(t, mcpclient.Options{}, srv)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			text := fmt.Sprintf("caller %d", i)
			res, err := call(c, "up", "echo", map[string]any{"text": text})
			if err != nil {
				errs <- err
				return
			}
			if got := res.(map[string]any)["content"].([]any)[0].(map[string]any)["text"]; got != text {
				errs <- fmt.Errorf("caller %d got %v", i, got)
			}
		}()
	}
	begin := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := call(c, "up", "sleep", map[string]any{"ms": 500}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("eight 500ms calls took %v: not concurrent", d)
	}
}
