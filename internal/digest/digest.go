// Package digest computes the sha256-v1 digests on polc's hot path — of
// requests, arguments, results and decisions — as lowercase hex of the
// SHA-256 of a value's canonical JSON (internal/jcs), with pooled
// encoding buffers so that a digest costs one allocation (its string).
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"polc.dev/polc/internal/jcs"
)

// bufs recycles the canonical-encoding buffers: every request, argument
// set and result is digested on the hot path.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Of is the sha256-v1 digest (lowercase hex) of v's canonical JSON. A
// value without a canonical form gets the digest of its error's text, so
// that Of is total.
func Of(v any) string {
	return WithPrefix("", v)
}

// WithPrefix is prefix followed by Of(v), in one allocation: a trail
// detail that names a digest can share the digest's bytes.
func WithPrefix(prefix string, v any) string {
	bp := Buffer()
	b, err := jcs.Append((*bp)[:0], v)
	return Finish(bp, b, err, prefix)
}

// Checked is WithPrefix for values that must have a canonical form: it
// returns jcs's error (a cycle, nesting deeper than jcs.MaxDepth, NaN, a
// func) instead of a digest of the error's text.
func Checked(prefix string, v any) (string, error) {
	bp := Buffer()
	b, err := jcs.Append((*bp)[:0], v)
	if err != nil {
		bufs.Put(bp)
		return "", err
	}
	return Finish(bp, b, nil, prefix), nil
}

// Buffer takes a pooled encoding buffer, for a caller that appends a
// value's canonical form itself (a form on its stack, called directly
// rather than through jcs.Append's interface) and then calls Finish.
func Buffer() *[]byte { return bufs.Get().(*[]byte) }

// Finish hashes b, the canonical encoding appended to the pooled buffer
// *bp (or, when err is set, the error text in its place), returns the
// buffer to the pool and returns prefix followed by the hex digest. bp
// must not be used after.
func Finish(bp *[]byte, b []byte, err error, prefix string) string {
	if err != nil {
		// A value without a canonical form (results, which nothing
		// refuses; requests are refused before, with Checked): the
		// digest of the error text keeps the function total.
		b = fmt.Appendf((*bp)[:0], "unencodable: %v", err)
	}
	s := sha256.Sum256(b)
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		bufs.Put(bp)
	}
	var h [128]byte
	if len(prefix) > len(h)-64 {
		var x [64]byte
		hex.Encode(x[:], s[:])
		return prefix + string(x[:])
	}
	n := copy(h[:], prefix)
	hex.Encode(h[n:n+64], s[:])
	return string(h[:n+64])
}
