package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/snapshot"
)

type evalParams struct {
	snapshot string
	input    string
	engine   string
	explain  bool
	now      string
}

func newEvalCmd(e *env) *cobra.Command {
	p := &evalParams{}
	c := &cobra.Command{
		Use:   "eval --snapshot S --input REQ.json [--engine native|opa] [--explain]",
		Short: "Evaluate a request against a compiled snapshot",
		Long: `eval prints the decision for a request as JSON. REQ.json is an action request
({"action", "arguments", "principal", "tenant", "workspace"[, "time", "usage"]}),
which is normalized first, or a normalized request (polc normalize). A request
that cannot be normalized is a deny decision with its reason. Exit 0 whenever a
decision was produced, 2 when the snapshot or the input cannot be read.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return runEval(c.Context(), e, p) },
	}
	c.Flags().StringVar(&p.snapshot, "snapshot", "", "compiled snapshot file (required)")
	c.Flags().StringVar(&p.input, "input", "-", "request file, - for standard input")
	c.Flags().StringVar(&p.engine, "engine", "native", "native or opa (the Rego bundle in embedded OPA)")
	c.Flags().BoolVar(&p.explain, "explain", false, "also print the normalized request and the match sets (native engine)")
	c.Flags().StringVar(&p.now, "now", "", "RFC 3339 time for requests without one (default: the clock)")
	return c
}

func newNormalizeCmd(e *env) *cobra.Command {
	p := &evalParams{}
	c := &cobra.Command{
		Use:   "normalize --input REQ.json",
		Short: "Print the normalized form of an action request",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			req, err := readRequest(e, p)
			if err != nil {
				return err
			}
			if req.nerr != nil {
				return printJSON(e, map[string]any{"error": req.nerr.Reason, "detail": req.nerr.Detail})
			}
			return printJSON(e, req.normalized)
		},
	}
	c.Flags().StringVar(&p.input, "input", "-", "action request file, - for standard input")
	c.Flags().StringVar(&p.now, "now", "", "RFC 3339 time for requests without one (default: the clock)")
	return c
}

// request is a decoded eval input: a normalized request or the reason the
// action request could not be normalized.
type request struct {
	normalized *executor.Normalized
	nerr       *executor.NormalizeError
}

func readRequest(e *env, p *evalParams) (*request, error) {
	name, data, err := readInput(e, p.input)
	if err != nil {
		var d diag.List
		d.Add(diag.Pos{File: name}, diag.CodeIO, "cannot read: %v", err)
		return nil, report(e, d, diag.FormatText)
	}
	bad := func(err error) error {
		var d diag.List
		d.Add(diag.Pos{File: name}, diag.CodeInvalidInput, "%v", err)
		return report(e, d, diag.FormatText)
	}
	var shape map[string]json.RawMessage
	if err := json.Unmarshal(data, &shape); err != nil {
		return nil, bad(fmt.Errorf("not a JSON object: %v", err))
	}
	_, hasPaths := shape["paths"]
	_, hasCommands := shape["commands"]
	if hasPaths || hasCommands {
		n, err := executor.ParseNormalized(data)
		if err != nil {
			return nil, bad(err)
		}
		return &request{normalized: n}, nil
	}
	ar, err := executor.ParseActionRequest(data)
	if err != nil {
		return nil, bad(err)
	}
	norm := &executor.Normalizer{}
	if p.now != "" {
		t, err := time.Parse(time.RFC3339Nano, p.now)
		if err != nil {
			return nil, usagef("--now %q: want RFC 3339", p.now)
		}
		norm.Now = func() time.Time { return t }
	}
	n, nerr := norm.Normalize(ar)
	return &request{normalized: n, nerr: nerr}, nil
}

func runEval(ctx context.Context, e *env, p *evalParams) error {
	if p.snapshot == "" {
		return usagef("eval: --snapshot is required")
	}
	if p.engine != "native" && p.engine != "opa" {
		return usagef("--engine %q: want native or opa", p.engine)
	}
	name, data, err := readInput(e, p.snapshot)
	if err != nil {
		var d diag.List
		d.Add(diag.Pos{File: name}, diag.CodeIO, "cannot read: %v", err)
		return report(e, d, diag.FormatText)
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		var d diag.List
		d.Add(diag.Pos{File: name}, diag.CodeInvalidInput, "%v", err)
		return report(e, d, diag.FormatText)
	}
	req, err := readRequest(e, p)
	if err != nil {
		return err
	}
	if req.nerr != nil {
		return printJSON(e, executor.Decision{Disposition: executor.Deny, RuleIDs: []string{}, Reasons: []string{req.nerr.Reason}, Gates: []executor.GateResult{}})
	}
	pol, err := executor.Compile(snap)
	if err != nil {
		var d diag.List
		d.Add(diag.Pos{File: name}, diag.CodeInvalidInput, "%v", err)
		return report(e, d, diag.FormatText)
	}
	var dec executor.Decision
	var expl *executor.Explanation
	switch {
	case p.engine == "opa":
		bb, err := compiler.WriteBundle([]*snapshot.Snapshot{snap}, nil)
		if err != nil {
			return err
		}
		eng, err := regoeval.New(ctx, bb)
		if err != nil {
			return err
		}
		if dec, err = eng.Evaluate(ctx, snap.Name, req.normalized); err != nil {
			return err
		}
	case p.explain:
		d, x, _ := pol.Explain(req.normalized)
		dec, expl = d, &x
	default:
		dec, _ = pol.Evaluate(req.normalized)
	}
	if p.explain {
		out := map[string]any{"decision": dec, "request": req.normalized}
		if expl != nil {
			out["explanation"] = expl
		}
		return printJSON(e, out)
	}
	return printJSON(e, dec)
}

// printJSON writes v as indented JSON with a trailing newline.
func printJSON(e *env, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := e.stdout.Write(buf.Bytes())
	return err
}
