#!/usr/bin/env bash
# docs/scale.md's run: a PostgreSQL cluster (scripts/pg.sh), two polc serve
# processes writing evidence and state to it, and a fleet of three OPA
# servers pulling the same policies as a signed bundle from polc bundle
# serve (scripts/fleet-lib.sh). Actions are executed through both
# executors at once; each OPA server is asked for its decision on requests
# the executors executed and must agree with what they did (allowed or
# denied); the chains are exported with polc evidence export, and each task
# certificate is verified offline by certverify against its exported chain.
#
#   scripts/scale-demo.sh [OUT]   (default: out/scale)
#
# Everything goes under OUT; the cluster runs in a temporary directory and
# is stopped on exit (POLC_PG set: that server is used instead, in a schema
# of the run's own), as is every process the run started. OPA is POLC_OPA,
# else the one scripts/opa.sh builds.
set -euo pipefail
out=${1:-out/scale}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
. scripts/fleet-lib.sh
rm -rf "$out/keys" "$out/ws"* "$out/exported" "$out/srv" "$out/actions" "$out"/cert*.json "$out"/*.log "$out"/polc*.sock
mkdir -p "$out/bin" "$out/keys" "$out/actions"
go build -o "$out/bin/" ./cmd/polc ./cmd/certverify
polc() { "$out/bin/polc" "$@"; }
certverify() { "$out/bin/certverify" "$@"; }
opa=${POLC_OPA:-$(bash scripts/opa.sh)}

pids=()
pgdir=""
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "$pgdir" ]; then bash scripts/pg.sh stop "$pgdir" >/dev/null || true; rm -rf "$pgdir"; fi
}
trap cleanup EXIT
# reap PID... waits for each process (failing as the first that failed)
# and forgets it, so that the cleanup never signals a reused id.
reap() {
  local p q keep
  for p in "$@"; do
    wait "$p"
    keep=()
    for q in "${pids[@]}"; do [ "$q" = "$p" ] || keep+=("$q"); done
    pids=(${keep[@]+"${keep[@]}"})
  done
}
trap 'exit 130' INT
trap 'exit 143' TERM

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

echo "== compile ./examples (bundle signed), certifier and bundle keys"
polc keygen certifier -o "$out/keys" >/dev/null
polc keygen bundle -o "$out/keys" --key-format pem >/dev/null
echo "certifier $(cat "$out/keys/certifier.vkey")" >"$out/keys/trust.txt"
polc compile ./examples -o "$out" --sign-key "$out/keys/bundle.pem" >/dev/null

echo "== publish the bundle, polc bundle serve, three OPA servers polling it"
rev=$(polc bundle publish "$out/bundle.tar.gz" "$out/srv" --verification-key "$out/keys/bundle.pub.pem" | cut -d' ' -f1)
fleet_serve "$out/bin/polc" "$out/srv" "$out/bundle-serve.log"
fleet_config "$out/opa.yaml" "$fleet_srv" "$out/keys/bundle.pub.pem"
fleet_start "$opa" "$out/opa.yaml" "$out/opa.log"
echo "revision $rev served at http://$fleet_srv; OPA at ${fleet[*]}"

echo "== two polc serve processes on one database"
serve_pids=()
for i in 1 2; do
  cat >"$out/session$i.yaml" <<YAML
snapshot: snapshots/demo-agent.json
profile: certifiable
workspace: ws$i
principal: agent:demo
tenant: acme
YAML
  # The binary itself, not the function: $! must be the server's id.
  "$out/bin/polc" serve "$out/session$i.yaml" --listen "unix:$out/polc$i.sock" --evidence "$dsn" --state "$dsn" \
    --cert "$out/cert$i.json" --sign-key "$out/keys/certifier.key" 2>"$out/serve$i.log" &
  pids+=($!) serve_pids+=($!)
done
for i in 1 2; do
  deadline=$((SECONDS + 60))
  until [ -S "$out/polc$i.sock" ]; do
    if ! kill -0 "${serve_pids[$((i - 1))]}" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
      echo "polc serve $i did not start:" >&2
      cat "$out/serve$i.log" >&2
      exit 1
    fi
    sleep 0.1
  done
done

call() { curl -sS --fail-with-body --max-time 120 --unix-socket "$out/polc$1.sock" -X POST "http://polc$2" -d "$3"; }

# act I NAME WANT BODY executes BODY through server I, keeps the request
# and the answer as actions/I-NAME.{req,out}.json, and fails unless the
# outcome's kind is WANT.
act() {
  local f=$out/actions/$1-$2 kind
  printf '%s' "$4" >"$f.req.json"
  call "$1" /v1/execute "$4" >"$f.out.json"
  kind=$(jq -r .kind "$f.out.json")
  echo "server $1 $2: $kind"
  [ "$kind" = "$3" ] || { echo "server $1 $2: $kind, want $3" >&2; return 1; }
}

echo "== actions through both executors at once"
act_pids=()
for i in 1 2; do
  (
    for j in 1 2 3 4 5; do
      act "$i" "write-n$j" succeeded "{\"action\":\"write_file\",\"arguments\":{\"path\":\"notes/n$j.txt\",\"content\":\"$i.$j\\n\"}}"
      act "$i" "read-n1-$j" succeeded '{"action":"read_file","arguments":{"path":"notes/n1.txt"}}'
    done
    act "$i" write-env denied '{"action":"write_file","arguments":{"path":"notes/.env","content":"TOKEN=x\n"}}'
    act "$i" rm-rf denied '{"action":"bash","arguments":{"command":"rm -rf notes"},"timeout":"10s"}'
  ) &
  pids+=($!) act_pids+=($!)
done
reap "${act_pids[@]}"

echo "== the OPA fleet runs revision $rev"
fleet_await "$rev" 180 "${fleet[@]}"

echo "== each OPA server decides as the executors did"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for name in write-n1 read-n1-1 write-env rm-rf; do
  for i in 1 2; do
    f=$out/actions/$i-$name
    kind=$(jq -r .kind "$f.out.json")
    case $kind in
      succeeded) want=allow ;;
      denied) want=deny ;;
      *) echo "server $i $name: $kind is neither allowed nor denied" >&2; exit 1 ;;
    esac
    # The request as the executor had it: the session's principal, tenant
    # and workspace, normalized as the executor normalizes it.
    jq --arg ws "$out/ws$i" --arg now "$now" \
      'del(.timeout) + {principal: "agent:demo", tenant: "acme", workspace: $ws, time: $now}' "$f.req.json" >"$f.action.json"
    printf '{"input": {"policy": "demo-agent", "request": %s}}' "$(polc normalize --input "$f.action.json")" >"$f.query.json"
    got=()
    for a in "${fleet[@]}"; do
      d=$(curl -sf --max-time 30 "http://$a/v1/data/polc/decision" -d @"$f.query.json" | jq -r '.result.disposition + " " + (.result.rule_ids | join(","))') || d="no answer"
      got+=("${d%% *}")
      [ "${d%% *}" = "$want" ] || { echo "opa $a on server $i's $name: $d, but the executor's outcome was $kind" >&2; exit 1; }
    done
    echo "server $i $name: executor $kind; opa ${got[*]} (${d#* })"
  done
done

echo "== close both sessions (task_closed, certificates)"
chains=()
for i in 1 2; do
  chains+=("$(call "$i" /v1/close '' | jq -r .evidence.chain_id)")
done
reap "${serve_pids[@]}"

echo "== export the chains from PostgreSQL"
polc evidence export "$dsn" -o "$out/exported"

echo "== certverify each certificate against its exported chain"
for i in 1 2; do
  certverify cert "$out/cert$i.json" --chain "$out/exported/${chains[$((i - 1))]}.jsonl" \
    --snapshot "$out/snapshots/demo-agent.json" --trust "$out/keys/trust.txt"
done
psql "$server" -qc "DROP SCHEMA $schema CASCADE"
echo "scale demo passed: 2 executors on PostgreSQL, 3 OPA servers on signed revision $rev, 2 certificates verified"
