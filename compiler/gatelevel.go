package compiler

import (
	"fmt"
	"slices"
	"strings"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/snapshot"
)

// applied is the gate that applies one check of a policy, and its level.
type applied struct{ gate, level string }

// notAllowedPrefix names a facet's "not allowed" check as decisions do
// ("not_allowed:command"); no rule id starts with it.
const notAllowedPrefix = "not_allowed:"

// appliedChecks maps every check a snapshot applies to the gate that
// applies it (docs/decisions.md, "Gates and the reducer"): each rule by its
// id — a deny or approval rule is applied at its own gate's level; an allow
// rule's own level is compared too, conservatively — and each facet's "not
// allowed" check by "not_allowed:<facet>", which the engines apply at the
// level of the strictest gate holding one of the facet's allow rules
// (polc.default when none does). The facet gates come from the engines'
// own attribution (decision.GateTables), so the compiler judges exactly the
// level a decision will use.
//
// The expiry and budget checks exist only when the policy has such a rule;
// every other facet's check is always applied (with no allow rule, every
// value is not allowed, at polc.default).
func appliedChecks(s *snapshot.Snapshot) (map[string]applied, error) {
	out := map[string]applied{}
	for _, g := range s.GateBindings {
		for _, id := range g.RuleIDs {
			out[id] = applied{g.GateID, g.Level}
		}
	}
	_, facetGate, err := decision.GateTables(s)
	if err != nil {
		return out, err
	}
	var expiry, budget bool
	for _, r := range s.CompiledRules {
		switch r.(type) {
		case *snapshot.ExpiryRule:
			expiry = true
		case *snapshot.BudgetRule:
			budget = true
		}
	}
	for name, gi := range facetGate {
		if (name == decision.FacetNames[decision.FacetExpiry] && !expiry) || (name == decision.FacetNames[decision.FacetBudget] && !budget) {
			continue
		}
		g := s.GateBindings[gi]
		out[notAllowedPrefix+name] = applied{g.GateID, g.Level}
	}
	return out, nil
}

// lowered lists the checks that before applies and after applies at a
// lower level, by the gate of after that applies each, sorted. A check
// after lacks is not a lowering: deny and approval rules are unions, and
// an allow rule a child replaced by a narrower one is a narrowing.
func loweredChecks(before, after map[string]applied) map[string][]string {
	out := map[string][]string{}
	for _, check := range sortedKeys(before) {
		b := before[check]
		a, ok := after[check]
		if ok && levelRank[a.level] < levelRank[b.level] {
			out[a.gate] = append(out[a.gate], check)
		}
	}
	return out
}

// checkGates refuses a child whose gates apply a check its parent applies
// at a lower level (hard > soft > advisory): a deny or approval rule, any
// rule, or a facet's "not allowed" check. It runs for every child, with or
// without gates of its own: the gates it inherits can take the narrower
// allow rules it declares, and a facet's check takes the level of the
// strictest gate holding its allow rules, so a child whose narrowed allow
// rules all land in an advisory gate — its own or one it inherits — would
// make the parent's allowlist advisory. An expansion {path: "gates",
// values: [<gate id>]} with authority allows the gate to apply lower.
func (s *state) checkGates(p *Policy, r *resolved, parent *snapshot.Snapshot, auth *expansionAuth, diags *diag.List) {
	// Bind the child's rules to learn their levels; the rule set does not
	// depend on gates or expansions, so a provisional lowering is exact.
	l, err := lower(r, parent)
	if err != nil {
		return // reported when the policy is lowered
	}
	before, cached := s.applied[parent.Name]
	if pl := s.lowered[parent.Name]; !cached || pl == nil || pl.snap != parent {
		before, err = appliedChecks(parent)
	}
	if err == nil {
		var after map[string]applied
		after, err = appliedChecks(l.snap)
		if s.applied == nil {
			s.applied = map[string]map[string]applied{}
		}
		// The snapshot lowered later differs only in its expansions.
		s.applied[p.Name] = after
		lowered := loweredChecks(before, after)
		for _, g := range l.snap.GateBindings {
			checks := lowered[g.GateID]
			if len(checks) == 0 || auth.authorize("gates", g.GateID) {
				continue
			}
			var what []string
			facet := false
			for _, c := range checks {
				what = append(what, fmt.Sprintf("%s (%s in parent)", c, before[c].level))
				facet = facet || strings.HasPrefix(c, notAllowedPrefix)
			}
			why := ""
			if facet {
				why = " (a facet's \"not allowed\" check takes the level of the strictest gate holding one of its allow rules)"
			}
			diags.Add(loweringPos(p, r, l, g), diag.CodeExpansionUnauth, "policy %q: gate %q (%s) weakens the parent's gates for %s%s; to allow it, add expansions: [{path: \"gates\", values: [%q], authority: \"…\", evidence: \"…\"}]",
				p.Name, g.GateID, g.Level, strings.Join(what, ", "), why, g.GateID)
		}
	}
	if err != nil {
		// Unreachable for snapshots the compiler sealed; fail closed.
		diags.Add(p.PosOf("extends"), diag.CodeInvalidValue, "policy %q: cannot attribute checks to gates: %v", p.Name, err)
	}
}

// loweringPos is where a child lowers a check through gate g: its own
// declaration of g; else, when it declares gates (g is then a default gate
// its list leaves the check to), its gates; else (g is inherited) the first
// rule of its own that g takes; else its extends.
func loweringPos(p *Policy, r *resolved, l *lowered, g snapshot.GateBinding) diag.Pos {
	if p.Decl.Gates != nil {
		for _, dg := range r.gates {
			if dg.id == g.GateID && dg.pos.File != "" {
				return dg.pos
			}
		}
		return p.PosOf("gates")
	}
	byID := map[string]snapshot.Rule{}
	for _, rule := range l.snap.CompiledRules {
		byID[rule.Base().RuleID] = rule
	}
	for _, id := range g.RuleIDs {
		rule := byID[id]
		if rule == nil || !slices.ContainsFunc(rule.Base().Provenance, func(o snapshot.Origin) bool { return o.Policy == p.Name }) {
			continue
		}
		if pos := l.positions[id]; pos.File != "" {
			return pos
		}
	}
	return p.PosOf("extends")
}
