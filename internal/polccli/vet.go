package polccli

import (
	"context"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/harness"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/prove"
	"polc.dev/polc/snapshot"
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

func runVet(ctx context.Context, e *env, p *vetParams) error {
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
	diags = append(append(diags, res.Diagnostics...), checkHarnesses(e, res)...)
	if !diags.HasErrors() {
		prog.setStage("rules")
		found, err := lintRules(ctx, res, parents, diags)
		if err != nil {
			prog.stop()
			return err
		}
		diags = append(diags, found...)
	}
	prog.stop()
	return report(e, diags.Sorted(), f)
}

// lintRules reports, as warnings, what the pattern algebra decides about
// each policy's own rules: never effective, unmatchable or redundant, and
// facets a child empties (docs/prove.md, "polc vet").
func lintRules(ctx context.Context, res *compiler.Result, parents []*snapshot.Snapshot, already diag.List) (diag.List, error) {
	// A host pattern the compiler already reports as never requested
	// (host_never_requested, with the spelling to use) is not reported
	// again as unmatchable.
	hostPos := map[diag.Pos]bool{}
	for _, d := range already {
		if d.Code == diag.CodeHostNeverRequested {
			hostPos[d.Pos] = true
		}
	}
	pr := &prove.Prover{Policies: map[string]*prove.Policy{}}
	byName := map[string]*snapshot.Snapshot{}
	for _, s := range append(append([]*snapshot.Snapshot{}, parents...), res.Snapshots...) {
		byName[s.Name] = s
	}
	prep := func(s *snapshot.Snapshot) (*prove.Policy, error) {
		if p := pr.Policies[s.Name]; p != nil {
			return p, nil
		}
		p, err := prove.NewPolicy(s)
		if err != nil {
			return nil, err
		}
		pr.Policies[s.Name] = p
		return p, nil
	}
	var diags diag.List
	for _, s := range res.Snapshots {
		p, err := prep(s)
		if err != nil {
			return nil, err
		}
		if sm := res.SourceMaps[s.Name]; sm != nil {
			p.Declared = prove.DeclaredOrder(sm.Rules)
		}
		var parent *prove.Policy
		if n := len(s.Lineage); n > 0 {
			if ps := byName[s.Lineage[n-1].Name]; ps != nil {
				if parent, err = prep(ps); err != nil {
					return nil, err
				}
			}
		}
		found, err := pr.LintContext(ctx, p, parent)
		if err != nil {
			return nil, err
		}
		sm := res.SourceMaps[s.Name]
		for _, f := range found {
			pos := diag.Pos{}
			if sm != nil {
				pos = sm.Declaration
				if rp, ok := sm.Rules[f.RuleID]; ok {
					pos = rp
				}
			}
			if f.Code == diag.CodeRuleUnmatchable && hostPos[pos] || f.Shadowed {
				continue // the compiler reports it (host_never_requested, allow_shadowed)
			}
			diags.Warn(pos, f.Code, "policy %q: %s", s.Name, f.Message)
		}
	}
	return diags, nil
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
