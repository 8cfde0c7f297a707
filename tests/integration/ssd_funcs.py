"""Child-side helpers of test_ssd_tier.py (run inside a StoreProc with the store first)."""
import time

from store_proc import value_for


def fn_put_until(store, keys, size, timeout):
    """put(key, value_for(key, size)) for each key, retrying a put refused for space
    (the master keeps objects in memory until their owner confirmed the disk copy);
    returns the last code of each key."""
    out = []
    deadline = time.time() + timeout
    for k in keys:
        v = value_for(k, size)
        rc = store.put(k, v)
        while rc != 0 and time.time() < deadline:
            time.sleep(0.05)
            rc = store.put(k, v)
        out.append(rc)
    return out


def fn_kinds(store, key):
    """The replica kinds of key: a sorted list of 'memory' / 'local_disk'."""
    out = []
    for r in store.get_replica_desc(key):
        if r.is_memory_replica():
            out.append("memory")
        elif r.is_local_disk_replica():
            assert not r.is_disk_replica()
            d = r.get_disk_descriptor()
            out.append("local_disk")
            assert d.object_size > 0
    return sorted(out)


def fn_disk_only(store, keys):
    """The keys whose only replica is LOCAL_DISK."""
    return [k for k in keys if fn_kinds(store, k) == ["local_disk"]]


def fn_disk_owners(store, keys):
    """{key: the owner's segment name} of the keys whose only replica is LOCAL_DISK."""
    out = {}
    for k in keys:
        reps = store.get_replica_desc(k)
        if len(reps) == 1 and reps[0].is_local_disk_replica():
            out[k] = reps[0].get_disk_descriptor().file_path
    return out


def fn_check(store, keys, size):
    """For each key: 'ok' (right bytes), 'miss' (b'') or 'WRONG'."""
    out = []
    for k in keys:
        v = store.get(k)
        out.append("miss" if v == b"" else ("ok" if v == value_for(k, size) else "WRONG"))
    return out
