/* The master client library against a real master service and RPC server in this
 * process, over real loopback sockets: every call shape, batches split into several
 * pipelined requests, threads sharing one client, deadlines (RPC_TIMEOUT), reconnection
 * after the server restarts, and the request handler fed malformed bodies directly. */
#include <errno.h>
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

#include "client/master_client.h"
#include "common/auth.h"
#include "master.pb-c.h"
#include "master/admin.h"
#include "master/rpc_server.h"
#include "mooncake/mc_time.h"
#include "net/sock.h"

typedef struct fixture {
    mc_master_service *svc;
    mc_master_rpc_server *srv;
    mc_master_client *cli;
    char addr[64];
    uint16_t port;
} fixture;

static const mc_master_uuid CLIENT = {1, 2};

static int start_server(fixture *f, uint16_t port)
{
    mc_master_rpc_server_opts o = {.host = "127.0.0.1", .port = port, .threads = 2};
    int rc = mc_master_rpc_server_start(f->svc, &o, &f->srv);
    if (rc == 0)
        f->port = mc_master_rpc_server_port(f->srv);
    return rc;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    assert_int_equal(mc_master_service_create(&cfg, &f->svc), MC_OK);
    assert_int_equal(start_server(f, 0), 0);
    snprintf(f->addr, sizeof f->addr, "127.0.0.1:%u", (unsigned)f->port);
    mc_master_client_opts co = {.rpc_timeout_ms = 5000, .max_conns = 4};
    assert_int_equal(mc_master_client_create(f->addr, &co, &f->cli), MC_OK);
    mc_master_segment seg = {.id = {7, 7}, .name = "127.0.0.1:9000", .base = 1ull << 32,
                             .size = 1ull << 30};
    assert_int_equal(mc_master_client_mount_segment(f->cli, &seg, CLIENT), MC_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    mc_master_client_destroy(f->cli);
    mc_master_rpc_server_destroy(f->srv);
    mc_master_service_destroy(f->svc);
    free(f);
    return 0;
}

static mc_master_key K(const char *s)
{
    mc_master_key k = {s, strlen(s)};
    return k;
}

static void test_single_calls(void **state)
{
    fixture *f = *state;
    char ver[64];
    assert_int_equal(mc_master_client_service_ready(f->cli, ver, sizeof ver), MC_OK);
    assert_non_null(strstr(ver, "mooncake-c"));
    mc_master_ping_result pr;
    assert_int_equal(mc_master_client_ping(f->cli, CLIENT, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_OK);
    assert_int_equal(mc_master_client_ping(f->cli, (mc_master_uuid){9, 9}, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_NEED_REMOUNT);

    mc_master_replica_list l;
    const char key[] = "a\0b";
    assert_int_equal(mc_master_client_put_start(f->cli, CLIENT, key, 3, 4096, NULL, &l), MC_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.replicas[0].transport_endpoint, "127.0.0.1:9000");
    assert_int_equal(l.replicas[0].status, MC_MASTER_REPLICA_PROCESSING);
    assert_int_equal(mc_master_client_get_replica_list(f->cli, key, 3, &l),
                     MC_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_client_put_end(f->cli, CLIENT, key, 3), MC_OK);
    assert_int_equal(mc_master_client_get_replica_list(f->cli, key, 3, &l), MC_OK);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.lease_ttl_ms, 10000);
    assert_int_equal(mc_master_client_exist_key(f->cli, key, 3), 1);
    assert_int_equal(mc_master_client_exist_key(f->cli, key, 2), 0); /* "a\0" */
    assert_int_equal(mc_master_client_remove(f->cli, key, 3, false), MC_OBJECT_HAS_LEASE);
    assert_int_equal(mc_master_client_remove(f->cli, key, 3, true), MC_OK);

    /* local argument checks: nothing is sent */
    assert_int_equal(mc_master_client_put_start(f->cli, CLIENT, NULL, 3, 1, NULL, &l),
                     MC_INVALID_PARAMS);
    char big[MC_MASTER_KEY_MAX + 1];
    memset(big, 'x', sizeof big);
    assert_int_equal(mc_master_client_get_replica_list(f->cli, big, sizeof big, &l),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_master_client_exist_key(f->cli, "", 0), MC_INVALID_PARAMS);

    /* upsert, revoke, regex */
    assert_int_equal(mc_master_client_upsert_start(f->cli, CLIENT, "u1", 2, 10, NULL, &l), MC_OK);
    assert_int_equal(mc_master_client_upsert_end(f->cli, CLIENT, "u1", 2), MC_OK);
    assert_int_equal(mc_master_client_upsert_start(f->cli, CLIENT, "u2", 2, 10, NULL, &l), MC_OK);
    assert_int_equal(mc_master_client_upsert_revoke(f->cli, CLIENT, "u2", 2), MC_OK);
    assert_int_equal(mc_master_client_put_start(f->cli, CLIENT, "u3", 2, 10, NULL, &l), MC_OK);
    assert_int_equal(mc_master_client_put_revoke(f->cli, CLIENT, "u3", 2), MC_OK);
    mc_master_regex_match *m = NULL;
    size_t n = 0;
    bool trunc = true;
    assert_int_equal(mc_master_client_get_replica_list_by_regex(f->cli, "^u", 2, &m, &n, &trunc),
                     MC_OK);
    assert_int_equal(n, 1);
    assert_false(trunc);
    assert_int_equal(m[0].key_len, 2);
    assert_memory_equal(m[0].key, "u1", 2);
    assert_int_equal(m[0].replicas.n, 1);
    mc_master_client_free_matches(m, n);
    assert_int_equal(mc_master_client_get_replica_list_by_regex(f->cli, "(", 1, &m, &n, NULL),
                     MC_INVALID_PARAMS);
    uint64_t count = 0;
    assert_int_equal(mc_master_client_remove_by_regex(f->cli, "^u", 2, true, &count), MC_OK);
    assert_int_equal(count, 1);
    assert_int_equal(mc_master_client_remove_all(f->cli, true, &count), MC_OK);
    assert_int_equal(count, 0);

    /* segments */
    mc_master_segment seg = {.id = {7, 8}, .name = "127.0.0.1:9001", .base = 4096, .size = 4096};
    assert_int_equal(mc_master_client_remount_segments(f->cli, &seg, 1, CLIENT), MC_OK);
    assert_int_equal(mc_master_client_mount_segment(f->cli, &seg, CLIENT),
                     MC_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(mc_master_client_unmount_segment(f->cli, seg.id, (mc_master_uuid){5, 5}),
                     MC_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_client_unmount_segment(f->cli, seg.id, CLIENT), MC_OK);
    assert_int_equal(mc_master_client_unmount_segment(f->cli, seg.id, CLIENT),
                     MC_SEGMENT_NOT_FOUND);
}

#define NB 2600 /* > 2 requests of MC_MASTER_RPC_MAX_BATCH */

static void test_batches(void **state)
{
    fixture *f = *state;
    static char names[NB][32];
    static mc_master_key keys[NB];
    static uint64_t sizes[NB];
    static mc_master_replica_list outs[NB];
    static int st[NB];
    for (int i = 0; i < NB; i++) {
        snprintf(names[i], sizeof names[i], "batch/%05d", i);
        keys[i] = K(names[i]);
        sizes[i] = 100;
    }
    keys[5] = keys[4]; /* duplicate: the first start wins */
    assert_int_equal(
        mc_master_client_batch_put_start(f->cli, CLIENT, keys, sizes, NB, NULL, outs, st),
        MC_OBJECT_ALREADY_EXISTS);
    for (int i = 0; i < NB; i++) {
        assert_int_equal(st[i], i == 5 ? MC_OBJECT_ALREADY_EXISTS : MC_OK);
        assert_int_equal(outs[i].n, i == 5 ? 0 : 1);
    }
    keys[5] = K(names[5]);
    assert_int_equal(mc_master_client_batch_put_end(f->cli, CLIENT, keys, NB, st),
                     MC_OBJECT_NOT_FOUND);
    for (int i = 0; i < NB; i++)
        assert_int_equal(st[i], i == 5 ? MC_OBJECT_NOT_FOUND : MC_OK);
    assert_int_equal(mc_master_client_batch_get_replica_list(f->cli, keys, NB, outs, st),
                     MC_OBJECT_NOT_FOUND);
    for (int i = 0; i < NB; i++) {
        assert_int_equal(st[i], i == 5 ? MC_OBJECT_NOT_FOUND : MC_OK);
        if (i != 5)
            assert_int_equal(outs[i].replicas[0].size, 100);
    }
    assert_int_equal(mc_master_client_batch_exist_key(f->cli, keys, NB, st), MC_OK);
    for (int i = 0; i < NB; i++)
        assert_int_equal(st[i], i == 5 ? 0 : 1);
    assert_int_equal(mc_master_client_batch_remove(f->cli, keys, NB, true, st),
                     MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_client_batch_put_start(f->cli, CLIENT, keys, sizes, 3, NULL,
                                                      outs, st),
                     MC_OK);
    assert_int_equal(mc_master_client_batch_put_revoke(f->cli, CLIENT, keys, 3, st), MC_OK);
    assert_int_equal(mc_master_client_batch_upsert_start(f->cli, CLIENT, keys, sizes, 3, NULL,
                                                         outs, st),
                     MC_OK);
    assert_int_equal(mc_master_client_batch_upsert_end(f->cli, CLIENT, keys, 2, st), MC_OK);
    assert_int_equal(mc_master_client_batch_upsert_revoke(f->cli, CLIENT, keys + 2, 1, st),
                     MC_OK);
    assert_int_equal(mc_master_client_batch_put_end(f->cli, CLIENT, keys, 0, NULL), MC_OK);
    assert_int_equal(mc_master_client_batch_put_end(f->cli, CLIENT, NULL, 3, st),
                     MC_INVALID_PARAMS);
}

/* batch_replica_clear over the wire: segment_name travels (a name no replica is on
 * clears nothing), another client is refused, and a batch of several requests clears
 * each object exactly once. */
static void test_batch_replica_clear(void **state)
{
    fixture *f = *state;
    static char names[NB][32];
    static mc_master_key keys[NB];
    static uint64_t sizes[NB];
    static mc_master_replica_list outs[NB];
    static int st[NB];
    for (int i = 0; i < NB; i++) {
        snprintf(names[i], sizeof names[i], "clear/%05d", i);
        keys[i] = K(names[i]);
        sizes[i] = 64;
    }
    assert_int_equal(
        mc_master_client_batch_put_start(f->cli, CLIENT, keys, sizes, NB, NULL, outs, st),
        MC_OK);
    assert_int_equal(mc_master_client_batch_put_end(f->cli, CLIENT, keys, NB, st), MC_OK);
    assert_int_equal(
        mc_master_client_batch_replica_clear(f->cli, CLIENT, keys, 2, "127.0.0.1:1", st),
        MC_REPLICA_NOT_FOUND);
    assert_int_equal(st[0], MC_REPLICA_NOT_FOUND);
    assert_int_equal(st[1], MC_REPLICA_NOT_FOUND);
    assert_int_equal(
        mc_master_client_batch_replica_clear(f->cli, (mc_master_uuid){9, 9}, keys, 1, NULL, st),
        MC_ILLEGAL_CLIENT);
    assert_int_equal(
        mc_master_client_batch_replica_clear(f->cli, CLIENT, keys, NB, "127.0.0.1:9000", st),
        MC_OK);
    for (int i = 0; i < NB; i++)
        assert_int_equal(st[i], MC_OK);
    assert_int_equal(mc_master_client_batch_exist_key(f->cli, keys, NB, st), MC_OK);
    for (int i = 0; i < NB; i++)
        assert_int_equal(st[i], 0);
    assert_int_equal(mc_master_client_batch_replica_clear(f->cli, CLIENT, keys, 1, "", st),
                     MC_OBJECT_NOT_FOUND);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(mc_master_client_batch_replica_clear(f->cli, CLIENT, keys, 1, longname, st),
                     MC_INVALID_PARAMS);
    assert_int_equal(st[0], MC_INVALID_PARAMS);
}

typedef struct worker {
    fixture *f;
    int idx;
    int failures;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < 300; i++) {
        char key[64];
        snprintf(key, sizeof key, "t%d/%d", w->idx, i);
        mc_master_replica_list l;
        if (mc_master_client_put_start(w->f->cli, CLIENT, key, strlen(key), 64, NULL, &l) ||
            mc_master_client_put_end(w->f->cli, CLIENT, key, strlen(key)) ||
            mc_master_client_get_replica_list(w->f->cli, key, strlen(key), &l) || l.n != 1)
            w->failures++;
    }
    return NULL;
}

static void test_threads_share_a_client(void **state)
{
    fixture *f = *state;
    enum { T = 6 }; /* more threads than pooled connections (4) */
    pthread_t th[T];
    worker w[T];
    for (int i = 0; i < T; i++) {
        w[i] = (worker){f, i, 0};
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    mc_master_stats s;
    mc_master_service_get_stats(f->svc, &s);
    assert_int_equal(s.key_count, T * 300);
}

static void test_reconnect_after_server_restart(void **state)
{
    fixture *f = *state;
    mc_master_ping_result pr;
    assert_int_equal(mc_master_client_ping(f->cli, CLIENT, &pr), MC_OK);
    mc_master_rpc_server_destroy(f->srv);
    f->srv = NULL;
    assert_int_equal(mc_master_client_ping(f->cli, CLIENT, &pr), MC_RPC_FAIL);
    assert_int_equal(start_server(f, f->port), 0);
    /* pooled connections to the old server are stale; the call still succeeds */
    assert_int_equal(mc_master_client_ping(f->cli, CLIENT, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_OK); /* same service behind it */
}

static void test_timeout_and_unreachable(void **state)
{
    (void)state;
    mc_master_client *c;
    /* nothing listens: create fails */
    uint16_t port = 0;
    int lfd = mc_sock_listen_tcp("127.0.0.1", 0, 4, false, &port);
    assert_true(lfd >= 0);
    close(lfd);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)port);
    assert_int_equal(mc_master_client_create(addr, NULL, &c), MC_RPC_FAIL);
    assert_int_equal(mc_master_client_create("127.0.0.1:99999", NULL, &c), MC_INVALID_PARAMS);
    /* a bad MC_RPC_TIMEOUT_MS fails the create (common/env.h policy), unless the caller
     * gave the timeout itself */
    setenv("MC_RPC_TIMEOUT_MS", "0", 1);
    assert_int_equal(mc_master_client_create(addr, NULL, &c), MC_INVALID_PARAMS);
    mc_master_client_opts given = {.rpc_timeout_ms = 1000};
    assert_int_equal(mc_master_client_create(addr, &given, &c), MC_RPC_FAIL);
    unsetenv("MC_RPC_TIMEOUT_MS");
    /* a listener that never answers: the call times out */
    lfd = mc_sock_listen_tcp("127.0.0.1", 0, 4, false, &port);
    assert_true(lfd >= 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)port);
    mc_master_client_opts o = {.rpc_timeout_ms = 300, .max_conns = 1};
    assert_int_equal(mc_master_client_create(addr, &o, &c), MC_OK);
    uint64_t t0 = mc_now_ms();
    mc_master_ping_result pr;
    assert_int_equal(mc_master_client_ping(c, CLIENT, &pr), MC_RPC_TIMEOUT);
    uint64_t dt = mc_now_ms() - t0;
    assert_true(dt >= 250 && dt < 3000);
    mc_master_client_destroy(c);
    close(lfd);
}

/* The cluster secret on the RPC port (issue 11): the right secret works (and again after
 * the server restarts: the handshake runs on every reconnection); another secret, none
 * on the client, or none on the server fail with ILLEGAL_CLIENT; refusals are counted. */
static void test_auth_handshake(void **state)
{
    (void)state;
    mc_auth_secret good, bad;
    char err[256];
    assert_int_equal(mc_auth_secret_set(&good, "unit-test-cluster-secret-1", 26, err,
                                        sizeof err), 0);
    assert_int_equal(mc_auth_secret_set(&bad, "unit-test-cluster-secret-2", 26, err,
                                        sizeof err), 0);
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    mc_master_service *svc;
    assert_int_equal(mc_master_service_create(&cfg, &svc), MC_OK);
    mc_master_rpc_server_opts so = {.host = "127.0.0.1", .threads = 2, .auth = &good};
    mc_master_rpc_server *srv;
    assert_int_equal(mc_master_rpc_server_start(svc, &so, &srv), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)mc_master_rpc_server_port(srv));
    mc_master_client *c;
    mc_master_client_opts co = {.rpc_timeout_ms = 5000, .max_conns = 2, .auth = &good};
    assert_int_equal(mc_master_client_create(addr, &co, &c), MC_OK);
    char ver[64];
    assert_int_equal(mc_master_client_service_ready(c, ver, sizeof ver), MC_OK);
    /* another secret, and none */
    mc_master_client *x;
    mc_master_client_opts xo = {.rpc_timeout_ms = 5000, .auth = &bad};
    assert_int_equal(mc_master_client_create(addr, &xo, &x), MC_ILLEGAL_CLIENT);
    mc_master_client_opts no = {.rpc_timeout_ms = 5000};
    assert_int_equal(mc_master_client_create(addr, &no, &x), MC_OK); /* connect only */
    assert_int_equal(mc_master_client_service_ready(x, ver, sizeof ver), MC_ILLEGAL_CLIENT);
    mc_master_client_destroy(x);
    /* the server counts a refusal after sending its RESULT: wait for it (bounded) */
    mc_master_rpc_server_stats st;
    uint64_t until = mc_now_ms() + 5000;
    do {
        mc_master_rpc_server_get_stats(srv, &st);
    } while ((!st.refused[MC_RPC_REFUSED_BAD_MAC] ||
              !st.refused[MC_RPC_REFUSED_CLIENT_NO_SECRET]) &&
             mc_now_ms() < until && usleep(1000) == 0);
    assert_true(st.refused[MC_RPC_REFUSED_BAD_MAC] >= 1);
    assert_true(st.refused[MC_RPC_REFUSED_CLIENT_NO_SECRET] >= 1);
    assert_true(st.authenticated_total >= 1);
    /* the server restarts on the same port: the client's next call reconnects and
     * authenticates again */
    uint16_t port = mc_master_rpc_server_port(srv);
    mc_master_rpc_server_destroy(srv);
    so.port = port;
    assert_int_equal(mc_master_rpc_server_start(svc, &so, &srv), 0);
    int rc = mc_master_client_service_ready(c, ver, sizeof ver);
    if (rc != MC_OK) /* a connection closed under an in-flight call fails that call */
        rc = mc_master_client_service_ready(c, ver, sizeof ver);
    assert_int_equal(rc, MC_OK);
    mc_master_rpc_server_destroy(srv);
    /* an open server: the client with a secret is told at connect */
    so.auth = NULL;
    so.port = 0;
    assert_int_equal(mc_master_rpc_server_start(svc, &so, &srv), 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)mc_master_rpc_server_port(srv));
    assert_int_equal(mc_master_client_create(addr, &co, &x), MC_ILLEGAL_CLIENT);
    until = mc_now_ms() + 5000;
    do {
        mc_master_rpc_server_get_stats(srv, &st);
    } while (!st.refused[MC_RPC_REFUSED_SERVER_NO_SECRET] && mc_now_ms() < until &&
             usleep(1000) == 0);
    assert_int_equal(st.refused[MC_RPC_REFUSED_SERVER_NO_SECRET], 1);
    mc_master_client_destroy(c);
    mc_master_rpc_server_destroy(srv);
    mc_master_service_destroy(svc);
}

/* The handler on its own: malformed bodies for every opcode never crash and get
 * INVALID_PARAMS (or a reply when the bytes happen to decode); limits are enforced. */
static void test_handler_malformed(void **state)
{
    fixture *f = *state;
    mc_master_rpc_handler *h = mc_master_rpc_handler_create(f->svc);
    const uint8_t *reply;
    size_t len;
    assert_int_equal(mc_master_rpc_handle(h, 999, NULL, 0, &reply, &len), MC_NOT_SUPPORTED);
    assert_int_equal(len, 0);
    uint64_t x = 88172645463325252ull;
    uint8_t buf[512];
    for (int op = 0; op < 70; op++) {
        for (int round = 0; round < 200; round++) {
            size_t n = (size_t)(x % sizeof buf);
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf[i] = (uint8_t)x;
            }
            int rc = mc_master_rpc_handle(h, (uint16_t)op, buf, n, &reply, &len);
            assert_true(rc == 0 || rc == MC_INVALID_PARAMS || rc == MC_NOT_SUPPORTED);
            if (rc != 0)
                assert_int_equal(len, 0);
        }
    }
    /* a batch above MC_MASTER_RPC_MAX_BATCH is refused before the service runs */
    Mcrpc__BatchKeysRequest req = MCRPC__BATCH_KEYS_REQUEST__INIT;
    enum { N = MC_MASTER_RPC_MAX_BATCH + 1 };
    static ProtobufCBinaryData keys[N];
    for (int i = 0; i < N; i++) {
        keys[i].data = (uint8_t *)"k";
        keys[i].len = 1;
    }
    req.keys = keys;
    req.n_keys = N;
    size_t plen = mcrpc__batch_keys_request__get_packed_size(&req);
    uint8_t *p = malloc(plen);
    mcrpc__batch_keys_request__pack(&req, p);
    assert_int_equal(mc_master_rpc_handle(h, MCRPC__OPCODE__OP_BATCH_GET_REPLICA_LIST, p, plen,
                                          &reply, &len),
                     MC_INVALID_PARAMS);
    req.n_keys = N - 1;
    plen = mcrpc__batch_keys_request__get_packed_size(&req);
    mcrpc__batch_keys_request__pack(&req, p);
    assert_int_equal(mc_master_rpc_handle(h, MCRPC__OPCODE__OP_BATCH_EXIST_KEY, p, plen,
                                          &reply, &len),
                     0);
    Mcrpc__BatchExistKeyReply *r = mcrpc__batch_exist_key_reply__unpack(NULL, len, reply);
    assert_non_null(r);
    assert_int_equal(r->n_results, N - 1);
    mcrpc__batch_exist_key_reply__free_unpacked(r, NULL);
    free(p);
    /* a body of many empty sub-messages cannot make the decoder allocate without bound */
    size_t big = 8u << 20;
    uint8_t *bomb = malloc(big);
    for (size_t i = 0; i + 1 < big; i += 2) {
        bomb[i] = 0x0a; /* field 1 (segments), length-delimited */
        bomb[i + 1] = 0x00;
    }
    assert_int_equal(mc_master_rpc_handle(h, MCRPC__OPCODE__OP_REMOUNT_SEGMENT, bomb, big,
                                          &reply, &len),
                     MC_INVALID_PARAMS);
    free(bomb);
    mc_master_rpc_handler_destroy(h);
}

static void test_metrics_and_summary(void **state)
{
    fixture *f = *state;
    size_t len;
    char *text = mc_master_metrics_text(f->svc, f->srv, &len);
    assert_int_equal(strlen(text), len);
    assert_non_null(strstr(text, "\nmaster_total_capacity_bytes 1073741824\n"));
    assert_non_null(strstr(text, "\nmaster_mount_segment_requests_total 1\n"));
    assert_non_null(strstr(text, "master_batch_put_start_partial_successes_total"));
    assert_non_null(strstr(text, "\nmaster_rpc_connections_open 1\n"));
    free(text);
    mc_master_stats prev, cur;
    memset(&prev, 0, sizeof prev);
    memset(&cur, 0, sizeof cur);
    cur.allocated_bytes = 1536ull << 20;
    cur.total_capacity_bytes = 4ull << 30;
    cur.key_count = 12;
    cur.active_clients = 2;
    cur.requests[MC_MASTER_OP_PUT_START] = 20;
    cur.failures[MC_MASTER_OP_PUT_START] = 4;
    char line[4096];
    size_t need = mc_master_format_summary(&prev, &cur, 2.0, line, sizeof line);
    assert_int_equal(need, strlen(line));
    assert_non_null(strstr(line, "Master Admin Metrics: role=leader"));
    assert_non_null(strstr(line, "Mem Storage: 1.50 GB / 4.00 GB (37.5%)"));
    assert_non_null(strstr(line, "Keys: 12 (soft-pinned: 0) | Clients: 2"));
    assert_non_null(strstr(line, "PutStart=8.00/10.00"));
    char tiny[16];
    assert_int_equal(mc_master_format_summary(&prev, &cur, 2.0, tiny, sizeof tiny), need);
    assert_int_equal(strlen(tiny), 15);
}

/* Fences over the wire: the epoch in put_start's reply, the fences in ping replies to the
 * owner (CLIENT mounted the segment) and to the writer, their acknowledgements. */
static void test_ping_fences(void **state)
{
    fixture *f = *state;
    const mc_master_uuid W = {7, 7};
    mc_master_replica_list l;
    assert_int_equal(mc_master_client_put_start(f->cli, W, "f", 1, 4096, NULL, &l), MC_OK);
    uint64_t e = l.replicas[0].fence_epoch;
    assert_true(e > 0);
    assert_int_equal(mc_master_client_put_revoke(f->cli, W, "f", 1), MC_OK);
    mc_master_ping_result *po = malloc(sizeof *po), *pw = malloc(sizeof *pw),
                          *r = malloc(sizeof *r);
    assert_int_equal(mc_master_client_ping_fences(f->cli, CLIENT, NULL, po), MC_OK);
    assert_int_equal(po->n_writer_fences, 1);
    assert_int_equal(po->n_target_fences, 0);
    assert_int_equal(po->writer_fences[0].writer.first, 7);
    assert_int_equal(po->writer_fences[0].writer.second, 7);
    assert_int_equal(po->writer_fences[0].min_epoch, e + 1);
    assert_int_equal(mc_master_client_ping_fences(f->cli, W, NULL, pw), MC_OK);
    assert_int_equal(pw->client_status, MC_MASTER_CLIENT_NEED_REMOUNT); /* never mounted */
    assert_int_equal(pw->n_target_fences, 1);
    assert_string_equal(pw->target_fences[0].segment, "127.0.0.1:9000");
    assert_int_equal(pw->target_fences[0].min_epoch, e + 1);
    /* both acknowledge: nothing pending any more, and the next put gets e + 1 */
    mc_master_ping_request ao = {po->writer_fences, po->n_writer_fences, NULL, 0};
    assert_int_equal(mc_master_client_ping_fences(f->cli, CLIENT, &ao, r), MC_OK);
    mc_master_ping_request aw = {NULL, 0, pw->target_fences, pw->n_target_fences};
    assert_int_equal(mc_master_client_ping_fences(f->cli, W, &aw, r), MC_OK);
    assert_int_equal(r->n_target_fences + r->n_writer_fences, 0);
    assert_int_equal(mc_master_client_ping_fences(f->cli, CLIENT, NULL, r), MC_OK);
    assert_int_equal(r->n_target_fences + r->n_writer_fences, 0);
    mc_master_stats st;
    mc_master_service_get_stats(f->svc, &st);
    assert_int_equal(st.quarantined_bytes, 0);
    assert_int_equal(st.fences_acked, 2);
    assert_int_equal(mc_master_client_put_start(f->cli, W, "f", 1, 4096, NULL, &l), MC_OK);
    assert_int_equal(l.replicas[0].fence_epoch, e + 1);
    /* local checks of the acknowledgement lists */
    mc_master_ping_request bad = {NULL, 1, NULL, 0};
    assert_int_equal(mc_master_client_ping_fences(f->cli, W, &bad, r), MC_INVALID_PARAMS);
    bad = (mc_master_ping_request){NULL, 0, NULL, MC_MASTER_MAX_FENCES + 1};
    assert_int_equal(mc_master_client_ping_fences(f->cli, W, &bad, r), MC_INVALID_PARAMS);
    free(po);
    free(pw);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_single_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ping_fences, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_replica_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_share_a_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnect_after_server_restart, setup, teardown),
        cmocka_unit_test(test_timeout_and_unreachable),
        cmocka_unit_test(test_auth_handshake),
        cmocka_unit_test_setup_teardown(test_handler_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_and_summary, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
