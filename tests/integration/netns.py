"""Several "hosts" on one machine for the HA tests: Linux network namespaces joined by
veth pairs to one bridge (``ip netns``, ``ip link``; Debian iproute2; needs root).

- ``Lab(names)``: one namespace per name (``mcl<tag><name>``), plus a hub namespace that
  holds the bridge, so the machine's own namespace is never touched. Each host gets
  ``10.<a>.<b>.<i+1>/24`` on its ``eth0`` (``lab.addr[name]``) and its own loopback; the
  /24 is picked per lab (pid and a random byte) so two labs do not collide.
  ``lab.popen(name, args, **kw)`` runs a program inside a host (``ip netns exec`` execs
  it, so the Popen's pid is the program's: signals reach it directly);
  ``lab.run(name, args)`` runs one command to completion; ``lab.http(name, url)`` GETs
  a URL from inside a host (no route reaches the namespaces from outside).
  ``lab.close()`` kills every process started through the lab (its process group) and
  deletes the namespaces (their veths go with them); also run at exit and from the
  pytest fixture's teardown, so a failed test leaves nothing.
  ``lab.post(name, url, obj)`` POSTs JSON from inside a host (etcd's v3 gateway).
  ``lab.cut(name, peers)`` / ``lab.heal(name, peers)``: a blackhole route in host
  `name` to each peer's address (its packets to them are dropped, connects fail at once;
  the peers still reach nothing of it back), and its removal: a partition between
  `name` and `peers` while the rest of the lab still reaches `name`.
- ``unavailable()``: None when namespaces can be made here, else the reason (for a skip).

Every wait is bounded by a deadline.
"""
import atexit
import json
import os
import random
import shutil
import signal
import subprocess

IP = shutil.which("ip") or "/usr/sbin/ip"
_LABS = []


def _ip(*args, check=True):
    r = subprocess.run([IP, *args], capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def unavailable():
    """Why network namespaces cannot be used here (None when they can)."""
    if not os.access(IP, os.X_OK):
        return "iproute2's ip is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    name = f"mclprobe{os.getpid() % 100000}"
    r = _ip("netns", "add", name, check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def _status_and_body(r):
    """(status, parsed JSON or text) from the output of Lab.http/post's child (its first
    line the status, 0 when nothing answered, the rest the body or the reason); (0,
    stderr) when the child printed no status."""
    first, _, rest = r.stdout.partition("\n")
    try:
        status = int(first)
    except ValueError:
        return 0, r.stderr
    try:
        return status, json.loads(rest)
    except ValueError:
        return status, rest


class Lab:
    def __init__(self, names):
        self.tag = f"{os.getpid() % 1000:03d}{random.randrange(100):02d}"
        self.hub = f"mcl{self.tag}hub"
        self.ns = {n: f"mcl{self.tag}{n}"[:15] for n in names}
        a, b = 100 + os.getpid() % 150, random.randrange(1, 250)
        self.addr = {n: f"10.{a}.{b}.{i + 1}" for i, n in enumerate(names)}
        self.procs = []
        self._made = []
        _LABS.append(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self):
        _ip("netns", "add", self.hub)
        self._made.append(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        _ip("-n", self.hub, "link", "set", "lo", "up")
        for i, (n, ns) in enumerate(self.ns.items()):
            _ip("netns", "add", ns)
            self._made.append(ns)
            # both ends are made in the hub, then one moves into the host
            _ip("-n", self.hub, "link", "add", f"v{i}", "type", "veth", "peer", "name",
                f"h{i}")
            _ip("-n", self.hub, "link", "set", f"h{i}", "netns", ns)
            _ip("-n", self.hub, "link", "set", f"v{i}", "master", "br0")
            _ip("-n", self.hub, "link", "set", f"v{i}", "up")
            _ip("-n", ns, "link", "set", f"h{i}", "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.addr[n]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def _exec(self, name, args):
        return [IP, "netns", "exec", self.ns[name], *[str(a) for a in args]]

    def popen(self, name, args, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(self._exec(name, args), start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def run(self, name, args, timeout=20):
        return subprocess.run(self._exec(name, args), capture_output=True, text=True,
                              timeout=timeout)

    def http(self, name, url, timeout=3):
        """GET url from inside host `name`: (status, parsed JSON or text), (0, reason) when
        nothing answered."""
        code = ("import json,sys,urllib.request\n"
                "try:\n"
                f"    r=urllib.request.urlopen(sys.argv[1],timeout={timeout})\n"
                "    print(r.status); print(r.read().decode())\n"
                "except Exception as e:\n"
                "    print(0); print(e)\n")
        return _status_and_body(self.run(name, ["python3", "-c", code, url],
                                         timeout=timeout + 10))

    def post(self, name, url, obj, timeout=3):
        """POST obj (JSON) to url from inside host `name`: (status, parsed JSON or text),
        (0, reason) when nothing answered."""
        code = ("import json,sys,urllib.request\n"
                "try:\n"
                "    q=urllib.request.Request(sys.argv[1],data=sys.argv[2].encode(),"
                "headers={'Content-Type':'application/json'})\n"
                f"    r=urllib.request.urlopen(q,timeout={timeout})\n"
                "    print(r.status); print(r.read().decode())\n"
                "except Exception as e:\n"
                "    print(0); print(e)\n")
        return _status_and_body(self.run(name, ["python3", "-c", code, url, json.dumps(obj)],
                                         timeout=timeout + 10))

    def cut(self, name, peers):
        for peer in peers:
            _ip("-n", self.ns[name], "route", "add", "blackhole", f"{self.addr[peer]}/32")

    def heal(self, name, peers):
        for peer in peers:
            _ip("-n", self.ns[name], "route", "del", "blackhole", f"{self.addr[peer]}/32",
                check=False)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made = []
        if self in _LABS:
            _LABS.remove(self)


@atexit.register
def _close_all():
    for lab in list(_LABS):
        lab.close()
