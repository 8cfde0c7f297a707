#!/usr/bin/env python3
"""bench_pg.py: the mooncake-cpu torch.distributed backend against gloo, in one run.

nccl-tests style: for each collective (all_reduce, all_gather, all_to_all), rank count
(--ranks, default 2 and 4, one host) and size (--min..--max, x4 steps, default
4 KiB..64 MiB), both backends run back to back in the same processes (gloo as a second
group) on the same float32 tensors, so the box's load is the same for both figures of a
row. Each row is --reps repetitions (default 5), mooncake and gloo interleaved so both
see the same load; a repetition's time is the mean per op of the slowest rank, and the
row shows the median repetition of each. Printed per row: size (bytes: the all_reduce
tensor, all_gather's output, the all_to_all input per rank), time (us), algbw = size / time
(GB/s), busbw = algbw x (2(n-1)/n for all_reduce, (n-1)/n for the others), then gloo's,
then ratio = busbw_mooncake / busbw_gloo (time ratio gloo/mooncake for <= 16 KiB, where
latency is the figure), the CPU time per op summed over the ranks (ms, every thread of
each process: time spent waiting by polling counts, gloo's blocking waits do not), and
the 1-minute load average when the row finished (the
figures mean little on a box loaded beyond its cores).

--failover: 3 ranks, timeout --timeout s; rank 2 SIGKILLs itself while the survivors run
an all_reduce loop; prints the time from its death to the survivors' completing their
next collective, against the configured timeout.

Usage:
  python3 bench/bench_pg.py [--ranks 2,4] [--min 4K] [--max 64M] [--reps 5]
                            [--ops all_reduce,all_gather,all_to_all]
  python3 bench/bench_pg.py --failover [--timeout 1.0]
"""
import argparse
import os
import signal
import socket
import statistics
import sys
import time


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def fmt_size(n):
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iters_for(size):
    if size <= 64 << 10:
        return 200
    if size <= 1 << 20:
        return 40
    if size <= 16 << 20:
        return 8
    return 3


BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
       "all_to_all": lambda n: (n - 1) / n}


def run_op(dist, torch, op, size, n, group):
    elems = size // 4
    if op == "all_reduce":
        t = torch.ones(elems)
        return lambda: dist.all_reduce(t, group=group)
    if op == "all_gather":
        inp = torch.ones(elems // n)
        out = torch.empty((elems // n) * n)
        return lambda: dist.all_gather_into_tensor(out, inp, group=group)
    inp = torch.ones((elems // n) * n)
    out = torch.empty_like(inp)
    return lambda: dist.all_to_all_single(out, inp, group=group)


def timed(dist, torch, fn, iters, sync):
    fn()  # warm-up (and buffer first touch)
    dist.barrier(group=sync)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(iters):
        fn()
    dt = (time.perf_counter() - t0) / iters
    dc = (time.process_time() - c0) / iters
    v = torch.tensor([dt], dtype=torch.float64)
    dist.all_reduce(v, op=dist.ReduceOp.MAX, group=sync)
    cpu = torch.tensor([dc], dtype=torch.float64)
    dist.all_reduce(cpu, group=sync)
    return float(v), float(cpu)


def worker(rank, n, port, ops, sizes, reps, q):
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), MC_LOG_LEVEL="error")
    import torch
    import torch.distributed as dist
    from mooncake import pg  # noqa: F401  (registers mooncake-cpu)

    torch.set_num_threads(1)
    dist.init_process_group("mooncake-cpu", rank=rank, world_size=n)
    gl = dist.new_group(backend="gloo")
    for op in ops:
        for size in sizes:
            it = iters_for(size)
            f_mc = run_op(dist, torch, op, size, n, None)
            f_gl = run_op(dist, torch, op, size, n, gl)
            mc, glo, cmc, cgl = [], [], [], []
            for _ in range(reps):  # interleaved, so both see the same load
                t, cpu = timed(dist, torch, f_mc, it, gl)
                mc.append(t)
                cmc.append(cpu)
                t, cpu = timed(dist, torch, f_gl, it, gl)
                glo.append(t)
                cgl.append(cpu)
            if rank == 0:
                q.put((op, n, size, statistics.median(mc), statistics.median(glo),
                       statistics.median(cmc), statistics.median(cgl), os.getloadavg()[0]))
    dist.barrier(group=gl)
    if rank == 0:
        q.put(None)
    dist.destroy_process_group()


def bench(args):
    import torch.multiprocessing as mp

    ops = args.ops.split(",")
    sizes = []
    s = parse_size(args.min)
    while s <= parse_size(args.max):
        sizes.append(s)
        s *= 4
    hdr = (f"{'op':<11}{'ranks':>5}{'size':>7} | {'time_us':>10}{'algbw':>8}{'busbw':>8} | "
           f"{'gloo_us':>10}{'algbw':>8}{'busbw':>8} | {'ratio':>9} | {'cpu_ms':>8}{'gloo':>8} | "
           f"{'load':>5}")
    print(hdr)
    print("-" * len(hdr))
    for n in [int(x) for x in args.ranks.split(",")]:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=worker, args=(r, n, port, ops, sizes, args.reps, q))
                 for r in range(n)]
        for p in procs:
            p.start()
        while True:
            item = q.get(timeout=3600)
            if item is None:
                break
            op, n_, size, t_mc, t_gl, c_mc, c_gl, load = item
            f = BUS[op](n_)
            a_mc, a_gl = size / t_mc / 1e9, size / t_gl / 1e9
            ratio = (t_gl / t_mc) if size <= 16 << 10 else (a_mc * f) / (a_gl * f)
            kind = "lat" if size <= 16 << 10 else "bw"
            print(f"{op:<11}{n_:>5}{fmt_size(size):>7} | {t_mc * 1e6:>10.1f}{a_mc:>8.2f}"
                  f"{a_mc * f:>8.2f} | {t_gl * 1e6:>10.1f}{a_gl:>8.2f}{a_gl * f:>8.2f} | "
                  f"{ratio:>5.2f}x {kind} | {c_mc * 1e3:>8.1f}{c_gl * 1e3:>8.1f} | {load:>5.1f}",
                  flush=True)
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


def fo_worker(rank, port, timeout, q):
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), MC_LOG_LEVEL="error")
    import torch
    import torch.distributed as dist
    from mooncake import pg

    dist.init_process_group("mooncake-cpu", rank=rank, world_size=3,
                            pg_options=pg.MooncakeBackendOptions(3, timeout=timeout))
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(1 << 16)
    for it in range(20):
        if rank == 2 and it == 10:
            store.set("bench/death", repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        if rank != 2 and it == 10:
            store.wait(["bench/death"])
        dist.all_reduce(t)
        if rank != 2 and it == 10:
            q.put((rank, time.time() - float(store.get("bench/death"))))
    dist.destroy_process_group()


def failover(args):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=fo_worker, args=(r, port, args.timeout, q)) for r in range(3)]
    for p in procs:
        p.start()
    got = [q.get(timeout=300) for _ in range(2)]
    for p in procs:
        p.join(timeout=60)
    worst = max(d for _, d in got)
    print(f"failover: rank 2 killed during an all_reduce loop (3 ranks, 256 KiB, timeout "
          f"{args.timeout:.3f} s): survivors finished their next collective "
          + ", ".join(f"rank {r} {d * 1e3:.1f} ms" for r, d in sorted(got))
          + f" after the death; target <= timeout + 100 ms = {args.timeout * 1e3 + 100:.0f} ms:"
          f" {'met' if worst <= args.timeout + 0.1 else 'MISSED'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--min", default="4K")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--ops", default="all_reduce,all_gather,all_to_all")
    ap.add_argument("--reps", type=int, default=5,
                    help="repetitions per row, mooncake and gloo interleaved; medians shown")
    ap.add_argument("--failover", action="store_true")
    ap.add_argument("--timeout", type=float, default=1.0)
    args = ap.parse_args()
    if args.failover:
        failover(args)
    else:
        bench(args)


if __name__ == "__main__":
    sys.exit(main())
