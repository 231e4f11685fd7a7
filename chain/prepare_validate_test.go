package chain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWriterRefusesWhatParseRecordRejects: the file store writes the line
// that prepare and link build without parsing it back, so prepare must
// refuse every draft whose record ParseRecord would reject. Drafts with a
// created_at the format cannot spell (year 0, year 10000), a policy_version
// that is not valid UTF-8, or a line longer than MaxRecordBytes used to be
// acknowledged by a FileStore Writer and then fail every read of the
// chain ("malformed_record" on line 1). They must fail at Append, and the
// chain must stay readable and appendable.
func TestWriterRefusesWhatParseRecordRejects(t *testing.T) {
	op := "00000000-0000-4000-8000-000000000001"
	good := func() Draft {
		return Draft{RecordID: "00000000-0000-4000-8000-000000000002", ChainID: testChain, OperationID: &op, PolicyID: testPolicy,
			PolicyVersion: "1", Payload: boundPayload(), CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
	}
	for name, tc := range map[string]struct {
		edit func(d *Draft)
		msg  string
	}{
		"year 10000": {func(d *Draft) { d.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "created_at"},
		"year 0":     {func(d *Draft) { d.CreatedAt = time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC) }, "created_at"},
		"negative":   {func(d *Draft) { d.CreatedAt = time.Date(-1, 6, 1, 0, 0, 0, 0, time.UTC) }, "created_at"},
		"bad UTF-8":  {func(d *Draft) { d.PolicyVersion = "v\xff" }, "UTF-8"},
		"surrogate":  {func(d *Draft) { d.PolicyVersion = "v\xed\xa0\x80" }, "UTF-8"},
		"too long": {func(d *Draft) {
			d.Payload = CallableFailedPayload{DurationUS: 1, ErrorClass: strings.Repeat(`"`, MaxRecordBytes/4)}
		}, "exceeds"},
		"long version": {func(d *Draft) { d.PolicyVersion = strings.Repeat("v", MaxRecordBytes) }, "exceeds"},
	} {
		d := good()
		tc.edit(&d)
		if _, err := Seal(d, 0, nil); err == nil {
			t.Fatalf("%s: Seal accepted the draft", name)
		}
		_, err := prepare(d)
		var re *RecordError
		if !errors.As(err, &re) || re.Code != CodeMalformedRecord || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: prepare: %v, want a malformed_record error about %s", name, err, tc.msg)
		}

		dir := t.TempDir()
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		w := &Writer{Store: s, ChainID: testChain}
		if _, _, err := w.Append(context.Background(), d); err == nil {
			t.Errorf("%s: the file store's Writer acknowledged a record ParseRecord rejects", name)
		}
		// The chain is still usable: a good record goes in and reads back.
		if _, _, err := w.Append(context.Background(), good()); err != nil {
			t.Errorf("%s: good append after the refused one: %v", name, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		if recs, err := s.Read(context.Background(), testChain, -1); err != nil || len(recs) != 1 {
			t.Errorf("%s: reading the chain back: %d records, %v", name, len(recs), err)
		}
		s.Close()
	}
}

// TestPrepareSizeBound: a record just under the bound for the longest
// link is accepted and parses at the largest sequence after a hash.
func TestPrepareSizeBound(t *testing.T) {
	op := "00000000-0000-4000-8000-000000000001"
	d := Draft{RecordID: "00000000-0000-4000-8000-000000000002", ChainID: testChain, OperationID: &op, PolicyID: testPolicy,
		PolicyVersion: "1", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
	// Find the longest error_class that prepare accepts, then check that
	// its line parses at the widest link and that one byte more is refused.
	size := func(n int) error {
		d.Payload = CallableFailedPayload{DurationUS: 1, ErrorClass: strings.Repeat("e", n)}
		_, err := prepare(d)
		return err
	}
	lo, hi := 0, MaxRecordBytes
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if size(mid) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if size(lo) != nil || size(lo+1) == nil {
		t.Fatalf("no sharp bound at %d", lo)
	}
	d.Payload = CallableFailedPayload{DurationUS: 1, ErrorClass: strings.Repeat("e", lo)}
	prev := Hash{1}
	r, err := Seal(d, MaxSequence, &prev)
	if err != nil {
		t.Fatalf("longest accepted draft at the widest link: %v", err)
	}
	if n := len(r.Canonical()); n > MaxRecordBytes || n < MaxRecordBytes-8 {
		t.Fatalf("line of %d bytes; want just under %d", n, MaxRecordBytes)
	}
}
