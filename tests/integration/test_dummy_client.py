"""Dummy clients over a real mooncake_client process (issue 13 item 1; upstream
setup_dummy / DummyClient and mooncake_client, upstream-mooncake.md §1.3): a real master,
one `mooncake_client` that owns the segment, and dummy clients in their own processes
that own nothing and forward every call to it over @mooncake_client_<port>.sock, with bulk
data in a shared pool each dummy hands over (memfd, SCM_RIGHTS).

What is checked: two dummies see each other's objects (put/get/remove, pool batch calls);
a dummy whose real client dies gets the failed-RPC codes and works again once a new one
serves that port; a killed dummy leaves nothing behind in the real client (its counters:
connections and mapped pools back to what they were); segment management on a dummy
returns -1; the tool refuses the flags it does not implement.
"""
import os
import random
import signal
import subprocess

import pytest

from conftest import _Spawner, read_until, tool, wait_until
from store_proc import StoreCluster, StoreProc, value_for

RPC_FAIL = -900
POOL = 8 << 20


def _port():
    # the port only names the abstract socket: a random one keeps parallel runs apart
    return random.randint(20000, 60000)


class RealClient:
    def __init__(self, spawn, cluster, port):
        self.spawn, self.cluster, self.port = spawn, cluster, port
        self.proc = None

    def start(self):
        self.proc = self.spawn([
            tool("mooncake_client"), "--host=127.0.0.1", f"--port={self.port}",
            "--global_segment_size=64MB", f"--master_server_address={self.cluster.addr}",
            f"--metadata_server={self.cluster.metadata}"])
        read_until(self.proc, r"mooncake_client ready", timeout=30, what="mooncake_client up")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=20) == 0


@pytest.fixture
def env():
    sp = _Spawner()
    cluster = StoreCluster(sp)
    real = RealClient(sp, cluster, _port())
    real.start()
    procs = []

    def dummy():
        p = StoreProc(("__dummy__", POOL, 0, f"127.0.0.1:{real.port}"),
                      funcs_from="dummy_funcs")
        procs.append(p)
        assert p.setup_rc == 0
        return p
    try:
        yield cluster, real, dummy
    finally:
        for p in procs:
            p.kill()
        sp.cleanup()


def test_two_dummies_share_one_real_client(env):
    cluster, real, dummy = env
    a, b = dummy(), dummy()
    assert a.hostname == b.hostname and a.hostname.startswith("127.0.0.1:")
    assert a.call("put", "k-a", b"hello from a") == 0
    assert b.call("get", "k-a") == b"hello from a"
    assert b.call("is_exist", "k-a") == 1
    assert b.call("get_size", "k-a") == 12
    keys = [f"pool-{i}" for i in range(8)]
    puts, gets, ok = b.fn("pool_put_get", keys, 300_000)
    assert puts == [0] * 8 and gets == [300_000] * 8 and ok
    assert a.fn("pool_read", "pool-3", 300_000) == (300_000, True)
    assert a.call("batch_is_exist", keys[:2] + ["absent"]) == [1, 1, 0]
    assert b.call("remove", "k-a", True) == 0
    assert a.call("get", "k-a") == b""
    assert a.call("batch_remove", keys, True) == [0] * 8
    # upsert replaces, remove_by_regex, memory outside the pool
    assert a.call("put", "u-1", b"old") == 0 and b.call("upsert", "u-1", b"newer") == 0
    assert a.call("get", "u-1") == b"newer"
    assert b.call("upsert_batch", ["u-2", "u-3"], [b"x", b"y"]) == 0
    assert a.call("remove_by_regex", "^u-", True) == 3
    assert a.fn("raw_roundtrip", "raw-1", b"r" * 5000) == ([0], 5000, True)
    # segment management on a dummy: -1, as upstream
    assert a.call("mount_segment", "/dev/shm/x", 1 << 20)["ret"] == -1
    assert a.call("unmount_segment", ["x"]) == -1
    # a method a dummy does not forward says so
    with pytest.raises(RuntimeError, match="not available on a dummy client"):
        a.call("get_into_ranges", [], [], [], [], [])
    assert a.call("close") == 0 and a.call("health_check") == 1


def test_dummy_reconnects_after_real_client_restart(env):
    cluster, real, dummy = env
    a = dummy()
    assert a.call("put", "before", b"x" * 1000) == 0
    real.stop()
    assert a.call("put", "during", b"y") == RPC_FAIL
    assert a.call("get", "before") == b""
    assert a.call("batch_is_exist", ["before", "during"]) == [RPC_FAIL, RPC_FAIL]
    assert a.call("health_check") == 2
    real.start()
    # the old real client's segment left with it; the new one serves the same port
    wait_until(lambda: a.call("put", "after", b"z" * 500) == 0, timeout=20,
               what="dummy works again")
    assert a.call("get", "after") == b"z" * 500
    assert a.fn("pool_put_get", ["after-pool"], 4096)[2]


def _stats(d):
    return d.call("_dummy_stats")


def test_killed_dummy_leaks_nothing(env):
    cluster, real, dummy = env
    watcher = dummy()
    base = _stats(watcher)
    assert base["connections"] == 1 and base["pools"] == 1 and base["pool_bytes"] == POOL
    victims = [dummy() for _ in range(2)]
    for v in victims:
        assert v.fn("pool_put_get", [f"v-{v.fn('pid')}"], 4096)[2]
    s = _stats(watcher)
    assert s["connections"] == 3 and s["pools"] == 3 and s["pool_bytes"] == 3 * POOL
    for v in victims:
        v.kill()
    wait_until(lambda: _stats(watcher)["pools"] == 1, timeout=20, what="pools released")
    s = _stats(watcher)
    assert s["connections"] == 1 and s["pool_bytes"] == POOL
    # the real client holds no mapping of the victims' pools (memfd pages)
    maps = open(f"/proc/{real.proc.pid}/maps").read()
    assert maps.count("memfd:mooncake_dummy_pool") == 1


def test_mooncake_client_refuses_unimplemented_flags():
    for flag in ("--enable_offload=true", "--enable_http_server=true", "--threads=4"):
        r = subprocess.run([tool("mooncake_client"), flag], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2, flag
        assert flag.split("=")[0] in r.stderr and "mooncake-c" in r.stderr
    # upstream's Python entry point (mooncake.cli_client:main) runs the same program
    import sys
    r = subprocess.run([sys.executable, "-c", "from mooncake.cli_client import main; main()",
                        "--enable_offload=true"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--enable_offload" in r.stderr


def test_setup_dummy_without_real_client():
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup_dummy(POOL, 0, f"127.0.0.1:{_port()}") == RPC_FAIL
    assert s.setup_dummy(POOL, 0, "no-port") == -600
    assert s.alloc_from_mem_pool(100) == 0
    assert s.health_check() == 1


def _raw_call(port, op, body, fds=()):
    import socket
    import struct
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    try:
        s.connect(f"\0mooncake_client_{port}.sock")
        msg = struct.pack("<IHHII", 0x4344434D, 1, op, 9, len(body)) + body
        socket.send_fds(s, [msg], list(fds)) if fds else s.sendall(msg)
        h = b""
        while len(h) < 24:
            chunk = s.recv(24 - len(h))
            if not chunk:
                return None  # closed by the real client
            h += chunk
        magic, ver, rop, rid, blen = struct.unpack("<IHHII", h[:16])
        assert (magic, rop, rid) == (0x4344434D, op | 0x8000, 9)
        return struct.unpack("<q", h[16:24])[0]
    finally:
        s.close()


def test_real_client_refuses_bad_pools_and_frames(env):
    import struct
    cluster, real, dummy = env
    watcher = dummy()
    before = _stats(watcher)["refused"]
    # a pool that is not sealed against shrinking would SIGBUS the real client later
    fd = os.memfd_create("mc-test-unsealed")
    try:
        os.ftruncate(fd, 1 << 20)
        assert _raw_call(real.port, 1, struct.pack("<Q", 1 << 20), [fd]) == -600
    finally:
        os.close(fd)
    # a body that does not decode gets -600; a bad header closes the connection
    assert _raw_call(real.port, 3, struct.pack("<I", 1000) + b"k") == -600
    assert _raw_call(real.port, 99, b"") is None
    s = _stats(watcher)
    assert s["refused"] >= before + 2 and s["pools"] == 1
    assert watcher.call("put", "still-fine", b"ok") == 0


def test_dummy_forwards_multi_buffers_replicas_buffers(env):
    cluster, real, dummy = env
    a, b = dummy(), dummy()
    # scatter-gather on pool memory (the real client gathers/scatters in the pool) and on
    # memory outside it (inline); the other dummy reads what one wrote
    assert a.fn("multi_roundtrip", "m-pool", [1000, 1, 70_000]) == ([0], [71_001], True)
    assert b.fn("multi_roundtrip", "m-raw", [5, 3000], False) == ([0], [3005], True)
    assert b.fn("pool_read", "m-pool", 71_001) == (71_001, True)
    # buffers too small for the object: -600; a miss: its code
    small, miss = a.fn("multi_too_small", "m-pool", 1000)
    assert small == -600 and miss < 0
    # replica descriptors name the real client's segment, as on the real client
    reps = b.fn("replica_desc", "m-pool")
    assert reps == [(True, a.hostname, 71_001)]
    assert a.fn("replica_desc", "absent") == []
    assert a.fn("batch_replica_desc", ["m-pool", "m-raw", "absent"]) == {"m-pool": 1,
                                                                         "m-raw": 1}
    # get_buffer: the bytes, ptr(), size(), the buffer protocol
    assert a.fn("get_buffer", "m-raw") == (3005, value_for("m-raw", 3005), True, 3005)
    assert a.fn("get_buffer", "absent") is None
    real.stop()
    assert a.fn("replica_desc", "m-pool") == []
    assert a.call("batch_put_from_multi_buffers", ["k"], [[1]], [[1]]) == [RPC_FAIL]


def test_dummy_tensor_calls(env):
    pytest.importorskip("torch")
    cluster, real, dummy = env
    a, b = dummy(), dummy()
    checks = a.fn("tensor_roundtrip")
    assert checks == {k: True for k in checks}, checks
    # the other dummy reads the tensor objects through its own forwarding
    assert b.fn("tensor_shape", "t-b1") == [4, 6]


def test_dummy_refuses_null_pointers_as_the_real_client(env):
    """A new user's get_into(key, 0, 16) on a dummy killed the dummy's process (SIGSEGV
    in a memmove to NULL) and put_from(key, 0, 16) stored 16 bytes of garbage, where a
    real client answers INVALID_PARAMS (-600) to both."""
    cluster, real, dummy = env
    a = dummy()
    assert a.call("put", "np-1", b"abc") == 0
    assert a.call("get_into", "np-1", 0, 16) == -600
    assert a.call("batch_get_into", ["np-1"], [0], [16]) == [-600]
    assert a.call("put_from", "np-2", 0, 16) == -600
    assert a.call("batch_put_from", ["np-3"], [0], [16]) == [-600]
    assert a.call("batch_put_from_multi_buffers", ["np-4"], [[0]], [[4]]) == [-600]
    assert a.call("batch_get_into_multi_buffers", ["np-1"], [[0]], [[16]]) == [-600]
    assert a.call("is_exist", "np-2") == 0 and a.call("get", "np-1") == b"abc"
