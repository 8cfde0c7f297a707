/* test_te_faults.c: peers that die, freeze or restart (real child processes running
 * te_peer_helper), and garbage sent to the data and handshake ports. The engine must
 * fail the affected requests within the timeout, never hang or crash, reconnect to a
 * restarted peer, and keep serving after garbage. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "net/frame.h"
#include "net/sock.h"
#include "te_test_util.h"
#include "transfer/wire.h"

#define MiB (1ull << 20)

extern char **environ;
static const char *helper_path;

typedef struct child {
    pid_t pid;
    int in_fd; /* its stdin: closing it ends the helper */
    char seg[128];
    uint64_t addr;
} child;

static void spawn_helper(child *c, int port, size_t size, uint64_t seed, int shm)
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
    char ps[16], ss[32], sd[32];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(ss, sizeof ss, "%zu", size);
    snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
    char *argv[] = {(char *)helper_path, ps, ss, sd, shm ? "shm" : NULL, NULL};
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

static void end_helper(child *c, int sig)
{
    if (sig)
        kill(c->pid, sig);
    close(c->in_fd);
    int st;
    waitpid(c->pid, &st, 0);
}

static mc_te *mk_opts(uint64_t timeout_ms, int force_tcp)
{
    mc_te_opts o = {.transfer_timeout_ms = timeout_ms, .force_tcp = force_tcp};
    mc_te *te;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(mc_te_initialize(te, "127.0.0.1", "P2PHANDSHAKE", "tcp", ""), MC_OK);
    return te;
}

static mc_te *mk(uint64_t timeout_ms)
{
    return mk_opts(timeout_ms, 1);
}

static bool bytes_arrived(void *arg)
{
    mc_te_stats st;
    mc_te_get_stats(arg, &st);
    return st.tcp_bytes_received > 0;
}

static void test_peer_killed_mid_transfer(void **state)
{
    (void)state;
    child c;
    spawn_helper(&c, 0, 64 * MiB, 1, 0);
    mc_te *a = mk(4000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, c.seg, &seg), MC_OK);
    char *dst = malloc(64 * MiB);
    mc_te_request r[16];
    for (int i = 0; i < 16; i++)
        r[i] = (mc_te_request){.opcode = MC_TE_OP_READ, .source = dst, .target_id = seg,
                               .target_offset = c.addr, .length = 64 * MiB};
    mc_te_batch_t b;
    assert_int_equal(mc_te_allocate_batch(a, 16, &b), MC_OK);
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_te_submit(a, b, r, 16), MC_OK);
    assert_true(te_wait_until(bytes_arrived, a, 10000)); /* the transfer is under way */
    end_helper(&c, SIGKILL);
    mc_te_status st;
    assert_int_equal(mc_te_wait_batch(a, b, 15000, &st), MC_OK);
    uint64_t took = mc_now_ms() - t0;
    assert_true(st.state == MC_TE_FAILED || st.state == MC_TE_TIMEOUT);
    assert_true(st.transferred_bytes < 16 * 64 * MiB);
    assert_true(took < 4000 + 2000);
    assert_int_equal(mc_te_free_batch(a, b), MC_OK);
    /* later transfers to the dead peer fail fast; the engine itself is fine */
    uint64_t l = (uint64_t)(uintptr_t)dst, rem = c.addr, n = 4096;
    t0 = mc_now_ms();
    assert_int_not_equal(mc_te_transfer_sync(a, c.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL,
                                             NULL, 0),
                         MC_OK);
    assert_true(mc_now_ms() - t0 < 4000);
    child c2;
    spawn_helper(&c2, 0, MiB, 9, 0);
    rem = c2.addr;
    assert_int_equal(mc_te_transfer_sync(a, c2.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0),
                     MC_OK);
    char *exp = malloc(MiB);
    te_fill(exp, MiB, 9);
    assert_memory_equal(dst, exp, 4096);
    free(exp);
    end_helper(&c2, 0);
    mc_te_destroy(a);
    free(dst);
}

static void test_frozen_peer_times_out(void **state)
{
    (void)state;
    child c;
    spawn_helper(&c, 0, 8 * MiB, 2, 0);
    mc_te *a = mk(1000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, c.seg, &seg), MC_OK);
    kill(c.pid, SIGSTOP);
    int wst;
    assert_int_equal(waitpid(c.pid, &wst, WUNTRACED), c.pid); /* it has really stopped */
    assert_true(WIFSTOPPED(wst));
    char *src = malloc(8 * MiB);
    /* the first half: a timed-out write may still land there when the peer wakes */
    mc_te_request r = {.opcode = MC_TE_OP_WRITE, .source = src, .target_id = seg,
                       .target_offset = c.addr, .length = 4 * MiB};
    mc_te_batch_t b;
    assert_int_equal(mc_te_allocate_batch(a, 1, &b), MC_OK);
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_te_submit(a, b, &r, 1), MC_OK);
    mc_te_status st;
    assert_int_equal(mc_te_get_batch_status(a, b, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_PENDING);
    assert_int_equal(mc_te_free_batch(a, b), MC_UNAVAILABLE_IN_CURRENT_STATUS); /* refused */
    assert_int_equal(mc_te_wait_batch(a, b, 50, &st), MC_RPC_TIMEOUT); /* still pending */
    assert_int_equal(mc_te_wait_batch(a, b, 10000, &st), MC_OK);
    uint64_t took = mc_now_ms() - t0;
    assert_int_equal(st.state, MC_TE_TIMEOUT);
    assert_int_equal(st.error, MC_RPC_TIMEOUT);
    assert_true(took >= 900 && took < 3500);
    mc_te_status ts;
    assert_int_equal(mc_te_get_transfer_status(a, b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_TIMEOUT);
    assert_int_equal(mc_te_free_batch(a, b), MC_OK);
    kill(c.pid, SIGCONT);
    /* the peer is alive again: the next transfer reconnects (reads the untouched half) */
    uint64_t l = (uint64_t)(uintptr_t)src, rem = c.addr + 4 * MiB, n = 4 * MiB;
    assert_int_equal(
        mc_te_transfer_sync(a, c.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0), MC_OK);
    char *exp = malloc(8 * MiB);
    te_fill(exp, 8 * MiB, 2);
    assert_memory_equal(src, exp + 4 * MiB, 4 * MiB);
    free(exp);
    end_helper(&c, 0);
    mc_te_destroy(a);
    free(src);
}

static void test_restarted_peer(void **state)
{
    (void)state;
    int port = te_free_port();
    child c;
    spawn_helper(&c, port, MiB, 3, 0);
    mc_te *a = mk(5000);
    char *dst = malloc(MiB);
    uint64_t l = (uint64_t)(uintptr_t)dst, rem = c.addr, n = MiB;
    assert_int_equal(mc_te_transfer_sync(a, c.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(dst, MiB, 3));
    end_helper(&c, SIGKILL);
    child c2;
    spawn_helper(&c2, port, MiB, 4, 1); /* same name, new instance (memfd this time) */
    assert_string_equal(c2.seg, c.seg);
    rem = c2.addr;
    assert_int_equal(mc_te_transfer_sync(a, c2.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(dst, MiB, 4));
    end_helper(&c2, 0);
    mc_te_destroy(a);
    free(dst);
}

/* mc_te_submit_inline (tcp_inline.c) against a peer process. Frozen: the caller's run
 * finds no reply, gives up after its budget (submit returns) and hands the run to the
 * I/O threads, which complete it once the peer runs again; the bytes are right. The
 * runs after it, while the peer is frozen, return within their budget too.
 * Restarted on the same port with other bytes: an initiator's idle private connection
 * is dead, the run is handed over, and the read returns the new instance's bytes. */
static void test_inline_frozen_and_restarted_peer(void **state)
{
    (void)state;
    int port = te_free_port();
    child c;
    spawn_helper(&c, port, MiB, 5, 0);
    mc_te *a = mk(20000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(a, c.seg, &seg), MC_OK);
    enum { NR = 64, BLK = 4096 };
    char *dst = malloc(NR * BLK), *exp = malloc(MiB);
    mc_te_request r[NR];
    for (int i = 0; i < NR; i++)
        r[i] = (mc_te_request){.opcode = MC_TE_OP_READ, .source = dst + i * BLK,
                               .target_id = seg, .target_offset = c.addr + i * BLK,
                               .length = BLK};
    mc_te_batch_t b;
    mc_te_status st;
    mc_te_stats s0, s1;
    /* warm: the private connection exists and is idle */
    assert_int_equal(te_inline_batch(a, r, NR, 5000, 10000, NULL), MC_TE_COMPLETED);
    te_fill(exp, MiB, 5);
    assert_memory_equal(dst, exp, NR * BLK);
    mc_te_get_stats(a, &s0);
    assert_int_equal(s0.inline_bytes_received, NR * BLK);

    kill(c.pid, SIGSTOP);
    int wst;
    assert_int_equal(waitpid(c.pid, &wst, WUNTRACED), c.pid);
    assert_true(WIFSTOPPED(wst));
    memset(dst, 0, NR * BLK);
    assert_int_equal(mc_te_allocate_batch(a, NR, &b), MC_OK);
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_te_submit_inline(a, b, r, NR, 100), MC_OK);
    uint64_t took = mc_now_ms() - t0; /* the budget, not the 20 s transfer timeout */
    assert_true(took >= 90 && took < 3000);
    mc_te_get_stats(a, &s1);
    assert_int_equal(s1.inline_runs_handed_over, s0.inline_runs_handed_over + 1);
    assert_int_equal(mc_te_wait_batch(a, b, 50, &st), MC_RPC_TIMEOUT); /* still pending */
    /* the next run needs a new private connection: the frozen peer's kernel accepts it
     * and no HELLO answer comes; the peer is slow now, so the open waits only for the
     * caller's budget (it waited TE_INLINE_OPEN_MS = 1 s past it before), and the one
     * after does not try (TE_INLINE_RETRY_MS) */
    char *dst2 = malloc(2 * NR * BLK);
    mc_te_request r2[2][NR];
    mc_te_batch_t b2[2];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < NR; i++) {
            r2[k][i] = r[i];
            r2[k][i].source = dst2 + (k * NR + i) * BLK;
        }
        assert_int_equal(mc_te_allocate_batch(a, NR, &b2[k]), MC_OK);
        t0 = mc_now_ms();
        assert_int_equal(mc_te_submit_inline(a, b2[k], r2[k], NR, 100), MC_OK);
        took = mc_now_ms() - t0;
        if (k == 0)
            assert_true(took >= 90 && took < 800);
        else
            assert_true(took < 90);
    }
    mc_te_get_stats(a, &s1);
    assert_int_equal(s1.inline_runs_handed_over, s0.inline_runs_handed_over + 3);
    kill(c.pid, SIGCONT);
    assert_int_equal(mc_te_wait_batch(a, b, 15000, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_COMPLETED);
    assert_int_equal(mc_te_free_batch(a, b), MC_OK);
    assert_memory_equal(dst, exp, NR * BLK);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(mc_te_wait_batch(a, b2[k], 15000, &st), MC_OK);
        assert_int_equal(st.state, MC_TE_COMPLETED);
        assert_int_equal(mc_te_free_batch(a, b2[k]), MC_OK);
        assert_memory_equal(dst2 + k * NR * BLK, exp, NR * BLK);
    }
    free(dst2);

    /* an initiator that only ever read inline (no I/O thread connection sees the old
     * instance go): its idle private connection is dead when the peer is replaced */
    mc_te *a2 = mk(20000);
    mc_te_segment_t seg2;
    assert_int_equal(mc_te_open_segment(a2, c.seg, &seg2), MC_OK);
    for (int i = 0; i < NR; i++)
        r[i].target_id = seg2;
    assert_int_equal(te_inline_batch(a2, r, NR, 5000, 10000, NULL), MC_TE_COMPLETED);
    mc_te_get_stats(a2, &s0);
    assert_int_equal(s0.inline_bytes_received, NR * BLK);
    assert_int_equal(s0.connections_opened, 1); /* its private one: no lane's yet */
    assert_int_equal(s0.connections_failed, 0);
    end_helper(&c, SIGKILL);
    child c2;
    spawn_helper(&c2, port, MiB, 6, 0);
    assert_string_equal(c2.seg, c.seg);
    for (int i = 0; i < NR; i++)
        r[i].target_offset = c2.addr + i * BLK;
    assert_int_equal(te_inline_batch(a2, r, NR, 5000, 15000, NULL), MC_TE_COMPLETED);
    te_fill(exp, MiB, 6);
    assert_memory_equal(dst, exp, NR * BLK);
    mc_te_get_stats(a2, &s1);
    assert_int_equal(s1.inline_runs_handed_over, s0.inline_runs_handed_over + 1);
    assert_true(s1.connections_opened > s0.connections_opened); /* the lanes' at least */
    end_helper(&c2, 0);
    mc_te_destroy(a2);
    mc_te_destroy(a);
    free(dst);
    free(exp);
}

static bool shm_peer_lost(void *arg)
{
    mc_te_stats st;
    mc_te_get_stats(arg, &st);
    return st.shm_peers_lost > 0;
}

/* A same-host owner that dies: its memfd stays mapped here, but nothing may be read
 * from or written to the orphaned mapping as if the transfer had reached the peer. */
static void test_shm_owner_dies(void **state)
{
    (void)state;
    child c;
    spawn_helper(&c, 0, 4 * MiB, 6, 1);
    mc_te *a = mk_opts(3000, 0);
    char *dst = malloc(MiB);
    uint64_t l = (uint64_t)(uintptr_t)dst, rem = c.addr, n = MiB;
    assert_int_equal(mc_te_transfer_sync(a, c.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(dst, MiB, 6));
    mc_te_stats st;
    mc_te_get_stats(a, &st);
    assert_int_equal(st.shm_bytes, MiB);
    end_helper(&c, SIGKILL);
    /* the hang-up reaches our I/O thread */
    assert_true(te_wait_until(shm_peer_lost, a, 10000));
    assert_int_not_equal(
        mc_te_transfer_sync(a, c.seg, MC_TE_OP_WRITE, &l, &rem, &n, 1, NULL, NULL, 0), MC_OK);
    assert_int_not_equal(
        mc_te_transfer_sync(a, c.seg, MC_TE_OP_READ, &l, &rem, &n, 1, NULL, NULL, 0), MC_OK);
    mc_te_get_stats(a, &st);
    assert_int_equal(st.shm_bytes, MiB);
    mc_te_destroy(a);
    free(dst);
}

/* Expects the server to close the connection (EOF) within 3 s. */
static void expect_closed(int fd)
{
    char b[256];
    uint64_t deadline = mc_deadline_ms(3000);
    for (;;) {
        assert_int_equal(mc_sock_wait(fd, POLLIN, deadline), 1);
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k <= 0)
            break;
    }
    close(fd);
}

static int connect_port(int port)
{
    int fd = mc_sock_connect_tcp("127.0.0.1", (uint16_t)port, 3000);
    assert_true(fd >= 0);
    return fd;
}

/* Sends request q (its header, then n bytes of body) on a raw data connection. */
static void send_req(int fd, mc__te_req q, const void *body, size_t n, uint64_t dl)
{
    uint8_t h[MC_TE_REQ_SIZE];
    mc__te_req_encode(&q, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, dl), 0);
    if (n)
        assert_int_equal(mc_sock_send_all(fd, body, n, dl), 0);
}

/* Reads the reply to request id (op, len) on a raw data connection; its status. */
static int reply_status(int fd, uint64_t id, int op, uint64_t len, uint64_t dl)
{
    uint8_t rep[MC_TE_REP_SIZE];
    assert_int_equal(mc_sock_recv_all(fd, rep, sizeof rep, dl), 0);
    mc__te_rep r;
    assert_int_equal(mc__te_rep_decode(rep, id, op, len, &r), 0);
    return r.status;
}

/* NOTIFY headers that claim a body and send none hold its first 4 KiB of the engine's
 * budget for bodies being received, not the length they claim (before: 10 idle headers
 * of 100 KiB took a 1 MiB budget whole and every real notification was refused -ENOSPC
 * while they stayed); a body that does come grows its buffer as it does, and one that
 * grows past the budget is drained and answered -ENOSPC, the connection going on. */
static void test_idle_notify_headers_hold_no_budget(void **state)
{
    (void)state;
    mc_te_opts o = {.transfer_timeout_ms = 5000, .force_tcp = 1,
                    .max_pending_bytes = 1u << 20};
    mc_te *a = mk(5000), *b;
    assert_int_equal(mc_te_create(&o, &b), MC_OK);
    assert_int_equal(mc_te_initialize(b, "127.0.0.1", "P2PHANDSHAKE", "tcp", ""), MC_OK);
    int dport = mc_te_get_data_port(b);
    uint64_t dl = mc_deadline_ms(3000);
    enum { IDLE = 16 };
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++) { /* 16 headers of 100 KiB each: 1.6 MiB claimed */
        idle[i] = connect_port(dport);
        send_req(idle[i], (mc__te_req){.op = MC_TE_WOP_NOTIFY, .id = 1, .len = 100u << 10},
                 NULL, 0, dl);
    }
    /* a real notification of 512 KiB still fits (16 x 4 KiB held) and arrives */
    const char *seg = mc_te_segment_name(b);
    size_t mlen = 512u << 10;
    char *msg = malloc(mlen);
    memset(msg, 'm', mlen);
    assert_int_equal(mc_te_send_notify(a, seg, "n", msg, mlen), MC_OK);
    mc_te_notify *v = NULL;
    size_t cnt = 0;
    for (uint64_t end = mc_deadline_ms(3000); !cnt && mc_now_ms() < end;) {
        assert_int_equal(mc_te_get_notifies(b, &v, &cnt), MC_OK);
        if (!cnt)
            usleep(1000); /* polling a queue for a condition, bounded by end */
    }
    assert_int_equal(cnt, 1);
    assert_int_equal(v[0].msg_len, mlen);
    assert_memory_equal(v[0].msg, msg, mlen);
    mc_te_notifies_free(v, cnt);
    /* a body of almost 1 MiB that does come grows past the budget (16 x 4 KiB held):
     * drained and refused, and the connection goes on (a PING after it is answered) */
    size_t body = (1u << 20) - 1024;
    uint8_t *junk = calloc(1, body);
    int fd = connect_port(dport);
    send_req(fd, (mc__te_req){.op = MC_TE_WOP_NOTIFY, .id = 3, .len = body}, junk, body, dl);
    assert_int_equal(reply_status(fd, 3, MC_TE_WOP_NOTIFY, 0, dl), -ENOSPC);
    send_req(fd, (mc__te_req){.op = MC_TE_WOP_PING, .id = 4}, NULL, 0, dl);
    assert_int_equal(reply_status(fd, 4, MC_TE_WOP_PING, 0, dl), 0);
    close(fd);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    free(junk);
    free(msg);
    mc_te_destroy(a);
    mc_te_destroy(b);
}

static void test_garbage_ports(void **state)
{
    (void)state;
    mc_te *a = mk(5000), *b = mk(5000);
    char *mem = calloc(1, MiB);
    assert_int_equal(mc_te_register_memory(b, mem, MiB, NULL), MC_OK);
    int dport = mc_te_get_data_port(b), hport = mc_te_get_rpc_port(b);
    uint64_t dl = mc_deadline_ms(3000);

    /* data port: junk header -> closed */
    int fd = connect_port(dport);
    uint8_t junk[64];
    memset(junk, 0xff, sizeof junk);
    assert_int_equal(mc_sock_send_all(fd, junk, sizeof junk, dl), 0);
    expect_closed(fd);
    /* data port: a well-formed WRITE to an unregistered address -> -EFAULT, and the same
     * connection still answers a PING and a refused READ (with its zero payload) */
    fd = connect_port(dport);
    uint8_t h[MC_TE_REQ_SIZE], payload[100];
    memset(payload, 7, sizeof payload);
    send_req(fd, (mc__te_req){.op = MC_TE_WOP_WRITE, .id = 5, .addr = 4096,
                              .len = sizeof payload}, payload, sizeof payload, dl);
    assert_int_equal(reply_status(fd, 5, MC_TE_WOP_WRITE, 100, dl), -EFAULT);
    send_req(fd, (mc__te_req){.op = MC_TE_WOP_PING, .id = 6}, NULL, 0, dl);
    assert_int_equal(reply_status(fd, 6, MC_TE_WOP_PING, 0, dl), 0);
    mc__te_rep r;
    mc__te_req q = (mc__te_req){.op = MC_TE_WOP_READ, .id = 7,
                     .addr = (uint64_t)(uintptr_t)mem + MiB - 8, .len = 16};
    mc__te_req_encode(&q, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, dl), 0);
    uint8_t back[MC_TE_REP_SIZE + 16];
    assert_int_equal(mc_sock_recv_all(fd, back, sizeof back, dl), 0);
    assert_int_equal(mc__te_rep_decode(back, 7, MC_TE_WOP_READ, 16, &r), 0);
    assert_int_equal(r.status, -EFAULT);
    /* an oversized length is unparseable: closed */
    q = (mc__te_req){.op = MC_TE_WOP_WRITE, .id = 8, .addr = 4096, .len = UINT64_MAX};
    mc__te_req_encode(&q, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, dl), 0);
    expect_closed(fd);
    /* half a header, then the peer goes away */
    fd = connect_port(dport);
    assert_int_equal(mc_sock_send_all(fd, h, 10, dl), 0);
    close(fd);

    /* handshake port: zero length, oversized length -> closed without an answer */
    uint8_t f[MC_TE_HS_PREFIX + 8];
    fd = connect_port(hport);
    mc_put_le64(f, 0);
    assert_int_equal(mc_sock_send_all(fd, f, 9, dl), 0);
    expect_closed(fd);
    fd = connect_port(hport);
    mc_put_le64(f, 1ull << 40);
    assert_int_equal(mc_sock_send_all(fd, f, 9, dl), 0);
    expect_closed(fd);
    /* unknown type: an error answer of the same type, then closed */
    fd = connect_port(hport);
    mc__te_hs_encode_prefix(f, 0, 2);
    memcpy(f + 9, "{}", 2);
    assert_int_equal(mc_sock_send_all(fd, f, 11, dl), 0);
    uint8_t pre[MC_TE_HS_PREFIX];
    assert_int_equal(mc_sock_recv_all(fd, pre, sizeof pre, dl), 0);
    assert_int_equal(pre[8], 0);
    uint64_t alen = mc_get_le64(pre) - 1;
    assert_true(alen > 0 && alen < 256);
    char ans[256];
    assert_int_equal(mc_sock_recv_all(fd, ans, alen, dl), 0);
    ans[alen] = '\0';
    assert_non_null(strstr(ans, "error"));
    expect_closed(fd);
    /* malformed Notify JSON: an error answer, the connection stays: then a Probe */
    fd = connect_port(hport);
    mc__te_hs_encode_prefix(f, MC_TE_HS_NOTIFY, 3);
    memcpy(f + 9, "{{{", 3);
    assert_int_equal(mc_sock_send_all(fd, f, 12, dl), 0);
    assert_int_equal(mc_sock_recv_all(fd, pre, sizeof pre, dl), 0);
    alen = mc_get_le64(pre) - 1;
    assert_true(alen < 256);
    assert_int_equal(mc_sock_recv_all(fd, ans, alen, dl), 0);
    mc__te_hs_encode_prefix(f, MC_TE_HS_PROBE, 2);
    memcpy(f + 9, "{}", 2);
    assert_int_equal(mc_sock_send_all(fd, f, 11, dl), 0);
    assert_int_equal(mc_sock_recv_all(fd, pre, sizeof pre, dl), 0);
    assert_int_equal(pre[8], MC_TE_HS_PROBE);
    close(fd);
    /* random bytes */
    fd = connect_port(hport);
    te_fill(junk, sizeof junk, 77);
    mc_sock_send_all(fd, junk, sizeof junk, dl);
    expect_closed(fd);

    /* the server is fine: a good transfer and a probe */
    char buf[4096];
    te_fill(buf, sizeof buf, 8);
    uint64_t l = (uint64_t)(uintptr_t)buf, rem = (uint64_t)(uintptr_t)mem, n = sizeof buf;
    assert_int_equal(mc_te_transfer_sync(a, mc_te_segment_name(b), MC_TE_OP_WRITE, &l, &rem, &n,
                                         1, NULL, NULL, 0),
                     MC_OK);
    assert_true(te_check(mem, sizeof buf, 8));
    assert_int_equal(mc_te_send_probe(a, mc_te_segment_name(b)), MC_OK);
    mc_te_destroy(a);
    mc_te_destroy(b);
    free(mem);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* SIGPIPE must never be needed: leave it fatal */
    helper_path = argc > 1 ? argv[1] : getenv("TE_PEER_HELPER");
    if (!helper_path) {
        fprintf(stderr, "usage: %s PATH_TO_te_peer_helper\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_killed_mid_transfer),
        cmocka_unit_test(test_frozen_peer_times_out),
        cmocka_unit_test(test_restarted_peer),
        cmocka_unit_test(test_inline_frozen_and_restarted_peer),
        cmocka_unit_test(test_shm_owner_dies),
        cmocka_unit_test(test_garbage_ports),
        cmocka_unit_test(test_idle_notify_headers_hold_no_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
