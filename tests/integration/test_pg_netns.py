"""mooncake-cpu across two "hosts" (network namespaces, netns.py): two ranks per host,
each host's engine bound to its own address, so the pairs that cross hosts move bytes
over TCP through the bridge (the same-host path's Unix socket lives in the abstract
namespace, which is per network namespace, so it cannot reach across) and the pairs on
one host over shared memory.

- all_reduce, broadcast, all_gather (float32, int64, bfloat16) and send/recv with
  out-of-order tags equal gloo's results on the same inputs (gloo runs as a second group
  in the same processes); each rank's engine counted TCP bytes (its peers on the other
  host) and same-host shared-memory bytes (its neighbour);
- a rank on the second host SIGKILLs itself during a loop of all_reduce: the survivors
  finish every iteration, their results equal the sum over the ranks the backend reports
  active, and the dead rank is reported inactive.

Ranks are started with ``ip netns exec`` (pg_netns_child.py). Every wait is bounded;
the lab (namespaces, processes) is removed even on failure. Skipped with the reason
without root or iproute2.
"""
import json
import os
import select
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

import netns  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "pg_netns_child.py")
DEADLINE_S = 150  # every rank's whole run, on a loaded 2-core box
PORT = 29517  # the store's port, inside the first namespace (nothing else listens there)


@pytest.fixture
def lab():
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    lab = netns.Lab(["a", "b"])
    yield lab
    lab.close()


def _read_all(procs, want_exit, deadline):
    """Lines from every child's stdout until each of want_exit has exited (or the
    deadline): {rank: [parsed JSON lines]}, {rank: raw output}."""
    out = {r: b"" for r in procs}
    while time.monotonic() < deadline:
        if all(procs[r].poll() is not None for r in want_exit):
            break
        fds = {procs[r].stdout.fileno(): r for r in procs if procs[r].stdout}
        ready, _, _ = select.select(list(fds), [], [], 0.5)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                out[fds[fd]] += chunk
    for r, p in procs.items():  # what is left in the pipes
        if p.poll() is not None:
            while True:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                out[r] += chunk
    lines = {}
    for r, raw in out.items():
        lines[r] = [json.loads(x) for x in raw.decode(errors="replace").splitlines()
                    if x.startswith("{")]
    return lines, {r: raw.decode(errors="replace") for r, raw in out.items()}


def test_two_hosts_match_gloo_and_survive_a_kill(lab):
    world, victim = 4, 3
    hosts = {0: "a", 1: "a", 2: "b", 3: "b"}
    store_addr = lab.addr["a"]
    env = dict(os.environ, MC_LOG_LEVEL="error", MC_PG_SLOT_BYTES="65536",
               GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1")
    procs = {}
    for r in range(world):
        h = hosts[r]
        procs[r] = lab.popen(h, [sys.executable, CHILD, r, world, store_addr, PORT,
                                 lab.addr[h], victim],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                             cwd=HERE)
    survivors = [r for r in range(world) if r != victim]
    lines, raw = _read_all(procs, range(world), time.monotonic() + DEADLINE_S)
    for r in range(world):
        if procs[r].poll() is None:
            pytest.fail(f"rank {r} still running after {DEADLINE_S} s:\n{raw[r][-3000:]}")
    for r in survivors:
        assert procs[r].returncode == 0, f"rank {r}:\n{raw[r][-3000:]}"
    assert procs[victim].returncode == -9, f"victim:\n{raw[victim][-3000:]}"
    for r in range(world):
        match = [x for x in lines[r] if x["step"] == "match"]
        assert match and match[0]["checked"] == 21, raw[r][-3000:]
        # every rank has a peer on each host: bytes went both ways (the engine's counters)
        assert match[0]["tcp"] > 0 and match[0]["shm"] > 0, match[0]
    for r in survivors:
        ft = [x for x in lines[r] if x["step"] == "ft"]
        assert [x["it"] for x in ft] == list(range(5)), raw[r][-3000:]
        assert ft[0]["value"] == 10.0 and ft[0]["active"] == [1, 1, 1, 1]
        assert ft[-1]["value"] == 6.0 and ft[-1]["active"] == [1, 1, 1, 0]  # survivors
        assert lines[r][-1]["step"] == "done"
