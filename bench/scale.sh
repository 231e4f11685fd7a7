#!/usr/bin/env bash
# Scale measurements (docs/scale.md). Each section below is
# self-contained and can be run on its own.
#
# Usage: bench/scale.sh [fleet-rounds]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."

# ---------------------------------------------------------------------------
# An OPA fleet: revision rollout time across three `opa run --server`
# polling polc bundle serve, with periodic and with long polling
# (bench/fleet.sh; POLC_OPA names the opa binary, else scripts/opa.sh
# builds it).
fleet_rollout() {
  echo "== revision rollout across a 3-instance OPA fleet"
  bash bench/fleet.sh "${1:-5}"
}
fleet_rollout "${1:-5}"
