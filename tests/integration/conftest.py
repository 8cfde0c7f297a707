"""Shared fixtures for the integration tests: real processes on loopback only.

- ``tool(name)``: path of an installed command-line tool (from the venv's bin).
- ``free_port()``: a currently free TCP port on 127.0.0.1.
- ``spawn``: start a process that is killed (and reaped) when the test ends; every
  process gets a bounded lifetime from the test's teardown.
- ``wait_port(port)``: wait until something listens on 127.0.0.1:port.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

BIN_DIR = os.path.dirname(sys.executable)
SHARED = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))


def tool(name):
    """Absolute path of an installed tool; fails the test clearly when it is missing."""
    path = os.path.join(BIN_DIR, name)
    if os.path.exists(path):
        return path
    found = shutil.which(name)
    if not found:
        pytest.fail(f"tool {name!r} is not installed (run `make setup`)")
    return found


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, host="127.0.0.1", timeout=10.0, proc=None):
    """Waits until host:port accepts connections; raises TimeoutError (or RuntimeError if
    proc exited first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


class _Spawner:
    def __init__(self):
        self.procs = []

    def __call__(self, args, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.STDOUT)
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(args, **kw)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


@pytest.fixture
def spawn():
    s = _Spawner()
    yield s
    s.cleanup()
