#!/usr/bin/env python3
"""bench_dummy.py: a dummy client's batch_get_into from its shared pool against the same
call made by a real client, in one run (issue 13, "Targets": dummy >= 80% of the real
client for 1 MiB x 16, >= 60% for 4 KiB x 128).

    .venv/bin/python bench/bench_dummy.py [--seconds 3]

Two clusters on 127.0.0.1, so each side reads objects that live in its owner's own
segment (the same path: a local copy out of the owner's segment, no network):
  real   master B and a MooncakeDistributedStore set up in this process with a 256 MiB
         segment; the values are put there; batch_get_into into a registered buffer
  dummy  master A, a `mooncake_client` process owning a 256 MiB segment, and a dummy
         client in this process (setup_dummy, 64 MiB pool); the values are put from the
         pool (so they live in mooncake_client's segment); batch_get_into into the pool:
         the real client copies from its segment straight into the dummy's pool
Rounds alternate real / dummy for --seconds each side per shape; figure: GB/s (1e9
bytes/s) over the calls of the round, p50 per call; the ratio dummy/real. Every value is
checked once before timing. Processes are started in their own groups and stopped on exit.
"""
import argparse
import ctypes
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

BIN = os.path.dirname(sys.executable)
SHAPES = [(1 << 20, 16, 0.80), (4096, 128, 0.60)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port}")


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, args, ready=None):
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        if ready:
            line = b""
            deadline = time.monotonic() + 30
            while ready.encode() not in line:
                if time.monotonic() > deadline or p.poll() is not None:
                    raise RuntimeError(f"{args[0]} did not start: {line[-500:]!r}")
                line += p.stdout.readline()
        return p

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def master(procs):
    rpc, http = free_port(), free_port()
    procs.start([os.path.join(BIN, "mooncake_master"), f"--rpc_port={rpc}",
                 "--rpc_address=127.0.0.1", f"--metrics_port={free_port()}",
                 "--metrics_host=127.0.0.1", "--enable_http_metadata_server=1",
                 f"--http_metadata_server_port={http}",
                 "--http_metadata_server_host=127.0.0.1"])
    wait_port(rpc)
    wait_port(http)
    return f"127.0.0.1:{rpc}", f"http://127.0.0.1:{http}/metadata"


def value(i, size):
    return (np.arange(size, dtype=np.uint32) * 2654435761 + i).astype(np.uint8).tobytes()


def measure(store, keys, ptrs, size, seconds):
    n = len(keys)
    sizes = [size] * n
    times = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(times) < 20:
        t0 = time.perf_counter()
        r = store.batch_get_into(keys, ptrs, sizes)
        times.append(time.perf_counter() - t0)
        if r[0] != size:
            raise RuntimeError(f"batch_get_into: {r[:4]}")
    return n * size * len(times) / sum(times) / 1e9, statistics.median(times) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per side and shape")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per shape")
    args = ap.parse_args()
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    procs = Procs()
    try:
        addr_a, md_a = master(procs)
        addr_b, md_b = master(procs)
        port = random.randint(20000, 60000)
        procs.start([os.path.join(BIN, "mooncake_client"), "--host=127.0.0.1",
                     f"--port={port}", "--global_segment_size=256MB",
                     f"--master_server_address={addr_a}", f"--metadata_server={md_a}"],
                    ready="mooncake_client ready")
        real = MooncakeDistributedStore()
        assert real.setup("127.0.0.1", md_b, 256 << 20, 64 << 20, "tcp", "", addr_b) == 0
        dummy = MooncakeDistributedStore()
        assert dummy.setup_dummy(64 << 20, 0, f"127.0.0.1:{port}") == 0
        cfg = ReplicateConfig()
        cfg.preferred_segment = real.get_hostname()
        rbuf = np.zeros(32 << 20, dtype=np.uint8)
        rbase = rbuf.ctypes.data
        assert real.register_buffer(rbase, rbuf.nbytes) == 0
        src = dummy.alloc_from_mem_pool(24 << 20)
        dst = dummy.alloc_from_mem_pool(24 << 20)
        print(f"{'shape':>14} {'side':>6} {'GB/s':>8} {'p50 us':>9}")
        ok = True
        for size, n, target in SHAPES:
            keys = [f"bench-{size}-{i}" for i in range(n)]
            vals = [value(i, size) for i in range(n)]
            for i, v in enumerate(vals):
                assert real.put(keys[i], v, cfg) == 0
                ctypes.memmove(src + i * size, v, size)
            assert dummy.batch_put_from(keys, [src + i * size for i in range(n)],
                                        [size] * n) == [0] * n
            rptrs = [rbase + i * size for i in range(n)]
            dptrs = [dst + i * size for i in range(n)]
            # correctness once, untimed
            assert real.batch_get_into(keys, rptrs, [size] * n) == [size] * n
            assert dummy.batch_get_into(keys, dptrs, [size] * n) == [size] * n
            for i, v in enumerate(vals):
                assert bytes(rbuf[i * size:(i + 1) * size]) == v
                assert ctypes.string_at(dptrs[i], size) == v
            figs = {"real": [], "dummy": []}
            for _ in range(args.rounds):
                for side, st, ptrs in (("real", real, rptrs), ("dummy", dummy, dptrs)):
                    figs[side].append(measure(st, keys, ptrs, size, args.seconds / args.rounds))
            shape = f"{size // 1024}KiBx{n}" if size < (1 << 20) else f"{size >> 20}MiBx{n}"
            best = {}
            for side in ("real", "dummy"):
                gbs = max(g for g, _ in figs[side])
                p50 = min(p for _, p in figs[side])
                best[side] = gbs
                print(f"{shape:>14} {side:>6} {gbs:8.3f} {p50:9.1f}")
            ratio = best["dummy"] / best["real"]
            verdict = "ok" if ratio >= target else "BELOW TARGET"
            ok &= ratio >= target
            print(f"{shape:>14} ratio dummy/real {ratio:.2f} (target {target:.2f}) {verdict}")
            real.batch_remove(keys, True)
            dummy.batch_remove(keys, True)
        dummy.close()
        real.close()
        return 0 if ok else 1
    finally:
        procs.stop()


if __name__ == "__main__":
    sys.exit(main())
