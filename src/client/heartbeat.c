/* heartbeat.c: the store's heartbeat thread: a ping to the master every
 * heartbeat_interval_ms, the reachability flag health_check reads, the remount after
 * the master answers NEED_REMOUNT (upstream client_service.cpp, the ping / remount loop),
 * and the fences the ping replies carry (docs/consistency.md; not upstream): applied to
 * the engine (as owner: mc_te_fence_writer; as writer: mc_te_fence_target; our own
 * segment: own_min_epoch) and acknowledged in the next ping, sent at once.
 * Owns hb_* / ping_ok / remounts / own_min_epoch of mc_store; must not touch the data
 * paths' state. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/internal.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MC__STORE_TAG

void mc__store_fill_segment(const mc_store *s, mc_master_segment *seg)
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

/* ---- fences (docs/consistency.md) ---- */

static void own_fence_raise(mc_store *s, uint64_t e)
{
    /* exclusive: returns after every own-segment copy in progress (shared holders) */
    pthread_rwlock_wrlock(&s->own_fence);
    if (e > s->own_min_epoch)
        s->own_min_epoch = e;
    pthread_rwlock_unlock(&s->own_fence);
}

int mc__own_fence_enter(mc_store *s, uint64_t epoch)
{
    pthread_rwlock_rdlock(&s->own_fence);
    if (epoch && epoch < s->own_min_epoch) {
        pthread_rwlock_unlock(&s->own_fence);
        return MC_TRANSFER_FAIL;
    }
    return MC_OK;
}

void mc__own_fence_leave(mc_store *s)
{
    pthread_rwlock_unlock(&s->own_fence);
}

/* Applies the fences of one ping reply and queues their acknowledgements for the next
 * ping. A fence the engine could not apply is not acknowledged (the master sends it
 * again; its quarantined space waits). Returns how many were queued. */
static size_t apply_fences(mc_store *s, const mc_master_ping_result *pr)
{
    size_t n = 0;
    for (uint32_t i = 0; i < pr->n_writer_fences && i < MC_MASTER_MAX_FENCES; i++) {
        const mc_master_writer_fence *f = &pr->writer_fences[i];
        /* as owner: the engine refuses this writer's older WRITEs (TCP, whatever is
         * queued already); our own writes to our segment are our copies: own fence */
        if (f->writer.first == s->client_id.first && f->writer.second == s->client_id.second)
            own_fence_raise(s, f->min_epoch);
        int rc = mc_te_fence_writer(s->te, f->writer.first, f->writer.second, f->min_epoch);
        if (rc != MC_OK) {
            mc_log(MC_LOG_WARN, TAG, "fencing writer %016llx%016llx at epoch %llu failed: %s",
                   (unsigned long long)f->writer.first, (unsigned long long)f->writer.second,
                   (unsigned long long)f->min_epoch, mc_strerror(rc));
            continue;
        }
        if (s->hb_n_owner_acks < MC_MASTER_MAX_FENCES)
            s->hb_owner_acks[s->hb_n_owner_acks++] = *f;
        n++;
    }
    for (uint32_t i = 0; i < pr->n_target_fences && i < MC_MASTER_MAX_FENCES; i++) {
        const mc_master_target_fence *f = &pr->target_fences[i];
        /* as writer: the engine starts no older WRITE to that segment and has drained its
         * same-host copies when this returns; for our own segment, our copies too */
        if (!strcmp(f->segment, s->name))
            own_fence_raise(s, f->min_epoch);
        int rc = mc_te_fence_target(s->te, f->segment, f->min_epoch);
        if (rc != MC_OK) {
            mc_log(MC_LOG_WARN, TAG, "fencing our writes to %s at epoch %llu failed: %s",
                   f->segment, (unsigned long long)f->min_epoch, mc_strerror(rc));
            continue;
        }
        if (s->hb_n_writer_acks < MC_MASTER_MAX_FENCES)
            s->hb_writer_acks[s->hb_n_writer_acks++] = *f;
        n++;
    }
    atomic_fetch_add(&s->fences_applied, n);
    return n;
}

/* One ping carrying the queued acknowledgements; they are dropped once it succeeded
 * (the master has recorded them). */
static int ping_acks(mc_store *s, mc_master_ping_result *pr)
{
    mc_master_ping_request req = {s->hb_owner_acks, s->hb_n_owner_acks, s->hb_writer_acks,
                                  s->hb_n_writer_acks};
    int rc = mc_master_client_ping_fences(s->mc, s->client_id, &req, pr);
    if (rc == MC_OK)
        s->hb_n_owner_acks = s->hb_n_writer_acks = 0;
    return rc;
}

/* The master forgot us (restart, or we were silent past client_ttl): remount and
 * republish our descriptor (a master-embedded metadata server lost it too). */
static void remount(mc_store *s)
{
    /* the global segment, then the extra ones (segments.c) */
    mc_master_segment *segs = mc_xcalloc(1 + MC_STORE_MAX_EXTRA_SEGMENTS, sizeof *segs);
    size_t n = 0;
    if (s->seg_base)
        mc__store_fill_segment(s, &segs[n++]);
    n += mc__xseg_fill(s, segs + n, MC_STORE_MAX_EXTRA_SEGMENTS);
    int rc = mc_master_client_remount_segments(s->mc, n ? segs : NULL, n, s->client_id);
    free(segs);
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

#define ACK_ROUNDS 4 /* pings per heartbeat at most (each one acknowledges the last) */

static void heartbeat_once(mc_store *s)
{
    mc_master_ping_result *pr = s->hb_pr;
    for (int round = 0; round < ACK_ROUNDS; round++) {
        int rc = ping_acks(s, pr);
        /* Log only the transitions (reachable <-> not), not every failed ping. The
         * acknowledgements stay queued for the next ping. */
        if (rc != MC_OK) {
            if (atomic_exchange(&s->ping_ok, false))
                mc_log(MC_LOG_WARN, TAG, "heartbeat to master %s failed: %s",
                       mc_master_client_address(s->mc), mc_strerror(rc));
            return;
        }
        if (!atomic_exchange(&s->ping_ok, true))
            mc_log(MC_LOG_INFO, TAG, "master %s reachable again",
                   mc_master_client_address(s->mc));
        size_t applied = apply_fences(s, pr);
        if (round == 0 && pr->client_status == MC_MASTER_CLIENT_NEED_REMOUNT)
            remount(s);
        if (pr->tasks_pending)
            mc__tasks_kick(s); /* a replica task waits for us (tasks.c) */
        /* Fences applied: acknowledge them now rather than a heartbeat later, since
         * the master keeps quarantined space until then. */
        if (!applied)
            return;
    }
}

static void *heartbeat_main(void *arg)
{
    mc_store *s = arg;
    pthread_mutex_lock(&s->hb_lock);
    while (!s->hb_stop) {
        struct timespec ts = mc_monotonic_in_ms(s->hb_interval_ms);
        /* Sleep one interval (monotonic clock); a 0 return is a wake-up that may be
         * spurious, so wait again until the deadline unless stop was asked. */
        while (!s->hb_stop && !s->hb_kick &&
               pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts) == 0) {
        }
        if (s->hb_stop)
            break;
        s->hb_kick = false;
        pthread_mutex_unlock(&s->hb_lock); /* no lock held while talking to the master */
        heartbeat_once(s);
        pthread_mutex_lock(&s->hb_lock);
    }
    pthread_mutex_unlock(&s->hb_lock);
    return NULL;
}

int mc__hb_start(mc_store *s, uint32_t interval_ms)
{
    if (!s->hb_pr)
        s->hb_pr = mc_xmalloc(sizeof *s->hb_pr);
    s->hb_interval_ms = interval_ms;
    s->hb_stop = false;
    if (pthread_create(&s->hb_thread, NULL, heartbeat_main, s) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot start the heartbeat thread");
        return MC_INTERNAL_ERROR;
    }
    s->hb_started = true;
    return MC_OK;
}

void mc__hb_kick(void *ctx)
{
    mc_store *s = ctx;
    pthread_mutex_lock(&s->hb_lock);
    s->hb_kick = true;
    pthread_cond_broadcast(&s->hb_cond);
    pthread_mutex_unlock(&s->hb_lock);
}

void mc__hb_stop(mc_store *s)
{
    if (!s->hb_started)
        return;
    /* hb_stop is set under hb_lock so the thread sees it either before it waits or as
     * the wake-up; a ping in progress finishes first (bounded by the RPC timeout). */
    pthread_mutex_lock(&s->hb_lock);
    s->hb_stop = true;
    pthread_cond_broadcast(&s->hb_cond);
    pthread_mutex_unlock(&s->hb_lock);
    pthread_join(s->hb_thread, NULL);
    s->hb_started = false;
}

void mc__hb_flush(mc_store *s)
{
    if ((s->hb_n_owner_acks || s->hb_n_writer_acks) && s->mc && s->hb_pr &&
        atomic_load(&s->ping_ok)) {
        int rc = ping_acks(s, s->hb_pr);
        if (rc != MC_OK)
            mc_log(MC_LOG_DEBUG, TAG, "last fence acknowledgement failed: %s", mc_strerror(rc));
    }
    s->hb_n_owner_acks = s->hb_n_writer_acks = 0;
    pthread_rwlock_wrlock(&s->own_fence);
    s->own_min_epoch = 0;
    pthread_rwlock_unlock(&s->own_fence);
}
