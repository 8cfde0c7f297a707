/* common/sync.h: the two pthread set-ups every module repeated: a condition variable
 * that times out on CLOCK_MONOTONIC (so deadlines from mc_deadline_ms and friends hold
 * across wall-clock jumps), with the absolute wake-up time such a wait takes, and a
 * writer-preferring rwlock (so a writer is not starved by a
 * stream of readers). Header-only; owns no memory. Init once, before any other thread
 * sees the object; destroy with pthread_cond_destroy / pthread_rwlock_destroy. */
#ifndef MOONCAKE_COMMON_SYNC_H
#define MOONCAKE_COMMON_SYNC_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* mc_cond_init_monotonic: pthread_cond_init with a CLOCK_MONOTONIC clock: a
 * pthread_cond_timedwait on it takes an absolute CLOCK_MONOTONIC time. */
static inline void mc_cond_init_monotonic(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

/* mc_monotonic_in_ms: the absolute CLOCK_MONOTONIC time ms milliseconds from now, for
 * pthread_cond_timedwait on a condition variable from mc_cond_init_monotonic. */
static inline struct timespec mc_monotonic_in_ms(uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + ms * 1000000ull;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    return ts;
}

/* mc_rwlock_init_writer_first: pthread_rwlock_init preferring writers (glibc
 * PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: a reader must not take the lock again
 * while it holds it). */
static inline void mc_rwlock_init_writer_first(pthread_rwlock_t *l)
{
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(l, &ra);
    pthread_rwlockattr_destroy(&ra);
}

#endif
