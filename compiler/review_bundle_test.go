package compiler_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/keys"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

func compileSrc(t *testing.T, src string) []*snapshot.Snapshot {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	return res.Snapshots
}

// TestBundleGlobsMatchNewlines: a '*' or '?' in an action, environment,
// principal or tenant glob matches any character in pattern.Match and the
// native evaluator, newline included, and those request values are not
// checked for newlines. The bundle lowered them to RE2 '.', which does not
// match "\n" without the s flag: OPA denied "agent:a\nb" under an
// "agent:*" scope (not_allowed:principal) and missed an environment deny.
func TestBundleGlobsMatchNewlines(t *testing.T) {
	snaps := compileSrc(t, `package p
policies: a: {
	version: "1"
	principals: ["agent:*", "u?"]
	tenants: ["t*"]
	actions: {
		allow: ["se*", "bash"]
		approve: [{pattern: "s?arch*", approver: "lead", expires_after: "1h"}]
	}
	environment: {read: ["*"], deny: ["AWS_*"]}
}
`)
	bb, err := compiler.WriteBundle(snaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eng, err := regoeval.New(ctx, bb)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := decision.Compile(snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	req := func(principal, tenant, action string, env ...string) *normalize.Normalized {
		return &normalize.Normalized{Principal: principal, Tenant: tenant, Action: action, Workspace: "/ws",
			Time: "2026-11-30T12:00:00.000000Z", Paths: []normalize.PathAccess{}, Commands: [][]string{},
			Hosts: []string{}, Env: append([]string{}, env...), Secrets: []string{}}
	}
	for _, r := range []*normalize.Normalized{
		req("agent:a\nb", "t\n", "bash"),
		req("u\n", "t", "bash"),
		req("agent:a", "t", "se\narch"),
		req("agent:a", "t", "bash", "AWS_\nKEY"),
		req("agent:a", "t", "bash", "HOME\n"),
	} {
		nat, _ := pol.Evaluate(r)
		got, err := eng.Evaluate(ctx, "a", r)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(nat, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("principal %q tenant %q action %q env %q: engines disagree (-native +opa):\n%s",
				r.Principal, r.Tenant, r.Action, r.Env, diff)
		}
	}
}

// verifyLikeOPA reads a bundle with signature verification on, as `opa run
// --bundle --verification-key PUB --signing-alg ALG` does (the same bundle
// reader and verifier), and returns the JWT header of its signature.
func verifyLikeOPA(t *testing.T, bb []byte, pub, alg string) (map[string]any, error) {
	t.Helper()
	// The key is given inline, as keys.NewKeyConfig ends with after it
	// has read a file. NewKeyConfig itself first stats its argument as a
	// path: a PEM whose base64 runs 256 bytes without a '/' (a P-521 key,
	// at random) fails that stat with ENAMETOOLONG, which made this test
	// flaky.
	kc := &keys.Config{Key: pub, Algorithm: alg}
	vc := bundle.NewVerificationConfig(map[string]*keys.Config{"default": kc}, "", "", nil)
	b, err := bundle.NewReader(bytes.NewReader(bb)).WithBundleVerificationConfig(vc).Read()
	if err != nil {
		return nil, err
	}
	if len(b.Signatures.Signatures) != 1 {
		t.Fatalf("%d signatures", len(b.Signatures.Signatures))
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(b.Signatures.Signatures[0], ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var hdr map[string]any
	if err := json.Unmarshal(raw, &hdr); err != nil {
		t.Fatal(err)
	}
	return hdr, nil
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func publicPEM(t *testing.T, k crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pemOf("PUBLIC KEY", der))
}

// TestSignKeyEncodings: docs/bundle.md promises ES256 for EC keys by
// default, but the algorithm was guessed from the PEM text ("EC PRIVATE
// KEY"), so an EC key in PKCS #8 ("PRIVATE KEY", what `openssl genpkey`
// and x509.MarshalPKCS8PrivateKey write) was signed as RS256 and failed;
// so did an Ed25519 key, and an EC key after the "EC PARAMETERS" block
// `openssl ecparam -genkey` writes first (OPA decodes only the first PEM
// block). Each now signs with the key's algorithm and verifies as OPA
// verifies. The EC default follows the curve (P-384 used to sign ES256,
// which RFC 7518 reserves for P-256), and an ES algorithm over the wrong
// curve is refused.
func TestSignKeyEncodings(t *testing.T) {
	snaps := compileSrc(t, `package p
policies: a: {version: "1", actions: allow: ["bash"]}
`)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec8, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecSEC1, _ := x509.MarshalECPrivateKey(ec)
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ed8, _ := x509.MarshalPKCS8PrivateKey(ed)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384der, _ := x509.MarshalPKCS8PrivateKey(p384)
	p521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p521der, _ := x509.MarshalECPrivateKey(p521)
	params := pemOf("EC PARAMETERS", []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}) // prime256v1
	for _, tc := range []struct {
		name, alg string
		key       []byte
		pub       string
		explicit  bool // alg given with --sign-alg
	}{
		{"ec pkcs8", "ES256", pemOf("PRIVATE KEY", ec8), publicPEM(t, &ec.PublicKey), false},
		{"ec after parameters", "ES256", append(params, pemOf("EC PRIVATE KEY", ecSEC1)...), publicPEM(t, &ec.PublicKey), false},
		{"ed25519 pkcs8", "EdDSA", pemOf("PRIVATE KEY", ed8), publicPEM(t, ed.Public()), false},
		{"p-384 with ES384", "ES384", pemOf("PRIVATE KEY", p384der), publicPEM(t, &p384.PublicKey), true},
		{"p-384 default", "ES384", pemOf("PRIVATE KEY", p384der), publicPEM(t, &p384.PublicKey), false},
		{"p-521 sec1 default", "ES512", pemOf("EC PRIVATE KEY", p521der), publicPEM(t, &p521.PublicKey), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &compiler.SigningConfig{Key: tc.key}
			if tc.explicit {
				sc.Algorithm = tc.alg
			}
			if err := compiler.CheckSigningConfig(sc); err != nil {
				t.Fatalf("CheckSigningConfig: %v", err)
			}
			bb, err := compiler.WriteBundle(snaps, sc)
			if err != nil {
				t.Fatalf("WriteBundle: %v", err)
			}
			hdr, err := verifyLikeOPA(t, bb, tc.pub, tc.alg)
			if err != nil {
				t.Fatalf("OPA's verification refuses the bundle: %v", err)
			}
			if hdr["alg"] != tc.alg || hdr["kid"] != "default" {
				t.Errorf("JWT header %v, want alg %s kid default", hdr, tc.alg)
			}
		})
	}
	// An ES algorithm over another curve than RFC 7518 gives it is
	// refused up front, naming the one that fits.
	for _, bad := range []struct {
		alg string
		key []byte
	}{{"ES256", pemOf("PRIVATE KEY", p384der)}, {"ES512", pemOf("PRIVATE KEY", ec8)}, {"ES384", pemOf("EC PRIVATE KEY", p521der)}} {
		err := compiler.CheckSigningConfig(&compiler.SigningConfig{Key: bad.key, Algorithm: bad.alg})
		if err == nil || !strings.Contains(err.Error(), "does not sign with") || !strings.Contains(err.Error(), "use ES") {
			t.Errorf("CheckSigningConfig(%s over the wrong curve) = %v, want a refusal naming the fitting algorithm", bad.alg, err)
		}
	}
	// A public key is no signing key: refused up front, not at emit.
	if err := compiler.CheckSigningConfig(&compiler.SigningConfig{Key: []byte(publicPEM(t, &ec.PublicKey))}); err == nil {
		t.Error("CheckSigningConfig accepted a public key")
	}
}
