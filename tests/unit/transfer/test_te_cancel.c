/* test_te_cancel.c: mc_te_cancel_batch against a frozen peer (a real child process
 * running te_peer_helper, SIGSTOPped): the call returns without waiting for the peer,
 * the batch id is gone, a READ reply that arrives after the peer resumes never lands in
 * the caller's buffer (it is received, counted, and dropped), a WRITE's payload is sent
 * from the copy taken at the cancel (the caller freed its source), and an engine
 * destroyed with cancelled batches still in flight frees them. */
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "net/sock.h"
#include "te_test_util.h"

#define MiB (1ull << 20)

extern char **environ;
static const char *helper_path;

typedef struct child {
    pid_t pid;
    int in_fd; /* its stdin: closing it ends the helper */
    char seg[128];
    uint64_t addr;
} child;

static void spawn_helper(child *c, size_t size, uint64_t seed)
{
    int out[2], in[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(in), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    char ss[32], sd[32];
    snprintf(ss, sizeof ss, "%zu", size);
    snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
    char *argv[] = {(char *)helper_path, "0", ss, sd, NULL};
    assert_int_equal(posix_spawn(&c->pid, helper_path, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    c->in_fd = in[1];
    char line[256];
    size_t n = 0;
    uint64_t deadline = mc_deadline_ms(20000);
    while (n < sizeof line - 1 && !memchr(line, '\n', n)) {
        assert_int_equal(mc_sock_wait(out[0], POLLIN, deadline), 1);
        ssize_t k = read(out[0], line + n, sizeof line - 1 - n);
        assert_true(k > 0);
        n += (size_t)k;
        line[n] = '\0';
    }
    close(out[0]);
    unsigned long long addr;
    assert_int_equal(sscanf(line, "READY %127s %llu", c->seg, &addr), 2);
    c->addr = addr;
}

static void freeze(child *c)
{
    kill(c->pid, SIGSTOP);
    int wst;
    assert_int_equal(waitpid(c->pid, &wst, WUNTRACED), c->pid); /* it has really stopped */
    assert_true(WIFSTOPPED(wst));
}

static void end_helper(child *c)
{
    kill(c->pid, SIGCONT);
    close(c->in_fd);
    int st;
    waitpid(c->pid, &st, 0);
}

static mc_te *mk(uint64_t timeout_ms)
{
    mc_te_opts o = {.transfer_timeout_ms = timeout_ms, .force_tcp = 1};
    mc_te *te;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(mc_te_initialize(te, "127.0.0.1", "P2PHANDSHAKE", "tcp", ""), MC_OK);
    return te;
}

static uint64_t received(mc_te *te)
{
    mc_te_stats st;
    mc_te_get_stats(te, &st);
    return st.tcp_bytes_received;
}

static bool all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return false;
    return true;
}

static void test_cancel_read_frozen_peer(void **state)
{
    (void)state;
    child c;
    spawn_helper(&c, 8 * MiB, 3);
    mc_te *a = mk(20000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, c.seg, &seg), MC_OK);
    freeze(&c);
    unsigned char *dst = malloc(4 * MiB);
    memset(dst, 0xA5, 4 * MiB);
    mc_te_request r = {.opcode = MC_TE_OP_READ, .source = dst, .target_id = seg,
                       .target_offset = c.addr, .length = 4 * MiB};
    mc_te_batch_t b;
    assert_int_equal(mc_te_allocate_batch(a, 1, &b), MC_OK);
    assert_int_equal(mc_te_submit(a, b, &r, 1), MC_OK);
    mc_te_status st;
    assert_int_equal(mc_te_wait_batch(a, b, 100, &st), MC_RPC_TIMEOUT); /* stuck */
    uint64_t r0 = received(a);
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_te_cancel_batch(a, b), MC_OK);
    assert_true(mc_now_ms() - t0 < 10000); /* did not wait for the 20 s timeout */
    /* the id is gone */
    assert_int_equal(mc_te_wait_batch(a, b, 0, &st), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_free_batch(a, b), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_cancel_batch(a, b), MC_INVALID_PARAMS);
    /* the peer wakes and answers the old request: the reply is received (counted) and
     * dropped; the caller's buffer keeps its pattern */
    kill(c.pid, SIGCONT);
    uint64_t deadline = mc_deadline_ms(15000);
    while (received(a) < r0 + 4 * MiB && mc_now_ms() < deadline)
        mc_sleep_ms(5);
    assert_true(received(a) >= r0 + 4 * MiB);
    assert_true(all_bytes(dst, 4 * MiB, 0xA5));
    /* the engine and the peer are fine: a new read gets the peer's bytes */
    uint64_t l = (uint64_t)(uintptr_t)dst, rem = c.addr, n = 4 * MiB;
    assert_int_equal(mc_te_transfer_sync(a, c.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(dst, 4 * MiB, 3)); /* the first 4 MiB of the peer's fill */
    end_helper(&c);
    mc_te_destroy(a);
    free(dst);
}

static void test_cancel_write_sends_copy(void **state)
{
    (void)state;
    child c;
    spawn_helper(&c, 32 * MiB, 4);
    mc_te *a = mk(20000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, c.seg, &seg), MC_OK);
    freeze(&c);
    /* more than the socket buffers hold, so part of it is sent after the cancel */
    size_t len = 16 * MiB;
    unsigned char *src = malloc(len);
    te_fill(src, len, 77);
    mc_te_request r = {.opcode = MC_TE_OP_WRITE, .source = src, .target_id = seg,
                       .target_offset = c.addr, .length = len};
    mc_te_batch_t b;
    assert_int_equal(mc_te_allocate_batch(a, 1, &b), MC_OK);
    assert_int_equal(mc_te_submit(a, b, &r, 1), MC_OK);
    assert_int_equal(mc_te_wait_batch(a, b, 100, NULL), MC_RPC_TIMEOUT);
    assert_int_equal(mc_te_cancel_batch(a, b), MC_OK);
    memset(src, 0, len); /* the caller's memory is its own again */
    free(src);
    kill(c.pid, SIGCONT);
    /* the payload arrives whole, from the copy: read it back until it is there */
    unsigned char *got = malloc(len);
    uint64_t deadline = mc_deadline_ms(15000);
    bool ok = false;
    while (!ok && mc_now_ms() < deadline) {
        uint64_t l = (uint64_t)(uintptr_t)got, rem = c.addr, n = len;
        ok = mc_te_transfer_sync(a, c.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0) ==
                 MC_OK &&
             te_check(got, len, 77);
        if (!ok)
            mc_sleep_ms(20);
    }
    assert_true(ok);
    free(got);
    end_helper(&c);
    mc_te_destroy(a);
}

static void test_cancel_finished_and_bad_ids(void **state)
{
    (void)state;
    child c;
    spawn_helper(&c, MiB, 5);
    mc_te *a = mk(5000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, c.seg, &seg), MC_OK);
    unsigned char *dst = malloc(MiB);
    mc_te_request r = {.opcode = MC_TE_OP_READ, .source = dst, .target_id = seg,
                       .target_offset = c.addr, .length = MiB};
    mc_te_batch_t b;
    assert_int_equal(mc_te_allocate_batch(a, 1, &b), MC_OK);
    assert_int_equal(mc_te_submit(a, b, &r, 1), MC_OK);
    mc_te_status st;
    assert_int_equal(mc_te_wait_batch(a, b, 10000, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_COMPLETED);
    assert_true(te_check(dst, MiB, 5));
    assert_int_equal(mc_te_cancel_batch(a, b), MC_OK); /* a finished batch: just freed */
    assert_int_equal(mc_te_cancel_batch(a, b), MC_INVALID_PARAMS);
    /* a batch never submitted */
    assert_int_equal(mc_te_allocate_batch(a, 4, &b), MC_OK);
    assert_int_equal(mc_te_cancel_batch(a, b), MC_OK);
    assert_int_equal(mc_te_cancel_batch(a, 12345), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_cancel_batch(NULL, b), MC_INVALID_PARAMS);
    end_helper(&c);
    mc_te_destroy(a);
    free(dst);
}

static void test_destroy_with_cancelled_in_flight(void **state)
{
    (void)state;
    child c;
    spawn_helper(&c, 8 * MiB, 6);
    mc_te *a = mk(20000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, c.seg, &seg), MC_OK);
    freeze(&c);
    unsigned char *dst = malloc(8 * MiB);
    for (int i = 0; i < 8; i++) {
        mc_te_request r[2] = {
            {.opcode = MC_TE_OP_READ, .source = dst + (size_t)i * MiB, .target_id = seg,
             .target_offset = c.addr + (uint64_t)i * MiB, .length = MiB},
            {.opcode = MC_TE_OP_WRITE, .source = dst, .target_id = seg,
             .target_offset = c.addr + 7 * MiB, .length = 4096},
        };
        mc_te_batch_t b;
        assert_int_equal(mc_te_allocate_batch(a, 2, &b), MC_OK);
        assert_int_equal(mc_te_submit(a, b, r, 2), MC_OK);
        assert_int_equal(mc_te_cancel_batch(a, b), MC_OK);
    }
    free(dst);
    mc_te_destroy(a); /* fails the slices still on the frozen peer's connections, frees
                         the cancelled batches (a leak or a use of dst would show under
                         the sanitizers) */
    end_helper(&c);
}

/* Threads that wait on a batch while another thread frees or cancels it: the batch
 * outlives every waiter (mc_te_free_batch refuses while one waits; a cancelled batch is
 * freed by its last waiter). Both orders are legal, so each round accepts either: a
 * wait that started after the id went gets INVALID_PARAMS. A use after free would show
 * under the sanitizers. */
typedef struct waiter {
    mc_te *te;
    mc_te_batch_t b;
    int wait_rc, free_rc;
    bool do_free;
} waiter;

static void *wait_then_free(void *arg)
{
    waiter *w = arg;
    mc_te_status st;
    w->wait_rc = mc_te_wait_batch(w->te, w->b, 20000, &st);
    w->free_rc = w->do_free ? mc_te_free_batch(w->te, w->b) : MC_OK;
    return NULL;
}

static void test_waiters_outlive_free_and_cancel(void **state)
{
    (void)state;
    child c;
    spawn_helper(&c, MiB, 7);
    mc_te *a = mk(20000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, c.seg, &seg), MC_OK);
    unsigned char *dst = malloc(2 * 65536);
    for (int round = 0; round < 40; round++) {
        bool cancel = round % 2;
        mc_te_request r = {.opcode = MC_TE_OP_READ, .source = dst, .target_id = seg,
                           .target_offset = c.addr, .length = 65536};
        mc_te_batch_t b;
        assert_int_equal(mc_te_allocate_batch(a, 1, &b), MC_OK);
        assert_int_equal(mc_te_submit(a, b, &r, 1), MC_OK);
        /* free: two threads wait then free; cancel: one waits, this thread cancels */
        waiter w[2] = {{a, b, 0, 0, !cancel}, {a, b, 0, 0, true}};
        pthread_t th[2];
        int nth = cancel ? 1 : 2;
        for (int i = 0; i < nth; i++)
            assert_int_equal(pthread_create(&th[i], NULL, wait_then_free, &w[i]), 0);
        if (cancel)
            assert_int_equal(mc_te_cancel_batch(a, b), MC_OK);
        for (int i = 0; i < nth; i++)
            pthread_join(th[i], NULL);
        if (cancel) {
            assert_true(w[0].wait_rc == MC_OK || w[0].wait_rc == MC_INVALID_PARAMS);
        } else {
            for (int i = 0; i < 2; i++) /* (a wait that began after the other's free) */
                assert_true(w[i].wait_rc == MC_OK || w[i].wait_rc == MC_INVALID_PARAMS);
            /* exactly one free took it: the other found it gone, or still waited on */
            int ok = (w[0].free_rc == MC_OK) + (w[1].free_rc == MC_OK);
            if (ok == 0) /* both refused while the other waited: nobody freed it yet */
                assert_int_equal(mc_te_free_batch(a, b), MC_OK);
            else
                assert_int_equal(ok, 1);
            assert_int_equal(mc_te_free_batch(a, b), MC_INVALID_PARAMS);
        }
    }
    free(dst);
    end_helper(&c);
    mc_te_destroy(a);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL);
    helper_path = argc > 1 ? argv[1] : getenv("TE_PEER_HELPER");
    if (!helper_path) {
        fprintf(stderr, "usage: %s PATH_TO_te_peer_helper\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_read_frozen_peer),
        cmocka_unit_test(test_cancel_write_sends_copy),
        cmocka_unit_test(test_cancel_finished_and_bad_ids),
        cmocka_unit_test(test_destroy_with_cancelled_in_flight),
        cmocka_unit_test(test_waiters_outlive_free_and_cancel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
