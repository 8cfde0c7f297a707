"""The deployment guide's config keys reach the store the way clients pass them (issue
16 item 4). LMCache hands its YAML extra_config to setup(config: dict) as written:
``master_server_address`` and ``device_name``, where upstream's dict names are
``master_server_addr`` and ``rdma_devices``. The dict form reads the former as the
latter; when both are given, upstream's name wins. MooncakeConfig (the JSON file's
keys) reads it the other way round: the documented ``master_server_address`` wins over
``master_server_addr``. The master here is on a free port, never the default 50051, so
a key that does not arrive makes setup fail."""
import logging

from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import MooncakeDistributedStore

SEG = 16 << 20


def _setup(cluster, **keys):
    d = {"local_hostname": "127.0.0.1", "metadata_server": cluster.metadata,
         "global_segment_size": str(SEG), "local_buffer_size": "0", "protocol": "tcp"}
    d.update(keys)
    s = MooncakeDistributedStore()
    rc = s.setup(d)
    if rc == 0:
        s.close()
    return rc


def test_setup_dict_reads_master_server_address(cluster):
    assert _setup(cluster, master_server_address=cluster.addr, device_name="") == 0


def test_setup_dict_upstream_name_wins(cluster):
    assert _setup(cluster, master_server_addr=cluster.addr,
                  master_server_address="127.0.0.1:1") == 0
    # and the other way round: the alias does not override upstream's name
    assert _setup(cluster, master_server_addr="127.0.0.1:1",
                  master_server_address=cluster.addr) != 0


def test_mooncake_config_documented_key_wins(caplog):
    base = {"local_hostname": "h", "metadata_server": "P2PHANDSHAKE"}
    c = MooncakeConfig.from_dict(dict(base, master_server_addr="10.0.0.1:50051",
                                      rdma_devices="mlx5_0"))
    assert c.master_server_address == "10.0.0.1:50051" and c.device_name == "mlx5_0"
    with caplog.at_level(logging.WARNING, logger="mooncake.mooncake_config"):
        c = MooncakeConfig.from_dict(dict(base, master_server_address="10.0.0.2:50051",
                                          master_server_addr="10.0.0.1:50051"))
    assert c.master_server_address == "10.0.0.2:50051"
    assert "using 'master_server_address'" in caplog.text
    assert c.to_setup_dict()["master_server_addr"] == "10.0.0.2:50051"
