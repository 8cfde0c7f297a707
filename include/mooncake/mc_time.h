/* mc_time.h: monotonic and wall-clock time helpers.
 * Monotonic clocks for deadlines, leases and timeouts (never wall time); wall time only
 * for what is shown to people. All functions are thread-safe. */
#ifndef MOONCAKE_MC_TIME_H
#define MOONCAKE_MC_TIME_H

#include <stdint.h>

#include "mooncake/mc_api.h"

/* mc_now_ns / mc_now_us / mc_now_ms: CLOCK_MONOTONIC in ns / us / ms. */
MC_API uint64_t mc_now_ns(void);
MC_API uint64_t mc_now_us(void);
MC_API uint64_t mc_now_ms(void);

/* mc_wall_ms: CLOCK_REALTIME in ms since the epoch (for display and timestamps). */
MC_API uint64_t mc_wall_ms(void);

/* mc_deadline_ms: now + timeout_ms on the monotonic clock, saturating. */
MC_API uint64_t mc_deadline_ms(uint64_t timeout_ms);

/* mc_ms_left: ms until deadline_ms (monotonic), 0 when it has passed. */
MC_API uint64_t mc_ms_left(uint64_t deadline_ms);

/* mc_sleep_ms: sleeps ms milliseconds, resuming after signals. */
MC_API void mc_sleep_ms(uint64_t ms);

#endif
