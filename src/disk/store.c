/* disk/store.c: the disk store (disk/disk.h): configuration, buckets, the index and its
 * recovery on open, puts, gets, deletes, capacity and LRU eviction, metrics.
 *
 * Locking: s->lock guards the index, the LRU, the bucket list and the byte counters
 * (internal.h marks each field). It is never held across a record's I/O; it is held
 * across the cheap file-system calls that change the bucket set (create, truncate a
 * failed tail, unlink) so no append can race them. Counters in s->st are atomics.
 * Threads: puts and gets do their work (copy, checksum, reservation, I/O, verification)
 * on the I/O engine's threads (io.c); the maintenance thread (maint.c) evicts and
 * compacts; callers only validate, look up and queue. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/env.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "disk/internal.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG "disk"
#define BUF_CACHE_MAX_BYTES (256ull << 20)

const uint64_t mc_disk_latency_bounds_us[MC_DISK_LAT_BUCKETS] = {
    50,     100,     200,     500,     1000,    2000,    5000,     10000,    20000,
    50000,  100000,  200000,  500000,  1000000, 2000000, 5000000,  10000000, 30000000};

/* ------------------------------------------------------------------ config */
void mc_disk_config_default(mc_disk_config *c)
{
    memset(c, 0, sizeof *c);
    c->bucket_size_bytes = 256ull << 20;
    c->max_object_bytes = 1ull << 30;
    c->enable_eviction = true;
    c->high_watermark = 0.90;
    c->low_watermark = 0.80;
    c->compact_live_ratio = 0.5;
    c->io = MC_DISK_IO_AUTO;
    c->direct = MC_DISK_DIRECT_AUTO;
    c->io_threads = 4;
    c->queue_depth = 32;
}

int mc_disk_config_from_env(mc_disk_config *c)
{
    const char *p = mc_env_str("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
    if (p)
        c->dir = p;
    bool b;
    int rc = 0;
    rc |= mc_env_size("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", c->capacity_bytes, 0,
                      UINT64_MAX, &c->capacity_bytes);
    rc |= mc_env_u64("MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT", c->max_keys, 0, UINT64_MAX,
                     &c->max_keys);
    rc |= mc_env_size("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", c->bucket_size_bytes,
                      MC_DISK_ALIGN, UINT64_MAX, &c->bucket_size_bytes);
    rc |= mc_env_u64("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", c->bucket_max_keys, 0,
                     UINT64_MAX, &c->bucket_max_keys);
    if (mc_env_bool("MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION", c->enable_eviction,
                    &b) == 0)
        c->enable_eviction = b;
    else
        rc = -1;
    rc |= mc_env_double("MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO",
                        c->high_watermark, 0.0, 1.0, &c->high_watermark);
    rc |= mc_env_double("MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO",
                        c->low_watermark, 0.0, 1.0, &c->low_watermark);
    if (mc_env_str("MOONCAKE_OFFLOAD_USE_URING")) {
        if (mc_env_bool("MOONCAKE_OFFLOAD_USE_URING", false, &b) == 0)
            c->io = b ? MC_DISK_IO_URING : MC_DISK_IO_THREADS;
        else
            rc = -1;
    }
    const char *d = mc_env_str("MC_DISK_DIRECT");
    if (d) {
        if (!strcmp(d, "auto"))
            c->direct = MC_DISK_DIRECT_AUTO;
        else if (!strcmp(d, "on"))
            c->direct = MC_DISK_DIRECT_ON;
        else if (!strcmp(d, "off"))
            c->direct = MC_DISK_DIRECT_OFF;
        else {
            mc_log(MC_LOG_ERROR, "env", "MC_DISK_DIRECT=%s: expected auto, on or off", d);
            rc = -1;
        }
    }
    return rc ? MC_INVALID_PARAMS : MC_OK;
}

static int validate(const mc_disk_config *c)
{
    const char *why = NULL;
    if (!c->dir || !c->dir[0])
        why = "dir is empty";
    else if (c->bucket_size_bytes < MC_DISK_ALIGN)
        why = "bucket_size_bytes < 4096";
    else if (c->max_object_bytes == 0 || c->max_object_bytes > (1ull << 40))
        why = "max_object_bytes not in [1, 1 TiB]";
    else if (!(c->high_watermark > 0 && c->high_watermark <= 1))
        why = "high_watermark not in (0, 1]";
    else if (!(c->low_watermark > 0 && c->low_watermark < c->high_watermark))
        why = "low_watermark not in (0, high_watermark)";
    else if (!(c->compact_live_ratio >= 0 && c->compact_live_ratio < 1))
        why = "compact_live_ratio not in [0, 1)";
    else if (c->io_threads < 1 || c->io_threads > 64)
        why = "io_threads not in [1, 64]";
    else if (c->queue_depth < 1 || c->queue_depth > 4096)
        why = "queue_depth not in [1, 4096]";
    if (why) {
        mc_log(MC_LOG_ERROR, TAG, "mc_disk_open: %s", why);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

/* ------------------------------------------------------------------ staging buffers
 * 4 KiB-aligned (O_DIRECT) buffers, sizes rounded up to 4 KiB (small) or 64 KiB (large);
 * up to BUF_SLOTS freed ones (BUF_CACHE_MAX_BYTES in all) are kept for reuse, so the
 * steady state allocates nothing and takes no page faults. */
#define BUF_SLOTS 32

void *mc__disk_buf_get(mc_disk_store *s, uint64_t size)
{
    uint64_t cap = size <= (64u << 10) ? mc__align_up(size ? size : 1, MC_DISK_ALIGN)
                                       : mc__align_up(size, 64u << 10);
    pthread_mutex_lock(&s->buf_lock);
    int best = -1;
    for (int i = 0; i < s->buf_n; i++) {
        if (s->buf_caps[i] >= cap && s->buf_caps[i] <= 2 * cap &&
            (best < 0 || s->buf_caps[i] < s->buf_caps[best]))
            best = i;
    }
    if (best >= 0) {
        void *p = s->bufs[best];
        s->buf_bytes -= s->buf_caps[best];
        s->buf_n--;
        s->bufs[best] = s->bufs[s->buf_n];
        s->buf_caps[best] = s->buf_caps[s->buf_n];
        pthread_mutex_unlock(&s->buf_lock);
        return p;
    }
    pthread_mutex_unlock(&s->buf_lock);
    void *p = NULL;
    if (posix_memalign(&p, MC_DISK_ALIGN, cap) != 0)
        mc_oom(cap);
    return p;
}

void mc__disk_buf_put(mc_disk_store *s, void *buf, uint64_t size)
{
    if (!buf)
        return;
    uint64_t cap = size <= (64u << 10) ? mc__align_up(size ? size : 1, MC_DISK_ALIGN)
                                       : mc__align_up(size, 64u << 10);
    pthread_mutex_lock(&s->buf_lock);
    if (s->buf_n < BUF_SLOTS && s->buf_bytes + cap <= BUF_CACHE_MAX_BYTES) {
        s->bufs[s->buf_n] = buf;
        s->buf_caps[s->buf_n] = cap;
        s->buf_n++;
        s->buf_bytes += cap;
        buf = NULL;
    }
    pthread_mutex_unlock(&s->buf_lock);
    free(buf);
}

void mc__disk_lat_observe(_Atomic uint64_t *hist, _Atomic uint64_t *count,
                          _Atomic uint64_t *sum, uint64_t us)
{
    int i = 0;
    while (i < MC_DISK_LAT_BUCKETS && us > mc_disk_latency_bounds_us[i])
        i++;
    atomic_fetch_add_explicit(&hist[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(sum, us, memory_order_relaxed);
}

/* ------------------------------------------------------------------ the index */
uint64_t mc__disk_key_hash(const void *key, size_t klen) { return XXH3_64bits(key, klen); }
#define key_hash mc__disk_key_hash

mc__disk_entry *mc__disk_find_locked(mc_disk_store *s, const void *key, size_t klen,
                                     uint64_t hash)
{
    for (mc__disk_entry *e = s->table[hash & (s->tab_size - 1)]; e; e = e->hnext)
        if (e->hash == hash && e->klen == klen && !memcmp(e->key, key, klen))
            return e;
    return NULL;
}

static void tab_grow(mc_disk_store *s)
{
    size_t n = s->tab_size * 2;
    mc__disk_entry **t = mc_xcalloc(n, sizeof *t);
    for (size_t i = 0; i < s->tab_size; i++) {
        for (mc__disk_entry *e = s->table[i], *nx; e; e = nx) {
            nx = e->hnext;
            e->hnext = t[e->hash & (n - 1)];
            t[e->hash & (n - 1)] = e;
        }
    }
    free(s->table);
    s->table = t;
    s->tab_size = n;
}

static mc__disk_entry *index_insert_locked(mc_disk_store *s, const void *key, size_t klen,
                                           uint64_t hash, mc__disk_bucket *b, uint64_t off,
                                           uint64_t foot, uint64_t vlen, uint64_t seq)
{
    if (s->nentries + 1 > s->tab_size)
        tab_grow(s);
    mc__disk_entry *e = mc_xmalloc(sizeof *e + klen);
    e->hash = hash;
    e->klen = (uint32_t)klen;
    memcpy(e->key, key, klen);
    e->bucket = b;
    e->off = off;
    e->foot = foot;
    e->vlen = vlen;
    e->seq = seq;
    size_t slot = hash & (s->tab_size - 1);
    e->hnext = s->table[slot];
    s->table[slot] = e;
    mc_list_init(&e->lru);
    mc_list_push_back(&s->lru, &e->lru);
    mc_list_init(&e->blink);
    mc_list_push_back(&b->entries, &e->blink);
    b->live_bytes += foot;
    b->live_count++;
    s->live_bytes += foot;
    s->nentries++;
    return e;
}

/* moves e to a new location (the old one stops counting as live) */
static void entry_move_locked(mc_disk_store *s, mc__disk_entry *e, mc__disk_bucket *nb,
                              uint64_t noff, uint64_t foot, uint64_t vlen, uint64_t seq)
{
    mc__disk_bucket *ob = e->bucket;
    ob->live_bytes -= e->foot;
    ob->live_count--;
    s->live_bytes -= e->foot;
    mc_list_remove(&e->blink);
    if (ob->sealed && ob->live_count == 0)
        mc__disk_maint_kick_locked(s);
    e->bucket = nb;
    e->off = noff;
    e->foot = foot;
    e->vlen = vlen;
    e->seq = seq;
    mc_list_push_back(&nb->entries, &e->blink);
    nb->live_bytes += foot;
    nb->live_count++;
    s->live_bytes += foot;
}

void mc__disk_unindex_locked(mc_disk_store *s, mc__disk_entry *e)
{
    mc__disk_entry **pp = &s->table[e->hash & (s->tab_size - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    mc_list_remove(&e->lru);
    mc_list_remove(&e->blink);
    mc__disk_bucket *b = e->bucket;
    b->live_bytes -= e->foot;
    b->live_count--;
    s->live_bytes -= e->foot;
    s->nentries--;
    if (b->live_count == 0)
        mc__disk_maint_kick_locked(s);
    free(e);
}

/* ------------------------------------------------------------------ buckets */
static void bucket_name(char *out, size_t n, uint64_t id)
{
    snprintf(out, n, "bucket-%016" PRIx64 ".mcd", id);
}

static void bucket_free(mc__disk_bucket *b)
{
    if (b->bfd >= 0 && b->bfd != b->fd)
        close(b->bfd);
    if (b->fd >= 0)
        close(b->fd);
    free(b);
}

void mc__disk_bucket_unref_locked(mc_disk_store *s, mc__disk_bucket *b)
{
    (void)s;
    MC_ASSERT(b->refs > 0);
    if (--b->refs == 0) {
        MC_ASSERT(b->removed);
        bucket_free(b);
    }
}

void mc__disk_write_done_locked(mc_disk_store *s, mc__disk_bucket *b)
{
    MC_ASSERT(b->writes > 0);
    b->writes--;
    if (b->sealed && b->writes == 0)
        mc__disk_maint_kick_locked(s);
    mc__disk_bucket_unref_locked(s, b);
}

/* opens bucket id (creating it when create); NULL with errno on failure */
static mc__disk_bucket *bucket_open(mc_disk_store *s, uint64_t id, bool create)
{
    char name[64];
    bucket_name(name, sizeof name, id);
    int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    int fd = openat(s->dirfd, name, flags | (s->direct ? O_DIRECT : 0), 0644);
    if (fd < 0)
        return NULL;
    int bfd = fd;
    if (s->direct) {
        bfd = openat(s->dirfd, name, O_RDWR | O_CLOEXEC);
        if (bfd < 0) {
            int e = errno;
            close(fd);
            errno = e;
            return NULL;
        }
    }
    if (create)
        fsync(s->dirfd); /* the new name survives a crash with the records in it */
    mc__disk_bucket *b = mc_xcalloc(1, sizeof *b);
    b->id = id;
    b->fd = fd;
    b->bfd = bfd;
    b->refs = 1;
    mc_list_init(&b->link);
    mc_list_init(&b->entries);
    return b;
}

/* bytes of the disk a bucket takes: its records, or its preallocation if larger */
static uint64_t bucket_used(const mc__disk_bucket *b)
{
    return b->size > b->alloc ? b->size : b->alloc;
}

static void bucket_add_locked(mc_disk_store *s, mc__disk_bucket *b)
{
    mc_list_push_back(&s->buckets, &b->link);
    s->nbuckets++;
    s->used_bytes += bucket_used(b);
}

/* gives back the preallocated tail of an idle bucket (no write in flight: a truncate
 * would wait for it) */
static void bucket_trim_locked(mc_disk_store *s, mc__disk_bucket *b)
{
    if (b->alloc <= b->size || b->writes)
        return;
    uint64_t before = bucket_used(b);
    if (ftruncate(b->bfd, (off_t)b->size) != 0) {
        mc_log(MC_LOG_WARN, TAG, "%s: trimming bucket %" PRIx64 ": %s", s->dir, b->id,
               strerror(errno));
        return;
    }
    b->alloc = 0;
    s->used_bytes -= before - bucket_used(b);
}

static void bucket_seal_locked(mc_disk_store *s, mc__disk_bucket *b)
{
    b->sealed = true;
    if (s->active == b)
        s->active = NULL;
    bucket_trim_locked(s, b);
    mc__disk_maint_kick_locked(s);
}

/* preallocates b up to `want` bytes (best effort: a file system without fallocate, or
 * ENOSPC, leaves appends extending the file). Returns 0 or -errno. */
static int bucket_prealloc_locked(mc_disk_store *s, mc__disk_bucket *b, uint64_t want)
{
    uint64_t have = bucket_used(b);
    if (want <= have || s->no_fallocate)
        return 0;
    if (fallocate(b->fd, 0, (off_t)have, (off_t)(want - have)) != 0) {
        int e = errno;
        if (e == EOPNOTSUPP || e == ENOSYS)
            s->no_fallocate = true;
        return -e;
    }
    b->alloc = want;
    s->used_bytes += want - have;
    return 0;
}

void mc__disk_remove_bucket_locked(mc_disk_store *s, mc__disk_bucket *b)
{
    MC_ASSERT(b->live_count == 0 && b->writes == 0 && !b->removed);
    char name[64];
    bucket_name(name, sizeof name, b->id);
    if (unlinkat(s->dirfd, name, 0) != 0)
        mc_log(MC_LOG_WARN, TAG, "unlink %s/%s: %s", s->dir, name, strerror(errno));
    if (s->active == b)
        s->active = NULL;
    b->sealed = true;
    b->removed = true;
    mc_list_remove(&b->link);
    s->nbuckets--;
    s->used_bytes -= bucket_used(b);
    atomic_fetch_add(&s->st.reclaimed_bytes, bucket_used(b));
    mc__disk_bucket_unref_locked(s, b);
}

int mc__disk_reclaim_locked(mc_disk_store *s)
{
    int n = 0;
    mc__disk_bucket *b;
    MC_LIST_FOREACH_ENTRY(b, &s->buckets, mc__disk_bucket, link)
    {
        if (b->live_count == 0 && b->writes == 0 && !b->compacting &&
            (b->sealed || (s->cfg.capacity_bytes && b->size > 0))) {
            /* an empty active bucket goes too under a capacity: its space is needed */
            mc__disk_remove_bucket_locked(s, b);
            n++;
        } else if (b->sealed) {
            bucket_trim_locked(s, b);
        }
    }
    return n;
}

void mc__disk_mark_dead(mc_disk_store *s, mc__disk_bucket *b, uint64_t off)
{
    uint32_t dead = MC__REC_DEAD;
    if (pwrite(b->bfd, &dead, sizeof dead, (off_t)off) != (ssize_t)sizeof dead)
        mc_log(MC_LOG_WARN, TAG, "%s: marking the record at %" PRIu64 " of bucket %" PRIx64
               " dead failed: %s", s->dir, off, b->id, strerror(errno));
}

size_t mc__disk_evict_locked(mc_disk_store *s, uint64_t target_live, mc__disk_victim **out)
{
    size_t n = 0, cap = 0;
    mc__disk_victim *v = NULL;
    while (s->live_bytes > target_live && !mc_list_empty(&s->lru)) {
        mc__disk_entry *e = MC_CONTAINER_OF(mc_list_front(&s->lru), mc__disk_entry, lru);
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            v = mc_xrealloc(v, cap * sizeof *v);
        }
        v[n].b = e->bucket;
        v[n].off = e->off;
        e->bucket->refs++;
        n++;
        atomic_fetch_add(&s->st.evictions, 1);
        atomic_fetch_add(&s->st.evicted_bytes, e->vlen);
        mc__disk_unindex_locked(s, e);
    }
    *out = v;
    return n;
}

void mc__disk_flush_victims(mc_disk_store *s, mc__disk_victim *v, size_t n)
{
    if (!n) {
        free(v);
        return;
    }
    /* (a bucket removed meanwhile is unlinked but still open: the mark is harmless) */
    for (size_t i = 0; i < n; i++)
        mc__disk_mark_dead(s, v[i].b, v[i].off);
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < n; i++)
        mc__disk_bucket_unref_locked(s, v[i].b);
    pthread_mutex_unlock(&s->lock);
    free(v);
}

static uint64_t bucket_limit(const mc_disk_store *s)
{
    uint64_t lim = s->cfg.bucket_size_bytes;
    /* under a capacity, buckets are a small fraction of it, so that evicting the oldest
     * objects empties (and frees) whole buckets */
    if (s->cfg.capacity_bytes && lim > s->cfg.capacity_bytes / 8)
        lim = mc__align_up(s->cfg.capacity_bytes / 8, MC_DISK_ALIGN);
    return lim ? lim : MC_DISK_ALIGN;
}

/* how much a bucket to be made may preallocate (at least need) */
static uint64_t prealloc_size(const mc_disk_store *s, uint64_t need)
{
    uint64_t want = bucket_limit(s);
    if (s->cfg.capacity_bytes) {
        uint64_t cap = s->cfg.capacity_bytes;
        uint64_t room = cap > s->used_bytes ? cap - s->used_bytes : 0;
        if (want > room)
            want = room;
    }
    return want > need ? want : need;
}

/* the bytes a reservation of foot in b (NULL: a new bucket) adds to used_bytes */
static uint64_t growth(const mc__disk_bucket *b, uint64_t foot)
{
    if (!b)
        return foot;
    uint64_t end = b->size + foot, used = bucket_used(b);
    return end > used ? end - used : 0;
}

static bool over_cap(const mc_disk_store *s, uint64_t grow)
{
    return s->cfg.capacity_bytes && s->used_bytes + grow > s->cfg.capacity_bytes;
}

mc__disk_bucket *mc__disk_reserve_locked(mc_disk_store *s, uint64_t foot, uint64_t *off,
                                         int *status)
{
    *status = MC_OK;
    uint64_t lim = bucket_limit(s);
    mc__disk_bucket *b = s->active;
    if (b && (b->sealed || (b->size > 0 && b->size + foot > lim) ||
              (s->cfg.bucket_max_keys && b->nrecords >= s->cfg.bucket_max_keys))) {
        bucket_seal_locked(s, b);
        b = NULL;
    }
    if (over_cap(s, growth(b, foot))) {
        mc__disk_reclaim_locked(s);
        b = s->active;
    }
    if (over_cap(s, growth(b, foot))) {
        mc__disk_maint_kick_locked(s);
        *status = MC_NO_AVAILABLE_HANDLE;
        return NULL;
    }
    if (!b) {
        b = bucket_open(s, s->next_bucket_id, true);
        if (!b) {
            int e = errno;
            mc_log(MC_LOG_WARN, TAG, "%s: creating bucket %" PRIx64 " failed: %s", s->dir,
                   s->next_bucket_id, strerror(e));
            s->next_bucket_id++; /* a stray file of that name must not block us forever */
            *status = (e == ENOSPC || e == EDQUOT) ? MC_NO_AVAILABLE_HANDLE : MC_FILE_OPEN_FAIL;
            return NULL;
        }
        s->next_bucket_id++;
        bucket_add_locked(s, b);
        s->active = b;
        /* preallocated, so that appends do not extend the file: ext4 serialises O_DIRECT
         * writes that extend a file; inside the allocation they run in parallel */
        int e = bucket_prealloc_locked(s, b, prealloc_size(s, foot));
        if (e == -ENOSPC || e == -EDQUOT)
            e = bucket_prealloc_locked(s, b, foot);
        if (e == -ENOSPC || e == -EDQUOT) {
            *status = MC_NO_AVAILABLE_HANDLE; /* refused before anything was written */
            return NULL;
        }
    }
    *off = b->size;
    uint64_t before = bucket_used(b);
    b->size += foot;
    s->used_bytes += bucket_used(b) - before;
    b->nrecords++;
    b->writes++;
    b->refs++;
    if (s->cfg.capacity_bytes && s->cfg.enable_eviction &&
        (double)s->used_bytes > s->cfg.high_watermark * (double)s->cfg.capacity_bytes)
        mc__disk_maint_kick_locked(s);
    return b;
}

/* A failed append: the reserved range is garbage. At the tail it is given back (the part
 * past the preallocation is cut off, under the lock, so no new reservation can be behind
 * it); otherwise its magic is killed so the scan on open skips it. */
bool mc__disk_append_failed_locked(mc_disk_store *s, mc__disk_bucket *b, uint64_t off,
                                   uint64_t foot)
{
    if (b->size != off + foot)
        return true;
    if (off + foot > b->alloc) {
        uint64_t cut = off > b->alloc ? off : b->alloc;
        if (ftruncate(b->bfd, (off_t)cut) != 0)
            return true;
    }
    uint64_t before = bucket_used(b);
    b->size = off;
    b->nrecords--;
    s->used_bytes -= before - bucket_used(b);
    return false;
}

/* ------------------------------------------------------------------ requests */
typedef struct disk_req {
    mc__disk_op op;
    mc_disk_store *s;
    mc_disk_cb cb;
    void *ctx;
    uint64_t t0_us;
    struct iovec *iov;   /* put: the caller's vectors (copied array) */
    int iovcnt;
    void *dest;          /* get */
    mc__disk_bucket *b;
    uint64_t off, foot, vlen, seq, hash;
    void *buf;
    uint32_t klen;
    char key[];
} disk_req;

static disk_req *req_new(mc_disk_store *s, const void *key, size_t klen, mc_disk_cb cb,
                         void *ctx)
{
    disk_req *r = mc_xcalloc(1, sizeof *r + klen);
    r->s = s;
    r->cb = cb;
    r->ctx = ctx;
    r->klen = (uint32_t)klen;
    memcpy(r->key, key, klen);
    r->hash = key_hash(key, klen);
    r->t0_us = mc_now_us();
    return r;
}

static void req_finish(disk_req *r, int status, uint64_t size)
{
    mc_disk_store *s = r->s;
    mc__disk_buf_put(s, r->buf, r->foot);
    r->buf = NULL;
    if (r->cb)
        r->cb(r->ctx, status, size);
    free(r->iov);
    free(r);
    pthread_mutex_lock(&s->lock);
    if (--s->inflight == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
}

static bool accept_locked(mc_disk_store *s)
{
    if (s->closing)
        return false;
    s->inflight++;
    return true;
}

static bool key_ok(const void *key, size_t klen)
{
    return key && klen >= 1 && klen <= MC_DISK_MAX_KEY_LEN;
}

/* put: start = copy + checksum + reservation; done = index update */
static bool put_start(mc__disk_op *op)
{
    disk_req *r = MC_CONTAINER_OF(op, disk_req, op);
    mc_disk_store *s = r->s;
    r->foot = mc__rec_foot(r->klen, r->vlen);
    r->buf = mc__disk_buf_get(s, r->foot);
    unsigned char *p = r->buf;
    memcpy(p + MC__REC_HDR, r->key, r->klen);
    uint64_t at = MC__REC_HDR + r->klen;
    for (int i = 0; i < r->iovcnt; i++) {
        memcpy(p + at, r->iov[i].iov_base, r->iov[i].iov_len);
        at += r->iov[i].iov_len;
    }
    memset(p + at, 0, r->foot - at);
    mc__rec_hdr h = {.magic = MC__REC_LIVE, .version = MC__REC_VERSION,
                     .key_len = r->klen, .value_len = r->vlen};
    h.checksum = mc__rec_checksum(p + MC__REC_HDR, r->klen, p + MC__REC_HDR + r->klen, r->vlen);

    int status = MC_OK;
    mc__disk_victim *vic = NULL;
    size_t nvic = 0;
    pthread_mutex_lock(&s->lock);
    if (s->cfg.max_keys && s->nentries + s->pending_puts >= s->cfg.max_keys) {
        if (s->cfg.enable_eviction && s->nentries > 0) {
            /* the least recently used object makes room for this one */
            mc__disk_entry *e = MC_CONTAINER_OF(mc_list_front(&s->lru), mc__disk_entry, lru);
            nvic = mc__disk_evict_locked(s, s->live_bytes - e->foot, &vic);
        }
        if (s->nentries + s->pending_puts >= s->cfg.max_keys)
            status = MC_KEYS_ULTRA_LIMIT;
    }
    mc__disk_bucket *b = NULL;
    if (status == MC_OK) {
        b = mc__disk_reserve_locked(s, r->foot, &r->off, &status);
        if (!b && status == MC_NO_AVAILABLE_HANDLE && s->cfg.enable_eviction &&
            s->cfg.capacity_bytes) {
            /* evict the least recently used objects down to the low watermark; whole
             * buckets that empty are freed at once, the rest waits for compaction */
            uint64_t low = (uint64_t)(s->cfg.low_watermark * (double)s->cfg.capacity_bytes);
            uint64_t target = low > r->foot ? low - r->foot : 0;
            mc__disk_victim *more = NULL;
            size_t nmore = mc__disk_evict_locked(s, target, &more);
            if (nmore) {
                vic = mc_xrealloc(vic, (nvic + nmore) * sizeof *vic);
                memcpy(vic + nvic, more, nmore * sizeof *more);
                nvic += nmore;
            }
            free(more);
            b = mc__disk_reserve_locked(s, r->foot, &r->off, &status);
        }
    }
    if (b) {
        r->b = b;
        r->seq = ++s->seq;
        s->pending_puts++;
    }
    pthread_mutex_unlock(&s->lock);
    mc__disk_flush_victims(s, vic, nvic);
    if (!b) {
        atomic_fetch_add(&s->st.write_failures, 1);
        if (status == MC_NO_AVAILABLE_HANDLE)
            atomic_fetch_add(&s->st.full_refusals, 1);
        req_finish(r, status, 0);
        return false;
    }
    h.seq = r->seq;
    mc__rec_encode(&h, r->key, p);
    op->fd = b->fd;
    op->write = true;
    op->buf = r->buf;
    op->len = r->foot;
    op->off = r->off;
    return true;
}

static void put_done(mc__disk_op *op, int64_t res)
{
    disk_req *r = MC_CONTAINER_OF(op, disk_req, op);
    mc_disk_store *s = r->s;
    mc__disk_bucket *b = r->b, *dead_b = NULL;
    uint64_t dead_off = 0;
    int status = MC_OK;
    pthread_mutex_lock(&s->lock);
    s->pending_puts--;
    if (res != (int64_t)r->foot) {
        bool full = res == -ENOSPC || res == -EDQUOT;
        status = full ? MC_NO_AVAILABLE_HANDLE : MC_FILE_WRITE_FAIL;
        if (mc__disk_append_failed_locked(s, b, r->off, r->foot)) {
            dead_b = b;
            dead_off = r->off;
            b->refs++;
        }
    } else {
        mc__disk_entry *e = mc__disk_find_locked(s, r->key, r->klen, r->hash);
        if (e && e->seq > r->seq) {
            dead_b = b; /* a newer put of the key landed first: this record is stale */
            dead_off = r->off;
            b->refs++;
        } else if (e) {
            dead_b = e->bucket;
            dead_off = e->off;
            dead_b->refs++;
            entry_move_locked(s, e, b, r->off, r->foot, r->vlen, r->seq);
            mc_list_move_back(&s->lru, &e->lru);
        } else {
            index_insert_locked(s, r->key, r->klen, r->hash, b, r->off, r->foot, r->vlen,
                                r->seq);
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (dead_b)
        mc__disk_mark_dead(s, dead_b, dead_off);
    pthread_mutex_lock(&s->lock);
    if (dead_b)
        mc__disk_bucket_unref_locked(s, dead_b);
    mc__disk_write_done_locked(s, b);
    pthread_mutex_unlock(&s->lock);
    if (status == MC_OK) {
        atomic_fetch_add(&s->st.write_ops, 1);
        atomic_fetch_add(&s->st.write_bytes, r->vlen);
        mc__disk_lat_observe(s->st.wlat, &s->st.wlat_count, &s->st.wlat_sum,
                             mc_now_us() - r->t0_us);
    } else {
        atomic_fetch_add(&s->st.write_failures, 1);
        if (status == MC_NO_AVAILABLE_HANDLE)
            atomic_fetch_add(&s->st.full_refusals, 1);
        else
            mc_log(MC_LOG_WARN, TAG, "%s: writing bucket %" PRIx64 " failed: %s", s->dir,
                   b->id, res < 0 ? strerror((int)-res) : "short write");
    }
    req_finish(r, status, status == MC_OK ? r->vlen : 0);
}

int mc_disk_put_async(mc_disk_store *s, const void *key, size_t klen,
                      const struct iovec *iov, int iovcnt, mc_disk_cb cb, void *ctx)
{
    if (!s || !key_ok(key, klen) || iovcnt < 0 || iovcnt > MC_DISK_MAX_IOV ||
        (iovcnt > 0 && !iov))
        return MC_INVALID_PARAMS;
    uint64_t vlen = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len && !iov[i].iov_base)
            return MC_INVALID_PARAMS;
        vlen += iov[i].iov_len;
        if (vlen > s->cfg.max_object_bytes)
            return MC_INVALID_PARAMS;
    }
    disk_req *r = req_new(s, key, klen, cb, ctx);
    r->vlen = vlen;
    r->iovcnt = iovcnt;
    if (iovcnt) {
        r->iov = mc_xmalloc((size_t)iovcnt * sizeof *iov);
        memcpy(r->iov, iov, (size_t)iovcnt * sizeof *iov);
    }
    r->op.start = put_start;
    r->op.done = put_done;
    pthread_mutex_lock(&s->lock);
    bool ok = accept_locked(s);
    pthread_mutex_unlock(&s->lock);
    if (!ok) {
        free(r->iov);
        free(r);
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    mc__disk_io_submit(s->io, &r->op);
    return MC_OK;
}

/* get: start = staging buffer; done = verify + copy */
static bool get_start(mc__disk_op *op)
{
    disk_req *r = MC_CONTAINER_OF(op, disk_req, op);
    r->buf = mc__disk_buf_get(r->s, r->foot);
    op->fd = r->b->fd;
    op->write = false;
    op->buf = r->buf;
    op->len = r->foot;
    op->off = r->off;
    return true;
}

static bool record_ok(const disk_req *r, const unsigned char *p)
{
    mc__rec_hdr h;
    if (mc__rec_decode(p, &h, UINT64_MAX) != 0)
        return false;
    if (h.key_len != r->klen || h.value_len != r->vlen || h.seq != r->seq)
        return false;
    if (memcmp(p + MC__REC_HDR, r->key, r->klen) != 0 || !mc__rec_hdr_ok(&h, r->key))
        return false;
    return mc__rec_checksum(r->key, r->klen, p + MC__REC_HDR + r->klen, r->vlen) == h.checksum;
}

static void get_done(mc__disk_op *op, int64_t res)
{
    disk_req *r = MC_CONTAINER_OF(op, disk_req, op);
    mc_disk_store *s = r->s;
    int status = MC_OK;
    if (res < 0 && res != -EBADMSG) {
        status = MC_FILE_READ_FAIL;
        mc_log(MC_LOG_WARN, TAG, "%s: reading bucket %" PRIx64 " failed: %s", s->dir,
               r->b->id, strerror((int)-res));
    } else if (res != (int64_t)r->foot || !record_ok(r, r->buf)) {
        status = MC_CHECKSUM_MISMATCH;
    }
    bool drop = false;
    if (status == MC_CHECKSUM_MISMATCH) {
        atomic_fetch_add(&s->st.checksum_failures, 1);
        pthread_mutex_lock(&s->lock);
        mc__disk_entry *e = mc__disk_find_locked(s, r->key, r->klen, r->hash);
        if (e && e->bucket == r->b && e->off == r->off) {
            mc__disk_unindex_locked(s, e);
            drop = true;
        }
        pthread_mutex_unlock(&s->lock);
        if (drop)
            mc__disk_mark_dead(s, r->b, r->off);
        mc_log(MC_LOG_WARN, TAG, "%s: record at %" PRIu64 " of bucket %" PRIx64
               " does not verify: dropped", s->dir, r->off, r->b->id);
    } else if (status == MC_OK) {
        memcpy(r->dest, (unsigned char *)r->buf + MC__REC_HDR + r->klen, r->vlen);
        atomic_fetch_add(&s->st.read_ops, 1);
        atomic_fetch_add(&s->st.read_bytes, r->vlen);
        mc__disk_lat_observe(s->st.rlat, &s->st.rlat_count, &s->st.rlat_sum,
                             mc_now_us() - r->t0_us);
    }
    if (status != MC_OK)
        atomic_fetch_add(&s->st.read_failures, 1);
    pthread_mutex_lock(&s->lock);
    mc__disk_bucket_unref_locked(s, r->b);
    pthread_mutex_unlock(&s->lock);
    req_finish(r, status, status == MC_OK ? r->vlen : 0);
}

int mc_disk_get_async(mc_disk_store *s, const void *key, size_t klen, void *dest,
                      uint64_t cap, mc_disk_cb cb, void *ctx)
{
    if (!s || !key_ok(key, klen) || (!dest && cap))
        return MC_INVALID_PARAMS;
    uint64_t hash = key_hash(key, klen);
    pthread_mutex_lock(&s->lock);
    if (s->closing) {
        pthread_mutex_unlock(&s->lock);
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    mc__disk_entry *e = mc__disk_find_locked(s, key, klen, hash);
    if (!e) {
        pthread_mutex_unlock(&s->lock);
        return MC_OBJECT_NOT_FOUND;
    }
    if (cap < e->vlen) {
        pthread_mutex_unlock(&s->lock);
        return MC_BUFFER_OVERFLOW;
    }
    disk_req *r = req_new(s, key, klen, cb, ctx);
    r->dest = dest;
    r->b = e->bucket;
    r->b->refs++;
    r->off = e->off;
    r->foot = e->foot;
    r->vlen = e->vlen;
    r->seq = e->seq;
    mc_list_move_back(&s->lru, &e->lru);
    accept_locked(s);
    pthread_mutex_unlock(&s->lock);
    r->op.start = get_start;
    r->op.done = get_done;
    get_start(&r->op); /* a staging buffer: no I/O, so on the caller's thread */
    mc__disk_io_submit_started(s->io, &r->op);
    return MC_OK;
}

/* ------------------------------------------------------------------ sync wrappers */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int status;
    uint64_t size;
} waiter;

static void waiter_cb(void *ctx, int status, uint64_t size)
{
    waiter *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->size = size;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int waiter_wait(waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return w->status;
}

#define WAITER_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0}

int mc_disk_putv(mc_disk_store *s, const void *key, size_t klen, const struct iovec *iov,
                 int iovcnt)
{
    waiter w = WAITER_INIT;
    int rc = mc_disk_put_async(s, key, klen, iov, iovcnt, waiter_cb, &w);
    if (rc != MC_OK)
        return rc;
    return waiter_wait(&w);
}

int mc_disk_put(mc_disk_store *s, const void *key, size_t klen, const void *value,
                uint64_t vlen)
{
    struct iovec v = {.iov_base = (void *)value, .iov_len = vlen};
    return mc_disk_putv(s, key, klen, &v, vlen ? 1 : 0);
}

int mc_disk_get(mc_disk_store *s, const void *key, size_t klen, void *dest, uint64_t cap,
                uint64_t *size)
{
    waiter w = WAITER_INIT;
    int rc = mc_disk_get_async(s, key, klen, dest, cap, waiter_cb, &w);
    if (rc != MC_OK)
        return rc;
    rc = waiter_wait(&w);
    if (size)
        *size = w.size;
    return rc;
}

/* ------------------------------------------------------------------ index-only calls */
int mc_disk_lookup(mc_disk_store *s, const void *key, size_t klen, uint64_t *size)
{
    if (!s || !key_ok(key, klen))
        return MC_INVALID_PARAMS;
    uint64_t hash = key_hash(key, klen);
    pthread_mutex_lock(&s->lock);
    mc__disk_entry *e = mc__disk_find_locked(s, key, klen, hash);
    if (e && size)
        *size = e->vlen;
    pthread_mutex_unlock(&s->lock);
    return e ? MC_OK : MC_OBJECT_NOT_FOUND;
}

typedef struct mark_req {
    mc__disk_op op;
    mc_disk_store *s;
    mc__disk_bucket *b;
    uint64_t off;
} mark_req;

static bool mark_start(mc__disk_op *op)
{
    mark_req *m = MC_CONTAINER_OF(op, mark_req, op);
    mc_disk_store *s = m->s;
    mc__disk_mark_dead(s, m->b, m->off); /* (harmless if the bucket went meanwhile) */
    pthread_mutex_lock(&s->lock);
    mc__disk_bucket_unref_locked(s, m->b);
    if (--s->inflight == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    free(m);
    return false;
}

int mc_disk_delete(mc_disk_store *s, const void *key, size_t klen)
{
    if (!s || !key_ok(key, klen))
        return MC_INVALID_PARAMS;
    uint64_t hash = key_hash(key, klen);
    pthread_mutex_lock(&s->lock);
    mc__disk_entry *e = mc__disk_find_locked(s, key, klen, hash);
    if (!e) {
        pthread_mutex_unlock(&s->lock);
        return MC_OBJECT_NOT_FOUND;
    }
    mark_req *m = mc_xcalloc(1, sizeof *m);
    m->s = s;
    m->b = e->bucket;
    m->off = e->off;
    m->b->refs++;
    s->inflight++; /* close waits for the mark too */
    mc__disk_unindex_locked(s, e);
    pthread_mutex_unlock(&s->lock);
    m->op.start = mark_start;
    mc__disk_io_submit(s->io, &m->op);
    return MC_OK;
}

size_t mc_disk_foreach(mc_disk_store *s,
                       bool (*fn)(const void *key, size_t klen, uint64_t size, void *ctx),
                       void *ctx)
{
    size_t n = 0;
    if (!s || !fn)
        return 0;
    pthread_mutex_lock(&s->lock);
    mc__disk_entry *e;
    MC_LIST_FOREACH_ENTRY(e, &s->lru, mc__disk_entry, lru)
    {
        n++;
        if (!fn(e->key, e->klen, e->vlen, ctx))
            break;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* ------------------------------------------------------------------ recovery */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_entry_seq(const void *a, const void *b)
{
    const mc__disk_entry *x = *(mc__disk_entry *const *)a, *y = *(mc__disk_entry *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int64_t pread_full(int fd, void *buf, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        done += (uint64_t)r;
    }
    return (int64_t)done;
}

/* Scans bucket b (fsize bytes): indexes its live records, skips and counts bad ones,
 * cuts a torn tail. verify: read each live record whole and check its xxhash. */
static int scan_bucket(mc_disk_store *s, mc__disk_bucket *b, uint64_t fsize, bool verify)
{
    unsigned char *hb = mc__disk_buf_get(s, 2 * MC_DISK_ALIGN);
    uint64_t off = 0, good_end = 0;
    bool bad_run = false, garbage = false; /* garbage: something unreadable after good_end */
    int rc = MC_OK;
    static const unsigned char zeros[MC__REC_HDR];
    while (off + MC__REC_HDR <= fsize) {
        uint64_t want = fsize - off < 2 * MC_DISK_ALIGN ? fsize - off : 2 * MC_DISK_ALIGN;
        int64_t n = pread_full(b->bfd, hb, want, off);
        if (n < 0) {
            mc_log(MC_LOG_ERROR, TAG, "%s: scanning bucket %" PRIx64 ": %s", s->dir, b->id,
                   strerror((int)-n));
            rc = MC_FILE_READ_FAIL;
            break;
        }
        if (n >= MC__REC_HDR && !memcmp(hb, zeros, MC__REC_HDR)) {
            /* never written: a preallocated tail (or a hole a crash left before a record
             * that did land): skip to the next data without counting anything */
            off_t next = lseek(b->bfd, (off_t)(off + MC_DISK_ALIGN), SEEK_DATA);
            if (next < 0)
                break; /* ENXIO: no data up to the end */
            uint64_t nx = (uint64_t)next / MC_DISK_ALIGN * MC_DISK_ALIGN;
            off = nx > off + MC_DISK_ALIGN ? nx : off + MC_DISK_ALIGN;
            bad_run = false;
            continue;
        }
        mc__rec_hdr h;
        bool hdr_valid =
            n >= MC__REC_HDR && mc__rec_decode(hb, &h, s->cfg.max_object_bytes) == 0;
        uint64_t foot = hdr_valid ? mc__rec_foot(h.key_len, h.value_len) : 0;
        if (hdr_valid && (off + foot > fsize || (uint64_t)n < MC__REC_HDR + h.key_len)) {
            garbage = true;
            break; /* the record runs past the end of the file: a torn tail */
        }
        if (hdr_valid && !mc__rec_hdr_ok(&h, hb + MC__REC_HDR))
            hdr_valid = false;
        if (!hdr_valid) {
            /* not a record header: skip to the next 4 KiB boundary (records start on one) */
            if (!bad_run)
                atomic_fetch_add(&s->st.corrupt_skipped, 1);
            bad_run = true;
            garbage = true;
            off += MC_DISK_ALIGN;
            continue;
        }
        bad_run = false;
        b->nrecords++;
        if (h.magic == MC__REC_DEAD) {
            off += foot;
            good_end = off;
            garbage = false;
            continue;
        }
        char key[MC_DISK_MAX_KEY_LEN];
        memcpy(key, hb + MC__REC_HDR, h.key_len);
        if (verify) {
            unsigned char *rb = mc__disk_buf_get(s, foot);
            int64_t got = pread_full(b->fd, rb, foot, off);
            bool ok = got == (int64_t)foot &&
                      mc__rec_checksum(key, h.key_len, rb + MC__REC_HDR + h.key_len,
                                       h.value_len) == h.checksum;
            mc__disk_buf_put(s, rb, foot);
            if (!ok) {
                atomic_fetch_add(&s->st.checksum_failures, 1);
                mc__disk_mark_dead(s, b, off);
                off += foot;
                garbage = true;
                continue; /* not good_end: a bad record at the tail is cut off below */
            }
        }
        uint64_t hash = key_hash(key, h.key_len);
        mc__disk_entry *e = mc__disk_find_locked(s, key, h.key_len, hash);
        if (e && e->seq >= h.seq) {
            mc__disk_mark_dead(s, b, off); /* an older copy of the key */
        } else if (e) {
            mc__disk_mark_dead(s, e->bucket, e->off);
            entry_move_locked(s, e, b, off, foot, h.value_len, h.seq);
        } else {
            index_insert_locked(s, key, h.key_len, hash, b, off, foot, h.value_len, h.seq);
        }
        if (h.seq > s->seq)
            s->seq = h.seq;
        off += foot;
        good_end = off;
        garbage = false;
    }
    if (rc == MC_OK && !garbage && off < fsize && fsize - off < MC__REC_HDR) {
        /* a few bytes at the very end: a header cut short, unless they are zeros */
        int64_t n = pread_full(b->bfd, hb, fsize - off, off);
        garbage = n < 0 || memcmp(hb, zeros, (size_t)n) != 0;
    }
    mc__disk_buf_put(s, hb, 2 * MC_DISK_ALIGN);
    if (rc == MC_OK && good_end < fsize) {
        /* a torn or unreadable tail is counted; a never-written (zero) one is not */
        if (garbage) {
            mc_log(MC_LOG_WARN, TAG, "%s: bucket %" PRIx64 ": cutting %" PRIu64
                   " bytes of torn or unreadable tail at %" PRIu64, s->dir, b->id,
                   fsize - good_end, good_end);
            atomic_fetch_add(&s->st.torn_truncations, 1);
        }
        if (ftruncate(b->bfd, (off_t)good_end) != 0) {
            mc_log(MC_LOG_ERROR, TAG, "%s: truncating bucket %" PRIx64 ": %s", s->dir, b->id,
                   strerror(errno));
            rc = MC_FILE_WRITE_FAIL;
        }
    }
    b->size = good_end;
    return rc;
}

static int recover(mc_disk_store *s)
{
    DIR *d = fdopendir(dup(s->dirfd));
    if (!d)
        return MC_FILE_OPEN_FAIL;
    uint64_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *de; (de = readdir(d));) {
        uint64_t id;
        char tail[8];
        if (strlen(de->d_name) != 27 ||
            sscanf(de->d_name, "bucket-%16" SCNx64 "%7s", &id, tail) != 2 ||
            strcmp(tail, ".mcd") != 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            ids = mc_xrealloc(ids, cap * sizeof *ids);
        }
        ids[n++] = id;
    }
    closedir(d);
    if (n)
        qsort(ids, n, sizeof *ids, cmp_u64);
    int rc = MC_OK;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < n && rc == MC_OK; i++) {
        mc__disk_bucket *b = bucket_open(s, ids[i], false);
        struct stat st;
        if (!b || fstat(b->bfd, &st) != 0) {
            mc_log(MC_LOG_ERROR, TAG, "%s: opening bucket %" PRIx64 ": %s", s->dir, ids[i],
                   strerror(errno));
            if (b) {
                b->removed = true;
                bucket_free(b);
            }
            rc = MC_FILE_OPEN_FAIL;
            break;
        }
        /* a torn write can only sit in the buckets that were being appended to: the
         * newest two (the active one and the one sealed just before) */
        bool verify = s->cfg.verify_on_open || i + 2 >= n;
        rc = scan_bucket(s, b, (uint64_t)st.st_size, verify);
        b->sealed = true;
        bucket_add_locked(s, b);
        if (ids[i] >= s->next_bucket_id)
            s->next_bucket_id = ids[i] + 1;
    }
    free(ids);
    if (rc == MC_OK) {
        /* appends continue in the newest bucket when it has room */
        mc_list *lb = mc_list_back(&s->buckets);
        mc__disk_bucket *last = lb ? MC_CONTAINER_OF(lb, mc__disk_bucket, link) : NULL;
        if (last && last->size < bucket_limit(s) &&
            (!s->cfg.bucket_max_keys || last->nrecords < s->cfg.bucket_max_keys)) {
            last->sealed = false;
            s->active = last;
            uint64_t want = bucket_limit(s);
            if (s->cfg.capacity_bytes) {
                uint64_t room = s->cfg.capacity_bytes > s->used_bytes
                                    ? s->cfg.capacity_bytes - s->used_bytes : 0;
                if (want > last->size + room)
                    want = last->size + room;
            }
            (void)bucket_prealloc_locked(s, last, want); /* best effort */
        }
        mc__disk_reclaim_locked(s);
        /* LRU order: oldest record first (no access times survive a restart) */
        if (s->nentries) {
            mc__disk_entry **v = mc_xmalloc(s->nentries * sizeof *v);
            size_t k = 0;
            mc__disk_entry *e;
            MC_LIST_FOREACH_ENTRY(e, &s->lru, mc__disk_entry, lru)
            v[k++] = e;
            qsort(v, k, sizeof *v, cmp_entry_seq);
            mc_list_init(&s->lru);
            for (size_t i = 0; i < k; i++) {
                mc_list_init(&v[i]->lru);
                mc_list_push_back(&s->lru, &v[i]->lru);
            }
            free(v);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Whether the directory's file system takes O_DIRECT (open and an aligned write). */
static bool probe_direct(mc_disk_store *s)
{
    const char *name = ".direct-probe";
    int fd = openat(s->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd < 0)
        return false;
    void *p = mc__disk_buf_get(s, MC_DISK_ALIGN);
    memset(p, 0, MC_DISK_ALIGN);
    bool ok = pwrite(fd, p, MC_DISK_ALIGN, 0) == (ssize_t)MC_DISK_ALIGN &&
              pread(fd, p, MC_DISK_ALIGN, 0) == (ssize_t)MC_DISK_ALIGN;
    mc__disk_buf_put(s, p, MC_DISK_ALIGN);
    close(fd);
    unlinkat(s->dirfd, name, 0);
    return ok;
}

/* ------------------------------------------------------------------ open / close */
static void store_free(mc_disk_store *s)
{
    mc__disk_bucket *b;
    MC_LIST_FOREACH_ENTRY(b, &s->buckets, mc__disk_bucket, link)
    {
        if (b->alloc > b->size && ftruncate(b->bfd, (off_t)b->size) != 0)
            mc_log(MC_LOG_WARN, TAG, "%s: trimming bucket %" PRIx64 ": %s", s->dir, b->id,
                   strerror(errno));
        if (b->size && fdatasync(b->fd) != 0)
            mc_log(MC_LOG_WARN, TAG, "%s: fdatasync bucket %" PRIx64 ": %s", s->dir, b->id,
                   strerror(errno));
        bucket_free(b);
    }
    if (s->table) {
        for (size_t i = 0; i < s->tab_size; i++)
            for (mc__disk_entry *e = s->table[i], *nx; e; e = nx) {
                nx = e->hnext;
                free(e);
            }
        free(s->table);
    }
    for (int i = 0; i < s->buf_n; i++)
        free(s->bufs[i]);
    if (s->lockfd >= 0)
        close(s->lockfd); /* releases the flock */
    if (s->dirfd >= 0)
        close(s->dirfd);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->maint_cv);
    pthread_cond_destroy(&s->maint_done_cv);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->buf_lock);
    free(s->dir);
    free(s);
}

int mc_disk_open(const mc_disk_config *cfg, mc_disk_store **out)
{
    if (!cfg || !out)
        return MC_INVALID_PARAMS;
    *out = NULL;
    int rc = validate(cfg);
    if (rc != MC_OK)
        return rc;
    mc_disk_store *s = mc_xcalloc(1, sizeof *s);
    s->cfg = *cfg;
    s->dir = mc_xstrdup(cfg->dir);
    s->cfg.dir = s->dir;
    s->dirfd = s->lockfd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->buf_lock, NULL);
    mc_cond_init_monotonic(&s->idle);
    mc_cond_init_monotonic(&s->maint_cv);
    mc_cond_init_monotonic(&s->maint_done_cv);
    mc_list_init(&s->lru);
    mc_list_init(&s->buckets);
    s->tab_size = 1024;
    s->table = mc_xcalloc(s->tab_size, sizeof *s->table);
    s->next_bucket_id = 1;

    if (mkdir(s->dir, 0755) != 0 && errno != EEXIST) {
        mc_log(MC_LOG_ERROR, TAG, "mkdir %s: %s", s->dir, strerror(errno));
        store_free(s);
        return MC_FILE_OPEN_FAIL;
    }
    s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dirfd < 0) {
        mc_log(MC_LOG_ERROR, TAG, "open %s: %s", s->dir, strerror(errno));
        store_free(s);
        return MC_FILE_OPEN_FAIL;
    }
    s->lockfd = openat(s->dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->lockfd < 0 || flock(s->lockfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        mc_log(MC_LOG_ERROR, TAG, "%s/LOCK: %s", s->dir,
               e == EWOULDBLOCK ? "held by another disk store" : strerror(e));
        store_free(s);
        return e == EWOULDBLOCK ? MC_FILE_LOCK_FAIL : MC_FILE_OPEN_FAIL;
    }
    if (cfg->direct != MC_DISK_DIRECT_OFF) {
        s->direct = probe_direct(s);
        if (!s->direct && cfg->direct == MC_DISK_DIRECT_ON) {
            mc_log(MC_LOG_ERROR, TAG, "%s: the file system does not take O_DIRECT", s->dir);
            store_free(s);
            return MC_FILE_OPEN_FAIL;
        }
        if (!s->direct)
            mc_log(MC_LOG_INFO, TAG, "%s: no O_DIRECT here: using buffered I/O", s->dir);
    }
    rc = recover(s);
    if (rc != MC_OK) {
        store_free(s);
        return rc;
    }
    int e = mc__disk_io_create(cfg->io, cfg->io_threads, cfg->queue_depth, &s->io);
    if (e != 0) {
        mc_log(MC_LOG_ERROR, TAG, "%s: starting the I/O threads: %s", s->dir, strerror(-e));
        store_free(s);
        return MC_INTERNAL_ERROR;
    }
    if (mc__disk_maint_start(s) != 0) {
        mc__disk_io_destroy(s->io);
        store_free(s);
        return MC_INTERNAL_ERROR;
    }
    mc_log(MC_LOG_INFO, TAG, "%s: %" PRIu64 " objects in %" PRIu64 " buckets (%" PRIu64
           " bytes), I/O %s%s", s->dir, (uint64_t)s->nentries, s->nbuckets, s->used_bytes,
           mc__disk_io_name(s->io), s->direct ? " + O_DIRECT" : "");
    *out = s;
    return MC_OK;
}

void mc_disk_close(mc_disk_store *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->closing = true;
    while (s->inflight > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    mc__disk_maint_stop(s);
    mc__disk_io_destroy(s->io);
    store_free(s);
}

/* ------------------------------------------------------------------ metrics */
void mc_disk_get_metrics(mc_disk_store *s, mc_disk_metrics *m)
{
    memset(m, 0, sizeof *m);
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    m->capacity_bytes = s->cfg.capacity_bytes;
    m->used_bytes = s->used_bytes;
    m->live_bytes = s->live_bytes;
    m->objects = s->nentries;
    m->buckets = s->nbuckets;
    pthread_mutex_unlock(&s->lock);
    const mc__disk_stats *t = &s->st;
    m->write_ops = t->write_ops;
    m->write_bytes = t->write_bytes;
    m->read_ops = t->read_ops;
    m->read_bytes = t->read_bytes;
    m->write_failures = t->write_failures;
    m->read_failures = t->read_failures;
    m->full_refusals = t->full_refusals;
    m->checksum_failures = t->checksum_failures;
    m->corrupt_skipped = t->corrupt_skipped;
    m->torn_truncations = t->torn_truncations;
    m->compactions = t->compactions;
    m->compacted_bytes = t->compacted_bytes;
    m->reclaimed_bytes = t->reclaimed_bytes;
    m->evictions = t->evictions;
    m->evicted_bytes = t->evicted_bytes;
    m->read_lat_count = t->rlat_count;
    m->read_lat_sum_us = t->rlat_sum;
    m->write_lat_count = t->wlat_count;
    m->write_lat_sum_us = t->wlat_sum;
    for (int i = 0; i <= MC_DISK_LAT_BUCKETS; i++) {
        m->read_lat_buckets[i] = t->rlat[i];
        m->write_lat_buckets[i] = t->wlat[i];
    }
    m->direct_io = s->direct;
    m->io_backend = mc__disk_io_name(s->io);
}

typedef struct sbuf {
    char *p;
    size_t cap, len;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool room = b->len < b->cap;
    int n = vsnprintf(room ? b->p + b->len : NULL, room ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->len += (size_t)n;
}

static void sb_counter(sbuf *b, const char *name, const char *help, const char *type,
                       uint64_t v)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name,
              v);
}

static void sb_hist(sbuf *b, const char *name, const char *help, const uint64_t *bk,
                    uint64_t count, uint64_t sum)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < MC_DISK_LAT_BUCKETS; i++) {
        cum += bk[i];
        sb_printf(b, "%s_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n", name,
                  mc_disk_latency_bounds_us[i], cum);
    }
    sb_printf(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, count);
    sb_printf(b, "%s_sum %" PRIu64 "\n%s_count %" PRIu64 "\n", name, sum, name, count);
}

size_t mc_disk_metrics_prometheus(const mc_disk_metrics *m, char *buf, size_t cap)
{
    sbuf b = {buf, buf ? cap : 0, 0};
    if (buf && cap)
        buf[0] = '\0';
    /* upstream SsdMetric names (client_metric.h) */
    const struct {
        const char *name, *help, *type;
        uint64_t v;
    } up[] = {
        {"mooncake_ssd_read_bytes_total", "Total bytes read from SSD", "counter",
         m->read_bytes},
        {"mooncake_ssd_write_bytes_total", "Total bytes written to SSD", "counter",
         m->write_bytes},
        {"mooncake_ssd_read_ops_total", "SSD read operations (key count)", "counter",
         m->read_ops},
        {"mooncake_ssd_write_ops_total", "SSD write operations (key count)", "counter",
         m->write_ops},
        {"mooncake_ssd_total_bytes_total", "Total bytes read and written to SSD", "counter",
         m->read_bytes + m->write_bytes},
        {"mooncake_ssd_total_ops_total", "SSD operations (key count)", "counter",
         m->read_ops + m->write_ops},
    };
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
        sb_counter(&b, up[i].name, up[i].help, up[i].type, up[i].v);
    sb_hist(&b, "mooncake_ssd_read_latency_us", "SSD read latency (us)", m->read_lat_buckets,
            m->read_lat_count, m->read_lat_sum_us);
    sb_hist(&b, "mooncake_ssd_write_latency_us", "SSD write latency (us)", m->write_lat_buckets,
            m->write_lat_count, m->write_lat_sum_us);
    /* ours (upstream has no counterpart) */
    const struct {
        const char *name, *help, *type;
        uint64_t v;
    } ours[] = {
        {"mooncake_ssd_capacity_bytes", "Configured capacity (0 = none)", "gauge",
         m->capacity_bytes},
        {"mooncake_ssd_used_bytes", "Bytes of the bucket files", "gauge", m->used_bytes},
        {"mooncake_ssd_live_bytes", "On-disk bytes of live records", "gauge", m->live_bytes},
        {"mooncake_ssd_objects", "Objects on disk", "gauge", m->objects},
        {"mooncake_ssd_buckets", "Bucket files", "gauge", m->buckets},
        {"mooncake_ssd_write_failures_total", "Puts refused or failed", "counter",
         m->write_failures},
        {"mooncake_ssd_read_failures_total", "Gets failed after submission", "counter",
         m->read_failures},
        {"mooncake_ssd_full_refusals_total", "Puts refused for space", "counter",
         m->full_refusals},
        {"mooncake_ssd_checksum_failures_total", "Records that failed verification", "counter",
         m->checksum_failures},
        {"mooncake_ssd_corrupt_skipped_total", "Unreadable headers skipped on open", "counter",
         m->corrupt_skipped},
        {"mooncake_ssd_torn_truncations_total", "Bucket tails cut on open", "counter",
         m->torn_truncations},
        {"mooncake_ssd_compactions_total", "Buckets compacted", "counter", m->compactions},
        {"mooncake_ssd_compacted_bytes_total", "Live bytes moved by compaction", "counter",
         m->compacted_bytes},
        {"mooncake_ssd_reclaimed_bytes_total", "Bucket bytes removed", "counter",
         m->reclaimed_bytes},
        {"mooncake_ssd_evictions_total", "Objects evicted for space", "counter", m->evictions},
        {"mooncake_ssd_evicted_bytes_total", "Value bytes evicted", "counter",
         m->evicted_bytes},
    };
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        sb_counter(&b, ours[i].name, ours[i].help, ours[i].type, ours[i].v);
    return b.len;
}
