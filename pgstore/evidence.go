package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"polc.dev/polc/chain"
)

// Evidence is a chain.Store on PostgreSQL: one row per record, holding the
// record's canonical line exactly as appended (what export writes and
// verifiers hash), its chain, sequence, record id and chain hash. It also
// implements chain.AsyncAppender (group commit) and chain.ProjectionSource.
// It is safe for concurrent use, and any number of stores in any number of
// processes may append to one database, to the same chains or to others.
//
// Linearity: a record is inserted only if the record before it in its
// chain is the one its previous_chain_hash names and is not task_closed,
// and (chain_id, sequence) and (chain_id, record_id) are unique: two
// writers racing for one chain's next sequence cannot both succeed (the
// loser gets *chain.ConflictError), so a chain never forks, whoever writes
// it.
//
// Group commit: appends are queued, and one goroutine commits everything
// queued, for every chain, in one transaction, then the next group while
// appends arrive. An append is acknowledged (its wait returns nil) only
// after its group's COMMIT returned, with fsync on and synchronous_commit
// not off (checked in every transaction, see durableBegin). A group that
// loses its connection (a server restart) is retried for
// EvidenceOptions.RetryFor on a new one; a record the lost attempt did commit is recognized by its chain hash.
// When a group fails, the records of its chains queued after it fail too
// (they were built on records that are not in the chain), and the next
// append reads the chain's head from the database again.
type Evidence struct {
	db   *db
	gen  string
	key  int32  // the schema's advisory lock key
	name string // the redacted DSN
	opts EvidenceOptions

	mu     sync.Mutex
	chains map[string]*pchain // chains with records queued or being committed
	queue  []*pending
	closed bool
	wake   chan struct{}
	done   chan struct{}
	// life bounds every wait of the group committer on the database;
	// abort cancels it when a close runs out of time, so that no commit
	// (nor its retries) outlives the store's Close.
	life  context.Context
	abort context.CancelFunc

	groups, records, commitNanos, retries atomic.Int64

	// beforeCommit, when set (tests), runs before each group's COMMIT.
	beforeCommit func(records int)
}

// EvidenceOptions tunes an Evidence store; the zero value is the defaults.
type EvidenceOptions struct {
	// MaxGroup bounds the records committed in one transaction (default
	// 1024).
	MaxGroup int
	// MaxInFlight bounds the groups committing at once, each over other
	// chains and on its own connection (default 4).
	MaxInFlight int
	// RetryFor is how long a group that lost its connection is retried
	// before its records fail (default 30s; negative: never retried).
	RetryFor time.Duration
	// MaxConns bounds the connection pool (default: the driver's, unless
	// the DSN sets pool_max_conns).
	MaxConns int32
}

// pchain is what the store knows of a chain: while it has records queued,
// the tip they build (checked synchronously, so that a producer learns of
// a bad link at once) and their record ids; once they are committed, the
// tip this store committed last, which Head returns without a query until
// the chain is released (Release) or one of its groups fails. A chain is
// written by one store at a time (an executor's task boundary): another
// store's appends make that tip stale, and the next append built on it is
// refused by the database (a conflict, never a fork), which drops it.
type pchain struct {
	tip      chain.Tip
	queued   int
	ids      map[string]struct{}
	released bool // drop the tip once nothing is queued
}

// maxCachedTips bounds the committed tips kept for chains not released.
const maxCachedTips = 4096

type pending struct {
	r    *chain.Record
	line []byte
	hash chain.Hash
	done chan struct{}
	err  error
}

var (
	_ chain.Store            = (*Evidence)(nil)
	_ chain.AsyncAppender    = (*Evidence)(nil)
	_ chain.ProjectionSource = (*Evidence)(nil)
	_ chain.Releaser         = (*Evidence)(nil)
)

// OpenEvidence connects to the database dsn names, creates or migrates the
// schema, and starts the group committer. The caller must Close it.
func OpenEvidence(ctx context.Context, dsn string, opts EvidenceOptions) (*Evidence, error) {
	if opts.MaxGroup <= 0 {
		opts.MaxGroup = 1024
	}
	if opts.RetryFor == 0 {
		opts.RetryFor = 30 * time.Second
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4
	}
	if opts.MaxConns <= 0 {
		// A connection per group in flight, and some for reads.
		opts.MaxConns = int32(opts.MaxInFlight) + 4
	}
	o, err := connect(ctx, dsn, opts.MaxConns)
	if err != nil {
		return nil, err
	}
	s := &Evidence{db: o.db, gen: o.gen, key: o.key, name: Redact(dsn), opts: opts, chains: make(map[string]*pchain),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.life, s.abort = context.WithCancel(context.Background())
	go s.run()
	return s, nil
}

// Close commits what is queued, stops the group committer and closes the
// connections. It is CloseContext with a context that ends after
// RetryFor (a second when RetryFor is negative): a server that is gone
// cannot hold it longer than that.
func (s *Evidence) Close() error {
	limit := s.opts.RetryFor
	if limit < 0 {
		limit = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return s.CloseContext(ctx)
}

// CloseContext commits what is queued while ctx lasts, stops the group
// committer and closes the connections. When ctx ends first, the commits
// in flight and their retries are abandoned: their records were not
// acknowledged (each wait returns an error), and the error returned says
// how many. A record whose wait returned nil was committed before; none
// is lost. It is safe to call more than once.
func (s *Evidence) CloseContext(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()
	s.signal()
	var err error
	select {
	case <-s.done:
	case <-ctx.Done():
		s.abort()
		<-s.done
		err = fmt.Errorf("pgstore: %s: closed before its queued records were committed (%w): they are not acknowledged", s.name, context.Cause(ctx))
	}
	s.abort()
	if first {
		s.db.pool.Close()
	}
	return err
}

// Name is the store's redacted DSN.
func (s *Evidence) Name() string { return s.name }

// EvidenceStats counts a store's group commits since it was opened.
type EvidenceStats struct {
	Groups     int64         // transactions committed
	Records    int64         // records they appended
	CommitTime time.Duration // total time from BEGIN to COMMIT's return
	Retries    int64         // groups tried again after a lost connection
}

// RecordsPerGroup is the mean number of records one commit made durable.
func (st EvidenceStats) RecordsPerGroup() float64 {
	if st.Groups == 0 {
		return 0
	}
	return float64(st.Records) / float64(st.Groups)
}

// Stats returns the store's group-commit counters.
func (s *Evidence) Stats() EvidenceStats {
	return EvidenceStats{Groups: s.groups.Load(), Records: s.records.Load(), CommitTime: time.Duration(s.commitNanos.Load()), Retries: s.retries.Load()}
}

func (s *Evidence) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Append implements chain.Store: it returns once the record is committed.
func (s *Evidence) Append(ctx context.Context, r *chain.Record) (chain.AppendReceipt, error) {
	rc, wait, err := s.AppendAsync(ctx, r)
	if err != nil {
		return chain.AppendReceipt{}, err
	}
	if err := wait(); err != nil {
		return chain.AppendReceipt{}, err
	}
	return rc, nil
}

// AppendAsync implements chain.AsyncAppender: it checks the record (its
// own content, and its link to the records this store has queued for its
// chain) and queues it for the next group; wait returns nil once the
// group's transaction has committed, or the reason the record is not in
// the chain. Durability is prefix-ordered per chain: a record whose wait
// returns nil has every earlier record of its chain committed.
func (s *Evidence) AppendAsync(ctx context.Context, r *chain.Record) (chain.AppendReceipt, func() error, error) {
	if err := ctx.Err(); err != nil {
		return chain.AppendReceipt{}, nil, err
	}
	if r == nil {
		return chain.AppendReceipt{}, nil, errors.New("chain: nil record")
	}
	// The store trusts no producer: the record is re-encoded and parsed
	// back, which recomputes both hashes.
	line := r.Canonical()
	parsed, err := chain.ParseRecord(line)
	if err != nil {
		var re *chain.RecordError
		if errors.As(err, &re) {
			return chain.AppendReceipt{}, nil, &chain.IntegrityError{Err: re}
		}
		return chain.AppendReceipt{}, nil, err
	}
	h := parsed.Hash()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return chain.AppendReceipt{}, nil, errors.New("pgstore: evidence store is closed")
	}
	c := s.chains[parsed.ChainID]
	switch {
	case c != nil && c.queued > 0:
		if err := checkLink(c.tip, true, parsed, func() bool { _, ok := c.ids[parsed.RecordID]; return ok }); err != nil {
			return chain.AppendReceipt{}, nil, err
		}
	case c == nil:
		// Nothing queued (a committed tip may be stale): the database
		// checks the link when the group commits, and says why it
		// refused.
		c = &pchain{ids: make(map[string]struct{})}
		s.chains[parsed.ChainID] = c
	}
	c.released = false
	c.tip = chain.Tip{Sequence: parsed.Sequence, Hash: h, Closed: parsed.RecordType == chain.TaskClosed}
	c.queued++
	c.ids[parsed.RecordID] = struct{}{}
	p := &pending{r: parsed, line: line, hash: h, done: make(chan struct{})}
	s.queue = append(s.queue, p)
	s.signal()
	rc := chain.AppendReceipt{ChainID: parsed.ChainID, RecordID: parsed.RecordID, Sequence: parsed.Sequence, HeadHash: h}
	return rc, func() error {
		// A caller that stops waiting gets no acknowledgement: the
		// record may still commit (as when a connection is lost after
		// COMMIT), but it was never said to be durable.
		select {
		case <-p.done:
			return p.err
		case <-ctx.Done():
			return fmt.Errorf("pgstore: record %s of chain %s is not acknowledged: stopped waiting for its commit: %w", parsed.RecordID, parsed.ChainID, context.Cause(ctx))
		}
	}, nil
}

// checkLink checks that r can follow tip (has: the chain has records), as
// chain's own stores do, with their conflict reasons; dup reports whether
// r's record_id is already in the chain.
func checkLink(tip chain.Tip, has bool, r *chain.Record, dup func() bool) error {
	conflict := func(reason, exp, act string) error {
		return &chain.ConflictError{ChainID: r.ChainID, Reason: reason, Expected: exp, Actual: act}
	}
	prev := "null"
	if r.PreviousChainHash != nil {
		prev = *r.PreviousChainHash
	}
	if !has {
		if r.Sequence != 0 {
			return conflict(chain.ConflictSequence, "0", strconv.FormatInt(r.Sequence, 10))
		}
		if r.PreviousChainHash != nil {
			return conflict(chain.ConflictStaleHead, "null", prev)
		}
	} else {
		if tip.Closed {
			return conflict(chain.ConflictClosed, "no record after task_closed", string(r.RecordType))
		}
		if r.Sequence != tip.Sequence+1 {
			return conflict(chain.ConflictSequence, strconv.FormatInt(tip.Sequence+1, 10), strconv.FormatInt(r.Sequence, 10))
		}
		if prev != tip.Hash.String() {
			return conflict(chain.ConflictStaleHead, tip.Hash.String(), prev)
		}
	}
	if dup() {
		return conflict(chain.ConflictDuplicateID, "a new record_id", r.RecordID)
	}
	return nil
}

// run is the group committer. Up to MaxInFlight groups commit at once,
// each on its own connection, over disjoint chains: a record waits while
// a group holding earlier records of its chain is in flight (the
// database checks its link against the committed predecessor), so each
// chain's groups commit in order while other chains' commit beside them.
func (s *Evidence) run() {
	defer close(s.done)
	inflight := make(map[string]bool) // chains with a group in flight
	active := 0
	finished := make(chan []*pending)
	for {
		s.mu.Lock()
		var group []*pending
		if active < s.opts.MaxInFlight {
			kept := s.queue[:0]
			for _, p := range s.queue {
				if len(group) < s.opts.MaxGroup && !inflight[p.r.ChainID] {
					group = append(group, p)
				} else {
					kept = append(kept, p)
				}
			}
			// A chain that did not fit whole stays in flight: its
			// later records wait for this group.
			clear(s.queue[len(kept):])
			s.queue = kept
		}
		done := s.closed && len(s.queue) == 0 && active == 0 && len(group) == 0
		s.mu.Unlock()
		if done {
			return
		}
		if len(group) > 0 {
			for _, p := range group {
				inflight[p.r.ChainID] = true
			}
			active++
			go func() {
				s.commitGroup(group)
				finished <- group
			}()
			continue
		}
		select {
		case <-s.wake:
		case g := <-finished:
			active--
			for _, p := range g {
				delete(inflight, p.r.ChainID)
			}
		}
	}
}

// insertRecord inserts one record if it extends its chain: the record
// before it is the one its previous hash names and is not task_closed (a
// genesis record: no previous hash). A conflict on (chain_id, sequence)
// or (chain_id, record_id) inserts nothing rather than fail the group;
// RETURNING says which rows went in.
const insertRecord = `INSERT INTO polc_records (chain_id, sequence, record_id, chain_hash, record_type, line)
SELECT $1::uuid, $2::bigint, $3::uuid, $4::bytea, $5::text, $6::bytea
WHERE CASE WHEN $2::bigint = 0 THEN $7::bytea IS NULL
	ELSE EXISTS (SELECT 1 FROM polc_records p WHERE p.chain_id = $1::uuid AND p.sequence = $2::bigint - 1
		AND p.chain_hash = $7::bytea AND p.record_type <> 'task_closed') END
ON CONFLICT DO NOTHING
RETURNING pos`

// commitGroup commits one group and settles its records.
func (s *Evidence) commitGroup(group []*pending) {
	t0 := time.Now()
	inserted, err := s.insertGroup(group)
	if err == nil {
		s.groups.Add(1)
		s.records.Add(int64(len(group)))
		s.commitNanos.Add(int64(time.Since(t0)))
	}
	failed := make(map[string]error)
	for i, p := range group {
		switch {
		case err != nil:
			p.err = fmt.Errorf("pgstore: record %s of chain %s is not acknowledged: its group commit failed: %w", p.r.RecordID, p.r.ChainID, err)
		case inserted[i]:
			continue
		case failed[p.r.ChainID] != nil:
			p.err = dependentErr(p, failed[p.r.ChainID])
		default:
			p.err = s.diagnose(p)
		}
		if failed[p.r.ChainID] == nil {
			failed[p.r.ChainID] = p.err
		}
	}
	s.mu.Lock()
	settled := group
	if len(failed) > 0 {
		// Records queued after a failed one of their chain link to a
		// record that is not in it: fail them now, rather than let the
		// database refuse them one by one.
		kept := s.queue[:0]
		for _, q := range s.queue {
			if e := failed[q.r.ChainID]; e != nil {
				q.err = dependentErr(q, e)
				settled = append(settled[:len(settled):len(settled)], q)
			} else {
				kept = append(kept, q)
			}
		}
		clear(s.queue[len(kept):])
		s.queue = kept
	}
	for _, p := range settled {
		c := s.chains[p.r.ChainID]
		c.queued--
		delete(c.ids, p.r.RecordID)
		if c.queued == 0 && (failed[p.r.ChainID] != nil || c.released || len(s.chains) > maxCachedTips) {
			// Head reads the chain's head from the database again.
			delete(s.chains, p.r.ChainID)
		}
	}
	s.mu.Unlock()
	for _, p := range settled {
		close(p.done)
	}
}

func dependentErr(p *pending, cause error) error {
	return fmt.Errorf("pgstore: record %s (sequence %d) of chain %s is not appended: an earlier record of the chain was not: %w", p.r.RecordID, p.r.Sequence, p.r.ChainID, cause)
}

// retry runs the read f again while it fails on a lost connection (a
// server restart), for up to RetryFor and while ctx lasts.
func (s *Evidence) retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(s.opts.RetryFor)
	backoff := 20 * time.Millisecond
	for {
		err := f()
		if err == nil || !retryable(err) || s.opts.RetryFor < 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// insertGroup inserts the group's records in one transaction, trying again
// on a new connection while the connection is lost (a restart), for up to
// RetryFor. inserted[i] says whether record i is in its chain.
func (s *Evidence) insertGroup(group []*pending) ([]bool, error) {
	deadline := time.Now().Add(s.opts.RetryFor)
	backoff := 20 * time.Millisecond
	for again := false; ; again = true {
		inserted, err := s.tryGroup(group, again)
		if err == nil || !retryable(err) || s.opts.RetryFor < 0 || time.Now().After(deadline) || s.life.Err() != nil {
			if err != nil && s.life.Err() != nil {
				err = fmt.Errorf("the store was closed while it was being committed: %w", err)
			}
			return inserted, err
		}
		s.retries.Add(1)
		select {
		case <-s.life.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// tryGroup is one attempt of insertGroup, in one round trip: BEGIN, the
// durability check (durableBegin), the append lock, the conditional
// inserts and COMMIT are sent as one pipeline (a pgx batch, one Sync).
// The server runs them in order; the first that fails aborts the
// transaction and the server skips the rest, COMMIT included, up to the
// Sync: the results are read in order, the first error ends the attempt,
// and the connection, left in the aborted transaction, is rolled back.
// Nothing of a failed attempt commits. again: an earlier attempt lost its
// connection, possibly after its COMMIT reached the server; a record it
// refuses that is already in its chain, with its chain hash (which covers
// every byte of it), was committed by that attempt (read in the same
// pipeline, after the inserts).
func (s *Evidence) tryGroup(group []*pending, again bool) (inserted []bool, err error) {
	ctx := s.life
	conn, err := s.db.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
			// Aborted or never committed: roll back, or the pool
			// closes the connection when it sees it in a transaction.
			conn.Exec(ctx, "ROLLBACK")
		}
		conn.Release()
	}()
	// The hook (tests) holds the group between its inserts and COMMIT,
	// which it then sends on its own.
	commit := s.beforeCommit == nil
	b := &pgx.Batch{}
	b.Queue(durableBeginStmt)
	b.Queue(durableCheckStmt)
	// Held until the commit: Scan waits for this group (see Scan).
	b.Queue("SELECT pg_advisory_xact_lock_shared($1, $2)", int32(appendLock), s.key)
	insert := s.db.q.sql(insertRecord)
	for _, p := range group {
		var prev []byte
		if p.r.PreviousChainHash != nil {
			h, _ := chain.ParseHash(*p.r.PreviousChainHash)
			prev = h[:]
		}
		b.Queue(insert, p.r.ChainID, p.r.Sequence, p.r.RecordID, p.hash[:], string(p.r.RecordType), p.line, prev)
	}
	if again {
		have := s.db.q.sql("SELECT EXISTS (SELECT 1 FROM polc_records WHERE chain_id = $1 AND sequence = $2 AND chain_hash = $3)")
		for _, p := range group {
			b.Queue(have, p.r.ChainID, p.r.Sequence, p.hash[:])
		}
	}
	if commit {
		b.Queue("COMMIT")
	}
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			inserted, err = nil, cerr
		}
	}()
	for range 3 {
		if _, err := br.Exec(); err != nil {
			return nil, durabilityErr(err)
		}
	}
	inserted = make([]bool, len(group))
	for i := range group {
		var pos int64
		switch err := br.QueryRow().Scan(&pos); {
		case err == nil:
			inserted[i] = true
		case errors.Is(err, pgx.ErrNoRows):
		default:
			return nil, err
		}
	}
	if again {
		for i := range group {
			var committed bool
			if err := br.QueryRow().Scan(&committed); err != nil {
				return nil, err
			}
			inserted[i] = inserted[i] || committed
		}
	}
	if !commit {
		if err := br.Close(); err != nil {
			return nil, err
		}
		s.beforeCommit(len(group))
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			return nil, err
		}
		return inserted, nil
	}
	// COMMIT of an aborted transaction answers ROLLBACK without an
	// error: only the tag COMMIT is a commit.
	tag, err := br.Exec()
	if err != nil {
		return nil, err
	}
	if tag.String() != "COMMIT" {
		return nil, fmt.Errorf("pgstore: the group's COMMIT answered %q", tag.String())
	}
	return inserted, nil
}

// diagnose says why the database refused p: the chain's committed head
// and record ids, judged as checkLink judges.
func (s *Evidence) diagnose(p *pending) error {
	ctx := s.life
	tip, has, err := s.dbHead(ctx, p.r.ChainID)
	if err == nil {
		var dup bool
		err = s.db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM polc_records WHERE chain_id = $1 AND record_id = $2)", p.r.ChainID, p.r.RecordID).Scan(&dup)
		if err == nil {
			if cerr := checkLink(tip, has, p.r, func() bool { return dup }); cerr != nil {
				return cerr
			}
		}
	}
	if err != nil {
		err = fmt.Errorf(" (reading its head: %v)", err)
	} else {
		err = errors.New("")
	}
	// The head moved on, or back, between the insert and this read.
	return &chain.ConflictError{ChainID: p.r.ChainID, Reason: chain.ConflictStaleHead, Expected: "the chain's head at commit" + err.Error(), Actual: prevOf(p.r)}
}

func prevOf(r *chain.Record) string {
	if r.PreviousChainHash == nil {
		return "null"
	}
	return *r.PreviousChainHash
}

// dbHead reads a chain's committed last record.
func (s *Evidence) dbHead(ctx context.Context, chainID string) (chain.Tip, bool, error) {
	var seq int64
	var hash []byte
	var typ string
	err := s.retry(ctx, func() error {
		return s.db.QueryRow(ctx, "SELECT sequence, chain_hash, record_type FROM polc_records WHERE chain_id = $1 ORDER BY sequence DESC LIMIT 1", chainID).Scan(&seq, &hash, &typ)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return chain.Tip{}, false, nil
	}
	if err != nil {
		return chain.Tip{}, false, err
	}
	if len(hash) != len(chain.Hash{}) {
		return chain.Tip{}, false, fmt.Errorf("pgstore: chain %s: stored chain_hash of sequence %d has %d bytes", chainID, seq, len(hash))
	}
	return chain.Tip{Sequence: seq, Hash: chain.Hash(hash), Closed: typ == string(chain.TaskClosed)}, true, nil
}

func checkChainID(chainID string) error {
	if !chain.IsUUID(chainID) {
		return fmt.Errorf("chain: %q is not a lowercase UUID", chainID)
	}
	return nil
}

// Release implements chain.Releaser: the store forgets the chain's tip
// (once its queued records are settled), as the executor does with a task
// boundary's chain after its task_closed.
func (s *Evidence) Release(chainID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chains[chainID]; c != nil {
		if c.queued == 0 {
			delete(s.chains, chainID)
		} else {
			c.released = true
		}
	}
	return nil
}

// Head implements chain.Store: the chain's last record, queued ones
// included (what the next record must link to), else the last this
// store committed (see pchain), else the database's.
func (s *Evidence) Head(ctx context.Context, chainID string) (chain.Tip, bool, error) {
	if err := checkChainID(chainID); err != nil {
		return chain.Tip{}, false, err
	}
	s.mu.Lock()
	if c := s.chains[chainID]; c != nil {
		tip := c.tip
		s.mu.Unlock()
		return tip, true, nil
	}
	s.mu.Unlock()
	return s.dbHead(ctx, chainID)
}

// Read implements chain.Store: the committed records with sequence >
// after, in order.
func (s *Evidence) Read(ctx context.Context, chainID string, after int64) ([]*chain.Record, error) {
	if err := checkChainID(chainID); err != nil {
		return nil, err
	}
	var out []*chain.Record
	err := s.lines(ctx, chainID, after, func(seq int64, line []byte) error {
		r, err := chain.ParseRecord(line)
		if err != nil {
			return &chain.CorruptChainError{ChainID: chainID, Line: int(seq) + 1, Err: err}
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// lines calls f with each committed record's line after sequence after,
// in order, from one snapshot.
// A connection lost before the first row is tried again; one lost
// mid-way is an error (f has seen part of the chain).
func (s *Evidence) lines(ctx context.Context, chainID string, after int64, f func(seq int64, line []byte) error) error {
	var rows pgx.Rows
	started := false
	err := s.retry(ctx, func() error {
		var err error
		rows, err = s.db.Query(ctx, "SELECT sequence, line FROM polc_records WHERE chain_id = $1 AND sequence > $2 ORDER BY sequence", chainID, after)
		if err != nil {
			return err
		}
		if rows.Next() {
			started = true
			return nil
		}
		rows.Close()
		return rows.Err()
	})
	if err != nil || !started {
		return err
	}
	defer rows.Close()
	var seq int64
	var line []byte
	for ok := true; ok; ok = rows.Next() {
		if err := rows.Scan(&seq, &line); err != nil {
			return err
		}
		if err := f(seq, line); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Export writes the chain's committed records as JSONL (each stored line
// and "\n"): the bytes a file store holding the same records holds, which
// certverify verifies. A missing chain writes nothing.
func (s *Evidence) Export(ctx context.Context, chainID string, w io.Writer) error {
	if err := checkChainID(chainID); err != nil {
		return err
	}
	bw := &lineWriter{w: w}
	return s.lines(ctx, chainID, -1, func(_ int64, line []byte) error { return bw.write(line) })
}

type lineWriter struct {
	w   io.Writer
	buf []byte
}

func (l *lineWriter) write(line []byte) error {
	l.buf = append(append(l.buf[:0], line...), '\n')
	_, err := l.w.Write(l.buf)
	return err
}

// Verify implements chain.Store: it streams the exported chain through
// the verifier.
func (s *Evidence) Verify(ctx context.Context, chainID string, expectedHead chain.Hash) (*chain.Result, error) {
	if err := checkChainID(chainID); err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(s.Export(ctx, chainID, pw)) }()
	res, err := chain.Verify(pr, chain.VerifyOptions{ExpectedHead: &expectedHead, ChainID: chainID})
	pr.CloseWithError(errors.New("pgstore: verify stopped reading"))
	return res, err
}

// Chains returns the ids of the chains that have records, sorted.
func (s *Evidence) Chains(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.retry(ctx, func() error {
		rows, err := s.db.Query(ctx, "SELECT chain_id::text FROM polc_records WHERE sequence = 0 ORDER BY chain_id::text")
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return ids, err
}

// Scan implements chain.ProjectionSource. A cursor is "<generation>:<pos>":
// the store's generation (made when its schema was created) and the
// insertion position of the last record delivered. Positions are
// assigned at insert, but transactions commit in any order, so a page
// never reaches past the horizon: the largest position committed at an
// instant when no group commit was in flight (Scan takes the append lock
// exclusively, for as long as reading it takes, which waits for the groups
// in flight and holds new ones back). Every position below the horizon is
// committed or will never be, and every later insert gets a larger one:
// nothing committed is ever behind a delivered cursor. A cursor of another
// generation (the store recreated) starts again from the beginning.
func (s *Evidence) Scan(ctx context.Context, after string, limit int) (chain.ProjectionPage, error) {
	var from int64
	if after != "" {
		gen, num, ok := strings.Cut(after, ":")
		n, err := strconv.ParseInt(num, 10, 64)
		if !ok || len(gen) != 32 || err != nil || n < 0 || strconv.FormatInt(n, 10) != num {
			return chain.ProjectionPage{}, fmt.Errorf("chain: invalid cursor %q", after)
		}
		if gen == s.gen {
			from = n
		}
	}
	var horizon int64
	err := s.retry(ctx, func() error {
		return s.db.txFunc(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx *qtx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", int32(appendLock), s.key); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SELECT coalesce(max(pos), 0) FROM polc_records").Scan(&horizon)
		})
	})
	if err != nil {
		return chain.ProjectionPage{}, err
	}
	var lim *int64
	if limit > 0 {
		l := int64(limit)
		lim = &l
	}
	rows, err := s.db.Query(ctx, `SELECT pos, chain_id::text, sequence, record_id::text, chain_hash FROM polc_records
		WHERE pos > $1 AND pos <= $2 ORDER BY pos LIMIT $3`, from, horizon, lim)
	if err != nil {
		return chain.ProjectionPage{}, err
	}
	defer rows.Close()
	page := chain.ProjectionPage{NextCursor: after}
	for rows.Next() {
		var (
			pos  int64
			rc   chain.ProjectionReceipt
			hash []byte
		)
		if err := rows.Scan(&pos, &rc.ChainID, &rc.Sequence, &rc.RecordID, &hash); err != nil {
			return chain.ProjectionPage{}, err
		}
		if len(hash) != len(chain.Hash{}) {
			return chain.ProjectionPage{}, fmt.Errorf("pgstore: chain %s: stored chain_hash of sequence %d has %d bytes", rc.ChainID, rc.Sequence, len(hash))
		}
		rc.HeadHash = chain.Hash(hash)
		rc.Cursor = s.gen + ":" + strconv.FormatInt(pos, 10)
		page.Receipts = append(page.Receipts, rc)
		page.NextCursor = rc.Cursor
	}
	return page, rows.Err()
}
