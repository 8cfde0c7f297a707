/* test_te_parse.c: the serving side's receive buffer (src/transfer/tcp_server.c) and the
 * initiator's reply parsing (tcp_client.c), driven through raw sockets on a real
 * engine's data port and between two real engines over 127.0.0.1: many requests in one
 * read, a header split across reads, a payload split across reads (small and large), a
 * fenced WRITE and an out-of-range WRITE in the middle of a batch, and a refused READ in
 * the middle of a batch of READs.
 *
 * "The server has read these bytes" is observed, not slept for: a task posted to the
 * engine's only I/O loop reports how many unparsed bytes its connection buffers. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "net/sock.h"
#include "te_test_util.h"
#include "transfer/internal.h"
#include "transfer/wire.h"

#define KiB 1024ull
#define WAIT_MS 10000

static mc_te *mk(void)
{
    mc_te_opts o = {.force_tcp = 1, .transfer_timeout_ms = 20000, .io_threads = 1,
                    .conns_per_peer = 1};
    mc_te *te;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(mc_te_initialize(te, "127.0.0.1", "P2PHANDSHAKE", "tcp", ""), MC_OK);
    return te;
}

static int conn(mc_te *te)
{
    int fd = mc_sock_connect_tcp("127.0.0.1", (uint16_t)mc_te_get_data_port(te), 3000);
    assert_true(fd >= 0);
    return fd;
}

/* ---- a byte stream of requests ---- */

typedef struct stream {
    uint8_t *b;
    size_t len, cap;
} stream;

static void put(stream *s, const void *p, size_t n)
{
    if (s->len + n > s->cap) {
        s->cap = (s->len + n) * 2;
        s->b = realloc(s->b, s->cap);
    }
    memcpy(s->b + s->len, p, n);
    s->len += n;
}

static void req(stream *s, uint8_t op, uint64_t id, uint64_t addr, uint64_t len,
                uint64_t epoch, const void *payload)
{
    uint8_t h[MC_TE_REQ_SIZE];
    mc__te_req q = {.op = op, .id = id, .addr = addr, .len = len, .epoch = epoch};
    mc__te_req_encode(&q, h);
    put(s, h, sizeof h);
    if (payload)
        put(s, payload, len);
}

static void send_all(int fd, const void *p, size_t n)
{
    assert_int_equal(mc_sock_send_all(fd, p, n, mc_deadline_ms(WAIT_MS)), 0);
}

/* Receives one reply and checks its id, status and (READ) payload length; the payload
 * goes into out (when not NULL). */
static void expect(int fd, uint64_t id, uint8_t op, uint64_t len, int status, void *out)
{
    uint8_t rep[MC_TE_REP_SIZE];
    uint64_t dl = mc_deadline_ms(WAIT_MS);
    assert_int_equal(mc_sock_recv_all(fd, rep, sizeof rep, dl), 0);
    mc__te_rep r;
    assert_int_equal(mc__te_rep_decode(rep, id, op, len, &r), 0);
    assert_int_equal(r.status, status);
    if (op == MC_TE_WOP_READ && len) {
        char *tmp = out ? out : malloc(len);
        assert_int_equal(mc_sock_recv_all(fd, tmp, len, dl), 0);
        if (!out)
            free(tmp);
    }
}

static void hello(int fd, uint64_t hi, uint64_t lo)
{
    stream s = {0};
    req(&s, MC_TE_WOP_HELLO, 1, hi, lo, 0, NULL);
    send_all(fd, s.b, s.len);
    uint8_t rep[MC_TE_REP_SIZE];
    assert_int_equal(mc_sock_recv_all(fd, rep, sizeof rep, mc_deadline_ms(WAIT_MS)), 0);
    mc__te_rep r;
    assert_int_equal(mc__te_rep_decode(rep, 1, MC_TE_WOP_HELLO, 0, &r), 0);
    assert_int_equal(r.status, 0);
    free(s.b);
}

/* ---- what the server buffers ---- */

typedef struct probe {
    te_io *io;
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    size_t buffered; /* unparsed bytes in the (only) server connection's buffer */
    int state;
} probe;

static void probe_task(void *arg)
{
    probe *p = arg;
    size_t n = 0;
    int state = -1;
    te_sconn *c;
    MC_LIST_FOREACH_ENTRY(c, &p->io->sconns, te_sconn, link) {
        n += c->in.len - c->in.pos;
        state = c->state;
    }
    pthread_mutex_lock(&p->m);
    p->buffered = n;
    p->state = state;
    p->done = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->m);
}

typedef struct want_buffered {
    mc_te *te;
    size_t n;
} want_buffered;

static bool cond_buffered(void *arg)
{
    want_buffered *w = arg;
    probe p = {.io = &w->te->io[0]};
    pthread_mutex_init(&p.m, NULL);
    pthread_cond_init(&p.cv, NULL);
    assert_int_equal(mc_loop_post(p.io->loop, probe_task, &p), 0);
    pthread_mutex_lock(&p.m);
    while (!p.done)
        pthread_cond_wait(&p.cv, &p.m);
    pthread_mutex_unlock(&p.m);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.m);
    return p.buffered == w->n && p.state == TE_S_HDR;
}

typedef struct landed {
    const char *mem;
    size_t n;
    uint64_t seed;
} landed;

static bool cond_landed(void *arg)
{
    landed *l = arg;
    return te_check(l->mem, l->n, l->seed);
}

/* ---- tests ---- */

/* 200 requests in one send (most of them arrive in one read): small WRITEs, READs,
 * PINGs; every reply in order, every byte where it belongs. */
static void test_many_in_one_read(void **state)
{
    (void)state;
    mc_te *a = mk();
    size_t blk = 1 * KiB, n = 100, len = n * blk;
    char *mem = calloc(1, len), *src = malloc(len), *back = malloc(len);
    te_fill(src, len, 1);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    int fd = conn(a);
    hello(fd, 0, 0);
    stream s = {0};
    uint64_t base = (uint64_t)(uintptr_t)mem;
    for (size_t i = 0; i < n; i++)
        req(&s, MC_TE_WOP_WRITE, 10 + i, base + i * blk, blk, 0, src + i * blk);
    for (size_t i = 0; i < n; i++)
        req(&s, i % 10 == 9 ? MC_TE_WOP_PING : MC_TE_WOP_READ, 1000 + i,
            i % 10 == 9 ? 0 : base + i * blk, i % 10 == 9 ? 0 : blk, 0, NULL);
    send_all(fd, s.b, s.len);
    for (size_t i = 0; i < n; i++)
        expect(fd, 10 + i, MC_TE_WOP_WRITE, 0, 0, NULL);
    for (size_t i = 0; i < n; i++) {
        if (i % 10 == 9) {
            expect(fd, 1000 + i, MC_TE_WOP_PING, 0, 0, NULL);
            memcpy(back + i * blk, src + i * blk, blk);
        } else {
            expect(fd, 1000 + i, MC_TE_WOP_READ, blk, 0, back + i * blk);
        }
    }
    assert_memory_equal(mem, src, len);
    assert_memory_equal(back, src, len);
    close(fd);
    mc_te_destroy(a);
    free(s.b);
    free(mem);
    free(src);
    free(back);
}

/* A header whose first bytes the server has read (and buffered) before the rest
 * arrives; the same for the 16-byte version prefix boundary. */
static void test_header_split(void **state)
{
    (void)state;
    mc_te *a = mk();
    size_t len = 4 * KiB;
    char *mem = calloc(1, len), *src = malloc(len);
    te_fill(src, len, 2);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    int fd = conn(a);
    hello(fd, 0, 0);
    stream s = {0};
    req(&s, MC_TE_WOP_WRITE, 5, (uint64_t)(uintptr_t)mem, len, 0, src);
    size_t cuts[] = {10, MC_TE_REQ_PREFIX, MC_TE_REQ_SIZE - 1};
    for (size_t i = 0; i < 3; i++) {
        send_all(fd, s.b, cuts[i]);
        want_buffered w = {a, cuts[i]};
        assert_true(te_wait_until(cond_buffered, &w, WAIT_MS)); /* read, not parsed yet */
        send_all(fd, s.b + cuts[i], s.len - cuts[i]);
        expect(fd, 5, MC_TE_WOP_WRITE, 0, 0, NULL);
        assert_memory_equal(mem, src, len);
        memset(mem, 0, len);
    }
    close(fd);
    mc_te_destroy(a);
    free(s.b);
    free(mem);
    free(src);
}

/* A WRITE payload split across reads: its first part lands in memory before the rest
 * is sent, for a small payload (copied out of the buffer) and a large one (the rest
 * received straight into memory); a request right behind each is parsed normally. */
static void test_payload_split(void **state)
{
    (void)state;
    mc_te *a = mk();
    size_t lens[] = {4 * KiB, 200 * KiB};
    size_t cap = 256 * KiB;
    char *mem = calloc(1, cap), *src = malloc(cap);
    assert_int_equal(mc_te_register_memory(a, mem, cap, NULL), MC_OK);
    int fd = conn(a);
    hello(fd, 0, 0);
    for (size_t i = 0; i < 2; i++) {
        size_t len = lens[i], part = len / 4; /* a multiple of 8: te_check compares words */
        te_fill(src, len, 3 + i);
        memset(mem, 0, cap);
        stream s = {0};
        req(&s, MC_TE_WOP_WRITE, 20 + i, (uint64_t)(uintptr_t)mem, len, 0, src);
        req(&s, MC_TE_WOP_PING, 30 + i, 0, 0, 0, NULL);
        send_all(fd, s.b, MC_TE_REQ_SIZE + part);
        landed l = {mem, part, 3 + i};
        assert_true(te_wait_until(cond_landed, &l, WAIT_MS));
        send_all(fd, s.b + MC_TE_REQ_SIZE + part, s.len - MC_TE_REQ_SIZE - part);
        expect(fd, 20 + i, MC_TE_WOP_WRITE, 0, 0, NULL);
        expect(fd, 30 + i, MC_TE_WOP_PING, 0, 0, NULL);
        assert_true(te_check(mem, len, 3 + i));
        for (size_t j = len; j < cap; j++)
            assert_int_equal(mem[j], 0);
        free(s.b);
    }
    close(fd);
    mc_te_destroy(a);
    free(mem);
    free(src);
}

/* In one send: an accepted fenced WRITE, a WRITE below the writer's fence, an unfenced
 * WRITE and a READ. The refused one is drained (its memory untouched) and answered
 * -ESTALE; the requests around it are served. */
static void test_fenced_write_mid_batch(void **state)
{
    (void)state;
    mc_te *a = mk();
    size_t blk = 4 * KiB, len = 3 * blk;
    char *mem = calloc(1, len), *src = malloc(len), *back = malloc(blk);
    te_fill(src, len, 4);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    assert_int_equal(mc_te_fence_writer(a, 77, 78, 4), MC_OK);
    int fd = conn(a);
    hello(fd, 77, 78);
    uint64_t base = (uint64_t)(uintptr_t)mem;
    stream s = {0};
    req(&s, MC_TE_WOP_WRITE, 40, base, blk, 5, src);
    req(&s, MC_TE_WOP_WRITE, 41, base + blk, blk, 3, src + blk);
    req(&s, MC_TE_WOP_WRITE, 42, base + 2 * blk, blk, 0, src + 2 * blk);
    req(&s, MC_TE_WOP_READ, 43, base, blk, 0, NULL);
    send_all(fd, s.b, s.len);
    expect(fd, 40, MC_TE_WOP_WRITE, 0, 0, NULL);
    expect(fd, 41, MC_TE_WOP_WRITE, 0, -ESTALE, NULL);
    expect(fd, 42, MC_TE_WOP_WRITE, 0, 0, NULL);
    expect(fd, 43, MC_TE_WOP_READ, blk, 0, back);
    assert_memory_equal(mem, src, blk);
    for (size_t j = blk; j < 2 * blk; j++)
        assert_int_equal(mem[j], 0);
    assert_memory_equal(mem + 2 * blk, src + 2 * blk, blk);
    assert_memory_equal(back, src, blk);
    mc_te_stats st;
    mc_te_get_stats(a, &st);
    assert_int_equal(st.stale_writes_refused, 1);
    close(fd);
    mc_te_destroy(a);
    free(s.b);
    free(mem);
    free(src);
    free(back);
}

/* In one send: a WRITE, a WRITE crossing the end of registered memory, a READ crossing
 * it, a WRITE: the refused ones are answered -EFAULT (the READ with zeros), nothing of
 * the refused WRITE reaches memory, the others are served. */
static void test_out_of_range_mid_batch(void **state)
{
    (void)state;
    mc_te *a = mk();
    size_t blk = 4 * KiB, len = 4 * blk;
    char *mem = calloc(1, len), *src = malloc(2 * len), *back = malloc(blk);
    te_fill(src, 2 * len, 5);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    int fd = conn(a);
    hello(fd, 0, 0);
    uint64_t base = (uint64_t)(uintptr_t)mem;
    stream s = {0};
    req(&s, MC_TE_WOP_WRITE, 50, base, blk, 0, src);
    req(&s, MC_TE_WOP_WRITE, 51, base + len - 100, blk, 0, src + blk); /* crosses the end */
    req(&s, MC_TE_WOP_READ, 52, base + len - 100, blk, 0, NULL);
    req(&s, MC_TE_WOP_WRITE, 53, base + blk, blk, 0, src + 2 * blk);
    send_all(fd, s.b, s.len);
    expect(fd, 50, MC_TE_WOP_WRITE, 0, 0, NULL);
    expect(fd, 51, MC_TE_WOP_WRITE, 0, -EFAULT, NULL);
    memset(back, 0x5A, blk);
    expect(fd, 52, MC_TE_WOP_READ, blk, -EFAULT, back);
    for (size_t j = 0; j < blk; j++)
        assert_int_equal(back[j], 0); /* the stream layout: zeros */
    expect(fd, 53, MC_TE_WOP_WRITE, 0, 0, NULL);
    assert_memory_equal(mem, src, blk);
    assert_memory_equal(mem + blk, src + 2 * blk, blk);
    for (size_t j = 2 * blk; j < len; j++)
        assert_int_equal(mem[j], 0);
    close(fd);
    mc_te_destroy(a);
    free(s.b);
    free(mem);
    free(src);
    free(back);
}

/* Engine to engine, one batch of 64 small READs (their replies parsed many per read)
 * with a refused one in the middle: the others deliver their bytes, the refused one's
 * buffer is left as it was. */
static void test_refused_read_mid_batch(void **state)
{
    (void)state;
    mc_te *a = mk(), *b = mk();
    size_t blk = 4 * KiB, n = 64, len = n * blk;
    char *mem = malloc(len), *dst = malloc(len);
    te_fill(mem, len, 6);
    memset(dst, 0xA5, len);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    assert_int_equal(mc_te_register_memory(b, dst, len, NULL), MC_OK);
    mc_te_segment_t h;
    assert_int_equal(mc_te_open_segment(b, mc_te_segment_name(a), &h), MC_OK);
    mc_te_request *r = calloc(n, sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = (mc_te_request){.opcode = MC_TE_OP_READ, .source = dst + i * blk,
                               .target_id = h,
                               .target_offset = (uint64_t)(uintptr_t)mem + i * blk,
                               .length = blk};
    r[30].target_offset = (uint64_t)(uintptr_t)mem + len - 100; /* crosses the end */
    mc_te_batch_t bt;
    assert_int_equal(mc_te_allocate_batch(b, n, &bt), MC_OK);
    assert_int_equal(mc_te_submit(b, bt, r, n), MC_OK);
    mc_te_status st;
    assert_int_equal(mc_te_wait_batch(b, bt, WAIT_MS * 3, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_FAILED);
    for (size_t i = 0; i < n; i++) {
        mc_te_status ts;
        assert_int_equal(mc_te_get_transfer_status(b, bt, i, &ts), MC_OK);
        if (i == 30) {
            assert_int_equal(ts.state, MC_TE_FAILED);
            for (size_t j = 0; j < blk; j++)
                assert_int_equal((unsigned char)dst[i * blk + j], 0xA5);
        } else {
            assert_int_equal(ts.state, MC_TE_COMPLETED);
            assert_memory_equal(dst + i * blk, mem + i * blk, blk);
        }
    }
    assert_int_equal(mc_te_free_batch(b, bt), MC_OK);
    free(r);
    mc_te_destroy(b);
    mc_te_destroy(a);
    free(mem);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_in_one_read),
        cmocka_unit_test(test_header_split),
        cmocka_unit_test(test_payload_split),
        cmocka_unit_test(test_fenced_write_mid_batch),
        cmocka_unit_test(test_out_of_range_mid_batch),
        cmocka_unit_test(test_refused_read_mid_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
