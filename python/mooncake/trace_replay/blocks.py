"""Deterministic block contents: every byte depends on the block's hash id.

A block of B bytes is W = B / 8 little-endian 64-bit words; word i of block h is
base[i] XOR seed(h), with base[i] = splitmix64(i) and seed(h) = splitmix64(h XOR salt).
Byte k of a word is byte k of base[i] XOR byte k of seed(h); two ids' seeds differ in
some byte (splitmix64 is a bijection), and then every word of the two blocks differs
there. So a block stored under the wrong key, a flipped byte, a shifted range (base
differs from word to word) or a stale block of another size all fail the check. Before
a read, poison() makes a few words of each destination slot differ from the block
expected there, so a read that reports success without writing the slot (which may
still hold the same block from an earlier request) fails the check too.

The codec's own cost is part of every backend's time per block (the replay runs it
between the calls it times), so it is kept small. Where the package is built, fill and
verify are C loops (mooncake.trace_replay._codec, src/python/replay_codec.c): one pass
per block, AVX2 where the CPU has it, seeds computed from the ids, the GIL released;
1.7-3.2 us to fill and 1.7-3.1 us to check a 64 KiB block against 2.2-5.6 and 5.1-14.2
for the numpy code below (docs/performance.md, "Session 9"). The numpy code, used where
the extension is absent or `use_c` is False, takes seed(h) from a table of the ids seen
so far (the trace's ids are dense: 0..182,789 for the conversation trace) and checks a
few blocks at a time in a scratch that stays in the CPU's caches, compared with memcmp.
"""
import numpy as np

_SALT_INT = 0x6D6F6F6E63616B65                # "mooncake"
_SALT = np.uint64(_SALT_INT)


def _load_memcmp():
    """libc's memcmp(a, b, n) through ctypes, or None where it cannot be loaded."""
    try:
        import ctypes
        f = ctypes.CDLL(None).memcmp
    except (ImportError, OSError, AttributeError, TypeError):
        return None
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return f


_memcmp = _load_memcmp()

# The two loops in C (src/python/replay_codec.c: one pass per block, seeds computed from
# the ids, no GIL held); None where the extension is not built (a source tree), and then
# the numpy code below does the same work.
try:
    from . import _codec
except ImportError:
    _codec = None


def splitmix64(x: np.ndarray) -> np.ndarray:
    """Vectorised splitmix64 finaliser over a uint64 array (wraps modulo 2**64)."""
    z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class BlockCodec:
    """Fills and verifies blocks of block_bytes bytes (a positive multiple of 8)."""

    def __init__(self, block_bytes: int):
        if block_bytes <= 0 or block_bytes % 8:
            raise ValueError(f"block size must be a positive multiple of 8 bytes, "
                             f"got {block_bytes}")
        self.block_bytes = block_bytes
        self.words = block_bytes // 8
        with np.errstate(over="ignore"):
            self.base = splitmix64(np.arange(self.words, dtype=np.uint64))
        self._table = np.zeros(0, dtype=np.uint64)   # seed(h) for h < len (seeds())
        self.use_c = True          # False: the numpy loops even where _codec is built
        # the words poison() sets (the C loop's choice): one per 4 KiB, and the last
        self._poison_cols = np.unique(np.r_[np.arange(0, self.words, 512), self.words - 1])

    # seeds of ids below this come from a table (8 bytes each: at most 32 MiB)
    TABLE_MAX = 1 << 22
    # bytes checked per memcmp in verify: 8 x 64 KiB read and 8 x 64 KiB expected stay
    # in a core's L2 (measured: 256 KiB, 512 KiB, 1 MiB gave 9.6, 6.3, 5.6 us per block
    # on 8-block reads and 7.1, 6.9, 7.7 on 256-block reads)
    VERIFY_CHUNK_BYTES = 512 << 10

    def seeds(self, ids) -> np.ndarray:
        """seed(h) for each hash id (ids: non-negative ints, any sequence; returns a uint64
        array of len(ids)). Ids below TABLE_MAX come from a table grown to the next power
        of two above the largest id seen; larger ones are computed each call."""
        a = np.asarray(ids, dtype=np.uint64)
        if a.size == 0:
            return a
        top = int(a.max())
        table = self._table
        if top >= len(table):
            if top >= self.TABLE_MAX:
                with np.errstate(over="ignore"):
                    return splitmix64(a ^ _SALT)
            size = 1 << max(12, top.bit_length())
            with np.errstate(over="ignore"):
                table = splitmix64(np.arange(size, dtype=np.uint64) ^ _SALT)
            if len(table) > len(self._table):   # workers may race here
                self._table = table
        return table[a.astype(np.intp)]

    @property
    def path(self) -> str:
        """"c" when fill and verify run the C loops for the replay's buffers, else
        "numpy" (recorded in the replay's results)."""
        return "c" if _codec is not None and self.use_c else "numpy"

    def _rows(self, what: str, rows: np.ndarray, n: int) -> bool:
        """Checks rows for n blocks: a 2-D native uint64 array of this codec's width with
        at least n rows (anything else is a ValueError naming what, so that both paths
        judge the same bytes). Returns whether the C loops take it: built, use_c, and
        rows aligned and C-contiguous."""
        if not isinstance(rows, np.ndarray) or rows.ndim != 2 or rows.shape[0] < n or \
                rows.shape[1] != self.words or rows.dtype != np.uint64 or \
                not rows.dtype.isnative:
            raise ValueError(f"BlockCodec.{what}: rows must be native uint64 words of shape "
                             f"(>= {n}, {self.words}), got "
                             f"{getattr(rows, 'shape', None)} {getattr(rows, 'dtype', type(rows))}")
        return _codec is not None and self.use_c and rows.flags.c_contiguous and \
            rows.flags.aligned

    def fill(self, rows: np.ndarray, ids) -> None:
        """Writes the blocks of ids into rows[:len(ids)] (rows: uint64, shape (m, W))."""
        n = len(ids)
        if self._rows("fill", rows, n):
            _codec.fill(rows, self.base, ids, _SALT_INT)
            return
        np.bitwise_xor(self.base[None, :], self.seeds(ids)[:, None], out=rows[:n])

    def poison(self, rows: np.ndarray, ids) -> None:
        """Before a read of blocks ids into rows[:len(ids)]: word 0, every 512th word (one
        per 4 KiB) and the last word of rows[j] are set to differ from block ids[j]'s
        (one bit flipped), so that verify fails for a slot the read left unwritten, or
        left a page of unwritten, whatever the slot held before."""
        n = len(ids)
        use_c = self._rows("poison", rows, n)
        if n == 0:
            return
        if use_c:
            _codec.poison(rows, self.base, ids, _SALT_INT)
            return
        cols = self._poison_cols
        want = self.base[None, cols] ^ self.seeds(ids)[:, None]
        rows[:n, cols] = want ^ np.uint64(1)

    def verify(self, rows: np.ndarray, ids, scratch: np.ndarray) -> np.ndarray:
        """Per-block bool array (may be read-only): rows[j] holds exactly block ids[j].
        scratch: uint64 array at least as large as rows[:min(len(ids), chunk)]
        (overwritten by the numpy code; the C loop reads each block once and needs
        none). The numpy code writes the expected words of a chunk of blocks to scratch
        and compares them with libc's memcmp (through ctypes, where it loads; numpy's ==
        otherwise); a chunk that differs is judged block by block."""
        n = len(ids)
        use_c = self._rows("verify", rows, n)
        if n == 0:
            return np.ones(0, dtype=bool)
        if use_c:
            return np.frombuffer(_codec.verify(rows, self.base, ids, _SALT_INT), dtype=bool)
        step = max(1, self.VERIFY_CHUNK_BYTES // self.block_bytes)   # blocks per memcmp
        if scratch.shape[1:] != rows.shape[1:] or scratch.dtype != rows.dtype or \
                scratch.shape[0] < min(n, step):
            raise ValueError(f"BlockCodec.verify: scratch {scratch.shape} {scratch.dtype} "
                             f"must be uint64 rows like rows {rows.shape}, enough for a chunk")
        ok = np.ones(n, dtype=bool)
        seeds = self.seeds(ids)
        fast = _memcmp is not None and rows.flags.c_contiguous and scratch.flags.c_contiguous
        if fast:
            rp = rows.__array_interface__["data"][0]
            sp = scratch.__array_interface__["data"][0]
        B = self.block_bytes
        for j in range(0, n, step):
            m = min(step, n - j)
            got, exp = rows[j:j + m], scratch[:m]
            np.bitwise_xor(self.base[None, :], seeds[j:j + m, None], out=exp)
            if fast and _memcmp(rp + j * B, sp, m * B) == 0:
                continue
            ok[j:j + m] = (got == exp).all(axis=1)
        return ok

    def block(self, h: int) -> bytes:
        """The bytes of block h (tests and tools)."""
        row = np.empty((1, self.words), dtype=np.uint64)
        self.fill(row, [h])
        return row.astype("<u8", copy=False).tobytes()
