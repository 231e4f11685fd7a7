package compiler

import (
	"slices"
	"strings"
	"time"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/snapshot"
)

// entry is one element of a resolved pattern set: where it was declared.
type entry struct {
	origins []snapshot.Origin
	pos     diag.Pos // first declaring position (for the source map)
}

func (e *entry) addOrigin(o snapshot.Origin) {
	i, found := slices.BinarySearchFunc(e.origins, o, compareOrigin)
	if !found {
		e.origins = slices.Insert(e.origins, i, o)
	}
}

func compareOrigin(a, b snapshot.Origin) int {
	if c := strings.Compare(a.Policy, b.Policy); c != 0 {
		return c
	}
	return strings.Compare(a.Field, b.Field)
}

func (e *entry) clone() *entry {
	return &entry{origins: slices.Clone(e.origins), pos: e.pos}
}

// set is a resolved pattern set.
type set map[string]*entry

func (s set) sorted() []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s set) clone() set {
	out := make(set, len(s))
	for k, e := range s {
		out[k] = e.clone()
	}
	return out
}

// put adds pattern p with origin o, merging origins of duplicates.
func (s set) put(p string, o snapshot.Origin, pos diag.Pos) {
	if e, ok := s[p]; ok {
		e.addOrigin(o)
		if e.pos.File == "" {
			e.pos = pos
		}
		return
	}
	s[p] = &entry{origins: []snapshot.Origin{o}, pos: pos}
}

// facet identifies a pattern set of the resolved model.
type facet int

const (
	fPrincipals facet = iota
	fTenants
	fActionAllow
	fActionDeny
	fFSRead
	fFSWrite
	fFSExecute
	fFSDeny
	fNetAllow
	fNetDeny
	fSubAllow
	fSubDeny
	fMCPTools
	fMCPResources
	fMCPDeny
	fEnvRead
	fEnvInject
	fEnvDeny
	numFacets
)

// facetSpec describes a pattern set: its declaration path (also the path
// used by expansions), its pattern grammar, and whether it is a deny set
// (unioned with the parent's, stored lowercase) or an allow set (narrowed).
type facetSpec struct {
	path string
	kind pattern.Kind
	deny bool
	// decl returns the author's list, nil when unset. Nil decl: the facet
	// is derived by custom code (network/subprocess modes, MCP servers).
	decl func(*PolicyDecl) *[]string
	// shadowedBy is the deny facet that can shadow this allow facet.
	shadowedBy facet
}

var facets = [numFacets]facetSpec{
	fPrincipals: {path: "principals", kind: pattern.Principal, decl: func(d *PolicyDecl) *[]string { return d.Principals }, shadowedBy: -1},
	fTenants:    {path: "tenants", kind: pattern.Principal, decl: func(d *PolicyDecl) *[]string { return d.Tenants }, shadowedBy: -1},
	fActionAllow: {path: "actions.allow", kind: pattern.Action, decl: func(d *PolicyDecl) *[]string {
		return when(d.Actions, func(a *ActionsDecl) *[]string { return a.Allow })
	}, shadowedBy: fActionDeny},
	fActionDeny: {path: "actions.deny", kind: "qualified", deny: true, decl: func(d *PolicyDecl) *[]string {
		return when(d.Actions, func(a *ActionsDecl) *[]string { return a.Deny })
	}},
	fFSRead:  {path: "filesystem.read", kind: pattern.Path, decl: func(d *PolicyDecl) *[]string { return when(d.Filesystem, func(f *FSDecl) *[]string { return f.Read }) }, shadowedBy: fFSDeny},
	fFSWrite: {path: "filesystem.write", kind: pattern.Path, decl: func(d *PolicyDecl) *[]string { return when(d.Filesystem, func(f *FSDecl) *[]string { return f.Write }) }, shadowedBy: fFSDeny},
	fFSExecute: {path: "filesystem.execute", kind: pattern.Path, decl: func(d *PolicyDecl) *[]string {
		return when(d.Filesystem, func(f *FSDecl) *[]string { return f.Execute })
	}, shadowedBy: fFSDeny},
	fFSDeny:       {path: "filesystem.deny", kind: pattern.Path, deny: true, decl: func(d *PolicyDecl) *[]string { return when(d.Filesystem, func(f *FSDecl) *[]string { return f.Deny }) }},
	fNetAllow:     {path: "network.allow", kind: pattern.Host, shadowedBy: fNetDeny},
	fNetDeny:      {path: "network.deny", kind: pattern.Host, deny: true, decl: func(d *PolicyDecl) *[]string { return when(d.Network, func(n *NetDecl) *[]string { return n.Deny }) }},
	fSubAllow:     {path: "subprocess.allow", kind: pattern.Command, shadowedBy: fSubDeny},
	fSubDeny:      {path: "subprocess.deny", kind: pattern.Command, deny: true, decl: func(d *PolicyDecl) *[]string { return when(d.Subprocess, func(s *SubDecl) *[]string { return s.Deny }) }},
	fMCPTools:     {path: "mcp.servers.tools", kind: pattern.MCP, shadowedBy: fMCPDeny},
	fMCPResources: {path: "mcp.servers.resources", kind: pattern.MCPResource, shadowedBy: -1},
	fMCPDeny:      {path: "mcp.deny", kind: pattern.MCP, deny: true, decl: func(d *PolicyDecl) *[]string { return when(d.MCP, func(m *MCPDecl) *[]string { return m.Deny }) }},
	fEnvRead: {path: "environment.read", kind: pattern.Env, decl: func(d *PolicyDecl) *[]string {
		return when(d.Environment, func(e *EnvDecl) *[]string { return e.Read })
	}, shadowedBy: fEnvDeny},
	fEnvInject: {path: "environment.inject", kind: pattern.Env, decl: func(d *PolicyDecl) *[]string {
		return when(d.Environment, func(e *EnvDecl) *[]string { return e.Inject })
	}, shadowedBy: fEnvDeny},
	fEnvDeny: {path: "environment.deny", kind: pattern.Env, deny: true, decl: func(d *PolicyDecl) *[]string {
		return when(d.Environment, func(e *EnvDecl) *[]string { return e.Deny })
	}},
}

func when[S any](s *S, f func(*S) *[]string) *[]string {
	if s == nil {
		return nil
	}
	return f(s)
}

// approval is a resolved approval requirement.
type approval struct {
	pattern      string  // lowercase, possibly qualified
	approver     *string // nil: nobody may approve
	expiresAfter *int64  // microseconds; nil iff approver is nil
	entry
}

func (a *approval) key() string {
	return snapshot.ExpectedRuleID(a.rule())
}

func (a *approval) rule() *snapshot.ApprovalRule {
	r := &snapshot.ApprovalRule{ApproverClass: a.approver, ExpiresAfterMicroseconds: a.expiresAfter}
	r.Effect = snapshot.EffectRequireApproval
	r.Action, r.TargetKind, r.Target = splitQualified(a.pattern)
	return r
}

// secret is a resolved secret exposure entry.
type secret struct {
	namespace string
	exposure  string
	entry
}

// exposureRank orders secret exposures from most to least restrictive.
var exposureRank = map[string]int{"forbid": 0, "reference_only": 1, "inject": 2}

// budget is a resolved budget limit.
type budget struct {
	limit int64
	entry
}

// gate is a resolved gate declaration.
type gate struct {
	id        string
	level     string
	selectors []string
	pos       diag.Pos
}

var levelRank = map[string]int{snapshot.LevelAdvisory: 0, snapshot.LevelSoft: 1, snapshot.LevelHard: 2}

// resolved is the semantic model of one policy after inheritance: every
// field explicit, no unset value. Lowering it gives the snapshot's rules and
// raising a snapshot gives it back (lower ∘ raise is the identity).
type resolved struct {
	name, version, uuid, description string

	sets [numFacets]set

	netMode, subMode string // "deny" | "allowlist" | "allow"
	netList, subList set    // the allowlists under mode "allowlist"
	shell            string // "forbid" | "allow"
	shellEntry       *entry

	approvals map[string]*approval // by rule id
	secrets   map[string]*secret   // by rule id
	budgets   map[string]*budget   // by budget kind
	window    *int64               // microseconds; nil: the policy's lifetime
	windowEnt *entry

	notBefore, expiresAt *time.Time
	expiryEntry          *entry

	gates    []gate
	gatesSet bool // gates were declared (here or by an ancestor)

	expansions []snapshot.Expansion
	lineage    []snapshot.Ancestor

	// shadowed are the allows the policy declares that a deny covers
	// (resolver.shadowed), judged once lowered (shadowedWarnings).
	shadowed []shadowedAllow
}

// shadowedAllow is an allow of a policy's own that deny patterns cover.
type shadowedAllow struct {
	facet        facet
	pattern      string
	allow        *entry
	denies       []*entry // the covering denies' entries, by pattern
	denyPatterns []string
}

// rootDefaults returns the most restrictive policy: what an unset field of
// a root policy resolves to (docs/policies.md).
func rootDefaults() *resolved {
	r := &resolved{
		netMode: "deny", subMode: "deny", shell: "forbid",
		netList: set{}, subList: set{},
		approvals: map[string]*approval{}, secrets: map[string]*secret{}, budgets: map[string]*budget{},
	}
	for i := range r.sets {
		r.sets[i] = set{}
	}
	return r
}

// inherit returns a child's starting point: a deep copy of the parent's
// rule-bearing state, without the parent's identity or expansions.
func (p *resolved) inherit() *resolved {
	r := &resolved{
		netMode: p.netMode, subMode: p.subMode, shell: p.shell,
		netList: p.netList.clone(), subList: p.subList.clone(),
		approvals: map[string]*approval{}, secrets: map[string]*secret{}, budgets: map[string]*budget{},
		window: p.window, notBefore: p.notBefore, expiresAt: p.expiresAt,
		gates: slices.Clone(p.gates), gatesSet: p.gatesSet,
	}
	if p.shellEntry != nil {
		r.shellEntry = p.shellEntry.clone()
	}
	if p.windowEnt != nil {
		r.windowEnt = p.windowEnt.clone()
	}
	if p.expiryEntry != nil {
		r.expiryEntry = p.expiryEntry.clone()
	}
	for i := range r.sets {
		r.sets[i] = p.sets[i].clone()
	}
	for k, a := range p.approvals {
		c := *a
		c.entry = *a.entry.clone()
		r.approvals[k] = &c
	}
	for k, s := range p.secrets {
		c := *s
		c.entry = *s.entry.clone()
		r.secrets[k] = &c
	}
	for k, b := range p.budgets {
		c := *b
		c.entry = *b.entry.clone()
		r.budgets[k] = &c
	}
	return r
}

// splitQualified splits "bash:git push *" into its action and target.
func splitQualified(p string) (action string, tk, target *string) {
	a, t, ok := strings.Cut(p, ":")
	if !ok {
		return a, nil, nil
	}
	kind := snapshot.TargetKindName(pattern.TargetKindOf(a))
	return a, &kind, &t
}
