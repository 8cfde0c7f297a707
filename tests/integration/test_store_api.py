"""mooncake.store.MooncakeDistributedStore against a real mooncake_master and a second
client in its own process, all on 127.0.0.1. The module runs once per metadata backend
(the `cluster` fixture): the master's embedded HTTP metadata server, a real etcd (an
endpoint list that fails over), a real Redis (password, db), and P2PHANDSHAKE.

Contract: shared/API.md §1, §2, §5 and upstream-mooncake.md §1 (return conventions
are tested literally: 0 / negative codes, byte counts, 1/0 existence, b"" / None on a
miss, one entry per key). The issue's "Cases that must pass" are the test_case_* tests.
"""
import copy
import ctypes
import gc
import os
import pickle
import re
import threading
import uuid

import numpy as np
import pytest

import mooncake.store as ms
from conftest import METADATA_BACKENDS, _Spawner, free_port, store_metadata
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
from store_proc import StoreCluster, StoreProc, value_for

OK = 0
INTERNAL_ERROR = -1
NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_HAS_LEASE = -706

SEG = 32 << 20


def K(name):
    """A key unique to this run (tests share one cluster)."""
    return f"{name}-{uuid.uuid4().hex[:10]}"


def buf(data_or_size):
    """A ctypes buffer and its address."""
    b = ctypes.create_string_buffer(data_or_size) if isinstance(
        data_or_size, int) else ctypes.create_string_buffer(data_or_size, len(data_or_size))
    return b, ctypes.addressof(b)


@pytest.fixture(scope="module", params=METADATA_BACKENDS)
def cluster(request):
    sp = _Spawner()
    try:
        yield StoreCluster(sp, metadata=store_metadata(request, request.param))
    finally:
        sp.cleanup()


@pytest.fixture(scope="module")
def store(cluster):
    s = MooncakeDistributedStore()
    assert s.setup(*cluster.setup_args()) == 0
    yield s
    assert s.close() == 0


@pytest.fixture(scope="module")
def peer(cluster):
    p = StoreProc(cluster.setup_args())
    assert p.setup_rc == 0
    yield p
    p.close()


def new_store(cluster, **kw):
    s = MooncakeDistributedStore()
    rc = s.setup(*cluster.setup_args(**kw))
    assert rc == 0, rc
    return s


# ======================================================================================
# The cases


def test_case_zero_length_value(store):
    k = K("zero")
    assert store.put(k, b"") == 0
    assert store.is_exist(k) == 1
    assert store.get(k) == b""
    assert store.get_size(k) == 0
    missing = K("missing")
    assert store.get(missing) == b""
    assert store.is_exist(missing) == 0


@pytest.mark.parametrize("key", ["a/b:c@1 2%3", "键-ü", "k" * 4096, "é" * 2048],
                         ids=["punct", "unicode", "4096-bytes", "4096-utf8-bytes"])
def test_case_key_limits_round_trip(store, key):
    key = key if len(key.encode()) == 4096 else key + uuid.uuid4().hex[:6]
    assert len(key.encode()) <= 4096
    val = value_for(key, 1000)
    assert store.put(key, val) == 0
    assert store.is_exist(key) == 1
    assert store.get(key) == val
    assert store.get(key.encode()) == val          # the same key as bytes
    assert store.remove(key, force=True) == 0
    assert store.is_exist(key) == 0
    assert store.put(key, val) == 0
    # remove_by_regex with the key itself (PCRE2 pattern, at most 4096 bytes)
    pattern = "^" + re.escape(key[:200])
    assert store.remove_by_regex(pattern, force=True) == 1
    assert store.is_exist(key) == 0
    assert store.get(key) == b""


@pytest.mark.parametrize("key", ["", "x" * 4097, "é" * 2049], ids=["empty", "4097", "4098u"])
def test_case_key_limits_invalid(store, key):
    assert store.put(key, b"v") == INVALID_PARAMS
    assert store.is_exist(key) == INVALID_PARAMS
    assert store.get(key) == b""
    b, p = buf(16)
    assert store.get_into(key, p, 16) == INVALID_PARAMS
    assert store.put_from(key, p, 16) == INVALID_PARAMS
    assert store.batch_put_from([key], [p], [16]) == [INVALID_PARAMS]
    assert store.remove(key) == INVALID_PARAMS


def test_case_batch_get_into_same_key_twice(store):
    k = K("dup")
    val = value_for(k, 3000)
    assert store.put(k, val) == 0
    b1, p1 = buf(4096)
    b2, p2 = buf(4096)
    assert store.batch_get_into([k, k], [p1, p2], [4096, 4096]) == [3000, 3000]
    assert b1.raw[:3000] == val and b2.raw[:3000] == val


def test_case_replica_num_3_with_2_segments():
    sp = _Spawner()
    try:
        c = StoreCluster(sp)
        a = new_store(c)
        b = StoreProc(c.setup_args())
        try:
            k = K("r3")
            cfg = ReplicateConfig()
            cfg.replica_num = 3
            val = value_for(k, 5000)
            assert a.put(k, val, cfg) == 0
            reps = a.get_replica_desc(k)
            ends = {r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                    for r in reps}
            assert len(reps) == 2 and ends == {a.get_hostname(), b.hostname}
            assert all(r.status == ms.ReplicaStatus.COMPLETE for r in reps)
            assert b.call("get", k) == val
            # larger than any segment: NO_AVAILABLE_HANDLE, nothing left behind
            big = K("big")
            assert a.put(big, bytes(SEG + 4096), cfg) == NO_AVAILABLE_HANDLE
            assert a.is_exist(big) == 0
            assert a.get_size(big) == OBJECT_NOT_FOUND
            assert a.get(big) == b""
            # and the pool still takes normal puts
            assert a.put(K("after"), b"x" * 100, cfg) == 0
        finally:
            b.close()
            a.close()
    finally:
        sp.cleanup()


def test_case_value_larger_than_any_segment(store, peer):
    k = K("huge")
    assert store.put(k, bytes(SEG + 1)) == NO_AVAILABLE_HANDLE
    assert store.is_exist(k) == 0
    assert peer.call("is_exist", k) == 0
    b, p = buf(16)
    assert store.batch_put_from([k], [p], [SEG + 1]) == [NO_AVAILABLE_HANDLE]
    assert store.is_exist(k) == 0


def test_case_get_into_smaller_and_larger_buffer(store):
    k = K("into")
    val = value_for(k, 1000)
    assert store.put(k, val) == 0
    small, ps = buf(999)
    assert store.get_into(k, ps, 999) == INVALID_PARAMS
    large, pl = buf(5000)
    assert store.get_into(k, pl, 5000) == 1000
    assert large.raw[:1000] == val
    assert large.raw[1000:] == bytes(4000)                    # the rest untouched
    exact, pe = buf(1000)
    assert store.get_into(k, pe, 1000) == 1000 and exact.raw == val


def test_case_put_from_unregistered_memory(store, peer):
    k = K("unreg")
    data = value_for(k, 70000)
    b, p = buf(data)
    rc = store.put_from(k, p, len(data))
    # upstream: an error over RDMA, success over TCP; ours reads any local memory
    assert rc == 0
    assert store.get(k) == data
    assert peer.call("get", k) == data
    # the same from the other process, into unregistered memory there
    k2 = K("unreg2")
    assert peer.fn("put_from_raw", k2, data) == 0
    assert peer.fn("get_into_raw", k2, 80000) == (len(data), data)
    out, po = buf(80000)
    assert store.get_into(k2, po, 80000) == len(data) and out.raw[:len(data)] == data


def test_case_remove_within_lease(store):
    k = K("lease")
    assert store.put(k, b"leased") == 0
    assert store.get(k) == b"leased"                          # grants a read lease
    assert store.remove(k) == OBJECT_HAS_LEASE
    assert store.is_exist(k) == 1
    assert store.remove(k, force=True) == 0
    assert store.is_exist(k) == 0
    assert store.remove(k) == OBJECT_NOT_FOUND


def test_case_concurrent_puts_of_one_key_two_processes(cluster):
    import time

    k = K("race")
    va, vb = b"A" * 4096, b"B" * 8192
    pa = StoreProc(cluster.setup_args(segment=8 << 20))
    pb = StoreProc(cluster.setup_args(segment=8 << 20))
    try:
        start = time.time() + 0.5
        pa.send_fn("race", k, va, [vb], 1000, 10, start)
        pb.send_fn("race", k, vb, [va], 1000, 10, start)
        rca, bada, rma = pa.result(timeout=120)
        rcb, badb, rmb = pb.result(timeout=120)
        assert bada == [] and badb == []
        assert set(rca) == {0} and set(rcb) == {0}, (rca, rcb)
        for p in (pa, pb):
            for _ in range(20):
                assert p.call("get", k) in (va, vb)
        s = new_store(cluster, segment=0)
        try:
            assert s.get(k) in (va, vb)
        finally:
            s.close()
    finally:
        pa.close()
        pb.close()


# ======================================================================================
# setup / close


def test_setup_hostname_port_range(store):
    host, port = store.get_hostname().rsplit(":", 1)
    assert host == "127.0.0.1" and 12300 <= int(port) <= 14300
    assert store.health_check() == 0


def test_setup_every_keyword(cluster):
    a = cluster.setup_args()
    s = MooncakeDistributedStore()
    rc = s.setup(local_hostname=a[0], metadata_server=a[1], global_segment_size=a[2],
                 local_buffer_size=a[3], protocol=a[4], rdma_devices=a[5],
                 master_server_addr=a[6], engine=None, enable_ssd_offload=False,
                 ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
                 client_http_port=9300)
    assert rc == 0
    k = K("kw")
    assert s.put(k, b"v") == 0 and s.get(k) == b"v"
    assert s.setup(*a) == INVALID_PARAMS                       # already set up
    assert s.close() == 0


def test_setup_positional_eight_args_like_sglang(cluster):
    s = MooncakeDistributedStore()
    assert s.setup(*cluster.setup_args(), None, tenant_id="default") == 0
    assert s.close() == 0


def test_setup_unknown_keyword_raises_typeerror_naming_it(cluster):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError, match="enable_fancy_offload"):
        s.setup(*cluster.setup_args(), None, enable_fancy_offload=True)
    # SGLang's retry: drop the keyword named in the message, call again
    kwargs = {"enable_fancy_offload": True, "tenant_id": "default"}
    while True:
        try:
            rc = s.setup(*cluster.setup_args(), None, **kwargs)
            break
        except TypeError as e:
            name = next(n for n in kwargs if n in str(e))
            kwargs.pop(name)
    assert rc == 0 and kwargs == {"tenant_id": "default"}
    assert s.close() == 0


@pytest.mark.parametrize("bad", [("global_segment_size", "16MB"), ("global_segment_size", -1),
                                 ("local_buffer_size", 2 ** 64), ("protocol", 5),
                                 ("local_hostname", None)])
def test_setup_wrong_types_raise_typeerror_naming_the_argument(cluster, bad):
    names = ["local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
             "protocol", "rdma_devices", "master_server_addr"]
    args = list(cluster.setup_args())
    args[names.index(bad[0])] = bad[1]
    with pytest.raises(TypeError, match=bad[0]):
        MooncakeDistributedStore().setup(*args)


def test_setup_missing_arguments():
    with pytest.raises(TypeError):
        MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE")
    with pytest.raises(TypeError):
        MooncakeDistributedStore(1)


def test_setup_invalid_values_return_codes(cluster):
    a = list(cluster.setup_args())
    s = MooncakeDistributedStore()
    assert s.setup("", *a[1:]) == INVALID_PARAMS
    assert s.setup(a[0], a[1], 100, *a[3:]) == INVALID_PARAMS      # segment < 1 KiB
    # more than this process can map: a local allocation failure, -600 as upstream (not
    # -200, which says the master's pool is full)
    assert s.setup(a[0], a[1], 1 << 50, *a[3:]) == INVALID_PARAMS
    if not os.environ.get("MC_FORCE_TCP"):
        assert s.setup(*a[:4], "rdma", *a[5:]) == -1012             # no RDMA here
    # an unreachable master: an RPC failure code, and the store stays usable for setup
    dead = f"127.0.0.1:{free_port()}"
    rc = s.setup(*a[:6], dead)
    assert rc in (-900, -901), rc
    assert s.health_check() == 1
    assert s.setup(*a) == 0
    assert s.close() == 0


def test_setup_dict_form(cluster):
    s = MooncakeDistributedStore()
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": cluster.metadata,
           "master_server_addr": cluster.addr, "global_segment_size": "16MB",
           "local_buffer_size": "16 mb", "protocol": "tcp", "rdma_devices": "",
           "tenant_id": "default", "enable_ssd_offload": False, "client_http_port": 9300}
    assert s.setup(cfg) == 0
    k = K("dict")
    assert s.put(k, b"dict") == 0 and s.get(k) == b"dict"
    assert s.close() == 0
    assert s.setup(config=dict(cfg, global_segment_size=16 << 20)) == 0
    assert s.close() == 0


@pytest.mark.parametrize("change", [{"metadata_server": ""}, {"local_hostname": None},
                                    {"global_segment_size": "50%"},
                                    {"local_buffer_size": "12XB"},
                                    {"client_http_port": "http"}])
def test_setup_dict_form_errors(cluster, change):
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": cluster.metadata,
           "master_server_addr": cluster.addr, "global_segment_size": "16MB"}
    for k, v in change.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    assert MooncakeDistributedStore().setup(cfg) == INVALID_PARAMS


def test_setup_p2phandshake_cross_process(cluster):
    args = cluster.setup_args(metadata="P2PHANDSHAKE")
    s = MooncakeDistributedStore()
    assert s.setup(*args) == 0
    p = StoreProc(args)
    try:
        k = K("p2p")
        cfg_peer = p.hostname
        assert p.fn("put_values", [k], 100000, preferred=cfg_peer) == [0]
        assert p.fn("replicas", k)[0][1] == cfg_peer
        assert s.get(k) == value_for(k, 100000)                 # a remote read
        k2 = K("p2p2")
        cfg = ReplicateConfig()
        cfg.preferred_segment = s.get_hostname()
        assert s.put(k2, b"z" * 5000, cfg) == 0
        assert p.call("get", k2) == b"z" * 5000
    finally:
        p.close()
        s.close()


def test_setup_with_shared_engine(cluster):
    from mooncake.engine import TransferEngine

    te = TransferEngine()
    assert te.initialize("127.0.0.1", cluster.metadata, "tcp", "") == 0
    s = MooncakeDistributedStore()
    assert s.setup(*cluster.setup_args(), te.get_engine()) == 0
    k = K("engine")
    assert s.put(k, b"shared engine") == 0
    assert s.get(k) == b"shared engine"
    # the store's segment is the engine's (named as the engine was initialized)
    assert s.get_hostname().startswith("127.0.0.1")
    assert s.close() == 0
    assert te.get_rpc_port() > 0                               # the engine outlives close
    del te, s
    gc.collect()
    with pytest.raises(TypeError, match="engine"):
        MooncakeDistributedStore().setup(*cluster.setup_args(), object())


def test_init_all_on_a_set_up_store(store):
    assert store.init_all("tcp", "") == INVALID_PARAMS
    with pytest.raises(TypeError, match="mount_segment_size"):
        store.init_all("tcp", "", mount_segment_size="1")


def test_close_idempotent_and_everything_after_close(cluster):
    s = new_store(cluster)
    k = K("closed")
    assert s.put(k, b"v") == 0
    assert s.close() == 0
    assert s.close() == 0
    b, p = buf(16)
    assert s.get(k) == b""
    assert s.put(k, b"v") == INVALID_PARAMS
    assert s.is_exist(k) == INVALID_PARAMS
    assert s.get_into(k, p, 16) == INVALID_PARAMS
    assert s.health_check() == 1
    assert s.get_hostname() == ""


def test_close_on_garbage_collection(cluster, store):
    s = new_store(cluster)
    k = K("gc")
    cfg = ReplicateConfig()
    cfg.preferred_segment = s.get_hostname()
    assert s.put(k, b"owned by s", cfg) == 0
    assert store.get_replica_desc(k)[0].get_memory_descriptor(
    ).buffer_descriptor.transport_endpoint == s.get_hostname()
    del s
    gc.collect()
    # the collected client's segment was unmounted: its replicas are gone
    assert store.is_exist(k) == 0
    assert store.get(k) == b""


def test_not_set_up_conventions():
    s = MooncakeDistributedStore()
    b, p = buf(16)
    assert s.put("k", b"v") == INVALID_PARAMS
    assert s.put_parts("k", b"a", b"b") == INVALID_PARAMS
    assert s.put_batch(["k"], [b"v"]) == INVALID_PARAMS
    assert s.put_from("k", p, 16) == INVALID_PARAMS
    assert s.get("k") == b""
    assert s.get_batch(["a", "b"]) == [b"", b""]
    assert s.get_buffer("k") is None
    assert s.batch_get_buffer(["a", "b"]) == [None, None]
    assert s.is_exist("k") == INVALID_PARAMS
    assert s.batch_is_exist(["a", "b"]) == [INVALID_PARAMS, INVALID_PARAMS]
    assert s.get_into("k", p, 16) == INVALID_PARAMS
    assert s.batch_get_into(["k"], [p], [16]) == [INVALID_PARAMS]
    assert s.batch_put_from(["k"], [p], [16]) == [INVALID_PARAMS]
    assert s.batch_put_from_multi_buffers(["k"], [[p]], [[16]]) == [INVALID_PARAMS]
    assert s.batch_get_into_multi_buffers(["k"], [[p]], [[16]]) == [INVALID_PARAMS]
    assert s.get_size("k") == INVALID_PARAMS
    assert s.remove("k") == INVALID_PARAMS
    assert s.batch_remove(["k"]) == [INVALID_PARAMS]
    assert s.remove_by_regex(".*") == INVALID_PARAMS
    assert s.remove_all() == INVALID_PARAMS
    assert s.register_buffer(p, 16) == INVALID_PARAMS
    assert s.unregister_buffer(p) == INVALID_PARAMS
    assert s.upsert("k", b"v") == INVALID_PARAMS
    assert s.get_replica_desc("k") == []
    assert s.batch_get_replica_desc(["k"]) == {}
    assert s.get_hostname() == ""
    assert s.health_check() == 1
    assert s.close() == 0
    # empty batches are empty lists even when not set up
    assert s.batch_is_exist([]) == [] and s.get_batch([]) == []
    assert s.batch_get_buffer([]) == [] and s.batch_get_into([], [], []) == []


# ======================================================================================
# byte API


def test_put_accepts_any_buffer(store):
    cases = {"bytes": b"abc", "bytearray": bytearray(b"defg"), "memoryview": memoryview(b"hij"),
             "np-u8": np.arange(10, dtype=np.uint8),
             "np-f32": np.arange(6, dtype=np.float32).reshape(2, 3)}
    for name, v in cases.items():
        k = K(name)
        assert store.put(k, v) == 0
        assert store.get(k) == bytes(memoryview(v).cast("B")), name


def test_put_argument_errors(store):
    with pytest.raises(TypeError, match="value"):
        store.put("k", 123)
    with pytest.raises(TypeError, match="key"):
        store.put(123, b"v")
    with pytest.raises(ValueError):
        store.put("k", np.arange(10, dtype=np.uint8)[::2])          # not contiguous
    with pytest.raises(TypeError, match="config"):
        store.put("k", b"v", "not a config")
    with pytest.raises(TypeError):
        store.put("k")


def test_put_existing_key_keeps_old_value(store):
    k = K("twice")
    assert store.put(k, b"first") == 0
    assert store.put(k, b"second, longer") == 0
    assert store.get(k) == b"first"


def test_put_parts(store):
    k = K("parts")
    assert store.put_parts(k, b"ab", bytearray(b"cd"), memoryview(b"ef"),
                           np.frombuffer(b"gh", dtype=np.uint8)) == 0
    assert store.get(k) == b"abcdefgh"
    k2 = K("parts-cfg")
    assert store.put_parts(k2, b"x", config=ReplicateConfig()) == 0
    assert store.get(k2) == b"x"
    with pytest.raises(RuntimeError, match="parts must be 1-D bytes-like"):
        store.put_parts(K("p"), np.zeros((2, 2), dtype=np.uint8))
    with pytest.raises(RuntimeError, match="parts must be 1-D bytes-like"):
        store.put_parts(K("p"), np.zeros(4, dtype=np.float32))
    with pytest.raises(TypeError, match="invalid keyword"):
        store.put_parts(K("p"), b"x", cfg=None)
    with pytest.raises(TypeError):
        store.put_parts()


def test_put_batch_and_get_batch(store):
    keys = [K(f"pb{i}") for i in range(5)]
    vals = [value_for(k, 100 * (i + 1)) for i, k in enumerate(keys)]
    assert store.put_batch(keys, vals) == 0
    miss = K("pbmiss")
    assert store.get_batch(keys + [miss]) == vals + [b""]
    assert store.put_batch(keys[:2], vals[:1]) == INVALID_PARAMS
    assert store.put_batch([], []) == 0
    assert store.get_batch([]) == []
    with pytest.raises(TypeError):
        store.get_batch("not a list")


def test_get_buffer_handle(store):
    k = K("handle")
    val = value_for(k, 10000)
    assert store.put(k, val) == 0
    h = store.get_buffer(k)
    assert isinstance(h, ms.BufferHandle)
    assert h.size() == len(h) == 10000 and h.ptr() != 0
    assert bytes(h) == val
    mv = memoryview(h)
    assert mv.nbytes == 10000 and mv.format == "b" and mv.ndim == 1 and not mv.readonly
    arr = np.frombuffer(h, dtype=np.uint8)
    assert arr.tobytes() == val
    assert ctypes.string_at(h.ptr(), 16) == val[:16]
    assert store.get_buffer(K("nohandle")) is None
    # a zero-length object exists: an empty handle
    kz = K("hz")
    assert store.put(kz, b"") == 0
    hz = store.get_buffer(kz)
    assert hz is not None and len(hz) == 0 and bytes(hz) == b""
    with pytest.raises(TypeError):
        ms.BufferHandle()


def test_buffer_handle_outlives_store_close(cluster):
    s = new_store(cluster)
    k = K("outlive")
    val = value_for(k, 50000)
    assert s.put(k, val) == 0
    h = s.get_buffer(k)
    mv = memoryview(h)
    assert s.close() == 0
    del s
    gc.collect()
    assert bytes(h) == val and mv.tobytes() == val


def test_batch_get_buffer(store):
    keys = [K("bgb0"), K("bgb1")]
    for k in keys:
        assert store.put(k, value_for(k, 777)) == 0
    hs = store.batch_get_buffer([keys[0], K("bgbmiss"), keys[1], keys[0]])
    assert hs[1] is None
    assert bytes(hs[0]) == bytes(hs[3]) == value_for(keys[0], 777)
    assert bytes(hs[2]) == value_for(keys[1], 777)
    assert store.batch_get_buffer([]) == []


def test_get_size_is_exist_batch_is_exist(store):
    k = K("size")
    assert store.put(k, bytes(12345)) == 0
    assert store.get_size(k) == 12345
    assert store.get_size(K("nosize")) == OBJECT_NOT_FOUND
    assert store.is_exist(k) == 1
    r = store.batch_is_exist([k, K("no"), k])
    assert r == [1, 0, 1] and all(type(x) is int for x in r)
    assert store.batch_is_exist([]) == []


def test_remove_batch_remove_remove_by_regex(store):
    base = K("rm")
    keys = [f"{base}/{i}" for i in range(6)]
    for k in keys:
        assert store.put(k, b"x") == 0
    assert store.remove(keys[0]) == 0
    assert store.remove(keys[0]) == OBJECT_NOT_FOUND
    assert store.batch_remove([keys[1], keys[2], K("rmmiss")]) == [0, 0, OBJECT_NOT_FOUND]
    assert store.batch_remove([]) == []
    assert store.get(keys[3]) == b"x"                            # leased now
    assert store.batch_remove([keys[3]]) == [OBJECT_HAS_LEASE]
    assert store.remove_by_regex("^" + re.escape(base) + "/[3-5]$") == 2   # 3 is leased
    assert store.is_exist(keys[3]) == 1
    assert store.remove_by_regex(re.escape(base), force=True) == 1
    assert store.batch_is_exist(keys) == [0] * 6
    assert store.remove_by_regex("^no-such-prefix-" + uuid.uuid4().hex) == 0
    assert store.remove_by_regex("([unclosed") == INVALID_PARAMS
    assert store.batch_remove([keys[3]], force=True) == [OBJECT_NOT_FOUND]


def test_remove_all():
    sp = _Spawner()
    try:
        c = StoreCluster(sp)
        s = new_store(c)
        keys = [K(f"ra{i}") for i in range(5)]
        for k in keys:
            assert s.put(k, b"v") == 0
        assert s.get(keys[0]) == b"v"                            # one leased
        assert s.remove_all() == 4
        assert s.batch_is_exist(keys) == [1, 0, 0, 0, 0]
        assert s.remove_all(force=True) == 1
        assert s.remove_all(True) == 0
        assert s.batch_is_exist(keys) == [0] * 5
        assert s.close() == 0
    finally:
        sp.cleanup()


def test_register_and_unregister_buffer(store):
    b, p = buf(1 << 20)
    assert store.register_buffer(p, 1 << 20) == 0
    assert store.unregister_buffer(p) == 0
    assert store.unregister_buffer(p) == INVALID_PARAMS
    assert store.register_buffer(0, 100) == INVALID_PARAMS
    assert store.register_buffer(p, 0) == INVALID_PARAMS
    with pytest.raises(TypeError, match="buffer_ptr"):
        store.register_buffer(-1, 100)
    with pytest.raises(TypeError, match="size"):
        store.register_buffer(p, 2 ** 64)
    with pytest.raises(TypeError):
        store.register_buffer(p, 1.5)


def test_put_from_get_into_registered(store, peer):
    src, ps = buf(value_for("reg", 200000))
    dst, pd = buf(300000)
    assert store.register_buffer(ps, 200000) == 0
    assert store.register_buffer(pd, 300000) == 0
    try:
        k = K("pfrom")
        cfg = ReplicateConfig()
        cfg.preferred_segment = peer.hostname                    # a remote replica
        assert store.put_from(k, ps, 200000, cfg) == 0
        assert store.get_into(k, pd, 300000) == 200000
        assert dst.raw[:200000] == src.raw[:200000]
        assert peer.call("get", k) == src.raw[:200000]
    finally:
        assert store.unregister_buffer(ps) == 0
        assert store.unregister_buffer(pd) == 0


def test_a_range_running_past_a_registered_buffer_is_refused(store, peer):
    # the new user's repro: 16 KiB of memory, the first 4 KiB registered
    b = (ctypes.c_char * 16384)()
    p = ctypes.addressof(b)
    ctypes.memmove(p, value_for("rb", 100), 100)
    k, k2 = K("regbound"), K("regbound2")
    assert store.register_buffer(p, 4096) == 0
    try:
        assert store.put_from(k, p, 100) == 0
        b[4090:4190] = b"\x5a" * 100
        assert store.get_into(k, p + 4090, 100) == INVALID_PARAMS      # not an overrun
        assert b[4090:4190] == b"\x5a" * 100
        assert store.get_into(k, p + 3996, 100) == 100                 # ends at the end
        assert store.put_from(k2, p + 4000, 200) == INVALID_PARAMS
        assert store.is_exist(k2) == 0
        assert store.batch_put_from([k2, K("rb-ok")], [p + 4000, p], [200, 10]) == \
            [INVALID_PARAMS, 0]
        assert store.batch_get_into([k, k], [p + 4090, p + 8192], [100, 100]) == \
            [INVALID_PARAMS, 100]
        assert store.batch_put_from_multi_buffers([k2], [[p, p + 4095]], [[10, 2]]) == \
            [INVALID_PARAMS]
        assert store.batch_get_into_multi_buffers([k], [[p + 9000, p + 4080]], [[50, 50]]) == \
            [INVALID_PARAMS]
        assert peer.call("is_exist", k2) == 0
    finally:
        assert store.unregister_buffer(p) == 0
    # unregistered: plain caller memory again (inside b), read into without a fault
    assert store.get_into(k, p + 4090, 100) == 100
    assert b[4090:4190] == value_for("rb", 100)


def test_pointer_validation(store):
    with pytest.raises(TypeError, match="buffer_ptr"):
        store.get_into("k", -5, 10)
    with pytest.raises(TypeError, match="buffer_ptr"):
        store.put_from("k", 2 ** 64, 10)
    with pytest.raises(TypeError, match="size"):
        store.get_into("k", 4096, -1)
    with pytest.raises(TypeError, match="buffer_ptrs"):
        store.batch_put_from(["k"], ["x"], [1])
    with pytest.raises(TypeError, match="all_sizes"):
        store.batch_put_from_multi_buffers(["k"], [[1]], [[-1]])
    assert store.get_into(K("nullptr"), 0, 10) == INVALID_PARAMS
    assert store.put_from(K("nullptr"), 0, 10) == INVALID_PARAMS
    assert store.put_from(K("wrap"), 2 ** 64 - 8, 16) == INVALID_PARAMS


def test_batch_put_from_and_batch_get_into(store, peer):
    keys = [K(f"bpf{i}") for i in range(4)]
    srcs = [buf(value_for(k, 1000 * (i + 1))) for i, k in enumerate(keys)]
    rc = store.batch_put_from(keys, [p for _, p in srcs], [1000 * (i + 1) for i in range(4)])
    assert rc == [0, 0, 0, 0]
    dsts = [buf(8192) for _ in range(5)]
    res = store.batch_get_into(keys + [K("bgimiss")], [p for _, p in dsts], [8192] * 5)
    assert res[:4] == [1000, 2000, 3000, 4000] and res[4] == OBJECT_NOT_FOUND
    for i, k in enumerate(keys):
        assert dsts[i][0].raw[:1000 * (i + 1)] == value_for(k, 1000 * (i + 1))
    assert peer.call("batch_is_exist", keys) == [1] * 4
    assert store.batch_put_from(keys, [1, 2], [3]) == [INVALID_PARAMS] * 4
    assert store.batch_get_into(keys, [dsts[0][1]], [8192]) == [INVALID_PARAMS] * 4
    assert store.batch_put_from([], [], []) == []
    # a small buffer fails only its own key
    res = store.batch_get_into(keys[:2], [dsts[0][1], dsts[1][1]], [8192, 10])
    assert res == [1000, INVALID_PARAMS]


def test_multi_buffers(store, peer):
    keys = [K("mb0"), K("mb1")]
    data = [value_for(k, 30000) for k in keys]
    pieces = [[buf(d[:10000]), buf(d[10000:25000]), buf(d[25000:])] for d in data]
    ptrs = [[p for _, p in row] for row in pieces]
    sizes = [[10000, 15000, 5000]] * 2
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes, ReplicateConfig()) == [0, 0]
    assert store.get(keys[0]) == data[0] and peer.call("get", keys[1]) == data[1]
    # scatter into a different split
    outs = [[buf(7), buf(30000)] for _ in keys]
    res = store.batch_get_into_multi_buffers(keys, [[p for _, p in r] for r in outs],
                                             [[7, 30000]] * 2)
    assert res == [30000, 30000]
    for d, (a, b) in zip(data, outs):
        assert a[0].raw == d[:7] and b[0].raw[:29993] == d[7:]
    # too small in total; prefer_alloc_in_same_node accepted
    small = store.batch_get_into_multi_buffers(keys[:1], [[outs[0][0][1]]], [[7]],
                                               prefer_alloc_in_same_node=True)
    assert small == [INVALID_PARAMS]
    # a row whose lists differ fails alone; outer mismatch fails all
    res = store.batch_get_into_multi_buffers(keys, [[outs[0][1][1]], [1, 2]],
                                             [[30000], [1]])
    assert res == [30000, INVALID_PARAMS]
    assert store.batch_put_from_multi_buffers(keys, ptrs[:1], sizes[:1]) == [INVALID_PARAMS] * 2
    assert store.batch_put_from_multi_buffers([], [], []) == []
    # multi-buffer puts accept prefer_alloc_in_same_node (plain puts refuse it)
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True
    k3 = K("mb3")
    assert store.batch_put_from_multi_buffers([k3], [ptrs[0]], [sizes[0]], cfg) == [0]
    assert store.get(k3) == data[0]
    assert store.put(K("pa"), b"x", cfg) == INVALID_PARAMS


def test_upsert_family(store):
    k = K("ups")
    assert store.upsert(k, b"one") == 0
    held = store.get_buffer(k)
    assert held is not None
    # under a reader's lease: new space, as upstream (issue 10 fault 6; was -706)
    assert store.upsert(k, b"two") == 0
    assert store.get(k) == b"two"
    assert bytes(held) == b"one"                                  # the reader's copy
    k = K("ups2")
    assert store.upsert(k, b"one") == 0
    assert store.upsert(k, b"two") == 0                           # same size: in place
    assert store.upsert(k, b"three!") == 0                        # new size
    assert store.get(k) == b"three!"
    k = K("upp")
    assert store.upsert_parts(k, b"a", b"b") == 0
    assert store.upsert_parts(k, b"c", b"d", config=ReplicateConfig()) == 0
    assert store.get(k) == b"cd"
    keys = [K("upb0"), K("upb1")]
    assert store.upsert_batch(keys, [b"x", b"y"]) == 0
    assert store.upsert_batch(keys, [b"xx", b"yy"]) == 0
    assert store.get_batch(keys) == [b"xx", b"yy"]
    assert store.upsert_batch(keys, [b"x"]) == INVALID_PARAMS
    b1, p1 = buf(b"from-1")
    b2, p2 = buf(b"from-2")
    k = K("upf")
    assert store.upsert_from(k, p1, 6) == 0
    assert store.upsert_from(k, p2, 6) == 0
    assert store.get(k) == b"from-2"
    keys = [K("bupf0"), K("bupf1")]
    assert store.batch_upsert_from(keys, [p1, p2], [6, 6]) == [0, 0]
    assert store.batch_upsert_from(keys, [p2, p1], [6, 6]) == [0, 0]
    assert store.get_batch(keys) == [b"from-2", b"from-1"]


def test_put_from_with_metadata(store):
    meta, pm = buf(b"META")
    data, pd = buf(b"payload-bytes")
    k = K("meta")
    assert store.put_from_with_metadata(k, pd, pm, 13, 4) == 0
    assert store.get(k) == b"METApayload-bytes"


def test_replica_descriptors(store, peer):
    k = K("desc")
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    assert store.put(k, b"d" * 4000, cfg) == 0
    reps = store.get_replica_desc(k)
    assert len(reps) == 2
    ends = set()
    for r in reps:
        assert isinstance(r, ms.ReplicaDescriptor)
        assert r.status == ms.ReplicaStatus.COMPLETE == 3
        assert r.is_memory_replica() and not r.is_disk_replica()
        assert not r.is_local_disk_replica()
        d = r.get_memory_descriptor().buffer_descriptor
        assert d.size == 4000 and d.buffer_address > 0
        ends.add(d.transport_endpoint)
        assert "Descriptor size=4000" in repr(d)
        with pytest.raises(RuntimeError):
            r.get_disk_descriptor()
    assert ends == {store.get_hostname(), peer.hostname}
    assert store.get_replica_desc(K("nodesc")) == []
    miss = K("nodesc")
    d = store.batch_get_replica_desc([k, miss])
    assert list(d) == [k] and len(d[k]) == 2
    assert store.batch_get_replica_desc([]) == {}


def test_replicate_config_attributes():
    c = ReplicateConfig()
    assert (c.replica_num, c.nof_replica_num, c.dfs_replica_num) == (1, 0, 0)
    assert c.soft_pin_action == ms.SoftPinAction.PRESERVE and c.soft_pin_ttl_ms is None
    assert c.with_soft_pin is False and c.with_hard_pin is False
    assert c.preferred_segments == [] and c.preferred_segment == ""
    assert c.prefer_alloc_in_same_node is False
    assert c.data_type == ms.ObjectDataType.UNKNOWN and c.group_ids is None
    c.replica_num = 3
    c.with_soft_pin = True
    c.soft_pin_action = ms.SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 5000
    c.with_hard_pin = True
    c.preferred_segments = ["a:1", b"b:2"]
    c.preferred_segment = "c:3"
    c.prefer_alloc_in_same_node = True
    c.data_type = ms.ObjectDataType.KVCACHE
    c.group_ids = ["g1"]
    assert c.preferred_segments == ["a:1", "b:2"]
    lst = c.preferred_segments
    lst.append("x")                                   # a copy, as pybind11's getters
    assert c.preferred_segments == ["a:1", "b:2"]
    r = repr(c)
    for s in ("replica_num: 3", "soft_pin_ttl_ms: 5000", "'a:1'", "ENABLE", "KVCACHE", "g1"):
        assert s in r, (s, r)
    assert str(c) == r
    for clone in (copy.copy(c), pickle.loads(pickle.dumps(c))):
        assert repr(clone) == r
    c.soft_pin_ttl_ms = None
    c.group_ids = None
    assert c.soft_pin_ttl_ms is None and c.group_ids is None
    assert ReplicateConfig(replica_num=2).replica_num == 2


@pytest.mark.parametrize("attr,value,exc", [
    ("replica_num", -1, TypeError), ("replica_num", "2", TypeError),
    ("replica_num", 2 ** 64, TypeError), ("replica_num", 1.5, TypeError),
    ("soft_pin_ttl_ms", -1, TypeError), ("soft_pin_ttl_ms", 2 ** 64, TypeError),
    ("soft_pin_action", 7, ValueError), ("soft_pin_action", "ENABLE", TypeError),
    ("data_type", 99, ValueError), ("preferred_segments", [1], TypeError),
    ("preferred_segments", "abc", TypeError), ("preferred_segment", 5, TypeError),
    ("group_ids", [None], TypeError)])
def test_replicate_config_validation(attr, value, exc):
    c = ReplicateConfig()
    with pytest.raises(exc):
        setattr(c, attr, value)
    with pytest.raises(TypeError):
        delattr(c, attr)
    with pytest.raises(AttributeError):
        c.no_such_field = 1
    with pytest.raises(TypeError):
        ReplicateConfig(no_such_field=1)


def test_replicate_config_in_puts(store, peer, capfd):
    cfg = ReplicateConfig()
    cfg.preferred_segments = [peer.hostname]
    k = K("pref")
    assert store.put(k, b"p" * 100, cfg) == 0
    assert peer.fn("replicas", k)[0][1] == peer.hostname
    soft = ReplicateConfig()
    soft.with_soft_pin = True                         # v0.3.12 spelling
    assert store.put(K("soft"), b"s", soft) == 0
    soft = ReplicateConfig()
    soft.soft_pin_action = ms.SoftPinAction.ENABLE
    soft.soft_pin_ttl_ms = 60000
    assert store.put(K("soft2"), b"s", soft) == 0
    bad = ReplicateConfig()
    bad.soft_pin_ttl_ms = 1000                        # without ENABLE: refused upstream
    assert store.put(K("badttl"), b"s", bad) == INVALID_PARAMS
    assert "soft_pin_ttl_ms is set but the soft pin is not enabled" in capfd.readouterr().err
    hard = ReplicateConfig()
    hard.with_hard_pin = True
    assert store.put(K("hard"), b"h", hard) == 0
    zero = ReplicateConfig()
    zero.replica_num = 0
    assert store.put(K("zero"), b"h", zero) == INVALID_PARAMS
    groups = ReplicateConfig()
    groups.group_ids = ["g0", "g1"]
    b, p = buf(b"gg")
    keys = [K("g0"), K("g1")]
    assert store.batch_put_from(keys, [p, p], [2, 2], groups) == [0, 0]
    assert store.batch_put_from([K("g2")], [p], [2], groups) == [INVALID_PARAMS]
    nof = ReplicateConfig()
    nof.nof_replica_num = 1
    assert store.put(K("nof"), b"n", nof) == INVALID_PARAMS


def test_enums_and_error_code():
    assert ms.ReplicaStatus.COMPLETE == 3 and ms.COMPLETE == ms.ReplicaStatus.COMPLETE
    assert [m.name for m in ms.ReplicaStatus] == [
        "UNDEFINED", "INITIALIZED", "PROCESSING", "COMPLETE", "REMOVED", "FAILED"]
    assert [int(m) for m in ms.SoftPinAction] == [0, 1, 2]
    assert ms.ObjectDataType.GENERAL == 9 and ms.KVCACHE == 1
    assert ms.ErrorCode.NO_AVAILABLE_HANDLE == -200
    assert ms.ErrorCode.OBJECT_HAS_LEASE == -706


def test_host_mem_allocator(store):
    a = ms.MooncakeHostMemAllocator()
    p = a.alloc(1 << 20)
    assert p != 0
    ctypes.memmove(p, b"host memory", 11)
    k = K("hostmem")
    assert store.register_buffer(p, 1 << 20) == 0
    assert store.put_from(k, p, 11) == 0
    assert store.get(k) == b"host memory"
    assert store.unregister_buffer(p) == 0
    assert a.free(p) == 0
    assert a.free(p) == INVALID_PARAMS
    assert a.alloc(0) == 0
    with pytest.raises(TypeError):
        a.alloc(-1)


def test_bind_to_numa_node():
    assert ms.bind_to_numa_node(0) is None
    assert ms.bind_to_numa_node(-1) is None
    with pytest.raises(TypeError):
        ms.bind_to_numa_node("0")


def test_async_store_subclass(cluster):
    import asyncio

    from mooncake.async_store import MooncakeDistributedStoreAsync

    s = MooncakeDistributedStoreAsync()
    assert s.setup(*cluster.setup_args()) == 0
    k = K("async")

    async def go():
        assert await s.async_put(k, b"async value") == 0
        assert await s.async_get(k) == b"async value"
        return await s.async_batch_is_exist([k, K("no")])
    assert asyncio.run(asyncio.wait_for(go(), 30)) == [1, 0]
    assert s.close() == 0


def test_threads_share_one_store(store):
    errors = []

    def work(t):
        try:
            for i in range(40):
                k = f"thr-{t}-{i}-{uuid.uuid4().hex[:6]}"
                v = value_for(k, 2000 + t * 100 + i)
                assert store.put(k, v) == 0
                assert store.get(k) == v
                b, p = buf(len(v))
                assert store.get_into(k, p, len(v)) == len(v) and b.raw == v
                assert store.remove(k, force=True) == 0
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts)
    assert errors == []


def test_subclass_and_weakref(cluster):
    import weakref

    class Mine(MooncakeDistributedStore):
        def hello(self):
            return "hi"

    m = Mine()
    r = weakref.ref(m)
    assert m.hello() == "hi" and m.get("k") == b""
    m.extra = 1
    del m
    gc.collect()
    assert r() is None
