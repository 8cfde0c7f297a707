"""The Python-written methods of MooncakeDistributedStore (mooncake/_store_extras.py)
against a real mooncake_master and a second client process: the unified parallel tensor
IO (*_tensor_with_parallelism*, ParallelAxis / TensorParallelism / ReadTarget), the
safetensors helpers, the CUDA-only readers on a machine without CUDA, and the allocator
hooks get_alloc_func_addr / get_free_func_addr."""
import ctypes
import json
import struct
import uuid

import pytest

torch = pytest.importorskip("torch")  # the venv installs the CPU build; see setup.sh

import mooncake.store as ms  # noqa: E402
from mooncake import _tensor_codec as codec  # noqa: E402
from mooncake.store import (ParallelAxis, ReadTarget,  # noqa: E402
                            ReplicateConfig, TensorParallelism)

INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8,
          torch.uint8, torch.float64, torch.bool]


def K(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


def sample(dtype, shape=(8, 6), seed=7):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g,
                         dtype=dtype)


def same(a, b):
    return a is not None and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def tp(rank, size, split_dim=0):
    return TensorParallelism([ParallelAxis("tp", rank, size, split_dim)])


# ---- unified parallel tensor IO ----


def test_full_tensor_round_trip(store, peer):
    k = K("full")
    t = sample(torch.float32)
    assert store.put_tensor_with_parallelism(k, t) == 0
    assert same(store.get_tensor_with_parallelism(k), t)
    assert same(store.get_tensor_with_parallelism(k, ReadTarget("full")), t)
    assert same(store.get_tensor_with_parallelism(k, ReadTarget("as_stored")), t)
    # the plain object: any client reads it with get_tensor
    assert same(store.get_tensor(k), t)


@pytest.mark.parametrize("size,dim", [(2, 0), (4, 0), (3, 1)])
def test_tp_shards_written_by_each_rank(store, peer, size, dim):
    k = K("tp")
    full = sample(torch.bfloat16, (12, 6))
    shards = list(torch.chunk(full, size, dim=dim))
    # each rank writes its own shard (legacy TP key, as upstream's put_tensor_with_tp)
    res = store.batch_put_tensor_with_parallelism([k] * size, shards,
                                                  [tp(r, size, dim) for r in range(size)])
    assert res == [0] * size
    for r in range(size):
        assert store.is_exist(f"{k}_tp_{r}") == 1
        got = store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(r, size, dim)))
        assert same(got, shards[r].contiguous())
        # the compatibility TP reader sees the same object
        assert same(store.get_tensor_with_tp(k, tp_rank=r, tp_size=size), shards[r].contiguous())
    assert same(store.get_tensor_with_parallelism(k, ReadTarget("full")), full)
    # re-sharding: another TP size from the reconstructed tensor
    if full.shape[dim] % 2 == 0 and size != 2:
        got = store.get_tensor_with_parallelism(k, ReadTarget("shard", tp(1, 2, dim)))
        assert same(got, torch.chunk(full, 2, dim=dim)[1].contiguous())


def test_multi_axis_and_writer_partition(store):
    k = K("pp_tp")
    full = sample(torch.float16, (8, 4))
    for r in range(2):  # PP stage 1, TP rank r: the full tensor in, the TP shard stored
        par = TensorParallelism([ParallelAxis("pp", 1, 2, stage_id=1),
                                 ParallelAxis("TP", r, 2, 0)])
        assert store.put_tensor_with_parallelism(k, full, par) == 0
        assert store.is_exist(f"{k}_pp_1_tp_{r}") == 1
    tgt = ReadTarget("shard", TensorParallelism([ParallelAxis("pp", 1, 2),
                                                 ParallelAxis("tp", 1, 2)]))
    assert same(store.get_tensor_with_parallelism(k, tgt), full[4:].contiguous())
    tgt_full = ReadTarget("full", TensorParallelism([ParallelAxis("pp", 1, 2)]))
    assert same(store.get_tensor_with_parallelism(k, tgt_full), full)
    # writer_partition: the full tensor in, that writer's shard out
    kw = K("wp")
    res = store.batch_put_tensor_with_parallelism([kw, kw], [full, full],
                                                  writer_partitions=[(0, 2, 1), (1, 2, 1)])
    assert res == [0, 0]
    assert same(store.get_tensor_with_parallelism(kw, ReadTarget("full")), full)
    assert same(store.get_tensor_with_parallelism(kw, ReadTarget("shard", tp(0, 2, 1))),
                full[:, :2].contiguous())


def test_refusals_and_misses(store):
    t = sample(torch.float32)
    assert store.put_tensor_with_parallelism(K("bad"), t, tp(2, 2)) == INVALID_PARAMS
    bad_kind = TensorParallelism([ParallelAxis("xp", 0, 1)])
    assert store.put_tensor_with_parallelism(K("bad"), t, bad_kind) == INVALID_PARAMS
    assert store.put_tensor_with_parallelism(K("bad"), [1, 2]) == INVALID_PARAMS
    # 5 rows do not split into 2 uniform shards (multi-axis materialises the shard)
    par = TensorParallelism([ParallelAxis("dp", 0, 1), ParallelAxis("tp", 0, 2)])
    assert store.put_tensor_with_parallelism(K("bad"), sample(torch.float32, (5, 2)),
                                             par) == INVALID_PARAMS
    assert store.batch_put_tensor_with_parallelism([K("a"), K("b")], [t]) == [INVALID_PARAMS] * 2
    assert store.get_tensor_with_parallelism(K("miss")) is None
    assert store.get_tensor_with_parallelism(K("miss"), ReadTarget("full")) is None
    assert store.get_tensor_with_parallelism(K("miss"), ReadTarget("shard", tp(0, 2))) is None
    with pytest.raises(TypeError):
        store.get_tensor_with_parallelism()


def test_upsert_from_and_into(store, peer):
    k = K("up")
    t1, t2 = sample(torch.float32, seed=1), sample(torch.float32, seed=2)
    assert store.upsert_tensor_with_parallelism(k, t1) == 0
    assert store.upsert_tensor_with_parallelism(k, t2) == 0
    assert same(store.get_tensor_with_parallelism(k), t2)
    # _from: the tensor object [header][data] in caller memory
    obj = codec.encode_bytes(t1)
    buf = ctypes.create_string_buffer(obj, len(obj))
    kf = K("from")
    assert store.put_tensor_with_parallelism_from(kf, ctypes.addressof(buf), len(obj)) == 0
    assert same(store.get_tensor(kf), t1)
    kf2 = K("upfrom")  # (kf was just read: its lease refuses an upsert, -706)
    assert store.batch_upsert_tensor_with_parallelism_from(
        [kf2], [ctypes.addressof(buf)], [len(obj)]) == [0]
    assert same(store.get_tensor(kf2), t1)
    assert store.put_tensor_with_parallelism_from(K("junk"), ctypes.addressof(buf), 10) == \
        INVALID_PARAMS
    kb = K("bfrom")
    assert store.batch_put_tensor_with_parallelism_from(
        [kb, kb], [ctypes.addressof(buf)] * 2, [len(obj)] * 2,
        writer_partitions=[(0, 2, 0), (1, 2, 0)]) == [0, 0]
    assert same(store.get_tensor_with_parallelism(kb, ReadTarget("full")), t1)
    assert store.batch_upsert_tensor_with_parallelism([K("bup")], [t2]) == [0]
    # _into: the object lands in the caller's buffer; the result views it
    out = ctypes.create_string_buffer(1 << 16)
    got = store.get_tensor_with_parallelism_into(k, ctypes.addressof(out), len(out))
    assert same(got, t2) and out.raw[:4] == b"NOOM"
    got = store.get_tensor_with_parallelism_into(kb, ctypes.addressof(out), len(out),
                                                 ReadTarget("full"))
    assert same(got, t1)
    outs = [ctypes.create_string_buffer(1 << 16) for _ in range(2)]
    got = store.batch_get_tensor_with_parallelism_into(
        [k, kb], [ctypes.addressof(b) for b in outs], [1 << 16] * 2,
        [None, ReadTarget("full")])
    assert same(got[0], t2) and same(got[1], t1)
    assert store.get_tensor_with_parallelism_into(k, ctypes.addressof(out), 16) is None
    got = store.batch_get_tensor_with_parallelism([k, kb, K("miss")],
                                                  [None, ReadTarget("full"), None])
    assert same(got[0], t2) and same(got[1], t1) and got[2] is None
    # the peer process reads the same objects with the plain tensor API
    assert peer.call("get", k) == codec.encode_bytes(t2)


# ---- safetensors ----


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_safetensors_round_trip(store, tmp_path, dtype):
    k = K("st")
    t = sample(dtype, (3, 5))
    assert store.put_tensor(k, t) == 0
    path = tmp_path / "w.safetensors"
    assert store.save_tensor_to_safetensor(k, str(path)) == 0
    # the file is a safetensors file: u64 header length, JSON header, data
    blob = path.read_bytes()
    (n,) = struct.unpack_from("<Q", blob)
    hdr = json.loads(blob[8:8 + n])
    assert hdr[k]["shape"] == [3, 5] and (8 + n) % 8 == 0
    assert blob[8 + n:] == t.contiguous().view(torch.uint8).numpy().tobytes()
    k2 = K("st2")
    assert store.load_tensor_from_safetensor(k2, str(path)) == 0  # first tensor, warned
    assert same(store.get_tensor(k2), t)
    assert store.load_tensor_from_safetensor(file_name=str(path)) == 0  # key = file name
    assert same(store.get_tensor(str(path)), t)
    try:
        from safetensors.torch import load_file  # cross-check when the package is present
    except ImportError:
        return
    assert same(load_file(str(path))[k], t)


def test_safetensors_errors(store, tmp_path):
    assert store.save_tensor_to_safetensor(K("none"), str(tmp_path / "x")) == OBJECT_NOT_FOUND
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 16)
    assert store.load_tensor_from_safetensor(K("k"), str(bad)) == -1
    assert store.load_tensor_from_safetensor(K("k"), str(tmp_path / "missing")) == -1


# ---- CUDA-only readers, allocator hooks ----


def test_cuda_only_readers_fail_clearly(store):
    if torch.cuda.is_available():
        pytest.skip("this test is for machines without CUDA")
    with pytest.raises(RuntimeError, match="CUDA"):
        store.get_tensor_into_cuda(K("k"), torch.zeros(4))
    with pytest.raises(RuntimeError, match="CUDA"):
        store.batch_get_tensor_into_cuda([K("k")], [torch.zeros(4)])


def test_alloc_free_hooks_give_registrable_host_memory(store):
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(ms.get_alloc_func_addr())
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ms.get_free_func_addr())
    p = alloc(1 << 16)
    assert p and p % 4096 == 0
    try:
        assert store.register_buffer(p, 1 << 16) == 0
        k = K("hook")
        assert store.put(k, b"q" * 4096) == 0
        assert store.get_into(k, p, 1 << 16) == 4096
        assert ctypes.string_at(p, 4096) == b"q" * 4096
        assert store.unregister_buffer(p) == 0
    finally:
        free(p)
    assert alloc(0) is None
