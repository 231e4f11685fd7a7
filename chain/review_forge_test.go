package chain_test

import (
	"bytes"
	"crypto/sha256"
	"runtime"
	"strings"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
)

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestVerifierDoesNotKeepGateIDs: the verifier's memory is O(open
// operations) plus a fixed amount per record; it must not grow with the
// size of the strings in the records. A hostile chain of exception_granted
// records with distinct 256 KiB gate ids on one open operation (and of
// blocking denies with such gate ids on open operations) used to keep every
// gate id: memory grew with the input's bytes (400 MB of chain, 500 MB of
// memory).
func TestVerifierDoesNotKeepGateIDs(t *testing.T) {
	const n, size = 48, 256 << 10
	snap, _ := evidencegen.Snapshot("p", "1", evidencegen.NewIDs("snap"))
	gate := func(i int) string { return string(rune('a'+i%26)) + strings.Repeat("g", size) + string(rune('a'+i/26)) }
	for _, tc := range []struct {
		name  string
		build func(p *evidencegen.Producer)
	}{
		{"exceptions", func(p *evidencegen.Producer) {
			op := p.Start("bash")
			for i := range n {
				p.Exception(op, gate(i))
			}
		}},
		{"blocking denies", func(p *evidencegen.Producer) {
			for i := range n {
				op := p.Start("bash")
				p.Gate(op, evidencegen.Gate{ID: gate(i), Level: "hard", Decision: "deny"})
			}
		}},
	} {
		p := evidencegen.NewProducer("gate ids", snap)
		tc.build(p)
		data := p.JSONL()
		lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		before := heapInUse()
		v := chain.NewVerifier(chain.VerifyOptions{})
		for _, l := range lines {
			v.Add(l)
		}
		grown := int64(heapInUse()) - int64(before)
		res := v.Finish()
		if !res.OK() {
			t.Fatalf("%s: chain does not verify: %v", tc.name, res.Findings)
		}
		if limit := int64(n * size / 8); grown > limit {
			t.Errorf("%s: the verifier holds %d KiB after %d records with %d KiB gate ids (limit %d KiB)", tc.name, grown>>10, len(lines), size>>10, limit>>10)
		}
		runtime.KeepAlive(data)
	}
}

// TestSoftDenyExceptionMatchesExactGate: exceptions are matched to a soft
// deny by its exact gate_id, also when gate ids differ only in escaped
// characters or share a long prefix.
func TestSoftDenyExceptionMatchesExactGate(t *testing.T) {
	snap, _ := evidencegen.Snapshot("p", "1", evidencegen.NewIDs("snap"))
	long := strings.Repeat("x", 4096)
	for _, tc := range []struct {
		exception, gate string
		excused         bool
	}{
		{"g", "g", true},
		{"g\n", "g\n", true},
		{"g\n", "g\t", false},
		{long + "a", long + "a", true},
		{long + "a", long + "b", false},
		{"g\u00e9", "g\u00e9", true},
		{"g\u00e9", "ge\u0301", false},
	} {
		p := evidencegen.NewProducer("exact", snap)
		op := p.Start("bash")
		p.Exception(op, tc.exception)
		p.Gate(op, evidencegen.Gate{ID: tc.gate, Level: "soft", Decision: "deny"})
		p.Append(op, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: evidencegen.Digest("r")})
		p.Close()
		res, err := chain.Verify(bytes.NewReader(p.JSONL()), chain.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.First(chain.CodeGateNotEnforced) == nil; got != tc.excused {
			t.Errorf("exception %.20q, gate %.20q: excused %v, want %v (%v)", tc.exception, tc.gate, got, tc.excused, res.Findings)
		}
	}
}

// TestFindingsTextIsBounded: a finding quotes values from the record
// (a record_type, a member name, a gate id), which can be nearly 1 MiB
// each. With the default 100 findings a hostile chain used to produce a
// 100 MB report (and hold it in memory); each finding's text is now
// bounded.
func TestFindingsTextIsBounded(t *testing.T) {
	s := evidencegen.NewSmall()
	first := s.Chain[:bytes.IndexByte(s.Chain, '\n')+1]
	junk := strings.Repeat("x", 512<<10)
	var data []byte
	data = append(data, first...)
	for range 20 {
		data = append(data, bytes.Replace(first, []byte(`"record_type":"policy_bound"`), []byte(`"record_type":"`+junk+`"`), 1)...)
	}
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || len(res.Findings) == 0 {
		t.Fatalf("want findings, got %v", res.Findings)
	}
	total := 0
	for _, f := range res.Findings {
		total += len(f.Message) + len(f.Expected) + len(f.Actual)
	}
	if total > 64<<10 {
		t.Fatalf("%d findings hold %d KiB of text", len(res.Findings), total>>10)
	}
}

// TestConsistencyEmptyTrees: a tree of size 0 has exactly one root, the
// empty one. With --chain a size-0 checkpoint with another root failed
// (the chain's root at size 0 is the empty root), but with --proof a new
// checkpoint of size 0 was consistent whatever root it claimed.
func TestConsistencyEmptyTrees(t *testing.T) {
	empty := chain.EmptyRoot()
	other := chain.Hash(sha256.Sum256([]byte("not empty")))
	for _, tc := range []struct {
		name         string
		size2        uint64
		root1, root2 chain.Hash
		ok           bool
	}{
		{"0 -> 0", 0, empty, empty, true},
		{"0 -> 0 (bogus new root)", 0, empty, other, false},
		{"0 (bogus old root) -> 0", 0, other, empty, false},
		{"0 -> 5", 5, empty, other, true},
	} {
		err := chain.VerifyConsistency(0, tc.size2, tc.root1, tc.root2, nil)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestUnreportedLinesAreNotExplained: explaining why a line is not a
// record (or why a payload breaks its schema) decodes it as general JSON,
// ~40 times slower than the scanner. It used to be done for every such
// line, reported or not: a chain of 1 MiB lines of small JSON objects
// verified at ~7 MB/s (minutes for a few GB). Only the findings that are
// kept are explained now.
func TestUnreportedLinesAreNotExplained(t *testing.T) {
	objects := "[" + strings.Repeat(`{"b":1,"a":2},`, 60000) + "{}]\n"
	s := evidencegen.NewSmall()
	first := s.Chain[:bytes.IndexByte(s.Chain, '\n')+1]
	// A run of bad lines, then bad lines between usable ones (each its
	// own run), then bad payloads.
	var data []byte
	data = append(data, first...)
	for range 40 {
		data = append(data, objects...)
	}
	for range 40 {
		data = append(data, objects...)
		data = append(data, first...)
	}
	badPayload := bytes.Replace(first, []byte(`{\"effect_backend_id\"`), []byte(`{\"x\":[`+strings.Repeat(`{\"b\":1,\"a\":2},`, 50000)+`{}],\"effect_backend_id\"`), 1)
	for range 40 {
		data = append(data, badPayload...)
	}
	before := chain.Explained()
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{MaxFindings: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 3 || res.Findings[0].Code != chain.CodeMalformedRecord || !strings.Contains(res.Findings[0].Message, "not a JSON object") {
		t.Fatalf("want the first bad line explained, got %v", res.Findings)
	}
	// 120 bad lines, 3 findings kept: each explanation of the ~800 KB
	// lines took ~0.1 s, so explaining them all cost 12 s.
	if n := chain.Explained() - before; n > int64(len(res.Findings)) {
		t.Errorf("verifying %d MB of bad lines explained %d of them; only the %d kept findings need it", len(data)>>20, n, len(res.Findings))
	}
	// ParseRecord still explains.
	if _, err := chain.ParseRecord([]byte(strings.TrimSuffix(objects, "\n"))); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("ParseRecord: %v", err)
	}
}
