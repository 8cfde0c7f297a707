"""`mooncake_trace_replay`: replay a FAST'25 KV-cache trace through a store and check
every byte (see the package docstring; --help lists the options)."""
import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

from . import models
from .backends import (BackendUnavailable, RedisBackend, StoreBackend, check_store_importable,
                       shm_entries)
from .blocks import BlockCodec
from .cluster import (LocalCluster, ProcessGroup, find_tool, peak_rss_bytes, start_redis)
from .models import BLOCK_TOKENS, PRESETS, fmt_bytes, parse_size
from .report import (LEGEND, files_note, summarize, table, timeseries, verdict, write_json,
                     write_png)
from .sim import simulate_ideal, simulate_lru
from .trace import TraceError, count_lines, load_trace, synthetic_trace, write_trace

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
MASTER_METRICS_PORT = 9003    # mooncake_master's default --metrics_port (upstream's too)

DEFAULTS = dict(backend="store", nodes=2, segment_size="256MiB", concurrency=1,
                time_scale=0.0, out="replay-out", seed=0, synthetic_requests=1000,
                lease_ttl_ms=200)
DEMO = dict(backend="store", nodes=2, segment_size="128MiB", concurrency=1, time_scale=0.0,
            out="demo-out", seed=0, synthetic_requests=1500, lease_ttl_ms=200)

EPILOG = models.presets_help() + """

backends:
  store     mooncake.store.MooncakeDistributedStore (this package). Starts a local cluster:
            mooncake_master (embedded HTTP metadata server) + --nodes store nodes of
            --segment-size each, on 127.0.0.1; or --master/--metadata for a running one.
  redis     redis-py pipelines (EXISTS/GET/SET) against a redis-server it starts on
            127.0.0.1 with maxmemory = pool size and allkeys-lru; or --redis-addr.
  upstream  the same as store, run with upstream Mooncake's CPU build
            (mooncake-transfer-engine-non-cuda) from its own venv (--upstream-python;
            scripts/setup-upstream-peer.sh creates .venv-upstream).
  The pool is --nodes x --segment-size bytes for every backend; the LRU reference uses
  pool // block bytes blocks. With --master the pool is the cluster's own capacity
  (master_total_capacity_bytes on --metrics-url, by default http://MASTER-HOST:9003/metrics)
  unless --nodes/--segment-size are given; when it cannot be read the run says so and
  has no LRU reference. A cluster with no memory mounted is refused (exit 2).

output: a progress bar, the final table, OUT/replay.json (every figure), OUT/replay.png
(hit rate and throughput over time, latency CDF), OUT/logs/ (child processes).
Exit status: 0 all good; 1 errors or corrupt blocks; 2 bad usage or backend unavailable;
130 interrupted (results so far are still written).
"""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mooncake_trace_replay",
        description="Replay a FAST'25 KV-cache trace (JSONL: timestamp, input_length, "
                    "output_length, hash_ids of 512-token prefix blocks) through a KV "
                    "store. Per request: batch exist over its blocks -> the cached prefix "
                    "is the longest run of existing blocks from the start; batch get that "
                    "prefix into registered memory and verify every byte; batch put the "
                    "missing blocks. Reports hit rates against an infinite cache and an "
                    "exact LRU of the same capacity.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("trace")
    g.add_argument("--trace", metavar="PATH",
                   help="FAST'25 JSONL trace (e.g. ../shared/traces/conversation_trace.jsonl)."
                        " Without it a SYNTHETIC trace of the same shape is generated "
                        "(prefix sharing, multi-turn growth) and labelled so everywhere")
    g.add_argument("--synthetic-requests", type=int, metavar="N",
                   help=f"requests in the synthetic trace (default "
                        f"{DEFAULTS['synthetic_requests']}; --max-requests also caps it)")
    g.add_argument("--max-requests", type=int, metavar="N",
                   help="replay only the first N requests")
    g.add_argument("--seed", type=int, help="synthetic-trace seed (default 0)")
    g = ap.add_argument_group("block size (block bytes = 512 x bytes per token)")
    g.add_argument("--model", choices=sorted(PRESETS),
                   help="take bytes/token from a model preset (table below)")
    g.add_argument("--bytes-per-token", type=int, metavar="B",
                   help=f"KV bytes per token (default {models.DEFAULT_BYTES_PER_TOKEN}, "
                        "i.e. 64 KiB blocks)")
    g.add_argument("--block-bytes", metavar="SIZE",
                   help="block size directly (e.g. 4KiB; a multiple of 8); overrides the two "
                        "above")
    g = ap.add_argument_group("replay")
    g.add_argument("--concurrency", type=int, metavar="N",
                   help="requests in flight, one backend session each (default 1)")
    g.add_argument("--time-scale", type=float, metavar="X",
                   help="0 = as fast as possible (default), 1 = the trace's real timing, "
                        "0.1 = ten times faster than real")
    g.add_argument("--key-prefix", metavar="S",
                   help="key = prefix + hash id (default: 'replay-<random>/', fresh per run)")
    g = ap.add_argument_group("backend and cluster")
    g.add_argument("--backend", choices=("store", "redis", "upstream"),
                   help="default store")
    g.add_argument("--nodes", type=int, metavar="N",
                   help="store nodes of the local cluster (default 2)")
    g.add_argument("--segment-size", metavar="SIZE",
                   help="bytes each node contributes (default 256MiB); pool = nodes x this")
    g.add_argument("--master", metavar="ADDR",
                   help="use a running cluster: master host:port, or the etcd:// / redis:// "
                        "locator of HA masters (docs/ha.md) (with --metadata)")
    g.add_argument("--metadata", metavar="URL",
                   help="metadata server of that cluster, e.g. http://127.0.0.1:8080/metadata")
    g.add_argument("--metrics-url", metavar="URL",
                   help="its master's /metrics (the pool's size, evictions and key count; "
                        f"default with --master: http://MASTER-HOST:{MASTER_METRICS_PORT}"
                        "/metrics)")
    g.add_argument("--redis-addr", metavar="HOST:PORT",
                   help="use a running redis-server instead of starting one")
    g.add_argument("--lease-ttl-ms", type=int, metavar="MS",
                   help="--default_kv_lease_ttl of the local master (default 200). Every "
                        "exist/get leases the block, and eviction skips leased blocks. The "
                        "replay runs the trace hundreds of times faster than real time, so a "
                        "lease in wall-clock ms pins that many times more of the trace: "
                        "upstream's 10000 (or even 1000) would pin most of a small pool and "
                        "force eviction of the blocks just written. 200 ms of replay is still "
                        "about a minute of the trace's own time")
    g.add_argument("--eviction-high-watermark", type=float, metavar="R",
                   help="--eviction_high_watermark_ratio of the local master: eviction runs "
                        "when more than this fraction of the pool is used (default: the "
                        "master's, upstream's 0.90)")
    g.add_argument("--eviction-ratio", type=float, metavar="R",
                   help="--eviction_ratio of the local master: the fraction of the pool one "
                        "eviction pass frees (default: the master's, upstream's 0.05)")
    g.add_argument("--ssd-offload-path", metavar="DIR",
                   help="give every store node a disk tier (docs/ssd-tier.md) in DIR/node-<i> "
                        "and run the local master with --enable_offload --offload_on_evict: "
                        "blocks evicted from memory go to disk and are read back from there; "
                        "the report splits hits into memory and disk hits")
    g.add_argument("--ssd-size", metavar="SIZE",
                   help="bytes of all the disk tiers together (with --ssd-offload-path; "
                        "default: no limit but the file system's). The LRU reference for "
                        "memory + disk uses pool + this")
    g.add_argument("--master-bin", metavar="PATH",
                   help="mooncake_master to start (default: next to this Python, then PATH)")
    g.add_argument("--upstream-python", metavar="PATH",
                   help="Python of the venv with upstream's build (default: "
                        "$MC_UPSTREAM_PYTHON, else .venv-upstream/bin/python in the current "
                        "directory or a parent)")
    g = ap.add_argument_group("output")
    g.add_argument("--out", metavar="DIR", help="output directory (default replay-out)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--no-legend", action="store_true",
                   help="do not explain the figures under the final table")
    g.add_argument("--demo", action="store_true",
                   help="the embedded default that `make demo` runs: store backend, local "
                        "2-node cluster of 128 MiB segments, 1500 synthetic requests, "
                        "64 KiB blocks, output in demo-out/ (explicit options still win)")
    return ap


def _fail(msg: str) -> int:
    print(f"mooncake_trace_replay: {msg}", file=sys.stderr)
    return EXIT_USAGE


def _resolve(args):
    base = DEMO if args.demo else DEFAULTS
    args.pool_given = args.nodes is not None or args.segment_size is not None
    for k, v in base.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.block_bytes is not None:
        args.block_bytes = parse_size(args.block_bytes)
        if args.block_bytes <= 0 or args.block_bytes % 8:
            raise ValueError(f"--block-bytes must be a positive multiple of 8, got "
                             f"{args.block_bytes}")
        args.bytes_per_token = args.block_bytes / BLOCK_TOKENS
        if args.bytes_per_token == int(args.bytes_per_token):
            args.bytes_per_token = int(args.bytes_per_token)
    else:
        if args.bytes_per_token is None:
            args.bytes_per_token = (PRESETS[args.model].bytes_per_token if args.model
                                    else models.DEFAULT_BYTES_PER_TOKEN)
        elif args.model:
            raise ValueError("give --model or --bytes-per-token, not both")
        if args.bytes_per_token <= 0:
            raise ValueError("--bytes-per-token must be positive")
        args.block_bytes = BLOCK_TOKENS * args.bytes_per_token
    args.segment_size = parse_size(args.segment_size)
    for name in ("nodes", "concurrency"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.segment_size < 1:
        raise ValueError("--segment-size must be positive")
    if args.time_scale < 0:
        raise ValueError("--time-scale must be >= 0")
    if args.lease_ttl_ms < 2:
        raise ValueError("--lease-ttl-ms must be >= 2 (a read is trusted only until 1 ms "
                         "before its lease ends, else it fails with LEASE_EXPIRED -707, so "
                         "0 or 1 fails every read; docs/consistency.md \"Lease end\")")
    if args.max_requests is not None and args.max_requests < 0:
        raise ValueError("--max-requests must be >= 0")
    if (args.master is None) != (args.metadata is None):
        raise ValueError("--master and --metadata go together")
    if args.master and args.backend == "redis":
        raise ValueError("--master/--metadata are for the store and upstream backends")
    if args.redis_addr and args.backend != "redis":
        raise ValueError("--redis-addr is for --backend redis")
    for name in ("eviction_high_watermark", "eviction_ratio"):
        v = getattr(args, name)
        if v is not None and not 0.0 <= v <= 1.0:
            raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1], got {v}")
        if v is not None and (args.master or args.backend == "redis"):
            raise ValueError(f"--{name.replace('_', '-')} configures the master the tool "
                             "starts (store and upstream backends, no --master)")
    if args.ssd_size is not None:
        if not args.ssd_offload_path:
            raise ValueError("--ssd-size goes with --ssd-offload-path")
        args.ssd_size = parse_size(args.ssd_size)
        if args.ssd_size < 1:
            raise ValueError("--ssd-size must be positive")
    if args.ssd_offload_path and (args.master or args.backend == "redis"):
        raise ValueError("--ssd-offload-path configures the nodes of the cluster the tool "
                         "starts (store backend, no --master; a running cluster's disk "
                         "tier is reported from its master's metrics anyway)")
    if args.key_prefix is None:
        args.key_prefix = f"replay-{secrets.token_hex(4)}/"
    args.pool_bytes = args.nodes * args.segment_size
    args.metrics_derived = False
    # an HA locator (etcd://, redis://; docs/ha.md) names no master host to derive from
    if args.master and not args.metrics_url and "://" not in args.master:
        args.metrics_url = default_metrics_url(args.master)
        args.metrics_derived = True


def default_metrics_url(master: str) -> str:
    """The /metrics URL of the master at `master` ("host:port", "[v6]:port") when it
    runs with the default --metrics_port (9003) on the same host."""
    if master.startswith("["):
        host = master[:master.index("]") + 1] if "]" in master else master
    else:
        host = master.rpartition(":")[0] if ":" in master else master
    return f"http://{host or '127.0.0.1'}:{MASTER_METRICS_PORT}/metrics"


def _split_host_port(addr: str, default_port: int | None = None):
    """("host", port) of "host:port" / "[v6]:port"; port None when absent (and no
    default)."""
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif addr.count(":") == 1:
        host, _, port = addr.partition(":")
    else:
        host, port = addr, ""
    try:
        return host or "127.0.0.1", int(port) if port else default_port
    except ValueError:
        return host, None


def _no_answer(host: str, port: int | None, timeout: float = 3.0) -> str | None:
    """None when host:port accepts a TCP connection, else why not."""
    if port is None:
        return "no port in the address"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as e:
        return e.strerror or str(e)


def _check_cluster_reachable(args):
    """--master/--metadata: both must answer before anything else is read. Without this,
    a dead master looked like an empty cluster: the metrics URL derived from --master
    (the default port 9003) may belong to another master on that host, which holds no
    memory or another pool. Raises BackendUnavailable naming the address and what to
    check."""
    scheme, sep, rest = args.master.partition("://")
    if sep:  # HA masters (docs/ha.md): the first etcd / Redis endpoint must answer
        first = rest.replace(",", ";").split(";")[0].rpartition("@")[2].split("/")[0]
        host, port = _split_host_port(first, 6379 if scheme == "redis" else 2379)
    else:
        host, port = _split_host_port(args.master, 50051)
    why = _no_answer(host, port)
    if why and sep:
        raise BackendUnavailable(
            f"cannot reach {scheme} at {host}:{port}, where the HA masters of --master "
            f"{args.master} publish their leader: {why}")
    if why:
        raise BackendUnavailable(
            f"cannot reach mooncake_master at {args.master} (--master): {why}. Is it "
            f"running, with --rpc_port={port} on that host? (Its metrics were not read: "
            "they could belong to another master.)")
    u = urllib.parse.urlsplit(args.metadata)
    if u.scheme in ("http", "https"):
        try:
            mport = u.port or (443 if u.scheme == "https" else 80)
        except ValueError:
            mport = None
        why = _no_answer(u.hostname or "127.0.0.1", mport)
        if why:
            raise BackendUnavailable(
                f"cannot reach the metadata server {args.metadata} (--metadata): {why}. Is "
                f"mooncake_master running with --enable_http_metadata_server=1 and "
                f"--http_metadata_server_port={mport} (or mooncake_http_metadata_server on "
                "that port)?")


def _pool_of_cluster(args, backend, meta):
    """--master: sets args.pool_bytes (what the LRU reference models) and the JSON's
    pool fields from the cluster's own capacity (master_total_capacity_bytes), unless
    --nodes/--segment-size were given. pool_bytes becomes None when the capacity cannot be
    read and was not given: the run says so and has no LRU reference. Raises
    BackendUnavailable when the cluster holds no memory (nothing mounted)."""
    url = args.metrics_url
    how = (f"derived from --master and the default metrics port {MASTER_METRICS_PORT}"
           if args.metrics_derived else "--metrics-url")
    cap = backend.capacity_bytes()
    meta["metrics_url"] = url
    meta["cluster_capacity_bytes"] = cap
    if cap == 0:
        raise BackendUnavailable(
            f"the cluster of master {args.master} holds no memory: its "
            f"master_total_capacity_bytes is 0 ({url}), so no store node has mounted a "
            "segment and every put would fail; start store nodes (setup with "
            "global_segment_size > 0) first")
    if cap is not None:
        _say(f"the cluster holds {fmt_bytes(cap)} (master_total_capacity_bytes at {url})")
        if not args.pool_given:
            args.pool_bytes = meta["pool_bytes"] = cap
            meta["pool_source"] = f"the master's master_total_capacity_bytes ({url})"
            return
        meta["pool_source"] = "--nodes x --segment-size (given)"
        if cap != args.pool_bytes:
            _say(f"note: the cluster holds {fmt_bytes(cap)} but --nodes x --segment-size "
                 f"says {fmt_bytes(args.pool_bytes)}; the LRU reference uses the latter")
        return
    why = f"no master_total_capacity_bytes from {url} ({how})"
    fix = ("pass --metrics-url URL of its master's /metrics" if args.metrics_derived else
           "check that --metrics-url is its master's /metrics")
    if args.metrics_derived:
        backend.metrics_url = None     # not there: do not wait on it for every sample
        meta["metrics_url"] = None
    if args.pool_given:
        meta["pool_source"] = (f"--nodes x --segment-size (given); the cluster's own "
                               f"capacity is unknown: {why}")
        _say(f"note: the cluster's capacity is unknown ({why}); the LRU reference uses "
             f"--nodes x --segment-size = {fmt_bytes(args.pool_bytes)}")
        return
    args.pool_bytes = meta["pool_bytes"] = None
    meta["pool_source"] = (f"unknown: {why}; {fix} (or pass --nodes and --segment-size) "
                           "for an LRU reference of the cluster's size")
    _say(f"WARNING: the cluster's capacity is unknown ({why}): the run has no LRU "
         f"reference and no eviction figures; {fix}, or pass --nodes N --segment-size SIZE")


# --------------------------------------------------------------------- upstream re-exec

def _find_upstream_python(explicit):
    if explicit:
        return explicit
    env = os.environ.get("MC_UPSTREAM_PYTHON")
    if env:
        return env
    d = os.getcwd()
    while True:
        cand = os.path.join(d, ".venv-upstream", "bin", "python")
        if os.path.exists(cand):
            return cand
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _our_root() -> str:
    """The directory that holds this package's `mooncake/`."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_upstream(args, argv) -> int:
    py = _find_upstream_python(args.upstream_python)
    if not py or not os.path.exists(py):
        return _fail("--backend upstream needs upstream Mooncake's CPU build in its own venv; "
                     "none found (create it with scripts/setup-upstream-peer.sh, or pass "
                     "--upstream-python /path/to/venv/bin/python)")
    env = dict(os.environ)
    env["MC_REPLAY_EXTRA_PATH"] = _our_root()
    env["MC_REPLAY_UPSTREAM_CHILD"] = "1"
    env.setdefault("MC_LOG_LEVEL", "WARNING")    # upstream logs every setup at INFO
    boot = (f"import sys, runpy; sys.path.append({_our_root()!r}); "
            "runpy.run_module('mooncake.trace_replay', run_name='__main__', alter_sys=True)")
    p = subprocess.Popen([py, "-c", boot, *argv], env=env, start_new_session=True)

    def forward(sig, _frame):
        try:
            p.send_signal(sig)
        except ProcessLookupError:
            pass
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                return p.wait()
            except KeyboardInterrupt:
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if p.poll() is None:
            p.kill()
            p.wait()


# --------------------------------------------------------------------------- main run

class _Progress:
    def __init__(self, total, label, enabled):
        self.lock = threading.Lock()
        self.bar = None
        self.last = 0.0
        self.label = label
        self.enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="req", desc=label, file=sys.stderr,
                                mininterval=0.5, dynamic_ncols=True, smoothing=0.1)
            except ImportError:
                pass

    @staticmethod
    def _hit(st) -> str:
        return f"hit {100 * st.block_hits / max(st.blocks, 1):.1f}%"

    def _label(self, st):
        self.bar.set_postfix_str(f"{self._hit(st)} corrupt {st.corrupt} err {st.error_total}",
                                 refresh=False)

    def __call__(self, st):
        with self.lock:
            now = time.monotonic()
            if self.bar is not None:
                self.bar.update(1)
                if now - self.last > 0.5:
                    self.last = now
                    self._label(st)
            elif self.enabled and now - self.last > 5:
                self.last = now
                print(f"{self.label}: {st.requests} requests, {self._hit(st)}", file=sys.stderr,
                      flush=True)

    def close(self, st=None):
        """Closes the bar; st (the final stats) refreshes its hit/corrupt/err label first,
        which a run shorter than the 0.5 s refresh interval would otherwise never show."""
        if self.bar is not None:
            if st is not None:
                self._label(st)
            self.bar.close()


class _Occupancy(threading.Thread):
    """Samples the backend's keys held and evictions every INTERVAL_S during the replay
    (the store keeps some of its pool free: eviction starts above the high watermark)."""
    INTERVAL_S = 0.1

    def __init__(self, backend):
        super().__init__(daemon=True, name="replay-occupancy")
        self.backend = backend
        self.halt = threading.Event()
        self.samples = []            # [t since start (s), keys held, evictions so far]
        self.t0 = time.perf_counter()

    def _sample_once(self):
        try:
            kh, ev = self.backend.sample()
        except Exception:            # a sample is optional; the replay goes on
            return
        if kh is not None:
            self.samples.append([round(time.perf_counter() - self.t0, 3), kh, ev])

    def run(self):
        while not self.halt.wait(self.INTERVAL_S):
            self._sample_once()

    def stop(self):
        """Stops sampling and takes one last sample, so that a replay shorter than
        INTERVAL_S (or one whose samples all failed under load) still has the final
        occupancy."""
        self.halt.set()
        self.join(timeout=5)
        if not self.is_alive():       # (still in a sample of a hung backend: no other)
            self._sample_once()

    def mean_after_eviction(self) -> int | None:
        """Mean keys held over the samples taken once eviction had begun, or None."""
        vals = [k for _, k, e in self.samples if e]
        return round(sum(vals) / len(vals)) if vals else None


def _say(msg):
    print(f"replay: {msg}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    """Entry point of the console script. Returns the exit status (see --help)."""
    raw = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(raw)
    try:
        _resolve(args)
    except ValueError as e:
        return _fail(str(e))
    upstream_child = os.environ.get("MC_REPLAY_UPSTREAM_CHILD") == "1"
    # the store client logs each setup at INFO; keep the terminal for the replay's own
    # output (set MC_LOG_LEVEL=INFO to see them). Read when mooncake.store loads, below.
    os.environ.setdefault("MC_LOG_LEVEL", "WARNING")
    # same-host segments are mapped with their page tables filled (MC_TE_PREFAULT, and
    # the local nodes populate their segments, cluster.py): no minor fault per 4 KiB in
    # the first seconds of a run. MC_TE_PREFAULT=0 turns it off.
    os.environ.setdefault("MC_TE_PREFAULT", "1")
    if args.backend == "upstream" and not upstream_child:
        return _run_upstream(args, raw)

    # ---- the trace
    try:
        if args.trace:
            requests = load_trace(args.trace, args.max_requests)
            in_trace = count_lines(args.trace)
        else:
            n = args.synthetic_requests
            if args.max_requests is not None:
                n = min(n, args.max_requests)
            requests = synthetic_trace(n, seed=args.seed)
            in_trace = n
    except (OSError, TraceError) as e:
        return _fail(f"cannot read the trace: {e}")
    if not requests:
        if args.max_requests == 0:
            return _fail("--max-requests 0 selects no requests: nothing to replay")
        if args.trace:
            return _fail(f"the trace {args.trace} holds no requests (an empty file, or "
                         "only blank lines): nothing to replay")
        return _fail("--synthetic-requests must be >= 1: nothing to replay")
    synthetic = not args.trace
    if synthetic:
        _say(f"SYNTHETIC trace: {len(requests)} requests from the built-in generator "
             f"(seed {args.seed}); pass --trace PATH for a real FAST'25 trace")
    codec = BlockCodec(args.block_bytes)
    max_blocks = max((len(r.hash_ids) for r in requests), default=1)
    slots = max(1, min(max_blocks, (256 << 20) // args.block_bytes))
    os.makedirs(args.out, exist_ok=True)
    if synthetic:
        write_trace(os.path.join(args.out, "synthetic_trace.jsonl"), requests)

    meta = {
        "tool": "mooncake_trace_replay", "backend": args.backend,
        "trace": {"path": os.path.abspath(args.trace) if args.trace else None,
                  "synthetic": synthetic, "seed": args.seed if synthetic else None,
                  "requests_in_trace": in_trace, "requests_selected": len(requests)},
        "block_bytes": args.block_bytes, "bytes_per_token": args.bytes_per_token,
        "model": args.model, "block_tokens": BLOCK_TOKENS, "concurrency": args.concurrency,
        "time_scale": args.time_scale, "key_prefix": args.key_prefix, "nodes": args.nodes,
        "segment_size": args.segment_size, "pool_bytes": args.pool_bytes,
        "buffer_slots": slots, "interrupted": False, "argv": raw,
        # "c" (the extension's loops) or "numpy": the codec's cost is in every backend's
        # figures, so a comparison of backends wants the same path in each run
        "block_codec": codec.path,
        "master_settings": None if (args.master or args.backend == "redis") else {
            "default_kv_lease_ttl_ms": args.lease_ttl_ms,
            "eviction_high_watermark_ratio": args.eviction_high_watermark,
            "eviction_ratio": args.eviction_ratio,
            "ssd_offload_path": args.ssd_offload_path, "ssd_size": args.ssd_size},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

    # ---- signals: the first Ctrl-C/SIGTERM during the replay stops after the requests in
    # flight; any other one (or one during setup) aborts with KeyboardInterrupt. Cleanup
    # runs either way.
    stop = threading.Event()
    phase = {"replay": False}

    def on_signal(sig, _frame):
        if phase["replay"] and not stop.is_set():
            stop.set()
            meta["interrupted"] = True
            _say("interrupted: finishing the requests in flight (again to abort)")
            return
        meta["interrupted"] = True
        raise KeyboardInterrupt
    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    group = ProcessGroup(os.path.join(args.out, "logs"))
    shm_before = shm_entries()
    backend = None
    sessions = []
    stats = None
    wall = 0.0
    failure = None
    progress = None
    occupancy = None
    try:
        backend, cluster_desc = _start_backend(args, group, upstream_child)
        meta["cluster"] = cluster_desc
        meta["backend_info"] = backend.describe()
        if args.master:
            _pool_of_cluster(args, backend, meta)
        else:
            meta["pool_source"] = "--nodes x --segment-size of the cluster this tool started"
        for _ in range(args.concurrency):
            sessions.append(backend.session(slots, args.block_bytes))
        pool = fmt_bytes(args.pool_bytes) if args.pool_bytes else "UNKNOWN"
        # from the "running" line on, a first signal stops after the requests in flight
        # (run_replay returns at once when it is already set) and the results are written
        phase["replay"] = True
        _say(f"running: {len(requests)} requests, block {fmt_bytes(args.block_bytes)}, pool "
             f"{pool}, backend {args.backend} ({cluster_desc})")
        label = ("SYNTHETIC " if synthetic else "") + f"replay[{args.backend}]"
        progress = _Progress(len(requests), label, not args.no_progress)
        from .replay import run_replay
        occupancy = _Occupancy(backend)
        occupancy.start()
        try:
            stats, wall, _ = run_replay(requests, sessions, codec, args.key_prefix,
                                        args.time_scale, stop, on_done=progress)
        finally:
            occupancy.stop()
        phase["replay"] = False
    except BackendUnavailable as e:
        failure = str(e)
    except KeyboardInterrupt:
        meta["interrupted"] = True
    finally:
        phase["replay"] = False
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)        # cleanup is not interruptible
        if progress is not None:
            progress.close(stats)
        ev = kh = tier = None
        if backend is not None:
            try:
                ev, kh = backend.evictions(), backend.keys_held()
                tier = getattr(backend, "disk_tier", lambda: None)()
            except Exception:
                pass
        for s in sessions:
            try:
                s.close()
            except Exception as e:               # report, keep cleaning up
                _say(f"closing a session failed: {e}")
        if backend is not None:
            backend.close()
        self_rss = peak_rss_bytes(os.getpid())
        group.stop(order=["node-", "master", "redis"])
        for s, h in old_handlers.items():
            signal.signal(s, h)
    leftovers = sorted(shm_entries() - shm_before)
    if failure:
        return _fail(failure)
    if stats is None:
        _say("interrupted before the replay started; nothing to report")
        return EXIT_INTERRUPTED

    # ---- references and report
    # the references run over the requests that completed, in trace order
    done_idx = sorted(stats.req_index)
    done = [requests[i] for i in done_idx]
    # pool_bytes is None when an existing cluster's capacity is unknown: no LRU reference
    cap = args.pool_bytes // args.block_bytes if args.pool_bytes else None
    ideal_hits, lru_hits = [], []
    ideal = simulate_ideal(done, ideal_hits)
    lru = simulate_lru(done, cap, lru_hits) if cap is not None else None
    reference = {"ideal": ideal.as_dict(), "lru": lru.as_dict() if lru else None,
                 "semantics": "prefix hit; hits read in request order, absent blocks after "
                              "the hit inserted; LRU capacity = pool bytes // block bytes"
                              + ("" if lru else "; no LRU: the pool's size is unknown")}
    ref_hits = {"ideal": dict(zip(done_idx, ideal_hits))}
    if lru:
        ref_hits["lru"] = dict(zip(done_idx, lru_hits))
    if cap is not None and kh is not None and ev and 0 < kh < cap:
        reference["lru_at_keys_held"] = simulate_lru(done, kh).as_dict()
    mean_kh = occupancy.mean_after_eviction() if occupancy is not None else None
    if cap is not None and mean_kh is not None and 0 < mean_kh < cap:
        reference["lru_at_mean_occupancy"] = simulate_lru(done, mean_kh).as_dict()
    if cap is not None and args.ssd_offload_path and args.ssd_size:
        # memory + disk as one LRU of their joint size
        reference["lru_memory_disk"] = simulate_lru(
            done, (args.pool_bytes + args.ssd_size) // args.block_bytes).as_dict()
    results = summarize(stats, wall)
    if tier is not None:
        # hits split by tier: the master counts gets answered by a disk replica only
        # (a re-read after an expired lease counts again: an upper bound)
        dh = min(tier["disk_hits"], stats.block_hits)
        tier["memory_hits"] = stats.block_hits - dh
        tier["disk_hits"] = dh
        tier["misses"] = stats.blocks - stats.block_hits
        tier["memory_hit_rate"] = tier["memory_hits"] / stats.blocks if stats.blocks else 0.0
        tier["disk_hit_rate"] = dh / stats.blocks if stats.blocks else 0.0
    results["tiers"] = tier
    results["evictions_backend"] = ev
    results["keys_held_at_end"] = kh
    rss = {"replay (this process)": self_rss or 0}
    for c in group.children:
        rss[f"{c.label} (pid {c.pid})"] = c.peak_rss or 0
    doc = {"meta": meta, "results": results, "reference": reference,
           "peak_rss": {"by_process": rss, "total": sum(rss.values())},
           "shm_leftovers": leftovers, "timeseries": timeseries(stats, wall, ref_hits),
           "occupancy": {"interval_s": _Occupancy.INTERVAL_S,
                         "mean_keys_after_eviction_began": mean_kh,
                         "samples_t_keys_evictions": occupancy.samples if occupancy else []}}
    json_path = os.path.join(args.out, "replay.json")
    png_path = os.path.join(args.out, "replay.png")
    write_json(doc, json_path)
    why = write_png(doc, stats, png_path)
    print(table(doc))
    print(verdict(doc))
    if not args.no_legend:
        print(LEGEND)
    print(files_note(doc, json_path, png_path, why, group.log_dir))
    if leftovers:
        print(f"  WARNING: new entries left in /dev/shm: {leftovers}")
    if args.demo and synthetic:
        print("Next: the same on a real FAST'25 trace (README, \"Replay a real trace\"):\n"
              "  mooncake_trace_replay --trace PATH/TO/conversation_trace.jsonl "
              "--segment-size 1GiB")
    if meta["interrupted"]:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if (results["errors"] or results["corrupt_blocks"]) else EXIT_OK


def _start_backend(args, group, upstream_child):
    """Starts (or connects to) the backend. Returns (Backend, description)."""
    if args.backend == "redis":
        if args.redis_addr:
            host, _, port = args.redis_addr.rpartition(":")
            return RedisBackend(host or "127.0.0.1", int(port)), f"redis at {args.redis_addr}"
        host, port, c = start_redis(group, args.pool_bytes)
        _say(f"started redis-server pid {c.pid} on {host}:{port}, maxmemory "
             f"{fmt_bytes(args.pool_bytes)}, allkeys-lru")
        return RedisBackend(host, port), (f"local redis-server, maxmemory "
                                          f"{fmt_bytes(args.pool_bytes)}, allkeys-lru")
    label = "upstream" if upstream_child else "store"
    mod = check_store_importable()
    if upstream_child and os.path.abspath(mod).startswith(_our_root() + os.sep):
        raise BackendUnavailable(f"--backend upstream loaded this package's mooncake.store "
                                 f"({mod}), not upstream's")
    if args.master:
        _check_cluster_reachable(args)
        return (StoreBackend(args.master, args.metadata, args.metrics_url, label=label),
                f"existing cluster, master {args.master}")
    master_bin = args.master_bin or find_tool("mooncake_master")
    if not master_bin:
        raise BackendUnavailable(
            "mooncake_master is not installed next to this Python or on PATH (make setup, or "
            "pip install . from the repository, installs it), or pass --master-bin; "
            "--master/--metadata use a running cluster instead")
    extra = []
    if args.eviction_high_watermark is not None:
        extra.append(f"--eviction_high_watermark_ratio={args.eviction_high_watermark}")
    if args.eviction_ratio is not None:
        extra.append(f"--eviction_ratio={args.eviction_ratio}")
    cl = LocalCluster(group, master_bin, args.nodes, args.segment_size, args.lease_ttl_ms,
                      extra_master_args=extra, ssd_dir=args.ssd_offload_path,
                      ssd_size=args.ssd_size)
    _say(f"started mooncake_master pid {cl.master.pid} (rpc {cl.master_addr}, metadata "
         f"{cl.metadata_url}) and {args.nodes} store nodes (pids "
         f"{', '.join(str(c.pid) for c, _ in cl.nodes)}), {fmt_bytes(args.segment_size)} each")
    disk = ""
    if args.ssd_offload_path:
        disk = (f" + disk tiers in {args.ssd_offload_path} ("
                f"{fmt_bytes(args.ssd_size) if args.ssd_size else 'no size limit'})")
    return (StoreBackend(cl.master_addr, cl.metadata_url, cl.metrics_url, label=label),
            f"local cluster: master + {args.nodes} nodes x {fmt_bytes(args.segment_size)}"
            + disk)


if __name__ == "__main__":
    sys.exit(main())
