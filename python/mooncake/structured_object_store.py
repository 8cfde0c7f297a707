"""``mooncake.structured_object_store``: nested structures of tensors and arrays as bundles.

Upstream ships a module of this name (documented in upstream's ``mooncake-store.md``,
"Structured Object Store Helper"): one logical object with several named members is
stored as a manifest plus payload objects, and read back whole or member by member. This
is our own design of that public contract, over the ordinary store API
(``put``/``get``/``batch_put_from``/``batch_get_into``/``remove``), the
:class:`~mooncake.buffer_pool.BufferPool` and :func:`mooncake._fast_copy.concat_arrays_into`.

Public API (names as upstream's):

- :class:`MooncakeBundleTransfer` ``(store, key_prefix="bundle", default_chunk_bytes=64 MiB,
  buffer_pool=None)``: ``put_structured_object(payload, ...) -> RemoteBundleRef``;
  ``read_spec(ref)`` -> :class:`StructuredObjectReadSpec` (``select_members``,
  ``slice_member``); ``materialize(spec)`` / ``materialize_into(spec, destinations)`` ->
  :class:`StructuredObjectResult` (``metadata``, ``objects``); ``put_object(obj)`` /
  ``get_object(ref)`` for any nested value; ``put_bundle(meta, buffers)`` /
  ``get_bundle(ref)`` / ``remove_bundle(ref)`` for raw named payloads; ``put``/``get``
  (``type="dict"`` or ``"dataproto"``), ``put_dataproto``/``get_dataproto``,
  ``cleanup_dataproto`` and the JSON-safe handles of :func:`export_dataproto_ref` /
  :func:`import_dataproto_ref`.
- :class:`StructuredObjectPayload` ``(metadata=None, buffers=...)``,
  :class:`BundleTransferPolicy` ``(max_inflight_put=1, put_mode="auto", copy_mode="auto")``,
  :class:`StructuredMemberSlice`, :class:`RemoteBundleRef`, :class:`FieldSchema`,
  :func:`tensor_object_buffer`.

Values (codec inference, :func:`infer_codec`). A member may be any nesting of ``dict``
(any JSON-scalar keys), ``list`` and ``tuple`` whose leaves are:

================  =====================================================================
codec             leaves
================  =====================================================================
``tensor``        a ``torch.Tensor`` (any dtype, bfloat16 included; read back on CPU)
``ndarray``       a ``numpy.ndarray`` of a non-object dtype, or a numpy scalar
``ragged_ndarray`` a list/tuple (2+ items) of ndarrays with one dtype and one ndim, or a
                  1-D object ndarray of such arrays: one payload, per-row shapes kept
``ragged_tensor`` the same for torch tensors
``bytes``         ``bytes``, ``bytearray``, ``memoryview`` (read back as its own type,
                  memoryview as bytes)
``raw_buffer``    :func:`tensor_object_buffer` ``(ptr, size, owner)``: bytes at an address
``json``          ``None``, ``bool``, ``int``, ``float``, ``str``: kept in the manifest
================  =====================================================================

Anything else is a ``TypeError`` naming the member path. A :class:`FieldSchema` may pin
a member's codec (``"json"``, ``"bytes"``, ``"ndarray"``, ``"tensor"``, ``"ragged_*"``,
``"tree"`` to forbid packing), else it is inferred.

Keys (:func:`escape_key_component`). Every payload lives under
``{key_prefix}/{partition}/{object_id}/m/{member path}/{chunk}`` and the manifest under
``{key_prefix}/{partition}/{object_id}/manifest``; ``object_id`` is a fresh UUID, so a
put never collides with an earlier one. A member path joins one component per nesting
level with ``/``: a string key is percent-encoded (everything but ``A-Za-z0-9._-``,
so ``/``, ``%``, ``@``, ``~``, spaces and non-ASCII can never be confused with the
separators), a list index is ``@<i>``, another key type is ``~<type letter><value>``.
Payloads above ``chunk_bytes`` are split into several objects.

Writes (``policy.copy_mode``): ``"auto"`` stages every payload into one lease of a
registered :class:`BufferPool` (ragged rows and all members are copied in with
``concat_arrays_into``, GIL released) and writes them with one ``batch_put_from``; a
store without ``batch_put_from``/``register_buffer`` falls back to ``put``. ``"copy"``
always uses ``store.put``. ``"zero_copy"`` accepts only :func:`tensor_object_buffer`
members and writes straight from their memory with ``batch_put_from``. The manifest is
written last, so a reader never sees a bundle whose payloads are not all stored; a failed
payload write removes what was written and raises ``RuntimeError`` naming the key and
the store's code. Reads fetch the manifest (a missing one is a ``KeyError``), then the
selected members' chunks with one ``batch_get_into`` into a pool lease (or ``get``), and
decode them into new objects; a missing or short payload is a ``RuntimeError``.
Slices (``slice_member``) are applied after the member is read.

Threads: one MooncakeBundleTransfer may be used from several threads (the store and the
pool are thread-safe; the helper keeps no per-call state).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal, Mapping, Optional, Protocol, Sequence

import numpy as np

__all__ = [
    "DEFAULT_BUNDLE_CHUNK_BYTES", "BundleStore", "BundleTransferPolicy", "FieldSchema",
    "RemoteBundleRef", "StructuredObjectPayload", "StructuredObjectResult",
    "StructuredMemberSlice", "StructuredObjectReadSpec", "StructuredFieldLocation",
    "MooncakeDataProtoRef", "MooncakeBundleTransfer", "tensor_object_buffer",
    "infer_codec", "escape_key_component", "unescape_key_component",
    "is_dataproto_ref_handle", "export_dataproto_ref", "import_dataproto_ref",
    "export_ref", "import_ref",
]

DEFAULT_BUNDLE_CHUNK_BYTES = 64 * 1024**2
MISSING_OBJECT_ERROR = -704  # OBJECT_NOT_FOUND: remove of an already-missing object
MANIFEST_VERSION = 1
DATAPROTO_REF_HANDLE_TYPE = "mooncake_dataproto_ref"
DATAPROTO_REF_HANDLE_VERSION = 1

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


# ---- keys ---------------------------------------------------------------------------
def escape_key_component(text: str) -> str:
    """Percent-encodes every UTF-8 byte of `text` outside ``A-Za-z0-9._-`` (``%XX``,
    upper-case hex); the result never contains ``/``, ``@`` or ``~``, and ``%`` only as an
    escape. The empty string is written ``%_`` (not a ``%XX`` escape, so it cannot be
    confused with any other string)."""
    if text == "":
        return "%_"
    out = []
    for b in text.encode("utf-8"):
        out.append(chr(b) if b in _SAFE else f"%{b:02X}")
    return "".join(out)


def unescape_key_component(text: str) -> str:
    """The inverse of :func:`escape_key_component`."""
    if text == "%_":
        return ""
    raw = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%":
            raw.append(int(text[i + 1:i + 3], 16))
            i += 3
        else:
            raw.append(ord(text[i]))
            i += 1
    return raw.decode("utf-8")


def _key_component(key: Any) -> str:
    if isinstance(key, str):
        return escape_key_component(key)
    if isinstance(key, bool):
        return f"~b{int(key)}"
    if isinstance(key, int):
        return f"~i{key}"
    if isinstance(key, float):
        return "~f" + escape_key_component(repr(key))
    if key is None:
        return "~n"
    raise TypeError(f"dict keys must be str, int, float, bool or None, not {type(key).__name__}")


def _normalize_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix.strip("/"):
        raise ValueError(f"key_prefix must be a non-empty string, got {prefix!r}")
    return prefix.strip("/")


# ---- public types -------------------------------------------------------------------
class BundleStore(Protocol):
    """What the helper needs of a store (a ``MooncakeDistributedStore`` has it all)."""

    def put(self, key: str, value: Any, config: Any = None) -> int: ...

    def get(self, key: str) -> bytes: ...

    def remove(self, key: str, force: bool = False) -> int: ...

    def is_exist(self, key: str) -> int: ...


@dataclass(frozen=True)
class BundleTransferPolicy:
    """How payloads are written: ``copy_mode`` "auto" | "copy" | "zero_copy" (module
    docstring); ``put_mode`` "auto" | "batch" (one batch call) | "parallel" (one call per
    payload, at most ``max_inflight_put`` at a time)."""

    max_inflight_put: int = 1
    put_mode: Literal["auto", "batch", "parallel"] = "auto"
    copy_mode: Literal["auto", "zero_copy", "copy"] = "auto"


@dataclass(frozen=True)
class FieldSchema:
    """A codec hint for one member or field; ``metadata["section"]`` may pin a DataProto
    field to ``batch`` or ``non_tensor_batch``."""

    codec: str
    nullable: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class RemoteBundleRef:
    """A stored bundle: its manifest key and (when known) the manifest itself."""

    manifest_key: str
    manifest: dict[str, Any]


@dataclass(frozen=True, init=False)
class StructuredObjectPayload:
    """A structured object to write: JSON-safe ``metadata`` and named ``buffers``."""

    metadata: Mapping[str, Any]
    buffers: Mapping[str, Any]

    def __init__(self, metadata: Optional[Mapping[str, Any]] = None,
                 buffers: Optional[Mapping[str, Any]] = None) -> None:
        if buffers is None:
            raise TypeError("StructuredObjectPayload requires buffers")
        if not isinstance(buffers, Mapping):
            raise TypeError(f"buffers must be a mapping, not {type(buffers).__name__}")
        object.__setattr__(self, "metadata", {} if metadata is None else metadata)
        object.__setattr__(self, "buffers", buffers)


@dataclass
class StructuredObjectResult:
    """What a read materialized: the object's metadata and its members by name."""

    metadata: dict[str, Any]
    objects: dict[str, Any]


@dataclass(frozen=True)
class StructuredMemberSlice:
    """``[start:end:step]`` along ``axis`` of one member."""

    axis: int
    start: int
    end: int
    step: int = 1


@dataclass(frozen=True)
class StructuredObjectReadSpec:
    """A lazy read plan: which members, and slices of them."""

    ref: Any
    member_names: Optional[tuple[str, ...]] = None
    member_slices: tuple[tuple[str, StructuredMemberSlice], ...] = ()

    def select_members(self, names: Optional[Sequence[str]]) -> "StructuredObjectReadSpec":
        """A new spec that reads only `names` (None: all)."""
        if isinstance(names, str):
            raise TypeError("select_members takes a sequence of member names, not a str")
        return StructuredObjectReadSpec(self.ref, None if names is None else tuple(names),
                                        self.member_slices)

    def slice_member(self, name: str, axis: int, start: int, end: int,
                     step: int = 1) -> "StructuredObjectReadSpec":
        """A new spec with ``[start:end:step]`` along `axis` applied to member `name`."""
        if step == 0:
            raise ValueError("slice step must not be zero")
        slices = dict(self.member_slices)
        slices[name] = StructuredMemberSlice(axis, start, end, step)
        return StructuredObjectReadSpec(self.ref, self.member_names, tuple(slices.items()))

    def member_slice(self, name: str) -> Optional[StructuredMemberSlice]:
        return dict(self.member_slices).get(name)


@dataclass(frozen=True)
class StructuredFieldLocation:
    """Where a DataProto field lives: stage, member, section."""

    stage: str
    member: str
    section: Literal["batch", "non_tensor_batch"]


@dataclass
class MooncakeDataProtoRef:
    """A DataProto (or flat dict) stored as one structured object per stage."""

    batch_size: int
    stage_refs: dict[str, RemoteBundleRef]
    field_index: dict[str, StructuredFieldLocation]
    meta_info: dict[str, Any]
    namespace: str = "default"
    partition: str = "default"
    global_indexes: Optional[list[int]] = None
    encoded_non_tensor: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _RawBuffer:
    ptr: int
    size: int
    owner: Any
    batch_size: Optional[int] = None

    def __len__(self) -> int:
        if self.batch_size is None:
            raise TypeError("tensor object buffer has no batch_size")
        return self.batch_size


def tensor_object_buffer(ptr: int, size: int, owner: Any = None,
                         batch_size: Optional[int] = None) -> _RawBuffer:
    """A member whose bytes are `size` bytes at address `ptr` (kept alive by `owner`
    until the put returns); the only member kind ``copy_mode="zero_copy"`` accepts."""
    if int(size) < 0 or (int(size) > 0 and int(ptr) == 0):
        raise ValueError(f"tensor_object_buffer needs a valid address and size, got "
                         f"ptr={ptr} size={size}")
    return _RawBuffer(int(ptr), int(size), owner, batch_size)


# ---- codecs -------------------------------------------------------------------------
def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional
        return None
    return torch


def _is_tensor(v: Any) -> bool:
    t = type(v)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter") or (
        _torch() is not None and isinstance(v, _torch().Tensor))


def _ragged_kind(seq: Any) -> Optional[str]:
    items = list(seq)
    if len(items) < 2:
        return None
    if all(isinstance(x, np.ndarray) and x.dtype != object for x in items):
        if len({x.dtype.str for x in items}) == 1 and len({x.ndim for x in items}) == 1:
            return "ragged_ndarray"
        return None
    if all(_is_tensor(x) for x in items):
        if len({str(x.dtype) for x in items}) == 1 and len({x.dim() for x in items}) == 1:
            return "ragged_tensor"
    return None


def infer_codec(value: Any) -> str:
    """The codec a value is stored with (module docstring table); "tree" for a dict,
    list or tuple that is not packed as one ragged payload. TypeError when unsupported."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return "json"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, _RawBuffer):
        return "raw_buffer"
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            if value.ndim == 1 and _ragged_kind(value) == "ragged_ndarray":
                return "ragged_ndarray"
            raise TypeError("object ndarrays are supported only as 1-D arrays of 2+ "
                            "ndarrays with one dtype and ndim")
        return "ndarray"
    if isinstance(value, np.generic):
        return "ndarray"
    if _is_tensor(value):
        return "tensor"
    if isinstance(value, (list, tuple)):
        return _ragged_kind(value) or "tree"
    if isinstance(value, Mapping):
        return "tree"
    raise TypeError(f"unsupported value type {type(value).__name__}")


def _tensor_bytes(t: Any) -> tuple[np.ndarray, dict[str, Any]]:
    torch = _torch()
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    flat = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    return flat.numpy(), {"dtype": str(t.dtype), "shape": list(t.shape)}


def _tensor_from(buf: memoryview, dtype: str, shape: Sequence[int]) -> Any:
    torch = _torch()
    if torch is None:
        raise RuntimeError("this member holds a torch tensor: pip install torch")
    dt = getattr(torch, dtype.split(".", 1)[1])
    raw = torch.frombuffer(bytearray(buf), dtype=torch.uint8) if len(buf) else torch.empty(
        0, dtype=torch.uint8)
    return raw.view(dt).reshape(list(shape))


class _Leaf:
    """One payload to write: its sources (contiguous uint8 views) and manifest entry."""

    __slots__ = ("sources", "nbytes", "entry", "owners")

    def __init__(self, sources: list[Any], entry: dict[str, Any], owners: list[Any]):
        self.sources = sources
        self.nbytes = sum(_nbytes(s) for s in sources)
        self.entry = entry
        self.owners = owners


def _nbytes(src: Any) -> int:
    if isinstance(src, _RawBuffer):
        return src.size
    return memoryview(src).nbytes


def _contig(a: np.ndarray) -> np.ndarray:
    """`a` itself when C-contiguous, else a C-contiguous copy; keeps 0-d arrays 0-d
    (np.ascontiguousarray would make them 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def _encode_leaf(value: Any, codec: str) -> _Leaf:
    if codec == "bytes":
        mv = memoryview(value).cast("B") if memoryview(value).ndim != 1 or memoryview(
            value).itemsize != 1 else memoryview(value)
        kind = "bytearray" if isinstance(value, bytearray) else "bytes"
        return _Leaf([mv], {"codec": "bytes", "kind": kind}, [value])
    if codec == "raw_buffer":
        return _Leaf([value], {"codec": "raw_buffer"}, [value.owner])
    if codec == "ndarray":
        scalar = isinstance(value, np.generic)
        a = _contig(np.asarray(value))
        return _Leaf([a.reshape(-1).view(np.uint8)],
                     {"codec": "ndarray", "dtype": a.dtype.str, "shape": list(a.shape),
                      "scalar": scalar}, [a])
    if codec == "tensor":
        raw, meta = _tensor_bytes(value)
        return _Leaf([raw], {"codec": "tensor", **meta}, [raw])
    if codec == "ragged_ndarray":
        rows = [_contig(x) for x in value]
        container = ("objarray" if isinstance(value, np.ndarray)
                     else "tuple" if isinstance(value, tuple) else "list")
        return _Leaf([r.reshape(-1).view(np.uint8) for r in rows],
                     {"codec": "ragged_ndarray", "dtype": rows[0].dtype.str,
                      "shapes": [list(r.shape) for r in rows], "container": container}, rows)
    if codec == "ragged_tensor":
        enc = [_tensor_bytes(x) for x in value]
        return _Leaf([e[0] for e in enc],
                     {"codec": "ragged_tensor", "dtype": enc[0][1]["dtype"],
                      "shapes": [e[1]["shape"] for e in enc],
                      "container": "tuple" if isinstance(value, tuple) else "list"},
                     [e[0] for e in enc])
    raise TypeError(f"unknown codec {codec!r}")


def _decode_leaf(entry: Mapping[str, Any], buf: memoryview) -> Any:
    codec = entry["codec"]
    if codec == "bytes":
        return bytearray(buf) if entry.get("kind") == "bytearray" else bytes(buf)
    if codec == "raw_buffer":
        return bytes(buf)
    if codec == "ndarray":
        a = np.frombuffer(buf, dtype=np.dtype(entry["dtype"])).reshape(entry["shape"]).copy()
        return a[()] if entry.get("scalar") else a
    if codec == "tensor":
        return _tensor_from(buf, entry["dtype"], entry["shape"])
    if codec in ("ragged_ndarray", "ragged_tensor"):
        out, off = [], 0
        if codec == "ragged_ndarray":
            dt = np.dtype(entry["dtype"])
            for shape in entry["shapes"]:
                n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
                out.append(np.frombuffer(buf[off:off + n], dtype=dt).reshape(shape).copy())
                off += n
        else:
            torch = _torch()
            if torch is None:
                raise RuntimeError("this member holds torch tensors: pip install torch")
            itemsize = torch.empty(0, dtype=getattr(torch, entry["dtype"].split(".", 1)[1])
                                   ).element_size()
            for shape in entry["shapes"]:
                n = int(np.prod(shape, dtype=np.int64)) * itemsize
                out.append(_tensor_from(buf[off:off + n], entry["dtype"], shape))
                off += n
        container = entry.get("container", "list")
        if container == "tuple":
            return tuple(out)
        if container == "objarray":
            arr = np.empty(len(out), dtype=object)
            for i, x in enumerate(out):
                arr[i] = x
            return arr
        return out
    raise RuntimeError(f"manifest names an unknown codec {codec!r}")


def _json_check(value: Any, what: str) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} must be JSON-serializable: {e}") from None


def _flatten(value: Any, path: str, leaves: dict[str, _Leaf],
             schema: Optional[FieldSchema] = None) -> dict[str, Any]:
    """The tree descriptor of `value`; payload leaves are added to `leaves` by path."""
    codec = schema.codec if schema is not None else None
    if codec is None:
        try:
            codec = infer_codec(value)
        except TypeError as e:
            raise TypeError(f"member {unescape_path(path)!r}: {e}") from None
    if codec == "json":
        _json_check(value, f"member {unescape_path(path)!r}")
        return {"t": "json", "v": value}
    if codec == "tree":
        if isinstance(value, Mapping):
            items = []
            for k, v in value.items():
                comp = _key_component(k)
                items.append([k, _flatten(v, f"{path}/{comp}", leaves)])
            return {"t": "dict", "items": items}
        if isinstance(value, (list, tuple)):
            kids = [_flatten(v, f"{path}/@{i}", leaves) for i, v in enumerate(value)]
            return {"t": "tuple" if isinstance(value, tuple) else "list", "items": kids}
        raise TypeError(f"member {unescape_path(path)!r}: codec 'tree' needs a dict, list "
                        f"or tuple, not {type(value).__name__}")
    leaves[path] = _encode_leaf(value, codec)
    return {"t": "leaf", "path": path}


def unescape_path(path: str) -> str:
    """A readable form of a member path (for messages)."""
    out = []
    for comp in path.split("/"):
        if comp.startswith("@") or comp.startswith("~"):
            out.append(comp)
        else:
            try:
                out.append(unescape_key_component(comp))
            except (ValueError, UnicodeDecodeError):
                out.append(comp)
    return "/".join(out)


def _rebuild(node: Mapping[str, Any], decoded: Mapping[str, Any]) -> Any:
    t = node["t"]
    if t == "json":
        return node["v"]
    if t == "leaf":
        return decoded[node["path"]]
    if t == "dict":
        return {k: _rebuild(v, decoded) for k, v in node["items"]}
    kids = [_rebuild(v, decoded) for v in node["items"]]
    return tuple(kids) if t == "tuple" else kids


def _leaf_paths(node: Mapping[str, Any]) -> list[str]:
    t = node["t"]
    if t == "leaf":
        return [node["path"]]
    if t == "dict":
        return [p for _, v in node["items"] for p in _leaf_paths(v)]
    if t in ("list", "tuple"):
        return [p for v in node["items"] for p in _leaf_paths(v)]
    return []


def _apply_slice(value: Any, s: StructuredMemberSlice) -> Any:
    if isinstance(value, np.ndarray) or _is_tensor(value):
        if value.ndim == 0:
            raise ValueError("cannot slice a 0-d member")
        axis = s.axis if s.axis >= 0 else value.ndim + s.axis
        if not 0 <= axis < value.ndim:
            raise ValueError(f"slice axis {s.axis} out of range for {value.ndim} dims")
        idx = [slice(None)] * value.ndim
        idx[axis] = slice(s.start, s.end, s.step)
        out = value[tuple(idx)]
        return out.copy() if isinstance(out, np.ndarray) else out.clone()
    if isinstance(value, (list, tuple)):
        if s.axis != 0:
            raise ValueError("a list member can be sliced only along axis 0")
        return value[s.start:s.end:s.step]
    raise ValueError(f"cannot slice a member of type {type(value).__name__}")


# ---- the helper ---------------------------------------------------------------------
class MooncakeBundleTransfer:
    """Structured objects and raw bundles over a store; see the module docstring."""

    def __init__(self, store: Any, key_prefix: str = "bundle",
                 default_chunk_bytes: int = DEFAULT_BUNDLE_CHUNK_BYTES,
                 buffer_pool: Any = None) -> None:
        if int(default_chunk_bytes) <= 0:
            raise ValueError(f"default_chunk_bytes must be positive, got {default_chunk_bytes}")
        self.store = store
        self.key_prefix = _normalize_prefix(key_prefix)
        self.default_chunk_bytes = int(default_chunk_bytes)
        self._pool = buffer_pool
        self._own_pool = False

    # -- staging memory
    def _pool_or_none(self) -> Any:
        if self._pool is None and hasattr(self.store, "register_buffer"):
            from mooncake.buffer_pool import BufferPool

            self._pool = BufferPool(self.store)
            self._own_pool = True
        return self._pool

    def close(self) -> None:
        """Closes the BufferPool this helper made for itself (not one it was given)."""
        if self._own_pool and self._pool is not None:
            self._pool.close()
            self._pool = None
            self._own_pool = False

    # -- keys
    def _new_base(self, partition: str) -> str:
        return f"{self.key_prefix}/{escape_key_component(partition)}/{uuid.uuid4().hex}"

    # -- writing
    def _write(self, base: str, leaves: dict[str, _Leaf], chunk_bytes: Optional[int],
               policy: BundleTransferPolicy, config: Any) -> tuple[dict[str, Any], list[str]]:
        chunk = int(chunk_bytes or self.default_chunk_bytes)
        if chunk <= 0:
            raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
        mode = policy.copy_mode
        if mode not in ("auto", "copy", "zero_copy"):
            raise ValueError(f"unknown copy_mode {mode!r}")
        if mode == "zero_copy":
            bad = [p for p, lf in leaves.items() if lf.entry["codec"] != "raw_buffer"]
            if bad:
                raise ValueError("copy_mode='zero_copy' needs tensor_object_buffer members; "
                                 f"not: {', '.join(unescape_path(p) for p in bad[:5])}")
        # payload keys and chunk plan
        plan: list[tuple[str, str, int, int]] = []  # (path, key, offset in leaf, size)
        entries: dict[str, Any] = {}
        for path, lf in leaves.items():
            chunks = []
            n = max(1, -(-lf.nbytes // chunk))
            for i in range(n):
                off = i * chunk
                size = min(chunk, lf.nbytes - off)
                key = f"{base}/m{path}/{i}"
                chunks.append({"key": key, "size": size})
                plan.append((path, key, off, size))
            entries[path] = {**lf.entry, "nbytes": lf.nbytes, "chunks": chunks}
        written: list[str] = []
        try:
            if mode == "zero_copy":
                self._put_ptrs([(k, leaves[p].sources[0].ptr + off, size)
                                for p, k, off, size in plan], config, written, policy)
            elif mode == "auto" and self._pool_or_none() is not None and hasattr(
                    self.store, "batch_put_from"):
                self._put_staged(leaves, plan, config, written, policy)
            else:
                self._put_copies(leaves, plan, config, written)
        except BaseException:
            self._remove_keys(written)
            raise
        return entries, written

    def _put_ptrs(self, items: list[tuple[str, int, int]], config: Any, written: list[str],
                  policy: BundleTransferPolicy) -> None:
        if not items:
            return
        if policy.put_mode == "parallel":
            groups = [items[i:i + max(1, policy.max_inflight_put)]
                      for i in range(0, len(items), max(1, policy.max_inflight_put))]
        else:
            groups = [items]
        for g in groups:
            keys = [k for k, _, _ in g]
            args = [keys, [p for _, p, _ in g], [s for _, _, s in g]]
            rcs = (self.store.batch_put_from(*args, config) if config is not None
                   else self.store.batch_put_from(*args))
            for k, rc in zip(keys, rcs):
                if rc == 0:
                    written.append(k)
            for k, rc in zip(keys, rcs):
                if rc != 0:
                    raise RuntimeError(f"batch_put_from of {k!r} failed with {rc}")

    def _put_staged(self, leaves: dict[str, _Leaf], plan: list[tuple[str, str, int, int]],
                    config: Any, written: list[str], policy: BundleTransferPolicy) -> None:
        from mooncake._fast_copy import concat_arrays_into

        total = sum(lf.nbytes for lf in leaves.values())
        lease = self._pool.acquire(total)
        try:
            offsets: dict[str, int] = {}
            sources: list[Any] = []
            off = 0
            for path, lf in leaves.items():
                offsets[path] = off
                sources.extend(lf.sources)
                off += lf.nbytes
            if total:
                concat_arrays_into(sources, lease.ptr, total, 0, -1,
                                   4 if total >= (8 << 20) else 1)
            self._put_ptrs([(k, lease.ptr + offsets[p] + o, size) for p, k, o, size in plan],
                           config, written, policy)
        finally:
            lease.release()

    def _put_copies(self, leaves: dict[str, _Leaf], plan: list[tuple[str, str, int, int]],
                    config: Any, written: list[str]) -> None:
        joined: dict[str, memoryview] = {}
        for path, lf in leaves.items():
            if isinstance(lf.sources[0], _RawBuffer):
                import ctypes

                rb = lf.sources[0]
                joined[path] = memoryview(ctypes.string_at(rb.ptr, rb.size))
            elif len(lf.sources) == 1:
                joined[path] = memoryview(lf.sources[0]).cast("B")
            else:
                joined[path] = memoryview(b"".join(bytes(memoryview(s)) for s in lf.sources))
        for path, key, off, size in plan:
            value = joined[path][off:off + size]
            rc = (self.store.put(key, value, config) if config is not None
                  else self.store.put(key, value))
            if rc != 0:
                raise RuntimeError(f"put of {key!r} failed with {rc}")
            written.append(key)

    def _put_manifest(self, base: str, manifest: dict[str, Any], written: list[str],
                      config: Any) -> RemoteBundleRef:
        key = f"{base}/manifest"
        manifest["cleanup_keys"] = list(written)
        blob = json.dumps(manifest, separators=(",", ":")).encode()
        rc = self.store.put(key, blob, config) if config is not None else self.store.put(key, blob)
        if rc != 0:
            self._remove_keys(written)
            raise RuntimeError(f"put of manifest {key!r} failed with {rc}")
        return RemoteBundleRef(manifest_key=key, manifest=manifest)

    # -- reading
    def resolve_manifest(self, ref: Any) -> dict[str, Any]:
        """The manifest of `ref` (fetched when `ref` carries only its key)."""
        if isinstance(ref, RemoteBundleRef):
            if ref.manifest:
                return ref.manifest
            key = ref.manifest_key
        elif isinstance(ref, Mapping) and isinstance(ref.get("manifest_key"), str):
            if ref.get("manifest"):
                return dict(ref["manifest"])
            key = ref["manifest_key"]
        elif isinstance(ref, str):
            key = ref
        else:
            raise TypeError(f"expected a RemoteBundleRef, a mapping with manifest_key or a "
                            f"key, not {type(ref).__name__}")
        blob = self.store.get(key)
        if not blob:
            raise KeyError(f"bundle manifest {key!r} not found")
        manifest = json.loads(bytes(blob))
        if manifest.get("version") != MANIFEST_VERSION:
            raise ValueError(f"unsupported bundle manifest version {manifest.get('version')!r}")
        return manifest

    def _read(self, entries: Mapping[str, Any], paths: Sequence[str]) -> dict[str, Any]:
        """Reads and decodes the payloads of `paths`."""
        chunks = [(p, c["key"], c["size"]) for p in paths for c in entries[p]["chunks"]]
        total = sum(s for _, _, s in chunks)
        pool = self._pool_or_none() if hasattr(self.store, "batch_get_into") else None
        out: dict[str, Any] = {}
        if pool is not None:
            lease = pool.acquire(total)
            try:
                ptrs, off = [], 0
                for _, _, s in chunks:
                    ptrs.append(lease.ptr + off)
                    off += s
                keys = [k for _, k, _ in chunks]
                sizes = [s for _, _, s in chunks]
                got = self.store.batch_get_into(keys, ptrs, sizes) if keys else []
                for k, s, g in zip(keys, sizes, got):
                    if g != s:
                        raise RuntimeError(f"read of payload {k!r} returned {g} (expected {s} "
                                           "bytes); the bundle is incomplete or was removed")
                view = lease.buffer
                off = 0
                for p in paths:
                    n = entries[p]["nbytes"]
                    out[p] = _decode_leaf(entries[p], view[off:off + n])
                    off += n
                del view
            finally:
                lease.release()
            return out
        for p in paths:
            parts = []
            for c in entries[p]["chunks"]:
                b = self.store.get(c["key"])
                if len(b) != c["size"]:
                    raise RuntimeError(f"read of payload {c['key']!r} returned {len(b)} bytes "
                                       f"(expected {c['size']})")
                parts.append(b)
            out[p] = _decode_leaf(entries[p], memoryview(b"".join(parts)))
        return out

    # -- raw bundles
    def put_bundle(self, meta: bytes | bytearray | memoryview, buffers: Mapping[str, Any],
                   partition: str = "default", chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None) -> RemoteBundleRef:
        """Stores raw `meta` bytes plus named byte payloads (buffer-protocol objects or
        tensor_object_buffer) as one bundle."""
        policy = self._policy(policy, max_inflight_put)
        if not isinstance(buffers, Mapping):
            raise TypeError("buffers must be a mapping of name -> bytes-like")
        base = self._new_base(partition)
        leaves: dict[str, _Leaf] = {}
        names: dict[str, str] = {}
        for name, value in buffers.items():
            if not isinstance(name, str):
                raise TypeError(f"bundle buffer names must be str, not {type(name).__name__}")
            codec = "raw_buffer" if isinstance(value, _RawBuffer) else "bytes"
            path = "/" + escape_key_component(name)
            leaves[path] = _encode_leaf(value, codec)
            names[name] = path
        leaves["/%_meta"] = _encode_leaf(bytes(meta), "bytes")
        entries, written = self._write(base, leaves, chunk_bytes, policy, config)
        manifest = {"version": MANIFEST_VERSION, "kind": "bundle", "names": names,
                    "meta_path": "/%_meta", "payloads": entries}
        return self._put_manifest(base, manifest, written, config)

    def get_bundle(self, ref: Any) -> tuple[bytes, dict[str, bytes]]:
        """(meta, {name: bytes}) of a bundle written by put_bundle (ours; upstream reads
        bundles through its structured path)."""
        m = self.resolve_manifest(ref)
        if m.get("kind") != "bundle":
            raise ValueError("not a raw bundle (use read_spec/materialize)")
        paths = [m["meta_path"], *m["names"].values()]
        got = self._read(m["payloads"], paths)
        return bytes(got[m["meta_path"]]), {n: bytes(got[p]) for n, p in m["names"].items()}

    def remove_bundle(self, ref: Any) -> None:
        """Removes every object of a bundle (payloads, then the manifest); objects that
        are already gone are fine. RuntimeError when a removal fails otherwise."""
        m = self.resolve_manifest(ref)
        key = ref.manifest_key if isinstance(ref, RemoteBundleRef) else (
            ref["manifest_key"] if isinstance(ref, Mapping) else ref)
        keys = list(m.get("cleanup_keys") or [c["key"] for e in m["payloads"].values()
                                              for c in e["chunks"]])
        self._remove_keys(keys, strict=True)
        self._remove_keys([key], strict=True)

    def _remove_keys(self, keys: Sequence[str], strict: bool = False) -> None:
        failed = []
        if keys and hasattr(self.store, "batch_remove"):
            rcs = self.store.batch_remove(list(keys), True)
        else:
            rcs = [self.store.remove(k, True) for k in keys]
        for k, rc in zip(keys, rcs):
            if rc not in (0, MISSING_OBJECT_ERROR):
                failed.append((k, rc))
        if strict and failed:
            raise RuntimeError(f"removing {failed[0][0]!r} failed with {failed[0][1]} "
                               f"({len(failed)} keys failed)")

    # -- structured objects
    @staticmethod
    def _policy(policy: Optional[BundleTransferPolicy],
                max_inflight_put: Optional[int]) -> BundleTransferPolicy:
        policy = policy or BundleTransferPolicy()
        if max_inflight_put is not None:
            policy = BundleTransferPolicy(int(max_inflight_put), policy.put_mode,
                                          policy.copy_mode)
        return policy

    def put_structured_object(self, payload: StructuredObjectPayload,
                              partition: str = "default", chunk_bytes: Optional[int] = None,
                              policy: Optional[BundleTransferPolicy] = None,
                              max_inflight_put: Optional[int] = None, config: Any = None,
                              field_schemas: Optional[Mapping[str, FieldSchema]] = None
                              ) -> RemoteBundleRef:
        """Stores `payload` (metadata + named members, each any supported nesting)."""
        if not isinstance(payload, StructuredObjectPayload):
            raise TypeError(f"expected StructuredObjectPayload, not {type(payload).__name__}")
        metadata = dict(payload.metadata)
        _json_check(metadata, "structured object metadata")
        policy = self._policy(policy, max_inflight_put)
        base = self._new_base(partition)
        leaves: dict[str, _Leaf] = {}
        members = {}
        for name, value in payload.buffers.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"member names must be non-empty str, got {name!r}")
            schema = (field_schemas or {}).get(name)
            members[name] = _flatten(value, "/" + escape_key_component(name), leaves, schema)
        entries, written = self._write(base, leaves, chunk_bytes, policy, config)
        manifest = {"version": MANIFEST_VERSION, "kind": "structured", "metadata": metadata,
                    "members": members, "payloads": entries}
        return self._put_manifest(base, manifest, written, config)

    def read_spec(self, ref: Any) -> StructuredObjectReadSpec:
        """A lazy read plan of the whole object (narrow it with select_members and
        slice_member)."""
        return StructuredObjectReadSpec(ref=ref)

    def materialize(self, spec: StructuredObjectReadSpec) -> StructuredObjectResult:
        """Reads the members of `spec` into new objects."""
        return self.materialize_into(spec, None)

    def materialize_into(self, spec: StructuredObjectReadSpec,
                         destinations: Optional[Mapping[str, Any]]) -> StructuredObjectResult:
        """Like materialize, but a member named in `destinations` (an ndarray or tensor
        of the member's output shape and dtype) is copied into that object, which is
        what the result holds. ValueError on a shape/dtype mismatch or a non-array
        member."""
        m = self.resolve_manifest(spec.ref)
        if m.get("kind") != "structured":
            raise ValueError("not a structured object (use get_bundle)")
        members = m["members"]
        names = list(members) if spec.member_names is None else list(spec.member_names)
        unknown = [n for n in names if n not in members]
        if unknown:
            raise KeyError(f"no member(s) {unknown} (members: {sorted(members)})")
        paths = [p for n in names for p in _leaf_paths(members[n])]
        decoded = self._read(m["payloads"], paths)
        objects = {}
        for n in names:
            v = _rebuild(members[n], decoded)
            s = spec.member_slice(n)
            if s is not None:
                v = _apply_slice(v, s)
            if destinations and n in destinations:
                v = _copy_into(n, v, destinations[n])
            objects[n] = v
        return StructuredObjectResult(metadata=dict(m.get("metadata", {})), objects=objects)

    def put_object(self, obj: Any, partition: str = "default",
                   chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None) -> RemoteBundleRef:
        """Stores any supported value: a mapping's items become members; another value
        is wrapped as member "value"."""
        if isinstance(obj, Mapping) and all(isinstance(k, str) and k for k in obj):
            payload = StructuredObjectPayload(metadata={}, buffers=obj)
        else:
            payload = StructuredObjectPayload(metadata={"__mooncake_wrapped_object__": True},
                                              buffers={"value": obj})
        return self.put_structured_object(payload, partition, chunk_bytes, policy,
                                          max_inflight_put, config)

    def get_object(self, ref: Any) -> Any:
        """The value stored by put_object."""
        result = self.materialize(self.read_spec(ref))
        if result.metadata.get("__mooncake_wrapped_object__"):
            return result.objects["value"]
        return result.objects

    @staticmethod
    def release_result(result: Any) -> None:
        """Results here own their memory (nothing is pool-backed): a no-op kept for
        upstream's API."""
        return None

    # -- DataProto-like objects and flat dicts
    def put(self, data: Any, *, type: Literal["dataproto", "dict"] = "dataproto",
            namespace: str = "default", partition: str = "default", stage: str = "default",
            chunk_bytes: Optional[int] = None, policy: Optional[BundleTransferPolicy] = None,
            config: Any = None, field_schemas: Optional[Mapping[str, FieldSchema]] = None
            ) -> MooncakeDataProtoRef:
        """Stores a DataProto-like object (``batch``, ``non_tensor_batch``,
        ``meta_info``) or, with ``type="dict"``, a flat dict of fields (tensors go to
        ``batch``, the rest to ``non_tensor_batch``; a FieldSchema's metadata["section"]
        pins one) as one structured object; returns its ref."""
        batch, non_tensor, meta_info = _sections(data, type, field_schemas)
        batch_size = _batch_size({**batch, **non_tensor})
        ref = MooncakeDataProtoRef(batch_size=batch_size, stage_refs={}, field_index={},
                                   meta_info={}, namespace=namespace, partition=partition)
        return self._put_stage(ref, stage, batch, non_tensor, meta_info, chunk_bytes,
                               policy, config, field_schemas)

    def _put_stage(self, ref: MooncakeDataProtoRef, stage: str, batch: Mapping[str, Any],
                   non_tensor: Mapping[str, Any], meta_info: Mapping[str, Any],
                   chunk_bytes: Optional[int], policy: Optional[BundleTransferPolicy],
                   config: Any, field_schemas: Optional[Mapping[str, FieldSchema]]
                   ) -> MooncakeDataProtoRef:
        """Writes one stage (one structured object) and returns a new ref: `ref`'s
        stages and fields plus this stage's (its fields point here)."""
        if not isinstance(stage, str) or not stage:
            raise ValueError(f"stage must be a non-empty str, got {stage!r}")
        _json_check(dict(meta_info), "meta_info")
        fields = {**{f"batch.{k}": v for k, v in batch.items()},
                  **{f"non_tensor_batch.{k}": v for k, v in non_tensor.items()}}
        stage_ref = self.put_structured_object(
            StructuredObjectPayload(
                metadata={"meta_info": dict(meta_info),
                          "dataproto": {"stage": stage, "namespace": ref.namespace,
                                        "partition": ref.partition}},
                buffers=fields),
            partition=ref.partition, chunk_bytes=chunk_bytes, policy=policy, config=config,
            field_schemas={f"batch.{k}": s for k, s in (field_schemas or {}).items()})
        index = dict(ref.field_index)
        index.update({k: StructuredFieldLocation(stage, f"batch.{k}", "batch") for k in batch})
        index.update({k: StructuredFieldLocation(stage, f"non_tensor_batch.{k}",
                                                 "non_tensor_batch") for k in non_tensor})
        written = set(batch) | set(non_tensor)
        return MooncakeDataProtoRef(
            batch_size=ref.batch_size, stage_refs={**ref.stage_refs, stage: stage_ref},
            field_index=index, meta_info={**ref.meta_info, **dict(meta_info)},
            namespace=ref.namespace, partition=ref.partition,
            global_indexes=None if ref.global_indexes is None else list(ref.global_indexes),
            encoded_non_tensor={k: v for k, v in ref.encoded_non_tensor.items()
                                if k not in written})

    def append_dataproto_fields(self, ref: Any, data: Any, *, stage: str,
                                overwrite: bool = False, chunk_bytes: Optional[int] = None,
                                policy: Optional[BundleTransferPolicy] = None,
                                config: Any = None) -> MooncakeDataProtoRef:
        """Adds the fields of a later stage (a DataProto-like object or an envelope /
        field dict, as :meth:`put`) to the DataProto of `ref` (a ref or an exported
        handle) as one new structured object; the stages already stored are not
        rewritten. Returns a new ref (the old one still names only the old stages).

        The new row-aligned fields must have the ref's batch size. A field name already
        in the ref, or a stage name already in it, is a ValueError unless `overwrite`;
        with `overwrite` an existing stage is replaced as a whole (the data must carry
        every field of that stage; its old objects are removed once the new one is
        written) and fields of other stages named again move to this one. meta_info keys
        are merged (the new values win). Upstream: structured_object_store.py
        append_dataproto_fields (documented behaviour)."""
        ref = _resolve_dataproto_ref(ref)
        batch, non_tensor, meta_info = _sections(data, "dataproto", None)
        names = set(batch) | set(non_tensor)
        size = _batch_size({**batch, **non_tensor}, ref.batch_size if names else None)
        if names and size != ref.batch_size:
            raise ValueError(f"appended fields have batch size {size}, the DataProto has "
                             f"{ref.batch_size}")
        dup = sorted(n for n in names if n in ref.field_index)
        old_stage = ref.stage_refs.get(stage)
        if not overwrite:
            if dup:
                raise ValueError(f"DataProto field(s) {dup} already exist "
                                 "(overwrite=True replaces them)")
            if old_stage is not None:
                raise ValueError(f"DataProto stage {stage!r} already exists "
                                 "(overwrite=True replaces it)")
        elif old_stage is not None:
            kept = sorted(n for n, loc in ref.field_index.items()
                          if loc.stage == stage and n not in names)
            if kept:
                raise ValueError(f"overwriting stage {stage!r} must include existing fields "
                                 f"{kept}")
        new_ref = self._put_stage(ref, stage, batch, non_tensor, meta_info, chunk_bytes,
                                  policy, config, None)
        if old_stage is not None:
            try:
                self.remove_bundle(old_stage)
            except KeyError:
                pass
        return new_ref

    def dataproto_manifest_view(self, ref: Any) -> dict[str, Any]:
        """An introspection view of a DataProto ref (or handle), built from its stage
        manifests: namespace, partition, batch_size, global_indexes, meta_info_keys,
        stages {stage: the stage object's metadata (its "dataproto" entry names the
        stage)}, batch_fields / non_tensor_fields {field: {stage, member, manifest_key,
        spec: the member's manifest node (codec, dtype, shape, ...)}}. Reads each stage
        manifest once (KeyError when one is gone)."""
        ref = _resolve_dataproto_ref(ref)
        manifests = {st: self.resolve_manifest(r) for st, r in ref.stage_refs.items()}
        view: dict[str, Any] = {
            "namespace": ref.namespace, "partition": ref.partition,
            "batch_size": ref.batch_size,
            "global_indexes": None if ref.global_indexes is None else list(ref.global_indexes),
            "meta_info_keys": list(ref.meta_info),
            "stages": {st: dict(m.get("metadata", {})) for st, m in manifests.items()},
            "batch_fields": {}, "non_tensor_fields": {},
        }
        for name, loc in ref.field_index.items():
            m = manifests[loc.stage]
            section = "batch_fields" if loc.section == "batch" else "non_tensor_fields"
            view[section][name] = {"stage": loc.stage, "member": loc.member,
                                   "manifest_key": ref.stage_refs[loc.stage].manifest_key,
                                   "spec": m.get("members", {}).get(loc.member)}
        return view

    def cleanup_dataproto_append(self, previous_ref: Any, appended_ref: Any) -> None:
        """Undoes an append_dataproto_fields whose result is not going to be used
        (upstream: the DataProto catalog calls it when a publication of the appended
        handle is rejected): removes the stage objects `appended_ref` holds that
        `previous_ref` does not (a stage absent from it, or one it names by another
        manifest key); everything `previous_ref` names stays. Either may be a ref or an
        exported handle; objects already gone are fine."""
        prev = _resolve_dataproto_ref(previous_ref)
        new = _resolve_dataproto_ref(appended_ref)
        keep = {r.manifest_key for r in prev.stage_refs.values()}
        for stage_ref in new.stage_refs.values():
            if stage_ref.manifest_key in keep:
                continue
            try:
                self.remove_bundle(stage_ref)
            except KeyError:
                pass

    def put_dataproto(self, data: Any, **kw: Any) -> MooncakeDataProtoRef:
        return self.put(data, type="dataproto", **kw)

    def get(self, ref: Any, *, type: Literal["dataproto", "dict"] = "dataproto",
            fields: Optional[Sequence[str]] = None, data_cls: Any = None,
            destinations: Optional[Mapping[str, Any]] = None,
            rows: Any = None, **_ignored: Any) -> Any:
        """Reads fields of a ref from :meth:`put` (all by default; `rows` a slice or
        StructuredMemberSlice of the batch). ``type="dict"`` gives a flat dict;
        ``"dataproto"`` gives ``data_cls(batch=..., non_tensor_batch=..., meta_info=...)``
        (a SimpleNamespace without data_cls)."""
        if type not in ("dataproto", "dict"):
            raise ValueError(f"unsupported Mooncake payload type: {type!r}")
        ref = _resolve_dataproto_ref(ref)
        wanted = list(ref.field_index) if fields is None else list(fields)
        missing = [f for f in wanted if f not in ref.field_index]
        if missing:
            raise KeyError(f"unknown field(s) {missing}")
        batch, non_tensor = {}, {}
        meta_info = dict(ref.meta_info)
        by_stage: dict[str, list[str]] = {}
        for f in wanted:
            by_stage.setdefault(ref.field_index[f].stage, []).append(f)
        for stage, fs in by_stage.items():
            spec = self.read_spec(ref.stage_refs[stage]).select_members(
                [ref.field_index[f].member for f in fs])
            if rows is not None:
                s = rows if isinstance(rows, StructuredMemberSlice) else StructuredMemberSlice(
                    0, rows.start or 0, ref.batch_size if rows.stop is None else rows.stop,
                    rows.step or 1)
                for f in fs:
                    spec = spec.slice_member(ref.field_index[f].member, s.axis, s.start,
                                             s.end, s.step)
            dest = {ref.field_index[f].member: destinations[f] for f in fs
                    if destinations and f in destinations}
            res = self.materialize_into(spec, dest or None)
            meta_info = {**res.metadata.get("meta_info", {}), **meta_info}
            for f in fs:
                loc = ref.field_index[f]
                (batch if loc.section == "batch" else non_tensor)[f] = res.objects[loc.member]
        if type == "dict":
            return {**batch, **non_tensor}
        cls = data_cls or SimpleNamespace
        return cls(batch=batch, non_tensor_batch=non_tensor, meta_info=meta_info)

    def get_dataproto(self, ref: Any, **kw: Any) -> Any:
        return self.get(ref, type="dataproto", **kw)

    def cleanup_dataproto(self, ref: Any) -> None:
        """Removes every stage bundle of a DataProto ref (or handle)."""
        ref = _resolve_dataproto_ref(ref)
        for stage_ref in ref.stage_refs.values():
            try:
                self.remove_bundle(stage_ref)
            except KeyError:
                pass


def _sections(data: Any, type: str, field_schemas: Optional[Mapping[str, FieldSchema]]
              ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(batch, non_tensor_batch, meta_info) of a put/append payload. ``type="dict"``: a
    flat dict of fields (tensors to batch, the rest to non_tensor_batch; a FieldSchema's
    metadata["section"] pins one). ``"dataproto"``: an object with those attributes, or
    a mapping: an envelope when its keys are among the three section names, else the
    batch fields themselves."""
    if type == "dict":
        if not isinstance(data, Mapping):
            raise TypeError("type='dict' needs a mapping")
        batch, non_tensor, meta_info = {}, {}, {}
        for k, v in data.items():
            section = ((field_schemas or {}).get(k) or FieldSchema("")).metadata.get(
                "section")
            if section is None:
                section = "batch" if _is_tensor(v) else "non_tensor_batch"
            if section == "meta_info":
                meta_info[k] = v
            elif section in ("batch", "non_tensor_batch"):
                (batch if section == "batch" else non_tensor)[k] = v
            else:
                raise ValueError(f"field {k!r}: unknown section {section!r}")
    elif type == "dataproto":
        if isinstance(data, Mapping):
            if data and set(data) <= {"batch", "non_tensor_batch", "meta_info"} and all(
                    v is None or isinstance(v, Mapping) for v in data.values()):
                get = data.get
            else:
                return dict(data), {}, {}
        else:
            def get(name):
                return getattr(data, name, None)
        batch = dict(get("batch") or {})
        non_tensor = dict(get("non_tensor_batch") or {})
        meta_info = dict(get("meta_info") or {})
    else:
        raise ValueError(f"unsupported Mooncake payload type: {type!r}")
    overlap = sorted(set(batch) & set(non_tensor))
    if overlap:
        raise ValueError(f"batch and non_tensor_batch fields overlap: {overlap}")
    return batch, non_tensor, meta_info


def _batch_size(fields: Mapping[str, Any], default: Optional[int] = None) -> int:
    """The common length of the row-aligned fields (0 / default when none has one);
    ValueError when they differ."""
    sizes = {len(v) for v in fields.values() if hasattr(v, "__len__")
             and not isinstance(v, (str, bytes))}
    if len(sizes) > 1:
        raise ValueError(f"fields have different batch sizes: {sorted(sizes)}")
    return sizes.pop() if sizes else (0 if default is None else default)


def _copy_into(name: str, value: Any, dest: Any) -> Any:
    if isinstance(dest, np.ndarray) and isinstance(value, np.ndarray):
        if dest.shape != value.shape or dest.dtype != value.dtype:
            raise ValueError(f"destination for {name!r} is {dest.dtype}{list(dest.shape)}, "
                             f"the member is {value.dtype}{list(value.shape)}")
        np.copyto(dest, value)
        return dest
    if _is_tensor(dest) and _is_tensor(value):
        if tuple(dest.shape) != tuple(value.shape) or dest.dtype != value.dtype:
            raise ValueError(f"destination for {name!r} is {dest.dtype}{list(dest.shape)}, "
                             f"the member is {value.dtype}{list(value.shape)}")
        dest.copy_(value)
        return dest
    raise ValueError(f"member {name!r} ({type(value).__name__}) cannot be materialized into "
                     f"a {type(dest).__name__}")


# ---- DataProto ref handles (JSON-safe) ----------------------------------------------
def is_dataproto_ref_handle(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == DATAPROTO_REF_HANDLE_TYPE


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    raise TypeError(f"DataProto ref handles hold only JSON-safe values, not "
                    f"{type(value).__name__}")


def export_dataproto_ref(ref: MooncakeDataProtoRef) -> dict[str, Any]:
    """A JSON-safe handle of `ref` (type "mooncake_dataproto_ref", version 1, kind
    "bundle_stages", as upstream's)."""
    if not isinstance(ref, MooncakeDataProtoRef):
        raise TypeError(f"expected MooncakeDataProtoRef, got {type(ref).__name__}")
    return {
        "type": DATAPROTO_REF_HANDLE_TYPE, "version": DATAPROTO_REF_HANDLE_VERSION,
        "kind": "bundle_stages", "batch_size": int(ref.batch_size),
        "namespace": ref.namespace, "partition": ref.partition,
        "global_indexes": _json_safe(ref.global_indexes),
        "stage_refs": {s: {"manifest_key": r.manifest_key} for s, r in ref.stage_refs.items()},
        "field_index": {n: {"stage": loc.stage, "member": loc.member, "section": loc.section}
                        for n, loc in ref.field_index.items()},
        "meta_info": _json_safe(ref.meta_info),
        "encoded_non_tensor": _json_safe(ref.encoded_non_tensor),
    }


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"DataProto ref handle {what} must be a mapping")
    return value


def import_dataproto_ref(handle: Mapping[str, Any]) -> MooncakeDataProtoRef:
    """The ref of a handle from export_dataproto_ref; ValueError when it is malformed
    (wrong type/version/kind, empty names, a field of an unknown stage)."""
    if not is_dataproto_ref_handle(handle):
        raise ValueError("not a Mooncake DataProto ref handle")
    if handle.get("version") != DATAPROTO_REF_HANDLE_VERSION:
        raise ValueError(f"unsupported DataProto ref handle version: {handle.get('version')!r}")
    if handle.get("kind") != "bundle_stages":
        raise ValueError(f"unsupported DataProto ref handle kind: {handle.get('kind')!r}")
    stage_refs = {}
    for stage, sref in _mapping(handle.get("stage_refs"), "stage_refs").items():
        key = _mapping(sref, f"stage_refs[{stage!r}]").get("manifest_key")
        if not isinstance(stage, str) or not stage or not isinstance(key, str) or not key:
            raise ValueError("DataProto ref handle stage refs need non-empty names and "
                             "manifest_key values")
        stage_refs[stage] = RemoteBundleRef(manifest_key=key, manifest={})
    index = {}
    for name, raw in _mapping(handle.get("field_index"), "field_index").items():
        loc = _mapping(raw, f"field_index[{name!r}]")
        section, stage, member = loc.get("section"), loc.get("stage"), loc.get("member")
        if section not in ("batch", "non_tensor_batch"):
            raise ValueError(f"invalid DataProto field section: {section!r}")
        if not all(isinstance(x, str) and x for x in (name, stage, member)):
            raise ValueError("DataProto ref handle field locations must be non-empty strings")
        if stage not in stage_refs:
            raise ValueError(f"field {name!r} references unknown stage {stage!r}")
        index[name] = StructuredFieldLocation(stage, member, section)
    gi = handle.get("global_indexes")
    if gi is not None and (not isinstance(gi, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in gi)):
        raise ValueError("DataProto ref handle global_indexes must be a list of integers")
    return MooncakeDataProtoRef(
        batch_size=int(handle["batch_size"]), stage_refs=stage_refs, field_index=index,
        meta_info=dict(_mapping(handle.get("meta_info", {}), "meta_info")),
        namespace=str(handle.get("namespace", "default")),
        partition=str(handle.get("partition", "default")), global_indexes=gi,
        encoded_non_tensor=dict(_mapping(handle.get("encoded_non_tensor", {}),
                                         "encoded_non_tensor")))


export_ref = export_dataproto_ref
import_ref = import_dataproto_ref


def _resolve_dataproto_ref(ref: Any) -> MooncakeDataProtoRef:
    if isinstance(ref, MooncakeDataProtoRef):
        return ref
    if is_dataproto_ref_handle(ref):
        return import_dataproto_ref(ref)
    raise TypeError(f"expected MooncakeDataProtoRef or a DataProto handle, got "
                    f"{type(ref).__name__}")
