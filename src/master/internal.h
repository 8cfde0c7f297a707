/* master/internal.h: the master core's shared structs, small inline helpers and the
 * internal calls between its files. Only the sources in src/master include it; public
 * behaviour is documented in master_service.h.
 *
 * Files of the core (mc_master), each owning one concern:
 *   object_index.c  the per-shard hash table, the shard lists, object records, gauges of
 *                   objects entering/leaving the index
 *   space.c         where replica space is given back: THE reuse point
 *                   (mc__space_release_locked), erase/remove of objects, deferred frees
 *   fence.c         fence epochs per (writer, segment endpoint) and the quarantine of
 *                   failed writes' space until both sides acknowledged the fence
 *                   (docs/consistency.md)
 *   segments.c      segments (mount/remount/unmount) and clients (liveness, expiry)
 *   placement.c     choosing segments and reserving space for a new object's replicas
 *   evict.c         approximate-LRU eviction and the watermark rule
 *   writes.c        put/upsert start/end/revoke and their batch forms
 *   reads.c         get, exist, regex lookups (and the regex helper remove uses)
 *   remove.c        remove, batch remove, remove by regex, remove all, batch replica
 *                   clear
 *   service.c       config, create/destroy, tick, stats, admin queries, op names
 *   oplog.c         the mutation log (group commit on its writer thread) and the hooks
 *                   below (mc__log_*), called once per mutation; no-ops when off
 *   snapshot.c      snapshots (copied shard by shard, written on their own thread),
 *                   restore and mc_master_log_apply (master/persist.h)
 *   oplog_codec.c   the log / snapshot frames (master/oplog_codec.h)
 *   offload.c       the disk tier (LOCAL_DISK replicas, tasks for clients)
 *   shared_fs.c     shared-FS DISK replicas' file names and descriptors (with offload.c)
 *
 * Layout
 *   - Index: `nshards` shards chosen by the low bits of XXH3-64(key); each shard has one
 *     mutex, an open-addressing hash table and three intrusive lists (common/list.h):
 *     `proc` (writes in flight, by put_start time), `lru` (complete objects, by last
 *     access) and `soft` (complete soft-pinned objects, by last access). Hard-pinned and
 *     zero-size complete objects are in no list (never evicted, never scanned).
 *   - Hash table: linear probing over 8-byte slots, each the object's address (below
 *     2^48, checked) with the low 16 bits of the key's 32-bit in-shard hash `h32` in the
 *     top 16 bits; 0 = empty. The home slot is h32 & mask, so while a table has at most
 *     2^16 slots the slot alone gives an entry's home (growing and deleting never read
 *     the objects), and the tag bits tell most other keys apart without reading the
 *     object: a lookup miss usually costs one cache line of slots and no object. Load
 *     <= 3/4 (doubling); deletion shifts the cluster back (no tombstones). Batch calls
 *     hash a few keys ahead and prefetch their slots.
 *   - An object is ONE malloc: the `obj` header (64 bytes), its replicas (24 bytes each:
 *     slot, allocator handle, address, fence epoch) and the key bytes.
 *   - Segments: a slot table under a reader/writer lock (writers: mount/unmount); each
 *     segment has its own mutex around its allocator. A replica names its segment by
 *     slot; a slot is reused only after every replica on it has been dropped.
 *
 * Locks (what each guards):
 *   shard.mu       the shard's table (slots, mask, count), its three lists, and every
 *                  field of each object indexed in that shard.
 *   defer_mu       the deferred list, defer_min, and the objects on that list.
 *   seg_lock       (rwlock, prefers writers) the slot table segs/nslots/slots_cap,
 *                  nmounted and seg.unmounting (written under the write lock). Any
 *                  dereference of svc->segs[slot] needs at least the read lock.
 *   seg.mu         that segment's allocator.
 *   client_mu      the client table (clients, nclients, clients_cap).
 *   fence_lock     (rwlock) the fence table (frecs, fidx, ...), every fence_rec, the
 *                  quarantine list and its entries. Readers: put_start's epoch lookup;
 *                  writers: raising an epoch, quarantining, acknowledging, reaping.
 *   evict_mu       serialises eviction passes (one at a time across the service).
 *   Counters (`counter`) are relaxed atomics and need no lock; sweep_pos is tick-only.
 *   oplog->mu      (oplog.c) the log's pending frames and LSNs: a leaf, taken last, held
 *                  only to copy a frame in (never across I/O).
 *
 * Lock order (take left before right; never the reverse):
 *   evict_mu -> shard.mu -> defer_mu -> seg_lock (read) -> fence_lock -> seg.mu
 * seg_lock for writing is taken with no other lock held (mount, unmount marking, expiry
 * marking). client_mu is never held together with another lock. Nothing takes seg_lock
 * for reading twice in one thread (a waiting writer would deadlock it). Only one shard
 * mutex is held at a time.
 */
#ifndef MOONCAKE_MASTER_INTERNAL_H
#define MOONCAKE_MASTER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "alloc/allocator.h"
#include "common/list.h"
#include "common/xalloc.h"
#include "master/master_service.h"
#include "mooncake/mc_time.h"

#define TAG "master"

/* ---- counters: relaxed atomics (gauges and monotonic counters) ---- */

typedef _Atomic uint64_t counter;

static inline void cadd(counter *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}
static inline void csub(counter *c, uint64_t v)
{
    atomic_fetch_sub_explicit(c, v, memory_order_relaxed);
}
static inline uint64_t cget(counter *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* ---- objects ---- */

typedef struct rep {
    uint32_t seg;    /* segment slot */
    uint32_t handle; /* allocator handle; MC__ALLOC_NONE for a zero-size replica */
    uint64_t addr;
    uint64_t epoch;  /* in flight: the writer's fence epoch for this segment when the  */
                     /* write started (fence.c); stale once the object is complete     */
} rep;

enum {
    F_PROC = 1,     /* write in flight (replicas PROCESSING); in the proc list      */
    F_HARD = 2,     /* hard pin                                                       */
    F_SOFT = 4,     /* soft pin (pending with F_SOFT_REL, else active until `pin`)    */
    F_SOFT_REL = 8, /* `pin` is a TTL that starts at put_end                          */
    F_LEASED = 16,  /* a read lease was granted at `atime`                            */
    /* the disk tier (offload.c, docs/ssd-tier.md) */
    F_DISK = 32,    /* has a LOCAL_DISK replica (its owner: offload.c's disk map); with */
                    /* nrep == 0 the object is disk-only (in no list)                  */
    F_OFFQ = 64,    /* an offload WRITE (or, disk-only, a PROMOTE: its one memory      */
                    /* replica is PROCESSING, hidden from readers) is pending: not     */
                    /* evictable meanwhile                                             */
    F_NOOFF = 128,  /* an offload of this object was refused: eviction takes it as     */
                    /* before                                                          */
};

typedef struct obj {
    mc_list link;          /* in the shard's proc / lru / soft list, the deferred list, */
                           /* or the shard's gone list; unlinked (self) when in none    */
    uint64_t size;         /* bytes                                                     */
    uint64_t atime;        /* complete: last access ms; in flight: start                */
    uint64_t pin;          /* soft pin deadline ms (TTL with F_SOFT_REL); deferred:     */
                           /* the bytes its replicas keep reserved                      */
    mc_master_uuid owner;  /* client of the write in flight                             */
    uint32_t hash;         /* high 32 bits of the key hash                              */
    uint16_t key_len;
    uint8_t nrep;
    uint8_t flags;
    rep reps[];            /* then key_len key bytes                                    */
} obj;

_Static_assert(sizeof(obj) == 64, "the object header is one cache line");

static inline uint8_t *okey(obj *o)
{
    return (uint8_t *)(o->reps + o->nrep);
}

static inline obj *obj_of(mc_list *n)
{
    return MC_CONTAINER_OF(n, obj, link);
}

typedef struct shard {
    pthread_mutex_t mu;
    uint64_t *slots; /* hash table (see the top); guarded by mu, but slots/mask are */
    uint32_t mask;   /* stored atomically so batch calls may prefetch without it    */
    uint32_t count;
    mc_list proc, lru, soft; /* heads: oldest first                                 */
    mc_list gone; /* in-flight puts an unmount left without a replica (drop_slot):    */
                  /* not in the table, kept (key, owner, nrep 0, atime = the unmount) */
                  /* so that their put_end / put_revoke answer REPLICA_IS_GONE, not   */
                  /* OBJECT_NOT_FOUND; oldest first; freed by that call, the writer's */
                  /* expiry or the tick after release_ms. Guarded by mu               */
} __attribute__((aligned(64))) shard;

/* ---- segments and clients ---- */

typedef struct seg {
    mc_master_uuid id, client;
    const char *name, *endpoint, *protocol, *host_id; /* in `strings`        */
    char *strings;
    uint64_t name_hash, ep_hash;   /* XXH3 of name / of endpoint             */
    uint64_t base, size, capacity; /* capacity: the allocator's usable bytes */
    pthread_mutex_t mu;            /* guards alloc                           */
    mc__alloc *alloc;
    counter used;                  /* bytes reserved                         */
    bool unmounting;               /* written under the table write lock     */
    uint64_t grace_deadline;       /* ms; a graceful unmount finishes then (0:   */
                                   /* none); under the table write lock          */
    bool pending;                  /* restored, its owner not back yet: not  */
                                   /* read from nor placed on (table lock)   */
} seg;

typedef struct client {
    mc_master_uuid id;
    uint64_t deadline; /* ms */
    bool graced;       /* deadline was set by a stall grace and no ping came since */
} client_rec;

struct mc_master_service {
    mc_master_config cfg;
    uint64_t lease_ttl, client_ttl_ms, discard_ms, release_ms; /* ms; fixed at create */
    uint32_t nshards;
    shard *shards;
    uint64_t seed; /* key hash seed, random per service */

    pthread_rwlock_t seg_lock;
    seg **segs; /* slot table, guarded by seg_lock */
    uint32_t nslots, slots_cap, nmounted;

    pthread_mutex_t client_mu;
    client_rec *clients; /* guarded by client_mu */
    size_t nclients, clients_cap;
    uint64_t stall_ms;   /* cfg.stall_threshold_ms; 0 = no stall detection; fixed      */
    counter last_tick;   /* ms: end of the previous tick (create time before the first) */

    pthread_mutex_t defer_mu;
    mc_list deferred;   /* force-removed, leased objects; guarded by defer_mu         */
    uint64_t defer_min; /* earliest deadline on the list (UINT64_MAX: none); defer_mu */

    pthread_mutex_t evict_mu;
    counter evict_gen; /* bumped after every eviction pass */
    atomic_bool need_evict;
    uint32_t sweep_pos; /* tick only */

    counter allocated, capacity, keys, soft_keys, proc_keys, proc_bytes;
    counter requests[MC_MASTER_OP_COUNT], failures[MC_MASTER_OP_COUNT];
    struct {
        counter requests, failures, partial, items, failed_items;
    } batch[MC_MASTER_BATCH_COUNT];
    counter alloc_failures, partial_allocs, evict_attempts, evict_successes;
    counter evicted_keys, evicted_bytes, put_discarded, put_released, clients_expired;
    counter defer_keys, defer_bytes;
    counter vsize[MC_MASTER_VALUE_SIZE_BUCKETS], vsize_sum;

    /* fence.c (docs/consistency.md). fence_base: the epoch of a pair never raised. */
    uint64_t fence_base;
    pthread_rwlock_t fence_lock;
    struct fence_rec **frecs;  /* every record, guarded by fence_lock              */
    size_t nfrecs, frecs_cap;
    uint32_t *fidx;            /* open addressing over frecs: index + 1, 0 = empty */
    size_t fidx_cap;           /* power of two (0: none yet)                        */
    mc_list quarantine;        /* quarantined allocations, oldest first; fence_lock */
    /* ha_gate.c: the HA role (docs/ha.md). Zero = no HA: a leader that always serves. */
    atomic_bool ha_enabled;      /* set once before serving */
    atomic_int ha_role;          /* mc_master_role */
    _Atomic int64_t ha_view;     /* view version; 0 without HA */
    _Atomic uint64_t ha_until;   /* monotonic ms: requests are served only before it */
    pthread_mutex_t ha_mu;
    char ha_leader[MC_MASTER_NAME_MAX]; /* the leader's RPC address; ha_mu */
    counter nfence;            /* nfrecs, readable without the lock (fast paths)    */
    counter fence_pending;     /* (record, side) pairs not yet acknowledged         */
    counter quar_bytes, quar_entries, fences_issued, fences_acked;

    /* oplog.c: the mutation log, NULL when off (set before serving, cleared after) */
    struct mc__oplog *oplog;
    /* replicate.c: the HA replication ring (leader and standby), NULL without HA */
    struct mc__repl *repl;
    counter npending; /* segments with `pending` set (0: the ping path skips a lock) */
    struct mc__offload *off; /* the disk tier (offload.c); NULL without enable_offload */
    struct mc__tasks *tasks; /* replica copy / move tasks (tasks.c) */
    /* oplog.c: called by the log writer when a deferred reply may be due (the RPC
     * server's, mc_master_log_set_notify); guarded by oplog.c's notify_mu */
    void (*log_notify)(void *);
    void *log_notify_arg;
    _Atomic bool log_defer; /* a notify is set: RPC threads may defer their waits */
    /* inflight.c: a standby's copy of the leader's writes in flight (NULL: none yet) */
    struct mc__inflight *inflight;
};

/* ---- small helpers ---- */

static inline uint64_t now_ms(mc_master_service *svc)
{
    return svc->cfg.clock ? svc->cfg.clock(svc->cfg.clock_ctx) : mc_now_ms();
}

static inline bool uuid_eq(mc_master_uuid a, mc_master_uuid b)
{
    return a.first == b.first && a.second == b.second;
}

static inline int check_key(const void *key, size_t len)
{
    if (len == 0 || len > MC_MASTER_KEY_MAX || !key)
        return MC_INVALID_PARAMS;
    return MC_OK;
}

/* The key's hash, or 0 for a key check_key rejects (callers check before using it). */
static inline uint64_t key_hash(const mc_master_service *svc, const void *key, size_t len)
{
    return check_key(key, len) ? 0 : XXH3_64bits_withSeed(key, len, svc->seed);
}

/* The shard of hash h; *h32 = the in-shard hash. */
static inline shard *shard_of(mc_master_service *svc, uint64_t h, uint32_t *h32)
{
    *h32 = (uint32_t)(h >> 32);
    return &svc->shards[h & (svc->nshards - 1)];
}

/* A reader's lease is active: granted (F_LEASED) and not yet past atime + lease TTL. */
static inline bool leased(const mc_master_service *svc, const obj *o, uint64_t now)
{
    return (o->flags & F_LEASED) && now < o->atime + svc->lease_ttl;
}

static inline uint64_t obj_bytes(const obj *o)
{
    return o->size * o->nrep;
}

/* Per-thread xorshift, seeded lazily from the clock (placement and eviction starts). */
uint64_t mc__rng(void);

/* Counts one call of a single-key operation (a negative rc is a failure). */
static inline void count_op(mc_master_service *svc, mc_master_op op, int rc)
{
    cadd(&svc->requests[op], 1);
    if (rc < 0)
        cadd(&svc->failures[op], 1);
}

/* Counts one batch call of n items of which nfail failed (see master_service.h). */
void mc__count_batch(mc_master_service *svc, mc_master_batch_op op, size_t n, size_t nfail);

/* Adds one placed object of `size` bytes to master_value_size_bytes. */
void mc__observe_size(mc_master_service *svc, uint64_t size);

/* ---- object_index.c: the hash table and the shard lists (caller holds sh->mu) ---- */

#define SLOT_PTR ((1ull << 48) - 1)
#define SLOT_TAG_SHIFT 48

static inline obj *slot_obj(uint64_t s)
{
    return (obj *)(uintptr_t)(s & SLOT_PTR);
}

/* The object of key (len bytes, in-shard hash h32) in sh, or NULL. Inline: every
 * per-key operation starts here. */
static inline obj *ht_find(shard *sh, uint32_t h32, const void *key, size_t len)
{
    uint64_t tag = (uint64_t)(h32 & 0xffffu) << SLOT_TAG_SHIFT;
    uint32_t m = sh->mask;
    for (uint32_t i = h32 & m;; i = (i + 1) & m) {
        uint64_t s = sh->slots[i];
        if (!s)
            return NULL; /* an empty slot ends the probe: the key is absent */
        if ((s & ~SLOT_PTR) != tag)
            continue; /* another key's tag: no need to read that object */
        obj *o = slot_obj(s);
        if (o->hash == h32 && o->key_len == len && memcmp(okey(o), key, len) == 0)
            return o;
    }
}

/* The start of every per-key operation: locks the shard of the key (len bytes, hash h from
 * key_hash: the caller has checked the key) and finds it there. Returns the shard, its mu
 * held (the caller unlocks it); *o = the key's object or NULL. */
static inline shard *lock_key(mc_master_service *svc, const void *key, size_t len, uint64_t h,
                              obj **o)
{
    uint32_t h32;
    shard *sh = shard_of(svc, h, &h32);
    pthread_mutex_lock(&sh->mu);
    *o = ht_find(sh, h32, key, len);
    return sh;
}

/* Prefetches the slot a lookup of hash h will read first. Reads the table without the
 * shard lock (atomically): a stale table only makes the hint useless (a prefetch of a
 * freed or foreign address does not fault). */
static inline void ht_prefetch(mc_master_service *svc, uint64_t h)
{
    shard *sh = &svc->shards[h & (svc->nshards - 1)];
    uint64_t *slots = __atomic_load_n(&sh->slots, __ATOMIC_RELAXED);
    uint32_t m = __atomic_load_n(&sh->mask, __ATOMIC_RELAXED);
    __builtin_prefetch(&slots[(uint32_t)(h >> 32) & m]);
}

/* mc__ht_insert: inserts o (its key must not be in the table), growing it first when the
 * load would pass 3/4. mc__ht_remove: removes o (it must be in the table). */
void mc__ht_insert(shard *sh, obj *o);
void mc__ht_remove(shard *sh, obj *o);

/* Unlinks o from whichever shard list holds it (none is fine). */
static inline void obj_unlist(obj *o)
{
    if (mc_list_linked(&o->link))
        mc_list_remove(&o->link);
}

/* Complete objects that eviction never takes are kept out of the lists, so they can't
 * clog a list's head: hard-pinned ones, and zero-size ones (evicting them frees no
 * space). */
static inline bool unlisted(const obj *o)
{
    return (o->flags & F_HARD) || o->size == 0 || o->nrep == 0 ||
           (o->nrep && (o->flags & (F_DISK | F_OFFQ)) == (F_DISK | F_OFFQ));
}

/* Links o (unlinked) at the tail (most recent end) of the list its flags call for. */
static inline void obj_list(shard *sh, obj *o)
{
    if (o->flags & F_PROC)
        mc_list_push_back(&sh->proc, &o->link);
    else if (!unlisted(o))
        mc_list_push_back((o->flags & F_SOFT) ? &sh->soft : &sh->lru, &o->link);
}

/* A new object record for nrep replicas and the key (flags, lists and replicas to be
 * filled by the caller; unlinked, not in any table). Aborts on OOM. */
obj *mc__obj_new(uint32_t nrep, const void *key, size_t len, uint32_t h32);

/* Sets or clears o's soft pin, keeping the soft_keys gauge in step. */
void mc__set_soft(mc_master_service *svc, obj *o, bool on);

/* Gauges for an object leaving the index (keys, soft_keys, proc_*). */
void mc__account_gone(mc_master_service *svc, obj *o);

/* A growable list of objects. Walks over a table that remove entries collect them here
 * first and remove them after the walk, since a removal shifts entries between slots. */
typedef struct objvec {
    obj **v;
    size_t n, cap;
} objvec;

void mc__objvec_push(objvec *ov, obj *o);

/* Batch calls hash keys AHEAD positions in advance and prefetch their first slot, so the
 * cache misses of several keys overlap instead of following one another. (Prefetching the
 * objects too would need the slot's content, which cannot be read without the lock: the
 * table may be freed by a concurrent grow.) */
#define AHEAD 4

typedef struct ahead {
    const mc_master_key *keys;
    size_t n;
    uint64_t h[AHEAD];
    int first;    /* the first failure (ahead_done), MC_OK while none */
    size_t nfail; /* the failures so far */
} ahead;

static inline uint64_t ahead_hash(mc_master_service *svc, const mc_master_key *k)
{
    uint64_t h = key_hash(svc, k->data, k->len);
    ht_prefetch(svc, h);
    return h;
}

static inline void ahead_init(mc_master_service *svc, ahead *a, const mc_master_key *keys,
                              size_t n)
{
    a->keys = keys;
    a->n = n;
    a->first = MC_OK;
    a->nfail = 0;
    for (size_t i = 0; i < n && i < AHEAD; i++)
        a->h[i] = ahead_hash(svc, &keys[i]);
}

/* The hash of key i (called for i = 0, 1, ... in order); starts on key i + AHEAD. */
static inline uint64_t ahead_next(mc_master_service *svc, ahead *a, size_t i)
{
    uint64_t h = a->h[i % AHEAD];
    if (i + AHEAD < a->n)
        a->h[i % AHEAD] = ahead_hash(svc, &a->keys[i + AHEAD]);
    return h;
}

/* Tallies one key's status (a negative code is a failure; the first is kept). */
static inline void ahead_done(ahead *a, int status)
{
    if (status < 0 && a->nfail++ == 0)
        a->first = status;
}

/* The end of a batch: counts it under op; returns the first failure (MC_OK if none). */
static inline int ahead_end(mc_master_service *svc, ahead *a, mc_master_batch_op op)
{
    mc__count_batch(svc, op, a->n, a->nfail);
    return a->first;
}

/* ---- space.c: giving space back, erasing and removing objects ---- */

/* Why a replica's space becomes reusable (the argument of mc__space_release_locked). The
 * first group are objects whose bytes were complete; the second, writes that never
 * finished, whose writer may still be sending bytes. */
typedef enum mc__space_why {
    MC__SPACE_EVICTED,     /* eviction took a complete object                         */
    MC__SPACE_REMOVED,     /* remove / batch / regex / all, no reader's lease active   */
    MC__SPACE_LEASE_ENDED, /* a force-removed object's reader lease ended (deferred)   */
    MC__SPACE_REPLACED,    /* upsert_start with a new size replaced a complete object  */
    MC__SPACE_CLEARED,     /* batch_replica_clear dropped complete replicas (no lease) */
    MC__SPACE_REVOKED,     /* put_revoke / upsert_revoke by the object's writer        */
    MC__SPACE_PREEMPTED,   /* put_start took the key from a writer past the discard    */
                           /* timeout                                                  */
    MC__SPACE_DISCARDED,   /* tick released a write older than the release timeout,   */
                           /* or one whose writer's client expired                    */
} mc__space_why;

/* mc__space_release_locked: THE point where the space of o's replicas is given up
 * (returned to the segments' allocators, where a later put_start may be given it). Every
 * path that gives replica space back comes through here, naming why; nothing else frees
 * an object's allocation (fence.c frees quarantined ones). For REVOKED, PREEMPTED and
 * DISCARDED (a write that never finished, by o->owner) the space is quarantined instead
 * (fence.c, docs/consistency.md) unless its segment is unmounting; the other reasons
 * free at once. (Unmounting drops replicas without coming here: the whole allocator
 * goes away with its segment.) On return o's replicas hold no space (handles NONE); the
 * record itself stays the caller's. Caller holds seg_lock for reading (and may hold its
 * shard mutex or defer_mu). */
void mc__space_release_locked(mc_master_service *svc, obj *o, mc__space_why why);

/* mc__space_release_rep_locked: the same rule for the one replica r of o (the loop body
 * of mc__space_release_locked; partial drops such as batch_replica_clear use it so they
 * obey the same quarantine rule). now: the clock when why quarantines, else unused.
 * Caller holds seg_lock for reading. */
void mc__space_release_rep_locked(mc_master_service *svc, obj *o, rep *r, mc__space_why why,
                                  uint64_t now);

/* Bytes o's replicas reserve in their allocators (block sizes, as `allocated` counts
 * them). Caller holds seg_lock for reading. */
uint64_t mc__reps_reserved_locked(mc_master_service *svc, const obj *o);

/* mc__obj_erase: removes o from the index, gives its space back (why) and frees the
 * record. Caller holds sh->mu and not seg_lock. */
void mc__obj_erase(mc_master_service *svc, shard *sh, obj *o, mc__space_why why);

/* mc__obj_remove: removes a complete object on request (remove & co.): erased at once
 * unless a reader's lease is active (a forced removal), in which case the key leaves the
 * index now but the space waits on the deferred list until the lease deadline. Caller
 * holds sh->mu and not seg_lock. */
void mc__obj_remove(mc_master_service *svc, shard *sh, obj *o, uint64_t now);

/* mc__obj_clear_named: drops o's replicas on segments named name (len bytes), giving
 * their space back (MC__SPACE_CLEARED); when none would be left, o is erased (the record
 * is freed: the caller must not touch it). o must be complete and unleased. Returns how
 * many replicas matched (0: o untouched). Caller holds sh->mu and not seg_lock. */
uint32_t mc__obj_clear_named(mc_master_service *svc, shard *sh, obj *o, const char *name,
                             size_t len);

/* mc__defer_reap: gives back the space of deferred objects whose deadline is at or before
 * now. Cheap when none is due. Caller holds no lock. */
void mc__defer_reap(mc_master_service *svc, uint64_t now);

/* mc__defer_drop_slot: drops the deferred objects' replicas on `slot` (being unmounted:
 * its allocator goes away, its bytes already left `allocated`); objects left without
 * replicas are freed. Caller holds no lock. */
void mc__defer_drop_slot(mc_master_service *svc, uint32_t slot);

/* mc__fill_list(_locked): out = o's replicas, each with `status`. The _locked form
 * needs seg_lock for reading; the other takes it. Caller holds o's shard mutex. */
void mc__fill_list_locked(mc_master_service *svc, obj *o, int status,
                          mc_master_replica_list *out);
void mc__fill_list(mc_master_service *svc, obj *o, int status, mc_master_replica_list *out);

/* ---- segments.c ---- */

/* Frees a segment record (allocator, strings). It must be out of the slot table. */
void mc__seg_free(seg *s);

/* Marks client id alive until now + client_ttl (adding it when unknown). Takes
 * client_mu only. */
void mc__client_touch(mc_master_service *svc, mc_master_uuid id, uint64_t now);

/* Expires every client whose deadline is at or before now: unmounts its segments, then
 * calls cfg.on_client_expired. Tick only; caller holds no lock. */
void mc__expire_clients(mc_master_service *svc, uint64_t now);

/* The master itself was stalled for gap_ms (tick noticed a jump of its clock): every
 * client's deadline becomes at least now + client_ttl, except a client already graced
 * that has not pinged since (one grace per silence, so repeated stalls cannot keep a dead
 * client forever). Tick only; takes client_mu only. */
/* Finishes the graceful unmounts whose grace period ended (segments.c; tick). */
void mc__graceful_unmount_reap(mc_master_service *svc, uint64_t now);
void mc__grace_clients(mc_master_service *svc, uint64_t now, uint64_t gap_ms);

/* mc__seg_restore: mounts d for client as a restored segment (pending until its owner
 * pings or remounts); *slot = its slot. MC_OK or mount's errors. Caller holds no lock. */
int mc__seg_restore(mc_master_service *svc, const mc_master_segment *d, mc_master_uuid client,
                    uint32_t *slot);

/* mc__clients_refresh: every known client's deadline becomes at least now + client_ttl,
 * and the tick does not count the time until now as a stall (after a restore that took
 * long: the restored owners get their whole TTL from when the master serves). Takes
 * client_mu only. */
void mc__clients_refresh(mc_master_service *svc, uint64_t now);

/* mc__seg_confirm: client id is back (a mount or remount; its pings are answered
 * NEED_REMOUNT while it has pending segments): its pending segments are served again. Cheap when none is pending. Caller holds no lock. */
void mc__seg_confirm(mc_master_service *svc, mc_master_uuid id);

/* mc__seg_unmount_id: unmounts segment id whoever owns it (applying a log record).
 * MC_OK or SEGMENT_NOT_FOUND. Caller holds no lock. */
int mc__seg_unmount_id(mc_master_service *svc, mc_master_uuid id);

/* ---- oplog.c: one call per mutation (docs/ha.md "Mutation log and snapshots") ---- */

/* mc__log_put_slow: o now holds its key with these replicas: complete (a put record), or
 * a write in flight just placed (a start record: the restore quarantines its ranges
 * unless a put of the key follows). Caller holds o's shard mutex and not seg_lock. mc__log_remove_slow: o's key leaves the index (caller
 * holds its shard mutex). mc__log_mount_slow / _unmount_slow: s was mounted / is being
 * unmounted (caller holds seg_lock for writing). mc__log_wait_slow: waits until this
 * thread's last record is as safe as --oplog_sync promises (no lock held). */
void mc__log_put_slow(mc_master_service *svc, obj *o);
void mc__log_remove_slow(mc_master_service *svc, const obj *o);
void mc__log_mount_slow(mc_master_service *svc, const seg *s);
void mc__log_unmount_slow(mc_master_service *svc, const seg *s);
void mc__log_wait_slow(mc_master_service *svc);
/* mc__log_wait_starts: with --ha_sync=sync only, waits as mc__log_wait_slow for this
 * thread's last record (put_start's `start` records), so a standby knows of every write
 * in flight before its writer gets the space: a promoted standby then quarantines it
 * instead of placing a new object where the old writer's late bytes could land
 * (docs/ha.md "Writes in flight at a failover"). No-op otherwise: a single master's
 * restart needs no durable start records (its clients remount and the writes are
 * revoked), so put_start pays no fsync. No lock held. */
void mc__log_wait_starts(mc_master_service *svc);
/* The log's counters into out (oplog_*; zeros without a log). Any thread. */
void mc__oplog_fill_stats(mc_master_service *svc, mc_master_stats *out);

/* A copy / move task's record (tasks.c -> oplog.c; proto LogTask): end false = created
 * (id, type, key, size, created_ms, parts, assigned), true = finished (id, status,
 * message, held_mask: bit i = part i's reservation was quarantined, updated_ms). */
typedef struct mc__log_task_part {
    mc_master_uuid seg, executor;
    uint64_t addr;
} mc__log_task_part;
typedef struct mc__log_task_rec {
    bool end;
    mc_master_uuid id, assigned;
    int type, status;
    const void *key;
    size_t klen;
    uint64_t size, created_ms, updated_ms;
    uint32_t nparts, held_mask;
    mc__log_task_part parts[MC_MASTER_MAX_TASK_TARGETS];
    const char *message;
} mc__log_task_rec;
void mc__log_task_slow(mc_master_service *svc, const mc__log_task_rec *t);
static inline void mc__log_task(mc_master_service *svc, const mc__log_task_rec *t)
{
    if (svc->oplog)
        mc__log_task_slow(svc, t);
}

static inline void mc__log_put(mc_master_service *svc, obj *o)
{
    if (svc->oplog)
        mc__log_put_slow(svc, o);
}
static inline void mc__log_remove(mc_master_service *svc, const obj *o)
{
    if (svc->oplog)
        mc__log_remove_slow(svc, o);
}
static inline void mc__log_mount(mc_master_service *svc, const seg *s)
{
    if (svc->oplog)
        mc__log_mount_slow(svc, s);
}
static inline void mc__log_unmount(mc_master_service *svc, const seg *s)
{
    if (svc->oplog)
        mc__log_unmount_slow(svc, s);
}
static inline void mc__log_wait(mc_master_service *svc)
{
    if (svc->oplog)
        mc__log_wait_slow(svc);
}

/* ---- placement.c ---- */

/* One placement in progress: the replicas reserved so far (space already taken from the
 * allocators and counted in `allocated`). */
typedef struct alloc_ctx {
    uint64_t size;  /* bytes per replica */
    uint32_t want;  /* replicas asked for (<= MC_MASTER_MAX_REPLICAS) */
    uint32_t n;     /* replicas placed */
    bool could_fit; /* some candidate segment is large enough when empty */
    rep reps[MC_MASTER_MAX_REPLICAS];
    const seg *chosen[MC_MASTER_MAX_REPLICAS];
} alloc_ctx;

/* mc__place_locked: places up to c->want replicas of c->size bytes on distinct segment
 * names: cfg's preferred names first, then by strategy. Caller holds seg_lock for
 * reading (and the object's shard mutex). */
void mc__place_locked(mc_master_service *svc, alloc_ctx *c, const mc_master_put_config *cfg,
                      mc_master_strategy strategy);

/* ---- evict.c ---- */

/* One eviction pass freeing at least target bytes (as far as possible). Caller holds
 * evict_mu and no shard lock. Returns the bytes freed. */
uint64_t mc__evict_locked(mc_master_service *svc, uint64_t target);

/* The same selection without dropping anything nor counting a pass: with the disk tier's
 * prefetch mode on (offload.c), the objects eviction would pick next are queued for
 * offload ahead of need. Caller holds evict_mu and no shard lock. */
uint64_t mc__evict_prefetch_locked(mc_master_service *svc, uint64_t target);

/* ---- reads.c: the regex helper (shared with remove.c) ---- */

typedef struct mc__regex mc__regex;

/* mc__regex_create: compiles pattern (len bytes, <= MC_MASTER_REGEX_MAX) into *out.
 * Returns OK or INVALID_PARAMS. mc__regex_match: o's key matches. Matching fails for
 * the rest of r's life (every later call: no match) once one key hits PCRE2's match
 * limit or the request's matching took longer than its budget (reads.c); a caller stops
 * its walk then (mc__regex_match_failed) and returns mc__regex_failed: OK, or
 * INVALID_PARAMS after a warning naming `what` and why. mc__regex_destroy: NULL is fine. */
int mc__regex_create(const char *pattern, size_t len, mc__regex **out);
bool mc__regex_match(mc__regex *r, obj *o);
bool mc__regex_match_failed(const mc__regex *r);
int mc__regex_failed(mc__regex *r, const char *what);
void mc__regex_destroy(mc__regex *r);

/* Grants a read lease at now and moves o to the recent end of its list. Caller holds
 * sh->mu. */
static inline void grant_lease(shard *sh, obj *o, uint64_t now)
{
    obj_unlist(o);
    o->atime = now;
    o->flags |= F_LEASED;
    obj_list(sh, o);
}

/* ---- fence.c: fence epochs and the quarantine ---- */

/* The fence epoch writer W gets now for segment s (its endpoint): fence_base when the
 * pair was never raised. Caller holds seg_lock for reading (and may hold a shard mutex);
 * takes fence_lock for reading unless no pair was ever raised. */
uint64_t mc__fence_epoch_locked(mc_master_service *svc, mc_master_uuid writer, const seg *s);

/* Quarantines replica r of a write by `writer` that will never finish (r->handle is
 * live, s = its segment, not unmounting): raises e(writer, s) past r->epoch when no
 * raise covers r yet, and keeps the allocation until both sides acknowledged a fence at
 * r->epoch + 1 (or the segment goes, or the writer expired and the release timeout
 * passed with the owner fenced). Sets r->handle NONE. Caller holds seg_lock for
 * reading (and may hold a shard mutex or defer_mu). */
void mc__quarantine_rep_locked(mc_master_service *svc, mc_master_uuid writer, rep *r, seg *s,
                               uint64_t now);

/* Frees the quarantined allocations whose conditions hold at now. Cheap when the
 * quarantine is empty. Caller holds no lock. */
void mc__quarantine_reap(mc_master_service *svc, uint64_t now);

/* Forgets the quarantined allocations on `slot` (being unmounted: its allocator goes
 * away, its bytes already left `allocated`). Caller holds no lock. */
void mc__quarantine_drop_slot(mc_master_service *svc, uint32_t slot);

/* Marks writer id gone (its client expired) or back (mounted / remounted again): the
 * release-timeout rule applies only to gone writers. Caller holds no lock. */
void mc__fence_writer_state(mc_master_service *svc, mc_master_uuid id, bool gone);

/* Records the acknowledgements of client id's ping (req may be NULL) and fills out's
 * fences with those pending for it (as owner and as writer), then frees what became
 * free. Caller holds no lock. */
void mc__fence_ping(mc_master_service *svc, mc_master_uuid id,
                    const mc_master_ping_request *req, mc_master_ping_result *out,
                    uint64_t now);

/* tasks.c: adds a finished task (info, status SUCCESS or FAILED) to the done list, as
 * query_task reports it (a promoted standby / a restore: the old master's tasks).
 * Takes tasks.mu. */
void mc__tasks_adopt(mc_master_service *svc, const mc_master_task_info *info);

/* inflight.c: frees a standby's table of its leader's writes in flight (destroy). */
void mc__inflight_destroy(mc_master_service *svc);

/* Raises fence_base (the epoch of a pair never raised) to at least base: a promoted
 * standby hands out epochs above every one of its old leader's. Before serving (the
 * gate closed); takes fence_lock. */
void mc__fence_raise_base(mc_master_service *svc, uint64_t base);

/* Frees the fence table and the quarantine records (destroy; no call in flight). */
void mc__fence_destroy(mc_master_service *svc);

/* ---- offload.c: the disk tier (docs/ssd-tier.md) ----
 * Its own mutex (off.mu) is a leaf: taken after shard.mu and seg_lock, nothing is taken
 * while it is held. Every hook is a no-op when svc->off is NULL (no --enable_offload). */

/* Create / destroy the disk-tier state (service create / destroy). */
void mc__offload_create(mc_master_service *svc);
void mc__offload_destroy(mc_master_service *svc);
/* Tick: gives up tasks handed out longer than offload_task_timeout_ms ago. No lock held. */
void mc__offload_tick(mc_master_service *svc, uint64_t now);
/* Client id expired: forgets its tier, its tasks and its LOCAL_DISK replicas (disk-only
 * objects are erased). No lock held. */
void mc__offload_client_gone(mc_master_service *svc, mc_master_uuid id);
/* Eviction chose o (complete, unleased): returns false to erase it as before; true when
 * the disk tier took it instead (*freed = bytes given back: o's memory replicas were
 * dropped and the record became disk-only, or 0: an offload was queued and o stays).
 * Caller holds sh->mu only. o may be freed (replaced): the caller must not touch it. */
bool mc__offload_evict(mc_master_service *svc, shard *sh, obj *o, uint64_t *freed);
/* put_end published o: write-through offload (enable_offload without offload_on_evict).
 * Caller holds sh->mu. */
void mc__offload_put_end(mc_master_service *svc, obj *o);
/* o leaves the index or its bytes are being replaced (upsert): its LOCAL_DISK replica is
 * forgotten and its owner told to delete it; pending-offload flags are cleared. Caller
 * holds o's shard mu (and may hold seg_lock for reading). */
void mc__offload_forget(mc_master_service *svc, obj *o);
/* A get of o (complete) is about to be answered: counts disk hits and may start a
 * promotion (the record is then replaced). Returns the object to answer with. Caller
 * holds sh->mu only. */
obj *mc__offload_on_get(mc_master_service *svc, shard *sh, obj *o);
/* Appends o's LOCAL_DISK descriptor to out when it has one (COMPLETE lists only). Caller
 * holds o's shard mu and seg_lock for reading. */
void mc__offload_fill_locked(mc_master_service *svc, obj *o, mc_master_replica_list *out);
/* An unmount dropped every memory replica of o (F_DISK, nrep now 0): it stays, disk-only
 * (unlisted, pins and pending flags cleared). Caller holds o's shard mu. */
void mc__offload_disk_only(mc_master_service *svc, obj *o);
/* Adds the disk-tier gauges and counters to out. */
void mc__offload_stats(mc_master_service *svc, mc_master_stats *out);

/* ---- tasks.c: replica copy / move tasks ----
 * Its mutex (tasks.mu) is a leaf like off.mu: taken after shard.mu and seg_lock, nothing
 * is taken while it is held. */
void mc__tasks_create(mc_master_service *svc);
void mc__tasks_destroy(mc_master_service *svc);
/* Tick: fails tasks past their timeouts or whose target segment went. No lock held. */
void mc__tasks_tick(mc_master_service *svc, uint64_t now);
/* An upsert is about to rewrite o's bytes: the unfinished tasks of its key will not
 * commit (their copy may mix old and new bytes). Cheap when no task is unfinished.
 * Caller holds o's shard mutex. */
void mc__tasks_rewritten(mc_master_service *svc, obj *o);
/* Whether a PENDING part waits for client id (the ping's hint). Cheap when no task is
 * unfinished. Takes tasks.mu only. */
bool mc__tasks_pending_for(mc_master_service *svc, mc_master_uuid id);

/* ---- shared_fs.c: shared-FS DISK replicas (--root_fs_dir, docs/ssd-tier.md) ----
 * They ride on offload.c's machinery (F_DISK, its key map, its task channel): in this
 * mode (svc->off->shared) a key's disk replica is owned by MC__SHARED_FS_OWNER rather
 * than a client, so no client's expiry takes it, and its DELETE goes to any client
 * polling. */
#define MC__SHARED_FS_OWNER ((mc_master_uuid){UINT64_MAX, UINT64_MAX})
#define MC__SHARED_FS_DIR_MAX 200u /* the longest fs_dir (a path must fit a NAME_MAX) */

/* The file of key (len bytes), generation gen, under dir: "<dir>/<32 hex digits of
 * XXH3-128(key)>-<16 hex digits of gen>.mcsf" into out (MC_MASTER_NAME_MAX); *id = those
 * 128 bits xor gen (the descriptor's segment id, one per file, so a reply's segment table
 * never merges two files). The client computes the same name (src/client/shared_fs.c). */
void mc__shared_fs_path(const char *dir, const void *key, size_t len, uint64_t gen, char *out,
                        mc_master_uuid *id);
/* Fills d as the DISK descriptor of o (size bytes), file generation gen, in dir. */
void mc__shared_fs_desc(const char *dir, obj *o, uint64_t gen, mc_master_replica *d);

/* ---- writes.c / service.c ---- */

/* Releases in-flight puts older than put_start_release_timeout_sec (tick). */
void mc__release_stale_puts(mc_master_service *svc);

/* Discards every in-flight put of client id (its client expired): quarantined as
 * DISCARDED, counted in put_discarded. Caller holds no lock. */
void mc__discard_client_puts(mc_master_service *svc, mc_master_uuid id);

#endif
