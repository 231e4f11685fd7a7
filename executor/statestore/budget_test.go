package statestore

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"polc.dev/polc/executor"
)

var (
	budgetKey = executor.BudgetKey{Tenant: "acme", Principal: "agent:a", PolicyID: "p"}
	hour      = int64(time.Hour / time.Microsecond)
	bt0       = time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
)

// TestBudgetLedgerAccounts: a reservation counts a call before the
// outcome is known, a release takes it back, a settlement adds what the
// call consumed, and a window that ends starts the next from nothing.
func TestBudgetLedgerAccounts(t *testing.T) {
	t.Parallel()
	s := open(t)
	ctx := context.Background()
	r1, before, err := s.Reserve(ctx, budgetKey, hour, bt0.Add(time.Minute))
	if err != nil || before != (executor.Usage{}) {
		t.Fatalf("first reserve: %v, usage %+v", err, before)
	}
	r2, before, err := s.Reserve(ctx, budgetKey, hour, bt0.Add(2*time.Minute))
	if err != nil || before.Calls != 1 {
		t.Fatalf("second reserve: %v, usage %+v; want the first call counted", err, before)
	}
	if r1.WindowStart != bt0.UnixMicro() || r2.WindowStart != r1.WindowStart {
		t.Fatalf("windows %d, %d; want both from %d", r1.WindowStart, r2.WindowStart, bt0.UnixMicro())
	}
	if err := s.Release(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, r2, executor.Usage{Tokens: 7, WallMicroseconds: 300}); err != nil {
		t.Fatal(err)
	}
	want := executor.Usage{Calls: 1, Tokens: 7, WallMicroseconds: 300}
	if u, err := s.Usage(ctx, budgetKey, hour, bt0.Add(59*time.Minute)); err != nil || u != want {
		t.Fatalf("usage %+v (%v), want %+v", u, err, want)
	}
	// Another key, another window length: counted apart.
	if u, _ := s.Usage(ctx, executor.BudgetKey{Tenant: "acme", Principal: "agent:b", PolicyID: "p"}, hour, bt0); u != (executor.Usage{}) {
		t.Errorf("another principal's usage %+v", u)
	}
	if u, _ := s.Usage(ctx, budgetKey, 0, bt0); u != (executor.Usage{}) {
		t.Errorf("the lifetime window's usage %+v", u)
	}
	// The next hour starts from nothing; settling the old window's
	// reservation afterwards changes nothing in it.
	r3, before, err := s.Reserve(ctx, budgetKey, hour, bt0.Add(time.Hour))
	if err != nil || before != (executor.Usage{}) || r3.WindowStart != bt0.Add(time.Hour).UnixMicro() {
		t.Fatalf("reserve in the next window: %v, usage %+v, window %d", err, before, r3.WindowStart)
	}
	if err := s.Settle(ctx, r2, executor.Usage{Tokens: 1000}); err != nil {
		t.Fatal(err)
	}
	if u, _ := s.Usage(ctx, budgetKey, hour, bt0.Add(time.Hour)); u != (executor.Usage{Calls: 1}) {
		t.Errorf("next window's usage %+v, want one call", u)
	}
	// A clock stepped back into the ended window counts in the later one.
	_, before, err = s.Reserve(ctx, budgetKey, hour, bt0)
	if err != nil || before.Calls != 1 {
		t.Errorf("reserve with the clock stepped back: %v, usage %+v; want the later window's", err, before)
	}
	var ie *InputError
	if err := s.Settle(ctx, r3, executor.Usage{Tokens: -1}); !errors.As(err, &ie) {
		t.Errorf("negative settlement: %v, want InputError", err)
	}
	if _, _, err := s.Reserve(ctx, executor.BudgetKey{Tenant: "acme"}, hour, bt0); !errors.As(err, &ie) {
		t.Errorf("empty key: %v, want InputError", err)
	}
}

// TestBudgetLedgerSurvivesReopen: the usage is in the file.
func TestBudgetLedgerSurvivesReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		r, _, err := s.Reserve(ctx, budgetKey, 0, bt0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Settle(ctx, r, executor.Usage{WallMicroseconds: 10}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if u, err := s.Usage(ctx, budgetKey, 0, bt0.Add(1000*time.Hour)); err != nil || u != (executor.Usage{Calls: 3, WallMicroseconds: 30}) {
		t.Fatalf("usage after reopening %+v (%v), want 3 calls and 30 µs", u, err)
	}
}

// TestConcurrentBudgetReserve: reservations from many goroutines (and two
// handles on the file, as two processes would have) each see a count of
// their own.
func TestConcurrentBudgetReserve(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	var stores [2]*SQLite
	for i := range stores {
		s, err := OpenSQLite(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	const n = 32
	seen := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, u, err := stores[i%2].Reserve(context.Background(), budgetKey, hour, bt0)
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

// TestOpenMigratesVersion1: a version 1 database (no budget ledger) is
// given version 2's table at open and keeps what it held.
func TestOpenMigratesVersion1(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	db := raw(t, path)
	if _, err := db.Exec(schemaV1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO schema_version(version) VALUES (1); INSERT INTO runs VALUES ('r', '2026-03-15T12:00:00Z')"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Reserve(context.Background(), budgetKey, hour, bt0); err != nil {
		t.Fatalf("reserve after migrating: %v", err)
	}
	check := raw(t, path)
	if v := count(t, check, "SELECT version FROM schema_version"); v != SchemaVersion {
		t.Errorf("schema version %d after migrating, want %d", v, SchemaVersion)
	}
	if c := count(t, check, "SELECT count(*) FROM runs"); c != 1 {
		t.Errorf("%d runs after migrating, want the 1 it had", c)
	}
	// A version 1 database that lacks one of its own tables is refused,
	// not migrated.
	path2 := filepath.Join(t.TempDir(), "state.db")
	db2 := raw(t, path2)
	if _, err := db2.Exec(schemaV1 + "DROP TABLE outbox; INSERT INTO schema_version(version) VALUES (1);"); err != nil {
		t.Fatal(err)
	}
	db2.Close()
	ve, _ := openRefused(t, path2)
	if ve.Found != 1 || ve.Problem == "" {
		t.Errorf("damaged version 1: %+v, want found 1 and the problem", ve)
	}
}
