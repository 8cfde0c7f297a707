"""Segment management on a real client (issue 13 item 2; upstream RealClient
mount_segment / unmount_segment / allocate_and_mount_segment / unmount_and_free_segment and
the master's GracefulUnmountSegment, upstream-mooncake.md §1.4): against a real master, a
store that contributes no global segment mounts extra segments and the master places
replicas in them; a graceful unmount keeps the objects readable but takes no new
allocation until the grace period ends, then the objects are gone.

Shapes (upstream): the mounts return {"ret": int, "segment_ids": [str]} (the allocating one
adds "allocated_size"); the unmounts an int.
"""
import os
import uuid

import pytest

from conftest import _Spawner, wait_until
from mooncake.store import MooncakeDistributedStore
from store_proc import StoreCluster

SEG = 8 << 20
NO_AVAILABLE_HANDLE = -200
SEGMENT_NOT_FOUND = -101
INVALID_PARAMS = -600


@pytest.fixture
def store():
    sp = _Spawner()
    c = StoreCluster(sp)
    s = MooncakeDistributedStore()
    assert s.setup(*c.setup_args(segment=0, local_buffer=16 << 20)) == 0
    try:
        yield s
    finally:
        s.close()
        sp.cleanup()


@pytest.fixture
def shm_file():
    path = f"/dev/shm/mc-test-seg-{uuid.uuid4().hex[:12]}"
    with open(path, "wb") as f:
        f.truncate(SEG + 4096)
    try:
        yield path
    finally:
        os.unlink(path)


def where(store, key):
    return [r.get_memory_descriptor().buffer_descriptor.transport_endpoint
            for r in store.get_replica_desc(key)]


def test_allocate_mount_put_get_unmount(store):
    # no segment anywhere yet: a put has no space
    assert store.put("k0", b"x" * 1000) == NO_AVAILABLE_HANDLE
    r = store.allocate_and_mount_segment(SEG)
    assert set(r) == {"ret", "segment_ids", "allocated_size"}
    assert r["ret"] == 0 and r["allocated_size"] == SEG and len(r["segment_ids"]) == 1
    assert isinstance(r["segment_ids"][0], str)
    value = os.urandom(100_000)
    assert store.put("k1", value) == 0
    assert where(store, "k1") == [store.get_hostname()]
    assert store.get("k1") == value
    assert store.unmount_and_free_segment(r["segment_ids"]) == 0
    # unmounted at once: its replicas are gone and there is no space again
    assert store.get("k1") == b""
    assert store.put("k2", b"y" * 1000) == NO_AVAILABLE_HANDLE
    # a second unmount of the same id, or an unknown one
    assert store.unmount_and_free_segment(r["segment_ids"]) == SEGMENT_NOT_FOUND
    assert store.unmount_segment(["0123456789abcdef-0123456789abcdef"]) == SEGMENT_NOT_FOUND
    assert store.unmount_segment(["not-an-id"]) == INVALID_PARAMS


def test_mount_file_and_graceful_unmount(store, shm_file):
    r = store.mount_segment(shm_file, SEG, 4096, "tcp", "")
    assert set(r) == {"ret", "segment_ids"} and r["ret"] == 0 and len(r["segment_ids"]) == 1
    value = os.urandom(64 << 10)
    assert store.put("g1", value) == 0
    assert where(store, "g1") == [store.get_hostname()]
    assert store.get("g1") == value
    # the bytes live in the file: the mapping is MAP_SHARED over [4096, 4096 + SEG)
    with open(shm_file, "rb") as f:
        assert value in f.read()
    assert store.unmount_segment(r["segment_ids"], grace_period_seconds=2) == 0
    # during the grace period: still readable, but no new allocation there
    assert store.get("g1") == value
    assert store.is_exist("g1") == 1
    assert store.put("g2", b"z" * 1000) == NO_AVAILABLE_HANDLE
    # after it, the master dropped the segment and its objects
    wait_until(lambda: store.is_exist("g1") == 0, timeout=20, what="g1 gone after the grace")
    assert store.get("g1") == b""


def test_mount_refusals(store, shm_file):
    def ret(r):
        return r["ret"], r["segment_ids"]
    assert ret(store.mount_segment("/nonexistent/file", SEG)) == (INVALID_PARAMS, [])
    assert ret(store.mount_segment(shm_file, SEG, 1)) == (INVALID_PARAMS, [])   # unaligned
    assert ret(store.mount_segment(shm_file, 2 * SEG)) == (INVALID_PARAMS, [])  # too short
    assert ret(store.mount_segment(shm_file, SEG, 0, "rdma")) == (INVALID_PARAMS, [])
    assert ret(store.allocate_and_mount_segment(10)) == (INVALID_PARAMS, [])
    with pytest.raises(TypeError):
        store.unmount_segment([1, 2])
    fresh = MooncakeDistributedStore()
    assert fresh.mount_segment(shm_file, SEG)["ret"] == INVALID_PARAMS
    assert fresh.unmount_segment(["0123456789abcdef-0123456789abcdef"]) == INVALID_PARAMS


def test_close_releases_extra_segments(store):
    ids = [store.allocate_and_mount_segment(SEG)["segment_ids"][0] for _ in range(2)]
    assert len(set(ids)) == 2
    assert store.put("c1", b"q" * 5000) == 0
    assert store.close() == 0
    assert store.get("c1") == b""


def test_extra_segment_remounted_after_master_restart():
    """The heartbeat's remount after NEED_REMOUNT covers the extra segments too: after a
    master restart (which forgets every segment) puts land in the mounted one again."""
    sp = _Spawner()
    c = StoreCluster(sp)
    s = MooncakeDistributedStore()
    try:
        assert s.setup(*c.setup_args(segment=0, local_buffer=16 << 20)) == 0
        assert s.allocate_and_mount_segment(SEG)["ret"] == 0
        assert s.put("r1", b"a" * 1000) == 0
        c.restart()
        # the only segment anywhere is the remounted extra one
        wait_until(lambda: s.put("r2", b"b" * 1000) == 0, timeout=30,
                   what="put after the remount")
        assert where(s, "r2") == [s.get_hostname()]
        assert s.get("r2") == b"b" * 1000
    finally:
        s.close()
        sp.cleanup()


def test_mount_refuses_a_range_already_mounted(store, shm_file):
    """The same bytes of one file mounted twice (found by a new user) made two segments
    over one memory: the master placed objects in both and they overwrote each other
    (31 of 100 gets returned another object's bytes). An overlapping range of the same
    file (by device and inode: another path to it counts) is refused; a disjoint range
    of it, or the same range after an unmount, is fine."""
    half = SEG // 2
    r = store.mount_segment(shm_file, half, 0)
    assert r["ret"] == 0
    assert store.mount_segment(shm_file, half, 0) == {"ret": INVALID_PARAMS, "segment_ids": []}
    assert store.mount_segment(shm_file, half, 4096)["ret"] == INVALID_PARAMS   # overlaps
    link = shm_file + "-link"
    os.symlink(shm_file, link)
    try:
        assert store.mount_segment(link, half, 0)["ret"] == INVALID_PARAMS       # same inode
    finally:
        os.unlink(link)
    r2 = store.mount_segment(shm_file, half, half)                               # disjoint
    assert r2["ret"] == 0
    values = {f"al{i}": bytes([i]) * (64 << 10) for i in range(100)}
    for k, v in values.items():
        assert store.put(k, v) in (0, NO_AVAILABLE_HANDLE)
    for k, v in values.items():
        got = store.get(k)
        assert got in (b"", v), f"{k}: another object's bytes"
    assert store.unmount_segment(r["segment_ids"]) == 0
    assert store.mount_segment(shm_file, half, 0)["ret"] == 0
