"""The tensor API of mooncake.store.MooncakeDistributedStore with CPU torch, against a
real mooncake_master and a second client process (upstream-mooncake.md §3: the 304-byte
header, *_with_tp shards under f"{key}_tp_{rank}", None on a miss, -600 for a tensor the
codec refuses)."""
import ctypes
import os
import subprocess
import sys
import uuid

import pytest

torch = pytest.importorskip("torch")  # the venv installs the CPU build; see setup.sh

import mooncake.store as ms  # noqa: E402
from mooncake import _tensor_codec as codec  # noqa: E402
from mooncake.store import MooncakeDistributedStore, ReplicateConfig  # noqa: E402

INVALID_PARAMS = -600
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64]


def K(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


def sample(dtype, shape=(4, 6)):
    g = torch.Generator().manual_seed(7)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    return torch.randint(-2 ** 40, 2 ** 40, shape, generator=g, dtype=dtype)


def same(a, b):
    return a is not None and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def buffer(n):
    b = ctypes.create_string_buffer(n)
    return b, ctypes.addressof(b)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_put_get_tensor_dtypes(store, peer, dtype):
    k = K("t")
    t = sample(dtype)
    assert store.put_tensor(k, t) == 0
    got = store.get_tensor(k)
    assert same(got, t)
    raw = store.get(k)
    assert raw[:4] == b"NOOM" and len(raw) == 304 + t.numel() * t.element_size()
    assert raw == codec.encode_bytes(t)          # byte-identical to upstream's layout
    # another process reads the same object through the byte API
    assert peer.call("get", k) == raw


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 1, 1, 1, 1, 1, 1, 3)],
                         ids=["scalar", "empty", "empty3d", "8d"])
def test_tensor_shapes(store, shape):
    k = K("shape")
    t = sample(torch.float32, shape) if 0 not in shape else torch.empty(shape)
    assert store.put_tensor(k, t) == 0
    assert same(store.get_tensor(k), t)


def test_non_contiguous_and_refused_tensors(store):
    t = sample(torch.float32, (6, 8)).t()
    assert not t.is_contiguous()
    k = K("nc")
    assert store.put_tensor(k, t) == 0
    assert same(store.get_tensor(k), t.contiguous())
    assert store.put_tensor(K("cplx"), torch.zeros(3, dtype=torch.complex64)) == INVALID_PARAMS
    assert store.put_tensor(K("9d"), torch.zeros([1] * 9)) == INVALID_PARAMS
    assert store.put_tensor(K("list"), [1, 2, 3]) == INVALID_PARAMS
    assert store.get_tensor(K("miss")) is None
    kb = K("bytes")
    assert store.put(kb, b"not a tensor object") == 0
    assert store.get_tensor(kb) is None


def test_batch_put_get_tensor(store):
    keys = [K(f"bt{i}") for i in range(4)]
    ts = [sample(d) for d in DTYPES]
    assert store.batch_put_tensor(keys, ts) == [0] * 4
    got = store.batch_get_tensor(keys + [K("miss")])
    assert all(same(g, t) for g, t in zip(got, ts)) and got[4] is None
    assert store.batch_put_tensor(keys, ts[:2]) == [INVALID_PARAMS] * 4
    bad = store.batch_put_tensor([K("ok"), K("bad")],
                                 [ts[0], torch.zeros(2, dtype=torch.complex64)])
    assert bad == [0, INVALID_PARAMS]
    assert store.batch_get_tensor([]) == [] and store.batch_put_tensor([], []) == []


def test_pub_tensor_with_config(store, peer):
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    k = K("pub")
    t = sample(torch.bfloat16)
    assert store.pub_tensor(k, t, cfg) == 0
    assert len(store.get_replica_desc(k)) == 2
    assert same(store.get_tensor(k), t)
    keys = [K("bpub0"), K("bpub1")]
    assert store.batch_pub_tensor(keys, [t, t], config=cfg) == [0, 0]
    assert all(len(store.get_replica_desc(k)) == 2 for k in keys)
    with pytest.raises(TypeError, match="config"):
        store.pub_tensor(K("x"), t, "cfg")


@pytest.mark.parametrize("tp_size,split_dim", [(2, 0), (4, 0), (2, 1), (3, 1)])
def test_put_tensor_with_tp(store, peer, tp_size, split_dim):
    k = K("tp")
    t = sample(torch.float16, (12, 6))
    assert store.put_tensor_with_tp(k, t, tp_rank=0, tp_size=tp_size, split_dim=split_dim) == 0
    chunks = t.chunk(tp_size, dim=split_dim)
    for r in range(tp_size):
        shard = store.get_tensor_with_tp(k, tp_rank=r, tp_size=tp_size, split_dim=split_dim)
        assert same(shard, chunks[r].contiguous()), r
        assert same(store.get_tensor(f"{k}_tp_{r}"), chunks[r].contiguous())
        hdr = codec.parse_header(store.get(f"{k}_tp_{r}"))
        assert hdr.layout_kind == codec.LAYOUT_SHARD and hdr.global_shape == (12, 6)
    assert store.get_tensor(k) is None                  # no object under the base key
    assert store.get_tensor_with_tp(k, tp_rank=tp_size, tp_size=tp_size) is None
    # the other process reads its shard
    raw = peer.call("get", f"{k}_tp_1")
    assert same(codec.decode(raw), chunks[1].contiguous())


def test_tp_edge_cases(store):
    t = sample(torch.float32, (5, 4))
    assert store.put_tensor_with_tp(K("uneven"), t, tp_size=2, split_dim=0) == INVALID_PARAMS
    assert store.put_tensor_with_tp(K("dim"), t, tp_size=2, split_dim=5) == INVALID_PARAMS
    assert store.put_tensor_with_tp(K("huge"), t, tp_size=2 ** 30) == INVALID_PARAMS
    assert store.batch_put_tensor_with_tp([K("huge")], [t], tp_size=2 ** 30) == [INVALID_PARAMS]
    k = K("tp1")
    assert store.put_tensor_with_tp(k, t, tp_rank=0, tp_size=1) == 0   # plain put_tensor
    assert same(store.get_tensor(k), t)
    assert same(store.get_tensor_with_tp(k), t)
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    k2 = K("pubtp")
    assert store.pub_tensor_with_tp(k2, sample(torch.int64, (4, 2)), cfg, tp_size=2) == 0
    assert len(store.get_replica_desc(f"{k2}_tp_0")) == 2
    with pytest.raises(TypeError, match="tp_size"):
        store.put_tensor_with_tp(K("x"), t, tp_size="2")


def test_batch_tp(store):
    base = [K("btp0"), K("btp1"), K("btp2")]
    ts = [sample(torch.float32, (8, 4)), sample(torch.int64, (4, 4)),
          sample(torch.float32, (3, 4))]                         # the last one is uneven
    assert store.batch_put_tensor_with_tp(base, ts, tp_size=2) == [0, 0, INVALID_PARAMS]
    for r in range(2):
        got = store.batch_get_tensor_with_tp(base, tp_rank=r, tp_size=2)
        assert same(got[0], ts[0].chunk(2)[r]) and same(got[1], ts[1].chunk(2)[r])
        assert got[2] is None
    cfg = ReplicateConfig()
    assert store.batch_pub_tensor_with_tp(base[:1], ts[:1], cfg, tp_size=4,
                                          split_dim=1) == [0]
    got = store.batch_get_tensor_with_tp(base[:1], tp_rank=3, tp_size=4)
    assert same(got[0], ts[0].chunk(4, dim=1)[3].contiguous())


def test_get_tensor_into_zero_copy(store):
    k = K("into")
    t = sample(torch.float32, (16, 16))
    assert store.put_tensor(k, t) == 0
    b, p = buffer(8192)
    assert store.register_buffer(p, 8192) == 0
    try:
        got = store.get_tensor_into(k, p, 8192)
        assert same(got, t)
        assert p <= got.data_ptr() < p + 8192              # a view of the caller's buffer
        assert store.get_tensor_into(K("miss"), p, 8192) is None
        small, ps = buffer(100)
        assert store.get_tensor_into(k, ps, 100) is None
        b2, p2 = buffer(8192)
        res = store.batch_get_tensor_into([k, K("miss")], [p, p2], [8192, 8192])
        assert same(res[0], t) and res[1] is None
        assert store.batch_get_tensor_into([k], [p, p2], [1]) == [INVALID_PARAMS]
    finally:
        store.unregister_buffer(p)


def test_get_tensor_with_tp_into(store):
    k = K("tpinto")
    t = sample(torch.bfloat16, (8, 6))
    assert store.put_tensor_with_tp(k, t, tp_size=2, split_dim=1) == 0
    b0, p0 = buffer(4096)
    b1, p1 = buffer(4096)
    s0 = store.get_tensor_with_tp_into(k, p0, 4096, tp_rank=0, tp_size=2, split_dim=1)
    assert same(s0, t.chunk(2, dim=1)[0].contiguous())
    res = store.batch_get_tensor_with_tp_into([k, k], [p0, p1], [4096, 4096], tp_rank=1,
                                              tp_size=2)
    assert all(same(x, t.chunk(2, dim=1)[1].contiguous()) for x in res)


def object_buffer(t):
    """A ctypes buffer holding [header][data] of t, and its size."""
    raw = codec.encode_bytes(t)
    b = ctypes.create_string_buffer(raw, len(raw))
    return b, ctypes.addressof(b), len(raw)


def test_put_tensor_from_buffers(store):
    t = sample(torch.int64, (5, 3))
    b, p, n = object_buffer(t)
    k = K("from")
    assert store.put_tensor_from(k, p, n) == 0
    assert same(store.get_tensor(k), t)
    assert store.put_tensor_from(K("short"), p, n - 1) == INVALID_PARAMS
    junk = ctypes.create_string_buffer(b"x" * 400, 400)
    assert store.put_tensor_from(K("junk"), ctypes.addressof(junk), 400) == INVALID_PARAMS
    keys = [K("bf0"), K("bf1")]
    t2 = sample(torch.float16, (2, 2))
    b2, p2, n2 = object_buffer(t2)
    assert store.batch_put_tensor_from(keys, [p, p2], [n, n2]) == [0, 0]
    assert same(store.get_tensor(keys[1]), t2)
    bad = store.batch_put_tensor_from([K("x"), K("y")], [p, ctypes.addressof(junk)], [n, 400])
    assert bad == [INVALID_PARAMS] * 2
    assert store.batch_put_tensor_from(keys, [p], [n]) == [INVALID_PARAMS] * 2


def test_put_tensor_with_tp_from(store):
    t = sample(torch.float32, (8, 4))
    b, p, n = object_buffer(t)
    k = K("tpfrom")
    assert store.put_tensor_with_tp_from(k, p, n, tp_rank=1, tp_size=2, split_dim=0) == 0
    for r in range(2):
        assert same(store.get_tensor_with_tp(k, r, 2), t.chunk(2)[r])
    # a buffer that already holds shard 1 is stored as that shard
    shard = store.get(f"{k}_tp_1")
    sb = ctypes.create_string_buffer(shard, len(shard))
    k2 = K("tpfrom-shard")
    assert store.put_tensor_with_tp_from(k2, ctypes.addressof(sb), len(shard), tp_rank=1,
                                         tp_size=2) == 0
    assert same(store.get_tensor_with_tp(k2, 1, 2), t.chunk(2)[1])
    base = [K("btpf0"), K("btpf1")]
    assert store.batch_put_tensor_with_tp_from(base, [p, p], [n, n], tp_size=4) == [0, 0]
    assert same(store.batch_get_tensor_with_tp(base, tp_rank=3, tp_size=4)[1], t.chunk(4)[3])


def test_upsert_tensor_family(store):
    # reads grant a lease; an upsert under a lease takes new space (issue 10 fault 6)
    a, b = sample(torch.float32, (3, 3)), sample(torch.float32, (3, 3)) + 1
    c = sample(torch.int64, (2,))
    buf, p, n = object_buffer(c)
    k, k2 = K("ut"), K("utf")
    assert store.upsert_tensor(k, a) == 0
    assert store.upsert_tensor(k, b) == 0
    assert store.upsert_tensor(k2, a) == 0
    assert store.upsert_tensor_from(k2, p, n) == 0
    keys, keys2, keys3 = [K("ubt0"), K("ubt1")], [K("ubf0"), K("ubf1")], [K("upb0"), K("upb1")]
    assert store.batch_upsert_tensor(keys, [a, b]) == [0, 0]
    assert store.batch_upsert_tensor(keys, [b, a]) == [0, 0]
    assert store.batch_upsert_tensor(keys2, [a, b]) == [0, 0]
    assert store.batch_upsert_tensor_from(keys2, [p, p], [n, n]) == [0, 0]
    cfg = ReplicateConfig()
    k3 = K("upt")
    assert store.upsert_pub_tensor(k3, a, cfg) == 0
    assert store.upsert_pub_tensor(k3, c, cfg) == 0
    assert store.batch_upsert_pub_tensor(keys3, [a, a], cfg) == [0, 0]
    assert store.batch_upsert_pub_tensor(keys3, [b, c], cfg) == [0, 0]
    assert same(store.get_tensor(k), b) and same(store.get_tensor(k2), c)
    assert [same(x, y) for x, y in zip(store.batch_get_tensor(keys), [b, a])] == [True] * 2
    assert [same(x, c) for x in store.batch_get_tensor(keys2)] == [True] * 2
    assert same(store.get_tensor(k3), c)
    assert [same(x, y) for x, y in zip(store.batch_get_tensor(keys3), [b, c])] == [True] * 2
    # leased by the read: new space, as upstream (issue 10 fault 6; was -706)
    assert store.upsert_tensor(k, a) == 0
    assert same(store.get_tensor(k), a)


def test_module_tensor_helpers():
    t = sample(torch.bfloat16, (3, 5))
    assert ms._tensor_metadata_size() == 304
    header, ptr, nbytes, owner = ms._serialize_tensor(t)
    assert len(header) == 304 and nbytes == 30 and ptr == owner.data_ptr()
    payload = header + ctypes.string_at(ptr, nbytes)
    assert same(ms._deserialize_tensor(payload), t)
    with pytest.raises(ValueError):
        ms._deserialize_tensor(b"short")


def test_not_set_up_tensor_conventions():
    s = MooncakeDistributedStore()
    t = sample(torch.float32)
    assert s.put_tensor("k", t) == INVALID_PARAMS
    assert s.get_tensor("k") is None
    assert s.batch_get_tensor(["a", "b"]) == [None, None]
    assert s.batch_put_tensor(["a"], [t]) == [INVALID_PARAMS]
    assert s.batch_get_tensor_into(["a", "b"], [1, 2], [3, 4]) == [INVALID_PARAMS] * 2
    assert s.put_tensor_from("k", 4096, 400) == INVALID_PARAMS


def test_without_torch_tensor_calls_raise_import_error(cluster):
    code = r"""
import sys
sys.modules["torch"] = None            # torch cannot be imported
import mooncake.store as ms
s = ms.MooncakeDistributedStore()
assert s.setup(*ARGS) == 0
assert s.put("no-torch", b"bytes still work") == 0 and s.get("no-torch") == b"bytes still work"
for call in (lambda: s.put_tensor("k", object()), lambda: s.get_tensor("no-torch")):
    try:
        call()
    except ImportError as e:
        assert "pip install torch" in str(e), e
    else:
        raise AssertionError("no ImportError")
s.close()
print("OK")
""".replace("ARGS", repr(cluster.setup_args()))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, MC_LOG_LEVEL="warn"))
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
