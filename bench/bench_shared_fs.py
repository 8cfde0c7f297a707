#!/usr/bin/env python3
"""bench_shared_fs.py: shared-FS DISK replicas (issue 14 item 2, docs/ssd-tier.md): the
throughput of 1 MiB objects written to and read from the --root_fs_dir directory,
against `dd` on the same file system, in one run.

    .venv/bin/python bench/bench_shared_fs.py [--dir DIR] [--objects 256]

A mooncake_master with --root_fs_dir=DIR; a writer store (512 MiB segment) in this
process puts N objects of 1 MiB; "write" = N MiB / (first put -> the master has recorded
the N-th DISK replica: master_offload_successes_total), so it includes the puts, the
client's polls and one fsync per file (each file: temporary name, write, fsync, rename,
then one directory fsync per poll). Then the writer closes (its segment goes, every
object is disk-only) and a reader store (no segment) gets every object: "read" = N MiB /
the time of the N gets (each opens the file, verifies header and xxhash); for context the
same gets before the writer closed (from its memory, over the TCP transport). dd on the same
directory: `dd bs=1M count=N conv=fsync` (one fsync at the end), `oflag=dsync` (a sync
per block), and reads of that file buffered and with `iflag=direct`. The files just
written are in the page cache for both our reads and dd's buffered read.
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.path.dirname(sys.executable)
MIB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(port, name):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return 0.0


def dd(args):
    t = time.perf_counter()
    subprocess.run(["dd", *args], check=True, capture_output=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="the shared directory (default: a temp dir)")
    ap.add_argument("--objects", type=int, default=256)
    a = ap.parse_args()
    root = a.dir or tempfile.mkdtemp(prefix="mc-sfs-bench-")
    os.makedirs(root, exist_ok=True)
    n = a.objects
    rpc, http, mport = free_port(), free_port(), free_port()
    master = subprocess.Popen(
        [os.path.join(BIN, "mooncake_master"), f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
         f"--metrics_port={mport}", "--metrics_host=127.0.0.1",
         "--enable_http_metadata_server=1", f"--http_metadata_server_port={http}",
         "--http_metadata_server_host=127.0.0.1", f"--root_fs_dir={root}",
         "--cluster_id=bench", "--default_kv_lease_ttl=200"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        from mooncake.store import MooncakeDistributedStore

        deadline = time.time() + 20
        while True:
            try:
                metric(mport, "master_keys")
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        addr, md = f"127.0.0.1:{rpc}", f"http://127.0.0.1:{http}/metadata"
        os.environ.setdefault("MC_OFFLOAD_POLL_MS", "20")
        w = MooncakeDistributedStore()
        assert w.setup("127.0.0.1", md, max(512, n + 64) * MIB, 64 * MIB, "tcp", "", addr) == 0
        vals = [os.urandom(64) * (MIB // 64) for _ in range(min(n, 8))]
        t0 = time.perf_counter()
        for i in range(n):
            assert w.put(f"obj-{i}", vals[i % len(vals)]) == 0
        while metric(mport, "master_offload_successes_total") < n:
            time.sleep(0.005)
        t_write = time.perf_counter() - t0
        r = MooncakeDistributedStore()
        assert r.setup("127.0.0.1", md, 0, 64 * MIB, "tcp", "", addr) == 0
        t0 = time.perf_counter()
        for i in range(n):  # the same gets from the writer's memory, for context
            assert r.get(f"obj-{i}") == vals[i % len(vals)], f"obj-{i}"
        t_mem = time.perf_counter() - t0
        w.close()
        time.sleep(0.3)  # past the read leases of the gets above
        t0 = time.perf_counter()
        for i in range(n):
            v = r.get(f"obj-{i}")
            assert v == vals[i % len(vals)], f"obj-{i}"
        t_read = time.perf_counter() - t0
        kinds = {("disk" if d.is_disk_replica() else "memory")
                 for d in r.get_replica_desc("obj-0")}
        assert kinds == {"disk"}, kinds
        r.close()
        f = os.path.join(root, "dd.bin")
        t_dd_w = dd(["if=/dev/zero", f"of={f}", "bs=1M", f"count={n}", "conv=fsync"])
        t_dd_ws = dd(["if=/dev/zero", f"of={f}", "bs=1M", f"count={n}", "oflag=dsync"])
        t_dd_r = dd([f"if={f}", "of=/dev/null", "bs=1M"])
        try:
            t_dd_rd = dd([f"if={f}", "of=/dev/null", "bs=1M", "iflag=direct"])
        except subprocess.CalledProcessError:
            t_dd_rd = float("nan")
        os.unlink(f)
        mb = n * MIB / 1e6
        print(f"shared-FS DISK replicas, {n} x 1 MiB objects, directory {root}")
        print(f"{'what':<44} {'MB/s':>9} {'ratio':>7}")
        rows = [("objects written (put -> DISK replica)", mb / t_write, mb / t_write / (mb / t_dd_w)),
                ("dd bs=1M conv=fsync", mb / t_dd_w, 1.0),
                ("dd bs=1M oflag=dsync", mb / t_dd_ws, None),
                ("objects read from the files (get)", mb / t_read, mb / t_read / (mb / t_dd_r)),
                ("dd bs=1M read (page cache)", mb / t_dd_r, 1.0),
                ("dd bs=1M iflag=direct read", mb / t_dd_rd, None),
                ("(same gets from the writer's memory, TCP)", mb / t_mem, None)]
        for name, v, ratio in rows:
            print(f"{name:<44} {v:>9.0f} {'' if ratio is None else f'{ratio:.2f}':>7}")
    finally:
        os.killpg(master.pid, signal.SIGTERM)
        master.wait(10)
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
