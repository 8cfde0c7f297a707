"""Faults of issue 10 around the master and the metadata server, with real processes on
127.0.0.1 (a real ``mooncake_master`` with its embedded HTTP metadata server, store
clients in their own processes):

- fault 4: a master SIGSTOPped for longer than client_ttl keeps its live clients (and
  their objects) when it resumes;
- fault 5: a remount after a master restart republishes rpc_meta as well as the segment
  descriptor; a client restarted under its old name takes over its own stale entries when
  the previous owner is provably dead, and a live (or unprovably dead) owner keeps the
  name (-705);
- fault 9: failures name the component, the address and what to check: no master / no
  metadata server at setup, a metadata URL without /metadata, the trace replay at a dead
  master, a metadata port already taken.

Every wait is bounded by a deadline; the only fixed pause is the SIGSTOP itself (the
fault being injected)."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import BIN_DIR, _Spawner, free_port, sign_urllib, tool
from store_proc import StoreCluster, StoreProc, value_for

import mooncake.store as store_module

pytestmark = pytest.mark.skipif(not hasattr(store_module, "MooncakeDistributedStore"),
                                reason="mooncake.store has no MooncakeDistributedStore")

OBJECT_ALREADY_EXISTS = -705
INVALID_PARAMS = -600
RPC_FAIL = -900
FAST_HB = {"MC_STORE_HEARTBEAT_MS": "100"}


@pytest.fixture
def spawner():
    sp = _Spawner()
    yield sp
    sp.cleanup()


def wait_until(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def md_get(cluster, key):
    """(HTTP status, body) of GET key on the cluster's metadata server."""
    url = f"{cluster.metadata}?key={urllib.parse.quote(key, safe='')}"
    try:
        with urllib.request.urlopen(sign_urllib(urllib.request.Request(url)),
                                    timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def md_put(cluster, key, body):
    url = f"{cluster.metadata}?key={urllib.parse.quote(key, safe='')}"
    req = sign_urllib(urllib.request.Request(url, data=body, method="PUT"))
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def answers(host, port):
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def run_setup(args, timeout=60):
    """store.setup(*args) in a fresh Python process; returns (rc, its stderr)."""
    code = textwrap.dedent(f"""
        import mooncake.store as ms
        s = ms.MooncakeDistributedStore()
        print("RC", s.setup(*{tuple(args)!r}), flush=True)
        s.close()
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=timeout)
    rc = [int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("RC ")]
    assert rc, r.stdout + r.stderr
    return rc[0], r.stderr


# ------------------------------------------------------------------------ fault 4


def test_master_paused_longer_than_client_ttl_keeps_its_live_clients(spawner):
    ttl = 2
    c = StoreCluster(spawner, f"--client_ttl={ttl}", "--enable_metric_reporting=false")
    a = StoreProc(c.setup_args(segment=8 << 20), env=FAST_HB)
    try:
        key = "paused-master-kept"
        assert a.fn("put_values", [key], 100000, preferred=a.hostname) == [0]
        os.kill(c.master.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(3 * ttl)          # the fault: the master does not run for 3 x TTL
        finally:
            os.kill(c.master.proc.pid, signal.SIGCONT)
        # After the resume: the queued heartbeats and then fresh ones are served; wait
        # until the client has pinged several times after the master's first ticks.
        m0 = c.master.metrics()["master_ping_requests_total"]
        assert wait_until(lambda: c.master.metrics()["master_ping_requests_total"] >= m0 + 10,
                          20)
        m = c.master.metrics()
        assert m["master_clients_expired_total"] == 0
        assert m["master_active_clients"] == 1
        assert a.fn("check_values", [key], 100000) == ["ok"]
        # a client that really went away still expires (one grace, then client_ttl)
        a.kill()
        assert wait_until(lambda: c.master.metrics()["master_clients_expired_total"] == 1,
                          6 * ttl)
        rc, out = c.master.stop()
        assert "was stalled for" in out, out
    finally:
        a.kill()


# ------------------------------------------------------------------------ fault 5


def test_remount_after_a_master_restart_republishes_rpc_meta(spawner):
    c = StoreCluster(spawner)
    a = StoreProc(c.setup_args(segment=8 << 20), env=FAST_HB)
    try:
        name = a.hostname
        assert md_get(c, f"mooncake/rpc_meta/{name}")[0] == 200
        c.restart()                          # same ports; the metadata server is empty
        assert wait_until(lambda: md_get(c, f"mooncake/rpc_meta/{name}")[0] == 200, 20)
        assert wait_until(lambda: md_get(c, f"mooncake/ram/{name}")[0] == 200, 20)
        meta = json.loads(md_get(c, f"mooncake/rpc_meta/{name}")[1])
        assert answers(meta["ip_or_host_name"], meta["rpc_port"])
        # a client that never saw `a` before the restart reads a's new object: it finds
        # a's address only through the republished rpc_meta
        assert a.fn("wait_own_segment", 20, timeout=40)
        key = "after-restart"
        assert a.fn("put_values", [key], 50000, preferred=name) == [0]
        b = StoreProc(c.setup_args(segment=0))
        try:
            assert b.fn("check_values", [key], 50000) == ["ok"]
        finally:
            b.close()
    finally:
        a.close()


def test_client_restarted_under_its_old_name_replaces_its_stale_entries(spawner):
    # No --enable_metadata_cleanup_on_timeout: the killed client's keys stay behind.
    c = StoreCluster(spawner)
    name = f"127.0.0.1:{free_port()}"
    a = StoreProc(c.setup_args(segment=8 << 20, hostname=name))
    assert a.setup_rc == 0 and a.hostname == name
    old = json.loads(md_get(c, f"mooncake/rpc_meta/{name}")[1])
    a.kill()                                            # crashed: nothing unpublished
    assert md_get(c, f"mooncake/rpc_meta/{name}")[0] == 200
    b = StoreProc(c.setup_args(segment=8 << 20, hostname=name))
    try:
        assert b.setup_rc == 0
        meta = json.loads(md_get(c, f"mooncake/rpc_meta/{name}")[1])
        assert answers(meta["ip_or_host_name"], meta["rpc_port"])     # the new owner's
        # and it serves: another client reads an object on b's segment
        key = "restarted-under-old-name"
        assert b.fn("put_values", [key], 70000, preferred=name) == [0]
        r = StoreProc(c.setup_args(segment=0))
        try:
            assert r.fn("check_values", [key], 70000) == ["ok"]
        finally:
            r.close()
    finally:
        b.close()


def test_a_live_owner_keeps_its_name(spawner):
    c = StoreCluster(spawner)
    name = f"127.0.0.1:{free_port()}"
    a = StoreProc(c.setup_args(segment=8 << 20, hostname=name))
    try:
        assert a.setup_rc == 0
        before = md_get(c, f"mooncake/rpc_meta/{name}")
        rc, err = run_setup(c.setup_args(segment=8 << 20, hostname=name))
        assert rc == OBJECT_ALREADY_EXISTS, err
        assert name in err and "alive" in err and c.metadata in err, err
        # a stopped owner cannot be proven dead (its listeners still accept): kept too
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            rc, err = run_setup(c.setup_args(segment=8 << 20, hostname=name))
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        assert rc == OBJECT_ALREADY_EXISTS, err
        assert md_get(c, f"mooncake/rpc_meta/{name}") == before
        key = "live-owner"
        assert a.fn("put_values", [key], 1000, preferred=name) == [0]
        assert a.fn("check_values", [key], 1000) == ["ok"]
    finally:
        a.close()


def test_stale_entries_of_another_host_are_not_taken(spawner):
    c = StoreCluster(spawner)
    name = f"127.0.0.1:{free_port()}"
    a = StoreProc(c.setup_args(segment=8 << 20, hostname=name))
    assert a.setup_rc == 0
    a.kill()
    # the dead owner's descriptor, as if it had been registered from another machine
    desc = json.loads(md_get(c, f"mooncake/ram/{name}")[1])
    desc["host_id"] = "another-machine-0000"
    assert md_put(c, f"mooncake/ram/{name}", json.dumps(desc).encode()) == 200
    rc, err = run_setup(c.setup_args(segment=8 << 20, hostname=name))
    assert rc == OBJECT_ALREADY_EXISTS, err
    assert "another host" in err and f"mooncake/rpc_meta/{name}" in err, err


# ------------------------------------------------------------------------ fault 9


def test_setup_without_a_master_names_the_metadata_server_and_the_master():
    # The README's arguments, on ports where nothing runs.
    md = f"http://127.0.0.1:{free_port()}/metadata"
    master = f"127.0.0.1:{free_port()}"
    rc, err = run_setup(("127.0.0.1", md, 16 << 20, 16 << 20, "tcp", "", master))
    assert rc == RPC_FAIL, err
    assert f"metadata server {md} is not reachable" in err, err
    assert "--enable_http_metadata_server" in err and master in err, err
    assert "does not answer either" in err, err
    assert "free port of" not in err, err            # not the port range's fault


def test_setup_messages_never_show_a_metadata_password():
    # A Redis metadata server that is not there, with a password in the URL: the
    # failure is reported, the password is not.
    md = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/1"
    master = f"127.0.0.1:{free_port()}"
    rc, err = run_setup(("127.0.0.1", md, 16 << 20, 16 << 20, "tcp", "", master))
    assert rc != 0, err
    assert "s3cret-pw" not in err, err
    assert f"127.0.0.1" in err, err


def test_metadata_url_without_the_metadata_path_is_named(spawner):
    c = StoreCluster(spawner)
    bare = c.metadata[:-len("/metadata")]
    rc, err = run_setup(c.setup_args(metadata=bare))
    assert rc == INVALID_PARAMS, err
    assert bare in err and "/metadata" in err and "404" in err, err
    assert "object not found" not in err, err


@pytest.mark.skipif(not os.path.exists(os.path.join(BIN_DIR, "mooncake_master")),
                    reason="mooncake_master not installed")
def test_trace_replay_at_a_dead_master_says_so(tmp_path, spawner):
    master = f"127.0.0.1:{free_port()}"
    # A live master elsewhere whose metrics the tool must not read instead.
    other = StoreCluster(spawner)
    cmd = [sys.executable, "-m", "mooncake.trace_replay", "--no-progress", "--out",
           str(tmp_path), "--backend", "store", "--master", master, "--metadata",
           other.metadata, "--metrics-url", f"http://127.0.0.1:{other.master.metrics_port}"
           "/metrics", "--synthetic-requests", "10", "--block-bytes", "4KiB"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"cannot reach mooncake_master at {master} (--master)" in r.stderr, r.stderr
    assert "holds no memory" not in r.stderr and "RESULT" not in r.stdout, r.stderr
    # a dead metadata server is named too
    dead_md = f"http://127.0.0.1:{free_port()}/metadata"
    cmd[cmd.index("--master") + 1] = other.addr
    cmd[cmd.index("--metadata") + 1] = dead_md
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"cannot reach the metadata server {dead_md} (--metadata)" in r.stderr, r.stderr


def test_a_taken_metadata_port_is_reported_once():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            [tool("mooncake_master"), "--rpc_address=127.0.0.1", f"--rpc_port={free_port()}",
             "--metrics_host=127.0.0.1", f"--metrics_port={free_port()}",
             "--enable_http_metadata_server=1", "--http_metadata_server_host=127.0.0.1",
             f"--http_metadata_server_port={port}"],
            capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if str(port) in ln]
    assert len(lines) == 1, r.stderr
    assert "--http_metadata_server_port" in lines[0] and f"127.0.0.1:{port}" in lines[0]
    assert "Address already in use" in lines[0] and "another process" in lines[0]
