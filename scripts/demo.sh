#!/usr/bin/env bash
# The main job on the shipped examples: compile the policies, run the demo
# scenario through the executor (certifiable profile: evidence chain and a
# signed task certificate), then verify the certificate offline with
# certverify, as an auditor would.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out}
rm -rf "$out/workspace" "$out/evidence" "$out/keys"
mkdir -p "$out/keys"
polc() { go run ./cmd/polc "$@"; }

echo "== compile ./examples"
polc compile ./examples -o "$out"

echo "== run examples/scenario.yaml (certifiable)"
polc keygen demo-certifier -o "$out/keys" >/dev/null
polc run examples/scenario.yaml --snapshot "$out/snapshots/demo-agent.json" \
  --evidence "$out/evidence" --cert "$out/certificate.dsse.json" --sign-key "$out/keys/demo-certifier.key"

echo "== certverify (offline, trusting the certifier key)"
echo "certifier $(cat "$out/keys/demo-certifier.vkey")" > "$out/keys/trust.txt"
chainfile=$(ls "$out"/evidence/*.jsonl)
go run ./cmd/certverify cert "$out/certificate.dsse.json" --chain "$chainfile" \
  --snapshot "$out/snapshots/demo-agent.json" --trust "$out/keys/trust.txt"
