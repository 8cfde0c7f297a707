/* leader.c: the master client's leader lookup for HA masters (docs/ha.md): a
 * master_server_addr "etcd://h:p;h:p" (or "redis://h:p") names where the masters elect
 * their leader, not a master; the leader's address and view come from the key the
 * leader publishes (metadata/election.h: mooncake-store/<cluster_id>/master_view). The
 * cluster id is the env MC_MASTER_CLUSTER_ID (default "mooncake_cluster", upstream's
 * --cluster_id default).
 *
 * Two ways a client learns of a new leader (issue 12: "follow it on change (watch, with a
 * poll as fallback)"; upstream's clients resolve the leader through their HA coordinator,
 * upstream-mooncake.md §1.3, which does not say how they notice a change):
 *  - the follow thread (mc__leader_follow): etcd: a v3 watch of the key (the gateway's
 *    streaming /v3/watch, election.c), restarted every WATCH_PERIOD_MS with one read of
 *    the key in between (a safety net for a stream that hangs without an error); while
 *    the watch is broken (its member down), a read every POLL_MS and a new watch on the
 *    next member. Redis: a read every POLL_MS (the election publishes nothing to
 *    subscribe to). Each view newer than every one reported before goes to the owner's
 *    callback at once, so an idle client moves to the new leader (and a store remounts)
 *    without waiting for a call to fail;
 *  - the connection pool (master_conn.c) asks here (mc__leader_resolve) when a call
 *    cannot reach a serving master, one read per retry.
 * The thread has its own election client; lookups share one under mu. */
#include "client/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "metadata/election.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"

#define TAG MC__MASTER_TAG
#define WATCH_PERIOD_MS 10000u /* a watch stream lives this long; then a read, a new one */
#define POLL_MS 500u           /* reads while no watch runs (Redis, a broken watch) */
#define WAIT_RETRY_MS 100u     /* between two lookups while waiting for a first leader */

struct mc__leader {
    pthread_mutex_t mu; /* one lookup at a time (the election client is single-threaded) */
    mc_election *el;
    char *address;      /* the locator, for messages */
    /* the follow thread */
    mc_election *wel;   /* its own election client */
    pthread_t th;
    bool started;
    pthread_mutex_t wmu; /* guards stop, the thread's waits */
    pthread_cond_t wcond;
    bool stop;
    mc__leader_fn fn;
    void *ctx;
    int64_t seen;       /* the newest view reported (thread only) */
    bool watching;      /* a watch is established now (thread only) */
};

bool mc__leader_locator(const char *address)
{
    return address &&
           (strncmp(address, "etcd://", 7) == 0 || strncmp(address, "redis://", 8) == 0 ||
            strncmp(address, "k8s://", 6) == 0);
}

static const char *cluster_id(void)
{
    const char *cid = mc_env_str("MC_MASTER_CLUSTER_ID");
    return cid && *cid ? cid : "mooncake_cluster";
}

int mc__leader_create(const char *address, mc__leader **out)
{
    if (strncmp(address, "etcd://", 7) != 0 && strncmp(address, "redis://", 8) != 0) {
        mc_log(MC_LOG_ERROR, TAG,
               "master_server_addr '%s': mooncake-c follows HA masters through etcd or Redis "
               "only (\"etcd://h:2379;h:2379\", \"redis://h:6379\")",
               address);
        return MC_NOT_SUPPORTED;
    }
    mc__leader *l = mc_xcalloc(1, sizeof *l);
    /* a TTL is needed by the election client; lookups never take a lease */
    int rc = mc_election_create(address, cluster_id(), 2, &l->el);
    if (rc != MC_OK) {
        free(l);
        return rc == MC_NOT_SUPPORTED ? MC_NOT_SUPPORTED : MC_INVALID_PARAMS;
    }
    l->address = mc_xstrdup(address);
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->wmu, NULL);
    mc_cond_init_monotonic(&l->wcond);
    *out = l;
    return MC_OK;
}

void mc__leader_destroy(mc__leader *l)
{
    if (!l)
        return;
    if (l->started) {
        pthread_mutex_lock(&l->wmu);
        l->stop = true;
        pthread_cond_broadcast(&l->wcond);
        pthread_mutex_unlock(&l->wmu);
        mc_election_watch_stop(l->wel);
        pthread_join(l->th, NULL);
    }
    mc_election_destroy(l->wel);
    mc_election_destroy(l->el);
    pthread_cond_destroy(&l->wcond);
    pthread_mutex_destroy(&l->wmu);
    pthread_mutex_destroy(&l->mu);
    free(l->address);
    free(l);
}

int mc__leader_resolve(mc__leader *l, char *addr, size_t len, int64_t *view)
{
    mc_election_view v;
    pthread_mutex_lock(&l->mu);
    int rc = mc_election_read_view(l->el, &v);
    pthread_mutex_unlock(&l->mu);
    if (rc != MC_OK)
        return rc;
    if (strlen(v.leader) >= len)
        return MC_INVALID_PARAMS;
    snprintf(addr, len, "%s", v.leader);
    *view = v.version;
    return MC_OK;
}

int mc__leader_wait(mc__leader *l, uint32_t timeout_ms, char *addr, size_t len,
                    int64_t *view)
{
    uint64_t t0 = mc_now_ms(), deadline = mc_deadline_ms(timeout_ms);
    unsigned tries = 0, no_leader = 0;
    int rc;
    for (;;) {
        rc = mc__leader_resolve(l, addr, len, view);
        tries++;
        if (rc == MC_OBJECT_NOT_FOUND)
            no_leader++;
        if (rc == MC_OK || mc_ms_left(deadline) == 0)
            break;
        uint64_t left = mc_ms_left(deadline);
        mc_sleep_ms(left < WAIT_RETRY_MS ? left : WAIT_RETRY_MS);
    }
    if (rc != MC_OK) /* the summary of the lookups' (rate-limited) warnings */
        mc_log(MC_LOG_ERROR, TAG,
               "%s: no leader found in %.1f s: %u lookups, %u found no leader key, %u could "
               "not reach the backend; the last: %s",
               l->address, (double)(mc_now_ms() - t0) / 1000.0, tries, no_leader,
               tries - no_leader, mc_strerror(rc));
    return rc;
}

/* ---- the follow thread ---- */

static void report(mc__leader *l, const mc_election_view *v, const char *how)
{
    if (v->version <= l->seen)
        return; /* the one in use, or an older one (a slow read) */
    l->seen = v->version;
    l->fn(l->ctx, v->leader, v->version, how);
}

static void on_watch(void *ctx, const mc_election_view *v)
{
    mc__leader *l = ctx;
    if (!v) {
        if (!l->watching)
            mc_log(MC_LOG_DEBUG, TAG, "%s: watching %s", l->address, mc_election_key(l->wel));
        l->watching = true;
        return;
    }
    report(l, v, "the watch");
}

/* Waits ms unless stopped; true when stopped. */
static bool pause_ms(mc__leader *l, uint64_t ms)
{
    uint64_t deadline = mc_deadline_ms(ms);
    pthread_mutex_lock(&l->wmu);
    while (!l->stop && mc_ms_left(deadline) > 0) {
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
                              .tv_nsec = (long)(deadline % 1000) * 1000000L};
        if (pthread_cond_timedwait(&l->wcond, &l->wmu, &ts) == ETIMEDOUT)
            break;
    }
    bool stop = l->stop;
    pthread_mutex_unlock(&l->wmu);
    return stop;
}

static bool stopped(mc__leader *l)
{
    pthread_mutex_lock(&l->wmu);
    bool s = l->stop;
    pthread_mutex_unlock(&l->wmu);
    return s;
}

static void *follow_main(void *arg)
{
    mc__leader *l = arg;
    bool watch = mc_election_watchable(l->wel);
    int64_t from = l->seen; /* the key's create_revision: its later changes are newer */
    while (!stopped(l)) {
        int rc = MC_NOT_SUPPORTED;
        if (watch) {
            l->watching = false;
            rc = mc_election_watch(l->wel, &from, WATCH_PERIOD_MS, on_watch, l);
            if (stopped(l))
                break;
            if (rc != MC_OK && l->watching)
                mc_log(MC_LOG_INFO, TAG, "%s: the watch of the leader key broke (%s): "
                       "reading it every %u ms until a new watch is up", l->address,
                       mc_strerror(rc), POLL_MS);
        }
        /* a read: the safety net between two watch streams, the poll otherwise */
        mc_election_view v;
        if (mc_election_read_view(l->wel, &v) == MC_OK)
            report(l, &v, watch ? "a read of the key" : "the poll");
        if (rc != MC_OK && pause_ms(l, POLL_MS))
            break;
    }
    return NULL;
}

int mc__leader_follow(mc__leader *l, int64_t view, mc__leader_fn fn, void *ctx)
{
    if (l->started)
        return MC_INVALID_PARAMS;
    int rc = mc_election_create(l->address, cluster_id(), 2, &l->wel);
    if (rc != MC_OK)
        return rc;
    l->fn = fn;
    l->ctx = ctx;
    l->seen = view;
    if (pthread_create(&l->th, NULL, follow_main, l) != 0) {
        mc_log(MC_LOG_WARN, TAG, "%s: no thread to follow the leader: a change is found by "
               "the first call that fails", l->address);
        return MC_INTERNAL_ERROR;
    }
    l->started = true;
    return MC_OK;
}
