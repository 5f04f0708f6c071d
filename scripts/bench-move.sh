#!/usr/bin/env bash
# The benchmark of a whole domain moved to another system under its names
# (issue 27): MOVE_STREAMS streams and MOVE_KV KV buckets on a standalone
# server (a leaf node with its own JetStream domain) moved to a fresh 3-node
# loopback cluster by `nats-cutover apply --from-server`, R3 on the way,
# under live load on MOVE_LOADED streams, for each --parallel. The servers
# are the pinned nats-server, started by the benchmark through the test kit
# (random loopback ports, stopped when each run ends). Writes
# target/bench/move_all.json and its section of docs/benchmarks.md (between
# the bench-move markers). Never run by the test suite.
#
# Usage: scripts/bench-move.sh
# Knobs (environment): MOVE_STREAMS=50 MOVE_KV=20 MOVE_LOADED=5 MOVE_MSGS=20
#   MOVE_RATE=100 MOVE_WINDOW_S=3 MOVE_PARALLEL=4,16 MOVE_NOTE (a sentence for the doc)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cargo >/dev/null || { echo "cargo is needed: install a Rust toolchain (rustup)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed for the report" >&2; exit 1; }
[ -x /usr/bin/time ] || echo "no /usr/bin/time: the runner's peak RSS is not measured (apt-get install time)" >&2
version=2.15.1
scripts/install-nats-server.sh "$version" >/dev/null
export NATS_SERVER="$root/.nats-server/$version/nats-server"
target="${CARGO_TARGET_DIR:-$root/target}"
out="$root/target/bench"
mkdir -p "$out"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --locked --release -p nats-cutover
export APPLY_BIN="$target/release/nats-cutover" MOVE_OUT="$out/move_all.json"
started=$(date +%s)
cargo bench --locked -q -p cutover-demo --bench move_all
took=$(( $(date +%s) - started ))
cat >"$out/move-machine.json" <<JSON
{"cores": $(nproc), "cpu": "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo | tr -d '"')",
 "commit": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)",
 "date": "$(date -u +%Y-%m-%dT%H:%MZ)", "load_before": "$load_before",
 "load_after": "$(cut -d' ' -f1-3 /proc/loadavg)", "seconds": $took,
 "note": "$(printf '%s' "${MOVE_NOTE:-}" | tr -d '"')"}
JSON
python3 scripts/bench-move-report.py "$out/move_all.json" "$out/move-machine.json" docs/benchmarks.md
echo "the move benchmark took $(( took / 60 )) min $(( took % 60 )) s; docs/benchmarks.md's move section rewritten"
