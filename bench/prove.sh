#!/usr/bin/env bash
# Runs BenchmarkProve: each property of internal/prove's bigProperties
# (never, always_escalates, never_allows_beyond both ways) on a policy of
# 2,000 rules and a child narrowing it, a fresh prover per answer, and
# prints the time of each; then BenchmarkLint, polc vet's findings on that
# policy (no target: printed for comparison).
#
# Target (docs/prove.md): every property answered in <= 1 s.
#
# Usage: bench/prove.sh [benchtime]   (default 5x)
set -euo pipefail
cd "$(dirname "$0")/.."
bt=${1:-5x}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test ./internal/prove -run '^$' -bench 'BenchmarkProve|BenchmarkLint' -benchtime "$bt" | tee "$out" >&2
awk '
/^BenchmarkProve\// {
  name=$1; sub(/^BenchmarkProve\//, "", name); sub(/-[0-9]+$/, "", name)
  for (i=3; i<=NF; i++) if ($(i+1)=="ns/op") ns=$i
  printf "%-40s %8.3f s\n", name, ns/1e9
  if (ns > 1e9) fail=1
}
/^BenchmarkLint/ {
  for (i=3; i<=NF; i++) if ($(i+1)=="ns/op") ns=$i
  printf "%-40s %8.3f s\n", "lint (polc vet findings)", ns/1e9
}
END { print (fail ? "target: NOT MET (a property took more than 1 s)" : "target: met (every property <= 1 s)") }' "$out"
