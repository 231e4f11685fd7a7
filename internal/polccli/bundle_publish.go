package polccli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/keys"
	"github.com/spf13/cobra"

	"polc.dev/polc/internal/atomicfile"
	"polc.dev/polc/internal/diag"
)

type bundlePublishParams struct {
	bundle, dir     string
	verificationKey string
	signingAlg      string
	unsigned        bool
	replaceSigned   bool
}

func newBundlePublishCmd(e *env) *cobra.Command {
	p := &bundlePublishParams{}
	c := &cobra.Command{
		Use:   "publish BUNDLE DIR (--verification-key KEY | --unsigned)",
		Short: "Make a bundle the current revision of a bundle-server directory",
		Long: `publish checks BUNDLE (a polc compile bundle.tar.gz) as the OPA servers of
the fleet will, then writes it into DIR, the directory that polc bundle
serve (or any static HTTP server) serves:

  DIR/revisions/<revision>.tar.gz   the bundle of each revision published
  DIR/bundles/polc.tar.gz           the current bundle, what OPA polls

The revision is the bundle manifest's. Both files are written under a
temporary name, synced and renamed into place, so that a server never
sends part of a bundle. A revision, once published, names one bundle:
publishing it again with the same files (a new signature aside) keeps the
published file, unless that one no longer verifies under the key given;
with other files it is refused. To roll back, publish
DIR/revisions/<revision>.tar.gz again.

--verification-key is the public key (PEM) the fleet verifies with; the
algorithm follows it (RS256 for RSA, ES256/ES384/ES512 for P-256/P-384/P-521,
EdDSA for Ed25519) unless --signing-alg says otherwise (as opa run's flag of
that name; HS256, HS384 and HS512 take a secret file). A bundle that does
not verify (unsigned, changed after signing, signed by another key) is
refused and nothing is written. --unsigned publishes for a fleet that
verifies nothing; a signed bundle is refused then, as such an OPA refuses it.
--unsigned over a DIR whose current bundle is signed is refused too: a
fleet that verifies signatures would refuse the unsigned bundle and keep
running the old one. --replace-signed publishes it anyway, once the fleet
no longer verifies.

Prints "<revision> <etag>": the ETag polc bundle serve sends for it.
Exit 0 when published, 2 when refused or on bad input.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			p.bundle, p.dir = args[0], args[1]
			return runBundlePublish(c.Context(), e, p)
		},
	}
	c.Flags().StringVar(&p.verificationKey, "verification-key", "", "the public key (PEM) the fleet verifies bundles with")
	c.Flags().StringVar(&p.signingAlg, "signing-alg", "", "the signature algorithm the fleet verifies (default: the key's, RS256 for RSA)")
	c.Flags().BoolVar(&p.unsigned, "unsigned", false, "publish for a fleet that verifies no signature (the bundle must be unsigned)")
	c.Flags().BoolVar(&p.replaceSigned, "replace-signed", false, "with --unsigned: publish even though DIR's current bundle is signed (the fleet no longer verifies)")
	return c
}

func runBundlePublish(_ context.Context, e *env, p *bundlePublishParams) error {
	switch {
	case p.signingAlg != "" && p.verificationKey == "":
		return usagef("--signing-alg needs --verification-key")
	case p.verificationKey == "" && !p.unsigned:
		// Refused, not defaulted: an unchecked bundle would reach the fleet.
		return usagef("bundle publish needs --verification-key KEY (the fleet's public key) or --unsigned")
	case p.verificationKey != "" && p.unsigned:
		return usagef("--verification-key and --unsigned exclude each other")
	case p.replaceSigned && !p.unsigned:
		return usagef("--replace-signed is for --unsigned")
	}
	var vc *bundle.VerificationConfig
	if p.verificationKey != "" {
		name, key, err := readInput(e, p.verificationKey)
		if err != nil {
			return reportOne(e, diag.Pos{File: name}, diag.CodeIO, "cannot read verification key: %v", err)
		}
		kc, err := verificationKey(key, p.signingAlg)
		if err != nil {
			return reportOne(e, diag.Pos{File: name}, diag.CodeInvalidInput, "cannot verify with this key: %v", err)
		}
		vc = bundle.NewVerificationConfig(map[string]*keys.Config{"polc": kc}, "polc", "", nil)
	}
	src := e.abs(p.bundle)
	srcName := diag.Rel(e.dir, src)
	data, err := readBounded(src, maxPublishedBundle)
	if err != nil {
		return reportOne(e, diag.Pos{File: srcName}, diag.CodeIO, "cannot read bundle: %v", err)
	}
	rev, err := verifyBundle(data, vc)
	if err != nil {
		return reportOne(e, diag.Pos{File: srcName}, diag.CodeInvalidInput, "bundle refused (as the fleet would refuse it): %v", err)
	}
	if !servedName.MatchString(rev + bundleExt) {
		return reportOne(e, diag.Pos{File: srcName}, diag.CodeInvalidInput,
			"bundle revision %q cannot name a file: want 1 to 128 letters, digits, '.', '_' or '-', not beginning with '.', '_' or '-'", rev)
	}
	dir := e.abs(p.dir)
	// One publish at a time per directory, from its check of the current
	// bundle to its write: two at once could each pass the check and the
	// later write an unsigned bundle over a signed one.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, dir)}, diag.CodeIO, "cannot publish: %v", err)
	}
	unlock, err := lockPublish(filepath.Join(dir, publishLock))
	if err != nil {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, dir)}, diag.CodeIO, "cannot lock the directory for publishing: %v", err)
	}
	defer unlock()
	if p.unsigned && !p.replaceSigned {
		// A fleet that verifies signatures refuses an unsigned bundle
		// and keeps the old one: the switch must be said.
		cur := filepath.Join(dir, bundlesDir, bundleName+bundleExt)
		if old, err := readBounded(cur, maxPublishedBundle); err == nil && !unsignedBundle(old) {
			return reportOne(e, diag.Pos{File: diag.Rel(e.dir, cur)}, diag.CodeInvalidInput,
				"the current bundle is signed (or unreadable): a fleet that verifies signatures would refuse an unsigned one and keep running this; publish with --verification-key, or add --replace-signed once the fleet verifies no signature")
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return reportOne(e, diag.Pos{File: diag.Rel(e.dir, cur)}, diag.CodeIO, "cannot read the current bundle: %v", err)
		}
	}
	if publishChecked != nil {
		publishChecked(p)
	}
	current, err := publishRevision(dir, rev, data, vc)
	if err != nil {
		var c *revisionConflict
		if errors.As(err, &c) {
			return reportOne(e, diag.Pos{File: srcName}, diag.CodeInvalidInput, "%v", err)
		}
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, dir)}, diag.CodeIO, "cannot publish: %v", err)
	}
	fmt.Fprintf(e.stdout, "%s %s\n", rev, bundleETag(current))
	return nil
}

// publishLock is the file in DIR whose lock a publish holds; bundle serve
// never serves it (its name begins with '.').
const publishLock = ".publish.lock"

// publishChecked, when set (tests), runs between a publish's check of the
// current bundle and its write.
var publishChecked func(*bundlePublishParams)

// revisionConflict: the revision is published with other files.
type revisionConflict struct{ rev, file string }

func (c *revisionConflict) Error() string {
	return fmt.Sprintf("revision %s is already published with other files (%s): a revision names one bundle", c.rev, c.file)
}

// publishRevision writes data as dir's revision rev and makes it the
// current bundle, returning the bytes now current (the revision's file
// as published before, when that one holds the same files and still
// verifies: a fleet that runs it downloads nothing again).
func publishRevision(dir, rev string, data []byte, vc *bundle.VerificationConfig) ([]byte, error) {
	for _, sub := range []string{revisionsDir, bundlesDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	revFile := filepath.Join(revisionsDir, rev+bundleExt)
	revPath := filepath.Join(dir, revFile)
	err := createNew(revPath, data)
	current := data
	if errors.Is(err, fs.ErrExist) {
		old, rerr := readBounded(revPath, maxPublishedBundle)
		if rerr != nil {
			return nil, rerr
		}
		same, cerr := sameSignedContent(old, data)
		switch {
		case cerr != nil || !same:
			return nil, &revisionConflict{rev: rev, file: filepath.ToSlash(revFile)}
		case verifies(old, vc):
			current, err = old, nil
		default:
			// The same files, signed under a key the fleet no longer
			// takes: the new signature replaces the old.
			err = atomicfile.WriteFile(revPath, data, 0o644)
		}
	}
	if err != nil {
		return nil, err
	}
	cur := filepath.Join(dir, bundlesDir, bundleName+bundleExt)
	if b, err := readBounded(cur, maxPublishedBundle); err == nil && bytes.Equal(b, current) {
		// Unchanged: not rewritten, so that a static server's ETag
		// (often its modification time) does not change either.
		return current, nil
	}
	return current, atomicfile.WriteFile(cur, current, 0o644)
}

// verifies reports whether a bundle reads and verifies under vc.
func verifies(data []byte, vc *bundle.VerificationConfig) bool {
	_, err := verifyBundle(data, vc)
	return err == nil
}

// createNew writes data to path, which must not exist (fs.ErrExist if it
// does): written and synced under a temporary name, then hard-linked to
// path, so that a reader never sees part of it and two publishers of one
// revision cannot both create it.
func createNew(path string, data []byte) error {
	if _, err := os.Lstat(path); err == nil {
		return fs.ErrExist
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, atomicfile.TempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	return atomicfile.SyncDir(dir)
}

// verifyBundle reads a bundle as an OPA server with vc does (vc nil: one
// configured without keys, which refuses a signed bundle) and returns its
// manifest's revision.
func verifyBundle(data []byte, vc *bundle.VerificationConfig) (string, error) {
	r := bundle.NewReader(bytes.NewReader(data)).WithSizeLimitBytes(maxPublishedBundle)
	if vc != nil {
		r = r.WithBundleVerificationConfig(vc)
	}
	b, err := r.Read()
	if err != nil {
		return "", err
	}
	return b.Manifest.Revision, nil
}

// unsignedBundle reports whether data reads as an unsigned bundle (as an
// OPA configured without keys reads it: a signed one is refused).
func unsignedBundle(data []byte) bool {
	_, err := verifyBundle(data, nil)
	return err == nil
}

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("more than %d bytes", max)
	}
	return data, nil
}

// curveAlgs is the JWT algorithm of each curve (RFC 7518 §3.4).
var curveAlgs = map[string]string{"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}

// verifyAlgs are the algorithms OPA verifies bundle signatures with.
var verifyAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "HS256", "HS384", "HS512"}

// verificationKey is the key configuration that verifies as the fleet does
// with the public key (or, under an HS algorithm, the secret) key and the
// algorithm alg ("": the key's own). OPA reads the first PEM block only;
// so does this. A private key is refused: the fleet is given public keys.
func verificationKey(key []byte, alg string) (*keys.Config, error) {
	if alg != "" && !slices.Contains(verifyAlgs, alg) {
		return nil, fmt.Errorf("unknown algorithm %s (want one of %s)", alg, strings.Join(verifyAlgs, ", "))
	}
	isPEM := bytes.Contains(key, []byte("-----BEGIN"))
	if strings.HasPrefix(alg, "HS") {
		if isPEM {
			return nil, fmt.Errorf("%s takes an HMAC secret, not a PEM key", alg)
		}
		return &keys.Config{Key: string(key), Algorithm: alg}, nil
	}
	block, _ := pem.Decode(key)
	if block == nil {
		return nil, errors.New("not a PEM public key (for an HMAC secret, give --signing-alg HS256, HS384 or HS512)")
	}
	var pub any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			pub = cert.PublicKey
		}
	case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY":
		return nil, errors.New("this is a private key: give its public key (polc keygen --key-format pem writes NAME.pub.pem)")
	default:
		return nil, fmt.Errorf("the first PEM block is %q, which OPA does not read as a key (want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE)", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", block.Type, err)
	}
	var fits func(string) bool
	def := ""
	switch k := pub.(type) {
	case *rsa.PublicKey:
		def = "RS256"
		fits = func(a string) bool { return strings.HasPrefix(a, "RS") || strings.HasPrefix(a, "PS") }
	case *ecdsa.PublicKey:
		def = curveAlgs[k.Curve.Params().Name]
		if def == "" {
			return nil, fmt.Errorf("unsupported EC curve %s (want P-256, P-384 or P-521)", k.Curve.Params().Name)
		}
		fits = func(a string) bool { return a == def }
	case ed25519.PublicKey:
		def = "EdDSA"
		fits = func(a string) bool { return a == def }
	default:
		return nil, fmt.Errorf("unsupported public key type %T", pub)
	}
	if alg == "" {
		alg = def
	} else if !fits(alg) {
		return nil, fmt.Errorf("%s does not verify with this key (%s would)", alg, def)
	}
	return &keys.Config{Key: string(key), Algorithm: alg}, nil
}
