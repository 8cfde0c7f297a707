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
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"

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

/* te_stats: a snapshot of te's counters. */
static inline mc_te_stats te_stats(mc_te *te)
{
    mc_te_stats st;
    mc_te_get_stats(te, &st);
    return st;
}

/* te_inline_batch: r[0..n) in a new batch of te through mc_te_submit_inline (budget_ms),
 * waited for up to wait_ms, then freed. Returns the batch's final state (MC_TE_*), or -1
 * when a call failed or the batch did not end in time. at_return (if not NULL): its
 * state right after submit returned. */
static inline int te_inline_batch(mc_te *te, const mc_te_request *r, size_t n,
                                  uint32_t budget_ms, int64_t wait_ms, int *at_return)
{
    mc_te_batch_t b;
    mc_te_status st;
    if (mc_te_allocate_batch(te, n, &b) != MC_OK)
        return -1;
    int rc = mc_te_submit_inline(te, b, r, n, budget_ms);
    if (rc == MC_OK && at_return)
        *at_return = mc_te_get_batch_status(te, b, &st) == MC_OK ? (int)st.state : -1;
    if (rc == MC_OK)
        rc = mc_te_wait_batch(te, b, wait_ms, &st);
    if (rc != MC_OK || mc_te_free_batch(te, b) != MC_OK)
        return -1;
    return (int)st.state;
}

#endif
