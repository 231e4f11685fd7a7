package pgstore_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/chain/storetest"
	"polc.dev/polc/internal/pgtest"
	"polc.dev/polc/pgstore"
)

// openEvidence opens an evidence store on a schema of t's own.
func openEvidence(t *testing.T, opts pgstore.EvidenceOptions) *pgstore.Evidence {
	t.Helper()
	return openEvidenceAt(t, pgtest.Schema(t), opts)
}

func openEvidenceAt(t *testing.T, dsn string, opts pgstore.EvidenceOptions) *pgstore.Evidence {
	t.Helper()
	s, err := pgstore.OpenEvidence(context.Background(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func exportOf(t *testing.T, s *pgstore.Evidence, chainID string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := s.Export(context.Background(), chainID, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

var subject = storetest.Subject{
	Open:   func(t *testing.T) chain.Store { return openEvidence(t, pgstore.EvidenceOptions{}) },
	Export: func(t *testing.T, s chain.Store, id string) []byte { return exportOf(t, s.(*pgstore.Evidence), id) },
}

// TestStoreConformance runs chain's store suite (the one MemStore and
// FileStore pass) against PostgreSQL.
func TestStoreConformance(t *testing.T) { storetest.Run(t, subject) }

func TestConcurrentStoreConformance(t *testing.T) { storetest.RunConcurrent(t, subject) }

// TestExportMatchesFileStore appends the same records to a file store and
// to PostgreSQL: the export is the file store's chain file, byte for byte.
func TestExportMatchesFileStore(t *testing.T) {
	pg := openEvidence(t, pgstore.EvidenceOptions{})
	dir := t.TempDir()
	fs, err := chain.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := storetest.NewIDs("0000000a")
	c := ids.Next()
	w := &chain.Writer{Store: fs, ChainID: c}
	for range 30 {
		op := ids.Next()
		r, _, err := w.Append(ctx, storetest.Draft(ids, c, &op, storetest.Bound()))
		if err != nil {
			t.Fatal(err)
		}
		// The same record, as the file store holds it.
		if _, err := pg.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(dir, c+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if got := exportOf(t, pg, c); !bytes.Equal(got, file) {
		t.Fatalf("export differs from the file store's chain file:\n got %d bytes\nwant %d bytes", len(got), len(file))
	}
	ids2, err := pg.Chains(ctx)
	if err != nil || len(ids2) != 1 || ids2[0] != c {
		t.Fatalf("Chains: %v %v", ids2, err)
	}
}
