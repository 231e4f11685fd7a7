package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"polc.dev/polc/chain"
)

// lockedBuffer is a bytes.Buffer safe for the server's and the test's
// goroutines.
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

// TestServe runs a certifiable session of the shipped demo agent over a
// Unix socket: allowed actions run (a file is written and read back),
// denied ones do not (the denied rm leaves the file), malformed requests
// are 400s with a code, the wrong method a 405; /v1/close closes the task
// boundary, writes the certificate and stops the server, whose chain
// verifies closed; the socket is gone afterwards.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	stderr := e.stderr.(*lockedBuffer)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	sock := filepath.Join(dir, "polc.sock")
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", cert: "cert.json"},
		listen: "unix:polc.sock", ready: func(addr string) { ready <- addr }}
	go func() { done <- runServe(context.Background(), e, p) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, stderr.String())
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://polc"+path, strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: %s", method, path, b)
		}
		return resp.StatusCode, m
	}
	execute := func(body string) map[string]any {
		t.Helper()
		status, m := call("POST", "/v1/execute", body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %v", body, status, m)
		}
		return m
	}

	if m := execute(`{"action":"write_file","arguments":{"path":"notes/todo.txt","content":"ship polc\n"}}`); m["kind"] != "succeeded" {
		t.Fatalf("write: %v", m)
	}
	m := execute(`{"action":"read_file","arguments":{"path":"notes/todo.txt"}}`)
	if res, _ := m["result"].(map[string]any); m["kind"] != "succeeded" || res["content"] != "ship polc\n" || len(m["records"].([]any)) == 0 {
		t.Fatalf("read: %v", m)
	}
	if m := execute(`{"action":"bash","arguments":{"command":"rm -rf notes"},"timeout":"10s"}`); m["kind"] != "denied" || m["call_executed"] != false {
		t.Fatalf("rm: %v", m)
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "notes", "todo.txt")); err != nil {
		t.Fatalf("the denied rm ran: %v", err)
	}
	for body, code := range map[string]string{
		`{"action":"read_file","argumentz":{}}`:  "invalid_input",
		`{"Action":"read_file"}`:                 "invalid_input",
		`{"action":"read_file","action":"bash"}`: "invalid_input",
		`{"arguments":{}}`:                       "invalid_input",
		`{"action":"bash","timeout":"soon"}`:     "invalid_input",
		`[1]`:                                    "invalid_input",
		`{"action":"bash"} {}`:                   "invalid_input",
	} {
		if status, m := call("POST", "/v1/execute", body); status != http.StatusBadRequest || m["error"].(map[string]any)["code"] != code {
			t.Errorf("%s: %d %v", body, status, m)
		}
	}
	if status, _ := call("GET", "/v1/execute", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/execute: %d", status)
	}
	if status, _ := call("GET", "/v2/anything", ""); status != http.StatusNotFound {
		t.Errorf("GET /v2/anything: %d", status)
	}
	status, m := call("GET", "/v1/session", "")
	if status != http.StatusOK || m["profile"] != "certifiable" || m["principal"] != "agent:demo" || m["boundary"] == nil || m["closed"] != false {
		t.Fatalf("session: %d %v", status, m)
	}
	chainID := m["boundary"].(map[string]any)["chain_id"].(string)

	// Concurrent requests: each its own attempt, one linear chain (checked
	// below by verifying it).
	var wg sync.WaitGroup
	kinds := make(chan any, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, m := call("POST", "/v1/execute", `{"action":"read_file","arguments":{"path":"notes/todo.txt"}}`)
			kinds <- m["kind"]
		}()
	}
	wg.Wait()
	close(kinds)
	for k := range kinds {
		if k != "succeeded" {
			t.Errorf("concurrent read: %v", k)
		}
	}

	status, m = call("POST", "/v1/close", "")
	if status != http.StatusOK || m["certificate"] == nil || m["evidence"] == nil {
		t.Fatalf("close: %d %v", status, m)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cert.json")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "ev", chainID+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := chain.Verify(f, chain.VerifyOptions{ChainID: chainID, RequireClosed: true})
	if err != nil || !res.OK() || res.Records < 8 {
		t.Fatalf("chain: %v %+v", err, res)
	}
}

// TestServeListen: a Unix socket or a loopback TCP address; anything else
// is a usage error.
func TestServeListen(t *testing.T) {
	for listen, ok := range map[string]bool{
		"unix:polc.sock": true, "unix:/tmp/x.sock": true, "tcp:127.0.0.1:0": true, "tcp:[::1]:8080": true, "tcp:localhost:9": true,
		"tcp:0.0.0.0:8080": false, "tcp::8080": false, "tcp:10.0.0.1:80": false, "tcp:example.com:80": false,
		"unix:": false, "http://x": false, "polc.sock": false, "": false,
	} {
		_, _, err := parseListen("/dir", listen)
		if (err == nil) != ok {
			t.Errorf("%q: %v", listen, err)
		}
	}
}

// TestServeClosesOnSignal: when its context ends (SIGINT, SIGTERM) the
// server stops taking requests and closes the session as /v1/close does:
// the governed chain ends with task_closed.
func TestServeClosesOnSignal(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: governed\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev"}, listen: "tcp:127.0.0.1:0",
		ready: func(addr string) { ready <- addr }}
	go func() { done <- runServe(ctx, e, p) }()
	addr := <-ready
	resp, err := http.Post("http://"+addr+"/v1/execute", "application/json", strings.NewReader(`{"action":"write_file","arguments":{"path":"a","content":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, e.stderr.(*lockedBuffer).String())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ev", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("chains: %v", files)
	}
	f, _ := os.Open(files[0])
	defer f.Close()
	res, err := chain.Verify(f, chain.VerifyOptions{RequireClosed: true})
	if err != nil || !res.OK() {
		t.Fatalf("chain: %v %+v", err, res)
	}
	if _, err := http.Get("http://" + addr + "/v1/session"); err == nil {
		t.Fatal("the server still answers")
	}
}

// FuzzServeDecodeBody: the request body parser never panics, and what it
// accepts is one JSON object with only the declared members, each once,
// that encoding/json decodes to the same request.
func FuzzServeDecodeBody(f *testing.F) {
	for _, s := range []string{`{"action":"bash","arguments":{"command":"ls"},"timeout":"1s"}`, `{}`, ``, `{"action":"a","action":"b"}`,
		`{"Action":"a"}`, `[]`, `{"action":1}`, `{"action":"a"} x`, `{"arguments":{"a":{"b":[1,2,{"c":null}]}}}`, "\ufeff{}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req executeRequest
		if err := decodeBody(body, &req); err != nil {
			return
		}
		trimmed := bytes.TrimSpace(body)
		if len(trimmed) == 0 {
			return
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &members); err != nil {
			t.Fatalf("accepted %q, which is not one JSON object: %v", body, err)
		}
		for name := range members {
			if name != "action" && name != "arguments" && name != "timeout" {
				t.Fatalf("accepted %q with member %q", body, name)
			}
		}
		var again executeRequest
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.UseNumber()
		if err := dec.Decode(&again); err != nil || again.Action != req.Action || again.Timeout != req.Timeout || len(again.Arguments) != len(req.Arguments) {
			t.Fatalf("accepted %q as %+v; encoding/json: %+v %v", body, req, again, err)
		}
	})
}
