package chain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

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

// Type is a record_type, from a closed set (docs/evidence.md "Records").
type Type string

// The thirteen record types.
const (
	PolicyBound             Type = "policy_bound"
	OperationStarted        Type = "operation_started"
	GateEvaluated           Type = "gate_evaluated"
	ExceptionGranted        Type = "exception_granted"
	ApprovalGranted         Type = "approval_granted"
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
	PolicyBound, OperationStarted, GateEvaluated, ExceptionGranted, ApprovalGranted,
	OperationDenied, CallableCompleted, CallableFailed, OperationCancelled,
	OperationTimedOut, ExternalResultAmbiguous, TaskClosed, RecordSuperseded,
}

// Valid reports whether t is one of the thirteen record types.
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

// Record is one evidence record in its wire form. Strings hold the
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
	b = r.appendHead(b)
	b = appendNullable(b, r.PreviousChainHash)
	b = r.appendMid(b)
	b = strconv.AppendInt(b, r.Sequence, 10)
	return r.appendTail(b)
}

// The body splits around the two members that depend on the record's place
// in the chain (previous_chain_hash and sequence), so that a writer can
// encode everything else before it takes the chain's lock.

// appendHead appends the members before previous_chain_hash's value.
func (r *Record) appendHead(b []byte) []byte {
	b = appendMember(b, "chain_id", r.ChainID)
	b = appendMember(b, "created_at", r.CreatedAt)
	b = appendMember(b, "hash_algorithm", r.HashAlgorithm)
	b = append(b, `"operation_id":`...)
	b = append(appendNullable(b, r.OperationID), ',')
	b = appendMember(b, "payload_digest", r.PayloadDigest)
	b = appendMember(b, "payload_json", r.PayloadJSON)
	b = appendMember(b, "policy_id", r.PolicyID)
	b = appendMember(b, "policy_version", r.PolicyVersion)
	return append(b, `"previous_chain_hash":`...)
}

// appendMid appends the members between previous_chain_hash's value and
// sequence's.
func (r *Record) appendMid(b []byte) []byte {
	b = append(b, ',')
	b = appendMember(b, "record_id", r.RecordID)
	b = appendMember(b, "record_type", string(r.RecordType))
	return append(b, `"sequence":`...)
}

// appendTail appends the members after sequence's value and the closing
// brace.
func (r *Record) appendTail(b []byte) []byte {
	b = append(b, `,"supersedes_record_id":`...)
	return append(appendNullable(b, r.SupersedesRecordID), '}')
}

func appendMember(b []byte, key, v string) []byte {
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	b = jcs.AppendString(b, v)
	return append(b, ',')
}

func appendNullable(b []byte, v *string) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return jcs.AppendString(b, *v)
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
	p, err := prepare(d)
	if err != nil {
		return nil, err
	}
	p.link(sequence, prev)
	p.release()
	r := p.r
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
//
// It makes two objects: the prepared record, which embeds its Record, and
// one byte buffer holding the strings it derives (payload_json,
// payload_digest, created_at) and room for the two hashes link derives.
// The strings are views of the buffer (unsafe.String): their bytes are
// written once, before the views are made, and never again. The line is
// encoded in a pooled scratch buffer, sized for link to finish it in
// place, which release returns: the line is garbage once the store has
// copied it, and it was most of each record's allocation.
func prepare(d Draft) (*prepared, error) {
	if d.Payload == nil {
		return nil, errors.New("chain: draft has no payload")
	}
	bp := encBufs.Get().(*[]byte)
	b, err := appendPayload((*bp)[:0], d.Payload)
	if err != nil {
		encBufs.Put(bp)
		return nil, err
	}
	n := len(b)
	pd := sha256.Sum256(b)
	b = hex.AppendEncode(b, pd[:])
	b = appendTime(b, d.CreatedAt)
	ns := len(b)
	p := &prepared{}
	r := &p.rec
	p.r = r
	*r = Record{
		RecordID:           d.RecordID,
		RecordType:         d.Payload.RecordType(),
		ChainID:            d.ChainID,
		OperationID:        d.OperationID,
		PolicyID:           d.PolicyID,
		PolicyVersion:      d.PolicyVersion,
		SupersedesRecordID: d.SupersedesRecordID,
		HashAlgorithm:      HashAlgorithm,
	}
	// created_at is checked too: appendTime writes years 0 and beyond
	// 9999, which the format has no spelling for; and policy_version must
	// be valid UTF-8, which appendMember does not check. The file store
	// writes what link returns without parsing it back, so anything let
	// through here would be acknowledged and then fail every read.
	ok := IsUUID(r.RecordID) && IsUUID(r.ChainID) && IsUUID(r.PolicyID) && r.PolicyVersion != "" &&
		utf8.ValidString(r.PolicyVersion) && isTime(b[n+64:ns]) &&
		(r.OperationID == nil || IsUUID(*r.OperationID)) && (r.SupersedesRecordID == nil || IsUUID(*r.SupersedesRecordID)) &&
		(r.OperationID != nil) == r.RecordType.HasOperation()
	if !ok {
		strs := string(b)
		r.PayloadJSON, r.PayloadDigest, r.CreatedAt = strs[:n], strs[n:n+64], strs[n+64:]
		encBufs.Put(bp)
		_, err := parseRecordError(r)
		return nil, err
	}
	// The buffer's layout is built in the scratch buffer and copied: the
	// strings, the hashes' room, and the line up to previous_chain_hash's
	// value. Meanwhile the record's strings view the scratch buffer
	// (appends may move it; the views keep what they view).
	b = append(b, hashesRoom[:]...)
	lineAt := len(b)
	b = append(b, linePlaceholder...)
	r.PayloadJSON = unsafe.String(&b[0], n)
	r.PayloadDigest = unsafe.String(&b[n], 64)
	r.CreatedAt = unsafe.String(&b[n+64], ns-n-64)
	b = r.appendCheckedHead(b)
	// The line must fit MaxRecordBytes wherever it is linked. Its length
	// depends on the sequence and the previous hash, which are not known
	// yet: the bound is taken for the longest link (a previous hash and
	// the widest sequence), so a record within linkedLen bytes of the
	// limit is refused even where ParseRecord would still read it.
	if len(b)-lineAt+r.linkedLen() > MaxRecordBytes {
		encBufs.Put(bp)
		return nil, &RecordError{Code: CodeMalformedRecord, Msg: fmt.Sprintf("record exceeds %d bytes", MaxRecordBytes)}
	}
	b = slices.Grow(b, r.linkedLen())
	buf := make([]byte, lineAt)
	copy(buf, b)
	r.PayloadJSON = unsafe.String(&buf[0], n)
	r.PayloadDigest = unsafe.String(&buf[n], 64)
	r.CreatedAt = unsafe.String(&buf[n+64], ns-n-64)
	p.hashes = (*[128]byte)(buf[ns:lineAt])
	p.line = b[lineAt:]
	*bp = b
	p.scratch = bp
	// Most of the chain hash's input is known now: hash it outside the
	// chain's lock, so that link only hashes the few members after it.
	p.head = headHashes.Get().(hash.Hash)
	p.head.Write(openBrace)
	p.head.Write(p.line[linePrefix:])
	return p, nil
}

// release returns the line's scratch buffer; the prepared record's line
// (what link returned) must not be used, nor link called, after it.
func (p *prepared) release() {
	if p.scratch == nil {
		return
	}
	if cap(*p.scratch) <= 4<<10 {
		*p.scratch = (*p.scratch)[:0]
		encBufs.Put(p.scratch)
	}
	p.scratch, p.line = nil, nil
}

// openBrace starts the chain hash's input (see appendBody).
var openBrace = []byte{'{'}

// headHashes recycles the SHA-256 states of prepared records.
var headHashes = sync.Pool{New: func() any { return sha256.New() }}

// hashesRoom is the room for the previous and the chain hash in hex.
var hashesRoom [128]byte

// appendCheckedHead is appendHead for a record whose ids, digest and time
// are known to be valid (prepare checked them): only payload_json and
// policy_version can need escaping.
func (r *Record) appendCheckedHead(b []byte) []byte {
	b = appendPlainMember(b, `"chain_id":"`, r.ChainID)
	b = appendPlainMember(b, `"created_at":"`, r.CreatedAt)
	b = appendPlainMember(b, `"hash_algorithm":"`, r.HashAlgorithm)
	if r.OperationID == nil {
		b = append(b, `"operation_id":null,`...)
	} else {
		b = appendPlainMember(b, `"operation_id":"`, *r.OperationID)
	}
	b = appendPlainMember(b, `"payload_digest":"`, r.PayloadDigest)
	b = appendMember(b, "payload_json", r.PayloadJSON)
	b = appendPlainMember(b, `"policy_id":"`, r.PolicyID)
	b = appendMember(b, "policy_version", r.PolicyVersion)
	return append(b, `"previous_chain_hash":`...)
}

// appendPlainMember appends key (through the opening quote of the value),
// v, which needs no escaping, and the closing quote and comma.
func appendPlainMember(b []byte, key, v string) []byte {
	b = append(b, key...)
	b = append(b, v...)
	return append(b, '"', ',')
}

// linkedLen bounds what link appends to a prepared line.
func (r *Record) linkedLen() int {
	n := len(`"<64 hex>"`) - len(`<64 hex>`) + 64 +
		len(`,"record_id":"`) + len(r.RecordID) + len(`","record_type":"`) + len(r.RecordType) + len(`","sequence":`) +
		len("-9223372036854775808") + len(`,"supersedes_record_id":`) + len(`}`)
	if r.SupersedesRecordID != nil {
		return n + 2 + len(*r.SupersedesRecordID)
	}
	return n + len("null")
}

// appendPayload appends p's canonical JSON after checking it against its
// record type's schema (EncodePayload without the string).
func appendPayload(b []byte, p Payload) ([]byte, error) {
	start := len(b)
	b, err := p.AppendCanonical(b)
	if err != nil {
		return nil, err
	}
	var spans [maxFields]span
	if err := validatePayload(p.RecordType(), b[start:], &spans); err != nil {
		return nil, err
	}
	return b, nil
}

// linePrefix is the length of `{"chain_hash":"<64 hex>",`;
// linePlaceholder is that member with zeros for the hash, which link
// overwrites.
const (
	hashAt          = len(`{"chain_hash":"`)
	linePrefix      = hashAt + 64 + len(`",`)
	linePlaceholder = `{"chain_hash":"0000000000000000000000000000000000000000000000000000000000000000",`
)

// linePlaceholder is exactly linePrefix bytes long.
var (
	_ [linePrefix - len(linePlaceholder)]byte
	_ [len(linePlaceholder) - linePrefix]byte
)

// prepared is a record whose place in the chain is not yet known, its
// canonical line encoded up to previous_chain_hash's value.
type prepared struct {
	scratch *[]byte    // the pooled buffer line is in (nil once released)
	head    hash.Hash  // SHA-256 of "{" and the line after its chain_hash member, as prepared (nil once linked)
	r       *Record    // &rec
	line    []byte     // linePrefix placeholder bytes, then the head; link appends the rest
	hashes  *[128]byte // room in line's buffer for the previous and the chain hash in hex
	linked  bool       // hashes is written and viewed by rec's strings
	hash    Hash       // the chain hash, once linked
	rec     Record
	prev    string // *r.PreviousChainHash, once linked after a record
}

// link places a prepared record at sequence after prev, computes its chain
// hash and returns its canonical line. It is all a writer does under the
// chain's lock: a few appends, one SHA-256 and a hex encoding. The
// record's ids and type were checked by prepare and need no escaping.
func (p *prepared) link(sequence int64, prev *Hash) []byte {
	if p.scratch == nil {
		panic("chain: link of a released record") // an internal misuse, never input
	}
	r := p.r
	r.Sequence = sequence
	r.PreviousChainHash = nil
	line := p.line
	var hx [128]byte // previous hash and chain hash, in hex
	if prev != nil {
		hex.Encode(hx[:64], prev[:])
		line = append(line, '"')
		line = append(line, hx[:64]...)
		line = append(line, '"')
	} else {
		line = append(line, "null"...)
	}
	line = append(line, `,"record_id":"`...)
	line = append(line, r.RecordID...)
	line = append(line, `","record_type":"`...)
	line = append(line, r.RecordType...)
	line = append(line, `","sequence":`...)
	line = strconv.AppendInt(line, sequence, 10)
	line = append(line, `,"supersedes_record_id":`...)
	if r.SupersedesRecordID == nil {
		line = append(line, "null}"...)
	} else {
		line = append(line, '"')
		line = append(line, *r.SupersedesRecordID...)
		line = append(line, '"', '}')
	}
	// The chain hash covers "{" and the line after the chain_hash
	// member. prepare hashed what it encoded; a second link hashes it
	// all, the member's comma standing in for the brace meanwhile.
	var ch Hash
	if p.head != nil {
		p.head.Write(line[len(p.line):])
		p.head.Sum(p.hash[:0])
		ch = p.hash
		p.head.Reset()
		headHashes.Put(p.head)
		p.head = nil
	} else {
		line[linePrefix-1] = '{'
		ch = sha256.Sum256(line[linePrefix-1:])
	}
	hex.Encode(line[hashAt:hashAt+64], ch[:])
	line[hashAt+64], line[hashAt+65] = '"', ','
	copy(hx[64:], line[hashAt:hashAt+64])
	var s string
	if !p.linked {
		// The first link writes the hashes' room once and views it.
		p.linked = true
		*p.hashes = hx
		s = unsafe.String(&p.hashes[0], len(hx))
	} else {
		s = string(hx[:])
	}
	if prev != nil {
		p.prev = s[:64]
		r.PreviousChainHash = &p.prev
	}
	r.ChainHash = s[64:]
	p.hash = ch
	return line
}

// parseRecordError returns the error ParseRecord gives for r's canonical
// line (for a draft that failed the cheap checks).
func parseRecordError(r *Record) (*Record, error) {
	// A placeholder hash (the record is not linked yet) so that the
	// parser reports the field that is really wrong.
	c := *r
	c.ChainHash = Hash{}.String()
	if _, err := ParseRecord(c.Canonical()); err != nil {
		return nil, err
	}
	return nil, errors.New("chain: invalid draft")
}

// FormatTime formats t in UTC with TimeFormat.
func FormatTime(t time.Time) string {
	var b [32]byte
	return string(appendTime(b[:0], t))
}

// appendTime appends t in UTC with TimeFormat, exactly as
// t.UTC().AppendFormat(b, TimeFormat) does: years 0 to 9999 are written
// here (four digits, microseconds truncated), any other year by the time
// package. Timestamps come in runs within one second (every record and
// request of a busy second), so the text up to the fraction is kept for
// the last second written and only the microseconds are computed again.
func appendTime(b []byte, t time.Time) []byte {
	const (
		minSec = -62167219200 // 0000-01-01T00:00:00Z
		maxSec = 253402300799 // 9999-12-31T23:59:59Z
	)
	secs := t.Unix()
	if secs < minSec || secs > maxSec {
		return t.UTC().AppendFormat(b, TimeFormat)
	}
	s := lastSecond.Load()
	if s == nil || s.unix != secs {
		s = &secondText{unix: secs}
		days, sod := (secs-minSec)/86400, int((secs-minSec)%86400) // days since 0000-01-01, >= 0
		year, month, day := civil(days)
		hour, minute, sec := sod/3600, sod/60%60, sod%60
		s.text = [20]byte{
			byte('0' + year/1000), byte('0' + year/100%10), byte('0' + year/10%10), byte('0' + year%10), '-',
			byte('0' + month/10), byte('0' + month%10), '-',
			byte('0' + day/10), byte('0' + day%10), 'T',
			byte('0' + hour/10), byte('0' + hour%10), ':',
			byte('0' + minute/10), byte('0' + minute%10), ':',
			byte('0' + sec/10), byte('0' + sec%10), '.'}
		lastSecond.Store(s)
	}
	us := t.Nanosecond() / 1000
	return append(append(b, s.text[:]...),
		byte('0'+us/100000), byte('0'+us/10000%10), byte('0'+us/1000%10),
		byte('0'+us/100%10), byte('0'+us/10%10), byte('0'+us%10), 'Z')
}

// secondText is the text of one second up to its fraction
// ("2006-01-02T15:04:05.").
type secondText struct {
	unix int64
	text [20]byte
}

// lastSecond is the last second appendTime wrote; it is replaced whole,
// never written in place.
var lastSecond atomic.Pointer[secondText]

// civil returns the proleptic Gregorian date days after 0000-01-01 (days
// >= 0), by Howard Hinnant's civil_from_days on years starting in March.
func civil(days int64) (year, month, day int) {
	z := days - 60 // days since 0000-03-01
	if z < 0 {     // January and February of year 0
		return 0, 1 + int(days)/31, 1 + int(days)%31
	}
	era := z / 146097
	doe := z - era*146097                                  // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365]
	mp := (5*doy + 2) / 153                                // [0, 11], from March
	day = int(doy - (153*mp+2)/5 + 1)
	year = int(yoe + era*400)
	if mp < 10 {
		return year, int(mp + 3), day
	}
	return year + 1, int(mp - 9), day
}

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
