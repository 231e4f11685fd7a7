// Package regoeval evaluates polc decisions with OPA, by loading a polc
// bundle into the embedded OPA SDK and querying data.polc.decision. It is
// the second engine of polc eval --engine opa and of the differential tests.
package regoeval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/util"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/strictjson"
	"polc.dev/polc/normalize"
)

// Query is the decision query of every polc bundle.
const Query = "data.polc.decision"

// Engine is a prepared decision query over one bundle. It is safe for
// concurrent use.
type Engine struct {
	pq rego.PreparedEvalQuery
}

// New loads a bundle (.tar.gz bytes, signatures not verified: verification
// is OPA's job when it loads a bundle from disk) and prepares the query.
func New(ctx context.Context, bundleBytes []byte) (*Engine, error) {
	b, err := bundle.NewReader(bytes.NewReader(bundleBytes)).WithSkipBundleVerification(true).Read()
	if err != nil {
		return nil, fmt.Errorf("reading bundle: %w", err)
	}
	pq, err := rego.New(rego.Query(Query), rego.ParsedBundle("polc", &b)).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("preparing %s: %w", Query, err)
	}
	return &Engine{pq: pq}, nil
}

// Input converts a decision input to OPA's value form once, so that
// benchmarks can measure evaluation alone. A request holding a string that
// is not text (normalize.Normalized.CheckText) is an error: encoding/json
// would hand OPA U+FFFD for bytes the native engine matches as they are.
func Input(policy string, req *normalize.Normalized) (ast.Value, error) {
	if err := req.CheckText(); err != nil {
		return nil, err
	}
	if !utf8.ValidString(policy) {
		return nil, fmt.Errorf("policy name %q is not UTF-8", policy)
	}
	raw, err := json.Marshal(map[string]any{"policy": policy, "request": req})
	if err != nil {
		return nil, err
	}
	var v any
	if err := util.UnmarshalJSON(raw, &v); err != nil {
		return nil, err
	}
	return ast.InterfaceToValue(v)
}

// Evaluate returns the bundle's decision for req under the named policy.
func (e *Engine) Evaluate(ctx context.Context, policy string, req *normalize.Normalized) (decision.Decision, error) {
	in, err := Input(policy, req)
	if err != nil {
		return decision.Decision{}, err
	}
	return e.EvaluateParsed(ctx, in)
}

// EvaluateParsed evaluates an input made by Input.
func (e *Engine) EvaluateParsed(ctx context.Context, in ast.Value) (decision.Decision, error) {
	var d decision.Decision
	rs, err := e.pq.Eval(ctx, rego.EvalParsedInput(in))
	if err != nil {
		return d, err
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return d, fmt.Errorf("%s: %d results", Query, len(rs))
	}
	raw, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		return d, err
	}
	if err := strictjson.Decode(raw, &d); err != nil {
		return d, fmt.Errorf("%s returned an unexpected shape: %v", Query, err)
	}
	return d, nil
}

// EvalResult evaluates an input made by Input and returns OPA's result
// set as it is, undecoded: benchmarks measure OPA's evaluation with it.
func (e *Engine) EvalResult(ctx context.Context, in ast.Value) (rego.ResultSet, error) {
	return e.pq.Eval(ctx, rego.EvalParsedInput(in))
}
