"""An HA cluster on network namespaces (netns.Lab), shared by tests/integration/
test_ha_netns.py and bench/bench_failover.py: etcd member(s), HA masters and store
clients, each on its own "host".

- ``HaCluster(lab, master_bin, etcd_hosts=("etcd",), ttl=2, backend="etcd",
  ha_sync="async")``: starts
  etcd on each etcd host (one member, or a cluster when several are given) on
  ``<addr>:2379``; ``endpoints`` is ``"a:2379;b:2379"``; ``locator`` ``"etcd://" +
  endpoints``. ``backend="redis"``: one redis-server on the first of those hosts
  (``<addr>:6379``) instead, ``locator`` its ``redis://`` URL.
- ``start_master(host)``: ``mooncake_master --enable_ha`` on that host (RPC 50051,
  admin 9003 on the host's address, lease ``ttl`` s); ``role(host)`` its /role JSON
  (None when it does not answer); ``wait_leader(timeout, among)`` the host that reports
  leader; ``kill(host, sig)``.
- ``etcd[host]``: the Popen of each etcd member (``kill_etcd(host)``: SIGKILL and
  wait); ``etcd_call(host, path, obj)``: a v3 gateway POST from that host (JSON
  answer, None when it failed); ``lease_ttl(host)``: (lease id, seconds left) of the
  leader key's lease as etcd on `host` reports it (None when there is no key).
- ``log_text(name)``: what a process of the cluster logged so far.
- ``store(host)``: a ha_store_child.py client on that host (master_server_addr the etcd
  locator, P2PHANDSHAKE metadata); ``StoreChild.cmd(op, timeout, **kw)`` (ops of
  ha_store_child.py: put_get, until_ok, put_many, check_many, close).

Processes belong to the lab (lab.close() kills them). Waits are bounded by deadlines.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
START_TIMEOUT = 30.0  # a deadline for a loaded 2-core box, not a claim about speed


class StoreChild:
    def __init__(self, proc):
        self.proc = proc

    def read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"store child: no answer within {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"store child exited with {self.proc.poll()}")
        return json.loads(line)

    def send(self, op, **kw):
        self.proc.stdin.write((json.dumps({"op": op, **kw}) + "\n").encode())
        self.proc.stdin.flush()

    def cmd(self, op, timeout=60.0, **kw):
        self.send(op, **kw)
        return self.read(timeout)


class HaCluster:
    def __init__(self, lab, master_bin, etcd_hosts=("etcd",), ttl=2, logdir=None,
                 backend="etcd", ha_sync="async"):
        self.lab, self.bin, self.ttl, self.backend = lab, master_bin, ttl, backend
        self.ha_sync = ha_sync
        self.logdir = logdir or tempfile.mkdtemp(prefix="mc-ha-")
        self.masters = {}
        self.etcd = {}
        self.etcd_hosts = list(etcd_hosts)
        self.endpoints = ";".join(f"{lab.addr[h]}:2379" for h in self.etcd_hosts)
        self.locator = "etcd://" + self.endpoints
        self.etcd_dir = None
        if backend == "redis":
            self.locator = f"redis://{lab.addr[self.etcd_hosts[0]]}:6379"
            self._start_redis()
        else:
            self._start_etcd()

    def _start_redis(self):
        h = self.etcd_hosts[0]
        ip = self.lab.addr[h]
        self.lab.popen(h, ["redis-server", "--bind", ip, "--port", "6379", "--save", "",
                           "--appendonly", "no", "--protected-mode", "no"],
                       stdout=self.log(h), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while self.lab.run(h, ["redis-cli", "-h", ip, "ping"]).stdout.strip() != "PONG":
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server on {h} does not answer")
            time.sleep(0.1)

    def log(self, name):
        return open(os.path.join(self.logdir, f"{name}.log"), "ab")

    def _start_etcd(self):
        a = self.lab.addr
        initial = ",".join(f"{h}=http://{a[h]}:2380" for h in self.etcd_hosts)
        root = "/dev/shm" if os.access("/dev/shm", os.W_OK) else self.logdir
        self.etcd_dir = tempfile.mkdtemp(prefix="mc-ha-etcd-", dir=root)
        for h in self.etcd_hosts:
            args = ["etcd", "--name", h, "--data-dir", os.path.join(self.etcd_dir, h),
                    "--listen-client-urls", f"http://{a[h]}:2379",
                    "--advertise-client-urls", f"http://{a[h]}:2379",
                    "--listen-peer-urls", f"http://{a[h]}:2380",
                    "--initial-advertise-peer-urls", f"http://{a[h]}:2380",
                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                    "--heartbeat-interval", "100", "--election-timeout", "1000"]
            self.etcd[h] = self.lab.popen(h, args, stdout=self.log(h),
                                          stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        for h in self.etcd_hosts:
            while True:
                st, body = self.lab.http(h, f"http://{a[h]}:2379/health")
                if st == 200 and isinstance(body, dict) and body.get("health") == "true":
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"etcd on {h} not healthy: {body}")
                time.sleep(0.1)

    def start_master(self, host):
        ip = self.lab.addr[host]
        conn = self.locator if self.backend == "redis" else self.endpoints
        args = [self.bin, "--enable_ha", f"--ha_backend_type={self.backend}",
                f"--ha_backend_connstring={conn}",
                f"--rpc_address={ip}", "--rpc_port=50051", f"--metrics_host={ip}",
                "--metrics_port=9003", f"--ha_lease_ttl_sec={self.ttl}",
                # sync: a put_end waiting for the standby holds its RPC loop, the
                # standby's fetch needs another one (docs/ha.md)
                f"--rpc_thread_num={2 if self.ha_sync == 'sync' else 1}", "--client_ttl=5",
                f"--ha_sync={self.ha_sync}"]
        p = self.lab.popen(host, args, stdout=self.log(host), stderr=subprocess.STDOUT)
        self.masters[host] = p
        deadline = time.monotonic() + START_TIMEOUT
        while self.role(host) is None:
            if p.poll() is not None:
                raise RuntimeError(f"master on {host} exited with {p.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"master on {host}: no /role")
            time.sleep(0.05)
        return p

    def rpc_addr(self, host):
        return f"{self.lab.addr[host]}:50051"

    def role(self, host, path="/role"):
        """The master's /role (or path) JSON, None when it does not answer."""
        st, body = self.lab.http(host, f"http://{self.lab.addr[host]}:9003{path}", timeout=2)
        return body if st == 200 and isinstance(body, dict) else None

    def wait_leader(self, timeout, among=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for h in among or list(self.masters):
                if self.masters[h].poll() is None:
                    r = self.role(h)
                    if r and r.get("role") == "leader":
                        return h, r["view_version"]
            time.sleep(0.05)
        raise TimeoutError(f"no leader among {among or list(self.masters)} within {timeout} s")

    def kill(self, host, sig=signal.SIGKILL):
        os.kill(self.masters[host].pid, sig)

    def kill_etcd(self, host):
        self.etcd[host].kill()
        self.etcd[host].wait(timeout=10)

    def etcd_call(self, host, path, obj):
        st, body = self.lab.post(host, f"http://{self.lab.addr[host]}:2379{path}", obj)
        return body if st == 200 and isinstance(body, dict) else None

    def lease_ttl(self, host, cluster_id="mooncake_cluster"):
        import base64
        key = base64.b64encode(f"mooncake-store/{cluster_id}/master_view".encode()).decode()
        r = self.etcd_call(host, "/v3/kv/range", {"key": key})
        kvs = (r or {}).get("kvs") or []
        if not kvs or "lease" not in kvs[0]:
            return None
        lease = kvs[0]["lease"]
        t = self.etcd_call(host, "/v3/lease/timetolive", {"ID": lease})
        return (lease, int(t["TTL"])) if t and "TTL" in t else None

    def log_text(self, name):
        try:
            with open(os.path.join(self.logdir, f"{name}.log"), "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def store(self, host):
        args = [sys.executable, os.path.join(HERE, "ha_store_child.py"), self.lab.addr[host],
                "P2PHANDSHAKE", self.locator]
        p = self.lab.popen(host, args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=self.log(f"store-{host}"))
        child = StoreChild(p)
        r = child.read(START_TIMEOUT * 2)
        if r.get("setup") != 0:
            raise RuntimeError(f"store setup on {host}: {r}")
        return child

    def close(self):
        self.lab.close()
        import shutil
        if self.etcd_dir:
            shutil.rmtree(self.etcd_dir, ignore_errors=True)
