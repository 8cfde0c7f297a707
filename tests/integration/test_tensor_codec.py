"""mooncake._tensor_codec: upstream's 304-byte tensor object header, byte for byte, and the
put_tensor/get_tensor/*_with_tp semantics built on it (store tests skip until
mooncake.store has MooncakeDistributedStore)."""
import ctypes
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from mooncake import _tensor_codec as codec  # noqa: E402
from mooncake._tensor_codec import TensorCodecError  # noqa: E402
from mc_real_store import needs_store, real_store  # noqa: E402,F401


def hexb(s):
    return bytes.fromhex("".join(s.split()))


NONE8 = "ff" * 8 * 6          # six unused dims (-1)
ZERO_AXIS = "00" * 32

# Expected headers, written out by hand from upstream's layout
# (mooncake-integration/integration_utils.h TensorObjectHeader/TensorLayoutMetadata/
# LayoutAxis, BuildTensorMetadata; store_py.cpp build_layout_axis_from_spec; the table is
# in the module docstring of mooncake/_tensor_codec.py). Both were also checked equal to
# the bytes upstream mooncake-transfer-engine-non-cuda 0.3.13.post1 produces
# (_serialize_tensor, and store.get() of a put_tensor_with_tp shard).
F32_2x3_HEADER = hexb(
    "4e4f4f4d" "0100" "3001"          # magic "NOOM", version 1, header_size 304
    "00000000" "02000000"             # dtype FLOAT32 (0), ndim 2
    "00000000" "00000000"             # layout FULL, reserved_flags
    "3001000000000000"                # data_offset 304
    "1800000000000000"                # data_bytes 24
    "0200000000000000" "0300000000000000" + NONE8 +   # global_shape (2, 3)
    "0200000000000000" "0300000000000000" + NONE8 +   # local_shape (2, 3)
    "00000000" "00000000" +           # axis_count 0, reserved0
    ZERO_AXIS * 4)
BF16_TP_SHARD_HEADER = hexb(          # rank 2 of 4 of a (4, 6) bfloat16 split on dim 0
    "4e4f4f4d" "0100" "3001"
    "0c000000" "02000000"             # dtype BFLOAT16 (12), ndim 2
    "01000000" "00000000"             # layout SHARD
    "3001000000000000"
    "0c00000000000000"                # data_bytes 1 * 6 * 2 = 12
    "0400000000000000" "0600000000000000" + NONE8 +   # global_shape (4, 6)
    "0100000000000000" "0600000000000000" + NONE8 +   # local_shape (1, 6)
    "01000000" "00000000" +           # axis_count 1
    "01000000" "00000000" "02000000" "04000000"       # TP, axis_index 0, rank 2, count 4
    "00000000" "00000000" "0100000000000000" +        # split_dim 0, reserved0, extent 1
    ZERO_AXIS * 3)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.float64,
          torch.int8, torch.uint8, torch.int16, torch.int32, torch.bool, torch.uint16,
          torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2]
CODES = {torch.float32: 0, torch.float64: 1, torch.int8: 2, torch.uint8: 3, torch.int16: 4,
         torch.uint16: 5, torch.int32: 6, torch.uint32: 7, torch.int64: 8, torch.uint64: 9,
         torch.bool: 10, torch.float16: 11, torch.bfloat16: 12, torch.float8_e4m3fn: 13,
         torch.float8_e5m2: 14}


def sample(dtype, shape=(3, 5), seed=1):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (int(torch.tensor(shape).prod()) * dtype.itemsize,),
                        dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def same_bits(a, b):
    """Bit-exact equality (NaN payloads included) of two tensors."""
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                            b.contiguous().reshape(-1).view(torch.uint8)))


# ------------------------------------------------------------------------ exact bytes
def test_full_header_bytes():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    header, payload, nbytes = codec.encode(t)
    assert len(header) == codec.HEADER_SIZE == codec.tensor_metadata_size() == 304
    assert header == F32_2x3_HEADER
    assert nbytes == 24 and payload.tobytes() == t.numpy().tobytes()
    assert codec.encode_bytes(t) == F32_2x3_HEADER + t.numpy().tobytes()


def test_tp_shard_header_bytes():
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6).to(torch.bfloat16)
    header, payload, nbytes = codec.encode_tp_shard(t, 2, 4, 0)
    assert header == BF16_TP_SHARD_HEADER
    assert nbytes == 12 and payload.tobytes() == t[2:3].contiguous().view(torch.uint8).numpy().tobytes()


def test_serialize_mirrors_upstream_contract():
    t = torch.arange(10, dtype=torch.int64)
    header, ptr, nbytes, owner = codec.serialize(t)
    assert header[:4] == b"NOOM" and nbytes == 80 and owner.data_ptr() == ptr
    assert ctypes.string_at(ptr, nbytes) == t.numpy().tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtype_codes(dtype):
    hdr = codec.parse_header(codec.encode_bytes(sample(dtype)))
    assert hdr.dtype == CODES[dtype] and hdr.element_size == dtype.itemsize


# ------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (0,), (0, 3), (2, 0, 4),
                                   (2,) * 8], ids=str)
def test_round_trip(dtype, shape):
    t = sample(dtype, shape)
    obj = codec.encode_bytes(t)
    assert len(obj) == 304 + t.numel() * dtype.itemsize
    back = codec.decode(obj)
    assert back.shape == t.shape and same_bits(back, t)
    assert back.data_ptr() != t.data_ptr() or t.numel() == 0


def test_round_trip_through_every_buffer_kind():
    t = sample(torch.float16, (4, 4))
    obj = codec.encode_bytes(t)
    for buf in (obj, bytearray(obj), memoryview(obj), torch.frombuffer(bytearray(obj),
                                                                       dtype=torch.uint8).numpy()):
        assert same_bits(codec.decode(buf), t)


@pytest.mark.parametrize("make", [
    lambda: torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
    lambda: torch.arange(40, dtype=torch.int64).reshape(5, 8)[::2, 1::3],
    lambda: torch.arange(24, dtype=torch.bfloat16).reshape(2, 3, 4).permute(2, 0, 1),
    lambda: torch.arange(6, dtype=torch.float32).expand(3, 6),
    lambda: torch._neg_view(torch.arange(6, dtype=torch.float32)),
], ids=["transpose", "strided", "permute", "expand", "neg_view"])
def test_non_contiguous_inputs(make):
    t = make()
    assert not t.is_contiguous() or t.is_neg()
    back = codec.decode(codec.encode_bytes(t))
    assert torch.equal(back, t) and back.is_contiguous()


def test_requires_grad_input():
    t = torch.ones(3, requires_grad=True)
    assert torch.equal(codec.decode(codec.encode_bytes(t)), torch.ones(3))


def test_payload_keeps_tensor_alive():
    header, payload, nbytes = codec.encode(torch.arange(1000, dtype=torch.int32) * 3)
    import gc
    gc.collect()
    assert torch.equal(torch.frombuffer(bytearray(payload), dtype=torch.int32),
                       torch.arange(1000, dtype=torch.int32) * 3)


def test_data_offset_beyond_304_is_honoured():
    t = torch.arange(4, dtype=torch.int32)
    obj = bytearray(codec.encode_bytes(t))
    pad = 16
    obj[24:32] = (304 + pad).to_bytes(8, "little")
    obj[304:304] = b"\xee" * pad
    assert torch.equal(codec.decode(bytes(obj)), t)


def test_total_len_limits_the_object():
    t = torch.arange(4, dtype=torch.int32)
    obj = codec.encode_bytes(t)
    assert torch.equal(codec.decode(obj + b"trailing", total_len=len(obj)), t)
    with pytest.raises(TensorCodecError, match="data_bytes"):
        codec.decode(obj + b"trailing")


# ------------------------------------------------------------------------- bad objects
def corrupt(offset, data):
    obj = bytearray(codec.encode_bytes(torch.arange(6, dtype=torch.float32).reshape(2, 3)))
    obj[offset:offset + len(data)] = data
    return bytes(obj)


@pytest.mark.parametrize("obj,match", [
    (b"", "too short"),
    (b"NOOM" + b"\0" * 200, "too short"),
    (corrupt(0, b"MOON"), "magic"),
    (corrupt(4, (2).to_bytes(2, "little")), "version"),
    (corrupt(6, (40).to_bytes(2, "little")), "version"),
    (corrupt(8, (15).to_bytes(4, "little")), "dtype"),
    (corrupt(8, (-1).to_bytes(4, "little", signed=True)), "dtype"),
    (corrupt(12, (9).to_bytes(4, "little")), "ndim"),
    (corrupt(16, (2).to_bytes(4, "little")), "layout_kind"),
    (corrupt(24, (100).to_bytes(8, "little")), "data_offset"),
    (corrupt(32, (20).to_bytes(8, "little")), "data_bytes"),
    (corrupt(40, (-2).to_bytes(8, "little", signed=True)), "dim"),
    (corrupt(40 + 2 * 8, (5).to_bytes(8, "little")), "beyond ndim"),
    (corrupt(104, (3).to_bytes(8, "little")), "elements"),
    (corrupt(168, (5).to_bytes(4, "little")), "axis_count"),
    (corrupt(168, (1).to_bytes(4, "little")), "axis rank"),
    (codec.encode_bytes(torch.arange(6, dtype=torch.float32))[:-1], "data_bytes"),
], ids=["empty", "short", "magic", "version", "header_size", "dtype15", "dtype-1", "ndim9",
        "layout", "offset", "data_bytes", "negdim", "dim-beyond-ndim", "local-shape",
        "axis_count", "axis-rank", "truncated"])
def test_invalid_objects(obj, match):
    with pytest.raises(TensorCodecError, match=match):
        codec.decode(obj)
    assert codec.try_decode(obj) is None


def test_invalid_axis_fields():
    good = codec.encode_tp_shard(torch.zeros(4, 2), 1, 2, 0)
    obj = bytearray(good[0] + good[1].tobytes())
    base = 176
    for off, val, match in [(0, 7, "kind"), (8, 2, "rank"), (12, 0, "rank"),
                            (16, 2, "split_dim"), (16, -2, "split_dim")]:
        bad = bytearray(obj)
        bad[base + off:base + off + 4] = val.to_bytes(4, "little", signed=True)
        with pytest.raises(TensorCodecError, match=match):
            codec.parse_header(bytes(bad))


def test_try_decode_none_and_non_buffer():
    assert codec.try_decode(None) is None
    assert codec.try_decode(b"") is None
    assert codec.try_decode(12345) is None


# ----------------------------------------------------------------------- bad tensors
@pytest.mark.parametrize("bad,match", [
    (torch.zeros(2, dtype=torch.complex64), "unsupported tensor dtype"),
    (torch.zeros([1] * 9), "at most 8"),
    (b"not a tensor", "expected a torch.Tensor"),
    (torch.zeros(3, 3).to_sparse(), "dense"),
], ids=["complex", "9-dims", "bytes", "sparse"])
def test_unencodable(bad, match):
    with pytest.raises(TensorCodecError, match=match):
        codec.encode(bad)
    with pytest.raises(ValueError):          # TensorCodecError is a ValueError
        codec.serialize(bad)


# --------------------------------------------------------------------------- TP split
def test_tp_keys():
    assert codec.tp_keys("w", 1) == ["w"] and codec.tp_keys("w", 0) == ["w"]
    assert codec.tp_keys("w", 3) == ["w_tp_0", "w_tp_1", "w_tp_2"]
    assert codec.tp_key("a/b", 7) == "a/b_tp_7"
    assert codec.tp_read_key("w", 5, 1) == "w"
    assert codec.tp_read_key("w", 1, 4) == "w_tp_1"
    with pytest.raises(TensorCodecError):
        codec.tp_read_key("w", 4, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64],
                         ids=str)
@pytest.mark.parametrize("shape,split_dim,tp", [((8, 6), 0, 4), ((8, 6), 1, 3),
                                                 ((2, 4, 6), 2, 2), ((5,), 0, 5),
                                                 ((0, 4), 1, 2), ((4, 0), 0, 2)])
def test_tp_split_reassembles(dtype, shape, split_dim, tp):
    t = sample(dtype, shape)
    parts = codec.encode_tp("key", t, tp, split_dim)
    assert [p[0] for p in parts] == codec.tp_keys("key", tp)
    shards = []
    for r, (key, header, payload, nbytes) in enumerate(parts):
        hdr = codec.parse_header(header + payload.tobytes())
        assert hdr.layout_kind == codec.LAYOUT_SHARD
        assert hdr.global_shape == tuple(shape)
        expect_local = list(shape)
        expect_local[split_dim] //= tp
        assert hdr.local_shape == tuple(expect_local)
        assert hdr.axes == (codec.LayoutAxis(codec.AXIS_TP, 0, r, tp, split_dim, 0,
                                             expect_local[split_dim]),)
        shard = codec.decode(header + payload.tobytes())
        assert same_bits(shard, codec.split_tp(t, r, tp, split_dim))
        shards.append(shard)
    assert same_bits(torch.cat(shards, dim=split_dim), t)


def test_tp_size_one_is_plain_put():
    t = sample(torch.float32, (4, 4))
    ((key, header, payload, _),) = codec.encode_tp("key", t, 1, 0)
    assert key == "key" and header + payload.tobytes() == codec.encode_bytes(t)


@pytest.mark.parametrize("shape,split_dim,tp,match", [
    ((6, 4), 0, 4, "uniform"), ((6, 4), 2, 2, "split_dim"), ((6, 4), -1, 2, "split_dim"),
    ((), 0, 2, "split_dim")])
def test_tp_bad_splits(shape, split_dim, tp, match):
    t = torch.zeros(shape)
    with pytest.raises(TensorCodecError, match=match):
        codec.encode_tp("k", t, tp, split_dim)
    with pytest.raises(TensorCodecError, match=match):
        codec.split_tp(t, 0, tp, split_dim)


def test_tp_bad_rank_and_types():
    t = torch.zeros(4, 4)
    for rank, size in [(4, 4), (-1, 4), (0, 0)]:
        with pytest.raises(TensorCodecError):
            codec.split_tp(t, rank, size, 0)
    with pytest.raises(TensorCodecError, match="int"):
        codec.encode_tp("k", t, 2.0, 0)
    with pytest.raises(TensorCodecError, match="int"):
        codec.split_tp(t, 0, 2, True)


@pytest.mark.parametrize("tp,split_dim", [(1, 0), (2, 0), (3, 1)])
def test_encode_tp_from_raw_object(tp, split_dim):
    t = sample(torch.bfloat16, (4, 6))
    obj = codec.encode_bytes(t)
    mem = torch.frombuffer(bytearray(obj), dtype=torch.uint8)
    got = codec.encode_tp_from("k", mem.data_ptr(), len(obj), tp, split_dim)
    want = codec.encode_tp("k", t, tp, split_dim)
    assert [(k, h, p.tobytes(), n) for k, h, p, n in got] == \
        [(k, h, p.tobytes(), n) for k, h, p, n in want]
    with pytest.raises(TensorCodecError):
        codec.encode_tp_from("k", mem.data_ptr(), len(obj) - 1, tp, split_dim)


# ------------------------------------------------------------------ decode_into / view_at
def test_decode_into():
    t = sample(torch.bfloat16, (3, 4))
    obj = codec.encode_bytes(t)
    out = torch.empty(12, dtype=torch.bfloat16)
    assert codec.decode_into(obj, out) is out
    assert same_bits(out.reshape(3, 4), t)


@pytest.mark.parametrize("out,match", [
    (torch.empty(12, dtype=torch.float16), "dtype"),
    (torch.empty(13, dtype=torch.bfloat16), "elements"),
    (torch.empty(24, dtype=torch.bfloat16)[::2], "contiguous"),
    ("not a tensor", "out must be"),
])
def test_decode_into_refuses(out, match):
    obj = codec.encode_bytes(sample(torch.bfloat16, (3, 4)))
    snapshot = out.clone() if isinstance(out, torch.Tensor) else None
    with pytest.raises(TensorCodecError, match=match):
        codec.decode_into(obj, out)
    if snapshot is not None:
        assert same_bits(out, snapshot)


def test_view_at_is_zero_copy():
    t = torch.arange(8, dtype=torch.float32)
    obj = codec.encode_bytes(t)
    mem = torch.zeros(len(obj) + 64, dtype=torch.uint8)          # caller's buffer
    mem[:len(obj)] = torch.frombuffer(bytearray(obj), dtype=torch.uint8)
    view = codec.view_at(mem.data_ptr(), len(obj))
    assert torch.equal(view, t)
    mem[304:308] = torch.tensor([42.0]).view(torch.uint8)
    assert view[0].item() == 42.0                                # shares the memory
    assert codec.header_at(mem.data_ptr(), len(obj)).local_shape == (8,)


def test_view_at_refuses_bad_memory():
    mem = torch.zeros(400, dtype=torch.uint8)
    with pytest.raises(TensorCodecError, match="magic"):
        codec.view_at(mem.data_ptr(), 400)
    with pytest.raises(TensorCodecError, match="null"):
        codec.view_at(0, 400)
    with pytest.raises(TensorCodecError, match="size"):
        codec.view_at(mem.data_ptr(), -1)
    with pytest.raises(TensorCodecError, match="too short"):
        codec.header_at(mem.data_ptr(), 10)


# ------------------------------------------------------------------------ without torch
def test_clear_import_error_without_torch():
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "import mooncake._tensor_codec as c\n"
        "print(c.HEADER_SIZE)\n"
        "try:\n"
        "    c.encode(object())\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "304", "ImportError: mooncake tensor API needs torch: pip install torch"]


def test_parse_header_needs_no_torch():
    obj = codec.encode_bytes(torch.arange(3, dtype=torch.int16))
    script = ("import sys; sys.modules['torch'] = None\n"
              "import mooncake._tensor_codec as c\n"
              "print(c.parse_header(sys.stdin.buffer.read()).local_shape)\n")
    r = subprocess.run([sys.executable, "-c", script], input=obj, capture_output=True,
                       cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == b"(3,)"


# ------------------------------------------------------- optional: upstream interpreter
UPSTREAM_PY = os.environ.get("MOONCAKE_UPSTREAM_PYTHON")


@pytest.mark.skipif(not UPSTREAM_PY, reason="set MOONCAKE_UPSTREAM_PYTHON to an interpreter "
                    "with upstream mooncake installed to compare against its serializer")
def test_matches_upstream_serializer():
    script = (
        "import sys, torch\n"
        "from mooncake.store import _serialize_tensor, _deserialize_tensor\n"
        "import ctypes\n"
        "for dt in ['float32','float16','bfloat16','int64','int8','bool','float64']:\n"
        "    t = torch.arange(24).reshape(2, 3, 4).to(getattr(torch, dt))\n"
        "    h, p, n, o = _serialize_tensor(t)\n"
        "    print((bytes(h) + ctypes.string_at(p, n)).hex())\n"
        "obj = bytes.fromhex(sys.stdin.read().strip())\n"
        "print(_deserialize_tensor(obj).tolist())\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(torch.__file__))] +
        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    ours_obj = codec.encode_bytes(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    r = subprocess.run([UPSTREAM_PY, "-c", script], input=ours_obj.hex(), capture_output=True,
                       text=True, cwd="/", env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    for dt, line in zip(['float32', 'float16', 'bfloat16', 'int64', 'int8', 'bool', 'float64'],
                        lines):
        t = torch.arange(24).reshape(2, 3, 4).to(getattr(torch, dt))
        assert codec.encode_bytes(t).hex() == line, dt
    assert r.stdout.strip().splitlines()[-1] == "[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]"


# ------------------------------------------------------------------ with the real store
@pytest.fixture
def store(real_store):
    return real_store


@needs_store
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64],
                         ids=str)
def test_store_put_get_tensor(store, dtype):
    t = sample(dtype, (16, 8))
    key = f"t-{dtype}"
    assert store.put_tensor(key, t) == 0
    assert same_bits(store.get_tensor(key), t)
    assert store.get(key) == codec.encode_bytes(t)      # the stored object is ours, exactly


@needs_store
def test_store_reads_objects_written_in_upstream_layout(store):
    t = sample(torch.bfloat16, (4, 6))
    assert store.put("raw", codec.encode_bytes(t)) == 0
    assert same_bits(store.get_tensor("raw"), t)
    assert store.put("junk", b"x" * 400) == 0
    assert store.get_tensor("junk") is None


@needs_store
def test_store_tensor_misses(store):
    t = torch.arange(4.0)
    assert store.get_tensor("missing") is None
    assert store.put_tensor("present", t) == 0
    got = store.batch_get_tensor(["present", "missing"])
    assert len(got) == 2 and torch.equal(got[0], t) and got[1] is None
    assert store.batch_put_tensor(["a", "b"], [t]) == [-600, -600]   # length mismatch


@needs_store
def test_store_tensor_with_tp(store):
    t = sample(torch.float32, (8, 6))
    assert store.put_tensor_with_tp("w", t, tp_rank=0, tp_size=2, split_dim=1) == 0
    for r in range(2):
        shard = store.get_tensor_with_tp("w", tp_rank=r, tp_size=2, split_dim=1)
        assert same_bits(shard, codec.split_tp(t, r, 2, 1))
        key, header, payload, _ = codec.encode_tp("w", t, 2, 1)[r]
        assert store.get(key) == header + payload.tobytes()
    assert store.put_tensor_with_tp("odd", t, tp_size=4, split_dim=1) == -600
    assert store.is_exist("odd_tp_0") == 0


@needs_store
def test_store_tensor_into_and_from(store):
    t = sample(torch.float16, (32, 4))
    obj = codec.encode_bytes(t)
    buf = torch.zeros(len(obj) + 128, dtype=torch.uint8)
    assert store.register_buffer(buf.data_ptr(), buf.numel()) == 0
    try:
        buf[:len(obj)] = torch.frombuffer(bytearray(obj), dtype=torch.uint8)
        assert store.put_tensor_from("from", buf.data_ptr(), len(obj)) == 0
        assert same_bits(store.get_tensor("from"), t)
        assert store.put_tensor_from("short", buf.data_ptr(), 100) == -600
        assert store.put_tensor_with_tp_from("tpf", buf.data_ptr(), len(obj), tp_rank=0,
                                             tp_size=2, split_dim=1) == 0
        for key, header, payload, _ in codec.encode_tp_from("tpf", buf.data_ptr(), len(obj),
                                                            2, 1):
            assert store.get(key) == header + payload.tobytes()
        buf.zero_()
        got = store.get_tensor_into("from", buf.data_ptr(), buf.numel())
        assert same_bits(got, t)
        assert got.data_ptr() == buf.data_ptr() + 304            # a view of the buffer
        assert store.get_tensor_into("from", buf.data_ptr(), 100) is None
    finally:
        store.unregister_buffer(buf.data_ptr())
