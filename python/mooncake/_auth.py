"""The cluster secret on the Python side: the token file and HTTP request signatures.

The same rules and formats as the C core (``src/common/auth.h``; user's view in
``docs/security.md``), with the standard library only (``hmac``, ``hashlib``, ``secrets``,
``hmac.compare_digest`` for every comparison):

* the token file (``MC_AUTH_TOKEN_FILE``, ``--auth_token_file``, ``MooncakeConfig.
  auth_token_file``): a regular file (not a symlink), owned by this user or root, that
  group and others can neither read nor write; one trailing newline is stripped; 16..1024
  bytes remain;
* a signed HTTP request carries ``Authorization: MC-HMAC ts=<unix ms>,nonce=<32 hex>,
  mac=<64 hex>`` where mac = HMAC-SHA-256(secret, "MC-HMAC-v1\\n" METHOD "\\n" TARGET "\\n"
  TS "\\n" NONCE "\\n" hex(SHA-256(body))), TARGET being the request-target exactly as
  sent (path and query, still percent-encoded);
* a server accepts a timestamp within 30 s of its clock and each nonce once (a bounded
  replay cache); refusals are 401 with ``WWW-Authenticate: MC-HMAC`` and
  ``X-MC-Auth-Error: <code>`` (missing, malformed, stale, bad-mac, replay,
  server-has-no-secret; 503 replay-cache-full).
"""
import hashlib
import hmac
import os
import re
import secrets
import stat
import threading
import time
from collections import OrderedDict
from typing import Optional

__all__ = ["ENV", "AuthError", "load_secret", "secret_from_env", "sign", "Verifier",
           "WINDOW_MS", "SCHEME"]

ENV = "MC_AUTH_TOKEN_FILE"
SCHEME = "MC-HMAC"
WINDOW_MS = 30000
SECRET_MIN = 16
SECRET_MAX = 1024
REPLAY_CAPACITY = 131072

_HEADER_RE = re.compile(r"^MC-HMAC[ \t]+(.*)$")
_FIELD_RE = {
    "ts": re.compile(r"^[1-9][0-9]{0,15}$|^0$"),
    "nonce": re.compile(r"^[0-9a-f]{32}$"),
    "mac": re.compile(r"^[0-9a-f]{64}$"),
}


class AuthError(ValueError):
    """A token file that cannot be used (the message names the file and the reason)."""


def _check_secret(data: bytes, where: str) -> bytes:
    if data.endswith(b"\n"):
        data = data[:-1]
        if data.endswith(b"\r"):
            data = data[:-1]
    if len(data) < SECRET_MIN:
        raise AuthError(f"cannot use {where}: the cluster secret is {len(data)} bytes: at "
                        f"least {SECRET_MIN} are required")
    if len(data) > SECRET_MAX:
        raise AuthError(f"cannot use {where}: the cluster secret is {len(data)} bytes: at "
                        f"most {SECRET_MAX} are allowed")
    return data


def load_secret(path: str, source: str = "--auth_token_file") -> bytes:
    """The secret in the token file ``path``; ``AuthError`` when it cannot be used."""
    where = f"the token file '{path}' ({source})"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if os.path.islink(path):
            raise AuthError(f"cannot use {where}: it is a symbolic link (name the file "
                            "itself)") from None
        raise AuthError(f"cannot use {where}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AuthError(f"cannot use {where}: not a regular file")
        if st.st_uid not in (os.geteuid(), 0):
            raise AuthError(f"cannot use {where}: owned by uid {st.st_uid}, not by this "
                            f"process's user (uid {os.geteuid()}) or root: chown it to the "
                            "service user")
        if st.st_mode & 0o077:
            raise AuthError(f"cannot use {where}: permissions {stat.S_IMODE(st.st_mode):04o} "
                            "are too open: the token file must be readable by its owner "
                            f"only (chmod 600 {path})")
        data = os.read(fd, SECRET_MAX + 3)
    finally:
        os.close(fd)
    return _check_secret(data, where)


def secret_from_env(path: Optional[str] = None) -> Optional[bytes]:
    """The secret of ``path`` if given (non-empty), else of ``$MC_AUTH_TOKEN_FILE``;
    ``None`` when neither is set (no secret: open)."""
    if path:
        return load_secret(path)
    env = os.environ.get(ENV)
    if env:
        return load_secret(env, ENV)
    return None


def _mac(secret: bytes, method: str, target: str, ts: str, nonce: str, body: bytes) -> bytes:
    msg = "\n".join(["MC-HMAC-v1", method, target, ts, nonce,
                     hashlib.sha256(body).hexdigest()]).encode("latin-1")
    return hmac.new(secret, msg, hashlib.sha256).digest()


def sign(secret: bytes, method: str, target: str, body: bytes = b"",
         now_ms: Optional[int] = None, nonce: Optional[str] = None) -> str:
    """The Authorization value for a request. ``target``: the path and query exactly as
    the client sends them (e.g. ``/metadata?key=a%2Fb``)."""
    ts = str(int(time.time() * 1000) if now_ms is None else int(now_ms))
    nonce = nonce or secrets.token_hex(16)
    mac = _mac(secret, method.upper(), target, ts, nonce, body or b"").hex()
    return f"{SCHEME} ts={ts},nonce={nonce},mac={mac}"


def parse(value: str):
    """``(ts, nonce, mac bytes)`` of an MC-HMAC Authorization value; ``None`` for another
    scheme; ``ValueError`` when malformed."""
    if not value.startswith(SCHEME) or (len(value) > len(SCHEME)
                                        and value[len(SCHEME)] not in " \t"):
        return None
    m = _HEADER_RE.match(value)
    if not m or len(value) > 256:
        raise ValueError("malformed")
    fields = {}
    for part in m.group(1).split(","):
        k, sep, v = part.strip(" \t").partition("=")
        if not sep or k not in _FIELD_RE or k in fields or not _FIELD_RE[k].match(v):
            raise ValueError("malformed")
        fields[k] = v
    if set(fields) != set(_FIELD_RE):
        raise ValueError("malformed")
    return fields["ts"], fields["nonce"], bytes.fromhex(fields["mac"])


class Verifier:
    """The server side: checks a request's Authorization against the secret, the clock
    window and a bounded replay cache (thread-safe). ``secret`` None: an open server,
    which still refuses signed requests (the mixed-cluster case)."""

    def __init__(self, secret: Optional[bytes], capacity: int = REPLAY_CAPACITY):
        self.secret = secret
        self.capacity = capacity
        self._seen = OrderedDict()   # nonce -> expiry (ms), in insertion order
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.secret is not None

    def check_header(self, authorization: Optional[str]):
        """Headers in: returns ``(None, parsed)`` to go on (parsed None when the server is
        open), or ``((status, code, text), None)`` to refuse."""
        signed = authorization is not None and authorization.startswith(SCHEME + " ")
        if not self.enabled:
            if signed:
                return (401, "server-has-no-secret",
                        "the request is signed with a cluster secret but this server has "
                        "none configured: configure the same secret on the server "
                        "(--auth_token_file / MC_AUTH_TOKEN_FILE), or none on the client"), None
            return None, None
        try:
            parsed = parse(authorization) if authorization is not None else None
        except ValueError:
            return (401, "malformed", "the MC-HMAC Authorization header does not parse"), None
        if parsed is None:
            return (401, "missing",
                    "this server requires the cluster secret and the request carries no "
                    "MC-HMAC Authorization: the client has no secret configured (set "
                    "MC_AUTH_TOKEN_FILE to the cluster's token file)"), None
        if abs(int(time.time() * 1000) - int(parsed[0])) > WINDOW_MS:
            return (401, "stale",
                    "the request's timestamp is more than 30 s away from this server's "
                    "clock: a replayed request, or clocks out of sync"), None
        return None, parsed

    def check_body(self, parsed, method: str, target: str, body: bytes):
        """Body in: ``None`` when the request passes (its nonce is then recorded), else
        ``(status, code, text)``."""
        if parsed is None:
            return None
        ts, nonce, mac = parsed
        want = _mac(self.secret, method.upper(), target, ts, nonce, body)
        if not hmac.compare_digest(want, mac):
            return (401, "bad-mac", "the request's MC-HMAC signature is wrong: the client "
                                    "holds another cluster secret (or the request was changed)")
        now = int(time.time() * 1000)
        with self._lock:
            while self._seen:
                first, exp = next(iter(self._seen.items()))
                if exp > now:
                    break
                self._seen.popitem(last=False)
            if nonce in self._seen:
                return (401, "replay", "the request's nonce was used before: a replayed "
                                       "request")
            if len(self._seen) >= self.capacity:
                return (503, "replay-cache-full", "too many signed requests within the "
                                                  "replay window: retry")
            self._seen[nonce] = int(ts) + WINDOW_MS + 1
        return None


def aiohttp_middleware(verifier: Verifier, open_paths=("/health",)):
    """An aiohttp middleware that refuses unsigned, badly signed, stale or replayed
    requests (paths in ``open_paths`` excepted) before the handler runs. The body is read
    (within the app's client_max_size) to check its digest; handlers can read it again."""
    from aiohttp import web

    def refusal(status, code, text):
        return web.Response(status=status, text=text + "\n", content_type="text/plain",
                            headers={"WWW-Authenticate": SCHEME, "X-MC-Auth-Error": code})

    @web.middleware
    async def middleware(request, handler):
        if request.path in open_paths:
            return await handler(request)
        bad, parsed = verifier.check_header(request.headers.get("Authorization"))
        if bad:
            return refusal(*bad)
        if parsed is not None:
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                return web.Response(status=413, text="request body too large")
            bad = verifier.check_body(parsed, request.method, request.raw_path, body)
            if bad:
                return refusal(*bad)
        return await handler(request)

    return middleware
