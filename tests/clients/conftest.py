"""Fixtures of the client compatibility tests (tests/clients): today's inference clients
(SGLang, LMCache, vLLM) run their own Mooncake code against this package.

The clients are installed into the test venv by scripts/setup_clients.sh (called by
scripts/setup.sh in test mode) with --no-deps plus the imports they need; a client that
could not be installed left VENV/mooncake-clients/<name>.skip, and ``client(name)``
skips the test with that file's text as the reason.

``cluster`` (module): a real mooncake_master with its embedded HTTP metadata server on
loopback ports. ``run_child(args, env, timeout)``: runs a client process (each imports
its client in a process of its own: the import is heavy and must not change the test
process), killed however the test ends; returns (returncode, output).
"""
import os
import subprocess
import sys

import pytest

_INTEGRATION = os.path.join(os.path.dirname(__file__), "..", "integration")
if os.path.abspath(_INTEGRATION) not in sys.path:
    sys.path.insert(0, os.path.abspath(_INTEGRATION))

import conftest as _iconf  # noqa: E402  (tests/integration/conftest.py: process helpers)
from store_proc import StoreCluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(os.path.dirname(os.path.dirname(sys.executable)), "mooncake-clients")
#: a stand-in for torchvision on the SGLang children's path: PyPI's torchvision is a
#: CUDA build (its _C.so needs libtorch_cuda.so) and cannot load on the CPU torch, and
#: SGLang's package imports ``torchvision.transforms`` at import time for its vision
#: model configs, which nothing here uses (tests/clients/stubs/torchvision).
STUBS = os.path.join(HERE, "stubs")


def client(name):
    """Skips the calling test unless client ``name`` was installed by setup_clients.sh."""
    skip = os.path.join(STATE, f"{name}.skip")
    if os.path.exists(skip):
        with open(skip, encoding="utf-8", errors="replace") as f:
            pytest.skip(f"{name} not installable here: {f.read().strip()}")
    if not os.path.exists(os.path.join(STATE, f"{name}.stamp")):
        pytest.skip(f"{name} not installed: run scripts/setup.sh (test mode), which "
                    f"installs it with scripts/setup_clients.sh into {sys.prefix}")


@pytest.fixture(scope="module")
def cluster():
    sp = _iconf._Spawner()
    try:
        yield StoreCluster(sp)
    finally:
        sp.cleanup()


@pytest.fixture
def spawn_child():
    """Popen of a client process (text pipes), killed at the test's end."""
    sp = _iconf._Spawner()

    def start(args, env=None, **kw):
        e = dict(os.environ)
        e.update(env or {})
        kw.setdefault("stdin", subprocess.PIPE)
        return sp([sys.executable, *args], env=e, text=True, **kw)

    yield start
    sp.cleanup()


@pytest.fixture
def run_child(spawn_child):
    def run(args, env=None, timeout=300):
        p = spawn_child(args, env, stdin=subprocess.DEVNULL)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            pytest.fail(f"{args} did not finish in {timeout}s; output:\n{out[-4000:]}")
        return p.returncode, out

    return run
