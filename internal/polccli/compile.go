package polccli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/atomicfile"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/snapshot"
)

type compileParams struct {
	paths     []string
	out       string
	parents   []string
	dump      string
	format    string
	signKey   string
	signAlg   string
	signKeyID string
	now       string
}

func newCompileCmd(e *env) *cobra.Command {
	p := &compileParams{}
	c := &cobra.Command{
		Use:   "compile PATH... -o DIR",
		Short: "Compile declarations into snapshots",
		Long: `compile writes DIR/snapshots/<name>.json (the canonical snapshot) and
DIR/snapshots/<name>.srcmap.json (source positions) for every policy. The
snapshots directory is replaced as a whole, and only when every policy
compiled: on any error nothing is written. --dump=STAGE prints the output of
one stage (load, validate, resolve, lower, emit) as JSON.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.paths = args
			return runCompile(c.Context(), e, p)
		},
	}
	c.Flags().StringVarP(&p.out, "out", "o", "", "output directory")
	c.Flags().StringArrayVar(&p.parents, "parent", nil, "parent snapshot file that declarations may extend (repeatable)")
	c.Flags().StringVar(&p.dump, "dump", "", "print one stage's output: "+strings.Join(compiler.Stages, ", "))
	c.Flags().StringVar(&p.format, "diagnostics", "text", "diagnostics format: text, json, github or sarif")
	movedFormat(c)
	c.Flags().StringVar(&p.signKey, "sign-key", "", "sign bundle.tar.gz with this PEM private key (RSA, EC or Ed25519; polc keygen --key-format pem makes one), in OPA's format; an HMAC secret file needs --sign-alg HS256/HS384/HS512")
	c.Flags().StringVar(&p.signAlg, "sign-alg", "", "JWT algorithm for --sign-key (default RS256 for RSA, ES256/ES384/ES512 for P-256/P-384/P-521, EdDSA for Ed25519 keys; HS256/HS384/HS512 for an HMAC secret)")
	c.Flags().StringVar(&p.signKeyID, "sign-key-id", "", `key id recorded in the bundle signature (default "default")`)
	c.Flags().StringVar(&p.now, "now", "", nowUsage)
	return c
}

func runCompile(_ context.Context, e *env, p *compileParams) error {
	f, err := diagFormat(p.format)
	if err != nil {
		return err
	}
	if p.out == "" && p.dump == "" {
		return usagef("compile: -o DIR is required")
	}
	if p.dump != "" && !slices.Contains(compiler.Stages, p.dump) {
		return usagef("--dump %q: want one of %s", p.dump, strings.Join(compiler.Stages, ", "))
	}
	if p.signKey == "" && (p.signAlg != "" || p.signKeyID != "") {
		// Refused, not ignored: the bundle would go out unsigned.
		return usagef("--sign-alg and --sign-key-id need --sign-key")
	}
	now, err := fixedClock(p.now)
	if err != nil {
		return err
	}
	// --dump prints the stage on standard output: a JSON or SARIF
	// diagnostics document goes to standard error then, not after it.
	de := e
	if p.dump != "" {
		de = diagEnv(e, "")
	}
	parents, diags := readParents(e, p.parents)
	if diags.HasErrors() {
		return report(de, diags, f)
	}
	cfg := compiler.Config{Dir: e.dir, Parents: parents, Now: now}
	if p.signKey != "" {
		name, key, err := readInput(e, p.signKey)
		if err != nil {
			diags.Add(diag.Pos{File: name}, diag.CodeIO, "cannot read signing key: %v", err)
			return report(de, diags, f)
		}
		cfg.Sign = &compiler.SigningConfig{Key: key, Algorithm: p.signAlg, KeyID: p.signKeyID}
		// A key that cannot sign is an input error at the key file (exit
		// 2), found before compiling, not an unpositioned finding after.
		if err := compiler.CheckSigningConfig(cfg.Sign); err != nil {
			diags.Add(diag.Pos{File: name}, diag.CodeInvalidInput, "cannot sign with this key: %v", err)
			return report(de, diags, f)
		}
	}
	prog := startProgress(e, "compile")
	cfg.Stage = prog.setStage
	res := compiler.Compile(cfg, p.paths)
	prog.stop()
	diags = append(append(diags, res.Diagnostics...), checkHarnesses(e, res)...).Sorted()
	if p.dump != "" {
		if d, ok := res.Dumps[p.dump]; ok {
			b, err := json.MarshalIndent(d, "", "  ")
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\n", b)
		}
	}
	if diags.HasErrors() || p.out == "" {
		return report(de, diags, f)
	}
	out := e.abs(p.out)
	files := map[string][]byte{}
	for name, b := range res.Files {
		if rest, ok := strings.CutPrefix(name, "snapshots/"); ok {
			files[rest] = b
		}
	}
	if err := writeCompileOutput(out, files, res.Files[compiler.BundleFile]); err != nil {
		diags.Add(diag.Pos{File: diag.Rel(e.dir, out)}, diag.CodeIO, "cannot write output: %v", err)
		return report(de, diags, f)
	}
	if err := report(de, diags, f); err != nil {
		return err
	}
	if !f.Document() {
		for _, s := range res.Snapshots {
			fmt.Fprintf(e.stdout, "%s %s %s\n", s.Name, s.Version, s.Digest)
		}
	}
	return nil
}

// writeCompileOutput writes DIR/snapshots and DIR/bundle.tar.gz. The bundle is
// staged (written and synced under a temporary name) before the snapshots
// directory is replaced, and renamed into place after: whatever fails
// before the swap (a full disk, a directory in the bundle's place) leaves
// the old output as it was, rather than new snapshots next to an old or
// missing bundle.
func writeCompileOutput(out string, snapshots map[string][]byte, bundle []byte) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	target := filepath.Join(out, compiler.BundleFile)
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", diag.Rel(out, target))
	}
	return atomicfile.WriteFileThen(target, bundle, 0o644, func() error {
		return atomicfile.ReplaceDir(out, "snapshots", snapshots)
	})
}

// readParents parses --parent snapshot files. Two files of one policy
// name or policy_id are refused at both (the compiler refuses them too,
// without the files' names): one of them would be inherited silently.
func readParents(e *env, paths []string) ([]*snapshot.Snapshot, diag.List) {
	var out []*snapshot.Snapshot
	var diags diag.List
	seen := map[string]string{} // "name x" / "policy_id x" → file
	for _, p := range paths {
		abs := e.abs(p)
		data, err := os.ReadFile(abs)
		if err != nil {
			diags.Add(diag.Pos{File: diag.Rel(e.dir, abs)}, diag.CodeIO, "cannot read parent snapshot: %v", err)
			continue
		}
		s, err := snapshot.Parse(data)
		if err != nil {
			diags.Add(diag.Pos{File: diag.Rel(e.dir, abs)}, diag.CodeInvalidInput, "invalid parent snapshot: %v", err)
			continue
		}
		file, dup := diag.Rel(e.dir, abs), false
		for _, key := range []string{"name " + s.Name, "policy_id " + s.PolicyID} {
			if prev, ok := seen[key]; ok && !dup {
				diags.Add(diag.Pos{File: prev}, diag.CodeDuplicatePolicy, "parent snapshot with %s, as %s has: give each parent once", key, file)
				diags.Add(diag.Pos{File: file}, diag.CodeDuplicatePolicy, "parent snapshot with %s, as %s has: give each parent once", key, prev)
				dup = true
			}
			seen[key] = file
		}
		if dup {
			continue
		}
		out = append(out, s)
	}
	return out, diags
}
