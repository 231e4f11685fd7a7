package executor

import (
	"encoding/binary"
	"encoding/hex"
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
		t := b[i*uuidLen : (i+1)*uuidLen]
		hex.Encode(t[0:8], u[0:4])
		t[8] = '-'
		hex.Encode(t[9:13], u[4:6])
		t[13] = '-'
		hex.Encode(t[14:18], u[6:8])
		t[18] = '-'
		hex.Encode(t[19:23], u[8:10])
		t[23] = '-'
		hex.Encode(t[24:36], u[10:16])
	}
	return string(b)
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
