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

/* a site whose poll ran out of budget asks once (no polling) for the next
 * MC_SPIN_BACKOFF waits, then polls again */
static void test_a_site_backs_off_after_a_long_wait(void **state)
{
    (void)state;
    mc_spin_site site = {0};
    int n = 0;
    assert_false(mc_spin_until(&site, never, &n));
    assert_true(n > 1);
    for (int i = 0; i < MC_SPIN_BACKOFF; i++) {
        n = 0;
        assert_false(mc_spin_until(&site, never, &n));
        assert_int_equal(n, 1);
    }
    n = 0;
    assert_false(mc_spin_until(&site, never, &n));
    assert_true(n > 1);
    /* a ready condition is seen at once, backing off or not */
    assert_true(mc_spin_until(&site, counted, &(int){2}));
}

int main(void)
{
    setenv("MC_BUSY_POLL_US", "400", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_after_some_rounds),
        cmocka_unit_test(test_gives_up_after_the_budget),
        cmocka_unit_test(test_a_site_backs_off_after_a_long_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
