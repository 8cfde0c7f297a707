/* offload.c: the store client's disk tier (docs/ssd-tier.md; upstream FileStorage with
 * its heartbeat, client-owned LOCAL_DISK offload, upstream-mooncake.md §4.10).
 *
 * With setup(enable_ssd_offload=True, ssd_offload_path=DIR), or
 * MOONCAKE_OFFLOAD_FILE_STORAGE_PATH=DIR, the client opens a src/disk store in DIR (its
 * MOONCAKE_OFFLOAD_* limits: mc_disk_config_from_env) and runs one offload thread, which
 * every interval asks the master for tasks (mc_master_client_offload_heartbeat: the
 * channel upstream uses, OffloadObjectHeartbeat; a dedicated poll rather than the ping
 * reply so a slow disk never delays the liveness heartbeat, and a lost reply only delays
 * a task: the master re-offers nothing it has not handed out, and gives up handed-out
 * tasks after its timeout). It runs each task on this thread (the disk store's own I/O
 * threads do the I/O; never the engine's event loop, never the master):
 *   WRITE    copy the object's memory replica (in our own segment) to the disk;
 *   DELETE   drop a key the master removed or replaced;
 *   PROMOTE  read the key from disk into the memory replica the master reserved in our
 *            own segment;
 * and reports the results in one offload_end. When the master did not know our tier
 * (first poll, master restart, our client expired meanwhile: `fresh`), the thread first
 * REGISTERs every object found on the disk, so a client restarted on the same directory
 * serves its disk objects again; a key the master knows already (a newer copy) is
 * dropped from the disk.
 * Reads (read.c): a LOCAL_DISK replica of ours is read from the disk directly
 * (mc__offload_read_own, verified by the store's xxhash: a corrupt record is an error,
 * never wrong bytes). Another client's LOCAL_DISK replica is read through that client's
 * disk-read server (below), whose "host:port" is the replica's endpoint.
 *
 * Environment: MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, the store's MOONCAKE_OFFLOAD_* knobs
 * (disk.h mc_disk_config_from_env), MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS (poll
 * period while idle, 1..3600 s; default 100 ms, or the store's heartbeat interval when
 * shorter: eviction waits for these offloads) and MC_OFFLOAD_POLL_MS (ours, 10..60000 ms,
 * wins over the former). The WRITEs of one poll run concurrently. The disk store's own watermark eviction is
 * off unless MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION=true (the master is not
 * told of what the disk store evicts: such a read then misses). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <poll.h>
#include <unistd.h>

#include "client/internal.h"
#include "common/auth.h"
#include "common/env.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "disk/disk.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "net/frame.h"
#include "net/sock.h"

#define TAG MC__STORE_TAG

static bool in_own_segment(const mc_store *s, uint64_t addr, uint64_t size)
{
    uint64_t base = (uint64_t)(uintptr_t)s->seg_base;
    return s->seg_base && addr >= base && size <= s->seg_size && addr - base <= s->seg_size - size;
}

bool mc__offload_is_own(const mc_store *s, const mc_master_replica *r)
{
    return s->disk && r->type == MC_MASTER_REPLICA_LOCAL_DISK &&
           ((r->segment_id.first == s->client_id.first &&
             r->segment_id.second == s->client_id.second) ||
            (s->disk_ep[0] && strcmp(r->transport_endpoint, s->disk_ep) == 0));
}

/* ---- remote disk reads: the owner's disk-read server ----
 *
 * A reader of another client's LOCAL_DISK replica connects to the owner's disk-read
 * server (the replica's endpoint, "host:port", a TCP port of the owner's host picked at
 * setup; upstream has a coro_rpc server in the owner for the same, batch_get_offload_
 * object). The owner greets with [u32 DR_MAGIC][u32 flags: 1 = a cluster secret is
 * required][32-byte nonce]; the reader sends [u32 DR_MAGIC][u32 key length][key][32-byte
 * MAC = HMAC-SHA-256(secret, DR_LABEL || nonce || key), zeros without a secret]; the
 * owner checks the MAC (docs/security.md: the cluster secret, issue 11; a fresh nonce per
 * connection, so a recorded request cannot be replayed), reads and verifies the record
 * on its disk store and answers [i32 status][u32 0][u64 length][value]. One request per
 * connection, served one at a time on one thread (the disk store's threads do the I/O),
 * each bounded by DR_IO_MS. Without a secret the server is open (logged at setup), like
 * the transfer engine's ports then. */
#define DR_MAGIC 0x5244434Du /* "MCDR" */
#define DR_IO_MS 10000u
#define DR_LABEL "mooncake-c disk read v1"

static int dr_mac(const mc_auth_secret *sec, const uint8_t *nonce, const void *key,
                  size_t klen, uint8_t mac[MC_AUTH_MAC_LEN])
{
    const void *parts[3] = {DR_LABEL, nonce, key};
    size_t lens[3] = {sizeof DR_LABEL - 1, MC_AUTH_NONCE_LEN, klen};
    return mc_auth_hmac(sec, parts, lens, 3, mac);
}

static void serve_one(mc_store *s, int fd)
{
    uint64_t deadline = mc_now_ms() + DR_IO_MS;
    uint8_t hello[8 + MC_AUTH_NONCE_LEN], hdr[8], key[MC_MASTER_KEY_MAX];
    uint8_t mac[MC_AUTH_MAC_LEN], want[MC_AUTH_MAC_LEN];
    bool auth = mc_auth_enabled(&s->auth);
    mc_put_le32(hello, DR_MAGIC);
    mc_put_le32(hello + 4, auth ? 1 : 0);
    if (mc_auth_random(hello + 8, MC_AUTH_NONCE_LEN) != 0 ||
        mc_sock_send_all(fd, hello, sizeof hello, deadline) != 0)
        return;
    if (mc_sock_recv_all(fd, hdr, sizeof hdr, deadline) != 0 || mc_get_le32(hdr) != DR_MAGIC)
        return;
    uint32_t klen = mc_get_le32(hdr + 4);
    if (klen == 0 || klen > sizeof key || mc_sock_recv_all(fd, key, klen, deadline) != 0 ||
        mc_sock_recv_all(fd, mac, sizeof mac, deadline) != 0)
        return;
    uint64_t size = 0;
    int rc = MC_OK;
    if (auth && (dr_mac(&s->auth, hello + 8, key, klen, want) != 0 ||
                 !mc_auth_equal(mac, want, sizeof mac))) {
        rc = MC_ILLEGAL_CLIENT;
        mc_log(MC_LOG_WARN, TAG, "disk read refused: the reader's MAC does not verify (no or "
                                 "another cluster secret)");
    }
    if (rc == MC_OK)
        rc = mc_disk_lookup(s->disk, key, klen, &size);
    void *buf = NULL;
    if (rc == MC_OK) {
        buf = malloc(size ? size : 1);
        rc = buf ? mc__offload_read_own(s, key, klen, &(mc_store_iov){buf, size}, 1, size)
                 : MC_NO_AVAILABLE_HANDLE;
    }
    uint8_t rep[16];
    mc_put_le32(rep, (uint32_t)rc);
    mc_put_le32(rep + 4, 0);
    mc_put_le64(rep + 8, rc == MC_OK ? size : 0);
    if (mc_sock_send_all(fd, rep, sizeof rep, deadline) == 0 && rc == MC_OK)
        mc_sock_send_all(fd, buf, (size_t)size, deadline);
    free(buf);
}

static void *disk_srv_main(void *arg)
{
    mc_store *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->off_mu);
        bool stop = s->off_stop;
        pthread_mutex_unlock(&s->off_mu);
        if (stop)
            break;
        struct pollfd p = {.fd = s->disk_lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) /* wakes up to look at off_stop */
            continue;
        int fd = mc_sock_accept(s->disk_lfd, false);
        if (fd < 0)
            continue;
        serve_one(s, fd);
        close(fd);
    }
    return NULL;
}

int mc__offload_read_remote(mc_store *s, const mc_master_replica *r, const void *key,
                            size_t klen, const mc_store_iov *iov, size_t niov, uint64_t size,
                            uint64_t deadline_ms)
{
    char host[MC_MASTER_NAME_MAX];
    uint16_t port = 0;
    if (mc_sock_parse_hostport(r->transport_endpoint, host, sizeof host, &port, 0) != 0 ||
        !port || klen > MC_MASTER_KEY_MAX)
        return MC_TRANSFER_FAIL;
    uint64_t d = mc_now_ms() + DR_IO_MS; /* a disk read is not bound by the memory lease */
    if (deadline_ms > d)
        d = deadline_ms;
    int fd = mc_sock_connect_tcp(host, port, (int)DR_IO_MS);
    if (fd < 0)
        return MC_TRANSFER_FAIL;
    int rc = MC_TRANSFER_FAIL;
    uint8_t hello[8 + MC_AUTH_NONCE_LEN], hdr[8], rep[16], mac[MC_AUTH_MAC_LEN] = {0};
    if (mc_sock_recv_all(fd, hello, sizeof hello, d) != 0 || mc_get_le32(hello) != DR_MAGIC)
        goto out;
    if ((mc_get_le32(hello + 4) & 1) &&
        (!mc_auth_enabled(&s->auth) || dr_mac(&s->auth, hello + 8, key, klen, mac) != 0)) {
        rc = MC_ILLEGAL_CLIENT; /* the owner wants the cluster secret, we have none */
        goto out;
    }
    mc_put_le32(hdr, DR_MAGIC);
    mc_put_le32(hdr + 4, (uint32_t)klen);
    if (mc_sock_send_all(fd, hdr, sizeof hdr, d) != 0 || mc_sock_send_all(fd, key, klen, d) != 0 ||
        mc_sock_send_all(fd, mac, sizeof mac, d) != 0 ||
        mc_sock_recv_all(fd, rep, sizeof rep, d) != 0)
        goto out;
    rc = (int32_t)mc_get_le32(rep);
    if (rc != MC_OK)
        goto out;
    if (mc_get_le64(rep + 8) != size) {
        rc = MC_OBJECT_NOT_FOUND; /* another copy of another size: not this object */
        goto out;
    }
    uint64_t off = 0;
    for (size_t p = 0; p < niov && off < size; p++) {
        uint64_t l = iov[p].len < size - off ? iov[p].len : size - off;
        if (l && mc_sock_recv_all(fd, iov[p].base, (size_t)l, d) != 0) {
            rc = MC_TRANSFER_FAIL;
            goto out;
        }
        off += l;
    }
out:
    close(fd);
    return rc;
}

int mc__offload_read_own(mc_store *s, const void *key, size_t klen, const mc_store_iov *iov,
                         size_t niov, uint64_t size)
{
    if (!s->disk)
        return MC_OBJECT_NOT_FOUND;
    uint64_t got = 0;
    int rc;
    if (niov == 1 && iov[0].len >= size) {
        rc = mc_disk_get(s->disk, key, klen, iov[0].base, iov[0].len, &got);
    } else { /* scattered parts: through a bounce buffer */
        char *b = malloc(size ? size : 1);
        if (!b)
            return MC_NO_AVAILABLE_HANDLE;
        rc = mc_disk_get(s->disk, key, klen, b, size, &got);
        uint64_t off = 0;
        for (size_t p = 0; rc == MC_OK && p < niov && off < size; p++) {
            uint64_t l = iov[p].len < size - off ? iov[p].len : size - off;
            if (l)
                memcpy(iov[p].base, b + off, (size_t)l);
            off += l;
        }
        free(b);
    }
    if (rc == MC_OK && got != size)
        rc = MC_OBJECT_NOT_FOUND; /* an older copy of another size: not this object */
    if (rc == MC_OK)
        atomic_fetch_add(&s->disk_reads, 1);
    else
        atomic_fetch_add(&s->disk_read_failures, 1);
    return rc;
}

/* ---- the offload thread ---- */

typedef struct regs {
    mc_master_offload_item *v;
    size_t n, cap;
} regs;

static bool collect_reg(const void *key, size_t klen, uint64_t size, void *ctx)
{
    regs *r = ctx;
    if (klen == 0 || klen > MC_MASTER_KEY_MAX)
        return true;
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 256;
        r->v = mc_xrealloc(r->v, r->cap * sizeof *r->v);
    }
    void *k = mc_xmalloc(klen);
    memcpy(k, key, klen);
    r->v[r->n++] = (mc_master_offload_item){.op = MC_MASTER_OFFLOAD_REGISTER, .key = k,
                                            .key_len = klen, .size = size};
    return true;
}

/* Tells the master about every object on the disk (after a restart). */
static void register_all(mc_store *s)
{
    regs r = {0};
    mc_disk_foreach(s->disk, collect_reg, &r);
    int st[MC_MASTER_MAX_OFFLOAD_TASKS];
    size_t stale = 0, ok = 0;
    for (size_t i = 0; i < r.n; i += MC_MASTER_MAX_OFFLOAD_TASKS) {
        size_t m = r.n - i < MC_MASTER_MAX_OFFLOAD_TASKS ? r.n - i : MC_MASTER_MAX_OFFLOAD_TASKS;
        int rc = mc_master_client_offload_end(s->mc, s->client_id, s->disk_ep, r.v + i, m, st);
        if (rc != MC_OK) {
            mc_log(MC_LOG_WARN, TAG, "registering disk objects with the master failed: %s",
                   mc_strerror(rc));
            break;
        }
        for (size_t j = 0; j < m; j++) {
            if (st[j] == MC_OK) {
                ok++;
            } else if (st[j] == MC_OBJECT_ALREADY_EXISTS) {
                mc_disk_delete(s->disk, r.v[i + j].key, r.v[i + j].key_len);
                stale++;
            }
        }
    }
    for (size_t i = 0; i < r.n; i++)
        free((void *)r.v[i].key);
    free(r.v);
    atomic_fetch_add(&s->off_registered, ok);
    if (r.n)
        mc_log(MC_LOG_INFO, TAG,
               "disk tier %s: %zu object(s) registered with the master, %zu stale dropped",
               s->disk_path, ok, stale);
}

/* Runs one task; fills its result. Returns false for a task that needs no report. */
static bool run_task(mc_store *s, const mc_master_offload_item *t, mc_master_offload_item *res)
{
    *res = *t;
    res->status = MC_OK;
    switch (t->op) {
    case MC_MASTER_OFFLOAD_WRITE:
        if (!in_own_segment(s, t->address, t->size))
            res->status = MC_INVALID_PARAMS;
        else
            res->status = mc_disk_put(s->disk, t->key, t->key_len,
                                      (const void *)(uintptr_t)t->address, t->size);
        atomic_fetch_add(res->status == MC_OK ? &s->off_writes : &s->off_write_failures, 1);
        if (res->status != MC_OK)
            mc_log(MC_LOG_DEBUG, TAG, "offload of a %llu-byte object refused: %s",
                   (unsigned long long)t->size, mc_strerror(res->status));
        return true;
    case MC_MASTER_OFFLOAD_PROMOTE: {
        uint64_t got = 0;
        if (!in_own_segment(s, t->address, t->size))
            res->status = MC_INVALID_PARAMS;
        else
            res->status = mc_disk_get(s->disk, t->key, t->key_len,
                                      (void *)(uintptr_t)t->address, t->size, &got);
        if (res->status == MC_OK && got != t->size)
            res->status = MC_OBJECT_NOT_FOUND;
        atomic_fetch_add(res->status == MC_OK ? &s->off_promotions : &s->off_promotion_failures,
                         1);
        return true;
    }
    case MC_MASTER_OFFLOAD_DELETE:
        mc_disk_delete(s->disk, t->key, t->key_len);
        atomic_fetch_add(&s->off_deletes, 1);
        return false;
    default:
        return false;
    }
}

/* The WRITEs of one poll run concurrently on the disk store's threads: the offload
 * thread submits them all, then waits for the last completion. */
typedef struct wbatch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t pending;
} wbatch;

typedef struct wctx {
    wbatch *b;
    mc_master_offload_item *res;
} wctx;

static void write_done(void *ctx, int status, uint64_t size)
{
    (void)size;
    wctx *w = ctx;
    w->res->status = status;
    pthread_mutex_lock(&w->b->mu);
    if (--w->b->pending == 0)
        pthread_cond_signal(&w->b->cv);
    pthread_mutex_unlock(&w->b->mu);
}

static void run_writes(mc_store *s, const mc_master_offload_tasks *t,
                       mc_master_offload_item *res, size_t *nres)
{
    wbatch b = {.pending = 1}; /* one for the submitter, dropped after the loop */
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    wctx *w = mc_xmalloc((t->n ? t->n : 1) * sizeof *w);
    struct iovec *iov = mc_xmalloc((t->n ? t->n : 1) * sizeof *iov);
    for (uint32_t i = 0; i < t->n; i++) {
        const mc_master_offload_item *it = &t->items[i];
        if (it->op != MC_MASTER_OFFLOAD_WRITE)
            continue;
        mc_master_offload_item *r = &res[(*nres)++];
        *r = *it;
        r->status = MC_OK;
        if (!in_own_segment(s, it->address, it->size)) {
            r->status = MC_INVALID_PARAMS;
            continue;
        }
        iov[i] = (struct iovec){(void *)(uintptr_t)it->address, (size_t)it->size};
        w[i] = (wctx){&b, r};
        pthread_mutex_lock(&b.mu);
        b.pending++;
        pthread_mutex_unlock(&b.mu);
        int rc = mc_disk_put_async(s->disk, it->key, it->key_len, &iov[i], it->size ? 1 : 0,
                                   write_done, &w[i]);
        if (rc != MC_OK) { /* not submitted: its callback will not run */
            r->status = rc;
            pthread_mutex_lock(&b.mu);
            b.pending--;
            pthread_mutex_unlock(&b.mu);
        }
    }
    pthread_mutex_lock(&b.mu);
    b.pending--;
    while (b.pending)
        pthread_cond_wait(&b.cv, &b.mu);
    pthread_mutex_unlock(&b.mu);
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
    free(iov);
    free(w);
}

/* One poll: the tasks, their results. Returns the number of tasks run (0: wait). */
static uint32_t poll_once(mc_store *s, mc_master_offload_tasks *t, mc_master_offload_item *res)
{
    int rc = mc_master_client_offload_heartbeat(s->mc, s->client_id, s->disk_ep,
                                                MC_MASTER_MAX_OFFLOAD_TASKS, t);
    if (rc != MC_OK) {
        if (rc == MC_NOT_SUPPORTED && !atomic_exchange(&s->off_warned, true))
            mc_log(MC_LOG_WARN, TAG,
                   "disk tier %s: the master runs without --enable_offload, so nothing is "
                   "offloaded (asking again every %u ms)",
                   s->disk_path, s->off_interval_ms);
        return 0;
    }
    if (t->fsdir[0]) { /* a --root_fs_dir master: its WRITEs are for the shared directory
                        * (shared_fs.c), not for this disk; setup fails on it */
        free(t->keys);
        t->keys = NULL;
        return 0;
    }
    if (t->fresh)
        register_all(s);
    size_t nres = 0, nw = 0;
    run_writes(s, t, res, &nres);
    for (size_t i = 0; i < nres; i++) {
        nw += res[i].status == MC_OK;
        if (res[i].status != MC_OK)
            mc_log(MC_LOG_DEBUG, TAG, "offload of a %llu-byte object refused: %s",
                   (unsigned long long)res[i].size, mc_strerror(res[i].status));
    }
    atomic_fetch_add(&s->off_writes, nw);
    atomic_fetch_add(&s->off_write_failures, nres - nw);
    for (uint32_t i = 0; i < t->n; i++)
        if (t->items[i].op != MC_MASTER_OFFLOAD_WRITE && run_task(s, &t->items[i], &res[nres]))
            nres++;
    if (nres) {
        rc = mc_master_client_offload_end(s->mc, s->client_id, s->disk_ep, res, nres, NULL);
        if (rc != MC_OK)
            mc_log(MC_LOG_WARN, TAG, "reporting %zu offload result(s) failed: %s", nres,
                   mc_strerror(rc));
    }
    uint32_t n = t->n;
    free(t->keys);
    t->keys = NULL;
    return n;
}

static void *offload_main(void *arg)
{
    mc_store *s = arg;
    mc_master_offload_tasks *t = mc_xmalloc(sizeof *t);
    mc_master_offload_item *res = mc_xmalloc(MC_MASTER_MAX_OFFLOAD_TASKS * sizeof *res);
    pthread_mutex_lock(&s->off_mu);
    while (!s->off_stop) {
        pthread_mutex_unlock(&s->off_mu);
        uint32_t n = poll_once(s, t, res);
        pthread_mutex_lock(&s->off_mu);
        if (n) /* more may be waiting: ask again at once */
            continue;
        struct timespec ts = mc_monotonic_in_ms(s->off_interval_ms);
        while (!s->off_stop && pthread_cond_timedwait(&s->off_cond, &s->off_mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&s->off_mu);
    free(res);
    free(t);
    return NULL;
}

int mc__offload_start(mc_store *s, const mc_store_config *c, uint32_t hb_ms)
{
    const char *env_path = mc_env_str("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
    const char *path = (c->enable_ssd_offload && c->ssd_offload_path && *c->ssd_offload_path)
                           ? c->ssd_offload_path
                           : env_path;
    if (c->enable_ssd_offload && (!path || !*path)) {
        mc_log(MC_LOG_ERROR, TAG, "setup: enable_ssd_offload needs ssd_offload_path (or "
                                  "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)");
        return MC_INVALID_PARAMS;
    }
    if (!path || !*path)
        return MC_OK; /* no disk tier asked for */
    if (!s->seg_base) {
        mc_log(MC_LOG_ERROR, TAG, "setup: a disk tier needs a global segment (objects are "
                                  "offloaded from this client's own memory)");
        return MC_INVALID_PARAMS;
    }
    mc_disk_config dc;
    mc_disk_config_default(&dc);
    dc.enable_eviction = false; /* see the top: the master would not know */
    int rc = mc_disk_config_from_env(&dc);
    if (rc != MC_OK)
        return rc;
    snprintf(s->disk_path, sizeof s->disk_path, "%s", path);
    dc.dir = s->disk_path;
    uint64_t secs = 0, poll_ms;
    if (mc_env_u64("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", 0, 1, 3600, &secs) != 0)
        return MC_INVALID_PARAMS; /* the variable was named in the log */
    poll_ms = secs ? secs * 1000 : (hb_ms < 100 ? hb_ms : 100);
    if (mc_env_u64("MC_OFFLOAD_POLL_MS", poll_ms, 10, 60000, &poll_ms) != 0)
        return MC_INVALID_PARAMS;
    s->off_interval_ms = (uint32_t)poll_ms;
    rc = mc_disk_open(&dc, &s->disk);
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot open the disk tier in %s: %s", s->disk_path,
               mc_strerror(rc));
        s->disk = NULL;
        return rc;
    }
    /* the disk-read server for other clients' reads of our LOCAL_DISK replicas */
    uint16_t port = 0;
    s->disk_lfd = mc_sock_listen_tcp(s->host, 0, 64, false, &port);
    if (s->disk_lfd < 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot listen for disk reads on %s: %s", s->host,
               strerror(-s->disk_lfd));
        s->disk_lfd = -1;
        return MC_INTERNAL_ERROR;
    }
    snprintf(s->disk_ep, sizeof s->disk_ep, strchr(s->host, ':') ? "[%s]:%u" : "%s:%u",
             s->host, (unsigned)port);
    s->off_stop = false;
    if (pthread_create(&s->disk_srv, NULL, disk_srv_main, s) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot start the disk-read server");
        return MC_INTERNAL_ERROR;
    }
    s->disk_srv_started = true;
    if (!mc_auth_enabled(&s->auth))
        mc_auth_warn_open(TAG, "the disk-read server", s->disk_ep,
                          "read every object on this client's disk tier");
    atomic_store(&s->off_warned, false);
    if (pthread_create(&s->off_thread, NULL, offload_main, s) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot start the offload thread");
        return MC_INTERNAL_ERROR;
    }
    s->off_started = true;
    mc_log(MC_LOG_INFO, TAG, "disk tier in %s (polling the master every %u ms, disk reads "
           "served at %s)", s->disk_path, s->off_interval_ms, s->disk_ep);
    return MC_OK;
}

void mc__offload_stop(mc_store *s)
{
    pthread_mutex_lock(&s->off_mu);
    s->off_stop = true;
    pthread_cond_broadcast(&s->off_cond);
    pthread_mutex_unlock(&s->off_mu);
    if (s->off_started)
        pthread_join(s->off_thread, NULL);
    s->off_started = false;
    if (s->disk_srv_started)
        pthread_join(s->disk_srv, NULL);
    s->disk_srv_started = false;
    if (s->disk_lfd >= 0)
        close(s->disk_lfd);
    s->disk_lfd = -1;
    s->disk_ep[0] = '\0';
}

void mc__offload_close(mc_store *s)
{
    if (s->disk) {
        mc_disk_close(s->disk);
        s->disk = NULL;
    }
}
