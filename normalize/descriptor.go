package normalize

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"polc.dev/polc/internal/jcs"
)

// ActionDescriptor identifies an action and says how to validate and
// normalize its arguments. It carries no behaviour: an executor registers
// the callable beside it (executor.Registry), and only the executor
// reaches it.
type ActionDescriptor struct {
	// ID is the canonical action id (an action id pattern literal).
	ID string `json:"id"`
	// Aliases resolve to ID; they may not collide with any id or alias.
	Aliases []string `json:"aliases"`
	// Version is the descriptor's version.
	Version string `json:"version"`
	// Source is the provenance of the implementation.
	Source Source `json:"source"`
	// Arguments is the JSON Schema (draft 2020-12) of the arguments object.
	Arguments json.RawMessage `json:"arguments"`
	// Hints say which arguments are paths, commands, URLs or MCP targets.
	Hints NormalizationHints `json:"hints"`
	// Containment lists the effect containment the backend must prove
	// before the action may run. Normalization does not read it; the
	// executor's Registry checks each class against the classes its
	// backends state (executor.ContainmentClasses).
	Containment []string `json:"containment"`
}

// Source is where an action's implementation comes from.
type Source struct {
	Kind   string `json:"kind"` // "builtin", "plugin", "mcp", "sdk"
	Ref    string `json:"ref"`
	Digest string `json:"digest"` // implementation digest, "" when unknown
}

// Digest is the sha256-v1 digest of the descriptor's canonical JSON.
func (d *ActionDescriptor) Digest() string {
	b, err := jcs.Marshal(d)
	if err != nil {
		return ""
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkHints checks d's hints against its argument schema and, for a
// built-in id, against the built-in's (see Catalog.Add).
func checkHints(d *ActionDescriptor) error {
	var sch struct {
		Type       any                        `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(d.Arguments, &sch); err != nil || sch.Type != "object" {
		return fmt.Errorf(`argument schema: want "type": "object" at its top level`)
	}
	arg := func(what, name string, required bool) error {
		if _, ok := sch.Properties[name]; !ok {
			return fmt.Errorf("hint %s names argument %q, which the schema's properties do not declare", what, name)
		}
		if required && !slices.Contains(sch.Required, name) {
			return fmt.Errorf("hint %s names argument %q, which the schema does not require (an absent argument would go unjudged)", what, name)
		}
		return nil
	}
	h := d.Hints
	for i, p := range h.Paths {
		if err := arg(fmt.Sprintf("paths[%d]", i), p.Arg, true); err != nil {
			return err
		}
		if len(p.Access) == 0 {
			return fmt.Errorf("hint paths[%d] (%s) has no access", i, p.Arg)
		}
		for _, a := range p.Access {
			if a != "read" && a != "write" && a != "execute" {
				return fmt.Errorf("hint paths[%d] (%s): access %q is not read, write or execute", i, p.Arg, a)
			}
		}
	}
	for _, c := range []struct{ what, name string }{{"command", h.Command}, {"url", h.URL}} {
		if c.name != "" {
			if err := arg(c.what, c.name, true); err != nil {
				return err
			}
		}
	}
	if m := h.MCP; m != nil {
		if err := arg("mcp.server", m.Server, true); err != nil {
			return err
		}
		if err := arg("mcp.tool", m.Tool, true); err != nil {
			return err
		}
		if m.Resource != "" {
			if err := arg("mcp.resource", m.Resource, false); err != nil {
				return err
			}
		}
	}
	for _, b := range builtinHints() {
		if b.id == d.ID && !hintsEqual(b.hints, h) {
			return fmt.Errorf("%s is a built-in action id: policies judge it by the built-in's hints (%s); register it with those, or use another id", d.ID, describeHints(b.hints))
		}
	}
	return nil
}

type idHints struct {
	id    string
	hints NormalizationHints
}

// builtinHints are the built-in descriptors' ids and hints.
var builtinHints = sync.OnceValue(func() []idHints {
	var out []idHints
	for _, d := range BuiltinDescriptors() {
		out = append(out, idHints{d.ID, d.Hints})
	}
	return out
})

func hintsEqual(a, b NormalizationHints) bool {
	if len(a.Paths) != len(b.Paths) || a.Command != b.Command || a.URL != b.URL || (a.MCP == nil) != (b.MCP == nil) {
		return false
	}
	for i := range a.Paths {
		if a.Paths[i].Arg != b.Paths[i].Arg || !slices.Equal(a.Paths[i].Access, b.Paths[i].Access) {
			return false
		}
	}
	return a.MCP == nil || *a.MCP == *b.MCP
}

func describeHints(h NormalizationHints) string {
	b, _ := json.Marshal(h)
	return string(b)
}

// Clone returns a deep copy of d: every slice, the schema bytes and the
// MCP hint are its own (nil stays nil, so the digest is unchanged).
func (d ActionDescriptor) Clone() ActionDescriptor { return cloneDescriptor(d) }

// cloneDescriptor returns a deep copy of d: every slice, the schema bytes
// and the MCP hint are its own (nil stays nil, so the digest is unchanged).
func cloneDescriptor(d ActionDescriptor) ActionDescriptor {
	d.Aliases = slices.Clone(d.Aliases)
	d.Containment = slices.Clone(d.Containment)
	d.Arguments = slices.Clone(d.Arguments)
	if d.Hints.Paths != nil {
		ps := make([]PathHint, len(d.Hints.Paths))
		for i, p := range d.Hints.Paths {
			ps[i] = PathHint{Arg: p.Arg, Access: slices.Clone(p.Access)}
		}
		d.Hints.Paths = ps
	}
	if d.Hints.MCP != nil {
		m := *d.Hints.MCP
		d.Hints.MCP = &m
	}
	return d
}

func validActionID(id string) error {
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("action id %q: only letters, digits, '_', '-' and '.'", id)
		}
	}
	return nil
}

func schemaOf(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	return json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{` + props + `},"required":` + string(req) + `}`)
}

// BuiltinDescriptors returns the descriptors of the built-in actions: bash,
// read_file, write_file, edit_file, http_get and mcp.
func BuiltinDescriptors() []ActionDescriptor {
	str := `{"type":"string"}`
	src := Source{Kind: "builtin", Ref: "polc.dev/polc/executor"}
	return []ActionDescriptor{
		{ID: "bash", Version: "1", Source: src, Arguments: schemaOf(`"command":`+str, "command"),
			Hints: NormalizationHints{Command: "command"}, Containment: []string{}},
		{ID: "read_file", Version: "1", Source: src, Arguments: schemaOf(`"path":`+str, "path"),
			Hints: NormalizationHints{Paths: []PathHint{{Arg: "path", Access: []string{"read"}}}}, Containment: []string{}},
		{ID: "write_file", Version: "1", Source: src, Arguments: schemaOf(`"path":`+str+`,"content":{"type":"string"}`, "path"),
			Hints: NormalizationHints{Paths: []PathHint{{Arg: "path", Access: []string{"write"}}}}, Containment: []string{}},
		{ID: "edit_file", Version: "1", Source: src, Arguments: schemaOf(`"path":`+str+`,"old":{"type":"string"},"new":{"type":"string"}`, "path"),
			Hints: NormalizationHints{Paths: []PathHint{{Arg: "path", Access: []string{"read", "write"}}}}, Containment: []string{}},
		{ID: "http_get", Version: "1", Source: src, Arguments: schemaOf(`"url":`+str, "url"),
			Hints: NormalizationHints{URL: "url"}, Containment: []string{}},
		{ID: "mcp", Version: "1", Source: src, Arguments: schemaOf(`"server":`+str+`,"tool":`+str+`,"resource":`+str+`,"arguments":{"type":"object"}`, "server", "tool"),
			Hints: NormalizationHints{MCP: &MCPHint{Server: "server", Tool: "tool", Resource: "resource"}}, Containment: []string{}},
	}
}
