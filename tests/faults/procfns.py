"""Functions that run inside a store client process (``store_proc.StoreProc`` with
``funcs_from="faults.procfns"``); the first argument is that process's store. Each one is
bounded by a deadline it is given; results are plain values (they cross a pipe).

The long-running ones (``writer_loop``, ``reader_loop``) also write what they did to a
file, line by line, so that a writer killed with SIGKILL still leaves the record of every
put it had acknowledged."""
import json
import os
import random
import time

from faults import values


def _cfg(replica_num=1, preferred=None):
    from mooncake.store import ReplicateConfig

    cfg = ReplicateConfig()
    cfg.replica_num = replica_num
    if preferred:
        if isinstance(preferred, str):
            cfg.preferred_segment = preferred
        else:
            cfg.preferred_segments = list(preferred)
    return cfg


def _endpoints(store, key):
    try:
        return sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                      for r in store.get_replica_desc(key))
    except Exception:  # noqa: BLE001 - a diagnostic only
        return []


def fn_put_specs(store, specs, replica_num=1, preferred=None):
    """put(key, values.make(key, version, writer, size)) for each (key, version, writer,
    size); returns the result codes."""
    cfg = _cfg(replica_num, preferred)
    return [store.put(k, values.make(k, v, w, n), cfg) for k, v, w, n in specs]


def fn_put_batch_specs(store, specs, replica_num=1, preferred=None):
    """One put_batch of all specs (their transfers run together); returns the code."""
    cfg = _cfg(replica_num, preferred)
    keys = [s[0] for s in specs]
    vals = [values.make(*s) for s in specs]
    return store.put_batch(keys, vals, cfg)


def fn_check_keys(store, keys):
    """[(verdict, detail)] of get(key) for each key (values.check)."""
    out = []
    for k in keys:
        verdict, detail = values.check(k, store.get(k))
        out.append((verdict, detail if isinstance(detail, str) else list(detail)))
    return out


def fn_get_code(store, key, cap):
    """get_into's result code (bytes or a negative status) into a private buffer."""
    import ctypes

    buf = ctypes.create_string_buffer(cap)
    return store.get_into(key, ctypes.addressof(buf), cap)


def fn_endpoints(store, key):
    return _endpoints(store, key)


def fn_warm_peers(store, peers, writer):
    """One small put + get per peer segment, so the connections (and any same-host mapping)
    to those peers exist before a fault starts. Returns the codes."""
    out = []
    for p in peers:
        k = f"warm-{os.getpid()}-{p}-{time.monotonic_ns()}"
        rc = store.put(k, values.make(k, 0, writer, 4096), _cfg(1, p))
        ok = values.check(k, store.get(k))[0] == "ok"
        out.append((rc, ok))
        store.remove(k, True)
    return out


def fn_remove_keys(store, keys, force=True):
    return [store.remove(k, force) for k in keys]


def fn_put_then_get(store, key, version, writer, size, start_at):
    """The read-your-writes case: at start_at, put then get at once. Returns (put code,
    verdict of the get, detail)."""
    while time.time() < start_at:
        time.sleep(0.0005)
    rc = store.put(key, values.make(key, version, writer, size))
    verdict, detail = values.check(key, store.get(key))
    return rc, verdict, detail if isinstance(detail, str) else list(detail)


def fn_put_retry_until(store, key, version, writer, size, until, preferred=None):
    """put, then get, until the get reads back this very put (version and writer) or
    until passes (a put of a key whose earlier put is still unfinished returns 0 and stores
    nothing, issue 10 fault 6). Returns (last put code, verdict of the last get: ok only
    when it was this put's bytes, puts tried)."""
    cfg = _cfg(1, preferred)
    val = values.make(key, version, writer, size)
    tries = 0
    while True:
        tries += 1
        rc = store.put(key, val, cfg)
        verdict, detail = values.check(key, store.get(key))
        if verdict == "ok" and tuple(detail) != (version, writer):
            verdict = "other_put"
        if verdict == "ok" or time.time() >= until:
            return rc, verdict, tries
        time.sleep(0.1)


# ---- the nemesis run: writers and readers ---------------------------------------------


def fn_writer_loop(store, writer, journal, stop_at, sizes, window, replica_num=1, seed=0,
                   lease_s=1.0):
    """Puts fresh keys ``<writer>-<seq>`` until stop_at, keeping at most ``window`` of its
    keys alive (older ones are removed; one under a read lease is retried lease_s later:
    so the writer's keys stay few and the master does not need to evict). Journal lines (JSON): {"op": "ack", key, ver,
    size, t, eps} after a put returned 0, {"op": "fail", key, rc, t} after one failed,
    {"op": "del?", key} before a remove and {"op": "del", key, rc} after it. Returns the
    counts."""
    rng = random.Random(seed)
    cfg = _cfg(replica_num)
    live, held = [], []  # held: (retry at, key) of removals refused for a lease
    counts = {"ack": 0, "fail": 0, "removed": 0}
    seq = 0
    with open(journal, "a", buffering=1) as f:
        while time.time() < stop_at:
            seq += 1
            key = f"{writer}-{seq}"
            size = rng.choice(sizes)
            t0 = time.time()
            rc = store.put(key, values.make(key, seq, writer, size), cfg)
            if rc == 0:
                f.write(json.dumps({"op": "ack", "key": key, "ver": seq, "size": size,
                                    "t": t0, "eps": _endpoints(store, key)}) + "\n")
                live.append(key)
                counts["ack"] += 1
            else:
                f.write(json.dumps({"op": "fail", "key": key, "rc": rc, "t": t0}) + "\n")
                counts["fail"] += 1
                time.sleep(0.05)
            # the oldest keys go; one under a read lease (-706: ours from get_replica_desc
            # right after the put, or a reader's) is retried once that lease is over
            now = time.time()
            todo = []
            while len(live) > window:
                todo.append(live.pop(0))
            while held and held[0][0] < now:
                todo.append(held.pop(0)[1])
            for k in todo:
                f.write(json.dumps({"op": "del?", "key": k}) + "\n")
                r = store.remove(k)
                f.write(json.dumps({"op": "del", "key": k, "rc": r}) + "\n")
                if r in (0, -704):
                    counts["removed"] += 1
                else:
                    held.append((time.time() + lease_s, k))
    return counts


def read_journal(path):
    """{key: {"ver", "size", "t", "eps", "removed": bool}} of acknowledged keys in a writer
    journal (a torn last line, from a killed writer, is skipped)."""
    keys = {}
    try:
        with open(path) as f:
            lines = f.readlines()
    except FileNotFoundError:
        return keys
    pending = set()
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        op, k = e["op"], e["key"]
        if op == "ack":
            keys[k] = {"ver": e["ver"], "size": e["size"], "t": e["t"], "eps": e["eps"],
                       "removed": False}
        elif op == "del?":
            pending.add(k)
        elif op == "del":
            pending.discard(k)
            if k in keys and e["rc"] in (0, -704):
                keys[k]["removed"] = True
    for k in pending:  # the writer died between the remove and its record: maybe gone
        if k in keys:
            keys[k]["removed"] = True
    return keys


def fn_reader_loop(store, journals, stop_at, deadline_s, report, seed=0, max_rate=200):
    """Reads random acknowledged, not removed keys of the journals until stop_at and checks
    each value (values.check). Counts reads by verdict and reads that took longer than
    deadline_s (stalls); keeps the first 20 wrong reads. At most max_rate reads a second
    (each read leases its key: a reader faster than that would keep every key leased). Writes the counts to ``report``
    (JSON) every second, so a killed or stuck reader still leaves them. Returns them."""
    rng = random.Random(seed)
    out = {"reads": 0, "ok": 0, "miss": 0, "wrong_bytes": 0, "other_key": 0, "stalls": 0,
           "max_read_s": 0.0, "wrong": [], "stall_keys": []}
    keys, last_load, last_report, next_read = [], 0.0, 0.0, 0.0
    acked = {}

    def dump():
        tmp = report + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, report)

    while time.time() < stop_at:
        now = time.time()
        if now - last_load > 0.5:
            acked = {}
            for j in journals:
                acked.update(read_journal(j))
            keys = [k for k, e in acked.items() if not e["removed"]]
            last_load = now
        if now - last_report > 1.0:
            dump()
            last_report = now
        if not keys:
            time.sleep(0.05)
            continue
        k = rng.choice(keys)
        t0 = time.monotonic()
        if next_read > t0:
            time.sleep(next_read - t0)
            t0 = time.monotonic()
        next_read = t0 + 1.0 / max_rate
        data = store.get(k)
        dt = time.monotonic() - t0
        verdict, detail = values.check(k, data)
        out["reads"] += 1
        out[verdict] += 1
        out["max_read_s"] = max(out["max_read_s"], dt)
        if dt > deadline_s:
            out["stalls"] += 1
            if len(out["stall_keys"]) < 20:
                out["stall_keys"].append([k, round(dt, 2), acked[k]["eps"]])
        if verdict in ("wrong_bytes", "other_key") and len(out["wrong"]) < 20:
            out["wrong"].append([k, verdict, detail, acked[k]["eps"], time.time()])
    dump()
    return out


def fn_final_check(store, keys, deadline_s):
    """values.check of get(key) for each key, with each read's time: {key: [verdict,
    detail, seconds]}."""
    out = {}
    for k in keys:
        t0 = time.monotonic()
        data = store.get(k)
        dt = time.monotonic() - t0
        verdict, detail = values.check(k, data)
        out[k] = [verdict, detail if isinstance(detail, str) else list(detail), dt]
    return out


# ---- issue 10, faults 6-8 -------------------------------------------------------------


def fn_race_rounds(store, keys, writer, size, start_at, gap):
    """Round i starts at start_at + i * gap: put(keys[i]) then get(keys[i]) at once (the
    other racer does the same). Returns [(put code, verdict, detail)] per round."""
    out = []
    for i, k in enumerate(keys):
        t = start_at + i * gap
        while time.time() < t:
            time.sleep(0.0005)
        rc = store.put(k, values.make(k, i, writer, size))
        verdict, detail = values.check(k, store.get(k))
        out.append((rc, verdict, detail if isinstance(detail, str) else list(detail)))
    return out


def fn_upsert_after_get(store, key, size):
    """put(v1); get; upsert(v2) at once; get. Returns (put code, first verdict, upsert
    code, verdict and (version, writer) of the last get)."""
    rc1 = store.put(key, values.make(key, 1, "put", size))
    first = values.check(key, store.get(key))[0]
    rc2 = store.upsert(key, values.make(key, 2, "upsert", size))
    verdict, detail = values.check(key, store.get(key))
    return rc1, first, rc2, verdict, detail if isinstance(detail, str) else list(detail)


def fn_te_failed_reads(store, metadata, peer, cases, size=1 << 20):
    """A TransferEngine of this process reads from peer for each (remote address, length)
    in cases into a registered buffer filled with a known pattern; returns [(code, whether
    the buffer is still exactly the pattern)]."""
    import ctypes

    from mooncake.engine import TransferEngine

    te = TransferEngine()
    rc = te.initialize("127.0.0.1", metadata, "tcp", "")
    if rc != 0:
        return [("initialize", rc)]
    pattern = values.make("te-dest", 7, "te", size)
    buf = ctypes.create_string_buffer(pattern, size)
    addr = ctypes.addressof(buf)
    assert te.register_memory(addr, size) == 0
    out = []
    for remote, n in cases:
        ctypes.memmove(addr, pattern, size)
        code = te.transfer_sync_read(peer, addr, remote, min(n, size))
        out.append((code, buf.raw[:size] == pattern))
    te.unregister_memory(addr)
    return out


def fn_register_many(store, n_first, n_total, deadline_s, width=64):
    """register_buffer of n_total distinct width-byte buffers, one call each, until one
    fails or deadline_s passes. Returns {"done": registered, "first_failure": [index, code]
    or None, "timed_out", "seconds_first" (for the first n_first), "logs": WARNING+
    records of the mooncake logger from the first failure on (MC_LOG_TO_PYTHON=1)}."""
    import ctypes
    import logging

    records = []

    class H(logging.Handler):
        def emit(self, r):
            if r.levelno >= logging.WARNING and len(records) < 20:
                records.append(r.getMessage())

    logging.getLogger("mooncake").addHandler(H())
    buf = ctypes.create_string_buffer(n_total * width)
    base = ctypes.addressof(buf)
    t0 = time.monotonic()
    out = {"done": 0, "first_failure": None, "timed_out": False, "seconds_first": None,
           "logs": records}
    for i in range(n_total):
        if time.monotonic() - t0 > deadline_s:
            out["timed_out"] = True
            break
        rc = store.register_buffer(base + i * width, width)
        if rc != 0:
            out["first_failure"] = [i, rc]
            break
        out["done"] = i + 1
        if i + 1 == n_first:
            out["seconds_first"] = time.monotonic() - t0
    out["seconds"] = time.monotonic() - t0
    _KEEP.append(buf)  # registered until the process ends (unregistering is not the test)
    return out


_KEEP = []


# ---- reads at the end of a short read lease --------------------------------------------


def fn_churn_keys(store, keys, writer, size, stop_at):
    """Until stop_at, round after round over keys: remove(key) without force (a key under
    a read lease, -706, is left for the next round) and put a new version of it, so the
    space of a key whose lease ended is freed and reused by another key's put at once.
    Returns {"puts": acknowledged puts, "removed": removes that returned 0, "held":
    removes refused for a lease, "failed": other codes}."""
    out = {"puts": 0, "removed": 0, "held": 0, "failed": 0}
    version = {k: 0 for k in keys}
    live = set()
    while time.time() < stop_at:
        for k in keys:
            if k in live:
                rc = store.remove(k)
                if rc == 0:
                    out["removed"] += 1
                    live.discard(k)
                elif rc == -706:
                    out["held"] += 1
                    continue
                else:
                    out["failed"] += 1
                    continue
            version[k] += 1
            rc = store.put(k, values.make(k, version[k], writer, size))
            if rc == 0:
                out["puts"] += 1
                live.add(k)
            else:
                out["failed"] += 1
    return out


def fn_read_keys_loop(store, keys, stop_at, batch=False):
    """Reads keys round after round until stop_at (batch: one get_batch of all of them a
    round, so the later reads of a round run late in their leases) and checks each value
    (values.check). Returns the counts by verdict and the first 10 wrong reads ([key,
    verdict, detail])."""
    out = {"reads": 0, "ok": 0, "miss": 0, "wrong_bytes": 0, "other_key": 0, "wrong": []}
    while time.time() < stop_at:
        got = store.get_batch(keys) if batch else [store.get(k) for k in keys]
        for k, data in zip(keys, got):
            verdict, detail = values.check(k, data)
            out["reads"] += 1
            out[verdict] += 1
            if verdict in ("wrong_bytes", "other_key") and len(out["wrong"]) < 10:
                out["wrong"].append([k, verdict, detail])
    return out
