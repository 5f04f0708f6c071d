#!/usr/bin/env bash
# The client matrix (issue 25): applications written on nats-py, nats.js and
# nats.go (tests/apps) beside every change nats-cutover makes, measured (lost,
# twice, longest gap, time until whole again) → docs/clients.md.
#
#   scripts/client-matrix.sh [--quick] [--only CELL,CELL] [--cutover PATH] [--out FILE] [--whole-cap S]
#   scripts/client-matrix.sh --report-only /tmp/clients-matrix/results.json   (the page again from a run's numbers)
#
# Full matrix: 25 cells, about 8-9 min on 2 cores; bounded: each change gets at most
# 180 s, each cell's apps 20 s to be ready, and after the change the apps are
# waited for until whole again, at least 4 s and at most --whole-cap s (default 90;
# 45 with --quick), so at most ~25 × 4.5 min in the worst case, and under 20 min
# unless a change hangs. --quick: 6 cells, under 3 min.
# Every cell starts its own nats-server on loopback (a free port, a store under
# /tmp/clients-matrix/CELL/, where the apps' JSON lines and logs stay).
# NATS_SERVER=path picks the server (default: the pinned one in .nats-server/),
# CUTOVER=path the tool (default: target/release/nats-cutover, else the one on PATH).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cutover="${CUTOVER:-}"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cutover) cutover="$2"; shift 2 ;;
    --quick) args+=(--quick); shift ;;
    --only) args+=(--only "$2"); shift 2 ;;
    --out) args+=(--out "$2"); shift 2 ;;
    --report-only) args+=(--report-only "$2"); shift 2 ;;
    --whole-cap) args+=(--whole-cap "$2"); shift 2 ;;
    *) echo "unknown argument $1 (--quick, --only CELLS, --cutover PATH, --out FILE)" >&2; exit 2 ;;
  esac
done
py="$("$root/scripts/install-test-apps.sh" | tail -n 1)"
server="${NATS_SERVER:-}"
if [ -z "$server" ]; then
  "$root/scripts/install-nats-server.sh" 2.15.1 >&2
  server="$root/.nats-server/2.15.1/nats-server"
fi
[ -x "$server" ] || { echo "nats-server not found ($server); NATS_SERVER=path" >&2; exit 1; }
if [ -z "$cutover" ]; then
  if [ -x "$root/target/release/nats-cutover" ]; then cutover="$root/target/release/nats-cutover"
  else cutover="$(command -v nats-cutover || true)"; fi
fi
[ -x "$cutover" ] || { echo "nats-cutover not found; build it (cargo build --release) or pass --cutover PATH" >&2; exit 1; }
natsgo="$(sed -n 's/.*Version *= *"\(.*\)".*/\1/p' "${NATSAPP_GOPATH:-/usr/share/gocode}/src/github.com/nats-io/nats.go/nats.go" | head -1)"
exec "$py" "$root/scripts/client_matrix.py" --python "$py" --natsapp "$root/tests/apps/go/bin/natsapp" \
  --natsgo-version "$natsgo" --nats-server "$server" --cutover "$cutover" "${args[@]}"
