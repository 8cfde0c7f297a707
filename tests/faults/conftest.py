"""Fixtures of the fault tests (tests/faults/harness.py has the parts).

``cluster(*master_flags, nodes=3, segment=..., node_env=None)``: a harness.Cluster that is
closed (every process killed) when the test ends, however it ends."""
import pytest

from faults import harness


@pytest.fixture
def cluster():
    made = []

    def make(*flags, **kw):
        c = harness.Cluster(*flags, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
