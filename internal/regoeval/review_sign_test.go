package regoeval_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/compiler"
)

// TestOPAServerPKCS8ECBundle: a bundle signed with an EC key in PKCS #8
// form (what `openssl genpkey -algorithm EC` writes), with the default
// algorithm, is served by the real `opa run --verification-key PUB
// --signing-alg ES256` (ES384 for a P-384 key) and decides as the native
// evaluator. polc used to
// pick RS256 for any key not spelled "EC PRIVATE KEY" and fail to sign.
func TestOPAServerPKCS8ECBundle(t *testing.T) {
	bin := opaBinary(t)
	snaps, cases := examples(t)
	// The default algorithm follows the curve (RFC 7518 §3.4): P-384 signs
	// ES384, which `opa run --signing-alg ES384` verifies.
	for _, c := range []struct {
		curve elliptic.Curve
		alg   string
	}{{elliptic.P256(), "ES256"}, {elliptic.P384(), "ES384"}} {
		t.Run(c.alg, func(t *testing.T) {
			dir := t.TempDir()
			k, err := ecdsa.GenerateKey(c.curve, rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			der, _ := x509.MarshalPKCS8PrivateKey(k)
			pubDER, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
			pubPath := filepath.Join(dir, "pub.pem")
			os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
			signed, err := compiler.WriteBundle(snaps, &compiler.SigningConfig{Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "signed.tar.gz")
			os.WriteFile(path, signed, 0o644)
			srv := startServer(t, bin, "--bundle", "--verification-key", pubPath, "--signing-alg", c.alg, path)
			select {
			case <-srv.exited:
				t.Fatalf("opa exited: %v\n%s", srv.err, srv.output)
			default:
			}
			for _, c := range cases[:3] {
				got := queryServer(t, srv.addr, c)
				if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s %s: server differs from native:\n%s", c.policy, c.req.Action, diff)
				}
			}
		})
	}
}
