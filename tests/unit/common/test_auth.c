/* test_auth.c: the cluster secret and its proofs (src/common/auth.c): RFC 4231
 * HMAC-SHA-256 vectors through our wrapper, the token file's checks, the handshake in
 * memory and over a real socketpair (success, wrong secret, replayed messages, wrong
 * port, mixed cluster, deadline), HTTP signatures and the replay cache. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/auth.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"

static void from_hex(const char *h, uint8_t *out)
{
    for (size_t i = 0; h[2 * i]; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static void secret_of(mc_auth_secret *s, const void *key, size_t n)
{
    memset(s, 0, sizeof *s);
    memcpy(s->key, key, n);
    s->len = n;
}

static void secret_str(mc_auth_secret *s, const char *text)
{
    assert_int_equal(mc_auth_secret_set(s, text, strlen(text), NULL, 0), 0);
}

/* ---- RFC 4231 ---- */

static void check_vector(const uint8_t *key, size_t klen, const void *data, size_t dlen,
                         const char *want_hex)
{
    mc_auth_secret s;
    secret_of(&s, key, klen);
    uint8_t mac[32], want[32];
    from_hex(want_hex, want);
    /* split the data in two parts: the wrapper concatenates */
    size_t half = dlen / 2;
    const void *parts[] = {data, (const uint8_t *)data + half};
    const size_t lens[] = {half, dlen - half};
    assert_int_equal(mc_auth_hmac(&s, parts, lens, 2, mac), 0);
    assert_memory_equal(mac, want, 32);
}

static void test_rfc4231(void **state)
{
    (void)state;
    uint8_t k[131], d[152];
    memset(k, 0x0b, 20);
    check_vector(k, 20, "Hi There", 8,
                 "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    check_vector((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28,
                 "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(k, 0xaa, 20);
    memset(d, 0xdd, 50);
    check_vector(k, 20, d, 50,
                 "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    for (int i = 0; i < 25; i++)
        k[i] = (uint8_t)(i + 1);
    memset(d, 0xcd, 50);
    check_vector(k, 25, d, 50,
                 "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    memset(k, 0xaa, 131);
    const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_vector(k, 131, t6, strlen(t6),
                 "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const char *t7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the "
                     "HMAC algorithm.";
    check_vector(k, 131, t7, strlen(t7),
                 "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

static void test_equal_and_no_secret(void **state)
{
    (void)state;
    uint8_t a[32] = {1, 2, 3}, b[32] = {1, 2, 3};
    assert_true(mc_auth_equal(a, b, 32));
    b[31] = 1;
    assert_false(mc_auth_equal(a, b, 32));
    mc_auth_secret none = {0};
    uint8_t mac[32];
    const void *p[] = {"x"};
    const size_t l[] = {1};
    assert_int_equal(mc_auth_hmac(&none, p, l, 1, mac), -EINVAL);
    assert_false(mc_auth_enabled(&none));
    assert_false(mc_auth_enabled(NULL));
}

/* Every comparison of a mac in auth.c goes through the constant-time mc_auth_equal
 * (CRYPTO_memcmp): no memcmp on a line that names a mac. */
static void test_constant_time_compare_used(void **state)
{
    (void)state;
    FILE *f = fopen(MC_AUTH_SOURCE, "r");
    assert_non_null(f);
    char line[512];
    int equal_uses = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "memcmp(") && strstr(line, "mac") && !strstr(line, "\"mac\""))
            fail_msg("a mac compared with memcmp: %s", line);
        if (strstr(line, "mc_auth_equal(want"))
            equal_uses++;
        if (strstr(line, "return CRYPTO_memcmp("))
            equal_uses++;
    }
    fclose(f);
    assert_true(equal_uses >= 4); /* client, server, HTTP checks and the primitive */
}

/* ---- the token file ---- */

static char tmpdir[64];

static char *write_token(const char *name, const char *content, mode_t mode)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

static void test_load(void **state)
{
    (void)state;
    mc_auth_secret s;
    char err[512];
    const char *tok = "0123456789abcdef-cluster-secret";
    char *p = write_token("ok", "0123456789abcdef-cluster-secret\n", 0600);
    assert_int_equal(mc_auth_load(p, &s, err, sizeof err), 0);
    assert_int_equal(s.len, strlen(tok)); /* the trailing newline is stripped */
    assert_memory_equal(s.key, tok, s.len);

    p = write_token("crlf", "0123456789abcdef-cluster-secret\r\n", 0400);
    assert_int_equal(mc_auth_load(p, &s, err, sizeof err), 0);
    assert_int_equal(s.len, strlen(tok));

    p = write_token("open", "0123456789abcdef-cluster-secret\n", 0644);
    assert_int_equal(mc_auth_load(p, &s, err, sizeof err), -EPERM);
    assert_non_null(strstr(err, "too open"));
    assert_non_null(strstr(err, "chmod 600"));
    assert_int_equal(s.len, 0);

    p = write_token("group", "0123456789abcdef-cluster-secret\n", 0640);
    assert_int_equal(mc_auth_load(p, &s, err, sizeof err), -EPERM);

    p = write_token("short", "short\n", 0600);
    assert_int_equal(mc_auth_load(p, &s, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "at least 16"));

    char big[MC_AUTH_SECRET_MAX + 10];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    p = write_token("long", big, 0600);
    assert_int_equal(mc_auth_load(p, &s, err, sizeof err), -EINVAL);

    char link[160];
    snprintf(link, sizeof link, "%s/link", tmpdir);
    unlink(link);
    char target[160];
    snprintf(target, sizeof target, "%s/ok", tmpdir);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(mc_auth_load(link, &s, err, sizeof err), -ELOOP);
    assert_non_null(strstr(err, "symbolic link"));

    assert_int_equal(mc_auth_load(tmpdir, &s, err, sizeof err), -EINVAL); /* a directory */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing", tmpdir);
    assert_int_equal(mc_auth_load(missing, &s, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, missing));

    /* from the environment; none configured = open */
    unsetenv(MC_AUTH_ENV);
    assert_int_equal(mc_auth_load(NULL, &s, err, sizeof err), 0);
    assert_false(mc_auth_enabled(&s));
    setenv(MC_AUTH_ENV, target, 1);
    assert_int_equal(mc_auth_load("", &s, err, sizeof err), 0);
    assert_int_equal(s.len, strlen(tok));
    setenv(MC_AUTH_ENV, missing, 1);
    assert_int_equal(mc_auth_load(NULL, &s, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, MC_AUTH_ENV));
    unsetenv(MC_AUTH_ENV);
    mc_auth_secret_wipe(&s);
    assert_int_equal(s.len, 0);
}

/* ---- the handshake in memory ---- */

typedef struct run_out {
    int client_rc, server_rc;
} run_out;

/* Runs one handshake between a client holding cs and a server holding ss. */
static run_out handshake(const mc_auth_secret *cs, const char *clabel,
                         const mc_auth_secret *ss, const char *slabel)
{
    mc_auth_hs c, s;
    assert_int_equal(mc_auth_hs_init(&c, cs, clabel), 0);
    assert_int_equal(mc_auth_hs_init(&s, ss, slabel), 0);
    uint8_t m1[MC_AUTH_FRAME_MAX], m2[MC_AUTH_FRAME_MAX], m3[MC_AUTH_FRAME_MAX],
        m4[MC_AUTH_FRAME_MAX];
    size_t l1, l2, l3, l4;
    run_out r = {0, 0};
    assert_int_equal(mc_auth_client_hello(&c, m1, sizeof m1, &l1), 0);
    r.server_rc = mc_auth_server_challenge(&s, m1, l1, m2, sizeof m2, &l2);
    assert_true(l2 > 0);
    r.client_rc = mc_auth_client_respond(&c, m2, l2, m3, sizeof m3, &l3);
    if (r.server_rc || r.client_rc) {
        if (!r.server_rc) /* the client told the server why */
            r.server_rc = mc_auth_server_verify(&s, m3, l3, m4, sizeof m4, &l4);
        return r;
    }
    r.server_rc = mc_auth_server_verify(&s, m3, l3, m4, sizeof m4, &l4);
    assert_true(l4 > 0);
    r.client_rc = mc_auth_client_finish(&c, m4, l4);
    return r;
}

static void test_handshake_ok_and_wrong_secret(void **state)
{
    (void)state;
    mc_auth_secret a, b;
    secret_str(&a, "the-cluster-secret-A-0123456789");
    secret_str(&b, "the-cluster-secret-B-0123456789");
    run_out r = handshake(&a, "master-rpc", &a, "master-rpc");
    assert_int_equal(r.client_rc, MC_AUTH_OK);
    assert_int_equal(r.server_rc, MC_AUTH_OK);
    /* another secret: the client sees the server's proof fail and tells the server */
    r = handshake(&a, "master-rpc", &b, "master-rpc");
    assert_int_equal(r.client_rc, -MC_AUTH_BAD_SERVER_MAC);
    assert_int_equal(r.server_rc, -MC_AUTH_BAD_SERVER_MAC);
    assert_non_null(strstr(mc_auth_error_text(r.client_rc, true), "another secret"));
    /* another port */
    r = handshake(&a, "te-data", &a, "master-rpc");
    assert_int_equal(r.server_rc, -MC_AUTH_WRONG_PORT);
    assert_int_equal(r.client_rc, -MC_AUTH_WRONG_PORT);
}

/* A client that does not check the server (an attacker) with a wrong secret: the server
 * refuses its proof and answers RESULT bad-client-mac. */
static void test_handshake_server_refuses_wrong_proof(void **state)
{
    (void)state;
    mc_auth_secret a, b;
    secret_str(&a, "the-cluster-secret-A-0123456789");
    secret_str(&b, "the-cluster-secret-B-0123456789");
    mc_auth_hs c, s;
    mc_auth_hs_init(&c, &b, "te-data");
    mc_auth_hs_init(&s, &a, "te-data");
    uint8_t m[4][MC_AUTH_FRAME_MAX];
    size_t l[4];
    assert_int_equal(mc_auth_client_hello(&c, m[0], MC_AUTH_FRAME_MAX, &l[0]), 0);
    assert_int_equal(mc_auth_server_challenge(&s, m[0], l[0], m[1], MC_AUTH_FRAME_MAX, &l[1]),
                     0);
    mc_auth_frame f;
    assert_int_equal(mc_auth_frame_parse(m[1], l[1], &f), (int)l[1]);
    memcpy(c.server_nonce, f.nonce, MC_AUTH_NONCE_LEN);
    /* the forged response: the right format, a mac under secret b */
    uint8_t mac[32];
    static const uint8_t zero = 0;
    const char *role = "mooncake-auth-v1 client";
    const void *parts[] = {role, &zero, "te-data", &zero, c.client_nonce, c.server_nonce};
    const size_t lens[] = {strlen(role), 1, 7, 1, 32, 32};
    assert_int_equal(mc_auth_hmac(&b, parts, lens, 6, mac), 0);
    uint8_t resp[MC_AUTH_HEADER + 32] = {'M', 'C', 'A', 'U', 1, MC_AUTH_RESPONSE, 0, 32};
    memcpy(resp + MC_AUTH_HEADER, mac, 32);
    assert_int_equal(mc_auth_server_verify(&s, resp, sizeof resp, m[3], MC_AUTH_FRAME_MAX,
                                           &l[3]),
                     -MC_AUTH_BAD_CLIENT_MAC);
    assert_int_equal(mc_auth_frame_parse(m[3], l[3], &f), (int)l[3]);
    assert_int_equal(f.type, MC_AUTH_RESULT);
    assert_int_equal(f.code, MC_AUTH_BAD_CLIENT_MAC);
}

/* A recorded handshake replayed on a new connection fails on both sides: the server's
 * fresh nonce invalidates the client's old proof, the client's fresh nonce the server's. */
static void test_handshake_replay_refused(void **state)
{
    (void)state;
    mc_auth_secret a;
    secret_str(&a, "the-cluster-secret-A-0123456789");
    mc_auth_hs c, s;
    uint8_t m[4][MC_AUTH_FRAME_MAX];
    size_t l[4];
    mc_auth_hs_init(&c, &a, "master-rpc");
    mc_auth_hs_init(&s, &a, "master-rpc");
    mc_auth_client_hello(&c, m[0], MC_AUTH_FRAME_MAX, &l[0]);
    assert_int_equal(mc_auth_server_challenge(&s, m[0], l[0], m[1], MC_AUTH_FRAME_MAX, &l[1]),
                     0);
    assert_int_equal(mc_auth_client_respond(&c, m[1], l[1], m[2], MC_AUTH_FRAME_MAX, &l[2]),
                     0);
    assert_int_equal(mc_auth_server_verify(&s, m[2], l[2], m[3], MC_AUTH_FRAME_MAX, &l[3]), 0);

    /* the attacker replays HELLO and RESPONSE to a fresh server */
    mc_auth_hs s2;
    uint8_t o[MC_AUTH_FRAME_MAX];
    size_t ol;
    mc_auth_hs_init(&s2, &a, "master-rpc");
    assert_int_equal(mc_auth_server_challenge(&s2, m[0], l[0], o, sizeof o, &ol), 0);
    assert_int_equal(mc_auth_server_verify(&s2, m[2], l[2], o, sizeof o, &ol),
                     -MC_AUTH_BAD_CLIENT_MAC);

    /* a fake server replays the CHALLENGE to a fresh client */
    mc_auth_hs c2;
    mc_auth_hs_init(&c2, &a, "master-rpc");
    mc_auth_client_hello(&c2, o, sizeof o, &ol);
    assert_int_equal(mc_auth_client_respond(&c2, m[1], l[1], o, sizeof o, &ol),
                     -MC_AUTH_BAD_SERVER_MAC);
}

/* Mixed cluster: each side's message says which side lacks the secret. */
static void test_handshake_mixed_cluster(void **state)
{
    (void)state;
    mc_auth_secret a;
    secret_str(&a, "the-cluster-secret-A-0123456789");
    uint8_t o[MC_AUTH_FRAME_MAX];
    size_t ol;
    mc_auth_frame f;
    /* the server has a secret; the client speaks the RPC protocol at once */
    mc_auth_hs s;
    mc_auth_hs_init(&s, &a, "master-rpc");
    const uint8_t rpc[] = {0x4D, 0x43, 0x52, 0x50, 1, 0, 1, 0};
    assert_false(mc_auth_looks_like_frame(rpc, sizeof rpc));
    assert_int_equal(mc_auth_server_challenge(&s, rpc, sizeof rpc, o, sizeof o, &ol),
                     -MC_AUTH_CLIENT_NO_SECRET);
    assert_int_equal(mc_auth_frame_parse(o, ol, &f), (int)ol);
    assert_int_equal(f.code, MC_AUTH_CLIENT_NO_SECRET);
    assert_non_null(strstr(mc_auth_error_text(f.code, true), "this client has none"));
    assert_non_null(strstr(mc_auth_error_text(f.code, false), "no cluster secret"));

    /* the client has a secret; the server has none and sees a HELLO */
    mc_auth_hs c;
    mc_auth_hs_init(&c, &a, "master-rpc");
    uint8_t hello[MC_AUTH_FRAME_MAX];
    size_t hl;
    mc_auth_client_hello(&c, hello, sizeof hello, &hl);
    assert_true(mc_auth_looks_like_frame(hello, 1));
    assert_true(mc_auth_looks_like_frame(hello, hl));
    int n = mc_auth_result_frame(MC_AUTH_SERVER_NO_SECRET, o, sizeof o);
    assert_int_equal(n, MC_AUTH_HEADER + 1);
    assert_int_equal(mc_auth_client_respond(&c, o, (size_t)n, hello, sizeof hello, &hl),
                     -MC_AUTH_SERVER_NO_SECRET);
    assert_int_equal(hl, 0); /* a refusal is not answered */
    assert_non_null(strstr(mc_auth_error_text(MC_AUTH_SERVER_NO_SECRET, true),
                           "server has no cluster secret"));
}

static void test_frame_parser(void **state)
{
    (void)state;
    mc_auth_frame f;
    uint8_t b[MC_AUTH_FRAME_MAX] = {'M', 'C', 'A', 'U', 1, MC_AUTH_RESULT, 0, 1, 0};
    for (size_t i = 1; i < 9; i++)
        assert_int_equal(mc_auth_frame_parse(b, i, &f), 0); /* a valid prefix */
    assert_int_equal(mc_auth_frame_parse(b, 9, &f), 9);
    assert_int_equal(mc_auth_frame_parse((const uint8_t *)"X", 1, &f), -EBADMSG);
    b[4] = 2;
    assert_int_equal(mc_auth_frame_parse(b, 9, &f), -EPROTONOSUPPORT);
    b[4] = 1;
    b[5] = 9; /* unknown type */
    assert_int_equal(mc_auth_frame_parse(b, 9, &f), -EBADMSG);
    b[5] = MC_AUTH_RESULT;
    b[7] = 2; /* body length that does not fit the type */
    assert_int_equal(mc_auth_frame_parse(b, 10, &f), -EBADMSG);
    b[7] = 1;
    b[8] = MC_AUTH_TIMEOUT; /* a local-only code */
    assert_int_equal(mc_auth_frame_parse(b, 9, &f), -EBADMSG);
    /* a HELLO whose label length disagrees with the body length */
    uint8_t h[MC_AUTH_HEADER + 32 + 1 + 3] = {'M', 'C', 'A', 'U', 1, MC_AUTH_HELLO, 0, 36};
    h[MC_AUTH_HEADER + 32] = 4;
    memcpy(h + MC_AUTH_HEADER + 33, "abc", 3);
    assert_int_equal(mc_auth_frame_parse(h, sizeof h, &f), -EBADMSG);
    h[MC_AUTH_HEADER + 32] = 3;
    assert_int_equal(mc_auth_frame_parse(h, sizeof h, &f), (int)sizeof h);
    assert_int_equal(f.label_len, 3);
    h[MC_AUTH_HEADER + 34] = ' '; /* not printable without spaces */
    assert_int_equal(mc_auth_frame_parse(h, sizeof h, &f), -EBADMSG);
}

/* ---- over a socketpair ---- */

typedef struct side {
    int fd;
    const mc_auth_secret *secret;
    const char *label;
    int rc;
    char err[256];
    bool silent; /* server: never answer */
} side;

static void *server_thread(void *arg)
{
    side *s = arg;
    if (s->silent) {
        uint8_t b[64];
        (void)!read(s->fd, b, sizeof b);
        return NULL;
    }
    s->rc = mc_auth_server_fd(s->fd, s->secret, s->label, mc_deadline_ms(10000), s->err,
                              sizeof s->err);
    return NULL;
}

static void run_fd(const mc_auth_secret *cs, const mc_auth_secret *ss, bool silent,
                   uint64_t client_timeout_ms, side *c, side *s)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    *c = (side){.fd = sv[0], .secret = cs, .label = "te-handshake"};
    *s = (side){.fd = sv[1], .secret = ss, .label = "te-handshake", .silent = silent};
    pthread_t t;
    pthread_create(&t, NULL, server_thread, s);
    c->rc = mc_auth_client_fd(c->fd, cs, "te-handshake", mc_deadline_ms(client_timeout_ms),
                              c->err, sizeof c->err);
    if (silent)
        shutdown(sv[0], SHUT_RDWR);
    pthread_join(t, NULL);
    close(sv[0]);
    close(sv[1]);
}

static void test_fd_handshake(void **state)
{
    (void)state;
    mc_auth_secret a, b;
    secret_str(&a, "the-cluster-secret-A-0123456789");
    secret_str(&b, "the-cluster-secret-B-0123456789");
    side c, s;
    run_fd(&a, &a, false, 10000, &c, &s);
    assert_int_equal(c.rc, MC_AUTH_OK);
    assert_int_equal(s.rc, MC_AUTH_OK);
    run_fd(&a, &b, false, 10000, &c, &s);
    assert_int_equal(c.rc, -MC_AUTH_BAD_SERVER_MAC);
    assert_int_equal(s.rc, -MC_AUTH_BAD_SERVER_MAC);
    assert_non_null(strstr(s.err, "different secrets"));
    run_fd(&a, &a, true, 200, &c, &s); /* the server never answers: the deadline holds */
    assert_int_equal(c.rc, -MC_AUTH_TIMEOUT);
}

/* A client without a secret sends its protocol's first bytes: the server refuses at the
 * first byte with a RESULT the client can read. */
static void test_fd_client_without_secret(void **state)
{
    (void)state;
    mc_auth_secret a;
    secret_str(&a, "the-cluster-secret-A-0123456789");
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    const uint8_t rpc[8] = {0x4D, 0x43, 0x52, 0x50, 1, 0, 1, 0};
    assert_int_equal(write(sv[0], rpc, sizeof rpc), 8);
    char err[256];
    int rc = mc_auth_server_fd(sv[1], &a, "master-rpc", mc_deadline_ms(5000), err, sizeof err);
    assert_int_equal(rc, -MC_AUTH_CLIENT_NO_SECRET);
    assert_non_null(strstr(err, "no cluster secret"));
    uint8_t back[64];
    ssize_t n = read(sv[0], back, sizeof back);
    assert_int_equal(n, MC_AUTH_HEADER + 1);
    mc_auth_frame f;
    assert_int_equal(mc_auth_frame_parse(back, (size_t)n, &f), n);
    assert_int_equal(f.code, MC_AUTH_CLIENT_NO_SECRET);
    close(sv[0]);
    close(sv[1]);
}

/* ---- HTTP signatures ---- */

static void test_http_sign_parse_verify(void **state)
{
    (void)state;
    mc_auth_secret a, b;
    secret_str(&a, "the-cluster-secret-A-0123456789");
    secret_str(&b, "the-cluster-secret-B-0123456789");
    char hdr[MC_AUTH_HTTP_MAX_HEADER];
    const char *target = "/metadata?key=mooncake%2Fram%2Fx";
    assert_int_equal(mc_auth_http_sign(&a, "PUT", target, "body", 4, 1700000000123ull, hdr,
                                       sizeof hdr),
                     0);
    assert_true(strncmp(hdr, "MC-HMAC ts=1700000000123,nonce=", 31) == 0);
    mc_auth_http_cred cr;
    assert_int_equal(mc_auth_http_parse(hdr, strlen(hdr), &cr), 0);
    assert_int_equal(cr.ts_ms, 1700000000123ull);
    uint8_t bh[32], mac[32];
    mc_auth_sha256 *h = mc_auth_sha256_new();
    mc_auth_sha256_update(h, "bo", 2);
    mc_auth_sha256_update(h, "dy", 2);
    mc_auth_sha256_final(h, bh);
    assert_int_equal(mc_auth_http_mac(&a, "PUT", target, cr.ts, cr.nonce, bh, mac), 0);
    assert_true(mc_auth_equal(mac, cr.mac, 32));
    assert_int_equal(mc_auth_http_verify(&a, &cr, "PUT", target, bh), 0);
    assert_int_equal(mc_auth_http_verify(&b, &cr, "PUT", target, bh), -EACCES);
    /* another secret, method, target or body: another mac */
    mc_auth_http_mac(&b, "PUT", target, cr.ts, cr.nonce, bh, mac);
    assert_false(mc_auth_equal(mac, cr.mac, 32));
    mc_auth_http_mac(&a, "DELETE", target, cr.ts, cr.nonce, bh, mac);
    assert_false(mc_auth_equal(mac, cr.mac, 32));
    mc_auth_http_mac(&a, "PUT", "/metadata?key=other", cr.ts, cr.nonce, bh, mac);
    assert_false(mc_auth_equal(mac, cr.mac, 32));
    bh[0] ^= 1;
    mc_auth_http_mac(&a, "PUT", target, cr.ts, cr.nonce, bh, mac);
    assert_false(mc_auth_equal(mac, cr.mac, 32));

    /* a known value, so another implementation (python/mooncake/_auth.py) can agree */
    uint8_t empty[32];
    h = mc_auth_sha256_new();
    mc_auth_sha256_final(h, empty);
    char eh[65];
    mc_auth_hex(empty, 32, eh);
    assert_string_equal(eh, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_http_parse_rejects(void **state)
{
    (void)state;
    mc_auth_http_cred cr;
    const char *mac = "0000000000000000000000000000000000000000000000000000000000000000";
    char ok[300];
    snprintf(ok, sizeof ok, "MC-HMAC  mac=%s , nonce=0123456789abcdef0123456789abcdef,ts=5",
             mac);
    assert_int_equal(mc_auth_http_parse(ok, strlen(ok), &cr), 0);
    assert_int_equal(cr.ts_ms, 5);
    static const char *bad[] = {
        "MC-HMAC",
        "MC-HMAC ts=1",
        "MC-HMAC ts=01,nonce=0123456789abcdef0123456789abcdef,mac=%s",
        "MC-HMAC ts=1,ts=1,nonce=0123456789abcdef0123456789abcdef,mac=%s",
        "MC-HMAC ts=1,nonce=0123456789ABCDEF0123456789abcdef,mac=%s",
        "MC-HMAC ts=1,nonce=0123456789abcdef0123456789abcde,mac=%s",
        "MC-HMAC ts=1,nonce=0123456789abcdef0123456789abcdef,mac=%s0",
        "MC-HMAC ts=1,nonce=0123456789abcdef0123456789abcdef,mac=%s,x=1",
        "MC-HMAC ts=1,nonce=0123456789abcdef0123456789abcdef,mac=%s,",
        "MC-HMAC ts=12345678901234567,nonce=0123456789abcdef0123456789abcdef,mac=%s",
        "MC-HMAC ts=1;nonce=0123456789abcdef0123456789abcdef,mac=%s",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char v[400];
        snprintf(v, sizeof v, bad[i], mac);
        assert_int_equal(mc_auth_http_parse(v, strlen(v), &cr), -EBADMSG);
    }
    assert_int_equal(mc_auth_http_parse("Basic abc", 9, &cr), -ENOENT);
    assert_int_equal(mc_auth_http_parse("MC-HMACX ts=1", 13, &cr), -ENOENT);
}

static void test_http_target(void **state)
{
    (void)state;
    static const char *cases[][2] = {
        {"http://h:8080/metadata", "/metadata"},
        {"http://h:8080/metadata?a=1", "/metadata?a=1"},
        {"http://h:8080?key=x", "/?key=x"},
        {"http://h:8080", "/"},
        {"https://[::1]:80/p/q#frag", "/p/q"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *t = mc_auth_http_target(cases[i][0]);
        assert_string_equal(t, cases[i][1]);
        free(t);
    }
}

/* ---- the replay cache ---- */

static void test_replay_cache(void **state)
{
    (void)state;
    mc_auth_replay *r = mc_auth_replay_create(64);
    uint8_t n[16] = {1};
    assert_int_equal(mc_auth_replay_check(r, n, 2000, 1000), 0);
    assert_int_equal(mc_auth_replay_check(r, n, 2000, 1500), -EEXIST);
    /* once expired (its request would be stale anyway) the slot is reused */
    assert_int_equal(mc_auth_replay_check(r, n, 4000, 2500), 0);
    /* a full table refuses rather than forgets */
    for (int i = 0; i < 63; i++) {
        uint8_t m[16] = {0};
        m[0] = 2;
        m[1] = (uint8_t)i;
        assert_int_equal(mc_auth_replay_check(r, m, 4000, 2500), 0);
    }
    uint8_t x[16] = {9};
    assert_int_equal(mc_auth_replay_check(r, x, 4000, 2500), -ENOSPC);
    assert_int_equal(mc_auth_replay_check(r, x, 9000, 4500), 0);
    mc_auth_replay_destroy(r);
}

int main(void)
{
    mc_log_set_level(MC_LOG_OFF);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mc-test-auth-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc4231),
        cmocka_unit_test(test_equal_and_no_secret),
        cmocka_unit_test(test_constant_time_compare_used),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_handshake_ok_and_wrong_secret),
        cmocka_unit_test(test_handshake_server_refuses_wrong_proof),
        cmocka_unit_test(test_handshake_replay_refused),
        cmocka_unit_test(test_handshake_mixed_cluster),
        cmocka_unit_test(test_frame_parser),
        cmocka_unit_test(test_fd_handshake),
        cmocka_unit_test(test_fd_client_without_secret),
        cmocka_unit_test(test_http_sign_parse_verify),
        cmocka_unit_test(test_http_parse_rejects),
        cmocka_unit_test(test_http_target),
        cmocka_unit_test(test_replay_cache),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    (void)!system(cmd);
    return rc;
}
