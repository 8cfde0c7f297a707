#!/usr/bin/env bash
# scripts/setup.sh: what `make demo` (--demo) or `make test` (default) needs; idempotent,
# and a no-op in about a second when nothing changed.
#   1. Debian packages, installed with apt-get when missing (as root, or through sudo):
#      the demo's build deps (libhiredis-dev: the Redis metadata backend); with test
#      deps also cmocka (C unit tests), clang and its libFuzzer runtime
#      libclang-rt-14-dev (fuzz targets), redis-server (the replay's Redis-backend tests
#      and the Redis metadata backend's) and etcd-server (/usr/bin/etcd: the etcd
#      metadata backend's tests start their own on free ports; the service the package
#      may enable on 2379 is neither needed nor touched);
#   2. a virtual environment in $VENV (default .venv; it sees the system site-packages
#      so preinstalled wheels are reused) with the Python packages of that set;
#   3. the mooncake package itself, built by meson-python into $VENV (`pip install .`,
#      built incrementally in build/pip). Skipped when $VENV/.mooncake-stamp holds the
#      hash of the sources it was built from and they have not changed since, so a
#      second `make demo` starts at once and `make test` always tests the current tree.
# Usage: scripts/setup.sh [--demo]        (--no-test-deps: the same as --demo)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
MODE=test
case "${1:-}" in
  --demo|--no-test-deps) MODE=demo ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--demo]" >&2; exit 2 ;;
esac

# What the demo needs (README "Install" lists the same). python3-dev: Python.h for the
# extension modules; python3-venv: the venv below; libssl-dev: libcrypto (HMAC-SHA-256
# of the cluster secret, src/common/auth.c); liburing-dev: io_uring for the disk tier
# (optional in meson: without it the disk store uses a thread pool).
DEMO_APT="build-essential pkg-config python3-dev python3-venv libmicrohttpd-dev
  libcurl4-openssl-dev libjansson-dev libprotobuf-c-dev protobuf-c-compiler libpcre2-dev
  libxxhash-dev libhiredis-dev libssl-dev
  liburing-dev"
TEST_APT="libcmocka-dev clang libclang-rt-14-dev redis-server etcd-server"
# Python: the build backend; the replay's progress bar and PNG (numpy comes with the
# package). Tests add pytest, the Redis client, torch for the tensor API (torch==2.13.0:
# the CPU build that lies on disk in /opt/wheels; a bare `torch` would pull a multi-GB
# CUDA build). aiohttp and requests are the package's own dependencies; prometheus_client
# parses every /metrics body (tests/integration/test_metrics_format.py).
DEMO_PIP="meson-python meson ninja numpy tqdm matplotlib"
TEST_PIP="pytest redis torch==2.13.0 aiohttp requests prometheus_client"
APT_PKGS=$DEMO_APT PIP_PKGS=$DEMO_PIP
if [ "$MODE" = test ]; then APT_PKGS="$DEMO_APT $TEST_APT"; PIP_PKGS="$DEMO_PIP $TEST_PIP"; fi

# 1. Debian packages (one dpkg-query for all of them)
# shellcheck disable=SC2086
installed=$(dpkg-query -W -f='${Package} ${Status}\n' $APT_PKGS 2>/dev/null |
            awk '/ ok installed$/ {print $1}' || true)
missing=""
for p in $APT_PKGS; do
  grep -qx "$p" <<<"$installed" || missing="$missing $p"
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

# 2. the venv and its Python packages (pip runs only when the list changed)
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv --system-site-packages "$VENV"
fi
PY="$VENV/bin/python"
PIP="$PY -m pip install -q --disable-pip-version-check"
pip_stamp="$VENV/.mooncake-pip-$MODE"
if [ "$(cat "$pip_stamp" 2>/dev/null)" != "$PIP_PKGS" ]; then
  echo "setup: installing Python packages into $VENV: $PIP_PKGS"
  # shellcheck disable=SC2086
  $PIP $PIP_PKGS
  printf '%s' "$PIP_PKGS" >"$pip_stamp"
fi
# the inference clients tests/clients runs (SGLang, LMCache, vLLM; --no-deps, the CPU
# torch kept): never fatal, a client that cannot be installed makes its tests skip
if [ "$MODE" = test ]; then scripts/setup_clients.sh "$VENV"; fi

# 3. the package, rebuilt only when a file it is built from changed. The hash covers every
# file git knows or would add (tracked, or untracked and not ignored) outside the trees
# the package is not built from, names and contents, plus this script and the Python.
src_hash() {
  MC_VENV="$VENV" "$PY" - <<'EOF'
import hashlib, os, subprocess, sys
SKIP = ("tests/", "docs/", ".ci/", "scripts/")   # not built (nor *.md but the README)
SKIP += (os.path.relpath(os.environ["MC_VENV"]).rstrip("/") + "/",)  # a venv in the tree
KEEP = ("scripts/setup.sh",)
try:
    out = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"],
                         check=True, capture_output=True).stdout
    files = sorted({f for f in out.decode().split("\0") if f})
except (OSError, subprocess.CalledProcessError):           # not a git checkout
    files = []
    for d, dirs, names in os.walk("."):
        dirs[:] = [x for x in dirs if not x.startswith((".", "build", "__pycache__"))]
        files += [os.path.relpath(os.path.join(d, n), ".") for n in names]
    files.sort()
h = hashlib.sha256(sys.version.encode())
for f in files:
    if (f.startswith(SKIP) and f not in KEEP or f.endswith(".md") and f != "README.md"
            or not os.path.isfile(f)):
        continue
    h.update(f.encode() + b"\0")
    with open(f, "rb") as fh:
        h.update(hashlib.sha256(fh.read()).digest())
print(h.hexdigest())
EOF
}
stamp="$VENV/.mooncake-stamp"
want=$(src_hash)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$VENV/bin/mooncake_master" ]; then
  echo "setup: the mooncake package in $VENV is up to date"
  exit 0
fi
rm -f "$stamp"
echo "setup: building and installing the mooncake package into $VENV"
install_pkg() {
  $PIP --no-build-isolation --config-settings=build-dir=build/pip .
}
if ! install_pkg; then
  if [ -d build/pip ]; then
    # a build directory left by another meson or Python can fail to reconfigure: once
    # more from scratch before calling the build broken
    echo "setup: retrying with a fresh build/pip"
    rm -rf build/pip
    install_pkg
  else
    exit 1
  fi
fi
echo "$want" >"$stamp"
