package executor

import (
	"encoding/binary"
	mrand "math/rand/v2"
	"reflect"

	"polc.dev/polc/chain"
)

// randomIDSource reports whether ids is one of the random UUID sources
// (NewUUID, chain.NewUUID): ids whose order and grouping nobody can
// observe, so that an attempt may mint several at once (newUUIDs).
func randomIDSource(ids func() string) bool {
	p := reflect.ValueOf(ids).Pointer()
	return p == reflect.ValueOf(NewUUID).Pointer() || p == reflect.ValueOf(chain.NewUUID).Pointer()
}

// uuidLen is the length of a UUID's text.
const uuidLen = 36

// newUUIDs returns n random (version 4) lowercase UUIDs, each exactly as
// chain.NewUUID makes them, concatenated in one string: one allocation
// for the ids of an attempt.
func newUUIDs(n int) string {
	var buf [10 * uuidLen]byte
	var b []byte
	if n <= 10 {
		b = buf[:n*uuidLen] // on the stack: string(b) is the one allocation
	} else {
		b = make([]byte, n*uuidLen)
	}
	for i := range n {
		var u [16]byte
		binary.LittleEndian.PutUint64(u[:8], mrand.Uint64())
		binary.LittleEndian.PutUint64(u[8:], mrand.Uint64())
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		putUUID((*[uuidLen]byte)(b[i*uuidLen:]), &u)
	}
	return string(b)
}

// uuidAt is where each of a UUID's 16 bytes goes in its text.
var uuidAt = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// putUUID writes u as a lowercase UUID: hex.Encode over the five groups,
// which costs a call and bounds checks per group.
func putUUID(t *[uuidLen]byte, u *[16]byte) {
	const digits = "0123456789abcdef"
	for i, at := range uuidAt {
		t[at] = digits[u[i]>>4]
		t[at+1] = digits[u[i]&15]
	}
	t[8], t[13], t[18], t[23] = '-', '-', '-', '-'
}

// newID returns the attempt's next id: from the configured source, or,
// when that is a random UUID source, from a batch minted for the attempt
// (the ids a profile's successful call uses, at once).
func (a *attempt) newID() string {
	if !a.e.randomIDs {
		return a.e.cfg.IDs()
	}
	if len(a.ids) < uuidLen {
		n := 4 // attempt, lease, preflight report, operation
		switch a.ec.Profile {
		case ProfileDurable:
			n = 5 // and the outbox message
		case ProfileGoverned, ProfileCertifiable:
			n = 10 // and the records and gate results
		}
		a.ids = newUUIDs(n)
	}
	id := a.ids[:uuidLen]
	a.ids = a.ids[uuidLen:]
	return id
}
