/* ha.c: the HA thread of a master (see ha.h): campaign as a standby, renew as the
 * leader, close the gate for good when the lease is lost. */
#include "master/ha.h"
#include "master/persist.h"
#include "master/replicate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sync.h"
#include "common/xalloc.h"
#include "metadata/election.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG "ha"

struct mc_master_ha {
    mc_master_service *svc;
    mc_election *el;
    mc_master_ha_opts o;
    char self[MC_ELECTION_ADDR_MAX];
    uint32_t poll_ms, renew_ms;
    pthread_t thread;
    mc__repl *repl; /* index replication (--ha_sync): NULL with NONE */
    pthread_mutex_t mu;
    pthread_cond_t cond; /* stop */
    bool stop;           /* mu */
};

/* Waits ms or until stop. Returns true when stop was asked. */
static bool wait_ms(mc_master_ha *ha, uint64_t ms)
{
    struct timespec ts = mc_monotonic_in_ms(ms);
    pthread_mutex_lock(&ha->mu);
    while (!ha->stop && pthread_cond_timedwait(&ha->cond, &ha->mu, &ts) == 0) {
    }
    bool stop = ha->stop;
    pthread_mutex_unlock(&ha->mu);
    return stop;
}

/* Leader: renew every renew_ms; on a transport failure retry sooner while the deadline
 * holds. Returns when the leadership is over (deposed) or stop was asked. */
static void lead(mc_master_ha *ha, uint64_t until)
{
    uint64_t next = mc_now_ms() + ha->renew_ms;
    for (;;) {
        if (wait_ms(ha, mc_ms_left(next)))
            return;
        int rc = mc_election_renew(ha->el, &until);
        if (rc == MC_OK) {
            mc_master_service_ha_extend(ha->svc, until);
            next = mc_now_ms() + ha->renew_ms;
            continue;
        }
        if (rc != MC_LEASE_EXPIRED && mc_ms_left(until) > 0) {
            next = mc_now_ms() + 100; /* etcd unreachable: keep trying until the deadline */
            continue;
        }
        mc_master_service_ha_set(ha->svc, MC_MASTER_ROLE_DEPOSED,
                                 mc_master_service_view(ha->svc), NULL, 0);
        mc_log(MC_LOG_ERROR, TAG,
               "lost the leader lease (%s): serving nothing from now on; restart this "
               "master to rejoin as a standby",
               rc == MC_LEASE_EXPIRED ? "expired or taken over" : "etcd unreachable past "
                                                                   "the lease deadline");
        if (ha->o.on_deposed)
            ha->o.on_deposed(ha->o.ctx);
        return;
    }
}

static void *ha_main(void *arg)
{
    mc_master_ha *ha = arg;
    int64_t seen = -1;
    int last_rc = MC_OK;
    char token[MC_ELECTION_TOKEN_MAX] = ""; /* the leader's term token (standby) */
    int64_t token_view = -1;                /* the view it belongs to              */
    while (!wait_ms(ha, 0)) {
        mc_election_view v;
        uint64_t until = 0;
        int rc = mc_election_campaign(ha->el, ha->self, &v, &until);
        if (rc == MC_OK) {
            if (ha->repl) /* the fetches this term admits carry it (docs/ha.md) */
                mc__repl_set_token(ha->repl, mc_election_term_token(ha->el));
            int prc = ha->repl ? mc__repl_promote(ha->repl, v.version) : MC_OK;
            if (prc == MC_OK && ha->repl) /* the old leader's writes in flight: quarantined */
                mc_master_log_promote(ha->svc);
            if (prc == MC_OK && ha->o.on_promote)
                prc = ha->o.on_promote(ha->o.ctx, v.version);
            if (prc != MC_OK) {
                mc_log(MC_LOG_WARN, TAG, "elected (view %lld) but not ready to serve: %s; "
                       "resigning", (long long)v.version, mc_strerror(prc));
                mc_election_resign(ha->el);
            } else {
                mc_master_service_ha_set(ha->svc, MC_MASTER_ROLE_LEADER, v.version, ha->self,
                                         until);
                mc_log(MC_LOG_INFO, TAG, "leader: serving as %s, view %lld", ha->self,
                       (long long)v.version);
                lead(ha, until);
                break; /* stopped, or deposed for good */
            }
        } else if (rc == MC_OBJECT_ALREADY_EXISTS) {
            mc_master_service_ha_set(ha->svc, MC_MASTER_ROLE_STANDBY, v.version, v.leader, 0);
            if (v.version != seen)
                mc_log(MC_LOG_INFO, TAG, "standby: the leader is %s (view %lld)", v.leader,
                       (long long)v.version);
            seen = v.version;
            if (ha->repl) {
                /* the leader admits fetches with its term token only: read it once per
                 * view, and again when the leader refused it */
                if (v.version != token_view || mc__repl_token_refused(ha->repl)) {
                    token_view = mc_election_read_token(ha->el, v.version, token,
                                                        sizeof token) == MC_OK
                                     ? v.version
                                     : -1;
                    if (token_view < 0)
                        token[0] = '\0';
                }
                if (token_view == v.version) /* else retried next round */
                    mc__repl_follow(ha->repl, v.leader, v.version, token);
            }
            if (ha->o.on_standby)
                ha->o.on_standby(ha->o.ctx, v.leader, v.version);
        } else if (rc != last_rc) {
            mc_log(MC_LOG_WARN, TAG, "campaign: %s (retrying every %u ms)", mc_strerror(rc),
                   ha->poll_ms);
        }
        last_rc = rc;
        /* etcd not answering: back off to 1 s (each failed call is logged) */
        bool failed = rc != MC_OK && rc != MC_OBJECT_ALREADY_EXISTS;
        if (wait_ms(ha, failed && ha->poll_ms < 1000 ? 1000 : ha->poll_ms))
            break;
    }
    return NULL;
}

int mc_master_ha_start(mc_master_service *svc, const mc_master_ha_opts *opts,
                       mc_master_ha **out)
{
    if (!svc || !opts || !opts->self || !out ||
        strlen(opts->self) >= MC_ELECTION_ADDR_MAX)
        return MC_INVALID_PARAMS;
    mc_master_ha *ha = mc_xcalloc(1, sizeof *ha);
    int rc = mc_election_create(opts->conn, opts->cluster_id, opts->ttl_s, &ha->el);
    if (rc != MC_OK) {
        free(ha);
        return rc;
    }
    ha->svc = svc;
    ha->o = *opts;
    ha->o.conn = ha->o.cluster_id = ha->o.self = NULL; /* borrowed for the call only */
    snprintf(ha->self, sizeof ha->self, "%s", opts->self);
    uint32_t ttl_ms = opts->ttl_s * 1000u;
    ha->poll_ms = ttl_ms / 10 < 50 ? 50 : ttl_ms / 10 > 250 ? 250 : ttl_ms / 10;
    ha->renew_ms = ttl_ms / 3;
    pthread_mutex_init(&ha->mu, NULL);
    mc_cond_init_monotonic(&ha->cond);
    mc_master_service_ha_enable(svc);
    if (opts->sync != MC_MASTER_HA_SYNC_NONE) {
        ha->repl = mc__repl_create(svc, opts->sync, opts->ttl_s, opts->auth);
        if (!ha->repl) { /* MC_HA_REPL_RING_BYTES malformed, or no eventfd (logged) */
            mc_election_destroy(ha->el);
            pthread_cond_destroy(&ha->cond);
            pthread_mutex_destroy(&ha->mu);
            free(ha);
            return MC_INVALID_PARAMS;
        }
    }
    if (pthread_create(&ha->thread, NULL, ha_main, ha) != 0) {
        mc__repl_free(ha->repl);
        mc_election_destroy(ha->el);
        pthread_cond_destroy(&ha->cond);
        pthread_mutex_destroy(&ha->mu);
        free(ha);
        return MC_INTERNAL_ERROR;
    }
    *out = ha;
    return MC_OK;
}

void mc_master_ha_destroy(mc_master_ha *ha)
{
    if (!ha)
        return;
    pthread_mutex_lock(&ha->mu);
    ha->stop = true;
    pthread_cond_broadcast(&ha->cond);
    pthread_mutex_unlock(&ha->mu);
    pthread_join(ha->thread, NULL);
    mc__repl_stop(ha->repl);
    /* close the gate before the lease goes: no request runs once a standby may win */
    mc_master_service_ha_set(ha->svc, MC_MASTER_ROLE_STANDBY, mc_master_service_view(ha->svc),
                             NULL, 0);
    mc_election_destroy(ha->el); /* revokes a lease still held */
    ha->el = NULL;
    pthread_cond_destroy(&ha->cond);
    pthread_mutex_destroy(&ha->mu);
}

void mc_master_ha_free(mc_master_ha *ha)
{
    if (!ha)
        return;
    mc__repl_free(ha->repl); /* the RPC server stopped: nobody fetches or appends */
    free(ha);
}
