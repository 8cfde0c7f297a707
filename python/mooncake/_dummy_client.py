"""The dummy client: ``MooncakeDistributedStore.setup_dummy(mem_pool_size, local_buffer_size,
server_address)`` (upstream store_py.cpp setup_dummy / DummyClient, upstream-mooncake.md
§1.3).

A dummy client owns no segment. It forwards its store calls to a resource-owning "real
client" of the same host and user (the ``mooncake_client`` program) over the abstract
Unix socket ``@mooncake_client_<port>.sock``, ``<port>`` being the port of
``server_address`` (``"host:50052"``; the host part is not used: the channel is local).
Bulk data goes through a shared-memory pool of ``mem_pool_size`` bytes that this process
creates (memfd) and hands to the real client with its first message (SCM_RIGHTS): the
real client maps it and reads replicas straight into it / writes them straight from it,
so ``get_into``/``put_from``/``batch_*`` on pool memory (``alloc_from_mem_pool``) copy the
bytes once, with no copy through the socket. Other memory and ``put``/``get`` travel in
the request itself (one more copy).

Wire format: ``src/client/dummy_ipc.h`` (frames of a 16-byte header and a body; the
reply starts with an i64 status). One request at a time per dummy (a lock).

When the real client goes away, calls fail with the upstream codes of a failed RPC
(-900; ``get`` gives ``b""``, the batch calls a -900 per key) and one warning is logged;
each later call tries to reconnect (re-sending the same pool), so the dummy works again
once a real client serves that port. Segment management calls return -1 (``ret`` -1 in
the mount dicts), as upstream's DummyClient. Methods a dummy does not forward raise
``RuntimeError`` naming the method (today: the ranged and session calls,
``batch_replica_clear``, ``init_all``, ``put_from_with_metadata``).

Forwarded besides the byte calls: the multi-buffer calls (``BATCH_PUT_MULTI`` /
``BATCH_GET_MULTI``: pool buffers are gathered/scattered by the real client itself, other
memory travels inline), ``get_replica_desc`` / ``batch_get_replica_desc`` (one
``REPLICA_DESC`` request; the same ``ReplicaDescriptor`` objects a real client returns,
naming the real client's segments), ``get_buffer`` / ``batch_get_buffer`` (the bytes in a
``DummyBufferHandle`` of this process: ptr(), size(), the buffer protocol), and the tensor
calls (the codec over the forwarded byte calls; ``_store_extras`` runs its parallel tensor
IO and safetensors helpers over this view).

``local_buffer_size`` is checked (0, or 1 KiB..1 TiB) and needs no memory here: a dummy
stages nothing (pool calls need no staging, the others carry their bytes in the message).

Implementation note: ``setup_dummy`` (C, ``src/python/store_dummy.c``) keeps the
``_DummyView`` this module makes in the store object; while it is there, attribute
lookups of public names on the store go to the view (its methods forward, or refuse).
``close()`` drops it, and the object is a fresh, not-set-up store again.
"""
import ctypes
import fcntl
import logging
import mmap
import os
import socket
import struct
import threading
import weakref

from mooncake.store import MooncakeDistributedStore

log = logging.getLogger("mooncake.dummy")

MAGIC = 0x4344434D
VERSION = 1
HDR = struct.Struct("<IHHII")
REPLY = 0x8000
MAX_BODY = 64 << 20
MAX_POOL = 1 << 40

(HELLO, PUT, GET, PUT_FROM, GET_INTO, BATCH_PUT_FROM, BATCH_GET_INTO, IS_EXIST,
 BATCH_IS_EXIST, REMOVE, REMOVE_ALL, GET_SIZE, STATS, BATCH_REMOVE, UPSERT, UPSERT_FROM,
 BATCH_UPSERT_FROM, REMOVE_BY_REGEX, BATCH_PUT_MULTI, BATCH_GET_MULTI,
 REPLICA_DESC) = range(1, 22)
MAX_SEGS = 4096  # segments per key of the multi-buffer ops (dummy_ipc.h)

OK = 0
INVALID_PARAMS = -600
RPC_FAIL = -900
INTERNAL_ERROR = -1

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_ROW = struct.Struct("<QQ")


def socket_name(port):
    return f"\0mooncake_client_{port}.sock"


def _port_of(server_address):
    if not isinstance(server_address, str):
        raise TypeError("setup_dummy(): argument 'server_address' must be str")
    text = server_address.rsplit(":", 1)[-1] if ":" in server_address else server_address
    try:
        port = int(text)
    except ValueError:
        return None
    return port if 0 < port < 65536 else None


def _key(k):
    if isinstance(k, str):
        return k.encode()
    if isinstance(k, (bytes, bytearray)):
        return bytes(k)
    raise TypeError(f"key must be str or bytes, not {type(k).__name__}")


def _kb(k):
    b = _key(k)
    return _U32.pack(len(b)) + b


class _Gone(Exception):
    """The real client is not there (connect refused, EOF, reset)."""


class _Conn:
    """One dummy's channel: socket, pool, bump allocator over the pool."""

    def __init__(self, port, pool_size):
        self.port = port
        self.lock = threading.Lock()
        self.sock = None
        self.warned = False
        self.next_id = 1
        self.pool_size = pool_size
        self.pool_fd = -1
        self.pool = None
        self.pool_base = 0
        self.pool_used = 0
        self.server_name = ""
        if pool_size:
            self.pool_fd = os.memfd_create("mooncake_dummy_pool",
                                           os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(self.pool_fd, pool_size)
            # the real client maps only a pool that cannot shrink under it (SIGBUS)
            fcntl.fcntl(self.pool_fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self.pool = mmap.mmap(self.pool_fd, pool_size)
            self._pool_view = (ctypes.c_char * pool_size).from_buffer(self.pool)
            self.pool_base = ctypes.addressof(self._pool_view)

    # ---- connection ----
    def _connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(socket_name(self.port))
            body = _U64.pack(self.pool_size)
            msg = HDR.pack(MAGIC, VERSION, HELLO, 0, len(body)) + body
            if self.pool_fd >= 0:
                socket.send_fds(s, [msg], [self.pool_fd])
            else:
                s.sendall(msg)
            st, rest = self._recv(s, HELLO, 0)
            if st != OK:
                raise _Gone(f"the real client refused this dummy ({st})")
            n = _U32.unpack_from(rest)[0]
            self.server_name = bytes(rest[4:4 + n]).decode()
        except (OSError, _Gone):
            s.close()
            raise
        self.sock = s
        if self.warned:
            log.warning("dummy client: reconnected to the real client on @mooncake_client_%d"
                        ".sock", self.port)
        self.warned = False

    def _recv_exact(self, s, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = s.recv_into(view[got:])
            if not k:
                raise _Gone("the real client closed the connection")
            got += k
        return buf

    def _recv(self, s, op, rid):
        h = self._recv_exact(s, HDR.size)
        magic, ver, rop, rrid, blen = HDR.unpack(h)
        if magic != MAGIC or ver != VERSION or rop != (op | REPLY) or rrid != rid or \
                blen < 8 or blen > MAX_BODY:
            raise _Gone("malformed reply from the real client")
        body = self._recv_exact(s, blen)
        return _I64.unpack_from(body)[0], memoryview(body)[8:]

    def call(self, op, body):
        """(status, rest of the reply body); raises _Gone when no real client answers."""
        with self.lock:
            if self.sock is None:
                try:
                    self._connect()
                except (OSError, _Gone) as e:
                    self._lost(e)
            rid = self.next_id = (self.next_id + 1) & 0xFFFFFFFF
            try:
                self.sock.sendall(HDR.pack(MAGIC, VERSION, op, rid, len(body)) + body)
                return self._recv(self.sock, op, rid)
            except (OSError, _Gone) as e:
                self.sock.close()
                self.sock = None
                self._lost(e)

    def _lost(self, e):
        if not self.warned:
            log.warning("dummy client: no real client on @mooncake_client_%d.sock (%s); "
                        "calls fail with -900 until one serves that port", self.port, e)
            self.warned = True
        raise _Gone(str(e))

    def close(self):
        with self.lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None
        if self.pool is not None:
            del self._pool_view
            self.pool.close()
            self.pool = None
        if self.pool_fd >= 0:
            os.close(self.pool_fd)
            self.pool_fd = -1

    # ---- pool ----
    def alloc(self, size):
        with self.lock:
            off = (self.pool_used + 63) & ~63
            if size <= 0 or self.pool is None or off + size > self.pool_size:
                return 0
            self.pool_used = off + size
            return self.pool_base + off

    def pool_off(self, ptr, size):
        """Offset of [ptr, ptr+size) in the pool, or None."""
        if self.pool is None:
            return None
        off = ptr - self.pool_base
        if off < 0 or size < 0 or off + size > self.pool_size:
            return None
        return off


def _replicas(config):
    if config is None:
        return 1
    n = getattr(config, "replica_num", 1)
    return int(n) if n else 1


def _ints(rest, n):
    cnt = _U32.unpack_from(rest)[0]
    if cnt != n:
        raise _Gone("malformed batch reply from the real client")
    return list(struct.unpack_from(f"<{n}q", rest, 4))


def _buffer_bytes(value):
    mv = memoryview(value)
    return mv.tobytes() if not (mv.c_contiguous and mv.format == "B") else bytes(mv)


def _pool_rows(c, keys, buffer_ptrs, sizes):
    """A batch's request rows: the count, then (key, pool offset, size) per row; rows whose
    buffer is not in the shared pool get an offset the real client refuses and are listed
    in `outside` (the caller does them one by one, the bytes in the message)."""
    parts = [_U32.pack(len(keys))]
    outside = []
    for i, (k, p, s) in enumerate(zip(keys, buffer_ptrs, sizes)):
        off = c.pool_off(p, s)
        if off is None:
            outside.append(i)
            off = 1 << 63
        parts += (_kb(k), _ROW.pack(off, s))
    return parts, outside


def _conn(view):
    c = view._c
    if c is None:
        raise RuntimeError("dummy client: closed")
    return c


# ---- the tensor calls: the codec (mooncake._tensor_codec, upstream's 304-byte header)
# over the dummy's byte calls above, same conventions as the real client's C methods
# (store_tensor*.c): writers 0 / negative (-600 for a tensor the codec refuses), readers a
# tensor or None, batch forms one entry per key. Pool memory (the *_from / *_into forms
# on alloc_from_mem_pool memory) moves without a copy here; tensors from torch memory
# travel inline in the request (one copy). ----

def _codec():
    from mooncake import _tensor_codec
    return _tensor_codec


def _skey(key):
    return key.decode() if isinstance(key, (bytes, bytearray)) else key


class _TensorCalls:
    def _write_items(self, items, config, upsert):
        """items: [(object key, header, payload, nbytes)]: 0 or the first failure."""
        for okey, header, payload, _ in items:
            r = (self.upsert_parts if upsert else self.put_parts)(
                okey, header, payload, config=config)
            if r != 0:
                return r
        return 0

    def _tensor_put(self, fn, key, tensor, config=None, upsert=False, tp_size=1,
                    split_dim=0):
        codec = _codec()
        try:
            items = codec.encode_tp(_skey(key), tensor, tp_size, split_dim)
        except codec.TensorCodecError as e:
            log.error("%s: %s", fn, e)
            return INVALID_PARAMS
        return self._write_items(items, config, upsert)

    def _tensor_puts(self, fn, keys, tensors, config=None, upsert=False, tp_size=1,
                     split_dim=0):
        keys, tensors = list(keys), list(tensors)
        if len(keys) != len(tensors):
            return [INVALID_PARAMS] * max(len(keys), len(tensors))
        return [self._tensor_put(fn, k, t, config, upsert, tp_size, split_dim)
                for k, t in zip(keys, tensors)]

    def put_tensor(self, key, tensor):
        return self._tensor_put("put_tensor", key, tensor)

    def upsert_tensor(self, key, tensor):
        return self._tensor_put("upsert_tensor", key, tensor, upsert=True)

    def pub_tensor(self, key, tensor, config=None):
        return self._tensor_put("pub_tensor", key, tensor, config)

    def upsert_pub_tensor(self, key, tensor, config=None):
        return self._tensor_put("upsert_pub_tensor", key, tensor, config, True)

    def batch_put_tensor(self, keys, tensors_list):
        return self._tensor_puts("batch_put_tensor", keys, tensors_list)

    def batch_upsert_tensor(self, keys, tensors_list):
        return self._tensor_puts("batch_upsert_tensor", keys, tensors_list, upsert=True)

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        return self._tensor_puts("batch_pub_tensor", keys, tensors_list, config)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        return self._tensor_puts("batch_upsert_pub_tensor", keys, tensors_list, config, True)

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        return self._tensor_put("put_tensor_with_tp", key, tensor, None, False, tp_size,
                                split_dim)

    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1,
                           split_dim=0):
        return self._tensor_put("pub_tensor_with_tp", key, tensor, config, False, tp_size,
                                split_dim)

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1,
                                 split_dim=0):
        return self._tensor_puts("batch_put_tensor_with_tp", base_keys, tensors_list, None,
                                 False, tp_size, split_dim)

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0,
                                 tp_size=1, split_dim=0):
        return self._tensor_puts("batch_pub_tensor_with_tp", base_keys, tensors_list,
                                 config, False, tp_size, split_dim)

    # -- from caller memory holding [header][data] --
    def _object_at(self, fn, ptr, size):
        """The header of the object at (ptr, size), or None (logged) when invalid."""
        codec = _codec()
        try:
            return codec.header_at(ptr, size)
        except codec.TensorCodecError as e:
            log.error("%s: %s", fn, e)
            return None

    def _tensor_from(self, fn, key, ptr, size, upsert, tp_rank=0, tp_size=1, split_dim=0):
        hdr = self._object_at(fn, ptr, size)
        if hdr is None:
            return INVALID_PARAMS
        codec = _codec()
        put = self.upsert_from if upsert else self.put_from
        if tp_size <= 1:
            return put(key, ptr, size)
        if hdr.layout_kind == codec.LAYOUT_SHARD:  # already shard tp_rank: stored as is
            if not 0 <= tp_rank < tp_size:
                log.error("%s: tp_rank %d outside 0..%d", fn, tp_rank, tp_size - 1)
                return INVALID_PARAMS
            return put(codec.tp_key(_skey(key), tp_rank), ptr, size)
        try:
            items = codec.encode_tp_from(_skey(key), ptr, size, tp_size, split_dim)
        except codec.TensorCodecError as e:
            log.error("%s: %s", fn, e)
            return INVALID_PARAMS
        return self._write_items(items, None, upsert)

    def _tensors_from(self, fn, keys, ptrs, sizes, upsert, tp_rank=0, tp_size=1,
                      split_dim=0):
        keys, ptrs, sizes = list(keys), list(ptrs), list(sizes)
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n or \
                any(self._object_at(fn, p, s) is None for p, s in zip(ptrs, sizes)):
            return [INVALID_PARAMS] * n  # any invalid buffer: all -600, as upstream
        if tp_size <= 1:
            return (self.batch_upsert_from if upsert else self.batch_put_from)(
                keys, ptrs, sizes)
        return [self._tensor_from(fn, k, p, s, upsert, tp_rank, tp_size, split_dim)
                for k, p, s in zip(keys, ptrs, sizes)]

    def put_tensor_from(self, key, buffer_ptr, size):
        return self._tensor_from("put_tensor_from", key, buffer_ptr, size, False)

    def upsert_tensor_from(self, key, buffer_ptr, size):
        return self._tensor_from("upsert_tensor_from", key, buffer_ptr, size, True)

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._tensors_from("batch_put_tensor_from", keys, buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._tensors_from("batch_upsert_tensor_from", keys, buffer_ptrs, sizes,
                                  True)

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1,
                                split_dim=0):
        return self._tensor_from("put_tensor_with_tp_from", key, buffer_ptr, size, False,
                                 tp_rank, tp_size, split_dim)

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0,
                                      tp_size=1, split_dim=0):
        return self._tensors_from("batch_put_tensor_with_tp_from", base_keys, buffer_ptrs,
                                  sizes, False, tp_rank, tp_size, split_dim)

    # -- readers --
    def _read_key(self, key, tp_rank, tp_size):
        codec = _codec()
        try:
            return codec.tp_read_key(_skey(key), tp_rank, tp_size)
        except codec.TensorCodecError as e:
            log.error("get_tensor_with_tp: %s", e)
            return None

    def get_tensor(self, key):
        return _codec().try_decode(self.get(key))

    def batch_get_tensor(self, keys):
        return [self.get_tensor(k) for k in keys]

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        k = self._read_key(key, tp_rank, tp_size)
        return None if k is None else self.get_tensor(k)

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        return [self.get_tensor_with_tp(k, tp_rank, tp_size) for k in base_keys]

    def get_tensor_into(self, key, buffer_ptr, size):
        n = self.get_into(key, buffer_ptr, size)
        if n <= 0:
            return None
        codec = _codec()
        try:
            return codec.view_at(buffer_ptr, n)
        except codec.TensorCodecError:
            return None

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        keys, ptrs, sizes = list(keys), list(buffer_ptrs), list(sizes)
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n:
            return [INVALID_PARAMS] * n
        codec = _codec()
        out = []
        for p, r in zip(ptrs, self.batch_get_into(keys, ptrs, sizes)):
            try:
                out.append(codec.view_at(p, r) if r > 0 else None)
            except codec.TensorCodecError:
                out.append(None)
        return out

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1,
                                split_dim=0):
        k = self._read_key(key, tp_rank, tp_size)
        return None if k is None else self.get_tensor_into(k, buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0,
                                      tp_size=1):
        keys = [self._read_key(k, tp_rank, tp_size) for k in base_keys]
        if any(k is None for k in keys):
            return [None] * len(keys)
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)


def _extra(name):
    """A method of _store_extras (written over the store's own calls) bound to the dummy
    view, so it runs over the forwarding calls above."""
    def call(self, *a, **k):
        from mooncake import _store_extras
        return getattr(_store_extras, name)(self, *a, **k)
    call.__name__ = name
    return call


_EXTRAS = ("put_tensor_with_parallelism", "upsert_tensor_with_parallelism",
           "batch_put_tensor_with_parallelism", "batch_upsert_tensor_with_parallelism",
           "put_tensor_with_parallelism_from", "upsert_tensor_with_parallelism_from",
           "batch_put_tensor_with_parallelism_from",
           "batch_upsert_tensor_with_parallelism_from", "get_tensor_with_parallelism",
           "batch_get_tensor_with_parallelism", "get_tensor_with_parallelism_into",
           "batch_get_tensor_with_parallelism_into", "save_tensor_to_safetensor",
           "load_tensor_from_safetensor", "get_tensor_into_cuda",
           "batch_get_tensor_into_cuda")


class _DummyView(_TensorCalls):
    """The methods of a MooncakeDistributedStore after setup_dummy (module docstring)."""

    def __init__(self, store, conn):
        self._store = weakref.ref(store)
        self._c = conn

    # ---- life cycle ----
    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        log.error("setup_dummy(): this store is already a dummy client; close() it first")
        return INVALID_PARAMS

    def setup(self, *a, **k):
        log.error("setup(): this store is a dummy client; close() it first")
        return INVALID_PARAMS

    def close(self):
        c, self._c = self._c, None
        if c is not None:
            c.close()
        st = self._store()
        if st is not None:
            st._dummy_clear()
        return 0

    def get_hostname(self):
        c = _conn(self)
        if not c.server_name:
            try:
                c.call(STATS, b"")
            except _Gone:
                pass
        return c.server_name

    def health_check(self):
        try:
            _conn(self).call(STATS, b"")
            return 0
        except _Gone:
            return 2  # HC_MASTER_UNREACHABLE: the real client (our way to the pool) is gone

    def alloc_from_mem_pool(self, size):
        return _conn(self).alloc(int(size))

    def _dummy_stats(self):
        """The real client's counters: dict connections, pools, pool_bytes, requests,
        refused (mooncake-c; what a test checks for leaks)."""
        _, rest = _conn(self).call(STATS, b"")
        names = ("connections", "pools", "pool_bytes", "requests", "refused")
        return dict(zip(names, struct.unpack_from("<5Q", rest)))

    # ---- writes ----
    def _put(self, op, key, value, config):
        data = _buffer_bytes(value)
        if not data or len(data) > MAX_BODY - (64 << 10):
            return INVALID_PARAMS
        body = b"".join((_kb(key), _U32.pack(len(data)), data, _U32.pack(_replicas(config))))
        try:
            return _conn(self).call(op, body)[0]
        except _Gone:
            return RPC_FAIL

    def put(self, key, value, config=None):
        return self._put(PUT, key, value, config)

    def upsert(self, key, value, config=None):
        return self._put(UPSERT, key, value, config)

    def put_parts(self, key, *parts, config=None):
        return self.put(key, b"".join(_buffer_bytes(p) for p in parts), config)

    def upsert_parts(self, key, *parts, config=None):
        return self.upsert(key, b"".join(_buffer_bytes(p) for p in parts), config)

    def _put_batch(self, op, keys, values, config):
        if len(keys) != len(values):
            return INVALID_PARAMS
        for k, v in zip(keys, values):
            r = self._put(op, k, v, config)
            if r != 0:
                return r
        return 0

    def put_batch(self, keys, values, config=None):
        return self._put_batch(PUT, keys, values, config)

    def upsert_batch(self, keys, values, config=None):
        return self._put_batch(UPSERT, keys, values, config)

    def _put_from(self, op, key, buffer_ptr, size, config):
        c = _conn(self)
        off = c.pool_off(buffer_ptr, size)
        if off is None:  # not pool memory: the bytes travel in the request
            if size <= 0:
                return 0 if size == 0 else INVALID_PARAMS
            if not buffer_ptr:  # as the real client: ctypes would read NULL (garbage)
                return INVALID_PARAMS
            return self._put(PUT if op == PUT_FROM else UPSERT, key,
                             ctypes.string_at(buffer_ptr, size), config)
        body = b"".join((_kb(key), _ROW.pack(off, size), _U32.pack(_replicas(config))))
        try:
            return c.call(op, body)[0]
        except _Gone:
            return RPC_FAIL

    def put_from(self, key, buffer_ptr, size, config=None):
        return self._put_from(PUT_FROM, key, buffer_ptr, size, config)

    def upsert_from(self, key, buffer_ptr, size, config=None):
        return self._put_from(UPSERT_FROM, key, buffer_ptr, size, config)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        return self._batch_put_from(BATCH_PUT_FROM, keys, buffer_ptrs, sizes, config)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return self._batch_put_from(BATCH_UPSERT_FROM, keys, buffer_ptrs, sizes, config)

    def _batch_put_from(self, op, keys, buffer_ptrs, sizes, config):
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [INVALID_PARAMS] * n
        if not n:
            return []
        c = _conn(self)
        parts, outside = _pool_rows(c, keys, buffer_ptrs, sizes)
        parts.append(_U32.pack(_replicas(config)))
        try:
            st, rest = c.call(op, b"".join(parts))
        except _Gone:
            return [RPC_FAIL] * n
        res = _ints(rest, n) if st == OK else [st] * n
        single = PUT_FROM if op == BATCH_PUT_FROM else UPSERT_FROM
        for i in outside:
            res[i] = self._put_from(single, keys[i], buffer_ptrs[i], sizes[i], config)
        return res

    # ---- reads ----
    def get(self, key):
        try:
            st, rest = _conn(self).call(GET, _kb(key))
        except _Gone:
            return b""
        if st <= 0:
            return b""
        return bytes(rest[4:4 + st])

    def get_batch(self, keys):
        out = [self.get(k) for k in keys]
        return out if out else [b""]

    def get_into(self, key, buffer_ptr, size):
        c = _conn(self)
        off = c.pool_off(buffer_ptr, size)
        try:
            if off is None:  # not pool memory: the bytes travel in the reply
                if not buffer_ptr or size < 0:  # as the real client (else a segfault here)
                    return INVALID_PARAMS
                st, rest = c.call(GET, _kb(key))
                if st > size:
                    return INVALID_PARAMS
                if st > 0:
                    ctypes.memmove(buffer_ptr, bytes(rest[4:4 + st]), st)
                return st
            return c.call(GET_INTO, _kb(key) + _ROW.pack(off, size))[0]
        except _Gone:
            return RPC_FAIL

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [INVALID_PARAMS] * n
        if not n:
            return []
        c = _conn(self)
        parts, outside = _pool_rows(c, keys, buffer_ptrs, sizes)
        try:
            st, rest = c.call(BATCH_GET_INTO, b"".join(parts))
        except _Gone:
            return [RPC_FAIL] * n
        res = _ints(rest, n) if st == OK else [st] * n
        for i in outside:
            res[i] = self.get_into(keys[i], buffer_ptrs[i], sizes[i])
        return res

    def get_size(self, key):
        try:
            return _conn(self).call(GET_SIZE, _kb(key))[0]
        except _Gone:
            return RPC_FAIL

    # ---- queries, removal ----
    def is_exist(self, key):
        try:
            return _conn(self).call(IS_EXIST, _kb(key))[0]
        except _Gone:
            return RPC_FAIL

    def batch_is_exist(self, keys):
        n = len(keys)
        if not n:
            return []
        body = _U32.pack(n) + b"".join(_kb(k) for k in keys)
        try:
            st, rest = _conn(self).call(BATCH_IS_EXIST, body)
        except _Gone:
            return [RPC_FAIL] * n
        return _ints(rest, n) if st == OK else [st] * n

    def remove(self, key, force=False):
        try:
            return _conn(self).call(REMOVE, _kb(key) + bytes([1 if force else 0]))[0]
        except _Gone:
            return RPC_FAIL

    def batch_remove(self, keys, force=False):
        n = len(keys)
        if not n:
            return []
        body = _U32.pack(n) + b"".join(_kb(k) for k in keys) + bytes([1 if force else 0])
        try:
            st, rest = _conn(self).call(BATCH_REMOVE, body)
        except _Gone:
            return [RPC_FAIL] * n
        return _ints(rest, n) if st == OK else [st] * n

    def remove_by_regex(self, regex_pattern, force=False):
        pat = regex_pattern.encode() if isinstance(regex_pattern, str) else bytes(regex_pattern)
        if len(pat) > 4096:
            return INVALID_PARAMS
        try:
            return _conn(self).call(REMOVE_BY_REGEX, _U32.pack(len(pat)) + pat +
                                    bytes([1 if force else 0]))[0]
        except _Gone:
            return RPC_FAIL

    def remove_all(self, force=False):
        try:
            return _conn(self).call(REMOVE_ALL, bytes([1 if force else 0]))[0]
        except _Gone:
            return RPC_FAIL

    # ---- multi-buffer (scatter-gather) calls ----
    def _multi_rows(self, c, keys, all_buffer_ptrs, all_sizes):
        """(wire rows, indices of keys with a segment outside the pool)."""
        parts, outside = [_U32.pack(len(keys))], []
        for i, (k, ptrs, sizes) in enumerate(zip(keys, all_buffer_ptrs, all_sizes)):
            offs = [c.pool_off(p, s) for p, s in zip(ptrs, sizes)]
            if len(ptrs) != len(sizes) or not ptrs or len(ptrs) > MAX_SEGS or \
                    any(o is None for o in offs):
                outside.append(i)
                parts += (_kb(k), _U32.pack(0))  # refused by the real client; done below
                continue
            parts += (_kb(k), _U32.pack(len(offs)))
            parts += [_ROW.pack(o, s) for o, s in zip(offs, sizes)]
        return parts, outside

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Object i = the concatenation of its buffers. Keys whose buffers all lie in the
        pool go to the real client in one request (it gathers them from the pool, no copy
        here); the others are gathered here and travel inline."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n:
            return [INVALID_PARAMS] * n
        if not n:
            return []
        c = _conn(self)
        parts, outside = self._multi_rows(c, keys, all_buffer_ptrs, all_sizes)
        parts.append(_U32.pack(_replicas(config)))
        try:
            st, rest = c.call(BATCH_PUT_MULTI, b"".join(parts))
        except _Gone:
            return [RPC_FAIL] * n
        res = _ints(rest, n) if st == OK else [st] * n
        for i in outside:
            ptrs, sizes = all_buffer_ptrs[i], all_sizes[i]
            if len(ptrs) != len(sizes) or any(s < 0 for s in sizes) or not all(ptrs):
                res[i] = INVALID_PARAMS
                continue
            res[i] = self._put(PUT, keys[i], b"".join(
                ctypes.string_at(p, s) for p, s in zip(ptrs, sizes)), config)
        return res

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_alloc_in_same_node=False):
        """Object i scattered in order over its buffers; result: its size, -600 when the
        buffers together are smaller, or as get_into. Pool buffers are filled by the real
        client directly; other memory gets the bytes from an inline get."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n:
            return [INVALID_PARAMS] * n
        if not n:
            return []
        c = _conn(self)
        parts, outside = self._multi_rows(c, keys, all_buffer_ptrs, all_sizes)
        parts.append(bytes([1 if prefer_alloc_in_same_node else 0]))
        try:
            st, rest = c.call(BATCH_GET_MULTI, b"".join(parts))
        except _Gone:
            return [RPC_FAIL] * n
        res = _ints(rest, n) if st == OK else [st] * n
        for i in outside:
            ptrs, sizes = all_buffer_ptrs[i], all_sizes[i]
            if len(ptrs) != len(sizes) or any(s < 0 for s in sizes) or not all(ptrs):
                res[i] = INVALID_PARAMS
                continue
            try:
                st, rest = c.call(GET, _kb(keys[i]))
            except _Gone:
                res[i] = RPC_FAIL
                continue
            if st > sum(sizes):
                st = INVALID_PARAMS
            if st > 0:
                data, pos = rest[4:4 + st], 0
                for p, s in zip(ptrs, sizes):
                    k = min(s, st - pos)
                    if k <= 0:
                        break
                    ctypes.memmove(p, bytes(data[pos:pos + k]), k)
                    pos += k
            res[i] = st
        return res

    # ---- replica descriptors ----
    def _replica_lists(self, keys):
        """[(result, [ReplicaDescriptor])] per key, or None when the real client is gone."""
        n = len(keys)
        body = _U32.pack(n) + b"".join(_kb(k) for k in keys)
        try:
            st, rest = _conn(self).call(REPLICA_DESC, body)
        except _Gone:
            return None
        if st != OK:
            return [(st, [])] * n
        if _U32.unpack_from(rest)[0] != n:
            log.warning("dummy client: malformed replica reply from the real client")
            return None
        pos, out = 4, []
        for _ in range(n):
            r = _I64.unpack_from(rest, pos)[0]
            cnt = _U32.unpack_from(rest, pos + 8)[0]
            pos += 12
            rows = []
            for _ in range(cnt):
                status, rtype, size, addr = struct.unpack_from("<IBQQ", rest, pos)
                pos += 21
                strs = []
                for _ in range(2):
                    ln = _U32.unpack_from(rest, pos)[0]
                    strs.append(bytes(rest[pos + 4:pos + 4 + ln]))
                    pos += 4 + ln
                rows.append((status, rtype, size, addr, strs[0], strs[1]))
            out.append((r, MooncakeDistributedStore._dummy_replicas(self._owner(), rows)))
        return out

    def _owner(self):
        st = self._store()
        if st is None:
            raise RuntimeError("dummy client: its store object is gone")
        return st

    def get_replica_desc(self, key):
        """The object's complete replicas on the real client's cluster ([] on a miss,
        an error, or no real client)."""
        ls = self._replica_lists([key])
        return ls[0][1] if ls and ls[0][0] == OK else []

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor]} for the keys found (missing keys left out, as
        upstream); {} when the real client is gone."""
        keys = list(keys)
        if not keys:
            return {}
        ls = self._replica_lists(keys) or []
        return {k: lst for k, (r, lst) in zip(keys, ls) if r == OK}

    # ---- buffers ----
    def get_buffer(self, key):
        """The object's bytes in a DummyBufferHandle (this process's memory: a dummy has
        no segment to lend), or None on a miss / error."""
        data = self.get(key)
        return DummyBufferHandle(data) if data else None

    def batch_get_buffer(self, keys):
        return [self.get_buffer(k) for k in keys]

    # ---- segment management: a dummy owns no segment (upstream DummyClient: -1) ----
    def mount_segment(self, path, size, offset=0, protocol="tcp", location=""):
        return {"ret": INTERNAL_ERROR, "segment_ids": []}

    def allocate_and_mount_segment(self, size, protocol="tcp", location=""):
        return {"ret": INTERNAL_ERROR, "segment_ids": [], "allocated_size": 0}

    def unmount_segment(self, segment_ids, grace_period_seconds=0):
        return INTERNAL_ERROR

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds=0):
        return INTERNAL_ERROR

    def register_buffer(self, buffer_ptr, size):
        return 0  # nothing to register: the pool is the real client's already

    def unregister_buffer(self, buffer_ptr):
        return 0


class DummyBufferHandle(bytearray):
    """What get_buffer returns on a dummy client: the object's bytes in this process
    (a bytearray: the buffer protocol, len(), bytes(h)) with BufferHandle's ptr() and
    size()."""

    def ptr(self):
        if not len(self):
            return 0
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    def size(self):
        return len(self)

    def __repr__(self):
        return f"<DummyBufferHandle ptr={self.ptr():#x} size={len(self)}>"


def _refuser(name):
    def refuse(self, *a, **k):
        raise RuntimeError(f"{name}() is not available on a dummy client (setup_dummy); "
                           "call it on the real client or on a store set up with setup()")
    refuse.__name__ = name
    return refuse


for _name in _EXTRAS:
    setattr(_DummyView, _name, _extra(_name))

for _name in dir(MooncakeDistributedStore):
    if _name.startswith("_") or hasattr(_DummyView, _name):
        continue
    if callable(getattr(MooncakeDistributedStore, _name)):
        setattr(_DummyView, _name, _refuser(_name))


def setup_dummy(store, mem_pool_size, local_buffer_size, server_address):
    """The Python half of MooncakeDistributedStore.setup_dummy (store_dummy.c keeps the
    view): (0, view), or (-600, None) for bad arguments / a store already set up,
    (-900, None) when no real client serves that port."""
    if not isinstance(mem_pool_size, int) or not isinstance(local_buffer_size, int):
        raise TypeError("setup_dummy(): mem_pool_size and local_buffer_size must be int")
    port = _port_of(server_address)
    if port is None or mem_pool_size < 0 or mem_pool_size > MAX_POOL or \
            not (local_buffer_size == 0 or 1024 <= local_buffer_size <= 1 << 40):
        log.error("setup_dummy(): bad arguments (mem_pool_size %r, local_buffer_size %r, "
                  "server_address %r)", mem_pool_size, local_buffer_size, server_address)
        return INVALID_PARAMS, None
    if store.health_check() != 1:
        log.error("setup_dummy(): the store is set up already; close() it first")
        return INVALID_PARAMS, None
    c = _Conn(port, mem_pool_size)
    try:
        with c.lock:
            c._connect()
    except (OSError, _Gone) as e:
        log.error("setup_dummy(): no real client (mooncake_client --port=%d) on "
                  "@mooncake_client_%d.sock: %s", port, port, e)
        c.close()
        return RPC_FAIL, None
    return OK, _DummyView(store, c)
