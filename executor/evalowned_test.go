package executor_test

import (
	"context"
	"fmt"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
)

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
