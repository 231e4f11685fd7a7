package keys

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/chain"
)

func TestWriteRoundTrip(t *testing.T) {
	dir := t.TempDir()
	f, err := Write(dir, "log.example", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(f.Signer)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("signer key mode %v, want 0600", st.Mode().Perm())
	}
	signer, err := ReadSigner(f.Signer)
	if err != nil {
		t.Fatal(err)
	}
	vb, _ := os.ReadFile(f.Verifier)
	if strings.TrimSpace(string(vb)) != f.VKey {
		t.Fatalf("vkey file %q != %q", vb, f.VKey)
	}
	// The vkey goes straight into a trust file and verifies what the
	// signer key signs.
	trust, err := chain.ParseTrust([]byte("log " + f.VKey + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := note.Sign(&note.Note{Text: "hello\n"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := note.NewVerifier(f.VKey)
	if _, err := note.Open(msg, note.VerifierList(v)); err != nil {
		t.Fatal(err)
	}
	if trust.Keys[0].Name != "log.example" {
		t.Fatalf("name %q", trust.Keys[0].Name)
	}
	// Never overwrite.
	if _, err := Write(dir, "log.example", rand.Reader); err == nil {
		t.Fatal("second Write overwrote the keys")
	}
	if b, _ := os.ReadFile(f.Verifier); !bytes.Equal(b, vb) {
		t.Fatal("vkey changed")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".keygen-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestInvalidNames(t *testing.T) {
	for _, n := range []string{"", "a b", "a+b", "a/b", "..", "."} {
		if _, err := Write(t.TempDir(), n, rand.Reader); err == nil {
			t.Errorf("name %q accepted", n)
		}
	}
}

// A bundle key is not an evidence key: ReadSigner names the mix-up.
func TestReadSignerRefusesPEM(t *testing.T) {
	dir := t.TempDir()
	f, err := WritePEM(dir, "bundle", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSigner(f.Private); err == nil || !strings.Contains(err.Error(), "is a PEM key") {
		t.Fatalf("ReadSigner(PEM key) = %v, want a refusal naming the PEM key", err)
	}
}
