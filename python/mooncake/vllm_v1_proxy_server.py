"""mooncake.vllm_v1_proxy_server: the prefill/decode proxy in front of vLLM instances
that use mooncake.mooncake_connector_v1 (or any connector following vLLM's
disaggregated-prefill parameters).

    python -m mooncake.vllm_v1_proxy_server --port 8000 \\
        --prefiller-host 127.0.0.1 --prefiller-port 8100 \\
        --decoder-host 127.0.0.1 --decoder-port 8200

For each ``POST /v1/completions`` or ``POST /v1/chat/completions`` it

1. sends the request to the next prefill instance (round robin) with ``max_tokens`` (and
   ``max_completion_tokens`` when given) set to 1, ``stream`` false, no
   ``stream_options``, and ``kv_transfer_params = {"do_remote_decode": true,
   "do_remote_prefill": false, "remote_engine_id": null, "remote_block_ids": null,
   "remote_host": null, "remote_port": null, "remote_request_id": null}``; a non-2xx
   answer is returned to the client as it came, an instance that cannot be reached
   gives 502;
2. sends the client's request to the next decode instance with the
   ``kv_transfer_params`` of the prefill answer (when it has any), and streams the
   decode answer back unchanged (status, content type, body chunk by chunk: an SSE
   stream when the client asked for ``stream``, one JSON body otherwise).

Both calls carry ``X-Request-Id`` (one fresh id per client request) and
``Authorization: Bearer $OPENAI_API_KEY``. ``GET /healthcheck`` answers
``{"status": "ok", "prefill_instances": n, "decode_instances": m}``: a liveness check
of the proxy itself (as upstream's), it does not contact the instances, so it answers
"ok" while they are down.

The flags are upstream's (its wheel ships a proxy of this name, a copy of vLLM's toy
disaggregation proxy): ``--host`` (127.0.0.1), ``--port`` (8000),
``--prefiller-hosts/--prefiller-host`` and ``--prefiller-ports/--prefiller-port``
(lists, paired in order; default localhost 8100), ``--decoder-hosts/--decoder-host``
and ``--decoder-ports/--decoder-port`` (default localhost 8200); a port must be
1-65535. Built on aiohttp (a
dependency of this package) instead of upstream's FastAPI + httpx + uvicorn.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import sys
import uuid
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

logger = logging.getLogger(__name__)

PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False,
                  "remote_engine_id": None, "remote_block_ids": None,
                  "remote_host": None, "remote_port": None, "remote_request_id": None}
# hop-by-hop or recomputed headers that are not copied from a backend's answer
_SKIP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive",
                 "content-encoding", "date", "server"}


def _port(text: str) -> int:
    """A TCP port 1-65535 from the command line; argparse reports other values."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port {n} is out of range 1-65535")
    return n


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (upstream's flags); SystemExit(2) when a port is not 1-65535
    or the host and port lists of a kind differ in length."""
    p = argparse.ArgumentParser(
        prog="python -m mooncake.vllm_v1_proxy_server",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Route each completion request to a vLLM prefill instance "
                    "(max_tokens=1) and then to a decode instance.")
    p.add_argument("--port", type=_port, default=8000,
                   help="port the proxy listens on")
    p.add_argument("--host", default="127.0.0.1",
                   help="address the proxy listens on")
    p.add_argument("--prefiller-hosts", "--prefiller-host", nargs="+",
                   default=["localhost"], metavar="HOST",
                   help="hosts of the prefill (kv_producer) instances, paired in order "
                        "with --prefiller-ports; used round robin")
    p.add_argument("--prefiller-ports", "--prefiller-port", type=_port, nargs="+",
                   default=[8100], metavar="PORT",
                   help="HTTP ports of the prefill instances (1-65535)")
    p.add_argument("--decoder-hosts", "--decoder-host", nargs="+", default=["localhost"],
                   metavar="HOST",
                   help="hosts of the decode (kv_consumer) instances, paired in order "
                        "with --decoder-ports; used round robin")
    p.add_argument("--decoder-ports", "--decoder-port", type=_port, nargs="+",
                   default=[8200], metavar="PORT",
                   help="HTTP ports of the decode instances (1-65535)")
    a = p.parse_args(argv)
    if len(a.prefiller_hosts) != len(a.prefiller_ports):
        p.error("the number of --prefiller-hosts must match the number of "
                "--prefiller-ports")
    if len(a.decoder_hosts) != len(a.decoder_ports):
        p.error("the number of --decoder-hosts must match the number of --decoder-ports")
    a.prefiller_instances = list(zip(a.prefiller_hosts, a.prefiller_ports))
    a.decoder_instances = list(zip(a.decoder_hosts, a.decoder_ports))
    return a


def _url(host: str, port: int) -> str:
    h = f"[{host}]" if ":" in host else host
    return f"http://{h}:{port}/v1"


def _headers(request_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY')}",
            "X-Request-Id": request_id}


def prefill_request(req: dict[str, Any]) -> dict[str, Any]:
    """The body sent to the prefill instance for client request ``req``."""
    out = dict(req)
    out["kv_transfer_params"] = dict(PREFILL_PARAMS)
    out["stream"] = False
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    out.pop("stream_options", None)
    return out


def _unreachable(role: str, url: str, e: Exception) -> web.Response:
    logger.error("%s instance %s: %s", role, url, e)
    return web.json_response({"error": f"{role} instance {url} failed: {e}"}, status=502)


def make_app(prefillers: list[tuple[str, int]],
             decoders: list[tuple[str, int]]) -> web.Application:
    """The proxy application for these (host, port) instances."""
    if not prefillers or not decoders:
        raise ValueError("the proxy needs at least one prefill and one decode instance")
    app = web.Application()
    pre_urls = [_url(h, p) for h, p in prefillers]
    dec_urls = [_url(h, p) for h, p in decoders]
    pre_next, dec_next = itertools.cycle(pre_urls), itertools.cycle(dec_urls)
    session_key = web.AppKey("session", ClientSession)

    async def on_startup(app: web.Application) -> None:
        app[session_key] = ClientSession(connector=TCPConnector(limit=0),
                                         timeout=ClientTimeout(total=None))

    async def on_cleanup(app: web.Application) -> None:
        await app[session_key].close()

    async def relay(request: web.Request, api: str) -> web.StreamResponse:
        try:
            req = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return web.json_response({"error": f"the request body is not JSON: {e}"},
                                     status=400)
        if not isinstance(req, dict):
            return web.json_response({"error": "the request body must be a JSON object"},
                                     status=400)
        rid = str(uuid.uuid4())
        session = request.app[session_key]
        pre, dec = next(pre_next), next(dec_next)
        try:
            async with session.post(pre + api, json=prefill_request(req),
                                    headers=_headers(rid)) as r:
                body = await r.read()
                if r.status // 100 != 2:
                    logger.error("prefill %s%s answered %d", pre, api, r.status)
                    return web.Response(status=r.status, body=body,
                                        content_type=r.content_type)
                try:
                    params = json.loads(body).get("kv_transfer_params")
                except (ValueError, AttributeError):
                    params = None
        except ClientError as e:
            return _unreachable("prefill", pre, e)
        dreq = dict(req)
        if params:
            dreq["kv_transfer_params"] = params
        try:
            r = await session.post(dec + api, json=dreq, headers=_headers(rid))
        except ClientError as e:
            return _unreachable("decode", dec, e)
        async with r:
            out = web.StreamResponse(status=r.status, headers={
                k: v for k, v in r.headers.items() if k.lower() not in _SKIP_HEADERS})
            await out.prepare(request)
            try:
                async for chunk in r.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
            except ConnectionResetError:   # the client went away: stop relaying
                logger.info("client of request %s disconnected", rid)
            return out

    async def completions(request: web.Request) -> web.StreamResponse:
        return await relay(request, "/completions")

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await relay(request, "/chat/completions")

    async def healthcheck(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "prefill_instances": len(pre_urls),
                                  "decode_instances": len(dec_urls)})

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/healthcheck", healthcheck)
    return app


def main(argv: list[str] | None = None) -> int:
    """Runs the proxy until interrupted; returns 0."""
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    app = make_app(a.prefiller_instances, a.decoder_instances)
    print(f"Initialized {len(a.prefiller_instances)} prefill clients and "
          f"{len(a.decoder_instances)} decode clients.", flush=True)
    try:
        web.run_app(app, host=a.host, port=a.port, print=None)
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
