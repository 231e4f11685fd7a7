// Package compiler turns PermissionPolicy declarations (CUE, JSON or YAML)
// into sealed, canonical policy snapshots.
//
// Compilation is a fixed table of stages, each of which can be dumped for
// debugging (polc compile --dump=STAGE):
//
//	load      read CUE packages and JSON/YAML files
//	validate  unify each policy with the embedded #PermissionPolicy schema
//	resolve   apply inheritance (docs/composition.md) in dependency order
//	lower     lower each resolved policy to compiled rules and gate bindings
//	emit      encode snapshots, source maps and the Rego bundle as files
//
// A stage that reports an error stops the pipeline: nothing is emitted.
package compiler

import (
	"fmt"
	"slices"
	"strings"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/snapshot"
)

// Stage names, in pipeline order.
var Stages = []string{"load", "validate", "resolve", "lower", "emit"}

// Result is the output of Compile.
type Result struct {
	// Snapshots are the compiled policies, sorted by name.
	Snapshots []*snapshot.Snapshot
	// SourceMaps holds each snapshot's source map, by policy name.
	SourceMaps map[string]*SourceMap
	// Files maps output paths (relative to the output directory, slash
	// separated) to their contents. Set by the emit stage.
	Files map[string][]byte
	// Tests are the declared decision tests.
	Tests []*TestCase
	// Properties are the declared properties (polc prove).
	Properties []*PropertyDecl
	// Harnesses are the declared HarnessSpecs (schema-checked only: the
	// harness package checks the rest, harness.Check).
	Harnesses []*Harness
	// Dumps holds the dump of each stage that ran, by stage name.
	Dumps map[string]any
	// Diagnostics are every error and warning, sorted.
	Diagnostics diag.List
}

// state is threaded through the stages.
type state struct {
	cfg      Config
	paths    []string
	decls    *Declarations
	order    []*Policy            // dependency order (parents first)
	resolved map[string]*resolved // by name
	auths    map[string]*expansionAuth
	parents  map[string]*snapshot.Snapshot // external parents by name
	lowered  map[string]*lowered
	// applied caches each lowered policy's checks (appliedChecks) for
	// its children.
	applied map[string]map[string]applied
	res     *Result
}

type stage struct {
	name string
	run  func(*state) diag.List
	dump func(*state) any
}

var stageTable = []stage{
	{"load", (*state).load, func(s *state) any { return s.decls.dumpLoad() }},
	{"validate", (*state).validate, func(s *state) any { return s.decls.dumpDecls() }},
	{"resolve", (*state).resolve, (*state).dumpResolved},
	{"lower", (*state).lower, func(s *state) any { return s.res.Snapshots }},
	{"emit", (*state).emit, func(s *state) any { return sortedKeys(s.res.Files) }},
}

// Compile runs every stage on the given paths. It always returns a Result;
// when Result.Diagnostics has errors, Snapshots and Files are empty.
func Compile(cfg Config, paths []string) *Result {
	return run(cfg, paths, len(stageTable))
}

// Vet runs the stages up to and including lower, reporting every finding
// without producing files.
func Vet(cfg Config, paths []string) *Result {
	return run(cfg, paths, len(stageTable)-1)
}

func run(cfg Config, paths []string, upTo int) *Result {
	cfg = cfg.withDefaults()
	s := &state{cfg: cfg, paths: paths, res: &Result{SourceMaps: map[string]*SourceMap{}, Files: map[string][]byte{}, Dumps: map[string]any{}}}
	for _, st := range stageTable[:upTo] {
		if cfg.Stage != nil {
			cfg.Stage(st.name)
		}
		d := st.run(s)
		s.res.Diagnostics = append(s.res.Diagnostics, d...)
		if d.HasErrors() {
			s.res.Snapshots, s.res.Files = nil, map[string][]byte{}
			break
		}
		s.res.Dumps[st.name] = st.dump(s)
	}
	s.res.Diagnostics = s.res.Diagnostics.Sorted()
	return s.res
}

func (s *state) load() diag.List {
	decls, diags := loadSources(s.cfg, s.paths)
	s.decls = decls
	if !diags.HasErrors() && len(decls.values) == 0 {
		diags.Add(diag.Pos{}, diag.CodeNoPolicies, "no declarations found in %s", strings.Join(s.paths, " "))
	}
	return diags
}

func (s *state) validate() diag.List {
	diags := s.decls.validate()
	s.res.Tests = s.decls.Tests
	s.res.Properties = s.decls.Properties
	s.res.Harnesses = s.decls.Harnesses
	if !diags.HasErrors() && len(s.decls.Policies) == 0 && len(s.decls.Harnesses) == 0 {
		diags.Add(diag.Pos{}, diag.CodeNoPolicies, "no policies declared (declare them under `policies: <name>: {...}` or `harnesses: <name>: {...}`)")
	}
	return diags
}

// resolve orders policies parents-first, reports cycles and missing parents,
// and resolves each policy against its parent.
func (s *state) resolve() diag.List {
	diags := s.identities()
	if diags.HasErrors() {
		return diags
	}
	const (
		unvisited = iota
		active
		done
		failed
	)
	color := map[string]int{}
	var stack []*Policy
	var visit func(p *Policy) bool
	visit = func(p *Policy) bool {
		switch color[p.Name] {
		case done:
			return true
		case failed:
			return false
		case active:
			i := slices.Index(stack, p)
			cycle := stack[i:]
			names := make([]string, 0, len(cycle)+1)
			for _, m := range cycle {
				names = append(names, m.Name)
			}
			names = append(names, p.Name)
			for _, m := range cycle {
				diags.Add(m.PosOf("extends"), diag.CodeExtendsCycle, "policy %q is part of an extends cycle: %s", m.Name, strings.Join(names, " → "))
				color[m.Name] = failed
			}
			return false
		}
		color[p.Name] = active
		stack = append(stack, p)
		ok := true
		if ext := p.Decl.Extends; ext != nil {
			if parent := s.decls.Lookup(*ext); parent != nil {
				ok = visit(parent)
			} else if _, ok2 := s.parents[*ext]; !ok2 {
				diags.Add(p.PosOf("extends"), diag.CodeExtendsMissing, "policy %q extends %q, which is neither in the compile set (%s) nor given with --parent", p.Name, *ext, s.decls.names())
				ok = false
			}
		}
		stack = stack[:len(stack)-1]
		if color[p.Name] == failed {
			return false
		}
		if !ok {
			color[p.Name] = failed
			return false
		}
		color[p.Name] = done
		s.order = append(s.order, p)
		return true
	}
	for _, p := range s.decls.Policies {
		visit(p)
	}
	if diags.HasErrors() {
		return diags
	}
	s.resolved, s.auths = map[string]*resolved{}, map[string]*expansionAuth{}
	for _, p := range s.order {
		var parent *resolved
		if ext := p.Decl.Extends; ext != nil {
			if r, ok := s.resolved[*ext]; ok {
				parent = inheritable(r)
			} else {
				parent = raise(s.parents[*ext], nil)
			}
		}
		r, auth, d := resolve(s.cfg, p, parent)
		diags = append(diags, d...)
		s.resolved[p.Name], s.auths[p.Name] = r, auth
	}
	diags = append(diags, s.emptyScopes()...)
	return diags
}

// emptyScopes warns (scope_empty) about each policy that allows actions
// but whose principals or tenants, after inheritance, are empty: an empty
// scope matches nobody (docs/policies.md), so the policy compiles and then
// denies every request, which an author who forgot the scope would not
// notice. A policy another policy of the compile set extends is left
// alone: a parent is often a template whose children set the scope.
func (s *state) emptyScopes() diag.List {
	var diags diag.List
	extended := map[string]bool{}
	for _, p := range s.decls.Policies {
		if ext := p.Decl.Extends; ext != nil {
			extended[*ext] = true
		}
	}
	for _, p := range s.order {
		r := s.resolved[p.Name]
		if extended[p.Name] || len(r.sets[fActionAllow]) == 0 {
			continue
		}
		var empty []string
		for _, f := range []facet{fPrincipals, fTenants} {
			if len(r.sets[f]) == 0 {
				empty = append(empty, facets[f].path)
			}
		}
		if len(empty) > 0 {
			diags.Warn(p.Pos, diag.CodeScopeEmpty, "policy %q allows actions but its %s empty (nobody): every request will be denied", p.Name, strings.Join(empty, " and ")+map[bool]string{true: " lists are", false: " list is"}[len(empty) > 1])
		}
	}
	return diags
}

// identities indexes the --parent snapshots by name and refuses a compile
// set in which two policies (declared or given with --parent) share a name
// or a policy_id, or a parent snapshot the format refuses. Everything that
// runs a policy by id (the executor's policy key, the budget ledger, the
// evidence records, the bundle's index from policy_id to name) must find
// exactly one policy; and of two parents of one name, one would be
// inherited silently.
func (s *state) identities() diag.List {
	var diags diag.List
	s.parents = map[string]*snapshot.Snapshot{}
	type holder struct {
		what string
		pos  diag.Pos
	}
	byID := map[string]holder{}
	for _, p := range s.decls.Policies {
		id := policyID(p)
		pos := p.Pos
		if p.Decl.UUID != nil {
			pos = p.PosOf("uuid")
		}
		if prev, dup := byID[id]; dup {
			diags.Add(prev.pos, diag.CodeDuplicatePolicy, "%s has policy_id %s, as policy %q (at %s) has: a policy_id names one policy", prev.what, id, p.Name, pos)
			diags.Add(pos, diag.CodeDuplicatePolicy, "policy %q has policy_id %s, as %s (at %s) has: a policy_id names one policy", p.Name, id, prev.what, prev.pos)
			continue
		}
		byID[id] = holder{fmt.Sprintf("policy %q", p.Name), pos}
	}
	for _, ps := range s.cfg.Parents {
		what := fmt.Sprintf("--parent snapshot %s@%s", ps.Name, ps.Version)
		if err := ps.Validate(); err != nil {
			diags.Add(diag.Pos{}, diag.CodeInvalidInput, "%s: %v", what, err)
			continue
		}
		if looksLikeUUID(ps.Name) {
			diags.Add(diag.Pos{}, diag.CodeInvalidValue, "%s: a policy name may not have the form of a UUID (policy ids have it)", what)
			continue
		}
		if d := s.decls.Lookup(ps.Name); d != nil {
			diags.Add(d.Pos, diag.CodeDuplicatePolicy, "policy %q is both declared and given as a --parent snapshot", ps.Name)
			continue
		}
		if prev, dup := s.parents[ps.Name]; dup {
			diags.Add(diag.Pos{}, diag.CodeDuplicatePolicy, "policy %q is given twice with --parent (%s@%s, digest %s, and %s@%s, digest %s): a child would inherit one of them silently", ps.Name, prev.Name, prev.Version, prev.Digest, ps.Name, ps.Version, ps.Digest)
			continue
		}
		if prev, dup := byID[ps.PolicyID]; dup {
			diags.Add(prev.pos, diag.CodeDuplicatePolicy, "%s has policy_id %s, as %s has: a policy_id names one policy", prev.what, ps.PolicyID, what)
			continue
		}
		s.parents[ps.Name] = ps
		byID[ps.PolicyID] = holder{what: what}
	}
	return diags
}

// inheritable returns what a child inherits from a parent in the compile
// set: the parent as its snapshot records it (raise ∘ lower), exactly what
// the child would inherit from that snapshot given with --parent. Without
// it, state the snapshot does not carry (an allowlist under mode "deny" or
// "allow", a shell setting or budget window with nothing to apply to) would
// be inherited from source and not from the snapshot, and the same child
// would compile to two digests.
func inheritable(r *resolved) *resolved {
	l, err := lower(r, nil)
	if err != nil {
		return r // reported when the parent itself is lowered
	}
	return raise(l.snap, l.positions)
}

// lower lowers each policy parents-first, checks that no gate weakens a
// parent's rule, and finishes expansion bookkeeping.
func (s *state) lower() diag.List {
	var diags diag.List
	s.lowered = map[string]*lowered{}
	for _, p := range s.order {
		r := s.resolved[p.Name]
		auth := s.auths[p.Name]
		var parent *snapshot.Snapshot
		if ext := p.Decl.Extends; ext != nil {
			if l, ok := s.lowered[*ext]; ok {
				parent = l.snap
			} else {
				parent = s.parents[*ext]
			}
		}
		if parent != nil {
			s.checkGates(p, r, parent, auth, &diags)
		}
		auth.check(&diags, p.Decl.Extends == nil)
		r.expansions = auth.recorded()
		l, err := lower(r, parent)
		if err != nil {
			diags.Add(p.Pos, diag.CodeInvalidValue, "policy %q: %v", p.Name, err)
			continue
		}
		diags = append(diags, shadowedWarnings(p.Name, r, l)...)
		for _, g := range l.snap.GateBindings {
			if len(g.RuleIDs) == 0 && g.GateID != defaultGate {
				diags.Warn(gateRulesPos(p, g.GateID), diag.CodeGateUnknownRule, "policy %q: gate %q selects no rule (selectors %s)", p.Name, g.GateID, strings.Join(g.Selectors, ", "))
			}
		}
		s.lowered[p.Name] = l
	}
	for _, p := range s.decls.Policies {
		if l, ok := s.lowered[p.Name]; ok {
			s.res.Snapshots = append(s.res.Snapshots, l.snap)
			s.res.SourceMaps[p.Name] = newSourceMap(p, l)
		}
	}
	return diags
}

// gateRulesPos is where a gate's selectors are written: the `rules` of the
// policy's own entry for it. A policy that declares no gates inherits them
// all, so the field that brings the gate in is `extends`.
func gateRulesPos(p *Policy, id string) diag.Pos {
	if p.Decl.Gates == nil {
		return p.PosOf("extends")
	}
	for i, g := range *p.Decl.Gates {
		if g.ID == id {
			return p.PosOf(fmt.Sprintf("gates[%d].rules", i))
		}
	}
	return p.PosOf("gates")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
