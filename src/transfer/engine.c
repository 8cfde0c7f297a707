/* engine.c: engine life cycle, options, own descriptor and publishing, memory
 * registration, peer segments (descriptor cache), submit and the sync helpers.
 * See include/mooncake/transfer_engine.h. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/options.h"
#include "mooncake/status.h"
#include "net/sock.h"
#include "transfer/internal.h"

/* ---- options ---- */

static int env_u64(const char *name, const char *text, uint64_t min, uint64_t max,
                   bool size, uint64_t *out)
{
    uint64_t v;
    if (size) {
        if (mc_parse_size(text, &v) < 0)
            goto bad;
    } else {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(text, &end, 10);
        if (errno || end == text || *end || text[0] == '-')
            goto bad;
        v = x;
    }
    if (v < min || v > max)
        goto bad;
    *out = v;
    return 0;
bad:
    mc_log(MC_LOG_ERROR, TE_TAG, "%s=%s is invalid (expected %llu..%llu)", name, text,
           (unsigned long long)min, (unsigned long long)max);
    return -1;
}

static int opt_env(const char *name, uint64_t def, uint64_t min, uint64_t max, bool size,
                   uint64_t *out)
{
    const char *t = getenv(name);
    *out = def;
    return t && *t ? env_u64(name, t, min, max, size, out) : 0;
}

int mc_te_create(const mc_te_opts *opts, mc_te **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    mc_te_opts o = {0};
    if (opts)
        o = *opts;
    uint64_t timeout_s, slice, conns, nio, hs_max;
    if (opt_env("MC_TRANSFER_TIMEOUT", MC_TE_DEFAULT_TIMEOUT_S, 1, 86400 * 365, false,
                &timeout_s) < 0 ||
        opt_env("MC_TCP_SLICE_SIZE", MC_TE_DEFAULT_SLICE, 4096, MC_TE_MAX_SLICE, true,
                &slice) < 0 ||
        opt_env("MC_TE_TCP_CONNECTIONS", 2, 1, TE_MAX_CONNS, false, &conns) < 0 ||
        opt_env("MC_TE_IO_THREADS", 1, 1, TE_MAX_IO, false, &nio) < 0 ||
        opt_env("MC_HANDSHAKE_MAX_LENGTH", MC_TE_HS_DEFAULT_MAX, 64, MC_TE_HS_LIMIT, true,
                &hs_max) < 0)
        return MC_INVALID_PARAMS;
    if ((o.slice_size && (o.slice_size < 4096 || o.slice_size > MC_TE_MAX_SLICE)) ||
        o.conns_per_peer > TE_MAX_CONNS || o.io_threads > TE_MAX_IO ||
        (o.handshake_max_length && (o.handshake_max_length < 64 ||
                                    o.handshake_max_length > MC_TE_HS_LIMIT))) {
        mc_log(MC_LOG_ERROR, TE_TAG, "mc_te_create: option out of range");
        return MC_INVALID_PARAMS;
    }
    bool force_tcp = false;
    const char *ft = getenv("MC_FORCE_TCP");
    if (ft && *ft && mc_parse_bool(ft, &force_tcp) < 0)
        force_tcp = true; /* upstream treats any set value as on */
    mc_te *te = calloc(1, sizeof *te);
    if (!te)
        abort();
    te->timeout_ms = o.transfer_timeout_ms ? o.transfer_timeout_ms : timeout_s * 1000;
    te->slice_size = o.slice_size ? o.slice_size : slice;
    te->conns_per_peer = o.conns_per_peer ? o.conns_per_peer : (unsigned)conns;
    te->nio = o.io_threads ? o.io_threads : (unsigned)nio;
    te->hs_max = o.handshake_max_length ? o.handshake_max_length : (uint32_t)hs_max;
    te->force_tcp = o.force_tcp == 1 || (o.force_tcp <= 0 && force_tcp);
    te->rpc_port = te->data_port = -1;
    te->hs_lfd = te->data_lfd = te->shm_lfd = -1;
    pthread_mutex_init(&te->publish_lock, NULL);
    pthread_mutex_init(&te->desc_lock, NULL);
    pthread_rwlock_init(&te->reg_lock, NULL);
    pthread_mutex_init(&te->managed_lock, NULL);
    pthread_mutex_init(&te->seg_lock, NULL);
    pthread_mutex_init(&te->batch_lock, NULL);
    pthread_mutex_init(&te->notify_lock, NULL);
    mc_segment_desc_init(&te->desc);
    atomic_init(&te->next_req_id, 1);
    mc__te_fence_init(te);
    *out = te;
    return MC_OK;
}

/* ---- own descriptor ---- */

static char *segment_key(mc_te *te)
{
    const char *prefix = mc_metadata_prefix(te->md);
    const char *mid = strchr(te->name, '/') ? "" : "ram/";
    size_t n = strlen(prefix) + strlen(mid) + strlen(te->name) + 1;
    char *k = malloc(n);
    if (!k)
        abort();
    snprintf(k, n, "%s%s%s", prefix, mid, te->name);
    return k;
}

MC_API int mc_te_republish(mc_te *te)
{
    return mc__te_publish(te);
}

int mc__te_publish(mc_te *te)
{
    pthread_mutex_lock(&te->publish_lock);
    pthread_mutex_lock(&te->desc_lock);
    char *json = NULL;
    size_t len = 0;
    int rc = mc_segment_desc_encode(&te->desc, &json, &len);
    if (rc == MC_OK) {
        free(te->desc_json);
        te->desc_json = json;
        te->desc_json_len = len;
    }
    char *copy = NULL;
    if (rc == MC_OK && !te->p2p) {
        copy = malloc(len + 1);
        if (!copy)
            abort();
        memcpy(copy, json, len + 1);
    }
    pthread_mutex_unlock(&te->desc_lock);
    if (copy) {
        char *key = segment_key(te);
        rc = mc_metadata_put(te->md, key, copy, len);
        if (rc != MC_OK)
            mc_log(MC_LOG_ERROR, TE_TAG, "publishing %s failed: %s", key, mc_strerror(rc));
        free(key);
        free(copy);
    }
    pthread_mutex_unlock(&te->publish_lock);
    return rc;
}

/* ---- I/O loops ---- */

static void io_tick(void *arg)
{
    te_io *io = arg;
    mc__te_cconn_tick(io);
    if (io->idx == 0)
        mc__te_hs_tick(io);
}

static te_peer *peer_at(mc_te *te, size_t i)
{
    pthread_mutex_lock(&te->seg_lock);
    te_peer *p = i < te->n_peers ? te->peers[i] : NULL;
    pthread_mutex_unlock(&te->seg_lock);
    return p;
}

/* Stops the loops and closes everything they owned; fails what was in flight. */
static void te_shutdown(mc_te *te, bool unpublish)
{
    if (unpublish && te->md && !te->p2p && te->name[0]) {
        mc_metadata_remove_segment(te->md, te->name);
        mc_metadata_remove_rpc_meta(te->md, te->name);
    }
    for (unsigned i = 0; i < te->nio; i++)
        if (te->io[i].loop)
            mc_loop_join(te->io[i].loop);
    te_peer *p;
    for (size_t i = 0; (p = peer_at(te, i)); i++)
        mc__te_peer_close_conns(p);
    for (unsigned i = 0; i < te->nio; i++) {
        te_io *io = &te->io[i];
        if (!io->loop)
            continue;
        mc__te_sconn_close_all(io);
        mc__te_hs_close_all(io);
        mc__te_shm_close_all(io);
    }
    for (size_t i = 0; (p = peer_at(te, i)); i++) {
        pthread_mutex_lock(&p->lock);
        mc__te_peer_shm_reset(p);
        pthread_mutex_unlock(&p->lock);
        if (p->shm_watched) {
            mc_loop_del(p->io->loop, p->shm_watch_fd);
            close(p->shm_watch_fd);
            p->shm_watched = false;
        }
    }
    int *lfds[] = {&te->hs_lfd, &te->data_lfd, &te->shm_lfd};
    for (int i = 0; i < 3; i++) {
        if (*lfds[i] >= 0) {
            if (te->io[0].loop)
                mc_loop_del(te->io[0].loop, *lfds[i]);
            close(*lfds[i]);
            *lfds[i] = -1;
        }
    }
    for (unsigned i = 0; i < te->nio; i++) {
        mc_loop_destroy(te->io[i].loop);
        te->io[i].loop = NULL;
        free(te->io[i].scratch);
        te->io[i].scratch = NULL;
    }
}

/* ---- initialize ---- */

static uint64_t rand64(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v)
            v = 0;
        close(fd);
    }
    return v ^ mc_now_ns() ^ ((uint64_t)getpid() << 32);
}

static int listen_rpc(const char *bind, uint16_t want, uint16_t *port)
{
    if (want)
        return mc_sock_listen_tcp(bind, want, 512, false, port);
    uint64_t lo = 15000, hi = 17000, v;
    const char *t;
    if ((t = getenv("MC_MIN_RPC_PORT")) && env_u64("MC_MIN_RPC_PORT", t, 1, 65535, false, &v) == 0)
        lo = v;
    if ((t = getenv("MC_MAX_RPC_PORT")) && env_u64("MC_MAX_RPC_PORT", t, 1, 65535, false, &v) == 0)
        hi = v;
    if (hi < lo)
        hi = lo;
    uint64_t span = hi - lo + 1, start = rand64() % span;
    for (uint64_t i = 0; i < span && i < 256; i++) {
        uint16_t p = (uint16_t)(lo + (start + i * 7919) % span);
        int fd = mc_sock_listen_tcp(bind, p, 512, false, port);
        if (fd >= 0)
            return fd;
        if (fd != -EADDRINUSE && fd != -EACCES)
            return fd;
    }
    return mc_sock_listen_tcp(bind, 0, 512, false, port);
}

static void format_timestamp(char *buf, size_t len)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, len, "%s.%06ld", base, (long)tv.tv_usec);
}

static int check_protocol(mc_te *te, const char *protocol)
{
    if (!protocol || !*protocol || strcmp(protocol, "tcp") == 0)
        return MC_OK;
    if (strcmp(protocol, "rdma") == 0 && te->force_tcp) {
        mc_log(MC_LOG_INFO, TE_TAG, "protocol rdma with MC_FORCE_TCP: using tcp");
        return MC_OK;
    }
    mc_log(MC_LOG_ERROR, TE_TAG,
           "protocol \"%s\" is not supported by this build (CPU only: use \"tcp\"%s)",
           protocol, strcmp(protocol, "rdma") == 0 ? ", or set MC_FORCE_TCP=1" : "");
    return MC_NOT_SUPPORTED;
}

int mc_te_initialize(mc_te *te, const char *local_hostname, const char *metadata_conn,
                     const char *protocol, const char *device)
{
    (void)device;
    if (!te || te->initialized || !local_hostname || !*local_hostname || !metadata_conn ||
        strlen(local_hostname) >= MC_METADATA_MAX_HOST)
        return MC_INVALID_PARAMS;
    int rc = check_protocol(te, protocol);
    if (rc != MC_OK)
        return rc;
    uint16_t want_port = 0;
    if (mc_sock_parse_hostport(local_hostname, te->host, sizeof te->host, &want_port, 0) < 0) {
        if (strchr(local_hostname, ':') && local_hostname[0] != '[' &&
            strchr(local_hostname, ':') == strrchr(local_hostname, ':')) {
            mc_log(MC_LOG_ERROR, TE_TAG, "local_hostname \"%s\": bad port", local_hostname);
            return MC_INVALID_PARAMS;
        }
        snprintf(te->host, sizeof te->host, "%s", local_hostname);
        want_port = 0;
    }
    rc = mc_metadata_create(metadata_conn, &te->md);
    if (rc != MC_OK)
        return rc;
    te->p2p = mc_metadata_is_p2p(te->md);
    const char *bind = getenv("MC_TCP_BIND_ADDRESS");
    if (!bind || !*bind)
        bind = te->host;
    uint16_t rpc_port = 0, data_port = 0;
    te->hs_lfd = listen_rpc(bind, te->p2p ? want_port : 0, &rpc_port);
    if (te->hs_lfd == -ENOENT || te->hs_lfd == -EADDRNOTAVAIL) {
        bind = "0.0.0.0"; /* a name that is not a local address: listen everywhere */
        te->hs_lfd = listen_rpc(bind, te->p2p ? want_port : 0, &rpc_port);
    }
    if (te->hs_lfd < 0) {
        mc_log(MC_LOG_ERROR, TE_TAG, "cannot listen on %s:%u for the handshake port: %s",
               bind, want_port, strerror(-te->hs_lfd));
        rc = MC_INTERNAL_ERROR;
        goto fail;
    }
    te->data_lfd = mc_sock_listen_tcp(bind, 0, 512, false, &data_port);
    if (te->data_lfd < 0) {
        mc_log(MC_LOG_ERROR, TE_TAG, "cannot listen on %s for the data port: %s", bind,
               strerror(-te->data_lfd));
        rc = MC_INTERNAL_ERROR;
        goto fail;
    }
    te->rpc_port = rpc_port;
    te->data_port = data_port;
    mc_metadata_host_id(te->host_id, sizeof te->host_id);
    if (!te->force_tcp) {
        snprintf(te->shm_path, sizeof te->shm_path, "@mooncake-te-%d-%016llx", (int)getpid(),
                 (unsigned long long)rand64());
        te->shm_lfd = mc_sock_listen_unix(te->shm_path, 128);
        if (te->shm_lfd < 0) {
            mc_log(MC_LOG_WARN, TE_TAG, "no same-host path (unix socket: %s)",
                   strerror(-te->shm_lfd));
            te->shm_path[0] = '\0';
        }
    }
    if (te->p2p) {
        if (strchr(te->host, ':'))
            snprintf(te->name, sizeof te->name, "[%s]:%u", te->host, rpc_port);
        else
            snprintf(te->name, sizeof te->name, "%s:%u", te->host, rpc_port);
    } else {
        snprintf(te->name, sizeof te->name, "%s", local_hostname);
    }
    char ts[64];
    format_timestamp(ts, sizeof ts);
    mc_segment_desc_set(&te->desc.name, te->name);
    mc_segment_desc_set(&te->desc.protocol, "tcp");
    te->desc.tcp_data_port = data_port;
    mc_segment_desc_set(&te->desc.timestamp, ts);
    mc_segment_desc_set(&te->desc.host_id, te->host_id);
    mc_segment_desc_set(&te->desc.shm_socket, te->shm_path[0] ? te->shm_path : NULL);

    for (unsigned i = 0; i < te->nio; i++) {
        te_io *io = &te->io[i];
        io->te = te;
        io->idx = i;
        io->scratch = malloc(65536);
        if (!io->scratch)
            abort();
        int e = mc_loop_create(&io->loop);
        if (e < 0) {
            rc = MC_INTERNAL_ERROR;
            goto fail;
        }
        io->tick = mc_loop_timer_add(io->loop, TE_TICK_MS, TE_TICK_MS, io_tick, io);
    }
    if (mc__te_hs_start(te) < 0 || mc__te_data_accept_start(te) < 0 ||
        (te->shm_lfd >= 0 && mc__te_shm_start(te) < 0)) {
        rc = MC_INTERNAL_ERROR;
        goto fail;
    }
    for (unsigned i = 0; i < te->nio; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "mc-te-io%u", i % 100);
        if (mc_loop_start_thread(te->io[i].loop, nm) < 0) {
            rc = MC_INTERNAL_ERROR;
            goto fail;
        }
    }
    te->initialized = true;
    if (!te->p2p) {
        mc_rpc_meta meta = {.rpc_port = rpc_port};
        snprintf(meta.ip_or_host_name, sizeof meta.ip_or_host_name, "%s", te->host);
        rc = mc_metadata_put_rpc_meta(te->md, te->name, &meta);
        if (rc != MC_OK) {
            mc_log(MC_LOG_ERROR, TE_TAG, "publishing rpc_meta for %s failed: %s", te->name,
                   mc_strerror(rc));
            te->initialized = false;
            goto fail;
        }
    }
    rc = mc__te_publish(te);
    if (rc != MC_OK) {
        te->initialized = false;
        if (!te->p2p)
            mc_metadata_remove_rpc_meta(te->md, te->name);
        goto fail;
    }
    mc_log(MC_LOG_INFO, TE_TAG, "engine %s: rpc port %u, data port %u, metadata %s%s",
           te->name, rpc_port, data_port, mc_metadata_kind_name(mc_metadata_kind_of(te->md)),
           te->shm_path[0] ? ", same-host shm on" : "");
    return MC_OK;
fail:
    te_shutdown(te, false);
    mc_metadata_destroy(te->md);
    te->md = NULL;
    te->rpc_port = te->data_port = -1;
    te->name[0] = '\0';
    mc_segment_desc_deinit(&te->desc);
    return rc;
}

int mc_te_get_rpc_port(const mc_te *te)
{
    return te && te->initialized ? te->rpc_port : -1;
}

int mc_te_get_data_port(const mc_te *te)
{
    return te && te->initialized ? te->data_port : -1;
}

const char *mc_te_segment_name(const mc_te *te)
{
    return te && te->initialized ? te->name : "";
}

/* ---- memory ---- */

static bool range_ok(const void *addr, size_t len)
{
    uint64_t a = (uint64_t)(uintptr_t)addr;
    return addr && len && a <= (uint64_t)MC_SEGMENT_MAX_ADDR &&
           (uint64_t)len <= (uint64_t)MC_SEGMENT_MAX_ADDR - a;
}

int mc_te_batch_register_memory(mc_te *te, void *const *addrs, const size_t *lengths,
                                size_t n, const char *location)
{
    (void)location;
    if (!te || !te->initialized || (n && (!addrs || !lengths)))
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    if (n > MC_SEGMENT_MAX_BUFFERS)
        return MC_BUFFER_OVERFLOW;
    for (size_t i = 0; i < n; i++)
        if (!range_ok(addrs[i], lengths[i]))
            return MC_INVALID_PARAMS;
    bool *added = calloc(n, sizeof *added);
    if (!added)
        abort();
    int rc = MC_OK;
    size_t i;
    for (i = 0; i < n; i++) {
        int e = mc__te_region_add(te, (uint64_t)(uintptr_t)addrs[i], lengths[i], TE_REG_USER,
                                  -1);
        if (e == -EEXIST)
            continue;
        if (e < 0) {
            rc = e == -ENOSPC ? MC_BUFFER_OVERFLOW : MC_INVALID_PARAMS;
            break;
        }
        added[i] = true;
    }
    if (rc != MC_OK) {
        for (size_t j = 0; j < i; j++) {
            te_region *r;
            if (added[j] && mc__te_region_remove(te, (uint64_t)(uintptr_t)addrs[j],
                                                 1 << TE_REG_USER, &r) == 0)
                mc__te_region_drain(te, r);
        }
        free(added);
        return rc;
    }
    pthread_mutex_lock(&te->desc_lock);
    for (i = 0; i < n; i++)
        if (added[i])
            mc_segment_desc_add_buffer(&te->desc, te->name, (uint64_t)(uintptr_t)addrs[i],
                                       lengths[i], false);
    pthread_mutex_unlock(&te->desc_lock);
    free(added);
    return mc__te_publish(te);
}

int mc_te_register_memory(mc_te *te, void *addr, size_t length, const char *location)
{
    return mc_te_batch_register_memory(te, &addr, &length, 1, location);
}

static bool has_region(mc_te *te, uint64_t base, int kind)
{
    bool found = false;
    pthread_rwlock_rdlock(&te->reg_lock);
    for (size_t i = 0; i < te->n_regs && !found; i++)
        found = te->regs[i]->base == base && te->regs[i]->kind == kind;
    pthread_rwlock_unlock(&te->reg_lock);
    return found;
}

int mc_te_batch_unregister_memory(mc_te *te, void *const *addrs, size_t n)
{
    if (!te || !te->initialized || (n && !addrs))
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    for (size_t i = 0; i < n; i++)
        if (!has_region(te, (uint64_t)(uintptr_t)addrs[i], TE_REG_USER))
            return MC_INVALID_PARAMS;
    te_region **rs = calloc(n, sizeof *rs);
    if (!rs)
        abort();
    for (size_t i = 0; i < n; i++) {
        uint64_t a = (uint64_t)(uintptr_t)addrs[i];
        if (mc__te_region_remove(te, a, 1 << TE_REG_USER, &rs[i]) == 0) {
            pthread_mutex_lock(&te->desc_lock);
            mc_segment_desc_remove_buffer(&te->desc, a);
            pthread_mutex_unlock(&te->desc_lock);
        }
    }
    int rc = mc__te_publish(te);
    for (size_t i = 0; i < n; i++)
        if (rs[i])
            mc__te_region_drain(te, rs[i]);
    free(rs);
    return rc;
}

int mc_te_unregister_memory(mc_te *te, void *addr)
{
    return mc_te_batch_unregister_memory(te, &addr, 1);
}

int mc__te_shared_create(mc_te *te, uint64_t len, int kind, void **out)
{
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t size = (len + (uint64_t)pg - 1) & ~((uint64_t)pg - 1);
    int fd = memfd_create("mooncake-te", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return MC_NO_AVAILABLE_HANDLE;
    if (ftruncate(fd, (off_t)size) < 0) {
        close(fd);
        return MC_NO_AVAILABLE_HANDLE;
    }
    /* peers get this fd: they must never be able to shrink it under us (SIGBUS) */
    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return MC_NO_AVAILABLE_HANDLE;
    }
    int e = mc__te_region_add(te, (uint64_t)(uintptr_t)p, size, kind, fd);
    if (e < 0) {
        munmap(p, size);
        close(fd);
        return e == -ENOSPC ? MC_BUFFER_OVERFLOW : MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&te->desc_lock);
    mc_segment_desc_add_buffer(&te->desc, te->name, (uint64_t)(uintptr_t)p, size,
                               te->shm_lfd >= 0);
    pthread_mutex_unlock(&te->desc_lock);
    *out = p;
    int rc = mc__te_publish(te);
    if (rc != MC_OK)
        mc_log(MC_LOG_WARN, TE_TAG, "shared memory registered locally only: %s",
               mc_strerror(rc));
    return MC_OK;
}

int mc__te_shared_destroy(mc_te *te, void *addr, int kind)
{
    te_region *r;
    if (mc__te_region_remove(te, (uint64_t)(uintptr_t)addr, 1 << kind, &r) < 0)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&te->desc_lock);
    mc_segment_desc_remove_buffer(&te->desc, (uint64_t)(uintptr_t)addr);
    pthread_mutex_unlock(&te->desc_lock);
    mc__te_publish(te);
    mc__te_region_drain(te, r);
    return MC_OK;
}

int mc_te_alloc_shared(mc_te *te, size_t length, void **out)
{
    if (!te || !out || !te->initialized || length == 0 ||
        length > (uint64_t)MC_SEGMENT_MAX_ADDR / 2)
        return MC_INVALID_PARAMS;
    return mc__te_shared_create(te, length, TE_REG_SHARED, out);
}

int mc_te_free_shared(mc_te *te, void *addr)
{
    if (!te || !addr || !te->initialized)
        return MC_INVALID_PARAMS;
    /* managed buffers' dedicated regions are freed through free_managed_buffer */
    pthread_mutex_lock(&te->managed_lock);
    int rc = mc__te_shared_destroy(te, addr, TE_REG_SHARED);
    pthread_mutex_unlock(&te->managed_lock);
    return rc;
}

/* ---- peers ---- */

te_peer *mc__te_peer_by_handle(mc_te *te, int64_t h)
{
    te_peer *p = NULL;
    pthread_mutex_lock(&te->seg_lock);
    if (h >= 0 && (size_t)h < te->n_peers)
        p = te->peers[h];
    pthread_mutex_unlock(&te->seg_lock);
    return p;
}

static te_peer *peer_get(mc_te *te, const char *name)
{
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < te->n_peers; i++)
        if (strcmp(te->peers[i]->name, name) == 0) {
            te_peer *p = te->peers[i];
            pthread_mutex_unlock(&te->seg_lock);
            return p;
        }
    if (te->n_peers == te->cap_peers) {
        te->cap_peers = te->cap_peers ? te->cap_peers * 2 : 16;
        te->peers = realloc(te->peers, te->cap_peers * sizeof *te->peers);
        if (!te->peers)
            abort();
    }
    te_peer *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    p->te = te;
    p->name = strdup(name);
    if (!p->name)
        abort();
    p->handle = (int64_t)te->n_peers;
    p->io = &te->io[te->n_peers % te->nio];
    p->shm_fd = -1;
    pthread_mutex_init(&p->refresh_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    /* writers first: a fence (fence.c) must not starve behind a stream of copies */
    pthread_rwlockattr_t rwa;
    pthread_rwlockattr_init(&rwa);
    pthread_rwlockattr_setkind_np(&rwa, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&p->shm_rw, &rwa);
    pthread_rwlockattr_destroy(&rwa);
    atomic_init(&p->fence_min, mc__te_target_min(te, name)); /* fences set before opening */
    mc_segment_desc_init(&p->desc);
    te->peers[te->n_peers++] = p;
    pthread_mutex_unlock(&te->seg_lock);
    return p;
}

/* Fetches the descriptor of `name` and where its handshake port is. */
static int fetch_desc(mc_te *te, const char *name, mc_segment_desc *out, char *host,
                      size_t hostlen)
{
    if (te->p2p) {
        uint16_t port;
        if (mc_sock_parse_hostport(name, host, hostlen, &port, 0) < 0)
            return MC_INVALID_PARAMS;
        json_t *jr = json_pack("{s:s}", "segment_name", name);
        char *req = jr ? json_dumps(jr, JSON_COMPACT) : NULL;
        json_decref(jr);
        if (!req)
            return MC_INVALID_PARAMS; /* not valid UTF-8 */
        char *reply = NULL;
        size_t rlen = 0;
        int rc = mc__te_hs_request(host, port, MC_TE_HS_METADATA, req, strlen(req),
                                   MC_SEGMENT_MAX_JSON + 64, TE_HS_CONNECT_TIMEOUT_MS, &reply,
                                   &rlen);
        free(req);
        if (rc < 0) {
            mc_log(MC_LOG_WARN, TE_TAG, "segment %s: handshake failed: %s", name,
                   strerror(-rc));
            return rc == -ETIMEDOUT ? MC_RPC_TIMEOUT : MC_SEGMENT_NOT_FOUND;
        }
        char err[160];
        rc = mc_segment_desc_decode(reply, rlen, out, err, sizeof err);
        free(reply);
        if (rc != MC_OK)
            mc_log(MC_LOG_WARN, TE_TAG, "segment %s: bad descriptor: %s", name, err);
        return rc;
    }
    int rc = mc_metadata_get_segment(te->md, name, out);
    if (rc == MC_OBJECT_NOT_FOUND)
        return MC_SEGMENT_NOT_FOUND;
    if (rc != MC_OK)
        return rc;
    mc_rpc_meta meta;
    if (mc_metadata_get_rpc_meta(te->md, name, &meta) == MC_OK) {
        snprintf(host, hostlen, "%s", meta.ip_or_host_name);
    } else {
        uint16_t port;
        if (mc_sock_parse_hostport(name, host, hostlen, &port, 1) < 0)
            snprintf(host, hostlen, "%s", name);
    }
    return MC_OK;
}

int mc__te_peer_refresh(mc_te *te, te_peer *p)
{
    pthread_mutex_lock(&p->refresh_lock);
    mc_segment_desc d;
    mc_segment_desc_init(&d);
    char host[MC_METADATA_MAX_HOST];
    int rc = fetch_desc(te, p->name, &d, host, sizeof host);
    p->last_refresh_ms = mc_now_ms();
    if (rc != MC_OK) {
        pthread_mutex_unlock(&p->refresh_lock);
        return rc;
    }
    struct sockaddr_storage sa;
    socklen_t salen = 0;
    if (d.tcp_data_port) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        char ports[16];
        snprintf(ports, sizeof ports, "%u", (unsigned)d.tcp_data_port);
        if (getaddrinfo(host, ports, &hints, &res) == 0 && res) {
            memcpy(&sa, res->ai_addr, res->ai_addrlen);
            salen = res->ai_addrlen;
        } else {
            mc_log(MC_LOG_WARN, TE_TAG, "segment %s: cannot resolve %s", p->name, host);
        }
        if (res)
            freeaddrinfo(res);
    }
    bool same_host = d.host_id && d.host_id[0] && strcmp(d.host_id, te->host_id) == 0 &&
                     d.shm_socket && d.shm_socket[0];
    pthread_mutex_lock(&p->lock);
    bool changed = !p->have_desc || p->desc.tcp_data_port != d.tcp_data_port ||
                   strcmp(p->desc.timestamp ? p->desc.timestamp : "",
                          d.timestamp ? d.timestamp : "") != 0 ||
                   strcmp(p->desc.shm_socket ? p->desc.shm_socket : "",
                          d.shm_socket ? d.shm_socket : "") != 0;
    if (changed)
        mc__te_peer_shm_reset(p);
    te_range *bufs = NULL;
    size_t nb = d.n_buffers;
    if (nb && !(bufs = calloc(nb, sizeof *bufs)))
        abort();
    for (size_t i = 0; i < nb; i++)
        bufs[i] = (te_range){.addr = d.buffers[i].addr, .len = d.buffers[i].length,
                             .shm = d.buffers[i].shm};
    pthread_rwlock_wrlock(&p->shm_rw);
    free(p->shm_bufs);
    p->shm_bufs = bufs;
    p->n_shm_bufs = nb;
    p->shm_ok = same_host && !te->force_tcp;
    pthread_rwlock_unlock(&p->shm_rw);
    mc_segment_desc_deinit(&p->desc);
    p->desc = d;
    snprintf(p->host, sizeof p->host, "%s", host);
    if (salen)
        memcpy(&p->data_sa, &sa, salen);
    p->data_salen = salen;
    p->same_host = same_host;
    p->have_desc = true;
    p->stale = false;
    p->gen++;
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->refresh_lock);
    return MC_OK;
}

static bool valid_name(const char *name)
{
    return name && *name && strlen(name) <= MC_SEGMENT_MAX_NAME;
}

static int open_peer(mc_te *te, const char *name, bool force_refresh, te_peer **out)
{
    if (!te || !te->initialized || !valid_name(name))
        return MC_INVALID_PARAMS;
    te_peer *p = peer_get(te, name);
    pthread_mutex_lock(&p->lock);
    bool need = force_refresh || !p->have_desc || p->stale;
    pthread_mutex_unlock(&p->lock);
    if (need) {
        int rc = mc__te_peer_refresh(te, p);
        if (rc != MC_OK)
            return rc;
    }
    *out = p;
    return MC_OK;
}

int mc_te_open_segment(mc_te *te, const char *name, mc_te_segment_t *out)
{
    te_peer *p;
    if (!out)
        return MC_INVALID_PARAMS;
    int rc = open_peer(te, name, false, &p);
    if (rc == MC_OK)
        *out = p->handle;
    return rc;
}

int mc_te_close_segment(mc_te *te, mc_te_segment_t seg)
{
    if (!te || !mc__te_peer_by_handle(te, seg))
        return MC_INVALID_PARAMS;
    return MC_OK;
}

int mc_te_get_segment_desc(mc_te *te, const char *name, mc_segment_desc *out)
{
    te_peer *p;
    if (!out)
        return MC_INVALID_PARAMS;
    int rc = open_peer(te, name, true, &p);
    if (rc != MC_OK)
        return rc;
    mc_segment_desc_init(out);
    pthread_mutex_lock(&p->lock);
    mc_segment_desc *d = &p->desc;
    mc_segment_desc_set(&out->name, d->name);
    mc_segment_desc_set(&out->protocol, d->protocol);
    out->tcp_data_port = d->tcp_data_port;
    out->tcp_proto_version = d->tcp_proto_version;
    mc_segment_desc_set(&out->timestamp, d->timestamp);
    mc_segment_desc_set(&out->host_id, d->host_id);
    mc_segment_desc_set(&out->shm_socket, d->shm_socket);
    for (size_t i = 0; i < d->n_buffers; i++)
        mc_segment_desc_add_buffer(out, d->buffers[i].name, d->buffers[i].addr,
                                   d->buffers[i].length, d->buffers[i].shm);
    pthread_mutex_unlock(&p->lock);
    return MC_OK;
}

int mc_te_get_first_buffer_address(mc_te *te, const char *name, uint64_t *addr)
{
    te_peer *p;
    if (!addr)
        return MC_INVALID_PARAMS;
    int rc = open_peer(te, name, true, &p);
    if (rc != MC_OK)
        return rc;
    pthread_mutex_lock(&p->lock);
    *addr = p->desc.n_buffers ? p->desc.buffers[0].addr : 0;
    pthread_mutex_unlock(&p->lock);
    return MC_OK;
}

/* ---- submit ---- */

static int submit(mc_te *te, mc_te_batch_t id, const mc_te_request *reqs, size_t n,
                  te_peer *notify_peer, const char *nname, const void *nmsg, size_t nlen)
{
    if (!te || !te->initialized || (n && !reqs))
        return MC_INVALID_PARAMS;
    te_batch *b = mc__te_batch_get(te, id);
    if (!b)
        return MC_INVALID_PARAMS;
    te_peer **peers = n ? calloc(n, sizeof *peers) : NULL;
    if (n && !peers)
        abort();
    uint64_t nslices = 0;
    for (size_t i = 0; i < n; i++) {
        const mc_te_request *r = &reqs[i];
        peers[i] = mc__te_peer_by_handle(te, r->target_id);
        if (!peers[i] || (r->opcode != MC_TE_OP_READ && r->opcode != MC_TE_OP_WRITE) ||
            (r->length && !r->source) || (notify_peer && peers[i] != notify_peer) ||
            (r->length && (uint64_t)(uintptr_t)r->source > UINT64_MAX - r->length)) {
            free(peers);
            return MC_INVALID_PARAMS;
        }
    }
    pthread_mutex_lock(&b->lock);
    if (b->n + n > b->cap || atomic_load(&b->notify_state) != TE_NOTIFY_NONE) {
        pthread_mutex_unlock(&b->lock);
        free(peers);
        return MC_INVALID_PARAMS;
    }
    size_t first = b->n;
    for (size_t i = 0; i < n; i++) {
        te_task *t = &b->tasks[first + i];
        atomic_store(&t->state, MC_TE_PENDING);
        atomic_store(&t->error, 0);
        atomic_store(&t->done_bytes, 0);
        t->length = reqs[i].length;
        t->batch = b;
    }
    b->n += n;
    b->terminal = false;
    atomic_fetch_add(&b->tasks_left, n + 1); /* + 1: this submit, released at the end */
    if (notify_peer) {
        size_t nl = strlen(nname);
        size_t body = mc__te_notify_body_size(nl, nlen);
        te_slice *s = calloc(1, sizeof *s);
        char *buf = malloc(body);
        if (!s || !buf)
            abort();
        mc__te_notify_encode((uint8_t *)buf, nname, nl, nmsg, nlen);
        s->batch = b;
        s->peer = notify_peer;
        s->op = MC_TE_WOP_NOTIFY;
        s->local = buf;
        s->len = body;
        b->notify = s;
        atomic_store(&b->notify_state, TE_NOTIFY_WAITING);
    }
    pthread_mutex_unlock(&b->lock);

    /* Zero-length and same-host requests complete here; the rest is cut into slices. */
    uint64_t now = mc_now_ms();
    bool *tcp = n ? calloc(n, sizeof *tcp) : NULL;
    if (n && !tcp)
        abort();
    nslices = 0;
    for (size_t i = 0; i < n; i++) {
        const mc_te_request *r = &reqs[i];
        te_task *t = &b->tasks[first + i];
        te_peer *p = peers[i];
        if (r->length == 0) {
            mc__te_task_finish(te, t, MC_TE_COMPLETED, 0);
            continue;
        }
        pthread_mutex_lock(&p->lock);
        bool stale = p->stale || !p->have_desc;
        pthread_mutex_unlock(&p->lock);
        if (stale)
            mc__te_peer_refresh(te, p); /* on failure the slices fail and say so */
        bool done = false;
        uint64_t epoch = r->opcode == MC_TE_OP_WRITE ? r->fence_epoch : 0;
        int sr = mc__te_send_fenced(p, epoch) ? -ESTALE : 0;
        if (sr == 0)
            sr = mc__te_shm_try(te, p, r->opcode, r->source, r->target_offset, r->length,
                                epoch, &done);
        if (sr == 1 && mc_now_ms() - p->last_refresh_ms > 1000 &&
            mc__te_peer_refresh(te, p) == MC_OK)
            /* maybe memory the peer shared after we cached its descriptor */
            sr = mc__te_shm_try(te, p, r->opcode, r->source, r->target_offset, r->length,
                                epoch, &done);
        if (sr == -ESTALE) { /* target fence (fence.c): refused before any byte moved */
            if (!done)
                atomic_fetch_add(&te->st.stale_sends, 1);
            mc__te_task_finish(te, t, MC_TE_FAILED, MC_TRANSFER_FAIL);
            continue;
        }
        if (done) {
            atomic_store(&t->done_bytes, r->length);
            mc__te_task_finish(te, t, MC_TE_COMPLETED, 0);
            continue;
        }
        tcp[i] = true;
        nslices += (r->length + te->slice_size - 1) / te->slice_size;
    }
    te_chunk *chunk = NULL;
    if (nslices) {
        chunk = calloc(1, sizeof *chunk + nslices * sizeof(te_slice));
        if (!chunk)
            abort();
        chunk->n = nslices;
        pthread_mutex_lock(&b->lock);
        chunk->next = b->chunks;
        b->chunks = chunk;
        pthread_mutex_unlock(&b->lock);
    }
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        if (!tcp[i])
            continue;
        const mc_te_request *r = &reqs[i];
        te_task *t = &b->tasks[first + i];
        te_peer *p = peers[i];
        uint64_t k = (r->length + te->slice_size - 1) / te->slice_size;
        atomic_store(&t->slices_left, (uint32_t)k);
        uint64_t deadline = now + te->timeout_ms + r->length / 1000000;
        te_slice *head = &chunk->s[used];
        for (uint64_t j = 0; j < k; j++) {
            te_slice *s = &chunk->s[used++];
            uint64_t off = j * te->slice_size;
            s->task = t;
            s->batch = b;
            s->peer = p;
            s->op = r->opcode == MC_TE_OP_WRITE ? MC_TE_WOP_WRITE : MC_TE_WOP_READ;
            s->local = (char *)r->source + off;
            s->remote = r->target_offset + off;
            s->len = r->length - off < te->slice_size ? r->length - off : te->slice_size;
            s->epoch = s->op == MC_TE_WOP_WRITE ? r->fence_epoch : 0;
            s->deadline_ms = deadline;
            s->next = j + 1 < k ? s + 1 : NULL;
        }
        mc__te_peer_enqueue(p, head, &chunk->s[used - 1]);
    }
    free(tcp);
    free(peers);
    mc__te_batch_submit_end(te, b);
    return MC_OK;
}

int mc_te_submit(mc_te *te, mc_te_batch_t batch, const mc_te_request *reqs, size_t n)
{
    return submit(te, batch, reqs, n, NULL, NULL, NULL, 0);
}

int mc_te_submit_with_notify(mc_te *te, mc_te_batch_t batch, const mc_te_request *reqs,
                             size_t n, mc_te_segment_t seg, const char *name, const void *msg,
                             size_t msg_len)
{
    if (!te || !name || strlen(name) > MC_TE_MAX_NOTIFY_NAME || msg_len > MC_TE_MAX_NOTIFY_MSG ||
        (msg_len && !msg) || (n && !reqs))
        return MC_INVALID_PARAMS;
    te_peer *p = mc__te_peer_by_handle(te, n ? reqs[0].target_id : seg);
    if (!p)
        return MC_INVALID_PARAMS;
    return submit(te, batch, reqs, n, p, name, msg, msg_len);
}

/* ---- sync / async helpers ---- */

static int build_reqs(te_peer *p, int opcode, const uint64_t *local, const uint64_t *remote,
                      const uint64_t *lens, size_t n, mc_te_request **out)
{
    if (n && (!local || !remote || !lens))
        return MC_INVALID_PARAMS;
    mc_te_request *r = n ? calloc(n, sizeof *r) : NULL;
    if (n && !r)
        abort();
    for (size_t i = 0; i < n; i++)
        r[i] = (mc_te_request){.opcode = opcode, .source = (void *)(uintptr_t)local[i],
                               .target_id = p->handle, .target_offset = remote[i],
                               .length = lens[i]};
    *out = r;
    return MC_OK;
}

static int run_once(mc_te *te, te_peer *p, const mc_te_request *reqs, size_t n,
                    const char *nname, const void *nmsg, size_t nlen)
{
    mc_te_batch_t b;
    int rc = mc_te_allocate_batch(te, n ? n : 1, &b);
    if (rc != MC_OK)
        return rc;
    rc = nname ? submit(te, b, reqs, n, p, nname, nmsg, nlen) : mc_te_submit(te, b, reqs, n);
    if (rc == MC_OK) {
        mc_te_status st;
        mc_te_wait_batch(te, b, -1, &st);
        rc = st.state == MC_TE_COMPLETED ? MC_OK : (st.error ? st.error : MC_TRANSFER_FAIL);
    }
    mc_te_free_batch(te, b);
    return rc;
}

int mc_te_transfer_sync(mc_te *te, const char *segment, int opcode, const uint64_t *local,
                        const uint64_t *remote, const uint64_t *lens, size_t n,
                        const char *notify_name, const void *notify_msg, size_t notify_len)
{
    if (!te || (opcode != MC_TE_OP_READ && opcode != MC_TE_OP_WRITE))
        return MC_INVALID_PARAMS;
    if (notify_name && (strlen(notify_name) > MC_TE_MAX_NOTIFY_NAME ||
                        notify_len > MC_TE_MAX_NOTIFY_MSG || (notify_len && !notify_msg)))
        return MC_INVALID_PARAMS;
    if (n == 0 && !notify_name)
        return valid_name(segment) ? MC_OK : MC_INVALID_PARAMS;
    te_peer *p;
    int rc = open_peer(te, segment, false, &p);
    if (rc != MC_OK)
        return rc;
    mc_te_request *reqs;
    rc = build_reqs(p, opcode, local, remote, lens, n, &reqs);
    if (rc != MC_OK)
        return rc;
    rc = run_once(te, p, reqs, n, notify_name, notify_msg, notify_len);
    if (rc == MC_TRANSFER_FAIL) {
        /* the peer may have restarted: refresh its descriptor and try once more */
        pthread_mutex_lock(&p->lock);
        bool stale = p->stale;
        pthread_mutex_unlock(&p->lock);
        if (stale && mc__te_peer_refresh(te, p) == MC_OK)
            rc = run_once(te, p, reqs, n, notify_name, notify_msg, notify_len);
    }
    free(reqs);
    return rc;
}

int mc_te_transfer_async(mc_te *te, const char *segment, int opcode, const uint64_t *local,
                         const uint64_t *remote, const uint64_t *lens, size_t n,
                         mc_te_batch_t *out)
{
    if (!te || !out || n == 0 || (opcode != MC_TE_OP_READ && opcode != MC_TE_OP_WRITE))
        return MC_INVALID_PARAMS;
    te_peer *p;
    int rc = open_peer(te, segment, false, &p);
    if (rc != MC_OK)
        return rc;
    mc_te_request *reqs;
    rc = build_reqs(p, opcode, local, remote, lens, n, &reqs);
    if (rc != MC_OK)
        return rc;
    mc_te_batch_t b;
    rc = mc_te_allocate_batch(te, n, &b);
    if (rc == MC_OK) {
        rc = mc_te_submit(te, b, reqs, n);
        if (rc != MC_OK)
            mc_te_free_batch(te, b);
        else
            *out = b;
    }
    free(reqs);
    return rc;
}

int mc_te_send_notify(mc_te *te, const char *segment, const char *name, const void *msg,
                      size_t msg_len)
{
    if (!name)
        return MC_INVALID_PARAMS;
    return mc_te_transfer_sync(te, segment, MC_TE_OP_WRITE, NULL, NULL, NULL, 0, name, msg,
                               msg_len);
}

int mc_te_send_probe(mc_te *te, const char *server)
{
    if (!te || !te->initialized || !valid_name(server))
        return MC_INVALID_PARAMS;
    char host[MC_METADATA_MAX_HOST];
    uint16_t port;
    if (te->p2p) {
        if (mc_sock_parse_hostport(server, host, sizeof host, &port, 0) < 0)
            return MC_INVALID_PARAMS;
    } else {
        mc_rpc_meta meta;
        int rc = mc_metadata_get_rpc_meta(te->md, server, &meta);
        if (rc != MC_OK)
            return rc == MC_OBJECT_NOT_FOUND ? MC_RPC_FAIL : rc;
        snprintf(host, sizeof host, "%s", meta.ip_or_host_name);
        port = meta.rpc_port;
    }
    char *reply = NULL;
    size_t rlen = 0;
    int rc = mc__te_hs_request(host, port, MC_TE_HS_PROBE, "{}", 2, 4096,
                               TE_HS_CONNECT_TIMEOUT_MS, &reply, &rlen);
    free(reply);
    if (rc == -ETIMEDOUT)
        return MC_RPC_TIMEOUT;
    return rc < 0 ? MC_RPC_FAIL : MC_OK;
}

void mc_te_get_stats(mc_te *te, mc_te_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!te)
        return;
    out->tcp_bytes_sent = atomic_load_explicit(&te->st.tcp_sent, memory_order_relaxed);
    out->tcp_bytes_received = atomic_load_explicit(&te->st.tcp_recv, memory_order_relaxed);
    out->shm_bytes = atomic_load_explicit(&te->st.shm, memory_order_relaxed);
    out->served_bytes = atomic_load_explicit(&te->st.served, memory_order_relaxed);
    out->refused_requests = atomic_load_explicit(&te->st.refused, memory_order_relaxed);
    out->tasks_completed = atomic_load_explicit(&te->st.done, memory_order_relaxed);
    out->tasks_failed = atomic_load_explicit(&te->st.failed, memory_order_relaxed);
    out->connections_opened = atomic_load_explicit(&te->st.conn_open, memory_order_relaxed);
    out->connections_failed = atomic_load_explicit(&te->st.conn_fail, memory_order_relaxed);
    out->stale_writes_refused = atomic_load_explicit(&te->st.stale_writes, memory_order_relaxed);
    out->stale_sends_refused = atomic_load_explicit(&te->st.stale_sends, memory_order_relaxed);
}

void mc_te_destroy(mc_te *te)
{
    if (!te)
        return;
    if (te->initialized) {
        te_shutdown(te, true);
        te->initialized = false;
    }
    for (size_t i = 0; i < te->n_peers; i++) {
        te_peer *p = te->peers[i];
        mc_segment_desc_deinit(&p->desc);
        free(p->maps);
        free(p->shm_bufs);
        pthread_rwlock_destroy(&p->shm_rw);
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->refresh_lock);
        free(p->name);
        free(p);
    }
    free(te->peers);
    mc__te_batches_free_all(te);
    mc__te_managed_free_all(te);
    mc__te_regions_free_all(te);
    mc_te_notifies_free(te->notifies, te->n_notifies);
    mc_segment_desc_deinit(&te->desc);
    free(te->desc_json);
    mc__te_fence_free(te);
    mc_metadata_destroy(te->md);
    pthread_mutex_destroy(&te->publish_lock);
    pthread_mutex_destroy(&te->desc_lock);
    pthread_rwlock_destroy(&te->reg_lock);
    pthread_mutex_destroy(&te->managed_lock);
    pthread_mutex_destroy(&te->seg_lock);
    pthread_mutex_destroy(&te->batch_lock);
    pthread_mutex_destroy(&te->notify_lock);
    free(te);
}
