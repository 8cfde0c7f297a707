"""mooncake.async_store: async_<method> wrappers (upstream
mooncake-integration/store/async_store.py semantics). The wrapper mechanics are checked on
a small sync class of the test's own; the store itself needs MooncakeDistributedStore."""
import asyncio
import concurrent.futures
import threading

import pytest

import mooncake.store as store_module
from mooncake.async_store import AsyncMethodsMixin, MooncakeDistributedStoreAsync
from mc_real_store import has_store, needs_store
from mc_real_store import new_store, start_master


class Calculator:
    """A synchronous object with the same shape of API as the store."""
    limit = 10                      # a non-callable attribute

    def __init__(self):
        self.calls = []

    def add(self, a, b=0, *, scale=1):
        self.calls.append(threading.current_thread().name)
        return (a + b) * scale

    def fail(self):
        raise RuntimeError("sync failure")


class AsyncCalculator(AsyncMethodsMixin, Calculator):
    pass


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def test_async_wrapper_passes_args_and_result():
    c = AsyncCalculator()
    assert run(c.async_add(2, b=3, scale=10)) == 50
    assert c.add(1, 1) == 2                       # the sync method is still there


def test_runs_off_the_event_loop_thread():
    c = AsyncCalculator()

    async def go():
        loop_thread = threading.current_thread().name
        await c.async_add(1)
        return loop_thread
    loop_thread = run(go())
    assert c.calls and c.calls[0] != loop_thread


def test_wrapper_is_cached_and_named():
    c = AsyncCalculator()
    first = c.async_add
    assert c.async_add is first and first.__name__ == "add"
    assert "async_add" in vars(c)


def test_exceptions_propagate():
    with pytest.raises(RuntimeError, match="sync failure"):
        run(AsyncCalculator().async_fail())


@pytest.mark.parametrize("name,match", [
    ("async_missing", "nor 'missing'"), ("async_limit", "not callable"),
    ("missing", "no attribute 'missing'"), ("async_", "no attribute")])
def test_attribute_errors(name, match):
    with pytest.raises(AttributeError, match=match):
        getattr(AsyncCalculator(), name)


def test_concurrent_calls_overlap():
    c = AsyncCalculator()
    c.set_executor(concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="mcx"))
    barrier = threading.Barrier(4, timeout=10)

    def wait_all(i):
        barrier.wait()          # only returns when 4 calls run at the same time
        return i
    c.wait_all = wait_all

    async def go():
        return await asyncio.gather(*(c.async_wait_all(i) for i in range(4)))
    assert run(go()) == [0, 1, 2, 3]


def test_set_executor_is_used():
    c = AsyncCalculator()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mine") as ex:
        c.set_executor(ex)
        assert run(c.async_add(1)) == 1
    assert c.calls[-1].startswith("mine")
    c.set_executor(None)
    assert run(c.async_add(2)) == 2 and not c.calls[-1].startswith("mine")


def test_class_matches_the_store_build():
    if has_store:
        assert issubclass(MooncakeDistributedStoreAsync, store_module.MooncakeDistributedStore)
    else:
        with pytest.raises(ImportError, match="MooncakeDistributedStore is not available"):
            MooncakeDistributedStoreAsync()


# ------------------------------------------------------------------ with the real store
@needs_store
def test_async_store_round_trip(spawn):
    addr = start_master(spawn)
    store = MooncakeDistributedStoreAsync()
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 64 << 20, "tcp", "", addr) == 0
    try:
        async def go():
            keys = [f"ak{i}" for i in range(16)]
            rcs = await asyncio.gather(*(store.async_put(k, k.encode() * 100) for k in keys))
            assert rcs == [0] * 16
            values = await asyncio.gather(*(store.async_get(k) for k in keys))
            assert values == [k.encode() * 100 for k in keys]
            assert await store.async_is_exist("ak0") == 1
            assert await store.async_get("nope") == b""
            assert await store.async_is_exist("nope") == 0
            assert await store.async_batch_is_exist(["ak1", "nope"]) == [1, 0]
            assert await store.async_remove("ak2", force=True) == 0
            assert await store.async_is_exist("ak2") == 0
        run(go())
    finally:
        assert store.close() == 0


@needs_store
def test_async_store_and_sync_store_share_data(spawn):
    addr = start_master(spawn)
    writer = new_store(addr)
    reader = MooncakeDistributedStoreAsync()
    assert reader.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 64 << 20, "tcp", "", addr) == 0
    try:
        assert writer.put("shared", b"hello") == 0
        assert run(reader.async_get("shared")) == b"hello"
    finally:
        reader.close()
        writer.close()
