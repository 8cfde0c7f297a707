"""Real etcd and redis-server processes for the metadata-backend tests, on free
127.0.0.1 ports with temporary data (the fixtures in conftest.py start them once per
session, on first use, and clear their keys for each user).

- ``EtcdServer(workdir)``: ``/usr/bin/etcd`` (Debian etcd-server) as a one-member
  cluster: client and peer URLs on free loopback ports, data under ``workdir`` (a tmpfs
  when one is writable: etcd fsyncs every write). It never touches a system etcd the
  package may have started on 2379. Ready when ``/health`` answers ``"health":"true"``.
  ``conn`` is ``etcd://127.0.0.1:<port>``, ``bare`` upstream's canonical
  ``127.0.0.1:<port>``; ``get(key)`` reads a key over the v3 JSON gateway; ``clear()``
  deletes every key; ``ops()`` counts the key-value operations served (/metrics).
- ``RedisServer(workdir, password=None)``: ``redis-server --save '' --appendonly no``
  (``--requirepass`` when a password is given); ``conn(db)`` its ``redis://`` URL;
  ``get(key, db)``, ``clear()`` (FLUSHALL), ``ops()`` (GET/SET/DEL served, INFO
  commandstats) over a raw RESP socket.

``stop()`` kills the process group and removes the data. Waits are bounded by deadlines.
"""
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

START_TIMEOUT = 30.0  # a deadline for a loaded 2-core box, not a claim about speed


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(name):
    """Path of a server binary, or None when it is not installed."""
    return shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.access(p, os.X_OK)), None)


def _workdir(base, prefix):
    shm = "/dev/shm"
    root = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else base
    return tempfile.mkdtemp(prefix=prefix, dir=root)


class _Proc:
    def _start(self, args, log_path):
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def logs(self):
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read()[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def _wait_ready(self, ready, what):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {self.proc.returncode} before it "
                                   f"served: {self.logs()}")
            if ready():
                return
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"{what} did not serve within {START_TIMEOUT} s: {self.logs()}")

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class EtcdServer(_Proc):
    def __init__(self, base_dir):
        exe = binary("etcd")
        if not exe:
            raise FileNotFoundError("etcd is not installed (Debian etcd-server; "
                                    "scripts/setup.sh installs it)")
        self.dir = _workdir(base_dir, "mc-etcd-")
        self.port, peer = _free_port(), _free_port()
        client, peer_url = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{peer}"
        self._start([exe, "--name", "mc-test", "--data-dir", os.path.join(self.dir, "data"),
                     "--listen-client-urls", client, "--advertise-client-urls", client,
                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                     "--initial-cluster", f"mc-test={peer_url}",
                     "--initial-cluster-state", "new",
                     "--max-request-bytes", str(32 << 20)],
                    os.path.join(self.dir, "etcd.log"))
        self._wait_ready(self._healthy, f"etcd on 127.0.0.1:{self.port}")

    @property
    def conn(self):
        return f"etcd://127.0.0.1:{self.port}"

    @property
    def bare(self):
        return f"127.0.0.1:{self.port}"

    def _healthy(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health",
                                        timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def _call(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def get(self, key):
        """The value stored at key (bytes), or None."""
        r = self._call("/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = r.get("kvs") or []
        return base64.b64decode(kvs[0].get("value", "")) if kvs else None

    def keys(self, prefix=""):
        end = prefix.encode()[:-1] + bytes([prefix.encode()[-1] + 1]) if prefix else b"\0"
        r = self._call("/v3/kv/range", {"key": base64.b64encode(prefix.encode() or b"\0").decode(),
                                        "range_end": base64.b64encode(end).decode(),
                                        "keys_only": True})
        return sorted(base64.b64decode(kv["key"]).decode() for kv in r.get("kvs") or [])

    def ops(self):
        """Key-value operations served so far (range + put + txn + delete, from /metrics)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(int(float(line.split()[-1])) for line in text.splitlines()
                   if line.split(" ")[0] in ("etcd_mvcc_range_total", "etcd_mvcc_put_total",
                                             "etcd_mvcc_txn_total", "etcd_mvcc_delete_total"))

    def clear(self):
        self._call("/v3/kv/deleterange", {"key": base64.b64encode(b"\0").decode(),
                                          "range_end": base64.b64encode(b"\0").decode()})


def _resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class RedisServer(_Proc):
    def __init__(self, base_dir, password=None):
        exe = binary("redis-server")
        if not exe:
            raise FileNotFoundError("redis-server is not installed (scripts/setup.sh "
                                    "installs it)")
        self.dir = _workdir(base_dir, "mc-redis-")
        self.port, self.password = _free_port(), password
        args = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir]
        if password:
            args += ["--requirepass", password]
        self._start(args, os.path.join(self.dir, "redis.log"))
        self._wait_ready(self._pong, f"redis-server on 127.0.0.1:{self.port}")

    def conn(self, db=None):
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}" + (f"/{db}" if db is not None else "")

    def command(self, *args, db=None):
        """Runs one command on a fresh connection; returns the reply (bytes, int, None)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            f = s.makefile("rb")
            pre = []
            if self.password:
                pre.append(("AUTH", self.password))
            if db is not None:
                pre.append(("SELECT", db))
            for p in pre:
                s.sendall(_resp(*p))
                self._read(f)
            s.sendall(_resp(*args))
            return self._read(f)

    @staticmethod
    def _read(f):
        line = f.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = f.read(n + 2)
            return data[:-2]
        if kind == b"*":
            return [RedisServer._read(f) for _ in range(int(rest))]
        raise RuntimeError(f"bad RESP line {line!r}")

    def _pong(self):
        try:
            return self.command("PING") == b"PONG"
        except (OSError, RuntimeError):
            return False

    def get(self, key, db=None):
        return self.command("GET", key, db=db)

    def keys(self, prefix="", db=None):
        return sorted(k.decode() for k in self.command("KEYS", prefix + "*", db=db))

    def ops(self):
        """GET + SET + DEL commands served so far (INFO commandstats)."""
        n = 0
        for line in self.command("INFO", "commandstats").decode().splitlines():
            name, _, rest = line.partition(":")
            if name in ("cmdstat_get", "cmdstat_set", "cmdstat_del"):
                n += int(rest.split(",")[0].split("=")[1])
        return n

    def clear(self):
        self.command("FLUSHALL")
