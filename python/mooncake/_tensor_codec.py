"""Tensor objects of the store's tensor API: upstream's 304-byte header + raw bytes.

Every tensor the store writes (``put_tensor``, ``batch_put_tensor``, ``pub_tensor*``,
``*_with_tp``, ``upsert_tensor*``) is one object ``[TensorMetadata][payload]`` and every
tensor read (``get_tensor``, ``batch_get_tensor``, ``*_tensor_into``, ``*_with_tp``)
parses it back. The layout is byte-identical to upstream's, so objects written by
upstream Mooncake (v0.3.12.post1 and later) decode here and ours decode there.

Layout (upstream ``mooncake-integration/integration_utils.h``: ``TensorObjectHeader``,
``TensorLayoutMetadata``, ``LayoutAxis``, ``BuildTensorMetadata``,
``ValidateTensorMetadata``; ``store_py.cpp``: ``build_full_tensor_metadata``,
``build_layout_axis_from_spec``, ``build_tp_shard_infos``; summarised in
``shared/reference/upstream-mooncake.md`` §3). All integers little-endian, no padding::

    offset size field
    TensorObjectHeader (40 bytes)
      0     4   u32 magic          0x4d4f4f4e (bytes 4e 4f 4f 4d, "NOOM")
      4     2   u16 version        1
      6     2   u16 header_size    304 = sizeof(TensorMetadata)
      8     4   i32 dtype          TensorDtype code (table DTYPE_CODES below)
     12     4   i32 ndim           0..8
     16     4   u32 layout_kind    0 FULL, 1 SHARD
     20     4   u32 reserved_flags 0
     24     8   u64 data_offset    304 (readers honour larger values)
     32     8   u64 data_bytes     object length - data_offset
    TensorLayoutMetadata (264 bytes)
     40    64   i64 global_shape[8]  dims of the whole tensor, unused dims -1
    104    64   i64 local_shape[8]   dims of this object's payload, unused dims -1
    168     4   u32 axis_count     0..4 (0 for FULL)
    172     4   u32 reserved0      0
    176   128   LayoutAxis axes[4], 32 bytes each, unused ones all zero:
                  i32 kind (DP 0, TP 1, EP 2, PP 3, RESERVED 4), i32 axis_index,
                  i32 shard_rank, i32 shard_count, i32 split_dim (-1 = none),
                  i32 reserved0 (EP expert_id / PP stage_id), i64 reserved1 (the
                  shard's extent along split_dim, when split_dim >= 0)
    304         payload: the tensor's bytes, C-contiguous, native little-endian

A plain tensor: layout FULL, global_shape == local_shape == shape, no axes. A TP shard
(``put_tensor_with_tp`` with tp_size > 1): layout SHARD, global_shape = the full shape,
local_shape = the shard's shape, one axis {TP, axis_index 0, rank, tp_size, split_dim,
0, shard extent}. Shards are stored under ``f"{key}_tp_{rank}"`` and only uniform splits
are allowed (``shape[split_dim] % tp_size == 0``), as upstream.

Functions the ``mooncake.store`` extension calls (all raise :class:`TensorCodecError`, a
``ValueError``, for bad input, which the store maps to INVALID_PARAMS (-600) on writes and
to ``None`` on reads; torch is imported on first use and a missing torch raises
``ImportError("mooncake tensor API needs torch: pip install torch")``):

- :func:`serialize` ``(tensor) -> (header: bytes, data_ptr: int, nbytes: int, owner)``
- :func:`encode` ``(tensor) -> (header: bytes, payload: memoryview, nbytes: int)``
- :func:`encode_tp` ``(key, tensor, tp_size, split_dim=0) -> [(key, header, payload, nbytes)]``
- :func:`encode_tp_from` ``(key, address, size, tp_size, split_dim=0)`` (same list)
- :func:`decode` / :func:`try_decode` ``(buf) -> Tensor`` (copy; ``try_`` gives ``None``)
- :func:`decode_into` ``(buf, out) -> out``
- :func:`view_at` ``(address, size) -> Tensor`` (zero-copy over ``[header][data]`` memory)
- :func:`parse_header` / :func:`header_at` (validation without torch)
- :func:`tp_key`, :func:`tp_keys`, :func:`tp_read_key`, :func:`split_tp`
"""
import ctypes
import struct
from typing import List, NamedTuple, Optional, Sequence, Tuple

__all__ = [
    "TensorCodecError", "TensorHeader", "LayoutAxis", "HEADER_SIZE", "TENSOR_MAGIC",
    "TENSOR_VERSION", "MAX_DIMS", "MAX_AXES", "LAYOUT_FULL", "LAYOUT_SHARD",
    "AXIS_DP", "AXIS_TP", "AXIS_EP", "AXIS_PP", "AXIS_RESERVED", "DTYPE_CODES",
    "DTYPE_SIZES", "tensor_metadata_size", "dtype_code", "torch_dtype",
    "parse_header", "header_at", "build_header", "serialize", "encode", "encode_bytes",
    "split_tp", "serialize_tp_shard", "encode_tp_shard", "encode_tp", "encode_tp_from",
    "decode",
    "try_decode", "decode_into", "view_at", "tp_key", "tp_keys", "tp_read_key",
]

TENSOR_MAGIC = 0x4D4F4F4E
TENSOR_VERSION = 1
MAX_DIMS = 8
MAX_AXES = 4
LAYOUT_FULL = 0
LAYOUT_SHARD = 1
AXIS_DP, AXIS_TP, AXIS_EP, AXIS_PP, AXIS_RESERVED = 0, 1, 2, 3, 4

_HDR = struct.Struct("<IHHiiIIQQ")            # TensorObjectHeader, 40 bytes
_SHAPES = struct.Struct("<8q8qII")            # global, local, axis_count, reserved0
_AXIS = struct.Struct("<iiiiiiq")             # LayoutAxis, 32 bytes
HEADER_SIZE = _HDR.size + _SHAPES.size + MAX_AXES * _AXIS.size
assert HEADER_SIZE == 304

#: upstream ``TensorDtype`` code -> torch dtype attribute name (``integration_utils.h``).
DTYPE_CODES = {
    0: "float32", 1: "float64", 2: "int8", 3: "uint8", 4: "int16", 5: "uint16",
    6: "int32", 7: "uint32", 8: "int64", 9: "uint64", 10: "bool", 11: "float16",
    12: "bfloat16", 13: "float8_e4m3fn", 14: "float8_e5m2",
}
#: element size in bytes for every code.
DTYPE_SIZES = {0: 4, 1: 8, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 4, 8: 8, 9: 8, 10: 1,
               11: 2, 12: 2, 13: 1, 14: 1}
_NR_DTYPES = 15

_TORCH = None
_DTYPE_TO_CODE = None
_CODE_TO_DTYPE = None


class TensorCodecError(ValueError):
    """A tensor cannot be encoded (unsupported dtype, > 8 dims, bad TP split, not a
    tensor) or a buffer is not a valid tensor object (bad header, short data, dtype or
    size mismatch with an ``out`` tensor)."""


def _torch():
    """Imports torch once; ``ImportError`` with an install hint when it is missing."""
    global _TORCH, _DTYPE_TO_CODE, _CODE_TO_DTYPE
    if _TORCH is None:
        try:
            import torch
        except ImportError as e:
            raise ImportError("mooncake tensor API needs torch: pip install torch") from e
        to_code, to_dtype = {}, {}
        for code, name in DTYPE_CODES.items():
            dt = getattr(torch, name, None)   # older torch lacks uint16/32/64, float8
            if dt is not None:
                to_code[dt] = code
                to_dtype[code] = dt
        _DTYPE_TO_CODE, _CODE_TO_DTYPE = to_code, to_dtype
        _TORCH = torch
    return _TORCH


def tensor_metadata_size() -> int:
    """Size of the header in bytes (304), as upstream ``_tensor_metadata_size()``."""
    return HEADER_SIZE


def dtype_code(dtype) -> int:
    """Upstream ``TensorDtype`` code of a torch dtype; ``TensorCodecError`` if the dtype
    has no code (complex, quantized, ...: upstream refuses those puts with -600)."""
    _torch()
    code = _DTYPE_TO_CODE.get(dtype)
    if code is None:
        raise TensorCodecError(f"unsupported tensor dtype {dtype} (supported: "
                               f"{', '.join(DTYPE_CODES.values())})")
    return code


def torch_dtype(code: int):
    """torch dtype of an upstream ``TensorDtype`` code; ``TensorCodecError`` if unknown."""
    _torch()
    dt = _CODE_TO_DTYPE.get(code)
    if dt is None:
        raise TensorCodecError(f"unknown or unsupported tensor dtype code {code}")
    return dt


# --------------------------------------------------------------------------------------
# Header


class LayoutAxis(NamedTuple):
    """One ``LayoutAxis`` record (32 bytes)."""
    kind: int
    axis_index: int
    shard_rank: int
    shard_count: int
    split_dim: int
    reserved0: int = 0
    reserved1: int = 0


class TensorHeader(NamedTuple):
    """A parsed, validated header. Shapes are tuples of ``ndim`` ints; ``axes`` holds
    the ``axis_count`` used axes."""
    dtype: int
    ndim: int
    layout_kind: int
    data_offset: int
    data_bytes: int
    global_shape: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    axes: Tuple[LayoutAxis, ...] = ()
    reserved_flags: int = 0

    @property
    def element_size(self) -> int:
        return DTYPE_SIZES[self.dtype]

    @property
    def total_bytes(self) -> int:
        """Length of the whole object: ``data_offset + data_bytes``."""
        return self.data_offset + self.data_bytes


def _prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _pad(shape: Sequence[int]) -> List[int]:
    return list(shape) + [-1] * (MAX_DIMS - len(shape))


def build_header(dtype: int, global_shape: Sequence[int], local_shape: Sequence[int],
                 data_bytes: int, layout_kind: int = LAYOUT_FULL,
                 axes: Sequence[LayoutAxis] = ()) -> bytes:
    """Packs a 304-byte header exactly as upstream ``BuildTensorMetadata`` does.

    ``dtype`` is a ``TensorDtype`` code, shapes are sequences of at most 8 non-negative
    ints of equal length, ``data_bytes`` the payload length in bytes, ``axes`` at most 4
    records. Raises ``TensorCodecError`` if the result would not pass validation.
    """
    ndim = len(global_shape)
    if ndim > MAX_DIMS or len(local_shape) != ndim:
        raise TensorCodecError(f"tensor has {ndim} dims; at most {MAX_DIMS} are supported")
    if len(axes) > MAX_AXES:
        raise TensorCodecError(f"at most {MAX_AXES} layout axes are supported")
    out = bytearray(HEADER_SIZE)
    _HDR.pack_into(out, 0, TENSOR_MAGIC, TENSOR_VERSION, HEADER_SIZE, dtype, ndim,
                   layout_kind, 0, HEADER_SIZE, data_bytes)
    _SHAPES.pack_into(out, _HDR.size, *_pad(global_shape), *_pad(local_shape), len(axes), 0)
    for i, ax in enumerate(axes):
        _AXIS.pack_into(out, _HDR.size + _SHAPES.size + i * _AXIS.size, *ax)
    header = bytes(out)
    _parse(memoryview(header), HEADER_SIZE + data_bytes, False)  # never emit what readers refuse
    return header


def parse_header(buf, total_len: Optional[int] = None) -> TensorHeader:
    """Parses and validates the header at the start of ``buf`` (any buffer: bytes,
    bytearray, memoryview, ``BufferHandle``, numpy array).

    ``total_len`` is the object's length in bytes (default ``len(buf)`` in bytes); it
    must not exceed the buffer. Checks, as upstream ``ValidateTensorMetadata`` (HEAD):
    magic, version 1, header_size 304, 0 <= dtype < 15, 0 <= ndim <= 8, axis_count <= 4,
    layout_kind <= 1, 304 <= data_offset <= total_len, data_bytes == total_len -
    data_offset, dims >= 0 below ndim and -1 above (both shapes), data_bytes ==
    prod(local_shape) * element size, and for each axis 0 <= kind <= 4,
    0 <= shard_rank < shard_count, -1 <= split_dim < ndim.
    Raises ``TensorCodecError`` naming the first failed check.
    """
    mv = _byte_view(buf)
    return _parse(mv, mv.nbytes if total_len is None else total_len, True)


def _parse(mv: memoryview, total_len: int, need_payload: bool) -> TensorHeader:
    avail = mv.nbytes
    if isinstance(total_len, bool) or not isinstance(total_len, int) or total_len < 0 or (
            need_payload and total_len > avail):
        raise TensorCodecError(f"object length {total_len!r} outside the buffer ({avail} bytes)")
    if total_len < HEADER_SIZE or avail < HEADER_SIZE:
        raise TensorCodecError(
            f"tensor object too short: {total_len} bytes < {HEADER_SIZE}-byte header")
    (magic, version, header_size, dtype, ndim, layout_kind, flags, data_offset,
     data_bytes) = _HDR.unpack_from(mv, 0)
    if magic != TENSOR_MAGIC:
        raise TensorCodecError(f"bad tensor magic 0x{magic:08x} (want 0x{TENSOR_MAGIC:08x})")
    if version != TENSOR_VERSION or header_size != HEADER_SIZE:
        raise TensorCodecError(f"unsupported tensor header version {version} size {header_size}")
    if not 0 <= dtype < _NR_DTYPES:
        raise TensorCodecError(f"bad tensor dtype code {dtype}")
    if not 0 <= ndim <= MAX_DIMS:
        raise TensorCodecError(f"bad tensor ndim {ndim}")
    vals = _SHAPES.unpack_from(mv, _HDR.size)
    gshape, lshape, axis_count = vals[:MAX_DIMS], vals[MAX_DIMS:2 * MAX_DIMS], vals[16]
    if axis_count > MAX_AXES:
        raise TensorCodecError(f"bad tensor axis_count {axis_count}")
    if layout_kind > LAYOUT_SHARD:
        raise TensorCodecError(f"bad tensor layout_kind {layout_kind}")
    if data_offset < HEADER_SIZE or data_offset > total_len:
        raise TensorCodecError(f"bad tensor data_offset {data_offset} (object {total_len} bytes)")
    if data_bytes != total_len - data_offset:
        raise TensorCodecError(
            f"tensor data_bytes {data_bytes} != object length {total_len} - offset {data_offset}")
    for i in range(MAX_DIMS):
        if i < ndim:
            if gshape[i] < 0 or lshape[i] < 0:
                raise TensorCodecError(f"bad tensor dim {i}: {gshape[i]}/{lshape[i]}")
        elif gshape[i] != -1 or lshape[i] != -1:
            raise TensorCodecError(f"tensor dim {i} beyond ndim {ndim} is not -1")
    local = tuple(lshape[:ndim])
    if data_bytes != _prod(local) * DTYPE_SIZES[dtype]:
        raise TensorCodecError(
            f"tensor data_bytes {data_bytes} != {_prod(local)} elements x "
            f"{DTYPE_SIZES[dtype]} bytes")
    axes = []
    for i in range(axis_count):
        ax = LayoutAxis(*_AXIS.unpack_from(mv, _HDR.size + _SHAPES.size + i * _AXIS.size))
        if not AXIS_DP <= ax.kind <= AXIS_RESERVED:
            raise TensorCodecError(f"bad layout axis kind {ax.kind}")
        if ax.shard_count <= 0 or not 0 <= ax.shard_rank < ax.shard_count:
            raise TensorCodecError(f"bad layout axis rank {ax.shard_rank}/{ax.shard_count}")
        if not -1 <= ax.split_dim < ndim:
            raise TensorCodecError(f"bad layout axis split_dim {ax.split_dim}")
        axes.append(ax)
    return TensorHeader(dtype, ndim, layout_kind, data_offset, data_bytes,
                        tuple(gshape[:ndim]), local, tuple(axes), flags)


def _raw_view(address: int, size: int) -> memoryview:
    """A writable byte memoryview of ``size`` bytes at ``address`` (borrowed memory)."""
    if not isinstance(address, int) or isinstance(address, bool) or address < 0:
        raise TensorCodecError(f"bad buffer address {address!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise TensorCodecError(f"bad buffer size {size!r}")
    if size == 0:
        return memoryview(bytearray())
    if address == 0:
        raise TensorCodecError("buffer pointer cannot be null")
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B")


def header_at(address: int, size: int) -> TensorHeader:
    """``parse_header`` of the ``size``-byte object at raw ``address`` (for
    ``put_tensor_from``/``*_tensor_with_tp_from``, which validate the caller's
    ``[header][data]`` buffer before storing it). The memory is borrowed."""
    return parse_header(_raw_view(address, size), size)


# --------------------------------------------------------------------------------------
# Encoding


def _prepare(tensor):
    """(contiguous CPU tensor, dtype code) for ``tensor``; ``TensorCodecError`` if it is
    not a dense torch tensor of a supported dtype with at most 8 dims."""
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise TensorCodecError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise TensorCodecError(f"only dense (strided) tensors are supported, got {tensor.layout}")
    code = dtype_code(tensor.dtype)
    if tensor.dim() > MAX_DIMS:
        raise TensorCodecError(
            f"tensor has {tensor.dim()} dims; at most {MAX_DIMS} are supported")
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_neg():
        t = t.resolve_neg()
    return t.contiguous(), code


def _payload_view(t, nbytes: int) -> memoryview:
    """A read-only byte memoryview of contiguous CPU tensor ``t`` that keeps ``t``
    alive for as long as the view (or anything exported from it) lives."""
    if nbytes == 0:
        return memoryview(b"")
    arr = (ctypes.c_char * nbytes).from_address(t.data_ptr())
    arr._mc_owner = t      # the ctypes array keeps the tensor's storage alive
    return memoryview(arr).cast("B").toreadonly()


def serialize(tensor) -> Tuple[bytes, int, int, object]:
    """Header and payload location of ``tensor`` as a FULL object, without copying.

    Returns ``(header, data_ptr, nbytes, owner)``: ``header`` is the 304-byte header,
    ``data_ptr`` the address of the C-contiguous CPU payload (0 when ``nbytes`` is 0),
    ``nbytes`` = numel * element size, ``owner`` the tensor that owns that memory (the
    caller keeps it referenced until the bytes are written). Non-contiguous inputs are
    made contiguous and non-CPU inputs copied to the CPU (upstream puts them through
    ``contiguous()`` as well). Same contract as upstream ``_serialize_tensor``.
    Raises ``TensorCodecError`` (unsupported dtype, > 8 dims, not a tensor).
    """
    t, code = _prepare(tensor)
    shape = tuple(t.shape)
    nbytes = t.numel() * t.element_size()
    header = build_header(code, shape, shape, nbytes)
    return header, (t.data_ptr() if nbytes else 0), nbytes, t


def encode(tensor) -> Tuple[bytes, memoryview, int]:
    """``(header, payload, nbytes)`` of ``tensor`` as a FULL object; ``payload`` is a
    read-only byte memoryview over the tensor's (contiguous CPU) memory that keeps it
    alive. The stored object is ``header + payload``. Errors as :func:`serialize`."""
    header, _, nbytes, t = serialize(tensor)
    return header, _payload_view(t, nbytes), nbytes


def encode_bytes(tensor) -> bytes:
    """The whole object (``header + payload``) as new ``bytes`` (one copy)."""
    header, payload, _ = encode(tensor)
    return header + payload.tobytes()


# --------------------------------------------------------------------------------------
# Tensor parallelism


def _check_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TensorCodecError(f"{name} must be an int, got {type(value).__name__}")
    return value


def tp_key(key: str, tp_rank: int) -> str:
    """Key of TP shard ``tp_rank`` of ``key``: ``f"{key}_tp_{tp_rank}"`` (upstream
    ``get_tp_key_name``)."""
    return f"{key}_tp_{tp_rank}"


def tp_keys(key: str, tp_size: int) -> List[str]:
    """Keys written by ``put_tensor_with_tp(key, t, tp_size=n)``: ``[key]`` when
    ``tp_size <= 1``, else ``tp_key(key, r)`` for r in 0..n-1."""
    tp_size = _check_int("tp_size", tp_size)
    if tp_size <= 1:
        return [key]
    return [tp_key(key, r) for r in range(tp_size)]


def tp_read_key(key: str, tp_rank: int, tp_size: int) -> str:
    """Key read by ``get_tensor_with_tp(key, tp_rank, tp_size)``: ``key`` when
    ``tp_size <= 1``, else ``tp_key(key, tp_rank)`` (upstream; split_dim is unused on
    reads). Raises ``TensorCodecError`` unless 0 <= tp_rank < tp_size."""
    tp_size = _check_int("tp_size", tp_size)
    tp_rank = _check_int("tp_rank", tp_rank)
    if tp_size <= 1:
        return key
    if not 0 <= tp_rank < tp_size:
        raise TensorCodecError(f"tp_rank {tp_rank} outside 0..{tp_size - 1}")
    return tp_key(key, tp_rank)


def _check_split(shape, tp_rank: int, tp_size: int, split_dim: int) -> Tuple[int, int]:
    tp_size = _check_int("tp_size", tp_size)
    tp_rank = _check_int("tp_rank", tp_rank)
    split_dim = _check_int("split_dim", split_dim)
    if tp_size <= 0:
        raise TensorCodecError(f"tp_size must be positive, got {tp_size}")
    if not 0 <= tp_rank < tp_size:
        raise TensorCodecError(f"tp_rank {tp_rank} outside 0..{tp_size - 1}")
    if not 0 <= split_dim < len(shape):
        raise TensorCodecError(
            f"split_dim {split_dim} outside 0..{len(shape) - 1} for a {len(shape)}-d tensor")
    dim = shape[split_dim]
    if dim % tp_size != 0:
        raise TensorCodecError(
            f"only uniform sharding is supported: dim {split_dim} of size {dim} does not "
            f"divide into {tp_size} shards")
    extent = dim // tp_size
    return tp_rank * extent, extent


def split_tp(tensor, tp_rank: int, tp_size: int, split_dim: int = 0):
    """Shard ``tp_rank`` of ``tp_size`` of ``tensor`` along ``split_dim``, contiguous:
    ``tensor.narrow(split_dim, rank * d / n, d / n).contiguous()``. Uniform splits only.
    Raises ``TensorCodecError`` for a bad rank/size/dim or a non-uniform split."""
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise TensorCodecError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    start, extent = _check_split(tuple(tensor.shape), tp_rank, tp_size, split_dim)
    return tensor.narrow(split_dim, start, extent).contiguous()


def serialize_tp_shard(tensor, tp_rank: int, tp_size: int, split_dim: int = 0):
    """Like :func:`serialize` for TP shard ``tp_rank``: a SHARD header (global_shape =
    ``tensor.shape``, local_shape = the shard's shape, one TP axis) and the shard's
    payload. Returns ``(header, data_ptr, nbytes, owner)``."""
    t, code = _prepare(tensor)
    full = tuple(t.shape)
    start, extent = _check_split(full, tp_rank, tp_size, split_dim)
    shard = t.narrow(split_dim, start, extent).contiguous()
    local = tuple(shard.shape)
    nbytes = shard.numel() * shard.element_size()
    axis = LayoutAxis(AXIS_TP, 0, tp_rank, tp_size, split_dim, 0, extent)
    header = build_header(code, full, local, nbytes, LAYOUT_SHARD, (axis,))
    return header, (shard.data_ptr() if nbytes else 0), nbytes, shard


def encode_tp_shard(tensor, tp_rank: int, tp_size: int, split_dim: int = 0):
    """``(header, payload, nbytes)`` of TP shard ``tp_rank`` (see :func:`encode`)."""
    header, _, nbytes, shard = serialize_tp_shard(tensor, tp_rank, tp_size, split_dim)
    return header, _payload_view(shard, nbytes), nbytes


def encode_tp(key: str, tensor, tp_size: int, split_dim: int = 0):
    """Everything ``put_tensor_with_tp(key, tensor, tp_rank, tp_size, split_dim)``
    writes, as a list of ``(object_key, header, payload, nbytes)``.

    ``tp_size <= 1``: one FULL object under ``key`` (exactly ``put_tensor``). Otherwise
    ``tp_size`` SHARD objects under ``tp_key(key, r)``, all ranks regardless of the
    caller's ``tp_rank`` (upstream writes every shard). The store returns 0, or the
    first non-zero result of these puts. Raises ``TensorCodecError`` (-> -600) for a
    non-uniform split, a bad ``split_dim`` or an unsupported tensor.
    """
    tp_size = _check_int("tp_size", tp_size)
    if tp_size <= 1:
        header, payload, nbytes = encode(tensor)
        return [(key, header, payload, nbytes)]
    t, _ = _prepare(tensor)
    _check_split(tuple(t.shape), 0, tp_size, split_dim)
    return [(tp_key(key, r),) + tuple(encode_tp_shard(t, r, tp_size, split_dim))
            for r in range(tp_size)]


def encode_tp_from(key: str, address: int, size: int, tp_size: int, split_dim: int = 0):
    """:func:`encode_tp` of the tensor object ``[header][data]`` of ``size`` bytes at raw
    ``address`` (``put_tensor_with_tp_from``/``batch_put_tensor_with_tp_from``): the
    object is validated, viewed without copying and split (shards along a dim other than
    0 are gathered into new memory). The caller keeps ``address`` alive until the puts
    finish. ``TensorCodecError`` (-> -600) for an invalid object or a bad split."""
    return encode_tp(key, view_at(address, size), tp_size, split_dim)


# --------------------------------------------------------------------------------------
# Decoding


def _byte_view(buf) -> memoryview:
    """A flat unsigned-byte memoryview of ``buf``; ``TensorCodecError`` if ``buf`` has
    no buffer interface or is not C-contiguous."""
    try:
        mv = memoryview(buf)
    except TypeError:
        raise TensorCodecError(
            f"expected a bytes-like tensor object, got {type(buf).__name__}") from None
    if not mv.c_contiguous:
        raise TensorCodecError("tensor object buffer must be C-contiguous")
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _alloc_copy(torch, hdr: TensorHeader, src: memoryview):
    """A new CPU tensor of the header's dtype and local shape holding ``src``'s bytes."""
    dt = torch_dtype(hdr.dtype)
    if hdr.data_bytes == 0:
        return torch.empty(hdr.local_shape, dtype=dt)
    raw = torch.empty(hdr.data_bytes, dtype=torch.uint8)
    _raw_view(raw.data_ptr(), hdr.data_bytes)[:] = src
    return raw.view(dt).reshape(hdr.local_shape)


def decode(buf, total_len: Optional[int] = None):
    """Decodes a tensor object into a new CPU tensor (one copy of the payload).

    ``buf`` is any byte buffer holding ``[header][payload]`` (bytes, bytearray,
    memoryview, ``BufferHandle``); ``total_len`` the object's length (default the whole
    buffer). The result has the header's dtype and local_shape (for a TP shard, the
    shard's shape). A zero-element object gives ``torch.empty(shape, dtype)``.
    Raises ``TensorCodecError`` for an invalid object (see :func:`parse_header`).
    """
    torch = _torch()
    mv = _byte_view(buf)
    hdr = parse_header(mv, total_len)
    return _alloc_copy(torch, hdr, mv[hdr.data_offset:hdr.total_bytes])


def try_decode(buf, total_len: Optional[int] = None):
    """:func:`decode`, but ``None`` for an empty buffer or an invalid object (what
    ``get_tensor`` returns on a miss or a bad header). ``ImportError`` still raises."""
    try:
        if buf is None:
            return None
        return decode(buf, total_len)
    except TensorCodecError:
        return None


def decode_into(buf, out, total_len: Optional[int] = None):
    """Copies the payload of the tensor object in ``buf`` into the existing tensor
    ``out`` and returns ``out``.

    ``out`` must be a C-contiguous CPU tensor with the object's dtype and element count
    (its shape may differ, e.g. a flat staging tensor); ``TensorCodecError`` otherwise
    or for an invalid object. ``out`` is untouched on error.
    """
    torch = _torch()
    if not isinstance(out, torch.Tensor):
        raise TensorCodecError(f"out must be a torch.Tensor, got {type(out).__name__}")
    mv = _byte_view(buf)
    hdr = parse_header(mv, total_len)
    dt = torch_dtype(hdr.dtype)
    if out.dtype != dt:
        raise TensorCodecError(f"out has dtype {out.dtype}, object holds {dt}")
    if out.device.type != "cpu" or not out.is_contiguous():
        raise TensorCodecError("out must be a contiguous CPU tensor")
    if out.numel() != _prod(hdr.local_shape):
        raise TensorCodecError(
            f"out has {out.numel()} elements, object holds {_prod(hdr.local_shape)} "
            f"(shape {list(hdr.local_shape)})")
    if hdr.data_bytes:
        _raw_view(out.data_ptr(), hdr.data_bytes)[:] = mv[hdr.data_offset:hdr.total_bytes]
    return out


def view_at(address: int, size: int):
    """A tensor viewing the payload of the ``size``-byte object at raw ``address``,
    without copying (``get_tensor_into``/``batch_get_tensor_into``: the object was read
    into the caller's buffer; ``size`` is the number of bytes read, not the buffer's
    capacity). The memory is borrowed: the caller keeps it alive and unchanged while the
    tensor is used. Raises ``TensorCodecError`` for an invalid object."""
    torch = _torch()
    mv = _raw_view(address, size)
    hdr = parse_header(mv, size)
    dt = torch_dtype(hdr.dtype)
    if hdr.data_bytes == 0:
        return torch.empty(hdr.local_shape, dtype=dt)
    payload = (ctypes.c_char * hdr.data_bytes).from_address(address + hdr.data_offset)
    return torch.frombuffer(payload, dtype=torch.uint8).view(dt).reshape(hdr.local_shape)
