package polccli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/certverifycli"
	"polc.dev/polc/normalize"
	"polc.dev/polc/sandbox"
)

// mcpPolicy is the policy of the polc mcp tests: each built-in allowed for
// some arguments and refused for others, a gate that escalates git push,
// and the loopback address (not the name localhost) on the network
// allowlist.
const mcpPolicy = `package p

policies: "mcp-agent": {
	version: "1.0.0"
	principals: ["agent:mcp"]
	tenants: ["acme"]
	actions: {
		allow: ["bash", "read_file", "write_file", "edit_file", "http_get"]
		deny: ["write_file:**/.env"]
		approve: [{pattern: "bash:git push *", approver: "release-manager", expires_after: "1h"}]
	}
	filesystem: {
		read: ["**"]
		write: ["notes/**"]
	}
	subprocess: {
		mode: "allowlist"
		allow: ["ls *", "cat *", "echo *", "git *", "sleep *"]
		deny: ["rm *", "touch *"]
		shell: "forbid"
	}
	network: {
		mode: "allowlist"
		allow: ["127.0.0.1"]
	}
}
`

// mcpSetup compiles mcpPolicy in a new directory and writes session.yaml
// with profile, and a signer key (keys/certifier.key) for certifiable
// sessions.
func mcpSetup(t *testing.T, profile string) string {
	t.Helper()
	dir := t.TempDir()
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(mcpPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := Run(context.Background(), []string{"compile", "policy.cue", "-o", "out"}, e); code != 0 {
		t.Fatalf("compile: %d\n%s", code, stderr.String())
	}
	if code := Run(context.Background(), []string{"keygen", "certifier", "-o", "keys"}, e); code != 0 {
		t.Fatalf("keygen: %d\n%s", code, stderr.String())
	}
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/mcp-agent.json\nprofile: "+profile+"\nworkspace: ws\nprincipal: agent:mcp\ntenant: acme\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "ws", "notes"), 0o755)
	return dir
}

// polcCommand is the real polc program (this test binary, run as polc:
// TestMain) with args, in dir.
func polcCommand(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), polcTestMainEnv+"=polc")
	return cmd
}

// connectStdio starts polc mcp with args in dir and connects an MCP client
// to it over its stdin and stdout.
func connectStdio(t *testing.T, dir string, args ...string) (*mcp.ClientSession, *exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := polcCommand(dir, append([]string{"mcp"}, args...)...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "polc-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 20 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	return cs, cmd, stderr
}

// mcpCall is one tool call and the outcome it must map to.
type mcpCall struct {
	tool   string
	args   map[string]any
	kind   string // the outcome's kind
	reason string // its reason code, when set
	check  func(t *testing.T, r *mcp.CallToolResult, sc map[string]any)
}

// callAll makes each call and checks its result against the mapping:
// succeeded is content, anything else isError with the kind and reason
// code in the structured content and the text.
func callAll(t *testing.T, cs *mcp.ClientSession, calls []mcpCall) {
	t.Helper()
	for _, c := range calls {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Errorf("%s %v: %v", c.tool, c.args, err)
			continue
		}
		sc, _ := r.StructuredContent.(map[string]any)
		meta, _ := r.Meta[outcomeMetaKey].(map[string]any)
		text := ""
		if len(r.Content) == 1 {
			if tc, ok := r.Content[0].(*mcp.TextContent); ok {
				text = tc.Text
			}
		}
		switch {
		case meta["kind"] != c.kind:
			t.Errorf("%s %v: kind %v, want %s: %s", c.tool, c.args, meta["kind"], c.kind, text)
			continue
		case r.IsError != (c.kind != "succeeded"):
			t.Errorf("%s %v: isError %v for %s", c.tool, c.args, r.IsError, c.kind)
		case c.kind != "succeeded" && (sc["kind"] != c.kind || sc["reason_code"] == "" || sc["message"] == "" ||
			!strings.HasPrefix(text, fmt.Sprintf("%s (%s): ", c.kind, sc["reason_code"]))):
			t.Errorf("%s %v: error result %v %q", c.tool, c.args, sc, text)
		case c.reason != "" && sc["reason_code"] != c.reason:
			t.Errorf("%s %v: reason %v, want %s", c.tool, c.args, sc["reason_code"], c.reason)
		case c.kind != "succeeded" && strings.Contains(strings.SplitN(text, "\n", 2)[0], "\n"):
			t.Errorf("%s: the explanation is not one line: %q", c.tool, text)
		}
		if c.check != nil {
			c.check(t, r, sc)
		}
	}
}

// wantTools checks that the server lists the session's actions, each with
// its descriptor's input schema.
func wantTools(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	for _, d := range normalize.BuiltinDescriptors() {
		if d.ID == "mcp" {
			continue // no client: not registered, so not offered
		}
		var s any
		json.Unmarshal(d.Arguments, &s)
		want[d.ID] = s
	}
	got := map[string]any{}
	var names []string
	for _, tool := range res.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		var s any
		json.Unmarshal(b, &s)
		got[tool.Name] = s
		names = append(names, tool.Name)
		if !strings.Contains(tool.Description, "Governed by polc") {
			t.Errorf("%s: description %q", tool.Name, tool.Description)
		}
	}
	if !slices.IsSorted(names) || !reflect.DeepEqual(got, want) {
		t.Fatalf("tools %v:\n%v\nwant\n%v", names, got, want)
	}
}

// verifyClosedChain verifies the one chain under dir/ev, closed (its last
// record task_closed), and returns its path.
func verifyClosedChain(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "ev", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("chains: %v", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{RequireClosed: true})
	if err != nil || !res.OK() {
		t.Fatalf("chain: %v %+v", err, res)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	last, err := chain.ParseRecord([]byte(lines[len(lines)-1]))
	if err != nil || last.RecordType != "task_closed" {
		t.Fatalf("the chain ends with %v (%v)", last, err)
	}
	return files[0], data
}

// TestMCPStdio runs the real polc mcp over stdio, certifiable and signed,
// against the SDK's client: it lists the actions with their schemas; each
// built-in runs when allowed and is refused when not (a denied bash does
// not run: its file is absent), and each outcome maps to its result —
// succeeded, denied, failed, timed out, escalated. The client's
// disconnect (closing stdin) closes the session: the chain ends with
// task_closed and the certificate verifies with certverify.
func TestMCPStdio(t *testing.T) {
	dir := mcpSetup(t, "certifiable")
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") }))
	defer site.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(site.URL, "http://"))
	cs, _, stderr := connectStdio(t, dir, "session.yaml", "--evidence", "ev", "--cert", "cert.json", "--sign-key", "keys/certifier.key", "--timeout", "2s")
	wantTools(t, cs)
	text := func(r *mcp.CallToolResult) string { return r.Content[0].(*mcp.TextContent).Text }
	callAll(t, cs, []mcpCall{
		{tool: "write_file", args: map[string]any{"path": "notes/a.txt", "content": "hello\n"}, kind: "succeeded"},
		{tool: "write_file", args: map[string]any{"path": ".env", "content": "TOKEN=1\n"}, kind: "denied"},
		{tool: "read_file", args: map[string]any{"path": "notes/a.txt"}, kind: "succeeded",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if sc["content"] != "hello\n" || !strings.Contains(text(r), `"content":"hello\n"`) {
					t.Errorf("read: %v %q", sc, text(r))
				}
			}},
		{tool: "read_file", args: map[string]any{"path": "../../etc/passwd"}, kind: "denied"},
		{tool: "edit_file", args: map[string]any{"path": "notes/a.txt", "old": "hello", "new": "bye"}, kind: "succeeded"},
		{tool: "edit_file", args: map[string]any{"path": "src/a.go", "old": "a", "new": "b"}, kind: "denied"},
		{tool: "bash", args: map[string]any{"command": "echo hi"}, kind: "succeeded",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if sc["stdout"] != "hi\n" {
					t.Errorf("echo: %v", sc)
				}
			}},
		{tool: "bash", args: map[string]any{"command": "touch marker"}, kind: "denied",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if sc["call_executed"] != false {
					t.Errorf("touch: %v", sc)
				}
			}},
		{tool: "bash", args: map[string]any{"command": "cat notes/missing"}, kind: "failed",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				res, _ := sc["result"].(map[string]any)
				if sc["class"] != "exit_status" || res == nil || !strings.Contains(fmt.Sprint(res["stderr"]), "missing") {
					t.Errorf("cat: %v", sc)
				}
			}},
		{tool: "bash", args: map[string]any{"command": "sleep 10"}, kind: "timed_out"},
		{tool: "bash", args: map[string]any{"command": "git push origin main"}, kind: "escalated",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				ap, _ := sc["approval"].(map[string]any)
				if ap["approver_class"] != "release-manager" || !strings.Contains(text(r), "release-manager") {
					t.Errorf("push: %v", sc)
				}
			}},
		{tool: "http_get", args: map[string]any{"url": "http://127.0.0.1:" + port + "/"}, kind: "succeeded",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if !strings.Contains(text(r), "reached") {
					t.Errorf("get: %q", text(r))
				}
			}},
		{tool: "http_get", args: map[string]any{"url": "http://localhost:" + port + "/"}, kind: "denied"},
		// Arguments the schema refuses reach the executor, which denies
		// them (and records it): nothing is decided outside it.
		{tool: "read_file", args: map[string]any{"paht": "notes/a.txt"}, kind: "denied"},
	})
	if _, err := os.Stat(filepath.Join(dir, "ws", "marker")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the denied touch ran: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ws", "notes", "a.txt")); string(b) != "bye\n" {
		t.Errorf("notes/a.txt: %q", b)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	path, _ := verifyClosedChain(t, dir)
	if !strings.Contains(stderr.String(), "polc mcp: session closed: evidence") {
		t.Errorf("stderr: %s", stderr.String())
	}
	vkey, err := os.ReadFile(filepath.Join(dir, "keys", "certifier.vkey"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "trust.txt"), []byte("certifier "+strings.TrimSpace(string(vkey))+"\n"), 0o644)
	var out bytes.Buffer
	if code := certverifycli.Run(context.Background(), []string{"cert", filepath.Join(dir, "cert.json"), "--chain", path,
		"--snapshot", filepath.Join(dir, "out", "snapshots", "mcp-agent.json"), "--trust", filepath.Join(dir, "trust.txt")},
		certverifycli.Env{Stdout: &out, Stderr: &out, Now: time.Now}); code != 0 {
		t.Fatalf("certverify: %d\n%s", code, out.String())
	}
}

// startMCPHTTP starts polc mcp --listen listen in dir and returns the
// process, its MCP endpoint and an HTTP client that reaches it.
func startMCPHTTP(t *testing.T, dir, listen string, args ...string) (*exec.Cmd, string, *http.Client, *lockedBuffer) {
	t.Helper()
	cmd := polcCommand(dir, append([]string{"mcp", "session.yaml", "--listen", listen}, args...)...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("polc mcp did not start: %v\n%s", err, stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "polc mcp: listening on ")
	if !ok {
		t.Fatalf("polc mcp: %q", line)
	}
	network, addr, _ := strings.Cut(addr, ":")
	if network == "unix" {
		if fi, err := os.Stat(addr); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("socket: %v %v", fi, err)
		}
		return cmd, "http://polc/", &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}}}, stderr
	}
	return cmd, "http://" + addr + "/", &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{}).DialContext}}, stderr
}

// mcpInitialize is an initialize request, as a client opening a session
// sends it.
const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`

// post sends body to the endpoint as an MCP client would, with extra
// headers, and returns the status and body of the answer.
func post(t *testing.T, hc *http.Client, endpoint, body string, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMCPHTTP runs the real polc mcp over streamable HTTP, on a Unix
// socket and on loopback TCP, governed, against the SDK's client: the
// tools and their schemas, allowed and denied calls (the denied bash does
// not run). Hardened as polc serve: a request with a browser's Origin is
// 403, and so over TCP is a Host that is not loopback; a body beyond the
// body budget is 400; a second client cannot open a second session (409).
// The client's DELETE closes the session: the process exits 0 and the
// chain ends with task_closed.
func TestMCPHTTP(t *testing.T) {
	for _, listen := range []string{"unix:polc.sock", "tcp:127.0.0.1:0"} {
		t.Run(strings.Split(listen, ":")[0], func(t *testing.T) {
			dir := mcpSetup(t, "governed")
			cmd, endpoint, hc, stderr := startMCPHTTP(t, dir, listen, "--evidence", "ev", "--body-budget", "64KiB")
			refusals := []struct {
				name   string
				body   string
				header map[string]string
				status int
				code   string
			}{
				{"origin", mcpInitialize, map[string]string{"Origin": "https://attacker.example"}, 403, "forbidden"},
				{"fetch-site", mcpInitialize, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "forbidden"},
				{"oversized", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"x":"` + strings.Repeat("a", 100<<10) + `"}}}`, nil, 400, "invalid_input"},
				{"duplicate", `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, nil, 400, "invalid_input"},
			}
			if strings.HasPrefix(listen, "tcp:") {
				refusals = append(refusals, struct {
					name   string
					body   string
					header map[string]string
					status int
					code   string
				}{"host", mcpInitialize, map[string]string{"Host": "attacker.example"}, 403, "forbidden"})
			}
			for _, r := range refusals {
				status, body := post(t, hc, endpoint, r.body, r.header)
				if status != r.status || !strings.Contains(body, `"code":"`+r.code+`"`) {
					t.Errorf("%s: %d %s", r.name, status, body)
				}
			}

			// A body declared beyond 16 MiB is refused before any of it
			// is read.
			conn, err := hc.Transport.(*http.Transport).DialContext(context.Background(), "tcp", strings.TrimSuffix(strings.TrimPrefix(endpoint, "http://"), "/"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n{", maxRequest+1)
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
				t.Errorf("a body beyond 16 MiB: %v", err)
			} else if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "larger than 16777216 bytes") {
				t.Errorf("a body beyond 16 MiB: %d %s", resp.StatusCode, b)
			}
			conn.Close()

			client := mcp.NewClient(&mcp.Implementation{Name: "polc-test", Version: "1"}, nil)
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
			if err != nil {
				t.Fatalf("connect: %v\n%s", err, stderr.String())
			}
			wantTools(t, cs)
			callAll(t, cs, []mcpCall{
				{tool: "write_file", args: map[string]any{"path": "notes/a.txt", "content": "hello\n"}, kind: "succeeded"},
				{tool: "write_file", args: map[string]any{"path": ".env", "content": "x"}, kind: "denied"},
				{tool: "bash", args: map[string]any{"command": "echo hi"}, kind: "succeeded"},
				{tool: "bash", args: map[string]any{"command": "touch marker"}, kind: "denied"},
			})
			if _, err := os.Stat(filepath.Join(dir, "ws", "marker")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the denied touch ran: %v", err)
			}
			if status, body := post(t, hc, endpoint, mcpInitialize, nil); status != http.StatusConflict || !strings.Contains(body, "session_taken") {
				t.Errorf("a second session: %d %s", status, body)
			}
			if err := cs.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("polc mcp still runs after the client's DELETE\n%s", stderr.String())
			}
			verifyClosedChain(t, dir)
		})
	}
}

// TestMCPLandlockBackend: the session's backend (here --backend landlock)
// is every call's: an allowed bash runs contained (the chain binds the
// landlock backend), a denied one does not run.
func TestMCPLandlockBackend(t *testing.T) {
	if os.Getenv("POLC_REQUIRE_SANDBOX") == "" {
		if f, _ := sandbox.Probe().Facet(sandbox.FacetFilesystem); f.State == sandbox.Unsupported {
			t.Skipf("the kernel cannot hold a process here: %+v", f)
		}
	}
	dir := mcpSetup(t, "governed")
	cs, _, stderr := connectStdio(t, dir, "session.yaml", "--evidence", "ev", "--backend", "landlock")
	callAll(t, cs, []mcpCall{
		{tool: "bash", args: map[string]any{"command": "echo contained"}, kind: "succeeded",
			check: func(t *testing.T, r *mcp.CallToolResult, sc map[string]any) {
				if sc["stdout"] != "contained\n" {
					t.Errorf("echo: %v", sc)
				}
			}},
		{tool: "bash", args: map[string]any{"command": "touch marker"}, kind: "denied"},
	})
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "marker")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the denied touch ran: %v", err)
	}
	_, data := verifyClosedChain(t, dir)
	if !bytes.Contains(data, []byte(`effect_backend_id\":\"landlock`)) {
		t.Errorf("the chain does not bind the landlock backend:\n%s", data)
	}
}

// TestMCPHTTPIdleTimeout: over HTTP, a client that goes without its
// DELETE leaves the session open until --idle-timeout passes without a
// request; then it closes as on DELETE. A DELETE that names no session
// (or another one) closes nothing.
func TestMCPHTTPIdleTimeout(t *testing.T) {
	dir := mcpSetup(t, "governed")
	cmd, endpoint, hc, stderr := startMCPHTTP(t, dir, "tcp:127.0.0.1:0", "--evidence", "ev", "--idle-timeout", "1s")
	for _, id := range []string{"", "not-the-session"} {
		req, _ := http.NewRequest("DELETE", endpoint, nil)
		if id != "" {
			req.Header.Set(mcpSessionHeader, id)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	req, _ := http.NewRequest("POST", endpoint, strings.NewReader(mcpInitialize))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(mcpSessionHeader) == "" {
		t.Fatalf("initialize: %d %v\n%s", resp.StatusCode, resp.Header, stderr.String())
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the idle session did not close\n%s", stderr.String())
	}
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", el)
	}
	verifyClosedChain(t, dir)
}
