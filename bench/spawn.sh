#!/usr/bin/env bash
# Measures what the sandbox adds to starting a process (package sandbox,
# BenchmarkSpawn: /bin/true each time) and prints, side by side, a direct
# exec against sandboxed spawns per network mode (allow; deny: a new user
# and network namespace; proxy: the namespace plus the forwarder and a
# second launcher), for each launcher:
#   - the test binary re-executed through /proc/self/exe (the fallback; polc
#     itself costs far more: its package inits alone take tens of ms),
#   - the dedicated launcher cmd/polc-sandbox as the README builds it,
#   - the same built with CGO_ENABLED=0 (statically linked).
# Beside them: "start" is the launcher binary's own start-up (it exits at
# once), "netns" that start-up plus creating the user and network
# namespace and bringing lo up. Each row shows the median wall time per
# spawn, the ratio to the direct exec, the milliseconds added, and the CPU
# time the spawned processes used (steadier than wall time on a loaded
# machine). BenchmarkLauncherWork adds the launcher's own work measured
# in-process (parse the spec, build the ruleset).
#
# Target (issue): <= 2 ms added per spawn.
#
# Usage: bench/spawn.sh [benchtime] [count]   (default 100x, 3; median of count)
set -euo pipefail
cd "$(dirname "$0")/.."
bt=${1:-100x}
count=${2:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/cgo/" ./cmd/polc-sandbox
CGO_ENABLED=0 go build -o "$tmp/static/" ./cmd/polc-sandbox
go test -c -o "$tmp/sandbox.test" ./sandbox
out="$tmp/out"
(
  cd sandbox
  POLC_SANDBOX_BENCH_LAUNCHER="$tmp/cgo/polc-sandbox" "$tmp/sandbox.test" -test.run '^$' \
    -test.bench 'BenchmarkSpawn|BenchmarkLauncherWork' -test.benchtime "$bt" -test.count "$count"
  POLC_SANDBOX_BENCH_LAUNCHER="$tmp/static/polc-sandbox" "$tmp/sandbox.test" -test.run '^$' \
    -test.bench 'BenchmarkSpawn/dedicated' -test.benchtime "$bt" -test.count "$count" |
    sed 's|^BenchmarkSpawn/dedicated/|BenchmarkSpawn/static/|'
) | tee "$out" >&2
awk '
function metric(name,   i) { for (i = 3; i < NF; i++) if ($(i+1) == name) return $i; return "" }
function median(a, n,   i, j, t) {
  for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
  return a[int((n + 1) / 2)]
}
/^BenchmarkSpawn\// {
  k = $1; sub(/^BenchmarkSpawn\//, "", k); sub(/-[0-9]+$/, "", k)
  if (k !~ /\//) k = (k == "direct") ? k : "self/" k
  sub(/^dedicated\//, "cgo/", k)
  n[k]++; ns[k, n[k]] = metric("ns/op"); cpu[k, n[k]] = metric("cpu-µs/op")
}
/^BenchmarkLauncherWork\// {
  k = $1; sub(/^BenchmarkLauncherWork\//, "", k); sub(/-[0-9]+$/, "", k)
  wn[k]++; w[k, wn[k]] = metric("ns/op")
}
END {
  for (k in n) {
    delete v; for (i = 1; i <= n[k]; i++) v[i] = ns[k, i]; med[k] = median(v, n[k]) / 1e6
    delete v; for (i = 1; i <= n[k]; i++) v[i] = cpu[k, i]; cmed[k] = median(v, n[k]) / 1e3
  }
  d = med["direct"]
  printf "%-34s %10s %8s %10s %10s\n", "spawn of /bin/true", "ms/spawn", "ratio", "added ms", "cpu ms"
  printf "%-34s %10.2f %8s %10s %10.2f\n", "direct exec", d, "1.0", "-", cmed["direct"]
  split("self cgo static", ls, " ")
  name["self"] = "test binary (/proc/self/exe)"; name["cgo"] = "polc-sandbox"; name["static"] = "polc-sandbox, CGO_ENABLED=0"
  split("start netns allow deny proxy", modes, " ")
  mk["start"] = "reexec"; mk["netns"] = "netns"; mk["allow"] = "allow"; mk["deny"] = "deny"; mk["proxy"] = "proxy"
  for (i = 1; i <= 3; i++) {
    printf "%s:\n", name[ls[i]]
    for (j = 1; j <= 5; j++) {
      k = ls[i] "/" mk[modes[j]]
      if (!(k in med)) continue
      printf "  %-32s %10.2f %8.1f %10.2f %10.2f\n", modes[j], med[k], med[k] / d, med[k] - d, cmed[k]
    }
  }
  if (wn["parse"] > 0) {
    for (k in wn) { delete v; for (i = 1; i <= wn[k]; i++) v[i] = w[k, i]; wm[k] = median(v, wn[k]) / 1e3 }
    printf "launcher work in-process (us): parse spec %.0f, build ruleset %.0f, detect ABI %.0f, look up argv[0] %.0f\n", wm["parse"], wm["ruleset"], wm["detectABI"], wm["lookPath"]
  }
  best = med["static/allow"] - d
  printf "target <= 2 ms added per spawn (allow, static dedicated launcher): %s (%.2f ms added)\n", (best <= 2 ? "met" : "NOT MET"), best
}' "$out"
