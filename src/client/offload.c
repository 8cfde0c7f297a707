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
 * never wrong bytes). Another client's LOCAL_DISK replica is not readable from here yet
 * (remote disk reads through the owner: not implemented; such a read misses).
 *
 * Environment: MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, the store's MOONCAKE_OFFLOAD_* knobs
 * (disk.h mc_disk_config_from_env), MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS (poll
 * period, 1..3600 s; default: the store's heartbeat interval) and MC_OFFLOAD_POLL_MS
 * (ours, 10..60000 ms, wins over the former). The disk store's own watermark eviction is
 * off unless MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION=true (the master is not
 * told of what the disk store evicts: such a read then misses). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/internal.h"
#include "common/env.h"
#include "common/xalloc.h"
#include "disk/disk.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

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
            strcmp(r->transport_endpoint, s->name) == 0);
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
        int rc = mc_master_client_offload_end(s->mc, s->client_id, s->name, r.v + i, m, st);
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

/* One poll: the tasks, their results. Returns the number of tasks run (0: wait). */
static uint32_t poll_once(mc_store *s, mc_master_offload_tasks *t, mc_master_offload_item *res)
{
    int rc = mc_master_client_offload_heartbeat(s->mc, s->client_id, s->name,
                                                MC_MASTER_MAX_OFFLOAD_TASKS, t);
    if (rc != MC_OK) {
        if (rc == MC_NOT_SUPPORTED && !atomic_exchange(&s->off_warned, true))
            mc_log(MC_LOG_WARN, TAG,
                   "disk tier %s: the master runs without --enable_offload, so nothing is "
                   "offloaded (asking again every %u ms)",
                   s->disk_path, s->off_interval_ms);
        return 0;
    }
    if (t->fresh)
        register_all(s);
    size_t nres = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if (run_task(s, &t->items[i], &res[nres]))
            nres++;
    if (nres) {
        rc = mc_master_client_offload_end(s->mc, s->client_id, s->name, res, nres, NULL);
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
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)s->off_interval_ms * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
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
    poll_ms = secs ? secs * 1000 : hb_ms;
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
    s->off_stop = false;
    atomic_store(&s->off_warned, false);
    if (pthread_create(&s->off_thread, NULL, offload_main, s) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot start the offload thread");
        return MC_INTERNAL_ERROR;
    }
    s->off_started = true;
    mc_log(MC_LOG_INFO, TAG, "disk tier in %s (polling the master every %u ms)", s->disk_path,
           s->off_interval_ms);
    return MC_OK;
}

void mc__offload_stop(mc_store *s)
{
    if (!s->off_started)
        return;
    pthread_mutex_lock(&s->off_mu);
    s->off_stop = true;
    pthread_cond_broadcast(&s->off_cond);
    pthread_mutex_unlock(&s->off_mu);
    pthread_join(s->off_thread, NULL);
    s->off_started = false;
}

void mc__offload_close(mc_store *s)
{
    if (s->disk) {
        mc_disk_close(s->disk);
        s->disk = NULL;
    }
}
