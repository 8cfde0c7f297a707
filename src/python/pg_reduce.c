/* pg_reduce.c: element-wise reductions for mooncake._pg (pg_comm.h).
 * Plain loops over typed pointers, written so that gcc -O2/-O3 auto-vectorises them
 * (no aliasing assumptions: dst may equal a or b, which gcc handles with a runtime
 * overlap check). Half types are widened to float per element and rounded back
 * (round-to-nearest-even), as gloo's CPU reductions do for at::Half / at::BFloat16. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pg_comm.h"

#include "common/xalloc.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

static inline float bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((y) > (x) ? (y) : (x))
#define OP_BAND(x, y) ((x) & (y))
#define OP_BOR(x, y) ((x) | (y))
#define OP_BXOR(x, y) ((x) ^ (y))

#define LOOP(T, OP)                                                                       \
    do {                                                                                  \
        T *d_ = (T *)dst;                                                                 \
        const T *a_ = (const T *)a, *b_ = (const T *)b;                                   \
        for (size_t i = 0; i < n; i++)                                                    \
            d_[i] = (T)OP(a_[i], b_[i]);                                                  \
    } while (0)

#define ARITH(T)                                                                          \
    switch (op) {                                                                         \
    case MC_PG_SUM:                                                                       \
    case MC_PG_AVG:                                                                       \
        LOOP(T, OP_SUM);                                                                  \
        return 0;                                                                         \
    case MC_PG_PROD:                                                                      \
        LOOP(T, OP_PROD);                                                                 \
        return 0;                                                                         \
    case MC_PG_MIN:                                                                       \
        LOOP(T, OP_MIN);                                                                  \
        return 0;                                                                         \
    case MC_PG_MAX:                                                                       \
        LOOP(T, OP_MAX);                                                                  \
        return 0;                                                                         \
    default:                                                                              \
        break;                                                                            \
    }

#define BITS(T)                                                                           \
    switch (op) {                                                                         \
    case MC_PG_BAND:                                                                      \
        LOOP(T, OP_BAND);                                                                 \
        return 0;                                                                         \
    case MC_PG_BOR:                                                                       \
        LOOP(T, OP_BOR);                                                                  \
        return 0;                                                                         \
    case MC_PG_BXOR:                                                                      \
        LOOP(T, OP_BXOR);                                                                 \
        return 0;                                                                         \
    default:                                                                              \
        break;                                                                            \
    }

/* Half types: widen, combine, narrow. */
#define HLOOP(LOAD, STORE, OP)                                                            \
    do {                                                                                  \
        uint16_t *d_ = (uint16_t *)dst;                                                   \
        const uint16_t *a_ = (const uint16_t *)a, *b_ = (const uint16_t *)b;              \
        for (size_t i = 0; i < n; i++)                                                    \
            d_[i] = STORE(OP(LOAD(a_[i]), LOAD(b_[i])));                                  \
    } while (0)

#define HARITH(LOAD, STORE)                                                               \
    switch (op) {                                                                         \
    case MC_PG_SUM:                                                                       \
    case MC_PG_AVG:                                                                       \
        HLOOP(LOAD, STORE, OP_SUM);                                                       \
        return 0;                                                                         \
    case MC_PG_PROD:                                                                      \
        HLOOP(LOAD, STORE, OP_PROD);                                                      \
        return 0;                                                                         \
    case MC_PG_MIN:                                                                       \
        HLOOP(LOAD, STORE, OP_MIN);                                                       \
        return 0;                                                                         \
    case MC_PG_MAX:                                                                       \
        HLOOP(LOAD, STORE, OP_MAX);                                                       \
        return 0;                                                                         \
    default:                                                                              \
        break;                                                                            \
    }

#ifdef __FLT16_MAX__ /* the compiler has _Float16 (gcc >= 12 on x86-64) */
static inline float h_to_f(uint16_t h)
{
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

static inline uint16_t f_to_h(float f)
{
    _Float16 x = (_Float16)f;
    uint16_t h;
    memcpy(&h, &x, 2);
    return h;
}
#else /* IEEE binary16 by hand, round to nearest even */
static inline uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float h_to_f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return bitsf(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        /* zero or subnormal: m * 2^-24 */
        float v = (float)m * bitsf(0x33800000u);
        return sign ? -v : v;
    }
    return bitsf(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t f_to_h(float f)
{
    uint32_t x = fbits(f), sign = x & 0x80000000u;
    x ^= sign;
    uint16_t o;
    if (x >= (143u << 23)) { /* >= 65536 before rounding: inf, or NaN */
        o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (x < (113u << 23)) { /* subnormal half: let the FPU round */
        float magic = bitsf(126u << 23); /* 0.5: aligns the half's last bit */
        o = (uint16_t)(fbits(bitsf(x) + magic) - fbits(magic));
    } else {
        uint32_t odd = (x >> 13) & 1u;
        x += (uint32_t)(15 - 127) * (1u << 23) + 0xfffu + odd;
        o = (uint16_t)(x >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}
#endif

/* x86-64: an AVX2 clone beside the baseline (SSE2) one, picked at load time by the CPU
 * (an ifunc; gcc only: clang's fuzz builds keep the single version). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define MC_PG_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MC_PG_CLONES
#endif

MC_PG_CLONES
int mc__pg_reduce2(int dtype, int op, void *dst, const void *a, const void *b, size_t n)
{
    switch (dtype) {
    case MC_PG_F32:
        ARITH(float);
        break;
    case MC_PG_F64:
        ARITH(double);
        break;
    case MC_PG_F16:
        HARITH(h_to_f, f_to_h);
        break;
    case MC_PG_BF16:
        HARITH(bf16_to_f, f_to_bf16);
        break;
    case MC_PG_I8:
        ARITH(int8_t);
        BITS(int8_t);
        break;
    case MC_PG_U8:
        ARITH(uint8_t);
        BITS(uint8_t);
        break;
    case MC_PG_I16:
        ARITH(int16_t);
        BITS(int16_t);
        break;
    case MC_PG_I32:
        ARITH(int32_t);
        BITS(int32_t);
        break;
    case MC_PG_I64:
        ARITH(int64_t);
        BITS(int64_t);
        break;
    case MC_PG_BOOL: {
        /* torch bools are 0/1 bytes: SUM/MAX/BOR = or, PROD/MIN/BAND = and, BXOR = xor */
        uint8_t *d_ = dst;
        const uint8_t *a_ = a, *b_ = b;
        if (op == MC_PG_SUM || op == MC_PG_MAX || op == MC_PG_BOR) {
            for (size_t i = 0; i < n; i++)
                d_[i] = (uint8_t)(a_[i] | b_[i]);
        } else if (op == MC_PG_PROD || op == MC_PG_MIN || op == MC_PG_BAND) {
            for (size_t i = 0; i < n; i++)
                d_[i] = (uint8_t)(a_[i] & b_[i]);
        } else if (op == MC_PG_BXOR) {
            for (size_t i = 0; i < n; i++)
                d_[i] = (uint8_t)(a_[i] ^ b_[i]);
        } else {
            return -1;
        }
        return 0;
    }
    default:
        break;
    }
    return -1;
}

#define NARY_BLOCK 16384 /* elements per block: the destination block stays in L2 */

static bool overlaps(const void *x, const void *y, size_t len)
{
    const char *p = x, *q = y;
    return p < q + len && q < p + len;
}

int mc__pg_reduce_n(int dtype, int op, void *dst, const void *const *srcs, int nsrc,
                    size_t n)
{
    size_t esz = mc__pg_dtype_size(dtype);
    if (!esz || nsrc < 1)
        return -1;
    if (nsrc == 1) {
        if (dst != srcs[0] && n)
            memmove(dst, srcs[0], n * esz);
        return 0;
    }
    /* dst may be srcs[0] (the in-place case); when it overlaps another source, combine in
     * a scratch block first so that no source is overwritten before it is read */
    bool scratch = false;
    for (int i = 1; i < nsrc && !scratch; i++)
        scratch = overlaps(dst, srcs[i], n * esz);
    char *t = scratch ? mc_xmalloc(NARY_BLOCK * esz) : NULL;
    for (size_t off = 0; off < n; off += NARY_BLOCK) {
        size_t k = n - off < NARY_BLOCK ? n - off : NARY_BLOCK;
        size_t b = off * esz;
        char *d = scratch ? t : (char *)dst + b;
        if (mc__pg_reduce2(dtype, op, d, (const char *)srcs[0] + b, (const char *)srcs[1] + b,
                           k) < 0) {
            free(t);
            return -1;
        }
        for (int i = 2; i < nsrc; i++)
            mc__pg_reduce2(dtype, op, d, d, (const char *)srcs[i] + b, k);
        if (scratch)
            memcpy((char *)dst + b, t, k * esz);
    }
    free(t);
    return 0;
}

int mc__pg_scale_avg(int dtype, void *buf, size_t n, int count)
{
    switch (dtype) {
    case MC_PG_F32: {
        float *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] /= (float)count;
        return 0;
    }
    case MC_PG_F64: {
        double *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] /= (double)count;
        return 0;
    }
    case MC_PG_F16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = f_to_h(h_to_f(p[i]) / (float)count);
        return 0;
    }
    case MC_PG_BF16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = f_to_bf16(bf16_to_f(p[i]) / (float)count);
        return 0;
    }
    default:
        return -1; /* torch allows AVG on floating types only */
    }
}

size_t mc__pg_dtype_size(int dtype)
{
    static const size_t sz[] = {4, 8, 2, 2, 1, 1, 2, 4, 8, 1};
    return dtype >= 0 && dtype < (int)(sizeof sz / sizeof sz[0]) ? sz[dtype] : 0;
}

int mc__pg_op_valid(int dtype, int op)
{
    if (mc__pg_dtype_size(dtype) == 0)
        return 0;
    bool is_float = dtype <= MC_PG_BF16;
    switch (op) {
    case MC_PG_SUM:
    case MC_PG_PROD:
    case MC_PG_MIN:
    case MC_PG_MAX:
        return 1;
    case MC_PG_AVG:
        return is_float;
    case MC_PG_BAND:
    case MC_PG_BOR:
    case MC_PG_BXOR:
        return !is_float;
    default:
        return 0;
    }
}
