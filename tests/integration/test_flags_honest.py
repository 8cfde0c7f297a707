"""Every upstream flag the tools accept does what it says (docs/flags.md): the ones
accepted at upstream's default only are refused at any other value (exit 2, the message
names the flag and what to do); the implemented ones are checked by their effect on a
real master (its sockets' TCP_NODELAY read back from the process, idle connections
closed, the address of --rpc_interface, the glog flags' file and stderr). Also: a store
client pointed at a wrong master port says which address, what failed and what to check.
"""
import ctypes
import os
import re
import socket
import subprocess
import sys
import threading

import pytest

from conftest import free_port, rpc_connect, tool, wait_until
from mc_master import OP_PING, Master, closed_by_peer, frame, ping_body, recv_frame

# (flag, upstream default as passed, another value); docs/flags.md lists the reasons.
MASTER_DEFAULT_ONLY = [
    ("nof_eviction_ratio", "0.05", "0.2"),
    ("nof_eviction_high_watermark_ratio", "0.90", "0.5"),
    ("global_file_segment_size", "9223372036854775807", "1gb"),
    ("enable_disk_eviction", "true", "false"),
    ("quota_bytes", "0", "1gb"),
    ("offload_force_evict", "false", "true"),
    ("offloading_queue_limit", "50000", "10"),
    ("offload_cap_ratio", "0.5", "0.9"),
    ("promotion_queue_limit", "50000", "10"),
    ("promotion_max_per_heartbeat", "1", "4"),
    ("dynamic_replication_mode", "off", "enforce"),
    ("enable_kv_events", "false", "true"),
    ("kv_events_bind_endpoint", "", "tcp://127.0.0.1:5557"),
    ("oplog_poll_interval_ms", "1000", "50"),
    ("oplog_batch_max_entries", "1024", "10"),
    ("batch_oplog_retry_timeout_sec", "180", "5"),
    ("snapshot_child_timeout_seconds", "300", "30"),
    ("enable_multi_tenants", "false", "true"),
    ("tenant_quota_connector_type", "file", "http"),
    ("tenant_quota_connector_uri", "", "/tmp/quota.json"),
    ("max_retry_attempts", "10", "3"),
    ("enable_cxl", "false", "true"),
    ("cxl_path", "/dev/dax0.0", "/dev/dax1.0"),
    ("cxl_size", "8gb", "1gb"),
    ("pod_name", "", "pod-0"),
    ("pod_namespace", "", "ns"),
    ("enable_gc", "false", "true"),
]
CLIENT_DEFAULT_ONLY = [("http_port", "9300", "9301"), ("tenant_id", "default", "t1")]
BENCH_DEFAULT_ONLY = [("auto_discovery", "false", "true"), ("backend", "classic", "tent"),
                      ("nic_priority_matrix", "", "{}")]

DEFAULT_ONLY_HELP = "only upstream's default is accepted"


def _run(args, timeout=30, env=None, drop=()):
    e = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          env={**e, **(env or {})})


def _help_default_only(prog):
    """Names of the flags whose --help says that only the default is accepted."""
    out = _run([tool(prog), "--help"]).stdout
    names, cur = set(), None
    for line in out.splitlines():
        m = re.match(r"\s+--(\w+) \(", line)
        if m:
            cur = m.group(1)
        elif cur and DEFAULT_ONLY_HELP in line:
            names.add(cur)
    return names


def test_help_lists_exactly_the_default_only_flags():
    # the table above is the whole group: a new default-only flag gets tested too
    assert _help_default_only("mooncake_master") == {f for f, _, _ in MASTER_DEFAULT_ONLY}


@pytest.mark.parametrize("flag,default,other", MASTER_DEFAULT_ONLY,
                         ids=[f for f, _, _ in MASTER_DEFAULT_ONLY])
def test_master_default_only_flag_refused_at_another_value(flag, default, other):
    r = _run([tool("mooncake_master"), "--rpc_address=127.0.0.1", "--rpc_port=0",
              "--metrics_port=0", f"--{flag}={other}"])
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--{flag}=" in r.stderr and "mooncake-c does not" in r.stderr, r.stderr
    assert f"--{flag}={default}" in r.stderr and "drop the flag" in r.stderr, r.stderr


@pytest.mark.parametrize("flag,value", [("ha_backend_type", "k8s"), ("ha_backend_type", "foo"),
                                        ("snapshot_object_store_type", "s3"),
                                        ("snapshot_catalog_store_type", "redis")])
def test_value_mooncake_cannot_honour_refused_with_the_feature_off(flag, value):
    # no --enable_ha / --enable_snapshot: the value is still refused, naming the flag
    r = _run([tool("mooncake_master"), "--rpc_address=127.0.0.1", "--rpc_port=0",
              "--metrics_port=0", f"--{flag}={value}"])
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--{flag}={value}" in r.stderr, r.stderr
    assert ("k8s" in r.stderr) == (value == "k8s"), r.stderr


def test_master_accepts_every_default_only_flag_at_its_default(spawn):
    m = Master(spawn, "--enable_metric_reporting=false",
               *[f"--{f}={d}" for f, d, _ in MASTER_DEFAULT_ONLY])
    code, out = m.stop()
    assert code == 0, out
    assert "is refused" not in out, out


def _client_args(master_port, *flags):
    return [tool("mooncake_client"), f"--master_server_address=127.0.0.1:{master_port}",
            "--metadata_server=P2PHANDSHAKE", "--host=127.0.0.1",
            "--global_segment_size=1mb", *flags]


def _bench_args(*flags):
    # an initiator of a segment nobody serves: it gets past the flags, then fails (1)
    return [tool("transfer_engine_bench"), "--mode=initiator", "--protocol=tcp",
            "--metadata_server=P2PHANDSHAKE", f"--segment_id=127.0.0.1:{free_port()}",
            "--duration=0.01", "--threads=1", "--batch_size=1", "--buffer_size=4096",
            "--block_size=4096", *flags]


@pytest.mark.parametrize("prog,flag,default,other",
                         [("mooncake_client", *t) for t in CLIENT_DEFAULT_ONLY] +
                         [("transfer_engine_bench", *t) for t in BENCH_DEFAULT_ONLY],
                         ids=[f for f, _, _ in CLIENT_DEFAULT_ONLY + BENCH_DEFAULT_ONLY])
def test_tool_default_only_flags(prog, flag, default, other):
    args = _client_args if prog == "mooncake_client" else _bench_args
    pre = (free_port(),) if prog == "mooncake_client" else ()
    refused = _run(args(*pre, f"--{flag}={other}"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"--{flag}=" in refused.stderr and "mooncake-c does not" in refused.stderr
    # at the default the flags pass: the run goes on to fail at what follows (no master
    # / no target: exit 1), not at the flag
    accepted = _run(args(*pre, f"--{flag}={default}"))
    assert accepted.returncode == 1, accepted.stdout + accepted.stderr
    assert f"--{flag}=" not in accepted.stderr, accepted.stderr


def _client_empty(flag):
    return _client_args(free_port(), f"--{flag}=")


def _master_empty(flag):
    return [tool("mooncake_master"), f"--rpc_port={free_port()}",
            f"--metrics_port={free_port()}", f"--{flag}="]


# (prog, flag, command line): every flag where "" used to mean something silently
EMPTY_REFUSED = (
    # "" meant the default (the store's setup reads an empty address as "use the
    # default"): a templated command line with an unset variable ran against
    # 127.0.0.1:50051
    [("mooncake_client", f, _client_empty)
     for f in ("host", "master_server_address", "metadata_server", "protocol")] +
    # `--rpc_address=` listened on 0.0.0.0 and printed "RPC listening on :P"
    [("mooncake_master", f, _master_empty)
     for f in ("rpc_address", "metrics_host", "http_metadata_server_host")] +
    # `--protocol=` ran as tcp ("Target ready"); the others failed later without naming
    # the flag
    [("transfer_engine_bench", f, lambda f: [tool("transfer_engine_bench"), f"--{f}=",
                                             "--mode=target"])
     for f in ("protocol", "metadata_server", "local_server_name")] +
    [("mooncake_master_ctl", "master", lambda f: [tool("mooncake_master_ctl"), f"--{f}=",
                                                  "ping"]),
     ("mooncake_http_metadata_server", "host",
      lambda f: [tool("mooncake_http_metadata_server"), f"--port={free_port()}", f"--{f}="])])


@pytest.mark.parametrize("prog,flag,args", EMPTY_REFUSED,
                         ids=[f"{p}-{f}" for p, f, _ in EMPTY_REFUSED])
def test_an_empty_address_flag_is_refused(prog, flag, args):
    """An empty value of an address-like flag: exit 2 at parsing, naming the flag and its
    default, before anything starts or listens."""
    r = _run(args(flag), timeout=10)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"invalid value '' for --{flag}: expected a non-empty value" in r.stderr, r.stderr
    out = (r.stdout + r.stderr).lower()
    assert "ready" not in out and "listening" not in out, out


# ---- implemented flags -------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_PIDFD_GETFD = 438


def _server_side_socket(pid, client):
    """The master's socket of the connection `client` opened (pidfd_getfd: a copy of the
    very file, so its options are the master's)."""
    want = client.getsockname()
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = _libc.syscall(_SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                err = ctypes.get_errno()
                if err in (1, 38):  # EPERM, ENOSYS: this box does not allow it
                    pytest.skip(f"pidfd_getfd: {os.strerror(err)}")
                continue
            s = socket.socket(fileno=fd)
            try:
                if s.type == socket.SOCK_STREAM and s.getpeername() == want:
                    return s
            except OSError:
                pass
            s.close()
    finally:
        os.close(pidfd)
    return None


@pytest.mark.parametrize("value", ["true", "false"])
def test_rpc_enable_tcp_no_delay(spawn, value):
    m = Master(spawn, "--enable_metric_reporting=false", f"--rpc_enable_tcp_no_delay={value}")
    with socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10) as c:
        s = wait_until(lambda: _server_side_socket(m.proc.pid, c), 10,
                       "the master's side of the connection")
        with s:
            nodelay = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert bool(nodelay) == (value == "true")
    assert m.stop()[0] == 0


def test_rpc_conn_timeout_closes_idle_connections_only(spawn):
    # the handshake deadline (with the suite's secret) is out of the way: only the idle
    # timeout can close these
    m = Master(spawn, "--enable_metric_reporting=false", "--rpc_conn_timeout_seconds=2",
               "--rpc_auth_timeout_ms=600000")
    active = rpc_connect(m.rpc_port)
    idle_rpc = rpc_connect(m.rpc_port)
    idle_rpc.sendall(frame(OP_PING, ping_body(), request_id=1))
    assert recv_frame(idle_rpc)[0][5] >= 0
    silent = socket.create_connection(("127.0.0.1", m.rpc_port), timeout=10)
    done, answered = threading.Event(), []

    def keep_busy():  # a request every 100 ms: never idle for 2 s
        i = 0
        while not done.is_set():
            i += 1
            active.sendall(frame(OP_PING, ping_body(), request_id=i))
            answered.append(recv_frame(active)[0][6] == i)
            done.wait(0.1)

    t = threading.Thread(target=keep_busy)
    t.start()
    try:
        assert closed_by_peer(idle_rpc, 30), "an idle RPC connection stayed open"
        assert closed_by_peer(silent, 30), "a connection that never spoke stayed open"
    finally:
        done.set()
        t.join(30)
    assert answered and all(answered)
    active.sendall(frame(OP_PING, ping_body(), request_id=10 ** 6))
    assert recv_frame(active)[0][6] == 10 ** 6  # the busy one is still served
    for s in (active, idle_rpc, silent):
        s.close()
    assert m.stop()[0] == 0


def test_rpc_interface(spawn):
    m = Master(spawn, "--enable_metric_reporting=false", "--rpc_interface=lo",
               "--rpc_address=192.0.2.1")  # overridden by lo's address
    code, out = m.stop()
    assert code == 0 and f"RPC listening on 127.0.0.1:{m.rpc_port}" in out, out
    r = _run([tool("mooncake_master"), "--rpc_interface=no-such-nic0", "--rpc_port=0",
              "--metrics_port=0"])
    assert r.returncode == 2
    assert "--rpc_interface=no-such-nic0" in r.stderr and "lo" in r.stderr, r.stderr


def test_max_threads_is_the_thread_count(spawn):
    m = Master(spawn, "--enable_metric_reporting=false", "--max_threads=3")
    code, out = m.stop()
    assert code == 0 and "(3 threads)" in out, out


STOP_LINE = "signal 15: stopping"  # logged (INFO) by every master when stopped


@pytest.mark.parametrize("flags,in_file,on_stderr", [
    ([], None, True),
    (["--log_dir={d}"], True, False),
    (["--log_dir={d}", "--alsologtostderr"], True, True),
    (["--log_dir={d}", "--stderrthreshold=0"], True, True),
    (["--log_dir={d}", "--logtostderr"], None, True),
    (["--minloglevel=1"], None, False),
    (["--log_dir={d}", "--minloglevel=1"], False, False),
], ids=["default", "log_dir", "alsologtostderr", "stderrthreshold", "logtostderr",
        "minloglevel", "log_dir+minloglevel"])
def test_glog_flags(spawn, tmp_path, flags, in_file, on_stderr):
    m = Master(spawn, "--enable_metric_reporting=false",
               *[f.format(d=tmp_path) for f in flags])
    code, out = m.stop()
    assert code == 0, out
    assert (STOP_LINE in out) == on_stderr, out
    files = list(tmp_path.glob("mooncake_master.*.log"))
    if in_file is None:
        assert not files
    else:
        assert files == [tmp_path / f"mooncake_master.{m.proc.pid}.log"]
        assert (STOP_LINE in files[0].read_text()) == in_file


def test_log_dir_must_exist(tmp_path):
    r = _run([tool("mooncake_master"), f"--log_dir={tmp_path}/missing", "--rpc_port=0",
              "--metrics_port=0"])
    assert r.returncode == 2 and "--log_dir" in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["abc", "10001"])
def test_master_refuses_a_bad_busy_poll_budget(value):
    # MC_BUSY_POLL_US (docs/flags.md): the master's RPC loops poll before they sleep, and
    # it polls where it waits for a reply (a standby's log fetch), so a bad value stops it
    # at the start, naming the variable
    r = _run([tool("mooncake_master"), "--rpc_address=127.0.0.1", "--rpc_port=0",
              "--metrics_port=0"], env={"MC_BUSY_POLL_US": value})
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"MC_BUSY_POLL_US={value}" in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["0", "10000"])
def test_the_rpc_threads_serve_at_either_end_of_their_poll_range(spawn, value):
    # --rpc_busy_poll_us (docs/flags.md): 0 = the RPC threads never poll, 10000 = the
    # most; either way a store's put and get go through them byte for byte
    m = Master(spawn, "--enable_metric_reporting=false", f"--rpc_busy_poll_us={value}")
    code = ("from mooncake.store import MooncakeDistributedStore as S\n"
            "s = S()\n"
            f"assert s.setup('127.0.0.1', 'P2PHANDSHAKE', 8 << 20, 8 << 20, 'tcp', '', "
            f"'{m.addr}') == 0\n"
            "v = bytes(range(256)) * 64\n"
            "assert s.put('k', v) == 0\n"
            "assert s.get('k') == v and s.is_exist('k') == 1\n"
            "print('round trip ok')\ns.close()\n")
    r = _run([sys.executable, "-c", code], timeout=60)
    assert "round trip ok" in r.stdout, r.stdout + r.stderr


def test_the_rpc_poll_cap_has_a_range():
    r = _run([tool("mooncake_master"), "--rpc_address=127.0.0.1", "--rpc_port=0",
              "--metrics_port=0", "--rpc_busy_poll_us=10001"])
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--rpc_busy_poll_us" in r.stderr and "[0, 10000]" in r.stderr, r.stderr


def test_a_long_transfer_timeout_is_taken_whole(spawn):
    # MC_TRANSFER_TIMEOUT's range is 1 s .. 1 year (docs/flags.md) for the engine and for
    # the store's wait on a contested put alike: a year is no error anywhere
    m = Master(spawn, "--enable_metric_reporting=false")
    code = ("import sys\nfrom mooncake.store import MooncakeDistributedStore as S\n"
            "s = S()\n"
            f"rc = s.setup('127.0.0.1', 'P2PHANDSHAKE', 1 << 20, 1 << 20, 'tcp', '', "
            f"'{m.addr}')\n"
            "print('rc', rc)\ns.close()\n")
    r = _run([sys.executable, "-c", code], timeout=60, env={"MC_TRANSFER_TIMEOUT": "31536000"})
    assert "rc 0" in r.stdout, r.stdout + r.stderr
    assert "MC_TRANSFER_TIMEOUT" not in r.stderr, r.stderr


# ---- a store client at a wrong master port ------------------------------------------------

def _setup_error(port, env=None):
    # without a cluster secret (MC_TEST_AUTH=1 would make the handshake the first
    # exchange, which these services fail differently)
    r = _run(_client_args(port), timeout=60, env=env, drop=("MC_AUTH_TOKEN_FILE",))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "setup:" in ln]
    assert lines, r.stderr
    return lines[0]


def test_setup_names_a_refused_master_address():
    port = free_port()  # nothing listens there
    msg = _setup_error(port)
    assert f"127.0.0.1:{port}" in msg and "connection refused" in msg, msg
    assert "--rpc_port" in msg, msg


@pytest.fixture
def fake_service():
    """A listener on 127.0.0.1 that answers like an HTTP server ("http") or accepts and
    never answers ("silent"): (port for each kind)."""
    socks, stop = {}, threading.Event()
    for kind in ("http", "silent"):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        s.settimeout(0.2)
        socks[kind] = s
    held = []

    def serve():
        while not stop.is_set():
            for kind, s in socks.items():
                try:
                    c, _ = s.accept()
                except OSError:
                    continue
                if kind == "http":
                    c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    c.close()
                else:
                    held.append(c)

    t = threading.Thread(target=serve)
    t.start()
    yield {k: s.getsockname()[1] for k, s in socks.items()}
    stop.set()
    t.join(10)
    for c in held + list(socks.values()):
        c.close()


def test_setup_says_a_port_is_not_a_master(fake_service):
    msg = _setup_error(fake_service["http"])
    port = fake_service["http"]
    assert f"127.0.0.1:{port}" in msg and "not a mooncake master (bad frame)" in msg, msg
    assert "--rpc_port" in msg, msg


def test_setup_says_a_port_did_not_answer(fake_service):
    port = fake_service["silent"]
    msg = _setup_error(port, env={"MC_RPC_TIMEOUT_MS": "500"})
    assert f"127.0.0.1:{port}" in msg and "timeout" in msg and "no reply" in msg, msg
    assert "--rpc_port" in msg, msg
