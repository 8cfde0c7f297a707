"""Issue 10, faults 3-9, each as the behaviour the issue asks for, named after the fault.

Every test has a master of its own with the flags it needs (short TTLs), real store
processes (faults/harness.py), self-describing values (faults/values.py), and bounded
waits. A fault's duration (how long a node or the master stays stopped) is the fault
itself, not a wait for a condition."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from faults import harness
from faults.harness import MiB

OBJECT_NOT_FOUND, OBJECT_HAS_LEASE, LEASE_EXPIRED, TRANSFER_FAIL, RPC_TIMEOUT = (
    -704, -706, -707, -800, -901)


def md_get(cluster, key):
    """(status, body) of the embedded metadata server's GET /metadata?key=."""
    import urllib.parse

    url = f"{cluster.sc.metadata}?key={urllib.parse.quote(key, safe='')}"
    try:
        # signed under MC_TEST_AUTH=1 (tests/integration/conftest.py)
        req = harness._iconf.sign_urllib(urllib.request.Request(url))
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


# ---- 3: a get waits for a stuck replica instead of using the healthy one ---------------

STUCK_S = 6.0  # how long the node stays stopped while the get must finish (< client_ttl)


def test_get_uses_healthy_replica_when_one_node_is_stopped(cluster):
    c = cluster("--client_ttl=30", nodes=2, segment=16 * MiB)
    a, b = c.nodes
    w = c.client("W")
    r = c.client("R", {"MC_FORCE_TCP": "1"})
    keys = [f"two-{i}" for i in range(8)]
    specs = [(k, 1, "W", MiB) for k in keys]
    assert w.fn("put_specs", specs, 2, [a.hostname, b.hostname]) == [0] * 8
    for k in keys:
        assert w.fn("endpoints", k) == sorted([a.hostname, b.hostname])
    assert [v[0] for v in r.fn("check_keys", keys)] == ["ok"] * 8
    a.stop()
    try:
        r.send_fn("check_keys", keys)
        done = r.ready(STUCK_S)  # while A is still stopped
        got = r.result(5) if done else None
    finally:
        a.cont()
    assert done, (f"gets of objects with a healthy replica on {b.hostname} did not finish "
                  f"within {STUCK_S}s while {a.hostname} was stopped")
    assert [v[0] for v in got] == ["ok"] * 8, got


def test_timed_out_get_says_why(cluster):
    # one replica, on a node that stops for longer than the read lease (1 s)
    c = cluster("--client_ttl=30", "--default_kv_lease_ttl=1000", nodes=1, segment=16 * MiB)
    a = c.nodes[0]
    w = c.client("W")
    r = c.client("R", {"MC_FORCE_TCP": "1"})
    assert w.fn("put_specs", [("lone", 1, "W", 4 * MiB)], 1, a.hostname) == [0]
    assert r.fn("get_code", "lone", 4 * MiB) == 4 * MiB
    a.stop()
    try:
        r.send_fn("get_code", "lone", 4 * MiB)
        r.ready(3.0)  # the fault: A stays stopped 3 s (less if the get gives up sooner)
    finally:
        a.cont()
    code = r.result(60)
    assert code == 4 * MiB or code in (LEASE_EXPIRED, TRANSFER_FAIL, RPC_TIMEOUT), (
        f"a get of an existing object whose node stopped returned {code}: a miss caused "
        f"by a timeout must say so (LEASE_EXPIRED / TRANSFER_FAIL, not OBJECT_NOT_FOUND)")


# ---- 4: a master paused longer than client_ttl expires every live client -------------


def test_master_paused_longer_than_client_ttl_keeps_live_clients(cluster):
    ttl = 3
    c = cluster(f"--client_ttl={ttl}", nodes=1, segment=16 * MiB)
    a = c.nodes[0]
    w = c.client("W")
    keys = [f"keep-{i}" for i in range(4)]
    assert w.fn("put_specs", [(k, 1, "W", 256 * 1024) for k in keys], 1, a.hostname) == [0] * 4
    c.pause_master()
    try:
        time.sleep(ttl + 2)  # the fault: the master is stopped for longer than client_ttl
    finally:
        c.resume_master()
    expired = harness.wait_until(lambda: c.metric("master_clients_expired_total") > 0,
                                 2 * ttl)
    assert not expired, "live clients were expired when the master resumed"
    assert a.hostname in c.segments()
    assert [v[0] for v in w.fn("check_keys", keys)] == ["ok"] * 4


# ---- 5: remount republishes all of a segment's metadata; restart under the old name ---


def test_remount_after_master_restart_republishes_rpc_meta(cluster):
    c = cluster(nodes=1, segment=8 * MiB)
    seg = c.nodes[0].hostname
    ram, rpc = f"mooncake/ram/{seg}", f"mooncake/rpc_meta/{seg}"
    assert md_get(c, ram)[0] == 200 and md_get(c, rpc)[0] == 200
    c.restart_master()  # the embedded metadata server starts empty
    assert harness.wait_until(lambda: md_get(c, ram)[0] == 200, 20), "no remount"
    assert harness.wait_until(lambda: md_get(c, rpc)[0] == 200, 5), (
        f"{rpc} was not republished after the master restart")


def test_client_restarted_under_its_old_name_sets_up(cluster):
    c = cluster(nodes=0)
    port = harness._iconf.free_port()
    name = f"127.0.0.1:{port}"
    first = c.node("first", 8 * MiB, hostname=name)
    assert first.hostname == name
    first.kill9()
    again = c.node("again", 8 * MiB, hostname=name, check=False)
    assert again.setup_rc == 0, (f"a client restarted under its old name {name} (its "
                                 f"previous process is dead) failed setup: {again.setup_rc}")


# ---- 6: a put returns 0 but nothing readable exists; upsert after get ----------------


def test_put_race_loser_reads_its_key(cluster):
    c = cluster(nodes=2, segment=32 * MiB)
    p1, p2 = c.client("P1"), c.client("P2")
    keys = [f"race-{i}" for i in range(30)]
    start = time.time() + 1.0
    p1.send_fn("race_rounds", keys, "P1", MiB, start, 0.1)
    p2.send_fn("race_rounds", keys, "P2", MiB, start, 0.1)
    got = p1.result(60) + p2.result(60)
    bad = [(k, g) for k, g in zip(keys * 2, got) if g[0] == 0 and g[1] != "ok"]
    assert not bad, (f"{len(bad)} of {len(got)} puts returned 0 and then their own get did "
                     f"not read a value of the key: {bad[:3]}")


def test_put_after_writer_killed_mid_put_is_readable(cluster):
    ttl = 3
    c = cluster(f"--client_ttl={ttl}", nodes=1, segment=40 * MiB)  # discard timeout: 30 s
    a = c.nodes[0]
    a_ports = harness.listening_ports(a.pid)
    w1 = c.client("W1", {"MC_FORCE_TCP": "1"})
    w2 = c.client("W2")
    assert w1.fn("warm_peers", [a.hostname], "W1") == [(0, True)]
    a.stop()
    try:
        w1.send_fn("put_specs", [("orphan", 1, "W1", 16 * MiB)], 1, a.hostname)
        assert harness.wait_until(lambda: harness.query_key(c, "orphan")[0] == 200, 15)
        assert harness.wait_until(lambda: harness.bytes_in_flight(a_ports) > 0, 15)
        w1.kill9()  # W1 dies mid-put
    finally:
        a.cont()
    # W1's client expires after client_ttl; a put of the key must store it by then
    # (or say it did not), not return 0 for the 30 s of the discard timeout
    rc, verdict, tries = w2.fn("put_retry_until", "orphan", 2, "W2", MiB,
                               time.time() + 3 * ttl, a.hostname, timeout=60)
    assert verdict == "ok", (f"put after a writer was killed mid-put: {tries} puts returned "
                             f"{rc} (last) but the key read back {verdict}")


def test_upsert_right_after_get_replaces_the_object(cluster):
    c = cluster(nodes=1, segment=8 * MiB)  # default lease: 10 s
    p = c.client("P")
    rc1, first, rc2, verdict, detail = p.fn("upsert_after_get", "up", 64 * 1024)
    assert rc1 == 0 and first == "ok"
    assert rc2 == 0, f"upsert right after a get returned {rc2} (the get's read lease)"
    assert verdict == "ok" and detail == [2, "upsert"], (verdict, detail)


# ---- 7: a failed transfer_sync_read zero-fills the destination -----------------------


def test_failed_transfer_sync_read_leaves_destination_untouched(cluster):
    c = cluster(nodes=2, segment=8 * MiB)
    a, b = c.nodes
    st, body = md_get(c, f"mooncake/ram/{a.hostname}")
    assert st == 200, st
    desc = json.loads(body)
    bufs = desc.get("buffers") or []
    assert bufs, desc
    base, length = int(bufs[0]["addr"]), int(bufs[0]["length"])
    r = c.client("R", {"MC_FORCE_TCP": "1"})
    cases = [(4096, 64 * 1024),                       # memory A never registered
             (base + length - 4096, 64 * 1024)]       # starts inside, runs past the end
    got = r.fn("te_failed_reads", c.sc.metadata, a.hostname, cases, timeout=60)
    b.kill9()                                         # a peer that is gone
    got += r.fn("te_failed_reads", c.sc.metadata, b.hostname, [(base, 64 * 1024)],
                timeout=90)
    assert all(code < 0 for code, _ in got), got
    touched = [(case, code) for case, (code, same) in
               zip(cases + [("dead peer", 64 * 1024)], got) if not same]
    assert not touched, f"failed reads changed the destination buffer: {touched}"


# ---- 8: register_buffer one at a time is quadratic; silent limit ---------------------


def test_register_buffer_20000_then_past_any_limit(cluster):
    c = cluster(nodes=0)
    p = c.client("P", {"MC_LOG_TO_PYTHON": "1"})
    bound = 10.0  # today 20000 registrations do not finish in 200 s
    out = p.fn("register_many", 20000, 70000, bound, timeout=bound + 60)
    assert out["done"] >= 20000 and not out["timed_out"], (
        f"register_buffer one at a time: {out['done']} buffers in {out['seconds']:.0f}s")
    if out["first_failure"]:
        i, code = out["first_failure"]
        assert code < 0 and out["logs"], (
            f"register_buffer #{i} failed with {code} and logged nothing to say why")


# ---- 9: error paths that point the wrong way -----------------------------------------


def _py(code, timeout=60, env=None):
    """Runs python code in a fresh process; (exit code, stdout + stderr)."""
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=timeout, env=e)
    return r.returncode, r.stdout + r.stderr


SETUP = """
import sys
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", {md!r}, 16 << 20, 16 << 20, "tcp", "", {master!r})
print("RC", rc)
"""


def test_setup_without_master_names_the_metadata_server_and_master():
    md_port, m_port = harness._iconf.free_port(), harness._iconf.free_port()
    md, master = f"http://127.0.0.1:{md_port}/metadata", f"127.0.0.1:{m_port}"
    rc, out = _py(SETUP.format(md=md, master=master), env={"MC_STORE_CLIENT_SETUP_RETRIES": "2"})
    assert "RC 0" not in out, out
    assert f"127.0.0.1:{md_port}" in out or master in out, (
        f"setup failed without naming the metadata server or master it could not reach:\n{out}")
    assert "free port" not in out, f"setup blamed the transfer engine's port:\n{out}"


def test_metadata_url_without_path_names_the_url(cluster):
    c = cluster(nodes=0)
    md = f"http://127.0.0.1:{c.sc.http_port}"  # no /metadata
    rc, out = _py(SETUP.format(md=md, master=c.sc.addr))
    if "RC 0" not in out:
        assert md in out, f"setup with metadata {md} failed without naming it:\n{out}"


def test_trace_replay_at_dead_master_names_it(tmp_path):
    # another master listens on the default metrics port 9003: in a network namespace of
    # our own, so that port is ours (and no one else's master is read by mistake)
    why = harness.netns_unavailable()
    if why:
        pytest.skip(why)
    with harness.NetNS():
        sp = harness._iconf._Spawner()
        try:
            other = harness.mc_master.Master(sp, metrics_port=9003)
            assert other.metrics_port == 9003
            free = harness._iconf.free_port
            dead = f"127.0.0.1:{free()}"
            r = subprocess.run([harness._iconf.tool("mooncake_trace_replay"), "--master", dead,
                                "--metadata", f"http://127.0.0.1:{free()}/metadata",
                                "--synthetic-requests", "5", "--no-progress",
                                "--out", str(tmp_path)],
                               capture_output=True, text=True, timeout=60)
        finally:
            sp.cleanup()
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert dead in out, f"mooncake_trace_replay --master {dead} did not name it:\n{out}"
    assert "9003" not in out and "holds no memory" not in out, (
        f"mooncake_trace_replay at a dead master read another master's metrics:\n{out}")


def test_metadata_port_conflict_is_reported_once():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        m = [harness._iconf.tool("mooncake_master"),
             f"--rpc_port={harness._iconf.free_port()}", "--rpc_address=127.0.0.1",
             f"--metrics_port={harness._iconf.free_port()}", "--metrics_host=127.0.0.1",
             "--enable_http_metadata_server=1", f"--http_metadata_server_port={port}",
             "--http_metadata_server_host=127.0.0.1"]
        r = subprocess.run(m, capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    lines = [ln.split("]", 1)[-1].strip() for ln in out.splitlines() if str(port) in ln]
    assert lines, f"the conflict on port {port} is not named:\n{out}"
    assert len(lines) == 1, f"the same error is printed {len(lines)} times:\n{out}"
