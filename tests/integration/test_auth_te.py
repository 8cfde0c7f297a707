"""The cluster secret on the transfer engine's ports (issue 11, docs/security.md
"Transfer engine data and handshake ports", "Same-host socket").

Real engines (mooncake.engine, P2PHANDSHAKE on 127.0.0.1) each in its own process (this
file run as ``python test_auth_te.py peer``), each given its own MC_AUTH_TOKEN_FILE (or
none). The attacker is this test process speaking the ports' bytes itself: without the
secret, with another one, replaying a recorded handshake, from another uid on the
same-host socket, and flooding the data port from 127.0.0.2. After every refusal the
target's registered memory is checked unchanged and its served-bytes counter zero.
The test's own client of the handshake (``Auth``) follows src/common/auth.h.
"""
import hashlib
import hmac
import json
import os
import secrets
import select
import socket
import struct
import subprocess
import sys
import time

import pytest

T = 20.0  # generous bound for one peer command on a loaded box
SIZE = 1 << 20
LABEL_DATA, LABEL_HS, LABEL_SHM = b"te-data", b"te-handshake", b"te-shm"
CLIENT_NO_SECRET, SERVER_NO_SECRET, BAD_CLIENT_MAC = 1, 2, 3


# ---- the peer process -------------------------------------------------------------------

def peer_main():
    import numpy as np
    from mooncake.engine import TransferEngine

    te = TransferEngine()
    rc = te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    if rc != 0:
        print(json.dumps({"init": rc}), flush=True)
        return 1
    user = np.zeros(SIZE, dtype=np.uint8)
    assert te.register_memory(user.ctypes.data, SIZE) == 0
    managed = te.allocate_managed_buffer(SIZE)
    print(json.dumps({"init": 0, "segment": te.segment_name, "rpc_port": te.get_rpc_port(),
                      "user": user.ctypes.data, "managed": managed}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "sha":
            if cmd["buf"] == "user":
                data = user.tobytes()
            else:
                data = te.read_bytes_from_buffer(managed, SIZE)
            reply = {"sha": hashlib.sha256(data).hexdigest()}
        elif op == "write":  # a seeded pattern from our user buffer to target's `remote`
            user[:cmd["len"]] = np.frombuffer(pattern(cmd["seed"], cmd["len"]), np.uint8)
            reply = {"rc": te.transfer_sync_write(cmd["target"], user.ctypes.data,
                                                  cmd["remote"], cmd["len"])}
        elif op == "stats":
            reply = te._stats()
        else:
            reply = {"error": op}
        print(json.dumps(reply), flush=True)
    return 0


def pattern(seed, n):
    return hashlib.shake_256(str(seed).encode()).digest(n)


class Peer:
    def __init__(self, spawn, tmp_path, token=None, extra_env=None):
        env = dict(os.environ)
        env.pop("MC_AUTH_TOKEN_FILE", None)
        env.pop("MC_TEST_AUTH", None)
        if token:
            env["MC_AUTH_TOKEN_FILE"] = token
        env.update(extra_env or {})
        self.log_path = tmp_path / f"peer-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "wb")
        self.proc = spawn([sys.executable, os.path.abspath(__file__), "peer"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                          env=env)
        self.buf = b""
        self.info = self._read()
        assert self.info.get("init") == 0, self.logs()
        self.segment = self.info["segment"]
        self.port = self.info["rpc_port"]

    def logs(self):
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def _read(self):
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + T
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, f"peer did not answer: {self.logs()[-2000:]}"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                assert chunk, f"peer exited: {self.logs()[-2000:]}"
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, **cmd):
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        return self._read()

    def sha(self, buf):
        return self.call(op="sha", buf=buf)["sha"]

    def stats(self):
        return self.call(op="stats")

    def write(self, target, remote, n, seed):
        return self.call(op="write", target=target.segment, remote=remote, len=n,
                         seed=seed)["rc"]


def make_token(tmp_path, name="cluster.token"):
    path = tmp_path / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (secrets.token_hex(32) + "\n").encode())
    os.close(fd)
    return str(path)


def secret_of(path):
    return open(path, "rb").read().rstrip(b"\n")


# ---- the handshake, as a client (src/common/auth.h) ------------------------------------

def frame(ftype, body):
    return b"MCAU" + bytes([1, ftype]) + struct.pack(">H", len(body)) + body


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        c = s.recv(n - len(out))
        if not c:
            break
        out += c
    return out


def read_frame(s):
    h = recv_exact(s, 8)
    if len(h) < 8:
        return None, h
    return h[5], h + recv_exact(s, struct.unpack(">H", h[6:8])[0])


def recv_to_eof(s, limit=4096):
    out = b""
    s.settimeout(T)
    while len(out) < limit:
        try:
            c = s.recv(limit - len(out))
        except ConnectionResetError:
            break
        if not c:
            break
        out += c
    return out


def result_code(data):
    """The code of a RESULT frame that is the whole of data."""
    assert len(data) == 9 and data[:4] == b"MCAU" and data[5] == 4, data
    return data[8]


def mac(secret, role, label, cn, sn):
    return hmac.new(secret, b"mooncake-auth-v1 " + role + b"\0" + label + b"\0" + cn + sn,
                    hashlib.sha256).digest()


def authenticate(s, secret, label, record=None):
    """Runs the client side over socket s; returns the server's RESULT code. A wrong
    secret still answers (as an attacker would). record: a list that receives the
    frames this side sent."""
    cn = secrets.token_bytes(32)
    hello = frame(1, cn + bytes([len(label)]) + label)
    s.sendall(hello)
    ftype, ch = read_frame(s)
    if ftype != 2:
        return result_code(ch)
    sn = ch[8:40]
    resp = frame(3, mac(secret, b"client", label, cn, sn))
    s.sendall(resp)
    if record is not None:
        record += [hello, resp]
    ftype, res = read_frame(s)
    return result_code(res)


def connect(port, src=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if src:
        s.bind((src, 0))
    s.settimeout(T)
    s.connect(("127.0.0.1", port))
    return s


def hs_request(port, secret, ftype, payload):
    """One request on a peer's handshake port (upstream framing), authenticated."""
    with connect(port) as s:
        assert authenticate(s, secret, LABEL_HS) == 0
        s.sendall(struct.pack("<Q", len(payload) + 1) + bytes([ftype]) + payload)
        n = struct.unpack("<Q", recv_exact(s, 8))[0]
        body = recv_exact(s, n)
        assert body[0] == ftype
        return body[1:]


def descriptor(peer, secret):
    return json.loads(hs_request(peer.port, secret, 1,
                                 json.dumps({"segment_name": peer.segment}).encode()))


def te_header(op, rid, addr, length):
    return struct.pack("<IBBHQQQQ", 0x4554434D, 2, op, 0, rid, addr, length, 0)


def unix_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(T)
    s.connect("\0" + path[1:] if path.startswith("@") else path)
    return s


# ---- tests ------------------------------------------------------------------------------

@pytest.fixture
def token(tmp_path):
    return make_token(tmp_path)


def test_right_secret_transfers_over_tcp_and_shm(spawn, tmp_path, token):
    a = Peer(spawn, tmp_path, token)
    b = Peer(spawn, tmp_path, token)
    assert b.write(a, a.info["user"], 256 << 10, seed=1) == 0       # TCP (user memory)
    assert b.write(a, a.info["managed"], 256 << 10, seed=2) == 0    # same-host (memfd)
    want1 = hashlib.sha256(pattern(1, 256 << 10) + bytes(SIZE - (256 << 10))).hexdigest()
    want2 = hashlib.sha256(pattern(2, 256 << 10) + bytes(SIZE - (256 << 10))).hexdigest()
    assert a.sha("user") == want1
    assert a.sha("managed") == want2
    sb = b.stats()
    assert sb["tcp_bytes_sent"] >= 256 << 10 and sb["shm_bytes"] >= 256 << 10
    assert sb["auth_failed"] == 0 and a.stats()["auth_refused"] == 0
    assert "cluster secret required on every port" in a.logs()


def test_refused_without_or_with_another_secret(spawn, tmp_path, token):
    a = Peer(spawn, tmp_path, token)
    before = a.sha("user"), a.sha("managed")
    none = Peer(spawn, tmp_path, None)
    other = Peer(spawn, tmp_path, make_token(tmp_path, "other.token"))
    for b in (none, other):
        assert b.write(a, a.info["user"], 4096, seed=3) != 0
        assert b.write(a, a.info["managed"], 4096, seed=4) != 0
    assert (a.sha("user"), a.sha("managed")) == before
    st = a.stats()
    assert st["served_bytes"] == 0 and st["auth_refused"] >= 2
    assert "the server requires the cluster secret and this client has none" in none.logs()
    assert "it has no cluster secret configured but this server requires one" in a.logs()
    assert "different secrets" in other.logs() or "another secret" in other.logs()


def test_raw_clients_refused_before_any_byte(spawn, tmp_path, token):
    """Without the secret, with another, or replaying a recorded handshake: refused on
    the data port, the handshake port and the same-host socket; nothing read or written."""
    a = Peer(spawn, tmp_path, token)
    secret = secret_of(token)
    desc = descriptor(a, secret)  # the right secret works on the handshake port
    data_port, shm_path = desc["tcp_data_port"], desc["shm_socket"]
    before = a.sha("user"), a.sha("managed")

    # no secret: a WRITE (header + payload) and a READ, straight away
    with connect(data_port) as s:
        s.sendall(te_header(1, 1, a.info["user"], 4096) + b"\xab" * 4096)
        assert result_code(recv_to_eof(s)) == CLIENT_NO_SECRET
    with connect(data_port) as s:
        s.sendall(te_header(2, 2, a.info["user"], 4096))
        assert result_code(recv_to_eof(s)) == CLIENT_NO_SECRET
    with connect(a.port) as s:  # upstream handshake frame: Metadata
        s.sendall(struct.pack("<Q", 3) + b"\x01{}")
        assert result_code(recv_to_eof(s)) == CLIENT_NO_SECRET
    with unix_connect(shm_path) as s:  # a map request for the managed buffer
        s.sendall(struct.pack("<IIQ", 0x48534D43, 1, a.info["managed"]))
        msg, anc, _, _ = s.recvmsg(64, socket.CMSG_SPACE(16))
        assert result_code(msg) == CLIENT_NO_SECRET and not anc  # no fd handed out

    opens = {"data": lambda: connect(data_port), "hs": lambda: connect(a.port),
             "shm": lambda: unix_connect(shm_path)}
    labels = {"data": LABEL_DATA, "hs": LABEL_HS, "shm": LABEL_SHM}
    for name, op in opens.items():
        with op() as s:  # another secret
            assert authenticate(s, b"x" * 32, labels[name]) == BAD_CLIENT_MAC
        rec = []
        with op() as s:  # the right one, recorded
            assert authenticate(s, secret, labels[name], rec) == 0
        with op() as s:  # replayed: the server's nonce is new
            s.sendall(rec[0])
            ftype, _ = read_frame(s)
            assert ftype == 2
            s.sendall(rec[1])
            assert result_code(recv_to_eof(s)) == BAD_CLIENT_MAC
        with op() as s:  # the right secret, another port's label
            other = LABEL_SHM if name != "shm" else LABEL_DATA
            assert authenticate(s, secret, other) == 5  # wrong-port

    # authenticated, the same-host socket hands out the memfd
    with unix_connect(shm_path) as s:
        assert authenticate(s, secret, LABEL_SHM) == 0
        s.sendall(struct.pack("<IIQ", 0x48534D43, 1, a.info["managed"]))
        msg, anc, _, _ = s.recvmsg(24, socket.CMSG_SPACE(16))
        assert struct.unpack("<i", msg[4:8])[0] == 0 and len(anc) == 1
        for fd in struct.unpack(f"{len(anc[0][2]) // 4}i", anc[0][2]):
            os.close(fd)

    assert (a.sha("user"), a.sha("managed")) == before
    st = a.stats()
    assert st["served_bytes"] == 0
    assert st["auth_refused"] >= 4 + 3 * 3


def test_bad_token_file_fails_initialize_naming_it(tmp_path):
    bad = tmp_path / "loose.token"
    bad.write_text(secrets.token_hex(32))
    os.chmod(bad, 0o644)
    env = {k: v for k, v in os.environ.items() if k not in ("MC_AUTH_TOKEN_FILE", "MC_TEST_AUTH")}
    env["MC_AUTH_TOKEN_FILE"] = str(bad)
    code = ("from mooncake.engine import TransferEngine\n"
            "print(TransferEngine().initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', ''))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=T)
    assert p.stdout.strip() == "-600", p.stdout + p.stderr  # INVALID_PARAMS
    assert str(bad) in p.stderr and "chmod 600" in p.stderr, p.stderr


def test_open_engine_and_client_with_secret(spawn, tmp_path, token):
    a = Peer(spawn, tmp_path, None)
    b = Peer(spawn, tmp_path, token)
    assert b.write(a, a.info["user"], 4096, seed=5) != 0
    assert "is open: no cluster secret is configured" in a.logs()
    assert "the server has no cluster secret configured but this client has one" in b.logs()
    assert "this server has no cluster secret configured" in a.logs()
    assert a.stats()["auth_refused"] >= 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another uid")
def test_same_host_socket_refuses_another_uid(spawn, tmp_path, token):
    a = Peer(spawn, tmp_path, token)
    secret = secret_of(token)
    shm_path = descriptor(a, secret)["shm_socket"]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody, holding the secret
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            s = unix_connect(shm_path)
            try:
                code = authenticate(s, secret, LABEL_SHM)
            except (OSError, AssertionError, TypeError, IndexError):
                code = -1  # closed before a byte was answered
            os.write(w, str(code).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = b""
    while True:
        c = os.read(r, 64)
        if not c:
            break
        got += c
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"-1", got
    assert a.stats()["peercred_refused"] == 1
    assert "same-host socket: refused process" in a.logs()


def test_flood_from_one_address(spawn, tmp_path, token):
    from conftest import wait_until
    cap = 16
    a = Peer(spawn, tmp_path, token, {"MC_TE_MAX_CONNECTIONS_PER_IP": str(cap)})
    b = Peer(spawn, tmp_path, token)
    data_port = descriptor(a, secret_of(token))["tcp_data_port"]
    flood = [connect(data_port, src="127.0.0.2") for _ in range(100)]
    try:
        def closed(s):
            s.setblocking(False)
            try:
                return s.recv(1) == b""
            except BlockingIOError:
                return False
            except ConnectionResetError:
                return True
        wait_until(lambda: sum(closed(s) for s in flood) >= 100 - cap, T,
                   "the connections past the per-address cap to be closed")
        assert b.write(a, a.info["user"], 64 << 10, seed=6) == 0  # from 127.0.0.1
        assert a.stats()["per_ip_refused"] >= 100 - cap
    finally:
        for s in flood:
            s.close()


if __name__ == "__main__" and sys.argv[1:] == ["peer"]:
    sys.exit(peer_main())
