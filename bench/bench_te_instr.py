#!/usr/bin/env python3
"""bench_te_instr.py: instructions per request of the transfer engine, under callgrind.

Wall-clock figures on a shared 2-core box move by 2x between runs; instruction counts do
not. This runs bench_te_ops (bench/bench_te_ops.c: two engines in one process, a fixed
number of batches) under `valgrind --tool=callgrind` and reports, for the measured
batches only (the counters are zeroed before them and dumped after them):
  Ir/req      user-space instructions per request, initiator and target together (every
              thread of both engines; kernel work is not counted by callgrind)
  Ir/req excl. copy   the same without the copies' own instructions (memcpy, memmove,
              mc_copy_to_segment: the data copies; moving a copy between kernel and
              user space changes Ir/req but not the engine's own work)
  recv/req    calls of our socket receive wrappers (mc_sock_recvv_nb, mc_sock_recv_nb:
              one recvmsg each) per request, both sides
  send/req    the same for mc_sock_sendv_nb / mc_sock_send_nb (sendmsg)
  epoll/req   epoll_wait calls per request
for each configuration (default: 4 KiB x 128, write and read, over TCP loopback and the
same-host path). With --base DIR it also runs another build (e.g. the main branch built
from `git worktree add /tmp/perf-base <commit>`) with the same arguments and prints
before, after and after/before.

Usage:
  python3 bench/bench_te_instr.py [--build build/debug] [--base /tmp/perf-base/build]
      [--paths tcp,shm] [--ops write,read] [--block 4096] [--batch 128] [--iters 40]
      [--warmup 10] [--io-threads N] [--conns N] [--out bench/out/instr]
Results: <out>/results.json and <out>/table.md. Needs valgrind.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECV = ("mc_sock_recvv_nb", "mc_sock_recv_nb")
SEND = ("mc_sock_sendv_nb", "mc_sock_send_nb")
EPOLL = ("epoll_wait", "epoll_pwait")


# the data copies: memcpy/memmove and the streaming copy into segment memory
# (common/copy.h mc_copy_to_segment, since 60ccb41: its SSE2 loop is ~795 Ir per 4 KiB
# where glibc's memcpy was ~465, which read as +400 Ir of per-key work on a put)
COPY = re.compile(r"mem(cpy|move)|mc_copy_to_segment")


def parse_callgrind(path):
    """Total Ir, call counts by callee name, and the self cost of the memcpy/memmove
    functions, from one callgrind dump."""
    names = {}
    calls = {}
    total = None
    callee = None
    fn = None
    skip_next = False  # the cost line after calls= is the call's inclusive cost
    copy_ir = 0
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                key, _, rest = line.rstrip("\n").partition("=")
                m = re.match(r"\((\d+)\)(?: (.*))?$", rest)
                if m:
                    if m.group(2) is not None:
                        names[m.group(1)] = m.group(2)
                    name = names.get(m.group(1), "?")
                else:
                    name = rest
                if key == "cfn":
                    callee = name
                else:
                    fn, callee = name, None
            elif line.startswith("calls=") and callee is not None:
                n = int(line[6:].split()[0])
                calls[callee] = calls.get(callee, 0) + n
                callee = None
                skip_next = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                parts = line.split()
                if len(parts) >= 2 and fn and COPY.search(fn):
                    copy_ir += int(parts[1])
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    return total, calls, copy_ir


def run_one(build, path, op, args, env):
    exe = os.path.join(build, "bench", "bench_te_ops")
    if not os.path.exists(exe):
        sys.exit(f"{exe} is missing: ninja -C {build} bench/bench_te_ops")
    tmp = tempfile.mkdtemp(prefix="mc-instr-")
    try:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
               "--dump-line=no", "--dump-instr=no", "--compress-strings=yes",
               exe, path, op, str(args.block), str(args.batch), str(args.iters),
               str(args.warmup)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
        info = json.loads(r.stdout.strip().splitlines()[-1])
        dump = None
        for f in sorted(glob.glob(out + "*")):
            with open(f, errors="replace") as fh:
                head = fh.read(4096)
            if "measured" in head:
                dump = f
        if not dump:
            sys.exit(f"no 'measured' dump among {glob.glob(out + '*')}")
        total, calls, copy_ir = parse_callgrind(dump)
        req = info["requests"]
        return {"path": path, "op": op, "block": args.block, "batch": args.batch,
                "iters": args.iters, "requests": req,
                "Ir_per_req": total / req,
                "Ir_nocopy_per_req": (total - copy_ir) / req,
                "recv_per_req": sum(calls.get(n, 0) for n in RECV) / req,
                "send_per_req": sum(calls.get(n, 0) for n in SEND) / req,
                "epoll_per_req": sum(calls.get(n, 0) for n in EPOLL) / req,
                "build": build}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/debug")
    ap.add_argument("--base", default="", help="a second build to compare against")
    ap.add_argument("--paths", default="tcp,shm")
    ap.add_argument("--ops", default="write,read")
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--io-threads", type=int, default=0, help="MC_TE_IO_THREADS (0: default)")
    ap.add_argument("--conns", type=int, default=0, help="MC_TE_TCP_CONNECTIONS (0: default)")
    ap.add_argument("--out", default="bench/out/instr")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is missing (apt-get install valgrind)")
    env = dict(os.environ, MC_LOG_LEVEL="WARNING")
    if args.io_threads:
        env["MC_TE_IO_THREADS"] = str(args.io_threads)
    if args.conns:
        env["MC_TE_TCP_CONNECTIONS"] = str(args.conns)
    builds = [os.path.join(ROOT, args.build)]
    if args.base:
        builds.insert(0, os.path.abspath(args.base))
    print(f"# transfer engine instructions per request (callgrind): block {args.block}, "
          f"batch {args.batch}, {args.iters} measured batches after {args.warmup}; "
          f"MC_TE_IO_THREADS={env.get('MC_TE_IO_THREADS', 'default')} "
          f"MC_TE_TCP_CONNECTIONS={env.get('MC_TE_TCP_CONNECTIONS', 'default')}", flush=True)
    rows = []
    for path in args.paths.split(","):
        for op in args.ops.split(","):
            res = [run_one(b, path, op, args, env) for b in builds]
            for x in res:
                print(f"  {path:>3} {op:<5} {x['build']}: {x['Ir_per_req']:.0f} Ir/req "
                      f"({x['Ir_nocopy_per_req']:.0f} excl. copies), "
                      f"recv {x['recv_per_req']:.3f}, send {x['send_per_req']:.3f}, "
                      f"epoll {x['epoll_per_req']:.3f} per req", flush=True)
            rows.append(res)
    out = os.path.join(ROOT, args.out)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    if args.base:
        lines = ["| path | op | Ir/req before | after | after/before | Ir/req excl. copies "
                 "before | after | after/before | recvmsg/req before | after | sendmsg/req "
                 "before | after |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for b, a in rows:
            lines.append(f"| {a['path']} | {a['op']} | {b['Ir_per_req']:.0f} | "
                         f"{a['Ir_per_req']:.0f} | {a['Ir_per_req'] / b['Ir_per_req']:.2f} | "
                         f"{b['Ir_nocopy_per_req']:.0f} | {a['Ir_nocopy_per_req']:.0f} | "
                         f"{a['Ir_nocopy_per_req'] / b['Ir_nocopy_per_req']:.2f} | "
                         f"{b['recv_per_req']:.3f} | {a['recv_per_req']:.3f} | "
                         f"{b['send_per_req']:.3f} | {a['send_per_req']:.3f} |")
    else:
        lines = ["| path | op | Ir/req | Ir/req excl. copies | recvmsg/req | sendmsg/req "
                 "| epoll/req |", "|---|---|---|---|---|---|---|"]
        for (a,) in rows:
            lines.append(f"| {a['path']} | {a['op']} | {a['Ir_per_req']:.0f} | "
                         f"{a['Ir_nocopy_per_req']:.0f} | "
                         f"{a['recv_per_req']:.3f} | {a['send_per_req']:.3f} | "
                         f"{a['epoll_per_req']:.3f} |")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
