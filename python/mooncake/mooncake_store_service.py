"""Mooncake store REST service: one store client behind a small aiohttp HTTP API.

Run with ``python -m mooncake.mooncake_store_service`` or the ``mc_store_rest_server``
console script (``sync_main``). Upstream: ``mooncake-wheel/mooncake/
mooncake_store_service.py`` (v0.3.13); the routes, JSON bodies, status codes and flags
below are upstream's.

Flags::

    --config PATH          MooncakeConfig JSON file (else MooncakeConfig.load_from_env())
    -D/--define KEY=VALUE  override one MooncakeConfig field (repeatable), e.g.
                           -D global_segment_size=1gb -D protocol=tcp
    --port N               HTTP port (8080)
    --host ADDR            HTTP bind address (0.0.0.0, as upstream; ours only)
    --max-wait-time SEC    keep retrying store setup every 1 s for this long (60)

Startup calls ``MooncakeDistributedStore().setup(config_dict)`` (upstream key names) and
retries every second until ``--max-wait-time``, a hard deadline even for a setup call that
blocks (ours only: upstream waits for a blocked setup); the HTTP API starts only after
setup succeeded. SIGINT/SIGTERM stop the service: the HTTP server closes and ``store.close()``
runs. Exit status: 0 after a signal, 1 when the store never came up, 2 for bad flags or
a bad config.

Routes (JSON bodies; errors are ``{"error": "..."}``)::

    PUT    /api/put                {"key": str, "value": str} -> store.put(key, value UTF-8)
                                   200 {"status": "success"}; 400 "Missing key or value";
                                   500 "PUT operation failed"
    GET    /api/get/{key}          200 application/octet-stream raw bytes; 404 "Key not
                                   found"; 500 "Exist check failed" / "GET operation failed"
    GET    /api/exist/{key}        200 {"exists": bool}; 500 "Exist check failed"
    DELETE /api/remove/{key}       200 {"status": "success"}; 500 "Remove operation failed"
    DELETE /api/remove_all         200 {"status": "success removed N keys"}; 500
    POST   /api/mount_shm          {"name", "size", "offset"=0, "protocol", "location"=""}
                                   -> store.mount_segment("/dev/shm/<name>", ...)
                                   200 {"status", "segment_ids"}; 400 "Missing or invalid
                                   name or size"; 500 "Mount failed, ret=N"
    POST   /api/unmount_shm        {"segment_ids": [..] | str, "grace_period_seconds"=0}
                                   one unmount_segment per id; 500 lists failed ids
    POST   /api/mount              {"size" > 0, "protocol", "location"} ->
                                   allocate_and_mount_segment; 200 {"status",
                                   "segment_ids", "allocated_size"}
    POST   /api/unmount            {"segment_ids", "grace_period_seconds"=0} ->
                                   unmount_and_free_segment
    POST   /api/unmount_local_disk {"grace_period_seconds": 0..3600} ->
                                   unmount_local_disk_segment
    POST   /api/reconfigure        {"mode": "decode", "path", "size", "offset",
                                   "protocol", "location"} mounts the new segment first,
                                   then retires the previous decode segments;
                                   {"mode": "prefill"} unmounts them

Trust (mooncake-c, ``docs/security.md``): with a cluster secret (``auth_token_file`` in the
config, ``-D auth_token_file=PATH``, else ``$MC_AUTH_TOKEN_FILE``) every route needs a
request signed with it (``Authorization: MC-HMAC ...``, ``mooncake._auth``): unsigned, badly
signed, stale or replayed requests get 401 before the store is touched. Without a secret the
API is open (one warning at start) and refuses signed requests (a mixed cluster). A token
file that cannot be used is a configuration error (exit 2).

Keys in paths are percent-decoded and may contain ``/``. Request bodies are limited to
100 MB. A malformed JSON body gets 400 (upstream: 500). Store calls run in a worker
thread so one slow call never stalls the event loop. Segment-management routes answer
501 when this build's store has no such method.
"""
import argparse
import asyncio
import json
import logging
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from aiohttp import web

from mooncake import _auth
from mooncake.mooncake_config import MooncakeConfig

__all__ = ["MooncakeStoreService", "parse_arguments", "main", "sync_main"]

log = logging.getLogger("mooncake.mooncake_store_service")

CLIENT_MAX_SIZE = 100 * 1024 * 1024        # request body limit (upstream: 100 MB)
MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS = 3600
SETUP_RETRY_INTERVAL_S = 1.0
CLOSE_TIMEOUT_S = 30.0


def _json(status: int, body: Dict[str, Any]) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _error(status: int, message: str, **extra) -> web.Response:
    return _json(status, {"error": message, **extra})


def _shm_name_to_path(name) -> Optional[str]:
    """``/dev/shm/<name>`` for a POSIX shm object name (one leading ``/`` allowed), or
    ``None`` when the name is empty, ``.``/``..`` or contains a path separator."""
    if not isinstance(name, str) or not name:
        return None
    normalized = name[1:] if name.startswith("/") else name
    if not normalized or "/" in normalized or "\0" in normalized or normalized in (".", ".."):
        return None
    return f"/dev/shm/{normalized}"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _segment_id_list(data: Dict[str, Any]) -> Optional[List[str]]:
    ids = data.get("segment_ids", [])
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not ids or not all(isinstance(s, str) and s for s in ids):
        return None
    return ids


class _BadRequest(Exception):
    pass


async def _json_body(request) -> Dict[str, Any]:
    try:
        data = await request.json()
    except Exception:
        raise _BadRequest("Malformed JSON body") from None
    if not isinstance(data, dict):
        raise _BadRequest("Request body must be a JSON object")
    return data


def _route(name: str, handler):
    """Wraps a handler: 400 for a bad body, 500 with the message for any exception, and
    a debug log of the time taken."""
    async def wrapper(request):
        start = time.perf_counter()
        try:
            return await handler(request)
        except _BadRequest as e:
            return _error(400, str(e))
        except web.HTTPException:
            raise
        except Exception as e:  # a store exception must not kill the service
            log.error("%s error: %s", name, e)
            return _error(500, str(e))
        finally:
            log.debug("%s completed in %.2f ms", name, (time.perf_counter() - start) * 1e3)
    return wrapper


def _store_class():
    """``mooncake.store.MooncakeDistributedStore``; ``RuntimeError`` when this build of
    ``mooncake.store`` does not provide it."""
    import mooncake.store as store_module
    cls = getattr(store_module, "MooncakeDistributedStore", None)
    if cls is None:
        raise RuntimeError("mooncake.store.MooncakeDistributedStore is not available in "
                           "this build of mooncake")
    return cls


async def _wait_daemon(fn, args, timeout: float, shutdown_event: Optional[asyncio.Event]):
    """Runs ``fn(*args)`` in a daemon thread and waits at most ``timeout`` seconds (and
    not past ``shutdown_event``). Returns ``("ok", result)``, ``("error", exception)``,
    ``("timeout", None)`` or ``("shutdown", None)``; on the last two the call is left
    running (a daemon thread never blocks process exit)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(result, error):
        if not fut.done():
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)

    def runner():
        try:
            result, error = fn(*args), None
        except Exception as e:
            result, error = None, e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:   # the loop is gone: nobody waits any more
            pass

    threading.Thread(target=runner, name="mooncake-store-call", daemon=True).start()
    waiters = {fut}
    stop = None
    if shutdown_event is not None:
        stop = asyncio.ensure_future(shutdown_event.wait())
        waiters.add(stop)
    try:
        done, _ = await asyncio.wait(waiters, timeout=max(timeout, 0.0),
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        if stop is not None:
            stop.cancel()
    if fut in done:
        error = fut.exception()
        return ("error", error) if error is not None else ("ok", fut.result())
    fut.cancel()
    return ("shutdown", None) if stop is not None and stop in done else ("timeout", None)


class MooncakeStoreService:
    """The store client plus its REST API (see the module docstring).

    ``config_path``: a MooncakeConfig JSON file, else ``MooncakeConfig.load_from_env()``.
    ``cli_config``: ``{field: value}`` overrides applied with ``MooncakeConfig.override``
    (``KeyError`` for an unknown field, ``ValueError`` for a bad value).
    State for ``/api/reconfigure``: ``current_mode`` ("prefill" | "decode"),
    ``mounted_segment_ids``, ``last_mount_info``; changes are serialised by a lock.
    """

    def __init__(self, config_path: Optional[str] = None,
                 cli_config: Optional[Dict[str, Any]] = None):
        self.store = None
        self.current_mode = "prefill"
        self.mounted_segment_ids: List[str] = []
        self.last_mount_info: Dict[str, Any] = {}
        self._state_lock = asyncio.Lock()
        self._runner: Optional[web.AppRunner] = None
        if config_path:
            self.config = MooncakeConfig.from_file(config_path)
        else:
            self.config = MooncakeConfig.load_from_env()
        for key, value in (cli_config or {}).items():
            self.config.override(key, value)
        try:
            self.verifier = _auth.Verifier(_auth.secret_from_env(self.config.auth_token_file))
        except _auth.AuthError as e:
            raise ValueError(str(e)) from None

    # -- lifecycle ----------------------------------------------------------------------
    async def start_store_service(self, max_wait_time: float = 60,
                                  shutdown_event: Optional[asyncio.Event] = None) -> bool:
        """Creates the store and calls ``setup`` until it returns 0, retrying every 1 s,
        for at most ``max_wait_time`` seconds in all: a ``setup`` call still running at
        the deadline is abandoned (it runs in a daemon thread), so the deadline holds
        even when setup blocks. Returns True on success, False on timeout or when
        ``shutdown_event`` is set meanwhile. ``RuntimeError`` when this build has no
        ``MooncakeDistributedStore``."""
        cls = _store_class()
        setup_args = self.config.to_setup_dict()
        deadline = time.monotonic() + max_wait_time
        attempt = 0
        while True:
            if shutdown_event is not None and shutdown_event.is_set():
                log.info("Store startup cancelled by shutdown request")
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.error("Store startup failed: gave up after %d attempts in %.1f s",
                          attempt, max_wait_time)
                return False
            attempt += 1
            store = cls()
            outcome, ret = await _wait_daemon(store.setup, (setup_args,), remaining,
                                              shutdown_event)
            if outcome == "timeout":
                log.error("Store startup failed: setup attempt %d did not finish within "
                          "the max wait time; gave up after %.1f s", attempt, max_wait_time)
                return False
            if outcome == "shutdown":
                log.info("Store startup cancelled by shutdown request")
                return False
            if outcome == "ok" and ret == 0:
                self.store = store
                log.info("Store service started on %s (master %s)",
                         self.config.local_hostname, self.config.master_server_address)
                return True
            if outcome == "error":
                log.warning("Store setup attempt %d raised: %s", attempt, ret)
            else:
                log.warning("Store setup attempt %d returned %s", attempt, ret)
            await _wait_daemon(store.close, (), CLOSE_TIMEOUT_S, None)
            delay = min(SETUP_RETRY_INTERVAL_S, deadline - time.monotonic())
            if delay > 0:
                log.info("Retrying store setup in %.1f s", delay)
                if shutdown_event is None:
                    await asyncio.sleep(delay)
                else:
                    try:
                        await asyncio.wait_for(shutdown_event.wait(), timeout=delay)
                    except asyncio.TimeoutError:
                        pass

    def make_app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(client_max_size=CLIENT_MAX_SIZE,
                              middlewares=[_auth.aiohttp_middleware(self.verifier, ())])
        app.add_routes([
            web.post("/api/reconfigure", _route("RECONFIGURE", self.handle_reconfigure)),
            web.post("/api/mount_shm", _route("MOUNT_SHM", self.handle_mount_shm)),
            web.post("/api/unmount_shm", _route("UNMOUNT_SHM", self.handle_unmount_shm)),
            web.post("/api/mount", _route("MOUNT", self.handle_mount)),
            web.post("/api/unmount", _route("UNMOUNT", self.handle_unmount)),
            web.post("/api/unmount_local_disk",
                     _route("UNMOUNT_LOCAL_DISK", self.handle_unmount_local_disk)),
            web.put("/api/put", _route("PUT", self.handle_put)),
            web.get("/api/get/{key:.+}", _route("GET", self.handle_get)),
            web.get("/api/exist/{key:.+}", _route("EXIST", self.handle_exist)),
            web.delete("/api/remove_all", _route("REMOVE_ALL", self.handle_remove_all)),
            web.delete("/api/remove/{key:.+}", _route("REMOVE", self.handle_remove)),
        ])
        return app

    async def start_http_service(self, port: int = 8080, host: str = "0.0.0.0") -> bool:
        """Serves the REST API on ``host:port``; ``OSError`` if it cannot bind."""
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        log.info("REST API listening on %s:%d", host, port)
        if not self.verifier.enabled:
            log.warning("REST API on %s:%d is open: no cluster secret is configured "
                        "(auth_token_file or MC_AUTH_TOKEN_FILE), so anyone who can reach it "
                        "can read, write and remove every object and mount segments", host, port)
        return True

    async def stop(self) -> None:
        """Stops the HTTP server and closes the store (idempotent)."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        if self.store is not None:
            store, self.store = self.store, None
            outcome, ret = await _wait_daemon(store.close, (), CLOSE_TIMEOUT_S, None)
            if outcome != "ok" or ret not in (0, None):
                log.warning("store.close(): %s %s", outcome, ret)
            else:
                log.info("Mooncake store closed")

    # -- helpers ------------------------------------------------------------------------
    async def _call(self, method: str, *args):
        fn = getattr(self.store, method, None)
        if fn is None:
            raise web.HTTPNotImplemented(
                text=json.dumps({"error": f"store.{method} is not supported by this build"}),
                content_type="application/json")
        return await asyncio.to_thread(fn, *args)

    # -- key/value routes ---------------------------------------------------------------
    async def handle_put(self, request):
        data = await _json_body(request)
        key, value = data.get("key"), data.get("value")
        if not key or value is None:
            return _error(400, "Missing key or value")
        if not isinstance(key, str) or not isinstance(value, str):
            return _error(400, "key and value must be strings")
        ret = await self._call("put", key, value.encode())
        if ret != 0:
            return _error(500, "PUT operation failed", ret=ret)
        return _json(200, {"status": "success"})

    async def handle_get(self, request):
        key = request.match_info["key"]
        exists = await self._call("is_exist", key)
        if exists == 0:
            return _error(404, "Key not found")
        if exists < 0:
            return _error(500, "Exist check failed", ret=exists)
        value = await self._call("get", key)
        if value is None:
            return _error(500, "GET operation failed")
        if len(value) == 0:
            # get() returns b"" both for a miss and for an empty object: look again.
            exists = await self._call("is_exist", key)
            if exists == 0:
                return _error(404, "Key not found")
            if exists < 0:
                return _error(500, "Exist check failed", ret=exists)
        return web.Response(status=200, body=bytes(value),
                            content_type="application/octet-stream")

    async def handle_exist(self, request):
        exists = await self._call("is_exist", request.match_info["key"])
        if exists < 0:
            return _error(500, "Exist check failed", ret=exists)
        return _json(200, {"exists": exists > 0})

    async def handle_remove(self, request):
        ret = await self._call("remove", request.match_info["key"])
        if ret != 0:
            return _error(500, "Remove operation failed", ret=ret)
        return _json(200, {"status": "success"})

    async def handle_remove_all(self, request):
        ret = await self._call("remove_all")
        if ret < 0:
            return _error(500, "RemoveAll operation failed", ret=ret)
        return _json(200, {"status": f"success removed {ret} keys"})

    # -- segment routes -----------------------------------------------------------------
    async def handle_mount_shm(self, request):
        data = await _json_body(request)
        path = _shm_name_to_path(data.get("name"))
        size, offset = data.get("size"), data.get("offset", 0)
        if not path or not _is_int(size) or size <= 0 or not _is_int(offset) or offset < 0:
            return _error(400, "Missing or invalid name or size")
        protocol = data.get("protocol", self.config.protocol)
        location = data.get("location", "")
        result = await self._call("mount_segment", path, size, offset, protocol, location)
        if result["ret"] != 0:
            return _error(500, f"Mount failed, ret={result['ret']}")
        return _json(200, {"status": "success", "segment_ids": list(result["segment_ids"])})

    async def handle_unmount_shm(self, request):
        data = await _json_body(request)
        ids = _segment_id_list(data)
        if ids is None:
            return _error(400, "Missing segment_ids")
        grace = data.get("grace_period_seconds", 0)
        if not _is_int(grace) or grace < 0:
            return _error(400, "Invalid grace_period_seconds")
        failed = []
        async with self._state_lock:
            for sid in ids:
                if await self._call("unmount_segment", [sid], grace) != 0:
                    failed.append(sid)
                elif sid in self.mounted_segment_ids:
                    self.mounted_segment_ids.remove(sid)
            if not self.mounted_segment_ids:
                self.current_mode = "prefill"
        if failed:
            return _error(500, "Unmount failed for one or more segments",
                          failed_segment_ids=failed)
        return _json(200, {"status": "success"})

    async def handle_mount(self, request):
        data = await _json_body(request)
        size = data.get("size")
        if not _is_int(size) or size <= 0:
            return _error(400, "Invalid size, must be a positive integer")
        protocol = data.get("protocol", self.config.protocol)
        location = data.get("location", "")
        result = await self._call("allocate_and_mount_segment", size, protocol, location)
        if result["ret"] != 0:
            return _error(500, f"Allocate and mount failed, ret={result['ret']}")
        return _json(200, {"status": "success", "segment_ids": list(result["segment_ids"]),
                           "allocated_size": result["allocated_size"]})

    async def handle_unmount(self, request):
        data = await _json_body(request)
        ids = _segment_id_list(data)
        if ids is None:
            return _error(400, "Missing segment_ids")
        grace = data.get("grace_period_seconds", 0)
        if not _is_int(grace) or grace < 0:
            return _error(400, "Invalid grace_period_seconds")
        ret = await self._call("unmount_and_free_segment", ids, grace)
        if ret != 0:
            return _error(500, f"Unmount and free failed, ret={ret}")
        return _json(200, {"status": "success"})

    async def handle_unmount_local_disk(self, request):
        data = await _json_body(request)
        grace = data.get("grace_period_seconds", 0)
        if not _is_int(grace) or not 0 <= grace <= MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS:
            return _error(400, "Invalid grace_period_seconds, must be a non-negative integer "
                               f"no greater than {MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS}")
        ret = await self._call("unmount_local_disk_segment", grace)
        if ret != 0:
            return _error(500, f"Unmount local disk failed, ret={ret}")
        return _json(200, {"status": "success"})

    async def handle_reconfigure(self, request):
        data = await _json_body(request)
        mode = str(data.get("mode", "")).lower()
        if mode == "decode":
            path, size = data.get("path"), data.get("size")
            offset = data.get("offset", 0)
            if not path or not isinstance(path, str) or not _is_int(size) or size <= 0:
                return _error(400, "Missing path or size for decode mode")
            protocol = data.get("protocol", self.config.protocol)
            location = data.get("location", "")
            async with self._state_lock:
                previous = list(self.mounted_segment_ids)
                # Make before break: mount the new segment, then retire the old ones.
                result = await self._call("mount_segment", path, size, offset, protocol,
                                          location)
                if result["ret"] != 0:
                    if previous:
                        return _error(500, f"Mount failed, ret={result['ret']}; keeping "
                                           "previous decode segments", mode=self.current_mode)
                    self.current_mode = "prefill"
                    self.mounted_segment_ids.clear()
                    self.last_mount_info.clear()
                    return _error(500, f"Mount failed, ret={result['ret']}; rolled back to "
                                       "prefill", mode=self.current_mode)
                failed = [sid for sid in previous
                          if await self._call("unmount_segment", [sid]) != 0]
                if failed:
                    log.warning("reconfigure: unmount of previous segments %s failed; "
                                "keeping them tracked", failed)
                self.mounted_segment_ids = list(result["segment_ids"]) + failed
                self.current_mode = "decode"
                self.last_mount_info = {"path": path, "offset": offset, "size": size,
                                        "protocol": protocol, "location": location}
            return _json(200, {"status": "success", "mode": self.current_mode,
                               "segment_ids": self.mounted_segment_ids})
        if mode == "prefill":
            async with self._state_lock:
                if self.mounted_segment_ids:
                    ret = await self._call("unmount_segment", self.mounted_segment_ids)
                    if ret != 0:
                        return _error(500, f"Unmount failed, ret={ret}")
                    self.mounted_segment_ids.clear()
                self.current_mode = "prefill"
                self.last_mount_info.clear()
            return _json(200, {"status": "success", "mode": self.current_mode})
        return _error(400, "Invalid mode. Use 'decode' or 'prefill'")


# ------------------------------------------------------------------------------------------


def parse_arguments(argv=None) -> argparse.Namespace:
    """Parses the service's flags (module docstring); exits 2 on bad flags."""
    parser = argparse.ArgumentParser(
        prog="mc_store_rest_server", description="Mooncake Store Service with REST API")
    parser.add_argument("--config", type=str, help="Path to a Mooncake config JSON file")
    parser.add_argument("-D", "--define", action="append", default=[],
                        help="Override a config field, key=value (repeatable), e.g. "
                             "-Dlocal_hostname=example.com")
    parser.add_argument("--port", type=int, default=8080, help="HTTP API port (default: 8080)")
    parser.add_argument("--host", type=str, default="0.0.0.0",
                        help="HTTP API bind address (default: 0.0.0.0)")
    parser.add_argument("--max-wait-time", type=float, default=60,
                        help="Maximum total time to retry store setup, seconds (default: 60)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port} is outside 0..65535")
    if args.max_wait_time < 0:
        parser.error("--max-wait-time must be non-negative")
    overrides = {}
    for item in args.define:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"-D/--define expects key=value, got {item!r}")
        overrides[key.strip()] = value
    args.cli_config = overrides
    return args


def _install_signal_handlers(loop, shutdown_event: asyncio.Event) -> None:
    def request_shutdown(signum):
        log.info("Received signal %s, shutting down", signal.Signals(signum).name)
        shutdown_event.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, request_shutdown, sig)
        except (NotImplementedError, RuntimeError):
            signal.signal(sig, lambda s, _f: loop.call_soon_threadsafe(request_shutdown, s))


async def main(argv=None) -> int:
    """Runs the service until SIGINT/SIGTERM; returns the exit status (module docstring)."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
    args = parse_arguments(argv)
    try:
        service = MooncakeStoreService(args.config, args.cli_config)
    except (OSError, ValueError, KeyError) as e:
        log.error("Configuration load failed: %s", e)
        return 2
    shutdown_event = asyncio.Event()
    _install_signal_handlers(asyncio.get_running_loop(), shutdown_event)
    try:
        try:
            ok = await service.start_store_service(args.max_wait_time, shutdown_event)
        except RuntimeError as e:
            log.error("%s", e)
            return 1
        if not ok:
            return 0 if shutdown_event.is_set() else 1
        try:
            await service.start_http_service(args.port, args.host)
        except OSError as e:
            log.error("Cannot serve the REST API on %s:%d: %s", args.host, args.port, e)
            return 1
        log.info("Mooncake Store Service is running")
        await shutdown_event.wait()
        return 0
    finally:
        await service.stop()


def sync_main(argv=None) -> int:
    """Entry point of the ``mc_store_rest_server`` console script."""
    return asyncio.run(main(argv))


if __name__ == "__main__":
    sys.exit(sync_main())
