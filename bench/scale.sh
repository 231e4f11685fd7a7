#!/usr/bin/env bash
# Governed throughput with 1, 2 and 4 executor processes writing evidence
# to one store: a file store directory (each process its own chains, one
# fsync per group) and one PostgreSQL database (one commit per group,
# docs/scale.md). Each process (bench/scalebench) runs CALLERS concurrent
# governed operations (a callable that does nothing) into 4 task
# boundaries of its own for DURATION.
#
# Prints, per store and process count: operations per second (all
# processes), the worst process's p99 latency, and records per commit
# (fsync for the file store, transaction for PostgreSQL).
#
# PostgreSQL: the server $POLC_PG names (a schema of the run's own), else a
# cluster this script starts with scripts/pg.sh and stops.
#
# Then the revision rollout time of an OPA fleet (bench/fleet.sh).
#
# Usage: [FLEET_ROUNDS=N] bench/scale.sh [duration] [callers]   (default 5s 16)
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-5s}
callers=${2:-16}
tmp=$(mktemp -d /tmp/polc-scale.XXXXXX)
pgdir=""
cleanup() {
  if [ -n "$pgdir" ]; then bash scripts/pg.sh stop "$pgdir" >/dev/null || true; rm -rf "$pgdir"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/scalebench" ./bench/scalebench
dsn=${POLC_PG:-}
if [ -z "$dsn" ]; then
  pgdir=$(mktemp -d /tmp/polc-scale-pg.XXXXXX)
  dsn=$(bash scripts/pg.sh start "$pgdir")
fi
schema="scale_$$"
psql "$dsn" -qc "CREATE SCHEMA $schema" >/dev/null
trap 'psql "$dsn" -qc "DROP SCHEMA IF EXISTS '"$schema"' CASCADE" >/dev/null 2>&1 || true; cleanup' EXIT
case $dsn in *\?*) pgstore="$dsn&search_path=$schema" ;; *) pgstore="$dsn?search_path=$schema" ;; esac

printf '%-10s %9s %10s %10s %12s\n' store processes ops/s p99_ms rec/commit
for store in file postgres; do
  for procs in 1 2 4; do
    target=$pgstore
    if [ "$store" = file ]; then target="$tmp/evidence-$procs"; mkdir -p "$target"; fi
    pids=()
    for i in $(seq 1 "$procs"); do
      "$tmp/scalebench" -store "$target" -callers "$callers" -duration "$dur" >"$tmp/out-$store-$procs-$i" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    cat "$tmp"/out-"$store"-"$procs"-* | awk -v store="$store" -v procs="$procs" '
      function num(k,   m) { if (match($0, "\"" k "\":[0-9.e+-]+")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m + 0 } return 0 }
      { ops += num("ops"); s = num("seconds"); if (s > secs) secs = s; p = num("p99_us"); if (p > p99) p99 = p; rpc += num("records_per_commit"); n++; failed += num("failed") }
      END {
        printf "%-10s %9d %10.0f %10.1f %12.1f%s\n", store, procs, ops / secs, p99 / 1000, rpc / n, failed ? "  (" failed " failed)" : ""
      }'
  done
done

# ---------------------------------------------------------------------------
# An OPA fleet: revision rollout time across three `opa run --server`
# polling polc bundle serve, with periodic and with long polling
# (bench/fleet.sh; POLC_OPA names the opa binary, else scripts/opa.sh
# builds it). FLEET_ROUNDS rounds (default 5).
echo
echo "== revision rollout across a 3-instance OPA fleet"
bash bench/fleet.sh "${FLEET_ROUNDS:-5}"
