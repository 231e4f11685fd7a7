package statestore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
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
	if err != nil || before != (normalize.Usage{}) {
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
	if err := s.Settle(ctx, r2, normalize.Usage{Tokens: 7, WallMicroseconds: 300}); err != nil {
		t.Fatal(err)
	}
	want := normalize.Usage{Calls: 1, Tokens: 7, WallMicroseconds: 300}
	if u, err := s.Usage(ctx, budgetKey, hour, bt0.Add(59*time.Minute)); err != nil || u != want {
		t.Fatalf("usage %+v (%v), want %+v", u, err, want)
	}
	// Another key: counted apart. Another window length: the same
	// account, judged on every window that overlaps (the lifetime
	// overlaps all).
	if u, _ := s.Usage(ctx, executor.BudgetKey{Tenant: "acme", Principal: "agent:b", PolicyID: "p"}, hour, bt0); u != (normalize.Usage{}) {
		t.Errorf("another principal's usage %+v", u)
	}
	if u, _ := s.Usage(ctx, budgetKey, 0, bt0); u != want {
		t.Errorf("the lifetime window's usage %+v, want the hour's %+v", u, want)
	}
	// The next hour starts from nothing; settling the old window's
	// reservation afterwards changes nothing in it.
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
	// A clock stepped back into the ended window counts in the later one.
	_, before, err = s.Reserve(ctx, budgetKey, hour, bt0)
	if err != nil || before.Calls != 1 {
		t.Errorf("reserve with the clock stepped back: %v, usage %+v; want the later window's", err, before)
	}
	var ie *InputError
	if err := s.Settle(ctx, r3, normalize.Usage{Tokens: -1}); !errors.As(err, &ie) {
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
		if err := s.Settle(ctx, r, normalize.Usage{WallMicroseconds: 10}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if u, err := s.Usage(ctx, budgetKey, 0, bt0.Add(1000*time.Hour)); err != nil || u != (normalize.Usage{Calls: 3, WallMicroseconds: 30}) {
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
// given the budget ledger's table at open and keeps what it held.
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

// TestOpenMigratesVersion2: version 2 kept one budget row per account and
// window length; version 3 keeps the account whatever its windows'
// lengths. A version 2 file opens as version 3 with its rows: a windowed
// row is the same window's, and a lifetime row the account's past, whose
// end is not known, so it counts in every window until the account next
// records, which dates it.
func TestOpenMigratesVersion2(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	db := raw(t, path)
	if _, err := db.Exec(schemaV1 + schemaV2 + "INSERT INTO schema_version(version) VALUES (2);"); err != nil {
		t.Fatal(err)
	}
	other := executor.BudgetKey{Tenant: "acme", Principal: "agent:b", PolicyID: "p"}
	for _, r := range []struct {
		key           executor.BudgetKey
		window, start int64
		calls, tokens int64
	}{
		{budgetKey, hour, bt0.UnixMicro(), 2, 5},
		{budgetKey, 0, 0, 3, 0},
		{other, 2 * hour, bt0.UnixMicro(), 1, 0},
	} {
		if _, err := db.Exec("INSERT INTO budget_usage VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0)", r.key.Tenant, r.key.Principal, r.key.PolicyID, r.window, r.start, r.calls, r.tokens); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check := raw(t, path)
	if v := count(t, check, "SELECT version FROM schema_version"); v != SchemaVersion {
		t.Errorf("schema version %d after migrating, want %d", v, SchemaVersion)
	}
	if c := count(t, check, "SELECT count(*) FROM budget_usage WHERE window_us > 0 OR end_us IS NULL"); c != 3 {
		t.Errorf("%d budget rows after migrating, want the 3 it had (the lifetime's with no end)", c)
	}
	ctx := context.Background()
	at := bt0.Add(10 * time.Minute)
	usage := func(key executor.BudgetKey, window int64, now time.Time) normalize.Usage {
		t.Helper()
		u, err := s.Usage(ctx, key, window, now)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	// A 2h version of the policy: the 1h row and the undated past count.
	if u := usage(budgetKey, 2*hour, at); u != (normalize.Usage{Calls: 5, Tokens: 5}) {
		t.Errorf("2h window after migrating: %+v, want the hour's and the lifetime's", u)
	}
	if u := usage(other, hour, at); u != (normalize.Usage{Calls: 1}) {
		t.Errorf("another account's 1h window: %+v, want its 2h row's call", u)
	}
	if _, before, err := s.Reserve(ctx, budgetKey, hour, at); err != nil || before.Calls != 5 {
		t.Fatalf("reserve after migrating: %v, usage %+v, want 5 calls", err, before)
	}
	if end := count(t, check, "SELECT end_us FROM budget_usage WHERE principal = 'agent:a' AND window_us = 0"); int64(end) != at.UnixMicro()+1 {
		t.Errorf("the past's end after a reservation: %d, want dated to it (%d)", end, at.UnixMicro()+1)
	}
	if u := usage(budgetKey, hour, bt0.Add(time.Hour)); u != (normalize.Usage{}) {
		t.Errorf("the next hour: %+v, want nothing (the past is dated before it)", u)
	}
	if u := usage(budgetKey, 0, bt0.Add(time.Hour)); u != (normalize.Usage{Calls: 6, Tokens: 5}) {
		t.Errorf("the lifetime: %+v, want every call", u)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = OpenSQLite(path); err != nil {
		t.Fatalf("reopening the migrated file: %v", err)
	}
	// A version 2 database that lacks its budget table is refused.
	path2 := filepath.Join(t.TempDir(), "state.db")
	db2 := raw(t, path2)
	if _, err := db2.Exec(schemaV1 + "INSERT INTO schema_version(version) VALUES (2);"); err != nil {
		t.Fatal(err)
	}
	db2.Close()
	ve, _ := openRefused(t, path2)
	if ve.Found != 2 || !strings.Contains(ve.Problem, "budget_usage") {
		t.Errorf("damaged version 2: %+v, want found 2 and the missing table", ve)
	}
}

// TestBudgetLedgerRowsBounded: an account running hour after hour keeps
// its current window, executor.BudgetEndedWindowsKept ended ones and its
// past: the file does not grow by a row an hour.
func TestBudgetLedgerRowsBounded(t *testing.T) {
	t.Parallel()
	s := open(t)
	ctx := context.Background()
	const hours = executor.BudgetEndedWindowsKept + 30
	for h := range hours {
		if _, _, err := s.Reserve(ctx, budgetKey, hour, bt0.Add(time.Duration(h)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if c := count(t, raw(t, s.Path()), "SELECT count(*) FROM budget_usage"); c != executor.BudgetEndedWindowsKept+2 {
		t.Errorf("%d rows after %d hours, want %d", c, hours, executor.BudgetEndedWindowsKept+2)
	}
	if u, err := s.Usage(ctx, budgetKey, 0, bt0); err != nil || u.Calls != hours {
		t.Errorf("lifetime usage %+v (%v), want %d calls", u, err, hours)
	}
}
