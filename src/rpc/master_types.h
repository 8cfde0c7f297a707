/* rpc/master_types.h: the master's value types and limits, shared by the master
 * (src/master) and its clients (src/client) without either including the other: ids,
 * keys, replica descriptors, segment descriptors, put options, the ping reply. They
 * mirror proto/master.proto one to one; both sides convert to and from protobuf at the
 * RPC edge. Owns no code: types and constants only.
 * Upstream names: ../shared/reference/upstream-mooncake.md §4 (Replica::Descriptor,
 * ReplicateConfig, Segment, PingResponse). */
#ifndef MOONCAKE_RPC_MASTER_TYPES_H
#define MOONCAKE_RPC_MASTER_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits (checked on every input; inputs past them get INVALID_PARAMS). */
#define MC_MASTER_KEY_MAX 4096u       /* bytes per key (API.md §5)                      */
#define MC_MASTER_MAX_REPLICAS 8u     /* replicas per object; replica_num is clamped    */
#define MC_MASTER_NAME_MAX 256u       /* segment name / endpoint / host id, incl. NUL   */
#define MC_MASTER_PROTOCOL_MAX 16u    /* "tcp", "rdma", ... incl. NUL                   */
#define MC_MASTER_MAX_PREFERRED 64u   /* preferred_segments entries per put             */
#define MC_MASTER_REGEX_MAX 4096u     /* bytes per regex pattern                        */
#define MC_MASTER_SEGMENT_MAX_SIZE (1ull << 50) /* bytes per mounted segment            */
#define MC_MASTER_MAX_FENCES 64u      /* fences of each kind per ping request / reply   */

/* A client or segment id: upstream's UUID (pair of uint64). */
typedef struct mc_master_uuid {
    uint64_t first;
    uint64_t second;
} mc_master_uuid;

/* A key: bytes, not NUL-terminated (may contain NUL). Borrowed for the call. */
typedef struct mc_master_key {
    const void *data;
    size_t len;
} mc_master_key;

/* Upstream ReplicaStatus values (`replica.h`). The master reports PROCESSING (write in
 * flight, not readable) and COMPLETE (readable). */
typedef enum mc_master_replica_status {
    MC_MASTER_REPLICA_UNDEFINED = 0,
    MC_MASTER_REPLICA_INITIALIZED = 1,
    MC_MASTER_REPLICA_PROCESSING = 2,
    MC_MASTER_REPLICA_COMPLETE = 3,
    MC_MASTER_REPLICA_REMOVED = 4,
    MC_MASTER_REPLICA_FAILED = 5,
} mc_master_replica_status;

/* Upstream ReplicaType (`replica.h`): where a replica's bytes are. MEMORY: in a mounted
 * segment (address valid in the owner's process); LOCAL_DISK: in the disk store of the
 * client that owns it (docs/ssd-tier.md), read through that client; segment_id is then
 * the owning client's id and transport_endpoint its segment name, address 0. DISK: a
 * file in the shared directory of --root_fs_dir (docs/ssd-tier.md "Shared-FS DISK
 * replicas"), any client reads it there; transport_endpoint is the file's path,
 * segment_id zero, address 0, protocol "file". */
typedef enum mc_master_replica_type {
    MC_MASTER_REPLICA_MEMORY = 0,
    MC_MASTER_REPLICA_DISK = 1,
    MC_MASTER_REPLICA_LOCAL_DISK = 2,
} mc_master_replica_type;

/* Upstream --allocation_strategy values we implement (upstream-mooncake.md §4.6). */
typedef enum mc_master_strategy {
    MC_MASTER_STRATEGY_DEFAULT = 0,          /* in a put config: the service's strategy */
    MC_MASTER_STRATEGY_RANDOM = 1,           /* upstream "random" (the default)         */
    MC_MASTER_STRATEGY_FREE_RATIO_FIRST = 2, /* upstream "free_ratio_first"             */
} mc_master_strategy;

/* Upstream SoftPinAction (HEAD); v0.3.12's `with_soft_pin=True` maps to ENABLE. */
typedef enum mc_master_soft_pin_action {
    MC_MASTER_SOFT_PIN_PRESERVE = 0, /* new object: not pinned; upsert: keep as it was   */
    MC_MASTER_SOFT_PIN_ENABLE = 1,   /* pin for soft_pin_ttl_ms from put_end             */
    MC_MASTER_SOFT_PIN_DISABLE = 2,  /* not pinned (upsert: unpin)                        */
} mc_master_soft_pin_action;

/* Upstream ClientStatus (ping reply). */
typedef enum mc_master_client_status {
    MC_MASTER_CLIENT_UNDEFINED = 0,
    MC_MASTER_CLIENT_OK = 1,
    MC_MASTER_CLIENT_NEED_REMOUNT = 2,
} mc_master_client_status;

/* A segment to mount (upstream `Segment`). Strings are borrowed for the call (copied).
 *   id: unique per mounted segment (SEGMENT_ALREADY_EXISTS when already mounted).
 *   name: the owner's TE segment name ("host:port"), 1..MC_MASTER_NAME_MAX-1 bytes;
 *     several segments may share a name (one client mounting in chunks);
 *     preferred_segments match it.
 *   base/size: the registered range [base, base+size) in the owner's address space;
 *     size in (0, MC_MASTER_SEGMENT_MAX_SIZE], base+size must not overflow.
 *   te_endpoint: transport endpoint returned in replica descriptors; NULL or "" = name.
 *   protocol: NULL or "" = "tcp". host_id: NULL or "" = none (same-host detection). */
typedef struct mc_master_segment {
    mc_master_uuid id;
    const char *name;
    uint64_t base;
    uint64_t size;
    const char *te_endpoint;
    const char *protocol;
    const char *host_id;
} mc_master_segment;

/* One replica as returned to clients (upstream Replica::Descriptor with a memory
 * descriptor: AllocatedBuffer::Descriptor{size, buffer_address, protocol,
 * transport_endpoint}). Owned by the caller (plain value, strings copied in). */
typedef struct mc_master_replica {
    mc_master_uuid segment_id;
    uint64_t address; /* virtual address in the segment owner's process               */
    uint64_t size;    /* bytes (the object's size; 0 for a zero-size object)          */
    int status;       /* mc_master_replica_status                                     */
    uint64_t fence_epoch; /* PROCESSING replicas of put_start / upsert_start: the writer's */
                          /* fence epoch for this segment, put on every WRITE to it      */
                          /* (docs/consistency.md); 0 elsewhere (unfenced)               */
    char transport_endpoint[MC_MASTER_NAME_MAX];
    char protocol[MC_MASTER_PROTOCOL_MAX];
    int type;         /* mc_master_replica_type (MEMORY = 0)                           */
} mc_master_replica;

/* A replica list (put_start / get_replica_list result). */
typedef struct mc_master_replica_list {
    uint32_t n;              /* replicas filled, <= MC_MASTER_MAX_REPLICAS            */
    uint64_t lease_ttl_ms;   /* get_replica_list: the lease granted; else 0            */
    mc_master_replica replicas[MC_MASTER_MAX_REPLICAS];
} mc_master_replica_list;

/* Per-put options (upstream ReplicateConfig). Borrowed for the call.
 *   replica_num: wanted replicas, >= 1 (0 -> INVALID_PARAMS); clamped to
 *     MC_MASTER_MAX_REPLICAS. Best effort: fewer (>= 1) is success.
 *   preferred_segments: segment names tried first, in order (n_preferred <=
 *     MC_MASTER_MAX_PREFERRED; unknown names are skipped).
 *   soft_pin: see mc_master_soft_pin_action. soft_pin_ttl_set/soft_pin_ttl_ms: ms; unset
 *     = default_kv_soft_pin_ttl; set with an action other than ENABLE, or above
 *     max_kv_soft_pin_ttl -> INVALID_PARAMS (upstream); 0 with ENABLE = not pinned.
 *   with_hard_pin: never evicted (removable by remove(force) or remove_all).
 *   strategy: MC_MASTER_STRATEGY_DEFAULT = the service's. */
typedef struct mc_master_put_config {
    uint32_t replica_num;
    const char *const *preferred_segments;
    size_t n_preferred;
    mc_master_soft_pin_action soft_pin;
    bool soft_pin_ttl_set;
    uint64_t soft_pin_ttl_ms;
    bool with_hard_pin;
    mc_master_strategy strategy;
} mc_master_put_config;

/* Fences (docs/consistency.md, not in upstream). A writer fence is applied by a segment
 * owner: refuse WRITEs from `writer` whose non-zero fence epoch is below min_epoch
 * (mc_te_fence_writer). A target fence is applied by a writer: start no WRITE with a
 * non-zero epoch below min_epoch to the segment whose transport endpoint is `segment`
 * (mc_te_fence_target), its own-segment copies included. */
typedef struct mc_master_writer_fence {
    mc_master_uuid writer;
    uint64_t min_epoch;
} mc_master_writer_fence;

typedef struct mc_master_target_fence {
    char segment[MC_MASTER_NAME_MAX]; /* NUL-terminated transport endpoint */
    uint64_t min_epoch;
} mc_master_target_fence;

/* What a ping acknowledges: the fences the client applied (each from an earlier reply)
 * since its last acknowledged ping. Arrays borrowed for the call; each n <=
 * MC_MASTER_MAX_FENCES; NULL with n == 0 is fine. */
typedef struct mc_master_ping_request {
    const mc_master_writer_fence *owner_acks; /* applied as owner */
    size_t n_owner_acks;
    const mc_master_target_fence *writer_acks; /* applied as writer */
    size_t n_writer_acks;
} mc_master_ping_request;

/* Ping reply (upstream PingResponse, plus the fences to apply). */
typedef struct mc_master_ping_result {
    int64_t view_version;   /* 0 without HA */
    int client_status;      /* mc_master_client_status */
    uint32_t n_writer_fences, n_target_fences; /* <= MC_MASTER_MAX_FENCES each */
    mc_master_writer_fence writer_fences[MC_MASTER_MAX_FENCES]; /* apply as owner  */
    mc_master_target_fence target_fences[MC_MASTER_MAX_FENCES]; /* apply as writer */
    bool tasks_pending;     /* a replica task (master/tasks.c) waits for this client to  */
                            /* fetch it: the hint that wakes its task thread             */
} mc_master_ping_result;

/* ---- the disk tier (docs/ssd-tier.md; upstream OffloadObjectHeartbeat /
 * NotifyOffloadSuccess, upstream-mooncake.md §4.10) ---- */

#define MC_MASTER_MAX_OFFLOAD_TASKS 256u /* tasks per offload heartbeat reply / results  */
                                         /* per offload_end request                      */

/* What the master asks a disk-tier client to do (a task), or what the client reports
 * (a result). WRITE: copy the object's memory replica at `address` (in the client's own
 * segment) to its disk; DELETE: drop the key from its disk (removed or replaced);
 * PROMOTE: read the key from disk into `address` (a new PROCESSING memory replica in
 * the client's own segment). REGISTER (results only): the client holds the key on disk
 * (found when its store opened), the master records a LOCAL_DISK replica if it knows no
 * other copy of the key. */
typedef enum mc_master_offload_op {
    MC_MASTER_OFFLOAD_WRITE = 0,
    MC_MASTER_OFFLOAD_DELETE = 1,
    MC_MASTER_OFFLOAD_PROMOTE = 2,
    MC_MASTER_OFFLOAD_REGISTER = 3,
} mc_master_offload_op;

/* One task or result. key: borrowed (a result) or pointing into the owning
 * mc_master_offload_tasks' keys buffer (a task). status: results only (OK, or the disk's
 * failure code: the master keeps the memory replica). */
typedef struct mc_master_offload_item {
    int op;           /* mc_master_offload_op */
    const void *key;
    size_t key_len;
    uint64_t size;    /* the object's bytes */
    uint64_t address; /* WRITE / PROMOTE: the memory replica in the client's segment */
    int status;
    uint64_t gen;     /* shared-FS DISK replicas: the file's generation, part of its name */
                      /* (WRITE, DELETE and WRITE results; 0 elsewhere)                   */
} mc_master_offload_item;

/* An offload heartbeat's tasks: n <= MC_MASTER_MAX_OFFLOAD_TASKS; the keys live in
 * `keys` (malloc'd by whoever fills it; free() it). */
typedef struct mc_master_offload_tasks {
    uint32_t n;
    bool fresh; /* the master did not know this client's tier (first heartbeat, a master
                 * restart, or the client expired meanwhile): it should REGISTER the
                 * objects on its disk again */
    mc_master_offload_item items[MC_MASTER_MAX_OFFLOAD_TASKS];
    void *keys;
    char fsdir[MC_MASTER_NAME_MAX]; /* shared-FS DISK replicas (--root_fs_dir): the
                 * directory "<root_fs_dir>/<cluster_id>" its WRITEs go to ("": none,
                 * WRITEs go to the client's own disk tier) */
} mc_master_offload_tasks;


/* ---- replica copy / move tasks (master/tasks.c; upstream CreateCopyTask /
 * CreateMoveTask / QueryTask / FetchTasks / MarkTaskToComplete, upstream-mooncake.md
 * §1.4, §4) ---- */

#define MC_MASTER_MAX_TASK_TARGETS 8u /* targets of one copy task                      */
#define MC_MASTER_TASK_MSG_MAX 256u   /* a task's message, incl. NUL                   */

/* Upstream TaskType / TaskStatus (numbers as upstream's enums). */
typedef enum mc_master_task_type {
    MC_MASTER_TASK_REPLICA_COPY = 0,
    MC_MASTER_TASK_REPLICA_MOVE = 1,
} mc_master_task_type;

typedef enum mc_master_task_status {
    MC_MASTER_TASK_PENDING = 0,    /* created, not yet fetched by its executor        */
    MC_MASTER_TASK_PROCESSING = 1, /* fetched: the executor is copying the bytes      */
    MC_MASTER_TASK_SUCCESS = 2,    /* every new replica is COMPLETE (move: the source */
                                   /* replica dropped)                                */
    MC_MASTER_TASK_FAILED = 3,     /* see message                                     */
} mc_master_task_status;

/* Upstream QueryTaskResponse. Times are wall-clock ms since the epoch. */
typedef struct mc_master_task_info {
    mc_master_uuid id;
    int type;   /* mc_master_task_type */
    int status; /* mc_master_task_status */
    uint64_t created_at_ms_epoch, last_updated_at_ms_epoch;
    mc_master_uuid assigned_client; /* the client that executes it (the owner of the */
                                    /* first target segment)                          */
    char message[MC_MASTER_TASK_MSG_MAX];
} mc_master_task_info;

/* One unit of work handed to an executor (fetch_tasks): copy `size` bytes of `key`
 * from the source replica (src_endpoint, src_address) into the replica reserved at
 * dst_address in the executor's own segment dst_endpoint, then report part `part` of
 * task `id` (mark_task_to_complete). */
typedef struct mc_master_task_work {
    mc_master_uuid id;
    uint32_t part;
    uint64_t size;
    char src_endpoint[MC_MASTER_NAME_MAX];
    uint64_t src_address;
    char dst_endpoint[MC_MASTER_NAME_MAX];
    uint64_t dst_address;
    size_t key_len;
    uint8_t key[MC_MASTER_KEY_MAX];
} mc_master_task_work;

#endif
