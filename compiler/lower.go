package compiler

import (
	"fmt"
	"slices"
	"strings"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/snapshot"
)

const (
	defaultGate  = "polc.default"
	approvalGate = "polc.approval"
)

// lowered is a policy's snapshot plus the source position of each rule.
type lowered struct {
	snap      *snapshot.Snapshot
	positions map[string]diag.Pos // rule id → declaring position
	ids       map[*entry]string   // a resolved entry → its rule's id
}

// lower turns a resolved policy into its sealed snapshot. parent is the
// parent's snapshot (nil for a root) and supplies the lineage.
func lower(r *resolved, parent *snapshot.Snapshot) (*lowered, error) {
	out := &lowered{positions: map[string]diag.Pos{}, ids: map[*entry]string{}}
	// Never nil: a policy without rules is "compiled_rules":[], which Parse
	// accepts; a nil Rules would encode as null.
	rules := snapshot.Rules{}
	add := func(rule snapshot.Rule, e *entry) {
		b := rule.Base()
		b.RuleID = snapshot.ExpectedRuleID(rule)
		b.Provenance = slices.Clone(e.origins)
		out.ids[e] = b.RuleID
		rules = append(rules, rule)
		if e.pos.File != "" {
			out.positions[b.RuleID] = e.pos
		}
	}
	base := func(effect string) snapshot.RuleBase { return snapshot.RuleBase{Effect: effect} }
	each := func(f facet, fn func(p string, e *entry)) {
		for _, p := range r.sets[f].sorted() {
			fn(p, r.sets[f][p])
		}
	}
	each(fActionAllow, func(p string, e *entry) {
		add(&snapshot.ActionRule{RuleBase: base(snapshot.EffectAllow), Action: p}, e)
	})
	each(fActionDeny, func(p string, e *entry) {
		a, tk, t := splitQualified(p)
		add(&snapshot.ActionRule{RuleBase: base(snapshot.EffectDeny), Action: a, TargetKind: tk, Target: t}, e)
	})
	for _, a := range r.approvals {
		rule := a.rule()
		add(rule, &a.entry)
	}
	for f, access := range map[facet]string{fFSRead: "read", fFSWrite: "write", fFSExecute: "execute"} {
		each(f, func(p string, e *entry) {
			add(&snapshot.FilesystemRule{RuleBase: base(snapshot.EffectAllow), Access: access, Pattern: p}, e)
		})
	}
	each(fFSDeny, func(p string, e *entry) {
		add(&snapshot.FilesystemRule{RuleBase: base(snapshot.EffectDeny), Access: "any", Pattern: p}, e)
	})
	each(fNetAllow, func(p string, e *entry) {
		add(&snapshot.NetworkRule{RuleBase: base(snapshot.EffectAllow), Pattern: p}, e)
	})
	each(fNetDeny, func(p string, e *entry) {
		add(&snapshot.NetworkRule{RuleBase: base(snapshot.EffectDeny), Pattern: p}, e)
	})
	each(fSubAllow, func(p string, e *entry) {
		shell := r.shell
		add(&snapshot.SubprocessRule{RuleBase: base(snapshot.EffectAllow), Pattern: p, Shell: &shell}, e)
	})
	each(fSubDeny, func(p string, e *entry) {
		add(&snapshot.SubprocessRule{RuleBase: base(snapshot.EffectDeny), Pattern: p}, e)
	})
	mcp := func(f facet, effect string, resource bool) {
		each(f, func(p string, e *entry) {
			server, target, _ := strings.Cut(p, "/")
			rule := &snapshot.MCPRule{RuleBase: base(effect), Server: server}
			if resource {
				rule.Resource = &target
			} else {
				rule.Tool = &target
			}
			add(rule, e)
		})
	}
	mcp(fMCPTools, snapshot.EffectAllow, false)
	mcp(fMCPResources, snapshot.EffectAllow, true)
	mcp(fMCPDeny, snapshot.EffectDeny, false)
	for f, exposure := range map[facet]string{fEnvRead: "read", fEnvInject: "inject"} {
		each(f, func(p string, e *entry) {
			add(&snapshot.EnvironmentRule{RuleBase: base(snapshot.EffectAllow), Pattern: p, Exposure: exposure}, e)
		})
	}
	each(fEnvDeny, func(p string, e *entry) {
		add(&snapshot.EnvironmentRule{RuleBase: base(snapshot.EffectDeny), Pattern: p, Exposure: "forbid"}, e)
	})
	for _, s := range r.secrets {
		effect := snapshot.EffectAllow
		if s.exposure == "forbid" {
			effect = snapshot.EffectDeny
		}
		add(&snapshot.SecretExposureRule{RuleBase: base(effect), Namespace: s.namespace, Exposure: s.exposure}, &s.entry)
	}
	for kind, b := range r.budgets {
		e := b.entry.clone()
		if r.windowEnt != nil {
			for _, o := range r.windowEnt.origins {
				e.addOrigin(o)
			}
		}
		add(&snapshot.BudgetRule{RuleBase: base(snapshot.EffectLimit), BudgetKind: kind, Limit: b.limit, WindowMicroseconds: r.window}, e)
	}
	if r.notBefore != nil || r.expiresAt != nil {
		rule := &snapshot.ExpiryRule{RuleBase: base(snapshot.EffectAllow)}
		if r.notBefore != nil {
			s := formatTime(*r.notBefore)
			rule.NotBefore = &s
		}
		if r.expiresAt != nil {
			s := formatTime(*r.expiresAt)
			rule.ExpiresAt = &s
		}
		add(rule, r.expiryEntry)
	}
	slices.SortFunc(rules, func(a, b snapshot.Rule) int { return strings.Compare(a.Base().RuleID, b.Base().RuleID) })
	for i, rule := range rules {
		if i > 0 && rules[i-1].Base().RuleID == rule.Base().RuleID {
			return nil, fmt.Errorf("internal error: duplicate rule id %q", rule.Base().RuleID)
		}
		rule.Base().Order = i
	}

	s := &snapshot.Snapshot{
		Format:         snapshot.Format,
		PolicyID:       r.uuid,
		Name:           r.name,
		Version:        r.version,
		Description:    r.description,
		PrincipalScope: r.sets[fPrincipals].sorted(),
		TenantScope:    r.sets[fTenants].sorted(),
		CompiledRules:  rules,
		GateBindings:   bindGates(r.gates, rules),
		Lineage:        []snapshot.Ancestor{},
		Expansions:     r.expansions,
		Provenance:     snapshot.Provenance{Compiler: snapshot.CompilerContract},
		ReleaseState:   snapshot.Staged,
	}
	if s.Expansions == nil {
		s.Expansions = []snapshot.Expansion{}
	}
	if parent != nil {
		s.Lineage = append(slices.Clone(parent.Lineage), snapshot.Ancestor{
			PolicyID: parent.PolicyID, Name: parent.Name, Version: parent.Version, Digest: parent.Digest,
		})
	}
	if err := s.Seal(); err != nil {
		return nil, err
	}
	out.snap = s
	return out, nil
}

// bindGates binds each rule to the strictest declared gate with a matching
// selector (the first declared among equally strict ones); unbound approval
// rules go to the soft gate polc.approval (so that a match escalates) and
// all other unbound rules to the hard gate polc.default.
func bindGates(gates []gate, rules snapshot.Rules) []snapshot.GateBinding {
	var out []snapshot.GateBinding
	for i, g := range gates {
		out = append(out, snapshot.GateBinding{GateID: g.id, Level: g.level, Order: i, Selectors: slices.Clone(g.selectors)})
	}
	approvals := snapshot.GateBinding{GateID: approvalGate, Level: snapshot.LevelSoft}
	defaults := snapshot.GateBinding{GateID: defaultGate, Level: snapshot.LevelHard}
	for _, rule := range rules {
		id := rule.Base().RuleID
		best := -1
		for i, g := range gates {
			if !slices.ContainsFunc(g.selectors, func(sel string) bool { return pattern.MatchGlob(sel, id) }) {
				continue
			}
			if best < 0 || levelRank[g.level] > levelRank[gates[best].level] {
				best = i
			}
		}
		switch {
		case best >= 0:
			out[best].RuleIDs = append(out[best].RuleIDs, id)
		case rule.Kind() == snapshot.KindApproval:
			approvals.RuleIDs = append(approvals.RuleIDs, id)
		default:
			defaults.RuleIDs = append(defaults.RuleIDs, id)
		}
	}
	if len(approvals.RuleIDs) > 0 {
		out = append(out, approvals)
	}
	out = append(out, defaults)
	for i := range out {
		out[i].Order = i
		out[i].AdapterID = snapshot.AdapterID
		out[i].ToolIDs = []string{"*"}
		if out[i].Selectors == nil {
			out[i].Selectors = []string{}
		}
		if out[i].RuleIDs == nil {
			out[i].RuleIDs = []string{}
		}
		slices.Sort(out[i].RuleIDs)
	}
	return out
}
