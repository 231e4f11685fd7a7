// Package prove answers questions about what a policy can ever decide —
// "can any request matching this pattern be allowed?", "does every one
// need approval?", "does this policy allow anything that one denies?" —
// exactly, with the pattern algebra (internal/algebra), and confirms each
// counterexample on both engines before reporting it (docs/prove.md).
//
// A request is decided on independent parts (principal, tenant, action,
// one target value, time, usage), and the decision is monotone in its
// facets: whatever a request with more facets is allowed, escalated or
// denied for, a request of one of a few minimal shapes is too (shape). So
// each question is a finite disjunction of conjunctions of per-part
// regular conditions, each decided by a product search, never by sampling.
package prove

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/algebra"
	"polc.dev/polc/normalize"
)

// Property kinds.
const (
	// Never: no request matching the pattern is allowed or escalated
	// (every one is denied).
	Never = "never"
	// AlwaysEscalates: no request matching the pattern is allowed without
	// an approval (every one is escalated or denied).
	AlwaysEscalates = "always_escalates"
	// NeverAllowsBeyond: no request is treated more permissively by the
	// policy than by the other (deny < escalate < allow).
	NeverAllowsBeyond = "never_allows_beyond"
)

// Property is one question about a policy.
type Property struct {
	Policy string
	Kind   string
	// Pattern restricts Never and AlwaysEscalates.
	Pattern RequestPattern
	// Other is NeverAllowsBeyond's other policy.
	Other string
}

// String says the property in one line.
func (p Property) String() string {
	if p.Kind == NeverAllowsBeyond {
		return fmt.Sprintf("%s never_allows_beyond %s", p.Policy, p.Other)
	}
	return fmt.Sprintf("%s %s %s", p.Policy, p.Kind, p.Pattern)
}

// Statuses of a Result.
const (
	Holds     = "holds"
	Fails     = "fails"
	Undecided = "undecided"
)

// Result is the answer to a property.
type Result struct {
	Status string `json:"status"`
	// Reason says why a property is undecided.
	Reason string `json:"reason,omitempty"`
	// Counterexample is the confirmed request of a failing property.
	Counterexample *Counterexample `json:"counterexample,omitempty"`
}

// Counterexample is a request that violates a property, with the
// decisions each engine took on it under each policy involved.
type Counterexample struct {
	Request normalize.ActionRequest `json:"request"`
	// Registered is the action's descriptor when the action is no
	// built-in: the request is one a runtime registering it could make.
	Registered *normalize.ActionDescriptor `json:"registered_action,omitempty"`
	Decisions  []PolicyDecision            `json:"decisions"`
}

// PolicyDecision is one policy's disposition of a counterexample on both
// engines (equal, or the counterexample would not be reported).
type PolicyDecision struct {
	Policy      string   `json:"policy"`
	Disposition string   `json:"disposition"`
	Approver    *string  `json:"approver_class,omitempty"`
	RuleIDs     []string `json:"rule_ids"`
	Reasons     []string `json:"reasons"`
}

// Engine evaluates a normalized request under a policy by name: the OPA
// side of confirmation (regoeval.Engine).
type Engine interface {
	Evaluate(ctx context.Context, policy string, req *normalize.Normalized) (decision.Decision, error)
}

// Prover answers properties over a set of policies.
type Prover struct {
	Policies map[string]*Policy
	// OPA is the second engine every counterexample is confirmed on.
	OPA Engine
	// Now is the time witnesses use when the policies allow it.
	Now time.Time
	// Retries bounds how many witnesses of one case are tried when one
	// is not confirmed (default 3).
	Retries int
	// Budget bounds the work of each question, in algebra.Budget units
	// (default DefaultBudget): a property, and each rule Lint judges. A
	// question that needs more is undecided (docs/prove.md, "Budget").
	Budget int64

	cache cache
}

// DefaultBudget is the work a Prover may spend on one question, in
// algebra.Budget units: about fifty times what the largest question of a
// policy of 2,000 rules takes (BenchmarkProve, BenchmarkLint), and at
// most a few hundred megabytes of product states.
const DefaultBudget = 20_000_000

// units is the budget of one question.
func (pr *Prover) units() int64 {
	if pr.Budget <= 0 {
		return DefaultBudget
	}
	return pr.Budget
}

// question starts a question of the given units: every search until the
// next question charges them, and ctx stops them. A Prover answers one
// question at a time.
func (pr *Prover) question(ctx context.Context, units int64) {
	pr.cache.budget = algebra.NewBudget(ctx, units)
}

// Check answers one property.
func (pr *Prover) Check(ctx context.Context, prop Property) (Result, error) {
	this := pr.Policies[prop.Policy]
	if this == nil {
		return Result{}, fmt.Errorf("no policy %q", prop.Policy)
	}
	var other *Policy
	if prop.Kind == NeverAllowsBeyond {
		if other = pr.Policies[prop.Other]; other == nil {
			return Result{}, fmt.Errorf("no policy %q", prop.Other)
		}
	}
	switch prop.Kind {
	case Never, AlwaysEscalates, NeverAllowsBeyond:
	default:
		return Result{}, fmt.Errorf("unknown property kind %q", prop.Kind)
	}
	return pr.check(ctx, prop.Kind, prop.Pattern, this, other)
}

// Beyond answers "this never allows beyond other" for two prepared
// policies, which may have one name (two versions of a policy, each with
// its own Engine): polc diff's exact widening.
func (pr *Prover) Beyond(ctx context.Context, this, other *Policy) (Result, error) {
	return pr.check(ctx, NeverAllowsBeyond, RequestPattern{}, this, other)
}

func (pr *Prover) check(ctx context.Context, kind string, pattern RequestPattern, this, other *Policy) (Result, error) {
	pr.question(ctx, pr.units())
	defer func() { pr.cache.budget = nil }()
	undecided := ""
	policies := []*Policy{this}
	if other != nil {
		policies = append(policies, other)
	}
	for _, s := range shapes() {
		var cases []cond
		var claim func([]string) bool // dispositions, by policies' order
		switch kind {
		case Never, AlwaysEscalates:
			pc, ok := pattern.cond(s)
			if !ok {
				continue
			}
			if kind == Never {
				cases = []cond{this.ok(s).and(pc)}
				claim = func(d []string) bool { return d[0] != decision.Deny }
			} else {
				cases = []cond{this.allowed(s).and(pc)}
				claim = func(d []string) bool { return d[0] == decision.Allow }
			}
		case NeverAllowsBeyond:
			cases = beyondCases(this, other, s)
			claim = func(d []string) bool { return rank(d[0]) > rank(d[1]) }
		}
		for _, c := range cases {
			ce, why, err := pr.counterexample(ctx, s, c, policies, claim)
			if err != nil {
				return Result{}, err
			}
			if ce != nil {
				return Result{Status: Fails, Counterexample: ce}, nil
			}
			if why != "" && undecided == "" {
				undecided = why
			}
		}
	}
	if undecided != "" {
		return Result{Status: Undecided, Reason: undecided}, nil
	}
	return Result{Status: Holds}, nil
}

// beyondCases are the conditions of which each makes this treat a
// request of shape s more permissively than other, and one holds whenever
// it does: this lets it through where other denies it, or allows it where
// other escalates it.
func beyondCases(this, other *Policy, s shape) []cond {
	var cases []cond
	ok := this.ok(s)
	for _, d := range other.denied(s) {
		cases = append(cases, ok.and(d))
	}
	allowed := this.allowed(s)
	for _, e := range other.escalated(s) {
		cases = append(cases, allowed.and(e))
	}
	return cases
}

func rank(disposition string) int {
	switch disposition {
	case decision.Allow:
		return 2
	case decision.Escalate:
		return 1
	}
	return 0
}

// counterexample finds and confirms a request of shape s satisfying c:
// nil and a reason when one exists but none was confirmed, nil and ""
// when none exists.
func (pr *Prover) counterexample(ctx context.Context, s shape, c cond, policies []*Policy, claim func([]string) bool) (*Counterexample, string, error) {
	retries := pr.Retries
	if retries <= 0 {
		retries = 3
	}
	var exclude []string
	why := ""
	for range retries {
		w, found, err := solve(&pr.cache, s, c, pr.Now, exclude)
		switch {
		case errors.Is(err, errUndecided):
			return nil, fmt.Sprintf("%s: a value outside what a witness can be made of (%q) would violate it", s.describe(), strings.Join(w.values, " ")), nil
		case errors.Is(err, algebra.ErrTooLarge):
			return nil, fmt.Sprintf("%s: the search exceeded its work bound of %d units (docs/prove.md, \"Budget\")", s.describe(), pr.cache.budget.Total()), nil
		case err != nil:
			return nil, "", err
		case !found:
			if why != "" {
				return nil, why, nil
			}
			return nil, "", nil
		}
		ce, problem, err := pr.confirm(ctx, w, policies, claim)
		if err != nil {
			return nil, "", err
		}
		if ce != nil {
			return ce, "", nil
		}
		why = fmt.Sprintf("%s: a witness was not confirmed: %s", s.describe(), problem)
		if len(w.values) > 0 {
			exclude = append(exclude, w.values[0])
		}
	}
	return nil, why, nil
}

// confirm normalizes the witness and evaluates it under every policy on
// both engines: the counterexample when both engines agree and the claim
// holds, else what went wrong.
func (pr *Prover) confirm(ctx context.Context, w Witness, policies []*Policy, claim func([]string) bool) (*Counterexample, string, error) {
	req, cat, err := w.Request()
	if err != nil {
		return nil, err.Error(), nil
	}
	n, nerr := (&normalize.Normalizer{Catalog: cat, Now: func() time.Time { return pr.Now }}).Normalize(req)
	if nerr != nil {
		return nil, fmt.Sprintf("the normalizer refused it (%s: %s)", nerr.Reason, nerr.Detail), nil
	}
	var native, opa []string
	ce := &Counterexample{Request: req}
	if cat != nil {
		d, _ := cat.Resolve(req.Action)
		ce.Registered = &d
	}
	for _, p := range policies {
		dn, _ := p.dec.Evaluate(n)
		eng := pr.OPA
		if p.Engine != nil {
			eng = p.Engine
		}
		do, err := eng.Evaluate(ctx, p.Name(), n)
		if err != nil {
			return nil, "", fmt.Errorf("opa: %w", err)
		}
		if dn.Disposition != do.Disposition {
			return nil, fmt.Sprintf("the engines disagree under %s: native %s, opa %s", p.Name(), dn.Disposition, do.Disposition), nil
		}
		native, opa = append(native, dn.Disposition), append(opa, do.Disposition)
		ce.Decisions = append(ce.Decisions, PolicyDecision{Policy: p.Name(), Disposition: dn.Disposition, Approver: dn.ApproverClass, RuleIDs: dn.RuleIDs, Reasons: dn.Reasons})
	}
	if !claim(native) || !claim(opa) {
		return nil, "its decisions do not violate the property", nil
	}
	return ce, "", nil
}
