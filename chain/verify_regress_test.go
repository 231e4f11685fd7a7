package chain_test

import (
	"bytes"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
)

// withAlgorithm rewrites every record's hash_algorithm (keeping its stored
// hashes), dropping the lines whose index is in drop.
func withAlgorithm(data []byte, alg string, drop ...int) []byte {
	var out []byte
	for i, l := range bytes.SplitAfter(data, []byte("\n")) {
		skip := false
		for _, d := range drop {
			skip = skip || d == i
		}
		if !skip {
			out = append(out, bytes.Replace(l, []byte(`"sha256-v1"`), []byte(`"`+alg+`"`), 1)...)
		}
	}
	return out
}

func hasError(fs []chain.Finding) bool {
	for _, f := range fs {
		if f.Severity == chain.SeverityError {
			return true
		}
	}
	return false
}

// TestUnsupportedAlgorithmKeepsLinkChecks: a record whose hash_algorithm
// this verifier does not implement cannot have its hashes checked, but its
// sequence and link can. A record deleted from such a chain is an error
// (exit 1), not hidden behind unsupported_algorithm (exit 2). It used to be
// hidden: the unsupported finding on the next record suppressed the gap.
func TestUnsupportedAlgorithmKeepsLinkChecks(t *testing.T) {
	s := evidencegen.NewSmall()
	// Intact but unsupported: only unsupported findings.
	res, err := chain.Verify(bytes.NewReader(withAlgorithm(s.Chain, "sha256-v2")), chain.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hasError(res.Findings) || res.First(chain.CodeUnsupportedAlgorithm) == nil {
		t.Fatalf("intact sha256-v2 chain: want only unsupported findings, got %v", res.Findings)
	}
	// The same chain with record 6 deleted.
	res, err = chain.Verify(bytes.NewReader(withAlgorithm(s.Chain, "sha256-v2", 6)), chain.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := res.First(chain.CodeSequenceGap)
	if f == nil || f.Sequence == nil || *f.Sequence != 7 {
		t.Fatalf("deleted record in an unsupported chain: want sequence_gap at 7, got %v", res.Findings)
	}
	n := 0
	for _, f := range res.Findings {
		if f.Severity == chain.SeverityError {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("want exactly one error (the gap), got %v", res.Findings)
	}
}

// TestMaxFindingsKeepsAnError: the exit code is decided by the most severe
// finding kept, so --max-findings must not drop the only error behind a
// full list of unsupported_algorithm findings (exit 2 instead of 1).
func TestMaxFindingsKeepsAnError(t *testing.T) {
	s := evidencegen.NewSmall()
	data := withAlgorithm(s.Chain, "sha256-v2")
	wrong := chain.Hash{1}
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{ExpectedHead: &wrong, MaxFindings: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 3 || res.First(chain.CodeHeadMismatch) == nil || res.OK() {
		t.Fatalf("want 3 findings including head_mismatch, got %v", res.Findings)
	}
	// 9 unsupported + head_mismatch, 3 kept.
	if res.Omitted != 7 {
		t.Fatalf("omitted %d, want 7", res.Omitted)
	}
	// A run of malformed lines that replaces an unsupported finding is
	// still reported once, with its length.
	first := bytes.IndexByte(data, '\n') + 1
	bad := append(append(append([]byte(nil), data[:first]...), "x\ny\n"...), data[first:]...)
	res, err = chain.Verify(bytes.NewReader(bad), chain.VerifyOptions{MaxFindings: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 1 || res.Findings[0].Code != chain.CodeMalformedRecord || !bytes.Contains([]byte(res.Findings[0].Message), []byte("and the 1 lines after it")) {
		t.Fatalf("want the malformed run kept in place of the unsupported finding, got %v", res.Findings)
	}
}

// exceptionChain is one operation with n exception_granted records for a
// soft gate and then n gate_evaluated records of that gate with decision.
func exceptionChain(n int, decision string) []byte {
	snap, _ := evidencegen.Snapshot("p", "1", evidencegen.NewIDs("snap"))
	p := evidencegen.NewProducer("exceptions", snap)
	op := p.Start("bash")
	for range n {
		p.Exception(op, "g")
	}
	for range n {
		p.Gate(op, evidencegen.Gate{ID: "g", Level: "soft", Decision: decision})
	}
	p.Append(op, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: evidencegen.Digest("r")})
	p.Close()
	return p.JSONL()
}

// BenchmarkVerifyManyExceptions: each soft deny used to scan every
// exception of its operation, so a chain of n exceptions and n soft denies
// took O(n²) (8 s for a 36 MB chain, minutes for a few hundred MB; at
// n = 10,000 2.2 s against 0.15 s for soft allows). The two sub-benchmarks
// verify chains of the same size and must cost about the same.
func BenchmarkVerifyManyExceptions(b *testing.B) {
	const n = 10000
	for _, decision := range []string{"allow", "deny"} {
		data := exceptionChain(n, decision)
		b.Run(decision, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{})
				if err != nil || !res.OK() {
					b.Fatalf("chain does not verify: %v %v", err, res.Findings)
				}
			}
		})
	}
}

// TestSoftDenyExcusedByAnyUnexpiredException: a soft deny is excused when
// some earlier exception for its gate was in force at the deny's time
// (issued_at <= created_at <= expires_at), whichever came last. An
// exception issued after the deny (a window not yet open) excuses nothing,
// and so does one beyond the few remembered per gate and operation.
func TestSoftDenyExcusedByAnyUnexpiredException(t *testing.T) {
	snap, _ := evidencegen.Snapshot("p", "1", evidencegen.NewIDs("snap"))
	type window struct{ issued, expires time.Duration } // from the exception's record time
	build := func(ws ...window) []byte {
		p := evidencegen.NewProducer("excused", snap)
		op := p.Start("bash")
		for _, w := range ws {
			now := p.Clock.T
			p.Append(op, chain.ExceptionGrantedPayload{
				Actor: "user:o", ExpiresAt: chain.FormatTime(now.Add(w.expires)), GateID: "g",
				GrantID: p.IDs.Next(), IssuedAt: chain.FormatTime(now.Add(w.issued)), ReasonCode: "x",
			})
		}
		p.Gate(op, evidencegen.Gate{ID: "g", Level: "soft", Decision: "deny"})
		p.Append(op, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: evidencegen.Digest("r")})
		p.Close()
		return p.JSONL()
	}
	valid, expired, future := window{-time.Hour, time.Hour}, window{-time.Hour, -time.Minute}, window{time.Hour, 2 * time.Hour}
	for _, tc := range []struct {
		name    string
		ws      []window
		excused bool
	}{
		{"unexpired then expired", []window{valid, expired}, true},
		{"expired then unexpired", []window{expired, valid}, true},
		{"only expired", []window{expired, {-time.Hour, -time.Second}}, false},
		{"issued after the deny", []window{future}, false},
		{"not yet issued, then in force", []window{future, valid}, true},
		{"in force, the eighth for its gate", []window{expired, expired, expired, expired, expired, expired, expired, valid}, true},
		{"in force, the ninth for its gate", []window{expired, expired, expired, expired, expired, expired, expired, expired, valid}, false},
	} {
		res, err := chain.Verify(bytes.NewReader(build(tc.ws...)), chain.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.First(chain.CodeGateNotEnforced) == nil; got != tc.excused {
			t.Errorf("%s: excused %v, want %v (%v)", tc.name, got, tc.excused, res.Findings)
		}
	}
}

// TestConsistencyNewSmallerThanOld: with --chain, two checkpoints that are
// both prefixes of the chain but given in the wrong order (the "new" one
// smaller) used to verify; with a proof they fail. A log whose newer
// checkpoint is smaller went back: consistency_failed either way.
func TestConsistencyNewSmallerThanOld(t *testing.T) {
	s := evidencegen.NewSmall()
	trust, err := chain.ParseTrust(s.Trust)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := chain.AuditConsistency(chain.ConsistencyInput{Old: s.OldCheckpt, New: s.Checkpoint, Log: bytes.NewReader(s.Chain), Trust: trust})
	if err != nil || !ok.Anchored || len(ok.Findings) != 0 {
		t.Fatalf("in order: %v %+v", err, ok)
	}
	for name, in := range map[string]chain.ConsistencyInput{
		"chain": {Old: s.Checkpoint, New: s.OldCheckpt, Log: bytes.NewReader(s.Chain), Trust: trust},
		"proof": {Old: s.Checkpoint, New: s.OldCheckpt, Proof: s.Consistency, Trust: trust},
	} {
		a, err := chain.AuditConsistency(in)
		if err != nil {
			t.Fatal(err)
		}
		if a.Anchored || a.New.Verified || len(a.Findings) != 1 || a.Findings[0].Code != chain.CodeConsistencyFailed {
			t.Errorf("%s: swapped checkpoints: anchored %v, findings %v; want one consistency_failed", name, a.Anchored, a.Findings)
		}
	}
}

// TestAlgorithmChangedFails: an attacker edits one record of an intact
// chain, keeps its stored hashes and names an algorithm this verifier does
// not implement, hoping for "could not run" (exit 2) instead of "failed".
// A chain has one algorithm: the changed record is an error (exit 1). A
// chain that uses another algorithm throughout stays unsupported only.
func TestAlgorithmChangedFails(t *testing.T) {
	s := evidencegen.NewSmall()
	lines := bytes.SplitAfter(s.Chain, []byte("\n"))
	lines[5] = bytes.Replace(bytes.Replace(lines[5], []byte(`"sha256-v1"`), []byte(`"sha256-v2"`), 1), []byte(`"bash"`), []byte(`"rmrf"`), 1)
	res, err := chain.Verify(bytes.NewReader(bytes.Join(lines, nil)), chain.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := res.First(chain.CodeAlgorithmChanged)
	if f == nil || f.Severity != chain.SeverityError || f.Sequence == nil || *f.Sequence != 5 || f.Expected != "sha256-v1" || f.Actual != "sha256-v2" {
		t.Fatalf("want algorithm_changed (error) at sequence 5, got %v", res.Findings)
	}
	res, err = chain.Verify(bytes.NewReader(withAlgorithm(s.Chain, "sha256-v2")), chain.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hasError(res.Findings) || res.First(chain.CodeAlgorithmChanged) != nil {
		t.Fatalf("a chain of one other algorithm: want only unsupported findings, got %v", res.Findings)
	}
}
