"""mooncake.engine.TransferEngine between two real processes on 127.0.0.1.

The test process runs one engine (the initiator); tests/integration/engine_peer.py runs
the other (driven over stdin/stdout). Every metadata backend is covered (the `meta`
fixture): the HTTP metadata server (the `mooncake_http_metadata_server` tool), etcd
(a real etcd, given as upstream's bare `host:port`), Redis (a real redis-server with a
password and a db) and P2PHANDSHAKE. Contract: API.md §1 and §3; upstream behaviour:
upstream-mooncake.md §2 (transfer_engine_py.cpp) and §6.1-6.2 (backends, keys).

Content is always checked: every transfer moves a seeded random pattern and the other
side compares SHA-256 digests (or the bytes themselves).
"""
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import (METADATA_BACKENDS, free_port, kv_metadata, sign_urllib, tool,
                      unsent_tcp_bytes, wait_port, wait_until)

import mooncake.engine as me
from mooncake.engine import (ErrorCode, InnerTransferEngine, TransferEngine, TransferNotify,
                             TransferOpcode)

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_peer.py")
KiB = 1 << 10
MiB = 1 << 20
BIG = 64 * MiB
SIZE = BIG + 64 * KiB  # every buffer on both sides: room for the 64 MiB case + offsets
SIZES = [0, 1, 4 * KiB, BIG]
T = 20.0  # generous bound for one peer command (the 64 MiB fill/sha included)


def pattern(seed, n):
    return np.random.default_rng(seed).bytes(n)


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---- the peer process -------------------------------------------------------------------


class Peer:
    """engine_peer.py in its own process; stderr (engine logs) goes to a file."""

    def __init__(self, spawn, tmp_path, metadata, host, size=SIZE, env=None):
        self.log_path = tmp_path / f"peer-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "wb")
        penv = dict(os.environ)
        penv.update(env or {})
        self.proc = spawn([sys.executable, PEER, "--metadata", metadata, "--host", host,
                           "--size", str(size)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                          env=penv)
        self.buf = b""
        self.info = self._read(T)
        if self.info.get("init") != 0:
            raise RuntimeError(f"peer initialize failed: {self.info} ({self.logs()})")
        self.segment = self.info["segment"]
        self.user = self.info["user"]
        self.managed = self.info["managed"]
        self.size = self.info["size"]

    def logs(self):
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-2000:]

    def _read(self, timeout):
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"peer did not answer in {timeout}s ({self.logs()})")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise RuntimeError(f"peer exited ({self.proc.poll()}): {self.logs()}")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, timeout=T, **cmd):
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        return self._read(timeout)

    def addr(self, kind):
        return self.user if kind == "user" else self.managed

    def fill(self, kind, off, n, seed):
        assert self.call(op="fill", buf=kind, off=off, len=n, seed=seed) == {"ok": True}

    def sha(self, kind, off, n):
        return self.call(op="sha", buf=kind, off=off, len=n)["sha"]

    def alive(self):
        return self.proc.poll() is None


# ---- the local engine -------------------------------------------------------------------


class Local:
    """A TransferEngine in this process with one registered numpy buffer ("user") and one
    managed buffer ("managed"), SIZE bytes each."""

    def __init__(self, metadata, host, size=SIZE):
        self.te = TransferEngine()
        rc = self.te.initialize(host, metadata, "tcp", "")
        assert rc == 0, rc
        self.size = size
        self.arr = np.zeros(size, dtype=np.uint8)
        self.user = self.arr.ctypes.data
        assert self.te.register_memory(self.user, size) == 0
        self.managed = self.te.allocate_managed_buffer(size)
        assert self.managed != 0

    def addr(self, kind):
        return self.user if kind == "user" else self.managed

    def put(self, kind, off, data):
        if kind == "user":
            self.arr[off:off + len(data)] = np.frombuffer(data, np.uint8)
        else:
            assert self.te.write_bytes_to_buffer(self.managed + off, data, len(data)) == 0

    def get(self, kind, off, n):
        if kind == "user":
            return self.arr[off:off + n].tobytes()
        return self.te.read_bytes_from_buffer(self.managed + off, n)

    def close(self):
        self.te.unregister_memory(self.user)
        self.te.free_managed_buffer(self.managed, self.size)
        del self.te


_names_given = set()


def host_for(mode):
    # P2PHANDSHAKE: the segment becomes "127.0.0.1:<rpc port>". With a metadata server the
    # segment name is local_hostname as given, so each engine needs a unique one. Nothing
    # binds that port, so free_port() may hand the same one out twice in a row (it did in
    # CI: the local engine then found the peer's segment name taken, -705): never repeat.
    if mode == "p2p":
        return "127.0.0.1"
    while True:
        name = f"127.0.0.1:{free_port()}"
        if name not in _names_given:
            _names_given.add(name)
            return name


@pytest.fixture(params=METADATA_BACKENDS)
def meta(request, spawn):
    """(mode, metadata connection string), one per metadata backend. etcd and Redis are
    the session's servers (conftest.kv_metadata), emptied for each test."""
    if request.param == "p2p":
        yield "p2p", "P2PHANDSHAKE"
    elif request.param == "etcd":
        yield "etcd", kv_metadata(request, "etcd").bare
    elif request.param == "redis":
        yield "redis", kv_metadata(request, "redis").conn(db=2)
    else:
        port = free_port()
        p = spawn([tool("mooncake_http_metadata_server"), f"--port={port}", "--host=127.0.0.1"],
                  stdout=subprocess.DEVNULL)
        wait_port(port, proc=p)
        yield "http", f"http://127.0.0.1:{port}/metadata"


@pytest.fixture
def env(monkeypatch):
    """Environment of the local engine (read at initialize)."""
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "5")
    return monkeypatch


@pytest.fixture
def pair(meta, spawn, tmp_path, env):
    """(local engine, peer process) over the metadata mode of `meta`."""
    mode, conn = meta
    peer = Peer(spawn, tmp_path, conn, host_for(mode))
    local = Local(conn, host_for(mode))
    yield local, peer
    local.close()


# ---- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("kinds", [("user", "user"), ("managed", "managed"), ("user", "managed")],
                         ids=["tcp", "same-host", "mixed"])
def test_round_trip_sizes(pair, kinds):
    """Write and read 0 B, 1 B, 4 KiB and 64 MiB; odd offsets for the small sizes."""
    local, peer = pair
    lk, pk = kinds
    seg = peer.segment
    for i, n in enumerate(SIZES):
        loff, poff = (0, 0) if n == BIG else (4096 + 3, 8192 + 5)
        data = pattern(100 + i, n)
        local.put(lk, loff, data)
        rc = local.te.transfer_sync_write(seg, local.addr(lk) + loff, peer.addr(pk) + poff, n)
        assert rc == 0, (n, rc)
        assert peer.sha(pk, poff, n) == sha(data), n

        peer.fill(pk, poff, n, 200 + i)
        rc = local.te.transfer_sync_read(seg, local.addr(lk) + loff, peer.addr(pk) + poff, n)
        assert rc == 0, (n, rc)
        assert local.get(lk, loff, n) == pattern(200 + i, n), n
    assert peer.alive()


def test_batches_async_and_opcodes(pair):
    local, peer = pair
    seg = peer.segment
    # (local offset, peer offset, length) on the registered numpy buffers; one is empty
    entries = [(0, 1 * MiB, 4096), (8192, 2 * MiB + 7, 100_000), (300_000, 5 * MiB, 0),
               (400_000, 6 * MiB + 1, 1 * MiB + 3)]
    bufs = [local.user + lo for lo, _, _ in entries]
    peers = [peer.user + po for _, po, _ in entries]
    lens = [n for _, _, n in entries]

    def put_all(seed):
        datas = []
        for j, (lo, _, n) in enumerate(entries):
            d = pattern(seed + j, n)
            local.put("user", lo, d)
            datas.append(d)
        return datas

    def check_peer(datas):
        for (_, po, n), d in zip(entries, datas):
            assert peer.sha("user", po, n) == sha(d)

    def check_local(seed):
        for j, (lo, po, n) in enumerate(entries):
            assert local.get("user", lo, n) == pattern(seed + j, n)

    def fill_peer(seed):
        for j, (_, po, n) in enumerate(entries):
            peer.fill("user", po, n, seed + j)

    # sync batches
    datas = put_all(10)
    assert local.te.batch_transfer_sync_write(seg, bufs, peers, lens) == 0
    check_peer(datas)
    fill_peer(20)
    assert local.te.batch_transfer_sync_read(seg, bufs, peers, lens) == 0
    check_local(20)
    datas = put_all(30)
    assert local.te.batch_transfer_sync(seg, bufs, peers, lens, TransferOpcode.Write) == 0
    check_peer(datas)
    fill_peer(40)
    assert local.te.batch_transfer_sync(seg, bufs, peers, lens, TransferOpcode.Read) == 0
    check_local(40)

    # async batches: one id, then two at once (one of them through batch_transfer_async)
    datas = put_all(50)
    bid = local.te.batch_transfer_async_write(seg, bufs, peers, lens)
    assert bid > 0
    assert local.te.get_batch_transfer_status([bid]) == 0
    check_peer(datas)
    fill_peer(60)
    b1 = local.te.batch_transfer_async_read(seg, bufs[:2], peers[:2], lens[:2])
    b2 = local.te.batch_transfer_async(seg, bufs[2:], peers[2:], lens[2:], TransferOpcode.Read)
    assert b1 > 0 and b2 > 0 and b1 != b2
    assert local.te.get_batch_transfer_status([b1, b2]) == 0
    check_local(60)
    # a freed id is refused, not dereferenced
    assert local.te.get_batch_transfer_status([b1]) < 0
    # empty input: sync is a no-op success; async gives an id that completes at once
    assert local.te.batch_transfer_sync_write(seg, [], [], []) == 0
    e = local.te.batch_transfer_async_write(seg, [], [], [])
    assert e > 0 and local.te.get_batch_transfer_status([e]) == 0

    # transfer_submit_write + transfer_check_status (1 done, 0 running)
    d = pattern(70, 3 * MiB)
    local.put("user", 0, d)
    bid = local.te.transfer_submit_write(seg, local.user, peer.user + 9 * MiB, len(d))
    assert bid > 0
    st = wait_until(lambda: local.te.transfer_check_status(bid) or None, 10,
                    "transfer_submit_write done", step=0.001)
    assert st == 1
    assert peer.sha("user", 9 * MiB, len(d)) == sha(d)
    assert local.te.transfer_check_status(bid) == -1  # freed after completion

    # transfer_sync with an opcode, keyword arguments as upstream names them
    d = pattern(80, 5000)
    local.put("user", 0, d)
    assert local.te.transfer_sync(target_hostname=seg, buffer=local.user,
                                  peer_buffer_address=peer.user + 77, length=5000,
                                  opcode=TransferOpcode.Write, transport_hint="") == 0
    assert local.te.transfer_sync(seg, local.user + 10_000, peer.user + 77, 5000,
                                  me.Read) == 0
    assert local.get("user", 10_000, 5000) == d


def test_concurrent_callers(pair):
    """Several threads transfer at once (the GIL is released during transfers)."""
    local, peer = pair
    seg = peer.segment
    nthreads, per, rounds = 4, 2 * MiB, 5
    datas = [pattern(300 + t, per) for t in range(nthreads)]
    for t, d in enumerate(datas):
        local.put("user", t * per, d)
    results = []

    def worker(t):
        for _ in range(rounds):
            results.append(local.te.batch_transfer_sync_write(
                seg, [local.user + t * per], [peer.user + t * per], [per]))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(T)
        assert not th.is_alive()
    assert results == [0] * (nthreads * rounds)
    for t, d in enumerate(datas):
        assert peer.sha("user", t * per, per) == sha(d)


# ---- notifications ----------------------------------------------------------------------


def test_notifications(pair):
    local, peer = pair
    seg = peer.segment
    d = pattern(400, 4096)
    local.put("user", 0, d)
    n1 = TransferNotify("req-1", "hello")
    assert local.te.transfer_sync(seg, local.user, peer.user, 4096, TransferOpcode.Write,
                                  notify=n1) == 0
    # delivered after the data: when the peer sees the notification, the bytes are there
    assert peer.call(op="notifies") == {"notifies": [["req-1", "hello"]]}
    assert peer.sha("user", 0, 4096) == sha(d)
    assert peer.call(op="notifies") == {"notifies": []}  # drained

    msg = "h\u00e9llo \u2713 " + "x" * 10_000
    assert local.te.batch_transfer_sync(seg, [local.user], [peer.user + 4096], [4096],
                                        TransferOpcode.Write, TransferNotify("req-2", msg)) == 0
    assert local.te.batch_transfer_sync(seg, [], [], [], TransferOpcode.Write,
                                        TransferNotify("only", "")) == 0
    assert peer.call(op="notifies") == {"notifies": [["req-2", msg], ["only", ""]]}

    # the other direction: the peer notifies this engine
    assert peer.call(op="notify", target=local.te.segment_name, name="back", msg="ack") == {"rc": 0}
    got = local.te.get_notifies()
    assert len(got) == 1 and isinstance(got[0], TransferNotify)
    assert (got[0].name, got[0].msg) == ("back", "ack")
    assert got[0] == TransferNotify("back", "ack")
    assert local.te.get_notifies() == []

    # a transfer that fails delivers no notification
    rc = local.te.transfer_sync(seg, local.user, 4096, 16, TransferOpcode.Write,
                                TransferNotify("never", "x"))
    assert rc < 0
    assert peer.call(op="notifies") == {"notifies": []}


def test_transfer_notify_type():
    n = TransferNotify()
    assert (n.name, n.msg) == ("", "")
    n.name, n.msg = "a", "b"
    assert (n.name, n.msg) == ("a", "b")
    assert "TransferNotify" in repr(n)
    assert TransferNotify(name="x", msg="y").msg == "y"
    with pytest.raises(TypeError):
        n.name = 5
    with pytest.raises(TypeError):
        TransferNotify("only-name")


# ---- same-host path vs forced TCP -------------------------------------------------------


def test_same_host_and_forced_tcp_give_identical_bytes(spawn, tmp_path, env):
    peer = Peer(spawn, tmp_path, "P2PHANDSHAKE", "127.0.0.1", size=8 * MiB)
    n = 3 * MiB + 5
    data = pattern(500, n)
    back = {}
    for force in ("0", "1"):
        env.setenv("MC_FORCE_TCP", force)
        local = Local("P2PHANDSHAKE", "127.0.0.1", size=8 * MiB)
        te = local.te
        before = te._stats()
        local.put("managed", 0, data)
        assert te.transfer_sync_write(peer.segment, local.managed, peer.managed + 1, n) == 0
        assert peer.sha("managed", 1, n) == sha(data)
        assert te.transfer_sync_read(peer.segment, local.managed + n, peer.managed + 1, n) == 0
        back[force] = local.get("managed", n, n)
        after = te._stats()
        if force == "0":
            assert after["shm_bytes"] - before["shm_bytes"] >= 2 * n
            assert after["tcp_bytes_sent"] == before["tcp_bytes_sent"]
        else:
            assert after["shm_bytes"] == before["shm_bytes"]
            assert after["tcp_bytes_sent"] - before["tcp_bytes_sent"] >= n
            assert after["tcp_bytes_received"] - before["tcp_bytes_received"] >= n
        local.close()
    assert back["0"] == back["1"] == data


# ---- every other method -----------------------------------------------------------------


def test_module_items():
    assert TransferOpcode.Read == 0 and TransferOpcode.Write == 1
    assert me.Read is TransferOpcode.Read and me.Write is TransferOpcode.Write
    assert TransferEngine.TransferOpcode is TransferOpcode
    assert int(ErrorCode.INVALID_PARAMS) == -600
    for flag in ("SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_INTRA_NVLINK",
                 "SUPPORT_CUDA", "SUPPORT_MUSA"):
        assert getattr(me, flag) is False
    for name in ("initialize", "initialize_ext", "get_rpc_port", "register_memory",
                 "unregister_memory", "batch_register_memory", "batch_unregister_memory",
                 "transfer_sync_write", "transfer_sync_read", "transfer_sync",
                 "batch_transfer_sync_write", "batch_transfer_sync_read",
                 "batch_transfer_sync", "batch_transfer_async_write",
                 "batch_transfer_async_read", "batch_transfer_async",
                 "get_batch_transfer_status", "transfer_submit_write", "transfer_check_status",
                 "allocate_managed_buffer", "free_managed_buffer", "write_bytes_to_buffer",
                 "read_bytes_from_buffer", "get_first_buffer_address", "get_notifies",
                 "send_probe", "get_engine", "get_engine_ptr", "get_local_topology",
                 "warmup_efa_segment"):
        doc = getattr(TransferEngine, name).__doc__
        assert doc and name in doc and "Upstream" in doc, name
    with pytest.raises(TypeError):
        InnerTransferEngine()


def test_cuda_stream_transfers_fail_clearly():
    # upstream's *_on_cuda transfers exist only in CUDA builds; ours has them and each
    # raises naming itself and the host-memory calls to use, whatever the arguments
    te = TransferEngine()
    for name, args in (("transfer_write_on_cuda", ("peer", 0, 0, 8)),
                       ("transfer_read_on_cuda", ("peer", 0, 0, 8, 0)),
                       ("batch_transfer_write_on_cuda", ("peer", [0], [0], [8])),
                       ("batch_transfer_read_on_cuda", ("peer", [0], [0], [8], 0, ""))):
        with pytest.raises(RuntimeError, match=f"{name}.*CUDA build.*transfer_sync_write"):
            getattr(te, name)(*args)
        assert "CUDA builds only" in getattr(TransferEngine, name).__doc__


def test_engine_methods(pair, meta):
    local, peer = pair
    te = local.te
    port = te.get_rpc_port()
    assert 0 < port < 65536
    if meta[0] == "p2p":
        assert te.segment_name == f"127.0.0.1:{port}"
        assert peer.segment == f"127.0.0.1:{peer.info['rpc_port']}"
    assert te.get_first_buffer_address(peer.segment) == peer.user
    assert te.send_probe(peer.segment) == 0

    # registration, single and batch; a re-registration of the same range is a no-op
    a = np.zeros(3 * 4096, dtype=np.uint8)
    base = a.ctypes.data
    assert te.register_memory(base, 4096) == 0
    assert te.register_memory(base, 4096, "cpu:0") == 0
    assert te.write_bytes_to_buffer(base, b"abc", 3) == 0
    assert a[:3].tobytes() == b"abc"
    assert te.unregister_memory(base) == 0
    assert te.unregister_memory(base) < 0
    with pytest.raises(ValueError):
        te.write_bytes_to_buffer(base, b"abc", 3)  # no longer registered
    addrs = [base, base + 4096, base + 8192]
    assert te.batch_register_memory(addrs, [4096] * 3) == 0
    assert te.read_bytes_from_buffer(base + 8192, 4) == b"\0" * 4
    assert te.batch_unregister_memory(addrs) == 0
    assert te.batch_register_memory(addrs, [4096]) < 0  # length mismatch
    assert te.batch_register_memory([], []) == 0
    assert te.batch_register_memory(buffer_addresses=addrs[:1], capacities=[4096],
                                    location="*") == 0
    assert te.batch_unregister_memory(addrs[:1]) == 0

    # managed buffers
    m = te.allocate_managed_buffer(10_000)
    assert m != 0
    assert te.write_bytes_to_buffer(m, b"x" * 10_000, 10_000) == 0
    assert te.read_bytes_from_buffer(m + 9_990, 10) == b"x" * 10
    assert te.free_managed_buffer(m, 10_000) == 0
    with pytest.raises(ValueError):
        te.read_bytes_from_buffer(m, 1)  # freed
    assert te.allocate_managed_buffer(0) == 0

    # the handle for mooncake.store
    h = te.get_engine()
    assert isinstance(h, InnerTransferEngine)
    assert type(h._mc_te).__name__ == "PyCapsule"
    assert te.get_engine_ptr() != 0
    topo = json.loads(te.get_local_topology())
    assert isinstance(topo, dict) and "cpu:0" in topo
    assert te.warmup_efa_segment(peer.segment) == 0
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") < 0  # already initialized
    assert te.get_rpc_port() == port
    # the handle keeps the engine alive after the TransferEngine is dropped
    e2 = TransferEngine()
    assert e2.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    h2 = e2.get_engine()
    ptr = e2.get_engine_ptr()
    del e2
    assert h2._mc_te is not None and ptr != 0
    del h2


def test_methods_before_initialize():
    te = TransferEngine()
    assert te.get_rpc_port() == -1
    assert te.get_engine() is None and te.get_engine_ptr() == 0
    assert te.register_memory(4096, 4096) < 0
    assert te.batch_register_memory([4096], [4096]) < 0
    assert te.allocate_managed_buffer(4096) == 0
    assert te.transfer_sync_write("127.0.0.1:1", 4096, 4096, 16) < 0
    assert te.batch_transfer_async_write("127.0.0.1:1", [4096], [4096], [16]) == 0
    assert te.transfer_check_status(1) == -1
    assert te.get_notifies() == []
    assert te.send_probe("127.0.0.1:1") != 0
    assert te.get_first_buffer_address("127.0.0.1:1") == 0
    with pytest.raises(ValueError):
        te.read_bytes_from_buffer(4096, 16)


# ---- bad input ----------------------------------------------------------------------------


def test_bad_peer_ranges_are_refused_and_peer_keeps_serving(pair):
    local, peer = pair
    seg = peer.segment
    te = local.te
    good = pattern(600, 4096)
    local.put("user", 0, good)

    def still_serves():
        assert te.transfer_sync_write(seg, local.user, peer.user + 12345, 4096) == 0
        assert peer.sha("user", 12345, 4096) == sha(good)
        assert peer.alive()

    bad = [
        (4096, 16),                         # never registered (low address)
        (peer.user + peer.size - 8, 64),    # runs past the end of the buffer
        (peer.user + peer.size, 1),         # just past the end
        (peer.user - 1, 2),                 # starts before the buffer
        (peer.managed + peer.size, 4096),   # past a managed buffer
        (2**64 - 8, 64),                    # address + length overflows
    ]
    scratch = local.user + 1 * MiB  # failed reads land here (its content is unspecified)
    for remote, n in bad:
        assert te.transfer_sync_write(seg, local.user, remote, n) < 0, hex(remote)
        assert te.transfer_sync_read(seg, scratch, remote, n) < 0, hex(remote)
        still_serves()
    # one bad entry fails the batch; async failures show in the status
    assert te.batch_transfer_sync_write(seg, [local.user] * 2, [peer.user, 4096], [16, 16]) < 0
    bid = te.batch_transfer_async_read(seg, [scratch], [peer.user + peer.size], [16])
    if bid != 0:
        assert te.get_batch_transfer_status([bid]) < 0
    bid = te.transfer_submit_write(seg, local.user, 4096, 16)
    if bid != 0:
        st = wait_until(lambda: te.transfer_check_status(bid) or None, 10,
                        "transfer_submit_write to an unregistered address done", step=0.001)
        assert st == -1
    still_serves()


def test_bad_local_ranges_and_lengths(pair):
    local, peer = pair
    seg = peer.segment
    te = local.te
    # local memory that is not registered: refused before anything is touched
    assert te.transfer_sync_write(seg, 4096, peer.user, 16) == ErrorCode.INVALID_PARAMS
    assert te.transfer_sync_read(seg, 4096, peer.user, 16) == ErrorCode.INVALID_PARAMS
    assert te.transfer_sync_read(seg, local.user + local.size - 8, peer.user, 16) < 0
    assert te.transfer_sync_write(seg, local.user, peer.user, 2**64 - 1) < 0
    assert te.batch_transfer_sync_write(seg, [local.user], [peer.user], [2**63]) < 0
    assert te.batch_transfer_async_write(seg, [4096], [peer.user], [16]) == 0
    # mismatched list lengths
    assert te.batch_transfer_sync_write(seg, [local.user], [peer.user, peer.user], [1]) < 0
    assert te.batch_transfer_async_read(seg, [local.user], [], [1]) == 0
    # unknown batch ids
    assert te.transfer_check_status(123456789) == -1
    assert te.get_batch_transfer_status([123456789]) < 0
    # write/read_bytes outside registered memory never touch it
    with pytest.raises(ValueError, match=r"\[0x8, \+4\) is not inside"):  # says which
        te.write_bytes_to_buffer(8, b"boom", 4)
    with pytest.raises(ValueError):
        te.write_bytes_to_buffer(local.user + local.size - 2, b"boom", 4)
    with pytest.raises(ValueError):
        te.write_bytes_to_buffer(local.user, b"ab", 3)  # length > len(src)
    with pytest.raises(ValueError, match=r"\[0xfffffffffffffffe, \+4\) is not inside"):
        te.read_bytes_from_buffer(2**64 - 2, 4)
    assert te.read_bytes_from_buffer(local.user, 0) == b""
    assert te.transfer_sync_write(seg, local.user, peer.user, 0) == 0
    assert peer.alive()


def test_argument_errors_name_the_argument(pair):
    local, peer = pair
    te, seg = local.te, peer.segment
    cases = [
        (lambda: te.transfer_sync_write(seg, "x", peer.user, 1), "buffer"),
        (lambda: te.transfer_sync_write(seg, local.user, peer.user, -1), "length"),
        (lambda: te.transfer_sync_write(seg, local.user, 2**64, 1), "peer_buffer_address"),
        (lambda: te.transfer_sync_write(seg, local.user, peer.user, 1.5), "length"),
        (lambda: te.transfer_sync_write(5, local.user, peer.user, 1), "target_hostname"),
        (lambda: te.transfer_sync_write(seg, local.user, peer.user), "length"),
        (lambda: te.transfer_sync_write(seg, local.user, peer.user, 1, bogus=1), "bogus"),
        (lambda: te.batch_transfer_sync_write(seg, [local.user], [peer.user], ["1"]), "lengths"),
        (lambda: te.batch_transfer_sync_write(seg, local.user, [peer.user], [1]), "buffers"),
        (lambda: te.batch_transfer_sync_read(seg, [local.user], [-5], [1]), "peer_buffer_addresses"),
        (lambda: te.transfer_sync(seg, local.user, peer.user, 1, 7), "opcode"),
        (lambda: te.transfer_sync(seg, local.user, peer.user, 1, TransferOpcode.Write, notify="n"), "notify"),
        (lambda: te.register_memory(-1, 10), "buffer_addr"),
        (lambda: te.register_memory(local.user, "10"), "capacity"),
        (lambda: te.get_batch_transfer_status([None]), "batch_ids"),
        (lambda: te.transfer_check_status("1"), "batch_id"),
        (lambda: te.allocate_managed_buffer(-4096), "length"),
        (lambda: te.write_bytes_to_buffer(local.managed, "str", 3), "src"),
        (lambda: te.send_probe(None), "peer_server_name"),
        (lambda: te.initialize("127.0.0.1", None, "tcp", ""), "metadata_server"),
        (lambda: te.initialize("127.0.0.1", "P2PHANDSHAKE"), "protocol"),
    ]
    for fn, arg in cases:
        with pytest.raises(TypeError) as ei:
            fn()
        assert arg in str(ei.value), (arg, str(ei.value))
    assert peer.alive()


def test_unknown_peer(meta, env):
    mode, conn = meta
    local = Local(conn, host_for(mode), size=1 * MiB)
    te = local.te
    unknown = f"127.0.0.1:{free_port()}" if mode == "p2p" else "no-such-segment"
    assert te.transfer_sync_write(unknown, local.user, 4096, 16) < 0
    assert te.batch_transfer_sync_read(unknown, [local.user], [4096], [16]) < 0
    assert te.batch_transfer_async_write(unknown, [local.user], [4096], [16]) == 0
    assert te.transfer_submit_write(unknown, local.user, 4096, 16) == 0
    assert te.get_first_buffer_address(unknown) == 0
    assert te.send_probe(f"127.0.0.1:{free_port()}") != 0
    local.close()


@pytest.mark.parametrize("meta", ["http", "etcd", "redis"], indirect=True)
def test_metadata_keys_as_upstream(meta, request, env):
    """Each backend stores upstream's keys and JSON (§6.2): rpc_meta and the segment
    descriptor under mooncake/, read here straight from the server; the engine removes
    both when it is destroyed."""
    import urllib.error
    import urllib.parse
    import urllib.request
    mode, conn = meta
    if mode == "http":
        def read(key):
            try:
                req = sign_urllib(urllib.request.Request(
                    f"{conn}?key={urllib.parse.quote(key)}"))
                with urllib.request.urlopen(req, timeout=5) as r:
                    return r.read()
            except urllib.error.HTTPError as e:
                assert e.code == 404
                return None
    elif mode == "etcd":
        read = request.getfixturevalue("etcd_server").get
    else:
        server = request.getfixturevalue("redis_metadata_server")
        read = lambda key: server.get(key, db=2)  # noqa: E731
    local = Local(conn, host_for(mode), size=1 * MiB)
    name = local.te.segment_name
    rpc = json.loads(read(f"mooncake/rpc_meta/{name}"))
    assert rpc == {"ip_or_host_name": rpc["ip_or_host_name"], "rpc_port": local.te.get_rpc_port()}
    desc = json.loads(read(f"mooncake/ram/{name}"))
    assert desc["name"] == name and desc["protocol"] == "tcp"
    assert any(b["addr"] == local.user and b["length"] == 1 * MiB for b in desc["buffers"])
    local.close()
    import gc
    gc.collect()
    assert read(f"mooncake/rpc_meta/{name}") is None
    assert read(f"mooncake/ram/{name}") is None


def test_initialize_errors(spawn, env):
    te = TransferEngine()
    # metadata server down: a negative code, and nothing left half-started
    down = f"http://127.0.0.1:{free_port()}/metadata"
    assert te.initialize(f"127.0.0.1:{free_port()}", down, "tcp", "") < 0
    assert te.get_rpc_port() == -1
    assert te.initialize_ext(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}/metadata",
                             "tcp", "", "http") < 0
    assert te.initialize("127.0.0.1", "bogus://x", "tcp", "") < 0
    assert te.initialize("127.0.0.1", "", "tcp", "") < 0
    # RDMA is not available here; without MC_FORCE_TCP that is an error (API.md §2)
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0") < 0
    # ... and a failed initialize can be retried
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert te.get_rpc_port() > 0
    # initialize_ext joins metadata_type and metadata_server as upstream
    port = free_port()
    p = spawn([tool("mooncake_http_metadata_server"), f"--port={port}", "--host=127.0.0.1"],
              stdout=subprocess.DEVNULL)
    wait_port(port, proc=p)
    te2 = TransferEngine()
    assert te2.initialize_ext(f"127.0.0.1:{free_port()}", f"127.0.0.1:{port}/metadata", "tcp",
                              "", "http") == 0
    # MC_FORCE_TCP turns "rdma" into TCP, as upstream without HCAs
    env.setenv("MC_FORCE_TCP", "1")
    te3 = TransferEngine()
    assert te3.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0


def test_initialize_on_etcd_and_redis_errors_and_failover(request, env):
    """A metadata server that is down or refuses the password fails initialize with a
    negative code (no half-started engine); an etcd list whose first endpoints are down
    fails over to the live one."""
    etcd = kv_metadata(request, "etcd")
    redis = kv_metadata(request, "redis")
    dead = free_port()
    for conn in (f"127.0.0.1:{dead}", f"etcd://127.0.0.1:{dead}", f"redis://127.0.0.1:{dead}",
                 f"redis://:wrong@127.0.0.1:{redis.port}", f"redis://127.0.0.1:{redis.port}"):
        te = TransferEngine()
        assert te.initialize(f"127.0.0.1:{free_port()}", conn, "tcp", "") < 0, conn
        assert te.get_rpc_port() == -1
    te = TransferEngine()
    conn = f"etcd://127.0.0.1:{dead},127.0.0.1:{free_port()};{etcd.bare}"
    name = f"127.0.0.1:{free_port()}"
    assert te.initialize(name, conn, "tcp", "") == 0
    assert json.loads(etcd.get(f"mooncake/rpc_meta/{name}"))["rpc_port"] == te.get_rpc_port()


# ---- failures of the peer ---------------------------------------------------------------


def test_peer_killed_mid_transfer(spawn, tmp_path, env):
    """A peer that dies while a 64 MiB write is in flight: the call fails (it returns:
    the thread ends), and later calls to the dead peer fail too."""
    env.setenv("MC_TRANSFER_TIMEOUT", "3")
    peer = Peer(spawn, tmp_path, "P2PHANDSHAKE", "127.0.0.1")
    local = Local("P2PHANDSHAKE", "127.0.0.1")
    te = local.te
    assert te.transfer_sync_write(peer.segment, local.user, peer.user, 4096) == 0
    os.kill(peer.proc.pid, signal.SIGSTOP)  # the peer stops reading: the write stays in flight
    out = {}

    def run():
        out["rc"] = te.transfer_sync_write(peer.segment, local.user, peer.user, BIG)

    th = threading.Thread(target=run)
    th.start()
    # in flight: bytes queued on our side towards the stopped peer
    wait_until(lambda: unsent_tcp_bytes(os.getpid()) > 0, 20, "the 64 MiB write queued")
    assert th.is_alive(), out  # 64 MiB cannot fit in the socket buffers of a stopped peer
    os.kill(peer.proc.pid, signal.SIGKILL)
    th.join(60)                # a deadline against a hang, not a speed check
    assert not th.is_alive()
    assert out["rc"] < 0, out
    assert te.transfer_sync_write(peer.segment, local.user, peer.user, 4096) < 0
    bid = te.batch_transfer_async_write(peer.segment, [local.user], [peer.user], [4096])
    assert bid == 0 or te.get_batch_transfer_status([bid]) < 0
    local.close()


def test_stalled_peer_times_out(spawn, tmp_path, env):
    """A peer that stops answering (SIGSTOP) makes transfers fail (after
    MC_TRANSFER_TIMEOUT, +1 ns per byte), for sync and async calls alike. How long that
    takes is not asserted: on a loaded box it is only a lower bound."""
    env.setenv("MC_TRANSFER_TIMEOUT", "2")
    peer = Peer(spawn, tmp_path, "P2PHANDSHAKE", "127.0.0.1")
    local = Local("P2PHANDSHAKE", "127.0.0.1")
    te = local.te
    assert te.transfer_sync_write(peer.segment, local.user, peer.user, 4096) == 0
    os.kill(peer.proc.pid, signal.SIGSTOP)
    try:
        assert te.transfer_sync_write(peer.segment, local.user, peer.user, 8 * MiB) < 0
        bid = te.batch_transfer_async_write(peer.segment, [local.user], [peer.user], [8 * MiB])
        assert bid > 0
        assert te.get_batch_transfer_status([bid]) < 0
    finally:
        os.kill(peer.proc.pid, signal.SIGCONT)
    local.close()
