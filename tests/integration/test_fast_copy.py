"""mooncake._fast_copy.concat_arrays_into (the C helper upstream ships next to the
extensions): range selection, every source kind, threads, bounds checks, and
several threads copying at once (the copy releases the GIL)."""
import ctypes
import threading

import numpy as np
import pytest

from mooncake._fast_copy import concat_arrays_into


def test_selected_range_and_return_value():
    arrays = [np.arange(3, dtype=np.uint8), np.arange(4, dtype=np.uint8) + 10,
              np.arange(2, dtype=np.uint8) + 20]
    want = np.concatenate(arrays[1:]).tobytes()
    dst = ctypes.create_string_buffer(len(want))
    assert concat_arrays_into(arrays, ctypes.addressof(dst), len(dst), 1, 2) == len(want)
    assert dst.raw == want
    # clamping as upstream: negative start -> 0, count past the end -> to the end
    dst2 = bytearray(9)
    assert concat_arrays_into(arrays, dst2, 9, -5, 99) == 9
    assert bytes(dst2) == np.concatenate(arrays).tobytes()
    # an empty range copies nothing and does not look at the destination
    assert concat_arrays_into(arrays, 0, 0, 3) == 0
    assert concat_arrays_into([], 0, 0) == 0


def test_source_kinds_and_threads():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    sources = [rng.standard_normal((7, 5)), b"bytes", bytearray(b"ba"), memoryview(b"mv"),
               np.float32(2.5), torch.arange(10, dtype=torch.int16),
               torch.randn(3, 3).to(torch.bfloat16), np.zeros(0), np.arange(12)[None, :],
               rng.integers(0, 255, 100_001, dtype=np.uint8)]
    want = b"".join(
        s.contiguous().view(torch.uint8).numpy().tobytes() if isinstance(s, torch.Tensor)
        else bytes(memoryview(s)) if isinstance(s, (bytes, bytearray, memoryview))
        else np.asarray(s).tobytes() for s in sources)
    for nthreads in (1, 2, 7, 1000):
        dst = np.zeros(len(want) + 10, dtype=np.uint8)
        n = concat_arrays_into(tuple(sources), dst.ctypes.data, dst.nbytes, nthreads=nthreads)
        assert n == len(want) and dst[:n].tobytes() == want and not dst[n:].any()


def test_bounds_and_bad_sources():
    torch = pytest.importorskip("torch")
    two = [np.arange(4, dtype=np.uint8)] * 2
    dst = ctypes.create_string_buffer(7)
    with pytest.raises(ValueError, match="destination buffer too small: need 8 bytes, got 7"):
        concat_arrays_into(two, ctypes.addressof(dst), 7)
    assert dst.raw == b"\0" * 7  # nothing was copied
    with pytest.raises(ValueError, match="larger than the destination buffer"):
        concat_arrays_into(two, bytearray(4), 8)
    with pytest.raises(ValueError, match=r"arrays\[0\] is not C-contiguous"):
        concat_arrays_into([np.arange(8, dtype=np.uint8)[::2]], bytearray(8), 8)
    with pytest.raises(ValueError, match=r"arrays\[1\] is not C-contiguous"):
        concat_arrays_into([b"x", torch.zeros(4, 4).t()], bytearray(100), 100)
    with pytest.raises(TypeError, match=r"arrays\[0\]"):
        concat_arrays_into([object()], bytearray(8), 8)
    with pytest.raises(TypeError, match="writable"):
        concat_arrays_into([b"x"], b"read-only", 1)
    with pytest.raises(TypeError):
        concat_arrays_into(5, bytearray(1), 1)


def test_many_python_threads_copy_at_once():
    # the copy runs without the GIL: several threads copying into their own
    # destinations at once all get their own, complete result
    rng = np.random.default_rng(5)
    srcs = [[rng.integers(0, 255, n, dtype=np.uint8) for n in (1000, 3 << 20, 17)]
            for _ in range(6)]
    dsts = [np.zeros(4 << 20, dtype=np.uint8) for _ in srcs]
    errors = []

    def work(i):
        for _ in range(5):
            n = concat_arrays_into(srcs[i], dsts[i].ctypes.data, dsts[i].nbytes, nthreads=2)
            if dsts[i][:n].tobytes() != np.concatenate(srcs[i]).tobytes():
                errors.append(i)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(srcs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts) and errors == []
