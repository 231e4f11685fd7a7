// Package mcpclient is the callable of the mcp action: an MCP client of
// the upstream servers a session declares. It starts each server as a
// process speaking MCP over its stdin and stdout (the Go SDK's client),
// initializes it and lists its tools once, and then calls a tool of a
// server for each mcp call the executor allowed. Every bound is explicit:
// the number of tools a server may list, the size of a tool's input
// schema, of a message from a server and of a result. A server that
// crashed, or whose connection broke, fails its calls (mcp_unavailable);
// Close ends every server and the processes it started.
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// Server is one upstream server to start.
type Server struct {
	// Name is the server's name in policies and requests
	// (mcp:<name>/<tool>).
	Name string
	// Argv is the program and its arguments; Argv[0] is an absolute path.
	Argv []string
	// Env is the server's whole environment (NAME=value): nothing of the
	// caller's is inherited.
	Env []string
	// Dir is its working directory.
	Dir string
}

// Options bound and wire a Client. Zero values take the defaults.
type Options struct {
	// MaxTools is how many tools a server may list (default 512): a
	// server that lists more is not started.
	MaxTools int
	// MaxSchemaBytes bounds a tool's input schema, as JSON (default 64
	// KiB): a tool with a larger one is not taken.
	MaxSchemaBytes int
	// MaxResultBytes bounds a call's result: the text of its content and
	// its structured content, as JSON (default 1 MiB). What is beyond is
	// cut, and the result says truncated.
	MaxResultBytes int
	// MaxMessageBytes bounds one JSON-RPC message from a server (default
	// 8 MiB): a larger one breaks the server's connection.
	MaxMessageBytes int
	// StartTimeout bounds starting one server: its initialization and the
	// listing of its tools (default 30s).
	StartTimeout time.Duration
	// CloseTimeout is how long Close waits for a server to exit once its
	// input is closed, before it is terminated (default 5s).
	CloseTimeout time.Duration
	// Stderr receives the servers' standard error, each line prefixed
	// with its server's name; nil discards it.
	Stderr io.Writer
	// Warn is told of each tool not taken (a bad name or schema).
	Warn func(msg string)
	// Command makes the command that runs a server (the landlock backend
	// makes one under its sandbox); nil runs it directly. Stdin, Stdout,
	// Stderr and SysProcAttr.Setpgid are set on what it returns.
	Command func(s Server) (*exec.Cmd, error)
}

func (o *Options) defaults() {
	if o.MaxTools <= 0 {
		o.MaxTools = 512
	}
	if o.MaxSchemaBytes <= 0 {
		o.MaxSchemaBytes = 64 << 10
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = 1 << 20
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 8 << 20
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 5 * time.Second
	}
	if o.Warn == nil {
		o.Warn = func(string) {}
	}
}

// maxToolName bounds a tool's name (the SDK's own limit).
const maxToolName = 128

// maxDescription bounds the description kept of a tool.
const maxDescription = 4 << 10

// Tool is a tool an upstream server listed.
type Tool struct {
	Server      string
	Name        string
	Description string
	// InputSchema is the tool's input JSON Schema, a JSON object whose
	// type is "object".
	InputSchema json.RawMessage
}

// StartError is a server that could not be started, initialized or
// listed.
type StartError struct {
	Server string
	Err    error
}

func (e *StartError) Error() string { return fmt.Sprintf("mcp server %s: %v", e.Server, e.Err) }
func (e *StartError) Unwrap() error { return e.Err }

// Client is the connected upstream servers. It is safe for concurrent
// use.
type Client struct {
	o       Options
	servers map[string]*conn
	// calls is the context of every call: Close cancels it.
	calls     context.Context
	stopCalls context.CancelFunc
	closeOnce sync.Once
	stderrMu  sync.Mutex
}

// conn is one running server.
type conn struct {
	name  string
	cmd   *exec.Cmd
	cs    *mcp.ClientSession
	tools map[string]Tool
	// in and out are polc's ends of the server's stdin and stdout.
	in, out *os.File
	// exited closes once the process has exited and its group was
	// killed; gone once the MCP connection ended (the process exited, it
	// closed its output, or sent what is no MCP message).
	exited, gone chan struct{}
	// closing is set once Close began ending the server.
	closing atomic.Bool
	stderr  *lineWriter
}

// Start starts every server in order, and fails (closing those started)
// on the first that cannot be started, initialized or listed.
func Start(servers []Server, o Options) (*Client, error) {
	o.defaults()
	c := &Client{o: o, servers: map[string]*conn{}}
	c.calls, c.stopCalls = context.WithCancel(context.Background())
	for _, s := range servers {
		if _, dup := c.servers[s.Name]; dup {
			c.Close()
			return nil, &StartError{s.Name, errors.New("declared twice")}
		}
		sc, err := c.start(s)
		if err != nil {
			c.Close()
			return nil, &StartError{s.Name, err}
		}
		c.servers[s.Name] = sc
	}
	return c, nil
}

// start runs one server and connects to it.
func (c *Client) start(s Server) (_ *conn, err error) {
	if len(s.Argv) == 0 {
		return nil, errors.New("no command")
	}
	var cmd *exec.Cmd
	if c.o.Command != nil {
		if cmd, err = c.o.Command(s); err != nil {
			return nil, err
		}
	} else {
		cmd = &exec.Cmd{Path: s.Argv[0], Args: slices.Clone(s.Argv), Env: slices.Clone(s.Env), Dir: s.Dir}
	}
	// A group of its own: Close and a crash kill every process the
	// server started, not only the server.
	isolate(cmd)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	sc := &conn{name: s.Name, cmd: cmd, in: inW, out: outR, exited: make(chan struct{}), gone: make(chan struct{}),
		tools: map[string]Tool{}}
	cmd.Stdin, cmd.Stdout = inR, outW
	if c.o.Stderr != nil {
		sc.stderr = &lineWriter{w: c.o.Stderr, mu: &c.stderrMu, prefix: "polc: mcp server " + s.Name + ": "}
		cmd.Stderr = sc.stderr
		// A process the server left holding its stderr must not keep
		// Wait from returning.
		cmd.WaitDelay = time.Second
	}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	go sc.watch()
	ctx, cancel := context.WithTimeout(context.Background(), c.o.StartTimeout)
	defer cancel()
	defer func() {
		if err != nil {
			sc.close(c.o.CloseTimeout)
		}
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "polc", Version: "1"}, &mcp.ClientOptions{
		// polc asks nothing of a server and offers it nothing (no roots,
		// no sampling, no elicitation).
		Capabilities: &mcp.ClientCapabilities{},
	})
	// The connection's end is watched below; start's context bounds only
	// the initialization.
	sc.cs, err = connect(ctx, client, &mcp.IOTransport{Reader: sc.out, Writer: sc.in, MaxLineLength: c.o.MaxMessageBytes}, sc.exited)
	if err != nil {
		// A server that exits at once breaks the connection first: say
		// that it exited, and how.
		select {
		case <-sc.exited:
			return nil, fmt.Errorf("initialize: the server exited (%v)", cmd.ProcessState)
		case <-time.After(exitGrace):
		}
		return nil, fmt.Errorf("initialize: %w", err)
	}
	go func() {
		sc.cs.Wait()
		close(sc.gone)
		if !sc.closing.Load() {
			// A server whose connection ended can do nothing more for
			// polc: it and what it started are ended. (Close gives a
			// server it closes time to exit first.)
			sc.kill()
		}
	}()
	if err := c.list(ctx, sc); err != nil {
		return nil, err
	}
	return sc, nil
}

// connect initializes a client session, or fails when the process exits
// first or ctx ends (the SDK's initialize would otherwise wait for a
// server that never answers).
func connect(ctx context.Context, client *mcp.Client, t mcp.Transport, exited <-chan struct{}) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	cs, err := client.Connect(ctx, t, nil)
	if err != nil && ctx.Err() != nil {
		select {
		case <-exited:
		default:
			return nil, errors.New("no answer in time")
		}
	}
	return cs, err
}

// list takes the server's tools, page by page, within MaxTools.
func (c *Client) list(ctx context.Context, sc *conn) error {
	var cursor string
	n := 0
	for page := 0; ; page++ {
		if page > c.o.MaxTools {
			return fmt.Errorf("tools/list: more than %d pages", c.o.MaxTools)
		}
		res, err := sc.cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		for _, t := range res.Tools {
			if n++; n > c.o.MaxTools {
				return fmt.Errorf("tools/list: more than %d tools", c.o.MaxTools)
			}
			if t == nil {
				continue
			}
			tool, why := c.take(sc.name, t)
			if why != "" {
				c.o.Warn(fmt.Sprintf("mcp server %s: tool %q not taken: %s", sc.name, clip(t.Name, 200), why))
				continue
			}
			if _, dup := sc.tools[tool.Name]; dup {
				c.o.Warn(fmt.Sprintf("mcp server %s: tool %q listed twice: the first is taken", sc.name, tool.Name))
				continue
			}
			sc.tools[tool.Name] = tool
		}
		if res.NextCursor == "" {
			return nil
		}
		cursor = res.NextCursor
	}
}

// take checks a listed tool: a name a request can name (mcp:<server>/<tool>
// has no '/' in either), and an input schema that is a JSON object of
// type "object" within MaxSchemaBytes. why says what is wrong.
func (c *Client) take(server string, t *mcp.Tool) (Tool, string) {
	switch {
	case t.Name == "" || len(t.Name) > maxToolName:
		return Tool{}, fmt.Sprintf("a tool name is 1 to %d bytes", maxToolName)
	case strings.ContainsAny(t.Name, "/\\") || !printable(t.Name):
		return Tool{}, "a tool name is printable text without '/' or '\\'"
	}
	schema, err := json.Marshal(t.InputSchema)
	switch {
	case err != nil:
		return Tool{}, "its input schema has no JSON form"
	case len(schema) > c.o.MaxSchemaBytes:
		return Tool{}, fmt.Sprintf("its input schema is %d bytes, more than %d", len(schema), c.o.MaxSchemaBytes)
	}
	var obj map[string]any
	if json.Unmarshal(schema, &obj) != nil || obj["type"] != "object" {
		return Tool{}, `its input schema is not a JSON Schema of type "object"`
	}
	return Tool{Server: server, Name: t.Name, Description: clip(t.Description, maxDescription), InputSchema: schema}, ""
}

// printable: valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// clip cuts s to at most n bytes, at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Tools are the tools of every server, sorted by server and name.
func (c *Client) Tools() []Tool {
	var out []Tool
	for _, sc := range c.servers {
		for _, t := range sc.tools {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b Tool) int {
		if a.Server != b.Server {
			return strings.Compare(a.Server, b.Server)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Register registers the mcp action's built-in descriptor with the
// client's Call as its callable.
func (c *Client) Register(reg *executor.Registry) error {
	for _, d := range normalize.BuiltinDescriptors() {
		if d.ID == "mcp" {
			return reg.Register(d, c.Call)
		}
	}
	return errors.New("mcpclient: no built-in mcp descriptor")
}

// classError is a failure of the class the executor records.
type classError struct {
	class string
	err   error
}

func (e *classError) Error() string      { return e.class + ": " + e.err.Error() }
func (e *classError) Unwrap() error      { return e.err }
func (e *classError) ErrorClass() string { return e.class }

func fail(class, format string, args ...any) error {
	return &classError{class, fmt.Errorf(format, args...)}
}

// Failure classes of a call (the executor's Failed.Class).
const (
	// ClassUnknownServer: the call names a server the session does not
	// declare.
	ClassUnknownServer = "mcp_unknown_server"
	// ClassUnknownTool: the server listed no such tool.
	ClassUnknownTool = "mcp_unknown_tool"
	// ClassResourceUnsupported: the call names a resource; a tool call
	// cannot be held to it.
	ClassResourceUnsupported = "mcp_resource_unsupported"
	// ClassUnavailable: the server is not running, or its connection
	// broke before the call was sent.
	ClassUnavailable = "mcp_unavailable"
	// ClassToolError: the tool answered with an error (isError); its
	// content is the result.
	ClassToolError = "mcp_tool_error"
	// ClassProtocolError: the server answered the call with a JSON-RPC
	// error (an unknown tool, invalid arguments); its code and message
	// are the result.
	ClassProtocolError = "mcp_protocol_error"
)

// Call is the mcp action's callable: it calls args.tool of args.server
// with args.arguments and returns the tool's result (see result).
func (c *Client) Call(ctx context.Context, args map[string]any) (any, error) {
	server, _ := args["server"].(string)
	tool, _ := args["tool"].(string)
	if _, ok := args["resource"]; ok {
		// The policy judged server/resource; a tool's arguments may name
		// any resource, so no call of a tool is held to it.
		return nil, fail(ClassResourceUnsupported, "a tool call cannot be held to a resource")
	}
	sc := c.servers[server]
	if sc == nil {
		return nil, fail(ClassUnknownServer, "no server %q is declared", server)
	}
	if _, ok := sc.tools[tool]; !ok {
		return nil, fail(ClassUnknownTool, "server %s listed no tool %q", server, tool)
	}
	select {
	case <-sc.gone:
		return nil, fail(ClassUnavailable, "server %s is not running", server)
	case <-c.calls.Done():
		return nil, fail(ClassUnavailable, "the servers are closed")
	default:
	}
	arguments := map[string]any{}
	if a, ok := args["arguments"].(map[string]any); ok {
		arguments = a
	}
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.calls, cancel)
	defer stop()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		// In a goroutine of its own: the SDK's write to a server that
		// stopped reading blocks whatever the context; Close kills the
		// server, which ends it.
		res, err := sc.cs.CallTool(callCtx, &mcp.CallToolParams{Name: tool, Arguments: arguments})
		ch <- answer{res, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-callCtx.Done():
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: the servers were closed during the call", executor.ErrAmbiguous)
	}
	if a.err != nil {
		return c.callError(ctx, sc, a.err)
	}
	res := c.result(a.res)
	if a.res.IsError {
		return res, fail(ClassToolError, "the tool answered with an error")
	}
	return res, nil
}

// callError classifies a failed call: the caller's context, the server's
// JSON-RPC error (its code and message are the result), a call never
// sent (unavailable), or a connection that broke after it was sent
// (ambiguous: the tool may have run).
func (c *Client) callError(ctx context.Context, sc *conn, err error) (any, error) {
	var rpc *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &rpc):
		return map[string]any{"code": rpc.Code, "message": clip(strings.ToValidUTF8(rpc.Message, "\uFFFD"), 1024)},
			fail(ClassProtocolError, "the server answered with a JSON-RPC error")
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, syscall.EPIPE):
		// Refused before it was written, or the write found the server
		// gone: nothing was read by it.
		return nil, fail(ClassUnavailable, "server %s: the call was not sent: %v", sc.name, err)
	}
	return nil, fmt.Errorf("%w: server %s: the connection broke during the call: %w", executor.ErrAmbiguous, sc.name, &classError{ClassUnavailable, err})
}

// result is what a call returns: {"content": [...]} — each text content
// {"type": "text", "text"}, an embedded text resource {"type":
// "resource", "uri", "text"}, other content by its type and size alone
// (polc returns text) — with "structured_content" when the tool gave
// one, and "truncated": true when MaxResultBytes cut it.
func (c *Client) result(r *mcp.CallToolResult) map[string]any {
	budget := c.o.MaxResultBytes
	truncated := false
	text := func(s string) string {
		if len(s) > budget {
			s, truncated = clip(s, budget), true
		}
		budget -= len(s)
		return s
	}
	content := []any{}
	for _, item := range r.Content {
		if budget <= 0 {
			truncated = true
			break
		}
		switch it := item.(type) {
		case *mcp.TextContent:
			content = append(content, map[string]any{"type": "text", "text": text(it.Text)})
		case *mcp.ImageContent:
			content = append(content, map[string]any{"type": "image", "mime_type": clip(it.MIMEType, 128), "bytes": len(it.Data)})
		case *mcp.AudioContent:
			content = append(content, map[string]any{"type": "audio", "mime_type": clip(it.MIMEType, 128), "bytes": len(it.Data)})
		case *mcp.ResourceLink:
			content = append(content, map[string]any{"type": "resource_link", "uri": text(it.URI), "name": text(it.Name)})
		case *mcp.EmbeddedResource:
			m := map[string]any{"type": "resource"}
			if rc := it.Resource; rc != nil {
				m["uri"] = text(rc.URI)
				if rc.Blob != nil {
					m["bytes"] = len(rc.Blob)
				} else {
					m["text"] = text(rc.Text)
				}
			}
			content = append(content, m)
		default:
			content = append(content, map[string]any{"type": "unknown"})
		}
	}
	out := map[string]any{"content": content}
	if r.StructuredContent != nil {
		b, err := json.Marshal(r.StructuredContent)
		var v any
		if err == nil && len(b) <= budget {
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.UseNumber() // numbers as the server wrote them
			if dec.Decode(&v) == nil {
				out["structured_content"] = v
			}
		} else {
			truncated = true
		}
	}
	if truncated {
		out["truncated"] = true
	}
	return out
}

// Close ends every server: the calls in flight are cancelled, each
// server's input is closed, and a server that has not exited after
// CloseTimeout is terminated, then killed, with every process of its
// group. Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.stopCalls()
		var wg sync.WaitGroup
		for _, sc := range c.servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc.close(c.o.CloseTimeout)
			}()
		}
		wg.Wait()
	})
	return nil
}

// watch reaps the process: once it exited, every process of its group is
// killed, so that nothing it started outlives it, and the connection,
// which then reads what the server wrote before it exited, ends. A
// connection that does not end (a process that left the group holds the
// server's output) is cut after exitGrace.
func (sc *conn) watch() {
	reapGroup(sc.cmd)
	close(sc.exited)
	select {
	case <-sc.gone:
	case <-time.After(exitGrace):
		sc.out.Close()
	}
}

// exitGrace is how long the connection of a server that exited has to
// deliver what the server wrote.
const exitGrace = time.Second

// kill kills the server's process group, unless it was reaped.
func (sc *conn) kill() {
	select {
	case <-sc.exited:
	default:
		signalGroup(sc.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// close ends the connection and the process: its input closed, the
// process given wait to exit, then SIGTERM, then SIGKILL.
func (sc *conn) close(wait time.Duration) {
	sc.closing.Store(true)
	closed := make(chan struct{})
	go func() {
		if sc.cs != nil {
			sc.cs.Close() // closes the server's input once no call is in flight
		}
		sc.in.Close()
		close(closed)
	}()
	pid := sc.cmd.Process.Pid
	select {
	case <-sc.exited:
	case <-time.After(wait):
		signalGroup(pid, syscall.SIGTERM)
		select {
		case <-sc.exited:
		case <-time.After(wait):
			sc.kill()
			<-sc.exited
		}
	}
	// The process is gone: polc's end of its output closed, the SDK's
	// close returns.
	sc.out.Close()
	<-closed
	if sc.stderr != nil {
		sc.stderr.mu.Lock()
		sc.stderr.flush()
		sc.stderr.mu.Unlock()
	}
}

// lineWriter writes a server's stderr line by line, each prefixed and
// cut at maxLine bytes, to a writer shared with other servers.
type lineWriter struct {
	w      io.Writer
	mu     *sync.Mutex
	prefix string
	buf    []byte
	cut    bool // the current line was cut: the rest of it is dropped
}

const maxLine = 4 << 10

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := slices.Index(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !l.cut {
			room := maxLine - len(l.buf)
			if len(chunk) > room {
				chunk, l.cut = chunk[:room], true
			}
			l.buf = append(l.buf, chunk...)
		}
		if i < 0 {
			break
		}
		l.flush()
		p = p[i+1:]
	}
	return n, nil
}

// flush writes the line held, if any; l.mu is held.
func (l *lineWriter) flush() {
	if len(l.buf) == 0 && !l.cut {
		return
	}
	line := strings.ToValidUTF8(string(l.buf), "\uFFFD")
	if l.cut {
		line += " [cut]"
	}
	l.buf, l.cut = l.buf[:0], false
	fmt.Fprintf(l.w, "%s%s\n", l.prefix, line)
}
