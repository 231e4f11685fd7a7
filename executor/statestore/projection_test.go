package statestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
)

const attemptUUID = "00000000-0000-4000-8000-0000000000aa"

var digest = strings.Repeat("ab", 32)

// rec builds a projected record with a valid payload; its chain_hash is a
// stand-in derived from the record id and payload, which is all the store
// compares.
func rec(chainID, recordID string, seq int64, op *string, p chain.Payload) executor.ProjectedRecord {
	js, err := chain.EncodePayload(p)
	if err != nil {
		panic(err) // test fixture bug
	}
	h := sha256.Sum256([]byte(recordID + js))
	return executor.ProjectedRecord{ChainID: chainID, RecordID: recordID, Sequence: seq, RecordType: string(p.RecordType()),
		OperationID: op, ChainHash: hex.EncodeToString(h[:]), PayloadJSON: js}
}

func started(chainID, recordID string, seq int64, op string) executor.ProjectedRecord {
	return rec(chainID, recordID, seq, &op, chain.OperationStartedPayload{
		AttemptID: attemptUUID, RequestDigest: digest, RunID: ptr("run-" + op), ToolID: "tool." + op})
}

func terminal(chainID, recordID string, seq int64, op string, p chain.Payload) executor.ProjectedRecord {
	return rec(chainID, recordID, seq, &op, p)
}

func mustApply(t *testing.T, s *SQLite, name string, recs []executor.ProjectedRecord, next string) {
	t.Helper()
	if err := s.ApplyProjection(context.Background(), name, 1, recs, next); err != nil {
		t.Fatalf("apply up to %s: %v", next, err)
	}
}

func op(t *testing.T, s *SQLite, id string) Operation {
	t.Helper()
	o, ok, err := s.Operation(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("operation %s: ok=%v err=%v", id, ok, err)
	}
	return o
}

func TestOperationStatuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		terminal chain.Payload
		status   string
		reason   string
		result   string
		duration bool
	}{
		{"completed", chain.CallableCompletedPayload{DurationUS: 7, ResultDigest: digest}, StatusSucceeded, "", digest, true},
		{"denied", chain.OperationDeniedPayload{Disposition: "deny", ReasonCode: "policy.denied"}, StatusDenied, "policy.denied", "", false},
		{"escalated", chain.OperationDeniedPayload{Disposition: "escalate", ApproverClass: ptr("ops"), ReasonCode: "policy.escalate"}, StatusEscalated, "policy.escalate", "", false},
		{"failed", chain.CallableFailedPayload{DurationUS: 7, ErrorClass: "io"}, StatusFailed, "io", "", true},
		{"cancelled", chain.OperationCancelledPayload{DurationUS: 7}, StatusCancelled, "", "", true},
		{"timed out", chain.OperationTimedOutPayload{DurationUS: 7}, StatusTimedOut, "", "", true},
		{"ambiguous", chain.ExternalResultAmbiguousPayload{DurationUS: 7, ReasonCode: "net.reset"}, StatusAmbiguous, "net.reset", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			mustApply(t, s, "p", []executor.ProjectedRecord{started("c", "r0", 0, "op")}, "1")
			o := op(t, s, "op")
			if o.Status != StatusRunning || o.TerminalRecordID != nil || o.ToolID != "tool.op" || o.AttemptID != attemptUUID ||
				o.RunID == nil || *o.RunID != "run-op" || o.StartedRecordID != "r0" {
				t.Fatalf("after start: %+v", o)
			}
			mustApply(t, s, "p", []executor.ProjectedRecord{terminal("c", "r1", 1, "op", c.terminal)}, "2")
			o = op(t, s, "op")
			if o.Status != c.status || o.TerminalRecordID == nil || *o.TerminalRecordID != "r1" ||
				o.TerminalType == nil || *o.TerminalType != string(c.terminal.RecordType()) {
				t.Errorf("after terminal: %+v", o)
			}
			if got := deref(o.ReasonCode); got != c.reason {
				t.Errorf("reason = %q, want %q", got, c.reason)
			}
			if got := deref(o.ResultDigest); got != c.result {
				t.Errorf("result digest = %q, want %q", got, c.result)
			}
			if (o.DurationUS != nil) != c.duration || (c.duration && *o.DurationUS != 7) {
				t.Errorf("duration = %v, want present=%v", o.DurationUS, c.duration)
			}
			// A second, different terminal is refused and changes nothing.
			second := terminal("c", "r2", 2, "op", chain.OperationCancelledPayload{DurationUS: 1})
			err := s.ApplyProjection(context.Background(), "p", 1, []executor.ProjectedRecord{second}, "3")
			var ce *executor.StateConflictError
			if !errors.As(err, &ce) || ce.Key != "operation op" {
				t.Fatalf("second terminal: err = %v, want StateConflictError", err)
			}
			if after := op(t, s, "op"); after.Status != c.status || *after.TerminalRecordID != "r1" {
				t.Errorf("second terminal changed the operation: %+v", after)
			}
			if cur, _ := s.ProjectionCursor(context.Background(), "p"); cur != "2" {
				t.Errorf("cursor = %q after refused batch, want 2", cur)
			}
			// The same terminal again (a redelivery) is a no-op.
			mustApply(t, s, "p", []executor.ProjectedRecord{terminal("c", "r1", 1, "op", c.terminal)}, "2")
		})
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func TestApplyProjectionIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	batch := []executor.ProjectedRecord{
		started("c", "r0", 0, "op"),
		terminal("c", "r1", 1, "op", chain.CallableCompletedPayload{DurationUS: 3, ResultDigest: digest}),
	}
	mustApply(t, s, "p", batch, "2")
	// The same batch again, and a batch repeating a record inside itself.
	mustApply(t, s, "p", batch, "2")
	mustApply(t, s, "p", append(batch, batch...), "2")
	db := raw(t, s.Path())
	if n := count(t, db, "SELECT count(*) FROM projected_records"); n != 2 {
		t.Errorf("%d projected rows, want 2", n)
	}
	if o := op(t, s, "op"); o.Status != StatusSucceeded {
		t.Errorf("status %s", o.Status)
	}
	// A new projection version re-applies the records (new idempotency
	// keys) and finds the operation already in the same state.
	if err := s.ApplyProjection(ctx, "p2", 2, batch, "2"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM projected_records WHERE projection_version = 2"); n != 2 {
		t.Errorf("%d version-2 rows, want 2", n)
	}
	if n := count(t, db, "SELECT count(*) FROM operations"); n != 1 {
		t.Errorf("%d operations, want 1", n)
	}
}

// A replay of an applied record with a different chain_hash fails closed:
// nothing of its batch is applied, not even the records before it, and the
// cursor does not move.
func TestApplyProjectionConflictAppliesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	r0 := started("c", "r0", 0, "op")
	mustApply(t, s, "p", []executor.ProjectedRecord{r0}, "1")
	tampered := r0
	tampered.ChainHash = strings.Repeat("0", 64)
	batch := []executor.ProjectedRecord{
		started("c2", "n0", 0, "op2"),
		tampered,
		terminal("c", "r1", 1, "op", chain.OperationTimedOutPayload{DurationUS: 1}),
	}
	err := s.ApplyProjection(ctx, "p", 1, batch, "9")
	var pe *executor.ProjectionConflictError
	if !errors.As(err, &pe) || pe.RecordID != "r0" || pe.Projected != r0.ChainHash || pe.Got != tampered.ChainHash {
		t.Fatalf("err = %v, want ProjectionConflictError on r0", err)
	}
	db := raw(t, s.Path())
	if n := count(t, db, "SELECT count(*) FROM projected_records"); n != 1 {
		t.Errorf("%d projected rows, want 1", n)
	}
	if _, ok, _ := s.Operation(ctx, "op2"); ok {
		t.Error("op2 was projected from a refused batch")
	}
	if o := op(t, s, "op"); o.Status != StatusRunning {
		t.Errorf("op status %s, want running", o.Status)
	}
	if cur, _ := s.ProjectionCursor(ctx, "p"); cur != "1" {
		t.Errorf("cursor = %q, want 1", cur)
	}
}

func TestApplyProjectionInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	good := started("c", "r0", 0, "op")
	orphan := terminal("c", "r5", 5, "never-started", chain.OperationCancelledPayload{DurationUS: 1})
	badPayload := good
	badPayload.RecordID, badPayload.PayloadJSON = "r9", `{"tool_id":"x"}`
	noOp := good
	noOp.RecordID, noOp.OperationID = "r8", nil
	unknown := good
	unknown.RecordID, unknown.RecordType = "r7", "made_up"
	for name, batch := range map[string][]executor.ProjectedRecord{
		"terminal without start": {good, orphan},
		"payload":                {good, badPayload},
		"no operation id":        {good, noOp},
		"unknown type":           {good, unknown},
	} {
		var ie *InputError
		if err := s.ApplyProjection(ctx, "p", 1, batch, "x"); !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want InputError", name, err)
		}
	}
	var ie *InputError
	if err := s.ApplyProjection(ctx, "", 1, nil, "x"); !errors.As(err, &ie) {
		t.Errorf("empty projector: %v", err)
	}
	if err := s.ApplyProjection(ctx, "p", 0, nil, "x"); !errors.As(err, &ie) {
		t.Errorf("version 0: %v", err)
	}
	if n := count(t, raw(t, s.Path()), "SELECT count(*) FROM projected_records"); n != 0 {
		t.Errorf("%d rows applied from refused batches", n)
	}
	if cur, err := s.ProjectionCursor(ctx, "p"); cur != "" || err != nil {
		t.Errorf("cursor = %q, %v; want none", cur, err)
	}
}

// Starting an operation twice from different records, or ending it from
// another chain, is a conflict.
func TestOperationConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	mustApply(t, s, "p", []executor.ProjectedRecord{started("c", "r0", 0, "op")}, "1")
	var ce *executor.StateConflictError
	if err := s.ApplyProjection(ctx, "p", 1, []executor.ProjectedRecord{started("c", "r1", 1, "op")}, "2"); !errors.As(err, &ce) {
		t.Errorf("second start: %v", err)
	}
	other := terminal("c-other", "x1", 1, "op", chain.OperationCancelledPayload{DurationUS: 1})
	if err := s.ApplyProjection(ctx, "p", 1, []executor.ProjectedRecord{other}, "2"); !errors.As(err, &ce) {
		t.Errorf("terminal from another chain: %v", err)
	}
	if o := op(t, s, "op"); o.Status != StatusRunning || o.StartedRecordID != "r0" {
		t.Errorf("operation changed: %+v", o)
	}
}

// Fail ApplyProjection's transaction after each record and after the cursor
// update (just before commit): nothing of the batch and no cursor move
// survives, and the same batch then applies cleanly.
func TestApplyProjectionAtomicEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	batch := []executor.ProjectedRecord{
		started("c", "r1", 1, "op1"),
		terminal("c", "r2", 2, "op0", chain.CallableFailedPayload{DurationUS: 1, ErrorClass: "io"}),
		started("c", "r3", 3, "op2"),
	}
	for _, failAt := range []string{"record[0]", "record[1]", "record[2]", "cursor"} {
		t.Run(failAt, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			mustApply(t, s, "p", []executor.ProjectedRecord{started("c", "r0", 0, "op0")}, "1")
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
			mustApply(t, s, "p", batch, "4")
			if o := op(t, s, "op0"); o.Status != StatusFailed {
				t.Errorf("op0 after retry = %s, want failed", o.Status)
			}
		})
	}
}
