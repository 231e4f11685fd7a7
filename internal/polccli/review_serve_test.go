package polccli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startServe starts a governed session of the demo agent listening on
// listen and returns the address and a channel with runServe's result.
// The session is closed (the context cancelled) when the test ends.
func startServe(t *testing.T, listen string) (dir, addr string, done chan error) {
	t.Helper()
	return startServeWith(t, listen, nil)
}

// startServeWith is startServe with the serve parameters adjusted by set
// (when not nil) before the server starts.
func startServeWith(t *testing.T, listen string, set func(*serveParams)) (dir, addr string, done chan error) {
	t.Helper()
	dir = t.TempDir()
	e := compileDemo(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: governed\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done = make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev"}, listen: listen,
		ready: func(addr string) { ready <- addr }}
	if set != nil {
		set(p)
	}
	go func() { done <- runServe(ctx, e, p) }()
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, e.stderr.(*lockedBuffer).String())
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the server did not stop")
		}
	})
	return dir, addr, done
}

func errorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(b, &m)
	return m.Error.Code
}

// TestServeRefusesBrowsers: a web page the user visits can send requests
// to a loopback port (a "simple" cross-origin POST needs no preflight, and
// DNS rebinding makes the page's own origin resolve to 127.0.0.1). Such a
// request would act as the session's principal. The server refuses a
// request that carries an Origin or a cross-site Sec-Fetch-Site header,
// and over TCP one whose Host does not name a loopback address; it runs
// nothing for them.
func TestServeRefusesBrowsers(t *testing.T) {
	dir, addr, _ := startServe(t, "tcp:127.0.0.1:0")
	_, port, _ := net.SplitHostPort(addr)
	body := `{"action":"write_file","arguments":{"path":"notes/csrf.txt","content":"x"}}`
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
	}{
		{"cross-origin simple POST", "/v1/execute", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}},
		{"same-origin after DNS rebinding", "/v1/execute", map[string]string{"Host": "evil.example:" + port, "Origin": "http://evil.example:" + port}},
		{"rebound host, no Origin", "/v1/execute", map[string]string{"Host": "evil.example:" + port}},
		{"rebound host reads the session", "/v1/session", map[string]string{"Host": "evil.example:" + port}},
		{"fetch metadata", "/v1/execute", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"null origin", "/v1/close", map[string]string{"Origin": "null"}},
	} {
		method := "POST"
		if tc.path == "/v1/session" {
			method = "GET"
		}
		req, _ := http.NewRequest(method, "http://"+addr+tc.path, strings.NewReader(body))
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		if h, ok := tc.headers["Host"]; ok {
			req.Host = h
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if code := errorCode(t, resp); resp.StatusCode != http.StatusForbidden || code != "forbidden" {
			t.Errorf("%s: %d %q", tc.name, resp.StatusCode, code)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "notes", "csrf.txt")); err == nil {
		t.Fatal("a browser's request wrote a file")
	}
	// Loopback names are served, with or without a port.
	for _, host := range []string{"localhost", "LocalHost:" + port, "127.0.0.1:" + port, "[::1]:" + port} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/session", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s: %d", host, resp.StatusCode)
		}
	}
}

// TestServeRefusesNestedDuplicates: "no duplicates" holds inside the
// arguments too. encoding/json keeps the last of two equal names, another
// parser (the runtime's, a guard's, a log's) the first: the policy would
// judge one request and a reader of the request see another.
func TestServeRefusesNestedDuplicates(t *testing.T) {
	dir, addr, _ := startServe(t, "tcp:127.0.0.1:0")
	for _, body := range []string{
		`{"action":"write_file","arguments":{"path":"notes/a.txt","path":"notes/b.txt","content":"x"}}`,
		`{"action":"write_file","arguments":{"path":"notes/a.txt","\u0070ath":"notes/b.txt","content":"x"}}`,
		`{"action":"write_file","arguments":{"path":"notes/a.txt","content":"x","meta":[{"k":1,"k":2}]}}`,
	} {
		resp, err := http.Post("http://"+addr+"/v1/execute", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if code := errorCode(t, resp); resp.StatusCode != http.StatusBadRequest || code != "invalid_input" {
			t.Errorf("%s: %d %q", body, resp.StatusCode, code)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "ws", "notes", "*")); len(files) != 0 {
		t.Fatalf("ran: %v", files)
	}
	// Equal values under different parents, and names differing in case,
	// are not duplicates.
	resp, err := http.Post("http://"+addr+"/v1/execute", "application/json", strings.NewReader(
		`{"action":"write_file","arguments":{"path":"notes/a.txt","content":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("plain request: %d", resp.StatusCode)
	}
	for body, want := range map[string]string{
		`{"action":"a","action":"b"}`:                    `member "action" given twice`,
		`{"arguments":{"path":"a","\u0070ath":"b"}}`:     `member "arguments.path" given twice`,
		`{"arguments":{"meta":[{"k":1},{"k":1,"k":2}]}}`: `member "arguments.meta[1].k" given twice`,
	} {
		if err := checkDuplicates([]byte(body)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", body, err, want)
		}
	}
	for _, body := range []string{`{"a":{"k":1},"b":{"k":1}}`, `{"k":1,"K":2}`, `[{"k":1},{"k":2}]`} {
		if err := checkDuplicates([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// TestServeSlowClients: a client that sends its headers and then trickles
// (or never sends) the body, or leaves a connection idle, does not hold a
// connection forever: the body must arrive within readTimeout (else 400),
// and an idle connection is closed after it.
func TestServeSlowClients(t *testing.T) {
	old := readTimeout
	readTimeout = 300 * time.Millisecond
	t.Cleanup(func() { readTimeout = old }) // after the server stopped
	_, addr, _ := startServe(t, "tcp:127.0.0.1:0")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "POST /v1/execute HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"action\"")
	b, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(b), "HTTP/1.1 400 ") || !strings.Contains(string(b), "invalid_input") {
		t.Fatalf("slow body: %q", b)
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(idle, "GET /v1/session HTTP/1.1\r\nHost: localhost\r\n\r\n")
	b, err = io.ReadAll(idle) // until the server closes the idle connection
	if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 200 ") {
		t.Fatalf("idle connection: %v %q", err, b)
	}
}

// TestServeCloseBeganRefusesAtOnce: once a close began (it waits for the
// actions in flight, which may take long), an execute gets 409
// session_closed at once and GET /v1/session says closed, as
// docs/serve.md promises; before, both waited behind the close.
func TestServeCloseBeganRefusesAtOnce(t *testing.T) {
	sv := &server{s: &session{}, closing: make(chan struct{})}
	sv.mu.RLock() // an action in flight
	closed := make(chan struct{})
	go func() {
		sv.close(context.Background(), time.Hour)
		close(closed)
	}()
	for !sv.closeBegan.Load() {
		time.Sleep(time.Millisecond)
	}
	answer := func(method, path, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		got := make(chan struct{})
		go func() {
			sv.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
			close(got)
		}()
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			sv.mu.RUnlock()
			t.Fatalf("%s %s waits behind the close", method, path)
		}
		return w
	}
	if w := answer("POST", "/v1/execute", `{"action":"read_file","arguments":{"path":"a"}}`); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "session_closed") {
		t.Errorf("execute: %d %s", w.Code, w.Body)
	}
	if w := answer("GET", "/v1/session", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"closed":true`) {
		t.Errorf("session: %d %s", w.Code, w.Body)
	}
	sv.mu.RUnlock()
	<-closed
}

// TestServeFailedCloseSaysSo: a close whose certificate could not be
// minted answers 500 with the evidence summary and, as every error
// answer, {"error": {"code": "close_failed"}}; before, the 500 carried no
// error member, so a client reading error.code saw none. The error says
// why (the message and the mint rule), not only the server's log. A
// certifiable session closed before any action ran has no policy_bound
// record, so nothing in its chain pins the policy: its certificate is
// refused (docs/serve.md).
func TestServeFailedCloseSaysSo(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", cert: "cert.json"},
		listen: "tcp:127.0.0.1:0", ready: func(addr string) { ready <- addr }}
	go func() { done <- runServe(context.Background(), e, p) }()
	addr := <-ready
	resp, err := http.Post("http://"+addr+"/v1/close", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Error struct {
			Code, Message, Rule, Finding string
		} `json:"error"`
		Evidence    map[string]any `json:"evidence"`
		Certificate map[string]any `json:"certificate"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("serve exited 0 after its certificate was refused")
	}
	if resp.StatusCode != http.StatusInternalServerError || m.Error.Code != "close_failed" || m.Evidence == nil || m.Certificate != nil {
		t.Fatalf("close: %d %s", resp.StatusCode, b)
	}
	if m.Error.Rule != "missing_policy" || m.Error.Finding != "" || !strings.Contains(m.Error.Message, "no operation ran") {
		t.Errorf("close error %+v: want the missing_policy rule, no finding, and why", m.Error)
	}
}

// TestServeUnixSocketOwnership: the socket is made 0600 before it is
// reachable at its path (it is created in a private directory, then
// linked into place, which never replaces a file), nothing else is left
// next to it, and at exit the server removes its own socket only: a file
// that took the path meanwhile (another server's socket, after this one
// stopped accepting) stays. Before, the listener's close and a deferred
// os.Remove both unlinked whatever was at the path.
func TestServeUnixSocketOwnership(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: governed\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	sockDir := filepath.Join(dir, "run")
	os.Mkdir(sockDir, 0o755)
	sock := filepath.Join(sockDir, "polc.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev"}, listen: "unix:" + sock,
		ready: func(addr string) { ready <- addr }}
	go func() { done <- runServe(ctx, e, p) }()
	select {
	case addr := <-ready:
		if addr != sock || !strings.Contains(e.stdout.(*lockedBuffer).String(), "listening on unix:"+sock+"\n") {
			t.Fatalf("ready %q, said %q", addr, e.stdout.(*lockedBuffer).String())
		}
	case err := <-done:
		t.Fatalf("serve stopped: %v", err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	if entries, _ := os.ReadDir(sockDir); len(entries) != 1 {
		t.Fatalf("next to the socket: %v", entries)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /v1/session HTTP/1.1\r\nHost: polc\r\nConnection: close\r\n\r\n")
	if b, _ := io.ReadAll(conn); !strings.HasPrefix(string(b), "HTTP/1.1 200 ") {
		t.Fatalf("session: %q", b)
	}
	conn.Close()
	// Another file takes the path.
	os.Remove(sock)
	os.WriteFile(sock, []byte("someone else's"), 0o600)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(sock); err != nil || string(b) != "someone else's" {
		t.Fatalf("the server removed a file it did not create: %v", err)
	}
	os.Remove(sock)

	// A normal stop removes the socket.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	p.ready = func(string) { cancel2() }
	if err := runServe(ctx2, e, p); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(sockDir); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}

// TestServeRefusesInvalidUTF8: JSON is UTF-8; encoding/json would replace
// an invalid byte with U+FFFD, so the action would run on a path (or a
// command) other than the one sent. The body is refused instead.
func TestServeRefusesInvalidUTF8(t *testing.T) {
	dir, addr, _ := startServe(t, "tcp:127.0.0.1:0")
	resp, err := http.Post("http://"+addr+"/v1/execute", "application/json", strings.NewReader(
		"{\"action\":\"write_file\",\"arguments\":{\"path\":\"notes/\xff.txt\",\"content\":\"x\"}}"))
	if err != nil {
		t.Fatal(err)
	}
	if code := errorCode(t, resp); resp.StatusCode != http.StatusBadRequest || code != "invalid_input" {
		t.Errorf("%d %q", resp.StatusCode, code)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "ws", "notes", "*")); len(files) != 0 {
		t.Fatalf("ran: %v", files)
	}
}

// TestServeTypeErrorsSayTheMember: a member of the wrong type is refused
// naming the member and the JSON types, not the server's Go types
// ("Go struct field executeRequest.action of type string").
func TestServeTypeErrorsSayTheMember(t *testing.T) {
	for body, want := range map[string]string{
		`{"action":1}`:                          `member "action": a number, want a string`,
		`{"action":"read_file","arguments":[]}`: `member "arguments": an array, want an object`,
		`{"action":"read_file","timeout":true}`: `member "timeout": a bool, want a string`,
	} {
		var req executeRequest
		err := decodeBody([]byte(body), &req)
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", body, err, want)
		}
	}
}
