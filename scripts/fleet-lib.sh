# A local OPA fleet fed with signed bundles (docs/scale.md, "An OPA fleet"),
# sourced by bench/fleet.sh and scripts/scale-demo.sh:
#
#   fleet_serve POLC DIR LOG          polc bundle serve DIR on a free loopback
#                                     port; its address in fleet_srv
#   fleet_config FILE SRV PUBKEY [long-poll]
#                                     OPA's configuration: poll SRV every 1-2 s
#                                     (or long-poll), verify with PUBKEY (ES256)
#   fleet_start OPA CFG LOG [N]       N (default 3) `opa run --server`; their
#                                     addresses in fleet, ids in fleet_pids
#   fleet_stop                        stop them
#   fleet_revision ADDR               the revision the instance at ADDR runs
#   fleet_await REV SECONDS ADDR...   wait until every instance runs REV
#
# Every process started is also appended to the caller's array pids, for
# its cleanup on exit. Waits are polls with deadlines (a loaded machine
# makes OPA slow to start and to activate a bundle, never a reason to hang).

# fleet_free_port prints a loopback port nothing listens on.
fleet_free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

# fleet_serve POLC DIR LOG starts `polc bundle serve DIR` on a free loopback
# port, waits (at most 30 s) until it listens and sets fleet_srv to its
# host:port.
fleet_serve() {
  local polc=$1 dir=$2 log=$3 pid deadline=$((SECONDS + 30))
  "$polc" bundle serve "$dir" --listen tcp:127.0.0.1:0 >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  fleet_srv=""
  while [ -z "$fleet_srv" ]; do
    fleet_srv=$(sed -n 's/.*listening on tcp:\(.*\)$/\1/p' "$log")
    [ -n "$fleet_srv" ] && break
    if ! kill -0 "$pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
      echo "polc bundle serve did not start:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.05
  done
}

# fleet_config FILE SRV PUBKEY [long-poll] writes the configuration of
# docs/scale.md: bundle "polc" from the service at SRV, polled every 1-2 s
# (long-poll: held by the server up to 10 s), and a signature required
# (signing.keyid) and verified with the ES256 public key PUBKEY.
fleet_config() {
  local file=$1 srv=$2 key=$3 mode=${4:-poll}
  {
    echo "services:"
    echo "  polc:"
    echo "    url: http://$srv"
    echo "bundles:"
    echo "  polc:"
    echo "    service: polc"
    echo "    resource: bundles/polc.tar.gz"
    echo "    signing:"
    echo "      keyid: polc"
    echo "    polling:"
    echo "      min_delay_seconds: 1"
    echo "      max_delay_seconds: 2"
    if [ "$mode" = long-poll ]; then echo "      long_polling_timeout_seconds: 10"; fi
    echo "keys:"
    echo "  polc:"
    echo "    algorithm: ES256"
    echo "    key: |"
    sed 's/^/      /' "$key"
  } >"$file"
}

# fleet_start OPA CFG LOG [N] starts N `opa run --server` with
# configuration CFG, each on a free loopback port, and waits (at most 60 s)
# until each answers GET /health (which it does before any bundle is
# active). Sets fleet (addresses) and fleet_pids.
fleet_start() {
  local opa=$1 cfg=$2 log=$3 n=${4:-3} a k deadline=$((SECONDS + 60))
  fleet=() fleet_pids=()
  for _ in $(seq 1 "$n"); do
    a=127.0.0.1:$(fleet_free_port)
    "$opa" run --server --addr "$a" --config-file "$cfg" --log-level error >>"$log" 2>&1 &
    pids+=($!) fleet_pids+=($!) fleet+=("$a")
  done
  for k in "${!fleet[@]}"; do
    until curl -sf -o /dev/null "http://${fleet[$k]}/health"; do
      if ! kill -0 "${fleet_pids[$k]}" 2>/dev/null; then
        echo "opa at ${fleet[$k]} exited:" >&2
        cat "$log" >&2
        return 1
      fi
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "opa at ${fleet[$k]} did not answer within 60 s:" >&2
        cat "$log" >&2
        return 1
      fi
      sleep 0.1
    done
  done
}

# fleet_stop stops the instances fleet_start started and waits for them.
fleet_stop() {
  local p
  for p in "${fleet_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${fleet_pids[@]}"; do wait "$p" 2>/dev/null || true; done
}

# fleet_revision ADDR prints the revision of bundle polc the instance at
# ADDR runs (nothing, and status 1, when it runs none).
fleet_revision() {
  curl -sf "http://$1/v1/data/system/bundles/polc/manifest/revision" | sed -n 's/^{"result":"\(.*\)"}$/\1/p' | grep .
}

# fleet_await REV SECONDS ADDR... waits until every instance runs revision
# REV, at most SECONDS; on time out it says which did not and fails.
fleet_await() {
  local rev=$1 limit=$2 deadline=$((SECONDS + $2)) a left
  shift 2
  while :; do
    left=()
    for a in "$@"; do
      [ "$(fleet_revision "$a")" = "$rev" ] || left+=("$a")
    done
    [ ${#left[@]} = 0 ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "revision $rev not active on ${left[*]} after ${limit}s" >&2
      return 1
    fi
    sleep 0.1
  done
}
