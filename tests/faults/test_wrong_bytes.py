"""Issue 10, faults 1 and 2: the two ways an acknowledged object read back wrong bytes.

Both are driven exactly as the issue describes them, a few rounds per test (each round
with fresh keys), and every value is self-describing (faults/values.py), so a reader
tells its own bytes from another key's or a mix without any shared state. Waits are on
conditions (the master's view of a key, the kernel's socket queues), each with a deadline.
"""
import os
import time


from faults import harness
from faults.harness import MiB

ROUNDS = int(os.environ.get("MC_FAULTS_REPRO_ROUNDS", "3"))
BAD = ("wrong_bytes", "other_key")


def _summary(verdicts):
    return {v: sum(1 for x in verdicts if x[0] == v) for v in {x[0] for x in verdicts}}


def test_timed_out_write_lands_late(cluster):
    # node A alone holds the space, so the second client's puts must reuse what the
    # timed-out puts were given; A's segment fits both sets (a fix that quarantines the
    # revoked space still has room for the new puts)
    c = cluster("--client_ttl=30", "--default_kv_lease_ttl=1000", nodes=1, segment=20 * MiB)
    a = c.nodes[0]
    a_ports = harness.listening_ports(a.pid)
    w = c.client("W", {"MC_FORCE_TCP": "1", "MC_TRANSFER_TIMEOUT": "2"})
    o = c.client("O")  # same-host memory where it can: its puts need nothing from A's threads
    r = c.client("R", {"MC_FORCE_TCP": "1"})
    for p in (w, o, r):
        assert p.fn("warm_peers", [a.hostname], p.name) == [(0, True)]
    bad_rounds, details = 0, []
    for rnd in range(ROUNDS):
        wkeys = [f"late-w{rnd}-{i}" for i in range(8)]
        okeys = [f"late-o{rnd}-{i}" for i in range(8)]
        a.stop()
        try:
            w.send_fn("put_batch_specs", [(k, 1, "W", MiB) for k in wkeys], 1, a.hostname)
            rc_w = w.result(timeout=30)
            # the timed-out puts are revoked: nothing of them is readable
            assert all(harness.query_key(c, k)[0] == 404 for k in wkeys), rc_w
            o.send_fn("put_specs", [(k, 2, "O", MiB) for k in okeys], 1, a.hostname)
            rc_o = o.result(timeout=30)
        finally:
            a.cont()
        acked = [k for k, rc in zip(okeys, rc_o) if rc == 0]
        # A reads whatever the kernel still holds for it; then every acknowledged key
        assert harness.wait_drained(a_ports, 20), harness.tcp_queues(a_ports)
        got = r.fn("check_keys", acked) + o.fn("check_keys", acked)
        wrong = [(k, v) for k, v in zip(acked * 2, got) if v[0] in BAD]
        if wrong:
            bad_rounds += 1
            details.append((rnd, rc_w, _summary(got), wrong[:2]))
        w.fn("remove_keys", wkeys)
        o.fn("remove_keys", okeys)
        assert harness.wait_space_free(c), "the removed keys' space did not come back"
    assert bad_rounds == 0, (f"{bad_rounds} of {ROUNDS} rounds read back wrong bytes for "
                             f"acknowledged keys: {details}")


def test_paused_writer_resumes_after_discard(cluster):
    # small discard and release timeouts (defaults 30 s and 600 s): W2 may replace W1's put
    # after 2 s and W1's space is given back after 3 s; a late write must be harmless anyway
    c = cluster("--client_ttl=30", "--put_start_discard_timeout_sec=2",
                "--put_start_release_timeout_sec=3", "--default_kv_lease_ttl=1000", nodes=1,
                segment=40 * MiB)
    a = c.nodes[0]
    a_ports = harness.listening_ports(a.pid)
    w2 = c.client("W2")
    r = c.client("R", {"MC_FORCE_TCP": "1"})
    for p in (w2, r):
        assert p.fn("warm_peers", [a.hostname], p.name) == [(0, True)]
    bad_rounds, details = 0, []
    for rnd in range(ROUNDS):
        key = f"paused-{rnd}"
        w1 = c.client(f"W1-{rnd}", {"MC_FORCE_TCP": "1"})
        assert w1.fn("warm_peers", [a.hostname], w1.name) == [(0, True)]
        # hold W1's 16 MiB put mid-way: A stops reading, W1 starts the put and fills the
        # socket buffers; then W1 stops and A drains the part that was sent
        a.stop()
        try:
            w1.send_fn("put_specs", [(key, 1, w1.name, 16 * MiB)], 1, a.hostname)
            started = harness.wait_until(lambda: harness.query_key(c, key)[0] == 200 or
                                         w1.ready(), 15)
            assert started and not w1.ready(), (rnd, "W1's put did not start",
                                                w1.ready() and w1.result(), c.segments())
            assert harness.wait_until(lambda: harness.bytes_in_flight(a_ports) > 0, 15), rnd
            w1.stop()
        finally:
            a.cont()
        try:
            assert harness.wait_drained(a_ports, 20), harness.tcp_queues(a_ports)
            # W2 puts the same key once W1's put is past the discard timeout, reads it
            rc, first, _ = w2.fn("put_retry_until", key, 2, "W2", 16 * MiB,
                                 time.time() + 20, a.hostname, timeout=40)
            assert rc == 0 and first == "ok", (rc, first)
        finally:
            w1.cont()
        # W1 goes on with its put (its remaining slices go out) until its put ends
        w1_rc = w1.result(timeout=60)
        assert harness.wait_drained(a_ports, 20), harness.tcp_queues(a_ports)
        got = w2.fn("check_keys", [key]) + r.fn("check_keys", [key])
        if any(v[0] != "ok" or v[1] != [2, "W2"] for v in got):
            bad_rounds += 1
            details.append((rnd, w1_rc, got))
        w2.fn("remove_keys", [key])
        w1.close()
        assert harness.wait_space_free(c), "the removed key's space did not come back"
    assert bad_rounds == 0, (f"{bad_rounds} of {ROUNDS} rounds: W2's acknowledged object "
                             f"did not read back as W2's bytes: {details}")


LEASE_SECONDS = float(os.environ.get("MC_FAULTS_LEASE_SECONDS", "4"))


def test_reads_at_lease_end_are_never_wrong(cluster):
    # a 2 ms read lease: almost every read ends near or past it, while two writers remove
    # each key as soon as its lease is over and put a new version, so the space a reader
    # is still reading is freed and refilled by another key a millisecond later; a read
    # must then fail (LEASE_EXPIRED), never return those bytes. (The client trusts a read
    # only while now + 1 < t0 + TTL, src/client/internal.h mc__lease_over: with a 1 ms
    # lease no read could succeed.)
    c = cluster("--default_kv_lease_ttl=2", nodes=1, segment=3 * MiB)
    a = c.nodes[0]
    size = 64 * 1024
    sets = {"Wt": [f"lease-t-{i}" for i in range(12)], "Ws": [f"lease-s-{i}" for i in range(12)]}
    keys = sets["Wt"] + sets["Ws"]
    writers = [c.client("Wt", {"MC_FORCE_TCP": "1"}), c.client("Ws")]
    readers = [c.client("Rt", {"MC_FORCE_TCP": "1"}), c.client("Rs"),
               c.client("Rb", {"MC_FORCE_TCP": "1"}), c.client("Rbs")]
    for p in writers + readers:  # a first read may outlast the lease (LEASE_EXPIRED): again
        assert harness.wait_until(
            lambda: p.fn("warm_peers", [a.hostname], p.name) == [(0, True)], 20), p.name
    stop_at = time.time() + LEASE_SECONDS
    for w in writers:
        w.send_fn("churn_keys", sets[w.name], w.name, size, stop_at)
    for r in readers:
        r.send_fn("read_keys_loop", keys, stop_at, r.name.startswith("Rb"))
    wrote = [w.result(timeout=LEASE_SECONDS + 30) for w in writers]
    read = [r.result(timeout=LEASE_SECONDS + 30) for r in readers]
    # the run raced: keys were freed and put again while every reader read them
    assert all(x["puts"] > len(sets["Wt"]) and x["removed"] > 0 for x in wrote), wrote
    # and reads succeeded over each path (TCP: Rt, Rb; same host: Rs, Rbs), so the check
    # below saw bytes returned near the lease's end. Not every reader: a batch of 24 x
    # 64 KiB over TCP can outlast a 2 ms lease every time on a loaded 2-CPU box (CI saw
    # Rb at 0 of 58,128 while the others succeeded); each of its reads then failed,
    # which is right, and it still counts toward the wrong-bytes check
    assert all(x["reads"] > 0 for x in read), read
    assert read[0]["ok"] + read[2]["ok"] > 0 and read[1]["ok"] + read[3]["ok"] > 0, read
    bad = [(r.name, x["wrong_bytes"], x["other_key"], x["wrong"]) for r, x in zip(readers, read)
           if x["wrong_bytes"] or x["other_key"]]
    assert not bad, f"reads returned bytes that are not one put of their key: {bad}; {wrote}"
