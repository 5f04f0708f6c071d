#!/usr/bin/env bash
# The conformance check of docs/protocol.md (*Conformance*) against the nats.go
# fence instance, `tests/apps/go/bin/natsapp fence` (tests/apps/go/natsapp/fence.go):
# fence (every 40th double ack of one instance lost once), fence with an instance
# killed holding messages, rolling (--new-version 2) and a rollback, on a
# nats-server of its own.
#
#   scripts/protocol-check-go.sh [protocol-check.py flags, e.g. --rounds 2]
#
# Environment: PY (python with nats-py; default: scripts/install-test-apps.sh,
# which also builds natsapp), NATS_CUTOVER (the CLI; default target/release or
# target/debug, else PATH), NATS_SERVER (default .nats-server/<version>/nats-server,
# else PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  PY=$(scripts/install-test-apps.sh | tail -1)
else
  scripts/install-test-apps.sh >/dev/null # builds natsapp when a source changed
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
  --instance-cmd 'tests/apps/go/bin/natsapp fence' \
  --instance-args '--work-ms 2' \
  --fault-args '--lose-acks 40' \
  --kill-args '--work-ms 200' \
  --cli "${NATS_CUTOVER:-nats-cutover}" \
  --nats-server "${NATS_SERVER:-nats-server}" \
  "$@"
