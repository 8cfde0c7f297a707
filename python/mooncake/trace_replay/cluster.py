"""Processes the replay starts itself: a redis-server, or a local Mooncake cluster (one
mooncake_master with the embedded HTTP metadata server and N store-node processes).

Every child runs in its own process group (so one signal reaches all its threads and
children), gets SIGTERM if the replay process dies (PR_SET_PDEATHSIG), listens on
127.0.0.1 only, and logs to a file under the output directory. stop() sends SIGTERM to
each group, waits, then SIGKILLs what is left and reaps everything.
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from .backends import BackendUnavailable

_PR_SET_PDEATHSIG = 1


def _child_setup():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except Exception:
        pass


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float, proc=None, what="process") -> None:
    """Waits until 127.0.0.1:port accepts connections. Raises BackendUnavailable when
    proc exits first or after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BackendUnavailable(f"{what} exited with status {proc.returncode} before "
                                     f"listening on 127.0.0.1:{port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise BackendUnavailable(f"{what}: nothing listens on 127.0.0.1:{port} after {timeout}s")


def peak_rss_bytes(pid: int) -> int | None:
    """Peak resident set size (VmHWM) of a live process, in bytes; None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def python_module_cmd(module: str, args) -> list:
    """argv that runs `python -m module args` with this interpreter. When the replay runs
    inside another venv (upstream's), MC_REPLAY_EXTRA_PATH names the directory holding
    mooncake/trace_replay, appended to sys.path (after that venv's own mooncake)."""
    extra = os.environ.get("MC_REPLAY_EXTRA_PATH")
    if not extra:
        return [sys.executable, "-m", module, *args]
    boot = (f"import sys, runpy; sys.path.append({extra!r}); "
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", boot, *args]


def find_tool(name: str) -> str | None:
    """A tool next to this interpreter (the venv's bin/), else on PATH."""
    cand = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(cand) and os.access(cand, os.X_OK):
        return cand
    return shutil.which(name)


class Child:
    """A started process: label, Popen, log path; peak RSS read before it is stopped."""

    def __init__(self, label, popen, log_path):
        self.label, self.popen, self.log_path = label, popen, log_path
        self.peak_rss = None

    @property
    def pid(self):
        return self.popen.pid

    def log_tail(self, n=15) -> str:
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""


class ProcessGroup:
    """The children of one run; stop() ends them all (idempotent)."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        os.makedirs(log_dir, exist_ok=True)
        self.children = []

    def spawn(self, label, argv, env=None) -> Child:
        log_path = os.path.join(self.log_dir, f"{label}.log")
        with open(log_path, "wb") as log:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True,
                                 preexec_fn=_child_setup, env=env)
        c = Child(label, p, log_path)
        self.children.append(c)
        return c

    def sample_rss(self):
        for c in self.children:
            if c.popen.poll() is None:
                v = peak_rss_bytes(c.pid)
                if v is not None:
                    c.peak_rss = max(c.peak_rss or 0, v)

    def stop(self, timeout: float = 10.0, order=None) -> None:
        """SIGTERM to every live child's group (in `order` of labels first, e.g. nodes
        before the master), wait up to timeout s, SIGKILL what is left, reap all."""
        self.sample_rss()
        kids = list(self.children)
        if order:
            kids.sort(key=lambda c: next((i for i, o in enumerate(order)
                                          if c.label.startswith(o)), len(order)))
        for c in kids:
            if c.popen.poll() is None:
                try:
                    os.killpg(c.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                if order:           # staged: let this one go before the next
                    try:
                        c.popen.wait(timeout=timeout / 2)
                    except subprocess.TimeoutExpired:
                        pass
        deadline = time.monotonic() + timeout
        for c in kids:
            try:
                c.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for c in kids:
            # the group may hold more than the leader: kill it whatever the leader did
            try:
                os.killpg(c.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                c.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def start_redis(group: ProcessGroup, maxmemory: int, samples: int = 10):
    """Starts redis-server on a free 127.0.0.1 port with maxmemory bytes and allkeys-lru,
    no persistence. Returns (host, port, Child). Raises BackendUnavailable when
    redis-server is missing or does not come up."""
    exe = shutil.which("redis-server")
    if not exe:
        raise BackendUnavailable("redis-server is not installed (Debian: apt-get install "
                                 "redis-server; scripts/setup.sh does it)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="mc-replay-redis-")
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", workdir, "--maxmemory", str(maxmemory),
            "--maxmemory-policy", "allkeys-lru", "--maxmemory-samples", str(samples),
            "--protected-mode", "yes", "--daemonize", "no", "--io-threads", "1"]
    c = group.spawn("redis-server", argv)
    c.workdir = workdir
    wait_port(port, 15, c.popen, "redis-server")
    return "127.0.0.1", port, c


class LocalCluster:
    """A mooncake_master (embedded HTTP metadata server) and `nodes` store nodes, each
    contributing segment_size bytes, all on 127.0.0.1 free ports."""

    def __init__(self, group: ProcessGroup, master_bin: str, nodes: int, segment_size: int,
                 lease_ttl_ms: int, extra_master_args=(), env=None, ssd_dir=None,
                 ssd_size=None):
        """ssd_dir: give every node a disk tier in ssd_dir/node-<i> (the master then runs
        with --enable_offload --offload_on_evict); ssd_size: their bytes together (each
        node gets an equal share as MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES; None: no
        limit but the file system's)."""
        self.group = group
        self.rpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.master_addr = f"127.0.0.1:{self.rpc_port}"
        self.metadata_url = f"http://127.0.0.1:{self.http_port}/metadata"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        argv = [master_bin, f"--rpc_port={self.rpc_port}", "--rpc_address=127.0.0.1",
                f"--metrics_port={self.metrics_port}", "--metrics_host=127.0.0.1",
                "--enable_http_metadata_server=1",
                f"--http_metadata_server_port={self.http_port}",
                "--http_metadata_server_host=127.0.0.1",
                f"--default_kv_lease_ttl={lease_ttl_ms}", *extra_master_args]
        if ssd_dir:
            argv += ["--enable_offload=true", "--offload_on_evict=true"]
        self.master = group.spawn("master", argv, env=env)
        try:
            wait_port(self.rpc_port, 20, self.master.popen, "mooncake_master (rpc)")
            wait_port(self.http_port, 20, self.master.popen, "mooncake_master (metadata)")
        except BackendUnavailable as e:
            raise BackendUnavailable(f"{e}\n--- {self.master.log_path} (tail):\n"
                                     f"{self.master.log_tail()}") from None
        ready_dir = tempfile.mkdtemp(prefix="mc-replay-nodes-")
        self.nodes = []
        try:
            for i in range(nodes):
                ready = os.path.join(ready_dir, f"node-{i}")
                nargs = ["--master", self.master_addr, "--metadata", self.metadata_url,
                         "--segment-size", str(segment_size), "--ready-file", ready]
                # the nodes' segments are populated at setup (MC_TE_PREFAULT, issue 17),
                # so the first seconds of a replay do not pay a page fault per 4 KiB;
                # MC_TE_PREFAULT=0 in the caller's environment turns it off
                nenv = dict(os.environ if env is None else env)
                nenv.setdefault("MC_TE_PREFAULT", "1")
                if ssd_dir:
                    d = os.path.join(ssd_dir, f"node-{i}")
                    os.makedirs(d, exist_ok=True)
                    nargs += ["--ssd-offload-path", d]
                    nenv.pop("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", None)
                    if ssd_size:
                        nenv["MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"] = str(ssd_size // nodes)
                argv = python_module_cmd("mooncake.trace_replay.node", nargs)
                self.nodes.append((group.spawn(f"node-{i}", argv, env=nenv), ready))
            deadline = time.monotonic() + 60
            for c, ready in self.nodes:
                while not os.path.exists(ready):
                    if c.popen.poll() is not None:
                        raise BackendUnavailable(
                            f"store node {c.label} exited with status {c.popen.returncode} "
                            f"during setup\n--- {c.log_path} (tail):\n{c.log_tail()}")
                    if time.monotonic() > deadline:
                        raise BackendUnavailable(f"store node {c.label} not ready after 60 s"
                                                 f"\n--- {c.log_path} (tail):\n{c.log_tail()}")
                    time.sleep(0.05)
        finally:
            shutil.rmtree(ready_dir, ignore_errors=True)

    def stop(self):
        self.group.stop(order=["node-", "master"])
