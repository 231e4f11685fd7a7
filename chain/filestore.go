package chain

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"polc.dev/polc/internal/atomicfile"
)

// FileStore is the embedded default Store: one JSONL file per chain in a
// directory, one canonical record per line. Append returns once its record
// is written and fsynced; concurrent appends share one write and fsync per
// group (see AppendAsync).
//
// Layout of the directory:
//
//	<chain_id>.jsonl          the chain, one record per line
//	<chain_id>.lock           held (flock) by the one process writing the chain
//	<chain_id>.jsonl.torn-<offset>  bytes removed by Repair, kept for audit
//	projection.idx            append order for Scan: "<chain_id> <sequence> <record_id> <chain_hash>\n"
//
// Several stores (processes) may have one directory open, each writing its
// own chains: they share projection.idx, which is append-only and written
// under its flock, so that every store's entries, and every cursor any of
// them delivered, survive the others' writes.
//
// A torn last line (an append interrupted between write and fsync, or a
// crash mid-write) is detected when the chain is opened: Verify reports it
// as torn_tail and Append refuses with *TornTailError until Repair is called
// explicitly. Nothing is ever dropped silently: Repair moves the torn bytes
// into a side file before truncating.
//
// The reserve (Linux, amd64 and arm64): while a chain is open for writing,
// its file extends past the last record with zeros that are already
// written and fsynced, so that a group written over them changes no file
// metadata and its fdatasync needs no journal commit (about half the
// latency of an fsync that grows the file, on ext4). A background writer
// keeps a few MiB of reserve ahead of the data; Close truncates it. After a crash the file
// may end in zeros: opening the chain removes trailing zero bytes (no
// record contains a NUL byte), and a line containing a NUL byte, with
// everything after it, is the torn tail of a group that was never
// acknowledged (its pages reached the disk out of order), repaired as
// above.
type FileStore struct {
	dir string

	// reserve sizing: keep at least reserveLow bytes of reserve ahead of
	// the data, extended reserveChunk at a time, starting no closer than
	// reserveGap to the data (0 chunk = no reserve).
	reserveChunk, reserveLow, reserveGap int64

	mu     sync.Mutex
	chains map[string]*fileChain
	closed bool // Close was called: chains are not reopened

	idxMu   sync.Mutex
	idx     *os.File
	idxSize int64 // bytes written to idx
	// idxGen is the index file's generation (its header line; "" for an
	// index written before headers). Cursors carry it: a rebuilt index
	// has another, and a cursor into the old one restarts from the start
	// instead of landing on an arbitrary entry of the new one.
	idxGen    string
	idxSynced int64  // bytes of idx fsynced
	idxBuf    []byte // entries not yet written (see index)

	groups, records, bytes, syncNanos, reserved atomic.Int64

	// test hooks (crash tests)
	writeHook  func(f *os.File, b []byte, off int64) (int, error)
	beforeSync func()
	syncHook   func(f *os.File) error // replaces a group's datasync
	zeroHook   func(from int64) error
}

// FileStoreStats counts a FileStore's group commits since it was opened:
// what an operator watches to see whether concurrent appends share fsyncs.
type FileStoreStats struct {
	// Groups is the number of write+fsync rounds that succeeded.
	Groups int64
	// Records is the number of records those rounds made durable.
	Records int64
	// Bytes is the number of bytes those rounds wrote.
	Bytes int64
	// SyncTime is the total time spent in write+fsync.
	SyncTime time.Duration
	// Reserved is the number of zero bytes written ahead of the data (see
	// FileStore); they cost the disk as much as the records.
	Reserved int64
}

// RecordsPerGroup is the mean number of records one fsync made durable (0
// before the first group).
func (st FileStoreStats) RecordsPerGroup() float64 {
	if st.Groups == 0 {
		return 0
	}
	return float64(st.Records) / float64(st.Groups)
}

// MeanSync is the mean time of one group's write and fsync.
func (st FileStoreStats) MeanSync() time.Duration {
	if st.Groups == 0 {
		return 0
	}
	return st.SyncTime / time.Duration(st.Groups)
}

// Stats returns the store's group-commit counters. It is safe to call
// concurrently with appends.
func (s *FileStore) Stats() FileStoreStats {
	return FileStoreStats{Groups: s.groups.Load(), Records: s.records.Load(), Bytes: s.bytes.Load(), SyncTime: time.Duration(s.syncNanos.Load()), Reserved: s.reserved.Load()}
}

type fileChain struct {
	mu       sync.Mutex
	f        *os.File
	lock     *os.File
	state    *chainState
	size     int64 // bytes of complete lines, pending ones included
	written  int64 // bytes of size written to the file
	pending  []byte
	pendRec  []*Record // the records in pending, for the index
	spare    []byte    // the last group's buffer, reused for the next
	spareRec []*Record
	synced   int64        // bytes of size known durable (fsynced)
	durable  atomic.Int64 // synced, readable without mu
	// The flusher goroutine runs while records are pending: it writes and
	// fsyncs them group after group, then exits.
	flushing bool
	exited   chan struct{} // closed when the running flusher exits
	syncing  bool          // a group is being written and fsynced
	inflight int64         // the size the in-flight group makes durable
	doneCur  chan struct{} // closed when the in-flight group finishes
	doneNext chan struct{} // closed when the group after it finishes
	closed   bool          // the store was closed: no more appends
	torn     int64         // bytes of the torn tail after size (0 = none)
	// The reserve: the file is alloc bytes long, zeros after the data.
	alloc     int64
	filling   bool          // the reserve is being extended
	fillFrom  int64         // where the zeros being written start
	fillDone  chan struct{} // closed when the extension ends
	noReserve bool          // an extension failed: go on without one
	broken    error         // a previous write or fsync failed: reopen required
	corrupt   error         // the file does not verify as a chain prefix
}

// TornTailError is returned by Append on a chain whose last line is torn.
type TornTailError struct {
	ChainID string
	Offset  int64 // where the torn bytes start
	Bytes   int64
}

func (e *TornTailError) Error() string {
	return fmt.Sprintf("chain %s: torn tail of %d bytes at offset %d; run polc evidence repair before appending", e.ChainID, e.Bytes, e.Offset)
}

// CorruptChainError is returned by Append on a chain file that does not
// verify up to its last complete line.
type CorruptChainError struct {
	ChainID string
	Line    int
	Err     error
}

func (e *CorruptChainError) Error() string {
	return fmt.Sprintf("chain %s: line %d: %v", e.ChainID, e.Line, e.Err)
}

func (e *CorruptChainError) Unwrap() error { return e.Err }

// ErrLocked is returned when another process holds a chain's writer lock.
var ErrLocked = errors.New("chain: another writer holds the chain's lock")

const indexName = "projection.idx"

// OpenFileStore opens (creating if needed) a file store in dir and
// reconciles its projection index with the chain files.
func OpenFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &FileStore{dir: dir, chains: make(map[string]*fileChain),
		reserveChunk: 4 << 20, reserveLow: 2 << 20, reserveGap: 512 << 10}
	if err := s.recoverIndex(); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases every lock and file.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for _, c := range s.chains {
		errs = append(errs, c.release())
	}
	s.chains = map[string]*fileChain{}
	s.idxMu.Lock()
	if s.idx != nil {
		errs = append(errs, s.writeIndexLocked(), s.idx.Sync(), s.idx.Close())
		s.idx = nil
	}
	s.idxMu.Unlock()
	return errors.Join(errs...)
}

// Release ends the writing of one chain: it waits until the records
// accepted so far are written and synced, truncates the reserve, and
// closes the chain's file and lock. The file then ends with its last
// record, so it can be handed to an auditor as it is, and the store holds
// no descriptor or reserve for it (the executor releases a chain once its
// task_closed is durable). A later Append or Head opens the chain again;
// an append racing with Release fails. Releasing a chain that is not open
// does nothing.
func (s *FileStore) Release(chainID string) error {
	s.mu.Lock()
	c := s.chains[chainID]
	delete(s.chains, chainID)
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.release()
}

// release finishes c's writer: the flusher and the reserve's writer
// done, the reserve truncated, the file and the lock closed.
func (c *fileChain) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.flushing {
		// Let the flusher finish the records already accepted.
		exited := c.exited
		c.mu.Unlock()
		<-exited
		c.mu.Lock()
	}
	for c.filling {
		done := c.fillDone
		c.mu.Unlock()
		<-done
		c.mu.Lock()
	}
	var errs []error
	if c.f != nil && c.broken == nil && c.corrupt == nil && c.torn == 0 && (c.alloc > c.size || c.noReserve) {
		// A closed chain file ends with its last record (a failed
		// extension may have left zeros past alloc).
		if err := c.f.Truncate(c.size); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, datasync(c.f))
		}
	}
	if c.f != nil {
		errs = append(errs, c.f.Close())
		c.f = nil
	}
	if c.lock != nil {
		errs = append(errs, unlockFile(c.lock), c.lock.Close())
		c.lock = nil
	}
	return errors.Join(errs...)
}

// Export writes the chain's records as they are durable on disk (JSONL,
// the reserve and any torn tail left out) to w: what an auditor verifies,
// whether or not the chain is still open for writing. A missing chain
// writes nothing.
func (s *FileStore) Export(chainID string, w io.Writer) error {
	if !IsUUID(chainID) {
		return fmt.Errorf("chain: %q is not a lowercase UUID", chainID)
	}
	f, err := os.Open(s.path(chainID))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if c := s.loaded(chainID); c != nil {
		_, err = io.Copy(w, io.NewSectionReader(f, 0, c.durable.Load()))
		return err
	}
	// A released or never-opened chain: its file ends with its last
	// record, unless a crash left a torn tail or reserve zeros, where
	// the export stops (neither is a record).
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadBytes('\n')
		if !recordLine(line) {
			if err != nil && err != io.EOF {
				return err
			}
			return nil
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
}

// loaded returns the writer state of a chain this store has open, or nil.
func (s *FileStore) loaded(chainID string) *fileChain {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chains[chainID]
}

// recordLine reports whether ln (with its newline) can be a record: it is
// complete and holds no NUL byte (a torn tail or the reserve is no record).
func recordLine(ln []byte) bool {
	return len(ln) > 0 && ln[len(ln)-1] == '\n' && bytes.IndexByte(ln, 0) < 0
}

func (s *FileStore) path(chainID string) string { return filepath.Join(s.dir, chainID+".jsonl") }

// chain returns the loaded writer state of a chain, loading it on first use.
func (s *FileStore) chain(chainID string) (*fileChain, error) {
	if !IsUUID(chainID) {
		return nil, fmt.Errorf("chain: %q is not a lowercase UUID", chainID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("chain: store is closed")
	}
	if c := s.chains[chainID]; c != nil {
		return c, nil
	}
	lock, err := lockFile(filepath.Join(s.dir, chainID+".lock"))
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.path(chainID), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		unlockFile(lock)
		lock.Close()
		return nil, err
	}
	c := &fileChain{f: f, lock: lock, state: newChainState(), doneNext: make(chan struct{})}
	err = c.load(chainID)
	c.written, c.synced = c.size, c.size
	c.durable.Store(c.synced)
	if err != nil {
		f.Close()
		unlockFile(lock)
		lock.Close()
		return nil, err
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		f.Close()
		unlockFile(lock)
		lock.Close()
		return nil, err
	}
	s.chains[chainID] = c
	return c, nil
}

// load replays the file through the append checks, up to its tail (see
// loadTail).
func (c *fileChain) load(chainID string) error {
	st, err := c.f.Stat()
	if err != nil {
		return err
	}
	if _, err := c.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	br := bufio.NewReaderSize(c.f, 1<<16)
	lineNo := 0
	for {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return err
		}
		if err == io.EOF || bytes.IndexByte(b, 0) >= 0 {
			return c.loadTail(chainID, lineNo, st.Size())
		}
		lineNo++
		if c.corrupt == nil {
			r, perr := ParseRecord(b[:len(b)-1])
			if perr == nil && r.ChainID != chainID {
				perr = fmt.Errorf("record of chain %s", r.ChainID)
			}
			if perr == nil {
				_, _, perr = c.state.check(r)
			}
			if perr != nil {
				c.corrupt = &CorruptChainError{ChainID: chainID, Line: lineNo, Err: perr}
			} else {
				c.state.commit(r)
			}
		}
		c.size += int64(len(b))
	}
}

// loadTail classifies what follows the last complete line without a NUL
// byte: trailing zeros are the reserve (or pages of an unacknowledged
// group that never reached the disk) and are truncated, since no record
// holds a NUL byte; anything before them is a torn tail. A NUL byte
// before them that is not part of a whole zero sector is damage, not a
// write that never reached the disk (a lost write leaves whole sectors of
// the reserve's zeros): the chain is corrupt, and nothing is truncated or
// offered to repair, since the complete lines after it may have been
// acknowledged.
func (c *fileChain) loadTail(chainID string, lineNo int, length int64) error {
	tail := make([]byte, length-c.size)
	if _, err := c.f.ReadAt(tail, c.size); err != nil && err != io.EOF {
		return err
	}
	keep := int64(len(bytes.TrimRight(tail, "\x00")))
	if off, bad := strayNUL(tail[:keep], c.size); bad && c.corrupt == nil {
		c.corrupt = &CorruptChainError{ChainID: chainID, Line: lineNo + 1, Err: fmt.Errorf(
			"a NUL byte at offset %d that is not part of a zero sector: the file is damaged, not torn by an interrupted append (the lines after it may have been acknowledged; nothing is removed)", off)}
	}
	if c.corrupt != nil {
		// Leave a damaged file exactly as it is.
		c.alloc = length
		return nil
	}
	if keep < int64(len(tail)) {
		if err := c.f.Truncate(c.size + keep); err != nil {
			return err
		}
		if err := datasync(c.f); err != nil {
			return err
		}
	}
	c.torn, c.alloc = keep, c.size+keep
	return nil
}

// sectorSize is the unit in which a write can be lost: a crash leaves a
// sector either written or as it was (here, the reserve's zeros).
const sectorSize = 512

// strayNUL reports the file offset of the first NUL byte of b (which
// starts at file offset base) that lies in a sector not wholly zero.
func strayNUL(b []byte, base int64) (int64, bool) {
	for i := bytes.IndexByte(b, 0); i >= 0; {
		off := base + int64(i)
		lo := max(int64(0), off-off%sectorSize-base)
		hi := min(int64(len(b)), lo+sectorSize-((base+lo)%sectorSize))
		if len(bytes.Trim(b[lo:hi], "\x00")) > 0 {
			return off, true
		}
		next := bytes.IndexByte(b[hi:], 0)
		if next < 0 {
			break
		}
		i = int(hi) + next
	}
	return 0, false
}

// Append implements Store: it returns once the record is durable.
func (s *FileStore) Append(ctx context.Context, r *Record) (AppendReceipt, error) {
	rc, wait, err := s.AppendAsync(ctx, r)
	if err != nil {
		return AppendReceipt{}, err
	}
	if err := wait(); err != nil {
		return AppendReceipt{}, err
	}
	return rc, nil
}

// AppendAsync accepts the record in chain order and returns a wait function
// that returns once it is durable. Group commit: accepted records are
// buffered, and the chain's flusher goroutine writes everything buffered
// with one write and one fsync, then the next group, for as long as records
// arrive. A record counts as acknowledged only when wait returns nil; if
// the write or fsync fails, every waiter gets the error and the chain
// refuses appends until the store is reopened (a crash before the fsync may
// keep or lose unacknowledged records, never an acknowledged one).
func (s *FileStore) AppendAsync(ctx context.Context, r *Record) (AppendReceipt, func() error, error) {
	if r == nil {
		return AppendReceipt{}, nil, errors.New("chain: nil record")
	}
	return s.appendLocked(ctx, r.ChainID, func(c *fileChain) (*Record, []byte, Hash, error) {
		line, stored, err := c.state.check(r)
		if err != nil {
			return nil, nil, Hash{}, err
		}
		return stored, line, stored.Hash(), nil
	})
}

// appendPrepared links a record this package's Writer prepared at the
// chain's tip and queues it: its hashes are computed from its own
// content, so only the uniqueness checks remain.
func (s *FileStore) appendPrepared(ctx context.Context, p *prepared) (AppendReceipt, func() error, error) {
	return s.appendLocked(ctx, p.r.ChainID, func(c *fileChain) (*Record, []byte, Hash, error) {
		seq, prev := int64(0), (*Hash)(nil)
		if c.state.has {
			seq, prev = c.state.tip.Sequence+1, &c.state.tip.Hash
		}
		line := p.link(seq, prev)
		// link placed the record at the tip: sequence and previous hash
		// hold by construction; only task_closed and uniqueness remain.
		if err := c.state.checkNew(p.r); err != nil {
			return nil, nil, Hash{}, err
		}
		return p.r, line, p.hash, nil
	})
}

// appendLocked queues the record build returns, under the chain's lock,
// and returns its receipt and a wait for its durability.
func (s *FileStore) appendLocked(ctx context.Context, chainID string, build func(*fileChain) (*Record, []byte, Hash, error)) (AppendReceipt, func() error, error) {
	if err := ctx.Err(); err != nil {
		return AppendReceipt{}, nil, err
	}
	c, err := s.chain(chainID)
	if err != nil {
		return AppendReceipt{}, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return AppendReceipt{}, nil, errors.New("chain: store is closed")
	case c.broken != nil:
		return AppendReceipt{}, nil, fmt.Errorf("chain %s: an earlier write failed (%w); reopen the store", chainID, c.broken)
	case c.corrupt != nil:
		return AppendReceipt{}, nil, c.corrupt
	case c.torn > 0:
		return AppendReceipt{}, nil, &TornTailError{ChainID: chainID, Offset: c.size, Bytes: c.torn}
	}
	stored, line, h, err := build(c)
	if err != nil {
		return AppendReceipt{}, nil, err
	}
	c.pending = append(append(c.pending, line...), '\n')
	c.pendRec = append(c.pendRec, stored)
	c.size += int64(len(line) + 1)
	end := c.size
	c.state.commitHash(stored, h)
	if !c.flushing {
		c.flushing, c.exited = true, make(chan struct{})
		go s.flush(c)
	}
	rc := AppendReceipt{ChainID: chainID, RecordID: stored.RecordID, Sequence: stored.Sequence, HeadHash: h}
	return rc, func() error { return s.waitDurable(c, chainID, end) }, nil
}

// maxSpare bounds the group buffer kept for reuse.
const maxSpare = 4 << 20

// waitDurable returns once the chain's first end bytes are written and
// fsynced. Waiters block on the channel of the group that holds their
// record (the in-flight one or the next), so a finished group wakes only
// its own waiters.
func (s *FileStore) waitDurable(c *fileChain, chainID string, end int64) error {
	for {
		if c.durable.Load() >= end {
			return nil
		}
		c.mu.Lock()
		if c.synced >= end {
			c.mu.Unlock()
			return nil
		}
		if c.broken != nil {
			c.mu.Unlock()
			return fmt.Errorf("chain %s: %w", chainID, c.broken)
		}
		ch := c.doneNext
		if c.syncing && end <= c.inflight {
			ch = c.doneCur
		}
		c.mu.Unlock()
		<-ch
	}
}

// flush is the chain's flusher: while records are pending it writes them
// all with one write and one fsync, publishes the new durable size and
// wakes that group's waiters. A dedicated goroutine, rather than whichever
// waiter comes first, starts the next group the moment the last one is
// durable: a waiter woken among dozens of others may be scheduled last.
func (s *FileStore) flush(c *fileChain) {
	c.mu.Lock()
	defer func() {
		c.flushing = false
		close(c.exited)
		c.mu.Unlock()
	}()
	for len(c.pending) > 0 && c.broken == nil {
		if c.filling && c.size > c.fillFrom {
			// The group would reach the zeros being written ahead of
			// the data: let them land first.
			done := c.fillDone
			c.mu.Unlock()
			<-done
			c.mu.Lock()
			continue
		}
		buf, recs, off, target := c.pending, c.pendRec, c.written, c.size
		// Double buffering: appends fill the spare while this group is
		// written, so neither buffer is regrown for every group.
		c.pending, c.pendRec = c.spare[:0], c.spareRec[:0]
		c.spare, c.spareRec = nil, nil
		done := c.doneNext
		c.doneCur, c.doneNext = done, make(chan struct{})
		c.syncing, c.inflight = true, target
		c.mu.Unlock()
		write := (*os.File).WriteAt
		if s.writeHook != nil {
			write = s.writeHook
		}
		t0 := time.Now()
		n, werr := write(c.f, buf, off)
		var serr error
		if werr == nil && n == len(buf) {
			if s.beforeSync != nil {
				s.beforeSync()
			}
			if s.syncHook != nil {
				serr = s.syncHook(c.f)
			} else {
				serr = datasync(c.f)
			}
		}
		if werr == nil && serr == nil && n == len(buf) {
			s.groups.Add(1)
			s.records.Add(int64(len(recs)))
			s.bytes.Add(int64(len(buf)))
			s.syncNanos.Add(int64(time.Since(t0)))
			// The index is derived data, rebuilt from the chain files on
			// open; writing it only after the fsync keeps Scan from
			// delivering a record a crash could still lose. One write for
			// the whole group.
			_ = s.index(recs...)
		}
		c.mu.Lock()
		c.syncing = false
		switch {
		case werr != nil || n != len(buf):
			c.broken = fmt.Errorf("short write of %d/%d bytes: %v", n, len(buf), werr)
			c.torn = int64(n)
		case serr != nil:
			c.broken = fmt.Errorf("fsync: %w", serr)
			// After a failed fsync the kernel may mark the group's pages
			// clean without having written them: a reopen would read the
			// records from the page cache, append after them, and a later
			// crash would leave a hole before acknowledged records. Drop
			// the group (never acknowledged) so that the reopen reads what
			// the disk was last known to hold; if this fails too, the
			// reopen finds what it finds.
			_ = c.f.Truncate(off)
		default:
			c.written = max(c.written, target)
			c.synced = max(c.synced, target)
			c.durable.Store(c.synced)
			c.alloc = max(c.alloc, c.written)
			s.extendReserve(c)
		}
		if cap(buf) <= maxSpare {
			clear(recs)
			c.spare, c.spareRec = buf[:0], recs[:0]
		}
		close(done)
		if c.broken != nil {
			// Nothing pending will be written: wake its waiters too (they
			// find the chain broken).
			close(c.doneNext)
			c.doneNext = make(chan struct{})
		}
	}
}

// extendReserve starts writing more reserve when less than reserveLow is
// left ahead of the data; c.mu is held.
func (s *FileStore) extendReserve(c *fileChain) {
	if !reserveSupported || s.reserveChunk == 0 || c.noReserve || c.filling || c.closed || c.alloc-c.size >= s.reserveLow {
		return
	}
	from := max(c.alloc, c.size+s.reserveGap)
	c.filling, c.fillFrom, c.fillDone = true, from, make(chan struct{})
	go s.fillReserve(c, from, from+s.reserveChunk)
}

// zeroPiece is how much reserve is written (and written back) at a time:
// small, so that a group's fdatasync never has many zero pages to write.
const zeroPiece = 256 << 10

var zeros [zeroPiece]byte

// fillReserve writes zeros over [from, to), writes each piece back, and
// fdatasyncs them, then publishes the new reserve. A failure only stops
// the reserve: appends go on growing the file. The failed extension is cut
// off again (no data reaches from while it runs: a group waits for it), so
// that on a full disk the zeros written so far do not hold the space the
// next group needs.
func (s *FileStore) fillReserve(c *fileChain, from, to int64) {
	err := s.writeZeros(c.f, from, to)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.noReserve = true
		// Data lies below c.size (written or being written) and the
		// reserve published so far below c.alloc: nothing of value is
		// past both.
		if end := max(c.alloc, c.size); end < to {
			if st, serr := c.f.Stat(); serr == nil && st.Size() > end {
				c.f.Truncate(end) // best effort: Close truncates to the data too
			}
		}
	} else {
		c.alloc = max(c.alloc, to)
		s.reserved.Add(to - from)
	}
	c.filling = false
	close(c.fillDone)
}

func (s *FileStore) writeZeros(f *os.File, from, to int64) error {
	if s.zeroHook != nil {
		if err := s.zeroHook(from); err != nil {
			return err
		}
	}
	for off := from; off < to; off += zeroPiece {
		n := min(zeroPiece, to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		if err := writeBack(f, off, n); err != nil {
			return err
		}
	}
	return datasync(f)
}

// Read implements Store. The lines before after's are not parsed once
// after's own line holds sequence after, so a record damaged among them
// is not reported here (Verify reports it); one among those returned is a
// *CorruptChainError.
func (s *FileStore) Read(ctx context.Context, chainID string, after int64) ([]*Record, error) {
	if !IsUUID(chainID) {
		return nil, fmt.Errorf("chain: %q is not a lowercase UUID", chainID)
	}
	data, err := os.ReadFile(s.path(chainID))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// A NUL byte is the reserve or a lost write (whole zero sectors) or
	// damage: a damaged chain is an error, not a shorter chain.
	if i := bytes.IndexByte(data, 0); i >= 0 {
		start := bytes.LastIndexByte(data[:i], '\n') + 1
		if off, bad := strayNUL(bytes.TrimRight(data[start:], "\x00"), int64(start)); bad {
			return nil, &CorruptChainError{ChainID: chainID, Line: bytes.Count(data[:start], []byte("\n")) + 1,
				Err: fmt.Errorf("a NUL byte at offset %d that is not part of a zero sector: the file is damaged", off)}
		}
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	// Line i of a chain holds sequence i: the lines before after's are not
	// parsed (a projector keeping up with a long chain reads its tail
	// again and again), once after's own line confirms it.
	if skip := int(min(max(after, 0), int64(len(lines)))); skip > 0 {
		if out, ok, err := readLines(chainID, lines[skip:], skip, after); ok || err != nil {
			return out, err
		}
	}
	out, _, err := readLines(chainID, lines, 0, after)
	return out, err
}

// readLines parses the complete lines of a chain file, the first of them
// line first+1, and returns the records with sequence > after. When first
// is not 0, ok is false unless every record's sequence is its line's and
// there is a first record to show it: the caller reads the whole file
// instead.
func readLines(chainID string, lines [][]byte, first int, after int64) (out []*Record, ok bool, err error) {
	for i, ln := range lines {
		if !recordLine(ln) {
			if i == 0 && first > 0 {
				return nil, false, nil
			}
			break // a torn tail or the reserve is not a record
		}
		r, err := ParseRecord(ln[:len(ln)-1])
		if err != nil {
			return nil, false, &CorruptChainError{ChainID: chainID, Line: first + i + 1, Err: err}
		}
		if first > 0 && r.Sequence != int64(first+i) {
			return nil, false, nil
		}
		if r.Sequence > after {
			out = append(out, r)
		}
	}
	return out, true, nil
}

// Head implements Store.
func (s *FileStore) Head(ctx context.Context, chainID string) (Tip, bool, error) {
	c, err := s.chain(chainID)
	if err != nil {
		return Tip{}, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corrupt != nil {
		return Tip{}, false, c.corrupt
	}
	return c.state.tip, c.state.has, nil
}

// Verify implements Store. It streams the file through the verifier.
func (s *FileStore) Verify(ctx context.Context, chainID string, expectedHead Hash) (*Result, error) {
	f, err := os.Open(s.path(chainID))
	if errors.Is(err, os.ErrNotExist) {
		return Verify(bytes.NewReader(nil), VerifyOptions{ExpectedHead: &expectedHead, ChainID: chainID})
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if c := s.loaded(chainID); c != nil {
		// A chain open here has its reserve after the data: verify what
		// was written (the torn tail included), not the zeros.
		c.mu.Lock()
		n := c.written + c.torn
		c.mu.Unlock()
		r = io.NewSectionReader(f, 0, n)
	}
	return Verify(r, VerifyOptions{ExpectedHead: &expectedHead, ChainID: chainID})
}

// RepairReport describes what Repair did.
type RepairReport struct {
	ChainID string `json:"chain_id"`
	Offset  int64  `json:"offset"`   // where the torn bytes started
	Bytes   int64  `json:"bytes"`    // how many were removed
	SavedTo string `json:"saved_to"` // side file holding them ("" if none)
	// Removed: the chain file held no record (only a torn first line, or
	// nothing: a process killed right after creating it) and was removed.
	Removed bool `json:"removed"`
}

// Repair removes a torn tail from a chain after saving it to
// <chain_id>.jsonl.torn-<offset>. It is the only operation that removes bytes,
// and it only ever removes bytes that no receipt acknowledged. A chain
// without a torn tail is left unchanged. A chain file left without any
// record (empty, or holding only a torn first line) is no chain: it is
// removed, unless the projection index lists records of it (then the file
// lost acknowledged records, and it is reported as damaged and kept).
func (s *FileStore) Repair(chainID string) (rep RepairReport, err error) {
	c, err := s.chain(chainID)
	if err != nil {
		return RepairReport{}, err
	}
	c.mu.Lock()
	locked := true
	defer func() {
		if locked {
			c.mu.Unlock()
		}
	}()
	if c.broken != nil {
		// After a failed write this process's view of the file (its size,
		// its tip) is not the disk's: only a fresh open reads the truth.
		return RepairReport{}, fmt.Errorf("chain %s: a write failed in this process (%v); close and reopen the store, then repair", chainID, c.broken)
	}
	if c.corrupt != nil {
		// Repair removes only a torn tail; a damaged chain needs a person.
		return RepairReport{}, c.corrupt
	}
	rep = RepairReport{ChainID: chainID, Offset: c.size, Bytes: c.torn}
	if c.size == 0 {
		// No record: first make sure none was ever acknowledged.
		n, err := s.indexedRecords(chainID)
		if err != nil {
			return rep, err
		}
		if n > 0 {
			return rep, &CorruptChainError{ChainID: chainID, Line: 1, Err: fmt.Errorf(
				"the chain file has no record but the projection index lists %d of its records: acknowledged records are missing (nothing is removed)", n)}
		}
	}
	if c.torn > 0 {
		if rep.SavedTo, err = s.saveTorn(c, chainID); err != nil {
			return rep, err
		}
	}
	if c.size > 0 {
		return rep, nil
	}
	// Nothing acknowledged is lost by removing the file: the store
	// would only ever append to it, and certverify rejects a chain
	// without records. The chain's lock is held: no other process writes
	// it; the chain is released so that this store cannot either.
	if err := os.Remove(s.path(chainID)); err != nil {
		return rep, err
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return rep, err
	}
	rep.Removed = true
	c.closed = true
	c.mu.Unlock()
	locked = false
	return rep, s.Release(chainID)
}

// indexedRecords counts the projection index's entries for a chain.
func (s *FileStore) indexedRecords(chainID string) (int, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, indexName))
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range bytes.Lines(data) {
		if e, ok := parseIndexEntry(bytes.TrimSuffix(line, []byte("\n"))); ok && e.ChainID == chainID {
			n++
		}
	}
	return n, nil
}

// saveTorn moves a chain's torn tail into a side file and truncates the
// chain to its last complete record; c.mu is held.
func (s *FileStore) saveTorn(c *fileChain, chainID string) (string, error) {
	torn := make([]byte, c.torn)
	if _, err := c.f.ReadAt(torn, c.size); err != nil {
		return "", err
	}
	// A side file of that name may exist: a repair that crashed before
	// truncating (the same bytes), or an earlier tear at the same offset.
	// The bytes are kept under the first free name, never overwritten.
	side := s.path(chainID) + ".torn-" + strconv.FormatInt(c.size, 10)
	for n := 2; ; n++ {
		err := atomicfile.CreateSynced(side, torn)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || n > 1000 {
			return "", err
		}
		side = s.path(chainID) + ".torn-" + strconv.FormatInt(c.size, 10) + "." + strconv.Itoa(n)
	}
	if err := c.f.Truncate(c.size); err != nil {
		return "", err
	}
	if err := c.f.Sync(); err != nil {
		return "", err
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return "", err
	}
	c.torn, c.alloc = 0, c.size
	return side, nil
}

// index queues projection entries for durable records. They are written
// in batches (when idxFlushAt bytes are queued, and before Scan reads or
// Close), not once per group: the index is derived data that open rebuilds
// from the chain files, and a write per group doubled the flusher's system
// calls. Scan syncs what it delivers.
func (s *FileStore) index(recs ...*Record) error {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if s.idx == nil {
		return errors.New("chain: store is closed")
	}
	for _, r := range recs {
		s.idxBuf = appendIndexEntry(s.idxBuf, r)
	}
	if len(s.idxBuf) < idxFlushAt {
		return nil
	}
	// The flusher calls this before it wakes its group's waiters: while
	// another store holds the index's lock (its open reads every chain),
	// keep queueing rather than wait.
	if ok, err := lockIndex(s.idx, false); !ok {
		return err
	}
	err := s.writeQueue()
	return errors.Join(err, unlockIndex(s.idx))
}

// appendIndexEntry appends r's projection.idx entry to b.
func appendIndexEntry(b []byte, r *Record) []byte {
	b = append(b, r.ChainID...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.Sequence, 10)
	b = append(b, ' ')
	b = append(b, r.RecordID...)
	b = append(b, ' ')
	b = append(b, r.ChainHash...)
	return append(b, '\n')
}

// maxIndexEntry is the length of the longest index entry: two UUIDs, a
// sequence of at most 16 digits, a hash, three spaces and a newline.
const maxIndexEntry = 36 + 1 + 16 + 1 + 36 + 1 + 64 + 1

// parseIndexEntry parses one index entry (without its newline) into a
// receipt without a cursor.
func parseIndexEntry(b []byte) (ProjectionReceipt, bool) {
	if len(b) < 36+1+1+1+36+1+64 || len(b) > maxIndexEntry-1 {
		return ProjectionReceipt{}, false
	}
	chainID, rest := b[:36], b[36:]
	if !isUUID(chainID) || rest[0] != ' ' {
		return ProjectionReceipt{}, false
	}
	seq, i, ok := scanInt(rest, 1)
	if !ok || len(rest)-i != 1+36+1+64 || rest[i] != ' ' || rest[i+37] != ' ' {
		return ProjectionReceipt{}, false
	}
	recordID, hash := rest[i+1:i+37], rest[i+38:]
	if !isUUID(recordID) || !isHex64(hash) {
		return ProjectionReceipt{}, false
	}
	return ProjectionReceipt{ChainID: string(chainID), RecordID: string(recordID), Sequence: seq, HeadHash: parseHex(hash)}, true
}

// idxFlushAt is how many queued index bytes make index write them.
const idxFlushAt = 256 << 10

// writeIndexLocked writes the queued index entries; s.idxMu is held. Other
// stores on the directory (other processes writing other chains) append
// to the same file, so the write holds the index's flock.
func (s *FileStore) writeIndexLocked() error {
	if len(s.idxBuf) == 0 {
		return nil
	}
	if _, err := lockIndex(s.idx, true); err != nil {
		return err
	}
	err := s.writeQueue()
	return errors.Join(err, unlockIndex(s.idx))
}

// writeQueue appends the queued entries at the current end of the index;
// s.idxMu and the index's flock are held. The index is append-only (a
// delivered cursor is a byte offset into it): a failed write is left as it
// is, a torn line that the next write terminates, and the whole queue is
// written again by the next attempt.
func (s *FileStore) writeQueue() error {
	if len(s.idxBuf) == 0 {
		return nil
	}
	end, err := s.indexEnd()
	if err != nil {
		return err
	}
	if end == 0 {
		// An empty index gets its header before any entry (a rebuild
		// writes entries as it goes); without one, the entries stay
		// queued.
		if s.idxGen, err = indexGeneration(s.idx); err != nil {
			return err
		}
		if end, err = s.indexEnd(); err != nil {
			return err
		}
	}
	if _, err := s.idx.WriteAt(s.idxBuf, end); err != nil {
		s.idxSize = -1 // the end is unknown: check it next time
		return err
	}
	s.idxSize = end + int64(len(s.idxBuf))
	s.idxBuf = s.idxBuf[:0]
	return nil
}

// indexEnd returns where the next entry goes: the end of the index, after
// a newline that terminates a torn last line (a store died, or its write
// failed, in the middle of a write). A torn line is not an entry: Scan
// skips it, and open indexes again the records its entries were for. The
// index's flock is held.
func (s *FileStore) indexEnd() (int64, error) {
	st, err := s.idx.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if size == 0 || size == s.idxSize {
		// Empty, or unchanged since this store's last complete write.
		return size, nil
	}
	var last [1]byte
	if _, err := s.idx.ReadAt(last[:], size-1); err != nil {
		return 0, err
	}
	if last[0] == '\n' {
		return size, nil
	}
	if _, err := s.idx.WriteAt([]byte{'\n'}, size); err != nil {
		return 0, err
	}
	return size + 1, nil
}

// seqSet is the set of one chain's sequences the index holds: a
// contiguous prefix [0, next) and any beyond it.
type seqSet struct {
	next  int64
	extra map[int64]struct{}
}

func (q *seqSet) add(seq int64) {
	switch {
	case seq < q.next:
	case seq == q.next:
		q.next++
		for len(q.extra) > 0 {
			if _, ok := q.extra[q.next]; !ok {
				break
			}
			delete(q.extra, q.next)
			q.next++
		}
	default:
		if q.extra == nil {
			q.extra = make(map[int64]struct{})
		}
		q.extra[seq] = struct{}{}
	}
}

func (q *seqSet) has(seq int64) bool {
	if seq < q.next {
		return true
	}
	_, ok := q.extra[seq]
	return ok
}

// recoverIndex appends entries for durable records the index lacks, chain
// by chain in sorted order, so that every committed append becomes visible
// to Scan. Another store may be writing the directory: the index is read
// and written under its flock, the chains are read without it (an entry
// that store adds meanwhile may end up twice, which at-least-once delivery
// allows).
//
// A record is indexed again when the index lacks an entry for its
// sequence, not only when it follows the chain's last indexed one: a crash
// can lose entries before later ones (pages of an unsynced index write that
// reached the disk out of order, zeros then later entries; a store that
// took a chain over from a writer that died before writing its queue, and
// appended after those records). Lines that are not well-formed entries
// stay where they are, skipped by Scan: the index is append-only, so every
// delivered cursor stays valid.
func (s *FileStore) recoverIndex() (err error) {
	f, err := os.OpenFile(filepath.Join(s.dir, indexName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close() // releases the flock
		}
	}()
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	s.idx = f
	defer func() {
		if err != nil {
			s.idx, s.idxBuf = nil, nil
		}
	}()
	indexed, err := s.readIndex(f)
	if err != nil {
		return err
	}
	names, err := filepath.Glob(filepath.Join(s.dir, "*.jsonl"))
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		id := strings.TrimSuffix(filepath.Base(name), ".jsonl")
		if !IsUUID(id) {
			continue
		}
		q := indexed[id]
		if q == nil {
			q = &seqSet{}
		}
		recs, err := s.Read(context.Background(), id, q.next-1)
		if err != nil {
			continue // a corrupt chain is reported by Verify; index what we can
		}
		n := len(s.idxBuf)
		for _, r := range recs {
			if !q.has(r.Sequence) {
				s.idxBuf = appendIndexEntry(s.idxBuf, r)
			}
		}
		if len(s.idxBuf) == n {
			continue
		}
		// The records were read from the page cache, where a writer that
		// died between its write and its fsync (or one still running, in
		// another process) left them: make them durable before indexing
		// them, so that Scan never delivers a record a crash could lose.
		if err := syncPath(name); err != nil {
			return err
		}
		if len(s.idxBuf) >= idxFlushAt {
			s.writeIndexLocked() // a failure keeps the queue (see below)
		}
	}
	if _, err := lockIndex(f, true); err != nil {
		return err
	}
	defer unlockIndex(f)
	// A store that cannot write its index (a full disk) still opens:
	// reading, verifying, exporting and repairing its chains need no
	// index, and the entries stay queued. Scan writes and syncs them
	// before it delivers anything, and fails until it can.
	if gen, err := indexGeneration(f); err == nil {
		s.idxGen = gen
	}
	if s.writeQueue() == nil && f.Sync() == nil {
		if st, err := f.Stat(); err == nil {
			s.idxSynced = st.Size()
		}
	}
	return nil
}

// indexHeader starts an index's header line; the generation follows.
const indexHeader = "polc-projection-index v1 "

// indexGeneration returns the generation of the index f, writing a header
// with a new random one into an empty index; "" for an index that has
// entries but no header (written before headers). The index's flock is
// held. The header is no entry: Scan and readIndex skip it.
func indexGeneration(f *os.File) (string, error) {
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st.Size() == 0 {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		gen := hex.EncodeToString(b[:])
		if _, err := f.WriteAt([]byte(indexHeader+gen+"\n"), 0); err != nil {
			return "", err
		}
		return gen, nil
	}
	line := make([]byte, len(indexHeader)+33)
	n, err := f.ReadAt(line, 0)
	if err != nil && err != io.EOF {
		return "", err
	}
	line = line[:n]
	if gen, ok := bytes.CutPrefix(line, []byte(indexHeader)); ok && len(gen) == 33 && gen[32] == '\n' {
		return string(gen[:32]), nil
	}
	return "", nil
}

// readIndex returns the sequences the index f holds per chain, under the
// index's flock.
func (s *FileStore) readIndex(f *os.File) (map[string]*seqSet, error) {
	if _, err := lockIndex(f, true); err != nil {
		return nil, err
	}
	defer unlockIndex(f)
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	indexed := make(map[string]*seqSet)
	for len(data) > 0 {
		k := bytes.IndexByte(data, '\n')
		if k < 0 {
			break // a torn last line
		}
		if e, ok := parseIndexEntry(data[:k]); ok {
			q := indexed[e.ChainID]
			if q == nil {
				q = &seqSet{}
				indexed[e.ChainID] = q
			}
			q.add(e.Sequence)
		}
		data = data[k+1:]
	}
	s.idxSize = -1 // writeQueue checks the end
	return indexed, nil
}

// syncPath makes the data of the file at path durable.
func syncPath(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return errors.Join(datasync(f), f.Close())
}

// Scan implements ProjectionSource. A cursor is "<generation>:<offset>",
// the index's generation and the decimal byte offset of the next entry in
// projection.idx ("<offset>" alone for an index without a generation).
// Entries are synced before they are delivered, so a delivered cursor
// stays valid across crashes. An index rebuilt from the chains (deleted,
// or replaced) has a new generation, and a cursor into another generation
// starts again from the beginning: every record is delivered again, which
// at-least-once consumers allow, rather than some skipped because offsets
// moved. Scan reads the index up to its current end, entries that other
// stores on the directory appended included, and no further than its page
// needs. A line that is not a well-formed entry (what a crash left of an
// unsynced write, see recoverIndex, or the header) is skipped.
func (s *FileStore) Scan(ctx context.Context, after string, limit int) (ProjectionPage, error) {
	var off int64
	gen, offText, hasGen := strings.Cut(after, ":")
	if !hasGen {
		gen, offText = "", after
	}
	if after != "" {
		n, err := strconv.ParseInt(offText, 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != offText || (hasGen && len(gen) != 32) {
			return ProjectionPage{}, fmt.Errorf("chain: invalid cursor %q", after)
		}
		off = n
	}
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if s.idx == nil {
		return ProjectionPage{}, errors.New("chain: store is closed")
	}
	if _, err := lockIndex(s.idx, true); err != nil {
		return ProjectionPage{}, err
	}
	defer unlockIndex(s.idx)
	if err := s.writeQueue(); err != nil {
		return ProjectionPage{}, err
	}
	st, err := s.idx.Stat()
	if err != nil {
		return ProjectionPage{}, err
	}
	size := st.Size()
	if after != "" && gen != s.idxGen {
		off = 0 // a cursor into another generation of the index
	}
	if off > size {
		return ProjectionPage{}, fmt.Errorf("chain: cursor %q is beyond the index", after)
	}
	if s.idxSynced < size {
		if err := s.idx.Sync(); err != nil {
			return ProjectionPage{}, err
		}
		s.idxSynced = size
	}
	bufSize := 64 << 10
	if limit > 0 {
		bufSize = min(bufSize, max(limit*maxIndexEntry, 4096))
	}
	br := bufio.NewReaderSize(io.NewSectionReader(s.idx, off, size-off), bufSize)
	cursor := func(off int64) string {
		if s.idxGen == "" {
			return strconv.FormatInt(off, 10)
		}
		return s.idxGen + ":" + strconv.FormatInt(off, 10)
	}
	page := ProjectionPage{NextCursor: cursor(off)}
	for limit <= 0 || len(page.Receipts) < limit {
		ln, err := br.ReadSlice('\n')
		long := false
		for err == bufio.ErrBufferFull {
			// A line longer than the buffer is no entry: skip it whole.
			off += int64(len(ln))
			ln, err = br.ReadSlice('\n')
			long = true
		}
		if err == io.EOF {
			break // the end, or a torn last line
		}
		if err != nil {
			return ProjectionPage{}, err
		}
		off += int64(len(ln))
		rc, ok := parseIndexEntry(ln[:len(ln)-1])
		if !ok || long {
			continue
		}
		rc.Cursor = cursor(off)
		page.Receipts = append(page.Receipts, rc)
		page.NextCursor = rc.Cursor
	}
	return page, nil
}
