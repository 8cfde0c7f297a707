"""mooncake_trace_replay: reference hit rates, the synthetic trace, and real replays.

The Redis-backend tests start real redis-server processes on 127.0.0.1; the store-backend
tests start a real mooncake_master and store nodes (skipped, with the reason, only where
the package was installed without them). Traces are read from
../shared/traces (never copied into the repository); tests that need the real trace are
skipped only when that folder is absent. Every replay is a subprocess with a timeout.
"""
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import BIN_DIR, SHARED, free_port, wait_port, wait_until

from mooncake.trace_replay.blocks import BlockCodec
from mooncake.trace_replay.sim import simulate_ideal, simulate_lru
from mooncake.trace_replay.trace import Request, synthetic_trace

TRACE = os.path.join(SHARED, "traces", "conversation_trace.jsonl")
need_trace = pytest.mark.skipif(not os.path.exists(TRACE),
                                reason=f"real trace not available at {TRACE}")


def _store_missing_reason():
    master = os.path.join(BIN_DIR, "mooncake_master")
    if not os.path.exists(master):
        return f"mooncake_master is not installed in {BIN_DIR} (a build without it)"
    import mooncake.store as ms
    if not hasattr(ms, "MooncakeDistributedStore"):
        return "mooncake.store has no MooncakeDistributedStore (a build without the store client)"
    return None


STORE_MISSING = _store_missing_reason()
need_store = pytest.mark.skipif(STORE_MISSING is not None, reason=str(STORE_MISSING))


def _req(ids, tokens=None):
    return Request(0, tokens if tokens is not None else 512 * len(ids), 1, list(ids))


def replay(args, out, timeout=120):
    """Runs the tool; returns (exit status, replay.json as dict or None, stdout, stderr)."""
    cmd = [sys.executable, "-m", "mooncake.trace_replay", "--no-progress", "--out", str(out),
           *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(out))
    path = os.path.join(out, "replay.json")
    doc = json.load(open(path)) if os.path.exists(path) else None
    return r.returncode, doc, r.stdout, r.stderr


# ------------------------------------------------------------------ references (no I/O)

def test_ideal_and_lru_on_a_hand_made_trace():
    reqs = [_req([1, 2, 3], 1500), _req([1, 2, 4], 1100), _req([1, 2, 3], 1500),
            _req([5, 6, 7], 1536), _req([1, 2], 1000)]
    ideal = simulate_ideal(reqs)
    assert (ideal.blocks, ideal.block_hits) == (14, 7)
    assert (ideal.tokens, ideal.token_hits) == (6636, 1024 + 1500 + 1000)
    per = []
    lru = simulate_lru(reqs, 3, per)
    # r2 hits 1,2 and evicts 3; r3 hits 1,2 and evicts 4; r4 evicts all; r5 misses
    assert per == [0, 2, 2, 0, 0]
    assert (lru.block_hits, lru.token_hits, lru.evictions) == (4, 2048, 7)
    assert simulate_lru(reqs, 0).block_hits == 0
    assert simulate_lru(reqs, 1000).block_hits == ideal.block_hits


def test_lru_prefix_semantics_with_a_gap():
    # blocks present beyond a missing first block are neither read nor rewritten, so
    # inserting block 1 evicts block 2 (the least recently used), and the next request
    # hits only block 1.
    per = []
    simulate_lru([_req([1, 2, 3]), _req([9]), _req([1, 2, 3]), _req([1, 2, 3])], 3, per)
    assert per == [0, 0, 0, 1]


def test_synthetic_trace_has_the_shape_of_a_conversation_trace():
    reqs = synthetic_trace(600, seed=3)
    assert len(reqs) == 600
    assert reqs == synthetic_trace(600, seed=3)
    assert reqs != synthetic_trace(600, seed=4)
    ts = [r.timestamp_ms for r in reqs]
    assert ts == sorted(ts) and all(isinstance(t, int) for t in ts)
    assert all(len(r.hash_ids) == math.ceil(r.input_length / 512) for r in reqs)
    ids = sorted({h for r in reqs for h in r.hash_ids})
    assert ids == list(range(len(ids)))          # dense ids, as in the real traces
    # prefix sharing: most requests start with a block seen before
    seen, shared = set(), 0
    for r in reqs:
        shared += r.hash_ids[0] in seen
        seen.update(r.hash_ids)
    assert shared > 0.8 * len(reqs)
    # multi-turn growth: many requests extend an earlier request's full-block prefix
    prefixes, grown = set(), 0
    for r in reqs:
        for k in range(len(r.hash_ids) - 1, 4, -1):
            if tuple(r.hash_ids[:k]) in prefixes:
                grown += 1
                break
        prefixes.add(tuple(r.hash_ids[:r.input_length // 512]))
    assert grown > 0.3 * len(reqs)
    assert 0.2 < simulate_ideal(reqs).block_hit_rate < 0.95


@pytest.mark.parametrize("with_memcmp", [True, False])
def test_block_check_judges_each_block_across_chunks(monkeypatch, with_memcmp):
    """The numpy codec (where the C loops are not built) verifies a few blocks at a time
    (memcmp, or numpy where ctypes is missing): one wrong byte in the second chunk fails
    exactly its block; the seed table grows for a larger id and gives the same blocks as
    before."""
    import numpy as np
    from mooncake.trace_replay import blocks
    if not with_memcmp:
        monkeypatch.setattr(blocks, "_memcmp", None)
    codec = BlockCodec(4096)
    codec.use_c = False
    monkeypatch.setattr(codec, "VERIFY_CHUNK_BYTES", 2 * 4096)
    ids = [3, 4, 5, 6, 7, 1 << 20]
    rows = np.empty((len(ids), 512), dtype=np.uint64)
    scratch = np.empty_like(rows[:2])
    codec.fill(rows, ids)
    assert codec.verify(rows, ids, scratch).tolist() == [True] * len(ids)
    with np.errstate(over="ignore"):                     # the table holds splitmix64's
        direct = codec.base ^ blocks.splitmix64(np.asarray([1 << 20], np.uint64) ^ blocks._SALT)
    assert (rows[5] == direct).all()
    rows.view(np.uint8)[3, 4000] ^= 1
    assert codec.verify(rows, ids, scratch).tolist() == [True, True, True, False, True, True]
    with pytest.raises(ValueError):
        codec.verify(rows[:, :256], ids, scratch)


@pytest.mark.parametrize("use_c", [True, False])
def test_block_contents_catch_wrong_key_flipped_byte_and_shift(use_c):
    import numpy as np
    codec = BlockCodec(4096)
    codec.use_c = use_c
    rows = np.empty((4, 512), dtype=np.uint64)
    scratch = np.empty_like(rows)
    codec.fill(rows, [7, 8, 9, 10])
    assert codec.verify(rows, [7, 8, 9, 10], scratch).all()
    assert not codec.verify(rows, [8, 8, 9, 10], scratch)[0]        # wrong key
    raw = rows.view(np.uint8)
    for pos in (0, 1, 7, 2049, 4095):
        raw[1, pos] ^= 0x10
        assert not codec.verify(rows, [7, 8, 9, 10], scratch)[1]
        raw[1, pos] ^= 0x10
    rows[2] = np.roll(rows[2], 1)                                     # shifted by 8 bytes
    assert codec.verify(rows, [7, 8, 9, 10], scratch).tolist() == [True, True, False, True]
    a = np.frombuffer(codec.block(5), np.uint8)
    b = np.frombuffer(codec.block(6), np.uint8)
    assert len(a) == 4096 and (a != b).mean() > 0.9


@pytest.mark.parametrize("block_bytes", [8, 56, 64, 104, 128, 200, 4096, 65536])
def test_c_codec_writes_and_judges_what_the_numpy_codec_does(block_bytes):
    """The C loops (mooncake.trace_replay._codec, built with the package) write the same
    bytes as the numpy codec and judge the same blocks good: sizes below, at and past
    the 16-word step (a tail of words), one wrong byte anywhere in any block (the first,
    the last, tail words), ids near 2**64; refused arguments write nothing."""
    import numpy as np
    from mooncake.trace_replay import _codec, blocks
    c, py = BlockCodec(block_bytes), BlockCodec(block_bytes)
    py.use_c = False
    ids = [0, 1, 5, 182789, (1 << 22) + 3, (1 << 64) - 1]
    rows_c = np.zeros((len(ids) + 1, c.words), dtype=np.uint64)
    rows_py = np.zeros_like(rows_c)
    c.fill(rows_c, ids)
    py.fill(rows_py, ids)
    assert rows_c.tobytes() == rows_py.tobytes() and not rows_c[-1].any()
    scratch = np.empty_like(rows_py)
    assert c.verify(rows_c, ids, scratch).tolist() == [True] * len(ids)
    raw = rows_c.view(np.uint8)
    rng = np.random.default_rng(block_bytes)
    for j in range(len(ids)):
        for pos in {0, block_bytes - 1, block_bytes - 8, int(rng.integers(block_bytes))}:
            raw[j, pos] ^= 1 << int(rng.integers(8))
            want = py.verify(rows_c, ids, scratch).tolist()
            assert want == [k != j for k in range(len(ids))]
            assert c.verify(rows_c, ids, scratch).tolist() == want
            raw[j, pos] = rows_py.view(np.uint8)[j, pos]
    assert not c.verify(rows_c, [1, 1, 5, 182789, (1 << 22) + 3, (1 << 64) - 1],
                        scratch)[0]                                   # another id's block
    assert _codec.splitmix64(7 ^ blocks._SALT_INT) == int(py.seeds([7])[0])
    # the C loops are what ran above (not the numpy code twice)
    assert c.path == "c" and c._rows("test", rows_c, len(ids)) and py.path == "numpy"
    assert _codec.verify(rows_c, c.base, ids, blocks._SALT_INT) == bytes([1] * len(ids))
    before = rows_c.tobytes()
    for bad, err in (((rows_c[:2], c.base, ids, 0), ValueError),        # rows too short
                     ((rows_c, c.base[:0], ids, 0), ValueError),        # empty base
                     ((rows_c, bytes(12), ids, 0), ValueError),         # not whole words
                     ((rows_c, c.base, [1, -1], 0), ValueError),        # negative id
                     ((rows_c, c.base, [1, 2.5], 0), TypeError),
                     ((rows_c, c.base, ids, -1), ValueError),           # salt
                     ((rows_c[::2], c.base, ids, 0), TypeError),        # strided rows
                     ((bytes(rows_c.nbytes), c.base, ids, 0), TypeError)):  # read-only
        for fn in (_codec.fill, _codec.verify, _codec.poison):
            if fn is _codec.verify and isinstance(bad[0], bytes):
                continue                                        # verify only reads rows
            with pytest.raises(err):
                fn(*bad)
    assert rows_c.tobytes() == before
    with pytest.raises(ValueError):                     # the numpy code judges bytes too
        py.fill(rows_c.view(np.float64), ids)


def test_c_codec_keeps_its_own_ids_and_lets_other_errors_through():
    """The ids are copied before they are read: an id whose __index__ empties the list
    cannot make the loop read freed memory; an error of __index__ other than TypeError
    is not relabelled."""
    import numpy as np
    from mooncake.trace_replay import _codec, blocks
    c = BlockCodec(64)
    ids = []

    class Clears:
        def __index__(self):
            ids.clear()
            return 3
    ids[:] = [Clears()] + list(range(1, 2000))
    want = list(range(1, 2000))
    rows = np.zeros((2000, 8), dtype=np.uint64)
    _codec.fill(rows, c.base, ids, blocks._SALT_INT)
    assert ids == [] and c.verify(rows, [3] + want, np.empty_like(rows)).all()

    class Fails:
        def __index__(self):
            raise RuntimeError("no")
    with pytest.raises(RuntimeError):
        _codec.fill(rows, c.base, [Fails()], blocks._SALT_INT)


@pytest.mark.parametrize("use_c", [True, False])
def test_poison_fails_a_slot_the_read_left_unwritten(use_c):
    """poison() before a read: a slot that still holds the right block fails the check
    unless the read rewrites it; a read that rewrote all but one 4 KiB page fails too;
    both paths poison the same words."""
    import numpy as np
    codec = BlockCodec(3 * 4096 + 8)                       # 3 pages and a word
    codec.use_c = use_c
    ids = [11, 12, 13]
    rows = np.empty((3, codec.words), dtype=np.uint64)
    scratch = np.empty_like(rows)
    codec.fill(rows, ids)
    good = rows.copy()
    codec.poison(rows, ids)
    assert codec.verify(rows, ids, scratch).tolist() == [False] * 3
    other = BlockCodec(codec.block_bytes)
    other.use_c = not use_c
    twin = good.copy()
    other.poison(twin, ids)
    assert twin.tobytes() == rows.tobytes()
    rows[0] = good[0]                                      # rewritten whole
    rows[1, :512] = good[1, :512]                          # pages 0 and 2 only
    rows[1, 1024:] = good[1, 1024:]
    assert codec.verify(rows, ids, scratch).tolist() == [True, False, False]
    codec.poison(rows[:0], [])                             # nothing to do


def _redis_server(spawn) -> int:
    """A redis-server of the test's own on a free 127.0.0.1 port, no persistence; its
    port once it listens."""
    port = free_port()
    spawn(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no"])
    wait_port(port)
    return port


def test_a_read_that_writes_nothing_is_corrupt_not_a_hit(spawn):
    """A backend whose get reports every block whole without writing the slots: the
    blocks its slots still hold from earlier requests of the same conversation would
    pass the byte check; with the slots poisoned before each read none does."""
    from mooncake.trace_replay import backends, replay

    port = _redis_server(spawn)

    class SaysWhole(backends.RedisSession):
        def get_batch_into(self, keys, slots):
            return [self.buffer.block_bytes] * len(keys)

    def run(poison):
        codec = BlockCodec(4096)
        if not poison:
            codec.poison = lambda rows, ids: None
        s = SaysWhole("127.0.0.1", port, 64, 4096)
        try:
            import threading
            st, _, _ = replay.run_replay(synthetic_trace(60, seed=3), [s], codec,
                                         f"p{int(poison)}/", 0, threading.Event())
        finally:
            s.close()
        return st
    stale = run(poison=False)
    assert stale.blocks_read > 0          # stale slots pass the check: what poison is for
    st = run(poison=True)
    assert st.blocks_read == 0 and st.block_hits == 0 and st.corrupt > 0


def test_store_sample_reads_two_series_over_one_kept_connection():
    """StoreBackend.sample() (ten times a second beside the replay) reuses one HTTP
    connection, reads only master_key_count and master_evicted_key_count (not the HELP
    lines, not a longer name), and connects again after the server closed it, with or
    without saying so."""
    import http.server
    import socket
    import threading
    from mooncake.trace_replay import backends

    body = ("# HELP master_key_count keys\nmaster_key_count_total 9\nmaster_key_count 120\n"
            "master_evicted_key_count 7\n").encode()
    conns = []

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            conns.append(self.client_address)
            super().setup()

        def do_GET(self):
            # the flags are read before the reply is written: read after it, the test could
            # already have set drop_next for the next sample, and this connection would
            # close one sample early (seen: 4 connections where the sampler needs 3)
            close_next, drop_next = self.server.close_next, self.server.drop_next
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            if close_next:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)
            if drop_next:                        # kept alive in words, closed in deeds
                self.close_connection = True

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.close_next = srv.drop_next = False
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        b = backends.StoreBackend.__new__(backends.StoreBackend)
        b.metrics_url = f"http://127.0.0.1:{srv.server_port}/metrics"
        b._mconn, b._mlock, b._evicted0 = None, threading.Lock(), 2
        assert [b.sample() for _ in range(3)] == [(120, 5)] * 3 and len(conns) == 1
        srv.close_next = True
        assert b.sample() == (120, 5)
        srv.close_next = False
        assert b.sample() == (120, 5) and len(conns) == 2
        srv.drop_next = True                     # the kept connection dies unannounced:
        assert b.sample() == (120, 5)            # the next sample connects once more
        srv.drop_next = False
        wait_until(lambda: b._mconn.sock is None or b._mconn.sock.recv(1, socket.MSG_PEEK |
                                                                       socket.MSG_DONTWAIT)
                   == b"", 10, "the server closing the kept connection")
        assert b.sample() == (120, 5) and len(conns) == 3
        b.close()
    finally:
        srv.shutdown()
        srv.server_close()


# ------------------------------------------------------------------ redis backend

@need_trace
def test_redis_replay_of_the_first_500_real_requests_matches_lru(tmp_path):
    rc, doc, out, err = replay(["--backend", "redis", "--trace", TRACE, "--max-requests",
                                "500", "--block-bytes", "4KiB", "--nodes", "2",
                                "--segment-size", "64MiB"], tmp_path)
    assert rc == 0, out + err
    r, ref = doc["results"], doc["reference"]
    assert r["requests"] == 500
    assert r["errors"] == 0 and r["corrupt_blocks"] == 0
    assert r["evictions_backend"] == 0
    assert ref["lru"]["evictions"] == 0
    assert r["block_hits"] == ref["lru"]["block_hits"] == ref["ideal"]["block_hits"]
    assert r["token_hit_rate"] == ref["lru"]["token_hit_rate"]
    assert r["block_hits"] > 0 and r["blocks_read"] == r["block_hits"]
    assert r["blocks_written"] == r["blocks"] - r["block_hits"]
    assert doc["meta"]["trace"]["synthetic"] is False
    assert "block hit rate" in out and "LRU" in out
    assert os.path.getsize(tmp_path / "replay.png") > 10000
    assert doc["shm_leftovers"] == []


def test_redis_replay_with_a_small_pool_evicts_and_stays_correct(tmp_path):
    rc, doc, out, err = replay(["--backend", "redis", "--synthetic-requests", "300",
                                "--block-bytes", "4KiB", "--nodes", "1",
                                "--segment-size", "6MiB"], tmp_path)
    assert rc == 0, out + err
    r, ref = doc["results"], doc["reference"]
    assert r["requests"] == 300
    assert r["evictions_backend"] > 0 and ref["lru"]["evictions"] > 0
    assert r["errors"] == 0 and r["corrupt_blocks"] == 0
    assert r["block_hits"] <= ref["ideal"]["block_hits"]
    assert r["block_hits"] < ref["ideal"]["block_hits"]
    assert doc["meta"]["trace"]["synthetic"] is True
    assert "SYNTHETIC" in out


def test_a_corrupted_block_in_the_backend_is_counted(tmp_path, spawn):
    import redis
    port = _redis_server(spawn)
    args = ["--backend", "redis", "--redis-addr", f"127.0.0.1:{port}", "--key-prefix",
            "corrupt/", "--synthetic-requests", "40", "--block-bytes", "4KiB"]
    rc, doc, out, err = replay(args, tmp_path)
    assert rc == 0 and doc["results"]["corrupt_blocks"] == 0, out + err
    first = json.loads(open(tmp_path / "synthetic_trace.jsonl").readline())["hash_ids"]
    r = redis.Redis(host="127.0.0.1", port=port)
    k0, k1 = f"corrupt/{first[0]}", f"corrupt/{first[1]}"
    v = bytearray(r.get(k0))
    v[1234] ^= 0x01                                   # one flipped bit
    r.set(k0, bytes(v))
    r.set(k1, r.get(k1)[:-8])                         # a truncated block
    rc, doc, out, err = replay(args, tmp_path)
    assert rc == 1, out + err
    assert doc["results"]["corrupt_blocks"] >= 2
    assert doc["results"]["errors"] == 0


def _interrupt_and_check(args, tmp_path, expect_labels):
    """Starts a slow replay, waits until it runs, sends SIGINT; checks it exits 130,
    writes its results, and leaves no child process or /dev/shm entry behind."""
    shm_before = set(os.listdir("/dev/shm"))
    errf = open(tmp_path / "stderr.txt", "w+")
    p = subprocess.Popen([sys.executable, "-m", "mooncake.trace_replay", "--no-progress",
                          "--out", str(tmp_path), *args], stdout=subprocess.PIPE,
                         stderr=errf, text=True, cwd=str(tmp_path))
    try:
        def running():
            text = open(tmp_path / "stderr.txt").read()
            assert p.poll() is None, text
            return text if "replay: running" in text else None
        text = wait_until(running, 60, "the replay running", step=0.1)
        pids = [int(x) for x in re.findall(r"pid (\d+)", text)]
        pids += [int(x) for m in re.findall(r"pids ([\d, ]+)", text) for x in m.split(",")]
        assert len(pids) >= expect_labels, text
        for pid in pids:
            os.kill(pid, 0)                        # alive while the replay runs
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, out + open(tmp_path / "stderr.txt").read()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    doc = json.load(open(tmp_path / "replay.json"))
    assert doc["meta"]["interrupted"] is True
    assert "INTERRUPTED" in out
    assert set(os.listdir("/dev/shm")) - shm_before == set()
    return doc


def test_sigint_stops_the_redis_replay_and_leaves_nothing_behind(tmp_path):
    _interrupt_and_check(["--backend", "redis", "--synthetic-requests", "2000",
                          "--time-scale", "1", "--block-bytes", "4KiB",
                          "--segment-size", "16MiB"], tmp_path, 1)


def test_bad_options_exit_2_naming_the_problem(tmp_path):
    rc, _, out, err = replay(["--backend", "redis", "--block-bytes", "1001"], tmp_path, 30)
    assert rc == 2 and "multiple of 8" in err
    rc, _, out, err = replay(["--lease-ttl-ms", "0"], tmp_path, 30)
    assert rc == 2 and "LEASE_EXPIRED" in err
    rc, _, out, err = replay(["--eviction-high-watermark", "1.5"], tmp_path, 30)
    assert rc == 2 and "[0, 1]" in err
    rc, _, out, err = replay(["--backend", "redis", "--trace", str(tmp_path / "nope.jsonl")],
                             tmp_path, 30)
    assert rc == 2 and "nope.jsonl" in err
    (tmp_path / "bad.jsonl").write_text('{"timestamp": 0, "input_length": 5}\n')
    rc, _, out, err = replay(["--backend", "redis", "--trace", str(tmp_path / "bad.jsonl")],
                             tmp_path, 30)
    assert rc == 2 and "bad.jsonl:1" in err and "hash_ids" in err


def test_an_empty_trace_is_an_error_not_a_success(tmp_path):
    # nothing replayed is not "RESULT: OK": exit 2 naming the cause, before any backend
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n  \n\n")
    for name in ("empty.jsonl", "blank.jsonl"):
        rc, doc, out, err = replay(["--backend", "redis", "--trace", str(tmp_path / name)],
                                   tmp_path, 30)
        assert rc == 2 and name in err and "no requests" in err, out + err
        assert "RESULT" not in out and doc is None
    rc, doc, out, err = replay(["--backend", "redis", "--max-requests", "0"], tmp_path, 30)
    assert rc == 2 and "--max-requests 0" in err and "RESULT" not in out
    rc, doc, out, err = replay(["--backend", "redis", "--synthetic-requests", "0"], tmp_path, 30)
    assert rc == 2 and "--synthetic-requests" in err and "RESULT" not in out


def test_default_metrics_url_of_a_master():
    from mooncake.trace_replay.cli import default_metrics_url
    assert default_metrics_url("127.0.0.1:50051") == "http://127.0.0.1:9003/metrics"
    assert default_metrics_url("node7:1234") == "http://node7:9003/metrics"
    assert default_metrics_url("[::1]:50051") == "http://[::1]:9003/metrics"
    assert default_metrics_url("node7") == "http://node7:9003/metrics"


# ------------------------------------------------------------------ store backend

@need_store
@need_trace
def test_store_replay_of_the_first_500_real_requests_on_2_nodes_matches_lru(tmp_path):
    rc, doc, out, err = replay(["--backend", "store", "--trace", TRACE, "--max-requests",
                                "500", "--block-bytes", "4KiB", "--nodes", "2",
                                "--segment-size", "64MiB"], tmp_path, 180)
    assert rc == 0, out + err
    r, ref = doc["results"], doc["reference"]
    assert r["requests"] == 500
    assert r["errors"] == 0 and r["corrupt_blocks"] == 0
    assert ref["lru"]["evictions"] == 0
    assert r["block_hits"] == ref["lru"]["block_hits"] == ref["ideal"]["block_hits"]
    assert doc["shm_leftovers"] == []


@need_store
def test_store_replay_with_a_small_pool_evicts_and_stays_correct(tmp_path):
    # 16 MiB: the smallest segment upstream accepts (its allocator's slab size)
    rc, doc, out, err = replay(["--backend", "store", "--synthetic-requests", "300",
                                "--block-bytes", "16KiB", "--nodes", "1",
                                "--segment-size", "16MiB"], tmp_path, 180)
    assert rc == 0, out + err
    r, ref = doc["results"], doc["reference"]
    assert ref["lru"]["evictions"] > 0
    assert (r["evictions_backend"] or 0) > 0 or r["evictions_observed"] > 0
    assert r["errors"] == 0 and r["corrupt_blocks"] == 0
    assert r["block_hits"] < ref["ideal"]["block_hits"]
    # approximate LRU over 1024 shards, watermark eviction and 200 ms leases stay close to
    # an exact LRU of the same pool (measured here: within 1 point)
    assert abs(r["block_hit_rate"] - ref["lru"]["block_hit_rate"]) < 0.05, out
    occ = doc["occupancy"]
    assert occ["samples_t_keys_evictions"] and 0 < occ["mean_keys_after_eviction_began"] <= 1024
    assert "RESULT: OK" in out and "held" in out


@need_store
def test_store_eviction_watermark_reaches_the_local_master(tmp_path):
    # the tool's --eviction-* flags configure the master it starts: at 99 % / 1 % the
    # pool stays fuller while evicting than the default 90 % / 5 % lets it
    rc, doc, out, err = replay(["--backend", "store", "--synthetic-requests", "300",
                                "--block-bytes", "16KiB", "--nodes", "1",
                                "--segment-size", "16MiB", "--eviction-high-watermark",
                                "0.99", "--eviction-ratio", "0.01"], tmp_path, 180)
    assert rc == 0, out + err
    assert "eviction at 99% frees 1%" in open(tmp_path / "logs" / "master.log").read()
    assert doc["meta"]["master_settings"]["eviction_high_watermark_ratio"] == 0.99
    assert doc["occupancy"]["mean_keys_after_eviction_began"] > 0.95 * 1024
    assert doc["results"]["errors"] == 0 and doc["results"]["corrupt_blocks"] == 0


@need_store
def test_store_corrupted_block_is_counted(tmp_path, spawn):
    from mooncake.store import MooncakeDistributedStore
    rpc, http, metrics = free_port(), free_port(), free_port()
    spawn([os.path.join(BIN_DIR, "mooncake_master"), f"--rpc_port={rpc}",
           "--rpc_address=127.0.0.1", f"--metrics_port={metrics}",
           "--metrics_host=127.0.0.1", "--enable_http_metadata_server=1",
           f"--http_metadata_server_port={http}", "--http_metadata_server_host=127.0.0.1",
           "--default_kv_lease_ttl=200"])
    wait_port(rpc)
    wait_port(http)
    meta = f"http://127.0.0.1:{http}/metadata"
    spawn([sys.executable, "-m", "mooncake.trace_replay.node", "--master", f"127.0.0.1:{rpc}",
           "--metadata", meta, "--segment-size", str(64 << 20),
           "--ready-file", str(tmp_path / "ready")])
    wait_until((tmp_path / "ready").exists, 30, "store node ready", step=0.1)
    args = ["--backend", "store", "--master", f"127.0.0.1:{rpc}", "--metadata", meta,
            "--metrics-url", f"http://127.0.0.1:{metrics}/metrics",
            "--key-prefix", "corrupt/", "--synthetic-requests", "40", "--block-bytes", "4KiB"]
    rc, doc, out, err = replay(args, tmp_path, 120)
    assert rc == 0 and doc["results"]["corrupt_blocks"] == 0, out + err
    # an existing cluster: the LRU reference gets the cluster's own size from /metrics
    assert doc["meta"]["pool_bytes"] == 64 << 20
    assert doc["reference"]["lru"]["capacity_blocks"] == (64 << 20) // 4096
    assert doc["results"]["block_hits"] == doc["reference"]["lru"]["block_hits"]
    first = json.loads(open(tmp_path / "synthetic_trace.jsonl").readline())["hash_ids"]
    key = f"corrupt/{first[0]}"
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", meta, 0, 16 << 20, "tcp", "", f"127.0.0.1:{rpc}") == 0
    try:
        v = bytearray(s.get(key))
        assert len(v) == 4096
        v[99] ^= 0x80
        time.sleep(0.3)                                   # let the read lease lapse
        assert s.remove(key, True) == 0
        assert s.put(key, bytes(v)) == 0
    finally:
        s.close()
    rc, doc, out, err = replay(args, tmp_path, 120)
    assert rc == 1, out + err
    assert doc["results"]["corrupt_blocks"] >= 1 and doc["results"]["errors"] == 0


def _port_in_use(port):
    import socket
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@need_store
def test_store_existing_cluster_pool_is_its_capacity_or_said_unknown(tmp_path, spawn):
    rpc, http, metrics = free_port(), free_port(), free_port()
    spawn([os.path.join(BIN_DIR, "mooncake_master"), f"--rpc_port={rpc}",
           "--rpc_address=127.0.0.1", f"--metrics_port={metrics}",
           "--metrics_host=127.0.0.1", "--enable_http_metadata_server=1",
           f"--http_metadata_server_port={http}", "--http_metadata_server_host=127.0.0.1",
           "--default_kv_lease_ttl=200"])
    wait_port(rpc)
    wait_port(http)
    meta = f"http://127.0.0.1:{http}/metadata"
    base = ["--backend", "store", "--master", f"127.0.0.1:{rpc}", "--metadata", meta,
            "--synthetic-requests", "40", "--block-bytes", "4KiB"]
    # no segment mounted: refused up front, not one put error per block
    rc, doc, out, err = replay(base + ["--metrics-url", f"http://127.0.0.1:{metrics}/metrics"],
                               tmp_path, 60)
    assert rc == 2 and "holds no memory" in err and "RESULT" not in out, out + err
    spawn([sys.executable, "-m", "mooncake.trace_replay.node", "--master", f"127.0.0.1:{rpc}",
           "--metadata", meta, "--segment-size", str(32 << 20),
           "--ready-file", str(tmp_path / "ready")])
    wait_until((tmp_path / "ready").exists, 30, "store node ready", step=0.1)
    # a metrics URL that does not answer: the pool is unknown, said so, no LRU invented
    dead = free_port()
    rc, doc, out, err = replay(base + ["--metrics-url", f"http://127.0.0.1:{dead}/metrics"],
                               tmp_path, 120)
    assert rc == 0 and "RESULT: OK" in out, out + err
    assert doc["meta"]["pool_bytes"] is None and doc["reference"]["lru"] is None
    assert doc["meta"]["pool_source"].startswith("unknown")
    assert "pool UNKNOWN" in out and "capacity is unknown" in err and "8192 blocks" not in out
    # without --metrics-url: the master's host and the default metrics port 9003
    if not _port_in_use(9003):
        rc, doc, out, err = replay(base, tmp_path, 120)
        assert rc == 0 and doc["meta"]["pool_bytes"] is None, out + err
        assert "http://127.0.0.1:9003/metrics (derived from --master" in err
    # --nodes/--segment-size given: that is the pool
    rc, doc, out, err = replay(base + ["--metrics-url", f"http://127.0.0.1:{dead}/metrics",
                                       "--nodes", "1", "--segment-size", "32MiB"], tmp_path, 120)
    assert rc == 0 and doc["meta"]["pool_bytes"] == 32 << 20, out + err
    assert doc["reference"]["lru"]["capacity_blocks"] == (32 << 20) // 4096


@need_store
def test_sigint_stops_the_store_replay_and_leaves_nothing_behind(tmp_path):
    # master + 2 nodes must all be gone afterwards
    _interrupt_and_check(["--backend", "store", "--synthetic-requests", "2000",
                          "--time-scale", "1", "--block-bytes", "4KiB", "--nodes", "2",
                          "--segment-size", "16MiB"], tmp_path, 3)
