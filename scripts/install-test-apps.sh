#!/usr/bin/env bash
# Installs the test apps' dependencies: the nats.go apps (built, tests/apps/go/bin/),
# the nats.js apps' npm packages
# (tests/apps/js/package-lock.json, pinned) into tests/apps/js/node_modules/ with
# `npm ci`, and the Python apps' (tests/apps/requirements.txt, nats-py) into a venv
# at .venv-apps/ in the repo root (both ignored by git), and prints the venv's
# interpreter path as the last line of stdout. Idempotent: packages that already
# match their lock or requirements file are kept as they are.
# Needs go with Debian's nats.go source (apt-get install golang-go
# golang-github-nats-io-go-nats-dev), node and npm, and python3 with the venv module (on Debian's own python3:
# apt-get install python3-venv).
# Usage: scripts/install-test-apps.sh   (PYTHON=/path/to/python3 to pick the interpreter)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
req="$root/tests/apps/requirements.txt"
venv="$root/.venv-apps"
py="$venv/bin/python"
stamp="$venv/.requirements.txt"
python="${PYTHON:-python3}"

# nats.js apps: node_modules matching the lock file (copied there once installed).
js="$root/tests/apps/js"
command -v npm >/dev/null || { echo "node and npm are needed for the nats.js test apps (tests/apps/js)" >&2; exit 1; }
if ! cmp -s "$js/package-lock.json" "$js/node_modules/.package-lock.stamp" 2>/dev/null; then
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >&2) \
    || { echo "cannot install the nats.js test apps' packages (npm ci in $js; is the npm registry reachable?)" >&2; exit 1; }
  cp "$js/package-lock.json" "$js/node_modules/.package-lock.stamp"
  echo "installed the nats.js test apps' packages into $js/node_modules" >&2
fi

# nats.go apps: tests/apps/go/natsapp built GOPATH-style, offline, against Debian's
# nats.go source (golang-github-nats-io-go-nats-dev, in /usr/share/gocode), into
# tests/apps/go/bin/natsapp; rebuilt only when a source file changed (stamp: the
# sources' checksum and the Go version).
gosrc="$root/tests/apps/go/natsapp"
gobin="$root/tests/apps/go/bin/natsapp"
gopath="${NATSAPP_GOPATH:-/usr/share/gocode}"
if { ! command -v go >/dev/null || [ ! -d "$gopath/src/github.com/nats-io/nats.go" ]; } \
  && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # Debian's Go and nats.go source (the project's own install, as CI needs).
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    golang-go golang-github-nats-io-go-nats-dev >/dev/null) >&2 || true
fi
command -v go >/dev/null || { echo "go is needed for the nats.go test apps (tests/apps/go); on Debian: apt-get install golang-go golang-github-nats-io-go-nats-dev" >&2; exit 1; }
[ -d "$gopath/src/github.com/nats-io/nats.go" ] || { echo "nats.go source not found in $gopath/src/github.com/nats-io/nats.go; on Debian: apt-get install golang-github-nats-io-go-nats-dev (or NATSAPP_GOPATH=dir holding src/github.com/nats-io/{nats.go,nkeys,nuid})" >&2; exit 1; }
gostamp="$(cd "$gosrc" && cat ./*.go | sha256sum | cut -d' ' -f1) $(go version) $(grep -h 'Version *=' "$gopath/src/github.com/nats-io/nats.go/nats.go" | head -1 | tr -d '\t ')"
if [ ! -x "$gobin" ] || [ "$(cat "$gobin.stamp" 2>/dev/null)" != "$gostamp" ]; then
  mkdir -p "$(dirname "$gobin")"
  (cd "$root" && GO111MODULE=off GOPATH="$gopath" GOCACHE="${GOCACHE:-$root/tests/apps/go/bin/.cache}" GOFLAGS= \
    go build -o "$gobin" ./tests/apps/go/natsapp >&2) \
    || { echo "cannot build the nats.go test apps (go build in $gosrc against $gopath)" >&2; exit 1; }
  echo "$gostamp" > "$gobin.stamp"
  echo "built the nats.go test apps into $gobin ($(go version | cut -d' ' -f3), nats.go $(sed -n 's/.*Version *= *"\(.*\)".*/\1/p' "$gopath/src/github.com/nats-io/nats.go/nats.go" | head -1))" >&2
fi

command -v "$python" >/dev/null || { echo "$python not found; python3 (3.8+) is needed for the test apps" >&2; exit 1; }

if [ -x "$py" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp" && "$py" -c 'import nats' 2>/dev/null; then
  echo "test apps' venv is up to date at $venv" >&2
  echo "$py"
  exit 0
fi

if [ ! -x "$py" ] || ! "$py" -c 'import sys' 2>/dev/null; then
  rm -rf "$venv"
  "$python" -m venv "$venv" >&2 || {
    rm -rf "$venv"
    echo "cannot create a venv with $python; on Debian's python3: apt-get install python3-venv" >&2
    exit 1
  }
fi
"$py" -m pip install --quiet --disable-pip-version-check --no-input -r "$req" >&2 \
  || { echo "cannot install $req into $venv (is PyPI reachable?)" >&2; exit 1; }
"$py" -c 'import nats' || { echo "nats-py does not import in $venv" >&2; exit 1; }
cp "$req" "$stamp"
echo "installed $(tr '\n' ' ' < "$req")into $venv" >&2
echo "$py"
