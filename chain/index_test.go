package chain

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// scanAll scans s from cursor to the end, limit receipts at a time.
func scanAll(t *testing.T, s *FileStore, cursor string, limit int) ([]ProjectionReceipt, string) {
	t.Helper()
	var out []ProjectionReceipt
	for {
		page, err := s.Scan(context.Background(), cursor, limit)
		if err != nil {
			t.Fatalf("scan after %q: %v", cursor, err)
		}
		if len(page.Receipts) == 0 {
			return out, cursor
		}
		out = append(out, page.Receipts...)
		cursor = page.NextCursor
	}
}

func receiptIDs(rcs []ProjectionReceipt) map[string]bool {
	m := make(map[string]bool)
	for _, rc := range rcs {
		m[rc.RecordID] = true
	}
	return m
}

// TestFileStoreTwoStoresShareIndex opens two stores on one directory, as
// two processes writing different chains do (the chain lock is per chain;
// TestFileStoreOneWriterPerChain shows the second chain is free). They
// share projection.idx: a consumer of the first store that has scanned
// past its own records must still receive every record the second store
// appended, and no entry may be overwritten.
func TestFileStoreTwoStoresShareIndex(t *testing.T) {
	dir := t.TempDir()
	s1, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := &testIDs{}
	a := appendN(t, s1, ids, testChain, 3)
	seen, cursor := scanAll(t, s1, "", 0)
	if len(seen) != 3 {
		t.Fatalf("first scan: %d receipts, want 3", len(seen))
	}
	b := appendN(t, s2, ids, testChain2, 4)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	// The consumer keeps going on the first store: the second store's
	// records were made durable and indexed, so they must be delivered.
	more, cursor := scanAll(t, s1, cursor, 2)
	got := receiptIDs(append(append([]ProjectionReceipt{}, seen...), more...))
	for _, rc := range b {
		if !got[rc.RecordID] {
			t.Errorf("record %d of the second store's chain not delivered by the first store's Scan", rc.Sequence)
		}
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	// After both are closed, a reopened store continues the consumer's
	// cursor: together with what was delivered, every append is there.
	s3, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	rest, _ := scanAll(t, s3, cursor, 0)
	got = receiptIDs(append(append(append([]ProjectionReceipt{}, seen...), more...), rest...))
	for _, rc := range append(a, b...) {
		if !got[rc.RecordID] {
			t.Errorf("record %s (chain %s, sequence %d) never delivered", rc.RecordID, rc.ChainID, rc.Sequence)
		}
	}
	// The index holds only well-formed entries (Scan from the start works).
	all, _ := scanAll(t, s3, "", 0)
	if len(all) < 7 {
		t.Fatalf("index holds %d entries, want at least 7", len(all))
	}
}

// TestFileStoreIndexHoleRecovered simulates a crash while an index write
// was not yet synced, with its pages reaching the disk out of order: a run
// of zero bytes (a page that never made it) followed by a later, complete
// entry. Nothing past the last sync was ever delivered, so open must drop
// the damaged entries and re-index what they covered: Scan must neither
// fail on the zeros forever nor lose the records whose entries were in
// the hole.
func TestFileStoreIndexHoleRecovered(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := &testIDs{}
	rcs := appendN(t, s, ids, testChain, 4)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, indexName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) != 6 || len(lines[5]) != 0 || !bytes.HasPrefix(lines[0], []byte(indexHeader)) {
		t.Fatalf("index has %d lines", len(lines))
	}
	// After the header, entries 1 and 2 are lost in zero pages; entry 3
	// survived after them.
	crashed := append([]byte{}, lines[0]...)
	crashed = append(crashed, lines[1]...)
	crashed = append(crashed, make([]byte, 200<<10)...)
	crashed = append(crashed, lines[4]...)
	if err := os.WriteFile(path, crashed, 0o644); err != nil {
		t.Fatal(err)
	}

	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, _ := scanAll(t, s, "", 1)
	for _, rc := range all {
		if !IsUUID(rc.ChainID) || !IsUUID(rc.RecordID) {
			t.Fatalf("Scan delivered a damaged entry: %q", rc.ChainID+" "+rc.RecordID)
		}
	}
	got := receiptIDs(all)
	for _, rc := range rcs {
		if !got[rc.RecordID] {
			t.Errorf("record %d not delivered after recovery", rc.Sequence)
		}
	}
	// Delivered cursors before the damage stay valid, and a page of one
	// after it skips the whole damaged line (the entry glued to the zeros
	// included) to the entries open appended for the records it lacked.
	page, err := s.Scan(context.Background(), s.idxGen+":"+strconv.Itoa(len(lines[0])+len(lines[1])), 1)
	if err != nil || len(page.Receipts) != 1 || page.Receipts[0].RecordID != rcs[1].RecordID {
		t.Fatalf("scan after the first entry: %+v %v", page, err)
	}
}

// TestCrashIndexGapRecovered: a store is open (a long-running process)
// when another process writes a chain and dies before writing its queued
// index entries. The open store then takes the chain over and appends to
// it, so the index has an entry for a later sequence of the chain but none
// for the dead writer's records. The next open must still index them:
// every durable append is delivered at least once.
func TestCrashIndexGapRecovered(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	s0, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	acked := runCrashChild(t, "presync", dir, 4)
	more := appendN(t, s0, &testIDs{n: 9000}, testChain, 1)
	if err := s0.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.Read(context.Background(), testChain, -1)
	if err != nil || int64(len(recs)) != more[0].Sequence+1 || len(recs) < len(acked)+1 {
		t.Fatalf("chain holds %d records (%v), want %d", len(recs), err, more[0].Sequence+1)
	}
	all, _ := scanAll(t, s, "", 0)
	got := receiptIDs(all)
	for _, r := range recs {
		if !got[r.RecordID] {
			t.Errorf("record %d (durable) never delivered by Scan", r.Sequence)
		}
	}
}

// TestFileStoreIndexTornByOtherWriter: another store on the directory died
// in the middle of an index write, leaving a torn last line. The running
// store's Scan does not deliver it, and its next write replaces it instead
// of appending after it (which would leave a malformed entry that stops
// every Scan).
func TestFileStoreIndexTornByOtherWriter(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := &testIDs{}
	rcs := appendN(t, s, ids, testChain, 2)
	first, cursor := scanAll(t, s, "", 0)
	if len(first) != 2 {
		t.Fatalf("%d receipts", len(first))
	}
	f, err := os.OpenFile(filepath.Join(dir, indexName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(testChain2 + " 0 00000000-0000-4000-8000-0000")
	f.Close()
	if page, err := s.Scan(context.Background(), cursor, 0); err != nil || len(page.Receipts) != 0 || page.NextCursor != cursor {
		t.Fatalf("scan over a torn line: %+v %v", page, err)
	}
	rcs = append(rcs, appendN(t, s, ids, testChain, 2)...)
	rest, _ := scanAll(t, s, cursor, 1)
	if len(rest) != 2 || rest[0].RecordID != rcs[2].RecordID || rest[1].RecordID != rcs[3].RecordID {
		t.Fatalf("after the torn line: %+v", rest)
	}
}

// TestFileStoreTwoStoresConcurrent runs two stores on one directory, each
// appending to its own chain from several goroutines while a consumer
// scans the first store: every append is delivered, and every entry is
// well formed.
func TestFileStoreTwoStoresConcurrent(t *testing.T) {
	dir := t.TempDir()
	var stores [2]*FileStore
	for i := range stores {
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	const perChain = 60
	chains := [2]string{testChain, testChain2}
	done := make(chan []AppendReceipt, 2)
	for i, s := range stores {
		go func() {
			ids := &testIDs{n: i * 100000}
			var out []AppendReceipt
			w := &Writer{Store: s, ChainID: chains[i]}
			for range perChain {
				op := ids.next()
				_, rc, err := w.Append(context.Background(), draft(ids, chains[i], &op, boundPayload()))
				if err != nil {
					t.Error(err)
					break
				}
				out = append(out, rc)
				if len(out)%7 == 0 {
					// The writer's own Scan writes its queue.
					if _, err := s.Scan(context.Background(), "", 1); err != nil {
						t.Error(err)
					}
				}
			}
			done <- out
		}()
	}
	got := map[string]bool{}
	cursor := ""
	var appended []AppendReceipt
	for finished := 0; finished < 2; {
		select {
		case rcs := <-done:
			appended = append(appended, rcs...)
			finished++
		default:
		}
		page, err := stores[0].Scan(context.Background(), cursor, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, rc := range page.Receipts {
			got[rc.RecordID] = true
		}
		cursor = page.NextCursor
	}
	for i := range stores {
		if err := stores[i].Close(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rest, _ := scanAll(t, s, cursor, 3)
	for _, rc := range rest {
		got[rc.RecordID] = true
	}
	if len(appended) != 2*perChain {
		t.Fatalf("%d appends", len(appended))
	}
	for _, rc := range appended {
		if !got[rc.RecordID] {
			t.Errorf("record %d of chain %s never delivered", rc.Sequence, rc.ChainID)
		}
	}
}

// TestFileStoreFailedSyncDropsGroup fails a group's fsync: its waiter gets
// the error, and after a reopen the chain ends with the last acknowledged
// record. A failed fsync may leave the group's pages in the page cache,
// marked clean but never written (Linux does so after an I/O error): a
// reopen that loaded them would append after records the disk does not
// hold.
func TestFileStoreFailedSyncDropsGroup(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := &testIDs{}
	rcs := appendN(t, s, ids, testChain, 2)
	s.syncHook = func(*os.File) error { return errors.New("injected: EIO") }
	w := &Writer{Store: s, ChainID: testChain}
	op := ids.next()
	if _, _, err := w.Append(context.Background(), draft(ids, testChain, &op, boundPayload())); err == nil {
		t.Fatal("append over a failed fsync succeeded")
	}
	if err := s.Close(); err != nil {
		t.Log(err)
	}
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tip, ok, err := s.Head(context.Background(), testChain)
	if err != nil || !ok || tip.Sequence != 1 || tip.Hash != rcs[1].HeadHash {
		t.Fatalf("head after reopen: %+v %v %v, want the last acknowledged record (sequence 1)", tip, ok, err)
	}
	more := appendN(t, s, ids, testChain, 1)
	res, err := s.Verify(context.Background(), testChain, more[0].HeadHash)
	if err != nil || !res.OK() || res.Records != 3 {
		t.Fatalf("verify: %+v %v", res, err)
	}
}

// TestIndexRebuiltCursorRestarts: projection.idx is derived data that open
// rebuilds from the chains. Rebuilt, it lists chains in sorted order, so a
// cursor (a byte offset) delivered from the old index pointed past entries
// of the new one: the projector skipped 300 records and reported nothing.
// A rebuilt index has a new generation, and a cursor into another
// generation starts again from the beginning.
func TestIndexRebuiltCursorRestarts(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := &testIDs{}
	appendN(t, s, ids, testChain2, 5)
	_, cursor := scanAll(t, s, "", 2)
	late := appendN(t, s, ids, testChain, 3) // sorts before testChain2
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, indexName)); err != nil {
		t.Fatal(err)
	}
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _ := scanAll(t, s, cursor, 2)
	ids2 := receiptIDs(got)
	for _, rc := range late {
		if !ids2[rc.RecordID] {
			t.Errorf("record %d of the chain appended after the cursor was skipped", rc.Sequence)
		}
	}
	if !strings.Contains(cursor, ":") {
		t.Errorf("cursor %q carries no generation", cursor)
	}
}

// TestIndexRebuiltLargeHasHeader: a rebuild writes entries as it goes
// (every 256 KiB): the first batch landed at offset 0, ahead of the
// header, so a large rebuilt index had no generation, handed out bare
// offsets, and a second rebuild skipped records again. The header is now
// written before any entry of an empty index.
func TestIndexRebuiltLargeHasHeader(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.syncHook = func(*os.File) error { return nil } // many records, quickly
	ids := &testIDs{}
	appendN(t, s, ids, testChain2, 2500) // > 256 KiB of index entries
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rebuild := func() *FileStore {
		t.Helper()
		if err := os.Remove(filepath.Join(dir, indexName)); err != nil {
			t.Fatal(err)
		}
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		if s.idxGen == "" {
			t.Fatal("the rebuilt index has no generation")
		}
		return s
	}
	s = rebuild()
	_, cursor := scanAll(t, s, "", 500)
	late := appendN(t, s, ids, testChain, 3) // sorts first
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = rebuild()
	defer s.Close()
	got, _ := scanAll(t, s, cursor, 500)
	seen := receiptIDs(got)
	for _, rc := range late {
		if !seen[rc.RecordID] {
			t.Errorf("record %d skipped after a second rebuild", rc.Sequence)
		}
	}
}
