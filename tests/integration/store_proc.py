"""Helpers for the ``mooncake.store`` tests: a ``mooncake_master`` with its embedded HTTP
metadata server, and store clients running in their own processes.

- ``StoreCluster(spawn, *master_flags, metadata=None)``: a master (``mc_master.Master``)
  started with ``--enable_http_metadata_server=1`` on free loopback ports; ``metadata``
  is the ``http://127.0.0.1:<port>/metadata`` URL clients pass to ``setup``. Given a
  ``metadata`` connection string (etcd, Redis, P2PHANDSHAKE), the master runs without
  its HTTP metadata server and clients use that string.
- ``StoreProc(master_addr, metadata, ...)``: a ``MooncakeDistributedStore`` set up in a
  separate (spawned) process (setup args ``("__dummy__", pool, lbuf, address)``: a dummy
  client, ``setup_dummy``). ``call(method, *args, **kw)`` runs a store method there and
  returns its result (handles and descriptors are turned into plain values);
  ``fn(name, ...)`` runs one of the helper functions below with the store as first
  argument. Every call has a deadline; ``kill()`` sends SIGKILL (a crashed client),
  ``close()`` closes the store and ends the process.

Every process is bounded in time: replies wait at most ``timeout`` seconds and the
processes are killed by ``stop()`` / the fixtures' teardown.
"""
import ctypes
import hashlib
import multiprocessing
import os
import time
import traceback

import mc_master

SEGMENT = 32 << 20
LOCAL_BUFFER = 32 << 20


def value_for(key, size, salt=b""):
    """Deterministic bytes of ``size`` for ``key`` (so a wrong object is detectable)."""
    seed = hashlib.sha256(salt + (key.encode() if isinstance(key, str) else key)).digest()
    return (seed * (size // len(seed) + 1))[:size]


class StoreCluster:
    """A master with the HTTP metadata server; ``stop()``/``restart()`` keep the ports."""

    def __init__(self, spawn, *flags, metadata=None):
        from conftest import free_port

        self._metadata = metadata
        if metadata is not None:
            self.http_port = None
            self.master = mc_master.Master(spawn, *flags)
            return
        self.http_port = free_port()
        self.master = mc_master.Master(
            spawn, "--enable_http_metadata_server=1",
            f"--http_metadata_server_port={self.http_port}",
            "--http_metadata_server_host=127.0.0.1", *flags)
        from conftest import wait_port

        wait_port(self.http_port, timeout=10)

    @property
    def addr(self):
        return self.master.addr

    @property
    def metadata(self):
        if self._metadata is not None:
            return self._metadata
        return f"http://127.0.0.1:{self.http_port}/metadata"

    def setup_args(self, segment=SEGMENT, local_buffer=LOCAL_BUFFER, hostname="127.0.0.1",
                   metadata=None):
        return (hostname, metadata or self.metadata, segment, local_buffer, "tcp", "",
                self.addr)

    def restart(self):
        self.master.stop()
        self.start()

    def start(self):
        """Starts the master again (after master.stop()) on the same ports."""
        from conftest import wait_port

        self.master.start()
        if self.http_port:
            wait_port(self.http_port, timeout=10)


# --------------------------------------------------------------------------------------
# Functions run inside a client process (first argument: the store).


def fn_hostname(store):
    return store.get_hostname()


def fn_put_values(store, keys, size, salt=b"", replica_num=1, preferred=None):
    """put(key, value_for(key, size)) for each key; returns the list of results."""
    from mooncake.store import ReplicateConfig

    cfg = ReplicateConfig()
    cfg.replica_num = replica_num
    if preferred:
        cfg.preferred_segment = preferred
    return [store.put(k, value_for(k, size, salt), cfg) for k in keys]


def fn_check_values(store, keys, size, salt=b""):
    """For each key: 'ok' (right bytes), 'miss' (b'') or 'WRONG'."""
    out = []
    for k in keys:
        v = store.get(k)
        out.append("miss" if v == b"" else ("ok" if v == value_for(k, size, salt) else "WRONG"))
    return out


def fn_replicas(store, key):
    """[(status, endpoint, size)] of the object's replicas."""
    return [(int(r.status), r.get_memory_descriptor().buffer_descriptor.transport_endpoint,
             r.get_memory_descriptor().buffer_descriptor.size)
            for r in store.get_replica_desc(key)]


def fn_race(store, key, mine, others, n, remove_every, start_at):
    """The concurrent-put case: n times put(key, mine) then get(key); every get must be
    b'' or one whole value (mine or one of others). Every remove_every-th round removes
    the key (without force: a reader's lease protects what it reads; a forced remove
    during a read may free memory under it, as upstream) so that new puts keep racing.
    Returns (put results seen, bad reads, removals that succeeded)."""
    while time.time() < start_at:
        time.sleep(0.001)
    allowed = {b"", mine, *others}
    rcs, bad, removed = {}, [], 0
    for i in range(n):
        rc = store.put(key, mine)
        rcs[rc] = rcs.get(rc, 0) + 1
        v = store.get(key)
        if v not in allowed:
            bad.append((i, len(v), v[:8], v[-8:]))
        if remove_every and i % remove_every == remove_every - 1:
            removed += store.remove(key) == 0
    return rcs, bad, removed


def fn_put_from_raw(store, key, data):
    """put_from from a ctypes buffer of this process (never registered)."""
    buf = ctypes.create_string_buffer(data, len(data))
    return store.put_from(key, ctypes.addressof(buf), len(data))


def fn_get_into_raw(store, key, cap):
    buf = ctypes.create_string_buffer(cap)
    n = store.get_into(key, ctypes.addressof(buf), cap)
    return n, (buf.raw[:n] if n > 0 else b"")


def fn_wait_health(store, state, timeout):
    """Waits until health_check() == state (0 healthy, 2 master unreachable)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if store.health_check() == state:
            return True
        time.sleep(0.05)
    return False


def fn_wait_healthy(store, timeout):
    return fn_wait_health(store, 0, timeout)


def fn_put_retry(store, key, value, timeout):
    """put until it returns 0 (the master may be restarting); returns the last code."""
    deadline = time.time() + timeout
    rc = None
    while time.time() < deadline:
        rc = store.put(key, value)
        if rc == 0:
            return 0
        time.sleep(0.1)
    return rc


def fn_wait_own_segment(store, timeout):
    """Waits until this client's segment is mounted again (after a master restart): a
    put that prefers it lands there. Returns True when it did within timeout."""
    from mooncake.store import ReplicateConfig

    cfg = ReplicateConfig()
    cfg.preferred_segment = store.get_hostname()
    deadline = time.time() + timeout
    i = 0
    while time.time() < deadline:
        key = f"own-segment-probe-{os.getpid()}-{i}"
        i += 1
        if store.put(key, b"probe", cfg) == 0:
            reps = fn_replicas(store, key)
            store.remove(key, True)
            if reps and reps[0][1] == cfg.preferred_segment:
                return True
        time.sleep(0.05)
    return False


FUNCS = {name[3:]: f for name, f in globals().items() if name.startswith("fn_")}


def _plain(v):
    """Result values that cross the pipe: handles -> bytes, descriptors -> tuples."""
    from mooncake.store import BufferHandle

    if isinstance(v, BufferHandle):
        return bytes(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _serve(conn, setup_args, env, funcs_from=None):
    os.environ.update(env)
    if funcs_from:
        # another test package's child-side helpers (its fn_* functions), found on the
        # sys.path the spawned child inherits from the parent
        import importlib

        mod = importlib.import_module(funcs_from)
        FUNCS.update({n[3:]: f for n, f in vars(mod).items() if n.startswith("fn_")})
    import mooncake.store as ms

    store = ms.MooncakeDistributedStore()
    try:
        if setup_args and setup_args[0] == "__dummy__":  # a dummy client (setup_dummy)
            rc = store.setup_dummy(*setup_args[1:])
        else:
            rc = store.setup(*setup_args)
    except Exception:  # noqa: BLE001 - reported to the parent
        conn.send(("exc", traceback.format_exc()))
        return
    conn.send(("ok", rc))
    if rc != 0:
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        kind, name, args, kw = msg
        try:
            if kind == "call":
                res = _plain(getattr(store, name)(*args, **kw))
            elif kind == "fn":
                res = FUNCS[name](store, *args, **kw)
            elif kind == "exit":
                conn.send(("ok", store.close()))
                break
            else:
                raise ValueError(kind)
            conn.send(("ok", res))
        except Exception:  # noqa: BLE001 - reported to the parent
            conn.send(("exc", traceback.format_exc()))


class StoreProc:
    """A store client in its own process (spawned: no fork of the parent's threads)."""

    def __init__(self, setup_args, env=None, timeout=30.0, funcs_from=None):
        """funcs_from: name of a module whose fn_* functions the child also offers to
        ``fn()`` (e.g. tests/faults' child-side helpers)."""
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve,
                                args=(child, tuple(setup_args), env or {}, funcs_from),
                                daemon=True)
        self.proc.start()
        child.close()
        self.timeout = timeout
        self.setup_rc = self._reply()
        self.hostname = self.fn("hostname") if self.setup_rc == 0 else ""

    def _reply(self, timeout=None):
        if not self.conn.poll(timeout or self.timeout):
            self.kill()
            raise TimeoutError("store process did not answer in time")
        status, value = self.conn.recv()
        if status == "exc":
            raise RuntimeError("in store process:\n" + value)
        return value

    def call(self, method, *args, timeout=None, **kw):
        self.conn.send(("call", method, args, kw))
        return self._reply(timeout)

    def fn(self, name, *args, timeout=None, **kw):
        self.conn.send(("fn", name, args, kw))
        return self._reply(timeout)

    def send_fn(self, name, *args, **kw):
        """Starts fn without waiting; collect with result()."""
        self.conn.send(("fn", name, args, kw))

    def result(self, timeout=None):
        return self._reply(timeout)

    def close(self):
        """Closes the store and ends the process; returns close()'s result."""
        if not self.proc.is_alive():
            return None
        try:
            self.conn.send(("exit", None, (), {}))
            rc = self._reply(15)
        except (OSError, EOFError, TimeoutError):
            rc = None
        self.proc.join(5)
        self.kill()
        return rc

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
