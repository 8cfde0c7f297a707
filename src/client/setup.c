/* setup.c: the store's life cycle (include/mooncake/store.h): config defaults, create,
 * validate, setup (engine, master, segment, local buffer, heartbeat), teardown, close,
 * destroy, and small queries (hostname, engine, health). Owns mc_store's fields and the
 * life lock; must not move bytes (the data paths only read mc_store under life shared).
 * Upstream: real_client.cpp setup_internal / setup_real. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/internal.h"
#include "common/env.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"
#include "net/sock.h"

#define TAG MC__STORE_TAG
#define HOST_MAX MC__HOST_MAX
#define TENANT_MAX MC__TENANT_MAX
#define DEFAULT_MASTER "127.0.0.1:50051"
#define DEFAULT_SEGMENT (16ull << 20)

mc__store_hook_fn mc__store_test_hook;

/* ---- small helpers ---- */

static uint64_t rand_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = mc_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&v;
    return v;
}

static mc_master_uuid new_uuid(void)
{
    mc_master_uuid u = {rand_u64(), rand_u64()};
    if (!u.first && !u.second)
        u.first = 1;
    return u;
}

int mc__store_split_hostport(const char *s, char *host, size_t hlen, int *port)
{
    uint16_t p = 0;
    *port = -1;
    /* The one parser (net/sock.h) has no "port optional" mode: with no default it
     * refuses a text without a port, with a default it fills one in. So: parse without
     * a default first (a port in the text); when that fails, a text that parses with a
     * default had no port; one that fails both is malformed. */
    if (mc_sock_parse_hostport(s, host, hlen, &p, 0) == 0)
        *port = p;
    else if (mc_sock_parse_hostport(s, host, hlen, &p, 1) != 0)
        return -1;
    for (const char *c = host; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == '/')
            return -1;
    return 0;
}

static void join_host_port(char *out, size_t len, const char *host, int port)
{
    if (strchr(host, ':'))
        snprintf(out, len, "[%s]:%d", host, port);
    else
        snprintf(out, len, "%s:%d", host, port);
}

/* Binds a TCP socket on 127.0.0.1:port (no listen) so no other client of this host
 * picks the same name. Returns the fd or -1. */
static int reserve_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}


int mc__store_enter(mc_store *s)
{
    if (!s)
        return MC_INVALID_PARAMS;
    pthread_rwlock_rdlock(&s->life);
    /* up is checked under the lock: close flips it under life exclusive, so a call that
     * got in here runs to its end before close can tear anything down. */
    if (!atomic_load(&s->up)) {
        pthread_rwlock_unlock(&s->life);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

void mc__store_leave(mc_store *s)
{
    pthread_rwlock_unlock(&s->life);
}

/* ------------------------------------------------------------------------------------ */
/* Life cycle                                                                           */
/* ------------------------------------------------------------------------------------ */

void mc_store_config_init(mc_store_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->global_segment_size = DEFAULT_SEGMENT;
    cfg->local_buffer_size = DEFAULT_SEGMENT;
    cfg->protocol = "tcp";
    cfg->master_server_addr = DEFAULT_MASTER;
    cfg->tenant_id = "default";
    cfg->client_http_port = 9300;
}

void mc_store_replicate_config_init(mc_store_replicate_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->replica_num = 1;
}

int mc_store_create(mc_store **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    mc_store *s = mc_xcalloc(1, sizeof *s);
    mc_rwlock_init_writer_first(&s->life);
    /* a fence (heartbeat) must not starve behind a stream of own-segment copies */
    mc_rwlock_init_writer_first(&s->own_fence);
    atomic_init(&s->up, false);
    atomic_init(&s->ping_ok, false);
    atomic_init(&s->remounts, 0);
    s->port_fd = -1;
    pthread_rwlock_init(&s->ubuf_lock, NULL);
    atomic_init(&s->fences_applied, 0);
    pthread_mutex_init(&s->hb_lock, NULL);
    mc_cond_init_monotonic(&s->hb_cond);
    pthread_mutex_init(&s->off_mu, NULL);
    s->disk_lfd = -1;
    mc_cond_init_monotonic(&s->off_cond);
    pthread_mutex_init(&s->task_mu, NULL);
    mc_cond_init_monotonic(&s->task_cond);
    mc__xseg_init(s);
    *out = s;
    return MC_OK;
}

/* Undoes whatever setup did (also after a partial setup). Caller holds life
 * exclusively. Returns MC_OK or the unmount's code. */
static int teardown(mc_store *s)
{
    int rc = MC_OK;
    /* Reverse order of setup_locked; the heartbeat goes first because it uses the
     * master client, the engine and the segment without holding any lock. */
    mc__chttp_stop(s);   /* its handlers read the engine, segment and local buffer */
    mc__tasks_stop(s);   /* the task thread uses the master client, engine and segment */
    mc__offload_stop(s); /* the disk tier's thread uses the master client and segment */
    mc__shared_fs_stop(s); /* so does the shared-FS writer */
    mc__hb_stop(s);
    mc__hb_flush(s); /* fences applied but not yet acknowledged */
    mc__xseg_teardown(s); /* mount_segment & co. (segments.c) */
    if (s->seg_mounted) {
        /* After failed pings the master is unreachable (and will expire us by
         * client_ttl): do not wait for it. */
        if (atomic_load(&s->ping_ok)) {
            int r = mc_master_client_unmount_segment(s->mc, s->seg_id, s->client_id);
            if (r != MC_OK && r != MC_SEGMENT_NOT_FOUND) {
                mc_log(MC_LOG_WARN, TAG, "unmounting the segment of %s failed: %s", s->name,
                       mc_strerror(r));
                rc = r;
            }
        }
        s->seg_mounted = false;
    }
    if (s->seg_base) {
        mc_te_free_shared(s->te, s->seg_base);
        s->seg_base = NULL;
        s->seg_size = 0;
    }
    if (s->ar) {
        if (s->ar_registered)
            mc_te_unregister_memory(s->te, s->ar->base);
        s->ar_registered = false;
        mc__lbuf_unref(s->ar); /* live handles keep the mapping until they are freed */
        s->ar = NULL;
    }
    if (s->mc) {
        mc_master_client_destroy(s->mc);
        s->mc = NULL;
    }
    mc__ubuf_clear(s);
    mc__offload_close(s);
    if (s->te && s->own_te)
        mc_te_destroy(s->te);
    s->te = NULL;
    s->own_te = false;
    if (s->port_fd >= 0) {
        close(s->port_fd);
        s->port_fd = -1;
    }
    atomic_store(&s->ping_ok, false);
    s->name[0] = s->host[0] = '\0';
    mc_auth_secret_wipe(&s->auth);
    s->auth.len = 0;
    return rc;
}

/* The store's one cluster secret: auth_token, else auth_token_file, else the file
 * MC_AUTH_TOKEN_FILE names, else none. */
static int load_secret(mc_store *s, const mc_store_config *c)
{
    char err[512];
    int rc;
    const char *from;
    if (c->auth_token && *c->auth_token) {
        from = "auth_token";
        rc = mc_auth_secret_set(&s->auth, c->auth_token, strlen(c->auth_token), err,
                                sizeof err);
    } else {
        from = c->auth_token_file && *c->auth_token_file ? "auth_token_file"
                                                         : MC_AUTH_ENV;
        rc = mc_auth_load(c->auth_token_file, &s->auth, err, sizeof err);
    }
    if (rc != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: the cluster secret (%s) is not usable: %s", from,
               err);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

#define BAD(...)                                                                           \
    do {                                                                                   \
        mc_log(MC_LOG_ERROR, TAG, "setup: " __VA_ARGS__);                                  \
        return MC_INVALID_PARAMS;                                                          \
    } while (0)

typedef struct setup_args {
    char host[HOST_MAX];
    int port; /* -1: pick one */
    bool p2p;
    const char *master;
    int min_port, max_port, retries;
    uint32_t hb_ms;
    uint32_t rpc_timeout_ms; /* resolved: the config's, else MC_RPC_TIMEOUT_MS or default */
    char md_shown[512];      /* metadata_server as messages show it: no password */
} setup_args;

/* metadata_server for log messages: a password in "scheme://user:password@host" is
 * replaced by "***" (redis:// and etcd:// strings may carry one). */
static void redact_conn(const char *in, char *out, size_t cap)
{
    const char *scheme = strstr(in, "://");
    const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
    const char *slash = scheme ? strchr(scheme + 3, '/') : NULL;
    if (!at || (slash && slash < at)) {
        snprintf(out, cap, "%s", in);
        return;
    }
    const char *colon = memchr(scheme + 3, ':', (size_t)(at - (scheme + 3)));
    size_t keep = (size_t)((colon ? colon + 1 : scheme + 3) - in);
    snprintf(out, cap, "%.*s***%s", (int)keep, in, at);
}

static int validate(const mc_store_config *c, setup_args *a)
{
    memset(a, 0, sizeof *a);
    if (!c->local_hostname || !*c->local_hostname)
        BAD("local_hostname is required (\"host\" or \"host:port\")");
    if (strlen(c->local_hostname) >= MC_STORE_NAME_MAX - 8 ||
        mc__store_split_hostport(c->local_hostname, a->host, sizeof a->host, &a->port) != 0)
        BAD("local_hostname '%s' is not \"host\" or \"host:port\" (port 1..65535)",
            c->local_hostname);
    if (!c->metadata_server || !*c->metadata_server)
        BAD("metadata_server is required (\"P2PHANDSHAKE\", \"http://host:port/metadata\", "
            "\"etcd://host:port\" or \"redis://host:port\")");
    mc_metadata_conn *conn = mc_xmalloc(sizeof *conn); /* large; only kind is needed */
    char err[256] = "";
    redact_conn(c->metadata_server, a->md_shown, sizeof a->md_shown);
    int rc = mc_metadata_parse_conn(c->metadata_server, conn, err, sizeof err);
    a->p2p = rc == MC_OK && conn->kind == MC_METADATA_P2P;
    free(conn);
    if (rc != MC_OK)
        BAD("metadata_server '%s': %s", a->md_shown, err);
    if (c->global_segment_size != 0 && (c->global_segment_size < MC_STORE_MIN_SEGMENT_SIZE ||
                                        c->global_segment_size > MC_STORE_MAX_SEGMENT_SIZE))
        BAD("global_segment_size %llu: must be 0 or %u..%llu bytes",
            (unsigned long long)c->global_segment_size, MC_STORE_MIN_SEGMENT_SIZE,
            (unsigned long long)MC_STORE_MAX_SEGMENT_SIZE);
    if (c->local_buffer_size != 0 && (c->local_buffer_size < MC_STORE_MIN_LOCAL_BUFFER ||
                                      c->local_buffer_size > MC_STORE_MAX_LOCAL_BUFFER))
        BAD("local_buffer_size %llu: must be 0 or %u..%llu bytes",
            (unsigned long long)c->local_buffer_size, MC_STORE_MIN_LOCAL_BUFFER,
            (unsigned long long)MC_STORE_MAX_LOCAL_BUFFER);
    if (c->global_segment_size > SIZE_MAX || c->local_buffer_size > SIZE_MAX)
        BAD("sizes do not fit this platform's address space");
    if (c->protocol && strlen(c->protocol) >= MC_STORE_PROTOCOL_MAX)
        BAD("protocol '%s' is too long", c->protocol);
    if (c->rdma_devices && strlen(c->rdma_devices) > 4096)
        BAD("rdma_devices is too long");
    a->master = (c->master_server_addr && *c->master_server_addr) ? c->master_server_addr
                                                                   : DEFAULT_MASTER;
    if (strstr(a->master, "://") && strncmp(a->master, "etcd://", 7) != 0 &&
        strncmp(a->master, "redis://", 8) != 0) {
        mc_log(MC_LOG_ERROR, TAG,
               "setup: master_server_addr '%s': HA masters are followed through etcd or "
               "Redis only; give \"etcd://h:2379[;h:2379]\", \"redis://h:6379\" or the master "
               "as host:port",
               a->master);
        return MC_NOT_SUPPORTED;
    }
    if (strlen(a->master) >= MC_STORE_NAME_MAX)
        BAD("master_server_addr is too long");
    if (c->tenant_id && strlen(c->tenant_id) >= TENANT_MAX)
        BAD("tenant_id is longer than %u bytes", TENANT_MAX - 1);
    if (c->ssd_offload_path && strlen(c->ssd_offload_path) > 4096)
        BAD("ssd_offload_path is too long");
    if (c->client_http_port < 0 || c->client_http_port > 65535)
        BAD("client_http_port %d: must be 0..65535", c->client_http_port);
    /* The environment (common/env.h: a bad value is an error naming the variable, and
     * fails setup). Every variable is read, so one run reports all the bad ones. */
    const char *bad = NULL;
    uint64_t hb = c->heartbeat_interval_ms, lo, hi, tries;
    uint32_t rpc_ms = c->rpc_timeout_ms;
    if (hb == 0 && mc_env_u64("MC_STORE_HEARTBEAT_MS", 1000, 10, 60000, &hb) != 0)
        bad = "MC_STORE_HEARTBEAT_MS";
    if (mc_env_u64("MC_STORE_CLIENT_MIN_PORT", MC_STORE_DEFAULT_MIN_PORT, 1, 65535, &lo) != 0)
        bad = "MC_STORE_CLIENT_MIN_PORT";
    if (mc_env_u64("MC_STORE_CLIENT_MAX_PORT", MC_STORE_DEFAULT_MAX_PORT, 1, 65535, &hi) != 0)
        bad = "MC_STORE_CLIENT_MAX_PORT";
    if (mc_env_u64("MC_STORE_CLIENT_SETUP_RETRIES", 20, 1, 1000, &tries) != 0)
        bad = "MC_STORE_CLIENT_SETUP_RETRIES";
    /* The master client would read it at create; reading it here fails setup before
     * the engine starts, with the variable named, instead of as an unreachable master. */
    if (rpc_ms == 0 && mc__master_env_timeout(&rpc_ms) != 0)
        bad = "MC_RPC_TIMEOUT_MS";
    if (bad)
        BAD("bad environment value %s (see the message above)", bad);
    if (hb < 10 || hb > 60000)
        BAD("heartbeat_interval_ms %llu: must be 10..60000", (unsigned long long)hb);
    a->hb_ms = (uint32_t)hb;
    a->rpc_timeout_ms = rpc_ms;
    a->min_port = (int)lo;
    a->max_port = (int)hi;
    a->retries = (int)tries;
    if (a->min_port > a->max_port)
        BAD("MC_STORE_CLIENT_MIN_PORT %d > MC_STORE_CLIENT_MAX_PORT %d", a->min_port,
            a->max_port);
    return MC_OK;
}

/* Whether the master's address accepts a TCP connection (for error messages only). */
static bool master_answers(const char *addr)
{
    char host[HOST_MAX];
    uint16_t port = 0;
    if (mc_sock_parse_hostport(addr, host, sizeof host, &port, 50051) != 0)
        return false;
    int fd = mc_sock_connect_tcp(host, port, 1000);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* Logs why a call to the master at addr failed with rc (MC_RPC_FAIL / MC_RPC_TIMEOUT)
 * during setup's `step`: the address, what a fresh TCP connect there says (refused, timed
 * out, unknown host) or, when it connects, that the service there did not answer as a
 * mooncake master, and what to check. An HA address (etcd://, redis://) gets the plain
 * code: the master client resolved the leader itself. */
static void explain_master_failure(const char *addr, const char *step, int rc)
{
    char host[HOST_MAX];
    uint16_t port = 0;
    if (strstr(addr, "://") ||
        mc_sock_parse_hostport(addr, host, sizeof host, &port, 50051) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: %s the master at %s failed: %s", step, addr,
               mc_strerror(rc));
        return;
    }
    int fd = mc_sock_connect_tcp(host, port, 2000);
    if (fd >= 0) {
        close(fd);
        if (rc == MC_RPC_TIMEOUT)
            mc_log(MC_LOG_ERROR, TAG,
                   "setup: %s the master at %s failed: timeout: %s:%u accepts connections "
                   "but sent no reply within the RPC timeout (MC_RPC_TIMEOUT_MS): not a "
                   "mooncake master, or a stuck one. Check that master_server_addr names "
                   "mooncake_master's --rpc_port (default 50051), not another port of it "
                   "(--metrics_port 9003, --http_metadata_server_port 8080) or another "
                   "service", step, addr, host, (unsigned)port);
        else
            mc_log(MC_LOG_ERROR, TAG,
                   "setup: %s the master at %s failed: not a mooncake master (bad frame): "
                   "%s:%u accepts connections but answered with something that is not the "
                   "master RPC protocol, or closed the connection. Check that "
                   "master_server_addr names mooncake_master's --rpc_port (default 50051), "
                   "not another port of it (--metrics_port 9003, "
                   "--http_metadata_server_port 8080) or another service; if it is the "
                   "master, it may have refused this connection at one of its limits (its "
                   "log and master_rpc_refused_total name which: --rpc_max_connections, "
                   "--rpc_max_connections_per_ip, --rpc_max_pending_request_bytes)", step,
                   addr, host, (unsigned)port);
        return;
    }
    const char *why, *check;
    switch (-fd) {
    case ECONNREFUSED:
        why = "connection refused";
        check = "nothing listens on that port: check that mooncake_master runs on that host "
                "and that the port is its --rpc_port (default 50051)";
        break;
    case ETIMEDOUT:
        why = "connect timed out";
        check = "check the host's address, the route to it and any firewall in between";
        break;
    case ENOENT:
        why = "unknown host";
        check = "the host name does not resolve: check master_server_addr";
        break;
    default:
        why = strerror(-fd);
        check = "check master_server_addr and that mooncake_master runs there";
        break;
    }
    mc_log(MC_LOG_ERROR, TAG, "setup: %s the master at %s failed: %s (%s)", step, addr, why,
           check);
}

/* Creates and initializes the engine (picking a port when none was given). */
static int start_engine(mc_store *s, const mc_store_config *c, const setup_args *a)
{
    const char *proto = (c->protocol && *c->protocol) ? c->protocol : "tcp";
    const char *dev = (c->rdma_devices && *c->rdma_devices) ? c->rdma_devices : NULL;
    char hp[MC_STORE_NAME_MAX + 16];
    int rc = MC_INTERNAL_ERROR;
    int tries = a->port >= 0 ? 1 : a->retries;
    uint64_t span = (uint64_t)(a->max_port - a->min_port + 1);
    for (int t = 0; t < tries; t++) {
        int port = a->port;
        if (port < 0) {
            /* A random port of the range. Outside P2P mode the name host:port must be
             * unique among this host's clients (it names our segment in the metadata
             * service), so it is held by a bound socket for as long as we live. */
            port = a->min_port + (int)(rand_u64() % span);
            if (!a->p2p) {
                s->port_fd = reserve_port(port);
                if (s->port_fd < 0) {
                    rc = MC_INTERNAL_ERROR;
                    continue; /* taken: try another at once */
                }
            }
        }
        join_host_port(hp, sizeof hp, a->host, port);
        mc_te *te = NULL;
        /* the engine's ports and its metadata client use the store's one secret (len 0:
         * none, and the engine does not look at MC_AUTH_TOKEN_FILE again); WRITEs into
         * segments with streaming stores (read again much later); everything else from
         * the environment, as mc_te_create(NULL) would */
        mc_te_opts to = {.auth = &s->auth, .stream_writes = 1};
        rc = mc_te_create(&to, &te);
        if (rc != MC_OK)
            return rc;
        rc = mc_te_initialize(te, hp, c->metadata_server, proto, dev);
        if (rc == MC_OK) {
            s->te = te;
            s->own_te = true;
            return MC_OK;
        }
        mc_te_destroy(te);
        if (s->port_fd >= 0) {
            close(s->port_fd);
            s->port_fd = -1;
        }
        /* The engine reports a listen collision as INTERNAL_ERROR: only that is retried
         * (after a pause: the other owner may be starting up as well). */
        if (rc != MC_INTERNAL_ERROR || a->port >= 0)
            break; /* not a port collision, or the port was given */
        mc_sleep_ms(100);
    }
    if (rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT)
        /* the engine's first step that leaves this process is publishing its address to
         * the metadata server: that is what failed, not the local ports */
        mc_log(MC_LOG_ERROR, TAG,
               "setup: the metadata server %s is not reachable (%s), so the transfer engine "
               "could not publish segment %s. Check that it runs: for the master's embedded "
               "server, that mooncake_master is running with --enable_http_metadata_server=1 "
               "and a --http_metadata_server_port that matches this URL (the master at "
               "master_server_addr %s %s); for a standalone one, that "
               "mooncake_http_metadata_server listens there",
               a->md_shown, mc_strerror(rc), a->port >= 0 ? c->local_hostname : a->host,
               a->master, master_answers(a->master) ? "accepts connections" :
                                                       "does not answer either");
    else if (rc == MC_OBJECT_ALREADY_EXISTS)
        mc_log(MC_LOG_ERROR, TAG,
               "setup: the segment name %s is registered in the metadata server %s by "
               "another engine that is alive or not provably dead (the reason is logged "
               "above): give another local_hostname port, or none to pick a free one",
               c->local_hostname, a->md_shown);
    else if (rc == MC_ILLEGAL_CLIENT)
        mc_log(MC_LOG_ERROR, TAG,
               "setup: the metadata server %s refused this client's requests (the cluster "
               "secret: the line above says which side lacks it or that they differ; set "
               "MC_AUTH_TOKEN_FILE to the cluster's token file, docs/security.md)",
               a->md_shown);
    else if (rc == MC_INVALID_PARAMS)
        mc_log(MC_LOG_ERROR, TAG,
               "setup: the transfer engine refused its configuration (local_hostname %s, "
               "metadata_server %s; the reason is logged above)",
               c->local_hostname, a->md_shown);
    else if (rc == MC_NOT_SUPPORTED && strcmp(proto, "tcp") != 0)
        mc_log(MC_LOG_ERROR, TAG,
               "setup: protocol \"%s\" is not available in this build or on this machine "
               "(mooncake-c moves bytes over TCP and same-host shared memory only): pass "
               "protocol=\"tcp\"%s",
               proto, strcmp(proto, "rdma") == 0 ? ", or set MC_FORCE_TCP=1 to run rdma "
                                                   "requests over TCP" : "");
    else if (a->port >= 0)
        mc_log(MC_LOG_ERROR, TAG, "setup: starting the transfer engine on %s failed: %s",
               c->local_hostname, mc_strerror(rc));
    else
        mc_log(MC_LOG_ERROR, TAG,
               "setup: starting the transfer engine on %s with a free port of %d..%d "
               "failed: %s",
               a->host, a->min_port, a->max_port, mc_strerror(rc));
    return rc;
}

static int setup_locked(mc_store *s, const mc_store_config *c, const setup_args *a)
{
    int rc;
    snprintf(s->protocol, sizeof s->protocol, "%s",
             (c->protocol && *c->protocol) ? c->protocol : "tcp");
    snprintf(s->tenant, sizeof s->tenant, "%s",
             (c->tenant_id && *c->tenant_id) ? c->tenant_id : "default");
    mc__cstats_reset(s); /* a fresh client: its counters start at 0 */

    /* 0. the cluster secret, before anything connects */
    if ((rc = load_secret(s, c)) != MC_OK)
        return rc;

    /* 1. engine */
    if (c->engine) {
        const char *nm = mc_te_segment_name(c->engine);
        if (!nm || !*nm) {
            mc_log(MC_LOG_ERROR, TAG, "setup: the engine given is not initialized");
            return MC_INVALID_PARAMS;
        }
        s->te = c->engine;
        s->own_te = false;
    } else if ((rc = start_engine(s, c, a)) != MC_OK) {
        return rc;
    }
    /* Our segment's name is the engine's (it picked the port); the host part ranks
     * replicas (same host first) in mc__replica_rank. */
    const char *nm = mc_te_segment_name(s->te);
    int port;
    if (!nm || strlen(nm) >= sizeof s->name ||
        mc__store_split_hostport(nm, s->host, sizeof s->host, &port) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: unusable engine segment name '%s'", nm ? nm : "");
        return MC_INVALID_PARAMS;
    }
    snprintf(s->name, sizeof s->name, "%s", nm);
    if (mc_metadata_host_id(s->host_id, sizeof s->host_id) != MC_OK)
        s->host_id[0] = '\0';

    /* 2. master */
    mc_master_client_opts mo = {.rpc_timeout_ms = a->rpc_timeout_ms, .auth = &s->auth};
    rc = mc_master_client_create(a->master, &mo, &s->mc);
    if (rc == MC_INVALID_PARAMS) {
        /* the master client named the address it could not parse */
        mc_log(MC_LOG_ERROR, TAG, "setup: master_server_addr '%s' is not usable", a->master);
        return rc;
    }
    if (rc == MC_ILLEGAL_CLIENT) {
        mc_log(MC_LOG_ERROR, TAG, "setup: the master at %s refused this client's "
               "connection (the cluster secret: the line above says which side lacks it or "
               "that they differ; give setup auth_token / auth_token_file or set "
               "MC_AUTH_TOKEN_FILE to the cluster's token file, docs/security.md)",
               a->master);
        return rc;
    }
    if (rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT) {
        explain_master_failure(a->master, "connecting to", rc);
        return rc;
    }
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot reach the master at %s: %s", a->master,
               mc_strerror(rc));
        return rc;
    }
    /* HA: a new leader knows none of our segments: ping (and remount) at once */
    mc_master_client_set_leader_hook(s->mc, mc__hb_kick, s);
    /* A put that finds its key in flight by another writer waits up to the transfer
     * timeout for it (write.c: settle_contested); the engine refused an unusable value
     * already (same range), so this read cannot fail. */
    uint64_t tt_s;
    if (mc_env_u64("MC_TRANSFER_TIMEOUT", MC_TE_DEFAULT_TIMEOUT_S, 1, MC_TE_MAX_TIMEOUT_S,
                   &tt_s) < 0)
        tt_s = MC_TE_DEFAULT_TIMEOUT_S;
    s->race_wait_ms = tt_s * 1000;
    /* A fresh identity per setup: the master ties our segments and leases to it. */
    s->client_id = new_uuid();
    atomic_store(&s->ping_ok, true);
    /* Owners fence our WRITEs by this id (docs/consistency.md): it goes in the HELLO of
     * every data connection the engine opens from now on. */
    rc = mc_te_set_writer_id(s->te, s->client_id.first, s->client_id.second);
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "setup: setting the engine's writer id failed: %s",
               mc_strerror(rc));
        return rc;
    }

    /* 3. global segment */
    if (c->global_segment_size > 0) {
        void *base = NULL;
        rc = mc_te_alloc_shared(s->te, (size_t)c->global_segment_size, &base);
        if (rc != MC_OK) {
            /* upstream real_client.cpp setup_internal: a segment that cannot be
             * allocated is INVALID_PARAMS (nothing was asked of the master's pool) */
            mc_log(MC_LOG_ERROR, TAG,
                   "setup: cannot allocate the %llu-byte global segment in this process "
                   "(the local memfd/mmap of shared memory failed, engine code %d): "
                   "global_segment_size is more than this machine can map; nothing was "
                   "mounted and the master's pool is not involved",
                   (unsigned long long)c->global_segment_size, rc);
            return MC_INVALID_PARAMS;
        }
        s->seg_base = base;
        s->seg_size = c->global_segment_size;
        s->seg_id = new_uuid();
        mc_master_segment seg;
        mc__store_fill_segment(s, &seg);
        rc = mc_master_client_mount_segment(s->mc, &seg, s->client_id);
        if (rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT) {
            explain_master_failure(a->master, "mounting the segment on", rc);
            return rc;
        }
        if (rc != MC_OK) {
            mc_log(MC_LOG_ERROR, TAG, "setup: mounting the segment on the master failed: %s",
                   mc_strerror(rc));
            return rc;
        }
        s->seg_mounted = true;
    } else {
        /* A pure client still registers itself, so pings are answered OK. */
        rc = mc_master_client_remount_segments(s->mc, NULL, 0, s->client_id);
        if (rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT) {
            explain_master_failure(a->master, "registering with", rc);
            return rc;
        }
        if (rc != MC_OK) {
            mc_log(MC_LOG_ERROR, TAG, "setup: registering with the master failed: %s",
                   mc_strerror(rc));
            return rc;
        }
    }

    /* 4. local buffer */
    if (c->local_buffer_size > 0) {
        s->ar = mc__lbuf_create(c->local_buffer_size);
        if (!s->ar) {
            mc_log(MC_LOG_ERROR, TAG, "setup: cannot map a %llu-byte local buffer",
                   (unsigned long long)c->local_buffer_size);
            return MC_NO_AVAILABLE_HANDLE;
        }
        rc = mc_te_register_memory(s->te, s->ar->base, (size_t)s->ar->size, NULL);
        if (rc != MC_OK) {
            mc_log(MC_LOG_ERROR, TAG, "setup: registering the local buffer failed: %s",
                   mc_strerror(rc));
            return rc;
        }
        s->ar_registered = true;
    }

    /* 5. heartbeat */
    rc = mc__hb_start(s, a->hb_ms);
    if (rc != MC_OK)
        return rc;

    /* 6. the disk tier (offload.c), when asked for */
    rc = mc__offload_start(s, c, a->hb_ms);
    if (rc != MC_OK)
        return rc;
    /* 7. shared-FS DISK replicas (shared_fs.c), when the master has --root_fs_dir */
    rc = mc__shared_fs_start(s, c, a->hb_ms);
    if (rc != MC_OK)
        return rc;
    /* 8. replica copy / move tasks (tasks.c) */
    rc = mc__tasks_start(s);
    if (rc != MC_OK)
        return rc;
    /* 9. the client HTTP server (client_http.c), when asked for: last, so everything
     * its handlers read is in place */
    return mc__chttp_start(s, c);
}

int mc_store_setup(mc_store *s, const mc_store_config *cfg)
{
    if (!s || !cfg) {
        mc_log(MC_LOG_ERROR, TAG, "setup: NULL store or config");
        return MC_INVALID_PARAMS;
    }
    setup_args a;
    int rc = validate(cfg, &a);
    if (rc != MC_OK)
        return rc;
    pthread_rwlock_wrlock(&s->life);
    if (atomic_load(&s->up)) {
        pthread_rwlock_unlock(&s->life);
        mc_log(MC_LOG_ERROR, TAG, "setup: this store is already set up (close it first)");
        return MC_INVALID_PARAMS;
    }
    rc = setup_locked(s, cfg, &a);
    if (rc != MC_OK) {
        teardown(s);
    } else {
        atomic_store(&s->up, true);
        mc_log(MC_LOG_INFO, TAG,
               "store client %s up: master %s, segment %llu bytes, local buffer %llu bytes",
               s->name, a.master, (unsigned long long)cfg->global_segment_size,
               (unsigned long long)cfg->local_buffer_size);
    }
    pthread_rwlock_unlock(&s->life);
    return rc;
}

int mc_store_close(mc_store *s)
{
    if (!s)
        return MC_OK;
    pthread_rwlock_wrlock(&s->life);
    int rc = MC_OK;
    if (atomic_load(&s->up)) {
        atomic_store(&s->up, false);
        rc = teardown(s);
    }
    pthread_rwlock_unlock(&s->life);
    return rc;
}

void mc_store_destroy(mc_store *s)
{
    if (!s)
        return;
    mc_store_close(s);
    pthread_rwlock_destroy(&s->life);
    pthread_rwlock_destroy(&s->ubuf_lock);
    pthread_rwlock_destroy(&s->own_fence);
    free(s->hb_pr);
    pthread_mutex_destroy(&s->hb_lock);
    pthread_cond_destroy(&s->hb_cond);
    pthread_mutex_destroy(&s->off_mu);
    pthread_cond_destroy(&s->off_cond);
    pthread_mutex_destroy(&s->task_mu);
    pthread_cond_destroy(&s->task_cond);
    mc__xseg_deinit(s);
    free(s);
}

bool mc_store_is_setup(mc_store *s)
{
    return s && atomic_load(&s->up);
}

int mc_store_get_hostname(mc_store *s, char *buf, size_t buflen)
{
    if (buf && buflen)
        buf[0] = '\0';
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    size_t n = strlen(s->name);
    if (!buf || buflen <= n) {
        rc = MC_BUFFER_OVERFLOW;
    } else {
        memcpy(buf, s->name, n + 1);
        rc = (int)n;
    }
    mc__store_leave(s);
    return rc;
}

mc_te *mc_store_engine(mc_store *s)
{
    if (mc__store_enter(s) != MC_OK)
        return NULL;
    mc_te *te = s->te;
    mc__store_leave(s);
    return te;
}

int mc_store_health_check(mc_store *s)
{
    if (!s || !atomic_load(&s->up))
        return MC_STORE_NOT_INITIALIZED;
    return atomic_load(&s->ping_ok) ? MC_STORE_HEALTHY : MC_STORE_MASTER_UNREACHABLE;
}

