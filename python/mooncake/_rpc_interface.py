"""``mooncake.engine.RpcInterface`` (alias ``CoroRPCInterface``), ``ReceivedData`` and
``ReceivedTensor``: upstream's secondary RPC bindings of the engine module (send bytes or
tensors to another process, which gets them in a callback; upstream-mooncake.md §2,
upstream ``rpc_interface.cpp`` / ``cororpc_interface.cpp``, behaviour as documented there;
the protocol is ours: upstream's is coro_rpc + struct_pack, so the two do not talk to
each other).

A server (``initialize_server`` / ``initialize(listen_address=...)``, then
``start_server_async()``, or ``start_server()`` which blocks until ``stop_server``)
listens on TCP ``host:port``; a client (any RpcInterface) sends with ``send_data`` /
``send_tensor`` to a target ``"host:port"`` over one kept connection per target. Each
message is acknowledged after the server's callback returned, so ``send_*`` returns 0
once the peer has handled it, -1 otherwise (no connection, peer gone, no callback set on
the peer, the callback raised, timeout). The ``*_async`` forms return an
``asyncio.Future`` of ``loop`` resolved (``call_soon_threadsafe``) with 0, or failed with
RuntimeError.

Frame (little-endian): u32 magic ``MCRP``, u8 kind (1 data, 2 tensor), u32 header length,
u64 payload length, the header (UTF-8 JSON; a tensor's ``shape`` and ``dtype``), the
payload; the reply is u32 magic, i32 status. Limits: header 64 KiB, payload
``MAX_PAYLOAD`` bytes (larger frames close the connection).

Callbacks run on the server's connection threads (one per connected peer), one message
at a time per connection; a data callback gets a ``ReceivedData``, a tensor callback a
``ReceivedTensor``. Tensors: any object with ``data_ptr()``, ``numel()``,
``element_size()``, ``shape`` and ``dtype`` (a torch tensor; non-contiguous or non-CPU
tensors are copied to a contiguous CPU tensor first); ``dtype`` travels as ``str(dtype)``
(``"torch.float32"``).
"""
from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import socket
import struct
import threading
from typing import Any, Callable, Optional

log = logging.getLogger("mooncake.engine")

MAGIC = 0x5052434D  # "MCRP"
KIND_DATA, KIND_TENSOR = 1, 2
_HDR = struct.Struct("<IBIQ")
_ACK = struct.Struct("<Ii")
MAX_HEADER = 64 << 10
MAX_PAYLOAD = 1 << 34  # bytes (16 GiB)


class ReceivedData:
    """ReceivedData(source_address: str, data: bytes): bytes a peer sent with send_data:
    ``source_address`` ("host:port" of the sender's connection), ``data_size``,
    ``get_bytes()``, ``get_memory_view()`` (read-only). ``r["source"]`` / ``r["data"]``
    work too (the dict form some upstream versions pass to the callback)."""

    source_address: str
    data_size: int

    def __init__(self, source_address: str, data: bytes):
        self.source_address = source_address
        self._data = data
        self.data_size = len(data)

    def get_bytes(self) -> bytes:
        """get_bytes() -> bytes: the data."""
        return bytes(self._data)

    def get_memory_view(self) -> memoryview:
        """get_memory_view() -> memoryview: a read-only view of the data."""
        return memoryview(self._data).toreadonly()

    def __getitem__(self, name: str) -> Any:
        if name == "source":
            return self.source_address
        if name == "data":
            return bytes(self._data)
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"<ReceivedData from {self.source_address} {self.data_size} bytes>"


class ReceivedTensor:
    """ReceivedTensor(source_address: str, data: bytes, shape: list[int], dtype: str): a
    tensor a peer sent with send_tensor: ``source_address``, ``shape``, ``dtype``
    (``str(tensor.dtype)``, e.g. "torch.float32"), ``total_bytes``, ``get_data_size()``,
    ``get_data_as_bytes()``, ``get_memory_view()`` (read-only) and ``rebuild_tensor()``
    (a new torch tensor of that shape and dtype; mooncake-c)."""

    source_address: str
    shape: list[int]
    dtype: str
    total_bytes: int

    def __init__(self, source_address: str, data: bytes, shape: list, dtype: str):
        self.source_address = source_address
        self._data = data
        self.shape = list(shape)
        self.dtype = dtype
        self.total_bytes = len(data)

    def get_data_size(self) -> int:
        """get_data_size() -> int: bytes of tensor data."""
        return len(self._data)

    def get_data_as_bytes(self) -> bytes:
        """get_data_as_bytes() -> bytes: the tensor's bytes (C order)."""
        return bytes(self._data)

    def get_memory_view(self) -> memoryview:
        """get_memory_view() -> memoryview: a read-only view of the tensor's bytes."""
        return memoryview(self._data).toreadonly()

    def rebuild_tensor(self):
        """rebuild_tensor() -> torch.Tensor: a new CPU tensor of shape and dtype holding
        the bytes (ValueError for a dtype torch does not know)."""
        import torch

        name = self.dtype.split(".", 1)[-1]
        dt = getattr(torch, name, None)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"unknown tensor dtype {self.dtype!r}")
        if not self._data:
            return torch.empty(self.shape, dtype=dt)
        raw = torch.frombuffer(bytearray(self._data), dtype=torch.uint8)
        return raw.view(dt).reshape(self.shape)

    def __repr__(self) -> str:
        return (f"<ReceivedTensor from {self.source_address} {self.dtype}{self.shape} "
                f"{self.total_bytes} bytes>")


def _split(address: str) -> tuple[str, int]:
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"address must be 'host:port', got {address!r}")
    host, port = address.rsplit(":", 1)
    host = host.strip("[]") or "0.0.0.0"
    port = int(port)
    if not 0 <= port < 65536:
        raise ValueError(f"port out of range in {address!r}")
    return host, port


def _recv_exact(s: socket.socket, n: int) -> Optional[bytearray]:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:])
        if not k:
            return None
        got += k
    return buf


def _tensor_payload(tensor) -> tuple[memoryview, list, str, Any]:
    """(payload bytes view, shape, dtype string, owner) of a tensor, no copy for a
    contiguous CPU tensor."""
    for attr in ("data_ptr", "numel", "element_size", "shape", "dtype"):
        if not hasattr(tensor, attr):
            raise TypeError(f"send_tensor needs a tensor (data_ptr, numel, element_size, "
                            f"shape, dtype); {type(tensor).__name__} has no {attr}")
    t = tensor
    if hasattr(t, "device") and getattr(t.device, "type", "cpu") != "cpu":
        t = t.cpu()
    if hasattr(t, "is_contiguous") and not t.is_contiguous():
        t = t.contiguous()
    n = int(t.numel()) * int(t.element_size())
    if n:
        arr = (ctypes.c_char * n).from_address(int(t.data_ptr()))
        view = memoryview(arr).cast("B")
    else:
        view = memoryview(b"")
    return view, [int(d) for d in t.shape], str(t.dtype), t


class RpcInterface:
    """RpcInterface(): bytes and tensors to other processes over TCP (see the module
    docstring of mooncake._rpc_interface). Not set up until one of the initialize calls;
    send_* on a never-initialized interface return -1."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _conns, _server, _threads, _listen
        self._conns: dict[str, tuple[socket.socket, threading.Lock]] = {}
        self._timeout = 30.0
        self._ready = False
        self._listen: Optional[str] = None
        self._server: Optional[socket.socket] = None
        self._accept_thread: Optional[threading.Thread] = None
        self._peers: dict[socket.socket, int] = {}  # connection -> its thread's ident
        self._stopped = threading.Event()
        self._data_cb: Optional[Callable] = None
        self._tensor_cb: Optional[Callable] = None

    # ---- set-up ----
    def initialize(self, listen_address: str = "", thread_count: int = 0,
                   timeout_seconds: int = 30, pool_size: int = 10) -> bool:
        """initialize(listen_address: str = "", thread_count: int = 0, timeout_seconds: int = 30, pool_size: int = 10) -> bool:
        client set-up; with a listen_address ("host:port"; port 0 picks a free one)
        also the server's address (start it with start_server / start_server_async).
        thread_count and pool_size are accepted (one thread per connected peer, one
        connection per target). False for a bad address or timeout."""
        try:
            if listen_address:
                _split(listen_address)
            if int(timeout_seconds) <= 0:
                raise ValueError("timeout_seconds must be positive")
        except (ValueError, TypeError) as e:
            log.error("RpcInterface.initialize: %s", e)
            return False
        self._timeout = float(timeout_seconds)
        self._listen = listen_address or None
        self._ready = True
        return True

    def initialize_client(self, pool_size: int = 10, timeout_seconds: int = 30) -> bool:
        """initialize_client(pool_size: int = 10, timeout_seconds: int = 30) -> bool."""
        return self.initialize("", 0, timeout_seconds, pool_size)

    def initialize_server(self, listen_address: str, thread_count: int = 8,
                          timeout_seconds: int = 30) -> bool:
        """initialize_server(listen_address: str, thread_count: int = 8, timeout_seconds: int = 30) -> bool:
        initialize with a listen address (required)."""
        if not listen_address:
            log.error("RpcInterface.initialize_server: listen_address is required")
            return False
        return self.initialize(listen_address, thread_count, timeout_seconds)

    def get_listen_address(self) -> Optional[str]:
        """get_listen_address() -> str | None: "host:port" the server listens on once
        started (the real port when 0 was asked for), the configured address before,
        None without one (mooncake-c)."""
        with self._lock:
            if self._server is None:
                return self._listen
            host, port = self._server.getsockname()[:2]
            return f"{host}:{port}"

    # ---- server ----
    def start_server_async(self) -> bool:
        """start_server_async() -> bool: starts listening and serving in background
        threads; True once listening."""
        with self._lock:
            if self._server is not None:
                return True
            if not self._ready or not self._listen:
                log.error("RpcInterface.start_server: no listen address (initialize_server)")
                return False
            try:
                host, port = _split(self._listen)
                srv = socket.create_server((host, port), reuse_port=False)
            except OSError as e:
                log.error("RpcInterface.start_server: cannot listen on %s: %s",
                          self._listen, e)
                return False
            self._server = srv
            self._stopped.clear()
            self._accept_thread = threading.Thread(target=self._accept_loop, args=(srv,),
                                                   name="mooncake-rpc-accept", daemon=True)
            self._accept_thread.start()
        return True

    def start_server(self) -> bool:
        """start_server() -> bool: starts the server and blocks until stop_server()
        (from another thread or a callback); False when it could not listen."""
        if not self.start_server_async():
            return False
        self._stopped.wait()
        return True

    def stop_server(self) -> None:
        """stop_server() -> None: stops listening and closes every peer connection
        (their threads end; one whose callback called this answers first)."""
        with self._lock:
            srv, self._server = self._server, None
            peers, self._peers = self._peers, {}
            th = self._accept_thread
            self._accept_thread = None
        if srv is not None:
            try:
                srv.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            srv.close()
        me = threading.get_ident()
        for p, ident in peers.items():
            if ident == me:
                continue  # stop from a callback: this connection answers, then ends
            try:
                p.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if th is not None and th is not threading.current_thread():
            th.join(timeout=self._timeout)
        self._stopped.set()

    def _accept_loop(self, srv: socket.socket) -> None:
        while True:
            try:
                conn, addr = srv.accept()
            except OSError:
                return
            with self._lock:
                if self._server is not srv:
                    conn.close()
                    return
                th = threading.Thread(target=self._serve,
                                      args=(conn, f"{addr[0]}:{addr[1]}"),
                                      name="mooncake-rpc-peer", daemon=True)
                th.start()
                self._peers[conn] = th.ident

    def _serve(self, conn: socket.socket, source: str) -> None:
        try:
            while True:
                h = _recv_exact(conn, _HDR.size)
                if h is None:
                    return
                magic, kind, hlen, plen = _HDR.unpack(h)
                if magic != MAGIC or kind not in (KIND_DATA, KIND_TENSOR) or \
                        hlen > MAX_HEADER or plen > MAX_PAYLOAD:
                    log.warning("RpcInterface: malformed frame from %s: closing", source)
                    return
                header = _recv_exact(conn, hlen) if hlen else bytearray()
                payload = _recv_exact(conn, plen) if plen else bytearray()
                if header is None or payload is None:
                    return
                status = self._dispatch(kind, bytes(header), bytes(payload), source)
                conn.sendall(_ACK.pack(MAGIC, status))
                with self._lock:
                    if conn not in self._peers:
                        return  # the server stopped meanwhile
        except OSError:
            return
        finally:
            with self._lock:
                self._peers.pop(conn, None)
            conn.close()

    def _dispatch(self, kind: int, header: bytes, payload: bytes, source: str) -> int:
        cb = self._data_cb if kind == KIND_DATA else self._tensor_cb
        if cb is None:
            log.warning("RpcInterface: a %s from %s but no receive callback is set",
                        "message" if kind == KIND_DATA else "tensor", source)
            return -1
        try:
            if kind == KIND_DATA:
                cb(ReceivedData(source, payload))
            else:
                meta = json.loads(header.decode())
                cb(ReceivedTensor(source, payload, meta.get("shape", []),
                                  str(meta.get("dtype", ""))))
            return 0
        except Exception:
            log.exception("RpcInterface: the receive callback raised")
            return -1

    def set_data_receive_callback(self, callback: Callable) -> None:
        """set_data_receive_callback(callback: Any) -> None: callback(ReceivedData), on
        a server connection thread."""
        self._data_cb = callback

    def set_tensor_receive_callback(self, callback: Callable) -> None:
        """set_tensor_receive_callback(callback: Any) -> None: callback(ReceivedTensor),
        on a server connection thread."""
        self._tensor_cb = callback

    # ---- client ----
    def _conn(self, target: str) -> tuple[socket.socket, threading.Lock]:
        with self._lock:
            c = self._conns.get(target)
        if c is not None:
            return c
        host, port = _split(target)
        s = socket.create_connection((host, port), timeout=self._timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = (s, threading.Lock())
        with self._lock:
            old = self._conns.setdefault(target, c)
        if old is not c:
            s.close()
        return old

    def _drop(self, target: str, s: socket.socket) -> None:
        with self._lock:
            if self._conns.get(target, (None,))[0] is s:
                del self._conns[target]
        s.close()

    def _send(self, target: str, kind: int, header: bytes, payload) -> int:
        if not self._ready:
            log.error("RpcInterface: send before initialize")
            return -1
        try:
            s, lock = self._conn(target)
        except (OSError, ValueError) as e:
            log.error("RpcInterface: cannot connect to %s: %s", target, e)
            return -1
        with lock:
            try:
                s.sendall(_HDR.pack(MAGIC, kind, len(header), len(payload)))
                if header:
                    s.sendall(header)
                if len(payload):
                    s.sendall(payload)
                ack = _recv_exact(s, _ACK.size)
                if ack is None:
                    raise OSError("the peer closed the connection")
                magic, status = _ACK.unpack(ack)
                if magic != MAGIC:
                    raise OSError("malformed reply")
                return 0 if status == 0 else -1
            except OSError as e:
                log.error("RpcInterface: send to %s failed: %s", target, e)
                self._drop(target, s)
                return -1

    def send_data(self, target_address: str, data) -> int:
        """send_data(target_address: str, data: bytes) -> int: sends bytes (any buffer)
        to the server at target_address: 0 once its data callback returned, -1
        otherwise."""
        try:
            payload = memoryview(data).cast("B") if not isinstance(data, str) else \
                memoryview(data.encode())
        except TypeError:
            log.error("send_data: data must be bytes-like, not %s", type(data).__name__)
            return -1
        return self._send(target_address, KIND_DATA, b"", payload)

    def send_tensor(self, target_address: str, tensor) -> int:
        """send_tensor(target_address: str, tensor: Any) -> int: sends a tensor (shape,
        dtype, bytes): 0 once the peer's tensor callback returned, -1 otherwise."""
        try:
            payload, shape, dtype, owner = _tensor_payload(tensor)
        except TypeError as e:
            log.error("send_tensor: %s", e)
            return -1
        header = json.dumps({"shape": shape, "dtype": dtype}).encode()
        try:
            return self._send(target_address, KIND_TENSOR, header, payload)
        finally:
            del owner

    def _async(self, loop, fn, *args):
        fut = loop.create_future()

        def done(rc):
            if fut.cancelled():
                return
            if rc >= 0:
                fut.set_result(rc)
            else:
                fut.set_exception(RuntimeError(f"{fn.__name__} to {args[0]} failed"))

        def run():
            rc = fn(*args)
            try:
                loop.call_soon_threadsafe(done, rc)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more

        threading.Thread(target=run, name="mooncake-rpc-send", daemon=True).start()
        return fut

    def send_data_async(self, target_address: str, data, loop=None):
        """send_data_async(target_address: str, data: bytes, loop: Any = None) -> Any:
        send_data on a helper thread; an asyncio.Future of loop (default: the running
        loop) with 0, or RuntimeError."""
        loop = loop or asyncio.get_event_loop()
        return self._async(loop, self.send_data, target_address, bytes(memoryview(data)))

    def send_tensor_async(self, target_address: str, tensor, loop=None):
        """send_tensor_async(target_address: str, tensor: Any, loop: Any = None) -> Any:
        send_tensor on a helper thread, as send_data_async."""
        loop = loop or asyncio.get_event_loop()
        return self._async(loop, self.send_tensor, target_address, tensor)

    def close(self) -> None:
        """close() -> None: stops the server and closes the client connections
        (mooncake-c)."""
        self.stop_server()
        with self._lock:
            conns, self._conns = self._conns, {}
        for s, _ in conns.values():
            s.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


CoroRPCInterface = RpcInterface
