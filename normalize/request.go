package normalize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/internal/satint"
	"polc.dev/polc/internal/strictjson"
)

// Plus is u + v member by member, saturating at the largest int64 rather
// than wrapping: a sum past any limit stays past it.
func (u Usage) Plus(v Usage) Usage {
	return Usage{Calls: satint.Add(u.Calls, v.Calls), Tokens: satint.Add(u.Tokens, v.Tokens),
		CostMicrounits: satint.Add(u.CostMicrounits, v.CostMicrounits), WallMicroseconds: satint.Add(u.WallMicroseconds, v.WallMicroseconds)}
}

// StartInto begins a normalized request in out (which it overwrites
// whole): identity, time and workspace, with the request's members as
// arguments. The Normalizer and the executor's attempt (stage 2) call it;
// the attempt holds out, and nothing here makes the strings escape further
// than out. at is the request's time unless reqTime gives it.
func StartInto(out *Normalized, action, principal, tenant, ws string, reqTime *string, at time.Time) *NormalizeError {
	*out = Normalized{
		Principal: principal, Tenant: tenant, Action: action,
		Paths: []PathAccess{}, Commands: [][]string{}, Hosts: []string{}, Env: []string{}, Secrets: []string{},
	}
	if reqTime != nil {
		t, err := time.Parse(time.RFC3339Nano, *reqTime)
		if err != nil {
			return Errorf(ReasonInvalidRequest, "time %q is not RFC 3339", *reqTime)
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
		return Errorf(ReasonInvalidRequest, "workspace %q must be an absolute path", ws)
	}
	out.Workspace = filepath.Clean(ws)
	lastWorkspace.Store(&checkedWorkspace{ws, out.Workspace})
	return nil
}

// checkedWorkspace is a workspace that passed StartInto's check, and its
// clean form.
type checkedWorkspace struct{ raw, clean string }

// lastWorkspace caches the last workspace checked: an executor's requests
// normally share one.
var lastWorkspace atomic.Pointer[checkedWorkspace]

// ActionRequest is what a caller asks to run: an action id, its arguments
// and who asks. Time and Usage are optional: the evaluation time (default:
// the normalizer's clock) and the budget already consumed in the current
// window (default: nothing).
type ActionRequest struct {
	Action    string         `json:"action"`
	Arguments map[string]any `json:"arguments"`
	Principal string         `json:"principal"`
	Tenant    string         `json:"tenant"`
	Workspace string         `json:"workspace"`
	Time      *string        `json:"time,omitempty"`
	Usage     *Usage         `json:"usage,omitempty"`
}

// Normalized is the request the policy engines evaluate (docs/decisions.md "Input"). Every
// member is always present; lists are empty rather than null.
type Normalized struct {
	Principal    string       `json:"principal"`
	Tenant       string       `json:"tenant"`
	Action       string       `json:"action"`
	Workspace    string       `json:"workspace"`
	Time         string       `json:"time"`
	Paths        []PathAccess `json:"paths"`
	Commands     [][]string   `json:"commands"`
	ShellControl bool         `json:"shell_control"`
	Hosts        []string     `json:"hosts"`
	Env          []string     `json:"env"`
	Secrets      []string     `json:"secrets"`
	MCP          *MCPTarget   `json:"mcp"`
	Usage        Usage        `json:"usage"`
}

// PathAccess is one file-system access: a clean absolute path and its kind
// ("read", "write" or "execute").
type PathAccess struct {
	Path   string `json:"path"`
	Access string `json:"access"`
}

// MCPTarget is the MCP server, tool and optional resource a request names.
type MCPTarget struct {
	Server   string  `json:"server"`
	Tool     string  `json:"tool"`
	Resource *string `json:"resource"`
}

// Usage is the budget consumed so far in the policy's budget window.
type Usage struct {
	Calls            int64 `json:"calls"`
	Tokens           int64 `json:"tokens"`
	CostMicrounits   int64 `json:"cost_microunits"`
	WallMicroseconds int64 `json:"wall_microseconds"`
}

// Of returns the usage of a budget kind.
func (u Usage) Of(kind string) int64 {
	switch kind {
	case "calls":
		return u.Calls
	case "tokens":
		return u.Tokens
	case "cost_microunits":
		return u.CostMicrounits
	case "wall_microseconds":
		return u.WallMicroseconds
	}
	return 0
}

// ParseActionRequest decodes an action request strictly: unknown members are
// errors (names match exactly, as declared), the text must be I-JSON (no
// duplicate members, valid UTF-8, finite numbers), action and workspace are
// required, and absent arguments are none.
func ParseActionRequest(data []byte) (ActionRequest, error) {
	var r ActionRequest
	// encoding/json keeps the last of duplicate members (merging objects),
	// replaces invalid UTF-8 and escaped lone surrogates with U+FFFD and
	// accepts numbers with no canonical form; I-JSON, which the request's
	// digest is computed over, has none of these. Checked first, so that
	// such text is refused at its line and column (a *jcs.SyntaxError
	// in the chain) before anything decodes it.
	if _, err := jcs.Transform(data); err != nil {
		return r, fmt.Errorf("action request: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("action request: %v", strictjson.Describe(err))
	}
	if dec.More() {
		return r, fmt.Errorf("action request: trailing data")
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(data, &raw)
	// encoding/json also matches member names case-insensitively.
	if err := declaredMembers(raw, actionRequestMembers, ""); err != nil {
		return r, err
	}
	var usage map[string]json.RawMessage
	json.Unmarshal(raw["usage"], &usage) // an object or null: decoded above
	if err := declaredMembers(usage, usageMembers, "usage."); err != nil {
		return r, err
	}
	for _, k := range []string{"action", "workspace"} {
		if _, ok := raw[k]; !ok {
			return r, fmt.Errorf("action request: missing %q", k)
		}
	}
	return r, nil
}

var (
	actionRequestMembers = strictjson.Fields(reflect.TypeFor[ActionRequest]())
	usageMembers         = strictjson.Fields(reflect.TypeFor[Usage]())
)

// declaredMembers reports a member of raw not spelled exactly as one of
// declared, named with prefix (its path in the request).
func declaredMembers(raw map[string]json.RawMessage, declared []string, prefix string) error {
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if !slices.Contains(declared, k) {
			return fmt.Errorf("action request: unknown field %q", prefix+k)
		}
	}
	return nil
}

// ParseNormalized decodes a normalized request strictly: every member
// present, no unknown member, and values in their documented forms (time
// in TimeLayout, known path accesses, absolute workspace and paths,
// host:port hosts, non-empty argv).
func ParseNormalized(data []byte) (*Normalized, error) {
	var n Normalized
	// strictjson expects I-JSON (no duplicate members, valid UTF-8, no
	// escaped lone surrogate: encoding/json would make either U+FFFD).
	if _, err := jcs.Transform(data); err != nil {
		return nil, fmt.Errorf("normalized request: %w", err)
	}
	if err := strictjson.Decode(data, &n); err != nil {
		return nil, fmt.Errorf("normalized request: %v", err)
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return &n, nil
}

// Validate checks the documented forms of a normalized request: every
// string text (CheckText) first.
func (n *Normalized) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("normalized request: "+format, args...)
	}
	if err := n.TextProblem(); err != nil {
		return fail("%s", err.Detail)
	}
	if _, err := time.Parse(TimeLayout, n.Time); err != nil || len(n.Time) != len(TimeLayout) {
		return fail("time %q: want %s", n.Time, TimeLayout)
	}
	if !strings.HasPrefix(n.Workspace, "/") || path.Clean(n.Workspace) != n.Workspace {
		return fail("workspace %q must be a clean absolute path", n.Workspace)
	}
	for _, p := range n.Paths {
		if !strings.HasPrefix(p.Path, "/") || path.Clean(p.Path) != p.Path {
			return fail("path %q must be clean and absolute", p.Path)
		}
		if p.Access != "read" && p.Access != "write" && p.Access != "execute" {
			return fail("path access %q: want read, write or execute", p.Access)
		}
	}
	for _, c := range n.Commands {
		if len(c) == 0 {
			return fail("empty argv")
		}
	}
	for _, h := range n.Hosts {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || !pattern.Digits(port) {
			return fail("host %q: want host:port", h)
		}
	}
	if n.MCP != nil && (n.MCP.Server == "" || n.MCP.Tool == "") {
		return fail("mcp needs server and tool")
	}
	return nil
}

// CheckText reports, as a *NormalizeError with reason
// ReasonInvalidEncoding, the first string of n that is not text: invalid
// UTF-8, or a NUL byte. Both engines must see the same bytes: the native
// one matches bytes, while OPA reads its input as JSON, where invalid
// UTF-8 becomes U+FFFD, and the native matcher joins argv words with NUL
// (pattern.ArgvSep), which a word must therefore not hold. No program
// takes a NUL in an argument, a path or a name either. The normalizer
// refuses such a request (docs/decisions.md), so no engine evaluates one.
func (n *Normalized) CheckText() error {
	if err := n.TextProblem(); err != nil {
		return err
	}
	return nil
}

// TextProblem is CheckText's check, as a *NormalizeError; the detail names the member by its
// JSON path ("commands[0][1]") and never repeats the value.
func (n *Normalized) TextProblem() *NormalizeError {
	for _, f := range [...]struct{ name, s string }{
		{"principal", n.Principal}, {"tenant", n.Tenant}, {"action", n.Action},
		{"workspace", n.Workspace}, {"time", n.Time},
	} {
		if err := textError(f.name, -1, -1, f.s); err != nil {
			return err
		}
	}
	for i, p := range n.Paths {
		if err := textError("paths[%d].path", i, -1, p.Path); err != nil {
			return err
		}
		if err := textError("paths[%d].access", i, -1, p.Access); err != nil {
			return err
		}
	}
	for i, c := range n.Commands {
		for j, t := range c {
			if err := textError("commands[%d][%d]", i, j, t); err != nil {
				return err
			}
		}
	}
	for _, l := range [...]struct {
		name string
		ss   []string
	}{{"hosts[%d]", n.Hosts}, {"env[%d]", n.Env}, {"secrets[%d]", n.Secrets}} {
		for i, s := range l.ss {
			if err := textError(l.name, i, -1, s); err != nil {
				return err
			}
		}
	}
	if m := n.MCP; m != nil {
		if err := textError("mcp.server", -1, -1, m.Server); err != nil {
			return err
		}
		if err := textError("mcp.tool", -1, -1, m.Tool); err != nil {
			return err
		}
		if m.Resource != nil {
			if err := textError("mcp.resource", -1, -1, *m.Resource); err != nil {
				return err
			}
		}
	}
	return nil
}

// textError is the invalid_encoding error for s, named by where (a format
// taking the indexes i and j that are not negative), or nil when s is
// text. It formats only on failure: it runs on every request.
func textError(where string, i, j int, s string) *NormalizeError {
	off, problem := badText(s)
	if problem == "" {
		return nil
	}
	switch {
	case j >= 0:
		where = fmt.Sprintf(where, i, j)
	case i >= 0:
		where = fmt.Sprintf(where, i)
	}
	return Errorf(ReasonInvalidEncoding, "%s: %s at byte %d", where, problem, off)
}

// badText returns the offset of the first byte of s that makes it no
// text, and what is wrong there ("" when s is text): a NUL byte, or a
// byte that begins no valid UTF-8 sequence (a stray continuation byte, a
// truncated or overlong sequence, an encoded surrogate, a code point above
// U+10FFFF). U+FFFD written as such is text.
func badText(s string) (int, string) {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c == 0 {
				return i, "NUL"
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return i, fmt.Sprintf("invalid UTF-8 (0x%02x)", c)
		}
		i += size
	}
	return 0, ""
}

// CheckArguments reports the first string of args, a member name or a
// value at any depth, that is not valid UTF-8, as an invalid_encoding
// error naming it by its path ("arguments.files[2]"). encoding/json would
// replace such bytes with U+FFFD, so the schema, the digest and the
// callable would each see another request than the one asked; the JSON
// text of a request never holds them (jcs refuses it). NUL is not
// refused here: a file's content may hold one. It returns nil for args
// of the JSON shapes without looking further than their strings; other
// Go values are walked by reflection, up to jcs.MaxDepth (deeper values
// have no canonical form and are refused as such).
func CheckArguments(args map[string]any) *NormalizeError {
	if textValue(args, 0) {
		return nil
	}
	// Walk again, in sorted order, for a report that names the same
	// member whatever the map order.
	path, off, c, ok := badValue(reflect.ValueOf(args), "arguments", 0)
	if ok {
		return nil
	}
	return Errorf(ReasonInvalidEncoding, "%s: invalid UTF-8 (0x%02x) at byte %d", path, c, off)
}

// textValue reports whether every string of v is valid UTF-8: the check
// of CheckArguments for every request, without a path or an allocation for
// JSON-shaped values.
func textValue(v any, depth int) bool {
	if depth > jcs.MaxDepth {
		return true // no canonical form: refused as such (or a cycle)
	}
	switch v := v.(type) {
	case nil, bool, json.Number, float64, int, int64:
		return true
	case string:
		return utf8.ValidString(v)
	case map[string]any:
		for k, e := range v {
			if !utf8.ValidString(k) || !textValue(e, depth+1) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range v {
			if !textValue(e, depth+1) {
				return false
			}
		}
		return true
	}
	_, _, _, ok := badValue(reflect.ValueOf(v), "", depth)
	return ok
}

// badValue is CheckArguments's walk: the path of the first string of v
// that is not UTF-8, the offset and value of its first bad byte, and
// ok=false; or ok=true.
func badValue(v reflect.Value, at string, depth int) (path string, off int, c byte, ok bool) {
	if depth > jcs.MaxDepth {
		return "", 0, 0, true
	}
	switch v.Kind() {
	case reflect.String:
		s := v.String()
		if utf8.ValidString(s) {
			return "", 0, 0, true
		}
		for i := 0; i < len(s); {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return at, i, s[i], false
			}
			i += size
		}
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			return badValue(v.Elem(), at, depth+1)
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return "", 0, 0, true // []byte: encoding/json writes base64
		}
		for i := range v.Len() {
			if path, off, c, ok := badValue(v.Index(i), fmt.Sprintf("%s[%d]", at, i), depth+1); !ok {
				return path, off, c, ok
			}
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range keys {
			name := fmt.Sprint(k)
			if k.Kind() == reflect.String {
				if path, off, c, ok := badValue(k, at+" (a member name)", depth+1); !ok {
					return path, off, c, ok
				}
			}
			if path, off, c, ok := badValue(v.MapIndex(k), at+"."+name, depth+1); !ok {
				return path, off, c, ok
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue
			}
			if path, off, c, ok := badValue(v.Field(i), at+"."+v.Type().Field(i).Name, depth+1); !ok {
				return path, off, c, ok
			}
		}
	}
	return "", 0, 0, true
}
