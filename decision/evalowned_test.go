package decision_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/policygen"
	"polc.dev/polc/normalize"
)

// TestEvaluateOwnedMatchesEvaluate checks the executor's stage 7
// evaluation (into the attempt's buffers, of any size) against Evaluate on
// random policies and requests: the same decision, empty lists included
// (cmp without EquateEmpty tells nil from empty), and a decision written
// into the buffers never shares a list with another list.
func TestEvaluateOwnedMatchesEvaluate(t *testing.T) {
	g := newGen(5, 6)
	decls, res := policygen.Compile(t, 25, g.policy)
	sizes := [][2]int{{-1, -1}, {0, 0}, {1, 1}, {3, 8}, {2, 20}, {8, 3}}
	dispositions := map[string]int{}
	for _, s := range res.Snapshots {
		pol, err := decision.Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 40 {
			req := g.request()
			if j%4 != 0 {
				req = g.requestFor(decls[s.Name])
			}
			want, _ := pol.Evaluate(req)
			dispositions[want.Disposition]++
			for _, sz := range sizes {
				got := evaluateOwned(pol, req, sz[0], sz[1])
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("buffers %v: (-Evaluate +owned)\n%s", sz, diff)
				}
				// Appending to one list must not write into another.
				lists := [][]string{got.RuleIDs, got.Reasons}
				for _, gr := range got.Gates {
					lists = append(lists, gr.RuleIDs)
				}
				for i, l := range lists {
					if cap(l) > len(l) {
						_ = append(l, "\x00marker")
						for k, o := range lists {
							for _, v := range o {
								if k != i && v == "\x00marker" {
									t.Fatalf("buffers %v: list %d grows into list %d", sz, i, k)
								}
							}
						}
					}
				}
			}
		}
	}
	for _, d := range []string{decision.Allow, decision.Deny, decision.Escalate} {
		if dispositions[d] == 0 {
			t.Errorf("no %s decision generated", d)
		}
	}
}

// evaluateOwned is pol.EvaluateWith (the executor's stage 7 evaluation)
// with buffers of the given sizes (negative: nil).
func evaluateOwned(pol *decision.Policy, r *normalize.Normalized, gates, strs int) decision.Decision {
	var gb []decision.GateResult
	var sb []string
	if gates >= 0 {
		gb = make([]decision.GateResult, gates)
	}
	if strs >= 0 {
		sb = make([]string, strs)
	}
	var d decision.Decision
	pol.EvaluateWith(r, &d, gb, sb)
	return d
}
