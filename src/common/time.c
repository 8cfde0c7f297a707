/* time.c: see include/mooncake/mc_time.h. */
#include "mooncake/mc_time.h"

#include <errno.h>
#include <time.h>

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t mc_now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
uint64_t mc_now_us(void) { return clock_ns(CLOCK_MONOTONIC) / 1000ull; }
uint64_t mc_now_ms(void) { return clock_ns(CLOCK_MONOTONIC) / 1000000ull; }
uint64_t mc_wall_ms(void) { return clock_ns(CLOCK_REALTIME) / 1000000ull; }

uint64_t mc_deadline_ms(uint64_t timeout_ms)
{
    uint64_t now = mc_now_ms();
    return timeout_ms > UINT64_MAX - now ? UINT64_MAX : now + timeout_ms;
}

uint64_t mc_ms_left(uint64_t deadline_ms)
{
    uint64_t now = mc_now_ms();
    return deadline_ms > now ? deadline_ms - now : 0;
}

void mc_sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}
