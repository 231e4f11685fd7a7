// Package jcs implements the JSON Canonicalization Scheme of RFC 8785.
//
// Canonical bytes are produced from any I-JSON text (RFC 7493):
//
//   - no insignificant whitespace;
//   - object members sorted by their names compared as arrays of UTF-16 code
//     units (RFC 8785 §3.2.3), which differs from UTF-8 byte order only for
//     characters beyond the Basic Multilingual Plane;
//   - strings written as ECMAScript's JSON.stringify writes them: only '"',
//     '\\' and the C0 controls are escaped, using \b \t \n \f \r where they
//     exist and lowercase \u00xx otherwise; everything else, U+007F, U+2028
//     and U+2029 included, is written as raw UTF-8;
//   - numbers parsed as IEEE 754 double precision and written with the
//     ECMAScript Number-to-String algorithm (ECMA-262 §7.1.12.1): the shortest
//     digit string that round-trips, in plain notation for decimal exponents
//     in [-6, 21) and exponential notation ("1e+21", "1.5e-7") otherwise;
//     negative zero is written "0".
//
// Input that I-JSON forbids is rejected rather than repaired: duplicate member
// names, invalid UTF-8, escaped lone surrogates, numbers that overflow to
// infinity, and trailing data after the top-level value. Nesting is bounded by
// MaxDepth.
package jcs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects accepted by Transform, so
// that hostile input cannot exhaust the stack.
const MaxDepth = 1000

// SyntaxError reports input that is not I-JSON. Offset is the 0-based byte
// offset of the problem; Line and Col are 1-based (Col counts bytes).
type SyntaxError struct {
	Offset int
	Line   int
	Col    int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg)
}

// Transform returns the RFC 8785 canonical form of the JSON text in.
// Leading and trailing whitespace around the single top-level value is
// allowed; anything else that is not I-JSON yields a *SyntaxError.
//
// It works in two passes, each linear in the input: the first checks the
// input and records every object's members, sorted; the second writes the
// output, each value once, in that order. (Encoding each member into its
// own buffer and copying it into its parent instead copies a value once per
// enclosing object: MaxDepth times for a value at the bottom of a deep
// nest.)
func Transform(in []byte) ([]byte, error) {
	p := parser{in: in}
	p.skipWS()
	start := p.pos
	if _, err := p.value(nil, 0); err != nil {
		return nil, err
	}
	p.skipWS()
	if p.pos != len(p.in) {
		return nil, p.errf("unexpected data after the top-level value")
	}
	p.pos, p.emit = start, true
	out, err := p.value(make([]byte, 0, len(in)), 0)
	if err != nil { // cannot happen: the first pass accepted the input
		return nil, err
	}
	return out, nil
}

// Marshal returns the canonical JSON of v, encoded as encoding/json would
// encode it (see Append). Precondition: v contains no NaN or infinite float.
func Marshal(v any) ([]byte, error) {
	return Append(nil, v)
}

// Shape counts what a JSON text holds: its values (scalars, arrays and
// objects alike), objects and object members. A decoder's memory grows with
// these as much as with the text's length (an empty object is three bytes
// of text and hundreds of bytes as a decoded map), so a reader that must
// bound the memory of decoding untrusted input checks the shape first.
type Shape struct {
	Values, Objects, Members int
}

// Check reports whether in is one I-JSON text that Transform accepts, and
// its shape, without writing the canonical form: one pass, linear in the
// input, that keeps nothing of it but member names (to find duplicates).
// The error is a *SyntaxError at the first problem.
func Check(in []byte) (Shape, error) {
	p := parser{in: in, check: true}
	p.skipWS()
	if _, err := p.value(nil, 0); err != nil {
		return Shape{}, err
	}
	p.skipWS()
	if p.pos != len(p.in) {
		return Shape{}, p.errf("unexpected data after the top-level value")
	}
	return p.shape, nil
}

// IsCanonical reports whether in is exactly its own canonical form.
func IsCanonical(in []byte) bool {
	out, err := Transform(in)
	return err == nil && bytes.Equal(out, in)
}

type parser struct {
	in   []byte
	pos  int
	emit bool // second pass: write the output
	// check: Check's one pass, which records no objects for a second.
	check bool
	shape Shape
	// keys holds the member names of the objects being parsed, the
	// innermost last (see object).
	keys []string

	// objects holds each object's members sorted canonically, recorded by
	// the first pass; objectAt maps an object's offset to its index.
	objects  []object
	objectAt map[int]int
}

// object is one object of the input: its members, sorted, each with the
// span of its value in the input, and the offset just past its '}'.
type object struct {
	members []member
	end     int
}

func (p *parser) errf(format string, args ...any) error {
	line, col := 1, 1
	for _, b := range p.in[:min(p.pos, len(p.in))] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return &SyntaxError{Offset: p.pos, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipWS() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(out []byte, depth int) ([]byte, error) {
	if p.pos >= len(p.in) {
		return nil, p.errf("unexpected end of input")
	}
	p.shape.Values++
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(out, depth+1)
	case c == '[':
		return p.array(out, depth+1)
	case c == '"':
		if !p.emit {
			// The first pass needs no string value, only its checks.
			_, err := p.scanStr(false)
			return out, err
		}
		s, err := p.str()
		if err != nil {
			return out, err
		}
		return AppendString(out, s), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(out)
	case c == 't':
		return p.literal(out, "true")
	case c == 'f':
		return p.literal(out, "false")
	case c == 'n':
		return p.literal(out, "null")
	case c >= utf8.RuneSelf:
		// %q would show the byte as the Latin-1 character it is not.
		return nil, p.errf("invalid byte %#02x looking for a value", c)
	default:
		return nil, p.errf("invalid character %q looking for a value", c)
	}
}

func (p *parser) literal(out []byte, lit string) ([]byte, error) {
	if !bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		return nil, p.errf("invalid literal")
	}
	p.pos += len(lit)
	if !p.emit {
		return out, nil
	}
	return append(out, lit...), nil
}

type member struct {
	key        string
	start, end int // the value's span in the input
}

func (p *parser) object(out []byte, depth int) ([]byte, error) {
	if p.emit {
		o := p.objects[p.objectAt[p.pos]]
		out = append(out, '{')
		for i, m := range o.members {
			if i > 0 {
				out = append(out, ',')
			}
			out = AppendString(out, m.key)
			out = append(out, ':')
			p.pos = m.start
			var err error
			if out, err = p.value(out, depth); err != nil {
				return nil, err
			}
		}
		p.pos = o.end
		return append(out, '}'), nil
	}
	if depth > MaxDepth {
		return nil, p.errf("nesting deeper than %d", MaxDepth)
	}
	at := p.pos
	p.shape.Objects++
	p.pos++ // '{'
	p.skipWS()
	var members []member
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		p.record(at, members)
		return out, nil
	}
	// The object's names so far are p.keys[base:] (a nested object's
	// are popped when it ends): a small object is searched, a large one
	// gets a set, so that neither many small objects nor one large one
	// costs more than linear time and little memory.
	base := len(p.keys)
	defer func() { p.keys = p.keys[:base] }()
	var seen map[string]struct{}
	for {
		p.skipWS()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return nil, p.errf("expected a member name")
		}
		keyPos := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		var dup bool
		if seen != nil {
			_, dup = seen[key]
		} else {
			dup = slices.Contains(p.keys[base:], key)
		}
		if dup {
			p.pos = keyPos
			return nil, p.errf("duplicate member name %s", quoteClipped(key))
		}
		p.keys = append(p.keys, key)
		if seen == nil && len(p.keys)-base > smallObject {
			seen = make(map[string]struct{}, 2*smallObject)
			for _, k := range p.keys[base:] {
				seen[k] = struct{}{}
			}
		} else if seen != nil {
			seen[key] = struct{}{}
		}
		p.shape.Members++
		p.skipWS()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return nil, p.errf("expected ':' after member name")
		}
		p.pos++
		p.skipWS()
		start := p.pos
		if _, err := p.value(nil, depth); err != nil {
			return nil, err
		}
		if !p.check {
			members = append(members, member{key, start, p.pos})
		}
		p.skipWS()
		if p.pos >= len(p.in) {
			return nil, p.errf("unexpected end of input in object")
		}
		if p.in[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.in[p.pos] == '}' {
			p.pos++
			break
		}
		return nil, p.errf("expected ',' or '}' in object")
	}
	if !p.check {
		slices.SortFunc(members, func(a, b member) int { return CompareKeys(a.key, b.key) })
		p.record(at, members)
	}
	return out, nil
}

// record notes the object at offset at, which ends at p.pos.
func (p *parser) record(at int, members []member) {
	if p.check {
		return
	}
	if p.objectAt == nil {
		p.objectAt = make(map[int]int)
	}
	p.objectAt[at] = len(p.objects)
	p.objects = append(p.objects, object{members, p.pos})
}

func (p *parser) array(out []byte, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return nil, p.errf("nesting deeper than %d", MaxDepth)
	}
	p.pos++ // '['
	p.skipWS()
	out = p.put(out, '[')
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		return p.put(out, ']'), nil
	}
	for i := 0; ; i++ {
		if i > 0 {
			out = p.put(out, ',')
		}
		p.skipWS()
		var err error
		out, err = p.value(out, depth)
		if err != nil {
			return nil, err
		}
		p.skipWS()
		if p.pos >= len(p.in) {
			return nil, p.errf("unexpected end of input in array")
		}
		if p.in[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.in[p.pos] == ']' {
			p.pos++
			return p.put(out, ']'), nil
		}
		return nil, p.errf("expected ',' or ']' in array")
	}
}

// put appends c in the second pass; the first pass writes nothing.
func (p *parser) put(out []byte, c byte) []byte {
	if !p.emit {
		return out
	}
	return append(out, c)
}

// str parses a JSON string starting at the opening quote.
func (p *parser) str() (string, error) { return p.scanStr(true) }

// scanStr parses a JSON string starting at the opening quote, returning
// its value when keep is set (else only checking it).
func (p *parser) scanStr(keep bool) (string, error) {
	p.pos++ // opening quote
	var b []byte
	start := p.pos
	for {
		if p.pos >= len(p.in) {
			return "", p.errf("unterminated string")
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			if !keep {
				p.pos++
				return "", nil
			}
			if b == nil { // no escape: one copy
				b = p.in[start:p.pos]
			} else {
				b = append(b, p.in[start:p.pos]...)
			}
			p.pos++
			return string(b), nil
		case c == '\\':
			if keep {
				b = append(b, p.in[start:p.pos]...)
			}
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			if keep {
				b = utf8.AppendRune(b, r)
			}
			start = p.pos
		case c < 0x20:
			return "", p.errf("control character %#02x in string", c)
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", p.errf("invalid UTF-8 in string")
			}
			p.pos += size
		}
	}
}

var simpleEscapes = map[byte]rune{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escape parses one escape sequence starting at the backslash.
func (p *parser) escape() (rune, error) {
	if p.pos+1 >= len(p.in) {
		return 0, p.errf("unterminated escape")
	}
	c := p.in[p.pos+1]
	if r, ok := simpleEscapes[c]; ok {
		p.pos += 2
		return r, nil
	}
	if c != 'u' {
		return 0, p.errf("invalid escape \\%c", c)
	}
	r1, err := p.hex4()
	if err != nil {
		return 0, err
	}
	if !utf16.IsSurrogate(r1) {
		return r1, nil
	}
	if r1 >= 0xDC00 {
		return 0, p.errf("lone low surrogate \\u%04x", r1)
	}
	if !bytes.HasPrefix(p.in[p.pos:], []byte(`\u`)) {
		return 0, p.errf("lone high surrogate \\u%04x", r1)
	}
	r2, err := p.hex4()
	if err != nil {
		return 0, err
	}
	r := utf16.DecodeRune(r1, r2)
	if r == utf8.RuneError {
		return 0, p.errf("invalid surrogate pair \\u%04x\\u%04x", r1, r2)
	}
	return r, nil
}

// hex4 parses `\uXXXX` at p.pos.
func (p *parser) hex4() (rune, error) {
	if p.pos+6 > len(p.in) {
		return 0, p.errf("truncated \\u escape")
	}
	v, err := strconv.ParseUint(string(p.in[p.pos+2:p.pos+6]), 16, 16)
	if err != nil {
		return 0, p.errf("invalid \\u escape")
	}
	p.pos += 6
	return rune(v), nil
}

func (p *parser) number(out []byte) ([]byte, error) {
	start := p.pos
	i := p.pos
	if p.in[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(p.in) && p.in[i] >= '0' && p.in[i] <= '9' {
			i++
			n++
		}
		return n
	}
	intStart := i
	if n := digits(); n == 0 {
		p.pos = i
		return nil, p.errf("invalid number")
	} else if n > 1 && p.in[intStart] == '0' {
		p.pos = intStart
		return nil, p.errf("number with a leading zero")
	}
	if i < len(p.in) && p.in[i] == '.' {
		i++
		if digits() == 0 {
			p.pos = i
			return nil, p.errf("invalid number: no digits after '.'")
		}
	}
	if i < len(p.in) && (p.in[i] == 'e' || p.in[i] == 'E') {
		i++
		if i < len(p.in) && (p.in[i] == '+' || p.in[i] == '-') {
			i++
		}
		if digits() == 0 {
			p.pos = i
			return nil, p.errf("invalid number: no digits in exponent")
		}
	}
	f, err := strconv.ParseFloat(string(p.in[start:i]), 64)
	if err != nil || math.IsInf(f, 0) {
		p.pos = start
		return nil, p.errf("number %s out of range (beyond a finite IEEE 754 double)", clipNumber(p.in[start:i]))
	}
	p.pos = i
	if !p.emit {
		return out, nil
	}
	return AppendNumber(out, f)
}

// smallObject is the most members an object has before its duplicate
// check uses a set instead of searching.
const smallObject = 16

// maxEcho bounds how much of the input an error message quotes: a
// message about a million-digit number, or a member name of a megabyte,
// names its start and its length.
const maxEcho = 40

// clipNumber is a number's text for a message: whole when short, else
// its first maxEcho bytes, an ellipsis and its length.
func clipNumber(b []byte) string {
	if len(b) <= maxEcho {
		return string(b)
	}
	return fmt.Sprintf("%s… (%d characters)", b[:maxEcho], len(b))
}

// quoteClipped is s quoted for a message, cut as clipNumber cuts (on a
// character boundary).
func quoteClipped(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// AppendNumber appends the ECMAScript string form of f. It fails for NaN and
// infinities, which JSON cannot represent.
func AppendNumber(out []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("jcs: %v is not a JSON number", f)
	}
	if f == 0 {
		return append(out, '0'), nil
	}
	if f < 0 {
		out = append(out, '-')
		f = -f
	}
	// Shortest round-trip digits in scientific form: d[.ddd]e±x.
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := bytes.Cut([]byte(sci), []byte("e"))
	exp, _ := strconv.Atoi(string(expStr))
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	k := len(digits)
	n := exp + 1 // position of the decimal point relative to the digits
	switch {
	case k <= n && n <= 21:
		out = append(out, digits...)
		for range n - k {
			out = append(out, '0')
		}
	case 0 < n && n <= 21:
		out = append(out, digits[:n]...)
		out = append(out, '.')
		out = append(out, digits[n:]...)
	case -6 < n && n <= 0:
		out = append(out, '0', '.')
		for range -n {
			out = append(out, '0')
		}
		out = append(out, digits...)
	default:
		out = append(out, digits[0])
		if k > 1 {
			out = append(out, '.')
			out = append(out, digits[1:]...)
		}
		out = append(out, 'e')
		if n-1 >= 0 {
			out = append(out, '+')
		}
		out = strconv.AppendInt(out, int64(n-1), 10)
	}
	return out, nil
}

// AppendString appends s as a canonical JSON string. Precondition: s is valid
// UTF-8 (invalid bytes would be copied through and make the output invalid).
//
// It copies s a word (eight bytes) at a time, testing each word for bytes
// that need escaping ('"', '\\' and the C0 controls) and escaping the
// first one it finds: record lines escape a whole payload_json, where
// quotes come every few dozen bytes. Like append, it writes nothing beyond
// the returned slice's length.
func AppendString(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	n := escapeIndex(s)
	if n < 0 { // most strings: ids, digests, names
		out = append(out, s...)
		return append(out, '"')
	}
	out = append(out, s[:n]...)
	s = s[n:]
	j := len(out)
	b := out[:cap(out)]
	for i := 0; i < len(s); {
		var c byte
		if i+8 <= len(s) {
			// The word lands inside the result: at least len(s)-i
			// more bytes follow.
			if len(b)-j < 8 {
				b = room(b, j, len(s)-i+1)
			}
			w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			binary.LittleEndian.PutUint64(b[j:], w)
			m := escapeMask(w)
			if m == 0 {
				i, j = i+8, j+8
				continue
			}
			k := bits.TrailingZeros64(m) >> 3
			i, j = i+k, j+k
			c = s[i]
		} else if c = s[i]; !needsEscape[c] {
			if j == len(b) {
				b = room(b, j, len(s)-i+1)
			}
			b[j] = c
			i, j = i+1, j+1
			continue
		}
		i++
		if e := shortEscapes[c]; e != 0 {
			if len(b)-j < 2 {
				b = room(b, j, 2+len(s)-i+1)
			}
			b[j], b[j+1] = '\\', e
			j += 2
		} else {
			if len(b)-j < 6 {
				b = room(b, j, 6+len(s)-i+1)
			}
			b[j], b[j+1], b[j+2], b[j+3], b[j+4], b[j+5] = '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf]
			j += 6
		}
	}
	return append(b[:j], '"')
}

// room returns b (whose first j bytes are written) with at least n bytes
// of capacity after j, extended to its capacity.
func room(b []byte, j, n int) []byte {
	b = slices.Grow(b[:j], n)
	return b[:cap(b)]
}

// escapeIndex returns the index of the first byte of s that needs
// escaping, or -1.
func escapeIndex(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if m := escapeMask(w); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(s); i++ {
		if needsEscape[s[i]] {
			return i
		}
	}
	return -1
}

// plainASCII reports whether s is ASCII without a byte that needs
// escaping: valid UTF-8 that AppendString copies unchanged.
func plainASCII(s string) bool {
	const highs = 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if escapeMask(w)|w&highs != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; needsEscape[c] || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// needsEscape[c] reports whether c is escaped in a JSON string: '"', '\\'
// and the C0 controls.
var needsEscape = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// escapeMask returns a word whose lowest set bit is the high bit of the
// first (least significant) byte of w that needs escaping: below 0x20, '"'
// or '\\'. Bits above that first byte may be spurious (borrows propagate
// upwards); the lowest one is exact, as it is for each of the three tests.
func escapeMask(w uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	q := w ^ (ones * '"')
	bs := w ^ (ones * '\\')
	return ((w - ones*0x20) | (q - ones) | (bs - ones)) &^ w & highs
}

// shortEscapes[c] is the letter of c's two-byte escape ("\\n" and the
// like), or 0 when c is escaped as \u00xx or not at all.
var shortEscapes = [256]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// CompareKeys orders member names as RFC 8785 §3.2.3 requires: by their
// UTF-16 code units. Precondition: a and b are valid UTF-8.
func CompareKeys(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ua, ub := utf16Units(ra), utf16Units(rb)
			if ua[0] != ub[0] {
				return cmpRune(ua[0], ub[0])
			}
			return cmpRune(ua[1], ub[1])
		}
		a, b = a[na:], b[nb:]
	}
	return cmpRune(rune(len(a)), rune(len(b)))
}

func utf16Units(r rune) [2]rune {
	if r >= 0x10000 {
		r1, r2 := utf16.EncodeRune(r)
		return [2]rune{r1, r2}
	}
	return [2]rune{r, -1}
}

func cmpRune(a, b rune) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
