package statestore

import (
	"context"
	"errors"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore/internal/fixture"
)

func op(t *testing.T, s *SQLite, id string) Operation {
	t.Helper()
	o, ok, err := s.Operation(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("operation %s: ok=%v err=%v", id, ok, err)
	}
	return o
}

// Fail ApplyProjection's transaction after each record and after the cursor
// update (just before commit): nothing of the batch and no cursor move
// survives, and the same batch then applies cleanly.
func TestApplyProjectionAtomicEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	batch := []executor.ProjectedRecord{
		fixture.Started("c", "r1", 1, "op1"),
		fixture.Terminal("c", "r2", 2, "op0", chain.CallableFailedPayload{DurationUS: 1, ErrorClass: "io"}),
		fixture.Started("c", "r3", 3, "op2"),
	}
	for _, failAt := range []string{"record[0]", "record[1]", "record[2]", "cursor"} {
		t.Run(failAt, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			fixture.MustApply(t, s, "p", []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op0")}, "1")
			injected := errors.New("injected crash")
			s.hook = func(step string) error {
				if step == failAt {
					return injected
				}
				return nil
			}
			if err := s.ApplyProjection(ctx, "p", 1, batch, "4"); !errors.Is(err, injected) {
				t.Fatalf("err = %v, want the injected error", err)
			}
			db := raw(t, s.Path())
			if n := count(t, db, "SELECT count(*) FROM projected_records"); n != 1 {
				t.Errorf("%d projected rows, want 1", n)
			}
			if n := count(t, db, "SELECT count(*) FROM operations"); n != 1 {
				t.Errorf("%d operations, want 1", n)
			}
			if o := op(t, s, "op0"); o.Status != StatusRunning {
				t.Errorf("op0 = %s, want running", o.Status)
			}
			if cur, _ := s.ProjectionCursor(ctx, "p"); cur != "1" {
				t.Errorf("cursor = %q, want 1", cur)
			}
			s.hook = nil
			fixture.MustApply(t, s, "p", batch, "4")
			if o := op(t, s, "op0"); o.Status != StatusFailed {
				t.Errorf("op0 after retry = %s, want failed", o.Status)
			}
		})
	}
}
