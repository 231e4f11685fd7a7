// Package keys generates the Ed25519 signing keys of polc's evidence layer:
// log keys sign checkpoints, certifier keys sign task certificates. Keys use
// the signed-note encodings of golang.org/x/mod/sumdb/note:
//
//	signer key    PRIVATE+KEY+<name>+<hex8>+<base64(0x01 || seed)>
//	verifier key  <name>+<hex8>+<base64(0x01 || public key)>
//
// where hex8 is the first four bytes of SHA-256(name || "\n" || 0x01 || public
// key). A trust file line is "<role> <verifier key>".
package keys

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// ValidName reports whether name can name a key: non-empty UTF-8 without
// spaces or '+', and usable as a file name (no '/' and not "." or "..").
func ValidName(name string) bool {
	return name != "" && utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsSpace) < 0 &&
		!strings.ContainsAny(name, "+/\\") && name != "." && name != ".."
}

// Generate returns a new signer key and its verifier key for name, drawing
// randomness from rand (crypto/rand.Reader in production).
func Generate(rand io.Reader, name string) (skey, vkey string, err error) {
	if !ValidName(name) {
		return "", "", fmt.Errorf("keys: invalid key name %q (no spaces, '+' or '/')", name)
	}
	return note.GenerateKey(rand, name)
}

// Files names the two files Write creates.
type Files struct {
	Signer   string // <dir>/<name>.key, mode 0600
	Verifier string // <dir>/<name>.vkey
	VKey     string // the verifier key itself
}

// Write generates a key pair for name and writes <dir>/<name>.key (the
// signer key and a newline, mode 0600) and <dir>/<name>.vkey (the verifier
// key and a newline). Each file is written to a temporary file, synced and
// linked into place, so a crash leaves either the whole file or none; an
// existing file is never overwritten. This is what `polc keygen NAME` runs.
func Write(dir, name string, rand io.Reader) (Files, error) {
	skey, vkey, err := Generate(rand, name)
	if err != nil {
		return Files{}, err
	}
	f := Files{Signer: filepath.Join(dir, name+".key"), Verifier: filepath.Join(dir, name+".vkey"), VKey: vkey}
	for _, p := range []string{f.Signer, f.Verifier} {
		if _, err := os.Lstat(p); err == nil {
			return Files{}, fmt.Errorf("keys: %s already exists", p)
		}
	}
	if err := writeNew(f.Signer, skey+"\n", 0o600); err != nil {
		return Files{}, err
	}
	if err := writeNew(f.Verifier, vkey+"\n", 0o644); err != nil {
		os.Remove(f.Signer)
		return Files{}, err
	}
	return f, nil
}

// PEMFiles names the two files WritePEM creates.
type PEMFiles struct {
	Private string // <dir>/<name>.pem, mode 0600
	Public  string // <dir>/<name>.pub.pem
}

// BundleAlgorithm is the JWT algorithm of the keys WritePEM makes. OPA
// v1 verifies EdDSA bundle signatures only when the algorithm is given on
// its command line (its configuration file's keys accept RS, PS, ES and HS
// algorithms only), so bundle keys are ECDSA P-256, which both accept.
const BundleAlgorithm = "ES256"

// WritePEM generates an ECDSA P-256 key pair for signing OPA bundles
// (polc compile --sign-key) and writes <dir>/<name>.pem (the private key,
// PKCS #8 PEM, mode 0600) and <dir>/<name>.pub.pem (the public key, PKIX
// PEM, what opa run --verification-key takes). As with Write, each file
// appears whole or not at all and an existing file is never overwritten.
// This is what `polc keygen NAME --key-format pem` runs.
func WritePEM(dir, name string, rand io.Reader) (PEMFiles, error) {
	if !ValidName(name) {
		return PEMFiles{}, fmt.Errorf("keys: invalid key name %q (no spaces, '+' or '/')", name)
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand)
	if err != nil {
		return PEMFiles{}, err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return PEMFiles{}, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return PEMFiles{}, err
	}
	f := PEMFiles{Private: filepath.Join(dir, name+".pem"), Public: filepath.Join(dir, name+".pub.pem")}
	for _, p := range []string{f.Private, f.Public} {
		if _, err := os.Lstat(p); err == nil {
			return PEMFiles{}, fmt.Errorf("keys: %s already exists", p)
		}
	}
	if err := writeNew(f.Private, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv})), 0o600); err != nil {
		return PEMFiles{}, err
	}
	if err := writeNew(f.Public, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})), 0o644); err != nil {
		os.Remove(f.Private)
		return PEMFiles{}, err
	}
	return f, nil
}

// writeNew writes data to path atomically and fails if path exists.
func writeNew(path, data string, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keygen-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("keys: %s already exists", path)
		}
		return err
	}
	return nil
}

// ReadSigner reads a signer key file written by Write.
func ReadSigner(path string) (note.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(strings.TrimSpace(string(b)), "-----BEGIN") {
		// A bundle key (keygen --key-format pem) given where an evidence
		// key belongs: say so rather than "malformed verifier id".
		return nil, fmt.Errorf("keys: %s is a PEM key (a bundle signing key); checkpoints and certificates are signed with a polc keygen evidence key (NAME.key, the default --key-format note)", path)
	}
	s, err := note.NewSigner(strings.TrimSuffix(string(b), "\n"))
	if err != nil {
		return nil, fmt.Errorf("keys: %s: %v", path, err)
	}
	return s, nil
}
