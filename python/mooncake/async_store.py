"""``MooncakeDistributedStoreAsync``: asyncio wrappers over the synchronous store.

Upstream: ``mooncake-integration/store/async_store.py`` (installed as
``mooncake/async_store.py``). The class subclasses ``mooncake.store.
MooncakeDistributedStore`` and adds, for every callable attribute ``<name>`` of the sync
store, an attribute ``async_<name>``: an ``async def`` with the same arguments that runs
the sync method in an executor thread (the store's methods release the GIL) and returns
its result unchanged (same return conventions: 0 / negative codes, ``b""``, ``None``...).
Exceptions raised by the sync method propagate from the ``await``. Any other unknown
attribute raises ``AttributeError``. The wrapper is created on first use and cached on
the instance::

    store = MooncakeDistributedStoreAsync()
    store.setup(...)                      # sync methods are all still there
    rc = await store.async_put("k", b"v")
    value = await store.async_get("k")

By default the wrappers run on the running loop's default executor, as upstream; call
:meth:`set_executor` to use your own ``concurrent.futures.Executor``.
"""
import asyncio
import functools

__all__ = ["MooncakeDistributedStoreAsync", "AsyncMethodsMixin"]

_PREFIX = "async_"


class AsyncMethodsMixin:
    """Adds ``async_<name>`` for each callable ``<name>`` of the class it is mixed into
    (put it before the sync class in the bases). Needs a per-instance ``__dict__``."""

    def set_executor(self, executor) -> None:
        """Runs later ``async_*`` calls on ``executor`` (a
        ``concurrent.futures.Executor``), or on the loop's default executor when
        ``None``. Borrowed: the caller shuts it down after the store is done."""
        object.__setattr__(self, "_mc_async_executor", executor)

    def __getattr__(self, name: str):
        # Only reached when normal lookup fails, so real attributes are never shadowed.
        if not name.startswith(_PREFIX) or len(name) == len(_PREFIX):
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute '{name}'")
        sync_name = name[len(_PREFIX):]
        try:
            sync_method = getattr(self, sync_name)
        except AttributeError:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute '{name}' "
                f"(nor '{sync_name}')") from None
        if not callable(sync_method):
            raise AttributeError(f"'{sync_name}' is not callable")
        wrapper = self._make_async_wrapper(sync_method)
        object.__setattr__(self, name, wrapper)
        return wrapper

    def _make_async_wrapper(self, sync_method):
        @functools.wraps(sync_method)
        async def wrapper(*args, **kwargs):
            loop = asyncio.get_running_loop()
            executor = self.__dict__.get("_mc_async_executor")
            call = functools.partial(sync_method, *args, **kwargs)
            return await loop.run_in_executor(executor, call)

        return wrapper


try:
    from mooncake.store import MooncakeDistributedStore as _SyncStore
except ImportError:  # the store client is not built into this mooncake.store yet
    _SyncStore = None

if _SyncStore is not None:
    class MooncakeDistributedStoreAsync(AsyncMethodsMixin, _SyncStore):
        """``MooncakeDistributedStore`` plus ``async_<method>`` coroutines for every
        method (see the module docstring). Construction takes no arguments, as the
        sync store."""
else:
    class MooncakeDistributedStoreAsync(AsyncMethodsMixin):  # type: ignore[no-redef]
        """Placeholder used while ``mooncake.store`` lacks ``MooncakeDistributedStore``:
        constructing it raises ``ImportError`` naming what is missing."""

        def __init__(self, *args, **kwargs):
            raise ImportError(
                "mooncake.store.MooncakeDistributedStore is not available in this build "
                "of mooncake, so MooncakeDistributedStoreAsync cannot be created")
