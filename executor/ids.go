package executor

import (
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
	var buf [10 * uuidLen]byte // up to 10 on the stack: string(...) is the one allocation
	return string(chain.AppendNewUUIDs(buf[:0], n))
}

// newID returns the attempt's next id: from the configured source, or,
// when that is a random UUID source, from a batch minted for the attempt
// (the ids a profile's successful call uses, at once).
func (a *attempt) newID() string {
	if !a.e.randomIDs {
		return a.e.cfg.IDs()
	}
	if len(a.ids) < uuidLen {
		n := 3 // attempt, preflight report, operation
		switch a.ec.Profile {
		case ProfileDurable:
			n = 4 // and the outbox message
		case ProfileGoverned, ProfileCertifiable:
			n = 9 // and the records and gate results
		}
		a.ids = newUUIDs(n)
	}
	id := a.ids[:uuidLen]
	a.ids = a.ids[uuidLen:]
	return id
}
