"""mooncake.buffer_pool.BufferPool: leases of registered memory used with a real store
(put_from/get_into through leases, from many threads at once), waiting and timeouts,
exported-view and active-lease checks, and the pool's bounds."""
import gc
import threading

import numpy as np
import pytest

from conftest import wait_until
from mooncake.buffer_pool import BufferPool
from store_proc import StoreProc


def test_lease_roundtrip_with_the_store(store):
    with BufferPool(store, min_size_class=4096, alignment=4096) as pool:
        with pool.buffer(1234) as src:
            assert src.size == len(src.buffer) == 1234 and src.ptr % 4096 == 0
            src.buffer[:] = bytes(range(256)) * 4 + b"z" * 210
            assert store.put_from("bp-key", src.ptr, src.size) == 0
        with pool.acquire(4096) as dst:
            assert store.get_into("bp-key", dst.ptr, dst.size) == 1234
            assert bytes(dst.buffer[:1234]) == bytes(range(256)) * 4 + b"z" * 210
        assert pool.stats()["reused"] >= 1  # the second lease reused the first block
        store.remove("bp-key", True)


def test_threads_share_one_pool_in_a_store_process(cluster):
    p = StoreProc(cluster.setup_args(), funcs_from="compat_child", timeout=180)
    try:
        errors, stats = p.fn("pool_threads", 8, 25, 64 << 10)
    finally:
        p.close()
    assert errors == []
    assert stats["active_leases"] == 0 and stats["acquired"] == 8 * 25 * 2
    assert stats["held_bytes"] <= 8 * (64 << 10)  # max_bytes held even under contention


def test_threads_contend_for_a_one_lease_pool(store):
    pool = BufferPool(store, min_size_class=4096, max_size_class=4096, max_regions=1)
    seen, lock, errors = [], threading.Lock(), []

    def work(tid):
        for _ in range(40):
            with pool.acquire(100, timeout=60) as lease:
                with lock:
                    seen.append(tid)
                    if pool.stats()["active_leases"] != 1:
                        errors.append("more than one lease active")
                lease.buffer[:] = bytes([tid]) * 100
                if bytes(lease.buffer) != bytes([tid]) * 100:
                    errors.append("lease memory shared with another thread")

    ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts) and errors == [] and len(seen) == 240
    pool.close()


def test_blocking_acquire_waits_for_a_release(store):
    pool = BufferPool(store, min_size_class=4096, max_size_class=4096, max_regions=1)
    first = pool.acquire(1)
    got = []
    t = threading.Thread(target=lambda: got.append(pool.acquire(1, timeout=60)))
    t.start()
    wait_until(lambda: pool.stats()["waits"] >= 1, 10, "the second acquire waits")
    assert got == []
    first.release()
    t.join(30)
    assert len(got) == 1 and got[0].size == 1
    got[0].release()
    with pytest.raises(RuntimeError, match="exhausted"):
        held = pool.acquire(1)
        try:
            pool.acquire(1, block=False)
        finally:
            held.release()
    held = pool.acquire(1)
    with pytest.raises(RuntimeError, match="exhausted.*waited"):
        pool.acquire(1, timeout=0.05)
    held.release()
    pool.close()


def test_views_leases_and_close(store):
    pool = BufferPool(store, 1 << 20, min_size_class=4096, alignment=65536)
    lease = pool.acquire(4)
    assert lease.ptr % 65536 == 0
    view = lease.buffer
    view[:] = b"test"
    with pytest.raises(RuntimeError, match="exported views"):
        lease.release()
    arr = np.frombuffer(lease.buffer, dtype=np.uint8)
    del view
    with pytest.raises(RuntimeError, match="exported views"):
        lease.release()
    part = lease.buffer[1:3]
    del arr
    with pytest.raises(RuntimeError, match="exported views"):
        lease.release()
    assert bytes(part) == b"es"
    del part
    with pytest.raises(RuntimeError, match="active leases"):
        pool.close()
    lease.release()
    lease.release()  # a second release is a no-op
    dropped = pool.acquire(10)
    del dropped
    gc.collect()
    assert pool.stats()["active_leases"] == 0  # a collected lease gives its memory back
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire(1)


@pytest.mark.parametrize("size", [0, 1, 128 * 1024 + 1])
def test_sizes_and_overflow_blocks(store, size):
    pool = BufferPool(store, 1 << 20, max_size_class=128 * 1024)
    lease = pool.acquire(size)
    assert lease.size == size and len(lease.buffer) == size
    lease.release()
    assert pool.stats()["overflow"] == (1 if size > 128 * 1024 else 0)
    pool.close()


def test_bad_arguments(store):
    with pytest.raises(RuntimeError, match="alignment"):
        BufferPool(store, 1 << 20, alignment=12345)
    pool = BufferPool(store, 1 << 20)
    with pytest.raises(RuntimeError, match="overflow|capacity"):
        pool.acquire((1 << 64) - 1)
    with pytest.raises(RuntimeError, match="capacity"):
        pool.acquire(2 << 20)
    assert pool.prewarm(4096, 3) == 3 and pool.stats()["cached_bytes"] == 3 * 4096
    pool.close()
