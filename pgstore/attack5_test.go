package pgstore_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"polc.dev/polc/chain"
	"polc.dev/polc/chain/storetest"
	"polc.dev/polc/internal/pgtest"
	"polc.dev/polc/pgstore"
)

func searchPathOf(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

// TestAttack5ScanMissesRecordAcrossSearchPaths: two stores that reach the
// same tables through different search_paths ("A" and "B,A" with B empty)
// take different advisory lock keys (the key is the hash of
// current_schema(), but unqualified table names resolve through the whole
// search_path). A's Scan then does not wait for B's group in flight, and a
// cursor past A's later record skips B's earlier-positioned one for good.
// Either the second store must be refused (its tables are not in its
// current schema) or the scan must deliver both records.
func TestAttack5ScanMissesRecordAcrossSearchPaths(t *testing.T) {
	dsnA := pgtest.Schema(t)
	nameA := searchPathOf(t, dsnA)
	nameB := searchPathOf(t, pgtest.Schema(t)) // an empty schema
	dsnBA := pgtest.WithParam(t, dsnA, "search_path", nameB+","+nameA)
	a := openEvidenceAt(t, dsnA, pgstore.EvidenceOptions{})
	b, err := pgstore.OpenEvidence(context.Background(), dsnBA, pgstore.EvidenceOptions{})
	if err != nil {
		t.Logf("refused (the fix): %v", err)
		return
	}
	t.Cleanup(func() { b.Close() })
	inB, releaseB := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(releaseB) }) }
	t.Cleanup(release)
	pgstore.SetBeforeCommit(b, func(int) {
		close(inB)
		<-releaseB
	})
	ids := storetest.NewIDs("000000a5")
	ctx := context.Background()
	cb, ca := ids.Next(), ids.Next()
	op := ids.Next()
	rb, err := chain.Seal(storetest.Draft(ids, cb, &op, storetest.Bound()), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	doneB := make(chan error, 1)
	go func() { _, err := b.Append(ctx, rb); doneB <- err }()
	<-inB // b's record holds its position, uncommitted
	storetest.AppendN(t, a, ids, ca, 1)
	scanned := make(chan chain.ProjectionPage, 1)
	go func() {
		p, err := a.Scan(ctx, "", 0)
		if err != nil {
			t.Error(err)
		}
		scanned <- p
	}()
	var first chain.ProjectionPage
	select {
	case first = <-scanned:
	case <-time.After(500 * time.Millisecond):
		// The scan waits for b (the fix): fine.
		release()
		first = <-scanned
	}
	release()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, r := range first.Receipts {
		got = append(got, r.RecordID)
	}
	rest, err := a.Scan(ctx, first.NextCursor, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rest.Receipts {
		got = append(got, r.RecordID)
	}
	if !strings.Contains(strings.Join(got, " "), rb.RecordID) {
		t.Fatalf("b's committed record %s is never delivered by a's scan (delivered: %v): the projection lost it", rb.RecordID, got)
	}
}

// TestAttack5RedactLeaks: Redact hides password but not the other secret
// pgx takes in a DSN, sslpassword (the passphrase of the client key); and a
// password query parameter holding a raw ';' is dropped by url.Query (an
// "invalid semicolon separator" it ignores), so it is left in clear. Both
// then appear in error messages, the store's Name, and the "store" field
// polc run prints for a PostgreSQL evidence store.
func TestAttack5RedactLeaks(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u@h/db?sslpassword=s3cret&sslkey=/k",
		"postgres://u@h/db?password=s3cret;x",
	} {
		if got := pgstore.Redact(dsn); strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) leaks the secret: %s", dsn, got)
		}
	}
}

// TestAttack5DurabilityOnlyCheckedAtConnect: fsync and synchronous_commit
// are checked when a connection is made (AfterConnect), but both are
// reloadable server settings: after ALTER SYSTEM ... ; SELECT
// pg_reload_conf() the pool's open connections commit without waiting for
// the WAL flush, and the store still acknowledges records as durable.
func TestAttack5DurabilityOnlyCheckedAtConnect(t *testing.T) {
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
	if _, err := s.Append(ctx, r); err == nil {
		var sc string
		admin.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc)
		t.Fatalf("a record was acknowledged as durable with the server's synchronous_commit now %q", sc)
	}
}
