package chain

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepairRemovesChainsWithoutRecords: a process killed right after it
// created a chain file leaves it empty (or, killed in its first write,
// holding a torn first line, or the reserve's zeros). Repair used to
// accept such a file ("no torn tail", or the tail cut and an empty file
// left), which certverify then fails as empty_chain. It is no chain: its
// torn bytes are kept in the side file as for any torn tail, the file is
// removed, and the chain can be started again. A file whose records the
// projection index lists lost acknowledged records: it is damage, kept.
func TestRepairRemovesChainsWithoutRecords(t *testing.T) {
	ctx := context.Background()
	for name, content := range map[string]string{
		"empty":          "",
		"torn first":     `{"chain_hash":"ab`,
		"reserve zeros":  strings.Repeat("\x00", 4096),
		"torn and zeros": `{"chain_hash":"ab` + strings.Repeat("\x00", 4096),
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, testChain+".jsonl")
		os.WriteFile(path, []byte(content), 0o644)
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := s.Repair(testChain)
		torn := strings.TrimRight(content, "\x00")
		if err != nil || !rep.Removed || rep.Bytes != int64(len(torn)) || (rep.SavedTo != "") != (torn != "") {
			t.Fatalf("%s: %+v %v", name, rep, err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the chain file is still there: %v", name, err)
		}
		if rep.SavedTo != "" {
			if saved, _ := os.ReadFile(rep.SavedTo); string(saved) != torn {
				t.Errorf("%s: side file holds %q", name, saved)
			}
		}
		// The chain starts again, in a new file.
		ids := &testIDs{}
		op := ids.next()
		r0, _ := Seal(draft(ids, testChain, &op, boundPayload()), 0, nil)
		if _, err := s.Append(ctx, r0); err != nil {
			t.Errorf("%s: append after repair: %v", name, err)
		}
		if res, err := s.Verify(ctx, testChain, r0.Hash()); err != nil || res.Records != 1 {
			t.Errorf("%s: %v %+v", name, err, res)
		}
		s.Close()
	}

	// Records in the index, none in the file: acknowledged records are
	// missing, and the file is left for a person.
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := &testIDs{}
	op := ids.next()
	r0, _ := Seal(draft(ids, testChain, &op, boundPayload()), 0, nil)
	if _, err := s.Append(ctx, r0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(dir, testChain+".jsonl")
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ce *CorruptChainError
	if rep, err := s.Repair(testChain); !errors.As(err, &ce) || rep.Removed || !strings.Contains(err.Error(), "lists 1 of its records") {
		t.Fatalf("a truncated chain: %+v %v", rep, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the damaged file was removed: %v", err)
	}
}
