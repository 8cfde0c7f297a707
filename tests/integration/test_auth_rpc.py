"""The master RPC port under the cluster secret (issue 11, docs/security.md): the
handshake of src/common/auth.h before any request byte, refusals counted in
``master_rpc_refused_total{reason}``, the limits per peer (connections in all and per
address, unread replies), and the authorisation of destructive calls (foreign mounts and
unmounts, bad segment descriptors).

Real ``mooncake_master`` processes on 127.0.0.1 with a token file of their own (the suite's
MC_AUTH_TOKEN_FILE, when MC_TEST_AUTH=1, is taken out of their environment); raw sockets
for what a client library would never send (no handshake, a wrong proof, a replay), the
store client for the rest. Store clients use P2PHANDSHAKE metadata (the RPC port is what
is under test here). Floods are bounded in count and time, loopback only; every wait has
a deadline.
"""
import contextlib
import os
import re
import select
import socket
import time

import pytest

from conftest import (HS_HELLO, HS_RESULT, hs_frame, hs_read, rpc_connect, rpc_handshake,
                      wait_until)
from mc_master import ILLEGAL_CLIENT, INVALID_PARAMS, OK, Master, decode_fields, frame, \
    pb_ld, pb_uuid, pb_varint, recv_frame, zigzag
from test_auth_http import SECRET, NoAuth, call, connect_from, env_with, rss_kb, token_file

import mooncake.store as ms

pytestmark = pytest.mark.skipif(not hasattr(ms, "MooncakeDistributedStore"),
                                reason="mooncake.store has no MooncakeDistributedStore")

OTHER = b"another-secret-0123456789abcdef!"

OP_SERVICE_READY, OP_MOUNT, OP_UNMOUNT = 2, 10, 12
OP_REGEX, OP_REMOVE_ALL = 42, 63

# RESULT codes (src/common/auth.h)
CLIENT_NO_SECRET, SERVER_NO_SECRET, BAD_CLIENT_MAC, BAD_SERVER_MAC = 1, 2, 3, 4


# ------------------------------------------------------------------------ helpers

def start(spawn, token, *flags):
    """A master with `token` (a path, or None: open) and nothing from the suite's env."""
    env = env_with()
    args = ["--enable_metric_reporting=false", *flags]
    if token:
        args.append(f"--auth_token_file={token}")
    return Master(lambda a: spawn(a, env=env), *args)


def metrics_text(m):
    return call("GET", f"http://127.0.0.1:{m.metrics_port}/metrics", NoAuth()).text


def metric(m, name):
    v = re.search(r"^" + re.escape(name) + r" (\d+)$", metrics_text(m), re.M)
    return int(v.group(1)) if v else None


def refused(m, reason):
    return metric(m, f'master_rpc_refused_total{{reason="{reason}"}}')


@contextlib.contextmanager
def no_suite_secret():
    """The C store reads MC_AUTH_TOKEN_FILE at setup: hide the suite's (MC_TEST_AUTH=1)."""
    saved = os.environ.pop("MC_AUTH_TOKEN_FILE", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["MC_AUTH_TOKEN_FILE"] = saved


def store_setup(m, segment=16 << 20, **kw):
    """(rc, store) of a fresh in-process store client of master m."""
    s = ms.MooncakeDistributedStore()
    with no_suite_secret():
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, 16 << 20, "tcp", "", m.addr, **kw)
    return rc, s


def mount_body(seg_id, client, name, base, size, host=None):
    seg = (pb_ld(1, pb_uuid(*seg_id)) + pb_ld(2, name.encode()) + pb_varint(3, base)
           + pb_varint(4, size))
    if host:
        seg += pb_ld(7, host.encode())
    return pb_ld(1, seg) + pb_ld(2, pb_uuid(*client))


def unmount_body(seg_id, client):
    return pb_ld(1, pb_uuid(*seg_id)) + pb_ld(2, pb_uuid(*client))


def rpc(sock, op, body=b"", rid=1):
    """One request on an authenticated raw connection; the reply's status field."""
    sock.sendall(frame(op, body, request_id=rid))
    hdr, reply = recv_frame(sock)
    assert hdr[4] == 0 and hdr[6] == rid, hdr
    return zigzag(decode_fields(reply).get(1, 0))


def result_then_close(sock):
    """The RESULT code the server answered with, after which it must close."""
    t, body = hs_read(sock)
    assert t == HS_RESULT, (t, body)
    sock.settimeout(5)
    try:
        rest = sock.recv(100)
    except ConnectionResetError:
        rest = b""
    assert rest == b"", rest
    return body[0]


def handshake_no_check(sock, secret, label=b"master-rpc"):
    """The client side with `secret`, not checking the server's proof (a client with a
    wrong secret that goes on anyway): the RESULT code."""
    import secrets as _s
    from conftest import hs_mac, HS_RESPONSE
    cn = _s.token_bytes(32)
    sock.sendall(hs_frame(HS_HELLO, cn + bytes([len(label)]) + label))
    t, body = hs_read(sock)
    if t == HS_RESULT:
        return body[0]
    sock.sendall(hs_frame(HS_RESPONSE, hs_mac(secret, b"client", label, cn, body[:32])))
    return result_then_close(sock)


@pytest.fixture
def secured(spawn, tmp_path):
    """A master with SECRET and a store client of it holding one object."""
    m = start(spawn, token_file(tmp_path))
    rc, s = store_setup(m, auth_token=SECRET.decode())
    assert rc == 0
    assert s.put("kept", b"v" * 1000) == 0
    yield m, s
    s.close()


# ------------------------------------------------------------------------ handshake

def test_without_or_with_a_wrong_secret_refused_before_any_state_change(secured, capfd):
    m, s = secured
    keys, segs = metric(m, "master_key_count"), metric(m, "master_segment_count")
    assert (keys, segs) == (1, 1)
    # a raw RemoveAll without the handshake: RESULT client-no-secret, closed, nothing run
    with socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10) as c:
        c.sendall(frame(OP_REMOVE_ALL, b"\x08\x01"))
        assert result_then_close(c) == CLIENT_NO_SECRET
    # a wrong proof: the server's own proof does not check out either
    with socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10) as c:
        assert handshake_no_check(c, OTHER) == BAD_CLIENT_MAC
    # store clients: none, and another secret
    rc, s2 = store_setup(m)
    assert rc == ILLEGAL_CLIENT
    s2.close()
    rc, s3 = store_setup(m, auth_token=OTHER)       # bytes work as str does
    assert rc == ILLEGAL_CLIENT
    s3.close()
    err = capfd.readouterr().err
    assert "requires the cluster secret and this client has none" in err, err
    assert "server's proof of the cluster secret is wrong" in err, err
    assert f"master RPC at {m.addr}" in err and "--auth_token_file" in err, err
    # the master's state is as it was; the refusals are counted
    assert metric(m, "master_key_count") == keys
    assert metric(m, "master_segment_count") == segs
    assert s.get("kept") == b"v" * 1000
    assert refused(m, "client_no_secret") >= 2
    assert refused(m, "bad_mac") >= 2


def test_replayed_handshake_refused(secured):
    m, s = secured
    rec = []
    with socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10) as c:
        assert rpc_handshake(c, SECRET, record=rec) == 0
        assert rpc(c, OP_SERVICE_READY) == OK
    hello, response = rec
    # the recorded HELLO gets a fresh challenge: the recorded RESPONSE does not answer it
    with socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10) as c:
        c.sendall(hello)
        t, _ = hs_read(c)
        assert t != HS_RESULT
        c.sendall(response + frame(OP_REMOVE_ALL, b"\x08\x01"))
        assert result_then_close(c) == BAD_CLIENT_MAC
    # the whole recorded stream at once, as a dumb replayer would send it
    with socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10) as c:
        c.sendall(hello + response + frame(OP_REMOVE_ALL, b"\x08\x01"))
        t, _ = hs_read(c)
        assert result_then_close(c) == BAD_CLIENT_MAC
    assert metric(m, "master_key_count") == 1
    assert s.get("kept") == b"v" * 1000


def test_right_secret_works_in_every_form(secured, tmp_path):
    m, s = secured
    with rpc_connect(m.rpc_port, SECRET) as c:
        assert rpc(c, OP_SERVICE_READY) == OK
        assert rpc(c, OP_SERVICE_READY, rid=2) == OK
    # the dict form with a token file, and the environment variable
    s2 = ms.MooncakeDistributedStore()
    with no_suite_secret():
        assert s2.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                         "master_server_addr": m.addr, "global_segment_size": "0",
                         "auth_token_file": token_file(tmp_path, name="t2")}) == 0
    assert s2.get("kept") == b"v" * 1000
    s2.close()
    s3 = ms.MooncakeDistributedStore()
    with no_suite_secret():
        os.environ["MC_AUTH_TOKEN_FILE"] = token_file(tmp_path, name="t3")
        try:
            assert s3.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", m.addr) == 0
        finally:
            del os.environ["MC_AUTH_TOKEN_FILE"]
    assert s3.get("kept") == b"v" * 1000
    s3.close()
    assert metric(m, "master_rpc_authenticated_total") >= 4


def test_open_master_tells_a_client_with_a_secret(spawn, capfd):
    m = start(spawn, None)
    with socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10) as c:
        assert handshake_no_check(c, SECRET) == SERVER_NO_SECRET
    rc, s = store_setup(m, auth_token=SECRET)
    assert rc == ILLEGAL_CLIENT
    s.close()
    assert refused(m, "server_no_secret") >= 2
    code, out = m.stop()
    err = capfd.readouterr().err + out
    assert "has no cluster secret configured but this client has one" in err, err
    assert "master RPC on 127.0.0.1" in err and "is open" in err, err


# ------------------------------------------------------------------------ authorisation

def test_foreign_mounts_unmounts_and_bad_descriptors_refused(spawn, tmp_path):
    m = start(spawn, token_file(tmp_path))
    A, B = (0xA, 0xA), (0xB, 0xB)
    base, mib = 1 << 40, 1 << 20
    with rpc_connect(m.rpc_port, SECRET) as c:
        assert rpc(c, OP_MOUNT, mount_body((1, 1), A, "n:1", base, 16 * mib, "host-a")) == OK
        # another client: the same name from another host, or naming no host
        assert rpc(c, OP_MOUNT, mount_body((2, 2), B, "n:1", 2 * base, 16 * mib,
                                           "host-b")) == ILLEGAL_CLIENT
        assert rpc(c, OP_MOUNT, mount_body((3, 3), B, "n:1", 2 * base, 16 * mib)) \
            == ILLEGAL_CLIENT
        # ... nor unmount A's segment
        assert rpc(c, OP_UNMOUNT, unmount_body((1, 1), B)) == ILLEGAL_CLIENT
        # bad descriptors: base 0, length 0, overlapping A's own live segment
        assert rpc(c, OP_MOUNT, mount_body((4, 4), A, "n:2", 0, 16 * mib)) == INVALID_PARAMS
        assert rpc(c, OP_MOUNT, mount_body((5, 5), A, "n:2", 3 * base, 0)) == INVALID_PARAMS
        assert rpc(c, OP_MOUNT, mount_body((6, 6), A, "n:2", base + 15 * mib, 16 * mib)) \
            == INVALID_PARAMS
        assert metric(m, "master_segment_count") == 1
        # adjacent is fine; the same id again is upstream's SEGMENT_ALREADY_EXISTS
        assert rpc(c, OP_MOUNT, mount_body((7, 7), A, "n:2", base + 16 * mib, 16 * mib)) == OK
        # a restart on the same host (same name, same host id) takes the name over
        assert rpc(c, OP_MOUNT, mount_body((8, 8), B, "n:1", 2 * base, 16 * mib,
                                           "host-a")) == OK
        assert metric(m, "master_segment_count") == 2
        assert rpc(c, OP_UNMOUNT, unmount_body((7, 7), A)) == OK


# ------------------------------------------------------------------------ floods

def probes_work(m, i):
    """/health within 1 s, and a fresh client's setup() and a read."""
    t0 = time.monotonic()
    r = call("GET", f"http://127.0.0.1:{m.metrics_port}/health", NoAuth(), timeout=1.0)
    worst = time.monotonic() - t0
    assert r.status_code == 200
    rc, s = store_setup(m, segment=0, auth_token=SECRET)
    try:
        assert rc == 0, f"setup() of fresh client {i} failed: {rc}"
        assert s.get("kept") == b"v" * 1000
    finally:
        s.close()
    return worst


def test_connection_flood(spawn, tmp_path):
    # 4 addresses x 80 connections that never speak: per address 32 are let in, each
    # closed at the 2 s handshake deadline and reopened at once, for 6 s
    m = start(spawn, token_file(tmp_path), "--rpc_max_connections_per_ip=32",
              "--rpc_auth_timeout_ms=2000")
    rc, s = store_setup(m, auth_token=SECRET)
    assert rc == 0 and s.put("kept", b"v" * 1000) == 0
    pid, rss0 = m.proc.pid, rss_kb(m.proc.pid)
    socks = [connect_from(f"127.0.0.{2 + i // 80}", m.rpc_port) for i in range(320)]
    worst, peak, probes = 0.0, rss0, 0
    try:
        end = time.monotonic() + 6
        while time.monotonic() < end:
            for k, sk in enumerate(socks):       # reopen what the server closed
                try:
                    if sk.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    src = sk.getsockname()[0]
                    sk.close()
                    socks[k] = connect_from(src, m.rpc_port)
            worst = max(worst, probes_work(m, probes))
            probes += 1
            peak = max(peak, rss_kb(pid))
    finally:
        for sk in socks:
            sk.close()
        s.close()
    per_ip, timeouts = refused(m, "per_ip_limit"), refused(m, "handshake_timeout")
    print(f"\n[figures] RPC connection flood (4 x 80 from 127.0.0.2-5, 6 s): {probes} fresh "
          f"setups OK, worst /health {worst * 1000:.0f} ms, per_ip_limit {per_ip}, "
          f"handshake_timeout {timeouts}, RSS {rss0 // 1024} -> {peak // 1024} MB")
    assert probes >= 2 and per_ip > 0 and timeouts > 0
    assert peak - rss0 < 100 * 1024


def test_unread_reply_flood(spawn, tmp_path):
    # 4 authenticated connections pipeline 2000 regex lookups each (replies of > 16 KiB:
    # > 30 MiB per connection) and never read: past 1 MiB queued the master stops reading
    # them, so its memory stays bounded whatever they send
    m = start(spawn, token_file(tmp_path))
    rc, s = store_setup(m, segment=64 << 20, auth_token=SECRET)
    assert rc == 0 and s.put("kept", b"v" * 1000) == 0
    for i in range(0, 200, 50):
        assert s.put_batch([f"flood-{i + j:04d}-" + "k" * 60 for j in range(50)],
                           [b"x" * 64] * 50) == 0
    req = frame(OP_REGEX, pb_ld(1, b"flood-.*"))
    with rpc_connect(m.rpc_port, SECRET) as c:      # one reply's size, read
        c.sendall(req)
        reply = len(recv_frame(c)[1])
    assert reply > 16 << 10
    pid, rss0 = m.proc.pid, rss_kb(m.proc.pid)
    conns = [rpc_connect(m.rpc_port, SECRET) for _ in range(4)]
    try:
        for c in conns:
            c.setblocking(False)
        sent = [0] * 4
        end = time.monotonic() + 5
        while time.monotonic() < end and min(sent) < 2000:
            _, writable, _ = select.select([], [c for k, c in enumerate(conns)
                                               if sent[k] < 2000], [], 0.1)
            for c in writable:
                k = conns.index(c)
                try:
                    c.send(req)
                    sent[k] += 1
                except BlockingIOError:
                    pass
        worst = probes_work(m, 0)
        peak = rss_kb(pid)
        worst = max(worst, probes_work(m, 1))
    finally:
        for c in conns:
            c.close()
        s.close()
    print(f"\n[figures] RPC unread-reply flood (4 connections, {sum(sent)} requests of "
          f"{reply} B replies sent ({sum(sent) * reply >> 20} MiB of replies), none read): "
          f"worst /health {worst * 1000:.0f} ms, RSS {rss0 // 1024} -> {peak // 1024} MB")
    assert peak - rss0 < 100 * 1024, (rss0, peak)


def closed_soon(sock, timeout=5.0):
    sock.settimeout(timeout)
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


def test_connection_and_request_limits(spawn, tmp_path):
    m = start(spawn, token_file(tmp_path), "--rpc_max_connections=8",
              "--rpc_max_request_bytes=65536", "--rpc_max_pending_request_bytes=100000")
    held = [rpc_connect(m.rpc_port, SECRET) for _ in range(8)]
    try:
        # the 9th is closed at accept, before any handshake byte
        with socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10) as c:
            assert closed_soon(c)
        assert refused(m, "conn_limit") >= 1
        # one request body past --rpc_max_request_bytes: closed from its header alone
        bad0 = metric(m, "master_rpc_bad_connections_total")
        held[0].sendall(frame(OP_SERVICE_READY, body_len=65537))
        assert closed_soon(held[0])
        wait_until(lambda: metric(m, "master_rpc_bad_connections_total") == bad0 + 1, 5)
        # a body's buffer follows the bytes received (4 KiB first, then doubling):
        # 59999 of 60000 received hold all 60000, a bare header only the first 4 KiB
        held[1].sendall(frame(OP_SERVICE_READY, body_len=60000) + b"\0" * 59999)
        wait_until(lambda: metric(m, "master_rpc_pending_request_bytes") == 60000, 5)
        held[2].sendall(frame(OP_SERVICE_READY, body_len=60000))
        wait_until(lambda: metric(m, "master_rpc_pending_request_bytes") == 64096, 5)
        assert refused(m, "pending_bytes") == 0
        # its body's bytes grow it past the 100000 pending bytes: closed
        held[2].sendall(b"\0" * 50000)
        assert closed_soon(held[2])
        assert refused(m, "pending_bytes") >= 1
        wait_until(lambda: metric(m, "master_rpc_pending_request_bytes") == 60000, 5)
        # the slots freed are usable again, and the held connections still work
        with rpc_connect(m.rpc_port, SECRET) as c:
            assert rpc(c, OP_SERVICE_READY) == OK
        assert rpc(held[3], OP_SERVICE_READY) == OK
    finally:
        for c in held:
            c.close()


def test_idle_request_headers_hold_no_budget(spawn, tmp_path):
    # an open master: 20 connections from another address each send only a header
    # claiming a 16 MiB body (320 MiB, more than the 256 MiB of bodies being received
    # that the master takes at once); they hold 4 KiB each, and every other client is
    # served as before (before: the headers alone took the budget and the master
    # refused every request with a body, heartbeats included, until its clients expired)
    m = start(spawn, None, "--rpc_conn_timeout_seconds=2")
    rc, s = store_setup(m)
    assert rc == 0 and s.put("kept", b"v" * 1000) == 0
    socks = [connect_from("127.0.0.2", m.rpc_port) for _ in range(20)]
    try:
        for i, sk in enumerate(socks):
            sk.setblocking(True)
            sk.sendall(frame(OP_MOUNT, body_len=16 << 20, request_id=i + 1))
        wait_until(lambda: metric(m, "master_rpc_pending_request_bytes") == 20 * 4096, 5)
        for i in range(3):
            rc2, s2 = store_setup(m, segment=0)  # its puts land in s's segment
            try:
                assert rc2 == 0, f"setup() of fresh client {i} failed: {rc2}"
                assert s2.put(f"new{i}", b"n" * 5000) == 0 and s2.get("kept") == b"v" * 1000
            finally:
                s2.close()
        assert refused(m, "pending_bytes") == 0
        assert s.get("new0") == b"n" * 5000
        # a body that stops coming counts as idle (--rpc_conn_timeout_seconds): the
        # headers' connections are closed and give their bytes back
        t0 = time.monotonic()
        for sk in socks:
            assert closed_soon(sk, timeout=10)
        assert time.monotonic() - t0 < 10
        wait_until(lambda: metric(m, "master_rpc_pending_request_bytes") == 0, 5)
    finally:
        for sk in socks:
            sk.close()
        s.close()
