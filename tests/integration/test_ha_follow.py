"""Clients follow the HA leader by watching its key, not only when a call fails (issue 12
item 2: "follow it on change (watch, with a poll as fallback)"; docs/ha.md "How clients
follow the leader"). Loopback, a real etcd and a real redis-server, two HA masters.

- an idle client (a ``mooncake_master_ctl`` given the locator, which sends nothing after
  its first ping and has no heartbeat) learns the new leader after a graceful stop of
  the old one: its log says ``the leader is <new> (view <new view>), found by the
  watch`` (etcd) / ``found by the poll`` (Redis), the follow thread's report, before the
  client made any call; its next ping then goes to the new leader;
- an idle store whose heartbeat is 60 s remounts its segment on the new leader
  (``--ha_sync=none``: the new leader starts empty) without a call and long before its
  next heartbeat: the new leader's ``master_segment_count`` becomes 1 (the watch ran
  the store's leader hook, which pings at once and remounts);
- an unreachable etcd: the wait for a leader prints a bounded number of warnings (one
  per endpoint per 5 s) and one summary line, not one per lookup.

Every wait is bounded (wait_until); nothing sleeps in place of a condition.
"""
import os
import re
import subprocess

import pytest

from conftest import free_port, tool, wait_until
from mc_master import Master
from test_ha_master import Backend, _json

TTL = 2


@pytest.fixture(params=["etcd", "redis"])
def backend(request):
    return Backend(request.param, request)


def _pair(spawn, backend, *extra):
    common = ("--enable_ha", "--ha_lease_ttl_sec=%d" % TTL, "--enable_metric_reporting=false",
              *extra)
    m1 = Master(spawn, *common, *backend.flags)
    wait_until(lambda: _json(m1, "/role")["role"] == "leader", 20, "m1 elected")
    m2 = Master(spawn, *common, *backend.flags)
    wait_until(lambda: _json(m2, "/role")["role"] == "standby", 20, "m2 standby")
    return m1, m2


class LoggedCtl:
    """A mooncake_master_ctl whose log (stderr) goes to a file the test reads."""

    def __init__(self, spawn, tmp_path, master):
        import json
        import select
        self._json, self._select = json, select
        self.log = tmp_path / "ctl.log"
        self.err = open(self.log, "wb")
        self.proc = spawn([tool("mooncake_master_ctl"), f"--master={master}",
                           "--rpc_timeout_ms=20000"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=self.err)

    def __call__(self, *cmd, timeout=30.0):
        self.proc.stdin.write((self._json.dumps(list(cmd)) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = self._select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"ctl: no answer to {cmd} within {timeout} s"
        return self._json.loads(self.proc.stdout.readline())

    def text(self):
        return self.log.read_text(errors="replace")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.err.close()


def test_idle_client_follows_by_watch(spawn, backend, tmp_path):
    m1, m2 = _pair(spawn, backend)
    view1 = _json(m1, "/role")["view_version"]
    c = LoggedCtl(spawn, tmp_path, backend.locator)
    try:
        r = c("ping")
        assert r["status"] == 0 and r["view_version"] == view1
        assert m1.stop()[0] == 0  # SIGTERM: resigns, m2 is elected at once
        wait_until(lambda: _json(m2, "/role")["role"] == "leader", 15, "m2 elected")
        view2 = _json(m2, "/role")["view_version"]
        assert view2 > view1
        how = "the watch" if backend.kind == "etcd" else "the poll"
        line = f"the leader is {m2.addr} (view {view2}), found by {how}"
        # the client sent nothing since its ping: only its follow thread can know
        wait_until(lambda: line in c.text(), 15, f"the idle client's log says {line!r}")
        assert "found by a lookup after a failed call" not in c.text()
        r = c("ping")  # straight to the new leader
        assert r["status"] == 0 and r["view_version"] == view2, r
    finally:
        c.close()


def _metric(m, name):
    status, body = m.http("/metrics")
    if status != 200:
        return None
    for ln in body.decode().splitlines():
        if ln.startswith(name + " "):
            return float(ln.split()[1])
    return None


def test_idle_store_remounts_on_the_new_leader_at_once(spawn, etcd_server):
    from store_proc import StoreProc
    backend = Backend.__new__(Backend)  # etcd only: the store part does not vary by backend
    backend.kind, backend.srv = "etcd", etcd_server
    backend.flags = (f"--etcd_endpoints={etcd_server.bare}",)
    backend.locator = f"etcd://{etcd_server.bare}"
    etcd_server.clear()
    m1, m2 = _pair(spawn, backend, "--ha_sync=none", "--client_ttl=30")
    p = StoreProc(("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 8 << 20, "tcp", "", backend.locator),
                  env={"MC_STORE_HEARTBEAT_MS": "60000", "MC_RPC_TIMEOUT_MS": "20000"})
    try:
        assert p.setup_rc == 0
        wait_until(lambda: _metric(m1, "master_segment_count") == 1, 15, "mounted on m1")
        assert m1.stop()[0] == 0
        wait_until(lambda: _json(m2, "/role")["role"] == "leader", 15, "m2 elected")
        assert _metric(m2, "master_segment_count") in (0, 1)
        # no store call, and the next heartbeat is a minute away: the watch's report
        # ran the store's leader hook (ping now -> NEED_REMOUNT -> remount)
        wait_until(lambda: _metric(m2, "master_segment_count") == 1, 20,
                   "the idle store's segment remounted on the new leader")
        assert p.fn("put_values", ["after-follow"], 4096) == [0]
    finally:
        p.kill()


def test_unreachable_etcd_warns_once_per_endpoint_per_period(spawn, tmp_path):
    dead = [free_port(), free_port()]  # nothing listens there
    loc = "etcd://" + ";".join(f"127.0.0.1:{p}" for p in dead)
    log = tmp_path / "ctl.log"
    with open(log, "wb") as err:
        p = spawn([tool("mooncake_master_ctl"), f"--master={loc}", "--rpc_timeout_ms=3000"],
                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        p.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert p.returncode != 0
    warns = [ln for ln in text.splitlines() if ln.startswith("W")]
    # 3 s of lookups every 100 ms (~30, each failing on both endpoints): one line per
    # 5 s (+1 for a line at the period's edge), naming both endpoints
    assert 1 <= len(warns) <= 2, text
    for port in dead:
        assert f"127.0.0.1:{port}" in warns[0], warns[0]
    summary = [ln for ln in text.splitlines() if "no leader found in" in ln]
    assert len(summary) == 1 and re.search(r"\d+ lookups", summary[0]), text
