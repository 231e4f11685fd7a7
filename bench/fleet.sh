#!/usr/bin/env bash
# Revision rollout time across a fleet of three OPA servers (docs/scale.md,
# "An OPA fleet"): polc bundle publish writes a signed revision into a
# bundle-server directory, polc bundle serve serves it, and three
# `opa run --server` (POLC_OPA, else scripts/opa.sh) poll it with signature
# verification. Each round publishes the other of two revisions (one
# allows reading notes/a.txt, the other denies it) and times, from the
# moment publish returned, until each instance answers
# POST /v1/data/polc/decision with the new decision and reports the new
# revision (GET /v1/data/system/bundles/polc/manifest/revision).
#
# Two fleets are measured: periodic polling (min_delay_seconds 1,
# max_delay_seconds 2) and long polling (long_polling_timeout_seconds 10).
# Prints, per fleet, the time until all three instances ran the new
# revision (min, median, max over the rounds) and the median of each
# instance's own time.
#
# Usage: bench/fleet.sh [rounds]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/fleet-lib.sh
rounds=${1:-5}
opa=${POLC_OPA:-$(bash scripts/opa.sh)}
tmp=$(mktemp -d /tmp/polc-fleet.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/polc" ./cmd/polc
cd "$tmp"
polc=$tmp/polc

"$polc" keygen fleet -o keys --key-format pem >/dev/null
for i in 1 2; do
  read_glob='"**"'
  [ "$i" = 2 ] && read_glob='"docs/**"'
  mkdir -p "v$i"
  cat >"v$i/p.cue" <<EOF
package p
policies: fleet: {
	version: "$i"
	principals: ["agent:fleet"]
	tenants: ["acme"]
	actions: allow: ["read_file"]
	filesystem: read: [$read_glob]
}
EOF
  "$polc" compile "v$i" -o "out$i" --sign-key keys/fleet.pem >/dev/null
done
echo '{"action": "read_file", "arguments": {"path": "notes/a.txt"}, "principal": "agent:fleet", "tenant": "acme", "workspace": "/workspace", "time": "2026-03-15T12:00:00Z"}' >req.json
printf '{"input": {"policy": "fleet", "request": %s}}' "$("$polc" normalize --input req.json)" >query.json
disposition=([1]=allow [2]=deny)

publish() { "$polc" bundle publish "out$1/bundle.tar.gz" srv --verification-key keys/fleet.pub.pem | cut -d' ' -f1; }
rev1=$(publish 1)
rev2=$(publish 2)
publish 1 >/dev/null

fleet_serve "$polc" srv serve.log
srv=$fleet_srv

# start_fleet MODE starts three OPA servers (scripts/fleet-lib.sh): their
# addresses in fleet, their process ids in fleet_pids (and pids, for the
# cleanup).
start_fleet() {
  fleet_config "opa-$1.yaml" "$srv" keys/fleet.pub.pem "$1"
  fleet_start "$opa" "opa-$1.yaml" "opa-$1.log"
}

# runs ADDR REV I: whether the instance at ADDR runs revision REV (whose
# decision is disposition[I]).
runs() {
  [ "$(fleet_revision "$1")" = "$2" ] &&
    curl -sf "http://$1/v1/data/polc/decision" -d @query.json | grep -q "\"disposition\":\"${disposition[$3]}\""
}

now_ms() { date +%s%3N; }

# await I ADDR...: waits (at most 120 s) until every instance runs
# revision I and prints each one's time in ms since the call.
await() {
  local i=$1 rev start t left=() done=() n
  shift
  rev=$rev1
  [ "$i" = 2 ] && rev=$rev2
  start=$(now_ms)
  for a in "$@"; do done+=(0); done
  while :; do
    n=0 left=()
    for k in "${!done[@]}"; do
      if [ "${done[$k]}" = 0 ] && runs "${@:$((k + 1)):1}" "$rev" "$i"; then done[$k]=$(( $(now_ms) - start )); [ "${done[$k]}" = 0 ] && done[$k]=1; fi
      [ "${done[$k]}" != 0 ] && n=$((n + 1))
    done
    [ "$n" = "$#" ] && break
    if [ $(( $(now_ms) - start )) -gt 120000 ]; then echo "the fleet did not take revision $i within 120 s" >&2; return 1; fi
    sleep 0.1
  done
  echo "${done[@]}"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
printf '%-10s %6s %8s %10s %8s   %s\n' fleet rounds min_ms median_ms max_ms "per-instance median_ms"
cur=1
for mode in poll long-poll; do
  start_fleet "$mode"
  await "$cur" "${fleet[@]}" >/dev/null
  : >"times-$mode"
  for _ in $(seq 1 "$rounds"); do
    next=$((3 - cur))
    publish "$next" >/dev/null
    await "$next" "${fleet[@]}" >>"times-$mode"
    cur=$next
  done
  all=$(awk '{ m = 0; for (i = 1; i <= NF; i++) if ($i > m) m = $i; print m }' "times-$mode")
  per=$(for k in 1 2 3; do awk -v k="$k" '{ print $k }' "times-$mode" | median; done | paste -sd' ')
  label="poll 1-2s"
  [ "$mode" = long-poll ] && label="long-poll"
  printf '%-10s %6d %8d %10d %8d   %s\n' "$label" "$rounds" "$(echo "$all" | sort -n | head -1)" "$(echo "$all" | median)" "$(echo "$all" | sort -n | tail -1)" "$per"
  fleet_stop
done
