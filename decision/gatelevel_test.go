package decision_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/internal/regoeval"
)

// The gate-level property: a child may narrow its parent's allow lists and
// declare gates of its own, but whatever the parent does not allow (deny,
// or escalate to an approver) the child does not allow either, and what
// the parent denies the child does not merely escalate. A child that files
// its narrowed allow rules under an advisory gate of its own — or lets an
// advisory gate it inherits capture them — would make the parent's "not
// allowed" checks advisory; the compiler must refuse it (docs/composition.md).

// allowLists are the allow lists a child narrows: section, field, and the
// rule-id prefix of its patterns.
var allowLists = []struct {
	section, field string
	kind           pattern.Kind
	prefix         string
}{
	{"actions", "allow", pattern.Action, "action.allow:"},
	{"filesystem", "read", pattern.Path, "filesystem.read:"},
	{"filesystem", "write", pattern.Path, "filesystem.write:"},
	{"filesystem", "execute", pattern.Path, "filesystem.execute:"},
	{"network", "allow", pattern.Host, "network.allow:"},
	{"subprocess", "allow", pattern.Command, "subprocess.allow:"},
	{"environment", "read", pattern.Env, "environment.read:"},
	{"environment", "inject", pattern.Env, "environment.inject:"},
}

// gateSelectors are selectors a child's gates draw from: whole facets of
// allow rules (the attack), denies, approvals, budgets, expiry, everything.
var gateSelectors = []string{
	"subprocess.allow:*", "filesystem.write:*", "filesystem.read:*", "filesystem.execute:*", "network.allow:*",
	"action.allow:*", "environment.*", "mcp.tool:*", "mcp.resource:*", "secret.*", "action.deny:*", "approval*",
	"budget.*", "expiry", "filesystem.*", "network.*", "subprocess.*", "*",
}

// narrow returns a pattern the parent's pattern p covers, mostly: p itself,
// a value p matches written as a literal pattern, or p with a literal
// prefix added to its first wildcard.
func (g gen) narrow(kind pattern.Kind, p string) string {
	var out string
	switch g.R.IntN(5) {
	case 0:
		out = p
	case 1, 2:
		out = g.Instantiate(p)
	default:
		i := strings.IndexAny(p, "*?")
		if i < 0 {
			out = p
			break
		}
		lit := map[pattern.Kind]string{pattern.Path: "src/", pattern.Command: "status ", pattern.Host: "a.", pattern.Action: "b"}[kind]
		out = p[:i] + lit + p[i:]
	}
	if pattern.Validate(kind, out) != nil {
		return p
	}
	return out
}

// gateChild returns a child of parent (declared as "parent") that narrows
// some of its allow lists, may add denies, approvals, a smaller budget and
// a shorter expiry, and either declares gates of its own, redeclares the
// parent's gate ids at other levels, or inherits the parent's gates. It
// also returns the rule ids of the narrowed allow rules, which the parent
// may pre-arm a gate for.
func (g gen) gateChild(parent map[string]any) (map[string]any, []string) {
	child := map[string]any{"version": "2", "extends": "parent"}
	var narrowed []string
	section := func(name string) map[string]any {
		if s, ok := child[name].(map[string]any); ok {
			return s
		}
		s := map[string]any{}
		child[name] = s
		return s
	}
	for _, l := range allowLists {
		psec, _ := parent[l.section].(map[string]any)
		plist, _ := psec[l.field].([]string)
		if !g.Chance(0.5) {
			continue
		}
		list := []string{}
		for _, p := range plist {
			if g.Chance(0.3) {
				continue
			}
			n := g.narrow(l.kind, p)
			if slices.Contains(list, n) {
				continue
			}
			list = append(list, n)
			if n != p {
				narrowed = append(narrowed, l.prefix+n)
			}
		}
		if g.Chance(0.05) {
			list = append(list, g.Pick("/etc/**", "*", "rm *")) // usually a widening, refused
		}
		section(l.section)[l.field] = list
	}
	if nsec, _ := parent["network"].(map[string]any); nsec["mode"] == "allow" && g.Chance(0.3) {
		// The parent allows every host: the child narrows to a list.
		s := section("network")
		s["mode"] = "allowlist"
		if _, ok := s["allow"]; !ok {
			s["allow"] = g.List(2, pattern.Host, g.HostPattern)
		}
	}
	if ssec, _ := parent["subprocess"].(map[string]any); ssec["mode"] == "allow" && g.Chance(0.3) {
		s := section("subprocess")
		s["mode"] = "allowlist"
		if _, ok := s["allow"]; !ok {
			s["allow"] = g.List(2, pattern.Command, g.CmdPattern)
		}
	}
	if g.Chance(0.3) {
		section("actions")["deny"] = g.List(1, "qualified", g.qualified)
	}
	if g.Chance(0.2) {
		section("subprocess")["deny"] = g.List(1, pattern.Command, g.CmdPattern)
	}
	if b, ok := parent["budgets"].(map[string]any); ok && g.Chance(0.5) {
		child["budgets"] = map[string]any{"calls": max(1, b["calls"].(int)-g.R.IntN(2))}
	}
	if _, ok := parent["expires_at"]; ok && g.Chance(0.3) {
		child["expires_at"] = "2026-08-01T00:00:00Z"
	}
	switch pg, _ := parent["gates"].([]any); {
	case len(pg) > 0 && g.Chance(0.3):
		// The parent's gate ids again, each at a random level.
		var gates []any
		for _, x := range pg {
			m := x.(map[string]any)
			sel := m["rules"]
			if g.Chance(0.3) {
				sel = []string{g.Pick(gateSelectors...)}
			}
			gates = append(gates, map[string]any{"id": m["id"], "level": g.Pick("hard", "soft", "advisory"), "rules": sel})
		}
		child["gates"] = gates
	case g.Chance(0.55):
		var gates []any
		for i := range 1 + g.R.IntN(3) {
			var sel []string
			for range 1 + g.R.IntN(2) {
				sel = append(sel, g.Pick(gateSelectors...))
			}
			if len(narrowed) > 0 && g.Chance(0.4) {
				// Exactly some narrowed rules: no parent rule id is
				// captured, so only the facet's level can tell.
				sel = nil
				for _, id := range narrowed {
					if g.Chance(0.7) {
						sel = append(sel, id)
					}
				}
				sel = append(sel, narrowed[0])
			}
			gates = append(gates, map[string]any{"id": fmt.Sprintf("c%d", i), "level": g.Pick("hard", "soft", "advisory", "advisory"), "rules": sel})
		}
		child["gates"] = gates
	}
	return child, narrowed
}

// gateRounds is the property test's size: 150 rounds (30 with -short),
// 1,500 with POLC_LONG set, or POLC_DIFF_ROUNDS; the seed, or POLC_DIFF_SEED.
func gateRounds(seed, stream uint64) (int, gen) {
	rounds, g := soundnessRounds(seed, stream)
	if os.Getenv("POLC_LONG") != "" && os.Getenv("POLC_DIFF_ROUNDS") == "" {
		rounds = 1500
	} else if os.Getenv("POLC_DIFF_ROUNDS") == "" && !testing.Short() {
		rounds = 150
	}
	return rounds, g
}

// TestGateLevelsNeverWiden checks, for random parent/child pairs whose
// child narrows allow lists and declares, redeclares or inherits gates,
// that a child the compiler accepts without an expansion is never more
// permissive than its parent on any request (deny < escalate < allow).
// Every 10th accepted pair is also evaluated by the Rego bundle in OPA,
// which must agree with the native engine on both policies.
func TestGateLevelsNeverWiden(t *testing.T) {
	rounds, g := gateRounds(11, 0x9a7e)
	const requests = 150
	compiled, refusedGates, pairs, wider, opaPairs := 0, 0, 0, 0, 0
	ctx := context.Background()
	for round := range rounds {
		parent := g.policy()
		child, narrowed := g.gateChild(parent)
		if len(narrowed) > 0 && g.Chance(0.25) {
			// A parent that pre-arms an advisory (or soft) gate for rules
			// only its children will have: a child that declares no gates
			// inherits it, and its narrowed rules fall into it.
			pg, _ := parent["gates"].([]any)
			parent["gates"] = append(pg, map[string]any{"id": "pre", "level": g.Pick("advisory", "soft"),
				"rules": []string{narrowed[g.R.IntN(len(narrowed))]}})
			if _, ok := child["gates"]; ok && g.Chance(0.7) {
				delete(child, "gates")
			}
		}
		res := compiletest.Decls(t, map[string]any{"parent": parent, "child": child})
		if res.Diagnostics.HasErrors() {
			for _, d := range res.Diagnostics {
				if d.Code == diag.CodeExpansionUnauth && strings.Contains(d.Message, "gates") {
					refusedGates++
					break
				}
			}
			continue
		}
		compiled++
		pols := map[string]*decision.Policy{}
		for _, s := range res.Snapshots {
			pols[s.Name] = mustPolicy(t, s)
		}
		var eng *regoeval.Engine
		if compiled%10 == 0 {
			bb, err := compiler.WriteBundle(res.Snapshots, nil)
			if err != nil {
				t.Fatal(err)
			}
			if eng, err = regoeval.New(ctx, bb); err != nil {
				t.Fatal(err)
			}
		}
		for j := range requests {
			req := g.request()
			switch j % 3 {
			case 1:
				req = g.requestFor(parent)
			case 2:
				req = g.requestFor(child)
			}
			dp, _ := pols["parent"].Evaluate(req)
			dc, _ := pols["child"].Evaluate(req)
			pairs++
			if eng != nil {
				for name, nat := range map[string]decision.Decision{"parent": dp, "child": dc} {
					opa, err := eng.Evaluate(ctx, name, req)
					if err != nil {
						t.Fatalf("opa: %v", err)
					}
					opaPairs++
					if d := cmp.Diff(nat, opa, cmpopts.EquateEmpty()); d != "" {
						rb, _ := json.Marshal(req)
						t.Fatalf("round %d, %s: engines disagree (-native +opa):\n%s\nrequest: %s", round, name, d, rb)
					}
				}
			}
			if permissiveness[dc.Disposition] <= permissiveness[dp.Disposition] {
				continue
			}
			wider++
			if wider <= 3 {
				pb, _ := json.Marshal(parent)
				cb, _ := json.Marshal(child)
				rb, _ := json.Marshal(req)
				t.Errorf("round %d: the parent says %s, the child %s\nparent: %s\nchild: %s\nrequest: %s\nparent reasons %v, child reasons %v\nchild gates %v",
					round, dp.Disposition, dc.Disposition, pb, cb, rb, dp.Reasons, dc.Reasons, dc.Gates)
			}
		}
	}
	t.Logf("%d of %d children compiled (%d refused for a gate level); %d request pairs (%d also in OPA); %d where the child was more permissive",
		compiled, rounds, refusedGates, pairs, opaPairs, wider)
	if compiled < rounds/10 {
		t.Fatalf("only %d of %d children compiled: the test tests little", compiled, rounds)
	}
	if wider > 0 {
		t.Fatalf("%d requests a child widened through its gates without an expansion", wider)
	}
}
