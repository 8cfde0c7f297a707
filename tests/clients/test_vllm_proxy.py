"""mooncake.vllm_v1_proxy_server against two stub OpenAI-style backends on loopback:
the proxy (a real process, `python -m mooncake.vllm_v1_proxy_server` with upstream's
flags) sends each request first to the prefill stub (max_tokens=1, stream off,
kv_transfer_params asking for a remote decode) and then to the decode stub with the
prefill answer's kv_transfer_params, and relays the decode answer: one JSON body, or an
SSE stream chunk by chunk. Needs no vLLM (the proxy does not import it)."""
import asyncio
import json
import os
import sys
import threading
import urllib.error
import urllib.request

import pytest
from aiohttp import web

from clients.conftest import _iconf

PARAMS = {"do_remote_prefill": True, "do_remote_decode": False,
          "remote_engine_id": "engine-p", "remote_block_ids": [3, 4, 5],
          "remote_host": "127.0.0.1", "remote_port": 6557, "remote_request_id": "p-1"}
SSE = [b'data: {"choices": [{"text": "he"}]}\n\n',
       b'data: {"choices": [{"text": "llo"}]}\n\n', b"data: [DONE]\n\n"]


class Stubs:
    """A prefill and a decode stub (aiohttp, one event loop in a thread), recording every
    request as (role, path, headers, body) in arrival order."""

    def __init__(self):
        self.log, self.lock = [], threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.ports, self.runners = {}, []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        for role in ("prefill", "decode"):
            self.ports[role] = asyncio.run_coroutine_threadsafe(
                self._start(role), self.loop).result(30)

    async def _start(self, role):
        async def handle(request):
            body = await request.json()
            with self.lock:
                self.log.append((role, request.path,
                                 {k.lower(): v for k, v in request.headers.items()}, body))
            if role == "prefill":
                if body.get("prompt") == "fail-prefill":
                    return web.json_response({"error": "no"}, status=503)
                return web.json_response({"id": "cmpl-p", "choices": [{"text": "x"}],
                                          "kv_transfer_params": PARAMS})
            if not body.get("stream"):
                return web.json_response({"id": "cmpl-d", "choices": [{"text": "hello"}],
                                          "echo_params": body.get("kv_transfer_params")})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for chunk in SSE:
                await resp.write(chunk)
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_post("/v1/completions", handle)
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.runners.append(runner)
        return site._server.sockets[0].getsockname()[1]

    def close(self):
        async def stop():
            for r in self.runners:
                await r.cleanup()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture(scope="module")
def proxy():
    stubs = Stubs()
    sp = _iconf._Spawner()
    port = _iconf.free_port()
    try:
        p = sp([sys.executable, "-m", "mooncake.vllm_v1_proxy_server", "--host",
                "127.0.0.1", "--port", str(port), "--prefiller-host", "127.0.0.1",
                "--prefiller-port", str(stubs.ports["prefill"]), "--decoder-host",
                "127.0.0.1", "--decoder-port", str(stubs.ports["decode"])],
               env={**os.environ, "OPENAI_API_KEY": "sk-test"}, cwd="/")
        _iconf.wait_port(port, timeout=30, proc=p)
        yield f"http://127.0.0.1:{port}", stubs
    finally:
        sp.cleanup()
        stubs.close()


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=30)


def _take(stubs):
    with stubs.lock:
        out, stubs.log[:] = list(stubs.log), []
    return out


def test_healthcheck(proxy):
    base, _ = proxy
    with urllib.request.urlopen(base + "/healthcheck", timeout=30) as r:
        assert json.load(r) == {"status": "ok", "prefill_instances": 1,
                                "decode_instances": 1}


def test_non_streaming_completion_goes_prefill_then_decode(proxy):
    base, stubs = proxy
    _take(stubs)
    req = {"model": "m", "prompt": "hi", "max_tokens": 7, "stream_options": {"x": 1}}
    with _post(base + "/v1/completions", req) as r:
        assert r.status == 200
        out = json.load(r)
    assert out["choices"][0]["text"] == "hello"
    log = _take(stubs)
    assert [(role, path) for role, path, _, _ in log] == [
        ("prefill", "/v1/completions"), ("decode", "/v1/completions")]
    (_, _, ph, pb), (_, _, dh, db) = log
    # the prefill request: one token, no stream, asks for a remote decode
    assert pb["max_tokens"] == 1 and pb["stream"] is False
    assert "stream_options" not in pb
    assert pb["kv_transfer_params"] == {
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None,
        "remote_request_id": None}
    # the decode request: the client's own, with the prefill answer's parameters
    assert db["max_tokens"] == 7 and db["stream_options"] == {"x": 1}
    assert db["kv_transfer_params"] == PARAMS and out["echo_params"] == PARAMS
    assert ph["x-request-id"] == dh["x-request-id"] != ""
    assert ph["authorization"] == dh["authorization"] == "Bearer sk-test"


def test_streaming_chat_completion_is_relayed_chunk_by_chunk(proxy):
    base, stubs = proxy
    _take(stubs)
    req = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
           "max_completion_tokens": 5, "stream": True}
    with _post(base + "/v1/chat/completions", req) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        body = r.read()
    assert body == b"".join(SSE)
    log = _take(stubs)
    assert [(role, path) for role, path, _, _ in log] == [
        ("prefill", "/v1/chat/completions"), ("decode", "/v1/chat/completions")]
    pb, db = log[0][3], log[1][3]
    assert pb["stream"] is False and pb["max_tokens"] == 1
    assert pb["max_completion_tokens"] == 1
    assert db["stream"] is True and db["max_completion_tokens"] == 5
    assert db["kv_transfer_params"] == PARAMS


def test_prefill_error_is_returned_and_decode_not_called(proxy):
    base, stubs = proxy
    _take(stubs)
    with pytest.raises(urllib.error.HTTPError) as e:
        _post(base + "/v1/completions", {"model": "m", "prompt": "fail-prefill"})
    assert e.value.code == 503
    assert [role for role, _, _, _ in _take(stubs)] == ["prefill"]


def test_unreachable_prefill_instance_gives_502():
    sp = _iconf._Spawner()
    port, dead = _iconf.free_port(), _iconf.free_port()   # nothing listens on dead
    try:
        p = sp([sys.executable, "-m", "mooncake.vllm_v1_proxy_server", "--port", str(port),
                "--prefiller-host", "127.0.0.1", "--prefiller-port", str(dead),
                "--decoder-host", "127.0.0.1", "--decoder-port", str(dead)], cwd="/")
        _iconf.wait_port(port, timeout=30, proc=p)
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(f"http://127.0.0.1:{port}/v1/completions", {"model": "m", "prompt": "x"})
        assert e.value.code == 502
        assert "prefill instance" in json.load(e.value)["error"]
        # /healthcheck is the proxy's own liveness: "ok" with both instances down
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck",
                                    timeout=30) as r:
            assert json.load(r)["status"] == "ok"
    finally:
        sp.cleanup()


def test_mismatched_host_and_port_lists_are_refused(capsys):
    from mooncake.vllm_v1_proxy_server import parse_args
    with pytest.raises(SystemExit) as e:
        parse_args(["--prefiller-hosts", "a", "b", "--prefiller-ports", "1"])
    assert e.value.code == 2
    assert "--prefiller-ports" in capsys.readouterr().err
    a = parse_args(["--decoder-host", "d1", "d2", "--decoder-port", "1", "2"])
    assert a.decoder_instances == [("d1", 1), ("d2", 2)]
    assert a.prefiller_instances == [("localhost", 8100)] and a.port == 8000


@pytest.mark.parametrize("flag,value", [("--prefiller-port", "70000"),
                                        ("--decoder-ports", "0"), ("--port", "65536"),
                                        ("--port", "x")])
def test_out_of_range_ports_are_refused(capsys, flag, value):
    from mooncake.vllm_v1_proxy_server import parse_args
    with pytest.raises(SystemExit) as e:
        parse_args([flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and (f"port {value} is out of range 1-65535" in err
                            or f"not a port number: '{value}'" in err)


def test_help_shows_descriptions_and_defaults(capsys):
    from mooncake.vllm_v1_proxy_server import parse_args
    with pytest.raises(SystemExit) as e:
        parse_args(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: [8100])" in out and "(default: [8200])" in out
    assert "(default: 127.0.0.1)" in out and "round robin" in out
