/* common/spin.h: the bounded poll before a thread blocks (issue 17). The budget is read
 * once per process, so this process sets MC_BUSY_POLL_US before the first call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/spin.h"
#include "mooncake/mc_time.h"

static bool counted(void *arg)
{
    int *n = arg;
    return ++*n >= 3;
}

static bool never(void *arg)
{
    (*(int *)arg)++;
    return false;
}

/* polls until ready answers true, asking it again each round */
static void test_ready_after_some_rounds(void **state)
{
    (void)state;
    assert_int_equal(mc_spin_budget_us(), 400);
    int n = 0;
    assert_true(mc_spin_until(NULL, counted, &n));
    assert_int_equal(n, 3);
}

/* a condition that never holds: gives up once the budget is spent, after polling more
 * than once (the caller then blocks) */
static void test_gives_up_after_the_budget(void **state)
{
    (void)state;
    int n = 0;
    uint64_t t0 = mc_now_us();
    assert_false(mc_spin_until(NULL, never, &n));
    assert_true(mc_now_us() - t0 >= 400);
    assert_true(n > 1);
}

/* waits past the whole budget halve a site's window until it is 0; then the site asks
 * once and blocks at once (no polling) */
static void test_a_site_stops_polling_after_long_waits(void **state)
{
    (void)state;
    mc_spin_site site = {0};
    int n = 0;
    assert_false(mc_spin_until(&site, never, &n));
    assert_true(n > 1);
    assert_int_equal(site.win_us, MC_SPIN_START_US);
    int rounds = 0;
    while (site.win_us) {
        uint32_t before = site.win_us;
        assert_false(mc_spin_until(&site, never, &n));
        /* the blocking wait that follows outlasts the budget */
        uint64_t t = mc_now_us();
        while (mc_now_us() - t <= 400)
            mc_spin_pause();
        mc_spin_woke(&site, true);
        assert_true(site.win_us < before);
        assert_true(++rounds < 10);
    }
    n = 0;
    assert_false(mc_spin_until(&site, never, &n));
    assert_int_equal(n, 1);
    /* a ready condition is seen at once, polling or not */
    assert_true(mc_spin_until(&site, counted, &(int){2}));
}

/* A blocking wait of `us` microseconds after a poll that gave up: set by hand, so the
 * rule is tested without depending on how long this (possibly preempted) thread took. */
static void woke_after(mc_spin_site *site, uint64_t us, bool event)
{
    site->t0_us = mc_now_us() - us;
    mc_spin_woke(site, event);
}

/* a wait that ends within the budget but after the window grows the window (doubled, at
 * least to 5/4 of the wait, up to the budget), also from 0, so a site whose waits become
 * short polls again; a timer that ends a short wait (no event) changes nothing */
static void test_short_waits_grow_the_window(void **state)
{
    (void)state;
    mc_spin_site site = {.init = true, .win_us = 0};
    int n = 0;
    assert_false(mc_spin_until(&site, never, &n));
    woke_after(&site, 10, true);
    assert_int_equal(site.win_us, MC_SPIN_START_US);
    woke_after(&site, 10, false);
    assert_int_equal(site.win_us, MC_SPIN_START_US);
    woke_after(&site, 10, true);
    assert_int_equal(site.win_us, 100);
    woke_after(&site, 300, true); /* 5/4 of the wait beats doubling */
    /* the wait measured is 300 us plus the microseconds between the two clock reads
     * (more on a loaded box): 5/4 of 300..311 */
    assert_in_range(site.win_us, 375, 388);
    woke_after(&site, 10, true);
    assert_int_equal(site.win_us, 400); /* the budget */
    /* a poll with a window spends about it: more than one round, within the budget */
    n = 0;
    uint64_t t0 = mc_now_us();
    assert_false(mc_spin_until(&site, never, &n));
    assert_true(mc_now_us() - t0 >= 400);
    assert_true(n > 1);
}

/* a wait longer than the budget halves the window; below MC_SPIN_MIN_US it is 0, and a
 * timer that ends a long wait counts as a long wait */
static void test_long_waits_shrink_the_window_to_zero(void **state)
{
    (void)state;
    mc_spin_site site = {.init = true, .win_us = 2 * MC_SPIN_MIN_US + 2};
    woke_after(&site, 401, true);
    assert_int_equal(site.win_us, MC_SPIN_MIN_US + 1);
    woke_after(&site, 5000, false);
    assert_int_equal(site.win_us, 0);
    int n = 0;
    assert_false(mc_spin_until(&site, never, &n));
    assert_int_equal(n, 1); /* asked once, no polling */
}

int main(void)
{
    setenv("MC_BUSY_POLL_US", "400", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_after_some_rounds),
        cmocka_unit_test(test_gives_up_after_the_budget),
        cmocka_unit_test(test_a_site_stops_polling_after_long_waits),
        cmocka_unit_test(test_short_waits_grow_the_window),
        cmocka_unit_test(test_long_waits_shrink_the_window_to_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
