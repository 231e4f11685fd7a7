package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/prove"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/snapshot"
)

type provePropsParams struct {
	paths                            []string
	parents                          []string
	diagFmt, format, now             string
	policy, never, escalates, beyond string
}

func newProveCmd(e *env) *cobra.Command {
	p := &provePropsParams{}
	c := &cobra.Command{
		Use:   "prove PATH...",
		Short: "Decide the properties declared next to the policies, exactly",
		Long: `prove compiles the policies and decides each declared property
(properties: [{policy, never | always_escalates | never_allows_beyond}]) over
every request the normalizer can produce, exactly (docs/prove.md): a property
holds, or fails with a counterexample request that both engines (native and
OPA) decided as the counterexample says before it is printed. --policy with
--never, --always-escalates or --never-allows-beyond asks one property
instead of the declared ones. Exit 1 when any property fails or is
undecided, 2 when an input cannot be read.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.paths = args
			return runProve(c.Context(), e, p)
		},
	}
	c.Flags().StringArrayVar(&p.parents, "parent", nil, "parent snapshot file that declarations may extend (repeatable)")
	c.Flags().StringVar(&p.diagFmt, "diagnostics", "text", "diagnostics format: text, json, github or sarif")
	c.Flags().StringVar(&p.format, "format", "text", "results format: text or json")
	c.Flags().StringVar(&p.now, "now", "", nowUsage+"; also the time of counterexamples when the policies allow it")
	c.Flags().StringVar(&p.policy, "policy", "", "ask one property of this policy instead of the declared ones")
	c.Flags().StringVar(&p.never, "never", "", "with --policy: no request matching this pattern is allowed or escalated")
	c.Flags().StringVar(&p.escalates, "always-escalates", "", "with --policy: no request matching this pattern is allowed without approval")
	c.Flags().StringVar(&p.beyond, "never-allows-beyond", "", "with --policy: no request is treated more permissively than by this policy")
	return c
}

// proveResult is one property's line of the results document.
type proveResult struct {
	Pos      string           `json:"pos"`
	Label    string           `json:"label"`
	Property string           `json:"property"`
	Policy   string           `json:"policy"`
	Kind     string           `json:"kind"`
	Pattern  *json.RawMessage `json:"pattern,omitempty"`
	Other    string           `json:"other,omitempty"`
	prove.Result
}

func runProve(ctx context.Context, e *env, p *provePropsParams) error {
	f, err := diagFormat(p.diagFmt)
	if err != nil {
		return err
	}
	if p.format != "text" && p.format != "json" {
		return usagef("--format %q: want text or json", p.format)
	}
	if p.format == "json" && f.Document() {
		return usagef("--format json and --diagnostics %s both print a document on standard output: choose one", f)
	}
	adhoc, err := adhocProperty(p)
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
	prog := startProgress(e, "prove")
	defer prog.stop()
	res := compiler.Vet(compiler.Config{Dir: e.dir, Parents: parents, Now: now, Stage: prog.setStage}, p.paths)
	diags = append(diags, res.Diagnostics...)
	if diags.HasErrors() {
		prog.stop()
		return report(e, diags, f)
	}
	props := res.Properties
	if adhoc != nil {
		props = []*compiler.PropertyDecl{adhoc}
	}
	if len(props) == 0 {
		diags.Add(diag.Pos{File: diag.Rel(e.dir, e.abs(p.paths[0]))}, diag.CodeNoProperties, "no properties declared (properties: [{policy, never | always_escalates | never_allows_beyond}])")
		prog.stop()
		return report(e, diags, f)
	}
	snaps := map[string]*snapshot.Snapshot{}
	var all []*snapshot.Snapshot
	for _, s := range append(append([]*snapshot.Snapshot{}, res.Snapshots...), parents...) {
		if _, dup := snaps[s.Name]; !dup {
			snaps[s.Name] = s
			all = append(all, s)
		}
	}
	for _, pd := range props {
		if snaps[pd.Property.Policy] == nil {
			diags.Add(pd.PolicyPos, diag.CodeInvalidValue, "%s: no policy %q in the compile set or the --parent snapshots", pd.Label(), pd.Property.Policy)
		}
		if pd.Property.Kind == prove.NeverAllowsBeyond && snaps[pd.Property.Other] == nil {
			diags.Add(pd.OtherPos, diag.CodeInvalidValue, "%s: no policy %q in the compile set or the --parent snapshots", pd.Label(), pd.Property.Other)
		}
	}
	if diags.HasErrors() {
		prog.stop()
		return report(e, diags, f)
	}
	prog.setStage("proving")
	bb, err := compiler.WriteBundle(all, nil)
	if err != nil {
		return err
	}
	eng, err := regoeval.New(ctx, bb)
	if err != nil {
		return err
	}
	pr := &prove.Prover{Policies: map[string]*prove.Policy{}, OPA: eng, Now: now()}
	for _, s := range all {
		pol, err := prove.NewPolicy(s)
		if err != nil {
			return err
		}
		if sm := res.SourceMaps[s.Name]; sm != nil {
			pol.Declared = prove.DeclaredOrder(sm.Rules)
		}
		pr.Policies[s.Name] = pol
	}
	var results []proveResult
	counts := map[string]int{}
	for _, pd := range props {
		r, err := pr.Check(ctx, pd.Property)
		if err != nil {
			return err
		}
		counts[r.Status]++
		pos := ""
		if pd.Index >= 0 {
			pos = pd.Pos.String()
		}
		pr := proveResult{Pos: pos, Label: pd.Label(), Property: pd.Property.String(), Policy: pd.Property.Policy,
			Kind: pd.Property.Kind, Other: pd.Property.Other, Result: r}
		if pd.Property.Kind != prove.NeverAllowsBeyond {
			b, _ := json.Marshal(pd.Property.Pattern)
			raw := json.RawMessage(b)
			pr.Pattern = &raw
		}
		results = append(results, pr)
		switch r.Status {
		case prove.Fails:
			diags.Add(pd.Pos, diag.CodePropertyFailed, "%s: %s fails: %s", pd.Label(), pd.Property, describeCounterexample(pd.Property, r.Counterexample))
		case prove.Undecided:
			diags.Add(pd.Pos, diag.CodePropertyUndecided, "%s: %s is undecided: %s", pd.Label(), pd.Property, r.Reason)
		}
	}
	dead, err := deadRules(ctx, pr, props, res.Snapshots)
	if err != nil {
		return err
	}
	prog.stop()
	switch {
	case p.format == "json":
		if results == nil {
			results = []proveResult{}
		}
		if err := printJSON(e, map[string]any{"properties": results, "rules": dead, "holds": counts[prove.Holds], "fails": counts[prove.Fails], "undecided": counts[prove.Undecided]}); err != nil {
			return err
		}
	case !f.Document():
		printProveText(e.stdout, results)
		for _, d := range dead {
			if d.Unanalysed != "" {
				fmt.Fprintf(e.stdout, "%-9s %s: %s\n", "rules", d.Policy, d.Unanalysed)
			}
			if len(d.Never) == 0 {
				if d.Unanalysed == "" {
					fmt.Fprintf(e.stdout, "%-9s %s: every rule it declares (%d) can take effect\n", "rules", d.Policy, d.Own)
				}
				continue
			}
			fmt.Fprintf(e.stdout, "%-9s %s: %d of the rules it declares (%d) can never take effect:\n", "rules", d.Policy, len(d.Never), d.Own)
			for _, m := range d.Never {
				fmt.Fprintf(e.stdout, "          %s\n", m)
			}
		}
		fmt.Fprintf(e.stdout, "prove: %d hold, %d fail, %d undecided\n", counts[prove.Holds], counts[prove.Fails], counts[prove.Undecided])
	}
	return report(e, diags, f)
}

// ruleReport answers "which of a policy's rules can never fire?" for
// each policy a property is asked of: polc vet's rule_never_effective and
// rule_unmatchable findings, from the same algebra (docs/prove.md).
type ruleReport struct {
	Policy string `json:"policy"`
	// Own is the number of rules the policy declares itself.
	Own   int      `json:"own_rules"`
	Never []string `json:"never_effective"`
	// Unanalysed says which rules were left out for the search's work
	// bound (docs/prove.md, "Budget"): they may be never effective too.
	Unanalysed string `json:"unanalysed,omitempty"`
}

func deadRules(ctx context.Context, pr *prove.Prover, props []*compiler.PropertyDecl, compiled []*snapshot.Snapshot) ([]ruleReport, error) {
	asked := map[string]bool{}
	for _, pd := range props {
		asked[pd.Property.Policy] = true
	}
	out := []ruleReport{}
	for _, s := range compiled { // sorted by name; parents answer for themselves
		if !asked[s.Name] {
			continue
		}
		found, err := pr.LintContext(ctx, pr.Policies[s.Name], nil)
		if err != nil {
			return nil, err
		}
		r := ruleReport{Policy: s.Name, Never: []string{}}
		for _, cr := range s.CompiledRules {
			for _, o := range cr.Base().Provenance {
				if o.Policy == s.Name {
					r.Own++
					break
				}
			}
		}
		for _, f := range found {
			if f.Code == prove.CodeNeverEffective || f.Code == prove.CodeUnmatchable {
				r.Never = append(r.Never, f.Message)
			}
			if f.Code == prove.CodeUnanalysed {
				r.Unanalysed = f.Message
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// adhocProperty is the property the flags ask, or nil.
func adhocProperty(p *provePropsParams) (*compiler.PropertyDecl, error) {
	var kinds []string
	for _, k := range []struct{ name, v string }{{"--never", p.never}, {"--always-escalates", p.escalates}, {"--never-allows-beyond", p.beyond}} {
		if k.v != "" {
			kinds = append(kinds, k.name)
		}
	}
	switch {
	case p.policy == "" && len(kinds) == 0:
		return nil, nil
	case p.policy == "":
		return nil, usagef("%s needs --policy", kinds[0])
	case len(kinds) != 1:
		return nil, usagef("--policy needs exactly one of --never, --always-escalates and --never-allows-beyond")
	}
	pd := &compiler.PropertyDecl{Index: -1, Property: prove.Property{Policy: p.policy}}
	pd.JSON = json.RawMessage("{}")
	switch kinds[0] {
	case "--never-allows-beyond":
		pd.Property.Kind, pd.Property.Other = prove.NeverAllowsBeyond, p.beyond
		return pd, nil
	case "--never":
		pd.Property.Kind = prove.Never
	default:
		pd.Property.Kind = prove.AlwaysEscalates
	}
	src := p.never + p.escalates
	raw, _ := json.Marshal(src)
	if strings.HasPrefix(strings.TrimSpace(src), "{") {
		raw = []byte(src)
	}
	rp, err := compiler.ParseRequestPatternJSON(raw)
	if err != nil {
		return nil, usagef("%s %q: %v", kinds[0], src, err)
	}
	pd.Property.Pattern = rp
	return pd, nil
}

// describeCounterexample says in one line what the counterexample is and
// how each policy decided it.
func describeCounterexample(prop prove.Property, ce *prove.Counterexample) string {
	var ds []string
	for _, d := range ce.Decisions {
		ds = append(ds, fmt.Sprintf("%s %s", d.Policy, dispositionText(d)))
	}
	return fmt.Sprintf("%s is decided %s (native and opa agree)", requestJSON(ce), strings.Join(ds, ", "))
}

func dispositionText(d prove.PolicyDecision) string {
	if d.Disposition == "escalate" && d.Approver != nil {
		return "escalate to " + *d.Approver
	}
	return d.Disposition
}

// requestJSON is the counterexample's action request as one line of JSON
// (polc eval --input takes it).
func requestJSON(ce *prove.Counterexample) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(ce.Request)
	return strings.TrimSpace(buf.String())
}

func printProveText(w io.Writer, results []proveResult) {
	for _, r := range results {
		if r.Pos == "" {
			fmt.Fprintf(w, "%-9s %s: %s\n", r.Status, r.Label, r.Property)
		} else {
			fmt.Fprintf(w, "%-9s %s: %s: %s\n", r.Status, r.Pos, r.Label, r.Property)
		}
		switch r.Status {
		case prove.Fails:
			ce := r.Counterexample
			fmt.Fprintf(w, "          request: %s\n", requestJSON(ce))
			if ce.Registered != nil {
				hints, _ := json.Marshal(ce.Registered.Hints)
				fmt.Fprintf(w, "          action %s registered with hints %s\n", ce.Registered.ID, hints)
			}
			for _, d := range ce.Decisions {
				why := d.Reasons
				if d.Disposition == "allow" {
					why = d.RuleIDs
				}
				fmt.Fprintf(w, "          %s: %s on both engines (%s)\n", d.Policy, dispositionText(d), strings.Join(why, ", "))
			}
		case prove.Undecided:
			fmt.Fprintf(w, "          %s\n", r.Reason)
		}
	}
}
