/* client/internal.h: the one internal header of src/client (the master RPC client and the
 * store client), shared by its .c files and its tests (tests/unit/client). Nobody outside
 * src/client includes it; the public surfaces are master_client.h and mooncake/store.h.
 *
 * Files of the module (each says what it owns at its top):
 *   master RPC client (library mc_client):
 *     master_conn.c    connection pool, framing, pipelining (mc__rpc_run), create/destroy
 *     master_codec.c   conversions between our types and the protobuf wire types, and
 *                      the hand-written decoders of the hot batch replies
 *     master_rpc.c     the single-key / single-request RPCs
 *     master_batch.c   the batch RPCs (split into chunks, pipelined on one connection)
 *   store client (library mc_store, include/mooncake/store.h):
 *     setup.c          create, validate, setup, teardown, close, destroy, small queries
 *     heartbeat.c      the heartbeat thread, NEED_REMOUNT handling
 *     local_buffer.c   the local buffer arena and mc_store_buffer handles
 *     user_buffers.c   register_buffer ranges and the zero-copy bounds check
 *     xfer.c           transfer sets (engine batches), replica placement helpers
 *     write.c          put / upsert (single and batch): start, write, end / revoke
 *     read.c           get (all destination kinds): locate, read replicas, lease check
 *     query.c          exist, size, replica descriptors, remove
 *     shared_fs.c      shared-FS DISK replicas (--root_fs_dir): the writer thread,
 *                      reads of the files
 *     client_http.c    the client's counters (mc__cstats) and its optional HTTP server
 *                      (/health, /metrics, /metrics/summary on client_http_port)
 *
 * Lock order (a lock may be taken while holding only those to its left):
 *   mc_store.life (rwlock)  ->  { mc_store.ubuf_lock | mc__lbuf.lock | mc_store.hb_lock }
 *                           ->  mc_master_client.lock  ->  the engine's own locks
 * - life: data calls take it shared (mc__store_enter / mc__store_leave), setup and close
 *   exclusive. It is writer-preferring so close is never starved by a stream of calls.
 * - ubuf_lock, lbuf.lock and hb_lock are leaves: nothing is called while holding them
 *   except mc_log and the offset allocator. They never nest with each other.
 * - mc_store_buffer_free runs with no store lock at all (a handle may outlive close): it
 *   takes only its arena's lock; the arena is refcounted.
 * - The heartbeat thread holds no store lock while it pings or remounts: teardown stops
 *   and joins it (under life exclusive) before it frees anything the thread uses.
 * - mc_master_client.lock guards only the slots' busy flags; it is never held across I/O.
 *   A call holds its connection slot (busy) for the whole RPC instead. */
#ifndef MOONCAKE_CLIENT_INTERNAL_H
#define MOONCAKE_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/allocator.h"
#include "common/list.h"
#include "client/master_client.h"
#include "common/auth.h"
#include "master.pb-c.h"
#include "rpc/arena.h"
#include "client/replydec.h"
#include "mooncake/store.h"

/* =================================================================================== */
/* Master RPC client                                                                   */
/* =================================================================================== */

#define MC__MASTER_TAG "master-client"
/* The longest string the wire may carry in a mc_master_replica / segment field. */
#define MC__MASTER_STR_MAX (MC_MASTER_NAME_MAX - 1)

/* Builds request i of a call (borrowed until the next build). */
typedef const ProtobufCMessage *(*mc__rpc_build_fn)(void *ctx, size_t i);
/* Consumes reply i: frame_status != 0 means no body (reply NULL). Returns MC_OK, or
 * MC_RPC_FAIL for a reply whose contents break the protocol. */
typedef int (*mc__rpc_reply_fn)(void *ctx, size_t i, int frame_status,
                                const ProtobufCMessage *reply);

/* mc__rpc_run: runs nreq requests of opcode op on one pooled connection, pipelined,
 * handing each reply (decoded with desc, valid only during the callback) to on_reply in
 * order. Returns MC_OK (results went to on_reply) or a transport / local code for the
 * whole call (MC_RPC_FAIL, MC_RPC_TIMEOUT, MC_INVALID_PARAMS). master_conn.c. */
int mc__rpc_run(mc_master_client *c, uint16_t op, size_t nreq, mc__rpc_build_fn build,
                const ProtobufCMessageDescriptor *desc, mc__rpc_reply_fn on_reply, void *ctx);
/* mc__rpc_single: one request, one reply; take reads the reply (its status field) and
 * returns the RPC's code. Returns a transport code, the frame status, or take's code. */
int mc__rpc_single(mc_master_client *c, uint16_t op, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *desc,
                   int (*take)(void *user, const ProtobufCMessage *reply), void *user);
/* mc__master_env_timeout: MC_RPC_TIMEOUT_MS (1..86400000 ms, default
 * MC_MASTER_CLIENT_DEFAULT_TIMEOUT_MS) through common/env.h. 0, or -EINVAL (logged,
 * naming the variable). master_conn.c. */
int mc__master_env_timeout(uint32_t *out);

/* ---- wire conversions (master_codec.c) ---- */

/* A reply's segment table (borrowed from the decoded reply), with the string lengths of
 * the entry mc__pb_replicas used last (consecutive keys mostly share a segment). */
typedef struct mc__segtab {
    Mcrpc__SegmentRef **v;
    size_t n;
    size_t memo;       /* index + 1 of the entry elen / plen are of; 0: none */
    size_t elen, plen; /* its transport_endpoint's and protocol's lengths */
} mc__segtab;

void mc__pb_uuid(Mcrpc__Uuid *u, mc_master_uuid id);
/* Checks every entry once (its strings fit mc_master_replica's fields) and fills t.
 * MC_OK or MC_RPC_FAIL. */
int mc__pb_segtab(Mcrpc__SegmentRef **v, size_t n, mc__segtab *t);
/* Replica descriptors from the master into out. MC_RPC_FAIL when they break the
 * protocol (too many, a segment index outside the reply's table). */
int mc__pb_replicas(Mcrpc__ReplicaDescriptor **v, size_t n, uint64_t lease, mc__segtab *t,
                    mc_master_replica_list *out);
/* cfg (NULL: one replica, defaults) -> wire config; MC_INVALID_PARAMS when it cannot be
 * sent. Strings stay borrowed from cfg. */
int mc__pb_config(const mc_master_put_config *cfg, Mcrpc__ReplicateConfig *pc);
/* s -> wire segment (strings borrowed); MC_INVALID_PARAMS when a string is too long. */
int mc__pb_segment(const mc_master_segment *s, Mcrpc__Segment *ps, Mcrpc__Uuid *id);
/* A key for the wire (borrowed); keys longer than MC_MASTER_KEY_MAX are sent empty. */
ProtobufCBinaryData mc__pb_key(const void *key, size_t len);
/* A key the master could accept: (key || len == 0) && len <= MC_MASTER_KEY_MAX. */
bool mc__master_key_ok(const void *key, size_t len);
/* mc__replydec_unpack: client/replydec.h */

/* =================================================================================== */
/* Store client                                                                        */
/* =================================================================================== */

#define MC__STORE_TAG "store"
#define MC__CHUNK_KEYS 4096u              /* keys per master RPC step / transfer set */

/* The remount window (docs/ha.md "The remount window"): just after a leader change the
 * new leader serves the segments it copied only once their owners remount (a segment
 * whose owner does not come back must not be read or written), so for a moment puts
 * answer NO_AVAILABLE_HANDLE and gets REPLICA_IS_NOT_READY. Within
 * MC__REMOUNT_WINDOW_MS of a view change this client asks again for exactly those keys,
 * every MC__REMOUNT_POLL_MS, for at most MC__REMOUNT_RETRY_MS per call. */
#define MC__REMOUNT_WINDOW_MS 10000u
#define MC__REMOUNT_RETRY_MS 5000u
#define MC__REMOUNT_POLL_MS 20u
/* mc__remount_call: asks the master again for keys[0..n) (map[j]: the key's index in the
 * caller's arrays), filling reps[0..n) and st[0..n) as the first call did. */
typedef void (*mc__remount_call)(void *ctx, const size_t *map, size_t n,
                                 const mc_master_key *keys, mc_master_replica_list *reps,
                                 int *st);
/* mc__remount_retry: while some st[k] == code and the remount window is open (above),
 * waits MC__REMOUNT_POLL_MS and re-asks for those keys through call, copying each answer
 * into reps[k] / st[k]. keys/reps/st: m entries, the caller's. read.c. */
void mc__remount_retry(mc_store *s, int code, const mc_master_key *keys, size_t m,
                       mc_master_replica_list *reps, int *st, mc__remount_call call,
                       void *ctx);
#define MC__HOST_MAX MC_STORE_NAME_MAX    /* host part of a segment name */
#define MC__TENANT_MAX 256u

/* ---- test hooks: deterministic ways for tests to stop at the points where the
 * protocol's failure cases happen (a writer dying between put_start and put_end, a read
 * that outlives its lease). Production code never sets them. ---- */

/* Hook points (the `point` argument). */
#define MC__STORE_HOOK_PUT_STARTED "put_started" /* after put_start succeeded, before any
                                                    byte is written */
#define MC__STORE_HOOK_READ_DONE "read_done"     /* after a read's transfer finished, before
                                                    the lease check (ranges.c: key "") */
#define MC__STORE_HOOK_READ_PIECE "read_piece"   /* a pipelined read started the piece
                                                    whose first key is given (read.c
                                                    read_early), later pieces unanswered */

/* Called at each hook point with the key of the item (for batches: the first key of the
 * call). NULL (the default) = no hook. Set it before the calls it should see; read
 * without a lock. Defined in setup.c. */
typedef void (*mc__store_hook_fn)(const char *point, const void *key, size_t key_len);
extern mc__store_hook_fn mc__store_test_hook;

static inline void mc__store_hook(const char *point, const void *key, size_t key_len)
{
    mc__store_hook_fn f = mc__store_test_hook;
    if (f)
        f(point, key, key_len);
}

/* ---- the local buffer arena (local_buffer.c) ---- */

typedef struct mc__lbuf {
    atomic_int refs;      /* the store's reference + one per live handle */
    pthread_mutex_t lock; /* guards alloc (a leaf lock) */
    void *base;           /* mmap'd, registered with the engine by setup */
    uint64_t size;        /* bytes */
    mc__alloc *alloc;     /* slices of [base, base+size) */
} mc__lbuf;

struct mc_store_buffer {
    void *data;
    uint64_t size;
    mc__lbuf *ar;    /* NULL: data is malloc'd (or NULL for size 0) */
    uint32_t handle; /* in ar->alloc */
};

/* A new arena of size bytes (one reference, the caller's); NULL when it cannot be mapped. */
mc__lbuf *mc__lbuf_create(uint64_t size);
/* Drops one reference; the last one unmaps. NULL is a no-op. Any thread, no lock held. */
void mc__lbuf_unref(mc__lbuf *a);
/* A handle for size bytes of the arena; NULL when a is NULL, size is 0 or it is full. */
mc_store_buffer *mc__lbuf_take(mc__lbuf *a, uint64_t size);
/* A handle for size bytes: the arena when it has room, else malloc'd memory. NULL only
 * when that malloc fails (size comes from the master: not an abort). */
mc_store_buffer *mc__lbuf_buffer_new(mc__lbuf *a, uint64_t size);

/* ---- the client's counters (client_http.c; shown on its HTTP server's /metrics) ---- */

/* Operations counted (mc__cstats_count's op). */
enum { MC__OP_PUT = 0, MC__OP_GET, MC__OP_REMOVE, MC__OP_COUNT };
/* Status slots of the failure counters: one per row of MC_STATUS_TABLE (by table index)
 * and a last one for a code outside it (client_http.c checks the table fits). */
#define MC__CSTATS_SLOTS 128

/* Counters of the calls on a set-up store, per item (a batch of n keys counts n). Reset
 * by setup; relaxed atomics, written by any calling thread, read by the HTTP thread. */
typedef struct mc__cstats {
    atomic_uint_fast64_t done[MC__OP_COUNT];  /* items completed, ok or not */
    atomic_uint_fast64_t bytes[MC__OP_COUNT]; /* object bytes of the successful ones
                                                 (put: written, get: read; remove: 0) */
    atomic_uint_fast64_t failed[MC__OP_COUNT][MC__CSTATS_SLOTS]; /* by status */
} mc__cstats;

struct mc_httpd;

/* ---- the store ---- */

/* One buffer given to mc_store_register_buffer (user_buffers.c): a node of a treap
 * keyed by base, each node holding the largest end (base + len) of its subtree. */
typedef struct mc__ubuf {
    uint64_t base, len; /* bytes */
    uint64_t max_end;   /* max base + len over this subtree */
    uint64_t prio;      /* treap priority (a heap on it keeps the depth O(log n)) */
    struct mc__ubuf *l, *r;
} mc__ubuf;

struct mc_store {
    pthread_rwlock_t life; /* shared: calls; exclusive: setup, close */
    atomic_bool up;        /* written under life (exclusive); read anywhere */
    atomic_bool read_local; /* hint (read.c read_chunk, hint_update): the last round of a
                               read chunk large enough to pipeline that moved bytes found
                               them all on the same-host path or in our own memory;
                               relaxed, any thread */

    /* Everything below is written under life (exclusive) and read under life (shared),
     * or by the heartbeat thread, which setup starts last and teardown joins first. */
    mc_te *te;
    bool own_te;
    mc_master_client *mc;
    mc_auth_secret auth;            /* the one cluster secret (len 0: none); setup loads it,
                                       teardown wipes it */
    mc_master_uuid client_id;
    char name[MC_STORE_NAME_MAX];   /* segment name "host:port" */
    char host[MC__HOST_MAX];        /* host part of name */
    char host_id[MC_SEGMENT_MAX_HOST_ID];
    char protocol[MC_STORE_PROTOCOL_MAX];
    char tenant[MC__TENANT_MAX];
    int port_fd;                    /* reservation of the auto-picked port, or -1 */

    void *seg_base;                 /* global segment (mc_te_alloc_shared), or NULL */
    uint64_t seg_size;
    mc_master_uuid seg_id;
    bool seg_mounted;

    mc__lbuf *ar;                   /* local buffer, or NULL */
    bool ar_registered;

    /* heartbeat (heartbeat.c) */
    pthread_t hb_thread;
    bool hb_started;
    pthread_mutex_t hb_lock;        /* guards hb_stop, hb_kick */
    pthread_cond_t hb_cond;         /* CLOCK_MONOTONIC; signalled by mc__hb_stop/_kick */
    bool hb_stop;
    bool hb_kick;                   /* HA: ping now (a new leader: remount without waiting) */
    uint32_t hb_interval_ms;
    atomic_bool ping_ok;            /* last ping succeeded */
    atomic_uint_fast64_t remounts;  /* NEED_REMOUNT handled */

    /* Fencing (docs/consistency.md). The heartbeat applies the fences of each ping reply to
     * the engine and reports them in the next ping (hb_* acks: the heartbeat thread only,
     * and teardown after joining it). Our own segment is written by our own copies in
     * write.c and ranges.c (no engine involved): own_min_epoch is its fence, raised under
     * own_fence exclusive, which write_own holds shared around each copy, so a raise
     * returns only after the copies with an older epoch have finished. */
    pthread_rwlock_t own_fence;     /* guards own_min_epoch                          */
    uint64_t own_min_epoch;         /* own-segment copies below it are refused       */
    mc_master_ping_result *hb_pr;   /* the heartbeat's reply buffer (heap: large)    */
    mc_master_writer_fence hb_owner_acks[MC_MASTER_MAX_FENCES];
    size_t hb_n_owner_acks;
    mc_master_target_fence hb_writer_acks[MC_MASTER_MAX_FENCES];
    size_t hb_n_writer_acks;
    atomic_uint_fast64_t fences_applied; /* fences applied to the engine (both kinds)  */
    uint64_t race_wait_ms;          /* how long a put waits for another writer's put   */
                                    /* of its key to end (write.c: settle_contested)   */

    /* Buffers registered with mc_store_register_buffer: the zero-copy calls' bounds
     * check (mc__check_ranges). A treap by base with subtree maxima of their ends
     * (registrations may overlap): insert, remove and lookup O(log n). Guarded by
     * ubuf_lock (register/unregister run under life shared, so life does not order
     * them). */
    pthread_rwlock_t ubuf_lock;
    mc__ubuf *ubuf_root;
    size_t n_ubufs;
    uint64_t ubuf_seq; /* feeds the priorities */

    /* The disk tier (offload.c, docs/ssd-tier.md): our disk store (NULL: none) and the
     * offload thread that polls the master for its tasks. off_mu guards off_stop. */
    struct mc_disk_store *disk;
    char disk_path[4097];
    pthread_t off_thread;
    bool off_started;
    pthread_mutex_t off_mu;
    pthread_cond_t off_cond;        /* CLOCK_MONOTONIC; signalled by mc__offload_stop */
    bool off_stop;
    uint32_t off_interval_ms;
    atomic_bool off_warned;         /* the master refused the tier (logged once) */
    int disk_lfd;                   /* the disk-read server's listening socket, or -1 */
    pthread_t disk_srv;
    bool disk_srv_started;
    char disk_ep[MC_MASTER_NAME_MAX]; /* "host:port" of that server: our LOCAL_DISK    */
                                      /* replicas' endpoint                            */
    /* shared-FS DISK replicas (shared_fs.c): the master's directory ("": none), the
     * writer thread (stopped through fs_stop under off_mu, woken by off_cond) */
    char fs_dir[MC_MASTER_NAME_MAX];
    pthread_t fs_thread;
    bool fs_started, fs_stop;
    atomic_uint_fast64_t fs_writes, fs_write_failures, fs_reads, fs_read_failures;
    atomic_uint_fast64_t off_writes, off_write_failures, off_promotions,
        off_promotion_failures, off_registered, off_deletes, disk_reads, disk_read_failures;
    /* Replica copy / move tasks (tasks.c): the thread that executes the parts whose
     * target is our segment. task_mu guards task_stop. */
    pthread_t task_thread;
    bool task_started;
    pthread_mutex_t task_mu;
    pthread_cond_t task_cond;       /* CLOCK_MONOTONIC; signalled by mc__tasks_stop */
    bool task_stop, task_kick;
    uint32_t task_poll_ms;
    atomic_uint_fast64_t tasks_done, tasks_failed;
    /* Extra segments (segments.c: mount_segment & co.), a list of mc__xseg guarded by
     * xseg_lock (segment calls run under life shared; teardown under exclusive). */
    pthread_mutex_t xseg_lock;
    mc_list xsegs;
    size_t n_xsegs;
    /* The client's counters and its HTTP server (client_http.c). The server is started
     * last by setup and stopped first by teardown (both under life exclusive), so its
     * handlers read what they show (te, ar, seg_size, name) without taking life. */
    mc__cstats cstats;
    struct mc_httpd *http;          /* NULL: not enabled (or not set up) */
};

/* ---- extra segments (segments.c) ---- */

/* Initialises / destroys the extra-segment state (create / destroy). */
void mc__xseg_init(mc_store *s);
void mc__xseg_deinit(mc_store *s);
/* The read lease rule, for read.c and ranges.c: true when a lease that ends at deadline
 * (ms, mc_now_ms: t0 + TTL, t0 taken before the request that granted it was sent) no
 * longer covers bytes that landed by `now`. The master holds a lease while its clock is
 * < atime + TTL (src/master/internal.h leased()), atime taken after t0. Each host counts
 * whole ms at its own phase, so a master on another host may count up to 1 ms more of
 * the lease as gone than this client does: a read is trusted only while now + 1 <
 * deadline, which closes that window (on one host it costs 1 ms of the lease). Clocks
 * that run at different rates (NTP slew, up to 500 ppm) are not covered. */
static inline bool mc__lease_over(uint64_t now, uint64_t deadline)
{
    return now + 1 >= deadline;
}

/* Unmounts (when the master answers: ping_ok) and releases every extra segment. Caller
 * holds life exclusively (teardown), before the engine and master client go. */
void mc__xseg_teardown(mc_store *s);
/* Fills segs[0..cap) with the mounted extra segments (strings borrowed from s; valid
 * under life, which the heartbeat's caller guarantees); returns how many. */
size_t mc__xseg_fill(mc_store *s, mc_master_segment *segs, size_t cap);

/* ---- shared small helpers (setup.c unless inline) ---- */

/* Takes life shared; MC_OK when set up (the lock is then held: call mc__store_leave),
 * else MC_INVALID_PARAMS (NULL store, not set up, closed) with no lock held. */
int mc__store_enter(mc_store *s);
void mc__store_leave(mc_store *s);

/* A key the store accepts: 1..MC_STORE_KEY_MAX bytes. */
static inline bool mc__store_key_ok(const void *key, size_t len)
{
    return key && len >= 1 && len <= MC_STORE_KEY_MAX;
}

/* The master's put config plus the storage its preferred_segments points into. */
typedef struct mc__put_cfg {
    mc_master_put_config m;
    const char *pref[MC_MASTER_MAX_PREFERRED];
} mc__put_cfg;

/* Converts and checks a replicate config (c may be NULL: one replica, no preferences) for a
 * call on nkeys keys into *out (which points into c's strings and s->name: valid while they
 * are). same_node_ok: the call accepts prefer_alloc_in_same_node (upstream accepts it only on
 * the multi-buffer and reserved puts). More replicas than MC_STORE_MAX_REPLICAS are capped,
 * the legacy with_soft_pin means ENABLE unless an action was given. Returns MC_OK or
 * MC_INVALID_PARAMS (logged). Any thread (reads s->name only). Defined in write.c. */
int mc__put_cfg_conv(mc_store *s, const mc_store_replicate_config *c, size_t nkeys,
                     bool same_node_ok, mc__put_cfg *out);

/* Converts keys[n] for the master: an invalid one gets MC_INVALID_PARAMS in res[i] and
 * is left out. Returns the number kept, m; mk[0..m) the kept keys (pointing into keys),
 * map[j] the position of kept key j. mk and map hold n entries. Defined in query.c. */
size_t mc__conv_keys(const mc_store_key *keys, size_t n, mc_master_key *mk, size_t *map,
                     int *res);

/* The master's replica list as the store's public one (at most MC_STORE_MAX_REPLICAS,
 * all memory replicas; strings truncated to the public fields). Defined in query.c. */
void mc__conv_replica_list(const mc_master_replica_list *in, mc_store_replica_list *out);

/* Every results[i] = code (results may be NULL). */
static inline void mc__fill_results(int *results, size_t n, int code)
{
    if (results)
        for (size_t i = 0; i < n; i++)
            results[i] = code;
}
static inline void mc__fill_results64(int64_t *results, size_t n, int64_t code)
{
    if (results)
        for (size_t i = 0; i < n; i++)
            results[i] = code;
}

/* mc__store_enter for a batch call with n results: on a failure every results[i] = the
 * code, which is returned (no lock held); MC_OK: entered. */
static inline int mc__store_enter_batch(mc_store *s, int *results, size_t n)
{
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        mc__fill_results(results, n, rc);
    return rc;
}
static inline int mc__store_enter_batch64(mc_store *s, int64_t *results, size_t n)
{
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        mc__fill_results64(results, n, rc);
    return rc;
}

/* Splits "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 address with
 * mc_sock_parse_hostport (net/sock.h). host gets the host (no brackets); *port = -1 when
 * the text has none. The client also refuses blanks and '/' in the host (a URL given as
 * a host name). Returns 0, or -1 when malformed. */
int mc__store_split_hostport(const char *s, char *host, size_t hlen, int *port);

/* ---- heartbeat (heartbeat.c) ---- */

/* Our global segment as the master knows it (strings borrowed from s). */
void mc__store_fill_segment(const mc_store *s, mc_master_segment *seg);
/* Starts the heartbeat thread (ping every interval_ms). Caller holds life exclusive.
 * MC_OK or MC_INTERNAL_ERROR (logged). */
int mc__hb_start(mc_store *s, uint32_t interval_ms);
/* Stops and joins it when it runs. Caller holds life exclusive. */
void mc__hb_stop(mc_store *s);
/* mc__hb_kick: the next heartbeat runs now rather than after its interval (the master
 * client's leader hook: a new HA leader learns our segments at once). Any thread; ctx is
 * the mc_store. */
void mc__hb_kick(void *ctx);
/* After mc__hb_stop: reports the fences applied but not acknowledged yet in one last
 * ping (so the master need not wait for our expiry to free quarantined space), then
 * forgets the fence state (the next setup is a new client id). Caller holds life
 * exclusive. */
void mc__hb_flush(mc_store *s);
/* The fence of our own segment: MC_OK when a copy at fence epoch `epoch` (0: unfenced)
 * may go on; the caller then holds own_fence shared and must call mc__own_fence_leave
 * after the copy. MC_TRANSFER_FAIL (no lock held) when the epoch is fenced. */
int mc__own_fence_enter(mc_store *s, uint64_t epoch);
void mc__own_fence_leave(mc_store *s);

/* ---- counters and the client HTTP server (client_http.c) ---- */

/* Zeroes the counters (setup, under life exclusive, before the store is up). */
void mc__cstats_reset(mc_store *s);
/* Counts one completed item of operation op (MC__OP_*): rc >= 0 is a success that moved
 * `bytes` object bytes, rc < 0 a failure with that status. Any thread, no lock. */
void mc__cstats_count(mc_store *s, int op, int64_t rc, uint64_t bytes);
/* Starts the client HTTP server when c->enable_client_http_server: on the host of our
 * segment name (127.0.0.1 for a loopback name such as "localhost"), port
 * c->client_http_port (0: a free one), signed requests when the store has a secret
 * (every path but the three open ones). Caller holds life exclusive, last step of
 * setup. MC_OK (also when not enabled); MC_INTERNAL_ERROR (the port is taken, or the
 * address cannot be bound) or MC_INVALID_PARAMS (the host does not resolve), logged
 * naming the address and client_http_port. */
int mc__chttp_start(mc_store *s, const mc_store_config *c);
/* Stops it (joins its threads) when it runs. First step of teardown. */
void mc__chttp_stop(mc_store *s);

/* ---- replica copy / move tasks (tasks.c) ---- */

/* Starts the task thread when we have a global segment (after the mount). Caller holds
 * life exclusively. MC_OK, INVALID_PARAMS (a bad MC_TASK_POLL_MS), INTERNAL_ERROR. */
int mc__tasks_start(mc_store *s);
/* Stops and joins it (first in teardown; harmless when never started). */
void mc__tasks_stop(mc_store *s);
/* Wakes it to fetch now (the ping said a task waits for us). Any thread. */
void mc__tasks_kick(mc_store *s);

/* ---- the disk tier (offload.c) ---- */

/* Opens the disk store when c asks for one (enable_ssd_offload with ssd_offload_path, or
 * MOONCAKE_OFFLOAD_FILE_STORAGE_PATH) and starts the offload thread. Caller holds life
 * exclusive, after the master client and the segment are set up. MC_OK (also when no
 * disk tier is asked for), or the disk store's / environment's code (logged). */
int mc__offload_start(mc_store *s, const mc_store_config *c, uint32_t hb_ms);
/* Stops and joins the offload thread (first in teardown). */
void mc__offload_stop(mc_store *s);
/* Closes the disk store (last in teardown). */
void mc__offload_close(mc_store *s);
/* Reads key from our own disk into the parts iov[0..niov) (size bytes of the object).
 * MC_OK, or the disk store's code (OBJECT_NOT_FOUND, CHECKSUM_MISMATCH: the record did
 * not verify and was dropped, FILE_READ_FAIL), MC_OBJECT_NOT_FOUND without a disk. */
int mc__offload_read_own(mc_store *s, const void *key, size_t klen, const mc_store_iov *iov,
                         size_t niov, uint64_t size);
/* True when replica r is a LOCAL_DISK replica of ours. */
bool mc__offload_is_own(const mc_store *s, const mc_master_replica *r);
/* Reads another client's LOCAL_DISK replica r of key through that client's disk-read
 * server (its endpoint) into iov (size bytes). Blocking, on the caller's thread, bounded
 * by deadline_ms (monotonic). MC_OK, or MC_TRANSFER_FAIL (unreachable, timed out,
 * protocol error), or the owner's disk code (OBJECT_NOT_FOUND, CHECKSUM_MISMATCH). */
int mc__offload_read_remote(mc_store *s, const mc_master_replica *r, const void *key,
                            size_t klen, const mc_store_iov *iov, size_t niov, uint64_t size,
                            uint64_t deadline_ms);

/* ---- shared-FS DISK replicas (shared_fs.c, docs/ssd-tier.md) ---- */

/* Asks the master whether it runs with --root_fs_dir (an offload heartbeat probe); if so
 * checks that the directory is writable here (creating "<root>/<cluster_id>"), and, with
 * a global segment, starts the thread that writes the objects of our segment there.
 * Caller holds life exclusive, after the heartbeat started. MC_OK (also: no shared
 * directory), or INVALID_PARAMS / FILE_OPEN_FAIL / FILE_WRITE_FAIL (logged). */
int mc__shared_fs_start(mc_store *s, const mc_store_config *c, uint32_t hb_ms);
/* Stops and joins that thread (teardown, before the segment goes). */
void mc__shared_fs_stop(mc_store *s);
/* Reads the DISK replica of key at path (the descriptor's transport_endpoint) into iov
 * (size bytes), verifying the file's header (key, size) and xxhash. Blocking, on the
 * caller's thread. MC_OK; OBJECT_NOT_FOUND (no such file, or another key / size: not
 * this object); CHECKSUM_MISMATCH (a torn or corrupt file: the bytes already copied
 * into iov are not to be used); INVALID_PARAMS (a path that is not this key's name). */
int mc__shared_fs_read(mc_store *s, const char *path, const void *key, size_t klen,
                       const mc_store_iov *iov, size_t niov, uint64_t size);

/* ---- user buffers (user_buffers.c) ---- */

/* Forgets every registration (teardown). Caller holds life exclusive. */
void mc__ubuf_clear(mc_store *s);
/* The bounds check every zero-copy path runs on the caller's ranges before any RPC or
 * transfer (see user_buffers.c). MC_OK or MC_INVALID_PARAMS (logged once per call; *logged
 * says a line was written already, NULL for single-key calls). */
int mc__check_ranges(mc_store *s, const mc_store_iov *iov, size_t n, const char *op,
                     size_t index, bool *logged);

/* ---- transfer sets (xfer.c) ---- */

/* A segment opened during one call (cache entry). */
typedef struct mc__ep_cache {
    char name[MC_MASTER_NAME_MAX];
    mc_te_segment_t h;
    int rc; /* the open's code, MC_OK when h is usable */
} mc__ep_cache;

/* The engine requests of one step of a call, each tagged with the item it belongs to.
 * Single-threaded (the calling thread's stack). */
typedef struct mc__xfer {
    mc_store *s;
    mc_te_request *reqs;
    size_t *owner; /* item index of each request */
    size_t n, cap;
    mc__ep_cache *eps;
    size_t neps, capeps;
    uint64_t until_ms; /* read attempts (read.c): the earliest deadline or hedge time of
                          those queued (mc_now_ms; 0: none), which bounds
                          mc__xatt_start's inline budget; reset with the requests */
} mc__xfer;

void mc__xfer_init(mc__xfer *x, mc_store *s);
/* Forgets the requests (keeps the segment cache) for the next round. */
void mc__xfer_reset(mc__xfer *x);
void mc__xfer_deinit(mc__xfer *x);
/* The engine handle of segment `ep` (opened once per call). MC_OK or the open's code. */
int mc__xfer_seg(mc__xfer *x, const char *ep, mc_te_segment_t *h);
/* Queues one request (len 0: nothing) of opcode op for item `owner`. */
void mc__xfer_add(mc__xfer *x, int op, void *local, mc_te_segment_t h, uint64_t remote,
                  uint64_t len, size_t owner);
/* Queues one WRITE carrying fence epoch `epoch` (the replica's, from put_start). */
void mc__xfer_add_write(mc__xfer *x, void *local, mc_te_segment_t h, uint64_t remote,
                        uint64_t len, size_t owner, uint64_t epoch);
/* True when every queued request goes to a segment on the same-host path (so its copy
 * is done inside the submit, by this thread: mc_te_segment_is_local); true when none is
 * queued. */
bool mc__xfer_all_local(mc__xfer *x);
/* Submits every queued request, runs during(ctx) (own-memory copies; may be NULL) while
 * they fly, waits for all, and sets errs[owner] (when still 0) to MC_TRANSFER_FAIL or
 * MC_RPC_TIMEOUT for each failed request. */
void mc__xfer_run(mc__xfer *x, int *errs, void (*during)(void *), void *ctx);

/* A submitted set: requests submitted together as engine batches that are waited for
 * with a deadline and given up as a whole (mc_te_cancel_batch); the state of any range
 * of its requests can be read. The read path submits the attempts of one round (many
 * items, one replica each) as one set, so a batch get keeps the engine's batching, and
 * ends the sets when the call ends (read.c). */
typedef struct mc__xatt {
    mc_te_batch_t *ids; /* nb batches, submitted */
    size_t nb;
    size_t next;        /* batches [0, next) are known terminal */
    size_t n;           /* requests */
    int rc;             /* MC_OK, or the code of a failed allocate / submit: requests
                           of batches [nb, ...) failed with it */
    bool any_failed;    /* a batch of [0, next) ended with a failed request */
    bool all_ok;        /* every request completed */
} mc__xatt;

#define MC__XATT_PENDING 1 /* still running */

/* Submits the requests queued on x (then forgets them, as mc__xfer_reset) as set a;
 * request i of x is request i of a. a must be ended with mc__xatt_end. */
void mc__xatt_start(mc__xfer *x, mc__xatt *a);
/* Waits until every request of a is over or the monotonic time until_ms. MC_OK (all
 * over: see mc__xatt_state, or a->all_ok) or MC__XATT_PENDING. */
int mc__xatt_wait(mc_te *te, mc__xatt *a, uint64_t until_ms);
/* State of requests [first, first+n) of a: MC_OK (all completed), MC__XATT_PENDING
 * (some still running, none failed), or a failed one's code (MC_TRANSFER_FAIL,
 * MC_RPC_TIMEOUT for the engine's timeout). No waiting. */
int mc__xatt_state(mc_te *te, const mc__xatt *a, size_t first, size_t n);
/* Ends a: frees its batches, cancelling those still in flight; when it returns no byte
 * of a lands in local memory any more (a READ reply arriving later goes to the engine's
 * scratch). */
void mc__xatt_end(mc_te *te, mc__xatt *a);

/* True when [addr, addr+len) of segment ep lies in this client's own global segment. */
bool mc__in_own_segment(const mc_store *s, const char *ep, uint64_t addr, uint64_t len);
/* How close a replica is: 0 own segment, 1 same host, 2 elsewhere. */
int mc__replica_rank(const mc_store *s, const mc_master_replica *r);

/* ---- HA leader lookup (leader.c; docs/ha.md) ---- */

typedef struct mc__leader mc__leader;

/* True when address is a leader locator ("etcd://...", "redis://...", also "k8s://",
 * which mc__leader_create refuses) rather than a master's host:port. */
bool mc__leader_locator(const char *address);
/* A lookup client for locator address (borrowed). MC_OK with *out; MC_NOT_SUPPORTED
 * (neither etcd nor Redis), MC_INVALID_PARAMS (bad endpoints or MC_MASTER_CLUSTER_ID);
 * logged. */
int mc__leader_create(const char *address, mc__leader **out);
void mc__leader_destroy(mc__leader *l);
/* The leader now: addr ("host:port", len bytes with the NUL) and its view. MC_OK,
 * MC_OBJECT_NOT_FOUND (between two leaders), or a transport code. Thread-safe. */
int mc__leader_resolve(mc__leader *l, char *addr, size_t len, int64_t *view);
/* mc__leader_resolve until a leader is found or timeout_ms (ms) passed, every 100 ms;
 * on failure one ERROR line sums the lookups up (the backend's own warnings are
 * rate-limited). Same codes. */
int mc__leader_wait(mc__leader *l, uint32_t timeout_ms, char *addr, size_t len,
                    int64_t *view);
/* A new leader found by the follow thread: addr "host:port" (borrowed for the call), its
 * view (larger than every one reported before and than the start view), how ("the
 * watch", "the poll", "a read of the key": for messages). Runs on the follow thread. */
typedef void (*mc__leader_fn)(void *ctx, const char *addr, int64_t view, const char *how);
/* mc__leader_follow: starts the follow thread (leader.c file comment) from view (the
 * leader in use); fn(ctx, ...) on each newer view until mc__leader_destroy, which stops
 * and joins it (so ctx must outlive l). Once per l. MC_OK, or a code (logged): calls
 * still find a change when they fail. */
int mc__leader_follow(mc__leader *l, int64_t view, mc__leader_fn fn, void *ctx);

#endif
