"""The installed package imports, and both extension modules are the C ones."""
import importlib
import subprocess
import sys


def test_import_store_and_engine():
    store = importlib.import_module("mooncake.store")
    engine = importlib.import_module("mooncake.engine")
    assert store.__file__.endswith(".so")
    assert engine.__file__.endswith(".so")
    assert hasattr(store, "ErrorCode")
    assert hasattr(engine, "ErrorCode")


def test_issue_one_liner():
    out = subprocess.run(
        [sys.executable, "-c",
         "import mooncake.store as s; print(int(s.ErrorCode.OBJECT_NOT_FOUND))"],
        check=True, capture_output=True, text=True, cwd="/").stdout
    assert out.strip() == "-704"


def test_demo_runs_the_replay(tmp_path):
    # what `make demo` runs (mooncake_trace_replay --demo), on a shorter synthetic trace
    r = subprocess.run([sys.executable, "-m", "mooncake.demo", "--no-progress",
                        "--synthetic-requests", "150"], capture_output=True, text=True,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SYNTHETIC" in r.stdout and "block hit rate" in r.stdout
    assert "What the figures mean" in r.stdout and "RESULT: OK" in r.stdout
    assert (tmp_path / "demo-out" / "replay.json").exists()
    assert str(tmp_path / "demo-out" / "replay.json") in r.stdout
