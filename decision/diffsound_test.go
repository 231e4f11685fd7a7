package decision_test

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/snapshot"
)

// permissiveness ranks dispositions: a change of version that moves a
// request up this order widened what the policy permits.
var permissiveness = map[string]int{decision.Deny: 0, decision.Escalate: 1, decision.Allow: 2}

// mutate returns a copy of pol with one small change drawn from donor (a
// policy from the same generator): one section's field replaced, one list
// entry dropped or one entry added — the kind of edit a policy change is.
func (g gen) mutate(pol, donor map[string]any) map[string]any {
	var out map[string]any
	b, _ := json.Marshal(pol)
	json.Unmarshal(b, &out)
	var don map[string]any
	b, _ = json.Marshal(donor)
	json.Unmarshal(b, &don)
	keys := make([]string, 0, len(out))
	for k := range don {
		if k != "version" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	k := keys[g.R.IntN(len(keys))]
	sec, isSec := out[k].(map[string]any)
	dsec, _ := don[k].(map[string]any)
	switch {
	case !isSec || dsec == nil || g.Chance(0.3):
		out[k] = don[k] // the whole section (or value)
	default:
		fields := make([]string, 0, len(dsec))
		for f := range dsec {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		f := fields[g.R.IntN(len(fields))]
		list, isList := sec[f].([]any)
		dlist, _ := dsec[f].([]any)
		switch {
		case isList && len(list) > 0 && g.Chance(0.4):
			i := g.R.IntN(len(list))
			sec[f] = append(list[:i:i], list[i+1:]...)
		case isList && len(dlist) > 0 && g.Chance(0.5):
			sec[f] = append(list, dlist[g.R.IntN(len(dlist))])
		default:
			sec[f] = dsec[f]
		}
	}
	if _, ok := pol["gates"]; ok && g.Chance(0.5) {
		out["gates"] = pol["gates"] // keep gate ids stable most of the time
	}
	return out
}

// mustPolicy is the evaluator of a compiled snapshot.
func mustPolicy(t *testing.T, s *snapshot.Snapshot) *decision.Policy {
	t.Helper()
	p, err := decision.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// soundnessRounds is the soundness tests' size and generator: 300 rounds
// (30 with -short), or POLC_DIFF_ROUNDS; the seed, or POLC_DIFF_SEED.
func soundnessRounds(seed, stream uint64) (int, gen) {
	rounds := 300
	if n, err := strconv.Atoi(os.Getenv("POLC_DIFF_ROUNDS")); err == nil && n > 0 {
		rounds = n
	} else if testing.Short() {
		rounds = 30
	}
	if n, err := strconv.ParseUint(os.Getenv("POLC_DIFF_SEED"), 10, 64); err == nil {
		seed = n
	}
	return rounds, newGen(seed, stream)
}

// TestDiffIsSound checks polc diff's promise to CI — no silent widening —
// against the engine: for random policies and a one-edit change of each,
// every request the new version treats more permissively than the old
// (deny → escalate or allow, escalate → allow) comes with at least one
// "widened" change from compiler.Diff. Reporting a widening where the
// decisions did not move is allowed (coverage is decided conservatively);
// missing one is the failure.
func TestDiffIsSound(t *testing.T) {
	// 300 rounds take ~12 s; 1,500 found the relative "**" covering
	// absolute paths (fixed in pattern.Covers).
	rounds, g := soundnessRounds(7, 0xd1ff)
	const requests = 300
	pairs, moved, silent := 0, 0, 0
	for round := range rounds {
		old := g.policy()
		newer := g.mutate(old, g.policy())
		ro, rn := compiletest.Decls(t, map[string]any{"p": old}), compiletest.Decls(t, map[string]any{"p": newer})
		if ro.Diagnostics.HasErrors() || rn.Diagnostics.HasErrors() {
			continue // an edit can make a policy invalid (e.g. a gate naming no rule)
		}
		so, sn := ro.Snapshots[0], rn.Snapshots[0]
		widened := false
		for _, c := range compiler.Diff(so, sn) {
			widened = widened || c.Kind == "widened"
		}
		po, pn := mustPolicy(t, so), mustPolicy(t, sn)
		for j := range requests {
			req := g.request()
			switch j % 3 {
			case 1:
				req = g.requestFor(old)
			case 2:
				req = g.requestFor(newer)
			}
			do, _ := po.Evaluate(req)
			dn, _ := pn.Evaluate(req)
			pairs++
			if permissiveness[dn.Disposition] <= permissiveness[do.Disposition] {
				continue
			}
			moved++
			if !widened {
				silent++
				if silent <= 3 {
					ob, _ := json.Marshal(old)
					nb, _ := json.Marshal(newer)
					rb, _ := json.Marshal(req)
					t.Errorf("round %d: %s → %s with no widening reported\nold: %s\nnew: %s\nrequest: %s\nold reasons %v, new reasons %v",
						round, do.Disposition, dn.Disposition, ob, nb, rb, do.Reasons, dn.Reasons)
				}
			}
		}
	}
	t.Logf("%d request pairs, %d more permissive under the new version, %d of them unreported", pairs, moved, silent)
	if moved == 0 {
		t.Fatal("no request moved: the mutations test nothing")
	}
	if silent > 0 {
		t.Fatalf("%d widenings polc diff did not report", silent)
	}
}

// TestInheritanceNeverWidens checks the compiler's promise — no silent
// widening — against the engine: for a random parent and a child that
// extends it with a one-edit change and no expansions, when the pair
// compiles, no request is treated more permissively by the child than by
// the parent.
func TestInheritanceNeverWidens(t *testing.T) {
	rounds, g := soundnessRounds(9, 0x1a4e)
	const requests = 200
	compiled, pairs, wider := 0, 0, 0
	for round := range rounds {
		parent := g.policy()
		child := g.mutate(parent, g.policy())
		child["extends"] = "parent"
		res := compiletest.Decls(t, map[string]any{"parent": parent, "child": child})
		if res.Diagnostics.HasErrors() {
			continue // a widening needs an expansion: refused, as it should be
		}
		compiled++
		snaps := map[string]*decision.Policy{}
		for _, s := range res.Snapshots {
			snaps[s.Name] = mustPolicy(t, s)
		}
		for j := range requests {
			req := g.request()
			if j%2 == 1 {
				req = g.requestFor(child)
			}
			dp, _ := snaps["parent"].Evaluate(req)
			dc, _ := snaps["child"].Evaluate(req)
			pairs++
			if permissiveness[dc.Disposition] > permissiveness[dp.Disposition] {
				wider++
				if wider <= 3 {
					pb, _ := json.Marshal(parent)
					cb, _ := json.Marshal(child)
					rb, _ := json.Marshal(req)
					t.Errorf("round %d: the parent says %s, the child %s\nparent: %s\nchild: %s\nrequest: %s\nparent reasons %v, child reasons %v",
						round, dp.Disposition, dc.Disposition, pb, cb, rb, dp.Reasons, dc.Reasons)
				}
			}
		}
	}
	t.Logf("%d of %d children compiled; %d request pairs; %d where the child was more permissive", compiled, rounds, pairs, wider)
	if compiled == 0 {
		t.Fatal("no child compiled: the test tests nothing")
	}
	if wider > 0 {
		t.Fatalf("%d requests a child widened without an expansion", wider)
	}
}
