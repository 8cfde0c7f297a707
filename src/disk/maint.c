/* disk/maint.c: the maintenance thread: watermark eviction, removal of empty buckets,
 * compaction. It wakes when asked (a bucket emptied or was sealed, a watermark was
 * crossed, mc_disk_maintain) and once a second otherwise.
 *
 * Compaction of a sealed bucket B: each live record is read whole (O_DIRECT when the
 * store uses it), verified (a bad one is dropped and counted, never copied), appended
 * to the active bucket like a put (same key, same sequence number), and the index moved
 * to the copy if the entry is still the one that was copied (a delete or a newer put in
 * between kills the copy instead). Once every live record has moved and the destination
 * buckets are fdatasync'ed, B is unlinked. A crash in between leaves two copies with the
 * same sequence number: the scan on open keeps one. The I/O here is synchronous on this
 * thread (it is nobody's event loop). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "disk/internal.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG "disk"

void mc__disk_maint_kick_locked(mc_disk_store *s)
{
    s->maint_kick = true;
    pthread_cond_signal(&s->maint_cv);
}

static int64_t io_full(int fd, bool write, void *buf, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = write ? pwrite(fd, (char *)buf + done, len - done, (off_t)(off + done))
                          : pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return write ? -EIO : (int64_t)done;
        done += (uint64_t)r;
    }
    return (int64_t)done;
}

typedef struct item {
    uint64_t off, foot, vlen, seq;
    uint32_t klen;
    char *key;
} item;

/* Compacts b (s->lock held on entry and exit; dropped for the I/O). Returns 1 when b
 * was emptied and removed, 0 otherwise. */
static int compact_locked(mc_disk_store *s, mc__disk_bucket *b)
{
    size_t n = 0;
    item *v = mc_xmalloc((b->live_count ? b->live_count : 1) * sizeof *v);
    mc__disk_entry *e;
    MC_LIST_FOREACH_ENTRY(e, &b->entries, mc__disk_entry, blink)
    {
        v[n].off = e->off;
        v[n].foot = e->foot;
        v[n].vlen = e->vlen;
        v[n].seq = e->seq;
        v[n].klen = e->klen;
        v[n].key = mc_xmalloc(e->klen);
        memcpy(v[n].key, e->key, e->klen);
        n++;
    }
    b->refs++;
    b->compacting = true;
    mc__disk_bucket *dst[8];
    int ndst = 0;
    bool aborted = false;
    uint64_t moved = 0;
    pthread_mutex_unlock(&s->lock);

    for (size_t i = 0; i < n && !aborted; i++) {
        item *it = &v[i];
        unsigned char *buf = mc__disk_buf_get(s, it->foot);
        int64_t got = io_full(b->fd, false, buf, it->foot, it->off);
        mc__rec_hdr h;
        bool ok = got == (int64_t)it->foot && mc__rec_decode(buf, &h, UINT64_MAX) == 0 &&
                  h.magic == MC__REC_LIVE && h.key_len == it->klen && h.value_len == it->vlen &&
                  h.seq == it->seq && !memcmp(buf + MC__REC_HDR, it->key, it->klen) &&
                  mc__rec_hdr_ok(&h, it->key) &&
                  mc__rec_checksum(it->key, it->klen, buf + MC__REC_HDR + it->klen, it->vlen) ==
                      h.checksum;
        uint64_t hash = mc__disk_key_hash(it->key, it->klen);
        pthread_mutex_lock(&s->lock);
        e = mc__disk_find_locked(s, it->key, it->klen, hash);
        bool current = e && e->bucket == b && e->off == it->off;
        if (!current) {
            pthread_mutex_unlock(&s->lock);
            mc__disk_buf_put(s, buf, it->foot);
            continue;
        }
        if (!ok) {
            /* not copied: a bad record must not become a good-looking one */
            mc__disk_unindex_locked(s, e);
            pthread_mutex_unlock(&s->lock);
            atomic_fetch_add(&s->st.checksum_failures, 1);
            mc__disk_mark_dead(s, b, it->off);
            mc__disk_buf_put(s, buf, it->foot);
            continue;
        }
        uint64_t noff = 0;
        int st;
        mc__disk_bucket *nb = mc__disk_reserve_locked(s, it->foot, &noff, &st);
        pthread_mutex_unlock(&s->lock);
        if (!nb) {
            aborted = true; /* no room to move it: try again on a later pass */
            mc__disk_buf_put(s, buf, it->foot);
            break;
        }
        int64_t w = io_full(nb->fd, true, buf, it->foot, noff);
        mc__disk_buf_put(s, buf, it->foot);
        pthread_mutex_lock(&s->lock);
        bool dead_copy = true;
        if (w == (int64_t)it->foot) {
            e = mc__disk_find_locked(s, it->key, it->klen, hash);
            if (e && e->bucket == b && e->off == it->off) {
                mc__disk_bucket *ob = e->bucket;
                ob->live_bytes -= e->foot;
                ob->live_count--;
                mc_list_remove(&e->blink);
                e->bucket = nb;
                e->off = noff;
                mc_list_push_back(&nb->entries, &e->blink);
                nb->live_bytes += e->foot;
                nb->live_count++;
                moved += e->foot;
                dead_copy = false;
            }
            bool seen = false;
            for (int k = 0; k < ndst; k++)
                seen |= dst[k] == nb;
            if (!seen && ndst < 8) {
                nb->refs++;
                dst[ndst++] = nb;
            } else if (!seen) {
                pthread_mutex_unlock(&s->lock);
                fdatasync(nb->fd);
                pthread_mutex_lock(&s->lock);
            }
        } else {
            aborted = true;
            dead_copy = mc__disk_append_failed_locked(s, nb, noff, it->foot);
        }
        if (dead_copy) {
            pthread_mutex_unlock(&s->lock);
            mc__disk_mark_dead(s, nb, noff);
            pthread_mutex_lock(&s->lock);
        }
        mc__disk_write_done_locked(s, nb);
        pthread_mutex_unlock(&s->lock);
    }
    /* the copies are durable before the originals go */
    for (int k = 0; k < ndst; k++)
        if (fdatasync(dst[k]->fd) != 0)
            aborted = true;
    for (size_t i = 0; i < n; i++)
        free(v[i].key);
    free(v);
    pthread_mutex_lock(&s->lock);
    for (int k = 0; k < ndst; k++)
        mc__disk_bucket_unref_locked(s, dst[k]);
    int removed = 0;
    b->compacting = false;
    atomic_fetch_add(&s->st.compacted_bytes, moved);
    if (!aborted && !b->removed && b->live_count == 0 && b->writes == 0) {
        mc__disk_remove_bucket_locked(s, b);
        atomic_fetch_add(&s->st.compactions, 1);
        removed = 1;
    }
    mc__disk_bucket_unref_locked(s, b);
    return removed;
}

/* One pass. s->lock held on entry and exit. Returns the buckets compacted or removed. */
static int pass_locked(mc_disk_store *s)
{
    int n = 0;
    uint64_t cap = s->cfg.capacity_bytes;
    if (cap && s->cfg.enable_eviction &&
        (double)s->used_bytes > s->cfg.high_watermark * (double)cap) {
        mc__disk_victim *vic = NULL;
        uint64_t low = (uint64_t)(s->cfg.low_watermark * (double)cap);
        size_t nv = mc__disk_evict_locked(s, low, &vic);
        pthread_mutex_unlock(&s->lock);
        mc__disk_flush_victims(s, vic, nv);
        pthread_mutex_lock(&s->lock);
    }
    n += mc__disk_reclaim_locked(s);
    if (s->cfg.compact_live_ratio <= 0)
        return n;
    /* compact each eligible bucket once, emptiest first */
    uint64_t gen_limit = s->next_bucket_id; /* buckets made by this pass are not eligible */
    mc__disk_bucket *b;
    for (;;) {
        mc__disk_bucket *best = NULL;
        double best_ratio = 2;
        MC_LIST_FOREACH_ENTRY(b, &s->buckets, mc__disk_bucket, link)
        {
            if (!b->sealed || b->writes || !b->size || b->id >= gen_limit || b->compact_tried)
                continue;
            double ratio = (double)b->live_bytes / (double)b->size;
            if (ratio < s->cfg.compact_live_ratio && ratio < best_ratio) {
                best = b;
                best_ratio = ratio;
            }
        }
        if (!best || s->maint_stop)
            break;
        best->compact_tried = true;
        n += compact_locked(s, best);
    }
    MC_LIST_FOREACH_ENTRY(b, &s->buckets, mc__disk_bucket, link)
    b->compact_tried = false;
    return n;
}

static void *maint_main(void *arg)
{
    mc_disk_store *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->maint_stop) {
        if (!s->maint_kick && s->maint_req == s->maint_done) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->maint_cv, &s->lock, &ts);
            if (s->maint_stop)
                break;
        }
        s->maint_kick = false;
        uint64_t req = s->maint_req;
        int n = pass_locked(s);
        if (req > s->maint_done) {
            s->maint_done = req;
            s->maint_result = n;
            pthread_cond_broadcast(&s->maint_done_cv);
        }
    }
    /* answer a waiter that raced the stop */
    s->maint_done = s->maint_req;
    pthread_cond_broadcast(&s->maint_done_cv);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int mc__disk_maint_start(mc_disk_store *s)
{
    int rc = pthread_create(&s->maint, NULL, maint_main, s);
    if (rc != 0)
        mc_log(MC_LOG_ERROR, TAG, "starting the maintenance thread: %s", strerror(rc));
    return -rc;
}

void mc__disk_maint_stop(mc_disk_store *s)
{
    pthread_mutex_lock(&s->lock);
    s->maint_stop = true;
    pthread_cond_signal(&s->maint_cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->maint, NULL);
}

int mc_disk_maintain(mc_disk_store *s)
{
    if (!s)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&s->lock);
    uint64_t req = ++s->maint_req;
    mc__disk_maint_kick_locked(s);
    while (s->maint_done < req && !s->maint_stop)
        pthread_cond_wait(&s->maint_done_cv, &s->lock);
    int n = s->maint_result;
    pthread_mutex_unlock(&s->lock);
    return n;
}
