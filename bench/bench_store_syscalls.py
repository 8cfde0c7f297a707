#!/usr/bin/env python3
"""bench_store_syscalls.py: system calls per key of the store over TCP (issue 17), on
the client, the serving node and the master, counted with `strace -c -f` attached to
each of the three processes only around the measured batches (the same fixed run of
bench/bench_store_ops as bench_store_instr.py: WARMUP batches first, then ITERS measured
batches of BATCH keys of SIZE bytes). Counts, unlike seconds, repeat on a loaded box.

Usage:
  python3 bench/bench_store_syscalls.py [--build build/release] [--ops put,get]
      [--size 4096] [--batch 128] [--iters 40] [--warmup 10] [--same-host]
      [--sets N] [--master-arg FLAG ...] [--no-strace]
Prints, per op and process, the system calls per key (total and the top ones), the
box's CPUs busy during the measured batches (from /proc/stat: everything on the box,
so with --no-strace on an otherwise idle box, how much of it one client's calls keep
busy), and writes <out>/results.json (with the run's sets and master flags). Needs
strace (ptrace permitted on the box) unless --no-strace. When a process fails, the
tail of their log is printed; KEEP_TMP=1 keeps the whole log directory.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench_store_instr import expect, free_port, stop_all, wait_port  # noqa: E402
from bench_store import mem_available  # noqa: E402


def cpu_times():
    """(busy, total) jiffies of the whole box from /proc/stat (busy: all but idle and
    iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v)


def strace_attach(pid, out):
    p = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # strace prints "Process N attached" per thread on stderr once attached
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line or "attached" in line:
            break
    return p


def strace_detach(p):
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)


def parse_summary(path):
    """{syscall: calls} from a strace -c summary."""
    calls = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and re.match(r"^[0-9.]+$", parts[0]) and parts[-1] != "total":
                try:
                    calls[parts[-1]] = int(parts[3])
                except ValueError:
                    pass
    return calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release",
                    help="a meson build dir with bench/bench_store_ops and tools/mooncake_master")
    ap.add_argument("--ops", default="put,get", help="comma list of put, get, exist")
    ap.add_argument("--size", type=int, default=4096, help="value bytes")
    ap.add_argument("--batch", type=int, default=128, help="keys per batch call")
    ap.add_argument("--iters", type=int, default=40, help="measured batches")
    ap.add_argument("--warmup", type=int, default=10, help="unmeasured batches first")
    ap.add_argument("--same-host", action="store_true", help="no MC_FORCE_TCP")
    ap.add_argument("--sets", type=int, default=1,
                    help="get/exist only (put ignores it): distinct batches of keys read in "
                         "turn (1: the same keys every batch, cache-hot like "
                         "redis-benchmark's one key; e.g. 2000: a working set spread over "
                         "the segment); SETS x BATCH x SIZE bytes stay stored, at most half "
                         "of MemAvailable")
    ap.add_argument("--master-arg", action="append", default=[],
                    help="an extra mooncake_master flag, e.g. --rpc_busy_poll_us=0 "
                         "(repeatable)")
    ap.add_argument("--no-strace", action="store_true",
                    help="time the same run without strace (seconds only, noisy)")
    ap.add_argument("--out", default="bench/out/store-syscalls")
    args = ap.parse_args()
    ops_exe = os.path.join(args.build, "bench", "bench_store_ops")
    if not 1 <= args.sets <= 1000000:
        ap.error("--sets: 1 .. 1000000")
    if not os.path.exists(ops_exe):
        ap.error(f"{ops_exe} not found: build it (meson setup {args.build} "
                 f"-Dbuildtype=release -Dtests=enabled && ninja -C {args.build})")
    avail = mem_available()
    # What the node's segment must hold: a get / exist run stores SETS batches once, a put
    # run new keys every batch. One check covers both.
    per_batch = args.size * args.batch
    seg = max(256 << 20, 2 * per_batch * args.sets)
    if "put" in args.ops.split(","):
        seg = max(seg, 4 * per_batch * (args.iters + args.warmup + 2))
    if avail and seg > avail * 3 // 4:
        ap.error(f"the node's segment would be {seg >> 20} MiB (2 x size x batch x sets; "
                 f"with put, 4 x size x batch x (iters + warmup + 2)), more than 3/4 of "
                 f"MemAvailable ({avail >> 20} MiB): lower --iters, --sets or --batch")
    master_exe = os.path.join(args.build, "tools", "mooncake_master")
    ncpu = os.cpu_count() or 1
    env = dict(os.environ)
    if not args.same_host:
        env["MC_FORCE_TCP"] = "1"
    tmp = tempfile.mkdtemp(prefix="store-sc-")
    rpc, http, metrics = free_port(), free_port(), free_port()
    md = f"http://127.0.0.1:{http}/metadata"
    maddr = f"127.0.0.1:{rpc}"
    logs = open(os.path.join(tmp, "stderr.log"), "a")
    procs, rows = [], []
    try:
        master = subprocess.Popen(
            [master_exe, f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
             f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
             "--enable_http_metadata_server=1", f"--http_metadata_server_port={http}",
             "--http_metadata_server_host=127.0.0.1"] + args.master_arg,
            stdout=logs, stderr=logs, env=env, start_new_session=True)
        procs.append(master)
        wait_port(rpc, time.monotonic() + 60, master)
        wait_port(http, time.monotonic() + 60, master)
        node = subprocess.Popen([ops_exe, "node", maddr, md, str(seg)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=logs, env=env, text=True,
                                start_new_session=True)
        procs.append(node)
        expect(node, "ready", time.monotonic() + 60)
        for op in args.ops.split(","):
            cl = subprocess.Popen([ops_exe, "client", maddr, md, op, str(args.size),
                                   str(args.batch), str(args.iters), str(args.warmup)]
                                  + ([str(args.sets)] if args.sets != 1 else []),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs,
                                  env=env, text=True, start_new_session=True)
            procs.append(cl)
            expect(cl, "warm", time.monotonic() + 120)
            who = {"client": cl.pid, "node": node.pid, "master": master.pid}
            tr = {} if args.no_strace else {
                k: strace_attach(pid, os.path.join(tmp, f"{op}-{k}.txt"))
                for k, pid in who.items()}
            c0 = cpu_times()
            cl.stdin.write("go\n")
            cl.stdin.flush()
            info = expect(cl, None, time.monotonic() + 600)
            c1 = cpu_times()
            for p in tr.values():
                strace_detach(p)
            cl.stdin.write("end\n")
            cl.stdin.flush()
            cl.stdin.close()
            if cl.wait(timeout=120) != 0:
                raise RuntimeError(f"client {op} exited with {cl.returncode}")
            keys = info["keys"]
            row = {"op": op, "size": args.size, "batch": args.batch, "iters": args.iters,
                   "keys": keys, "path": "same-host" if args.same_host else "tcp",
                   "seconds": info["seconds"], "load": os.getloadavg()[0],
                   "box_busy_cpus": (c1[0] - c0[0]) / max(1, c1[1] - c0[1]) * ncpu,
                   "sets": args.sets, "master_args": args.master_arg}
            print(f"  {op:<4} {keys} keys in {info['seconds']:.3f} s"
                  f"{'' if args.no_strace else ' under strace'} "
                  f"({args.size * keys / info['seconds'] / 1e9:.3f} GB/s, load "
                  f"{row['load']:.1f}; the box's CPUs busy during them: "
                  f"{row['box_busy_cpus']:.2f} of {ncpu})", flush=True)
            for k in ([] if args.no_strace else who):
                calls = parse_summary(os.path.join(tmp, f"{op}-{k}.txt"))
                tot = sum(calls.values())
                row[k] = {"per_key": tot / keys,
                          "calls_per_key": {n: c / keys for n, c in
                                            sorted(calls.items(), key=lambda x: -x[1])}}
                top = ", ".join(f"{n} {c / keys:.3f}" for n, c in
                                sorted(calls.items(), key=lambda x: -x[1])[:6])
                print(f"  {op:<4} {k:<6}: {tot / keys:.3f} syscalls/key ({top})", flush=True)
            rows.append(row)
        node.stdin.close()
        node.wait(timeout=60)
    except Exception:
        logs.flush()
        with open(os.path.join(tmp, "stderr.log"), errors="replace") as f:
            tail = f.readlines()[-20:]
        print("bench_store_syscalls: a process failed; the last lines of their log:\n" +
              "".join("  " + ln for ln in tail), file=sys.stderr)
        raise
    finally:
        stop_all(procs)
        logs.close()
        if not os.environ.get("KEEP_TMP"):
            shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
