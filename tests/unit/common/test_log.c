/* Logging: level filtering happens before formatting; the sink receives what passes;
 * MC_LOG_LEVEL parsing; the sink is called outside log.c's lock (a sink that takes a
 * lock held by a thread that logs must not deadlock: the Python sink and the GIL). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

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

/* ---- the Python sink's lock order, with a mutex standing in for the GIL ----
 * Thread B logs without the "GIL"; its sink (like py_log_sink) takes the GIL. Thread A
 * holds the GIL and logs too (as code holding the GIL calls mc_log). A waits until B is
 * inside the sink, blocked on the GIL, then logs: when log.c delivered messages under its
 * own lock, A waited for that lock and B for the GIL held by A, forever. Both threads must
 * finish; the main thread waits at most 20 s for them (bounded, no sleep). */
static pthread_mutex_t gil = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t st_cv = PTHREAD_COND_INITIALIZER;
static int b_in_sink, done_threads, gil_sink_calls;
static __thread int holds_gil;

static void gil_sink(mc_log_level level, const char *tag, const char *msg, void *ctx)
{
    (void)level;
    (void)tag;
    (void)msg;
    (void)ctx;
    int take = !holds_gil; /* PyGILState_Ensure: re-entrant for the thread holding it */
    if (take) {
        pthread_mutex_lock(&st_mu);
        b_in_sink = 1;
        pthread_cond_broadcast(&st_cv);
        pthread_mutex_unlock(&st_mu);
        pthread_mutex_lock(&gil);
    }
    pthread_mutex_lock(&st_mu);
    gil_sink_calls++;
    pthread_mutex_unlock(&st_mu);
    if (take)
        pthread_mutex_unlock(&gil);
}

static void mark_done(void)
{
    pthread_mutex_lock(&st_mu);
    done_threads++;
    pthread_cond_broadcast(&st_cv);
    pthread_mutex_unlock(&st_mu);
}

static void *thread_b(void *arg)
{
    (void)arg;
    mc_log(MC_LOG_ERROR, "b", "logged without the GIL");
    mark_done();
    return NULL;
}

static void *thread_a(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&gil);
    holds_gil = 1;
    /* wait (bounded) until B is inside the sink, about to block on the GIL we hold */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&st_mu);
    while (!b_in_sink && pthread_cond_timedwait(&st_cv, &st_mu, &dl) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&st_mu);
    mc_log(MC_LOG_ERROR, "a", "logged holding the GIL");
    holds_gil = 0;
    pthread_mutex_unlock(&gil);
    mark_done();
    return NULL;
}

static void test_sink_outside_lock(void **state)
{
    (void)state;
    mc_log_set_level(MC_LOG_INFO);
    mc_log_set_sink(gil_sink, NULL);
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, thread_a, NULL), 0);
    assert_int_equal(pthread_create(&b, NULL, thread_b, NULL), 0);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 20;
    int rc = 0;
    pthread_mutex_lock(&st_mu);
    while (done_threads < 2 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&st_cv, &st_mu, &dl);
    int done = done_threads, calls = gil_sink_calls, reached = b_in_sink;
    pthread_mutex_unlock(&st_mu);
    if (done < 2)
        fail_msg("deadlock: %d of 2 logging threads finished within 20 s", done);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    assert_int_equal(reached, 1);
    assert_int_equal(calls, 2);
    mc_log_set_sink(NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_sink_outside_lock),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
