"""A standby promoted with writes in flight on its old leader (issue 12; docs/ha.md
"Writes in flight at a failover"): two real HA masters on loopback with a real etcd,
driven through mooncake_master_ctl (the C client library) as a segment owner and a
writer. The writer's put_start reached the standby, its put_end never reached the
leader, the leader is killed with SIGKILL:

- the new leader does not serve the key (get: OBJECT_NOT_FOUND, exist: false);
- the write's range is quarantined (master_quarantined_entries = 1): however many
  puts follow, none is placed on it (the old writer's transfer may still be landing);
- the writer's late put_end answers OBJECT_NOT_FOUND and its retried put is clean: a
  new range, readable, complete.
"""
import signal

from conftest import wait_until
from mc_master import OBJECT_NOT_FOUND, OK, Ctl, Master, segment

OWNER = "00000000000000a1-00000000000000a1"
WRITER = "00000000000000b2-00000000000000b2"
SIZE = 1 << 20


def _json(m, path):
    import json
    status, body = m.http(path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def _overlaps(a, b, n=SIZE):
    return a < b + n and b < a + n


def _sync_pair(spawn, etcd_server):
    """Two HA masters with --ha_sync=sync on a cleared etcd: (leader, standby)."""
    etcd_server.clear()
    common = ("--enable_ha", f"--etcd_endpoints={etcd_server.bare}", "--ha_lease_ttl_sec=2",
              "--ha_sync=sync", "--enable_metric_reporting=false", "--client_ttl=60")
    m1 = Master(spawn, *common)
    wait_until(lambda: _json(m1, "/role")["role"] == "leader", 20, "m1 elected")
    m2 = Master(spawn, *common)
    wait_until(lambda: _json(m2, "/role")["role"] == "standby", 20, "m2 standby")
    return m1, m2


def test_promotion_quarantines_a_write_in_flight(spawn, etcd_server):
    m1, m2 = _sync_pair(spawn, etcd_server)
    seg = segment(name="127.0.0.1:17301", size=16 << 20, id="e1-e2")   # the remount names it

    owner, writer = Ctl(spawn, m1.addr, OWNER), Ctl(spawn, m1.addr, WRITER)
    assert owner("mount", seg)["status"] == OK
    r = writer("put_start", "inflight", SIZE)
    assert r["status"] == OK, r
    fl_addr = r["replicas"][0]["address"]
    assert writer("put_start", "done", 4096)["status"] == OK
    assert writer("put_end", "done")["status"] == OK
    # the standby applied everything the leader logged (the start record included)
    last = m1.metrics()["master_ha_repl_last_lsn"]
    wait_until(lambda: m2.metrics()["master_ha_repl_applied_lsn"] >= last, 20,
               "the standby applied the leader's log")
    m1.stop(sig=signal.SIGKILL)
    owner.close()
    writer.close()
    wait_until(lambda: _json(m2, "/role")["role"] == "leader", 20, "m2 elected")

    owner, writer = Ctl(spawn, m2.addr, OWNER), Ctl(spawn, m2.addr, WRITER)
    try:
        assert owner("remount", [seg])["status"] == OK
        assert m2.metrics()["master_quarantined_entries"] == 1
        assert owner("get", "done")["status"] == OK
        assert owner("get", "inflight")["status"] == OBJECT_NOT_FOUND
        assert owner("exist", "inflight")["exists"] == 0
        # no put lands on the range the old writer may still be writing
        placed = 0
        for i in range(20):
            r = owner("put_start", f"fill{i}", SIZE)
            if r["status"] != OK:
                break
            assert not _overlaps(r["replicas"][0]["address"], fl_addr), (r, fl_addr)
            assert owner("put_end", f"fill{i}")["status"] == OK
            placed += 1
        assert placed >= 10
        for i in range(placed):   # room for the retry (eviction may have taken some)
            owner("remove", f"fill{i}")
        # the writer: its late put_end finds nothing; the retry is a clean new put
        assert writer("put_end", "inflight")["status"] == OBJECT_NOT_FOUND
        r = writer("put_start", "inflight", SIZE)
        assert r["status"] == OK, r
        assert not _overlaps(r["replicas"][0]["address"], fl_addr)
        assert writer("put_end", "inflight")["status"] == OK
        g = owner("get", "inflight")
        assert g["status"] == OK and g["replicas"][0]["address"] == r["replicas"][0]["address"]
        assert m2.metrics()["master_quarantined_entries"] == 1   # until both sides fence
    finally:
        owner.close()
        writer.close()


def test_sync_put_start_waits_for_the_standby(spawn, etcd_server):
    """--ha_sync=sync: a put_start is answered only once a standby fetched its start
    record (docs/ha.md "Writes in flight at a failover"), so a promoted standby always
    knows the write. With the standby following, the leader's acknowledged LSN covers
    the put_start's record when the reply comes, single and batched; with the standby
    stopped (SIGSTOP), the put_start alone counts one degraded acknowledgement."""
    m1, m2 = _sync_pair(spawn, etcd_server)
    owner, writer = Ctl(spawn, m1.addr, OWNER), Ctl(spawn, m1.addr, WRITER)
    try:
        assert owner("mount", segment(name="127.0.0.1:17302", size=16 << 20,
                                      id="e3-e4"))["status"] == OK
        wait_until(lambda: m1.metrics()["master_ha_repl_acked_lsn"]
                   >= m1.metrics()["master_ha_repl_last_lsn"], 20, "the standby caught up")
        assert writer("put_start", "one", 4096)["status"] == OK
        mt = m1.metrics()
        assert mt["master_ha_repl_acked_lsn"] >= mt["master_ha_repl_last_lsn"], mt
        r = writer("batch_put_start", ["b1", "b2", "b3"], [4096, 4096, 4096])
        assert r["status"] == OK, r
        mt = m1.metrics()
        assert mt["master_ha_repl_acked_lsn"] >= mt["master_ha_repl_last_lsn"], mt
        assert mt["master_ha_sync_degraded_total"] == 0, mt
        m2.proc.send_signal(signal.SIGSTOP)
        try:
            assert writer("put_start", "two", 4096)["status"] == OK
            mt = m1.metrics()
            assert mt["master_ha_sync_degraded_total"] == 1, mt  # put_start alone
            assert mt["master_ha_repl_acked_lsn"] < mt["master_ha_repl_last_lsn"], mt
        finally:
            m2.proc.send_signal(signal.SIGCONT)
    finally:
        owner.close()
        writer.close()
