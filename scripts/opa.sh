#!/usr/bin/env bash
# Prints the path of an `opa` CLI built from the module proxy at the version
# go.mod pins, building it into $HOME/.cache/polc/bin when missing (~5 min cold).
set -euo pipefail
cd "$(dirname "$0")/.."
ver=$(go list -m -f '{{.Version}}' github.com/open-policy-agent/opa)
bin="${POLC_CACHE:-$HOME/.cache/polc}/bin/opa-$ver"
if [ ! -x "$bin" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && GOBIN="$tmp" GOFLAGS= go install "github.com/open-policy-agent/opa@$ver") >&2
  mkdir -p "$(dirname "$bin")"
  mv "$tmp/opa" "$bin"
fi
echo "$bin"
