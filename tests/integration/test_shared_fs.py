"""Shared-FS DISK replicas (issue 14 item 2, docs/ssd-tier.md "Shared-FS DISK replicas"):
mooncake_master --root_fs_dir; every object put is also written, by the client whose
segment holds it, to one file under <root_fs_dir>/<cluster_id>; the master records a
DISK replica; when no memory replica is left (evicted, or its owner died) any client
reads the file directly, verified. Real processes: a mooncake_master, store clients in
their own processes, a temporary directory as the shared file system."""
import os
import struct
import subprocess

import pytest

from conftest import free_port, tool, wait_until
from store_proc import StoreCluster, StoreProc

OBJ = 256 << 10          # bytes per object
SEG = 4 << 20            # the writer's segment: 16 objects
N = 24                   # more than the segment holds: eviction must keep them on disk
KEYS = [f"sfs-{i:03d}" for i in range(N)]
ENV = {"MC_OFFLOAD_POLL_MS": "50", "MC_STORE_HEARTBEAT_MS": "200"}
CLUSTER = "sfs_test"
HDR = 48


def cluster(spawn, root, *flags):
    # short read leases: a get leases the object and a leased object is not evicted
    return StoreCluster(spawn, f"--root_fs_dir={root}", f"--cluster_id={CLUSTER}",
                        "--default_kv_lease_ttl=200", *flags)


def client(c, segment=SEG, root_dir=None, expect_rc=0):
    args = c.setup_args(segment=segment, local_buffer=8 << 20)
    d = {"local_hostname": args[0], "metadata_server": args[1],
         "global_segment_size": segment, "local_buffer_size": 8 << 20, "protocol": "tcp",
         "rdma_devices": "", "master_server_addr": c.addr}
    if root_dir is not None:
        d["storage_root_dir"] = str(root_dir)
    p = StoreProc((d,), env=ENV, funcs_from="shared_fs_funcs")
    assert p.setup_rc == expect_rc
    return p


def files(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".mcsf")) if os.path.isdir(d) else []


def header(path):
    with open(path, "rb") as f:
        h = f.read(HDR)
        magic, ver, flags, klen, _sum, vlen, _ck = struct.unpack("<4sHHIIQQ", h[:32])
        key = f.read(klen)
    return magic, ver, flags, key.decode(), vlen


def test_put_evict_kill_corrupt_remove(spawn, tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    fsdir = root / CLUSTER
    c = cluster(spawn, root, "--client_ttl=2")
    w = client(c)                       # the writer: its segment holds the objects
    r = client(c, segment=0, root_dir=root)  # a reader with no segment, same mount
    try:
        # more objects than the segment holds: eviction drops memory replicas of objects
        # already in the shared directory and keeps them alive (a put retries while the
        # pool is full of objects whose write is still pending)
        assert w.fn("put_until", KEYS, OBJ, 60) == [0] * N
        wait_until(lambda: len(files(fsdir)) >= N, 30, "a file per object")
        paths = wait_until(lambda: (lambda d: d if len(d) == N else None)(
            r.fn("disk_paths", KEYS)), 30, "a DISK replica per object", step=0.2)
        for k, (path, size) in paths.items():
            assert os.path.dirname(path) == str(fsdir) and size == OBJ
            assert os.path.getsize(path) == HDR + len(k) + OBJ
            assert header(path) == (b"MCSF", 1, 0, k, OBJ)
        assert not [f for f in os.listdir(fsdir) if f.startswith(".tmp")]
        # some objects are on disk only (their memory replica was evicted) and read back
        wait_until(lambda: any(r.fn("kinds", k) == ["disk"] for k in KEYS), 30,
                   "an object whose memory replica was evicted", step=0.2)
        assert r.fn("check", KEYS, OBJ) == ["ok"] * N
        # remove deletes the file (a DELETE task run by a client that polls: the writer)
        gone = KEYS[0]
        # (the get above leased it for 200 ms)
        wait_until(lambda: r.call("remove", gone) == 0, 10, "the remove")
        wait_until(lambda: not os.path.exists(paths[gone][0]), 30, "the removed file gone")
        # the owner dies: after client_ttl its memory replicas are gone, the files stay
        w.kill()
        rest = KEYS[1:]
        wait_until(lambda: all(r.fn("kinds", k) == ["disk"] for k in rest), 30,
                   "only DISK replicas left", step=0.5)
        assert r.fn("check", rest, OBJ) == ["ok"] * len(rest)
        # a flipped byte in a file: that get fails cleanly, the others still read
        bad = rest[3]
        with open(paths[bad][0], "r+b") as f:
            f.seek(HDR + len(bad) + OBJ // 2)
            b = f.read(1)
            f.seek(HDR + len(bad) + OBJ // 2)
            f.write(bytes([b[0] ^ 0xFF]))
        assert r.fn("check", [bad], OBJ) == ["miss"]
        others = [k for k in rest if k != bad]
        assert r.fn("check", others, OBJ) == ["ok"] * len(others)
        # a torn file (cut short) fails cleanly too
        torn = rest[4]
        with open(paths[torn][0], "r+b") as f:
            f.truncate(HDR + len(torn) + OBJ // 3)
        assert r.fn("check", [torn], OBJ) == ["miss"]
        # a fresh client (another process) reads them as well
        r2 = client(c, segment=0)
        try:
            assert r2.fn("check", others[:3], OBJ) == ["ok"] * 3
            assert r2.fn("check", [bad, torn], OBJ) == ["miss"] * 2
        finally:
            r2.close()
        m = c.master.metrics()
        assert m["master_offload_successes_total"] >= N
    finally:
        w.close()
        r.close()


def test_client_checks_the_shared_directory(spawn, tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    c = cluster(spawn, root)
    # storage_root_dir naming another directory: setup fails (the master's path wins)
    other = tmp_path / "other"
    other.mkdir()
    client(c, root_dir=other, expect_rc=-600)
    # the same directory through another path (a symlink) is fine
    link = tmp_path / "link"
    link.symlink_to(root)
    client(c, root_dir=link).close()
    # a master whose directory is not mounted here: setup fails with a clear error
    c2 = cluster(spawn, tmp_path / "missing" / "root")
    client(c2, expect_rc=-1101)
    # a client-owned disk tier on a --root_fs_dir master: refused (one tier at a time)
    args = c.setup_args(segment=SEG, local_buffer=8 << 20) + (None, True, str(tmp_path / "d"))
    assert StoreProc(args, env=ENV).setup_rc == -600
    # storage_root_dir on a master without --root_fs_dir: refused too
    c3 = StoreCluster(spawn)
    client(c3, root_dir=root, expect_rc=-600)


def test_master_root_fs_dir_flag_checks(tmp_path):
    def run(*flags):
        return subprocess.run([tool("mooncake_master"), "--rpc_address=127.0.0.1",
                               f"--rpc_port={free_port()}", *flags], capture_output=True,
                              text=True, timeout=30)

    r = run("--root_fs_dir=relative/dir")
    assert r.returncode == 2 and "absolute" in r.stderr, r.stderr
    r = run(f"--root_fs_dir={tmp_path}", "--enable_offload=true")
    assert r.returncode == 2 and "--enable_offload" in r.stderr, r.stderr
    # the cluster id names the directory: no way out of the root (before: checked with
    # --enable_ha only, so "../../etc" sent the clients' files outside it)
    for bad in ("..", "a/b", "../../etc", ""):
        r = run(f"--root_fs_dir={tmp_path}", f"--cluster_id={bad}")
        assert r.returncode == 2 and "--cluster_id" in r.stderr, (bad, r.stderr)


def test_mooncake_config_storage_root_dir(tmp_path, monkeypatch):
    from mooncake.mooncake_config import MooncakeConfig

    base = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
            "master_server_address": "127.0.0.1:50051"}
    c = MooncakeConfig.from_dict({**base, "storage_root_dir": str(tmp_path)})
    assert c.storage_root_dir == str(tmp_path)
    assert c.to_setup_dict()["storage_root_dir"] == str(tmp_path)
    assert "storage_root_dir" not in MooncakeConfig.from_dict(base).to_setup_dict()
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    monkeypatch.setenv("MOONCAKE_MASTER", "127.0.0.1:50051")
    monkeypatch.setenv("MOONCAKE_STORAGE_ROOT_DIR", str(tmp_path))
    assert MooncakeConfig.load_from_env().storage_root_dir == str(tmp_path)
