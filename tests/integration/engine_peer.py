"""Peer process for test_engine.py: one mooncake.engine.TransferEngine driven over
stdin/stdout with one JSON object per line.

Usage: python engine_peer.py --metadata CONN [--host 127.0.0.1] [--size BYTES]

At start it initializes the engine, registers a numpy buffer of --size bytes ("user")
and allocates a managed buffer of the same size ("managed"), then prints
  {"init": 0, "segment": ..., "rpc_port": ..., "user": addr, "managed": addr, "size": n}
(or {"init": rc} and exits when initialize fails). Commands (one reply line each):
  {"op": "fill", "buf": "user"|"managed", "off": o, "len": n, "seed": s}  -> {"ok": true}
  {"op": "sha", "buf": ..., "off": o, "len": n}                          -> {"sha": hex}
  {"op": "notifies"}                               -> {"notifies": [[name, msg], ...]}
  {"op": "notify", "target": seg, "name": s, "msg": s}  -> {"rc": rc}  (notify only)
  {"op": "write", "target": seg, "remote": addr, "off": o, "len": n} -> {"rc": rc}
       (writes user[off:off+n] to remote: a transfer initiated by this side)
  {"op": "exit"}
It exits on EOF of stdin, so it never outlives the test.
"""
import argparse
import hashlib
import json
import sys

import numpy as np

from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--metadata", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--size", type=int, default=1 << 20)
    a = ap.parse_args()

    out = sys.stdout
    te = TransferEngine()
    rc = te.initialize(a.host, a.metadata, "tcp", "")
    if rc != 0:
        print(json.dumps({"init": rc}), flush=True)
        return 1
    user = np.zeros(a.size, dtype=np.uint8)
    uaddr = user.ctypes.data
    assert te.register_memory(uaddr, a.size) == 0
    maddr = te.allocate_managed_buffer(a.size)
    assert maddr != 0
    print(json.dumps({"init": 0, "segment": te.segment_name, "rpc_port": te.get_rpc_port(),
                      "user": uaddr, "managed": maddr, "size": a.size}), flush=True)

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "exit":
            break
        if op == "fill":
            data = pattern(cmd["seed"], cmd["len"]).tobytes()
            if cmd["buf"] == "user":
                user[cmd["off"]:cmd["off"] + cmd["len"]] = np.frombuffer(data, np.uint8)
            else:
                te.write_bytes_to_buffer(maddr + cmd["off"], data, cmd["len"])
            reply = {"ok": True}
        elif op == "sha":
            if cmd["buf"] == "user":
                data = user[cmd["off"]:cmd["off"] + cmd["len"]].tobytes()
            else:
                data = te.read_bytes_from_buffer(maddr + cmd["off"], cmd["len"])
            reply = {"sha": hashlib.sha256(data).hexdigest()}
        elif op == "notifies":
            reply = {"notifies": [[n.name, n.msg] for n in te.get_notifies()]}
        elif op == "notify":
            rc = te.batch_transfer_sync(cmd["target"], [], [], [], TransferOpcode.Write,
                                        TransferNotify(cmd["name"], cmd["msg"]))
            reply = {"rc": rc}
        elif op == "write":
            rc = te.transfer_sync_write(cmd["target"], uaddr + cmd["off"], cmd["remote"],
                                        cmd["len"])
            reply = {"rc": rc}
        else:
            reply = {"error": f"unknown op {op}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
