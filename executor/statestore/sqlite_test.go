package statestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/executor"
)

func open(t testing.TB) *SQLite {
	t.Helper()
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// raw opens a second, independent handle on the database file, so that
// assertions read what is on disk rather than what the store reports.
func raw(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// alteredStore creates a store in a temporary directory, closes it, runs
// stmt on its database directly, and returns its path.
func alteredStore(t testing.TB, stmt string, args ...any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := raw(t, path)
	if _, err := db.Exec(stmt, args...); err != nil {
		t.Fatal(err)
	}
	db.Close()
	return path
}

func count(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func ptr[T any](v T) *T { return &v }

var t0 = time.Date(2026, 11, 30, 7, 28, 21, 123456789, time.UTC)

func attempt(run, id string, msgs ...string) executor.AttemptRecord {
	a := executor.AttemptRecord{
		RunID: run, AttemptID: id, RequestID: "req-" + id, ActionID: "fs.read",
		RequestDigest: "ab" + id, Outcome: "succeeded", ResultDigest: ptr("cd" + id),
		CallExecuted: true, Profile: executor.ProfileDurable,
		StartedAt: t0, FinishedAt: t0.Add(1500 * time.Microsecond),
	}
	for _, m := range msgs {
		a.Outbox = append(a.Outbox, executor.OutboxMessage{MessageID: m, Topic: "attempt.finished", PayloadJSON: `{"attempt":"` + id + `"}`})
	}
	return a
}

func mustCommit(t testing.TB, s *SQLite, a executor.AttemptRecord) {
	t.Helper()
	if err := s.CommitAttempt(context.Background(), a); err != nil {
		t.Fatalf("commit %s: %v", a.AttemptID, err)
	}
}

// absent asserts that nothing of attempt a is in the database.
func absent(t *testing.T, s *SQLite, a executor.AttemptRecord) {
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
	db := raw(t, s.Path())
	for _, m := range a.Outbox {
		if n := count(t, db, "SELECT count(*) FROM outbox WHERE message_id = ?", m.MessageID); n != 0 {
			t.Errorf("message %s: %d rows on disk", m.MessageID, n)
		}
	}
}

func TestCommitAttemptRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	a := attempt("run-1", "a1", "m1", "m2")
	a.OwnerAttemptID, a.OperationID = ptr("owner"), ptr("op-1")
	a.StartedAt = t0.In(time.FixedZone("x", 3600)) // stored and returned in UTC
	mustCommit(t, s, a)
	b := attempt("run-1", "a2")
	b.Outcome, b.ReasonCode, b.ResultDigest, b.CallExecuted = "denied", "policy.denied", nil, false
	mustCommit(t, s, b)

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
	if err != nil || !ok {
		t.Fatalf("Run: ok=%v err=%v", ok, err)
	}
	if !run.CreatedAt.Equal(t0) || !cmp.Equal(run.Attempts, []string{"a1", "a2"}) {
		t.Errorf("run = %+v", run)
	}
	out, err := s.Outbox(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].MessageID != "m1" || out[1].MessageID != "m2" || out[0].Seq >= out[1].Seq || out[1].AttemptID != "a1" {
		t.Errorf("outbox = %+v", out)
	}
	if _, ok, err := s.Attempt(ctx, "nope"); ok || err != nil {
		t.Errorf("unknown attempt: ok=%v err=%v", ok, err)
	}
}

// A constraint violation in the middle of the transaction (the second
// outbox message reuses a committed message id) leaves nothing behind: not
// the new run row, not the attempt row, not the first message.
func TestCommitAttemptAtomicOnConstraint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	mustCommit(t, s, attempt("run-a", "a", "m-a"))
	b := attempt("run-b", "b", "m-b1", "m-a", "m-b3")
	err := s.CommitAttempt(ctx, b)
	var ce *executor.StateConflictError
	if !errors.As(err, &ce) || ce.Key != "outbox message m-a" {
		t.Fatalf("err = %v, want StateConflictError on m-a", err)
	}
	absent(t, s, attempt("run-b", "b", "m-b1", "m-b3"))
	db := raw(t, s.Path())
	if n := count(t, db, "SELECT count(*) FROM outbox"); n != 1 {
		t.Errorf("%d outbox rows, want 1", n)
	}
	// The failed commit did not poison the attempt id: a corrected one lands.
	b.Outbox[1].MessageID = "m-b2"
	mustCommit(t, s, b)
}

// Fail the transaction after every step in turn; after each failure nothing
// of the attempt is visible, and the same attempt then commits cleanly.
func TestCommitAttemptAtomicEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	steps := []string{"run", "attempt", "outbox[0]", "outbox[1]", "outbox[2]"}
	for _, failAt := range steps {
		t.Run(failAt, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			mustCommit(t, s, attempt("other-run", "other", "other-m"))
			a := attempt("run", "a", "m0", "m1", "m2")
			var seen []string
			injected := errors.New("injected crash")
			s.hook = func(step string) error {
				seen = append(seen, step)
				if step == failAt {
					return injected
				}
				return nil
			}
			if err := s.CommitAttempt(ctx, a); !errors.Is(err, injected) {
				t.Fatalf("err = %v, want the injected error", err)
			}
			if seen[len(seen)-1] != failAt {
				t.Fatalf("steps %v did not reach %s", seen, failAt)
			}
			absent(t, s, a)
			s.hook = nil
			mustCommit(t, s, a)
			got, ok, err := s.Attempt(ctx, "a")
			if err != nil || !ok || len(got.Outbox) != 3 {
				t.Fatalf("after retry: %+v ok=%v err=%v", got, ok, err)
			}
		})
	}
}

func TestCommitAttemptDuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	first := attempt("run-1", "a", "m1")
	mustCommit(t, s, first)
	for name, second := range map[string]executor.AttemptRecord{
		"identical": first,
		"different": func() executor.AttemptRecord {
			b := attempt("run-2", "a", "m2")
			b.Outcome, b.ReasonCode, b.CallExecuted = "failed", "callable.error", true
			return b
		}(),
	} {
		err := s.CommitAttempt(ctx, second)
		var ce *executor.StateConflictError
		if !errors.As(err, &ce) || ce.Key != "attempt a" {
			t.Fatalf("%s: err = %v, want StateConflictError on attempt a", name, err)
		}
	}
	got, _, err := s.Attempt(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, got); diff != "" {
		t.Errorf("first record changed (-first +now):\n%s", diff)
	}
	absent(t, s, attempt("run-2", "x", "m2"))
}

func TestCommitAttemptConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	const n, runs = 64, 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Goroutines share runs, so "create the run if new" races too.
			run := fmt.Sprintf("run-%d", i%runs)
			id := fmt.Sprintf("a-%02d", i)
			errs[i] = s.CommitAttempt(ctx, attempt(run, id, id+"-m0", id+"-m1"))
			if errs[i] == nil {
				// Reads run beside the writers.
				_, _, errs[i] = s.Attempt(ctx, id)
			}
		}()
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

func TestCommitAttemptInvalidInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	for name, mutate := range map[string]func(*executor.AttemptRecord){
		"no attempt id":    func(a *executor.AttemptRecord) { a.AttemptID = "" },
		"no run id":        func(a *executor.AttemptRecord) { a.RunID = "" },
		"no outcome":       func(a *executor.AttemptRecord) { a.Outcome = "" },
		"no profile":       func(a *executor.AttemptRecord) { a.Profile = "" },
		"no message id":    func(a *executor.AttemptRecord) { a.Outbox[0].MessageID = "" },
		"no topic":         func(a *executor.AttemptRecord) { a.Outbox[0].Topic = "" },
		"payload not json": func(a *executor.AttemptRecord) { a.Outbox[0].PayloadJSON = "{nope" },
	} {
		a := attempt("run", "a", "m")
		mutate(&a)
		var ie *InputError
		if err := s.CommitAttempt(ctx, a); !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want InputError", name, err)
		}
	}
	if n := count(t, raw(t, s.Path()), "SELECT count(*) FROM attempts"); n != 0 {
		t.Errorf("%d attempts committed from invalid input", n)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := alteredStore(t, "UPDATE schema_version SET version = ?", SchemaVersion+1)
	_, err := OpenSQLite(path)
	var ve *SchemaVersionError
	if !errors.As(err, &ve) || ve.Found != SchemaVersion+1 || ve.Supported != SchemaVersion {
		t.Fatalf("err = %v, want SchemaVersionError found %d", err, SchemaVersion+1)
	}
}

func TestOpenRefusesForeignDatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "other.db")
	db := raw(t, path)
	if _, err := db.Exec("CREATE TABLE something (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err := OpenSQLite(path)
	var ve *SchemaVersionError
	if !errors.As(err, &ve) || ve.Found != 0 {
		t.Fatalf("err = %v, want SchemaVersionError found 0", err)
	}
}

func TestOpenRefusesNonFilePaths(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", ":memory:", "file:x.db", filepath.Join(t.TempDir(), "a?b.db")} {
		var ie *InputError
		if _, err := OpenSQLite(p); !errors.As(err, &ie) {
			t.Errorf("OpenSQLite(%q) = %v, want InputError", p, err)
		}
	}
}

func TestOpenSetsWAL(t *testing.T) {
	t.Parallel()
	s := open(t)
	var mode string
	if err := raw(t, s.Path()).QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	a := attempt("run", "a", "m0", "m1")
	mustCommit(t, s, a)
	recs := []executor.ProjectedRecord{started("c", "r1", 0, "op")}
	if err := s.ApplyProjection(ctx, "p", 1, recs, "cur-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	s, err = OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, ok, err := s.Attempt(ctx, "a")
	if err != nil || !ok {
		t.Fatalf("after reopen: ok=%v err=%v", ok, err)
	}
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("after reopen (-committed +read):\n%s", diff)
	}
	if c, err := s.ProjectionCursor(ctx, "p"); err != nil || c != "cur-1" {
		t.Errorf("cursor = %q, %v", c, err)
	}
	if op, ok, err := s.Operation(ctx, "op"); err != nil || !ok || op.Status != StatusRunning {
		t.Errorf("operation = %+v ok=%v err=%v", op, ok, err)
	}
	// And it still takes writes, with the same conflict rules.
	var ce *executor.StateConflictError
	if err := s.CommitAttempt(ctx, a); !errors.As(err, &ce) {
		t.Errorf("recommit after reopen: %v, want StateConflictError", err)
	}
	mustCommit(t, s, attempt("run", "b", "m2"))
}

func BenchmarkCommitAttempt(b *testing.B) {
	ctx := context.Background()
	s := open(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// 16 attempts per run, so both the new-run and existing-run paths run.
		id := fmt.Sprintf("a-%d", i)
		a := attempt(fmt.Sprintf("run-%d", i/16), id, id+"-m0", id+"-m1")
		if err := s.CommitAttempt(ctx, a); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkCommitAttemptParallel commits from 64 goroutines, as the
// executor may; commits still serialize on the one writer connection.
func BenchmarkCommitAttemptParallel(b *testing.B) {
	ctx := context.Background()
	s := open(b)
	b.ReportAllocs()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			id := fmt.Sprintf("a-%d", i)
			if err := s.CommitAttempt(ctx, attempt(fmt.Sprintf("run-%d", i/16), id, id+"-m0", id+"-m1")); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
