package pgstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
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

// TestSearchPathReachingAnotherSchemasStoreRefused: two stores that reached
// the same tables through different search_paths ("A" and "B,A" with B
// empty) took different advisory lock keys (the key is the hash of
// current_schema(), and table names resolved through the whole
// search_path). A's Scan then did not wait for B's group in flight, and a
// cursor past A's later record skipped B's earlier-positioned one for
// good. The second store is now refused at open (a polc table of its
// search_path is not in its current schema); were it not, the scan would
// have to deliver both records.
func TestSearchPathReachingAnotherSchemasStoreRefused(t *testing.T) {
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
	ids := storetest.NewIDs("000000a5")
	ctx := context.Background()
	cb, ca := ids.Next(), ids.Next()
	rb, release, doneB := heldAppend(t, b, ids, cb) // b's record holds its position, uncommitted
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

// TestTablesStayInTheSchemaOpened: a store opened with search_path "C,A"
// while C does not exist keeps its tables in A. When C is created later,
// with polc tables of its own, unqualified table names would resolve to
// C's, under A's advisory lock key; every statement names A's tables, so
// the records still go to A.
func TestTablesStayInTheSchemaOpened(t *testing.T) {
	ctx := context.Background()
	dsnA := pgtest.Schema(t)
	nameA := searchPathOf(t, dsnA)
	nameC := "c_" + strings.TrimPrefix(nameA, "t_")
	admin, err := pgx.Connect(ctx, pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+nameC+" CASCADE") })
	s := openEvidenceAt(t, pgtest.WithParam(t, dsnA, "search_path", nameC+","+nameA), pgstore.EvidenceOptions{})
	ids := storetest.NewIDs("000000a7")
	c := ids.Next()
	storetest.AppendN(t, s, ids, c, 1)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+nameC); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"polc_schema", "polc_records"} {
		if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE TABLE %s.%s (LIKE %s.%[2]s INCLUDING ALL)", nameC, table, nameA)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("INSERT INTO %s.polc_records OVERRIDING SYSTEM VALUE SELECT * FROM %s.polc_records", nameC, nameA)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(c); err != nil { // Head reads the database
		t.Fatal(err)
	}
	storetest.AppendN(t, s, ids, c, 2)
	count := func(schema string) (n int) {
		if err := admin.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.polc_records", schema)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, cc := count(nameA), count(nameC); a != 3 || cc != 1 {
		t.Fatalf("records in A: %d (want 3), in C: %d (want the 1 copied): the store wrote through the search_path", a, cc)
	}
	if rs, err := s.Read(ctx, c, -1); err != nil || len(rs) != 3 {
		t.Fatalf("Read: %d records, %v", len(rs), err)
	}
}
