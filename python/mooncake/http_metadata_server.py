"""HTTP metadata server for the Mooncake transfer engine, in pure Python (aiohttp).

Drop-in for upstream's ``mooncake.http_metadata_server`` (``mooncake-wheel/mooncake/
http_metadata_server.py``): ``KVBootstrapServer(port, host="0.0.0.0")`` with ``run()``,
``close()`` and ``poll()``, the ``KVPoll`` enum, and ``main()`` for the
``--port --host --log-level`` command line. The C server (``mooncake_http_metadata_server``
and the one the master embeds) has the same semantics; see ``include/mooncake/metadata.h``.

Protocol (upstream-mooncake.md §7, API.md §4), one route ``/metadata``:

* the key is the ``key`` query parameter, percent-decoded and stripped of surrounding
  whitespace (as upstream's Python server); missing, empty or blank -> 400
  ``metadata key is required``; longer than 4096 bytes -> 400 ``metadata key too long``;
* ``GET`` -> 200 with the stored bytes, or 404 ``metadata not found``;
* ``PUT`` -> stores the raw body, 200 ``metadata updated``. A key containing ``rpc_meta``
  is write-once: rewriting the same bytes -> 200 ``metadata unchanged``, other bytes ->
  400 ``Duplicate rpc_meta key not allowed``. Bodies over ``max_body_bytes`` (16 MiB)
  -> 413;
* ``DELETE`` -> 200 ``metadata deleted`` or 404 ``metadata not found``;
* other methods -> 405 ``Method not allowed``.

Every ``/metadata`` response has ``Content-Type: application/json`` (also for the plain
text messages), as upstream. ``GET /health`` -> 200 ``OK``.

Trust (mooncake-c, ``docs/security.md``): with a cluster secret (``auth_token_file=``, else
``$MC_AUTH_TOKEN_FILE``; ``--auth-token-file`` on the command line) every ``/metadata``
request must carry an ``Authorization: MC-HMAC ...`` signature (``mooncake._auth``, the
same format as the C server's); an unsigned, badly signed, stale or replayed one gets 401
before anything is read or stored. ``/health`` stays open. Without a secret the server is
open (one warning at start) and refuses signed requests (a mixed cluster).
"""

import argparse
import asyncio
import logging
import signal
import sys
import threading
from enum import Enum

from aiohttp import web

from mooncake import _auth

__all__ = ["KVPoll", "KVBootstrapServer", "main"]

logger = logging.getLogger("mooncake.http_metadata_server")

MAX_KEY_BYTES = 4096
DEFAULT_MAX_BODY_BYTES = 16 << 20
_START_TIMEOUT_S = 10.0
_JSON = "application/json"


class KVPoll(Enum):
    """State of a KVBootstrapServer, as upstream (same names and values)."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


def _text(status, text):
    return web.Response(status=status, text=text, content_type=_JSON)


class KVBootstrapServer:
    """An in-memory metadata store served over HTTP from a background thread.

    Args:
        port: TCP port to listen on; 0 picks a free one (``self.port`` is updated to the
            bound port once ``run()`` returns).
        host: address to bind (default ``"0.0.0.0"``, as upstream).
        max_body_bytes: largest accepted PUT body in bytes (default 16 MiB; larger -> 413).
        auth_token_file: the cluster secret's token file (None: ``$MC_AUTH_TOKEN_FILE``;
            neither: open). ``mooncake._auth.AuthError`` when the file cannot be used.

    The store is a dict of ``key -> bytes`` touched only from the server's event loop
    thread, so no lock is needed. Contents are lost when the server stops.
    """

    def __init__(self, port: int, host: str = "0.0.0.0", max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 auth_token_file: str = None):
        self.port = int(port)
        self.host = host
        self.max_body_bytes = int(max_body_bytes)
        self.store = {}
        self.thread = None
        self.error = None  # the exception that stopped the server, if any
        self._loop = None
        self._runner = None
        self._started = threading.Event()
        self.verifier = _auth.Verifier(_auth.secret_from_env(auth_token_file))
        self.app = web.Application(client_max_size=self.max_body_bytes,
                                   middlewares=[_auth.aiohttp_middleware(self.verifier)])
        self.app.router.add_route("*", "/metadata", self._handle_metadata)
        self.app.router.add_route("GET", "/health", self._handle_health)

    # -- lifecycle ------------------------------------------------------------------

    def run(self):
        """Starts serving in a daemon thread and waits (up to 10 s) until it listens.

        Returns the thread, as upstream. When the address cannot be bound (port taken,
        bad host) the thread ends, ``poll()`` returns ``KVPoll.Failed`` and ``self.error``
        holds the exception (logged at ERROR); ``run()`` itself does not raise.
        """
        if self.thread is not None and self.thread.is_alive():
            return self.thread
        self._started.clear()
        self.error = None
        self.thread = threading.Thread(target=self._serve, name="mooncake-http-metadata", daemon=True)
        self.thread.start()
        self._started.wait(_START_TIMEOUT_S)
        return self.thread

    def close(self):
        """Stops the server and joins its thread (waits at most 5 s). Idempotent."""
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(timeout=5)

    def poll(self) -> KVPoll:
        """``KVPoll.Success`` while the server thread runs, ``KVPoll.Failed`` before
        ``run()``, after ``close()`` or after a failure to start (as upstream)."""
        if self.thread is None or not self.thread.is_alive() or self.error is not None:
            return KVPoll.Failed
        return KVPoll.Success

    def _serve(self):
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self._runner = web.AppRunner(self.app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, host=self.host, port=self.port)
            loop.run_until_complete(site.start())
            addresses = self._runner.addresses
            if addresses:
                self.port = addresses[0][1]
            self._loop = loop
            logger.info("HTTP metadata server listening on %s:%d", self.host, self.port)
            if not self.verifier.enabled:
                logger.warning("HTTP metadata server on %s:%d is open: no cluster secret is "
                               "configured (--auth-token-file or MC_AUTH_TOKEN_FILE), so anyone "
                               "who can reach it can read, overwrite and delete the transfer "
                               "engine's metadata", self.host, self.port)
            self._started.set()
            loop.run_forever()
        except Exception as e:  # bind errors and the like: reported through poll()
            self.error = e
            logger.error("HTTP metadata server on %s:%s failed: %s", self.host, self.port, e)
        finally:
            try:
                if self._runner is not None:
                    loop.run_until_complete(self._runner.cleanup())
            finally:
                self._loop = None
                loop.close()
                self._started.set()

    # -- handlers -------------------------------------------------------------------

    async def _handle_health(self, request):
        return web.Response(text="OK")

    async def _handle_metadata(self, request):
        key = request.query.get("key", "").strip()
        if not key:
            return _text(400, "metadata key is required")
        if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
            return _text(400, "metadata key too long")
        if "\x00" in key:
            return _text(400, "metadata key contains a NUL byte")
        if request.method == "GET":
            value = self.store.get(key)
            if value is None:
                return _text(404, "metadata not found")
            return web.Response(status=200, body=value, content_type=_JSON)
        if request.method == "PUT":
            try:
                data = await request.read()
            except web.HTTPRequestEntityTooLarge:
                return _text(413, "metadata body too large")
            old = self.store.get(key)
            if old is not None and "rpc_meta" in key:
                if old == data:
                    return _text(200, "metadata unchanged")
                return _text(400, "Duplicate rpc_meta key not allowed")
            self.store[key] = data
            return _text(200, "metadata updated")
        if request.method == "DELETE":
            if self.store.pop(key, None) is None:
                return _text(404, "metadata not found")
            return _text(200, "metadata deleted")
        return _text(405, "Method not allowed")


def _parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="mooncake_http_metadata_server",
        description="HTTP metadata server for Mooncake (pure-Python flavour)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--port", type=int, default=8080, help="port to listen on (0: any free one)")
    p.add_argument("--host", type=str, default="0.0.0.0", help="address to bind")
    p.add_argument("--auth-token-file", "--auth_token_file", dest="auth_token_file", type=str,
                   default=None, help="the cluster secret's token file (default: "
                                      "$MC_AUTH_TOKEN_FILE; neither: open)")
    p.add_argument(
        "--log-level",
        type=str.upper,
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="logging level",
    )
    return p.parse_args(argv)


def main(argv=None):
    """Command line as upstream's: ``--port 8080 --host 0.0.0.0 --log-level INFO``.

    Serves until SIGINT or SIGTERM, then returns 0; returns 1 when it cannot listen.
    Prints ``mooncake_http_metadata_server listening on HOST:PORT`` when ready.
    """
    args = _parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
    try:
        server = KVBootstrapServer(port=args.port, host=args.host,
                                   auth_token_file=args.auth_token_file)
    except _auth.AuthError as e:
        print(f"mooncake_http_metadata_server: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server.run()
    if server.poll() != KVPoll.Success:
        print(f"mooncake_http_metadata_server: cannot listen on {args.host}:{args.port}: {server.error}",
              file=sys.stderr)
        return 1
    print(f"mooncake_http_metadata_server listening on {args.host}:{server.port}", flush=True)
    while not stop.wait(0.5):
        if server.poll() != KVPoll.Success:
            return 1
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
