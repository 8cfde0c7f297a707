"""HTTP metadata server: the C tool `mooncake_http_metadata_server` (spawned) and the
pure-Python `mooncake.http_metadata_server.KVBootstrapServer`, on 127.0.0.1 only.

Both flavours get the same protocol checks (API.md §4, upstream-mooncake.md §7); the C
tool also gets garbage and oversized requests (and must keep serving afterwards), a taken
port (clear message, non-zero exit), signals and bad flags.
"""
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests

from conftest import auth_line, free_port, tool, wait_port

from mooncake.http_metadata_server import KVBootstrapServer, KVPoll

TIMEOUT = 5


def start_c(spawn, *extra, port=None):
    port = free_port() if port is None else port
    p = spawn([tool("mooncake_http_metadata_server"), f"--port={port}", "--host=127.0.0.1", *extra])
    wait_port(port, proc=p)
    return p, port


@pytest.fixture(params=["c", "python"])
def server(request, spawn):
    """Base URL of a running server of either flavour, and the flavour's name."""
    if request.param == "c":
        _, port = start_c(spawn)
        yield f"http://127.0.0.1:{port}", "c"
    else:
        s = KVBootstrapServer(0, host="127.0.0.1")
        s.run()
        assert s.poll() == KVPoll.Success
        yield f"http://127.0.0.1:{s.port}", "python"
        s.close()


def call(method, base, key=None, data=None, params=None, path="/metadata"):
    if params is None:
        params = {} if key is None else {"key": key}
    return requests.request(method, base + path, params=params, data=data, timeout=TIMEOUT)


# ---- protocol, both flavours ---------------------------------------------------------


def test_put_get_delete(server):
    base, _ = server
    assert call("GET", base, "mooncake/ram/a").status_code == 404
    assert call("GET", base, "mooncake/ram/a").text == "metadata not found"
    r = call("PUT", base, "mooncake/ram/a", data=b'{"x": 1}')
    assert (r.status_code, r.text) == (200, "metadata updated")
    r = call("GET", base, "mooncake/ram/a")
    assert r.status_code == 200
    assert r.content == b'{"x": 1}'
    assert r.headers["Content-Type"].startswith("application/json")
    r = call("PUT", base, "mooncake/ram/a", data=b"{}")  # a plain key may be overwritten
    assert r.status_code == 200
    assert call("GET", base, "mooncake/ram/a").content == b"{}"
    r = call("DELETE", base, "mooncake/ram/a")
    assert (r.status_code, r.text) == (200, "metadata deleted")
    r = call("DELETE", base, "mooncake/ram/a")
    assert (r.status_code, r.text) == (404, "metadata not found")
    # binary and empty bodies are stored as given
    blob = bytes(range(256)) * 64
    assert call("PUT", base, "bin", data=blob).status_code == 200
    assert call("GET", base, "bin").content == blob
    assert call("PUT", base, "empty", data=b"").status_code == 200
    r = call("GET", base, "empty")
    assert (r.status_code, r.content) == (200, b"")


def test_keys_are_percent_decoded(server):
    base, _ = server
    keys = ["mooncake/ram/10.0.0.1:1234", "a b", "a+b", "100%", "x&key=y", "q?r#s", "café"]
    for i, k in enumerate(keys):
        assert call("PUT", base, k, data=f"v{i}".encode()).status_code == 200
    for i, k in enumerate(keys):
        assert call("GET", base, k).text == f"v{i}"
    # the same key written by hand, encoded differently
    r = requests.get(base + "/metadata?key=a%20b", timeout=TIMEOUT)
    assert r.text == "v1"
    r = requests.get(base + "/metadata?key=a+b", timeout=TIMEOUT)  # '+' is a space
    assert r.text == "v1"
    r = requests.get(base + "/metadata?key=caf%C3%A9", timeout=TIMEOUT)
    assert r.text == "v6"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("query", ["", "?key=", "?key=%20%20", "?other=x", "?key=%09"])
def test_missing_key_is_400(server, method, query):
    base, _ = server
    r = requests.request(method, base + "/metadata" + query, data=b"x" if method == "PUT" else None,
                         timeout=TIMEOUT)
    assert r.status_code == 400
    assert r.headers["Content-Type"].startswith("application/json")


def test_rpc_meta_is_write_once(server):
    base, _ = server
    k = "mooncake/rpc_meta/10.0.0.1:15001"
    v1 = b'{"ip_or_host_name": "10.0.0.1", "rpc_port": 15001}'
    v2 = b'{"ip_or_host_name": "10.0.0.1", "rpc_port": 15002}'
    assert call("PUT", base, k, data=v1).text == "metadata updated"
    r = call("PUT", base, k, data=v1)
    assert (r.status_code, r.text) == (200, "metadata unchanged")
    r = call("PUT", base, k, data=v2)
    assert (r.status_code, r.text) == (400, "Duplicate rpc_meta key not allowed")
    assert call("GET", base, k).content == v1
    assert call("DELETE", base, k).status_code == 200
    assert call("PUT", base, k, data=v2).status_code == 200


def test_other_methods_and_paths(server):
    base, _ = server
    for m in ["POST", "PATCH"]:
        r = call(m, base, "k", data=b"x")
        assert (r.status_code, r.text) == (405, "Method not allowed")
    r = requests.get(base + "/health", timeout=TIMEOUT)
    assert (r.status_code, r.text) == (200, "OK")
    assert requests.get(base + "/nothing", timeout=TIMEOUT).status_code == 404


def test_oversized_body_is_413_and_nothing_stored(server):
    base, _ = server
    r = call("PUT", base, "big", data=b"x" * ((16 << 20) + 1))
    assert r.status_code == 413
    assert call("GET", base, "big").status_code == 404
    r = call("PUT", base, "fits", data=b"y" * (16 << 20))  # exactly the limit is fine
    assert r.status_code == 200
    assert len(call("GET", base, "fits").content) == 16 << 20


def test_keep_alive(server):
    """Successful requests and misses leave the connection open for the next request."""
    base, _ = server
    assert call("PUT", base, "ka", data=b"1").status_code == 200
    port = int(base.rsplit(":", 1)[1])
    def get(target):   # (signed under MC_TEST_AUTH=1: each request with its own nonce)
        return b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + auth_line("GET", target.decode()) + b"\r\n"

    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        got = b""
        for i, r in enumerate((get(b"/metadata?key=ka"), get(b"/metadata?key=nope"),
                               get(b"/metadata?key=ka"))):
            s.sendall(r)  # on the same connection: the server must not have closed it
            while got.count(b"HTTP/1.1 ") < i + 1:
                chunk = s.recv(65536)
                assert chunk, f"connection closed after {i} responses: {got!r}"
                got += chunk
        assert got.count(b"HTTP/1.1 200") == 2, got
        assert got.count(b"HTTP/1.1 404") == 1, got


def test_key_flavours(server):
    """Upstream's Python server strips the key; its C++ one (like ours) does not."""
    base, flavour = server
    assert call("PUT", base, " padded ", data=b"p").status_code == 200
    if flavour == "python":
        assert call("GET", base, "padded").text == "p"
        assert call("GET", base, "").text == "metadata key is required"
    else:
        assert call("GET", base, "padded").status_code == 404
        assert call("GET", base, " padded ").text == "p"
        assert call("GET", base, "").text == "Missing key parameter"
    r = call("GET", base, "k" * 4097)
    assert (r.status_code, r.text) == (400, "metadata key too long")


# ---- the C tool ----------------------------------------------------------------------


def raw_exchange(port, payload, read_timeout=3.0):
    """Sends payload bytes, half-closes, returns whatever comes back (b"" if reset)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except OSError:
            pass
        return out


def test_c_tool_prints_where_it_listens_and_stops_on_signals(spawn):
    for sig in (signal.SIGTERM, signal.SIGINT):
        p = spawn([tool("mooncake_http_metadata_server"), "--port=0", "--host=127.0.0.1"],
                  stderr=subprocess.DEVNULL)
        line = p.stdout.readline().decode()
        assert line.startswith("mooncake_http_metadata_server listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        assert port > 0
        assert requests.get(f"http://127.0.0.1:{port}/health", timeout=TIMEOUT).text == "OK"
        p.send_signal(sig)
        assert p.wait(timeout=10) == 0


def test_c_tool_port_taken(spawn):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = spawn([tool("mooncake_http_metadata_server"), f"--port={port}", "--host=127.0.0.1"])
        out, _ = p.communicate(timeout=10)
        assert p.returncode == 1
        assert b"Address already in use" in out
        assert str(port).encode() in out


def test_c_tool_bad_flags(spawn):
    p = spawn([tool("mooncake_http_metadata_server"), "--port=70000"])
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 2
    assert b"port" in out
    p = spawn([tool("mooncake_http_metadata_server"), "--no_such_flag=1"])
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 2
    p = spawn([tool("mooncake_http_metadata_server"), "--help"])
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 0
    assert b"--port" in out and b"--host" in out
    # a host that is not an address: said so (not "No such file or directory")
    p = spawn([tool("mooncake_http_metadata_server"), "--port=0", "--host=999.1.1.1"])
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 2, out
    assert b"invalid address '999.1.1.1' for --host" in out
    assert b"No such file" not in out and b"Invalid argument" not in out


def test_c_tool_survives_garbage(spawn):
    p, port = start_c(spawn, "--max_body_size=1mb")
    base = f"http://127.0.0.1:{port}"
    assert call("PUT", base, "keep", data=b"kept").status_code == 200
    garbage = [
        b"\x00\xff\x13\x37" * 1000,
        b"GARBAGE\r\n\r\n",
        b"GET /metadata?key=keep HTTP/9.9\r\n\r\n",
        b"GET " + b"/" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /metadata?key=keep HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 200000 + b"\r\n\r\n",
        b"PUT /metadata?key=k HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        b"PUT /metadata?key=k HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"PUT /metadata?key=k HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nshort",
        b"PUT /metadata?key=k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"PUT /metadata?key=%zz%00 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
    ]
    for g in garbage:
        raw_exchange(port, g, read_timeout=1.0)  # some leave the server waiting: bounded
    # a declared size over the limit is refused from the headers alone
    resp = raw_exchange(port, b"PUT /metadata?key=huge HTTP/1.1\r\nHost: x\r\n"
                              + auth_line("PUT", "/metadata?key=huge") +
                              b"Content-Length: 1099511627776\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 413"), resp[:80]
    # a chunked body that grows past the limit: 413 or the connection is dropped
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(40)) + b"0\r\n\r\n"
    resp = raw_exchange(port, b"PUT /metadata?key=huge HTTP/1.1\r\nHost: x\r\n"
                              + auth_line("PUT", "/metadata?key=huge") +
                              b"Transfer-Encoding: chunked\r\n\r\n" + body)
    assert resp == b"" or resp.startswith(b"HTTP/1.1 413"), resp[:80]
    # connections opened and left idle do not block others
    idle = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(20)]
    try:
        assert p.poll() is None
        assert call("GET", base, "keep").content == b"kept"
        assert call("GET", base, "huge").status_code == 404
        assert call("GET", base, "k").status_code in (200, 404)
        assert requests.get(base + "/health", timeout=TIMEOUT).text == "OK"
    finally:
        for s in idle:
            s.close()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0


def test_c_tool_refuses_unsound_body_framing(spawn):
    """Refused before the body is read, nothing stored, each counted as bad_framing:
    two Content-Length headers (either order, either case) or one next to
    Transfer-Encoding: 400 (the server stored the 5-byte body of `Content-Length: 5` +
    `Content-Length: 5000`: libmicrohttpd took one length, our size check could read the
    other); a header name that is not a token (whitespace, \\v or \\f before its
    colon): 400 (libmicrohttpd kept `Content-Length : 3` under another name and
    framed no body); Transfer-Encoding twice:
    400; one other than chunked: 501 (those hung until the request deadline)."""
    _, port = start_c(spawn)
    base = f"http://127.0.0.1:{port}"
    chunked = b"5\r\nhello\r\n0\r\n\r\n"
    cases = [
        (b"Content-Length: 5\r\nContent-Length: 5000\r\n", b"hello", 400, b"ambiguous"),
        (b"Content-Length: 5000\r\nContent-Length: 5\r\n", b"hello", 400, b"ambiguous"),
        (b"Content-Length: 5\r\ncontent-length: 5\r\n", b"hello", 400, b"ambiguous"),
        (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"hello", 400, b"ambiguous"),
        (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked, 400,
         b"ambiguous"),
        (b"Content-Length : 3\r\n", b"hello", 400, b"invalid header name"),
        (b"Content-Length: 5\r\nContent-Length\t: 3\r\n", b"hello", 400, b"invalid header"),
        (b"Content-Length\x0b: 3\r\n", b"hello", 400, b"invalid header name"),
        (b"Content-Length\x0c: 3\r\n", b"hello", 400, b"invalid header name"),
        (b"Content-Length: 5\r\nTransfer-Encoding : chunked\r\n", b"hello", 400,
         b"invalid header name"),
        (b"Transfer-Encoding: gzip, chunked\r\n", chunked, 501, b"unsupported Transfer"),
        (b"Transfer-Encoding: foo\r\n", chunked, 501, b"unsupported Transfer"),
        (b"Transfer-Encoding: chunked \r\n", chunked, 501, b"unsupported Transfer"),
    ]
    for i, (headers, body, status, why) in enumerate(cases):
        resp = raw_exchange(port, b"PUT /metadata?key=amb%d HTTP/1.1\r\nHost: x\r\n" % i
                            + headers + b"\r\n" + body)
        assert resp.startswith(b"HTTP/1.1 %d" % status), (headers, resp[:80])
        assert why in resp, (headers, resp)
        assert call("GET", base, f"amb{i}").status_code == 404
    text = requests.get(base + "/metrics", timeout=TIMEOUT).text
    assert 'http_metadata_refused_total{reason="bad_framing"} %d' % len(cases) in text, text
    # sound framings pass: one Content-Length, chunked in any case
    for i, (headers, body) in enumerate([(b"Content-Length: 5\r\n", b"hello"),
                                         (b"Transfer-Encoding: Chunked\r\n", chunked)]):
        resp = raw_exchange(port, b"PUT /metadata?key=ok%d HTTP/1.1\r\nHost: x\r\n" % i
                            + auth_line("PUT", "/metadata?key=ok%d" % i, b"hello")
                            + headers + b"\r\n" + body)
        assert resp.startswith(b"HTTP/1.1 200"), (headers, resp[:80])
        assert call("GET", base, f"ok{i}").content == b"hello"


def test_c_tool_serves_concurrent_clients(spawn):
    import concurrent.futures as cf

    _, port = start_c(spawn)
    base = f"http://127.0.0.1:{port}"

    def work(t):
        with requests.Session() as sess:
            for i in range(50):
                k = f"mooncake/ram/t{t}-{i}"
                v = f'{{"t": {t}, "i": {i}}}'.encode()
                assert sess.put(base + "/metadata", params={"key": k}, data=v, timeout=TIMEOUT).status_code == 200
                assert sess.get(base + "/metadata", params={"key": k}, timeout=TIMEOUT).content == v
        return True

    with cf.ThreadPoolExecutor(4) as ex:
        assert all(ex.map(work, range(4)))


# ---- KVBootstrapServer ---------------------------------------------------------------


def test_kvbootstrap_lifecycle():
    s = KVBootstrapServer(free_port(), "127.0.0.1")
    assert s.poll() == KVPoll.Failed  # not started
    t = s.run()
    assert t.daemon
    assert s.poll() == KVPoll.Success
    r = requests.put(f"http://127.0.0.1:{s.port}/metadata", params={"key": "k"}, data=b"v", timeout=TIMEOUT)
    assert r.status_code == 200
    s.close()
    assert s.poll() == KVPoll.Failed
    s.close()  # idempotent
    assert [e.value for e in KVPoll] == [0, 1, 2, 3, 4]
    assert [e.name for e in KVPoll] == ["Failed", "Bootstrapping", "WaitingForInput", "Transferring", "Success"]


def test_kvbootstrap_port_taken():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        s = KVBootstrapServer(sock.getsockname()[1], "127.0.0.1")
        s.run()
        assert s.poll() == KVPoll.Failed
        assert s.error is not None
        s.close()


def test_kvbootstrap_cli(spawn):
    port = free_port()
    p = spawn([sys.executable, "-m", "mooncake.http_metadata_server", "--port", str(port),
               "--host", "127.0.0.1", "--log-level", "warning"])
    wait_port(port, proc=p)
    assert requests.put(f"http://127.0.0.1:{port}/metadata", params={"key": "k"}, data=b"v",
                        timeout=TIMEOUT).status_code == 200
    assert requests.get(f"http://127.0.0.1:{port}/metadata", params={"key": "k"}, timeout=TIMEOUT).content == b"v"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    # the same port is free again, and a taken port makes the CLI fail
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        q = spawn([sys.executable, "-m", "mooncake.http_metadata_server", "--port",
                   str(sock.getsockname()[1]), "--host", "127.0.0.1"])
        out, _ = q.communicate(timeout=20)
        assert q.returncode == 1
        assert b"cannot listen" in out
