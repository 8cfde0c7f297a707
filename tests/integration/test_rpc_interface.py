"""mooncake.engine.RpcInterface / CoroRPCInterface / ReceivedData / ReceivedTensor
(upstream's secondary RPC bindings) between two processes on loopback: bytes and tensors
reach the peer's callbacks, send_* returns 0 once the peer handled the message and -1 when
it could not (callback raised, no callback, peer gone), the async forms resolve futures of
the caller's loop, and a stopped server ends its start_server()."""
import asyncio
import json
import os
import select
import sys
import time

import pytest

from conftest import _Spawner
from mooncake.engine import CoroRPCInterface, ReceivedData, ReceivedTensor, RpcInterface

HERE = os.path.dirname(os.path.abspath(__file__))


class _Lines:
    """The peer's output line by line, each read bounded by a deadline."""

    def __init__(self, proc):
        self.proc, self.buf = proc, b""

    def next(self, timeout=30):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no line from the rpc peer in {timeout} s: {self.buf!r}")
            if select.select([self.proc.stdout], [], [], left)[0]:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    pytest.fail(f"the rpc peer closed its output: {self.buf!r}")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


@pytest.fixture
def peer():
    sp = _Spawner()
    try:
        proc = sp([sys.executable, os.path.join(HERE, "rpc_peer.py")],
                  stderr=None)
        lines = _Lines(proc)
        first = lines.next()
        assert first.startswith("listening "), first
        proc.lines = lines
        yield proc, first.split()[1]
    finally:
        sp.cleanup()


def _next(proc):
    return json.loads(proc.lines.next())


def test_data_and_tensors_between_processes(peer):
    proc, addr = peer
    assert CoroRPCInterface is RpcInterface
    c = RpcInterface()
    assert c.send_data(addr, b"early") == -1  # not initialized
    assert c.initialize_client()
    assert c.send_data(addr, b"hello") == 0
    got = _next(proc)
    assert got["kind"] == "data" and bytes.fromhex(got["data"]) == b"hello"
    assert got["same_dict"] and got["src"].startswith("127.0.0.1:")
    big = os.urandom(3 << 20)
    assert c.send_data(addr, memoryview(big)) == 0
    assert _next(proc)["size"] == len(big)
    assert c.send_data(addr, b"raise") == -1  # the peer's callback raised
    _next(proc)
    assert c.send_data(addr, b"after") == 0  # the connection survives that
    _next(proc)
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert c.send_tensor(addr, t.t()) == 0  # non-contiguous: sent contiguous
    got = _next(proc)
    assert got == {"kind": "tensor", "shape": [4, 3], "dtype": "torch.float32",
                   "bytes": 48, "sum": 66.0, "size": 48, "mv": 48}
    assert c.send_tensor(addr, b"not a tensor") == -1

    async def both():
        loop = asyncio.get_running_loop()
        r1 = await c.send_data_async(addr, b"async", loop)
        r2 = await c.send_tensor_async(addr, torch.ones(5, dtype=torch.int64), loop)
        return r1, r2
    assert asyncio.run(both()) == (0, 0)
    kinds = sorted(_next(proc)["kind"] for _ in range(2))
    assert kinds == ["data", "tensor"]
    # stop: the peer's blocking start_server returns and it exits
    assert c.send_data(addr, b"stop") == 0
    assert proc.wait(timeout=30) == 0
    assert c.send_data(addr, b"gone") == -1

    async def failing():
        with pytest.raises(RuntimeError):
            await c.send_data_async(addr, b"x", asyncio.get_running_loop())
    asyncio.run(failing())
    c.close()


def test_in_process_server_without_callbacks_and_bad_addresses():
    s = RpcInterface()
    assert not s.initialize_server("no-port")
    assert not s.start_server_async()  # never initialized
    assert s.initialize("127.0.0.1:0")
    assert s.start_server_async()
    addr = s.get_listen_address()
    c = RpcInterface()
    assert c.initialize()
    try:
        assert c.send_data(addr, b"x") == -1  # no data callback on the server
        seen = []
        s.set_data_receive_callback(lambda r: seen.append((type(r), r.get_bytes())))
        assert c.send_data(addr, b"y") == 0 and seen == [(ReceivedData, b"y")]
        assert c.send_data("127.0.0.1:1", b"z") == -1  # nobody there
        assert ReceivedTensor("a:1", b"", [0], "torch.float32").total_bytes == 0
    finally:
        c.close()
        s.stop_server()
    assert c.send_data(addr, b"after stop") == -1
