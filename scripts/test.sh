#!/usr/bin/env bash
# Runs every test: installs the pinned nats-server if missing, builds, and runs the
# unit, property and real-server integration tests. Usage: scripts/test.sh [cargo test args]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cargo >/dev/null || { echo "cargo is needed: install a Rust toolchain (rustup)" >&2; exit 1; }
scripts/install-nats-server.sh "${NATS_SERVER_VERSION:-2.15.1}"
# The oldest supported server (no consumer pause) and the newest of each minor
# between, for the version matrix (tests/it/versions.rs).
for v in 2.10.26 2.11.11 2.12.8 2.14.6; do scripts/install-nats-server.sh "$v"; done
# The nats-py applications the tests run beside a cut-over (tests/apps/).
CUTOVER_TEST_PYTHON="$(scripts/install-test-apps.sh | tail -1)"
export CUTOVER_TEST_PYTHON
# Headless Chromium (Debian's package) renders the HTML report in its test.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "chromium is needed for the report test: sudo apt-get install -y --no-install-recommends chromium" >&2
  fi
fi
# Two cores: build once, then run; tests start one server each.
cargo build --workspace --all-targets --locked
# Unit, property and integration tests; no doc tests (there are none) and no
# benchmarks (they run only with `cargo bench`).
log="$(mktemp)"
set +e
cargo test --workspace --locked --lib --bins --tests "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(sed -nE 's/^test result: .* ([0-9]+) passed; ([0-9]+) failed.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
failed=$(sed -nE 's/^test result: .* ([0-9]+) passed; ([0-9]+) failed.*/\2/p' "$log" | awk '{s+=$1} END {print s+0}')
rm -f "$log"
echo "tests: $passed passed, $failed failed"
exit "$status"
