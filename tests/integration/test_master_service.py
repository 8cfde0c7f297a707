"""``mooncake_master`` as a process: client liveness (client_ttl), a restart under a live
client (NEED_REMOUNT, then serving again after remount), malformed frames, the admin
HTTP routes, the periodic summary, flags, ports already taken, clean shutdown."""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import (free_port, read_until, rpc_connect, sign_urllib, tool, wait_port,
                      wait_until)
from mc_master import (FLAG_REPLY, INVALID_PARAMS, NOT_SUPPORTED, OBJECT_NOT_FOUND, OK,
                       OP_PING, OP_PUT_START, Ctl, Master, closed_by_peer, decode_fields,
                       frame, ping_body, recv_frame, segment, zigzag)


def _quiet(spawn, *flags):
    return Master(spawn, "--enable_metric_reporting=false", *flags)


def test_silent_client_loses_its_segments(spawn):
    m = _quiet(spawn, "--client_ttl=1")
    alive = Ctl(spawn, m.addr)
    silent = Ctl(spawn, m.addr)
    assert alive("mount", segment(name="127.0.0.1:17101"))["status"] == OK
    assert silent("mount", segment(name="127.0.0.1:17102"))["status"] == OK
    # each object on its writer's segment (placement is otherwise random)
    for ctl, key, seg in ((alive, "kept", "127.0.0.1:17101"), (silent, "lost", "127.0.0.1:17102")):
        r = ctl("put_start", key, 100, {"preferred_segments": [seg]})
        assert r["status"] == OK and r["replicas"][0]["endpoint"] == seg
        assert ctl("put_end", key)["status"] == OK
    # `alive` keeps pinging until the master has dropped the segment of `silent` (which
    # says nothing) after client_ttl; each ping must find `alive` in good standing.
    def silent_dropped():
        assert alive("ping")["client_status"] == "OK"
        return m.http("/get_all_segments")[1].decode().splitlines() == ["127.0.0.1:17101"]
    wait_until(silent_dropped, 30, "the silent client's segment dropped", step=0.2)
    assert alive("get", "lost")["status"] == OBJECT_NOT_FOUND
    assert alive("get", "kept")["status"] == OK
    status, body = m.http("/get_all_segments")
    assert body.decode().splitlines() == ["127.0.0.1:17101"]
    assert m.metrics()["master_active_clients"] == 1
    # the silent client is told to remount, and can
    assert silent("ping")["client_status"] == "NEED_REMOUNT"
    assert silent("remount", [segment(name="127.0.0.1:17102")])["status"] == OK
    assert silent("ping")["client_status"] == "OK"
    assert silent("put_start", "again", 10)["status"] == OK


def _md_request(port, method, key, body=None):
    """Status of one request to an HTTP metadata server on 127.0.0.1:port."""
    url = f"http://127.0.0.1:{port}/metadata?key={urllib.parse.quote(key, safe='')}"
    req = sign_urllib(urllib.request.Request(url, data=body, method=method))
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_expired_client_metadata_is_cleaned_only_when_asked(spawn):
    # Two masters side by side, one with --enable_metadata_cleanup_on_timeout (upstream's
    # default is off: the other keeps the keys). Each has a live and a silent client.
    setups = []
    for cleanup in (True, False):
        md_port = free_port()
        flags = ["--client_ttl=1", "--enable_http_metadata_server=1",
                 "--http_metadata_server_host=127.0.0.1",
                 f"--http_metadata_server_port={md_port}"]
        if cleanup:
            flags.append("--enable_metadata_cleanup_on_timeout=1")
        m = _quiet(spawn, *flags)
        wait_port(md_port, proc=m.proc)
        alive, silent = Ctl(spawn, m.addr), Ctl(spawn, m.addr)
        assert alive("mount", segment(name="127.0.0.1:17101"))["status"] == OK
        assert silent("mount", segment(name="127.0.0.1:17102"))["status"] == OK
        assert silent("mount", segment(name="127.0.0.1:17102", base=1 << 40))["status"] == OK
        for name in ("127.0.0.1:17101", "127.0.0.1:17102"):
            assert _md_request(md_port, "PUT", f"mooncake/ram/{name}", b'{"name": 1}') == 200
            assert _md_request(md_port, "PUT", f"mooncake/rpc_meta/{name}",
                               b'{"ip_or_host_name": "127.0.0.1", "rpc_port": 1}') == 200
        assert _md_request(md_port, "PUT", "mooncake/other", b"x") == 200
        setups.append((cleanup, m, md_port, alive, silent))
    # `alive` keeps pinging until each master has dropped its silent client (and, with
    # cleanup on, removed that client's metadata keys)
    def silent_dropped():
        done = True
        for cleanup, m, md_port, alive, _ in setups:
            assert alive("ping")["client_status"] == "OK"
            segs = m.http("/get_all_segments")[1].decode().splitlines()
            done &= segs == ["127.0.0.1:17101"]
            if cleanup:
                done &= _md_request(md_port, "GET", "mooncake/ram/127.0.0.1:17102") == 404
        return done
    wait_until(silent_dropped, 30, "both masters dropped their silent client", step=0.2)
    for cleanup, m, md_port, alive, silent in setups:
        assert silent("ping")["client_status"] == "NEED_REMOUNT"
        gone = 404 if cleanup else 200
        assert _md_request(md_port, "GET", "mooncake/ram/127.0.0.1:17102") == gone
        assert _md_request(md_port, "GET", "mooncake/rpc_meta/127.0.0.1:17102") == gone
        assert _md_request(md_port, "GET", "mooncake/ram/127.0.0.1:17101") == 200
        assert _md_request(md_port, "GET", "mooncake/rpc_meta/127.0.0.1:17101") == 200
        assert _md_request(md_port, "GET", "mooncake/other") == 200
        rc, out = m.stop()
        assert rc == 0
        assert ("metadata key mooncake/ram/127.0.0.1:17102 deleted" in out) == cleanup


def test_restart_under_a_live_client(spawn):
    m = _quiet(spawn)
    c = Ctl(spawn, m.addr, client_id="0000000000000001-0000000000000002")
    seg = segment(id="00000000000000aa-00000000000000bb")
    assert c("mount", seg)["status"] == OK
    assert c("put_start", "before", 10)["status"] == OK
    assert c("put_end", "before")["status"] == OK
    assert c("ping")["client_status"] == "OK"
    m.restart()  # same ports; the client keeps its (now dead) pooled connection
    # The first call after the restart reconnects by itself and gets an answer.
    r = c("ping")
    assert r["status"] == OK and r["client_status"] == "NEED_REMOUNT"
    assert c("get", "before")["status"] == OBJECT_NOT_FOUND  # metadata lived in memory
    assert c("remount", [seg])["status"] == OK
    assert c("ping")["client_status"] == "OK"
    assert c("put_start", "after", 10)["status"] == OK
    assert c("put_end", "after")["status"] == OK
    assert c("get", "after")["status"] == OK


def test_master_down_gives_rpc_fail_then_recovers(spawn):
    m = _quiet(spawn)
    c = Ctl(spawn, m.addr, timeout_ms=2000)
    assert c("service_ready")["status"] == OK
    m.stop()
    assert c("ping")["status_name"] == "RPC_FAIL"
    m.start()
    assert c("service_ready")["status"] == OK


def _connect(m):
    return rpc_connect(m.rpc_port)  # with the handshake under MC_TEST_AUTH=1


def test_bad_frames_are_refused_and_others_keep_being_served(spawn):
    m = _quiet(spawn)
    good = Ctl(spawn, m.addr)
    assert good("mount", segment())["status"] == OK

    # garbage: bad magic -> the connection is closed
    with _connect(m) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed_by_peer(s)
    # another protocol version -> closed
    with _connect(m) as s:
        s.sendall(frame(OP_PING, ping_body(), version=9))
        assert closed_by_peer(s)
    # oversized: body_len past the maximum -> closed before any body is read
    with _connect(m) as s:
        s.sendall(frame(OP_PING, b"", body_len=1 << 30))
        assert closed_by_peer(s)
    # a "reply" sent as a request -> closed
    with _connect(m) as s:
        s.sendall(frame(OP_PING, ping_body(), flags=FLAG_REPLY))
        assert closed_by_peer(s)
    # truncated: the header promises 100 bytes, 10 come, then the client goes away
    with _connect(m) as s:
        s.sendall(frame(OP_PING, b"x" * 10, body_len=100))
    # truncated header only
    with _connect(m) as s:
        s.sendall(frame(OP_PING, ping_body())[:10])

    # Framing intact but the body is not a request: an error reply, connection kept.
    with _connect(m) as s:
        s.sendall(frame(OP_PUT_START, b"\xff\xff\xff\xff\x0f", request_id=7))
        hdr, body = recv_frame(s)
        assert hdr[2] & FLAG_REPLY and hdr[3] == OP_PUT_START and hdr[6] == 7
        assert hdr[4] == INVALID_PARAMS and body == b""
        s.sendall(frame(999, b"", request_id=8))  # unknown opcode
        hdr, body = recv_frame(s)
        assert hdr[4] == NOT_SUPPORTED and hdr[6] == 8
        # and a valid request on the same connection still works
        s.sendall(frame(OP_PING, ping_body(), request_id=9))
        hdr, body = recv_frame(s)
        assert hdr[4] == 0 and hdr[6] == 9
        assert decode_fields(body).get(3) == 2  # client_status NEED_REMOUNT

    # the well-behaved client never noticed
    assert good("put_start", "still-fine", 10)["status"] == OK
    assert good("ping")["client_status"] == "OK"
    metrics = m.metrics()
    assert metrics["master_rpc_bad_connections_total"] >= 4
    assert metrics["master_rpc_refused_frames_total"] >= 2


def test_pipelined_requests_are_answered_in_order(spawn):
    m = _quiet(spawn)
    with _connect(m) as s:
        s.sendall(b"".join(frame(OP_PING, ping_body(7, i), request_id=1000 + i)
                           for i in range(200)))
        for i in range(200):
            hdr, body = recv_frame(s)
            assert hdr[6] == 1000 + i and hdr[4] == 0
            assert zigzag(decode_fields(body).get(1, 0)) == OK


UPSTREAM_METRICS = [
    "master_allocated_bytes", "master_total_capacity_bytes", "master_key_count",
    "master_soft_pin_key_count", "master_active_clients",
    "master_put_start_requests_total", "master_put_start_failures_total",
    "master_put_start_alloc_failures_total", "master_put_start_partial_allocations_total",
    "master_put_end_requests_total", "master_put_end_failures_total",
    "master_put_revoke_requests_total", "master_get_replica_list_requests_total",
    "master_get_replica_list_by_regex_requests_total", "master_exist_key_requests_total",
    "master_remove_requests_total", "master_remove_by_regex_requests_total",
    "master_remove_all_requests_total", "master_mount_segment_requests_total",
    "master_unmount_segment_requests_total", "master_remount_segment_requests_total",
    "master_ping_requests_total", "master_batch_exist_key_requests_total",
    "master_batch_get_replica_list_items_total", "master_batch_put_start_partial_successes_total",
    "master_batch_put_end_failed_items_total", "master_batch_put_revoke_failures_total",
    "master_successful_evictions_total", "master_attempted_evictions_total",
    "master_evicted_key_count", "master_evicted_size_bytes",
]


def test_admin_http(spawn):
    m = _quiet(spawn)
    c = Ctl(spawn, m.addr)
    assert c("mount", segment(size=1 << 20))["status"] == OK
    assert c("put_start", "k/one", 1000)["status"] == OK
    assert c("put_end", "k/one")["status"] == OK
    assert c("put_start", "k two", 24)["status"] == OK
    assert c("batch_put_start", ["b1", "b2"], [1, 2])["status"] == OK

    metrics = m.metrics()
    missing = [n for n in UPSTREAM_METRICS if n not in metrics]
    assert not missing
    assert metrics["master_total_capacity_bytes"] == 1 << 20
    assert metrics["master_key_count"] == 4
    assert metrics["master_allocated_bytes"] >= 1000 + 24
    assert metrics["master_put_start_requests_total"] >= 2
    assert metrics["master_batch_put_start_items_total"] >= 2
    status, body = m.http("/metrics")
    assert b"# TYPE master_put_start_requests_total counter" in body
    assert b"# TYPE master_key_count gauge" in body
    # upstream's value-size histogram, fed by every placed object (1000, 24, 1, 2 bytes)
    assert b"# TYPE master_value_size_bytes histogram" in body
    assert metrics['master_value_size_bytes_bucket{le="4096"}'] == 4
    assert metrics['master_value_size_bytes_bucket{le="67108864"}'] == 4
    assert metrics['master_value_size_bytes_bucket{le="+Inf"}'] == 4
    assert metrics["master_value_size_bytes_count"] == 4
    assert metrics["master_value_size_bytes_sum"] == 1000 + 24 + 1 + 2
    assert metrics["master_deferred_free_bytes"] == 0

    # batch_exist_key: absent keys are answers (0), not failed items
    r = c("batch_exist", ["k/one", "nope1", "nope2"])
    assert r["status"] == OK and r["results"] == [1, 0, 0]
    metrics = m.metrics()
    assert metrics["master_batch_exist_key_requests_total"] == 1
    assert metrics["master_batch_exist_key_items_total"] == 3
    assert metrics["master_batch_exist_key_failed_items_total"] == 0
    assert metrics["master_batch_exist_key_failures_total"] == 0
    assert metrics["master_batch_exist_key_partial_successes_total"] == 0

    status, body = m.http("/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, body = m.http("/get_all_keys")
    assert status == 200 and sorted(body.decode().splitlines()) == ["b1", "b2", "k two",
                                                                     "k/one"]
    status, body = m.http("/query_key?key=k%2Fone")
    info = json.loads(body)
    assert status == 200 and info["key"] == "k/one" and info["size"] == 1000
    assert info["complete"] is True and info["replicas"][0]["size"] == 1000
    status, body = m.http("/query_key?key=k%20two")
    assert status == 200 and json.loads(body)["complete"] is False
    status, body = m.http("/query_key?key=nope")
    assert status == 404 and json.loads(body)["error"] == "OBJECT_NOT_FOUND"
    assert m.http("/query_key")[0] == 400
    status, body = m.http("/get_all_segments")
    assert status == 200 and body.decode().splitlines() == ["127.0.0.1:17001"]
    assert m.http("/nope")[0] == 404
    assert m.http("/metrics", method="POST")[0] == 405
    status, body = m.http("/metrics/summary")
    assert status == 200 and body.startswith(b"Master Admin Metrics:")


def test_summary_line_and_clean_shutdown(spawn):
    m = Master(spawn, "--metric_report_interval_sec=1")
    c = Ctl(spawn, m.addr)
    assert c("mount", segment(size=100 << 20))["status"] == OK
    assert c("put_start", "x", 10 << 20)["status"] == OK
    assert c("put_end", "x")["status"] == OK
    # a summary line printed after the put (every --metric_report_interval_sec)
    seen = read_until(m.proc, r"Master Admin Metrics:[^\n]*Keys: 1 [^\n]*\n", 30,
                      "a summary line with the object")
    code, rest = m.stop(signal.SIGINT)
    out = seen + rest
    assert code == 0
    assert "mooncake_master: RPC listening on 127.0.0.1:" in out
    lines = [ln for ln in out.splitlines() if "Master Admin Metrics:" in ln]
    assert lines, out
    last = lines[-1]
    assert "Mem Storage: 10.00 MB / 100.00 MB (10.0%)" in last
    assert "Keys: 1 (soft-pinned: 0)" in last and "Clients: 1" in last
    assert "Requests (Success/Total per sec): PutStart=" in last


def test_embedded_http_metadata_server(spawn):
    port = free_port()
    m = _quiet(spawn, "--enable_http_metadata_server", f"--http_metadata_server_port={port}",
               "--http_metadata_server_host=127.0.0.1")
    wait_port(port)
    import urllib.request
    url = f"http://127.0.0.1:{port}/metadata?key=mooncake%2Fram%2Fseg"
    req = sign_urllib(urllib.request.Request(url, data=b'{"a":1}', method="PUT"))
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    with urllib.request.urlopen(sign_urllib(urllib.request.Request(url)), timeout=10) as r:
        assert r.read() == b'{"a":1}'
    code, out = m.stop()
    assert code == 0 and f"HTTP metadata server on http://127.0.0.1:{port}/metadata" in out


def _run_master(*flags, timeout=10):
    return subprocess.run([tool("mooncake_master"), "--enable_metric_reporting=false", *flags],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("which", ["rpc_port", "metrics_port", "http_metadata_server_port"])
def test_port_taken(spawn, which):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"rpc_port": free_port(), "metrics_port": free_port(),
                 "http_metadata_server_port": free_port()}
        ports[which] = port
        r = _run_master("--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1",
                        "--http_metadata_server_host=127.0.0.1",
                        "--enable_http_metadata_server",
                        *[f"--{k}={v}" for k, v in ports.items()])
    assert r.returncode == 1
    assert f"--{which}" in r.stderr and "Address already in use" in r.stderr


def test_second_master_on_the_same_port_fails(spawn):
    m = _quiet(spawn)
    r = _run_master(f"--rpc_port={m.rpc_port}", "--rpc_address=127.0.0.1",
                    f"--metrics_port={free_port()}", "--metrics_host=127.0.0.1")
    assert r.returncode == 1 and "Address already in use" in r.stderr


def test_flags(spawn):
    # --enable_ha is implemented (test_ha_master.py): it refuses an unroutable address
    r = _run_master("--enable_ha", "--etcd_endpoints=127.0.0.1:2379")
    assert r.returncode == 2 and "--rpc_address" in r.stderr
    r = _run_master("--no_such_flag=1")
    assert r.returncode == 2 and "no_such_flag" in r.stderr
    r = _run_master("--eviction_ratio=1.5")
    assert r.returncode == 2 and "eviction_ratio" in r.stderr
    r = _run_master("--default_kv_lease_ttl=soon")
    assert r.returncode == 2 and "default_kv_lease_ttl" in r.stderr
    r = _run_master("--allocation_strategy=cxl")
    assert r.returncode == 2 and "allocation_strategy" in r.stderr
    r = _run_master("--help")
    assert r.returncode == 0
    for flag in ("--rpc_port (or --port)", "--metrics_port", "--default_kv_lease_ttl",
                 "--eviction_high_watermark_ratio", "--client_ttl", "--config_path"):
        assert flag in r.stdout


def test_bad_listen_address_and_missing_config_file():
    # an address that is not one: named as such (exit 2), not "cannot listen on X:0: No
    # such file or directory"
    for flag, extra in (("rpc_address", ()),
                        ("metrics_host", ("--rpc_address=127.0.0.1",)),
                        ("http_metadata_server_host",
                         ("--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1",
                          "--enable_http_metadata_server=1"))):
        r = _run_master(f"--{flag}=999.1.1.1", "--rpc_port=0", "--metrics_port=0",
                        "--http_metadata_server_port=0", *extra)
        assert r.returncode == 2, r.stderr
        assert f"invalid address '999.1.1.1' for --{flag}" in r.stderr
        assert "No such file or directory" not in r.stderr and "999.1.1.1:0" not in r.stderr
    r = _run_master("--config_path=/nonexistent/master.json")
    assert r.returncode == 2 and "/nonexistent/master.json" in r.stderr
    assert "line" not in r.stderr          # no "(line -1)" for a file that cannot be read


def test_libmicrohttpd_lines_go_to_the_log(spawn):
    """A client that hangs up mid-request: libmicrohttpd's complaint reaches the log at
    DEBUG (both HTTP servers) and never stderr raw."""
    http = free_port()
    flags = ("--enable_http_metadata_server=1", f"--http_metadata_server_port={http}",
             "--http_metadata_server_host=127.0.0.1")
    for level in ("INFO", "DEBUG"):
        env = dict(os.environ, MC_LOG_LEVEL=level)
        m = Master(lambda args, env=env: spawn(args, env=env),
                   "--enable_metric_reporting=false", *flags)
        wait_port(http, proc=m.proc, timeout=10)
        for port in (m.metrics_port, http):
            for _ in range(2):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    time.sleep(0.1)
        time.sleep(0.2)
        code, out = m.stop()
        assert code == 0, out
        raw = [ln for ln in out.splitlines() if ln.startswith("Connection was closed")]
        assert raw == [], out
        if level == "DEBUG":
            assert "master-admin] libmicrohttpd: Connection was closed" in out, out
            assert "http_metadata] libmicrohttpd: Connection was closed" in out, out
            assert "is not the first option" not in out, out


def test_upstream_flags_and_config_file(spawn, tmp_path):
    """Upstream spellings are accepted: --port, durations with units, a JSON config, and
    the "off" values of flags of features we do not have (asking for one is refused:
    test_unimplemented_features_are_refused)."""
    port = free_port()
    cfg = tmp_path / "master.json"
    cfg.write_text(json.dumps({"client_ttl": 1, "default_kv_lease_ttl": "2s",
                               "eviction_ratio": 0.1}))
    m = Master(spawn, f"--config_path={cfg}", "--enable_metric_reporting=false",
               "--enable_offload=false", "--max_threads=8", "--logtostderr", "-v=1",
               rpc_port=port)
    c = Ctl(spawn, m.addr)
    assert c("mount", segment())["status"] == OK
    assert c("put_start", "k", 1)["status"] == OK
    assert c("put_end", "k")["status"] == OK
    assert c("get", "k")["lease_ttl_ms"] == 2000
    code, out = m.stop()
    assert code == 0 and "not supported" not in out
    assert "client_ttl 1s" in out


@pytest.mark.parametrize("flag", ["--enable_kv_events=true", "--enable_multi_tenants",
                                  "--enable_cxl"])
def test_unimplemented_features_are_refused(flag):
    # a flag we would otherwise accept and ignore is refused, naming it and what to do
    r = subprocess.run([tool("mooncake_master"), "--rpc_address=127.0.0.1",
                        f"--rpc_port={free_port()}", flag], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    name = flag.split("=")[0]
    assert f"{name}" in r.stderr and "does not implement" in r.stderr, r.stderr
