package pgstore

import (
	"context"
	"testing"

	"polc.dev/polc/internal/pgtest"
)

// SetBeforeCommit sets the hook run before each group's COMMIT (tests).
func SetBeforeCommit(s *Evidence, f func(records int)) { s.beforeCommit = f }

// OpenEvidenceBench opens an evidence store on a schema of b's own.
func OpenEvidenceBench(b *testing.B) *Evidence {
	s, err := OpenEvidence(context.Background(), pgtest.Schema(b), EvidenceOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
