/* common/spin.c: see spin.h. */
#include "common/spin.h"

#include <pthread.h>
#include <sched.h>

#include "common/env.h"
#include "mooncake/mc_time.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint32_t budget_us;

/* MC_BUSY_POLL_US now, in *v: 0 or -EINVAL (logged, naming it). */
static int read_env(uint64_t *v)
{
    return mc_env_u64("MC_BUSY_POLL_US", MC_SPIN_DEFAULT_US, 0, MC_SPIN_MAX_US, v);
}

static void read_budget(void)
{
    uint64_t v = 0;
    if (read_env(&v) == 0)
        budget_us = (uint32_t)v;
}

int mc_spin_env_check(void)
{
    uint64_t v;
    return read_env(&v);
}

uint32_t mc_spin_budget_us(void)
{
    pthread_once(&once, read_budget);
    return budget_us;
}

void mc_spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A site's budget: the process's, lowered to the site's cap when it has one. */
static uint32_t site_budget(const mc_spin_site *site)
{
    uint32_t b = mc_spin_budget_us();
    return site && site->cap_us && site->cap_us < b ? site->cap_us : b;
}

bool mc_spin_until(mc_spin_site *site, bool (*ready)(void *arg), void *arg)
{
    uint32_t b = site_budget(site);
    if (ready(arg))
        return true;
    if (!b)
        return false;
    uint32_t win = b;
    uint64_t t0 = mc_now_us();
    if (site) {
        if (!site->init) {
            site->init = true;
            site->win_us = MC_SPIN_START_US < b ? MC_SPIN_START_US : b;
        }
        site->t0_us = t0;
        win = site->win_us < b ? site->win_us : b;
        if (!win)
            return false;
    }
    uint64_t end = t0 + win;
    unsigned n = 0;
    for (;;) {
        for (int i = 0; i < 32; i++)
            mc_spin_pause();
        if (ready(arg))
            return true;
        /* every other round (a few us): give the core away if another thread wants it
         * (two cores, three processes: the thread we wait for may need this one; on a
         * busy box the poll then costs little) */
        if (++n % 2 == 0)
            sched_yield();
        if (mc_now_us() >= end)
            return false;
    }
}

void mc_spin_woke(mc_spin_site *site, bool event)
{
    uint32_t b = site_budget(site);
    if (!site || !b || !site->init)
        return;
    uint64_t waited = mc_now_us() - site->t0_us;
    uint32_t w = site->win_us;
    if (waited > b) {
        w /= 2; /* long waits: polling would not have caught it */
        if (w < MC_SPIN_MIN_US)
            w = 0;
    } else if (event) {
        uint64_t g = (uint64_t)w * 2;
        if (g < waited + waited / 4)
            g = waited + waited / 4;
        if (g < MC_SPIN_START_US)
            g = MC_SPIN_START_US;
        w = g < b ? (uint32_t)g : b;
    }
    site->win_us = w;
}
