package chain

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A minimal producer for internal tests (evidencegen imports this package).

type testIDs struct{ n int }

func (g *testIDs) next() string {
	g.n++
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", g.n)
}

const (
	testPolicy = "11111111-1111-4111-8111-111111111111"
	testChain  = "22222222-2222-4222-8222-222222222222"
	testChain2 = "33333333-3333-4333-8333-333333333333"
)

var testDigest = strings.Repeat("ab", 32)

func draft(ids *testIDs, chainID string, op *string, p Payload) Draft {
	return Draft{RecordID: ids.next(), ChainID: chainID, OperationID: op, PolicyID: testPolicy, PolicyVersion: "1",
		Payload: p, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
}

func boundPayload() Payload {
	return PolicyBoundPayload{EffectBackendID: "b", EffectCapabilityDigest: testDigest, PolicyDigest: testDigest, TaskBoundaryID: testPolicy}
}

func conflictReason(err error) string {
	var ce *ConflictError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return ""
}

func appendN(t *testing.T, s Store, ids *testIDs, chainID string, n int) []AppendReceipt {
	t.Helper()
	w := &Writer{Store: s, ChainID: chainID}
	var out []AppendReceipt
	for range n {
		op := ids.next()
		_, rc, err := w.Append(context.Background(), draft(ids, chainID, &op, boundPayload()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rc)
	}
	return out
}

// TestFileStoreReopen checks that cursors survive a restart and that a lost
// index is rebuilt (every append delivered at least once).
func TestFileStoreReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := &testIDs{}
	appendN(t, s, ids, testChain, 3)
	page, err := s.Scan(context.Background(), "", 0)
	if err != nil || len(page.Receipts) != 3 {
		t.Fatalf("scan: %v %v", page, err)
	}
	// Sequential appends each wait for their own fsync: one group each.
	if st := s.Stats(); st.Groups != 3 || st.Records != 3 || st.RecordsPerGroup() != 1 || st.MeanSync() <= 0 {
		t.Errorf("stats after 3 sequential appends = %+v", st)
	}
	s.Close()
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st != (FileStoreStats{}) || st.RecordsPerGroup() != 0 {
		t.Errorf("stats of a reopened store = %+v, want zero", st)
	}
	more := appendN(t, s, ids, testChain, 2)
	next, err := s.Scan(context.Background(), page.NextCursor, 0)
	if err != nil || len(next.Receipts) != 2 || next.Receipts[0].RecordID != more[0].RecordID {
		t.Fatalf("scan after reopen: %+v %v", next, err)
	}
	s.Close()
	os.Remove(filepath.Join(dir, indexName))
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, err := s.Scan(context.Background(), "", 0)
	if err != nil || len(all.Receipts) != 5 {
		t.Fatalf("rebuilt index: %d receipts, %v", len(all.Receipts), err)
	}
}

func TestFileStoreOneWriterPerChain(t *testing.T) {
	dir := t.TempDir()
	s1, _ := OpenFileStore(dir)
	defer s1.Close()
	s2, _ := OpenFileStore(dir)
	defer s2.Close()
	ids := &testIDs{}
	appendN(t, s1, ids, testChain, 1)
	op := ids.next()
	r, _ := Seal(draft(ids, testChain, &op, boundPayload()), 1, nil)
	if _, err := s2.Append(context.Background(), r); !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer: %v, want ErrLocked", err)
	}
	appendN(t, s2, ids, testChain2, 1) // another chain is free
}

// --- crash tests --------------------------------------------------------

// TestCrashChild is the writer process of the crash tests; it does nothing
// unless started by them.
func TestCrashChild(t *testing.T) {
	mode := os.Getenv("POLC_CRASH_CHILD")
	if mode == "" {
		t.Skip("helper process")
	}
	dir := os.Getenv("POLC_CRASH_DIR")
	k, _ := strconv.Atoi(os.Getenv("POLC_CRASH_AT"))
	s, err := OpenFileStore(dir)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	n := 0
	die := func() {
		// Process.Kill is SIGKILL on Unix: no deferred code, no flush.
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			p.Kill()
		}
		select {}
	}
	s.writeHook = func(f *os.File, b []byte, off int64) (int, error) {
		n++
		if n == k && mode == "torn" {
			f.WriteAt(b[:len(b)/2], off)
			die()
		}
		return f.WriteAt(b, off)
	}
	s.beforeSync = func() {
		if n == k && mode == "presync" {
			die()
		}
	}
	ids := &testIDs{n: 1000}
	w := &Writer{Store: s, ChainID: testChain}
	out := bufio.NewWriter(os.Stdout)
	for {
		op := ids.next()
		_, rc, err := w.Append(context.Background(), draft(ids, testChain, &op, boundPayload()))
		if err != nil {
			fmt.Fprintln(out, "error", err)
			out.Flush()
			os.Exit(1)
		}
		fmt.Fprintln(out, "ack", rc.Sequence, rc.HeadHash)
		out.Flush()
	}
}

func runCrashChild(t *testing.T, mode, dir string, at int) map[int64]Hash {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), "POLC_CRASH_CHILD="+mode, "POLC_CRASH_DIR="+dir, "POLC_CRASH_AT="+strconv.Itoa(at))
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}
	acked := map[int64]Hash{}
	for _, ln := range strings.Split(string(out), "\n") {
		f := strings.Fields(ln)
		if len(f) == 3 && f[0] == "ack" {
			seq, _ := strconv.ParseInt(f[1], 10, 64)
			h, _ := ParseHash(f[2])
			acked[seq] = h
		}
	}
	if len(acked) != at-1 {
		t.Fatalf("child acknowledged %d appends, want %d", len(acked), at-1)
	}
	return acked
}

func checkAcked(t *testing.T, s *FileStore, acked map[int64]Hash) {
	t.Helper()
	recs, err := s.Read(context.Background(), testChain, -1)
	if err != nil {
		t.Fatal(err)
	}
	for seq, h := range acked {
		if seq >= int64(len(recs)) || recs[seq].Hash() != h {
			t.Fatalf("acknowledged record %d lost", seq)
		}
	}
}

// TestCrashTornWrite kills the writer in the middle of a write: on reopen
// nothing acknowledged is lost, the torn tail is reported, appends refuse
// until Repair, which keeps the torn bytes in a side file.
func TestCrashTornWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	acked := runCrashChild(t, "torn", dir, 6)
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkAcked(t, s, acked)
	res, err := s.Verify(context.Background(), testChain, acked[4])
	if err != nil {
		t.Fatal(err)
	}
	if res.First(CodeTornTail) == nil || !res.TornTail || res.Records != 5 {
		t.Fatalf("torn tail not reported: %+v", res.Findings)
	}
	ids := &testIDs{n: 5000}
	op := ids.next()
	h := acked[4]
	next, _ := Seal(draft(ids, testChain, &op, boundPayload()), 5, &h)
	var tt *TornTailError
	if _, err := s.Append(context.Background(), next); !errors.As(err, &tt) {
		t.Fatalf("append on a torn chain: %v", err)
	}
	rep, err := s.Repair(testChain)
	if err != nil || rep.Bytes == 0 || rep.SavedTo == "" {
		t.Fatalf("repair: %+v %v", rep, err)
	}
	saved, _ := os.ReadFile(rep.SavedTo)
	if int64(len(saved)) != rep.Bytes {
		t.Fatalf("side file has %d bytes, want %d", len(saved), rep.Bytes)
	}
	if _, err := s.Append(context.Background(), next); err != nil {
		t.Fatalf("append after repair: %v", err)
	}
	res, _ = s.Verify(context.Background(), testChain, next.Hash())
	if !res.OK() || res.Records != 6 {
		t.Fatalf("after repair: %+v", res.Findings)
	}
}

// TestCrashBeforeSync kills the writer after a complete write but before
// fsync: the unacknowledged record may be present (the page cache survived
// the process), every acknowledged one is, and appends continue.
func TestCrashBeforeSync(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	acked := runCrashChild(t, "presync", dir, 4)
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkAcked(t, s, acked)
	tip, ok, err := s.Head(context.Background(), testChain)
	if err != nil || !ok || tip.Sequence < 2 {
		t.Fatalf("head after crash: %+v %v", tip, err)
	}
	appendN(t, s, &testIDs{n: 9000}, testChain, 1)
	page, _ := s.Scan(context.Background(), "", 0)
	if int64(len(page.Receipts)) != tip.Sequence+2 {
		t.Fatalf("projection has %d entries, want %d (recovered from the chain file)", len(page.Receipts), tip.Sequence+2)
	}
}

// TestFileStoreGroupCommit holds the first fsync until every other writer
// has queued its record, then checks that they all became durable in one
// second group, that every waiter was acknowledged, and that the chain is
// linear.
func TestFileStoreGroupCommit(t *testing.T) {
	s, err := OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writers = 32
	c, err := s.chain(testChain)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	s.beforeSync = func() {
		once.Do(func() {
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				// Every writer's record is accepted: the ones not in this
				// group wait in the next.
				c.mu.Lock()
				accepted := c.state.has && c.state.tip.Sequence == writers-1
				c.mu.Unlock()
				if accepted {
					return
				}
				time.Sleep(time.Millisecond)
			}
			t.Error("the other writers were never accepted")
		})
	}
	w := &Writer{Store: s, ChainID: testChain}
	var mu sync.Mutex
	ids := &testIDs{}
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			op := ids.next()
			d := draft(ids, testChain, &op, boundPayload())
			mu.Unlock()
			if _, _, err := w.Append(context.Background(), d); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// The first group may hold one record or several (the flusher starts
	// after the first append); everything else shares the second.
	if st := s.Stats(); st.Groups < 1 || st.Groups > 2 || st.Records != writers {
		t.Errorf("stats = %+v, want %d records in at most 2 groups", st, writers)
	}
	tip, _, _ := s.Head(context.Background(), testChain)
	res, err := s.Verify(context.Background(), testChain, tip.Hash)
	if err != nil || !res.OK() || res.Records != writers {
		t.Fatalf("verify: %+v %v", res, err)
	}
}

// TestFileStoreShortWriteRepair injects a short write in-process: the
// waiter gets an error and later appends refuse; Repair refuses on the
// broken store (its in-memory tip is not the disk's) and succeeds after a
// reopen, after which the chain continues from the last durable record.
func TestFileStoreShortWriteRepair(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := &testIDs{}
	appendN(t, s, ids, testChain, 2)
	s.writeHook = func(f *os.File, b []byte, off int64) (int, error) {
		n, _ := f.WriteAt(b[:len(b)/2], off)
		return n, errors.New("injected: device full")
	}
	w := &Writer{Store: s, ChainID: testChain}
	op := ids.next()
	if _, _, err := w.Append(context.Background(), draft(ids, testChain, &op, boundPayload())); err == nil {
		t.Fatal("append over a short write succeeded")
	}
	op = ids.next()
	if _, _, err := w.Append(context.Background(), draft(ids, testChain, &op, boundPayload())); err == nil || !strings.Contains(err.Error(), "earlier write failed") {
		t.Fatalf("append after a failed write: %v", err)
	}
	if _, err := s.Repair(testChain); err == nil || !strings.Contains(err.Error(), "reopen") {
		t.Fatalf("repair on the broken store: %v", err)
	}
	s.Close()
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := s.Repair(testChain)
	if err != nil || rep.Bytes == 0 {
		t.Fatalf("repair after reopen: %+v %v", rep, err)
	}
	more := appendN(t, s, ids, testChain, 1)
	if more[0].Sequence != 2 {
		t.Fatalf("next sequence %d, want 2 (after the two acknowledged records)", more[0].Sequence)
	}
	res, err := s.Verify(context.Background(), testChain, more[0].HeadHash)
	if err != nil || !res.OK() || res.Records != 3 {
		t.Fatalf("verify: %+v %v", res, err)
	}
}

// TestPreparedLinesAreCanonical checks the writer's fast path (prepare
// outside the lock, link under it, no re-parse by the file store) against
// the reference: every line the file store wrote parses, equals the
// record's Canonical() form and hashes to its chain_hash, for payloads
// heavy in characters JSON escapes.
func TestPreparedLinesAreCanonical(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := &Writer{Store: s, ChainID: testChain}
	ids := &testIDs{}
	var written []*Record
	for i, reason := range []string{"plain", `quote " and \ backslash`, "ctl \x01\x1f\t\n", "é €\u2028\U0001F600", "</script>&"} {
		op := ids.next()
		var p Payload = OperationDeniedPayload{Disposition: "deny", ReasonCode: reason}
		if i == 0 {
			p = boundPayload()
		}
		r, _, err := w.Append(context.Background(), draft(ids, testChain, &op, p))
		if err != nil {
			t.Fatalf("%q: %v", reason, err)
		}
		written = append(written, r)
	}
	// Closing truncates the reserve: the file ends with its last record.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, testChain+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != len(written) {
		t.Fatalf("%d lines, want %d", len(lines), len(written))
	}
	for i, ln := range lines {
		parsed, err := ParseRecord([]byte(ln))
		if err != nil {
			t.Fatalf("line %d does not parse: %v", i+1, err)
		}
		if string(written[i].Canonical()) != ln {
			t.Errorf("line %d is not the record's canonical form:\n got %s\nwant %s", i+1, ln, written[i].Canonical())
		}
		if parsed.ComputeChainHash() != written[i].Hash() {
			t.Errorf("line %d: chain_hash does not cover the line", i+1)
		}
	}
}

// TestFileStoreFailedGroupWakesNextGroup fails the first group's write
// while further records wait in the next group: every waiter, in either
// group, gets the error; none hangs on a group that will never be written.
func TestFileStoreFailedGroupWakesNextGroup(t *testing.T) {
	s, err := OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.chain(testChain)
	if err != nil {
		t.Fatal(err)
	}
	const queued = 8 // records in the next group
	inWrite := make(chan struct{})
	s.writeHook = func(f *os.File, b []byte, _ int64) (int, error) {
		close(inWrite) // the hook runs once: the chain is broken after it
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			c.mu.Lock()
			n := len(c.pendRec)
			c.mu.Unlock()
			if n == queued {
				return 0, errors.New("injected: device gone")
			}
			time.Sleep(time.Millisecond)
		}
		t.Error("the next group never filled")
		return 0, errors.New("injected")
	}
	w := &Writer{Store: s, ChainID: testChain}
	ids := &testIDs{}
	var mu sync.Mutex
	errs := make(chan error, queued+1)
	appendOne := func() {
		mu.Lock()
		op := ids.next()
		d := draft(ids, testChain, &op, boundPayload())
		mu.Unlock()
		_, _, err := w.Append(context.Background(), d)
		errs <- err
	}
	go appendOne() // the first group: this record alone
	<-inWrite
	for range queued {
		go appendOne()
	}
	for range queued + 1 {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("an append over a failed write succeeded")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter hangs after the write failed")
		}
	}
}

// TestFileStoreCloseDrainsFlusher closes the store while records accepted
// by AppendAsync are still being written: Close waits for the flusher, each
// wait then reports durability, the reopened chain holds every record, and
// appends after Close are refused.
func TestFileStoreCloseDrainsFlusher(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := &Writer{Store: s, ChainID: testChain}
	ids := &testIDs{}
	var waits []func() error
	for range 50 {
		op := ids.next()
		_, _, wait, err := w.AppendAsync(context.Background(), draft(ids, testChain, &op, boundPayload()))
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, wait)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, wait := range waits {
		if err := wait(); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	op := ids.next()
	if _, _, err := w.Append(context.Background(), draft(ids, testChain, &op, boundPayload())); err == nil {
		t.Fatal("append after Close succeeded")
	}
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tip, ok, err := s.Head(context.Background(), testChain)
	if err != nil || !ok || tip.Sequence != 49 {
		t.Fatalf("head after reopen: %+v %v %v, want sequence 49", tip, ok, err)
	}
	page, err := s.Scan(context.Background(), "", 0)
	if err != nil || len(page.Receipts) != 50 {
		t.Fatalf("scan after reopen: %d receipts, %v", len(page.Receipts), err)
	}
}
