package compiler_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/open-policy-agent/opa/v1/bundle"

	"polc.dev/polc/compiler"
)

// bundleRevision reads the manifest revision of a bundle.
func bundleRevision(t *testing.T, b []byte) string {
	t.Helper()
	rd := bundle.NewReader(bytes.NewReader(b)).WithSkipBundleVerification(true)
	bb, err := rd.Read()
	if err != nil {
		t.Fatal(err)
	}
	return bb.Manifest.Revision
}

// TestBundleRevisionNamesContent: the manifest revision names what the
// bundle holds. It was a digest of the snapshots alone, so a bundle whose
// decision module changed (another polc version) kept the revision of the
// old one: an OPA fleet's status could not tell the two apart, and
// polc bundle publish would find one revision naming two bundles. A
// signature, which ECDSA makes different each time, changes nothing.
func TestBundleRevisionNamesContent(t *testing.T) {
	src := `package p
policies: a: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
}
`
	snaps := compileSrc(t, src)
	write := func() string {
		b, err := compiler.WriteBundle(snaps, nil)
		if err != nil {
			t.Fatal(err)
		}
		return bundleRevision(t, b)
	}
	base := write()
	if again := write(); again != base {
		t.Fatalf("revision not deterministic: %s, %s", base, again)
	}

	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	sc := &compiler.SigningConfig{Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})}
	s1, err := compiler.WriteBundle(snaps, sc)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := compiler.WriteBundle(snaps, sc)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(s1, s2) {
		t.Fatal("two ES256 signatures are the same bytes: the signature check below tests nothing")
	}
	if r1, r2 := bundleRevision(t, s1), bundleRevision(t, s2); r1 != base || r2 != base {
		t.Errorf("signed revisions %s, %s; unsigned %s", r1, r2, base)
	}

	// The module changes, the snapshots do not.
	saved := compiler.DecisionRego
	compiler.DecisionRego += "\n# another polc version\n"
	changed := write()
	compiler.DecisionRego = saved
	if changed == base {
		t.Errorf("a bundle with another decision module has the same revision %s", base)
	}

	// The policy changes.
	other := compileSrc(t, src[:len(src)-2]+"\tfilesystem: read: [\"**\"]\n}\n")
	b, err := compiler.WriteBundle(other, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := bundleRevision(t, b); r == base {
		t.Errorf("a bundle of another policy has the same revision %s", base)
	}
}
