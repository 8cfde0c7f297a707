"""The compatibility table: every upstream name listed as present exists in the installed
package, and docs/compatibility.md is what scripts/gen_compat.py writes now."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_compat  # noqa: E402

ENTRIES = gen_compat.read_list()


def test_list_is_well_formed_and_unique():
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names)), "a name is listed twice"
    assert len(names) > 200
    assert all(e.note for e in ENTRIES if e.expect in ("n/a", "missing", "cpu-only"))


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.expect == "yes"],
                         ids=lambda e: e.name)
def test_listed_name_is_present(entry):
    assert gen_compat.exists(entry), (
        f"{entry.name} is listed as present (tests/compat/upstream_names.txt:"
        f"{entry.lineno}) but the installed package does not have it")


def test_top_level_buffer_pool_alias_is_lazy():
    # upstream's import-structure contract: mooncake.BufferPool is RegisteredBufferPool;
    # ours resolves it on first use so a bare `import mooncake` imports nothing else
    code = ("import sys, mooncake; assert 'mooncake.buffer_pool' not in sys.modules; "
            "assert mooncake.BufferPool is mooncake.RegisteredBufferPool; "
            "import mooncake.buffer_pool as b; assert mooncake.BufferPool is b.BufferPool")
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/")


def test_doc_is_fresh():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_compat.py"),
                        "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n(run: .venv/bin/python scripts/gen_compat.py)"
