package compiler

import (
	"time"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/snapshot"
)

// raise rebuilds the resolved model of a snapshot, so that a snapshot can be
// the parent of a declaration (polc compile --parent) and so that two
// snapshots can be compared semantically. lower(raise(s)) reproduces s.
// positions, when non-nil, supplies source positions by rule id.
func raise(s *snapshot.Snapshot, positions map[string]diag.Pos) *resolved {
	r := rootDefaults()
	r.name, r.version, r.uuid, r.description = s.Name, s.Version, s.PolicyID, s.Description
	r.expansions = s.Expansions
	r.lineage = s.Lineage
	for _, p := range s.PrincipalScope {
		r.sets[fPrincipals][p] = &entry{}
	}
	for _, p := range s.TenantScope {
		r.sets[fTenants][p] = &entry{}
	}
	shellSeen := false
	for _, rule := range s.CompiledRules {
		b := rule.Base()
		e := &entry{origins: append([]snapshot.Origin(nil), b.Provenance...), pos: positions[b.RuleID]}
		allow := b.Effect == snapshot.EffectAllow
		switch rule := rule.(type) {
		case *snapshot.ActionRule:
			p := rule.Action
			if rule.Target != nil {
				p += ":" + *rule.Target
			}
			r.sets[pick(allow, fActionAllow, fActionDeny)][p] = e
		case *snapshot.ApprovalRule:
			p := rule.Action
			if rule.Target != nil {
				p += ":" + *rule.Target
			}
			a := &approval{pattern: p, approver: rule.ApproverClass, expiresAfter: rule.ExpiresAfterMicroseconds, entry: *e}
			r.approvals[a.key()] = a
		case *snapshot.FilesystemRule:
			f := map[string]facet{"read": fFSRead, "write": fFSWrite, "execute": fFSExecute, "any": fFSDeny}[rule.Access]
			r.sets[f][rule.Pattern] = e
		case *snapshot.NetworkRule:
			r.sets[pick(allow, fNetAllow, fNetDeny)][rule.Pattern] = e
		case *snapshot.SubprocessRule:
			r.sets[pick(allow, fSubAllow, fSubDeny)][rule.Pattern] = e
			if allow && !shellSeen {
				r.shell, shellSeen = *rule.Shell, true
			}
		case *snapshot.MCPRule:
			switch {
			case !allow:
				r.sets[fMCPDeny][rule.Server+"/"+*rule.Tool] = e
			case rule.Resource != nil:
				r.sets[fMCPResources][rule.Server+"/"+*rule.Resource] = e
			default:
				r.sets[fMCPTools][rule.Server+"/"+*rule.Tool] = e
			}
		case *snapshot.SecretExposureRule:
			r.secrets[b.RuleID] = &secret{namespace: rule.Namespace, exposure: rule.Exposure, entry: *e}
		case *snapshot.EnvironmentRule:
			f := map[string]facet{"read": fEnvRead, "inject": fEnvInject, "forbid": fEnvDeny}[rule.Exposure]
			r.sets[f][rule.Pattern] = e
		case *snapshot.BudgetRule:
			// lower merges the window's origins into every budget rule;
			// split them back so that a child that declares its own window
			// replaces them, as it does for a parent in the compile set.
			be := &entry{pos: e.pos}
			for _, o := range e.origins {
				if o.Field == "budgets.window" {
					if r.windowEnt == nil {
						r.windowEnt = &entry{}
					}
					r.windowEnt.addOrigin(o)
				} else {
					be.addOrigin(o)
				}
			}
			r.budgets[rule.BudgetKind] = &budget{limit: rule.Limit, entry: *be}
			r.window = rule.WindowMicroseconds
		case *snapshot.ExpiryRule:
			r.notBefore, r.expiresAt = parseSnapTime(rule.NotBefore), parseSnapTime(rule.ExpiresAt)
			r.expiryEntry = e
		}
	}
	r.netMode, r.netList = modeOf(r.sets[fNetAllow])
	r.subMode, r.subList = modeOf(r.sets[fSubAllow])
	for _, g := range s.GateBindings {
		if g.GateID == defaultGate || g.GateID == approvalGate {
			continue
		}
		r.gates = append(r.gates, gate{id: g.GateID, level: g.Level, selectors: append([]string(nil), g.Selectors...)})
		r.gatesSet = true
	}
	return r
}

func pick(allow bool, a, d facet) facet {
	if allow {
		return a
	}
	return d
}

// modeOf recovers a mode and allowlist from an effective allow set.
func modeOf(s set) (string, set) {
	switch {
	case s["*"] != nil:
		return "allow", set{}
	case len(s) > 0:
		return "allowlist", s.clone()
	}
	return "deny", set{}
}

func parseSnapTime(s *string) *time.Time {
	if s == nil {
		return nil
	}
	t, err := time.Parse(TimeLayout, *s)
	if err != nil {
		return nil // Parse validated the format; unreachable for parsed snapshots.
	}
	return &t
}
