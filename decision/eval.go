package decision

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"polc.dev/polc/snapshot"
)

// Dispositions.
const (
	Allow    = "allow"
	Deny     = "deny"
	Escalate = "escalate"
)

// Decision is the result of evaluating a normalized request against a
// policy (docs/decisions.md).
type Decision struct {
	Disposition   string       `json:"disposition"`
	RuleIDs       []string     `json:"rule_ids"`
	Reasons       []string     `json:"reasons"`
	Gates         []GateResult `json:"gates"`
	ApproverClass *string      `json:"approver_class"`
}

// GateResult is one gate's view of a request.
type GateResult struct {
	GateID     string   `json:"gate_id"`
	Level      string   `json:"level"`
	Decision   string   `json:"decision"`
	ReasonCode string   `json:"reason_code"`
	RuleIDs    []string `json:"rule_ids"`
}

// Diagnostics reports problems met while evaluating that did not stop it.
// Evaluation never fails: problems deny.
type Diagnostics struct {
	Errors []string `json:"errors"`
}

// Facets of a request that must be allowed (step 2 of the evaluation).
const (
	FacetPrincipal = iota
	FacetTenant
	FacetAction
	FacetCommand
	FacetShell
	FacetPathRead
	FacetPathWrite
	FacetPathExecute
	FacetHost
	FacetEnv
	FacetSecret
	FacetMCPTool
	FacetMCPResource
	FacetExpiry
	FacetBudget
	numFacets
)

// FacetNames are the names used in "not_allowed:<facet>" reasons.
var FacetNames = [numFacets]string{
	"principal", "tenant", "action", "command", "shell", "path_read", "path_write",
	"path_execute", "host", "env", "secret", "mcp_tool", "mcp_resource", "expiry", "budget",
}

// facetOrder lists facets in the order of their names, so that "the first
// facet" is the same in both engines.
var facetOrder = func() []int {
	order := make([]int, numFacets)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(FacetNames[a], FacetNames[b]) })
	return order
}()

// qualSet indexes action patterns that may be qualified with a target, as in
// action.deny and approval rules.
type qualSet struct {
	unq     globSet
	cmd     map[string]*cmdTrie
	path    map[string]*pathSet
	host    map[string]*hostSet
	mcp     map[string]*segTrie
	actions []string // qualified action names, for unknown-action checks
}

func (q *qualSet) add(action string, tk *string, target *string, id int32) {
	if tk == nil {
		q.unq.add(action, id)
		return
	}
	q.actions = append(q.actions, action)
	switch *tk {
	case snapshot.TargetCommand:
		if q.cmd == nil {
			q.cmd = map[string]*cmdTrie{}
		}
		if q.cmd[action] == nil {
			q.cmd[action] = &cmdTrie{}
		}
		q.cmd[action].add(*target, id)
	case snapshot.TargetPath:
		if q.path == nil {
			q.path = map[string]*pathSet{}
		}
		if q.path[action] == nil {
			q.path[action] = &pathSet{}
		}
		q.path[action].add(*target, id)
	case snapshot.TargetHost:
		if q.host == nil {
			q.host = map[string]*hostSet{}
		}
		if q.host[action] == nil {
			q.host[action] = &hostSet{}
		}
		q.host[action].add(*target, id)
	case snapshot.TargetMCP:
		if q.mcp == nil {
			q.mcp = map[string]*segTrie{}
		}
		if q.mcp[action] == nil {
			q.mcp[action] = &segTrie{dstarFrom: noDStar} // pattern.MCP
		}
		q.mcp[action].add(*target, id)
	}
}

// match matches a request (with action already lowercased) against the
// set; lowered values are computed by the caller once.
func (q *qualSet) match(r *lowered, hits bits) {
	q.unq.match(r.action, hits)
	if t := q.cmd[r.action]; t != nil {
		for _, argv := range r.cmds {
			t.match(argv, true, hits)
		}
	}
	if ps := q.path[r.action]; ps != nil {
		for _, p := range r.paths {
			ps.match(p, r.ws, hits)
		}
	}
	if hs := q.host[r.action]; hs != nil {
		for _, h := range r.hosts {
			hs.match(h, hits)
		}
	}
	if t := q.mcp[r.action]; t != nil && r.mcp != "" {
		t.match(r.mcp, hits)
	}
}

// lowered holds the lowercased request values deny and approval rules see.
type lowered struct {
	// cmds is the request's argv list (commands are matched as given).
	// The slice, not the request: a pointer to the request kept in the
	// pooled scratch would move every request evaluated to the heap.
	cmds   [][]string
	action string
	ws     string
	paths  []string
	hosts  []string
	env    []string
	secret []string
	mcp    string
}

// Policy is a snapshot compiled for evaluation. It is immutable and safe
// for concurrent use; Evaluate allocates, EvaluateInto does not once its
// Scratch is warm.
type Policy struct {
	Snapshot *snapshot.Snapshot
	scratch  sync.Pool

	ruleIDs     []string
	ruleGate    []int
	gates       []snapshot.GateBinding
	defaultIdx  int
	facetGate   [numFacets]int
	deniedMsg   []string // "denied:<rule id>"
	unavailMsg  []string // "approval_unavailable:<rule id>"
	approvalReq []string // "approval_required:<class>"
	advisoryMsg []string // "advisory:<gate id>"
	approver    []*string
	kind        []snapshot.Kind

	principals, tenants globSet

	actionAllow        globSet
	deny, approval     qualSet
	fsAllow            [3]pathSet
	fsDeny             pathSet
	netAllow, netDeny  hostSet
	subAllow, subShell cmdTrie
	subDeny            cmdTrie
	mcpTool, mcpRes    segTrie
	mcpDeny            segTrie
	envAllow, envDeny  globSet
	secretAllow        segTrie
	secretForbid       segTrie
	hasShellAllow      bool
	budgets            []budgetRule
	expiry             *expiryRule
}

type budgetRule struct {
	id    int32
	kind  string
	limit int64
}

type expiryRule struct {
	id                   int32
	notBefore, expiresAt string
}

var accessIndex = map[string]int{"read": 0, "write": 1, "execute": 2}

// Compile indexes a snapshot for evaluation. Precondition: s is valid (as
// returned by snapshot.Parse or produced by the compiler).
func Compile(s *snapshot.Snapshot) (*Policy, error) {
	p := &Policy{Snapshot: s, defaultIdx: -1}
	// The grammars of pattern.Match: "**" is a whole-segment wildcard in
	// paths, secret namespaces and an MCP resource past its server; not in
	// MCP tools.
	p.mcpTool.dstarFrom, p.mcpDeny.dstarFrom = noDStar, noDStar
	p.mcpRes.dstarFrom = 1
	n := len(s.CompiledRules)
	p.ruleIDs = make([]string, n)
	p.ruleGate = make([]int, n)
	p.deniedMsg = make([]string, n)
	p.unavailMsg = make([]string, n)
	p.approver = make([]*string, n)
	p.kind = make([]snapshot.Kind, n)
	byID := map[string]int32{}
	for i, r := range s.CompiledRules {
		id := r.Base().RuleID
		p.ruleIDs[i] = id
		p.deniedMsg[i] = "denied:" + id
		p.unavailMsg[i] = "approval_unavailable:" + id
		p.kind[i] = r.Kind()
		byID[id] = int32(i)
	}
	p.approvalReq = make([]string, n)
	for i, r := range s.CompiledRules {
		if a, ok := r.(*snapshot.ApprovalRule); ok && a.ApproverClass != nil {
			p.approvalReq[i] = "approval_required:" + *a.ApproverClass
		}
	}
	p.gates = s.GateBindings
	for _, g := range s.GateBindings {
		p.advisoryMsg = append(p.advisoryMsg, "advisory:"+g.GateID)
	}
	for gi, g := range s.GateBindings {
		if g.GateID == "polc.default" {
			p.defaultIdx = gi
		}
		for _, id := range g.RuleIDs {
			i, ok := byID[id]
			if !ok {
				return nil, fmt.Errorf("gate %s binds unknown rule %q", g.GateID, id)
			}
			p.ruleGate[i] = gi
		}
	}
	if p.defaultIdx < 0 {
		return nil, fmt.Errorf("snapshot %s has no polc.default gate", s.Name)
	}
	for _, sc := range s.PrincipalScope {
		p.principals.add(sc, -1)
	}
	for _, sc := range s.TenantScope {
		p.tenants.add(sc, -1)
	}
	var facetRules [numFacets][]int32
	for i, r := range s.CompiledRules {
		for _, f := range facetsOf(r) {
			facetRules[f] = append(facetRules[f], int32(i))
		}
	}
	for i, r := range s.CompiledRules {
		id := int32(i)
		allow := r.Base().Effect == snapshot.EffectAllow
		switch r := r.(type) {
		case *snapshot.ActionRule:
			if allow {
				p.actionAllow.add(r.Action, id)
			} else {
				p.deny.add(r.Action, r.TargetKind, r.Target, id)
			}
		case *snapshot.ApprovalRule:
			p.approval.add(r.Action, r.TargetKind, r.Target, id)
			p.approver[i] = r.ApproverClass
		case *snapshot.FilesystemRule:
			if allow {
				a := accessIndex[r.Access]
				p.fsAllow[a].add(r.Pattern, id)
			} else {
				p.fsDeny.add(r.Pattern, id)
			}
		case *snapshot.NetworkRule:
			if allow {
				p.netAllow.add(r.Pattern, id)
			} else {
				p.netDeny.add(r.Pattern, id)
			}
		case *snapshot.SubprocessRule:
			if allow {
				p.subAllow.add(r.Pattern, id)
				if *r.Shell == "allow" {
					p.subShell.add(r.Pattern, id)
					p.hasShellAllow = true
				}
			} else {
				p.subDeny.add(r.Pattern, id)
			}
		case *snapshot.MCPRule:
			switch {
			case !allow:
				p.mcpDeny.add(r.Server+"/"+*r.Tool, id)
			case r.Resource != nil:
				p.mcpRes.add(r.Server+"/"+*r.Resource, id)
			default:
				p.mcpTool.add(r.Server+"/"+*r.Tool, id)
			}
		case *snapshot.EnvironmentRule:
			switch {
			case !allow:
				p.envDeny.add(r.Pattern, id)
			case r.Exposure == "inject":
				// The env facet holds the names a command assigns: only
				// inject grants setting one. A read grant of PATH let a
				// command set PATH and run a program no rule judged.
				p.envAllow.add(r.Pattern, id)
			}
		case *snapshot.SecretExposureRule:
			if allow {
				p.secretAllow.add(r.Namespace, id)
			} else {
				p.secretForbid.add(r.Namespace, id)
			}
		case *snapshot.BudgetRule:
			p.budgets = append(p.budgets, budgetRule{id, r.BudgetKind, r.Limit})
		case *snapshot.ExpiryRule:
			e := &expiryRule{id: id}
			if r.NotBefore != nil {
				e.notBefore = *r.NotBefore
			}
			if r.ExpiresAt != nil {
				e.expiresAt = *r.ExpiresAt
			}
			p.expiry = e
		}
	}
	for f := range numFacets {
		p.facetGate[f] = FacetGate(s.GateBindings, p.defaultIdx, facetRules[f], p.ruleGate)
	}
	return p, nil
}

// FacetGate returns the gate a not-allowed facet belongs to: the strictest
// gate holding one of its allow rules (the first such gate on ties), or the
// default gate when it has none.
func FacetGate(gates []snapshot.GateBinding, defaultIdx int, rules []int32, ruleGate []int) int {
	best := -1
	for _, id := range rules {
		g := ruleGate[id]
		if best < 0 || levelRank(gates[g].Level) > levelRank(gates[best].Level) ||
			(levelRank(gates[g].Level) == levelRank(gates[best].Level) && g < best) {
			best = g
		}
	}
	if best < 0 {
		return defaultIdx
	}
	return best
}

func levelRank(level string) int {
	switch level {
	case snapshot.LevelHard:
		return 2
	case snapshot.LevelSoft:
		return 1
	}
	return 0
}

// FacetsOf lists the facets whose "not allowed" check takes its gate from
// r's (FacetGate): the facets an allow rule grants, budget for a budget
// rule, none for other rules.
func FacetsOf(r snapshot.Rule) []int { return facetsOf(r) }

// facetsOf lists the facets an allow rule grants (none for other rules).
func facetsOf(r snapshot.Rule) []int {
	if _, ok := r.(*snapshot.BudgetRule); ok {
		return []int{FacetBudget}
	}
	if r.Base().Effect != snapshot.EffectAllow {
		return nil
	}
	switch r := r.(type) {
	case *snapshot.ActionRule:
		return []int{FacetAction}
	case *snapshot.FilesystemRule:
		return []int{FacetPathRead + accessIndex[r.Access]}
	case *snapshot.NetworkRule:
		return []int{FacetHost}
	case *snapshot.SubprocessRule:
		return []int{FacetCommand, FacetShell}
	case *snapshot.MCPRule:
		if r.Resource != nil {
			return []int{FacetMCPResource}
		}
		return []int{FacetMCPTool}
	case *snapshot.EnvironmentRule:
		return []int{FacetEnv}
	case *snapshot.SecretExposureRule:
		return []int{FacetSecret}
	case *snapshot.ExpiryRule:
		return []int{FacetExpiry}
	}
	return nil
}

// GateTables returns, for a valid snapshot, the gate index of every rule (by
// rule id) and of every facet (by facet name). The Rego bundle carries these
// tables so that both engines attribute denials to the same gates.
func GateTables(s *snapshot.Snapshot) (ruleGate, facetGate map[string]int, err error) {
	p, err := Compile(s)
	if err != nil {
		return nil, nil, err
	}
	ruleGate, facetGate = map[string]int{}, map[string]int{}
	for i, id := range p.ruleIDs {
		ruleGate[id] = p.ruleGate[i]
	}
	for f, name := range FacetNames {
		facetGate[name] = p.facetGate[f]
	}
	return ruleGate, facetGate, nil
}
