/* store_client.c: the store client (include/mooncake/store.h).
 *
 * Structure: a store holds a life rwlock (calls take it shared, setup/close exclusive;
 * writer-preferring so close is never starved), the engine, a master client, its
 * global segment (memfd memory from the engine, mounted on the master), the local
 * buffer arena (refcounted: handles keep it alive after close), and a heartbeat thread.
 *
 * Data path: writes and reads are "items" (one per key) processed in chunks of at most
 * CHUNK_KEYS keys: one (batch) master RPC per step, then one transfer set per chunk
 * (all engine requests of all items submitted before any is waited for; replicas in
 * this client's own segment are memcpy'd while the engine works).
 *
 * Upstream counterparts: real_client.cpp (setup_internal, put/get, batch forms),
 * client_service.cpp (Put: PutStart/transfer/PutEnd/PutRevoke; Get: GetReplicaList,
 * replica choice, lease check; the heartbeat and remount). */
#include "mooncake/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/master_client.h"
#include "client/store_internal.h"
#include "alloc/allocator.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

#define TAG "store"
#define CHUNK_KEYS 4096u     /* keys per master RPC step / transfer set */
#define ARENA_ALIGN 64u      /* local buffer slices */
#define HOST_MAX MC_STORE_NAME_MAX
#define TENANT_MAX 256u
#define DEFAULT_MASTER "127.0.0.1:50051"
#define DEFAULT_SEGMENT (16ull << 20)

mc__store_hook_fn mc__store_test_hook;

static void hook(const char *point, const void *key, size_t key_len)
{
    mc__store_hook_fn f = mc__store_test_hook;
    if (f)
        f(point, key, key_len);
}

/* ------------------------------------------------------------------------------------ */
/* Local buffer arena                                                                   */
/* ------------------------------------------------------------------------------------ */

typedef struct arena {
    atomic_int refs;      /* the store's reference + one per live handle */
    pthread_mutex_t lock; /* guards alloc */
    void *base;
    uint64_t size;
    mc__alloc *alloc;
} arena;

struct mc_store_buffer {
    void *data;
    uint64_t size;
    arena *ar;       /* NULL: data is malloc'd (or NULL for size 0) */
    uint32_t handle; /* in ar->alloc */
};

static arena *arena_create(uint64_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    arena *a = calloc(1, sizeof *a);
    if (!a)
        abort();
    a->alloc = mc__alloc_create((uint64_t)(uintptr_t)p, size, ARENA_ALIGN);
    if (!a->alloc) {
        munmap(p, size);
        free(a);
        return NULL;
    }
    atomic_init(&a->refs, 1);
    pthread_mutex_init(&a->lock, NULL);
    a->base = p;
    a->size = size;
    return a;
}

static void arena_unref(arena *a)
{
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    mc__alloc_destroy(a->alloc);
    munmap(a->base, a->size);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* A handle for size bytes of the arena; NULL when it cannot hold them. */
static mc_store_buffer *arena_take(arena *a, uint64_t size)
{
    if (!a || size == 0)
        return NULL;
    uint64_t addr = 0;
    pthread_mutex_lock(&a->lock);
    uint32_t h = mc__alloc_alloc(a->alloc, size, &addr);
    pthread_mutex_unlock(&a->lock);
    if (h == MC__ALLOC_NONE)
        return NULL;
    mc_store_buffer *b = calloc(1, sizeof *b);
    if (!b)
        abort();
    atomic_fetch_add(&a->refs, 1);
    b->data = (void *)(uintptr_t)addr;
    b->size = size;
    b->ar = a;
    b->handle = h;
    return b;
}

/* A handle for size bytes: the arena when it has room, else malloc'd memory. NULL only
 * when malloc fails. */
static mc_store_buffer *buffer_new(arena *a, uint64_t size)
{
    if (size > 0) {
        mc_store_buffer *b = arena_take(a, size);
        if (b)
            return b;
    }
    mc_store_buffer *b = calloc(1, sizeof *b);
    if (!b)
        abort();
    if (size > 0) {
        if (size > SIZE_MAX || !(b->data = malloc((size_t)size))) {
            free(b);
            return NULL;
        }
    }
    b->size = size;
    return b;
}

void mc_store_buffer_free(mc_store_buffer *b)
{
    if (!b)
        return;
    if (b->ar) {
        pthread_mutex_lock(&b->ar->lock);
        mc__alloc_free(b->ar->alloc, b->handle);
        pthread_mutex_unlock(&b->ar->lock);
        arena_unref(b->ar);
    } else {
        free(b->data);
    }
    free(b);
}

void *mc_store_buffer_data(const mc_store_buffer *b)
{
    return b ? b->data : NULL;
}

uint64_t mc_store_buffer_size(const mc_store_buffer *b)
{
    return b ? b->size : 0;
}

/* ------------------------------------------------------------------------------------ */
/* The store                                                                            */
/* ------------------------------------------------------------------------------------ */

struct mc_store {
    pthread_rwlock_t life; /* shared: calls; exclusive: setup, close */
    atomic_bool up;        /* written under life (exclusive); read anywhere */

    /* Everything below is written under life (exclusive) and read under life (shared). */
    mc_te *te;
    bool own_te;
    mc_master_client *mc;
    mc_master_uuid client_id;
    char name[MC_STORE_NAME_MAX];   /* segment name "host:port" */
    char host[HOST_MAX];            /* host part of name */
    char host_id[MC_SEGMENT_MAX_HOST_ID];
    char protocol[MC_STORE_PROTOCOL_MAX];
    char tenant[TENANT_MAX];
    int port_fd;                    /* reservation of the auto-picked port, or -1 */

    void *seg_base;                 /* global segment (mc_te_alloc_shared), or NULL */
    uint64_t seg_size;
    mc_master_uuid seg_id;
    bool seg_mounted;

    arena *ar;                      /* local buffer, or NULL */
    bool ar_registered;

    /* heartbeat */
    pthread_t hb_thread;
    bool hb_started;
    pthread_mutex_t hb_lock;        /* guards hb_stop */
    pthread_cond_t hb_cond;
    bool hb_stop;
    uint32_t hb_interval_ms;
    atomic_bool ping_ok;            /* last ping succeeded */
    atomic_uint_fast64_t remounts;  /* NEED_REMOUNT handled */

    /* Buffers registered with mc_store_register_buffer: the zero-copy calls' bounds
     * check (check_ranges). Sorted by base, with the prefix maximum of their ends
     * (registrations may overlap). Guarded by ubuf_lock (register/unregister run under
     * life shared, so life does not order them). */
    pthread_rwlock_t ubuf_lock;
    struct ubuf *ubufs;
    uint64_t *ubuf_max_end;
    size_t n_ubufs, cap_ubufs;
};

typedef struct ubuf {
    uint64_t base, len; /* bytes */
} ubuf;

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

static bool key_ok(const void *key, size_t len)
{
    return key && len >= 1 && len <= MC_STORE_KEY_MAX;
}

/* Splits "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 address. host gets the
 * host (no brackets); *port = -1 when none. Returns 0, or -1 when malformed. */
static int split_host_port(const char *s, char *host, size_t hlen, int *port)
{
    *port = -1;
    const char *h = s, *p = NULL;
    size_t n;
    if (s[0] == '[') {
        const char *e = strchr(s, ']');
        if (!e)
            return -1;
        h = s + 1;
        n = (size_t)(e - h);
        if (e[1] == ':')
            p = e + 2;
        else if (e[1] != '\0')
            return -1;
    } else {
        const char *c = strchr(s, ':');
        if (c && strchr(c + 1, ':')) { /* bare IPv6: no port */
            n = strlen(s);
        } else if (c) {
            n = (size_t)(c - s);
            p = c + 1;
        } else {
            n = strlen(s);
        }
    }
    if (n == 0 || n >= hlen)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)host[i] <= ' ' || host[i] == '/')
            return -1;
    if (p) {
        if (!*p || strlen(p) > 5)
            return -1;
        long v = 0;
        for (const char *q = p; *q; q++) {
            if (*q < '0' || *q > '9')
                return -1;
            v = v * 10 + (*q - '0');
        }
        if (v < 1 || v > 65535)
            return -1;
        *port = (int)v;
    }
    return 0;
}

static void join_host_port(char *out, size_t len, const char *host, int port)
{
    if (strchr(host, ':'))
        snprintf(out, len, "[%s]:%d", host, port);
    else
        snprintf(out, len, "%s:%d", host, port);
}

static long env_long(const char *name, long def, long min, long max, bool *bad)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || !end || *end || x < min || x > max) {
        mc_log(MC_LOG_ERROR, TAG, "%s=%s: expected an integer in %ld..%ld", name, v, min, max);
        *bad = true;
        return def;
    }
    return x;
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

/* Takes the life lock shared; MC_OK when set up (the lock is then held). */
static int enter(mc_store *s)
{
    if (!s)
        return MC_INVALID_PARAMS;
    pthread_rwlock_rdlock(&s->life);
    if (!atomic_load(&s->up)) {
        pthread_rwlock_unlock(&s->life);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

static void leave(mc_store *s)
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
    mc_store *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->life, &ra);
    pthread_rwlockattr_destroy(&ra);
    atomic_init(&s->up, false);
    atomic_init(&s->ping_ok, false);
    atomic_init(&s->remounts, 0);
    s->port_fd = -1;
    pthread_rwlock_init(&s->ubuf_lock, NULL);
    pthread_mutex_init(&s->hb_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->hb_cond, &ca);
    pthread_condattr_destroy(&ca);
    *out = s;
    return MC_OK;
}

static void fill_segment(const mc_store *s, mc_master_segment *seg)
{
    memset(seg, 0, sizeof *seg);
    seg->id = s->seg_id;
    seg->name = s->name;
    seg->base = (uint64_t)(uintptr_t)s->seg_base;
    seg->size = s->seg_size;
    seg->te_endpoint = s->name;
    seg->protocol = s->protocol;
    seg->host_id = s->host_id;
}

static void heartbeat_once(mc_store *s)
{
    mc_master_ping_result pr = {0};
    int rc = mc_master_client_ping(s->mc, s->client_id, &pr);
    if (rc != MC_OK) {
        if (atomic_exchange(&s->ping_ok, false))
            mc_log(MC_LOG_WARN, TAG, "heartbeat to master %s failed: %s",
                   mc_master_client_address(s->mc), mc_strerror(rc));
        return;
    }
    if (!atomic_exchange(&s->ping_ok, true))
        mc_log(MC_LOG_INFO, TAG, "master %s reachable again", mc_master_client_address(s->mc));
    if (pr.client_status != MC_MASTER_CLIENT_NEED_REMOUNT)
        return;
    /* The master forgot us (restart, or we were silent past client_ttl): remount and
     * republish our descriptor (a master-embedded metadata server lost it too). */
    mc_master_segment seg;
    size_t n = 0;
    if (s->seg_base) {
        fill_segment(s, &seg);
        n = 1;
    }
    rc = mc_master_client_remount_segments(s->mc, n ? &seg : NULL, n, s->client_id);
    if (rc != MC_OK) {
        mc_log(MC_LOG_WARN, TAG, "remount after NEED_REMOUNT failed: %s (retrying)",
               mc_strerror(rc));
        return;
    }
    int prc = mc_te_republish(s->te);
    if (prc != MC_OK)
        mc_log(MC_LOG_WARN, TAG, "republishing the segment descriptor failed: %s",
               mc_strerror(prc));
    atomic_fetch_add(&s->remounts, 1);
    mc_log(MC_LOG_INFO, TAG, "remounted %zu segment(s) of %s after the master asked", n,
           s->name);
}

static void *heartbeat_main(void *arg)
{
    mc_store *s = arg;
    pthread_mutex_lock(&s->hb_lock);
    while (!s->hb_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)s->hb_interval_ms * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        while (!s->hb_stop && pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts) == 0) {
        }
        if (s->hb_stop)
            break;
        pthread_mutex_unlock(&s->hb_lock);
        heartbeat_once(s);
        pthread_mutex_lock(&s->hb_lock);
    }
    pthread_mutex_unlock(&s->hb_lock);
    return NULL;
}

/* Undoes whatever setup did (also after a partial setup). Caller holds life
 * exclusively. Returns MC_OK or the unmount's code. */
static int teardown(mc_store *s)
{
    int rc = MC_OK;
    if (s->hb_started) {
        pthread_mutex_lock(&s->hb_lock);
        s->hb_stop = true;
        pthread_cond_broadcast(&s->hb_cond);
        pthread_mutex_unlock(&s->hb_lock);
        pthread_join(s->hb_thread, NULL);
        s->hb_started = false;
    }
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
        arena_unref(s->ar);
        s->ar = NULL;
    }
    if (s->mc) {
        mc_master_client_destroy(s->mc);
        s->mc = NULL;
    }
    pthread_rwlock_wrlock(&s->ubuf_lock);
    free(s->ubufs);
    free(s->ubuf_max_end);
    s->ubufs = NULL;
    s->ubuf_max_end = NULL;
    s->n_ubufs = s->cap_ubufs = 0;
    pthread_rwlock_unlock(&s->ubuf_lock);
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
    return rc;
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
} setup_args;

static int validate(const mc_store_config *c, setup_args *a)
{
    memset(a, 0, sizeof *a);
    if (!c->local_hostname || !*c->local_hostname)
        BAD("local_hostname is required (\"host\" or \"host:port\")");
    if (strlen(c->local_hostname) >= MC_STORE_NAME_MAX - 8 ||
        split_host_port(c->local_hostname, a->host, sizeof a->host, &a->port) != 0)
        BAD("local_hostname '%s' is not \"host\" or \"host:port\" (port 1..65535)",
            c->local_hostname);
    if (!c->metadata_server || !*c->metadata_server)
        BAD("metadata_server is required (\"P2PHANDSHAKE\", \"http://host:port/metadata\", "
            "\"etcd://host:port\" or \"redis://host:port\")");
    mc_metadata_conn *conn = malloc(sizeof *conn); /* large; only kind is needed */
    if (!conn)
        abort();
    char err[256] = "";
    int rc = mc_metadata_parse_conn(c->metadata_server, conn, err, sizeof err);
    a->p2p = rc == MC_OK && conn->kind == MC_METADATA_P2P;
    free(conn);
    if (rc != MC_OK)
        BAD("metadata_server '%s': %s", c->metadata_server, err);
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
    if (strstr(a->master, "://")) {
        mc_log(MC_LOG_ERROR, TAG,
               "setup: master_server_addr '%s': HA master discovery is not supported; give "
               "the master as host:port",
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
    bool bad = false;
    long hb = c->heartbeat_interval_ms;
    if (hb == 0)
        hb = env_long("MC_STORE_HEARTBEAT_MS", 1000, 10, 60000, &bad);
    if (hb < 10 || hb > 60000)
        BAD("heartbeat_interval_ms %ld: must be 10..60000", hb);
    a->hb_ms = (uint32_t)hb;
    a->min_port = (int)env_long("MC_STORE_CLIENT_MIN_PORT", MC_STORE_DEFAULT_MIN_PORT, 1,
                                65535, &bad);
    a->max_port = (int)env_long("MC_STORE_CLIENT_MAX_PORT", MC_STORE_DEFAULT_MAX_PORT, 1,
                                65535, &bad);
    a->retries = (int)env_long("MC_STORE_CLIENT_SETUP_RETRIES", 20, 1, 1000, &bad);
    if (bad)
        BAD("bad environment value (see the message above)");
    if (a->min_port > a->max_port)
        BAD("MC_STORE_CLIENT_MIN_PORT %d > MC_STORE_CLIENT_MAX_PORT %d", a->min_port,
            a->max_port);
    return MC_OK;
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
        rc = mc_te_create(NULL, &te);
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
        if (rc != MC_INTERNAL_ERROR || a->port >= 0)
            break; /* not a port collision, or the port was given */
        mc_sleep_ms(100);
    }
    if (rc == MC_NOT_SUPPORTED && strcmp(proto, "tcp") != 0)
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
    if (c->enable_ssd_offload)
        mc_log(MC_LOG_WARN, TAG, "setup: SSD offload is not implemented; the store keeps "
                                 "objects in memory only");
    if (c->enable_client_http_server)
        mc_log(MC_LOG_WARN, TAG, "setup: the client HTTP server is not implemented "
                                 "(client_http_port %d ignored)", c->client_http_port);

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
    const char *nm = mc_te_segment_name(s->te);
    int port;
    if (!nm || strlen(nm) >= sizeof s->name ||
        split_host_port(nm, s->host, sizeof s->host, &port) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: unusable engine segment name '%s'", nm ? nm : "");
        return MC_INVALID_PARAMS;
    }
    snprintf(s->name, sizeof s->name, "%s", nm);
    if (mc_metadata_host_id(s->host_id, sizeof s->host_id) != MC_OK)
        s->host_id[0] = '\0';

    /* 2. master */
    mc_master_client_opts mo = {.rpc_timeout_ms = c->rpc_timeout_ms};
    rc = mc_master_client_create(a->master, &mo, &s->mc);
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot reach the master at %s: %s", a->master,
               mc_strerror(rc));
        return rc;
    }
    s->client_id = new_uuid();
    atomic_store(&s->ping_ok, true);

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
        fill_segment(s, &seg);
        rc = mc_master_client_mount_segment(s->mc, &seg, s->client_id);
        if (rc != MC_OK) {
            mc_log(MC_LOG_ERROR, TAG, "setup: mounting the segment on the master failed: %s",
                   mc_strerror(rc));
            return rc;
        }
        s->seg_mounted = true;
    } else {
        /* A pure client still registers itself, so pings are answered OK. */
        rc = mc_master_client_remount_segments(s->mc, NULL, 0, s->client_id);
        if (rc != MC_OK) {
            mc_log(MC_LOG_ERROR, TAG, "setup: registering with the master failed: %s",
                   mc_strerror(rc));
            return rc;
        }
    }

    /* 4. local buffer */
    if (c->local_buffer_size > 0) {
        s->ar = arena_create(c->local_buffer_size);
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
    s->hb_interval_ms = a->hb_ms;
    s->hb_stop = false;
    if (pthread_create(&s->hb_thread, NULL, heartbeat_main, s) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot start the heartbeat thread");
        return MC_INTERNAL_ERROR;
    }
    s->hb_started = true;
    return MC_OK;
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
    pthread_mutex_destroy(&s->hb_lock);
    pthread_cond_destroy(&s->hb_cond);
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
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    size_t n = strlen(s->name);
    if (!buf || buflen <= n) {
        rc = MC_BUFFER_OVERFLOW;
    } else {
        memcpy(buf, s->name, n + 1);
        rc = (int)n;
    }
    leave(s);
    return rc;
}

mc_te *mc_store_engine(mc_store *s)
{
    if (enter(s) != MC_OK)
        return NULL;
    mc_te *te = s->te;
    leave(s);
    return te;
}

int mc_store_health_check(mc_store *s)
{
    if (!s || !atomic_load(&s->up))
        return MC_STORE_NOT_INITIALIZED;
    return atomic_load(&s->ping_ok) ? MC_STORE_HEALTHY : MC_STORE_MASTER_UNREACHABLE;
}

/* ------------------------------------------------------------------------------------ */
/* Config conversion                                                                    */
/* ------------------------------------------------------------------------------------ */

typedef struct put_cfg {
    mc_master_put_config m;
    const char *pref[MC_MASTER_MAX_PREFERRED];
} put_cfg;

static void pref_add(put_cfg *p, const char *name)
{
    if (!name || !*name || p->m.n_preferred >= MC_MASTER_MAX_PREFERRED)
        return;
    for (size_t i = 0; i < p->m.n_preferred; i++)
        if (!strcmp(p->pref[i], name))
            return;
    p->pref[p->m.n_preferred++] = name;
}

/* Converts and checks a replicate config for a call on nkeys keys. same_node_ok: the
 * call accepts prefer_alloc_in_same_node. Returns MC_OK or MC_INVALID_PARAMS (logged). */
static int conv_cfg(mc_store *s, const mc_store_replicate_config *c, size_t nkeys,
                    bool same_node_ok, put_cfg *out)
{
    memset(out, 0, sizeof *out);
    out->m.replica_num = 1;
    out->m.preferred_segments = out->pref;
    if (!c)
        return MC_OK;
    const char *why = NULL;
    if (c->replica_num == 0)
        why = "replica_num must be >= 1";
    else if (c->nof_replica_num || c->dfs_replica_num)
        why = "NVMe-oF and DFS replicas are not supported (nof/dfs_replica_num must be 0)";
    else if (c->n_preferred_segments > MC_STORE_MAX_PREFERRED)
        why = "too many preferred_segments";
    else if (c->n_preferred_segments && !c->preferred_segments)
        why = "preferred_segments is NULL";
    else if (c->soft_pin_action < MC_STORE_SOFT_PIN_PRESERVE ||
             c->soft_pin_action > MC_STORE_SOFT_PIN_DISABLE)
        why = "soft_pin_action must be PRESERVE, ENABLE or DISABLE";
    else if (c->prefer_alloc_in_same_node && !same_node_ok)
        why = "prefer_alloc_in_same_node is only accepted by the multi-buffer puts (as "
              "upstream)";
    else if ((c->group_ids || c->n_group_ids) && (!c->group_ids || c->n_group_ids != nkeys))
        why = "group_ids must have one entry per key";
    else if (c->preferred_segment && strlen(c->preferred_segment) >= MC_STORE_NAME_MAX)
        why = "preferred_segment is too long";
    for (size_t i = 0; !why && i < c->n_preferred_segments; i++)
        if (!c->preferred_segments[i] || !*c->preferred_segments[i] ||
            strlen(c->preferred_segments[i]) >= MC_STORE_NAME_MAX)
            why = "a preferred_segments entry is empty or too long";
    if (why) {
        mc_log(MC_LOG_WARN, TAG, "ReplicateConfig: %s", why);
        return MC_INVALID_PARAMS;
    }
    out->m.replica_num =
        c->replica_num > MC_STORE_MAX_REPLICAS ? MC_STORE_MAX_REPLICAS : c->replica_num;
    if (c->prefer_alloc_in_same_node)
        pref_add(out, s->name);
    for (size_t i = 0; i < c->n_preferred_segments; i++)
        pref_add(out, c->preferred_segments[i]);
    pref_add(out, c->preferred_segment);
    int act = c->soft_pin_action;
    if (act == MC_STORE_SOFT_PIN_PRESERVE && c->with_soft_pin)
        act = MC_STORE_SOFT_PIN_ENABLE;
    out->m.soft_pin = (mc_master_soft_pin_action)act;
    out->m.soft_pin_ttl_set = c->soft_pin_ttl_set;
    out->m.soft_pin_ttl_ms = c->soft_pin_ttl_ms;
    out->m.with_hard_pin = c->with_hard_pin;
    out->m.strategy = MC_MASTER_STRATEGY_DEFAULT;
    return MC_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Transfer sets                                                                        */
/* ------------------------------------------------------------------------------------ */

typedef struct ep_cache {
    char name[MC_MASTER_NAME_MAX];
    mc_te_segment_t h;
    int rc;
} ep_cache;

typedef struct xfer {
    mc_store *s;
    mc_te_request *reqs;
    size_t *owner; /* item index of each request */
    size_t n, cap;
    ep_cache *eps;
    size_t neps, capeps;
} xfer;

static void xfer_init(xfer *x, mc_store *s)
{
    memset(x, 0, sizeof *x);
    x->s = s;
}

static void xfer_reset(xfer *x)
{
    x->n = 0;
}

static void xfer_deinit(xfer *x)
{
    free(x->reqs);
    free(x->owner);
    free(x->eps);
}

/* The engine handle of segment `ep` (cached per call). Returns MC_OK or the open's code. */
static int xfer_seg(xfer *x, const char *ep, mc_te_segment_t *h)
{
    for (size_t i = 0; i < x->neps; i++)
        if (!strcmp(x->eps[i].name, ep)) {
            *h = x->eps[i].h;
            return x->eps[i].rc;
        }
    if (x->neps == x->capeps) {
        x->capeps = x->capeps ? x->capeps * 2 : 8;
        x->eps = realloc(x->eps, x->capeps * sizeof *x->eps);
        if (!x->eps)
            abort();
    }
    ep_cache *e = &x->eps[x->neps++];
    snprintf(e->name, sizeof e->name, "%s", ep);
    e->h = -1;
    e->rc = mc_te_open_segment(x->s->te, ep, &e->h);
    *h = e->h;
    return e->rc;
}

static void xfer_add(xfer *x, int op, void *local, mc_te_segment_t h, uint64_t remote,
                     uint64_t len, size_t owner)
{
    if (len == 0)
        return;
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 16;
        x->reqs = realloc(x->reqs, x->cap * sizeof *x->reqs);
        x->owner = realloc(x->owner, x->cap * sizeof *x->owner);
        if (!x->reqs || !x->owner)
            abort();
    }
    x->reqs[x->n] = (mc_te_request){
        .opcode = op, .source = local, .target_id = h, .target_offset = remote, .length = len};
    x->owner[x->n++] = owner;
}

static int te_code(int err)
{
    return err == MC_RPC_TIMEOUT ? MC_RPC_TIMEOUT : MC_TRANSFER_FAIL;
}

/* Waits until batch b is terminal (the engine's transfer timeout always ends it). */
static void wait_terminal(mc_te *te, mc_te_batch_t b, mc_te_status *st)
{
    for (;;) {
        int rc = mc_te_wait_batch(te, b, -1, st);
        if (rc == MC_OK && st->state != MC_TE_PENDING && st->state != MC_TE_WAITING)
            return;
        if (rc == MC_INVALID_PARAMS) {
            st->state = MC_TE_FAILED;
            st->error = MC_INTERNAL_ERROR;
            return;
        }
    }
}

typedef struct pending_batch {
    mc_te_batch_t id;
    size_t first, n; /* requests [first, first+n) */
    int submit_rc;
} pending_batch;

/* Starts every request (in engine batches of at most MC_TE_MAX_BATCH), runs `during`
 * (own-memory copies) while they fly, waits for all, and sets errs[owner] (when still
 * 0) to the failure code of each failed request. */
static void xfer_run(xfer *x, int *errs, void (*during)(void *), void *ctx)
{
    mc_te *te = x->s->te;
    size_t nb = x->n ? (x->n + MC_TE_MAX_BATCH - 1) / MC_TE_MAX_BATCH : 0;
    pending_batch *pb = nb ? calloc(nb, sizeof *pb) : NULL;
    if (nb && !pb)
        abort();
    for (size_t i = 0; i < nb; i++) {
        pb[i].first = i * MC_TE_MAX_BATCH;
        pb[i].n = x->n - pb[i].first < MC_TE_MAX_BATCH ? x->n - pb[i].first : MC_TE_MAX_BATCH;
        pb[i].submit_rc = mc_te_allocate_batch(te, pb[i].n, &pb[i].id);
        if (pb[i].submit_rc == MC_OK) {
            pb[i].submit_rc = mc_te_submit(te, pb[i].id, x->reqs + pb[i].first, pb[i].n);
            if (pb[i].submit_rc != MC_OK) {
                mc_te_free_batch(te, pb[i].id);
                pb[i].id = 0;
            }
        } else {
            pb[i].id = 0;
        }
    }
    if (during)
        during(ctx);
    for (size_t i = 0; i < nb; i++) {
        if (!pb[i].id) {
            int code = pb[i].submit_rc == MC_INVALID_PARAMS ? MC_TRANSFER_FAIL
                                                            : te_code(pb[i].submit_rc);
            for (size_t k = 0; k < pb[i].n; k++) {
                size_t o = x->owner[pb[i].first + k];
                if (!errs[o])
                    errs[o] = code;
            }
            continue;
        }
        mc_te_status st;
        wait_terminal(te, pb[i].id, &st);
        if (st.state != MC_TE_COMPLETED) {
            for (size_t k = 0; k < pb[i].n; k++) {
                mc_te_status ts;
                size_t o = x->owner[pb[i].first + k];
                if (mc_te_get_transfer_status(te, pb[i].id, k, &ts) != MC_OK ||
                    ts.state != MC_TE_COMPLETED) {
                    if (!errs[o])
                        errs[o] = te_code(ts.error);
                }
            }
        }
        mc_te_free_batch(te, pb[i].id);
    }
    free(pb);
}

/* True when [addr, addr+len) lies in this client's global segment. */
static bool in_own_segment(const mc_store *s, const char *ep, uint64_t addr, uint64_t len)
{
    if (!s->seg_base || strcmp(ep, s->name) != 0)
        return false;
    uint64_t base = (uint64_t)(uintptr_t)s->seg_base;
    return addr >= base && len <= s->seg_size && addr - base <= s->seg_size - len;
}

static int replica_rank(const mc_store *s, const mc_master_replica *r)
{
    if (in_own_segment(s, r->transport_endpoint, r->address, r->size))
        return 0;
    char h[HOST_MAX];
    int port;
    if (split_host_port(r->transport_endpoint, h, sizeof h, &port) == 0 && !strcmp(h, s->host))
        return 1;
    return 2;
}

/* ------------------------------------------------------------------------------------ */
/* Writes                                                                               */
/* ------------------------------------------------------------------------------------ */

typedef struct witem {
    const void *key;
    size_t klen;
    const mc_store_iov *iov;
    size_t niov;
    mc_store_iov one; /* for single-buffer sources */
    uint64_t size;
    size_t first;     /* first position with the same key (== own index when unique) */
    int status;       /* result; INVALID_PARAMS etc. set before the RPCs */
    bool active;      /* goes to the master */
} witem;

static uint64_t key_hash(const void *k, size_t n)
{
    const unsigned char *p = k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Marks, for every active item, the first position holding the same key; later ones
 * become inactive. */
static void dedupe(witem *it, size_t n)
{
    for (size_t i = 0; i < n; i++)
        it[i].first = i;
    if (n < 2)
        return;
    size_t cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    size_t *tab = malloc(cap * sizeof *tab);
    if (!tab)
        abort();
    for (size_t i = 0; i < cap; i++)
        tab[i] = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (!it[i].active)
            continue;
        size_t j = (size_t)key_hash(it[i].key, it[i].klen) & (cap - 1);
        for (;;) {
            size_t t = tab[j];
            if (t == SIZE_MAX) {
                tab[j] = i;
                break;
            }
            if (it[t].klen == it[i].klen && !memcmp(it[t].key, it[i].key, it[i].klen)) {
                it[i].first = t;
                it[i].active = false;
                break;
            }
            j = (j + 1) & (cap - 1);
        }
    }
    free(tab);
}

typedef struct wcopy_ctx {
    mc_store *s;
    witem *it;
    size_t *idx;
    mc_master_replica_list *reps;
    int *errs;
    size_t m;
} wcopy_ctx;

/* Writes the replicas that live in this client's own segment (memcpy). */
static void write_own(void *arg)
{
    wcopy_ctx *c = arg;
    for (size_t k = 0; k < c->m; k++) {
        witem *w = &c->it[c->idx[k]];
        if (c->errs[k] || w->status != MC_OK)
            continue;
        const mc_master_replica_list *rl = &c->reps[k];
        for (uint32_t r = 0; r < rl->n; r++) {
            const mc_master_replica *rp = &rl->replicas[r];
            if (rp->size == 0 || !in_own_segment(c->s, rp->transport_endpoint, rp->address,
                                                 rp->size))
                continue;
            uint64_t off = 0;
            for (size_t p = 0; p < w->niov; p++) {
                if (w->iov[p].len)
                    memcpy((char *)(uintptr_t)rp->address + off, w->iov[p].base,
                           (size_t)w->iov[p].len);
                off += w->iov[p].len;
            }
        }
    }
}

/* Processes the active items idx[0..m) (a chunk): start, write, end/revoke. */
static void write_chunk(mc_store *s, bool upsert, witem *it, const size_t *idx, size_t m,
                        const mc_master_put_config *cfg)
{
    mc_master_key *keys = malloc(m * sizeof *keys);
    uint64_t *sizes = malloc(m * sizeof *sizes);
    int *st = malloc(m * sizeof *st);
    int *errs = calloc(m, sizeof *errs);
    mc_master_replica_list *reps = calloc(m, sizeof *reps);
    if (!keys || !sizes || !st || !errs || !reps)
        abort();
    for (size_t k = 0; k < m; k++) {
        keys[k] = (mc_master_key){it[idx[k]].key, it[idx[k]].klen};
        sizes[k] = it[idx[k]].size;
    }
    int rc;
    if (m == 1) {
        st[0] = upsert ? mc_master_client_upsert_start(s->mc, s->client_id, keys[0].data,
                                                       keys[0].len, sizes[0], cfg, &reps[0])
                       : mc_master_client_put_start(s->mc, s->client_id, keys[0].data,
                                                    keys[0].len, sizes[0], cfg, &reps[0]);
    } else {
        rc = upsert ? mc_master_client_batch_upsert_start(s->mc, s->client_id, keys, sizes, m,
                                                          cfg, reps, st)
                    : mc_master_client_batch_put_start(s->mc, s->client_id, keys, sizes, m,
                                                       cfg, reps, st);
        (void)rc; /* per-item statuses carry everything */
    }
    size_t started = 0;
    for (size_t k = 0; k < m; k++) {
        witem *w = &it[idx[k]];
        if (st[k] == MC_OK) {
            w->status = MC_OK;
            started++;
        } else if (st[k] == MC_OBJECT_ALREADY_EXISTS && !upsert) {
            w->status = MC_OK; /* the old value stays (API.md §5) */
            errs[k] = 1;       /* nothing to write or end */
        } else {
            w->status = st[k];
            errs[k] = 1;
        }
    }
    if (started) {
        size_t first = 0;
        while (errs[first])
            first++;
        hook(MC__STORE_HOOK_PUT_STARTED, keys[first].data, keys[first].len);

        /* Build the engine requests; own-segment replicas are copied while they fly. */
        xfer x;
        xfer_init(&x, s);
        int *terr = calloc(m, sizeof *terr);
        if (!terr)
            abort();
        for (size_t k = 0; k < m; k++) {
            if (errs[k])
                continue;
            witem *w = &it[idx[k]];
            const mc_master_replica_list *rl = &reps[k];
            if (rl->n == 0) {
                terr[k] = MC_INTERNAL_ERROR;
                continue;
            }
            for (uint32_t r = 0; r < rl->n && !terr[k]; r++) {
                mc_master_replica *rp = &reps[k].replicas[r];
                rp->transport_endpoint[sizeof rp->transport_endpoint - 1] = '\0';
                if (rp->size != w->size) {
                    terr[k] = MC_INTERNAL_ERROR; /* the master gave a wrong size */
                    break;
                }
                if (rp->size == 0 ||
                    in_own_segment(s, rp->transport_endpoint, rp->address, rp->size))
                    continue;
                mc_te_segment_t h;
                int orc = xfer_seg(&x, rp->transport_endpoint, &h);
                if (orc != MC_OK) {
                    terr[k] = MC_TRANSFER_FAIL;
                    break;
                }
                uint64_t off = 0;
                for (size_t p = 0; p < w->niov; p++) {
                    xfer_add(&x, MC_TE_OP_WRITE, w->iov[p].base, h, rp->address + off,
                             w->iov[p].len, k);
                    off += w->iov[p].len;
                }
            }
        }
        wcopy_ctx cc = {s, it, (size_t *)idx, reps, terr, m};
        /* errs marks items not started; terr items failed before submission. Own
         * copies skip both. */
        for (size_t k = 0; k < m; k++)
            if (errs[k] && !terr[k])
                terr[k] = -1; /* placeholder: not started */
        xfer_run(&x, terr, write_own, &cc);
        xfer_deinit(&x);

        /* End the written ones, revoke the failed ones (one batch RPC each). */
        mc_master_key *ek = malloc(m * sizeof *ek), *rk = malloc(m * sizeof *rk);
        size_t *ei = malloc(m * sizeof *ei), *ri = malloc(m * sizeof *ri);
        if (!ek || !rk || !ei || !ri)
            abort();
        size_t ne = 0, nr = 0;
        for (size_t k = 0; k < m; k++) {
            if (errs[k])
                continue;
            if (terr[k]) {
                it[idx[k]].status = terr[k];
                rk[nr] = keys[k];
                ri[nr++] = k;
            } else {
                ek[ne] = keys[k];
                ei[ne++] = k;
            }
        }
        if (ne) {
            if (ne == 1) {
                st[0] = upsert ? mc_master_client_upsert_end(s->mc, s->client_id, ek[0].data,
                                                             ek[0].len)
                               : mc_master_client_put_end(s->mc, s->client_id, ek[0].data,
                                                          ek[0].len);
            } else {
                rc = upsert ? mc_master_client_batch_upsert_end(s->mc, s->client_id, ek, ne, st)
                            : mc_master_client_batch_put_end(s->mc, s->client_id, ek, ne, st);
            }
            for (size_t j = 0; j < ne; j++)
                it[idx[ei[j]]].status = st[j];
        }
        if (nr) {
            if (nr == 1) {
                st[0] = upsert ? mc_master_client_upsert_revoke(s->mc, s->client_id,
                                                                rk[0].data, rk[0].len)
                               : mc_master_client_put_revoke(s->mc, s->client_id, rk[0].data,
                                                             rk[0].len);
            } else {
                rc = upsert
                         ? mc_master_client_batch_upsert_revoke(s->mc, s->client_id, rk, nr, st)
                         : mc_master_client_batch_put_revoke(s->mc, s->client_id, rk, nr, st);
            }
            for (size_t j = 0; j < nr; j++)
                if (st[j] != MC_OK)
                    mc_log(MC_LOG_DEBUG, TAG, "put_revoke after a failed write: %s",
                           mc_strerror(st[j]));
        }
        free(ek);
        free(rk);
        free(ei);
        free(ri);
        free(terr);
    }
    free(keys);
    free(sizes);
    free(st);
    free(errs);
    free(reps);
}

/* Runs the write protocol for items[0..n) whose status is MC_OK (the others keep their
 * status). Caller holds life shared. */
static void do_write(mc_store *s, bool upsert, witem *it, size_t n,
                     const mc_master_put_config *cfg)
{
    for (size_t i = 0; i < n; i++)
        it[i].active = it[i].status == MC_OK;
    dedupe(it, n);
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx)
        abort();
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].active)
            idx[m++] = i;
    for (size_t c = 0; c < m; c += CHUNK_KEYS)
        write_chunk(s, upsert, it, idx + c, m - c < CHUNK_KEYS ? m - c : CHUNK_KEYS, cfg);
    for (size_t i = 0; i < n; i++)
        if (it[i].first != i)
            it[i].status = it[it[i].first].status;
    free(idx);
}

/* ---- the bounds check of caller memory against register_buffer's ranges ---- */

static void ubuf_rebuild_locked(mc_store *s)
{
    uint64_t m = 0;
    for (size_t i = 0; i < s->n_ubufs; i++) {
        if (s->ubufs[i].base + s->ubufs[i].len > m)
            m = s->ubufs[i].base + s->ubufs[i].len;
        s->ubuf_max_end[i] = m;
    }
}

/* Index of the last buffer with base <= addr, or -1. Caller holds ubuf_lock. */
static long ubuf_find_le(const mc_store *s, uint64_t addr)
{
    size_t lo = 0, hi = s->n_ubufs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->ubufs[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

/* Records [base, base+len) (the engine accepted it; the same base again is a no-op). */
static void ubuf_add(mc_store *s, uint64_t base, uint64_t len)
{
    pthread_rwlock_wrlock(&s->ubuf_lock);
    long i = ubuf_find_le(s, base);
    if (i < 0 || s->ubufs[i].base != base) {
        if (s->n_ubufs == s->cap_ubufs) {
            s->cap_ubufs = s->cap_ubufs ? s->cap_ubufs * 2 : 16;
            s->ubufs = realloc(s->ubufs, s->cap_ubufs * sizeof *s->ubufs);
            s->ubuf_max_end = realloc(s->ubuf_max_end, s->cap_ubufs * sizeof *s->ubuf_max_end);
            if (!s->ubufs || !s->ubuf_max_end)
                abort();
        }
        size_t at = (size_t)(i + 1);
        memmove(s->ubufs + at + 1, s->ubufs + at, (s->n_ubufs - at) * sizeof *s->ubufs);
        s->ubufs[at] = (ubuf){base, len};
        s->n_ubufs++;
        ubuf_rebuild_locked(s);
    }
    pthread_rwlock_unlock(&s->ubuf_lock);
}

/* Forgets the buffer that starts at base (its memory is plain caller memory again). */
static void ubuf_remove(mc_store *s, uint64_t base)
{
    pthread_rwlock_wrlock(&s->ubuf_lock);
    long i = ubuf_find_le(s, base);
    if (i >= 0 && s->ubufs[i].base == base) {
        memmove(s->ubufs + i, s->ubufs + i + 1,
                (s->n_ubufs - (size_t)i - 1) * sizeof *s->ubufs);
        s->n_ubufs--;
        ubuf_rebuild_locked(s);
    }
    pthread_rwlock_unlock(&s->ubuf_lock);
}

/* The check every zero-copy path runs on the caller's ranges before any RPC or transfer
 * (the `op` it names in the log). Memory that was never registered (or was
 * unregistered) is the caller's and is used as given (upstream: over TCP unregistered
 * memory works). A range that starts inside a buffer registered with
 * mc_store_register_buffer must end inside one of the registered buffers that hold its
 * start: the registration is the caller's statement of how large that buffer is, so
 * running past it is a bad argument, not a transfer to attempt. Returns MC_OK, or
 * MC_INVALID_PARAMS; the first refusal of a call is logged (*logged, when given, says
 * a line was already written for this call). */
static int check_ranges(mc_store *s, const mc_store_iov *iov, size_t n, const char *op,
                        size_t index, bool *logged)
{
    if (!s)
        return MC_OK; /* the call itself reports the NULL store */
    int rc = MC_OK;
    pthread_rwlock_rdlock(&s->ubuf_lock);
    for (size_t p = 0; p < n && rc == MC_OK && s->n_ubufs; p++) {
        uint64_t a = (uint64_t)(uintptr_t)iov[p].base, l = iov[p].len;
        if (!l)
            continue;
        const ubuf *hit = NULL;
        bool fits = false;
        for (long i = ubuf_find_le(s, a); i >= 0 && s->ubuf_max_end[i] > a && !fits; i--) {
            const ubuf *u = &s->ubufs[i];
            if (a >= u->base + u->len)
                continue; /* ends before a; an earlier one may still hold it */
            hit = u;
            fits = l <= u->base + u->len - a;
        }
        if (hit && !fits) {
            rc = MC_INVALID_PARAMS;
            char which[40] = "";
            if (logged)
                snprintf(which, sizeof which, " (key #%zu of the batch)", index);
            if (!logged || !*logged)
                mc_log(MC_LOG_ERROR, TAG,
                       "%s%s: the range 0x%llx + %llu bytes starts inside the buffer "
                       "registered at 0x%llx (%llu bytes) and runs past its end by %llu "
                       "bytes; refused with INVALID_PARAMS before any transfer (register the "
                       "whole buffer, or pass a size that fits)",
                       op, which, (unsigned long long)a, (unsigned long long)l,
                       (unsigned long long)hit->base, (unsigned long long)hit->len,
                       (unsigned long long)(a + l < a ? l : a + l - (hit->base + hit->len)));
            if (logged)
                *logged = true;
        }
    }
    pthread_rwlock_unlock(&s->ubuf_lock);
    return rc;
}

/* Checks parts and sums their lengths; MC_OK or MC_INVALID_PARAMS. */
static int iov_total(const mc_store_iov *iov, size_t n, uint64_t *total)
{
    if (n > MC_STORE_MAX_PARTS || (n && !iov))
        return MC_INVALID_PARAMS;
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) {
        if (iov[i].len && !iov[i].base)
            return MC_INVALID_PARAMS;
        if (iov[i].len > MC_STORE_MAX_SEGMENT_SIZE || t + iov[i].len > MC_STORE_MAX_SEGMENT_SIZE)
            return MC_INVALID_PARAMS;
        t += iov[i].len;
    }
    *total = t;
    return MC_OK;
}

static int write_single(mc_store *s, bool upsert, const void *key, size_t key_len,
                        const mc_store_iov *parts, size_t nparts,
                        const mc_store_replicate_config *cfg)
{
    if (!key_ok(key, key_len)) {
        mc_log(MC_LOG_WARN, TAG, "put: the key must be 1..%u bytes (got %zu)",
               MC_STORE_KEY_MAX, key ? key_len : 0);
        return MC_INVALID_PARAMS;
    }
    witem w = {.key = key, .klen = key_len, .iov = parts, .niov = nparts};
    if (iov_total(parts, nparts, &w.size) != MC_OK ||
        check_ranges(s, parts, nparts, upsert ? "upsert" : "put", 0, NULL) != MC_OK)
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    put_cfg pc;
    rc = conv_cfg(s, cfg, 1, false, &pc);
    if (rc == MC_OK) {
        w.status = MC_OK;
        do_write(s, upsert, &w, 1, &pc.m);
        rc = w.status;
    }
    leave(s);
    return rc;
}

int mc_store_put(mc_store *s, const void *key, size_t key_len, const void *value, size_t len,
                 const mc_store_replicate_config *cfg)
{
    if (len && !value)
        return MC_INVALID_PARAMS;
    mc_store_iov one = {(void *)(uintptr_t)value, len};
    return write_single(s, false, key, key_len, &one, 1, cfg);
}

int mc_store_put_parts(mc_store *s, const void *key, size_t key_len, const mc_store_iov *parts,
                       size_t nparts, const mc_store_replicate_config *cfg)
{
    return write_single(s, false, key, key_len, parts, nparts, cfg);
}

int mc_store_upsert(mc_store *s, const void *key, size_t key_len, const void *value, size_t len,
                    const mc_store_replicate_config *cfg)
{
    if (len && !value)
        return MC_INVALID_PARAMS;
    mc_store_iov one = {(void *)(uintptr_t)value, len};
    return write_single(s, true, key, key_len, &one, 1, cfg);
}

int mc_store_upsert_parts(mc_store *s, const void *key, size_t key_len,
                          const mc_store_iov *parts, size_t nparts,
                          const mc_store_replicate_config *cfg)
{
    return write_single(s, true, key, key_len, parts, nparts, cfg);
}

static void fill_all(int *results, size_t n, int code)
{
    if (results)
        for (size_t i = 0; i < n; i++)
            results[i] = code;
}

/* Batch writes: values/sizes (single buffers) or iovs/iovcnt (multi). */
static int write_batch(mc_store *s, bool upsert, const mc_store_key *keys, size_t n,
                       const void *const *values, const uint64_t *sizes,
                       const mc_store_iov *const *iovs, const size_t *iovcnt,
                       const mc_store_replicate_config *cfg, bool same_node_ok, int *results)
{
    if (!results)
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    if (n > MC_STORE_MAX_BATCH || !keys || (!iovs && (!values || !sizes)) ||
        (iovs && !iovcnt)) {
        fill_all(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    int rc = enter(s);
    if (rc != MC_OK) {
        fill_all(results, n, rc);
        return rc;
    }
    put_cfg pc;
    rc = conv_cfg(s, cfg, n, same_node_ok, &pc);
    if (rc != MC_OK) {
        leave(s);
        fill_all(results, n, rc);
        return rc;
    }
    witem *it = calloc(n, sizeof *it);
    if (!it)
        abort();
    bool logged = false;
    for (size_t i = 0; i < n; i++) {
        witem *w = &it[i];
        w->key = keys[i].data;
        w->klen = keys[i].len;
        w->status = key_ok(w->key, w->klen) ? MC_OK : MC_INVALID_PARAMS;
        if (iovs) {
            w->iov = iovs[i];
            w->niov = iovcnt[i];
        } else {
            w->one = (mc_store_iov){(void *)(uintptr_t)values[i], sizes[i]};
            w->iov = &w->one;
            w->niov = 1;
        }
        if (w->status == MC_OK && iov_total(w->iov, w->niov, &w->size) != MC_OK)
            w->status = MC_INVALID_PARAMS;
        if (w->status == MC_OK &&
            check_ranges(s, w->iov, w->niov, upsert ? "batch upsert" : "batch put", i,
                         &logged) != MC_OK)
            w->status = MC_INVALID_PARAMS;
    }
    do_write(s, upsert, it, n, &pc.m);
    for (size_t i = 0; i < n; i++)
        results[i] = it[i].status;
    free(it);
    leave(s);
    return MC_OK;
}

int mc_store_batch_put_from(mc_store *s, const mc_store_key *keys, size_t n,
                            const void *const *values, const uint64_t *sizes,
                            const mc_store_replicate_config *cfg, int *results)
{
    return write_batch(s, false, keys, n, values, sizes, NULL, NULL, cfg, false, results);
}

int mc_store_batch_put_from_multi_buffers(mc_store *s, const mc_store_key *keys, size_t n,
                                          const mc_store_iov *const *iovs, const size_t *iovcnt,
                                          const mc_store_replicate_config *cfg, int *results)
{
    return write_batch(s, false, keys, n, NULL, NULL, iovs, iovcnt, cfg, true, results);
}

int mc_store_batch_upsert_from(mc_store *s, const mc_store_key *keys, size_t n,
                               const void *const *values, const uint64_t *sizes,
                               const mc_store_replicate_config *cfg, int *results)
{
    return write_batch(s, true, keys, n, values, sizes, NULL, NULL, cfg, false, results);
}

int mc_store_batch_upsert_from_multi_buffers(mc_store *s, const mc_store_key *keys, size_t n,
                                             const mc_store_iov *const *iovs,
                                             const size_t *iovcnt,
                                             const mc_store_replicate_config *cfg,
                                             int *results)
{
    return write_batch(s, true, keys, n, NULL, NULL, iovs, iovcnt, cfg, true, results);
}

/* ------------------------------------------------------------------------------------ */
/* Reads                                                                                */
/* ------------------------------------------------------------------------------------ */

enum { DEST_IOV = 0, DEST_ALLOC = 1, DEST_HANDLE = 2 };

typedef struct ritem {
    const void *key;
    size_t klen;
    const mc_store_iov *iov; /* DEST_IOV: the caller's; else &one once allocated */
    size_t niov;
    mc_store_iov one;
    void *allocated;         /* DEST_ALLOC: what alloc returned */
    mc_store_buffer *handle; /* DEST_HANDLE */
    int64_t result;          /* size or negative; MC_OK while pending */
    bool active;
} ritem;

typedef struct read_op {
    int mode;
    mc_store_alloc_fn alloc;
    void *ctx;
} read_op;

typedef struct rstate {
    uint64_t size;
    uint64_t deadline; /* ms, monotonic */
    uint32_t tried;    /* replica bit mask */
    int last_err;
    int chosen;        /* replica in flight this round, -1 none */
    bool done;         /* bytes are in place */
    bool failed;
} rstate;

/* Copies replica rp (own memory) into the item's destination. */
static void read_own(const ritem *r, const mc_master_replica *rp, uint64_t size)
{
    uint64_t off = 0;
    for (size_t p = 0; p < r->niov && off < size; p++) {
        uint64_t l = r->iov[p].len < size - off ? r->iov[p].len : size - off;
        if (l)
            memcpy(r->iov[p].base, (const char *)(uintptr_t)rp->address + off, (size_t)l);
        off += l;
    }
}

/* Picks the best replica not tried yet; -1 when none is left. */
static int pick_replica(const mc_store *s, const mc_master_replica_list *rl, const rstate *rs)
{
    int best = -1, best_rank = 99;
    for (uint32_t r = 0; r < rl->n; r++) {
        if (rs->tried & (1u << r))
            continue;
        int rank = replica_rank(s, &rl->replicas[r]);
        if (rank < best_rank) {
            best = (int)r;
            best_rank = rank;
        }
    }
    return best;
}

static void read_chunk(mc_store *s, ritem *it, const size_t *idx, size_t m, const read_op *op)
{
    mc_master_key *keys = malloc(m * sizeof *keys);
    int *st = malloc(m * sizeof *st);
    int *errs = malloc(m * sizeof *errs);
    rstate *rs = calloc(m, sizeof *rs);
    mc_master_replica_list *reps = calloc(m, sizeof *reps);
    if (!keys || !st || !errs || !rs || !reps)
        abort();
    for (size_t k = 0; k < m; k++)
        keys[k] = (mc_master_key){it[idx[k]].key, it[idx[k]].klen};
    uint64_t t0 = mc_now_ms(); /* the lease is measured from before the request */
    if (m == 1)
        st[0] = mc_master_client_get_replica_list(s->mc, keys[0].data, keys[0].len, &reps[0]);
    else
        mc_master_client_batch_get_replica_list(s->mc, keys, m, reps, st);

    /* Sizes, destinations. */
    for (size_t k = 0; k < m; k++) {
        ritem *r = &it[idx[k]];
        rs[k].chosen = -1;
        rs[k].last_err = MC_TRANSFER_FAIL;
        if (st[k] != MC_OK) {
            r->result = st[k];
            rs[k].failed = true;
            continue;
        }
        mc_master_replica_list *rl = &reps[k];
        if (rl->n == 0 || rl->n > MC_MASTER_MAX_REPLICAS) {
            r->result = MC_REPLICA_IS_NOT_READY;
            rs[k].failed = true;
            continue;
        }
        uint64_t size = rl->replicas[0].size;
        for (uint32_t j = 0; j < rl->n; j++) {
            rl->replicas[j].transport_endpoint[sizeof rl->replicas[j].transport_endpoint - 1] =
                '\0';
            if (rl->replicas[j].size != size)
                rs[k].tried |= 1u << j; /* inconsistent: never read it */
        }
        if (size > MC_STORE_MAX_SEGMENT_SIZE || size > SIZE_MAX) {
            r->result = MC_INTERNAL_ERROR;
            rs[k].failed = true;
            continue;
        }
        rs[k].size = size;
        rs[k].deadline = t0 + rl->lease_ttl_ms;
        if (op->mode == DEST_IOV) {
            uint64_t cap = 0;
            bool ok = true;
            for (size_t p = 0; p < r->niov; p++) {
                if (r->iov[p].len && !r->iov[p].base)
                    ok = false;
                cap += r->iov[p].len > size ? size : r->iov[p].len;
                if (cap >= size)
                    break;
            }
            if (!ok || cap < size) {
                r->result = MC_INVALID_PARAMS; /* the buffer is smaller than the object */
                rs[k].failed = true;
                continue;
            }
        } else if (op->mode == DEST_ALLOC) {
            r->allocated = op->alloc(op->ctx, idx[k], size);
            if (!r->allocated && size > 0) {
                r->result = MC_INTERNAL_ERROR;
                rs[k].failed = true;
                continue;
            }
            r->one = (mc_store_iov){r->allocated, size};
            r->iov = &r->one;
            r->niov = 1;
        } else {
            r->handle = buffer_new(s->ar, size);
            if (!r->handle) {
                r->result = MC_NO_AVAILABLE_HANDLE;
                rs[k].failed = true;
                continue;
            }
            r->one = (mc_store_iov){r->handle->data, size};
            r->iov = &r->one;
            r->niov = 1;
        }
        if (size == 0)
            rs[k].done = true;
    }

    /* Rounds: each pending item reads its best untried replica; failures move on to
     * the next replica in the following round. */
    xfer x;
    xfer_init(&x, s);
    for (;;) {
        xfer_reset(&x);
        bool any = false;
        for (size_t k = 0; k < m; k++) {
            rstate *q = &rs[k];
            if (q->done || q->failed)
                continue;
            ritem *r = &it[idx[k]];
            for (;;) {
                int c = pick_replica(s, &reps[k], q);
                if (c < 0) {
                    q->failed = true;
                    r->result = q->last_err;
                    break;
                }
                q->tried |= 1u << c;
                const mc_master_replica *rp = &reps[k].replicas[c];
                if (in_own_segment(s, rp->transport_endpoint, rp->address, rp->size)) {
                    read_own(r, rp, q->size);
                    q->done = true;
                    break;
                }
                mc_te_segment_t h;
                if (xfer_seg(&x, rp->transport_endpoint, &h) != MC_OK) {
                    q->last_err = MC_TRANSFER_FAIL;
                    continue;
                }
                uint64_t off = 0;
                for (size_t p = 0; p < r->niov && off < q->size; p++) {
                    uint64_t l = r->iov[p].len < q->size - off ? r->iov[p].len : q->size - off;
                    xfer_add(&x, MC_TE_OP_READ, r->iov[p].base, h, rp->address + off, l, k);
                    off += l;
                }
                q->chosen = c;
                any = true;
                break;
            }
        }
        if (!any)
            break;
        memset(errs, 0, m * sizeof *errs);
        xfer_run(&x, errs, NULL, NULL);
        for (size_t k = 0; k < m; k++) {
            rstate *q = &rs[k];
            if (q->chosen < 0)
                continue;
            q->chosen = -1;
            if (errs[k])
                q->last_err = errs[k];
            else
                q->done = true;
        }
    }
    xfer_deinit(&x);

    /* Lease check: bytes read after the lease ran out may have been overwritten. */
    bool hooked = false;
    for (size_t k = 0; k < m; k++) {
        if (!rs[k].done)
            continue;
        if (!hooked) {
            hook(MC__STORE_HOOK_READ_DONE, keys[k].data, keys[k].len);
            hooked = true;
        }
        if (rs[k].size > 0 && mc_now_ms() > rs[k].deadline)
            it[idx[k]].result = MC_LEASE_EXPIRED;
        else
            it[idx[k]].result = (int64_t)rs[k].size;
    }
    free(keys);
    free(st);
    free(errs);
    free(rs);
    free(reps);
}

/* Runs the read protocol for items whose result is MC_OK (pending). Caller holds life
 * shared. Duplicate keys are read independently (each into its own destination). */
static void do_read(mc_store *s, ritem *it, size_t n, const read_op *op)
{
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx)
        abort();
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].result == MC_OK)
            idx[m++] = i;
    for (size_t c = 0; c < m; c += CHUNK_KEYS)
        read_chunk(s, it, idx + c, m - c < CHUNK_KEYS ? m - c : CHUNK_KEYS, op);
    free(idx);
}

static int64_t read_single(mc_store *s, const void *key, size_t key_len, ritem *r,
                           const read_op *op)
{
    if (!key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    r->key = key;
    r->klen = key_len;
    r->result = MC_OK;
    do_read(s, r, 1, op);
    leave(s);
    return r->result;
}

int64_t mc_store_get_into(mc_store *s, const void *key, size_t key_len, void *buf, uint64_t cap)
{
    if (cap && !buf)
        return MC_INVALID_PARAMS;
    ritem r = {.one = {buf, cap}};
    r.iov = &r.one;
    r.niov = 1;
    if (check_ranges(s, r.iov, 1, "get_into", 0, NULL) != MC_OK)
        return MC_INVALID_PARAMS;
    read_op op = {.mode = DEST_IOV};
    return read_single(s, key, key_len, &r, &op);
}

int64_t mc_store_get_with(mc_store *s, const void *key, size_t key_len, mc_store_alloc_fn alloc,
                          void *ctx, void **out)
{
    if (out)
        *out = NULL;
    if (!alloc || !out)
        return MC_INVALID_PARAMS;
    ritem r = {0};
    read_op op = {.mode = DEST_ALLOC, .alloc = alloc, .ctx = ctx};
    int64_t rc = read_single(s, key, key_len, &r, &op);
    *out = r.allocated;
    return rc;
}

static void *malloc_alloc(void *ctx, size_t index, uint64_t size)
{
    (void)ctx;
    (void)index;
    if (size >= SIZE_MAX)
        return NULL;
    char *p = malloc((size_t)size + 1);
    if (p)
        p[size] = '\0';
    return p;
}

int64_t mc_store_get_alloc(mc_store *s, const void *key, size_t key_len, void **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    void *p = NULL;
    int64_t rc = mc_store_get_with(s, key, key_len, malloc_alloc, NULL, &p);
    if (rc < 0) {
        free(p);
        p = NULL;
    }
    *out = p;
    return rc;
}

static void fill_all64(int64_t *results, size_t n, int64_t code)
{
    if (results)
        for (size_t i = 0; i < n; i++)
            results[i] = code;
}

/* Common batch read: mode DEST_IOV uses iovs/iovcnt (or bufs/caps), others alloc. */
static int read_batch(mc_store *s, const mc_store_key *keys, size_t n, void *const *bufs,
                      const uint64_t *caps, const mc_store_iov *const *iovs,
                      const size_t *iovcnt, const read_op *op, ritem **items_out,
                      int64_t *results)
{
    *items_out = NULL;
    if (!results)
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    bool bad = n > MC_STORE_MAX_BATCH || !keys;
    if (op->mode == DEST_IOV && !iovs && (!bufs || !caps))
        bad = true;
    if (op->mode == DEST_IOV && iovs && !iovcnt)
        bad = true;
    if (bad) {
        fill_all64(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    int rc = enter(s);
    if (rc != MC_OK) {
        fill_all64(results, n, rc);
        return rc;
    }
    ritem *it = calloc(n, sizeof *it);
    if (!it)
        abort();
    bool logged = false;
    for (size_t i = 0; i < n; i++) {
        ritem *r = &it[i];
        r->key = keys[i].data;
        r->klen = keys[i].len;
        r->result = key_ok(r->key, r->klen) ? MC_OK : MC_INVALID_PARAMS;
        if (op->mode == DEST_IOV) {
            if (iovs) {
                r->iov = iovs[i];
                r->niov = iovcnt[i];
                if (r->niov > MC_STORE_MAX_PARTS || (r->niov && !r->iov))
                    r->result = MC_INVALID_PARAMS;
            } else {
                r->one = (mc_store_iov){bufs[i], caps[i]};
                r->iov = &r->one;
                r->niov = 1;
                if (caps[i] && !bufs[i])
                    r->result = MC_INVALID_PARAMS;
            }
            if (r->result == MC_OK &&
                check_ranges(s, r->iov, r->niov, "batch get_into", i, &logged) != MC_OK)
                r->result = MC_INVALID_PARAMS;
        }
    }
    do_read(s, it, n, op);
    for (size_t i = 0; i < n; i++)
        results[i] = it[i].result;
    leave(s);
    *items_out = it;
    return MC_OK;
}

int mc_store_batch_get_into(mc_store *s, const mc_store_key *keys, size_t n, void *const *bufs,
                            const uint64_t *caps, int64_t *results)
{
    read_op op = {.mode = DEST_IOV};
    ritem *it;
    int rc = read_batch(s, keys, n, bufs, caps, NULL, NULL, &op, &it, results);
    free(it);
    return rc;
}

int mc_store_batch_get_into_multi_buffers(mc_store *s, const mc_store_key *keys, size_t n,
                                          const mc_store_iov *const *iovs, const size_t *iovcnt,
                                          bool prefer_same_node, int64_t *results)
{
    (void)prefer_same_node; /* replica choice is always local first */
    read_op op = {.mode = DEST_IOV};
    ritem *it;
    int rc = read_batch(s, keys, n, NULL, NULL, iovs, iovcnt, &op, &it, results);
    free(it);
    return rc;
}

int mc_store_batch_get_with(mc_store *s, const mc_store_key *keys, size_t n,
                            mc_store_alloc_fn alloc, void *ctx, void **outs, int64_t *results)
{
    if (outs)
        for (size_t i = 0; i < n; i++)
            outs[i] = NULL;
    if (!alloc || !outs) {
        fill_all64(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    read_op op = {.mode = DEST_ALLOC, .alloc = alloc, .ctx = ctx};
    ritem *it;
    int rc = read_batch(s, keys, n, NULL, NULL, NULL, NULL, &op, &it, results);
    if (it)
        for (size_t i = 0; i < n; i++)
            outs[i] = it[i].allocated;
    free(it);
    return rc;
}

int mc_store_get_buffer(mc_store *s, const void *key, size_t key_len, mc_store_buffer **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    *out = NULL;
    ritem r = {0};
    read_op op = {.mode = DEST_HANDLE};
    int64_t rc = read_single(s, key, key_len, &r, &op);
    if (rc < 0) {
        mc_store_buffer_free(r.handle);
        return (int)rc;
    }
    *out = r.handle;
    return MC_OK;
}

int mc_store_batch_get_buffer(mc_store *s, const mc_store_key *keys, size_t n,
                              mc_store_buffer **outs, int64_t *results)
{
    if (outs)
        for (size_t i = 0; i < n; i++)
            outs[i] = NULL;
    if (!outs) {
        fill_all64(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    read_op op = {.mode = DEST_HANDLE};
    ritem *it;
    int rc = read_batch(s, keys, n, NULL, NULL, NULL, NULL, &op, &it, results);
    if (it)
        for (size_t i = 0; i < n; i++) {
            if (results[i] >= 0)
                outs[i] = it[i].handle;
            else
                mc_store_buffer_free(it[i].handle);
        }
    free(it);
    return rc;
}

int mc_store_buffer_alloc(mc_store *s, uint64_t size, mc_store_buffer **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    *out = NULL;
    if (size == 0)
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    mc_store_buffer *b = arena_take(s->ar, size);
    leave(s);
    if (!b)
        return MC_NO_AVAILABLE_HANDLE;
    *out = b;
    return MC_OK;
}

int mc_store_local_buffer_info(mc_store *s, void **base, uint64_t *size, uint64_t *used)
{
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    if (base)
        *base = s->ar ? s->ar->base : NULL;
    if (size)
        *size = s->ar ? s->ar->size : 0;
    if (used) {
        *used = 0;
        if (s->ar) {
            pthread_mutex_lock(&s->ar->lock);
            *used = mc__alloc_used(s->ar->alloc);
            pthread_mutex_unlock(&s->ar->lock);
        }
    }
    leave(s);
    return MC_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Queries, removal, registration                                                        */
/* ------------------------------------------------------------------------------------ */

int mc_store_is_exist(mc_store *s, const void *key, size_t key_len)
{
    if (!key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    rc = mc_master_client_exist_key(s->mc, key, key_len);
    leave(s);
    return rc;
}

/* Converts keys; invalid ones get MC_INVALID_PARAMS in res and are left out. Returns
 * the number kept; map[j] = original position of kept key j. */
static size_t conv_keys(const mc_store_key *keys, size_t n, mc_master_key *mk, size_t *map,
                        int *res)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!key_ok(keys[i].data, keys[i].len)) {
            res[i] = MC_INVALID_PARAMS;
            continue;
        }
        mk[m] = (mc_master_key){keys[i].data, keys[i].len};
        map[m++] = i;
    }
    return m;
}

typedef int (*batch_key_fn)(mc_store *s, const mc_master_key *keys, size_t n, bool force,
                            int *results, void *outs, size_t *map);

static int keyed_batch(mc_store *s, const mc_store_key *keys, size_t n, bool force,
                       int *results, void *outs, batch_key_fn fn)
{
    if (!results)
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    if (n > MC_STORE_MAX_BATCH || !keys) {
        fill_all(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    int rc = enter(s);
    if (rc != MC_OK) {
        fill_all(results, n, rc);
        return rc;
    }
    mc_master_key *mk = malloc(n * sizeof *mk);
    size_t *map = malloc(n * sizeof *map);
    int *r = malloc(n * sizeof *r);
    if (!mk || !map || !r)
        abort();
    size_t m = conv_keys(keys, n, mk, map, results);
    for (size_t c = 0; c < m; c += CHUNK_KEYS) {
        size_t k = m - c < CHUNK_KEYS ? m - c : CHUNK_KEYS;
        fn(s, mk + c, k, force, r, outs, map + c);
        for (size_t j = 0; j < k; j++)
            results[map[c + j]] = r[j];
    }
    free(mk);
    free(map);
    free(r);
    leave(s);
    return MC_OK;
}

static int exist_fn(mc_store *s, const mc_master_key *keys, size_t n, bool force, int *results,
                    void *outs, size_t *map)
{
    (void)force;
    (void)outs;
    (void)map;
    return mc_master_client_batch_exist_key(s->mc, keys, n, results);
}

int mc_store_batch_is_exist(mc_store *s, const mc_store_key *keys, size_t n, int *results)
{
    return keyed_batch(s, keys, n, false, results, NULL, exist_fn);
}

static void conv_list(const mc_master_replica_list *in, mc_store_replica_list *out)
{
    memset(out, 0, sizeof *out);
    out->n = in->n > MC_STORE_MAX_REPLICAS ? MC_STORE_MAX_REPLICAS : in->n;
    out->lease_ttl_ms = in->lease_ttl_ms;
    for (uint32_t i = 0; i < out->n; i++) {
        const mc_master_replica *r = &in->replicas[i];
        mc_store_replica_desc *d = &out->replicas[i];
        d->status = r->status;
        d->is_memory = true;
        d->size = r->size;
        d->buffer_address = r->address;
        snprintf(d->transport_endpoint, sizeof d->transport_endpoint, "%.*s",
                 (int)(sizeof r->transport_endpoint - 1), r->transport_endpoint);
        snprintf(d->protocol, sizeof d->protocol, "%.*s", (int)(sizeof r->protocol - 1),
                 r->protocol);
    }
}

int64_t mc_store_get_size(mc_store *s, const void *key, size_t key_len)
{
    if (!key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    mc_master_replica_list *rl = malloc(sizeof *rl);
    if (!rl)
        abort();
    rc = mc_master_client_get_replica_list(s->mc, key, key_len, rl);
    int64_t out = rc;
    if (rc == MC_OK)
        out = rl->n ? (int64_t)rl->replicas[0].size : MC_REPLICA_IS_NOT_READY;
    free(rl);
    leave(s);
    return out;
}

int mc_store_get_replica_desc(mc_store *s, const void *key, size_t key_len,
                              mc_store_replica_list *out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    memset(out, 0, sizeof *out);
    if (!key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    mc_master_replica_list *rl = malloc(sizeof *rl);
    if (!rl)
        abort();
    rc = mc_master_client_get_replica_list(s->mc, key, key_len, rl);
    if (rc == MC_OK)
        conv_list(rl, out);
    free(rl);
    leave(s);
    return rc;
}

static int desc_fn(mc_store *s, const mc_master_key *keys, size_t n, bool force, int *results,
                   void *outs, size_t *map)
{
    (void)force;
    mc_master_replica_list *rl = calloc(n, sizeof *rl);
    if (!rl)
        abort();
    int rc = mc_master_client_batch_get_replica_list(s->mc, keys, n, rl, results);
    mc_store_replica_list *o = outs;
    for (size_t j = 0; j < n; j++)
        if (results[j] == MC_OK)
            conv_list(&rl[j], &o[map[j]]);
    free(rl);
    return rc;
}

int mc_store_batch_get_replica_desc(mc_store *s, const mc_store_key *keys, size_t n,
                                    mc_store_replica_list *outs, int *results)
{
    if (!results)
        return MC_INVALID_PARAMS;
    if (!outs || n > MC_STORE_MAX_BATCH) {
        fill_all(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    memset(outs, 0, n * sizeof *outs);
    return keyed_batch(s, keys, n, false, results, outs, desc_fn);
}

int mc_store_remove(mc_store *s, const void *key, size_t key_len, bool force)
{
    if (!key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    rc = mc_master_client_remove(s->mc, key, key_len, force);
    leave(s);
    return rc;
}

static int remove_fn(mc_store *s, const mc_master_key *keys, size_t n, bool force, int *results,
                     void *outs, size_t *map)
{
    (void)outs;
    (void)map;
    return mc_master_client_batch_remove(s->mc, keys, n, force, results);
}

int mc_store_batch_remove(mc_store *s, const mc_store_key *keys, size_t n, bool force,
                          int *results)
{
    return keyed_batch(s, keys, n, force, results, NULL, remove_fn);
}

int64_t mc_store_remove_by_regex(mc_store *s, const char *pattern, size_t pattern_len,
                                 bool force)
{
    if ((!pattern && pattern_len) || pattern_len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    uint64_t count = 0;
    rc = mc_master_client_remove_by_regex(s->mc, pattern ? pattern : "", pattern_len, force,
                                          &count);
    leave(s);
    return rc == MC_OK ? (int64_t)count : rc;
}

int64_t mc_store_remove_all(mc_store *s, bool force)
{
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    uint64_t count = 0;
    rc = mc_master_client_remove_all(s->mc, force, &count);
    leave(s);
    return rc == MC_OK ? (int64_t)count : rc;
}

int mc_store_register_buffer(mc_store *s, void *addr, size_t len)
{
    if (!addr || !len)
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    rc = mc_te_register_memory(s->te, addr, len, NULL);
    if (rc == MC_OK)
        ubuf_add(s, (uint64_t)(uintptr_t)addr, len);
    leave(s);
    return rc;
}

int mc_store_unregister_buffer(mc_store *s, void *addr)
{
    if (!addr)
        return MC_INVALID_PARAMS;
    int rc = enter(s);
    if (rc != MC_OK)
        return rc;
    rc = mc_te_unregister_memory(s->te, addr);
    if (rc == MC_OK)
        ubuf_remove(s, (uint64_t)(uintptr_t)addr);
    leave(s);
    return rc;
}
