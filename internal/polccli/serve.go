package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"polc.dev/polc/executor"
)

type serveParams struct {
	runParams
	listen string
	// ready, when set, receives the address once the server accepts
	// (tests).
	ready func(addr string)
}

func newServeCmd(e *env) *cobra.Command {
	p := &serveParams{}
	c := &cobra.Command{
		Use:   "serve SESSION --listen unix:PATH|tcp:HOST:PORT [--evidence DIR] [--cert FILE] [--sign-key KEY] [--state DB]",
		Short: "Serve the executor to a runtime over HTTP, for one session",
		Long: `serve runs the executor of one session for a runtime in another process
or language. SESSION is a polc run scenario without actions (snapshot,
profile, workspace, principal, tenant): the trusted context is the file's,
never the request's. Actions come as HTTP requests (JSON):

  GET  /v1/session   the session: profile, principal, policy, task boundary
  POST /v1/execute   {"action", "arguments", "timeout"} -> the outcome
  POST /v1/close     close the task boundary (governed: evidence; certifiable:
                     the certificate to --cert), answer, and stop serving

The listener is a Unix socket (mode 0600: its permissions are the access
control) or TCP on a loopback address; anything else is refused. SIGINT and
SIGTERM close the session as /v1/close does. Exit 0 when the session closed
cleanly, 1 when evidence failed or the certificate could not be minted, 2
on bad input.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.scenario = args[0]
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, e, p)
		},
	}
	c.Flags().StringVar(&p.listen, "listen", "", "unix:PATH or tcp:HOST:PORT (loopback)")
	sessionFlags(c, &p.runParams, "session")
	return c
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
	s, err := openSession(e, &p.runParams, false)
	if err != nil {
		return err
	}
	defer s.release()
	if network == "unix" {
		if _, err := os.Lstat(addr); err == nil {
			return usagef("--listen: %s exists (another server, or a stale socket to remove)", addr)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return usagef("--listen: %v", err)
	}
	if network == "unix" {
		defer os.Remove(addr)
		if err := os.Chmod(addr, 0o600); err != nil {
			ln.Close()
			return err
		}
	}
	sv := &server{s: s, closing: make(chan struct{})}
	hs := &http.Server{Handler: sv, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(e.stdout, "polc serve: listening on %s:%s\n", network, ln.Addr())
	if p.ready != nil {
		p.ready(ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case <-sv.closing:
	case err := <-served:
		return err
	}
	// Stop taking requests, let those in flight finish, then close the
	// session (a no-op when /v1/close did).
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	hs.Shutdown(shutdown)
	res, err := sv.close(context.WithoutCancel(ctx))
	if err != nil {
		return err // the close's own error, once more if /v1/close had it
	}
	if res.failed || sv.failures.Load() > 0 {
		return &exitError{ExitFindings}
	}
	return nil
}

// server answers the session's HTTP API.
type server struct {
	s *session
	// mu orders executes before the close: an execute holds it shared,
	// the close exclusively, so nothing runs after the boundary closed.
	mu       sync.RWMutex
	closed   bool
	result   *closeResult
	closeErr error // the close's error (then result is nil)
	closing  chan struct{}
	failures atomic.Int64 // outcomes with an evidence or state error
}

type closeResult struct {
	Evidence    map[string]any `json:"evidence"`
	Certificate map[string]any `json:"certificate"`
	failed      bool
}

// close finishes the session once; later calls return the same result,
// or the same error. Either way the session is over (the task boundary
// was closed, or cannot be used again), so the server stops.
func (sv *server) close(ctx context.Context) (*closeResult, error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.closed {
		return sv.result, sv.closeErr
	}
	sv.closed = true
	defer close(sv.closing)
	ev, cert, failed, err := sv.s.finish(ctx)
	if err != nil {
		sv.closeErr = err
		return nil, err
	}
	sv.result = &closeResult{Evidence: ev, Certificate: cert, failed: failed}
	return sv.result, nil
}

// maxRequest bounds a request body.
const maxRequest = 16 << 20

func (sv *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var route func(http.ResponseWriter, *http.Request)
	method := http.MethodPost
	switch r.URL.Path {
	case "/v1/session":
		route, method = sv.session, http.MethodGet
	case "/v1/execute":
		route = sv.execute
	case "/v1/close":
		route = sv.closeSession
	default:
		apiError(w, http.StatusNotFound, "not_found", "no endpoint %s", r.URL.Path)
		return
	}
	if r.Method != method {
		apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", "%s does not take %s", r.URL.Path, r.Method)
		return
	}
	route(w, r)
}

func (sv *server) session(w http.ResponseWriter, _ *http.Request) {
	sv.mu.RLock()
	closed := sv.closed
	sv.mu.RUnlock()
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

func (sv *server) execute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := decodeBody(r, &req, "action", "arguments", "timeout"); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_input", "%v", err)
		return
	}
	if req.Action == "" {
		apiError(w, http.StatusBadRequest, "invalid_input", "the request needs an action")
		return
	}
	sv.mu.RLock()
	defer sv.mu.RUnlock()
	if sv.closed {
		apiError(w, http.StatusConflict, "session_closed", "the session is closed")
		return
	}
	out, err := sv.s.execute(r.Context(), req.Action, req.Arguments, req.Timeout)
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
	}
	return m
}

func (sv *server) closeSession(w http.ResponseWriter, r *http.Request) {
	if err := decodeBody(r, &struct{}{}); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_input", "%v", err)
		return
	}
	res, err := sv.close(context.WithoutCancel(r.Context()))
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

// decodeBody decodes r's JSON object body into v, refusing members other
// than names (compared exactly: encoding/json would match "Action"),
// duplicates, trailing data and more than maxRequest bytes. An empty body
// is an empty object.
func decodeBody(r *http.Request, v any, names ...string) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxRequest+1))
	if err != nil {
		return err
	}
	if len(data) > maxRequest {
		return fmt.Errorf("the body is larger than %d bytes", maxRequest)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return errors.New("the body is not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		if !slices.Contains(names, name) {
			return fmt.Errorf("unknown member %q", name)
		}
		if seen[name] {
			return fmt.Errorf("member %q given twice", name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	full := json.NewDecoder(bytes.NewReader(data))
	full.UseNumber()
	if err := full.Decode(v); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
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
