package pgstore_test

import (
	"context"
	"errors"
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

// TestNewerSchemaRefused: a database whose polc schema is newer than this
// binary's is refused by both stores, with a message saying so; one whose
// version table is damaged too.
func TestNewerSchemaRefused(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := context.Background()
	s, err := pgstore.OpenState(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "UPDATE polc_schema SET version = $1", pgstore.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	var se *pgstore.SchemaVersionError
	_, err = pgstore.OpenEvidence(ctx, dsn, pgstore.EvidenceOptions{})
	if !errors.As(err, &se) || se.Found != pgstore.SchemaVersion+1 || !strings.Contains(err.Error(), "this polc supports up to") {
		t.Fatalf("evidence store on a newer schema: %v", err)
	}
	if _, err := pgstore.OpenState(ctx, dsn); !errors.As(err, &se) {
		t.Fatalf("state store on a newer schema: %v", err)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE polc_schema DROP CONSTRAINT polc_schema_pkey; INSERT INTO polc_schema(one, version, generation) VALUES (true, 1, 'x')"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.OpenState(ctx, dsn); !errors.As(err, &se) || se.Problem == "" {
		t.Fatalf("two version rows: %v", err)
	}
}

// TestDurabilityRefused: a session whose commits could return before they
// are durable (synchronous_commit off, here from the DSN) is refused.
func TestDurabilityRefused(t *testing.T) {
	dsn := pgtest.WithParam(t, pgtest.Schema(t), "synchronous_commit", "off")
	var de *pgstore.DurabilityError
	if _, err := pgstore.OpenEvidence(context.Background(), dsn, pgstore.EvidenceOptions{}); !errors.As(err, &de) || de.Setting != "synchronous_commit" {
		t.Fatalf("synchronous_commit=off: %v", err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h/db":              "postgres://u:xxxxx@h/db",
		"postgres:///db?host=/tmp&password=pw1": "postgres:///db?host=/tmp&password=xxxxx",
		"postgres:///db?host=/tmp":              "postgres:///db?host=/tmp",
	} {
		if got := pgstore.Redact(in); got != want || strings.Contains(got, "secret") || strings.Contains(got, "pw1") {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestScanWaitsForGroupsInFlight: a group that inserted its records (and
// so took their positions) but has not committed holds the scan back, so
// that a record committed after it by another store, at a larger
// position, is never delivered before it: a cursor past both would skip
// it for good.
func TestScanWaitsForGroupsInFlight(t *testing.T) {
	dsn := pgtest.Schema(t)
	a := openEvidenceAt(t, dsn, pgstore.EvidenceOptions{})
	b := openEvidenceAt(t, dsn, pgstore.EvidenceOptions{})
	ids := storetest.NewIDs("00000010")
	ctx := context.Background()
	ca, cb := ids.Next(), ids.Next()
	ra, release, doneA := heldAppend(t, a, ids, ca) // a's record is inserted, its transaction open
	rb := storetest.AppendN(t, b, ids, cb, 1)[0]
	scanned := make(chan chain.ProjectionPage, 1)
	go func() {
		p, err := b.Scan(ctx, "", 0)
		if err != nil {
			t.Error(err)
		}
		scanned <- p
	}()
	select {
	case p := <-scanned:
		t.Fatalf("the scan returned %d receipts while a group was in flight", len(p.Receipts))
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	p := <-scanned
	if len(p.Receipts) != 2 || p.Receipts[0].RecordID != ra.RecordID || p.Receipts[1].RecordID != rb.RecordID {
		t.Fatalf("scan: %+v, want a's record then b's", p.Receipts)
	}
}

// heldAppend appends the first record of a new chain to s in a goroutine
// and returns once the record is inserted and its group's transaction is
// held open before COMMIT; release lets it commit (it is also released at
// the test's end, before the stores close: cleanups run in reverse), and
// done receives the append's result.
func heldAppend(t *testing.T, s *pgstore.Evidence, ids *storetest.IDs, chainID string) (r *chain.Record, release func(), done <-chan error) {
	t.Helper()
	in, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	pgstore.SetBeforeCommit(s, func(int) {
		close(in)
		<-held
	})
	op := ids.Next()
	r, err := chain.Seal(storetest.Draft(ids, chainID, &op, storetest.Bound()), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := make(chan error, 1)
	go func() { _, err := s.Append(context.Background(), r); d <- err }()
	<-in
	return r, release, d
}
