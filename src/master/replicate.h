/* replicate.h: HA replication of the mutation log, leader -> standbys (src/master only;
 * docs/ha.md "Replication to the standbys").
 *
 * Leader: the log writer (oplog.c) hands every group it wrote to the ring
 * (mc__repl_append); standbys pull the frames with the FETCH_LOG RPC
 * (mc_master_service_fetch_log), whose from_lsn acknowledges what they applied; in sync
 * mode a put_end waits (mc__repl_wait_acked) until a standby acknowledged its record.
 * Standby: a follower thread pulls the leader's frames, applies them in LSN order with
 * mc_master_log_apply and keeps them in its own ring, so that, once promoted, it serves
 * the same LSN sequence to the next standby. A standby whose next LSN the leader's ring
 * no longer holds copies the leader's index with FETCH_SNAPSHOT (a snapshot at some LSN,
 * built off the RPC loops) and continues with FETCH_LOG after it.
 * Who may fetch: only holders of the term token the leader published in the election
 * backend with its lease (docs/ha.md "Who may fetch"). */
#ifndef MOONCAKE_MASTER_REPLICATE_H
#define MOONCAKE_MASTER_REPLICATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/ha.h"
#include "master/master_service.h"

typedef struct mc__repl mc__repl;

/* A ring for svc (svc->repl is set); mode = --ha_sync; ttl_s = the lease TTL (the
 * standby's fetch timeouts derive from it). The ring's size is REPL_RING_MAX (256 MiB)
 * or MC_HA_REPL_RING_BYTES (a size, 4 KiB..64 GiB; for tests that need a ring that
 * drops frames soon). NULL when that variable is malformed, or no eventfd (logged). */
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
/* mc__repl_sync: true when r runs --ha_sync=sync (immutable after create). */
bool mc__repl_sync(const mc__repl *r);

/* Standby, HA thread (each poll round): the leader to follow and its term token (from
 * the election backend, mc_election_read_token; "" when unknown). Starts the follower. */
void mc__repl_follow(mc__repl *r, const char *leader, int64_t view, const char *token);
/* Standby, HA thread: true when the leader refused a fetch for its token since the last
 * call (read the token again). */
bool mc__repl_token_refused(mc__repl *r);
/* HA thread, elected, before mc__repl_promote: this term's token (the fetches admitted
 * carry it). */
void mc__repl_set_token(mc__repl *r, const char *token);
/* HA thread, elected: stops following, applies what the old leader still serves, opens
 * the log (LSNs continue after the last applied one). MC_OK to serve; an error when this
 * standby's copy cannot be trusted (diverged, or too far behind to catch up). */
int mc__repl_promote(mc__repl *r, int64_t view);

typedef struct mc__repl_stats {
    uint64_t applied_lsn, acked_lsn, last_lsn, fetches, records_applied;
    uint64_t sync_waits, sync_degraded;
    uint64_t refused, snapshots_loaded, snapshots_built;
} mc__repl_stats;
void mc__repl_get_stats(mc__repl *r, mc__repl_stats *out);

/* ---- snapshot.c, for the bootstrap ---- */

struct mc__oplog;
/* The leader's index as a snapshot (the file format, magic first; malloc'd, *len bytes)
 * at *lsn = log's last LSN given out before the copy began (the copy is fuzzy: the
 * records after *lsn make it exact, as for a restore). Locks each shard in turn, briefly;
 * run it off the RPC loops. *nobjs: objects in it. */
uint8_t *mc__snapshot_encode(mc_master_service *svc, struct mc__oplog *log, size_t *len,
                             uint64_t *lsn, uint64_t *nobjs);
/* Standby: checks buf is a whole snapshot, then replaces svc's index with it (every
 * segment unmounted with its objects, the snapshot's segments and objects applied with
 * mc_master_log_apply). MC_OK with *lsn, *objs applied, *dropped (a range taken by
 * another object of the fuzzy copy: the log after *lsn settles it); MC_INVALID_PARAMS
 * when buf is not a whole snapshot (svc unchanged). Follower thread. */
int mc__snapshot_load_live(mc_master_service *svc, const uint8_t *buf, size_t len,
                           uint64_t *lsn, uint64_t *objs, uint64_t *dropped);

#endif
