"""A batch read's replica lists asked for in pieces (src/client/read.c, read_chunk and
read_early; issue 17).

A read of at least 64 keys into caller memory or local-buffer handles, whose replicas
the previous read found on the same-host path (shared memory or the client's own
segment), asks the master for its replica lists in requests of 32 keys, pipelined on one
connection, and copies each piece's values while the master answers the next. Over TCP
(MC_FORCE_TCP=1), and for reads into an allocator's buffers, the lists come in one
request as before. What is checked, against a real master and a store node in its own
process: the master's request counter says which way a read went, and either way every
value comes back byte for byte, with per-key codes for missing keys and short buffers
in the middle of a piece.
"""
import ctypes
import signal
import threading
import uuid

from mooncake.store import MooncakeDistributedStore
from store_proc import StoreCluster, StoreProc, value_for

OBJECT_NOT_FOUND, INVALID_PARAMS = -704, -600
PIECE = 32  # keys per pipelined request (read.c PIPE_KEYS)
N = 200  # keys per batch
PIECES = (N + PIECE - 1) // PIECE  # 7 pipelined requests (6 x 32 + 8)
MISSING = len(range(5, N, 17))  # keys never put: every 17th (absent(i))
REQS = "master_batch_get_replica_list_requests_total"


def absent(i):
    return i % 17 == 5


def sizes_for(n):
    return [1000 + (i * 997) % 15000 for i in range(n)]


def setup_case(spawn, env):
    """A master, a node holding every value (its own process), a pure client here;
    N keys with values of 1-16 KB put from the client; every 17th key is never put."""
    c = StoreCluster(spawn)
    node = StoreProc(c.setup_args(segment=32 << 20), env=env)
    s = MooncakeDistributedStore()
    assert s.setup(*c.setup_args(segment=0)) == 0
    keys, sizes = put_keys(s, "pipe")
    return c, node, s, keys, sizes


def put_keys(s, prefix):
    """N keys with values of 1-16 KB put through s; every 17th key is never put."""
    tag = uuid.uuid4().hex[:8]
    keys = [f"{prefix}-{tag}-{i}" for i in range(N)]
    sizes = sizes_for(N)
    for i, k in enumerate(keys):
        if not absent(i):
            assert s.put(k, value_for(k, sizes[i])) == 0
    return keys, sizes


def expected(keys, sizes, caps):
    out = []
    for i, k in enumerate(keys):
        if absent(i):
            out.append(OBJECT_NOT_FOUND)
        elif caps[i] < sizes[i]:
            out.append(INVALID_PARAMS)
        else:
            out.append(sizes[i])
    return out


def read_into(c, s, keys, sizes, caps):
    """batch_get_into of every key into its own slot of one registered buffer; returns
    (codes, bytes read per key, master requests it took)."""
    slot = 16384
    buf = (ctypes.c_char * (slot * len(keys)))()
    base = ctypes.addressof(buf)
    assert s.register_buffer(base, slot * len(keys)) == 0
    try:
        before = c.master.metrics()[REQS]
        rcs = s.batch_get_into(keys, [base + i * slot for i in range(len(keys))], caps)
        took = c.master.metrics()[REQS] - before
        got = [ctypes.string_at(base + i * slot, r) if r > 0 else b""
               for i, r in enumerate(rcs)]
    finally:
        assert s.unregister_buffer(base) == 0
    return rcs, got, took


def check_bytes(keys, sizes, rcs, got):
    for i, k in enumerate(keys):
        if rcs[i] > 0:
            assert got[i] == value_for(k, sizes[i]), f"key {i}: wrong bytes"


def test_same_host_batch_read_is_pipelined_and_exact(spawn, monkeypatch):
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    c, node, s, keys, sizes = setup_case(spawn, None)
    try:
        caps = [16384] * N
        caps[40] = sizes[40] - 1  # a short buffer inside the second piece
        want = expected(keys, sizes, caps)
        # the first read learns the path (no read before it): one request
        rcs, got, took = read_into(c, s, keys, sizes, caps)
        assert rcs == want
        check_bytes(keys, sizes, rcs, got)
        assert took == 1
        # now pipelined: one request per piece, the same results
        for _ in range(3):
            rcs, got, took = read_into(c, s, keys, sizes, caps)
            assert rcs == want
            check_bytes(keys, sizes, rcs, got)
            assert took == PIECES
        # under 2 pieces: one request
        rcs, got, took = read_into(c, s, keys[:2 * PIECE - 1], sizes, caps[:2 * PIECE - 1])
        assert rcs == want[:2 * PIECE - 1]
        assert took == 1
        # local-buffer handles are pipelined too; allocator reads (get_batch) are not
        before = c.master.metrics()[REQS]
        bufs = s.batch_get_buffer(keys)
        assert c.master.metrics()[REQS] - before == PIECES
        for i, k in enumerate(keys):
            if want[i] == OBJECT_NOT_FOUND:
                assert bufs[i] is None
            else:
                assert bytes(memoryview(bufs[i])) == value_for(k, sizes[i])
        del bufs
        before = c.master.metrics()[REQS]
        vals = s.get_batch(keys)
        assert c.master.metrics()[REQS] - before == 1
        assert [v == value_for(k, sizes[i]) for i, (k, v) in enumerate(zip(keys, vals))
                if not absent(i)] == [True] * (N - MISSING)
    finally:
        s.close()
        node.close()


def test_tcp_batch_read_is_one_request_and_exact(spawn, monkeypatch):
    monkeypatch.setenv("MC_FORCE_TCP", "1")
    c, node, s, keys, sizes = setup_case(spawn, {"MC_FORCE_TCP": "1"})
    try:
        caps = [16384] * N
        want = expected(keys, sizes, caps)
        missing = [f"{k}-never-put" for k in keys]
        for miss in (None, missing[:1], missing):
            # reads that move nothing (misses) must not turn pipelining on over TCP
            if miss:
                s.batch_get_buffer(miss) if len(miss) > 1 else s.get(miss[0])
            rcs, got, took = read_into(c, s, keys, sizes, caps)
            assert rcs == want
            check_bytes(keys, sizes, rcs, got)
            assert took == 1
    finally:
        s.close()
        node.close()


def test_own_segment_batch_read_is_pipelined(spawn, monkeypatch):
    """Values in the reader's own segment are copied by the reader too (no engine):
    pipelined after the first read, exact."""
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    c = StoreCluster(spawn)
    s = MooncakeDistributedStore()
    assert s.setup(*c.setup_args(segment=32 << 20)) == 0
    try:
        keys, sizes = put_keys(s, "own")
        caps = [16384] * N
        want = expected(keys, sizes, caps)
        tooks = []
        for _ in range(3):
            rcs, got, took = read_into(c, s, keys, sizes, caps)
            assert rcs == want
            check_bytes(keys, sizes, rcs, got)
            tooks.append(took)
        assert tooks == [1] + [PIECES] * 2
    finally:
        s.close()


def test_master_killed_during_pipelined_reads_gives_codes_not_wrong_bytes(spawn, monkeypatch):
    """SIGKILL of the master while a reader here loops over pipelined batch reads (of a
    node's shared memory): no read returns a length with wrong bytes, before the kill,
    while the master is down (codes) or after its restart (its metadata is gone: codes).
    The kill landing between two pieces of one read is tested deterministically in
    tests/unit/client/test_store_client.c (test_pipelined_read_master_killed)."""
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    monkeypatch.setenv("MC_RPC_TIMEOUT_MS", "2000")
    c, node, s, keys, sizes = setup_case(spawn, None)
    caps = [16384] * N
    state = {"reads": 0, "ok": 0, "coded": 0, "wrong": [], "stop": False, "error": None}
    cv = threading.Condition()

    def reader():
        slot = 16384
        buf = (ctypes.c_char * (slot * N))()
        base = ctypes.addressof(buf)
        assert s.register_buffer(base, slot * N) == 0
        try:
            while not state["stop"]:
                ctypes.memset(base, 0, slot * N)
                rcs = s.batch_get_into(keys, [base + i * slot for i in range(N)], caps)
                ok = coded = 0
                wrong = []
                for i, r in enumerate(rcs):
                    if r > 0:
                        if r != sizes[i] or ctypes.string_at(base + i * slot, r) != \
                                value_for(keys[i], sizes[i]):
                            wrong.append(i)
                        else:
                            ok += 1
                    else:
                        coded += 1
                        assert r < 0
                with cv:  # one read's counts at once: the main thread sees whole reads
                    state["ok"] += ok
                    state["coded"] += coded
                    state["wrong"] += wrong
                    state["reads"] += 1
                    cv.notify_all()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            state["error"] = repr(e)
            with cv:
                cv.notify_all()
        finally:
            s.unregister_buffer(base)

    def reads_reach(n, timeout):
        with cv:
            return cv.wait_for(lambda: state["reads"] >= n or state["error"], timeout)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert reads_reach(5, 30)
        with cv:
            assert state["coded"] == state["reads"] * MISSING and not state["wrong"]
        c.master.stop(signal.SIGKILL)
        killed_at = state["reads"]
        assert reads_reach(killed_at + 3, 60)
        c.master.start()
        assert reads_reach(state["reads"] + 3, 60)
    finally:
        state["stop"] = True
        t.join(timeout=60)
        s.close()
        node.close()
    assert state["error"] is None, state["error"]
    assert not t.is_alive()
    assert state["wrong"] == []
    assert state["ok"] >= 5 * (N - MISSING)
