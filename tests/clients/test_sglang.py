"""SGLang's Mooncake code against this package (sglang==0.5.23 from PyPI, installed by
scripts/setup_clients.sh):

- SGLang's own test of its HiCache Mooncake storage backend,
  sglang/srt/mem_cache/storage/mooncake_store/test_mooncake_store.py as the wheel ships
  it, run unchanged as SGLang runs it (``python -m``: its __main__ runs the single and
  the four batch cases), configured the way SGLang documents: MOONCAKE_* variables.
- SGLang's transfer-engine wrapper (MooncakeTransferEngine) between two processes: one
  writes a pattern into the other's registered buffer with batch_transfer_sync and
  transfer_sync over TCP, P2PHANDSHAKE; the receiver checks its bytes.
"""
import json
import os

from clients.conftest import HERE, STUBS, client

SGLANG_ENV = {"PYTHONPATH": STUBS, "MOONCAKE_PROTOCOL": "tcp", "MC_FORCE_TCP": "1",
              "MOONCAKE_LOCAL_HOSTNAME": "127.0.0.1"}


def test_sglang_own_test_mooncake_store(cluster, run_child):
    client("sglang")
    env = dict(SGLANG_ENV, MOONCAKE_MASTER=cluster.addr,
               MOONCAKE_TE_META_DATA_SERVER=cluster.metadata,
               MOONCAKE_GLOBAL_SEGMENT_SIZE=str(128 << 20))
    rc, out = run_child(["-m", "sglang.srt.mem_cache.storage.mooncake_store."
                         "test_mooncake_store"], env)
    assert rc == 0, out[-4000:]
    assert out.count("Batch operation passed") == 4, out[-4000:]
    assert "Single operation passed" in out and "All tests passed" in out, out[-4000:]


def test_sglang_transfer_engine_two_processes(spawn_child):
    client("sglang")
    child = os.path.join(HERE, "sglang_te_child.py")
    a = spawn_child([child, "1"], SGLANG_ENV)
    b = spawn_child([child, "2"], SGLANG_ENV)

    def hello(p):
        while True:   # SGLang logs on stdout too: the first JSON line is the child's
            line = p.stdout.readline()
            assert line, f"child exited: rc={p.wait()}"
            if line.startswith("{"):
                return json.loads(line)

    def ask(p, cmd):
        p.stdin.write(json.dumps(cmd) + "\n")
        p.stdin.flush()
        return hello(p)

    ha, hb = hello(a), hello(b)
    assert ha["session"] != hb["session"]
    assert ask(b, {"check": 2}) == {"equal": True}
    assert ask(a, {"write_to": hb["session"], "peer_addr": hb["addr"]}) == {"ret": 0,
                                                                           "ret2": 0}
    assert ask(b, {"check": 1}) == {"equal": True}      # b now holds a's pattern
    assert ask(a, {"check": 1}) == {"equal": True}      # and a's own is unchanged
    for p in (a, b):
        p.stdin.write(json.dumps({"quit": 1}) + "\n")
        p.stdin.flush()
        assert p.wait(timeout=60) == 0
