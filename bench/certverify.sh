#!/usr/bin/env bash
# bench/certverify.sh [MB] — time `certverify chain` against `sha256sum` on
# the same generated chain (default 110 MB) and print the ratio.
# Needs only Go and coreutils; builds into a temporary directory.
set -euo pipefail
MB="${1:-110}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"
go build -o "$TMP/certverify" ./cmd/certverify
go build -o "$TMP/genchain" ./bench/genchain
read -r HEAD RECORDS < <("$TMP/genchain" -o "$TMP/chain.jsonl" -mb "$MB")
BYTES=$(stat -c %s "$TMP/chain.jsonl")
now() { date +%s%N; }
# Warm the page cache so both tools read from memory.
cat "$TMP/chain.jsonl" > /dev/null
t0=$(now); sha256sum "$TMP/chain.jsonl" > /dev/null; t1=$(now)
set +e
"$TMP/certverify" chain "$TMP/chain.jsonl" --expected-head "$HEAD" > "$TMP/report.txt"
code=$?
set -e
t2=$(now)
if [ "$code" -ne 0 ]; then
	echo "certverify exited $code:" >&2
	head -20 "$TMP/report.txt" >&2
	exit 1
fi
awk -v b="$BYTES" -v r="$RECORDS" -v s=$((t1 - t0)) -v c=$((t2 - t1)) 'BEGIN {
	printf "chain: %d records, %.1f MB\n", r, b / 1e6
	printf "sha256sum:          %.3f s (%.0f MB/s)\n", s / 1e9, b / 1e6 / (s / 1e9)
	printf "certverify chain:   %.3f s (%.0f MB/s, %.0f records/s)\n", c / 1e9, b / 1e6 / (c / 1e9), r / (c / 1e9)
	printf "ratio certverify/sha256sum: %.2f (target <= 3)\n", c / s
}'
