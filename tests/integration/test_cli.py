"""The console-script wrappers upstream ships (mooncake.cli:main and kin): each runs the
installed C program with the same arguments, so the program's own answer comes back."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module,program", [("mooncake.cli", "mooncake_master"),
                                            ("mooncake.cli_client", "mooncake_client"),
                                            ("mooncake.cli_bench", "transfer_engine_bench")])
def test_wrapper_runs_the_installed_program(module, program):
    r = subprocess.run([sys.executable, "-m", module, "--definitely_not_a_flag=1"],
                       capture_output=True, text=True, timeout=30)
    # the program itself parsed the arguments: its exit code and its message, its name
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{program}: unknown flag --definitely_not_a_flag" in r.stderr, r.stderr


def test_wrapper_names_a_missing_program():
    code = ("import sys; from mooncake.cli import exec_packaged; "
            "sys.exit(exec_packaged('mooncake_no_such_program', ['x']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 127
    assert "'mooncake_no_such_program' is not installed" in r.stderr, r.stderr
