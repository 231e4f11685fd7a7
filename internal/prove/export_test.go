package prove

import (
	"fmt"
	"slices"
	"strings"

	"polc.dev/polc/normalize"
)

// Unmodelled lists what of a normalized request no shape models, "" for
// none: the completeness the prover's answers rest on (shape). For each
// reason a policy can have to decide the request as it does — none in
// particular (its principal, action, time…), one facet of one value, or
// shell control without a command — some shape must hold a request R'
// made of part of the request (a subset of its values, each with no more
// accesses than it has here, shell control only where it has it) that
// keeps that reason. Decisions are monotone in the facets, so R' is
// allowed when the request is, and denied or escalated for the reason
// kept: if no shape held one, a property could hold while the request
// violates it.
func Unmodelled(n *normalize.Normalized) []string {
	var out []string
	if len(n.Secrets) > 0 {
		out = append(out, "a secret (no shape presents one)")
	}
	accesses := map[string][]string{}
	var paths []string
	for _, pa := range n.Paths {
		if accesses[pa.Path] == nil {
			paths = append(paths, pa.Path)
		}
		accesses[pa.Path] = append(accesses[pa.Path], pa.Access)
	}
	// within: s's requests can be made of part of n, with the atom kept
	// (by keep) having the accesses acc.
	within := func(s shape, keep func(shape) bool, acc []string) bool {
		lower := strings.ToLower(n.Action)
		switch {
		case slices.Contains(builtins, n.Action):
			if s.builtin != n.Action {
				return false
			}
		case s.builtin != "":
			return false
		case slices.Contains(builtins, lower):
			if s.foldsTo != lower {
				return false
			}
		case s.foldsTo != "":
			return false
		}
		if s.shell && !n.ShellControl {
			return false
		}
		for _, a := range s.atoms {
			ok := false
			switch a {
			case atomPath:
				if acc != nil {
					ok = !slices.ContainsFunc(s.access, func(x string) bool { return !slices.Contains(acc, x) })
					break
				}
				for _, p := range paths {
					ok = ok || !slices.ContainsFunc(s.access, func(x string) bool { return !slices.Contains(accesses[p], x) })
				}
			case atomArgv:
				ok = len(n.Commands) > 0
			case atomHost:
				ok = len(n.Hosts) > 0
			case atomEnv:
				ok = len(n.Env) > 0
			case atomMCP:
				ok = n.MCP != nil && (!s.resource || n.MCP.Resource != nil)
			}
			if !ok {
				return false
			}
		}
		return keep(s)
	}
	need := func(what string, keep func(shape) bool, acc []string) {
		if !slices.ContainsFunc(shapes(), func(s shape) bool { return within(s, keep, acc) }) {
			out = append(out, what)
		}
	}
	has := func(a atom) func(shape) bool { return func(s shape) bool { return slices.Contains(s.atoms, a) } }
	need("the request itself", func(shape) bool { return true }, nil)
	for _, p := range paths {
		for _, a := range accesses[p] {
			need(fmt.Sprintf("path %s (%s)", p, a), func(s shape) bool { return has(atomPath)(s) && slices.Contains(s.access, a) }, accesses[p])
		}
	}
	if len(n.Commands) > 0 {
		need("a command", has(atomArgv), nil)
		if n.ShellControl {
			need("a command with shell control", func(s shape) bool { return has(atomArgv)(s) && s.shell }, nil)
		}
	} else if n.ShellControl {
		need("shell control without a command", func(s shape) bool { return s.shell && !has(atomArgv)(s) }, nil)
	}
	if len(n.Hosts) > 0 {
		need("a host", has(atomHost), nil)
	}
	if len(n.Env) > 0 {
		need("an environment name", has(atomEnv), nil)
	}
	if n.MCP != nil {
		need("an MCP tool", has(atomMCP), nil)
		if n.MCP.Resource != nil {
			need("an MCP resource", func(s shape) bool { return has(atomMCP)(s) && s.resource }, nil)
		}
	}
	return out
}
