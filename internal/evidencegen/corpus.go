package evidencegen

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
	"polc.dev/polc/snapshot"
)

// Expect is one expected finding: its code and, for record-level findings,
// its sequence (nil when the finding has none or it is not pinned).
type Expect struct {
	Code     chain.Code `json:"code"`
	Sequence *int64     `json:"sequence,omitempty"`
}

// Case is one corpus case: the files of testdata/evidence/<Name>/, the
// certverify arguments (file names relative to the case directory), and the
// expected exit code and findings (every finding, warnings included, as a
// multiset).
type Case struct {
	Name        string            `json:"-"`
	Description string            `json:"description"`
	Args        []string          `json:"args"`
	ExitCode    int               `json:"exit_code"`
	Findings    []Expect          `json:"findings"`
	Files       map[string][]byte `json:"-"`
}

// Keys of the corpus. The rogue key is trusted by nobody.
var (
	LogKey       = NewKey("log.polc.test", "log")
	CertifierKey = NewKey("certifier.polc.test", "certifier")
	RogueKey     = NewKey("rogue.polc.test", "rogue")
)

// TrustFile returns the standard trust file, with extra lines appended.
func TrustFile(extra ...string) []byte {
	s := "# fixture trust file\nlog " + LogKey.VKey + "\ncertifier " + CertifierKey.VKey + "\n"
	for _, e := range extra {
		s += e + "\n"
	}
	return []byte(s)
}

func seqp(n int64) *int64 { return &n }

func ex(code chain.Code, seq ...int64) Expect {
	if len(seq) > 0 {
		return Expect{Code: code, Sequence: seqp(seq[0])}
	}
	return Expect{Code: code}
}

// fixture is a chain with everything derived from it.
type fixture struct {
	p       *Producer
	snap    *snapshot.Snapshot
	snapRaw []byte
	recs    []*chain.Record
	jsonl   []byte
	head    chain.Hash
	cert    *certificate.Certificate
}

func (f *fixture) hashes() []chain.Hash {
	out := make([]chain.Hash, len(f.recs))
	for i, r := range f.recs {
		out[i] = r.Hash()
	}
	return out
}

func (f *fixture) checkpoint(size int, signers ...*Key) []byte {
	return checkpointOf(f.p.ChainID(), f.hashes(), size, signers...)
}

func checkpointOf(chainID string, hashes []chain.Hash, size int, signers ...*Key) []byte {
	t := chain.NewTree(hashes)
	root, err := t.Root(uint64(size))
	if err != nil {
		panic(err)
	}
	var ss []noteSigner
	for _, k := range signers {
		ss = append(ss, k.Signer)
	}
	b, err := chain.SignCheckpoint(chain.Checkpoint{ChainID: chainID, Size: uint64(size), Root: root}, ss...)
	if err != nil {
		panic(err)
	}
	return b
}

// standard builds the standard closed chain, its snapshot and certificate.
func standard(seed string, degraded bool) *fixture {
	snapIDs := NewIDs("snapshot")
	snap, raw := Snapshot("evidence-fixture", "1.4.0", snapIDs)
	p := NewProducer(seed, snap)
	p.Standard(degraded)
	closeRec := p.Close()
	f := &fixture{p: p, snap: snap, snapRaw: raw, recs: p.Records(), jsonl: p.JSONL(), head: closeRec.Hash()}
	open, _ := chain.ParseTime(p.Records()[0].CreatedAt)
	_ = open
	tc, _ := closeRec.Payload()
	closed := tc.(chain.TaskClosedPayload)
	openedAt, _ := chain.ParseTime(closed.OpenedAt)
	closedAt, _ := chain.ParseTime(closed.ClosedAt)
	iss := &certificate.Issuer{
		Store:     p.Store,
		Snapshots: certificate.MapSnapshots{snap.PolicyID + " " + snap.Version: raw},
		Now:       func() time.Time { return p.Clock.Now() },
		NewID:     p.IDs.Next,
	}
	c, err := iss.Mint(context.Background(), certificate.Boundary{
		TaskBoundaryID: p.Boundary, ChainID: p.ChainID(), PolicyID: snap.PolicyID, PolicyVersion: snap.Version,
		OpenedAt: openedAt, ClosedAt: closedAt,
	}, f.head)
	if err != nil {
		panic(err)
	}
	f.cert = c
	return f
}

func certJSON(c *certificate.Certificate) []byte {
	b, err := c.Marshal()
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

func signCert(c *certificate.Certificate, keys ...*Key) []byte {
	var ss []noteSigner
	for _, k := range keys {
		ss = append(ss, k.Signer)
	}
	b, err := certificate.Sign(c, ss...)
	if err != nil {
		panic(err)
	}
	return b
}

// jsonl renders records as a chain file.
func jsonl(recs []*chain.Record) []byte {
	var b []byte
	for _, r := range recs {
		b = append(r.AppendCanonical(b), '\n')
	}
	return b
}

// clone deep-copies records.
func clone(recs []*chain.Record) []*chain.Record {
	out := make([]*chain.Record, len(recs))
	for i, r := range recs {
		c := *r
		out[i] = &c
	}
	return out
}

// rechain recomputes payload digests and chain hashes from index from on,
// linking each record to its predecessor: what an attacker without any key
// can always do.
func rechain(recs []*chain.Record, from int) []*chain.Record {
	for i := from; i < len(recs); i++ {
		r := recs[i]
		r.Sequence = int64(i)
		if i == 0 {
			r.PreviousChainHash = nil
		} else {
			h := recs[i-1].ChainHash
			r.PreviousChainHash = &h
		}
		r.PayloadDigest = r.ComputePayloadDigest().String()
		r.ChainHash = r.ComputeChainHash().String()
	}
	return recs
}

func lines(b []byte) [][]byte { return bytes.SplitAfter(b, []byte("\n")) }

// mutateLine applies f to line i (0-based, without its newline).
func mutateLine(b []byte, i int, f func(string) string) []byte {
	ls := lines(b)
	s := strings.TrimSuffix(string(ls[i]), "\n")
	ls[i] = []byte(f(s) + "\n")
	return bytes.Join(ls, nil)
}

func replaceOnce(old, new string) func(string) string {
	return func(s string) string {
		if !strings.Contains(s, old) {
			panic(fmt.Sprintf("evidencegen: %q not in %q", old, s))
		}
		return strings.Replace(s, old, new, 1)
	}
}

// findRec returns the index of the n-th (0-based) record of type t.
func findRec(recs []*chain.Record, t chain.Type, n int) int {
	for i, r := range recs {
		if r.RecordType == t {
			if n == 0 {
				return i
			}
			n--
		}
	}
	panic("evidencegen: no such record")
}

// setPayload rewrites a record's payload JSON through f on the decoded map.
func setPayload(r *chain.Record, f func(m map[string]any)) {
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(r.PayloadJSON))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		panic(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	r.PayloadJSON = string(b) // encoding/json sorts keys; no floats are involved
}

func flipBase64Byte(s string, i int) string {
	b, _ := base64.StdEncoding.DecodeString(s)
	b[i] ^= 0x01
	return base64.StdEncoding.EncodeToString(b)
}

// Corpus returns every case. It is deterministic.
func Corpus() []Case {
	var cs []Case
	add := func(c Case) { cs = append(cs, c) }
	std := standard("standard", false)
	deg := standard("degraded", true)
	other := standard("other", false)
	n := len(std.recs)
	headHex := std.head.String()
	cp := std.checkpoint(n, LogKey)
	trust := TrustFile()
	anchored := func(desc string, data []byte, exit int, findings ...Expect) Case {
		return Case{Description: desc, Args: []string{"chain", "chain.jsonl", "--checkpoint", "checkpoint.note", "--trust", "trust.txt"},
			ExitCode: exit, Findings: findings,
			Files: map[string][]byte{"chain.jsonl": data, "checkpoint.note": cp, "trust.txt": trust}}
	}
	bare := func(desc string, data []byte, exit int, findings ...Expect) Case {
		return Case{Description: desc, Args: []string{"chain", "chain.jsonl"}, ExitCode: exit, Findings: findings,
			Files: map[string][]byte{"chain.jsonl": data}}
	}
	// withHead anchors a (re-chained) chain by its own head, so only the
	// semantic findings remain.
	withHead := func(desc string, recs []*chain.Record, exit int, findings ...Expect) Case {
		h := recs[len(recs)-1].ChainHash
		return Case{Description: desc, Args: []string{"chain", "chain.jsonl", "--expected-head", h}, ExitCode: exit, Findings: findings,
			Files: map[string][]byte{"chain.jsonl": jsonl(recs)}}
	}
	named := func(name string, c Case) { c.Name = name; add(c) }

	// --- valid ---------------------------------------------------------
	named("valid_chain_checkpoint", anchored("the standard chain with a checkpoint of its full size signed by the trusted log key", std.jsonl, 0))
	named("valid_chain_expected_head", Case{Description: "the standard chain anchored by --expected-head",
		Args: []string{"chain", "chain.jsonl", "--expected-head", headHex}, Files: map[string][]byte{"chain.jsonl": std.jsonl}})
	named("valid_chain_unanchored", bare("a valid chain with no anchor: consistent, but truncation could not be detected", std.jsonl, 3, ex(chain.CodeUnanchored)))
	certFiles := func(certName string, cert []byte) map[string][]byte {
		return map[string][]byte{certName: cert, "chain.jsonl": std.jsonl, "snapshot.json": std.snapRaw, "trust.txt": trust}
	}
	signed := signCert(std.cert, CertifierKey)
	named("valid_cert_signed", Case{Description: "a DSSE-signed certificate, its chain, snapshot and trust file",
		Args:  []string{"cert", "cert.dsse.json", "--chain", "chain.jsonl", "--snapshot", "snapshot.json", "--trust", "trust.txt"},
		Files: certFiles("cert.dsse.json", signed)})
	named("valid_cert_expected_head", Case{Description: "an unsigned certificate anchored by --expected-head",
		Args:  []string{"cert", "cert.json", "--chain", "chain.jsonl", "--snapshot", "snapshot.json", "--expected-head", headHex},
		Files: certFiles("cert.json", certJSON(std.cert))})
	named("valid_cert_unanchored", Case{Description: "an unsigned certificate without an expected head: consistent but unanchored",
		Args: []string{"cert", "cert.json", "--chain", "chain.jsonl", "--snapshot", "snapshot.json"}, ExitCode: 3,
		Findings: []Expect{ex(chain.CodeUnanchored)}, Files: certFiles("cert.json", certJSON(std.cert))})
	named("valid_cert_no_snapshot", Case{Description: "a signed certificate without --snapshot: the policy pin is reported unchecked",
		Args:     []string{"cert", "cert.dsse.json", "--chain", "chain.jsonl", "--trust", "trust.txt"},
		Findings: []Expect{ex(chain.CodePolicyUnchecked)}, Files: certFiles("cert.dsse.json", signed)})
	named("valid_cert_degraded", Case{Description: "a task with an exception: grade DEGRADED, exception_count 1",
		Args: []string{"cert", "cert.dsse.json", "--chain", "chain.jsonl", "--snapshot", "snapshot.json", "--trust", "trust.txt"},
		Files: map[string][]byte{"cert.dsse.json": signCert(deg.cert, CertifierKey), "chain.jsonl": deg.jsonl,
			"snapshot.json": deg.snapRaw, "trust.txt": trust}})
	named("valid_note_unknown_signature_first", anchored("a checkpoint whose first signature is by an unknown key (ignored) and second by the log key",
		std.jsonl, 0, ex(chain.CodeIgnoredSignature)))
	cs[len(cs)-1].Files["checkpoint.note"] = std.checkpoint(n, RogueKey, LogKey)
	open := clone(std.recs[:n-1])
	named("valid_open_chain", Case{Description: "a chain still open (no task_closed) with a checkpoint covering it: a warning only",
		Args: []string{"chain", "chain.jsonl", "--checkpoint", "checkpoint.note", "--trust", "trust.txt"}, Findings: []Expect{ex(chain.CodeTaskNotClosed)},
		Files: map[string][]byte{"chain.jsonl": jsonl(open), "checkpoint.note": std.checkpoint(n-1, LogKey), "trust.txt": trust}})
	headTime := std.recs[n-1].CreatedAt
	edge, _ := chain.ParseTime(headTime)
	named("valid_key_window_edge", anchored("the log key's valid_until is exactly the checkpoint's signed time: validity windows are closed intervals",
		std.jsonl, 0))
	cs[len(cs)-1].Files["trust.txt"] = []byte("log " + LogKey.VKey + " valid_from=2026-01-01T00:00:00Z valid_until=" + edge.Format(time.RFC3339Nano) + "\n")
	named("valid_inclusion", inclusionCase(std, 7, n, "a record, its tlog-proof and the trusted log key", nil, 0))
	named("valid_consistency_proof", consistencyCase(std, 9, n, "two checkpoints and a consistency proof between them", nil, 0))
	named("valid_consistency_chain", Case{Description: "two checkpoints checked against the chain itself",
		Args: []string{"consistency", "old.note", "new.note", "--chain", "chain.jsonl", "--trust", "trust.txt"},
		Files: map[string][]byte{"old.note": std.checkpoint(9, LogKey), "new.note": std.checkpoint(n, LogKey),
			"chain.jsonl": std.jsonl, "trust.txt": trust}})

	// --- records -------------------------------------------------------
	started := findRec(std.recs, chain.OperationStarted, 1)
	named("record_payload_edited", anchored("one byte of a payload changed, hashes kept", mutateLine(std.jsonl, started, replaceOnce(`\"tool_id\":\"bash\"`, `\"tool_id\":\"bast\"`)),
		1, ex(chain.CodeContentMismatch, int64(started))))
	named("record_chain_hash_edited", anchored("a stored chain_hash changed", mutateLine(std.jsonl, 4, func(s string) string {
		return s[:15] + "0000" + s[19:]
	}), 1, ex(chain.CodeContentMismatch, 4), ex(chain.CodeRootMismatch)))
	named("record_noncanonical_whitespace", bare("valid JSON, but a space after a colon", mutateLine(std.jsonl, 2, replaceOnce(`"sequence":2`, `"sequence": 2`)),
		1, ex(chain.CodeMalformedRecord)))
	named("record_member_order", bare("valid JSON, members out of canonical order", mutateLine(std.jsonl, 3, func(s string) string {
		a := strings.Index(s, `"chain_id"`)
		b := strings.Index(s, `"created_at"`)
		return "{" + s[a:b] + s[1:a] + s[b:]
	}), 1, ex(chain.CodeMalformedRecord)))
	named("record_unicode_escape", bare("a character written as a \\u escape", mutateLine(std.jsonl, 3, replaceOnce(`"hash_algorithm":"sha256-v1"`, `"hash_algorithm":"sha256\u002dv1"`)),
		1, ex(chain.CodeMalformedRecord)))
	named("record_duplicate_member", bare("a member repeated (parser-differential guard)", mutateLine(std.jsonl, 3, replaceOnce(`,"supersedes_record_id":null}`, `,"supersedes_record_id":null,"supersedes_record_id":null}`)),
		1, ex(chain.CodeMalformedRecord)))
	named("record_extra_member", bare("an unknown member", mutateLine(std.jsonl, 3, replaceOnce(`"sequence":3,`, `"sequence":3,"shadow":"x",`)),
		1, ex(chain.CodeMalformedRecord)))
	named("record_missing_member", bare("supersedes_record_id removed", mutateLine(std.jsonl, 3, replaceOnce(`,"supersedes_record_id":null`, ``)),
		1, ex(chain.CodeMalformedRecord)))
	named("record_uppercase_uuid", bare("a UUID in upper case", mutateLine(std.jsonl, 3, func(s string) string {
		i := strings.Index(s, `"record_id":"`) + len(`"record_id":"`)
		return s[:i] + strings.ToUpper(s[i:i+36]) + s[i+36:]
	}), 1, ex(chain.CodeMalformedRecord)))
	named("record_bad_time", bare("created_at with millisecond precision", mutateLine(std.jsonl, 3, func(s string) string {
		i := strings.Index(s, `"created_at":"`) + len(`"created_at":"`)
		return s[:i+23] + s[i+26:]
	}), 1, ex(chain.CodeMalformedRecord)))
	named("record_float_sequence", bare("sequence written as 3.0", mutateLine(std.jsonl, 3, replaceOnce(`"sequence":3,`, `"sequence":3.0,`)),
		1, ex(chain.CodeMalformedRecord)))
	named("record_unsupported_algorithm", anchored("hash_algorithm of one record changed to one this verifier does not implement: a chain has one algorithm", mutateLine(std.jsonl, 5, replaceOnce(`"sha256-v1"`, `"sha3-v2"`)),
		1, ex(chain.CodeAlgorithmChanged, 5), ex(chain.CodeUnsupportedAlgorithm, 5)))
	named("record_crlf", bare("CRLF line endings: one report for the run of bad lines", bytes.ReplaceAll(std.jsonl, []byte("\n"), []byte("\r\n")),
		1, ex(chain.CodeMalformedRecord), ex(chain.CodeTaskNotClosed)))
	named("record_blank_line", bare("an empty line inserted", mutateLine(std.jsonl, 6, func(s string) string { return "\n" + s }),
		1, ex(chain.CodeMalformedRecord)))
	named("record_trailing_garbage", bare("garbage after the last record", append(append([]byte(nil), std.jsonl...), "garbage\n"...),
		1, ex(chain.CodeMalformedRecord)))
	named("record_truncated_line", bare("a record cut in the middle of the file", mutateLine(std.jsonl, 6, func(s string) string { return s[:100] }),
		1, ex(chain.CodeMalformedRecord)))

	// payloads (re-chained: the attacker recomputes every hash)
	payloadCase := func(name, desc string, idx int, f func(r *chain.Record)) {
		recs := clone(std.recs)
		f(recs[idx])
		named(name, anchored(desc, jsonl(rechain(recs, idx)), 1, ex(chain.CodePayloadInvalid, int64(idx)), ex(chain.CodeRootMismatch)))
	}
	gate := findRec(std.recs, chain.GateEvaluated, 0)
	payloadCase("payload_extra_key", "a payload member the schema does not have", gate, func(r *chain.Record) {
		setPayload(r, func(m map[string]any) { m["raw_arguments"] = "rm -rf /" })
	})
	payloadCase("payload_missing_key", "a payload member removed", gate, func(r *chain.Record) {
		setPayload(r, func(m map[string]any) { delete(m, "reason_code") })
	})
	term := findRec(std.recs, chain.CallableCompleted, 0)
	payloadCase("payload_float", "duration_us written as a float", term, func(r *chain.Record) {
		r.PayloadJSON = strings.Replace(r.PayloadJSON, `"duration_us":1200`, `"duration_us":1200.5`, 1)
	})
	payloadCase("payload_noncanonical", "payload_json with whitespace", gate, func(r *chain.Record) {
		r.PayloadJSON = strings.Replace(r.PayloadJSON, `","`, `", "`, 1)
	})
	payloadCase("payload_bad_enum", "gate level outside the closed set", gate, func(r *chain.Record) {
		setPayload(r, func(m map[string]any) { m["level"] = "critical" })
	})
	payloadCase("payload_escalate_without_approver", "escalate without an approver_class", findRec(std.recs, chain.OperationDenied, 1), func(r *chain.Record) {
		setPayload(r, func(m map[string]any) { m["approver_class"] = nil })
	})

	// --- links and sequences ------------------------------------------
	named("link_broken", anchored("previous_chain_hash of one record replaced; its own hashes recomputed", func() []byte {
		recs := clone(std.recs)
		bad := Digest("elsewhere")
		recs[8].PreviousChainHash = &bad
		recs[8].ChainHash = recs[8].ComputeChainHash().String()
		return jsonl(recs)
	}(), 1, ex(chain.CodeBrokenLink, 8), ex(chain.CodeRootMismatch)))
	gate2 := findRec(std.recs, chain.GateEvaluated, 1)
	named("sequence_gap_deleted", anchored("a gate_evaluated record deleted from the middle", func() []byte {
		return jsonl(append(clone(std.recs[:gate2]), clone(std.recs[gate2+1:])...))
	}(), 1, ex(chain.CodeSequenceGap, int64(gate2+1)), ex(chain.CodeTruncated)))
	named("sequence_duplicate_replayed", anchored("a record repeated right after itself", func() []byte {
		recs := clone(std.recs)
		return jsonl(slices.Insert(recs, gate2+1, recs[gate2]))
	}(), 1, ex(chain.CodeSequenceDuplicate, int64(gate2)), ex(chain.CodeRootMismatch)))
	named("sequence_swapped", anchored("two gate records of one operation swapped", func() []byte {
		recs := clone(std.recs)
		recs[gate], recs[gate2] = recs[gate2], recs[gate]
		return jsonl(recs)
	}(), 1, ex(chain.CodeSequenceGap, int64(gate2)), ex(chain.CodeRootMismatch)))
	named("genesis_dropped", anchored("the first record deleted", jsonl(clone(std.recs[1:])), 1,
		ex(chain.CodeGenesisInvalid, 1), ex(chain.CodeTruncated)))
	named("genesis_with_previous", bare("the first record links to a previous hash (re-chained)", func() []byte {
		recs := clone(std.recs)
		h := Digest("before genesis")
		recs[0].PreviousChainHash = &h
		recs[0].ChainHash = recs[0].ComputeChainHash().String()
		return jsonl(rechain(recs, 1))
	}(), 1, ex(chain.CodeGenesisInvalid, 0)))
	named("chain_id_spliced", anchored("one record's chain_id changed, hashes recomputed downstream", func() []byte {
		recs := clone(std.recs)
		recs[10].ChainID = other.p.ChainID()
		return jsonl(rechain(recs, 10))
	}(), 1, ex(chain.CodeChainIDMismatch, 10), ex(chain.CodeRootMismatch)))
	named("duplicate_record_id", anchored("a record_id reused, hashes recomputed downstream", func() []byte {
		recs := clone(std.recs)
		recs[12].RecordID = recs[3].RecordID
		return jsonl(rechain(recs, 12))
	}(), 1, ex(chain.CodeDuplicateRecordID, 12), ex(chain.CodeRootMismatch)))
	named("torn_tail", anchored("the last line cut before its newline (an interrupted append)", std.jsonl[:len(std.jsonl)-40], 1,
		ex(chain.CodeTornTail), ex(chain.CodeTaskNotClosed), ex(chain.CodeTruncated)))
	named("truncated_anchored", anchored("the last three records deleted; the checkpoint covers them", jsonl(clone(std.recs[:n-3])), 1,
		ex(chain.CodeTaskNotClosed), ex(chain.CodeTruncated)))
	named("truncated_unanchored", bare("the last three records deleted and no anchor: the limit of a bare hash chain", jsonl(clone(std.recs[:n-3])), 3,
		ex(chain.CodeTaskNotClosed), ex(chain.CodeUnanchored)))
	rewritten := func() []*chain.Record {
		recs := clone(std.recs)
		setPayload(recs[term], func(m map[string]any) { m["result_digest"] = Digest("forged") })
		return rechain(recs, term)
	}()
	named("rewrite_checkpoint", anchored("a payload changed and the whole rest re-chained: caught by the checkpoint root", jsonl(rewritten), 1, ex(chain.CodeRootMismatch)))
	named("rewrite_expected_head", Case{Description: "the same rewrite, caught by --expected-head",
		Args: []string{"chain", "chain.jsonl", "--expected-head", headHex}, ExitCode: 1, Findings: []Expect{ex(chain.CodeHeadMismatch)},
		Files: map[string][]byte{"chain.jsonl": jsonl(rewritten)}})
	named("empty_chain", bare("an empty file", []byte{}, 1, ex(chain.CodeEmptyChain)))

	// --- operations and terminals (self-consistent chains) -------------
	semantic := func(name, desc string, build func(p *Producer), findings ...Expect) {
		p := NewProducer("semantic "+name, std.snap)
		build(p)
		named(name, withHead(desc, p.Records(), 1, findings...))
	}
	okTerm := chain.CallableCompletedPayload{DurationUS: 10, ResultDigest: Digest("r")}
	semantic("terminal_missing", "an operation_started without a terminal in a closed chain", func(p *Producer) {
		p.Run(Op{Tool: "a", Terminal: okTerm})
		p.Start("b")
		p.Close()
	}, ex(chain.CodeMissingTerminal, 4))
	semantic("terminal_duplicate", "two terminals for one operation", func(p *Producer) {
		op := p.Run(Op{Tool: "a", Terminal: okTerm})
		p.Append(op, chain.CallableFailedPayload{DurationUS: 3, ErrorClass: "E"})
		p.Close()
	}, ex(chain.CodeDuplicateTerminal, 3))
	semantic("terminal_ambiguous_then_completed", "external_result_ambiguous is a terminal: a later callable_completed duplicates it", func(p *Producer) {
		op := p.Run(Op{Tool: "a", Terminal: chain.ExternalResultAmbiguousPayload{DurationUS: 9, ReasonCode: "lost"}})
		p.Append(op, okTerm)
		p.Close()
	}, ex(chain.CodeDuplicateTerminal, 3))
	semantic("terminal_orphan", "a terminal for an operation that never started", func(p *Producer) {
		p.Run(Op{Tool: "a", Terminal: okTerm})
		p.Append(p.IDs.Next(), okTerm)
		p.Close()
	}, ex(chain.CodeOrphanTerminal, 3))
	semantic("event_after_terminal", "a gate result after the operation's terminal", func(p *Producer) {
		op := p.Run(Op{Tool: "a", Terminal: okTerm})
		p.Gate(op, Gate{"g", "hard", "allow"})
		p.Close()
	}, ex(chain.CodeEventAfterTerminal, 3))
	semantic("orphan_event", "a gate result for an operation that never started", func(p *Producer) {
		p.Run(Op{Tool: "a", Terminal: okTerm})
		p.Gate(p.IDs.Next(), Gate{"g", "hard", "allow"})
		p.Close()
	}, ex(chain.CodeOrphanEvent, 3))
	semantic("missing_policy_bound", "operation_started without its policy_bound", func(p *Producer) {
		op := p.IDs.Next()
		p.Append(op, chain.OperationStartedPayload{AttemptID: p.IDs.Next(), RequestDigest: Digest("q"), ToolID: "a"})
		p.Operations++
		p.Append(op, okTerm)
		p.Close()
	}, ex(chain.CodeMissingPolicyBound, 0))
	semantic("operation_started_twice", "a second operation_started for one operation", func(p *Producer) {
		op := p.Start("a")
		p.Append(op, chain.OperationStartedPayload{AttemptID: p.IDs.Next(), RequestDigest: Digest("q"), ToolID: "a"})
		p.Append(op, okTerm)
		p.Close()
	}, ex(chain.CodeOperationOrder, 2), ex(chain.CodeOperationCount, 4))
	semantic("gate_not_enforced", "a hard deny, yet the callable ran", func(p *Producer) {
		p.Run(Op{Tool: "bash", Gates: []Gate{{"gate-hard", "hard", "deny"}}, Terminal: okTerm})
		p.Close()
	}, ex(chain.CodeGateNotEnforced, 3))
	semantic("soft_deny_without_exception", "a soft deny without an exception, yet the callable ran", func(p *Producer) {
		p.Run(Op{Tool: "bash", Gates: []Gate{{"gate-soft", "soft", "deny"}}, Terminal: okTerm})
		p.Close()
	}, ex(chain.CodeGateNotEnforced, 3))
	semantic("operation_count_mismatch", "task_closed counts one operation too many", func(p *Producer) {
		p.Run(Op{Tool: "a", Terminal: okTerm})
		p.Operations++
		p.Close()
	}, ex(chain.CodeOperationCount, 3))
	semantic("policy_digest_mismatch", "a policy_bound pinning another snapshot digest", func(p *Producer) {
		p.Run(Op{Tool: "a", Terminal: okTerm})
		op := p.IDs.Next()
		p.Append(op, chain.PolicyBoundPayload{EffectBackendID: "inprocess/v1", EffectCapabilityDigest: Digest("caps"), PolicyDigest: Digest("other policy"), TaskBoundaryID: p.Boundary})
		p.Append(op, chain.OperationStartedPayload{AttemptID: p.IDs.Next(), RequestDigest: Digest("q"), ToolID: "b"})
		p.Operations++
		p.Append(op, okTerm)
		p.Close()
	}, ex(chain.CodePolicyMismatch, 3))
	semantic("boundary_mismatch", "task_closed closes another task boundary", func(p *Producer) {
		p.Run(Op{Tool: "a", Terminal: okTerm})
		p.Boundary = p.IDs.Next()
		p.Close()
	}, ex(chain.CodeBoundaryMismatch, 3))
	semantic("dangling_supersede", "record_superseded naming no earlier record", func(p *Producer) {
		p.Run(Op{Tool: "a", Terminal: okTerm})
		d := p.Draft("", chain.RecordSupersededPayload{ReasonCode: "correction"})
		ghost := p.IDs.Next()
		d.SupersedesRecordID = &ghost
		p.AppendDraft(d)
		p.Close()
	}, ex(chain.CodeDanglingSupersede, 3))
	afterClose := func() []*chain.Record {
		p := NewProducer("semantic after close", std.snap)
		p.Run(Op{Tool: "a", Terminal: okTerm})
		p.Close()
		recs := p.Records()
		extra := clone(recs[:2])
		extra[0].RecordID, extra[1].RecordID = p.IDs.Next(), p.IDs.Next()
		op := p.IDs.Next()
		extra[0].OperationID, extra[1].OperationID = &op, &op
		return rechain(append(clone(recs), extra...), len(recs))
	}()
	named("record_after_close", withHead("records appended after task_closed", afterClose, 1, ex(chain.CodeRecordAfterClose, 4)))
	named("task_not_closed_required", Case{Description: "an open chain with --require-closed",
		Args: []string{"chain", "chain.jsonl", "--expected-head", open[len(open)-1].ChainHash, "--require-closed"}, ExitCode: 1,
		Findings: []Expect{ex(chain.CodeTaskNotClosed)}, Files: map[string][]byte{"chain.jsonl": jsonl(open)}})
	named("head_mismatch", Case{Description: "the expected head is an earlier record's",
		Args: []string{"chain", "chain.jsonl", "--expected-head", std.recs[n-2].ChainHash}, ExitCode: 1,
		Findings: []Expect{ex(chain.CodeHeadMismatch)}, Files: map[string][]byte{"chain.jsonl": std.jsonl}})

	// --- certificates --------------------------------------------------
	certCase := func(name, desc string, cert []byte, files map[string][]byte, exit int, findings ...Expect) {
		f := certFiles("cert.dsse.json", cert)
		for k, v := range files {
			f[k] = v
		}
		named(name, Case{Description: desc, Args: []string{"cert", "cert.dsse.json", "--chain", "chain.jsonl", "--snapshot", "snapshot.json", "--trust", "trust.txt"},
			ExitCode: exit, Findings: findings, Files: f})
	}
	lie := *std.cert
	lie.GateSummary.HardDeny = 0
	certCase("cert_summary_lie", "a certifier-signed certificate whose gate_summary hides a hard deny", signCert(&lie, CertifierKey), nil, 1, ex(chain.CodeSummaryMismatch))
	gradeLie := *deg.cert
	gradeLie.ProcessGrade = certificate.GradeFull
	certCase("cert_grade_lie", "a DEGRADED task certified FULL", signCert(&gradeLie, CertifierKey),
		map[string][]byte{"chain.jsonl": deg.jsonl, "snapshot.json": deg.snapRaw}, 1, ex(chain.CodeGradeMismatch))
	certCase("cert_body_edited", "certificate_id changed inside a signed envelope", func() []byte {
		var env certificate.Envelope
		json.Unmarshal(signed, &env)
		p, _ := base64.StdEncoding.DecodeString(env.Payload)
		p = bytes.Replace(p, []byte(std.cert.CertificateID[:8]), []byte("00000000"), 1)
		env.Payload = base64.StdEncoding.EncodeToString(p)
		b, _ := json.Marshal(env)
		return b
	}(), nil, 1, ex(chain.CodeBadSignature))
	certCase("cert_unknown_key", "a certificate signed only by a key the trust file does not list", signCert(std.cert, RogueKey), nil, 1, ex(chain.CodeUnknownKey))
	certCase("cert_wrong_role", "a certificate signed by the log key", signCert(std.cert, LogKey), nil, 1, ex(chain.CodeKeyRoleMismatch))
	certCase("cert_key_expired", "the certifier key expired before minted_at", signed,
		map[string][]byte{"trust.txt": []byte("certifier " + CertifierKey.VKey + " valid_until=2026-02-01T00:00:00Z\n")}, 1, ex(chain.CodeKeyNotValid))
	backdated := *std.cert
	backdated.MintedAt = "2026-01-15T00:00:00.000000Z"
	certCase("cert_minted_before_close", "a certifier-signed certificate whose minted_at precedes the task's close (backdated into the key's window)",
		signCert(&backdated, CertifierKey), nil, 1, ex(chain.CodeMintedBeforeClose, int64(n-1)))
	certCase("cert_payload_type_swapped", "payloadType changed, signature kept (PAE binds the type)", bytes.Replace(signed, []byte("task-certificate+json"), []byte("checkpoint+json"), 1),
		nil, 1, ex(chain.CodeBadSignature), ex(chain.CodeMalformedCertificate))
	certCase("cert_replayed_other_chain", "a valid certificate presented with another task's chain", signed,
		map[string][]byte{"chain.jsonl": other.jsonl}, 1,
		ex(chain.CodeChainIDMismatch), ex(chain.CodeBoundaryMismatch, int64(len(other.recs)-1)), ex(chain.CodeHeadMismatch), ex(chain.CodeRootMismatch))
	otherSnap := func() []byte {
		s := *std.snap
		s.Description = "a different policy text"
		if err := s.Seal(); err != nil {
			panic(err)
		}
		b, _ := s.Marshal()
		return b
	}()
	certCase("cert_snapshot_other_digest", "a snapshot of the same id and version with other content", signed,
		map[string][]byte{"snapshot.json": otherSnap}, 1, ex(chain.CodePolicyMismatch))
	certCase("cert_snapshot_tampered", "the snapshot edited without recomputing its digest", signed,
		map[string][]byte{"snapshot.json": bytes.Replace(std.snapRaw, []byte("evidence fixture policy"), []byte("evidence fixture polic_"), 1)}, 1, ex(chain.CodePolicyMismatch))
	certCase("cert_chain_truncated", "the chain lost its last two records", signed,
		map[string][]byte{"chain.jsonl": jsonl(clone(std.recs[:n-2]))}, 1, ex(chain.CodeTaskNotClosed), ex(chain.CodeTruncated))
	certCase("cert_malformed", "the certificate is not canonical JSON", append([]byte(" "), certJSON(std.cert)...), nil, 1, ex(chain.CodeMalformedCertificate))
	headLie := *std.cert
	headLie.EvidenceChainHead = std.recs[n-2].ChainHash
	named("cert_head_lie", Case{Description: "an unsigned certificate naming an earlier record as head",
		Args: []string{"cert", "cert.json", "--chain", "chain.jsonl", "--snapshot", "snapshot.json", "--expected-head", headHex}, ExitCode: 1,
		Findings: []Expect{ex(chain.CodeHeadMismatch)}, Files: certFiles("cert.json", certJSON(&headLie))})
	named("cert_expected_head_wrong", Case{Description: "cert with an --expected-head that is not the chain's",
		Args: []string{"cert", "cert.json", "--chain", "chain.jsonl", "--snapshot", "snapshot.json", "--expected-head", Digest("nope")}, ExitCode: 1,
		Findings: []Expect{ex(chain.CodeHeadMismatch)}, Files: certFiles("cert.json", certJSON(std.cert))})

	// --- checkpoints, signatures, trust --------------------------------
	cpCase := func(name, desc string, note []byte, tr []byte, exit int, findings ...Expect) {
		c := anchored(desc, std.jsonl, exit, findings...)
		c.Files["checkpoint.note"] = note
		if tr != nil {
			c.Files["trust.txt"] = tr
		}
		named(name, c)
	}
	cpCase("checkpoint_bad_signature", "one bit of the log key's signature flipped", func() []byte {
		s := string(cp)
		i := strings.LastIndex(s, " ") + 1
		return []byte(s[:i] + flipBase64Byte(strings.TrimSuffix(s[i:], "\n"), 10) + "\n")
	}(), nil, 1, ex(chain.CodeBadSignature))
	cpCase("checkpoint_unknown_key", "a checkpoint signed only by an unknown key", std.checkpoint(n, RogueKey), nil, 1, ex(chain.CodeUnknownKey))
	cpCase("checkpoint_wrong_role", "a checkpoint signed by the certifier key", std.checkpoint(n, CertifierKey), nil, 1, ex(chain.CodeKeyRoleMismatch))
	cpCase("checkpoint_other_chain", "a valid checkpoint of another chain", other.checkpoint(n, LogKey), nil, 1, ex(chain.CodeChainIDMismatch))
	cpCase("checkpoint_extension_line", "a checkpoint body with an extension line", func() []byte {
		body := chain.Checkpoint{ChainID: std.p.ChainID(), Size: uint64(n), Root: mustRoot(std, n)}.Body() + "extra\n"
		b, _ := signNote(body, LogKey)
		return b
	}(), nil, 1, ex(chain.CodeMalformedCheckpoint))
	cpCase("checkpoint_key_expired", "the log key expired before the checkpoint's signed time", cp,
		[]byte("log "+LogKey.VKey+" valid_until=2026-03-01T09:00:00Z\n"), 1, ex(chain.CodeKeyNotValid))
	cpCase("checkpoint_key_not_yet_valid", "the log key becomes valid one microsecond after the signed time", cp,
		[]byte("log "+LogKey.VKey+" valid_from="+edge.Add(time.Microsecond).Format(time.RFC3339Nano)+"\n"), 1, ex(chain.CodeKeyNotValid))
	cpCase("checkpoint_equivocation", "a signed checkpoint of the same size with another root", func() []byte {
		b, _ := chain.SignCheckpoint(chain.Checkpoint{ChainID: std.p.ChainID(), Size: uint64(n), Root: chain.Hash(sha([]byte("fork")))}, LogKey.Signer)
		return b
	}(), nil, 1, ex(chain.CodeRootMismatch))
	cpCase("checkpoint_beyond_chain", "a signed checkpoint two records larger than the chain", func() []byte {
		hs := append(std.hashes(), chain.Hash(sha([]byte("x"))), chain.Hash(sha([]byte("y"))))
		return checkpointOf(std.p.ChainID(), hs, n+2, LogKey)
	}(), nil, 1, ex(chain.CodeTruncated))
	cpCase("checkpoint_prefix_only", "a valid checkpoint of an earlier size: the last records are not anchored", std.checkpoint(n-3, LogKey), nil, 3, ex(chain.CodeUnanchored))
	cpCase("checkpoint_second_trusted_signature_bad", "two trusted log keys: one signature valid, one corrupted (rejects the note)", func() []byte {
		second := NewKey("log2.polc.test", "log2")
		b := std.checkpoint(n, LogKey, second)
		s := strings.TrimSuffix(string(b), "\n")
		i := strings.LastIndex(s, " ") + 1
		return []byte(s[:i] + flipBase64Byte(s[i:], 12) + "\n")
	}(), TrustFile("log "+NewKey("log2.polc.test", "log2").VKey), 1, ex(chain.CodeBadSignature))
	named("trust_small_order_key", Case{Description: "a trust file listing a small-order Ed25519 key: refused, could not run",
		Args: []string{"chain", "chain.jsonl", "--checkpoint", "checkpoint.note", "--trust", "trust.txt"}, ExitCode: 2, Findings: []Expect{},
		Files: map[string][]byte{"chain.jsonl": std.jsonl, "checkpoint.note": cp, "trust.txt": []byte("log " + smallOrderVKey("weak.polc.test") + "\n")}})
	named("trust_unknown_role", Case{Description: "a trust file with an unknown role: could not run",
		Args: []string{"chain", "chain.jsonl", "--checkpoint", "checkpoint.note", "--trust", "trust.txt"}, ExitCode: 2, Findings: []Expect{},
		Files: map[string][]byte{"chain.jsonl": std.jsonl, "checkpoint.note": cp, "trust.txt": []byte("witness " + LogKey.VKey + "\n")}})

	// --- proofs --------------------------------------------------------
	named("inclusion_bit_flipped", inclusionCase(std, 7, n, "one bit of the audit path flipped", func(p *chain.InclusionProofFile) { p.Path[1][0] ^= 1 }, 1, ex(chain.CodeInclusionFailed, 7)))
	named("inclusion_index_plus_one", inclusionCase(std, 7, n, "the proof's index is the next record's", func(p *chain.InclusionProofFile) { p.Index++ }, 1, ex(chain.CodeInclusionFailed, 7)))
	named("inclusion_extra_hash", inclusionCase(std, 7, n, "a hash appended to the audit path", func(p *chain.InclusionProofFile) { p.Path = append(p.Path, p.Path[0]) }, 1, ex(chain.CodeInclusionFailed, 7)))
	named("inclusion_missing_hash", inclusionCase(std, 7, n, "the last hash of the audit path removed", func(p *chain.InclusionProofFile) { p.Path = p.Path[:len(p.Path)-1] }, 1, ex(chain.CodeInclusionFailed, 7)))
	named("inclusion_unanchored", func() Case {
		c := inclusionCase(std, 7, n, "a valid proof without a trust file", nil, 3, ex(chain.CodeUnanchored))
		c.Args = c.Args[:3]
		delete(c.Files, "trust.txt")
		return c
	}())
	named("inclusion_tampered_record", func() Case {
		c := inclusionCase(std, started, n, "the record's payload edited", nil, 1, ex(chain.CodeContentMismatch))
		c.Files["record.json"] = []byte(strings.Replace(string(c.Files["record.json"]), `\"tool_id\":\"bash\"`, `\"tool_id\":\"bast\"`, 1))
		return c
	}())
	named("consistency_bit_flipped", consistencyCase(std, 9, n, "one bit of the consistency proof flipped", func(p *chain.ConsistencyProofFile) { p.Path[0][3] ^= 1 }, 1, ex(chain.CodeConsistencyFailed)))
	named("consistency_truncated_proof", consistencyCase(std, 9, n, "the last hash of the consistency proof removed", func(p *chain.ConsistencyProofFile) { p.Path = p.Path[:len(p.Path)-1] }, 1, ex(chain.CodeConsistencyFailed)))
	named("consistency_swapped", func() Case {
		c := consistencyCase(std, 9, n, "old and new checkpoints swapped", nil, 1, ex(chain.CodeConsistencyFailed))
		c.Files["old.note"], c.Files["new.note"] = c.Files["new.note"], c.Files["old.note"]
		return c
	}())
	named("consistency_fork", func() Case {
		c := consistencyCase(std, 9, n, "the new checkpoint is of a chain rewritten before the old size (a fork)", nil, 1, ex(chain.CodeConsistencyFailed))
		forked := clone(std.recs)
		setPayload(forked[4], func(m map[string]any) { m["result_digest"] = Digest("fork") })
		rechain(forked, 4)
		hs := make([]chain.Hash, len(forked))
		for i, r := range forked {
			hs[i] = r.Hash()
		}
		c.Files["new.note"] = checkpointOf(std.p.ChainID(), hs, n, LogKey)
		return c
	}())
	named("consistency_malformed_proof", func() Case {
		c := consistencyCase(std, 9, n, "a proof line that is not base64", nil, 1, ex(chain.CodeMalformedProof))
		c.Files["consistency.proof"] = append(c.Files["consistency.proof"], "not base64!\n"...)
		return c
	}())
	named("consistency_chain_root_mismatch", Case{Description: "a signed new checkpoint whose root is not the chain's",
		Args: []string{"consistency", "old.note", "new.note", "--chain", "chain.jsonl", "--trust", "trust.txt"}, ExitCode: 1,
		Findings: []Expect{ex(chain.CodeConsistencyFailed)},
		Files: map[string][]byte{"old.note": std.checkpoint(9, LogKey), "new.note": other.checkpoint(n, LogKey),
			"chain.jsonl": std.jsonl, "trust.txt": trust}})
	cs[len(cs)-1].Files["new.note"] = func() []byte {
		b, _ := chain.SignCheckpoint(chain.Checkpoint{ChainID: std.p.ChainID(), Size: uint64(n), Root: chain.Hash(sha([]byte("other root")))}, LogKey.Signer)
		return b
	}()
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	return cs
}

func mustRoot(f *fixture, size int) chain.Hash {
	r, err := chain.NewTree(f.hashes()).Root(uint64(size))
	if err != nil {
		panic(err)
	}
	return r
}

func inclusionCase(f *fixture, idx, size int, desc string, mutate func(*chain.InclusionProofFile), exit int, findings ...Expect) Case {
	t := chain.NewTree(f.hashes())
	path, err := t.InclusionProof(uint64(idx), uint64(size))
	if err != nil {
		panic(err)
	}
	p := &chain.InclusionProofFile{Index: uint64(idx), Path: path, Checkpoint: f.checkpoint(size, LogKey)}
	if mutate != nil {
		mutate(p)
	}
	return Case{Description: desc, Args: []string{"inclusion", "record.json", "proof.tlog-proof", "--trust", "trust.txt"}, ExitCode: exit, Findings: findings,
		Files: map[string][]byte{"record.json": append(f.recs[idx].Canonical(), '\n'), "proof.tlog-proof": p.Format(), "trust.txt": TrustFile()}}
}

func consistencyCase(f *fixture, old, size int, desc string, mutate func(*chain.ConsistencyProofFile), exit int, findings ...Expect) Case {
	t := chain.NewTree(f.hashes())
	path, err := t.ConsistencyProof(uint64(old), uint64(size))
	if err != nil {
		panic(err)
	}
	p := &chain.ConsistencyProofFile{Old: uint64(old), New: uint64(size), Path: path}
	if mutate != nil {
		mutate(p)
	}
	return Case{Description: desc, Args: []string{"consistency", "old.note", "new.note", "--proof", "consistency.proof", "--trust", "trust.txt"}, ExitCode: exit, Findings: findings,
		Files: map[string][]byte{"old.note": f.checkpoint(old, LogKey), "new.note": f.checkpoint(size, LogKey), "consistency.proof": p.Format(), "trust.txt": TrustFile()}}
}

// WriteCorpus writes every case under dir (replacing dir's case
// directories), each with its files and a case.json.
func WriteCorpus(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, c := range Corpus() {
		files, err := CaseFiles(c)
		if err != nil {
			return err
		}
		for name, b := range files {
			p := filepath.Join(dir, c.Name, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// CaseFiles returns every file of a case directory, case.json included.
func CaseFiles(c Case) (map[string][]byte, error) {
	if c.Findings == nil {
		c.Findings = []Expect{}
	}
	meta, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{"case.json": append(meta, '\n')}
	for k, v := range c.Files {
		out[k] = v
	}
	return out, nil
}
