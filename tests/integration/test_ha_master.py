"""HA masters on loopback against a real etcd, and a real redis-server (the second
election backend) (issue 12 item 2; the multi-host fault tests are test_ha_netns.py):

- the --enable_ha flags: what is refused and why (exit 2 naming the flag);
  for each backend:
- two masters: one leader, one standby; the standby runs nothing (frame status
  UNAVAILABLE_IN_CURRENT_STATUS); every leader reply carries the view (field 15, and
  PingReply.view_version); /health, /role, /leader and the summary line say role and
  view; the leader key is upstream's (etcd: mooncake-store/<cluster_id>/master_view =
  host:port; Redis: the hash mooncake-store/{<cluster_id>}/master_view, leader_address);
- a stopped leader resigns: the standby is elected with a larger view at once (no lease
  wait), and a client given the etcd locator follows it;
- the client's view check: replies of an older view than the leader key's are refused.
"""
import os
import socket

import pytest

import mc_master
from conftest import rpc_connect, rpc_serve_handshake, tool, wait_until
from mc_master import Ctl, Master, decode_fields, frame, ping_body, recv_frame

UNAVAILABLE = -1010


def _run(*flags):
    import subprocess
    return subprocess.run([tool("mooncake_master"), "--enable_metric_reporting=false", *flags],
                          capture_output=True, text=True, timeout=10)


def test_ha_flags():
    r = _run("--enable_ha", "--rpc_address=127.0.0.1", "--ha_backend_type=k8s",
             "--ha_backend_connstring=k8s://default/mooncake")
    assert r.returncode == 2 and "--ha_backend_type=k8s" in r.stderr
    r = _run("--enable_ha", "--rpc_address=127.0.0.1", "--ha_backend_type=redis",
             "--etcd_endpoints=127.0.0.1:2379")  # redis needs its own connection string
    assert r.returncode == 2 and "--ha_backend_connstring" in r.stderr
    r = _run("--enable_ha", "--rpc_address=127.0.0.1",
             "--ha_backend_connstring=redis://127.0.0.1:6379")  # type etcd, a redis URL
    assert r.returncode == 2 and "does not match" in r.stderr
    r = _run("--enable_ha", "--rpc_address=127.0.0.1")
    assert r.returncode == 2 and "--ha_backend_connstring" in r.stderr
    r = _run("--enable_ha", "--rpc_address=127.0.0.1", "--etcd_endpoints=127.0.0.1:2379",
             "--cluster_id=bad/id")
    assert r.returncode == 2 and "--cluster_id" in r.stderr
    r = _run("--enable_ha", "--etcd_endpoints=127.0.0.1:2379")  # 0.0.0.0: not routable
    assert r.returncode == 2 and "--rpc_address" in r.stderr
    r = _run("--enable_ha", "--rpc_address=127.0.0.1", "--ha_lease_ttl_sec=1",
             "--etcd_endpoints=127.0.0.1:2379")
    assert r.returncode == 2 and "ha_lease_ttl_sec" in r.stderr


def _ping(port):
    with rpc_connect(port) as s:   # authenticated under MC_TEST_AUTH=1
        s.sendall(frame(mc_master.OP_PING, ping_body()))
        return recv_frame(s)


def _json(m, path):
    import json
    status, body = m.http(path)
    assert status == 200, (path, status, body)
    return json.loads(body)


class Backend:
    """The election backend of one parametrised test: its flags, the clients' locator and
    a reader of the published leader address."""

    def __init__(self, kind, request):
        self.kind = kind
        if kind == "etcd":
            self.srv = request.getfixturevalue("etcd_server")
            self.flags = (f"--etcd_endpoints={self.srv.bare}",)
            # upstream's lists may write members as http://h:p
            self.flags2 = (f"--etcd_endpoints=http://{self.srv.bare}",)
            self.locator = f"etcd://{self.srv.bare}"
        else:
            self.srv = request.getfixturevalue("redis_metadata_server")
            url = self.srv.conn()
            self.flags = ("--ha_backend_type=redis", f"--ha_backend_connstring={url}")
            self.flags2 = self.flags
            self.locator = url
        self.srv.clear()

    def leader_address(self, cid):
        if self.kind == "etcd":
            return self.srv.get(f"mooncake-store/{cid}/master_view")
        return self.srv.command("HGET", f"mooncake-store/{{{cid}}}/master_view",
                                "leader_address")


@pytest.fixture(params=["etcd", "redis"])
def backend(request):
    return Backend(request.param, request)


@pytest.fixture
def ha_pair(spawn, backend):
    cid = "mooncake_cluster"  # the default, which clients assume too
    common = ("--enable_ha", f"--cluster_id={cid}", "--ha_lease_ttl_sec=2",
              "--enable_metric_reporting=false")
    m1 = Master(spawn, *common, *backend.flags)
    wait_until(lambda: _json(m1, "/role")["role"] == "leader", 20, "m1 elected")
    m2 = Master(spawn, *common, *backend.flags2)
    wait_until(lambda: _json(m2, "/role")["role"] == "standby", 20, "m2 standby")
    return m1, m2, cid


def test_leader_and_standby(ha_pair, backend):
    m1, m2, cid = ha_pair
    view = _json(m1, "/role")["view_version"]
    assert view > 0
    assert _json(m1, "/leader") == {"leader": m1.addr, "view_version": view}
    assert _json(m2, "/leader") == {"leader": m1.addr, "view_version": view}
    h1, h2 = _json(m1, "/health"), _json(m2, "/health")
    assert (h1["role"], h1["state"], h1["ready"], h1["status"]) == ("leader", "serving", True,
                                                                  "ok")
    assert (h2["role"], h2["state"], h2["ready"]) == ("standby", "waiting", False)
    # upstream's key and value
    assert backend.leader_address(cid) == m1.addr.encode()
    # the leader's replies carry the view: PingReply.view_version (2) and view (15)
    hdr, body = _ping(m1.rpc_port)
    f = decode_fields(body)
    assert hdr[4] == 0 and f[2] == view and f[15] == view
    # the standby runs nothing
    hdr, body = _ping(m2.rpc_port)
    assert hdr[4] == UNAVAILABLE and body == b""
    status, line = m1.http("/metrics/summary")
    assert b"role=leader, state=serving" in line and b"view_version=%d" % view in line
    status, line = m2.http("/metrics/summary")
    assert b"role=standby, state=waiting, service_ready=false" in line


def test_resign_and_follow(spawn, ha_pair, backend):
    m1, m2, cid = ha_pair
    view = _json(m1, "/role")["view_version"]
    c = Ctl(spawn, backend.locator, timeout_ms=20000)
    r = c("ping")
    assert r["status"] == 0 and r["view_version"] == view
    code, _ = m1.stop()  # SIGTERM: closes its gate, revokes its lease
    assert code == 0
    wait_until(lambda: _json(m2, "/role")["role"] == "leader", 10, "m2 elected")
    view2 = _json(m2, "/role")["view_version"]
    assert view2 > view
    r = c("ping")  # the ctl follows the leader through etcd / Redis
    assert r["status"] == 0 and r["view_version"] == view2
    assert c("mount", mc_master.segment())["status"] == 0
    c.close()


class _OldViewMaster:
    """A peer on the master RPC port that answers every ping as a master of view `view`
    would (PingReply with view_version and the reply view, field 15): it stands for a
    deposed leader whose clock let it serve (the case the client's view check covers)."""

    def __init__(self, view):
        import threading
        self.view = view
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                try:
                    # a real master authenticates its peers first (MC_TEST_AUTH=1)
                    if not rpc_serve_handshake(conn):
                        continue
                    while not self.stop:
                        hdr, _ = recv_frame(conn, timeout=5)
                        body = (b"\x10" + mc_master._varint(self.view) + b"\x18\x01" +
                                b"\x78" + mc_master._varint(self.view))
                        conn.sendall(frame(hdr[3], body, request_id=hdr[6],
                                           flags=mc_master.FLAG_REPLY))
                except (OSError, ConnectionError):
                    pass

    def close(self):
        self.stop = True
        self.sock.close()
        self.t.join(timeout=5)


def test_client_refuses_an_older_view(spawn, etcd_server):
    """The leader key names a peer whose replies carry an older view than the key's
    create_revision: the client refuses them (UNAVAILABLE_IN_CURRENT_STATUS once its
    deadline passed); the same peer answering with the key's view is accepted."""
    import base64
    etcd_server.clear()
    key = "mooncake-store/mooncake_cluster/master_view"
    for older in (True, False):
        peer = _OldViewMaster(0)
        try:
            b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
            etcd_server._call("/v3/kv/put",
                              {"key": b64(key), "value": b64(f"127.0.0.1:{peer.port}")})
            kv = etcd_server._call("/v3/kv/range", {"key": b64(key)})["kvs"][0]
            rev = int(kv["create_revision"])
            peer.view = rev - 1 if older else rev
            c = Ctl(spawn, f"etcd://{etcd_server.bare}", timeout_ms=1500)
            r = c("ping")
            if older:
                assert r["status"] == UNAVAILABLE, r
            else:
                assert r["status"] == 0 and r["view_version"] == rev, r
            c.close()
        finally:
            peer.close()
            etcd_server.clear()


# ---- the cache survives a failover (issue 12 item 3; docs/ha.md "Replication") ----

def _ha_store_pair(spawn, etcd, mode, ttl=2):
    common = ("--enable_ha", f"--etcd_endpoints={etcd.bare}", f"--ha_lease_ttl_sec={ttl}",
              f"--ha_sync={mode}", "--enable_metric_reporting=false", "--client_ttl=5")
    m1 = Master(spawn, *common)
    wait_until(lambda: _json(m1, "/role")["role"] == "leader", 20, "m1 elected")
    m2 = Master(spawn, *common)
    wait_until(lambda: _json(m2, "/role")["role"] == "standby", 20, "m2 standby")
    return m1, m2


def _failover_fraction(spawn, etcd, mode, n=40, size=20000, check_new_leader=None):
    """Puts n objects through the leader, kills it with SIGKILL right after the last
    acknowledgement, and returns (fraction of them that read back right through the new
    leader, the checker's answers); never a wrong byte."""
    import signal
    import uuid

    from store_proc import StoreProc
    etcd.clear()
    m1, m2 = _ha_store_pair(spawn, etcd, mode)
    loc = f"etcd://{etcd.bare}"
    p = StoreProc(("127.0.0.1", loc, 16 << 20, 8 << 20, "tcp", "", loc),
                  env={"MC_STORE_HEARTBEAT_MS": "100", "MC_RPC_TIMEOUT_MS": "30000"})
    try:
        assert p.setup_rc == 0
        keys = [f"fo-{uuid.uuid4().hex[:8]}-{i}" for i in range(n)]
        assert p.fn("put_values", keys, size) == [0] * n
        m1.stop(sig=signal.SIGKILL)
        wait_until(lambda: _json(m2, "/role")["role"] == "leader", 20, "m2 elected")
        # a put through the new leader needs the store's segment remounted there (the
        # copied segments are pending until their owner remounts): then every copied
        # object is readable
        tries = iter(range(10 ** 6))
        wait_until(lambda: p.fn("put_values", [f"after-{next(tries)}-{keys[0]}"], size) == [0],
                   30, "a put through the new leader")
        r = p.fn("check_values", keys, size, timeout=60)
        assert "WRONG" not in r, r
        # new objects do not land on the copied objects' space
        more = [f"new-{k}" for k in keys[:10]]
        assert p.fn("put_values", more, size) == [0] * 10
        r2 = p.fn("check_values", keys + more, size, timeout=60)
        assert r2[:n] == r and r2[n:] == ["ok"] * 10, r2
        if check_new_leader:
            check_new_leader(m2)
        return r.count("ok") / n, r
    finally:
        p.kill()


def test_failover_sync_keeps_every_acknowledged_object(spawn, etcd_server):
    frac, r = _failover_fraction(spawn, etcd_server, "sync")
    print(f"\n--ha_sync=sync: {frac:.0%} of the acknowledged objects read back after kill -9")
    assert frac == 1.0, r


def test_failover_async_fraction(spawn, etcd_server):
    frac, r = _failover_fraction(spawn, etcd_server, "async")
    print(f"\n--ha_sync=async: {frac:.0%} of the acknowledged objects read back after kill -9")


def test_ha_sync_flag_and_refusals():
    r = _run("--enable_ha", "--rpc_address=127.0.0.1", "--etcd_endpoints=127.0.0.1:2379",
             "--ha_sync=maybe")
    assert r.returncode == 2 and "--ha_sync" in r.stderr
    r = _run("--rpc_address=127.0.0.1", "--ha_sync=sync")   # no standby to wait for
    assert r.returncode == 2 and "needs --enable_ha" in r.stderr, r.stderr
    r = _run("--rpc_address=127.0.0.1", "--oplog_sync=sometimes")   # checked without the log
    assert r.returncode == 2 and "--oplog_sync" in r.stderr, r.stderr
    r = _run("--enable_ha", "--rpc_address=127.0.0.1", "--etcd_endpoints=127.0.0.1:2379",
             "--enable_offload")
    assert r.returncode == 2 and "--ha_sync=none" in r.stderr, r.stderr
    r = _run("--enable_ha", "--rpc_address=127.0.0.1", "--etcd_endpoints=127.0.0.1:2379",
             "--ha_sync=sync", "--rpc_thread_num=1")
    assert r.returncode == 2 and "--rpc_thread_num" in r.stderr, r.stderr


def test_failover_sync_with_a_cluster_secret(spawn, etcd_server, tmp_path, monkeypatch):
    # the standby's replication connections prove the secret to the leader's RPC port
    # like any client: with one set cluster-wide, sync mode still keeps every object
    from test_auth_http import token_file
    monkeypatch.setenv("MC_AUTH_TOKEN_FILE", token_file(tmp_path))

    def authenticated(m2):   # the masters did hold the secret: the client proved it to m2
        assert m2.metrics().get("master_rpc_authenticated_total", 0) > 0, m2.metrics()
    frac, r = _failover_fraction(spawn, etcd_server, "sync", check_new_leader=authenticated)
    assert frac == 1.0, r


def test_calls_in_the_remount_window_are_retried(spawn, etcd_server):
    """docs/ha.md "The remount window": just after a failover the new leader serves a
    copied segment only once its owner remounts, so until then a put answers
    NO_AVAILABLE_HANDLE and a get REPLICA_IS_NOT_READY; a client that saw the leader
    change asks again for those keys (bounded). The segment's owner is held stopped
    (SIGSTOP) across the kill -9 of the leader, so the window is open for sure; once the
    new leader refused a get and a put at least twice each (the first try and a retry),
    the owner is let go, and the get and the put in flight succeed with the right bytes."""
    import signal
    import threading
    import uuid

    from store_proc import StoreProc
    etcd_server.clear()
    m1, m2 = _ha_store_pair(spawn, etcd_server, "sync")
    loc = f"etcd://{etcd_server.bare}"
    env = {"MC_STORE_HEARTBEAT_MS": "100", "MC_RPC_TIMEOUT_MS": "30000"}
    owner = StoreProc(("127.0.0.1", loc, 16 << 20, 8 << 20, "tcp", "", loc), env=env)
    users = [StoreProc(("127.0.0.1", loc, 0, 8 << 20, "tcp", "", loc), env=env)
             for _ in range(2)]
    stopped = False
    try:
        assert owner.setup_rc == 0 and all(u.setup_rc == 0 for u in users)
        keys = [f"rw-{uuid.uuid4().hex[:8]}-{i}" for i in range(4)]
        assert users[0].fn("put_values", keys, 4096) == [0] * 4
        os.kill(owner.proc.pid, signal.SIGSTOP)
        stopped = True
        m1.stop(sig=signal.SIGKILL)
        wait_until(lambda: _json(m2, "/role")["role"] == "leader", 20, "m2 elected")
        base = m2.metrics()
        res = {}
        threads = [
            threading.Thread(target=lambda: res.update(
                get=users[0].fn("check_values", keys[:1], 4096, timeout=60))),
            threading.Thread(target=lambda: res.update(
                put=users[1].fn("put_values", [keys[0] + "-after"], 4096, timeout=60))),
        ]
        for t in threads:
            t.start()
        try:
            def refused_twice():
                m = m2.metrics()
                return all(m[f"master_{op}_failures_total"] >= base[f"master_{op}_failures_total"] + 2
                           for op in ("get_replica_list", "put_start"))
            wait_until(refused_twice, 20, "the new leader refused a get and a put, twice each")
        finally:
            os.kill(owner.proc.pid, signal.SIGCONT)
            stopped = False
            for t in threads:
                t.join(60)
        assert res == {"get": ["ok"], "put": [0]}, res
        assert users[0].fn("check_values", keys + [keys[0] + "-after"], 4096) == ["ok"] * 5
    finally:
        if stopped:
            os.kill(owner.proc.pid, signal.SIGCONT)
        owner.kill()
        for u in users:
            u.kill()


def test_a_put_in_flight_at_the_kill_is_put_again(spawn, etcd_server):
    """docs/ha.md "The remount window": a put whose put_start reached the leader and
    which was still transferring when the leader was killed (kill -9) is put once more
    from the start through the new leader, so the caller gets 0 and the bytes read back.
    The transfer is held: the segment's owner is stopped (SIGSTOP) and the bytes go over
    TCP (MC_FORCE_TCP), so the put cannot end before the owner is let go, which happens
    only once the new leader serves."""
    import signal
    import threading
    import uuid

    from store_proc import StoreProc
    etcd_server.clear()
    m1, m2 = _ha_store_pair(spawn, etcd_server, "sync")
    loc = f"etcd://{etcd_server.bare}"
    env = {"MC_STORE_HEARTBEAT_MS": "100", "MC_RPC_TIMEOUT_MS": "30000", "MC_FORCE_TCP": "1",
           "MC_TRANSFER_TIMEOUT": "60"}
    owner = StoreProc(("127.0.0.1", loc, 64 << 20, 8 << 20, "tcp", "", loc), env=env)
    user = StoreProc(("127.0.0.1", loc, 0, 32 << 20, "tcp", "", loc), env=env)
    stopped = False
    try:
        assert owner.setup_rc == 0 and user.setup_rc == 0
        key, size = f"inflight-{uuid.uuid4().hex[:8]}", 16 << 20
        before = m1.metrics()["master_put_start_requests_total"]
        os.kill(owner.proc.pid, signal.SIGSTOP)
        stopped = True
        res = {}
        t = threading.Thread(target=lambda: res.update(
            put=user.fn("put_values", [key], size, timeout=90)))
        t.start()
        try:
            wait_until(lambda: m1.metrics()["master_put_start_requests_total"] > before, 20,
                       "the put started on the first leader")
            m1.stop(sig=signal.SIGKILL)
            wait_until(lambda: _json(m2, "/role")["role"] == "leader", 20, "m2 elected")
        finally:
            os.kill(owner.proc.pid, signal.SIGCONT)
            stopped = False
            t.join(90)
        assert res == {"put": [0]}, res
        assert user.fn("check_values", [key], size, timeout=60) == ["ok"]
    finally:
        if stopped:
            os.kill(owner.proc.pid, signal.SIGCONT)
        owner.kill()
        user.kill()
