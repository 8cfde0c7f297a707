/* Logging: level filtering happens before formatting; the sink receives what passes;
 * MC_LOG_LEVEL parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mooncake/log.h"

static int g_calls;
static char g_last[256];
static mc_log_level g_last_level;

static void sink(mc_log_level level, const char *tag, const char *msg, void *ctx)
{
    (void)ctx;
    g_calls++;
    g_last_level = level;
    snprintf(g_last, sizeof g_last, "%s|%s", tag, msg);
}

static int g_formatted;
static const char *side_effect(void)
{
    g_formatted++;
    return "x";
}

static void test_filter(void **state)
{
    (void)state;
    mc_log_set_sink(sink, NULL);
    g_calls = 0;
    g_formatted = 0;
    mc_log_set_level(MC_LOG_WARN);
    mc_log(MC_LOG_INFO, "t", "dropped %s", side_effect());
    assert_int_equal(g_calls, 0);
    assert_int_equal(g_formatted, 0); /* arguments not even evaluated */
    mc_log(MC_LOG_WARN, "t", "kept %d", 7);
    assert_int_equal(g_calls, 1);
    assert_string_equal(g_last, "t|kept 7");
    assert_int_equal(g_last_level, MC_LOG_WARN);
    mc_log(MC_LOG_ERROR, "net", "err");
    assert_int_equal(g_calls, 2);
    mc_log_set_level(MC_LOG_OFF);
    mc_log(MC_LOG_ERROR, "net", "err");
    assert_int_equal(g_calls, 2);
    mc_log_set_sink(NULL, NULL);
}

static void test_parse(void **state)
{
    (void)state;
    assert_int_equal(mc_log_parse_level("info"), MC_LOG_INFO);
    assert_int_equal(mc_log_parse_level("WARNING"), MC_LOG_WARN);
    assert_int_equal(mc_log_parse_level("warn"), MC_LOG_WARN);
    assert_int_equal(mc_log_parse_level("Trace"), MC_LOG_TRACE);
    assert_int_equal(mc_log_parse_level("4"), MC_LOG_ERROR);
    assert_int_equal(mc_log_parse_level("loud"), -1);
    assert_int_equal(mc_log_parse_level(""), -1);
    assert_int_equal(mc_log_parse_level(NULL), -1);
}

static void test_env(void **state)
{
    (void)state;
    setenv("MC_LOG_LEVEL", "ERROR", 1);
    assert_int_equal(mc_log_init_from_env(), 0);
    assert_int_equal(mc_log_get_level(), MC_LOG_ERROR);
    setenv("MC_LOG_LEVEL", "bogus", 1);
    assert_int_not_equal(mc_log_init_from_env(), 0);
    assert_int_equal(mc_log_get_level(), MC_LOG_ERROR); /* unchanged */
    unsetenv("MC_LOG_LEVEL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_env),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
