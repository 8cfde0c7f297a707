#!/usr/bin/env python3
"""bench_store.py: the store's get/put throughput against the physical limits, Redis and
upstream Mooncake, in one run on one host (issue 5, "Targets").

    python bench/bench_store.py [--quick] [--out DIR] [--backends ours,ours-tcp,upstream]

What one run measures, back to back on 127.0.0.1:
  memcpy      copies of one value at a time through two 256 MiB buffers (numpy, the
              per-value loop runs in C); the same-host path's limit
  raw-tcp     loopback TCP with as many streams as our store opens to a peer
              (MC_TE_TCP_CONNECTIONS, default 2; issue 17), each from a process of its
              own to a thread of this one, one value per send()/recv() (Python socket
              calls; ~1-2 us per call, so the 4 KiB figure is a floor), both sides
              walking buffers of one batch of the largest --batches together (value x
              batch, at most 256 MiB: the bytes come from memory as a store batch's
              do, as in bench_transfer.py); the TCP path's limit
  raw-tcp-rr  one loopback TCP connection as request/response: a 32-byte request, the
              value as the answer, one at a time; what a batch-1 get can reach at best
              (printed beside batch-1 gets as raw_tcp_rr, not judged)
  redis       `redis-benchmark -P 128 -d 4096 -t set,get -q` against a redis-server
              started by the bench on a free 127.0.0.1 port (stopped after it), after a SET
              of the 4096-byte value it reads: SET/s is the anchor of the 4 KiB x 128 put,
              GET/s of the get (issue 17), on both the same-host and the TCP rows. Without
              -r that command reads and writes ONE key, whose 4 KiB stay in the caches;
              so the same server is measured again with `-r 32768` (a 128 MiB working
              set, 32x the 4 MiB L2): "spread" SET (random keys, inserts then
              overwrites) and GET (after a fill of 8 x 32768 SETs)
  ours        our store, same-host path: a master (mooncake_master, embedded HTTP
              metadata) and two client processes: a store node contributing the segment
              that holds every value (mooncake.trace_replay.node) and the bench client
              (global_segment_size 0) that issues the puts and gets, so each value moves
              between the two processes
  ours-tcp    the same with MC_FORCE_TCP=1 in both clients
  upstream    the same processes with upstream's CPU build (.venv-upstream, see
              docs/upstream-peer.md), when that venv exists
Working sets. The get cell (batch_get_into) reads, call after call, the batches its
put cell stored, spread over the segment; redis-benchmark's one key is hot. So a 4 KiB
x 128 get is measured twice: `batch_get_into` cycling over exactly 256 stored batches
(32768 keys, 128 MiB; topped up with untimed puts when the put cell stored fewer)
against redis's GET -r 32768 (the same working set), and `get_into hot` (the same 128
keys every call) against the one-key GET (the issue's command); both pairs are judged. The
4 KiB x 128 put (new keys every call) is judged against the spread SET, and its ratio to
the one-key SET (an overwrite of one cached value) is shown beside it.
For each value size (4 KiB .. 32 MiB) and batch (1, 16, 128): batch_put_from and
batch_get_into on a registered buffer, and for batch 1 also put(bytes) and get() -> bytes.
For 4 KiB x 128 on ours/ours-tcp, an extra row `get_into 2thr`: 2 client threads, each
with one batch_get_into in flight against the same store (values/s over wall time), to
compare like for like with redis-benchmark's parallel connections. For values of 1 MiB
and more at batch 1, a row `get_into 4thr` (4 threads), judged against the 1-thread
batch_get_into of the same size (issue 17: >= 1.6x).
A cell runs its calls for --seconds (at least --min-calls calls, at most 4x --seconds);
figures: values/s, GB/s (1e9 bytes), per-call p50/p99 latency. Every value read is
checked against what was written on the first get call of a cell (untimed).

--passes N: every backend runs N times in the same run, alternating (ours, ours-tcp,
upstream, ours, ...; the anchors before the first and after the last), and each cell is
reported as the pass with the median GB/s, with every pass's GB/s beside it: the
medians of >= 3 that issue 17's targets ask for, from one command, and the spread
between passes (on the 2-CPU box a TCP cell can differ 1.5x between passes:
docs/performance.md, Session 16).

--auth: each of our backends runs twice in the same run, as given and again as
"<label>+auth" with a cluster secret (a 0600 token file named in MC_AUTH_TOKEN_FILE for
every process: the master's RPC handshake and signed metadata requests, and whatever
else of ours checks it); the table gets an "authentication cost" part comparing the two
per cell (docs/security.md).

Output: a table on stdout (the parameters on every line, the ratios of the targets),
<out>/results.json, <out>/table.md, <out>/store-bench.png; a full run (not --quick) also
rewrites the generated part of docs/store-bench.md and docs/store-bench.png (--no-docs
to skip). Bounded in time (--timeout per backend); every process it starts runs in its
own process group, gets SIGTERM when this one dies, and is stopped on exit and Ctrl-C.
Exit status 0 when every measured cell ran without error, 1 otherwise, 130 on Ctrl-C.
"""
import argparse
import json
import mmap
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYDIR = os.path.join(REPO, "python")
# The tree's python/ goes after site-packages: in a venv with the package installed
# (ours or upstream's, both use pkgutil.extend_path) mooncake.store stays the installed
# one, and mooncake.trace_replay (the cluster helpers) is found in the tree either way.
if PYDIR not in sys.path:
    sys.path.append(PYDIR)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
GB = 1e9
FULL_SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 4 * MiB, 32 * MiB]
FULL_BATCHES = [1, 16, 128]
QUICK_SIZES = [4 * KiB, 1 * MiB, 4 * MiB]
QUICK_BATCHES = [1, 128]
BACKENDS = ("ours", "ours-tcp", "upstream")
PATHS = {"ours": "same-host", "ours-tcp": "tcp (MC_FORCE_TCP=1)", "upstream": "tcp",
         "ours+auth": "same-host, secret", "ours-tcp+auth": "tcp, secret"}
DOC_MD = os.path.join(REPO, "docs", "store-bench.md")
DOC_PNG = os.path.join(REPO, "docs", "store-bench.png")
BEGIN, END = "<!-- bench_store:begin -->", "<!-- bench_store:end -->"

# Targets of issue 5; the Redis bars of issue 17 (4 KiB x 128 against redis-benchmark
# -P 128 -d 4096: get/GET and put/SET, same host and TCP)
T_TCP, T_MEMCPY, T_UPSTREAM = 0.85, 0.60, 1.5  # issue 17 raised the TCP bar from 0.70
T_THREADS = 1.6  # issue 17: 4 threads >= 1.6x one thread, large values over TCP
T_REDIS_GET = {"ours": 2.0, "ours-tcp": 1.5}
T_REDIS_SET = {"ours": 1.5, "ours-tcp": 1.2}


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(i?B)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 4KiB, 1MiB)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def pct(samples, q):
    if not samples:
        return None
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))]


class Interrupted(Exception):
    pass


def _raise_interrupt(signum, _frame):
    raise Interrupted(f"signal {signum}")


# =========================================================================== store side
# Runs inside the backend's Python (ours: the venv with mooncake installed; upstream:
# .venv-upstream). Starts the master and the segment node, then is the client itself.

class Cell:
    def __init__(self, op, api, size, batch):
        self.op, self.api, self.size, self.batch = op, api, size, batch
        self.lat = []          # seconds per call
        self.busy = 0.0        # sum of call times
        self.error = None
        self.skipped = None
        self.working_set = None  # get: stored batches it cycles over (None: not counted)

    def add(self, dt):
        self.lat.append(dt)
        self.busy += dt

    def as_dict(self):
        n = len(self.lat)
        vals = n * self.batch
        d = {"op": self.op, "api": self.api, "size": self.size, "batch": self.batch,
             "calls": n, "values": vals, "busy_s": round(self.busy, 6),
             "error": self.error, "skipped": self.skipped}
        if self.working_set is not None:
            d["working_set_batches"] = self.working_set
        if n and self.busy > 0:
            d.update(values_per_s=vals / self.busy, gbps=vals * self.size / self.busy / GB,
                     p50_ms=pct(self.lat, 50) * 1e3, p99_ms=pct(self.lat, 99) * 1e3)
        return d


class Loop:
    """Decides when a cell has run long enough: --seconds of call time and --min-calls
    calls, or max(4x --seconds + 1, 15) s of wall time (a batch of 4 GiB takes seconds
    per call), or max_calls."""

    def __init__(self, seconds, min_calls, max_calls=1_000_000):
        self.seconds, self.min_calls, self.max_calls = seconds, min_calls, max_calls
        self.t0 = time.monotonic()

    def more(self, cell):
        n = len(cell.lat)
        if cell.error or n >= self.max_calls:
            return False
        if time.monotonic() - self.t0 > max(4 * self.seconds + 1, 15) and n >= 1:
            return False
        return cell.busy < self.seconds or n < self.min_calls


def batch_keys(size, batch, b):
    """The keys of stored batch b of a (size, batch) cell."""
    return [f"{size}/{batch}/{b}/{j}" for j in range(batch)]


def timed_get(store, size, batch, b, ptrs, sizes_l):
    """One timed batch_get_into of stored batch b: (seconds, None) or (seconds, why) when a
    value's length is wrong."""
    keys = batch_keys(size, batch, b)
    t0 = time.perf_counter()
    rcs = store.batch_get_into(keys, ptrs, sizes_l)
    dt = time.perf_counter() - t0
    bad = [r for r in rcs if r != size]
    return dt, (f"batch_get_into: {bad[:3]}" if bad else None)


def get_threads(store, size, batch, stored, base, max_bb, seconds, min_calls, nthr=2):
    """A get cell again (4 KiB x 128 with 2 threads; values of 1 MiB+ at batch 1 with 4),
    with `nthr` client threads in this one process, each
    keeping one batch_get_into in flight against the same store object (the call drops
    the GIL), each into its own part of the registered buffer. Like redis-benchmark's
    parallel connections, but 2 threads, not 50. values/s and GB/s are over the wall time
    of the timed window (all threads), not the sum of call times; p50/p99 are per call."""
    import threading
    cell = Cell("get", f"get_into {nthr}thr", size, batch)
    cell.working_set = len(stored)
    bb = size * batch
    if nthr * bb > max_bb:
        cell.skipped = f"client buffer {human(max_bb)} < {nthr} x {human(bb)}"
        return cell
    lats = [[] for _ in range(nthr)]
    errs = []
    start = threading.Barrier(nthr + 1)
    stop = time.monotonic() + max(4 * seconds + 1, 15)

    def worker(t):
        ptrs = [base + t * bb + j * size for j in range(batch)]
        sizes_l = [size] * batch
        k = t
        start.wait()
        t_end = time.perf_counter() + seconds
        while (time.perf_counter() < t_end or len(lats[t]) < min_calls) and \
                time.monotonic() < stop:
            dt, err = timed_get(store, size, batch, stored[k % len(stored)], ptrs, sizes_l)
            k += 1
            if err:
                errs.append(f"{err} (thread {t})")
                return
            lats[t].append(dt)

    ths = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(nthr)]
    for th in ths:
        th.start()
    start.wait()
    w0 = time.perf_counter()
    for th in ths:
        th.join()
    wall = time.perf_counter() - w0
    for lt in lats:
        cell.lat.extend(lt)
    cell.busy = wall
    cell.error = errs[0] if errs else None
    return cell


def run_backend(args) -> int:
    """--role backend: one backend's cells; writes --json-out."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)
    import numpy as np
    from mooncake.trace_replay.cluster import ProcessGroup, LocalCluster, find_tool
    from mooncake.trace_replay.backends import BackendUnavailable
    import mooncake.store as ms

    mod = os.path.abspath(ms.__file__)
    ours_tree = mod.startswith(REPO + os.sep) and ".venv-upstream" not in mod
    if args.label == "upstream" and ours_tree:
        print(f"bench: upstream run loaded our mooncake.store ({mod})", file=sys.stderr)
        return 2
    if args.label != "upstream" and ".venv-upstream" in mod:
        print(f"bench: {args.label} run loaded upstream's mooncake.store ({mod})",
              file=sys.stderr)
        return 2

    sizes, batches = args.sizes, args.batches
    max_bb = max((s * b for s in sizes for b in batches if s * b <= args.max_batch_bytes),
                 default=max(sizes))
    max_bb = max(max_bb, 2 * 4 * KiB * 128)     # room for the 2-thread 4 KiB x 128 get
    if 1 in batches:                             # and for the 4-thread large gets
        max_bb = max([max_bb] + [4 * s for s in sizes
                                 if MiB <= s and 4 * s <= args.max_batch_bytes])
    seg = max(int(max_bb / 0.7) + 64 * MiB, 256 * MiB)
    seg = (seg + MiB - 1) // MiB * MiB
    local_buf = max(64 * MiB, 2 * max(sizes) + 16 * MiB)
    version = None
    try:
        from importlib import metadata
        for dist in (("mooncake-transfer-engine-non-cuda", "mooncake-transfer-engine")
                     if args.label == "upstream" else ("mooncake-c", "mooncake")):
            try:
                version = f"{dist} {metadata.version(dist)}"
                break
            except metadata.PackageNotFoundError:
                pass
    except ImportError:
        pass
    out = {"label": args.label, "path": PATHS[args.label], "store_module": mod,
           "version": version,
           "python": sys.executable, "segment_bytes": seg, "client_buffer_bytes": max_bb,
           "local_buffer_bytes": local_buf, "cells": [], "errors": []}

    def dump():
        tmp = args.json_out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
        os.replace(tmp, args.json_out)

    def say(msg):
        print(f"[{args.label}] {msg}", flush=True)

    group = ProcessGroup(args.log_dir)
    store = None
    buf = None
    registered = False
    try:
        master_bin = find_tool("mooncake_master")
        if not master_bin:
            raise BackendUnavailable(f"no mooncake_master next to {sys.executable} or on PATH")
        t = time.monotonic()
        cl = LocalCluster(group, master_bin, 1, seg, args.lease_ttl_ms)
        say(f"master pid {cl.master.pid} rpc {cl.master_addr}, segment node pid "
            f"{cl.nodes[0][0].pid} ({human(seg)}), up in {time.monotonic() - t:.1f} s")
        out["master"] = master_bin
        store = ms.MooncakeDistributedStore()
        rc = store.setup("127.0.0.1", cl.metadata_url, 0, local_buf, "tcp", "",
                         cl.master_addr)
        if rc != 0:
            raise BackendUnavailable(f"client setup returned {rc}")
        buf = mmap.mmap(-1, max_bb)
        arr = np.frombuffer(buf, dtype=np.uint8)
        base = arr.ctypes.data
        rc = store.register_buffer(base, max_bb)
        if rc != 0:
            raise BackendUnavailable(f"register_buffer({max_bb}) returned {rc}")
        registered = True
        cap = int(seg * 0.7)

        def fill(size, batch, salt):
            rows = arr[:size * batch].view(np.uint64).reshape(batch, size // 8)
            ramp = np.arange(size // 8, dtype=np.uint64)
            for j in range(batch):
                np.bitwise_xor(ramp, np.uint64((salt * 1000003 + j) * 0x9E3779B97F4A7C15
                                               % (1 << 64)), out=rows[j])
            return rows, ramp

        def check(rows, ramp, size, salt, batch):
            for j in range(batch):
                want = np.uint64((salt * 1000003 + j) * 0x9E3779B97F4A7C15 % (1 << 64))
                if not np.array_equal(rows[j] ^ ramp, np.full(size // 8, want, np.uint64)):
                    return f"value {j} read back wrong"
            return None

        def deferred_bytes():
            """master_deferred_free_bytes from our master's /metrics, or None (upstream's
            master has no such gauge)."""
            import urllib.request
            try:
                text = urllib.request.urlopen(cl.metrics_url, timeout=2).read().decode()
            except OSError:
                return None
            m = re.search(r"^master_deferred_free_bytes (\d+)", text, re.M)
            return int(m.group(1)) if m else None

        def clear():
            n = store.remove_all(True)
            if n < 0:
                raise RuntimeError(f"remove_all(force=True) returned {n}")
            # Our master keeps the space of a force-removed object that a reader still
            # leases until the lease ends (API.md §5: a read never returns overwritten
            # bytes). Wait for it, or the next cell would find the pool full and evict.
            deadline = time.monotonic() + args.lease_ttl_ms / 1000 + 5
            while time.monotonic() < deadline and (deferred_bytes() or 0) > 0:
                time.sleep(0.05)

        def timed_gets(cell, batches):
            """batch_get_into of the stored batches in turn, timed, into cell (the loop's
            size, batch, ptrs and sizes_l); stops at the first wrong length."""
            loop = Loop(args.seconds, args.min_calls)
            k = 0
            while loop.more(cell):
                dt, cell.error = timed_get(store, size, batch, batches[k % len(batches)], ptrs,
                                           sizes_l)
                k += 1
                if cell.error:
                    break
                cell.add(dt)

        salt = 0
        for size in sizes:
            for batch in batches:
                salt += 1
                bb = size * batch
                put = Cell("put", "batch_put_from", size, batch)
                get = Cell("get", "batch_get_into", size, batch)
                if bb > args.max_batch_bytes:
                    put.skipped = get.skipped = (f"batch bytes {human(bb)} > "
                                                 f"--max-batch-bytes {human(args.max_batch_bytes)}")
                    out["cells"] += [put.as_dict(), get.as_dict()]
                    continue
                rows, ramp = fill(size, batch, salt)
                ptrs = [base + j * size for j in range(batch)]
                sizes_l = [size] * batch
                # one untimed call first: the segment's pages are touched (a fresh
                # memfd faults them in on first write) and connections are open
                clear()
                rcs = store.batch_put_from([f"warm/{size}/{batch}/{j}" for j in range(batch)],
                                           ptrs, sizes_l)
                if any(r != 0 for r in rcs):
                    put.error = f"batch_put_from (warm-up): {[r for r in rcs if r][:3]}"
                clear()
                stored, used, i = [], 0, 0
                loop = Loop(args.seconds, args.min_calls)
                while loop.more(put):
                    if used + bb > cap:
                        clear()
                        stored, used = [], 0
                    keys = batch_keys(size, batch, i)
                    t0 = time.perf_counter()
                    rcs = store.batch_put_from(keys, ptrs, sizes_l)
                    dt = time.perf_counter() - t0
                    bad = [r for r in rcs if r != 0]
                    if bad:
                        put.error = f"batch_put_from: {len(bad)}/{batch} failed, e.g. {bad[0]}"
                        break
                    put.add(dt)
                    stored.append(i)
                    used += bb
                    i += 1
                if (size, batch) == (4 * KiB, 128) and stored and not put.error and \
                        SPREAD_BATCHES * bb <= cap:
                    # the spread working set of the redis comparison (the top): exactly
                    # SPREAD_BATCHES batches, topped up untimed
                    if used + (SPREAD_BATCHES - len(stored)) * bb > cap:
                        clear()
                        stored, used = [], 0
                    while len(stored) < SPREAD_BATCHES:
                        rcs = store.batch_put_from(batch_keys(size, batch, i), ptrs, sizes_l)
                        if any(r != 0 for r in rcs):  # the put cell's figure stands
                            get.error = f"batch_put_from (top-up): {[r for r in rcs if r][:3]}"
                            break
                        stored.append(i)
                        used += bb
                        i += 1
                    stored = stored[-SPREAD_BATCHES:]
                get.working_set = len(stored)  # batches the get cycles over
                if not get.error and (put.error or not stored):
                    get.error = "nothing stored"
                if not get.error:
                    arr[:bb] = 0
                    keys0 = batch_keys(size, batch, stored[0])
                    rcs = store.batch_get_into(keys0, ptrs, sizes_l)
                    if any(r != size for r in rcs):
                        get.error = f"batch_get_into: {[r for r in rcs if r != size][:3]}"
                    else:
                        get.error = check(rows, ramp, size, salt, batch)
                    timed_gets(get, stored)
                cells = [put, get]
                if (size, batch) == (4 * KiB, 128) and stored and not get.error:
                    # the same 128 keys every call, as redis-benchmark's one key (the top)
                    hot = Cell("get", "get_into hot", size, batch)
                    arr[:bb] = 0
                    timed_gets(hot, stored[:1])
                    hot.error = hot.error or check(rows, ramp, size, salt, batch)
                    cells.append(hot)
                if (size, batch) == (4 * KiB, 128) and args.label != "upstream" and stored \
                        and not get.error:
                    cells.append(get_threads(store, size, batch, stored, base, max_bb,
                                             args.seconds, args.min_calls))
                if size >= MiB and batch == 1 and args.label != "upstream" and stored \
                        and not get.error:
                    # issue 17: 4 threads >= 1.6x one thread for large values over TCP
                    cells.append(get_threads(store, size, batch, stored, base, max_bb,
                                             args.seconds, args.min_calls, nthr=4))
                for c in cells:
                    out["cells"].append(c.as_dict())
                    d = c.as_dict()
                    say(f"{c.op} {c.api} size={human(size)} batch={batch}: " +
                        (f"{d['gbps']:.3f} GB/s, {d['values_per_s']:.0f} values/s, "
                         f"p50 {d['p50_ms']:.3f} ms, p99 {d['p99_ms']:.3f} ms, "
                         f"{d['calls']} calls" if "gbps" in d else "no figure") +
                        (f" ERROR {c.error}" if c.error else ""))
                dump()
            # plain put(bytes) / get() -> bytes, batch 1
            salt += 1
            rows, ramp = fill(size, 1, salt)
            value = bytes(arr[:size])
            put = Cell("put", "put", size, 1)
            get = Cell("get", "get", size, 1)
            clear()
            rc = store.put(f"warm/plain/{size}", value)
            if rc != 0:
                put.error = f"put (warm-up) returned {rc}"
            clear()
            stored, used, i = [], 0, 0
            loop = Loop(args.seconds, args.min_calls)
            while loop.more(put):
                if used + size > cap:
                    clear()
                    stored, used = [], 0
                key = f"plain/{size}/{i}"
                t0 = time.perf_counter()
                rc = store.put(key, value)
                dt = time.perf_counter() - t0
                if rc != 0:
                    put.error = f"put returned {rc}"
                    break
                put.add(dt)
                stored.append(i)
                used += size
                i += 1
            if stored:
                got = store.get(f"plain/{size}/{stored[0]}")
                if got != value:
                    get.error = f"get returned {len(got)} bytes, not the value put"
                loop = Loop(args.seconds, args.min_calls)
                k = 0
                while loop.more(get):
                    key = f"plain/{size}/{stored[k % len(stored)]}"
                    k += 1
                    t0 = time.perf_counter()
                    got = store.get(key)
                    dt = time.perf_counter() - t0
                    if len(got) != size:
                        get.error = f"get returned {len(got)} bytes"
                        break
                    get.add(dt)
                del got
            else:
                get.error = "nothing stored"
            del value
            for c in (put, get):
                d = c.as_dict()
                out["cells"].append(d)
                say(f"{c.op} {c.api} size={human(size)} batch=1: " +
                    (f"{d['gbps']:.3f} GB/s, p50 {d['p50_ms']:.3f} ms" if "gbps" in d
                     else "no figure") + (f" ERROR {c.error}" if c.error else ""))
            dump()
        clear()
        out["ok"] = not any(c["error"] for c in out["cells"])
        dump()
        return 0
    except BackendUnavailable as e:
        out["errors"].append(str(e))
        dump()
        print(f"bench: {args.label} unavailable: {e}", file=sys.stderr, flush=True)
        return 3
    except Interrupted as e:
        out["errors"].append(f"interrupted ({e})")
        dump()
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if store is not None:
                if registered:
                    store.unregister_buffer(base)
                store.close()
        except Exception as e:          # noqa: BLE001 - still stop the processes
            print(f"bench: close: {e}", file=sys.stderr)
        group.stop(order=["node-", "master"])


# ============================================================================== anchors

_SENDER = r"""
import socket, sys, time
port, block, secs, span = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = memoryview(bytearray(b"\x01" * span))
n, i = span // block, 0
if s.recv(1) != b"g":   # every stream starts together (raw_tcp)
    sys.exit(1)
end = time.monotonic() + secs
try:
    while time.monotonic() < end:
        s.sendall(buf[i * block:(i + 1) * block])
        i = i + 1 if i + 1 < n else 0
finally:
    s.close()
"""


def _peer_connections(group, name, script, args, n, seconds, kids, conns):
    """Starts n child processes running `script` (argv: port, then args) that connect to a
    listener of ours on 127.0.0.1, and accepts them: the children go in kids and the
    connections (timeout seconds + 20) in conns as they come, so the caller's cleanup
    sees what was made when this raises (OSError: a child that did not connect within
    20 s)."""
    ls = socket.socket()
    try:
        ls.bind(("127.0.0.1", 0))
        ls.listen(n)
        ls.settimeout(20)
        port = ls.getsockname()[1]
        for i in range(n):
            kids.append(group.spawn(f"{name}-{i}" if n > 1 else name,
                                    [sys.executable, "-c", script, str(port),
                                     *map(str, args)]))
        for _ in range(n):
            conn, _ = ls.accept()
            conn.settimeout(seconds + 20)
            conns.append(conn)
    finally:
        ls.close()


def _peer_connection(group, name, script, block, seconds):
    """(child, connection): one child process running `script` (argv: port, block,
    seconds) connected to a listener of ours on 127.0.0.1 (_peer_connections)."""
    kids, conns = [], []
    _peer_connections(group, name, script, (block, seconds), 1, seconds, kids, conns)
    return kids[0], conns[0]


TE_MAX_CONNS = 16   # MC_TE_TCP_CONNECTIONS' range in src/transfer/engine.c: 1..16


def tcp_streams():
    """The connections our store opens to a peer (MC_TE_TCP_CONNECTIONS, default 2, as
    src/transfer/engine.c reads it): the raw TCP anchor runs that many streams (issue
    17: raw TCP with the same number of streams as the anchor). None for a value the
    store would refuse (main checks it before anything runs)."""
    text = os.environ.get("MC_TE_TCP_CONNECTIONS", "").strip() or "2"
    try:
        n = int(text)
    except ValueError:
        return None
    return n if 1 <= n <= TE_MAX_CONNS else None


def raw_tcp(group, block, seconds, streams=1, span=None):
    """`streams` loopback TCP streams at once: each a child process send()ing `block` bytes
    at a time for `seconds`, received here by a thread of its own recv()ing `block` bytes
    at a time (MSG_WAITALL; the GIL is released while it waits). Each side of a stream
    walks a buffer of span / streams bytes (at least one block), block after block, so
    the bytes come from and go to memory as a store batch's do rather than one
    cache-hot block (as bench_transfer.py's anchor; span None: one block). GB/s at the
    receivers: all bytes over the time from the first byte on any stream to the last on
    any."""
    per = max(block, (span or block) // streams // block * block)
    kids, conns = [], []
    got = [0] * streams
    first = [None] * streams
    last = [None] * streams

    def receive(i):
        rbuf = memoryview(bytearray(per))
        nblk, j = per // block, 0
        conn = conns[i]
        try:
            while True:
                k = conn.recv_into(rbuf[j * block:(j + 1) * block], block, socket.MSG_WAITALL)
                if k <= 0:
                    break
                now = time.perf_counter()
                if first[i] is None:
                    first[i] = now
                last[i] = now
                got[i] += k
                j = j + 1 if j + 1 < nblk else 0
        except OSError:
            first[i] = None   # this stream's figure is lost: no anchor from this round

    try:
        _peer_connections(group, f"tcp-sender-{block}", _SENDER, (block, seconds, per),
                          streams, seconds, kids, conns)
        threads = [threading.Thread(target=receive, args=(i,), daemon=True)
                   for i in range(streams)]
        for t in threads:
            t.start()
        for conn in conns:   # the senders start their clocks together
            conn.sendall(b"g")
        for t in threads:
            t.join(seconds + 30)
        for c in kids:
            c.popen.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"  anchor: raw TCP with {streams} streams of {human(block)} failed: {e}",
              flush=True)
        return None
    finally:
        for conn in conns:
            conn.close()
        for c in kids:
            if c.popen.poll() is None:
                c.popen.kill()
    starts = [t for t in first if t is not None]
    if len(starts) < streams:
        return None
    el = max(last) - min(starts)
    return sum(got) / el / GB if el > 0 else None


_RESPONDER = r"""
import socket, sys
port, block = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
view = memoryview(bytearray(b"\x01" * block))
req = bytearray(32)
try:
    while s.recv_into(req, 32, socket.MSG_WAITALL) == 32:
        s.sendall(view)
finally:
    s.close()
"""


def raw_tcp_rr(group, block, seconds):
    """One loopback TCP connection used as a batch-1 get uses one: this process sends a
    32-byte request, a child process answers each with `block` bytes (sendall), the next
    request goes out once the whole answer is in, for `seconds`. GB/s over
    the round trips. A reference, not an anchor any target is judged by: a request /
    response pays the pipeline fill and drain of every value and two wakeups that a
    stream hides (docs/performance.md, "Session 14")."""
    c, conn = _peer_connection(group, f"tcp-responder-{block}", _RESPONDER, block, seconds)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rbuf = memoryview(bytearray(block))
    req = b"r" * 32
    got = 0
    with conn:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            conn.sendall(req)
            k = 0
            while k < block:  # a socket with a timeout returns what is there
                n = conn.recv_into(rbuf[k:], block - k)
                if n <= 0:
                    return None
                k += n
            got += k
        el = time.perf_counter() - t0
    c.popen.wait(timeout=10)
    return got / el / GB if el > 0 else None


def memcpy_gbps(block, seconds, np):
    """memcpy of one `block` at a time: numpy copies every other block of a 256 MiB
    buffer into every other block of another (the per-block loop runs in C). GB/s."""
    n = 256 * MiB if block <= 32 * MiB else 8 * block
    src = np.full(n, 1, np.uint8)
    dst = np.zeros(n, np.uint8)
    s2 = src.reshape(-1, block)[::2]
    d2 = dst.reshape(-1, block)[1::2]
    per = s2.size
    np.copyto(d2, s2)
    t0 = time.perf_counter()
    done = 0
    while time.perf_counter() - t0 < seconds:
        np.copyto(d2, s2)
        done += per
    return done / (time.perf_counter() - t0) / GB


# The spread working set of the 4 KiB x 128 comparison, the same on both sides: redis
# -r REDIS_SPREAD_KEYS, and our get cycling over SPREAD_BATCHES batches of 128 keys
REDIS_SPREAD_KEYS = 32768  # 128 MiB of 4 KiB values
SPREAD_BATCHES = REDIS_SPREAD_KEYS // 128


def _redis_csv(p, names, cmd, port):
    """{name.lower(): {rps, p50_ms, p99_ms, command}} from redis-benchmark --csv output."""
    shown = " ".join(os.path.basename(x) if i == 0 else x
                     for i, x in enumerate(cmd)).replace(str(port), "PORT")
    out = {}
    for name in names:
        rows = [ln for ln in p.stdout.splitlines() if ln.startswith(f'"{name}"')]
        if not rows:
            raise RuntimeError(f"redis-benchmark output not understood: {p.stdout[-300:]}")
        f = [x.strip('"') for x in rows[-1].split(",")]
        out[name.lower()] = {"rps": float(f[1]), "p50_ms": float(f[4]),
                             "p99_ms": float(f[6]), "command": shown}
    return out


def redis_anchor(group, requests):
    """redis-benchmark -P 128 -d 4096 -t set,get against a fresh redis-server (one key),
    then the same with -r REDIS_SPREAD_KEYS (a fill of 8 x that many SETs of random keys,
    timed: "set_spread", then GETs of random keys: "get_spread"). Returns {"get", "set",
    "get_spread", "set_spread"}: each {rps, p50_ms, p99_ms, command}; raises
    RuntimeError."""
    from mooncake.trace_replay.cluster import start_redis
    from mooncake.trace_replay.backends import BackendUnavailable
    rb = shutil.which("redis-benchmark")
    if not rb:
        raise RuntimeError("redis-benchmark not installed (Debian: redis-tools)")
    try:
        host, port, c = start_redis(group, 2 * GiB)
    except BackendUnavailable as e:
        raise RuntimeError(str(e)) from None
    try:
        # redis-benchmark reads key:__rand_int__ (one key without -r): SET it first so that
        # every GET returns the 4096-byte value instead of nil
        pre = subprocess.run([rb, "-h", host, "-p", str(port), "-P", "128", "-d", "4096",
                              "-t", "set", "-n", "1000", "-q"], capture_output=True,
                             text=True, timeout=60)
        if pre.returncode:
            raise RuntimeError(f"redis-benchmark SET failed: {pre.stderr.strip()}")
        cmd = [rb, "-h", host, "-p", str(port), "-P", "128", "-d", "4096", "-t", "set,get",
               "-q", "-n", str(requests), "--csv"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        if p.returncode:
            raise RuntimeError(f"redis-benchmark failed: {p.stderr.strip()}")
        out = _redis_csv(p, ("SET", "GET"), cmd, port)
        spread = ["-r", str(REDIS_SPREAD_KEYS)]
        # 8 x the keys: all but e^-8 (0.03%) of them are written before the GETs
        for name, n in (("SET", 8 * REDIS_SPREAD_KEYS), ("GET", requests)):
            cmd = [rb, "-h", host, "-p", str(port), "-P", "128", "-d", "4096", "-t",
                   name.lower(), "-q", "-n", str(n), "--csv"] + spread
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            if p.returncode:
                raise RuntimeError(f"redis-benchmark failed: {p.stderr.strip()}")
            out[name.lower() + "_spread"] = _redis_csv(p, (name,), cmd, port)[name.lower()]
        return out
    finally:
        try:
            os.killpg(c.pid, signal.SIGTERM)
            c.popen.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(getattr(c, "workdir", ""), ignore_errors=True)


# =============================================================================== driver

def find_ours_python(explicit):
    """A Python whose mooncake.store is ours and that has mooncake_master next to it."""
    cands = [explicit] if explicit else [sys.executable, os.path.join(REPO, ".venv", "bin",
                                                                      "python")]
    why = []
    for py in cands:
        if not py or not os.path.exists(py):
            continue
        p = subprocess.run([py, "-c", "import mooncake.store as m; "
                            "m.MooncakeDistributedStore; print(m.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd="/")
        if p.returncode or ".venv-upstream" in p.stdout:
            why.append(f"{py}: {(p.stderr.strip().splitlines() or ['upstream'])[-1]}")
            continue
        if not os.path.exists(os.path.join(os.path.dirname(py), "mooncake_master")):
            why.append(f"{py}: no mooncake_master next to it")
            continue
        return py, None
    return None, "; ".join(why) or "no Python with our mooncake installed"


def machine():
    cpu = "?"
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
        mem = next(int(ln.split()[1]) for ln in open("/proc/meminfo")
                   if ln.startswith("MemTotal:")) * 1024
    except (OSError, StopIteration):
        mem = 0
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_bytes": mem,
            "kernel": platform.release(), "os": _os_name(),
            "python": platform.python_version(), "loadavg_start": os.getloadavg()}


def _os_name():
    try:
        for ln in open("/etc/os-release"):
            if ln.startswith("PRETTY_NAME="):
                return ln.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def mem_available():
    try:
        for ln in open("/proc/meminfo"):
            if ln.startswith("MemAvailable:"):
                return int(ln.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_child(group, label, argv, env, timeout, log_dir):
    """Starts one backend run in the process group and echoes its progress lines until it
    exits or `timeout` s pass (then it is stopped). Returns its exit status (None:
    timed out)."""
    c = group.spawn(f"backend-{label}", argv, env=env)
    pos = 0
    deadline = time.monotonic() + timeout
    status = None
    while True:
        status = c.popen.poll()
        try:
            with open(c.log_path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                for ln in chunk[:nl].decode("utf-8", "replace").splitlines():
                    if ln.startswith("[") or ln.startswith("bench:"):
                        print(f"  {ln}", flush=True)
                pos += nl + 1
        except OSError:
            pass
        if status is not None:
            return status
        if time.monotonic() > deadline:
            print(f"  [{label}] still running after {timeout} s: stopping it", flush=True)
            try:
                os.killpg(c.pid, signal.SIGTERM)
                c.popen.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(c.pid, signal.SIGKILL)
            return None
        time.sleep(0.2)


def fmt(v, f="{:.3f}"):
    return "-" if v is None else f.format(v)


def cell_key(c):
    return (c["op"], c["api"], c["size"], c["batch"])


def analyse(res):
    """Adds the ratio of every store cell to its anchors and the target verdicts."""
    anchors = res["anchors"]
    tcp = {int(k): v for k, v in anchors["raw_tcp_gbps"].items()}
    trr = {int(k): v for k, v in anchors.get("raw_tcp_rr_gbps", {}).items()}
    mcp = {int(k): v for k, v in anchors["memcpy_gbps"].items()}
    redis = anchors.get("redis") or {}
    redis_set = anchors.get("redis_set") or {}
    redis_sp = anchors.get("redis_spread") or {}
    redis_set_sp = anchors.get("redis_set_spread") or {}
    up = {cell_key(c): c for c in res["backends"].get("upstream", {}).get("cells", [])}
    targets = []
    for label, b in res["backends"].items():
        for c in b.get("cells", []):
            r = {}
            g = c.get("gbps")
            if g is not None:
                if label in ("ours", "ours+auth"):
                    r["memcpy"] = g / mcp[c["size"]] if mcp.get(c["size"]) else None
                else:
                    r["raw_tcp"] = g / tcp[c["size"]] if tcp.get(c["size"]) else None
                    # a batch-1 call is one request / response (reference only, not judged)
                    if c["batch"] == 1 and c["api"] in ("batch_get_into", "get") and \
                            trr.get(c["size"]):
                        r["raw_tcp_rr"] = g / trr[c["size"]]
                u = up.get(cell_key(c), {}).get("gbps")
                if label != "upstream" and u:
                    r["upstream"] = g / u
                # "redis": to the one-key command; "redis_spread": to -r (see the top)
                if (c["op"], c["size"], c["batch"]) == ("get", 4 * KiB, 128):
                    if redis.get("rps"):
                        r["redis"] = c["values_per_s"] / redis["rps"]
                    # the same working set only (SPREAD_BATCHES batches; the threads'
                    # cell cycles over the same stored batches)
                    if c["api"] != "get_into hot" and redis_sp.get("rps") and \
                            c.get("working_set_batches") == SPREAD_BATCHES:
                        r["redis_spread"] = c["values_per_s"] / redis_sp["rps"]
                if (c["op"], c["api"], c["size"], c["batch"]) == \
                        ("put", "batch_put_from", 4 * KiB, 128):
                    if redis_set.get("rps"):
                        r["redis"] = c["values_per_s"] / redis_set["rps"]
                    if redis_set_sp.get("rps"):
                        r["redis_spread"] = c["values_per_s"] / redis_set_sp["rps"]
            c["ratio"] = r
    ours = res["backends"].get("ours", {}).get("cells", [])
    ourt = res["backends"].get("ours-tcp", {}).get("cells", [])

    def verdict(name, c, ratio, bar, what):
        if c.get("gbps") is None:
            why = c.get("skipped") or c.get("error") or "no figure"
            targets.append({"target": name, "cell": what, "ratio": None, "bar": bar,
                            "met": None, "note": why, "size": c["size"]})
        else:
            targets.append({"target": name, "cell": what, "ratio": ratio, "bar": bar,
                            "met": None if ratio is None else ratio >= bar,
                            "note": "no figure to compare with" if ratio is None else "",
                            "size": c["size"]})

    for c in ourt:
        if c["op"] == "get" and c["size"] >= MiB and c["api"] == "batch_get_into":
            verdict(f"get >= {T_TCP:.0%} raw TCP (ours-tcp)", c,
                    c.get("ratio", {}).get("raw_tcp"),
                    T_TCP, f"{human(c['size'])} batch {c['batch']}")
    one = {c["size"]: c for c in ourt
           if (c["op"], c["api"], c["batch"]) == ("get", "batch_get_into", 1)}
    for c in ourt:
        if (c["op"], c["api"], c["batch"]) == ("get", "get_into 4thr", 1):
            g1 = one.get(c["size"], {}).get("gbps")
            g4 = c.get("gbps")
            r4 = g4 / g1 if g4 is not None and g1 else None
            c.setdefault("ratio", {})["one_thread"] = r4
            verdict(f"get, 4 threads >= {T_THREADS:g}x one thread (ours-tcp)", c, r4,
                    T_THREADS, f"{human(c['size'])} batch 1")
    for c in ours:
        if c["op"] == "get" and c["size"] >= MiB and c["api"] == "batch_get_into":
            verdict("get >= 60% memcpy (ours, same host)", c,
                    c.get("ratio", {}).get("memcpy"), T_MEMCPY,
                    f"{human(c['size'])} batch {c['batch']}")
    for label, cells in (("ours", ours), ("ours-tcp", ourt)):
        for c in cells:
            if (c["size"], c["batch"]) != (4 * KiB, 128):
                continue
            # like for like (see the top): a spread working set against redis -r, the
            # same 128 keys against redis's one key
            if c["op"] == "get" and c["api"] in ("batch_get_into", "get_into 2thr"):
                thr = ", 2 threads" if c["api"] != "batch_get_into" else ""
                bar = T_REDIS_GET[label]
                verdict(f"4 KiB batch 128 get >= {bar:g}x redis GET -r ({label}{thr})",
                        c, c.get("ratio", {}).get("redis_spread"), bar, "4 KiB batch 128")
            if c["op"] == "get" and c["api"] == "get_into hot":
                bar = T_REDIS_GET[label]
                verdict(f"4 KiB batch 128 get >= {bar:g}x redis GET one key ({label}, hot)",
                        c, c.get("ratio", {}).get("redis"), bar, "4 KiB batch 128")
            if c["op"] == "put" and c["api"] == "batch_put_from":
                bar = T_REDIS_SET[label]
                verdict(f"4 KiB batch 128 put >= {bar:g}x redis SET -r ({label})",
                        c, c.get("ratio", {}).get("redis_spread"), bar, "4 KiB batch 128")
    if up:
        for label, cells in (("ours-tcp", ourt), ("ours", ours)):
            for c in cells:
                if cell_key(c) in up:
                    verdict(f">= 1.5x upstream ({label})", c,
                            c.get("ratio", {}).get("upstream"), T_UPSTREAM,
                            f"{c['op']} {c['api']} b{c['batch']}")
    res["targets"] = targets


def table_lines(res):
    """The table: anchors, then every store cell, then the targets."""
    a = res["anchors"]
    hdr = (f"{'backend':9} {'path':20} {'op':4} {'api':15} {'size':>7} {'batch':>5} "
           f"{'values/s':>10} {'GB/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'calls':>6}  ratios")
    out = [hdr, "-" * len(hdr)]
    for s in res["params"]["sizes"]:
        out.append(f"{'anchor':9} {'raw TCP, %d streams' % a.get('raw_tcp_streams', 1):20} "
                   f"{'-':4} {'send/recv':15} "
                   f"{human(s):>7} {1:>5} {'-':>10} {fmt(a['raw_tcp_gbps'].get(str(s))):>7} "
                   f"{'-':>8} {'-':>8} {'-':>6}")
        out.append(f"{'anchor':9} {'raw TCP req/resp':20} {'-':4} {'32 B -> value':15} "
                   f"{human(s):>7} {1:>5} {'-':>10} "
                   f"{fmt(a.get('raw_tcp_rr_gbps', {}).get(str(s))):>7} "
                   f"{'-':>8} {'-':>8} {'-':>6}")
        out.append(f"{'anchor':9} {'memcpy':20} {'-':4} {'memcpy':15} "
                   f"{human(s):>7} {1:>5} {'-':>10} {fmt(a['memcpy_gbps'].get(str(s))):>7} "
                   f"{'-':>8} {'-':>8} {'-':>6}")
    for op, key, ks in (("put", "redis_set", "one key"), ("get", "redis", "one key"),
                        ("put", "redis_set_spread", f"-r {REDIS_SPREAD_KEYS}"),
                        ("get", "redis_spread", f"-r {REDIS_SPREAD_KEYS}")):
        r = a.get(key)
        if r and r.get("rps"):
            out.append(f"{'redis':9} {'tcp':20} {op:4} {'redis-bench P128':15} "
                       f"{'4 KiB':>7} {128:>5} {r['rps']:>10.0f} {r['rps'] * 4096 / GB:>7.3f} "
                       f"{r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {'-':>6}  (-P 128: pipeline "
                       f"depth; latency per request; {'SET' if op == 'put' else 'GET'}, {ks})")
        elif r:
            out.append(f"{'redis':9} unavailable: {r.get('error')}")
            break
    for label, b in res["backends"].items():
        if b.get("unavailable"):
            out.append(f"{label:9} unavailable: {b['unavailable']}")
            continue
        if b.get("failed_passes"):
            out.append(f"{label:9} pass(es) {', '.join(map(str, b['failed_passes']))} of "
                       f"{b.get('passes')} measured nothing (see the run's log); the "
                       "cells below are the median of the others")
        for c in b.get("cells", []):
            rt = c.get("ratio", {})
            rs = "  ".join(f"{k} {v:.2f}" for k, v in rt.items() if v is not None)
            note = (f"skipped: {c['skipped']}" if c.get("skipped") else
                    f"ERROR: {c['error']}" if c.get("error") else "")
            if len(c.get("passes_gbps") or ()) > 1:
                note = ("passes " + "/".join(fmt(g) for g in c["passes_gbps"]) +
                        " GB/s" + (f"; {note}" if note else ""))
            out.append(f"{label:9} {b['path']:20} {c['op']:4} {c['api']:15} "
                       f"{human(c['size']):>7} {c['batch']:>5} "
                       f"{fmt(c.get('values_per_s'), '{:.0f}'):>10} {fmt(c.get('gbps')):>7} "
                       f"{fmt(c.get('p50_ms')):>8} {fmt(c.get('p99_ms')):>8} "
                       f"{c['calls']:>6}  {rs}{'  ' if rs and note else ''}{note}")
    out.append("ratios: memcpy / raw_tcp: to that anchor; raw_tcp_rr: to one loopback "
               "connection's request/response of the same value (batch-1 gets; shown, not "
               "judged); redis: to redis-benchmark's "
               "one-key command (SET or GET); redis_spread: to its -r "
               f"{REDIS_SPREAD_KEYS} run (the same {REDIS_SPREAD_KEYS * 4 // 1024} MiB "
               f"working set as a get cycling over {SPREAD_BATCHES} batches); upstream: "
               "to upstream's same cell; one_thread: 4 threads over 1. get_into hot: one "
               "batch every call")
    return out


def target_lines(res):
    """One line per cell for the anchor targets; one line per value size for the upstream
    targets (cells met, the lowest ratio and where)."""
    out = []

    def verdict(t):
        if t["met"] is None:
            return f"n/a ({t.get('note', '')})"
        return "met" if t["met"] else "MISSED"

    groups = {}
    for t in res["targets"]:
        groups.setdefault(t["target"], []).append(t)
    for name, ts in groups.items():
        if "upstream" not in name:
            for t in ts:
                r = "-" if t["ratio"] is None else f"{t['ratio']:.2f}"
                out.append(f"{name:63} {t['cell']:17} ratio {r:>6} (bar {t['bar']:.2f})  "
                           f"{verdict(t)}")
            continue
        by_size = {}
        for t in ts:
            by_size.setdefault(t["size"], []).append(t)
        for size, st in by_size.items():
            rated = [t for t in st if t["ratio"] is not None]
            met = sum(1 for t in st if t["met"])
            lo = min(rated, key=lambda t: t["ratio"]) if rated else None
            miss = [t for t in st if t["met"] is False]
            line = (f"{name:63} {human(size):>7}: {met}/{len(st)} cells met" +
                    (f", lowest {lo['ratio']:.2f} ({lo['cell']})" if lo else ""))
            if miss:
                line += "; MISSED: " + ", ".join(f"{t['cell']} {t['ratio']:.2f}" for t in miss)
            na = [t for t in st if t["met"] is None]
            if na:
                line += f"; {len(na)} without a figure"
            out.append(line)
    return out


def auth_lines(res):
    """Per cell of ours / ours-tcp that also ran with the secret: both throughputs, the
    ratio and the p50 latencies."""
    out = []
    for label in ("ours", "ours-tcp"):
        plain = {cell_key(c): c for c in res["backends"].get(label, {}).get("cells", [])}
        for c in res["backends"].get(label + "+auth", {}).get("cells", []):
            p = plain.get(cell_key(c))
            if not p or not p.get("values_per_s") or not c.get("values_per_s"):
                continue
            out.append(f"  {label:8} {c['op']:4} {c['api']:15} {human(c['size']):>7} "
                       f"x{c['batch']:<4} {p['values_per_s']:>10.0f} -> "
                       f"{c['values_per_s']:>10.0f} values/s ({c['values_per_s'] / p['values_per_s']:.2f}x), "
                       f"p50 {fmt(p.get('p50_ms'))} -> {fmt(c.get('p50_ms'))} ms")
    return out


def summary_lines(res):
    out = []
    groups = {}
    for t in res["targets"]:
        groups.setdefault(t["target"], []).append(t)
    for name, ts in groups.items():
        met = sum(1 for t in ts if t["met"])
        miss = [t["cell"] if "upstream" not in name else f"{human(t['size'])} {t['cell']}"
                for t in ts if t["met"] is False]
        na = sum(1 for t in ts if t["met"] is None)
        out.append(f"{name}: {met}/{len(ts)} met" +
                   (f"; missed at {', '.join(miss)}" if miss else "") +
                   (f"; {na} without a figure" if na else ""))
    return out


def plot(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sizes = res["params"]["sizes"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    colors = {"ours": "tab:blue", "ours-tcp": "tab:green", "upstream": "tab:red",
              "ours+auth": "tab:cyan", "ours-tcp+auth": "tab:olive"}
    uv = (res["backends"].get("upstream", {}).get("version") or "").split(" ")[-1]
    names = {"ours": "ours, same host", "ours-tcp": "ours, TCP (MC_FORCE_TCP=1)",
             "upstream": f"upstream {uv}, TCP".replace("  ", " "),
             "ours+auth": "ours, same host, secret", "ours-tcp+auth": "ours, TCP, secret"}
    a = res["anchors"]
    for ax, op in zip(axes, ("get", "put")):
        for key, lab, col in (("memcpy_gbps", "memcpy", "black"),
                              ("raw_tcp_gbps",
                               f"raw TCP, {a.get('raw_tcp_streams', 1)} streams", "grey")):
            ys = [a[key].get(str(s)) for s in sizes]
            ax.plot(sizes, ys, color=col, marker="o", lw=2, label=lab)
        for label, b in res["backends"].items():
            cells = b.get("cells", [])
            api = "batch_get_into" if op == "get" else "batch_put_from"
            for batch, ls in ((max(res["params"]["batches"]), "-"), (1, ":")):
                ys = [next((c.get("gbps") for c in cells if (c["op"], c["api"], c["size"],
                            c["batch"]) == (op, api, s, batch)), None) for s in sizes]
                if any(y is not None for y in ys):
                    ax.plot(sizes, [float("nan") if y is None else y for y in ys],
                            color=colors.get(label), ls=ls, marker=".",
                            label=f"{names.get(label, label)}, batch {batch}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([human(s).replace(" ", "") for s in sizes])
        ax.set_xlabel("value size")
        ax.set_title(f"{op} ({'batch_get_into' if op == 'get' else 'batch_put_from'}, "
                     "registered memory)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("GB/s (1e9 bytes/s)")
    axes[1].legend(fontsize=7, loc="lower right")
    m = res["machine"]
    fig.suptitle(f"mooncake-c store, two client processes on one host "
                 f"({m['cores']} cores, {m['cpu']}); {res['params']['mode']} run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def markdown(res, table, targets, summary):
    m = res["machine"]
    p = res["params"]
    lines = [
        BEGIN,
        f"Generated by `{p['command']}` on {res['date']} ({p['mode']} run, "
        f"{res['wall_s']:.0f} s), tree at `{res.get('commit', '?')}`.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_bytes'] / GiB:.0f} GiB RAM, "
        f"{m['os']}, kernel {m['kernel']}, Python {m['python']}; load average "
        f"{m['loadavg_start'][0]:.2f} at the start, {m['loadavg_end'][0]:.2f} at the end "
        "(other work may share the box).",
        "",
        f"Parameters: value sizes {', '.join(human(s) for s in p['sizes'])}; batches "
        f"{', '.join(map(str, p['batches']))}; {p['seconds']} s of call time per cell "
        f"(at least {p['min_calls']} calls); batches over {human(p['max_batch_bytes'])} "
        "skipped. GB = 1e9 bytes; latency per call (one batch).",
        "",
    ]
    for label, b in res["backends"].items():
        if b.get("unavailable"):
            lines.append(f"- `{label}`: unavailable: {b['unavailable']}")
        else:
            lines.append(f"- `{label}` ({b['path']}): {b.get('version') or '?'}, "
                         f"`{os.path.relpath(b.get('store_module', '?'), REPO)}`, segment "
                         f"{human(b.get('segment_bytes', 0))}")
    lines += ["", "```", *table, "```", "", "Targets, cell by cell:", "", "```", *targets,
              "```", "", "Summary:", ""]
    lines += [f"- {s}" for s in summary] + ["", END]
    return "\n".join(lines) + "\n"


def write_doc(md_block):
    os.makedirs(os.path.dirname(DOC_MD), exist_ok=True)
    head = ("# Store benchmark (issue 5 targets)\n\n"
            "`bench/bench_store.py` measures our store's get/put throughput with two client\n"
            "processes on one host, next to the physical limits, Redis and upstream, all in\n"
            "one run. The block between the markers is rewritten by each full run; the\n"
            "notes after it are written by hand.\n\n")
    tail = ""
    if os.path.exists(DOC_MD):
        old = open(DOC_MD).read()
        if BEGIN in old and END in old:
            head = old[:old.index(BEGIN)]
            tail = old[old.index(END) + len(END):].lstrip("\n")
    with open(DOC_MD, "w") as f:
        f.write(head + md_block + ("\n" + tail if tail else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true",
                    help="a subset (4 KiB, 1 MiB, 4 MiB; batch 1 and 128; 0.3 s per cell) "
                         "that finishes in about a minute")
    ap.add_argument("--sizes", help="comma-separated value sizes (default 4KiB,64KiB,1MiB,"
                    "4MiB,32MiB)")
    ap.add_argument("--batches", help="comma-separated batch sizes (default 1,16,128)")
    ap.add_argument("--seconds", type=float, help="call time per cell (default 1.0; quick 0.3)")
    ap.add_argument("--min-calls", type=int, default=3, help="calls per cell at least (3)")
    ap.add_argument("--max-batch-bytes", type=parse_size,
                    help="skip batches larger than this (default 4GiB, lowered to fit the "
                         "free memory: the node's segment and the client's buffer each hold "
                         "one batch)")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated subset of ours,ours-tcp,upstream")
    ap.add_argument("--ours-python", help="Python with our mooncake installed (default: this "
                    "one if it has it, else .venv/bin/python)")
    ap.add_argument("--upstream-python",
                    default=os.environ.get("MC_UPSTREAM_PYTHON",
                                           os.path.join(REPO, ".venv-upstream", "bin",
                                                        "python")))
    ap.add_argument("--redis-requests", type=int, help="requests of redis-benchmark "
                    "(default 1000000; quick 300000)")
    ap.add_argument("--lease-ttl-ms", type=int, default=5000,
                    help="the master's --default_kv_lease_ttl (default 5000: upstream "
                         "fails a batch read that outlasts the lease with LEASE_EXPIRED, and "
                         "its 512 MiB batches take over 1 s here; cells end with "
                         "remove_all(force=True), and our master keeps a leased object's "
                         "space until its lease ends, which the next cell waits for)")
    ap.add_argument("--timeout", type=int, help="seconds per backend (default 900; quick 120)")
    ap.add_argument("--auth", action="store_true",
                    help="run each of our backends also with a cluster secret (label "
                         "<backend>+auth) and report the cost of authentication per cell")
    ap.add_argument("--passes", type=int, default=1,
                    help="1..15: run every backend this many times, alternating (ours, "
                         "ours-tcp, upstream, ours, ...), and report each cell as the pass "
                         "with the median GB/s (the lower middle one for an even count), "
                         "every pass's GB/s beside it (issue 17: medians of >= 3; "
                         "default 1)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "out", "store"))
    ap.add_argument("--no-docs", action="store_true",
                    help="do not rewrite docs/store-bench.{md,png} after a full run")
    # internal: one backend's run
    ap.add_argument("--role", default="driver", choices=("driver", "backend"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--label", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--log-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    q = args.quick
    args.sizes = ([parse_size(x) for x in args.sizes.split(",")] if args.sizes else
                  (QUICK_SIZES if q else FULL_SIZES))
    args.batches = ([int(x) for x in args.batches.split(",")] if args.batches else
                    (QUICK_BATCHES if q else FULL_BATCHES))
    if any(s < 8 or s % 8 for s in args.sizes) or any(b < 1 for b in args.batches):
        ap.error("sizes must be multiples of 8 bytes, batches >= 1")
    args.seconds = args.seconds or (0.3 if q else 1.0)
    if not 1 <= args.passes <= 15:
        ap.error("--passes must be 1..15")
    args.tcp_streams = tcp_streams()
    if args.tcp_streams is None:
        ap.error(f"MC_TE_TCP_CONNECTIONS={os.environ.get('MC_TE_TCP_CONNECTIONS')!r}: "
                 f"expected 1..{TE_MAX_CONNS}, as the store reads it (unset it for 2)")
    known = BACKENDS + ("ours+auth", "ours-tcp+auth")   # the latter internal (--auth)
    bad = [b for b in args.backends.split(",") if b.strip() and b.strip() not in known]
    if bad:
        ap.error(f"unknown backend(s) {', '.join(bad)}; known: {', '.join(BACKENDS)}")
    if args.role == "backend":
        if args.max_batch_bytes is None:
            ap.error("--max-batch-bytes is required with --role backend")
        return run_backend(args)
    return drive(args)


def measure_anchors(args, group, res, np, when):
    """Raw TCP and memcpy for every size (best of 3 short runs) and redis-benchmark, kept
    per pass in res["anchors"]["runs"][when]; res["anchors"] holds the best of the passes
    so far (the box is shared: the best figure is the conservative limit)."""
    a = res["anchors"]
    run = a.setdefault("runs", {})[when] = {"raw_tcp_gbps": {}, "memcpy_gbps": {},
                                            "raw_tcp_rr_gbps": {}}
    a.setdefault("raw_tcp_rr_gbps", {})
    reps = 3
    sec = max(0.2, args.seconds / 2)
    streams = a["raw_tcp_streams"] = args.tcp_streams
    for s in args.sizes:
        k = str(s)
        # one batch of the largest that runs (--max-batch-bytes), at most 256 MiB
        span = min(max([s * b for b in args.batches if s * b <= args.max_batch_bytes],
                       default=s), 256 * MiB)
        t = max(filter(None, (raw_tcp(group, s, sec, streams, span) for _ in range(reps))),
                default=None)
        rr = max(filter(None, (raw_tcp_rr(group, s, sec) for _ in range(reps))),
                 default=None)
        m = max(memcpy_gbps(s, sec, np) for _ in range(reps))
        run["raw_tcp_gbps"][k], run["memcpy_gbps"][k], run["raw_tcp_rr_gbps"][k] = t, m, rr
        for key, v in (("raw_tcp_gbps", t), ("memcpy_gbps", m), ("raw_tcp_rr_gbps", rr)):
            if v is not None and (a[key].get(k) is None or v > a[key][k]):
                a[key][k] = v
        print(f"  anchor ({when}) size={human(s)}: raw TCP, {streams} streams through "
              f"{human(span)} {fmt(t)} GB/s "
              f"(request/response {fmt(rr)}), memcpy {m:.3f} GB/s (best of {reps})",
              flush=True)
    try:
        n = args.redis_requests or (300_000 if args.quick else 1_000_000)
        both = redis_anchor(group, n)
        for name, key in (("get", "redis"), ("set", "redis_set"),
                          ("get_spread", "redis_spread"), ("set_spread", "redis_set_spread")):
            r = both[name]
            run[key] = r
            print(f"  anchor ({when}) redis-benchmark -P 128 -d 4096 -t {name[:3]}"
                  f"{' -r %d' % REDIS_SPREAD_KEYS if 'spread' in name else ''}: "
                  f"{r['rps']:.0f} requests/s, p50 {r['p50_ms']} ms", flush=True)
            if not (a.get(key) or {}).get("rps") or r["rps"] > a[key]["rps"]:
                a[key] = r
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        run["redis"] = {"error": str(e)}
        a.setdefault("redis", {"error": str(e)})
        print(f"  anchor ({when}) redis unavailable: {e}", flush=True)


def merge_passes(docs):
    """One backend's result from its passes (--passes): the first measured pass's
    document, each cell (matched by op, api, size and batch over every pass) replaced by
    that cell of the pass with the median GB/s (the lower middle for an even count), so
    every figure of a row comes from one pass; the cell keeps every pass's GB/s in
    passes_gbps, in pass order (None where a pass did not measure it). A cell that failed
    or was skipped in a pass keeps that pass's cell (its error or reason shows); one that
    a measuring pass did not reach is an error. A pass that measured nothing (it failed
    before its first cell) is listed in failed_passes and the cells are the median of the
    others; only when every pass is so does the backend read unavailable. wall_s adds
    up."""
    if len(docs) == 1:
        return docs[0]
    measured = [d for d in docs if d.get("cells")]
    out = dict(measured[0] if measured else docs[0])
    out["passes"] = len(docs)
    out["wall_s"] = sum(d.get("wall_s", 0) for d in docs)
    out["errors"] = [e for d in docs for e in d.get("errors", [])]
    failed = [i + 1 for i, d in enumerate(docs) if not d.get("cells")]
    if failed:
        out["failed_passes"] = failed
    if measured:
        out.pop("unavailable", None)
    else:
        out["unavailable"] = "; ".join(sorted({d.get("unavailable") or "no cells"
                                               for d in docs}))
    by_pass = [{} for _ in docs]   # per pass: cell_key -> its first cell of that key
    order = {}                         # every key, in the order the passes first had it
    for d, cells in zip(docs, by_pass):
        for c in d.get("cells", []):
            cells.setdefault(cell_key(c), c)
            order.setdefault(cell_key(c))
    merged = []
    for k in order:
        same = [p[k] for p in by_pass if k in p]
        bad = [c for c in same if c.get("gbps") is None]
        if bad:
            c = dict(bad[0])
        elif len(same) < len(measured):
            c = dict(same[0], gbps=None,
                     error=f"measured in {len(same)} of {len(measured)} passes")
        else:
            c = dict(sorted(same, key=lambda x: x["gbps"])[(len(same) - 1) // 2])
        c["passes_gbps"] = [p[k].get("gbps") if k in p else None for p in by_pass]
        merged.append(c)
    out["cells"] = merged
    return out


def drive(args) -> int:
    import numpy as np
    from mooncake.trace_replay.cluster import ProcessGroup
    t_start = time.monotonic()
    q = args.quick
    timeout = args.timeout or (120 if q else 900)
    if args.max_batch_bytes is None:
        # the node's segment (1/0.7 of a batch) and the client's buffer, plus headroom
        fit = int(mem_available() / 3.5)
        args.max_batch_bytes = 4 * GiB
        while args.max_batch_bytes > 64 * MiB and args.max_batch_bytes > fit:
            args.max_batch_bytes //= 2
    os.makedirs(args.out, exist_ok=True)
    log_dir = tempfile.mkdtemp(prefix="mc-bench-store-")
    group = ProcessGroup(log_dir)
    cmd = ("python bench/bench_store.py" + (" --quick" if q else "") +
           (f" --passes {args.passes}" if args.passes > 1 else ""))
    try:
        commit = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit = ""
    res = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
           "commit": commit or "?",
           "params": {"mode": "quick" if q else "full", "command": cmd,
                      "sizes": args.sizes, "batches": args.batches,
                      "seconds": args.seconds, "min_calls": args.min_calls,
                      "max_batch_bytes": args.max_batch_bytes, "passes": args.passes},
           "anchors": {"raw_tcp_gbps": {}, "memcpy_gbps": {}}, "backends": {}}
    old = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    print(f"bench_store: {res['params']['mode']} run, sizes "
          f"{','.join(human(s) for s in args.sizes)}, batches "
          f"{','.join(map(str, args.batches))}, {args.seconds} s per cell, logs in {log_dir}",
          flush=True)
    try:
        # ---- anchors (again after the store runs: the best of both goes in the ratios)
        measure_anchors(args, group, res, np, "before")
        # ---- store backends
        wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
        if args.auth:
            wanted = [w for b in wanted for w in ((b, b + "+auth") if b in ("ours", "ours-tcp")
                                                  else (b,))]
            token = os.path.join(log_dir, "cluster.token")
            fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, os.urandom(32).hex().encode() + b"\n")
            os.close(fd)
            res["params"]["auth"] = True
        ours_py, ours_why = find_ours_python(args.ours_python)
        passes = {label: [] for label in wanted}   # each pass's result document
        for label in wanted:                        # the table's order
            res["backends"][label] = {"path": PATHS[label]}
        for p, label in ((p, label) for p in range(args.passes) for label in wanted):
            if p and not passes[label]:
                continue   # unavailable in the first pass: not tried again
            b = {"path": PATHS[label]}
            env = dict(os.environ)
            env.pop("MC_FORCE_TCP", None)
            env.pop("MC_AUTH_TOKEN_FILE", None)
            if label.endswith("+auth"):
                env["MC_AUTH_TOKEN_FILE"] = token
            if label == "upstream":
                py = args.upstream_python
                if not os.path.exists(py):
                    b["unavailable"] = (f"no upstream venv ({py}); "
                                        "scripts/setup-upstream-peer.sh creates it")
                    print(f"  [{label}] skipped: {b['unavailable']}", flush=True)
                    res["backends"][label] = b
                    continue
                env.setdefault("MC_LOG_LEVEL", "WARNING")   # upstream logs setup at INFO
                env["MC_REPLAY_EXTRA_PATH"] = PYDIR          # nodes: trace_replay.node
            else:
                py = ours_py
                if not py:
                    b["unavailable"] = ours_why
                    print(f"  [{label}] skipped: {ours_why}", flush=True)
                    res["backends"][label] = b
                    continue
                if label.startswith("ours-tcp"):
                    env["MC_FORCE_TCP"] = "1"
            if args.passes > 1:
                print(f"  [{label}] pass {p + 1} of {args.passes}", flush=True)
            jpath = os.path.join(args.out, f"{label}.json" if args.passes == 1
                                 else f"{label}.pass{p + 1}.json")
            for stale in {jpath, os.path.join(args.out, f"{label}.json")}:
                if os.path.exists(stale):   # this pass's, or a --passes 1 run's
                    os.unlink(stale)
            argv = [py, os.path.abspath(__file__), "--role", "backend", "--label", label,
                    "--json-out", jpath,
                    "--log-dir", os.path.join(log_dir, label if args.passes == 1
                                              else f"{label}.pass{p + 1}"),
                    "--sizes", ",".join(map(str, args.sizes)),
                    "--batches", ",".join(map(str, args.batches)),
                    "--seconds", str(args.seconds), "--min-calls", str(args.min_calls),
                    "--max-batch-bytes", str(args.max_batch_bytes),
                    "--lease-ttl-ms", str(args.lease_ttl_ms)]
            t = time.monotonic()
            rc = run_child(group, label, argv, env, timeout, log_dir)
            doc = json.load(open(jpath)) if os.path.exists(jpath) else {}
            b.update(doc)
            b["path"] = PATHS[label]
            b["wall_s"] = time.monotonic() - t
            if rc != 0:
                why = "; ".join(doc.get("errors", [])) or (
                    "timed out" if rc is None else f"exit status {rc}")
                log = os.path.join(log_dir, f"backend-{label}.log")
                try:
                    tail = open(log, errors="replace").read().strip().splitlines()[-8:]
                except OSError:
                    tail = []
                if not doc.get("cells"):
                    b["unavailable"] = why
                status = 1
                print(f"  [{label}] FAILED ({why}); log {log}:\n    " + "\n    ".join(tail),
                      flush=True)
            if any(c.get("error") for c in b.get("cells", [])):
                status = 1
            passes[label].append(b)
        for label, docs in passes.items():
            if docs:
                res["backends"][label] = merge_passes(docs)
        measure_anchors(args, group, res, np, "after")
    except Interrupted:
        print("bench_store: interrupted, stopping every process it started", flush=True)
        group.stop()
        return 130
    finally:
        group.stop()
        for s, h in old.items():
            signal.signal(s, h)

    res["machine"]["loadavg_end"] = os.getloadavg()
    res["wall_s"] = time.monotonic() - t_start
    analyse(res)
    table, targets, summary = table_lines(res), target_lines(res), summary_lines(res)
    print()
    print("\n".join(table))
    print("\nTargets (issues 5 and 17):")
    print("\n".join(targets))
    print()
    print("\n".join(summary))
    auth = auth_lines(res)
    if auth:
        print("\nAuthentication cost (same run; values/s with the secret / without):")
        print("\n".join(auth))
        res["auth_cost"] = auth
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = markdown(res, table, targets, summary)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md)
    png = os.path.join(args.out, "store-bench.png")
    plotted = plot(res, png)
    print(f"\nresults: {args.out}/results.json, table.md" +
          (", store-bench.png" if plotted else " (no matplotlib: no plot)"))
    if not q and not args.no_docs:
        write_doc(md)
        if plotted:
            shutil.copyfile(png, DOC_PNG)
        print(f"docs: {os.path.relpath(DOC_MD, REPO)}" +
              (f", {os.path.relpath(DOC_PNG, REPO)}" if plotted else ""))
    if status == 0:
        shutil.rmtree(log_dir, ignore_errors=True)
    print(f"bench_store: done in {res['wall_s']:.0f} s" +
          ("" if status == 0 else f"; logs kept in {log_dir}"))
    return status


if __name__ == "__main__":
    sys.exit(main())
