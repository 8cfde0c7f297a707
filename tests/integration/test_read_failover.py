"""Reads that route around a stuck node (issue 10, fault 3; docs/consistency.md).

Two store nodes in their own processes hold the replicas; the reader runs here. All of
them use the TCP path (MC_FORCE_TCP=1: on one host the engine would otherwise copy
through shared memory, which a stopped owner does not stall). The master's read lease is
LEASE_S, so with two replicas each attempt gets about half of it (the per-attempt
deadline, ATTEMPT_S): a get must come back with the right bytes from the healthy replica
within 2 x ATTEMPT_S; with the only replica on the stopped node it must say why
(TRANSFER_FAIL or LEASE_EXPIRED, not OBJECT_NOT_FOUND) within the lease, and the
caller's buffer must stay untouched afterwards, also once the node resumes and answers
the request that was given up.

The bounds below carry SLACK for process scheduling on a loaded CI machine; they are
bounds on waiting for a stuck node (without the deadline a get waits for the whole stop
or the 30 s transfer timeout), not speed assertions.
"""
import ctypes
import os
import signal
import time
import uuid

import pytest

from conftest import _Spawner, sigstop
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
from store_proc import StoreCluster, StoreProc, value_for

LEASE_S = 2.0
ATTEMPT_S = LEASE_S / 2  # two replicas: the first attempt leaves room for the second
SLACK = 0.75
TRANSFER_FAIL, LEASE_EXPIRED, OBJECT_NOT_FOUND = -800, -707, -704
TCP = {"MC_FORCE_TCP": "1"}


def K(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


def wait_until(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


@pytest.fixture
def cluster(monkeypatch):
    monkeypatch.setenv("MC_FORCE_TCP", "1")  # the reader in this process, too
    sp = _Spawner()
    c = StoreCluster(sp, f"--default_kv_lease_ttl={int(LEASE_S * 1000)}",
                     "--client_ttl=60")  # a stopped node must not expire during a test
    nodes = [StoreProc(c.setup_args(segment=32 << 20), env=TCP) for _ in range(2)]
    reader = MooncakeDistributedStore()
    assert reader.setup(*c.setup_args(segment=0)) == 0
    stopped = []
    try:
        yield c, nodes, reader, stopped
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        reader.close()
        for n in nodes:
            n.close()
        sp.cleanup()


def stop(node, stopped):
    sigstop(node.proc.pid)
    stopped.append(node.proc.pid)


def resume(node, stopped):
    os.kill(node.proc.pid, signal.SIGCONT)
    stopped.remove(node.proc.pid)


def first_endpoint(store, key):
    return store.get_replica_desc(key)[0].get_memory_descriptor() \
        .buffer_descriptor.transport_endpoint


def timed(f, *args):
    t0 = time.monotonic()
    r = f(*args)
    return r, time.monotonic() - t0


def test_get_uses_the_other_replica_when_one_node_is_stopped(cluster):
    c, nodes, reader, stopped = cluster
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    cfg.preferred_segments = [n.hostname for n in nodes]
    small, large = K("small"), K("large")
    sizes = {small: 4096, large: 4 << 20}  # hedged / moved on at the deadline
    many = [K(f"many{i}") for i in range(16)]
    for k in many:
        assert reader.put(k, value_for(k, 8192), cfg) == 0
    for k, size in sizes.items():
        assert reader.put(k, value_for(k, size), cfg) == 0
        assert sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                      for r in reader.get_replica_desc(k)) == sorted(cfg.preferred_segments)
        assert reader.get(k) == value_for(k, size)  # connections to both nodes exist
    # stop the node the reader tries first (both are on this host: the first listed)
    assert first_endpoint(reader, small) == first_endpoint(reader, large)
    victim = next(n for n in nodes if n.hostname == first_endpoint(reader, small))
    stop(victim, stopped)
    for k, size in sizes.items():
        v, took = timed(reader.get, k)
        assert v == value_for(k, size), (k, len(v))
        assert took < 2 * ATTEMPT_S + SLACK, (k, took)
        buf = ctypes.create_string_buffer(size)
        n, took = timed(reader.get_into, k, ctypes.addressof(buf), size)
        assert n == size and buf.raw == value_for(k, size)
        assert took < 2 * ATTEMPT_S + SLACK, (k, took)
    vs, took = timed(reader.get_batch, [small, large])
    assert vs == [value_for(small, 4096), value_for(large, 4 << 20)]
    assert took < 2 * ATTEMPT_S + SLACK, took
    # a batch whose first replicas are on either node (the stopped one among them)
    vs, took = timed(reader.get_batch, many)
    assert vs == [value_for(k, 8192) for k in many]
    assert took < 2 * ATTEMPT_S + SLACK, took
    # the node comes back: reads keep working (and may use it again)
    resume(victim, stopped)
    for k, size in sizes.items():
        assert reader.get(k) == value_for(k, size)


def test_single_replica_on_a_stopped_node_says_why_and_leaves_the_buffer(cluster):
    c, nodes, reader, stopped = cluster
    cfg = ReplicateConfig()
    cfg.preferred_segment = nodes[0].hostname
    size = 1 << 20
    k, k2 = K("only"), K("only2")
    for key in (k, k2):
        assert reader.put(key, value_for(key, size), cfg) == 0
        assert first_endpoint(reader, key) == nodes[0].hostname
    assert reader.get(k) == value_for(k, size)
    stop(nodes[0], stopped)
    pattern = bytes([0xA5]) * size
    buf = ctypes.create_string_buffer(pattern, size)
    rc, took = timed(reader.get_into, k, ctypes.addressof(buf), size)
    assert rc in (TRANSFER_FAIL, LEASE_EXPIRED), rc
    assert took < LEASE_S + SLACK, took
    # the batch form says the same for every key
    bufs = [ctypes.create_string_buffer(pattern, size) for _ in range(2)]
    rcs, took = timed(reader.batch_get_into, [k, k2], [ctypes.addressof(b) for b in bufs],
                      [size, size])
    assert all(r in (TRANSFER_FAIL, LEASE_EXPIRED) for r in rcs), rcs
    assert took < LEASE_S + SLACK, took
    # the node resumes and answers the requests that were given up: those bytes must not
    # land in the buffers (they go to the engine's scratch)
    resume(nodes[0], stopped)
    fresh = ctypes.create_string_buffer(size)
    assert wait_until(lambda: reader.get_into(k, ctypes.addressof(fresh), size) == size, 10)
    assert fresh.raw == value_for(k, size)
    # a short bounded wait for late bytes: none may arrive
    assert not wait_until(lambda: buf.raw != pattern or any(b.raw != pattern for b in bufs),
                          1.0)
    assert reader.get(k2) == value_for(k2, size)
