"""Ranged reads and writes and the session APIs of MooncakeDistributedStore (upstream
HEAD: get_into_ranges, batch_get_session_start / batch_get_into_multi_buffer_ranges /
batch_get_session_end, batch_put_session_start / batch_put_from_multi_buffer_ranges /
batch_put_session_end / _revoke; upstream-mooncake.md §1.3, real-clients.md: SGLang's
direct linker needs exactly sum(sizes) per key). A real mooncake_master with a short read
lease and two client processes (a remote replica is read over the engine)."""
import ctypes
import uuid

import pytest

from conftest import _Spawner, wait_until
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
from store_proc import StoreCluster, value_for

INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
LEASE_EXPIRED = -707
LEASE_MS = 400


def K(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


def pattern(n, salt=0):
    return bytes((i * 7 + salt) % 251 for i in range(n))


@pytest.fixture(scope="module")
def cluster():
    sp = _Spawner()
    try:
        yield StoreCluster(sp, f"--default_kv_lease_ttl={LEASE_MS}")
    finally:
        sp.cleanup()


class Buf:
    """ctypes memory registered with the store for the test's duration."""

    def __init__(self, store, n, register=True):
        self.raw = ctypes.create_string_buffer(n)
        self.ptr = ctypes.addressof(self.raw)
        self.n = n
        self.store = store
        self.registered = register and store.register_buffer(self.ptr, n) == 0

    def bytes(self, off=0, n=None):
        return self.raw.raw[off:off + (self.n - off if n is None else n)]

    def close(self):
        if self.registered:
            self.store.unregister_buffer(self.ptr)


def test_get_into_ranges_worked_example_and_exact_counts(store, peer):
    # two objects in the peer's segment (read over the engine) and one local
    ka, kb = K("ra"), K("rb")
    assert peer.fn("put_values", [ka], 64, preferred=peer.hostname) == [0]
    assert peer.fn("put_values", [kb], 32, preferred=peer.hostname) == [0]
    va, vb = value_for(ka, 64), value_for(kb, 32)
    assert [d.get_memory_descriptor().buffer_descriptor.transport_endpoint
            for d in store.get_replica_desc(ka)] == [peer.hostname]
    b0, b1 = Buf(store, 128), Buf(store, 64)
    try:
        r = store.get_into_ranges(
            [b0.ptr, b1.ptr],
            [[ka, kb], [kb, ka]],
            [[[0, 4], [10]], [[0], [20]]],
            [[[0, 60], [3]], [[26], [0]]],
            [[[4, 3], [5]], [[6], [4]]])
        assert r == [[[4, 3], [5]], [[6], [4]]]  # the byte count of every fragment
        assert b0.bytes(0, 4) == va[0:4] and b0.bytes(4, 3) == va[60:63]
        assert b0.bytes(10, 5) == vb[3:8]
        assert b1.bytes(0, 6) == vb[26:32] and b1.bytes(20, 4) == va[0:4]
    finally:
        b0.close()
        b1.close()


def test_get_into_ranges_refusals(store):
    k = K("rr")
    v = pattern(100)
    assert store.put(k, v) == 0
    b = Buf(store, 64)
    un = Buf(store, 64, register=False)
    try:
        miss = K("miss")
        r = store.get_into_ranges(
            [b.ptr], [[k, miss]],
            [[[0, 60, 8], [0]]],        # 60 + 8 runs past the 64-byte registration
            [[[90, 0, 95], [0]]],       # 95 + 10 runs past the 100-byte object
            [[[10, 8, 10], [4]]])
        assert r[0][0][0] == 10                     # good fragment: exact bytes
        assert r[0][0][1] == INVALID_PARAMS         # destination overflow
        assert r[0][0][2] == INVALID_PARAMS         # source overflow
        assert r[0][1] == [OBJECT_NOT_FOUND]        # a missing key fails only its own
        assert b.bytes(0, 10) == v[90:100]
        # a key whose fragment lists differ in length: one negative; an empty key list
        r = store.get_into_ranges([b.ptr], [[k, k]], [[[0, 1], []]], [[[0], []]],
                                  [[[1, 1], []]])
        assert len(r) == 1 and len(r[0]) == 2 and r[0][0][0] < 0 and r[0][1] == []
        # an unregistered destination has no size to check against: refused
        r = store.get_into_ranges([un.ptr], [[k]], [[[0]]], [[[0]]], [[[8]]])
        assert r == [[[INVALID_PARAMS]]]
        # top-level shape mismatch: every key negative
        r = store.get_into_ranges([b.ptr], [[k], [k]], [[[0]]], [[[0]]], [[[1]]])
        assert r[0][0][0] < 0
        with pytest.raises(TypeError):
            store.get_into_ranges([b.ptr], [[k]], [[["x"]]], [[[0]]], [[[1]]])
    finally:
        b.close()


def test_get_session_ranges_exact_and_lease_expiry(store, peer):
    keys = [K("gs0"), K("gs1")]
    vals = [pattern(4096, 3), pattern(4096, 4)]
    for k, v in zip(keys, vals):
        assert peer.call("put", k, v) == 0
    dst = Buf(store, 8192, register=False)  # ranged session reads need no registration
    assert store.batch_get_session_start(keys) == [0, 0]
    # layer-wise: two fragments per key per call, exact sum(sizes) back
    ptrs = [[dst.ptr, dst.ptr + 100], [dst.ptr + 4096, dst.ptr + 4196]]
    sizes = [[100, 200], [64, 1]]
    offs = [[0, 1000], [4000, 4095]]
    r = store.batch_get_into_multi_buffer_ranges(keys, ptrs, sizes, offs)
    assert r == [sum(s) for s in sizes]
    assert dst.bytes(0, 100) == vals[0][:100] and dst.bytes(100, 200) == vals[0][1000:1200]
    assert dst.bytes(4096, 64) == vals[1][4000:4064] and dst.bytes(4196, 1) == vals[1][4095:]
    # out of the object / shape mismatch: refused per key
    r = store.batch_get_into_multi_buffer_ranges(keys, [[dst.ptr], [dst.ptr]], [[8], [8]],
                                                 [[4090], [0]])
    assert r == [INVALID_PARAMS, 8]
    r = store.batch_get_into_multi_buffer_ranges(keys, [[dst.ptr], [dst.ptr]], [[8, 1], [8]],
                                                 [[0], [0]])
    assert r == [INVALID_PARAMS, 8]
    # once the session's lease ran out: -707, a fresh session reads again
    wait_until(lambda: store.batch_get_into_multi_buffer_ranges(
        keys[:1], [[dst.ptr]], [[16]], [[0]]) == [LEASE_EXPIRED], 10, "the lease to end")
    assert store.batch_get_session_start(keys[:1]) == [0]
    assert store.batch_get_into_multi_buffer_ranges(keys[:1], [[dst.ptr]], [[16]],
                                                    [[16]]) == [16]
    assert store.batch_get_session_end(keys) == 0
    # ended: no session any more
    r = store.batch_get_into_multi_buffer_ranges(keys[:1], [[dst.ptr]], [[16]], [[0]])
    assert r == [INVALID_PARAMS]
    assert store.batch_get_session_end(keys[:1]) == INVALID_PARAMS
    assert store.batch_get_session_start([K("missing")]) == [OBJECT_NOT_FOUND]


def test_put_session_write_ranges_end_visible_to_peer(store, peer):
    keys = [K("ps0"), K("ps1")]
    size = 2 * 4096
    src = [pattern(size, 5), pattern(size, 6)]
    bufs = [ctypes.create_string_buffer(s, size) for s in src]
    ptrs = [ctypes.addressof(b) for b in bufs]
    cfg = ReplicateConfig()
    cfg.replica_num = 2  # one replica in each client's segment: own copy and remote write
    assert store.batch_put_session_start(keys, [size, size], cfg) == [0, 0]
    assert store.is_exist(keys[0]) == 0  # reserved, not published
    for layer in range(2):  # layer-wise writes: one page per key per call
        off = layer * 4096
        r = store.batch_put_from_multi_buffer_ranges(
            keys, [[p + off] for p in ptrs], [[4096], [4096]], [[off], [off]])
        assert r == [4096, 4096]
    # out of the object: refused
    r = store.batch_put_from_multi_buffer_ranges(keys[:1], [[ptrs[0]]], [[8]], [[size - 4]])
    assert r == [INVALID_PARAMS]
    assert store.batch_put_session_end(keys) == [0, 0]
    assert len(store.get_replica_desc(keys[0])) == 2
    for k, v in zip(keys, src):
        assert peer.call("get", k) == v
    # ended: the same keys have no put session any more
    assert store.batch_put_session_end(keys) == [INVALID_PARAMS] * 2
    assert store.batch_put_session_start(keys[:1], [size]) == [OBJECT_ALREADY_EXISTS]


def test_put_session_revoke_and_drop(cluster, store, peer):
    k = K("rev")
    assert store.batch_put_session_start([k], [64]) == [0]
    # while reserved, the key is not readable by another client (a put of it by another
    # client waits for this session: fault 6 of issue 10, tests/faults/test_issue10_faults.py)
    assert peer.call("get", k) == b""
    assert store.batch_put_session_revoke([k]) == [0]
    assert store.batch_put_session_revoke([k]) == [INVALID_PARAMS]
    assert store.is_exist(k) == 0
    assert peer.call("put", k, b"y" * 64) == 0 and peer.call("get", k) == b"y" * 64
    # a session dropped with its store (close) is revoked: the key is free again
    k2 = K("drop")
    s2 = MooncakeDistributedStore()
    assert s2.setup(*cluster.setup_args()) == 0
    assert s2.batch_put_session_start([k2], [32]) == [0]
    assert s2.close() == 0
    assert peer.call("put", k2, b"z" * 32) == 0 and peer.call("get", k2) == b"z" * 32
    # no session: every ranged write refused
    assert store.batch_put_from_multi_buffer_ranges([K("none")], [[1]], [[1]], [[0]]) == \
        [INVALID_PARAMS]
    # outer length mismatch
    assert store.batch_put_session_start([k, k2], [1]) == [INVALID_PARAMS] * 2
