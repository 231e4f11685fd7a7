package approval_test

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/approval"
	"polc.dev/polc/chain"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/keys"
)

func signer(t testing.TB, name string) (note.Signer, string) {
	t.Helper()
	skey, vkey, err := keys.Generate(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s, vkey
}

func sample(s note.Signer) *approval.Approval {
	now := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
	return &approval.Approval{
		Version: 1, ApprovalID: "00000000-0000-4000-8000-000000000001", RequestID: "00000000-0000-4000-8000-000000000002",
		Decision: approval.DecisionApprove, ApproverClass: "release-manager", GateID: "polc.approval",
		KeyID: s.Name() + "+" + hex8(s.KeyHash()), Nonce: strings.Repeat("a", 64), Note: "ok",
		PolicyDigest: strings.Repeat("b", 64), SubjectDigest: strings.Repeat("c", 64),
		IssuedAt: chain.FormatTime(now), ExpiresAt: chain.FormatTime(now.Add(30 * time.Minute)),
	}
}

func hex8(h uint32) string {
	const d = "0123456789abcdef"
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = d[h&0xf]
		h >>= 4
	}
	return string(b)
}

// TestParseStrict: the signed bytes round-trip; a non-canonical body, an
// unknown or missing member, another version or header, a bad grammar are
// each approval_malformed.
func TestParseStrict(t *testing.T) {
	s, vkey := signer(t, "rm")
	signed, err := approval.Sign(sample(s), s)
	if err != nil {
		t.Fatal(err)
	}
	trust, _ := chain.ParseTrust([]byte("approver:release-manager " + vkey + "\n"))
	if _, _, err := approval.Open(signed, trust, time.Date(2026, 3, 15, 12, 5, 0, 0, time.UTC)); err != nil {
		t.Fatalf("open: %v", err)
	}
	body, _ := jcs.Marshal(sample(s))
	for name, text := range map[string]string{
		"spaces":         strings.Replace(string(body), `":`, `": `, 1),
		"unknown member": strings.Replace(string(body), `{"approval_id"`, `{"approval_by":"x","approval_id"`, 1),
		"missing member": strings.Replace(string(body), `"note":"ok",`, ``, 1),
		"version 2":      strings.Replace(string(body), `"version":1`, `"version":2`, 1),
		"bad nonce":      strings.Replace(string(body), strings.Repeat("a", 64), "aa", 1),
		"empty window":   strings.Replace(string(body), `"expires_at":"2026-03-15T12:30:00.000000Z"`, `"expires_at":"2026-03-15T12:00:00.000000Z"`, 1),
		"bad decision":   strings.Replace(string(body), `"decision":"approve"`, `"decision":"maybe"`, 1),
	} {
		n, err := note.Sign(&note.Note{Text: approval.Header + "\n" + text + "\n"}, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := approval.Parse(n); err == nil || !strings.Contains(err.Error(), approval.CodeMalformed) {
			t.Errorf("%s: %v, want approval_malformed", name, err)
		}
	}
	n, _ := note.Sign(&note.Note{Text: "polc.dev/approval/v2\n" + string(body) + "\n"}, s)
	if _, err := approval.Parse(n); err == nil {
		t.Error("another header parsed")
	}
	// A certifier key of the same name verifies no approval.
	ctrust, _ := chain.ParseTrust([]byte("certifier " + vkey + "\n"))
	if _, _, err := approval.Open(signed, ctrust, time.Date(2026, 3, 15, 12, 5, 0, 0, time.UTC)); err == nil || !strings.Contains(err.Error(), approval.CodeForged) {
		t.Errorf("certifier key: %v, want approval_forged", err)
	}
}

// TestOpenKeyValidAtUse: the approver key must be valid both at the
// approval's issued_at (the signer's choice) and at the time of use: an
// approval backdated into the window of a key that has since expired is
// approval_expired when used after the key's valid_until.
func TestOpenKeyValidAtUse(t *testing.T) {
	s, vkey := signer(t, "rm")
	signed, err := approval.Sign(sample(s), s) // issued 12:00
	if err != nil {
		t.Fatal(err)
	}
	trust, err := chain.ParseTrust([]byte("approver:release-manager " + vkey + " valid_until=2026-03-15T12:10:00Z\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := approval.Open(signed, trust, time.Date(2026, 3, 15, 12, 5, 0, 0, time.UTC)); err != nil {
		t.Errorf("used inside the key's window: %v", err)
	}
	_, _, err = approval.Open(signed, trust, time.Date(2026, 3, 15, 12, 20, 0, 0, time.UTC))
	if err == nil || !strings.Contains(err.Error(), approval.CodeExpired) || !strings.Contains(err.Error(), "time of use") {
		t.Errorf("used after the key's valid_until: %v, want approval_expired", err)
	}
	// A key not yet valid at issued_at is refused as before.
	late, _ := chain.ParseTrust([]byte("approver:release-manager " + vkey + " valid_from=2026-03-15T12:03:00Z\n"))
	if _, _, err := approval.Open(signed, late, time.Date(2026, 3, 15, 12, 5, 0, 0, time.UTC)); err == nil || !strings.Contains(err.Error(), "issued_at") {
		t.Errorf("key not valid at issued_at: %v", err)
	}
}

// FuzzParse: any input either parses into an approval whose canonical
// body is the signed text, or is refused with approval_malformed; never a
// panic.
func FuzzParse(f *testing.F) {
	s, _ := signer(f, "rm")
	signed, err := approval.Sign(sample(s), s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signed)
	f.Add([]byte("polc.dev/approval/v1\n{}\n\n— rm abc\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := approval.Parse(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), approval.CodeMalformed+": ") {
				t.Fatalf("error without its code: %v", err)
			}
			return
		}
		body, err := jcs.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, append(append([]byte(approval.Header+"\n"), body...), '\n')) {
			t.Fatalf("parsed an approval whose canonical form is not the signed text")
		}
	})
}
