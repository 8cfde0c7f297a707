#!/usr/bin/env python3
"""bench_metadata.py: the store's put/get throughput and the transfer engine's setup
time on each metadata backend, against the HTTP backend measured in the same run
(issue 12, "Targets": etcd and Redis within 5% of HTTP, since metadata is off the data
path; TE setup time reported).

    python bench/bench_metadata.py [--backends http,etcd,redis,p2p] [--rounds 15]
                                   [--size 64KiB] [--batch 16] [--setups 20]

What one run does, on 127.0.0.1 only:
  servers     a real etcd (/usr/bin/etcd, one member, data on tmpfs when writable) and
              a real redis-server (--save '' --appendonly no), on free ports, and for
              each backend its own mooncake_master (with the embedded HTTP metadata
              server for `http`) and one store node (mooncake.trace_replay.node) that
              holds the segment every value goes to; the bench client (this process,
              global_segment_size 0) puts and gets, so every value crosses processes.
              Backends: http = the master's HTTP metadata server; etcd = the etcd
              server, given as upstream's bare host:port; redis = the Redis server
              (db 1); p2p = P2PHANDSHAKE (no metadata server; for reference).
  te-setup    --setups times per backend: TransferEngine().initialize(<unique name>,
              <backend>, "tcp", "") (publishes rpc_meta and the segment descriptor),
              then register_memory of 1 MiB (republishes the descriptor), timed
              together; the engine is destroyed (removes both keys) untimed.
  control     http-b: a second master with its HTTP metadata server, measured like the
              others (--no-control leaves it out): how far http-b's ratio to http
              strays from 1 is what the box's noise allows a ratio to mean.
  put / get   per round, a fresh set of keys: batch_put_from of --batch values of
              --size bytes each, from a registered buffer, until --put-bytes are stored
              (timed), then batch_get_into of the same batches for --seconds (timed);
              every value read is checked once per round, untimed. The etcd and Redis
              servers' own operation counters, read around each timed round, show how
              many metadata requests the data path made (none expected but the
              engines' once-a-second descriptor refresh).
First one untimed warm-up per backend (puts over 60% of its segment: first-touch page
faults stay out of the rounds). Rounds alternate between the backends (http, etcd,
redis, p2p, then the reverse order) so a change of load on the box hits each alike; the
figure per backend is the median over rounds, its ratio the median over rounds of
(backend / http in the same round).
Output: one line per figure with its parameters and the ratio to http, and
<out>/results.json. Exit 0 when every backend ran, 1 otherwise. Every process started is
stopped on exit.
"""
import argparse
import json
import mmap
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for d in (os.path.join(REPO, "python"), os.path.join(REPO, "tests", "integration")):
    if d not in sys.path:
        sys.path.append(d)

# the engines' per-setup INFO line would drown the figures (children inherit this too)
os.environ.setdefault("MC_LOG_LEVEL", "warning")

KiB, MiB = 1 << 10, 1 << 20
BACKENDS = ("http", "etcd", "redis", "p2p")
CONTROL = "http-b"  # a second, identical HTTP backend: its ratio is the run's noise floor
TARGET = 0.95  # etcd and Redis store throughput at least 95% of http's
LEASE_MS = 2000  # read leases: long enough for a get on a loaded box (else LEASE_EXPIRED)


def parse_size(text):
    t = text.strip().lower().replace(" ", "")
    for suf, mul in (("kib", KiB), ("mib", MiB), ("kb", 1000), ("mb", 1000 ** 2), ("", 1)):
        if t.endswith(suf) and t[:len(t) - len(suf)].isdigit():
            return int(t[:len(t) - len(suf)]) * mul
    raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 64KiB)")


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


class Backend:
    """One backend's master + store node + bench client."""

    def __init__(self, name, conn, group, args, master_bin, seg, server=None):
        from mooncake.trace_replay.cluster import free_port, python_module_cmd, wait_port
        import mooncake.store as ms

        self.name, self.args, self.server = name, args, server
        kind = name.split("-")[0]
        rpc, metrics = free_port(), free_port()
        argv = [master_bin, f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
                f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
                f"--default_kv_lease_ttl={LEASE_MS}"]
        if kind == "http":
            hp = free_port()
            argv += ["--enable_http_metadata_server=1", f"--http_metadata_server_port={hp}",
                     "--http_metadata_server_host=127.0.0.1"]
            conn = f"http://127.0.0.1:{hp}/metadata"
        self.conn = conn
        self.master = group.spawn(f"master-{name}", argv)
        wait_port(rpc, 20, self.master.popen, f"mooncake_master ({name})")
        if kind == "http":
            wait_port(hp, 20, self.master.popen, "mooncake_master (metadata)")
        self.master_addr = f"127.0.0.1:{rpc}"
        ready = os.path.join(tempfile.mkdtemp(prefix="mc-bench-md-"), "ready")
        self.node = group.spawn(f"node-{name}", python_module_cmd(
            "mooncake.trace_replay.node", ["--master", self.master_addr, "--metadata", conn,
                                           "--segment-size", str(seg), "--ready-file", ready]))
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if self.node.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"store node for {name} did not come up:\n"
                                   f"{self.node.log_tail()}")
            time.sleep(0.05)
        self.store = ms.MooncakeDistributedStore()
        bb = args.size * args.batch
        rc = self.store.setup("127.0.0.1", conn, 0, max(64 * MiB, 2 * bb + 16 * MiB), "tcp", "",
                              self.master_addr)
        if rc != 0:
            raise RuntimeError(f"bench client setup on {name} ({conn}) returned {rc}")
        import numpy as np
        self.buf = mmap.mmap(-1, bb)
        self.arr = np.frombuffer(self.buf, dtype=np.uint8)
        self.base = self.arr.ctypes.data
        rc = self.store.register_buffer(self.base, bb)
        if rc != 0:
            raise RuntimeError(f"register_buffer on {name} returned {rc}")

    def te_setup(self, n):
        """Seconds per initialize + register_memory, n samples."""
        import numpy as np
        from mooncake.engine import TransferEngine
        from mooncake.trace_replay.cluster import free_port

        mem = np.zeros(1 * MiB, dtype=np.uint8)
        out = []
        for _ in range(n):
            te = TransferEngine()
            host = "127.0.0.1" if self.name == "p2p" else f"127.0.0.1:{free_port()}"
            t = time.perf_counter()
            rc = te.initialize(host, self.conn, "tcp", "")
            rc2 = te.register_memory(mem.ctypes.data, mem.nbytes) if rc == 0 else rc
            out.append(time.perf_counter() - t)
            if rc != 0 or rc2 != 0:
                raise RuntimeError(f"TE setup on {self.name}: initialize {rc}, "
                                   f"register_memory {rc2}")
            te.unregister_memory(mem.ctypes.data)
            del te
        return out

    def put_get(self, put_bytes=None, seconds=None):
        """(put values/s, get values/s, put p50 ms, get p50 ms) of one round."""
        import numpy as np
        a = self.args
        size, batch = a.size, a.batch
        calls = max(1, (put_bytes or a.put_bytes) // (size * batch))
        seconds = a.seconds if seconds is None else seconds
        tag = uuid.uuid4().hex[:8]
        keys = [[f"bm-{tag}-{c}-{j}" for j in range(batch)] for c in range(calls)]
        ptrs = [self.base + j * size for j in range(batch)]
        sizes = [size] * batch
        rows = self.arr.view(np.uint64).reshape(batch, size // 8)
        for j in range(batch):
            rows[j].fill(j + 1)
        lat = []
        t0 = time.perf_counter()
        for c in range(calls):
            t = time.perf_counter()
            rcs = self.store.batch_put_from(keys[c], ptrs, sizes)
            lat.append(time.perf_counter() - t)
            if any(r != 0 for r in rcs):
                raise RuntimeError(f"{self.name}: batch_put_from returned {rcs[:4]}...")
        put_s = time.perf_counter() - t0
        put_vps, put_p50 = calls * batch / put_s, pct(lat, 0.5) * 1e3
        self.arr[:] = 0
        rcs = self.store.batch_get_into(keys[0], ptrs, sizes)
        for j in range(batch):
            if rcs[j] != size or not np.all(rows[j] == j + 1):
                raise RuntimeError(f"{self.name}: value {j} read back wrong (rc {rcs[j]})")
        lat, n = [], 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            t = time.perf_counter()
            rcs = self.store.batch_get_into(keys[n % calls], ptrs, sizes)
            lat.append(time.perf_counter() - t)
            if any(r != size for r in rcs):
                raise RuntimeError(f"{self.name}: batch_get_into returned {rcs[:4]}...")
            n += 1
        get_vps, get_p50 = n * batch / (time.perf_counter() - t0), pct(lat, 0.5) * 1e3
        n = self.store.remove_all(True)
        if n < 0:
            raise RuntimeError(f"{self.name}: remove_all returned {n}")
        return put_vps, get_vps, put_p50, get_p50

    def warm_up(self, seg):
        """Touches most of the node's segment once (first-touch page faults would land in
        the first rounds), then waits out the read leases of what it removed."""
        self.put_get(put_bytes=int(seg * 0.6), seconds=0.1)
        time.sleep(LEASE_MS / 1000 + 0.1)

    def close(self):
        if self.store is not None:
            self.store.unregister_buffer(self.base)
            self.store.close()
            self.store = None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--rounds", type=int, default=15, help="put/get rounds per backend (15)")
    ap.add_argument("--size", type=parse_size, default=64 * KiB, help="value bytes (64KiB)")
    ap.add_argument("--batch", type=int, default=16, help="values per call (16)")
    ap.add_argument("--put-bytes", type=parse_size, default=16 * MiB,
                    help="bytes put per round (16MiB)")
    ap.add_argument("--seconds", type=float, default=0.5, help="get time per round (0.5)")
    ap.add_argument("--setups", type=int, default=20, help="TE setups per backend (20)")
    ap.add_argument("--no-control", action="store_true",
                    help=f"leave out {CONTROL}, the second HTTP backend (noise floor)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "out", "metadata"))
    args = ap.parse_args(argv)
    names = [b for b in args.backends.split(",") if b]
    if not args.no_control and "http" in names and CONTROL not in names:
        names.insert(names.index("http") + 1, CONTROL)
    bad = [b for b in names if b not in BACKENDS + (CONTROL,)]
    if bad or "http" not in names or args.size % 8:
        ap.error(f"backends are {','.join(BACKENDS)} and must include http; size a "
                 f"multiple of 8 (got {bad or args.size})")

    from kv_servers import EtcdServer, RedisServer
    from mooncake.trace_replay.cluster import ProcessGroup, find_tool

    master_bin = find_tool("mooncake_master")
    if not master_bin:
        print("bench: no mooncake_master next to this Python or on PATH "
              "(VENV=.venv scripts/setup.sh)", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    group = ProcessGroup(os.path.join(args.out, "logs"))
    servers, backends, res = [], {}, {"params": vars(args).copy(), "backends": {}}
    res["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                      "load": os.getloadavg()}
    seg = max(256 * MiB, 2 * args.put_bytes + 64 * MiB)
    ok = True
    try:
        conns = {"http": None, CONTROL: None, "p2p": "P2PHANDSHAKE"}
        if "etcd" in names:
            e = EtcdServer(tempfile.gettempdir())
            servers.append(e)
            conns["etcd"] = e.bare
        if "redis" in names:
            r = RedisServer(tempfile.gettempdir())
            servers.append(r)
            conns["redis"] = r.conn(db=1)
        for n in names:
            srv = {"etcd": servers[0] if "etcd" in names else None,
                   "redis": servers[-1] if "redis" in names else None}.get(n)
            backends[n] = Backend(n, conns[n], group, args, master_bin, seg, srv)
            res["backends"][n] = {"conn": backends[n].conn, "put_vps": [], "get_vps": [],
                                  "put_p50_ms": [], "get_p50_ms": [], "md_ops": 0,
                                  "timed_s": 0.0}
        for n in names:
            s = backends[n].te_setup(args.setups)
            res["backends"][n]["te_setup_ms"] = [x * 1e3 for x in s]
        for n in names:
            backends[n].warm_up(seg)
        for rnd in range(args.rounds):
            for n in (names if rnd % 2 == 0 else names[::-1]):
                srv = backends[n].server
                ops0, t0 = srv.ops() if srv else 0, time.perf_counter()
                pv, gv, pp, gp = backends[n].put_get()
                b = res["backends"][n]
                b["timed_s"] += time.perf_counter() - t0
                b["md_ops"] += (srv.ops() - ops0) if srv else 0
                b["put_vps"].append(pv)
                b["get_vps"].append(gv)
                b["put_p50_ms"].append(pp)
                b["get_p50_ms"].append(gp)
    except Exception as e:  # report what ran, name what failed
        print(f"bench: {type(e).__name__}: {e}", file=sys.stderr)
        ok = False
    finally:
        for b in backends.values():
            try:
                b.close()
            except Exception:
                pass
        group.stop(order=["node-", "master-"])
        for s in servers:
            s.stop()

    p = (f"value {args.size // KiB} KiB x batch {args.batch}, {args.put_bytes // MiB} MiB "
         f"put + {args.seconds:g} s get per round, {args.rounds} rounds, median; "
         f"{os.cpu_count()} CPUs, load {res['machine']['load'][0]:.1f}")
    base = res["backends"].get("http", {})
    lines = []
    for n, b in res["backends"].items():
        if not b["get_vps"]:
            continue
        b["put_median"], b["get_median"] = (statistics.median(b["put_vps"]),
                                            statistics.median(b["get_vps"]))
        for op in ("put", "get"):
            v = b[f"{op}_median"]
            # the ratio: median over rounds of (this backend / http in the same round),
            # so a change of the box's load between rounds cancels out
            pairs = [x / y for x, y in zip(b[f"{op}_vps"], base.get(f"{op}_vps", [])) if y]
            ratio = statistics.median(pairs) if pairs else float("nan")
            b[f"{op}_ratio_vs_http"] = ratio
            gbs = v * args.size / 1e9
            verdict = ""
            if n == CONTROL:
                verdict = "  (the same backend twice: this run's noise floor)"
            if n in ("etcd", "redis"):
                verdict = "  (target >= 0.95: " + ("met" if ratio >= TARGET else "missed") + ")"
            lines.append(f"store {op:3s} {n:6s}: {v:9.0f} values/s {gbs:6.2f} GB/s  "
                         f"p50 {statistics.median(b[f'{op}_p50_ms']):7.3f} ms  "
                         f"ratio vs http {ratio:5.3f}{verdict}  [{p}]")
    for n, b in res["backends"].items():
        if backends.get(n) is not None and backends[n].server is not None and b["timed_s"]:
            lines.append(f"metadata  {n:6s}: {b['md_ops']} key-value operations on the server "
                         f"during {b['timed_s']:.1f} s of timed puts and gets "
                         f"({b['md_ops'] / b['timed_s']:.2f}/s; "
                         f"{b['md_ops'] / max(1, sum(len(b[k]) for k in ('put_vps',))):.1f} "
                         f"per round)")
    for n, b in res["backends"].items():
        s = b.get("te_setup_ms")
        if not s:
            continue
        ref = statistics.median(base["te_setup_ms"]) if base.get("te_setup_ms") else None
        med = statistics.median(s)
        b["te_setup_median_ms"] = med
        lines.append(f"te setup  {n:6s}: median {med:7.2f} ms  p90 {pct(s, 0.9):7.2f} ms  "
                     f"ratio vs http {med / ref if ref else float('nan'):5.2f}  "
                     f"[initialize + register_memory 1 MiB, {len(s)} setups]")
    print("\n".join(lines))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0 if ok and all(res["backends"][n].get("get_vps") for n in names) else 1


if __name__ == "__main__":
    sys.exit(main())
