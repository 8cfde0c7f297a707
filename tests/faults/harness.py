"""The fault-injection harness: a real ``mooncake_master`` (with its embedded HTTP
metadata server), store-node processes that each contribute a segment, writer and reader
processes, a nemesis that breaks them, and a checker that says what the store returned.

Everything runs on 127.0.0.1, every process is a child of this one and is killed by
``Cluster.close()`` (SIGCONT first, then SIGKILL; the master's process group too), every
wait has a deadline. The process helpers come from tests/integration (``conftest``,
``mc_master``, ``store_proc``): this module only composes them.

Parts:

- ``Cluster(master_flags, nodes=3, ...)``: the master and the nodes; ``client(...)`` adds
  a pure client (segment 0) process; ``node(...)`` one more node.
- signals on any process: ``stop``/``cont``/``kill9`` (the nemesis' faults);
  ``restart_master()``; ``NetNS``/``LinkCutter``: a private network namespace for the
  whole cluster (its own loopback) and a cut of one node's ports in it (tc htb + a
  zero-length pfifo that drops every packet to or from them), where the machine allows it.
- ``Nemesis``: a bounded, seeded schedule of those faults, each healed after a while.
- ``run_nemesis(...)``: writers + a reader + the nemesis for a duration, then a final
  read of every acknowledged key; returns a ``Report`` (``report.failures()`` lists
  what is not allowed: any wrong bytes, any loss of an acknowledged key that no fault
  explains, any stall longer than one deadline).
"""
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(os.path.dirname(HERE), "integration")
for _p in (INTEGRATION, os.path.dirname(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import conftest as _iconf  # noqa: E402  (tests/integration/conftest.py: the process helpers)
import mc_master  # noqa: E402
import store_proc  # noqa: E402
from faults import procfns  # noqa: E402

MiB = 1 << 20
FUNCS = "faults.procfns"

# Modes: "ci" (default; `make test`) bounds the nemesis run so the whole tests/faults run
# stays within a few minutes on a loaded 2-core box; "bench" (bench/bench_faults.py)
# runs it for MC_FAULTS_SECONDS (at least 600).
MODE = os.environ.get("MC_FAULTS_MODE", "ci")


def nemesis_seconds():
    if "MC_FAULTS_SECONDS" in os.environ:
        return float(os.environ["MC_FAULTS_SECONDS"])
    return 600.0 if MODE == "bench" else 120.0  # issue 10: 2 minutes in CI, 10 in the bench


def wait_until(pred, timeout, step=0.05):
    """Polls pred until it is true or timeout passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def signal_proc(p, sig):
    """Sends sig to a StoreProc / Popen (by pid; never by name). False when it is gone."""
    pid = p.proc.pid if hasattr(p, "proc") else p.pid
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def proc_state(pid):
    """The one-letter state of /proc/<pid>/stat (T: stopped), or '' when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def wait_stopped(pid, timeout=5.0):
    """Waits until the kernel shows every thread of pid stopped (SIGSTOP is asynchronous)."""
    return wait_until(lambda: _iconf.all_threads_stopped(pid), timeout, 0.01)


class Node:
    """A store client contributing a segment (or none: a pure client), in its own process."""

    def __init__(self, cluster, name, segment, env=None, timeout=60.0, hostname="127.0.0.1",
                 check=True):
        self.name = name
        self.env = dict(env or {})
        self.sp = store_proc.StoreProc(cluster.setup_args(segment, hostname), env=self.env,
                                       timeout=timeout, funcs_from=FUNCS)
        self.setup_rc = self.sp.setup_rc
        if check and self.sp.setup_rc != 0:
            self.sp.kill()
            raise RuntimeError(f"{name}: setup returned {self.sp.setup_rc}")
        self.hostname = self.sp.hostname
        self.pid = self.sp.proc.pid
        self.stopped = False
        self.dead = False

    # the calls of store_proc.StoreProc
    def fn(self, name, *a, timeout=None, **kw):
        return self.sp.fn(name, *a, timeout=timeout, **kw)

    def call(self, name, *a, timeout=None, **kw):
        return self.sp.call(name, *a, timeout=timeout, **kw)

    def send_fn(self, name, *a, **kw):
        self.sp.send_fn(name, *a, **kw)

    def result(self, timeout=None):
        return self.sp.result(timeout)

    def ready(self, timeout=0):
        """True when a reply to send_fn is waiting."""
        return self.sp.conn.poll(timeout)

    def stop(self):
        if signal_proc(self.sp, signal.SIGSTOP):
            wait_stopped(self.pid)
            self.stopped = True

    def cont(self):
        signal_proc(self.sp, signal.SIGCONT)
        self.stopped = False

    def kill9(self):
        signal_proc(self.sp, signal.SIGKILL)
        self.sp.proc.join(5)
        self.dead = True
        self.stopped = False

    def close(self):
        if self.stopped:
            self.cont()
        self.sp.kill()
        self.dead = True


class Cluster:
    """A master (HTTP metadata embedded) and ``nodes`` segment-contributing processes."""

    def __init__(self, *master_flags, nodes=3, segment=32 * MiB, node_env=None):
        self.spawner = _iconf._Spawner()
        self.procs = []
        self.master_restarts = []  # time.time() of each restart
        try:
            self.sc = store_proc.StoreCluster(self.spawner, *master_flags)
            self.nodes = [self.node(f"node{i}", segment, node_env) for i in range(nodes)]
        except BaseException:
            self.close()
            raise

    @property
    def master(self):
        return self.sc.master

    def setup_args(self, segment, hostname="127.0.0.1"):
        return self.sc.setup_args(segment=segment, local_buffer=32 * MiB, hostname=hostname)

    def node(self, name, segment=32 * MiB, env=None, **kw):
        """A segment-contributing process (Node); kw: hostname, check (False: keep a process
        whose setup failed, to look at setup_rc)."""
        n = Node(self, name, segment, env, **kw)
        self.procs.append(n)
        return n

    def client(self, name, env=None, **kw):
        """A pure client (no segment) in its own process."""
        return self.node(name, 0, env, **kw)

    def restart_master(self):
        self.sc.restart()
        self.master_restarts.append(time.time())

    def pause_master(self):
        signal_proc(self.master.proc, signal.SIGSTOP)
        wait_stopped(self.master.proc.pid)

    def resume_master(self):
        signal_proc(self.master.proc, signal.SIGCONT)

    def segments(self):
        """Segment names the master has mounted (/get_all_segments)."""
        st, body = self.master.http("/get_all_segments")
        return set(body.decode().split()) if st == 200 else set()

    def metric(self, name):
        try:
            return self.master.metrics().get(name, 0.0)
        except Exception:  # noqa: BLE001 - the master may be restarting
            return 0.0

    def allocated(self):
        """Bytes the master has reserved in all segments (master_allocated_bytes)."""
        return self.metric("master_allocated_bytes")

    def close(self):
        """Kills every process of the cluster (stopped ones are continued first)."""
        for n in getattr(self, "procs", []):
            with contextlib.suppress(Exception):
                n.close()
        if getattr(self, "sc", None) is not None:
            signal_proc(self.master.proc, signal.SIGCONT)
        self.spawner.cleanup()


# ---- network namespaces and link cuts -------------------------------------------------

CLONE_NEWNET = 0x40000000
_netns_probe = None


def _run(*args, check=True):
    r = subprocess.run(args, capture_output=True, text=True, timeout=10)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r


def netns_unavailable():
    """None when this machine lets us make a network namespace and cut links in it (root,
    `ip netns`, tc htb + pfifo + u32); else the reason, for a skip."""
    global _netns_probe
    if _netns_probe is not None:
        return _netns_probe or None
    if os.geteuid() != 0:
        _netns_probe = "link cuts need root (ip netns add)"
    elif not shutil.which("ip") or not shutil.which("tc"):
        _netns_probe = "link cuts need iproute2 (ip, tc)"
    else:
        name = f"mcf-probe-{os.getpid()}"
        try:
            _run("ip", "netns", "add", name)
            try:
                _run("ip", "-n", name, "link", "set", "lo", "up")
                LinkCutter(name).cut([5555])
                _netns_probe = ""
            finally:
                _run("ip", "netns", "del", name, check=False)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            _netns_probe = f"this machine cannot cut links in a network namespace: {e}"
    return _netns_probe or None


class NetNS:
    """A private network namespace that this thread (the test's main thread) enters, so
    every process it starts afterwards shares one loopback of its own; leaving restores the
    thread's previous namespace and deletes this one. Use as a context manager."""

    def __init__(self):
        self.name = f"mcf-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.prev = None

    def __enter__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        _run("ip", "netns", "add", self.name)
        try:
            _run("ip", "-n", self.name, "link", "set", "lo", "up")
            self.prev = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            fd = os.open(f"/var/run/netns/{self.name}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        if self.prev is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.setns(self.prev, CLONE_NEWNET)
            os.close(self.prev)
            self.prev = None
        _run("ip", "netns", "del", self.name, check=False)


class LinkCutter:
    """Cuts every TCP port of a process off the namespace's loopback: packets to or from
    them are classified into an htb class whose queue (pfifo limit 0) drops everything.
    Other traffic is unclassified and goes out unshaped (htb default 0)."""

    def __init__(self, netns):
        self.ns = netns
        self.ready = False

    def _tc(self, *args):
        return _run("ip", "netns", "exec", self.ns, "tc", *args)

    def _setup(self):
        if not self.ready:
            self._tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "0")
            self._tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:2", "htb",
                     "rate", "8bit", "ceil", "8bit")
            self._tc("qdisc", "add", "dev", "lo", "parent", "1:2", "handle", "20:", "pfifo",
                     "limit", "0")
            self.ready = True

    def cut(self, ports):
        self._setup()
        for p in ports:
            for field in ("dport", "sport"):
                self._tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio",
                         "1", "u32", "match", "ip", field, str(p), "0xffff", "flowid", "1:2")

    def heal(self):
        if self.ready:
            _run("ip", "netns", "exec", self.ns, "tc", "filter", "del", "dev", "lo", "parent",
                 "1:", "prio", "1", check=False)


def listening_ports(pid):
    """TCP ports process pid listens on (its sockets' inodes matched in /proc/net/tcp of
    the current namespace)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
                if t.startswith("socket:["):
                    inodes.add(t[8:-1])
    ports = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                ports.add(int(parts[1].split(":")[1], 16))
    return sorted(ports)


# ---- the nemesis ----------------------------------------------------------------------

FAULTS = ("stop_node", "kill_node", "stop_writer", "kill_writer", "restart_master",
          "cut_node")


class Nemesis:
    """Applies one fault at a time from a seeded schedule: each kind comes once per cycle
    (shuffled), is held for ``hold`` seconds (a range) and healed. Killed nodes and writers
    are replaced by fresh processes (new names) so the cluster keeps its size. Stops stay
    below the master's client_ttl (so no client expires unless the store is wrong)."""

    def __init__(self, cluster, writers, seed=0, hold=(1.0, 4.0), cutter=None,
                 new_writer=None, faults=FAULTS, log=print):
        self.c = cluster
        self.writers = writers
        self.rng = random.Random(seed)
        self.hold = hold
        self.cutter = cutter
        self.new_writer = new_writer
        self.faults = [f for f in faults if f != "cut_node" or cutter is not None]
        self.log = log
        self.events = []  # (t, kind, target name, held seconds)
        self.killed = set()  # hostnames of killed nodes
        self.stopped_long = set()  # hostnames stopped longer than client_ttl (none planned)
        self._cycle = []

    def _live_nodes(self):
        return [n for n in self.c.nodes if not n.dead]

    def step(self):
        if not self._cycle:
            self._cycle = list(self.faults)
            self.rng.shuffle(self._cycle)
        kind = self._cycle.pop()
        held = self.rng.uniform(*self.hold)
        t = time.time()
        target = ""
        if kind == "stop_node":
            n = self.rng.choice(self._live_nodes())
            target = n.name
            n.stop()
            time.sleep(held)
            n.cont()
        elif kind == "kill_node":
            live = self._live_nodes()
            n = self.rng.choice(live)
            target = n.name
            n.kill9()
            self.killed.add(n.hostname)
            time.sleep(held)
            self.c.nodes.remove(n)
            self.c.nodes.append(self.c.node(f"node-r{len(self.events)}"))
        elif kind == "stop_writer":
            w = self.rng.choice([w for w in self.writers if not w.dead])
            target = w.name
            w.stop()
            time.sleep(held)
            w.cont()
        elif kind == "kill_writer":
            w = self.rng.choice([w for w in self.writers if not w.dead])
            target = w.name
            w.kill9()
            time.sleep(held)
            if self.new_writer:
                self.writers.append(self.new_writer())
        elif kind == "restart_master":
            target = "master"
            self.c.restart_master()
            time.sleep(held)
        elif kind == "cut_node":
            n = self.rng.choice(self._live_nodes())
            target = n.name
            self.cutter.cut(listening_ports(n.pid))
            time.sleep(held)
            self.cutter.heal()
        self.events.append((t, kind, target, round(held, 2)))
        self.log(f"nemesis: {kind} {target} for {held:.1f}s")


# ---- the checker and its report -------------------------------------------------------


class Report:
    """What one nemesis run saw. ``failures()`` is empty when the store kept its promise:
    no wrong bytes at any time, every acknowledged key that is gone is explained by an
    allowed cause, no read stalled longer than one deadline."""

    ALLOWED = ("owner_killed", "owner_expired", "evicted", "master_restarted")

    def __init__(self):
        self.acked = 0
        self.checked = 0
        self.removed = 0
        self.final = {"ok": 0, "miss": 0, "wrong_bytes": 0, "other_key": 0}
        self.lost = {}  # cause -> count
        self.lost_examples = {}
        self.wrong = []  # (when, key, verdict, detail)
        self.during = {}
        self.stalls = 0
        self.stall_examples = []
        self.events = []
        self.seconds = 0.0
        self.deadline_s = 0.0
        self.notes = []

    @property
    def wrong_total(self):
        return (self.final["wrong_bytes"] + self.final["other_key"] +
                self.during.get("wrong_bytes", 0) + self.during.get("other_key", 0))

    def failures(self):
        out = []
        if self.wrong_total:
            out.append(f"{self.wrong_total} reads returned wrong bytes: {self.wrong[:5]}")
        bad = {c: n for c, n in self.lost.items() if c not in self.ALLOWED}
        if bad:
            ex = {c: self.lost_examples.get(c, [])[:3] for c in bad}
            out.append(f"acknowledged keys lost without an allowed cause: {bad} e.g. {ex}")
        if self.stalls:
            out.append(f"{self.stalls} reads stalled longer than one deadline "
                       f"({self.deadline_s}s): {self.stall_examples[:5]}")
        return out

    def text(self):
        kinds = {}
        for e in self.events:
            kinds[e[1]] = kinds.get(e[1], 0) + 1
        lines = [
            f"faults report: {self.seconds:.0f}s, {len(self.events)} faults {kinds}",
            f"  acknowledged puts: {self.acked} (removed by their writers: {self.removed}, "
            f"checked at the end: {self.checked})",
            f"  reads during the run: {self.during.get('reads', 0)} (ok "
            f"{self.during.get('ok', 0)}, miss (incl. keys removed meanwhile) "
            f"{self.during.get('miss', 0)}, wrong bytes "
            f"{self.during.get('wrong_bytes', 0)}, other key's bytes "
            f"{self.during.get('other_key', 0)}, slowest {self.during.get('max_read_s', 0):.2f}s)",
            f"  final reads: {self.final}",
            f"  wrong bytes (must be 0): {self.wrong_total}",
            f"  lost acknowledged keys by cause: {self.lost or '{}'} "
            f"(allowed: {', '.join(self.ALLOWED)})",
            f"  stalls longer than one deadline ({self.deadline_s}s): {self.stalls}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        f = self.failures()
        lines.append("  verdict: " + ("PASS" if not f else "FAIL: " + "; ".join(f)))
        return "\n".join(lines)


def classify_loss(entry, killed, expired, restarts, evicted_any):
    """The cause of a missing acknowledged key, from what the nemesis did."""
    if any(entry["t"] < r for r in restarts):
        return "master_restarted"
    eps = set(entry["eps"])
    if eps and eps <= killed | expired and eps & killed:
        return "owner_killed"
    if eps and eps <= killed | expired:
        return "owner_expired"
    if evicted_any:
        return "evicted"
    return "unexplained"


def run_nemesis(seconds=None, seed=1, writers=2, deadline_s=2.0, cut_links=None,
                log=print, workdir=None):
    """The whole run: master (short client_ttl and lease), 3 nodes of 24 MiB, ``writers``
    writer processes (one over TCP, the rest with same-host memory where they can) putting
    64 KiB..2 MiB values, one TCP reader checking every value during the run, the nemesis,
    then a final read of every acknowledged, not removed key from a fresh client. Returns
    the Report. cut_links: None = when the machine allows it; False = never."""
    seconds = nemesis_seconds() if seconds is None else seconds
    if cut_links is None:
        cut_links = netns_unavailable() is None
    rep = Report()
    rep.deadline_s = deadline_s
    if not cut_links:
        rep.notes.append("link cuts skipped: " + (netns_unavailable() or "disabled"))
    tmp = workdir or tempfile.mkdtemp(prefix="mc-faults-")
    ns = NetNS() if cut_links else contextlib.nullcontext()
    client_ttl = 10
    with ns:
        c = Cluster(f"--client_ttl={client_ttl}", "--default_kv_lease_ttl=300",
                    "--put_start_discard_timeout_sec=3", "--put_start_release_timeout_sec=6",
                    nodes=3, segment=32 * MiB)
        try:
            stop_at = time.time() + seconds
            sizes = [16 * 1024, 64 * 1024, 128 * 1024, 256 * 1024]
            journals = []
            wlist = []

            def new_writer(i=None):
                i = len(wlist) if i is None else i
                name = f"w{i}"
                env = ({"MC_FORCE_TCP": "1", "MC_TRANSFER_TIMEOUT": "2"} if i % 2 == 0
                       else {"MC_TRANSFER_TIMEOUT": "5"})
                w = c.client(name, env)
                j = os.path.join(tmp, f"{name}.journal")
                journals.append(j)
                w.send_fn("writer_loop", name, j, stop_at, sizes, 40, 1, seed * 100 + i, 0.4)
                wlist.append(w)
                return w

            for i in range(writers):
                new_writer(i)
            reader = c.client("reader", {"MC_FORCE_TCP": "1", "MC_TRANSFER_TIMEOUT": "5"})
            rpath = os.path.join(tmp, "reader.json")
            reader.send_fn("reader_loop", journals, stop_at, deadline_s, rpath, seed)
            cutter = LinkCutter(ns.name) if cut_links else None
            nem = Nemesis(c, wlist, seed=seed, cutter=cutter,
                          new_writer=lambda: new_writer(None), log=log,
                          hold=(deadline_s + 0.5, min(deadline_s + 2, client_ttl / 2)))
            t0 = time.time()
            log(f"nemesis: cluster up, faults for {seconds:.0f}s")
            while time.time() < stop_at - 2:
                time.sleep(min(1.0, max(0.0, stop_at - 2 - time.time())))
                if time.time() < stop_at - 6:
                    nem.step()
            rep.events = nem.events
            log("nemesis: faults over, collecting the writers and the reader")
            # the nemesis is over: let the writers and the reader finish their loops
            collect_by = time.monotonic() + 20
            for w in wlist:
                if not w.dead:
                    try:
                        w.result(timeout=max(1.0, collect_by - time.monotonic()))
                    except Exception as e:  # noqa: BLE001 - a stuck writer is a finding
                        rep.notes.append(f"writer {w.name} did not finish its last put "
                                         f"within 20s of the end: {str(e)[:120]}")
                        rep.stalls += 1  # a put stuck that long is a stall too
                        rep.stall_examples.append(["put", w.name, "> 20s"])
                        w.kill9()
            during = {}
            try:
                during = reader.result(timeout=max(1.0, collect_by + 10 - time.monotonic()))
            except Exception as e:  # noqa: BLE001 - a stuck reader is itself a finding
                rep.notes.append(f"reader did not finish: {str(e)[:200]}")
                with contextlib.suppress(OSError, ValueError):
                    with open(rpath) as f:
                        during = json.load(f)
            rep.during = during
            rep.stalls = during.get("stalls", 0)
            rep.stall_examples = during.get("stall_keys", [])
            rep.wrong += [("during",) + tuple(w) for w in during.get("wrong", [])]
            # final check: every acknowledged, not removed key, from a fresh client
            acked = {}
            for j in journals:
                acked.update(procfns.read_journal(j))
            rep.acked = len(acked)
            rep.removed = sum(e["removed"] for e in acked.values())
            keys = [k for k, e in acked.items() if not e["removed"]]
            rep.checked = len(keys)
            log(f"nemesis: final read of {len(keys)} keys")
            checker = c.client("checker", {"MC_FORCE_TCP": "1"})
            final = checker.fn("final_check", keys, deadline_s, timeout=120)
            mounted = c.segments()
            alive = {n.hostname for n in c.nodes if not n.dead}
            expired = alive - mounted
            evicted_left = int(c.metric("master_evicted_key_count"))
            rep.notes.append(f"the master evicted {evicted_left} keys (since its last start)")
            for k, (verdict, detail, dt) in final.items():
                rep.final[verdict] += 1
                if dt > deadline_s:
                    rep.stalls += 1
                    rep.stall_examples.append(["final", k, round(dt, 2)])
                if verdict in ("wrong_bytes", "other_key"):
                    rep.wrong.append(("final", k, verdict, detail, acked[k]["eps"]))
                elif verdict == "miss":
                    cause = classify_loss(acked[k], nem.killed, expired, c.master_restarts,
                                          evicted_left > 0)
                    evicted_left -= cause == "evicted"
                    rep.lost[cause] = rep.lost.get(cause, 0) + 1
                    rep.lost_examples.setdefault(cause, []).append(
                        (k, acked[k]["eps"], round(acked[k]["t"] - t0, 1)))
            rep.seconds = time.time() - t0
        finally:
            c.close()
            if workdir is None:
                shutil.rmtree(tmp, ignore_errors=True)
    return rep


# ---- kernel socket queues (to wait for bytes in flight, not for time) -----------------


def tcp_queues(ports):
    """[(local port, remote port, tx queue, rx queue)] of every TCP socket (this
    namespace) with a local or remote port in ports; orphans (closed by their process,
    still sending) included."""
    ports = set(ports)
    out = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            with open(path) as f:
                for line in f.readlines()[1:]:
                    p = line.split()
                    lp = int(p[1].rsplit(":", 1)[1], 16)
                    rp = int(p[2].rsplit(":", 1)[1], 16)
                    if lp in ports or rp in ports:
                        tx, rx = (int(x, 16) for x in p[4].split(":"))
                        out.append((lp, rp, tx, rx))
    return out


def bytes_in_flight(ports):
    """Bytes on their way to the process listening on ports, still in the kernel: not yet
    sent by a peer (its send queue towards ports) or not yet read (receive queues of the
    sockets on ports). Bytes going the other way (replies a stopped peer does not read)
    do not count."""
    ports = set(ports)
    return sum((rx if lp in ports else 0) + (tx if rp in ports else 0)
               for lp, rp, tx, rx in tcp_queues(ports))


def wait_drained(ports, timeout=15.0):
    """Waits until no byte on its way to ports is queued in the kernel; True when so."""
    return wait_until(lambda: bytes_in_flight(ports) == 0, timeout, 0.02)


def query_key(cluster, key):
    """(HTTP status, JSON or text) of the master's /query_key for key."""
    import urllib.parse

    st, body = cluster.master.http("/query_key?key=" + urllib.parse.quote(key, safe=""))
    try:
        return st, json.loads(body)
    except ValueError:
        return st, body.decode(errors="replace")


def wait_space_free(cluster, below=64 * 1024, timeout=20.0):
    """Waits until the master has (almost) nothing allocated: removed objects whose read
    leases still ran are freed when those end (deferred frees)."""
    return wait_until(lambda: cluster.allocated() < below, timeout, 0.1)
