#!/usr/bin/env bash
# docs/scale.md's run: a PostgreSQL cluster (scripts/pg.sh), two polc serve
# processes writing evidence and state to it, actions executed through both
# at once, the chains exported with polc evidence export, and each task
# certificate verified offline by certverify against its exported chain.
#
#   scripts/scale-demo.sh [OUT]   (default: out/scale)
#
# Everything goes under OUT; the cluster runs in OUT/pg and is stopped on
# exit (POLC_PG set: that server is used instead, in a schema of the run's
# own).
set -euo pipefail
out=${1:-out/scale}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
rm -rf "$out/keys" "$out/ws"* "$out/exported" "$out"/cert*.json "$out"/*.log
mkdir -p "$out/bin" "$out/keys"
go build -o "$out/bin/" ./cmd/polc ./cmd/certverify
polc() { "$out/bin/polc" "$@"; }
certverify() { "$out/bin/certverify" "$@"; }

pids=()
pgdir=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "$pgdir" ]; then bash scripts/pg.sh stop "$pgdir" || true; rm -rf "$pgdir"; fi
}
trap cleanup EXIT

echo "== PostgreSQL"
if [ -n "${POLC_PG:-}" ]; then
  server=$POLC_PG
else
  # A short path: the socket lives in it.
  pgdir=$(mktemp -d /tmp/polc-scale-demo.XXXXXX)
  server=$(bash scripts/pg.sh start "$pgdir")
fi
schema="demo_$$"
export PGOPTIONS="-c client_min_messages=warning"
psql "$server" -qc "CREATE SCHEMA $schema"
case $server in *\?*) dsn="$server&search_path=$schema" ;; *) dsn="$server?search_path=$schema" ;; esac
echo "evidence and state: $(echo "$dsn" | sed 's/password=[^&]*/password=xxxxx/')"

echo "== compile ./examples, certifier key"
polc compile ./examples -o "$out" >/dev/null
polc keygen certifier -o "$out/keys" >/dev/null
echo "certifier $(cat "$out/keys/certifier.vkey")" >"$out/keys/trust.txt"

echo "== two polc serve processes on one database"
for i in 1 2; do
  cat >"$out/session$i.yaml" <<YAML
snapshot: snapshots/demo-agent.json
profile: certifiable
workspace: ws$i
principal: agent:demo
tenant: acme
YAML
  polc serve "$out/session$i.yaml" --listen "unix:$out/polc$i.sock" --evidence "$dsn" --state "$dsn" \
    --cert "$out/cert$i.json" --sign-key "$out/keys/certifier.key" 2>"$out/serve$i.log" &
  pids+=($!)
done
for i in 1 2; do
  for _ in $(seq 1 100); do [ -S "$out/polc$i.sock" ] && break; sleep 0.1; done
  [ -S "$out/polc$i.sock" ] || { cat "$out/serve$i.log" >&2; exit 1; }
done

call() { curl -sS --fail-with-body --unix-socket "$out/polc$1.sock" -X POST "http://polc$2" -d "$3"; }

echo "== actions through both executors at once"
for i in 1 2; do
  (
    for j in 1 2 3 4 5; do
      call "$i" /v1/execute "{\"action\":\"write_file\",\"arguments\":{\"path\":\"notes/n$j.txt\",\"content\":\"$i.$j\\n\"}}" | jq -r '"server '"$i"' write_file: \(.kind)"'
      call "$i" /v1/execute '{"action":"read_file","arguments":{"path":"notes/n1.txt"}}' | jq -r '"server '"$i"' read_file: \(.kind)"'
    done
    call "$i" /v1/execute '{"action":"bash","arguments":{"command":"rm -rf notes"},"timeout":"10s"}' | jq -r '"server '"$i"' rm -rf: \(.kind)"'
  ) &
done
wait $(jobs -p | grep -v -e "${pids[0]}" -e "${pids[1]}") 2>/dev/null || true

echo "== close both sessions (task_closed, certificates)"
chains=()
for i in 1 2; do
  chains+=("$(call "$i" /v1/close '' | jq -r .evidence.chain_id)")
done
for p in "${pids[@]}"; do wait "$p"; done
pids=()

echo "== export the chains from PostgreSQL"
polc evidence export "$dsn" -o "$out/exported"

echo "== certverify each certificate against its exported chain"
for i in 1 2; do
  certverify cert "$out/cert$i.json" --chain "$out/exported/${chains[$((i - 1))]}.jsonl" \
    --snapshot "$out/snapshots/demo-agent.json" --trust "$out/keys/trust.txt"
done
psql "$server" -qc "DROP SCHEMA $schema CASCADE"
echo "scale demo passed"
