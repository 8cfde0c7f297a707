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
