package chain_test

import (
	"bytes"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
	"polc.dev/polc/internal/jcs"
)

// oneByteMutations returns systematic one-byte mutations of b around its
// structure: at the first and last byte and at every line break, the byte
// deleted, doubled, and replaced by '\n', '\r', ' ' and '0'. They seed the
// parsers' fuzz targets with near misses of valid files.
func oneByteMutations(b []byte) [][]byte {
	var out [][]byte
	at := func(i int, repl ...byte) []byte {
		m := append([]byte(nil), b[:i]...)
		m = append(m, repl...)
		return append(m, b[i+1:]...)
	}
	for i, c := range b {
		if i != 0 && i != len(b)-1 && c != '\n' {
			continue
		}
		out = append(out, at(i), at(i, c, c))
		for _, r := range []byte{'\n', '\r', ' ', '0', 0xff, 0xc3} { // 0xff, 0xc3: not UTF-8
			if r != c {
				out = append(out, at(i, r))
			}
		}
	}
	return out
}

// FuzzParseInclusionProof checks that ParseInclusionProof never panics and
// that every file it accepts is exactly what Format writes for the parsed
// value: the format (C2SP tlog-proof, chain/proof.go) has one spelling per
// proof, every line ending in "\n" and the checkpoint kept verbatim, so a
// strict parser accepts nothing else.
func FuzzParseInclusionProof(f *testing.F) {
	s := evidencegen.NewSmall()
	withExtra, err := chain.ParseInclusionProof(s.Inclusion)
	if err != nil {
		f.Fatal(err)
	}
	withExtra.Extra = []byte("unauthenticated")
	seeds := [][]byte{s.Inclusion, withExtra.Format()}
	withExtra.Extra = []byte("hi") // base64 with padding
	noPath := &chain.InclusionProofFile{Index: 0, Checkpoint: s.Checkpoint}
	for _, seed := range append(seeds, withExtra.Format(), noPath.Format()) {
		f.Add(seed)
		for _, m := range oneByteMutations(seed) {
			f.Add(m)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := chain.ParseInclusionProof(data)
		if err != nil {
			return
		}
		if out := p.Format(); !bytes.Equal(out, data) {
			t.Fatalf("accepted proof does not re-encode identically:\n%q\n%q", data, out)
		}
	})
}

// FuzzParseConsistencyProof checks that ParseConsistencyProof never panics
// and that every file it accepts is exactly what Format writes for the
// parsed value (the format requires the final newline, so none is
// optional).
func FuzzParseConsistencyProof(f *testing.F) {
	s := evidencegen.NewSmall()
	empty := &chain.ConsistencyProofFile{Old: 3, New: 3}
	for _, seed := range [][]byte{s.Consistency, empty.Format()} {
		f.Add(seed)
		for _, m := range oneByteMutations(seed) {
			f.Add(m)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := chain.ParseConsistencyProof(data)
		if err != nil {
			return
		}
		if out := p.Format(); !bytes.Equal(out, data) {
			t.Fatalf("accepted proof does not re-encode identically:\n%q\n%q", data, out)
		}
	})
}

// FuzzParseCheckpoint checks ParseCheckpoint directly (FuzzOpenCheckpoint
// must get past the signed-note layer first): it never panics, and an
// accepted body is exactly Body() of the parsed checkpoint, the only
// spelling the format allows.
func FuzzParseCheckpoint(f *testing.F) {
	s := evidencegen.NewSmall()
	for _, note := range [][]byte{s.Checkpoint, s.OldCheckpt} {
		sn, err := chain.OpenCheckpoint(note, nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(sn.Text)
		for _, m := range oneByteMutations([]byte(sn.Text)) {
			f.Add(string(m))
		}
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := chain.ParseCheckpoint(text)
		if err != nil {
			return
		}
		if out := c.Body(); out != text {
			t.Fatalf("accepted checkpoint does not re-encode identically:\n%q\n%q", text, out)
		}
	})
}

// payloadSeeds returns one valid payload_json per record type and a few
// edge cases (nulls, an empty list, escapes, non-ASCII, the largest
// integer), as (index into chain.Types, payload) pairs.
func payloadSeeds(tb testing.TB) (idx []uint8, payloads []string) {
	hex := evidencegen.Digest("x")
	const id = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	const t0, t1 = "2026-01-02T03:04:05.000006Z", "2026-01-02T03:04:06.000000Z"
	str := func(s string) *string { return &s }
	for _, p := range []chain.Payload{
		chain.PolicyBoundPayload{EffectBackendID: "local", EffectCapabilityDigest: hex, PolicyDigest: hex, TaskBoundaryID: id},
		chain.OperationStartedPayload{Actor: str("user:ann"), AttemptID: id, ParentOperationID: str(id), RequestDigest: hex, RunID: str("run\n\u00e9\u001f"), ToolID: "bash"},
		chain.OperationStartedPayload{AttemptID: id, RequestDigest: hex, ToolID: "t\"\\"},
		chain.GateEvaluatedPayload{ArgumentsDigest: hex, Decision: "deny", GateID: "g", Level: "soft", ReasonCode: "r", ResultID: id, RuleIDs: []string{"a", "b"}},
		chain.GateEvaluatedPayload{ArgumentsDigest: hex, Decision: "allow", GateID: "g", Level: "advisory", ReasonCode: "r", ResultID: id, RuleIDs: []string{}},
		chain.ExceptionGrantedPayload{Actor: "user:ann", ExpiresAt: t1, GateID: "g", GrantID: id, IssuedAt: t0, ReasonCode: "r"},
		chain.OperationDeniedPayload{ApproverClass: str("owner"), Disposition: "escalate", GateID: str("g"), ReasonCode: "r"},
		chain.OperationDeniedPayload{Disposition: "deny", ReasonCode: "policy.no_gate_binding"},
		chain.CallableCompletedPayload{DurationUS: 9007199254740991, ResultDigest: hex},
		chain.CallableFailedPayload{DurationUS: 0, ErrorClass: "OSError"},
		chain.OperationCancelledPayload{DurationUS: 10},
		chain.OperationTimedOutPayload{DurationUS: 1000000},
		chain.ExternalResultAmbiguousPayload{DurationUS: 7, ReasonCode: "net"},
		chain.TaskClosedPayload{ClosedAt: t0, OpenedAt: t0, OperationCount: 2, TaskBoundaryID: id},
		chain.RecordSupersededPayload{ReasonCode: "typo"},
	} {
		js, err := chain.EncodePayload(p)
		if err != nil {
			tb.Fatalf("%T: %v", p, err)
		}
		idx = append(idx, typeIndex(p.RecordType()))
		payloads = append(payloads, js)
	}
	return idx, payloads
}

func typeIndex(t chain.Type) uint8 {
	for i, u := range chain.Types {
		if u == t {
			return uint8(i)
		}
	}
	panic("unknown type " + t)
}

// FuzzDecodePayload checks DecodePayload for every record type (the first
// argument picks chain.Types[n % 13]; 12 is a type that does not exist): it
// never panics, and an accepted payload_json is canonical JSON and is
// exactly what EncodePayload (the types' AppendCanonical plus the schema
// check) writes for the decoded value. The record format stores payloads
// only in canonical form and DecodePayload promises ParseRecord's checks, so
// an accepted payload has exactly one spelling.
func FuzzDecodePayload(f *testing.F) {
	idx, payloads := payloadSeeds(f)
	data, _ := smallChain()
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		r, err := chain.ParseRecord(line)
		if err != nil {
			f.Fatal(err)
		}
		idx, payloads = append(idx, typeIndex(r.RecordType)), append(payloads, r.PayloadJSON)
	}
	for i := range idx {
		f.Add(idx[i], payloads[i])
	}
	f.Add(uint8(len(chain.Types)), `{"reason_code":"r"}`)
	f.Add(typeIndex(chain.RecordSuperseded), `{"reason_code":"\u0072"}`)
	f.Add(typeIndex(chain.CallableFailed), `{"duration_us":1.0,"error_class":"e"}`)
	f.Add(typeIndex(chain.GateEvaluated), `{"arguments_digest":"`+evidencegen.Digest("x")+`","decision":"allow","gate_id":"g","level":"hard","reason_code":"r","result_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","rule_ids":null}`)
	f.Fuzz(func(t *testing.T, n uint8, payload string) {
		typ := chain.Type("no_such_type")
		if i := int(n) % (len(chain.Types) + 1); i < len(chain.Types) {
			typ = chain.Types[i]
		}
		p, err := chain.DecodePayload(typ, payload)
		if err != nil {
			return
		}
		if !typ.Valid() || p.RecordType() != typ {
			t.Fatalf("decoded a %s payload as %T", typ, p)
		}
		if !jcs.IsCanonical([]byte(payload)) {
			t.Fatalf("accepted a non-canonical payload: %q", payload)
		}
		out, err := chain.EncodePayload(p)
		if err != nil {
			t.Fatalf("accepted payload does not encode: %v\n%q", err, payload)
		}
		if out != payload {
			t.Fatalf("accepted payload does not re-encode identically:\n%q\n%q", payload, out)
		}
	})
}
