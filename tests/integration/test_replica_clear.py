"""batch_replica_clear(keys, segment_name="") (issue 13 item 3; upstream BatchReplicaClear,
upstream-mooncake.md §1 and §4): against a real master with two store nodes in their own
processes, node A writes with replica_num=2 (one replica on each node) and clears; a
reader in this process checks what is left through get_replica_desc and get.

Upstream's rules, kept here: only the object's writer may clear it, never while a read
lease is active; the call answers with the keys it cleared, leaving out the others
(missing, another client's, leased, no replica on that segment); segment_name "" drops
the whole object; an object left with no replica is gone. The master RPC itself (its
per-key codes) is exercised through mooncake_master_ctl at the end.
"""
import uuid

import pytest

from conftest import _Spawner, wait_until
from mc_master import ILLEGAL_CLIENT, OBJECT_HAS_LEASE, OBJECT_NOT_FOUND, OK, Ctl, Master, \
    segment
from mooncake.store import MooncakeDistributedStore
from store_proc import StoreCluster, StoreProc, value_for

LEASE_MS = 2000  # long enough that "a lease is active" is true right after a read
REPLICA_NOT_FOUND = -710
SIZE = 64 << 10


def K(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cluster():
    sp = _Spawner()
    c = StoreCluster(sp, f"--default_kv_lease_ttl={LEASE_MS}")
    nodes = [StoreProc(c.setup_args(segment=32 << 20)) for _ in range(2)]
    assert [n.setup_rc for n in nodes] == [0, 0]
    reader = MooncakeDistributedStore()
    assert reader.setup(*c.setup_args(segment=0)) == 0
    try:
        yield nodes, reader
    finally:
        reader.close()
        for n in nodes:
            n.close()
        sp.cleanup()


def endpoints(store, key):
    return sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for r in store.get_replica_desc(key))


def clear_when_unleased(node, keys, segment_name=""):
    """Clears once the read lease the last check granted has ended (LEASE_MS)."""
    return wait_until(lambda: node.call("batch_replica_clear", keys, segment_name),
                      timeout=LEASE_MS / 1000 * 5 + 10, what=f"clear {keys} on {segment_name!r}")


def test_clear_one_segment_then_all(cluster):
    (a, b), reader = cluster
    k = K("two")
    assert a.fn("put_values", [k], SIZE, replica_num=2) == [0]
    assert endpoints(reader, k) == sorted([a.hostname, b.hostname])

    # the reader's lookup just granted a lease: nothing is cleared while it is active
    assert a.call("batch_replica_clear", [k], a.hostname) == []
    # another client (the reader, or node B) may not clear A's object
    assert reader.batch_replica_clear([k]) == []
    assert b.call("batch_replica_clear", [k], b.hostname) == []

    # A's replica goes; B's stays and still reads the right bytes
    assert clear_when_unleased(a, [k], a.hostname) == [k]
    assert endpoints(reader, k) == [b.hostname]
    assert reader.get(k) == value_for(k, SIZE)
    assert b.fn("check_values", [k], SIZE) == ["ok"]

    assert clear_when_unleased(a, [k], "") == [k]  # "" = the whole object
    assert reader.get_replica_desc(k) == []
    assert reader.is_exist(k) == 0
    assert reader.get(k) == b""
    # the key is free again for a new put by anyone
    assert b.fn("put_values", [k], SIZE, replica_num=1) == [0]


def test_clear_all_batch_and_misses(cluster):
    (a, b), reader = cluster
    keys = [K(f"k{i}") for i in range(3)]
    assert a.fn("put_values", keys, SIZE, replica_num=2) == [0, 0, 0]
    missing = K("missing")
    # no lease was granted (puts grant none): the clear is immediate; misses are left out,
    # and the order is the caller's
    assert a.call("batch_replica_clear", [keys[2], missing, keys[0]]) == [keys[2], keys[0]]
    assert [reader.is_exist(k) for k in keys] == [0, 1, 0]
    assert a.call("batch_replica_clear", [missing]) == []
    assert a.call("batch_replica_clear", []) == []
    # a segment the object has no replica on clears nothing
    assert a.call("batch_replica_clear", [keys[1]], "no-such-segment:1") == []
    assert endpoints(reader, keys[1]) == sorted([a.hostname, b.hostname])
    # clearing both segments one after the other erases the object
    assert clear_when_unleased(a, [keys[1]], b.hostname) == [keys[1]]
    assert clear_when_unleased(a, [keys[1]], a.hostname) == [keys[1]]
    assert reader.get_replica_desc(keys[1]) == []
    with pytest.raises(TypeError):
        reader.batch_replica_clear("not-a-list-of-keys", 5)


def test_not_set_up_gives_empty_list():
    s = MooncakeDistributedStore()
    assert s.batch_replica_clear(["x"]) == []
    assert s.batch_replica_clear(["x"], "127.0.0.1:1") == []


def test_master_rpc_codes(spawn):
    """Per-key codes of the RPC (what the Python list is made from), via the ctl tool."""
    m = Master(spawn, "--default_kv_lease_ttl=400", "--enable_metric_reporting=false")
    ctl = Ctl(spawn, m.addr)
    assert ctl("mount", segment())["status"] == OK
    assert ctl("mount", segment(name="127.0.0.1:17002", id="1-2",
                                base=2 << 32))["status"] == OK
    other = Ctl(spawn, m.addr)
    r = ctl("batch_put_start", ["a", "b"], [100, 100], {"replica_num": 2})
    assert r["status"] == OK and [len(i["replicas"]) for i in r["items"]] == [2, 2]
    assert ctl("batch_put_end", ["a", "b"])["status"] == OK
    r = ctl("batch_replica_clear", ["a", "zz", "b"], "127.0.0.1:17002")
    assert r["statuses"] == [OK, OBJECT_NOT_FOUND, OK] and r["status"] == OBJECT_NOT_FOUND
    assert [x["endpoint"] for x in ctl("get", "a")["replicas"]] == ["127.0.0.1:17001"]
    r = ctl("batch_replica_clear", ["a"], "127.0.0.1:17002")
    assert r["statuses"] == [OBJECT_HAS_LEASE]  # the get above holds a lease
    ctl("sleep", 500)
    assert ctl("batch_replica_clear", ["a"], "127.0.0.1:17002")["statuses"] == \
        [REPLICA_NOT_FOUND]
    assert other("batch_replica_clear", ["a"])["statuses"] == [ILLEGAL_CLIENT]
    assert ctl("batch_replica_clear", ["a", "b"])["statuses"] == [OK, OK]
    assert ctl("get", "a")["status"] == OBJECT_NOT_FOUND
    assert ctl("get", "b")["status"] == OBJECT_NOT_FOUND
    status, body = m.http("/metrics")
    assert status == 200
    assert b"master_batch_replica_clear_items_total" in body
