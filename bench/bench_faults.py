#!/usr/bin/env python3
"""The nemesis run of tests/faults in bench mode: at least 10 minutes of faults (kill -9,
SIGSTOP/SIGCONT of nodes and writers, master restarts, link cuts where the machine allows
network namespaces) against a real master + 3 store nodes + writers + a checking reader,
then the same report as the CI test (tests/faults/test_nemesis.py): wrong bytes (must be
0), lost acknowledged keys by cause, stalls longer than one deadline.

    .venv/bin/python bench/bench_faults.py [--seconds 600] [--seed 1] [--no-link-cuts]

Run it with the venv's python (the tools are found beside it). Exit status 0 when the
store kept its promise, 1 when the report lists failures. Everything binds to 127.0.0.1
(or the loopback of a private network namespace) and every process it starts is killed
before it exits."""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "integration")]
os.environ.setdefault("MC_FAULTS_MODE", "bench")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600.0,
                    help="seconds of faults (default 600; under 600 is not the bench mode)")
    ap.add_argument("--seed", type=int, default=1, help="the nemesis schedule's seed")
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=2.0,
                    help="a read longer than this is a stall (s)")
    ap.add_argument("--no-link-cuts", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="do not print each fault")
    a = ap.parse_args()
    from faults import harness

    t0 = time.time()

    def log(m):
        if not a.quiet:
            print(f"{time.time() - t0:7.1f}s {m}", flush=True)

    if a.seconds < 600:
        print(f"bench_faults: {a.seconds:.0f}s of faults (the bench mode is at least 600s)")
    rep = harness.run_nemesis(seconds=a.seconds, seed=a.seed, writers=a.writers,
                              deadline_s=a.deadline,
                              cut_links=False if a.no_link_cuts else None, log=log)
    print(f"bench_faults: seconds={a.seconds:.0f} seed={a.seed} writers={a.writers} "
          f"deadline={a.deadline}s")
    print(rep.text())
    return 1 if rep.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
