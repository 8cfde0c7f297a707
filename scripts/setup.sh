#!/usr/bin/env bash
# scripts/setup.sh: everything `make demo` and `make test` need, idempotent.
#   1. Debian packages (build deps and the etcd/Redis servers the tests start), installed
#      with apt-get when missing (as root, or through sudo when available);
#   2. a virtual environment in $VENV (default .venv, sees the system site-packages so
#      preinstalled wheels are reused) with the Python test/tool dependencies;
#   3. the mooncake package itself, built by meson-python (`pip install .`).
# Usage: scripts/setup.sh [--no-test-deps]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

APT_PKGS="build-essential pkg-config libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev
  libprotobuf-c-dev protobuf-c-compiler libpcre2-dev libxxhash-dev libcmocka-dev
  libhiredis-dev clang redis-server redis-tools etcd-server"

missing=""
for p in $APT_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "setup: need root (or sudo) to install:$missing" >&2; exit 1; fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv --system-site-packages "$VENV"
fi
PIP="$VENV/bin/python -m pip"
$PIP install -q --disable-pip-version-check meson-python meson ninja
# the trace replay (`make demo`, mooncake_trace_replay) needs these even without test deps
$PIP install -q --disable-pip-version-check numpy tqdm matplotlib redis
if [ "${1:-}" != "--no-test-deps" ]; then
  # torch==2.13.0: the CPU build that lies on disk (/opt/wheels); a bare `torch` would
  # pull a multi-GB CUDA build.
  $PIP install -q --disable-pip-version-check pytest numpy torch==2.13.0 aiohttp requests \
    tqdm matplotlib
fi
echo "setup: building and installing the mooncake package into $VENV"
$PIP install -q --disable-pip-version-check --no-build-isolation .
