"""Group commit of the mutation log with --oplog_sync=fsync (docs/ha.md "Group commit and
what --oplog_sync promises"; src/master/persist.h "deferred acknowledgements"): a real
master with one RPC thread, several mooncake_master_ctl clients (each its own
connection, through the C client library) putting at once. A put_end's reply is kept by
the RPC server until the log writer fdatasync'ed its record, so the RPC thread goes on
taking other clients' requests meanwhile: every put is acknowledged, the master counts
the acknowledgements it deferred, and after kill -9 a restore serves every acknowledged
put. The fsyncs per put are printed from the master's counters (/metrics), not asserted:
how many puts share a flush depends on the scheduling of the box."""
import json
import signal
import subprocess

from conftest import free_port, rpc_connect, tool
from mc_master import (OK, OP_PING, OP_PUT_START, Ctl, Master, decode_fields, frame, pb_ld,
                       pb_uuid, ping_body, recv_frame, segment, zigzag)

OP_PUT_END, OP_EXIST_KEY = 21, 50   # proto/master.proto enum Opcode

CLIENTS = 8
PUTS = 40   # per client


def _flags(d, *more):
    return ("--enable_snapshot", f"--snapshot_backup_dir={d}", "--oplog_sync=fsync",
            "--rpc_thread_num=1", "--client_ttl=60", "--enable_metric_reporting=false",
            *more)


def _run_clients(spawn, addr, n_clients, n_puts):
    """n_clients ctl processes, each fed all its commands at once (so the clients run
    concurrently, each one request at a time on its own connection); returns the keys
    and every result line."""
    procs, keys = [], []
    for c in range(n_clients):
        ks = [f"gc-{c}-{i}" for i in range(n_puts)]
        keys += ks
        lines = []
        for k in ks:
            lines.append(json.dumps(["put_start", k, 4096]))
            lines.append(json.dumps(["put_end", k]))
        p = spawn([tool("mooncake_master_ctl"), f"--master={addr}", "--rpc_timeout_ms=30000",
                   f"--client_id={c + 100}-{c + 200}"],
                  stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
        p.stdin.write(("\n".join(lines) + "\n").encode())
        p.stdin.close()
        procs.append(p)
    results = []
    for p in procs:
        out = p.stdout.read().decode()
        assert p.wait(timeout=120) == 0
        results += [json.loads(line) for line in out.splitlines()]
    return keys, results


def test_fsync_group_commit_concurrent_puts_survive_kill9(spawn, tmp_path):
    d = str(tmp_path / "snap")
    port = free_port()
    m = Master(spawn, *_flags(d), rpc_port=port)
    owner = Ctl(spawn, m.addr, client_id="1-2")
    seg = segment(id="c-d", size=64 << 20)
    assert owner("mount", seg)["status"] == OK
    before = m.metrics()
    keys, results = _run_clients(spawn, m.addr, CLIENTS, PUTS)
    assert len(results) == 2 * CLIENTS * PUTS
    assert all(r["status"] == OK for r in results), [r for r in results if r["status"]][:5]
    after = m.metrics()
    puts = CLIENTS * PUTS
    fsyncs = after["master_oplog_fsyncs_total"] - before["master_oplog_fsyncs_total"]
    deferred = after["master_oplog_deferred_acks_total"] - \
        before["master_oplog_deferred_acks_total"]
    print(f"\n--oplog_sync=fsync, {CLIENTS} clients x {PUTS} puts, 1 RPC thread: "
          f"{fsyncs:.0f} fsyncs for {puts} puts ({fsyncs / puts:.2f} per put), "
          f"{deferred:.0f} acknowledgements deferred to the log writer")
    assert deferred > 0          # the replies waited on the log, not on the RPC thread
    assert 0 < fsyncs            # and the records were flushed
    owner.close()
    m.stop(sig=signal.SIGKILL)

    m2 = Master(spawn, *_flags(d, "--enable_snapshot_restore"), rpc_port=port)
    owner = Ctl(spawn, m2.addr, client_id="1-2")
    try:
        assert owner("remount", [seg])["status"] == OK
        r = owner("batch_get", keys, timeout=60)
        assert r["status"] == OK, r
        bad = [(k, it["status"]) for k, it in zip(keys, r["items"]) if it["status"] != OK]
        assert not bad, bad[:10]
    finally:
        owner.close()


def test_kept_replies_leave_in_request_order(spawn, tmp_path):
    """Requests pipelined on one connection: a put_end's reply is kept until its record
    is fsync'ed, and the replies behind it (an exist of the key, the next put, a ping)
    wait behind it, so the client sees them in request order."""
    d = str(tmp_path / "snap")
    m = Master(spawn, *_flags(d))
    owner = Ctl(spawn, m.addr, client_id="3-4")
    assert owner("mount", segment(size=16 << 20))["status"] == OK
    cid = pb_uuid(0x77, 0x88)
    reqs = []
    for k in (b"pipe-1", b"pipe-2", b"pipe-3"):
        reqs.append((OP_PUT_START, pb_ld(1, cid) + pb_ld(2, k) + bytes([3 << 3]) + b"\x80\x20"))
        reqs.append((OP_PUT_END, pb_ld(1, cid) + pb_ld(2, k)))
        reqs.append((OP_EXIST_KEY, pb_ld(2, k)))
    reqs.append((OP_PING, ping_body(0x77, 0x88)))
    try:
        with rpc_connect(m.rpc_port) as sock:
            sock.sendall(b"".join(frame(op, body, request_id=i + 1)
                                  for i, (op, body) in enumerate(reqs)))
            got = [recv_frame(sock) for _ in reqs]
        ids = [hdr[6] for hdr, _ in got]
        assert ids == list(range(1, len(reqs) + 1)), ids
        for (op, _), (hdr, body) in zip(reqs, got):
            assert hdr[4] == 0, hdr
            if op != OP_PING:
                assert zigzag(decode_fields(body).get(1, 0)) == OK, (op, body)
            if op == OP_EXIST_KEY:
                assert decode_fields(body).get(2) == 1   # its put_end was answered first
        assert m.metrics()["master_oplog_deferred_acks_total"] > 0
    finally:
        owner.close()
