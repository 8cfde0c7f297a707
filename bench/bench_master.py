#!/usr/bin/env python3
"""bench_master.py: metadata throughput of mooncake_master against Redis, in one run.

Rows, measured back to back so the box's load is the same for every figure:
  put   put_start + put_end of new keys (one pair per item; batch > 1 uses
        batch_put_start + batch_put_end), value size 64 bytes (metadata only: no bytes
        move), each row on a fresh master
  get   get_replica_list of random keys among --keys complete objects (batch > 1 uses
        batch_get_replica_list)
for batch 1 and 128, 1 and 2 client threads (mooncake_master_ctl bench: the C client
library, one pooled connection per thread), against a master on 127.0.0.1.
Anchor, same run, measured right before each row: redis-server on a free loopback port
and redis-benchmark -P 16 -t set,get -d 64 -q -n N.
Each row prints calls/s, items/s, the Redis figure for the matching op (SET for put, GET
for get) and the ratio items/s / Redis ops/s; each row is run --repeat times alternating
with Redis, and the medians of both are reported. Goal (issue 4): batched items/s >=
Redis.

Usage:
  python3 bench/bench_master.py [--bin DIR] [--seconds 2] [--keys 100000] [--repeat 3]
      [--redis-requests 1000000] [--out bench/out/master] [--baseline DIR]
--bin: where mooncake_master and mooncake_master_ctl are (default: next to this Python,
then PATH). Results: <out>/results.json and <out>/table.md.
--baseline DIR: an A/B run: another build's mooncake_master (e.g. the previous commit's)
runs right next to ours in every repeat (order alternating, same client binary), and each
row adds its median items/s and ours/baseline, so a change is measured under the same load.
--snapshot MODES: the cost of the mutation log (--enable_snapshot, docs/ha.md): every row
is also run, in the same repeat, on a master with --enable_snapshot and
--oplog_sync=<mode> for each mode of the comma list (fsync, write, none), snapshots every
--snapshot-interval seconds into a temporary directory; each mode adds its median items/s
and its ratio to the plain master of the same row. --no-redis skips the Redis anchor.
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def find_tool(name, bin_dir):
    for d in ([bin_dir] if bin_dir else []) + [os.path.dirname(sys.executable)]:
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    p = shutil.which(name)
    if not p:
        sys.exit(f"bench_master: {name} not found (build it, or pass --bin build/<dir>/tools)")
    return p


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_master_row(master_bin, ctl_bin, op, batch, threads, seconds, keys, log_mode=None,
                   snap_interval=1):
    port, metrics = free_port(), free_port()
    extra, tmp = [], None
    if log_mode:
        tmp = tempfile.TemporaryDirectory(prefix="bench-master-snap-")
        extra = ["--enable_snapshot", f"--snapshot_backup_dir={tmp.name}",
                 f"--oplog_sync={log_mode}", f"--snapshot_interval_seconds={snap_interval}"]
    m = subprocess.Popen([master_bin, f"--rpc_port={port}", "--rpc_address=127.0.0.1",
                          f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
                          "--enable_metric_reporting=false", *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, m)
        out = subprocess.run([ctl_bin, f"--master=127.0.0.1:{port}", "bench", f"--op={op}",
                              f"--batch={batch}", f"--threads={threads}",
                              f"--seconds={seconds}", f"--keys={keys}", "--value_size=64"],
                             capture_output=True, text=True, timeout=seconds + 120)
        if out.returncode != 0:
            raise RuntimeError(f"mooncake_master_ctl bench failed: {out.stderr.strip()}")
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        stop(m)
        if tmp:
            tmp.cleanup()


def run_redis(requests):
    server, bench = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if not server or not bench:
        sys.exit("bench_master: redis-server / redis-benchmark not found "
                 "(apt-get install redis-server redis-tools)")
    port = free_port()
    r = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        wait_port(port, r)
        out = subprocess.run([bench, "-h", "127.0.0.1", "-p", str(port), "-P", "16", "-t",
                              "set,get", "-d", "64", "-q", "-n", str(requests)],
                             capture_output=True, text=True, timeout=600)
        figures = {}
        # -q prints progress lines separated by \r, then "SET: 573394.50 requests per second"
        for m in re.finditer(r"(SET|GET): ([0-9.]+) requests per second", out.stdout):
            figures[m.group(1)] = float(m.group(2))
        if set(figures) != {"SET", "GET"}:
            raise RuntimeError(f"cannot parse redis-benchmark output: {out.stdout[-300:]!r}")
        return figures
    finally:
        stop(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", help="directory holding mooncake_master and mooncake_master_ctl")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--redis-requests", type=int, default=1000000)
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each row (alternating with Redis); medians are reported")
    ap.add_argument("--batches", default="1,128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "master"))
    ap.add_argument("--baseline", help="directory of another build's mooncake_master, "
                    "run alternately with ours (A/B)")
    ap.add_argument("--snapshot", default="",
                    help="comma list of --oplog_sync modes (fsync,write,none) to run each "
                    "row with --enable_snapshot too (the log's cost)")
    ap.add_argument("--snapshot-interval", type=int, default=1,
                    help="--snapshot_interval_seconds of those runs")
    ap.add_argument("--no-redis", action="store_true", help="skip the Redis anchor")
    args = ap.parse_args()
    modes = [x for x in args.snapshot.split(",") if x]
    master_bin = find_tool("mooncake_master", args.bin)
    ctl_bin = find_tool("mooncake_master_ctl", args.bin)
    base_bin = None
    if args.baseline:
        base_bin = os.path.join(args.baseline, "mooncake_master")
        if not os.path.exists(base_bin):
            sys.exit(f"bench_master: no mooncake_master in {args.baseline}")
    batches = [int(x) for x in args.batches.split(",")]
    threads = [int(x) for x in args.threads.split(",")]

    print(f"# master: {master_bin}  ({os.cpu_count()} CPUs; loopback; 64-byte values)")
    print("# anchor: redis-benchmark -P 16 -t set,get -d 64 -q "
          f"-n {args.redis_requests}, run right before each row (the box is shared: its "
          "load changes)", flush=True)
    rows = []
    hdr = (f"{'op':<4} {'batch':>5} {'threads':>7} {'calls/s':>10} {'items/s':>11} "
           f"{'redis ops/s':>11} {'ratio':>6}")
    if base_bin:
        print(f"# baseline: {base_bin}")
        hdr += f" {'base items/s':>12} {'ours/base':>9}"
    for mode in modes:
        hdr += f" {'log=' + mode:>11} {'ratio':>6}"
    print(hdr)
    for op in ("put", "get"):
        for b in batches:
            for t in threads:
                # alternate Redis and ours --repeat times; report the medians
                peers, runs, base, logged = [], [], [], {}
                for i in range(args.repeat):
                    if not args.no_redis:
                        peers.append(
                            run_redis(args.redis_requests)["SET" if op == "put" else "GET"])
                    if base_bin and i % 2 == 0:
                        base.append(run_master_row(base_bin, ctl_bin, op, b, t, args.seconds,
                                                   args.keys)["items_per_s"])
                    runs.append(run_master_row(master_bin, ctl_bin, op, b, t, args.seconds,
                                               args.keys))
                    for mode in modes:
                        logged.setdefault(mode, []).append(run_master_row(
                            master_bin, ctl_bin, op, b, t, args.seconds, args.keys,
                            log_mode=mode, snap_interval=args.snapshot_interval))
                    if base_bin and i % 2 == 1:
                        base.append(run_master_row(base_bin, ctl_bin, op, b, t, args.seconds,
                                                   args.keys)["items_per_s"])
                runs.sort(key=lambda x: x["items_per_s"])
                r = dict(runs[len(runs) // 2])
                r["failures"] = sum(x["failures"] for x in runs)
                r["all_items_per_s"] = [round(x["items_per_s"]) for x in runs]
                peer = statistics.median(peers) if peers else float("nan")
                r["all_redis_ops_per_s"] = [round(x) for x in peers]
                r["redis_ops_per_s"] = peer
                r["ratio"] = r["items_per_s"] / peer
                extra = ""
                if base:
                    r["all_baseline_items_per_s"] = [round(x) for x in base]
                    r["baseline_items_per_s"] = statistics.median(base)
                    extra = (f" {r['baseline_items_per_s']:>12.0f} "
                             f"{r['items_per_s'] / r['baseline_items_per_s']:>9.2f}")
                for mode in modes:
                    med = statistics.median(x["items_per_s"] for x in logged[mode])
                    r[f"log_{mode}_items_per_s"] = med
                    r[f"all_log_{mode}_items_per_s"] = [round(x["items_per_s"])
                                                        for x in logged[mode]]
                    r[f"log_{mode}_failures"] = sum(x["failures"] for x in logged[mode])
                    extra += f" {med:>11.0f} {med / r['items_per_s']:>6.2f}"
                rows.append(r)
                print(f"{op:<4} {b:>5} {t:>7} {r['calls_per_s']:>10.0f} "
                      f"{r['items_per_s']:>11.0f} {peer:>11.0f} {r['ratio']:>6.2f}" + extra
                      + (f"  ({r['failures']} failed)" if r["failures"] else ""), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"rows": rows}, f, indent=2)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        ab = " baseline items/s | ours/baseline |" if base_bin else ""
        ab += "".join(f" log={m} items/s | ratio |" for m in modes)
        f.write("| op | batch | threads | calls/s | items/s | Redis ops/s | ratio |" + ab + "\n")
        f.write("|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if base_bin else "")
                + "---:|---:|" * len(modes) + "\n")
        for r in rows:
            f.write(f"| {r['op']} | {r['batch']} | {r['threads']} | {r['calls_per_s']:.0f} | "
                    f"{r['items_per_s']:.0f} | {r['redis_ops_per_s']:.0f} | "
                    f"{r['ratio']:.2f} |")
            if base_bin:
                f.write(f" {r['baseline_items_per_s']:.0f} | "
                        f"{r['items_per_s'] / r['baseline_items_per_s']:.2f} |")
            for m in modes:
                f.write(f" {r[f'log_{m}_items_per_s']:.0f} | "
                        f"{r[f'log_{m}_items_per_s'] / r['items_per_s']:.2f} |")
            f.write("\n")
    print(f"# results: {args.out}/results.json, table.md")


if __name__ == "__main__":
    main()
