"""Child-side helpers of test_shared_fs.py (run inside a StoreProc with the store first)."""
from ssd_funcs import fn_check, fn_put_until  # noqa: F401 - offered to StoreProc.fn


def fn_kinds(store, key):
    """The replica kinds of key, sorted: 'memory' / 'disk' (shared FS) / 'local_disk'."""
    out = []
    for r in store.get_replica_desc(key):
        if r.is_memory_replica():
            out.append("memory")
        elif r.is_disk_replica():
            assert not r.is_local_disk_replica()
            out.append("disk")
        elif r.is_local_disk_replica():
            out.append("local_disk")
    return sorted(out)


def fn_disk_paths(store, keys):
    """{key: (file_path, object_size)} of the keys' DISK replicas."""
    out = {}
    for k in keys:
        for r in store.get_replica_desc(k):
            if r.is_disk_replica():
                d = r.get_disk_descriptor()
                out[k] = (d.file_path, d.object_size)
    return out
