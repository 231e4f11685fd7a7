package prove

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"polc.dev/polc/internal/pattern"
)

// RequestPattern describes a set of requests (docs/prove.md): every field
// given must match, as an allow pattern matches (case-sensitively), and at
// most one names a target value — a qualified action or one facet field.
// A request matches a facet field when one of its values of that facet
// matches (a path of the access named, any access for Path).
type RequestPattern struct {
	Principal   string `json:"principal,omitempty"`
	Tenant      string `json:"tenant,omitempty"`
	Action      string `json:"action,omitempty"`
	Read        string `json:"read,omitempty"`
	Write       string `json:"write,omitempty"`
	Execute     string `json:"execute,omitempty"`
	Path        string `json:"path,omitempty"`
	Command     string `json:"command,omitempty"`
	Host        string `json:"host,omitempty"`
	Env         string `json:"env,omitempty"`
	MCPTool     string `json:"mcp_tool,omitempty"`
	MCPResource string `json:"mcp_resource,omitempty"`
}

// facetFields are the target fields of a request pattern, in the order
// they are reported, with their grammars.
var facetFields = []struct {
	name string
	kind pattern.Kind
	get  func(*RequestPattern) *string
}{
	{"read", pattern.Path, func(r *RequestPattern) *string { return &r.Read }},
	{"write", pattern.Path, func(r *RequestPattern) *string { return &r.Write }},
	{"execute", pattern.Path, func(r *RequestPattern) *string { return &r.Execute }},
	{"path", pattern.Path, func(r *RequestPattern) *string { return &r.Path }},
	{"command", pattern.Command, func(r *RequestPattern) *string { return &r.Command }},
	{"host", pattern.Host, func(r *RequestPattern) *string { return &r.Host }},
	{"env", pattern.Env, func(r *RequestPattern) *string { return &r.Env }},
	{"mcp_tool", pattern.MCP, func(r *RequestPattern) *string { return &r.MCPTool }},
	{"mcp_resource", pattern.MCPResource, func(r *RequestPattern) *string { return &r.MCPResource }},
}

// ParseRequestPattern reads the string form of a request pattern: an
// action id glob ("deploy*"), a qualified action ("bash:git push *"), or a
// facet and its pattern ("write:secrets/**", "host:*.example.com").
func ParseRequestPattern(s string) (RequestPattern, error) {
	var rp RequestPattern
	if s == "" {
		return rp, errors.New("empty pattern")
	}
	if head, rest, ok := strings.Cut(s, ":"); ok {
		for _, f := range facetFields {
			if f.name == head {
				*f.get(&rp) = rest
				return rp, rp.Validate()
			}
		}
	}
	rp.Action = s
	return rp, rp.Validate()
}

// FieldError is a problem with one field of a request pattern.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %v", e.Field, e.Err) }

// Unwrap returns the grammar's error.
func (e *FieldError) Unwrap() error { return e.Err }

// Validate checks every field against its grammar and that at most one
// names a target.
func (rp *RequestPattern) Validate() error {
	for _, f := range []struct {
		name, v string
	}{{"principal", rp.Principal}, {"tenant", rp.Tenant}} {
		if f.v != "" {
			if err := pattern.Validate(pattern.Principal, f.v); err != nil {
				return &FieldError{f.name, err}
			}
		}
	}
	targets := []string{}
	if rp.Action != "" {
		_, tk, _, err := pattern.ValidateQualified(rp.Action)
		if err != nil {
			return &FieldError{"action", err}
		}
		if tk != "" {
			targets = append(targets, "action")
		}
	}
	for _, f := range facetFields {
		v := *f.get(rp)
		if v == "" {
			continue
		}
		if err := pattern.Validate(f.kind, v); err != nil {
			return &FieldError{f.name, err}
		}
		targets = append(targets, f.name)
	}
	if len(targets) > 1 {
		return &FieldError{targets[1], fmt.Errorf("a request pattern names at most one target value (here %s): one value decides, see docs/prove.md", strings.Join(targets, " and "))}
	}
	return nil
}

// String is the pattern in its shortest form.
func (rp RequestPattern) String() string {
	var parts []string
	if rp.Action != "" {
		parts = append(parts, rp.Action)
	}
	for _, f := range facetFields {
		if v := *f.get(&rp); v != "" {
			parts = append(parts, f.name+":"+v)
		}
	}
	if rp.Principal != "" {
		parts = append(parts, "principal "+rp.Principal)
	}
	if rp.Tenant != "" {
		parts = append(parts, "tenant "+rp.Tenant)
	}
	if len(parts) == 0 {
		return "any request"
	}
	return strings.Join(parts, ", ")
}

// cond is the condition a request of shape s meets when it matches rp;
// ok=false when no request of the shape can.
func (rp RequestPattern) cond(s shape) (cond, bool) {
	var c cond
	if rp.Principal != "" {
		c.principal.require = [][]term{{mt(matcher{kind: mPrincipal, pattern: rp.Principal})}}
	}
	if rp.Tenant != "" {
		c.tenant.require = [][]term{{mt(matcher{kind: mPrincipal, pattern: rp.Tenant})}}
	}
	facet, target := "", ""
	if rp.Action != "" {
		action, tk, t, _ := pattern.ValidateQualified(rp.Action)
		if tk == "" {
			c.action.require = [][]term{{mt(matcher{kind: mAction, pattern: action})}}
		} else {
			c.action.require = [][]term{{nt(lit(action))}}
			target = t
			facet = map[pattern.Kind]string{pattern.Command: "command", pattern.Path: "path", pattern.Host: "host", pattern.MCP: "mcp_tool"}[tk]
		}
	}
	for _, f := range facetFields {
		if v := *f.get(&rp); v != "" {
			facet, target = f.name, v
		}
	}
	var m matcher
	want := atomNone
	switch facet {
	case "":
		return c, true
	case "read", "write", "execute", "path":
		want, m = atomPath, matcher{kind: mPath, pattern: target}
		if facet != "path" && !contains(s.access, facet) {
			return c, false
		}
	case "command":
		want, m = atomArgv, matcher{kind: mCommand, pattern: target}
	case "host":
		want, m = atomHost, matcher{kind: mHost, pattern: target}
	case "env":
		want, m = atomEnv, matcher{kind: mEnv, pattern: target}
	case "mcp_tool":
		want, m = atomMCP, matcher{kind: mMCPTool, pattern: target}
	case "mcp_resource":
		want, m = atomMCP, matcher{kind: mMCPResource, pattern: target}
		if !s.resource {
			return c, false
		}
	}
	i := slices.Index(s.atoms, want)
	if i < 0 {
		return c, false
	}
	return c.and(onValue(i, part{require: [][]term{{mt(m)}}})), true
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
