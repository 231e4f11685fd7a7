package chain

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// AppendReceipt acknowledges a durable append.
type AppendReceipt struct {
	ChainID  string `json:"chain_id"`
	RecordID string `json:"record_id"`
	Sequence int64  `json:"sequence"`
	HeadHash Hash   `json:"head_hash"`
}

// Tip is the last record of a chain.
type Tip struct {
	Sequence int64
	Hash     Hash
	Closed   bool // the last record is task_closed
}

// Store is an append-only evidence store (docs/evidence.md "Stores"). There is
// intentionally no update or delete.
type Store interface {
	// Append commits r atomically to its chain after recomputing its hashes.
	// A missing chain accepts only sequence 0 with previous_chain_hash null;
	// an existing chain only the next sequence with previous_chain_hash
	// equal to its head. Bad content returns *IntegrityError; a stale head,
	// wrong sequence, duplicate record_id or chain_hash, or an append after
	// task_closed returns *ConflictError. A duplicate append is an error,
	// not an idempotent success.
	Append(ctx context.Context, r *Record) (AppendReceipt, error)
	// Read returns the records with sequence > afterSequence in ascending
	// order (afterSequence -1 reads the whole chain; a missing chain reads
	// as empty).
	Read(ctx context.Context, chainID string, afterSequence int64) ([]*Record, error)
	// Head returns the chain's last record; ok is false for a missing chain.
	Head(ctx context.Context, chainID string) (tip Tip, ok bool, err error)
	// Verify verifies the stored chain against expectedHead. Problems with
	// the content are findings in the result, never errors.
	Verify(ctx context.Context, chainID string, expectedHead Hash) (*Result, error)
}

// Releaser is a Store that can end the writing of one chain, giving back
// what it holds for it (FileStore: its file, lock and reserve). The
// executor releases a task boundary's chain once its task_closed is
// durable: no record may follow it.
type Releaser interface {
	Release(chainID string) error
}

// ProjectionReceipt is one append as delivered to a projection consumer.
type ProjectionReceipt struct {
	Cursor   string `json:"cursor"`
	ChainID  string `json:"chain_id"`
	RecordID string `json:"record_id"`
	Sequence int64  `json:"sequence"`
	HeadHash Hash   `json:"head_hash"`
}

// ProjectionPage is one page of a projection scan. NextCursor advances past
// the whole page; it equals the input cursor when there was nothing new.
type ProjectionPage struct {
	Receipts   []ProjectionReceipt `json:"receipts"`
	NextCursor string              `json:"next_cursor"`
}

// ProjectionSource delivers every durable append at least once, in a cursor
// order that is stable across restarts. Cursors are opaque; "" starts at the
// beginning. Consumers apply receipts idempotently, keyed by
// (chain_id, record_id, projection_version), and re-read records by chain
// and sequence.
type ProjectionSource interface {
	Scan(ctx context.Context, afterCursor string, limit int) (ProjectionPage, error)
}

// IntegrityError rejects a record whose own content is invalid.
type IntegrityError struct{ Err *RecordError }

func (e *IntegrityError) Error() string { return "chain: integrity: " + e.Err.Error() }

// Unwrap returns the record error.
func (e *IntegrityError) Unwrap() error { return e.Err }

// Conflict reasons.
const (
	ConflictStaleHead   = "stale_head"
	ConflictSequence    = "wrong_sequence"
	ConflictDuplicateID = "duplicate_record_id"
	// ConflictDuplicateHash is a duplicate chain_hash. The stores
	// here never report it: a record's chain_hash covers its record_id, so
	// within one chain a repeated chain_hash is a repeated record_id
	// (reported as ConflictDuplicateID) or a SHA-256 collision.
	ConflictDuplicateHash = "duplicate_chain_hash"
	ConflictClosed        = "chain_closed"
)

// ConflictError rejects a record that does not extend its chain's head.
type ConflictError struct {
	ChainID  string
	Reason   string
	Expected string
	Actual   string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("chain %s: conflict %s (expected %s, actual %s)", e.ChainID, e.Reason, e.Expected, e.Actual)
}

// chainState is the append-side view of one chain: its tip and the
// record_ids it holds (24–38 bytes each in a Go map, for the chain's life).
// No set of chain hashes is kept (it cost 52–84 bytes more per record):
// see ConflictDuplicateHash.
type chainState struct {
	has bool
	tip Tip
	ids map[uuid]struct{}
}

func newChainState() *chainState {
	return &chainState{ids: make(map[uuid]struct{})}
}

// check validates r as the next record: it re-encodes the record and
// parses the bytes back, recomputing both hashes (the store trusts no
// producer), and returns the line and the parsed record.
func (s *chainState) check(r *Record) ([]byte, *Record, error) {
	if r == nil {
		return nil, nil, errors.New("chain: nil record")
	}
	line := r.Canonical()
	parsed, err := ParseRecord(line)
	if err != nil {
		var re *RecordError
		if errors.As(err, &re) {
			return nil, nil, &IntegrityError{re}
		}
		return nil, nil, err
	}
	if err := s.checkLink(parsed); err != nil {
		return nil, nil, err
	}
	return line, parsed, nil
}

// checkLink checks that r is the next record: sequence, previous hash, not
// after task_closed, and a new record_id.
func (s *chainState) checkLink(r *Record) error {
	conflict := func(reason, exp, act string) error {
		return &ConflictError{ChainID: r.ChainID, Reason: reason, Expected: exp, Actual: act}
	}
	prev := "null"
	if r.PreviousChainHash != nil {
		prev = *r.PreviousChainHash
	}
	if !s.has {
		if r.Sequence != 0 {
			return conflict(ConflictSequence, "0", strconv.FormatInt(r.Sequence, 10))
		}
		if r.PreviousChainHash != nil {
			return conflict(ConflictStaleHead, "null", prev)
		}
	} else {
		if s.tip.Closed {
			return conflict(ConflictClosed, "no record after task_closed", string(r.RecordType))
		}
		if r.Sequence != s.tip.Sequence+1 {
			return conflict(ConflictSequence, strconv.FormatInt(s.tip.Sequence+1, 10), strconv.FormatInt(r.Sequence, 10))
		}
		var tip [64]byte
		hex.Encode(tip[:], s.tip.Hash[:])
		if prev != string(tip[:]) {
			return conflict(ConflictStaleHead, s.tip.Hash.String(), prev)
		}
	}
	return s.checkUnique(r)
}

// checkNew is checkLink for a record that link placed at the chain's tip
// (the next sequence, after the tip's hash): only task_closed and the
// uniqueness of record_id remain to be checked, with checkLink's errors.
func (s *chainState) checkNew(r *Record) error {
	if s.has && s.tip.Closed {
		return &ConflictError{ChainID: r.ChainID, Reason: ConflictClosed, Expected: "no record after task_closed", Actual: string(r.RecordType)}
	}
	return s.checkUnique(r)
}

// checkUnique checks that r's record_id is new in the chain.
func (s *chainState) checkUnique(r *Record) error {
	if _, dup := s.ids[parseUUID([]byte(r.RecordID))]; dup {
		return &ConflictError{ChainID: r.ChainID, Reason: ConflictDuplicateID, Expected: "a new record_id", Actual: r.RecordID}
	}
	return nil
}

func (s *chainState) commit(r *Record) { s.commitHash(r, r.Hash()) }

// commitHash is commit for a record whose chain hash h is already decoded.
func (s *chainState) commitHash(r *Record, h Hash) {
	s.has = true
	s.tip = Tip{Sequence: r.Sequence, Hash: h, Closed: r.RecordType == TaskClosed}
	s.ids[parseUUID([]byte(r.RecordID))] = struct{}{}
}

func receiptOf(r *Record) AppendReceipt {
	return AppendReceipt{ChainID: r.ChainID, RecordID: r.RecordID, Sequence: r.Sequence, HeadHash: r.Hash()}
}

// MemStore is an in-memory Store and ProjectionSource, for tests and for
// runtimes that keep evidence elsewhere. It is safe for concurrent use.
type MemStore struct {
	mu     sync.Mutex
	chains map[string]*memChain
	log    []memRef
}

type memChain struct {
	state   *chainState
	lines   [][]byte
	records []*Record
}

type memRef struct {
	chainID string
	seq     int64
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{chains: make(map[string]*memChain)} }

// Append implements Store.
func (m *MemStore) Append(ctx context.Context, r *Record) (AppendReceipt, error) {
	if err := ctx.Err(); err != nil {
		return AppendReceipt{}, err
	}
	if r == nil {
		return AppendReceipt{}, errors.New("chain: nil record")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.chains[r.ChainID]
	if c == nil {
		c = &memChain{state: newChainState()}
	}
	line, stored, err := c.state.check(r)
	if err != nil {
		return AppendReceipt{}, err
	}
	c.state.commit(stored)
	c.lines = append(c.lines, line)
	c.records = append(c.records, stored)
	m.chains[r.ChainID] = c
	m.log = append(m.log, memRef{r.ChainID, r.Sequence})
	return receiptOf(stored), nil
}

// Read implements Store.
func (m *MemStore) Read(ctx context.Context, chainID string, after int64) ([]*Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.chains[chainID]
	if c == nil {
		return nil, nil
	}
	start := max(after+1, 0)
	if start >= int64(len(c.records)) {
		return nil, nil
	}
	return append([]*Record(nil), c.records[start:]...), nil
}

// Head implements Store.
func (m *MemStore) Head(ctx context.Context, chainID string) (Tip, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.chains[chainID]
	if c == nil {
		return Tip{}, false, nil
	}
	return c.state.tip, true, nil
}

// Verify implements Store.
func (m *MemStore) Verify(ctx context.Context, chainID string, expectedHead Hash) (*Result, error) {
	return Verify(bytes.NewReader(m.Export(chainID)), VerifyOptions{ExpectedHead: &expectedHead, ChainID: chainID})
}

// Export returns the chain's JSONL bytes (nil for a missing chain).
func (m *MemStore) Export(chainID string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.chains[chainID]
	if c == nil {
		return nil
	}
	var b []byte
	for _, l := range c.lines {
		b = append(append(b, l...), '\n')
	}
	return b
}

// Scan implements ProjectionSource. Cursors are decimal positions in the
// store's append order.
func (m *MemStore) Scan(ctx context.Context, after string, limit int) (ProjectionPage, error) {
	pos := 0
	if after != "" {
		n, err := strconv.Atoi(after)
		if err != nil || n < 0 || strconv.Itoa(n) != after {
			return ProjectionPage{}, fmt.Errorf("chain: invalid cursor %q", after)
		}
		pos = n
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if pos > len(m.log) {
		return ProjectionPage{}, fmt.Errorf("chain: cursor %q is beyond the log", after)
	}
	page := ProjectionPage{NextCursor: strconv.Itoa(pos)}
	for pos < len(m.log) && (limit <= 0 || len(page.Receipts) < limit) {
		ref := m.log[pos]
		r := m.chains[ref.chainID].records[ref.seq]
		pos++
		page.Receipts = append(page.Receipts, ProjectionReceipt{
			Cursor: strconv.Itoa(pos), ChainID: r.ChainID, RecordID: r.RecordID, Sequence: r.Sequence, HeadHash: r.Hash(),
		})
		page.NextCursor = strconv.Itoa(pos)
	}
	return page, nil
}

// Writer appends records to one chain, holding a lock around head lookup,
// record construction and append, so that no two records are built on one
// head (for the file store, that lock is the store's own chain lock). It is safe for
// concurrent use; callables must run outside it.
type Writer struct {
	Store   Store
	ChainID string
	mu      sync.Mutex
}

// AsyncAppender is implemented by stores that can acknowledge appends in
// groups (FileStore): AppendAsync writes in chain order and wait reports
// durability. Durability is prefix-ordered: once wait returns nil for a
// record, every earlier record of its chain is durable too. Writer uses it
// to release its lock before waiting, so that concurrent operations share
// fsyncs.
type AsyncAppender interface {
	AppendAsync(ctx context.Context, r *Record) (AppendReceipt, func() error, error)
}

// Append seals d as the next record of the chain and appends it, returning
// once the store has made it durable. d.ChainID is set to the writer's
// chain.
func (w *Writer) Append(ctx context.Context, d Draft) (*Record, AppendReceipt, error) {
	r, rc, wait, err := w.AppendAsync(ctx, d)
	if err != nil {
		return nil, AppendReceipt{}, err
	}
	if err := wait(); err != nil {
		return nil, AppendReceipt{}, err
	}
	return r, rc, nil
}

// AppendAsync seals d as the next record and hands it to the store in
// chain order, returning before it is durable: the record is acknowledged
// (its receipt valid) only when wait returns nil. A producer that needs
// several records durable before acting (the executor's pre-call records)
// appends them all and then waits for each, sharing one group commit.
func (w *Writer) AppendAsync(ctx context.Context, d Draft) (*Record, AppendReceipt, func() error, error) {
	d.ChainID = w.ChainID
	// Everything but the link is computed before any lock, so that
	// concurrent operations serialize only on sequence and hash.
	p, err := prepare(d)
	if err != nil {
		return nil, AppendReceipt{}, nil, err
	}
	if st, ok := w.Store.(*FileStore); ok {
		// The file store links the record under its own chain lock, which
		// makes head lookup, construction and append one critical section
		// without a second lock around it.
		rc, wait, err := st.appendPrepared(ctx, p)
		p.release() // the store copied the line
		if err != nil {
			return nil, AppendReceipt{}, nil, err
		}
		return p.r, rc, wait, nil
	}
	w.mu.Lock()
	tip, ok, err := w.Store.Head(ctx, w.ChainID)
	if err != nil {
		w.mu.Unlock()
		return nil, AppendReceipt{}, nil, err
	}
	seq, prev := int64(0), (*Hash)(nil)
	if ok {
		seq, prev = tip.Sequence+1, &tip.Hash
	}
	p.link(seq, prev)
	p.release()
	var (
		rc   AppendReceipt
		wait func() error
	)
	if st, ok := w.Store.(AsyncAppender); ok {
		rc, wait, err = st.AppendAsync(ctx, p.r)
	} else {
		rc, err = w.Store.Append(ctx, p.r)
		wait = func() error { return nil }
	}
	w.mu.Unlock()
	if err != nil {
		return nil, AppendReceipt{}, nil, err
	}
	return p.r, rc, wait, nil
}
