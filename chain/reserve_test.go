package chain

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// smallReserve makes the reserve small enough for a test to run through
// several extensions.
func smallReserve(s *FileStore) {
	s.reserveChunk, s.reserveLow, s.reserveGap = 64<<10, 32<<10, 4<<10
}

// waitReserve waits until no extension of the chain's reserve is running.
func waitReserve(t *testing.T, s *FileStore, chainID string) *fileChain {
	t.Helper()
	c, err := s.chain(chainID)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		filling, done := c.filling, c.fillDone
		c.mu.Unlock()
		if !filling {
			return c
		}
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			t.Fatal("the reserve extension never ended")
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestFileStoreReserve checks the reserve's life: zeros ahead of the data
// while the chain is open (Read, Verify and Head see only the records),
// none once the store is closed, and appends across reopen.
func TestFileStoreReserve(t *testing.T) {
	if !reserveSupported {
		t.Skip("no reserve on this platform")
	}
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	smallReserve(s)
	ids := &testIDs{}
	rcs := appendN(t, s, ids, testChain, 3)
	c := waitReserve(t, s, testChain)
	path := s.path(testChain)
	c.mu.Lock()
	size, alloc := c.size, c.alloc
	c.mu.Unlock()
	if alloc <= size || fileSize(t, path) != alloc {
		t.Fatalf("no reserve: data %d bytes, alloc %d, file %d", size, alloc, fileSize(t, path))
	}
	if s.Stats().Reserved < s.reserveChunk {
		t.Fatalf("Stats().Reserved = %d", s.Stats().Reserved)
	}
	data, _ := os.ReadFile(path)
	if len(bytes.TrimRight(data, "\x00")) != int(size) {
		t.Fatalf("the reserve is not zeros after the %d data bytes", size)
	}
	recs, err := s.Read(context.Background(), testChain, -1)
	if err != nil || len(recs) != 3 {
		t.Fatalf("Read: %d records, %v", len(recs), err)
	}
	res, err := s.Verify(context.Background(), testChain, rcs[2].HeadHash)
	if err != nil || !res.OK() || res.Records != 3 {
		t.Fatalf("Verify of an open chain: %+v %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if int64(len(data)) != size || data[len(data)-1] != '\n' {
		t.Fatalf("closed file is %d bytes, want the %d data bytes", len(data), size)
	}
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rcs = append(rcs, appendN(t, s, ids, testChain, 2)...)
	res, err = s.Verify(context.Background(), testChain, rcs[4].HeadHash)
	if err != nil || !res.OK() || res.Records != 5 {
		t.Fatalf("after reopen: %+v %v", res, err)
	}
}

// TestFileStoreReserveConcurrent runs many concurrent appends through
// several reserve extensions (a group waits when it would reach zeros
// being written): the closed file is exactly the chain's lines.
func TestFileStoreReserveConcurrent(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	smallReserve(s)
	w := &Writer{Store: s, ChainID: testChain}
	var mu sync.Mutex
	ids := &testIDs{}
	next := func() string { mu.Lock(); defer mu.Unlock(); return ids.next() }
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 60 {
				op := next()
				d := Draft{RecordID: next(), ChainID: testChain, OperationID: &op, PolicyID: testPolicy, PolicyVersion: "1",
					Payload: boundPayload(), CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
				if _, _, err := w.Append(context.Background(), d); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	tip, _, err := s.Head(context.Background(), testChain)
	if err != nil || tip.Sequence != 16*60-1 {
		t.Fatalf("head %+v %v", tip, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if reserveSupported && s.Stats().Reserved <= 64<<10 {
		t.Errorf("only %d bytes reserved: the test did not run through extensions", s.Stats().Reserved)
	}
	f, err := os.Open(s.path(testChain))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := Verify(f, VerifyOptions{ExpectedHead: &tip.Hash, ChainID: testChain})
	if err != nil || !res.OK() || res.Records != 16*60 {
		t.Fatalf("closed file: %+v %v", res, err)
	}
}

// closedChain appends n records to a chain of a new store and closes it,
// for a test to damage the file as a crash would before reopening.
func closedChain(t *testing.T, n int) (dir, path string, ids *testIDs, rcs []AppendReceipt) {
	t.Helper()
	dir = t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids = &testIDs{}
	rcs = appendN(t, s, ids, testChain, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, testChain+".jsonl"), ids, rcs
}

// TestFileStoreZeroTailIsReserve simulates a crash that left the reserve:
// opening the chain removes the trailing zeros, reports no torn tail and
// appends go on.
func TestFileStoreZeroTailIsReserve(t *testing.T) {
	dir, path, ids, rcs := closedChain(t, 2)
	size := fileSize(t, path)
	f, _ := os.OpenFile(path, os.O_WRONLY, 0)
	f.WriteAt(make([]byte, 300<<10), size)
	f.Close()

	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Head(context.Background(), testChain); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, path); got != size {
		t.Fatalf("open left %d bytes, want the %d data bytes", got, size)
	}
	rcs = append(rcs, appendN(t, s, ids, testChain, 1)...)
	res, err := s.Verify(context.Background(), testChain, rcs[2].HeadHash)
	if err != nil || !res.OK() || res.Records != 3 {
		t.Fatalf("%+v %v", res, err)
	}
}

// TestFileStoreHoleIsTornTail simulates a crash in the middle of a group
// over the reserve whose pages reached the disk out of order: the group's
// first page (4 KiB, aligned in the file, as the page cache writes) is
// still the reserve's zeros, then complete record lines, then zeros. The
// zero-containing line and everything after it is a torn tail (never
// acknowledged): appends refuse, Repair keeps those bytes (without the
// trailing zeros) in a side file.
func TestFileStoreHoleIsTornTail(t *testing.T) {
	dir, path, ids, rcs := closedChain(t, 16)
	data, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(data, []byte("\n"))
	// The group of the records after the first two lost the page after
	// the one holding their end: the line it starts in, and everything
	// after, is the torn tail.
	page := ((len(lines[0])+len(lines[1]))/4096 + 1) * 4096
	if page+4096 >= len(data) {
		t.Fatalf("the chain (%d bytes) is too short for a lost page at %d", len(data), page)
	}
	crashed := append([]byte{}, data...)
	copy(crashed[page:page+4096], make([]byte, 4096))
	crashed = append(crashed, make([]byte, 64<<10)...)
	good := bytes.LastIndexByte(data[:page], '\n') + 1
	torn := crashed[good:len(data)]
	if err := os.WriteFile(path, crashed, 0o644); err != nil {
		t.Fatal(err)
	}

	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tip, _, err := s.Head(context.Background(), testChain)
	last := bytes.Count(data[:good], []byte("\n")) - 1 // the last record before the torn line
	if err != nil || tip.Sequence != int64(last) || tip.Hash != rcs[last].HeadHash {
		t.Fatalf("head %+v %v, want sequence %d", tip, err, last)
	}
	recs, err := s.Read(context.Background(), testChain, -1)
	if err != nil || len(recs) != last+1 {
		t.Fatalf("Read: %d records, %v", len(recs), err)
	}
	var tt *TornTailError
	if _, _, err := (&Writer{Store: s, ChainID: testChain}).Append(context.Background(), draft(ids, testChain, new(ids.next()), boundPayload())); !errors.As(err, &tt) {
		t.Fatalf("append over the hole: %v", err)
	}
	if tt.Offset != int64(good) || tt.Bytes != int64(len(torn)) {
		t.Fatalf("torn tail %+v, want %d bytes at %d", tt, len(torn), good)
	}
	rep, err := s.Repair(testChain)
	if err != nil {
		t.Fatal(err)
	}
	saved, _ := os.ReadFile(rep.SavedTo)
	if !bytes.Equal(saved, torn) {
		t.Fatalf("side file holds %d bytes, want the %d torn bytes", len(saved), len(torn))
	}
	rcs = append(rcs[:last+1], appendN(t, s, ids, testChain, 1)...)
	res, err := s.Verify(context.Background(), testChain, rcs[last+1].HeadHash)
	if err != nil || !res.OK() || res.Records != int64(last+2) {
		t.Fatalf("after repair: %+v %v", res, err)
	}
}

// TestFileStoreStrayNULIsDamage: a NUL byte inside acknowledged data that
// is not part of a whole zero sector (one damaged byte) is not a write
// lost in a crash. It used to end the chain there: Head and Read gave the
// records before it, and Repair removed the 14 complete records after it
// as a "torn tail" and said so with exit 0. Now Head, Read, Append and
// Repair report the damage, and the file is left exactly as it was.
func TestFileStoreStrayNULIsDamage(t *testing.T) {
	dir, path, ids, _ := closedChain(t, 16)
	data, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(data, []byte("\n"))
	at := len(lines[0]) + 40
	damaged := append([]byte{}, data...)
	damaged[at] = 0
	if err := os.WriteFile(path, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ce *CorruptChainError
	if _, _, err := s.Head(context.Background(), testChain); !errors.As(err, &ce) || ce.Line != 2 {
		t.Errorf("Head: %v, want a CorruptChainError at line 2", err)
	}
	if _, err := s.Read(context.Background(), testChain, -1); !errors.As(err, &ce) {
		t.Errorf("Read: %v, want a CorruptChainError", err)
	}
	if _, _, err := (&Writer{Store: s, ChainID: testChain}).Append(context.Background(), draft(ids, testChain, new(ids.next()), boundPayload())); !errors.As(err, &ce) {
		t.Errorf("Append: %v, want a CorruptChainError", err)
	}
	if rep, err := s.Repair(testChain); !errors.As(err, &ce) || rep.SavedTo != "" {
		t.Errorf("Repair: %+v %v, want a CorruptChainError and nothing removed", rep, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, damaged) {
		t.Errorf("the damaged file changed: %d bytes, was %d", len(after), len(damaged))
	}
}

// TestRepairSideFileNameTaken: a side file of the name a repair wants can
// exist (a repair that crashed before truncating, an earlier tear at the
// same offset); repair used to fail with "file exists" and leave the chain
// stuck. It keeps the bytes under the next free name.
func TestRepairSideFileNameTaken(t *testing.T) {
	dir, path, _, _ := closedChain(t, 2)
	size := fileSize(t, path)
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"torn`)
	f.Close()
	taken := path + ".torn-" + strconv.FormatInt(size, 10)
	os.WriteFile(taken, []byte("an earlier repair's bytes"), 0o644)
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := s.Repair(testChain)
	if err != nil || rep.SavedTo != taken+".2" {
		t.Fatalf("Repair: %+v %v, want the bytes in %s.2", rep, err, taken)
	}
	if b, _ := os.ReadFile(taken); string(b) != "an earlier repair's bytes" {
		t.Errorf("the earlier side file was changed: %q", b)
	}
	if b, _ := os.ReadFile(rep.SavedTo); string(b) != `{"torn` {
		t.Errorf("side file %q", b)
	}
}

// TestFileStoreReserveFailure fails the reserve's extension: the chain
// goes on without a reserve and its file stays exact.
func TestFileStoreReserveFailure(t *testing.T) {
	if !reserveSupported {
		t.Skip("no reserve on this platform")
	}
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	smallReserve(s)
	s.zeroHook = func(int64) error { return errors.New("injected: no space for the reserve") }
	ids := &testIDs{}
	rcs := appendN(t, s, ids, testChain, 1)
	c := waitReserve(t, s, testChain)
	rcs = append(rcs, appendN(t, s, ids, testChain, 40)...)
	c.mu.Lock()
	noReserve := c.noReserve
	c.mu.Unlock()
	if !noReserve || s.Stats().Reserved != 0 {
		t.Fatalf("noReserve %v, reserved %d", noReserve, s.Stats().Reserved)
	}
	res, err := s.Verify(context.Background(), testChain, rcs[40].HeadHash)
	if err != nil || !res.OK() || res.Records != 41 {
		t.Fatalf("%+v %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(s.path(testChain))
	if bytes.IndexByte(data, 0) >= 0 {
		t.Fatal("zeros left in the closed file")
	}
}

// TestFileStoreGroupWaitsForReserve holds the first reserve extension
// until records queued behind it reach past where its zeros start: the
// group must wait for the zeros instead of being overwritten by them.
func TestFileStoreGroupWaitsForReserve(t *testing.T) {
	if !reserveSupported {
		t.Skip("no reserve on this platform")
	}
	s, err := OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	smallReserve(s)
	ids := &testIDs{}
	appendN(t, s, ids, testChain, 1) // the first group starts the first extension
	c := waitReserve(t, s, testChain)
	var once sync.Once
	s.zeroHook = func(int64) error {
		once.Do(func() {
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				c.mu.Lock()
				past := c.size > c.fillFrom+1024
				c.mu.Unlock()
				if past {
					return
				}
				time.Sleep(time.Millisecond)
			}
			t.Error("records never queued past the reserve's start")
		})
		return nil
	}
	// Start an extension right after the data (as when a chain is
	// opened), so that the next groups reach its zeros.
	c.mu.Lock()
	c.alloc = c.size
	s.extendReserve(c)
	c.mu.Unlock()
	w := &Writer{Store: s, ChainID: testChain}
	var mu sync.Mutex
	next := func() string { mu.Lock(); defer mu.Unlock(); return ids.next() }
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 4 {
				op := next()
				d := Draft{RecordID: next(), ChainID: testChain, OperationID: &op, PolicyID: testPolicy, PolicyVersion: "1",
					Payload: boundPayload(), CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
				if _, _, err := w.Append(context.Background(), d); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	tip, _, _ := s.Head(context.Background(), testChain)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(s.path(testChain))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := Verify(f, VerifyOptions{ExpectedHead: &tip.Hash, ChainID: testChain})
	if err != nil || !res.OK() || res.Records != 65 {
		t.Fatalf("records overwritten by the reserve: %+v %v", res.Findings, err)
	}
}

// TestFileStoreFailedReserveGivesSpaceBack: on a full disk the reserve's
// extension fails part way, and the zeros it wrote held the space the next
// group needed (a 3 MiB disk took 11 records). The failed extension is cut
// off: the file ends where the data and the published reserve end.
func TestFileStoreFailedReserveGivesSpaceBack(t *testing.T) {
	if !reserveSupported {
		t.Skip("no reserve on this platform")
	}
	s, err := OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	smallReserve(s)
	path := s.path(testChain)
	s.zeroHook = func(from int64) error {
		// What a write cut short by ENOSPC leaves: some zeros, then the
		// error.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		f.WriteAt(make([]byte, 32<<10), from)
		f.Close()
		return errors.New("injected: no space left on device")
	}
	ids := &testIDs{}
	appendN(t, s, ids, testChain, 1)
	c := waitReserve(t, s, testChain)
	c.mu.Lock()
	end, from, failed := max(c.alloc, c.size), c.fillFrom, c.noReserve
	c.mu.Unlock()
	if !failed {
		t.Fatal("the extension did not fail")
	}
	if got := fileSize(t, path); got != end || got > from {
		t.Errorf("file is %d bytes after the failed extension from %d, want %d", got, from, end)
	}
}
