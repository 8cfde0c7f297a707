#!/usr/bin/env python3
"""bench_metadata_backends.py: issue 12's metadata-backend target in one table: store
put/get throughput with the metadata on http, etcd, redis and P2PHANDSHAKE (64 KiB
values x 32 per batch by default) and the transfer engine's setup time on each, every
figure next to the HTTP backend's of the same run, the ratio (target: etcd and Redis
within 5% of HTTP, i.e. ratio >= 0.95), the load average before and after, and the
command that reproduces it.

    python bench/bench_metadata_backends.py [--rounds 9] [--size 64KiB] [--batch 32]
                                            [--seconds 0.5] [--setups 20] [--quick]

The measuring is bench/bench_metadata.py's (one master + store node per backend, real
etcd and redis-server on loopback, rounds alternating between backends, medians over
rounds, a second HTTP backend as the noise floor; its docstring says what each figure
is): this script runs it with the issue's parameters and prints the summary. --quick: 3
rounds, 0.3 s gets, 5 setups (a smoke run, not a figure). Exit status: bench_metadata's.
"""
import argparse
import json
import os
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_metadata  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--size", default="64KiB")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--put-bytes", default="32MiB")
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--setups", type=int, default=20)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "metadata_backends"))
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.seconds, a.setups = 3, 0.3, 5
    inner = ["--backends", "http,etcd,redis,p2p", "--rounds", str(a.rounds), "--size", a.size,
             "--batch", str(a.batch), "--put-bytes", a.put_bytes, "--seconds", str(a.seconds),
             "--setups", str(a.setups), "--out", a.out]
    load0 = os.getloadavg()
    rc = bench_metadata.main(inner)
    load1 = os.getloadavg()
    try:
        with open(os.path.join(a.out, "results.json")) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        print(f"bench: no results ({e})", file=sys.stderr)
        return 1
    b = res["backends"]
    http = b.get("http", {})
    print()
    print(f"| backend | store put values/s | http | ratio | store get values/s | http | ratio "
          f"| TE setup ms (median) | http | target (put and get >= 0.95) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in ("http-b", "etcd", "redis", "p2p"):
        x = b.get(n)
        if not x or "get_median" not in x:
            continue
        target = "n/a (second HTTP: noise floor)" if n == "http-b" else (
            "n/a (no metadata server)" if n == "p2p" else
            "met" if min(x["put_ratio_vs_http"], x["get_ratio_vs_http"]) >= 0.95 else "missed")
        print(f"| {n} | {x['put_median']:.0f} | {http.get('put_median', 0):.0f} | "
              f"{x['put_ratio_vs_http']:.3f} | {x['get_median']:.0f} | "
              f"{http.get('get_median', 0):.0f} | {x['get_ratio_vs_http']:.3f} | "
              f"{x.get('te_setup_median_ms', float('nan')):.2f} | "
              f"{http.get('te_setup_median_ms', float('nan')):.2f} | {target} |")
    print(f"\nparameters: value {a.size} x batch {a.batch}, {a.put_bytes} put + "
          f"{a.seconds:g} s get per round, {a.rounds} rounds (median; ratio = median over "
          f"rounds of backend / http in the same round), {a.setups} TE setups; "
          f"{os.cpu_count()} CPUs; load average {load0[0]:.1f} / {load0[1]:.1f} / "
          f"{load0[2]:.1f} before, {load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} after")
    print("command: " + " ".join(shlex.quote(x) for x in [sys.executable, *sys.argv]))
    return rc


if __name__ == "__main__":
    sys.exit(main())
