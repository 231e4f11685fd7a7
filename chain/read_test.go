package chain_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
)

// TestFileStoreReadAfter: Read(after) returns exactly the records with
// sequence > after, for every after, without parsing the lines before it
// (line i holds sequence i), and falls back to parsing the whole file
// when the lines do not hold their sequences.
func TestFileStoreReadAfter(t *testing.T) {
	s := evidencegen.NewSmall()
	lines := bytes.SplitAfter(s.Chain, []byte("\n"))
	first, err := chain.ParseRecord(bytes.TrimSuffix(lines[0], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	id := first.ChainID
	n := int64(len(lines) - 1)
	for _, tc := range []struct {
		name string
		data []byte
		seqs func(after int64) []int64 // the sequences Read(after) returns
	}{
		{"intact", s.Chain, func(after int64) []int64 { return span(max(after+1, 0), n-1) }},
		// The first line removed: line i holds sequence i+1.
		{"shifted", bytes.Join(lines[1:], nil), func(after int64) []int64 { return span(max(after+1, 1), n-1) }},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, id+".jsonl"), tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		fs, err := chain.OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		for after := int64(-2); after <= n+1; after++ {
			recs, err := fs.Read(context.Background(), id, after)
			if err != nil {
				t.Fatalf("%s: Read(%d): %v", tc.name, after, err)
			}
			var got []int64
			for _, r := range recs {
				got = append(got, r.Sequence)
			}
			if want := tc.seqs(after); !equal(got, want) {
				t.Errorf("%s: Read(%d) = sequences %v, want %v", tc.name, after, got, want)
			}
		}
		fs.Close()
	}
	// A corrupt line among those returned is still reported.
	dir := t.TempDir()
	bad := bytes.Join(append(append([][]byte{}, lines[:5]...), append([]byte("{}\n"), bytes.Join(lines[6:], nil)...)), nil)
	os.WriteFile(filepath.Join(dir, id+".jsonl"), bad, 0o644)
	fs, err := chain.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	var ce *chain.CorruptChainError
	if _, err := fs.Read(context.Background(), id, 3); !errors.As(err, &ce) || ce.Line != 6 {
		t.Errorf("Read past a corrupt line 6: %v, want CorruptChainError at line 6", err)
	}
}

func span(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
