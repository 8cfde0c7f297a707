/* test_te_engine.c: real engines in one process over 127.0.0.1: round trips with content
 * checks on the TCP and same-host paths, refused ranges, the batch API, notifications,
 * probe, registration rules, managed buffers, the HTTP metadata backend, concurrency. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mooncake/mc_time.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "te_test_util.h"

#define MiB (1ull << 20)

/* The engines' clock: the monotonic clock plus what a test moved it forward by. */
static _Atomic uint64_t clock_skew_ms;

static uint64_t test_clock(void *ctx)
{
    (void)ctx;
    return mc_now_ms() + clock_skew_ms;
}

/* An engine with options o, initialised on host with metadata meta. */
static mc_te *mk_opts(const mc_te_opts *o, const char *meta, const char *host)
{
    mc_te *te;
    assert_int_equal(mc_te_create(o, &te), MC_OK);
    assert_int_equal(mc_te_initialize(te, host, meta, "tcp", ""), MC_OK);
    return te;
}

static mc_te *mk(const char *meta, const char *host, int force_tcp)
{
    mc_te_opts o = {.force_tcp = force_tcp ? 1 : 0, .transfer_timeout_ms = 20000,
                    .clock = test_clock};
    return mk_opts(&o, meta, host);
}

/* A forced-TCP engine on loopback with conns_per_peer connections per peer over
 * io_threads I/O loops. */
static mc_te *mk_lanes(unsigned conns_per_peer, unsigned io_threads)
{
    mc_te_opts o = {.force_tcp = 1, .transfer_timeout_ms = 20000, .clock = test_clock,
                    .conns_per_peer = conns_per_peer, .io_threads = io_threads};
    return mk_opts(&o, "P2PHANDSHAKE", "127.0.0.1");
}

/* Fills a batch of n requests of blk bytes each: request i moves local + i * blk to/from
 * remote + i * blk. */
static void batch_fill(uint64_t *local, uint64_t *remote, uint64_t *lens, size_t n,
                       const void *l0, uint64_t r0, uint64_t blk)
{
    for (size_t i = 0; i < n; i++) {
        local[i] = (uint64_t)(uintptr_t)l0 + i * blk;
        remote[i] = r0 + i * blk;
        lens[i] = blk;
    }
}

static mc_te *mk_p2p(int force_tcp)
{
    return mk("P2PHANDSHAKE", "127.0.0.1", force_tcp);
}

/* Destroys initiator a, then target b after unregistering its memory mem (malloc'd),
 * and frees mem. */
static void close_pair(mc_te *a, mc_te *b, char *mem)
{
    mc_te_destroy(a);
    assert_int_equal(mc_te_unregister_memory(b, mem), MC_OK);
    mc_te_destroy(b);
    free(mem);
}

static int xfer(mc_te *te, const char *seg, int op, void *local, uint64_t remote, uint64_t len)
{
    uint64_t l = (uint64_t)(uintptr_t)local;
    return mc_te_transfer_sync(te, seg, op, &l, &remote, &len, 1, NULL, NULL, 0);
}

/* Round trips of 0 B, 1 B, 4 KiB and 64 MiB into `target` memory at base. */
static void roundtrips(mc_te *init, const char *seg, char *target, uint64_t seed)
{
    const uint64_t sizes[] = {0, 1, 4096, 64 * MiB};
    char *src = malloc(64 * MiB), *dst = malloc(64 * MiB);
    for (size_t i = 0; i < 4; i++) {
        uint64_t n = sizes[i], off = i == 3 ? 0 : 4096 * (i + 1) + i; /* unaligned too */
        te_fill(src, n, seed + i);
        assert_int_equal(xfer(init, seg, MC_TE_OP_WRITE, src, (uint64_t)(uintptr_t)target + off,
                              n),
                         MC_OK);
        assert_true(te_check(target + off, n, seed + i));
        te_fill(target + off, n, seed + 100 + i);
        memset(dst, 0xAB, n);
        assert_int_equal(xfer(init, seg, MC_TE_OP_READ, dst, (uint64_t)(uintptr_t)target + off,
                              n),
                         MC_OK);
        assert_true(te_check(dst, n, seed + 100 + i));
    }
    free(src);
    free(dst);
}

static void test_roundtrip_tcp(void **state)
{
    (void)state;
    mc_te *a = mk_p2p(1), *b = mk_p2p(1);
    size_t len = 64 * MiB + 8192;
    char *mem = malloc(len);
    assert_int_equal(mc_te_register_memory(b, mem, len, "cpu:0"), MC_OK);
    roundtrips(a, mc_te_segment_name(b), mem, 1);
    mc_te_stats st;
    mc_te_get_stats(a, &st);
    assert_true(st.tcp_bytes_sent >= 64 * MiB && st.tcp_bytes_received >= 64 * MiB);
    assert_int_equal(st.shm_bytes, 0);
    close_pair(a, b, mem);
}

/* A single request of >= 512 KiB is striped over the peer's connections (submit.c,
 * issue 17): after a 4 KiB WRITE (one connection), one 1 MiB READ (one slice of the
 * default slice size) opens the second connection of conns_per_peer = 2, and the bytes
 * are right, as they are for a striped WRITE with a short last piece; with one
 * connection per peer the same requests use one. */
static void test_large_request_striped(void **state)
{
    (void)state;
    for (unsigned conns = 1; conns <= 2; conns++) {
        mc_te *b = mk_p2p(1), *a = mk_lanes(conns, 1);
        size_t len = 2 * MiB;
        char *mem = malloc(len), *src = malloc(MiB + 4096), *dst = malloc(MiB + 4096);
        assert_int_equal(mc_te_register_memory(b, mem, len, "cpu:0"), MC_OK);
        const char *seg = mc_te_segment_name(b);
        uint64_t base = (uint64_t)(uintptr_t)mem;
        te_fill(src, 4096, 7); /* small first: one connection */
        assert_int_equal(xfer(a, seg, MC_TE_OP_WRITE, src, base, 4096), MC_OK);
        mc_te_stats st;
        mc_te_get_stats(a, &st);
        assert_int_equal(st.connections_opened, 1);
        te_fill(mem + 4096, MiB, 9); /* exactly one slice of the default slice size */
        memset(dst, 0xAB, MiB);
        assert_int_equal(xfer(a, seg, MC_TE_OP_READ, dst, base + 4096, MiB), MC_OK);
        assert_true(te_check(dst, MiB, 9));
        mc_te_get_stats(a, &st);
        assert_int_equal(st.connections_opened, conns);
        te_fill(src, MiB + 4096, 8); /* not a multiple of the piece: a short last one */
        assert_int_equal(xfer(a, seg, MC_TE_OP_WRITE, src, base + 12345, MiB + 4096), MC_OK);
        assert_true(te_check(mem + 12345, MiB + 4096, 8));
        mc_te_get_stats(a, &st);
        assert_int_equal(st.connections_opened, conns);
        close_pair(a, b, mem);
        free(src);
        free(dst);
    }
}

/* A small batch on another thread of its own (test_two_loops_per_peer). */
typedef struct small_batch {
    mc_te *te;
    const char *seg;
    uint64_t local[16], remote[16], lens[16];
    int rc;
} small_batch;

static void *small_batch_thread(void *arg)
{
    small_batch *sb = arg;
    sb->rc = mc_te_transfer_sync(sb->te, sb->seg, MC_TE_OP_WRITE, sb->local, sb->remote,
                                 sb->lens, 16, NULL, NULL, 0);
    return NULL;
}

/* Two I/O loops and two connections per peer (issue 17: MC_TE_IO_THREADS' default is one
 * loop per connection where the CPUs allow), one lane per loop with a connection of its
 * own (tcp_client.c mc__te_peer_enqueue): a batch of small slices that one connection
 * takes whole (128 x 4 KiB) stays on one lane, the same lane for the same thread; a
 * larger batch (64 x 32 KiB, 2 MiB) is cut into one run per lane and opens the other
 * lane's connection; a striped 1 MiB READ uses both; the target serves them on its two
 * loops; every byte lands right. Two threads' small batches go to different lanes. */
static void test_two_loops_per_peer(void **state)
{
    (void)state;
    mc_te *a = mk_lanes(2, 2), *b = mk_lanes(2, 2);
    enum { N = 128, BLK = 4096, NB = 64, BIG = 32768 };
    size_t len = 4 * MiB;
    char *mem = malloc(len), *src = malloc(2 * MiB), *dst = malloc(2 * MiB);
    assert_int_equal(mc_te_register_memory(b, mem, len, "cpu:0"), MC_OK);
    const char *seg = mc_te_segment_name(b);
    uint64_t base = (uint64_t)(uintptr_t)mem;
    uint64_t local[N], remote[N], lens[N];
    batch_fill(local, remote, lens, N, src, base, BLK);
    te_fill(src, (size_t)N * BLK, 21);
    assert_int_equal(mc_te_transfer_sync(a, seg, MC_TE_OP_WRITE, local, remote, lens, N, NULL,
                                         NULL, 0),
                     MC_OK);
    assert_true(te_check(mem, (size_t)N * BLK, 21));
    mc_te_stats st;
    mc_te_get_stats(a, &st);
    assert_int_equal(st.connections_opened, 1); /* a small batch stays whole on one lane */
    te_fill(mem + MiB, (size_t)N * BLK, 22);
    batch_fill(local, remote, lens, N, dst, base + MiB, BLK);
    memset(dst, 0xAB, MiB);
    assert_int_equal(mc_te_transfer_sync(a, seg, MC_TE_OP_READ, local, remote, lens, N, NULL,
                                         NULL, 0),
                     MC_OK);
    assert_true(te_check(dst, (size_t)N * BLK, 22));
    mc_te_get_stats(a, &st);
    assert_int_equal(st.connections_opened, 1); /* this thread's lane again */
    batch_fill(local, remote, lens, NB, src, base + 2 * MiB, BIG);
    te_fill(src, (size_t)NB * BIG, 23);
    assert_int_equal(mc_te_transfer_sync(a, seg, MC_TE_OP_WRITE, local, remote, lens, NB,
                                         NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(mem + 2 * MiB, (size_t)NB * BIG, 23));
    mc_te_get_stats(a, &st);
    assert_int_equal(st.connections_opened, 2); /* cut over both lanes */
    te_fill(mem, MiB, 24); /* striped: one piece per connection, one per loop */
    memset(dst, 0xAB, MiB);
    assert_int_equal(xfer(a, seg, MC_TE_OP_READ, dst, base, MiB), MC_OK);
    assert_true(te_check(dst, MiB, 24));
    mc_te_get_stats(a, &st);
    assert_int_equal(st.connections_opened, 2);
    close_pair(a, b, mem);

    /* two new threads, numbered one after the other (tcp_client.c thread_lane_seq:
     * nothing else submits in between; no NOTIFY is sent here, whose loop thread would
     * take a number too): one lane each */
    a = mk_lanes(2, 2);
    b = mk_lanes(2, 2);
    mem = malloc(len);
    assert_int_equal(mc_te_register_memory(b, mem, len, "cpu:0"), MC_OK);
    seg = mc_te_segment_name(b);
    base = (uint64_t)(uintptr_t)mem;
    small_batch sb[2];
    for (int t = 0; t < 2; t++) {
        sb[t] = (small_batch){.te = a, .seg = seg, .rc = -1};
        batch_fill(sb[t].local, sb[t].remote, sb[t].lens, 16, src + t * 16 * BLK,
                   base + t * 16 * BLK, BLK);
        te_fill(src + t * 16 * BLK, 16 * BLK, 25 + t);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, small_batch_thread, &sb[t]), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_int_equal(sb[t].rc, MC_OK);
        assert_true(te_check(mem + t * 16 * BLK, 16 * BLK, 25 + t));
    }
    mc_te_get_stats(a, &st);
    assert_int_equal(st.connections_opened, 2);
    close_pair(a, b, mem);
    free(src);
    free(dst);
}

/* A READ batch moving more than the target's reply budget (max_pending_bytes) on one
 * connection: the target stops parsing while the budget is queued, and must parse the
 * requests already in its receive buffer once the replies drained, whichever event
 * that happens in; the initiator has sent the whole batch, so no EPOLLIN would come
 * (issue 17, session 16: such a batch hung until the transfer timeout). 16 x 256 KiB
 * against a 1 MiB budget, twice, every byte checked. */
static void test_read_batch_beyond_reply_budget(void **state)
{
    (void)state;
    mc_te_opts o = {.force_tcp = 1, .transfer_timeout_ms = 5000, .clock = test_clock,
                    .conns_per_peer = 1, .io_threads = 1, .max_pending_bytes = 1u << 20};
    mc_te *a = mk_opts(&o, "P2PHANDSHAKE", "127.0.0.1"),
          *b = mk_opts(&o, "P2PHANDSHAKE", "127.0.0.1");
    enum { N = 16, BLK = 256 * 1024 };
    size_t len = (size_t)N * BLK;
    char *mem = malloc(len), *dst = malloc(len);
    assert_int_equal(mc_te_register_memory(b, mem, len, "cpu:0"), MC_OK);
    const char *seg = mc_te_segment_name(b);
    uint64_t local[N], remote[N], lens[N];
    batch_fill(local, remote, lens, N, dst, (uint64_t)(uintptr_t)mem, BLK);
    for (int round = 0; round < 2; round++) {
        te_fill(mem, len, 31 + round);
        memset(dst, 0xAB, len);
        assert_int_equal(mc_te_transfer_sync(a, seg, MC_TE_OP_READ, local, remote, lens, N,
                                             NULL, NULL, 0),
                         MC_OK);
        assert_true(te_check(dst, len, 31 + round));
    }
    close_pair(a, b, mem);
    free(dst);
}

/* MC_TE_PREFAULT (issue 17): a shared segment is resident as soon as it exists, and
 * without the variable it is not (its pages come on first touch). mincore reports which
 * pages are in memory. */
static size_t resident_pages(void *p, size_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (len + pg - 1) / pg, in = 0;
    unsigned char *v = malloc(n);
    assert_non_null(v);
    assert_int_equal(mincore(p, len, v), 0);
    for (size_t i = 0; i < n; i++)
        in += v[i] & 1;
    free(v);
    return in;
}

static void test_prefault_env(void **state)
{
    (void)state;
    const size_t len = 8u << 20, pages = len / (size_t)sysconf(_SC_PAGESIZE);
    for (int on = 0; on <= 1; on++) {
        if (on)
            setenv("MC_TE_PREFAULT", "1", 1);
        mc_te *te = mk_p2p(0);
        void *p;
        assert_int_equal(mc_te_alloc_shared(te, len, &p), MC_OK);
        size_t in = resident_pages(p, len);
        if (on)
            assert_int_equal(in, pages);
        else
            assert_true(in < pages / 2);
        /* the bytes are still the zeros a new segment promises */
        for (size_t off = 0; off < len; off += 4096)
            assert_int_equal(((unsigned char *)p)[off], 0);
        assert_int_equal(mc_te_free_shared(te, p), MC_OK);
        mc_te_destroy(te);
        unsetenv("MC_TE_PREFAULT");
    }
    setenv("MC_TE_PREFAULT", "maybe", 1); /* a bad value fails create, naming it */
    mc_te *te = NULL;
    assert_int_equal(mc_te_create(NULL, &te), MC_INVALID_PARAMS);
    unsetenv("MC_TE_PREFAULT");
}

/* How a lane with two pooled connections on one I/O loop places a batch (internal.h
 * TE_CONN_FILL, issue 17): 128 x 4 KiB (512 KiB) stays on one connection; 32 x 64 KiB
 * (2 MiB, more than one connection is filled with) opens the second and uses both; the
 * bytes are right either way. */
static void test_batch_spreads_over_connections(void **state)
{
    (void)state;
    mc_te *b = mk_p2p(1), *a = mk_lanes(2, 1);
    enum { N = 128, BIG_N = 32, SMALL = 4096, BLK = 65536 };
    size_t len = (size_t)BIG_N * BLK;
    char *mem = malloc(len), *src = malloc(len);
    assert_int_equal(mc_te_register_memory(b, mem, len, "cpu:0"), MC_OK);
    uint64_t local[N], remote[N], lens[N];
    batch_fill(local, remote, lens, N, src, (uint64_t)(uintptr_t)mem, SMALL);
    te_fill(src, (size_t)N * SMALL, 30);
    assert_int_equal(mc_te_transfer_sync(a, mc_te_segment_name(b), MC_TE_OP_WRITE, local,
                                         remote, lens, N, NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(mem, (size_t)N * SMALL, 30));
    mc_te_stats st;
    mc_te_get_stats(a, &st);
    assert_int_equal(st.connections_opened, 1);
    batch_fill(local, remote, lens, BIG_N, src, (uint64_t)(uintptr_t)mem, BLK);
    te_fill(src, len, 31);
    assert_int_equal(mc_te_transfer_sync(a, mc_te_segment_name(b), MC_TE_OP_WRITE, local,
                                         remote, lens, BIG_N, NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(mem, len, 31));
    mc_te_get_stats(a, &st);
    assert_int_equal(st.connections_opened, 2);
    close_pair(a, b, mem);
    free(src);
}

static void test_roundtrip_shm_and_forced_tcp(void **state)
{
    (void)state;
    mc_te *a = mk_p2p(0), *t = mk_p2p(1), *b = mk_p2p(0);
    char *mem;
    assert_int_equal(mc_te_alloc_shared(b, 64 * MiB + 8192, (void **)&mem), MC_OK);
    roundtrips(a, mc_te_segment_name(b), mem, 7);
    mc_te_stats st;
    mc_te_get_stats(a, &st);
    assert_true(st.shm_bytes >= 128 * MiB);
    assert_int_equal(st.tcp_bytes_sent, 0);

    /* the same bytes moved by the same-host path and by forced TCP are identical */
    char *x = malloc(MiB), *y = malloc(MiB);
    te_fill(mem + 12345, MiB, 99);
    assert_int_equal(xfer(a, mc_te_segment_name(b), MC_TE_OP_READ, x,
                          (uint64_t)(uintptr_t)mem + 12345, MiB),
                     MC_OK);
    assert_int_equal(xfer(t, mc_te_segment_name(b), MC_TE_OP_READ, y,
                          (uint64_t)(uintptr_t)mem + 12345, MiB),
                     MC_OK);
    assert_memory_equal(x, y, MiB);
    assert_true(te_check(x, MiB, 99));
    mc_te_get_stats(t, &st);
    assert_true(st.tcp_bytes_received >= MiB);
    assert_int_equal(st.shm_bytes, 0);
    free(x);
    free(y);

    /* user memory on the same host keeps using TCP */
    char *um = malloc(4096);
    assert_int_equal(mc_te_register_memory(b, um, 4096, NULL), MC_OK);
    char buf[4096];
    te_fill(buf, sizeof buf, 5);
    mc_te_stats before, after;
    mc_te_get_stats(a, &before);
    assert_int_equal(
        xfer(a, mc_te_segment_name(b), MC_TE_OP_WRITE, buf, (uint64_t)(uintptr_t)um, 4096),
        MC_OK);
    mc_te_get_stats(a, &after);
    assert_true(te_check(um, 4096, 5));
    assert_int_equal(after.shm_bytes, before.shm_bytes);
    assert_int_equal(after.tcp_bytes_sent, before.tcp_bytes_sent + 4096);

    /* memory shared after the initiator cached the descriptor: found on a later refresh */
    char *late;
    assert_int_equal(mc_te_alloc_shared(b, 65536, (void **)&late), MC_OK);
    /* descriptor refreshes for unknown addresses are rate-limited (one a second on the
     * engine's clock): move the clock past that instead of sleeping */
    clock_skew_ms += 1100;
    mc_te_get_stats(a, &before);
    assert_int_equal(
        xfer(a, mc_te_segment_name(b), MC_TE_OP_WRITE, buf, (uint64_t)(uintptr_t)late, 4096),
        MC_OK);
    mc_te_get_stats(a, &after);
    assert_int_equal(after.shm_bytes, before.shm_bytes + 4096);
    assert_true(te_check(late, 4096, 5));

    mc_te_destroy(a);
    mc_te_destroy(t);
    assert_int_equal(mc_te_free_shared(b, late), MC_OK);
    assert_int_equal(mc_te_free_shared(b, mem), MC_OK);
    assert_int_equal(mc_te_free_shared(b, mem), MC_INVALID_PARAMS);
    mc_te_destroy(b);
    free(um);
}

static void check_refused(mc_te *a, const char *seg, char *mem, size_t len)
{
    char buf[8192];
    uint64_t base = (uint64_t)(uintptr_t)mem;
    static char unreg[4096];
    /* unregistered, straddling the end, starting before, wrapping around */
    uint64_t addrs[] = {(uint64_t)(uintptr_t)unreg, base + len - 100, base - 1,
                        UINT64_MAX - 10};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(xfer(a, seg, MC_TE_OP_WRITE, buf, addrs[i], 200), MC_INVALID_PARAMS);
        assert_int_equal(xfer(a, seg, MC_TE_OP_READ, buf, addrs[i], 200), MC_INVALID_PARAMS);
    }
    /* a length beyond the whole registration (the local buffer is that large) */
    char *big = malloc(len + 1);
    assert_int_equal(xfer(a, seg, MC_TE_OP_READ, big, base, len + 1), MC_INVALID_PARAMS);
    free(big);
    /* the engine still serves: a good transfer right after */
    te_fill(buf, sizeof buf, 3);
    assert_int_equal(xfer(a, seg, MC_TE_OP_WRITE, buf, base + 10, sizeof buf), MC_OK);
    assert_true(te_check(mem + 10, sizeof buf, 3));
}

static void test_refused_ranges(void **state)
{
    (void)state;
    mc_te *a = mk_p2p(0), *b = mk_p2p(1), *c = mk_p2p(0);
    size_t len = MiB;
    char *mem = malloc(len);
    assert_int_equal(mc_te_register_memory(b, mem, len, NULL), MC_OK);
    check_refused(a, mc_te_segment_name(b), mem, len);
    mc_te_stats st;
    mc_te_get_stats(b, &st);
    assert_true(st.refused_requests >= 9);
    /* same for a shared segment (same-host path first, the owner checks too) */
    char *sm;
    assert_int_equal(mc_te_alloc_shared(c, len, (void **)&sm), MC_OK);
    check_refused(a, mc_te_segment_name(c), sm, len);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_te_destroy(c);
    free(mem);
}

static void test_batch_api(void **state)
{
    (void)state;
    mc_te *a = mk_p2p(1), *b = mk_p2p(1);
    char *mem = calloc(1, 8 * MiB), *src = malloc(8 * MiB);
    te_fill(src, 8 * MiB, 11);
    assert_int_equal(mc_te_register_memory(b, mem, 8 * MiB, NULL), MC_OK);
    mc_te_segment_t seg, seg2;
    assert_int_equal(mc_te_open_segment(a, mc_te_segment_name(b), &seg), MC_OK);
    assert_int_equal(mc_te_open_segment(a, mc_te_segment_name(b), &seg2), MC_OK);
    assert_int_equal(seg, seg2);

    mc_te_batch_t bid;
    assert_int_equal(mc_te_allocate_batch(a, 0, &bid), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_allocate_batch(a, 8, &bid), MC_OK);
    mc_te_status st;
    assert_int_equal(mc_te_get_batch_status(a, bid, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_COMPLETED); /* empty */

    mc_te_request reqs[8];
    const uint64_t lens[8] = {1, 100, 4096, 65536, MiB, 3 * MiB + 17, 0, 2 * MiB};
    uint64_t off = 0;
    for (int i = 0; i < 8; i++) {
        reqs[i] = (mc_te_request){.opcode = MC_TE_OP_WRITE, .source = src + off,
                                  .target_id = seg,
                                  .target_offset = (uint64_t)(uintptr_t)mem + off,
                                  .length = lens[i]};
        off += lens[i];
    }
    /* validation refuses the whole submit */
    mc_te_request bad = reqs[0];
    bad.opcode = 7;
    assert_int_equal(mc_te_submit(a, bid, &bad, 1), MC_INVALID_PARAMS);
    bad = reqs[0];
    bad.target_id = 12345;
    assert_int_equal(mc_te_submit(a, bid, &bad, 1), MC_INVALID_PARAMS);
    bad = reqs[0];
    bad.source = NULL;
    assert_int_equal(mc_te_submit(a, bid, &bad, 1), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_submit(a, bid + 1, reqs, 1), MC_INVALID_PARAMS);

    assert_int_equal(mc_te_submit(a, bid, reqs, 5), MC_OK);
    assert_int_equal(mc_te_submit(a, bid, reqs + 5, 3), MC_OK);
    assert_int_equal(mc_te_submit(a, bid, reqs, 1), MC_INVALID_PARAMS); /* full */
    assert_int_equal(mc_te_wait_batch(a, bid, 20000, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_COMPLETED);
    assert_int_equal(st.transferred_bytes, off);
    for (size_t i = 0; i < 8; i++) {
        mc_te_status ts;
        assert_int_equal(mc_te_get_transfer_status(a, bid, i, &ts), MC_OK);
        assert_int_equal(ts.state, MC_TE_COMPLETED);
        assert_int_equal(ts.transferred_bytes, lens[i]);
    }
    mc_te_status ts;
    assert_int_equal(mc_te_get_transfer_status(a, bid, 8, &ts), MC_INVALID_PARAMS);
    assert_int_equal(ts.state, MC_TE_INVALID);
    assert_memory_equal(mem, src, off);
    assert_int_equal(mc_te_free_batch(a, bid), MC_OK);
    assert_int_equal(mc_te_free_batch(a, bid), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_get_batch_status(a, bid, &st), MC_INVALID_PARAMS);

    /* a batch with one refused task: the others complete, the batch reports the failure */
    assert_int_equal(mc_te_allocate_batch(a, 3, &bid), MC_OK);
    mc_te_request mix[3] = {reqs[2], reqs[3], reqs[4]};
    mix[1].target_offset = 64; /* not registered */
    assert_int_equal(mc_te_submit(a, bid, mix, 3), MC_OK);
    assert_int_equal(mc_te_wait_batch(a, bid, 20000, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_FAILED);
    assert_int_equal(st.error, MC_INVALID_PARAMS);
    assert_int_equal(mc_te_get_transfer_status(a, bid, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_COMPLETED);
    assert_int_equal(mc_te_get_transfer_status(a, bid, 1, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_FAILED);
    assert_int_equal(ts.error, MC_INVALID_PARAMS);
    assert_int_equal(mc_te_free_batch(a, bid), MC_OK);

    /* async helper + read back */
    char *back = malloc(8 * MiB);
    uint64_t l = (uint64_t)(uintptr_t)back, r = (uint64_t)(uintptr_t)mem, n = off;
    assert_int_equal(mc_te_transfer_async(a, mc_te_segment_name(b), MC_TE_OP_READ, &l, &r, &n,
                                          1, &bid),
                     MC_OK);
    assert_int_equal(mc_te_wait_batch(a, bid, 20000, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_COMPLETED);
    assert_int_equal(mc_te_free_batch(a, bid), MC_OK);
    assert_memory_equal(back, src, off);
    assert_int_equal(mc_te_transfer_async(a, "127.0.0.1:1", MC_TE_OP_READ, &l, &r, &n, 1, &bid),
                     MC_SEGMENT_NOT_FOUND);
    free(back);

    mc_te_destroy(a);
    mc_te_destroy(b);
    free(mem);
    free(src);
}

static void test_notify_probe(void **state)
{
    (void)state;
    mc_te *a = mk_p2p(0), *b = mk_p2p(0);
    char *mem;
    assert_int_equal(mc_te_allocate_managed_buffer(b, 65536, (void **)&mem), MC_OK);
    const char *seg = mc_te_segment_name(b);
    char data[1000];
    te_fill(data, sizeof data, 4);
    uint64_t l = (uint64_t)(uintptr_t)data, r = (uint64_t)(uintptr_t)mem, n = sizeof data;
    assert_int_equal(mc_te_transfer_sync(a, seg, MC_TE_OP_WRITE, &l, &r, &n, 1, "kv", "done", 4),
                     MC_OK);
    assert_int_equal(mc_te_send_notify(a, seg, "bare", "x\0y", 3), MC_OK);
    assert_int_equal(mc_te_send_notify(a, seg, "", NULL, 0), MC_OK);
    mc_te_notify *v;
    size_t cnt;
    assert_int_equal(mc_te_get_notifies(b, &v, &cnt), MC_OK);
    assert_int_equal(cnt, 3);
    assert_string_equal(v[0].name, "kv");
    assert_int_equal(v[0].msg_len, 4);
    assert_string_equal(v[0].msg, "done");
    assert_string_equal(v[1].name, "bare");
    assert_int_equal(v[1].msg_len, 3);
    assert_memory_equal(v[1].msg, "x\0y", 3);
    assert_string_equal(v[2].name, "");
    mc_te_notifies_free(v, cnt);
    assert_int_equal(mc_te_get_notifies(b, &v, &cnt), MC_OK);
    assert_int_equal(cnt, 0);
    assert_null(v);
    assert_true(te_check(mem, sizeof data, 4));

    /* a failed transfer sends no notification */
    uint64_t badr = 8;
    assert_int_equal(
        mc_te_transfer_sync(a, seg, MC_TE_OP_WRITE, &l, &badr, &n, 1, "never", "x", 1),
        MC_INVALID_PARAMS);
    assert_int_equal(mc_te_get_notifies(b, &v, &cnt), MC_OK);
    assert_int_equal(cnt, 0);
    /* oversized notification */
    char *big = malloc(MC_TE_MAX_NOTIFY_MSG + 1);
    assert_int_equal(mc_te_send_notify(a, seg, "n", big, MC_TE_MAX_NOTIFY_MSG + 1),
                     MC_INVALID_PARAMS);
    free(big);

    assert_int_equal(mc_te_send_probe(a, seg), MC_OK);
    char dead[64];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", te_free_port());
    assert_int_equal(mc_te_send_probe(a, dead), MC_RPC_FAIL);
    assert_int_equal(mc_te_send_probe(a, "no-port"), MC_INVALID_PARAMS);
    mc_te_segment_t s;
    assert_int_equal(mc_te_open_segment(a, dead, &s), MC_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_te_open_segment(a, "no-port", &s), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_open_segment(a, "", &s), MC_INVALID_PARAMS);
    uint64_t first;
    assert_int_equal(mc_te_get_first_buffer_address(a, seg, &first), MC_OK);
    assert_true(first != 0 && first <= (uint64_t)(uintptr_t)mem);
    assert_int_equal(mc_te_get_first_buffer_address(b, mc_te_segment_name(a), &first), MC_OK);
    assert_int_equal(first, 0);
    assert_int_equal(mc_te_free_managed_buffer(b, mem, 65536), MC_OK);
    mc_te_destroy(a);
    mc_te_destroy(b);
}

static void test_registration_rules(void **state)
{
    (void)state;
    mc_te *b = mk_p2p(1);
    mc_te *u;
    assert_int_equal(mc_te_create(NULL, &u), MC_OK);
    char *mem = malloc(MiB);
    assert_int_equal(mc_te_register_memory(u, mem, MiB, NULL), MC_INVALID_PARAMS); /* not init */
    mc_te_destroy(u);
    assert_int_equal(mc_te_register_memory(b, NULL, 10, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_register_memory(b, mem, 0, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_register_memory(b, (void *)(uintptr_t)(UINT64_MAX - 100), 200, NULL),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_te_register_memory(b, mem, MiB, NULL), MC_OK);
    assert_int_equal(mc_te_register_memory(b, mem, MiB, NULL), MC_OK); /* same again */
    assert_int_equal(mc_te_register_memory(b, mem, 4096, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_register_memory(b, mem + 4096, 4096, NULL), MC_OK); /* overlap */
    assert_int_equal(mc_te_unregister_memory(b, mem + 1), MC_INVALID_PARAMS);
    /* all-or-nothing batch */
    char *m2 = malloc(4096);
    void *addrs[2] = {m2, NULL};
    size_t lens[2] = {4096, 4096};
    assert_int_equal(mc_te_batch_register_memory(b, addrs, lens, 2, "*"), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_unregister_memory(b, m2), MC_INVALID_PARAMS);
    addrs[1] = mem;
    assert_int_equal(mc_te_batch_unregister_memory(b, addrs, 2), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_unregister_memory(b, mem), MC_OK); /* still registered */
    assert_int_equal(mc_te_unregister_memory(b, mem + 4096), MC_OK);
    assert_int_equal(mc_te_unregister_memory(b, mem), MC_INVALID_PARAMS);

    /* managed buffers: bad frees are refused */
    void *p1, *p2, *p3;
    assert_int_equal(mc_te_allocate_managed_buffer(b, 0, &p1), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_allocate_managed_buffer(b, 5000, &p1), MC_OK);
    assert_int_equal(mc_te_allocate_managed_buffer(b, 5000, &p2), MC_OK);
    assert_int_equal(mc_te_allocate_managed_buffer(b, 100 * MiB, &p3), MC_OK);
    assert_ptr_not_equal(p1, p2);
    memset(p1, 1, 5000);
    memset(p3, 2, 100 * MiB);
    assert_int_equal(mc_te_free_managed_buffer(b, (char *)p1 + 8, 5000), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_free_managed_buffer(b, p1, 5000), MC_OK);
    assert_int_equal(mc_te_free_managed_buffer(b, p1, 5000), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_unregister_memory(b, p3), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_free_managed_buffer(b, p3, 100 * MiB), MC_OK);
    void *p4;
    assert_int_equal(mc_te_allocate_managed_buffer(b, 8000, &p4), MC_OK);
    assert_ptr_equal(p4, p1); /* recycled from its class */
    mc_te_destroy(b);
    free(mem);
    free(m2);
}

static void test_http_metadata(void **state)
{
    (void)state;
    mc_http_metadata_server *srv;
    assert_int_equal(mc_http_metadata_server_start("127.0.0.1", 0, NULL, &srv), 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metadata",
             (unsigned)mc_http_metadata_server_port(srv));
    mc_te *a = mk(url, "127.0.0.1:1001", 0), *b = mk(url, "127.0.0.1:1002", 1);
    assert_string_equal(mc_te_segment_name(b), "127.0.0.1:1002");
    assert_int_equal(mc_http_metadata_server_count(srv), 4); /* ram + rpc_meta, twice */
    char *mem = malloc(64 * MiB + 8192);
    assert_int_equal(mc_te_register_memory(b, mem, 64 * MiB + 8192, NULL), MC_OK);
    roundtrips(a, "127.0.0.1:1002", mem, 21);
    uint64_t first;
    assert_int_equal(mc_te_get_first_buffer_address(a, "127.0.0.1:1002", &first), MC_OK);
    assert_int_equal(first, (uint64_t)(uintptr_t)mem);
    assert_int_equal(mc_te_send_probe(a, "127.0.0.1:1002"), MC_OK);
    assert_int_equal(mc_te_send_probe(a, "127.0.0.1:1003"), MC_RPC_FAIL);
    mc_te_segment_t s;
    assert_int_equal(mc_te_open_segment(a, "nobody", &s), MC_SEGMENT_NOT_FOUND);
    /* a republished descriptor is seen after unregister */
    assert_int_equal(mc_te_unregister_memory(b, mem), MC_OK);
    assert_int_equal(mc_te_get_first_buffer_address(a, "127.0.0.1:1002", &first), MC_OK);
    assert_int_equal(first, 0);
    char buf[16];
    assert_int_equal(xfer(a, "127.0.0.1:1002", MC_TE_OP_READ, buf, (uint64_t)(uintptr_t)mem, 16),
                     MC_INVALID_PARAMS);
    mc_te_destroy(b);
    assert_int_equal(mc_http_metadata_server_count(srv), 2); /* b removed its keys */
    mc_te_destroy(a);
    assert_int_equal(mc_http_metadata_server_count(srv), 0);
    free(mem);

    /* metadata server down at initialize: an error, nothing left running */
    uint16_t port = mc_http_metadata_server_port(srv);
    mc_http_metadata_server_destroy(srv);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metadata", (unsigned)port);
    mc_te *c;
    assert_int_equal(mc_te_create(NULL, &c), MC_OK);
    int rc = mc_te_initialize(c, "127.0.0.1:1004", url, "tcp", "");
    assert_true(rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT);
    assert_int_equal(mc_te_get_rpc_port(c), -1);
    mc_te_destroy(c);
    /* bad protocol / connection strings */
    assert_int_equal(mc_te_create(NULL, &c), MC_OK);
    assert_int_equal(mc_te_initialize(c, "127.0.0.1", "P2PHANDSHAKE", "nvlink", ""),
                     MC_NOT_SUPPORTED);
    assert_int_equal(mc_te_initialize(c, "127.0.0.1", "bogus://x", "tcp", ""),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_te_initialize(c, "127.0.0.1:99999", "P2PHANDSHAKE", "tcp", ""),
                     MC_INVALID_PARAMS);
    mc_te_destroy(c);
}

static void test_environment(void **state)
{
    (void)state;
    mc_te *te;
    setenv("MC_TRANSFER_TIMEOUT", "abc", 1);
    assert_int_equal(mc_te_create(NULL, &te), MC_INVALID_PARAMS);
    setenv("MC_TRANSFER_TIMEOUT", "0", 1);
    assert_int_equal(mc_te_create(NULL, &te), MC_INVALID_PARAMS);
    setenv("MC_TRANSFER_TIMEOUT", "2", 1);
    setenv("MC_BUSY_POLL_US", "10001", 1); /* above MC_SPIN_MAX_US */
    assert_int_equal(mc_te_create(NULL, &te), MC_INVALID_PARAMS);
    setenv("MC_BUSY_POLL_US", "fast", 1);
    assert_int_equal(mc_te_create(NULL, &te), MC_INVALID_PARAMS);
    unsetenv("MC_BUSY_POLL_US");
    setenv("MC_TCP_SLICE_SIZE", "1k", 1); /* below 4 KiB */
    assert_int_equal(mc_te_create(NULL, &te), MC_INVALID_PARAMS);
    setenv("MC_TCP_SLICE_SIZE", "64k", 1);
    setenv("MC_TE_TCP_CONNECTIONS", "99", 1);
    assert_int_equal(mc_te_create(NULL, &te), MC_INVALID_PARAMS);
    setenv("MC_TE_TCP_CONNECTIONS", "3", 1);
    setenv("MC_FORCE_TCP", "1", 1);
    assert_int_equal(mc_te_create(NULL, &te), MC_OK);
    assert_int_equal(mc_te_initialize(te, "127.0.0.1", "P2PHANDSHAKE", "rdma", ""), MC_OK);
    /* forced TCP: no shm socket published, shared memory served over TCP */
    mc_te *b = mk_p2p(0);
    mc_segment_desc d;
    assert_int_equal(mc_te_get_segment_desc(b, mc_te_segment_name(te), &d), MC_OK);
    assert_true(d.shm_socket == NULL || d.shm_socket[0] == '\0');
    mc_segment_desc_deinit(&d);
    char *mem;
    assert_int_equal(mc_te_alloc_shared(b, 3 * 65536 + 5, (void **)&mem), MC_OK);
    char *src = malloc(3 * 65536 + 5);
    te_fill(src, 3 * 65536 + 5, 12);
    assert_int_equal(xfer(te, mc_te_segment_name(b), MC_TE_OP_WRITE, src,
                          (uint64_t)(uintptr_t)mem, 3 * 65536 + 5),
                     MC_OK); /* 4 slices of 64 KiB over 3 connections */
    assert_true(te_check(mem, 3 * 65536 + 5, 12));
    mc_te_stats st;
    mc_te_get_stats(te, &st);
    assert_int_equal(st.shm_bytes, 0);
    assert_true(st.connections_opened >= 1 && st.connections_opened <= 3);
    free(src);
    mc_te_destroy(b);
    mc_te_destroy(te);
    unsetenv("MC_TRANSFER_TIMEOUT");
    unsetenv("MC_TCP_SLICE_SIZE");
    unsetenv("MC_TE_TCP_CONNECTIONS");
    unsetenv("MC_FORCE_TCP");
}

typedef struct worker {
    mc_te *a;
    const char *seg;
    char *mem;
    int idx;
    int ok;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    char *buf = malloc(65536), *back = malloc(65536);
    w->ok = 1;
    for (int i = 0; i < 40; i++) {
        uint64_t off = (uint64_t)(w->idx * 40 + i) * 65536, seed = (uint64_t)w->idx * 1000 + i;
        te_fill(buf, 65536, seed);
        uint64_t r = (uint64_t)(uintptr_t)w->mem + off;
        if (xfer(w->a, w->seg, MC_TE_OP_WRITE, buf, r, 65536) != MC_OK ||
            xfer(w->a, w->seg, MC_TE_OP_READ, back, r, 65536) != MC_OK ||
            !te_check(back, 65536, seed))
            w->ok = 0;
    }
    free(buf);
    free(back);
    return NULL;
}

static void test_concurrent_callers(void **state)
{
    (void)state;
    mc_te *a = mk_p2p(1), *b = mk_p2p(1);
    char *mem = malloc(4 * 40 * 65536);
    assert_int_equal(mc_te_register_memory(b, mem, 4 * 40 * 65536, NULL), MC_OK);
    pthread_t th[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){.a = a, .seg = mc_te_segment_name(b), .mem = mem, .idx = i};
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(w[i].ok);
    }
    mc_te_destroy(a);
    mc_te_destroy(b);
    free(mem);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_tcp),
        cmocka_unit_test(test_roundtrip_shm_and_forced_tcp),
        cmocka_unit_test(test_large_request_striped),
        cmocka_unit_test(test_two_loops_per_peer),
        cmocka_unit_test(test_read_batch_beyond_reply_budget),
        cmocka_unit_test(test_batch_spreads_over_connections),
        cmocka_unit_test(test_prefault_env),
        cmocka_unit_test(test_refused_ranges),
        cmocka_unit_test(test_batch_api),
        cmocka_unit_test(test_notify_probe),
        cmocka_unit_test(test_registration_rules),
        cmocka_unit_test(test_http_metadata),
        cmocka_unit_test(test_concurrent_callers),
        cmocka_unit_test(test_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
