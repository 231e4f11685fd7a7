package polccli

import (
	"context"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/harness"
	"polc.dev/polc/internal/diag"
)

type vetParams struct {
	paths   []string
	parents []string
	format  string
	now     string
}

func newVetCmd(e *env) *cobra.Command {
	p := &vetParams{}
	c := &cobra.Command{
		Use:   "vet PATH...",
		Short: "Check declarations without writing anything",
		Long: `vet loads CUE, JSON or YAML declarations, validates them against the schema,
resolves inheritance and lowers every policy, printing every error and warning as
file:line:col: code: message. Exit 0 when there is no error, 1 on policy
findings, 2 when an input cannot be read.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.paths = args
			return runVet(c.Context(), e, p)
		},
	}
	c.Flags().StringArrayVar(&p.parents, "parent", nil, "parent snapshot file that declarations may extend (repeatable)")
	c.Flags().StringVar(&p.format, "diagnostics", "text", "diagnostics format: text, json, github or sarif")
	movedFormat(c)
	c.Flags().StringVar(&p.now, "now", "", nowUsage)
	return c
}

func runVet(_ context.Context, e *env, p *vetParams) error {
	f, err := diagFormat(p.format)
	if err != nil {
		return err
	}
	now, err := fixedClock(p.now)
	if err != nil {
		return err
	}
	parents, diags := readParents(e, p.parents)
	if diags.HasErrors() {
		return report(e, diags, f)
	}
	prog := startProgress(e, "vet")
	res := compiler.Vet(compiler.Config{Dir: e.dir, Parents: parents, Now: now, Stage: prog.setStage}, p.paths)
	prog.stop()
	return report(e, append(append(diags, res.Diagnostics...), checkHarnesses(e, res)...).Sorted(), f)
}

// checkHarnesses runs the harness package's checks of the declared
// harnesses (the compiler checks them against the schema only), so that
// vet and compile report what harness plan would refuse.
func checkHarnesses(e *env, res *compiler.Result) diag.List {
	var diags diag.List
	for _, h := range res.Harnesses { // only those the schema accepted
		diags = append(diags, harness.Check(h, e.dir)...)
	}
	return diags
}
