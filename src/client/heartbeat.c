/* heartbeat.c: the store's heartbeat thread: a ping to the master every
 * heartbeat_interval_ms, the reachability flag health_check reads, and the remount after
 * the master answers NEED_REMOUNT (upstream client_service.cpp, the ping / remount loop).
 * Owns hb_* / ping_ok / remounts of mc_store; must not touch the data paths' state. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "client/internal.h"
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

static void heartbeat_once(mc_store *s)
{
    mc_master_ping_result pr = {0};
    int rc = mc_master_client_ping(s->mc, s->client_id, &pr);
    /* Log only the transitions (reachable <-> not), not every failed ping. */
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
        mc__store_fill_segment(s, &seg);
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
        /* Sleep one interval (monotonic clock); a 0 return is a wake-up that may be
         * spurious, so wait again until the deadline unless stop was asked. */
        while (!s->hb_stop && pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts) == 0) {
        }
        if (s->hb_stop)
            break;
        pthread_mutex_unlock(&s->hb_lock); /* no lock held while talking to the master */
        heartbeat_once(s);
        pthread_mutex_lock(&s->hb_lock);
    }
    pthread_mutex_unlock(&s->hb_lock);
    return NULL;
}

int mc__hb_start(mc_store *s, uint32_t interval_ms)
{
    s->hb_interval_ms = interval_ms;
    s->hb_stop = false;
    if (pthread_create(&s->hb_thread, NULL, heartbeat_main, s) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot start the heartbeat thread");
        return MC_INTERNAL_ERROR;
    }
    s->hb_started = true;
    return MC_OK;
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
