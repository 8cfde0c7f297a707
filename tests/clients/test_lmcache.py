"""LMCache's Mooncake remote backend against this package (lmcache==0.5.6 from PyPI,
installed by scripts/setup_clients.sh): its own MooncakestoreConnector, configured by an
LMCacheEngineConfig whose extra_config holds the deployment guide's keys as users write
them (``master_server_address``, ``local_buffer_size: 0``, ``use_exists_sync``,
``mooncake_prefer_local_alloc``, ...), on a master whose port is not the default: the
store only reaches it when the guide's key reaches setup (setup(config: dict) reads
``master_server_address`` as ``master_server_addr``). put, batched_put, exists,
exists_sync, batched_get of three full KV chunks and a partial last one, and a miss, in
both ``save_chunk_meta`` modes (False: zero-copy batch_put_from / batch_get_into; True:
metadata stored with the data, put_parts / batch_get_buffer). The client code runs in
a child process (tests/clients/lmcache_child.py)."""
import os

import pytest

from clients.conftest import HERE, client


@pytest.mark.parametrize("save_chunk_meta", [False, True])
def test_lmcache_mooncakestore_connector(cluster, run_child, save_chunk_meta):
    client("lmcache")
    rc, out = run_child([os.path.join(HERE, "lmcache_child.py"), cluster.addr,
                         cluster.metadata, str(int(save_chunk_meta))])
    assert rc == 0, out[-4000:]
    assert "LMCACHE-OK 4" in out, out[-4000:]
    assert f"master {cluster.addr}" in out, out[-4000:]
