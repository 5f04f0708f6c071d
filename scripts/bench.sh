#!/usr/bin/env bash
# Runs every benchmark of the report (issue 14) against pinned nats-servers the
# benchmarks start on loopback (one fresh server per run), then rewrites
# docs/benchmarks.md and its charts (docs/bench/*.svg) from their JSON output
# (target/bench/*.json). Benchmarks are never run by the test suite.
#
# Usage: scripts/bench.sh
# Knobs (environment; the defaults took 27 min 14 s from a fresh clone on a
# quiet 2-core machine, the 5 min 10 s cold release build included (crates
# already downloaded); docs/benchmarks.md has each step's time):
#   PROC_RATES=1000,5000,20000,max PROC_RUNS=3 PROC_SECONDS=4 PROC_ACK_WAIT_S=5
#   TRANSLATE_SIZES=10000,1000000,10000000   VERIFY_N=1000000,10000000 VERIFY_ROUNDS=3
#   MANY_COUNTS=1,100,1000 MANY_RUNS=3   SOURCING_STEP_S=4 SOURCING_PUBLISH=plain,async
#   SOURCING_RATES=20000,40000,60000,80000,100000,150000,200000
#   INPLACE_PRELOAD=1000000 INPLACE_RUNS=3 INPLACE_SECONDS=24 (in_place: the
#   live workload while a stream of that many messages changes storage in place)
#   PUSH_RATE=5000 PUSH_RUNS=3 PUSH_SECONDS=6 (push: the live workload read by push
#   workers in a deliver group, the durable moved in drain mode)
#   KV_KEYS=100000 KV_RATE=300 KV_RUNS=3 (kv: a KV bucket changed in place
#   under a writer and a reader)
#   CLUSTER_RATE=5000 CLUSTER_RUNS=3 CLUSTER_SECONDS=6 (cluster: the live workload,
#   0 µs processing, on a fresh 3-node loopback cluster per run, R3 streams,
#   the durable moved in drain mode)
#   BENCH_ONLY=procedures,translate,verify,many,sourcing,in_place,push,kv,cluster (a subset; the
#   report is rebuilt from whatever JSON target/bench holds)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cargo >/dev/null || { echo "cargo is needed: install a Rust toolchain (rustup)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed for the report" >&2; exit 1; }
version=2.15.1
scripts/install-nats-server.sh "$version" >/dev/null
# The benchmarks start this one (the pinned version, this checkout's install).
export NATS_SERVER="$root/.nats-server/$version/nats-server"

: "${PROC_RATES:=1000,5000,20000,max}" "${PROC_RUNS:=3}" "${PROC_SECONDS:=4}" "${PROC_ACK_WAIT_S:=5}"
: "${TRANSLATE_SIZES:=10000,1000000,10000000}" "${VERIFY_N:=1000000,10000000}" "${VERIFY_ROUNDS:=3}"
: "${MANY_COUNTS:=1,100,1000}" "${MANY_RUNS:=3}" "${SOURCING_STEP_S:=4}" "${SOURCING_PUBLISH:=plain,async}"
: "${SOURCING_RATES:=20000,40000,60000,80000,100000,150000,200000}"
: "${INPLACE_PRELOAD:=1000000}" "${INPLACE_RUNS:=3}" "${INPLACE_SECONDS:=24}"
: "${PUSH_RATE:=5000}" "${PUSH_RUNS:=3}" "${PUSH_SECONDS:=6}"
: "${KV_KEYS:=100000}" "${KV_RATE:=300}" "${KV_RUNS:=3}"
: "${CLUSTER_RATE:=5000}" "${CLUSTER_RUNS:=3}" "${CLUSTER_SECONDS:=6}"
: "${BENCH_ONLY:=procedures,translate,verify,many,sourcing,in_place,push,kv,cluster}"
# PROC_LIST: a subset of the procedures' rows (comma-separated names, e.g.
# dual-write,no-retry,no-retry-bridge; default every one, see
# crates/cutover-demo/src/procedures.rs). With BENCH_ONLY=procedures it runs
# those rows alone; the report is rebuilt from target/bench/procedures.json.
export PROC_LIST="${PROC_LIST:-}"

out="$root/target/bench"
mkdir -p "$out"
steps="$out/steps.tsv"
: >>"$steps"
started=$(date +%s)
failed=""
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

t=$(date +%s)
echo "== building (release)"
cargo bench --locked -p cutover-demo --bench procedures --bench translate --bench many --bench sourcing --bench cutover --bench kv --no-run
cargo bench --locked -p nats-cutover --bench verify --no-run
echo "== build: $(( $(date +%s) - t )) s"
sed -i '/^build\t/d' "$steps"
printf 'build\t%s\tcargo bench --locked -p cutover-demo --no-run; cargo bench --locked -p nats-cutover --bench verify --no-run\n' "$(( $(date +%s) - t ))" >>"$steps"

# Runs one benchmark target with its knobs, recording the exact command and
# how long it took. `run_as LABEL TARGET PKG KNOBS...` names the step LABEL.
run() {
  local name="$1"; shift
  run_as "$name" "$name" "$@"
}
run_as() {
  local name="$1" target="$2" pkg="$3"; shift 3
  case ",$BENCH_ONLY," in *",$name,"*) ;; *) return 0 ;; esac
  local cmd="$* cargo bench --locked -p $pkg --bench $target"
  echo "== $cmd"
  local t; t=$(date +%s)
  # A benchmark that fails (e.g. NOT VERIFIED) is reported, and the report
  # is still rebuilt from the JSON it and the others wrote.
  local rc=0
  env "$@" cargo bench --locked -q -p "$pkg" --bench "$target" 2>&1 | grep -v '^\s*$' | tail -n 60 >&2 || rc=$?
  [ "$rc" = 0 ] || { echo "!! $name failed (exit $rc)" >&2; failed="$failed $name"; }
  echo "== $name: $(( $(date +%s) - t )) s (load $(cut -d' ' -f1 /proc/loadavg))"
  sed -i "/^$name\t/d" "$steps"
  # The 1-minute load average at the end of the step: above the core count,
  # other work shared the machine while it ran.
  printf '%s\t%s\t%s\t%s\n' "$name" "$(( $(date +%s) - t ))" "$cmd" "$(cut -d' ' -f1 /proc/loadavg)" >>"$steps"
}

run procedures cutover-demo PROC_RATES="$PROC_RATES" PROC_RUNS="$PROC_RUNS" PROC_SECONDS="$PROC_SECONDS" PROC_ACK_WAIT_S="$PROC_ACK_WAIT_S"
run translate cutover-demo TRANSLATE_SIZES="$TRANSLATE_SIZES"
run verify nats-cutover VERIFY_BENCH_N="$VERIFY_N" VERIFY_BENCH_ROUNDS="$VERIFY_ROUNDS"
run many cutover-demo MANY_COUNTS="$MANY_COUNTS" MANY_RUNS="$MANY_RUNS"
run sourcing cutover-demo SOURCING_STEP_S="$SOURCING_STEP_S" SOURCING_PUBLISH="$SOURCING_PUBLISH" SOURCING_RATES="$SOURCING_RATES"
run_as cluster cutover cutover-demo BENCH_CLUSTER=3 BENCH_MODES=drain BENCH_RATE="$CLUSTER_RATE" BENCH_RUNS="$CLUSTER_RUNS" BENCH_SECONDS="$CLUSTER_SECONDS" BENCH_PROCESSING_US=0
run_as push cutover cutover-demo BENCH_PUSH=1 BENCH_MODES=drain BENCH_RATE="$PUSH_RATE" BENCH_RUNS="$PUSH_RUNS" BENCH_SECONDS="$PUSH_SECONDS"
run kv cutover-demo KV_KEYS="$KV_KEYS" KV_RATE="$KV_RATE" KV_RUNS="$KV_RUNS"
run_as in_place cutover cutover-demo BENCH_PRELOAD="$INPLACE_PRELOAD" BENCH_IN_PLACE=storage=memory BENCH_MODES=drain BENCH_RUNS="$INPLACE_RUNS" BENCH_SECONDS="$INPLACE_SECONDS"

cat >"$out/machine.json" <<EOF
{"cores": $(nproc), "mem_kib": $(awk '/MemTotal/ {print $2}' /proc/meminfo),
 "cpu": "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo | tr -d '"')",
 "kernel": "$(uname -sr)", "server": "$("$root/.nats-server/$version/nats-server" --version)",
 "rustc": "$(rustc --version)", "commit": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)",
 "date": "$(date -u +%Y-%m-%dT%H:%MZ)", "load_before": "$load_before",
 "load_after": "$(cut -d' ' -f1-3 /proc/loadavg)", "seconds": $(( $(date +%s) - started ))}
EOF
python3 scripts/bench-report.py "$out" docs/benchmarks.md docs/bench
# The client matrix (issue 25): every client's applications through every
# change, into docs/clients.md (about 9 min; BENCH_NO_MATRIX=1 skips it).
if [ -z "${BENCH_NO_MATRIX:-}" ]; then
  echo "== client matrix"
  CUTOVER="$root/target/release/nats-cutover" scripts/client-matrix.sh || failed="$failed client-matrix"
fi
took=$(( $(date +%s) - started ))
echo "benchmarks took $(( took / 60 )) min $(( took % 60 )) s (load before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg)); docs/benchmarks.md and docs/bench/*.svg rewritten"
if [ -n "$failed" ]; then echo "failed:$failed (their rows show what they measured)" >&2; exit 1; fi
