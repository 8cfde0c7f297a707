/* te_test_util.h: helpers shared by the transfer-engine unit tests. */
#ifndef TE_TEST_UTIL_H
#define TE_TEST_UTIL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mooncake/mc_time.h"

/* Deterministic bytes: fill(p, n, seed) then check(p, n, seed). */
static inline uint64_t te_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static inline void te_fill(void *p, size_t n, uint64_t seed)
{
    uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = te_mix(seed * 0x9E3779B97F4A7C15ULL + i);
        memcpy(b + i, &v, 8);
    }
    for (; i < n; i++)
        b[i] = (uint8_t)te_mix(seed + i);
}

static inline int te_check(const void *p, size_t n, uint64_t seed)
{
    uint8_t *tmp = malloc(n ? n : 1);
    te_fill(tmp, n, seed);
    int ok = memcmp(tmp, p, n) == 0;
    free(tmp);
    return ok;
}

/* te_wait_until: polls cond(arg) (every millisecond) until it holds or timeout_ms has
 * passed; returns whether it held. For conditions another thread makes true. */
static inline bool te_wait_until(bool (*cond)(void *), void *arg, uint64_t timeout_ms)
{
    uint64_t deadline = mc_deadline_ms(timeout_ms);
    for (;;) {
        if (cond(arg))
            return true;
        if (!mc_ms_left(deadline))
            return false;
        mc_sleep_ms(1);
    }
}

/* A TCP port that was free on 127.0.0.1 a moment ago. */
static inline int te_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd);
    return ntohs(sa.sin_port);
}

#endif
