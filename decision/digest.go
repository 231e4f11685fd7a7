package decision

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"polc.dev/polc/internal/jcs"
)

// The digest helpers below are the executor's (executor/types.go): a
// decision's digest is computed the same way as every other digest on the
// hot path.

// digestBufs recycles the canonical-encoding buffers of digestOf: every
// request, argument set and result is digested on the hot path.
var digestBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// digestOf is the sha256-v1 digest (lowercase hex) of v's canonical JSON.
func digestOf(v any) string {
	return digestWithPrefix("", v)
}

// digestWithPrefix is prefix followed by digestOf(v), in one allocation:
// a trail detail that names a digest can share the digest's bytes.
func digestWithPrefix(prefix string, v any) string {
	bp := digestBufs.Get().(*[]byte)
	b, err := jcs.Append((*bp)[:0], v)
	return sumHex(bp, b, err, prefix)
}

// sumHex hashes b, the canonical encoding appended to the pooled buffer
// *bp (or, when err is set, the error text in its place), returns the
// buffer to the pool and returns prefix followed by the hex digest.
func sumHex(bp *[]byte, b []byte, err error, prefix string) string {
	if err != nil {
		// A value without a canonical form (results, which nothing
		// refuses; requests are refused at stage 2, digestChecked): the
		// digest of the error text keeps the function total.
		b = fmt.Appendf((*bp)[:0], "unencodable: %v", err)
	}
	s := sha256.Sum256(b)
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		digestBufs.Put(bp)
	}
	var h [128]byte
	if len(prefix) > len(h)-64 {
		return prefix + digestHex(s)
	}
	n := copy(h[:], prefix)
	hex.Encode(h[n:n+64], s[:])
	return string(h[:n+64])
}

func digestHex(s [32]byte) string {
	var h [64]byte
	hex.Encode(h[:], s[:])
	return string(h[:])
}
