#!/usr/bin/env bash
# Runs BenchmarkDecision for both engines in one run and prints, per size and
# request class, native ns/op, native p50, native allocs/op, OPA ns/op (the
# prepared query on polc's bundle) and the OPA/native ratio.
#
# Targets (issue 3): ratio >= 100 everywhere; native p50 <= 2000 ns at
# 2000 rules; 0 allocs/op.
#
# Usage: bench/decisions.sh [benchtime]   (default 2000x for native; OPA
# uses a tenth of it, at least 50x)
set -euo pipefail
cd "$(dirname "$0")/.."
bt=${1:-2000x}
n=${bt%x}
obt="$(( n / 10 > 50 ? n / 10 : 50 ))x"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test ./decision -run '^$' -bench 'BenchmarkDecision/native' -benchtime "$bt" | tee -a "$out" >&2
go test ./decision -run '^$' -bench 'BenchmarkDecision/opa' -benchtime "$obt" | tee -a "$out" >&2
awk '
/^BenchmarkDecision\// {
  split($1, p, "/"); engine=p[2]; size=p[3]; class=p[4]; sub(/-[0-9]+$/, "", class)
  key=size "/" class
  for (i=3; i<=NF; i++) {
    if ($(i+1)=="ns/op") ns[engine,key]=$i
    if ($(i+1)=="p50-ns") p50[key]=$i
    if ($(i+1)=="allocs/op") allocs[engine,key]=$i
  }
  if (!(key in seen)) { seen[key]=1; order[++n]=key }
}
END {
  printf "%-22s %12s %10s %8s %14s %10s\n", "size/class", "native ns/op", "p50 ns", "allocs", "opa ns/op", "opa/native"
  fail=0
  for (i=1; i<=n; i++) {
    k=order[i]; r=(ns["native",k]>0) ? ns["opa",k]/ns["native",k] : 0
    printf "%-22s %12.0f %10.0f %8d %14.0f %9.0fx\n", k, ns["native",k], p50[k], allocs["native",k], ns["opa",k], r
    if (r < 100 || allocs["native",k] > 0 || (k ~ /^2000rules/ && p50[k] > 2000)) fail=1
  }
  print (fail ? "targets: NOT MET" : "targets: met (ratio >= 100x, p50 <= 2us at 2000 rules, 0 allocs)")
}' "$out"
