package executor

import (
	"context"
	"fmt"
	"sync"

	"polc.dev/polc/chain"
)

// DefaultProjectionPageSize is the page size an EvidenceProjector scans with
// when PageSize is not positive.
const DefaultProjectionPageSize = 256

// EvidenceProjector moves evidence from a chain store into a
// ProjectionStore (docs/statestore.md): it reads the receipts after its committed
// cursor, re-reads each record from the chain by chain id and sequence,
// checks it against the receipt, and applies the page together with the
// page's next cursor in one ProjectionStore transaction.
//
// Delivery is at least once: a crash before that transaction replays the
// page, and the store's idempotency key (chain_id, record_id, Version) makes
// the replay a no-op. A record that does not match its receipt stops the
// projector with *ProjectionVerifyError (fail closed, nothing of the page is
// applied); it is never skipped.
//
// All members must be set before use (PageSize may be zero). A Name is
// bound to one Version: a new version needs a new Name (the store refuses
// another version's apply with *StateConflictError). One projector per
// Name should run at a time; two would stay correct (every apply is
// idempotent) but could move the shared cursor back and redo work.
type EvidenceProjector struct {
	// Name keys the projector's cursor in Store.
	Name string
	// Version is the projection version (>= 1), part of the idempotency key.
	Version int
	// Source enumerates durable appends.
	Source chain.ProjectionSource
	// Chains is the store the receipts come from; records are re-read from it.
	Chains chain.Store
	// Store receives the projection.
	Store ProjectionStore
	// PageSize bounds the receipts applied per transaction
	// (DefaultProjectionPageSize when not positive).
	PageSize int

	// ahead keeps, per chain of the last page, the records its Read returned
	// past the page, so that the next Step does not read them again: Read
	// returns a chain's whole tail, and reading it again for every page
	// made draining a chain of N records read about N²/(2·PageSize). Chain
	// records never change, and each is still checked against its receipt.
	mu    sync.Mutex
	ahead map[string][]*chain.Record
}

// ProjectorConfigError is an EvidenceProjector with a missing or invalid
// member.
type ProjectorConfigError struct {
	Field  string
	Reason string
}

func (e *ProjectorConfigError) Error() string {
	return fmt.Sprintf("evidence projector: %s %s", e.Field, e.Reason)
}

// ProjectionVerifyError is a receipt whose re-read record is missing or
// differs from it (or whose content does not hash to its own chain_hash).
// The source and the chain store disagree: the projector stops rather than
// project evidence it cannot vouch for.
type ProjectionVerifyError struct {
	ChainID  string
	RecordID string
	Sequence int64
	Reason   string
}

func (e *ProjectionVerifyError) Error() string {
	return fmt.Sprintf("evidence projector: receipt for record %s (chain %s, sequence %d): %s", e.RecordID, e.ChainID, e.Sequence, e.Reason)
}

func (p *EvidenceProjector) check() error {
	switch {
	case p.Name == "":
		return &ProjectorConfigError{Field: "Name", Reason: "is empty"}
	case p.Version < 1:
		return &ProjectorConfigError{Field: "Version", Reason: fmt.Sprintf("is %d, want >= 1", p.Version)}
	case p.Source == nil:
		return &ProjectorConfigError{Field: "Source", Reason: "is nil"}
	case p.Chains == nil:
		return &ProjectorConfigError{Field: "Chains", Reason: "is nil"}
	case p.Store == nil:
		return &ProjectorConfigError{Field: "Store", Reason: "is nil"}
	}
	return nil
}

// Step projects one page: it reads the committed cursor, scans at most
// PageSize receipts after it, re-reads and verifies their records and
// applies them with the page's next cursor. It returns how many receipts
// the page held (0 when there was nothing new; records the store already
// had are counted too, since Step cannot tell them apart). On error nothing
// of the page was applied by this call, except when the store committed and
// then failed to report it, which a later Step observes as an advanced
// cursor.
func (p *EvidenceProjector) Step(ctx context.Context) (applied int, err error) {
	if err := p.check(); err != nil {
		return 0, err
	}
	cursor, err := p.Store.ProjectionCursor(ctx, p.Name)
	if err != nil {
		return 0, fmt.Errorf("evidence projector %s: read cursor: %w", p.Name, err)
	}
	size := p.PageSize
	if size <= 0 {
		size = DefaultProjectionPageSize
	}
	page, err := p.Source.Scan(ctx, cursor, size)
	if err != nil {
		return 0, fmt.Errorf("evidence projector %s: scan after %q: %w", p.Name, cursor, err)
	}
	if len(page.Receipts) == 0 {
		return 0, nil
	}
	if page.NextCursor == cursor {
		// Applying would not move the cursor and Drain would loop forever.
		return 0, fmt.Errorf("evidence projector %s: source returned %d receipts without advancing cursor %q", p.Name, len(page.Receipts), cursor)
	}
	records, err := p.reread(ctx, page.Receipts)
	if err != nil {
		return 0, err
	}
	if err := p.Store.ApplyProjection(ctx, p.Name, p.Version, records, page.NextCursor); err != nil {
		return 0, fmt.Errorf("evidence projector %s: apply %d records up to cursor %q: %w", p.Name, len(records), page.NextCursor, err)
	}
	return len(records), nil
}

// Drain steps until a page is empty or a step fails. Records appended while
// it runs may or may not be included.
func (p *EvidenceProjector) Drain(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := p.Step(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// reread fetches the records of a page from Chains, one Read per chain
// starting at the page's lowest sequence of that chain (unless the records
// the previous page read ahead cover the page's), and verifies each against
// its receipt.
func (p *EvidenceProjector) reread(ctx context.Context, receipts []chain.ProjectionReceipt) ([]ProjectedRecord, error) {
	from := make(map[string]int64)
	to := make(map[string]int64)
	for _, rc := range receipts {
		if s, ok := from[rc.ChainID]; !ok || rc.Sequence < s {
			from[rc.ChainID] = rc.Sequence
		}
		if s, ok := to[rc.ChainID]; !ok || rc.Sequence > s {
			to[rc.ChainID] = rc.Sequence
		}
	}
	p.mu.Lock()
	ahead := p.ahead
	p.ahead = nil // a failed page leaves nothing behind
	p.mu.Unlock()
	read := make(map[string][]*chain.Record, len(from))
	for id, seq := range from {
		if recs, ok := covering(ahead[id], seq, to[id]); ok {
			read[id] = recs
			continue
		}
		recs, err := p.Chains.Read(ctx, id, seq-1)
		if err != nil {
			return nil, fmt.Errorf("evidence projector %s: read chain %s after %d: %w", p.Name, id, seq-1, err)
		}
		read[id] = recs
	}
	out := make([]ProjectedRecord, 0, len(receipts))
	for _, rc := range receipts {
		fail := func(format string, args ...any) error {
			return &ProjectionVerifyError{ChainID: rc.ChainID, RecordID: rc.RecordID, Sequence: rc.Sequence, Reason: fmt.Sprintf(format, args...)}
		}
		recs := read[rc.ChainID]
		i := rc.Sequence - from[rc.ChainID]
		if i < 0 || i >= int64(len(recs)) {
			return nil, fail("no record at that sequence in the chain store")
		}
		r := recs[i]
		switch {
		case r == nil:
			return nil, fail("chain store returned a nil record")
		case r.ChainID != rc.ChainID || r.Sequence != rc.Sequence:
			return nil, fail("chain store returned record at chain %s sequence %d", r.ChainID, r.Sequence)
		case r.RecordID != rc.RecordID:
			return nil, fail("record at that sequence is %s", r.RecordID)
		case r.ChainHash != rc.HeadHash.String():
			return nil, fail("record's chain_hash is %s, receipt has %s", r.ChainHash, rc.HeadHash)
		case r.ComputeChainHash() != rc.HeadHash:
			// The stored chain_hash matches but the content does not hash to it.
			return nil, fail("record content does not hash to its chain_hash")
		case r.ComputePayloadDigest().String() != r.PayloadDigest:
			return nil, fail("payload_json does not hash to payload_digest")
		}
		var op *string
		if r.OperationID != nil {
			v := *r.OperationID
			op = &v
		}
		out = append(out, ProjectedRecord{
			ChainID:     r.ChainID,
			RecordID:    r.RecordID,
			Sequence:    r.Sequence,
			RecordType:  string(r.RecordType),
			OperationID: op,
			ChainHash:   r.ChainHash,
			PayloadJSON: r.PayloadJSON,
		})
	}
	next := make(map[string][]*chain.Record)
	for id, recs := range read {
		if k := to[id] - from[id] + 1; k < int64(len(recs)) {
			next[id] = recs[k:]
		}
	}
	p.mu.Lock()
	p.ahead = next
	p.mu.Unlock()
	return out, nil
}

// covering returns recs from sequence from on when recs (records read ahead,
// in sequence order) hold every sequence from from to to.
func covering(recs []*chain.Record, from, to int64) ([]*chain.Record, bool) {
	if len(recs) == 0 || recs[0] == nil {
		return nil, false
	}
	first := recs[0].Sequence
	if from < first || to-first >= int64(len(recs)) || recs[to-first] == nil || recs[to-first].Sequence != to {
		return nil, false
	}
	return recs[from-first:], true
}
