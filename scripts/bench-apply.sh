#!/usr/bin/env bash
# The fleet benchmark of `nats-cutover apply` (issue 26): N assets (streams
# and KV buckets, some needing a live change, live load on some) applied by
# the release binary on one fresh server and on a fresh 3-node loopback
# cluster (R3), for each --parallel; the servers are the pinned nats-server,
# started by the benchmark through the test kit (random loopback ports,
# stopped when each run ends). Writes target/bench/apply.json and its
# section of docs/benchmarks.md (between the bench-apply markers, below the
# part scripts/bench.sh rewrites). Never run by the test suite.
#
# Usage: scripts/bench-apply.sh
# Knobs (environment): APPLY_STREAMS=150 APPLY_KV=50 APPLY_LIVE=40
#   APPLY_LOADED=10 APPLY_MSGS=20 (messages per asset) APPLY_RATE=100
#   (msg/s per loaded asset) APPLY_PARALLEL=1,4,16 APPLY_NODES=1,3
#   APPLY_NOTE (a sentence for the doc, e.g. why N was reduced)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cargo >/dev/null || { echo "cargo is needed: install a Rust toolchain (rustup)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed for the report" >&2; exit 1; }
[ -x /usr/bin/time ] || echo "no /usr/bin/time: the runner's peak RSS is not measured (apt-get install time)" >&2
version=2.15.1
scripts/install-nats-server.sh "$version" >/dev/null
export NATS_SERVER="$root/.nats-server/$version/nats-server"
: "${APPLY_STREAMS:=150}" "${APPLY_KV:=50}" "${APPLY_LIVE:=40}" "${APPLY_LOADED:=10}"
: "${APPLY_MSGS:=20}" "${APPLY_RATE:=100}" "${APPLY_PARALLEL:=1,4,16}" "${APPLY_NODES:=1,3}"
export APPLY_STREAMS APPLY_KV APPLY_LIVE APPLY_LOADED APPLY_MSGS APPLY_RATE APPLY_PARALLEL APPLY_NODES
target="${CARGO_TARGET_DIR:-$root/target}"
out="$root/target/bench"
mkdir -p "$out"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
t=$(date +%s)
echo "== building (release)"
cargo build --locked --release -p nats-cutover
cargo bench --locked -p cutover-demo --bench apply --no-run
echo "== build: $(( $(date +%s) - t )) s"
export APPLY_BIN="$target/release/nats-cutover" APPLY_OUT="$out/apply.json"
started=$(date +%s)
echo "== APPLY_STREAMS=$APPLY_STREAMS APPLY_KV=$APPLY_KV APPLY_LIVE=$APPLY_LIVE APPLY_LOADED=$APPLY_LOADED APPLY_MSGS=$APPLY_MSGS APPLY_RATE=$APPLY_RATE APPLY_PARALLEL=$APPLY_PARALLEL APPLY_NODES=$APPLY_NODES cargo bench -p cutover-demo --bench apply"
cargo bench --locked -q -p cutover-demo --bench apply
took=$(( $(date +%s) - started ))
cat >"$out/apply-machine.json" <<JSON
{"cores": $(nproc), "cpu": "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo | tr -d '"')",
 "server": "$("$NATS_SERVER" --version)", "commit": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)",
 "date": "$(date -u +%Y-%m-%dT%H:%MZ)", "load_before": "$load_before",
 "load_after": "$(cut -d' ' -f1-3 /proc/loadavg)", "seconds": $took,
 "note": "$(printf '%s' "${APPLY_NOTE:-}" | tr -d '"')"}
JSON
python3 scripts/bench-apply-report.py "$out/apply.json" "$out/apply-machine.json" docs/benchmarks.md
echo "the fleet benchmark took $(( took / 60 )) min $(( took % 60 )) s; docs/benchmarks.md's apply section rewritten"
