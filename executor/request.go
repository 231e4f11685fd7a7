package executor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"path"
	"reflect"
	"slices"
	"strings"
	"time"

	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
)

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

// Normalized is the request the policy engines evaluate (DESIGN §4). Every
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
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("action request: %v", strictjson.Describe(err))
	}
	if dec.More() {
		return r, fmt.Errorf("action request: trailing data")
	}
	// encoding/json keeps the last of duplicate members (merging objects),
	// repairs invalid UTF-8 and accepts numbers with no canonical form;
	// I-JSON, which the request's digest is computed over, has none of these.
	if _, err := jcs.Transform(data); err != nil {
		return r, fmt.Errorf("action request: %v", err)
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
	// strictjson expects I-JSON (no duplicate members, valid UTF-8).
	if _, err := jcs.Transform(data); err != nil {
		return nil, fmt.Errorf("normalized request: %v", err)
	}
	if err := strictjson.Decode(data, &n); err != nil {
		return nil, fmt.Errorf("normalized request: %v", err)
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return &n, nil
}

// Validate checks the documented forms of a normalized request.
func (n *Normalized) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("normalized request: "+format, args...)
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
		for _, t := range c {
			if strings.ContainsRune(t, 0) {
				return fail("NUL in argv")
			}
		}
	}
	for _, h := range n.Hosts {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || !digits(port) {
			return fail("host %q: want host:port", h)
		}
	}
	if n.MCP != nil && (n.MCP.Server == "" || n.MCP.Tool == "") {
		return fail("mcp needs server and tool")
	}
	return nil
}
