"""Issue 10: the nemesis run. Writers put self-describing values while the nemesis
kill -9s, SIGSTOPs and SIGCONTs nodes and writers, restarts the master and (where the
machine allows network namespaces) cuts a node's links; a reader checks values during the
run and a fresh client reads every acknowledged key at the end (faults/harness.py).

CI mode (default, `make test`): MC_FAULTS_SECONDS (default 120) of faults. The bench mode
is bench/bench_faults.py (at least 10 minutes, the same report)."""
import pytest

from faults import harness


def test_nemesis_no_wrong_bytes_only_allowed_losses_no_stalls(capsys):
    rep = harness.run_nemesis(seed=1, log=lambda m: None)
    with capsys.disabled():
        print("\n" + rep.text())
    assert not rep.failures(), rep.text()
