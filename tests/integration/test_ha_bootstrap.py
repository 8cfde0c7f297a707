"""HA standby bootstrap from a snapshot, and who may fetch the leader's log (issue 12
item 3; docs/ha.md "Bootstrap from a snapshot", "Who may fetch").

The leader keeps its log frames for the standbys in a ring; MC_HA_REPL_RING_BYTES (a
test knob, docs/ha.md) makes it small here, so the ring drops the first frames after a
few hundred puts:

- a standby that starts after that copies the leader's index with FETCH_SNAPSHOT
  (opcode 86) and follows the log after the snapshot's LSN: after kill -9 of the leader
  every acknowledged object reads back byte-exact through it (--ha_sync=sync);
- a standby that fell behind (SIGSTOP while the leader wrote past its ring, removed
  keys included) copies the index again: the removed keys are gone on it too;
- a plain RPC client (no term token from the election backend) sending FETCH_LOG or
  FETCH_SNAPSHOT to an open HA leader is refused (ILLEGAL_CLIENT), counted in
  master_rpc_refused_total{reason="fetch_not_standby"}, and does not move the
  acknowledged watermark that --ha_sync=sync waits on.
"""
import json
import signal
import uuid

import pytest

import mc_master
from conftest import rpc_connect, wait_until
from mc_master import Ctl, Master, _varint, decode_fields, frame, recv_frame

RING = 16384           # bytes of frames the leader keeps: a few hundred records
ILLEGAL_CLIENT = -601
OP_FETCH_LOG = 85
OP_FETCH_SNAPSHOT = 86
SIZE = 2000


def _json(m, path):
    status, body = m.http(path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def _role(m):
    try:
        return _json(m, "/role")["role"]
    except (OSError, AssertionError):
        return None


def _metric(m, name):
    """A sample of /metrics, labels included in name (0 when absent)."""
    status, body = m.http("/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            n, v = line.rsplit(" ", 1)
            if n == name:
                return float(v)
    return 0.0


def _flags(etcd, mode):
    return ("--enable_ha", f"--etcd_endpoints={etcd.bare}", "--ha_lease_ttl_sec=2",
            f"--ha_sync={mode}", "--enable_metric_reporting=false", "--client_ttl=5")


def _store(etcd):
    from store_proc import StoreProc
    loc = f"etcd://{etcd.bare}"
    p = StoreProc(("127.0.0.1", loc, 16 << 20, 8 << 20, "tcp", "", loc),
                  env={"MC_STORE_HEARTBEAT_MS": "100", "MC_RPC_TIMEOUT_MS": "30000"})
    assert p.setup_rc == 0
    return p


def _caught_up(m1, m2):
    """The standby applied every record the leader gave out."""
    last = _metric(m1, "master_ha_repl_last_lsn")
    return last > 0 and _metric(m2, "master_ha_repl_applied_lsn") >= last


def _fail_over(m1, m2, p, keys):
    """kill -9 of the leader; m2 is elected and serves puts (the store remounted)."""
    m1.stop(sig=signal.SIGKILL)
    wait_until(lambda: _role(m2) == "leader", 20, "m2 elected")
    tries = iter(range(10 ** 6))
    wait_until(lambda: p.fn("put_values", [f"after-{next(tries)}-{keys[0]}"], SIZE) == [0],
               30, "a put through the new leader")


def test_late_standby_bootstraps_from_a_snapshot(spawn, etcd_server, monkeypatch):
    monkeypatch.setenv("MC_HA_REPL_RING_BYTES", str(RING))
    etcd_server.clear()
    m1 = Master(spawn, *_flags(etcd_server, "sync"))
    wait_until(lambda: _role(m1) == "leader", 20, "m1 elected")
    p = _store(etcd_server)
    try:
        tag = uuid.uuid4().hex[:8]
        early = [f"bs-{tag}-early-{i}" for i in range(300)]
        # no standby yet: sync acknowledges at once (its degradation rule, docs/ha.md)
        assert p.fn("put_values", early, SIZE, timeout=120) == [0] * len(early)
        m2 = Master(spawn, *_flags(etcd_server, "sync"))
        wait_until(lambda: _metric(m2, "master_ha_repl_snapshots_loaded_total") >= 1, 30,
                   "the standby loaded a snapshot of the leader")
        wait_until(lambda: _caught_up(m1, m2), 30, "the standby follows the log after it")
        late = [f"bs-{tag}-late-{i}" for i in range(40)]
        assert p.fn("put_values", late, SIZE) == [0] * len(late)   # acked by the standby
        assert _metric(m1, "master_rpc_refused_total{reason=\"fetch_not_standby\"}") == 0
        _fail_over(m1, m2, p, early)
        r = p.fn("check_values", early + late, SIZE, timeout=60)
        assert r == ["ok"] * len(r), r
    finally:
        p.kill()


def test_standby_that_fell_behind_copies_again(spawn, etcd_server, monkeypatch):
    monkeypatch.setenv("MC_HA_REPL_RING_BYTES", str(RING))
    etcd_server.clear()
    m1 = Master(spawn, *_flags(etcd_server, "async"))
    wait_until(lambda: _role(m1) == "leader", 20, "m1 elected")
    m2 = Master(spawn, *_flags(etcd_server, "async"))
    wait_until(lambda: _role(m2) == "standby", 20, "m2 standby")
    p = _store(etcd_server)
    try:
        tag = uuid.uuid4().hex[:8]
        first = [f"fb-{tag}-a-{i}" for i in range(60)]
        assert p.fn("put_values", first, SIZE) == [0] * len(first)
        wait_until(lambda: _caught_up(m1, m2), 30, "the standby follows")
        assert _metric(m2, "master_ha_repl_snapshots_loaded_total") == 0  # the ring had it
        m2.proc.send_signal(signal.SIGSTOP)
        try:
            gone = first[:20]
            assert [p.call("remove", k) for k in gone] == [0] * len(gone)
            more = [f"fb-{tag}-b-{i}" for i in range(300)]
            assert p.fn("put_values", more, SIZE, timeout=120) == [0] * len(more)
        finally:
            m2.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: _metric(m2, "master_ha_repl_snapshots_loaded_total") >= 1, 30,
                   "the standby copied the index again")
        wait_until(lambda: _caught_up(m1, m2), 30, "and follows the log after it")
        _fail_over(m1, m2, p, more)
        r = p.fn("check_values", first + more, SIZE, timeout=60)
        assert r == ["miss"] * len(gone) + ["ok"] * (len(first) - len(gone) + len(more)), r
    finally:
        p.kill()


def _fetch(port, op, body):
    with rpc_connect(port) as s:   # authenticated under MC_TEST_AUTH=1: not the point
        s.sendall(frame(op, body))
        hdr, reply = recv_frame(s)
    assert hdr[4] == 0, hdr
    f = decode_fields(reply)
    st = f.get(1, 0)
    return (st >> 1) ^ -(st & 1)   # sint32


@pytest.mark.parametrize("kind", ["etcd", "redis"])
def test_a_plain_rpc_client_may_not_fetch(spawn, request, kind):
    # the term token comes from either election backend (etcd: its own key; Redis: the
    # view hash's token field)
    if kind == "etcd":
        srv = request.getfixturevalue("etcd_server")
        flags = _flags(srv, "sync")
    else:
        srv = request.getfixturevalue("redis_metadata_server")
        flags = ("--enable_ha", "--ha_backend_type=redis",
                 f"--ha_backend_connstring={srv.conn()}", "--ha_lease_ttl_sec=2",
                 "--ha_sync=sync", "--enable_metric_reporting=false", "--client_ttl=5")
    srv.clear()
    m1 = Master(spawn, *flags)
    wait_until(lambda: _role(m1) == "leader", 20, "m1 elected")
    c = Ctl(spawn, m1.addr)
    assert c("mount", mc_master.segment())["status"] == 0   # LSN 1
    c.close()
    wait_until(lambda: _metric(m1, "master_ha_repl_last_lsn") >= 1, 10, "the mount logged")
    refused = "master_rpc_refused_total{reason=\"fetch_not_standby\"}"
    assert _metric(m1, refused) == 0
    # from_lsn 2 would acknowledge LSN 1; without a token, and with a guessed one
    for token in (b"", b"0" * 32):
        body = b"\x08" + _varint(2) + b"\x10" + _varint(1 << 16)
        if token:
            body += b"\x22" + _varint(len(token)) + token
        assert _fetch(m1.rpc_port, OP_FETCH_LOG, body) == ILLEGAL_CLIENT
    assert _fetch(m1.rpc_port, OP_FETCH_SNAPSHOT, b"\x18" + _varint(1 << 16)) == ILLEGAL_CLIENT
    assert _metric(m1, refused) == 3
    assert _metric(m1, "master_ha_repl_acked_lsn") == 0
    assert _metric(m1, "master_ha_repl_fetches_total") == 0
    # the standby, which read the token from etcd, is admitted
    m2 = Master(spawn, *flags)
    wait_until(lambda: _metric(m1, "master_ha_repl_acked_lsn") >= 1, 20,
               "the standby's fetch acknowledges")
    assert _metric(m1, refused) == 3
    assert _metric(m2, "master_ha_repl_applied_lsn") >= 1


def test_ring_size_knob_is_checked():
    import os
    import subprocess

    from conftest import tool
    env = dict(os.environ, MC_HA_REPL_RING_BYTES="lots")
    r = subprocess.run([tool("mooncake_master"), "--enable_ha", "--rpc_address=127.0.0.1",
                        "--etcd_endpoints=127.0.0.1:1", "--enable_metric_reporting=false",
                        "--rpc_port=0", "--metrics_port=0"],
                       capture_output=True, text=True, timeout=20, env=env)
    assert r.returncode != 0 and "MC_HA_REPL_RING_BYTES=lots" in r.stderr, r
