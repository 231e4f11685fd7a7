package certificate_test

import (
	"bytes"
	"testing"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
)

// TestVerifyRefusesOversizedSnapshot: a snapshot over MaxSnapshotBytes
// cannot be the policy; Verify reports policy_mismatch without parsing it
// (certverify reads no more than the limit, so a hostile multi-gigabyte
// snapshot is never buffered whole).
func TestVerifyRefusesOversizedSnapshot(t *testing.T) {
	s := evidencegen.NewSmall()
	trust, err := chain.ParseTrust(s.Trust)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(snap []byte) *certificate.Report {
		rep, err := certificate.Verify(certificate.VerifyInput{Certificate: s.Signed, Chain: bytes.NewReader(s.Chain), Snapshot: snap, Trust: trust})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := verify(s.Snapshot); !rep.Anchored || len(rep.Findings) != 0 {
		t.Fatalf("valid snapshot: %v", rep.Findings)
	}
	// The valid snapshot followed by spaces: too large before anything
	// else is said about it.
	huge := append(append([]byte(nil), s.Snapshot...), bytes.Repeat([]byte(" "), certificate.MaxSnapshotBytes)...)
	rep := verify(huge)
	if rep.Anchored || len(rep.Findings) != 1 || rep.Findings[0].Code != chain.CodePolicyMismatch || !bytes.Contains([]byte(rep.Findings[0].Message), []byte("exceeds")) {
		t.Fatalf("oversized snapshot: anchored %v, findings %v; want one policy_mismatch", rep.Anchored, rep.Findings)
	}
}
