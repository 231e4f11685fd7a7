package executor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// chainTypes is the record types of a chain, in order.
func chainTypes(t *testing.T, store *chain.MemStore, chainID string) []string {
	t.Helper()
	recs, err := store.Read(context.Background(), chainID, -1)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, string(r.RecordType))
	}
	return out
}

// TestCancelledAfterStartClosesTheOperation: a caller's context that
// ends after operation_started (here: while stage 5 runs) is a
// cancellation, not an evidence failure. The store refused nothing, so
// the operation is closed with operation_cancelled, the callable is never
// reached, and the task's certificate can still be minted. Before the
// fix the gate_evaluated append failed on the cancelled context, the
// outcome was Failed{governance_evidence} and the operation stayed open
// forever (no terminal: the certificate was refused).
func TestCancelledAfterStartClosesTheOperation(t *testing.T) {
	for _, hook := range []string{"authorize", "guard"} {
		t.Run(hook, func(t *testing.T) {
			store := chain.NewMemStore()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := newRig(t, store, func(c *executor.Config) {
				switch hook {
				case "authorize":
					c.Authorize = func(context.Context, executor.ExecutionContext, normalize.ActionDescriptor) error {
						cancel()
						return nil
					}
				case "guard":
					c.Guards = []executor.Guard{{ID: "g", Check: func(context.Context, *normalize.Normalized) error { cancel(); return nil }}}
				}
			})
			b, err := r.exec.OpenBoundary(r.ref(), true)
			if err != nil {
				t.Fatal(err)
			}
			out := r.exec.Execute(ctx, req("1", "nothing", nil), r.ctx(executor.ProfileCertifiable, b))
			if out.Kind() != executor.KindCancelled || out.Base().ReasonCode != "cancelled" || out.Base().EvidenceError != nil || out.Base().CallExecuted {
				t.Fatalf("got %s %q evidence error %v call_executed %v; trail %+v", out.Kind(), out.Base().ReasonCode,
					out.Base().EvidenceError, out.Base().CallExecuted, out.Base().Trail)
			}
			if n := r.calls["nothing"].Load(); n != 0 {
				t.Fatalf("the callable ran %d times", n)
			}
			types := chainTypes(t, store, b.ChainID())
			if len(types) == 0 || types[len(types)-1] != string(chain.OperationCancelled) {
				t.Fatalf("chain %v: the operation is not closed by operation_cancelled", types)
			}
			res, err := r.exec.CloseBoundary(context.Background(), b)
			if err != nil || res.Certificate == nil {
				t.Fatalf("close: %v", err)
			}
		})
	}
}

// TestCancelledDuringStartPairIsCancelled: the context ending between the
// two records of the start pair is a cancellation (no operation started,
// no terminal owed), not an evidence failure.
func TestCancelledDuringStartPairIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := &cancelAfterStore{MemStore: chain.NewMemStore(), after: 1, cancel: cancel}
	r := newRig(t, store, nil)
	b, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		t.Fatal(err)
	}
	out := r.exec.Execute(ctx, req("1", "nothing", nil), r.ctx(executor.ProfileGoverned, b))
	if out.Kind() != executor.KindCancelled || out.Base().EvidenceError != nil || out.Base().CallExecuted || r.calls["nothing"].Load() != 0 {
		t.Fatalf("got %s %q evidence error %v; trail %+v", out.Kind(), out.Base().ReasonCode, out.Base().EvidenceError, out.Base().Trail)
	}
	if types := chainTypes(t, store.MemStore, b.ChainID()); strings.Contains(strings.Join(types, ","), string(chain.OperationStarted)) {
		t.Fatalf("chain %v", types)
	}
}

// cancelAfterStore cancels the caller's context once after appends
// successful appends (the cancellation arrives during the next one).
type cancelAfterStore struct {
	*chain.MemStore
	after, n int
	cancel   func()
}

func (s *cancelAfterStore) Append(ctx context.Context, r *chain.Record) (chain.AppendReceipt, error) {
	rc, err := s.MemStore.Append(ctx, r)
	if s.n++; s.n == s.after {
		s.cancel()
	}
	return rc, err
}

// TestExceptionSurvivesRecheck: a transformer changes the arguments of an
// operation whose soft denial an exception lifted at stage 7; stage 10
// re-evaluates the gates. The operation holds its grant: the recheck does
// not spend a second one (nor escalate because the only one is used), and
// exactly one exception_granted is recorded for it.
func TestExceptionSurvivesRecheck(t *testing.T) {
	store := chain.NewMemStore()
	r := newRig(t, store, func(c *executor.Config) {
		c.Transformers = []executor.Transformer{{Name: "rewrite", Transform: func(_ context.Context, _ string, args map[string]any) (map[string]any, error) {
			args["text"] = "rewritten"
			return args, nil
		}}}
	})
	b, _ := r.exec.OpenBoundary(r.ref(), true)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range 2 {
		if err := b.Grant(executor.ExceptionGrant{GrantID: fmt.Sprintf("00000000-0000-4000-8000-00000000fff%d", i), GateID: "notes", ToolID: "write_note",
			Actor: "user:lead", ReasonCode: "incident_4711", IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	ec := r.ctx(executor.ProfileCertifiable, b)
	for i := range 2 {
		out := r.exec.Execute(context.Background(), req(fmt.Sprint(i), "write_note", map[string]any{"text": "orig"}), ec)
		if out.Kind() != executor.KindSucceeded || !out.Base().Degraded {
			t.Fatalf("write %d with an exception: %s %q; trail %+v", i, out.Kind(), out.Base().ReasonCode, out.Base().Trail)
		}
	}
	// Two grants, two operations: the third has none left.
	if out := r.exec.Execute(context.Background(), req("3", "write_note", map[string]any{"text": "orig"}), ec); out.Kind() != executor.KindEscalated {
		t.Fatalf("third write: %s", out.Kind())
	}
	if n := strings.Count(strings.Join(chainTypes(t, store, b.ChainID()), ","), string(chain.ExceptionGranted)); n != 2 {
		t.Fatalf("%d exception_granted records, want 2", n)
	}
	res, err := r.exec.CloseBoundary(context.Background(), b)
	if err != nil || res.Certificate.ProcessGrade != "DEGRADED" || res.Certificate.GateSummary.ExceptionCount != 2 {
		t.Fatalf("close: %v %+v", err, res)
	}
}

const hardAndSoftPolicy = `package p
policies: team: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: {
		allow: ["echo", "write_note"]
		deny: ["echo"]
		approve: [{pattern: "echo", approver: "lead", expires_after: "1h"}, {pattern: "write_note", approver: "lead", expires_after: "1h"}]
	}
	gates: [{id: "notes", level: "soft", rules: ["approval*"]}]
}
`

// TestExceptionNotSpentOnHardDenial: an operation that a hard gate denies
// cannot be let through by an exception to its soft gate, so no grant is
// spent on it: no exception_granted, the outcome is not degraded, the
// certificate stays FULL, and the grant is still there for an operation
// it does lift.
func TestExceptionNotSpentOnHardDenial(t *testing.T) {
	snap := compilePolicy(t, hardAndSoftPolicy)
	store := chain.NewMemStore()
	r := newRig(t, store, func(c *executor.Config) { c.Policies = []*snapshot.Snapshot{snap} })
	r.snap = snap
	b, err := r.exec.OpenBoundary(r.ref(), true)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if err := b.Grant(executor.ExceptionGrant{GrantID: "00000000-0000-4000-8000-00000000ffff", GateID: "notes", ToolID: "*",
		Actor: "user:lead", ReasonCode: "incident_4711", IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ec := r.ctx(executor.ProfileCertifiable, b)
	out := r.exec.Execute(context.Background(), req("1", "echo", map[string]any{"text": "x"}), ec)
	if out.Kind() != executor.KindDenied || out.Base().Degraded || r.calls["echo"].Load() != 0 {
		t.Fatalf("echo: %s degraded=%v; trail %+v", out.Kind(), out.Base().Degraded, out.Base().Trail)
	}
	if types := chainTypes(t, store, b.ChainID()); strings.Contains(strings.Join(types, ","), string(chain.ExceptionGranted)) {
		t.Fatalf("an exception was recorded for a hard denial: %v", types)
	}
	// The grant was not spent: it lifts the next soft denial.
	if out := r.exec.Execute(context.Background(), req("2", "write_note", nil), ec); out.Kind() != executor.KindSucceeded || !out.Base().Degraded {
		t.Fatalf("write_note: %s degraded=%v", out.Kind(), out.Base().Degraded)
	}
	res, err := r.exec.CloseBoundary(context.Background(), b)
	if err != nil || res.Certificate.GateSummary.ExceptionCount != 1 {
		t.Fatalf("close: %v %+v", err, res)
	}
}

// TestNoOperationIDWithoutOperationStarted: a governed attempt refused at
// stage 4 before its operation_started was appended (the boundary closed,
// a failed policy_bound append) names no operation: OutcomeBase says the
// id is set once operation_started was appended, and no record carries
// the id it would name. Once operation_started was appended the id is
// reported, even when its durability then failed.
func TestNoOperationIDWithoutOperationStarted(t *testing.T) {
	r := newRig(t, chain.NewMemStore(), nil)
	b, _ := r.exec.OpenBoundary(r.ref(), false)
	if _, err := r.exec.CloseBoundary(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	out := r.exec.Execute(context.Background(), req("1", "nothing", nil), r.ctx(executor.ProfileGoverned, b))
	if out.Base().ReasonCode != "boundary_closed" || out.Base().OperationID != nil || len(out.Base().Records) != 0 {
		t.Fatalf("after close: %s %q operation %v records %v", out.Kind(), out.Base().ReasonCode, out.Base().OperationID, out.Base().Records)
	}
	// policy_bound fails: nothing of the operation is in the chain.
	fr := newRig(t, &faultStore{Store: chain.NewMemStore(), failAt: 1}, nil)
	fb, _ := fr.exec.OpenBoundary(fr.ref(), false)
	out = fr.exec.Execute(context.Background(), req("2", "nothing", nil), fr.ctx(executor.ProfileGoverned, fb))
	if out.Base().EvidenceError == nil || out.Base().OperationID != nil {
		t.Fatalf("policy_bound failed: %s operation %v", out.Kind(), out.Base().OperationID)
	}
	// operation_started appended, its durability failed: the id is named.
	ar := newRig(t, &asyncFaultStore{Store: chain.NewMemStore(), failAt: 2}, nil)
	ab, _ := ar.exec.OpenBoundary(ar.ref(), false)
	out = ar.exec.Execute(context.Background(), req("3", "nothing", nil), ar.ctx(executor.ProfileGoverned, ab))
	if out.Base().EvidenceError == nil || out.Base().OperationID == nil {
		t.Fatalf("operation_started not durable: %s operation %v", out.Kind(), out.Base().OperationID)
	}
	// Other profiles: set once the attempt passed preflight.
	if out := r.exec.Execute(context.Background(), req("4", "nothing", nil), r.ctx(executor.ProfileMinimal, nil)); out.Base().OperationID == nil {
		t.Fatal("minimal: no operation id")
	}
}

// TestCloseRetryAfterRefusedTaskClosed: a close whose task_closed never
// reached the chain (here the caller's context was already cancelled)
// leaves the task open: it used to mark the boundary closed, so no close
// could ever succeed and the chain stayed unclosed and uncertifiable. The
// retry closes it with exactly one task_closed and mints the certificate.
func TestCloseRetryAfterRefusedTaskClosed(t *testing.T) {
	store := chain.NewMemStore()
	r := newRig(t, store, nil)
	b, ec := r.openCertifiable(t)
	if out := r.exec.Execute(context.Background(), req("1", "nothing", nil), ec); out.Kind() != executor.KindSucceeded {
		t.Fatal(out.Kind(), out.Base().ReasonCode)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	var ge *executor.GovernanceEvidenceError
	if _, err := r.exec.CloseBoundary(cancelled, b); !errors.As(err, &ge) || ge.RecordType != "task_closed" {
		t.Fatalf("close with a cancelled context: %v", err)
	}
	// Still open: an operation runs, and the close succeeds.
	if out := r.exec.Execute(context.Background(), req("2", "nothing", nil), ec); out.Kind() != executor.KindSucceeded {
		t.Fatalf("after the failed close: %s %s", out.Kind(), out.Base().ReasonCode)
	}
	res, err := r.exec.CloseBoundary(context.Background(), b)
	if err != nil || res.Certificate == nil {
		t.Fatalf("retried close: %+v %v", res, err)
	}
	vr, err := store.Verify(context.Background(), b.ChainID(), res.Head)
	if err != nil || !vr.OK() || vr.Close == nil || vr.Close.OperationCount != 2 {
		t.Fatalf("chain: %v %+v", err, vr)
	}
	if _, err := r.exec.CloseBoundary(context.Background(), b); !errors.Is(err, executor.ErrBoundaryClosed) {
		t.Fatalf("third close: %v", err)
	}
}
