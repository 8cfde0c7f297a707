#!/usr/bin/env python3
"""bench_transfer.py: the transfer engine against the physical limits and upstream, in one run.

For each block size (4 KiB ... 16 MiB), measured back to back so that the box's load is
the same for every figure of a row:
  raw_tcp     N loopback TCP streams between two processes (N = the engine's connections
              per peer, --conns, default 2 like MC_TE_TCP_CONNECTIONS), one thread per
              stream on each side, send()/recv() of one block at a time (bench_raw tcp)
  memcpy      memcpy of one block at a time through 256 MiB buffers (bench_raw memcpy)
  ours_tcp    our engine, two processes, forced TCP (MC_FORCE_TCP=1), transfer_engine_bench
              initiator -> target, for each batch size (1, 16, 128)
  ours_shm    the same with the target's buffer memfd-backed: the same-host path
  upstream    upstream's transfer_engine_bench (mooncake-transfer-engine-non-cuda, from
              .venv-upstream, see docs/upstream-peer.md) over TCP with an HTTP metadata
              server, when installed; configurations whose requests do not fit its
              buffer (it does not wrap offsets) are skipped
Every line prints the parameters, the figure and its ratio to the baseline (raw TCP for
the TCP paths, memcpy for shm, upstream for "ours/upstream").
Baselines walk the same memory as the engine run they are compared with: an engine run
moves block * batch * threads bytes per round through its buffers (the "span", at most
512 MiB), so raw_tcp sends/receives through a span-sized buffer and memcpy runs `threads`
threads over span/threads bytes each. raw_tcp_hot (one block-sized buffer, always in
cache) is printed too: it is the kernel's best case, not what moving real data costs. Both
raw figures use as many streams as the engine has connections (--conns).

Usage:
  python3 bench/bench_transfer.py [--build build/debug] [--duration 2] [--threads 4]
      [--op write] [--blocks 4K,16K,64K,256K,1M,4M,16M] [--batches 1,16,128]
      [--upstream auto|off] [--out bench/out/transfer] [--plot FILE.png]
Results: <out>/results.json, <out>/table.md and the plot (matplotlib, when available).
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GB = 1e9
MAX_BUF = 512 << 20


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)i?B?", text.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_line(proc, pattern, timeout=30.0):
    """Reads proc.stdout until a line matches; returns the match."""
    import select
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    buf = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk.decode(errors="replace")
            m = re.search(pattern, buf)
            if m:
                return m
        elif proc.poll() is not None:
            break
    raise RuntimeError(f"no line matching {pattern!r}; output so far:\n{buf[-2000:]}")


def stop(proc):
    """Stops proc and everything it started: every child here runs in its own session
    (upstream's transfer_engine_bench is a Python wrapper that starts the real binary as
    a child, so killing the wrapper alone would orphan the target)."""
    if not proc:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # the group may outlive its leader: make sure nothing of it is left
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class Runner:
    def __init__(self, args):
        self.args = args
        b = os.path.join(ROOT, args.build)
        self.bench = os.path.join(b, "tools", "transfer_engine_bench")
        self.raw = os.path.join(b, "bench", "bench_raw")
        self.meta_srv = os.path.join(b, "tools", "mooncake_http_metadata_server")
        for p in (self.bench, self.raw):
            if not os.path.exists(p):
                sys.exit(f"{p} is missing: meson setup {args.build} && ninja -C {args.build}")
        up = os.path.join(ROOT, ".venv-upstream", "bin", "transfer_engine_bench")
        self.upstream = None
        if args.upstream != "off" and os.path.exists(up):
            self.upstream = up
        elif args.upstream == "on":
            sys.exit(f"{up} is missing (scripts/setup-upstream-peer.sh)")
        self.env = dict(os.environ, MC_LOG_LEVEL="WARNING",
                        MC_TE_TCP_CONNECTIONS=str(args.conns))
        if args.io_threads:
            self.env["MC_TE_IO_THREADS"] = str(args.io_threads)

    def raw_figure(self, kind, block, span=None, threads=1):
        cmd = [self.raw, kind, str(block), str(self.args.duration)]
        if span:
            cmd += [str(span), str(threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120)
        return json.loads(out.stdout)["GBps"]

    def span(self, block, batch):
        """Bytes one engine run walks through on each side (its buffer wraps at MAX_BUF)."""
        return max(block, min(MAX_BUF, block * batch * self.args.threads))

    def start_ours(self, block, batches, shm):
        """Starts a target of ours; returns (process, env, initiator flags)."""
        env = dict(self.env)
        if not shm:
            env["MC_FORCE_TCP"] = "1"
        buf = min(MAX_BUF, max(block * max(batches) * self.args.threads, 64 << 20))
        tgt = subprocess.Popen(
            [self.bench, "--mode=target", "--metadata_server=P2PHANDSHAKE",
             "--local_server_name=127.0.0.1", f"--buffer_size={buf}",
             f"--use_shm={'true' if shm else 'false'}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True)
        try:
            seg = wait_line(tgt, r"segment_id (\S+)").group(1)
        except Exception:
            stop(tgt)
            raise
        return tgt, env, ["--metadata_server=P2PHANDSHAKE", "--local_server_name=127.0.0.1",
                          f"--segment_id={seg}", f"--buffer_size={buf}"]

    def initiator(self, exe, env, extra, block, batch):
        cmd = [exe, "--mode=initiator", "--protocol=tcp", f"--operation={self.args.op}",
               f"--block_size={block}", f"--batch_size={batch}",
               f"--threads={self.args.threads}", f"--duration={self.args.duration}"] + extra
        out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                             timeout=self.args.duration * 10 + 60)
        text = out.stdout + out.stderr
        m = re.search(r"Test completed: duration ([\d.]+), batch count (\d+), "
                      r"throughput ([\d.]+) GB/s", text)
        if out.returncode != 0 or not m:
            print(f"  ! {os.path.basename(exe)} block {block} batch {batch} failed "
                  f"(rc {out.returncode}): {text.strip()[-400:]}", file=sys.stderr)
            return None
        return float(m.group(3))

    def start_upstream(self, block, batches):
        """Starts upstream's metadata server + target; returns (procs, env, flags, buf)."""
        need = block * max(batches) * self.args.threads
        buf = min(MAX_BUF, max(need, 64 << 20))
        hport, tport = free_port(), free_port()
        env = dict(self.env, MC_LOG_LEVEL="INFO")  # upstream logs its result at INFO
        meta = subprocess.Popen([self.meta_srv, f"--port={hport}", "--host=127.0.0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        wait_line(meta, r"listening")
        url = f"http://127.0.0.1:{hport}/metadata"
        tgt = subprocess.Popen(
            [self.upstream, "--mode=target", f"--metadata_server={url}",
             f"--local_server_name=127.0.0.1:{tport}", "--protocol=tcp",
             f"--buffer_size={buf}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True)
        time.sleep(1.5)  # upstream prints nothing when ready at WARNING level
        return [tgt, meta], env, [f"--metadata_server={url}",
                                  f"--segment_id=127.0.0.1:{tport}",
                                  f"--buffer_size={buf}"], buf

    def row(self, block, batches):
        """One measurement of every figure of a block size; the figures of one batch size
        are taken back to back (raw TCP, ours TCP, memcpy, ours shm, upstream)."""
        procs = []
        try:
            t_tgt, t_env, t_flags = self.start_ours(block, batches, shm=False)
            procs.append(t_tgt)
            s_tgt, s_env, s_flags = self.start_ours(block, batches, shm=True)
            procs.append(s_tgt)
            up = None
            if self.upstream:
                up_procs, u_env, u_flags, u_buf = self.start_upstream(block, batches)
                procs += up_procs
                up = (u_env, u_flags, u_buf)
            c = self.args.conns
            res = {"hot": self.raw_figure("tcp", block, block * c, c), "raw": {}, "mem": {},
                   "tcp": {}, "shm": {}, "up": {}, "load": {}}
            for n in batches:
                span = self.span(block, n)
                res["load"][n] = os.getloadavg()[0]
                res["raw"][n] = self.raw_figure("tcp", block, span, c)
                res["tcp"][n] = self.initiator(self.bench, t_env, t_flags, block, n)
                res["mem"][n] = self.raw_figure("memcpy", block,
                                                max(block, span // self.args.threads),
                                                self.args.threads)
                res["shm"][n] = self.initiator(self.bench, s_env, s_flags, block, n)
                if up and block * n * self.args.threads <= up[2]:
                    res["up"][n] = self.initiator(
                        self.upstream, up[0],
                        up[1] + [f"--local_server_name=127.0.0.1:{free_port()}"], block, n)
                else:
                    res["up"][n] = None  # not installed, or does not fit its buffer
            return res
        finally:
            for p in procs:
                stop(p)


def median(xs):
    xs = sorted(x for x in xs if x)
    return xs[len(xs) // 2] if xs else None


def div(a, b):
    return a / b if a and b else None


def fmt(x):
    return f"{x:.2f}" if x else "-"


def make_plot(rows, batches, args, plot):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no plot)")
        return
    fig, axes = plt.subplots(1, len(batches), figsize=(5 * len(batches), 4.2), sharey=True)
    if len(batches) == 1:
        axes = [axes]
    for ax, n in zip(axes, batches):
        sel = [x for x in rows if x["batch"] == n]
        xs = [x["block"] for x in sel]
        for key, label, style in (("raw_tcp", "raw loopback TCP (same span)", "k--"),
                                  ("raw_tcp_hot", "raw loopback TCP (cache-hot)", "c--"),
                                  ("memcpy", "memcpy", "k:"),
                                  ("ours_tcp", "ours, TCP", "b-o"),
                                  ("ours_shm", "ours, same-host shm", "g-s"),
                                  ("upstream_tcp", "upstream, TCP", "r-^")):
            pts = [(b, x[key]) for b, x in zip(xs, sel) if x[key]]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([human(b).replace(" ", "") for b in xs], rotation=45)
        ax.set_title(f"batch {n}, {args.threads} threads, {args.op}")
        ax.set_xlabel("block size")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("GB/s (log scale)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(plot, dpi=110)
    print(f"plot: {plot}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/debug")
    ap.add_argument("--duration", type=int, default=2, help="seconds per figure")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--op", choices=["write", "read"], default="write")
    ap.add_argument("--conns", type=int, default=2,
                    help="MC_TE_TCP_CONNECTIONS for our engines = raw TCP streams")
    ap.add_argument("--io-threads", type=int, default=0,
                    help="MC_TE_IO_THREADS for our engines (0: the engine's default)")
    ap.add_argument("--blocks", default="4K,16K,64K,256K,1M,4M,16M")
    ap.add_argument("--batches", default="1,16,128")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure every row this many times and report medians")
    ap.add_argument("--upstream", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--out", default="bench/out/transfer")
    ap.add_argument("--plot", default="")
    ap.add_argument("--replot", default="", help="only redraw the plot from a results.json")
    args = ap.parse_args()
    blocks = [parse_size(x) for x in args.blocks.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    if args.replot:
        with open(args.replot) as f:
            res = json.load(f)
        args.threads, args.op = res["threads"], res["op"]
        make_plot(res["rows"], sorted({x["batch"] for x in res["rows"]}), args,
                  args.plot or "transfer-bench.png")
        return
    r = Runner(args)
    print(f"# transfer engine bench: op={args.op} threads={args.threads} "
          f"conns={args.conns} (= raw TCP streams) io_threads={args.io_threads or 'default'} "
          f"duration={args.duration}s per figure; repeat={args.repeat} (medians); "
          f"GB = 1e9 bytes; "
          f"upstream={'yes' if r.upstream else 'no'}; cpus={os.cpu_count()} "
          f"load={os.getloadavg()[0]:.2f}")
    rows = []
    for block in blocks:
        reps = [r.row(block, batches) for _ in range(args.repeat)]
        hot = median([x["hot"] for x in reps])
        raw, mem, tcp, shm, up, load = (
            {n: median([x[k].get(n) for x in reps]) for n in batches}
            for k in ("raw", "mem", "tcp", "shm", "up", "load"))
        # ratios: the median of the ratios of each repetition (pairs taken back to back)
        rt = {n: median([div(x["tcp"][n], x["raw"][n]) for x in reps]) for n in batches}
        rs = {n: median([div(x["shm"][n], x["mem"][n]) for x in reps]) for n in batches}
        ru = {n: median([div(x["tcp"][n], x["up"][n]) for x in reps]) for n in batches}
        print(f"block {human(block)}: raw_tcp (one cache-hot buffer) {hot:.2f} GB/s")
        for n in batches:
            row = {"block": block, "batch": n, "threads": args.threads, "op": args.op,
                   "span": r.span(block, n), "raw_tcp_hot": hot, "raw_tcp": raw[n],
                   "memcpy": mem[n], "ours_tcp": tcp.get(n), "ours_shm": shm.get(n),
                   "upstream_tcp": up.get(n), "tcp_vs_raw": rt[n], "shm_vs_memcpy": rs[n],
                   "tcp_vs_upstream": ru[n], "conns": args.conns,
                   "io_threads": args.io_threads or None, "load": load[n]}
            rows.append(row)
            print(f"  block {human(block):>8} batch {n:>3} threads {args.threads} span "
                  f"{human(row['span'])}: raw_tcp {fmt(raw[n])}, ours_tcp {fmt(row['ours_tcp'])} "
                  f"GB/s ({fmt(rt[n])} x raw_tcp)"
                  f" | memcpy {fmt(mem[n])}, ours_shm {fmt(row['ours_shm'])} GB/s "
                  f"({fmt(rs[n])} x memcpy)"
                  f" | upstream_tcp {fmt(row['upstream_tcp'])} GB/s"
                  f" (ours/upstream {fmt(ru[n])})", flush=True)
    out = os.path.join(ROOT, args.out)
    os.makedirs(out, exist_ok=True)
    meta = {"op": args.op, "threads": args.threads, "duration_s": args.duration,
            "repeat": args.repeat,
            "cpus": os.cpu_count(), "upstream": bool(r.upstream), "rows": rows}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(meta, f, indent=1)
    lines = ["| block | batch | span | raw TCP hot | raw TCP | ours TCP | ours/raw | memcpy "
             "| ours shm | shm/memcpy | upstream TCP | ours/upstream | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {human(x['block'])} | {x['batch']} | {human(x['span'])} | "
                     f"{fmt(x['raw_tcp_hot'])} | {fmt(x['raw_tcp'])} | "
                     f"{fmt(x['ours_tcp'])} | {fmt(x['tcp_vs_raw'])} | "
                     f"{fmt(x['memcpy'])} | {fmt(x['ours_shm'])} | "
                     f"{fmt(x['shm_vs_memcpy'])} | {fmt(x['upstream_tcp'])} | "
                     f"{fmt(x['tcp_vs_upstream'])} | {fmt(x['load'])} |")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    make_plot(rows, batches, args, args.plot or os.path.join(out, "transfer-bench.png"))

if __name__ == "__main__":
    main()
