/* leader.c: the master client's leader lookup for HA masters (docs/ha.md): a
 * master_server_addr "etcd://h:p;h:p" (or "redis://h:p") names where the masters elect
 * their leader, not a master; the leader's address and view come from the key the
 * leader publishes (metadata/election.h: mooncake-store/<cluster_id>/master_view). The
 * cluster id is the env MC_MASTER_CLUSTER_ID (default "mooncake_cluster", upstream's
 * --cluster_id default). The connection pool (master_conn.c) asks here when a call
 * cannot reach a serving master; there is no watch: a leader change is found by the call
 * (or the store's heartbeat) that fails on the old one, then one read per retry. */
#include "client/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/xalloc.h"
#include "metadata/election.h"
#include "mooncake/log.h"

#define TAG MC__MASTER_TAG

struct mc__leader {
    pthread_mutex_t mu; /* one lookup at a time (the election client is single-threaded) */
    mc_election *el;
};

bool mc__leader_locator(const char *address)
{
    return address &&
           (strncmp(address, "etcd://", 7) == 0 || strncmp(address, "redis://", 8) == 0 ||
            strncmp(address, "k8s://", 6) == 0);
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
    const char *cid = mc_env_str("MC_MASTER_CLUSTER_ID");
    if (!cid || !*cid)
        cid = "mooncake_cluster";
    mc__leader *l = mc_xcalloc(1, sizeof *l);
    /* a TTL is needed by the election client; lookups never take a lease */
    int rc = mc_election_create(address, cid, 2, &l->el);
    if (rc != MC_OK) {
        free(l);
        return rc == MC_NOT_SUPPORTED ? MC_NOT_SUPPORTED : MC_INVALID_PARAMS;
    }
    pthread_mutex_init(&l->mu, NULL);
    *out = l;
    return MC_OK;
}

void mc__leader_destroy(mc__leader *l)
{
    if (!l)
        return;
    mc_election_destroy(l->el);
    pthread_mutex_destroy(&l->mu);
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
