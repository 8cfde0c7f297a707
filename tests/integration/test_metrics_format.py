"""Every /metrics body parses with the Prometheus client library's own text-format parser
(prometheus_client.parser, the exposition format 0.0.4 that the servers announce) into
families with distinct names: the master's (with its RPC server, admin HTTP server and
embedded HTTP metadata server), the C ``mooncake_http_metadata_server``'s and a store
client's (``enable_client_http_server``). The parser folds a counter ``x_total`` into the
family ``x``, so a gauge ``x`` next to a counter ``x_total`` is one name twice, which a
scraper built on it rejects or merges; before session 22 the master exposed
``master_rpc_connections`` and ``master_rpc_connections_total`` (now ``..._open``).
All on 127.0.0.1."""
import collections
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from conftest import free_port, tool, wait_port
from mc_master import Master
from mooncake.store import MooncakeDistributedStore


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain"), r.headers["Content-Type"]
        return r.read().decode()


def check_families(text):
    """The families of one body; fails on a parse error, a repeated family name, a
    counter whose samples do not end in _total, or a family without HELP."""
    fams = list(text_string_to_metric_families(text))
    assert fams, text[:200]
    dup = [n for n, c in collections.Counter(f.name for f in fams).items() if c > 1]
    assert not dup, f"family names exposed twice: {dup}"
    for f in fams:
        assert f.type in ("counter", "gauge", "histogram", "summary"), (f.name, f.type)
        assert f.documentation, f"{f.name} has no HELP line"
        if f.type == "counter":
            assert all(s.name == f.name + "_total" for s in f.samples), (f.name, f.samples)
    return {f.name: f for f in fams}


def test_master_metrics_parse(spawn):
    md = free_port()
    m = Master(spawn, "--enable_http_metadata_server=1", f"--http_metadata_server_port={md}",
               "--http_metadata_server_host=127.0.0.1")
    s = MooncakeDistributedStore()
    try:
        # one client connected: the RPC gauges and counters have something to count
        assert s.setup("localhost", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", m.addr) == 0
        assert s.put("metrics-format", b"x" * 100) == 0
        fams = check_families(fetch(f"http://127.0.0.1:{m.metrics_port}/metrics"))
        assert fams["master_rpc_connections_open"].samples[0].value >= 1
        assert fams["master_rpc_connections"].type == "counter"
        assert "master_admin_http_connections_open" in fams
        wait_port(md)
        fams = check_families(fetch(f"http://127.0.0.1:{md}/metrics"))
        assert "http_metadata_keys" in fams and "http_metadata_connections_open" in fams
    finally:
        assert s.close() == 0


def test_metadata_server_tool_metrics_parse(spawn):
    port = free_port()
    p = spawn([tool("mooncake_http_metadata_server"), f"--port={port}", "--host=127.0.0.1"])
    wait_port(port, proc=p)
    fams = check_families(fetch(f"http://127.0.0.1:{port}/metrics"))
    assert fams["http_metadata_connections_open"].samples[0].value >= 1


def test_client_metrics_parse(spawn):
    m = Master(spawn, "--enable_metric_reporting=false")
    s = MooncakeDistributedStore()
    try:
        assert s.setup("localhost", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", m.addr,
                       enable_client_http_server=True, client_http_port=0) == 0
        assert s.put("metrics-format-c", b"y" * 100) == 0
        fams = check_families(fetch(f"http://127.0.0.1:{s.get_client_http_port()}/metrics"))
        assert "mooncake_client_requests" in fams
        assert fams["mooncake_client_http_connections_open"].samples[0].value >= 1
    finally:
        assert s.close() == 0
