package compiler

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/util"

	"polc.dev/polc/snapshot"
)

// DecisionRego is the Rego v1 module of every bundle (package polc).
//
//go:embed rego/decision.rego
var DecisionRego string

// BundleRoot is the bundle's only root: data.polc.
const BundleRoot = "polc"

// SigningConfig signs a bundle in OPA's format (.signatures.json, a JWT
// over the file hashes) so that `opa run --verification-key` accepts it.
type SigningConfig struct {
	// Key is a PEM private key (RSA, EC or Ed25519; PKCS #1, SEC 1 or
	// PKCS #8) or an HMAC secret.
	Key []byte
	// Algorithm is the JWT algorithm: RS256 (default for RSA keys), ES256,
	// ES384 or ES512 (for EC keys: the one their curve requires, the
	// default), EdDSA (default for Ed25519 keys), HS256 (default for
	// non-PEM secrets), …
	Algorithm string
	// KeyID is the key id OPA looks up (default "default").
	KeyID string
}

// BundleRevision is the revision of a bundle with these files (path →
// content, the manifest and signatures excluded): the sha256 of the lines
// "<path> <sha256 of content>\n" sorted by path. It names the bundle's
// content, not only the snapshots it was compiled from: one set of
// snapshots compiled by two versions of polc whose decision module or data
// layout differ gives two revisions, so an OPA fleet's bundle status tells
// which bundle each instance runs, and a published revision
// (polc bundle publish) never names two different bundles.
func BundleRevision(files map[string][]byte) string {
	var lines []string
	for path, content := range files {
		sum := sha256.Sum256(content)
		lines = append(lines, path+" "+hex.EncodeToString(sum[:])+"\n")
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "")))
	return hex.EncodeToString(sum[:])
}

// BundleData returns data.polc for a set of snapshots: an index from
// each policy's name and policy_id to its name, which selects the
// policy's generated module (data.polc.policies[<name>]).
//
// The decision module looks input.policy up as a name or a policy_id, so
// the set must name each policy once either way: two snapshots of one
// name or one policy_id, or a name that is another policy's id, are
// refused rather than shadowed.
func BundleData(snaps []*snapshot.Snapshot) (map[string]any, error) {
	ids := map[string]any{}
	owner := map[string]*snapshot.Snapshot{} // names and ids
	for _, s := range snaps {
		for _, key := range []string{s.Name, s.PolicyID} {
			if prev, dup := owner[key]; dup && prev != s {
				return nil, fmt.Errorf("policies %s and %s are both named or identified %q: a bundle names each policy once", prev.Name, s.Name, key)
			}
			owner[key] = s
			ids[key] = s.Name
		}
	}
	return map[string]any{"ids": ids}, nil
}

// PolicyModules returns the generated Rego module of each snapshot, by
// its path in the bundle (polc/policies/<name>.rego).
func PolicyModules(snaps []*snapshot.Snapshot) (map[string]string, error) {
	mods := map[string]string{}
	for _, s := range snaps {
		src, err := policyModule(s)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", s.Name, err)
		}
		mods[policyModulePath(s.Name)] = src
	}
	return mods, nil
}

// policyModulePath is where a policy's module sits in the bundle: its
// name when that is a plain file name (policy names are), else its
// name's hex.
func policyModulePath(name string) string {
	plain := name != "" && name != "." && name != ".."
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			plain = false
		}
	}
	if !plain {
		name = "x-" + hex.EncodeToString([]byte(name))
	}
	return "polc/policies/" + name + ".rego"
}

// WriteBundle writes an OPA bundle (.tar.gz) with the decision module,
// the snapshots' data, each policy's module, a manifest (revision BundleRevision of them all,
// roots ["polc"], rego_version 1)
// and, when sc is non-nil, a signature. The output is deterministic.
func WriteBundle(snaps []*snapshot.Snapshot, sc *SigningConfig) ([]byte, error) {
	typed, err := BundleData(snaps)
	if err != nil {
		return nil, err
	}
	// OPA's store and signature hashing want plain JSON values.
	raw, err := json.Marshal(typed)
	if err != nil {
		return nil, err
	}
	var data map[string]any
	if err := util.UnmarshalJSON(raw, &data); err != nil {
		return nil, err
	}
	mods, err := PolicyModules(snaps)
	if err != nil {
		return nil, err
	}
	mods["polc/decision.rego"] = DecisionRego
	// The revision names everything the bundle holds: its data and every
	// module (a new generator changes the revision of the same policies).
	files := map[string][]byte{"data.json": raw}
	for path, src := range mods {
		files[path] = []byte(src)
	}
	rev := BundleRevision(files)
	b := bundle.Bundle{
		Manifest: bundle.Manifest{Revision: rev, Roots: &[]string{BundleRoot}},
		Data:     map[string]any{BundleRoot: data},
	}
	for _, path := range slices.Sorted(maps.Keys(mods)) {
		mod, err := ast.ParseModuleWithOpts(path, mods[path], ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", path, err)
		}
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: "/" + path, Path: "/" + path, Raw: []byte(mods[path]), Parsed: mod})
	}
	b.Manifest.SetRegoVersion(ast.RegoV1)
	if sc != nil {
		key, alg, err := signingKey(sc)
		if err != nil {
			return nil, fmt.Errorf("signing bundle: %w", err)
		}
		keyID := sc.KeyID
		if keyID == "" {
			keyID = "default"
		}
		if err := b.GenerateSignature(bundle.NewSigningConfig(key, alg, ""), keyID, false); err != nil {
			return nil, fmt.Errorf("signing bundle: %w", err)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CheckSigningConfig reports whether sc can sign a bundle (a readable
// private key or secret, an algorithm OPA knows that fits the key), by
// signing an empty one, so that a bad key is refused before compiling.
func CheckSigningConfig(sc *SigningConfig) error {
	_, err := WriteBundle(nil, sc)
	return err
}

// ecdsaAlgs is the JWT algorithm of each curve (RFC 7518 §3.4).
var ecdsaAlgs = map[string]string{"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}

// privateKeyBlocks are the PEM block types OPA's signer parses.
var privateKeyBlocks = []string{"RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY"}

// signingKey returns the key text and JWT algorithm to give OPA's signer.
// A key with a PEM header is a private key: the first private-key block
// (OPA decodes only the first block, and openssl writes EC keys after an
// "EC PARAMETERS" block), its algorithm by default from the key's type —
// RS256 for RSA, ES256/ES384/ES512 for ECDSA on P-256/P-384/P-521 (an
// explicit ES algorithm must match the curve), EdDSA for Ed25519, whichever the
// encoding (PKCS #1, SEC 1 or PKCS #8, the form `openssl genpkey` and
// x509.MarshalPKCS8PrivateKey write). A file without a PEM header is an HMAC
// secret only with an explicit HS algorithm and at least as many bytes as
// the hash; polc keygen's evidence keys, PEM keys under an HS algorithm and
// other non-PEM files are refused, not signed as HMAC.
func signingKey(sc *SigningConfig) (key, alg string, err error) {
	isPEM := bytes.Contains(sc.Key, []byte("-----BEGIN"))
	hmac := strings.HasPrefix(sc.Algorithm, "HS")
	switch {
	case bytes.HasPrefix(bytes.TrimSpace(sc.Key), []byte("PRIVATE+KEY+")):
		// polc keygen's evidence key (a signed-note Ed25519 key): OPA
		// would take it for an HMAC secret and sign HS256 with it.
		return "", "", fmt.Errorf("this is a polc evidence signer key (signed-note format), not a bundle signing key: make one with `polc keygen NAME --key-format pem`")
	case hmac && isPEM:
		return "", "", fmt.Errorf("%s takes an HMAC secret, not a PEM key: drop --sign-alg to sign with the key's own algorithm", sc.Algorithm)
	case hmac:
		// RFC 7518 §3.2: an HMAC key is at least as long as the hash.
		need := map[string]int{"HS256": 32, "HS384": 48, "HS512": 64}[sc.Algorithm]
		if need == 0 {
			return "", "", fmt.Errorf("unknown HMAC algorithm %s (want HS256, HS384 or HS512)", sc.Algorithm)
		}
		if len(sc.Key) < need {
			return "", "", fmt.Errorf("%s needs an HMAC secret of at least %d bytes; this one has %d", sc.Algorithm, need, len(sc.Key))
		}
		return string(sc.Key), sc.Algorithm, nil
	case !isPEM:
		// Signed as HMAC by default once, silently: a file that is no PEM
		// key is an HMAC secret only when the author says so.
		return "", "", fmt.Errorf("not a PEM private key (RSA, EC or Ed25519); to sign with an HMAC secret, give --sign-alg HS256, HS384 or HS512")
	}
	rest := sc.Key
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return "", "", fmt.Errorf("no private key in the PEM data (want a %s block)", strings.Join(privateKeyBlocks, ", "))
		}
		if !slices.Contains(privateKeyBlocks, block.Type) {
			continue
		}
		var k any
		switch block.Type {
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		}
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", block.Type, err)
		}
		var def string
		switch k := k.(type) {
		case *rsa.PrivateKey:
			def = "RS256"
		case *ecdsa.PrivateKey:
			// RFC 7518 §3.4 ties each ES algorithm to one curve; OPA's
			// verifier would take ES256 over P-384, other JWT verifiers
			// would not, so a mismatch is refused rather than signed.
			curve := k.Curve.Params().Name
			if def = ecdsaAlgs[curve]; def == "" {
				return "", "", fmt.Errorf("unsupported EC curve %s (want P-256, P-384 or P-521)", curve)
			}
			if strings.HasPrefix(sc.Algorithm, "ES") && sc.Algorithm != def {
				return "", "", fmt.Errorf("%s does not sign with a %s key: use %s", sc.Algorithm, curve, def)
			}
		case ed25519.PrivateKey:
			def = "EdDSA"
		default:
			return "", "", fmt.Errorf("unsupported private key type %T", k)
		}
		alg = sc.Algorithm
		if alg == "" {
			alg = def
		}
		return string(pem.EncodeToMemory(block)), alg, nil
	}
}
