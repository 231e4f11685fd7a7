package executor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
)

// TestEvaluateOwnedMatchesEvaluate checks the executor's stage 7
// evaluation (into the attempt's buffers, of any size) against Evaluate on
// random policies and requests: the same decision, empty lists included
// (cmp without EquateEmpty tells nil from empty), and a decision written
// into the buffers never shares a list with another list.
func TestEvaluateOwnedMatchesEvaluate(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(5, 6))}
	decls, res := compileRandom(t, g, 25)
	sizes := [][2]int{{-1, -1}, {0, 0}, {1, 1}, {3, 8}, {2, 20}, {8, 3}}
	dispositions := map[string]int{}
	for _, s := range res.Snapshots {
		pol, err := executor.Compile(s)
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
				got := pol.EvaluateOwned(req, sz[0], sz[1])
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
	for _, d := range []string{executor.Allow, executor.Deny, executor.Escalate} {
		if dispositions[d] == 0 {
			t.Errorf("no %s decision generated", d)
		}
	}
}

// TestBatchedIDs checks the ids of attempts under the random id source
// (minted in batches, the lease's included): well-formed, all distinct,
// within and across attempts and profiles.
func TestBatchedIDs(t *testing.T) {
	r := newRig(t, chain.NewMemStore(), func(c *executor.Config) { c.IDs = executor.NewUUID })
	b, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	add := func(id string) {
		if !chain.IsUUID(id) || seen[id] {
			t.Fatalf("id %q: malformed or repeated", id)
		}
		seen[id] = true
	}
	for i := range 50 {
		for _, ec := range []executor.ExecutionContext{r.ctx(executor.ProfileMinimal, nil), r.ctx(executor.ProfileGoverned, b)} {
			out := r.exec.Execute(context.Background(), req(fmt.Sprint(i), "nothing", nil), ec)
			if out.Kind() != executor.KindSucceeded {
				t.Fatal(out.Kind(), out.Base().ReasonCode)
			}
			base := out.Base()
			add(base.AttemptID)
			add(*base.OperationID)
			add(base.Preflight.ReportID)
			add(base.Preflight.LeaseID)
			for _, rec := range base.Records {
				add(rec)
			}
		}
	}
	if len(seen) != 50*(4+4+5) { // minimal: 4 ids; governed: 4 and 5 records
		t.Fatalf("%d ids", len(seen))
	}
}
