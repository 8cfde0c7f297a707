/* test_store_client.c: the store client (include/mooncake/store.h) against a real
 * mooncake_master process, with one or two in-process clients and forked-and-exec'd
 * client processes (this binary re-run with --child-*), all on 127.0.0.1.
 *
 * Covers API.md §5: zero-length objects, key limits, duplicate puts, duplicate keys in a
 * batch, concurrent puts of one key from two processes, a writer killed between
 * put_start and put_end, lease expiry during a read; plus replication across segments,
 * out-of-space, get_into capacities, leases and remove, the TCP and same-host paths,
 * upsert, handles outliving close, and a bounded multithreaded mix.
 *
 * The master binary comes from MC_TEST_MASTER_BIN (set by meson); when it is not built,
 * every test that needs it is skipped with a message. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/internal.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "mooncake/store.h"

extern char **environ;

#define MIB (1ull << 20)

/* ------------------------------------------------------------------------------------ */
/* A mooncake_master process                                                             */
/* ------------------------------------------------------------------------------------ */

typedef struct master_proc {
    pid_t pid;
    int out_fd; /* its stdout (kept open so it never gets SIGPIPE) */
    int port;
    int md_port; /* embedded HTTP metadata server, 0 when not enabled */
    char addr[64];
} master_proc;

static const char *master_bin(void)
{
    const char *p = getenv("MC_TEST_MASTER_BIN");
    if (!p || access(p, X_OK) != 0)
        return NULL;
    return p;
}

/* Starts a master on 127.0.0.1 with the given RPC port (0: a free one) and the extra
 * flags (NULL-terminated list). Returns 0, or -1 (logged). */
static int master_start_port(master_proc *m, int rpc_port, const char *const *extra)
{
    memset(m, 0, sizeof *m);
    const char *bin = master_bin();
    if (!bin)
        return -1;
    const char *argv[32];
    int n = 0;
    char portflag[32];
    snprintf(portflag, sizeof portflag, "--rpc_port=%d", rpc_port);
    argv[n++] = bin;
    argv[n++] = portflag;
    argv[n++] = "--rpc_address=127.0.0.1";
    argv[n++] = "--metrics_port=0";
    argv[n++] = "--metrics_host=127.0.0.1";
    argv[n++] = "--enable_metric_reporting=false";
    for (int i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    int pfd[2];
    if (pipe(pfd) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pfd[0]);
    int rc = posix_spawn(&m->pid, bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        return -1;
    }
    m->out_fd = pfd[0];
    char buf[4096];
    size_t len = 0;
    uint64_t deadline = mc_now_ms() + 10000;
    while (mc_now_ms() < deadline && len < sizeof buf - 1) {
        struct pollfd p = {.fd = m->out_fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t r = read(m->out_fd, buf + len, sizeof buf - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        buf[len] = '\0';
        if (strstr(buf, "ready")) {
            const char *l = strstr(buf, "RPC listening on 127.0.0.1:");
            const char *md = strstr(buf, "HTTP metadata server on http://127.0.0.1:");
            if (md)
                sscanf(md, "HTTP metadata server on http://127.0.0.1:%d", &m->md_port);
            if (l && sscanf(l, "RPC listening on 127.0.0.1:%d", &m->port) == 1) {
                snprintf(m->addr, sizeof m->addr, "127.0.0.1:%d", m->port);
                return 0;
            }
            break;
        }
    }
    fprintf(stderr, "master did not start: %s\n", buf);
    kill(m->pid, SIGKILL);
    waitpid(m->pid, NULL, 0);
    close(m->out_fd);
    return -1;
}

static int master_start(master_proc *m, const char *const *extra)
{
    return master_start_port(m, 0, extra);
}

static int wait_pid(pid_t pid, int timeout_ms, int *status)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0)
            return -1;
        if (mc_now_ms() > deadline)
            return -1;
        mc_sleep_ms(10);
    }
}

static void master_stop(master_proc *m)
{
    if (m->pid <= 0)
        return;
    kill(m->pid, SIGTERM);
    int st;
    if (wait_pid(m->pid, 5000, &st) != 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, &st, 0);
    }
    close(m->out_fd);
    m->pid = 0;
}

/* ------------------------------------------------------------------------------------ */
/* Helpers                                                                               */
/* ------------------------------------------------------------------------------------ */

/* A config for a store on 127.0.0.1 with P2P metadata, master `master` and a segment of
 * seg bytes; the rest as mc_store_config_init. */
static void store_config_p2p(mc_store_config *c, const char *master, uint64_t seg)
{
    mc_store_config_init(c);
    c->local_hostname = "127.0.0.1";
    c->metadata_server = "P2PHANDSHAKE";
    c->global_segment_size = seg;
    c->master_server_addr = master;
}

static mc_store *store_up_md(const char *master, uint64_t seg, uint64_t lbuf, const char *md,
                             uint32_t hb_ms)
{
    mc_store *s = NULL;
    assert_int_equal(mc_store_create(&s), MC_OK);
    mc_store_config c;
    store_config_p2p(&c, master, seg);
    c.metadata_server = md;
    c.heartbeat_interval_ms = hb_ms;
    c.local_buffer_size = lbuf;
    c.protocol = "tcp";
    int rc = mc_store_setup(s, &c);
    if (rc != MC_OK)
        fail_msg("setup failed: %s (%d)", mc_strerror(rc), rc);
    return s;
}

static mc_store *store_up_opts(const char *master, uint64_t seg, uint64_t lbuf)
{
    return store_up_md(master, seg, lbuf, "P2PHANDSHAKE", 0);
}

static mc_store *store_up(const master_proc *m, uint64_t seg)
{
    return store_up_opts(m->addr, seg, 16 * MIB);
}

static void fill(void *p, size_t n, uint32_t seed)
{
    unsigned char *b = p;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (unsigned char)x;
    }
}

static int put_s(mc_store *s, const char *key, const void *v, size_t n)
{
    return mc_store_put(s, key, strlen(key), v, n, NULL);
}

/* put_s into s's own segment (preferred_segment: its hostname). */
static int put_own(mc_store *s, const char *key, const void *v, size_t n)
{
    char h[64];
    mc_store_get_hostname(s, h, sizeof h);
    mc_store_replicate_config rc;
    mc_store_replicate_config_init(&rc);
    rc.preferred_segment = h;
    return mc_store_put(s, key, strlen(key), v, n, &rc);
}

static int64_t get_s(mc_store *s, const char *key, void *buf, size_t cap)
{
    return mc_store_get_into(s, key, strlen(key), buf, cap);
}

/* Per-test state: one master. */
typedef struct fixture {
    master_proc m;
    bool have;
} fixture;

static int fixture_start(void **state, const char *const *extra)
{
    fixture *f = calloc(1, sizeof *f);
    if (master_bin() && master_start(&f->m, extra) == 0)
        f->have = true;
    *state = f;
    return 0;
}

static int setup_default(void **state)
{
    return fixture_start(state, NULL);
}

#define SHORT_LEASE_MS 200 /* setup_short_lease's read lease TTL */
#define STR_(x) #x
#define STR(x) STR_(x)
#define SHORT_LEASE_FLAG "--default_kv_lease_ttl=" STR(SHORT_LEASE_MS)

static int setup_short_lease(void **state)
{
    static const char *const flags[] = {SHORT_LEASE_FLAG, NULL};
    return fixture_start(state, flags);
}

static int setup_fast_discard(void **state)
{
    static const char *const flags[] = {"--put_start_discard_timeout_sec=1", NULL};
    return fixture_start(state, flags);
}

static int setup_http_md(void **state)
{
    static const char *const flags[] = {"--enable_http_metadata_server=true",
                                        "--http_metadata_server_port=0",
                                        "--http_metadata_server_host=127.0.0.1", NULL};
    return fixture_start(state, flags);
}

static int teardown_master(void **state)
{
    fixture *f = *state;
    if (f->have)
        master_stop(&f->m);
    free(f);
    mc__store_test_hook = NULL;
    return 0;
}

/* A master with a shared directory (--root_fs_dir) and setup_short_lease's lease. */
static char sfs_root[64];

static int setup_shared_fs(void **state)
{
    static char flag[96];
    snprintf(sfs_root, sizeof sfs_root, "/tmp/mc_sfs_XXXXXX");
    if (!mkdtemp(sfs_root))
        return -1;
    snprintf(flag, sizeof flag, "--root_fs_dir=%s", sfs_root);
    static const char *flags[] = {flag, SHORT_LEASE_FLAG, NULL};
    return fixture_start(state, flags);
}

static pid_t held_child; /* test_disk_hedge_next_to_stalled_memory's child, until reaped */

static int teardown_shared_fs(void **state)
{
    if (held_child > 0) { /* test_disk_hedge_next_to_stalled_memory stopped at a check */
        kill(held_child, SIGKILL);
        waitpid(held_child, NULL, 0);
        held_child = 0;
    }
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sfs_root);
    int rc = system(cmd);
    (void)rc;
    return teardown_master(state);
}

#define NEED_MASTER(f)                                                                     \
    do {                                                                                   \
        if (!(f)->have) {                                                                  \
            fprintf(stderr, "SKIP: mooncake_master is not built (MC_TEST_MASTER_BIN=%s)\n", \
                    getenv("MC_TEST_MASTER_BIN") ? getenv("MC_TEST_MASTER_BIN") : "");   \
            skip();                                                                        \
        }                                                                                  \
    } while (0)

/* Spawns this binary with the given arguments (a client child process). */
static pid_t spawn_self(const char *const *args)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = "/proc/self/exe";
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char self[4096];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(l > 0);
    self[l] = '\0';
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, self, NULL, NULL, (char *const *)argv, environ), 0);
    return pid;
}

/* ------------------------------------------------------------------------------------ */
/* Tests without a master                                                                */
/* ------------------------------------------------------------------------------------ */

static void test_not_set_up(void **state)
{
    (void)state;
    mc_store *s = NULL;
    assert_int_equal(mc_store_create(&s), MC_OK);
    char buf[64];
    assert_int_equal(mc_store_put(s, "k", 1, "v", 1, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_get_into(s, "k", 1, buf, sizeof buf), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_is_exist(s, "k", 1), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_remove(s, "k", 1, false), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_remove_all(s, true), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_get_hostname(s, buf, sizeof buf), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_health_check(s), MC_STORE_NOT_INITIALIZED);
    mc_store_key k = {"k", 1};
    int r = 7;
    assert_int_equal(mc_store_batch_is_exist(s, &k, 1, &r), MC_INVALID_PARAMS);
    assert_int_equal(r, MC_INVALID_PARAMS);
    assert_int_equal(mc_store_batch_is_exist(s, NULL, 0, &r), MC_OK); /* empty: fine */
    assert_int_equal(mc_store_close(s), MC_OK);
    assert_int_equal(mc_store_close(s), MC_OK);
    mc_store_destroy(s);
    mc_store_destroy(NULL);
}

static void test_setup_validation(void **state)
{
    (void)state;
    mc_store *s = NULL;
    assert_int_equal(mc_store_create(&s), MC_OK);
    mc_store_config c;
    mc_store_config_init(&c);
    c.metadata_server = "P2PHANDSHAKE";
    c.master_server_addr = "127.0.0.1:1";
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS); /* no hostname */
    c.local_hostname = "";
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.local_hostname = "127.0.0.1:99999";
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.local_hostname = "127.0.0.1:x";
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.local_hostname = "127.0.0.1";
    c.metadata_server = NULL;
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.metadata_server = "ftp://x";
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.metadata_server = "P2PHANDSHAKE";
    c.global_segment_size = 100; /* below 1 KiB */
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.global_segment_size = MIB;
    c.local_buffer_size = (1ull << 40) + 1;
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.local_buffer_size = 512;
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.local_buffer_size = MIB;
    c.client_http_port = 70000;
    assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    c.client_http_port = 9300;
    /* HA masters are followed through etcd (docs/ha.md); other locators are refused */
    c.master_server_addr = "k8s://default/mooncake";
    assert_int_equal(mc_store_setup(s, &c), MC_NOT_SUPPORTED);
    c.master_server_addr = "127.0.0.1:1"; /* nobody listens: RPC failure, nothing left */
    int rc = mc_store_setup(s, &c);
    assert_true(rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT);
    assert_false(mc_store_is_setup(s));
    assert_int_equal(mc_store_health_check(s), MC_STORE_NOT_INITIALIZED);
    mc_store_destroy(s);
}

/* The environment policy (common/env.h): a bad value of any variable setup reads fails
 * setup with INVALID_PARAMS before anything starts; unset means the default. Also the
 * host:port forms local_hostname refuses (parsed by mc_sock_parse_hostport). */
static void test_setup_env_and_hostnames(void **state)
{
    (void)state;
    mc_store *s = NULL;
    assert_int_equal(mc_store_create(&s), MC_OK);
    mc_store_config c;
    mc_store_config_init(&c);
    c.metadata_server = "P2PHANDSHAKE";
    c.master_server_addr = "127.0.0.1:1";
    c.local_hostname = "127.0.0.1";
    static const char *const bad[][2] = {
        {"MC_STORE_HEARTBEAT_MS", "5"},          {"MC_STORE_HEARTBEAT_MS", "abc"},
        {"MC_STORE_CLIENT_MIN_PORT", "0"},       {"MC_STORE_CLIENT_MAX_PORT", "70000"},
        {"MC_STORE_CLIENT_SETUP_RETRIES", "-1"}, {"MC_RPC_TIMEOUT_MS", "0"},
        {"MC_RPC_TIMEOUT_MS", "10x"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(setenv(bad[i][0], bad[i][1], 1), 0);
        assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
        assert_false(mc_store_is_setup(s));
        unsetenv(bad[i][0]);
    }
    /* an explicit heartbeat interval means MC_STORE_HEARTBEAT_MS is not read; an empty
     * value is unset: both then fail only at the master nobody serves */
    setenv("MC_STORE_HEARTBEAT_MS", "abc", 1);
    c.heartbeat_interval_ms = 100;
    setenv("MC_RPC_TIMEOUT_MS", "", 1);
    int rc = mc_store_setup(s, &c);
    assert_true(rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT);
    unsetenv("MC_STORE_HEARTBEAT_MS");
    unsetenv("MC_RPC_TIMEOUT_MS");
    c.heartbeat_interval_ms = 0;
    static const char *const hosts[] = {"127.0.0.1:", "[::1", "[::1]x", "a b", "a/b:80",
                                        "127.0.0.1:0", ":80"};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        c.local_hostname = hosts[i];
        assert_int_equal(mc_store_setup(s, &c), MC_INVALID_PARAMS);
    }
    mc_store_destroy(s);
}

/* ------------------------------------------------------------------------------------ */
/* Tests with a master                                                                   */
/* ------------------------------------------------------------------------------------ */

static void test_lifecycle_hostname(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *a = store_up(&f->m, 4 * MIB);
    mc_store *b = store_up(&f->m, 4 * MIB);
    char ha[128], hb[128];
    int la = mc_store_get_hostname(a, ha, sizeof ha);
    assert_true(la > 0);
    assert_int_equal((size_t)la, strlen(ha));
    int lb = mc_store_get_hostname(b, hb, sizeof hb);
    assert_int_equal(lb, (int)strlen(hb));
    assert_string_not_equal(ha, hb);
    int port = 0;
    assert_int_equal(sscanf(ha, "127.0.0.1:%d", &port), 1);
    assert_in_range(port, 12300, 14300);
    char tiny[4];
    assert_int_equal(mc_store_get_hostname(a, tiny, sizeof tiny), MC_BUFFER_OVERFLOW);
    assert_int_equal(mc_store_health_check(a), MC_STORE_HEALTHY);
    assert_non_null(mc_store_engine(a));

    /* Setting up twice is refused; close is idempotent; setup again works. */
    mc_store_config c;
    mc_store_config_init(&c);
    c.local_hostname = "127.0.0.1";
    c.metadata_server = "P2PHANDSHAKE";
    c.master_server_addr = f->m.addr;
    assert_int_equal(mc_store_setup(a, &c), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_close(a), MC_OK);
    assert_int_equal(mc_store_close(a), MC_OK);
    assert_int_equal(put_s(a, "x", "1", 1), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_health_check(a), MC_STORE_NOT_INITIALIZED);
    c.global_segment_size = 4 * MIB;
    assert_int_equal(mc_store_setup(a, &c), MC_OK);
    assert_int_equal(put_s(a, "x", "1", 1), MC_OK);
    char v[2] = {0};
    assert_int_equal(get_s(b, "x", v, sizeof v), 1);
    assert_int_equal(v[0], '1');
    mc_store_destroy(a);
    mc_store_destroy(b);
}

static void test_roundtrip_sizes(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *a = store_up(&f->m, 64 * MIB);
    mc_store *b = store_up(&f->m, 0); /* pure client: reads over the engine */
    static const size_t sizes[] = {0, 1, 4096, 16 * MIB};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        char key[32];
        snprintf(key, sizeof key, "size-%zu", n);
        unsigned char *v = malloc(n + 1), *got = malloc(n + 1);
        fill(v, n, (uint32_t)i + 1);
        assert_int_equal(put_s(b, key, v, n), MC_OK); /* b has no segment: lands on a */
        assert_int_equal(mc_store_is_exist(a, key, strlen(key)), 1);
        assert_int_equal(mc_store_get_size(b, key, strlen(key)), (int64_t)n);
        for (int who = 0; who < 2; who++) {
            mc_store *s = who ? b : a;
            memset(got, 0xEE, n + 1);
            assert_int_equal(get_s(s, key, got, n), (int64_t)n);
            assert_memory_equal(got, v, n);
            void *p = NULL;
            assert_int_equal(mc_store_get_alloc(s, key, strlen(key), &p), (int64_t)n);
            assert_non_null(p);
            assert_memory_equal(p, v, n);
            free(p);
            mc_store_buffer *h = NULL;
            assert_int_equal(mc_store_get_buffer(s, key, strlen(key), &h), MC_OK);
            assert_non_null(h);
            assert_int_equal(mc_store_buffer_size(h), n);
            if (n)
                assert_memory_equal(mc_store_buffer_data(h), v, n);
            else
                assert_null(mc_store_buffer_data(h));
            mc_store_buffer_free(h);
        }
        free(v);
        free(got);
    }
    /* A miss. */
    char buf[8];
    assert_int_equal(get_s(a, "missing", buf, sizeof buf), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_is_exist(a, "missing", 7), 0);
    assert_int_equal(mc_store_get_size(a, "missing", 7), MC_OBJECT_NOT_FOUND);
    void *p = (void *)1;
    assert_int_equal(mc_store_get_alloc(a, "missing", 7, &p), MC_OBJECT_NOT_FOUND);
    assert_null(p);
    mc_store_buffer *h = (void *)1;
    assert_int_equal(mc_store_get_buffer(a, "missing", 7, &h), MC_OBJECT_NOT_FOUND);
    assert_null(h);
    mc_store_destroy(b);
    mc_store_destroy(a);
}

static void test_keys(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = store_up(&f->m, 16 * MIB);
    char *longkey = malloc(4097);
    memset(longkey, 'K', 4097);
    const struct {
        const char *k;
        size_t n;
    } keys[] = {
        {"a/b:c@1 2%3", 11},
        {"\xe9\x94\xae-\xc3\xbc", 7}, /* "键-ü" in UTF-8 */
        {longkey, 4096},
        {"nul\0inside", 10},
    };
    for (size_t i = 0; i < 4; i++) {
        char v[16], got[16];
        snprintf(v, sizeof v, "value-%zu", i);
        assert_int_equal(mc_store_put(s, keys[i].k, keys[i].n, v, strlen(v), NULL), MC_OK);
        assert_int_equal(mc_store_is_exist(s, keys[i].k, keys[i].n), 1);
        assert_int_equal(mc_store_get_into(s, keys[i].k, keys[i].n, got, sizeof got),
                         (int64_t)strlen(v));
        assert_memory_equal(got, v, strlen(v));
    }
    /* "nul" alone is another key. */
    assert_int_equal(mc_store_is_exist(s, "nul", 3), 0);
    /* Removal: plain, and by regex (the objects are leased by the reads: force). */
    assert_int_equal(mc_store_remove(s, keys[0].k, keys[0].n, true), MC_OK);
    assert_int_equal(mc_store_is_exist(s, keys[0].k, keys[0].n), 0);
    assert_int_equal(mc_store_remove_by_regex(s, "^\xe9\x94\xae-", 5, true), 1);
    assert_int_equal(mc_store_is_exist(s, keys[1].k, keys[1].n), 0);
    assert_int_equal(mc_store_remove_by_regex(s, "^K{4096}$", 9, true), 1);
    assert_int_equal(mc_store_is_exist(s, longkey, 4096), 0);
    assert_int_equal(mc_store_remove_by_regex(s, "(", 1, true), MC_INVALID_PARAMS);

    /* Empty and 4097-byte keys: INVALID_PARAMS everywhere, nothing stored. */
    char buf[4];
    assert_int_equal(mc_store_put(s, "", 0, "v", 1, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_put(s, longkey, 4097, "v", 1, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_put(s, NULL, 3, "v", 1, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_get_into(s, "", 0, buf, 4), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_get_into(s, longkey, 4097, buf, 4), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_is_exist(s, longkey, 4097), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_remove(s, "", 0, true), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_is_exist(s, longkey, 4096), 0);
    mc_store_key bk[3] = {{"ok-key", 6}, {"", 0}, {longkey, 4097}};
    const void *vals[3] = {"a", "b", "c"};
    uint64_t sz[3] = {1, 1, 1};
    int res[3];
    assert_int_equal(mc_store_batch_put_from(s, bk, 3, vals, sz, NULL, res), MC_OK);
    assert_int_equal(res[0], MC_OK);
    assert_int_equal(res[1], MC_INVALID_PARAMS);
    assert_int_equal(res[2], MC_INVALID_PARAMS);
    assert_int_equal(mc_store_batch_is_exist(s, bk, 3, res), MC_OK);
    assert_int_equal(res[0], 1);
    assert_int_equal(res[1], MC_INVALID_PARAMS);
    assert_int_equal(res[2], MC_INVALID_PARAMS);
    free(longkey);
    mc_store_destroy(s);
}

static void test_get_into_capacity_and_dup_put(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = store_up(&f->m, 16 * MIB);
    char v[100];
    fill(v, sizeof v, 9);
    assert_int_equal(put_s(s, "cap", v, sizeof v), MC_OK);
    char small[99], big[300];
    assert_int_equal(get_s(s, "cap", small, sizeof small), MC_INVALID_PARAMS);
    memset(big, 0x5A, sizeof big);
    assert_int_equal(get_s(s, "cap", big, sizeof big), 100);
    assert_memory_equal(big, v, 100);
    for (size_t i = 100; i < sizeof big; i++)
        assert_int_equal((unsigned char)big[i], 0x5A); /* the rest is untouched */
    assert_int_equal(get_s(s, "cap", NULL, 10), MC_INVALID_PARAMS);

    /* A second put keeps the first value and returns 0. */
    assert_int_equal(put_s(s, "dup", "first", 5), MC_OK);
    assert_int_equal(put_s(s, "dup", "second!", 7), MC_OK);
    char got[16];
    assert_int_equal(get_s(s, "dup", got, sizeof got), 5);
    assert_memory_equal(got, "first", 5);

    /* Zero-length: a real object. */
    assert_int_equal(put_s(s, "empty", "", 0), MC_OK);
    assert_int_equal(mc_store_is_exist(s, "empty", 5), 1);
    assert_int_equal(get_s(s, "empty", NULL, 0), 0);
    assert_int_equal(mc_store_get_size(s, "empty", 5), 0);

    /* put_parts concatenates. */
    mc_store_iov parts[3] = {{"ab", 2}, {"", 0}, {"cde", 3}};
    assert_int_equal(mc_store_put_parts(s, "parts", 5, parts, 3, NULL), MC_OK);
    assert_int_equal(get_s(s, "parts", got, sizeof got), 5);
    assert_memory_equal(got, "abcde", 5);

    /* Memory that was never registered, from the heap, and registration round trip. */
    size_t n = 3 * MIB + 7;
    unsigned char *heap = malloc(n), *back = malloc(n);
    fill(heap, n, 77);
    assert_int_equal(mc_store_put(s, "heap", 4, heap, n, NULL), MC_OK);
    assert_int_equal(mc_store_get_into(s, "heap", 4, back, n), (int64_t)n);
    assert_memory_equal(heap, back, n);
    assert_int_equal(mc_store_register_buffer(s, back, n), MC_OK);
    memset(back, 0, n);
    assert_int_equal(mc_store_get_into(s, "heap", 4, back, n), (int64_t)n);
    assert_memory_equal(heap, back, n);
    assert_int_equal(mc_store_unregister_buffer(s, back), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(s, back), MC_INVALID_PARAMS);
    free(heap);
    free(back);
    mc_store_destroy(s);
}

/* Log lines captured by a sink (the setup messages' wording is part of the fix). */
static char captured[8192];

static void capture_sink(mc_log_level level, const char *tag, const char *msg, void *ctx)
{
    (void)level;
    (void)tag;
    (void)ctx;
    size_t l = strlen(captured);
    snprintf(captured + l, sizeof captured - l, "%s\n", msg);
}

/* Setup failures say what failed: a protocol this build has no transport for (and how to
 * run anyway), a global segment the process cannot map (INVALID_PARAMS, as upstream's
 * real_client setup_internal; not the master pool's NO_AVAILABLE_HANDLE). */
static void test_setup_failure_messages(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = NULL;
    assert_int_equal(mc_store_create(&s), MC_OK);
    mc_store_config c;
    mc_store_config_init(&c);
    c.local_hostname = "127.0.0.1";
    c.metadata_server = "P2PHANDSHAKE";
    c.master_server_addr = f->m.addr;
    c.protocol = "rdma";
    unsetenv("MC_FORCE_TCP");
    captured[0] = '\0';
    mc_log_set_sink(capture_sink, NULL);
    int rc = mc_store_setup(s, &c);
    mc_log_set_sink(NULL, NULL);
    assert_int_equal(rc, MC_NOT_SUPPORTED);
    assert_non_null(strstr(captured, "protocol \"rdma\" is not available"));
    assert_non_null(strstr(captured, "protocol=\"tcp\""));
    assert_non_null(strstr(captured, "MC_FORCE_TCP=1"));
    assert_null(strstr(captured, "automatic port"));

    c.protocol = "tcp";
    c.global_segment_size = MC_STORE_MAX_SEGMENT_SIZE; /* 1 PiB: more than any mmap */
    captured[0] = '\0';
    mc_log_set_sink(capture_sink, NULL);
    rc = mc_store_setup(s, &c);
    mc_log_set_sink(NULL, NULL);
    assert_int_equal(rc, MC_INVALID_PARAMS);
    assert_non_null(strstr(captured, "cannot allocate the 1125899906842624-byte global "
                                     "segment in this process"));
    assert_false(mc_store_is_setup(s));
    c.global_segment_size = 4 * MIB; /* nothing was left behind: a normal setup works */
    assert_int_equal(mc_store_setup(s, &c), MC_OK);
    mc_store_destroy(s);
}

/* Caller memory is used as given, except that a range starting inside a buffer
 * registered with mc_store_register_buffer must end inside it: every zero-copy form
 * refuses an overrun with MC_INVALID_PARAMS before any transfer (nothing written,
 * nothing stored); after unregister_buffer the memory is plain caller memory again. */
static void test_registered_bounds(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *a = store_up(&f->m, 16 * MIB);
    mc_store *b = store_up(&f->m, 0); /* pure client: its reads and writes use the engine */
    mc_store *stores[2] = {a, b};
    unsigned char *mem = malloc(16384);
    fill(mem, 16384, 3);
    assert_int_equal(put_s(a, "rb", mem, 100), MC_OK);
    for (int w = 0; w < 2; w++) {
        mc_store *s = stores[w];
        assert_int_equal(mc_store_register_buffer(s, mem, 4096), MC_OK);
        memset(mem + 3000, 0x5A, 3000);
        /* get_into: overrun refused, the bytes past the buffer untouched */
        assert_int_equal(get_s(s, "rb", mem + 4090, 100), MC_INVALID_PARAMS);
        for (size_t i = 3000; i < 6000; i++)
            assert_int_equal(mem[i], 0x5A);
        assert_int_equal(get_s(s, "rb", mem + 3996, 100), 100); /* ends at the end: fine */
        assert_memory_equal(mem + 3996, mem, 100);
        assert_int_equal(get_s(s, "rb", mem + 8192, 100), 100); /* outside: caller memory */
        /* writes: refused, nothing stored */
        assert_int_equal(mc_store_put(s, "rb-put", 6, mem + 4000, 200, NULL), MC_INVALID_PARAMS);
        assert_int_equal(mc_store_upsert(s, "rb-put", 6, mem + 4000, 200, NULL),
                         MC_INVALID_PARAMS);
        mc_store_iov parts[2] = {{mem, 10}, {mem + 4095, 2}};
        assert_int_equal(mc_store_put_parts(s, "rb-put", 6, parts, 2, NULL), MC_INVALID_PARAMS);
        assert_int_equal(mc_store_is_exist(s, "rb-put", 6), 0);
        /* batch forms: per key */
        char k0[16], k1[16];
        snprintf(k0, sizeof k0, "rb-b0-%d", w);
        snprintf(k1, sizeof k1, "rb-b1-%d", w);
        mc_store_key keys[2] = {{k0, strlen(k0)}, {k1, strlen(k1)}};
        const void *vals[2] = {mem, mem + 4000};
        uint64_t sizes[2] = {50, 97};
        int wr[2];
        assert_int_equal(mc_store_batch_put_from(s, keys, 2, vals, sizes, NULL, wr), MC_OK);
        assert_int_equal(wr[0], MC_OK);
        assert_int_equal(wr[1], MC_INVALID_PARAMS);
        assert_int_equal(mc_store_is_exist(s, k1, strlen(k1)), 0);
        assert_int_equal(mc_store_batch_upsert_from(s, keys, 2, vals, sizes, NULL, wr), MC_OK);
        assert_int_equal(wr[1], MC_INVALID_PARAMS);
        mc_store_iov ok_iov[1] = {{mem, 20}}, bad_iov[2] = {{mem + 8000, 10}, {mem + 4090, 7}};
        const mc_store_iov *iovs[2] = {ok_iov, bad_iov};
        size_t cnt[2] = {1, 2};
        assert_int_equal(
            mc_store_batch_put_from_multi_buffers(s, keys, 2, iovs, cnt, NULL, wr), MC_OK);
        assert_int_equal(wr[1], MC_INVALID_PARAMS);
        assert_int_equal(
            mc_store_batch_upsert_from_multi_buffers(s, keys, 2, iovs, cnt, NULL, wr), MC_OK);
        assert_int_equal(wr[1], MC_INVALID_PARAMS);
        mc_store_key rk[2] = {{"rb", 2}, {"rb", 2}};
        void *bufs[2] = {mem + 3000, mem + 4090};
        uint64_t caps[2] = {100, 100};
        int64_t rr[2];
        assert_int_equal(mc_store_batch_get_into(s, rk, 2, bufs, caps, rr), MC_OK);
        assert_int_equal(rr[0], 100);
        assert_int_equal(rr[1], MC_INVALID_PARAMS);
        mc_store_iov g0[1] = {{mem + 5000, 100}}, g1[2] = {{mem + 9000, 50}, {mem + 4080, 50}};
        const mc_store_iov *giovs[2] = {g0, g1};
        assert_int_equal(
            mc_store_batch_get_into_multi_buffers(s, rk, 2, giovs, cnt, false, rr), MC_OK);
        assert_int_equal(rr[0], 100);
        assert_int_equal(rr[1], MC_INVALID_PARAMS);
        /* an overlapping registration that holds the whole range makes it fine */
        assert_int_equal(mc_store_register_buffer(s, mem + 2048, 8192), MC_OK);
        assert_int_equal(get_s(s, "rb", mem + 4090, 100), 100);
        assert_int_equal(get_s(s, "rb", mem + 10200, 100), MC_INVALID_PARAMS);
        assert_int_equal(mc_store_unregister_buffer(s, mem + 2048), MC_OK);
        assert_int_equal(get_s(s, "rb", mem + 4090, 100), MC_INVALID_PARAMS);
        /* unregistered: plain caller memory again, read into without any fault */
        assert_int_equal(mc_store_unregister_buffer(s, mem), MC_OK);
        memset(mem + 4090, 0, 100);
        assert_int_equal(get_s(s, "rb", mem + 4090, 100), 100);
        assert_memory_equal(mem + 4090, mem, 100);
    }
    free(mem);
    mc_store_destroy(a);
    mc_store_destroy(b);
}

static void test_batches(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *a = store_up(&f->m, 32 * MIB);
    mc_store *b = store_up(&f->m, 32 * MIB);
    enum { N = 40 };
    mc_store_key keys[N];
    char names[N][16];
    unsigned char *vals[N];
    uint64_t sizes[N];
    int res[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "b-%d", i % 30); /* 10 duplicates */
        keys[i] = (mc_store_key){names[i], strlen(names[i])};
        sizes[i] = 1000 + (uint64_t)(i % 30) * 512;
        vals[i] = malloc(sizes[i]);
        fill(vals[i], sizes[i], (uint32_t)(i % 30));
    }
    assert_int_equal(mc_store_batch_put_from(a, keys, N, (const void *const *)vals, sizes, NULL,
                                             res),
                     MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i], MC_OK);
    /* Read everything from the other client; duplicates each get their own copy. */
    void *bufs[N];
    uint64_t caps[N];
    int64_t got[N];
    for (int i = 0; i < N; i++) {
        caps[i] = sizes[i] + 10;
        bufs[i] = calloc(1, caps[i]);
    }
    assert_int_equal(mc_store_batch_get_into(b, keys, N, bufs, caps, got), MC_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(got[i], (int64_t)sizes[i]);
        assert_memory_equal(bufs[i], vals[i], sizes[i]);
    }
    /* The case: the same key twice. */
    mc_store_key kk[2] = {keys[0], keys[0]};
    void *pp[2] = {calloc(1, sizes[0]), calloc(1, sizes[0])};
    uint64_t nn[2] = {sizes[0], sizes[0]};
    assert_int_equal(mc_store_batch_get_into(a, kk, 2, pp, nn, got), MC_OK);
    assert_int_equal(got[0], (int64_t)sizes[0]);
    assert_int_equal(got[1], (int64_t)sizes[0]);
    assert_memory_equal(pp[0], vals[0], sizes[0]);
    assert_memory_equal(pp[1], vals[0], sizes[0]);
    free(pp[0]);
    free(pp[1]);
    /* Existence, sizes, a miss inside a batch, empty batches. */
    mc_store_key mixed[3] = {keys[1], {"nope", 4}, keys[1]};
    int ex[3];
    assert_int_equal(mc_store_batch_is_exist(b, mixed, 3, ex), MC_OK);
    assert_int_equal(ex[0], 1);
    assert_int_equal(ex[1], 0);
    assert_int_equal(ex[2], 1);
    void *mb[3] = {bufs[1], bufs[2], bufs[3]};
    uint64_t mc[3] = {caps[1], caps[2], caps[3]};
    assert_int_equal(mc_store_batch_get_into(b, mixed, 3, mb, mc, got), MC_OK);
    assert_int_equal(got[0], (int64_t)sizes[1]);
    assert_int_equal(got[1], MC_OBJECT_NOT_FOUND);
    assert_int_equal(got[2], (int64_t)sizes[1]);
    assert_int_equal(mc_store_batch_get_into(b, keys, 0, NULL, NULL, got), MC_OK);
    assert_int_equal(mc_store_batch_put_from(b, NULL, 0, NULL, NULL, NULL, res), MC_OK);

    /* Multi-buffer put and get (scatter/gather), with prefer_alloc_in_same_node. */
    unsigned char p1[300], p2[500], q1[100], q2[700];
    fill(p1, sizeof p1, 1);
    fill(p2, sizeof p2, 2);
    mc_store_iov in[2] = {{p1, sizeof p1}, {p2, sizeof p2}};
    const mc_store_iov *ins[1] = {in};
    size_t cnt[1] = {2};
    mc_store_key mk[1] = {{"multi", 5}};
    mc_store_replicate_config rc;
    mc_store_replicate_config_init(&rc);
    rc.prefer_alloc_in_same_node = true;
    assert_int_equal(mc_store_batch_put_from_multi_buffers(b, mk, 1, ins, cnt, &rc, res), MC_OK);
    assert_int_equal(res[0], MC_OK);
    mc_store_replica_list rl;
    assert_int_equal(mc_store_get_replica_desc(b, "multi", 5, &rl), MC_OK);
    assert_int_equal(rl.n, 1);
    char hb[64];
    mc_store_get_hostname(b, hb, sizeof hb);
    assert_string_equal(rl.replicas[0].transport_endpoint, hb); /* same node first */
    assert_int_equal(rl.replicas[0].size, 800);
    assert_true(rl.lease_ttl_ms > 0);
    /* prefer_alloc_in_same_node is refused by the plain puts, as upstream. */
    assert_int_equal(mc_store_put(b, "x", 1, "y", 1, &rc), MC_INVALID_PARAMS);
    mc_store_iov out[2] = {{q1, sizeof q1}, {q2, sizeof q2}};
    const mc_store_iov *outs[1] = {out};
    assert_int_equal(mc_store_batch_get_into_multi_buffers(a, mk, 1, outs, cnt, false, got),
                     MC_OK);
    assert_int_equal(got[0], 800);
    assert_memory_equal(q1, p1, 100);
    assert_memory_equal(q2, p1 + 100, 200);
    assert_memory_equal(q2 + 200, p2, 500);
    mc_store_iov shortv[1] = {{q2, 700}};
    const mc_store_iov *shorts[1] = {shortv};
    size_t one[1] = {1};
    assert_int_equal(mc_store_batch_get_into_multi_buffers(a, mk, 1, shorts, one, false, got),
                     MC_OK);
    assert_int_equal(got[0], MC_INVALID_PARAMS);

    /* get_batch-style allocation and batch handles. */
    void *outp[N];
    assert_int_equal(mc_store_batch_get_buffer(a, keys, 3, (mc_store_buffer **)outp, got),
                     MC_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(got[i], (int64_t)sizes[i]);
        assert_memory_equal(mc_store_buffer_data(outp[i]), vals[i], sizes[i]);
        mc_store_buffer_free(outp[i]);
    }
    /* Replica descriptors in a batch. */
    mc_store_replica_list rls[2];
    mc_store_key dk[2] = {keys[2], {"nope", 4}};
    assert_int_equal(mc_store_batch_get_replica_desc(a, dk, 2, rls, res), MC_OK);
    assert_int_equal(res[0], MC_OK);
    assert_int_equal(rls[0].n, 1);
    assert_int_equal(res[1], MC_OBJECT_NOT_FOUND);
    assert_int_equal(rls[1].n, 0);
    /* Batch remove (leased by the reads: force). */
    assert_int_equal(mc_store_batch_remove(a, dk, 2, true, res), MC_OK);
    assert_int_equal(res[0], MC_OK);
    assert_int_equal(res[1], MC_OBJECT_NOT_FOUND);
    assert_true(mc_store_remove_all(a, true) >= 29);
    assert_int_equal(mc_store_is_exist(a, names[5], strlen(names[5])), 0);
    for (int i = 0; i < N; i++) {
        free(vals[i]);
        free(bufs[i]);
    }
    mc_store_destroy(a);
    mc_store_destroy(b);
}

static void *alloc_cb(void *ctx, size_t index, uint64_t size)
{
    size_t *calls = ctx;
    calls[index]++;
    return malloc(size ? size : 1);
}

static void test_get_with(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = store_up(&f->m, 16 * MIB);
    assert_int_equal(put_s(s, "w1", "hello", 5), MC_OK);
    assert_int_equal(put_s(s, "w0", "", 0), MC_OK);
    size_t calls[3] = {0};
    void *p = NULL;
    assert_int_equal(mc_store_get_with(s, "w1", 2, alloc_cb, calls, &p), 5);
    assert_int_equal(calls[0], 1);
    assert_memory_equal(p, "hello", 5);
    free(p);
    mc_store_key k[3] = {{"w1", 2}, {"none", 4}, {"w0", 2}};
    void *outs[3];
    int64_t res[3];
    memset(calls, 0, sizeof calls);
    assert_int_equal(mc_store_batch_get_with(s, k, 3, alloc_cb, calls, outs, res), MC_OK);
    assert_int_equal(res[0], 5);
    assert_int_equal(res[1], MC_OBJECT_NOT_FOUND);
    assert_int_equal(res[2], 0);
    assert_int_equal(calls[0], 1);
    assert_int_equal(calls[1], 0); /* no allocation for a miss */
    assert_int_equal(calls[2], 1);
    assert_memory_equal(outs[0], "hello", 5);
    assert_null(outs[1]);
    free(outs[0]);
    free(outs[2]);
    mc_store_destroy(s);
}

static void test_replication_and_space(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *a = store_up(&f->m, 4 * MIB);
    mc_store *b = store_up(&f->m, 4 * MIB);
    mc_store_replicate_config rc;
    mc_store_replicate_config_init(&rc);
    rc.replica_num = 3;
    size_t n = MIB;
    unsigned char *v = malloc(n), *got = malloc(n);
    fill(v, n, 3);
    assert_int_equal(mc_store_put(a, "rep", 3, v, n, &rc), MC_OK);
    mc_store_replica_list rl;
    assert_int_equal(mc_store_get_replica_desc(a, "rep", 3, &rl), MC_OK);
    assert_int_equal(rl.n, 2); /* best effort: two segments */
    assert_string_not_equal(rl.replicas[0].transport_endpoint, rl.replicas[1].transport_endpoint);
    for (int i = 0; i < 2; i++) {
        memset(got, 0, n);
        assert_int_equal(mc_store_get_into(i ? b : a, "rep", 3, got, n), (int64_t)n);
        assert_memory_equal(got, v, n);
    }
    /* Bad configs. */
    rc.replica_num = 0;
    assert_int_equal(mc_store_put(a, "bad", 3, v, 1, &rc), MC_INVALID_PARAMS);
    rc.replica_num = 1;
    rc.soft_pin_action = 7;
    assert_int_equal(mc_store_put(a, "bad", 3, v, 1, &rc), MC_INVALID_PARAMS);
    rc.soft_pin_action = MC_STORE_SOFT_PIN_PRESERVE;
    rc.nof_replica_num = 1;
    assert_int_equal(mc_store_put(a, "bad", 3, v, 1, &rc), MC_INVALID_PARAMS);
    rc.nof_replica_num = 0;
    const char *groups[2] = {"g", "h"};
    rc.group_ids = groups;
    rc.n_group_ids = 2; /* one key, two groups */
    assert_int_equal(mc_store_put(a, "bad", 3, v, 1, &rc), MC_INVALID_PARAMS);
    rc.n_group_ids = 1;
    rc.with_soft_pin = true;
    rc.with_hard_pin = true;
    char hb[64];
    mc_store_get_hostname(b, hb, sizeof hb);
    rc.preferred_segment = hb;
    assert_int_equal(mc_store_put(a, "pinned", 6, v, 10, &rc), MC_OK);
    assert_int_equal(mc_store_get_replica_desc(a, "pinned", 6, &rl), MC_OK);
    assert_int_equal(rl.n, 1);
    assert_string_equal(rl.replicas[0].transport_endpoint, hb);
    assert_int_equal(mc_store_is_exist(a, "bad", 3), 0);

    /* Larger than any segment: NO_AVAILABLE_HANDLE, nothing left behind. */
    size_t huge = 6 * MIB;
    unsigned char *hv = calloc(1, huge);
    assert_int_equal(mc_store_put(a, "huge", 4, hv, huge, NULL), MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(mc_store_is_exist(a, "huge", 4), 0);
    assert_int_equal(mc_store_get_into(b, "huge", 4, hv, huge), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_remove(a, "huge", 4, true), MC_OBJECT_NOT_FOUND);
    /* The space is still usable: a 2 MiB object fits. */
    assert_int_equal(mc_store_put(a, "fits", 4, hv, 2 * MIB, NULL), MC_OK);
    free(hv);
    free(v);
    free(got);
    mc_store_destroy(a);
    mc_store_destroy(b);
}

static void test_tcp_path(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    setenv("MC_FORCE_TCP", "1", 1);
    mc_store *a = store_up(&f->m, 40 * MIB);
    mc_store *b = store_up(&f->m, 40 * MIB);
    unsetenv("MC_FORCE_TCP");
    char ha[64], hb[64];
    mc_store_get_hostname(a, ha, sizeof ha);
    mc_store_get_hostname(b, hb, sizeof hb);
    size_t n = 16 * MIB + 3;
    unsigned char *v = malloc(n), *got = malloc(n);
    fill(v, n, 5);
    mc_store_replicate_config rc;
    mc_store_replicate_config_init(&rc);
    const char *pref[1] = {hb};
    rc.preferred_segments = pref;
    rc.n_preferred_segments = 1;
    assert_int_equal(mc_store_put(a, "tcp", 3, v, n, &rc), MC_OK); /* a -> b's segment */
    mc_store_replica_list rl;
    assert_int_equal(mc_store_get_replica_desc(a, "tcp", 3, &rl), MC_OK);
    assert_string_equal(rl.replicas[0].transport_endpoint, hb);
    assert_int_equal(mc_store_get_into(a, "tcp", 3, got, n), (int64_t)n); /* b -> a */
    assert_memory_equal(got, v, n);
    memset(got, 0, n);
    assert_int_equal(mc_store_get_into(b, "tcp", 3, got, n), (int64_t)n); /* own memory */
    assert_memory_equal(got, v, n);
    mc_te_stats st;
    mc_te_get_stats(mc_store_engine(a), &st);
    assert_true(st.tcp_bytes_sent >= n);
    assert_true(st.tcp_bytes_received >= n);
    assert_int_equal(st.shm_bytes, 0);
    free(v);
    free(got);
    mc_store_destroy(a);
    mc_store_destroy(b);
}

static void test_remove_and_lease(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = store_up(&f->m, 8 * MIB);
    char buf[8];
    assert_int_equal(put_s(s, "l", "abc", 3), MC_OK);
    assert_int_equal(put_s(s, "nolease", "abc", 3), MC_OK);
    assert_int_equal(mc_store_remove(s, "nolease", 7, false), MC_OK); /* never read */
    assert_int_equal(get_s(s, "l", buf, sizeof buf), 3);              /* grants a lease */
    assert_int_equal(mc_store_remove(s, "l", 1, false), MC_OBJECT_HAS_LEASE);
    assert_int_equal(mc_store_remove(s, "l", 1, true), MC_OK);
    assert_int_equal(mc_store_remove(s, "l", 1, true), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_is_exist(s, "l", 1), 0);

    /* Upsert: replace in place and with another size; under a reader's lease too (issue
     * 10 fault 6, as upstream: new space, the old kept until the lease ends). */
    assert_int_equal(put_s(s, "u", "aaaa", 4), MC_OK);
    assert_int_equal(mc_store_upsert(s, "u", 1, "bbbb", 4, NULL), MC_OK);
    assert_int_equal(mc_store_upsert(s, "u", 1, "cccccc", 6, NULL), MC_OK);
    assert_int_equal(get_s(s, "u", buf, sizeof buf), 6);
    assert_memory_equal(buf, "cccccc", 6);
    assert_int_equal(mc_store_upsert(s, "u", 1, "dd", 2, NULL), MC_OK);
    assert_int_equal(get_s(s, "u", buf, sizeof buf), 2);
    assert_memory_equal(buf, "dd", 2);
    assert_int_equal(mc_store_upsert(s, "u", 1, "ee", 2, NULL), MC_OK); /* same size */
    assert_int_equal(get_s(s, "u", buf, sizeof buf), 2);
    assert_memory_equal(buf, "ee", 2);
    assert_int_equal(mc_store_upsert(s, "u2", 2, "new", 3, NULL), MC_OK); /* insert */
    mc_store_iov parts[2] = {{"x", 1}, {"yz", 2}};
    assert_int_equal(mc_store_upsert_parts(s, "u2", 2, parts, 2, NULL), MC_OK);
    assert_int_equal(get_s(s, "u2", buf, sizeof buf), 3);
    assert_memory_equal(buf, "xyz", 3);
    mc_store_destroy(s);
}

/* ---- fencing (docs/consistency.md): what the heartbeat does with a ping's fences ---- */

/* Waits until `what` holds (polled every 10 ms), at most ms. */
#define WAIT_UNTIL(cond, ms)                                                              \
    do {                                                                                  \
        uint64_t wu_end_ = mc_now_ms() + (ms);                                            \
        while (!(cond) && mc_now_ms() < wu_end_)                                          \
            mc_sleep_ms(10);                                                              \
    } while (0)

static uint64_t writer_fence(mc_store *owner, mc_store *writer)
{
    uint64_t e = 0;
    mc_te_get_writer_fence(owner->te, writer->client_id.first, writer->client_id.second, &e);
    return e;
}

static uint64_t target_fence(mc_store *writer, const char *seg)
{
    uint64_t e = 0;
    mc_te_get_target_fence(writer->te, seg, &e);
    return e;
}

/* One WRITE of len bytes from local to remote in segment seg at fence epoch epoch; the
 * task's final state. */
static int te_write(mc_te *te, const char *seg, void *local, uint64_t remote, uint64_t len,
                    uint64_t epoch)
{
    mc_te_segment_t h;
    assert_int_equal(mc_te_open_segment(te, seg, &h), MC_OK);
    mc_te_batch_t b;
    assert_int_equal(mc_te_allocate_batch(te, 1, &b), MC_OK);
    mc_te_request rq = {.opcode = MC_TE_OP_WRITE, .source = local, .target_id = h,
                        .target_offset = remote, .length = len, .fence_epoch = epoch};
    assert_int_equal(mc_te_submit(te, b, &rq, 1), MC_OK);
    mc_te_status st;
    do {
        assert_int_equal(mc_te_wait_batch(te, b, 10000, &st), MC_OK);
    } while (st.state == MC_TE_PENDING || st.state == MC_TE_WAITING);
    mc_te_free_batch(te, b);
    return st.state;
}

/* A revoked put's epoch is fenced by both heartbeats: the owner's engine refuses the
 * writer's WRITEs at the old epoch (TCP), the writer's engine has the target fence, the
 * master gives the space back after both acknowledged; the new epoch goes through. The
 * same for the writer's own segment (its memcpy path). */
static void test_fences_applied(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    setenv("MC_FORCE_TCP", "1", 1);
    mc_store *a = store_up_md(f->m.addr, 8 * MIB, 16 * MIB, "P2PHANDSHAKE", 50);
    mc_store *w = store_up_md(f->m.addr, 8 * MIB, 16 * MIB, "P2PHANDSHAKE", 50);
    unsetenv("MC_FORCE_TCP");
    mc_master_put_config pc = {.replica_num = 1}; /* the master's defaults otherwise */
    const char *pref[1] = {a->name};
    pc.preferred_segments = pref;
    pc.n_preferred = 1;
    /* nearly all of a's segment, so its reuse below shows the quarantine ended */
    uint64_t big = 7 * MIB;
    mc_master_replica_list out;
    assert_int_equal(mc_master_client_put_start(w->mc, w->client_id, "f", 1, big, &pc, &out),
                     MC_OK);
    assert_string_equal(out.replicas[0].transport_endpoint, a->name);
    uint64_t e = out.replicas[0].fence_epoch, addr = out.replicas[0].address;
    assert_true(e > 0);
    /* the epoch is accepted before the revoke */
    assert_int_equal(te_write(w->te, a->name, w->ar->base, addr, 4096, e), MC_TE_COMPLETED);
    assert_int_equal(mc_master_client_put_revoke(w->mc, w->client_id, "f", 1), MC_OK);
    WAIT_UNTIL(writer_fence(a, w) > e && target_fence(w, a->name) > e, 5000);
    assert_true(writer_fence(a, w) > e);
    assert_true(target_fence(w, a->name) > e);
    /* the old epoch is refused (the writer's own engine refuses first: its target fence;
     * the owner's fence covers bytes that were on the wire) */
    assert_int_equal(te_write(w->te, a->name, w->ar->base, addr, 4096, e), MC_TE_FAILED);
    /* the master freed the space once both had acknowledged: a's segment takes it again */
    mc_store_replicate_config rc;
    mc_store_replicate_config_init(&rc);
    rc.preferred_segment = a->name;
    unsigned char *v = malloc(big);
    fill(v, big, 3);
    int put_rc = MC_NO_AVAILABLE_HANDLE;
    for (uint64_t t0 = mc_now_ms(); put_rc != MC_OK && mc_now_ms() - t0 < 5000;) {
        put_rc = mc_store_put(w, "g", 1, v, big, &rc);
        if (put_rc != MC_OK)
            mc_sleep_ms(20);
    }
    assert_int_equal(put_rc, MC_OK);
    mc_store_replica_list rl;
    assert_int_equal(mc_store_get_replica_desc(w, "g", 1, &rl), MC_OK);
    assert_string_equal(rl.replicas[0].transport_endpoint, a->name);
    /* the new epoch works: that put went through (TCP, carrying it) */
    unsigned char *got = malloc(big);
    assert_int_equal(mc_store_get_into(a, "g", 1, got, big), (int64_t)big);
    assert_memory_equal(got, v, big);

    /* w's own segment: a revoked put there fences w's memcpy path */
    pref[0] = w->name;
    assert_int_equal(mc_master_client_put_start(w->mc, w->client_id, "o", 1, 4096, &pc, &out),
                     MC_OK);
    assert_string_equal(out.replicas[0].transport_endpoint, w->name);
    uint64_t eo = out.replicas[0].fence_epoch;
    assert_int_equal(mc__own_fence_enter(w, eo), MC_OK);
    mc__own_fence_leave(w);
    assert_int_equal(mc_master_client_put_revoke(w->mc, w->client_id, "o", 1), MC_OK);
    int own = MC_OK;
    for (uint64_t t0 = mc_now_ms(); own == MC_OK && mc_now_ms() - t0 < 5000;) {
        own = mc__own_fence_enter(w, eo);
        if (own == MC_OK) {
            mc__own_fence_leave(w);
            mc_sleep_ms(10);
        }
    }
    assert_int_equal(own, MC_TRANSFER_FAIL);
    assert_int_equal(mc__own_fence_enter(w, 0), MC_OK); /* unfenced copies still run */
    mc__own_fence_leave(w);
    /* and a put to its own segment at the new epoch still works */
    rc.preferred_segment = w->name;
    assert_int_equal(mc_store_put(w, "o2", 2, v, 4096, &rc), MC_OK);
    assert_int_equal(mc_store_get_into(a, "o2", 2, got, 4096), 4096);
    assert_memory_equal(got, v, 4096);
    assert_true(atomic_load(&w->fences_applied) >= 2);
    free(v);
    free(got);
    mc_store_destroy(w);
    mc_store_destroy(a);
}

/* Read your writes (issue 10 fault 6): a put that finds its key in flight by another
 * writer returns 0 only once the key is readable; when that put goes away, ours goes in. */
static atomic_int race_started;

static void put_started_pause(const char *point, const void *key, size_t key_len)
{
    if (!strcmp(point, MC__STORE_HOOK_PUT_STARTED) && key_len == 4 &&
        !memcmp(key, "race", 4) && atomic_fetch_add(&race_started, 1) == 0)
        mc_sleep_ms(300); /* the winner holds the key in flight for a while */
}

typedef struct race_arg {
    mc_store *s;
    int rc;
} race_arg;

static void *race_winner(void *p)
{
    race_arg *r = p;
    r->rc = put_s(r->s, "race", "winner", 6);
    return NULL;
}

static void test_put_race_read_your_writes(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s1 = store_up(&f->m, 8 * MIB), *s2 = store_up(&f->m, 8 * MIB);
    char buf[16];
    /* the winner's put is in flight (held at the hook) when the loser's put starts */
    atomic_store(&race_started, 0);
    mc__store_test_hook = put_started_pause;
    race_arg ra = {s1, -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, race_winner, &ra), 0);
    WAIT_UNTIL(atomic_load(&race_started) > 0, 5000);
    assert_int_equal(atomic_load(&race_started), 1);
    int rc2 = put_s(s2, "race", "loser!", 6);
    pthread_join(th, NULL);
    mc__store_test_hook = NULL;
    assert_int_equal(ra.rc, MC_OK);
    assert_int_equal(rc2, MC_OK);
    /* 0 means readable by the loser right after: the winner's value (the old value stays,
     * as upstream) */
    assert_int_equal(get_s(s2, "race", buf, sizeof buf), 6);
    assert_memory_equal(buf, "winner", 6);
    mc_store_destroy(s1);
    mc_store_destroy(s2);
}

/* Issue 17: client A's put was placed on client B's segment (put_start), then B
 * unmounted it (close: the unmount first, then the memory goes) before A's put_end.
 * The hook runs in A's put between put_start and the transfer, so the order is exact.
 * The put must not fail with OBJECT_NOT_FOUND: the master answers REPLICA_IS_GONE and
 * the client puts once more from put_start, onto a segment that is left; a get then
 * returns the put's bytes. */
static mc_store *gone_target;   /* B */
static atomic_int gone_started; /* put_starts seen by the hook */
static bool gone_close;         /* the hook closes B (else: only the unmount RPC) */

static void unmount_target_hook(const char *point, const void *key, size_t key_len)
{
    (void)key;
    (void)key_len;
    if (strcmp(point, MC__STORE_HOOK_PUT_STARTED) || atomic_fetch_add(&gone_started, 1))
        return;
    if (gone_close) {
        /* all of close: the transfer to B then fails (its memory is gone too) */
        assert_int_equal(mc_store_close(gone_target), MC_OK);
    } else {
        /* close's first step, B's memory left registered: A's transfer lands and
         * A's put_end finds its object dropped (the -704 of issue 17) */
        assert_int_equal(mc_master_client_unmount_segment(gone_target->mc, gone_target->seg_id,
                                                          gone_target->client_id),
                         MC_OK);
    }
}

static void unmount_under_put(fixture *f, bool close_it)
{
    mc_store *a = store_up(&f->m, 8 * MIB), *b = store_up(&f->m, 8 * MIB),
             *c = store_up(&f->m, 8 * MIB);
    char hb[64];
    assert_true(mc_store_get_hostname(b, hb, sizeof hb) > 0);
    mc_store_replicate_config rc;
    mc_store_replicate_config_init(&rc);
    rc.preferred_segment = hb; /* the first attempt goes to B */
    enum { N = 3, SZ = 64 * 1024 };
    unsigned char *v = malloc(N * SZ), *got = malloc(SZ);
    fill(v, N * SZ, close_it ? 21 : 22);
    gone_target = b;
    gone_close = close_it;
    atomic_store(&gone_started, 0);
    mc__store_test_hook = unmount_target_hook;
    if (!close_it) {
        assert_int_equal(mc_store_put(a, "gone", 4, v, SZ, &rc), MC_OK);
    } else {
        mc_store_key k[N] = {{"gone0", 5}, {"gone1", 5}, {"gone2", 5}};
        const void *vals[N] = {v, v + SZ, v + 2 * SZ};
        uint64_t sizes[N] = {SZ, SZ, SZ};
        int res[N];
        assert_int_equal(mc_store_batch_put_from(a, k, N, vals, sizes, &rc, res), MC_OK);
        for (int i = 0; i < N; i++)
            assert_int_equal(res[i], MC_OK);
    }
    mc__store_test_hook = NULL;
    assert_int_equal(atomic_load(&gone_started), 2); /* the first attempt, and one more */
    /* the bytes of the put, from a segment left (A's or C's), by either client */
    const char *names[N] = {"gone0", "gone1", "gone2"};
    for (int i = 0; i < (close_it ? N : 1); i++) {
        const char *key = close_it ? names[i] : "gone";
        assert_int_equal(get_s(c, key, got, SZ), SZ);
        assert_memory_equal(got, v + (size_t)i * SZ, SZ);
        assert_int_equal(get_s(a, key, got, SZ), SZ);
        assert_memory_equal(got, v + (size_t)i * SZ, SZ);
    }
    free(v);
    free(got);
    mc_store_destroy(b);
    mc_store_destroy(c);
    mc_store_destroy(a);
}

static void test_unmount_under_put(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    unmount_under_put(f, false);
}

static void test_close_under_batch_put(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    unmount_under_put(f, true);
}

static void sleep_hook(const char *point, const void *key, size_t key_len)
{
    (void)key;
    (void)key_len;
    if (!strcmp(point, MC__STORE_HOOK_READ_DONE))
        mc_sleep_ms(450); /* the master's lease is 200 ms in this test */
}

/* Two stores a and b on f's master, and v (4096 bytes of pattern seed) put by a on a's
 * own segment under key: b's reads of it go to a. */
static void two_stores_with_value(fixture *f, mc_store **a, mc_store **b, const char *key,
                                  unsigned char v[4096], int seed)
{
    *a = store_up(&f->m, 8 * MIB);
    *b = store_up(&f->m, 8 * MIB);
    fill(v, 4096, seed);
    assert_int_equal(put_own(*a, key, v, 4096), MC_OK);
}

static void test_lease_expired(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *a, *b;
    unsigned char v[4096], got[4096];
    two_stores_with_value(f, &a, &b, "lease", v, 11);
    mc__store_test_hook = sleep_hook;
    assert_int_equal(mc_store_get_into(b, "lease", 5, got, sizeof got), MC_LEASE_EXPIRED);
    assert_int_equal(mc_store_get_into(a, "lease", 5, got, sizeof got), MC_LEASE_EXPIRED);
    mc_store_key k[2] = {{"lease", 5}, {"lease", 5}};
    void *bufs[2] = {got, got};
    uint64_t caps[2] = {sizeof got, sizeof got};
    int64_t res[2];
    assert_int_equal(mc_store_batch_get_into(b, k, 2, bufs, caps, res), MC_OK);
    assert_int_equal(res[0], MC_LEASE_EXPIRED);
    assert_int_equal(res[1], MC_LEASE_EXPIRED);
    mc__store_test_hook = NULL;
    assert_int_equal(mc_store_get_into(b, "lease", 5, got, sizeof got), (int64_t)sizeof v);
    assert_memory_equal(got, v, sizeof v);
    /* The lease is short here: after it passes, remove without force works. */
    mc_sleep_ms(300);
    assert_int_equal(mc_store_remove(b, "lease", 5, false), MC_OK);
    mc_store_destroy(a);
    mc_store_destroy(b);
}

/* The read ends in the last millisecond of its lease: the master holds a lease only
 * while its clock is < atime + TTL, so at t0 + TTL the space may be free and refilled
 * already (it was accepted up to t0 + TTL inclusive before: wrong bytes at lease end),
 * and a master on another host, counting ms at another phase, may be there 1 ms earlier:
 * a read whose bytes are checked at t0 + TTL - 1 must be LEASE_EXPIRED
 * (mc__lease_over). The call starts right after a millisecond begins, so the client's t0
 * is that millisecond; the hook holds the lease check back until t0 + TTL - 1. */
static uint64_t boundary_ms;

static void boundary_hook(const char *point, const void *key, size_t key_len)
{
    (void)key;
    (void)key_len;
    if (!strcmp(point, MC__STORE_HOOK_READ_DONE))
        while (mc_now_ms() < boundary_ms)
            ;
}

/* Waits for a millisecond to begin and sets boundary_ms for a read started at once: the
 * last millisecond of a lease that begins then. */
static void boundary_arm(void)
{
    uint64_t t = mc_now_ms();
    while (mc_now_ms() == t)
        ;
    boundary_ms = t + 1 + SHORT_LEASE_MS - 1;
}

typedef int64_t (*boundary_read_fn)(mc_store *b, const char *key, unsigned char *got,
                                    size_t n);

static int64_t plain_read(mc_store *b, const char *key, unsigned char *got, size_t n)
{
    return mc_store_get_into(b, key, strlen(key), got, n);
}

/* Five reads of key (the value v, 4096 bytes) by read with the lease check held back to
 * t0 + TTL - 1: each is LEASE_EXPIRED unless the call was preempted for a millisecond
 * before it took t0 (then the read legitimately ended inside its lease and is whole).
 * Returns how many were LEASE_EXPIRED. */
static int boundary_tries(mc_store *b, const char *key, const unsigned char *v,
                          unsigned char *got, boundary_read_fn read)
{
    mc__store_test_hook = boundary_hook;
    int expired = 0;
    for (int i = 0; i < 5; i++) {
        boundary_arm();
        int64_t r = read(b, key, got, 4096);
        assert_true(r == MC_LEASE_EXPIRED || r == 4096);
        if (r > 0)
            assert_memory_equal(got, v, 4096);
        expired += r == MC_LEASE_EXPIRED;
    }
    mc__store_test_hook = NULL;
    return expired;
}

/* A ranged read (ranges.c, mc_store_batch_get_ranges) of two fragments: when it is
 * LEASE_EXPIRED, so is each fragment. */
static int64_t ranges_read(mc_store *b, const char *key, unsigned char *got, size_t n)
{
    mc_store_key k = {key, strlen(key)};
    mc_store_range r[2] = {{.buf = got, .offset = 0, .len = n / 2},
                           {.buf = got + n / 2, .offset = n / 2, .len = n - n / 2}};
    mc_store_range *rp = r;
    size_t nr = 2;
    int64_t res = 0;
    assert_int_equal(mc_store_batch_get_ranges(b, &k, 1, &rp, &nr, &res), MC_OK);
    if (res == MC_LEASE_EXPIRED) {
        assert_int_equal(r[0].result, MC_LEASE_EXPIRED);
        assert_int_equal(r[1].result, MC_LEASE_EXPIRED);
    }
    return res;
}

/* The boundary for a plain get and for a ranged read; a ranged read checked past the
 * lease is always LEASE_EXPIRED, and whole without the hook. */
static void test_lease_boundary(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *a, *b;
    unsigned char v[4096], got[4096];
    two_stores_with_value(f, &a, &b, "edge", v, 12);
    assert_true(boundary_tries(b, "edge", v, got, plain_read) >= 1);
    assert_true(boundary_tries(b, "edge", v, got, ranges_read) >= 1);
    mc__store_test_hook = boundary_hook;
    boundary_ms = mc_now_ms() + SHORT_LEASE_MS + 50;
    assert_int_equal(ranges_read(b, "edge", got, sizeof got), MC_LEASE_EXPIRED);
    mc__store_test_hook = NULL;
    memset(got, 0, sizeof got);
    assert_int_equal(ranges_read(b, "edge", got, sizeof got), (int64_t)sizeof v);
    assert_memory_equal(got, v, sizeof v);
    mc_store_destroy(a);
    mc_store_destroy(b);
}

/* A disk copy next to a memory attempt still running (read.c mem_late). The objects
 * have a memory replica in a child process's segment and a DISK replica in the shared
 * directory; the child is stopped, so the reader's memory attempt over TCP never ends.
 * "held" (4 KiB) is hedged: the hedge reads the file while the memory attempt hangs.
 * "held_big" (2 MiB, over the hedge limit) is not: its memory attempt is given up at its
 * deadline and the file is read then. Either memory attempt could still land into the
 * same buffer until the call's transfers end, after the disk copy, and past the lease
 * those bytes may be another object's. The hook holds the lease check back past the
 * lease and overwrites the buffer there (the bytes such a landing leaves); the read must
 * read the disk copy again and return it complete (without mem_late it returns the
 * overwritten buffer; without the read again, LEASE_EXPIRED). Once the child is dead
 * its attempt fails at once and the disk copy is read whatever the lease says. */
static unsigned char *late_buf; /* the reader's buffer, overwritten by late_bytes_hook */
static size_t late_len;

static void late_bytes_hook(const char *point, const void *key, size_t key_len)
{
    boundary_hook(point, key, key_len);
    if (!strcmp(point, MC__STORE_HOOK_READ_DONE) && late_buf)
        memset(late_buf, 0xee, late_len);
}

#define HELD_BIG (2 * MIB) /* over read.c's HEDGE_MAX_BYTES: not hedged */
#define HELD_SEED 21       /* fill seeds of "held" and (+1) "held_big" */

/* Reads key into got (cap bytes, the value v of n bytes) with the lease check held back
 * past the lease and the buffer overwritten there: the disk copy must come back whole. */
static void read_past_lease(mc_store *b, const char *key, unsigned char *got,
                            const unsigned char *v, size_t n)
{
    late_buf = got;
    late_len = n;
    boundary_ms = mc_now_ms() + SHORT_LEASE_MS + 50; /* past the lease */
    assert_int_equal(get_s(b, key, got, n), (int64_t)n);
    assert_memory_equal(got, v, n);
    late_buf = NULL;
}

static void test_disk_hedge_next_to_stalled_memory(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    setenv("MC_OFFLOAD_POLL_MS", "50", 1);
    const char *args[] = {"--child-holder", f->m.addr, NULL};
    pid_t child = held_child = spawn_self(args);
    unsetenv("MC_OFFLOAD_POLL_MS");
    setenv("MC_FORCE_TCP", "1", 1); /* the reader: no same-host copy from the child */
    mc_store *b = NULL;
    assert_int_equal(mc_store_create(&b), MC_OK);
    mc_store_config c;
    store_config_p2p(&c, f->m.addr, 0);
    c.storage_root_dir = sfs_root;
    assert_int_equal(mc_store_setup(b, &c), MC_OK);
    unsetenv("MC_FORCE_TCP");
    /* the child's puts are complete and their files written: memory + DISK replicas */
    const char *keys[] = {"held", "held_big"};
    uint64_t until = mc_now_ms() + 30000;
    for (int k = 0; k < 2; k++)
        for (;;) {
            mc_store_replica_list rl;
            rl.n = 0;
            if (mc_store_get_replica_desc(b, keys[k], strlen(keys[k]), &rl) == MC_OK &&
                rl.n == 2 && rl.replicas[0].is_memory != rl.replicas[1].is_memory)
                break;
            if (mc_now_ms() > until)
                fail_msg("no memory + DISK replica pair for \"%s\" (n=%u)", keys[k], rl.n);
            mc_sleep_ms(20);
        }
    unsigned char v[4096], got[4096];
    fill(v, sizeof v, HELD_SEED);
    unsigned char *vb = malloc(HELD_BIG), *gb = malloc(HELD_BIG);
    assert_non_null(vb);
    assert_non_null(gb);
    fill(vb, HELD_BIG, HELD_SEED + 1);
    /* a read while the child runs: the reader knows its segment and is connected */
    assert_int_equal(get_s(b, "held", got, sizeof got), (int64_t)sizeof v);
    assert_memory_equal(got, v, sizeof v);
    assert_int_equal(kill(child, SIGSTOP), 0);
    /* the hedge reads the file while the memory attempt hangs */
    assert_int_equal(get_s(b, "held", got, sizeof got), (int64_t)sizeof v);
    assert_memory_equal(got, v, sizeof v);
    mc__store_test_hook = late_bytes_hook;
    for (int i = 0; i < 3; i++)
        read_past_lease(b, "held", got, v, sizeof v);
    read_past_lease(b, "held_big", gb, vb, HELD_BIG); /* the memory attempt timed out */
    kill(child, SIGKILL);
    int st = 0;
    assert_int_equal(wait_pid(child, 10000, &st), 0);
    held_child = 0;
    mc__store_test_hook = boundary_hook;
    boundary_ms = mc_now_ms() + SHORT_LEASE_MS + 50;
    memset(got, 0, sizeof got);
    assert_int_equal(get_s(b, "held", got, sizeof got), (int64_t)sizeof v);
    assert_memory_equal(got, v, sizeof v);
    mc__store_test_hook = NULL;
    free(vb);
    free(gb);
    mc_store_destroy(b);
}

/* A pipelined batch read (read.c read_early) whose master dies after the first piece
 * was answered: the pieces answered before the kill are read exactly, the rest fail with
 * a code and leave their buffers alone. 1024 keys are 32 pieces of 32, at most 8 of them
 * in flight, so at least 24 pieces were never sent when the hook kills the master. */
static master_proc *piece_master;
static int pieces_seen;

static void kill_master_hook(const char *point, const void *key, size_t key_len)
{
    (void)key;
    (void)key_len;
    if (strcmp(point, MC__STORE_HOOK_READ_PIECE) || pieces_seen++ || !piece_master)
        return;
    kill(piece_master->pid, SIGKILL);
    waitpid(piece_master->pid, NULL, 0);
    close(piece_master->out_fd);
    piece_master->pid = 0;
}

static void test_pipelined_read_master_killed(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    enum { N = 1024, V = 1024, PIECE = 32 };
    mc_store *a = store_up(&f->m, 8 * MIB);
    static char keys_txt[N][16];
    static mc_store_key k[N];
    static unsigned char vals[N][V], got[N][V];
    void *bufs[N];
    uint64_t caps[N];
    int64_t res[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys_txt[i], sizeof keys_txt[i], "pipe%d", i);
        k[i] = (mc_store_key){keys_txt[i], strlen(keys_txt[i])};
        fill(vals[i], V, (unsigned)i + 1);
        assert_int_equal(mc_store_put(a, k[i].data, k[i].len, vals[i], V, NULL), MC_OK);
        bufs[i] = got[i];
        caps[i] = V;
    }
    /* the first read learns that the values are in our own memory; it is whole */
    assert_int_equal(mc_store_batch_get_into(a, k, N, bufs, caps, res), MC_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i], V);
        assert_memory_equal(got[i], vals[i], V);
    }
    memset(got, 0xEE, sizeof got);
    piece_master = &f->m;
    pieces_seen = 0;
    mc__store_test_hook = kill_master_hook;
    mc_store_batch_get_into(a, k, N, bufs, caps, res);
    mc__store_test_hook = NULL;
    assert_true(pieces_seen >= 1); /* the read was pipelined */
    int ok = 0;
    for (int i = 0; i < N; i++) {
        if (res[i] == V) {
            assert_int_equal(i, ok); /* answered pieces come first, in order */
            assert_memory_equal(got[i], vals[i], V);
            ok++;
        } else {
            assert_true(res[i] < 0);
            for (int b = 0; b < V; b++)
                assert_int_equal(got[i][b], 0xEE);
        }
    }
    assert_true(ok >= PIECE && ok % PIECE == 0 && ok <= 8 * PIECE);
    assert_int_equal(pieces_seen, ok / PIECE);
    mc_store_destroy(a);
}

/* A writer process killed between put_start and put_end. */
static void test_killed_writer(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = store_up(&f->m, 8 * MIB);
    const char *args[] = {"--child-writer", f->m.addr, "zombie", NULL};
    pid_t pid = spawn_self(args);
    int st = 0;
    assert_int_equal(wait_pid(pid, 20000, &st), 0);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
    char buf[16];
    /* In flight: not readable, not removable. */
    assert_int_equal(mc_store_is_exist(s, "zombie", 6), 0);
    int64_t g = get_s(s, "zombie", buf, sizeof buf);
    assert_true(g == MC_REPLICA_IS_NOT_READY || g == MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_remove(s, "zombie", 6, true), MC_REPLICA_IS_NOT_READY);
    /* After put_start_discard_timeout_sec (1 s here) a new put takes the key over. */
    uint64_t t0 = mc_now_ms();
    for (;;) {
        assert_int_equal(put_s(s, "zombie", "alive", 5), MC_OK);
        if (get_s(s, "zombie", buf, sizeof buf) == 5)
            break;
        assert_true(mc_now_ms() - t0 < 4000);
        mc_sleep_ms(100);
    }
    assert_memory_equal(buf, "alive", 5);
    assert_true(mc_now_ms() - t0 < 3000); /* 1 s discard timeout + slack */
    mc_store_destroy(s);
}

/* Two processes put the same keys with different values at the same time. */
static void test_concurrent_processes(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = store_up(&f->m, 32 * MIB);
    const char *a1[] = {"--child-putter", f->m.addr, "65", NULL}; /* 'A' */
    const char *a2[] = {"--child-putter", f->m.addr, "66", NULL}; /* 'B' */
    pid_t p1 = spawn_self(a1), p2 = spawn_self(a2);
    int st1 = 0, st2 = 0;
    assert_int_equal(wait_pid(p1, 60000, &st1), 0);
    assert_int_equal(wait_pid(p2, 60000, &st2), 0);
    assert_true(WIFEXITED(st1) && WEXITSTATUS(st1) == 0);
    assert_true(WIFEXITED(st2) && WEXITSTATUS(st2) == 0);
    enum { VAL = 16384 };
    unsigned char *buf = malloc(VAL);
    for (int i = 0; i <= 100; i++) {
        char key[16];
        if (i == 100)
            snprintf(key, sizeof key, "same");
        else
            snprintf(key, sizeof key, "c%d", i);
        assert_int_equal(get_s(s, key, buf, VAL), VAL);
        unsigned char c = buf[0];
        assert_true(c == 'A' || c == 'B');
        for (int j = 1; j < VAL; j++)
            if (buf[j] != c)
                fail_msg("key %s: byte %d is %c, byte 0 is %c (a mix)", key, j, buf[j], c);
    }
    free(buf);
    mc_store_destroy(s);
}

typedef struct mt_arg {
    mc_store *s;
    int id;
    int bad;
} mt_arg;

static void key_value(int k, unsigned char *v, size_t n)
{
    memset(v, 'a' + k % 26, n);
}

static void *mt_main(void *p)
{
    mt_arg *a = p;
    enum { VAL = 8192 };
    unsigned char v[VAL], got[VAL];
    uint32_t x = (uint32_t)a->id * 7919u + 1;
    for (int i = 0; i < 150; i++) {
        x = x * 1103515245u + 12345u;
        int k = (int)((x >> 8) % 16);
        char key[16];
        snprintf(key, sizeof key, "mt-%d", k);
        int op = (int)((x >> 20) % 4);
        if (op <= 1) {
            key_value(k, v, VAL);
            int rc = put_s(a->s, key, v, VAL);
            if (rc != MC_OK && rc != MC_NO_AVAILABLE_HANDLE)
                a->bad++;
        } else if (op == 2) {
            int64_t rc = get_s(a->s, key, got, VAL);
            if (rc == VAL) {
                key_value(k, v, VAL);
                if (memcmp(got, v, VAL))
                    a->bad++;
            } else if (rc != MC_OBJECT_NOT_FOUND && rc != MC_REPLICA_IS_NOT_READY) {
                a->bad++;
            }
        } else {
            int rc = mc_store_remove(a->s, key, strlen(key), (x >> 30) & 1);
            if (rc != MC_OK && rc != MC_OBJECT_NOT_FOUND && rc != MC_OBJECT_HAS_LEASE &&
                rc != MC_REPLICA_IS_NOT_READY)
                a->bad++;
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = store_up(&f->m, 16 * MIB);
    enum { T = 4 };
    pthread_t th[T];
    mt_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (mt_arg){s, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, mt_main, &args[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
    mc_store_destroy(s);
}

static void test_handle_outlives_close(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = store_up_opts(f->m.addr, 8 * MIB, 64 * 1024);
    unsigned char v[40000];
    fill(v, sizeof v, 21);
    assert_int_equal(put_s(s, "h1", v, sizeof v), MC_OK);
    assert_int_equal(put_s(s, "h2", v, sizeof v), MC_OK);
    mc_store_buffer *h1 = NULL, *h2 = NULL, *h3 = NULL;
    assert_int_equal(mc_store_get_buffer(s, "h1", 2, &h1), MC_OK);
    void *base;
    uint64_t size, used;
    assert_int_equal(mc_store_local_buffer_info(s, &base, &size, &used), MC_OK);
    assert_int_equal(size, 64 * 1024);
    assert_true(used >= sizeof v);
    /* The local buffer is full now: the second handle falls back to the heap. */
    assert_int_equal(mc_store_get_buffer(s, "h2", 2, &h2), MC_OK);
    assert_int_equal(mc_store_buffer_alloc(s, 40000, &h3), MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(mc_store_buffer_alloc(s, 1000, &h3), MC_OK);
    assert_int_equal(mc_store_buffer_size(h3), 1000);
    mc_store_buffer_free(h3);
    assert_int_equal(mc_store_buffer_alloc(s, 0, &h3), MC_INVALID_PARAMS);
    assert_null(h3);
    assert_int_equal(mc_store_close(s), MC_OK);
    assert_memory_equal(mc_store_buffer_data(h1), v, sizeof v);
    assert_memory_equal(mc_store_buffer_data(h2), v, sizeof v);
    mc_store_destroy(s);
    assert_memory_equal(mc_store_buffer_data(h1), v, sizeof v);
    mc_store_buffer_free(h1);
    mc_store_buffer_free(h2);
    mc_store_buffer_free(NULL);
}

/* HTTP metadata (in the master) and a master restart: clients notice (health), remount
 * their segments and republish their descriptors, and keep working with an empty cache. */
static void test_http_metadata_and_restart(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    assert_true(f->m.md_port > 0);
    char md[96];
    snprintf(md, sizeof md, "http://127.0.0.1:%d/metadata", f->m.md_port);
    mc_store *a = store_up_md(f->m.addr, 8 * MIB, MIB, md, 50);
    mc_store *b = store_up_md(f->m.addr, 8 * MIB, MIB, md, 50);
    char ha[64], hb[64];
    mc_store_get_hostname(a, ha, sizeof ha);
    mc_store_get_hostname(b, hb, sizeof hb);
    assert_string_not_equal(ha, hb);
    mc_store_replicate_config rc;
    mc_store_replicate_config_init(&rc);
    rc.preferred_segment = hb;
    unsigned char v[70000], got[70000];
    fill(v, sizeof v, 31);
    assert_int_equal(mc_store_put(a, "before", 6, v, sizeof v, &rc), MC_OK);
    assert_int_equal(mc_store_get_into(a, "before", 6, got, sizeof got), (int64_t)sizeof v);
    assert_memory_equal(got, v, sizeof v);

    int rpc_port = f->m.port;
    const char *flags[] = {"--enable_http_metadata_server=true", NULL,
                           "--http_metadata_server_host=127.0.0.1", NULL};
    char mdflag[64];
    snprintf(mdflag, sizeof mdflag, "--http_metadata_server_port=%d", f->m.md_port);
    flags[1] = mdflag;
    master_stop(&f->m);
    f->have = false;
    uint64_t t0 = mc_now_ms();
    while (mc_store_health_check(a) != MC_STORE_MASTER_UNREACHABLE) {
        assert_true(mc_now_ms() - t0 < 3000);
        mc_sleep_ms(20);
    }
    t0 = mc_now_ms();
    while (master_start_port(&f->m, rpc_port, flags) != 0) {
        assert_true(mc_now_ms() - t0 < 5000);
        mc_sleep_ms(100);
    }
    f->have = true;
    /* Until both clients remounted, puts preferring b may find no space. */
    t0 = mc_now_ms();
    int prc;
    while ((prc = mc_store_put(a, "after", 5, v, sizeof v, &rc)) != MC_OK ||
           mc_store_health_check(a) != MC_STORE_HEALTHY) {
        assert_true(mc_now_ms() - t0 < 5000);
        mc_sleep_ms(50);
    }
    mc_store_replica_list rl;
    t0 = mc_now_ms();
    for (;;) { /* b remounts on its own heartbeat */
        assert_int_equal(mc_store_remove(a, "after", 5, true), MC_OK);
        assert_int_equal(mc_store_put(a, "after", 5, v, sizeof v, &rc), MC_OK);
        assert_int_equal(mc_store_get_replica_desc(a, "after", 5, &rl), MC_OK);
        if (!strcmp(rl.replicas[0].transport_endpoint, hb))
            break;
        assert_true(mc_now_ms() - t0 < 5000);
        mc_sleep_ms(50);
    }
    memset(got, 0, sizeof got);
    assert_int_equal(mc_store_get_into(a, "after", 5, got, sizeof got), (int64_t)sizeof v);
    assert_memory_equal(got, v, sizeof v);
    assert_int_equal(mc_store_get_into(b, "before", 6, got, sizeof got), MC_OBJECT_NOT_FOUND);
    /* A client that starts after the restart finds b through the republished metadata. */
    mc_store *c = store_up_md(f->m.addr, 0, 0, md, 50);
    memset(got, 0, sizeof got);
    assert_int_equal(mc_store_get_into(c, "after", 5, got, sizeof got), (int64_t)sizeof v);
    assert_memory_equal(got, v, sizeof v);
    mc_store_destroy(c);
    mc_store_destroy(a);
    mc_store_destroy(b);
}

/* ------------------------------------------------------------------------------------ */
/* Child processes                                                                       */
/* ------------------------------------------------------------------------------------ */

/* A child's store with a segment of seg bytes and no local buffer; exits 2 when setup
 * fails. */
static mc_store *child_store(const char *master, uint64_t seg)
{
    mc_store *s = NULL;
    mc_store_create(&s);
    mc_store_config c;
    store_config_p2p(&c, master, seg);
    c.local_buffer_size = 0;
    if (mc_store_setup(s, &c) != MC_OK) {
        fprintf(stderr, "child: setup failed\n");
        exit(2);
    }
    return s;
}

static void die_hook(const char *point, const void *key, size_t key_len)
{
    (void)key;
    (void)key_len;
    if (!strcmp(point, MC__STORE_HOOK_PUT_STARTED))
        raise(SIGKILL);
}

static int child_writer(const char *master, const char *key)
{
    mc_store *s = child_store(master, 0); /* pure client: its death loses no replica */
    mc__store_test_hook = die_hook;
    static unsigned char v[MIB];
    put_s(s, key, v, sizeof v);
    return 3; /* not reached */
}

/* --child-holder: puts "held" (4096 bytes, fill seed HELD_SEED) and "held_big" (HELD_BIG
 * bytes, HELD_SEED + 1) into its own segment, which the master's --root_fs_dir also
 * writes to files, then waits to be killed. */
static int child_holder(const char *master)
{
    mc_store *s = child_store(master, 16 * MIB);
    unsigned char v[4096], *vb = malloc(HELD_BIG);
    fill(v, sizeof v, HELD_SEED);
    if (vb)
        fill(vb, HELD_BIG, HELD_SEED + 1);
    if (!vb || put_own(s, "held", v, sizeof v) != MC_OK ||
        put_own(s, "held_big", vb, HELD_BIG) != MC_OK) {
        fprintf(stderr, "child holder: put failed\n");
        return 3;
    }
    for (;;)
        pause();
}

static int child_putter(const char *master, int byte)
{
    mc_store *s = child_store(master, 0);
    enum { VAL = 16384 };
    unsigned char *v = malloc(VAL);
    memset(v, byte, VAL);
    int bad = 0;
    for (int i = 0; i < 100; i++) {
        char key[16];
        snprintf(key, sizeof key, "c%d", i);
        if (put_s(s, key, v, VAL) != MC_OK)
            bad++;
    }
    for (int i = 0; i < 1000; i++)
        if (put_s(s, "same", v, VAL) != MC_OK)
            bad++;
    free(v);
    mc_store_destroy(s);
    if (bad)
        fprintf(stderr, "child putter %c: %d puts failed\n", byte, bad);
    return bad ? 1 : 0;
}

/* ---- the client HTTP server (client_http.c) ---- */

/* GET path from 127.0.0.1:port (HTTP/1.0, read to EOF). Returns the status code (-1: no
 * connection) and the body in buf (NUL-terminated). */
static int http_get(int port, const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t got = 0;
    for (;;) {
        assert_true(got + 1 < cap);
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        return 0;
    char *body = strstr(buf, "\r\n\r\n");
    if (body)
        memmove(buf, body + 4, strlen(body + 4) + 1);
    return status;
}

/* /health, /metrics (the counters move), /metrics/summary, a port in use, disabled by
 * default, stopped by close. */
static void test_client_http(void **state)
{
    fixture *f = *state;
    NEED_MASTER(f);
    mc_store *s = NULL;
    assert_int_equal(mc_store_create(&s), MC_OK);
    assert_int_equal(mc_store_client_http_port(s), MC_INVALID_PARAMS); /* not set up */
    mc_store_config c;
    mc_store_config_init(&c);
    c.local_hostname = "localhost";
    c.metadata_server = "P2PHANDSHAKE";
    c.master_server_addr = f->m.addr;
    c.global_segment_size = 4 * MIB;
    c.enable_client_http_server = true;
    c.client_http_port = 0;
    assert_int_equal(mc_store_setup(s, &c), MC_OK);
    int port = mc_store_client_http_port(s);
    assert_in_range(port, 1, 65535);
    static char buf[64 * 1024];
    assert_int_equal(http_get(port, "/health", buf, sizeof buf), 200);
    assert_string_equal(buf, "OK");
    assert_int_equal(http_get(port, "/nothing", buf, sizeof buf), 404);

    char v[1000];
    fill(v, sizeof v, 7);
    assert_int_equal(put_s(s, "chttp-a", v, sizeof v), MC_OK);
    char out[1000];
    assert_int_equal(get_s(s, "chttp-a", out, sizeof out), (int64_t)sizeof out);
    assert_int_equal(get_s(s, "chttp-missing", out, sizeof out), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_remove(s, "chttp-a", 7, true), MC_OK); /* force: get leased it */
    assert_int_equal(http_get(port, "/metrics", buf, sizeof buf), 200);
    assert_non_null(strstr(buf, "\nmooncake_transfer_write_bytes 1000\n"));
    assert_non_null(strstr(buf, "\nmooncake_transfer_read_bytes 1000\n"));
    assert_non_null(strstr(buf, "mooncake_client_requests_total{op=\"get\"} 2\n"));
    assert_non_null(strstr(buf, "mooncake_client_requests_total{op=\"remove\"} 1\n"));
    assert_non_null(strstr(
        buf, "mooncake_client_failures_total{op=\"get\",status=\"OBJECT_NOT_FOUND\"} 1\n"));
    assert_non_null(strstr(buf, "\nmooncake_client_segment_mounted_bytes 4194304\n"));
    assert_non_null(strstr(buf, "mooncake_client_http_connections_total"));
    assert_int_equal(http_get(port, "/metrics/summary", buf, sizeof buf), 200);
    assert_non_null(strstr(buf, "put=1 (failed 0"));
    assert_non_null(strstr(buf, "get=2 (failed 1"));

    /* a second client on the same port: setup fails and leaves nothing behind */
    mc_store *t = NULL;
    assert_int_equal(mc_store_create(&t), MC_OK);
    c.client_http_port = port;
    assert_int_equal(mc_store_setup(t, &c), MC_INTERNAL_ERROR);
    assert_false(mc_store_is_setup(t));
    /* without the flag: no server */
    c.enable_client_http_server = false;
    assert_int_equal(mc_store_setup(t, &c), MC_OK);
    assert_int_equal(mc_store_client_http_port(t), 0);
    mc_store_destroy(t);

    /* close stops it: the port refuses connections */
    assert_int_equal(mc_store_close(s), MC_OK);
    assert_int_equal(http_get(port, "/health", buf, sizeof buf), -1);
    mc_store_destroy(s);
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "--child-writer"))
        return child_writer(argv[2], argv[3]);
    if (argc >= 3 && !strcmp(argv[1], "--child-holder"))
        return child_holder(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "--child-putter"))
        return child_putter(argv[2], atoi(argv[3]));
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_set_up),
        cmocka_unit_test(test_setup_validation),
        cmocka_unit_test(test_setup_env_and_hostnames),
        cmocka_unit_test_setup_teardown(test_lifecycle_hostname, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_roundtrip_sizes, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_keys, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_get_into_capacity_and_dup_put, setup_default,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_setup_failure_messages, setup_default,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_registered_bounds, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_batches, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_get_with, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_replication_and_space, setup_default,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_tcp_path, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_remove_and_lease, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_lease_expired, setup_short_lease, teardown_master),
        cmocka_unit_test_setup_teardown(test_lease_boundary, setup_short_lease, teardown_master),
        cmocka_unit_test_setup_teardown(test_disk_hedge_next_to_stalled_memory, setup_shared_fs,
                                        teardown_shared_fs),
        cmocka_unit_test_setup_teardown(test_pipelined_read_master_killed, setup_default,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_killed_writer, setup_fast_discard, teardown_master),
        cmocka_unit_test_setup_teardown(test_fences_applied, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_put_race_read_your_writes, setup_default,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_unmount_under_put, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_close_under_batch_put, setup_default,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_concurrent_processes, setup_default,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_threads, setup_default, teardown_master),
        cmocka_unit_test_setup_teardown(test_handle_outlives_close, setup_default,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_http_metadata_and_restart, setup_http_md,
                                        teardown_master),
        cmocka_unit_test_setup_teardown(test_client_http, setup_default, teardown_master),
    };
    return cmocka_run_group_tests_name("store_client", tests, NULL, NULL);
}
