"""mooncake.mooncake_config.MooncakeConfig: files, environment, size strings, booleans,
validation (behaviour of upstream mooncake-wheel/mooncake/mooncake_config.py)."""
import json
import logging

import pytest

from mooncake import mooncake_config as cfgmod
from mooncake.mooncake_config import (DEFAULT_GLOBAL_SEGMENT_SIZE, DEFAULT_LOCAL_BUFFER_SIZE,
                                      MooncakeConfig, _parse_bool, _parse_segment_size)

GiB = 1024 ** 3

REQUIRED = {
    "local_hostname": "localhost",
    "metadata_server": "localhost:8080",
    "master_server_address": "localhost:8081",
}
FULL = {
    **REQUIRED,
    "global_segment_size": 3355443200,
    "local_buffer_size": 1073741824,
    "protocol": "tcp",
    "device_name": "eth0",
    "enable_ssd_offload": True,
    "ssd_offload_path": "/nvme/mooncake_offload",
    "tenant_id": "tenant-a",
    "enable_client_http_server": True,
    "client_http_port": 19300,
}
ENV_VARS = [
    "MOONCAKE_CONFIG_PATH", "MOONCAKE_MASTER", "MOONCAKE_LOCAL_HOSTNAME",
    "MOONCAKE_TE_META_DATA_SERVER", "MOONCAKE_GLOBAL_SEGMENT_SIZE",
    "MOONCAKE_LOCAL_BUFFER_SIZE", "MOONCAKE_PROTOCOL", "MOONCAKE_DEVICE",
    "MOONCAKE_OFFLOAD_ENABLED", "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "MOONCAKE_TENANT_ID",
    "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "MOONCAKE_CLIENT_HTTP_PORT",
]


@pytest.fixture
def clean_env(monkeypatch):
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture
def write_config(tmp_path):
    path = tmp_path / "config.json"

    def write(data):
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return str(path)
    return write


def make(**overrides):
    kwargs = dict(local_hostname="localhost", metadata_server="localhost:8080",
                  global_segment_size=DEFAULT_GLOBAL_SEGMENT_SIZE,
                  local_buffer_size=DEFAULT_LOCAL_BUFFER_SIZE, protocol="tcp",
                  device_name="", master_server_address="localhost:8081")
    kwargs.update(overrides)
    return MooncakeConfig(**kwargs)


# ---------------------------------------------------------------------------- from_file
def test_from_file_reads_every_field(write_config):
    c = MooncakeConfig.from_file(write_config(FULL))
    assert (c.local_hostname, c.metadata_server, c.master_server_address) == (
        "localhost", "localhost:8080", "localhost:8081")
    assert c.global_segment_size == 3355443200 and c.local_buffer_size == 1073741824
    assert (c.protocol, c.device_name) == ("tcp", "eth0")
    assert c.enable_ssd_offload is True and c.ssd_offload_path == "/nvme/mooncake_offload"
    assert c.tenant_id == "tenant-a"
    assert c.enable_client_http_server is True and c.client_http_port == 19300


def test_from_file_defaults(write_config):
    c = MooncakeConfig.from_file(write_config(REQUIRED))
    assert c.global_segment_size == DEFAULT_GLOBAL_SEGMENT_SIZE == 3355443200
    assert c.local_buffer_size == DEFAULT_LOCAL_BUFFER_SIZE == 1073741824
    assert (c.protocol, c.device_name, c.tenant_id, c.ssd_offload_path) == (
        "tcp", "", "default", "")
    assert c.enable_ssd_offload is False and c.enable_client_http_server is False
    assert c.client_http_port == 9300


def test_from_file_nulls_take_defaults(write_config):
    c = MooncakeConfig.from_file(write_config(
        {**FULL, "tenant_id": None, "ssd_offload_path": None}))
    assert c.tenant_id == "default" and c.ssd_offload_path == ""


@pytest.mark.parametrize("field", ["local_hostname", "metadata_server",
                                   "master_server_address"])
def test_from_file_missing_required_field(write_config, field):
    data = dict(FULL)
    del data[field]
    with pytest.raises(ValueError, match=f"Missing required config field: {field}"):
        MooncakeConfig.from_file(write_config(data))


@pytest.mark.parametrize("field", ["local_hostname", "metadata_server",
                                   "master_server_address"])
@pytest.mark.parametrize("bad", ["", "   "])
def test_empty_required_field(field, bad):
    with pytest.raises(ValueError, match=field):
        make(**{field: bad})


def test_from_file_size_strings(write_config):
    c = MooncakeConfig.from_file(write_config(
        {**REQUIRED, "global_segment_size": "4gb", "local_buffer_size": "512MB"}))
    assert c.global_segment_size == 4 * GiB and c.local_buffer_size == 512 * 1024 ** 2


@pytest.mark.parametrize("raw,expected", [
    ("false", False), ("False", False), ("0", False), ("no", False), ("off", False),
    ("disable", False), ("", False), ("true", True), ("1", True), ("yes", True),
    ("on", True), ("enable", True), (True, True), (False, False), (1, True), (0, False)])
def test_from_file_booleans(write_config, raw, expected):
    c = MooncakeConfig.from_file(write_config(
        {**REQUIRED, "enable_ssd_offload": raw, "enable_client_http_server": raw}))
    assert c.enable_ssd_offload is expected and c.enable_client_http_server is expected


def test_from_file_bad_boolean(write_config):
    with pytest.raises(ValueError, match="Invalid boolean value"):
        MooncakeConfig.from_file(write_config({**REQUIRED, "enable_ssd_offload": "notabool"}))


def test_from_file_port_as_string(write_config):
    c = MooncakeConfig.from_file(write_config({**REQUIRED, "client_http_port": "19444"}))
    assert c.client_http_port == 19444


@pytest.mark.parametrize("port", ["http", 70000, -1, True])
def test_from_file_bad_port(write_config, port):
    with pytest.raises(ValueError, match="client_http_port"):
        MooncakeConfig.from_file(write_config({**REQUIRED, "client_http_port": port}))


@pytest.mark.parametrize("field,value", [
    ("global_segment_size", "50%"), ("local_buffer_size", "lots"),
    ("global_segment_size", ""), ("local_buffer_size", "gb")])
def test_from_file_bad_size(write_config, field, value):
    with pytest.raises(ValueError, match="segment size"):
        MooncakeConfig.from_file(write_config({**REQUIRED, field: value}))


def test_from_file_negative_size(write_config):
    with pytest.raises(ValueError, match="global_segment_size"):
        MooncakeConfig.from_file(write_config({**REQUIRED, "global_segment_size": -1}))


def test_from_file_bad_json_names_the_file(write_config):
    path = write_config('{"local_hostname": ')
    with pytest.raises(ValueError, match="Invalid JSON"):
        MooncakeConfig.from_file(path)


def test_from_file_not_an_object(write_config):
    with pytest.raises(ValueError, match="JSON object"):
        MooncakeConfig.from_file(write_config([1, 2]))


def test_from_file_missing_file(tmp_path):
    with pytest.raises(OSError):
        MooncakeConfig.from_file(str(tmp_path / "nope.json"))


def test_unknown_keys_are_ignored(write_config):
    c = MooncakeConfig.from_file(write_config({**REQUIRED, "future_option": 1}))
    assert c.local_hostname == "localhost"


# ---------------------------------------------------------------------- load_from_env
def test_env_config_path_wins(clean_env, write_config):
    clean_env.setenv("MOONCAKE_CONFIG_PATH", write_config(FULL))
    clean_env.setenv("MOONCAKE_MASTER", "ignored:1")
    c = MooncakeConfig.load_from_env()
    assert c.master_server_address == "localhost:8081" and c.tenant_id == "tenant-a"


def test_env_neither_set(clean_env):
    with pytest.raises(ValueError) as e:
        MooncakeConfig.load_from_env()
    assert str(e.value) == ("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor "
                            "'MOONCAKE_MASTER' is set.")


def test_env_master_only_defaults(clean_env):
    clean_env.setenv("MOONCAKE_MASTER", "10.0.0.1:50051")
    c = MooncakeConfig.load_from_env()
    assert c.master_server_address == "10.0.0.1:50051"
    assert c.local_hostname == "localhost" and c.metadata_server == "P2PHANDSHAKE"
    assert c.global_segment_size == DEFAULT_GLOBAL_SEGMENT_SIZE
    assert c.local_buffer_size == DEFAULT_LOCAL_BUFFER_SIZE
    assert (c.protocol, c.device_name, c.tenant_id) == ("tcp", "", "default")
    assert c.enable_ssd_offload is False and c.enable_client_http_server is False
    assert c.client_http_port == 9300


def test_env_every_variable(clean_env):
    env = {
        "MOONCAKE_MASTER": "m:1", "MOONCAKE_LOCAL_HOSTNAME": "node7",
        "MOONCAKE_TE_META_DATA_SERVER": "http://127.0.0.1:8080/metadata",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": "1.5gb", "MOONCAKE_LOCAL_BUFFER_SIZE": "256m",
        "MOONCAKE_PROTOCOL": "RDMA", "MOONCAKE_DEVICE": "mlx5_0",
        "MOONCAKE_OFFLOAD_ENABLED": "True", "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/ssd",
        "MOONCAKE_TENANT_ID": "t1", "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER": "on",
        "MOONCAKE_CLIENT_HTTP_PORT": "9400",
    }
    for k, v in env.items():
        clean_env.setenv(k, v)
    c = MooncakeConfig.load_from_env()
    assert c.local_hostname == "node7"
    assert c.metadata_server == "http://127.0.0.1:8080/metadata"
    assert c.global_segment_size == int(1.5 * GiB)
    assert c.local_buffer_size == 256 * 1024 ** 2
    assert (c.protocol, c.device_name) == ("rdma", "mlx5_0")
    assert c.enable_ssd_offload is True and c.ssd_offload_path == "/ssd"
    assert c.tenant_id == "t1"
    assert c.enable_client_http_server is True and c.client_http_port == 9400


@pytest.mark.parametrize("var,value,match", [
    ("MOONCAKE_GLOBAL_SEGMENT_SIZE", "huge", "segment size"),
    ("MOONCAKE_OFFLOAD_ENABLED", "maybe", "Invalid boolean value"),
    ("MOONCAKE_CLIENT_HTTP_PORT", "x", "client_http_port"),
    ("MOONCAKE_PROTOCOL", " ", "Invalid protocol")])
def test_env_bad_values(clean_env, var, value, match):
    clean_env.setenv("MOONCAKE_MASTER", "m:1")
    clean_env.setenv(var, value)
    with pytest.raises(ValueError, match=match):
        MooncakeConfig.load_from_env()


# ------------------------------------------------------------------------ size strings
@pytest.mark.parametrize("text,expected", [
    (1024, 1024), (0, 0), (1.5, 1), ("1024", 1024), ("  2048  ", 2048),
    ("1kb", 1024), ("1KB", 1024), ("512k", 512 * 1024), ("1.5kb", 1536),
    ("1mb", 1024 ** 2), ("512MB", 512 * 1024 ** 2), ("1m", 1024 ** 2),
    ("1gb", GiB), ("3GB", 3 * GiB), ("4gb", 4 * GiB), ("1g", GiB), ("1.5gb", int(1.5 * GiB)),
    ("1tb", 1024 ** 4), ("1TB", 1024 ** 4), ("1t", 1024 ** 4),
    ("4096b", 4096), ("4096B", 4096), ("1.5", 1), ("1e9", 10 ** 9), ("  3 gb  ", 3 * GiB)])
def test_parse_segment_size(text, expected):
    assert _parse_segment_size(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "gb", "mb", "abc", "50%", "1.2.3gb", "nan",
                                  "inf", None, True, [1]])
def test_parse_segment_size_rejects(text):
    with pytest.raises(ValueError):
        _parse_segment_size(text)


def test_parse_bool_rejects_unknown():
    assert _parse_bool(None) is False
    with pytest.raises(ValueError, match="Invalid boolean value: 'nope'"):
        _parse_bool("nope")


# -------------------------------------------------------------------------- validation
@pytest.mark.parametrize("given,expected", [
    ("tcp", "tcp"), ("RDMA", "rdma"), ("Tcp", "tcp"), ("  rdma  ", "rdma"), ("efa", "efa"),
    ("cxl", "cxl"), ("nvlink_intra", "nvlink_intra"), ("rpc_only", "rpc_only")])
def test_protocol_lowercased(given, expected, caplog):
    with caplog.at_level(logging.WARNING, logger=cfgmod.logger.name):
        assert make(protocol=given).protocol == expected
    assert "Unrecognised protocol" not in caplog.text


@pytest.mark.parametrize("given,expected", [("rmda", "rmda"), ("Foo", "foo")])
def test_unknown_protocol_warns_and_passes(given, expected, caplog):
    with caplog.at_level(logging.WARNING, logger=cfgmod.logger.name):
        assert make(protocol=given).protocol == expected
    assert "Unrecognised protocol" in caplog.text


@pytest.mark.parametrize("bad", ["", "   ", None, 5])
def test_bad_protocol(bad):
    with pytest.raises(ValueError, match="Invalid protocol"):
        make(protocol=bad)


def test_sizes_zero_ok_negative_rejected():
    c = make(global_segment_size=0, local_buffer_size=0)
    assert (c.global_segment_size, c.local_buffer_size) == (0, 0)
    with pytest.raises(ValueError, match="global_segment_size"):
        make(global_segment_size=-1)
    with pytest.raises(ValueError, match="local_buffer_size"):
        make(local_buffer_size=-1024)


def test_constructor_accepts_size_strings():
    assert make(global_segment_size="2gb").global_segment_size == 2 * GiB


# ---------------------------------------------------- overrides and the setup() argument
def test_override_parses_by_field_type():
    c = make()
    c.override("global_segment_size", "1gb")
    c.override("enable_ssd_offload", "yes")
    c.override("client_http_port", "9555")
    c.override("protocol", "TCP")
    c.override("tenant_id", "t9")
    assert c.global_segment_size == GiB and c.enable_ssd_offload is True
    assert c.client_http_port == 9555 and c.protocol == "tcp" and c.tenant_id == "t9"


@pytest.mark.parametrize("key,value,exc", [
    ("no_such_field", "1", KeyError), ("global_segment_size", "big", ValueError),
    ("global_segment_size", "-5", ValueError), ("enable_ssd_offload", "perhaps", ValueError),
    ("client_http_port", "99999", ValueError), ("master_server_address", "", ValueError)])
def test_override_rejects_and_keeps_config(key, value, exc):
    c = make()
    before = dict(vars(c))
    with pytest.raises(exc):
        c.override(key, value)
    assert vars(c) == before


def test_setup_dict_uses_upstream_keys():
    c = make(device_name="mlx5_0", tenant_id="t", client_http_port=9301)
    assert c.to_setup_dict() == {
        "local_hostname": "localhost", "metadata_server": "localhost:8080",
        "global_segment_size": DEFAULT_GLOBAL_SEGMENT_SIZE,
        "local_buffer_size": DEFAULT_LOCAL_BUFFER_SIZE, "protocol": "tcp",
        "rdma_devices": "mlx5_0", "master_server_addr": "localhost:8081",
        "enable_ssd_offload": False, "ssd_offload_path": "", "tenant_id": "t",
        "enable_client_http_server": False, "client_http_port": 9301,
    }
