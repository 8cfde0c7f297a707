"""A store client for the HA tests, run as its own program (inside a network namespace:
netns.Lab.popen): ``python ha_store_child.py LOCAL_HOSTNAME METADATA MASTER_ADDR``.

Sets up one ``MooncakeDistributedStore`` (tcp, 16 MiB segment, 16 MiB local buffer),
prints ``{"setup": rc}``, then answers JSON commands on stdin, one per line, with one
JSON line each:
  {"op": "put_get", "key": K, "size": N}   one put + get; {"put": rc, "ok": bool}
  {"op": "until_ok", "key": K, "size": N, "seconds": S}
        put + get of fresh keys (K-0, K-1, ...) until one reads back its bytes or S
        seconds pass; {"ok": bool, "elapsed": s, "tries": n, "last": rc}: elapsed is
        measured from when the command arrived (the caller sends it right after the
        fault)
  {"op": "close"}                            closes the store and exits
"""
import hashlib
import json
import sys
import time

from mooncake.store import MooncakeDistributedStore


def value(key, size):
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def put_get(store, key, size):
    v = value(key, size)
    rc = store.put(key, v)
    if rc != 0:
        return rc, False
    return rc, store.get(key) == v


def main():
    host, metadata, master = sys.argv[1:4]
    store = MooncakeDistributedStore()
    rc = store.setup(host, metadata, 16 << 20, 16 << 20, "tcp", "", master)
    print(json.dumps({"setup": rc}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "put_get":
            rc, ok = put_get(store, cmd["key"], cmd["size"])
            out = {"put": rc, "ok": ok}
        elif op == "until_ok":
            t0 = time.monotonic()
            deadline = t0 + cmd["seconds"]
            tries, last, ok = 0, None, False
            while time.monotonic() < deadline:
                last, ok = put_get(store, f"{cmd['key']}-{tries}", cmd["size"])
                tries += 1
                if ok:
                    break
                time.sleep(0.02)
            out = {"ok": ok, "elapsed": time.monotonic() - t0, "tries": tries, "last": last}
        elif op == "put_many":
            out = {"rc": [store.put(k, value(k, cmd["size"])) for k in cmd["keys"]]}
        elif op == "check_many":  # per key: ok (right bytes), miss or WRONG
            r = []
            for k in cmd["keys"]:
                v = store.get(k)
                r.append("miss" if v == b"" else "ok" if v == value(k, cmd["size"]) else "WRONG")
            out = {"r": r}
        elif op == "close":
            store.close()
            print(json.dumps({"closed": True}), flush=True)
            return
        else:
            out = {"error": f"unknown op {op}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
