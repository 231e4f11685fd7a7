package statestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore/internal/fixture"
	"polc.dev/polc/normalize"
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
			fixture.MustCommit(t, s, fixture.Attempt("other-run", "other", "other-m"))
			a := fixture.Attempt("run", "a", "m0", "m1", "m2")
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
			fixture.MustCommit(t, s, a)
			got, ok, err := s.Attempt(ctx, "a")
			if err != nil || !ok || len(got.Outbox) != 3 {
				t.Fatalf("after retry: %+v ok=%v err=%v", got, ok, err)
			}
		})
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
	a := fixture.Attempt("run", "a", "m0", "m1")
	fixture.MustCommit(t, s, a)
	recs := []executor.ProjectedRecord{fixture.Started("c", "r1", 0, "op")}
	if err := s.ApplyProjection(ctx, "p", 1, recs, "cur-1"); err != nil {
		t.Fatal(err)
	}
	used := normalize.Usage{Calls: 3, WallMicroseconds: 30}
	if err := s.Charge(ctx, budgetKey, 0, bt0, used); err != nil {
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
	if u, err := s.Usage(ctx, budgetKey, 0, bt0.Add(1000*time.Hour)); err != nil || u != used {
		t.Errorf("budget usage after reopening %+v (%v), want %+v", u, err, used)
	}
	// And it still takes writes, with the same conflict rules.
	var ce *executor.StateConflictError
	if err := s.CommitAttempt(ctx, a); !errors.As(err, &ce) {
		t.Errorf("recommit after reopen: %v, want StateConflictError", err)
	}
	fixture.MustCommit(t, s, fixture.Attempt("run", "b", "m2"))
}

func BenchmarkCommitAttempt(b *testing.B) {
	ctx := context.Background()
	s := open(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// 16 attempts per run, so both the new-run and existing-run paths run.
		id := fmt.Sprintf("a-%d", i)
		a := fixture.Attempt(fmt.Sprintf("run-%d", i/16), id, id+"-m0", id+"-m1")
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
			if err := s.CommitAttempt(ctx, fixture.Attempt(fmt.Sprintf("run-%d", i/16), id, id+"-m0", id+"-m1")); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
