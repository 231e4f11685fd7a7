package normalize

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Catalog resolves action references (ids and aliases) to compiled
// descriptors: what normalization needs to validate and read a request's
// arguments. It holds no callables; an executor's Registry builds on one.
// A Catalog is safe for concurrent use; Add may race with lookups.
type Catalog struct {
	mu      sync.RWMutex
	actions map[string]*Action
	aliases map[string]string
}

// Action is a descriptor compiled for normalization: its argument schema
// compiled, its digest computed. It is immutable once Add returns it.
type Action struct {
	desc   ActionDescriptor
	schema *jsonschema.Schema
	digest string
	ref    string      // desc.ID + "@" + desc.Version
	fast   *fastSchema // the schema's fast form, or nil
}

// ID is the action's canonical id.
func (a *Action) ID() string { return a.desc.ID }

// Ref is the action's id and version, "id@version".
func (a *Action) Ref() string { return a.ref }

// Digest is the sha256-v1 digest of the descriptor's canonical JSON.
func (a *Action) Digest() string { return a.digest }

// Descriptor returns a deep copy of the descriptor.
func (a *Action) Descriptor() ActionDescriptor { return cloneDescriptor(a.desc) }

// Containment is the descriptor's containment list. It is the action's
// own: callers must not modify it.
func (a *Action) Containment() []string { return a.desc.Containment }

// Hints are the descriptor's normalization hints. They are the action's
// own: callers must not modify them.
func (a *Action) Hints() *NormalizationHints { return &a.desc.Hints }

// NewCatalog returns an empty catalog.
func NewCatalog() *Catalog {
	return &Catalog{actions: map[string]*Action{}, aliases: map[string]string{}}
}

// BuiltinCatalog returns a new catalog of the built-in descriptors
// (BuiltinDescriptors).
func BuiltinCatalog() *Catalog {
	c := NewCatalog()
	for _, d := range BuiltinDescriptors() {
		if _, err := c.Add(d); err != nil {
			panic("normalize: built-in descriptor: " + err.Error())
		}
	}
	return c
}

// defaultCatalog is the built-in catalog of a Normalizer without one.
var defaultCatalog = sync.OnceValue(BuiltinCatalog)

// argsSchemaURL names a descriptor's argument schema inside its compiler:
// a fixed name, so that errors do not depend on the working directory.
const argsSchemaURL = "polc:///descriptor/arguments.json"

// Add compiles d and adds it. The id and aliases must be new (collisions
// are errors, a name given twice in one descriptor too), the id must be a
// valid action id, an alias must be non-empty and must not start with
// "mcp:" (the mcp shorthand), Arguments must be a JSON Schema for an
// object, self-contained (a $ref outside it is an error: nothing is loaded
// from files or the network), and the descriptor must have a canonical
// form (its digest). The catalog keeps a deep copy of d. Add does not
// read d.Containment: what a backend must prove is the executor's
// business (executor.Registry.Register checks it).
//
// Hints decide which policy rules apply beyond the action rule: only an
// argument a hint names is judged as a path, command, URL or MCP target.
// So every argument a hint names must be a property of the schema's
// top-level "properties" that its "required" lists (the MCP resource may be
// optional): an absent or misspelt argument would leave the callable's
// default or the real argument unjudged. Path accesses are "read", "write"
// or "execute", at least one each. A built-in id (BuiltinDescriptors) must
// carry the built-in's hints, which policies assume. A descriptor without
// hints is judged by its action rules alone.
func (c *Catalog) Add(d ActionDescriptor) (*Action, error) {
	a, err := compileAction(d)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range append([]string{a.desc.ID}, a.desc.Aliases...) {
		if _, ok := c.actions[name]; ok {
			return nil, fmt.Errorf("register %s: %q is already an action id", a.desc.ID, name)
		}
		if owner, ok := c.aliases[name]; ok {
			return nil, fmt.Errorf("register %s: %q is already an alias of %s", a.desc.ID, name, owner)
		}
	}
	c.actions[a.desc.ID] = a
	for _, alias := range a.desc.Aliases {
		c.aliases[alias] = a.desc.ID
	}
	return a, nil
}

// compileAction checks and compiles d (see Add) without adding it.
func compileAction(d ActionDescriptor) (*Action, error) {
	if d.ID == "" || d.Version == "" {
		return nil, fmt.Errorf("register: descriptor needs an id and a version")
	}
	if err := validActionID(d.ID); err != nil {
		return nil, fmt.Errorf("register %s: %v", d.ID, err)
	}
	// The catalog keeps its own copy: a caller writing to what it passed
	// (or to what Resolve returned) must not change the hints, schema or
	// containment applied under the digest computed below.
	d = cloneDescriptor(d)
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	// A schema is self-contained: descriptors may come from MCP servers,
	// and the library's default would follow a $ref into local files.
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("$ref to %s: argument schemas must be self-contained", u)
	}
	if len(d.Arguments) == 0 {
		return nil, fmt.Errorf("register %s: no argument schema", d.ID)
	}
	if err := c.AddResource(argsSchemaURL, bytes.NewReader(d.Arguments)); err != nil {
		return nil, fmt.Errorf("register %s: argument schema: %v", d.ID, err)
	}
	sch, err := c.Compile(argsSchemaURL)
	if err != nil {
		return nil, fmt.Errorf("register %s: argument schema: %v", d.ID, err)
	}
	if err := checkHints(&d); err != nil {
		return nil, fmt.Errorf("register %s: %v", d.ID, err)
	}
	for i, a := range d.Aliases {
		switch {
		case a == "":
			return nil, fmt.Errorf("register %s: empty alias", d.ID)
		case strings.HasPrefix(a, "mcp:"):
			// Execute and the normalizer read every "mcp:" reference as
			// the mcp shorthand: such an alias would resolve here to one
			// action and run another.
			return nil, fmt.Errorf("register %s: alias %q: \"mcp:\" references name the mcp action", d.ID, a)
		case a == d.ID || slices.Contains(d.Aliases[:i], a):
			return nil, fmt.Errorf("register %s: %q is named twice", d.ID, a)
		}
	}
	digest := d.Digest()
	if digest == "" {
		// No canonical form (a number beyond float64, a duplicate key,
		// invalid UTF-8 in the schema): the preflight report would bind
		// an empty descriptor digest.
		return nil, fmt.Errorf("register %s: descriptor has no canonical JSON form (see the argument schema)", d.ID)
	}
	return &Action{desc: d, schema: sch, digest: digest, ref: d.ID + "@" + d.Version, fast: compileFastSchema(d.Arguments)}, nil
}

// Lookup returns the action a reference (id or alias) names, or nil.
func (c *Catalog) Lookup(ref string) *Action {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if id, ok := c.aliases[ref]; ok {
		ref = id
	}
	return c.actions[ref]
}

// Actions returns the catalog's actions, sorted by id: what a server
// offering them as tools (polc mcp) lists.
func (c *Catalog) Actions() []*Action {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*Action, 0, len(c.actions))
	for _, a := range c.actions {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *Action) int { return strings.Compare(a.desc.ID, b.desc.ID) })
	return out
}

// Resolve returns a copy of the descriptor a reference (id or alias) names.
// The copy shares no memory with the catalog.
func (c *Catalog) Resolve(ref string) (ActionDescriptor, bool) {
	a := c.Lookup(ref)
	if a == nil {
		return ActionDescriptor{}, false
	}
	return cloneDescriptor(a.desc), true
}
