/* engine.c: the engine's life cycle: options and create, initialize (listeners, I/O
 * loops, first publish), shutdown, the getters, stats and destroy. Owns struct mc_te's
 * setup and teardown; the data path, peers, own segment and submit live in their own
 * files (see internal.h). See include/mooncake/transfer_engine.h. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/env.h"
#include "common/spin.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "net/sock.h"
#include "transfer/internal.h"

/* ---- options ---- */

/* MC_TE_IO_THREADS' default (issue 17): one I/O loop per pooled connection to a peer
 * (a peer's connections are spread over its lanes, one lane per loop: tcp_client.c), so
 * N connections move data on N threads as N raw TCP streams do, but no more than the
 * CPUs this process may run on, and at least 1. On a 2-CPU box that is 2 (it was
 * CPUs / 2 = 1 until session 16: measured on a quiet box, 1 MiB x 16 store gets over
 * TCP went 4.2-4.7 -> 4.9-5.3 GB/s with a loopback pair of engines on the 2 CPUs, and a
 * batch of small slices stays on one lane: mc__te_peer_enqueue). */
static uint64_t default_io_threads(unsigned conns)
{
    long cpus = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = CPU_COUNT(&set);
    if (cpus <= 0)
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t n = cpus > 0 ? (uint64_t)cpus : 1;
    if (n > conns)
        n = conns;
    if (n > TE_MAX_IO)
        n = TE_MAX_IO;
    return n ? n : 1;
}

int mc_te_create(const mc_te_opts *opts, mc_te **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    mc_te_opts o = {0};
    if (opts)
        o = *opts;
    /* common/env.h's policy: a set but bad value fails the call, naming the variable */
    uint64_t timeout_s, slice, conns, nio, hs_max, auth_to, max_conns, max_ip, max_pending;
    bool force_tcp, prefault, inline_reads;
    if (mc_env_u64("MC_TRANSFER_TIMEOUT", MC_TE_DEFAULT_TIMEOUT_S, 1, MC_TE_MAX_TIMEOUT_S,
                   &timeout_s) < 0 ||
        mc_env_size("MC_TCP_SLICE_SIZE", MC_TE_DEFAULT_SLICE, 4096, MC_TE_MAX_SLICE, &slice) <
            0 ||
        mc_env_u64("MC_TE_TCP_CONNECTIONS", 2, 1, TE_MAX_CONNS, &conns) < 0 ||
        mc_env_size("MC_HANDSHAKE_MAX_LENGTH", MC_TE_HS_DEFAULT_MAX, 64, MC_TE_HS_LIMIT,
                    &hs_max) < 0 ||
        mc_env_bool("MC_FORCE_TCP", false, &force_tcp) < 0 ||
        mc_env_bool("MC_TE_PREFAULT", false, &prefault) < 0 ||
        mc_env_bool("MC_TE_INLINE_READS", true, &inline_reads) < 0 ||
        mc_env_u64("MC_TE_AUTH_TIMEOUT_MS", 10000, 10, 3600000, &auth_to) < 0 ||
        mc_env_u64("MC_TE_MAX_CONNECTIONS", 4096, 1, 1u << 20, &max_conns) < 0 ||
        mc_env_u64("MC_TE_MAX_CONNECTIONS_PER_IP", 512, 1, 1u << 20, &max_ip) < 0 ||
        mc_env_size("MC_TE_MAX_PENDING_BYTES", 64ull << 20, 1u << 20, 1ull << 40,
                    &max_pending) < 0 ||
        mc_spin_env_check() < 0) /* refused here; common/spin.c applies it */
        return MC_INVALID_PARAMS;
    if (mc_env_u64("MC_TE_IO_THREADS", default_io_threads(o.conns_per_peer ? o.conns_per_peer
                                                                         : (unsigned)conns),
                   1, TE_MAX_IO, &nio) < 0)
        return MC_INVALID_PARAMS;
    const char *gids_text = o.shm_allowed_gids ? o.shm_allowed_gids
                                               : mc_env_str("MC_TE_SHM_ALLOWED_GIDS");
    uint32_t *gids;
    size_t n_gids;
    if (mc__te_parse_gids(gids_text, &gids, &n_gids) < 0) {
        mc_log(MC_LOG_ERROR, TE_TAG,
               "mc_te_create: %s \"%s\" is not a list of gids (write e.g. \"100,200\")",
               o.shm_allowed_gids ? "shm_allowed_gids" : "MC_TE_SHM_ALLOWED_GIDS", gids_text);
        return MC_INVALID_PARAMS;
    }
    if (o.max_pending_bytes && o.max_pending_bytes < (1u << 20)) {
        free(gids);
        mc_log(MC_LOG_ERROR, TE_TAG, "mc_te_create: max_pending_bytes below 1 MiB");
        return MC_INVALID_PARAMS;
    }
    /* the cluster secret: given (borrowed), else MC_AUTH_TOKEN_FILE, loaded once here */
    mc_auth_secret *own = NULL;
    const mc_auth_secret *auth = o.auth;
    if (!auth) {
        own = mc_xmalloc(sizeof *own);
        char err[512];
        if (mc_auth_load(NULL, own, err, sizeof err) < 0) {
            mc_log(MC_LOG_ERROR, TE_TAG, "mc_te_create: the cluster secret: %s", err);
            free(own);
            free(gids);
            return MC_INVALID_PARAMS;
        }
        auth = own;
    }
    if (!mc_auth_enabled(auth)) {
        if (own) {
            mc_auth_secret_wipe(own);
            free(own);
        }
        own = NULL;
        auth = NULL;
    }
    if ((o.slice_size && (o.slice_size < 4096 || o.slice_size > MC_TE_MAX_SLICE)) ||
        o.conns_per_peer > TE_MAX_CONNS || o.io_threads > TE_MAX_IO ||
        (o.handshake_max_length && (o.handshake_max_length < 64 ||
                                    o.handshake_max_length > MC_TE_HS_LIMIT))) {
        mc_log(MC_LOG_ERROR, TE_TAG, "mc_te_create: option out of range");
        if (own) {
            mc_auth_secret_wipe(own);
            free(own);
        }
        free(gids);
        return MC_INVALID_PARAMS;
    }
    mc_te *te = mc_xcalloc(1, sizeof *te);
    te->auth = auth;
    te->auth_own = own;
    te->auth_timeout_ms = o.auth_timeout_ms ? o.auth_timeout_ms : auth_to;
    te->max_conns = o.max_connections ? o.max_connections : (uint32_t)max_conns;
    te->max_conns_per_ip =
        o.max_connections_per_ip ? o.max_connections_per_ip : (uint32_t)max_ip;
    te->max_pending = o.max_pending_bytes ? o.max_pending_bytes : max_pending;
    te->shm_gids = gids;
    te->n_shm_gids = n_gids;
    mc__te_iplimit_init(&te->data_ips);
    mc__te_iplimit_init(&te->hs_ips);
    te->timeout_ms = o.transfer_timeout_ms ? o.transfer_timeout_ms : timeout_s * 1000;
    te->slice_size = o.slice_size ? o.slice_size : slice;
    te->conns_per_peer = o.conns_per_peer ? o.conns_per_peer : (unsigned)conns;
    te->nio = o.io_threads ? o.io_threads : (unsigned)nio;
    te->hs_max = o.handshake_max_length ? o.handshake_max_length : (uint32_t)hs_max;
    te->force_tcp = o.force_tcp == 1 || (o.force_tcp <= 0 && force_tcp);
    te->prefault = prefault;
    te->inline_reads = inline_reads;
    te->stream_writes = o.stream_writes == 1;
    te->clock = o.clock;
    te->clock_ctx = o.clock_ctx;
    te->rpc_port = te->data_port = -1;
    te->hs_lfd = te->data_lfd = te->shm_lfd = -1;
    for (unsigned i = 0; i < TE_MAX_IO; i++) {
        mc_list_init(&te->io[i].sconns);
        mc_list_init(&te->io[i].cconns);
        mc_list_init(&te->io[i].hsconns);
        mc_list_init(&te->io[i].shmconns);
    }
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

/* ---- I/O loops ---- */

static void io_tick(void *arg)
{
    te_io *io = arg;
    mc__te_cconn_tick(io);
    mc__te_sconn_tick(io);
    if (io->idx == 0) {
        mc__te_hs_tick(io);
        mc__te_shm_tick(io);
    }
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
    for (size_t i = 0; (p = peer_at(te, i)); i++) {
        mc__te_peer_close_conns(p);
        mc__te_inline_close(p);
    }
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

/* Listens for the handshake port: want, else a free port in lo..hi (tried in a
 * scattered order), else any free port. Returns the fd or -errno. */
static int listen_rpc(const char *bind, uint16_t want, uint64_t lo, uint64_t hi,
                      uint16_t *port)
{
    if (want)
        return mc_sock_listen_tcp(bind, want, 512, false, port);
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

/* ---- a stale name ---- */

/* Whether something accepts connections on host:port. A refused connection is the only
 * answer taken as "nobody there"; a timeout or any other error counts as alive (we cannot
 * tell, so we do not take the name). */
static bool port_answers(const char *host, int port)
{
    if (port <= 0 || port > 65535)
        return false;
    int fd = mc_sock_connect_tcp(host, (uint16_t)port, 1000);
    if (fd >= 0) {
        close(fd);
        return true;
    }
    return fd != -ECONNREFUSED;
}

/* Called when publishing our rpc_meta found another value under our name (the metadata
 * server keeps rpc_meta write-once). Takes the name over only when the entries provably
 * belong to a dead engine of this same host (a process restarted under its old
 * local_hostname after a crash, or before the master's cleanup ran):
 *   1. the stale descriptor (ram/<name>) exists and carries our host id (machine id +
 *      boot id): the previous owner ran on this machine since its last boot, so its
 *      listeners would be reachable from here;
 *   2. the previous owner is gone: its handshake port (from the stale rpc_meta) and its
 *      data port (from the stale descriptor) both refuse connections, and its same-host
 *      Unix socket (when it had one) does too. A port we hold ourselves counts as
 *      refused (the owner cannot be listening on it).
 * Then the stale rpc_meta is deleted and ours written (the descriptor is overwritten by
 * the publish that follows). Otherwise OBJECT_ALREADY_EXISTS stays, with the reason:
 * a live engine (or one we cannot prove dead, e.g. SIGSTOPped: its listeners still
 * accept) keeps its name. Two processes restarted under one name at the same moment are
 * not told apart (the metadata server has no compare-and-delete). */
static int reclaim_stale_name(mc_te *te, const mc_rpc_meta *mine)
{
    const char *url = mc_metadata_conn_of(te->md)->url;
    mc_rpc_meta old;
    int rc = mc_metadata_get_rpc_meta(te->md, te->name, &old);
    if (rc == MC_OBJECT_NOT_FOUND) /* gone meanwhile: try again once */
        return mc_metadata_put_rpc_meta(te->md, te->name, mine);
    if (rc != MC_OK)
        return MC_OBJECT_ALREADY_EXISTS;
    mc_segment_desc d;
    rc = mc_metadata_get_segment(te->md, te->name, &d);
    const char *why = NULL;
    char whybuf[MC_SEGMENT_MAX_HOST_ID + MC_METADATA_MAX_HOST + 128];
    if (rc != MC_OK) {
        why = "its segment descriptor cannot be read, so its host is unknown";
    } else if (!d.host_id || strcmp(d.host_id, te->host_id) != 0) {
        snprintf(whybuf, sizeof whybuf, "it was registered from another host (host id %s)",
                 d.host_id && *d.host_id ? d.host_id : "(none)");
        why = whybuf;
    } else {
        bool alive = false;
        int dport = d.tcp_data_port;
        if (old.rpc_port != te->rpc_port && old.rpc_port != te->data_port &&
            port_answers(old.ip_or_host_name, old.rpc_port))
            alive = true;
        if (!alive && dport != te->rpc_port && dport != te->data_port &&
            port_answers(old.ip_or_host_name, dport))
            alive = true;
        if (!alive && d.shm_socket && *d.shm_socket &&
            strcmp(d.shm_socket, te->shm_path) != 0) {
            int fd = mc_sock_connect_unix(d.shm_socket, 1000);
            if (fd >= 0) {
                close(fd);
                alive = true;
            }
        }
        if (alive) {
            snprintf(whybuf, sizeof whybuf,
                     "its engine on this host is alive (handshake port %s:%u or data port "
                     "%d answers)",
                     old.ip_or_host_name, (unsigned)old.rpc_port, dport);
            why = whybuf;
        }
    }
    mc_segment_desc_deinit(&d); /* initialized by get_segment whatever it returned */
    if (why) {
        mc_log(MC_LOG_ERROR, TE_TAG,
               "segment name %s is taken in the metadata server %s (rpc_meta %s:%u): %s. "
               "Give this engine another local_hostname (host:port), stop the other one, or "
               "delete the keys mooncake/rpc_meta/%s and mooncake/ram/%s (a master run with "
               "--enable_metadata_cleanup_on_timeout deletes them when the client expires)",
               te->name, url, old.ip_or_host_name, (unsigned)old.rpc_port, why, te->name,
               te->name);
        return MC_OBJECT_ALREADY_EXISTS;
    }
    mc_log(MC_LOG_WARN, TE_TAG,
           "segment name %s: taking over the stale entries of a previous engine of this "
           "host (rpc_meta %s:%u; its ports refuse connections: it is gone)",
           te->name, old.ip_or_host_name, (unsigned)old.rpc_port);
    rc = mc_metadata_remove_rpc_meta(te->md, te->name);
    if (rc != MC_OK && rc != MC_OBJECT_NOT_FOUND)
        return rc;
    return mc_metadata_put_rpc_meta(te->md, te->name, mine);
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
    /* "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 address */
    int given_port;
    char err[160];
    if (mc_sock_split_hostport(local_hostname, strlen(local_hostname), MC_HOSTPORT_BARE_V6,
                               te->host, sizeof te->host, &given_port, err, sizeof err) < 0) {
        mc_log(MC_LOG_ERROR, TE_TAG, "local_hostname: %s", err);
        return MC_INVALID_PARAMS;
    }
    uint16_t want_port = given_port < 0 ? 0 : (uint16_t)given_port;
    uint64_t port_lo, port_hi;
    if (mc_env_u64("MC_MIN_RPC_PORT", 15000, 1, 65535, &port_lo) < 0 ||
        mc_env_u64("MC_MAX_RPC_PORT", 17000, 1, 65535, &port_hi) < 0)
        return MC_INVALID_PARAMS;
    /* the metadata client signs with the engine's secret: the same one on every port
     * (none configured: a len-0 secret, so it does not read MC_AUTH_TOKEN_FILE again) */
    static const mc_auth_secret no_secret; /* len 0 */
    mc_metadata_opts mo = {.auth_secret = te->auth ? te->auth : &no_secret};
    rc = mc_metadata_create_opts(metadata_conn, &mo, &te->md);
    if (rc != MC_OK)
        return rc;
    te->p2p = mc_metadata_is_p2p(te->md);
    const char *bind = mc_env_str("MC_TCP_BIND_ADDRESS");
    if (!bind)
        bind = te->host;
    uint16_t rpc_port = 0, data_port = 0;
    uint16_t want = te->p2p ? want_port : 0;
    te->hs_lfd = listen_rpc(bind, want, port_lo, port_hi, &rpc_port);
    if (te->hs_lfd == -ENOENT || te->hs_lfd == -EADDRNOTAVAIL) {
        bind = "0.0.0.0"; /* a name that is not a local address: listen everywhere */
        te->hs_lfd = listen_rpc(bind, want, port_lo, port_hi, &rpc_port);
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
        io->scratch = mc_xmalloc(65536);
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
        mc_rpc_meta meta = mc__te_own_rpc_meta(te);
        rc = mc_metadata_put_rpc_meta(te->md, te->name, &meta);
        if (rc == MC_OBJECT_ALREADY_EXISTS)
            rc = reclaim_stale_name(te, &meta); /* logs why when it refuses */
        else if (rc != MC_OK)
            mc_log(MC_LOG_ERROR, TE_TAG, "publishing rpc_meta for %s to the metadata server "
                   "%s failed: %s", te->name, mc_metadata_conn_of(te->md)->url,
                   mc_strerror(rc));
        if (rc != MC_OK) {
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
    mc_log(MC_LOG_INFO, TE_TAG, "engine %s: rpc port %u, data port %u, metadata %s%s%s",
           te->name, rpc_port, data_port, mc_metadata_kind_name(mc_metadata_kind_of(te->md)),
           te->shm_path[0] ? ", same-host shm on" : "",
           te->auth ? ", cluster secret required on every port" : "");
    if (!te->auth) {
        char where[MC_METADATA_MAX_HOST + 64];
        snprintf(where, sizeof where, "%s (handshake port %u, data port %u)", bind,
                 rpc_port, data_port);
        mc_auth_warn_open(TE_TAG, "the transfer engine", where,
                          "read and write every range this engine registered");
    }
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

void mc_te_get_stats(mc_te *te, mc_te_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!te)
        return;
#define LOAD(field) atomic_load_explicit(&te->st.field, memory_order_relaxed)
    out->tcp_bytes_sent = LOAD(tcp_sent);
    out->tcp_bytes_received = LOAD(tcp_recv);
    out->shm_bytes = LOAD(shm);
    out->served_bytes = LOAD(served);
    out->refused_requests = LOAD(refused);
    out->tasks_completed = LOAD(done);
    out->tasks_failed = LOAD(failed);
    out->connections_opened = LOAD(conn_open);
    out->connections_failed = LOAD(conn_fail);
    out->shm_peers_lost = LOAD(shm_lost);
    out->stale_writes_refused = LOAD(stale_writes);
    out->stale_sends_refused = LOAD(stale_sends);
    out->auth_refused = LOAD(auth_refused);
    out->auth_failed = LOAD(auth_failed);
    out->conn_limit_refused = LOAD(conn_limit);
    out->per_ip_refused = LOAD(ip_limit);
    out->peercred_refused = LOAD(peercred);
    out->pending_refused = LOAD(pending_limit);
    out->inline_bytes_received = LOAD(inline_recv);
    out->inline_runs_handed_over = LOAD(inline_handed);
#undef LOAD
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
        mc__te_inline_close(p); /* idle private connections (none when shut down) */
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
    mc__te_iplimit_free(&te->data_ips);
    mc__te_iplimit_free(&te->hs_ips);
    free(te->shm_gids);
    if (te->auth_own) {
        mc_auth_secret_wipe(te->auth_own);
        free(te->auth_own);
    }
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
