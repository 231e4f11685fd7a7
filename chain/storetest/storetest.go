// Package storetest is the conformance suite of chain.Store: every store
// (MemStore, FileStore, the PostgreSQL store) runs the same tests of the
// contract chain.Store documents, and of chain.ProjectionSource and
// chain.AsyncAppender where it implements them.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"polc.dev/polc/chain"
)

// Subject is a store under test.
type Subject struct {
	// Open returns a new, empty store, closed when t ends.
	Open func(t *testing.T) chain.Store
	// Export returns a chain's JSONL as the store exports it.
	Export func(t *testing.T, s chain.Store, chainID string) []byte
}

// IDs makes distinct UUIDs for records, operations and chains.
type IDs struct {
	prefix string
	n      atomic.Int64
}

// NewIDs returns an id source whose ids start with prefix (8 hex digits).
func NewIDs(prefix string) *IDs { return &IDs{prefix: prefix} }

// Next returns a new lowercase UUID.
func (g *IDs) Next() string {
	return fmt.Sprintf("%s-0000-4000-8000-%012x", g.prefix, g.n.Add(1))
}

// Policy is the policy id of the suite's records.
const Policy = "11111111-1111-4111-8111-111111111111"

var digest = strings.Repeat("ab", 32)

// Draft returns a draft of chainID with payload p.
func Draft(ids *IDs, chainID string, op *string, p chain.Payload) chain.Draft {
	return chain.Draft{RecordID: ids.Next(), ChainID: chainID, OperationID: op, PolicyID: Policy, PolicyVersion: "1",
		Payload: p, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
}

// Bound is a policy_bound payload.
func Bound() chain.Payload {
	return chain.PolicyBoundPayload{EffectBackendID: "b", EffectCapabilityDigest: digest, PolicyDigest: digest, TaskBoundaryID: Policy}
}

func started(ids *IDs) chain.Payload {
	return chain.OperationStartedPayload{AttemptID: ids.Next(), RequestDigest: digest, ToolID: "t"}
}

func conflictReason(err error) string {
	var ce *chain.ConflictError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return ""
}

func mustSeal(t *testing.T, d chain.Draft, seq int64, prev *chain.Hash) *chain.Record {
	t.Helper()
	r, err := chain.Seal(d, seq, prev)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Run runs the suite's sequential tests.
func Run(t *testing.T, s Subject) {
	t.Run("AppendRules", func(t *testing.T) { t.Parallel(); appendRules(t, s) })
	t.Run("ProjectionScan", func(t *testing.T) { t.Parallel(); projectionScan(t, s) })
	t.Run("Export", func(t *testing.T) { t.Parallel(); export(t, s) })
	t.Run("AsyncPrefix", func(t *testing.T) { t.Parallel(); asyncPrefix(t, s) })
}

// RunConcurrent runs the suite's concurrency tests (callers name their
// test TestConcurrent…, so that CI runs it under the race detector).
func RunConcurrent(t *testing.T, s Subject) {
	t.Run("Writers", func(t *testing.T) { writers(t, s) })
	t.Run("RacingOneChain", func(t *testing.T) { racing(t, s) })
}

func appendRules(t *testing.T, sub Subject) {
	ctx := context.Background()
	s := sub.Open(t)
	ids := NewIDs("00000000")
	c1, c2 := ids.Next(), ids.Next()
	op := ids.Next()
	r0 := mustSeal(t, Draft(ids, c1, &op, Bound()), 0, nil)
	bad := mustSeal(t, Draft(ids, c1, &op, Bound()), 1, nil)
	if _, err := s.Append(ctx, bad); conflictReason(err) != chain.ConflictSequence {
		t.Fatalf("genesis at sequence 1: %v", err)
	}
	rc, err := s.Append(ctx, r0)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Sequence != 0 || rc.RecordID != r0.RecordID || rc.HeadHash != r0.Hash() || rc.ChainID != c1 {
		t.Fatalf("receipt %+v", rc)
	}
	if _, err := s.Append(ctx, r0); conflictReason(err) != chain.ConflictSequence {
		t.Fatalf("duplicate append: %v", err)
	}
	stale := chain.Hash{1}
	r1stale := mustSeal(t, Draft(ids, c1, &op, started(ids)), 1, &stale)
	if _, err := s.Append(ctx, r1stale); conflictReason(err) != chain.ConflictStaleHead {
		t.Fatalf("stale head: %v", err)
	}
	h0 := r0.Hash()
	r1 := mustSeal(t, Draft(ids, c1, &op, started(ids)), 1, &h0)
	tampered := *r1
	tampered.PayloadJSON = strings.Replace(tampered.PayloadJSON, `"t"`, `"u"`, 1)
	var ie *chain.IntegrityError
	if _, err := s.Append(ctx, &tampered); !errors.As(err, &ie) || ie.Err.Code != chain.CodeContentMismatch {
		t.Fatalf("tampered record: %v", err)
	}
	if _, err := s.Append(ctx, r1); err != nil {
		t.Fatal(err)
	}
	h1 := r1.Hash()
	dupID := Draft(ids, c1, &op, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: digest})
	dupID.RecordID = r0.RecordID
	r2dup := mustSeal(t, dupID, 2, &h1)
	if _, err := s.Append(ctx, r2dup); conflictReason(err) != chain.ConflictDuplicateID {
		t.Fatalf("duplicate record_id: %v", err)
	}
	r2 := mustSeal(t, Draft(ids, c1, &op, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: digest}), 2, &h1)
	if _, err := s.Append(ctx, r2); err != nil {
		t.Fatal(err)
	}
	h2 := r2.Hash()
	r3 := mustSeal(t, Draft(ids, c1, nil, chain.TaskClosedPayload{ClosedAt: "2026-01-02T03:04:05.000006Z", OpenedAt: "2026-01-02T03:04:05.000006Z", OperationCount: 1, TaskBoundaryID: Policy}), 3, &h2)
	if _, err := s.Append(ctx, r3); err != nil {
		t.Fatal(err)
	}
	h3 := r3.Hash()
	d4 := Draft(ids, c1, nil, chain.RecordSupersededPayload{ReasonCode: "x"})
	d4.SupersedesRecordID = &r0.RecordID
	r4 := mustSeal(t, d4, 4, &h3)
	if _, err := s.Append(ctx, r4); conflictReason(err) != chain.ConflictClosed {
		t.Fatalf("append after task_closed: %v", err)
	}
	recs, err := s.Read(ctx, c1, 1)
	if err != nil || len(recs) != 2 || recs[0].Sequence != 2 || recs[1].RecordID != r3.RecordID {
		t.Fatalf("Read(after 1): %v %v", recs, err)
	}
	if none, err := s.Read(ctx, c2, -1); len(none) != 0 || err != nil {
		t.Fatalf("a missing chain reads as %v, %v", none, err)
	}
	if _, ok, err := s.Head(ctx, c2); ok || err != nil {
		t.Fatalf("Head of a missing chain: %v %v", ok, err)
	}
	tip, ok, err := s.Head(ctx, c1)
	if err != nil || !ok || tip.Hash != h3 || tip.Sequence != 3 || !tip.Closed {
		t.Fatalf("Head: %+v %v %v", tip, ok, err)
	}
	res, err := s.Verify(ctx, c1, h3)
	if err != nil || !res.OK() || !res.HeadMatched || res.Records != 4 {
		t.Fatalf("Verify: %+v %v", res, err)
	}
	res, _ = s.Verify(ctx, c1, h2)
	if res.OK() {
		t.Fatal("Verify against an older head passed")
	}
}

// AppendN appends n policy_bound records to chainID through a chain.Writer.
func AppendN(t *testing.T, s chain.Store, ids *IDs, chainID string, n int) []chain.AppendReceipt {
	t.Helper()
	w := &chain.Writer{Store: s, ChainID: chainID}
	var out []chain.AppendReceipt
	for range n {
		op := ids.Next()
		_, rc, err := w.Append(context.Background(), Draft(ids, chainID, &op, Bound()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rc)
	}
	return out
}

// ScanAll drains src from the beginning with pages of size page.
func ScanAll(t *testing.T, src chain.ProjectionSource, page int) []chain.ProjectionReceipt {
	t.Helper()
	var seen []chain.ProjectionReceipt
	cursor := ""
	for {
		p, err := src.Scan(context.Background(), cursor, page)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Receipts) == 0 {
			if p.NextCursor != cursor {
				t.Fatal("empty page moved the cursor")
			}
			return seen
		}
		seen = append(seen, p.Receipts...)
		cursor = p.NextCursor
	}
}

func projectionScan(t *testing.T, sub Subject) {
	s := sub.Open(t)
	src, ok := s.(chain.ProjectionSource)
	if !ok {
		t.Skip("not a ProjectionSource")
	}
	ids := NewIDs("00000001")
	c1, c2 := ids.Next(), ids.Next()
	a := AppendN(t, s, ids, c1, 3)
	b := AppendN(t, s, ids, c2, 2)
	seen := ScanAll(t, src, 2)
	if len(seen) != len(a)+len(b) {
		t.Fatalf("scanned %d receipts, want %d", len(seen), len(a)+len(b))
	}
	for i, rc := range append(a, b...) {
		if seen[i].RecordID != rc.RecordID || seen[i].HeadHash != rc.HeadHash || seen[i].Sequence != rc.Sequence || seen[i].ChainID != rc.ChainID {
			t.Fatalf("receipt %d: %+v, want %+v", i, seen[i], rc)
		}
	}
	// A cursor stays valid: scanning on from the last one finds only
	// what was appended since.
	last := seen[len(seen)-1].Cursor
	more := AppendN(t, s, ids, c1, 1)
	p, err := src.Scan(context.Background(), last, 0)
	if err != nil || len(p.Receipts) != 1 || p.Receipts[0].RecordID != more[0].RecordID {
		t.Fatalf("scan after %q: %+v %v", last, p, err)
	}
	if _, err := src.Scan(context.Background(), "x", 1); err == nil {
		t.Fatal("invalid cursor accepted")
	}
}

// export checks that the store exports exactly the canonical lines of the
// records appended: what a file store's chain file holds.
func export(t *testing.T, sub Subject) {
	s := sub.Open(t)
	ids := NewIDs("00000002")
	c := ids.Next()
	w := &chain.Writer{Store: s, ChainID: c}
	var want bytes.Buffer
	for i := range 5 {
		op := ids.Next()
		var p chain.Payload = Bound()
		if i > 0 {
			p = started(ids)
		}
		r, _, err := w.Append(context.Background(), Draft(ids, c, &op, p))
		if err != nil {
			t.Fatal(err)
		}
		want.Write(r.Canonical())
		want.WriteByte('\n')
	}
	if got := sub.Export(t, s, c); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("export differs from the appended lines:\n got %q\nwant %q", got, want.Bytes())
	}
	if got := sub.Export(t, s, ids.Next()); len(got) != 0 {
		t.Fatalf("a missing chain exports %q", got)
	}
}

// asyncPrefix checks an AsyncAppender: records appended without waiting
// are acknowledged in chain order, and a record appended after a refused
// one is refused too (it links to a record that is not in the chain).
func asyncPrefix(t *testing.T, sub Subject) {
	s := sub.Open(t)
	aa, ok := s.(chain.AsyncAppender)
	if !ok {
		t.Skip("not an AsyncAppender")
	}
	ctx := context.Background()
	ids := NewIDs("00000003")
	c := ids.Next()
	var prev *chain.Hash
	var waits []func() error
	var recs []*chain.Record
	for i := range 20 {
		op := ids.Next()
		r := mustSeal(t, Draft(ids, c, &op, Bound()), int64(i), prev)
		_, wait, err := aa.AppendAsync(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		h := r.Hash()
		prev = &h
		waits = append(waits, wait)
		recs = append(recs, r)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	got, err := s.Read(ctx, c, -1)
	if err != nil || len(got) != len(recs) {
		t.Fatalf("read %d records, %v", len(got), err)
	}
	for i := range got {
		if got[i].ChainHash != recs[i].ChainHash {
			t.Fatalf("record %d differs", i)
		}
	}
}

// writers appends through chain.Writer from many goroutines to a few
// chains: every acknowledged record is in its chain, in a chain that
// verifies.
func writers(t *testing.T, sub Subject) {
	s := sub.Open(t)
	ctx := context.Background()
	ids := NewIDs("00000004")
	const chains, perChain, goroutines = 3, 40, 4
	var ws []*chain.Writer
	for range chains {
		ws = append(ws, &chain.Writer{Store: s, ChainID: ids.Next()})
	}
	var mu sync.Mutex
	acked := map[string]chain.AppendReceipt{}
	var wg sync.WaitGroup
	errs := make(chan error, chains*goroutines)
	for _, w := range ws {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perChain / goroutines {
					op := ids.Next()
					_, rc, err := w.Append(ctx, Draft(ids, w.ChainID, &op, Bound()))
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					acked[rc.RecordID] = rc
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, w := range ws {
		recs, err := s.Read(ctx, w.ChainID, -1)
		if err != nil || len(recs) != perChain {
			t.Fatalf("chain %s: %d records, %v", w.ChainID, len(recs), err)
		}
		for i, r := range recs {
			rc, ok := acked[r.RecordID]
			if !ok || rc.Sequence != int64(i) || rc.HeadHash != r.Hash() {
				t.Fatalf("chain %s record %d: receipt %+v", w.ChainID, i, rc)
			}
		}
		res, err := s.Verify(ctx, w.ChainID, recs[len(recs)-1].Hash())
		if err != nil || !res.OK() {
			t.Fatalf("verify %s: %+v %v", w.ChainID, res, err)
		}
	}
}

// racing has several goroutines, each with its own view of the head,
// append to one chain: each sequence is won by exactly one, the losers get
// *chain.ConflictError, and the chain never forks.
func racing(t *testing.T, sub Subject) {
	s := sub.Open(t)
	ctx := context.Background()
	ids := NewIDs("00000005")
	c := ids.Next()
	const racers, rounds = 4, 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[int64]chain.Hash{}
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				tip, ok, err := s.Head(ctx, c)
				if err != nil {
					t.Error(err)
					return
				}
				seq, prev := int64(0), (*chain.Hash)(nil)
				if ok {
					seq, prev = tip.Sequence+1, &tip.Hash
				}
				op := ids.Next()
				r, err := chain.Seal(Draft(ids, c, &op, Bound()), seq, prev)
				if err != nil {
					t.Error(err)
					return
				}
				rc, err := s.Append(ctx, r)
				var ce *chain.ConflictError
				switch {
				case err == nil:
					mu.Lock()
					if h, dup := acked[rc.Sequence]; dup {
						t.Errorf("sequence %d acknowledged twice (%s and %s): the chain forked", rc.Sequence, h, rc.HeadHash)
					}
					acked[rc.Sequence] = rc.HeadHash
					mu.Unlock()
				case errors.As(err, &ce):
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	recs, err := s.Read(ctx, c, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(acked) {
		t.Fatalf("%d records in the chain, %d acknowledged", len(recs), len(acked))
	}
	for i, r := range recs {
		if acked[int64(i)] != r.Hash() {
			t.Fatalf("record %d is not the acknowledged one", i)
		}
	}
	if len(recs) == 0 {
		t.Fatal("no racer won a sequence")
	}
	res, err := s.Verify(ctx, c, recs[len(recs)-1].Hash())
	if err != nil || !res.OK() {
		t.Fatalf("verify: %+v %v", res, err)
	}
}
