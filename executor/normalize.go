// Package executor is polc's runtime: request normalization (stage 2 of the
// action plan), the native decision evaluator for compiled snapshots, and
// the authoritative action executor, Executor.Execute, the only path from a
// request to an action's callable (docs/executor.md).
package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"polc.dev/polc/chain"
)

// Normalization reasons: why a request is denied before any policy runs.
// They are stable codes, like decision reasons.
const (
	ReasonInvalidRequest = "invalid_request"
	ReasonUnknownAction  = "unknown_action"
	ReasonPathEscape     = "path_escape"
	ReasonInvalidPath    = "invalid_path"
	ReasonInvalidCommand = "invalid_command"
	ReasonEmptyCommand   = "empty_command"
	ReasonInvalidURL     = "invalid_url"
	// ReasonInvalidEncoding: a string of the request (or one decoded from
	// it: a shell word after its escapes, a percent-decoded MCP resource)
	// is not valid UTF-8, or a normalized value holds a NUL byte.
	ReasonInvalidEncoding = "invalid_encoding"
)

// NormalizeError is a request that cannot be normalized; it is always a
// denial with Reason as its stable reason code.
type NormalizeError struct {
	Reason string
	Detail string
}

func (e *NormalizeError) Error() string { return e.Reason + ": " + e.Detail }

func nerr(reason, format string, args ...any) *NormalizeError {
	return &NormalizeError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// TimeLayout is the time format of normalized requests, snapshots and
// evidence: UTC with exactly six fractional digits. Strings in this format
// order like the times they denote.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// Normalizer turns action requests into normalized requests.
type Normalizer struct {
	// Now is the clock for requests without a time. Default time.Now.
	Now func() time.Time
	// Registry resolves action ids; default BuiltinRegistry().
	Registry *Registry
}

var defaultRegistry = sync.OnceValue(BuiltinRegistry)

// Normalize validates req and computes its facets. It never panics; any
// input it cannot interpret is a *NormalizeError (a denial).
func (n *Normalizer) Normalize(req ActionRequest) (*Normalized, *NormalizeError) {
	return n.normalize(req, false)
}

// normalize is Normalize; jsonArgs says the arguments are already decoded
// JSON values (json.Number numbers), so validation needs no round trip.
func (n *Normalizer) normalize(req ActionRequest, jsonArgs bool) (*Normalized, *NormalizeError) {
	reg := n.Registry
	if reg == nil {
		reg = defaultRegistry()
	}
	out, err := n.start(req)
	if err != nil {
		return nil, err
	}
	args := req.Arguments
	if args == nil {
		args = map[string]any{} // absent arguments are none: an empty object
	}
	if err := argumentsText(args); err != nil {
		return nil, err // before the schema's round trip replaces the bytes
	}
	mcpArgs, err := mcpShorthand(req.Action, args)
	if err != nil {
		return nil, err
	}
	if mcpArgs != nil {
		args, out.Action = mcpArgs, "mcp"
	}
	e := reg.lookup(out.Action)
	if e == nil {
		return nil, nerr(ReasonUnknownAction, "no descriptor for action %q", req.Action)
	}
	if err := e.finish(out, args, jsonArgs); err != nil {
		return nil, err
	}
	// What the executor refuses at stage 2: arguments that validate but
	// have no canonical form (nesting deeper than jcs.MaxDepth).
	if _, err := digestChecked("", args); err != nil {
		return nil, nerr(ReasonInvalidRequest, "arguments have no canonical form: %v", err)
	}
	return out, nil
}

// start begins a normalized request: identity, time, usage and workspace.
func (n *Normalizer) start(req ActionRequest) (*Normalized, *NormalizeError) {
	out := new(Normalized)
	var at time.Time
	if req.Time == nil {
		at = time.Now()
		if n.Now != nil {
			at = n.Now()
		}
	}
	if err := startInto(out, req.Action, req.Principal, req.Tenant, req.Workspace, req.Time, at); err != nil {
		return nil, err
	}
	if req.Usage != nil {
		out.Usage = *req.Usage
	}
	return out, nil
}

// startInto is start writing into out (which it overwrites whole), with
// the request's members as arguments: the executor's attempt holds out,
// and nothing here makes the strings escape further than out. at is the
// request's time unless reqTime gives it.
func startInto(out *Normalized, action, principal, tenant, ws string, reqTime *string, at time.Time) *NormalizeError {
	*out = Normalized{
		Principal: principal, Tenant: tenant, Action: action,
		Paths: []PathAccess{}, Commands: [][]string{}, Hosts: []string{}, Env: []string{}, Secrets: []string{},
	}
	if reqTime != nil {
		t, err := time.Parse(time.RFC3339Nano, *reqTime)
		if err != nil {
			return nerr(ReasonInvalidRequest, "time %q is not RFC 3339", *reqTime)
		}
		out.Time = chain.FormatTime(t) // TimeLayout is chain.TimeFormat
	} else {
		out.Time = chain.FormatTime(at)
	}
	if c := lastWorkspace.Load(); c != nil && c.raw == ws {
		out.Workspace = c.clean // checked and cleaned before
		return nil
	}
	if !filepath.IsAbs(ws) || strings.ContainsRune(ws, 0) {
		return nerr(ReasonInvalidRequest, "workspace %q must be an absolute path", ws)
	}
	out.Workspace = filepath.Clean(ws)
	lastWorkspace.Store(&checkedWorkspace{ws, out.Workspace})
	return nil
}

// checkedWorkspace is a workspace that passed startInto's check, and its
// clean form.
type checkedWorkspace struct{ raw, clean string }

// lastWorkspace caches the last workspace checked: an executor's requests
// normally share one.
var lastWorkspace atomic.Pointer[checkedWorkspace]

// mcpShorthand resolves "mcp:<server>/<tool>", shorthand for the mcp
// action with those arguments: it returns a copy of args with server and
// tool set (args itself is never written), or nil for any other action.
func mcpShorthand(action string, args map[string]any) (map[string]any, *NormalizeError) {
	rest, ok := strings.CutPrefix(action, "mcp:")
	if !ok {
		return nil, nil
	}
	server, tool, ok := strings.Cut(rest, "/")
	if !ok || server == "" || tool == "" {
		return nil, nerr(ReasonInvalidRequest, "action %q: want mcp:<server>/<tool>", action)
	}
	args = maps.Clone(args)
	if args == nil {
		args = map[string]any{}
	}
	for _, kv := range [2][2]string{{"server", server}, {"tool", tool}} {
		if prev, dup := args[kv[0]]; dup && prev != kv[1] {
			return nil, nerr(ReasonInvalidRequest, "action %q conflicts with argument %s=%v", action, kv[0], prev)
		}
		args[kv[0]] = kv[1]
	}
	return args, nil
}

// finish completes out for the action e resolved: it validates args
// against e's schema and fills the facets e's hints name.
func (e *entry) finish(out *Normalized, args map[string]any, jsonArgs bool) *NormalizeError {
	out.Action = e.desc.ID
	if err := e.validate(args, jsonArgs); err != nil {
		return err
	}
	if err := e.desc.Hints.facets(args, out.Workspace, out); err != nil {
		return err
	}
	// What the facets decoded ($'\xff' in a command is the byte 0xff)
	// and what the caller gave: no engine sees what is not text.
	return out.textProblem()
}

// validate checks arguments against the descriptor's JSON Schema.
func (e *entry) validate(args map[string]any, jsonArgs bool) *NormalizeError {
	var v any = args
	if !jsonArgs {
		// The schema validator wants JSON values: round-trip through JSON
		// so that Go numbers and json.Number look alike.
		raw, err := json.Marshal(args)
		if err != nil {
			return nerr(ReasonInvalidRequest, "arguments of %s: %v", e.desc.ID, err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var decoded any // its own variable: v stays off the heap
		if err := dec.Decode(&decoded); err != nil {
			return nerr(ReasonInvalidRequest, "arguments of %s: %v", e.desc.ID, err)
		}
		v = decoded
	}
	if m, ok := v.(map[string]any); ok && e.fast != nil && e.fast.accepts(m) {
		return nil // what the validator would accept (fastSchema)
	}
	if err := e.schema.Validate(v); err != nil {
		msg := err.Error()
		if ve, ok := err.(*jsonschema.ValidationError); ok {
			msg = ve.Error()
			for len(ve.Causes) > 0 {
				ve = ve.Causes[0]
				msg = ve.Message
				if ve.InstanceLocation != "" { // "" is the arguments object itself
					msg = ve.InstanceLocation + ": " + msg
				}
			}
		}
		return nerr(ReasonInvalidRequest, "arguments of %s: %s", e.desc.ID, msg)
	}
	return nil
}

// facets fills the request facets named by the hints.
func (h *NormalizationHints) facets(args map[string]any, ws string, out *Normalized) *NormalizeError {
	str := func(name string) (string, bool, *NormalizeError) {
		v, ok := args[name]
		if !ok {
			return "", false, nil
		}
		s, ok := v.(string)
		if !ok {
			return "", false, nerr(ReasonInvalidRequest, "argument %q must be a string", name)
		}
		if i := strings.IndexByte(s, 0); i >= 0 {
			return "", false, nerr(ReasonInvalidEncoding, "argument %q: NUL at byte %d", name, i)
		}
		return s, true, nil
	}
	for _, ph := range h.Paths {
		p, ok, err := str(ph.Arg)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := pathFacets(ph.Access...)(map[string]string{"path": p}, ws, out); err != nil {
			return err
		}
	}
	if h.Command != "" {
		c, ok, err := str(h.Command)
		if err != nil {
			return err
		}
		if ok {
			if err := bashFacets(map[string]string{"command": c}, ws, out); err != nil {
				return err
			}
		}
	}
	if h.URL != "" {
		u, ok, err := str(h.URL)
		if err != nil {
			return err
		}
		if ok {
			if err := urlFacets(map[string]string{"url": u}, ws, out); err != nil {
				return err
			}
		}
	}
	if h.MCP != nil {
		m := map[string]string{}
		for k, arg := range map[string]string{"server": h.MCP.Server, "tool": h.MCP.Tool, "resource": h.MCP.Resource} {
			if arg == "" {
				continue
			}
			v, ok, err := str(arg)
			if err != nil {
				return err
			}
			if ok {
				m[k] = v
			}
		}
		if err := mcpFacets(m, ws, out); err != nil {
			return err
		}
	}
	return nil
}

func pathFacets(accesses ...string) func(map[string]string, string, *Normalized) *NormalizeError {
	return func(args map[string]string, ws string, out *Normalized) *NormalizeError {
		p, err := NormalizePath(ws, args["path"])
		if err != nil {
			return err
		}
		for _, a := range accesses {
			out.Paths = append(out.Paths, PathAccess{Path: p, Access: a})
		}
		return nil
	}
}

// NormalizePath makes p absolute against the workspace ws (absolute and
// clean) and cleans it. It reports path_escape when p uses ".." to leave the
// workspace, or when p is inside the workspace and an existing prefix of it
// is a symlink resolving outside. Paths outside the workspace that do not
// escape through ".." are returned for the policy to judge.
func NormalizePath(ws, p string) (string, *NormalizeError) {
	if p == "" {
		return "", nerr(ReasonInvalidPath, "empty path")
	}
	raw := p
	if !filepath.IsAbs(p) {
		p = ws + "/" + p
	}
	clean := filepath.Clean(p)
	if i := firstDotDot(p); i >= 0 {
		// The part before the first ".." says where the author started.
		if base := filepath.Clean(p[:i]); within(ws, base) && !within(ws, clean) {
			return "", nerr(ReasonPathEscape, "%q leaves the workspace %s", raw, ws)
		}
	}
	if within(ws, clean) {
		resolved, err := resolveExisting(clean)
		if err != nil {
			return "", nerr(ReasonInvalidPath, "%q: %v", raw, err)
		}
		inWS, ok := workspaceName(ws, resolved)
		if !ok {
			return "", nerr(ReasonPathEscape, "%q resolves through a symlink to %s, outside the workspace", raw, resolved)
		}
		return inWS, nil
	}
	return clean, nil
}

// workspaceName names the resolved path p (no symlinks) under the
// workspace ws as the policy names it, ws itself unresolved; ok is false
// when p is outside the workspace's resolved location.
func workspaceName(ws, p string) (string, bool) {
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		realWS = ws // a workspace that does not exist has no symlinks to follow
	}
	if !within(realWS, p) {
		return p, false
	}
	rel, _ := filepath.Rel(realWS, p)
	return filepath.Join(ws, rel), true
}

// firstDotDot returns the byte offset of the first ".." segment of p, or -1.
func firstDotDot(p string) int {
	off := 0
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return off
		}
		off += len(seg) + 1
	}
	return -1
}

// within reports whether p is dir or below it (both clean and absolute).
func within(dir, p string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// resolveExisting resolves symlinks in the longest existing prefix of p.
func resolveExisting(p string) (string, error) {
	rest := ""
	cur := p
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

var defaultPorts = map[string]string{"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}

func urlFacets(args map[string]string, _ string, out *Normalized) *NormalizeError {
	hp, err := URLHost(args["url"])
	if err != nil {
		return err
	}
	out.Hosts = append(out.Hosts, hp)
	return nil
}

// URLHost is the host facet of a URL as the policy judges it:
// "host:port", the host lowercased (IPv6 in brackets), the port explicit
// or the scheme's default. A URL without a host, with an unknown scheme
// and no port, with an invalid host or port, or whose host is the
// unspecified address (0.0.0.0, [::]: it connects to the local host) or a
// loopback address other than 127.0.0.1 and [::1] (127.0.0.2: the local
// host under a name no rule uses) is an invalid_url error. Host rules are judged by this text, never by what
// a name resolves to.
func URLHost(raw string) (string, *NormalizeError) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nerr(ReasonInvalidURL, "%q: %v", raw, err)
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", nerr(ReasonInvalidURL, "%q has no host", raw)
	}
	port := u.Port()
	if port == "" {
		port = defaultPorts[scheme]
	}
	if port == "" {
		return "", nerr(ReasonInvalidURL, "%q: unknown scheme %q and no port", raw, u.Scheme)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", nerr(ReasonInvalidURL, "%q: invalid port %q", raw, port)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		// Connecting to the unspecified address (0.0.0.0, ::, and their
		// other spellings, which parse to it or, like "0" and "0x0", are
		// refused below) reaches the local host on Linux: a deny naming
		// 127.0.0.1, localhost and [::1] would not see it. It names no
		// host a rule could judge, so it is no host at all.
		return "", nerr(ReasonInvalidURL, "%q: host %q is the unspecified address, which connects to the local host", raw, host)
	} else if ip != nil && ip.IsLoopback() && !ip.Equal(net.IPv4(127, 0, 0, 1)) && !ip.Equal(net.IPv6loopback) {
		// All of 127.0.0.0/8 is the local host (Linux answers on every
		// address of it, and a service bound to 0.0.0.0 is reached
		// there), yet rules judge the host as written: a deny naming
		// 127.0.0.1, localhost and [::1] would not see 127.0.0.2 or
		// [::ffff:127.1.2.3]. The loopback host has one spelling per
		// family; the others are no host a rule names.
		return "", nerr(ReasonInvalidURL, "%q: host %q is a loopback address other than 127.0.0.1, which reaches the local host: write 127.0.0.1 (or [::1])", raw, host)
	} else if ip != nil && ip.To4() == nil {
		host = "[" + ip.String() + "]"
	} else if ip != nil {
		host = ip.String()
	} else {
		// The host as written must be the host dialled. net/http maps a
		// non-ASCII name through IDNA before dialling (fullwidth letters,
		// "。" for "."), so "１２７。０。０。１" would reach 127.0.0.1 while the
		// policy judged another name; host patterns are ASCII, so such a
		// name could only ever dodge a deny. And a name whose last label is
		// a number is an IPv4 address to the C resolver (inet_aton:
		// "2130706433", "0x7f.1", "0177.0.0.1" are 127.0.0.1), not the
		// name judged; net.ParseIP took every canonical IPv4 address above.
		last := ""
		for label := range strings.SplitSeq(host, ".") {
			if label == "" || strings.ContainsAny(label, ":[]/ \t") {
				return "", nerr(ReasonInvalidURL, "%q: invalid host %q", raw, host)
			}
			last = label
		}
		for i := 0; i < len(host); i++ {
			if host[i] >= 0x80 || host[i] < 0x20 || host[i] == 0x7f {
				return "", nerr(ReasonInvalidURL, "%q: host %q is not ASCII (use its xn-- form)", raw, host)
			}
		}
		if numericLabel(last) {
			return "", nerr(ReasonInvalidURL, "%q: host %q is not a canonical IPv4 address", raw, host)
		}
	}
	return host + ":" + port, nil
}

// numericLabel reports whether a host's last label is a number (decimal,
// or hexadecimal with 0x) — the WHATWG URL test for an IPv4 host, and
// what inet_aton reads as one.
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		for i := 0; i < len(h); i++ {
			if !strings.ContainsRune("0123456789abcdef", rune(h[i])) {
				return false
			}
		}
		return true
	}
	return digits(l)
}

func mcpFacets(args map[string]string, _ string, out *Normalized) *NormalizeError {
	server, tool := args["server"], args["tool"]
	if server == "" || tool == "" || strings.Contains(server, "/") || strings.Contains(tool, "/") {
		return nerr(ReasonInvalidRequest, "mcp needs a server and a tool without '/'")
	}
	t := &MCPTarget{Server: server, Tool: tool}
	if r, ok := args["resource"]; ok {
		if r == "" {
			return nerr(ReasonInvalidRequest, "empty mcp resource")
		}
		// Resource patterns match '/'-separated segments ("repo/*"), so
		// "repo/.." matched what was meant to be one repository's entries,
		// and a server that resolves it reaches beyond the resource judged.
		// Servers decode URIs: the segments are checked as written and as
		// percent-decoded (repeatedly: %252e), with '\' a separator too.
		if seg, ok := dotSegment(r); ok {
			return nerr(ReasonInvalidRequest, "mcp resource %q has a %q segment (as written, or percent-decoded, or with '\\' as a separator): a server may resolve it outside the resource the policy judged", r, seg)
		}
		// The policy judges the text as written; a server opens what it
		// decodes to, which must be text too (%ff, %00: no resource the
		// policy could name).
		if err := decodedText(r); err != nil {
			return err
		}
		t.Resource = &r
	}
	out.MCP = t
	return nil
}

// dotSegment returns a "." or ".." segment of r, as written, percent-
// decoded (up to four times, for %25 within %2e) or with '\' read as '/'.
// Decoding is lenient, as many servers' is: valid %XX escapes are decoded
// and any other '%' is kept, so one malformed escape ("100%") does not
// hide the %2e%2e after it.
func dotSegment(r string) (string, bool) {
	for range 5 {
		for _, seg := range strings.FieldsFunc(r, func(c rune) bool { return c == '/' || c == '\\' }) {
			if seg == "." || seg == ".." {
				return seg, true
			}
		}
		d := percentDecode(r)
		if d == r {
			break
		}
		r = d
	}
	return "", false
}

// decodedText is the invalid_encoding error for an MCP resource whose
// percent-decoding, as dotSegment repeats it, is not text (invalid UTF-8,
// or NUL: a server in C ends the name there), or nil.
func decodedText(r string) *NormalizeError {
	written := r
	for range 5 {
		d := percentDecode(r)
		if d == r {
			return nil
		}
		if off, problem := badText(d); problem != "" {
			return nerr(ReasonInvalidEncoding, "mcp resource %q percent-decodes to %s at byte %d", written, problem, off)
		}
		r = d
	}
	return nil
}

// percentDecode decodes the valid %XX escapes of s and keeps the rest.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// bashFacets puts the command's facets (ParseCommand) in out: its argvs
// and environment names, and the files and connections its redirections
// open (redirectFacets).
func bashFacets(args map[string]string, ws string, out *Normalized) *NormalizeError {
	c, err := ParseCommand(args["command"])
	if err != nil {
		return err
	}
	for _, r := range c.Redirects {
		if err := redirectFacets(r, c.ChangesDir, ws, out); err != nil {
			return err
		}
	}
	for _, argv := range c.Argv {
		// A command pattern's '*' matches '/' and "..": "./scripts/*"
		// would grant "./scripts/../../bin/x". A program path that
		// climbs is refused rather than cleaned, since the kernel
		// resolves ".." after a link, not before it.
		if len(argv) > 0 && strings.Contains(argv[0], "/") && slices.Contains(strings.Split(argv[0], "/"), "..") {
			return nerr(ReasonInvalidCommand, "program path %q has a \"..\" segment: a command pattern ending in * would grant it; name the program without \"..\"", argv[0])
		}
	}
	out.Commands = append(out.Commands, c.Argv...)
	out.Env = append(out.Env, c.Env...)
	slices.Sort(out.Env)
	out.ShellControl = c.ShellControl
	return nil
}

// redirectFacets adds what redirection r opens to out. Bash itself opens
// a redirection's file, whatever program the command runs, so an
// allowlist of read-only programs with shell allowed would otherwise
// write anywhere ("echo x > /etc/cron.d/x"), and bash connects to
// /dev/tcp/HOST/PORT and /dev/udp/HOST/PORT itself, files or no files.
// /dev/null opens nothing to judge, nor do the descriptor files
// (/dev/stdin, /dev/stdout, /dev/stderr, /dev/fd/N) themselves: what
// they may reopen is in the command's Redirects (reopenedFiles). A
// relative target is judged against the workspace, where the command
// starts; one in a command that may change directory (changesDir) names
// no file the policy can judge and is refused. A target through symbolic
// links is judged as written and as the file they lead to (physicalPath).
func redirectFacets(r Redirect, changesDir bool, ws string, out *Normalized) *NormalizeError {
	t := r.Target
	if _, isFD := descriptorFile(t); isFD || t == "/dev/null" {
		return nil // a file it reopens is in Redirects (reopenedFiles)
	}
	if socketFile(t) {
		rest := t[len("/dev/tcp/"):] // "/dev/udp/" is as long
		// bash splits HOST at the first '/' and resolves it and PORT with
		// getaddrinfo: a service name, a percent sign or a second '/'
		// would be read differently here than there.
		host, port, _ := strings.Cut(rest, "/")
		if host == "" || !digits(port) || strings.Trim(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:") != "" {
			return nerr(ReasonInvalidCommand, "%s: bash connects to %q: the host must be a name or address and the port a number", r.Pos, t)
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		hp, err := URLHost("tcp://" + host + ":" + port)
		if err != nil {
			return nerr(ReasonInvalidCommand, "%s: bash connects to %q: %s", r.Pos, t, err.Detail)
		}
		if !slices.Contains(out.Hosts, hp) {
			out.Hosts = append(out.Hosts, hp)
		}
		return nil
	}
	if changesDir && !filepath.IsAbs(t) {
		return nerr(ReasonInvalidCommand, "%s: relative redirection target %q in a command that may change directory: use an absolute path", r.Pos, t)
	}
	p, err := NormalizePath(ws, t)
	if err != nil {
		return err
	}
	// Bash opens the path as written, through whatever links it has:
	// judged also is the file that leads to, when it is another.
	abs := t
	if !filepath.IsAbs(abs) {
		abs = ws + "/" + abs
	}
	phys, ok := physicalPath(abs)
	if !ok {
		return nerr(ReasonInvalidCommand, "%s: redirection target %q leads through /proc or a link loop", r.Pos, t)
	}
	if inWS, ok := workspaceName(ws, phys); ok {
		phys = inWS
	}
	add := func(access string) {
		for _, path := range []string{p, phys} {
			pa := PathAccess{Path: path, Access: access}
			if !slices.Contains(out.Paths, pa) {
				out.Paths = append(out.Paths, pa)
			}
		}
	}
	if r.Read {
		add("read")
	}
	if r.Write {
		add("write")
	}
	return nil
}

// physicalPath is the file the kernel opens for the absolute path p, as
// bash passes it: each symbolic link followed where it stands, so a ".."
// after a link leaves the link's target (with notes/l -> /etc/cron.d,
// "notes/l/../x" is /etc/x, where cleaning p names notes/x), and a link
// whose target does not exist leads there too (open creates it: "echo x >
// notes/dangling" writes the file the link names, which NormalizePath
// judged as notes/dangling). Past a missing component the rest is taken as
// written (bash's open creates at most the last one). ok is false for a
// path through /proc — /dev/fd, /dev/stdin and the like are links there,
// to descriptors of whichever process opens them — and for a link loop.
func physicalPath(p string) (phys string, ok bool) {
	cur := "/"
	rest := strings.Split(p, "/")
	for hops := 0; len(rest) > 0; {
		seg := rest[0]
		rest = rest[1:]
		switch seg {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, seg)
		if within("/proc", next) {
			return "", false
		}
		fi, err := os.Lstat(next)
		if err != nil {
			return filepath.Join(append([]string{next}, rest...)...), true
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		target, err := os.Readlink(next)
		if hops++; err != nil || hops > 40 {
			return "", false
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, true
}

// descriptorFile reports whether t names one of bash's descriptors, and
// which: /dev/stdin, /dev/stdout, /dev/stderr and /dev/fd/N are 0, 1, 2
// and N (a number too large for a descriptor is 1<<30).
func descriptorFile(t string) (fd int, ok bool) {
	switch t {
	case "/dev/stdin":
		return 0, true
	case "/dev/stdout":
		return 1, true
	case "/dev/stderr":
		return 2, true
	}
	if n, ok := strings.CutPrefix(t, "/dev/fd/"); ok && digits(n) {
		fd, err := strconv.Atoi(n)
		if err != nil || fd > 1<<30 {
			fd = 1 << 30
		}
		return fd, true
	}
	return 0, false
}

// socketFile reports whether bash connects for t instead of opening it.
func socketFile(t string) bool {
	return strings.HasPrefix(t, "/dev/tcp/") || strings.HasPrefix(t, "/dev/udp/")
}

// reopenedFiles is what the command's descriptor files reopen. On Linux,
// opening /dev/fd/N (or /dev/stdin, /dev/stdout, /dev/stderr) opens anew
// the file descriptor N refers to, with the redirection's own access:
// "exec 3< src/a.go; echo x > /dev/fd/3" truncates and writes src/a.go,
// which the policy judged as a read. The descriptors the redirections set
// (redirFDs), copies of them (N>&M, N<&M) and, once any is set, every
// descriptor from 10 up (bash's {NAME} descriptors and the copies it
// saves of the ones a redirection replaces) may hold a file the command
// opened; for each descriptor file naming one, every file the command
// opens is opened again with that redirection's access (fail closed:
// which one the descriptor holds is known only at run time). The
// descriptors bash starts with, pipes, /dev/null and sockets reopen no
// file to judge.
func reopenedFiles(redirs []*syntax.Redirect, opened []Redirect) []Redirect {
	var files []Redirect
	for _, r := range opened {
		if r.JudgedAsPath() {
			files = append(files, r)
		}
	}
	if len(files) == 0 {
		return nil
	}
	held := map[int]bool{}               // descriptors that may hold a file opened
	copied := map[*syntax.Redirect]int{} // N>&M, N<&M and N>/dev/fd/M: M
	for _, n := range redirs {
		r, _ := redirection(n)
		switch {
		case r == nil:
			if (n.Op == syntax.DplIn || n.Op == syntax.DplOut) && literalWord(n.Word) {
				if src, err := strconv.Atoi(strings.TrimSuffix(wordText(n.Word), "-")); err == nil {
					copied[n] = src
				}
			}
		case r.Target == "/dev/null" || socketFile(r.Target):
		default:
			if src, isFD := descriptorFile(r.Target); isFD {
				copied[n] = src
				continue
			}
			for _, fd := range redirFDs(n) {
				held[fd] = true
			}
		}
	}
	holds := func(fd int) bool { return held[fd] || fd >= 10 && len(held) > 0 }
	for changed := true; changed; {
		changed = false
		for _, n := range redirs {
			if src, ok := copied[n]; !ok || !holds(src) {
				continue
			}
			for _, fd := range redirFDs(n) {
				if !held[fd] {
					held[fd], changed = true, true
				}
			}
		}
	}
	var again []Redirect
	for _, r := range opened {
		if fd, isFD := descriptorFile(r.Target); isFD && holds(fd) {
			for _, f := range files {
				again = append(again, Redirect{Target: f.Target, Read: r.Read, Write: r.Write, Pos: r.Pos})
			}
		}
	}
	return again
}

// redirDescriptors notes in c the descriptors redirection n names: its
// literal number, the literal source of a duplication or move (N>&M,
// N>&M-), and whether it closes a {NAME} descriptor (Command.FDs,
// Command.ClosesNamedFD).
func redirDescriptors(n *syntax.Redirect, c *Command) {
	named := false
	if n.N != nil {
		if fd, err := strconv.Atoi(n.N.Value); err == nil {
			c.FDs = append(c.FDs, fd)
		}
		named = strings.HasPrefix(n.N.Value, "{")
	}
	if (n.Op == syntax.DplIn || n.Op == syntax.DplOut) && literalWord(n.Word) {
		v := wordText(n.Word)
		if fd, err := strconv.Atoi(strings.TrimSuffix(v, "-")); err == nil {
			c.FDs = append(c.FDs, fd)
		}
		c.ClosesNamedFD = c.ClosesNamedFD || named && v == "-"
	}
}

// redirFDs are the descriptors redirection n sets: its number, or the
// operator's default (0 for input, 1 for output, 1 and 2 for &> and
// >&file); a {NAME} descriptor is one from 10 up (10 here).
func redirFDs(n *syntax.Redirect) []int {
	if n.N != nil {
		if fd, err := strconv.Atoi(n.N.Value); err == nil {
			return []int{fd}
		}
		return []int{10}
	}
	switch n.Op {
	case syntax.RdrIn, syntax.RdrInOut, syntax.DplIn, syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return []int{0}
	case syntax.RdrAll, syntax.AppAll:
		return []int{1, 2}
	case syntax.DplOut:
		if !literalWord(n.Word) || !digits(strings.TrimSuffix(wordText(n.Word), "-")) {
			return []int{1, 2} // >&file is &>file
		}
	}
	return []int{1}
}

// Command is a bash command as the policy judges it (ParseCommand).
type Command struct {
	// Argv lists every simple command found, nested ones included; a word
	// that is not a literal is listed as its source text, so deny patterns
	// still see it.
	Argv [][]string
	// Env are the names the command assigns, sorted.
	Env []string
	// Assign are the command's "NAME=value" prefix assignments, in order,
	// when ShellControl is false (their values are then literal).
	Assign []string
	// ShellControl is set by anything beyond one simple command with
	// literal words: ; && || | & and newlines, redirections, substitutions
	// and expansions (brace expansion included), compound commands, bare
	// assignments. Without it the command is exactly Argv[0] run with
	// Assign in its environment — a glob in it is the literal text the
	// policy saw — and a runner must run it so, not through a shell.
	ShellControl bool
	// Redirects are the command's redirections that open a file, in
	// source order. Descriptor duplications (2>&1, <&-) and here-documents
	// open none; a target known only at run time (a variable, a glob, a
	// brace, a tilde, >&$fd) is refused. Then, for each descriptor file
	// (/dev/fd/N, /dev/stdout, …) that may reopen a file the command
	// opened, every such file again with its access (reopenedFiles).
	Redirects []Redirect
	// ChangesDir is set when a command may change bash's working
	// directory: cd, pushd, popd, eval, source or ., also behind builtin or
	// command, or a command word known only at run time.
	ChangesDir bool
	// FDs are the descriptor numbers the command's redirections name
	// literally (N in N>file and N>&M, M in N>&M and N>&M-), sorted, each
	// once: a runner that hands the command descriptors of its own keeps
	// clear of them.
	FDs []int
	// ClosesNamedFD is set by a {NAME}>&- or {NAME}<&- redirection, which
	// closes the descriptor whose number NAME holds: one known only at run
	// time, which may be any.
	ClosesNamedFD bool
}

// Redirect is a redirection that opens a file.
type Redirect struct {
	// Target is the file as bash names it (quotes removed), relative to
	// the working directory when not absolute.
	Target string
	// Read and Write are the accesses it opens the file with (<> both).
	Read, Write bool
	// Pos is the redirection's "line:col" in the command.
	Pos string
	// Start and End are the byte offsets of the target's word in the
	// command's text, End exclusive: a runner that opens the file itself
	// replaces that word (builtin's bash does). Both are 0 for a file a
	// descriptor file reopens (reopenedFiles), which has no word.
	Start, End int
}

// JudgedAsPath reports whether the policy judged r's target as a path
// (redirectFacets): not /dev/null, a descriptor file (/dev/stdin,
// /dev/stdout, /dev/stderr, /dev/fd/N) nor a socket bash connects to
// (/dev/tcp/…, /dev/udp/…).
func (r Redirect) JudgedAsPath() bool {
	_, isFD := descriptorFile(r.Target)
	return !isFD && r.Target != "/dev/null" && !socketFile(r.Target)
}

// dirCommands are the commands that may change bash's working directory
// or run text as code that may (ChangesDir). trap runs its text in the
// shell itself: "trap 'cd /' DEBUG; cat < etc/shadow" reads /etc/shadow.
var dirCommands = map[string]bool{"cd": true, "pushd": true, "popd": true, "eval": true, "source": true, ".": true, "trap": true}

// redirection is what n opens: nil for a here-document or a descriptor
// duplication, ok false for a target known only at run time.
func redirection(n *syntax.Redirect) (r *Redirect, ok bool) {
	var read, write bool
	switch n.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return nil, true
	case syntax.RdrIn:
		read = true
	case syntax.RdrInOut:
		read, write = true, true
	case syntax.DplIn, syntax.DplOut:
		// N>&M and N>&- duplicate or close a descriptor; N>&$x does too
		// when x holds a number, and opens the file x names otherwise
		// (and >&file is &>file). <&file is an error in bash: judged
		// as a read, it fails closed either way.
		if !literalWord(n.Word) {
			return nil, false
		}
		v := wordText(n.Word)
		if digits(strings.TrimSuffix(v, "-")) || v == "-" {
			return nil, true
		}
		read, write = n.Op == syntax.DplIn, n.Op == syntax.DplOut
	default: // >, >>, >|, &>, &>>
		write = true
	}
	if len(n.Word.Parts) == 1 {
		if _, ok := n.Word.Parts[0].(*syntax.ProcSubst); ok {
			return nil, true // >(cmd), <(cmd): a pipe to commands judged themselves
		}
	}
	if !literalWord(n.Word) {
		return nil, false
	}
	if expandedWord(n.Word) {
		return nil, false
	}
	v := wordText(n.Word)
	if v == "" {
		return nil, false
	}
	return &Redirect{Target: v, Read: read, Write: write, Pos: n.Pos().String(),
		Start: int(n.Word.Pos().Offset()), End: int(n.Word.End().Offset())}, true
}

// expandedWord reports whether bash expands the literal word w into
// another text than wordText: an unquoted glob names the files it
// matches, a brace (a{b..b}, c{d,}) or a tilde other words. bash expands a
// tilde at the start of a word and, in a word shaped like an assignment
// (k=~user/x, even as a redirection target), after '=' and ':'; an
// unquoted tilde after one of those, or at the start of any unquoted part,
// counts (a home directory reached through a link in the workspace was
// judged as the path k=~user/x).
func expandedWord(w *syntax.Word) bool {
	for _, p := range w.Parts {
		l, isLit := p.(*syntax.Lit)
		if !isLit {
			continue
		}
		if strings.ContainsAny(l.Value, "*?[{") || strings.Contains(l.Value, "=~") || strings.Contains(l.Value, ":~") ||
			strings.HasPrefix(l.Value, "~") {
			return true
		}
	}
	return false
}

// ParseCommand parses src with a real shell parser (bash) into the
// facets the policy judges. A command that does not parse is
// invalid_command; one with nothing to run is empty_command.
func ParseCommand(src string) (Command, *NormalizeError) {
	var c Command
	if len(src) > MaxCommandBytes {
		// Linux passes one argument of at most 128 KiB with its NUL
		// (MAX_ARG_STRLEN): bash -c could not be given the text.
		return c, nerr(ReasonInvalidCommand, "the command is %d bytes; bash -c takes at most %d (the kernel's limit on one argument)", len(src), MaxCommandBytes)
	}
	if i := strings.IndexByte(src, '\r'); i >= 0 {
		// A carriage return is a character of a word to bash. The parser
		// reads it as a blank, and drops it before a newline (backslash,
		// CR, LF is a line continuation to it): "echo \", CR, LF,
		// "touch x" ran touch, which the parser saw as arguments of echo,
		// and in "echo CR#`touch x`" it saw a comment.
		return c, nerr(ReasonInvalidCommand, "carriage return at byte %d: bash reads it as a character of a word", i)
	}
	if i := strings.Index(src, "$\\\n"); i >= 0 {
		// Bash joins the lines first: echo "$\ newline (touch x)" ran
		// touch; the parser read the text "$(touch x)", no command.
		return c, nerr(ReasonInvalidCommand, "line continuation after '$' at byte %d: bash reads the '$' with the next line", i)
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true)).Parse(strings.NewReader(src), "")
	if err != nil {
		return c, nerr(ReasonInvalidCommand, "%v", err)
	}
	if err := commandSize(f); err != nil {
		return c, err
	}
	shell := strings.ContainsAny(src, "\n\r") || len(f.Stmts) != 1
	env := map[string]bool{}
	var hidden syntax.Node // where bash would run text as code (hiddenCode)
	hide := func(n syntax.Node, unsafe bool) {
		if unsafe && hidden == nil {
			hidden = n
		}
	}
	// misread is the first place where bash reads the source otherwise
	// than the parser does (commentMisread, …): a command there may be
	// one no facet shows.
	var misread *NormalizeError
	misreads := func(err *NormalizeError) {
		if misread == nil {
			misread = err
		}
	}
	// localeSet: the command sets a variable that selects bash's
	// character set for the lines it reads next (localeVars); modeSet,
	// one that changes its grammar (modeVars).
	localeSet, modeSet := false, ""
	assigns := func(name string) {
		env[name] = true
		localeSet = localeSet || localeVars[name]
		if modeVars[name] && modeSet == "" {
			modeSet = name
		}
	}
	var declValues []declValue
	// inSubst are the redirections and arrays within a $(…), `…`, <(…)
	// or >(…).
	inSubst := map[syntax.Node]bool{}
	markSubst := func(n syntax.Node) {
		syntax.Walk(n, func(m syntax.Node) bool {
			switch m.(type) {
			case *syntax.Redirect, *syntax.ArrayExpr:
				inSubst[m] = true
			}
			return true
		})
	}
	var builtins []*syntax.CallExpr
	var progs []*syntax.Word          // the words naming a program (programWords)
	var runtimeRedir *syntax.Redirect // the first redirection opening a file known only at run time
	var redirs []*syntax.Redirect     // every redirection, for reopenedFiles
	var badCoproc *NormalizeError
	syntax.Walk(f, func(node syntax.Node) bool {
		switch n := node.(type) { // text bash would run as code
		case *syntax.Comment:
			misreads(commentMisread(src, n))
		case *syntax.CmdSubst:
			misreads(backquoteMisread(src, n))
			markSubst(n)
		case *syntax.ProcSubst:
			markSubst(n)
		case *syntax.ExtGlob:
			misreads(extGlobMisread(n))
		case *syntax.ArrayExpr:
			if inSubst[n] {
				misreads(arrayMisread(n))
			}
		case *syntax.DblQuoted:
			misreads(quotedDefaultMisread(n))
			if n.Dollar {
				// $"…" is translated through the message catalog that
				// TEXTDOMAIN, TEXTDOMAINDIR and the locale choose (the
				// command may set them), and the translation is then
				// expanded like "…": 'echo $"hello"' ran the $(…) a
				// catalog in the workspace translated hello to.
				misreads(nerr(ReasonInvalidCommand, "%s: $\"…\" is translated at run time, and its translation expanded: use \"…\"", n.Pos()))
			}
		case *syntax.ArithmExp:
			hide(n, !constArithm(n.X))
		case *syntax.ArithmCmd:
			hide(n, !constArithm(n.X))
		case *syntax.LetClause:
			for _, x := range n.Exprs {
				hide(n, !constArithm(x))
			}
		case *syntax.CStyleLoop:
			hide(n, !constArithm(n.Init) || !constArithm(n.Cond) || !constArithm(n.Post))
		case *syntax.ParamExp:
			hide(n, n.Index != nil && !allIndex(n.Index) && !constArithm(n.Index))
			hide(n, n.Slice != nil && (!constArithm(n.Slice.Offset) || !constArithm(n.Slice.Length)))
			hide(n, n.Excl && n.Names == 0 && (n.Index == nil || !allIndex(n.Index))) // ${!name}: indirect
			hide(n, n.Exp != nil && n.Exp.Op == syntax.OtherParamOps && (n.Exp.Word == nil || !literalWord(n.Exp.Word) || strings.Contains(wordSource(n.Exp.Word), "P")))
			if n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) && n.Param != nil {
				// ${NAME=word}, ${NAME:=word}: an assignment (with a
				// subscript it makes NAME an array: declValues)
				assigns(n.Param.Value)
				hide(n, !specialValueSafe(n.Param.Value, n.Exp.Word, true))
			}
		case *syntax.TimeClause:
			misreads(timeMisread(n))
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				misreads(pipedTimeMisread(n.Y))
			}
		case *syntax.CoprocClause:
			// Bash names a coprocess only before a compound command
			// ("coproc NAME { …; }"); before anything else the word is
			// the command it runs, which the parser keeps as the name
			// when a redirection or a declaration builtin follows:
			// "coproc bash < script" ran bash with no argv saying so.
			name := "COPROC"
			if n.Name != nil {
				switch n.Stmt.Cmd.(type) {
				case *syntax.Block, *syntax.Subshell, *syntax.IfClause, *syntax.WhileClause, *syntax.ForClause,
					*syntax.CaseClause, *syntax.ArithmCmd, *syntax.TestClause:
				default:
					if badCoproc == nil {
						badCoproc = nerr(ReasonInvalidCommand, "%s: coproc %s: bash runs this word as the command: write coproc { …; }", n.Pos(), nodeSource(n.Name))
					}
				}
				if !literalWord(n.Name) && badCoproc == nil {
					badCoproc = nerr(ReasonInvalidCommand, "%s: coproc name known only at run time: %s", n.Pos(), nodeSource(n.Name))
				}
				name = wordText(n.Name)
			}
			// It assigns NAME (its descriptors) and NAME_PID.
			if syntax.ValidName(name) {
				assigns(name)
				assigns(name + "_PID")
			}
		case *syntax.Redirect:
			misreads(heredocMisread(src, n, inSubst[n]))
			misreads(dupWordMisread(n))
			misreads(fdNumberMisread(n))
			redirs = append(redirs, n)
			redirDescriptors(n, &c)
			if r, ok := redirection(n); !ok && runtimeRedir == nil {
				runtimeRedir = n
			} else if r != nil {
				c.Redirects = append(c.Redirects, *r)
			}
			if n.N == nil {
				break
			}
			if v, ok := strings.CutPrefix(n.N.Value, "{"); ok {
				// {NAME}>file assigns the descriptor's number to NAME
				v = strings.TrimSuffix(v, "}")
				hide(n, !safeName(v))
				if name, _, _ := strings.Cut(v, "["); syntax.ValidName(name) {
					assigns(name)
				}
			}
		case *syntax.Assign:
			hide(n, n.Index != nil && !constArithm(n.Index))
			if n.Name != nil && !n.Naked {
				hide(n, n.Array != nil && specialVar(n.Name.Value) || !specialValueSafe(n.Name.Value, n.Value, true))
			}
		case *syntax.ArrayElem:
			hide(n, n.Index != nil && !constArithm(n.Index))
		case *syntax.BinaryTest:
			switch n.Op {
			case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
				x, xok := n.X.(*syntax.Word)
				y, yok := n.Y.(*syntax.Word)
				hide(n, !xok || !yok || !testConst(x) || !testConst(y))
			}
		case *syntax.UnaryTest:
			if n.Op == syntax.TsVarSet || n.Op == syntax.TsRefVar {
				w, ok := n.X.(*syntax.Word)
				hide(n, !ok || !plainName(w))
			}
		case *syntax.WordIter:
			if n.Name != nil {
				assigns(n.Name.Value) // for NAME in …: an assignment
				hide(n, !specialValueSafe(n.Name.Value, nil, false))
			}
		case *syntax.DeclClause:
			// declare, export, local, readonly, typeset: assignments
			// (their names are env like NAME=value's); declare's (and
			// local's, typeset's) -i makes later assignments arithmetic
			// and -n makes a name a reference (export -n only unexports),
			// and a name computed at run time is unknown.
			intRef := n.Variant.Value != "export" && n.Variant.Value != "readonly"
			arrayOpt := false // -a or -A: the names are arrays
			for _, a := range n.Args {
				if a.Naked && a.Value != nil && literalWord(a.Value) && strings.HasPrefix(wordSource(a.Value), "-") {
					arrayOpt = arrayOpt || strings.ContainsAny(wordSource(a.Value), "aA")
				}
			}
			for _, a := range n.Args {
				switch {
				case a.Name != nil:
					assigns(a.Name.Value)
					if a.Value != nil && a.Array == nil {
						declValues = append(declValues, declValue{clause: n, arg: a, arrayOpt: arrayOpt, anyArray: intRef})
					}
				case a.Naked && a.Value != nil && literalWord(a.Value) && strings.HasPrefix(wordSource(a.Value), "-"):
					hide(n, intRef && strings.ContainsAny(wordSource(a.Value), "in"))
				default:
					hide(n, true)
				}
			}
		}
		switch n := node.(type) {
		case *syntax.Stmt:
			if len(n.Redirs) > 0 || n.Background || n.Negated || n.Coprocess || n.Disown {
				shell = true
			}
			if n.Cmd == nil {
				shell = true
			}
		case *syntax.CallExpr:
			// A bare assignment stays, and so does one before a special
			// builtin in POSIX mode; one before any other command is
			// for that command's run only.
			stays := len(n.Args) == 0 || !literalWord(n.Args[0]) || specialBuiltins[wordText(n.Args[0])]
			for _, a := range n.Assigns {
				if a.Name != nil && stays {
					assigns(a.Name.Value)
				} else if a.Name != nil {
					env[a.Name.Value] = true
				}
				if a.Name == nil || a.Append || a.Naked || a.Index != nil || a.Array != nil {
					shell = true // only NAME=word means an environment entry
					continue
				}
				if a.Value == nil {
					c.Assign = append(c.Assign, a.Name.Value+"=")
				} else if v, ok := literalValue(a.Value); ok {
					c.Assign = append(c.Assign, a.Name.Value+"="+v)
				} else {
					shell = true
				}
			}
			if len(n.Args) == 0 {
				shell = true // a bare assignment only means something to a shell
				return true
			}
			for i, w := range n.Args {
				// builtin and command (options aside) run the command
				// their next word names. A glob or brace may name cd
				// too ("c? /" with a file cd, "c{d,} x").
				if !literalWord(w) || expandedWord(w) && wordText(w) != "[" {
					c.ChangesDir = true
					break
				}
				v := wordText(w)
				if dirCommands[v] {
					c.ChangesDir = true
					break
				}
				if v != "builtin" && v != "command" && (i == 0 || !strings.HasPrefix(v, "-")) {
					break
				}
			}
			argv := make([]string, 0, len(n.Args))
			for _, w := range n.Args {
				if !literalWord(w) {
					shell = true
					argv = append(argv, wordSource(w))
					continue
				}
				fields, err := expand.Fields(newExpandConfig(), w)
				if err != nil || len(fields) != 1 {
					// A literal word is exactly one field ("" included).
					shell = true
					argv = append(argv, wordSource(w))
					continue
				}
				argv = append(argv, fields[0])
			}
			c.Argv = append(c.Argv, argv)
			builtins = append(builtins, n)
			progs = append(progs, programWords(n.Args)...)
		case *syntax.BinaryCmd, *syntax.Subshell, *syntax.Block, *syntax.IfClause, *syntax.WhileClause,
			*syntax.ForClause, *syntax.CaseClause, *syntax.FuncDecl, *syntax.ArithmCmd, *syntax.TestClause,
			*syntax.DeclClause, *syntax.LetClause, *syntax.TimeClause, *syntax.CoprocClause, *syntax.TestDecl,
			*syntax.CmdSubst, *syntax.ProcSubst, *syntax.ParamExp, *syntax.ArithmExp, *syntax.ExtGlob, *syntax.BraceExp:
			shell = true
		}
		return true
	})
	if len(c.Argv) == 0 && len(f.Stmts) == 0 {
		return c, nerr(ReasonEmptyCommand, "no command")
	}
	if shell {
		for _, call := range builtins {
			misreads(optionsMisread(call))
			misreads(builtinMisread(call))
			names, callbacks, ok := builtinNames(call)
			hide(call, !ok)
			for _, cb := range callbacks {
				c.Argv = append(c.Argv, []string{cb})
			}
			for _, name := range names {
				assigns(name) // read NAME, printf -v NAME, …: assignments
				hide(call, !specialValueSafe(name, nil, false))
			}
		}
	}
	for _, d := range declValues {
		// declare -a NAME='(…)' (and local, typeset; export and
		// readonly with -a or -A), or declare NAME="$v" with NAME an
		// array: bash reads a value from '(' to ')' as a compound
		// assignment, and runs the $(…) in it. The text may be known
		// only at run time: then any value that may start with '('.
		// Whether NAME is an array when the declare runs is not
		// something the parser can know for sure (${NAME[0]=v},
		// read -a, a function's caller, …): for declare, typeset and
		// local every such value is refused, array or not. export and
		// readonly (bash 5.2) read a compound value only with -a or -A.
		hide(d.clause, (d.arrayOpt || d.anyArray) && mayCompound(d.arg.Value))
	}
	for _, w := range progs {
		misreads(programMisread(w, shell, c.ChangesDir))
	}
	if misread != nil {
		return Command{}, misread
	}
	if modeSet != "" {
		return Command{}, nerr(ReasonInvalidCommand, "the command sets %s: bash reads the lines after it otherwise than the parser", modeSet)
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if historyVars[name] {
			// Any assignment, a prefix of one command's too (bash sets
			// it for the builtin's run and truncates then), and unset.
			return Command{}, nerr(ReasonInvalidCommand, "the command assigns %s: bash truncates or writes the history file (HISTFILE) itself, a file no facet names", name)
		}
	}
	if localeSet {
		if i := nonASCII(src); i >= 0 {
			// Bash reads each line in the character set of the locale set
			// when it reads it: in GBK, Big5 or GB18030 a byte from 0x80
			// takes the next one into its character, '\' and '`' included,
			// so after LC_ALL=zh_CN.GBK the line 'echo "€\"; touch x #"'
			// (UTF-8 "€" is E2 82 AC) is an echo and a touch to bash, one
			// echo to the parser, which reads bytes as UTF-8.
			return Command{}, nerr(ReasonInvalidCommand, "byte %d is not ASCII in a command that sets the locale (%s): bash may read it in another character set", i, strings.Join(localeNames(env), ", "))
		}
	}
	if hidden != nil {
		// Bash evaluates text it only knows when it runs (a variable's
		// value, a quoted string) as an arithmetic expression or a name,
		// and an array subscript in that text runs its command
		// substitutions: "[[ 'a[$(rm -rf ~)]' -eq 0 ]]" runs rm, though
		// no command of it says so. The policy cannot judge what it
		// cannot see: refuse.
		return Command{}, nerr(ReasonInvalidCommand, "%s: bash may run text known only at run time as code: %s", hidden.Pos(), nodeSource(hidden))
	}
	if badCoproc != nil {
		return Command{}, badCoproc
	}
	if runtimeRedir != nil {
		// The policy judges the file a redirection opens; a name bash
		// only knows when it runs (a variable, a glob, a tilde) is none.
		return Command{}, nerr(ReasonInvalidCommand, "%s: redirection %s to a file known only at run time: %s", runtimeRedir.Pos(), runtimeRedir.Op, nodeSource(runtimeRedir.Word))
	}
	c.Redirects = append(c.Redirects, reopenedFiles(redirs, c.Redirects)...)
	slices.Sort(c.FDs)
	c.FDs = slices.Compact(c.FDs)
	for name := range env {
		c.Env = append(c.Env, name)
	}
	slices.Sort(c.Env)
	c.ShellControl = shell
	if shell {
		c.Assign = nil
	}
	return c, nil
}

// literalValue is an assignment's value when it is a literal word.
func literalValue(w *syntax.Word) (string, bool) {
	if !literalWord(w) {
		return "", false
	}
	return wordText(w), true
}

// literalWord reports whether w has no expansion: only literals and
// quotes whose text is fixed (wordText). $"…" is not: bash translates it
// through the message catalog that TEXTDOMAIN, TEXTDOMAINDIR and the
// locale variables name — which the command itself may assign on an
// earlier line — so '> $"notes/a"' can open any file and '$"echo" x' run
// any program. Nor is $'…' with an escape bash decodes otherwise than
// expand does (ansiCFixed).
func literalWord(w *syntax.Word) bool {
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
		case *syntax.SglQuoted:
			if p.Dollar && !ansiCFixed(p.Value) {
				return false
			}
		case *syntax.DblQuoted:
			if p.Dollar {
				return false
			}
			for _, q := range p.Parts {
				if _, ok := q.(*syntax.Lit); !ok {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// ansiCFixed reports whether bash decodes the $'…' text s as expand does
// (expand.Format). Only the escapes both read alike are accepted: the
// single-character ones (\a \b \e \E \f \n \r \t \v \\ \' \" \?), \x
// with a hex digit after it, and octal up to \377. Every other escape is
// refused, since a reading bash does not share lets a word hide what bash
// makes of it: \cX is a control character to bash (\c@ ends the string, so
// "$'/etc/x\c@/../../ws/notes/a'" was judged as /ws/notes/a while bash
// opened /etc/x), an octal escape above \377 wraps around (\457 is '/'),
// \u and \U depend on the locale, and bash 5.2 reads \x{HH} as a hex
// escape that expand keeps as text ("<<$'E\x{41}'" ended a here-document
// at a line polc never saw end it).
func ansiCFixed(s string) bool {
	for i := 0; i < len(s)-1; i++ {
		if s[i] != '\\' {
			continue
		}
		i++
		switch c := s[i]; {
		case strings.IndexByte(`abeEfnrtv\'"?`, c) >= 0:
		case c == 'x':
			if i+1 >= len(s) || !isHex(s[i+1]) {
				return false // \x{…}, or \x with no digit
			}
		case isOctal(c):
			if c >= '4' && i+2 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) {
				return false // three digits from \400: more than a byte
			}
		default:
			return false
		}
	}
	return true
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// MaxCommandBytes is the longest bash command ParseCommand accepts:
// Linux's limit on one argument (MAX_ARG_STRLEN, 128 KiB with the
// terminating NUL), which bash -c TEXT must fit in.
const MaxCommandBytes = 128<<10 - 1

// maxCommandDepth and maxSimpleCommands bound the syntax tree a command
// may have. Judging a command costs about a kilobyte per simple command
// and, for nested substitutions, time proportional to the depth times the
// length: a 9 KB text of nested $( took four seconds and 181 MB. No
// command an agent writes nests 200 deep or runs 10,000 commands.
const (
	maxCommandDepth   = 200
	maxSimpleCommands = 10000
)

// commandSize refuses a syntax tree deeper than maxCommandDepth or with
// more than maxSimpleCommands simple commands, before it is judged. (The
// walk stops at the bound, so it costs at most the bound.)
func commandSize(f *syntax.File) *NormalizeError {
	depth, calls := 0, 0
	var over *NormalizeError
	syntax.Walk(f, func(n syntax.Node) bool {
		if over != nil {
			return false
		}
		if n == nil {
			depth--
			return true
		}
		if depth++; depth > maxCommandDepth {
			over = nerr(ReasonInvalidCommand, "%s: the command nests more than %d deep", n.Pos(), maxCommandDepth)
			return false
		}
		if _, ok := n.(*syntax.CallExpr); ok {
			if calls++; calls > maxSimpleCommands {
				over = nerr(ReasonInvalidCommand, "%s: the command has more than %d simple commands", n.Pos(), maxSimpleCommands)
				return false
			}
		}
		return true
	})
	return over
}

// newExpandConfig is a fresh expansion state for one call. mvdan.cc/sh's
// expand functions given a nil *Config use one package-level Config whose
// field and string buffers they reuse in place, so concurrent requests
// crossed each other's argv (an allowed echo ran as another request's rm).
// Every expansion gets its own; no expansion state outlives the call.
func newExpandConfig() *expand.Config { return &expand.Config{} }

// wordText is the text bash makes of a literal word (literalWord): its
// quotes removed. expand.Literal keeps an unquoted backslash, which bash
// removes ('\/dev/tcp/…' is /dev/tcp/…, '\.\.' is .., '\cd' is cd).
func wordText(w *syntax.Word) string {
	if !literalWord(w) {
		return wordSource(w) // never expanded: expand.Literal panics on <(…)
	}
	var b strings.Builder
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok {
			b.WriteString(unescapeUnquoted(l.Value))
			continue
		}
		// Quoted text: expand.Literal decodes it as bash does (for
		// $'…' that ansiCFixed admits).
		v, _ := expand.Literal(newExpandConfig(), &syntax.Word{Parts: []syntax.WordPart{p}})
		b.WriteString(v)
	}
	return b.String()
}

// unescapeUnquoted removes the backslashes of unquoted text: bash reads
// "\X" as X; a trailing backslash stays (the parser already dropped
// backslash-newline).
func unescapeUnquoted(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// constArithm reports whether an arithmetic expression (nil: absent) has
// only numeric constants as operands: a name, or any expansion, is text
// that bash evaluates as an expression in turn (hiddenCode).
func constArithm(x syntax.ArithmExpr) bool {
	switch x := x.(type) {
	case nil:
		return true
	case *syntax.BinaryArithm:
		return constArithm(x.X) && constArithm(x.Y)
	case *syntax.UnaryArithm:
		return constArithm(x.X)
	case *syntax.ParenArithm:
		return constArithm(x.X)
	case *syntax.Word:
		if len(x.Parts) != 1 {
			return false
		}
		switch p := x.Parts[0].(type) {
		case *syntax.Lit:
			return numericConst(p.Value)
		case *syntax.ParamExp:
			// $?, $#, $$ and $! expand to numbers (or nothing), and so
			// does a length ${#name} (${#a[@]}, ${#a[2]}: the index is
			// checked like any subscript), never to text bash evaluates.
			return numericParam(p) || p.Length && p.Param != nil && syntax.ValidName(p.Param.Value) &&
				!p.Excl && p.Slice == nil && p.Repl == nil && p.Names == 0 && p.Exp == nil &&
				(p.Index == nil || allIndex(p.Index) || constArithm(p.Index))
		}
	}
	return false
}

// numericConst reports whether s is a bash integer constant: decimal,
// octal, 0x hexadecimal or base#digits.
func numericConst(s string) bool {
	if base, ds, ok := strings.Cut(s, "#"); ok {
		if !digits(base) || ds == "" {
			return false
		}
		for _, r := range ds {
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '@' || r == '_') {
				return false
			}
		}
		return true
	}
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		if h == "" {
			return false
		}
		for _, r := range h {
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
				return false
			}
		}
		return true
	}
	return digits(s)
}

// testConst reports whether a [[ ]] arithmetic operand is a numeric
// constant, signed or not ("-1").
func testConst(w *syntax.Word) bool {
	if len(w.Parts) == 1 {
		switch p := w.Parts[0].(type) {
		case *syntax.Lit:
			v := strings.TrimLeft(p.Value, "+-")
			return len(p.Value)-len(v) <= 1 && numericConst(v)
		case *syntax.ParamExp:
			return constArithm(w) // $?, $#, ${#name}: numbers
		}
	}
	return false
}

// allIndex reports whether a subscript is "@" or "*" (every element).
func allIndex(x syntax.ArithmExpr) bool {
	w, ok := x.(*syntax.Word)
	if !ok || len(w.Parts) != 1 {
		return false
	}
	l, ok := w.Parts[0].(*syntax.Lit)
	return ok && (l.Value == "@" || l.Value == "*")
}

// plainName reports whether w is a literal variable name, or one with a
// constant subscript ("a", "a[2]", "a[@]").
func plainName(w *syntax.Word) bool {
	if !literalWord(w) {
		return false
	}
	return safeName(wordText(w))
}

func safeName(v string) bool {
	name, sub, hasSub := strings.Cut(v, "[")
	if hasSub {
		sub, ok := strings.CutSuffix(sub, "]")
		if !ok || !(digits(sub) || sub == "@" || sub == "*") {
			return false
		}
	}
	return syntax.ValidName(name)
}

// nameSpec says where a bash builtin takes variable names (with shell
// control a name is bash's: "read 'a[$(id)]'" runs id).
type nameSpec struct {
	nameOpts string // options whose argument is a name (printf -v)
	argOpts  string // options whose argument is something else (read -d)
	codeOpts string // options whose argument bash runs as code (mapfile -C)
	operands int    // which operands are names: -1 all, 0 none, k the k-th
	assigns  bool   // the names are assigned (environment facets)
	decl     bool   // declare family: NAME=value operands, +x options
	intRef   bool   // -i (arithmetic) and -n (a reference) are refused
	test     bool   // test/[: the argument after -v or -R is a name
	funcOpts string // options that make the operands function names (unset -f)
}

// nameBuiltins are the bash builtins that take variable names, with the
// options of each that take an argument (bash's internal_getopt).
var nameBuiltins = map[string]nameSpec{
	"read":      {nameOpts: "a", argOpts: "dinNptu", operands: -1, assigns: true},
	"mapfile":   {argOpts: "dnOsuc", codeOpts: "C", operands: -1, assigns: true},
	"readarray": {argOpts: "dnOsuc", codeOpts: "C", operands: -1, assigns: true},
	"printf":    {nameOpts: "v", assigns: true},
	"wait":      {nameOpts: "p", assigns: true},
	"getopts":   {operands: 2, assigns: true},
	"unset":     {operands: -1, assigns: true, funcOpts: "f"}, // unset PATH: bash searches "." (env facet PATH)
	"declare":   {operands: -1, assigns: true, decl: true, intRef: true},
	"typeset":   {operands: -1, assigns: true, decl: true, intRef: true},
	"local":     {operands: -1, assigns: true, decl: true, intRef: true},
	"export":    {operands: -1, assigns: true, decl: true},
	"readonly":  {operands: -1, assigns: true, decl: true},
	"test":      {test: true},
	"[":         {test: true},
}

// builtinNames reports whether a command's name arguments, if it is (or
// wraps through builtin/command) a builtin of nameBuiltins, are literal
// names with constant subscripts (safeName), and returns the names it
// assigns and the commands it calls back (mapfile -C, one plain word). A
// word bash could read as an option or a name whose text is known only at
// run time is unsafe too (printf "$o" x, with o='-va[$(id)]'). A builtin
// called through anything else (a non-literal word) is not checked here:
// its argv is the source text, which allow patterns judge.
func builtinNames(call *syntax.CallExpr) (assigned, callbacks []string, ok bool) {
	args := call.Args
	var spec nameSpec
	for {
		if len(args) == 0 || !literalWord(args[0]) {
			return nil, nil, true
		}
		v := wordText(args[0])
		args = args[1:]
		if v == "builtin" || v == "command" {
			// Their own options: "command -p read", "builtin -- read".
			for len(args) > 0 && literalWord(args[0]) && strings.HasPrefix(wordText(args[0]), "-") {
				args = args[1:]
			}
			continue
		}
		if v == "let" {
			return nil, nil, false // arithmetic on its arguments
		}
		var found bool
		if spec, found = nameBuiltins[v]; !found {
			return nil, nil, true
		}
		break
	}
	var names []string
	funcs := false // the operands are function names
	name := func(s string) bool {
		if !safeName(s) {
			return false
		}
		n, _, _ := strings.Cut(s, "[")
		names = append(names, n)
		return true
	}
	if spec.test {
		if !testShapeSafe(call.Args[len(call.Args)-len(args)-1], args) {
			return nil, nil, false
		}
		// test has no options: "-v NAME" and "-R NAME" anywhere.
		for i := 1; i < len(args); i++ {
			if prev := args[i-1]; literalWord(prev) {
				if p := wordText(prev); p == "-v" || p == "-R" {
					if !literalWord(args[i]) || !safeName(wordText(args[i])) {
						return nil, nil, false
					}
				}
			}
		}
		return nil, nil, true
	}
	// Options, as bash's internal_getopt reads them: words starting with
	// '-' (not "-" alone; '+' too for declare) up to "--" or the first
	// operand; a letter taking an argument takes the rest of its word or
	// the next word.
opts:
	for len(args) > 0 {
		w := args[0]
		if !literalWord(w) {
			if lead := leadText(w); lead == "" || lead[0] == '-' || spec.decl && lead[0] == '+' {
				return nil, nil, false // an option or a name known only at run time
			}
			break
		}
		s := wordText(w)
		if s == "--" {
			args = args[1:]
			break
		}
		if len(s) < 2 || s[0] != '-' && !(spec.decl && s[0] == '+') {
			break
		}
		args = args[1:]
		if spec.intRef && s[0] == '-' && strings.ContainsAny(s, "in") {
			return nil, nil, false // declare -i: arithmetic; -n: a reference
		}
		for j := 1; j < len(s); j++ {
			c := s[j : j+1]
			funcs = funcs || strings.Contains(spec.funcOpts, c)
			isName, isCode := strings.Contains(spec.nameOpts, c), strings.Contains(spec.codeOpts, c)
			if !isName && !isCode && !strings.Contains(spec.argOpts, c) {
				continue
			}
			arg := s[j+1:]
			if arg == "" {
				if len(args) == 0 {
					break opts
				}
				next := args[0]
				args = args[1:]
				if !literalWord(next) {
					if isName || isCode {
						return nil, nil, false
					}
					continue opts
				}
				arg = wordText(next)
			}
			if isName && !name(arg) {
				return nil, nil, false
			}
			if isCode {
				// mapfile -C CALLBACK: bash runs "CALLBACK INDEX LINE"
				// as code ('touch x #' ran touch): a command the policy
				// judges, so one word naming it.
				if !plainWord(arg) {
					return nil, nil, false
				}
				callbacks = append(callbacks, arg)
			}
			continue opts
		}
	}
	for i, w := range args {
		if spec.operands != -1 && spec.operands != i+1 {
			continue
		}
		if !literalWord(w) {
			return nil, nil, false
		}
		s := wordText(w)
		if spec.decl {
			var value string
			s, value, _ = strings.Cut(s, "=") // NAME=value
			if strings.HasPrefix(value, "(") && strings.HasSuffix(value, ")") {
				return nil, nil, false // a compound assignment (mayCompound)
			}
		}
		if !name(s) {
			return nil, nil, false
		}
	}
	if !spec.assigns || funcs {
		names = nil
	}
	return names, callbacks, true
}

// plainWord reports whether bash reads s, given as code, as one command
// word of itself: letters, digits and _ - . / + : , @ only, and not a
// reserved word ("time", "coproc" run the next word).
func plainWord(s string) bool {
	if s == "" || syntax.IsKeyword(s) {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./+:,@", r)) {
			return false
		}
	}
	return true
}

// leadText is the literal text a word starts with, "" when it starts
// with an expansion — which decides whether bash could read the word as
// an option. A word that is only a numeric special parameter ($!, $?,
// $#, $$: "wait $!") reads as "0".
func leadText(w *syntax.Word) string {
	if len(w.Parts) == 0 {
		return ""
	}
	first := w.Parts[0]
	if q, ok := first.(*syntax.DblQuoted); ok && len(q.Parts) > 0 {
		if q.Dollar {
			return "" // translated at run time (literalWord)
		}
		if l, ok := q.Parts[0].(*syntax.Lit); ok {
			return l.Value // in double quotes "\-" stays "\-"
		}
		first = q.Parts[0]
	}
	switch p := first.(type) {
	case *syntax.Lit:
		return unescapeUnquoted(p.Value) // \-v"$n" is -v… to bash
	case *syntax.SglQuoted:
		if !p.Dollar {
			return p.Value
		}
		if !ansiCFixed(p.Value) {
			return "" // not known before run time
		}
		return wordText(&syntax.Word{Parts: []syntax.WordPart{p}}) // $'\055v' is -v
	case *syntax.ParamExp:
		if len(w.Parts) == 1 && numericParam(p) {
			return "0"
		}
	}
	return ""
}

// numericParam reports whether p expands to a number or nothing: $!, $?,
// $#, $$ without any operation.
func numericParam(p *syntax.ParamExp) bool {
	return p.Param != nil && strings.Contains("!?#$", p.Param.Value) && len(p.Param.Value) == 1 &&
		!p.Excl && !p.Length && !p.Width && !p.IsSet && p.Index == nil && p.Slice == nil && p.Repl == nil && p.Names == 0 && p.Exp == nil
}

// integerVars are the variables bash 5.2 gives the integer attribute
// itself ("declare -pi" in a clean bash; TestIntegerVarsFromBash checks
// the list against the bash installed): a value assigned to one, with =
// or +=, is evaluated as arithmetic, and an array subscript in it runs
// its $(…) ("BASHPID+='a[$(id)]'" runs id). EUID, PPID and UID are
// read-only (bash refuses the assignment before evaluating it); they are
// listed so that the list is bash's.
var integerVars = map[string]bool{"BASHPID": true, "EUID": true, "HISTCMD": true, "OPTIND": true, "PPID": true,
	"RANDOM": true, "SRANDOM": true, "UID": true}

// promptVars are bash's prompt strings and PROMPT_COMMAND. Bash decodes a
// prompt's backslash escapes ("\044" is '$', "\$" is '$' for a user other
// than root) and then expands the result, $(…) included: PS4 for every
// command traced under set -x, PS3 for select, the others in interactive
// shells. A value is accepted only as literal text of promptSafe
// characters.
var promptVars = map[string]bool{"PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true, "PROMPT_COMMAND": true}

// promptSafe are the characters a prompt variable's value may hold: no
// backslash (an escape), '$' or '`' (an expansion), '!' (the history
// number) or anything else bash's prompt decoding gives a meaning.
const promptSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 +-_.:,=>#@/%"

// specialVar reports whether bash evaluates a value assigned to name as
// code (integerVars, promptVars).
func specialVar(name string) bool { return integerVars[name] || promptVars[name] }

// specialValueSafe reports whether assigning value (nil: none; known:
// the value is the word) to the variable name runs no code unseen.
func specialValueSafe(name string, value *syntax.Word, known bool) bool {
	if !specialVar(name) || known && value == nil {
		return true
	}
	if !known || !literalWord(value) {
		return false
	}
	v := wordText(value)
	if promptVars[name] {
		return strings.Trim(v, promptSafe) == ""
	}
	return v == "" || numericConst(v)
}

// historyVars are the variables whose assignment makes bash touch the
// history file: assigning HISTFILESIZE (also for one command, also with
// history off) truncates the file HISTFILE names to that many lines
// ("HISTFILE=secrets/key HISTFILESIZE=0 echo; echo" emptied secrets/key),
// and history -a/-w write it. HISTSIZE only bounds the list in memory, but
// is refused with them: a command has no use for any of them, and no
// value of them is safe while another is assigned.
var historyVars = map[string]bool{"HISTFILE": true, "HISTFILESIZE": true, "HISTSIZE": true}

// nodeSource is n's source text for a message, shortened.
func nodeSource(n syntax.Node) string {
	var b strings.Builder
	syntax.NewPrinter().Print(&b, n)
	s := b.String()
	if r := []rune(s); len(r) > 60 {
		s = string(r[:60]) + "…"
	}
	return strconv.Quote(s)
}

func wordSource(w *syntax.Word) string {
	var b strings.Builder
	syntax.NewPrinter().Print(&b, w)
	return b.String()
}

// testShapeSafe reports whether a test or [ command (cmd, then args), run
// by bash with shell control, can only read its run-time words as
// operands. Bash's test decides by the number of words and the values of
// some of them whether a word is an operator, and "-v NAME" (or "-R")
// evaluates NAME's subscript as arithmetic: o=-v; [ "$o" "$n" ] runs
// whatever $(…) $n holds. So a word known only at run time must be one
// quoted word (an unquoted expansion, glob or brace may become several, or
// none) in a position where the grammar takes an operand whatever its value:
// [ W ], [ OP W ] and [ ! W ], [ W BINOP W ], [ ! OP W ], [ ( W ) ],
// [ ! W BINOP W ], OP a unary operator other than -v and -R. Anything else
// with a run-time word is refused (fail closed: [ -f $f ] must quote $f).
func testShapeSafe(cmd *syntax.Word, args []*syntax.Word) bool {
	if c := wordText(cmd); c == "[" && len(args) > 0 {
		if last := wordText(args[len(args)-1]); literalWord(args[len(args)-1]) && last == "]" {
			args = args[:len(args)-1]
		}
	}
	lits := make([]string, len(args)) // "" with isLit false: known at run time
	isLit := make([]bool, len(args))
	runtime := false
	for i, w := range args {
		if !oneWord(w) {
			return false
		}
		if literalWord(w) {
			lits[i] = wordText(w)
			isLit[i] = true
		} else {
			runtime = true
		}
	}
	if !runtime {
		return true
	}
	lit := func(i int, set map[string]bool) bool { return isLit[i] && set[lits[i]] }
	bang := map[string]bool{"!": true}
	switch len(args) {
	case 1:
		return true
	case 2:
		return lit(0, bang) || lit(0, testUnary)
	case 3:
		return lit(1, testBinary) || (lit(0, bang) && lit(1, testUnary)) ||
			(lit(0, map[string]bool{"(": true}) && lit(2, map[string]bool{")": true}))
	case 4:
		return lit(0, bang) && lit(2, testBinary)
	}
	return false
}

// oneWord reports whether bash expands w to exactly one word: only
// literal text without glob or brace characters, and quoted parts.
func oneWord(w *syntax.Word) bool {
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, "*?[{") {
				return false
			}
		case *syntax.SglQuoted:
		case *syntax.DblQuoted:
			// "$@", "${a[@]}" and "${!prefix@}" are a word per element.
			for _, q := range p.Parts {
				if pe, ok := q.(*syntax.ParamExp); ok && (pe.Param != nil && pe.Param.Value == "@" || pe.Names != 0 ||
					pe.Index != nil && allIndex(pe.Index)) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// testUnary and testBinary are bash test's operators that take operands
// as values (-v and -R, which take a variable name, are left out).
var (
	testUnary = map[string]bool{"-a": true, "-b": true, "-c": true, "-d": true, "-e": true, "-f": true, "-g": true, "-h": true,
		"-k": true, "-p": true, "-r": true, "-s": true, "-t": true, "-u": true, "-w": true, "-x": true, "-G": true, "-L": true,
		"-N": true, "-O": true, "-S": true, "-z": true, "-n": true, "-o": true}
	testBinary = map[string]bool{"=": true, "==": true, "!=": true, "<": true, ">": true, "-eq": true, "-ne": true, "-lt": true,
		"-le": true, "-gt": true, "-ge": true, "-nt": true, "-ot": true, "-ef": true, "-a": true, "-o": true}
)

// localeVars are the variables that choose the character set bash reads
// its input in (LC_ALL over LC_CTYPE over LANG). Assigned by the command
// itself — not only as a prefix of one command, which lasts for that
// command's run — they apply to every line bash reads after (misread).
var localeVars = map[string]bool{"LANG": true, "LC_ALL": true, "LC_CTYPE": true}

// localeNames are the locale variables among the names env assigns.
func localeNames(env map[string]bool) []string {
	var names []string
	for name := range env {
		if localeVars[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// nonASCII is the offset of the first byte of s from 0x80, or -1.
func nonASCII(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return i
		}
	}
	return -1
}

// Places where bash 5.2 reads the source otherwise than the parser
// (mvdan.cc/sh) does, so that the commands it runs are not the ones the
// facets list. Each is refused (fail closed); each ran "touch x" under a
// policy that allows echo and cat only.

// commentMisread: a comment runs to the end of its line in bash, a
// backslash at its end included; the parser reads backslash-newline there
// as a line continuation and goes on with the command: "echo a # \" and
// "touch x" on the next line is one echo to it, two commands to bash.
func commentMisread(src string, c *syntax.Comment) *NormalizeError {
	off := int(c.Hash.Offset())
	if off > len(src) {
		return nil
	}
	if line, _, ok := strings.Cut(src[off:], "\n"); ok && strings.HasSuffix(line, "\\") {
		return nerr(ReasonInvalidCommand, "%s: comment ending in a backslash: bash ends it at the newline", c.Hash)
	}
	return nil
}

// backquoteMisread: bash ends `…` at the first backquote not escaped by a
// backslash, within single quotes too; the parser skips a quoted one:
// "echo `echo '`;touch x;'` #'" ran touch, a string to the parser. A
// nested (escaped) backquote is refused with it: write $(…).
func backquoteMisread(src string, cs *syntax.CmdSubst) *NormalizeError {
	if !cs.Backquotes {
		return nil
	}
	l, r := int(cs.Left.Offset()), int(cs.Right.Offset())
	if l < r && r <= len(src) && strings.Contains(src[l+1:r], "`") {
		return nerr(ReasonInvalidCommand, "%s: a backquote within `…`: bash ends the substitution there; write $(…)", cs.Left)
	}
	return nil
}

// quotedDefaultMisread: in ${x-w}, ${x:-w}, ${x+w}, ${x:+w}, ${x=w} and
// ${x:=w} within double quotes (or an unquoted here-document), a single
// quote in w is a character to bash, not a quote: the $(…) between two of
// them runs ("${x:-'$(touch x)'}"); the parser reads a quoted string there.
// So is $'…' in ${x?w} and ${x:?w} ("${x:?$'$(touch x)'}"), whose '…'
// bash reads as a quote.
func quotedDefaultMisread(n syntax.Node) *NormalizeError {
	var bad *NormalizeError
	syntax.Walk(n, func(m syntax.Node) bool {
		switch m := m.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			return false // quoted anew inside: the main walk visits them
		case *syntax.ParamExp:
			if m.Exp == nil || m.Exp.Word == nil || bad != nil {
				break
			}
			var dollarOnly bool
			switch m.Exp.Op {
			case syntax.DefaultUnset, syntax.DefaultUnsetOrNull, syntax.AlternateUnset, syntax.AlternateUnsetOrNull,
				syntax.AssignUnset, syntax.AssignUnsetOrNull:
			case syntax.ErrorUnset, syntax.ErrorUnsetOrNull:
				dollarOnly = true
			default:
				return true
			}
			syntax.Walk(m.Exp.Word, func(q syntax.Node) bool {
				switch q := q.(type) {
				case *syntax.CmdSubst, *syntax.ProcSubst:
					return false
				case *syntax.SglQuoted:
					if bad == nil && (q.Dollar || !dollarOnly) {
						bad = nerr(ReasonInvalidCommand, "%s: quotes in %s within double quotes or a here-document: bash reads them otherwise", m.Pos(), nodeSource(m))
					}
				}
				return true
			})
		}
		return bad == nil
	})
	return bad
}

// heredocMisread: a here-document's delimiter is its word with the quotes
// removed as bash removes them ("E\"F" is E"F, $'E\x41' is EA); the
// parser keeps a backslash in double quotes and does not decode $'…', so
// the two ended the body on different lines, and what one read as the
// body the other ran. Bash also ends the body at lines the parser reads
// otherwise (bashEndsElsewhere), and within a command or process
// substitution (inSubst) at a line that starts with the delimiter and
// goes on ("EOF)" or "EOF ) ; cmd": the rest of the line is code), where
// the parser ends it at the delimiter alone.
func heredocMisread(src string, r *syntax.Redirect, inSubst bool) *NormalizeError {
	if r.Op != syntax.Hdoc && r.Op != syntax.DashHdoc {
		return nil
	}
	stop, quoted := parserHdocStop(r.Word)
	if !literalWord(r.Word) || wordText(r.Word) != stop {
		return nerr(ReasonInvalidCommand, "%s: here-document delimiter %s: bash ends the body on another line than the parser", r.Pos(), nodeSource(r.Word))
	}
	if r.Hdoc == nil {
		return nil
	}
	// The body's source up to and with the line the parser ended it at
	// (the end of r.Hdoc).
	start, end := int(r.Hdoc.Pos().Offset()), min(int(r.Hdoc.End().Offset()), len(src))
	for start >= 2 && start <= len(src) && src[start-2:start] == "\\\n" {
		start -= 2 // the parser skips a body's leading backslash-newlines
	}
	if start > end {
		return nil
	}
	body := src[start:end]
	if inSubst {
		for line := range strings.SplitSeq(body, "\n") {
			if r.Op == syntax.DashHdoc {
				line = strings.TrimLeft(line, "\t")
			}
			if strings.HasPrefix(line, stop) && line != stop {
				return nerr(ReasonInvalidCommand, "%s: here-document line %q in a substitution: bash ends the body there", r.Pos(), line)
			}
		}
	}
	if bashEndsElsewhere(body, stop, r.Op == syntax.DashHdoc, !quoted) {
		return nerr(ReasonInvalidCommand, "%s: here-document: bash ends the body on another line than the parser", r.Pos())
	}
	if quoted {
		return nil
	}
	return quotedDefaultMisread(r.Hdoc)
}

// bashEndsElsewhere reports whether bash ends a here-document on another
// line than the parser did; body is the body's source, its last line the
// delimiter the parser ended it at. Bash reads the body line by line —
// joining, when the delimiter is unquoted (join), a line that ends in an
// odd number of backslashes with the next ("E\" then "OF" is EOF) — and
// ends it at the first line equal to the delimiter, also one inside a
// $(…), `…` or ${…} of the body, or quotes in them, which the parser reads
// as part of a word: "$(echo '", "EOF", "touch x", "')" ran touch. With
// <<- the leading tabs go, of the first line joined or of each (either
// counts).
func bashEndsElsewhere(body, stop string, dash, join bool) bool {
	lines := strings.Split(body, "\n")
	lines = lines[:len(lines)-1] // the parser's delimiter line
	var first, each strings.Builder
	pending := false
	for _, l := range lines {
		t := l
		if dash {
			t = strings.TrimLeft(l, "\t")
			if !pending {
				l = t
			}
		}
		n := len(t) - len(strings.TrimRight(t, "\\"))
		if join && n%2 == 1 {
			first.WriteString(l[:len(l)-1])
			each.WriteString(t[:len(t)-1])
			pending = true
			continue
		}
		first.WriteString(l)
		each.WriteString(t)
		if first.String() == stop || each.String() == stop {
			return true
		}
		first.Reset()
		each.Reset()
		pending = false
	}
	return pending // bash joins the parser's delimiter line to the last
}

// parserHdocStop is the delimiter the parser ends a here-document at
// (mvdan.cc/sh's unquotedWordBytes), and whether the word is quoted.
func parserHdocStop(w *syntax.Word) (string, bool) {
	var b strings.Builder
	quoted := false
	var part func(p syntax.WordPart, inQuotes bool)
	part = func(p syntax.WordPart, inQuotes bool) {
		switch p := p.(type) {
		case *syntax.Lit:
			for i := 0; i < len(p.Value); i++ {
				if c := p.Value[i]; c == '\\' && !inQuotes {
					if i++; i < len(p.Value) {
						b.WriteByte(p.Value[i])
					}
					quoted = true
				} else {
					b.WriteByte(c)
				}
			}
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
			quoted = true
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				part(q, true)
			}
			quoted = true
		}
	}
	for _, p := range w.Parts {
		part(p, false)
	}
	return b.String(), quoted
}

// declValue is a NAME=value argument of a declare, local, typeset, export
// or readonly, whose value bash may read as a compound array assignment.
type declValue struct {
	clause   *syntax.DeclClause
	arg      *syntax.Assign
	arrayOpt bool // the clause has -a or -A
	anyArray bool // the value counts whatever NAME is (declare, local, typeset)
}

// mayCompound reports whether the value w of a declare argument may be
// a compound array assignment to bash: text from '(' to ')' ("(a $(id))"),
// or text known only at run time that may begin with '('.
func mayCompound(w *syntax.Word) bool {
	if literalWord(w) {
		v := wordText(w)
		return strings.HasPrefix(v, "(") && strings.HasSuffix(v, ")")
	}
	lead := leadText(w)
	return lead == "" || lead[0] == '('
}

// modeVars are the variables whose assignment changes how bash reads the
// lines after: POSIXLY_CORRECT turns POSIX mode on (where an assignment
// before a special builtin stays: "LC_ALL=zh_CN.GBK :"), BASH_COMPAT
// selects an older grammar.
var modeVars = map[string]bool{"POSIXLY_CORRECT": true, "BASH_COMPAT": true}

// specialBuiltins are POSIX's special builtins (and bash's source): in
// POSIX mode an assignment before one stays in the shell.
var specialBuiltins = map[string]bool{"break": true, ":": true, ".": true, "continue": true, "eval": true, "exec": true,
	"exit": true, "export": true, "readonly": true, "return": true, "set": true, "shift": true, "source": true,
	"times": true, "trap": true, "unset": true}

// Shell options that change how bash reads or runs the lines after the
// one that sets them, which the parser reads as bash starts (badSetOpts
// by their set -o names, badSetFlags as set letters, badShopts for
// shopt): keyword (-k) makes NAME=value anywhere in a command an
// assignment ("set -k" then "cat f LD_PRELOAD=notes/x.so" gave cat the
// library, no env facet said so); histexpand (-H) with history expands
// "!!" — in double quotes too — into the text of an earlier line
// (echo '$(touch x)', then echo "!!:1", ran touch); posix changes the
// grammar and keeps assignments before special builtins;
// expand_aliases runs aliases; extquote and the compat levels change
// how quotes in ${…} read.
var (
	badSetOpts  = map[string]bool{"keyword": true, "histexpand": true, "history": true, "posix": true}
	badSetFlags = "kH"
	badShopts   = map[string]bool{"expand_aliases": true, "extquote": true, "compat31": true, "compat32": true,
		"compat40": true, "compat41": true, "compat42": true, "compat43": true, "compat44": true}
)

// optionsMisread refuses a set or shopt (also through builtin or
// command) that may change an option of badSetOpts, badSetFlags or
// badShopts, or whose options are known only at run time ("set -e",
// "set -euo pipefail", "shopt -s nullglob" are fine).
func optionsMisread(call *syntax.CallExpr) *NormalizeError {
	args := call.Args
	for len(args) > 0 && literalWord(args[0]) && (wordText(args[0]) == "builtin" || wordText(args[0]) == "command") {
		args = args[1:]
		for len(args) > 0 && literalWord(args[0]) && strings.HasPrefix(wordText(args[0]), "-") {
			args = args[1:]
		}
	}
	if len(args) == 0 || !literalWord(args[0]) {
		return nil
	}
	cmd := wordText(args[0])
	if cmd != "set" && cmd != "shopt" {
		return nil
	}
	bad := func(what string) *NormalizeError {
		return nerr(ReasonInvalidCommand, "%s: %s %s: bash reads the lines after it otherwise than the parser", call.Pos(), cmd, what)
	}
	setNames := cmd == "set" // shopt -o: set -o names
	for i := 1; i < len(args); i++ {
		w := args[i]
		if !literalWord(w) {
			if lead := leadText(w); lead == "" || lead[0] == '-' || lead[0] == '+' {
				return bad(nodeSource(w)) // an option known only at run time
			}
			if cmd == "set" {
				return nil // positional parameters
			}
			return bad(nodeSource(w))
		}
		v := wordText(w)
		if v == "--" || v == "-" {
			if cmd == "set" {
				return nil
			}
			continue
		}
		if (v[0] == '-' || v[0] == '+') && len(v) > 1 {
			for _, f := range v[1:] {
				switch {
				case cmd == "set" && strings.ContainsRune(badSetFlags, f):
					return bad(v)
				case f == 'o' && cmd == "set":
					if i+1 < len(args) {
						i++
						if !literalWord(args[i]) || badSetOpts[wordText(args[i])] {
							return bad(v + " " + nodeSource(args[i]))
						}
					}
				case f == 'o':
					setNames = true
				}
			}
			continue
		}
		if cmd == "set" {
			return nil // positional parameters
		}
		if badShopts[v] || setNames && badSetOpts[v] {
			return bad(v)
		}
	}
	return nil
}

// arrayMisread: in a compound array assignment within $(…) or <(…), bash
// 5.2 loses an unquoted backslash, so "\(", "\;", "\|" are syntax errors
// to it — after which it goes on with the next line, which the parser
// read as more of the array ("$(a=(\(" then "touch x" then "))" ran
// touch) — and "\"" opens a quote.
func arrayMisread(a *syntax.ArrayExpr) *NormalizeError {
	for _, e := range a.Elems {
		if e.Value == nil {
			continue
		}
		for _, p := range e.Value.Parts {
			if l, ok := p.(*syntax.Lit); ok && strings.Contains(l.Value, "\\") {
				return nerr(ReasonInvalidCommand, "%s: backslash in an array assignment within a substitution: bash reads it otherwise (quote the element)", e.Pos())
			}
		}
	}
	return nil
}

// extGlobMisread: bash -c starts with extglob off, and reads "!(rm x)" as
// "!" and a subshell running rm, and "@(…)", "?(…)", "*(…)", "+(…)" as a
// syntax error; the parser reads an extended glob, a word ("!(rm x)" ran
// rm under a policy denying it). Within [[ ]] bash does read extended
// globs, and runs the $(…) in one, which the parser keeps as the
// pattern's text ("[[ x == @($(rm x)|x) ]]" ran rm). Refused everywhere.
func extGlobMisread(g *syntax.ExtGlob) *NormalizeError {
	return nerr(ReasonInvalidCommand, "%s: %s…): bash reads it otherwise than the parser (extglob is off, and in [[ ]] it runs the substitutions in it)", g.OpPos, g.Op)
}

// timeMisread: bash 5.2's lexer reads "time" as the reserved word and
// then "-p" and, after "time" or "time -p", "--" as tokens of its own
// (TIMEOPT, TIMEIGN) that end time's options: "time -- rm x" runs rm.
// The parser takes "-p" only, so it judged the program "--". The first
// word after time (and the parser's -p) starting with '-' is refused:
// bash reads any other such word as the program, as the parser does,
// but there is no command worth the doubt.
func timeMisread(tc *syntax.TimeClause) *NormalizeError {
	// The word after time is the first of the pipeline it times: the
	// parser's time clause holds the whole pipeline ("time -- a | b").
	st := tc.Stmt
	for st != nil {
		b, ok := st.Cmd.(*syntax.BinaryCmd)
		if !ok {
			break
		}
		st = b.X
	}
	if st == nil {
		return nil
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return nil
	}
	if w := call.Args[0]; literalWord(w) && strings.HasPrefix(wordText(w), "-") || strings.HasPrefix(leadText(w), "-") {
		return nerr(ReasonInvalidCommand, "%s: time followed by %s: bash reads -p and -- after time as its options, not as the program; write time -p COMMAND", tc.Pos(), nodeSource(w))
	}
	return nil
}

// pipedTimeMisread: bash reads "time" as the reserved word only where a
// pipeline starts (time_command_acceptable), not after '|' or '|&': "echo
// | time -p rm x" runs the program time with the arguments "-p rm x". The
// parser reads the reserved word there too, and judged "rm x". y is the
// right-hand side of a pipe; its first element must not be a time clause.
func pipedTimeMisread(y *syntax.Stmt) *NormalizeError {
	for y != nil {
		switch c := y.Cmd.(type) {
		case *syntax.TimeClause:
			return nerr(ReasonInvalidCommand, "%s: time after | is the program time to bash, not the reserved word: write { time COMMAND; }", c.Pos())
		case *syntax.BinaryCmd:
			if c.Op != syntax.Pipe && c.Op != syntax.PipeAll {
				return nil
			}
			y = c.X
			continue
		}
		return nil
	}
	return nil
}

// dupSafe are the characters a file named by >&WORD or <&WORD may hold.
const dupSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._+,:@%=-"

// dupWordMisread refuses a duplication's word (>&WORD, <&WORD, N>&WORD,
// N<&WORD) that bash reads otherwise than the parser. Bash's lexer reads
// an unquoted '-' right after >& or <& (blanks between them too) as the
// close operator's own token, and the rest as the next word: ">&-rm x"
// closes stdout and runs "rm x", where the parser judged a write to the
// file "-rm" and the program x. And a WORD that is no descriptor number
// makes >&WORD the file redirection &>WORD, for which bash expands the
// already expanded word again: >&'x$(rm v)' runs rm (and <&WORD, 2>&WORD
// are errors after the same expansion). So the word must be "-", a
// number (N or N-, a move), or a file name of dupSafe characters not
// starting with '-': no quote, backslash, '$', '`', glob, brace or tilde
// in its text (write &>FILE for any other name).
func dupWordMisread(n *syntax.Redirect) *NormalizeError {
	if n.Op != syntax.DplIn && n.Op != syntax.DplOut || !literalWord(n.Word) {
		return nil // a word known only at run time is refused (redirection)
	}
	v := wordText(n.Word)
	switch {
	case v == "-" || digits(strings.TrimSuffix(v, "-")):
		return nil
	case strings.HasPrefix(v, "-"):
		return nerr(ReasonInvalidCommand, "%s: %s%s: bash reads %s- as closing the descriptor and the rest as the next word", n.Pos(), n.Op, nodeSource(n.Word), n.Op)
	case strings.Trim(v, dupSafe) != "":
		return nerr(ReasonInvalidCommand, "%s: %s%s: bash expands the file name of %s a second time; name the file with letters, digits and /._+,:@%%=- only, or write &>FILE", n.Pos(), n.Op, nodeSource(n.Word), n.Op)
	}
	return nil
}

// fdNumberMisread refuses a redirection whose descriptor number does not
// fit in a C int: bash 5.2 takes the digits before < or > as the
// descriptor only when they do, and otherwise as a word of the command
// (an argument, or the program), redirecting the operator's default
// descriptor instead — "cat 2147483648<f >/dev/stdin" makes f stdin and
// then truncates it through /dev/stdin, where the parser saw f on a
// descriptor of its own.
func fdNumberMisread(n *syntax.Redirect) *NormalizeError {
	if n.N == nil || strings.HasPrefix(n.N.Value, "{") {
		return nil
	}
	if fd, err := strconv.ParseInt(n.N.Value, 10, 64); err == nil && fd <= math.MaxInt32 {
		return nil
	}
	return nerr(ReasonInvalidCommand, "%s: %s%s: bash reads a descriptor number past %d as a word of the command, not as the descriptor", n.Pos(), n.N.Value, n.Op, math.MaxInt32)
}

// programWords are the words of a simple command that name a program:
// the first, and the one that command, builtin and exec (after their
// options: command -p -v -V, exec -c -l -a NAME, "--") run.
func programWords(args []*syntax.Word) []*syntax.Word {
	var out []*syntax.Word
	for len(args) > 0 {
		out = append(out, args[0])
		if !literalWord(args[0]) {
			return out
		}
		v := wordText(args[0])
		if v != "command" && v != "builtin" && v != "exec" {
			return out
		}
		args = args[1:]
		for len(args) > 0 && literalWord(args[0]) {
			o := wordText(args[0])
			if o == "--" {
				args = args[1:]
				break
			}
			if len(o) < 2 || o[0] != '-' {
				break
			}
			args = args[1:]
			if i := strings.IndexByte(o, 'a'); v == "exec" && i == len(o)-1 && len(args) > 0 {
				args = args[1:] // exec -a NAME: the name argv[0] gets
			}
		}
	}
	return out
}

// programMisread refuses a program word w whose program the policy cannot
// know from its text. A command pattern judges the program's name as
// written, and "*" in one matches "/" and "..": with shell control
// (shell), a word bash expands names a program known only at run time
// ("./scripts/${u:-..}/../bin/rm" matched "./scripts/*" and ran bin/rm;
// "./scripts/{..,}/…" and "r{m,}" too), so it must be literal, without an
// unquoted glob, brace or tilde ("[" aside: bash leaves it as it is). A
// path with a ".." segment is refused too (cleaning it would be wrong
// after a link), and a relative path in a command that may change
// directory (changesDir) names no file the policy can judge ("cd ..;
// ./scripts/x" runs a program outside the workspace).
func programMisread(w *syntax.Word, shell, changesDir bool) *NormalizeError {
	if !literalWord(w) {
		return nerr(ReasonInvalidCommand, "%s: program %s is known only when bash expands it: name the program literally", w.Pos(), nodeSource(w))
	}
	v := wordText(w)
	if shell && expandedWord(w) && v != "[" {
		return nerr(ReasonInvalidCommand, "%s: program %s: bash expands its glob, brace or tilde: name the program literally", w.Pos(), nodeSource(w))
	}
	if !strings.Contains(v, "/") {
		return nil
	}
	if slices.Contains(strings.Split(v, "/"), "..") {
		return nerr(ReasonInvalidCommand, "program path %q has a \"..\" segment: a command pattern ending in * would grant it; name the program without \"..\"", v)
	}
	if shell && changesDir && !filepath.IsAbs(v) {
		return nerr(ReasonInvalidCommand, "%s: relative program path %q in a command that may change directory: use an absolute path", w.Pos(), v)
	}
	return nil
}

// builtinClass is what a bash builtin does that the policy must know of
// (docs/decisions.md lists them).
type builtinClass uint8

const (
	// builtinPlain runs nothing and changes what no later word names.
	builtinPlain builtinClass = iota + 1
	// builtinAssigns assigns or unsets the variables it names: they are
	// environment facets (nameBuiltins, DeclClause), so "unset PATH"
	// needs the grant "PATH=." needs.
	builtinAssigns
	// builtinRuns runs its arguments as code or as a program: what it runs
	// is granted with it, by a command rule naming it.
	builtinRuns
	// builtinChdir changes the working directory (Command.ChangesDir).
	builtinChdir
	// builtinOptions sets shell options; those that change how bash reads
	// or runs the lines after are refused (optionsMisread).
	builtinOptions
	// builtinRefused changes what later words name or run in a way the
	// policy cannot follow; refused in the forms builtinMisread names.
	builtinRefused
)

// shellBuiltins classifies every builtin of bash 5.2 (compgen -b; a test
// checks the list against the bash installed). "builtin NAME" with any
// other NAME is refused: a builtin polc does not know (a newer bash's)
// is one it cannot judge.
var shellBuiltins = map[string]builtinClass{
	":": builtinPlain, "true": builtinPlain, "false": builtinPlain, "echo": builtinPlain, "pwd": builtinPlain,
	"test": builtinPlain, "[": builtinPlain, "type": builtinPlain, "help": builtinPlain, "times": builtinPlain,
	"umask": builtinPlain, "ulimit": builtinPlain, "kill": builtinPlain, "dirs": builtinPlain, "caller": builtinPlain,
	"logout": builtinPlain, "exit": builtinPlain, "return": builtinPlain, "break": builtinPlain, "continue": builtinPlain,
	"shift": builtinPlain, "suspend": builtinPlain, "disown": builtinPlain, "bg": builtinPlain, "fg": builtinPlain,
	// alias: aliases expand only with
	// expand_aliases (refused); complete, compopt and bind act only in
	// interactive line editing, which bash -c never does.
	"alias": builtinPlain, "unalias": builtinPlain, "complete": builtinPlain,
	"compopt": builtinPlain, "bind": builtinPlain,
	"read": builtinAssigns, "mapfile": builtinAssigns, "readarray": builtinAssigns, "printf": builtinAssigns,
	"getopts": builtinAssigns, "wait": builtinAssigns, "unset": builtinAssigns, "declare": builtinAssigns,
	"typeset": builtinAssigns, "local": builtinAssigns, "export": builtinAssigns, "readonly": builtinAssigns,
	"let": builtinAssigns,
	// eval, source, . and trap run text as code, exec, command and
	// builtin the program or builtin named, jobs -x a program, compgen
	// -C and -F a command or function (mapfile -C: its callback is an
	// argv of its own).
	"eval": builtinRuns, "source": builtinRuns, ".": builtinRuns, "trap": builtinRuns, "exec": builtinRuns,
	"command": builtinRuns, "builtin": builtinRuns, "jobs": builtinRuns, "compgen": builtinRuns,
	"cd": builtinChdir, "pushd": builtinChdir, "popd": builtinChdir,
	"set": builtinOptions, "shopt": builtinOptions,
	// history: an entry runs only through fc (refused) or history
	// expansion (set -H, refused), but -a, -n, -r and -w read or write
	// a file (builtinMisread).
	"enable": builtinRefused, "hash": builtinRefused, "fc": builtinRefused, "history": builtinRefused,
}

// builtinMisread refuses a call (also through builtin or command) of a
// builtin in a form that changes what later words name or run beyond what
// the policy sees: enable with operands or options that change anything
// (-f loads a shared object into bash, -n turns a builtin off so its name
// runs a file from PATH), hash -p ("hash -p ./evil git; git status" ran
// ./evil), fc (it runs history entries as code: "history -s 'rm x'; fc
// -s" ran rm), and builtin naming anything shellBuiltins does not list.
func builtinMisread(call *syntax.CallExpr) *NormalizeError {
	args := call.Args
	viaBuiltin := false
	for len(args) > 0 && literalWord(args[0]) && (wordText(args[0]) == "builtin" || wordText(args[0]) == "command") {
		viaBuiltin = viaBuiltin || wordText(args[0]) == "builtin"
		args = args[1:]
		for len(args) > 0 && literalWord(args[0]) && strings.HasPrefix(wordText(args[0]), "-") {
			args = args[1:]
		}
	}
	if len(args) == 0 || !literalWord(args[0]) {
		return nil // a program word known at run time: refused (programMisread)
	}
	name := wordText(args[0])
	class, known := shellBuiltins[name]
	if viaBuiltin && !known {
		return nerr(ReasonInvalidCommand, "%s: builtin %s: not a bash builtin polc knows", call.Pos(), nodeSource(args[0]))
	}
	if class != builtinRefused {
		return nil
	}
	refused := func(why string) *NormalizeError {
		return nerr(ReasonInvalidCommand, "%s: %s: %s", call.Pos(), nodeSource(call), why)
	}
	switch name {
	case "fc":
		return refused("fc runs history entries as code")
	case "enable":
		for _, w := range args[1:] {
			if v := wordText(w); !literalWord(w) || len(v) < 2 || v[0] != '-' || strings.Trim(v[1:], "aps") != "" {
				return refused("enable changes which builtins bash has (-f loads a library, -n lets a file on PATH run instead)")
			}
		}
	case "history":
		// -a, -n, -r, -w FILE (or HISTFILE's file): "history -w f"
		// truncates f and "history -r secrets/key; history" prints it,
		// files no facet names. -c, -d, -s, -p and listing touch none.
		for _, w := range args[1:] {
			if v := wordText(w); !literalWord(w) || strings.HasPrefix(v, "-") && strings.ContainsAny(v, "anrw") {
				return refused("history -a, -n, -r and -w read or write a file no facet names")
			}
		}
	case "hash":
		for _, w := range args[1:] {
			if v := wordText(w); !literalWord(w) || strings.HasPrefix(v, "-") && strings.Contains(v, "p") {
				return refused("hash -p makes a command name run any file")
			}
		}
	}
	return nil
}
