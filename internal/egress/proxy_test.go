package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestForwardPlainHTTP(t *testing.T) {
	r := newRig(t, nil)
	port := r.allowed.port()
	req := fmt.Sprintf("POST http://ALLOWED.test.:%d/p/a?q=1 HTTP/1.1\r\n"+
		"Host: denied.test\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\n"+
		"Proxy-Connection: keep-alive\r\n"+
		"Connection: X-Drop, keep-alive\r\n"+
		"X-Drop: 1\r\n"+
		"X-Keep: 2\r\n"+
		"Transfer-Encoding: chunked\r\n"+
		"Trailer: X-Tr\r\n\r\n"+
		"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Tr: done\r\n\r\n", port)
	resp := r.raw(req)
	if status(resp) != 200 || !strings.Contains(resp, "allowed says POST /p/a?q=1 (11 body bytes)") || !strings.Contains(resp, "Connection: close") {
		t.Fatalf("response:\n%s", resp)
	}
	got := r.allowed.requests()
	if len(got) != 1 {
		t.Fatalf("destination got %d requests", len(got))
	}
	g := got[0]
	if g.URI != "/p/a?q=1" || g.Host != fmt.Sprintf("allowed.test:%d", port) || g.Body != "hello world" || g.Trailer.Get("X-Tr") != "done" {
		t.Errorf("destination saw %+v", g)
	}
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Drop", "Keep-Alive"} {
		if _, ok := g.Header[h]; ok {
			t.Errorf("hop-by-hop header %s reached the destination: %v", h, g.Header)
		}
	}
	if g.Header.Get("X-Keep") != "2" || g.Header.Get("Connection") != "close" {
		t.Errorf("destination headers: %v", g.Header)
	}
	if len(r.denied.requests()) != 0 {
		t.Error("the Host header's host was reached")
	}
	log := r.waitLog(1)
	want := Conn{Method: "POST", Host: "allowed.test", Port: port, Admitted: true, Reason: "test: allowed.test is on the list", Status: 200}
	l := log[0]
	if l.BytesUp == 0 || l.BytesDown != int64(len(resp)) {
		t.Errorf("bytes not counted: %+v (client read %d)", l, len(resp))
	}
	l.BytesUp, l.BytesDown = 0, 0
	if l != want {
		t.Errorf("log %+v, want %+v", l, want)
	}
}

func TestForwardResponses(t *testing.T) {
	r := newRig(t, nil)
	base := fmt.Sprintf("http://allowed.test:%d", r.allowed.port())

	// Chunked response with a trailer, relayed chunked.
	resp := r.raw("GET " + base + "/chunked HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(strings.NewReader(resp))
	hr := readResp(t, br, "GET")
	body, _ := io.ReadAll(hr.Body)
	if string(body) != "part0;part1;part2;" || hr.Trailer.Get("X-Sum") != "3" || !slices.Equal(hr.TransferEncoding, []string{"chunked"}) {
		t.Errorf("chunked: body %q trailer %v te %v\n%s", body, hr.Trailer, hr.TransferEncoding, resp)
	}

	// HTTP/1.0 client: no chunking, the body ends with the connection.
	resp = r.raw("GET " + base + "/chunked HTTP/1.0\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.0 200") || strings.Contains(strings.ToLower(resp), "chunked") || !strings.HasSuffix(resp, "\r\n\r\npart0;part1;part2;") {
		t.Errorf("HTTP/1.0:\n%q", resp)
	}

	// Hop-by-hop response headers are dropped.
	hop := rawDest(t, func() string {
		return "HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\n" +
			"Upgrade: h2c\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nhi"
	})
	resp = r.raw("GET http://" + hop + "/hop HTTP/1.1\r\n\r\n")
	for _, h := range []string{"X-Secret", "Keep-Alive", "keep-alive", "Proxy-Authenticate", "Upgrade"} {
		if strings.Contains(resp, h) {
			t.Errorf("hop-by-hop %s relayed:\n%s", h, resp)
		}
	}
	if !strings.Contains(resp, "X-Kept: 1") || !strings.HasSuffix(resp, "\r\n\r\nhi") {
		t.Errorf("hop-by-hop:\n%s", resp)
	}

	// HEAD: headers only.
	resp = r.raw("HEAD " + base + "/ HTTP/1.1\r\n\r\n")
	if status(resp) != 200 || !strings.HasSuffix(resp, "\r\n\r\n") {
		t.Errorf("HEAD:\n%q", resp)
	}

	// 204 and 304 have no body; a 500 is relayed, not replaced.
	for _, code := range []int{204, 304, 404, 500} {
		resp = r.raw(fmt.Sprintf("GET %s/status?code=%d HTTP/1.1\r\n\r\n", base, code))
		if status(resp) != code {
			t.Errorf("status %d relayed as:\n%s", code, resp)
		}
	}

	// POST with no body gets Content-Length: 0.
	r.raw("POST " + base + "/empty HTTP/1.1\r\n\r\n")
	reqs := r.allowed.requests()
	if last := reqs[len(reqs)-1]; last.Method != "POST" || last.ContentLength != 0 || last.Header.Get("Content-Length") != "" && last.Header.Get("Content-Length") != "0" {
		t.Errorf("empty POST arrived as %+v", last)
	}
}

// TestExpectContinue: a client that waits for 100 Continue gets it from
// the proxy once the destination is connected, and the body goes through.
func TestExpectContinue(t *testing.T) {
	r := newRig(t, nil)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "PUT http://allowed.test:%d/up HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n", r.allowed.port())
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	br.ReadString('\n')
	io.WriteString(c, "data")
	resp := readResp(t, br, "PUT")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "allowed says PUT /up (4 body bytes)" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if h := r.allowed.requests()[0].Header; h.Get("Expect") != "" {
		t.Errorf("Expect forwarded: %v", h)
	}
}

// TestSmuggleKeepAlive: a second request on the same connection, to a
// denied host, is never read, whether pipelined with the first or sent
// after its response.
func TestSmuggleKeepAlive(t *testing.T) {
	r := newRig(t, nil)
	first := fmt.Sprintf("GET http://allowed.test:%d/one HTTP/1.1\r\nConnection: keep-alive\r\n\r\n", r.allowed.port())
	second := fmt.Sprintf("GET http://denied.test:%d/two HTTP/1.1\r\n\r\n", r.denied.port())

	// Pipelined in one write.
	resp := r.raw(first + second)
	if strings.Count(resp, "HTTP/1.1 ") != 1 || status(resp) != 200 || !strings.Contains(resp, "Connection: close") {
		t.Errorf("pipelined: want exactly one 200 with Connection: close, got:\n%s", resp)
	}

	// Sent after the first response, on the same connection.
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, first)
	br := bufio.NewReader(c)
	hr := readResp(t, br, "GET")
	io.Copy(io.Discard, hr.Body)
	if hr.StatusCode != 200 || !hr.Close {
		t.Errorf("first: %d close=%v", hr.StatusCode, hr.Close)
	}
	io.WriteString(c, second) // may fail or not; nothing may read it
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("second request answered: %q", rest)
	}

	// A Go client with keep-alive on: each request is admitted on its own.
	pu, _ := url.Parse("http://" + r.addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for _, u := range []string{
		fmt.Sprintf("http://allowed.test:%d/a", r.allowed.port()),
		fmt.Sprintf("http://denied.test:%d/b", r.denied.port()),
		fmt.Sprintf("http://allowed.test:%d/c", r.allowed.port()),
	} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		want := 200
		if strings.Contains(u, "denied") {
			want = 403
		}
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", u, resp.StatusCode, want)
		}
	}

	if n := len(r.denied.requests()); n != 0 {
		t.Errorf("denied.test got %d requests", n)
	}
	for _, d := range r.dialed() {
		if strings.HasPrefix(d, "denied.test") {
			t.Errorf("dialled %s", d)
		}
	}
	log := r.waitLog(5)
	var methods []string
	for _, l := range log {
		methods = append(methods, fmt.Sprintf("%s %s %v", l.Method, l.Host, l.Admitted))
	}
	want := []string{"GET allowed.test true", "GET allowed.test true", "GET allowed.test true", "GET denied.test false", "GET allowed.test true"}
	if !slices.Equal(methods, want) {
		t.Errorf("log %q, want %q", methods, want)
	}
}

// TestSmuggleBody: a body framed two ways, or a body holding a request,
// reaches the admitted destination as that body and nothing else.
func TestSmuggleBody(t *testing.T) {
	r := newRig(t, nil)
	inner := fmt.Sprintf("GET http://denied.test:%d/x HTTP/1.1\r\nHost: denied.test\r\n\r\n", r.denied.port())
	// Content-Length and chunked together: chunked wins (RFC 9112), the
	// Content-Length is dropped, the body is re-framed.
	resp := r.raw(fmt.Sprintf("POST http://allowed.test:%d/cl-te HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"%x\r\n%s\r\n0\r\n\r\n%s", r.allowed.port(), len(inner), inner, inner))
	if status(resp) != 200 {
		t.Errorf("CL+TE: %s", resp)
	}
	// Content-Length shorter than what follows: the rest is not a request.
	resp = r.raw(fmt.Sprintf("POST http://allowed.test:%d/cl HTTP/1.1\r\nContent-Length: 2\r\n\r\nok%s", r.allowed.port(), inner))
	if status(resp) != 200 {
		t.Errorf("CL: %s", resp)
	}
	// Two Content-Lengths that differ: refused.
	resp = r.raw(fmt.Sprintf("POST http://allowed.test:%d/cl2 HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk", r.allowed.port()))
	if status(resp) != 400 {
		t.Errorf("two Content-Lengths: %s", resp)
	}
	// Transfer-Encoding other than chunked: refused.
	resp = r.raw(fmt.Sprintf("POST http://allowed.test:%d/te HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", r.allowed.port()))
	if status(resp) != 400 {
		t.Errorf("gzip, chunked: %s", resp)
	}
	got := r.allowed.requests()
	if len(got) != 2 || got[0].Body != inner || got[1].Body != "ok" {
		t.Errorf("allowed.test got %+v", got)
	}
	if n := len(r.denied.requests()); n != 0 {
		t.Errorf("denied.test got %d requests", n)
	}
}

// TestConnect: a tunnel to an admitted host carries TLS; a refused one is
// never dialled.
func TestConnect(t *testing.T) {
	r := newRig(t, nil)
	target := fmt.Sprintf("secure.test:%d", r.tls.port())
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp := readResp(t, br, "CONNECT")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	tc := tls.Client(&bufConn{c, br}, &tls.Config{InsecureSkipVerify: true, ServerName: "secure.test"})
	fmt.Fprintf(tc, "GET /over-tls HTTP/1.1\r\nHost: secure.test\r\nConnection: close\r\n\r\n")
	out, err := io.ReadAll(tc)
	if err != nil || !strings.Contains(string(out), "secure says GET /over-tls") {
		t.Fatalf("over TLS: %q %v", out, err)
	}
	c.Close()

	before := len(r.dialed())
	for _, target := range []string{fmt.Sprintf("denied.test:%d", r.denied.port()), "denied.test:443", "example.com:443"} {
		resp := r.raw("CONNECT " + target + " HTTP/1.1\r\n\r\n")
		if status(resp) != 403 || !strings.Contains(resp, "is not on the list") {
			t.Errorf("CONNECT %s: %s", target, resp)
		}
	}
	if d := r.dialed()[before:]; len(d) != 0 {
		t.Errorf("refused CONNECTs dialled %v", d)
	}
	log := r.waitLog(4)
	if l := log[0]; l.Method != "CONNECT" || l.Host != "secure.test" || !l.Admitted || l.Status != 200 || l.BytesUp == 0 || l.BytesDown == 0 || l.Error != "" {
		t.Errorf("tunnel log entry %+v", l)
	}
	for _, l := range log[1:] {
		if l.Admitted || l.Status != 403 || l.BytesUp != 0 || l.BytesDown != 0 {
			t.Errorf("refusal log entry %+v", l)
		}
	}
}

// bufConn reads first what a bufio.Reader already holds.
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.br.Read(p) }

// TestConnectEarlyData: bytes sent right behind the CONNECT header (before
// the 200) go to the destination first, and a half-close is passed on.
func TestConnectEarlyData(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		c, err := echo.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo until the client half-closes
	}()
	r := newRig(t, nil)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\nearly bytes;", echo.Addr())
	io.WriteString(c, "late bytes")
	c.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(c)
	if err != nil || string(out) != "HTTP/1.1 200 Connection established\r\n\r\nearly bytes;late bytes" {
		t.Fatalf("%q %v", out, err)
	}
	log := r.waitLog(1)
	if l := log[0]; l.BytesUp != 22 || l.BytesDown != 22 || l.Error != "" {
		t.Errorf("log %+v", l)
	}
}

// TestUnixListener: the proxy serves a unix socket (how the sandbox
// reaches it), half-close included.
func TestUnixListener(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "p.sock")
	r := newRig(t, nil)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.p.Serve(ctx, l) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://allowed.test:%d/u HTTP/1.1\r\n\r\n", r.allowed.port())
	c.(*net.UnixConn).CloseWrite()
	out, _ := io.ReadAll(c)
	if status(string(out)) != 200 || !strings.Contains(string(out), "allowed says GET /u") {
		t.Fatalf("%q", out)
	}
}

// TestDefaultDialIgnoresProxyEnv: with Dial unset, the proxy's own
// connections go straight to the destination whatever HTTP_PROXY says.
func TestDefaultDialIgnoresProxyEnv(t *testing.T) {
	trap, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer trap.Close()
	trapped := make(chan struct{}, 1)
	go func() {
		c, err := trap.Accept()
		if err == nil {
			trapped <- struct{}{}
			c.Close()
		}
	}()
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"} {
		t.Setenv(k, "http://"+trap.Addr().String())
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	r := newRig(t, func(p *Proxy) { p.Dial = nil })
	resp := r.raw(fmt.Sprintf("GET http://127.0.0.1:%d/direct HTTP/1.1\r\n\r\n", r.allowed.port()))
	if status(resp) != 200 || !strings.Contains(resp, "allowed says GET /direct") {
		t.Fatalf("%s", resp)
	}
	select {
	case <-trapped:
		t.Fatal("the proxy's dial went to HTTP_PROXY")
	case <-time.After(50 * time.Millisecond):
	}
}

func TestRefusals(t *testing.T) {
	r := newRig(t, func(p *Proxy) { p.MaxHeaderBytes = 1024 })
	for _, c := range []struct {
		req    string
		status int
		reason string
	}{
		{"GET /local HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, "absolute form"},
		{"CONNECT allowed.test HTTP/1.1\r\n\r\n", 400, "no port"},
		{"CONNECT allowed.test:443 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 400, "CONNECT with a body"},
		{"GET http://user:pw@allowed.test/ HTTP/1.1\r\n\r\n", 400, "userinfo"},
		{"GET http://allowed.test:0/ HTTP/1.1\r\n\r\n", 400, "1..65535"},
		{"TRACE http://allowed.test/ HTTP/1.1\r\n\r\n", 405, "not supported"},
		{"BREW http://allowed.test/ HTTP/1.1\r\n\r\n", 405, "not supported"},
		{"get http://allowed.test/ HTTP/1.1\r\n\r\n", 405, "not supported"},
		{"GET http://allowed.test/ HTTP/2.0\r\n\r\n", 505, "HTTP/1.x"},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "HTTP/1.x"},
		{"GET http://denied.test/ HTTP/1.1\r\n\r\n", 403, "not on the list"},
		{"HEAD http://denied.test/ HTTP/1.1\r\n\r\n", 403, ""},
		{"garbage\r\n\r\n", 400, "malformed request"},
		{"GET http://allowed.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", 2000) + "\r\n\r\n", 431, "exceed 1024 bytes"},
		{"GET http://allowed.test/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "Host"},
		{"GET http://allowed.test/ HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, "malformed"},
	} {
		resp := r.raw(c.req)
		if status(resp) != c.status || !strings.Contains(resp, c.reason) || !strings.Contains(resp, "Connection: close") {
			t.Errorf("%q: want %d mentioning %q, got:\n%s", c.req, c.status, c.reason, resp)
		}
		if strings.HasPrefix(c.req, "HEAD") && !strings.HasSuffix(resp, "\r\n\r\n") {
			t.Errorf("HEAD refusal has a body: %q", resp)
		}
	}
	if d := r.dialed(); len(d) != 0 {
		t.Errorf("refusals dialled %v", d)
	}
	for _, l := range r.waitLog(16) {
		if l.Admitted || l.Reason == "" || l.Status < 400 {
			t.Errorf("log entry %+v", l)
		}
	}
	// A nil Admit refuses everything.
	r2 := newRig(t, func(p *Proxy) { p.Admit = nil })
	if resp := r2.raw(fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\n\r\n", r2.allowed.port())); status(resp) != 403 {
		t.Errorf("nil Admit: %s", resp)
	}
	// A panicking Admit refuses.
	r3 := newRig(t, func(p *Proxy) { p.Admit = func(string, int) (bool, string) { panic("boom") } })
	if resp := r3.raw(fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\n\r\n", r3.allowed.port())); status(resp) != 403 || !strings.Contains(resp, "boom") {
		t.Errorf("panicking Admit: %s", resp)
	}
	// A refusal without a reason still says why.
	r4 := newRig(t, func(p *Proxy) { p.Admit = func(string, int) (bool, string) { return false, "" } })
	if resp := r4.raw(fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\n\r\n", r4.allowed.port())); status(resp) != 403 || !strings.Contains(resp, "refused by the admission policy") {
		t.Errorf("reasonless Admit: %s", resp)
	}
	if l := r4.waitLog(1)[0]; l.Reason != "refused by the admission policy" {
		t.Errorf("reasonless Admit logged %+v", l)
	}
	if len(r2.dialed())+len(r3.dialed())+len(r4.dialed()) != 0 {
		t.Error("dialled without admission")
	}
}

func TestBadGateway(t *testing.T) {
	// A destination that answers garbage, one that closes at once, one
	// that answers 101 unasked, one with a malformed header name.
	answers := make(chan string, 1)
	bad := rawDest(t, func() string { return <-answers })
	r := newRig(t, nil)
	for _, a := range []string{"not http\r\n\r\n", "", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
		"HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n"} {
		answers <- a
		resp := r.raw(fmt.Sprintf("GET http://%s/ HTTP/1.1\r\n\r\n", bad))
		if status(resp) != 502 {
			t.Errorf("destination answering %q: %s", a, resp)
		}
	}
	// Nothing listening.
	resp := r.raw("GET http://allowed.test:1/ HTTP/1.1\r\n\r\n")
	if status(resp) != 502 {
		t.Errorf("no listener: %s", resp)
	}
	for _, l := range r.waitLog(5) {
		if !l.Admitted || l.Status != 502 || l.Error == "" {
			t.Errorf("log entry %+v", l)
		}
	}
}

func TestLogJSON(t *testing.T) {
	b, err := json.Marshal(Conn{Method: "CONNECT", Host: "h", Port: 1, Admitted: true, Reason: "r", Status: 200, BytesUp: 2, BytesDown: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"method":"CONNECT","host":"h","port":1,"admitted":true,"reason":"r","status":200,"bytes_up":2,"bytes_down":3}`
	if string(b) != want {
		t.Errorf("%s\nwant %s", b, want)
	}
	if b, _ := json.Marshal((&Proxy{}).Log()); string(b) != "[]" {
		t.Errorf("empty log is %s", b)
	}
}

func TestLimits(t *testing.T) {
	t.Run("header timeout", func(t *testing.T) {
		r := newRig(t, func(p *Proxy) { p.IdleTimeout = 200 * time.Millisecond })
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		// A byte now and then does not keep the header phase alive.
		go func() {
			for _, b := range "GET http://allowed.test/ HTTP/1.1\r\n" {
				if _, err := c.Write([]byte{byte(b)}); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		start := time.Now()
		out, _ := io.ReadAll(c)
		if status(string(out)) != 408 || time.Since(start) > 5*time.Second {
			t.Errorf("after %v: %q", time.Since(start), out)
		}
	})
	t.Run("tunnel idle", func(t *testing.T) {
		silent, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		go func() {
			for {
				c, err := silent.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		// The timeout is long beside the writes' period, so that a loaded
		// machine's late wake-ups do not make the activity look idle.
		r := newRig(t, func(p *Proxy) { p.IdleTimeout = 2 * time.Second })
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", silent.Addr())
		// Activity keeps it open past the timeout...
		for range 5 {
			time.Sleep(500 * time.Millisecond)
			if _, err := io.WriteString(c, "x"); err != nil {
				t.Fatalf("closed while active: %v", err)
			}
		}
		// ...silence closes it.
		start := time.Now()
		out, _ := io.ReadAll(c)
		if string(out) != "HTTP/1.1 200 Connection established\r\n\r\n" || time.Since(start) > 20*time.Second {
			t.Errorf("after %v: %q", time.Since(start), out)
		}
		if l := r.waitLog(1)[0]; !strings.Contains(l.Error, "idle") || l.BytesUp != 5 {
			t.Errorf("log %+v", l)
		}
	})
	t.Run("max conns", func(t *testing.T) {
		r := newRig(t, func(p *Proxy) { p.MaxConns = 2 })
		var held []net.Conn
		for range 2 {
			c, err := net.Dial("tcp", r.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			held = append(held, c)
		}
		r.waitUntil(func() bool { return len(r.p.Log()) == 2 })
		third := make(chan string, 1)
		go func() { third <- r.raw(fmt.Sprintf("GET http://allowed.test:%d/3 HTTP/1.1\r\n\r\n", r.allowed.port())) }()
		select {
		case out := <-third:
			t.Fatalf("third connection served while two were held: %q", out)
		case <-time.After(200 * time.Millisecond):
		}
		held[0].Close()
		select {
		case out := <-third:
			if status(out) != 200 {
				t.Errorf("third: %q", out)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("third connection not served after a slot freed")
		}
	})
	t.Run("max log", func(t *testing.T) {
		r := newRig(t, func(p *Proxy) { p.MaxLog = 2 })
		for i := range 4 {
			out := r.raw(fmt.Sprintf("GET http://allowed.test:%d/%d HTTP/1.1\r\n\r\n", r.allowed.port(), i))
			want := 200
			if i >= 2 {
				want = 503
			}
			if status(out) != want {
				t.Errorf("connection %d: %q", i, out)
			}
		}
		if n := len(r.waitLog(2)); n != 2 || r.p.Dropped() != 2 || len(r.allowed.requests()) != 2 {
			t.Errorf("log %d, dropped %d, served %d", n, r.p.Dropped(), len(r.allowed.requests()))
		}
	})
	t.Run("negative", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		err = (&Proxy{MaxConns: -1}).Serve(context.Background(), l)
		if err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("Serve: %v", err)
		}
		if _, err := l.Accept(); err == nil {
			t.Error("listener left open")
		}
	})
}

func (r *rig) waitUntil(cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShutdown: cancelling Serve's context closes every connection
// (accepted, dialled, mid-header, mid-tunnel) and leaves no goroutine.
func TestShutdown(t *testing.T) {
	base := runtime.NumGoroutine()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	r := newRig(t, nil)
	var clients []net.Conn
	dial := func(text string) net.Conn {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, text)
		clients = append(clients, c)
		return c
	}
	tun := dial(fmt.Sprintf("CONNECT %s HTTP/1.1\r\n\r\nping", echo.Addr()))
	buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\nping"))
	if _, err := io.ReadFull(tun, buf); err != nil {
		t.Fatal(err)
	}
	dial("GET http://allowed.test/ HTTP/1.1\r\nX-Half: ")                                                          // mid-header
	dial(fmt.Sprintf("POST http://allowed.test:%d/ HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc", r.allowed.port())) // mid-body
	dial("")                                                                                                       // nothing sent
	r.waitUntil(func() bool { return len(r.p.Log()) == 4 })

	start := time.Now()
	if err := r.shutdown(); err != nil {
		t.Errorf("Serve returned %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	for _, c := range clients {
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("client conn not closed by the proxy: %v", err)
		}
		c.Close()
	}
	if !r.idle() {
		t.Error("entries not final after Serve returned")
	}
	for _, l := range r.p.Log() {
		if l.Method == "CONNECT" && l.Error != "the proxy shut down" {
			t.Errorf("tunnel entry %+v", l)
		}
	}
	// The rig's destinations (and this test's echo server) still run; the
	// proxy's goroutines must be gone. Close the test's own first.
	echo.Close()
	r.allowed.srv.CloseClientConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+serverGoroutines {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d, baseline %d\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serverGoroutines is what the rig's three httptest servers keep running
// (one accept loop each).
const serverGoroutines = 3

// TestEarlyResponse: a destination that answers before the client has
// sent its whole body (and closes) gets its answer relayed at once, and
// the proxy then closes the client's connection instead of waiting for
// the rest of the body.
func TestEarlyResponse(t *testing.T) {
	early := rawDest(t, func() string { return "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nbig!" })
	r := newRig(t, nil)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST http://%s/up HTTP/1.1\r\nContent-Length: 1000000\r\n\r\nonly a little", early)
	// The client stalls; it neither sends more nor closes.
	start := time.Now()
	out, err := io.ReadAll(c)
	if err != nil || status(string(out)) != 413 || !strings.HasSuffix(string(out), "big!") {
		t.Fatalf("%q %v", out, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("connection closed after %v", d)
	}
	if l := r.waitLog(1)[0]; l.Status != 413 || !l.Admitted {
		t.Errorf("log %+v", l)
	}
}

// TestTrailers: declared trailer fields are passed on, undeclared ones
// are not.
func TestTrailers(t *testing.T) {
	r := newRig(t, nil)
	resp := r.raw(fmt.Sprintf("POST http://allowed.test:%d/t HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTrailer: X-Declared\r\n\r\n"+
		"2\r\nok\r\n0\r\nX-Declared: yes\r\nX-Sneaked: no\r\n\r\n", r.allowed.port()))
	if status(resp) != 200 {
		t.Fatalf("%s", resp)
	}
	got := r.allowed.requests()[0]
	if got.Body != "ok" || got.Trailer.Get("X-Declared") != "yes" || got.Trailer.Get("X-Sneaked") != "" {
		t.Errorf("destination saw body %q trailer %v", got.Body, got.Trailer)
	}
}
