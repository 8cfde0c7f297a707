/* replay_codec.c: the CPython extension module `mooncake.trace_replay._codec`, the
 * loops of the trace replay's block codec (python/mooncake/trace_replay/blocks.py) in C.
 *
 * The codec's content rule (blocks.py's docstring): a block of W 64-bit words holds, in
 * word i, base[i] XOR seed(h), with seed(h) = splitmix64(h XOR salt). The numpy version
 * in blocks.py writes the expected words of a block to a scratch array and compares it
 * with memcmp: two passes over memory per block, and about ten numpy calls per request.
 * Here each block is one pass (a put's fill writes it; a get's check reads it once, with
 * every word compared, AVX2 where the CPU has it), the seeds are computed from the ids
 * directly and the loops run without the GIL. The replay runs the codec between the
 * calls it times, for every backend alike, so its cost is part of each backend's blocks
 * per second (docs/performance.md, "Session 9").
 *
 * fill(rows, base, ids, salt) -> None
 *     rows: a writable C-contiguous buffer of at least len(ids) * len(base) bytes (block j
 *     goes to bytes [j * B, (j + 1) * B) with B = len(base)); base: a C-contiguous buffer of
 *     B bytes, B a positive multiple of 8 (the base words); ids: integers in
 *     [0, 2**64) (any iterable: it is copied to a tuple first); salt: an integer in
 *     [0, 2**64).
 * verify(rows, base, ids, salt) -> bytes
 *     The same shapes (rows only read). Byte j of the result is 1 when bytes
 *     [j * B, (j + 1) * B) of rows are exactly block ids[j], else 0.
 * poison(rows, base, ids, salt) -> None
 *     The same shapes as fill. Word 0, every 512th word (one per 4 KiB) and the last word
 *     of block j are set to differ from block ids[j]'s words there (one bit flipped), so
 *     that a read which reports success but leaves the block, or a page of it, unwritten
 *     fails verify even when the slot still holds that block from an earlier read.
 * splitmix64(x) -> int: the finaliser (common/mix.h), for tests that compare both
 *     implementations.
 *
 * Errors: TypeError for an object without the buffer protocol, a non-contiguous
 * buffer, a read-only rows (fill, poison), or an id that is not an integer; ValueError for a
 * base that is empty or not a multiple of 8 bytes, rows shorter than the ids need, or an
 * id or salt outside [0, 2**64). Nothing is written when an argument is refused.
 * Ownership: the buffers are borrowed for the call; the caller must not resize them or
 * write rows from another thread meanwhile (fill's and verify's loops run with the GIL
 * released; poison's, a few words a block, keep it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/mix.h"

#if PY_VERSION_HEX < 0x030B0000
#error "mooncake's extension modules need Python 3.11 or later"
#endif

/* Four words at a time (GCC and clang vector extensions): built twice on x86-64, for
 * AVX2 and for the baseline (two SSE2 halves), the loader picking the one the CPU runs
 * (target_clones, where the C library resolves ifuncs); every load and store goes through
 * memcpy, so no alignment is assumed. */
typedef uint64_t v4u64 __attribute__((vector_size(32)));
#if defined(__has_attribute)
#if __has_attribute(target_clones) && defined(__x86_64__) && defined(__linux__) && \
    defined(__GLIBC__)
#define MC_CLONES __attribute__((target_clones("avx2", "default"))) /* glibc's ifunc */
#endif
#endif
#ifndef MC_CLONES
#define MC_CLONES
#endif

/* One 64-bit word at byte offset `at` (memcpy: any alignment). */
static inline uint64_t word_at(const unsigned char *p, size_t at)
{
    uint64_t w;
    memcpy(&w, p + at, 8);
    return w;
}

static inline void set_word(unsigned char *p, size_t at, uint64_t w)
{
    memcpy(p + at, &w, 8);
}

/* dst: the block's words = base ^ seed. */
MC_CLONES
static void fill_block(unsigned char *dst, const unsigned char *base, size_t words,
                       uint64_t seed)
{
    v4u64 s = {seed, seed, seed, seed};
    size_t i = 0;
    for (; i + 16 <= words; i += 16) {
        v4u64 a0, a1, a2, a3;
        memcpy(&a0, base + 8 * i, 32);
        memcpy(&a1, base + 8 * i + 32, 32);
        memcpy(&a2, base + 8 * i + 64, 32);
        memcpy(&a3, base + 8 * i + 96, 32);
        a0 ^= s, a1 ^= s, a2 ^= s, a3 ^= s;
        memcpy(dst + 8 * i, &a0, 32);
        memcpy(dst + 8 * i + 32, &a1, 32);
        memcpy(dst + 8 * i + 64, &a2, 32);
        memcpy(dst + 8 * i + 96, &a3, 32);
    }
    for (; i < words; i++)
        set_word(dst, 8 * i, word_at(base, 8 * i) ^ seed);
}

/* 1 when got holds exactly base ^ seed (every word is read: no early exit, so a bad
 * block costs what a good one does). */
MC_CLONES
static int check_block(const unsigned char *got, const unsigned char *base, size_t words,
                       uint64_t seed)
{
    v4u64 s = {seed, seed, seed, seed}, diff = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 16 <= words; i += 16) {
        v4u64 g0, g1, g2, g3, b0, b1, b2, b3;
        memcpy(&g0, got + 8 * i, 32);
        memcpy(&g1, got + 8 * i + 32, 32);
        memcpy(&g2, got + 8 * i + 64, 32);
        memcpy(&g3, got + 8 * i + 96, 32);
        memcpy(&b0, base + 8 * i, 32);
        memcpy(&b1, base + 8 * i + 32, 32);
        memcpy(&b2, base + 8 * i + 64, 32);
        memcpy(&b3, base + 8 * i + 96, 32);
        diff |= (g0 ^ b0 ^ s) | (g1 ^ b1 ^ s) | (g2 ^ b2 ^ s) | (g3 ^ b3 ^ s);
    }
    uint64_t d = diff[0] | diff[1] | diff[2] | diff[3];
    for (; i < words; i++)
        d |= word_at(got, 8 * i) ^ word_at(base, 8 * i) ^ seed;
    return d == 0;
}

/* Words of a block that poison_block overwrites: one per POISON_STRIDE words (4 KiB,
 * a page and the smallest slice a transfer splits into) and the last. */
#define POISON_STRIDE 512u

/* dst: word 0, every POISON_STRIDE-th word and the last word made to differ from the
 * block's (base ^ seed, one bit flipped), so that a block left unwritten, or with a
 * page or more of it left unwritten, fails check_block whatever the memory held. */
static void poison_block(unsigned char *dst, const unsigned char *base, size_t words,
                         uint64_t seed)
{
    for (size_t i = 0; i < words; i += POISON_STRIDE)
        set_word(dst, 8 * i, word_at(base, 8 * i) ^ seed ^ 1u);
    set_word(dst, 8 * (words - 1), word_at(base, 8 * (words - 1)) ^ seed ^ 1u);
}

/* The parsed arguments of fill and verify: buffer views (released by args_release) and
 * the seeds of the ids (malloc'd). */
typedef struct {
    Py_buffer rows, base;
    int have_rows, have_base;
    uint64_t *seeds;
    Py_ssize_t n;
    size_t words;
} codec_args;

static void args_release(codec_args *a)
{
    if (a->have_rows)
        PyBuffer_Release(&a->rows);
    if (a->have_base)
        PyBuffer_Release(&a->base);
    free(a->seeds);
}

/* An integer in [0, 2**64) for argument `what` of fn. Returns 0, or -1 with TypeError
 * (not an integer) or ValueError (out of range) set; another error raised by o's
 * __index__ propagates as it is. */
static int as_u64(const char *fn, const char *what, PyObject *o, uint64_t *out)
{
    PyObject *i = PyNumber_Index(o);
    if (!i) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) { /* (anything else propagates) */
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "trace_replay._codec.%s: %s must be an integer, "
                         "got %s", fn, what, Py_TYPE(o)->tp_name);
        }
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "trace_replay._codec.%s: %s must be in [0, 2**64)",
                     fn, what);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* A C-contiguous (and, with writable, writable) view of o for argument `what` of fn.
 * Returns 0, or -1 with TypeError naming the argument (in place of the exporter's own
 * TypeError, ValueError or BufferError; other errors propagate). */
static int get_buffer(const char *fn, const char *what, PyObject *o, int writable,
                      Py_buffer *view)
{
    if (PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0))
        == 0)
        return 0;
    /* the exporter's refusal (numpy: ValueError for a strided array, bytes: BufferError
     * for a write) is replaced; anything else (MemoryError, KeyboardInterrupt) stays */
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_ValueError)
        && !PyErr_ExceptionMatches(PyExc_BufferError))
        return -1;
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "trace_replay._codec.%s: %s must be a %sC-contiguous "
                 "buffer (a numpy array, bytearray, mmap), got %s", fn, what,
                 writable ? "writable " : "", Py_TYPE(o)->tp_name);
    return -1;
}

static int args_parse(const char *fn, PyObject *const *argv, Py_ssize_t argc, int writable,
                      codec_args *a)
{
    memset(a, 0, sizeof *a);
    if (argc != 4) {
        PyErr_Format(PyExc_TypeError, "trace_replay._codec.%s(rows, base, ids, salt) takes 4 "
                     "arguments, got %zd", fn, argc);
        return -1;
    }
    uint64_t salt;
    if (as_u64(fn, "salt", argv[3], &salt) < 0)
        return -1;
    if (get_buffer(fn, "rows", argv[0], writable, &a->rows) < 0)
        return -1;
    a->have_rows = 1;
    if (get_buffer(fn, "base", argv[1], 0, &a->base) < 0)
        return -1;
    a->have_base = 1;
    if (a->base.len <= 0 || a->base.len % 8) {
        PyErr_Format(PyExc_ValueError, "trace_replay._codec.%s: base must be a positive "
                     "multiple of 8 bytes, got %zd", fn, a->base.len);
        return -1;
    }
    a->words = (size_t)a->base.len / 8;
    /* a tuple of its own (a list's items are borrowed, and an id's __index__ could
     * change the list under the loop below) */
    PyObject *seq = PySequence_Tuple(argv[2]);
    if (!seq) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "trace_replay._codec.%s: ids must be an iterable "
                         "of integers, got %s", fn, Py_TYPE(argv[2])->tp_name);
        }
        return -1;
    }
    a->n = PyTuple_GET_SIZE(seq);
    if (a->n > 0 && a->rows.len / a->base.len < a->n) {
        PyErr_Format(PyExc_ValueError, "trace_replay._codec.%s: rows hold %zd bytes, %zd "
                     "blocks of %zd need more", fn, a->rows.len, a->n, a->base.len);
        Py_DECREF(seq);
        return -1;
    }
    a->seeds = malloc((size_t)(a->n ? a->n : 1) * sizeof *a->seeds);
    if (!a->seeds) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < a->n; j++) {
        uint64_t h;
        if (as_u64(fn, "every id", PyTuple_GET_ITEM(seq, j), &h) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        a->seeds[j] = mc_splitmix64(h ^ salt);
    }
    Py_DECREF(seq);
    return 0;
}

/* fill and poison: `block` applied to each block of rows in turn (without the GIL when
 * nogil: fill's loop is long, poison's is a few words a block). */
typedef void block_fn(unsigned char *dst, const unsigned char *base, size_t words,
                      uint64_t seed);

static PyObject *write_rows(const char *fn, PyObject *const *argv, Py_ssize_t argc,
                            block_fn *block, int nogil)
{
    codec_args a;
    if (args_parse(fn, argv, argc, 1, &a) < 0) {
        args_release(&a);
        return NULL;
    }
    PyThreadState *ts = nogil ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t j = 0; j < a.n; j++)
        block((unsigned char *)a.rows.buf + (size_t)j * 8 * a.words, a.base.buf, a.words,
              a.seeds[j]);
    if (ts)
        PyEval_RestoreThread(ts);
    args_release(&a);
    Py_RETURN_NONE;
}

static PyObject *codec_fill(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    return write_rows("fill", argv, argc, fill_block, 1);
}

static PyObject *codec_poison(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    return write_rows("poison", argv, argc, poison_block, 0);
}

static PyObject *codec_verify(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    codec_args a;
    if (args_parse("verify", argv, argc, 0, &a) < 0) {
        args_release(&a);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, a.n);
    if (!out) {
        args_release(&a);
        return NULL;
    }
    char *ok = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < a.n; j++)
        ok[j] = (char)check_block((const unsigned char *)a.rows.buf +
                                      (size_t)j * 8 * a.words,
                                  a.base.buf, a.words, a.seeds[j]);
    Py_END_ALLOW_THREADS
    args_release(&a);
    return out;
}

static PyObject *codec_splitmix64(PyObject *self, PyObject *arg)
{
    (void)self;
    uint64_t x;
    if (as_u64("splitmix64", "x", arg, &x) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(mc_splitmix64(x));
}

static PyMethodDef codec_methods[] = {
    {"fill", (PyCFunction)(void (*)(void))codec_fill, METH_FASTCALL,
     "fill(rows, base, ids, salt) -> None: writes block ids[j] (word i = base[i] ^ "
     "splitmix64(ids[j] ^ salt)) into bytes [j*B, (j+1)*B) of rows, B = len(base)."},
    {"verify", (PyCFunction)(void (*)(void))codec_verify, METH_FASTCALL,
     "verify(rows, base, ids, salt) -> bytes: byte j is 1 when bytes [j*B, (j+1)*B) of "
     "rows are exactly block ids[j], else 0."},
    {"poison", (PyCFunction)(void (*)(void))codec_poison, METH_FASTCALL,
     "poison(rows, base, ids, salt) -> None: makes word 0, every 512th word and the last "
     "word of bytes [j*B, (j+1)*B) of rows differ from block ids[j]'s, so that a block "
     "the backend leaves unwritten fails verify."},
    {"splitmix64", codec_splitmix64, METH_O,
     "splitmix64(x) -> int: the splitmix64 finaliser of x in [0, 2**64)."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot codec_slots[] = {
    {0, NULL},
};

static struct PyModuleDef codec_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake.trace_replay._codec",
    .m_doc = "The trace replay's block fill and check loops (blocks.py's content rule).",
    .m_size = 0,
    .m_methods = codec_methods,
    .m_slots = codec_slots,
};

PyMODINIT_FUNC PyInit__codec(void);
PyMODINIT_FUNC PyInit__codec(void)
{
    return PyModuleDef_Init(&codec_module);
}
