"""Helpers for tests that need a real store: a ``mooncake_master`` on loopback and
``MooncakeDistributedStore`` clients set up against it (P2PHANDSHAKE metadata, TCP).

Tests using them skip, with the reason, while ``mooncake.store`` has no
``MooncakeDistributedStore`` (the C store client of issue 5 is not built in yet).
"""
import os
import shutil

import pytest

import mooncake.store as store_module
from conftest import BIN_DIR, _Spawner, free_port, wait_port

STORE_MISSING_REASON = ("mooncake.store has no MooncakeDistributedStore yet "
                        "(the C store client of issue 5 has not landed)")

has_store = hasattr(store_module, "MooncakeDistributedStore")
needs_store = pytest.mark.skipif(not has_store, reason=STORE_MISSING_REASON)

SEGMENT = 64 << 20
LOCAL_BUFFER = 64 << 20


def master_tool():
    path = os.path.join(BIN_DIR, "mooncake_master")
    if os.path.exists(path):
        return path
    found = shutil.which("mooncake_master")
    if not found:
        pytest.fail("mooncake_master is not installed but MooncakeDistributedStore is")
    return found


def start_master(spawn):
    """Starts ``mooncake_master`` on 127.0.0.1; returns ``"127.0.0.1:port"``."""
    port, metrics = free_port(), free_port()
    proc = spawn([master_tool(), f"--rpc_port={port}", "--rpc_address=127.0.0.1",
                  f"--metrics_port={metrics}", "--metrics_host=127.0.0.1"])
    wait_port(port, proc=proc, timeout=15)
    return f"127.0.0.1:{port}"


def new_store(master_addr, segment=SEGMENT, local_buffer=LOCAL_BUFFER):
    """A set-up ``MooncakeDistributedStore`` (7 positional arguments, as clients call)."""
    store = store_module.MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", segment, local_buffer, "tcp", "",
                     master_addr)
    assert rc == 0, f"setup returned {rc}"
    return store


@pytest.fixture(scope="module")
def real_store():
    """One master and one set-up store shared by a test module (tests use distinct
    keys); closed and stopped when the module ends."""
    if not has_store:
        pytest.skip(STORE_MISSING_REASON)
    spawner = _Spawner()
    try:
        store = new_store(start_master(spawner))
        try:
            yield store
        finally:
            store.close()
    finally:
        spawner.cleanup()
