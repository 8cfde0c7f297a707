"""One LMCache process for tests/clients/test_lmcache.py: LMCache's own
MooncakestoreConnector (lmcache/v1/storage_backend/connector/mooncakestore_connector.py)
built from an LMCacheEngineConfig whose extra_config is the deployment guide's, then
put / batched_get / exists of KV chunks through it, the last chunk partial (fewer tokens than
chunk_size). Run as: python lmcache_child.py MASTER_ADDR METADATA_URL SAVE_CHUNK_META
(0/1). Exits 0 and prints "LMCACHE-OK <n>" when every chunk came back equal."""
import asyncio
import sys

import torch

from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.connector.mooncakestore_connector import (
    MooncakestoreConnector)
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

CHUNK = 16          # tokens per chunk
LAYERS, HEADS, HEAD_DIM = 2, 2, 8


def main(master, metadata, save_chunk_meta):
    extra = {
        "local_hostname": "127.0.0.1",
        "metadata_server": metadata,
        "protocol": "tcp",
        "global_segment_size": 64 << 20,
        "master_server_address": master,      # the guide's key (not master_server_addr)
        "local_buffer_size": 0,
        "save_chunk_meta": save_chunk_meta,
        "use_exists_sync": True,
        "mooncake_prefer_local_alloc": True,
        "storage_root_dir": "",
        "transfer_timeout": 5,
    }
    config = LMCacheEngineConfig.from_dict({
        "chunk_size": CHUNK, "local_cpu": False, "max_local_cpu_size": 0.0625,
        "remote_url": f"mooncakestore://{master}/", "remote_serde": "naive",
        "save_unfull_chunk": True, "extra_config": extra,
    })
    meta = LMCacheMetadata(model_name="tiny", world_size=1, local_world_size=1,
                           worker_id=0, local_worker_id=0, kv_dtype=torch.float32,
                           kv_shape=(LAYERS, 2, CHUNK, HEADS, HEAD_DIM), chunk_size=CHUNK)
    backend = LocalCPUBackend(config, meta, dst_device="cpu")
    loop = asyncio.new_event_loop()
    conn = MooncakestoreConnector(loop, backend, config)

    # three full chunks and a partial last one of 5 tokens
    lengths = [CHUNK, CHUNK, CHUNK, 5]
    keys, objs = [], []
    for i, n in enumerate(lengths):
        key = CacheEngineKey(model_name="tiny", world_size=1, worker_id=0,
                             chunk_hash=1000 + i + 100 * int(save_chunk_meta),
                             dtype=torch.float32)
        shape = torch.Size([LAYERS, 2, n, HEADS * HEAD_DIM])
        obj = backend.allocate(shape, torch.float32, MemoryFormat.KV_2LTD)
        assert obj is not None, "LocalCPUBackend could not allocate"
        obj.tensor.copy_(torch.randn(shape))
        keys.append(key)
        objs.append(obj)

    run = loop.run_until_complete
    for k in keys:
        assert not conn.exists_sync(k)
    run(conn.batched_put(keys[:2], objs[:2]))
    for k, o in zip(keys[2:], objs[2:]):
        run(conn.put(k, o))
    for k in keys:
        assert conn.exists_sync(k), f"{k} missing after put"
        assert run(conn.exists(k))
    got = run(conn.batched_get(keys[:1])) + run(conn.batched_get(keys[1:]))
    for i, (o, g) in enumerate(zip(objs, got)):
        assert g is not None, f"chunk {i} not found"
        assert g.tensor.shape == o.tensor.shape, (i, g.tensor.shape, o.tensor.shape)
        assert torch.equal(g.tensor, o.tensor), f"chunk {i} differs"
    missing = CacheEngineKey(model_name="tiny", world_size=1, worker_id=0,
                             chunk_hash=999999, dtype=torch.float32)
    assert not conn.exists_sync(missing)
    assert run(conn.batched_get([missing])) == [None]
    for o in objs + got:
        o.ref_count_down()
    run(conn.close())
    print("LMCACHE-OK", len(keys), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] == "1")
