"""``mooncake.dataproto_catalog``: which stored DataProto fragment holds each row's fields.

Upstream ships this module next to ``structured_object_store`` (its behaviour is pinned
by upstream's ``mooncake-wheel/tests/test_dataproto_catalog.py``). A training pipeline
stores batches as DataProto refs (``MooncakeBundleTransfer.put``), and different stages
add fields to the same rows at different times; the catalog maps ``(partition, row key)``
to tags and, per field, to the fragment (manifest key, row index) that holds it, so a
reader can plan one read per group of fields that live together. This is our own design
of that contract.

:class:`DataProtoCatalog` (the state; typically served by one process and called
remotely; every method is thread-safe and validates all arguments before changing
anything, raising ``ValueError`` for bad input):

- ``update(partition, keys, tags=None, handle=None)`` merges per-key tags and, with a
  DataProto handle (``export_dataproto_ref``; exactly one stage, ``batch_size ==
  len(keys)``), points every field of the handle at ``(manifest_key, row)`` for those
  keys. Returns ``{"fields": [...]}``, the fields the keys now have.
- ``publish(op_id, partition, keys, tags=None, handle=None)``: the same, but the handle
  is *managed* (the catalog retires it when no row references it any more), and the call
  is idempotent per ``op_id`` until ``ack_publication(op_id)``: a retry returns the first
  result and changes nothing (so a retried publish never resurrects a fragment that a
  later publish replaced). RuntimeError after ``drain()``.
- ``resolve(partition, keys, fields=None)`` -> ``{"fields", "field_groups", "handles"}``:
  fields default to the ones every key has; ``field_groups`` lists fields whose rows live
  in the same places, with ``locations`` ``[(manifest_key, row)]`` in key order;
  ``handles`` maps manifest keys to their handles. Missing keys ("were not found"), a
  field some key lacks ("not ready") or keys without fields are ValueErrors.
- ``remove(partition, keys)`` -> ``{"retired_handles": [...]}``: managed handles no row
  references any more, to be cleaned up by the caller and then acknowledged with
  ``ack_retired(handles)`` (which returns those still unacknowledged).
- ``list(partition=None)`` -> ``{partition: {key: tags}}``; ``drain()`` retires every
  managed handle and makes the catalog refuse publications (terminal).

:class:`DataProtoCatalogTransfer` ``(transfer, catalog_call)``: the client side;
``catalog_call(method, *args, **kw)`` calls the catalog (directly or over any RPC).
``put`` stores data with ``transfer.put`` and publishes it (one retry when the answer is
lost; a publication that still failed stays pending and is retried by ``close()`` and
``drain()``); ``resolve`` returns a plan with a ``read_token`` that keeps its fragments
from being cleaned until ``release_read(token)``; ``remove`` retires rows and cleans up
retired fragments (``transfer.cleanup_dataproto``) once no read uses them;
``attach_results``/``release_result`` release materialized results (one retry); ``drain``
needs no active reads and no pending publications.
"""
from __future__ import annotations

import threading
import uuid
from typing import Any, Callable, Mapping, Optional, Sequence

from mooncake.structured_object_store import export_dataproto_ref, import_dataproto_ref

__all__ = ["DataProtoCatalog", "DataProtoCatalogTransfer"]


def _seq(value: Any, what: str) -> list:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{what} must be a sequence, not {type(value).__name__}")
    return list(value)


def _manifest_key(handle: Mapping[str, Any]) -> str:
    return next(iter(handle["stage_refs"].values()))["manifest_key"]


class DataProtoCatalog:
    """The catalog state; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # partition -> key -> {"tags": dict, "fields": {field: (manifest_key, row)}}
        self._rows: dict[str, dict[str, dict[str, Any]]] = {}
        # manifest_key -> {"handle": dict, "refs": int, "managed": bool}
        self._handles: dict[str, dict[str, Any]] = {}
        self._ops: dict[str, dict[str, Any]] = {}      # op_id -> recorded publish result
        self._retired: dict[str, dict[str, Any]] = {}  # manifest_key -> handle, not acked
        self._drained = False

    # ---- validation -------------------------------------------------------------
    @staticmethod
    def _check_update(keys: Any, tags: Any, handle: Any) -> tuple[list, Optional[list], Any]:
        keys = _seq(keys, "keys")
        if tags is not None:
            tags = _seq(tags, "tags")
            if len(tags) != len(keys):
                raise ValueError(f"tags and keys must have the same length ({len(tags)} != "
                                 f"{len(keys)})")
            for t in tags:
                if not isinstance(t, Mapping):
                    raise ValueError("each tag must be a mapping")
        ref = None
        if handle is not None:
            ref = import_dataproto_ref(handle)  # ValueError for a malformed handle
            if len(ref.stage_refs) != 1:
                raise ValueError(f"a catalog handle must have exactly one stage, it has "
                                 f"{len(ref.stage_refs)}")
            if ref.batch_size != len(keys):
                raise ValueError(f"handle batch_size {ref.batch_size} does not match "
                                 f"{len(keys)} keys")
        return keys, tags, ref

    # ---- mutation (lock held) ---------------------------------------------------
    def _unref(self, manifest_key: str, retired: list) -> None:
        h = self._handles.get(manifest_key)
        if h is None:
            return
        h["refs"] -= 1
        if h["refs"] <= 0:
            del self._handles[manifest_key]
            if h["managed"]:
                self._retired[manifest_key] = h["handle"]
                retired.append(h["handle"])

    def _apply(self, partition: str, keys: list, tags: Optional[list], ref: Any,
               handle: Any, managed: bool, retired: list) -> dict[str, Any]:
        part = self._rows.setdefault(partition, {})
        if ref is not None:
            mkey = next(iter(ref.stage_refs.values())).manifest_key
            h = self._handles.get(mkey)
            if h is None:
                h = self._handles[mkey] = {"handle": dict(handle), "refs": 0,
                                           "managed": managed}
            h["managed"] = h["managed"] or managed
        for i, key in enumerate(keys):
            row = part.setdefault(key, {"tags": {}, "fields": {}})
            if tags is not None:
                row["tags"].update(tags[i])
            if ref is not None:
                for fname in ref.field_index:
                    old = row["fields"].get(fname)
                    row["fields"][fname] = (mkey, i)
                    h["refs"] += 1
                    if old is not None:
                        self._unref(old[0], retired)
        fields: dict[str, None] = {}
        for key in keys:
            for fname in part[key]["fields"]:
                fields.setdefault(fname, None)
        return {"fields": list(fields)}

    # ---- API ----------------------------------------------------------------------
    def update(self, partition: str, keys: Sequence[str], tags: Optional[Sequence] = None,
               handle: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        keys, tags, ref = self._check_update(keys, tags, handle)
        with self._lock:
            retired: list = []
            res = self._apply(partition, keys, tags, ref, handle, False, retired)
            return {**res, "retired_handles": retired}

    def publish(self, op_id: str, partition: str, keys: Sequence[str],
                tags: Optional[Sequence] = None,
                handle: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        with self._lock:
            if self._drained:
                raise RuntimeError("catalog is drained: no more publications")
            if op_id in self._ops:
                return dict(self._ops[op_id])
        keys, tags, ref = self._check_update(keys, tags, handle)
        with self._lock:
            if self._drained:
                raise RuntimeError("catalog is drained: no more publications")
            if op_id in self._ops:
                return dict(self._ops[op_id])
            retired: list = []
            res = self._apply(partition, keys, tags, ref, handle, True, retired)
            self._ops[op_id] = {"fields": res["fields"], "retired_handles": []}
            return {**res, "retired_handles": retired}

    def ack_publication(self, op_id: str) -> dict[str, Any]:
        with self._lock:
            self._ops.pop(op_id, None)
            return {}

    def resolve(self, partition: str, keys: Sequence[str],
                fields: Optional[Sequence[str]] = None) -> dict[str, Any]:
        keys = _seq(keys, "keys")
        if fields is not None:
            fields = _seq(fields, "fields")
        with self._lock:
            part = self._rows.get(partition, {})
            missing = [k for k in keys if k not in part]
            if missing:
                raise ValueError(f"keys {missing[:5]} of partition {partition!r} were not found")
            rows = [part[k] for k in keys]
            if fields is None:
                fields = [f for f in rows[0]["fields"] if all(f in r["fields"] for r in rows)] \
                    if rows else []
                if not fields:
                    raise ValueError(f"keys of partition {partition!r} do not contain any "
                                     "fields in common")
            groups: dict[tuple, list[str]] = {}
            for f in fields:
                locs = []
                for k, r in zip(keys, rows):
                    if f not in r["fields"]:
                        raise ValueError(f"field {f!r} is not ready for key {k!r}")
                    locs.append(r["fields"][f])
                groups.setdefault(tuple(locs), []).append(f)
            handles = {loc[0]: dict(self._handles[loc[0]]["handle"])
                       for locs in groups for loc in locs}
            return {"fields": list(fields),
                    "field_groups": [{"fields": fs, "locations": list(locs)}
                                     for locs, fs in groups.items()],
                    "handles": handles}

    def remove(self, partition: str, keys: Sequence[str]) -> dict[str, Any]:
        keys = _seq(keys, "keys")
        with self._lock:
            part = self._rows.get(partition, {})
            retired: list = []
            for k in keys:
                row = part.pop(k, None)
                if row is None:
                    continue
                for mkey, _ in row["fields"].values():
                    self._unref(mkey, retired)
            if partition in self._rows and not part:
                del self._rows[partition]
            return {"retired_handles": retired}

    def ack_retired(self, handles: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        with self._lock:
            for h in handles:
                self._retired.pop(_manifest_key(h), None)
            return {"retired_handles": list(self._retired.values())}

    def list(self, partition: Optional[str] = None) -> dict[str, dict[str, dict]]:
        with self._lock:
            parts = [partition] if partition is not None else list(self._rows)
            return {p: {k: dict(r["tags"]) for k, r in self._rows[p].items()}
                    for p in parts if self._rows.get(p)}

    def drain(self) -> dict[str, Any]:
        with self._lock:
            self._drained = True
            for mkey, h in list(self._handles.items()):
                if h["managed"]:
                    del self._handles[mkey]
                    self._retired[mkey] = h["handle"]
            for part in self._rows.values():
                for row in part.values():
                    row["fields"] = {f: loc for f, loc in row["fields"].items()
                                     if loc[0] in self._handles}
            self._ops.clear()
            return {"retired_handles": list(self._retired.values())}


class DataProtoCatalogTransfer:
    """The client side of a catalog; see the module docstring."""

    def __init__(self, transfer: Any, catalog_call: Callable[..., Any]) -> None:
        self._transfer = transfer
        self._catalog_call = catalog_call
        self._lock = threading.RLock()
        self._pending_publish: dict[str, tuple] = {}  # op_id -> publish args
        self._pending_ack: set[str] = set()
        self._reads: dict[str, set[str]] = {}         # read token -> manifest keys
        self._deferred: dict[str, dict[str, Any]] = {}  # retired, waiting for reads

    # ---- publication ------------------------------------------------------------
    def _publish(self, op_id: str, attempts: int) -> dict[str, Any]:
        args = self._pending_publish[op_id]
        err: Optional[BaseException] = None
        for _ in range(attempts):
            try:
                res = self._catalog_call("publish", op_id, *args[:2], tags=args[2],
                                         handle=args[3])
                break
            except Exception as e:  # noqa: BLE001 - outcome unknown: retried later
                err = e
        else:
            raise err  # type: ignore[misc]
        with self._lock:
            self._pending_publish.pop(op_id, None)
            self._pending_ack.add(op_id)
        self._retire(res.get("retired_handles") or [])
        self._ack(op_id)
        return res

    def _ack(self, op_id: str) -> None:
        try:
            self._catalog_call("ack_publication", op_id)
        except Exception:  # noqa: BLE001 - acked again by close()
            return
        with self._lock:
            self._pending_ack.discard(op_id)

    def put(self, data: Any, *, partition: str, keys: Sequence[str],
            tags: Optional[Sequence] = None, **put_kw: Any) -> dict[str, Any]:
        """Stores `data` with ``transfer.put(data, partition=..., **put_kw)`` and
        publishes its handle for `keys`; returns the catalog's answer."""
        ref = self._transfer.put(data, partition=partition, **put_kw)
        handle = ref if isinstance(ref, Mapping) else export_dataproto_ref(ref)
        op_id = uuid.uuid4().hex
        with self._lock:
            self._pending_publish[op_id] = (partition, list(keys), tags, handle)
        return self._publish(op_id, attempts=2)

    def _flush(self) -> list[BaseException]:
        errors = []
        for op_id in list(self._pending_publish):
            try:
                self._publish(op_id, attempts=1)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        for op_id in list(self._pending_ack):
            self._ack(op_id)
        return errors

    def close(self) -> None:
        """Retries pending publications and acknowledgements; raises the first error of a
        publication that still fails (it stays pending)."""
        errors = self._flush()
        if errors:
            raise errors[0]

    # ---- reads and cleanup ------------------------------------------------------
    def resolve(self, partition: str, keys: Sequence[str],
                fields: Optional[Sequence[str]] = None) -> dict[str, Any]:
        plan = self._catalog_call("resolve", partition, keys, fields)
        token = uuid.uuid4().hex
        with self._lock:
            self._reads[token] = set(plan["handles"])
        return {**plan, "read_token": token}

    def release_read(self, token: str) -> None:
        with self._lock:
            self._reads.pop(token, None)
        self._retire([])

    def _retire(self, handles: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            for h in handles:
                self._deferred[_manifest_key(h)] = dict(h)
            busy = set().union(*self._reads.values()) if self._reads else set()
            ready = [h for k, h in self._deferred.items() if k not in busy]
        cleaned = []
        for h in ready:
            self._transfer.cleanup_dataproto(h)
            cleaned.append(h)
            with self._lock:
                self._deferred.pop(_manifest_key(h), None)
        if cleaned:
            self._catalog_call("ack_retired", cleaned)

    def remove(self, partition: str, keys: Sequence[str]) -> dict[str, Any]:
        res = self._catalog_call("remove", partition, keys)
        self._retire(res.get("retired_handles") or [])
        return res

    def attach_results(self, output: Any, results: Sequence[Any]) -> Any:
        """Remembers materialized `results` on `output` for release_result(output)."""
        setattr(output, "_mooncake_catalog_results", list(results))
        return output

    def release_result(self, output: Any) -> None:
        """Releases the results attached to `output` (each gets one retry)."""
        for r in getattr(output, "_mooncake_catalog_results", []):
            try:
                self._transfer.release_result(r)
            except Exception:  # noqa: BLE001 - one retry, then the error goes up
                self._transfer.release_result(r)
        setattr(output, "_mooncake_catalog_results", [])

    def drain(self) -> dict[str, Any]:
        """Drains the catalog and cleans up every managed fragment. RuntimeError while
        reads are active or a publication cannot be completed."""
        with self._lock:
            if self._reads:
                raise RuntimeError(f"cannot drain: {len(self._reads)} active read(s)")
        errors = self._flush()
        if errors or self._pending_publish:
            raise RuntimeError(f"cannot drain: publish pending ({errors[0] if errors else ''})")
        res = self._catalog_call("drain")
        self._retire(res.get("retired_handles") or [])
        return res
