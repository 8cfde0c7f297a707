/* persist.h: the master's mutation log and snapshots (restart without HA keeps the
 * cache; issue 12 item 4; docs/ha.md "Mutation log and snapshots").
 *
 * With persistence on, every metadata mutation that changes what a restarted master
 * would serve is appended to a log (src/master/oplog.c) in one directory: an object
 * completed (put_end / upsert_end, with its replicas' segment ids and addresses and its
 * pins), a key leaving the index (remove, eviction, replacement, clear of its last
 * replica), a replica set shrunk (replica clear), a segment mounted or unmounted. Every
 * `interval_s` a snapshot of the segments and the complete objects is written
 * (src/master/snapshot.c) and the log is rotated; `retention` snapshots are kept and the
 * logs older than the oldest kept one are deleted. A restore loads the newest valid
 * snapshot and replays the log after it.
 *
 * Upstream: `--enable_snapshot`, `--snapshot_interval_seconds` (600),
 * `--snapshot_retention_count` (2), `--enable_snapshot_restore`, local directory
 * MOONCAKE_SNAPSHOT_LOCAL_PATH (upstream-mooncake.md §4.8, §5.1); upstream snapshots
 * only (changes after the last one are lost) by fork + copy-on-write. Ours adds the log,
 * so a put acknowledged before a kill -9 is served after the restart.
 *
 * Threads: one log writer thread (group commit) and one snapshot thread per instance; no
 * disk I/O on the callers' (RPC) threads, and RPC threads do not wait for it either
 * (their replies wait on the durable LSN: "deferred acknowledgements" below). mc_master_persist_start and _stop are called
 * by the program's main thread, start before the service serves, stop after it stopped
 * serving.
 */
#ifndef MOONCAKE_MASTER_PERSIST_H
#define MOONCAKE_MASTER_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/master_service.h"
#include "master/oplog_codec.h"

/* When a put_end is acknowledged relative to its log record (--oplog_sync):
 *   FSYNC  after the record's group was written and fdatasync'ed (survives a crash of
 *          the machine).
 *   WRITE  after the group was written to the kernel (survives kill -9 of the master,
 *          not a power loss); mooncake_master's default.
 *   NONE   at once; the record is written within 2 ms (a crash may lose the last few
 *          milliseconds of puts). */
typedef enum mc_master_log_sync {
    MC_MASTER_LOG_SYNC_FSYNC = 0,
    MC_MASTER_LOG_SYNC_WRITE = 1,
    MC_MASTER_LOG_SYNC_NONE = 2,
} mc_master_log_sync;

typedef struct mc_master_persist_opts {
    const char *dir;       /* directory of the files (created if missing, mode 0700)   */
    bool restore;          /* load the newest snapshot + log before serving; without   */
                           /* it the files in dir are deleted (the service starts empty) */
    uint64_t interval_s;   /* seconds between snapshots (>= 1)                         */
    uint32_t retention;    /* snapshots kept (>= 1)                                    */
    mc_master_log_sync sync;
} mc_master_persist_opts;

typedef struct mc_master_persist mc_master_persist;

/* What a restore found (filled by mc_master_persist_start when opts->restore). */
typedef struct mc_master_restore_info {
    uint64_t snapshot_lsn;    /* LSN of the snapshot loaded (0: none)                     */
    uint64_t last_lsn;        /* last record applied                                      */
    uint64_t records;         /* log records replayed after the snapshot                  */
    uint64_t segments, objects; /* restored (awaiting their owners)                       */
    uint64_t dropped;         /* objects not restored (replica ranges that did not fit)    */
    uint64_t quarantined;     /* ranges of writes started and never completed, reserved   */
                              /* and quarantined (fence.c) until their writer is fenced   */
    uint64_t truncated_bytes; /* torn / corrupt log tail cut off                          */
} mc_master_restore_info;

/* mc_master_persist_start: opens dir; with opts->restore loads the state into svc
 * (which must be new and not serving yet): segments come back marked as awaiting their
 * owner (not read from, not placed on) and their clients get one client_ttl to remount
 * (their pings are answered NEED_REMOUNT until they do; the remount also republishes
 * their segment descriptors), after which the usual client expiry drops them with
 * their objects.
 * Then starts logging every mutation of svc and the snapshot thread. *out = the
 * instance; info (may be NULL) = what the restore found. Returns MC_OK, or an error
 * with err (errlen bytes) naming the file and the reason (MC_INVALID_PARAMS bad
 * options, MC_INTERNAL_ERROR an I/O error). */
int mc_master_persist_start(mc_master_service *svc, const mc_master_persist_opts *opts,
                            mc_master_persist **out, mc_master_restore_info *info,
                            char *err, size_t errlen);

/* mc_master_persist_snapshot_now: writes a snapshot now (blocks the caller until it is
 * renamed into place). Returns MC_OK or MC_INTERNAL_ERROR. Any thread; serialised with
 * the periodic one. */
int mc_master_persist_snapshot_now(mc_master_persist *p);

/* Counters of the instance (monotonic since start). deferred: acknowledgements left to
 * the RPC server (replies sent when their record became durable) instead of waited for
 * on an RPC thread. */
typedef struct mc_master_persist_stats {
    uint64_t records, bytes, groups, fsyncs, snapshots, snapshot_failures, write_errors;
    uint64_t last_lsn, durable_lsn, deferred;
} mc_master_persist_stats;

/* ---- deferred acknowledgements (the RPC server's side of group commit) ----
 *
 * A put_end (or a client's removal) is acknowledged once its record is as safe as
 * --oplog_sync promises. Called from a thread that sent no notify, the service call
 * itself waits (the thread blocks until its group is written). The RPC server instead
 * brackets each request with mc_master_log_defer_begin / _end: the call returns at once
 * with its result, _end gives the LSN the reply must wait for (0: none), the server
 * keeps the reply (and every later reply of that connection, in order) until
 * mc_master_log_is_durable(lsn), and the log writer calls the notify registered with
 * mc_master_log_set_notify after each group that may have made a kept reply due. So an
 * RPC thread never waits for a disk flush: the requests that arrive while a group is
 * being written and fsync'ed form the next group, however many connections send them.
 * Not with HA replication (--ha_sync=sync waits on the RPC thread as before).
 *
 * defer_begin / _end: the calling thread only (thread-local state). is_durable: any
 * thread (takes the log mutex); true for lsn 0, without a log, and once the log failed
 * or stops (acknowledged without a record, as documented for an I/O error). set_notify:
 * fn(arg) is called on the log writer thread (keep it short: post to your loops); fn
 * NULL unregisters, and no call is made after that returns; before serving / after it
 * stopped. Ours (upstream has no log). */
void mc_master_log_defer_begin(void);
uint64_t mc_master_log_defer_end(void);
bool mc_master_log_is_durable(mc_master_service *svc, uint64_t lsn);
void mc_master_log_set_notify(mc_master_service *svc, void (*fn)(void *), void *arg);

void mc_master_persist_get_stats(mc_master_persist *p, mc_master_persist_stats *out);

/* mc_master_persist_stop: stops logging (the service must not be mutated any more:
 * stop the RPC server first), flushes and fsyncs the log, joins the threads, frees p.
 * NULL is fine. */
void mc_master_persist_stop(mc_master_persist *p);

/* mc_master_log_apply: applies one record (decoded from a frame, lsn from its header) to
 * svc: the operation a standby master runs on the stream of a leader's frames (and the
 * restore's single-record path). put: the key now maps to the record's replicas (space
 * reserved at their addresses; a replica on an unknown segment is left out, an object
 * left with none is not added); remove: the key leaves (its space freed); mount: the
 * segment is added awaiting its owner (SEGMENT_ALREADY_EXISTS is fine); unmount: the
 * segment goes with its replicas. start (a write in flight on the leader): kept aside,
 * not an object and no space reserved (src/master/inflight.c); a later put of its key
 * with its replicas forgets it; mc_master_log_promote quarantines what is left.
 * task / task_end (copy / move tasks): kept aside the same way, adopted at promotion.
 * header / end: ignored. Returns MC_OK, or
 * MC_INVALID_PARAMS for a malformed record, MC_NO_AVAILABLE_HANDLE when a replica range
 * is taken (the key is then absent). Caller: one thread applies a stream in order; the
 * service may serve reads meanwhile. */
int mc_master_log_apply(mc_master_service *svc, uint64_t lsn, const Mclog__LogRecord *rec);

/* mc_master_log_promote: svc, a standby that applied its leader's stream, becomes the
 * leader (HA thread, after the last records were applied, before the gate opens). The
 * writes the old leader had in flight (`start` records with no later `put` of their key
 * and replicas) are not objects here: each of their ranges still free is reserved and
 * quarantined under its writer (fence.c, as a revoked write on one master: reused only
 * after the segment's owner and the writer acknowledged a fence above the write's
 * logged epoch, or the writer expired and put_start_release_timeout_sec passed with the
 * owner fenced), so bytes the old leader's writer still sends land in no new object;
 * their writers become known clients (one client_ttl to reach this master). A range a
 * copied object occupies is left to it. Also raises the fence epochs this master hands
 * out above every logged one and its wall-clock base. A writer's late put_end finds no
 * write (OBJECT_NOT_FOUND): its client's put fails and a retry starts afresh.
 * Copy / move tasks: the finished ones are reported by query_task as they ended; the
 * unfinished ones become FAILED ("interrupted by a master failover or restart ...",
 * logged as their task_end) and their target reservations are quarantined under their
 * executors. mc_master_persist_start calls it after a restore too (the restore
 * quarantines the writes itself; this adopts the tasks).
 * Returns the number of ranges quarantined. Not in upstream (its standbys copy nothing
 * of the writes in flight). */
uint64_t mc_master_log_promote(mc_master_service *svc);

#endif
