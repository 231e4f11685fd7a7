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
