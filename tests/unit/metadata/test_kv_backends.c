/* The etcd and Redis backends against real servers on 127.0.0.1 (`etcd` and
 * `redis-server` started here on free ports, temporary data, killed at the end), with
 * the HTTP backend on our own server run through the same checks: one contract, the
 * same codes from each (missing keys, binary and empty values, write-once rpc_meta,
 * value limits, the typed helpers). Then what is particular to each: etcd failover
 * across endpoints, a port that is not etcd, Redis AUTH (URL and MC_REDIS_PASSWORD),
 * SELECT, reconnect after a server restart, concurrent callers; and a server that is
 * down. And the election's watch of the leader key (etcd; Redis refuses it). A server binary that is not installed skips its tests (scripts/setup.sh installs
 * both: etcd-server, redis-server). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "metadata/election.h"
#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

/* ---- processes ------------------------------------------------------------------- */

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0)
        fail_msg("no free port: %s", strerror(errno));
    close(fd);
    return ntohs(a.sin_port);
}

static bool have(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s:/usr/sbin:/usr/bin", path ? path : "");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", d, prog);
        if (access(p, X_OK) == 0)
            return true;
    }
    return false;
}

static pid_t spawn(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 1);
        dup2(nul, 2);
        setpgid(0, 0);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void reap(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits (deadline: 30 s, for a loaded box) until a client on conn answers a get with
 * "not found" or a value: the server is up and serving. */
static bool wait_serving(const char *conn, pid_t pid)
{
    mc_metadata_opts o = {.timeout_ms = 2000, .connect_timeout_ms = 500, .cluster_id = ""};
    mc_metadata *md;
    if (mc_metadata_create_opts(conn, &o, &md) != MC_OK)
        return false;
    uint64_t deadline = now_ms() + 30000;
    bool up = false;
    while (!up && now_ms() < deadline) {
        if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid)
            break;
        char *v = NULL;
        size_t n;
        int rc = mc_metadata_get(md, "probe/ready", &v, &n);
        free(v);
        up = rc == MC_OBJECT_NOT_FOUND || rc == MC_OK;
        if (!up)
            usleep(50000);
    }
    mc_metadata_destroy(md);
    return up;
}

typedef struct servers {
    pid_t etcd, redis, redis_pw;
    uint16_t etcd_port, redis_port, redis_pw_port;
    char etcd_dir[64], redis_dir[64];
    char etcd_conn[64], redis_conn[64];
    mc_http_metadata_server *http;
    char http_conn[96];
} servers;

static servers S;

static pid_t start_etcd(void)
{
    uint16_t peer = free_port();
    S.etcd_port = free_port();
    char client_url[64], peer_url[64], cluster[96], data[96];
    snprintf(client_url, sizeof client_url, "http://127.0.0.1:%u", S.etcd_port);
    snprintf(peer_url, sizeof peer_url, "http://127.0.0.1:%u", peer);
    snprintf(cluster, sizeof cluster, "t=%s", peer_url);
    snprintf(data, sizeof data, "%s/data", S.etcd_dir);
    char *argv[] = {"etcd", "--name", "t", "--data-dir", data, "--listen-client-urls",
                    client_url, "--advertise-client-urls", client_url, "--listen-peer-urls",
                    peer_url, "--initial-advertise-peer-urls", peer_url,
                    "--initial-cluster", cluster, "--max-request-bytes", "33554432", NULL};
    return spawn(argv);
}

static pid_t start_redis(uint16_t port, const char *pass)
{
    char p[16];
    snprintf(p, sizeof p, "%u", port);
    char *argv[] = {"redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", S.redis_dir,
                    pass ? "--requirepass" : NULL, (char *)pass, NULL};
    return spawn(argv);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    if (mc_http_metadata_server_start("127.0.0.1", 0, NULL, &S.http) != 0)
        return -1;
    snprintf(S.http_conn, sizeof S.http_conn, "http://127.0.0.1:%u/metadata",
             (unsigned)mc_http_metadata_server_port(S.http));
    if (have("etcd")) {
        snprintf(S.etcd_dir, sizeof S.etcd_dir, "/tmp/mc-test-etcd-XXXXXX");
        if (!mkdtemp(S.etcd_dir))
            return -1;
        S.etcd = start_etcd();
        snprintf(S.etcd_conn, sizeof S.etcd_conn, "etcd://127.0.0.1:%u", S.etcd_port);
        if (!wait_serving(S.etcd_conn, S.etcd)) {
            fprintf(stderr, "etcd did not come up on %s\n", S.etcd_conn);
            return -1;
        }
    }
    if (have("redis-server")) {
        snprintf(S.redis_dir, sizeof S.redis_dir, "/tmp/mc-test-redis-XXXXXX");
        if (!mkdtemp(S.redis_dir))
            return -1;
        S.redis_port = free_port();
        S.redis = start_redis(S.redis_port, NULL);
        snprintf(S.redis_conn, sizeof S.redis_conn, "redis://127.0.0.1:%u", S.redis_port);
        S.redis_pw_port = free_port();
        S.redis_pw = start_redis(S.redis_pw_port, "s3cret");
        char pw[96];
        snprintf(pw, sizeof pw, "redis://:s3cret@127.0.0.1:%u", S.redis_pw_port);
        if (!wait_serving(S.redis_conn, S.redis) || !wait_serving(pw, S.redis_pw)) {
            fprintf(stderr, "redis-server did not come up\n");
            return -1;
        }
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    reap(S.etcd);
    reap(S.redis);
    reap(S.redis_pw);
    mc_http_metadata_server_destroy(S.http);
    if (S.etcd_dir[0])
        nftw(S.etcd_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    if (S.redis_dir[0])
        nftw(S.redis_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* ---- one contract on every backend ---------------------------------------------- */

typedef enum { B_HTTP, B_ETCD, B_REDIS } backend;

static const char *conn_of(backend b)
{
    const char *c = b == B_HTTP ? S.http_conn : b == B_ETCD ? S.etcd_conn : S.redis_conn;
    if (!c[0])
        skip(); /* the server binary is not installed */
    return c;
}

static mc_metadata *client(const char *conn, uint64_t max_value)
{
    mc_metadata_opts o = {.timeout_ms = 5000, .connect_timeout_ms = 1000,
                          .max_value_bytes = max_value, .cluster_id = ""};
    mc_metadata *md = NULL;
    assert_int_equal(mc_metadata_create_opts(conn, &o, &md), MC_OK);
    return md;
}

/* a key unique to this run and test */
static void ukey(char *buf, size_t n, const char *what)
{
    static unsigned seq;
    snprintf(buf, n, "mooncake/test/%s/%d-%u-%u", what, (int)getpid(), (unsigned)now_ms(),
             __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
}

static void check_value(mc_metadata *md, const char *key, const void *want, size_t wlen)
{
    char *v = NULL;
    size_t n = 0;
    assert_int_equal(mc_metadata_get(md, key, &v, &n), MC_OK);
    assert_int_equal(n, wlen);
    assert_memory_equal(v, want, wlen);
    assert_int_equal(v[n], '\0');
    free(v);
}

static void check_missing(mc_metadata *md, const char *key)
{
    char *v = NULL;
    size_t n = 0;
    assert_int_equal(mc_metadata_get(md, key, &v, &n), MC_OBJECT_NOT_FOUND);
    assert_null(v);
}

static void contract(backend b)
{
    mc_metadata *md = client(conn_of(b), 0);
    char k[256];
    ukey(k, sizeof k, "plain");
    check_missing(md, k);
    assert_int_equal(mc_metadata_delete(md, k), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_metadata_put(md, k, "{\"a\":1}", 7), MC_OK);
    check_value(md, k, "{\"a\":1}", 7);
    assert_int_equal(mc_metadata_put(md, k, "{\"a\":22}", 8), MC_OK); /* overwrite */
    check_value(md, k, "{\"a\":22}", 8);
    assert_int_equal(mc_metadata_put(md, k, "", 0), MC_OK); /* empty value */
    check_value(md, k, "", 0);
    unsigned char bin[1000];
    for (size_t i = 0; i < sizeof bin; i++)
        bin[i] = (unsigned char)(i * 7 + 3); /* NULs and high bytes; every length mod 3 */
    for (size_t n = 1; n <= 4; n++) {
        assert_int_equal(mc_metadata_put(md, k, bin, sizeof bin - n), MC_OK);
        check_value(md, k, bin, sizeof bin - n);
    }
    assert_int_equal(mc_metadata_delete(md, k), MC_OK);
    assert_int_equal(mc_metadata_delete(md, k), MC_OBJECT_NOT_FOUND);
    check_missing(md, k);

    /* keys with spaces, '&', '%', '+', '=', UTF-8 */
    char odd[300];
    snprintf(odd, sizeof odd, "%s/a b&c=%%2F+d\xc3\xa9", k);
    assert_int_equal(mc_metadata_put(md, odd, "x", 1), MC_OK);
    check_value(md, odd, "x", 1);
    assert_int_equal(mc_metadata_delete(md, odd), MC_OK);

    /* write-once rpc_meta: absent -> stored, same bytes -> OK, other bytes -> refused */
    ukey(k, sizeof k, "rpc_meta");
    const char *m1 = "{\"ip_or_host_name\":\"127.0.0.1\",\"rpc_port\":15001}";
    const char *m2 = "{\"ip_or_host_name\":\"127.0.0.1\",\"rpc_port\":15002}";
    assert_int_equal(mc_metadata_put(md, k, m1, strlen(m1)), MC_OK);
    assert_int_equal(mc_metadata_put(md, k, m1, strlen(m1)), MC_OK);
    assert_int_equal(mc_metadata_put(md, k, m2, strlen(m2)), MC_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_metadata_put(md, k, m1, strlen(m1) - 1), MC_OBJECT_ALREADY_EXISTS);
    check_value(md, k, m1, strlen(m1));
    assert_int_equal(mc_metadata_delete(md, k), MC_OK);
    assert_int_equal(mc_metadata_put(md, k, m2, strlen(m2)), MC_OK);
    check_value(md, k, m2, strlen(m2));
    assert_int_equal(mc_metadata_delete(md, k), MC_OK);

    /* value limits: a put over the client's limit is refused before it is sent; a
     * stored value over a reader's limit is BUFFER_OVERFLOW for that reader */
    mc_metadata *small = client(conn_of(b), 1024);
    ukey(k, sizeof k, "big");
    char *big = malloc(300000);
    memset(big, 'z', 300000);
    assert_int_equal(mc_metadata_put(small, k, big, 1025), MC_BUFFER_OVERFLOW);
    assert_int_equal(mc_metadata_put(md, k, big, 300000), MC_OK);
    check_value(md, k, big, 300000);
    char *v = NULL;
    size_t n;
    assert_int_equal(mc_metadata_get(small, k, &v, &n), MC_BUFFER_OVERFLOW);
    assert_null(v);
    assert_int_equal(mc_metadata_delete(md, k), MC_OK);
    free(big);
    mc_metadata_destroy(small);
    mc_metadata_destroy(md);

    /* the typed helpers under a cluster prefix, read back raw at upstream's keys */
    mc_metadata_opts o = {.timeout_ms = 5000, .cluster_id = "kvtest"};
    assert_int_equal(mc_metadata_create_opts(conn_of(b), &o, &md), MC_OK);
    char seg[64];
    snprintf(seg, sizeof seg, "127.0.0.1:%u", (unsigned)(now_ms() % 50000 + 1000));
    mc_segment_desc d;
    mc_segment_desc_init(&d);
    assert_int_equal(mc_segment_desc_set(&d.name, seg), MC_OK);
    assert_int_equal(mc_segment_desc_set(&d.protocol, "tcp"), MC_OK);
    d.tcp_data_port = 15123;
    assert_int_equal(mc_segment_desc_add_buffer(&d, seg, 1 << 20, 4096, false), MC_OK);
    assert_int_equal(mc_metadata_put_segment(md, &d), MC_OK);
    mc_segment_desc got;
    assert_int_equal(mc_metadata_get_segment(md, seg, &got), MC_OK);
    assert_string_equal(got.name, seg);
    assert_int_equal(got.n_buffers, 1);
    assert_int_equal(got.buffers[0].length, 4096);
    mc_segment_desc_deinit(&got);
    mc_rpc_meta rm = {.rpc_port = 15999};
    strcpy(rm.ip_or_host_name, "127.0.0.1");
    assert_int_equal(mc_metadata_put_rpc_meta(md, seg, &rm), MC_OK);
    mc_rpc_meta back;
    assert_int_equal(mc_metadata_get_rpc_meta(md, seg, &back), MC_OK);
    assert_int_equal(back.rpc_port, 15999);
    mc_metadata *raw = client(conn_of(b), 0);
    char key[128];
    snprintf(key, sizeof key, "mooncake/kvtest/ram/%s", seg);
    v = NULL;
    assert_int_equal(mc_metadata_get(raw, key, &v, &n), MC_OK);
    assert_non_null(strstr(v, "\"tcp_data_port\""));
    free(v);
    snprintf(key, sizeof key, "mooncake/kvtest/rpc_meta/%s", seg);
    char *enc = NULL;
    assert_int_equal(mc_rpc_meta_encode(&rm, &enc, &n), MC_OK);
    check_value(raw, key, enc, n);
    free(enc);
    assert_int_equal(mc_metadata_remove_segment(md, seg), MC_OK);
    assert_int_equal(mc_metadata_remove_rpc_meta(md, seg), MC_OK);
    assert_int_equal(mc_metadata_get_segment(md, seg, &got), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_metadata_remove_rpc_meta(md, seg), MC_OBJECT_NOT_FOUND);
    mc_segment_desc_deinit(&d);
    mc_metadata_destroy(raw);
    mc_metadata_destroy(md);
}

static void test_contract_http(void **state)
{
    (void)state;
    contract(B_HTTP);
}

static void test_contract_etcd(void **state)
{
    (void)state;
    contract(B_ETCD);
}

static void test_contract_redis(void **state)
{
    (void)state;
    contract(B_REDIS);
}

/* ---- concurrent callers on one client ------------------------------------------- */

typedef struct worker {
    mc_metadata *md;
    int id, errors;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < 50; i++) {
        char k[128], val[64];
        snprintf(k, sizeof k, "mooncake/test/threads/%d-%d-%d", (int)getpid(), w->id, i);
        int vl = snprintf(val, sizeof val, "{\"w\":%d,\"i\":%d}", w->id, i);
        char *v = NULL;
        size_t n = 0;
        if (mc_metadata_put(w->md, k, val, (size_t)vl) != MC_OK ||
            mc_metadata_get(w->md, k, &v, &n) != MC_OK || n != (size_t)vl ||
            memcmp(v, val, n) != 0 || mc_metadata_delete(w->md, k) != MC_OK)
            w->errors++;
        free(v);
    }
    return NULL;
}

static void threads(backend b)
{
    mc_metadata *md = client(conn_of(b), 0);
    pthread_t t[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){.md = md, .id = i};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].errors, 0);
    }
    mc_metadata_destroy(md);
}

static void test_threads_etcd(void **state)
{
    (void)state;
    threads(B_ETCD);
}

static void test_threads_redis(void **state)
{
    (void)state;
    threads(B_REDIS);
}

/* ---- servers that are down or wrong ---------------------------------------------- */

static void test_down(void **state)
{
    (void)state;
    char c[96];
    uint16_t dead = free_port();
    const char *forms[] = {"etcd://127.0.0.1:%u", "127.0.0.1:%u", "redis://127.0.0.1:%u"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(c, sizeof c, forms[i], (unsigned)dead);
        mc_metadata *md = client(c, 0);
        char *v = NULL;
        size_t n;
        assert_int_equal(mc_metadata_get(md, "k", &v, &n), MC_RPC_FAIL);
        assert_int_equal(mc_metadata_put(md, "k", "v", 1), MC_RPC_FAIL);
        assert_int_equal(mc_metadata_delete(md, "k"), MC_RPC_FAIL);
        mc_metadata_destroy(md);
    }
    /* a port that is not etcd (our HTTP metadata server): every endpoint fails, none
     * of them passes for a missing key */
    snprintf(c, sizeof c, "etcd://127.0.0.1:%u", (unsigned)mc_http_metadata_server_port(S.http));
    mc_metadata *md = client(c, 0);
    char *v = NULL;
    size_t n;
    assert_int_equal(mc_metadata_get(md, "k", &v, &n), MC_RPC_FAIL);
    mc_metadata_destroy(md);
}

/* ---- etcd: several endpoints ---------------------------------------------------- */

static void test_etcd_failover(void **state)
{
    (void)state;
    if (!S.etcd_conn[0])
        skip();
    uint16_t dead1 = free_port(), dead2 = free_port();
    char c[160];
    /* the live endpoint first, in the middle, last; ';' as well as ',' */
    const char *forms[] = {"etcd://127.0.0.1:%3$u,127.0.0.1:%1$u,127.0.0.1:%2$u",
                           "127.0.0.1:%1$u,127.0.0.1:%3$u,127.0.0.1:%2$u",
                           "etcd://127.0.0.1:%1$u;127.0.0.1:%2$u;127.0.0.1:%3$u"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(c, sizeof c, forms[i], (unsigned)dead1, (unsigned)dead2,
                 (unsigned)S.etcd_port);
        mc_metadata *md = client(c, 0);
        char k[128];
        ukey(k, sizeof k, "failover");
        for (int round = 0; round < 3; round++) { /* later calls start at the live one */
            assert_int_equal(mc_metadata_put(md, k, "v", 1), MC_OK);
            check_value(md, k, "v", 1);
            assert_int_equal(mc_metadata_delete(md, k), MC_OK);
            check_missing(md, k);
        }
        mc_metadata_destroy(md);
    }
}

/* ---- Redis: AUTH, SELECT, reconnect ----------------------------------------------- */

static void test_redis_auth_and_db(void **state)
{
    (void)state;
    if (!S.redis_conn[0])
        skip();
    char c[128], k[128];
    ukey(k, sizeof k, "auth");
    char *v = NULL;
    size_t n;
    /* no password, a wrong one: a configuration error, not "not found" */
    snprintf(c, sizeof c, "redis://127.0.0.1:%u", (unsigned)S.redis_pw_port);
    mc_metadata *md = client(c, 0);
    assert_int_equal(mc_metadata_get(md, k, &v, &n), MC_INVALID_PARAMS);
    assert_int_equal(mc_metadata_put(md, k, "v", 1), MC_INVALID_PARAMS);
    mc_metadata_destroy(md);
    snprintf(c, sizeof c, "redis://:wrong@127.0.0.1:%u", (unsigned)S.redis_pw_port);
    md = client(c, 0);
    assert_int_equal(mc_metadata_get(md, k, &v, &n), MC_INVALID_PARAMS);
    mc_metadata_destroy(md);
    /* the URL's password; then MC_REDIS_PASSWORD when the URL has none */
    snprintf(c, sizeof c, "redis://:s3cret@127.0.0.1:%u/1", (unsigned)S.redis_pw_port);
    mc_metadata *db1 = client(c, 0);
    assert_int_equal(mc_metadata_put(db1, k, "in-db-1", 7), MC_OK);
    setenv("MC_REDIS_PASSWORD", "s3cret", 1);
    snprintf(c, sizeof c, "redis://127.0.0.1:%u/2", (unsigned)S.redis_pw_port);
    mc_metadata *db2 = client(c, 0);
    check_missing(db2, k); /* SELECT: another database */
    setenv("MC_REDIS_DB_INDEX", "1", 1); /* upstream's variable, when the URL has no db */
    snprintf(c, sizeof c, "redis://127.0.0.1:%u", (unsigned)S.redis_pw_port);
    mc_metadata *env1 = client(c, 0);
    unsetenv("MC_REDIS_DB_INDEX");
    unsetenv("MC_REDIS_PASSWORD");
    check_value(env1, k, "in-db-1", 7);
    assert_int_equal(mc_metadata_delete(db2, k), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_metadata_delete(env1, k), MC_OK);
    mc_metadata_destroy(env1);
    mc_metadata_destroy(db2);
    mc_metadata_destroy(db1);
    /* a db the server does not have */
    snprintf(c, sizeof c, "redis://127.0.0.1:%u/999999", (unsigned)S.redis_port);
    md = client(c, 0);
    assert_int_equal(mc_metadata_get(md, k, &v, &n), MC_INVALID_PARAMS);
    mc_metadata_destroy(md);
}

static void test_redis_reconnect(void **state)
{
    (void)state;
    if (!S.redis_conn[0])
        skip();
    mc_metadata *md = client(S.redis_conn, 0);
    char k[128];
    ukey(k, sizeof k, "reconnect");
    assert_int_equal(mc_metadata_put(md, k, "before", 6), MC_OK);
    /* the server goes away: calls fail with a code, then it comes back empty on the same
     * port and the same client works again (its old connection is dead) */
    reap(S.redis);
    S.redis = 0;
    char *v = NULL;
    size_t n;
    assert_int_equal(mc_metadata_get(md, k, &v, &n), MC_RPC_FAIL);
    S.redis = start_redis(S.redis_port, NULL);
    assert_true(wait_serving(S.redis_conn, S.redis));
    check_missing(md, k); /* --save '': the restarted server is empty */
    assert_int_equal(mc_metadata_put(md, k, "after", 5), MC_OK);
    check_value(md, k, "after", 5);
    /* restarted while this client holds a live connection: repeated on a new one */
    reap(S.redis);
    S.redis = start_redis(S.redis_port, NULL);
    assert_true(wait_serving(S.redis_conn, S.redis));
    check_missing(md, k);
    assert_int_equal(mc_metadata_put(md, k, "again", 5), MC_OK);
    assert_int_equal(mc_metadata_delete(md, k), MC_OK);
    mc_metadata_destroy(md);
}

/* ---- the leader key's watch (election.h, what clients follow the leader by) ---- */

typedef struct watch_seen {
    pthread_mutex_t mu;
    int created;
    int64_t last;
    char leader[MC_ELECTION_ADDR_MAX];
} watch_seen;

typedef struct watch_run {
    mc_election *e;
    int64_t from;
    int rc;
    watch_seen *seen;
} watch_run;

static void on_view(void *ctx, const mc_election_view *v)
{
    watch_seen *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (!v) {
        s->created++;
    } else {
        s->last = v->version;
        snprintf(s->leader, sizeof s->leader, "%s", v->leader);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *watch_main(void *arg)
{
    watch_run *w = arg;
    w->rc = mc_election_watch(w->e, &w->from, 60000, on_view, w->seen);
    return NULL;
}

/* Polls until the watch reported version (or created when version is 0), 20 s. */
static void wait_seen(watch_seen *s, int64_t version, const char *leader)
{
    uint64_t deadline = now_ms() + 20000;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool ok = version ? s->last == version && strcmp(s->leader, leader) == 0
                          : s->created > 0;
        pthread_mutex_unlock(&s->mu);
        if (ok)
            return;
        if (now_ms() > deadline)
            fail_msg("the watch did not report view %lld of %s", (long long)version,
                     leader ? leader : "(created)");
        usleep(20000);
    }
}

static void test_election_watch(void **state)
{
    (void)state;
    const char *conn = conn_of(B_ETCD);
    char cid[64];
    snprintf(cid, sizeof cid, "watch-%d-%u", (int)getpid(), (unsigned)now_ms());
    mc_election *w, *cand;
    assert_int_equal(mc_election_create(conn, cid, 2, &w), MC_OK);
    assert_int_equal(mc_election_create(conn, cid, 2, &cand), MC_OK);
    assert_true(mc_election_watchable(w));
    watch_seen seen = {.mu = PTHREAD_MUTEX_INITIALIZER};
    watch_run run = {.e = w, .from = 0, .rc = -1, .seen = &seen};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch_main, &run), 0);
    wait_seen(&seen, 0, NULL);
    /* two leaders in turn: each put of the key is reported with its view */
    mc_election_view v1, v2;
    uint64_t until;
    assert_int_equal(mc_election_campaign(cand, "127.0.0.1:1111", &v1, &until), MC_OK);
    wait_seen(&seen, v1.version, "127.0.0.1:1111");
    assert_int_equal(mc_election_resign(cand), MC_OK);
    assert_int_equal(mc_election_campaign(cand, "127.0.0.1:2222", &v2, &until), MC_OK);
    assert_true(v2.version > v1.version);
    wait_seen(&seen, v2.version, "127.0.0.1:2222");
    /* stop ends the running watch (MC_OK) and every later one */
    mc_election_watch_stop(w);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(run.rc, MC_OK);
    assert_true(run.from > v2.version); /* resumes after the last event */
    assert_int_equal(mc_election_watch(w, &run.from, 60000, on_view, &seen), MC_OK);
    assert_int_equal(mc_election_resign(cand), MC_OK);
    mc_election_destroy(cand);
    mc_election_destroy(w);
    /* a watch from a revision catches up on what happened before it started */
    assert_int_equal(mc_election_create(conn, cid, 2, &w), MC_OK);
    assert_int_equal(mc_election_create(conn, cid, 2, &cand), MC_OK);
    mc_election_view v3;
    assert_int_equal(mc_election_campaign(cand, "127.0.0.1:3333", &v3, &until), MC_OK);
    watch_seen seen2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
    watch_run run2 = {.e = w, .from = v2.version, .rc = -1, .seen = &seen2};
    assert_int_equal(pthread_create(&th, NULL, watch_main, &run2), 0);
    wait_seen(&seen2, v3.version, "127.0.0.1:3333");
    mc_election_watch_stop(w);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(run2.rc, MC_OK);
    assert_int_equal(mc_election_resign(cand), MC_OK);
    mc_election_destroy(cand);
    mc_election_destroy(w);
}

static void test_election_watch_redis(void **state)
{
    (void)state;
    const char *conn = conn_of(B_REDIS);
    mc_election *w;
    assert_int_equal(mc_election_create(conn, "watch", 2, &w), MC_OK);
    assert_false(mc_election_watchable(w)); /* followed by polling the hash */
    int64_t from = 0;
    assert_int_equal(mc_election_watch(w, &from, 1000, on_view, NULL), MC_NOT_SUPPORTED);
    mc_election_destroy(w);
}

int main(void)
{
    mc_log_set_level(MC_LOG_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contract_http),   cmocka_unit_test(test_contract_etcd),
        cmocka_unit_test(test_contract_redis),  cmocka_unit_test(test_threads_etcd),
        cmocka_unit_test(test_threads_redis),   cmocka_unit_test(test_down),
        cmocka_unit_test(test_etcd_failover),   cmocka_unit_test(test_redis_auth_and_db),
        cmocka_unit_test(test_redis_reconnect), cmocka_unit_test(test_election_watch),
        cmocka_unit_test(test_election_watch_redis),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
