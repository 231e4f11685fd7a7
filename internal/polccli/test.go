package polccli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
)

type testParams struct {
	paths   []string
	engine  string
	format  string
	parents []string
	now     string
}

func newTestCmd(e *env) *cobra.Command {
	p := &testParams{}
	c := &cobra.Command{
		Use:   "test PATH...",
		Short: "Run the decision tests declared next to the policies",
		Long: `test compiles the policies and runs each declared test
(tests: [{policy, request, want}]): the request is normalized and evaluated,
and every member of want that is given must equal the decision's. With
--engine both (the default) the native evaluator and the Rego bundle in OPA
must both pass. Failures are positioned at the test; exit 1 when any fails.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.paths = args
			return runTest(c.Context(), e, p)
		},
	}
	c.Flags().StringVar(&p.engine, "engine", "both", "native, opa or both")
	c.Flags().StringVar(&p.format, "diagnostics", "text", "diagnostics format: text, json, github or sarif")
	movedFormat(c)
	c.Flags().StringArrayVar(&p.parents, "parent", nil, "parent snapshot file that declarations may extend (repeatable)")
	c.Flags().StringVar(&p.now, "now", "", nowUsage+"; also the time of requests without one")
	return c
}

func runTest(ctx context.Context, e *env, p *testParams) error {
	f, err := diagFormat(p.format)
	if err != nil {
		return err
	}
	if p.engine != "native" && p.engine != "opa" && p.engine != "both" {
		return usagef("--engine %q: want native, opa or both", p.engine)
	}
	now, err := fixedClock(p.now)
	if err != nil {
		return err
	}
	parents, diags := readParents(e, p.parents)
	if diags.HasErrors() {
		return report(e, diags, f)
	}
	prog := startProgress(e, "test")
	defer prog.stop() // for the error returns; stopped before any report
	res := compiler.Vet(compiler.Config{Dir: e.dir, Parents: parents, Now: now, Stage: prog.setStage}, p.paths)
	diags = append(diags, res.Diagnostics...)
	if diags.HasErrors() {
		prog.stop()
		return report(e, diags, f)
	}
	if len(res.Tests) == 0 {
		// At the first input: a test run that tests nothing is not a pass.
		diags.Add(diag.Pos{File: diag.Rel(e.dir, e.abs(p.paths[0]))}, diag.CodeNoTests, "no tests declared (tests: [{policy, request, want}])")
		prog.stop()
		return report(e, diags, f)
	}
	pols := map[string]*decision.Policy{}
	for _, s := range res.Snapshots {
		pol, err := decision.Compile(s)
		if err != nil {
			return err
		}
		pols[s.Name] = pol
	}
	prog.setStage("running tests")
	var eng *regoeval.Engine
	if p.engine != "native" {
		bb, err := compiler.WriteBundle(res.Snapshots, nil)
		if err != nil {
			return err
		}
		if eng, err = regoeval.New(ctx, bb); err != nil {
			return err
		}
	}
	passed := 0
	for _, tc := range res.Tests {
		label := fmt.Sprintf("tests[%d]", tc.Index)
		if tc.Name != "" {
			label += " (" + tc.Name + ")"
		}
		pol, ok := pols[tc.Policy]
		if !ok {
			diags.Add(tc.Pos, diag.CodeTestFailed, "%s: no policy %q in the compile set", label, tc.Policy)
			continue
		}
		req, nerr := (&normalize.Normalizer{Now: now}).Normalize(tc.Request)
		var got []engineDecision
		if nerr != nil {
			got = []engineDecision{{"normalizer", decision.Decision{Disposition: decision.Deny, RuleIDs: []string{}, Reasons: []string{nerr.Reason}}}}
		} else {
			if p.engine != "opa" {
				d, _ := pol.Evaluate(req)
				got = append(got, engineDecision{"native", d})
			}
			if eng != nil {
				d, err := eng.Evaluate(ctx, tc.Policy, req)
				if err != nil {
					return err
				}
				got = append(got, engineDecision{"opa", d})
			}
		}
		failed := false
		for _, g := range got {
			if msg := tc.Want.Check(g.d); msg != "" {
				diags.Add(tc.Pos, diag.CodeTestFailed, "%s: policy %q (%s): %s", label, tc.Policy, g.engine, msg)
				failed = true
			}
		}
		if !failed {
			passed++
		}
	}
	prog.stop()
	if err := report(e, diags, f); err != nil {
		return err
	}
	if f == diag.FormatText {
		fmt.Fprintf(e.stdout, "ok: %d tests passed\n", passed)
	}
	return nil
}

type engineDecision struct {
	engine string
	d      decision.Decision
}
