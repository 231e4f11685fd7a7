package chain

import (
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPrepareLinkMatchesRecord checks the writer's fast path against the
// record it describes: for drafts of every record type (policy versions
// that need escaping, null and set operation and supersedes ids), linked
// as genesis or after a random hash at random sequences, the line link
// returns is the record's Canonical() form, parses back to the same
// record, and its chain hash (prepared.hash, ChainHash) is the SHA-256 of
// the record's HashInput.
func TestPrepareLinkMatchesRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ids := &testIDs{}
	versions := []string{"1", "v2.0", `q"uote`, `back\slash`, "tab\tnl\n\x01", "é日本😀\u2028", strings.Repeat("long ", 40)}
	payloads := []func() Payload{
		boundPayload,
		func() Payload {
			return OperationStartedPayload{AttemptID: ids.next(), RequestDigest: testDigest, ToolID: `t"ool\`}
		},
		func() Payload {
			return GateEvaluatedPayload{ArgumentsDigest: testDigest, Decision: "deny", GateID: "g", Level: "hard", ReasonCode: "r\n", ResultID: ids.next(), RuleIDs: []string{"a", `"b"`}}
		},
		func() Payload { return OperationDeniedPayload{Disposition: "deny", ReasonCode: "ctl \x01\x1f"} },
		func() Payload { return CallableCompletedPayload{DurationUS: 12, ResultDigest: testDigest} },
		func() Payload { return CallableFailedPayload{DurationUS: 1 << 40, ErrorClass: "boom"} },
		func() Payload {
			return TaskClosedPayload{ClosedAt: "2026-01-02T03:04:05.000006Z", OpenedAt: "2026-01-02T03:04:05.000006Z", OperationCount: 3, TaskBoundaryID: testPolicy}
		},
		func() Payload { return RecordSupersededPayload{ReasonCode: "typo"} },
	}
	for i := range 2000 {
		p := payloads[i%len(payloads)]()
		d := Draft{RecordID: ids.next(), ChainID: testChain, PolicyID: testPolicy, PolicyVersion: versions[rng.IntN(len(versions))],
			Payload: p, CreatedAt: time.Unix(rng.Int64N(1e10), rng.Int64N(1e9))}
		if p.RecordType().HasOperation() {
			op := ids.next()
			d.OperationID = &op
		}
		if p.RecordType() == RecordSuperseded {
			sup := ids.next()
			d.SupersedesRecordID = &sup
		}
		pr, err := prepare(d)
		if err != nil {
			t.Fatalf("draft %d: %v", i, err)
		}
		seq, prev := int64(0), (*Hash)(nil)
		if rng.IntN(4) != 0 {
			seq = rng.Int64N(MaxSequence) + 1
			var h Hash
			for j := range h {
				h[j] = byte(rng.UintN(256))
			}
			prev = &h
		}
		line := pr.link(seq, prev)
		r := pr.r
		if got, want := string(line), string(r.Canonical()); got != want {
			t.Fatalf("draft %d: line is not the record's canonical form:\n got %s\nwant %s", i, got, want)
		}
		parsed, err := ParseRecord(line)
		if err != nil {
			t.Fatalf("draft %d: line does not parse: %v\n%s", i, err, line)
		}
		if !reflect.DeepEqual(parsed, r) {
			t.Fatalf("draft %d: parsed record differs:\n got %+v\nwant %+v", i, parsed, r)
		}
		if want := sha256.Sum256(r.HashInput()); pr.hash != want || r.Hash() != want {
			t.Fatalf("draft %d: chain hash %x (record %s), want %x", i, pr.hash, r.ChainHash, want)
		}
		if (prev == nil) != (r.PreviousChainHash == nil) || prev != nil && *r.PreviousChainHash != prev.String() {
			t.Fatalf("draft %d: previous_chain_hash %v after %v", i, r.PreviousChainHash, prev)
		}
		if r.Sequence != seq || r.PayloadDigest != r.ComputePayloadDigest().String() || r.CreatedAt != d.CreatedAt.UTC().Format(TimeFormat) {
			t.Fatalf("draft %d: sequence, payload digest or created_at wrong: %+v", i, r)
		}
	}
}

// TestPrepareRejectsBadDrafts checks that prepare reports a bad draft with
// the error ParseRecord gives for the record it would make.
func TestPrepareRejectsBadDrafts(t *testing.T) {
	op := "00000000-0000-4000-8000-000000000001"
	good := Draft{RecordID: "00000000-0000-4000-8000-000000000002", ChainID: testChain, OperationID: &op, PolicyID: testPolicy,
		PolicyVersion: "1", Payload: boundPayload(), CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
	upper := "0000000A-0000-4000-8000-000000000001"
	for name, tc := range map[string]struct {
		edit func(d *Draft)
		msg  string
	}{
		"no payload":       {func(d *Draft) { d.Payload = nil }, "no payload"},
		"bad record id":    {func(d *Draft) { d.RecordID = "x" }, "record_id"},
		"upper-case chain": {func(d *Draft) { d.ChainID = "AAAAAAAA-2222-4222-8222-222222222222" }, "chain_id"},
		"bad policy id":    {func(d *Draft) { d.PolicyID = "" }, "policy_id"},
		"empty version":    {func(d *Draft) { d.PolicyVersion = "" }, "policy_version"},
		"bad operation":    {func(d *Draft) { d.OperationID = &upper }, "operation_id"},
		"no operation":     {func(d *Draft) { d.OperationID = nil }, "operation_id"},
		"bad payload":      {func(d *Draft) { d.Payload = PolicyBoundPayload{EffectBackendID: "b"} }, "policy_bound payload"},
	} {
		d := good
		tc.edit(&d)
		_, err := prepare(d)
		t.Logf("%s: %v", name, err)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want one about %s", name, err, tc.msg)
		}
		var re *RecordError
		if name != "no payload" && name != "bad payload" && !errors.As(err, &re) {
			t.Errorf("%s: %T is not a *RecordError", name, err)
		}
	}
	if _, err := prepare(good); err != nil {
		t.Fatalf("good draft: %v", err)
	}
}

// TestCheckNewMatchesCheckLink checks that for records linked at the
// chain's tip, checkNew returns exactly what checkLink does: nil for a
// new record, and the same ConflictError for a duplicate record_id and a
// record after task_closed. (A duplicate chain_hash is a duplicate
// record_id or a SHA-256 collision: see ConflictDuplicateHash.)
func TestCheckNewMatchesCheckLink(t *testing.T) {
	ids := &testIDs{}
	st := newChainState()
	var firstID string
	linkNext := func(d Draft) *prepared {
		t.Helper()
		p, err := prepare(d)
		if err != nil {
			t.Fatal(err)
		}
		seq, prev := int64(0), (*Hash)(nil)
		if st.has {
			seq, prev = st.tip.Sequence+1, &st.tip.Hash
		}
		p.link(seq, prev)
		return p
	}
	same := func(what string, p *prepared, wantReason string) {
		t.Helper()
		a, b := st.checkLink(p.r), st.checkNew(p.r)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: checkLink %v, checkNew %v", what, a, b)
		}
		if got := conflictReason(b); got != wantReason {
			t.Fatalf("%s: conflict %q, want %q", what, got, wantReason)
		}
	}
	for i := range 5 {
		op := ids.next()
		p := linkNext(draft(ids, testChain, &op, boundPayload()))
		same("new record", p, "")
		st.commitHash(p.r, p.hash)
		if i == 0 {
			firstID = p.r.RecordID
		}
	}
	op := ids.next()
	d := draft(ids, testChain, &op, boundPayload())
	d.RecordID = firstID
	same("duplicate record_id", linkNext(d), ConflictDuplicateID)

	closed := linkNext(draft(ids, testChain, nil, TaskClosedPayload{ClosedAt: "2026-01-02T03:04:05.000006Z", OpenedAt: "2026-01-02T03:04:05.000006Z", OperationCount: 5, TaskBoundaryID: testPolicy}))
	same("task_closed", closed, "")
	st.commitHash(closed.r, closed.hash)
	same("after task_closed", linkNext(draft(ids, testChain, &op, boundPayload())), ConflictClosed)
}

// TestIsUUIDMatchesDecode checks the validating isUUID and isHex64 against
// the decoders on mutations of valid values (every byte position replaced
// by characters around the hex ranges, upper case included).
func TestIsUUIDMatchesDecode(t *testing.T) {
	subs := []byte{'0', '9', 'a', 'f', '/', ':', '`', 'g', 'A', 'F', '-', 0, 0xff}
	id := []byte("0123abcd-ef45-4678-9abc-def012345678")
	for i := range id {
		for _, c := range subs {
			b := append([]byte(nil), id...)
			b[i] = c
			if _, ok := decodeUUID(b); isUUID(b) != ok {
				t.Errorf("isUUID(%q) = %v, decodeUUID ok = %v", b, isUUID(b), ok)
			}
		}
	}
	for _, b := range [][]byte{nil, id[:35], append(append([]byte(nil), id...), '0')} {
		if isUUID(b) {
			t.Errorf("isUUID accepts %q", b)
		}
	}
	digest := []byte(strings.Repeat("0123456789abcdef", 4))
	for i := range digest {
		for _, c := range subs {
			b := append([]byte(nil), digest...)
			b[i] = c
			var h Hash
			if want := decodeHex(h[:], b); isHex64(b) != want {
				t.Errorf("isHex64(%q) = %v, decodeHex = %v", b, isHex64(b), want)
			}
		}
	}
	if isHex64(digest[:63]) || !isHex64(digest) {
		t.Error("isHex64 length")
	}
}

// TestRelinkKeepsEarlierStrings checks that linking a prepared record again
// (at another place) gives the new place's hashes and leaves the strings
// of the first link as they were: they view bytes written only once.
func TestRelinkKeepsEarlierStrings(t *testing.T) {
	ids := &testIDs{}
	op := ids.next()
	p, err := prepare(draft(ids, testChain, &op, boundPayload()))
	if err != nil {
		t.Fatal(err)
	}
	prev1, prev2 := Hash{1}, Hash{2}
	p.link(5, &prev1)
	chain1, prevStr1, payload := p.r.ChainHash, *p.r.PreviousChainHash, p.r.PayloadJSON
	want1 := p.r.ComputeChainHash().String()
	line := p.link(6, &prev2)
	if p.r.ChainHash == chain1 || *p.r.PreviousChainHash != prev2.String() || p.r.ChainHash != p.r.ComputeChainHash().String() {
		t.Fatalf("relinked record has chain hash %s and previous hash %s", p.r.ChainHash, *p.r.PreviousChainHash)
	}
	if string(line) != string(p.r.Canonical()) {
		t.Fatalf("relinked line is not the record's canonical form")
	}
	_ = append(line, '\n') // writes after the line, inside its buffer
	if chain1 != want1 || prevStr1 != prev1.String() || payload != p.r.PayloadJSON {
		t.Fatalf("first link's strings changed: %s %s %s", chain1, prevStr1, payload)
	}
}

// TestReleasedScratchLeavesRecordsIntact prepares and links records one
// after another, releasing each one's scratch buffer for the next to
// reuse: every record kept must still encode to the line it was linked
// with (its strings must not view the recycled buffer).
func TestReleasedScratchLeavesRecordsIntact(t *testing.T) {
	ids := &testIDs{}
	st := newChainState()
	type kept struct {
		r    *Record
		line string
		hash Hash
	}
	var all []kept
	for i := range 200 {
		op := ids.next()
		var pl Payload = OperationDeniedPayload{Disposition: "deny", ReasonCode: "r" + strings.Repeat("é\"", i)}
		p, err := prepare(draft(ids, testChain, &op, pl))
		if err != nil {
			t.Fatal(err)
		}
		seq, prev := int64(0), (*Hash)(nil)
		if st.has {
			seq, prev = st.tip.Sequence+1, &st.tip.Hash
		}
		line := string(p.link(seq, prev))
		st.commitHash(p.r, p.hash)
		p.release()
		all = append(all, kept{p.r, line, p.hash})
	}
	for i, k := range all {
		if got := string(k.r.Canonical()); got != k.line {
			t.Fatalf("record %d changed after its scratch was reused:\n got %s\nwant %s", i, got, k.line)
		}
		if k.r.ComputeChainHash() != k.hash || k.r.Hash() != k.hash {
			t.Fatalf("record %d: chain hash no longer matches", i)
		}
	}
}
