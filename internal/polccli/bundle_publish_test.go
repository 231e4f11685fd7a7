package polccli

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"
)

// publishEnv is a directory with two bundle keys (a and b, PEM) and the
// fleet policy's revision 1 and 2 sources (v1, v2).
type publishEnv struct {
	t              *testing.T
	dir            string
	e              *env
	stdout, stderr *lockedBuffer
}

func newPublishEnv(t *testing.T) *publishEnv {
	t.Helper()
	dir := t.TempDir()
	pe := &publishEnv{t: t, dir: dir, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	pe.e = &env{stdin: strings.NewReader(""), stdout: pe.stdout, stderr: pe.stderr, dir: dir}
	pe.ok("keygen", "a", "-o", "keys", "--key-format", "pem")
	pe.ok("keygen", "b", "-o", "keys", "--key-format", "pem")
	for i := 1; i <= 2; i++ {
		src := filepath.Join(dir, fmt.Sprintf("v%d", i))
		os.MkdirAll(src, 0o755)
		os.WriteFile(filepath.Join(src, "p.cue"), []byte(fleetPolicy(i)), 0o644)
	}
	return pe
}

// run runs polc and returns its stdout, stderr and exit code.
func (pe *publishEnv) run(args ...string) (string, string, int) {
	pe.t.Helper()
	o, e := len(pe.stdout.String()), len(pe.stderr.String())
	code := Run(context.Background(), args, pe.e)
	return pe.stdout.String()[o:], pe.stderr.String()[e:], code
}

func (pe *publishEnv) ok(args ...string) string {
	pe.t.Helper()
	out, errOut, code := pe.run(args...)
	if code != 0 {
		pe.t.Fatalf("polc %v: exit %d\n%s", args, code, errOut)
	}
	return out
}

// refused runs polc, wants exit 2 and a message on stderr containing want.
func (pe *publishEnv) refused(want string, args ...string) {
	pe.t.Helper()
	out, errOut, code := pe.run(args...)
	if code != ExitUsage || !strings.Contains(errOut, want) {
		pe.t.Errorf("polc %v: exit %d, stderr %q, stdout %q; want exit 2 and %q", args, code, errOut, out, want)
	}
}

// compile compiles revision i's source to OUT, signed with key ("" for
// none), and returns the bundle's bytes.
func (pe *publishEnv) compile(i int, out, key string) []byte {
	pe.t.Helper()
	args := []string{"compile", fmt.Sprintf("v%d", i), "-o", out}
	if key != "" {
		args = append(args, "--sign-key", "keys/"+key+".pem")
	}
	pe.ok(args...)
	return pe.read(out + "/bundle.tar.gz")
}

func (pe *publishEnv) read(name string) []byte {
	pe.t.Helper()
	b, err := os.ReadFile(filepath.Join(pe.dir, name))
	if err != nil {
		pe.t.Fatal(err)
	}
	return b
}

// current is the current bundle of the layout srv.
func (pe *publishEnv) current() []byte { return pe.read("srv/bundles/polc.tar.gz") }

// TestBundlePublishLayout: publish writes the revision's file and the
// current bundle, prints the revision and the ETag serve will send, keeps
// earlier revisions, and rolls back by publishing one of them again.
func TestBundlePublishLayout(t *testing.T) {
	pe := newPublishEnv(t)
	b1, b2 := pe.compile(1, "o1", "a"), pe.compile(2, "o2", "a")
	r1, r2 := manifestRevision(t, b1), manifestRevision(t, b2)
	key := []string{"--verification-key", "keys/a.pub.pem"}

	out := pe.ok(append([]string{"bundle", "publish", "o1/bundle.tar.gz", "srv"}, key...)...)
	if want := r1 + " " + bundleETag(b1) + "\n"; out != want {
		t.Errorf("publish printed %q, want %q", out, want)
	}
	if !bytes.Equal(pe.current(), b1) || !bytes.Equal(pe.read("srv/revisions/"+r1+".tar.gz"), b1) {
		t.Fatal("revision 1 is not the current bundle and its revision's file")
	}
	pe.ok(append([]string{"bundle", "publish", "o2/bundle.tar.gz", "srv"}, key...)...)
	if !bytes.Equal(pe.current(), b2) || !bytes.Equal(pe.read("srv/revisions/"+r1+".tar.gz"), b1) || !bytes.Equal(pe.read("srv/revisions/"+r2+".tar.gz"), b2) {
		t.Fatal("after revision 2: not current, or revision 1's file changed")
	}
	// Rollback.
	out = pe.ok(append([]string{"bundle", "publish", "srv/revisions/" + r1 + ".tar.gz", "srv"}, key...)...)
	if !bytes.Equal(pe.current(), b1) || out != r1+" "+bundleETag(b1)+"\n" {
		t.Errorf("rollback to revision 1: current is not its file (%q)", out)
	}
	entries, _ := os.ReadDir(filepath.Join(pe.dir, "srv", "revisions"))
	if len(entries) != 2 {
		t.Errorf("revisions/ holds %d files, want 2 (no temporary file left)", len(entries))
	}
}

// TestBundlePublishSameRevision: a revision names one bundle. Signed again
// (another ECDSA signature, other bytes), it keeps the file published, so
// that the fleet downloads nothing; signed under a key the fleet now
// verifies with instead, it replaces it; another bundle claiming the
// revision is refused and changes nothing.
func TestBundlePublishSameRevision(t *testing.T) {
	pe := newPublishEnv(t)
	first := pe.compile(1, "o1", "a")
	again := pe.compile(1, "o1again", "a")
	if bytes.Equal(first, again) {
		t.Fatal("two signatures gave the same bytes: the test would test nothing")
	}
	rev := manifestRevision(t, first)
	pe.ok("bundle", "publish", "o1/bundle.tar.gz", "srv", "--verification-key", "keys/a.pub.pem")
	before, err := os.Stat(filepath.Join(pe.dir, "srv", "bundles", "polc.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	out := pe.ok("bundle", "publish", "o1again/bundle.tar.gz", "srv", "--verification-key", "keys/a.pub.pem")
	if !bytes.Equal(pe.current(), first) || !bytes.Equal(pe.read("srv/revisions/"+rev+".tar.gz"), first) || out != rev+" "+bundleETag(first)+"\n" {
		t.Errorf("the same revision signed again replaced the published file (%q)", out)
	}
	// Not even rewritten: a static server's ETag (size and modification
	// time) stays the same.
	if after, err := os.Stat(filepath.Join(pe.dir, "srv", "bundles", "polc.tar.gz")); err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the unchanged current bundle was rewritten: %v", err)
	}

	// The fleet moves to key b: the file signed by a no longer verifies.
	underB := pe.compile(1, "o1b", "b")
	pe.ok("bundle", "publish", "o1b/bundle.tar.gz", "srv", "--verification-key", "keys/b.pub.pem")
	if !bytes.Equal(pe.current(), underB) || !bytes.Equal(pe.read("srv/revisions/"+rev+".tar.gz"), underB) {
		t.Error("the revision re-signed under the fleet's new key did not replace the old signature")
	}

	// Another bundle with this revision (not one polc wrote).
	forged := filepath.Join(pe.dir, "forged.tar.gz")
	os.WriteFile(forged, testBundle(t, rev, map[string]any{"other": true}), 0o644)
	pe.ok("bundle", "publish", "o1/bundle.tar.gz", "plain", "--verification-key", "keys/a.pub.pem")
	plainU := pe.compile(1, "o1u", "")
	pe.ok("bundle", "publish", "o1u/bundle.tar.gz", "unsigned-srv", "--unsigned")
	pe.refused("already published with other files", "bundle", "publish", "forged.tar.gz", "unsigned-srv", "--unsigned")
	if !bytes.Equal(pe.read("unsigned-srv/bundles/polc.tar.gz"), plainU) || !bytes.Equal(pe.read("unsigned-srv/revisions/"+rev+".tar.gz"), plainU) {
		t.Error("a refused publish changed the layout")
	}
}

// testBundle is an unsigned bundle with this manifest revision and data.
func testBundle(t *testing.T, rev string, data map[string]any) []byte {
	t.Helper()
	b := bundle.Bundle{Manifest: bundle.Manifest{Revision: rev, Roots: &[]string{"polc"}}, Data: map[string]any{"polc": data}}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestBundlePublishRefuses: whatever the fleet would refuse, publish
// refuses first (exit 2, invalid_input at the bundle), writing nothing:
// an unsigned, a tampered and a foreign-signed bundle under a key; a
// signed one with --unsigned; a revision that cannot name a file. Keys and
// flags that cannot verify are usage or input errors.
func TestBundlePublishRefuses(t *testing.T) {
	pe := newPublishEnv(t)
	signed := pe.compile(1, "o1", "a")
	pe.compile(1, "o1u", "")
	os.WriteFile(filepath.Join(pe.dir, "tampered.tar.gz"), rewriteBundleData(t, signed), 0o644)
	os.WriteFile(filepath.Join(pe.dir, "dots.tar.gz"), testBundle(t, "../../x", nil), 0o644)
	os.WriteFile(filepath.Join(pe.dir, "norev.tar.gz"), testBundle(t, "", nil), 0o644)
	os.WriteFile(filepath.Join(pe.dir, "garbage.tar.gz"), []byte("not a bundle"), 0o644)
	key := []string{"--verification-key", "keys/a.pub.pem"}
	for _, c := range []struct {
		want string
		args []string
	}{
		{"bundle missing .signatures.json file", append([]string{"o1u/bundle.tar.gz"}, key...)},
		{"digest mismatch", append([]string{"tampered.tar.gz"}, key...)},
		{"failed to verify", []string{"o1/bundle.tar.gz", "--verification-key", "keys/b.pub.pem"}},
		{"verification key not provided", []string{"o1/bundle.tar.gz", "--unsigned"}},
		{`bundle revision "../../x" cannot name a file`, []string{"dots.tar.gz", "--unsigned"}},
		{`bundle revision "" cannot name a file`, []string{"norev.tar.gz", "--unsigned"}},
		{"garbage.tar.gz: invalid_input: bundle refused", []string{"garbage.tar.gz", "--unsigned"}},
		{"missing.tar.gz: io_error", []string{"missing.tar.gz", "--unsigned"}},
		{"bundle publish needs --verification-key", []string{"o1/bundle.tar.gz"}},
		{"exclude each other", append([]string{"o1/bundle.tar.gz", "--unsigned"}, key...)},
		{"--signing-alg needs --verification-key", []string{"o1/bundle.tar.gz", "--signing-alg", "ES256"}},
		{"keys/a.pem: invalid_input: cannot verify with this key: this is a private key", []string{"o1/bundle.tar.gz", "--verification-key", "keys/a.pem"}},
		{"ES384 does not verify with this key (ES256 would)", append([]string{"o1/bundle.tar.gz", "--signing-alg", "ES384"}, key...)},
		{"RS256 does not verify with this key", append([]string{"o1/bundle.tar.gz", "--signing-alg", "RS256"}, key...)},
		{"unknown algorithm XS1", append([]string{"o1/bundle.tar.gz", "--signing-alg", "XS1"}, key...)},
		{"not a PEM public key", []string{"o1/bundle.tar.gz", "--verification-key", "v1/p.cue"}},
		{"HS256 takes an HMAC secret, not a PEM key", append([]string{"o1/bundle.tar.gz", "--signing-alg", "HS256"}, key...)},
		{"keys/none.pem: io_error", []string{"o1/bundle.tar.gz", "--verification-key", "keys/none.pem"}},
	} {
		pe.refused(c.want, append([]string{"bundle", "publish", c.args[0], "srv"}, c.args[1:]...)...)
		if _, err := os.Stat(filepath.Join(pe.dir, "srv")); err == nil {
			t.Fatalf("publish %v wrote srv", c.args)
		}
	}
}

// TestBundlePublishKeyTypes: the algorithm follows the public key (RSA:
// RS256, P-384: ES384) as it does when compile signs, and a certificate
// holding the key verifies too (OPA reads one).
func TestBundlePublishKeyTypes(t *testing.T) {
	pe := newPublishEnv(t)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]any{"rsa": rk, "p384": ek} {
		der, _ := x509.MarshalPKCS8PrivateKey(k)
		os.WriteFile(filepath.Join(pe.dir, "keys", name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
		pub := k.(crypto.Signer).Public()
		der, _ = x509.MarshalPKIXPublicKey(pub)
		os.WriteFile(filepath.Join(pe.dir, "keys", name+".pub.pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
		pe.compile(1, "o-"+name, name)
		pe.ok("bundle", "publish", "o-"+name+"/bundle.tar.gz", "srv-"+name, "--verification-key", "keys/"+name+".pub.pem")
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ek.PublicKey, ek)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(pe.dir, "keys", "p384.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert}), 0o644)
	pe.ok("bundle", "publish", "o-p384/bundle.tar.gz", "srv-crt", "--verification-key", "keys/p384.crt")
	// RSA PKCS #1 public key block, and PS256 over an RSA key: the
	// bundle is RS256, so PS256 does not verify it.
	der := x509.MarshalPKCS1PublicKey(&rk.PublicKey)
	os.WriteFile(filepath.Join(pe.dir, "keys", "rsa1.pub.pem"), pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: der}), 0o644)
	pe.ok("bundle", "publish", "o-rsa/bundle.tar.gz", "srv-rsa1", "--verification-key", "keys/rsa1.pub.pem")
	pe.refused("failed to verify", "bundle", "publish", "o-rsa/bundle.tar.gz", "srv-ps", "--verification-key", "keys/rsa.pub.pem", "--signing-alg", "PS256")
}

// TestBundlePublishUnsignedOverSigned: --unsigned over a directory whose
// current bundle is signed is refused (exit 2, at the current bundle,
// nothing written): a fleet that verifies signatures would refuse the
// unsigned bundle and go on running the old one without a word.
// --replace-signed says the fleet no longer verifies; unsigned over
// unsigned needs nothing.
func TestBundlePublishUnsignedOverSigned(t *testing.T) {
	pe := newPublishEnv(t)
	signed := pe.compile(1, "o1", "a")
	pe.compile(2, "o2u", "")
	os.MkdirAll(filepath.Join(pe.dir, "o3u"), 0o755)
	os.WriteFile(filepath.Join(pe.dir, "o3u", "bundle.tar.gz"), testBundle(t, "r3", nil), 0o644)
	pe.ok("bundle", "publish", "o1/bundle.tar.gz", "srv", "--verification-key", "keys/a.pub.pem")
	pe.refused("srv/bundles/polc.tar.gz: invalid_input: the current bundle is signed", "bundle", "publish", "o2u/bundle.tar.gz", "srv", "--unsigned")
	if !bytes.Equal(pe.current(), signed) {
		t.Fatal("a refused publish changed the current bundle")
	}
	if entries, _ := os.ReadDir(filepath.Join(pe.dir, "srv", "revisions")); len(entries) != 1 {
		t.Fatalf("a refused publish wrote a revision: %v", entries)
	}
	pe.refused("--replace-signed is for --unsigned", "bundle", "publish", "o2u/bundle.tar.gz", "srv", "--replace-signed", "--verification-key", "keys/a.pub.pem")
	pe.ok("bundle", "publish", "o2u/bundle.tar.gz", "srv", "--unsigned", "--replace-signed")
	pe.ok("bundle", "publish", "o3u/bundle.tar.gz", "srv", "--unsigned")
	if !bytes.Equal(pe.current(), pe.read("o3u/bundle.tar.gz")) {
		t.Fatal("unsigned over unsigned was not published")
	}
}

// TestBundlePublishSerialized: a publish holds DIR's lock from its check of
// the current bundle to its write. An --unsigned publish that found no
// signed bundle, paused there, makes a signed publish of the same DIR wait;
// without the lock the signed one lands first and the unsigned one then
// replaces it, leaving the fleet's verified bundle unsigned.
func TestBundlePublishSerialized(t *testing.T) {
	pe := newPublishEnv(t)
	signed := pe.compile(1, "o1", "a")
	pe.compile(2, "o2u", "")
	paused, resume := make(chan struct{}), make(chan struct{})
	publishChecked = func(p *bundlePublishParams) {
		if p.unsigned {
			close(paused)
			<-resume
		}
	}
	t.Cleanup(func() { publishChecked = nil })
	run := func(args ...string) chan int {
		done := make(chan int, 1)
		e := &env{stdin: strings.NewReader(""), stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, dir: pe.dir}
		go func() { done <- Run(context.Background(), args, e) }()
		return done
	}
	unsigned := run("bundle", "publish", "o2u/bundle.tar.gz", "srv", "--unsigned")
	<-paused
	signedDone := run("bundle", "publish", "o1/bundle.tar.gz", "srv", "--verification-key", "keys/a.pub.pem")
	select {
	case code := <-signedDone:
		signedDone <- code
		t.Log("the signed publish did not wait for the unsigned one")
	case <-time.After(500 * time.Millisecond):
	}
	close(resume)
	if code := <-unsigned; code != 0 {
		t.Fatalf("unsigned publish: exit %d", code)
	}
	if code := <-signedDone; code != 0 {
		t.Fatalf("signed publish: exit %d", code)
	}
	if !bytes.Equal(pe.current(), signed) {
		t.Fatal("the current bundle is the unsigned one, published over the signed one without --replace-signed")
	}
}
