"""Self-describing values for the fault tests.

A value names its key, version and writer and carries a hash over all of itself, so any
reader can tell, with no shared state, whether what it got back is

- ``ok``: exactly one put of this key (it also learns that put's version and writer),
- ``miss``: ``b""`` (nothing stored, or the read failed),
- ``other_key``: a whole, intact value, but of another key (a late write of another
  object, or a read of the wrong allocation),
- ``wrong_bytes``: anything else: a torn value, a mix of two puts, zeros, garbage.

Layout (little-endian)::

    magic "MCFV1\\0\\0\\0" | u64 total size | u64 version | u16 key len | u16 writer len
    | key | writer | filler ... | blake2b-256 of everything before it (32 bytes)

The filler of page i (4096 bytes) is a digest of (key, version, writer, i) repeated, so a
torn value can also say how many pages are wrong and whose pages they are.
"""
import hashlib
import struct

MAGIC = b"MCFV1\0\0\0"
HDR = struct.Struct("<8sQQHH")
DIGEST = 32
PAGE = 4096
MIN_SIZE = 256  # enough for the header with keys and writer ids up to ~100 bytes each


def _page(kb, version, wb, i):
    d = hashlib.blake2b(b"%s|%d|%s|%d" % (kb, version, wb, i), digest_size=64).digest()
    return d * (PAGE // 64)


def _filler(kb, version, wb, n):
    pages = (n + PAGE - 1) // PAGE
    return b"".join(_page(kb, version, wb, i) for i in range(pages))[:n]


def make(key, version, writer, size):
    """The value of ``size`` bytes for (key, version, writer)."""
    kb, wb = key.encode(), writer.encode()
    hdr = HDR.pack(MAGIC, size, version, len(kb), len(wb)) + kb + wb
    if size < len(hdr) + DIGEST:
        raise ValueError(f"size {size} too small for key {key!r} (need {len(hdr) + DIGEST})")
    body = hdr + _filler(kb, version, wb, size - DIGEST)[len(hdr):]
    return body + hashlib.blake2b(body, digest_size=DIGEST).digest()


def parse_header(data):
    """(size, version, key, writer) from the header, or None when it is not one."""
    if len(data) < HDR.size or data[:8] != MAGIC:
        return None
    _, size, version, kl, wl = HDR.unpack_from(data)
    end = HDR.size + kl + wl
    if len(data) < end:
        return None
    try:
        key = data[HDR.size:HDR.size + kl].decode()
        writer = data[HDR.size + kl:end].decode()
    except UnicodeDecodeError:
        return None
    return size, version, key, writer


def wrong_pages(data):
    """(pages that differ from what the header's put wrote, pages), or None when the header
    itself is gone."""
    h = parse_header(data)
    if h is None:
        return None
    size, version, key, writer = h
    if size != len(data):
        return None
    want = make(key, version, writer, size)
    pages = (size + PAGE - 1) // PAGE
    bad = sum(data[i * PAGE:(i + 1) * PAGE] != want[i * PAGE:(i + 1) * PAGE]
              for i in range(pages))
    return bad, pages


def check(key, data):
    """(verdict, detail) for bytes read back under ``key``: verdict is one of ok, miss,
    other_key, wrong_bytes; detail is (version, writer) for ok, a short text otherwise."""
    if not data:
        return "miss", ""
    intact = (len(data) >= HDR.size + DIGEST and
              hashlib.blake2b(data[:-DIGEST], digest_size=DIGEST).digest() == data[-DIGEST:])
    h = parse_header(data)
    if intact and h is not None and h[0] == len(data):
        size, version, k, writer = h
        if k != key:
            return "other_key", f"{len(data)} bytes of key {k!r} (v{version} by {writer})"
        return "ok", (version, writer)
    wp = wrong_pages(data)
    if wp is not None:
        return "wrong_bytes", (f"{len(data)} bytes, header {h[2]!r} v{h[1]} by {h[3]}: "
                               f"{wp[0]} of {wp[1]} pages wrong")
    head = data[:16].hex()
    return "wrong_bytes", f"{len(data)} bytes, no intact header (first bytes {head})"
