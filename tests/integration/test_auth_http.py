"""Trust and bounded resources on every HTTP port (issue 11; docs/security.md), against
real processes on loopback:

- each port (the C metadata server, the master's embedded metadata server and admin
  port, the Python KVBootstrapServer, the REST service): without the secret -> 401 before
  any state change; another secret -> 401; a replayed request (same nonce) -> 401; a stale
  one -> 401; the right secret -> works; /health stays open;
- mixed clusters: a server without a secret refuses a signed request, saying so, and
  warns once at start that it is open;
- slowloris (300 connections trickling a byte per second for 10 s, from 10 source
  addresses) and a connection flood (300 from one address) against the metadata and admin
  ports: /health answers within 1 s during the attack, a fresh client's metadata GET/PUT
  works, the server's refusal counters say why, and its RSS stays bounded;
- the metadata store's caps (keys, bytes) -> 507, and memory freed on delete.

Attackers bind 127.0.0.2-127.0.0.12 (all of 127/8 is local on Linux); the tests' own
client uses 127.0.0.1. Figures (health latency under attack, RSS) are printed for
docs/security.md; the assertions are deadlines and bounds, not speed.
"""
import errno
import os
import re
import select
import socket
import subprocess
import time

import pytest
import requests
import requests.auth

from conftest import MCAuth, free_port, read_until, tool, wait_port
from mooncake import _auth
from mooncake.http_metadata_server import KVBootstrapServer, KVPoll

SECRET = b"integration-cluster-secret-0123456789"
OTHER = b"another-cluster-secret-0123456789abcd"


class NoAuth(requests.auth.AuthBase):
    """Sends a request unsigned (also under MC_TEST_AUTH=1)."""

    def __call__(self, r):
        return r


class Raw(requests.auth.AuthBase):
    """Sends a request with exactly this Authorization value (a replay)."""

    def __init__(self, value):
        self.value = value

    def __call__(self, r):
        r.headers["Authorization"] = self.value
        return r


def token_file(tmp_path, secret=SECRET, name="cluster.token"):
    p = tmp_path / name
    p.write_bytes(secret + b"\n")
    p.chmod(0o600)
    return str(p)


def env_with(token=None):
    env = {k: v for k, v in os.environ.items() if k != _auth.ENV and not k.startswith("MOONCAKE_")}
    if token:
        env[_auth.ENV] = token
    return env


def call(method, url, auth, data=None, timeout=10):
    return requests.request(method, url, data=data, auth=auth, timeout=timeout)


# ------------------------------------------------------------------------------ ports
class Port:
    """One HTTP port under test: a protected request that changes state (or lists keys),
    a probe of that state, and whether /health is served."""

    def __init__(self, name, base, method, path, body, probe=None, health=True, proc=None):
        self.name, self.base, self.method, self.path, self.body = name, base, method, path, body
        self.probe, self.health, self.proc = probe, health, proc

    def send(self, auth):
        return call(self.method, self.base + self.path, auth, data=self.body)

    def changed(self):
        return self.probe() if self.probe else False


def md_probe(base, key):
    def probe():
        r = call("GET", f"{base}/metadata?key={key}", MCAuth(SECRET))
        assert r.status_code in (200, 404), r.text
        return r.status_code == 200
    return probe


def start_c_md(spawn, token, *extra):
    port = free_port()
    args = [tool("mooncake_http_metadata_server"), f"--port={port}", "--host=127.0.0.1", *extra]
    if token:
        args.append(f"--auth_token_file={token}")
    p = spawn(args, env=env_with())
    wait_port(port, proc=p)
    return p, port


def start_master(spawn, token, *extra):
    rpc, metrics, md = free_port(), free_port(), free_port()
    p = spawn([tool("mooncake_master"), f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
               f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
               "--enable_http_metadata_server", f"--http_metadata_server_port={md}",
               "--http_metadata_server_host=127.0.0.1", "--enable_metric_reporting=false",
               *extra], env=env_with(token))
    wait_port(metrics, proc=p)
    wait_port(md, proc=p)
    return p, metrics, md


@pytest.fixture
def rest_service(spawn, tmp_path):
    from mc_real_store import has_store, start_master as real_master
    if not has_store:
        pytest.skip("needs MooncakeDistributedStore")
    token = token_file(tmp_path)
    # the service's store client holds the secret: its master must hold it too (the RPC
    # port checks it; a mixed cluster fails at connect)
    master = real_master(lambda args: spawn(args + [f"--auth_token_file={token}"],
                                            env=env_with()))
    port = free_port()
    env = env_with(token)
    env.update(MOONCAKE_MASTER=master, MOONCAKE_LOCAL_HOSTNAME="127.0.0.1",
               MOONCAKE_PROTOCOL="tcp")
    proc = spawn([tool("mc_store_rest_server"), "--host", "127.0.0.1", "--port", str(port),
                  "--max-wait-time", "20", "-D", "global_segment_size=16mb",
                  "-D", "local_buffer_size=16mb"], env=env)
    wait_port(port, proc=proc, timeout=30)
    return f"http://127.0.0.1:{port}"


@pytest.fixture(params=["metadata-c", "metadata-master", "admin", "metadata-python", "rest"])
def port(request, spawn, tmp_path):
    token = token_file(tmp_path)
    key = "mooncake/ram/auth-test"
    if request.param == "metadata-c":
        proc, p = start_c_md(spawn, token)
        base = f"http://127.0.0.1:{p}"
        return Port("metadata-c", base, "PUT", f"/metadata?key={key}", b'{"a":1}',
                    md_probe(base, key), proc=proc)
    if request.param in ("metadata-master", "admin"):
        proc, metrics, md = start_master(spawn, token)
        if request.param == "admin":
            return Port("admin", f"http://127.0.0.1:{metrics}", "GET", "/get_all_keys", None,
                        proc=proc)
        base = f"http://127.0.0.1:{md}"
        return Port("metadata-master", base, "PUT", f"/metadata?key={key}", b'{"a":1}',
                    md_probe(base, key), proc=proc)
    if request.param == "metadata-python":
        s = KVBootstrapServer(0, host="127.0.0.1", auth_token_file=token)
        s.run()
        assert s.poll() == KVPoll.Success
        request.addfinalizer(s.close)
        base = f"http://127.0.0.1:{s.port}"
        return Port("metadata-python", base, "PUT", f"/metadata?key={key}", b'{"a":1}',
                    md_probe(base, key))
    base = request.getfixturevalue("rest_service")

    def rest_probe():
        r = call("GET", f"{base}/api/exist/auth-test", MCAuth(SECRET))
        assert r.status_code == 200, r.text
        return r.json()["exists"]
    return Port("rest", base, "PUT", "/api/put", b'{"key": "auth-test", "value": "v"}',
                rest_probe, health=False)


def assert_refused(r, code):
    assert r.status_code == 401, (r.status_code, r.text)
    assert r.headers.get("WWW-Authenticate") == "MC-HMAC"
    assert r.headers.get("X-MC-Auth-Error") == code, r.headers


def test_without_secret_refused_before_any_state_change(port):
    r = port.send(NoAuth())
    assert_refused(r, "missing")
    assert "no secret" in r.text or "carries no" in r.text
    assert not port.changed()


def test_wrong_secret_refused(port):
    assert_refused(port.send(MCAuth(OTHER)), "bad-mac")
    assert not port.changed()


def test_stale_request_refused(port):
    old = int(time.time() * 1000) - 120_000
    value = _auth.sign(SECRET, port.method, port.path, port.body or b"", now_ms=old)
    assert_refused(port.send(Raw(value)), "stale")
    assert not port.changed()


def test_replayed_request_refused(port):
    value = _auth.sign(SECRET, port.method, port.path, port.body or b"")
    first = port.send(Raw(value))
    assert first.status_code == 200, first.text
    assert_refused(port.send(Raw(value)), "replay")


def test_tampered_request_refused(port):
    """A signature for another body (or path) does not fit this request."""
    value = _auth.sign(SECRET, port.method, port.path + ("x" if port.body is None else ""),
                       (port.body or b"") + b" ")
    assert_refused(port.send(Raw(value)), "bad-mac")
    assert not port.changed()


def test_right_secret_works_and_health_stays_open(port):
    r = port.send(MCAuth(SECRET))
    assert r.status_code == 200, r.text
    if port.probe:
        assert port.changed()
    if port.health:
        assert call("GET", port.base + "/health", NoAuth()).status_code == 200


def test_admin_protects_listings_not_metrics(spawn, tmp_path):
    _, metrics, _ = start_master(spawn, token_file(tmp_path))
    base = f"http://127.0.0.1:{metrics}"
    for path in ("/get_all_keys", "/get_all_segments", "/query_key?key=a"):
        assert_refused(call("GET", base + path, NoAuth()), "missing")
    assert call("GET", base + "/query_key?key=a", MCAuth(SECRET)).status_code == 404
    assert call("GET", base + "/get_all_segments", MCAuth(SECRET)).status_code == 200
    for path in ("/metrics", "/metrics/summary", "/health"):
        assert call("GET", base + path, NoAuth()).status_code == 200
    text = call("GET", base + "/metrics", NoAuth()).text
    assert 'master_admin_http_refused_total{reason="auth_missing"} 3' in text
    assert "http_metadata_keys 0" in text   # the embedded server's counters too


# ------------------------------------------------------------------------ mixed cluster
def test_open_servers_warn_once_and_refuse_signed_requests(spawn):
    proc, p = start_c_md(spawn, None)
    base = f"http://127.0.0.1:{p}"
    r = call("PUT", f"{base}/metadata?key=k", MCAuth(SECRET), data=b"v")
    assert_refused(r, "server-has-no-secret")
    assert "this server has none" in r.text
    assert call("PUT", f"{base}/metadata?key=k", NoAuth(), data=b"v").status_code == 200
    proc.send_signal(2)
    out = proc.communicate(timeout=10)[0].decode()
    assert out.count("is open: no cluster secret is configured") == 1, out

    mproc, metrics, md = start_master(spawn, None)
    assert_refused(call("GET", f"http://127.0.0.1:{metrics}/get_all_keys", MCAuth(SECRET)),
                   "server-has-no-secret")
    assert_refused(call("GET", f"http://127.0.0.1:{md}/metadata?key=k", MCAuth(SECRET)),
                   "server-has-no-secret")
    mproc.send_signal(2)
    out = mproc.communicate(timeout=10)[0].decode()
    assert out.count("admin HTTP server on 127.0.0.1") == 1, out
    assert out.count("HTTP metadata server on 127.0.0.1") == 1, out

    old = os.environ.pop(_auth.ENV, None)
    try:
        s = KVBootstrapServer(0, host="127.0.0.1")
    finally:
        if old is not None:
            os.environ[_auth.ENV] = old
    s.run()
    try:
        r = call("GET", f"http://127.0.0.1:{s.port}/metadata?key=k", MCAuth(SECRET))
        assert_refused(r, "server-has-no-secret")
    finally:
        s.close()


def test_bad_token_files_are_refused_at_start(spawn, tmp_path):
    loose = token_file(tmp_path, name="loose")
    os.chmod(loose, 0o644)
    short = tmp_path / "short"
    short.write_text("tiny\n")
    short.chmod(0o600)
    for path, needle in ((loose, "too open"), (str(short), "at least 16"),
                         (str(tmp_path / "none"), "No such file")):
        r = subprocess.run([tool("mooncake_http_metadata_server"), "--port=0",
                            "--host=127.0.0.1", f"--auth_token_file={path}"],
                           env=env_with(), capture_output=True, text=True, timeout=20)
        assert r.returncode == 2 and needle in r.stderr, r.stderr
        r = subprocess.run([tool("mooncake_master"), "--rpc_port=0", "--metrics_port=0",
                            "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1"],
                           env=env_with(path), capture_output=True, text=True, timeout=20)
        assert r.returncode == 2 and needle in r.stderr and _auth.ENV in r.stderr, r.stderr
    with pytest.raises(_auth.AuthError, match="too open"):
        KVBootstrapServer(0, host="127.0.0.1", auth_token_file=loose)


# ---------------------------------------------------------------- slowloris and floods
TRICKLE = b"PUT /metadata?key=slow HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metric(base, name):
    text = call("GET", base + "/metrics", NoAuth()).text
    m = re.search(r"^" + re.escape(name) + r" (\d+)$", text, re.M)
    return int(m.group(1)) if m else None


def connect_from(src, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    return s


class Attack:
    """Connections that trickle a request one byte per second (reopened when the server
    closes them: a persistent attacker), all from the given source addresses."""

    def __init__(self, ports, sources, per_source):
        self.ports, self.sources, self.per_source = ports, sources, per_source
        self.socks = {}   # socket -> (port, source, bytes sent)
        self.closed_by_server = 0
        for p in ports:
            for src in sources:
                for _ in range(per_source):
                    self.socks[connect_from(src, p)] = [p, src, 0]

    def step(self):
        for s in list(self.socks):
            p, src, sent = self.socks[s]
            gone = False
            r, _, _ = select.select([s], [], [], 0)
            if r:
                try:
                    gone = s.recv(4096) == b""
                except OSError:
                    gone = True
            if not gone:
                try:
                    s.send(TRICKLE[sent % len(TRICKLE):sent % len(TRICKLE) + 1])
                    self.socks[s][2] = sent + 1
                except BlockingIOError:
                    pass
                except OSError as e:
                    gone = e.errno not in (errno.ENOTCONN, errno.EAGAIN)
            if gone:
                self.closed_by_server += 1
                s.close()
                del self.socks[s]
                self.socks[connect_from(src, p)] = [p, src, 0]

    def close(self):
        for s in self.socks:
            s.close()


def fresh_client_works(md_base, i):
    key = f"mooncake/ram/fresh-{i}"
    r = call("PUT", f"{md_base}/metadata?key={key}", MCAuth(SECRET), data=b"v%d" % i,
             timeout=5)
    assert r.status_code == 200, r.text
    r = call("GET", f"{md_base}/metadata?key={key}", MCAuth(SECRET), timeout=5)
    assert r.status_code == 200 and r.content == b"v%d" % i


def run_attack(attack, health_bases, md_base, pid, seconds=10.0):
    """Runs the attack for `seconds`; meanwhile /health must answer within 1 s (a
    deadline) and a fresh client's metadata PUT/GET must work. Returns (worst /health
    latency in s, peak RSS in kB)."""
    worst, peak, i = 0.0, rss_kb(pid), 0
    end = time.monotonic() + seconds
    next_trickle = 0.0
    while time.monotonic() < end:
        if time.monotonic() >= next_trickle:
            attack.step()
            next_trickle = time.monotonic() + 1.0
        for base in health_bases:
            t0 = time.monotonic()
            r = call("GET", base + "/health", NoAuth(), timeout=1.0)
            worst = max(worst, time.monotonic() - t0)
            assert r.status_code == 200
        fresh_client_works(md_base, i)
        i += 1
        peak = max(peak, rss_kb(pid))
        time.sleep(0.2)   # pacing of the probes; the attack's rhythm is step()'s
    return worst, peak


@pytest.fixture(params=["metadata-c", "master"])
def target(request, spawn, tmp_path):
    """(health bases, metadata base, pid, metrics bases with their prefixes)."""
    token = token_file(tmp_path)
    if request.param == "metadata-c":
        proc, p = start_c_md(spawn, token, "--header_timeout_ms=3000")
        base = f"http://127.0.0.1:{p}"
        return request.param, [base], base, proc.pid, [(base, "http_metadata")], [p]
    proc, metrics, md = start_master(spawn, token, "--http_header_timeout_ms=3000")
    admin, mdb = f"http://127.0.0.1:{metrics}", f"http://127.0.0.1:{md}"
    return (request.param, [admin, mdb], mdb, proc.pid,
            [(admin, "master_admin_http"), (admin, "http_metadata")], [metrics, md])


def test_slowloris(target):
    name, health, md, pid, metric_bases, ports = target
    before = rss_kb(pid)
    sources = [f"127.0.0.{i}" for i in range(2, 12)]
    attack = Attack(ports, sources, 30 // len(ports))
    try:
        worst, peak = run_attack(attack, health, md, pid)
    finally:
        attack.close()
    print(f"\n[figures] slowloris on {name}: {len(attack.socks)} trickling connections, "
          f"{attack.closed_by_server} closed by the server's header deadline; worst /health "
          f"{worst * 1000:.0f} ms; RSS {before // 1024} -> peak {peak // 1024} MB")
    assert attack.closed_by_server > 0          # the deadline cut them despite the trickle
    for base, prefix in metric_bases:
        assert metric(base, f'{prefix}_refused_total{{reason="header_timeout"}}') > 0
    assert peak < 200 * 1024, peak


def test_connection_flood(target):
    name, health, md, pid, metric_bases, ports = target
    before = rss_kb(pid)
    socks = []
    try:
        for p in ports:
            for _ in range(300):
                socks.append(connect_from("127.0.0.12", p))
        worst, peak = run_attack(Attack([], [], 0), health, md, pid, seconds=3.0)
        for base, prefix in metric_bases:
            n = metric(base, f'{prefix}_refused_total{{reason="per_ip_limit"}}')
            assert n and n > 100, (prefix, n)
    finally:
        for s in socks:
            s.close()
    print(f"\n[figures] flood on {name}: 300 connections from one address per port; worst "
          f"/health {worst * 1000:.0f} ms; RSS {before // 1024} -> peak {peak // 1024} MB")
    assert peak < 200 * 1024, peak


# ------------------------------------------------------------------ the store's caps
def test_metadata_store_caps_507_and_frees_on_delete(spawn, tmp_path):
    token = token_file(tmp_path)
    proc, p = start_c_md(spawn, token, "--max_keys=3", "--max_total_size=64mb")
    base = f"http://127.0.0.1:{p}"

    def put(key, data):
        return call("PUT", f"{put.base}/metadata?key={key}", MCAuth(SECRET), data=data)
    put.base = base

    for k in ("k1", "k2", "k3"):
        assert put(k, b"v").status_code == 200
    r = put("k4", b"v")
    assert (r.status_code, r.text) == (507, "metadata store full")
    assert put("k1", b"new").status_code == 200          # an overwrite is not a new key
    assert call("DELETE", f"{base}/metadata?key=k2", MCAuth(SECRET)).status_code == 200
    assert put("k4", b"v").status_code == 200
    assert metric(base, "http_metadata_store_full_total") == 1
    for k in ("k1", "k3", "k4"):
        assert call("DELETE", f"{base}/metadata?key={k}", MCAuth(SECRET)).status_code == 200

    # bytes: 45 MiB of 48 fill it up, the next PUT gets 507; deleting returns the memory
    proc, p = start_c_md(spawn, token, "--max_total_size=48mb")
    base = put.base = f"http://127.0.0.1:{p}"
    rss0 = rss_kb(proc.pid)
    big = b"x" * (15 << 20)
    for k in ("b1", "b2", "b3"):
        assert put(k, big).status_code == 200
    assert put("b4", big).status_code == 507
    full = rss_kb(proc.pid)
    for k in ("b1", "b2", "b3"):
        assert call("DELETE", f"{base}/metadata?key={k}", MCAuth(SECRET)).status_code == 200
    after = rss_kb(proc.pid)
    print(f"\n[figures] metadata store 45 MiB: RSS {rss0 // 1024} -> {full // 1024} MB, "
          f"{after // 1024} MB after deleting")
    assert full - rss0 > 40 * 1024
    assert after - rss0 < (full - rss0) / 2, (rss0, full, after)   # most of it went back


def test_store_setup_without_the_secret_says_so(spawn, tmp_path):
    # A master with a secret; a store client started without it: setup fails, and the
    # store's own summary names the metadata server and the secret, not the port range.
    import sys
    import textwrap
    token = token_file(tmp_path)
    proc, metrics, md = start_master(spawn, token)
    rpc = re.search(r"--rpc_port=(\d+)", " ".join(proc.args)).group(1)
    code = textwrap.dedent(f"""
        import mooncake.store as ms
        s = ms.MooncakeDistributedStore()
        print("RC", s.setup("127.0.0.1", "http://127.0.0.1:{md}/metadata", 16 << 20,
                            16 << 20, "tcp", "", "127.0.0.1:{rpc}"), flush=True)
        s.close()
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=env_with())
    assert "RC -601" in r.stdout, r.stdout + r.stderr
    assert "cluster secret" in r.stderr and "MC_AUTH_TOKEN_FILE" in r.stderr, r.stderr
    assert "free port" not in r.stderr, r.stderr
