/* ha_gate.c: the HA role of a master service and the serve gate the RPC handler checks
 * on every request (declared in master_service.h, "HA role and fencing"; the election
 * that drives it: master/ha.c over metadata/election.h; docs/ha.md). */
#include "master/internal.h"
#include "master/replicate.h"

#include <stdio.h>

const char *mc_master_role_name(int role)
{
    switch (role) {
    case MC_MASTER_ROLE_LEADER:
        return "leader";
    case MC_MASTER_ROLE_STANDBY:
        return "standby";
    case MC_MASTER_ROLE_DEPOSED:
        return "deposed";
    default:
        return "?";
    }
}

void mc_master_service_ha_enable(mc_master_service *svc)
{
    atomic_store(&svc->ha_role, MC_MASTER_ROLE_STANDBY);
    atomic_store(&svc->ha_until, 0);
    atomic_store(&svc->ha_enabled, true);
}

void mc_master_service_ha_set(mc_master_service *svc, mc_master_role role, int64_t view,
                              const char *leader, uint64_t until_ms)
{
    pthread_mutex_lock(&svc->ha_mu);
    if (leader)
        snprintf(svc->ha_leader, sizeof svc->ha_leader, "%s", leader);
    pthread_mutex_unlock(&svc->ha_mu);
    /* the deadline first when leaving LEADER, last when entering it: a reader that sees
     * LEADER sees its deadline */
    if (role != MC_MASTER_ROLE_LEADER)
        atomic_store(&svc->ha_until, 0);
    atomic_store(&svc->ha_view, view);
    if (role == MC_MASTER_ROLE_LEADER)
        atomic_store(&svc->ha_until, until_ms);
    atomic_store(&svc->ha_role, role);
}

void mc_master_service_ha_extend(mc_master_service *svc, uint64_t until_ms)
{
    if (atomic_load(&svc->ha_role) == MC_MASTER_ROLE_LEADER)
        atomic_store(&svc->ha_until, until_ms);
}

bool mc_master_service_serving(mc_master_service *svc)
{
    if (!atomic_load_explicit(&svc->ha_enabled, memory_order_acquire))
        return true;
    return atomic_load(&svc->ha_role) == MC_MASTER_ROLE_LEADER &&
           mc_now_ms() < atomic_load(&svc->ha_until);
}

int64_t mc_master_service_view(mc_master_service *svc)
{
    return atomic_load_explicit(&svc->ha_view, memory_order_relaxed);
}

void mc_master_service_ha_info(mc_master_service *svc, mc_master_stats *out)
{
    out->role = atomic_load(&svc->ha_role);
    out->view_version = atomic_load(&svc->ha_view);
    pthread_mutex_lock(&svc->ha_mu);
    snprintf(out->leader, sizeof out->leader, "%s", svc->ha_leader);
    pthread_mutex_unlock(&svc->ha_mu);
    mc__repl_stats rs;
    mc__repl_get_stats(svc->repl, &rs); /* zeros without replication */
    out->repl_last_lsn = rs.last_lsn;
    out->repl_applied_lsn = rs.applied_lsn;
    out->repl_acked_lsn = rs.acked_lsn;
    out->repl_fetches = rs.fetches;
    out->repl_sync_degraded = rs.sync_degraded;
    out->repl_refused = rs.refused;
    out->repl_snapshots_loaded = rs.snapshots_loaded;
}
