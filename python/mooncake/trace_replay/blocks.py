"""Deterministic block contents: every byte depends on the block's hash id.

A block of B bytes is W = B / 8 little-endian 64-bit words; word i of block h is
base[i] XOR seed(h), with base[i] = splitmix64(i) and seed(h) = splitmix64(h XOR salt).
Every byte of every word mixes all 64 bits of seed(h), so a block stored under the wrong
key, a flipped byte, a shifted range or a stale block of another size all fail the check.
Filling and verifying are one or two numpy passes over many blocks at once.
"""
import numpy as np

_SALT = np.uint64(0x6D6F6F6E63616B65)        # "mooncake"


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

    def seeds(self, ids) -> np.ndarray:
        """seed(h) for each hash id (uint64 array)."""
        with np.errstate(over="ignore"):
            return splitmix64(np.asarray(ids, dtype=np.uint64) ^ _SALT)

    def fill(self, rows: np.ndarray, ids) -> None:
        """Writes the blocks of ids into rows[:len(ids)] (rows: uint64, shape (m, W))."""
        n = len(ids)
        np.bitwise_xor(self.base[None, :], self.seeds(ids)[:, None], out=rows[:n])

    def verify(self, rows: np.ndarray, ids, scratch: np.ndarray) -> np.ndarray:
        """Per-block bool array: rows[j] holds exactly block ids[j]. scratch: uint64 array
        at least as large as rows[:len(ids)] (overwritten)."""
        n = len(ids)
        if n == 0:
            return np.zeros(0, dtype=bool)
        exp = scratch[:n]
        np.bitwise_xor(self.base[None, :], self.seeds(ids)[:, None], out=exp)
        return (rows[:n] == exp).all(axis=1)

    def block(self, h: int) -> bytes:
        """The bytes of block h (tests and tools)."""
        row = np.empty((1, self.words), dtype=np.uint64)
        self.fill(row, [h])
        return row.astype("<u8", copy=False).tobytes()
