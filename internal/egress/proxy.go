package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Admit decides whether a destination may be reached. host is the name
// (or IP literal) the client asked for, lowercase, with no brackets around
// an IPv6 address and no trailing dot; port is in 1..65535. reason is
// recorded in the connection log either way and, for a refusal, sent to
// the client. Admit is called from many goroutines at once and must be
// safe for that; a panic in it is a refusal.
type Admit func(host string, port int) (ok bool, reason string)

// Conn is one entry of the connection log: one accepted client
// connection, which carries at most one request.
type Conn struct {
	// Method is the request's method (CONNECT, GET, POST, ...); empty if
	// the client sent no request line the proxy could read.
	Method string `json:"method"`
	// Host and Port are the destination as given to Admit; empty and 0
	// when the request was refused before a destination was parsed.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Admitted is whether Admit let the destination through.
	Admitted bool `json:"admitted"`
	// Reason is Admit's reason, or why the proxy refused the request
	// before asking Admit.
	Reason string `json:"reason"`
	// Status is the status line the client got: the proxy's own (200 for
	// an established tunnel, 4xx/5xx for a refusal or a failed dial) or
	// the destination's, relayed; 0 if none was sent.
	Status int `json:"status"`
	// BytesUp is what was written to the destination (the rewritten
	// request and its body, or the tunnelled bytes); BytesDown is what
	// was written to the client on the destination's behalf (the relayed
	// response, or the tunnelled bytes).
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
	// Error is what ended an admitted connection abnormally (a dial
	// failure, a malformed response, the idle timeout, shutdown).
	Error string `json:"error,omitempty"`
}

// Defaults of the Proxy limits.
const (
	DefaultMaxConns       = 64
	DefaultMaxHeaderBytes = 64 << 10
	DefaultIdleTimeout    = 2 * time.Minute
	DefaultMaxLog         = 10000
)

// maxResponseHeaderBytes bounds a destination's response header (and each
// interim 1xx response's); a larger one is a 502.
const maxResponseHeaderBytes = 1 << 20

// maxInterim bounds the interim (1xx) responses skipped before the final
// one.
const maxInterim = 16

// Proxy is an HTTP proxy that reaches only destinations Admit admits and
// logs every connection. Set its fields before calling Serve and do not
// change them after; the zero value of a limit means its default, a
// negative one is an error from Serve. A Proxy must not be copied after
// first use.
type Proxy struct {
	// Admit decides each destination; nil refuses every one.
	Admit Admit
	// Dial opens the connection to an admitted destination. address is
	// "host:port" with the host exactly as given to Admit (a name is
	// resolved by Dial, not before Admit). nil means a net.Dialer, which
	// never consults HTTP_PROXY or any other proxy setting.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// MaxConns is how many client connections are served at once; Serve
	// accepts no more until one ends (DefaultMaxConns).
	MaxConns int
	// MaxHeaderBytes bounds a request's line and header
	// (DefaultMaxHeaderBytes); a larger one gets 431.
	MaxHeaderBytes int
	// IdleTimeout bounds how long a request header may take to arrive,
	// how long a dial may take, and how long a connection may go with no
	// byte moving in either direction (DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxLog bounds the connection log (DefaultMaxLog). Once it is full
	// every further connection is answered 503 and not served: the proxy
	// carries no traffic it cannot log. Dropped counts them.
	MaxLog int

	mu      sync.Mutex
	log     []*record
	dropped int
}

// record is a log entry being filled in; bytes are counted live.
type record struct {
	c          Conn // guarded by Proxy.mu
	final      bool // the connection has ended; guarded by Proxy.mu
	up, down   *atomic.Int64
	upC, downC *idleConn
}

// Log returns a copy of the connection log, one entry per accepted
// connection, in the order they were accepted. Entries of connections
// still being served show what is known so far; once Serve has returned,
// all entries are final. Safe to call at any time, from any goroutine.
func (p *Proxy) Log() []Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Conn, len(p.log))
	for i, r := range p.log {
		out[i] = r.c
		if r.upC != nil {
			out[i].BytesUp = r.upC.count.Load()
		}
		if r.downC != nil {
			out[i].BytesDown = r.downC.count.Load()
		}
	}
	return out
}

// Dropped is how many connections were refused (503) because the log was
// full; they have no log entry.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// reserve appends a log entry, or reports the log full.
func (p *Proxy) reserve(max int) *record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.log) >= max {
		p.dropped++
		return nil
	}
	r := &record{}
	p.log = append(p.log, r)
	return r
}

func (p *Proxy) update(r *record, f func(*Conn)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&r.c)
}

// config is a Proxy's settings with defaults applied.
type config struct {
	admit     Admit
	dial      func(ctx context.Context, network, address string) (net.Conn, error)
	maxConns  int
	maxHeader int
	idle      time.Duration
	maxLog    int
}

func (p *Proxy) config() (config, error) {
	c := config{admit: p.Admit, dial: p.Dial, maxConns: p.MaxConns, maxHeader: p.MaxHeaderBytes, idle: p.IdleTimeout, maxLog: p.MaxLog}
	if c.maxConns < 0 || c.maxHeader < 0 || c.idle < 0 || c.maxLog < 0 {
		return c, fmt.Errorf("egress: negative limit (MaxConns %d, MaxHeaderBytes %d, IdleTimeout %v, MaxLog %d)", p.MaxConns, p.MaxHeaderBytes, p.IdleTimeout, p.MaxLog)
	}
	if c.dial == nil {
		c.dial = (&net.Dialer{}).DialContext
	}
	if c.maxConns == 0 {
		c.maxConns = DefaultMaxConns
	}
	if c.maxHeader == 0 {
		c.maxHeader = DefaultMaxHeaderBytes
	}
	if c.idle == 0 {
		c.idle = DefaultIdleTimeout
	}
	if c.maxLog == 0 {
		c.maxLog = DefaultMaxLog
	}
	return c, nil
}

// server is the state of one Serve call.
type server struct {
	p   *Proxy
	cfg config
	ctx context.Context

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// track registers c to be closed at shutdown; after shutdown began it
// closes c and reports false.
func (s *server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *server) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

func (s *server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
}

// Serve accepts client connections on l and proxies them until ctx is
// done or l fails. It returns only after closing l and every connection it
// accepted or dialled and after all its goroutines have ended: nil when
// ctx ended it, else the error that stopped accepting (net.ErrClosed if l
// was closed by someone else), or a configuration error before accepting
// anything. Serve may be called more than once (one listener each); the
// calls share the log.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	cfg, err := p.config()
	if err != nil {
		l.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &server{p: p, cfg: cfg, ctx: ctx, conns: map[net.Conn]struct{}{}}
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		l.Close()
		s.closeAll()
		close(stopped)
	}()
	defer func() {
		cancel()
		<-stopped
		s.wg.Wait()
	}()

	sem := make(chan struct{}, cfg.maxConns)
	var backoff time.Duration
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		c, err := l.Accept()
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return nil
			}
			if temporary(err) {
				// Out of file descriptors and the like: wait for
				// connections to end rather than spin or give up.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return nil
				}
			}
			return err
		}
		backoff = 0
		rec := p.reserve(cfg.maxLog)
		if !s.track(c) {
			// Shutdown began between Accept and here.
			if rec != nil {
				p.update(rec, func(e *Conn) { e.Reason, rec.final = "no request: the proxy shut down", true })
			}
			<-sem
			continue
		}
		s.wg.Go(func() {
			defer func() { <-sem }()
			defer s.untrack(c)
			if rec != nil {
				defer p.update(rec, func(*Conn) { rec.final = true })
			}
			if rec == nil {
				c.SetWriteDeadline(time.Now().Add(cfg.idle))
				writeRefusal(c, http.StatusServiceUnavailable, "", "connection log is full; no further connections are served", nil)
				lingerClose(c)
				return
			}
			s.handle(c, rec)
		})
	}
}

func temporary(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// methods is what the proxy forwards as plain HTTP.
var methods = []string{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}

// handle serves one client connection: one request, then close.
func (s *server) handle(c net.Conn, rec *record) {
	cfg := s.cfg
	closed := false
	defer func() {
		if !closed {
			lingerClose(c)
		}
	}()
	// answer sends the proxy's own status; refuse also records why.
	answer := func(status int, method, text string, extra http.Header) {
		s.p.update(rec, func(e *Conn) { e.Status = status })
		c.SetWriteDeadline(time.Now().Add(cfg.idle))
		writeRefusal(c, status, method, text, extra)
	}
	refuse := func(status int, method, reason string, extra http.Header) {
		s.p.update(rec, func(e *Conn) { e.Reason = reason })
		answer(status, method, reason, extra)
	}

	act := newActivity(cfg.idle)
	client := &idleConn{Conn: c, act: act}
	lim := &limitReader{r: c, n: int64(cfg.maxHeader)}
	br := bufio.NewReaderSize(lim, 4096)
	// One deadline for the whole header: a client trickling a byte at a
	// time must not hold a connection slot beyond the idle timeout.
	headerDeadline := time.Now().Add(cfg.idle)
	c.SetReadDeadline(headerDeadline)
	req, err := http.ReadRequest(br)
	if err == nil {
		err = validHeader(req.Header)
	}
	switch {
	case err == nil:
	case lim.exhausted():
		refuse(http.StatusRequestHeaderFieldsTooLarge, "", fmt.Sprintf("request too large: request line and header exceed %d bytes", cfg.maxHeader), nil)
		return
	case err == io.EOF:
		s.p.update(rec, func(e *Conn) { e.Reason = "no request: the client closed the connection before sending one" })
		return
	case isTimeout(err) || !time.Now().Before(headerDeadline):
		// bufio.Reader.ReadLine hands back a partial line without its
		// error, so a timeout mid-line shows as a malformed line.
		refuse(http.StatusRequestTimeout, "", fmt.Sprintf("no request: the request header did not arrive within %v", cfg.idle), nil)
		return
	case s.ctx.Err() != nil:
		s.p.update(rec, func(e *Conn) { e.Reason = "no request: the proxy shut down" })
		return
	default:
		refuse(http.StatusBadRequest, "", "malformed request: "+clip(err.Error()), nil)
		return
	}
	lim.r, lim.n = client, -1
	c.SetReadDeadline(time.Time{})
	s.p.update(rec, func(e *Conn) { e.Method = clip(req.Method) })

	if req.ProtoMajor != 1 {
		refuse(http.StatusHTTPVersionNotSupported, req.Method, fmt.Sprintf("HTTP version %s is not supported: the proxy speaks HTTP/1.x", quote(req.Proto)), nil)
		return
	}
	if req.Method != "CONNECT" && !slices.Contains(methods, req.Method) {
		refuse(http.StatusMethodNotAllowed, req.Method, fmt.Sprintf("method %s is not supported", quote(req.Method)),
			http.Header{"Allow": {"CONNECT, " + strings.Join(methods, ", ")}})
		return
	}
	t, err := parseTarget(req.Method, req.RequestURI)
	if err != nil {
		refuse(http.StatusBadRequest, req.Method, "malformed request: "+err.Error(), nil)
		return
	}
	s.p.update(rec, func(e *Conn) { e.Host, e.Port = t.host, t.port })
	if req.Method == "CONNECT" && (req.ContentLength != 0 || len(req.TransferEncoding) > 0) {
		// Everything after a CONNECT header is tunnel data; a body would
		// be read as the first bytes to the destination by some and as a
		// body by others.
		refuse(http.StatusBadRequest, req.Method, "malformed request: CONNECT with a body", nil)
		return
	}
	ok, reason := s.admit(t.host, t.port)
	if reason == "" && !ok {
		reason = "refused by the admission policy"
	}
	s.p.update(rec, func(e *Conn) { e.Admitted = ok })
	if !ok {
		refuse(http.StatusForbidden, req.Method, reason, nil)
		return
	}
	s.p.update(rec, func(e *Conn) { e.Reason = reason })

	dctx, cancel := context.WithTimeout(s.ctx, cfg.idle)
	raw, err := cfg.dial(dctx, "tcp", t.authority())
	cancel()
	if err != nil {
		if s.ctx.Err() != nil {
			s.p.update(rec, func(e *Conn) { e.Error = "the proxy shut down" })
			return
		}
		s.p.update(rec, func(e *Conn) { e.Error = clip("dial: " + err.Error()) })
		answer(http.StatusBadGateway, req.Method, clip("cannot reach "+t.authority()+": "+err.Error()), nil)
		return
	}
	if !s.track(raw) {
		s.p.update(rec, func(e *Conn) { e.Error = "the proxy shut down" })
		return
	}
	defer s.untrack(raw)
	defer raw.Close()
	up := &idleConn{Conn: raw, act: act}
	s.p.update(rec, func(e *Conn) { rec.upC, rec.downC = up, client })

	if req.Method == "CONNECT" {
		closed = true
		err = s.tunnel(c, client, br, up, rec)
	} else {
		err = s.forward(req, t, c, client, br, up, rec)
	}
	if err != nil {
		if s.ctx.Err() != nil {
			err = errors.New("the proxy shut down")
		}
		s.p.update(rec, func(e *Conn) { e.Error = clip(err.Error()) })
	}
}

// admit asks Admit, refusing when there is none or it panics.
func (s *server) admit(host string, port int) (ok bool, reason string) {
	if s.cfg.admit == nil {
		return false, "no admission policy: every destination is refused"
	}
	defer func() {
		if r := recover(); r != nil {
			ok, reason = false, fmt.Sprintf("admission check failed: %v", r)
		}
	}()
	return s.cfg.admit(host, port)
}

// tunnel answers an admitted CONNECT and copies bytes both ways until
// both sides are done, one fails, or the connection is idle.
func (s *server) tunnel(c net.Conn, client *idleConn, br *bufio.Reader, up *idleConn, rec *record) error {
	c.SetWriteDeadline(time.Now().Add(s.cfg.idle))
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.Close()
		return err
	}
	s.p.update(rec, func(e *Conn) { e.Status = http.StatusOK })
	errc := make(chan error, 2)
	go func() {
		// br first hands over what the client sent after the CONNECT
		// header (a TLS ClientHello often arrives with it).
		_, err := io.Copy(up, br)
		if err == nil {
			closeWrite(up.Conn)
		}
		errc <- err
	}()
	go func() {
		_, err := io.Copy(client, up)
		if err == nil {
			closeWrite(client.Conn)
		}
		errc <- err
	}()
	var first error
	for range 2 {
		if err := <-errc; err != nil {
			if first == nil {
				first = err
			}
			// Unblock the other direction.
			c.Close()
			up.Conn.Close()
		}
	}
	c.Close()
	if isTimeout(first) {
		return fmt.Errorf("idle for %v", s.cfg.idle)
	}
	return first
}

// hopByHop are the headers that describe one connection, not the message;
// they are not forwarded either way (nor are the headers a Connection
// header names).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textprotoTrim(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}

func textprotoTrim(s string) string { return strings.Trim(s, " \t") }

// bodyMethods get a Content-Length: 0 when they have no body: servers
// commonly answer them 411 without one.
var bodyMethods = []string{"PATCH", "POST", "PUT"}

// forward sends the request to the destination in origin form with a
// fresh framing and "Connection: close", and relays the one response.
func (s *server) forward(req *http.Request, t target, c net.Conn, client *idleConn, br *bufio.Reader, up *idleConn, rec *record) error {
	h := req.Header.Clone()
	removeHopByHop(h)
	expect := h.Get("Expect")
	h.Del("Expect")
	h.Del("Host")
	h.Del("Content-Length")
	if strings.EqualFold(expect, "100-continue") && req.ProtoAtLeast(1, 1) {
		// The client waits for this before it sends the body; the body
		// goes to the destination unasked.
		c.SetWriteDeadline(time.Now().Add(s.cfg.idle))
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return err
		}
	}

	type result struct {
		err        error
		fromClient bool
	}
	wrote := make(chan result, 1)
	go func() {
		err, fromClient := writeRequest(up, req, t, h)
		if err != nil && fromClient && !client.aborted.Load() {
			// The client's body broke off: the destination must not wait
			// for the rest of it.
			up.Conn.Close()
		}
		wrote <- result{err, fromClient}
	}()
	// stopWriter ends the request writer, which may be blocked reading the
	// client's body or writing to the destination, and reports an error
	// of the client's body that happened before the stop.
	stopWriter := func() error {
		up.Conn.Close()
		var w result
		select {
		case w = <-wrote:
		default:
			client.abort()
			w = <-wrote
			return nil
		}
		if w.err != nil && w.fromClient {
			return fmt.Errorf("reading the request body: %w", w.err)
		}
		return nil
	}

	lim := &limitReader{r: up, n: -1}
	ubr := bufio.NewReaderSize(lim, 4096)
	resp, err := readResponse(ubr, lim, req.Method)
	if err != nil {
		if berr := stopWriter(); berr != nil {
			return berr
		}
		if isTimeout(err) {
			err = fmt.Errorf("idle for %v", s.cfg.idle)
		}
		c.SetWriteDeadline(time.Now().Add(s.cfg.idle))
		writeRefusal(c, http.StatusBadGateway, req.Method, clip("bad response from "+t.authority()+": "+err.Error()), nil)
		s.p.update(rec, func(e *Conn) { e.Status = http.StatusBadGateway })
		return err
	}
	removeHopByHop(resp.Header)
	resp.Close = true
	if !req.ProtoAtLeast(1, 1) {
		// An HTTP/1.0 client knows no chunked coding; Response.Write
		// sends the body unframed and closes instead.
		resp.ProtoMajor, resp.ProtoMinor = 1, 0
	}
	s.p.update(rec, func(e *Conn) { e.Status = resp.StatusCode })
	err = resp.Write(client)
	if berr := stopWriter(); err == nil {
		err = berr
	}
	return err
}

// writeRequest writes req to w as the destination sees it. fromClient
// reports that the error came from reading the client's body.
func writeRequest(w io.Writer, req *http.Request, t target, h http.Header) (err error, fromClient bool) {
	bw := bufio.NewWriterSize(w, 4096)
	fmt.Fprintf(bw, "%s %s HTTP/1.1\r\nHost: %s\r\n", req.Method, t.path, t.hostHeader())
	if err := h.Write(bw); err != nil {
		return err, false
	}
	chunked := len(req.TransferEncoding) > 0
	// Only the trailer fields the header declared are passed on (net/http
	// keeps every field it reads after the body).
	var declared []string
	for k := range req.Trailer {
		declared = append(declared, k)
	}
	slices.Sort(declared)
	switch {
	case chunked:
		io.WriteString(bw, "Transfer-Encoding: chunked\r\n")
		if len(declared) > 0 {
			io.WriteString(bw, "Trailer: "+strings.Join(declared, ", ")+"\r\n")
		}
	case req.ContentLength > 0 || slices.Contains(bodyMethods, req.Method):
		io.WriteString(bw, "Content-Length: "+strconv.FormatInt(req.ContentLength, 10)+"\r\n")
	}
	io.WriteString(bw, "Connection: close\r\n\r\n")
	// The header goes out now, and each piece of the body as it arrives:
	// a destination may answer before the body is complete, and a client
	// may wait for an answer to part of it.
	if err := bw.Flush(); err != nil {
		return err, false
	}
	body := &errReader{r: req.Body}
	switch {
	case chunked:
		cw := httputil.NewChunkedWriter(bw)
		if _, err := copyFlush(cw, bw, body); err != nil {
			return err, body.err != nil
		}
		cw.Close()
		// req.Trailer holds the values once the body was read to its end.
		trailer := http.Header{}
		for _, k := range declared {
			if vs := req.Trailer[k]; len(vs) > 0 {
				trailer[k] = vs
			}
		}
		if err := validHeader(trailer); err != nil {
			return err, true
		}
		if err := trailer.Write(bw); err != nil {
			return err, false
		}
		io.WriteString(bw, "\r\n")
	case req.ContentLength > 0:
		n, err := copyFlush(bw, bw, body)
		if err != nil {
			return err, body.err != nil
		}
		if n != req.ContentLength {
			return io.ErrUnexpectedEOF, true
		}
	}
	return bw.Flush(), false
}

// copyFlush copies src to dst, flushing bw after every piece.
func copyFlush(dst io.Writer, bw *bufio.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		m, rerr := src.Read(buf)
		if m > 0 {
			if _, err := dst.Write(buf[:m]); err != nil {
				return n, err
			}
			if err := bw.Flush(); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// errReader remembers its source's error, telling a broken client body
// from a broken destination in io.Copy's one error.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// readResponse reads the destination's final response, skipping interim
// (1xx) ones; each header is bounded by maxResponseHeaderBytes.
func readResponse(br *bufio.Reader, lim *limitReader, method string) (*http.Response, error) {
	for range maxInterim {
		lim.n = maxResponseHeaderBytes
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		exhausted := lim.exhausted()
		lim.n = -1
		switch {
		case err != nil && exhausted:
			return nil, fmt.Errorf("response header exceeds %d bytes", maxResponseHeaderBytes)
		case err != nil:
			return nil, err
		case validHeader(resp.Header) != nil:
			return nil, validHeader(resp.Header)
		case resp.StatusCode == http.StatusSwitchingProtocols:
			// The request carried no Upgrade header (hop-by-hop, removed).
			return nil, errors.New("the destination switched protocols unasked")
		case resp.StatusCode >= 200:
			return resp, nil
		}
	}
	return nil, fmt.Errorf("more than %d interim responses", maxInterim)
}

// writeRefusal writes the proxy's own answer: status, the reason as a
// plain-text body (none for HEAD), and Connection: close.
func writeRefusal(w io.Writer, status int, method, reason string, extra http.Header) error {
	body := "polc egress: " + reason + "\n"
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n", status, http.StatusText(status), len(body))
	extra.Write(&b)
	b.WriteString("\r\n")
	if method != "HEAD" {
		b.WriteString(body)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// validHeader checks field names and values against RFC 9110's grammar:
// net/textproto lets through names with spaces and other non-token
// bytes, which the proxy must not pass on for another parser to read its
// own way.
func validHeader(h http.Header) error {
	for k, vs := range h {
		if k == "" {
			return errors.New("empty header field name")
		}
		for i := 0; i < len(k); i++ {
			if !isTokenByte(k[i]) {
				return fmt.Errorf("header field name %s has %q", quote(k), k[i])
			}
		}
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
					return fmt.Errorf("header field %s has a control byte %q", quote(k), c)
				}
			}
		}
	}
	return nil
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// clip bounds a text from the client or the network before it goes into
// the log.
func clip(s string) string {
	if len(s) > 2*maxQuoted {
		return s[:2*maxQuoted] + "..."
	}
	return s
}
