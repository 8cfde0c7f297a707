/* ha.h: the master's side of HA (--enable_ha; docs/ha.md): one thread that runs the
 * leader election (metadata/election.h) and drives the service's serve gate
 * (master_service.h, "HA role and fencing").
 *
 * Life of a master with HA: it starts as a STANDBY (its RPC port answers every request
 * with UNAVAILABLE_IN_CURRENT_STATUS) and campaigns every poll interval (TTL / 10,
 * 50..250 ms; 1 s while etcd does not answer) until the leader key is absent and it
 * wins it; once elected it calls opts.on_promote
 * (after the index replication of opts.sync, src/master/replicate.c, has applied the
 * tail of the old leader's log it could still fetch), then serves as LEADER while it renews its lease every TTL / 3. A leader that
 * cannot renew before its deadline, or finds its lease or key gone, becomes DEPOSED for
 * good (it never serves again: its index may be behind a newer leader's) and calls
 * opts.on_deposed; mooncake_master then exits with code 3 after one TTL, for a
 * supervisor to restart it as a standby.
 *
 * Threads: the HA thread only; the callbacks run on it.
 */
#ifndef MOONCAKE_MASTER_HA_H
#define MOONCAKE_MASTER_HA_H

#include <stdbool.h>
#include <stdint.h>

#include "master/master_service.h"

typedef struct mc_master_ha mc_master_ha;

/* --ha_sync (docs/ha.md "Replication to the standbys"): when a put_end (and a removal a
 * client asked for) is acknowledged relative to the standbys.
 *   NONE   no replication: a new leader starts empty (the behaviour before replication).
 *   ASYNC  the record is in the leader's replication ring when the put is acknowledged;
 *          standbys pull it within milliseconds (default). A failover loses what the
 *          new leader had not fetched yet.
 *   SYNC   acknowledged once a standby fetched past the record. With no standby
 *          fetching for 2 s the leader acknowledges at once (counted, WARN), and a
 *          standby that does not fetch within 1 s releases the put the same way. */
typedef enum mc_master_ha_sync {
    MC_MASTER_HA_SYNC_NONE = 0,
    MC_MASTER_HA_SYNC_ASYNC = 1,
    MC_MASTER_HA_SYNC_SYNC = 2,
} mc_master_ha_sync;

struct mc_auth_secret;

typedef struct mc_master_ha_opts {
    const char *conn;       /* etcd endpoints (election.h); borrowed for the call       */
    const char *cluster_id; /* [0-9A-Za-z_.-]{1,128}; borrowed                          */
    const char *self;       /* "host:port" clients reach our RPC at; borrowed           */
    uint32_t ttl_s;         /* lease TTL, seconds                                       */
    /* elected, before serving: returns MC_OK to serve, else the leadership is given up
     * (resigned) and the campaign goes on. NULL: serve at once. */
    int (*on_promote)(void *ctx, int64_t view);
    void (*on_deposed)(void *ctx); /* after the gate closed for good; NULL: none          */
    /* each poll round as a STANDBY, with the leader's address and view: where a standby
     * pulls the leader's mutation log (opts.sync, replicate.c: that runs first, this
     * hook is extra). NULL: none. */
    void (*on_standby)(void *ctx, const char *leader, int64_t view);
    void *ctx;
    mc_master_ha_sync sync; /* replication of the index to the standbys (0: none)       */
    /* the cluster secret (common/auth.h) a standby's fetch connections prove they hold
     * to the leader's RPC port (label "master-rpc"); borrowed, must outlive the HA
     * object; NULL or len 0: none */
    const struct mc_auth_secret *auth;
} mc_master_ha_opts;

/* mc_master_ha_start: enables svc's gate (STANDBY) and starts the HA thread.
 * Returns MC_OK with *out; MC_INVALID_PARAMS / MC_NOT_SUPPORTED as mc_election_create
 * (logged); MC_INTERNAL_ERROR when the thread cannot start. */
int mc_master_ha_start(mc_master_service *svc, const mc_master_ha_opts *opts,
                       mc_master_ha **out);

/* mc_master_ha_destroy: stops the thread (and a standby's replication follower); a
 * leader resigns (revokes its lease, so a standby takes over at once) after its gate is
 * closed. The replication ring and the log stay until mc_master_ha_free. NULL: no-op. */
void mc_master_ha_destroy(mc_master_ha *ha);

/* mc_master_ha_free: frees what mc_master_ha_destroy left (the replication ring and the
 * log a promoted master wrote): call it after the RPC server stopped. NULL: no-op. */
void mc_master_ha_free(mc_master_ha *ha);

#endif
