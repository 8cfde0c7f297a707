#!/usr/bin/env python3
"""bench_store_instr.py: instructions per key of the store, client and master, under
callgrind (issue 17: judge a per-key change by instructions, not by noisy seconds).

One cluster on 127.0.0.1: a master (tools/mooncake_master with its HTTP metadata server)
run under `valgrind --tool=callgrind`, a store node (bench_store_ops node, not under
valgrind) whose segment holds every value, and for each OP a client (bench_store_ops
client, under callgrind). The client's counters are zeroed before its measured batches
and dumped after them (callgrind client requests); the master's are zeroed and dumped at
the same two points by `callgrind_control` (instrumentation is off until then; the
client waits for the driver there), so
both figures cover exactly the measured batches:
  put    batch_put_from of BATCH new SIZE-byte keys (same-host path: the client copies
         into the node's segment; MC_FORCE_TCP=1 with --tcp)
  get    batch_get_into of BATCH stored keys (checked)
  exist  batch_is_exist of BATCH stored keys (the master's batch_is_exist)
Reported per key: client Ir, client Ir without the copies' own instructions (the value
copy: memcpy/memmove, and mc_copy_to_segment, the put's streaming copy since 60ccb41), client Ir without the bench's own key formatting (the snprintf per key that
bench_store_ops's put loop runs to name new keys: ~1,280 Ir/key, in every put figure
before this column existed), master Ir (every thread: RPC decode, lookup, encode, plus its I/O loop and
whatever its timers did meanwhile, so it moves by ~20% between runs), and the master's
Ir inside mc_master_rpc_handle (decode, service, encode of the requests: the per-key
part; a heartbeat ping or two land there too).
Kernel work (system calls) is not counted by callgrind. Every process runs with
MC_BUSY_POLL_US=0 unless the caller sets it: a wait's busy poll (common/spin.h) runs
for as long as the reply takes, so with it the counts would include a timing-dependent
number of spin iterations (measured: +60-150 Ir/key on a put between two runs of one
build) instead of the work per key alone; issue 17's "before" figures had no poll.

Usage:
  python3 bench/bench_store_instr.py [--build build/release] [--base DIR]
      [--ops put,get,exist] [--size 4096] [--batch 128] [--iters 40] [--warmup 10]
      [--tcp] [--auth] [--keep DIR] [--out bench/out/store-instr]
--base DIR: another build (e.g. of the main branch: `git worktree add /tmp/base <commit>`
and build it) measured the same way; prints before, after, after/before.
--auth: the build is measured twice, as given ("before") and with a cluster secret in
every process ("after": a 0600 token file named in MC_AUTH_TOKEN_FILE for the master,
the node and the client; docs/security.md), and the table compares the two (not with
--base).
--keep DIR: keep the callgrind dumps there (client-OP.cg*, master.cg*; read them with
callgrind_annotate --inclusive=yes FILE).
Results: <out>/results.json and <out>/table.md. Needs valgrind (callgrind_control too).
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench_te_instr import parse_callgrind  # noqa: E402

CG = ["valgrind", "--tool=callgrind", "--dump-line=no", "--dump-instr=no",
      "--compress-strings=yes"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, deadline, proc):
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after the deadline")


def expect(proc, word, deadline):
    """Reads proc's stdout lines until one equals `word` (or, for word None, a JSON line)."""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"exited (rc {proc.wait()}) before printing {word or 'JSON'}")
        line = line.strip()
        if word is None and line.startswith("{"):
            return json.loads(line)
        if word is not None and line == word:
            return line
    raise RuntimeError(f"no {word or 'JSON'} before the deadline")


def _fn_name(names, rest):
    """The function a callgrind fn=/cfn= value `rest` names, with name compression
    resolved: "(id) name" defines id in names, "(id)" refers to it."""
    m = re.match(r"\((\d+)\)(?: (.*))?$", rest)
    if m and m.group(2) is not None:
        names[m.group(1)] = m.group(2)
    return names.get(m.group(1), "?") if m else rest


def _call_cost(line):
    """The inclusive cost on the line after a calls= line (0 when it holds none)."""
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 else 0


def _inclusive(path, wanted):
    """The inclusive Ir of the calls in one callgrind dump for which wanted(callee,
    caller) holds (the cost line after each such calls= line)."""
    names, total, want, fn = {}, 0, False, None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                key, _, rest = line.rstrip("\n").partition("=")
                nm = _fn_name(names, rest)
                if key == "fn":
                    fn, want = nm, False
                else:
                    want = wanted(nm, fn)
            elif line.startswith("calls="):
                line = next(f)
                if want:
                    total += _call_cost(line)
                want = False
    return total


def inclusive_of(path, name):
    """The inclusive Ir of every call to function `name` in one callgrind dump."""
    return _inclusive(path, lambda callee, caller: callee == name)


def inclusive_from(path, name, caller):
    """The inclusive Ir of the calls to function `name` made from function `caller`."""
    return _inclusive(path, lambda callee, fn: callee == name and fn == caller)


def measured_dump(prefix):
    for f in sorted(glob.glob(prefix + "*")):
        with open(f, errors="replace") as fh:
            if "measured" in fh.read(4096):
                return f
    return None


def stop_all(procs):
    """Stops the process groups this bench started, newest first: SIGTERM, then SIGKILL
    after 30 s (a group already gone is skipped)."""
    for p in reversed(procs):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def run_build(build, args, env, tmp):
    ops_exe = os.path.join(build, "bench", "bench_store_ops")
    master_exe = os.path.join(build, "tools", "mooncake_master")
    for exe in (ops_exe, master_exe):
        if not os.path.exists(exe):
            sys.exit(f"{exe} is missing: ninja -C {build} bench/bench_store_ops "
                     f"tools/mooncake_master")
    rpc, http, metrics = free_port(), free_port(), free_port()
    md = f"http://127.0.0.1:{http}/metadata"
    master_addr = f"127.0.0.1:{rpc}"
    mprefix = os.path.join(tmp, "master.cg")
    procs = []
    rows = []
    logs = open(os.path.join(tmp, "stderr.log"), "a")
    try:
        master = subprocess.Popen(
            CG + [f"--callgrind-out-file={mprefix}", "--instr-atstart=no",
                  master_exe, f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
                  f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
                  "--enable_http_metadata_server=1", f"--http_metadata_server_port={http}",
                  "--http_metadata_server_host=127.0.0.1"],
            stdout=logs, stderr=logs, env=env, start_new_session=True)
        procs.append(master)
        wait_port(rpc, time.monotonic() + 120, master)
        wait_port(http, time.monotonic() + 60, master)
        seg = max(256 << 20, 4 * args.size * args.batch * (args.iters + args.warmup + 2))
        node = subprocess.Popen([ops_exe, "node", master_addr, md, str(seg)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs,
                                env=env, text=True, start_new_session=True)
        procs.append(node)
        expect(node, "ready", time.monotonic() + 120)
        for n, op in enumerate(args.ops.split(",")):
            cprefix = os.path.join(tmp, f"client-{op}.cg")
            cl = subprocess.Popen(
                CG + [f"--callgrind-out-file={cprefix}", ops_exe, "client", master_addr, md,
                      op, str(args.size), str(args.batch), str(args.iters),
                      str(args.warmup)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs, env=env,
                text=True, start_new_session=True)
            procs.append(cl)
            expect(cl, "warm", time.monotonic() + 600)
            # the master counts only between these two points (collection starts off)
            subprocess.run(["callgrind_control", "-i", "on", str(master.pid)], check=True,
                           capture_output=True, timeout=120)
            subprocess.run(["callgrind_control", "-z", str(master.pid)], check=True,
                           capture_output=True, timeout=120)
            cl.stdin.write("go\n")
            cl.stdin.flush()
            info = expect(cl, None, time.monotonic() + 1200)
            subprocess.run(["callgrind_control", "-d", f"measured-{op}", str(master.pid)],
                           check=True, capture_output=True, timeout=120)
            subprocess.run(["callgrind_control", "-i", "off", str(master.pid)], check=True,
                           capture_output=True, timeout=120)
            cl.stdin.write("end\n")
            cl.stdin.flush()
            cl.stdin.close()
            if cl.wait(timeout=300) != 0:
                raise RuntimeError(f"client {op} exited with {cl.returncode}")
            cdump = measured_dump(cprefix)
            mdump = None
            for f in sorted(glob.glob(mprefix + "*")):
                with open(f, errors="replace") as fh:
                    if f"measured-{op}" in fh.read(4096):
                        mdump = f
            if not cdump or not mdump:
                raise RuntimeError(f"missing callgrind dump for {op} ({cdump}, {mdump})")
            ctot, _, ccopy = parse_callgrind(cdump)
            mtot, _, _ = parse_callgrind(mdump)
            mhandler = inclusive_of(mdump, "mc_master_rpc_handle")
            # the bench's own key formatting (snprintf per key in one_batch / make_keys,
            # inside the measured loop for put): not the store's cost
            cbench = inclusive_from(cdump, "snprintf", "one_batch") + \
                inclusive_from(cdump, "snprintf", "make_keys")
            keys = info["keys"]
            rows.append({"op": op, "size": args.size, "batch": args.batch,
                         "iters": args.iters, "keys": keys, "path": "tcp" if args.tcp
                         else "same-host", "client_Ir_per_key": ctot / keys,
                         "client_Ir_nocopy_per_key": (ctot - ccopy) / keys,
                         "client_Ir_nobench_per_key": (ctot - cbench) / keys,
                         "master_Ir_per_key": mtot / keys,
                         "master_handler_Ir_per_key": mhandler / keys, "build": build})
            r = rows[-1]
            print(f"  {op:<5} {build}: client {r['client_Ir_per_key']:.0f} Ir/key "
                  f"({r['client_Ir_nocopy_per_key']:.0f} excl. copies, "
                  f"{r['client_Ir_nobench_per_key']:.0f} excl. the bench's key formatting), master "
                  f"{r['master_Ir_per_key']:.0f} Ir/key ({r['master_handler_Ir_per_key']:.0f} "
                  f"in mc_master_rpc_handle)", flush=True)
        node.stdin.close()
        node.wait(timeout=60)
        return rows
    finally:
        stop_all(procs)
        logs.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--base", default="", help="a second build to compare against")
    ap.add_argument("--ops", default="put,get,exist")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--tcp", action="store_true", help="MC_FORCE_TCP=1 in the clients")
    ap.add_argument("--auth", action="store_true",
                    help="measure the build without and with a cluster secret")
    ap.add_argument("--keep", default="", help="keep the callgrind dumps in this directory")
    ap.add_argument("--out", default="bench/out/store-instr")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (apt-get install valgrind)")
    env = dict(os.environ, MC_LOG_LEVEL="WARNING")
    env.setdefault("MC_BUSY_POLL_US", "0")  # count work, not spin iterations (see the top)
    env.pop("MC_FORCE_TCP", None)
    if args.tcp:
        env["MC_FORCE_TCP"] = "1"
    env.pop("MC_AUTH_TOKEN_FILE", None)
    if args.auth and args.base:
        sys.exit("--auth compares one build with and without a secret: drop --base")
    runs = [(os.path.join(ROOT, args.build), env)]
    if args.base:
        runs.insert(0, (os.path.abspath(args.base), env))
    print(f"# MC_BUSY_POLL_US={env['MC_BUSY_POLL_US']} (0: no busy poll is counted)")
    print(f"# store instructions per key (callgrind): size {args.size}, batch {args.batch}, "
          f"{args.iters} measured batches after {args.warmup}, "
          f"{'tcp' if args.tcp else 'same-host'} path; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    tmp = tempfile.mkdtemp(prefix="mc-store-instr-")
    if args.auth:
        import secrets
        token = os.path.join(tmp, "cluster.token")
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (secrets.token_hex(32) + "\n").encode())
        os.close(fd)
        runs.append((runs[0][0], dict(env, MC_AUTH_TOKEN_FILE=token)))
    try:
        per_build = []
        for n, (b, e) in enumerate(runs):   # each run its own dumps (master.cg.PID.N)
            sub = os.path.join(tmp, f"run{n}")
            os.makedirs(sub)
            per_build.append(run_build(b, args, e, sub))
    except (RuntimeError, subprocess.SubprocessError) as e:
        logs = sorted(glob.glob(os.path.join(tmp, "run*", "stderr.log")))
        tail = open(logs[-1], errors="replace").read()[-3000:] if logs else ""
        print(f"bench_store_instr: {e}\n--- stderr (tail):\n{tail}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for f in glob.glob(os.path.join(tmp, "run*", "*")):
                run = os.path.basename(os.path.dirname(f))
                shutil.copy(f, os.path.join(args.keep, f"{run}-{os.path.basename(f)}"))
        shutil.rmtree(tmp, ignore_errors=True)
    out = os.path.join(ROOT, args.out)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "builds": per_build}, f, indent=1)
    if args.base or args.auth:
        if args.auth:
            print("# before: no secret; after: with a cluster secret")
        lines = ["| op | client Ir/key before | after | after/before | excl. copies before "
                 "| after | master handler Ir/key before | after | after/before "
                 "| master (all) before | after |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        for b, a in zip(*per_build):
            lines.append(
                f"| {a['op']} | {b['client_Ir_per_key']:.0f} | {a['client_Ir_per_key']:.0f} | "
                f"{a['client_Ir_per_key'] / b['client_Ir_per_key']:.2f} | "
                f"{b['client_Ir_nocopy_per_key']:.0f} | {a['client_Ir_nocopy_per_key']:.0f} | "
                f"{b['master_handler_Ir_per_key']:.0f} | "
                f"{a['master_handler_Ir_per_key']:.0f} | "
                f"{a['master_handler_Ir_per_key'] / b['master_handler_Ir_per_key']:.2f} | "
                f"{b['master_Ir_per_key']:.0f} | {a['master_Ir_per_key']:.0f} |")
    else:
        lines = ["| op | path | client Ir/key | client Ir/key excl. copies | master handler "
                 "Ir/key | master (all threads) Ir/key |", "|---|---|---|---|---|---|"]
        for a in per_build[0]:
            lines.append(f"| {a['op']} | {a['path']} | {a['client_Ir_per_key']:.0f} | "
                         f"{a['client_Ir_nocopy_per_key']:.0f} | "
                         f"{a['master_handler_Ir_per_key']:.0f} | "
                         f"{a['master_Ir_per_key']:.0f} |")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
