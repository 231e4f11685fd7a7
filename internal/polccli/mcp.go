package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"polc.dev/polc/approval"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/mcpclient"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/strictjson"
)

type mcpParams struct {
	runParams
	// listen is --listen: "" serves MCP on stdin and stdout, else
	// streamable HTTP on unix:PATH or tcp:HOST:PORT (loopback).
	listen string
	// bodyBudget bounds the memory of the HTTP request bodies in flight
	// (--body-budget; 0: defaultBodyBudget).
	bodyBudget byteSize
	// timeout is every call's timeout (--timeout; "" for none).
	timeout string
	// grace is how long the close waits for the calls in flight before
	// cancelling them (--grace).
	grace time.Duration
	// idleTimeout closes the HTTP MCP session after this long without a
	// request (--idle-timeout; 0: never).
	idleTimeout time.Duration
	// abort, when set, ends when the close must be abandoned (a second
	// signal).
	abort context.Context
	// ready, when set, receives the address once the HTTP server accepts
	// (tests).
	ready func(addr string)
}

func newMCPCmd(e *env) *cobra.Command {
	p := &mcpParams{}
	c := &cobra.Command{
		Use:   "mcp SESSION [--listen unix:PATH|tcp:HOST:PORT] [--evidence DIR] [--cert FILE] [--sign-key KEY] [--state DB] [--expect-snapshot DIGEST] [--timeout D] [--grace D] [--idle-timeout D] [--trust FILE --approvals DIR] [--approval-requests DIR]",
		Short: "Serve a session's actions as MCP tools, each call governed by the executor",
		Long: `mcp serves the executor of one session to an MCP client (a coding agent):
its tools are the session's registered actions (bash, read_file,
write_file, edit_file, http_get), each with its descriptor's JSON Schema,
and each tool of the MCP servers the session declares (mcp_servers) as
SERVER__TOOL with the server's own schema, called through the mcp action
(mcp:SERVER/TOOL) on the policy's MCP rules; every tool call is one
Execute in the session's profile and backend, recorded in its evidence
chain when governed. SESSION is a polc serve session file (snapshot,
profile, workspace, principal, tenant, backend, mcp_servers): the trusted
context is the file's, never the client's. With --expect-snapshot DIGEST
it refuses to start unless the session's snapshot has that digest (a
governed harness plan pins the one it read).

Without --listen the server speaks MCP on stdin and stdout (nothing else is
written to stdout); with --listen it serves streamable HTTP on a Unix
socket (mode 0600) or a loopback TCP address, refusing requests from web
browsers and bounding the memory of the bodies in flight (--body-budget),
as polc serve does. It serves one MCP session.

A succeeded call answers its result; any other outcome is a tool error
(isError) that names its kind and reason code. An escalated call's
approval request is in its result (and written to --approval-requests
DIR); once an approver signed it into --approvals DIR as <id>.approval
(polc approve), the client retries the same call with _meta
{"polc.dev/approval": "<id>"}, checked against the approver keys of
--trust FILE and spent once in --state FILE (docs/mcp.md). When the client goes
(end of stdin; over HTTP, the session's DELETE, or --idle-timeout without
a request), or on SIGINT or SIGTERM,
the session closes: the calls in flight are awaited for --grace, then
cancelled; governed, task_closed ends the chain; certifiable, the
certificate is written to --cert. A second SIGINT or SIGTERM abandons
the close (a store that is gone cannot hold the process). Exit 0 when the
session closed cleanly, 1 when evidence failed, the certificate could not
be minted or the close was abandoned, 2 on bad input.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.scenario = args[0]
			if c.Flags().Changed("body-budget") && p.listen == "" {
				return usagef("--body-budget is for --listen (HTTP); over stdio the client sends one message at a time")
			}
			if c.Flags().Changed("idle-timeout") && p.listen == "" {
				return usagef("--idle-timeout is for --listen (HTTP); over stdio the session ends with stdin")
			}
			ctx, abort, stop := closeOnSignal(c.Context())
			defer stop()
			p.abort = abort
			return runMCP(ctx, e, p)
		},
	}
	c.Flags().StringVar(&p.listen, "listen", "", "serve streamable HTTP on unix:PATH or tcp:HOST:PORT (loopback) instead of stdio")
	p.bodyBudget = defaultBodyBudget
	c.Flags().Var(&p.bodyBudget, "body-budget", "memory the HTTP request bodies in flight may hold, in bytes (suffix KiB, MiB or GiB)")
	c.Flags().StringVar(&p.timeout, "timeout", "", "timeout of every tool call, a Go duration (default: none)")
	p.grace = defaultCloseGrace
	c.Flags().DurationVar(&p.grace, "grace", defaultCloseGrace, "how long the close waits for the calls in flight before cancelling them")
	c.Flags().DurationVar(&p.idleTimeout, "idle-timeout", 0, "with --listen: close the session after this long without a request from its client (default: never)")
	c.Flags().StringVar(&p.approvalDir, "approvals", "", "directory of signed approvals (polc approve), <approval request id>.approval, that a retried call names in _meta \"polc.dev/approval\"; needs --trust")
	c.Flags().StringVar(&p.approvalRequests, "approval-requests", "", "directory where each escalated call's approval request is written (<id>.json); not inside the workspace")
	sessionFlags(c, &p.runParams, "session")
	expectSnapshotFlag(c, &p.runParams)
	return c
}

// runMCP serves one session over MCP until the client goes or ctx ends,
// then closes it as polc serve closes its session.
func runMCP(ctx context.Context, e *env, p *mcpParams) error {
	var network, addr string
	if p.listen != "" {
		var err error
		if network, addr, err = parseListen(e.dir, p.listen); err != nil {
			return err
		}
	}
	if _, err := parseTimeout(p.timeout); err != nil {
		return usagef("--timeout: %v", err)
	}
	if p.grace < 0 {
		return usagef("--grace %v: want a duration >= 0", p.grace)
	}
	if p.idleTimeout < 0 {
		return usagef("--idle-timeout %v: want a duration >= 0", p.idleTimeout)
	}
	if p.approvalDir != "" && p.trust == "" {
		return usagef("--approvals needs --trust FILE, naming the approver keys (approver:<class> <vkey>) the approvals are checked against")
	}
	if network == "unix" {
		p.socket = addr
	}
	s, err := openSession(e, &p.runParams, false)
	if err != nil {
		return err
	}
	defer s.release()
	if p.abort != nil {
		// A second signal abandons the stores' close too, not only the
		// session's (their own retries bound it otherwise).
		s.stop = p.abort
	}
	tools := mcpTools{timeout: p.timeout}
	if p.approvalDir != "" {
		tools.approvalDir = e.abs(p.approvalDir)
		if err := os.MkdirAll(tools.approvalDir, 0o755); err != nil {
			return s.ioErr(tools.approvalDir, "create directory", err)
		}
	}
	if len(s.sc.ReportedUsage) > 0 {
		// The executor would let actions run on the promise of reports
		// that an MCP client has no way to make: a limit on that usage
		// would never bind.
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, s.scenPath)}, diag.CodeInvalidInput,
			"reported_usage [%s]: an MCP client has no way to report usage (polc serve's POST /v1/usage does); remove it",
			strings.Join(s.sc.ReportedUsage, ", "))
	}
	// The actions' context is not the client's: a client that goes does
	// not cancel the calls in flight at once, the close does after its
	// grace (and a client's explicit cancellation does, per call).
	actions, stopActions := context.WithCancel(context.WithoutCancel(ctx))
	defer stopActions()
	budget := int64(p.bodyBudget)
	if budget <= 0 {
		budget = defaultBodyBudget
	}
	sv := &server{s: s, closing: make(chan struct{}), tcp: network == "tcp", actions: actions, stopActions: stopActions,
		budget: &memBudget{max: budget}, abort: p.abort, name: "mcp"}
	ms := newMCPServer(sv, tools)
	if network == "" {
		err = serveMCPStdio(ctx, e, sv, ms, p.grace)
	} else {
		err = serveMCPHTTP(ctx, e, sv, ms, network, addr, p)
	}
	if err != nil {
		return err
	}
	return closedStatus(e, sv)
}

// closedStatus reports the close (on stderr: stdout may be the MCP
// stream) and the exit it implies.
func closedStatus(e *env, sv *server) error {
	res, err := sv.close(context.Background(), 0) // closed already: its result
	if err != nil {
		return err
	}
	var parts []string
	if ev := res.Evidence; ev != nil {
		n, unit := ev["records"], "records"
		if fmt.Sprint(n) == "1" {
			unit = "record"
		}
		parts = append(parts, fmt.Sprintf("evidence %v (%v %s)", ev["path"], n, unit))
	}
	if c := res.Certificate; c != nil {
		parts = append(parts, fmt.Sprintf("certificate %v", c["path"]))
	}
	if len(parts) == 0 {
		parts = append(parts, "no evidence (profile "+string(sv.s.ec.Profile)+")")
	}
	fmt.Fprintf(e.stderr, "polc mcp: session closed: %s\n", strings.Join(parts, ", "))
	if res.failed || sv.failures.Load() > 0 {
		return &exitError{ExitFindings}
	}
	return nil
}

// serveMCPStdio serves MCP on e's stdin and stdout until stdin ends (the
// client went), the connection breaks or ctx ends, then closes the
// session.
func serveMCPStdio(ctx context.Context, e *env, sv *server, ms *mcp.Server, grace time.Duration) error {
	in := &watchedReader{r: e.stdin, gone: make(chan struct{})}
	ss, err := ms.Connect(ctx, &mcp.IOTransport{Reader: in, Writer: nopWriteCloser{e.stdout}}, nil)
	if err != nil {
		return err
	}
	ended := make(chan struct{})
	go func() { ss.Wait(); close(ended) }()
	select {
	case <-ctx.Done():
	case <-in.gone:
	case <-ended:
	}
	_, cerr := sv.close(context.WithoutCancel(ctx), grace)
	// Every call has its answer now (the close waited for them); the
	// connection then ends once they are written.
	ss.Close()
	return cerr
}

// watchedReader is the client's stream: gone closes when reading it fails
// (end of input: the client closed its end, or went).
type watchedReader struct {
	r    io.Reader
	once sync.Once
	gone chan struct{}
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if err != nil {
		w.once.Do(func() { close(w.gone) })
	}
	return n, err
}

// Close leaves the process's stdin open: the SDK closes its reader when
// the session ends, and stdin is not ours to close.
func (w *watchedReader) Close() error { return nil }

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serveMCPHTTP serves MCP as streamable HTTP on the listener until the
// MCP session ends (DELETE, or a connection the SDK closed) or ctx ends,
// then closes the session.
func serveMCPHTTP(ctx context.Context, e *env, sv *server, ms *mcp.Server, network, addr string, p *mcpParams) error {
	var ln net.Listener
	var err error
	if network == "unix" {
		var remove func()
		if ln, remove, err = listenUnix(addr); err != nil {
			return usagef("--listen: %v", err)
		}
		defer remove()
	} else if ln, err = net.Listen(network, addr); err != nil {
		return usagef("--listen: %v", err)
	}
	h := &mcpHTTP{sv: sv, ms: ms, ended: make(chan struct{}),
		inner: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms },
			&mcp.StreamableHTTPOptions{MaxRequestBodyBytes: maxRequest, SessionTimeout: p.idleTimeout})}
	hs, served := startHTTP(context.WithoutCancel(ctx), e, "mcp", h, ln, network, addr, p.ready)
	select {
	case <-ctx.Done():
	case <-h.ended:
	case err := <-served:
		sv.close(context.WithoutCancel(ctx), 0)
		return err
	}
	_, cerr := sv.close(context.WithoutCancel(ctx), p.grace)
	// The MCP session's streams (a client's GET) end with it; then the
	// HTTP server has only the requests being answered to wait for.
	for ss := range ms.Sessions() {
		ss.Close()
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	hs.Shutdown(shutdown)
	return cerr
}

// mcpSessionHeader is the streamable HTTP transport's session header.
const mcpSessionHeader = "Mcp-Session-Id"

// mcpHTTP guards the SDK's streamable HTTP handler as polc serve guards
// its API (no browsers, bounded bodies), and holds it to one MCP session:
// the session's end is the polc session's.
type mcpHTTP struct {
	sv    *server
	ms    *mcp.Server
	inner http.Handler
	// mu serializes the requests that would open an MCP session, so that
	// one only can.
	mu sync.Mutex
	// session is the MCP session's id once one was opened.
	session string
	// ended closes when the MCP session ends.
	ended     chan struct{}
	endedOnce sync.Once
}

func (h *mcpHTTP) end() { h.endedOnce.Do(func() { close(h.ended) }) }

func (h *mcpHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if msg := fromBrowser(r, h.sv.tcp); msg != "" {
		apiError(w, http.StatusForbidden, "forbidden", "%s", msg)
		return
	}
	c := &charge{b: h.sv.budget}
	defer c.release()
	data, ok := admitBody(w, r, c, r.Method == http.MethodPost)
	if !ok {
		return
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(data)), int64(len(data))
	id := r.Header.Get(mcpSessionHeader)
	if id != "" || r.Method != http.MethodPost { // only a POST opens a session
		h.mu.Lock()
		ours := id != "" && id == h.session
		h.mu.Unlock()
		if ours && r.Method == http.MethodDelete {
			// The client ends the session: the close begins now (new
			// calls are refused), while the SDK waits for the calls in
			// flight, which the close's grace bounds.
			h.end()
		}
		h.inner.ServeHTTP(w, r)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.sv.closeBegan.Load():
		apiError(w, http.StatusConflict, "session_closed", "the session is closed")
		return
	case h.session != "":
		apiError(w, http.StatusConflict, "session_taken", "this server serves one MCP session, which is open; start another polc mcp for another client")
		return
	}
	h.inner.ServeHTTP(w, r)
	opened := w.Header().Get(mcpSessionHeader)
	if opened == "" {
		return
	}
	for ss := range h.ms.Sessions() {
		// The SDK closes a session whose initialization failed before the
		// request returns: only one still there was opened.
		if ss.ID() == opened {
			h.session = opened
			go func() { ss.Wait(); h.end() }()
		}
	}
}

// mcpTools is how the tools call the executor.
type mcpTools struct {
	// timeout is every call's timeout (a Go duration, "" for none).
	timeout string
	// approvalDir is the absolute --approvals directory ("" for none).
	approvalDir string
}

// newMCPServer is the MCP server of sv's session: one tool per action of
// the session's registry, each calling it through the executor.
func newMCPServer(sv *server, tools mcpTools) *mcp.Server {
	ec := sv.s.ec
	ms := mcp.NewServer(&mcp.Implementation{Name: "polc", Version: moduleVersion()}, &mcp.ServerOptions{
		Instructions: fmt.Sprintf("Every tool call is decided by policy %s (%s) and runs through polc's executor in the %s profile as %s. "+
			"A call that did not succeed is a tool error naming its kind and reason code; a denied call did not run.",
			ec.Policy.PolicyID, ec.Policy.Version, ec.Profile, ec.Principal.String()),
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, a := range sv.s.reg.Catalog().Actions() {
		d := a.Descriptor()
		if d.ID == "mcp" {
			continue // offered as each upstream tool, below
		}
		ms.AddTool(&mcp.Tool{Name: d.ID, Description: toolDescription(d.ID, d.Version), InputSchema: d.Arguments},
			toolHandler(sv, d.ID, nil, tools))
	}
	if sv.s.mcp != nil {
		for _, t := range sv.s.mcp.Tools() {
			if why := addUpstreamTool(ms, sv, t, tools); why != "" {
				fmt.Fprintf(sv.s.e.stderr, "polc: warning: mcp server %s: tool %q is not offered: %s\n", t.Server, t.Name, why)
			}
		}
	}
	return ms
}

// agentToolName is the form of a tool name every coding agent takes
// (Claude Code's rule, the strictest).
var agentToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// upstreamTool is a tool of a declared MCP server, offered as
// SERVER__TOOL: a call is the mcp action on that server and tool.
type upstreamTool struct{ server, tool string }

// addUpstreamTool offers t as SERVER__TOOL with its own input schema, or
// says why it cannot be offered: a name outside agentToolName's form, or
// a schema the SDK refuses.
func addUpstreamTool(ms *mcp.Server, sv *server, t mcpclient.Tool, tools mcpTools) (why string) {
	name := t.Server + "__" + t.Name
	if !agentToolName.MatchString(name) {
		return fmt.Sprintf("%s is not a tool name a coding agent takes (1 to 64 letters, digits, '_' and '-'); call it as mcp:%s/%s", name, t.Server, t.Name)
	}
	var schema map[string]any
	if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
		return "its input schema is not a JSON object"
	}
	desc := t.Description
	if desc != "" && !strings.HasSuffix(desc, ".") {
		desc += "."
	}
	desc = strings.TrimSpace(fmt.Sprintf("%s Tool %s of the MCP server %s, governed by polc (action mcp:%s/%s): the policy decides each call.",
		desc, t.Name, t.Server, t.Server, t.Name))
	defer func() {
		// The SDK panics on a schema it refuses (an x-mcp-header
		// annotation it does not take, say): that tool is not offered.
		if p := recover(); p != nil {
			why = "the MCP SDK refuses its input schema"
		}
	}()
	ms.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: schema},
		toolHandler(sv, "mcp", &upstreamTool{t.Server, t.Name}, tools))
	return ""
}

// toolDescriptions say what each built-in does, for the model choosing a
// tool.
var toolDescriptions = map[string]string{
	"bash":       "Run a shell command in the workspace; the result has exit_code, stdout and stderr.",
	"read_file":  "Read a file of the workspace; the result has its content.",
	"write_file": "Write a file of the workspace (created or replaced) with content.",
	"edit_file":  "Replace the text old with new in a file of the workspace.",
	"http_get":   "Fetch a URL with an HTTP GET; the result has the status, headers and body.",
}

func toolDescription(id, ver string) string {
	d := toolDescriptions[id]
	if d == "" {
		d = "The action " + id + "."
	}
	return fmt.Sprintf("%s Governed by polc (action %s@%s): the policy decides each call.", d, id, ver)
}

// toolHandler calls action through the executor, as polc serve's
// /v1/execute does: refused once the close began, never run after it.
// For an upstream tool (up non-nil), the call is the mcp action with the
// tool's server, name and the call's arguments.
func toolHandler(sv *server, action string, up *upstreamTool, tools mcpTools) mcp.ToolHandler {
	name := action
	if up != nil {
		name = up.server + "__" + up.tool
	}
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, err := toolArguments(req.Params.Arguments)
		if err != nil {
			return toolError("invalid_input", fmt.Sprintf("the arguments of %s: %v", name, err), nil), nil
		}
		if up != nil {
			args = map[string]any{"server": up.server, "tool": up.tool, "arguments": args}
		}
		// The approval the retried call names, if any: a call that names
		// one it cannot present is refused, never run without it.
		var extra [][]byte
		if v, ok := req.Params.Meta[approvalMetaKey]; ok {
			signed, refusal := namedApproval(sv, tools.approvalDir, v)
			if refusal != nil {
				return refusal, nil
			}
			extra = [][]byte{signed}
		}
		if sv.closeBegan.Load() {
			return toolError("session_closed", "the session is closed: nothing more runs in it", nil), nil
		}
		sv.mu.RLock()
		defer sv.mu.RUnlock()
		if sv.closed {
			return toolError("session_closed", "the session is closed: nothing more runs in it", nil), nil
		}
		actx, cancel := context.WithCancel(sv.actions)
		defer cancel()
		// The client's own cancellation (notifications/cancelled) cancels
		// the call; the request's end for another cause (the client went)
		// leaves it to the close's grace.
		defer context.AfterFunc(ctx, func() {
			if context.Cause(ctx) == context.Canceled {
				cancel()
			}
		})()
		out, err := sv.s.executeWith(actx, action, args, tools.timeout, extra)
		if err != nil {
			return toolError("invalid_input", err.Error(), nil), nil
		}
		if b := out.Base(); b.EvidenceError != nil || b.StateError != nil {
			sv.failures.Add(1)
		}
		if esc, ok := out.(*executor.Escalated); ok && sv.s.p.approvalRequests != "" {
			// Written for the approver (polc approve ID --dir DIR); the
			// result carries the request as well, so a file that cannot
			// be written (said on stderr) loses nothing.
			sv.s.writeApprovalRequest(&esc.Approval)
		}
		return toolResult(out, up != nil), nil
	}
}

// approvalMetaKey is the _meta member of a tool call that presents an
// approval: the id of the approval request it approves.
const approvalMetaKey = "polc.dev/approval"

// namedApproval reads the signed approval a retried call names by its
// approval request id, dir/<id>.approval, or returns the tool error that
// refuses the call: the session takes no approvals, the id is not one,
// no approval of it is there or readable, it is no signed approval, or
// it approves another request. Whether it verifies, is bound to this
// call and unspent is the executor's to judge, as for polc serve's.
func namedApproval(sv *server, dir string, v any) ([]byte, *mcp.CallToolResult) {
	id, ok := v.(string)
	if !ok || !uuidRe.MatchString(id) {
		return nil, toolError("invalid_input", fmt.Sprintf(`_meta %q: want the id of an approval request (a lowercase UUID), as the escalated call's approval_request.id`, approvalMetaKey), nil)
	}
	extra := map[string]any{"approval_request_id": id}
	if dir == "" || !sv.s.approvalsOn {
		return nil, toolError(approval.CodeUnavailable, "the session takes no approvals: start polc mcp with --trust FILE (approver keys) and --approvals DIR", extra)
	}
	signed, err := readApprovalFile(filepath.Join(dir, id+".approval"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, toolError(mcpCodeApprovalNotFound, "no approval of request "+id+" is in the approvals directory yet: an approver signs it there as "+id+".approval (polc approve)", extra)
	case err != nil:
		// Never the error's text: it names a path polc resolved.
		return nil, toolError(approval.CodeUnavailable, "the approval of request "+id+" cannot be read", extra)
	}
	a, err := approval.Parse(signed)
	if err != nil {
		return nil, toolError(approval.CodeMalformed, id+".approval is not a signed approval: "+err.Error(), extra)
	}
	if a.RequestID != id {
		return nil, toolError(approval.CodeWrongRequest, id+".approval approves request "+a.RequestID+", not "+id, extra)
	}
	return signed, nil
}

// mcpCodeApprovalNotFound refuses a retried call whose approval is not
// (yet) in the approvals directory.
const mcpCodeApprovalNotFound = "approval_not_found"

// uuidRe is the form of an approval request id, which names its file.
var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// readApprovalFile reads a signed approval file: a regular file (opened
// without blocking, so that a FIFO cannot hold the call) of at most
// approval.MaxBytes.
func readApprovalFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, approval.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > approval.MaxBytes {
		return nil, fmt.Errorf("larger than %d bytes", approval.MaxBytes)
	}
	return b, nil
}

// toolArguments decodes a tool call's arguments: one JSON object (absent
// or null: {}), decoded strictly — no member twice at any depth, UTF-8
// only, no number beyond a double — with numbers as json.Number, as
// polc serve decodes its requests' arguments.
func toolArguments(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.Trim(raw, jsonSpace)) == 0 || string(bytes.Trim(raw, jsonSpace)) == "null" {
		return map[string]any{}, nil
	}
	if len(raw) > maxRequest {
		return nil, fmt.Errorf("larger than %d bytes", maxRequest)
	}
	v, err := strictjson.Value(raw)
	if err != nil {
		return nil, bodySyntaxError(raw, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s, want an object", jsonKind(v))
	}
	return m, nil
}

// outcomeMetaKey is the _meta member of a tool result that identifies
// its attempt in the evidence.
const outcomeMetaKey = "polc.dev/outcome"

// toolResult maps an outcome to a tool result: a success's result as
// text (its JSON) and, when it is an object, as structured content; any
// other kind a tool error naming the kind and reason code with a one-line
// explanation. No error text of the callable's is in it: a failure says
// its class, as the evidence does. An upstream tool's result (upstream)
// is given back as the upstream server's content.
func toolResult(out executor.Outcome, upstream bool) *mcp.CallToolResult {
	b := out.Base()
	meta := map[string]any{"kind": string(out.Kind()), "request_id": b.RequestID, "attempt_id": b.AttemptID,
		"call_executed": b.CallExecuted, "records": b.Records}
	if b.OperationID != nil {
		meta["operation_id"] = *b.OperationID
	}
	if b.Records == nil {
		meta["records"] = []string{}
	}
	if b.EvidenceError != nil {
		meta["evidence_error"] = map[string]any{"record_type": b.EvidenceError.RecordType, "call_executed": b.EvidenceError.CallExecuted}
	}
	if o, ok := out.(*executor.Succeeded); ok {
		if content, structured, ok := upstreamContent(o.Result, upstream); ok {
			r := &mcp.CallToolResult{Content: content, Meta: mcp.Meta{outcomeMetaKey: meta}}
			if structured != nil {
				r.StructuredContent = structured
			}
			return r
		}
		text, structured := resultContent(o.Result)
		r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, Meta: mcp.Meta{outcomeMetaKey: meta}}
		if structured != nil {
			r.StructuredContent = structured
		}
		return r
	}
	sc := map[string]any{"kind": string(out.Kind()), "reason_code": b.ReasonCode, "call_executed": b.CallExecuted}
	var msg string
	switch o := out.(type) {
	case *executor.Denied:
		msg = "the policy refused the call; it did not run"
		if d := denyDetail(b); d != "" {
			msg += ": " + d
		}
	case *executor.Failed:
		sc["class"] = o.Class
		msg = "the call ran and failed (" + o.Class + ")"
		if o.Result != nil {
			// What the callable returned with its failure (bash's exit
			// code and output): the model needs it to go on.
			sc["result"] = o.Result
		}
	case *executor.TimedOut:
		msg = "the call ran past its timeout and was stopped"
	case *executor.Cancelled:
		msg = "the call was cancelled"
	case *executor.Ambiguous:
		msg = "the call's effect is unknown: it may or may not have happened"
	case *executor.Deferred:
		at := o.RetryAt.UTC().Format(time.RFC3339Nano)
		sc["retry_at"] = at
		msg = "no capacity now; the call did not run; retry at " + at
	case *executor.Escalated:
		ap := map[string]any{"id": o.Approval.ID, "approver_class": o.Approval.ApproverClass, "gate_id": o.Approval.GateID,
			"request_digest": o.Approval.RequestDigest, "rule_ids": o.Approval.RuleIDs}
		msg = "the call needs the approval of " + o.Approval.ApproverClass + "; it did not run"
		if o.Approval.Refusal != "" {
			msg = "the approval presented was refused (" + o.Approval.Refusal + "); the call needs the approval of " + o.Approval.ApproverClass + " and did not run"
			sc["approval_refusal"] = o.Approval.Refusal
		}
		msg += "; approval request " + o.Approval.ID
		if o.Approval.ExpiresAt != nil {
			ap["expires_at"] = o.Approval.ExpiresAt.UTC().Format(time.RFC3339Nano)
			msg += " (it expires at " + ap["expires_at"].(string) + ")"
		}
		msg += `: once approved, retry the same call with _meta {"` + approvalMetaKey + `": "` + o.Approval.ID + `"}`
		sc["approval"] = ap
		// The approval request as polc approve reads it, as polc serve
		// answers it.
		sc["approval_request"] = o.Approval.File()
	}
	msg = oneLine(msg)
	sc["message"] = msg
	text := fmt.Sprintf("%s (%s): %s", out.Kind(), b.ReasonCode, msg)
	if res, ok := sc["result"]; ok {
		if content, _, ok := upstreamContent(res, upstream); ok {
			// The upstream tool's own error text, as a failing bash's
			// output is given.
			for _, c := range content {
				text += "\n" + c.(*mcp.TextContent).Text
			}
		} else if t, _ := resultContent(res); t != "" {
			text += "\n" + t
		}
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: sc, Meta: mcp.Meta{outcomeMetaKey: meta}}
}

// upstreamContent is the content of an upstream tool's result
// (mcpclient's {"content": [...], "structured_content", "truncated"}):
// each text as a text content, anything else described in one, and the
// structured content when it is an object. ok is false for a result of
// another shape.
func upstreamContent(v any, upstream bool) (content []mcp.Content, structured map[string]any, ok bool) {
	m, isMap := v.(map[string]any)
	items, isList := m["content"].([]any)
	if !upstream || !isMap || !isList {
		return nil, nil, false
	}
	for _, it := range items {
		item, _ := it.(map[string]any)
		switch t, _ := item["text"].(string); {
		case item["type"] == "text", item["type"] == "resource" && item["text"] != nil:
			content = append(content, &mcp.TextContent{Text: t})
		default:
			// polc passes text on; other content is named, not given.
			b, _ := json.Marshal(item)
			content = append(content, &mcp.TextContent{Text: "[content not passed on by polc: " + string(b) + "]"})
		}
	}
	if m["truncated"] == true {
		content = append(content, &mcp.TextContent{Text: "[polc: the result was cut at its size bound]"})
	}
	if content == nil {
		content = []mcp.Content{}
	}
	structured, _ = m["structured_content"].(map[string]any)
	return content, structured, true
}

// resultContent is a result's text (its JSON, a string as itself) and,
// when it is a JSON object, the object as structured content.
func resultContent(v any) (string, map[string]any) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "(the result has no JSON form)", nil
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		m = nil // not an object: text only
	}
	return strings.TrimSuffix(buf.String(), "\n"), m
}

// denyDetail is why the call was denied, from its trail: the detail of
// the stage that refused it (never the persistence stage's, which may
// carry a store's error text).
func denyDetail(b *executor.OutcomeBase) string {
	for i := len(b.Trail) - 1; i >= 0; i-- {
		if t := b.Trail[i]; t.Detail != "" && t.Stage < 13 && t.Result != executor.TrailOK {
			return t.Detail
		}
	}
	return ""
}

// oneLine folds s onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// toolError is a tool error raised before the executor (arguments that
// do not decode, a closed session).
func toolError(code, msg string, extra map[string]any) *mcp.CallToolResult {
	msg = oneLine(msg)
	sc := map[string]any{"kind": "refused", "reason_code": code, "message": msg, "call_executed": false}
	for k, v := range extra {
		sc[k] = v
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "refused (" + code + "): " + msg}},
		StructuredContent: sc}
}

// moduleVersion is polc's module version, as --version says it.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(unknown)"
}
