package normalize

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"polc.dev/polc/internal/digest"
)

// Normalizer turns action requests into normalized requests: the first
// step a runtime takes before deciding one (decision.Policy.Decide). A
// Normalizer is safe for concurrent use.
type Normalizer struct {
	// Now is the clock for requests without a time. Default time.Now.
	Now func() time.Time
	// Catalog resolves action ids; default a BuiltinCatalog().
	Catalog *Catalog
}

// Normalize validates req and computes its facets. It never panics; any
// input it cannot interpret is a *NormalizeError (a denial).
func (n *Normalizer) Normalize(req ActionRequest) (*Normalized, *NormalizeError) {
	cat := n.Catalog
	if cat == nil {
		cat = defaultCatalog()
	}
	out, err := n.start(req)
	if err != nil {
		return nil, err
	}
	args := req.Arguments
	if args == nil {
		args = map[string]any{} // absent arguments are none: an empty object
	}
	if err := CheckArguments(args); err != nil {
		return nil, err // before the schema's round trip replaces the bytes
	}
	mcpArgs, err := MCPShorthand(req.Action, args)
	if err != nil {
		return nil, err
	}
	if mcpArgs != nil {
		args, out.Action = mcpArgs, "mcp"
	}
	e := cat.Lookup(out.Action)
	if e == nil {
		return nil, Errorf(ReasonUnknownAction, "no descriptor for action %q", req.Action)
	}
	if err := e.Finish(out, args, false); err != nil {
		return nil, err
	}
	// What the executor refuses at stage 2: arguments that validate but
	// have no canonical form (nesting deeper than jcs.MaxDepth).
	if _, err := digest.Checked("", args); err != nil {
		return nil, Errorf(ReasonInvalidRequest, "arguments have no canonical form: %v", err)
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
	if err := StartInto(out, req.Action, req.Principal, req.Tenant, req.Workspace, req.Time, at); err != nil {
		return nil, err
	}
	if req.Usage != nil {
		out.Usage = *req.Usage
	}
	return out, nil
}

// Finish completes out for the action e: it validates args against e's
// schema and fills the facets e's hints name. out must have been started
// for the request (StartInto). jsonArgs says args are decoded JSON values
// (json.Number numbers, as a decoder with UseNumber leaves them), so
// validation needs no round trip through JSON.
func (e *Action) Finish(out *Normalized, args map[string]any, jsonArgs bool) *NormalizeError {
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
func (e *Action) validate(args map[string]any, jsonArgs bool) *NormalizeError {
	var v any = args
	if !jsonArgs {
		// The schema validator wants JSON values: round-trip through JSON
		// so that Go numbers and json.Number look alike.
		raw, err := json.Marshal(args)
		if err != nil {
			return Errorf(ReasonInvalidRequest, "arguments of %s: %v", e.desc.ID, err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var decoded any // its own variable: v stays off the heap
		if err := dec.Decode(&decoded); err != nil {
			return Errorf(ReasonInvalidRequest, "arguments of %s: %v", e.desc.ID, err)
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
		return Errorf(ReasonInvalidRequest, "arguments of %s: %s", e.desc.ID, msg)
	}
	return nil
}
