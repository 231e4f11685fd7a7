// Package executor is polc's runtime: the authoritative action executor,
// Executor.Execute, the only path from a request to an action's callable
// (docs/executor.md), with its outcomes, profiles, admission, backends,
// governance, projection and budgets. It also holds the action registry and
// the Normalizer that resolves a request's action against it. It normalizes
// requests with package normalize and decides them with package decision
// (docs/architecture.md).
package executor
