/* test_te_fence.c: fence epochs (src/transfer/fence.c, docs/consistency.md): real engines
 * in one process over 127.0.0.1 (TCP and the same-host memfd path), raw sockets on the
 * data port, and a fake peer speaking another wire version.
 *
 * A server loop is stalled deterministically by posting a task to it that blocks until
 * the test releases it (the engine's own loop, reached through internal.h); a same-host
 * copy "in progress" is the shared hold of the peer's copy lock that every copy takes. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "net/frame.h"
#include "net/sock.h"
#include "te_test_util.h"
#include "transfer/internal.h"
#include "transfer/wire.h"

#define KiB 1024ull
#define MiB (1ull << 20)
#define WAIT_MS 10000

static mc_te *mk(int force_tcp, uint64_t slice)
{
    mc_te_opts o = {.force_tcp = force_tcp ? 1 : 0, .transfer_timeout_ms = 20000,
                    .io_threads = 1, .conns_per_peer = 1, .slice_size = slice};
    mc_te *te;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(mc_te_initialize(te, "127.0.0.1", "P2PHANDSHAKE", "tcp", ""), MC_OK);
    return te;
}

/* One request; returns the batch (submitted, not waited for). */
static mc_te_batch_t start(mc_te *te, const char *seg, int op, void *local, uint64_t remote,
                           uint64_t len, uint64_t epoch)
{
    mc_te_segment_t h;
    assert_int_equal(mc_te_open_segment(te, seg, &h), MC_OK);
    mc_te_batch_t b;
    assert_int_equal(mc_te_allocate_batch(te, 1, &b), MC_OK);
    mc_te_request r = {.opcode = op, .source = local, .target_id = h, .target_offset = remote,
                       .length = len, .fence_epoch = epoch};
    assert_int_equal(mc_te_submit(te, b, &r, 1), MC_OK);
    return b;
}

/* Waits for the batch, frees it; returns MC_OK or the task's error. */
static int finish(mc_te *te, mc_te_batch_t b)
{
    mc_te_status st;
    assert_int_equal(mc_te_wait_batch(te, b, WAIT_MS * 3, &st), MC_OK);
    assert_int_equal(mc_te_free_batch(te, b), MC_OK);
    if (st.state == MC_TE_COMPLETED)
        return MC_OK;
    assert_int_not_equal(st.error, MC_OK);
    return st.error;
}

static int xfer(mc_te *te, const char *seg, int op, void *local, uint64_t remote, uint64_t len,
                uint64_t epoch)
{
    return finish(te, start(te, seg, op, local, remote, len, epoch));
}

static mc_te_stats stats(mc_te *te)
{
    mc_te_stats st;
    mc_te_get_stats(te, &st);
    return st;
}

/* ---- stalling a loop ---- */

typedef struct stall {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool stalled, release;
} stall;

static void stall_task(void *arg)
{
    stall *s = arg;
    pthread_mutex_lock(&s->m);
    s->stalled = true;
    pthread_cond_broadcast(&s->cv);
    while (!s->release)
        pthread_cond_wait(&s->cv, &s->m);
    pthread_mutex_unlock(&s->m);
}

/* Blocks te's (only) I/O loop until stall_release. */
static void stall_loop(mc_te *te, stall *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->cv, NULL);
    assert_int_equal(mc_loop_post(te->io[0].loop, stall_task, s), 0);
    pthread_mutex_lock(&s->m);
    while (!s->stalled)
        pthread_cond_wait(&s->cv, &s->m);
    pthread_mutex_unlock(&s->m);
}

static void stall_release(stall *s)
{
    pthread_mutex_lock(&s->m);
    s->release = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->m);
}

/* ---- fences called on another thread ---- */

typedef struct fence_call {
    pthread_t th;
    mc_te *te;
    uint64_t hi, lo, min;
    const char *seg; /* NULL: fence_writer */
    int rc;
    atomic_bool done;
} fence_call;

static void *fence_main(void *arg)
{
    fence_call *f = arg;
    f->rc = f->seg ? mc_te_fence_target(f->te, f->seg, f->min)
                   : mc_te_fence_writer(f->te, f->hi, f->lo, f->min);
    atomic_store(&f->done, true);
    return NULL;
}

static void fence_start(fence_call *f)
{
    atomic_init(&f->done, false);
    assert_int_equal(pthread_create(&f->th, NULL, fence_main, f), 0);
}

/* Waits (bounded) until cond(arg) holds. */
static bool wait_until(bool (*cond)(void *), void *arg)
{
    uint64_t dl = mc_deadline_ms(WAIT_MS);
    while (!cond(arg)) {
        if (mc_now_ms() >= dl)
            return false;
        mc_sleep_ms(1);
    }
    return true;
}

typedef struct sent_at_least {
    mc_te *te;
    uint64_t bytes;
} sent_at_least;

static bool cond_sent(void *arg)
{
    sent_at_least *s = arg;
    return stats(s->te).tcp_bytes_sent >= s->bytes;
}

static bool cond_writer_fence(void *arg)
{
    fence_call *f = arg;
    uint64_t v = 0;
    mc_te_get_writer_fence(f->te, f->hi, f->lo, &v);
    return v >= f->min;
}

static bool cond_target_fence(void *arg)
{
    fence_call *f = arg;
    uint64_t v = 0;
    mc_te_get_target_fence(f->te, f->seg, &v);
    return v >= f->min;
}

/* ---- owner side ---- */

/* Old epochs are refused before memory is touched; the current one, newer ones and 0
 * are accepted; other writers are not affected; the minimum only grows. */
static void test_fence_writer_tcp(void **state)
{
    (void)state;
    mc_te *a = mk(1, 0), *b = mk(1, 0), *c = mk(1, 0);
    const char *seg = mc_te_segment_name(a);
    size_t len = 64 * KiB;
    char *mem = calloc(1, len), *src = malloc(len);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    uint64_t remote = (uint64_t)(uintptr_t)mem;
    assert_int_equal(mc_te_set_writer_id(b, 0x1111, 0x2222), MC_OK);
    assert_int_equal(mc_te_set_writer_id(c, 0x1111, 0x3333), MC_OK);

    te_fill(src, len, 1);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 1), MC_OK);
    assert_true(te_check(mem, len, 1));

    assert_int_equal(mc_te_fence_writer(a, 0x1111, 0x2222, 5), MC_OK);
    uint64_t v = 0;
    assert_int_equal(mc_te_get_writer_fence(a, 0x1111, 0x2222, &v), MC_OK);
    assert_int_equal(v, 5);
    te_fill(src, len, 2);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 4), MC_TRANSFER_FAIL);
    assert_true(te_check(mem, len, 1)); /* untouched */
    assert_int_equal(stats(a).stale_writes_refused, 1);
    assert_int_equal(stats(b).stale_sends_refused, 0); /* the owner refused it */
    /* the current epoch, a newer one and 0 are fine */
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 5), MC_OK);
    assert_true(te_check(mem, len, 2));
    te_fill(src, len, 3);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 0), MC_OK);
    assert_true(te_check(mem, len, 3));
    te_fill(src, len, 4);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 9), MC_OK);
    assert_true(te_check(mem, len, 4));
    /* reads are never fenced */
    char *dst = malloc(len);
    assert_int_equal(xfer(b, seg, MC_TE_OP_READ, dst, remote, len, 0), MC_OK);
    assert_true(te_check(dst, len, 4));
    /* another writer with an old epoch is not fenced */
    te_fill(src, len, 5);
    assert_int_equal(xfer(c, seg, MC_TE_OP_WRITE, src, remote, len, 1), MC_OK);
    assert_true(te_check(mem, len, 5));
    /* monotonic: a lower minimum is ignored */
    assert_int_equal(mc_te_fence_writer(a, 0x1111, 0x2222, 2), MC_OK);
    assert_int_equal(mc_te_get_writer_fence(a, 0x1111, 0x2222, &v), MC_OK);
    assert_int_equal(v, 5);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 3), MC_TRANSFER_FAIL);
    assert_int_equal(stats(a).stale_writes_refused, 2);
    /* the unset id cannot be fenced; min 0 is a no-op */
    assert_int_equal(mc_te_fence_writer(a, 0, 0, 3), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_fence_writer(a, 7, 7, 0), MC_OK);
    assert_int_equal(mc_te_get_writer_fence(a, 7, 7, &v), MC_OK);
    assert_int_equal(v, 0);
    assert_true(te_check(mem, len, 5));

    mc_te_destroy(b);
    mc_te_destroy(c);
    mc_te_destroy(a);
    free(mem);
    free(src);
    free(dst);
}

/* A WRITE whose bytes sit in the owner's socket while its server loop is stalled is
 * refused when the loop resumes, because the fence was applied first; and the fence call
 * does not return before the loop has applied it. */
static void test_fence_writer_queued(void **state)
{
    (void)state;
    mc_te *a = mk(1, 0), *b = mk(1, 0);
    const char *seg = mc_te_segment_name(a);
    size_t len = 64 * KiB;
    char *mem = calloc(1, len), *src = malloc(len);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    uint64_t remote = (uint64_t)(uintptr_t)mem;
    assert_int_equal(mc_te_set_writer_id(b, 42, 43), MC_OK);
    te_fill(src, len, 10);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 1), MC_OK);

    stall st;
    stall_loop(a, &st);
    te_fill(src, len, 11);
    mc_te_batch_t bt = start(b, seg, MC_TE_OP_WRITE, src, remote, len, 1);
    sent_at_least sa = {.te = b, .bytes = 2 * len};
    assert_true(wait_until(cond_sent, &sa)); /* every byte is in the kernel now */

    fence_call f = {.te = a, .hi = 42, .lo = 43, .min = 2};
    fence_start(&f);
    assert_true(wait_until(cond_writer_fence, &f)); /* the table has it ... */
    assert_false(atomic_load(&f.done));             /* ... but the loop has not run yet */
    stall_release(&st);
    pthread_join(f.th, NULL);
    assert_int_equal(f.rc, MC_OK);

    assert_int_equal(finish(b, bt), MC_TRANSFER_FAIL);
    assert_true(te_check(mem, len, 10));
    assert_int_equal(stats(a).stale_writes_refused, 1);
    /* the new epoch goes through on the same connection */
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 2), MC_OK);
    assert_true(te_check(mem, len, 11));

    mc_te_destroy(b);
    mc_te_destroy(a);
    free(mem);
    free(src);
}

static int connect_port(int port)
{
    int fd = mc_sock_connect_tcp("127.0.0.1", (uint16_t)port, 3000);
    assert_true(fd >= 0);
    return fd;
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

/* Raw client: HELLO, then a WRITE whose first half has already reached memory when the
 * owner fences the writer: the second half is drained, the reply is -ESTALE. */
static void test_fence_writer_mid_payload(void **state)
{
    (void)state;
    mc_te *a = mk(1, 0);
    size_t len = 8 * KiB, half = len / 2;
    char *mem = calloc(1, len);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    int fd = connect_port(mc_te_get_data_port(a));
    uint64_t dl = mc_deadline_ms(WAIT_MS);
    uint8_t h[MC_TE_REQ_SIZE], rep[MC_TE_REP_SIZE];
    mc__te_req q = {.op = MC_TE_WOP_HELLO, .id = 1, .addr = 77, .len = 78};
    mc__te_req_encode(&q, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, dl), 0);
    assert_int_equal(mc_sock_recv_all(fd, rep, sizeof rep, dl), 0);
    mc__te_rep r;
    assert_int_equal(mc__te_rep_decode(rep, 1, MC_TE_WOP_HELLO, 0, &r), 0);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.len, MC_TE_WIRE_VERSION);

    char *payload = malloc(len);
    te_fill(payload, len, 20);
    q = (mc__te_req){.op = MC_TE_WOP_WRITE, .id = 2, .addr = (uint64_t)(uintptr_t)mem,
                     .len = len, .epoch = 3};
    mc__te_req_encode(&q, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, dl), 0);
    assert_int_equal(mc_sock_send_all(fd, payload, half, dl), 0);
    landed l = {.mem = mem, .n = half, .seed = 20};
    assert_true(wait_until(cond_landed, &l)); /* header parsed, half of it in memory */
    assert_int_equal(mc_te_fence_writer(a, 77, 78, 4), MC_OK);
    assert_int_equal(mc_sock_send_all(fd, payload + half, len - half, dl), 0);
    assert_int_equal(mc_sock_recv_all(fd, rep, sizeof rep, dl), 0);
    assert_int_equal(mc__te_rep_decode(rep, 2, MC_TE_WOP_WRITE, len, &r), 0);
    assert_int_equal(r.status, -ESTALE);
    assert_true(te_check(mem, half, 20));
    for (size_t i = half; i < len; i++)
        assert_int_equal(mem[i], 0); /* the rest never reached memory */
    /* same connection: the next header is parsed normally; a fenced write of 0 bytes and
     * a PING are answered */
    q = (mc__te_req){.op = MC_TE_WOP_PING, .id = 3};
    mc__te_req_encode(&q, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, dl), 0);
    assert_int_equal(mc_sock_recv_all(fd, rep, sizeof rep, dl), 0);
    assert_int_equal(mc__te_rep_decode(rep, 3, MC_TE_WOP_PING, 0, &r), 0);
    assert_int_equal(r.status, 0);
    assert_int_equal(stats(a).stale_writes_refused, 1);
    close(fd);
    mc_te_destroy(a);
    free(mem);
    free(payload);
}

/* ---- versions ---- */

typedef struct logcap {
    pthread_mutex_t m;
    char text[8192];
    size_t len;
} logcap;

static logcap cap = {.m = PTHREAD_MUTEX_INITIALIZER};

static void cap_sink(mc_log_level level, const char *tag, const char *msg, void *ctx)
{
    (void)tag;
    (void)ctx;
    if (level < MC_LOG_WARN)
        return;
    pthread_mutex_lock(&cap.m);
    int k = snprintf(cap.text + cap.len, sizeof cap.text - cap.len, "%s\n", msg);
    if (k > 0 && (size_t)k < sizeof cap.text - cap.len)
        cap.len += (size_t)k;
    pthread_mutex_unlock(&cap.m);
}

static void cap_start(void)
{
    pthread_mutex_lock(&cap.m);
    cap.len = 0;
    cap.text[0] = '\0';
    pthread_mutex_unlock(&cap.m);
    mc_log_set_sink(cap_sink, NULL);
}

static bool cap_has(const char *a, const char *b, const char *c)
{
    pthread_mutex_lock(&cap.m);
    bool ok = false;
    for (char *line = cap.text; line && *line && !ok;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        ok = strstr(line, a) && strstr(line, b) && (!c || strstr(line, c));
        if (nl)
            *nl = '\n';
        line = nl ? nl + 1 : NULL;
    }
    pthread_mutex_unlock(&cap.m);
    return ok;
}

/* A version-1 header on our data port: answered -EPROTONOSUPPORT with our version, the
 * connection closed, the refusal logged with both versions. */
static void test_old_client_refused(void **state)
{
    (void)state;
    mc_te *a = mk(1, 0);
    cap_start();
    int fd = connect_port(mc_te_get_data_port(a));
    uint64_t dl = mc_deadline_ms(WAIT_MS);
    uint8_t v1[32] = {0}; /* a version-1 PING: 32 bytes */
    mc_put_le32(v1, MC_TE_REQ_MAGIC);
    v1[4] = 1;
    v1[5] = MC_TE_WOP_PING;
    mc_put_le64(v1 + 8, 99);
    assert_int_equal(mc_sock_send_all(fd, v1, sizeof v1, dl), 0);
    uint8_t rep[MC_TE_REP_SIZE];
    assert_int_equal(mc_sock_recv_all(fd, rep, sizeof rep, dl), 0);
    assert_int_equal(mc_get_le32(rep), MC_TE_REP_MAGIC);
    assert_int_equal((int32_t)mc_get_le32(rep + 4), -EPROTONOSUPPORT);
    assert_int_equal(mc_get_le64(rep + 8), 99);
    assert_int_equal(mc_get_le64(rep + 16), MC_TE_WIRE_VERSION);
    char b;
    assert_int_equal(mc_sock_wait(fd, POLLIN, dl), 1);
    assert_int_equal(recv(fd, &b, 1, 0), 0); /* closed */
    close(fd);
    assert_true(cap_has("version 1", "version 2", "127.0.0.1:"));
    mc_log_set_sink(NULL, NULL);
    mc_te_destroy(a);
}

/* A fake peer: serves its descriptor on a handshake port and, on its data port, either
 * closes after reading (what a version-1 engine does with a version-2 header) or answers
 * the HELLO as a version-3 engine refusing us. */
typedef struct fake_peer {
    int hs_lfd, data_lfd, stop[2];
    uint16_t hs_port, data_port;
    int mode; /* 1: close silently; 3: answer -EPROTONOSUPPORT, version 3 */
    pthread_t th;
    char name[64];
} fake_peer;

static void fake_handshake(fake_peer *f, int fd)
{
    uint64_t dl = mc_deadline_ms(WAIT_MS);
    uint8_t pre[MC_TE_HS_PREFIX];
    if (mc_sock_recv_all(fd, pre, sizeof pre, dl) < 0)
        return;
    uint64_t n = mc_get_le64(pre) - 1;
    char req[1024];
    if (n > sizeof req || mc_sock_recv_all(fd, req, n, dl) < 0)
        return;
    mc_segment_desc d;
    mc_segment_desc_init(&d);
    mc_segment_desc_set(&d.name, f->name);
    mc_segment_desc_set(&d.protocol, "tcp");
    mc_segment_desc_set(&d.host_id, "another-host");
    d.tcp_data_port = f->data_port;
    mc_segment_desc_add_buffer(&d, f->name, 1 << 20, 1 << 20, false);
    char *json;
    size_t jl;
    if (mc_segment_desc_encode(&d, &json, &jl) == MC_OK) {
        mc__te_hs_encode_prefix(pre, pre[8], jl);
        mc_sock_send_all(fd, pre, sizeof pre, dl);
        mc_sock_send_all(fd, json, jl, dl);
        free(json);
    }
    mc_segment_desc_deinit(&d);
}

static void fake_data(fake_peer *f, int fd)
{
    uint64_t dl = mc_deadline_ms(WAIT_MS);
    uint8_t h[MC_TE_REQ_SIZE];
    if (mc_sock_recv_all(fd, h, f->mode == 1 ? 32 : sizeof h, dl) < 0)
        return;
    if (f->mode == 3) {
        uint8_t rep[MC_TE_REP_SIZE];
        mc_put_le32(rep, MC_TE_REP_MAGIC);
        mc_put_le32(rep + 4, (uint32_t)-EPROTONOSUPPORT);
        memcpy(rep + 8, h + 8, 8);
        mc_put_le64(rep + 16, 3);
        mc_sock_send_all(fd, rep, sizeof rep, dl);
    }
}

static void *fake_main(void *arg)
{
    fake_peer *f = arg;
    for (;;) {
        struct pollfd p[3] = {{.fd = f->hs_lfd, .events = POLLIN},
                              {.fd = f->data_lfd, .events = POLLIN},
                              {.fd = f->stop[0], .events = POLLIN}};
        if (poll(p, 3, -1) < 0)
            continue;
        if (p[2].revents)
            return NULL;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            int fd = mc_sock_accept(p[i].fd, false);
            if (fd < 0)
                continue;
            if (i == 0)
                fake_handshake(f, fd);
            else
                fake_data(f, fd);
            close(fd);
        }
    }
}

static void fake_start(fake_peer *f, int mode)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    f->hs_lfd = mc_sock_listen_tcp("127.0.0.1", 0, 16, false, &f->hs_port);
    f->data_lfd = mc_sock_listen_tcp("127.0.0.1", 0, 16, false, &f->data_port);
    assert_true(f->hs_lfd >= 0 && f->data_lfd >= 0);
    assert_int_equal(pipe(f->stop), 0);
    snprintf(f->name, sizeof f->name, "127.0.0.1:%u", f->hs_port);
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_peer *f)
{
    assert_int_equal(write(f->stop[1], "x", 1), 1);
    pthread_join(f->th, NULL);
    close(f->hs_lfd);
    close(f->data_lfd);
    close(f->stop[0]);
    close(f->stop[1]);
}

/* Our engine reaching a peer of another version: the transfer fails (no hang) and the
 * log names the peer and both versions. */
static void test_old_or_new_server_refused(void **state)
{
    (void)state;
    mc_te *b = mk(1, 0);
    char buf[4096];
    memset(buf, 0x5A, sizeof buf);
    for (int mode = 1; mode <= 3; mode += 2) {
        fake_peer f;
        fake_start(&f, mode);
        cap_start();
        assert_int_equal(xfer(b, f.name, MC_TE_OP_READ, buf, 1 << 20, sizeof buf, 0),
                         MC_TRANSFER_FAIL);
        if (mode == 1)
            assert_true(cap_has(f.name, "without answering HELLO", "version 1"));
        else
            assert_true(cap_has(f.name, "version 3", "version 2"));
        mc_log_set_sink(NULL, NULL);
        for (size_t i = 0; i < sizeof buf; i++)
            assert_int_equal((unsigned char)buf[i], 0x5A);
        fake_stop(&f);
    }
    mc_te_destroy(b);
}

/* ---- writer side ---- */

static te_peer *peer_of(mc_te *te, const char *seg)
{
    mc_te_segment_t h;
    assert_int_equal(mc_te_open_segment(te, seg, &h), MC_OK);
    te_peer *p = mc__te_peer_by_handle(te, h);
    assert_non_null(p);
    return p;
}

/* Same-host copies: refused below the minimum, accepted at it and with 0; the fence
 * waits for a copy in progress; a fence set before the segment is opened applies. */
static void test_fence_target_same_host(void **state)
{
    (void)state;
    mc_te *a = mk(0, 0), *b = mk(0, 0), *c = mk(0, 0);
    const char *seg = mc_te_segment_name(a);
    size_t len = 64 * KiB;
    char *mem, *src = malloc(len);
    assert_int_equal(mc_te_alloc_shared(a, len, (void **)&mem), MC_OK);
    uint64_t remote = (uint64_t)(uintptr_t)mem;

    te_fill(src, len, 30);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 1), MC_OK);
    assert_true(te_check(mem, len, 30));
    assert_int_equal(stats(b).shm_bytes, len); /* it is the same-host path */

    assert_int_equal(mc_te_fence_target(b, seg, 3), MC_OK);
    uint64_t v = 0;
    assert_int_equal(mc_te_get_target_fence(b, seg, &v), MC_OK);
    assert_int_equal(v, 3);
    te_fill(src, len, 31);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 2), MC_TRANSFER_FAIL);
    assert_true(te_check(mem, len, 30));
    assert_int_equal(stats(b).stale_sends_refused, 1);
    assert_int_equal(stats(b).shm_bytes, len);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 3), MC_OK);
    assert_true(te_check(mem, len, 31));
    te_fill(src, len, 32);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 0), MC_OK);
    assert_true(te_check(mem, len, 32));
    char *dst = malloc(len);
    assert_int_equal(xfer(b, seg, MC_TE_OP_READ, dst, remote, len, 0), MC_OK);
    assert_true(te_check(dst, len, 32));

    /* a copy in progress holds the peer's copy lock shared: the fence waits for it */
    te_peer *p = peer_of(b, seg);
    pthread_rwlock_rdlock(&p->shm_rw);
    fence_call f = {.te = b, .seg = seg, .min = 4};
    fence_start(&f);
    assert_true(wait_until(cond_target_fence, &f)); /* recorded by name ... */
    assert_false(atomic_load(&f.done));             /* ... not returned: a copy runs */
    pthread_rwlock_unlock(&p->shm_rw);
    pthread_join(f.th, NULL);
    assert_int_equal(f.rc, MC_OK);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, len, 3), MC_TRANSFER_FAIL);
    assert_int_equal(stats(b).stale_sends_refused, 2);
    assert_true(te_check(mem, len, 32));

    /* fenced by name before the segment was ever opened */
    assert_int_equal(mc_te_fence_target(c, seg, 6), MC_OK);
    assert_int_equal(mc_te_fence_target(c, seg, 2), MC_OK); /* lower: ignored */
    assert_int_equal(mc_te_get_target_fence(c, seg, &v), MC_OK);
    assert_int_equal(v, 6);
    te_fill(src, len, 33);
    assert_int_equal(xfer(c, seg, MC_TE_OP_WRITE, src, remote, len, 5), MC_TRANSFER_FAIL);
    assert_true(te_check(mem, len, 32));
    assert_int_equal(xfer(c, seg, MC_TE_OP_WRITE, src, remote, len, 6), MC_OK);
    assert_true(te_check(mem, len, 33));
    assert_int_equal(mc_te_fence_target(c, "", 1), MC_INVALID_PARAMS);
    assert_int_equal(mc_te_fence_target(c, NULL, 1), MC_INVALID_PARAMS);

    mc_te_destroy(b);
    mc_te_destroy(c);
    mc_te_destroy(a);
    free(src);
    free(dst);
}

/* TCP: a fenced WRITE is never sent (the owner sees nothing); one queued behind a
 * stalled owner whose header has not reached the socket is sent as a PING instead. */
static void test_fence_target_tcp(void **state)
{
    (void)state;
    mc_te *a = mk(1, 0), *b = mk(1, 0);
    const char *seg = mc_te_segment_name(a);
    size_t len = 64 * MiB;
    char *mem = calloc(1, len), *src = malloc(len);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    uint64_t remote = (uint64_t)(uintptr_t)mem;
    te_fill(src, 64 * KiB, 40);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, 64 * KiB, 1), MC_OK);
    assert_true(te_check(mem, 64 * KiB, 40));

    assert_int_equal(mc_te_fence_target(b, seg, 2), MC_OK);
    uint64_t served = stats(a).served_bytes;
    te_fill(src, 64 * KiB, 41);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, 64 * KiB, 1), MC_TRANSFER_FAIL);
    assert_true(te_check(mem, 64 * KiB, 40));
    assert_int_equal(stats(b).stale_sends_refused, 1);
    assert_int_equal(stats(a).served_bytes, served);
    assert_int_equal(stats(a).stale_writes_refused, 0);
    assert_int_equal(xfer(b, seg, MC_TE_OP_WRITE, src, remote, 64 * KiB, 2), MC_OK);
    assert_true(te_check(mem, 64 * KiB, 41));

    /* 64 MiB in 1 MiB slices queued behind a stalled owner: the socket buffers hold far
     * less, so most headers have not been handed to the socket when the fence returns */
    stall st;
    stall_loop(a, &st);
    te_fill(src, len, 42);
    mc_te_batch_t bt = start(b, seg, MC_TE_OP_WRITE, src, remote, len, 2);
    assert_int_equal(mc_te_fence_target(b, seg, 3), MC_OK);
    stall_release(&st);
    assert_int_equal(finish(b, bt), MC_TRANSFER_FAIL);
    assert_true(stats(b).stale_sends_refused >= 2);
    assert_int_equal(stats(a).stale_writes_refused, 0);
    for (size_t i = len - MiB; i < len; i++)
        assert_int_equal(mem[i], 0); /* the last slice never left */

    mc_te_destroy(b);
    mc_te_destroy(a);
    free(mem);
    free(src);
}

/* ---- reads ---- */

/* A refused read leaves the caller's buffer as it was (the refused slices' zeros are
 * drained); slices that succeeded deliver their bytes. */
static void test_failed_read_untouched(void **state)
{
    (void)state;
    mc_te *a = mk(1, 64 * KiB), *b = mk(1, 64 * KiB);
    const char *seg = mc_te_segment_name(a);
    size_t len = 256 * KiB;
    char *mem = malloc(len), *dst = malloc(2 * len);
    te_fill(mem, len, 50);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    memset(dst, 0xA5, 2 * len);
    /* nowhere near registered memory */
    uint64_t l = (uint64_t)(uintptr_t)dst, rem = 4096, n = len;
    assert_int_equal(mc_te_transfer_sync(b, seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0),
                     MC_INVALID_PARAMS);
    for (size_t i = 0; i < 2 * len; i++)
        assert_int_equal((unsigned char)dst[i], 0xA5);
    /* the last 64 KiB slice crosses the end: refused; the first three arrive */
    rem = (uint64_t)(uintptr_t)mem + 64 * KiB;
    assert_int_equal(mc_te_transfer_sync(b, seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0),
                     MC_INVALID_PARAMS);
    assert_memory_equal(dst, mem + 64 * KiB, 192 * KiB);
    for (size_t i = 192 * KiB; i < 2 * len; i++)
        assert_int_equal((unsigned char)dst[i], 0xA5);
    /* and the connection still serves reads straight into the buffer */
    rem = (uint64_t)(uintptr_t)mem;
    assert_int_equal(mc_te_transfer_sync(b, seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(dst, len, 50));
    mc_te_destroy(b);
    mc_te_destroy(a);
    free(mem);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fence_writer_tcp),
        cmocka_unit_test(test_fence_writer_queued),
        cmocka_unit_test(test_fence_writer_mid_payload),
        cmocka_unit_test(test_old_client_refused),
        cmocka_unit_test(test_old_or_new_server_refused),
        cmocka_unit_test(test_fence_target_same_host),
        cmocka_unit_test(test_fence_target_tcp),
        cmocka_unit_test(test_failed_read_untouched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
