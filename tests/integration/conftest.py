"""Shared fixtures for the integration tests: real processes on loopback only.

- ``tool(name)``: path of an installed command-line tool (from the venv's bin).
- ``free_port()``: a currently free TCP port on 127.0.0.1.
- ``spawn``: start a process that is killed (and reaped) when the test ends; every
  process gets a bounded lifetime from the test's teardown.
- ``wait_port(port)``: wait until something listens on 127.0.0.1:port.
- ``wait_until(pred, timeout, what)``: the one wait for a condition: polls pred until it
  returns something true, or fails the test after the deadline. Tests never sleep in
  place of a condition, and never assert how long something took (speed is bench/'s).
- ``read_until(proc, pattern, timeout)``: a running process's output up to a match.
- ``unsent_tcp_bytes(pid)``: bytes a process has queued, unsent, on its TCP sockets.
- ``etcd_server`` / ``redis_metadata_server`` (session): a real etcd / redis-server on
  free loopback ports (tests/integration/kv_servers.py), started on first use and
  stopped at the end of the session; ``kv_metadata(request, kind)`` returns the one of
  ``kind`` ("etcd" or "redis") with its keys cleared, for a test or module that takes
  its metadata from it; ``store_metadata(request, kind)`` the string a store test passes
  to StoreCluster. ``METADATA_BACKENDS``: every metadata backend a test may be
  parametrised over (``http``, ``etcd``, ``redis``, ``p2p``).
- ``MC_TEST_AUTH=1`` (environment): the whole suite runs with a cluster secret. A token
  file (mode 0600) is made once and named in ``MC_AUTH_TOKEN_FILE``, which every process
  the tests start inherits (masters, metadata servers, store clients, the REST service);
  every ``requests`` call signs its request with it (``MCAuth``, installed as the default
  auth of ``requests.Session``), and so does ``mc_master.Master.http``. Tests about the
  secret itself (test_auth_http.py) pass their own environment to what they start.
- ``auth_secret()``: the suite's secret (bytes) or None; ``MCAuth(secret)``: a
  ``requests`` auth that signs with it (``docs/security.md``).
"""
import atexit
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import requests
import requests.auth

from mooncake import _auth

BIN_DIR = os.path.dirname(sys.executable)
SHARED = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))


# ---- MC_TEST_AUTH=1: every process of the suite holds the cluster secret ----

AUTH_MODE = os.environ.get("MC_TEST_AUTH", "") not in ("", "0")
if AUTH_MODE and not os.environ.get(_auth.ENV):
    _auth_dir = tempfile.mkdtemp(prefix="mc-test-auth-")
    _token = os.path.join(_auth_dir, "cluster.token")
    fd = os.open(_token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (secrets.token_hex(32) + "\n").encode())
    os.close(fd)
    os.environ[_auth.ENV] = _token
    atexit.register(shutil.rmtree, _auth_dir, True)


def auth_secret():
    """The suite's cluster secret (MC_TEST_AUTH=1), or None."""
    return _auth.secret_from_env() if os.environ.get(_auth.ENV) else None


class MCAuth(requests.auth.AuthBase):
    """Signs a ``requests`` request with the cluster secret (``Authorization: MC-HMAC``
    over the method, the path and query as sent, and the body); secret None: the suite's,
    and nothing is signed when there is none."""

    def __init__(self, secret=None):
        self.secret = secret

    def __call__(self, r):
        secret = self.secret if self.secret is not None else auth_secret()
        if secret:
            body = r.body or b""
            if isinstance(body, str):
                body = body.encode()
            r.headers["Authorization"] = _auth.sign(secret, r.method, r.path_url, body)
        return r


def auth_line(method, target, body=b""):
    """The Authorization header line (with CRLF) of a raw request signed with the suite's
    secret, b"" when there is none: for tests that speak HTTP over a socket."""
    secret = auth_secret()
    if not secret:
        return b""
    return b"Authorization: " + _auth.sign(secret, method, target, body).encode() + b"\r\n"


def sign_urllib(req):
    """Signs a urllib.request.Request with the suite's secret (when there is one)."""
    secret = auth_secret()
    if secret:
        req.add_header("Authorization",
                       _auth.sign(secret, req.get_method(), req.selector, req.data or b""))
    return req


# ---- the framed ports' handshake (src/common/auth.h), for tests that speak a framed
# protocol over a raw socket ----

HS_MAGIC = b"MCAU"
HS_HELLO, HS_CHALLENGE, HS_RESPONSE, HS_RESULT = 1, 2, 3, 4


def hs_frame(ftype, body):
    return HS_MAGIC + bytes([1, ftype]) + len(body).to_bytes(2, "big") + body


def hs_read(sock, timeout=10.0):
    """One handshake frame: (type, body); b"" body and type None when the peer closed."""
    import struct
    sock.settimeout(timeout)
    buf = b""
    while len(buf) < 8:
        part = sock.recv(8 - len(buf))
        if not part:
            return None, buf
        buf += part
    assert buf[:4] == HS_MAGIC, buf
    n = struct.unpack(">H", buf[6:8])[0]
    body = b""
    while len(body) < n:
        part = sock.recv(n - len(body))
        if not part:
            return None, body
        body += part
    return buf[5], body


def hs_mac(secret, role, label, cn, sn):
    import hashlib
    import hmac
    msg = b"mooncake-auth-v1 " + role + b"\0" + label + b"\0" + cn + sn
    return hmac.new(secret, msg, hashlib.sha256).digest()


def rpc_handshake(sock, secret, label=b"master-rpc", record=None):
    """The client side of the handshake on a connected socket; returns the RESULT code
    (0 = authenticated). record (a list) receives the frames this side sent."""
    cn = secrets.token_bytes(32)
    hello = hs_frame(HS_HELLO, cn + bytes([len(label)]) + label)
    sock.sendall(hello)
    t, body = hs_read(sock)
    if t == HS_RESULT:
        return body[0]
    assert t == HS_CHALLENGE, (t, body)
    sn, smac = body[:32], body[32:64]
    assert smac == hs_mac(secret, b"server", label, cn, sn), "the server's proof is wrong"
    resp = hs_frame(HS_RESPONSE, hs_mac(secret, b"client", label, cn, sn))
    sock.sendall(resp)
    if record is not None:
        record += [hello, resp]
    t, body = hs_read(sock)
    assert t == HS_RESULT, (t, body)
    return body[0]


def rpc_serve_handshake(conn, secret=None, label=b"master-rpc"):
    """The server side of the handshake on an accepted socket, for a test's stand-in of a
    server (secret None: the suite's; nothing happens when there is none). Returns True
    when the peer proved it holds the secret (RESULT ok sent), False after a RESULT that
    refuses it."""
    import hmac
    secret = secret if secret is not None else auth_secret()
    if not secret:
        return True
    try:
        t, body = hs_read(conn)
    except AssertionError:   # not a handshake frame: a client without the secret
        conn.sendall(hs_frame(HS_RESULT, bytes([1])))   # client-no-secret
        return False
    if t != HS_HELLO or len(body) < 33 or body[33:33 + body[32]] != label:
        conn.sendall(hs_frame(HS_RESULT, bytes([5 if t == HS_HELLO else 6])))
        return False
    cn, sn = body[:32], secrets.token_bytes(32)
    conn.sendall(hs_frame(HS_CHALLENGE, sn + hs_mac(secret, b"server", label, cn, sn)))
    t, body = hs_read(conn)
    ok = t == HS_RESPONSE and hmac.compare_digest(body[:32],
                                                  hs_mac(secret, b"client", label, cn, sn))
    conn.sendall(hs_frame(HS_RESULT, bytes([0 if ok else 3])))   # ok / bad-client-mac
    return ok


def rpc_connect(port, secret=None, timeout=10):
    """A connection to a master RPC port, authenticated with secret (None: the suite's,
    and no handshake when there is none)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    secret = secret if secret is not None else auth_secret()
    if secret:
        code = rpc_handshake(sock, secret)
        assert code == 0, f"handshake refused: {code}"
        sock.settimeout(timeout)
    return sock


if AUTH_MODE:
    _plain_request = requests.Session.request

    def _signed_request(self, method, url, **kw):
        if kw.get("auth") is None and self.auth is None:
            kw["auth"] = MCAuth()
        return _plain_request(self, method, url, **kw)

    requests.Session.request = _signed_request


def tool(name):
    """Absolute path of an installed tool; fails the test clearly when it is missing."""
    path = os.path.join(BIN_DIR, name)
    if os.path.exists(path):
        return path
    found = shutil.which(name)
    if not found:
        pytest.fail(f"tool {name!r} is not installed (run `make setup`)")
    return found


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, host="127.0.0.1", timeout=10.0, proc=None):
    """Waits until host:port accepts connections; raises TimeoutError (or RuntimeError if
    proc exited first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            # what it said (the spawner pipes stderr there); only what is buffered, since
            # a child of it may still hold the pipe open
            chunks = []
            if proc.stdout is not None:
                try:
                    fd = proc.stdout.fileno()
                    os.set_blocking(fd, False)
                    while True:
                        b = os.read(fd, 65536)
                        if not b:
                            break
                        chunks.append(b)
                except (BlockingIOError, OSError, ValueError):
                    pass
            out = b"".join(chunks).decode(errors="replace")[-4000:]
            raise RuntimeError(f"process exited with {proc.returncode} before listening "
                               f"on {host}:{port}; its output:\n{out}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def wait_until(pred, timeout, what="the condition", step=0.05):
    """Polls pred() every `step` seconds until it returns a true value, which is returned;
    fails the test naming `what` when `timeout` seconds pass first. The timeout is a
    deadline against hangs, sized for a loaded 2-core box, not a claim about speed."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            pytest.fail(f"{what}: not true after {timeout} s")
        time.sleep(step)


def all_threads_stopped(pid):
    """True when every thread of pid is in the kernel's stopped state (T/t), or pid is
    gone. SIGSTOP is asynchronous: a thread running on another core can still answer a
    request after kill() returned, so a test that needs a stopped peer waits for this."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread exited meanwhile
        if state not in ("T", "t"):
            return False
    return True


def sigstop(pid, timeout=10.0):
    """SIGSTOPs pid and waits (bounded) until all of its threads are stopped."""
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: all_threads_stopped(pid), timeout, f"process {pid} stopped", 0.005)


def read_until(proc, pattern, timeout, what=None):
    """Reads proc.stdout (a pipe) until the text read matches the regex `pattern`;
    returns that text (proc keeps running; read the rest as usual). Fails the test when
    the deadline passes or the process closes its output first."""
    import re
    import select
    fd, buf = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while not re.search(pattern, buf.decode(errors="replace")):
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"{what or pattern!r}: not in the output after {timeout} s: "
                        f"{buf[-2000:]!r}")
        r, _, _ = select.select([fd], [], [], left)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                pytest.fail(f"{what or pattern!r}: output closed first: {buf[-2000:]!r}")
            buf += chunk
    return buf.decode(errors="replace")


def unsent_tcp_bytes(pid):
    """Bytes waiting in the send queues of the TCP sockets process `pid` holds (from
    /proc/net/tcp{,6}): more than 0 while a write is stuck on a peer that stopped reading."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    f = line.split()
                    if f[9] in inodes:
                        total += int(f[4].split(":")[0], 16)   # tx_queue
        except FileNotFoundError:
            pass
    return total


class _Spawner:
    def __init__(self):
        self.procs = []

    def __call__(self, args, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.STDOUT)
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(args, **kw)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


@pytest.fixture
def spawn():
    s = _Spawner()
    yield s
    s.cleanup()


# ---- metadata servers: etcd and Redis ----------------------------------------------------

METADATA_BACKENDS = ["http", "etcd", "redis", "p2p"]


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory):
    from kv_servers import EtcdServer, binary
    if not binary("etcd"):
        pytest.fail("etcd is not installed (Debian etcd-server; run `make setup`)")
    s = EtcdServer(str(tmp_path_factory.mktemp("etcd")))
    yield s
    s.stop()


@pytest.fixture(scope="session")
def redis_metadata_server(tmp_path_factory):
    from kv_servers import RedisServer, binary
    if not binary("redis-server"):
        pytest.fail("redis-server is not installed (run `make setup`)")
    s = RedisServer(str(tmp_path_factory.mktemp("redis")), password="mc-test-pw")
    yield s
    s.stop()


def kv_metadata(request, kind):
    """The session's etcd or Redis server (kind "etcd" / "redis"), emptied of keys."""
    s = request.getfixturevalue("etcd_server" if kind == "etcd" else "redis_metadata_server")
    s.clear()
    return s


def store_metadata(request, kind):
    """The `metadata_server` string store tests give to setup for backend `kind`, or None
    for "http" (the master's embedded HTTP metadata server, StoreCluster's default).
    etcd: a list whose first endpoint is down, so every client fails over to the live
    one; Redis: the session's server with its password and db 1."""
    if kind == "http":
        return None
    if kind == "p2p":
        return "P2PHANDSHAKE"
    s = kv_metadata(request, kind)
    if kind == "etcd":
        return f"etcd://127.0.0.1:{free_port()},{s.bare}"
    return s.conn(db=1)


# ---- the module-scoped store cluster most store tests share (a test module that needs
# other master flags, or a parametrised cluster, defines its own `cluster`, which wins) ----

@pytest.fixture(scope="module")
def cluster():
    """A master (with its embedded HTTP metadata server) for the test module."""
    from store_proc import StoreCluster
    sp = _Spawner()
    try:
        yield StoreCluster(sp)
    finally:
        sp.cleanup()


@pytest.fixture(scope="module")
def store(cluster):
    """An in-process MooncakeDistributedStore set up against `cluster`."""
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup(*cluster.setup_args()) == 0
    yield s
    s.close()


@pytest.fixture(scope="module")
def peer(cluster):
    """A second store client in its own process (store_proc.StoreProc)."""
    from store_proc import StoreProc
    p = StoreProc(cluster.setup_args())
    assert p.setup_rc == 0
    yield p
    p.close()
