package executor_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
)

// countingChains counts the records its Reads return.
type countingChains struct {
	chain.Store
	n *int
}

func (c countingChains) Read(ctx context.Context, id string, after int64) ([]*chain.Record, error) {
	r, err := c.Store.Read(ctx, id, after)
	*c.n += len(r)
	return r, err
}

// longChains is two interleaved chains of ops operations each (four records
// an operation).
func longChains(ops int) []step {
	var a, b []step
	for i := range ops {
		a = append(a, opSteps(chainA, 1000+2*i+1, nil, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: digest})...)
		b = append(b, opSteps(chainB, 1000+2*i+2, ptr("run-1"), chain.OperationCancelledPayload{DurationUS: 2})...)
	}
	return interleave(a, b)
}

// Draining a backlog reads each chain record about once. Every page read
// its chains again from the page's first record to the chain's end, so a
// drain of a chain of N records read about N²/(2·PageSize) of them: with
// the file store (whose Read parses the whole file) 16,000 records took 13 s
// at the default page size, four times as many 8× as long.
func TestProjectorReadsBacklogOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	steps := longChains(100) // 800 records
	for _, src := range sources(t, steps) {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			cleanPath := filepath.Join(t.TempDir(), "clean.db")
			if err := projector(src.store, src.store, openState(t, cleanPath)).Drain(ctx); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "state.db")
			n := 0
			p := projector(countingChains{src.store, &n}, src.store, openState(t, path))
			p.PageSize = 8
			if err := p.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if n > 2*len(steps) {
				t.Errorf("draining %d records read %d from the chain store, want at most %d", len(steps), n, 2*len(steps))
			}
			if diff := cmp.Diff(dump(t, cleanPath), dump(t, path)); diff != "" {
				t.Errorf("projection differs from a plain drain (-want +got):\n%s", diff)
			}
		})
	}
}

// Records appended while a projector drains are projected by a later step,
// and a cached read-ahead never hides them or a record it did not hold.
func TestProjectorChainGrowsWhileDraining(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	steps := longChains(30)
	mem := chain.NewMemStore()
	appendAll(t, mem, steps[:100])
	path := filepath.Join(t.TempDir(), "state.db")
	st := openState(t, path)
	p := projector(mem, mem, st)
	p.PageSize = 7
	for range 5 {
		if _, err := p.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Append the rest in small groups (chain.Writer resumes from each
	// chain's head), stepping in between.
	for rest := steps[100:]; len(rest) > 0; {
		k := min(9, len(rest))
		appendAll(t, mem, rest[:k])
		rest = rest[k:]
		if _, err := p.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, path, "SELECT count(*) FROM projected_records"); got != len(steps) {
		t.Errorf("%d records projected, want %d", got, len(steps))
	}
	if got := countRows(t, path, "SELECT count(*) FROM operations WHERE status = 'running'"); got != 0 {
		t.Errorf("%d operations still running", got)
	}
}

// A projector of another version under a name that already has a cursor
// stops with a conflict instead of continuing from the other version's
// cursor (which projected nothing before it under the new version).
func TestProjectorVersionBoundToName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	steps, _ := scenario()
	mem := chain.NewMemStore()
	appendAll(t, mem, steps[:12])
	path := filepath.Join(t.TempDir(), "state.db")
	st := openState(t, path)
	if err := projector(mem, mem, st).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	appendAll(t, mem, steps[12:])
	v2 := projector(mem, mem, st)
	v2.Version = 2
	err := v2.Drain(ctx)
	var ce *executor.StateConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("Drain v2 under v1's name = %v, want *executor.StateConflictError", err)
	}
	if got := countRows(t, path, "SELECT count(*) FROM projected_records WHERE projection_version = 2"); got != 0 {
		t.Errorf("%d version-2 rows", got)
	}
	// Under its own name version 2 projects everything.
	v2.Name = "ops-v2"
	if err := v2.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, path, "SELECT count(*) FROM projected_records WHERE projection_version = 2"); got != len(steps) {
		t.Errorf("%d version-2 rows, want %d", got, len(steps))
	}
}

// Two projectors of one name and version draining one store at once end
// with the same projection as one alone: the shared cursor may move back,
// but no record before a committed cursor is ever left unapplied.
func TestProjectorsSameNameConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	steps, _ := scenario()
	steps = append(steps, longChains(20)...)
	mem := chain.NewMemStore()
	appendAll(t, mem, steps)
	cleanPath := filepath.Join(t.TempDir(), "clean.db")
	if err := projector(mem, mem, openState(t, cleanPath)).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	st := openState(t, path)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			p := projector(mem, mem, st)
			p.PageSize = 3 + i
			if err := p.Drain(ctx); err != nil {
				t.Errorf("projector %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	// A last drain catches up whatever cursor the racing ones left.
	if err := projector(mem, mem, st).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(dump(t, cleanPath), dump(t, path)); diff != "" {
		t.Errorf("concurrent projection differs (-want +got):\n%s", diff)
	}
}

// TestDurableEmptyRunIDRefusedBeforeCall: the durable profile accepted a
// DurableRunScope with an empty RunID (or an empty owner attempt id), ran
// the callable, and only stage 14 found that the attempt could never be
// committed (statestore: empty RunID): an executed action with no durable
// record. Stage 3 refuses it (scope_invalid) before anything runs.
func TestDurableEmptyRunIDRefusedBeforeCall(t *testing.T) {
	empty := ""
	for _, scope := range []executor.DurableRunScope{{RunID: ""}, {RunID: "run", OwnerAttemptID: &empty}} {
		durableScopeRefused(t, scope)
	}
}

// durableRig is a rig whose State is a SQLite store in a temporary
// directory, closed when the test ends.
func durableRig(t *testing.T) (*rig, *statestore.SQLite) {
	t.Helper()
	st, err := statestore.OpenSQLite(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newRig(t, nil, func(c *executor.Config) { c.State = st }), st
}

func durableScopeRefused(t *testing.T, scope executor.DurableRunScope) {
	r, _ := durableRig(t)
	ec := r.ctx(executor.ProfileDurable, nil)
	ec.Scope = scope
	q := req("a", "nothing", nil)
	q.Scope = ec.Scope
	out := r.exec.Execute(context.Background(), q, ec)
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != "scope_invalid" || r.calls["nothing"].Load() != 0 {
		t.Fatalf("outcome %s (reason %q, state error %v), callable ran %d times; want denied before the call",
			out.Kind(), out.Base().ReasonCode, out.Base().StateError, r.calls["nothing"].Load())
	}
}
