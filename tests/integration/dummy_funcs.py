"""Child-side helpers of test_dummy_client.py (StoreProc(funcs_from="dummy_funcs")): run
inside a dummy-client process, first argument the store."""
import ctypes
import os

from store_proc import value_for


def fn_pool_put_get(store, keys, size):
    """put_from each key from pool memory, then get_into other pool memory; returns
    (put results, get results, all bytes right)."""
    src = store.alloc_from_mem_pool(size * len(keys))
    dst = store.alloc_from_mem_pool(size * len(keys))
    if not src or not dst:
        return None
    for i, k in enumerate(keys):
        ctypes.memmove(src + i * size, value_for(k, size), size)
    puts = store.batch_put_from(keys, [src + i * size for i in range(len(keys))],
                                [size] * len(keys))
    gets = store.batch_get_into(keys, [dst + i * size for i in range(len(keys))],
                                [size] * len(keys))
    ok = all(ctypes.string_at(dst + i * size, size) == value_for(k, size)
             for i, k in enumerate(keys))
    return puts, gets, ok


def fn_pool_read(store, key, size):
    """get_into pool memory; (result, the bytes are value_for(key, size))."""
    dst = store.alloc_from_mem_pool(size)
    n = store.get_into(key, dst, size)
    return n, n == size and ctypes.string_at(dst, size) == value_for(key, size)


def fn_pid(store):
    return os.getpid()


def fn_raw_roundtrip(store, key, data):
    """put_from / get_into with memory outside the pool (the bytes travel inline)."""
    src = ctypes.create_string_buffer(data, len(data))
    dst = ctypes.create_string_buffer(len(data))
    p = store.batch_put_from([key], [ctypes.addressof(src)], [len(data)])
    g = store.get_into(key, ctypes.addressof(dst), len(data))
    return p, g, dst.raw == data


def fn_multi_roundtrip(store, key, sizes, in_pool=True):
    """batch_put_from_multi_buffers of value_for(key) cut into `sizes` pieces, then
    batch_get_into_multi_buffers into pieces of the same sizes; pool memory or ctypes
    memory (in_pool False: the bytes travel inline). (put, get, bytes right)."""
    total = sum(sizes)
    data = value_for(key, total)
    keep = []

    def bufs():
        if in_pool:
            base = store.alloc_from_mem_pool(total)
            return [base + sum(sizes[:i]) for i in range(len(sizes))]
        out = [ctypes.create_string_buffer(s) for s in sizes]
        keep.extend(out)
        return [ctypes.addressof(b) for b in out]
    src = bufs()
    pos = 0
    for p, s in zip(src, sizes):
        ctypes.memmove(p, data[pos:pos + s], s)
        pos += s
    put = store.batch_put_from_multi_buffers([key], [src], [sizes])
    dst = bufs()
    get = store.batch_get_into_multi_buffers([key], [dst], [sizes])
    back = b"".join(ctypes.string_at(p, s) for p, s in zip(dst, sizes))
    return put, get, back == data


def fn_multi_too_small(store, key, cap):
    dst = store.alloc_from_mem_pool(cap)
    return store.batch_get_into_multi_buffers([key, "absent-key"], [[dst], [dst]],
                                              [[cap], [cap]])


def fn_replica_desc(store, key):
    """get_replica_desc as plain data: [(is_memory, endpoint, size)]."""
    return [(r.is_memory_replica(),
             r.get_memory_descriptor().buffer_descriptor.transport_endpoint,
             r.get_memory_descriptor().buffer_descriptor.size)
            for r in store.get_replica_desc(key)]


def fn_batch_replica_desc(store, keys):
    return {k: len(v) for k, v in store.batch_get_replica_desc(keys).items()}


def fn_get_buffer(store, key):
    """(size(), bytes through the buffer protocol, ptr() non-zero) or None."""
    h = store.get_buffer(key)
    if h is None:
        return None
    return h.size(), bytes(memoryview(h)), h.ptr() != 0, len(h)


def fn_tensor_roundtrip(store):
    """The tensor calls on a dummy: put/get, batch, TP shards, into pool memory, from pool
    memory, parallelism IO. Returns a dict of checks (all True when right)."""
    import torch
    out = {}
    a = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    b = torch.arange(10, dtype=torch.int64)
    out["put"] = store.put_tensor("t-a", a) == 0
    out["get"] = torch.equal(store.get_tensor("t-a"), a)
    out["miss"] = store.get_tensor("t-absent") is None
    out["batch"] = (store.batch_put_tensor(["t-b1", "t-b2"], [a, b]) == [0, 0] and
                    all(torch.equal(x, y) for x, y in
                        zip(store.batch_get_tensor(["t-b1", "t-b2"]), [a, b])))
    out["mismatch"] = store.batch_put_tensor(["x"], [a, b]) == [-600, -600]
    out["upsert"] = (store.upsert_tensor("t-a", b) == 0 and
                     torch.equal(store.get_tensor("t-a"), b))
    out["tp"] = store.put_tensor_with_tp("t-tp", a, tp_size=2, split_dim=1) == 0
    out["tp_shard"] = torch.equal(store.get_tensor_with_tp("t-tp", tp_rank=1, tp_size=2),
                                  a[:, 3:])
    out["tp_bad_split"] = store.put_tensor_with_tp("t-tp5", a, tp_size=5) == -600
    cap = 4096
    dst = store.alloc_from_mem_pool(cap)
    t = store.get_tensor_into("t-b1", dst, cap)
    out["into"] = t is not None and torch.equal(t, a)
    # an object already in pool memory stored again from there (no copy in the dummy)
    out["from"] = (store.put_tensor_from("t-from", dst, store.get_size("t-b1")) == 0 and
                   torch.equal(store.get_tensor("t-from"), a))
    out["from_invalid"] = store.put_tensor_from("t-bad", dst + 1, 100) == -600
    out["par"] = store.put_tensor_with_parallelism("t-par", a) == 0 and torch.equal(
        store.get_tensor_with_parallelism("t-par"), a)
    return out


def fn_tensor_shape(store, key):
    t = store.get_tensor(key)
    return None if t is None else list(t.shape)
