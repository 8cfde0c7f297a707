"""The replay loop: each trace request against a backend, with every byte verified.

Per request (hash ids h_0..h_{n-1}, keys = key_prefix + str(h_i)):
1. exist_batch over all n keys; the cached prefix is the longest run of 1s from the start;
2. get_batch_into the prefix blocks into the session's registered buffer (its slots
   poisoned first, so that a slot the read does not write fails) and verify every
   byte (blocks.BlockCodec); a block of the wrong size or content counts as corrupt, a
   block that vanished between the two calls as a late miss; the hit is the run of good
   blocks from the start. A block the store refused with LEASE_EXPIRED (-707: its read
   lease ran out before the transfer finished, so the bytes are not vouched for) is read
   once more, as a client would, and counted in lease_retries; a second refusal is an
   error;
3. put_batch the blocks after the hit that were absent (filled with their content).
Requests larger than the buffer are done in chunks of `slots` blocks.
"""
import collections
import queue
import threading
import time

import numpy as np

from .backends import LEASE_EXPIRED, OBJECT_NOT_FOUND, OK, code_name
from .blocks import BlockCodec
from .sim import hit_tokens


class Stats:
    """Totals of a replay (merged from all workers under one lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.blocks = 0
        self.block_hits = 0
        self.tokens = 0
        self.token_hits = 0
        self.blocks_read = 0
        self.bytes_read = 0
        self.blocks_written = 0
        self.bytes_written = 0
        self.corrupt = 0
        self.late_misses = 0
        self.lease_retries = 0
        self.errors = collections.Counter()      # "op:CODE" -> count
        self.evicted_observed = 0
        # per completed request, for the time series and the latency CDF
        self.t_done = []
        self.latency = []
        self.req_blocks = []
        self.req_hits = []
        self.req_bytes = []
        self.req_index = []

    @property
    def error_total(self) -> int:
        return sum(self.errors.values())


class Worker:
    """One session plus the per-request logic."""

    def __init__(self, session, codec: BlockCodec, key_prefix: str, stats: Stats,
                 written: set, t0: float):
        self.s = session
        self.codec = codec
        self.prefix = key_prefix
        self.stats = stats
        self.written = written          # ids put successfully (to observe evictions)
        self.t0 = t0
        self.slots = session.buffer.slots

    def run_request(self, req, index: int = 0) -> None:
        ids = req.hash_ids
        n = len(ids)
        B = self.codec.block_bytes
        buf = self.s.buffer
        errors = collections.Counter()
        pfx = self.prefix
        keys = [f"{pfx}{h}" for h in ids]
        t_start = time.perf_counter()
        ex = self.s.exist_batch(keys) if n else []
        if len(ex) != n:
            errors[f"exist:result_length_{len(ex)}_for_{n}"] += 1
            ex = (list(ex) + [-1] * n)[:n]
        k = 0
        while k < n and ex[k] == 1:
            k += 1
        if n and min(ex) < 0:
            for v in ex:
                if v < 0:
                    errors[f"exist:{code_name(v)}"] += 1
        # 2. read and verify the prefix
        hit = k
        read_miss = set()
        corrupt = late = blocks_read = bytes_read = retries = 0
        c0 = 0
        while c0 < k:
            m = min(self.slots, k - c0)
            # a slot may still hold the same block from an earlier request: poison makes
            # it fail the check unless this read writes it (blocks.py)
            self.codec.poison(buf.rows, ids[c0:c0 + m])
            res = self.s.get_batch_into(keys[c0:c0 + m], range(m))
            if len(res) == m and res.count(B) == m:
                # every block came back whole: only the bytes are left to judge (the
                # same outcome as below, without a dozen numpy calls on m results)
                content_ok = self.codec.verify(buf.rows, ids[c0:c0 + m], buf.scratch)
                if content_ok.all():
                    blocks_read += m
                    bytes_read += m * B
                    c0 += m
                    continue
            else:
                content_ok = None
            res = np.asarray(list(res) + [-1] * (m - len(res)), dtype=np.int64)[:m]
            expired = np.flatnonzero(res == LEASE_EXPIRED)
            if len(expired):
                retries += len(expired)
                for j in expired:
                    self.codec.poison(buf.rows[j:j + 1], [ids[c0 + int(j)]])
                again = self.s.get_batch_into([keys[c0 + int(j)] for j in expired],
                                              [int(j) for j in expired])
                again = list(again) + [-1] * (len(expired) - len(again))
                res[expired] = np.asarray(again[:len(expired)], dtype=np.int64)
            if content_ok is None or len(expired):     # (a retried read rewrote rows)
                content_ok = self.codec.verify(buf.rows, ids[c0:c0 + m], buf.scratch)
            good = (res == B) & content_ok
            bad_data = (res >= 0) & ~good
            corrupt += int(bad_data.sum())
            for j in np.flatnonzero(res < 0):
                rc = int(res[j])
                if rc == OBJECT_NOT_FOUND:
                    late += 1
                    read_miss.add(c0 + int(j))
                else:
                    errors[f"get:{code_name(rc)}"] += 1
            blocks_read += int(good.sum())
            bytes_read += int(res[res > 0].sum())
            if not good.all():
                hit = c0 + int(np.argmin(good))
                break
            c0 += m
        # 3. write what was absent after the hit
        todo = [i for i in range(hit, n) if ex[i] != 1 or i in read_miss]
        blocks_written = 0
        ok_ids = []
        for c0 in range(0, len(todo), self.slots):
            part = todo[c0:c0 + self.slots]
            pid = [ids[i] for i in part]
            self.codec.fill(buf.rows, pid)
            res = self.s.put_batch([keys[i] for i in part], range(len(part)))
            for h, rc in zip(pid, res):
                if rc == OK:
                    blocks_written += 1
                    ok_ids.append(h)
                else:
                    errors[f"put:{code_name(rc)}"] += 1
            if len(res) != len(part):
                errors[f"put:result_length_{len(res)}_for_{len(part)}"] += 1
        t_end = time.perf_counter()
        # observed evictions: blocks we wrote earlier that the backend says are absent
        st = self.stats
        with st.lock:
            w = self.written
            for i in range(k, n):
                if ex[i] == 0 and ids[i] in w:
                    w.discard(ids[i])
                    st.evicted_observed += 1
            w.update(ok_ids)
            st.requests += 1
            st.blocks += n
            st.block_hits += hit
            st.tokens += req.input_length
            st.token_hits += hit_tokens(req.input_length, n, hit)
            st.blocks_read += blocks_read
            st.bytes_read += bytes_read
            st.blocks_written += blocks_written
            st.bytes_written += blocks_written * B
            st.corrupt += corrupt
            st.late_misses += late
            st.lease_retries += retries
            st.errors.update(errors)
            st.t_done.append(t_end - self.t0)
            st.latency.append(t_end - t_start)
            st.req_blocks.append(n)
            st.req_hits.append(hit)
            st.req_bytes.append(bytes_read + blocks_written * B)
            st.req_index.append(index)


def run_replay(requests, sessions, codec, key_prefix, time_scale, stop: threading.Event,
               on_done=None) -> tuple:
    """Replays requests in trace order over the sessions (one worker thread each; the
    calling thread itself when there is one session). time_scale: 0 = as fast as
    possible, 1 = the trace's own timing, 0.1 = ten times faster. on_done(stats) is
    called after each request (from the worker's thread). Stops early when stop is set
    (then returns what completed). Returns (Stats, wall seconds, requests dispatched).
    KeyboardInterrupt in the calling thread sets stop, waits for the workers and
    re-raises."""
    stats = Stats()
    written = set()
    t0 = time.perf_counter()
    ts0 = requests[0].timestamp_ms if requests else 0
    workers = [Worker(s, codec, key_prefix, stats, written, t0) for s in sessions]

    def wait_due(req):
        if time_scale <= 0:
            return
        due = (req.timestamp_ms - ts0) / 1000.0 * time_scale
        while not stop.is_set():
            left = due - (time.perf_counter() - t0)
            if left <= 0:
                return
            stop.wait(min(left, 0.2))

    dispatched = 0
    if len(workers) == 1:
        w = workers[0]
        for i, req in enumerate(requests):
            wait_due(req)
            if stop.is_set():
                break
            dispatched += 1
            w.run_request(req, i)
            if on_done:
                on_done(stats)
        return stats, time.perf_counter() - t0, dispatched

    q = queue.Queue(maxsize=2 * len(workers))
    failures = []

    def loop(w):
        while True:
            item = q.get()
            if item is None or stop.is_set():
                return
            try:
                w.run_request(item[1], item[0])
            except BaseException as e:       # a backend exception ends the run, visibly
                failures.append(e)
                stop.set()
                return
            if on_done:
                on_done(stats)

    threads = [threading.Thread(target=loop, args=(w,), daemon=True, name=f"replay-{i}")
               for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    try:
        for i, req in enumerate(requests):
            wait_due(req)
            while not stop.is_set():
                try:
                    q.put((i, req), timeout=0.2)
                    dispatched += 1
                    break
                except queue.Full:
                    pass
            if stop.is_set():
                break
    except KeyboardInterrupt:
        stop.set()
        raise
    finally:
        if stop.is_set():                    # drop what was not started
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        for _ in threads:
            q.put(None)
        for t in threads:
            t.join(timeout=60)
    if failures:
        raise failures[0]
    return stats, time.perf_counter() - t0, dispatched
