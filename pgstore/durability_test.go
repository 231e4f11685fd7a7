package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"polc.dev/polc/chain"
	"polc.dev/polc/chain/storetest"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/pgtest"
	"polc.dev/polc/pgstore"
)

// TestDurabilityCheckedInEveryCommit: fsync and synchronous_commit were
// checked only when a connection was made (AfterConnect), but both are
// reloadable server settings: after ALTER SYSTEM ... ; SELECT
// pg_reload_conf() the pool's open connections committed without waiting
// for the WAL flush, and the store still acknowledged records as durable.
// Every group commit now checks them in its transaction.
func TestDurabilityCheckedInEveryCommit(t *testing.T) {
	dsn, _ := pgtest.Private(t)
	ctx := context.Background()
	s := openEvidenceAt(t, dsn, pgstore.EvidenceOptions{MaxInFlight: 1, MaxConns: 2})
	ids := storetest.NewIDs("000000a6")
	c := ids.Next()
	storetest.AppendN(t, s, ids, c, 1) // the pool's connections are open and checked
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // backends apply the reload at their next command
	tip, _, err := s.Head(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	h := tip.Hash
	op := ids.Next()
	r, err := chain.Seal(storetest.Draft(ids, c, &op, storetest.Bound()), tip.Sequence+1, &h)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, r)
	if de := (*pgstore.DurabilityError)(nil); err != nil && !errors.As(err, &de) {
		t.Errorf("refused, but not as a DurabilityError: %v", err)
	}
	if err == nil {
		var sc string
		admin.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc)
		t.Fatalf("a record was acknowledged as durable with the server's synchronous_commit now %q", sc)
	}
}

// TestDurabilityCheckedInEveryStateChange: the state store's changes (an
// approval nonce, a budget reservation) and the evidence store's commits
// are refused, with *pgstore.DurabilityError naming the setting, once a
// reload turns synchronous_commit off, and once it turns fsync off, on
// connections made and checked before.
func TestDurabilityCheckedInEveryStateChange(t *testing.T) {
	dsn, _ := pgtest.Private(t)
	ctx := context.Background()
	st, err := pgstore.OpenState(ctx, pgtest.WithParam(t, dsn, "pool_max_conns", "1"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ev := openEvidenceAt(t, dsn, pgstore.EvidenceOptions{MaxInFlight: 1, MaxConns: 1})
	ids := storetest.NewIDs("000000a8")
	c := ids.Next()
	storetest.AppendN(t, ev, ids, c, 1)
	nonce := func(i int) string { return fmt.Sprintf("%064x", i) }
	if err := st.UseApprovalNonce(ctx, nonce(0), "a0", time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	set := func(setting, value string) {
		t.Helper()
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = %s", setting, value)); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // backends apply the reload at their next command
	}
	key := executor.BudgetKey{Principal: "p", PolicyID: "pol"}
	for i, setting := range []string{"synchronous_commit", "fsync"} {
		// Sealed before: reading the head needs a connection, and no new
		// one is made on a server that is not durable.
		tip, _, err := ev.Head(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		op := ids.Next()
		r, err := chain.Seal(storetest.Draft(ids, c, &op, storetest.Bound()), tip.Sequence+1, &tip.Hash)
		if err != nil {
			t.Fatal(err)
		}
		set(setting, "off")
		refused := func(what string, err error) {
			t.Helper()
			var de *pgstore.DurabilityError
			if !errors.As(err, &de) || de.Setting != setting {
				t.Errorf("%s with %s off: %v, want a DurabilityError for %s", what, setting, err, setting)
			}
		}
		refused("approval nonce", st.UseApprovalNonce(ctx, nonce(i+1), "a", time.Unix(0, 0)))
		_, _, err = st.Reserve(ctx, key, 0, time.Unix(0, 0))
		refused("budget reservation", err)
		_, err = ev.Append(ctx, r)
		refused("append", err)
		set(setting, "on")
	}
	// Nothing refused was written.
	var n int
	if err := admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM polc_approval_nonces) + (SELECT count(*) FROM polc_budget_usage) + (SELECT count(*) FROM polc_records)").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows: %d (%v), want the 2 written before", n, err)
	}
}
