"""Child-side helpers (``fn_*``, run in a StoreProc through ``funcs_from``) and shared
sample data of the tests of upstream's Python modules (test_structured_store.py,
test_buffer_pool.py)."""
import threading

import numpy as np


def nested_sample(seed=0):
    """A nested structure of tensors and numpy arrays with ragged shapes, deterministic
    for `seed`: dict/list/tuple nesting, string/int/odd keys, ragged lists of arrays and
    tensors, an object ndarray of rows, scalars, bytes, empty and 0-d arrays."""
    import torch

    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    return {
        "tokens": rng.integers(0, 50000, size=(6, 17), dtype=np.int64),
        "ragged_rows": [rng.standard_normal(n).astype(np.float32) for n in (1, 7, 0, 33)],
        "ragged_tensors": (torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g)),
        "obj_rows": np.array([np.arange(n, dtype=np.int32) for n in (2, 9, 4)] + [None],
                             dtype=object)[:3],
        "layers": [
            {"k": torch.randn(2, 3, 5, generator=g).to(torch.bfloat16),
             "v": torch.arange(12, dtype=torch.int16).reshape(3, 4)},
            {"k": torch.zeros(0, 8), "v": torch.tensor(3.5, dtype=torch.float64)},
        ],
        "mixed": [np.float16(1.5), np.array(2.0), np.arange(6)[::2], "text", None, True, 7, (b"raw bytes", bytearray(b"ba"))],
        "weird/key with %, @ and ~": {1: np.eye(3), "1": np.ones((2, 2), dtype=np.uint8)},
        "big": rng.standard_normal((300, 1000)).astype(np.float32),  # 1.2 MB: several chunks
    }


def same(a, b):
    """Deep equality of nested samples: types, dtypes, shapes and bytes."""
    import torch

    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        if a.dtype == object:
            return a.shape == b.shape and all(same(x, y) for x, y in zip(a, b))
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, torch.Tensor):
        return (a.dtype == b.dtype and a.shape == b.shape and
                a.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() ==
                b.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return a == b


def fn_structured_put(store, seed, prefix, chunk_bytes):
    """Puts nested_sample(seed) with put_object; returns the manifest key."""
    from mooncake.structured_object_store import MooncakeBundleTransfer

    t = MooncakeBundleTransfer(store, key_prefix=prefix, default_chunk_bytes=chunk_bytes)
    try:
        return t.put_object(nested_sample(seed)).manifest_key
    finally:
        t.close()


def fn_structured_check(store, manifest_key, seed, prefix):
    """Reads the object at manifest_key; True when it equals nested_sample(seed)."""
    from mooncake.structured_object_store import MooncakeBundleTransfer

    t = MooncakeBundleTransfer(store, key_prefix=prefix)
    try:
        return same(t.get_object({"manifest_key": manifest_key}), nested_sample(seed))
    finally:
        t.close()


def fn_pool_threads(store, threads, rounds, size):
    """`threads` threads share one BufferPool: each leases, fills with its pattern,
    put_from's, get_into's a second lease and compares; returns the error list."""
    from mooncake.buffer_pool import BufferPool

    pool = BufferPool(store, 8 * size, min_size_class=4096, max_regions=threads)
    errors = []

    def work(tid):
        for r in range(rounds):
            key = f"pool-{id(pool)}-{tid}-{r}"
            pattern = bytes([(tid * 31 + r) % 251]) * size
            with pool.acquire(size, timeout=60) as src:
                src.buffer[:] = pattern
                rc = store.put_from(key, src.ptr, size)
            if rc != 0:
                errors.append((tid, r, "put_from", rc))
                continue
            with pool.acquire(size, timeout=60) as dst:
                n = store.get_into(key, dst.ptr, dst.size)
                ok = n == size and bytes(dst.buffer) == pattern
            if not ok:
                errors.append((tid, r, "get_into", n))
            store.remove(key, True)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    errors += [("thread stuck",) for t in ts if t.is_alive()]
    stats = pool.stats()
    pool.close()
    return errors, stats


def fn_dataproto_fields(store, prefix, handle):
    """Reads an exported DataProto handle; the sorted names of the fields it got (each
    with 4 rows)."""
    from mooncake.structured_object_store import MooncakeBundleTransfer

    t = MooncakeBundleTransfer(store, key_prefix=prefix)
    try:
        out = t.get_dataproto(handle)
        fields = {**out.batch, **out.non_tensor_batch}
        assert all(len(v) == 4 for v in fields.values())
        return sorted(fields)
    finally:
        t.close()
