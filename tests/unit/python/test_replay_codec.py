"""mooncake.trace_replay._codec (src/python/replay_codec.c) run from the build tree, so
that `meson test -C build/asan` runs its C under ASan and UBSan (the Python process gets
the sanitizer runtimes through LD_PRELOAD, set in meson.build); in the other builds the
same checks run unsanitized. Pure Python (no numpy): the reference is computed here.

Usage: python3 test_replay_codec.py PATH/_codec.cpython-*.so   (exit 0: every check held)
"""
import importlib.util
import struct
import sys
import threading

M64 = (1 << 64) - 1
SALT = 0x6D6F6F6E63616B65


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def block(base_words, h):
    seed = splitmix64(h ^ SALT)
    return struct.pack(f"<{len(base_words)}Q", *[w ^ seed for w in base_words])


def main(path):
    spec = importlib.util.spec_from_file_location("mooncake.trace_replay._codec", path)
    c = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(c)
    ids = [0, 1, 5, 182789, (1 << 63) + 7, M64]
    for words in (1, 7, 15, 16, 17, 33, 520, 1025):
        base_words = [splitmix64(i) for i in range(words)]
        base = struct.pack(f"<{words}Q", *base_words)
        B = 8 * words
        want = b"".join(block(base_words, h) for h in ids)
        for lead in (0, 3):                      # aligned and unaligned rows, guarded
            buf = bytearray(b"\xa5" * (lead + len(want) + 16))
            rows = memoryview(buf)[lead:lead + len(want)]
            c.fill(rows, base, ids, SALT)
            assert bytes(rows) == want, (words, lead)
            assert buf[:lead] == b"\xa5" * lead and buf[lead + len(want):] == b"\xa5" * 16
            assert c.verify(rows, base, ids, SALT) == b"\x01" * len(ids)
            for j in range(len(ids)):            # one flipped bit in each block, anywhere
                for pos in {0, B - 1, B // 2, 8 * (words - 1)}:
                    rows[j * B + pos] ^= 0x40
                    assert c.verify(rows, base, ids, SALT) == bytes(
                        [int(k != j) for k in range(len(ids))]), (words, j, pos)
                    rows[j * B + pos] ^= 0x40
            c.poison(rows, base, ids, SALT)
            assert c.verify(rows, base, ids, SALT) == b"\x00" * len(ids)
            assert buf[:lead] == b"\xa5" * lead and buf[lead + len(want):] == b"\xa5" * 16
    base = struct.pack("<8Q", *range(8))
    for args, err in (((bytearray(63), base, [1], 0), ValueError),
                      ((bytearray(64), b"", [1], 0), ValueError),
                      ((bytearray(64), bytes(12), [1], 0), ValueError),
                      ((bytearray(64), base, [-1], 0), ValueError),
                      ((bytearray(64), base, [1 << 64], 0), ValueError),
                      ((bytearray(64), base, [1.5], 0), TypeError),
                      ((bytes(64), base, [1], 0), TypeError),
                      ((bytearray(64), base, 5, 0), TypeError)):
        try:
            c.fill(*args)
        except err:
            pass
        else:
            raise AssertionError(f"fill{args!r} did not raise {err.__name__}")
    lst = []

    class Clears:                                # mutates the list it is read from
        def __index__(self):
            lst.clear()
            return 2
    lst[:] = [Clears()] + list(range(1, 3000))
    rows = bytearray(64 * 3000)
    c.fill(rows, base, lst, 0)
    assert c.verify(rows, base, [2] + list(range(1, 3000)), 0) == b"\x01" * 3000

    def worker(k, out):                          # the loops run without the GIL
        r = bytearray(64 * 200)
        for _ in range(50):
            c.fill(r, base, range(k, k + 200), 0)
            out.append(c.verify(r, base, range(k, k + 200), 0) == b"\x01" * 200)
    results = []
    threads = [threading.Thread(target=worker, args=(1000 * t, results)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 200
    print("replay codec: every check held")


if __name__ == "__main__":
    main(sys.argv[1])
