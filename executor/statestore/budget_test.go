package statestore

import (
	"context"
	"path/filepath"
	"strings"
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
