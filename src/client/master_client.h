/* master_client.h: the C client of mooncake_master (proto/master.proto over src/net frames).
 *
 * One call per RPC; upstream counterpart: `mooncake-store/src/master_client.cpp`
 * (MasterClient), semantics in ../shared/reference/upstream-mooncake.md §4.1 and in
 * src/master/master_service.h (the service each RPC runs on the master).
 *
 * Connections: a small pool (opts.max_conns, default 4) of TCP connections to one master,
 * opened on demand. A call takes an idle connection (or waits for one), sends its
 * request, and reads the reply on it; calls from different threads run in parallel on
 * different connections (the master serves connections on several threads). Batch
 * calls larger than MC_MASTER_RPC_MAX_BATCH items are split into several requests that
 * are pipelined on one connection (all sent, then all replies read).
 *
 * Trust (issue 11, docs/security.md): with opts.auth holding the cluster secret, every
 * connection (the first, and each reconnection) runs the client side of the
 * common/auth.h handshake (label "master-rpc") right after connecting, within the
 * call's deadline, before any request. A master that refuses it (another secret, or
 * none: a mixed cluster), or a master that requires a secret this client lacks (it
 * answers the first request with a handshake RESULT), fails the call with
 * MC_ILLEGAL_CLIENT and an ERROR line naming the master, the reason from this side's
 * point of view and what to check (MC_AUTH_TOKEN_FILE / --auth_token_file).
 *
 * Failures and reconnection: a connection that fails (connect refused, reset, timeout,
 * malformed reply) is closed and the call returns MC_RPC_FAIL (MC_RPC_TIMEOUT when the
 * deadline passed); the next call opens a new connection, so a restarted master is
 * reached again without any action from the caller. A connection idle for 10 ms or more
 * is checked before use (one poll) and replaced when the master closed it meanwhile, so
 * the first call after a master restart does not fail for that reason (a restart takes
 * longer than 10 ms). With a host:port no request is ever resent (an etcd:// address
 * follows HA masters and resends what is safe: "HA" below). Each call has a deadline of
 * rpc_timeout_ms (env MC_RPC_TIMEOUT_MS, default 30000) covering connect, send and
 * receive.
 *
 * Return values: upstream status codes (include/mooncake/status.h): MC_OK or the code the
 * master returned (documented per RPC in master_service.h); MC_RPC_FAIL / MC_RPC_TIMEOUT
 * when the transport failed; MC_INVALID_PARAMS for bad arguments detected locally (NULL
 * arrays with n > 0, a key longer than MC_MASTER_KEY_MAX, a string too long for the
 * wire limits) and for requests the master refused as undecodable; MC_NOT_SUPPORTED when
 * the master does not know the RPC. Batch calls return MC_OK when every item is OK, else
 * the first failing item's code; on a transport failure every per-item status is set to
 * that failure code.
 *
 * Types (keys, replica lists, segments, put configs, UUIDs) are the master service's
 * (src/master/master_service.h); only their definitions are used: linking mc_client
 * does not link the service.
 *
 * Threads: every function is thread-safe except _destroy (no call may be in flight).
 *
 * Files: master_conn.c (connections, pipelining), master_codec.c (wire conversions),
 * master_rpc.c (single-request RPCs), master_batch.c (batch RPCs); their shared
 * declarations and the lock order are in client/internal.h.
 */
#ifndef MOONCAKE_CLIENT_MASTER_CLIENT_H
#define MOONCAKE_CLIENT_MASTER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/master_types.h"
#include "mooncake/mc_api.h"
#include "mooncake/status.h"

#define MC_MASTER_DEFAULT_PORT 50051
#define MC_MASTER_CLIENT_DEFAULT_TIMEOUT_MS 30000u
#define MC_MASTER_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS 5000u
#define MC_MASTER_CLIENT_DEFAULT_MAX_CONNS 4u
#define MC_MASTER_CLIENT_MAX_CONNS 64u

typedef struct mc_master_client mc_master_client;
struct mc_auth_secret; /* common/auth.h */

typedef struct mc_master_client_opts {
    uint32_t rpc_timeout_ms;     /* per call; 0 = env MC_RPC_TIMEOUT_MS, else 30000      */
    uint32_t connect_timeout_ms; /* per connect, within the call's deadline; 0 = 5000    */
    uint32_t max_conns;          /* pooled connections, 1..64; 0 = 4                      */
    uint32_t max_reply_body;     /* bytes; larger replies fail the call (RPC_FAIL);       */
                                 /* 0 = MC_MASTER_RPC_MAX_REPLY_BODY (64 MiB)             */
    const struct mc_auth_secret *auth; /* the cluster secret (common/auth.h), copied at   */
                                 /* create; NULL or empty = none (no handshake)          */
} mc_master_client_opts;

/* mc_master_client_create: a client for the master at `address` ("host:port", "host"
 * (port 50051) or "[v6]:port"; borrowed). opts may be NULL (defaults; borrowed). One
 * connection is opened now, so an unreachable master is reported here.
 * MC_RPC_TIMEOUT_MS is read (common/env.h) only when opts->rpc_timeout_ms is 0; a value
 * that is not an integer in 1..86400000 fails the create with MC_INVALID_PARAMS, logged
 * naming the variable. Returns MC_OK with *out set (free with _destroy);
 * MC_INVALID_PARAMS (bad address, opts or MC_RPC_TIMEOUT_MS); MC_RPC_FAIL (cannot
 * connect); MC_RPC_TIMEOUT (connect timed out); MC_ILLEGAL_CLIENT (the handshake was
 * refused: the secrets differ or one side has none, logged). On error *out is untouched. */
MC_API int mc_master_client_create(const char *address, const mc_master_client_opts *opts,
                                   mc_master_client **out);

/* mc_master_client_destroy: closes every connection and frees. NULL is a no-op. */
MC_API void mc_master_client_destroy(mc_master_client *c);

/* mc_master_client_address: the "host:port" given to create (borrowed, lives as c). */
MC_API const char *mc_master_client_address(const mc_master_client *c);

/* ---- HA (docs/ha.md) ----
 * An address "etcd://h:p;h:p" or "redis://h:p" (where the masters elect; cluster id
 * from env MC_MASTER_CLUSTER_ID, default "mooncake_cluster") makes the client follow the
 * leader: create waits up to rpc_timeout_ms for one; then a thread follows the leader key
 * (an etcd watch, a Redis poll; leader.c) and moves the pool to a new leader at once, and
 * a call that finds no serving master
 * (connection failure, a standby's or deposed leader's UNAVAILABLE_IN_CURRENT_STATUS)
 * looks the leader up again and is resent while none of it ran, or when it is
 * idempotent (ping, service_ready, gets, exists, remount), until its deadline; a
 * non-idempotent call that was in flight when its master failed returns the transport
 * code (logged: it may or may not have run). Every reply's view (proto field 15) is
 * checked: a reply older than the newest view seen (a lookup's or a reply's) is refused,
 * the call returns MC_UNAVAILABLE_IN_CURRENT_STATUS (or is resent when idempotent). A
 * call whose deadline passes while every master it reached refused it (a standby, a
 * deposed leader, an older view) returns MC_UNAVAILABLE_IN_CURRENT_STATUS.
 * "k8s://" is refused (MC_NOT_SUPPORTED). */

/* mc_master_client_set_leader_hook: fn(ctx) runs after every leader change, on the
 * thread that found it: the call that failed over, or the client's follow thread (which
 * watches the leader key, leader.c), so fn must be thread-safe. Set before calls start. */
MC_API void mc_master_client_set_leader_hook(mc_master_client *c, void (*fn)(void *ctx),
                                             void *ctx);

/* mc_master_client_view_changed_within: true when this client saw the master's view move
 * to a newer leader (a lookup, the follow thread or a reply; not the first view it
 * learned) at most ms milliseconds ago. The store client retries puts and gets that the
 * new leader refuses only because the segments' owners have not remounted yet
 * (store read.c / write.c, docs/ha.md "The remount window"). Any thread. */
bool mc_master_client_view_changed_within(const mc_master_client *c, uint64_t ms);

/* mc_master_client_view: the newest view seen (0 without HA). */
MC_API int64_t mc_master_client_view(const mc_master_client *c);

/* ---- service ---- */

/* mc_master_client_ping: heartbeat for client_id (upstream Ping). out->client_status is
 * MC_MASTER_CLIENT_OK, or MC_MASTER_CLIENT_NEED_REMOUNT when the master does not know
 * the client (restarted, or the client was silent past --client_ttl): remount every
 * segment then. out->view_version is 0 without HA. Returns MC_OK or a transport code. */
MC_API int mc_master_client_ping(mc_master_client *c, mc_master_uuid client_id,
                                 mc_master_ping_result *out);

/* mc_master_client_ping_fences: the same ping, also acknowledging the fences the client
 * applied (acks, NULL = none; each count <= MC_MASTER_MAX_FENCES, borrowed for the call)
 * and receiving the fences pending for it in out->writer_fences (apply as segment owner:
 * mc_te_fence_writer) and out->target_fences (apply as writer: mc_te_fence_target), each
 * sent again in every reply until acknowledged (docs/consistency.md; not upstream).
 * mc_master_client_ping = this with acks NULL. Returns MC_OK, MC_INVALID_PARAMS (bad
 * acks: counts, NULL arrays, unterminated names), MC_RPC_FAIL (a reply past the limits)
 * or a transport code. */
MC_API int mc_master_client_ping_fences(mc_master_client *c, mc_master_uuid client_id,
                                        const mc_master_ping_request *acks,
                                        mc_master_ping_result *out);

/* mc_master_client_service_ready: readiness probe (upstream ServiceReady). version
 * (may be NULL) receives the master's version string, truncated to len-1 bytes and
 * NUL-terminated. Returns MC_OK or a transport code. */
MC_API int mc_master_client_service_ready(mc_master_client *c, char *version, size_t len);

/* ---- segments ---- */

/* mc_master_client_mount_segment: mounts seg (borrowed) for client_id. Codes as
 * mc_master_service_mount_segment (OK, SEGMENT_ALREADY_EXISTS, INVALID_PARAMS). */
MC_API int mc_master_client_mount_segment(mc_master_client *c, const mc_master_segment *seg,
                                          mc_master_uuid client_id);

/* mc_master_client_remount_segments: after NEED_REMOUNT: segs[0..n) (borrowed; n may be
 * 0). Codes as mc_master_service_remount_segments. */
MC_API int mc_master_client_remount_segments(mc_master_client *c, const mc_master_segment *segs,
                                             size_t n, mc_master_uuid client_id);

/* mc_master_client_unmount_segment: codes as mc_master_service_unmount_segment (OK,
 * SEGMENT_NOT_FOUND, ILLEGAL_CLIENT). */
MC_API int mc_master_client_unmount_segment(mc_master_client *c, mc_master_uuid segment_id,
                                            mc_master_uuid client_id);
/* mc_master_client_unmount_segment_grace: grace_ms 0 as above; > 0 a graceful unmount
 * (mc_master_service_unmount_segment_grace: no new allocations at once, replicas
 * readable for grace_ms, then unmounted by the master's tick). */
MC_API int mc_master_client_unmount_segment_grace(mc_master_client *c,
                                                  mc_master_uuid segment_id,
                                                  mc_master_uuid client_id, uint64_t grace_ms);

/* ---- writes ---- */

/* mc_master_client_put_start / upsert_start: reserve replicas for key (key_len bytes,
 * borrowed) of `size` bytes. cfg: borrowed; NULL = one replica, no pins, default
 * strategy. out (caller's storage) receives the PROCESSING replicas on MC_OK.
 * Codes as mc_master_service_put_start / _upsert_start. */
MC_API int mc_master_client_put_start(mc_master_client *c, mc_master_uuid client_id,
                                      const void *key, size_t key_len, uint64_t size,
                                      const mc_master_put_config *cfg,
                                      mc_master_replica_list *out);
MC_API int mc_master_client_upsert_start(mc_master_client *c, mc_master_uuid client_id,
                                         const void *key, size_t key_len, uint64_t size,
                                         const mc_master_put_config *cfg,
                                         mc_master_replica_list *out);

/* put_end / put_revoke / upsert_end / upsert_revoke: codes as the service's. */
MC_API int mc_master_client_put_end(mc_master_client *c, mc_master_uuid client_id,
                                    const void *key, size_t key_len);
MC_API int mc_master_client_put_revoke(mc_master_client *c, mc_master_uuid client_id,
                                       const void *key, size_t key_len);
MC_API int mc_master_client_upsert_end(mc_master_client *c, mc_master_uuid client_id,
                                       const void *key, size_t key_len);
MC_API int mc_master_client_upsert_revoke(mc_master_client *c, mc_master_uuid client_id,
                                          const void *key, size_t key_len);

/* Batch starts: keys[i]/sizes[i] (borrowed, n entries) -> statuses[i] and, when
 * statuses[i] == MC_OK, outs[i] (both caller's arrays of n). One cfg for all (NULL =
 * defaults). */
MC_API int mc_master_client_batch_put_start(mc_master_client *c, mc_master_uuid client_id,
                                            const mc_master_key *keys, const uint64_t *sizes,
                                            size_t n, const mc_master_put_config *cfg,
                                            mc_master_replica_list *outs, int *statuses);
MC_API int mc_master_client_batch_upsert_start(mc_master_client *c, mc_master_uuid client_id,
                                               const mc_master_key *keys,
                                               const uint64_t *sizes, size_t n,
                                               const mc_master_put_config *cfg,
                                               mc_master_replica_list *outs, int *statuses);

/* Batch ends / revokes: keys (borrowed, n) -> statuses (caller's array of n). */
MC_API int mc_master_client_batch_put_end(mc_master_client *c, mc_master_uuid client_id,
                                          const mc_master_key *keys, size_t n, int *statuses);
MC_API int mc_master_client_batch_put_revoke(mc_master_client *c, mc_master_uuid client_id,
                                             const mc_master_key *keys, size_t n,
                                             int *statuses);
MC_API int mc_master_client_batch_upsert_end(mc_master_client *c, mc_master_uuid client_id,
                                             const mc_master_key *keys, size_t n,
                                             int *statuses);
MC_API int mc_master_client_batch_upsert_revoke(mc_master_client *c, mc_master_uuid client_id,
                                                const mc_master_key *keys, size_t n,
                                                int *statuses);

/* ---- reads ---- */

/* mc_master_client_get_replica_list: out (caller's) receives the COMPLETE replicas and
 * the lease granted (out->lease_ttl_ms) on MC_OK. Codes as the service's (OK,
 * OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY, INVALID_PARAMS). */
MC_API int mc_master_client_get_replica_list(mc_master_client *c, const void *key,
                                             size_t key_len, mc_master_replica_list *out);

/* Batch: outs[i] / statuses[i] per key (caller's arrays of n). */
MC_API int mc_master_client_batch_get_replica_list(mc_master_client *c,
                                                   const mc_master_key *keys, size_t n,
                                                   mc_master_replica_list *outs,
                                                   int *statuses);

/* A callback of mc_master_client_batch_get_replica_list_each: the items [off, off + k)
 * of the call are answered (their outs and statuses are final). */
typedef void (*mc_master_chunk_fn)(void *ctx, size_t off, size_t k);

/* mc_master_client_batch_get_replica_list_each: batch_get_replica_list with the keys
 * split into requests of at most per_request keys (>= 1; capped at
 * MC_MASTER_RPC_MAX_BATCH), pipelined on one connection (up to 8 in flight), and each
 * request's items handed to on_chunk (may be NULL) on the calling thread as soon as its
 * reply is decoded, in order, while the master serves the later requests: the caller
 * can start work on the first items (a store read starts their transfers) before the
 * last are answered. on_chunk runs while the call holds one of the client's pooled
 * connections, so it must not call this client again on the same thread if the pool
 * may be exhausted, and should not block for long. A request the master refused as a
 * whole is passed with its statuses set to that code; the items of a request that got
 * no usable reply (a transport error, a reply that does not decode) are never passed.
 * When the call fails as a whole, every status holds its code on return, also those of
 * items already passed (the caller keeps what it took from them). Returns as
 * batch_get_replica_list: MC_OK, or the first failing status / the call's code. */
MC_API int mc_master_client_batch_get_replica_list_each(mc_master_client *c,
                                                        const mc_master_key *keys, size_t n,
                                                        mc_master_replica_list *outs,
                                                        int *statuses, size_t per_request,
                                                        mc_master_chunk_fn on_chunk,
                                                        void *ctx);

/* One match of get_replica_list_by_regex. key: malloc'd (key_len bytes plus a NUL not
 * counted), owned by the array. */
typedef struct mc_master_regex_match {
    void *key;
    size_t key_len;
    mc_master_replica_list replicas;
} mc_master_regex_match;

/* mc_master_client_get_replica_list_by_regex: every complete object whose key matches
 * the PCRE2 pattern (pattern_len bytes, borrowed; unanchored search). On MC_OK *matches
 * is a new array of *n entries (NULL when 0), which the caller frees with
 * mc_master_client_free_matches; *truncated (may be NULL) is set when the master had
 * more matches than one reply carries. Codes: OK, INVALID_PARAMS (bad pattern),
 * transport codes. */
MC_API int mc_master_client_get_replica_list_by_regex(mc_master_client *c, const char *pattern,
                                                      size_t pattern_len,
                                                      mc_master_regex_match **matches,
                                                      size_t *n, bool *truncated);

/* mc_master_client_free_matches: frees an array from get_replica_list_by_regex. */
MC_API void mc_master_client_free_matches(mc_master_regex_match *matches, size_t n);

/* mc_master_client_exist_key: 1 (exists with a complete replica; a lease is granted),
 * 0 (absent or only in flight), or a negative code (INVALID_PARAMS, transport). */
MC_API int mc_master_client_exist_key(mc_master_client *c, const void *key, size_t key_len);

/* Batch: results[i] = 1 / 0 / negative code (caller's array of n). Returns MC_OK or a
 * code for the whole call (transport, INVALID_PARAMS for NULL arrays). */
MC_API int mc_master_client_batch_exist_key(mc_master_client *c, const mc_master_key *keys,
                                            size_t n, int *results);

/* ---- removal ---- */

/* mc_master_client_remove: codes as mc_master_service_remove (OK, OBJECT_NOT_FOUND,
 * OBJECT_HAS_LEASE unless force, REPLICA_IS_NOT_READY). */
MC_API int mc_master_client_remove(mc_master_client *c, const void *key, size_t key_len,
                                   bool force);

/* Batch: statuses[i] per key (caller's array of n). */
MC_API int mc_master_client_batch_remove(mc_master_client *c, const mc_master_key *keys,
                                         size_t n, bool force, int *statuses);

/* mc_master_client_batch_replica_clear (upstream BatchReplicaClear): drops client_id's
 * own unleased objects, or only their replicas on the segment named segment_name
 * (NUL-terminated, < MC_MASTER_NAME_MAX bytes; NULL or "" = the whole object).
 * statuses[i] per key as mc_master_service_batch_replica_clear (OK = cleared). Returns OK
 * when every item is OK, else the first failing item's code; INVALID_PARAMS for bad
 * arguments; transport codes fill every status. Chunked like every batch call. */
MC_API int mc_master_client_batch_replica_clear(mc_master_client *c, mc_master_uuid client_id,
                                                const mc_master_key *keys, size_t n,
                                                const char *segment_name, int *statuses);

/* mc_master_client_remove_by_regex / remove_all: *count (may be NULL) receives how many
 * objects were removed. Codes as the service's. */
MC_API int mc_master_client_remove_by_regex(mc_master_client *c, const char *pattern,
                                            size_t pattern_len, bool force, uint64_t *count);
MC_API int mc_master_client_remove_all(mc_master_client *c, bool force, uint64_t *count);

/* ---- the disk tier (master_offload.c; docs/ssd-tier.md) ---- */

/* mc_master_client_offload_heartbeat: asks for disk-tier tasks (and registers the tier,
 * endpoint = our segment name). out->keys is malloc'd (free() it). Codes as
 * mc_master_service_offload_heartbeat (NOT_SUPPORTED: the master runs without
 * --enable_offload), plus transport codes; MC_RPC_FAIL for a malformed reply. */
MC_API int mc_master_client_offload_heartbeat(mc_master_client *c, mc_master_uuid client_id,
                                              const char *endpoint, uint32_t max_tasks,
                                              mc_master_offload_tasks *out);

/* mc_master_client_offload_end: reports results (n <= MC_MASTER_MAX_OFFLOAD_TASKS, keys
 * borrowed); statuses[i] (may be NULL) as mc_master_service_offload_end. */
MC_API int mc_master_client_offload_end(mc_master_client *c, mc_master_uuid client_id,
                                        const char *endpoint,
                                        const mc_master_offload_item *items, size_t n,
                                        int *statuses);


/* ---- replica copy / move tasks (master/tasks.c; master_service.h has the semantics) ---- */

/* mc_master_client_create_task: type MC_MASTER_TASK_REPLICA_COPY (targets: 1..8 segment
 * names; source ignored, may be NULL) or _MOVE (source -> targets[0], n == 1). *id = the
 * task. Codes as mc_master_service_create_copy_task / _move_task. */
MC_API int mc_master_client_create_task(mc_master_client *c, int type, const void *key,
                                        size_t key_len, const char *source,
                                        const char *const *targets, size_t n,
                                        mc_master_uuid *id);
/* mc_master_client_query_task: *out = the task's state; OK or TASK_NOT_FOUND. */
MC_API int mc_master_client_query_task(mc_master_client *c, mc_master_uuid id,
                                       mc_master_task_info *out);
/* mc_master_client_fetch_tasks: *n (0 or 1) parts for executor client_id into *out. */
MC_API int mc_master_client_fetch_tasks(mc_master_client *c, mc_master_uuid client_id,
                                        mc_master_task_work *out, uint32_t *n);
/* mc_master_client_mark_task_to_complete: the executor's result of one part (message:
 * may be NULL, cut at 255 bytes). */
MC_API int mc_master_client_mark_task_to_complete(mc_master_client *c,
                                                  mc_master_uuid client_id, mc_master_uuid id,
                                                  uint32_t part, int status,
                                                  const char *message);

#endif
