#!/usr/bin/env python3
"""What quarantine costs in usable capacity under churn (docs/consistency.md, "What it
costs"): a real master + 2 store nodes + writers that put 1 MiB values without pause
in batches (--writers processes, the preferred node alternating per batch, keeping a
window of live keys, removing the oldest),
while node A is SIGSTOPped for --hold seconds every --period seconds. The writer's
transfer timeout is 1 s (MC_TRANSFER_TIMEOUT=1, TCP), so every put to A while it is
stopped times out and is revoked: its space goes to quarantine until A (after SIGCONT)
and the writer have applied the fence. The master's gauges are sampled every 0.1 s.

    .venv/bin/python bench/bench_quarantine.py [--seconds 30] [--period 4] [--hold 1.5]

Prints: puts acknowledged / failed, quarantined bytes (peak, time-weighted mean, share of
the capacity), the time from each SIGCONT until the quarantine is empty again, and the
same without faults (a baseline phase first). Everything binds to 127.0.0.1; every
process it starts is killed before it exits."""
import argparse
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "integration"),
                os.path.dirname(os.path.abspath(__file__))]

MiB = 1 << 20

from faults.procfns import *  # noqa: E402,F401,F403 - the child-side helpers, re-offered


def fn_churn(store, seconds, size, window, targets, batch, tag):
    """Puts batches of `batch` fresh keys of `size` bytes for `seconds`, the preferred
    segment alternating over `targets` per batch, keeping at most `window` live keys (the
    oldest are removed by force). Returns (keys acknowledged, keys failed, codes seen)."""
    import mooncake.store as ms

    val = bytes(size)
    live, ok, bad, codes = [], 0, 0, {}
    t_end = time.time() + seconds
    i = 0
    while time.time() < t_end:
        cfg = ms.ReplicateConfig()
        cfg.replica_num = 1
        cfg.preferred_segment = targets[i % len(targets)]
        keys = [f"churn-{tag}-{i}-{j}" for j in range(batch)]
        rc = store.put_batch(keys, [val] * batch, cfg) if batch > 1 else store.put(
            keys[0], val, cfg)
        codes[rc] = codes.get(rc, 0) + 1
        if rc == 0:
            ok += batch
            live += keys
        else:  # a batch can fail in part: the keys that were stored are live
            for k in keys:
                if store.is_exist(k) == 1:
                    ok += 1
                    live.append(k)
                else:
                    bad += 1
        while len(live) > window:
            store.remove(live.pop(0), True)
        i += 1
    for k in live:
        store.remove(k, True)
    return ok, bad, codes


class Sampler(threading.Thread):
    def __init__(self, cluster, step=0.1):
        super().__init__(daemon=True)
        self.c, self.step, self.samples, self.stop_ = cluster, step, [], False

    def run(self):
        while not self.stop_:
            m = self.c.master.metrics()
            self.samples.append((time.time(), m.get("master_quarantined_bytes", 0.0),
                                 m.get("master_allocated_bytes", 0.0),
                                 m.get("master_fences_pending", 0.0)))
            time.sleep(self.step)


def summarize(samples):
    if len(samples) < 2:
        return 0.0, 0.0
    peak = max(s[1] for s in samples)
    area = sum((b[0] - a[0]) * a[1] for a, b in zip(samples, samples[1:]))
    mean = area / (samples[-1][0] - samples[0][0])
    return peak, mean


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="seconds of faults")
    ap.add_argument("--baseline", type=float, default=8.0, help="seconds without faults first")
    ap.add_argument("--period", type=float, default=4.0, help="a SIGSTOP of A every (s)")
    ap.add_argument("--hold", type=float, default=1.5, help="each SIGSTOP lasts (s)")
    ap.add_argument("--segment", type=int, default=64, help="MiB per node")
    ap.add_argument("--window", type=int, default=16, help="live keys kept per writer")
    ap.add_argument("--writers", type=int, default=3, help="writer processes")
    ap.add_argument("--batch", type=int, default=4, help="keys per put_batch")
    a = ap.parse_args()
    from faults import harness

    harness.FUNCS = "bench_quarantine"  # the children offer fn_churn too
    cap = 2 * a.segment * MiB
    c = harness.Cluster("--client_ttl=30", "--default_kv_lease_ttl=500", nodes=2,
                        segment=a.segment * MiB)
    try:
        na, nb = c.nodes
        ws = [c.client(f"W{i}", {"MC_FORCE_TCP": "1", "MC_TRANSFER_TIMEOUT": "1"})
              for i in range(a.writers)]
        for w in ws:
            assert w.fn("warm_peers", [na.hostname, nb.hostname], w.name) == [(0, True),
                                                                              (0, True)]
        targets = [na.hostname, nb.hostname]
        for phase, secs, faults in (("baseline", a.baseline, False), ("faults", a.seconds, True)):
            s = Sampler(c)
            s.start()
            for i, w in enumerate(ws):
                w.send_fn("churn", secs, MiB, a.window, targets[i % 2:] + targets[:i % 2],
                          a.batch, f"{phase}{i}")
            t0, resumes = time.time(), []
            if faults:
                while time.time() - t0 + a.period <= secs:
                    time.sleep(a.period - a.hold)
                    na.stop()
                    time.sleep(a.hold)
                    na.cont()
                    resumes.append(time.time())
            ok = bad = 0
            codes = {}
            for w in ws:
                o, b, cs = w.result(timeout=secs + 60)
                ok, bad = ok + o, bad + b
                for k, v in cs.items():
                    codes[k] = codes.get(k, 0) + v
            harness.wait_space_free(c, timeout=20)
            time.sleep(0.5)
            s.stop_ = True
            s.join()
            peak, mean = summarize(s.samples)
            # time from each SIGCONT until the quarantine is empty again
            lat = []
            for r in resumes:
                after = [t for t, q, _, _ in s.samples if t >= r and q == 0]
                if after:
                    lat.append(after[0] - r)
            print(f"bench_quarantine {phase}: {secs:.0f} s, {a.writers} writers x batches of "
                  f"{a.batch} x 1 MiB: keys ok={ok} failed={bad}, put codes={codes}")
            print(f"  quarantined bytes: peak {peak / MiB:.1f} MiB ({100 * peak / cap:.1f}% of "
                  f"{cap // MiB} MiB), time-weighted mean {mean / MiB:.2f} MiB "
                  f"({100 * mean / cap:.2f}%)")
            if lat:
                print(f"  SIGCONT -> quarantine empty: median {sorted(lat)[len(lat) // 2]:.2f} s,"
                      f" max {max(lat):.2f} s over {len(lat)} stops of {a.hold} s")
            print(f"  master_fences_pending at the end: {s.samples[-1][3]:.0f}, "
                  f"allocated at the end: {s.samples[-1][2] / MiB:.1f} MiB")
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
