package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/prove"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

type diffParams struct {
	old, new string
	format   string
	parents  []string
	now      string
}

func newDiffCmd(e *env) *cobra.Command {
	p := &diffParams{}
	c := &cobra.Command{
		Use:   "diff OLD NEW [--format text|json]",
		Short: "List permissions that widened or narrowed between two versions",
		Long: `diff compares OLD and NEW semantically, policy by policy (matched by
policy_id, then by name; a rename, a new policy_id and a new parent are
reported, the last two as widenings).
Each side is a snapshot file, a compile output directory (DIR/snapshots), or
declarations (a CUE file or directory, JSON or YAML), which are compiled.
Every widened or narrowed permission is listed; a widening that NEW's recorded
expansions approve is marked with its authority, one NEW's parent already
grants (the parent OLD had too) with the parent. --parent gives parent snapshots that declarations on
either side may extend (as for compile); they also serve as NEW's parents.
Exit 1 when any widening is not approved (for CI), 0 otherwise, 2 when an
input cannot be read.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			p.old, p.new = args[0], args[1]
			return runDiff(c.Context(), e, p)
		},
	}
	c.Flags().StringVar(&p.format, "format", "text", "text or json")
	c.Flags().StringArrayVar(&p.parents, "parent", nil, "parent snapshot file that declarations may extend (repeatable)")
	c.Flags().StringVar(&p.now, "now", "", nowUsage)
	return c
}

// loadSide reads one side of a diff; declarations may extend parents.
func loadSide(e *env, arg string, parents []*snapshot.Snapshot, now func() time.Time) ([]*snapshot.Snapshot, diag.List) {
	var diags diag.List
	abs := e.abs(arg)
	fi, err := os.Stat(abs)
	if err != nil {
		diags.Add(diag.Pos{File: diag.Rel(e.dir, abs)}, diag.CodeIO, "cannot read: %v", err)
		return nil, diags
	}
	var files []string
	switch {
	case fi.IsDir():
		if entries, err := os.ReadDir(filepath.Join(abs, "snapshots")); err == nil {
			for _, en := range entries {
				if strings.HasSuffix(en.Name(), ".json") && !strings.HasSuffix(en.Name(), ".srcmap.json") {
					files = append(files, filepath.Join(abs, "snapshots", en.Name()))
				}
			}
		}
	case strings.HasSuffix(abs, ".json"):
		if data, err := os.ReadFile(abs); err == nil {
			s, err := snapshot.Parse(data)
			if err == nil {
				return []*snapshot.Snapshot{s}, nil
			}
			// A snapshot that does not parse (tampered, digest mismatch)
			// is an invalid input, not declarations full of unknown
			// fields: declaration files have no top-level "format".
			var head struct {
				Format *json.RawMessage `json:"format"`
			}
			if json.Unmarshal(data, &head) == nil && head.Format != nil {
				diags.Add(diag.Pos{File: diag.Rel(e.dir, abs)}, diag.CodeInvalidInput, "%v", err)
				return nil, diags
			}
		}
	}
	if files != nil {
		var out []*snapshot.Snapshot
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				diags.Add(diag.Pos{File: diag.Rel(e.dir, f)}, diag.CodeIO, "cannot read: %v", err)
				continue
			}
			s, err := snapshot.Parse(data)
			if err != nil {
				diags.Add(diag.Pos{File: diag.Rel(e.dir, f)}, diag.CodeInvalidInput, "%v", err)
				continue
			}
			out = append(out, s)
		}
		return out, diags
	}
	res := compiler.Vet(compiler.Config{Dir: e.dir, Parents: parents, Now: now}, []string{arg})
	return res.Snapshots, res.Diagnostics.Errors()
}

// widening is the exact verdict on one policy: a request NEW decides more
// permissively than OLD (deny < escalate < allow), confirmed on both
// engines, or none.
type widening struct {
	Policy string `json:"policy"`
	// Status is "widened", "none" or "undecided".
	Status  string                   `json:"status"`
	Request *normalize.ActionRequest `json:"request,omitempty"`
	Old     string                   `json:"old,omitempty"`
	New     string                   `json:"new,omitempty"`
	Reason  string                   `json:"reason,omitempty"`
	// Unexplained: no listed widening of the policy explains the request
	// (or the verdict is undecided): counted as an unapproved widening.
	Unexplained bool `json:"unexplained,omitempty"`
}

// exactWidenings decides, for each NEW policy with an OLD one, whether
// some request is decided more permissively by NEW (docs/prove.md).
func exactWidenings(ctx context.Context, old, new []*snapshot.Snapshot, now time.Time) ([]widening, error) {
	pred := compiler.Predecessors(old, new)
	if len(pred) == 0 {
		return nil, nil
	}
	engine := func(ss []*snapshot.Snapshot) (*regoeval.Engine, error) {
		bb, err := compiler.WriteBundle(ss, nil)
		if err != nil {
			return nil, err
		}
		return regoeval.New(ctx, bb)
	}
	oldEng, err := engine(old)
	if err != nil {
		return nil, err
	}
	newEng, err := engine(new)
	if err != nil {
		return nil, err
	}
	pr := &prove.Prover{Now: now}
	sorted := slices.Clone(new)
	slices.SortFunc(sorted, func(a, b *snapshot.Snapshot) int { return strings.Compare(a.Name, b.Name) })
	var out []widening
	for _, n := range sorted {
		o := pred[n]
		if o == nil {
			continue
		}
		np, err := prove.NewPolicy(n)
		if err != nil {
			return nil, err
		}
		op, err := prove.NewPolicy(o)
		if err != nil {
			return nil, err
		}
		np.Engine, op.Engine = newEng, oldEng
		r, err := pr.Beyond(ctx, np, op)
		if err != nil {
			return nil, err
		}
		w := widening{Policy: n.Name, Status: "none"}
		switch r.Status {
		case prove.Fails:
			req := r.Counterexample.Request
			w.Status, w.Request = "widened", &req
			w.New, w.Old = r.Counterexample.Decisions[0].Disposition, r.Counterexample.Decisions[1].Disposition
		case prove.Undecided:
			w.Status, w.Reason = prove.Undecided, r.Reason
		}
		out = append(out, w)
	}
	return out, nil
}

// requestLine is an action request as one line of JSON.
func requestLine(r *normalize.ActionRequest) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(r)
	return strings.TrimSpace(buf.String())
}

func runDiff(ctx context.Context, e *env, p *diffParams) error {
	if p.format != "text" && p.format != "json" {
		return usagef("--format %q: want text or json", p.format)
	}
	now, err := fixedClock(p.now)
	if err != nil {
		return err
	}
	parents, d0 := readParents(e, p.parents)
	if d0.HasErrors() {
		return report(e, d0, diag.FormatText)
	}
	old, d1 := loadSide(e, p.old, parents, now)
	new, d2 := loadSide(e, p.new, parents, now)
	if diags := append(d1, d2...); diags.HasErrors() {
		return report(e, diags, diag.FormatText)
	}
	changes := compiler.DiffSets(old, new, parents...)
	unapproved := 0
	widened := map[string]bool{} // policies with a listed widening
	for _, c := range changes {
		if c.Unapproved() {
			unapproved++
		}
		if c.Kind == "widened" {
			widened[c.Policy] = true
		}
	}
	verdicts, err := exactWidenings(ctx, old, new, now())
	if err != nil {
		return err
	}
	for i := range verdicts {
		v := &verdicts[i]
		// The listed widenings are what expansions approve; the exact
		// verdict adds the request. One no listed change explains, or an
		// undecided one, fails closed.
		if (v.Status == "widened" || v.Status == prove.Undecided) && !widened[v.Policy] {
			v.Unexplained = true
			unapproved++
		}
	}
	if p.format == "json" {
		if changes == nil {
			changes = []compiler.Change{}
		}
		if verdicts == nil {
			verdicts = []widening{}
		}
		if err := printJSON(e, map[string]any{"changes": changes, "requests": verdicts, "unapproved_widenings": unapproved}); err != nil {
			return err
		}
	} else {
		for _, c := range changes {
			fmt.Fprintln(e.stdout, c)
		}
		for _, v := range verdicts {
			switch {
			case v.Status == "widened":
				line := fmt.Sprintf("%s: widened request %s (old %s, new %s, on both engines)", v.Policy, requestLine(v.Request), v.Old, v.New)
				if v.Unexplained {
					line += " [no listed change explains it]"
				}
				fmt.Fprintln(e.stdout, line)
			case v.Status == prove.Undecided:
				fmt.Fprintf(e.stdout, "%s: widening undecided: %s\n", v.Policy, v.Reason)
			case widened[v.Policy]:
				fmt.Fprintf(e.stdout, "%s: no request is decided more permissively (deny < escalate < allow)\n", v.Policy)
			}
		}
		if unapproved > 0 {
			fmt.Fprintf(e.stderr, "polc diff: %d widening(s) without an approved expansion\n", unapproved)
		}
	}
	if unapproved > 0 {
		return &exitError{ExitFindings}
	}
	return nil
}
