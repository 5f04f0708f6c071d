#!/usr/bin/env bash
# The conformance check of docs/protocol.md (*Conformance*) against the nats.js
# fence instance, tests/apps/js/fence_worker.mjs: fence (every 40th double ack of
# one instance lost once), fence with an instance killed holding messages, rolling
# (--new-version 2) and a rollback, on a nats-server of its own.
#
#   scripts/protocol-check-js.sh [protocol-check.py flags, e.g. --rounds 3]
#
# Environment: PY (python with nats-py; default: scripts/install-test-apps.sh),
# NATS_CUTOVER (the CLI; default target/release or target/debug, else PATH),
# NATS_SERVER (default .nats-server/<version>/nats-server, else PATH).
# Another team's instance: scripts/protocol-check.py --instance-cmd '...'.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$(scripts/install-test-apps.sh | tail -1)}
if [ ! -d tests/apps/js/node_modules/@nats-io/jetstream ]; then
  (cd tests/apps/js && npm ci --no-audit --no-fund >&2)
fi
if [ -z "${NATS_CUTOVER:-}" ]; then
  for c in target/release/nats-cutover target/debug/nats-cutover; do
    [ -x "$c" ] && NATS_CUTOVER=$PWD/$c && break
  done
fi
if [ -z "${NATS_SERVER:-}" ]; then
  NATS_SERVER=$(ls -d .nats-server/*/nats-server 2>/dev/null | sort -V | tail -1 || true)
fi
exec "$PY" scripts/protocol-check.py \
  --instance-cmd 'node tests/apps/js/fence_worker.mjs' \
  --instance-args '--work-ms 2' \
  --fault-args '--lose-acks 40' \
  --kill-args '--work-ms 20' \
  --cli "${NATS_CUTOVER:-nats-cutover}" \
  --nats-server "${NATS_SERVER:-nats-server}" \
  "$@"
