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
	var dir string
	c := &cobra.Command{
		Use:   "keygen NAME [-o DIR]",
		Short: "Create an Ed25519 signer key and its verifier key (vkey)",
		Long: `keygen writes DIR/NAME.key (the signer key, mode 0600) and DIR/NAME.vkey
(the verifier key). A trust file line for certverify is "log <vkey>" (signs
checkpoints) or "certifier <vkey>" (signs certificates). Existing files are
never overwritten.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error { return runKeygen(c.Context(), e, args[0], dir) },
	}
	c.Flags().StringVarP(&dir, "out", "o", ".", "directory for the key files")
	return c
}

func runKeygen(_ context.Context, e *env, name, dir string) error {
	if !keys.ValidName(name) {
		return usagef("keygen NAME: %q is not a key name (no spaces, '+', '/' or '\\', not . or ..)", name)
	}
	dir = e.abs(dir)
	err := os.MkdirAll(dir, 0o700)
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
