package executor

import (
	"bytes"
	"encoding/json"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"polc.dev/polc/internal/digest"
	"polc.dev/polc/normalize"
)

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
func (n *Normalizer) Normalize(req normalize.ActionRequest) (*normalize.Normalized, *normalize.NormalizeError) {
	return n.normalize(req, false)
}

// normalize is Normalize; jsonArgs says the arguments are already decoded
// JSON values (json.Number numbers), so validation needs no round trip.
func (n *Normalizer) normalize(req normalize.ActionRequest, jsonArgs bool) (*normalize.Normalized, *normalize.NormalizeError) {
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
	if err := normalize.CheckArguments(args); err != nil {
		return nil, err // before the schema's round trip replaces the bytes
	}
	mcpArgs, err := normalize.MCPShorthand(req.Action, args)
	if err != nil {
		return nil, err
	}
	if mcpArgs != nil {
		args, out.Action = mcpArgs, "mcp"
	}
	e := reg.lookup(out.Action)
	if e == nil {
		return nil, normalize.Errorf(normalize.ReasonUnknownAction, "no descriptor for action %q", req.Action)
	}
	if err := e.finish(out, args, jsonArgs); err != nil {
		return nil, err
	}
	// What the executor refuses at stage 2: arguments that validate but
	// have no canonical form (nesting deeper than jcs.MaxDepth).
	if _, err := digest.Checked("", args); err != nil {
		return nil, normalize.Errorf(normalize.ReasonInvalidRequest, "arguments have no canonical form: %v", err)
	}
	return out, nil
}

// start begins a normalized request: identity, time, usage and workspace.
func (n *Normalizer) start(req normalize.ActionRequest) (*normalize.Normalized, *normalize.NormalizeError) {
	out := new(normalize.Normalized)
	var at time.Time
	if req.Time == nil {
		at = time.Now()
		if n.Now != nil {
			at = n.Now()
		}
	}
	if err := normalize.StartInto(out, req.Action, req.Principal, req.Tenant, req.Workspace, req.Time, at); err != nil {
		return nil, err
	}
	if req.Usage != nil {
		out.Usage = *req.Usage
	}
	return out, nil
}

// finish completes out for the action e resolved: it validates args
// against e's schema and fills the facets e's hints name.
func (e *entry) finish(out *normalize.Normalized, args map[string]any, jsonArgs bool) *normalize.NormalizeError {
	out.Action = e.desc.ID
	if err := e.validate(args, jsonArgs); err != nil {
		return err
	}
	if err := e.desc.Hints.Facets(args, out.Workspace, out); err != nil {
		return err
	}
	// What the facets decoded ($'\xff' in a command is the byte 0xff)
	// and what the caller gave: no engine sees what is not text.
	return out.TextProblem()
}

// validate checks arguments against the descriptor's JSON Schema.
func (e *entry) validate(args map[string]any, jsonArgs bool) *normalize.NormalizeError {
	var v any = args
	if !jsonArgs {
		// The schema validator wants JSON values: round-trip through JSON
		// so that Go numbers and json.Number look alike.
		raw, err := json.Marshal(args)
		if err != nil {
			return normalize.Errorf(normalize.ReasonInvalidRequest, "arguments of %s: %v", e.desc.ID, err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var decoded any // its own variable: v stays off the heap
		if err := dec.Decode(&decoded); err != nil {
			return normalize.Errorf(normalize.ReasonInvalidRequest, "arguments of %s: %v", e.desc.ID, err)
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
		return normalize.Errorf(normalize.ReasonInvalidRequest, "arguments of %s: %s", e.desc.ID, msg)
	}
	return nil
}
