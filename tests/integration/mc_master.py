"""Helpers for tests of ``mooncake_master``: a real master process on 127.0.0.1 and a
``mooncake_master_ctl`` process that drives it through the C client library
(src/client/master_client.c), one JSON command per line (see tools/mooncake_master_ctl.c).

Also a tiny encoder/decoder of the frame header (src/net/frame.h) for tests that send raw
bytes."""
import json
import select
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request

from conftest import auth_secret, free_port, tool, wait_port
from mooncake import _auth

FRAME_MAGIC = 0x5052434D
FRAME_HEADER = struct.Struct("<IBBHiIQ")  # magic, version, flags, opcode, status, len, id
FLAG_REPLY = 0x01

# Opcodes (proto/master.proto, enum Opcode).
OP_PING = 1
OP_SERVICE_READY = 2
OP_PUT_START = 20
OP_GET_REPLICA_LIST = 40

# Status codes (include/mooncake/status.h).
OK = 0
SEGMENT_NOT_FOUND = -101
SEGMENT_ALREADY_EXISTS = -102
NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
ILLEGAL_CLIENT = -601
INVALID_WRITE = -700
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
RPC_FAIL = -900
NOT_SUPPORTED = -1012

REPLICA_PROCESSING = 2
REPLICA_COMPLETE = 3


class Master:
    """A running ``mooncake_master`` on loopback ports of its own."""

    def __init__(self, spawn, *flags, rpc_port=None, metrics_port=None):
        self.spawn = spawn
        self.flags = list(flags)
        self.rpc_port = rpc_port or free_port()
        self.metrics_port = metrics_port or free_port()
        self.proc = None
        # free_port()'s port may be taken by another process (an outgoing connection's
        # ephemeral port) before the master binds it: then the master exits saying so,
        # and ports of our own choosing are chosen again (at most 3 tries)
        for attempt in range(3):
            try:
                self.start()
                return
            except RuntimeError as e:
                if attempt == 2 or rpc_port or metrics_port or \
                        "Address already in use" not in str(e):
                    raise
                self.rpc_port, self.metrics_port = free_port(), free_port()

    @property
    def addr(self):
        return f"127.0.0.1:{self.rpc_port}"

    def start(self):
        args = [tool("mooncake_master"), f"--rpc_port={self.rpc_port}",
                "--rpc_address=127.0.0.1", f"--metrics_port={self.metrics_port}",
                "--metrics_host=127.0.0.1", *self.flags]
        self.proc = self.spawn(args)
        wait_port(self.rpc_port, proc=self.proc, timeout=10)
        wait_port(self.metrics_port, proc=self.proc, timeout=10)

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Stops the master; returns (exit code, its whole output)."""
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out.decode(errors="replace")

    def restart(self):
        self.stop()
        self.start()

    def http(self, path, method="GET"):
        """(status, body bytes) of an admin HTTP request."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.metrics_port}{path}",
                                     method=method)
        secret = auth_secret()   # MC_TEST_AUTH=1: the suite's secret
        if secret:
            req.add_header("Authorization", _auth.sign(secret, method, path))
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metrics(self):
        """/metrics as {name: value} (samples without labels)."""
        status, body = self.http("/metrics")
        assert status == 200
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out


class Ctl:
    """One ``mooncake_master_ctl`` process = one client (one client id) of the master."""

    def __init__(self, spawn, master_addr, client_id=None, timeout_ms=5000):
        args = [tool("mooncake_master_ctl"), f"--master={master_addr}",
                f"--rpc_timeout_ms={timeout_ms}"]
        if client_id:
            args.append(f"--client_id={client_id}")
        self.proc = spawn(args, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def __call__(self, *cmd, timeout=15.0):
        line = json.dumps(list(cmd)) + "\n"
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        what = repr(cmd)[:200]
        assert ready, f"no answer to {what} within {timeout}s"
        out = self.proc.stdout.readline()
        assert out, f"mooncake_master_ctl exited ({self.proc.poll()}) on {what}"
        return json.loads(out)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def segment(name="127.0.0.1:17001", base=None, size=64 << 20, **kw):
    """A SEG object for the ctl's mount / remount commands. The default base is 4 GiB for
    the default name and a distinct 64 GiB-aligned address per other name, so that one
    client's segments of different names never overlap (the master refuses that:
    docs/security.md)."""
    if base is None:
        import zlib
        base = 1 << 32 if name == "127.0.0.1:17001" else \
            (1 << 32) + ((zlib.crc32(name.encode()) % 65536) + 1 << 36)
    return {"name": name, "base": base, "size": size, **kw}


# ---- raw frames ----

def frame(opcode, body=b"", request_id=1, flags=0, magic=FRAME_MAGIC, version=1,
          body_len=None):
    n = len(body) if body_len is None else body_len
    return FRAME_HEADER.pack(magic, version, flags, opcode, 0, n, request_id) + body


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_uuid(first, second):
    """Uuid{first, second} in protobuf encoding (two fixed64 fields)."""
    return b"\x09" + struct.pack("<Q", first) + b"\x11" + struct.pack("<Q", second)


def pb_ld(field, data):
    """A length-delimited protobuf field: its key, the varint length, the bytes."""
    return bytes([field << 3 | 2]) + _varint(len(data)) + data


def pb_varint(field, v):
    """A varint protobuf field (v >= 0)."""
    return bytes([field << 3]) + _varint(v)


def ping_body(first=1, second=2):
    """PingRequest{client_id: Uuid{first, second}} in protobuf encoding."""
    return pb_ld(1, pb_uuid(first, second))


def decode_fields(body):
    """Top-level protobuf fields of body: {field number: value} (varints, length-
    delimited as bytes); enough to check small replies."""
    out, i = {}, 0
    while i < len(body):
        key, shift = 0, 0
        while True:
            b = body[i]
            i += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, shift = 0, 0
            while True:
                b = body[i]
                i += 1
                v |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            out[field] = v
        elif wt == 2:
            n, shift = 0, 0
            while True:
                b = body[i]
                i += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            out[field] = body[i:i + n]
            i += n
        elif wt == 1:
            out[field] = body[i:i + 8]
            i += 8
        elif wt == 5:
            out[field] = body[i:i + 4]
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
    return out


def zigzag(v):
    return (v >> 1) ^ -(v & 1)


def recv_exact(sock, n, timeout=10.0):
    sock.settimeout(timeout)
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv_frame(sock, timeout=10.0):
    """(header tuple (magic, version, flags, opcode, status, len, id), body)."""
    hdr = FRAME_HEADER.unpack(recv_exact(sock, FRAME_HEADER.size, timeout))
    body = recv_exact(sock, hdr[5], timeout) if hdr[5] else b""
    return hdr, body


def closed_by_peer(sock, timeout=10.0):
    """True when the peer closes the connection (EOF or reset) within timeout."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False
