/* replicate.h: HA replication of the mutation log, leader -> standbys (src/master only;
 * docs/ha.md "Replication to the standbys").
 *
 * Leader: the log writer (oplog.c) hands every group it wrote to the ring
 * (mc__repl_append); standbys pull the frames with the FETCH_LOG RPC
 * (mc_master_service_fetch_log), whose from_lsn acknowledges what they applied; in sync
 * mode a put_end waits (mc__repl_wait_acked) until a standby acknowledged its record.
 * Standby: a follower thread pulls the leader's frames, applies them in LSN order with
 * mc_master_log_apply and keeps them in its own ring, so that, once promoted, it serves
 * the same LSN sequence to the next standby. */
#ifndef MOONCAKE_MASTER_REPLICATE_H
#define MOONCAKE_MASTER_REPLICATE_H

#include <stddef.h>
#include <stdint.h>

#include "master/ha.h"
#include "master/master_service.h"

typedef struct mc__repl mc__repl;

/* A ring for svc (svc->repl is set); mode = --ha_sync; ttl_s = the lease TTL (the
 * standby's fetch timeouts derive from it). */
mc__repl *mc__repl_create(mc_master_service *svc, mc_master_ha_sync mode, uint32_t ttl_s,
                          const struct mc_auth_secret *auth);
/* Stops the follower thread (a standby). The ring stays (RPC threads may still read it). */
void mc__repl_stop(mc__repl *r);
/* Closes the log opened at promotion and frees r (after the RPC server stopped). */
void mc__repl_free(mc__repl *r);

/* Leader, log writer thread: frames[0..len) (whole frames, LSNs up to last) were logged. */
void mc__repl_append(mc__repl *r, const uint8_t *frames, size_t len, uint64_t last);
/* Leader, a put_end's thread (no lock held): in sync mode waits until a standby fetched
 * past lsn, or the documented degradation rule lets it go (docs/ha.md). */
void mc__repl_wait_acked(mc__repl *r, uint64_t lsn);

/* Standby, HA thread (each poll round): the leader to follow. Starts the follower. */
void mc__repl_follow(mc__repl *r, const char *leader, int64_t view);
/* HA thread, elected: stops following, applies what the old leader still serves, opens
 * the log (LSNs continue after the last applied one). MC_OK to serve; an error when this
 * standby's copy cannot be trusted (diverged, or too far behind to catch up). */
int mc__repl_promote(mc__repl *r, int64_t view);

typedef struct mc__repl_stats {
    uint64_t applied_lsn, acked_lsn, last_lsn, fetches, records_applied;
    uint64_t sync_waits, sync_degraded;
} mc__repl_stats;
void mc__repl_get_stats(mc__repl *r, mc__repl_stats *out);

#endif
