"""Every master RPC through the C client library against a real ``mooncake_master``:
success and error codes as upstream (upstream-mooncake.md §4.1), batches (also larger
than one request), binary keys, and the lease rules that remove/upsert depend on."""
import pytest

from mc_master import (INVALID_PARAMS, INVALID_WRITE, ILLEGAL_CLIENT, NO_AVAILABLE_HANDLE,
                       OBJECT_ALREADY_EXISTS, OBJECT_HAS_LEASE, OBJECT_NOT_FOUND, OK,
                       REPLICA_COMPLETE, REPLICA_IS_NOT_READY, REPLICA_PROCESSING,
                       SEGMENT_ALREADY_EXISTS, SEGMENT_NOT_FOUND, Ctl, Master, segment)

LEASE_MS = 400  # short read leases so tests can wait them out


@pytest.fixture
def master(spawn):
    return Master(spawn, f"--default_kv_lease_ttl={LEASE_MS}", "--enable_metric_reporting=false")


@pytest.fixture
def ctl(spawn, master):
    c = Ctl(spawn, master.addr)
    seg = c("mount", segment())
    assert seg["status"] == OK
    c.segment_id = seg["segment_id"]
    return c


def test_service_ready_and_ping(spawn, master):
    c = Ctl(spawn, master.addr)
    r = c("service_ready")
    assert r["status"] == OK and r["version"].startswith("mooncake-c ")
    # A client the master has never seen must remount (upstream Ping -> NEED_REMOUNT).
    r = c("ping")
    assert r == {"status": OK, "status_name": "OK", "view_version": 0,
                 "client_status": "NEED_REMOUNT"}
    assert c("mount", segment())["status"] == OK
    assert c("ping")["client_status"] == "OK"


def test_segments(spawn, master):
    a = Ctl(spawn, master.addr)
    b = Ctl(spawn, master.addr)
    seg = segment(id="00000000000000aa-00000000000000bb")
    assert a("mount", seg)["status"] == OK
    assert a("mount", seg)["status"] == SEGMENT_ALREADY_EXISTS
    assert a("mount", segment(size=0))["status"] == INVALID_PARAMS
    assert a("mount", segment(name=""))["status"] == INVALID_PARAMS
    assert a("mount", segment(name="x" * 300))["status"] == INVALID_PARAMS  # refused locally
    assert a("unmount", "00000000000000ff-0000000000000000")["status"] == SEGMENT_NOT_FOUND
    assert b("unmount", seg["id"])["status"] == ILLEGAL_CLIENT
    # remount of an already mounted segment leaves it as it is; a new one is mounted
    r = a("remount", [seg, segment(name="127.0.0.1:17002", id="1-2")])
    assert r["status"] == OK
    status, body = master.http("/get_all_segments")
    assert status == 200
    assert sorted(body.decode().splitlines()) == ["127.0.0.1:17001", "127.0.0.1:17002"]
    assert a("unmount", seg["id"])["status"] == OK
    assert a("unmount", seg["id"])["status"] == SEGMENT_NOT_FOUND
    assert a("remount", [])["status"] == OK


def test_put_lifecycle(spawn, master, ctl):
    r = ctl("put_start", "obj", 1000)
    assert r["status"] == OK
    [rep] = r["replicas"]
    assert rep["endpoint"] == "127.0.0.1:17001" and rep["size"] == 1000
    assert rep["status"] == REPLICA_PROCESSING and rep["protocol"] == "tcp"
    assert (1 << 32) <= rep["address"] and rep["address"] + 1000 <= (1 << 32) + (64 << 20)
    assert ctl("get", "obj")["status"] == REPLICA_IS_NOT_READY
    assert ctl("exist", "obj")["exists"] == 0
    assert ctl("put_start", "obj", 1000)["status"] == OBJECT_ALREADY_EXISTS
    other = Ctl(spawn, master.addr)
    assert other("put_end", "obj")["status"] == ILLEGAL_CLIENT
    assert ctl("put_end", "obj")["status"] == OK
    assert ctl("put_end", "obj")["status"] == INVALID_WRITE
    assert ctl("put_revoke", "obj")["status"] == INVALID_WRITE
    g = ctl("get", "obj")
    assert g["status"] == OK and g["lease_ttl_ms"] == LEASE_MS
    assert g["replicas"][0]["status"] == REPLICA_COMPLETE
    assert g["replicas"][0]["address"] == rep["address"]
    assert ctl("exist", "obj")["exists"] == 1
    assert ctl("put_start", "obj", 5)["status"] == OBJECT_ALREADY_EXISTS
    # revoke: the object disappears
    assert ctl("put_start", "gone", 10)["status"] == OK
    assert ctl("put_revoke", "gone")["status"] == OK
    assert ctl("get", "gone")["status"] == OBJECT_NOT_FOUND
    assert ctl("put_revoke", "gone")["status"] == OBJECT_NOT_FOUND
    assert ctl("put_end", "never")["status"] == OBJECT_NOT_FOUND


def test_put_errors(ctl):
    assert ctl("put_start", "", 10)["status"] == INVALID_PARAMS
    assert ctl("put_start", "k" * 4097, 10)["status"] == INVALID_PARAMS
    assert ctl("put_start", "k" * 4096, 10)["status"] == OK
    assert ctl("put_start", "r0", 10, {"replica_num": 0})["status"] == INVALID_PARAMS
    assert ctl("put_start", "big", 1 << 30)["status"] == NO_AVAILABLE_HANDLE
    assert ctl("put_start", "st", 10, {"strategy": "nonsense"})["status"] == INVALID_PARAMS
    assert ctl("get", "")["status"] == INVALID_PARAMS
    assert ctl("exist", "k" * 5000)["status"] == INVALID_PARAMS
    # soft pin ttl with an action other than ENABLE: INVALID_PARAMS (upstream)
    r = ctl("put_start", "sp", 10, {"soft_pin": "disable", "soft_pin_ttl_ms": 1000})
    assert r["status"] == INVALID_PARAMS
    r = ctl("put_start", "sp", 10, {"soft_pin": "enable", "soft_pin_ttl_ms": 1000,
                                    "with_hard_pin": True, "replica_num": 3,
                                    "preferred_segments": ["127.0.0.1:17001"]})
    assert r["status"] == OK and len(r["replicas"]) == 1  # best effort: one segment


def test_binary_keys(ctl, master):
    key = {"hex": "00ff0a2f3a40255c"}  # NUL, 0xff, newline, / : @ % backslash
    assert ctl("put_start", key, 7)["status"] == OK
    assert ctl("put_end", key)["status"] == OK
    assert ctl("get", key)["status"] == OK
    r = ctl("get_regex", "^.")
    assert r["status"] == OK and {"hex": "00ff0a2f3a40255c"} in [m["key"] for m in r["matches"]]
    status, body = master.http("/get_all_keys")
    assert status == 200 and b"\\x00\\xff\\x0a/:@%\\x5c" in body.splitlines()


def test_zero_size_object(ctl):
    assert ctl("put_start", "empty", 0)["status"] == OK
    assert ctl("put_end", "empty")["status"] == OK
    g = ctl("get", "empty")
    assert g["status"] == OK and g["replicas"][0]["size"] == 0


def test_upsert(ctl):
    assert ctl("upsert_start", "u", 100)["status"] == OK
    assert ctl("upsert_end", "u")["status"] == OK
    a1 = ctl("get", "u")["replicas"][0]["address"]
    # leased by that get: the bytes must not change under the reader, so the new value
    # gets new space (issue 10 fault 6, as upstream; was OBJECT_HAS_LEASE)
    r = ctl("upsert_start", "u", 100)
    assert r["status"] == OK and r["replicas"][0]["address"] != a1
    assert ctl("upsert_end", "u")["status"] == OK
    a1 = r["replicas"][0]["address"]
    ctl("sleep", LEASE_MS + 100)
    r = ctl("upsert_start", "u", 100)
    assert r["status"] == OK and r["replicas"][0]["address"] == a1  # same size: in place
    assert ctl("get", "u")["status"] == REPLICA_IS_NOT_READY
    assert ctl("upsert_end", "u")["status"] == OK
    assert ctl("get", "u")["status"] == OK
    ctl("sleep", LEASE_MS + 100)
    assert ctl("upsert_start", "u", 300)["status"] == OK
    assert ctl("upsert_revoke", "u")["status"] == OK
    assert ctl("get", "u")["status"] == OBJECT_NOT_FOUND
    assert ctl("upsert_end", "u")["status"] == OBJECT_NOT_FOUND


def test_batches(spawn, master, ctl):
    r = ctl("batch_put_start", ["a", "b", "a", ""], [1, 2, 3, 4])
    assert [i["status"] for i in r["items"]] == [OK, OK, OBJECT_ALREADY_EXISTS, INVALID_PARAMS]
    assert r["status"] == OBJECT_ALREADY_EXISTS  # the first failing item's code
    assert [len(i["replicas"]) for i in r["items"]] == [1, 1, 0, 0]
    r = ctl("batch_put_end", ["a", "b", "zz"])
    assert r["statuses"] == [OK, OK, OBJECT_NOT_FOUND] and r["status"] == OBJECT_NOT_FOUND
    r = ctl("batch_get", ["a", "zz", "b"])
    assert [i["status"] for i in r["items"]] == [OK, OBJECT_NOT_FOUND, OK]
    assert r["items"][2]["replicas"][0]["size"] == 2
    assert ctl("batch_exist", ["a", "zz", "", "b"])["results"] == [1, 0, INVALID_PARAMS, 1]
    assert ctl("batch_put_start", ["c", "d"], [5, 5])["status"] == OK
    r = ctl("batch_put_revoke", ["c", "a"])
    assert r["statuses"] == [OK, INVALID_WRITE]
    r = ctl("batch_upsert_start", ["d", "e"], [5, 6])
    assert [i["status"] for i in r["items"]] == [OBJECT_ALREADY_EXISTS, OK]
    assert ctl("batch_upsert_end", ["e"])["statuses"] == [OK]
    assert ctl("batch_upsert_revoke", ["d"])["statuses"] == [OK]  # d was in flight
    assert ctl("get", "d")["status"] == OBJECT_NOT_FOUND
    assert ctl("batch_put_start", [], [])["status"] == OK
    ctl("sleep", LEASE_MS + 100)
    r = ctl("batch_remove", ["a", "zz", "e"])
    assert r["statuses"] == [OK, OBJECT_NOT_FOUND, OK]


def test_batch_larger_than_one_request(ctl):
    """2500 keys: the client splits them into pipelined requests of 1024."""
    keys = [f"many/{i:05d}" for i in range(2500)]
    r = ctl("batch_put_start", keys, [64] * len(keys))
    assert r["status"] == OK and len(r["items"]) == 2500
    addrs = {i["replicas"][0]["address"] for i in r["items"]}
    assert len(addrs) == 2500  # distinct allocations
    assert ctl("batch_put_end", keys)["statuses"] == [OK] * 2500
    r = ctl("batch_get", keys[::-1] + ["missing"])
    assert [i["status"] for i in r["items"]] == [OK] * 2500 + [OBJECT_NOT_FOUND]
    assert ctl("batch_exist", keys)["results"] == [1] * 2500
    r = ctl("remove_regex", "^many/", True)
    assert r["status"] == OK and r["count"] == 2500


def test_remove(ctl):
    for k in ("r1", "r2", "x1"):
        assert ctl("put_start", k, 10)["status"] == OK
        assert ctl("put_end", k)["status"] == OK
    assert ctl("put_start", "inflight", 10)["status"] == OK
    assert ctl("get", "r1")["status"] == OK  # lease
    assert ctl("remove", "r1")["status"] == OBJECT_HAS_LEASE
    assert ctl("remove", "r1", True)["status"] == OK
    assert ctl("remove", "r1")["status"] == OBJECT_NOT_FOUND
    assert ctl("remove", "inflight", True)["status"] == REPLICA_IS_NOT_READY
    assert ctl("remove", "")["status"] == INVALID_PARAMS
    assert ctl("remove_regex", "([", True)["status"] == INVALID_PARAMS
    r = ctl("get_regex", "^r")
    assert r["status"] == OK and [m["key"] for m in r["matches"]] == ["r2"]
    assert ctl("remove_regex", "^r")["count"] == 0  # leased by get_regex
    assert ctl("remove_regex", "^r", True)["count"] == 1
    r = ctl("remove_all", True)
    assert r["status"] == OK and r["count"] == 1  # x1; the in-flight put is skipped
    assert ctl("put_end", "inflight")["status"] == OK
    ctl("sleep", LEASE_MS + 100)
    assert ctl("remove_all")["count"] == 1


def test_unmount_drops_replicas(ctl):
    assert ctl("put_start", "on-seg", 10)["status"] == OK
    assert ctl("put_end", "on-seg")["status"] == OK
    assert ctl("unmount", ctl.segment_id)["status"] == OK
    assert ctl("get", "on-seg")["status"] == OBJECT_NOT_FOUND
    assert ctl("put_start", "k", 10)["status"] == NO_AVAILABLE_HANDLE


def test_every_reply_message_carries_the_view():
    # HA (docs/ha.md): the master appends field 15 (its view) to every reply and a client
    # refuses a reply whose view is older than the newest it saw; a reply message without
    # the field would decode as view 0 and be refused by every HA client
    import os
    import re
    proto = open(os.path.join(os.path.dirname(__file__), "..", "..", "proto",
                              "master.proto")).read()
    replies = re.findall(r"^message (\w+Reply) \{(.*?)^\}", proto, flags=re.S | re.M)
    assert len(replies) > 10
    missing = [name for name, body in replies
               if not re.search(r"^\s*int64 view(_version)? = 15;", body, flags=re.M)]
    assert missing == [], missing
