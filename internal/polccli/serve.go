package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"polc.dev/polc/approval"
	"polc.dev/polc/certificate"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
)

type serveParams struct {
	runParams
	listen string
	// bodyBudget bounds the memory of the request bodies in flight
	// (--body-budget; 0: defaultBodyBudget).
	bodyBudget byteSize
	// ready, when set, receives the address once the server accepts
	// (tests).
	ready func(addr string)
	// abort, when set, ends when the close must be abandoned (a second
	// SIGINT or SIGTERM); nil: never.
	abort context.Context
}

func newServeCmd(e *env) *cobra.Command {
	p := &serveParams{}
	c := &cobra.Command{
		Use:   "serve SESSION --listen unix:PATH|tcp:HOST:PORT [--evidence DIR] [--cert FILE] [--sign-key KEY] [--state DB] [--expect-snapshot DIGEST]",
		Short: "Serve the executor to a runtime over HTTP, for one session",
		Long: `serve runs the executor of one session for a runtime in another process
or language. SESSION is a polc run scenario without actions (snapshot,
profile, workspace, principal, tenant): the trusted context is the file's,
never the request's. Actions come as HTTP requests (JSON):

  GET  /v1/session   the session: profile, principal, policy, task boundary
  POST /v1/execute   {"action", "arguments", "timeout"} -> the outcome
  POST /v1/usage     {"tokens", "cost_microunits"}: usage the runtime reports
                     (its model's), charged to the session's budgets
  POST /v1/approvals {"approval": "<signed approval>"} (polc approve): verified
                     against --trust and added to the session's approvals
                     (at most 1,000, one per nonce), presented with every
                     later action; retry the escalated action after it
                     (docs/approvals.md; needs --trust and --state)
  POST /v1/close     close the task boundary (governed: evidence; certifiable:
                     the certificate to --cert), answer, and stop serving;
                     actions still running after {"grace": "30s"} are
                     cancelled (and recorded so)

The listener is a Unix socket (mode 0600: its permissions are the access
control) or TCP on a loopback address; anything else is refused, and so
are requests from web browsers (Origin, Sec-Fetch-Site, a Host over TCP
that is not loopback). SIGINT and SIGTERM close the session as /v1/close
does. A close waits at most its grace (30s) for the actions in flight and
10s more for the stores; a second SIGINT or SIGTERM, or the end of that
time, abandons it (a store that is gone, such as a stopped PostgreSQL
server, cannot hold the process): what was not committed was not
acknowledged, and polc exits 1. Exit 0 when the session closed cleanly,
1 when evidence failed, the certificate could not be minted or the close
was abandoned, 2 on bad input.

--body-budget bounds the memory that the bodies of the requests in flight
may hold, from their first byte to their answer (the bytes and what
decoding them builds); a request beyond it is answered 503 server_busy
with Retry-After, and one that could never fit is 400 invalid_input.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.scenario = args[0]
			ctx, abort, stop := closeOnSignal(c.Context())
			defer stop()
			p.abort = abort
			return runServe(ctx, e, p)
		},
	}
	c.Flags().StringVar(&p.listen, "listen", "", "unix:PATH or tcp:HOST:PORT (loopback)")
	p.bodyBudget = defaultBodyBudget
	c.Flags().Var(&p.bodyBudget, "body-budget", "memory the request bodies in flight may hold, in bytes (suffix KiB, MiB or GiB)")
	sessionFlags(c, &p.runParams, "session")
	expectSnapshotFlag(c, &p.runParams)
	return c
}

// closeOnSignal is the signal handling of a session that closes on
// SIGINT or SIGTERM: ctx ends at the first, which begins the close, and
// abort ends at a second, which abandons it. A close waiting on a store
// that is gone must not swallow the operator's second signal. stop
// releases the signals.
func closeOnSignal(parent context.Context) (ctx, abort context.Context, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stopCtx := context.WithCancel(parent)
	abort, stopAbort := context.WithCancelCause(context.Background())
	go func() {
		select {
		case <-sigs:
			stopCtx()
		case <-abort.Done():
			return
		}
		select {
		case sig := <-sigs:
			stopAbort(fmt.Errorf("a second signal (%v)", sig))
		case <-abort.Done():
		}
	}()
	return ctx, abort, func() {
		signal.Stop(sigs)
		stopAbort(nil)
		stopCtx()
	}
}

// parseListen splits --listen into a network and an address: a Unix
// socket path (relative to dir), or a TCP address whose host is a
// loopback address or localhost. The API authenticates nobody, so it is
// never offered beyond the machine's own users.
func parseListen(dir, listen string) (network, addr string, err error) {
	scheme, rest, ok := strings.Cut(listen, ":")
	switch {
	case !ok || rest == "":
		return "", "", usagef("--listen %q: want unix:PATH or tcp:HOST:PORT", listen)
	case scheme == "unix":
		if !filepath.IsAbs(rest) {
			rest = filepath.Join(dir, rest)
		}
		return "unix", rest, nil
	case scheme == "tcp":
		host, _, err := net.SplitHostPort(rest)
		if err != nil {
			return "", "", usagef("--listen %q: %v", listen, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return "", "", usagef("--listen %q: TCP only on a loopback address (the API has no authentication; use a Unix socket)", listen)
		}
		return "tcp", rest, nil
	}
	return "", "", usagef("--listen %q: want unix:PATH or tcp:HOST:PORT", listen)
}

func runServe(ctx context.Context, e *env, p *serveParams) error {
	if p.listen == "" {
		return usagef("serve needs --listen unix:PATH or tcp:HOST:PORT")
	}
	network, addr, err := parseListen(e.dir, p.listen)
	if err != nil {
		return err
	}
	if network == "unix" {
		p.socket = addr
	}
	s, err := openSession(e, &p.runParams, false)
	if err != nil {
		return err
	}
	// The close's context (s.stop) lasts until the stores are closed.
	stopClose := func() {}
	defer func() {
		s.release()
		stopClose()
	}()
	var ln net.Listener
	if network == "unix" {
		var remove func()
		if ln, remove, err = listenUnix(addr); err != nil {
			return usagef("--listen: %v", err)
		}
		defer remove()
	} else if ln, err = net.Listen(network, addr); err != nil {
		return usagef("--listen: %v", err)
	}
	actions, stopActions := context.WithCancel(ctx)
	defer stopActions()
	budget := int64(p.bodyBudget)
	if budget <= 0 {
		budget = defaultBodyBudget
	}
	abort := p.abort
	if abort == nil {
		abort = context.Background()
	}
	sv := &server{s: s, closing: make(chan struct{}), tcp: network == "tcp", actions: actions, stopActions: stopActions,
		budget: &memBudget{max: budget}, abort: abort}
	hs, served := startHTTP(ctx, e, "serve", sv, ln, network, addr, p.ready)
	select {
	case <-ctx.Done():
	case <-sv.closing:
	case err := <-served:
		return err
	}
	// Stop taking requests, let those in flight finish, then close the
	// session (a no-op when /v1/close did). All of it is bounded by the
	// close's time, and by a second signal: the requests in flight and
	// the close may be waiting on a store that is gone.
	shutdown, cancel := closeContext(abort, defaultCloseGrace)
	stopClose = cancel
	s.stop = shutdown
	go func() {
		// Past the grace, the actions in flight are cancelled, so that
		// the requests waiting for them end.
		select {
		case <-time.After(defaultCloseGrace):
		case <-shutdown.Done():
		}
		stopActions()
	}()
	hs.Shutdown(shutdown)
	res, err := sv.close(shutdown, defaultCloseGrace)
	if err != nil {
		return err // the close's own error, once more if /v1/close had it
	}
	if res.failed || sv.failures.Load() > 0 {
		return &exitError{ExitFindings}
	}
	return nil
}

// closeStoreTime is how long a close may wait on its stores (the
// task_closed append, the state, the certificate) once the grace for the
// actions in flight has passed.
const closeStoreTime = 10 * time.Second

// errCloseTimeUp is the cause of a close abandoned when its time ran out.
var errCloseTimeUp = errors.New("the close's grace period ended")

// closeContext bounds a close whose actions get grace: it ends
// closeStoreTime after the grace, or when abort does (a second signal).
func closeContext(abort context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(abort, grace+closeStoreTime, errCloseTimeUp)
}

// listenUnix listens on a new Unix socket at path, mode 0600. The socket
// is made in a private directory next to path, given its mode, then
// hard-linked to path, which fails if path exists: it is never reachable
// with the umask's mode and never replaces a file. remove unlinks path if
// it is still this socket (another server may have taken the path once
// this one stopped accepting).
func listenUnix(path string) (ln net.Listener, remove func(), err error) {
	if runtime.GOOS == "windows" {
		// Windows has no socket modes to protect, and whether it
		// hard-links a socket's reparse point is not established here:
		// listen at path itself, refusing one that exists.
		if _, err := os.Lstat(path); err == nil {
			return nil, nil, fmt.Errorf("%s exists (another server, or a stale socket to remove)", path)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, nil, err
		}
		return l, func() {}, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".polc")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	sock := filepath.Join(tmp, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(sock, 0o600); err != nil {
		l.Close()
		return nil, nil, err
	}
	if err := os.Link(sock, path); err != nil {
		l.Close()
		if errors.Is(err, fs.ErrExist) {
			return nil, nil, fmt.Errorf("%s exists (another server, or a stale socket to remove)", path)
		}
		return nil, nil, err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return l, func() {
		if cur, err := os.Lstat(path); err == nil && os.SameFile(fi, cur) {
			os.Remove(path)
		}
	}, nil
}

// server answers the session's HTTP API.
type server struct {
	s *session
	// mu orders executes before the close: an execute holds it shared,
	// the close exclusively, so nothing runs after the boundary closed.
	mu     sync.RWMutex
	closed bool
	// closeBegan is set when a close begins, before it waits for the
	// actions in flight: executes arriving then are refused at once.
	closeBegan atomic.Bool
	result     *closeResult
	closeErr   error // the close's error (then result is nil)
	closing    chan struct{}
	failures   atomic.Int64 // outcomes with an evidence or state error
	// tcp: the listener is TCP, which a browser can reach (the Host
	// header is checked).
	tcp bool
	// actions is the context of the actions in flight, on top of their
	// requests'; stopActions cancels it when a close's grace runs out
	// (nil: never).
	actions     context.Context
	stopActions context.CancelFunc
	// budget bounds the memory of the bodies in flight (nil: none, in
	// tests that build a server by hand).
	budget *memBudget
	// abort ends when a close must be abandoned (a second signal; nil:
	// never).
	abort context.Context
	// name is the command serving the session, for messages ("" is
	// serve).
	name string
}

// defaultCloseGrace is how long a close waits for the actions in flight
// before it cancels them, unless /v1/close says otherwise: an action
// without a timeout must not hold the session open forever.
const defaultCloseGrace = 30 * time.Second

type closeResult struct {
	Evidence    map[string]any `json:"evidence"`
	Certificate map[string]any `json:"certificate"`
	// Error is set when failed, as in every error answer.
	Error  map[string]any `json:"error,omitempty"`
	failed bool
}

// close finishes the session once; later calls return the same result,
// or the same error. Either way the session is over (the task boundary
// was closed, or cannot be used again), so the server stops. It waits for
// the actions in flight; those still running after grace are cancelled
// (the executor records them as cancelled, and the close goes on once
// they have ended).
func (sv *server) close(ctx context.Context, grace time.Duration) (*closeResult, error) {
	sv.closeBegan.Store(true)
	if sv.stopActions != nil {
		t := time.AfterFunc(grace, sv.stopActions)
		defer t.Stop()
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.closed {
		return sv.result, sv.closeErr
	}
	sv.closed = true
	defer close(sv.closing)
	// The close never waits longer than its time on the stores, nor past
	// a second signal: a store that is gone must not hold it forever.
	abort := sv.abort
	if abort == nil {
		abort = context.Background()
	}
	bounded, cancel := closeContext(abort, grace)
	defer cancel()
	stopBounded := context.AfterFunc(ctx, func() { cancel() })
	defer stopBounded()
	ctx = bounded
	ev, cert, failed, err := sv.s.finish(ctx)
	if failed != nil && ctx.Err() != nil {
		failed = fmt.Errorf("the close was abandoned (%w): task_closed was not acknowledged, so the chain stays open and no certificate is minted; what was acknowledged before is in the store: %w", context.Cause(ctx), failed)
		name := sv.name
		if name == "" {
			name = "serve"
		}
		fmt.Fprintf(sv.s.e.stderr, "polc: %s: %v\n", name, failed)
	}
	if err != nil {
		sv.closeErr = err
		return nil, err
	}
	sv.result = &closeResult{Evidence: ev, Certificate: cert, failed: failed != nil}
	if failed != nil {
		// The client is told why, not only the server's log: a refused
		// mint names its rule (and the finding that broke it).
		sv.result.Error = map[string]any{"code": "close_failed", "message": failed.Error()}
		var re *certificate.RefusedError
		if errors.As(failed, &re) {
			sv.result.Error["rule"] = string(re.Rule)
			if re.Code != "" {
				sv.result.Error["finding"] = string(re.Code)
			}
		}
	}
	return sv.result, nil
}

// maxRequest bounds a request body.
const maxRequest = 16 << 20

// defaultBodyBudget is --body-budget's default: room for a few bodies of
// maxRequest bytes at once (each costs about twice its size, its bytes
// and what decoding builds), and for any number of ordinary ones.
const defaultBodyBudget = 128 << 20

// readTimeout bounds the reading of a request's body and how long a
// connection may stay idle, so that slow or idle clients do not hold
// connections (and a close waiting for the requests in flight) forever.
// Not http.Server.ReadTimeout: that deadline would outlive the body and
// cancel a long action's context.
var readTimeout = 30 * time.Second

// retryAfter is the Retry-After of a 503 server_busy, in seconds.
const retryAfter = "1"

// memBudget is a count of bytes that requests take before they hold
// memory and give back when they end: a request that cannot take what it
// needs is refused at once, never queued (a queue of bodies would be
// memory too).
type memBudget struct {
	mu        sync.Mutex
	used, max int64
}

// take takes n bytes, or reports false and takes nothing.
func (b *memBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.max-b.used {
		return false
	}
	b.used += n
	return true
}

func (b *memBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
}

// decodeCost bounds what decoding a body of n bytes of shape s holds: its
// strings (at most n bytes), and for each value its slot, for each object
// its map, for each member its entry. The constants are measured
// (TestServeDecodeCostBound): decoded, `[{"a":0},…]` is fifty times its
// text.
func decodeCost(n int, s jcs.Shape) int64 {
	return int64(n) + 48*int64(s.Values) + 400*int64(s.Objects) + 112*int64(s.Members)
}

// budgetErr says why a body was not admitted: busy (retry later) or
// never (it could not fit even in an idle server).
type budgetErr struct {
	never bool
	msg   string
}

// charge holds the bytes one request took from the budget, given back
// when the request ends.
type charge struct {
	b    *memBudget
	held int64
}

func (c *charge) take(n int64, what string) *budgetErr {
	if c.b == nil {
		return nil
	}
	if n+c.held > c.b.max {
		return &budgetErr{never: true, msg: fmt.Sprintf("%s needs %d bytes of the server's body budget of %d (--body-budget)", what, n+c.held, c.b.max)}
	}
	if !c.b.take(n) {
		return &budgetErr{msg: fmt.Sprintf("the server is busy: the bodies in flight hold its body budget of %d bytes (--body-budget); retry", c.b.max)}
	}
	c.held += n
	return nil
}

func (c *charge) release() {
	if c.b != nil {
		c.b.give(c.held)
	}
}

func (sv *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if msg := fromBrowser(r, sv.tcp); msg != "" {
		apiError(w, http.StatusForbidden, "forbidden", "%s", msg)
		return
	}
	var route func(http.ResponseWriter, *http.Request, []byte)
	method := http.MethodPost
	switch r.URL.Path {
	case "/v1/session":
		route, method = sv.session, http.MethodGet
	case "/v1/execute":
		route = sv.execute
	case "/v1/close":
		route = sv.closeSession
	case "/v1/usage":
		route = sv.usage
	case "/v1/approvals":
		route = sv.addApproval
	default:
		apiError(w, http.StatusNotFound, "not_found", "no endpoint %s", r.URL.Path)
		return
	}
	if r.Method != method {
		apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", "%s does not take %s", r.URL.Path, r.Method)
		return
	}
	// The body's memory, from its first byte to the answer, is taken
	// from the server's budget: its bytes as they arrive, then what
	// decoding them will build (known from their shape, before decoding).
	c := &charge{b: sv.budget}
	defer c.release()
	data, ok := admitBody(w, r, c, method == http.MethodPost) // a GET's body is not read as JSON
	if !ok {
		return
	}
	route(w, r, data)
}

// admitBody reads r's body under readTimeout, taking its memory from c:
// its bytes as they arrive and, for a JSON body (asJSON), what decoding it
// will build, known from its shape (checked by jcs.Check, which refuses
// duplicates, bytes that are not UTF-8 and numbers beyond a double) before
// anything decodes it. A body refused is answered here (400, or 503
// server_busy with Retry-After), and ok is false.
func admitBody(w http.ResponseWriter, r *http.Request, c *charge, asJSON bool) (data []byte, ok bool) {
	refuse := func(e *budgetErr) {
		// The rest of the body is read and dropped (it costs no memory)
		// before the answer: a client still sending it would otherwise
		// see the connection reset, not the answer.
		if n, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxRequest+1)); err != nil || n > maxRequest {
			w.Header().Set("Connection", "close")
		}
		if e.never {
			apiError(w, http.StatusBadRequest, "invalid_input", "%s", e.msg)
			return
		}
		w.Header().Set("Retry-After", retryAfter)
		apiError(w, http.StatusServiceUnavailable, "server_busy", "%s", e.msg)
	}
	// Read the body under a deadline, lifted before the action runs.
	// (On a timeout it stays: net/http then drops the connection instead
	// of waiting for the rest.)
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(readTimeout))
	data, berr, err := readBody(r, c)
	switch {
	case berr != nil:
		refuse(berr)
		return nil, false
	case errors.Is(err, os.ErrDeadlineExceeded):
		apiError(w, http.StatusBadRequest, "invalid_input", "the body did not arrive within %v", readTimeout)
		return nil, false
	case errors.Is(err, errTooLarge):
		apiError(w, http.StatusBadRequest, "invalid_input", "the body is larger than %d bytes", maxRequest)
		return nil, false
	case err != nil:
		apiError(w, http.StatusBadRequest, "invalid_input", "cannot read the body: %v", err)
		return nil, false
	}
	rc.SetReadDeadline(time.Time{})
	if len(data) > 0 && asJSON {
		// Checked here, before anything is decoded: its shape says what
		// decoding will cost.
		shape, err := jcs.Check(data)
		if err != nil && len(bytes.Trim(data, jsonSpace)) > 0 {
			apiError(w, http.StatusBadRequest, "invalid_input", "%v", bodySyntaxError(data, err))
			return nil, false
		}
		if berr := c.take(decodeCost(len(data), shape), "decoding the body"); berr != nil {
			refuse(berr)
			return nil, false
		}
	}
	return data, true
}

// errTooLarge: a body beyond maxRequest.
var errTooLarge = errors.New("the body is too large")

// readBody reads r's body, taking its bytes from c as they arrive: all
// of them at once for a Content-Length, else as the buffer grows. A body
// beyond maxRequest is errTooLarge, without reading it whole.
func readBody(r *http.Request, c *charge) ([]byte, *budgetErr, error) {
	if r.ContentLength > maxRequest {
		return nil, nil, errTooLarge
	}
	if r.ContentLength >= 0 {
		if e := c.take(r.ContentLength, "the body"); e != nil {
			return nil, e, nil
		}
		data := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, data); err != nil {
			if err == io.ErrUnexpectedEOF {
				err = fmt.Errorf("it ended before its Content-Length of %d bytes", r.ContentLength)
			}
			return nil, nil, err
		}
		return data, nil, nil
	}
	const chunk = 64 << 10
	var data []byte
	for {
		if len(data) == cap(data) {
			grow := min(max(2*cap(data), chunk), maxRequest+1) - cap(data)
			if grow <= 0 {
				return nil, nil, errTooLarge
			}
			if e := c.take(int64(grow), "the body"); e != nil {
				return nil, e, nil
			}
			data = slices.Grow(data, grow)
		}
		n, err := r.Body.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if len(data) > maxRequest {
			return nil, nil, errTooLarge
		}
		if err == io.EOF {
			return data, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
	}
}

// jsonSpace is the whitespace JSON allows around a value.
const jsonSpace = " \t\r\n"

// bodySyntaxError is err (jcs.Check's) for the API: at its line and
// column, a duplicate member named by its path ("arguments.path").
func bodySyntaxError(data []byte, err error) error {
	var se *jcs.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	if strings.HasPrefix(se.Msg, "duplicate member name") {
		if derr := checkDuplicates(data); derr != nil {
			return fmt.Errorf("%d:%d: %v", se.Line, se.Col, derr)
		}
	}
	return se
}

// fromBrowser says why r may come from a web page, or "". A page the user
// visits can send requests to a loopback port (a cross-origin "simple"
// POST needs no preflight) and, rebinding its own name to 127.0.0.1, read
// the answers; such a request would act as the session's principal.
// Browsers send Origin with every POST and Sec-Fetch-Site with every
// request; runtimes send neither. Over TCP the Host must also name a
// loopback address, which a rebound name does not.
func fromBrowser(r *http.Request, tcp bool) string {
	if _, ok := r.Header["Origin"]; ok {
		return "requests with an Origin header (from a browser) are refused"
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "none" {
		return "requests from a web page (Sec-Fetch-Site) are refused"
	}
	if tcp {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		} else {
			host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		}
		if ip := net.ParseIP(host); !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			return fmt.Sprintf("Host %q is not a loopback address", r.Host)
		}
	}
	return ""
}

func (sv *server) session(w http.ResponseWriter, _ *http.Request, _ []byte) {
	closed := sv.closeBegan.Load()
	ec := sv.s.ec
	out := map[string]any{
		"profile": ec.Profile, "principal": ec.Principal.String(), "tenant": ec.Tenant, "workspace": ec.Workspace,
		"policy":   map[string]any{"policy_id": ec.Policy.PolicyID, "version": ec.Policy.Version, "digest": ec.Policy.Digest},
		"boundary": nil, "closed": closed,
	}
	if b := sv.s.boundary; b != nil {
		out["boundary"] = map[string]any{"task_boundary_id": b.ID(), "chain_id": b.ChainID(), "certifiable": b.Certifiable()}
	}
	writeJSON(w, http.StatusOK, out)
}

// executeRequest is POST /v1/execute's body.
type executeRequest struct {
	Action    string         `json:"action"`
	Arguments map[string]any `json:"arguments"`
	Timeout   string         `json:"timeout"`
}

func (sv *server) execute(w http.ResponseWriter, r *http.Request, body []byte) {
	var req executeRequest
	if err := decodeBody(body, &req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_input", "%v", err)
		return
	}
	if req.Action == "" {
		apiError(w, http.StatusBadRequest, "invalid_input", "the request needs an action")
		return
	}
	if sv.closeBegan.Load() {
		apiError(w, http.StatusConflict, "session_closed", "the session is closed")
		return
	}
	sv.mu.RLock()
	defer sv.mu.RUnlock()
	if sv.closed {
		apiError(w, http.StatusConflict, "session_closed", "the session is closed")
		return
	}
	ctx := r.Context()
	if sv.actions != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(sv.actions, cancel)()
	}
	out, err := sv.s.execute(ctx, req.Action, req.Arguments, req.Timeout)
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid_input", "%v", err)
		return
	}
	if b := out.Base(); b.EvidenceError != nil || b.StateError != nil {
		sv.failures.Add(1)
	}
	writeJSON(w, http.StatusOK, outcomeJSON(out))
}

// outcomeJSON is an outcome as the API answers it.
func outcomeJSON(out executor.Outcome) map[string]any {
	b := out.Base()
	m := map[string]any{
		"kind": out.Kind(), "profile": b.Profile, "request_id": b.RequestID, "attempt_id": b.AttemptID,
		"operation_id": b.OperationID, "reason_code": b.ReasonCode, "call_executed": b.CallExecuted,
		"degraded": b.Degraded, "records": b.Records, "trail": b.Trail,
	}
	if b.Records == nil {
		m["records"] = []string{}
	}
	if b.EvidenceError != nil {
		m["evidence_error"] = map[string]any{"record_type": b.EvidenceError.RecordType, "call_executed": b.EvidenceError.CallExecuted}
	}
	switch o := out.(type) {
	case *executor.Succeeded:
		m["result"], m["result_digest"] = o.Result, o.ResultDigest
	case *executor.Failed:
		m["class"] = o.Class
	case *executor.Deferred:
		m["retry_at"] = o.RetryAt.UTC().Format(time.RFC3339Nano)
	case *executor.Escalated:
		m["approval"] = map[string]any{"approver_class": o.Approval.ApproverClass, "gate_id": o.Approval.GateID,
			"request_digest": o.Approval.RequestDigest, "rule_ids": o.Approval.RuleIDs, "expires_at": o.Approval.ExpiresAt}
		// The approval request as polc approve reads it (save it as a
		// file), and the refusal of the approval presented, if any.
		m["approval_request"] = o.Approval.File()
		if o.Approval.Refusal != "" {
			m["approval_refusal"] = o.Approval.Refusal
		}
	}
	return m
}

// usageRequest is POST /v1/usage's body: usage the runtime consumed
// outside any action (its model's tokens and cost), charged to the
// session's budgets.
type usageRequest struct {
	Tokens         json.Number `json:"tokens"`
	CostMicrounits json.Number `json:"cost_microunits"`
}

func (sv *server) usage(w http.ResponseWriter, r *http.Request, body []byte) {
	var req usageRequest
	if err := decodeBody(body, &req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_input", "%v", err)
		return
	}
	m := map[string]any{}
	if req.Tokens != "" {
		m["tokens"] = req.Tokens
	}
	if req.CostMicrounits != "" {
		m["cost_microunits"] = req.CostMicrounits
	}
	u, err := usageOf(m)
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid_input", "%v", err)
		return
	}
	sv.mu.RLock()
	defer sv.mu.RUnlock()
	if sv.closed || sv.closeBegan.Load() {
		apiError(w, http.StatusConflict, "session_closed", "the session is closed")
		return
	}
	if err := sv.s.ex.Charge(r.Context(), sv.s.ec, u); err != nil {
		// The ledger failed: the usage is not counted, and the runtime
		// must know (a budget it believes binding would not).
		apiError(w, http.StatusInternalServerError, "budget_unavailable", "the usage was not charged: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"charged": map[string]any{"tokens": u.Tokens, "cost_microunits": u.CostMicrounits}})
}

// approvalBody is POST /v1/approvals' body: a signed approval (polc
// approve's output) as a JSON string.
type approvalBody struct {
	Approval string `json:"approval"`
}

// addApproval adds a signed approval to the session's approvals: the
// client then retries the escalated action, a new request that presents
// it (docs/approvals.md). It must parse and verify against the session's
// approver trust now (every later escalation presents every held
// approval, so an unverified one would only cost); whether it is bound
// to the retried request and unspent is the executor's to judge then. A
// second POST of the same approval (nonce) is held once.
func (sv *server) addApproval(w http.ResponseWriter, r *http.Request, body []byte) {
	var req approvalBody
	if err := decodeBody(body, &req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_input", "%v", err)
		return
	}
	if !sv.s.approvalsOn {
		apiError(w, http.StatusConflict, approval.CodeUnavailable, "the session takes no approvals: serve it with --trust FILE (approver keys) and --state FILE")
		return
	}
	signed := []byte(req.Approval)
	now := sv.s.now()
	a, _, err := approval.Open(signed, sv.s.approvalTrust, now)
	if err == nil {
		if _, expires := a.Times(); !now.Before(expires) {
			err = &approval.Error{Code: approval.CodeExpired, Msg: "the approval expired at " + a.ExpiresAt}
		}
	}
	if err != nil {
		code := approval.CodeMalformed
		if ae := (*approval.Error)(nil); errors.As(err, &ae) {
			code = ae.Code
		}
		status := http.StatusForbidden
		if code == approval.CodeMalformed {
			status = http.StatusBadRequest
		}
		apiError(w, status, code, "%v", err)
		return
	}
	sv.mu.RLock()
	defer sv.mu.RUnlock()
	if sv.closed || sv.closeBegan.Load() {
		apiError(w, http.StatusConflict, "session_closed", "the session is closed")
		return
	}
	dup, err := sv.s.approvals.add(signed, a, now)
	if err != nil {
		apiError(w, http.StatusTooManyRequests, "approval_limit", "%v: retry the actions that spend them, or let them expire", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"approval_id": a.ApprovalID, "request_id": a.RequestID, "approver_class": a.ApproverClass,
		"decision": a.Decision, "expires_at": a.ExpiresAt, "duplicate": dup})
}

// closeRequest is POST /v1/close's body.
type closeRequest struct {
	// Grace is how long to wait for the actions in flight before
	// cancelling them, a Go duration >= 0 (default 30s).
	Grace string `json:"grace"`
}

func (sv *server) closeSession(w http.ResponseWriter, r *http.Request, body []byte) {
	var req closeRequest
	if err := decodeBody(body, &req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_input", "%v", err)
		return
	}
	grace := defaultCloseGrace
	if req.Grace != "" {
		d, err := time.ParseDuration(req.Grace)
		if err != nil || d < 0 {
			apiError(w, http.StatusBadRequest, "invalid_input", "grace %q is not a duration >= 0", req.Grace)
			return
		}
		grace = d
	}
	res, err := sv.close(context.WithoutCancel(r.Context()), grace)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "close_failed", "%v", err)
		return
	}
	status := http.StatusOK
	if res.failed {
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, res)
}

// decodeBody decodes a JSON object body into *v, a struct whose members
// are its string, bool and map[string]any fields named by their json tags
// (compared exactly: encoding/json would match "Action"). It refuses other
// members, duplicates (at any depth), trailing data, bytes that are not
// UTF-8 (encoding/json would replace them) and numbers beyond a double,
// with the line and column of the problem, and more than maxRequest bytes.
// An empty body is an empty object. Numbers decode as json.Number.
func decodeBody(data []byte, v any) error {
	if len(data) > maxRequest {
		return fmt.Errorf("the body is larger than %d bytes", maxRequest)
	}
	if len(bytes.Trim(data, jsonSpace)) == 0 {
		data = []byte("{}")
	}
	x, err := strictjson.Value(data)
	if err != nil {
		return bodySyntaxError(data, err)
	}
	obj, ok := x.(map[string]any)
	if !ok {
		return errors.New("the body is not a JSON object")
	}
	rv := reflect.ValueOf(v).Elem()
	fields := map[string]reflect.Value{}
	for i := range rv.NumField() {
		name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
		fields[name] = rv.Field(i)
	}
	names := slices.Sorted(maps.Keys(obj))
	for _, name := range names {
		if _, ok := fields[name]; !ok {
			return fmt.Errorf("unknown member %q", name)
		}
	}
	for _, name := range names {
		val, f := obj[name], fields[name]
		if val == nil {
			continue // null: the member's zero value, as encoding/json
		}
		if got := reflect.ValueOf(val); got.Type().AssignableTo(f.Type()) {
			f.Set(got)
			continue
		}
		want := map[reflect.Kind]string{reflect.String: "a string", reflect.Map: "an object",
			reflect.Slice: "an array", reflect.Bool: "a bool"}[f.Kind()]
		if f.Type() == reflect.TypeFor[json.Number]() {
			want = "a number"
		}
		if want == "" {
			want = "another type"
		}
		return fmt.Errorf("member %q: %s, want %s", name, jsonKind(val), want)
	}
	return nil
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a bool"
	case []any:
		return "an array"
	}
	return "an object"
}

// checkDuplicates refuses an object, at any depth of v (valid JSON, its
// depth bounded by encoding/json), that names a member twice: decoders
// disagree on which one counts. The error names the member by its path
// ("arguments.path").
func checkDuplicates(v []byte) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	var walk func(at string) error
	walk = func(at string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					return err
				}
				name, _ := tok.(string)
				where := name
				if at != "" {
					where = at + "." + name
				}
				if seen[name] {
					return fmt.Errorf("member %q given twice", where)
				}
				seen[name] = true
				if err := walk(where); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	return walk("")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		fmt.Fprintf(&buf, `{"error":{"code":"unencodable","message":%q}}`+"\n", err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func apiError(w http.ResponseWriter, status int, code, format string, args ...any) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": fmt.Sprintf(format, args...)}})
}

// byteSize is a flag's count of bytes: digits, optionally followed by
// KiB, MiB or GiB.
type byteSize int64

func (b *byteSize) String() string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if *b > 0 && *b%(1<<u.shift) == 0 {
			return strconv.FormatInt(int64(*b)>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *byteSize) Set(s string) error {
	digits, shift := s, uint(0)
	for suffix, sh := range map[string]uint{"KiB": 10, "MiB": 20, "GiB": 30} {
		if d, ok := strings.CutSuffix(s, suffix); ok {
			digits, shift = d, sh
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return fmt.Errorf("want a positive number of bytes, optionally followed by KiB, MiB or GiB")
	}
	*b = byteSize(n << shift)
	return nil
}

func (b *byteSize) Type() string { return "size" }

// startHTTP serves h on ln with the hardening polc serve and polc mcp share
// (header and idle timeouts), every request's context derived from base,
// says where it listens (the port chosen for :0 included) on stdout and
// calls ready with that address. served receives what Serve returned.
func startHTTP(base context.Context, e *env, cmd string, h http.Handler, ln net.Listener, network, addr string, ready func(string)) (hs *http.Server, served <-chan error) {
	hs = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: readTimeout,
		BaseContext: func(net.Listener) context.Context { return base }}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	if network == "tcp" {
		addr = ln.Addr().String()
	}
	fmt.Fprintf(e.stdout, "polc %s: listening on %s:%s\n", cmd, network, addr)
	if ready != nil {
		ready(addr)
	}
	return hs, done
}
