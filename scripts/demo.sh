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
polc run examples/scenario.yaml --snapshot "$out/snapshots/demo-agent.json" --workspace "$out/workspace" \
  --evidence "$out/evidence" --cert "$out/certificate.dsse.json" --sign-key "$out/keys/demo-certifier.key"

echo "== certverify (offline, trusting the certifier key)"
echo "certifier $(cat "$out/keys/demo-certifier.vkey")" > "$out/keys/trust.txt"
chainfile=$(ls "$out"/evidence/*.jsonl)
certverify cert "$out/certificate.dsse.json" --chain "$chainfile" \
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
