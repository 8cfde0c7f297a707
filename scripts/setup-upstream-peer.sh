#!/usr/bin/env bash
# scripts/setup-upstream-peer.sh: upstream Mooncake's CPU build as a benchmark peer.
#
# Creates $UPSTREAM_VENV (default .venv-upstream, ignored by git) with PyPI's
# mooncake-transfer-engine-non-cuda (upstream's own build: mooncake.store,
# mooncake.engine, mooncake_master, transfer_engine_bench) plus what the replay tool
# needs to run inside it (numpy, tqdm, matplotlib; pytest to run our store tests
# against upstream as an oracle). Its binaries link libibverbs.so.1
# even for TCP, so the Debian package libibverbs1 is installed when missing.
# Used by `mooncake_trace_replay --backend upstream` and bench/replay_compare; see
# docs/upstream-peer.md for what works. Idempotent. Needs PyPI access.
set -euo pipefail
cd "$(dirname "$0")/.."
UPSTREAM_VENV=${UPSTREAM_VENV:-.venv-upstream}
PYTHON=${PYTHON:-python3}
VERSION=${MOONCAKE_UPSTREAM_VERSION:-0.3.13.post1}

if ! dpkg-query -W -f='${Status}' libibverbs1 2>/dev/null | grep -q "ok installed"; then
  echo "setup-upstream-peer: installing Debian package libibverbs1"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "setup-upstream-peer: need root (or sudo) to install libibverbs1" >&2; exit 1; fi
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libibverbs1
fi
if [ ! -x "$UPSTREAM_VENV/bin/python" ]; then
  echo "setup-upstream-peer: creating $UPSTREAM_VENV"
  "$PYTHON" -m venv "$UPSTREAM_VENV"
fi
"$UPSTREAM_VENV/bin/python" -m pip install -q --disable-pip-version-check \
  "mooncake-transfer-engine-non-cuda==$VERSION" numpy tqdm matplotlib pytest
"$UPSTREAM_VENV/bin/python" -c "import mooncake.store as s, mooncake.engine as e; \
print('setup-upstream-peer: upstream', s.__file__, 'OK')"
