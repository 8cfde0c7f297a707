"""register_buffer at scale (issue 10, fault 8): one at a time it used to be quadratic
(every call republished the whole segment descriptor: 8000 took 59 s, 20000 did not end
in 200 s) and past 65,536 buffers it returned -10 with no word why. Now a registration is
O(log n) and the limit (MC_STORE_MAX_USER_BUFFERS) is refused with BUFFER_OVERFLOW and a
log line naming it. The loops are bounded by a generous deadline, not timed."""
import ctypes
import time

import pytest

from conftest import _Spawner
from mooncake.store import MooncakeDistributedStore
from store_proc import StoreCluster, value_for

BUFFER_OVERFLOW, INVALID_PARAMS = -10, -600
MAX_USER_BUFFERS = 1 << 20  # MC_STORE_MAX_USER_BUFFERS (include/mooncake/store.h)
DEADLINE_S = 180.0


@pytest.fixture(scope="module")
def store():
    sp = _Spawner()
    try:
        c = StoreCluster(sp)
        s = MooncakeDistributedStore()
        assert s.setup(*c.setup_args(segment=8 << 20)) == 0
        yield s
        assert s.close() == 0
    finally:
        sp.cleanup()


def test_20000_register_and_unregister(store):
    n, step = 20000, 64
    mem = ctypes.create_string_buffer(n * step)
    base = ctypes.addressof(mem)
    deadline = time.monotonic() + DEADLINE_S
    for i in range(n):
        assert store.register_buffer(base + i * step, step) == 0
        assert time.monotonic() < deadline, f"{i} registrations in {DEADLINE_S} s"
    # every one of them is checked: a range inside one is used, one running past is not
    k = "regbuf-scale"
    mem[5 * step:6 * step] = value_for(k, step)
    assert store.put_from(k, base + 5 * step, step) == 0            # from a registered one
    assert store.get_into(k, base + 7 * step, step) == step
    assert mem[7 * step:8 * step] == value_for(k, step)
    assert store.get_into(k, base + 7 * step + 1, step) == INVALID_PARAMS  # past its end
    for i in range(n):
        assert store.unregister_buffer(base + i * step) == 0
        assert time.monotonic() < deadline, f"{i} unregistrations in {DEADLINE_S} s"
    assert store.unregister_buffer(base) == INVALID_PARAMS
    # plain memory again: the same range is accepted
    assert store.get_into(k, base + 7 * step + 1, step) == step
    assert store.remove(k, True) == 0  # force: our own read holds a lease on it


def test_the_limit_is_a_named_error(store, capfd):
    # addresses only: the table never touches the memory
    base, step = 1 << 40, 16
    deadline = time.monotonic() + DEADLINE_S
    for i in range(MAX_USER_BUFFERS):
        rc = store.register_buffer(base + i * step, step)
        if rc != 0:
            pytest.fail(f"registration #{i} returned {rc}")
        if i % 4096 == 0:
            assert time.monotonic() < deadline, f"{i} registrations in {DEADLINE_S} s"
    capfd.readouterr()
    more = base + MAX_USER_BUFFERS * step
    assert store.register_buffer(more, step) == BUFFER_OVERFLOW
    err = capfd.readouterr().err
    assert "MC_STORE_MAX_USER_BUFFERS" in err and str(MAX_USER_BUFFERS) in err, err
    assert store.register_buffer(base, step) == 0            # held already: fine
    assert store.unregister_buffer(base) == 0
    assert store.register_buffer(more, step) == 0            # room again
    for i in range(1, MAX_USER_BUFFERS + 1):
        assert store.unregister_buffer(base + i * step) == 0
