package chain

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	mrand "math/rand/v2"
	"sort"
	"sync"
	"unicode/utf8"

	"polc.dev/polc/internal/jcs"
)

// This file holds the hot path of verification: a scanner that checks one
// record line against the exact canonical form of the format without a
// general JSON decoder. Its verdicts must equal the reference verifier's
// (jcs + encoding/json) on every input; chain/reference_test.go and the fuzz
// targets hold it to that.

// uuid is a parsed lowercase UUID.
type uuid [16]byte

func (u uuid) String() string {
	var b [36]byte
	u.put(&b)
	return string(b[:])
}

// put writes u's text: all 32 digits at once, then the five groups
// moved into place (fixed-size copies, no per-byte index table).
func (u *uuid) put(b *[36]byte) {
	var h [32]byte
	for i, c := range u {
		binary.LittleEndian.PutUint16(h[2*i:], hexPair[c])
	}
	copy(b[0:8], h[0:8])
	copy(b[9:13], h[8:12])
	copy(b[14:18], h[12:16])
	copy(b[19:23], h[16:20])
	copy(b[24:36], h[20:32])
	b[8], b[13], b[18], b[23] = '-', '-', '-', '-'
}

// hexPair[c] is c's two lowercase hex digits, the first in the low byte.
var hexPair = func() (t [256]uint16) {
	const digits = "0123456789abcdef"
	for c := range t {
		t[c] = uint16(digits[c>>4]) | uint16(digits[c&15])<<8
	}
	return t
}()

// NewUUID returns a random (version 4) lowercase UUID, as records' ids
// must be. Identifiers need uniqueness, not secrecy: math/rand/v2's
// generator (ChaCha8, seeded from the OS) gives it without a system call
// per id. Ids are minted uuidBatch at a time into one string, per
// processor (a sync.Pool), and handed out as its substrings: one
// allocation per batch instead of one per id. A kept id keeps its batch's
// uuidBatch*36 bytes alive.
func NewUUID() string {
	b := uuidBatches.Get().(*uuidBatchText)
	if len(*b) == 0 {
		var buf [uuidBatch * 36]byte
		*b = uuidBatchText(appendNewUUIDs(buf[:0], uuidBatch))
	}
	id := string((*b)[:36])
	*b = (*b)[36:]
	uuidBatches.Put(b)
	return id
}

// uuidBatch is how many ids NewUUID mints at a time.
const uuidBatch = 16

// uuidBatchText is the unused part of a batch of ids.
type uuidBatchText string

var uuidBatches = sync.Pool{New: func() any { return new(uuidBatchText) }}

// appendNewUUIDs appends the text of n new random (version 4) UUIDs to
// dst: NewUUID's batches.
func appendNewUUIDs(dst []byte, n int) []byte {
	for range n {
		var u uuid
		binary.LittleEndian.PutUint64(u[:8], mrand.Uint64())
		binary.LittleEndian.PutUint64(u[8:], mrand.Uint64())
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		var b [36]byte
		u.put(&b)
		dst = append(dst, b[:]...)
	}
	return dst
}

// hexVal maps a lowercase hex digit to its value and anything else to 0xff.
var hexVal = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
	}
	return t
}()

func isLowerHex(c byte) bool { return hexVal[c] != 0xff }

// decodeHex decodes lowercase hex src into dst (len(src) == 2*len(dst)) and
// reports whether every digit was valid.
func decodeHex(dst, src []byte) bool {
	var bad byte
	for i := range dst {
		hi, lo := hexVal[src[2*i]], hexVal[src[2*i+1]]
		bad |= hi | lo
		dst[i] = hi<<4 | lo&0x0f
	}
	return bad&0xf0 == 0
}

// validHex reports whether every byte of b is a lowercase hex digit.
func validHex(b []byte) bool {
	var bad byte
	for _, c := range b {
		bad |= hexVal[c]
	}
	return bad&0xf0 == 0
}

func isHex64(b []byte) bool { return len(b) == 64 && validHex(b) }

// decodeUUID parses a lowercase hyphenated UUID.
func decodeUUID(b []byte) (u uuid, ok bool) {
	if len(b) != 36 || b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
		return u, false
	}
	ok = decodeHex(u[0:4], b[0:8])
	ok = decodeHex(u[4:6], b[9:13]) && ok
	ok = decodeHex(u[6:8], b[14:18]) && ok
	ok = decodeHex(u[8:10], b[19:23]) && ok
	ok = decodeHex(u[10:16], b[24:36]) && ok
	return u, ok
}

func isUUID(b []byte) bool {
	return len(b) == 36 && b[8] == '-' && b[13] == '-' && b[18] == '-' && b[23] == '-' &&
		validHex(b[0:8]) && validHex(b[9:13]) && validHex(b[14:18]) && validHex(b[19:23]) && validHex(b[24:36])
}

// IsUUID reports whether s is a lowercase hyphenated UUID (8-4-4-4-12).
func IsUUID(s string) bool { return isUUID([]byte(s)) }

func parseUUID(b []byte) uuid {
	u, _ := decodeUUID(b)
	return u
}

func parseHex(b []byte) (h Hash) {
	decodeHex(h[:], b)
	return h
}

func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// isTime checks YYYY-MM-DDTHH:MM:SS.ffffffZ with a real calendar date.
func isTime(b []byte) bool {
	if len(b) != 27 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' ||
		b[16] != ':' || b[19] != '.' || b[26] != 'Z' {
		return false
	}
	y, ok1 := digits(b[0:4])
	mo, ok2 := digits(b[5:7])
	d, ok3 := digits(b[8:10])
	h, ok4 := digits(b[11:13])
	mi, ok5 := digits(b[14:16])
	s, ok6 := digits(b[17:19])
	_, ok7 := digits(b[20:26])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return false
	}
	if y < 1 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59 {
		return false
	}
	days := [...]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[mo-1]
	if mo == 2 && (y%4 == 0 && y%100 != 0 || y%400 == 0) {
		days = 29
	}
	return d <= days
}

// scanString checks a canonical JSON string starting at p[i] == '"' and
// returns the index after its closing quote. Canonical means: raw UTF-8
// except '"', '\\' and C0 controls; those escaped as \" \\ \b \f \n \r \t or,
// for the other controls, \u00xx with lowercase hex.
func scanString(p []byte, i int) (int, bool) {
	if i >= len(p) || p[i] != '"' {
		return 0, false
	}
	i++
	for i < len(p) {
		c := p[i]
		if !strSpecial[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(p) {
				return 0, false
			}
			switch p[i+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(p) || p[i+2] != '0' || p[i+3] != '0' || (p[i+4] != '0' && p[i+4] != '1') || !isLowerHex(p[i+5]) {
					return 0, false
				}
				switch v := (p[i+4]-'0')<<4 | unhex(p[i+5]); v {
				case '\b', '\f', '\n', '\r', '\t':
					return 0, false
				}
				i += 6
			default:
				return 0, false
			}
		case c < 0x20:
			return 0, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(p[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, false
			}
			i += size
		}
	}
	return 0, false
}

// strSpecial marks the bytes scanString must look at: '"', '\\', C0
// controls and the start of multi-byte UTF-8.
var strSpecial = func() (t [256]bool) {
	for c := range t {
		t[c] = c < 0x20 || c == '"' || c == '\\' || c >= 0x80
	}
	return t
}()

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// unescape appends the content of the canonical string s (quotes included)
// to dst. Precondition: scanString accepted s.
func unescape(dst, s []byte) []byte {
	s = s[1 : len(s)-1]
	for {
		k := bytes.IndexByte(s, '\\')
		if k < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:k]...)
		switch s[k+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			dst = append(dst, (s[k+4]-'0')<<4|unhex(s[k+5]))
			s = s[k+6:]
			continue
		default: // '"' or '\\'
			dst = append(dst, s[k+1])
		}
		s = s[k+2:]
	}
}

// scanInt reads a canonical non-negative integer no larger than MaxSequence.
func scanInt(p []byte, i int) (int64, int, bool) {
	start := i
	var n int64
	for i < len(p) && p[i] >= '0' && p[i] <= '9' {
		n = n*10 + int64(p[i]-'0')
		i++
		if i-start > 16 {
			return 0, 0, false
		}
	}
	if i == start || (p[start] == '0' && i-start > 1) || n > MaxSequence {
		return 0, 0, false
	}
	return n, i, true
}

// line is what the scanner extracts from one record line. Byte slices alias
// the line or the scanner's scratch buffer and are valid until the next scan.
type line struct {
	storedHash    Hash
	chainID       uuid
	createdAt     []byte
	algorithm     []byte // raw JSON string, quotes included
	opID          uuid
	hasOp         bool
	payloadDigest Hash
	payload       []byte // unescaped payload_json
	policyID      uuid
	policyVersion []byte // raw JSON string, quotes included
	prev          Hash
	hasPrev       bool
	recordID      uuid
	typ           Type
	seq           int64
	supersedes    uuid
	hasSup        bool
	spans         [maxFields]span // payload members
	altHash       Hash            // the recomputed chain hash, when it differs
	hasAlt        bool
}

// lineError is a per-record finding from the scanner.
type lineError struct {
	code     Code
	msg      string
	expected string
	actual   string
	unusable bool // the link fields could not be read
}

// scanner parses and checks record lines, reusing its buffers.
type scanner struct {
	scratch []byte
	h       hash.Hash
	sum     []byte
	// quietRecord and quietPayload skip explaining why a line is not a
	// record or why its payload breaks its schema (a general JSON decode,
	// ~40 times slower than the scan) when the message would not be
	// reported: the Verifier sets them once its findings are full.
	quietRecord, quietPayload bool
}

func newScanner() *scanner { return &scanner{h: sha256.New(), sum: make([]byte, 0, 32)} }

var (
	kChainHash   = []byte(`{"chain_hash":"`)
	kChainID     = []byte(`","chain_id":"`)
	kCreatedAt   = []byte(`","created_at":"`)
	kAlgorithm   = []byte(`","hash_algorithm":`)
	kOperationID = []byte(`,"operation_id":`)
	kPayloadDig  = []byte(`,"payload_digest":"`)
	kPayloadJSON = []byte(`","payload_json":`)
	kPolicyID    = []byte(`,"policy_id":"`)
	kPolicyVer   = []byte(`","policy_version":`)
	kPrev        = []byte(`,"previous_chain_hash":`)
	kRecordID    = []byte(`,"record_id":"`)
	kRecordType  = []byte(`","record_type":`)
	kSequence    = []byte(`,"sequence":`)
	kSupersedes  = []byte(`,"supersedes_record_id":`)
	nullBytes    = []byte("null")
	quoteBytes   = []byte{'"'}
	algBytes     = []byte(`"` + HashAlgorithm + `"`)
)

// bodyOffset is where the members after chain_hash start: the chain hash is
// SHA-256("{" || line[bodyOffset:]).
const bodyOffset = 15 + 64 + 2

// scan checks one record line (without its newline) and fills l. It returns
// nil when the record is well formed, uses sha256-v1, satisfies its payload
// schema and both of its hashes recompute.
func (s *scanner) scan(b []byte, l *line) *lineError {
	l.hasAlt = false
	if !s.structure(b, l) {
		msg := "not a record"
		if !s.quietRecord {
			msg = explainRecord(b)
		}
		return &lineError{code: CodeMalformedRecord, msg: msg, unusable: true}
	}
	if !l.typ.Valid() {
		return &lineError{code: CodeMalformedRecord, msg: "unknown record_type " + string(l.typ)}
	}
	if l.hasOp != l.typ.HasOperation() {
		if l.hasOp {
			return &lineError{code: CodeMalformedRecord, msg: "operation_id must be null on " + string(l.typ)}
		}
		return &lineError{code: CodeMalformedRecord, msg: "operation_id must be set on " + string(l.typ)}
	}
	if l.hasSup != (l.typ == RecordSuperseded) {
		if l.hasSup {
			return &lineError{code: CodeMalformedRecord, msg: "supersedes_record_id must be null on " + string(l.typ)}
		}
		return &lineError{code: CodeMalformedRecord, msg: "supersedes_record_id must be set on record_superseded"}
	}
	if err := s.validatePayload(l); err != nil {
		return &lineError{code: CodePayloadInvalid, msg: err.Error()}
	}
	if !bytes.Equal(l.algorithm, algBytes) {
		return &lineError{code: CodeUnsupportedAlgorithm, msg: "hash_algorithm is not " + HashAlgorithm + "; the record's hashes were not checked",
			expected: HashAlgorithm, actual: string(unescape(nil, l.algorithm))}
	}
	s.h.Reset()
	s.h.Write(l.payload)
	s.sum = s.h.Sum(s.sum[:0])
	if !bytes.Equal(s.sum, l.payloadDigest[:]) {
		return &lineError{code: CodeContentMismatch, msg: "payload_digest does not match payload_json",
			expected: hex.EncodeToString(s.sum), actual: l.payloadDigest.String()}
	}
	s.h.Reset()
	s.h.Write([]byte{'{'})
	s.h.Write(b[bodyOffset:])
	s.sum = s.h.Sum(s.sum[:0])
	if !bytes.Equal(s.sum, l.storedHash[:]) {
		copy(l.altHash[:], s.sum)
		l.hasAlt = true
		return &lineError{code: CodeContentMismatch, msg: "chain_hash does not match the record's content",
			expected: hex.EncodeToString(s.sum), actual: l.storedHash.String()}
	}
	return nil
}

// validatePayload checks l's payload against its schema (l.typ is valid).
func (s *scanner) validatePayload(l *line) error {
	if !s.quietPayload {
		return validatePayload(l.typ, l.payload, &l.spans)
	}
	sch := schemaOf(l.typ)
	if !scanPayload(sch, l.payload, &l.spans) {
		return &PayloadError{Type: l.typ, Msg: "does not match its schema"}
	}
	return checkPayloadRules(sch, l.payload, &l.spans)
}

// structure matches the exact canonical layout of a record.
func (s *scanner) structure(b []byte, l *line) bool {
	i := 0
	lit := func(k []byte) bool {
		if !bytes.HasPrefix(b[i:], k) {
			return false
		}
		i += len(k)
		return true
	}
	hex64 := func() (h Hash, ok bool) {
		if i+64 > len(b) || !decodeHex(h[:], b[i:i+64]) {
			return h, false
		}
		i += 64
		return h, true
	}
	id := func() (uuid, bool) {
		if i+36 > len(b) {
			return uuid{}, false
		}
		u, ok := decodeUUID(b[i : i+36])
		i += 36
		return u, ok
	}
	nullableID := func() (uuid, bool, bool) {
		if bytes.HasPrefix(b[i:], nullBytes) {
			i += 4
			return uuid{}, false, true
		}
		if i >= len(b) || b[i] != '"' {
			return uuid{}, false, false
		}
		i++
		u, ok := id()
		if !ok || i >= len(b) || b[i] != '"' {
			return uuid{}, false, false
		}
		i++
		return u, true, true
	}
	str := func() ([]byte, bool) {
		end, ok := scanString(b, i)
		if !ok {
			return nil, false
		}
		v := b[i:end]
		i = end
		return v, true
	}
	var ok bool
	if !lit(kChainHash) {
		return false
	}
	if l.storedHash, ok = hex64(); !ok || !lit(kChainID) {
		return false
	}
	if l.chainID, ok = id(); !ok || !lit(kCreatedAt) {
		return false
	}
	if i+27 > len(b) || !isTime(b[i:i+27]) {
		return false
	}
	l.createdAt = b[i : i+27]
	i += 27
	if !lit(kAlgorithm) {
		return false
	}
	if l.algorithm, ok = str(); !ok || !lit(kOperationID) {
		return false
	}
	if l.opID, l.hasOp, ok = nullableID(); !ok || !lit(kPayloadDig) {
		return false
	}
	if l.payloadDigest, ok = hex64(); !ok || !lit(kPayloadJSON) {
		return false
	}
	raw, ok := str()
	if !ok {
		return false
	}
	s.scratch = unescape(s.scratch[:0], raw)
	l.payload = s.scratch
	if !lit(kPolicyID) {
		return false
	}
	if l.policyID, ok = id(); !ok || !lit(kPolicyVer) {
		return false
	}
	if l.policyVersion, ok = str(); !ok || len(l.policyVersion) <= 2 || !lit(kPrev) {
		return false
	}
	if bytes.HasPrefix(b[i:], nullBytes) {
		i += 4
		l.hasPrev = false
	} else {
		if !lit(quoteBytes) {
			return false
		}
		if l.prev, ok = hex64(); !ok || !lit(quoteBytes) {
			return false
		}
		l.hasPrev = true
	}
	if !lit(kRecordID) {
		return false
	}
	if l.recordID, ok = id(); !ok || !lit(kRecordType) {
		return false
	}
	typ, ok := str()
	if !ok {
		return false
	}
	l.typ = Type(typ[1 : len(typ)-1])
	if !lit(kSequence) {
		return false
	}
	if l.seq, i, ok = scanInt(b, i); !ok || !lit(kSupersedes) {
		return false
	}
	if l.supersedes, l.hasSup, ok = nullableID(); !ok {
		return false
	}
	return i == len(b)-1 && b[i] == '}'
}

// recordKeys are the members of a record in canonical order.
var recordKeys = []string{
	"chain_hash", "chain_id", "created_at", "hash_algorithm", "operation_id",
	"payload_digest", "payload_json", "policy_id", "policy_version",
	"previous_chain_hash", "record_id", "record_type", "sequence",
	"supersedes_record_id",
}

// explainRecord says why a line failed the structural scan. It runs only on
// failure, so it may be slow.
func explainRecord(b []byte) string {
	explained.Add(1)
	if len(b) == 0 {
		return "empty line"
	}
	canon, err := jcs.Transform(b)
	if err != nil {
		return "not JSON: " + err.Error()
	}
	var obj map[string]json.RawMessage
	if b[0] != '{' || json.Unmarshal(b, &obj) != nil {
		return "not a JSON object"
	}
	var missing, extra []string
	for _, k := range recordKeys {
		if _, ok := obj[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range obj {
		if !containsString(recordKeys, k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	switch {
	case len(extra) > 0:
		return fmt.Sprintf("unknown member %q", extra[0])
	case len(missing) > 0:
		return fmt.Sprintf("missing member %q", missing[0])
	case !bytes.Equal(canon, b):
		return "valid JSON but not in canonical form (RFC 8785)"
	}
	check := func(k string, ok func([]byte) bool, want string) string {
		if ok(obj[k]) {
			return ""
		}
		return fmt.Sprintf("%s: want %s, got %s", k, want, truncate(obj[k], 80))
	}
	quoted := func(f func([]byte) bool) func([]byte) bool {
		return func(v []byte) bool { return len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && f(v[1:len(v)-1]) }
	}
	orNull := func(f func([]byte) bool) func([]byte) bool {
		return func(v []byte) bool { return string(v) == "null" || f(v) }
	}
	isStr := func(v []byte) bool { end, ok := scanString(v, 0); return ok && end == len(v) }
	nonEmpty := func(v []byte) bool { return isStr(v) && len(v) > 2 }
	isSeq := func(v []byte) bool { _, end, ok := scanInt(v, 0); return ok && end == len(v) }
	for _, c := range []struct {
		k    string
		ok   func([]byte) bool
		want string
	}{
		{"chain_hash", quoted(isHex64), "64 lowercase hex characters"},
		{"chain_id", quoted(isUUID), "a lowercase UUID"},
		{"created_at", quoted(isTime), "a YYYY-MM-DDTHH:MM:SS.ffffffZ timestamp"},
		{"hash_algorithm", isStr, "a string"},
		{"operation_id", orNull(quoted(isUUID)), "a lowercase UUID or null"},
		{"payload_digest", quoted(isHex64), "64 lowercase hex characters"},
		{"payload_json", isStr, "a string"},
		{"policy_id", quoted(isUUID), "a lowercase UUID"},
		{"policy_version", nonEmpty, "a non-empty string"},
		{"previous_chain_hash", orNull(quoted(isHex64)), "64 lowercase hex characters or null"},
		{"record_id", quoted(isUUID), "a lowercase UUID"},
		{"record_type", isStr, "a string"},
		{"sequence", isSeq, "an integer in [0, 2^53-1]"},
		{"supersedes_record_id", orNull(quoted(isUUID)), "a lowercase UUID or null"},
	} {
		if m := check(c.k, c.ok, c.want); m != "" {
			return m
		}
	}
	return "invalid record"
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
