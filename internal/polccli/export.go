package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/format"
	cuejson "cuelang.org/go/encoding/json"
	cueyaml "cuelang.org/go/encoding/yaml"
	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/atomicfile"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/jcs"
)

type exportParams struct {
	paths   []string
	format  string
	pkg     string
	out     string
	diagFmt string
}

func newExportCmd(e *env) *cobra.Command {
	p := &exportParams{}
	c := &cobra.Command{
		Use:   "export PATH... [--format json|yaml|cue]",
		Short: "Print declarations as JSON, YAML or CUE",
		Long: `export loads and validates declarations and prints them, exactly as declared
(unset fields stay unset), as JSON, YAML or CUE. The conversion is lossless:
compiling the output gives the same digests as compiling the input.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.paths = args
			return runExport(c.Context(), e, p)
		},
	}
	c.Flags().StringVar(&p.format, "format", "json", "output format: json, yaml or cue")
	c.Flags().StringVar(&p.pkg, "package", "policies", "CUE package name (--format cue)")
	c.Flags().StringVarP(&p.out, "out", "o", "", "write to this file instead of standard output")
	c.Flags().StringVar(&p.diagFmt, "diagnostics", "text", "diagnostics format: text, json, github or sarif")
	return c
}

func newImportCmd(e *env) *cobra.Command {
	p := &exportParams{format: "cue"}
	lp := &legacyParams{}
	c := &cobra.Command{
		Use:   "import FILE... [-o OUT.cue] | import --legacy NAME FILE [--approver CLASS] [--approval-expires DUR]",
		Short: "Convert JSON or YAML declarations, or legacy LionAGI permissions, to CUE",
		Long: `import validates JSON or YAML declarations (the same schema as CUE ones;
unknown keys are errors) and writes them as a CUE file.

With --legacy NAME, FILE holds LionAGI permissions (a preset name —
allow_all, deny_all, read_only, safe — or {mode, allow, deny, escalate},
alone or as an AgentSpec's permissions key, read as LionAGI reads it:
YAML 1.1, a repeated key's last value), and import writes the polc
policy NAME whose decisions equal the legacy engine's. Where they cannot
(a pattern that makes a tool's decision depend on its arguments, bash
unless always denied) it writes nothing and reports legacy_unrepresentable
at the key, exit 1. Escalated tools become approvals by --approver, valid
for --approval-expires. See docs/legacy.md.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.paths = args
			if c.Flags().Changed("legacy") {
				df, err := diagFormat(p.diagFmt)
				if err != nil {
					return err
				}
				return runImportLegacy(e, p, lp, df)
			}
			if c.Flags().Changed("approver") || c.Flags().Changed("approval-expires") || c.Flags().Changed("policy-version") {
				return usagef("--approver, --approval-expires and --policy-version are for --legacy")
			}
			return runExport(c.Context(), e, p)
		},
	}
	c.Flags().StringVar(&lp.name, "legacy", "", "translate legacy LionAGI permissions into the policy NAME")
	c.Flags().StringVar(&lp.approver, "approver", "legacy-escalation", "approver class of escalated tools (--legacy)")
	c.Flags().StringVar(&lp.expires, "approval-expires", "1h", "how long an approval of an escalated tool stays valid (--legacy)")
	c.Flags().StringVar(&lp.version, "policy-version", "1", "version of the imported policy (--legacy)")
	c.Flags().StringVar(&p.pkg, "package", "policies", "CUE package name")
	c.Flags().StringVarP(&p.out, "out", "o", "", "write to this file instead of standard output")
	c.Flags().StringVar(&p.diagFmt, "diagnostics", "text", "diagnostics format: text, json, github or sarif")
	return c
}

func runExport(_ context.Context, e *env, p *exportParams) error {
	df, err := diagFormat(p.diagFmt)
	if err != nil {
		return err
	}
	if p.format != "json" && p.format != "yaml" && p.format != "cue" {
		return usagef("--format %q: want json, yaml or cue", p.format)
	}
	de := diagEnv(e, p.out)
	decls, diags := compiler.Load(compiler.Config{Dir: e.dir}, p.paths)
	if diags.HasErrors() {
		return report(de, diags, df)
	}
	out, err := encodeDeclarations(decls, p.format, p.pkg)
	if err != nil {
		diags.Add(diag.Pos{}, diag.CodeInvalidValue, "export: %v", err)
		return report(de, diags, df)
	}
	if err := report(de, diags, df); err != nil {
		return err
	}
	return writeOutput(e, p.out, out)
}

// diagEnv is e for the diagnostics of a command whose output goes to out:
// when that is standard output (out ""), a diagnostics document (JSON,
// SARIF) goes to standard error instead of into the output.
func diagEnv(e *env, out string) *env {
	if out != "" {
		return e
	}
	de := *e
	de.stdout = e.stderr
	return &de
}

// writeOutput writes out to the file -o named (atomically), or to
// standard output when none.
func writeOutput(e *env, file string, out []byte) error {
	if file == "" {
		_, err := e.stdout.Write(out)
		return err
	}
	return atomicfile.WriteFile(e.abs(file), out, 0o644)
}

// encodeDeclarations renders the policies of decls as a declaration file.
func encodeDeclarations(decls *compiler.Declarations, format_, pkg string) ([]byte, error) {
	policies := map[string]json.RawMessage{}
	for _, p := range decls.Policies {
		b, err := p.Value.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("policy %q: %v", p.Name, err)
		}
		policies[p.Name] = b
	}
	// Harnesses, tests and properties are declarations too: dropping them
	// would make the conversion lossy.
	top := map[string]any{"policies": policies}
	if len(decls.Harnesses) > 0 {
		harnesses := map[string]json.RawMessage{}
		for _, h := range decls.Harnesses {
			harnesses[h.Name] = h.JSON
		}
		top["harnesses"] = harnesses
	}
	if len(decls.Tests) > 0 {
		tests := make([]json.RawMessage, len(decls.Tests))
		for i, tc := range decls.Tests {
			tests[i] = tc.JSON
		}
		top["tests"] = tests
	}
	if len(decls.Properties) > 0 {
		props := make([]json.RawMessage, len(decls.Properties))
		for i, pd := range decls.Properties {
			props[i] = pd.JSON
		}
		top["properties"] = props
	}
	raw, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, err
	}
	switch format_ {
	case "json":
		var buf bytes.Buffer
		if err := json.Indent(&buf, canon, "", "  "); err != nil {
			return nil, err
		}
		buf.WriteByte('\n')
		return buf.Bytes(), nil
	case "yaml":
		v := cuecontext.New().CompileBytes(canon)
		if err := v.Err(); err != nil {
			return nil, err
		}
		return cueyaml.Encode(v)
	default:
		expr, err := cuejson.Extract("declarations.json", canon)
		if err != nil {
			return nil, err
		}
		f := &ast.File{Decls: []ast.Decl{&ast.Package{Name: ast.NewIdent(pkg)}}}
		if st, ok := expr.(*ast.StructLit); ok {
			f.Decls = append(f.Decls, st.Elts...)
		} else {
			return nil, fmt.Errorf("declarations are not a struct")
		}
		return format.Node(f, format.Simplify())
	}
}
