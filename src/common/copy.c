/* common/copy.c: see copy.h. */
#include "common/copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>

void mc_copy_to_segment(void *dst, const void *src, size_t n)
{
    if (n < MC_COPY_STREAM_MIN) {
        memcpy(dst, src, n);
        return;
    }
    char *d = dst;
    const char *s = src;
    /* ordinary stores up to the first 64-byte line of dst: the streaming stores then
     * fill whole lines, which the write-combining buffers send without a read */
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
        _mm_stream_si128((__m128i *)(void *)(d + i), a);
        _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
    }
    /* streaming stores are weakly ordered: fence them before anything the caller does
     * next (the completion it reports, the lock it drops) */
    _mm_sfence();
    memcpy(d + body, s + body, n - body);
}

#else

void mc_copy_to_segment(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

#endif
