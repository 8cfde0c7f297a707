"""The store client's HTTP server: ``setup(..., enable_client_http_server=True,
client_http_port=P)`` (upstream real_client.cpp setup_internal: ``/health``, ``/metrics``,
``/metrics/summary`` on ``client_http_port``; src/client/client_http.c). A real
mooncake_master and in-process clients, all on 127.0.0.1.

Covered: both setup forms (keywords and the config dict), ``/health`` "OK", the counters
of ``/metrics`` moving with puts, gets and removes, the transfer engine's counters moving
with a get over TCP (and not with copies on its own segment), ``/metrics/summary``, the server gone
after close, a port in use failing setup with a message naming it, off by default, and
with a cluster secret the three routes open while any other path needs a signed request
(docs/security.md)."""
import os
import re
import socket
import urllib.error
import urllib.request
import uuid

import pytest

from conftest import _Spawner, free_port
from mc_master import Master
from mooncake import _auth
from mooncake.store import MooncakeDistributedStore

SEG = 16 << 20
LBUF = 16 << 20
INVALID_PARAMS = -600


@pytest.fixture(scope="module")
def master():
    sp = _Spawner()
    try:
        yield Master(sp, "--enable_metric_reporting=false")
    finally:
        sp.cleanup()


def K(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


def http(port, path):
    """(status, body text) of GET 127.0.0.1:port/path, unsigned."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics(port):
    """The /metrics samples as {"name{labels}": value}."""
    st, text = http(port, "/metrics")
    assert st == 200, text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def refuses(port):
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) != 0


def setup_kw(store, master, **kw):
    return store.setup("localhost", "P2PHANDSHAKE", SEG, LBUF, "tcp", "", master.addr, **kw)


def test_endpoints_and_counters(master):
    s = MooncakeDistributedStore()
    try:
        assert setup_kw(s, master, enable_client_http_server=True, client_http_port=0) == 0
        port = s.get_client_http_port()
        assert 0 < port < 65536
        assert http(port, "/health") == (200, "OK")
        assert http(port, "/nothing")[0] == 404

        before = metrics(port)
        assert before["mooncake_client_segment_mounted_bytes"] == SEG
        assert before["mooncake_client_local_buffer_bytes"] == LBUF
        k = K("chttp")
        value = os.urandom(3000)
        assert s.put(k, value) == 0
        assert s.get(k) == value
        assert s.get(K("chttp-missing")) == b""
        assert s.remove(k, True) == 0  # force: our own get holds a lease on it
        after = metrics(port)
        assert after["mooncake_transfer_write_bytes"] - before["mooncake_transfer_write_bytes"] \
            == len(value)
        assert after["mooncake_transfer_read_bytes"] - before["mooncake_transfer_read_bytes"] \
            == len(value)
        put, get, rem = ('mooncake_client_requests_total{op="%s"}' % op
                         for op in ("put", "get", "remove"))
        assert after[put] - before[put] == 1
        assert after[get] - before[get] == 2
        assert after[rem] - before[rem] == 1
        assert after['mooncake_client_failures_total{op="get",status="OBJECT_NOT_FOUND"}'] >= 1
        assert after['mooncake_client_failed_requests_total{op="put"}'] == 0
        assert after['mooncake_client_failed_requests_total{op="get"}'] == sum(
            v for k, v in after.items()
            if k.startswith('mooncake_client_failures_total{op="get",'))
        assert not any('status="ANY"' in k for k in after)
        # its own segment only: copied in place, nothing through the transfer engine
        # (test_engine_counters_over_tcp shows these move)
        assert {k: v for k, v in after.items()
                if k.startswith("mooncake_client_engine_bytes_total")} == {
            'mooncake_client_engine_bytes_total{path="%s"}' % p: 0
            for p in ("tcp_sent", "tcp_received", "shm", "served")}
        assert after["mooncake_client_master_reachable"] == 1
        assert after["mooncake_client_http_connections_total"] >= 2

        st, line = http(port, "/metrics/summary")
        assert st == 200 and line.count("\n") == 1, line
        assert f"client={s.get_hostname()}" in line and "master=reachable" in line, line
        assert re.search(r"put=\d+ \(failed 0, ", line), line
    finally:
        assert s.close() == 0
    assert refuses(port)
    assert s.get_client_http_port() == INVALID_PARAMS


def test_engine_counters_over_tcp(master, monkeypatch):
    """A get over TCP from another client's segment moves the reader's transfer engine
    counters (a 4 KiB read is small enough for the reading thread to move itself:
    mc_te_submit_inline) and the owner's served bytes; every refusal reason is listed."""
    monkeypatch.setenv("MC_FORCE_TCP", "1")  # read at setup: no same-host path
    owner, reader = MooncakeDistributedStore(), MooncakeDistributedStore()
    try:
        assert setup_kw(owner, master, enable_client_http_server=True, client_http_port=0) == 0
        assert reader.setup("localhost", "P2PHANDSHAKE", 0, LBUF, "tcp", "", master.addr,
                            enable_client_http_server=True, client_http_port=0) == 0
        op, rp = owner.get_client_http_port(), reader.get_client_http_port()
        k = K("chttp-tcp")
        value = os.urandom(4096)
        assert owner.put(k, value) == 0
        before_o, before_r = metrics(op), metrics(rp)
        assert reader.get(k) == value
        after_o, after_r = metrics(op), metrics(rp)

        def moved(a, b, name):
            return a[name] - b[name]
        recv = 'mooncake_client_engine_bytes_total{path="tcp_received"}'
        assert moved(after_r, before_r, recv) >= len(value)
        assert moved(after_r, before_r, "mooncake_client_engine_inline_bytes_total") \
            >= len(value)
        assert after_r["mooncake_client_engine_inline_bytes_total"] <= after_r[recv]
        assert after_r['mooncake_client_engine_connections_total{result="opened"}'] >= 1
        assert moved(after_o, before_o, 'mooncake_client_engine_bytes_total{path="served"}') \
            >= len(value)
        for m in (after_o, after_r):
            reasons = {k for k in m if k.startswith("mooncake_client_engine_refused_total{")}
            assert reasons == {'mooncake_client_engine_refused_total{reason="%s"}' % r for r in (
                "bad_request", "stale_write", "auth", "connection_limit", "per_ip_limit",
                "peer_uid", "pending_bytes")}, reasons
            assert all(m[r] == 0 for r in reasons), reasons
            assert m["mooncake_client_engine_auth_failed_total"] == 0
            assert m["mooncake_client_engine_stale_sends_refused_total"] == 0
        assert owner.remove(k, True) == 0
    finally:
        assert reader.close() == 0
        assert owner.close() == 0


def test_a_string_is_not_a_bool(master):
    # upstream's pybind11 bool refuses a str: "false" must not switch the server on
    store = MooncakeDistributedStore()
    for kw in ("enable_client_http_server", "enable_ssd_offload"):
        with pytest.raises(TypeError, match=kw):
            setup_kw(store, master, **{kw: "false"})


def test_dict_config(master):
    s = MooncakeDistributedStore()
    try:
        assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                        "global_segment_size": "16MB", "local_buffer_size": "16MB",
                        "protocol": "tcp", "master_server_addr": master.addr,
                        "enable_client_http_server": True, "client_http_port": 0}) == 0
        port = s.get_client_http_port()
        assert port > 0
        assert http(port, "/health") == (200, "OK")
        assert "mooncake_client_requests_total" in http(port, "/metrics")[1]
    finally:
        s.close()
    assert refuses(port)


def test_port_in_use_fails_setup(master, capfd):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        s = MooncakeDistributedStore()
        capfd.readouterr()
        rc = setup_kw(s, master, enable_client_http_server=True, client_http_port=port)
        err = capfd.readouterr().err
        assert rc != 0
        assert f"client_http_port {port}" in err and "already in use" in err, err
        assert s.get_hostname() == ""  # nothing stays set up
        # the dict form reports it the same way
        rc = s.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                      "master_server_addr": master.addr, "enable_client_http_server": "true",
                      "client_http_port": str(port)})
        assert rc != 0 and f"client_http_port {port}" in capfd.readouterr().err
        s.close()


def test_off_by_default(master):
    def free(p):
        with socket.socket() as t:
            try:
                t.bind(("127.0.0.1", p))
                return True
            except OSError:
                return False

    default_free = free(9300)
    s = MooncakeDistributedStore()
    try:
        assert setup_kw(s, master) == 0
        assert s.get_client_http_port() == 0
        if default_free:  # upstream's default port stays untouched
            assert free(9300)
    finally:
        s.close()


def test_with_a_secret(spawn, tmp_path):
    token = tmp_path / "cluster.token"
    secret = b"c" * 32
    token.write_bytes(secret + b"\n")
    token.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != _auth.ENV}
    m = Master(lambda a: spawn(a, env=env), "--enable_metric_reporting=false",
               f"--auth_token_file={token}")
    s = MooncakeDistributedStore()
    try:
        assert setup_kw(s, m, enable_client_http_server=True, client_http_port=0,
                        auth_token_file=str(token)) == 0
        port = s.get_client_http_port()
        # counts only: open, as on the master's admin port
        assert http(port, "/health") == (200, "OK")
        assert http(port, "/metrics")[0] == 200
        assert http(port, "/metrics/summary")[0] == 200
        # any other path needs a signed request
        st, body = http(port, "/anything")
        assert st == 401, body
        url = f"http://127.0.0.1:{port}/anything"
        req = urllib.request.Request(url, headers={
            "Authorization": _auth.sign(secret, "GET", "/anything")})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 404  # past the check: the route does not exist
    finally:
        s.close()
    assert refuses(port)
