#!/usr/bin/env bash
# The live demo: installs the pinned nats-server if missing, builds, starts a local
# server in a temp dir (loopback only), runs a publisher and workers, cuts the
# consumer and the publishers over to a new stream while they run, and prints the
# evidence. Extra arguments go to `nats-cutover demo` (e.g. --rate 3000 --duration 10s
# --report report.html).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cargo >/dev/null || { echo "cargo is needed: install a Rust toolchain (rustup)" >&2; exit 1; }
scripts/install-nats-server.sh "${NATS_SERVER_VERSION:-2.15.1}" >/dev/null
cargo build -q -p nats-cutover --locked
exec target/debug/nats-cutover demo "$@"
