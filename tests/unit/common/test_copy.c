/* common/copy.h: mc_copy_to_segment copies exactly the bytes memcpy would, for every
 * alignment of source and destination and every size around the streaming threshold
 * and the 64-byte lines, and writes nothing outside [dst, dst+n). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/copy.h"

#define GUARD 256

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
}

#define CAP ((2u << 20) + 2 * GUARD + 64)
/* line-aligned, so that an offset of 0 is a dst whose head is empty */
static _Alignas(64) uint8_t src_buf[CAP], dst_buf[CAP], want_buf[CAP];

static void check_one(size_t n, size_t doff, size_t soff)
{
    assert_true(n + 2 * GUARD + 64 <= CAP && doff < 64 && soff < 64);
    fill(src_buf, soff + n, (uint32_t)(n * 131 + doff * 7 + soff));
    memset(dst_buf, 0xA5, CAP);
    memcpy(want_buf, dst_buf, CAP);
    memcpy(want_buf + GUARD + doff, src_buf + soff, n);
    mc_copy_to_segment(dst_buf + GUARD + doff, src_buf + soff, n);
    if (memcmp(dst_buf, want_buf, CAP) != 0) {
        size_t i = 0;
        while (dst_buf[i] == want_buf[i])
            i++;
        fail_msg("n=%zu doff=%zu soff=%zu: first wrong byte at %td from dst", n, doff, soff,
                 (ptrdiff_t)i - (ptrdiff_t)(GUARD + doff));
    }
}

/* sizes below, at and above MC_COPY_STREAM_MIN, and around a multiple of 64 */
static void test_every_alignment_and_size(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 63, 64, 65, 4095, MC_COPY_STREAM_MIN,
                                   MC_COPY_STREAM_MIN + 1, MC_COPY_STREAM_MIN + 63,
                                   MC_COPY_STREAM_MIN + 64, 65536, 65536 + 17,
                                   (1u << 20) + 5};
    static const size_t offs[] = {0, 1, 8, 15, 16, 32, 33, 63};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t d = 0; d < sizeof offs / sizeof offs[0]; d++)
            for (size_t s = 0; s < sizeof offs / sizeof offs[0]; s++)
                check_one(sizes[i], offs[d], offs[s]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_alignment_and_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
