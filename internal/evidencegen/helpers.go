package evidencegen

import (
	"crypto/ed25519"
	"crypto/sha256"

	"golang.org/x/mod/sumdb/note"
)

type noteSigner = note.Signer

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

// signNote signs an arbitrary note body.
func signNote(body string, keys ...*Key) ([]byte, error) {
	var ss []note.Signer
	for _, k := range keys {
		ss = append(ss, k.Signer)
	}
	return note.Sign(&note.Note{Text: body}, ss...)
}

// smallOrderVKey returns a verifier key whose public key is the identity
// point: anything "verifies" under a small-order key in lax implementations.
func smallOrderVKey(name string) string {
	pub := make(ed25519.PublicKey, 32)
	pub[0] = 1
	v, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		panic(err)
	}
	return v
}
