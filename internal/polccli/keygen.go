package polccli

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/keys"
)

func newKeygenCmd(e *env) *cobra.Command {
	var dir, keyFormat string
	c := &cobra.Command{
		Use:   "keygen NAME [-o DIR] [--key-format note|pem]",
		Short: "Create a signer key and its verifier key",
		Long: `keygen writes DIR/NAME.key (an Ed25519 signer key, mode 0600) and
DIR/NAME.vkey (its verifier key), the evidence keys: a trust file line for
certverify is "log <vkey>" (signs checkpoints) or "certifier <vkey>" (signs
certificates).

--key-format pem writes a bundle signing key instead: DIR/NAME.pem (an ECDSA
P-256 private key, PKCS #8, mode 0600) for polc compile --sign-key, and
DIR/NAME.pub.pem, the public key that opa run --verification-key takes with
--signing-alg ES256 (docs/bundle.md). Existing files are never overwritten.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runKeygen(c.Context(), e, args[0], dir, keyFormat)
		},
	}
	c.Flags().StringVarP(&dir, "out", "o", ".", "directory for the key files")
	c.Flags().StringVar(&keyFormat, "key-format", "note", "note (Ed25519 evidence keys for checkpoints and certificates) or pem (ES256 key for signing OPA bundles)")
	return c
}

func runKeygen(_ context.Context, e *env, name, dir, keyFormat string) error {
	if keyFormat != "note" && keyFormat != "pem" {
		return usagef("--key-format %q: want note or pem", keyFormat)
	}
	if !keys.ValidName(name) {
		return usagef("keygen NAME: %q is not a key name (no spaces, '+', '/' or '\\', not . or ..)", name)
	}
	dir = e.abs(dir)
	err := os.MkdirAll(dir, 0o700)
	if keyFormat == "pem" {
		var files keys.PEMFiles
		if err == nil {
			files, err = keys.WritePEM(dir, name, rand.Reader)
		}
		if err != nil {
			return reportOne(e, diag.Pos{File: diag.Rel(e.dir, dir)}, diag.CodeIO, "keygen: %v", err)
		}
		priv, pub := diag.Rel(e.dir, files.Private), diag.Rel(e.dir, files.Public)
		fmt.Fprintf(e.stdout, "bundle signing key: %s\npublic key:         %s\nsign:   polc compile PATH... -o OUT --sign-key %s\nverify: opa run --server --bundle --verification-key %s --signing-alg %s OUT/bundle.tar.gz\n",
			priv, pub, priv, pub, keys.BundleAlgorithm)
		return nil
	}
	var files keys.Files
	if err == nil {
		files, err = keys.Write(dir, name, rand.Reader)
	}
	if err != nil {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, dir)}, diag.CodeIO, "keygen: %v", err)
	}
	fmt.Fprintf(e.stdout, "signer key:   %s\nverifier key: %s\ntrust lines:  log %s\n              certifier %s\n",
		diag.Rel(e.dir, files.Signer), diag.Rel(e.dir, files.Verifier), files.VKey, files.VKey)
	return nil
}
