"""One side of tests/clients/test_sglang.py's transfer-engine test: SGLang's own
MooncakeTransferEngine wrapper (sglang/srt/distributed/device_communicators/
mooncake_transfer_engine.py, P2PHANDSHAKE metadata, MOONCAKE_PROTOCOL=tcp) in this
process. Line protocol on stdin/stdout, one JSON object a line:

  child -> parent  {"session": "127.0.0.1:port", "addr": A, "len": N}  (buffer registered)
  parent -> child  {"write_to": session, "peer_addr": A}  (sender: batch_transfer_sync of
                   its pattern into the peer's buffer, in 4 pieces, then transfer_sync)
  parent -> child  {"check": seed}                         (receiver: its buffer's bytes)
  parent -> child  {"quit": 1}
"""
import ctypes
import json
import sys

from sglang.srt.distributed.device_communicators.mooncake_transfer_engine import (
    MooncakeTransferEngine)

N = 1 << 20


def pattern(seed):
    return bytes((i * 7 + seed) & 0xFF for i in range(N))


def main(seed):
    te = MooncakeTransferEngine(hostname="127.0.0.1", gpu_id=None, ib_device=None)
    buf = ctypes.create_string_buffer(pattern(seed), N)
    addr = ctypes.addressof(buf)
    te.register(addr, N)
    print(json.dumps({"session": te.get_session_id(), "addr": addr, "len": N}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if "write_to" in cmd:
            q = N // 4
            ret = te.batch_transfer_sync(cmd["write_to"], [addr + i * q for i in range(3)],
                                         [cmd["peer_addr"] + i * q for i in range(3)],
                                         [q] * 3)
            ret2 = te.transfer_sync(cmd["write_to"], addr + 3 * q, cmd["peer_addr"] + 3 * q,
                                    q)
            print(json.dumps({"ret": ret, "ret2": ret2}), flush=True)
        elif "check" in cmd:
            print(json.dumps({"equal": buf.raw == pattern(cmd["check"])}), flush=True)
        elif "quit" in cmd:
            te.deregister(addr)
            break


if __name__ == "__main__":
    main(int(sys.argv[1]))
