// Package executor is polc's runtime: the authoritative action executor,
// Executor.Execute, the only path from a request to an action's callable
// (docs/executor.md), with its outcomes, profiles, admission, backends,
// governance, projection and budgets. Its Registry adds each action's
// callable to the descriptor that package normalize's Catalog holds. It
// normalizes requests with package normalize and decides them with
// package decision (docs/architecture.md).
package executor
