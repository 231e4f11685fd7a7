// Package decision is polc's native decision engine: Compile turns a
// compiled snapshot into a Policy, and Policy.Decide (or Evaluate,
// EvaluateInto, Explain) decides a normalize.Normalized request without
// allocating on the hot path. It is the small API a runtime embeds to
// decide over a snapshot; the Rego bundle polc compiles is its twin in OPA
// (docs/architecture.md, docs/decisions.md).
package decision
