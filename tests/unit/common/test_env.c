/* common/env.h: unset or empty means the default; a set value that does not parse or is
 * out of range is -EINVAL with an ERROR naming the variable and its value; sizes take
 * suffixes, bools the usual spellings. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/env.h"
#include "mooncake/log.h"

#define VAR "MC_TEST_ENV_VALUE"

static char g_last[512];
static int g_errors;

static void sink(mc_log_level level, const char *tag, const char *msg, void *ctx)
{
    (void)ctx;
    if (level == MC_LOG_ERROR)
        g_errors++;
    snprintf(g_last, sizeof g_last, "%s|%s", tag, msg);
}

static int setup(void **state)
{
    (void)state;
    unsetenv(VAR);
    g_errors = 0;
    g_last[0] = '\0';
    mc_log_set_sink(sink, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mc_log_set_sink(NULL, NULL);
    unsetenv(VAR);
    return 0;
}

/* A bad value: -EINVAL, one ERROR naming VAR=value. */
static void expect_bad(int rc, const char *value)
{
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(g_errors, 1);
    char want[128];
    snprintf(want, sizeof want, VAR "=%s", value);
    assert_non_null(strstr(g_last, want));
    assert_non_null(strstr(g_last, "env|"));
    g_errors = 0;
}

static void test_str(void **state)
{
    (void)state;
    assert_null(mc_env_str(VAR));
    setenv(VAR, "", 1);
    assert_null(mc_env_str(VAR));
    setenv(VAR, "x y", 1);
    assert_string_equal(mc_env_str(VAR), "x y");
}

static void test_u64(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(mc_env_u64(VAR, 7, 1, 10, &v), 0);
    assert_int_equal(v, 7);
    setenv(VAR, "", 1);
    assert_int_equal(mc_env_u64(VAR, 7, 1, 10, &v), 0);
    assert_int_equal(v, 7);
    setenv(VAR, "10", 1);
    assert_int_equal(mc_env_u64(VAR, 7, 1, 10, &v), 0);
    assert_int_equal(v, 10);
    assert_int_equal(g_errors, 0);
    const char *bad[] = {"11", "0", "-1", "abc", "5x", " 5", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(VAR, bad[i], 1);
        expect_bad(mc_env_u64(VAR, 7, 1, 10, &v), bad[i]);
    }
    /* digits beyond 2^64 are an integer out of range, and the message says which range */
    setenv(VAR, "99999999999999999999999", 1);
    expect_bad(mc_env_u64(VAR, 7, 1, 10, &v), "99999999999999999999999");
    setenv(VAR, "99999999999999999999999", 1);
    assert_int_equal(mc_env_u64(VAR, 7, 1, 10, &v), -EINVAL);
    assert_non_null(strstr(g_last, "expected a value in 1..10"));
    g_errors = 0;
}

static void test_size(void **state)
{
    (void)state;
    uint64_t v = 0;
    setenv(VAR, "64KB", 1);
    assert_int_equal(mc_env_size(VAR, 1, 0, UINT64_MAX, &v), 0);
    assert_int_equal(v, 64 * 1024);
    setenv(VAR, "4096", 1);
    assert_int_equal(mc_env_size(VAR, 1, 0, UINT64_MAX, &v), 0);
    assert_int_equal(v, 4096);
    setenv(VAR, "1k", 1);
    expect_bad(mc_env_size(VAR, 8192, 4096, 1 << 20, &v), "1k"); /* below the minimum */
    setenv(VAR, "lots", 1);
    expect_bad(mc_env_size(VAR, 8192, 4096, 1 << 20, &v), "lots");
}

static void test_double(void **state)
{
    (void)state;
    double d = 0;
    assert_int_equal(mc_env_double(VAR, 0.5, 0, 1, &d), 0);
    assert_true(d == 0.5);
    setenv(VAR, "0.25", 1);
    assert_int_equal(mc_env_double(VAR, 0.5, 0, 1, &d), 0);
    assert_true(d == 0.25);
    const char *bad[] = {"1.5", "nan", "inf", "x", "0.5s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(VAR, bad[i], 1);
        expect_bad(mc_env_double(VAR, 0.5, 0, 1, &d), bad[i]);
    }
}

static void test_bool(void **state)
{
    (void)state;
    bool b = true;
    assert_int_equal(mc_env_bool(VAR, true, &b), 0);
    assert_true(b);
    const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        setenv(VAR, yes[i], 1);
        assert_int_equal(mc_env_bool(VAR, false, &b), 0);
        assert_true(b);
        setenv(VAR, no[i], 1);
        assert_int_equal(mc_env_bool(VAR, true, &b), 0);
        assert_false(b);
    }
    assert_int_equal(g_errors, 0);
    setenv(VAR, "maybe", 1);
    expect_bad(mc_env_bool(VAR, false, &b), "maybe");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_str, setup, teardown),
        cmocka_unit_test_setup_teardown(test_u64, setup, teardown),
        cmocka_unit_test_setup_teardown(test_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_double, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bool, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
