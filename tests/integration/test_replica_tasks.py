"""Replica copy / move tasks (issue 13 item 3; upstream create_copy_task /
create_move_task / query_task, the task manager's states and the -1400 codes,
upstream-mooncake.md §1.4): a real master and store nodes in their own processes.

The executor of a task is the client owning the target segment (src/master/tasks.c):
it pulls the bytes from a source replica into the space the master reserved in its own
segment, and the replica is added to the object only then. Checked here through
get_replica_desc (the new segment appears; after a move the old one is gone) and by
reading the bytes back from the new replica (the target node reads its own replica
first; after a move it is the only one). A task whose executor dies ends FAILED with a
message once the master expires that client.
"""
import os
import signal
import uuid

import pytest

from conftest import _Spawner, wait_until
from mc_master import INVALID_PARAMS, OBJECT_NOT_FOUND, OK, SEGMENT_NOT_FOUND
from mooncake.store import MooncakeDistributedStore, QueryTaskResponse, TaskStatus, TaskType
from store_proc import StoreCluster, StoreProc, value_for

SIZE = 256 << 10
TASK_NOT_FOUND = -1400
REPLICA_ALREADY_EXISTS = -711


def K(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cluster():
    sp = _Spawner()
    c = StoreCluster(sp, "--client_ttl=4", "--default_kv_lease_ttl=500")
    nodes = []
    reader = MooncakeDistributedStore()
    try:
        nodes = [StoreProc(c.setup_args(segment=32 << 20)) for _ in range(2)]
        assert [n.setup_rc for n in nodes] == [0, 0]
        assert reader.setup(*c.setup_args(segment=0)) == 0
        yield c, nodes, reader
    finally:
        reader.close()
        for n in nodes:
            n.close()
        sp.cleanup()


def endpoints(store, key):
    return sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for r in store.get_replica_desc(key))


def finished(store, tid, timeout=30):
    """Waits until the task is SUCCESS or FAILED; returns its QueryTaskResponse, having
    checked that the states seen on the way only moved forward."""
    seen = []

    def done():
        resp, rc = store.query_task(tid)
        assert rc == OK, rc
        if not seen or seen[-1] != resp.status:
            seen.append(resp.status)
        return resp if resp.status in (TaskStatus.SUCCESS, TaskStatus.FAILED) else None

    resp = wait_until(done, timeout=timeout, what=f"task {tid} to finish")
    assert seen == sorted(seen), seen  # PENDING -> PROCESSING -> SUCCESS/FAILED
    return resp


def test_copy_adds_a_replica(cluster):
    _, (a, b), reader = cluster
    k = K("copy")
    assert a.fn("put_values", [k], SIZE, preferred=a.hostname) == [0]
    assert endpoints(reader, k) == [a.hostname]

    tid, rc = reader.create_copy_task(k, [b.hostname])
    assert rc == OK
    assert isinstance(tid, tuple) and len(tid) == 2 and tid != (0, 0)
    resp = finished(reader, tid)
    assert isinstance(resp, QueryTaskResponse)
    assert resp.status == TaskStatus.SUCCESS, resp.message
    assert resp.type == TaskType.REPLICA_COPY
    assert resp.id == tid and resp.message == ""
    assert resp.assigned_client != (0, 0)
    assert 0 < resp.created_at_ms_epoch <= resp.last_updated_at_ms_epoch

    assert endpoints(reader, k) == sorted([a.hostname, b.hostname])
    assert all(int(r.status) == 3 for r in reader.get_replica_desc(k))  # COMPLETE
    # B reads its own (the new) replica first: the bytes arrived there
    assert b.fn("check_values", [k], SIZE) == ["ok"]
    assert reader.get(k) == value_for(k, SIZE)
    # a second copy to the same segment: it holds one already
    assert reader.create_copy_task(k, [b.hostname]) == ((0, 0), REPLICA_ALREADY_EXISTS)


def test_move_relocates_the_replica(cluster):
    _, (a, b), reader = cluster
    k = K("move")
    assert a.fn("put_values", [k], SIZE, preferred=a.hostname) == [0]
    tid, rc = a.call("create_move_task", k, a.hostname, b.hostname)
    assert rc == OK
    resp = finished(reader, tuple(tid))
    assert resp.status == TaskStatus.SUCCESS, resp.message
    assert resp.type == TaskType.REPLICA_MOVE
    assert endpoints(reader, k) == [b.hostname]  # the old segment is gone
    assert reader.get(k) == value_for(k, SIZE)  # read from the only replica, on B
    assert a.fn("check_values", [k], SIZE) == ["ok"]
    # and back again, with a reader's lease active on the source while it moves
    assert reader.get(k) == value_for(k, SIZE)
    tid, rc = reader.create_move_task(k, b.hostname, a.hostname)
    assert rc == OK
    assert finished(reader, tid).status == TaskStatus.SUCCESS
    assert endpoints(reader, k) == [a.hostname]
    assert b.fn("check_values", [k], SIZE) == ["ok"]


def test_bad_arguments(cluster):
    _, (a, b), reader = cluster
    k = K("bad")
    assert a.fn("put_values", [k], SIZE, preferred=a.hostname) == [0]
    none = ((0, 0), OBJECT_NOT_FOUND)
    assert reader.create_copy_task(K("absent"), [b.hostname]) == none
    assert reader.create_move_task(K("absent"), a.hostname, b.hostname) == none
    assert reader.create_copy_task(k, ["127.0.0.1:1"]) == ((0, 0), SEGMENT_NOT_FOUND)
    assert reader.create_move_task(k, a.hostname, "127.0.0.1:1") == ((0, 0), SEGMENT_NOT_FOUND)
    assert reader.create_move_task(k, "127.0.0.1:1", b.hostname) == ((0, 0), SEGMENT_NOT_FOUND)
    assert reader.create_move_task(k, a.hostname, a.hostname) == ((0, 0), INVALID_PARAMS)
    assert reader.create_copy_task(k, []) == ((0, 0), INVALID_PARAMS)
    assert reader.create_copy_task(k, [b.hostname, b.hostname]) == ((0, 0), INVALID_PARAMS)
    assert reader.query_task((12345, 678)) == (None, TASK_NOT_FOUND)
    with pytest.raises(TypeError):
        reader.query_task("not a uuid")
    with pytest.raises(TypeError):
        reader.create_copy_task(k, b.hostname)  # targets is a list
    assert endpoints(reader, k) == [a.hostname]  # nothing changed
    # a store never set up answers with its code, as upstream
    fresh = MooncakeDistributedStore()
    tid, rc = fresh.create_copy_task(k, [b.hostname])
    assert tid == (0, 0) and rc != OK
    assert fresh.query_task((1, 2))[0] is None


def test_executor_death_fails_the_task(cluster):
    c, (a, _), reader = cluster
    slow = StoreProc(c.setup_args(segment=32 << 20))
    try:
        assert slow.setup_rc == 0
        k = K("orphan")
        assert a.fn("put_values", [k], SIZE, preferred=a.hostname) == [0]
        # the executor hangs (then dies): its segment is still mounted until the master
        # expires it (client_ttl), so the task is created and waits for it
        os.kill(slow.proc.pid, signal.SIGSTOP)
        tid, rc = reader.create_copy_task(k, [slow.hostname])
        assert rc == OK
        resp, rc = reader.query_task(tid)
        assert rc == OK and resp.status == TaskStatus.PENDING
        slow.kill()
        resp = finished(reader, tid, timeout=60)  # after client_ttl the segment goes
        assert resp.status == TaskStatus.FAILED
        assert "unmounted" in resp.message, resp.message
        assert endpoints(reader, k) == [a.hostname]
        assert reader.get(k) == value_for(k, SIZE)
    finally:
        slow.kill()


def test_master_task_flags():
    """The task-manager flags upstream has: the limits and timeouts act; a retry count
    other than the default is refused (failed tasks are not retried here)."""
    import subprocess

    from conftest import free_port, tool

    r = subprocess.run([tool("mooncake_master"), "--rpc_address=127.0.0.1",
                        f"--rpc_port={free_port()}", "--max_retry_attempts=3"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "does not retry" in r.stderr, r.stderr

    sp = _Spawner()
    c = StoreCluster(sp, "--max_total_pending_tasks=1", "--pending_task_timeout_sec=1")
    a = slow = None
    reader = MooncakeDistributedStore()
    try:
        assert reader.setup(*c.setup_args(segment=0)) == 0
        a = StoreProc(c.setup_args(segment=32 << 20))
        slow = StoreProc(c.setup_args(segment=32 << 20))
        assert (a.setup_rc, slow.setup_rc) == (0, 0)
        k = K("limits")
        assert a.fn("put_values", [k], SIZE, preferred=a.hostname) == [0]
        # a stopped executor (the master expires it only after the default client_ttl,
        # 10 s): its task stays PENDING until the pending timeout
        os.kill(slow.proc.pid, signal.SIGSTOP)
        tid, rc = a.call("create_copy_task", k, [slow.hostname])
        assert rc == OK
        TASK_PENDING_LIMIT_EXCEEDED = -1401
        assert a.call("create_copy_task", k, [slow.hostname]) == ((0, 0),
                                                                 TASK_PENDING_LIMIT_EXCEEDED)
        resp = finished(reader, tuple(tid))  # the pending timeout
        assert resp.status == TaskStatus.FAILED
        assert "not fetched" in resp.message, resp.message
        # the limit counts unfinished tasks only; the executor back, it runs the new one
        tid2, rc = a.call("create_copy_task", k, [slow.hostname])
        assert rc == OK
        os.kill(slow.proc.pid, signal.SIGCONT)
        assert finished(reader, tuple(tid2)).status == TaskStatus.SUCCESS
        assert endpoints(reader, k) == sorted([a.hostname, slow.hostname])
    finally:
        if slow and slow.proc.is_alive():
            os.kill(slow.proc.pid, signal.SIGCONT)
        reader.close()
        for p in (a, slow):
            if p:
                p.close()
        sp.cleanup()
