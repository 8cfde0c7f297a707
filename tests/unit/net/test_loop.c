/* Event loop: posted tasks run in order on the loop thread, timers fire in due order and
 * can be cancelled, I/O handlers see readable fds and can unregister themselves. All of
 * it twice: as a plain loop, and as a loop that polls before it sleeps
 * (mc_loop_set_busy_poll, the master's RPC loops; the budget is MC_BUSY_POLL_US's). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "mooncake/mc_time.h"
#include "net/loop.h"

static int order[16];
static int norder;
static mc_loop *g_loop;
static bool g_poll; /* the group that runs the loops polling */

static mc_loop *new_loop(void)
{
    mc_loop *l = NULL;
    assert_int_equal(mc_loop_create(&l), 0);
    mc_loop_set_busy_poll(l, g_poll ? 1000 : 0);
    return l;
}

static int polling_on(void **state)
{
    (void)state;
    g_poll = true;
    return 0;
}

static void record(void *arg)
{
    assert_true(mc_loop_in_thread(g_loop));
    order[norder++] = (int)(intptr_t)arg;
}

static void stop_task(void *arg)
{
    mc_loop_stop(arg);
}

static void test_post_order(void **state)
{
    (void)state;
    g_loop = new_loop();
    norder = 0;
    assert_int_equal(mc_loop_start_thread(g_loop, "t"), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(mc_loop_post(g_loop, record, (void *)(intptr_t)i), 0);
    assert_int_equal(mc_loop_post(g_loop, stop_task, g_loop), 0);
    assert_int_equal(mc_loop_join(g_loop), 0);
    assert_int_equal(norder, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(order[i], i);
    assert_false(mc_loop_in_thread(g_loop));
    assert_int_equal(mc_loop_post(g_loop, record, NULL), -ESHUTDOWN);
    mc_loop_destroy(g_loop);
}

static mc_loop_timer *g_cancel_me;
static int g_ticks;
static void tick(void *arg)
{
    (void)arg;
    if (++g_ticks == 3)
        mc_loop_timer_cancel(g_loop, g_cancel_me);
}

static void test_timers(void **state)
{
    (void)state;
    g_loop = new_loop();
    norder = 0;
    g_ticks = 0;
    uint64_t t0 = mc_now_ms();
    mc_loop_timer_add(g_loop, 30, 0, record, (void *)(intptr_t)3);
    mc_loop_timer_add(g_loop, 10, 0, record, (void *)(intptr_t)1);
    mc_loop_timer_add(g_loop, 20, 0, record, (void *)(intptr_t)2);
    mc_loop_timer *never = mc_loop_timer_add(g_loop, 15, 0, record, (void *)(intptr_t)99);
    mc_loop_timer_cancel(g_loop, never);
    g_cancel_me = mc_loop_timer_add(g_loop, 5, 5, tick, NULL);
    mc_loop_timer_add(g_loop, 80, 0, stop_task, g_loop);
    assert_int_equal(mc_loop_run(g_loop), 0);
    assert_true(mc_now_ms() - t0 >= 80);
    assert_int_equal(norder, 3);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
    assert_int_equal(order[2], 3);
    assert_int_equal(g_ticks, 3); /* cancelled from inside its own callback */
    mc_loop_destroy(g_loop);
}

static int g_reads;
static void on_read(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)arg;
    assert_true(events & EPOLLIN);
    char buf[16];
    ssize_t n = read(fd, buf, sizeof buf);
    assert_true(n > 0);
    g_reads++;
    assert_int_equal(mc_loop_del(loop, fd), 0); /* unregister from inside the handler */
    assert_int_equal(mc_loop_del(loop, fd), -ENOENT);
    mc_loop_stop(loop);
}

static void test_io(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    g_loop = new_loop();
    g_reads = 0;
    assert_int_equal(mc_loop_add(g_loop, sv[0], EPOLLIN, on_read, NULL), 0);
    assert_int_equal(mc_loop_add(g_loop, sv[0], EPOLLIN, on_read, NULL), -EEXIST);
    assert_int_equal(mc_loop_mod(g_loop, 12345, EPOLLIN), -ENOENT);
    assert_int_equal(write(sv[1], "hello", 5), 5);
    assert_int_equal(mc_loop_run(g_loop), 0);
    assert_int_equal(g_reads, 1);
    mc_loop_destroy(g_loop);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_order),
        cmocka_unit_test(test_timers),
        cmocka_unit_test(test_io),
    };
    int failed = cmocka_run_group_tests_name("loop", tests, NULL, NULL);
    return failed + cmocka_run_group_tests_name("loop, polling", tests, polling_on, NULL);
}
