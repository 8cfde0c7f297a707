"""One rank of test_pg_netns.py, started inside a network namespace ("host") with
``ip netns exec``: mooncake-cpu and gloo groups over the same ranks; prints one JSON
line per step on stdout ({"rank", "step", ...}) and exits 0, or prints the traceback
and exits 1.

argv: rank world store_addr store_port my_addr victim
  store_addr:store_port: the TCPStore (rank 0's process hosts it);
  my_addr: the address this host's engine binds and publishes (pg.set_host_ip);
  victim: the rank that SIGKILLs itself during the fault-tolerance loop (-1: none).
"""
import json
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

FT_TIMEOUT = 2.0


def say(rank, step, **kw):
    print(json.dumps(dict(rank=rank, step=step, **kw)), flush=True)


def data(dtype, n, rank, salt):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    return torch.randint(-4, 5, (n,), generator=g).to(getattr(torch, dtype))


def main():
    rank, world, addr, port, me, victim = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                           int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
    from mooncake import pg
    from mooncake.engine import TransferEngine
    pg.set_host_ip(me)
    te = TransferEngine()  # the caller's engine, so that its byte counters can be read
    if te.initialize(me, "P2PHANDSHAKE", "tcp", "") != 0:
        raise RuntimeError(f"engine on {me} did not start")
    pg.set_transfer_engine(te)
    store = dist.TCPStore(addr, port, world, rank == 0, timeout=timedelta(seconds=60))
    dist.init_process_group("mooncake-cpu", store=store, rank=rank, world_size=world,
                            pg_options=pg.MooncakeBackendOptions(world, timeout=FT_TIMEOUT))
    gl = dist.new_group(backend="gloo")
    checked = 0

    def same(a, b, what):
        nonlocal checked
        if not torch.equal(a, b):
            raise AssertionError(f"rank {rank}: {what}: mooncake {a.flatten()[:6]} != gloo "
                                 f"{b.flatten()[:6]}")
        checked += 1

    for dtype, n in (("float32", 70000), ("int64", 3000), ("bfloat16", 9000)):
        x = data(dtype, n, rank, 1)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=gl)
        same(a, b, f"all_reduce {dtype}")
        a, b = x.clone(), x.clone()
        dist.broadcast(a, world - 1)
        dist.broadcast(b, world - 1, group=gl)
        same(a, b, f"broadcast {dtype}")
        oa = [torch.empty_like(x) for _ in range(world)]
        ob = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(oa, x)
        dist.all_gather(ob, x, group=gl)
        for i in range(world):
            same(oa[i], ob[i], f"all_gather {dtype} [{i}]")
    # send/recv across the ring (every rank's next one; with two hosts of two ranks,
    # half of the pairs cross hosts), tags out of order
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for group in (None, gl):
        w1 = dist.isend(data("float32", 30000, rank, 2), nxt, group=group, tag=1)
        w2 = dist.isend(data("float32", 500, rank, 3), nxt, group=group, tag=2)
        r2 = torch.empty(500)
        r1 = torch.empty(30000)
        dist.recv(r2, prv, group=group, tag=2)
        dist.recv(r1, prv, group=group, tag=1)
        w1.wait()
        w2.wait()
        if group is None:
            ours = (r1, r2)
        else:
            same(ours[0], r1, "send/recv tag 1")
            same(ours[1], r2, "send/recv tag 2")
            same(r1, data("float32", 30000, prv, 2), "send/recv data")
    dist.barrier(group=gl)
    st = te._stats()
    say(rank, "match", checked=checked, tcp=st["tcp_bytes_sent"], shm=st["shm_bytes"])
    # a rank dies during a loop of all_reduce: the survivors finish over the others
    backend = dist.group.WORLD
    for it in range(5):
        if rank == victim and it == 2:
            threading.Timer(0.003, os.kill, (os.getpid(), signal.SIGKILL)).start()
        t = torch.full((1 << 19,), float(rank + 1))  # 2 MiB: many messages per stream
        t0 = time.monotonic()
        dist.all_reduce(t)
        if rank == victim and it == 2:
            time.sleep(60)  # finished before the timer fired: wait for it
        active = pg.get_active_ranks(backend).tolist()
        expect = float(sum(r + 1 for r in range(world) if active[r]))
        if not torch.all(t == expect):
            raise AssertionError(f"it {it}: got {t[0]} expected {expect} active {active}")
        say(rank, "ft", it=it, value=float(t[0]), active=active,
            seconds=round(time.monotonic() - t0, 3))
    say(rank, "done")
    # no destroy_process_group: the victim's gloo peers would wait on it
    os._exit(0)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
