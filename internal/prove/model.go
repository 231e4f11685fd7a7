package prove

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"polc.dev/polc/decision"
	"polc.dev/polc/snapshot"
)

// role is what a matching rule does to the disposition (docs/decisions.md):
// a grant allows a value of its facet, a block denies (a deny rule, an
// approval at a hard gate or without approver), an escalator escalates (an
// approval at a soft gate with an approver class). Rules at advisory gates
// change no disposition.
type role int

const (
	roleNone role = iota
	roleGrant
	roleBlock
	roleEscalate
)

// atom is the kind of target value a request carries.
type atom int

const (
	atomNone atom = iota
	atomPath
	atomArgv
	atomHost
	atomEnv
	atomMCP
)

// rule is one compiled rule as the prover sees it.
type rule struct {
	id   string
	role role
	// facet is the decision facet a grant allows (decision.Facet*).
	facet int
	// onAction: the rule reads the action id (unqualified action rules);
	// otherwise it reads the target value of kind target.
	onAction bool
	target   atom
	// qualAction is the action of a qualified rule (lowercase): it reads
	// the target values of requests whose lowercased action is this.
	qualAction string
	// access is the access of a filesystem grant.
	access string
	// shell: a subprocess grant whose commands may use shell control.
	shell    bool
	approver *string
	m        matcher
	mi       *minfo
}

func (r *rule) info() *minfo {
	if r.mi == nil {
		r.mi = newInfo(r.m)
	}
	return r.mi
}

// Policy is a snapshot prepared for proving: every rule with its role and
// automaton, which facets must be granted, and the time and budget limits.
type Policy struct {
	Snap *snapshot.Snapshot
	// Engine, when set, is the OPA engine that decides this policy in
	// confirmation (a bundle of its own version); else the Prover's.
	Engine Engine
	// Declared ranks the rules the policy declares by where they are
	// written (rule id → rank): of rules that make each other redundant,
	// Lint keeps the first declared. Rules without a rank come after the
	// ranked ones, by id; nil ranks none.
	Declared map[string]int
	dec      *decision.Policy

	rules []*rule
	// need[f]: a value of facet f that no grant allows denies (its gate is
	// not advisory).
	need          [len(decision.FacetNames)]bool
	hasShellAllow bool
	scope, tscope []term
	window        *window
	budgets       []budget

	mu       sync.Mutex
	setsMemo map[string]*sets
	okMemo   map[string]cond
}

// window is an expiry rule's [notBefore, expiresAt) ("" = unbounded).
type window struct{ notBefore, expiresAt string }

type budget struct {
	kind  string
	limit int64
}

// NewPolicy prepares a valid snapshot.
func NewPolicy(s *snapshot.Snapshot) (*Policy, error) {
	dec, err := decision.Compile(s)
	if err != nil {
		return nil, err
	}
	ruleGate, facetGate, err := decision.GateTables(s)
	if err != nil {
		return nil, err
	}
	level := func(g int) string { return s.GateBindings[g].Level }
	p := &Policy{Snap: s, dec: dec}
	for f, name := range decision.FacetNames {
		p.need[f] = level(facetGate[name]) != snapshot.LevelAdvisory
	}
	for _, sc := range s.PrincipalScope {
		p.scope = append(p.scope, mt(matcher{kind: mPrincipal, pattern: sc}))
	}
	for _, sc := range s.TenantScope {
		p.tscope = append(p.tscope, mt(matcher{kind: mPrincipal, pattern: sc}))
	}
	for _, cr := range s.CompiledRules {
		id := cr.Base().RuleID
		lv := level(ruleGate[id])
		blocking := lv != snapshot.LevelAdvisory
		allow := cr.Base().Effect == snapshot.EffectAllow
		r := &rule{id: id}
		denyRole := roleNone
		if blocking {
			denyRole = roleBlock
		}
		switch c := cr.(type) {
		case *snapshot.ActionRule:
			if allow {
				r.role, r.facet, r.onAction = roleGrant, decision.FacetAction, true
				r.m = matcher{kind: mAction, pattern: c.Action}
				break
			}
			r.role = denyRole
			qualify(r, c.Action, c.TargetKind, c.Target)
		case *snapshot.ApprovalRule:
			switch {
			case lv == snapshot.LevelAdvisory:
				r.role = roleNone
			case lv == snapshot.LevelHard || c.ApproverClass == nil:
				r.role = roleBlock
			default:
				r.role = roleEscalate
			}
			r.approver = c.ApproverClass
			qualify(r, c.Action, c.TargetKind, c.Target)
		case *snapshot.FilesystemRule:
			r.target = atomPath
			if allow {
				r.role, r.access = roleGrant, c.Access
				r.facet = map[string]int{"read": decision.FacetPathRead, "write": decision.FacetPathWrite, "execute": decision.FacetPathExecute}[c.Access]
				r.m = matcher{kind: mPath, pattern: c.Pattern}
			} else {
				r.role = denyRole
				r.m = matcher{kind: mPath, pattern: c.Pattern, fold: true}
			}
		case *snapshot.NetworkRule:
			r.target = atomHost
			if allow {
				r.role, r.facet, r.m = roleGrant, decision.FacetHost, matcher{kind: mHost, pattern: c.Pattern}
			} else {
				r.role, r.m = denyRole, matcher{kind: mHost, pattern: c.Pattern, fold: true}
			}
		case *snapshot.SubprocessRule:
			r.target = atomArgv
			if allow {
				r.role, r.facet, r.m = roleGrant, decision.FacetCommand, matcher{kind: mCommand, pattern: c.Pattern}
				if c.Shell != nil && *c.Shell == "allow" {
					p.hasShellAllow = true
					sh := &rule{id: id, role: roleGrant, facet: decision.FacetShell, target: atomArgv, shell: true, m: r.m}
					p.rules = append(p.rules, sh)
				}
			} else {
				r.role, r.m = denyRole, matcher{kind: mCommand, pattern: c.Pattern, fold: true}
			}
		case *snapshot.MCPRule:
			r.target = atomMCP
			switch {
			case !allow:
				r.role, r.m = denyRole, matcher{kind: mMCPTool, pattern: c.Server + "/" + *c.Tool, fold: true}
			case c.Resource != nil:
				r.role, r.facet, r.m = roleGrant, decision.FacetMCPResource, matcher{kind: mMCPResource, pattern: c.Server + "/" + *c.Resource}
			default:
				r.role, r.facet, r.m = roleGrant, decision.FacetMCPTool, matcher{kind: mMCPTool, pattern: c.Server + "/" + *c.Tool}
			}
		case *snapshot.EnvironmentRule:
			r.target = atomEnv
			switch {
			case !allow:
				r.role, r.m = denyRole, matcher{kind: mEnv, pattern: c.Pattern, fold: true}
			case c.Exposure == "inject":
				r.role, r.facet, r.m = roleGrant, decision.FacetEnv, matcher{kind: mEnv, pattern: c.Pattern}
			default:
				r.role = roleNone // a read grant presents no facet
			}
		case *snapshot.SecretExposureRule:
			// No action presents a secret facet (docs/prove.md).
			r.role = roleNone
		case *snapshot.BudgetRule:
			r.role = roleNone
			p.budgets = append(p.budgets, budget{c.BudgetKind, c.Limit})
		case *snapshot.ExpiryRule:
			r.role = roleNone
			w := &window{}
			if c.NotBefore != nil {
				w.notBefore = *c.NotBefore
			}
			if c.ExpiresAt != nil {
				w.expiresAt = *c.ExpiresAt
			}
			p.window = w
		default:
			return nil, fmt.Errorf("prove: unknown rule type %T", cr)
		}
		if r.role != roleNone {
			p.rules = append(p.rules, r)
		}
	}
	return p, nil
}

// qualify sets the automaton of a deny or approval rule: on the action id
// when unqualified, else on the target values of its action, lowercased
// as the engines match these rules.
func qualify(r *rule, action string, tk, target *string) {
	if tk == nil {
		r.onAction = true
		r.m = matcher{kind: mAction, pattern: action, fold: true}
		return
	}
	r.qualAction = action
	switch *tk {
	case snapshot.TargetCommand:
		r.target, r.m = atomArgv, matcher{kind: mCommand, pattern: *target, fold: true}
	case snapshot.TargetPath:
		r.target, r.m = atomPath, matcher{kind: mPath, pattern: *target, fold: true}
	case snapshot.TargetHost:
		r.target, r.m = atomHost, matcher{kind: mHost, pattern: *target, fold: true}
	case snapshot.TargetMCP:
		r.target, r.m = atomMCP, matcher{kind: mMCPTool, pattern: *target, fold: true}
	}
}

// Name is the policy's name.
func (p *Policy) Name() string { return p.Snap.Name }

// facets lists the facets value i of a shape presents.
func (s shape) facets(i int) []int {
	var out []int
	switch s.atoms[i] {
	case atomPath:
		for _, a := range s.access {
			out = append(out, map[string]int{"read": decision.FacetPathRead, "write": decision.FacetPathWrite, "execute": decision.FacetPathExecute}[a])
		}
	case atomArgv:
		out = append(out, decision.FacetCommand)
		if s.shell {
			out = append(out, decision.FacetShell)
		}
	case atomHost:
		out = append(out, decision.FacetHost)
	case atomEnv:
		out = append(out, decision.FacetEnv)
	case atomMCP:
		out = append(out, decision.FacetMCPTool)
		if s.resource {
			out = append(out, decision.FacetMCPResource)
		}
	}
	return out
}

// reads reports whether r reads value i (or, for an action rule, the
// action) of a request of shape s, whose lowercased action is lower.
func (r *rule) reads(s shape, i int, lower string) bool {
	if r.target != s.atoms[i] {
		return false
	}
	if r.role == roleGrant && !slices.Contains(s.facets(i), r.facet) {
		return false // a grant of another facet (a write grant, a read value)
	}
	if r.qualAction != "" {
		return r.qualAction == lower
	}
	return true
}

// sets is what a policy's rules do to requests of one shape.
type sets struct {
	actionGrants, actionBlocks, actionEsc []*rule
	values                                []valueSets
	// shellDenied: the shape's shell control is not allowed (a shape
	// with shell and no argv, under a policy with no shell grant whose
	// shell facet is not advisory).
	shellDenied bool
}

// reads reports whether a rule of id is among the sets.
func (st *sets) reads(id string) bool {
	has := func(rs []*rule) bool { return slices.ContainsFunc(rs, func(r *rule) bool { return r.id == id }) }
	if has(st.actionGrants) || has(st.actionBlocks) || has(st.actionEsc) {
		return true
	}
	for _, v := range st.values {
		if has(v.blocks) || has(v.esc) {
			return true
		}
		for _, g := range v.grants {
			if has(g) {
				return true
			}
		}
	}
	return false
}

// valueSets is what a policy's rules do to one value of a shape.
type valueSets struct {
	grants      map[int][]*rule // by facet
	blocks, esc []*rule
}

func (p *Policy) sets(s shape) *sets {
	k := s.key()
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.setsMemo[k]; ok {
		return st
	}
	if p.setsMemo == nil {
		p.setsMemo = map[string]*sets{}
	}
	st := p.buildSets(s)
	p.setsMemo[k] = st
	return st
}

func (p *Policy) buildSets(s shape) *sets {
	lower := strings.ToLower(s.action())
	out := &sets{values: make([]valueSets, len(s.atoms))}
	for i := range out.values {
		out.values[i].grants = map[int][]*rule{}
	}
	for _, r := range p.rules {
		if r.onAction {
			switch r.role {
			case roleGrant:
				out.actionGrants = append(out.actionGrants, r)
			case roleBlock:
				out.actionBlocks = append(out.actionBlocks, r)
			case roleEscalate:
				out.actionEsc = append(out.actionEsc, r)
			}
			continue
		}
		for i := range s.atoms {
			if !r.reads(s, i, lower) {
				continue
			}
			v := &out.values[i]
			switch r.role {
			case roleGrant:
				if r.facet == decision.FacetShell && !s.shell {
					continue
				}
				v.grants[r.facet] = append(v.grants[r.facet], r)
			case roleBlock:
				v.blocks = append(v.blocks, r)
			case roleEscalate:
				v.esc = append(v.esc, r)
			}
		}
	}
	out.shellDenied = s.shell && !slices.Contains(s.atoms, atomArgv) && p.need[decision.FacetShell] && !p.hasShellAllow
	return out
}
