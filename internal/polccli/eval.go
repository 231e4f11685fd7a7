package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
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
that cannot be normalized is a deny decision with its reason.

--explain prints {"decision", "request", "explanation"}: the normalized request
(null if the request cannot be normalized) and the native evaluator's match sets,
with "normalize_error" ({"reason", "detail"}, or null) saying why a request could
not be normalized. The match sets are the native evaluator's, so --explain needs
--engine native; with --engine opa it is a usage error.

Exit 0 whenever a decision was produced, 2 on a usage error or when the snapshot
or the input cannot be read or is malformed.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return runEval(c.Context(), e, p) },
	}
	c.Flags().StringVar(&p.snapshot, "snapshot", "", "compiled snapshot file (required)")
	c.Flags().StringVar(&p.input, "input", "-", "request file, - for standard input")
	c.Flags().StringVar(&p.engine, "engine", "native", "native or opa (the Rego bundle in embedded OPA)")
	c.Flags().BoolVar(&p.explain, "explain", false, "also print the normalized request and the match sets (native engine only)")
	c.Flags().StringVar(&p.now, "now", "", "RFC 3339 time for requests without one (default: the clock)")
	return c
}

func newNormalizeCmd(e *env) *cobra.Command {
	p := &evalParams{}
	c := &cobra.Command{
		Use:   "normalize --input REQ.json",
		Short: "Print the normalized form of an action request",
		Long: `normalize prints, as JSON, the normalized request the engines evaluate.

A request the normalizer refuses (an unknown action, a path escaping the
workspace, a command it cannot parse, …) is input normalize cannot process:
an invalid_input diagnostic with the reason and its detail, nothing on stdout.
(eval decides such a request: a deny with that reason.)

Exit 0 when the request was normalized, 2 on a usage error or when the input
cannot be read, is malformed or cannot be normalized.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			req, err := readRequest(e, p)
			if err != nil {
				return err
			}
			if req.nerr != nil {
				return reportOne(e, diag.Pos{File: req.name}, diag.CodeInvalidInput, "cannot normalize the request: %s: %s", req.nerr.Reason, req.nerr.Detail)
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
	name       string // the input as diagnostics name it
	normalized *normalize.Normalized
	nerr       *normalize.NormalizeError
}

func readRequest(e *env, p *evalParams) (*request, error) {
	name, data, err := readInput(e, p.input)
	if err != nil {
		return nil, reportOne(e, diag.Pos{File: name}, diag.CodeIO, "cannot read: %v", err)
	}
	bad := func(err error) error {
		line, col := requestErrorPos(data, err)
		return reportOne(e, diag.Pos{File: name, Line: line, Col: col}, diag.CodeInvalidInput, "%v", err)
	}
	// Syntax first, at the line and column of the first problem (as
	// I-JSON, which both request forms must be).
	if _, err := jcs.Check(data); err != nil {
		var se *jcs.SyntaxError
		if errors.As(err, &se) {
			return nil, reportOne(e, diag.Pos{File: name, Line: se.Line, Col: se.Col}, diag.CodeInvalidInput, "%s", se.Msg)
		}
		return nil, bad(err)
	}
	var shape map[string]json.RawMessage
	if json.Unmarshal(data, &shape) != nil {
		return nil, bad(errors.New("the request is not a JSON object"))
	}
	_, hasPaths := shape["paths"]
	_, hasCommands := shape["commands"]
	if hasPaths || hasCommands {
		n, err := normalize.ParseNormalized(data)
		if err != nil {
			return nil, bad(err)
		}
		return &request{name: name, normalized: n}, nil
	}
	ar, err := normalize.ParseActionRequest(data)
	if err != nil {
		return nil, bad(err)
	}
	now, err := fixedClock(p.now)
	if err != nil {
		return nil, err
	}
	norm := &normalize.Normalizer{Now: now}
	n, nerr := norm.Normalize(ar)
	return &request{name: name, normalized: n, nerr: nerr}, nil
}

func runEval(ctx context.Context, e *env, p *evalParams) error {
	if p.snapshot == "" {
		return usagef("eval: --snapshot is required")
	}
	if p.engine != "native" && p.engine != "opa" {
		return usagef("--engine %q: want native or opa", p.engine)
	}
	if p.explain && p.engine != "native" {
		// The match sets are the native evaluator's scratch state; beside
		// an OPA decision they would explain a decision not printed.
		return usagef("--explain needs --engine native (the match sets are the native evaluator's)")
	}
	name, data, err := readInput(e, p.snapshot)
	if err != nil {
		return reportOne(e, diag.Pos{File: name}, diag.CodeIO, "cannot read: %v", err)
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		return reportOne(e, diag.Pos{File: name}, diag.CodeInvalidInput, "%v", err)
	}
	req, err := readRequest(e, p)
	if err != nil {
		return err
	}
	if req.nerr != nil {
		dec := decision.Decision{Disposition: decision.Deny, RuleIDs: []string{}, Reasons: []string{req.nerr.Reason}, Gates: []decision.GateResult{}}
		if p.explain {
			// Nothing was evaluated: empty match sets, and why.
			return printJSON(e, explained{Decision: dec, Explanation: &explanation{
				Explanation:    decision.Explanation{DenyMatches: []string{}, NotAllowed: map[string]string{}, Grants: []string{}, Approvals: []string{}},
				NormalizeError: &normalizeError{Reason: req.nerr.Reason, Detail: req.nerr.Detail},
			}})
		}
		// The decision document is the contract on stdout; why the request
		// was denied before any rule ran goes to stderr, so that a reason
		// code alone is never all a user sees.
		var d diag.List
		d.Warn(diag.Pos{File: req.name}, req.nerr.Reason, "denied before evaluation: %s", req.nerr.Detail)
		if err := diag.Print(e.stderr, d, diag.FormatText); err != nil {
			return err
		}
		return printJSON(e, dec)
	}
	pol, err := decision.Compile(snap)
	if err != nil {
		return reportOne(e, diag.Pos{File: name}, diag.CodeInvalidInput, "%v", err)
	}
	var dec decision.Decision
	var expl *explanation
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
		dec, expl = d, &explanation{Explanation: x}
	default:
		dec, _ = pol.Evaluate(req.normalized)
	}
	if p.explain {
		return printJSON(e, explained{Decision: dec, Request: req.normalized, Explanation: expl})
	}
	return printJSON(e, dec)
}

// explained is eval --explain's output, one shape whether or not the
// request could be normalized.
type explained struct {
	Decision    decision.Decision     `json:"decision"`
	Request     *normalize.Normalized `json:"request"`
	Explanation *explanation          `json:"explanation"`
}

type explanation struct {
	decision.Explanation
	NormalizeError *normalizeError `json:"normalize_error"`
}

// normalizeError is what polc normalize reports for the same request.
type normalizeError struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
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
