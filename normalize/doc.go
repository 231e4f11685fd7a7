// Package normalize turns a tool-action request into the normalized request
// that policies judge, or into a positioned refusal (*NormalizeError with a
// stable reason code): shell commands are parsed as bash reads them
// (shell.go, bash.go, shell_misread.go), paths are resolved against the
// workspace (path.go), URLs reduced to hosts (url.go) and MCP targets read
// (mcp.go). Action descriptors (descriptor.go: the JSON Schema of an
// action's arguments and the hints naming which arguments are paths,
// commands, URLs or MCP targets) live in a Catalog (catalog.go), the
// built-in actions' among them; a Normalizer (normalizer.go) resolves a
// request's action in one and fills the facets its hints name. It has no
// policy and runs nothing: package decision decides a Normalized request,
// and package executor adds callables to the descriptors (its Registry)
// and calls into this package at stage 2 of its action plan
// (docs/architecture.md).
//
// A runtime that decides requests without running them needs this package
// and package decision only:
//
//	n := &normalize.Normalizer{} // the built-in actions
//	req, nerr := n.Normalize(actionRequest)
//	if nerr != nil { /* denied before evaluation: nerr.Code */ }
//	d := policy.Decide(req) // policy from decision.Compile(snapshot)
package normalize
