"""mooncake.pg: the fault-tolerant ``torch.distributed`` backend on CPU (``mooncake-cpu``).

Importing this module registers ``backend="mooncake-cpu"`` with
``torch.distributed.Backend.register_backend`` (a Python ``ProcessGroup`` subclass; no C++
torch extension, so no torch-version lock). Without torch the import still succeeds and
every call that needs torch raises ImportError saying so.

Data plane: ``mooncake._pg`` (C): one mailbox per rank in transfer-engine memory
(memfd: same-host peers write it with one memcpy, remote peers over TCP), collectives
and reductions in C. Control plane (this file): rendezvous and reconciliation through
the store torch hands the backend (MASTER_ADDR/MASTER_PORT, torchrun); no extra server.

Upstream: Mooncake PG ("Mooncake EP & Mooncake PG" docs): MooncakeBackendOptions,
get_active_ranks, get_peer_state, activate/recover/deactivate_ranks, join_group,
get_num_synced_ranks, set_host_ip, set_device_filter, set_transfer_engine. The
protocol is ours; docs/pg.md states the semantics.
"""

from __future__ import annotations

import enum
import json
import os
import time
import uuid

from . import _pg

__all__ = [
    "MooncakeBackendOptions",
    "ProposalStatus",
    "ProposalResponse",
    "get_active_ranks",
    "get_peer_state",
    "activate_ranks",
    "recover_ranks",
    "deactivate_ranks",
    "join_group",
    "sync_after_failure",
    "get_num_synced_ranks",
    "set_host_ip",
    "set_device_filter",
    "set_transfer_engine",
    "BACKEND_NAME",
    "createMooncakeCpuBackend",
    "createMooncakeBackend",
]

BACKEND_NAME = "mooncake-cpu"
DEFAULT_TIMEOUT_S = float(os.environ.get("MC_PG_TIMEOUT", "10"))

_host_ip = None
_device_filter = None
_engine = None

try:  # torch is optional at import time
    import torch as _torch
    import torch.distributed as _dist
except Exception as _e:  # pragma: no cover - exercised without torch
    _torch = None
    _dist = None
    _torch_error = _e
else:
    _torch_error = None


def _need_torch():
    if _torch is None:
        raise ImportError(
            f"mooncake.pg needs PyTorch (torch.distributed), which failed to import: "
            f"{_torch_error!r}"
        )


class ProposalStatus(enum.IntEnum):
    """Outcome of an activate/deactivate proposal."""

    Applied = 0  # the new membership was committed at a collective boundary
    NotReady = 1  # a rank to activate has not called join_group() yet
    Rejected = 2  # invalid ranks (outside the group's slots)
    Timeout = 3  # the active ranks did not reach a collective boundary in time


class ProposalResponse:
    """What activate_ranks / deactivate_ranks return."""

    __slots__ = ("status", "active_ranks", "epoch", "message")

    def __init__(self, status, active_ranks=(), epoch=0, message=""):
        self.status = ProposalStatus(status)
        self.active_ranks = list(active_ranks)
        self.epoch = epoch
        self.message = message

    def __bool__(self):
        return self.status == ProposalStatus.Applied

    def __repr__(self):
        return (
            f"ProposalResponse(status={self.status.name}, active_ranks={self.active_ranks}, "
            f"epoch={self.epoch})"
        )


class MooncakeBackendOptions:
    """Options for ``dist.init_process_group(backend="mooncake-cpu", pg_options=...)``.

    Overloads (upstream's):
      MooncakeBackendOptions(max_group_size[, is_extension[, auto_deactivate_on_failure,
                             auto_sync_on_failure]])
      MooncakeBackendOptions(active_ranks[, is_extension[, max_group_size]])
    ``active_ranks``: a contiguous int32 tensor of ``max_group_size`` entries that the
    backend keeps as a mirror of the committed membership (1 = active).
    ``timeout`` (seconds, keyword only): how long a peer may stay silent before it is
    reported (default: MC_PG_TIMEOUT or 10 s; the init_process_group timeout is not used,
    its default is 30 minutes).
    """

    def __init__(self, *args, **kw):
        self.max_group_size = -1
        self.is_extension = False
        self.auto_deactivate_on_failure = True
        self.auto_sync_on_failure = True
        self.active_ranks = None
        self.timeout = kw.pop("timeout", None)
        first = args[0] if args else kw.pop("max_group_size", kw.pop("active_ranks", None))
        rest = list(args[1:])
        if first is None:
            raise TypeError("MooncakeBackendOptions() needs max_group_size or active_ranks")
        if isinstance(first, bool) or not (isinstance(first, int) or hasattr(first, "dtype")):
            raise TypeError(
                "MooncakeBackendOptions(): first argument must be max_group_size (int) or "
                f"active_ranks (int32 tensor), not {type(first).__name__}"
            )
        names_int = ["is_extension", "auto_deactivate_on_failure", "auto_sync_on_failure"]
        names_tensor = ["is_extension", "max_group_size"]
        if isinstance(first, int):
            self.max_group_size = int(first)
            names = names_int
        else:
            _need_torch()
            if first.dtype != _torch.int32 or not first.is_contiguous():
                raise TypeError("MooncakeBackendOptions(): active_ranks must be a contiguous "
                                "int32 tensor")
            self.active_ranks = first
            names = names_tensor
        if len(rest) > len(names):
            raise TypeError(f"MooncakeBackendOptions() takes at most {len(names) + 1} "
                            f"positional arguments")
        if names is names_int and len(rest) == 2:
            raise TypeError("MooncakeBackendOptions(max_group_size, is_extension, "
                            "auto_deactivate_on_failure, auto_sync_on_failure): give both")
        for name, val in zip(names, rest):
            kw.setdefault(name, val)
        for name in ("is_extension", "auto_deactivate_on_failure", "auto_sync_on_failure"):
            if name in kw:
                setattr(self, name, bool(kw.pop(name)))
        if "max_group_size" in kw:
            self.max_group_size = int(kw.pop("max_group_size"))
        if kw:
            raise TypeError(f"MooncakeBackendOptions(): unexpected arguments {sorted(kw)}")
        if self.active_ranks is not None and self.max_group_size < 0:
            self.max_group_size = self.active_ranks.numel()
        if self.auto_sync_on_failure and not self.auto_deactivate_on_failure:
            # upstream: auto-sync requires auto-deactivation
            self.auto_sync_on_failure = False

    def __repr__(self):
        return (
            f"MooncakeBackendOptions(max_group_size={self.max_group_size}, "
            f"is_extension={self.is_extension}, "
            f"auto_deactivate_on_failure={self.auto_deactivate_on_failure}, "
            f"auto_sync_on_failure={self.auto_sync_on_failure})"
        )


def set_host_ip(host_ip: str) -> None:
    """The address this process's engine binds and publishes (call before
    init_process_group; default 127.0.0.1, or MC_PG_HOST)."""
    global _host_ip
    _host_ip = str(host_ip)


def set_device_filter(filters) -> None:
    """NIC filter for RDMA transports (kept for API compatibility; the CPU backend moves
    bytes over shared memory and TCP and ignores it)."""
    global _device_filter
    _device_filter = list(filters) if filters is not None else None


def set_transfer_engine(engine) -> None:
    """Use an existing mooncake.engine.TransferEngine (initialized) for every process
    group created afterwards instead of a private one. It must outlive the groups."""
    global _engine
    _engine = engine


# --------------------------------------------------------------------------------------
# dtype / op mapping
# --------------------------------------------------------------------------------------

_DT = None
_OPS = None


def _tables():
    global _DT, _OPS
    if _DT is None:
        t = _torch
        _DT = {
            t.float32: 0, t.float64: 1, t.float16: 2, t.bfloat16: 3, t.int8: 4,
            t.uint8: 5, t.int16: 6, t.int32: 7, t.int64: 8, t.bool: 9,
        }
        R = _dist.ReduceOp
        _OPS = {R.SUM: 0, R.PRODUCT: 1, R.MIN: 2, R.MAX: 3, R.BAND: 5, R.BOR: 6, R.BXOR: 7}
        if hasattr(R, "AVG"):
            _OPS[R.AVG] = 4
    return _DT, _OPS


def _dtype_code(t):
    code = _tables()[0].get(t.dtype)
    if code is None:
        raise TypeError(f"mooncake-cpu: unsupported dtype {t.dtype}")
    return code


def _op_code(op):
    ops = _tables()[1]
    red = getattr(op, "op", op)
    for k, v in ops.items():
        if k == red:
            return v
    raise ValueError(f"mooncake-cpu: unsupported reduce op {op}")


_AVG = 4   # the op code of ReduceOp.AVG in _OPS


def _red_dtype_code(t, op, call):
    """The dtype code of contiguous tensor t reduced with op code op by collective call;
    ValueError (before anything is sent) for AVG on a non-floating dtype: AVG divides,
    which is defined here for floating point only (gloo has no AVG; the C reduction
    refuses the pair with a generic error)."""
    dt = _dtype_code(t)
    if op == _AVG and not t.is_floating_point():
        raise ValueError(f"mooncake-cpu: {call} with ReduceOp.AVG needs a floating point "
                         f"tensor, got {t.dtype} (use SUM and divide)")
    return dt


def _check_cpu(t):
    if t.device.type != "cpu":
        raise ValueError(f"mooncake-cpu: tensors must be on the CPU, got {t.device}")
    if t.is_sparse:
        raise ValueError("mooncake-cpu: sparse tensors are not supported")


class _Flat:
    """A contiguous view of a tensor (a copy when it is not contiguous, copied back)."""

    __slots__ = ("t", "c")

    def __init__(self, t, read=True):
        _check_cpu(t)
        self.t = t
        if t.is_contiguous():
            self.c = t
        else:
            self.c = t.contiguous() if read else _torch.empty_like(t, memory_format=_torch.contiguous_format)

    @property
    def ptr(self):
        return self.c.data_ptr()

    @property
    def nbytes(self):
        return self.c.numel() * self.c.element_size()

    def done(self):
        if self.c is not self.t:
            self.t.copy_(self.c)


# --------------------------------------------------------------------------------------
# The group: control plane
# --------------------------------------------------------------------------------------


class RankDeactivatedError(RuntimeError):
    """This rank is not in the group's committed membership (call join_group())."""


def _slot_bytes(G):
    env = os.environ.get("MC_PG_SLOT_BYTES")
    if env:
        v = int(env)
    else:
        v = 256 << 10
    return max(4096, (v + 4095) // 4096 * 4096)


class _Group:
    def __init__(self, store, rank, size, opts, timeout_s):
        self.store = store
        self.rank = rank
        self.size = size
        self.opts = opts
        G = opts.max_group_size if opts.max_group_size > 0 else size
        if G < size:
            raise ValueError(f"max_group_size {G} is smaller than the group size {size}")
        if G > _pg.MAX_GROUP:
            raise ValueError(f"mooncake-cpu supports at most {_pg.MAX_GROUP} slots")
        self.G = G
        self.timeout_s = timeout_s
        # how long a rank that is alive (its engine answers probes) but absent from a
        # reconciliation is waited for before it is deactivated
        self.grace_s = float(os.environ.get("MC_PG_ALIVE_GRACE", max(10 * timeout_s, 30.0)))
        host = _host_ip or os.environ.get("MC_PG_HOST", "127.0.0.1")
        self.comm = _pg.Comm(rank, G, _slot_bytes(G), int(timeout_s * 1000), _engine, host)
        self.inc = uuid.uuid4().hex
        self.me = {"seg": self.comm.segment_name, "base": self.comm.base, "inc": self.inc}
        self.segs = {}  # slot -> me-dict of the incarnation we connected to
        self.epoch = 0
        self.seq = 0
        self.active = {rank}
        self.props_applied = 0
        self.jids = {}  # slot -> join request consumed by the current view
        self.joined = False
        self.deactivated = False
        self.pending_failure = None
        store.set(f"mc/seg/{rank}", json.dumps(self.me))
        if opts.is_extension:
            self._apply_view_local({rank}, 0)
        else:
            keys = [f"mc/seg/{r}" for r in range(size)]
            store.wait(keys)
            view = {"epoch": 1, "seq": 0, "active": list(range(size)), "rerun": False,
                    "props": 0, "failed": [], "jids": {},
                    "segs": {str(r): json.loads(store.get(f"mc/seg/{r}")) for r in range(size)}}
            store.compare_set("mc/view/1", "", json.dumps(view))
            self._adopt(json.loads(store.get("mc/view/1")))
            self.joined = True

    # ---- views ----

    def _apply_view_local(self, active, epoch):
        mask = 0
        for r in active:
            mask |= 1 << r
        self.active = set(active)
        self.epoch = epoch
        self.comm.set_view(epoch, mask)
        m = self.opts.active_ranks
        if m is not None:
            vals = [1 if i in self.active else 0 for i in range(m.numel())]
            m.copy_(_torch.tensor(vals, dtype=_torch.int32))

    def _adopt(self, view):
        for k, info in view["segs"].items():
            slot = int(k)
            if slot == self.rank:
                continue
            if self.segs.get(slot) != info:
                rc = self.comm.set_peer(slot, info["seg"], int(info["base"]))
                if rc != 0:
                    raise RuntimeError(f"mooncake-cpu: cannot open rank {slot}'s segment "
                                       f"{info['seg']} (status {rc})")
                self.segs[slot] = info
        self.props_applied = max(self.props_applied, view["props"])
        self.jids = dict(view.get("jids", {}))
        me_in = self.rank in view["active"] and view["segs"].get(str(self.rank), {}).get(
            "inc") == self.inc
        self._apply_view_local(set(view["active"]) if me_in else {self.rank}, view["epoch"])
        if not me_in:
            self.deactivated = self.joined
            self.joined = False
        return view

    def _get_view(self, epoch):
        key = f"mc/view/{epoch}"
        if not self.store.check([key]):
            return None
        return json.loads(self.store.get(key))

    def latest_view(self):
        e = max(self.epoch, 1)
        try:
            e = max(e, int(self.store.get("mc/latest"))) if self.store.check(["mc/latest"]) else e
        except ValueError:
            pass
        v = self._get_view(e)
        while True:
            n = self._get_view(e + 1)
            if n is None:
                return v
            v, e = n, e + 1

    # ---- reconciliation ----

    def _ready(self, r):
        """Slot r's pending join request ({seg, base, inc, jid}), or None. Keys are never
        deleted (a reader could block on a vanished key); a request is consumed once a
        view records its jid."""
        key = f"mc/ready/{r}"
        if not self.store.check([key]):
            return None
        ready = json.loads(self.store.get(key))
        return None if self.jids.get(str(r)) == ready.get("jid") else ready

    def _proposals(self, upto):
        out = []
        for i in range(self.props_applied + 1, upto + 1):
            key = f"mc/prop/{i}"
            if self.store.check([key]):
                out.append(json.loads(self.store.get(key)))
        return out

    def _decide(self, e, t0):
        probed = {}
        active = sorted(self.active)
        while True:
            d = self._get_view(e + 1)
            if d is not None:
                return d
            posts = {}
            for r in active:
                key = f"mc/post/{e}/{r}"
                if self.store.check([key]):
                    posts[r] = json.loads(self.store.get(key))
            suspects = set()
            for p in posts.values():
                suspects |= set(p["suspects"])
            elapsed = time.monotonic() - t0
            # ranks that have not posted: suspects at once, the others after a timeout;
            # a rank whose engine refuses the probe is dead; one that answers is alive and
            # gets until the grace period (it may be busy outside any collective)
            unposted = set(active) - set(posts)
            to_probe = unposted if elapsed > self.timeout_s else unposted & suspects
            for r in sorted(to_probe):
                last = probed.get(r)
                if last is None or (last[0] and time.monotonic() - last[1] > self.timeout_s):
                    probed[r] = (self.comm.probe(r), time.monotonic())
            dead = {r for r in unposted if r in probed and not probed[r][0]}
            missing = unposted - dead
            if missing and elapsed < (self.timeout_s if not any(
                    r in probed for r in missing) else self.grace_s):
                time.sleep(0.001)
                continue
            # a proposer is not inside a collective: its post never forces a rerun
            incomplete = any(not p["complete"] and not p.get("proposer")
                             for p in posts.values())
            if incomplete:
                dead |= missing  # they cannot have finished: nobody closed this collective
            seq = max(p["seq"] for p in posts.values())
            failed = sorted(dead)
            new_active = set(active)
            if self.opts.auto_deactivate_on_failure:
                new_active -= dead
            nprops = int(self.store.add("mc/prop/count", 0))
            jids = dict(self.jids)
            segs = {str(r): self.segs.get(r, self.me if r == self.rank else None)
                    for r in new_active}
            for p in self._proposals(nprops):
                for r in p["ranks"]:
                    if p["kind"] == "deactivate":
                        new_active.discard(r)
                    elif p["kind"] == "activate" and r not in new_active:
                        ready = self._ready(r)
                        if ready is not None:
                            new_active.add(r)
                            jids[str(r)] = ready.pop("jid")
                            segs[str(r)] = ready
            segs = {k: v for k, v in segs.items() if int(k) in new_active and v is not None}
            # rerun when nobody closed the collective, unless the failed ranks stay members
            # (auto_deactivate_on_failure=False: the collective fails instead)
            rerun = incomplete and (self.opts.auto_deactivate_on_failure or not dead)
            view = {"epoch": e + 1, "seq": seq, "active": sorted(new_active), "rerun": rerun,
                    "incomplete": incomplete, "props": nprops, "failed": failed, "segs": segs,
                    "jids": jids}
            mine = json.dumps(view)
            won = self.store.compare_set(f"mc/view/{e + 1}", "", mine)
            won = won.decode() if isinstance(won, bytes) else won
            d = json.loads(won)
            if won == mine:  # this rank's decision was kept
                self.store.set("mc/latest", str(e + 1))
            return d

    def reconcile(self, seq, complete, suspects, proposer=False):
        """Post this rank's observation for the current epoch, wait for (or make) the
        decision, adopt it. Returns the decision."""
        e = self.epoch
        d = self._get_view(e + 1)
        if d is None:
            self.comm.request_sync(seq)
            post = {"seq": seq, "complete": bool(complete), "suspects": sorted(suspects),
                    "proposer": proposer}
            self.store.set(f"mc/post/{e}/{self.rank}", json.dumps(post))
            d = self._decide(e, time.monotonic())
        # a view can only be adopted once every earlier one was: chase to the newest
        self._adopt(d)
        nxt = self._get_view(d["epoch"] + 1)
        while nxt is not None and self.rank in nxt["active"]:
            d = nxt
            self._adopt(d)
            nxt = self._get_view(d["epoch"] + 1)
        return d

    # ---- running a collective ----

    def run(self, name, fn):
        """fn(seq, rerun) -> (status, complete, suspects). Handles reconciliation."""
        if self.deactivated:
            raise RankDeactivatedError(
                f"mooncake-cpu: rank {self.rank} was deactivated; call pg.join_group()")
        if self.pending_failure is not None:
            raise RuntimeError(self.pending_failure)
        self.seq += 1
        seq = self.seq
        rerun = 0
        while True:
            st, complete, suspects = fn(seq, rerun)
            if st == _pg.DONE:
                return
            sus = [i for i in range(self.G) if (suspects >> i) & 1]
            if not self.opts.auto_sync_on_failure and st == _pg.FAILED:
                self.pending_failure = (
                    f"mooncake-cpu: {name} #{seq} failed: ranks {sus} did not answer; call "
                    f"pg.sync_after_failure() (auto_sync_on_failure=False)")
                self._pending = (seq, complete, sus)
                raise RuntimeError(self.pending_failure)
            d = self.reconcile(seq, complete, sus)
            if self.deactivated or not self.joined:
                raise RankDeactivatedError(
                    f"mooncake-cpu: rank {self.rank} was deactivated during {name} #{seq}")
            if d["seq"] < seq or (d["seq"] == seq and d["rerun"]):
                rerun = 1  # restart this collective under the new view
                continue
            if complete:
                return  # every peer had this collective's data
            raise RuntimeError(f"mooncake-cpu: {name} #{seq} failed: ranks {d['failed']} "
                               f"did not answer"
                               + (" (auto_deactivate_on_failure=False)"
                                  if not self.opts.auto_deactivate_on_failure else ""))

    def propose(self, kind, ranks):
        ranks = sorted({int(r) for r in ranks})
        if any(r < 0 or r >= self.G for r in ranks):
            return ProposalResponse(ProposalStatus.Rejected, sorted(self.active), self.epoch,
                                    f"ranks must be in 0..{self.G - 1}")
        if self.deactivated or not self.joined:
            return ProposalResponse(ProposalStatus.Rejected, sorted(self.active), self.epoch,
                                    "this rank is not an active member")
        want_active = kind == "activate"
        if all((r in self.active) == want_active for r in ranks):
            return ProposalResponse(ProposalStatus.Applied, sorted(self.active), self.epoch)
        if want_active:
            missing = [r for r in ranks if r not in self.active and self._ready(r) is None]
            if missing:
                return ProposalResponse(ProposalStatus.NotReady, sorted(self.active),
                                        self.epoch, f"ranks {missing} have not joined")
        n = int(self.store.add("mc/prop/count", 1))
        self.store.set(f"mc/prop/{n}", json.dumps({"kind": kind, "ranks": ranks}))
        deadline = time.monotonic() + max(self.timeout_s, 1.0) * 3
        while True:
            d = self.reconcile(self.seq + 1, False, [], proposer=True)
            if self.props_applied >= n:
                break
            if time.monotonic() > deadline:
                return ProposalResponse(ProposalStatus.Timeout, sorted(self.active), self.epoch)
        ok = all((r in self.active) == want_active for r in ranks)
        return ProposalResponse(ProposalStatus.Applied if ok else ProposalStatus.NotReady,
                                sorted(self.active), self.epoch)

    def join(self, timeout_s):
        if self.joined:
            return
        jid = uuid.uuid4().hex
        self.store.set(f"mc/ready/{self.rank}", json.dumps(dict(self.me, jid=jid)))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            v = self.latest_view()
            if v is not None and self.rank in v["active"] and v.get("jids", {}).get(
                    str(self.rank)) == jid:
                self._adopt(v)
                self.joined = True
                self.deactivated = False
                self.seq = v["seq"] - 1 if v["rerun"] else v["seq"]
                return
            time.sleep(0.002)
        raise TimeoutError(f"mooncake-cpu: rank {self.rank} was not activated within "
                           f"{timeout_s} s (an active rank must call pg.activate_ranks)")

    def sync_after_failure(self):
        pend = getattr(self, "_pending", None)
        self.pending_failure = None
        self._pending = None
        if pend is None:
            return
        seq, complete, sus = pend
        self.reconcile(seq, complete, sus)

    def close(self):
        if self.comm is not None:
            self.comm.close()
            self.comm = None


# --------------------------------------------------------------------------------------
# The ProcessGroup
# --------------------------------------------------------------------------------------

_PG_CLASS = None


def _make_classes():
    global _PG_CLASS
    if _PG_CLASS is not None:
        return _PG_CLASS
    _need_torch()
    from torch._C._distributed_c10d import _create_work_from_future

    def done(result=None):
        f = _torch.futures.Future()
        f.set_result(result)
        return _create_work_from_future(f)

    class _P2PWork(_dist.Work):
        def __init__(self, g, op_id, flat, what):
            super().__init__()
            self._g, self._id, self._flat, self._what = g, op_id, flat, what
            self._state = None

        def _finish(self, rc):
            self._state = rc
            if rc == 0:
                self._flat.done()

        def wait(self, timeout=None):
            if self._state is None:
                ms = -1
                if timeout is not None:
                    ms = int(timeout.total_seconds() * 1000) if hasattr(
                        timeout, "total_seconds") else int(timeout)
                    if ms <= 0:
                        ms = -1
                rc = self._g.comm.p2p_wait(self._id, ms)
                if rc == 1:
                    raise TimeoutError(f"mooncake-cpu: {self._what} timed out")
                self._finish(rc)
            if self._state != 0:
                raise RuntimeError(f"mooncake-cpu: {self._what} failed (peer deactivated "
                                   f"or unreachable)")
            return True

        def is_completed(self):
            if self._state is None:
                rc = self._g.comm.p2p_wait(self._id, 0)
                if rc != 1:
                    self._finish(rc)
            return self._state is not None

        def is_success(self):
            return self._state == 0

        def get_future(self):
            f = _torch.futures.Future()
            self.wait()
            f.set_result([self._flat.t])
            return f

    class MooncakeCpuProcessGroup(_dist.ProcessGroup):
        """``mooncake-cpu``: collectives on CPU tensors over mooncake._pg."""

        def __init__(self, store, rank, size, opts, timeout_s):
            super().__init__(rank, size)
            self._g = _Group(store, rank, size, opts, timeout_s)
            self._rank = rank
            self._size = size

        def getBackendName(self):
            return BACKEND_NAME

        @property
        def mc_group(self):
            return self._g

        def _ptrs(self, tensors):
            v = [0] * self._g.G
            for i, t in enumerate(tensors):
                v[i] = t.data_ptr() if t is not None else 0
            return v

        # ---- collectives ----

        def allreduce(self, tensors, opts=None):
            op = _op_code(opts.reduceOp) if opts is not None else 0
            g = self._g
            for t in tensors:
                f = _Flat(t)
                dt = _red_dtype_code(f.c, op, "all_reduce")
                n = f.c.numel()
                g.run("all_reduce", lambda s, r: g.comm.allreduce(s, r, f.ptr, n, dt, op))
                f.done()
            return done(tensors)

        def allreduce_coalesced(self, tensors, opts=None):
            return self.allreduce(tensors, opts)

        def broadcast(self, tensors, opts=None):
            root = opts.rootRank if opts is not None else 0
            g = self._g
            for t in tensors:
                f = _Flat(t)
                g.run("broadcast", lambda s, r: g.comm.broadcast(s, f.ptr, f.nbytes, root))
                f.done()
            return done(tensors)

        def allgather(self, output_lists, inputs, opts=None):
            g = self._g
            for outs, t in zip(output_lists, inputs):
                f = _Flat(t)
                fo = [_Flat(o, read=False) for o in outs]
                for o in fo:
                    if o.nbytes != f.nbytes:
                        raise ValueError("all_gather: output tensors must match the input size")
                ptrs = [0] * g.G
                for i, o in enumerate(fo):
                    if i < g.G and i in g.active:
                        ptrs[i] = o.ptr
                g.run("all_gather", lambda s, r: g.comm.allgather(s, ptrs, f.ptr, f.nbytes))
                for o in fo:
                    o.done()
            return done(output_lists)

        def all_gather_single(self, output, input, opts=None):
            g = self._g
            fo = _Flat(output, read=False)
            f = _Flat(input)
            nb = f.nbytes
            if fo.nbytes != nb * self._size:
                raise ValueError("all_gather_into_tensor: output must be world_size x input")
            ptrs = [0] * g.G
            for i in range(self._size):
                if i in g.active:
                    ptrs[i] = fo.ptr + i * nb
            g.run("all_gather_into_tensor",
                  lambda s, r: g.comm.allgather(s, ptrs, f.ptr, nb))
            fo.done()
            return done([output])

        _allgather_base = all_gather_single

        def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
            for o, i in zip(outputs, inputs):
                self.all_gather_single(o, i, opts)
            return done(outputs)

        def reduce_scatter(self, outputs, input_lists, opts=None):
            op = _op_code(opts.reduceOp) if opts is not None else 0
            g = self._g
            for out, ins in zip(outputs, input_lists):
                fo = _Flat(out)
                fi = [_Flat(x) for x in ins]
                dt = _red_dtype_code(fo.c, op, "reduce_scatter")
                n = fo.c.numel()
                ptrs = [0] * g.G
                for i, x in enumerate(fi):
                    if x.c.numel() != n:
                        raise ValueError("reduce_scatter: input tensors must match the output")
                    if i < g.G:
                        ptrs[i] = x.ptr
                g.run("reduce_scatter",
                      lambda s, r: g.comm.reduce_scatter(s, fo.ptr, ptrs, n, dt, op))
                fo.done()
            return done(outputs)

        def reduce_scatter_single(self, output, input, opts=None):
            op = _op_code(opts.reduceOp) if opts is not None else 0
            g = self._g
            fo = _Flat(output)
            fi = _Flat(input)
            n = fo.c.numel()
            if fi.c.numel() != n * self._size:
                raise ValueError("reduce_scatter_tensor: input must be world_size x output")
            dt = _red_dtype_code(fo.c, op, "reduce_scatter_tensor")
            nb = fo.nbytes
            ptrs = [0] * g.G
            for i in range(self._size):
                ptrs[i] = fi.ptr + i * nb
            g.run("reduce_scatter_tensor",
                  lambda s, r: g.comm.reduce_scatter(s, fo.ptr, ptrs, n, dt, op))
            fo.done()
            return done([output])

        _reduce_scatter_base = reduce_scatter_single

        def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
            for o, i in zip(outputs, inputs):
                self.reduce_scatter_single(o, i, opts)
            return done(outputs)

        def reduce(self, tensors, opts=None):
            op = _op_code(opts.reduceOp) if opts is not None else 0
            root = opts.rootRank if opts is not None else 0
            g = self._g
            for t in tensors:
                f = _Flat(t)
                dt = _red_dtype_code(f.c, op, "reduce")
                n = f.c.numel()
                g.run("reduce", lambda s, r: g.comm.reduce(s, r, f.ptr, n, dt, op, root))
                f.done()
            return done(tensors)

        def gather(self, output_lists, inputs, opts=None):
            root = opts.rootRank if opts is not None else 0
            g = self._g
            f = _Flat(inputs[0])
            outs = output_lists[0] if output_lists else []
            fo = [_Flat(o, read=False) for o in outs] if self._rank == root else []
            ptrs = None
            if self._rank == root:
                ptrs = [0] * g.G
                for i, o in enumerate(fo):
                    if o.nbytes != f.nbytes:
                        raise ValueError("gather: output tensors must match the input size")
                    ptrs[i] = o.ptr
            g.run("gather", lambda s, r: g.comm.gather(s, ptrs, f.ptr, f.nbytes, root))
            for o in fo:
                o.done()
            return done(output_lists)

        def scatter(self, outputs, input_lists, opts=None):
            root = opts.rootRank if opts is not None else 0
            g = self._g
            fo = _Flat(outputs[0], read=False)
            ins = input_lists[0] if input_lists else []
            fi = [_Flat(x) for x in ins] if self._rank == root else []
            ptrs = None
            if self._rank == root:
                ptrs = [0] * g.G
                for i, x in enumerate(fi):
                    if x.nbytes != fo.nbytes:
                        raise ValueError("scatter: input tensors must match the output size")
                    ptrs[i] = x.ptr
            g.run("scatter", lambda s, r: g.comm.scatter(s, fo.ptr, ptrs, fo.nbytes, root))
            fo.done()
            return done(outputs)

        def alltoall(self, outputs, inputs, opts=None):
            g = self._g
            fo = [_Flat(o, read=False) for o in outputs]
            fi = [_Flat(x) for x in inputs]
            op_, ol, ip, il = ([0] * g.G for _ in range(4))
            for i in range(min(len(fo), g.G)):
                op_[i], ol[i] = fo[i].ptr, fo[i].nbytes
            for i in range(min(len(fi), g.G)):
                ip[i], il[i] = fi[i].ptr, fi[i].nbytes
            g.run("all_to_all", lambda s, r: g.comm.alltoall(s, op_, ol, ip, il))
            for o in fo:
                o.done()
            return done(outputs)

        def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                              opts=None):
            g = self._g
            n = self._size
            fo = _Flat(output, read=False)
            fi = _Flat(input)
            row_o = fo.nbytes // max(output.shape[0], 1) if output.dim() else fo.nbytes
            row_i = fi.nbytes // max(input.shape[0], 1) if input.dim() else fi.nbytes
            if not output_split_sizes:
                output_split_sizes = [output.shape[0] // n] * n
            if not input_split_sizes:
                input_split_sizes = [input.shape[0] // n] * n
            op_, ol, ip, il = ([0] * g.G for _ in range(4))
            off = 0
            for i, k in enumerate(output_split_sizes):
                op_[i], ol[i] = fo.ptr + off, k * row_o
                off += k * row_o
            off = 0
            for i, k in enumerate(input_split_sizes):
                ip[i], il[i] = fi.ptr + off, k * row_i
                off += k * row_i
            g.run("all_to_all_single", lambda s, r: g.comm.alltoall(s, op_, ol, ip, il))
            fo.done()
            return done([output])

        alltoall_base = all_to_all_single

        def barrier(self, opts=None):
            g = self._g
            g.run("barrier", lambda s, r: g.comm.barrier(s))
            return done(None)

        def monitored_barrier(self, opts=None, *a, **k):
            return self.barrier(opts)

        # ---- point-to-point ----

        def _p2p(self, send, tensors, peer, tag):
            g = self._g
            if len(tensors) != 1:
                raise ValueError("mooncake-cpu: point-to-point takes one tensor")
            f = _Flat(tensors[0], read=send)
            op_id = g.comm.p2p_post(1 if send else 0, int(peer), int(tag), f.ptr, f.nbytes)
            what = f"{'send to' if send else 'recv from'} rank {peer} (tag {tag})"
            if op_id < 0:
                raise RuntimeError(f"mooncake-cpu: {what}: the rank is not active")
            return _P2PWork(g, op_id, f, what)

        def send(self, tensors, dst, tag=0):
            return self._p2p(True, tensors, dst, tag)

        def recv(self, tensors, src, tag=0):
            return self._p2p(False, tensors, src, tag)

        def recv_anysource(self, tensors, tag=0):
            raise RuntimeError("mooncake-cpu: recv without src (any source) is not "
                               "supported; name the source rank")

        def shutdown(self):
            self._g.close()

        def abort(self):
            self._g.close()

    _PG_CLASS = MooncakeCpuProcessGroup
    return _PG_CLASS


def createMooncakeCpuBackend(dist_opts, backend_options=None):
    """The factory torch calls for ``backend="mooncake-cpu"`` (upstream's name; upstream
    exposes it from its compiled module as well). ``dist_opts``: torch's
    ``DistributedBackendOptions`` (or any object with ``store``, ``group_rank`` and
    ``group_size``); ``backend_options``: a MooncakeBackendOptions or None. Returns the
    ProcessGroup (a ``torch.distributed.ProcessGroup`` subclass), ready to use directly or
    to hand to torch. Rendezvous happens here, through ``dist_opts.store``: every rank of
    the group must call it."""
    if backend_options is not None and not isinstance(backend_options,
                                                      MooncakeBackendOptions):
        raise TypeError(f"mooncake-cpu: pg_options must be pg.MooncakeBackendOptions, not "
                        f"{type(backend_options).__name__}")
    cls = _make_classes()
    opts = backend_options if backend_options is not None else MooncakeBackendOptions(-1)
    timeout_s = opts.timeout if opts.timeout is not None else DEFAULT_TIMEOUT_S
    return cls(dist_opts.store, int(dist_opts.group_rank), int(dist_opts.group_size), opts,
               float(timeout_s))


_create_backend = createMooncakeCpuBackend


def createMooncakeBackend(dist_opts=None, backend_options=None):
    """Upstream's factory for the accelerator backend (``mooncake``): not built here (no
    GPU transport); refused rather than silently run on the CPU."""
    raise NotImplementedError(
        "mooncake.pg: the accelerator backend 'mooncake' is not part of this build; use "
        "backend='mooncake-cpu' (CPU tensors)")


def _register():
    if _dist is None or not _dist.is_available():
        return
    B = _dist.Backend
    if BACKEND_NAME.upper() in getattr(B, "_plugins", {}):
        return
    B.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu"])


_register()


# --------------------------------------------------------------------------------------
# Utility API (upstream names)
# --------------------------------------------------------------------------------------


def _group_of(backend):
    _need_torch()
    obj = backend
    if obj is None:
        obj = _dist.group.WORLD
    if isinstance(obj, _Group):
        return obj
    g = getattr(obj, "mc_group", None)
    if isinstance(g, _Group):
        return g
    if isinstance(obj, _dist.ProcessGroup):
        try:
            b = obj._get_backend(_torch.device("cpu"))
        except Exception:
            b = None
        g = getattr(b, "mc_group", None)
        if isinstance(g, _Group):
            return g
    raise TypeError(f"not a mooncake-cpu process group: {obj!r}")


def get_active_ranks(backend=None):
    """int32 tensor of max_group_size entries: 1 where the slot is in the committed
    membership as this rank sees it (the options' active_ranks mirror when given)."""
    g = _group_of(backend)
    if g.opts.active_ranks is not None:
        return g.opts.active_ranks
    return _torch.tensor([1 if i in g.active else 0 for i in range(g.G)], dtype=_torch.int32)


def get_peer_state(backend, ranks):
    """For each rank: True when it is active or has called join_group() and waits for
    activation. A store lookup; no collective."""
    g = _group_of(backend)
    return [int(r) in g.active or g._ready(int(r)) is not None for r in ranks]


def get_num_synced_ranks(backend=None):
    """Slots that could be active after the next proposal: active ones plus joiners."""
    g = _group_of(backend)
    return sum(1 for ok in get_peer_state(g, range(g.G)) if ok)


def activate_ranks(backend, ranks):
    """Propose activating `ranks` (they must have called join_group()); applied by every
    member at the same collective boundary. One call from any active rank is enough;
    blocks until the active ranks reach that boundary. Returns a ProposalResponse."""
    return _group_of(backend).propose("activate", ranks)


def recover_ranks(backend, ranks):
    """Alias of activate_ranks (upstream compatibility)."""
    return activate_ranks(backend, ranks)


def deactivate_ranks(backend, ranks):
    """Propose deactivating `ranks`; applied at the same collective boundary by every
    member. Returns a ProposalResponse."""
    return _group_of(backend).propose("deactivate", ranks)


def join_group(backend=None, timeout=None):
    """On a rank started with is_extension=True (or one that was deactivated): announce
    readiness and block until an activation that includes this rank is committed. The
    next collective then includes this rank."""
    g = _group_of(backend)
    g.join(float(timeout) if timeout is not None else max(300.0, g.timeout_s * 10))


def sync_after_failure(backend=None):
    """With auto_sync_on_failure=False: reconcile after a failed collective (report,
    wait for the decision, adopt the new membership)."""
    _group_of(backend).sync_after_failure()
