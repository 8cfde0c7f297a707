/* test_te_inline.c: mc_te_submit_inline (tcp_inline.c, issue 17) between real engines
 * in one process over 127.0.0.1: a small READ run to one peer is moved by the calling
 * thread before submit returns (bytes right, counted as inline), a refused read leaves
 * its buffer untouched, runs that do not fit (large slices, WRITEs, several peers) go
 * to the I/O threads as before, callers on several threads share the pool, and
 * MC_TE_INLINE_READS=0 turns it off. A frozen peer (the budget spent: the run handed
 * over) and a restarted one are in test_te_faults.c, the cluster secret in
 * test_te_auth.c. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "te_test_util.h"

#define KiB 1024u
#define N 128
#define BLK (4 * KiB)

static mc_te *mk(void)
{
    mc_te_opts o = {.force_tcp = 1, .transfer_timeout_ms = 20000};
    mc_te *te;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(mc_te_initialize(te, "127.0.0.1", "P2PHANDSHAKE", "tcp", ""), MC_OK);
    return te;
}

/* n READs of blk bytes: request i reads remote + i * blk into dst + i * blk. */
static void reads(mc_te_request *r, size_t n, mc_te_segment_t seg, char *dst, char *remote,
                  uint64_t blk)
{
    for (size_t i = 0; i < n; i++)
        r[i] = (mc_te_request){.opcode = MC_TE_OP_READ, .source = dst + i * blk,
                               .target_id = seg,
                               .target_offset = (uint64_t)(uintptr_t)remote + i * blk,
                               .length = blk};
}

/* r through mc_te_submit_inline; *done_at_return (if not NULL): the batch had ended
 * when submit returned. Returns its final state. */
static int run(mc_te *a, const mc_te_request *r, size_t n, uint32_t budget_ms,
               bool *done_at_return)
{
    int at = -1;
    int state = te_inline_batch(a, r, n, budget_ms, 20000, &at);
    if (done_at_return)
        *done_at_return = at == MC_TE_COMPLETED || at == MC_TE_FAILED;
    return state;
}

static void test_inline_run_moves_before_return(void **state)
{
    (void)state;
    mc_te *a = mk(), *b = mk();
    size_t len = (size_t)N * BLK;
    char *mem = malloc(len), *dst = malloc(len);
    assert_int_equal(mc_te_register_memory(b, mem, len, NULL), MC_OK);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, mc_te_segment_name(b), &seg), MC_OK);
    mc_te_request r[N];
    reads(r, N, seg, dst, mem, BLK);
    for (int round = 0; round < 3; round++) { /* the private connection is reused */
        te_fill(mem, len, 10 + round);
        memset(dst, 0xAB, len);
        bool done = false;
        assert_int_equal(run(a, r, N, 5000, &done), MC_TE_COMPLETED);
        assert_true(done);
        assert_true(te_check(dst, len, 10 + round));
    }
    mc_te_stats st = te_stats(a);
    assert_int_equal(st.inline_bytes_received, 3 * len);
    assert_int_equal(st.inline_runs_handed_over, 0);
    assert_int_equal(st.tcp_bytes_received, 3 * len);
    assert_int_equal(st.tasks_completed, 3 * N);

    /* a refused request in the run (past the registered range): it fails, its buffer
     * keeps what it held, the others are right */
    te_fill(mem, len, 20);
    memset(dst, 0xAB, len);
    r[5].target_offset = (uint64_t)(uintptr_t)mem + len;
    bool done = false;
    assert_int_equal(run(a, r, N, 5000, &done), MC_TE_FAILED);
    assert_true(done);
    for (size_t i = 0; i < N; i++) {
        if (i == 5) {
            for (size_t k = 0; k < BLK; k++)
                assert_int_equal((unsigned char)dst[i * BLK + k], 0xAB);
        } else {
            char *exp = malloc(len);
            te_fill(exp, len, 20);
            assert_memory_equal(dst + i * BLK, exp + i * BLK, BLK);
            free(exp);
        }
    }
    assert_int_equal(te_stats(a).inline_bytes_received, 3 * len + (N - 1) * BLK);
    mc_te_destroy(a);
    assert_int_equal(mc_te_unregister_memory(b, mem), MC_OK);
    mc_te_destroy(b);
    free(mem);
    free(dst);
}

/* What does not fit goes to the I/O threads: 64 KiB slices, a WRITE in the run, runs to
 * two peers. The bytes are right either way and nothing counts as inline. */
static void test_runs_that_do_not_fit(void **state)
{
    (void)state;
    mc_te *a = mk(), *b = mk(), *c = mk();
    size_t len = 16 * 64 * KiB;
    char *mb = malloc(len), *mc = malloc(len), *dst = malloc(2 * len);
    assert_int_equal(mc_te_register_memory(b, mb, len, NULL), MC_OK);
    assert_int_equal(mc_te_register_memory(c, mc, len, NULL), MC_OK);
    mc_te_segment_t sb, sc;
    assert_int_equal(mc_te_open_segment(a, mc_te_segment_name(b), &sb), MC_OK);
    assert_int_equal(mc_te_open_segment(a, mc_te_segment_name(c), &sc), MC_OK);
    te_fill(mb, len, 40);
    te_fill(mc, len, 41);
    mc_te_request r[32];
    reads(r, 16, sb, dst, mb, 64 * KiB); /* 64 KiB each: larger than 16 KiB */
    assert_int_equal(run(a, r, 16, 5000, NULL), MC_TE_COMPLETED);
    assert_true(te_check(dst, len, 40));
    reads(r, 16, sb, dst, mb, 4 * KiB); /* small, but with a WRITE among them */
    r[3].opcode = MC_TE_OP_WRITE;
    r[3].source = dst + 3 * 4 * KiB; /* writes back what it holds */
    assert_int_equal(run(a, r, 16, 5000, NULL), MC_TE_COMPLETED);
    reads(r, 16, sb, dst, mb, 4 * KiB); /* two peers, alternating */
    reads(r + 16, 16, sc, dst + len, mc, 4 * KiB);
    for (size_t i = 0; i < 16; i += 2) {
        mc_te_request t = r[i];
        r[i] = r[16 + i];
        r[16 + i] = t;
    }
    memset(dst, 0, 2 * len);
    assert_int_equal(run(a, r, 32, 5000, NULL), MC_TE_COMPLETED);
    char *eb = malloc(len), *ec = malloc(len);
    te_fill(eb, len, 40);
    te_fill(ec, len, 41);
    assert_memory_equal(dst, eb, 16 * 4 * KiB);
    assert_memory_equal(dst + len, ec, 16 * 4 * KiB);
    assert_int_equal(te_stats(a).inline_bytes_received, 0);
    free(eb);
    free(ec);
    mc_te_destroy(a);
    assert_int_equal(mc_te_unregister_memory(b, mb), MC_OK);
    assert_int_equal(mc_te_unregister_memory(c, mc), MC_OK);
    mc_te_destroy(b);
    mc_te_destroy(c);
    free(mb);
    free(mc);
    free(dst);
}

typedef struct caller {
    mc_te *a;
    mc_te_segment_t seg;
    char *mem;
    int id;
    int bad; /* rounds with wrong bytes or a failed batch */
} caller;

/* Reads the whole segment (seed 50, never changed) in runs of 64 x 4 KiB, 20 times. */
static void *caller_main(void *arg)
{
    caller *c = arg;
    size_t len = 64 * 4 * KiB;
    char *dst = malloc(len), *exp = malloc(len);
    te_fill(exp, len, 50);
    mc_te_request r[64];
    reads(r, 64, c->seg, dst, c->mem, 4 * KiB);
    for (int i = 0; i < 20; i++) {
        memset(dst, 0, len);
        if (te_inline_batch(c->a, r, 64, 5000, 20000, NULL) != MC_TE_COMPLETED ||
            memcmp(dst, exp, len) != 0)
            c->bad++;
    }
    free(dst);
    free(exp);
    return NULL;
}

/* Eight threads, a pool of four private connections: every read right; what finds the
 * pool in use goes to the I/O threads. */
static void test_concurrent_inline_callers(void **state)
{
    (void)state;
    mc_te *a = mk(), *b = mk();
    size_t len = 64 * 4 * KiB;
    char *mem = malloc(len);
    te_fill(mem, len, 50);
    assert_int_equal(mc_te_register_memory(b, mem, len, NULL), MC_OK);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, mc_te_segment_name(b), &seg), MC_OK);
    caller cs[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        cs[i] = (caller){.a = a, .seg = seg, .mem = mem, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &cs[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(cs[i].bad, 0);
    }
    mc_te_stats st = te_stats(a);
    assert_true(st.inline_bytes_received > 0);
    assert_int_equal(st.tcp_bytes_received, 8 * 20 * len);
    mc_te_destroy(a);
    assert_int_equal(mc_te_unregister_memory(b, mem), MC_OK);
    mc_te_destroy(b);
    free(mem);
}

/* MC_TE_INLINE_READS=0: mc_te_submit_inline is mc_te_submit; a bad value is refused. */
static void test_inline_env(void **state)
{
    (void)state;
    setenv("MC_TE_INLINE_READS", "0", 1);
    mc_te *a = mk(), *b = mk();
    setenv("MC_TE_INLINE_READS", "maybe", 1);
    mc_te *bad = NULL;
    assert_int_equal(mc_te_create(NULL, &bad), MC_INVALID_PARAMS);
    unsetenv("MC_TE_INLINE_READS");
    size_t len = (size_t)N * BLK;
    char *mem = malloc(len), *dst = malloc(len);
    te_fill(mem, len, 60);
    assert_int_equal(mc_te_register_memory(b, mem, len, NULL), MC_OK);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, mc_te_segment_name(b), &seg), MC_OK);
    mc_te_request r[N];
    reads(r, N, seg, dst, mem, BLK);
    assert_int_equal(run(a, r, N, 5000, NULL), MC_TE_COMPLETED);
    assert_true(te_check(dst, len, 60));
    assert_int_equal(te_stats(a).inline_bytes_received, 0);
    assert_int_equal(te_stats(a).tcp_bytes_received, len);
    mc_te_destroy(a);
    assert_int_equal(mc_te_unregister_memory(b, mem), MC_OK);
    mc_te_destroy(b);
    free(mem);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline_run_moves_before_return),
        cmocka_unit_test(test_runs_that_do_not_fit),
        cmocka_unit_test(test_concurrent_inline_callers),
        cmocka_unit_test(test_inline_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
