"""mooncake.store with several client processes around one real mooncake_master: replicas
across segments, eviction under pressure, a killed client, a master restart. Each test
has a master of its own (so its flags can be small: short TTLs, small segments) and is
bounded in time by explicit deadlines. Each runs on every metadata backend (`md`: the
master's HTTP metadata server, etcd, Redis, P2PHANDSHAKE)."""
import time
import uuid

import pytest

from conftest import METADATA_BACKENDS, _Spawner, store_metadata, wait_until
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
from store_proc import StoreCluster, StoreProc, value_for


@pytest.fixture(params=METADATA_BACKENDS)
def md(request):
    """The metadata string for StoreCluster (None: the master's HTTP metadata server)."""
    return store_metadata(request, request.param)


@pytest.fixture
def spawner():
    sp = _Spawner()
    yield sp
    sp.cleanup()


def K(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


def endpoints(store, key):
    return sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for r in store.get_replica_desc(key))


def test_replication_across_segments(spawner, md):
    c = StoreCluster(spawner, metadata=md)
    s = MooncakeDistributedStore()
    assert s.setup(*c.setup_args(segment=0)) == 0                 # a pure client
    p1, p2, p3 = (StoreProc(c.setup_args(segment=8 << 20)) for _ in range(3))
    try:
        cfg = ReplicateConfig()
        cfg.replica_num = 2
        cfg.preferred_segments = [p1.hostname, p2.hostname]
        keys = [K(f"rep{i}") for i in range(8)]
        for k in keys:
            assert s.put(k, value_for(k, 300000), cfg) == 0
            assert endpoints(s, k) == sorted([p1.hostname, p2.hostname])
        # replica_num 3 without preferences: three distinct segments
        k3 = K("rep3")
        cfg3 = ReplicateConfig()
        cfg3.replica_num = 3
        assert p3.call("put", k3, value_for(k3, 1000), cfg3) == 0
        assert endpoints(s, k3) == sorted([p1.hostname, p2.hostname, p3.hostname])
        # every client reads every object (remote and local replicas)
        for p in (p1, p2, p3):
            assert p.fn("check_values", keys, 300000) == ["ok"] * len(keys)
        # one owner leaves: its replicas go, the other copy still serves every read
        assert p1.close() == 0
        assert wait_until(lambda: all(endpoints(s, k) == [p2.hostname] for k in keys), 10)
        assert [s.get(k) == value_for(k, 300000) for k in keys] == [True] * len(keys)
        assert p3.fn("check_values", keys, 300000) == ["ok"] * len(keys)
        assert s.get(k3) == value_for(k3, 1000)
    finally:
        for p in (p1, p2, p3):
            p.close()
        s.close()


def test_eviction_under_pressure_never_returns_wrong_bytes(spawner, md):
    # 2 x 8 MiB of segments, 40 MiB written in 512 KiB objects; short leases so that
    # the reads in between do not pin everything
    c = StoreCluster(spawner, "--default_kv_lease_ttl=200", "--eviction_ratio=0.1", metadata=md)
    s = MooncakeDistributedStore()
    assert s.setup(*c.setup_args(segment=0)) == 0
    p1, p2 = (StoreProc(c.setup_args(segment=8 << 20)) for _ in range(2))
    try:
        size = 512 << 10
        keys = [K(f"ev{i:03d}") for i in range(80)]
        rcs = []
        for i, k in enumerate(keys):
            rcs.append(s.put(k, value_for(k, size)))
            if i % 10 == 9:                                       # reads while filling
                assert p1.fn("check_values", keys[:i + 1:7], size).count("WRONG") == 0
        assert rcs == [0] * len(keys), rcs
        got = p2.fn("check_values", keys, size)
        assert "WRONG" not in got
        assert got.count("miss") >= len(keys) // 2               # most went to eviction
        assert got[-4:] == ["ok"] * 4                             # the newest are there
        local = [("ok" if s.get(k) == value_for(k, size) else
                  ("miss" if s.get(k) == b"" else "WRONG")) for k in keys]
        assert "WRONG" not in local
        # the pool still accepts puts once full (after the reads' 200 ms leases ended:
        # leased objects cannot be evicted, so new objects would be the only victims)
        time.sleep(0.4)
        more = [K("evmore") for _ in range(10)]
        assert [s.put(k, value_for(k, size)) for k in more] == [0] * 10
        assert p1.fn("check_values", more[-3:], size) == ["ok"] * 3
    finally:
        p1.close()
        p2.close()
        s.close()


def test_killed_client_objects_disappear_after_client_ttl(spawner, md):
    c = StoreCluster(spawner, "--client_ttl=2", metadata=md)
    s = MooncakeDistributedStore()
    assert s.setup(*c.setup_args(segment=0)) == 0
    a = StoreProc(c.setup_args(segment=8 << 20))
    b = StoreProc(c.setup_args(segment=8 << 20))
    try:
        ka = [K(f"ka{i}") for i in range(6)]
        kb = [K(f"kb{i}") for i in range(6)]
        assert a.fn("put_values", ka, 50000, preferred=a.hostname) == [0] * 6
        assert b.fn("put_values", kb, 50000, preferred=b.hostname) == [0] * 6
        assert s.batch_is_exist(ka + kb) == [1] * 12
        a.kill()                                                  # no close, no unmount
        assert s.batch_is_exist(ka) == [1] * 6                    # not before the TTL (2 s)
        assert wait_until(lambda: s.batch_is_exist(ka) == [0] * 6, 30, "the killed client's objects gone",
                          step=0.2)
        # the others are unaffected
        assert s.batch_is_exist(kb) == [1] * 6
        assert b.fn("check_values", kb, 50000) == ["ok"] * 6
        assert [s.get(k) == value_for(k, 50000) for k in kb] == [True] * 6
        assert [s.get(k) for k in ka] == [b""] * 6
        k2 = K("after")
        assert b.call("put", k2, b"still working") == 0
        assert s.get(k2) == b"still working"
    finally:
        a.kill()
        b.close()
        s.close()


def test_master_restart_clients_remount_and_keep_working(spawner, md):
    c = StoreCluster(spawner, metadata=md)
    env = {"MC_STORE_HEARTBEAT_MS": "100"}
    a = StoreProc(c.setup_args(segment=8 << 20), env=env)
    b = StoreProc(c.setup_args(segment=8 << 20), env=env)
    try:
        k1 = K("before")
        assert a.fn("put_values", [k1], 10000, preferred=a.hostname) == [0]
        assert b.fn("check_values", [k1], 10000) == ["ok"]
        c.master.stop()
        # while the master is away: health_check says so (2), puts fail with a code
        assert a.fn("wait_health", 2, 10, timeout=30)
        assert a.call("put", K("down"), b"x") < 0
        assert b.call("get", k1) in (b"", value_for(k1, 10000))
        c.start()                                                 # same ports, empty state
        assert a.fn("put_retry", K("probe"), b"x", 20, timeout=40) == 0
        assert b.fn("wait_healthy", 20, timeout=40)
        assert a.fn("wait_healthy", 20, timeout=40)
        assert a.fn("wait_own_segment", 20, timeout=40)               # remounted
        assert b.fn("wait_own_segment", 20, timeout=40)
        # new objects in both segments, read across clients (needs the remount and the
        # segment descriptors republished to the restarted metadata server)
        k2, k3 = K("after-a"), K("after-b")
        assert a.fn("put_values", [k2], 200000, preferred=a.hostname) == [0]
        assert b.fn("put_values", [k3], 200000, preferred=b.hostname) == [0]
        assert a.fn("replicas", k2)[0][1] == a.hostname
        assert b.fn("replicas", k3)[0][1] == b.hostname
        assert b.fn("check_values", [k2], 200000) == ["ok"]
        assert a.fn("check_values", [k3], 200000) == ["ok"]
        # what the old master knew is gone, and never read back wrong
        assert b.fn("check_values", [k1], 10000)[0] in ("ok", "miss")
    finally:
        a.close()
        b.close()
