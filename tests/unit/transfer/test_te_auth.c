/* test_te_auth.c: the cluster secret on the transfer engine's ports and the per-address
 * connection limit (issue 11, docs/security.md). Real engines on 127.0.0.1 in this
 * process (P2PHANDSHAKE), raw sockets as the attacker: without the secret, with another
 * one, replaying a recorded handshake, past the deadline, flooding from 127.0.0.2, and a
 * child process of another uid on the same-host socket. Every refusal is checked to
 * leave the registered memory untouched and to be counted in mc_te_stats. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/auth.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "net/sock.h"
#include "te_test_util.h"
#include "transfer/internal.h"
#include "transfer/wire.h"

#define KiB 1024u
#define WAIT_MS 10000

static mc_auth_secret S1, S2, NONE;

static mc_te *mk(const mc_auth_secret *auth, unsigned per_ip, uint64_t auth_timeout_ms)
{
    mc_te_opts o = {.transfer_timeout_ms = 10000, .io_threads = 1, .conns_per_peer = 1,
                    .auth = auth, .max_connections_per_ip = per_ip,
                    .auth_timeout_ms = auth_timeout_ms};
    mc_te *te;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(mc_te_initialize(te, "127.0.0.1", "P2PHANDSHAKE", "tcp", ""), MC_OK);
    return te;
}

static mc_te_stats stats(mc_te *te)
{
    mc_te_stats st;
    mc_te_get_stats(te, &st);
    return st;
}

static bool refused_at_least(void *arg)
{
    void **p = arg;
    return stats(p[0]).auth_refused >= (uint64_t)(uintptr_t)p[1];
}

/* The server side counts a refusal the client detected itself (a wrong server proof)
 * when it reads the client's RESULT: wait for it. */
static void wait_refused(mc_te *te, uint64_t n)
{
    void *arg[2] = {te, (void *)(uintptr_t)n};
    assert_true(te_wait_until(refused_at_least, arg, WAIT_MS));
}

static int xfer(mc_te *from, mc_te *to, int op, void *local, void *remote, size_t len)
{
    uint64_t l = (uint64_t)(uintptr_t)local, r = (uint64_t)(uintptr_t)remote, n = len;
    return mc_te_transfer_sync(from, mc_te_segment_name(to), op, &l, &r, &n, 1, NULL, NULL,
                               0);
}

static int connect_from(const char *src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (src) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &sa.sin_addr);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* Reads until EOF (or n bytes); returns the bytes read. */
static size_t read_to_eof(int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    uint64_t dl = mc_deadline_ms(WAIT_MS);
    while (got < n) {
        if (mc_sock_wait(fd, POLLIN, dl) < 0)
            break;
        ssize_t k = recv(fd, buf + got, n - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    return got;
}

/* The bytes are one RESULT frame with `code`. */
static void assert_result(const uint8_t *buf, size_t n, int code)
{
    mc_auth_frame f;
    assert_int_equal(mc_auth_frame_parse(buf, n, &f), (int)n);
    assert_int_equal(f.type, MC_AUTH_RESULT);
    assert_int_equal(f.code, code);
}

static void setup_secrets(void)
{
    assert_int_equal(mc_auth_secret_set(&S1, "the-first-cluster-secret", 24, NULL, 0), 0);
    assert_int_equal(mc_auth_secret_set(&S2, "another-cluster-secret!!", 24, NULL, 0), 0);
    memset(&NONE, 0, sizeof NONE);
}

/* Right secret on both sides: TCP and same-host transfers work, nothing refused. */
static void test_right_secret(void **state)
{
    (void)state;
    mc_te *a = mk(&S1, 0, 0), *b = mk(&S1, 0, 0);
    size_t len = 64 * KiB;
    char *mem = calloc(1, len), *src = malloc(len), *back = malloc(len);
    void *shared;
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    assert_int_equal(mc_te_alloc_shared(a, len, &shared), MC_OK);
    te_fill(src, len, 7);
    assert_int_equal(xfer(b, a, MC_TE_OP_WRITE, src, mem, len), MC_OK); /* TCP */
    assert_true(te_check(mem, len, 7));
    assert_int_equal(xfer(b, a, MC_TE_OP_WRITE, src, shared, len), MC_OK); /* same host */
    assert_true(te_check(shared, len, 7));
    assert_int_equal(xfer(b, a, MC_TE_OP_READ, back, mem, len), MC_OK);
    assert_true(te_check(back, len, 7));
    mc_te_stats sb = stats(b), sa = stats(a);
    assert_true(sb.tcp_bytes_sent >= len);
    assert_true(sb.shm_bytes >= len);
    assert_int_equal(sa.auth_refused, 0);
    assert_int_equal(sb.auth_failed, 0);
    mc_te_destroy(b);
    mc_te_destroy(a);
    free(mem);
    free(src);
    free(back);
}

/* Mixed or different secrets: the transfer fails, memory unchanged, both sides count. */
static void test_mixed_and_wrong(void **state)
{
    (void)state;
    const mc_auth_secret *pairs[][2] = {{&S1, &NONE}, {&NONE, &S1}, {&S1, &S2}};
    for (size_t i = 0; i < 3; i++) {
        mc_te *a = mk(pairs[i][0], 0, 0), *b = mk(pairs[i][1], 0, 0);
        size_t len = 4 * KiB;
        char *mem = calloc(1, len), *src = malloc(len);
        assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
        te_fill(src, len, 9);
        assert_int_not_equal(xfer(b, a, MC_TE_OP_WRITE, src, mem, len), MC_OK);
        for (size_t k = 0; k < len; k++)
            assert_int_equal(mem[k], 0);
        wait_refused(a, 1);
        assert_true(stats(b).auth_failed >= 1);
        mc_te_destroy(b);
        mc_te_destroy(a);
        free(mem);
        free(src);
    }
}

/* mc_te_submit_inline (tcp_inline.c): the caller's private connection authenticates
 * like the I/O threads' ones. Right secret on both sides: 64 x 1 KiB read inline (an
 * unauthenticated private connection would be refused by the data port, and the run
 * handed over), bytes right, nothing refused. With secrets that differ, or one side
 * without, the segment does not even open (the handshake port checks first), so the
 * inline path never sees such a peer; the data port's own refusals are tested above. */
static void test_inline_reads_with_secret(void **state)
{
    (void)state;
    mc_te *a = mk(&S1, 0, 0), *b = mk(&S1, 0, 0);
    size_t len = 64 * KiB;
    char *mem = malloc(len), *dst = malloc(len);
    te_fill(mem, len, 11);
    memset(dst, 0x5A, len);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(b, mc_te_segment_name(a), &seg), MC_OK);
    mc_te_request r[64];
    for (int k = 0; k < 64; k++)
        r[k] = (mc_te_request){.opcode = MC_TE_OP_READ, .source = dst + k * KiB,
                               .target_id = seg,
                               .target_offset = (uint64_t)(uintptr_t)mem + k * KiB,
                               .length = KiB};
    for (int round = 0; round < 2; round++) /* a new private connection, then the same */
        assert_int_equal(te_inline_batch(b, r, 64, 5000, WAIT_MS, NULL), MC_TE_COMPLETED);
    assert_true(te_check(dst, len, 11));
    mc_te_stats sb = stats(b);
    assert_int_equal(sb.inline_bytes_received, 2 * len);
    assert_int_equal(sb.inline_runs_handed_over, 0);
    assert_int_equal(sb.auth_failed, 0);
    assert_int_equal(stats(a).auth_refused, 0);
    mc_te_destroy(b);
    mc_te_destroy(a);
    free(mem);
    free(dst);
}

/* A raw client without the secret: its WRITE (header + payload) and READ on the data
 * port get RESULT client-no-secret, nothing is written or read. */
static void test_data_port_no_secret(void **state)
{
    (void)state;
    mc_te *a = mk(&S1, 0, 0);
    size_t len = 4 * KiB;
    char *mem = calloc(1, len);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    uint8_t *msg = malloc(MC_TE_REQ_SIZE + len);
    mc__te_req w = {.op = MC_TE_WOP_WRITE, .id = 1, .addr = (uintptr_t)mem, .len = len};
    mc__te_req_encode(&w, msg);
    memset(msg + MC_TE_REQ_SIZE, 0xAB, len);
    int fd = connect_from(NULL, mc_te_get_data_port(a));
    (void)send(fd, msg, MC_TE_REQ_SIZE + len, MSG_NOSIGNAL);
    uint8_t rep[64];
    size_t n = read_to_eof(fd, rep, sizeof rep);
    assert_result(rep, n, MC_AUTH_CLIENT_NO_SECRET);
    close(fd);
    mc__te_req r = {.op = MC_TE_WOP_READ, .id = 2, .addr = (uintptr_t)mem, .len = len};
    mc__te_req_encode(&r, msg);
    fd = connect_from(NULL, mc_te_get_data_port(a));
    (void)send(fd, msg, MC_TE_REQ_SIZE, MSG_NOSIGNAL);
    n = read_to_eof(fd, rep, sizeof rep);
    assert_result(rep, n, MC_AUTH_CLIENT_NO_SECRET);
    close(fd);
    for (size_t k = 0; k < len; k++)
        assert_int_equal(mem[k], 0);
    mc_te_stats st = stats(a);
    assert_int_equal(st.served_bytes, 0);
    assert_true(st.auth_refused >= 2);
    mc_te_destroy(a);
    free(mem);
    free(msg);
}

/* The server's side of a handshake over fd with secret s; returns the RESULT code and
 * copies the frames this client sent into rec (HELLO then RESPONSE) when rec != NULL. */
static int client_handshake(int fd, const mc_auth_secret *s, const char *label, uint8_t *rec,
                            size_t *rec_len)
{
    mc_auth_hs hs;
    assert_int_equal(mc_auth_hs_init(&hs, s, label), 0);
    uint8_t out[MC_AUTH_FRAME_MAX], in[MC_AUTH_FRAME_MAX];
    size_t olen, rl = 0;
    assert_int_equal(mc_auth_client_hello(&hs, out, sizeof out, &olen), 0);
    assert_int_equal(mc_sock_send_all(fd, out, olen, mc_deadline_ms(WAIT_MS)), 0);
    if (rec) {
        memcpy(rec, out, olen);
        rl = olen;
    }
    assert_int_equal(mc_sock_recv_all(fd, in, MC_AUTH_HEADER + 64, mc_deadline_ms(WAIT_MS)),
                     0);
    int rc = mc_auth_client_respond(&hs, in, MC_AUTH_HEADER + 64, out, sizeof out, &olen);
    if (rc != 0 && rc != -MC_AUTH_BAD_SERVER_MAC)
        return -rc;
    if (rc == -MC_AUTH_BAD_SERVER_MAC) { /* another secret: answer anyway, as an attacker */
        uint8_t mac[MC_AUTH_MAC_LEN] = {0};
        olen = MC_AUTH_HEADER + MC_AUTH_MAC_LEN;
        memcpy(out, "MCAU\x01\x03\x00\x20", MC_AUTH_HEADER);
        memcpy(out + MC_AUTH_HEADER, mac, sizeof mac);
    }
    assert_int_equal(mc_sock_send_all(fd, out, olen, mc_deadline_ms(WAIT_MS)), 0);
    if (rec) {
        memcpy(rec + rl, out, olen);
        *rec_len = rl + olen;
    }
    uint8_t res[MC_AUTH_HEADER + 1];
    assert_int_equal(read_to_eof(fd, res, sizeof res), sizeof res);
    mc_auth_frame f;
    assert_int_equal(mc_auth_frame_parse(res, sizeof res, &f), (int)sizeof res);
    assert_int_equal(f.type, MC_AUTH_RESULT);
    return f.code;
}

/* Wrong secret -> bad-client-mac; a recorded good handshake replayed -> bad-client-mac;
 * the right one -> accepted and the port's protocol follows. On all three ports. */
static void test_wrong_secret_and_replay(void **state)
{
    (void)state;
    mc_te *a = mk(&S1, 0, 0);
    struct {
        const char *label;
        int fd_kind; /* 0 data, 1 handshake, 2 shm */
    } ports[] = {{TE_AUTH_DATA, 0}, {TE_AUTH_HS, 1}, {TE_AUTH_SHM, 2}};
    for (size_t i = 0; i < 3; i++) {
        int fds[3];
        for (int k = 0; k < 3; k++) {
            if (ports[i].fd_kind == 0)
                fds[k] = connect_from(NULL, mc_te_get_data_port(a));
            else if (ports[i].fd_kind == 1)
                fds[k] = connect_from(NULL, mc_te_get_rpc_port(a));
            else
                fds[k] = mc_sock_connect_unix(a->shm_path, WAIT_MS);
            assert_true(fds[k] >= 0);
        }
        assert_int_equal(client_handshake(fds[0], &S2, ports[i].label, NULL, NULL),
                         MC_AUTH_BAD_CLIENT_MAC);
        uint8_t rec[2 * MC_AUTH_FRAME_MAX];
        size_t rl = 0;
        assert_int_equal(client_handshake(fds[1], &S1, ports[i].label, rec, &rl), MC_AUTH_OK);
        /* replay HELLO, then (whatever the new challenge) the recorded RESPONSE */
        size_t hello_len = rl - (MC_AUTH_HEADER + MC_AUTH_MAC_LEN);
        assert_int_equal(mc_sock_send_all(fds[2], rec, hello_len, mc_deadline_ms(WAIT_MS)), 0);
        uint8_t ch[MC_AUTH_HEADER + 64];
        assert_int_equal(mc_sock_recv_all(fds[2], ch, sizeof ch, mc_deadline_ms(WAIT_MS)), 0);
        assert_int_equal(mc_sock_send_all(fds[2], rec + hello_len, rl - hello_len,
                                          mc_deadline_ms(WAIT_MS)), 0);
        uint8_t res[MC_AUTH_HEADER + 1];
        assert_int_equal(read_to_eof(fds[2], res, sizeof res), sizeof res);
        assert_result(res, sizeof res, MC_AUTH_BAD_CLIENT_MAC);
        if (ports[i].fd_kind == 1) { /* authenticated: a Probe is answered */
            uint8_t pre[MC_TE_HS_PREFIX + 2];
            mc__te_hs_encode_prefix(pre, MC_TE_HS_PROBE, 2);
            memcpy(pre + MC_TE_HS_PREFIX, "{}", 2);
            assert_int_equal(mc_sock_send_all(fds[1], pre, sizeof pre, mc_deadline_ms(WAIT_MS)),
                             0);
            uint8_t rp[MC_TE_HS_PREFIX + 2];
            assert_int_equal(mc_sock_recv_all(fds[1], rp, sizeof rp, mc_deadline_ms(WAIT_MS)),
                             0);
            assert_memory_equal(rp + MC_TE_HS_PREFIX, "{}", 2);
        }
        for (int k = 0; k < 3; k++)
            close(fds[k]);
    }
    wait_refused(a, 6);
    mc_te_destroy(a);
}

/* An engine without a secret answers a handshake with server-no-secret, on each port;
 * an engine with one answers a client without it (the upstream handshake frame) with
 * client-no-secret. */
static void test_open_server_and_no_secret_client(void **state)
{
    (void)state;
    mc_te *open_te = mk(&NONE, 0, 0), *a = mk(&S1, 0, 0);
    mc_auth_hs hs;
    uint8_t out[MC_AUTH_FRAME_MAX], res[64];
    size_t olen;
    for (int kind = 0; kind < 3; kind++) {
        const char *label = kind == 0 ? TE_AUTH_DATA : kind == 1 ? TE_AUTH_HS : TE_AUTH_SHM;
        int fd = kind == 0   ? connect_from(NULL, mc_te_get_data_port(open_te))
                 : kind == 1 ? connect_from(NULL, mc_te_get_rpc_port(open_te))
                             : mc_sock_connect_unix(open_te->shm_path, WAIT_MS);
        assert_true(fd >= 0);
        assert_int_equal(mc_auth_hs_init(&hs, &S1, label), 0);
        assert_int_equal(mc_auth_client_hello(&hs, out, sizeof out, &olen), 0);
        assert_int_equal(mc_sock_send_all(fd, out, olen, mc_deadline_ms(WAIT_MS)), 0);
        size_t n = read_to_eof(fd, res, sizeof res);
        assert_result(res, n, MC_AUTH_SERVER_NO_SECRET);
        close(fd);
    }
    assert_int_equal(stats(open_te).auth_refused, 3);
    /* the upstream handshake frame to an engine with a secret */
    int fd = connect_from(NULL, mc_te_get_rpc_port(a));
    uint8_t pre[MC_TE_HS_PREFIX + 2];
    mc__te_hs_encode_prefix(pre, MC_TE_HS_METADATA, 2);
    memcpy(pre + MC_TE_HS_PREFIX, "{}", 2);
    (void)send(fd, pre, sizeof pre, MSG_NOSIGNAL);
    size_t n = read_to_eof(fd, res, sizeof res);
    assert_result(res, n, MC_AUTH_CLIENT_NO_SECRET);
    close(fd);
    mc_te_destroy(a);
    mc_te_destroy(open_te);
}

/* A connection that never authenticates is closed at the deadline (a trickle of bytes
 * does not extend it). */
static void test_auth_deadline(void **state)
{
    (void)state;
    mc_te *a = mk(&S1, 0, 300);
    int fd = connect_from(NULL, mc_te_get_data_port(a));
    (void)send(fd, "MC", 2, MSG_NOSIGNAL); /* a valid prefix, then nothing */
    uint8_t buf[16];
    uint64_t t0 = mc_now_ms();
    assert_int_equal(read_to_eof(fd, buf, sizeof buf), 0);
    assert_true(mc_now_ms() - t0 < WAIT_MS);
    wait_refused(a, 1);
    close(fd);
    mc_te_destroy(a);
}

static bool closed_by_peer(int fd)
{
    uint8_t b;
    if (mc_sock_wait(fd, POLLIN, mc_deadline_ms(WAIT_MS)) < 0)
        return false;
    return recv(fd, &b, 1, MSG_DONTWAIT) == 0;
}

/* A flood from 127.0.0.2 is refused past max_connections_per_ip; an engine on
 * 127.0.0.1 still transfers; the refusals are counted. */
static void test_per_ip_limit(void **state)
{
    (void)state;
    mc_te *a = mk(&S1, 4, 0), *b = mk(&S1, 0, 0);
    enum { FLOOD = 12 };
    int fds[FLOOD];
    for (int i = 0; i < FLOOD; i++)
        fds[i] = connect_from("127.0.0.2", mc_te_get_data_port(a));
    int closed = 0;
    for (int i = 4; i < FLOOD; i++) /* accepted in order: the first 4 hold the slots */
        closed += closed_by_peer(fds[i]);
    assert_int_equal(closed, FLOOD - 4);
    assert_int_equal(stats(a).per_ip_refused, FLOOD - 4);
    int hfds[FLOOD]; /* the handshake port has the same cap (at most 64) */
    for (int i = 0; i < FLOOD; i++)
        hfds[i] = connect_from("127.0.0.2", mc_te_get_rpc_port(a));
    closed = 0;
    for (int i = 4; i < FLOOD; i++)
        closed += closed_by_peer(hfds[i]);
    assert_int_equal(closed, FLOOD - 4);
    assert_int_equal(stats(a).per_ip_refused, 2 * (FLOOD - 4));
    size_t len = 16 * KiB;
    char *mem = calloc(1, len), *src = malloc(len);
    assert_int_equal(mc_te_register_memory(a, mem, len, NULL), MC_OK);
    te_fill(src, len, 3);
    assert_int_equal(xfer(b, a, MC_TE_OP_WRITE, src, mem, len), MC_OK);
    assert_true(te_check(mem, len, 3));
    for (int i = 0; i < FLOOD; i++) {
        close(fds[i]);
        close(hfds[i]);
    }
    mc_te_destroy(b);
    mc_te_destroy(a);
    free(mem);
    free(src);
}

/* SO_PEERCRED: a process of another uid holding the secret is refused on the same-host
 * socket before a byte is read (this test runs as root: the child drops to nobody). */
static void test_peercred(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        skip();
        return;
    }
    mc_te *a = mk(&S1, 0, 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(10);
        int fd = mc_sock_connect_unix(a->shm_path, WAIT_MS);
        if (fd < 0)
            _exit(11);
        int rc = mc_auth_client_fd(fd, &S1, TE_AUTH_SHM, mc_deadline_ms(WAIT_MS), NULL, 0);
        _exit(rc == MC_AUTH_OK ? 0 : 1); /* 1: refused */
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_int_equal(stats(a).peercred_refused, 1);
    /* our own uid with the secret is served */
    int fd = mc_sock_connect_unix(a->shm_path, WAIT_MS);
    assert_int_equal(mc_auth_client_fd(fd, &S1, TE_AUTH_SHM, mc_deadline_ms(WAIT_MS), NULL, 0),
                     MC_AUTH_OK);
    close(fd);
    mc_te_destroy(a);
}

/* A bad token file fails mc_te_create; MC_AUTH_TOKEN_FILE is loaded when opts.auth is
 * NULL; a bad gid list is refused. */
static void test_create_options(void **state)
{
    (void)state;
    char dir[] = "/tmp/te-auth-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/token", dir);
    FILE *f = fopen(path, "w");
    fputs("a-secret-of-enough-bytes\n", f);
    fclose(f);
    assert_int_equal(chmod(path, 0644), 0);
    setenv("MC_AUTH_TOKEN_FILE", path, 1);
    mc_te *te = NULL;
    assert_int_equal(mc_te_create(NULL, &te), MC_INVALID_PARAMS); /* too open */
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(mc_te_create(NULL, &te), MC_OK);
    assert_non_null(te->auth);
    mc_te_destroy(te);
    mc_te_opts o = {.auth = &NONE}; /* explicit: no secret, whatever the environment says */
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_null(te->auth);
    mc_te_destroy(te);
    unsetenv("MC_AUTH_TOKEN_FILE");
    o = (mc_te_opts){.auth = &NONE, .shm_allowed_gids = "100, 200"};
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(te->n_shm_gids, 2);
    assert_int_equal(te->shm_gids[1], 200);
    mc_te_destroy(te);
    o.shm_allowed_gids = "100,staff";
    assert_int_equal(mc_te_create(&o, &te), MC_INVALID_PARAMS);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    unsetenv("MC_AUTH_TOKEN_FILE");
    setup_secrets();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_right_secret),
        cmocka_unit_test(test_mixed_and_wrong),
        cmocka_unit_test(test_inline_reads_with_secret),
        cmocka_unit_test(test_data_port_no_secret),
        cmocka_unit_test(test_wrong_secret_and_replay),
        cmocka_unit_test(test_open_server_and_no_secret_client),
        cmocka_unit_test(test_auth_deadline),
        cmocka_unit_test(test_per_ip_limit),
        cmocka_unit_test(test_peercred),
        cmocka_unit_test(test_create_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
