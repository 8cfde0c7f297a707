/* master_service.h: the mooncake_master core (metadata only; no networking).
 *
 * The service owns: mounted segments (one offset allocator each, metadata only: the
 * memory itself is never touched), the object index (key -> replicas), read leases,
 * soft/hard pins, watermark eviction, in-flight put bookkeeping and client liveness.
 * Bytes never flow through it. The RPC server (the RPC files in src/master and
 * tools/mooncake_master) wraps these calls one to one (rpc/master_rpcs.h lists them).
 * Internals: master/internal.h (files, structs, locks and their order).
 *
 * Upstream semantics: ../shared/reference/upstream-mooncake.md §4 (mooncake-store
 * `master_service.cpp`, `rpc_service.cpp`), contract ../shared/API.md §4-§5, where we are
 * stricter: keys are non-empty byte strings of at most MC_MASTER_KEY_MAX bytes (any bytes,
 * NUL included; INVALID_PARAMS otherwise); zero-size objects are real objects.
 *
 * Threads: every function is thread-safe. The index is sharded by xxhash of the key with
 * one mutex per shard, so operations on different keys run in parallel. Callbacks
 * (foreach, regex) run with an internal lock held: they must not call back into the
 * service and should be quick.
 *
 * Status codes: the return values are upstream's (include/mooncake/status.h). Every
 * per-key function checks the key first (INVALID_PARAMS for an empty key or one longer
 * than MC_MASTER_KEY_MAX, or a NULL pointer with a non-zero length).
 *
 * Time: the service reads a millisecond monotonic clock, mc_now_ms() unless the config
 * supplies one (tests pass a fake clock for determinism). Leases, soft pins, client TTLs
 * and put timeouts are all measured on it.
 *
 * Zero-size objects: a replica of size 0 is placed on a segment like any other (distinct
 * segments, preferred first) but takes no space: its address is the segment's base and
 * its size 0. It is dropped when its segment is unmounted, like any replica. Readers need
 * no transfer for it.
 */
#ifndef MOONCAKE_MASTER_SERVICE_H
#define MOONCAKE_MASTER_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/mc_api.h"
#include "mooncake/status.h"
#include "rpc/master_rpcs.h"  /* the RPC table: op enums and metric names */
#include "rpc/master_types.h" /* limits and value types shared with clients */

/* mc_master_strategy_parse: "random" / "free_ratio_first" -> strategy; -1 otherwise. */
MC_API int mc_master_strategy_parse(const char *name);

/* Clock: returns monotonic milliseconds. */
typedef uint64_t (*mc_master_clock_fn)(void *ctx);

/* Called by mc_master_service_tick once per client that expired (silent for client_ttl),
 * after its segments were unmounted. names: the distinct names of the segments it had
 * mounted (n may be 0), borrowed for the call. Runs on the ticking thread with no service
 * lock held: it may take its time (the next tick waits) and may call the service. The
 * master uses it for upstream's --enable_metadata_cleanup_on_timeout (upstream
 * ClientMonitorFunc, upstream-mooncake.md §4.7). */
typedef void (*mc_master_client_expired_fn)(void *ctx, mc_master_uuid client,
                                            const char *const *names, size_t n);

/* Service configuration. Names and defaults are upstream's mooncake_master flags
 * (upstream-mooncake.md §5.1); the unit is in each field's name or comment. Fill with
 * mc_master_config_init() and change what you need. */
typedef struct mc_master_config {
    uint64_t default_kv_lease_ttl;            /* ms, 10000: read lease per get/exist     */
    uint64_t default_kv_soft_pin_ttl;         /* ms, 1800000 (30 min)                    */
    uint64_t max_kv_soft_pin_ttl;             /* ms, 86400000 (24 h): larger -> INVALID  */
    bool allow_evict_soft_pinned_objects;     /* true                                    */
    double eviction_ratio;                    /* 0.05, in [0, 1]                         */
    double eviction_high_watermark_ratio;     /* 0.90, in [0, 1]                         */
    uint64_t client_ttl;                      /* s, 10: client dead after this silence   */
    uint64_t put_start_discard_timeout_sec;   /* s, 30: stale put may be pre-empted      */
    uint64_t put_start_release_timeout_sec;   /* s, 600: unfinished put space released   */
    mc_master_strategy allocation_strategy;   /* RANDOM                                  */
    /* Ours (not upstream flags): */
    uint32_t shard_count;      /* index shards, power of two in [1, 65536]; 1024          */
    uint32_t alloc_alignment;  /* bytes, power of two in [1, 4096]; 64: every replica's   */
                               /* address is a multiple of it (relative to address 0)    */
    bool sync_eviction;        /* true: a put_start that finds no space evicts inline and */
                               /* retries once before NO_AVAILABLE_HANDLE (upstream only  */
                               /* flags the eviction thread, §4.5); false: upstream's way */
    uint64_t client_ttl_ms;    /* ms; 0 = use client_ttl * 1000 (tests use small values)  */
    uint64_t stall_threshold_ms; /* ms; 0 = off (the default). A gap longer than this     */
                               /* between the end of one tick and the start of the next  */
                               /* means the master itself was stalled (SIGSTOP, a paused */
                               /* VM, swapping): the clients' heartbeats were queued, not */
                               /* lost, so every client gets a grace of client_ttl from  */
                               /* that tick before it can expire (once per silence), and */
                               /* a ping arriving while the tick is that late is taken   */
                               /* even past the client's deadline. mooncake_master sets  */
                               /* its tick period + max(1 s, client_ttl / 2).            */
    mc_master_clock_fn clock;  /* NULL = mc_now_ms                                        */
    void *clock_ctx;
    mc_master_client_expired_fn on_client_expired; /* NULL = none                         */
    void *on_client_expired_ctx;
    uint64_t fence_epoch_base; /* the fence epoch of a (writer, segment) pair never raised */
                               /* (docs/consistency.md); 0 = mc_wall_ms() * 1024, so a    */
                               /* restarted master passes every epoch handed out before   */
    /* The disk tier (docs/ssd-tier.md; upstream --enable_offload & co., §4.10): */
    bool enable_offload;       /* false: clients may register a disk tier (offload        */
                               /* heartbeat); without offload_on_evict every object is    */
                               /* offloaded to its owner's disk at put_end (write-through) */
    bool offload_on_evict;     /* false: offload when eviction would drop an object's     */
                               /* memory replicas instead of at put_end                   */
    bool promotion_on_hit;     /* false: a disk-only object read promotion_admission_     */
                               /* threshold times gets a memory replica again             */
    uint32_t promotion_admission_threshold; /* 2 (>= 1)                                    */
    uint64_t offload_task_timeout_ms; /* 30000: a task handed out and not reported by then */
                               /* is given up (the object becomes evictable as before)    */
    /* Replica copy / move tasks (tasks.c; upstream's task-manager flags): */
    uint32_t max_total_finished_tasks;   /* 10000: finished tasks kept for query_task;   */
                                         /* the oldest is forgotten past it              */
    uint32_t max_total_pending_tasks;    /* 10000: more -> TASK_PENDING_LIMIT_EXCEEDED   */
    uint32_t max_total_processing_tasks; /* 10000: fetched and unfinished at most        */
    uint64_t pending_task_timeout_ms;    /* 300000: not fetched by then -> FAILED        */
    uint64_t processing_task_timeout_ms; /* 300000: fetched, not reported -> FAILED      */
    bool check_segments;       /* false (the default: upstream's checks only); true (what */
                               /* mooncake_master sets; docs/security.md, issue 11): a    */
                               /* mount is refused with INVALID_PARAMS when its base is 0 */
                               /* or its range overlaps another live segment of the same */
                               /* client (another id), and with ILLEGAL_CLIENT when its   */
                               /* name is mounted by another client and the host ids do  */
                               /* not prove a restart on the same host (both non-empty   */
                               /* and equal: then the older one is taken over, as before) */
    const char *fs_dir;        /* NULL/"": none. Shared-FS DISK replicas (upstream         */
                               /* --root_fs_dir, §4.10; docs/ssd-tier.md): the directory  */
                               /* "<root_fs_dir>/<cluster_id>" every client mounts; every */
                               /* new object is written there by the client holding its   */
                               /* memory replica. Absolute, < 200 bytes; copied at create. */
                               /* The master never touches it. Not with enable_offload.   */
} mc_master_config;

/* mc_master_config_init: fills *cfg with the defaults above. */
MC_API void mc_master_config_init(mc_master_config *cfg);

/* mc_master_put_config_init: replica_num 1, nothing preferred, no pins, default
 * strategy. */
MC_API void mc_master_put_config_init(mc_master_put_config *cfg);

typedef struct mc_master_service mc_master_service;

/* mc_master_service_create: a new, empty service (no segments, no objects).
 * Returns OK, or INVALID_PARAMS when a config value is out of range (ratios outside
 * [0, 1], shard_count / alloc_alignment not a power of two in range). *out receives the
 * service, owned by the caller until mc_master_service_destroy. */
MC_API int mc_master_service_create(const mc_master_config *cfg, mc_master_service **out);

/* mc_master_service_destroy: frees everything. No call may be in flight. NULL is ok. */
MC_API void mc_master_service_destroy(mc_master_service *svc);

/* ---- segments and clients (upstream MountSegment / ReMountSegment / UnmountSegment /
 * Ping; upstream-mooncake.md §4.1, §4.7) ---- */

/* mc_master_service_mount_segment: creates an allocator over [base, base+size) owned
 * by client_id and marks the client alive (its TTL starts now).
 * Returns OK; SEGMENT_ALREADY_EXISTS (the id is mounted); INVALID_PARAMS (bad name,
 * size, range or string lengths; with cfg.check_segments also base 0 or a range that
 * overlaps another of the client's live segments); ILLEGAL_CLIENT (cfg.check_segments:
 * the name is mounted by another client from another or an unknown host). */
MC_API int mc_master_service_mount_segment(mc_master_service *svc,
                                           const mc_master_segment *seg,
                                           mc_master_uuid client_id);

/* mc_master_service_remount_segments: after NEED_REMOUNT: marks the client alive and
 * mounts each segment that is not mounted yet (one already mounted under the same id is
 * left as it is). n may be 0 (a client without segments re-registers). Returns OK, or
 * the first error (segments before it stay mounted); INVALID_PARAMS for n > 65536. */
MC_API int mc_master_service_remount_segments(mc_master_service *svc,
                                              const mc_master_segment *segs, size_t n,
                                              mc_master_uuid client_id);

/* mc_master_service_unmount_segment: removes the segment; every replica on it is
 * dropped (in-flight ones too); objects left with no replica are erased (a put in flight
 * so erased is remembered for its writer's put_end / put_revoke: REPLICA_IS_GONE).
 * Returns OK; SEGMENT_NOT_FOUND; ILLEGAL_CLIENT when the segment belongs to another
 * client. */
MC_API int mc_master_service_unmount_segment(mc_master_service *svc,
                                             mc_master_uuid segment_id,
                                             mc_master_uuid client_id);

/* mc_master_service_unmount_segment_grace: grace_ms 0 is mc_master_service_unmount_segment.
 * grace_ms > 0 is upstream's GracefulUnmountSegment: from now on placement skips the
 * segment (no new allocation) and its capacity leaves the gauges, but its replicas stay
 * readable until now + grace_ms, when the tick finishes the unmount (replicas dropped,
 * objects left with none erased). A segment in its grace period counts as absent for a
 * second unmount (SEGMENT_NOT_FOUND). grace_ms is capped at
 * MC_MASTER_MAX_UNMOUNT_GRACE_MS (INVALID_PARAMS above it). Codes otherwise as
 * mc_master_service_unmount_segment. Threads: any. */
#define MC_MASTER_MAX_UNMOUNT_GRACE_MS (24ull * 3600 * 1000)
MC_API int mc_master_service_unmount_segment_grace(mc_master_service *svc,
                                                   mc_master_uuid segment_id,
                                                   mc_master_uuid client_id, uint64_t grace_ms);

/* mc_master_service_ping: heartbeat. A known, live client gets CLIENT_OK and its TTL is
 * extended to now + client_ttl; an unknown or expired one gets CLIENT_NEED_REMOUNT (it
 * becomes known again through mount/remount). out also receives the fences pending for
 * the client (see mc_master_service_ping_fences). Returns OK. */
MC_API int mc_master_service_ping(mc_master_service *svc, mc_master_uuid client_id,
                                  mc_master_ping_result *out);

/* mc_master_service_ping_fences: mc_master_service_ping that also records the fences the
 * client acknowledges (req, NULL = none; docs/consistency.md): owner_acks[i] = (writer W,
 * e): this client's engine refuses W's WRITEs below e; writer_acks[i] = (endpoint S, e):
 * this client starts no WRITE below e to S and its copies below e have drained. An
 * acknowledgement counts only from the client the fence was for (the owner of S, or W).
 * Quarantined space whose fences are now both acknowledged is freed before the reply.
 * out (may be NULL) receives, besides the status, up to MC_MASTER_MAX_FENCES fences of
 * each kind pending for this client, whatever its status (a writer that returns under
 * its id gets them with its first ping): writer_fences to apply as owner, target_fences
 * as writer; each is sent again in every reply until acknowledged.
 * Returns OK; INVALID_PARAMS (more than MC_MASTER_MAX_FENCES of a kind, a NULL array
 * with a count, a segment name not NUL-terminated within MC_MASTER_NAME_MAX). Not in
 * upstream. */
MC_API int mc_master_service_ping_fences(mc_master_service *svc, mc_master_uuid client_id,
                                         const mc_master_ping_request *req,
                                         mc_master_ping_result *out);

/* ---- writes (upstream PutStart/PutEnd/PutRevoke, Upsert*; §4.1, §4.3) ---- */

/* mc_master_service_put_start: reserves space for `size` bytes on up to replica_num
 * distinct segments (distinct names), preferred segments first, then by strategy, and
 * inserts the object as in flight (replicas PROCESSING). out (caller's) receives them,
 * each with the fence epoch e(client, its segment) the writer must put on its writes
 * (docs/consistency.md).
 * Returns OK;
 *   INVALID_PARAMS: bad key, replica_num 0, bad soft-pin combination, size above
 *     MC_MASTER_SEGMENT_MAX_SIZE, too many preferred segments;
 *   OBJECT_ALREADY_EXISTS: the key is complete, or in flight and younger than
 *     put_start_discard_timeout_sec (an older in-flight put is pre-empted: its space is
 *     quarantined (see put_revoke) and this put proceeds);
 *   NO_AVAILABLE_HANDLE: no segment can hold it (none mounted, or full even after
 *     eviction). Eviction is requested for the next tick; with sync_eviction the put
 *     evicts inline and retries once first. */
MC_API int mc_master_service_put_start(mc_master_service *svc, mc_master_uuid client_id,
                                       const void *key, size_t key_len, uint64_t size,
                                       const mc_master_put_config *cfg,
                                       mc_master_replica_list *out);

/* mc_master_service_put_end: publishes an in-flight object: replicas become COMPLETE,
 * the soft-pin deadline (if any) starts. Returns OK; REPLICA_IS_GONE (this client's put
 * lost every replica to an unmount of its segment while in flight: nothing is stored,
 * the client may put again from put_start; answered once, then OBJECT_NOT_FOUND);
 * OBJECT_NOT_FOUND (absent, or its put was pre-empted/released); ILLEGAL_CLIENT (in
 * flight for another client); INVALID_WRITE (the object is already complete). A put
 * that lost only some replicas to an unmount ends with the others (OK). */
MC_API int mc_master_service_put_end(mc_master_service *svc, mc_master_uuid client_id,
                                     const void *key, size_t key_len);

/* mc_master_service_put_revoke: abandons an in-flight put: erases the object; its space
 * is quarantined (docs/consistency.md): e(client, segment) is raised past the put's
 * epoch and the space is reused only once the segment's owner and the client have both
 * acknowledged the fence in a ping (mc_master_service_ping_fences), or the segment is
 * unmounted, or the client expired and put_start_release_timeout_sec passed with the
 * owner's acknowledgement in. The same holds for a put pre-empted by put_start, one
 * released by tick, and the puts of an expired client (discarded at expiry). Returns
 * OK; REPLICA_IS_GONE (as put_end: an unmount dropped the put already); OBJECT_NOT_FOUND;
 * ILLEGAL_CLIENT; INVALID_WRITE (complete). */
MC_API int mc_master_service_put_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                        const void *key, size_t key_len);

/* mc_master_service_upsert_start: insert or replace. Absent key: as put_start. A complete
 * object: while a reader holds a lease, new space is placed and the old object leaves
 * the index with its space kept until the lease's deadline (the deferred frees of a
 * forced remove: a reader's bytes never change under it; upstream also lets an upsert
 * replace a leased object); without a lease, same size -> the same allocations are
 * reused in place, a different size -> new space (the old is freed); either way the
 * object is in flight (not readable) until upsert_end, and pins follow cfg (soft_pin
 * PRESERVE keeps the old soft pin). An object in flight: as put_start
 * (OBJECT_ALREADY_EXISTS unless stale). Other codes as put_start. */
MC_API int mc_master_service_upsert_start(mc_master_service *svc, mc_master_uuid client_id,
                                          const void *key, size_t key_len, uint64_t size,
                                          const mc_master_put_config *cfg,
                                          mc_master_replica_list *out);

/* mc_master_service_upsert_end / upsert_revoke: as put_end / put_revoke (a revoked upsert
 * erases the object: its old bytes may have been partly overwritten). */
MC_API int mc_master_service_upsert_end(mc_master_service *svc, mc_master_uuid client_id,
                                        const void *key, size_t key_len);
MC_API int mc_master_service_upsert_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                           const void *key, size_t key_len);

/* Batch writes: keys[i] / sizes[i] -> statuses[i] (and outs[i] for *_start); one config
 * for all. Items are independent (a duplicate key inside one batch: the first start wins,
 * later ones get OBJECT_ALREADY_EXISTS). n == 0 is fine. Returns OK when every item is
 * OK, else the first failing item's code; INVALID_PARAMS for NULL arrays with n > 0. */
MC_API int mc_master_service_batch_put_start(mc_master_service *svc, mc_master_uuid client_id,
                                             const mc_master_key *keys,
                                             const uint64_t *sizes, size_t n,
                                             const mc_master_put_config *cfg,
                                             mc_master_replica_list *outs, int *statuses);
MC_API int mc_master_service_batch_put_end(mc_master_service *svc, mc_master_uuid client_id,
                                           const mc_master_key *keys, size_t n,
                                           int *statuses);
MC_API int mc_master_service_batch_put_revoke(mc_master_service *svc,
                                              mc_master_uuid client_id,
                                              const mc_master_key *keys, size_t n,
                                              int *statuses);
MC_API int mc_master_service_batch_upsert_start(mc_master_service *svc,
                                                mc_master_uuid client_id,
                                                const mc_master_key *keys,
                                                const uint64_t *sizes, size_t n,
                                                const mc_master_put_config *cfg,
                                                mc_master_replica_list *outs,
                                                int *statuses);
MC_API int mc_master_service_batch_upsert_end(mc_master_service *svc,
                                              mc_master_uuid client_id,
                                              const mc_master_key *keys, size_t n,
                                              int *statuses);
MC_API int mc_master_service_batch_upsert_revoke(mc_master_service *svc,
                                                 mc_master_uuid client_id,
                                                 const mc_master_key *keys, size_t n,
                                                 int *statuses);

/* ---- reads (upstream GetReplicaList, ExistKey; §4.1, §4.4) ---- */

/* mc_master_service_get_replica_list: the object's COMPLETE replicas; grants or extends
 * the read lease to now + default_kv_lease_ttl (out->lease_ttl_ms) and marks it recently
 * used. Returns OK; OBJECT_NOT_FOUND; REPLICA_IS_NOT_READY (only in-flight replicas). */
MC_API int mc_master_service_get_replica_list(mc_master_service *svc, const void *key,
                                              size_t key_len, mc_master_replica_list *out);

/* Batch: outs[i]/statuses[i] per key. Returns OK when every item is OK, else the first
 * failing item's code. */
MC_API int mc_master_service_batch_get_replica_list(mc_master_service *svc,
                                                    const mc_master_key *keys, size_t n,
                                                    mc_master_replica_list *outs,
                                                    int *statuses);

/* Called once per matching key by the regex functions; key/list are borrowed for the
 * call. Return 0 to continue, non-zero to stop. Runs under a shard lock. */
typedef int (*mc_master_regex_cb)(const void *key, size_t key_len,
                                  const mc_master_replica_list *list, void *ctx);

/* mc_master_service_get_replica_list_by_regex: every complete object whose key matches
 * the PCRE2 pattern (unanchored search, as upstream's std::regex_search; pattern is
 * pattern_len bytes, <= MC_MASTER_REGEX_MAX) gets a lease and is passed to cb.
 * Returns OK (also with no match); INVALID_PARAMS for a bad or too-long pattern. */
MC_API int mc_master_service_get_replica_list_by_regex(mc_master_service *svc,
                                                       const char *pattern,
                                                       size_t pattern_len,
                                                       mc_master_regex_cb cb, void *ctx);

/* mc_master_service_exist_key: 1 when the object exists with a complete replica (and a
 * lease is granted, as upstream), 0 when absent or only in flight, INVALID_PARAMS for a
 * bad key. */
MC_API int mc_master_service_exist_key(mc_master_service *svc, const void *key,
                                       size_t key_len);

/* Batch: results[i] = 1 / 0 / negative code per key. Returns OK, or INVALID_PARAMS for
 * NULL arrays with n > 0. Batch metrics count only negative results as failed items: an
 * absent key (0) is an answer, not a failure. */
MC_API int mc_master_service_batch_exist_key(mc_master_service *svc,
                                             const mc_master_key *keys, size_t n,
                                             int *results);

/* ---- removal (upstream Remove / RemoveByRegex / RemoveAll / BatchRemove) ---- */

/* mc_master_service_remove: erases the object and frees its space.
 * Returns OK; OBJECT_NOT_FOUND; REPLICA_IS_NOT_READY (a write is in flight, even with
 * force); OBJECT_HAS_LEASE (a reader's lease is active and !force). Hard pins do not
 * stop it.
 * Forced removal under an active lease (here and in batch_remove, remove_by_regex and
 * remove_all): the key is gone at once (new readers get OBJECT_NOT_FOUND, a put of the key
 * may start), but the object's space stays reserved until the lease's deadline, so a
 * reader still transferring never gets bytes a later put wrote (API.md §5: a read never
 * returns bytes that may have been overwritten). Tick frees it after the deadline; until
 * then it counts in allocated_bytes and in deferred_free_bytes/_keys. */
MC_API int mc_master_service_remove(mc_master_service *svc, const void *key, size_t key_len,
                                    bool force);

/* Batch: statuses[i] per key. Returns OK when every item is OK, else the first failing
 * item's code. */
MC_API int mc_master_service_batch_remove(mc_master_service *svc, const mc_master_key *keys,
                                          size_t n, bool force, int *statuses);

/* mc_master_service_batch_replica_clear (upstream BatchReplicaClear): for each key, drops
 * the object's replicas on the segments named segment_name (segment_name_len bytes, not
 * NUL-terminated, < MC_MASTER_NAME_MAX; matched against the names the segments were
 * mounted with), or the whole object when segment_name_len is 0. An object left with no
 * replica is erased. The replicas' space is given back at once through the space.c
 * release seam (the object is complete and unleased, so no reader or writer can still
 * touch it). Only the object's own writer (client_id = the client whose put/upsert
 * created it) may clear it, and only while no reader's lease is active; pins (soft or
 * hard) do not stop it. statuses[i] per key: OK (cleared); OBJECT_NOT_FOUND;
 * ILLEGAL_CLIENT (another client's object); REPLICA_IS_NOT_READY (a write in flight);
 * OBJECT_HAS_LEASE; REPLICA_NOT_FOUND (segment_name given and no replica on it);
 * INVALID_PARAMS (bad key). Upstream answers with the list of cleared keys, skipping the
 * others: the keys with status OK, in order. Returns OK when every item is OK, else the
 * first failing item's code; INVALID_PARAMS (every status too) for NULL arrays with
 * n > 0 or a bad segment_name. Thread-safe. Counted as the batch family
 * master_batch_replica_clear_*. */
MC_API int mc_master_service_batch_replica_clear(mc_master_service *svc,
                                                 mc_master_uuid client_id,
                                                 const mc_master_key *keys, size_t n,
                                                 const char *segment_name,
                                                 size_t segment_name_len, int *statuses);

/* mc_master_service_remove_by_regex: removes every complete object whose key matches
 * (unanchored search), skipping leased ones unless force and in-flight ones always.
 * *count (may be NULL) receives how many were removed. Returns OK; INVALID_PARAMS for a
 * bad or too-long pattern. */
MC_API int mc_master_service_remove_by_regex(mc_master_service *svc, const char *pattern,
                                             size_t pattern_len, bool force,
                                             uint64_t *count);

/* mc_master_service_remove_all: removes every complete object (hard-pinned ones too),
 * skipping leased ones unless force and in-flight ones always. *count (may be NULL)
 * receives how many were removed. Returns OK. */
MC_API int mc_master_service_remove_all(mc_master_service *svc, bool force,
                                        uint64_t *count);

/* ---- housekeeping ---- */

/* mc_master_service_tick: periodic work; the server calls it every 10-100 ms from one
 * thread. First, with stall_threshold_ms set, notices the master's own stall (a gap
 * since the previous tick longer than the threshold: every client gets a grace of one
 * client_ttl, logged as a warning). Then frees the space of force-removed objects whose
 * readers' leases ended, expires clients silent for client_ttl (unmounting their
 * segments, then calling on_client_expired), releases
 * in-flight puts older than put_start_release_timeout_sec, and evicts when the used
 * ratio is above eviction_high_watermark_ratio or a put failed for space (upstream
 * EvictionThreadFunc / ClientMonitorFunc, §4.5, §4.7). */
MC_API void mc_master_service_tick(mc_master_service *svc);

/* mc_master_service_evict: one eviction pass now, freeing at least `bytes` (0 = the
 * watermark rule of §4.5) by approximate LRU, never leased, hard-pinned or in-flight
 * objects, soft-pinned ones only when nothing else is left (and allowed). Returns the
 * bytes freed. For tests and the admin API; tick calls it when needed. */
MC_API uint64_t mc_master_service_evict(mc_master_service *svc, uint64_t bytes);

/* ---- stats and admin ---- */

/* Per-operation request/failure counters: one mc_master_op per OP row of the RPC table
 * (rpc/master_rpcs.h), MC_MASTER_OP_<ID>, in table order. The metric names are
 * "master_<NAME>_requests_total" / "master_<NAME>_failures_total" (§5.3). */
typedef enum mc_master_op {
#define MC__MASTER_OP_ENUM(ID, CODE, NAME, VERB, REQ, REPLY, SHAPE, HANDLER, COUNT)          \
    MC__RPC_IF_OP_##COUNT(MC_MASTER_OP_##ID, )
    MC_MASTER_RPC_TABLE(MC__MASTER_OP_ENUM)
#undef MC__MASTER_OP_ENUM
    MC_MASTER_OP_COUNT
} mc_master_op;

/* Batch families: one mc_master_batch_op per BATCH row of the RPC table, MC_MASTER_<ID>
 * (MC_MASTER_BATCH_PUT_START, ...), in table order. Metric names "master_<NAME>_{requests,
 * failures,partial_successes,items,failed_items}_total" (§5.3). A batch request is a
 * failure when every item failed, a partial success when some did. */
typedef enum mc_master_batch_op {
#define MC__MASTER_BATCH_ENUM(ID, CODE, NAME, VERB, REQ, REPLY, SHAPE, HANDLER, COUNT)       \
    MC__RPC_IF_BATCH_##COUNT(MC_MASTER_##ID, )
    MC_MASTER_RPC_TABLE(MC__MASTER_BATCH_ENUM)
#undef MC__MASTER_BATCH_ENUM
    MC_MASTER_BATCH_COUNT
} mc_master_batch_op;

/* mc_master_op_name / mc_master_batch_op_name: the metric stem; NULL when out of range. */
MC_API const char *mc_master_op_name(int op);
MC_API const char *mc_master_batch_op_name(int op);

/* Buckets of the master_value_size_bytes histogram: 7 upstream bounds + the +Inf one. */
#define MC_MASTER_VALUE_SIZE_BUCKETS 8

typedef struct mc_master_batch_counters {
    uint64_t requests, failures, partial_successes, items, failed_items;
} mc_master_batch_counters;

/* A snapshot of gauges (current values) and counters (monotonic since create). */
typedef struct mc_master_stats {
    /* gauges */
    uint64_t allocated_bytes;        /* master_allocated_bytes: reserved in all segments */
    uint64_t total_capacity_bytes;   /* master_total_capacity_bytes                       */
    uint64_t key_count;              /* master_key_count (complete + in flight)          */
    uint64_t soft_pin_key_count;     /* master_soft_pin_key_count                        */
    uint64_t active_clients;         /* master_active_clients                            */
    uint64_t segment_count;
    uint64_t processing_key_count;   /* objects with a write in flight                   */
    uint64_t processing_bytes;       /* bytes reserved by writes in flight ("staging")   */
    /* per-op counters, indexed by mc_master_op / mc_master_batch_op */
    uint64_t requests[MC_MASTER_OP_COUNT];
    uint64_t failures[MC_MASTER_OP_COUNT];
    mc_master_batch_counters batch[MC_MASTER_BATCH_COUNT];
    uint64_t put_start_alloc_failures;       /* master_put_start_alloc_failures_total    */
    uint64_t put_start_partial_allocations;  /* fewer replicas than asked                */
    /* eviction */
    uint64_t eviction_attempts;      /* passes run                                        */
    uint64_t eviction_successes;     /* passes that freed something                       */
    uint64_t evicted_keys;
    uint64_t evicted_bytes;
    /* discard of stale in-flight puts */
    uint64_t put_discarded;          /* pre-empted by a newer put_start (older than discard), */
                                     /* or discarded because its client expired          */
    uint64_t put_released;           /* released by tick (older than release timeout)   */
    /* client liveness */
    uint64_t clients_expired;
    /* force-removed objects whose space waits for their readers' leases to end (part of
     * allocated_bytes; key_count no longer counts them) */
    uint64_t deferred_free_keys;
    uint64_t deferred_free_bytes;
    /* quarantine (docs/consistency.md): allocations of writes that never finished, kept
     * until their fences are acknowledged (part of allocated_bytes) */
    uint64_t quarantined_bytes;      /* gauge: master_quarantined_bytes                   */
    uint64_t quarantined_entries;    /* gauge: master_quarantined_entries                 */
    uint64_t fences_pending;         /* gauge: fences handed out, not yet acknowledged    */
    uint64_t fences_issued;          /* counter: master_fences_issued_total (one per side */
                                     /* of a (writer, segment) pair that became pending)   */
    uint64_t fences_acked;           /* counter: master_fences_acked_total (issued -     */
                                     /* acked == fences_pending)                          */
    /* master_value_size_bytes: sizes of the objects placed by put_start / upsert_start
     * (and their batch forms). value_size_buckets[i] counts sizes <= bound i and above
     * bound i-1 (not cumulative); the last bucket counts sizes above every bound. */
    uint64_t value_size_buckets[MC_MASTER_VALUE_SIZE_BUCKETS];
    uint64_t value_size_sum;   /* bytes */
    uint64_t value_size_count;
    /* the disk tier (docs/ssd-tier.md) */
    uint64_t disk_clients;           /* gauge: clients with a registered disk tier        */
    uint64_t disk_replica_keys;      /* gauge: objects with a LOCAL_DISK replica          */
    uint64_t disk_only_keys;         /* gauge: ... and no memory replica                  */
    uint64_t disk_replica_bytes;     /* gauge: their bytes                                */
    uint64_t offload_queued;         /* gauge: offload tasks waiting or handed out        */
    uint64_t offload_requests;       /* counter: offload writes asked of clients          */
    uint64_t offload_successes;      /* counter: ... confirmed (LOCAL_DISK recorded)      */
    uint64_t offload_failures;       /* counter: ... refused / failed / timed out         */
    uint64_t disk_hits;              /* counter: gets answered with a LOCAL_DISK replica  */
                                     /* only                                              */
    uint64_t promotion_requests;     /* counter: promotions asked of clients              */
    uint64_t promotion_successes;
    uint64_t promotion_failures;
    uint64_t disk_replicas_lost;     /* counter: dropped with their client (expiry)       */
    /* HA (ha_gate.c): mc_master_role, the view version (0 without HA), the leader's
     * RPC address ("" when unknown) */
    int role;
    int64_t view_version;
    char leader[MC_MASTER_NAME_MAX];
    /* HA index replication (replicate.c; 0 without it): the last LSN this master logged
     * or copied, the last one it applied as a standby, the highest one a standby
     * acknowledged (leader), FETCH_LOG requests served, puts acknowledged under
     * --ha_sync=sync without a standby's acknowledgement (the degradation rule) */
    uint64_t repl_last_lsn, repl_applied_lsn, repl_acked_lsn, repl_fetches;
    uint64_t repl_sync_degraded;
    /* FETCH_LOG / FETCH_SNAPSHOT requests refused (no term token of this leader's);
     * snapshots loaded by this master as a standby (bootstraps) */
    uint64_t repl_refused, repl_snapshots_loaded;
    /* the mutation log (oplog.c; all 0 without it): records appended, groups written,
     * fdatasync calls, acknowledgements deferred to the RPC server (persist.h) */
    bool oplog_on;
    uint64_t oplog_records, oplog_groups, oplog_fsyncs, oplog_deferred;
} mc_master_stats;

/* mc_master_value_size_bound: upper bound (bytes, inclusive: Prometheus `le`) of bucket i
 * of master_value_size_bytes, for i < MC_MASTER_VALUE_SIZE_BUCKETS - 1: upstream's buckets
 * 4 KiB, 64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB, 64 MiB (`master_metric_manager.cpp`).
 * UINT64_MAX for the last bucket (+Inf) and out-of-range i. */
MC_API uint64_t mc_master_value_size_bound(int i);

/* mc_master_service_get_stats: fills *out (a consistent-enough snapshot: gauges and
 * counters are read without a global lock). */
MC_API void mc_master_service_get_stats(mc_master_service *svc, mc_master_stats *out);

/* One mounted segment (admin: /get_all_segments). Strings are borrowed for the callback. */
typedef struct mc_master_segment_info {
    mc_master_uuid id;
    mc_master_uuid client_id;
    const char *name;
    const char *te_endpoint;
    const char *protocol;
    const char *host_id;  /* "" when none */
    uint64_t base, size;  /* bytes                                                       */
    uint64_t used;        /* bytes reserved by replicas (including alignment padding)   */
} mc_master_segment_info;

typedef int (*mc_master_segment_cb)(const mc_master_segment_info *info, void *ctx);

/* mc_master_service_foreach_segment: cb once per mounted segment (under the segment
 * table lock; return non-zero to stop). Returns the number visited. */
MC_API size_t mc_master_service_foreach_segment(mc_master_service *svc,
                                                mc_master_segment_cb cb, void *ctx);

/* Called once per key by foreach_key (borrowed bytes; under that key's shard lock).
 * complete: false while a write is in flight. Return non-zero to stop. */
typedef int (*mc_master_key_cb)(const void *key, size_t key_len, uint64_t size,
                                bool complete, void *ctx);

/* mc_master_service_foreach_key: every object (admin: /get_all_keys). Returns the
 * number visited. Shards are visited one at a time, so a concurrent writer may or may
 * not be seen. */
MC_API size_t mc_master_service_foreach_key(mc_master_service *svc, mc_master_key_cb cb,
                                            void *ctx);

/* One object as seen by the admin API (/query_key). Grants no lease. */
typedef struct mc_master_key_info {
    uint64_t size;              /* bytes                                                */
    bool complete;              /* false while a write is in flight                    */
    bool hard_pinned;
    bool soft_pinned;           /* soft pin active now                                 */
    uint64_t lease_left_ms;     /* 0 when no active lease                               */
    uint64_t soft_pin_left_ms;  /* 0 when not soft-pinned                               */
    mc_master_replica_list replicas; /* all replicas, any status; lease_ttl_ms 0       */
} mc_master_key_info;

/* mc_master_service_query_key: fills *out. Returns OK; OBJECT_NOT_FOUND; INVALID_PARAMS
 * for a bad key. */
MC_API int mc_master_service_query_key(mc_master_service *svc, const void *key,
                                       size_t key_len, mc_master_key_info *out);

/* ---- the disk tier (offload.c, docs/ssd-tier.md; upstream OffloadObjectHeartbeat /
 * NotifyOffloadSuccess, upstream-mooncake.md §4.10) ---- */

/* mc_master_service_offload_heartbeat: a client with a disk tier asks for work. The
 * first call registers its tier (endpoint: its segment name, 1..MC_MASTER_NAME_MAX-1
 * bytes, where readers of its LOCAL_DISK replicas reach it) and marks it alive. out gets
 * up to max_tasks (<= MC_MASTER_MAX_OFFLOAD_TASKS) tasks, oldest first; out->keys is
 * malloc'd (the caller frees it; NULL when n == 0). A task handed out stays pending
 * until offload_end reports it or offload_task_timeout_ms passes. out->fsdir: with
 * cfg.fs_dir (shared-FS DISK replicas) that directory, where the WRITEs go; else "".
 * max_tasks == 0 is a probe (client setup): OK with out->fsdir filled (also without any
 * disk tier), nothing registered, no task. Returns OK; NOT_SUPPORTED (the master runs
 * without --enable_offload or --root_fs_dir); INVALID_PARAMS. */
MC_API int mc_master_service_offload_heartbeat(mc_master_service *svc,
                                               mc_master_uuid client_id,
                                               const char *endpoint, uint32_t max_tasks,
                                               mc_master_offload_tasks *out);

/* mc_master_service_offload_end: the client's results (n <= MC_MASTER_MAX_OFFLOAD_TASKS).
 * WRITE OK: the key gets a LOCAL_DISK replica owned by the client (if the object is
 * still the one offloaded: same size, complete); WRITE failed: the memory replica stays
 * and eviction may take it as before (counted in offload_failures). REGISTER: a
 * disk-only object is created when the key is unknown; a key the index knows already is
 * refused with OBJECT_ALREADY_EXISTS (the client then drops its stale disk copy).
 * PROMOTE: OK publishes the memory replica, a failure drops it. DELETE: ignored.
 * statuses[i] (may be NULL): per result. Returns OK, NOT_SUPPORTED, INVALID_PARAMS (the
 * client never sent an offload heartbeat, or bad arguments). */
MC_API int mc_master_service_offload_end(mc_master_service *svc, mc_master_uuid client_id,
                                         const char *endpoint,
                                         const mc_master_offload_item *items, size_t n,
                                         int *statuses);

/* ---- replica copy / move tasks (tasks.c; upstream CreateCopyTask / CreateMoveTask /
 * QueryTask / FetchTasks / MarkTaskToComplete) ----
 *
 * A copy task adds a COMPLETE memory replica of key on each target segment (by name):
 * the master reserves the space on the target at once (hidden from readers), the owner
 * of that segment (the executor) fetches the work, reads the bytes from a complete
 * replica into its own segment and reports; only then is the replica added to the
 * object. A move task is a copy to `target` that then drops the replica on `source`
 * (its space waits for an active read lease to end, as a forced remove's). */

/* mc_master_service_create_copy_task / _move_task: *id = the new task (PENDING).
 * source: the move's source segment name (ignored by copy: any complete replica is
 * read); targets: n (1..MC_MASTER_MAX_TASK_TARGETS) segment names (move: exactly 1).
 * Returns OK; INVALID_PARAMS (bad key or names, a target equal to the source or
 * repeated, n out of range); OBJECT_NOT_FOUND (no such key, or not complete);
 * SEGMENT_NOT_FOUND (a name not mounted); REPLICA_NOT_FOUND (move: no replica on
 * source); REPLICA_ALREADY_EXISTS (a target holds a replica already);
 * NO_AVAILABLE_HANDLE (no room on a target); TASK_PENDING_LIMIT_EXCEEDED. Any thread. */
MC_API int mc_master_service_create_copy_task(mc_master_service *svc, const void *key,
                                              size_t key_len, const char *source,
                                              const char *const *targets, size_t n,
                                              mc_master_uuid *id);
MC_API int mc_master_service_create_move_task(mc_master_service *svc, const void *key,
                                              size_t key_len, const char *source,
                                              const char *const *targets, size_t n,
                                              mc_master_uuid *id);

/* mc_master_service_query_task: *out = task id's state. Returns OK or TASK_NOT_FOUND
 * (unknown, or a finished task forgotten: max_total_finished_tasks). */
MC_API int mc_master_service_query_task(mc_master_service *svc, mc_master_uuid id,
                                        mc_master_task_info *out);

/* mc_master_service_fetch_tasks: client client_id asks for work: *out (n: 0 or 1) = the
 * oldest PENDING part whose target segment it owns; the task becomes PROCESSING.
 * Returns OK. */
MC_API int mc_master_service_fetch_tasks(mc_master_service *svc, mc_master_uuid client_id,
                                         mc_master_task_work *out, uint32_t *n);

/* mc_master_service_mark_task_to_complete: the executor's result for part `part` of task
 * id: status OK publishes the replica (a move then drops its source), an error frees
 * the reserved space and fails the task with message (may be NULL). Returns OK;
 * TASK_NOT_FOUND; INVALID_PARAMS (not this client's part, or not PROCESSING). */
MC_API int mc_master_service_mark_task_to_complete(mc_master_service *svc,
                                                   mc_master_uuid client_id, mc_master_uuid id,
                                                   uint32_t part, int status,
                                                   const char *message);

/* mc_master_service_now_ms: the service's clock (what leases are measured on). */
MC_API uint64_t mc_master_service_now_ms(mc_master_service *svc);

/* ---- HA role and fencing (ha_gate.c; docs/ha.md) ----
 *
 * Without HA a service is a leader that always serves (role LEADER, view 0). With HA
 * (master/ha.c drives it from the election) the RPC handler serves a request only while
 * mc_master_service_serving(): the role is LEADER and the monotonic clock is before the
 * deadline the last lease renewal gave (fencing by time, metadata/election.h); every
 * other request is refused with MC_UNAVAILABLE_IN_CURRENT_STATUS before it runs, and
 * every served reply carries the view version. */
typedef enum mc_master_role {
    MC_MASTER_ROLE_LEADER = 0,  /* serving (the only role without HA) */
    MC_MASTER_ROLE_STANDBY = 1, /* waiting for the leader's lease to lapse */
    MC_MASTER_ROLE_DEPOSED = 2, /* was the leader, lost the lease: serves nothing again */
} mc_master_role;

/* mc_master_role_name: "leader", "standby", "deposed" (static). */
MC_API const char *mc_master_role_name(int role);

/* mc_master_service_ha_enable: turns the gate on (role STANDBY, serving nothing). Once,
 * before the RPC server starts. */
MC_API void mc_master_service_ha_enable(mc_master_service *svc);

/* mc_master_service_ha_set: the election's outcome: role, view (ours as LEADER, the
 * leader's otherwise; 0 = unknown), leader address (borrowed, copied; NULL = keep),
 * until_ms: monotonic ms up to which a LEADER serves. Any thread. */
MC_API void mc_master_service_ha_set(mc_master_service *svc, mc_master_role role, int64_t view,
                                     const char *leader, uint64_t until_ms);

/* mc_master_service_ha_extend: moves a LEADER's serve deadline to until_ms (a renewal). */
MC_API void mc_master_service_ha_extend(mc_master_service *svc, uint64_t until_ms);

/* mc_master_service_serving: true when a request may run now (see above). Any thread;
 * two atomic loads and a clock read. */
MC_API bool mc_master_service_serving(mc_master_service *svc);

/* mc_master_service_view: the view version replies carry (0 without HA). */
MC_API int64_t mc_master_service_view(mc_master_service *svc);

/* mc_master_service_ha_info: role, view and leader address into out's HA fields. */
MC_API void mc_master_service_ha_info(mc_master_service *svc, mc_master_stats *out);

/* mc_master_service_fetch_log: the FETCH_LOG RPC (HA replication, src/master/replicate.c,
 * docs/ha.md "Replication to the standbys"): copies whole mutation-log frames with LSNs
 * from_lsn.. into buf (at most cap bytes; *len = bytes copied, 0 when nothing is newer);
 * *first = the oldest LSN held, *last = the newest given out, *base = the first LSN this
 * master logged itself. Counts from_lsn - 1 as the caller's acknowledged LSN (sync mode).
 * token: the caller's term token (docs/ha.md "Who may fetch"): a request without this
 * term's token is refused (MC_ILLEGAL_CLIENT, counted, no acknowledgement taken).
 * Returns MC_OK; MC_OBJECT_NOT_FOUND when from_lsn is older than what is held (the
 * standby bootstraps from a snapshot: FETCH_SNAPSHOT); MC_NOT_SUPPORTED without HA
 * replication. Any thread. */
MC_API int mc_master_service_fetch_log(mc_master_service *svc, const char *token,
                                       uint64_t from_lsn, uint8_t *buf, size_t cap,
                                       size_t *len, uint64_t *first, uint64_t *last,
                                       uint64_t *base);

/* What one FETCH_SNAPSHOT answer holds (mc_master_service_fetch_snapshot). */
typedef struct mc_master_snapshot_chunk {
    bool ready;      /* false: being built, ask again (the rest is 0)                   */
    uint64_t id;     /* the snapshot's id (ask the next chunk with it)                   */
    uint64_t lsn;    /* it holds every record up to lsn: FETCH_LOG continues at lsn + 1  */
    uint64_t total;  /* its size, bytes                                                  */
    uint64_t offset; /* where the chunk starts                                           */
    size_t len;      /* bytes copied into buf                                            */
} mc_master_snapshot_chunk;

/* mc_master_service_fetch_snapshot: the FETCH_SNAPSHOT RPC (HA standby bootstrap,
 * replicate.c, docs/ha.md "Bootstrap from a snapshot"). id 0: the current snapshot of
 * the leader's index, started on a thread of its own when there is none usable (the
 * caller's RPC loop never serialises; *out->ready is false until it is built); else the
 * chunk of snapshot id at offset: at most cap bytes into buf. token: the caller's term
 * token (as fetch_log). Returns MC_OK; MC_OBJECT_NOT_FOUND (id is not the current
 * snapshot any more: ask with 0); MC_ILLEGAL_CLIENT (token is not this term's: refused,
 * counted); MC_INVALID_PARAMS (offset past the end); MC_NOT_SUPPORTED without HA
 * replication. Any thread. */
MC_API int mc_master_service_fetch_snapshot(mc_master_service *svc, const char *token,
                                            uint64_t id, uint64_t offset, uint8_t *buf,
                                            size_t cap, mc_master_snapshot_chunk *out);

#endif
