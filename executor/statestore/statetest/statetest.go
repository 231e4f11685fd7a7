// Package statetest is the conformance suite of the durable state stores:
// statestore.SQLite and the PostgreSQL store run the same tests of
// executor.StateStore, ProjectionStore, BudgetLedger and ApprovalLedger as
// docs/statestore.md describes them, through the readers both provide.
package statetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
	"polc.dev/polc/executor/statestore/internal/fixture"
	"polc.dev/polc/normalize"
)

// Store is what a state store under test provides.
type Store interface {
	executor.StateStore
	executor.ProjectionStore
	executor.BudgetLedger
	executor.ApprovalLedger
	Attempt(ctx context.Context, attemptID string) (executor.AttemptRecord, bool, error)
	Outbox(ctx context.Context, runID string) ([]statestore.OutboxEntry, error)
	Run(ctx context.Context, runID string) (statestore.Run, bool, error)
	Operation(ctx context.Context, operationID string) (statestore.Operation, bool, error)
}

// Subject is a store under test.
type Subject struct {
	// Open returns a new, empty store and a function that opens another
	// handle on the same store (as another process would); both are
	// closed when t ends.
	Open func(t *testing.T) (Store, func() Store)
}

// Run runs the suite.
func Run(t *testing.T, sub Subject) {
	for name, f := range map[string]func(*testing.T, Subject){
		"CommitRoundTrip":        commitRoundTrip,
		"CommitDuplicate":        commitDuplicate,
		"CommitInvalid":          commitInvalid,
		"OperationStatuses":      operationStatuses,
		"ApplyIdempotent":        applyIdempotent,
		"ApplyConflict":          applyConflict,
		"ApplyInvalid":           applyInvalid,
		"OperationConflicts":     operationConflicts,
		"ProjectorVersion":       projectorVersion,
		"BudgetAccounts":         budgetAccounts,
		"BudgetAcrossHandles":    budgetAcrossHandles,
		"ApprovalAcrossHandles":  approvalAcrossHandles,
		"CommitAcrossHandles":    commitAcrossHandles,
		"OperationAcrossHandles": operationAcrossHandles,
	} {
		t.Run(name, func(t *testing.T) { t.Parallel(); f(t, sub) })
	}
}

// RunConcurrent runs the suite's concurrency tests (callers name their
// test TestConcurrent…, for the race detector).
func RunConcurrent(t *testing.T, sub Subject) {
	t.Run("Commits", func(t *testing.T) { concurrentCommits(t, sub) })
	t.Run("BudgetReserve", func(t *testing.T) { concurrentReserve(t, sub) })
}

func absent(t *testing.T, s Store, a executor.AttemptRecord) {
	t.Helper()
	ctx := context.Background()
	if _, ok, err := s.Attempt(ctx, a.AttemptID); err != nil || ok {
		t.Errorf("attempt %s: ok=%v err=%v, want absent", a.AttemptID, ok, err)
	}
	if _, ok, err := s.Run(ctx, a.RunID); err != nil || ok {
		t.Errorf("run %s: ok=%v err=%v, want absent", a.RunID, ok, err)
	}
	if out, err := s.Outbox(ctx, a.RunID); err != nil || len(out) != 0 {
		t.Errorf("outbox of %s: %v %v, want empty", a.RunID, out, err)
	}
}

func commitRoundTrip(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, _ := sub.Open(t)
	a := fixture.Attempt("run-1", "a1", "m1", "m2")
	a.OwnerAttemptID, a.OperationID = fixture.Ptr("owner"), fixture.Ptr("op-1")
	a.StartedAt = fixture.T0.In(time.FixedZone("x", 3600)) // stored and returned in UTC
	fixture.MustCommit(t, s, a)
	b := fixture.Attempt("run-1", "a2")
	b.Outcome, b.ReasonCode, b.ResultDigest, b.CallExecuted = "denied", "policy.denied", nil, false
	fixture.MustCommit(t, s, b)
	got, ok, err := s.Attempt(ctx, "a1")
	if err != nil || !ok {
		t.Fatalf("Attempt: ok=%v err=%v", ok, err)
	}
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("attempt a1 (-committed +read):\n%s", diff)
	}
	got, _, _ = s.Attempt(ctx, "a2")
	if diff := cmp.Diff(b, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("attempt a2 (-committed +read):\n%s", diff)
	}
	run, ok, err := s.Run(ctx, "run-1")
	if err != nil || !ok || !run.CreatedAt.Equal(fixture.T0) || !cmp.Equal(run.Attempts, []string{"a1", "a2"}) {
		t.Errorf("run = %+v ok=%v err=%v", run, ok, err)
	}
	out, err := s.Outbox(ctx, "run-1")
	if err != nil || len(out) != 2 || out[0].MessageID != "m1" || out[1].MessageID != "m2" || out[0].Seq >= out[1].Seq || out[1].AttemptID != "a1" {
		t.Errorf("outbox = %+v %v", out, err)
	}
	if _, ok, err := s.Attempt(ctx, "nope"); ok || err != nil {
		t.Errorf("unknown attempt: ok=%v err=%v", ok, err)
	}
}

func commitDuplicate(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, _ := sub.Open(t)
	first := fixture.Attempt("run-1", "a", "m1")
	fixture.MustCommit(t, s, first)
	b := fixture.Attempt("run-2", "a", "m2")
	b.Outcome, b.ReasonCode = "failed", "callable.error"
	for name, second := range map[string]executor.AttemptRecord{"identical": first, "different": b} {
		var ce *executor.StateConflictError
		if err := s.CommitAttempt(ctx, second); !errors.As(err, &ce) || ce.Key != "attempt a" {
			t.Fatalf("%s: err = %v, want StateConflictError on attempt a", name, err)
		}
	}
	got, _, err := s.Attempt(ctx, "a")
	if err != nil || !cmp.Equal(first, got) {
		t.Errorf("first record changed: %+v %v", got, err)
	}
	absent(t, s, fixture.Attempt("run-2", "x", "m2"))
	// A message id already committed: nothing of the attempt is.
	c := fixture.Attempt("run-3", "c", "m3", "m1")
	var ce *executor.StateConflictError
	if err := s.CommitAttempt(ctx, c); !errors.As(err, &ce) || ce.Key != "outbox message m1" {
		t.Fatalf("reused message id: %v", err)
	}
	absent(t, s, c)
	// The refused commit did not take the attempt id: corrected, it lands.
	c.Outbox[1].MessageID = "m4"
	fixture.MustCommit(t, s, c)
}

func commitInvalid(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, _ := sub.Open(t)
	for name, mutate := range map[string]func(*executor.AttemptRecord){
		"no attempt id":    func(a *executor.AttemptRecord) { a.AttemptID = "" },
		"no run id":        func(a *executor.AttemptRecord) { a.RunID = "" },
		"no outcome":       func(a *executor.AttemptRecord) { a.Outcome = "" },
		"no profile":       func(a *executor.AttemptRecord) { a.Profile = "" },
		"no message id":    func(a *executor.AttemptRecord) { a.Outbox[0].MessageID = "" },
		"no topic":         func(a *executor.AttemptRecord) { a.Outbox[0].Topic = "" },
		"payload not json": func(a *executor.AttemptRecord) { a.Outbox[0].PayloadJSON = "{nope" },
		"year 10000":       func(a *executor.AttemptRecord) { a.FinishedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
	} {
		a := fixture.Attempt("run", "a", "m")
		mutate(&a)
		var ie *statestore.InputError
		if err := s.CommitAttempt(ctx, a); !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want InputError", name, err)
		}
	}
	absent(t, s, fixture.Attempt("run", "a", "m"))
}

func op(t *testing.T, s Store, id string) statestore.Operation {
	t.Helper()
	o, ok, err := s.Operation(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("operation %s: ok=%v err=%v", id, ok, err)
	}
	return o
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func operationStatuses(t *testing.T, sub Subject) {
	cases := []struct {
		name     string
		terminal chain.Payload
		status   string
		reason   string
		result   string
		duration bool
	}{
		{"completed", chain.CallableCompletedPayload{DurationUS: 7, ResultDigest: fixture.Digest}, statestore.StatusSucceeded, "", fixture.Digest, true},
		{"denied", chain.OperationDeniedPayload{Disposition: "deny", ReasonCode: "policy.denied"}, statestore.StatusDenied, "policy.denied", "", false},
		{"escalated", chain.OperationDeniedPayload{Disposition: "escalate", ApproverClass: fixture.Ptr("ops"), ReasonCode: "policy.escalate"}, statestore.StatusEscalated, "policy.escalate", "", false},
		{"failed", chain.CallableFailedPayload{DurationUS: 7, ErrorClass: "io"}, statestore.StatusFailed, "io", "", true},
		{"cancelled", chain.OperationCancelledPayload{DurationUS: 7}, statestore.StatusCancelled, "", "", true},
		{"timed out", chain.OperationTimedOutPayload{DurationUS: 7}, statestore.StatusTimedOut, "", "", true},
		{"ambiguous", chain.ExternalResultAmbiguousPayload{DurationUS: 7, ReasonCode: "net.reset"}, statestore.StatusAmbiguous, "net.reset", "", true},
	}
	s, _ := sub.Open(t)
	for i, c := range cases {
		opID := fmt.Sprintf("op%d", i)
		name := "p" + opID
		fixture.MustApply(t, s, name, []executor.ProjectedRecord{fixture.Started("c"+opID, "r0", 0, opID)}, "1")
		o := op(t, s, opID)
		if o.Status != statestore.StatusRunning || o.TerminalRecordID != nil || o.ToolID != "tool."+opID || o.AttemptID != fixture.AttemptUUID ||
			o.RunID == nil || *o.RunID != "run-"+opID || o.StartedRecordID != "r0" {
			t.Fatalf("%s: after start: %+v", c.name, o)
		}
		fixture.MustApply(t, s, name, []executor.ProjectedRecord{fixture.Terminal("c"+opID, "r1", 1, opID, c.terminal)}, "2")
		o = op(t, s, opID)
		if o.Status != c.status || deref(o.TerminalRecordID) != "r1" || deref(o.TerminalType) != string(c.terminal.RecordType()) ||
			deref(o.ReasonCode) != c.reason || deref(o.ResultDigest) != c.result ||
			(o.DurationUS != nil) != c.duration || (c.duration && *o.DurationUS != 7) {
			t.Errorf("%s: after terminal: %+v", c.name, o)
		}
		second := fixture.Terminal("c"+opID, "r2", 2, opID, chain.OperationCancelledPayload{DurationUS: 1})
		var ce *executor.StateConflictError
		if err := s.ApplyProjection(context.Background(), name, 1, []executor.ProjectedRecord{second}, "3"); !errors.As(err, &ce) || ce.Key != "operation "+opID {
			t.Fatalf("%s: second terminal: err = %v, want StateConflictError", c.name, err)
		}
		if after := op(t, s, opID); after.Status != c.status || deref(after.TerminalRecordID) != "r1" {
			t.Errorf("%s: second terminal changed the operation: %+v", c.name, after)
		}
		if cur, _ := s.ProjectionCursor(context.Background(), name); cur != "2" {
			t.Errorf("%s: cursor = %q after a refused batch, want 2", c.name, cur)
		}
		fixture.MustApply(t, s, name, []executor.ProjectedRecord{fixture.Terminal("c"+opID, "r1", 1, opID, c.terminal)}, "2")
	}
}

func applyIdempotent(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, _ := sub.Open(t)
	batch := []executor.ProjectedRecord{
		fixture.Started("c", "r0", 0, "op"),
		fixture.Terminal("c", "r1", 1, "op", chain.CallableCompletedPayload{DurationUS: 3, ResultDigest: fixture.Digest}),
	}
	fixture.MustApply(t, s, "p", batch, "2")
	fixture.MustApply(t, s, "p", batch, "2")
	fixture.MustApply(t, s, "p", append(batch, batch...), "2")
	if o := op(t, s, "op"); o.Status != statestore.StatusSucceeded {
		t.Errorf("status %s", o.Status)
	}
	if err := s.ApplyProjection(ctx, "p2", 2, batch, "2"); err != nil {
		t.Fatal(err)
	}
	if run, ok, err := s.Run(ctx, "run-op"); err != nil || !ok || !cmp.Equal(run.Operations, []string{"op"}) {
		t.Errorf("run-op: %+v %v %v", run, ok, err)
	}
}

func applyConflict(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, _ := sub.Open(t)
	r0 := fixture.Started("c", "r0", 0, "op")
	fixture.MustApply(t, s, "p", []executor.ProjectedRecord{r0}, "1")
	tampered := r0
	tampered.ChainHash = strings.Repeat("0", 64)
	batch := []executor.ProjectedRecord{
		fixture.Started("c2", "n0", 0, "op2"),
		tampered,
		fixture.Terminal("c", "r1", 1, "op", chain.OperationTimedOutPayload{DurationUS: 1}),
	}
	var pe *executor.ProjectionConflictError
	if err := s.ApplyProjection(ctx, "p", 1, batch, "9"); !errors.As(err, &pe) || pe.RecordID != "r0" || pe.Projected != r0.ChainHash || pe.Got != tampered.ChainHash {
		t.Fatalf("err = %v, want ProjectionConflictError on r0", err)
	}
	if _, ok, _ := s.Operation(ctx, "op2"); ok {
		t.Error("op2 was projected from a refused batch")
	}
	if o := op(t, s, "op"); o.Status != statestore.StatusRunning {
		t.Errorf("op status %s, want running", o.Status)
	}
	if cur, _ := s.ProjectionCursor(ctx, "p"); cur != "1" {
		t.Errorf("cursor = %q, want 1", cur)
	}
	// Under another version too: a record never changes.
	if err := s.ApplyProjection(ctx, "q", 2, []executor.ProjectedRecord{tampered}, "1"); !errors.As(err, &pe) {
		t.Errorf("another version: %v, want ProjectionConflictError", err)
	}
}

func applyInvalid(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, _ := sub.Open(t)
	good := fixture.Started("c", "r0", 0, "op")
	orphan := fixture.Terminal("c", "r5", 5, "never-started", chain.OperationCancelledPayload{DurationUS: 1})
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
		var ie *statestore.InputError
		if err := s.ApplyProjection(ctx, "p", 1, batch, "x"); !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want InputError", name, err)
		}
	}
	var ie *statestore.InputError
	if err := s.ApplyProjection(ctx, "", 1, nil, "x"); !errors.As(err, &ie) {
		t.Errorf("empty projector: %v", err)
	}
	if err := s.ApplyProjection(ctx, "p", 0, nil, "x"); !errors.As(err, &ie) {
		t.Errorf("version 0: %v", err)
	}
	if _, ok, _ := s.Operation(ctx, "op"); ok {
		t.Error("an operation was projected from refused batches")
	}
	if cur, err := s.ProjectionCursor(ctx, "p"); cur != "" || err != nil {
		t.Errorf("cursor = %q, %v; want none", cur, err)
	}
}

func operationConflicts(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, _ := sub.Open(t)
	fixture.MustApply(t, s, "p", []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op")}, "1")
	var ce *executor.StateConflictError
	if err := s.ApplyProjection(ctx, "p", 1, []executor.ProjectedRecord{fixture.Started("c", "r1", 1, "op")}, "2"); !errors.As(err, &ce) {
		t.Errorf("second start: %v", err)
	}
	other := fixture.Terminal("c-other", "x1", 1, "op", chain.OperationCancelledPayload{DurationUS: 1})
	if err := s.ApplyProjection(ctx, "p", 1, []executor.ProjectedRecord{other}, "2"); !errors.As(err, &ce) {
		t.Errorf("terminal from another chain: %v", err)
	}
	if o := op(t, s, "op"); o.Status != statestore.StatusRunning || o.StartedRecordID != "r0" {
		t.Errorf("operation changed: %+v", o)
	}
}

func projectorVersion(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, _ := sub.Open(t)
	fixture.MustApply(t, s, "p", []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op")}, "1")
	var ce *executor.StateConflictError
	if err := s.ApplyProjection(ctx, "p", 2, nil, "5"); !errors.As(err, &ce) || ce.Key != "projector p" {
		t.Fatalf("another version under a name: %v", err)
	}
	if cur, _ := s.ProjectionCursor(ctx, "p"); cur != "1" {
		t.Errorf("cursor = %q, want 1", cur)
	}
}

var (
	budgetKey = executor.BudgetKey{Tenant: "acme", Principal: "agent:a", PolicyID: "p"}
	hour      = int64(time.Hour / time.Microsecond)
	bt0       = time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
)

func budgetAccounts(t *testing.T, sub Subject) {
	s, _ := sub.Open(t)
	ctx := context.Background()
	r1, before, err := s.Reserve(ctx, budgetKey, hour, bt0.Add(time.Minute))
	if err != nil || before != (normalize.Usage{}) {
		t.Fatalf("first reserve: %v, usage %+v", err, before)
	}
	r2, before, err := s.Reserve(ctx, budgetKey, hour, bt0.Add(2*time.Minute))
	if err != nil || before.Calls != 1 {
		t.Fatalf("second reserve: %v, usage %+v", err, before)
	}
	if r1.WindowStart != bt0.UnixMicro() || r2.WindowStart != r1.WindowStart {
		t.Fatalf("windows %d, %d", r1.WindowStart, r2.WindowStart)
	}
	if err := s.Release(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, r2, normalize.Usage{Tokens: 7, WallMicroseconds: 300}); err != nil {
		t.Fatal(err)
	}
	want := normalize.Usage{Calls: 1, Tokens: 7, WallMicroseconds: 300}
	if u, err := s.Usage(ctx, budgetKey, hour, bt0.Add(59*time.Minute)); err != nil || u != want {
		t.Fatalf("usage %+v (%v), want %+v", u, err, want)
	}
	if u, _ := s.Usage(ctx, executor.BudgetKey{Tenant: "acme", Principal: "agent:b", PolicyID: "p"}, hour, bt0); u != (normalize.Usage{}) {
		t.Errorf("another principal's usage %+v", u)
	}
	if u, _ := s.Usage(ctx, budgetKey, 0, bt0); u != want {
		t.Errorf("the lifetime window's usage %+v, want %+v", u, want)
	}
	r3, before, err := s.Reserve(ctx, budgetKey, hour, bt0.Add(time.Hour))
	if err != nil || before != (normalize.Usage{}) || r3.WindowStart != bt0.Add(time.Hour).UnixMicro() {
		t.Fatalf("reserve in the next window: %v, usage %+v, window %d", err, before, r3.WindowStart)
	}
	if err := s.Settle(ctx, r2, normalize.Usage{Tokens: 1000}); err != nil {
		t.Fatal(err)
	}
	if u, _ := s.Usage(ctx, budgetKey, hour, bt0.Add(time.Hour)); u != (normalize.Usage{Calls: 1}) {
		t.Errorf("next window's usage %+v, want one call", u)
	}
	if err := s.Charge(ctx, budgetKey, hour, bt0.Add(time.Hour), normalize.Usage{CostMicrounits: 5}); err != nil {
		t.Fatal(err)
	}
	if u, _ := s.Usage(ctx, budgetKey, hour, bt0.Add(time.Hour)); u != (normalize.Usage{Calls: 1, CostMicrounits: 5}) {
		t.Errorf("after a charge: %+v", u)
	}
	// A clock stepped back into the ended window counts in the later one.
	if _, before, err := s.Reserve(ctx, budgetKey, hour, bt0); err != nil || before != (normalize.Usage{Calls: 1, CostMicrounits: 5}) {
		t.Errorf("reserve with the clock stepped back: %v, usage %+v; want the later window's", err, before)
	}
	var ie *statestore.InputError
	if err := s.Settle(ctx, r3, normalize.Usage{Tokens: -1}); !errors.As(err, &ie) {
		t.Errorf("negative settlement: %v, want InputError", err)
	}
	if _, _, err := s.Reserve(ctx, executor.BudgetKey{Tenant: "acme"}, hour, bt0); !errors.As(err, &ie) {
		t.Errorf("empty key: %v, want InputError", err)
	}
	if !s.Persistent() {
		t.Error("not persistent")
	}
}

func budgetAcrossHandles(t *testing.T, sub Subject) {
	s, other := sub.Open(t)
	ctx := context.Background()
	for range 3 {
		r, _, err := s.Reserve(ctx, budgetKey, 0, bt0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Settle(ctx, r, normalize.Usage{WallMicroseconds: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if u, err := other().Usage(ctx, budgetKey, 0, bt0.Add(1000*time.Hour)); err != nil || u != (normalize.Usage{Calls: 3, WallMicroseconds: 30}) {
		t.Fatalf("usage seen by another handle %+v (%v)", u, err)
	}
}

func approvalAcrossHandles(t *testing.T, sub Subject) {
	s, other := sub.Open(t)
	ctx := context.Background()
	nonce := strings.Repeat("ab", 32)
	if err := s.UseApprovalNonce(ctx, nonce, "a1", bt0); err != nil {
		t.Fatal(err)
	}
	if err := other().UseApprovalNonce(ctx, nonce, "a1", bt0); !errors.Is(err, executor.ErrApprovalReplayed) {
		t.Fatalf("another handle: %v, want replayed", err)
	}
	if err := s.UseApprovalNonce(ctx, strings.Repeat("cd", 32), "a2", bt0); err != nil {
		t.Fatalf("a fresh nonce: %v", err)
	}
}

func commitAcrossHandles(t *testing.T, sub Subject) {
	s, other := sub.Open(t)
	ctx := context.Background()
	fixture.MustCommit(t, s, fixture.Attempt("run", "a", "m"))
	o := other()
	var ce *executor.StateConflictError
	if err := o.CommitAttempt(ctx, fixture.Attempt("run", "a", "m2")); !errors.As(err, &ce) {
		t.Fatalf("another handle committing the same attempt: %v", err)
	}
	if a, ok, err := o.Attempt(ctx, "a"); err != nil || !ok || len(a.Outbox) != 1 {
		t.Fatalf("another handle reads %+v %v %v", a, ok, err)
	}
}

func operationAcrossHandles(t *testing.T, sub Subject) {
	s, other := sub.Open(t)
	fixture.MustApply(t, s, "p", []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op")}, "1")
	o := other()
	if cur, err := o.ProjectionCursor(context.Background(), "p"); cur != "1" || err != nil {
		t.Fatalf("cursor seen by another handle: %q %v", cur, err)
	}
	fixture.MustApply(t, o, "p", []executor.ProjectedRecord{fixture.Terminal("c", "r1", 1, "op", chain.OperationCancelledPayload{DurationUS: 1})}, "2")
	if got := op(t, s, "op"); got.Status != statestore.StatusCancelled {
		t.Errorf("status %s", got.Status)
	}
}

func concurrentCommits(t *testing.T, sub Subject) {
	ctx := context.Background()
	s, other := sub.Open(t)
	handles := []Store{s, other()}
	const n, runs = 48, 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			run := fmt.Sprintf("run-%d", i%runs)
			id := fmt.Sprintf("a-%02d", i)
			h := handles[i%2]
			errs[i] = h.CommitAttempt(ctx, fixture.Attempt(run, id, id+"-m0", id+"-m1"))
			if errs[i] == nil {
				_, _, errs[i] = h.Attempt(ctx, id)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("goroutine %d: %v", i, err)
		}
	}
	for r := range runs {
		run, ok, err := s.Run(ctx, fmt.Sprintf("run-%d", r))
		if err != nil || !ok || len(run.Attempts) != n/runs {
			t.Errorf("run-%d: %d attempts ok=%v err=%v", r, len(run.Attempts), ok, err)
		}
		out, err := s.Outbox(ctx, fmt.Sprintf("run-%d", r))
		if err != nil || len(out) != 2*n/runs {
			t.Errorf("run-%d: %d messages err=%v", r, len(out), err)
		}
	}
	for i := range n {
		a, ok, err := s.Attempt(ctx, fmt.Sprintf("a-%02d", i))
		if err != nil || !ok || len(a.Outbox) != 2 {
			t.Errorf("attempt %d: ok=%v err=%v outbox=%d", i, ok, err, len(a.Outbox))
		}
	}
}

func concurrentReserve(t *testing.T, sub Subject) {
	s, other := sub.Open(t)
	handles := []Store{s, other()}
	const n = 32
	seen := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, u, err := handles[i%2].Reserve(context.Background(), budgetKey, hour, bt0)
			if err != nil {
				t.Error(err)
			}
			seen[i] = u.Calls
		})
	}
	wg.Wait()
	counts := map[int64]bool{}
	for _, c := range seen {
		counts[c] = true
	}
	if len(counts) != n {
		t.Fatalf("reservations saw %v: want %d distinct counts", seen, n)
	}
}
