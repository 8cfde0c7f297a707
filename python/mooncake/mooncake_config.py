"""``MooncakeConfig``: the client configuration used by the store service and by
integrations (vLLM, SGLang, LMCache) that build a ``MooncakeDistributedStore`` from a file
or from the environment.

Compatible with upstream ``mooncake-wheel/mooncake/mooncake_config.py`` (v0.3.13 / HEAD):
the same dataclass fields, defaults, environment variables, size and boolean parsing, and
the same ``ValueError`` messages for the cases integrations test for.

Sources (upstream behaviour cited, not copied):
- fields, ``from_file``, ``load_from_env`` and the ``__post_init__`` validation:
  ``mooncake-wheel/mooncake/mooncake_config.py``;
- behaviour pinned by ``mooncake-wheel/tests/test_mooncake_config.py``;
- the environment table in ``docs/source/deployment/mooncake-store-deployment-guide.md``.

Environment variables read by :meth:`MooncakeConfig.load_from_env` (when
``MOONCAKE_CONFIG_PATH`` is unset)::

    MOONCAKE_MASTER                      master_server_address  (required)
    MOONCAKE_LOCAL_HOSTNAME              local_hostname         "localhost"
    MOONCAKE_TE_META_DATA_SERVER         metadata_server        "P2PHANDSHAKE"
    MOONCAKE_GLOBAL_SEGMENT_SIZE         global_segment_size    3355443200 (size string ok)
    MOONCAKE_LOCAL_BUFFER_SIZE           local_buffer_size      1073741824 (size string ok)
    MOONCAKE_PROTOCOL                    protocol               "tcp"
    MOONCAKE_DEVICE                      device_name            ""
    MOONCAKE_OFFLOAD_ENABLED             enable_ssd_offload     false
    MOONCAKE_OFFLOAD_FILE_STORAGE_PATH   ssd_offload_path       ""
    MOONCAKE_TENANT_ID                   tenant_id              "default"
    MOONCAKE_ENABLE_CLIENT_HTTP_SERVER   enable_client_http_server false
    MOONCAKE_CLIENT_HTTP_PORT            client_http_port       9300
    MC_AUTH_TOKEN_FILE                   auth_token_file        "" (mooncake-c: the cluster
                                                                secret's file, docs/security.md)
    MOONCAKE_STORAGE_ROOT_DIR            storage_root_dir       "" (mooncake-c: the local path
                                                                of the master's --root_fs_dir)

Sizes are ints (bytes) or strings such as ``"4gb"``, ``"512MB"``, ``"1.5g"``, ``"4096b"``
(case-insensitive, powers of 1024). Booleans accept true/false, 1/0, yes/no, on/off,
enable/disable, and the empty string (false).
"""
import json
import logging
import math
import os
from dataclasses import dataclass, fields
from typing import Any, Dict, Optional

logger = logging.getLogger(__name__)

#: Default ``global_segment_size``: 3.125 GiB (upstream's value).
DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200
#: Default ``local_buffer_size``: 1 GiB (upstream's value).
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824
#: Default client HTTP port (``/health``, ``/metrics``) of a store client.
DEFAULT_CLIENT_HTTP_PORT = 9300

# Longest suffixes first so "4gb" is not read as "4g" + "b".
_SIZE_SUFFIXES = (
    ("kb", 1024),
    ("mb", 1024 ** 2),
    ("gb", 1024 ** 3),
    ("tb", 1024 ** 4),
    ("k", 1024),
    ("m", 1024 ** 2),
    ("g", 1024 ** 3),
    ("t", 1024 ** 4),
    ("b", 1),
)

#: Protocols the upstream transfer engine and store know. This is a hint only (as
#: upstream): an unknown protocol is passed through with a warning, because the set a
#: build supports is decided by the native layer (ours accepts ``tcp``; ``rdma`` fails
#: setup with a clear message on machines without RDMA).
KNOWN_PROTOCOLS = frozenset({
    "tcp", "rdma", "efa", "nvmeof", "nvlink", "nvlink_intra", "hip", "barex", "cxl",
    "ascend", "ub", "ubshmem", "maca", "sunrise_link", "rpc_only",
})

_REQUIRED_FILE_FIELDS = ("local_hostname", "metadata_server", "master_server_address")

#: Upstream's ``setup(config: dict)`` names, read in a config file or mapping as the
#: documented key they stand for; the documented key wins when both are present.
_FILE_KEY_ALIASES = (("master_server_addr", "master_server_address"),
                     ("rdma_devices", "device_name"))

_TRUE_WORDS = ("true", "1", "yes", "on", "enable")
_FALSE_WORDS = ("false", "0", "no", "off", "disable")


def _parse_segment_size(value) -> int:
    """Parses a size in bytes.

    ``int`` is returned as is (``bool`` is refused); a ``float`` is truncated; a string is
    a number (``"1024"``, ``"1e9"``, ``"1.5"`` -> 1) with an optional case-insensitive
    suffix kb/mb/gb/tb/k/m/g/t/b (powers of 1024, fractions allowed: ``"1.5gb"``).
    Surrounding and inner whitespace is allowed (``" 3 gb "``).

    Raises ``ValueError`` for an empty string, a bare suffix (``"gb"``), text that is not
    a number (``"abc"``, ``"50%"``), NaN/infinity, or a value of another type.
    Negative values are returned (the dataclass rejects them with the field's name).
    Upstream: ``_parse_segment_size`` in ``mooncake_config.py``.
    """
    if isinstance(value, bool):
        raise ValueError(f"Invalid segment size: {value!r} (expected bytes or a size string)")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"Invalid segment size: {value!r}")
        return int(value)
    if isinstance(value, str):
        s = value.strip().lower()
        if not s:
            raise ValueError("Invalid segment size: empty string")
        multiplier = 1
        for suffix, mult in _SIZE_SUFFIXES:
            if s.endswith(suffix):
                s = s[: -len(suffix)].strip()
                if not s:
                    raise ValueError(
                        f"Invalid segment size: missing number before '{suffix}'")
                multiplier = mult
                break
        try:
            number = float(s)
        except ValueError:
            raise ValueError(f"Invalid segment size: {value!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"Invalid segment size: {value!r}")
        return int(number * multiplier)
    raise ValueError(f"Invalid segment size: {value!r} (expected bytes or a size string)")


def _parse_bool(value) -> bool:
    """Parses a boolean that may come from JSON, the environment or ``-D`` overrides.

    ``bool`` as is; numbers by truthiness; ``None`` and ``""`` are False; strings
    (case-insensitive, stripped) true/1/yes/on/enable or false/0/no/off/disable.
    Anything else raises ``ValueError`` (so a typo never silently disables a feature).
    Upstream: ``_parse_bool`` in ``mooncake_config.py``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    s = str(value).strip().lower()
    if not s:
        return False
    if s in _TRUE_WORDS:
        return True
    if s in _FALSE_WORDS:
        return False
    raise ValueError(f"Invalid boolean value: {value!r}")


def _parse_port(value, name: str = "client_http_port") -> int:
    """Parses a TCP port (int or decimal string) in 0..65535; ``ValueError`` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"Invalid {name}: {value!r}")
    try:
        port = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ValueError(f"Invalid {name}: {value!r} (expected an integer port)") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"Invalid {name}: {port} (expected 0..65535)")
    return port


def _str_or_default(value, default: str) -> str:
    return default if value is None else str(value)


@dataclass
class MooncakeConfig:
    """Configuration of one store client (upstream field names and defaults).

    Attributes:
        local_hostname: this client's host (``"host"`` or ``"host:port"``); required.
        metadata_server: transfer-engine metadata server (``"P2PHANDSHAKE"``,
            ``"http://h:p/metadata"``, ``"etcd://h:p"``, ``"redis://h:p"``); required.
        global_segment_size: bytes this client contributes to the pool (0 = none).
        local_buffer_size: bytes of the client's local staging buffer.
        protocol: transport, lowercased on construction (``"tcp"`` default).
        device_name: RDMA device list (``""`` for tcp); passed to ``setup`` as
            ``rdma_devices``.
        master_server_address: ``"host:port"`` of ``mooncake_master`` (or
            ``"etcd://..."`` for HA); required.
        enable_ssd_offload, ssd_offload_path: SSD offload switch and directory.
        tenant_id: tenant name (``"default"``).
        enable_client_http_server, client_http_port: the client's ``/health`` and
            ``/metrics`` HTTP endpoint (off; port 9300).
        auth_token_file: mooncake-c: the file holding the cluster secret (mode 0600,
            owned by this user; ``docs/security.md``); ``""`` = none. ``load_from_env``
            reads ``MC_AUTH_TOKEN_FILE``; ``to_setup_dict`` passes it as
            ``auth_token_file`` when set. The service's REST API and the Python metadata
            server check signed requests with it.
        storage_root_dir: LMCache's key: the shared directory of the master's
            ``--root_fs_dir`` (shared-FS DISK replicas, ``docs/ssd-tier.md``) as mounted
            here; ``""`` = follow the master. Set, ``setup`` fails unless the master runs
            with ``--root_fs_dir`` naming the same directory (the master's path wins: it
            is the one in every replica descriptor). ``to_setup_dict`` passes it when set.

    Construction validates (upstream ``__post_init__``): ``protocol`` must be a non-empty
    string (``ValueError("Invalid protocol: ...")``); an unknown protocol only logs a
    warning ("Unrecognised protocol ..."); negative sizes raise ``ValueError`` naming the
    field; empty ``local_hostname``/``metadata_server``/``master_server_address`` raise
    ``ValueError`` naming the field. Sizes given as strings are parsed too.
    """

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = DEFAULT_CLIENT_HTTP_PORT
    auth_token_file: str = ""
    storage_root_dir: str = ""

    def __post_init__(self):
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError(
                f"Invalid protocol: {self.protocol!r}. Protocol must be a non-empty "
                f"string, e.g. 'tcp' or 'rdma'.")
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in KNOWN_PROTOCOLS:
            logger.warning(
                "Unrecognised protocol %r; passing it through unchanged. Known protocols "
                "are: %s.", self.protocol, ", ".join(sorted(KNOWN_PROTOCOLS)))
        for name in ("global_segment_size", "local_buffer_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                try:
                    value = _parse_segment_size(value)
                except ValueError as e:
                    raise ValueError(f"Invalid {name}: {e}") from None
                setattr(self, name, value)
            if value < 0:
                raise ValueError(f"Invalid {name}: {value}. Size must be non-negative.")
        for name in _REQUIRED_FILE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"Config field {name!r} must be a non-empty string, got {value!r}.")
        if self.device_name is None:
            self.device_name = ""
        if self.auth_token_file is None:
            self.auth_token_file = ""
        if self.storage_root_dir is None:
            self.storage_root_dir = ""
        if not isinstance(self.storage_root_dir, str):
            raise ValueError(f"Invalid storage_root_dir: {self.storage_root_dir!r} (expected "
                             "a path)")
        if not isinstance(self.auth_token_file, str):
            raise ValueError(f"Invalid auth_token_file: {self.auth_token_file!r} (expected a "
                             "path)")

    # ----------------------------------------------------------------------------------
    @staticmethod
    def from_dict(config: Dict[str, Any]) -> "MooncakeConfig":
        """Builds a config from a mapping with the JSON file's keys (see ``from_file``).

        Raises ``ValueError("Missing required config field: <name>")`` when
        ``local_hostname``, ``metadata_server`` or ``master_server_address`` is absent,
        and ``ValueError`` for a bad size, boolean or port. Unknown keys are ignored (as
        upstream). ``master_server_addr`` and ``rdma_devices`` (the ``setup`` dict's
        names) are read as ``master_server_address`` and ``device_name``; the latter,
        documented names win when both are given.
        """
        if not isinstance(config, dict):
            raise ValueError(
                f"Mooncake config must be a JSON object, got {type(config).__name__}")
        for alias, name in _FILE_KEY_ALIASES:
            if alias in config:
                if name not in config:
                    config = dict(config, **{name: config[alias]})
                elif config[name] != config[alias]:
                    logger.warning("Mooncake config: both %r and %r given; using %r",
                                   name, alias, name)
        for name in _REQUIRED_FILE_FIELDS:
            if name not in config:
                raise ValueError(f"Missing required config field: {name}")
        return MooncakeConfig(
            local_hostname=config.get("local_hostname"),
            metadata_server=config.get("metadata_server"),
            global_segment_size=_parse_segment_size(
                config.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                config.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=config.get("protocol", "tcp"),
            device_name=_str_or_default(config.get("device_name", ""), ""),
            master_server_address=config.get("master_server_address"),
            enable_ssd_offload=_parse_bool(config.get("enable_ssd_offload", False)),
            ssd_offload_path=_str_or_default(config.get("ssd_offload_path"), ""),
            tenant_id=_str_or_default(config.get("tenant_id"), "default"),
            enable_client_http_server=_parse_bool(
                config.get("enable_client_http_server", False)),
            client_http_port=_parse_port(
                config.get("client_http_port", DEFAULT_CLIENT_HTTP_PORT)),
            auth_token_file=_str_or_default(config.get("auth_token_file"), ""),
            storage_root_dir=_str_or_default(config.get("storage_root_dir"), ""),
        )

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        """Loads a JSON config file (upstream keys; see the class docstring).

        Required keys: ``local_hostname``, ``metadata_server``, ``master_server_address``.
        Defaults: ``global_segment_size`` 3355443200, ``local_buffer_size`` 1073741824,
        ``protocol`` "tcp", ``device_name`` "", ``tenant_id`` "default" (also for JSON
        null), ``ssd_offload_path`` "" (also for null), ``client_http_port`` 9300.

        Raises ``OSError`` when the file cannot be read, ``ValueError`` for invalid JSON
        (message names the file and position), a missing required key
        (``"Missing required config field: <name>"``) or a bad value.
        """
        with open(file_path, encoding="utf-8") as fin:
            try:
                config = json.load(fin)
            except json.JSONDecodeError as e:
                raise ValueError(f"Invalid JSON in Mooncake config {file_path}: {e}") from None
        return MooncakeConfig.from_dict(config)

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """Loads the config named by ``MOONCAKE_CONFIG_PATH``, else from ``MOONCAKE_*``.

        If ``MOONCAKE_CONFIG_PATH`` is set, this is ``from_file`` of that path. Otherwise
        ``MOONCAKE_MASTER`` must be set (``ValueError("Neither the environment variable
        'MOONCAKE_CONFIG_PATH' nor 'MOONCAKE_MASTER' is set.")``) and every field comes
        from its variable (table in the module docstring) or its default.
        """
        config_file_path = os.getenv("MOONCAKE_CONFIG_PATH")
        if config_file_path is not None:
            return MooncakeConfig.from_file(config_file_path)
        master = os.getenv("MOONCAKE_MASTER")
        if not master:
            raise ValueError(
                "Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor "
                "'MOONCAKE_MASTER' is set.")
        return MooncakeConfig(
            local_hostname=os.getenv("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=os.getenv("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_parse_segment_size(
                os.getenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                os.getenv("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=os.getenv("MOONCAKE_PROTOCOL", "tcp"),
            device_name=os.getenv("MOONCAKE_DEVICE", ""),
            master_server_address=master,
            enable_ssd_offload=_parse_bool(os.getenv("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=os.getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=os.getenv("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(
                os.getenv("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false")),
            client_http_port=_parse_port(
                os.getenv("MOONCAKE_CLIENT_HTTP_PORT", str(DEFAULT_CLIENT_HTTP_PORT))),
            auth_token_file=os.getenv("MC_AUTH_TOKEN_FILE", ""),
            storage_root_dir=os.getenv("MOONCAKE_STORAGE_ROOT_DIR", ""),
        )

    # ----------------------------------------------------------------------------------
    def override(self, key: str, value: Any) -> None:
        """Sets one field from a ``-D key=value`` style override, parsing ``value`` by
        the field's type (sizes accept size strings, booleans the usual words, the port
        an integer). Raises ``KeyError`` naming an unknown field and ``ValueError`` for a
        bad value; the config is unchanged on error.

        (Upstream's service sets the raw string; we parse it so the ``setup`` dict gets
        the types the store expects.)
        """
        names = {f.name for f in fields(self)}
        if key not in names:
            raise KeyError(f"unknown MooncakeConfig field {key!r} (known: "
                           f"{', '.join(sorted(names))})")
        if key in ("global_segment_size", "local_buffer_size"):
            parsed = _parse_segment_size(value)
            if parsed < 0:
                raise ValueError(f"Invalid {key}: {parsed}. Size must be non-negative.")
        elif key in ("enable_ssd_offload", "enable_client_http_server"):
            parsed = _parse_bool(value)
        elif key == "client_http_port":
            parsed = _parse_port(value)
        elif key == "protocol":
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Invalid protocol: {value!r}")
            parsed = value.strip().lower()
        else:
            parsed = "" if value is None else str(value)
            if key in _REQUIRED_FILE_FIELDS and not parsed.strip():
                raise ValueError(f"Config field {key!r} must be a non-empty string")
        setattr(self, key, parsed)

    def to_setup_dict(self) -> Dict[str, Any]:
        """The ``MooncakeDistributedStore.setup(config: dict)`` argument for this config
        (upstream key names: ``rdma_devices`` = device_name, ``master_server_addr`` =
        master_server_address), as ``mooncake_store_service`` builds it."""
        d = {
            "local_hostname": self.local_hostname,
            "metadata_server": self.metadata_server,
            "global_segment_size": self.global_segment_size,
            "local_buffer_size": self.local_buffer_size,
            "protocol": self.protocol,
            "rdma_devices": self.device_name or "",
            "master_server_addr": self.master_server_address,
            "enable_ssd_offload": self.enable_ssd_offload,
            "ssd_offload_path": self.ssd_offload_path,
            "tenant_id": self.tenant_id,
            "enable_client_http_server": self.enable_client_http_server,
            "client_http_port": self.client_http_port,
        }
        if self.auth_token_file:
            d["auth_token_file"] = self.auth_token_file
        if self.storage_root_dir:
            d["storage_root_dir"] = self.storage_root_dir
        return d
