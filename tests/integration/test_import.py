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


def test_demo_smoke_runs():
    r = subprocess.run([sys.executable, "-m", "mooncake.demo"], capture_output=True,
                       text=True, cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "ErrorCode" in r.stdout
