"""Backends the replay drives, behind one small interface.

A backend hands out sessions (one per replay worker). A session owns one registered
buffer of `slots` block-sized slots and offers three batch calls whose results follow
mooncake.store's conventions (API.md section 1):

- exist_batch(keys) -> list[int]: 1 exists, 0 absent, negative status code on error;
- get_batch_into(keys, slots) -> list[int]: bytes read into buffer slot slots[j] (the
  object's true size), or a negative code (OBJECT_NOT_FOUND -704 on a miss);
- put_batch(keys, slots) -> list[int]: 0, or a negative code (NO_AVAILABLE_HANDLE -200
  when the pool is full).

Backends: `store` (mooncake.store.MooncakeDistributedStore: ours, or upstream's when
this process runs in upstream's venv) and `redis` (redis-py, pipelined EXISTS/GET/SET).
"""
import http.client
import mmap
import os
import threading
import urllib.parse

import numpy as np

# The status codes: mooncake.store.ErrorCode (upstream's numbers; ours is generated from
# include/mooncake/status.h). Upstream's wheel 0.3.13.post1 (the peer of
# scripts/setup-upstream-peer.sh) exports no ErrorCode, so a replay inside its venv names
# the codes it tests from upstream's documented values (shared/API.md section 1).
try:
    from mooncake.store import ErrorCode
except ImportError:
    import enum

    import mooncake
    if (mooncake.__doc__ or "").startswith("mooncake-c"):
        raise  # ours must export it (tests/integration/test_status_codes.py)

    ErrorCode = enum.IntEnum("ErrorCode", {
        "OK": 0, "INTERNAL_ERROR": -1, "BUFFER_OVERFLOW": -10, "SEGMENT_NOT_FOUND": -101,
        "SEGMENT_ALREADY_EXISTS": -102, "NO_AVAILABLE_HANDLE": -200, "INVALID_KEY": -400,
        "INVALID_PARAMS": -600, "REPLICA_IS_NOT_READY": -703, "OBJECT_NOT_FOUND": -704,
        "OBJECT_ALREADY_EXISTS": -705, "OBJECT_HAS_LEASE": -706, "LEASE_EXPIRED": -707,
        "TRANSFER_FAIL": -800, "CHECKSUM_MISMATCH": -801, "RPC_FAIL": -900,
        "RPC_TIMEOUT": -901, "ETCD_OPERATION_ERROR": -1000})

OK = int(ErrorCode.OK)
INTERNAL_ERROR = int(ErrorCode.INTERNAL_ERROR)
NO_AVAILABLE_HANDLE = int(ErrorCode.NO_AVAILABLE_HANDLE)
OBJECT_NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)
OBJECT_ALREADY_EXISTS = int(ErrorCode.OBJECT_ALREADY_EXISTS)
LEASE_EXPIRED = int(ErrorCode.LEASE_EXPIRED)


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message says why and what to do instead."""


def code_name(code: int) -> str:
    """Upstream name of a status code (mooncake.store.ErrorCode), or the number itself
    when no code has that value."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class SlotBuffer:
    """Page-aligned anonymous memory of `slots` blocks (numpy views: bytes and uint64
    rows). Owned by one session; freed when the session is closed."""

    def __init__(self, slots: int, block_bytes: int):
        self.slots = slots
        self.block_bytes = block_bytes
        self.nbytes = slots * block_bytes
        self._mm = mmap.mmap(-1, self.nbytes)
        self.bytes = np.frombuffer(self._mm, dtype=np.uint8)
        self.rows = self.bytes.view(np.uint64).reshape(slots, block_bytes // 8)
        self.scratch = np.empty_like(self.rows)
        self.ptr = self.bytes.ctypes.data

    def view(self, slot: int) -> memoryview:
        b = self.block_bytes
        return memoryview(self._mm)[slot * b:(slot + 1) * b]

    def close(self):
        self.rows = self.bytes = self.scratch = None
        try:
            self._mm.close()
        except BufferError:
            pass        # a view is still alive; the GC frees it


class Session:
    """One worker's connection and buffer. Subclasses implement the three calls."""
    buffer: SlotBuffer

    def exist_batch(self, keys):
        raise NotImplementedError

    def get_batch_into(self, keys, slots):
        raise NotImplementedError

    def put_batch(self, keys, slots):
        raise NotImplementedError

    def close(self):
        self.buffer.close()


class Backend:
    """Base: name, sessions, and what the backend can tell about itself."""
    name = "?"

    def describe(self) -> dict:
        """Facts for the report (module paths, versions, addresses)."""
        return {}

    def session(self, slots: int, block_bytes: int) -> Session:
        raise NotImplementedError

    def evictions(self) -> int | None:
        """Keys the backend evicted since the replay started, or None if it cannot tell."""
        return None

    def keys_held(self) -> int | None:
        """Keys the backend holds now, or None if it cannot tell."""
        return None

    def sample(self) -> tuple:
        """(keys held, evictions so far), either None when unknown; called about every
        0.1 s during the replay (cli._Occupancy) to follow the pool's occupancy."""
        return self.keys_held(), self.evictions()

    def close(self):
        pass


# ------------------------------------------------------------------------------ redis

class RedisSession(Session):
    def __init__(self, host, port, slots, block_bytes):
        import redis
        self.r = redis.Redis(host=host, port=port, socket_timeout=60)
        self.buffer = SlotBuffer(slots, block_bytes)

    def exist_batch(self, keys):
        p = self.r.pipeline(transaction=False)
        for k in keys:
            p.exists(k)
        return [int(v) if isinstance(v, int) else INTERNAL_ERROR
                for v in p.execute(raise_on_error=False)]

    def get_batch_into(self, keys, slots):
        p = self.r.pipeline(transaction=False)
        for k in keys:
            p.get(k)
        out = []
        B = self.buffer.block_bytes
        data = self.buffer.bytes
        for v, s in zip(p.execute(raise_on_error=False), slots):
            if v is None:
                out.append(OBJECT_NOT_FOUND)
            elif isinstance(v, bytes):
                n = min(len(v), B)
                data[s * B:s * B + n] = np.frombuffer(v, dtype=np.uint8, count=n)
                out.append(len(v))
            else:
                out.append(INTERNAL_ERROR)
        return out

    def put_batch(self, keys, slots):
        p = self.r.pipeline(transaction=False)
        for k, s in zip(keys, slots):
            p.set(k, self.buffer.view(s))
        out = []
        for v in p.execute(raise_on_error=False):
            if v is True:
                out.append(OK)
            elif isinstance(v, Exception) and "OOM" in str(v):
                out.append(NO_AVAILABLE_HANDLE)
            else:
                out.append(INTERNAL_ERROR)
        return out

    def close(self):
        try:
            self.r.close()
        finally:
            super().close()


class RedisBackend(Backend):
    """A redis-server at host:port (started by the tool or given with --redis-addr)."""
    name = "redis"

    def __init__(self, host: str, port: int):
        try:
            import redis
        except ImportError:
            raise BackendUnavailable(
                "the redis backend needs redis-py: pip install redis") from None
        self.host, self.port = host, port
        self.admin = redis.Redis(host=host, port=port, socket_timeout=30)
        try:
            info = self.admin.info("server")
        except redis.RedisError as e:
            raise BackendUnavailable(f"cannot reach redis at {host}:{port}: {e}") from None
        self.version = info.get("redis_version")
        self._evicted0 = int(self.admin.info("stats").get("evicted_keys", 0))

    def describe(self):
        import redis
        mem = self.admin.config_get("maxmemory*")
        try:
            from redis.utils import HIREDIS_AVAILABLE as hiredis
        except ImportError:
            hiredis = None
        return {"redis_server_version": self.version, "redis_py_version": redis.__version__,
                "hiredis_parser": hiredis,
                "address": f"{self.host}:{self.port}", "maxmemory": int(mem["maxmemory"]),
                "maxmemory_policy": mem.get("maxmemory-policy"),
                "maxmemory_samples": int(mem.get("maxmemory-samples", 0))}

    def session(self, slots, block_bytes):
        return RedisSession(self.host, self.port, slots, block_bytes)

    def evictions(self):
        return int(self.admin.info("stats").get("evicted_keys", 0)) - self._evicted0

    def keys_held(self):
        return int(self.admin.dbsize())

    def close(self):
        self.admin.close()


# ------------------------------------------------------------------------------ store

class StoreSession(Session):
    """One MooncakeDistributedStore client (contributes no segment) with its buffer
    registered through register_buffer."""

    def __init__(self, master_addr, metadata_url, slots, block_bytes, local_buffer_size):
        from mooncake.store import MooncakeDistributedStore
        self.store = MooncakeDistributedStore()
        rc = self.store.setup("127.0.0.1", metadata_url, 0, local_buffer_size, "tcp", "",
                              master_addr)
        if rc != 0:
            raise BackendUnavailable(
                f"MooncakeDistributedStore.setup(master={master_addr}, metadata="
                f"{metadata_url}) returned {rc} ({code_name(rc)})")
        self.buffer = SlotBuffer(slots, block_bytes)
        rc = self.store.register_buffer(self.buffer.ptr, self.buffer.nbytes)
        if rc != 0:
            self.store.close()
            raise BackendUnavailable(f"register_buffer({self.buffer.nbytes} bytes) returned "
                                     f"{rc} ({code_name(rc)})")
        self._registered = True
        # every slot's address and size, made once: the calls below slice them (the
        # replay passes range(m) for the first m slots) instead of building two lists
        # per call; this adapter is shared with upstream's backend
        b = block_bytes
        self._addrs = [self.buffer.ptr + s * b for s in range(slots)]
        self._sizes = [b] * slots

    def _ptrs(self, slots):
        if isinstance(slots, range) and slots.start == 0 and slots.step == 1:
            return self._addrs[:len(slots)]
        return [self._addrs[s] for s in slots]

    def exist_batch(self, keys):
        return list(self.store.batch_is_exist(keys))

    def get_batch_into(self, keys, slots):
        return list(self.store.batch_get_into(keys, self._ptrs(slots),
                                              self._sizes[:len(keys)]))

    def put_batch(self, keys, slots):
        return [OK if rc == OBJECT_ALREADY_EXISTS else rc for rc in
                self.store.batch_put_from(keys, self._ptrs(slots), self._sizes[:len(keys)])]

    def close(self):
        try:
            if self._registered:
                self.store.unregister_buffer(self.buffer.ptr)
                self._registered = False
            self.store.close()
        finally:
            super().close()


def check_store_importable() -> str:
    """Returns mooncake.store's file path, or raises BackendUnavailable saying why the
    store backend cannot run."""
    try:
        import mooncake.store as ms
    except ImportError as e:
        raise BackendUnavailable(f"cannot import mooncake.store: {e}") from None
    if not hasattr(ms, "MooncakeDistributedStore"):
        raise BackendUnavailable(
            f"mooncake.store ({ms.__file__}) has no MooncakeDistributedStore yet: the store "
            "client is not built. Use --backend redis (or --backend upstream) meanwhile.")
    return ms.__file__


class StoreBackend(Backend):
    """mooncake.store.MooncakeDistributedStore against a master at master_addr with the
    metadata service at metadata_url. metrics_url (optional): the master's Prometheus
    /metrics, read for evictions (master_evicted_key_count) and keys (master_key_count)."""

    def __init__(self, master_addr: str, metadata_url: str, metrics_url: str | None = None,
                 label: str = "store", local_buffer_size: int = 16 << 20):
        self.name = label
        self.module_file = check_store_importable()
        self.master_addr, self.metadata_url = master_addr, metadata_url
        self.metrics_url = metrics_url
        self.local_buffer_size = local_buffer_size
        self._mconn, self._mlock = None, threading.Lock()   # sample()'s connection
        m = self._metrics()
        self._evicted0 = int(m.get("master_evicted_key_count", 0)) if m else 0
        self._disk0 = {k: int(m.get(k, 0)) for k in self.TIER_METRICS} if m else {}

    # the master's disk-tier counters (docs/ssd-tier.md), reported as deltas over the run
    TIER_METRICS = ("master_disk_hits_total", "master_offload_successes_total",
                    "master_offload_failures_total", "master_promotion_successes_total")

    def disk_tier(self) -> dict | None:
        """The master's disk-tier counters since the start ("disk_hits": gets answered by
        a LOCAL_DISK replica only), and its disk gauges now; None when the master exports
        none (no metrics URL, or a master without a disk tier)."""
        m = self._metrics()
        if not m or "master_disk_hits_total" not in m:
            return None
        out = {k.replace("master_", "").replace("_total", ""): int(m.get(k, 0)) -
               self._disk0.get(k, 0) for k in self.TIER_METRICS}
        out["disk_only_keys"] = int(m.get("master_disk_only_keys", 0))
        out["disk_replica_bytes"] = int(m.get("master_disk_replica_bytes", 0))
        return out

    def _metrics(self) -> dict | None:
        """Every unlabelled series of the master's /metrics as {name: float}, or None when
        it cannot be read (no metrics URL, the master gone)."""
        text = self._metrics_text()
        if text is None:
            return None
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                parts = line.split()
                if len(parts) >= 2 and "{" not in parts[0]:
                    try:
                        out[parts[0]] = float(parts[1])
                    except ValueError:
                        pass
        return out

    def describe(self):
        d = {"module": self.module_file, "master": self.master_addr,
             "metadata": self.metadata_url}
        try:
            from importlib.metadata import version
            for dist in ("mooncake-c", "mooncake-transfer-engine-non-cuda",
                         "mooncake-transfer-engine"):
                try:
                    d["distribution"] = f"{dist} {version(dist)}"
                    break
                except Exception:
                    continue
        except ImportError:
            pass
        return d

    def session(self, slots, block_bytes):
        return StoreSession(self.master_addr, self.metadata_url, slots, block_bytes,
                            self.local_buffer_size)

    def evictions(self):
        m = self._metrics()
        if not m or "master_evicted_key_count" not in m:
            return None
        return int(m["master_evicted_key_count"]) - self._evicted0

    def keys_held(self):
        m = self._metrics()
        if not m or "master_key_count" not in m:
            return None
        return int(m["master_key_count"])

    SAMPLED = ("master_key_count", "master_evicted_key_count")
    SAMPLE_TIMEOUT_S = 1.0

    def sample(self):
        """(keys held, evictions since the start), from the master's /metrics over one
        kept-alive HTTP connection, reading only the two series: it runs ten times a
        second beside the replay, which shares the CPUs (a new connection and a parse of
        every series cost 2.6 ms a call; docs/performance.md "Session 9")."""
        text = self._metrics_text()
        if text is None:
            return None, None
        got = {}
        for name in self.SAMPLED:
            at = text.find("\n" + name + " ")
            if at >= 0:
                end = text.find("\n", at + 1)
                try:
                    got[name] = int(float(text[at + len(name) + 2:end if end > 0 else None]))
                except ValueError:
                    pass
        kh, ev = got.get(self.SAMPLED[0]), got.get(self.SAMPLED[1])
        return kh, None if ev is None else ev - self._evicted0

    def _metrics_text(self) -> str | None:
        """The /metrics body (prefixed with a newline, so every series starts one), over a
        connection kept for the next call (sample()'s, ten a second, and _metrics()'s at
        the start and the end; SAMPLE_TIMEOUT_S each); None when it cannot be read (the
        connection is then dropped and made again next time)."""
        if not self.metrics_url:
            return None
        u = urllib.parse.urlsplit(self.metrics_url)
        with self._mlock:                 # the sampler thread, then the last sample
            for _ in (0, 1):
                reused = self._mconn is not None
                if not reused:
                    self._mconn = http.client.HTTPConnection(
                        u.hostname, u.port or 80, timeout=self.SAMPLE_TIMEOUT_S)
                try:
                    self._mconn.request("GET", u.path or "/")
                    resp = self._mconn.getresponse()
                    body = resp.read()
                    if resp.status != 200:
                        return None
                    return "\n" + body.decode("utf-8", "replace")
                except (OSError, http.client.HTTPException) as e:
                    self._mconn.close()
                    self._mconn = None
                    # once more only when a kept connection had been closed by the server
                    # (not after a timeout: a hung master must not stall the end of a run)
                    if not (reused and isinstance(e, (http.client.RemoteDisconnected,
                                                      ConnectionResetError,
                                                      BrokenPipeError))):
                        return None
        return None

    def close(self):
        """Closes the kept /metrics connection (a later call makes a new one)."""
        with self._mlock:
            if self._mconn is not None:
                self._mconn.close()
                self._mconn = None

    def capacity_bytes(self) -> int | None:
        """Bytes of all segments mounted in the cluster (master_total_capacity_bytes), or
        None without a metrics URL."""
        m = self._metrics()
        if not m or "master_total_capacity_bytes" not in m:
            return None
        return int(m["master_total_capacity_bytes"])


def shm_entries() -> set:
    """Names in /dev/shm now (to check that a run leaves none behind)."""
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()
