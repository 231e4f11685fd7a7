#!/usr/bin/env bash
# The main job on the shipped examples: compile the policies, run the demo
# scenario through the executor (certifiable profile: evidence chain and a
# signed task certificate), then verify the certificate offline with
# certverify, as an auditor would.
#
#   scripts/demo.sh [OUT]   (default: out)
#
# Everything the demo writes goes under OUT: the snapshots and bundle, the
# keys, the workspace the scenario's actions work in, the evidence chain
# and the certificate. POLC and CERTVERIFY name the programs to run
# (default: go run ./cmd/polc, go run ./cmd/certverify).
set -euo pipefail
out=${1:-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
rm -rf "$out/workspace" "$out/evidence" "$out/keys"
mkdir -p "$out/keys"
polc() { command ${POLC:-go run ./cmd/polc} "$@"; }
certverify() { command ${CERTVERIFY:-go run ./cmd/certverify} "$@"; }

echo "== compile ./examples"
polc compile ./examples -o "$out"

echo "== run examples/scenario.yaml (certifiable)"
polc keygen demo-certifier -o "$out/keys" >/dev/null
polc keygen release-manager -o "$out/keys" >/dev/null
# The trust file names the certifier and the approver of git pushes.
echo "certifier $(cat "$out/keys/demo-certifier.vkey")" > "$out/keys/trust.txt"
echo "approver:release-manager $(cat "$out/keys/release-manager.vkey")" >> "$out/keys/trust.txt"
# A repository with a local remote, so that the approved push below really
# pushes.
rm -rf "$out/remote.git" "$out/state.db" "$out/approval-requests" "$out/retry-evidence"
git init -q --bare "$out/remote.git"
git init -q -b main "$out/workspace"
git -C "$out/workspace" -c user.email=demo@example.com -c user.name=demo commit -q --allow-empty -m init
git -C "$out/workspace" remote add origin ../remote.git
polc run examples/scenario.yaml --snapshot "$out/snapshots/demo-agent.json" --workspace "$out/workspace" \
  --evidence "$out/evidence" --cert "$out/certificate.dsse.json" --sign-key "$out/keys/demo-certifier.key" \
  --state "$out/state.db" --trust "$out/keys/trust.txt" --approval-requests "$out/approval-requests"

echo "== certverify (offline, trusting the certifier key)"
chainfile=$(ls "$out"/evidence/*.jsonl)
certverify cert "$out/certificate.dsse.json" --chain "$chainfile" \
  --snapshot "$out/snapshots/demo-agent.json" --trust "$out/keys/trust.txt"

echo "== escalate -> approve -> retry: the release manager approves the push (docs/approvals.md)"
request=$(ls "$out"/approval-requests/*.json)
polc approvals show "$request"
polc approve "$request" --key "$out/keys/release-manager.key" --expires 30m --note "demo release" -o "$out/push.approval"
polc run examples/push-retry.yaml --snapshot "$out/snapshots/demo-agent.json" --workspace "$out/workspace" \
  --evidence "$out/retry-evidence" --cert "$out/retry-certificate.dsse.json" --sign-key "$out/keys/demo-certifier.key" \
  --state "$out/state.db" --trust "$out/keys/trust.txt" --approval "$out/push.approval"
git -C "$out/remote.git" log --oneline -1 main
chainfile=$(ls "$out"/retry-evidence/*.jsonl)
certverify cert "$out/retry-certificate.dsse.json" --chain "$chainfile" \
  --snapshot "$out/snapshots/demo-agent.json" --trust "$out/keys/trust.txt"

echo "== run examples/build-scenario.yaml (landlock backend: the kernel holds an allowed build script)"
rm -rf "$out/build-workspace" "$out/build-evidence" "$out/outside.txt"
polc run examples/build-scenario.yaml --snapshot "$out/snapshots/build-agent.json" --workspace "$out/build-workspace" \
  --evidence "$out/build-evidence" --cert "$out/build-certificate.dsse.json" --sign-key "$out/keys/demo-certifier.key" \
  --show-output
if [ -e "$out/outside.txt" ]; then
  echo "demo: the build script wrote $out/outside.txt" >&2
  exit 1
fi
chainfile=$(ls "$out"/build-evidence/*.jsonl)
certverify cert "$out/build-certificate.dsse.json" --chain "$chainfile" \
  --snapshot "$out/snapshots/build-agent.json" --trust "$out/keys/trust.txt"
