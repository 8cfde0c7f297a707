"""mooncake.mooncake_store_service (mc_store_rest_server): flags, config errors, startup
retries, and the REST API against a real master and store (upstream
mooncake-wheel/mooncake/mooncake_store_service.py routes and replies)."""
import os
import signal
import subprocess
import sys
import urllib.parse

import pytest
import requests

from conftest import free_port, tool, wait_port
from mc_real_store import has_store, needs_store, start_master


def service_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_")}
    env.update(extra)
    return env


def run_service(args, env, timeout=30):
    return subprocess.run([tool("mc_store_rest_server")] + args, env=env, cwd="/",
                          capture_output=True, text=True, timeout=timeout)


def test_help_lists_upstream_flags():
    r = run_service(["--help"], service_env())
    assert r.returncode == 0
    for flag in ("--config", "--define", "--port", "--max-wait-time", "--host"):
        assert flag in r.stdout


def test_python_dash_m_entry_point():
    r = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--help"],
                       capture_output=True, text=True, cwd="/", timeout=30)
    assert r.returncode == 0 and "--max-wait-time" in r.stdout


def test_no_config_anywhere_exits_2():
    r = run_service(["--port", "1"], service_env())
    assert r.returncode == 2
    assert "Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor 'MOONCAKE_MASTER'" \
        in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--config", "/nonexistent/mooncake.json"], "No such file"),
    (["-D", "no_such_field=1"], "no_such_field"),
    (["-D", "global_segment_size=lots"], "segment size"),
    (["-D", "client_http_port=99999"], "client_http_port"),
])
def test_bad_config_exits_2(args, needle):
    r = run_service(args, service_env(MOONCAKE_MASTER="127.0.0.1:1"))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr


@pytest.mark.parametrize("args", [["-D", "novalue"], ["--port", "70000"],
                                  ["--max-wait-time", "-1"], ["--port", "x"]])
def test_bad_flags_exit_2(args):
    r = run_service(args, service_env(MOONCAKE_MASTER="127.0.0.1:1"))
    assert r.returncode == 2 and "usage:" in r.stderr


def test_bad_json_config_exits_2(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{not json")
    r = run_service(["--config", str(path)], service_env())
    assert r.returncode == 2 and "Invalid JSON" in r.stderr


def test_store_that_never_comes_up_exits_1():
    """Nothing listens on the master port: setup fails, is retried for --max-wait-time,
    then the service gives up (or, in a build without the store client, says so)."""
    dead = free_port()
    r = run_service(["--max-wait-time", "2", "--host", "127.0.0.1", "--port",
                     str(free_port())],
                    service_env(MOONCAKE_MASTER=f"127.0.0.1:{dead}",
                                MOONCAKE_LOCAL_HOSTNAME="127.0.0.1",
                                MOONCAKE_GLOBAL_SEGMENT_SIZE="16mb",
                                MOONCAKE_LOCAL_BUFFER_SIZE="16mb"), timeout=90)
    assert r.returncode == 1, r.stderr
    if has_store:
        assert "gave up" in r.stderr
    else:
        assert "MooncakeDistributedStore is not available" in r.stderr


# ------------------------------------------------------------------ with the real store
@pytest.fixture(scope="module")
def service():
    """A master and the REST service (config from MOONCAKE_* variables, -D overrides)
    on 127.0.0.1; yields (base_url, process)."""
    if not has_store:
        pytest.skip("needs MooncakeDistributedStore")
    from conftest import _Spawner
    spawner = _Spawner()
    try:
        master = start_master(spawner)
        port = free_port()
        proc = spawner([tool("mc_store_rest_server"), "--host", "127.0.0.1", "--port",
                        str(port), "--max-wait-time", "20", "-D", "global_segment_size=64mb",
                        "-D", "local_buffer_size=64mb"],
                       env=service_env(MOONCAKE_MASTER=master,
                                       MOONCAKE_LOCAL_HOSTNAME="127.0.0.1",
                                       MOONCAKE_PROTOCOL="tcp"))
        wait_port(port, proc=proc, timeout=30)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        spawner.cleanup()


def url(base, route, key=None):
    return base + route + ("" if key is None else urllib.parse.quote(key, safe=""))


@needs_store
def test_put_get_exist_remove(service):
    base, _ = service
    r = requests.put(base + "/api/put", json={"key": "k1", "value": "hello ü"}, timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "success"}
    r = requests.get(url(base, "/api/get/", "k1"), timeout=10)
    assert r.status_code == 200 and r.content == "hello ü".encode()
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert requests.get(url(base, "/api/exist/", "k1"), timeout=10).json() == {"exists": True}
    # The reads above granted a lease (10 s by default): remove fails within it.
    r = requests.delete(url(base, "/api/remove/", "k1"), timeout=10)
    assert r.status_code == 500 and r.json()["error"] == "Remove operation failed"
    # An object nobody read has no lease and is removed.
    assert requests.put(base + "/api/put", json={"key": "k2", "value": "x"},
                        timeout=10).status_code == 200
    r = requests.delete(url(base, "/api/remove/", "k2"), timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "success"}
    assert requests.get(url(base, "/api/exist/", "k2"), timeout=10).json() == {"exists": False}


@needs_store
def test_missing_keys(service):
    base, _ = service
    r = requests.get(url(base, "/api/get/", "never-put"), timeout=10)
    assert r.status_code == 404 and r.json() == {"error": "Key not found"}
    assert requests.get(url(base, "/api/exist/", "never-put"),
                        timeout=10).json() == {"exists": False}
    assert requests.delete(url(base, "/api/remove/", "never-put"), timeout=10).status_code == 500


@needs_store
@pytest.mark.parametrize("key", ["a/b:c@1 2%3", "键-ü", "x" * 200])
def test_awkward_keys_round_trip(service, key):
    base, _ = service
    r = requests.put(base + "/api/put", json={"key": key, "value": "v-" + key}, timeout=10)
    assert r.status_code == 200
    r = requests.get(url(base, "/api/get/", key), timeout=10)
    assert r.status_code == 200 and r.content == ("v-" + key).encode()


@needs_store
def test_empty_value_is_an_object(service):
    base, _ = service
    assert requests.put(base + "/api/put", json={"key": "empty", "value": ""},
                        timeout=10).status_code == 200
    r = requests.get(url(base, "/api/get/", "empty"), timeout=10)
    assert r.status_code == 200 and r.content == b""


@needs_store
@pytest.mark.parametrize("body,status,needle", [
    ({"value": "v"}, 400, "Missing key or value"),
    ({"key": "", "value": "v"}, 400, "Missing key or value"),
    ({"key": "k"}, 400, "Missing key or value"),
    ({"key": 5, "value": "v"}, 400, "strings"),
    ("[1, 2]", 400, "JSON object"),
    ("{oops", 400, "Malformed JSON"),
])
def test_put_rejects_bad_bodies(service, body, status, needle):
    base, _ = service
    if isinstance(body, str):
        r = requests.put(base + "/api/put", data=body, timeout=10,
                         headers={"Content-Type": "application/json"})
    else:
        r = requests.put(base + "/api/put", json=body, timeout=10)
    assert r.status_code == status and needle in r.json()["error"]


@needs_store
@pytest.mark.parametrize("route,body,needle", [
    ("/api/mount", {"size": 0}, "Invalid size"),
    ("/api/mount", {"size": "1gb"}, "Invalid size"),
    ("/api/mount_shm", {"name": "../etc", "size": 4096}, "name or size"),
    ("/api/mount_shm", {"name": "seg"}, "name or size"),
    ("/api/unmount_shm", {}, "Missing segment_ids"),
    ("/api/unmount", {"segment_ids": []}, "Missing segment_ids"),
    ("/api/unmount_local_disk", {"grace_period_seconds": 4000}, "grace_period_seconds"),
    ("/api/unmount_local_disk", {"grace_period_seconds": -1}, "grace_period_seconds"),
    ("/api/reconfigure", {"mode": "sideways"}, "Invalid mode"),
    ("/api/reconfigure", {"mode": "decode"}, "Missing path or size"),
])
def test_segment_routes_validate_first(service, route, body, needle):
    base, _ = service
    r = requests.post(base + route, json=body, timeout=10)
    assert r.status_code == 400 and needle in r.json()["error"]


@needs_store
def test_reconfigure_prefill_without_segments(service):
    base, _ = service
    r = requests.post(base + "/api/reconfigure", json={"mode": "prefill"}, timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "success", "mode": "prefill"}


@needs_store
def test_remove_all(service):
    base, _ = service
    for i in range(3):
        requests.put(base + "/api/put", json={"key": f"ra{i}", "value": "x"}, timeout=10)
    r = requests.delete(base + "/api/remove_all", timeout=10)
    assert r.status_code == 200 and r.json()["status"].startswith("success removed ")


@needs_store
def test_sigterm_stops_cleanly(spawn):
    master = start_master(spawn)
    port = free_port()
    proc = spawn([tool("mc_store_rest_server"), "--host", "127.0.0.1", "--port", str(port),
                  "-D", "global_segment_size=16mb", "-D", "local_buffer_size=16mb"],
                 env=service_env(MOONCAKE_MASTER=master, MOONCAKE_LOCAL_HOSTNAME="127.0.0.1"))
    wait_port(port, proc=proc, timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    out = proc.stdout.read().decode()
    assert "shutting down" in out
