package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// dest is a destination server: it answers every request with a text
// naming itself and what it received, and records the requests.
type dest struct {
	name string
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seen
}

// seen is a request as a destination received it.
type seen struct {
	Method, URI, Host, Proto string
	Header                   http.Header
	Trailer                  http.Header
	Body                     string
	TransferEncoding         []string
	ContentLength            int64
}

func newDest(t *testing.T, name string, tls bool) *dest {
	d := &dest{name: name}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		d.mu.Lock()
		d.reqs = append(d.reqs, seen{Method: r.Method, URI: r.RequestURI, Host: r.Host, Proto: r.Proto, Header: r.Header.Clone(),
			Trailer: r.Trailer.Clone(), Body: string(body), TransferEncoding: r.TransferEncoding, ContentLength: r.ContentLength})
		d.mu.Unlock()
		switch r.URL.Path {
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "3")
			return
		case "/status":
			code, _ := strconv.Atoi(r.URL.Query().Get("code"))
			w.WriteHeader(code)
			return
		case "/hop":
			w.Header().Set("Connection", "X-Secret")
			w.Header().Set("X-Secret", "1")
			w.Header().Set("Keep-Alive", "timeout=5")
			w.Header().Set("X-Kept", "1")
		}
		fmt.Fprintf(w, "%s says %s %s (%d body bytes)", d.name, r.Method, r.RequestURI, len(body))
	})
	if tls {
		d.srv = httptest.NewTLSServer(h)
	} else {
		d.srv = httptest.NewServer(h)
	}
	t.Cleanup(d.srv.Close)
	return d
}

func (d *dest) addr() string { return d.srv.Listener.Addr().String() }

func (d *dest) port() int {
	_, p, _ := net.SplitHostPort(d.addr())
	n, _ := strconv.Atoi(p)
	return n
}

func (d *dest) requests() []seen {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]seen(nil), d.reqs...)
}

// rig is a proxy on loopback whose dialer maps test names to destination
// servers and records every dial.
type rig struct {
	t       *testing.T
	p       *Proxy
	addr    string
	allowed *dest // allowed.test, reached on any port
	denied  *dest // denied.test
	tls     *dest // secure.test (allowed)

	mu    sync.Mutex
	dials []string
	done  chan error
	stop  context.CancelFunc
}

// admitted are the hosts the rig's Admit lets through.
var admitted = map[string]bool{"allowed.test": true, "secure.test": true, "127.0.0.1": true, "::1": true}

func testAdmit(host string, port int) (bool, string) {
	if admitted[host] {
		return true, "test: " + host + " is on the list"
	}
	return false, "test: " + host + " is not on the list"
}

func newRig(t *testing.T, configure func(*Proxy)) *rig {
	t.Helper()
	r := &rig{t: t, allowed: newDest(t, "allowed", false), denied: newDest(t, "denied", false), tls: newDest(t, "secure", true)}
	r.p = &Proxy{Admit: testAdmit, Dial: r.dial}
	if configure != nil {
		configure(r.p)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = l.Addr().String()
	r.start(l)
	return r
}

func (r *rig) start(l net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	r.done = make(chan error, 1)
	go func() { r.done <- r.p.Serve(ctx, l) }()
	r.t.Cleanup(func() { r.shutdown() })
}

// shutdown cancels Serve and waits (bounded) for it to return.
func (r *rig) shutdown() error {
	r.stop()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(10 * time.Second):
		r.t.Fatal("Serve did not return within 10s of cancel")
		return nil
	}
}

// dial maps allowed.test, denied.test and secure.test to their servers
// (keeping a port other than 80/443 only if it is the server's own, so a
// wrong port fails) and dials everything else for real.
func (r *rig) dial(ctx context.Context, network, address string) (net.Conn, error) {
	r.mu.Lock()
	r.dials = append(r.dials, address)
	r.mu.Unlock()
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var d *dest
	switch host {
	case "allowed.test":
		d = r.allowed
	case "denied.test":
		d = r.denied
	case "secure.test":
		d = r.tls
	}
	if d != nil {
		if port != "80" && port != "443" && port != strconv.Itoa(d.port()) {
			return nil, errors.New("test dialer: nothing listens on " + address)
		}
		address = d.addr()
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (r *rig) dialed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.dials...)
}

// raw sends text on a fresh connection to the proxy, half-closes it (so
// a tunnel ends when the destination is done), and returns what came back
// until the proxy closed.
func (r *rig) raw(text string) string {
	r.t.Helper()
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, text); err != nil {
		r.t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(c)
	if err != nil {
		r.t.Fatalf("reading the answer to %q: %v (got %q)", text, err, out)
	}
	return string(out)
}

// status is the status code of an HTTP response text, -1 if none.
func status(resp string) int {
	line, _, _ := strings.Cut(resp, "\r\n")
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") {
		return -1
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return n
}

// waitLog waits (bounded) until the log has n entries whose connections
// have ended, and returns it.
func (r *rig) waitLog(n int) []Conn {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		log := r.p.Log()
		if len(log) >= n && r.idle() {
			return log
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("log has %d entries (want %d) or connections still open: %+v", len(log), n, log[:min(len(log), 10)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idle reports whether every accepted connection's handler has ended.
func (r *rig) idle() bool {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	for _, rec := range r.p.log {
		if !rec.final {
			return false
		}
	}
	return true
}

// readResp reads one response from a raw connection.
func readResp(t *testing.T, br *bufio.Reader, method string) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// rawDest is a destination that reads one request per connection and
// writes answer() verbatim, then closes.
func rawDest(t *testing.T, answer func() string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, answer())
				// Close as a careful server does: unread request bytes
				// would make the close a reset.
				lingerClose(c)
			}()
		}
	}()
	return l.Addr().String()
}

func readRespErr(br *bufio.Reader) (*http.Response, error) {
	return http.ReadResponse(br, &http.Request{Method: "GET"})
}
