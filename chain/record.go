package chain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"polc.dev/polc/internal/jcs"
)

// HashAlgorithm is the only hash algorithm of this format version. It names
// both the payload digest and the chain hash construction described in the
// package documentation.
const HashAlgorithm = "sha256-v1"

// TimeFormat is the layout of every timestamp in evidence: UTC, exactly six
// fractional digits and a literal Z.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// MaxRecordBytes bounds one record line (without its newline). Longer lines
// are reported as malformed_record and never buffered whole.
const MaxRecordBytes = 1 << 20

// MaxSequence is the largest sequence number: the largest integer that RFC
// 8785 writes exactly (2^53-1).
const MaxSequence = 1<<53 - 1

// Type is a record_type: the closed ADR-0087 taxonomy.
type Type string

// The twelve record types.
const (
	PolicyBound             Type = "policy_bound"
	OperationStarted        Type = "operation_started"
	GateEvaluated           Type = "gate_evaluated"
	ExceptionGranted        Type = "exception_granted"
	OperationDenied         Type = "operation_denied"
	CallableCompleted       Type = "callable_completed"
	CallableFailed          Type = "callable_failed"
	OperationCancelled      Type = "operation_cancelled"
	OperationTimedOut       Type = "operation_timed_out"
	ExternalResultAmbiguous Type = "external_result_ambiguous"
	TaskClosed              Type = "task_closed"
	RecordSuperseded        Type = "record_superseded"
)

// Types lists every record type, in the order of the taxonomy.
var Types = []Type{
	PolicyBound, OperationStarted, GateEvaluated, ExceptionGranted,
	OperationDenied, CallableCompleted, CallableFailed, OperationCancelled,
	OperationTimedOut, ExternalResultAmbiguous, TaskClosed, RecordSuperseded,
}

// Valid reports whether t is one of the twelve record types.
func (t Type) Valid() bool { return schemaOf(t) != nil }

// Terminal reports whether t closes an operation. Exactly one terminal record
// follows each operation_started.
func (t Type) Terminal() bool {
	switch t {
	case OperationDenied, CallableCompleted, CallableFailed, OperationCancelled,
		OperationTimedOut, ExternalResultAmbiguous:
		return true
	}
	return false
}

// HasOperation reports whether records of type t carry an operation_id. Only
// task_closed and record_superseded have operation_id null.
func (t Type) HasOperation() bool { return t != TaskClosed && t != RecordSuperseded }

// Hash is a SHA-256 value: a payload digest, a chain hash or a Merkle node.
type Hash [32]byte

// String returns the 64 lowercase hex characters of h.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// MarshalJSON encodes h as a hex string.
func (h Hash) MarshalJSON() ([]byte, error) { return []byte(`"` + h.String() + `"`), nil }

// UnmarshalJSON decodes a 64-character lowercase hex string; h is written only
// when the whole input is valid.
func (h *Hash) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseHash(s)
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// ParseHash decodes 64 lowercase hex characters. Upper case is rejected: the
// wire format has exactly one spelling of each digest.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if !isHex64([]byte(s)) {
		return h, fmt.Errorf("chain: %q is not 64 lowercase hex characters", s)
	}
	hex.Decode(h[:], []byte(s))
	return h, nil
}

// Record is one ADR-0087 EvidenceRecord in its wire form. Strings hold the
// exact wire values (lowercase UUIDs, hex digests, times in TimeFormat);
// nullable members are pointers. Values returned by ParseRecord are valid and
// must be treated as immutable.
type Record struct {
	RecordID           string  `json:"record_id"`
	RecordType         Type    `json:"record_type"`
	ChainID            string  `json:"chain_id"`
	OperationID        *string `json:"operation_id"`
	Sequence           int64   `json:"sequence"`
	PolicyID           string  `json:"policy_id"`
	PolicyVersion      string  `json:"policy_version"`
	PayloadJSON        string  `json:"payload_json"`
	PayloadDigest      string  `json:"payload_digest"`
	PreviousChainHash  *string `json:"previous_chain_hash"`
	ChainHash          string  `json:"chain_hash"`
	SupersedesRecordID *string `json:"supersedes_record_id"`
	CreatedAt          string  `json:"created_at"`
	HashAlgorithm      string  `json:"hash_algorithm"`
}

// appendBody appends the canonical JSON of every member except chain_hash,
// without the opening brace: `"chain_id":…}`. The chain hash is the SHA-256
// of "{" followed by these bytes. Precondition: every string is valid UTF-8.
func (r *Record) appendBody(b []byte) []byte {
	str := func(key, v string) {
		b = append(b, '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		b = jcs.AppendString(b, v)
		b = append(b, ',')
	}
	nullable := func(key string, v *string) {
		if v == nil {
			b = append(b, '"')
			b = append(b, key...)
			b = append(b, `":null,`...)
			return
		}
		str(key, *v)
	}
	str("chain_id", r.ChainID)
	str("created_at", r.CreatedAt)
	str("hash_algorithm", r.HashAlgorithm)
	nullable("operation_id", r.OperationID)
	str("payload_digest", r.PayloadDigest)
	str("payload_json", r.PayloadJSON)
	str("policy_id", r.PolicyID)
	str("policy_version", r.PolicyVersion)
	nullable("previous_chain_hash", r.PreviousChainHash)
	str("record_id", r.RecordID)
	str("record_type", string(r.RecordType))
	b = append(b, `"sequence":`...)
	b = strconv.AppendInt(b, r.Sequence, 10)
	b = append(b, ',')
	nullable("supersedes_record_id", r.SupersedesRecordID)
	b[len(b)-1] = '}'
	return b
}

// HashInput returns the bytes chain_hash covers: the canonical JSON of every
// member except chain_hash.
func (r *Record) HashInput() []byte {
	return r.appendBody([]byte{'{'})
}

// ComputeChainHash returns the SHA-256 of HashInput.
func (r *Record) ComputeChainHash() Hash {
	return sha256.Sum256(r.HashInput())
}

// ComputePayloadDigest returns the SHA-256 of the UTF-8 bytes of payload_json.
func (r *Record) ComputePayloadDigest() Hash {
	return sha256.Sum256([]byte(r.PayloadJSON))
}

// AppendCanonical appends the record's line: its canonical JSON (RFC 8785),
// without the trailing newline. It does not validate or recompute anything.
func (r *Record) AppendCanonical(b []byte) []byte {
	b = append(b, `{"chain_hash":`...)
	b = jcs.AppendString(b, r.ChainHash)
	b = append(b, ',')
	return r.appendBody(b)
}

// Canonical returns the record's line (see AppendCanonical).
func (r *Record) Canonical() []byte { return r.AppendCanonical(nil) }

// Draft holds what a producer decides about a record; Seal derives the rest.
type Draft struct {
	RecordID           string
	ChainID            string
	OperationID        *string
	PolicyID           string
	PolicyVersion      string
	Payload            Payload
	SupersedesRecordID *string
	CreatedAt          time.Time
}

// Seal builds the record at the given sequence after prev (nil for the
// genesis record, sequence 0): it encodes the payload canonically, computes
// payload_digest and chain_hash, and validates the result exactly as
// ParseRecord would. The returned record's Canonical() is its line.
func Seal(d Draft, sequence int64, prev *Hash) (*Record, error) { return seal(d, sequence, prev, true) }

func seal(d Draft, sequence int64, prev *Hash, validate bool) (*Record, error) {
	r, err := prepare(d)
	if err != nil {
		return nil, err
	}
	_ = r.link(sequence, prev)
	if validate {
		if _, err := ParseRecord(r.Canonical()); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// prepare builds everything of a record that does not depend on its place
// in the chain: the canonical payload and its digest, and the draft's
// fields, checked as ParseRecord would check them (the payload by
// EncodePayload). Writer does this outside its lock.
func prepare(d Draft) (*Record, error) {
	if d.Payload == nil {
		return nil, errors.New("chain: draft has no payload")
	}
	payload, err := EncodePayload(d.Payload)
	if err != nil {
		return nil, err
	}
	r := &Record{
		RecordID:           d.RecordID,
		RecordType:         d.Payload.RecordType(),
		ChainID:            d.ChainID,
		OperationID:        d.OperationID,
		PolicyID:           d.PolicyID,
		PolicyVersion:      d.PolicyVersion,
		PayloadJSON:        payload,
		SupersedesRecordID: d.SupersedesRecordID,
		CreatedAt:          FormatTime(d.CreatedAt),
		HashAlgorithm:      HashAlgorithm,
	}
	pd := r.ComputePayloadDigest()
	r.PayloadDigest = pd.String()
	ok := IsUUID(r.RecordID) && IsUUID(r.ChainID) && IsUUID(r.PolicyID) && r.PolicyVersion != "" &&
		(r.OperationID == nil || IsUUID(*r.OperationID)) && (r.SupersedesRecordID == nil || IsUUID(*r.SupersedesRecordID)) &&
		(r.OperationID != nil) == r.RecordType.HasOperation()
	if !ok {
		return parseRecordError(r)
	}
	return r, nil
}

// link places a prepared record at sequence after prev, computes its chain
// hash and returns its canonical line (encoding the body once for both).
func (r *Record) link(sequence int64, prev *Hash) []byte {
	r.Sequence = sequence
	r.PreviousChainHash = nil
	if prev != nil {
		s := prev.String()
		r.PreviousChainHash = &s
	}
	body := r.appendBody(make([]byte, 0, 160+len(r.PayloadJSON)*2))
	h := sha256.New()
	h.Write([]byte{'{'})
	h.Write(body)
	var ch Hash
	h.Sum(ch[:0])
	r.ChainHash = ch.String()
	line := make([]byte, 0, len(`{"chain_hash":"",`)+64+len(body))
	line = append(line, `{"chain_hash":"`...)
	line = append(line, r.ChainHash...)
	line = append(line, `",`...)
	return append(line, body...)
}

// parseRecordError returns the error ParseRecord gives for r's canonical
// line (for a draft that failed the cheap checks).
func parseRecordError(r *Record) (*Record, error) {
	if _, err := ParseRecord(r.Canonical()); err != nil {
		return nil, err
	}
	return nil, errors.New("chain: invalid draft")
}

// FormatTime formats t in UTC with TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime parses a timestamp written in TimeFormat, rejecting any other
// spelling of the same instant.
func ParseTime(s string) (time.Time, error) {
	if !isTime([]byte(s)) {
		return time.Time{}, fmt.Errorf("chain: %q is not a YYYY-MM-DDTHH:MM:SS.ffffffZ timestamp", s)
	}
	return time.Parse(TimeFormat, s)
}

// RecordError is a record that fails its own checks (independent of the
// rest of the chain). Code is malformed_record, payload_invalid,
// unsupported_algorithm or content_mismatch.
type RecordError struct {
	Code     Code
	Msg      string
	Expected string
	Actual   string
}

func (e *RecordError) Error() string {
	s := string(e.Code) + ": " + e.Msg
	if e.Expected != "" || e.Actual != "" {
		s += fmt.Sprintf(" (expected %s, actual %s)", orDash(e.Expected), orDash(e.Actual))
	}
	return s
}

// ParseRecord parses one record line (without its newline) and checks
// everything that does not depend on other records: canonical form, members
// and value grammars, the payload schema, hash_algorithm and both hashes.
// It returns a *RecordError on failure.
func ParseRecord(b []byte) (*Record, error) {
	var l line
	sc := newScanner()
	if len(b) > MaxRecordBytes {
		return nil, &RecordError{Code: CodeMalformedRecord, Msg: fmt.Sprintf("record exceeds %d bytes", MaxRecordBytes)}
	}
	if e := sc.scan(b, &l); e != nil {
		return nil, &RecordError{Code: e.code, Msg: e.msg, Expected: e.expected, Actual: e.actual}
	}
	r := &Record{
		RecordID:      l.recordID.String(),
		RecordType:    l.typ,
		ChainID:       l.chainID.String(),
		Sequence:      l.seq,
		PolicyID:      l.policyID.String(),
		PolicyVersion: string(unescape(nil, l.policyVersion)),
		PayloadJSON:   string(l.payload),
		PayloadDigest: l.payloadDigest.String(),
		ChainHash:     l.storedHash.String(),
		CreatedAt:     string(l.createdAt),
		HashAlgorithm: HashAlgorithm,
	}
	if l.hasOp {
		s := l.opID.String()
		r.OperationID = &s
	}
	if l.hasPrev {
		s := l.prev.String()
		r.PreviousChainHash = &s
	}
	if l.hasSup {
		s := l.supersedes.String()
		r.SupersedesRecordID = &s
	}
	return r, nil
}

// Payload decodes the record's payload (see DecodePayload).
func (r *Record) Payload() (Payload, error) { return DecodePayload(r.RecordType, r.PayloadJSON) }

// Hash returns the record's chain_hash. Precondition: the record is valid.
func (r *Record) Hash() Hash {
	h, _ := ParseHash(r.ChainHash)
	return h
}
