"""transfer_engine_topology_dump: the console tool prints the engine's topology and the
transports this build has (TCP and shm) as JSON, like upstream's tool."""
import json
import subprocess
import sys

from conftest import tool


def run(*args, env=None):
    return subprocess.run([tool("transfer_engine_topology_dump"), *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_prints_json_with_tcp_and_shm():
    r = run("--json")
    assert r.returncode == 0, r.stderr
    topo = json.loads(r.stdout)
    assert topo["transports"]["tcp"]["available"] is True
    assert topo["transports"]["shm"]["available"] is True
    assert topo["transports"]["rdma"]["available"] is False
    assert "cpu:0" in topo["nics"] and topo["nics"]["cpu:0"] == [[], []]


def test_upstream_output_shape_and_flags(tmp_path):
    r = run()
    assert r.returncode == 0 and r.stdout.startswith("Local topology [te/discover]: ")
    json.loads(r.stdout.split(": ", 1)[1])
    custom = tmp_path / "topo.json"
    custom.write_text(json.dumps({"cpu:0": [["mlx5_0"], []]}))
    r = run("--custom-topo-json", str(custom), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["nics"] == {"cpu:0": [["mlx5_0"], []]}
    r = run("--use-custom-topo", env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 1 and "MC_CUSTOM_TOPO_JSON" in r.stderr
    r = run("--backend", "tent")
    assert r.returncode == 1 and r.stderr.startswith("error:")
    r = subprocess.run([sys.executable, "-m", "mooncake.transfer_engine_topology_dump",
                        "--json", "--device-name", "a,b"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["device_filter"] == ["a", "b"]
