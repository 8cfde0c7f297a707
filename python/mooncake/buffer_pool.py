"""``mooncake.buffer_pool``: leases of registered scratch memory for the zero-copy store API.

Upstream (``mooncake-wheel/mooncake/buffer_pool.py`` over the native ``BufferPool`` of
``mooncake-integration/store/buffer_pool.cpp``; documented in upstream's
``mooncake-store.md`` "BufferPool Helper") hands out leases of memory that the store can
transfer to and from directly, so a caller that repeatedly needs a destination for
``get_into``/``batch_get_into`` or a source for ``put_from`` does not register and
unregister memory for every call. This is our own pure-Python design of the same
contract:

- ``BufferPool(store, max_bytes=None, *, min_size_class=4096, max_size_class=64 MiB,
  alignment=4096, max_regions=None, block_on_exhaustion=True, prewarm_size=0,
  prewarm_count=0)``. ``store`` is a set-up ``MooncakeDistributedStore`` (or None: plain
  memory, nothing registered).
- ``acquire(size, block=None, timeout=None)`` and ``buffer(size)`` return a
  :class:`BufferLease`: ``ptr`` (address), ``size`` (the requested size; 0 is allowed),
  ``buffer`` (a writable ``memoryview`` of exactly ``size`` bytes), ``release()``; it is a
  context manager, and a lease that is garbage-collected releases itself.
- ``prewarm(size, count=1)`` fills the cache ahead of use; ``close()``; ``stats()``.

How memory is kept. Requests up to ``max_size_class`` are rounded up to a power-of-two
size class (at least ``min_size_class``) and served from a per-class cache of blocks;
each block is one anonymous ``mmap`` registered once with ``store.register_buffer`` and
reused by later leases of its class. Larger requests get a block of their own (an
"overflow" block), unregistered and unmapped when the lease is released. ``max_bytes``
bounds the bytes the pool holds (active leases plus cached blocks); when a new block
would pass it, cached idle blocks are dropped first, and when that is not enough the pool
is exhausted. ``max_regions`` bounds the number of active leases. On exhaustion
``acquire`` waits (``block``, default ``block_on_exhaustion``) until a lease is released
or ``timeout`` seconds pass, else raises ``RuntimeError("buffer pool exhausted: ...")``.

Errors (RuntimeError, as upstream): a bad alignment (not a power of two); a size that
overflows or can never fit ``max_bytes`` ("... exceeds the pool capacity"); ``release()``
while views of ``lease.buffer`` are still alive ("... exported views"); ``close()`` with
active leases ("... active leases"); use after ``close()``.

Threads: every method may be called from any thread; a blocked ``acquire`` waits on a
condition variable (the GIL is released while it waits). A lease itself is meant for one
thread at a time.
"""
from __future__ import annotations

import ctypes
import mmap
import sys
import threading
import time
from typing import Any, Optional

__all__ = ["BufferPool", "BufferLease", "RegisteredBufferPool"]

_PAGE = mmap.PAGESIZE
_MAX_SIZE = 1 << 62


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


class _Block:
    """One mapped (and, with a store, registered) block of memory."""

    __slots__ = ("mm", "anchor", "base", "ptr", "cap", "size_class", "registered")

    def __init__(self, cap: int, alignment: int, size_class: Optional[int]):
        extra = alignment if alignment > _PAGE else 0
        length = max(cap + extra, 1)
        self.mm = mmap.mmap(-1, length)
        # c_char.from_buffer exports the mapping: it cannot be unmapped while we hold it
        self.anchor = ctypes.c_char.from_buffer(self.mm)
        self.base = ctypes.addressof(self.anchor)
        self.ptr = (self.base + alignment - 1) & ~(alignment - 1) if extra else self.base
        self.cap = cap
        self.size_class = size_class
        self.registered = False

    def unmap(self) -> None:
        self.anchor = None
        self.mm.close()


class BufferLease:
    """An active lease of ``size`` bytes at ``ptr``; see the module docstring."""

    def __init__(self, pool: "BufferPool", block: _Block, size: int):
        self._pool = pool
        self._block: Optional[_Block] = block
        self._size = size
        self._carr: Any = None  # ctypes array over the lease's bytes (the views' exporter)
        self._view: Optional[memoryview] = None

    @property
    def ptr(self) -> int:
        self._check()
        return self._block.ptr  # type: ignore[union-attr]

    @property
    def size(self) -> int:
        return self._size

    @property
    def released(self) -> bool:
        return self._block is None

    @property
    def buffer(self) -> memoryview:
        """A writable memoryview of exactly ``size`` bytes (the same object each time)."""
        self._check()
        if self._view is None:
            if self._carr is None:
                n = max(self._size, 1)
                self._carr = (ctypes.c_char * n).from_address(self._block.ptr)  # type: ignore[union-attr]
            self._view = memoryview(self._carr).cast("B")[: self._size]
        return self._view

    def __len__(self) -> int:
        return self._size

    def _check(self) -> None:
        if self._block is None:
            raise RuntimeError("buffer lease was already released")

    def _views_alive(self) -> bool:
        """True while something other than this lease holds a view of its memory. The
        user-facing view is one memoryview (refcount: ours + getrefcount's argument);
        anything exported from it (np.frombuffer, memoryview(view)) either holds it or
        shares its buffer manager, which holds the ctypes array."""
        if self._carr is None:
            return False
        if self._view is not None:
            if sys.getrefcount(self._view) > 2:
                return True
            try:
                self._view.release()
            except BufferError:
                return True
            self._view = None
        # the ctypes array: referenced by us (+1 for getrefcount's argument); a live
        # buffer manager (a slice or copy of the view) adds one more
        return sys.getrefcount(self._carr) > 2

    def release(self) -> None:
        """Returns the memory to the pool. Raises RuntimeError while views of
        ``buffer`` are alive (delete them first); a second release is a no-op."""
        if self._block is None:
            return
        if self._views_alive():
            raise RuntimeError(
                "cannot release a buffer lease while exported views of its buffer are "
                "alive; delete them first")
        block, self._block, self._carr = self._block, None, None
        self._pool._give_back(block, self._size)

    def __enter__(self) -> "BufferLease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        block = getattr(self, "_block", None)
        if block is None:
            return
        try:
            if self._views_alive():
                # views outlive the lease: the memory must stay mapped and unused
                self._pool._orphan(block, self._size)
            else:
                self._block = None
                self._pool._give_back(block, self._size)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        if self._block is None:
            return f"<BufferLease size={self._size} released>"
        return f"<BufferLease ptr={self._block.ptr:#x} size={self._size}>"


class BufferPool:
    """A thread-safe pool of registered scratch memory; see the module docstring."""

    def __init__(
        self,
        store: Any = None,
        max_bytes: Optional[int] = None,
        *,
        min_size_class: int = 4096,
        max_size_class: int = 64 << 20,
        alignment: int = 4096,
        max_regions: Optional[int] = None,
        block_on_exhaustion: bool = True,
        prewarm_size: int = 0,
        prewarm_count: int = 0,
    ):
        if not _is_pow2(int(alignment)):
            raise RuntimeError(f"alignment must be a power of two, got {alignment}")
        if not _is_pow2(int(min_size_class)) or not _is_pow2(int(max_size_class)):
            raise RuntimeError("min_size_class and max_size_class must be powers of two")
        if min_size_class > max_size_class:
            raise RuntimeError(
                f"min_size_class ({min_size_class}) is larger than max_size_class "
                f"({max_size_class})")
        if max_bytes is not None and max_bytes <= 0:
            raise RuntimeError(f"max_bytes must be positive, got {max_bytes}")
        if max_regions is not None and max_regions <= 0:
            raise RuntimeError(f"max_regions must be positive, got {max_regions}")
        self._store = store
        self._max_bytes = max_bytes
        self._min_class = int(min_size_class)
        self._max_class = int(max_size_class)
        self._alignment = int(alignment)
        self._max_regions = max_regions
        self._block_default = bool(block_on_exhaustion)
        self._cv = threading.Condition(threading.Lock())
        self._free: dict[int, list[_Block]] = {}  # size class -> cached idle blocks
        self._held = 0          # bytes of every block the pool has (active + cached)
        self._active = 0        # active leases
        self._active_bytes = 0  # requested bytes of active leases
        self._orphans: list[_Block] = []
        self._closed = False
        self._counts = {"acquired": 0, "reused": 0, "mapped": 0, "overflow": 0, "waits": 0}
        if prewarm_count and prewarm_size is not None:
            self.prewarm(prewarm_size, prewarm_count)

    # ---- sizing ------------------------------------------------------------------
    def _class_of(self, size: int) -> Optional[int]:
        """The size class of a request, or None for an overflow (dedicated) block."""
        if size > self._max_class:
            return None
        c = self._min_class
        while c < size:
            c <<= 1
        return c

    def _block_cap(self, size: int, cls: Optional[int]) -> int:
        if cls is not None:
            return cls
        a = max(self._alignment, _PAGE)
        return (size + a - 1) // a * a

    # ---- block management (caller holds the lock, except _map/_unmap) -----------
    def _map(self, cap: int, cls: Optional[int]) -> _Block:
        b = _Block(cap, self._alignment, cls)
        if self._store is not None:
            rc = self._store.register_buffer(b.ptr, b.cap)
            if rc != 0:
                b.unmap()
                raise RuntimeError(f"register_buffer({b.cap} bytes) failed with {rc}")
            b.registered = True
        return b

    def _unmap(self, b: _Block) -> None:
        if b.registered and self._store is not None:
            try:
                self._store.unregister_buffer(b.ptr)
            except Exception:  # noqa: BLE001 - the store may be closed already
                pass
        b.unmap()

    def _drop_cached_locked(self, need: int, keep_class: Optional[int]) -> list[_Block]:
        """Takes cached idle blocks out of the pool until `need` more bytes fit under
        max_bytes; returns them (the caller unmaps them outside the lock)."""
        dropped: list[_Block] = []
        if self._max_bytes is None:
            return dropped
        for cls in sorted(self._free, reverse=True):
            if cls == keep_class:
                continue
            lst = self._free[cls]
            while lst and self._held + need > self._max_bytes:
                b = lst.pop()
                self._held -= b.cap
                dropped.append(b)
        return dropped

    # ---- public API --------------------------------------------------------------
    def acquire(self, size: int, block: Optional[bool] = None,
                timeout: Optional[float] = None) -> BufferLease:
        """A lease of `size` bytes (see the module docstring for waiting and errors)."""
        size = int(size)
        if size < 0:
            raise RuntimeError(f"buffer size must not be negative, got {size}")
        if size > _MAX_SIZE:
            raise RuntimeError(f"buffer size {size} overflows the pool capacity")
        if block is None:
            block = self._block_default
        cls = self._class_of(size)
        cap = self._block_cap(size, cls)
        if self._max_bytes is not None and cap > self._max_bytes:
            raise RuntimeError(
                f"buffer size {size} ({cap} bytes with its size class) exceeds the pool "
                f"capacity max_bytes={self._max_bytes}")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while True:
                if self._closed:
                    raise RuntimeError("buffer pool is closed")
                regions_ok = self._max_regions is None or self._active < self._max_regions
                if regions_ok:
                    cached = self._free.get(cls) if cls is not None else None
                    if cached:
                        b = cached.pop()
                        self._counts["reused"] += 1
                        return self._lease_locked(b, size)
                    dropped = self._drop_cached_locked(cap, cls)
                    if self._max_bytes is None or self._held + cap <= self._max_bytes:
                        self._held += cap  # reserved; mapped below without the lock
                        self._active += 1
                        self._active_bytes += size
                        break
                    for d in dropped:  # not enough even so: they stay dropped
                        self._unmap(d)
                if not block:
                    raise RuntimeError(self._exhausted_msg(size))
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RuntimeError(self._exhausted_msg(size) + f" (waited {timeout} s)")
                self._counts["waits"] += 1
                self._cv.wait(left)
        for d in dropped:
            self._unmap(d)
        try:
            b = self._map(cap, cls)
        except BaseException:
            with self._cv:
                self._held -= cap
                self._active -= 1
                self._active_bytes -= size
                self._cv.notify_all()
            raise
        with self._cv:
            self._counts["acquired"] += 1
            self._counts["mapped"] += 1
            if cls is None:
                self._counts["overflow"] += 1
        return BufferLease(self, b, size)

    def _lease_locked(self, b: _Block, size: int) -> BufferLease:
        self._active += 1
        self._active_bytes += size
        self._counts["acquired"] += 1
        return BufferLease(self, b, size)

    def _exhausted_msg(self, size: int) -> str:
        return (f"buffer pool exhausted: cannot lease {size} bytes ({self._active} active "
                f"leases, {self._held} bytes held, max_bytes={self._max_bytes}, "
                f"max_regions={self._max_regions})")

    def buffer(self, size: int) -> BufferLease:
        """Same as ``acquire(size)``; meant for ``with pool.buffer(n) as lease:``."""
        return self.acquire(size)

    def prewarm(self, size: int, count: int = 1) -> int:
        """Maps (and registers) `count` blocks of `size`'s class ahead of use and caches
        them; returns how many were added (fewer when max_bytes is reached)."""
        cls = self._class_of(int(size))
        if cls is None:
            return 0  # overflow blocks are never cached
        added = 0
        for _ in range(int(count)):
            with self._cv:
                if self._closed:
                    raise RuntimeError("buffer pool is closed")
                if self._max_bytes is not None and self._held + cls > self._max_bytes:
                    break
                self._held += cls
            try:
                b = self._map(cls, cls)
            except BaseException:
                with self._cv:
                    self._held -= cls
                raise
            with self._cv:
                self._free.setdefault(cls, []).append(b)
                self._counts["mapped"] += 1
                self._cv.notify_all()
            added += 1
        return added

    def _give_back(self, b: _Block, size: int) -> None:
        unmap = False
        with self._cv:
            self._active -= 1
            self._active_bytes -= size
            if b.size_class is None or self._closed:
                self._held -= b.cap
                unmap = True
            else:
                self._free.setdefault(b.size_class, []).append(b)
            self._cv.notify_all()
        if unmap:
            self._unmap(b)

    def _orphan(self, b: _Block, size: int) -> None:
        with self._cv:
            self._active -= 1
            self._active_bytes -= size
            self._orphans.append(b)  # stays mapped and counted in _held until close
            self._cv.notify_all()

    def stats(self) -> dict[str, int]:
        """Counters and sizes: active leases/bytes, held and cached bytes, acquired,
        reused, mapped, overflow, waits."""
        with self._cv:
            cached = sum(b.cap for lst in self._free.values() for b in lst)
            return {"active_leases": self._active, "active_bytes": self._active_bytes,
                    "held_bytes": self._held, "cached_bytes": cached, **self._counts}

    def close(self) -> None:
        """Unregisters and unmaps every cached block. Raises RuntimeError while leases
        are active; a second close is a no-op."""
        with self._cv:
            if self._closed:
                return
            if self._active:
                raise RuntimeError(
                    f"cannot close the buffer pool: {self._active} active leases")
            self._closed = True
            blocks = [b for lst in self._free.values() for b in lst]
            self._free.clear()
            self._held = 0
            orphans, self._orphans = self._orphans, []
            self._cv.notify_all()
        for b in blocks:
            self._unmap(b)
        for b in orphans:
            # views may still be alive: unregister, but keep the memory mapped
            if b.registered and self._store is not None:
                try:
                    self._store.unregister_buffer(b.ptr)
                except Exception:  # noqa: BLE001
                    pass

    def __enter__(self) -> "BufferPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


RegisteredBufferPool = BufferPool
