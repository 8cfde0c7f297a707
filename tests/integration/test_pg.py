"""mooncake.pg (backend "mooncake-cpu"): real processes on loopback.

- every collective and p2p op against gloo's result on the same inputs and dtypes (gloo
  runs as a second group in the same processes), slots small enough that every stream
  is cut into several messages; p2p tags out of order between one pair do not cross and
  one tag keeps FIFO order (the same pattern on both backends);
- torchrun --nproc-per-node=2 on the quick-start script from docs/pg.md;
- kill -9 of one rank during an all_reduce loop: survivors finish, their results equal
  the sum over the ranks the backend reports active; a replacement joins
  (is_extension=True) and the next collective includes it;
- deactivate / activate proposals from a non-coordinator rank (one of the ranks on an
  engine given with pg.set_transfer_engine).
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
import torch.multiprocessing as mp  # noqa: E402

from conftest import free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(HERE, "..", "..", "docs", "pg.md")
FT_TIMEOUT = 2.0  # seconds a silent peer is given before it is reported
JOIN_S = 120  # bound on every process of a test


def _env(port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      MC_LOG_LEVEL="error", MC_PG_SLOT_BYTES="16384")


def _init(rank, world, port, **opt):
    _env(port)
    from mooncake import pg
    opts = pg.MooncakeBackendOptions(opt.pop("max_group", world), opt.pop("ext", False),
                                     timeout=opt.pop("timeout", FT_TIMEOUT), **opt)
    dist.init_process_group("mooncake-cpu", rank=rank, world_size=world, pg_options=opts)
    return pg


def _run(target, q, *args):
    try:
        target(q, *args)
    except BaseException:  # report, then fail the process
        q.put(("error", traceback.format_exc()))
        sys.exit(1)


def _start(ctx, target, q, *args):
    p = ctx.Process(target=_run, args=(target, q) + args)
    p.start()
    return p


def _collect(q, procs, n_ok):
    """Wait for n_ok ("ok", ...) messages; fail on the first error."""
    got = []
    deadline = time.monotonic() + JOIN_S
    while len(got) < n_ok:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"only {len(got)} of {n_ok} ranks reported: {got}")
        try:
            kind, val = q.get(timeout=min(left, 1.0))
        except Exception:
            if all(not p.is_alive() for p in procs) and q.empty():
                pytest.fail(f"processes ended; {len(got)} of {n_ok} reported")
            continue
        if kind == "error":
            pytest.fail(val)
        got.append(val)
    for p in procs:
        p.join(timeout=JOIN_S)
        if p.is_alive():
            p.kill()
    return got


def _kill_all(procs):
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(timeout=10)


# --------------------------------------------------------------------------------------
# every collective against gloo
# --------------------------------------------------------------------------------------

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"]


def _data(dtype, n, rank, salt):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    x = torch.randint(-4 if dtype not in ("uint8",) else 0, 5, (n,), generator=g)
    return x.to(getattr(torch, dtype))


def _match_worker(q, rank, world, port):
    _init(rank, world, port)
    gl = dist.new_group(backend="gloo")
    R = dist.ReduceOp
    checked = 0

    def same(a, b, what):
        nonlocal checked
        if not torch.equal(a, b):
            raise AssertionError(f"rank {rank}: {what}: mooncake {a.flatten()[:8]} != gloo "
                                 f"{b.flatten()[:8]}")
        checked += 1

    for dtype in DTYPES:
        for n in (7, 5000):  # one message, and streams cut into several 16 KiB messages
            ops = [R.SUM, R.MIN, R.MAX] + ([R.PRODUCT] if n == 7 else [])
            for i, op in enumerate(ops):
                x = _data(dtype, n, rank, i)
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=op)
                dist.all_reduce(b, op=op, group=gl)
                same(a, b, f"all_reduce {dtype} n={n} {op}")
                a, b = x.clone(), x.clone()
                dist.reduce(a, dst=1, op=op)
                dist.reduce(b, dst=1, op=op, group=gl)
                if rank == 1:
                    same(a, b, f"reduce {dtype} {op}")
                ins = [_data(dtype, n, rank, 10 + j) for j in range(world)]
                a, b = torch.empty_like(x), torch.empty_like(x)
                dist.reduce_scatter(a, [t.clone() for t in ins], op=op)
                dist.reduce_scatter(b, [t.clone() for t in ins], op=op, group=gl)
                same(a, b, f"reduce_scatter {dtype} {op}")
                flat = torch.cat(ins)
                a, b = torch.empty_like(x), torch.empty_like(x)
                dist.reduce_scatter_tensor(a, flat.clone(), op=op)
                dist.reduce_scatter_tensor(b, flat.clone(), op=op, group=gl)
                same(a, b, f"reduce_scatter_tensor {dtype} {op}")
            if dtype in ("float32", "float64") and hasattr(R, "AVG"):  # gloo has no AVG
                x = _data(dtype, n, rank, 77)
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=R.AVG)
                dist.all_reduce(b, group=gl)
                same(a, b / world, f"all_reduce {dtype} n={n} AVG (gloo: SUM / world)")
            x = _data(dtype, n, rank, 99)
            a, b = x.clone(), x.clone()
            dist.broadcast(a, src=2 % world)
            dist.broadcast(b, src=2 % world, group=gl)
            same(a, b, f"broadcast {dtype}")
            la = [torch.empty_like(x) for _ in range(world)]
            lb = [torch.empty_like(x) for _ in range(world)]
            dist.all_gather(la, x)
            dist.all_gather(lb, x, group=gl)
            same(torch.stack(la), torch.stack(lb), f"all_gather {dtype}")
            oa, ob = torch.empty(world * n, dtype=x.dtype), torch.empty(world * n, dtype=x.dtype)
            dist.all_gather_into_tensor(oa, x)
            dist.all_gather_into_tensor(ob, x, group=gl)
            same(oa, ob, f"all_gather_into_tensor {dtype}")
            la = [torch.empty_like(x) for _ in range(world)] if rank == 0 else None
            lb = [torch.empty_like(x) for _ in range(world)] if rank == 0 else None
            dist.gather(x, la, dst=0)
            dist.gather(x, lb, dst=0, group=gl)
            if rank == 0:
                same(torch.stack(la), torch.stack(lb), f"gather {dtype}")
            src = [_data(dtype, n, 7, j) for j in range(world)]
            a, b = torch.empty_like(x), torch.empty_like(x)
            dist.scatter(a, src if rank == 1 else None, src=1)
            dist.scatter(b, src if rank == 1 else None, src=1, group=gl)
            same(a, b, f"scatter {dtype}")
            ins = [_data(dtype, n, rank, 40 + j) for j in range(world)]
            oa = [torch.empty(n, dtype=x.dtype) for _ in range(world)]
            ob = [torch.empty(n, dtype=x.dtype) for _ in range(world)]
            dist.all_to_all(oa, ins)
            dist.all_to_all(ob, ins, group=gl)
            same(torch.cat(oa), torch.cat(ob), f"all_to_all {dtype}")
            # uneven splits: rank r sends j+1 rows to rank j
            rows = [j + 1 for j in range(world)]
            recv_rows = [rank + 1] * world
            xin = _data(dtype, sum(rows) * 3, rank, 50).reshape(-1, 3)
            oa = torch.empty(sum(recv_rows), 3, dtype=x.dtype)
            ob = torch.empty(sum(recv_rows), 3, dtype=x.dtype)
            dist.all_to_all_single(oa, xin, recv_rows, rows)
            dist.all_to_all_single(ob, xin, recv_rows, rows, group=gl)
            same(oa, ob, f"all_to_all_single {dtype}")
    # AVG (gloo refuses it): against SUM / world
    x = _data("float32", 5000, rank, 3)
    a, b = x.clone(), x.clone()
    dist.all_reduce(a, op=R.AVG)
    dist.all_reduce(b, op=R.SUM, group=gl)
    if not torch.allclose(a, b / world):
        raise AssertionError("all_reduce AVG")
    # AVG on an integer tensor: refused before anything is sent (AVG divides),
    # and the group goes on working (the next collectives)
    for call in (lambda t: dist.all_reduce(t, op=R.AVG),
                 lambda t: dist.reduce_scatter_tensor(t[:1].clone(), t, op=R.AVG)):
        xi = torch.ones(world, dtype=torch.int32)
        try:
            call(xi)
        except Exception as e:  # noqa: BLE001 - the type torch hands on is checked below
            if not isinstance(e, ValueError) or "floating point" not in str(e):
                raise AssertionError(f"AVG int32: {type(e).__name__}: {e}") from e
        else:
            raise AssertionError("AVG on int32 was accepted")
    # bool as gloo does not reduce it: MAX over 0/1 bytes against uint8
    xb = _data("uint8", 100, rank, 4) > 2
    a = xb.clone()
    dist.all_reduce(a, op=R.MAX)
    b = xb.to(torch.uint8)
    dist.all_reduce(b, op=R.MAX, group=gl)
    same(a, b.bool(), "all_reduce bool MAX")
    # non-contiguous tensor
    m = _data("float32", 64, rank, 5).reshape(8, 8).t()
    a, b = m.clone(), m.clone()
    dist.all_reduce(a)
    dist.all_reduce(b.contiguous(), group=gl)
    dist.all_reduce(b, group=gl)
    same(a, b, "non-contiguous all_reduce")
    # async collectives
    works = []
    outs = []
    for i in range(3):
        t = torch.full((1000,), float(rank + i))
        works.append(dist.all_reduce(t, async_op=True))
        outs.append(t)
    for i, w in enumerate(works):
        w.wait()
        expect = float(sum(r + i for r in range(world)))
        if not torch.all(outs[i] == expect):
            raise AssertionError("async all_reduce")
    dist.barrier()
    # point-to-point in a ring, blocking and isend/irecv, several messages long
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    big = _data("float32", 20000, rank, 6)
    got = torch.empty_like(big)
    sw = dist.isend(big, nxt)
    rw = dist.irecv(got, prv)
    sw.wait()
    rw.wait()
    same(got, _data("float32", 20000, prv, 6), "isend/irecv ring")
    if rank == 0:
        dist.send(torch.arange(10, dtype=torch.int64), 1)
    elif rank == 1:
        r = torch.empty(10, dtype=torch.int64)
        dist.recv(r, 0)
        same(r, torch.arange(10, dtype=torch.int64), "send/recv")
    ops_ = [dist.P2POp(dist.isend, big, nxt), dist.P2POp(dist.irecv, got, prv)]
    for w in dist.batch_isend_irecv(ops_):
        w.wait()
    same(got, _data("float32", 20000, prv, 6), "batch_isend_irecv")
    dist.barrier()
    # tags out of order between ranks 0 and 1 (gloo's matching: by source and tag)
    ours = _tags_pattern(rank, None)
    theirs = _tags_pattern(rank, gl)
    want = [_data("float32", 10000, 0, 12), _data("float32", 20000, 0, 11),
            _data("int64", 300, 0, 13), _data("int64", 300, 0, 14)] if rank == 1 else []
    if len(ours) != len(want):
        raise AssertionError("tags: wrong message count")
    for i, (a, b, w) in enumerate(zip(ours, theirs, want)):
        if not torch.equal(b, w):
            raise AssertionError(f"tags: message {i}: gloo delivered something else")
        same(a, b, f"tags: message {i}")
    dist.barrier()
    # a subgroup of the backend (its own store prefix, mailbox and membership)
    sub = dist.new_group([0, 2])
    if rank in (0, 2):
        t = torch.full((3000,), float(rank + 1))
        dist.all_reduce(t, group=sub)
        same(t, torch.full((3000,), 4.0), "subgroup all_reduce")
        if pg_active(sub) != [1, 1]:
            raise AssertionError(f"subgroup active {pg_active(sub)}")
    dist.barrier()
    q.put(("ok", (rank, checked)))
    dist.destroy_process_group()


def pg_active(group):
    from mooncake import pg
    return pg.get_active_ranks(group).tolist()


def test_collectives_match_gloo():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    world, port = 3, free_port()
    procs = [_start(ctx, _match_worker, q, r, world, port) for r in range(world)]
    try:
        got = _collect(q, procs, world)
    finally:
        _kill_all(procs)
    assert sorted(r for r, _ in got) == list(range(world))
    assert all(n > 100 for _, n in got)


# --------------------------------------------------------------------------------------
# p2p tags: matched by (source, tag) as gloo does
# --------------------------------------------------------------------------------------


def _tags_pattern(rank, group):
    """Rank 0 sends tag 1 then tag 2 (and two messages of tag 5); rank 1 receives tag 2
    first, then tag 1, then the tag-5 pair. Messages are several slots long, so the one
    that waits (tag 1) is still arriving when tag 2 is wanted. Returns what rank 1 got."""
    n = 20000
    if rank > 1:
        return []
    if rank == 0:
        works = [dist.isend(_data("float32", n, 0, 11), 1, group=group, tag=1),
                 dist.isend(_data("float32", n // 2, 0, 12), 1, group=group, tag=2),
                 dist.isend(_data("int64", 300, 0, 13), 1, group=group, tag=5),
                 dist.isend(_data("int64", 300, 0, 14), 1, group=group, tag=5)]
        for w in works:
            w.wait()
        return []
    t2 = torch.empty(n // 2, dtype=torch.float32)
    dist.recv(t2, 0, group=group, tag=2)
    t1 = torch.empty(n, dtype=torch.float32)
    dist.recv(t1, 0, group=group, tag=1)
    f1 = torch.empty(300, dtype=torch.int64)
    f2 = torch.empty(300, dtype=torch.int64)
    w2 = dist.irecv(f1, 0, group=group, tag=5)  # same tag: posting order = sending order
    w3 = dist.irecv(f2, 0, group=group, tag=5)
    w3.wait()
    w2.wait()
    return [t2, t1, f1, f2]


# --------------------------------------------------------------------------------------
# torchrun on the quick start of docs/pg.md
# --------------------------------------------------------------------------------------


def test_torchrun_quickstart(tmp_path):
    text = open(DOCS).read()
    m = re.search(r"<!-- quickstart -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/pg.md has no quick-start block"
    script = tmp_path / "pg_quickstart.py"
    script.write_text(m.group(1))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("torchrun is not installed next to the interpreter")
    env = dict(os.environ, MC_LOG_LEVEL="error", OMP_NUM_THREADS="1")
    out = subprocess.run([torchrun, "--nproc-per-node=2", f"--master-port={free_port()}",
                          str(script)], capture_output=True, text=True, timeout=JOIN_S,
                         env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = sorted(re.findall(r"rank=\d all_reduce=\d+ active=\[[0-9, ]*\]", out.stdout))
    assert lines == ["rank=0 all_reduce=3 active=[1, 1]", "rank=1 all_reduce=3 active=[1, 1]"], \
        out.stdout + out.stderr


# --------------------------------------------------------------------------------------
# kill -9 during an all_reduce loop; a replacement takes the slot
# --------------------------------------------------------------------------------------


def _ft_worker(q, rank, world, port, victim, ext):
    _env(port)
    from mooncake import pg
    mirror = torch.zeros(world, dtype=torch.int32)  # the active_ranks overload's mirror
    dist.init_process_group("mooncake-cpu", rank=rank, world_size=world,
                            pg_options=pg.MooncakeBackendOptions(mirror, ext, world,
                                                                 timeout=FT_TIMEOUT))
    backend = dist.group.WORLD
    if ext:  # the replacement for the killed slot
        pg.join_group(backend)
        t = torch.full((4096,), float(rank + 1))
        dist.all_reduce(t)
        q.put(("ok", ("replacement", float(t[0]), pg.get_active_ranks(backend).tolist())))
        dist.destroy_process_group()
        return
    results = []
    for it in range(6):
        if rank == victim and it == 3:  # die a few ms into this all_reduce
            threading.Timer(0.003, os.kill, (os.getpid(), signal.SIGKILL)).start()
        t = torch.full((1 << 20,), float(rank + 1))  # 4 MiB: many messages per stream
        dist.all_reduce(t)
        if rank == victim and it == 3:
            time.sleep(60)  # finished before the timer fired: wait for it
        active = pg.get_active_ranks(backend).tolist()
        if active != mirror.tolist():
            raise AssertionError(f"mirror {mirror.tolist()} != active {active}")
        expect = float(sum(r + 1 for r in range(world) if active[r]))
        if not torch.all(t == expect):
            raise AssertionError(f"it {it}: got {t[0]} expected {expect} active {active}")
        results.append((it, float(t[0]), active))
    # the replacement announces itself; one survivor proposes, the other keeps computing
    deadline = time.monotonic() + JOIN_S
    while not all(pg.get_peer_state(backend, [victim])):
        if time.monotonic() > deadline:
            raise AssertionError("the replacement never became ready")
        time.sleep(0.01)
    if rank == 0:
        resp = pg.activate_ranks(backend, [victim])
        if resp.status != pg.ProposalStatus.Applied:
            raise AssertionError(f"activate: {resp}")
    t = torch.full((4096,), float(rank + 1))
    dist.all_reduce(t)
    results.append(("rejoined", float(t[0]), pg.get_active_ranks(backend).tolist()))
    q.put(("ok", (rank, results)))
    dist.destroy_process_group()


def test_kill_rank_survivors_finish_and_replacement_joins():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    world, port, victim = 3, free_port(), 2
    procs = [_start(ctx, _ft_worker, q, r, world, port, victim, False) for r in range(world)]
    try:
        procs[victim].join(timeout=JOIN_S)
        assert procs[victim].exitcode == -signal.SIGKILL
        procs.append(_start(ctx, _ft_worker, q, victim, world, port, victim, True))
        got = _collect(q, procs, world)
    finally:
        _kill_all(procs)
    by = {g[0]: g for g in got}
    assert set(by) == {0, 1, "replacement"}
    for r in (0, 1):
        res = by[r][1]
        assert [x[0] for x in res[:6]] == list(range(6))
        assert res[0][1] == 6.0 and res[0][2] == [1, 1, 1]
        assert res[5][1] == 3.0 and res[5][2] == [1, 1, 0]  # survivors only
        assert res[6] == ("rejoined", 6.0, [1, 1, 1])
    assert by["replacement"][1:] == (6.0, [1, 1, 1])


# --------------------------------------------------------------------------------------
# proposals from any rank
# --------------------------------------------------------------------------------------


def _prop_worker(q, rank, world, port):
    if rank == 1:  # an engine of the caller's (pg.set_transfer_engine)
        from mooncake import pg
        from mooncake.engine import TransferEngine
        te = TransferEngine()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        pg.set_transfer_engine(te)
    pg = _init(rank, world, port)
    backend = dist.group.WORLD
    log = []

    def ar():
        t = torch.full((10,), float(rank + 1))
        dist.all_reduce(t)
        return float(t[0])

    log.append(ar())  # 6
    if rank == 1:  # not the store's host
        resp = pg.deactivate_ranks(backend, [2])
        log.append(resp.status.name)
    if rank == 2:
        try:
            ar()
            raise AssertionError("a deactivated rank's collective succeeded")
        except pg.RankDeactivatedError:
            log.append("deactivated")
        pg.join_group(backend)
        log.append(ar())
    else:
        log.append(ar())  # 3 over {0, 1}
        if rank == 0:
            deadline = time.monotonic() + JOIN_S
            while not all(pg.get_peer_state(backend, [2])):
                if time.monotonic() > deadline:
                    raise AssertionError("rank 2 never asked to join")
                time.sleep(0.01)
            log.append(pg.activate_ranks(backend, [2]).status.name)
        log.append(ar())  # 6 again
    log.append(pg.get_active_ranks(backend).tolist())
    q.put(("ok", (rank, log)))
    dist.destroy_process_group()


def test_deactivate_activate_from_any_rank():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    world, port = 3, free_port()
    procs = [_start(ctx, _prop_worker, q, r, world, port) for r in range(world)]
    try:
        got = dict(_collect(q, procs, world))
    finally:
        _kill_all(procs)
    assert got[0] == [6.0, 3.0, "Applied", 6.0, [1, 1, 1]]
    assert got[1] == [6.0, "Applied", 3.0, 6.0, [1, 1, 1]]
    assert got[2] == [6.0, "deactivated", 6.0, [1, 1, 1]]


def test_options_overloads():
    from mooncake import pg
    o = pg.MooncakeBackendOptions(4)
    assert (o.max_group_size, o.is_extension, o.auto_deactivate_on_failure) == (4, False, True)
    o = pg.MooncakeBackendOptions(4, True, False, False)
    assert (o.is_extension, o.auto_deactivate_on_failure, o.auto_sync_on_failure) == \
        (True, False, False)
    mirror = torch.zeros(3, dtype=torch.int32)
    o = pg.MooncakeBackendOptions(mirror, False)
    assert o.max_group_size == 3 and o.active_ranks is mirror
    o = pg.MooncakeBackendOptions(mirror, True, 5)
    assert o.max_group_size == 5 and o.is_extension
    with pytest.raises(TypeError):
        pg.MooncakeBackendOptions("x")
    with pytest.raises(TypeError):
        pg.MooncakeBackendOptions(torch.zeros(3))  # not int32
    assert "mooncake-cpu" in dist.Backend.backend_list


def test_create_cpu_backend_factory_directly():
    """Upstream's factory names: pg.createMooncakeCpuBackend(DistributedBackendOptions,
    MooncakeBackendOptions) builds the group without init_process_group (here two ranks
    on threads of one process, over one HashStore); pg.createMooncakeBackend (the
    accelerator backend) is refused with a clear message."""
    from mooncake import pg
    from torch._C._distributed_c10d import _DistributedBackendOptions
    store = dist.HashStore()
    out, errs = {}, []

    def rank_main(r):
        try:
            o = _DistributedBackendOptions()
            o.store = dist.PrefixStore("factory", store)
            o.group_rank, o.group_size = r, 2
            grp = pg.createMooncakeCpuBackend(o, pg.MooncakeBackendOptions(2, timeout=5.0))
            assert isinstance(grp, dist.ProcessGroup) and grp.getBackendName() == "mooncake-cpu"
            t = torch.full((5000,), float(r + 1))
            grp.allreduce([t]).wait()
            out[r] = (float(t[0]), pg.get_active_ranks(grp).tolist())
            grp.barrier().wait()
            grp.shutdown()
        except BaseException:
            errs.append(traceback.format_exc())

    ths = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(timeout=JOIN_S)
    assert not errs, errs[0]
    assert not any(t.is_alive() for t in ths)
    assert out == {0: (3.0, [1, 1]), 1: (3.0, [1, 1])}
    with pytest.raises(TypeError):
        pg.createMooncakeCpuBackend(_DistributedBackendOptions(), object())
    with pytest.raises(NotImplementedError, match="mooncake-cpu"):
        pg.createMooncakeBackend(_DistributedBackendOptions(), pg.MooncakeBackendOptions(2))
