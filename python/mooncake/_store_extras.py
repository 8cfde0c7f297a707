"""The parts of ``MooncakeDistributedStore`` written in Python (the C methods forward to
the functions here, first argument the store): the unified parallel tensor IO
(``*_tensor_with_parallelism*``, with ``ParallelAxis`` / ``TensorParallelism`` /
``ReadTarget``), the safetensors helpers and the CUDA-only tensor readers.

Upstream: ``store_py.cpp`` (HEAD) and ``docs/source/design/store/unified-parallel-tensor-io.md``
(behaviour described there; no code taken). Every tensor path goes through the tensor
codec (``mooncake._tensor_codec``: upstream's 304-byte header) and the store's batch
calls, so a batch of items is one batch put / get. Importing this module does not import
torch (``mooncake.store`` imports it at load for the three classes).

What differs from upstream (docs/compatibility.md):
  * Object keys: no parallelism -> ``key``; a single TP axis -> ``key_tp_<rank>`` (the
    legacy TP key, as upstream); several axes -> ``key`` + ``_<kind>_<rank>`` for each
    non-TP axis in the order dp, pp, ep (ep uses expert_id when given) + ``_tp_<rank>``
    when there is a TP axis. Upstream's canonical multi-axis suffixes and its 96-byte
    manifest objects are not reproduced: multi-axis objects written by upstream are not
    found here (single-TP and full objects are).
  * Reads reconstruct from the shards' own headers (shard count, split dim, global
    shape), never from a manifest. Re-sharding (a TP size other than the stored one) is
    uniform splits only.
"""
from __future__ import annotations

import json
import logging
import os
import struct

log = logging.getLogger("mooncake.store")

INVALID_PARAMS = -600
_KINDS = ("dp", "tp", "ep", "pp")  # codec AXIS_DP.. AXIS_PP are 0..3 in this order
_KEY_ORDER = ("dp", "pp", "ep")


class ParallelAxis:
    """ParallelAxis(kind: str = "tp", rank: int = 0, size: int = 1, split_dim: int | None = None, expert_id: int | None = None, stage_id: int | None = None): one parallel axis of a shard: kind "tp", "dp", "ep" or "pp" (case-insensitive), rank in 0..size-1, split_dim (the dim a TP axis splits; None: 0), expert_id (EP), stage_id (PP). Checked when used (ValueError)."""

    kind: str
    rank: int
    size: int
    split_dim: int | None
    expert_id: int | None
    stage_id: int | None

    def __init__(self, kind="tp", rank=0, size=1, split_dim=None, expert_id=None,
                 stage_id=None):
        self.kind, self.rank, self.size = kind, rank, size
        self.split_dim, self.expert_id, self.stage_id = split_dim, expert_id, stage_id

    def _check(self):
        if not isinstance(self.kind, str) or self.kind.lower() not in _KINDS:
            raise ValueError(f"ParallelAxis.kind must be one of {_KINDS}, got {self.kind!r}")
        self.kind = self.kind.lower()
        for name in ("rank", "size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"ParallelAxis.{name} must be an int, got {v!r}")
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"ParallelAxis rank {self.rank} outside 0..{self.size - 1}")

    def __repr__(self):
        return (f"ParallelAxis(kind={self.kind!r}, rank={self.rank}, size={self.size}, "
                f"split_dim={self.split_dim}, expert_id={self.expert_id}, "
                f"stage_id={self.stage_id})")


class TensorParallelism:
    """TensorParallelism(axes: list[ParallelAxis] | None = None): the axes that identify a shard (at most one per kind)."""

    axes: list[ParallelAxis]

    def __init__(self, axes=None):
        self.axes = list(axes or [])

    def __repr__(self):
        return f"TensorParallelism(axes={self.axes!r})"


class ReadTarget:
    """ReadTarget(mode: str = "as_stored", parallelism: TensorParallelism | None = None): what a read wants: mode "as_stored" (the object as written), "shard" (the shard given by parallelism, re-sharded from the stored shards when their TP size differs) or "full" (the reconstructed tensor)."""

    mode: str
    parallelism: TensorParallelism | None

    def __init__(self, mode="as_stored", parallelism=None):
        self.mode = mode
        self.parallelism = parallelism

    def __repr__(self):
        return f"ReadTarget(mode={self.mode!r}, parallelism={self.parallelism!r})"


# --------------------------------------------------------------------------------------
# helpers


def _codec():
    from mooncake import _tensor_codec

    return _tensor_codec


def _axes(par):
    """The validated axes of par (None / TensorParallelism / list of ParallelAxis / one
    ParallelAxis) as a dict kind -> axis. ValueError when malformed."""
    if par is None:
        return {}
    if isinstance(par, ParallelAxis):
        axes = [par]
    elif isinstance(par, TensorParallelism):
        axes = par.axes
    elif isinstance(par, (list, tuple)):
        axes = list(par)
    else:
        raise ValueError(f"parallelism must be a TensorParallelism, got {type(par).__name__}")
    out = {}
    for a in axes:
        if not isinstance(a, ParallelAxis):
            raise ValueError(f"parallelism axes must be ParallelAxis, got {type(a).__name__}")
        a._check()
        if a.kind in out:
            raise ValueError(f"parallelism has two {a.kind} axes")
        out[a.kind] = a
    return out


def _key_str(key):
    return key.decode() if isinstance(key, bytes) else key


def object_key(key, axes):
    """The key of the object that holds the shard `axes` of `key` (module docstring)."""
    key = _key_str(key)
    if not axes:
        return key
    if set(axes) == {"tp"}:
        return f"{key}_tp_{axes['tp'].rank}"
    parts = [key]
    for kind in _KEY_ORDER:
        a = axes.get(kind)
        if a is not None:
            ident = a.expert_id if kind == "ep" and a.expert_id is not None else a.rank
            parts.append(f"{kind}_{ident}")
    if "tp" in axes:
        parts.append(f"tp_{axes['tp'].rank}")
    return "_".join(parts)


def _tp_split_dim(a):
    return 0 if a.split_dim is None else a.split_dim


def _header_axes(codec, axes, extent=0):
    out = []
    for i, kind in enumerate(k for k in ("dp", "tp", "ep", "pp") if k in axes):
        a = axes[kind]
        sd = _tp_split_dim(a) if kind == "tp" else (-1 if a.split_dim is None else a.split_dim)
        extra = a.expert_id if kind == "ep" and a.expert_id is not None else (
            a.stage_id if kind == "pp" and a.stage_id is not None else 0)
        out.append(codec.LayoutAxis(_KINDS.index(kind), i, a.rank, a.size, sd, extra,
                                    extent if kind == "tp" else 0))
    return tuple(out)


def _encode_item(key, tensor, parallelism, writer_partition):
    """(object_key, header bytes, payload tensor, nbytes) of what one put writes.
    ValueError / TensorCodecError when refused."""
    codec = _codec()
    torch = codec._torch()
    if not isinstance(tensor, torch.Tensor):
        raise codec.TensorCodecError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    axes = _axes(parallelism)
    if writer_partition is not None:
        if axes:
            raise ValueError("give parallelism or writer_partition, not both")
        rank, size, sd = _writer_partition(writer_partition)
        axes = {"tp": ParallelAxis("tp", rank, size, sd)}
        tensor = codec.split_tp(tensor, rank, size, sd)  # full tensor in: this writer's shard
        full_shape = None
    elif "tp" in axes and len(axes) > 1:
        a = axes["tp"]  # multi-axis with TP: the full tensor in, the TP shard materialised
        full_shape = tuple(tensor.shape)
        tensor = codec.split_tp(tensor, a.rank, a.size, _tp_split_dim(a))
    else:
        full_shape = None
    t, code = codec._prepare(tensor)
    local = tuple(t.shape)
    nbytes = t.numel() * t.element_size()
    if not axes:
        header = codec.build_header(code, local, local, nbytes)
    else:
        glob = list(full_shape or local)
        extent = 0
        if "tp" in axes and full_shape is None:
            a = axes["tp"]
            sd = _tp_split_dim(a)
            if not 0 <= sd < len(local):
                raise ValueError(f"split_dim {sd} outside the tensor's {len(local)} dims")
            glob[sd] = local[sd] * a.size  # the caller's shard of a uniform split
        if "tp" in axes:
            extent = local[_tp_split_dim(axes["tp"])]
        header = codec.build_header(code, glob, local, nbytes, codec.LAYOUT_SHARD,
                                    _header_axes(codec, axes, extent))
    return object_key(key, axes), header, t, nbytes


def _writer_partition(wp):
    if isinstance(wp, dict):
        vals = (wp.get("rank", 0), wp.get("size", 1), wp.get("split_dim", 0))
    elif isinstance(wp, (tuple, list)) and len(wp) in (2, 3):
        vals = tuple(wp) + ((0,) if len(wp) == 2 else ())
    else:
        vals = (getattr(wp, "rank", None), getattr(wp, "size", None),
                getattr(wp, "split_dim", 0))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        raise ValueError(f"writer_partition must give int rank, size, split_dim: {wp!r}")
    return vals


def _config(config, replica):
    return config if config is not None else replica


def _write(store, items, config, upsert, fn):
    """Writes items [(key, tensor, parallelism, writer_partition)] in one batch call;
    returns one int per item."""
    codec = _codec()
    res = [0] * len(items)
    keys, hdrs, keep, sizes, owner = [], [], [], [], []
    for i, (key, tensor, par, wp) in enumerate(items):
        try:
            okey, header, t, nbytes = _encode_item(key, tensor, par, wp)
        except (ValueError, codec.TensorCodecError) as e:
            log.error("%s: %s", fn, e)
            res[i] = INVALID_PARAMS
            continue
        keys.append(okey)
        hdrs.append(header)
        keep.append(t)
        sizes.append(nbytes)
        owner.append(i)
    if not keys:
        return res
    args = [config] if config is not None else []
    if upsert:
        # no batch upsert of scatter-gather objects: one joined buffer per object
        blobs = [h + (bytes(codec._payload_view(t, n)) if n else b"")
                 for h, t, n in zip(hdrs, keep, sizes)]
        import ctypes

        bufs = [ctypes.create_string_buffer(b, len(b)) for b in blobs]
        out = store.batch_upsert_from(keys, [ctypes.addressof(b) for b in bufs],
                                      [len(b) for b in blobs], *args)
    else:
        import ctypes

        hbufs = [ctypes.create_string_buffer(h, len(h)) for h in hdrs]
        ptrs = [[ctypes.addressof(hb), t.data_ptr() if n else 0] if n else
                [ctypes.addressof(hb)] for hb, t, n in zip(hbufs, keep, sizes)]
        lens = [[len(h), n] if n else [len(h)] for h, n in zip(hdrs, sizes)]
        out = store.batch_put_from_multi_buffers(keys, ptrs, lens, *args)
    for i, r in zip(owner, out):
        if r and not res[i]:
            res[i] = r
    return res


def _many(name, values, n):
    if values is None:
        return [None] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries for {n} keys")
    return values


# --------------------------------------------------------------------------------------
# writes


def put_tensor_with_parallelism(store, key, tensor, parallelism=None, config=None,
                                writer_partition=None, replica=None):
    return _write(store, [(key, tensor, parallelism, writer_partition)],
                  _config(config, replica), False, "put_tensor_with_parallelism")[0]


def upsert_tensor_with_parallelism(store, key, tensor, parallelism=None, config=None,
                                   writer_partition=None, replica=None):
    return _write(store, [(key, tensor, parallelism, writer_partition)],
                  _config(config, replica), True, "upsert_tensor_with_parallelism")[0]


def _batch_write(store, keys, tensors_list, parallelisms, config, writer_partitions, upsert,
                 fn):
    keys = list(keys)
    try:
        tensors_list = _many("tensors_list", tensors_list, len(keys))
        pars = _many("parallelisms", parallelisms, len(keys))
        wps = _many("writer_partitions", writer_partitions, len(keys))
    except ValueError as e:
        log.error("%s: %s", fn, e)
        return [INVALID_PARAMS] * len(keys)
    return _write(store, list(zip(keys, tensors_list, pars, wps)), config, upsert, fn)


def batch_put_tensor_with_parallelism(store, keys, tensors_list, parallelisms=None,
                                      config=None, writer_partitions=None, replica=None):
    return _batch_write(store, keys, tensors_list, parallelisms, _config(config, replica),
                        writer_partitions, False, "batch_put_tensor_with_parallelism")


def batch_upsert_tensor_with_parallelism(store, keys, tensors_list, parallelisms=None,
                                         config=None, writer_partitions=None, replica=None):
    return _batch_write(store, keys, tensors_list, parallelisms, _config(config, replica),
                        writer_partitions, True, "batch_upsert_tensor_with_parallelism")


def _views(buffer_ptrs, sizes, fn):
    """Tensors viewing the [header][data] objects in the caller's buffers (None for one
    that does not decode)."""
    codec = _codec()
    out = []
    for p, s in zip(buffer_ptrs, sizes):
        try:
            out.append(codec.view_at(int(p), int(s)))
        except (codec.TensorCodecError, ValueError, TypeError) as e:
            log.error("%s: %s", fn, e)
            out.append(None)
    return out


def _from(store, keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, upsert,
          fn):
    keys = list(keys)
    if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys):
        log.error("%s: %d keys, %d buffers, %d sizes", fn, len(keys), len(buffer_ptrs),
                  len(sizes))
        return [INVALID_PARAMS] * len(keys)
    tensors = _views(buffer_ptrs, sizes, fn)
    res = _batch_write(store, keys, tensors, parallelisms, config, writer_partitions, upsert,
                       fn)
    return [INVALID_PARAMS if t is None else r for t, r in zip(tensors, res)]


def put_tensor_with_parallelism_from(store, key, buffer_ptr, size, parallelism=None,
                                     config=None, writer_partition=None, replica=None):
    return _from(store, [key], [buffer_ptr], [size], [parallelism], _config(config, replica),
                 [writer_partition], False, "put_tensor_with_parallelism_from")[0]


def upsert_tensor_with_parallelism_from(store, key, buffer_ptr, size, parallelism=None,
                                        config=None, writer_partition=None, replica=None):
    return _from(store, [key], [buffer_ptr], [size], [parallelism], _config(config, replica),
                 [writer_partition], True, "upsert_tensor_with_parallelism_from")[0]


def batch_put_tensor_with_parallelism_from(store, keys, buffer_ptrs, sizes, parallelisms=None,
                                           config=None, writer_partitions=None, replica=None):
    return _from(store, keys, list(buffer_ptrs), list(sizes), parallelisms,
                 _config(config, replica), writer_partitions, False,
                 "batch_put_tensor_with_parallelism_from")


def batch_upsert_tensor_with_parallelism_from(store, keys, buffer_ptrs, sizes,
                                              parallelisms=None, config=None,
                                              writer_partitions=None, replica=None):
    return _from(store, keys, list(buffer_ptrs), list(sizes), parallelisms,
                 _config(config, replica), writer_partitions, True,
                 "batch_upsert_tensor_with_parallelism_from")


# --------------------------------------------------------------------------------------
# reads


def _target(target):
    if target is None:
        return "as_stored", {}
    if not isinstance(target, ReadTarget):
        raise ValueError(f"target must be a ReadTarget, got {type(target).__name__}")
    mode = target.mode.lower() if isinstance(target.mode, str) else target.mode
    if mode not in ("as_stored", "shard", "full"):
        raise ValueError(f"ReadTarget.mode must be 'as_stored', 'shard' or 'full', got "
                         f"{target.mode!r}")
    axes = _axes(target.parallelism)
    if mode == "shard" and not axes:
        raise ValueError("ReadTarget(mode='shard') needs a parallelism")
    return mode, axes


def _stored_shards(store, key, scope):
    """(tp_size, split_dim) of the TP shards stored for `key` within the non-TP axes
    `scope`, from shard 0's header; None when there are none."""
    codec = _codec()
    probe = dict(scope)
    probe["tp"] = ParallelAxis("tp", 0, 1)
    raw = store.get(object_key(key, probe))
    if not raw:
        return None
    try:
        hdr = codec.parse_header(raw)
    except codec.TensorCodecError:
        return None
    for ax in hdr.axes:
        if ax.kind == codec.AXIS_TP:
            return ax.shard_count, ax.split_dim
    return None


def _full(store, key, scope):
    """The reconstructed tensor: the full object itself, or its TP shards gathered in
    rank order along their split dim. None when it cannot be built."""
    codec = _codec()
    torch = codec._torch()
    if not scope:
        t = store.get_tensor(_key_str(key))
        if t is not None:
            return t
    info = _stored_shards(store, key, scope)
    if info is None:
        return store.get_tensor(object_key(key, scope)) if scope else None
    n, sd = info
    keys = []
    for r in range(n):
        ax = dict(scope)
        ax["tp"] = ParallelAxis("tp", r, n)
        keys.append(object_key(key, ax))
    parts = store.batch_get_tensor(keys)
    if any(p is None for p in parts):
        log.error("full read of %r: %d of %d shards missing", key,
                  sum(p is None for p in parts), n)
        return None
    return torch.cat(parts, dim=sd).contiguous()


def _exact_shard(store, okey, a):
    """The stored object okey when it is TP shard a.rank of a.size (its header says so),
    else None (missing, or a shard of another TP size under the same key)."""
    codec = _codec()
    raw = store.get(okey)
    if not raw:
        return None
    try:
        hdr = codec.parse_header(raw)
    except codec.TensorCodecError:
        return None
    tps = [ax for ax in hdr.axes if ax.kind == codec.AXIS_TP]
    if not tps or tps[0].shard_count != a.size or tps[0].shard_rank != a.rank:
        return None
    return codec.try_decode(raw)


def _read(store, key, target, fn):
    codec = _codec()
    try:
        mode, axes = _target(target)
    except ValueError as e:
        log.error("%s: %s", fn, e)
        return None
    if mode == "as_stored":
        return store.get_tensor(object_key(key, axes))
    scope = {k: a for k, a in axes.items() if k != "tp"}
    if mode == "full":
        return _full(store, key, scope)
    if "tp" not in axes:
        return store.get_tensor(object_key(key, axes))
    t = _exact_shard(store, object_key(key, axes), axes["tp"])
    if t is not None:
        return t
    full = _full(store, key, scope)  # else re-shard the reconstructed tensor
    if full is None:
        return None
    a = axes["tp"]
    try:
        return codec.split_tp(full, a.rank, a.size, _tp_split_dim(a))
    except codec.TensorCodecError as e:
        log.error("%s: %s", fn, e)
        return None


def get_tensor_with_parallelism(store, key, target=None):
    return _read(store, key, target, "get_tensor_with_parallelism")


def batch_get_tensor_with_parallelism(store, keys, targets=None):
    keys = list(keys)
    try:
        targets = _many("targets", targets, len(keys))
    except ValueError as e:
        log.error("batch_get_tensor_with_parallelism: %s", e)
        return [None] * len(keys)
    # the direct objects of every item in one batch get; reconstructions after
    direct = []
    for k, t in zip(keys, targets):
        try:
            mode, axes = _target(t)
        except ValueError:
            mode, axes = "bad", {}
        direct.append(object_key(k, axes) if mode == "as_stored" else None)
    idx = [i for i, d in enumerate(direct) if d is not None]
    got = store.batch_get_tensor([direct[i] for i in idx]) if idx else []
    out = [None] * len(keys)
    for i, g in zip(idx, got):
        out[i] = g
    for i, (k, t) in enumerate(zip(keys, targets)):
        if out[i] is None and not (t is None or (isinstance(t, ReadTarget) and
                                                 str(t.mode).lower() == "as_stored")):
            out[i] = _read(store, k, t, "batch_get_tensor_with_parallelism")
    return out


def _into(store, key, buffer_ptr, size, target, fn):
    """A read into the caller's buffer: the object [header][data] lands there and the
    result views it (zero copy for an exact object; a reconstruction is encoded into the
    buffer). None when it does not fit or cannot be read."""
    codec = _codec()
    try:
        mode, axes = _target(target)
    except ValueError as e:
        log.error("%s: %s", fn, e)
        return None
    if mode == "as_stored":
        return store.get_tensor_into(object_key(key, axes), buffer_ptr, size)
    t = _read(store, key, target, fn)
    if t is None:
        return None
    header, payload, nbytes = codec.encode(t)
    if len(header) + nbytes > size:
        log.error("%s: the result needs %d bytes, the buffer holds %d", fn,
                  len(header) + nbytes, size)
        return None
    mv = codec._raw_view(int(buffer_ptr), len(header) + nbytes)
    mv[:len(header)] = header
    if nbytes:
        mv[len(header):] = payload
    return codec.view_at(int(buffer_ptr), len(header) + nbytes)


def get_tensor_with_parallelism_into(store, key, buffer_ptr, size, target=None):
    return _into(store, key, buffer_ptr, size, target, "get_tensor_with_parallelism_into")


def batch_get_tensor_with_parallelism_into(store, keys, buffer_ptrs, sizes, targets=None):
    keys = list(keys)
    buffer_ptrs, sizes = list(buffer_ptrs), list(sizes)
    if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys):
        log.error("batch_get_tensor_with_parallelism_into: %d keys, %d buffers, %d sizes",
                  len(keys), len(buffer_ptrs), len(sizes))
        return [INVALID_PARAMS] * len(keys)
    try:
        targets = _many("targets", targets, len(keys))
    except ValueError as e:
        log.error("batch_get_tensor_with_parallelism_into: %s", e)
        return [INVALID_PARAMS] * len(keys)
    plain = [i for i, t in enumerate(targets)
             if t is None or (isinstance(t, ReadTarget) and str(t.mode).lower() == "as_stored")]
    out = [None] * len(keys)
    if plain:
        got = store.batch_get_tensor_into(
            [object_key(keys[i], _target(targets[i])[1]) for i in plain],
            [buffer_ptrs[i] for i in plain], [sizes[i] for i in plain])
        for i, g in zip(plain, got):
            out[i] = g if not isinstance(g, int) else None
    for i in range(len(keys)):
        if i not in plain:
            out[i] = _into(store, keys[i], buffer_ptrs[i], sizes[i], targets[i],
                           "batch_get_tensor_with_parallelism_into")
    return out


# --------------------------------------------------------------------------------------
# safetensors (the file format: u64 LE header length, a JSON header, the data; written
# and read here, no dependency)

_ST_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "bool": "BOOL", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "uint16": "U16", "uint32": "U32", "uint64": "U64",
}


def _st_dtype_name(dt):
    return str(dt).replace("torch.", "")


def save_tensor_to_safetensor(store, key, file_name=None):
    """Reads tensor `key` and writes it to `file_name` (default: the key) as a one-tensor
    safetensors file named by the key. 0, -704 (no such tensor), -600 (a dtype the format
    lacks), -1 (the file cannot be written)."""
    key = _key_str(key)
    t = store.get_tensor(key)
    if t is None:
        log.error("save_tensor_to_safetensor: no tensor under %r", key)
        return -704
    code = _ST_DTYPES.get(_st_dtype_name(t.dtype))
    if code is None:
        log.error("save_tensor_to_safetensor: dtype %s has no safetensors name", t.dtype)
        return INVALID_PARAMS
    t = t.contiguous()
    nbytes = t.numel() * t.element_size()
    data = bytes(_codec()._payload_view(t, nbytes)) if nbytes else b""
    header = {key: {"dtype": code, "shape": list(t.shape), "data_offsets": [0, nbytes]}}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)  # the data starts 8-byte aligned
    path = file_name if file_name is not None else key
    try:
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb + data)
    except OSError as e:
        log.error("save_tensor_to_safetensor: %s", e)
        return -1
    return 0


def _st_read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("file too short for a safetensors header")
    (n,) = struct.unpack_from("<Q", blob, 0)
    if n > len(blob) - 8 or n > 100 << 20:
        raise ValueError("safetensors header length runs past the file")
    header = json.loads(blob[8:8 + n])
    if not isinstance(header, dict):
        raise ValueError("safetensors header is not an object")
    return header, memoryview(blob)[8 + n:]


def _st_tensor(entry, data):
    torch = _codec()._torch()
    names = {v: k for k, v in _ST_DTYPES.items()}
    dname = names.get(entry.get("dtype"))
    if dname is None or not hasattr(torch, dname):
        raise ValueError(f"unsupported safetensors dtype {entry.get('dtype')!r}")
    dt = getattr(torch, dname)
    shape = [int(d) for d in entry["shape"]]
    a, b = (int(x) for x in entry["data_offsets"])
    if not 0 <= a <= b <= len(data):
        raise ValueError("safetensors data_offsets outside the file")
    elem = torch.empty((), dtype=dt).element_size()
    count = 1
    for d in shape:
        count *= d
    if b - a != count * elem:
        raise ValueError("safetensors data_offsets do not match the shape")
    if b == a:
        return torch.empty(shape, dtype=dt)
    raw = torch.frombuffer(bytearray(data[a:b]), dtype=torch.uint8)
    return raw.view(dt).reshape(shape)


def load_tensor_from_safetensor(store, key=None, file_name=None, config=None):
    """Reads a safetensors file and stores its tensor named `key` (default: the file
    name) under `key` (upstream: when the file has no tensor of that name, the first one
    is used, with a warning). 0, else the put's code, -704 (empty file), -1 (unreadable or
    malformed file)."""
    if file_name is None:
        if key is None:
            log.error("load_tensor_from_safetensor: give file_name")
            return -1
        file_name = key
    key = _key_str(key) if key is not None else os.fspath(file_name)
    try:
        header, data = _st_read(file_name)
        names = [k for k in header if k != "__metadata__"]
        if not names:
            log.error("load_tensor_from_safetensor: %s holds no tensor", file_name)
            return -704
        name = key if key in header else names[0]
        if name != key:
            log.warning("load_tensor_from_safetensor: %s has no tensor %r; using %r",
                        file_name, key, name)
        t = _st_tensor(header[name], data)
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.error("load_tensor_from_safetensor: %s: %s", file_name, e)
        return -1
    return store.pub_tensor(key, t, config) if config is not None else store.put_tensor(key, t)


# --------------------------------------------------------------------------------------
# CUDA-only readers


def _cuda_unavailable(fn):
    try:
        torch = _codec()._torch()
        ok = torch.cuda.is_available()
    except ImportError:
        ok = False
    why = ("this build of mooncake-c moves host memory only (no CUDA transport)"
           if ok else "CUDA is not available on this machine")
    raise RuntimeError(f"{fn}() needs CUDA destination tensors: {why}; read into host "
                       "memory with get_tensor_into / batch_get_tensor_into and copy with "
                       "tensor.to('cuda')")


def get_tensor_into_cuda(store, key, tensor):
    _cuda_unavailable("get_tensor_into_cuda")


def batch_get_tensor_into_cuda(store, keys, tensors_list):
    _cuda_unavailable("batch_get_tensor_into_cuda")
