package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/normalize"
)

// Callable is an action's implementation. The executor calls it at most
// once per attempt, at stage 12, with the final validated arguments. A
// Callable that cannot tell whether its external effect happened returns an
// error wrapping ErrAmbiguous.
//
// Its result should be a JSON value (Succeeded.ResultDigest binds its
// canonical form): a result without one (NaN, a chan) still succeeds, but
// its digest names the encoding error, not the result. Its error should
// carry an ErrorClass of the documented grammar ([a-z0-9_.], 1 to 64
// characters); any other error fails with the class "callable_error", and
// the error's text is kept nowhere.
type Callable func(ctx context.Context, args map[string]any) (any, error)

// ErrAmbiguous marks a callable error whose external effect is unknown (the
// transport died after sending): the outcome is Ambiguous and the attempt is
// never retried.
var ErrAmbiguous = fmt.Errorf("external result ambiguous")

// ActionDescriptor identifies an action and says how to validate and
// normalize its arguments. It carries no behaviour: the callable is
// registered beside it and is reachable only by the executor.
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
	Hints normalize.NormalizationHints `json:"hints"`
	// Containment lists the effect containment the backend must prove
	// before the action may run, each one of ContainmentClasses:
	// "filesystem", "network", "subprocess", "environment", "secrets".
	// Register refuses any other: a misspelt class is a requirement no
	// backend states, found only when every call is denied
	// (containment_unsupported).
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

// Registry is the ActionManager: it registers descriptors with their
// callables and resolves references to descriptors. It has no method that
// invokes anything; only the Executor reaches a callable, through a
// one-use token at stage 12.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]*entry
	aliases map[string]string
}

type entry struct {
	desc   ActionDescriptor
	schema *jsonschema.Schema
	digest string
	fn     Callable
	ref    string      // desc.ID + "@" + desc.Version, stage 1's trail detail
	fast   *fastSchema // the schema's fast form, or nil

	lastPlan atomic.Pointer[plan] // the plan of its last attempt (Executor.planFor)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{entries: map[string]*entry{}, aliases: map[string]string{}}
}

// BuiltinRegistry returns a registry of the built-in descriptors without
// callables: enough to normalize requests (polc eval, normalize, test).
// Executing one of its actions is denied (no_callable).
func BuiltinRegistry() *Registry {
	r := NewRegistry()
	for _, d := range BuiltinDescriptors() {
		if err := r.Register(d, nil); err != nil {
			panic("executor: built-in descriptor: " + err.Error())
		}
	}
	return r
}

// argsSchemaURL names a descriptor's argument schema inside its compiler:
// a fixed name, so that errors do not depend on the working directory.
const argsSchemaURL = "polc:///descriptor/arguments.json"

// Register adds an action. The id and aliases must be new (collisions are
// errors, a name given twice in one descriptor too), the id must be a
// valid action id, an alias must be non-empty and must not start with
// "mcp:" (the mcp shorthand), Arguments must be a JSON Schema for an
// object, self-contained (a $ref outside it is an error: nothing is loaded
// from files or the network), and the descriptor must have a canonical
// form (its digest). The registry keeps a deep copy of d. fn may be nil
// for descriptor-only registries.
//
// Hints decide which policy rules apply beyond the action rule: only an
// argument a hint names is judged as a path, command, URL or MCP target.
// So every argument a hint names must be a property of the schema's
// top-level "properties" that its "required" lists (the MCP resource may be
// optional): an absent or misspelt argument would leave the callable's
// default or the real argument unjudged. Path accesses are "read", "write"
// or "execute", at least one each. A built-in id (BuiltinDescriptors) must
// carry the built-in's hints, which policies assume. A descriptor without
// hints is judged by its action rules alone. Every Containment class must
// be one of ContainmentClasses.
func (r *Registry) Register(d ActionDescriptor, fn Callable) error {
	if d.ID == "" || d.Version == "" {
		return fmt.Errorf("register: descriptor needs an id and a version")
	}
	if err := validActionID(d.ID); err != nil {
		return fmt.Errorf("register %s: %v", d.ID, err)
	}
	// The registry keeps its own copy: a caller writing to what it passed
	// (or to what Resolve returned) must not change the hints, schema or
	// containment the executor applies under the digest computed below.
	d = cloneDescriptor(d)
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	// A schema is self-contained: descriptors may come from MCP servers,
	// and the library's default would follow a $ref into local files.
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("$ref to %s: argument schemas must be self-contained", u)
	}
	if len(d.Arguments) == 0 {
		return fmt.Errorf("register %s: no argument schema", d.ID)
	}
	if err := c.AddResource(argsSchemaURL, bytes.NewReader(d.Arguments)); err != nil {
		return fmt.Errorf("register %s: argument schema: %v", d.ID, err)
	}
	sch, err := c.Compile(argsSchemaURL)
	if err != nil {
		return fmt.Errorf("register %s: argument schema: %v", d.ID, err)
	}
	if err := checkHints(&d); err != nil {
		return fmt.Errorf("register %s: %v", d.ID, err)
	}
	for _, c := range d.Containment {
		if !slices.Contains(ContainmentClasses, c) {
			// Refused here, where the author sees it, rather than as
			// containment_unsupported on every call.
			return fmt.Errorf("register %s: containment %q is not one of %s", d.ID, c, strings.Join(ContainmentClasses, ", "))
		}
	}
	for i, a := range d.Aliases {
		switch {
		case a == "":
			return fmt.Errorf("register %s: empty alias", d.ID)
		case strings.HasPrefix(a, "mcp:"):
			// Execute and the normalizer read every "mcp:" reference as
			// the mcp shorthand: such an alias would resolve here to one
			// action and run another.
			return fmt.Errorf("register %s: alias %q: \"mcp:\" references name the mcp action", d.ID, a)
		case a == d.ID || slices.Contains(d.Aliases[:i], a):
			return fmt.Errorf("register %s: %q is named twice", d.ID, a)
		}
	}
	digest := d.Digest()
	if digest == "" {
		// No canonical form (a number beyond float64, a duplicate key,
		// invalid UTF-8 in the schema): the preflight report would bind
		// an empty descriptor digest.
		return fmt.Errorf("register %s: descriptor has no canonical JSON form (see the argument schema)", d.ID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range append([]string{d.ID}, d.Aliases...) {
		if _, ok := r.entries[name]; ok {
			return fmt.Errorf("register %s: %q is already an action id", d.ID, name)
		}
		if owner, ok := r.aliases[name]; ok {
			return fmt.Errorf("register %s: %q is already an alias of %s", d.ID, name, owner)
		}
	}
	e := &entry{desc: d, schema: sch, fn: fn, ref: d.ID + "@" + d.Version, fast: compileFastSchema(d.Arguments)}
	e.digest = digest
	r.entries[d.ID] = e
	for _, a := range d.Aliases {
		r.aliases[a] = d.ID
	}
	return nil
}

// checkHints checks d's hints against its argument schema and, for a
// built-in id, against the built-in's (see Register).
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
	hints normalize.NormalizationHints
}

// builtinHints are the built-in descriptors' ids and hints.
var builtinHints = sync.OnceValue(func() []idHints {
	var out []idHints
	for _, d := range BuiltinDescriptors() {
		out = append(out, idHints{d.ID, d.Hints})
	}
	return out
})

func hintsEqual(a, b normalize.NormalizationHints) bool {
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

func describeHints(h normalize.NormalizationHints) string {
	b, _ := json.Marshal(h)
	return string(b)
}

// Resolve returns a copy of the descriptor a reference (id or alias) names.
// The copy shares no memory with the registry.
func (r *Registry) Resolve(ref string) (ActionDescriptor, bool) {
	e := r.lookup(ref)
	if e == nil {
		return ActionDescriptor{}, false
	}
	return cloneDescriptor(e.desc), true
}

// cloneDescriptor returns a deep copy of d: every slice, the schema bytes
// and the MCP hint are its own (nil stays nil, so the digest is unchanged).
func cloneDescriptor(d ActionDescriptor) ActionDescriptor {
	d.Aliases = slices.Clone(d.Aliases)
	d.Containment = slices.Clone(d.Containment)
	d.Arguments = slices.Clone(d.Arguments)
	if d.Hints.Paths != nil {
		ps := make([]normalize.PathHint, len(d.Hints.Paths))
		for i, p := range d.Hints.Paths {
			ps[i] = normalize.PathHint{Arg: p.Arg, Access: slices.Clone(p.Access)}
		}
		d.Hints.Paths = ps
	}
	if d.Hints.MCP != nil {
		m := *d.Hints.MCP
		d.Hints.MCP = &m
	}
	return d
}

func (r *Registry) lookup(ref string) *entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if id, ok := r.aliases[ref]; ok {
		ref = id
	}
	return r.entries[ref]
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
			Hints: normalize.NormalizationHints{Command: "command"}, Containment: []string{}},
		{ID: "read_file", Version: "1", Source: src, Arguments: schemaOf(`"path":`+str, "path"),
			Hints: normalize.NormalizationHints{Paths: []normalize.PathHint{{Arg: "path", Access: []string{"read"}}}}, Containment: []string{}},
		{ID: "write_file", Version: "1", Source: src, Arguments: schemaOf(`"path":`+str+`,"content":{"type":"string"}`, "path"),
			Hints: normalize.NormalizationHints{Paths: []normalize.PathHint{{Arg: "path", Access: []string{"write"}}}}, Containment: []string{}},
		{ID: "edit_file", Version: "1", Source: src, Arguments: schemaOf(`"path":`+str+`,"old":{"type":"string"},"new":{"type":"string"}`, "path"),
			Hints: normalize.NormalizationHints{Paths: []normalize.PathHint{{Arg: "path", Access: []string{"read", "write"}}}}, Containment: []string{}},
		{ID: "http_get", Version: "1", Source: src, Arguments: schemaOf(`"url":`+str, "url"),
			Hints: normalize.NormalizationHints{URL: "url"}, Containment: []string{}},
		{ID: "mcp", Version: "1", Source: src, Arguments: schemaOf(`"server":`+str+`,"tool":`+str+`,"resource":`+str+`,"arguments":{"type":"object"}`, "server", "tool"),
			Hints: normalize.NormalizationHints{MCP: &normalize.MCPHint{Server: "server", Tool: "tool", Resource: "resource"}}, Containment: []string{}},
	}
}
