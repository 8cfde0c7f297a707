"""transfer_engine_bench between two real processes on 127.0.0.1 (P2PHANDSHAKE), and an
engine that keeps serving after garbage arrives on its data and handshake ports.

Each test is bounded: the target is killed at teardown, initiators run about a second.
The figures the bench prints are checked for form, never for size (speed is bench/'s).
"""
import json
import os
import re
import socket
import struct
import subprocess

import pytest

from conftest import auth_secret, read_until, rpc_handshake, tool

FINAL = re.compile(r"Test completed: duration ([\d.]+), batch count (\d+), "
                   r"throughput ([\d.]+) GB/s")
ENV = dict(os.environ, MC_LOG_LEVEL="WARNING")


def start_target(spawn, *extra, env=None):
    p = spawn([tool("transfer_engine_bench"), "--mode=target", "--metadata_server=P2PHANDSHAKE",
               "--local_server_name=127.0.0.1", "--buffer_size=16mb", *extra],
              env=env or ENV)
    text = read_until(p, r"segment_id 127\.0\.0\.1:\d+", 20, "the target ready")
    return p, re.search(r"segment_id (127\.0\.0\.1:\d+)", text).group(1)


def initiator(segment, *extra, timeout=60, env=None):
    return subprocess.run(
        [tool("transfer_engine_bench"), "--mode=initiator", "--metadata_server=P2PHANDSHAKE",
         "--local_server_name=127.0.0.1", f"--segment_id={segment}", "--buffer_size=16mb",
         "--threads=2", "--batch_size=16", "--block_size=65536", *extra],
        capture_output=True, text=True, timeout=timeout, env=env or ENV)


@pytest.mark.parametrize("op", ["write", "read"])
def test_bench_target_and_initiator(spawn, op):
    target, seg = start_target(spawn)
    out = initiator(seg, f"--operation={op}", "--duration=2")
    assert out.returncode == 0, out.stderr
    assert re.search(r"progress: [\d.]+ s, batch count \d+, throughput [\d.]+ GB/s", out.stdout)
    m = FINAL.search(out.stdout)
    assert m, out.stdout
    assert int(m.group(2)) > 0        # batches completed (how fast is bench/'s question)
    assert re.search(r"p50 [\d.]+ us, p99 [\d.]+ us", out.stdout)
    assert target.poll() is None


def test_bench_same_host_path_and_units(spawn):
    target, seg = start_target(spawn, "--use_shm")
    out = initiator(seg, "--duration=1", "--report_unit=MiB", "--report_precision=1")
    assert out.returncode == 0, out.stderr
    assert re.search(r"Test completed: duration [\d.]+, batch count \d+, throughput [\d.]+ MiB/s",
                     out.stdout), out.stdout
    assert "same-host shared memory" in out.stdout
    forced = initiator(seg, "--duration=1", env=dict(ENV, MC_FORCE_TCP="1"))
    assert forced.returncode == 0, forced.stderr
    assert "Path: tcp" in forced.stdout


def test_bench_bad_flags_and_unknown_peer(spawn):
    bad = subprocess.run([tool("transfer_engine_bench"), "--mode=bogus"], capture_output=True,
                         text=True, timeout=20)
    assert bad.returncode == 2 and "--mode" in bad.stderr
    bad = subprocess.run([tool("transfer_engine_bench"), "--no_such_flag=1"],
                         capture_output=True, text=True, timeout=20)
    assert bad.returncode == 2
    out = initiator("", "--duration=1")
    assert out.returncode == 2 and "--segment_id" in out.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = initiator(f"127.0.0.1:{port}", "--duration=1")
    assert out.returncode == 1 and "segment" in out.stderr


def te_connect(port, label, timeout=5.0):
    """A connection to an engine's handshake (label b"te-handshake") or data (b"te-data")
    port, authenticated first when the suite has a secret (MC_TEST_AUTH=1), so what
    follows reaches the port's own parser."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    secret = auth_secret()
    if secret:
        code = rpc_handshake(s, secret, label=label)
        assert code == 0, f"handshake refused: {code}"
        s.settimeout(timeout)
    return s


def hs_request(port, ftype, payload, timeout=5.0):
    """One handshake frame (u64 length incl. type, u8 type, payload) and its answer."""
    with te_connect(port, b"te-handshake", timeout) as s:
        s.sendall(struct.pack("<QB", len(payload) + 1, ftype) + payload)
        hdr = b""
        while len(hdr) < 9:
            chunk = s.recv(9 - len(hdr))
            assert chunk, "closed before answering"
            hdr += chunk
        n, t = struct.unpack("<QB", hdr)
        body = b""
        while len(body) < n - 1:
            chunk = s.recv(n - 1 - len(body))
            assert chunk
            body += chunk
        return t, body


def expect_closed(sock, timeout=5.0):
    sock.settimeout(timeout)
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return
        if not chunk:
            return


def test_garbage_on_data_and_handshake_ports(spawn):
    target, seg = start_target(spawn)
    rpc_port = int(seg.rsplit(":", 1)[1])
    t, body = hs_request(rpc_port, 1, b'{"segment_name": "%s"}' % seg.encode())
    assert t == 1
    desc = json.loads(body)
    assert desc["name"] == seg and desc["protocol"] == "tcp"
    data_port = desc["tcp_data_port"]
    assert desc["buffers"] and desc["buffers"][0]["length"] == 16 << 20

    # data port: random bytes, a header with an absurd length, half a header
    # (wire version 2: 40-byte request headers ending in the fence epoch)
    for junk in (os.urandom(4096), b"MCTE" + b"\x02\x01\x00\x00" + b"\xff" * 32, b"MCTE\x02"):
        with te_connect(data_port, b"te-data") as s:
            s.sendall(junk)
            if len(junk) > 5:
                expect_closed(s)
    # a well-formed write to an address the target never registered: refused, and the
    # connection stays usable (a ping right after is answered)
    with te_connect(data_port, b"te-data") as s:
        s.sendall(struct.pack("<IBBHQQQQ", 0x4554434D, 2, 1, 0, 1, 4096, 8, 0) + b"x" * 8)
        s.sendall(struct.pack("<IBBHQQQQ", 0x4554434D, 2, 4, 0, 2, 0, 0, 0))
        rep = b""
        while len(rep) < 48:
            chunk = s.recv(48 - len(rep))
            assert chunk
            rep += chunk
        magic, status, rid, length = struct.unpack("<IiQQ", rep[:24])
        assert (magic, rid, length) == (0x5254434D, 1, 0) and status < 0
        magic, status, rid, length = struct.unpack("<IiQQ", rep[24:])
        assert (magic, status, rid) == (0x5254434D, 0, 2)

    # handshake port: zero length and oversized frames are dropped, unknown types answered
    for frame in (struct.pack("<Q", 0) + b"\x01", struct.pack("<Q", 1 << 40) + b"\x01",
                  os.urandom(64)):
        with te_connect(rpc_port, b"te-handshake") as s:
            s.sendall(frame)
            expect_closed(s)
    t, body = hs_request(rpc_port, 7, b"{}")
    assert t == 7 and b"error" in body
    t, body = hs_request(rpc_port, 2, b"not json")
    assert t == 2 and b"error" in body
    t, body = hs_request(rpc_port, 3, b"{}")
    assert (t, body) == (3, b"{}")

    # still serving: a good run of the initiator
    assert target.poll() is None
    out = initiator(seg, "--duration=1", "--operation=write")
    assert out.returncode == 0, out.stderr
    assert FINAL.search(out.stdout)
