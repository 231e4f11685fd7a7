package executor_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
)

// ---- evidence fixtures ----

const policyID = "11111111-1111-4111-8111-111111111111"

var (
	chainA = "aaaaaaaa-0000-4000-8000-000000000001"
	chainB = "bbbbbbbb-0000-4000-8000-000000000002"
	chainC = "cccccccc-0000-4000-8000-000000000003"
	digest = strings.Repeat("ab", 32)
	when   = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
)

func uuidN(kind, n int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", kind, n) }

func ptr[T any](v T) *T { return &v }

// step is one record to append: a draft without sequence or hashes.
type step struct {
	chainID string
	id      string
	op      *string
	sup     *string
	p       chain.Payload
}

// appendAll appends the steps in order through one chain.Writer per chain,
// so the store's append (and projection cursor) order is the step order.
func appendAll(t testing.TB, s chain.Store, steps []step) {
	t.Helper()
	ctx := context.Background()
	ws := map[string]*chain.Writer{}
	seq := map[string]int{}
	for i, st := range steps {
		w := ws[st.chainID]
		if w == nil {
			w = &chain.Writer{Store: s, ChainID: st.chainID}
			ws[st.chainID] = w
		}
		// The time depends on the position in the chain only, so the same
		// chain built beside other chains has the same records.
		at := when.Add(time.Duration(seq[st.chainID]) * time.Millisecond)
		seq[st.chainID]++
		_, _, err := w.Append(ctx, chain.Draft{RecordID: st.id, OperationID: st.op, PolicyID: policyID, PolicyVersion: "1",
			Payload: st.p, SupersedesRecordID: st.sup, CreatedAt: at})
		if err != nil {
			t.Fatalf("append step %d (%s): %v", i, st.p.RecordType(), err)
		}
	}
}

// opSteps are the records of one operation: policy_bound, operation_started,
// gate_evaluated and, unless term is nil, its terminal.
func opSteps(chainID string, n int, run *string, term chain.Payload) []step {
	op := uuidN(0x0e, n)
	s := []step{
		{chainID, uuidN(0x1, n), &op, nil, chain.PolicyBoundPayload{EffectBackendID: "inproc", EffectCapabilityDigest: digest, PolicyDigest: digest, TaskBoundaryID: uuidN(0x7b, 1)}},
		{chainID, uuidN(0x2, n), &op, nil, chain.OperationStartedPayload{AttemptID: uuidN(0xa7, n), RequestDigest: digest, RunID: run, ToolID: fmt.Sprintf("tool.%d", n)}},
		{chainID, uuidN(0x3, n), &op, nil, chain.GateEvaluatedPayload{ArgumentsDigest: digest, Decision: "allow", GateID: "g", Level: "hard", ReasonCode: "ok", ResultID: uuidN(0x4, n), RuleIDs: []string{"r1"}}},
	}
	if term != nil {
		s = append(s, step{chainID, uuidN(0x5, n), &op, nil, term})
	}
	return s
}

// interleave merges per-chain step lists round-robin, so a page of the
// projection holds records of several chains.
func interleave(lists ...[]step) []step {
	var out []step
	for i := 0; ; i++ {
		added := false
		for _, l := range lists {
			if i < len(l) {
				out = append(out, l[i])
				added = true
			}
		}
		if !added {
			return out
		}
	}
}

// scenario is three chains with every terminal type, an operation still
// running, a superseded record and a closed chain. want maps each operation
// id to its final status.
func scenario() (steps []step, want map[string]string) {
	run1, run2 := ptr("run-1"), ptr("run-2")
	var a, b, c []step
	want = map[string]string{}
	add := func(dst *[]step, chainID string, n int, run *string, term chain.Payload, status string) {
		*dst = append(*dst, opSteps(chainID, n, run, term)...)
		want[uuidN(0x0e, n)] = status
	}
	add(&a, chainA, 1, run1, chain.CallableCompletedPayload{DurationUS: 10, ResultDigest: digest}, statestore.StatusSucceeded)
	add(&a, chainA, 2, run1, chain.OperationDeniedPayload{Disposition: "deny", ReasonCode: "policy.denied"}, statestore.StatusDenied)
	add(&a, chainA, 3, run1, chain.OperationDeniedPayload{Disposition: "escalate", ApproverClass: ptr("ops"), ReasonCode: "policy.escalate"}, statestore.StatusEscalated)
	add(&a, chainA, 4, nil, nil, statestore.StatusRunning)
	add(&b, chainB, 5, run1, chain.CallableFailedPayload{DurationUS: 11, ErrorClass: "io"}, statestore.StatusFailed)
	add(&b, chainB, 6, run2, chain.OperationCancelledPayload{DurationUS: 12}, statestore.StatusCancelled)
	b = append(b, step{chainB, uuidN(0x6, 6), nil, ptr(uuidN(0x3, 6)), chain.RecordSupersededPayload{ReasonCode: "gate.rerun"}})
	add(&b, chainB, 7, run2, chain.OperationTimedOutPayload{DurationUS: 13}, statestore.StatusTimedOut)
	add(&c, chainC, 8, run2, chain.ExternalResultAmbiguousPayload{DurationUS: 14, ReasonCode: "net.reset"}, statestore.StatusAmbiguous)
	add(&c, chainC, 9, run2, chain.CallableCompletedPayload{DurationUS: 15, ResultDigest: digest}, statestore.StatusSucceeded)
	c = append(c, step{chainC, uuidN(0x6, 9), nil, nil, chain.TaskClosedPayload{
		OpenedAt: chain.FormatTime(when), ClosedAt: chain.FormatTime(when.Add(time.Hour)), OperationCount: 2, TaskBoundaryID: uuidN(0x7b, 1)}})
	return interleave(a, b, c), want
}

// source is an evidence store under test. restart returns the store as a
// restarted process would see it: the same instance for MemStore, a new
// FileStore over a copy of the directory (a copy, so parallel subtests do
// not share one store's files).
type source struct {
	name  string
	store interface {
		chain.Store
		chain.ProjectionSource
	}
	restart func(t *testing.T) (chain.Store, chain.ProjectionSource)
}

func sources(t *testing.T, steps []step) []source {
	mem := chain.NewMemStore()
	appendAll(t, mem, steps)
	dir := t.TempDir()
	fs, err := chain.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	appendAll(t, fs, steps)
	return []source{
		{"mem", mem, func(*testing.T) (chain.Store, chain.ProjectionSource) { return mem, mem }},
		{"file", fs, func(t *testing.T) (chain.Store, chain.ProjectionSource) {
			cp := t.TempDir()
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), ".lock") {
					continue
				}
				b, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(cp, e.Name()), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			re, err := chain.OpenFileStore(cp)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { re.Close() })
			return re, re
		}},
	}
}

// ---- projection fixtures ----

func openState(t *testing.T, path string) *statestore.SQLite {
	t.Helper()
	s, err := statestore.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dump returns every row of the projection tables, read through an
// independent handle on the file, so equal dumps mean equal projections
// and a duplicate row would show.
func dump(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []string
	for _, q := range []string{
		"SELECT * FROM projected_records ORDER BY chain_id, record_id, projection_version",
		"SELECT * FROM operations ORDER BY operation_id",
		"SELECT * FROM projection_cursors ORDER BY projector",
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(vals...))
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func countRows(t *testing.T, path, query string, args ...any) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// endCursor is the cursor after every receipt of src.
func endCursor(t *testing.T, src chain.ProjectionSource) (string, int) {
	t.Helper()
	page, err := src.Scan(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return page.NextCursor, len(page.Receipts)
}

var errInjected = errors.New("injected crash")

// faultProjectionStore fails the failAt-th ApplyProjection call (1-based): before
// calling the real store (a crash before the transaction), or after the
// real store committed (a crash between commit and return).
type faultProjectionStore struct {
	inner       executor.ProjectionStore
	failAt      int
	afterCommit bool
	calls       int
}

func (f *faultProjectionStore) ApplyProjection(ctx context.Context, name string, v int, recs []executor.ProjectedRecord, next string) error {
	f.calls++
	if f.calls != f.failAt {
		return f.inner.ApplyProjection(ctx, name, v, recs, next)
	}
	if f.afterCommit {
		if err := f.inner.ApplyProjection(ctx, name, v, recs, next); err != nil {
			return fmt.Errorf("real apply failed before the injected crash: %w", err)
		}
	}
	return errInjected
}

func (f *faultProjectionStore) ProjectionCursor(ctx context.Context, name string) (string, error) {
	return f.inner.ProjectionCursor(ctx, name)
}

const pageSize = 4

func projector(chains chain.Store, src chain.ProjectionSource, store executor.ProjectionStore) *executor.EvidenceProjector {
	return &executor.EvidenceProjector{Name: "ops", Version: 1, Source: src, Chains: chains, Store: store, PageSize: pageSize}
}

// ---- tests ----

func TestProjectorDrain(t *testing.T) {
	t.Parallel()
	steps, want := scenario()
	for _, src := range sources(t, steps) {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "state.db")
			st := openState(t, path)
			p := projector(src.store, src.store, st)
			if err := p.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if n := countRows(t, path, "SELECT count(*) FROM projected_records"); n != len(steps) {
				t.Errorf("%d projected records, want %d", n, len(steps))
			}
			for opID, status := range want {
				op, ok, err := st.Operation(ctx, opID)
				if err != nil || !ok || op.Status != status {
					t.Errorf("operation %s: %+v ok=%v err=%v, want %s", opID, op, ok, err, status)
				}
			}
			if n := countRows(t, path, "SELECT count(*) FROM operations"); n != len(want) {
				t.Errorf("%d operations, want %d", n, len(want))
			}
			run, ok, err := st.Run(ctx, "run-2")
			if err != nil || !ok || len(run.Operations) != 4 {
				t.Errorf("run-2: %+v ok=%v err=%v, want 4 operations", run, ok, err)
			}
			end, _ := endCursor(t, src.store)
			if cur, _ := st.ProjectionCursor(ctx, "ops"); cur != end {
				t.Errorf("cursor %q, want %q", cur, end)
			}

			// A second Drain finds nothing and changes nothing.
			before := dump(t, path)
			if n, err := p.Step(ctx); n != 0 || err != nil {
				t.Errorf("Step after Drain = %d, %v", n, err)
			}
			if err := p.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, dump(t, path)); diff != "" {
				t.Errorf("second Drain changed the projection:\n%s", diff)
			}
		})
	}
}

// Crash the projector at every ApplyProjection call, before the transaction
// and after its commit; a fresh projector over the reopened store and a
// restarted evidence store then drains to exactly the clean projection.
func TestProjectorCrashRecovery(t *testing.T) {
	t.Parallel()
	steps, _ := scenario()
	for _, src := range sources(t, steps) {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cleanPath := filepath.Join(t.TempDir(), "clean.db")
			counter := &faultProjectionStore{inner: openState(t, cleanPath)}
			if err := projector(src.store, src.store, counter).Drain(ctx); err != nil {
				t.Fatal(err)
			}
			clean := dump(t, cleanPath)
			calls := counter.calls
			end, n := endCursor(t, src.store)
			if want := (n + pageSize - 1) / pageSize; calls != want {
				t.Fatalf("clean run made %d applies, want %d", calls, want)
			}
			for k := 1; k <= calls; k++ {
				for _, after := range []bool{false, true} {
					name := fmt.Sprintf("before-tx@%d", k)
					if after {
						name = fmt.Sprintf("after-commit@%d", k)
					}
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						path := filepath.Join(t.TempDir(), "state.db")
						st := openState(t, path)
						fault := &faultProjectionStore{inner: st, failAt: k, afterCommit: after}
						if err := projector(src.store, src.store, fault).Drain(ctx); !errors.Is(err, errInjected) {
							t.Fatalf("Drain = %v, want the injected crash", err)
						}
						if fault.calls != k {
							t.Fatalf("crashed after %d applies, want %d", fault.calls, k)
						}
						// The crash left exactly the committed pages: k-1, or k
						// when the crash came after the commit.
						committed := k - 1
						if after {
							committed = k
						}
						if got, want := countRows(t, path, "SELECT count(*) FROM projected_records"), min(committed*pageSize, n); got != want {
							t.Fatalf("after the crash %d records are projected, want %d", got, want)
						}
						if err := st.Close(); err != nil {
							t.Fatal(err)
						}

						// Restart: new store handle, new evidence store, new projector.
						st2 := openState(t, path)
						chains, source := src.restart(t)
						if err := projector(chains, source, st2).Drain(ctx); err != nil {
							t.Fatalf("Drain after restart: %v", err)
						}
						if diff := cmp.Diff(clean, dump(t, path)); diff != "" {
							t.Errorf("projection after crash and restart differs from a clean run (-clean +got):\n%s", diff)
						}
						if cur, _ := st2.ProjectionCursor(ctx, "ops"); cur != end {
							t.Errorf("cursor %q, want %q", cur, end)
						}
					})
				}
			}
		})
	}
}

// dupSource delivers every receipt of a page twice, as an at-least-once
// source may.
type dupSource struct{ chain.ProjectionSource }

func (d dupSource) Scan(ctx context.Context, after string, limit int) (chain.ProjectionPage, error) {
	p, err := d.ProjectionSource.Scan(ctx, after, limit)
	var twice []chain.ProjectionReceipt
	for _, r := range p.Receipts {
		twice = append(twice, r, r)
	}
	p.Receipts = twice
	return p, err
}

// Duplicate deliveries, within a page and by a second projector of the same
// version, leave the projection unchanged.
func TestProjectorDuplicateDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	steps, _ := scenario()
	mem := chain.NewMemStore()
	appendAll(t, mem, steps)
	cleanPath := filepath.Join(t.TempDir(), "clean.db")
	if err := projector(mem, mem, openState(t, cleanPath)).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	st := openState(t, path)
	if err := projector(mem, dupSource{mem}, st).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(dump(t, cleanPath), dump(t, path)); diff != "" {
		t.Errorf("duplicated delivery changed the projection (-clean +got):\n%s", diff)
	}
	other := projector(mem, mem, st)
	other.Name = "ops-again"
	if err := other.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, path, "SELECT count(*) FROM projected_records"); n != len(steps) {
		t.Errorf("%d projected records after a second projector, want %d", n, len(steps))
	}
}

// A replay that carries an applied record id with a different chain_hash
// fails closed: ProjectionConflictError, and nothing of that page, not even
// the new records delivered with it, is applied.
func TestProjectorTamperedReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	op := uuidN(0x0e, 1)
	original := opSteps(chainA, 1, ptr("run-1"), chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: digest})
	first := chain.NewMemStore()
	appendAll(t, first, original)
	path := filepath.Join(t.TempDir(), "state.db")
	st := openState(t, path)
	if err := projector(first, first, st).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	before := dump(t, path)

	// The same chain rewritten: record 2 (gate_evaluated) says something
	// else, so it and every later record have new chain hashes under the
	// same record ids. A new chain's records come first in the page.
	tampered := append([]step(nil), original...)
	g := tampered[2].p.(chain.GateEvaluatedPayload)
	g.ReasonCode = "rewritten"
	tampered[2].p = g
	fresh := opSteps(chainB, 2, ptr("run-1"), nil)
	second := chain.NewMemStore()
	appendAll(t, second, append(fresh, tampered...))

	replay := projector(second, second, st)
	replay.Name, replay.PageSize = "replay", 100
	err := replay.Drain(ctx)
	var pe *executor.ProjectionConflictError
	if !errors.As(err, &pe) || pe.RecordID != tampered[2].id || pe.ChainID != chainA {
		t.Fatalf("Drain = %v, want ProjectionConflictError on %s", err, tampered[2].id)
	}
	if diff := cmp.Diff(before, dump(t, path)); diff != "" {
		t.Errorf("the refused page changed the projection:\n%s", diff)
	}
	if _, ok, _ := st.Operation(ctx, uuidN(0x0e, 2)); ok {
		t.Error("an operation from the refused page was projected")
	}
	if o, _, _ := st.Operation(ctx, op); o.Status != statestore.StatusSucceeded {
		t.Errorf("original operation is %s", o.Status)
	}
	if cur, _ := st.ProjectionCursor(ctx, "replay"); cur != "" {
		t.Errorf("replay cursor moved to %q", cur)
	}
}

// A second terminal for an operation is refused; the operation keeps its
// first terminal and the cursor stops before the offending record.
func TestProjectorSecondTerminalRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	steps := opSteps(chainA, 1, nil, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: digest})
	op := uuidN(0x0e, 1)
	steps = append(steps, step{chainA, uuidN(0x9, 1), &op, nil, chain.CallableFailedPayload{DurationUS: 2, ErrorClass: "late"}})
	mem := chain.NewMemStore()
	appendAll(t, mem, steps)
	st := openState(t, filepath.Join(t.TempDir(), "state.db"))
	p := projector(mem, mem, st)
	p.PageSize = 1
	err := p.Drain(ctx)
	var ce *executor.StateConflictError
	if !errors.As(err, &ce) || ce.Key != "operation "+op {
		t.Fatalf("Drain = %v, want StateConflictError on the operation", err)
	}
	o, _, _ := st.Operation(ctx, op)
	if o.Status != statestore.StatusSucceeded || o.TerminalRecordID == nil || *o.TerminalRecordID != uuidN(0x5, 1) {
		t.Errorf("operation = %+v, want the first terminal kept", o)
	}
	page, _ := mem.Scan(ctx, "", len(steps)-1)
	if cur, _ := st.ProjectionCursor(ctx, "ops"); cur != page.NextCursor {
		t.Errorf("cursor %q, want %q (just before the second terminal)", cur, page.NextCursor)
	}
	// Fail closed: it does not get past it on a retry either.
	if err := p.Drain(ctx); !errors.As(err, &ce) {
		t.Errorf("retry: %v", err)
	}
}

// tamperSource rewrites the receipts of a page.
type tamperSource struct {
	chain.ProjectionSource
	edit func(*chain.ProjectionReceipt)
}

func (s tamperSource) Scan(ctx context.Context, after string, limit int) (chain.ProjectionPage, error) {
	p, err := s.ProjectionSource.Scan(ctx, after, limit)
	for i := range p.Receipts {
		s.edit(&p.Receipts[i])
	}
	return p, err
}

// tamperChains returns records whose content was changed but whose stored
// chain_hash still matches the receipt.
type tamperChains struct{ chain.Store }

func (s tamperChains) Read(ctx context.Context, id string, after int64) ([]*chain.Record, error) {
	recs, err := s.Store.Read(ctx, id, after)
	out := make([]*chain.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.PolicyVersion = "2"
		out[i] = &c
	}
	return out, err
}

// A receipt the chain store does not confirm stops the projector before
// anything of the page is applied.
func TestProjectorVerifiesReceipts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	steps, _ := scenario()
	mem := chain.NewMemStore()
	appendAll(t, mem, steps)
	third := func(edit func(*chain.ProjectionReceipt)) func(*chain.ProjectionReceipt) {
		return func(r *chain.ProjectionReceipt) {
			if r.Sequence == 1 && r.ChainID == chainB {
				edit(r)
			}
		}
	}
	cases := map[string]struct {
		chains chain.Store
		source chain.ProjectionSource
	}{
		"wrong hash":      {mem, tamperSource{mem, third(func(r *chain.ProjectionReceipt) { r.HeadHash[0] ^= 1 })}},
		"wrong record id": {mem, tamperSource{mem, third(func(r *chain.ProjectionReceipt) { r.RecordID = uuidN(0xff, 1) })}},
		"missing record":  {mem, tamperSource{mem, third(func(r *chain.ProjectionReceipt) { r.Sequence = 99 })}},
		"empty chains":    {chain.NewMemStore(), mem},
		"altered content": {tamperChains{mem}, mem},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "state.db")
			st := openState(t, path)
			p := projector(c.chains, c.source, st)
			p.PageSize = 100
			var ve *executor.ProjectionVerifyError
			if err := p.Drain(ctx); !errors.As(err, &ve) {
				t.Fatalf("Drain = %v, want ProjectionVerifyError", err)
			}
			if n := countRows(t, path, "SELECT count(*) FROM projected_records"); n != 0 {
				t.Errorf("%d records applied", n)
			}
		})
	}
}

func TestProjectorConfig(t *testing.T) {
	t.Parallel()
	mem := chain.NewMemStore()
	st := openState(t, filepath.Join(t.TempDir(), "state.db"))
	for field, p := range map[string]*executor.EvidenceProjector{
		"Name":    {Version: 1, Source: mem, Chains: mem, Store: st},
		"Version": {Name: "x", Source: mem, Chains: mem, Store: st},
		"Source":  {Name: "x", Version: 1, Chains: mem, Store: st},
		"Chains":  {Name: "x", Version: 1, Source: mem, Store: st},
		"Store":   {Name: "x", Version: 1, Source: mem, Chains: mem},
	} {
		var ce *executor.ProjectorConfigError
		if err := p.Drain(context.Background()); !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("missing %s: %v", field, err)
		}
	}
}
