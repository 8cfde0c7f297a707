/* master_service.c: see master_service.h.
 *
 * Layout
 *   - Index: `shard_count` shards chosen by the low bits of XXH3-64(key); each shard has
 *     one mutex, an open-addressing hash table (below) and three intrusive lists: `proc`
 *     (writes in flight, by put_start time), `lru` (complete objects, by last access) and
 *     `soft` (complete soft-pinned objects, by last access). Hard-pinned and zero-size
 *     complete objects are in no list (never evicted, never scanned).
 *   - Hash table: linear probing over 8-byte slots, each the object's address (below
 *     2^48, checked) with the low 16 bits of the key's 32-bit in-shard hash `h32` in the
 *     top 16 bits; 0 = empty. The home slot is h32 & mask, so while a table has at most
 *     2^16 slots the slot alone gives an entry's home (growing and deleting never read
 *     the objects), and the tag bits above the home bits tell most other keys apart
 *     without reading the object: a lookup miss usually costs one cache line of slots and
 *     no object. Load <= 3/4 (doubling); deletion shifts the cluster back (no
 *     tombstones). Batch calls hash a few keys ahead and prefetch their slots.
 *   - An object is ONE malloc: the `obj` header (64 bytes), its replicas (16 bytes each)
 *     and the key bytes.
 *   - Segments: a slot table under a reader/writer lock (writers: mount/unmount); each
 *     segment has its own mutex around its allocator. A replica names its segment by
 *     slot; a slot is reused only after every replica on it has been dropped.
 *
 * Lock order: shard mutex -> deferred-free mutex -> segment table (read) -> segment
 * mutex. The eviction mutex comes before any shard mutex; the client mutex is never held
 * with another lock. Nothing takes the table lock for reading twice (the table lock
 * prefers writers).
 *
 * Deferred frees: an object removed by force while a reader's lease is active leaves the
 * index at once but keeps its space (on the `deferred` list, linked through `next`, its
 * reserved bytes in `pin`) until the lease deadline (atime + lease TTL); tick frees it
 * then. An unmount drops its replicas on that segment like any other replica.
 *
 * Eviction (approximate LRU across shards): sample up to EVICT_SAMPLE eligible objects
 * from the head (oldest end) of every shard's lists, sort the samples by last access,
 * pick the access-time cutoff whose older samples add up to the bytes still wanted, then
 * evict, shard by shard, every eligible object at or below the cutoff until the target is
 * met; repeat while short and progressing. The first phase never takes soft-pinned
 * objects; the second (only when allowed and still short) takes them too.
 */
#include "master/master_service.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <xxhash.h>

#include "alloc/allocator.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"

#define TAG "master"
#define EVICT_SAMPLE 8       /* eligible objects sampled per shard list per round */
#define EVICT_SKIP_MAX 64    /* ineligible objects skipped per list while sampling */
#define EVICT_ROUNDS 64      /* sampling rounds per phase */
#define SOFT_SWEEP_SHARDS 64 /* shards whose soft lists a tick checks for lapsed pins */
#define REGEX_MATCH_LIMIT 1000000u
#define REMOUNT_MAX 65536u

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
} rep;

enum {
    F_PROC = 1,      /* write in flight (replicas PROCESSING); in the proc list      */
    F_HARD = 2,      /* hard pin                                                       */
    F_SOFT = 4,      /* soft pin (pending with F_SOFT_REL, else active until `pin`)    */
    F_SOFT_REL = 8,  /* `pin` is a TTL that starts at put_end                          */
    F_LEASED = 16,   /* a read lease was granted at `atime`                            */
    F_SOFTLIST = 32, /* currently linked in the soft list                              */
};

typedef struct obj {
    struct obj *prev, *next;   /* proc / lru / soft list (next: deferred)    */
    uint64_t size;             /* bytes                                      */
    uint64_t atime;            /* complete: last access ms; in flight: start */
    uint64_t pin;              /* soft pin deadline ms (TTL with F_SOFT_REL) */
    mc_master_uuid owner;      /* client of the write in flight              */
    uint32_t hash;             /* high 32 bits of the key hash               */
    uint16_t key_len;
    uint8_t nrep;
    uint8_t flags;
    rep reps[];                /* then key_len key bytes                     */
} obj;

_Static_assert(sizeof(obj) == 64, "the object header is one cache line");

static inline uint8_t *okey(obj *o)
{
    return (uint8_t *)(o->reps + o->nrep);
}

typedef struct olist {
    obj *head, *tail;
} olist;

typedef struct shard {
    pthread_mutex_t mu;
    uint64_t *slots; /* hash table (see the top); guarded by mu, but slots/mask are */
    uint32_t mask;   /* stored atomically so batch calls may prefetch without it    */
    uint32_t count;
    olist proc, lru, soft;
} __attribute__((aligned(64))) shard;

/* ---- segments and clients ---- */

typedef struct seg {
    mc_master_uuid id, client;
    const char *name, *endpoint, *protocol, *host_id; /* in `strings`        */
    char *strings;
    uint64_t name_hash;
    uint64_t base, size, capacity; /* capacity: the allocator's usable bytes */
    pthread_mutex_t mu;            /* guards alloc                           */
    mc__alloc *alloc;
    counter used;                  /* bytes reserved                         */
    bool unmounting;               /* written under the table write lock     */
} seg;

typedef struct client {
    mc_master_uuid id;
    uint64_t deadline; /* ms */
} client_rec;

struct mc_master_service {
    mc_master_config cfg;
    uint64_t lease_ttl, client_ttl_ms, discard_ms, release_ms;
    uint32_t nshards;
    shard *shards;
    uint64_t seed; /* key hash seed, random per service */

    pthread_rwlock_t seg_lock;
    seg **segs;        /* slot table, guarded by seg_lock */
    uint32_t nslots, slots_cap, nmounted;

    pthread_mutex_t client_mu;
    client_rec *clients; /* guarded by client_mu */
    size_t nclients, clients_cap;

    pthread_mutex_t defer_mu;
    obj *deferred;      /* force-removed, leased objects; guarded by defer_mu         */
    uint64_t defer_min; /* earliest deadline on the list (UINT64_MAX: none); defer_mu  */

    pthread_mutex_t evict_mu;
    counter evict_gen;
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

static _Thread_local uint64_t rng_state;

static uint64_t rng(void)
{
    uint64_t x = rng_state;
    if (!x)
        x = (mc_now_ns() ^ (uint64_t)(uintptr_t)&rng_state) | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 2685821657736338717ull;
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

static inline bool leased(const mc_master_service *svc, const obj *o, uint64_t now)
{
    return (o->flags & F_LEASED) && now < o->atime + svc->lease_ttl;
}

static inline uint64_t obj_bytes(const obj *o)
{
    return o->size * o->nrep;
}

static void count_op(mc_master_service *svc, mc_master_op op, int rc)
{
    cadd(&svc->requests[op], 1);
    if (rc < 0)
        cadd(&svc->failures[op], 1);
}

static void count_batch(mc_master_service *svc, mc_master_batch_op op, size_t n,
                        size_t nfail)
{
    cadd(&svc->batch[op].requests, 1);
    cadd(&svc->batch[op].items, n);
    cadd(&svc->batch[op].failed_items, nfail);
    if (nfail && nfail == n)
        cadd(&svc->batch[op].failures, 1);
    else if (nfail)
        cadd(&svc->batch[op].partial, 1);
}

/* master_value_size_bytes: upstream's buckets (`master_metric_manager.cpp`). */
static const uint64_t vsize_bounds[MC_MASTER_VALUE_SIZE_BUCKETS - 1] = {
    4096, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
};

uint64_t mc_master_value_size_bound(int i)
{
    return i >= 0 && i < MC_MASTER_VALUE_SIZE_BUCKETS - 1 ? vsize_bounds[i] : UINT64_MAX;
}

static void observe_size(mc_master_service *svc, uint64_t size)
{
    int i = 0;
    while (i < MC_MASTER_VALUE_SIZE_BUCKETS - 1 && size > vsize_bounds[i])
        i++;
    cadd(&svc->vsize[i], 1);
    cadd(&svc->vsize_sum, size);
}

/* ---- lists ---- */

static void list_push(olist *l, obj *o)
{
    o->next = NULL;
    o->prev = l->tail;
    if (l->tail)
        l->tail->next = o;
    else
        l->head = o;
    l->tail = o;
}

static void list_del(olist *l, obj *o)
{
    if (o->prev)
        o->prev->next = o->next;
    else
        l->head = o->next;
    if (o->next)
        o->next->prev = o->prev;
    else
        l->tail = o->prev;
    o->prev = o->next = NULL;
}

/* Complete objects that eviction never takes are kept out of the lists, so they can't
 * clog a list's head: hard-pinned ones, and zero-size ones (evicting them frees no
 * space). */
static inline bool unlisted(const obj *o)
{
    return (o->flags & F_HARD) || o->size == 0;
}

/* The list an object is in now. */
static olist *list_now(shard *sh, const obj *o)
{
    if (o->flags & F_PROC)
        return &sh->proc;
    if (unlisted(o))
        return NULL;
    return (o->flags & F_SOFTLIST) ? &sh->soft : &sh->lru;
}

static void obj_unlist(shard *sh, obj *o)
{
    olist *l = list_now(sh, o);
    if (l)
        list_del(l, o);
    o->flags &= (uint8_t)~F_SOFTLIST;
}

/* Links o at the tail (most recent end) of the list its flags call for. */
static void obj_list(shard *sh, obj *o)
{
    if (o->flags & F_PROC) {
        list_push(&sh->proc, o);
    } else if (!unlisted(o)) {
        if (o->flags & F_SOFT) {
            o->flags |= F_SOFTLIST;
            list_push(&sh->soft, o);
        } else {
            list_push(&sh->lru, o);
        }
    }
}

/* ---- hash table ---- */

#define SLOT_PTR ((1ull << 48) - 1)
#define SLOT_TAG_SHIFT 48

static inline obj *slot_obj(uint64_t s)
{
    return (obj *)(uintptr_t)(s & SLOT_PTR);
}

static inline uint64_t slot_make(obj *o)
{
    return (uint64_t)(uintptr_t)o | ((uint64_t)(o->hash & 0xffffu) << SLOT_TAG_SHIFT);
}

/* Home slot of a stored entry under `mask`: from the tag while it holds every home bit,
 * else from the object. */
static inline uint32_t slot_home(uint64_t s, uint32_t mask)
{
    if (mask <= 0xffffu)
        return (uint32_t)(s >> SLOT_TAG_SHIFT) & mask;
    return slot_obj(s)->hash & mask;
}

static obj *ht_find(shard *sh, uint32_t h32, const void *key, size_t len)
{
    uint64_t tag = (uint64_t)(h32 & 0xffffu) << SLOT_TAG_SHIFT;
    uint32_t m = sh->mask;
    for (uint32_t i = h32 & m;; i = (i + 1) & m) {
        uint64_t s = sh->slots[i];
        if (!s)
            return NULL;
        if ((s & ~SLOT_PTR) != tag)
            continue;
        obj *o = slot_obj(s);
        if (o->hash == h32 && o->key_len == len && memcmp(okey(o), key, len) == 0)
            return o;
    }
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

static void ht_place(uint64_t *slots, uint32_t m, uint64_t s, uint32_t home)
{
    uint32_t i = home;
    while (slots[i])
        i = (i + 1) & m;
    slots[i] = s;
}

static void ht_grow(shard *sh)
{
    uint32_t n = (sh->mask + 1) * 2, m = n - 1;
    uint64_t *t = calloc(n, sizeof(*t));
    if (!t)
        abort();
    for (uint32_t i = 0; i <= sh->mask; i++) {
        uint64_t s = sh->slots[i];
        if (s)
            ht_place(t, m, s, slot_home(s, m));
    }
    free(sh->slots);
    __atomic_store_n(&sh->slots, t, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->mask, m, __ATOMIC_RELAXED);
}

/* Inserts o (its key must not be in the table). */
static void ht_insert(shard *sh, obj *o)
{
    if ((uint64_t)(sh->count + 1) * 4 > (uint64_t)(sh->mask + 1) * 3 && sh->mask < (1u << 30))
        ht_grow(sh);
    ht_place(sh->slots, sh->mask, slot_make(o), o->hash & sh->mask);
    sh->count++;
}

/* Removes o: its slot is refilled by shifting the rest of its cluster back. */
static void ht_remove(shard *sh, obj *o)
{
    uint32_t m = sh->mask, i = o->hash & m;
    while (slot_obj(sh->slots[i]) != o)
        i = (i + 1) & m;
    for (uint32_t j = i;;) {
        j = (j + 1) & m;
        uint64_t s = sh->slots[j];
        if (!s)
            break;
        /* s may fill the hole at i unless its home lies cyclically in (i, j] */
        if (((j - slot_home(s, m)) & m) >= ((j - i) & m)) {
            sh->slots[i] = s;
            i = j;
        }
    }
    sh->slots[i] = 0;
    sh->count--;
}

/* A growable list of objects. Walks over a table that remove entries collect them here
 * first and remove them after the walk, since a removal shifts entries between slots. */
typedef struct objvec {
    obj **v;
    size_t n, cap;
} objvec;

static void objvec_push(objvec *ov, obj *o)
{
    if (ov->n == ov->cap) {
        size_t cap = ov->cap ? ov->cap * 2 : 64;
        obj **v = realloc(ov->v, cap * sizeof(*v));
        if (!v)
            abort();
        ov->v = v;
        ov->cap = cap;
    }
    ov->v[ov->n++] = o;
}

/* Batch calls hash keys AHEAD positions in advance and prefetch their first slot, so the
 * cache misses of several keys overlap instead of following one another. (Prefetching the
 * objects too would need the slot's content, which cannot be read without the lock: the
 * table may be freed by a concurrent grow.) */
#define AHEAD 4

typedef struct ahead {
    const mc_master_key *keys;
    size_t n;
    uint64_t h[AHEAD];
} ahead;

static inline uint64_t ahead_hash(mc_master_service *svc, const mc_master_key *k)
{
    uint64_t h = key_hash(svc, k->data, k->len);
    ht_prefetch(svc, h);
    return h;
}

static void ahead_init(mc_master_service *svc, ahead *a, const mc_master_key *keys, size_t n)
{
    a->keys = keys;
    a->n = n;
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

/* ---- object lifetime ---- */

static obj *obj_new(uint32_t nrep, const void *key, size_t len, uint32_t h32)
{
    obj *o = malloc(sizeof(obj) + nrep * sizeof(rep) + len);
    if (!o)
        abort();
    if ((uintptr_t)o & ~SLOT_PTR) { /* the hash table keeps a tag in the top 16 bits */
        mc_log(MC_LOG_ERROR, TAG, "heap address %p above 2^48: unsupported platform", o);
        abort();
    }
    memset(o, 0, sizeof(obj));
    o->nrep = (uint8_t)nrep;
    o->key_len = (uint16_t)len;
    o->hash = h32;
    memcpy(okey(o), key, len);
    return o;
}

static void set_soft(mc_master_service *svc, obj *o, bool on)
{
    if (on && !(o->flags & F_SOFT)) {
        o->flags |= F_SOFT;
        cadd(&svc->soft_keys, 1);
    } else if (!on && (o->flags & F_SOFT)) {
        o->flags &= (uint8_t)~(F_SOFT | F_SOFT_REL);
        csub(&svc->soft_keys, 1);
    }
}

/* Frees the space of o's replicas. Caller holds the table read lock. */
static void reps_free_locked(mc_master_service *svc, obj *o)
{
    for (uint32_t i = 0; i < o->nrep; i++) {
        rep *r = &o->reps[i];
        if (r->handle == MC__ALLOC_NONE)
            continue;
        seg *s = svc->segs[r->seg];
        pthread_mutex_lock(&s->mu);
        uint64_t b = mc__alloc_block_size(s->alloc, r->handle);
        mc__alloc_free(s->alloc, r->handle);
        pthread_mutex_unlock(&s->mu);
        csub(&s->used, b);
        if (!s->unmounting) /* an unmounting segment left the global gauge already */
            csub(&svc->allocated, b);
        r->handle = MC__ALLOC_NONE;
    }
}

static void reps_free(mc_master_service *svc, obj *o)
{
    pthread_rwlock_rdlock(&svc->seg_lock);
    reps_free_locked(svc, o);
    pthread_rwlock_unlock(&svc->seg_lock);
}

/* Gauges for an object leaving the index. */
static void account_gone(mc_master_service *svc, obj *o)
{
    csub(&svc->keys, 1);
    if (o->flags & F_SOFT)
        csub(&svc->soft_keys, 1);
    if (o->flags & F_PROC) {
        csub(&svc->proc_keys, 1);
        csub(&svc->proc_bytes, obj_bytes(o));
    }
}

/* Removes o from the index, frees its space and the record. Caller holds sh->mu and not
 * the table lock. */
static void obj_erase(mc_master_service *svc, shard *sh, obj *o)
{
    ht_remove(sh, o);
    obj_unlist(sh, o);
    reps_free(svc, o);
    account_gone(svc, o);
    free(o);
}

/* Bytes o's replicas reserve in their allocators (block sizes, as `allocated` counts
 * them). Caller holds the table read lock. */
static uint64_t reps_reserved_locked(mc_master_service *svc, const obj *o)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < o->nrep; i++) {
        const rep *r = &o->reps[i];
        if (r->handle == MC__ALLOC_NONE)
            continue;
        seg *s = svc->segs[r->seg];
        pthread_mutex_lock(&s->mu);
        b += mc__alloc_block_size(s->alloc, r->handle);
        pthread_mutex_unlock(&s->mu);
    }
    return b;
}

/* Removes a complete object from the index. Its space is freed now, unless a reader's
 * lease is still active (a forced removal): then the object waits on the deferred list
 * until the lease's deadline, so no put can be given that space while the reader may still
 * be transferring from it. Caller holds sh->mu and not the table lock. */
static void obj_remove(mc_master_service *svc, shard *sh, obj *o, uint64_t now)
{
    if (!leased(svc, o, now)) {
        obj_erase(svc, sh, o);
        return;
    }
    ht_remove(sh, o);
    obj_unlist(sh, o);
    account_gone(svc, o);
    pthread_rwlock_rdlock(&svc->seg_lock);
    uint64_t b = reps_reserved_locked(svc, o);
    pthread_rwlock_unlock(&svc->seg_lock);
    if (!b) { /* zero-size: nothing to protect */
        free(o);
        return;
    }
    o->pin = b; /* the soft pin is gone with the key: `pin` now holds the bytes kept */
    uint64_t deadline = o->atime + svc->lease_ttl;
    pthread_mutex_lock(&svc->defer_mu);
    o->prev = NULL;
    o->next = svc->deferred;
    svc->deferred = o;
    if (deadline < svc->defer_min)
        svc->defer_min = deadline;
    cadd(&svc->defer_keys, 1);
    cadd(&svc->defer_bytes, b);
    pthread_mutex_unlock(&svc->defer_mu);
}

/* Frees the deferred objects whose lease deadline is at or before now. Cheap when none is
 * due. Caller holds no lock. */
static void defer_reap(mc_master_service *svc, uint64_t now)
{
    if (!cget(&svc->defer_keys))
        return;
    pthread_mutex_lock(&svc->defer_mu);
    if (now >= svc->defer_min) {
        uint64_t min = UINT64_MAX;
        pthread_rwlock_rdlock(&svc->seg_lock);
        obj **pp = &svc->deferred;
        while (*pp) {
            obj *o = *pp;
            uint64_t deadline = o->atime + svc->lease_ttl;
            if (deadline > now) {
                if (deadline < min)
                    min = deadline;
                pp = &o->next;
                continue;
            }
            *pp = o->next;
            reps_free_locked(svc, o);
            csub(&svc->defer_bytes, o->pin);
            csub(&svc->defer_keys, 1);
            free(o);
        }
        pthread_rwlock_unlock(&svc->seg_lock);
        svc->defer_min = min;
    }
    pthread_mutex_unlock(&svc->defer_mu);
}

/* Drops the deferred objects' replicas on `slot` (being unmounted: its allocator goes
 * away, its bytes already left `allocated`); objects left without space are freed. */
static void defer_drop_slot(mc_master_service *svc, uint32_t slot)
{
    pthread_mutex_lock(&svc->defer_mu);
    pthread_rwlock_rdlock(&svc->seg_lock);
    seg *s = svc->segs[slot];
    obj **pp = &svc->deferred;
    while (*pp) {
        obj *o = *pp;
        uint32_t j = 0;
        for (uint32_t i = 0; i < o->nrep; i++) {
            rep *r = &o->reps[i];
            if (r->seg != slot) {
                o->reps[j++] = *r;
                continue;
            }
            if (r->handle != MC__ALLOC_NONE) {
                pthread_mutex_lock(&s->mu);
                uint64_t b = mc__alloc_block_size(s->alloc, r->handle);
                pthread_mutex_unlock(&s->mu);
                o->pin -= b;
                csub(&svc->defer_bytes, b);
            }
        }
        o->nrep = (uint8_t)j; /* the key bytes are not read again */
        if (j) {
            pp = &o->next;
            continue;
        }
        *pp = o->next;
        csub(&svc->defer_bytes, o->pin);
        csub(&svc->defer_keys, 1);
        free(o);
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    pthread_mutex_unlock(&svc->defer_mu);
}

/* Fills out with o's replicas (status for all). Caller holds the table read lock. */
static void fill_list_locked(mc_master_service *svc, obj *o, int status,
                             mc_master_replica_list *out)
{
    out->n = o->nrep;
    for (uint32_t i = 0; i < o->nrep; i++) {
        const seg *s = svc->segs[o->reps[i].seg];
        mc_master_replica *d = &out->replicas[i];
        d->segment_id = s->id;
        d->address = o->reps[i].addr;
        d->size = o->size;
        d->status = status;
        memcpy(d->transport_endpoint, s->endpoint, strlen(s->endpoint) + 1);
        memcpy(d->protocol, s->protocol, strlen(s->protocol) + 1);
    }
}

static void fill_list(mc_master_service *svc, obj *o, int status, mc_master_replica_list *out)
{
    pthread_rwlock_rdlock(&svc->seg_lock);
    fill_list_locked(svc, o, status, out);
    pthread_rwlock_unlock(&svc->seg_lock);
}

/* ---- config ---- */

void mc_master_config_init(mc_master_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->default_kv_lease_ttl = 10000;
    cfg->default_kv_soft_pin_ttl = 30ull * 60 * 1000;
    cfg->max_kv_soft_pin_ttl = 24ull * 3600 * 1000;
    cfg->allow_evict_soft_pinned_objects = true;
    cfg->eviction_ratio = 0.05;
    cfg->eviction_high_watermark_ratio = 0.90;
    cfg->client_ttl = 10;
    cfg->put_start_discard_timeout_sec = 30;
    cfg->put_start_release_timeout_sec = 600;
    cfg->allocation_strategy = MC_MASTER_STRATEGY_RANDOM;
    cfg->shard_count = 1024;
    cfg->alloc_alignment = 64;
    cfg->sync_eviction = true;
}

void mc_master_put_config_init(mc_master_put_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->replica_num = 1;
}

int mc_master_strategy_parse(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "random"))
        return MC_MASTER_STRATEGY_RANDOM;
    if (!strcmp(name, "free_ratio_first"))
        return MC_MASTER_STRATEGY_FREE_RATIO_FIRST;
    return -1;
}

static const char *const op_names[] = {
#define MC__OPN(e, stem) stem,
    MC_MASTER_OP_TABLE(MC__OPN)
#undef MC__OPN
};
static const char *const batch_names[] = {
#define MC__BN(e, stem) stem,
    MC_MASTER_BATCH_TABLE(MC__BN)
#undef MC__BN
};

const char *mc_master_op_name(int op)
{
    return op >= 0 && op < MC_MASTER_OP_COUNT ? op_names[op] : NULL;
}

const char *mc_master_batch_op_name(int op)
{
    return op >= 0 && op < MC_MASTER_BATCH_COUNT ? batch_names[op] : NULL;
}

static bool pow2_in(uint64_t v, uint64_t max)
{
    return v >= 1 && v <= max && (v & (v - 1)) == 0;
}

static bool ratio_ok(double r)
{
    return !isnan(r) && r >= 0.0 && r <= 1.0;
}

int mc_master_service_create(const mc_master_config *cfg, mc_master_service **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    *out = NULL;
    mc_master_config def;
    if (!cfg) {
        mc_master_config_init(&def);
        cfg = &def;
    }
    if (!ratio_ok(cfg->eviction_ratio) || !ratio_ok(cfg->eviction_high_watermark_ratio) ||
        !pow2_in(cfg->shard_count, 65536) || !pow2_in(cfg->alloc_alignment, 4096) ||
        cfg->default_kv_soft_pin_ttl > cfg->max_kv_soft_pin_ttl ||
        cfg->put_start_release_timeout_sec < cfg->put_start_discard_timeout_sec ||
        cfg->put_start_release_timeout_sec > UINT64_MAX / 1000 ||
        cfg->client_ttl > UINT64_MAX / 1000 ||
        (cfg->allocation_strategy != MC_MASTER_STRATEGY_RANDOM &&
         cfg->allocation_strategy != MC_MASTER_STRATEGY_FREE_RATIO_FIRST &&
         cfg->allocation_strategy != MC_MASTER_STRATEGY_DEFAULT))
        return MC_INVALID_PARAMS;
    mc_master_service *svc = calloc(1, sizeof(*svc));
    if (!svc)
        abort();
    svc->cfg = *cfg;
    if (svc->cfg.allocation_strategy == MC_MASTER_STRATEGY_DEFAULT)
        svc->cfg.allocation_strategy = MC_MASTER_STRATEGY_RANDOM;
    svc->lease_ttl = cfg->default_kv_lease_ttl;
    svc->client_ttl_ms = cfg->client_ttl_ms ? cfg->client_ttl_ms : cfg->client_ttl * 1000;
    svc->discard_ms = cfg->put_start_discard_timeout_sec * 1000;
    svc->release_ms = cfg->put_start_release_timeout_sec * 1000;
    svc->nshards = cfg->shard_count;
    svc->seed = mc_now_ns() ^ ((uint64_t)(uintptr_t)svc << 16);
    if (posix_memalign((void **)&svc->shards, 64, svc->nshards * sizeof(shard)))
        abort();
    memset(svc->shards, 0, svc->nshards * sizeof(shard));
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_init(&sh->mu, NULL);
        sh->mask = 15;
        sh->slots = calloc(sh->mask + 1, sizeof(*sh->slots));
        if (!sh->slots)
            abort();
    }
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&svc->seg_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&svc->client_mu, NULL);
    pthread_mutex_init(&svc->evict_mu, NULL);
    pthread_mutex_init(&svc->defer_mu, NULL);
    svc->defer_min = UINT64_MAX;
    *out = svc;
    return MC_OK;
}

static void seg_free(seg *s)
{
    mc__alloc_destroy(s->alloc);
    pthread_mutex_destroy(&s->mu);
    free(s->strings);
    free(s);
}

void mc_master_service_destroy(mc_master_service *svc)
{
    if (!svc)
        return;
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        for (uint32_t b = 0; b <= sh->mask; b++)
            free(slot_obj(sh->slots[b]));
        free(sh->slots);
        pthread_mutex_destroy(&sh->mu);
    }
    free(svc->shards);
    while (svc->deferred) {
        obj *o = svc->deferred;
        svc->deferred = o->next;
        free(o);
    }
    for (uint32_t i = 0; i < svc->nslots; i++)
        if (svc->segs[i])
            seg_free(svc->segs[i]);
    free(svc->segs);
    free(svc->clients);
    pthread_rwlock_destroy(&svc->seg_lock);
    pthread_mutex_destroy(&svc->client_mu);
    pthread_mutex_destroy(&svc->evict_mu);
    pthread_mutex_destroy(&svc->defer_mu);
    free(svc);
}

uint64_t mc_master_service_now_ms(mc_master_service *svc)
{
    return now_ms(svc);
}

/* ---- clients ---- */

static void client_touch(mc_master_service *svc, mc_master_uuid id, uint64_t now)
{
    pthread_mutex_lock(&svc->client_mu);
    size_t i;
    for (i = 0; i < svc->nclients; i++)
        if (uuid_eq(svc->clients[i].id, id))
            break;
    if (i == svc->nclients) {
        if (svc->nclients == svc->clients_cap) {
            size_t cap = svc->clients_cap ? svc->clients_cap * 2 : 16;
            client_rec *c = realloc(svc->clients, cap * sizeof(*c));
            if (!c)
                abort();
            svc->clients = c;
            svc->clients_cap = cap;
        }
        svc->clients[svc->nclients++].id = id;
    }
    svc->clients[i].deadline = now + svc->client_ttl_ms;
    pthread_mutex_unlock(&svc->client_mu);
}

int mc_master_service_ping(mc_master_service *svc, mc_master_uuid client_id,
                           mc_master_ping_result *out)
{
    uint64_t now = now_ms(svc);
    int status = MC_MASTER_CLIENT_NEED_REMOUNT;
    pthread_mutex_lock(&svc->client_mu);
    for (size_t i = 0; i < svc->nclients; i++) {
        if (uuid_eq(svc->clients[i].id, client_id)) {
            if (svc->clients[i].deadline > now) {
                svc->clients[i].deadline = now + svc->client_ttl_ms;
                status = MC_MASTER_CLIENT_OK;
            }
            break;
        }
    }
    pthread_mutex_unlock(&svc->client_mu);
    if (out) {
        out->view_version = 0;
        out->client_status = status;
    }
    count_op(svc, MC_MASTER_OP_PING, MC_OK);
    return MC_OK;
}

/* ---- segments ---- */

static bool str_ok(const char *s, size_t max, bool required)
{
    if (!s || !*s)
        return !required;
    return strnlen(s, max) < max;
}

static int mount_one(mc_master_service *svc, const mc_master_segment *d, mc_master_uuid client)
{
    if (!d || !str_ok(d->name, MC_MASTER_NAME_MAX, true) ||
        !str_ok(d->te_endpoint, MC_MASTER_NAME_MAX, false) ||
        !str_ok(d->protocol, MC_MASTER_PROTOCOL_MAX, false) ||
        !str_ok(d->host_id, MC_MASTER_NAME_MAX, false) || d->size == 0 ||
        d->size > MC_MASTER_SEGMENT_MAX_SIZE || d->base > UINT64_MAX - d->size)
        return MC_INVALID_PARAMS;
    const char *ep = d->te_endpoint && *d->te_endpoint ? d->te_endpoint : d->name;
    const char *proto = d->protocol && *d->protocol ? d->protocol : "tcp";
    const char *host = d->host_id ? d->host_id : "";
    size_t ln = strlen(d->name) + 1, le = strlen(ep) + 1, lp = strlen(proto) + 1,
           lh = strlen(host) + 1;

    seg *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->strings = malloc(ln + le + lp + lh);
    if (!s->strings)
        abort();
    char *p = s->strings;
    memcpy(p, d->name, ln);
    s->name = p;
    memcpy(p += ln, ep, le);
    s->endpoint = p;
    memcpy(p += le, proto, lp);
    s->protocol = p;
    memcpy(p += lp, host, lh);
    s->host_id = p;
    s->name_hash = XXH3_64bits(s->name, ln - 1);
    s->id = d->id;
    s->client = client;
    s->base = d->base;
    s->size = d->size;
    s->alloc = mc__alloc_create(d->base, d->size, svc->cfg.alloc_alignment);
    s->capacity = mc__alloc_capacity(s->alloc);
    pthread_mutex_init(&s->mu, NULL);

    pthread_rwlock_wrlock(&svc->seg_lock);
    uint32_t freeslot = UINT32_MAX;
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *o = svc->segs[i];
        if (!o) {
            if (freeslot == UINT32_MAX)
                freeslot = i;
        } else if (uuid_eq(o->id, d->id)) {
            pthread_rwlock_unlock(&svc->seg_lock);
            seg_free(s);
            return MC_SEGMENT_ALREADY_EXISTS;
        }
    }
    if (freeslot == UINT32_MAX) {
        if (svc->nslots == svc->slots_cap) {
            uint32_t cap = svc->slots_cap ? svc->slots_cap * 2 : 16;
            seg **t = realloc(svc->segs, cap * sizeof(*t));
            if (!t)
                abort();
            svc->segs = t;
            svc->slots_cap = cap;
        }
        freeslot = svc->nslots++;
    }
    svc->segs[freeslot] = s;
    svc->nmounted++;
    cadd(&svc->capacity, s->capacity);
    pthread_rwlock_unlock(&svc->seg_lock);
    return MC_OK;
}

int mc_master_service_mount_segment(mc_master_service *svc, const mc_master_segment *seg_desc,
                                    mc_master_uuid client_id)
{
    int rc = mount_one(svc, seg_desc, client_id);
    if (rc == MC_OK || rc == MC_SEGMENT_ALREADY_EXISTS)
        client_touch(svc, client_id, now_ms(svc));
    count_op(svc, MC_MASTER_OP_MOUNT_SEGMENT, rc);
    return rc;
}

int mc_master_service_remount_segments(mc_master_service *svc, const mc_master_segment *segs,
                                       size_t n, mc_master_uuid client_id)
{
    int rc = MC_OK;
    if (n > REMOUNT_MAX || (n && !segs)) {
        rc = MC_INVALID_PARAMS;
    } else {
        client_touch(svc, client_id, now_ms(svc));
        for (size_t i = 0; i < n; i++) {
            int r = mount_one(svc, &segs[i], client_id);
            if (r != MC_OK && r != MC_SEGMENT_ALREADY_EXISTS) {
                rc = r;
                break;
            }
        }
    }
    count_op(svc, MC_MASTER_OP_REMOUNT_SEGMENT, rc);
    return rc;
}

/* Drops every replica on `slot` from the objects of one shard (space is not freed: the
 * allocator goes away); objects left without replicas are erased. */
static void drop_slot(mc_master_service *svc, shard *sh, uint32_t slot)
{
    objvec gone = {0};
    pthread_mutex_lock(&sh->mu);
    for (uint32_t b = 0; b <= sh->mask; b++) {
        obj *o = slot_obj(sh->slots[b]);
        if (!o)
            continue;
        uint32_t j = 0;
        for (uint32_t i = 0; i < o->nrep; i++)
            if (o->reps[i].seg != slot)
                o->reps[j++] = o->reps[i];
        uint32_t dropped = o->nrep - j;
        if (!dropped)
            continue;
        uint8_t *key = okey(o);
        memmove(o->reps + j, key, o->key_len); /* the key follows the replicas */
        if (o->flags & F_PROC)
            csub(&svc->proc_bytes, o->size * dropped);
        o->nrep = (uint8_t)j;
        if (!j)
            objvec_push(&gone, o);
    }
    for (size_t k = 0; k < gone.n; k++) {
        obj *o = gone.v[k];
        ht_remove(sh, o);
        obj_unlist(sh, o);
        account_gone(svc, o);
        free(o);
    }
    pthread_mutex_unlock(&sh->mu);
    free(gone.v);
}

/* Unmounts the segment in `slot`, which the caller marked unmounting. */
static void unmount_finish(mc_master_service *svc, uint32_t slot)
{
    for (uint32_t i = 0; i < svc->nshards; i++)
        drop_slot(svc, &svc->shards[i], slot);
    defer_drop_slot(svc, slot);
    pthread_rwlock_wrlock(&svc->seg_lock);
    seg *s = svc->segs[slot];
    svc->segs[slot] = NULL;
    pthread_rwlock_unlock(&svc->seg_lock);
    seg_free(s);
}

/* Marks the segment unmounting (under the write lock); the caller then finishes. */
static void unmount_mark_locked(mc_master_service *svc, seg *s)
{
    s->unmounting = true;
    svc->nmounted--;
    csub(&svc->capacity, s->capacity);
    csub(&svc->allocated, cget(&s->used));
}

int mc_master_service_unmount_segment(mc_master_service *svc, mc_master_uuid segment_id,
                                      mc_master_uuid client_id)
{
    int rc = MC_SEGMENT_NOT_FOUND;
    uint32_t slot = 0;
    pthread_rwlock_wrlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *s = svc->segs[i];
        if (s && !s->unmounting && uuid_eq(s->id, segment_id)) {
            if (!uuid_eq(s->client, client_id)) {
                rc = MC_ILLEGAL_CLIENT;
            } else {
                unmount_mark_locked(svc, s);
                slot = i;
                rc = MC_OK;
            }
            break;
        }
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    if (rc == MC_OK)
        unmount_finish(svc, slot);
    count_op(svc, MC_MASTER_OP_UNMOUNT_SEGMENT, rc);
    return rc;
}

/* ---- allocation ---- */

typedef struct alloc_ctx {
    uint64_t size;
    uint32_t want, n;
    bool could_fit; /* some candidate segment is large enough when empty */
    rep reps[MC_MASTER_MAX_REPLICAS];
    const seg *chosen[MC_MASTER_MAX_REPLICAS];
} alloc_ctx;

static bool name_taken(const alloc_ctx *c, const seg *s)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->chosen[i]->name_hash == s->name_hash && !strcmp(c->chosen[i]->name, s->name))
            return true;
    return false;
}

/* Tries one replica on slot. Caller holds the table read lock. */
static bool try_slot(mc_master_service *svc, alloc_ctx *c, uint32_t slot)
{
    seg *s = svc->segs[slot];
    if (!s || s->unmounting || name_taken(c, s))
        return false;
    rep r = {slot, MC__ALLOC_NONE, s->base};
    if (c->size) {
        if (s->capacity < c->size)
            return false;
        c->could_fit = true;
        pthread_mutex_lock(&s->mu);
        r.handle = mc__alloc_alloc(s->alloc, c->size, &r.addr);
        uint64_t b = r.handle != MC__ALLOC_NONE ? mc__alloc_block_size(s->alloc, r.handle) : 0;
        pthread_mutex_unlock(&s->mu);
        if (r.handle == MC__ALLOC_NONE)
            return false;
        cadd(&s->used, b);
        cadd(&svc->allocated, b);
    } else {
        c->could_fit = true;
    }
    c->chosen[c->n] = s;
    c->reps[c->n++] = r;
    return true;
}

typedef struct ratio_slot {
    double free_ratio;
    uint32_t slot;
} ratio_slot;

static int ratio_cmp(const void *a, const void *b)
{
    double x = ((const ratio_slot *)a)->free_ratio, y = ((const ratio_slot *)b)->free_ratio;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Places up to c->want replicas: preferred names first, then by strategy (upstream
 * AllocationStrategy, §4.6). Caller holds the table read lock. */
static void choose(mc_master_service *svc, alloc_ctx *c, const mc_master_put_config *cfg,
                   mc_master_strategy strategy)
{
    uint32_t ns = svc->nslots;
    for (size_t p = 0; p < cfg->n_preferred && c->n < c->want; p++) {
        const char *name = cfg->preferred_segments[p];
        uint64_t h = XXH3_64bits(name, strlen(name));
        for (uint32_t i = 0; i < ns; i++) {
            const seg *s = svc->segs[i];
            if (s && s->name_hash == h && !strcmp(s->name, name) && try_slot(svc, c, i))
                break;
        }
    }
    if (c->n < c->want && ns && strategy == MC_MASTER_STRATEGY_FREE_RATIO_FIRST) {
        ratio_slot cand[6 * MC_MASTER_MAX_REPLICAS];
        uint32_t m = 6 * (c->want - c->n), k = 0;
        uint32_t start = (uint32_t)(rng() % ns);
        for (uint32_t i = 0; i < ns && k < m; i++) {
            uint32_t slot = (start + i) % ns;
            const seg *s = svc->segs[slot];
            if (!s || s->unmounting || !s->capacity)
                continue;
            cand[k].free_ratio = 1.0 - (double)cget((counter *)&s->used) / (double)s->capacity;
            cand[k++].slot = slot;
        }
        qsort(cand, k, sizeof(cand[0]), ratio_cmp);
        for (uint32_t i = 0; i < k && c->n < c->want; i++)
            try_slot(svc, c, cand[i].slot);
    }
    if (c->n < c->want && ns) {
        uint32_t start = (uint32_t)(rng() % ns);
        for (uint32_t i = 0; i < ns && c->n < c->want; i++)
            try_slot(svc, c, (start + i) % ns);
    }
}

/* ---- eviction ---- */

/* 0: not evictable; 1: ordinary candidate; 2: soft-pinned candidate. Clears lapsed soft
 * pins on the way. Caller holds the shard lock. */
static int evict_class(mc_master_service *svc, obj *o, uint64_t now)
{
    if ((o->flags & (F_PROC | F_HARD)) || o->size == 0 || leased(svc, o, now))
        return 0;
    if (o->flags & F_SOFT) {
        if (o->pin > now)
            return 2;
        set_soft(svc, o, false);
    }
    return 1;
}

typedef struct sample {
    uint64_t atime, bytes;
} sample;

static int sample_cmp(const void *a, const void *b)
{
    uint64_t x = ((const sample *)a)->atime, y = ((const sample *)b)->atime;
    return x < y ? -1 : x > y;
}

/* Phase 1 takes ordinary candidates only; phase 2 (soft list) takes any candidate. */
static inline bool accept(int cls, int phase)
{
    return phase == 1 ? cls == 1 : cls >= 1;
}

static void sample_list(mc_master_service *svc, olist *l, int phase, uint64_t now,
                        sample *out, size_t *n)
{
    int taken = 0, skipped = 0;
    for (obj *o = l->head; o && taken < EVICT_SAMPLE && skipped < EVICT_SKIP_MAX; o = o->next) {
        if (accept(evict_class(svc, o, now), phase)) {
            out[(*n)++] = (sample){o->atime, obj_bytes(o)};
            taken++;
        } else {
            skipped++;
        }
    }
}

static uint64_t evict_list(mc_master_service *svc, shard *sh, olist *l, int phase,
                           uint64_t now, uint64_t cutoff, uint64_t want)
{
    uint64_t freed = 0, keys = 0;
    obj *o = l->head;
    while (o && freed < want && o->atime <= cutoff) {
        obj *next = o->next;
        if (accept(evict_class(svc, o, now), phase)) {
            freed += obj_bytes(o);
            keys++;
            obj_erase(svc, sh, o);
        }
        o = next;
    }
    cadd(&svc->evicted_keys, keys);
    return freed;
}

/* One eviction phase: 1 = ordinary candidates (the LRU lists, and lapsed pins in the
 * soft lists); 2 = everything evictable in the soft lists, pinned or not. */
static uint64_t evict_phase(mc_master_service *svc, int phase, uint64_t target)
{
    size_t cap = (size_t)svc->nshards * 2 * EVICT_SAMPLE;
    sample *samples = malloc(cap * sizeof(*samples));
    if (!samples)
        abort();
    uint64_t freed = 0;
    for (int round = 0; round < EVICT_ROUNDS && freed < target; round++) {
        uint64_t now = now_ms(svc);
        size_t n = 0;
        for (uint32_t i = 0; i < svc->nshards; i++) {
            shard *sh = &svc->shards[i];
            pthread_mutex_lock(&sh->mu);
            if (phase == 1)
                sample_list(svc, &sh->lru, 1, now, samples, &n);
            sample_list(svc, &sh->soft, phase, now, samples, &n);
            pthread_mutex_unlock(&sh->mu);
        }
        if (!n)
            break;
        qsort(samples, n, sizeof(*samples), sample_cmp);
        uint64_t acc = 0, cutoff = samples[n - 1].atime;
        for (size_t i = 0; i < n; i++) {
            acc += samples[i].bytes;
            if (acc >= target - freed) {
                cutoff = samples[i].atime;
                break;
            }
        }
        uint64_t got = 0;
        uint32_t start = (uint32_t)(rng() % svc->nshards);
        for (uint32_t k = 0; k < svc->nshards && freed + got < target; k++) {
            shard *sh = &svc->shards[(start + k) % svc->nshards];
            pthread_mutex_lock(&sh->mu);
            if (phase == 1)
                got += evict_list(svc, sh, &sh->lru, 1, now, cutoff, target - freed - got);
            if (freed + got < target)
                got += evict_list(svc, sh, &sh->soft, phase, now, cutoff, target - freed - got);
            pthread_mutex_unlock(&sh->mu);
        }
        freed += got;
        if (!got)
            break;
    }
    free(samples);
    return freed;
}

/* Caller holds evict_mu and no shard lock. */
static uint64_t evict_locked(mc_master_service *svc, uint64_t target)
{
    cadd(&svc->evict_attempts, 1);
    uint64_t freed = evict_phase(svc, 1, target);
    if (freed < target && svc->cfg.allow_evict_soft_pinned_objects)
        freed += evict_phase(svc, 2, target - freed);
    if (freed)
        cadd(&svc->evict_successes, 1);
    cadd(&svc->evicted_bytes, freed);
    atomic_fetch_add(&svc->evict_gen, 1);
    return freed;
}

/* The watermark rule (upstream BatchEvict, §4.5): free max(ratio, used - hw + ratio). */
static uint64_t watermark_target(mc_master_service *svc)
{
    double cap = (double)cget(&svc->capacity);
    if (cap <= 0)
        return 0;
    double used = (double)cget(&svc->allocated) / cap;
    double t = svc->cfg.eviction_ratio;
    double over = used - svc->cfg.eviction_high_watermark_ratio + svc->cfg.eviction_ratio;
    if (over > t)
        t = over;
    return (uint64_t)(t * cap);
}

uint64_t mc_master_service_evict(mc_master_service *svc, uint64_t bytes)
{
    pthread_mutex_lock(&svc->evict_mu);
    if (!bytes)
        bytes = watermark_target(svc);
    uint64_t freed = bytes ? evict_locked(svc, bytes) : 0;
    pthread_mutex_unlock(&svc->evict_mu);
    return freed;
}

/* ---- put / upsert ---- */

typedef struct pin_req {
    mc_master_soft_pin_action action;
    uint64_t ttl; /* ENABLE: ms; 0 = not pinned */
} pin_req;

static int check_put(mc_master_service *svc, const mc_master_put_config *cfg, uint64_t size,
                     pin_req *pin)
{
    if (!cfg || cfg->replica_num == 0 || size > MC_MASTER_SEGMENT_MAX_SIZE ||
        cfg->n_preferred > MC_MASTER_MAX_PREFERRED ||
        (cfg->n_preferred && !cfg->preferred_segments))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < cfg->n_preferred; i++)
        if (!cfg->preferred_segments[i] ||
            strnlen(cfg->preferred_segments[i], MC_MASTER_NAME_MAX) >= MC_MASTER_NAME_MAX)
            return MC_INVALID_PARAMS;
    if (cfg->soft_pin != MC_MASTER_SOFT_PIN_PRESERVE &&
        cfg->soft_pin != MC_MASTER_SOFT_PIN_ENABLE &&
        cfg->soft_pin != MC_MASTER_SOFT_PIN_DISABLE)
        return MC_INVALID_PARAMS;
    if (cfg->strategy != MC_MASTER_STRATEGY_DEFAULT &&
        cfg->strategy != MC_MASTER_STRATEGY_RANDOM &&
        cfg->strategy != MC_MASTER_STRATEGY_FREE_RATIO_FIRST)
        return MC_INVALID_PARAMS;
    if (cfg->soft_pin_ttl_set &&
        (cfg->soft_pin != MC_MASTER_SOFT_PIN_ENABLE ||
         cfg->soft_pin_ttl_ms > svc->cfg.max_kv_soft_pin_ttl))
        return MC_INVALID_PARAMS;
    pin->action = cfg->soft_pin;
    pin->ttl = cfg->soft_pin_ttl_set ? cfg->soft_pin_ttl_ms : svc->cfg.default_kv_soft_pin_ttl;
    return MC_OK;
}

/* Applies the pins of a new write to o (in flight). old: the object it replaces (for
 * PRESERVE), or NULL. */
static void apply_pins(mc_master_service *svc, obj *o, const obj *old, const pin_req *pin,
                       bool hard)
{
    o->flags = (uint8_t)((o->flags & ~(F_HARD)) | (hard ? F_HARD : 0));
    if (pin->action == MC_MASTER_SOFT_PIN_ENABLE && pin->ttl) {
        set_soft(svc, o, true);
        o->flags |= F_SOFT_REL;
        o->pin = pin->ttl;
    } else if (pin->action == MC_MASTER_SOFT_PIN_PRESERVE && old && (old->flags & F_SOFT)) {
        set_soft(svc, o, true);
        o->flags = (uint8_t)((o->flags & ~F_SOFT_REL) | (old->flags & F_SOFT_REL));
        o->pin = old->pin;
    } else {
        set_soft(svc, o, false);
    }
}

static int do_start(mc_master_service *svc, mc_master_uuid client, const void *key,
                    size_t len, uint64_t h, uint64_t size, const mc_master_put_config *cfg,
                    mc_master_replica_list *out, bool upsert)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    pin_req pin;
    if (!out || (rc = check_put(svc, cfg, size, &pin)))
        return rc ? rc : MC_INVALID_PARAMS;
    out->n = 0;
    out->lease_ttl_ms = 0;
    uint32_t want = cfg->replica_num < MC_MASTER_MAX_REPLICAS ? cfg->replica_num
                                                              : MC_MASTER_MAX_REPLICAS;
    mc_master_strategy strategy =
        cfg->strategy ? cfg->strategy : svc->cfg.allocation_strategy;
    uint32_t h32;
    shard *sh = shard_of(svc, h, &h32);

    for (int attempt = 0;; attempt++) {
        uint64_t gen = cget(&svc->evict_gen);
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc);
        obj *o = ht_find(sh, h32, key, len);
        if (o && (o->flags & F_PROC)) {
            if (now - o->atime < svc->discard_ms) {
                pthread_mutex_unlock(&sh->mu);
                return MC_OBJECT_ALREADY_EXISTS;
            }
            obj_erase(svc, sh, o); /* a stale writer: pre-empted */
            cadd(&svc->put_discarded, 1);
            o = NULL;
        } else if (o && !upsert) {
            pthread_mutex_unlock(&sh->mu);
            return MC_OBJECT_ALREADY_EXISTS;
        } else if (o && leased(svc, o, now)) {
            pthread_mutex_unlock(&sh->mu);
            return MC_OBJECT_HAS_LEASE;
        } else if (o && o->size == size) {
            /* upsert, same size: the same space is rewritten in place */
            obj_unlist(sh, o);
            apply_pins(svc, o, o, &pin, cfg->with_hard_pin);
            o->flags = (uint8_t)((o->flags | F_PROC) & ~F_LEASED);
            o->atime = now;
            o->owner = client;
            obj_list(sh, o);
            cadd(&svc->proc_keys, 1);
            cadd(&svc->proc_bytes, obj_bytes(o));
            fill_list(svc, o, MC_MASTER_REPLICA_PROCESSING, out);
            pthread_mutex_unlock(&sh->mu);
            observe_size(svc, size);
            return MC_OK;
        }

        alloc_ctx c;
        c.size = size;
        c.want = want;
        c.n = 0;
        c.could_fit = false;
        obj *n = NULL;
        pthread_rwlock_rdlock(&svc->seg_lock);
        choose(svc, &c, cfg, strategy);
        if (c.n) {
            n = obj_new(c.n, key, len, h32);
            memcpy(n->reps, c.reps, c.n * sizeof(rep));
            n->size = size;
            fill_list_locked(svc, n, MC_MASTER_REPLICA_PROCESSING, out);
        }
        pthread_rwlock_unlock(&svc->seg_lock);

        if (n) {
            n->atime = now;
            n->owner = client;
            n->flags = F_PROC;
            apply_pins(svc, n, o, &pin, cfg->with_hard_pin);
            if (o) /* upsert with a new size: the old space goes */
                obj_erase(svc, sh, o);
            ht_insert(sh, n);
            obj_list(sh, n);
            cadd(&svc->keys, 1);
            cadd(&svc->proc_keys, 1);
            cadd(&svc->proc_bytes, obj_bytes(n));
            pthread_mutex_unlock(&sh->mu);
            if (c.n < want)
                cadd(&svc->partial_allocs, 1);
            observe_size(svc, size);
            return MC_OK;
        }
        pthread_mutex_unlock(&sh->mu);

        if (c.could_fit && attempt == 0 && svc->cfg.sync_eviction) {
            /* Free what lapsed leases released, evict inline and retry once (unless
             * another thread just evicted). */
            defer_reap(svc, now_ms(svc));
            pthread_mutex_lock(&svc->evict_mu);
            if (cget(&svc->evict_gen) == gen) {
                uint64_t t = (uint64_t)(svc->cfg.eviction_ratio * (double)cget(&svc->capacity));
                uint64_t need = size * want;
                evict_locked(svc, t > need ? t : need);
            }
            pthread_mutex_unlock(&svc->evict_mu);
            continue;
        }
        if (c.could_fit)
            atomic_store(&svc->need_evict, true);
        cadd(&svc->alloc_failures, 1);
        return MC_NO_AVAILABLE_HANDLE;
    }
}

static int do_end(mc_master_service *svc, mc_master_uuid client, const void *key, size_t len,
                  uint64_t h, bool revoke)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    uint32_t h32;
    shard *sh = shard_of(svc, h, &h32);
    pthread_mutex_lock(&sh->mu);
    obj *o = ht_find(sh, h32, key, len);
    if (!o) {
        rc = MC_OBJECT_NOT_FOUND;
    } else if (!(o->flags & F_PROC)) {
        rc = MC_INVALID_WRITE;
    } else if (!uuid_eq(o->owner, client)) {
        rc = MC_ILLEGAL_CLIENT;
    } else if (revoke) {
        obj_erase(svc, sh, o);
    } else {
        uint64_t now = now_ms(svc);
        obj_unlist(sh, o);
        o->flags &= (uint8_t)~(F_PROC | F_LEASED);
        csub(&svc->proc_keys, 1);
        csub(&svc->proc_bytes, obj_bytes(o));
        if (o->flags & F_SOFT_REL) {
            o->flags &= (uint8_t)~F_SOFT_REL;
            o->pin = now + o->pin;
        }
        o->atime = now;
        obj_list(sh, o);
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

int mc_master_service_put_start(mc_master_service *svc, mc_master_uuid client_id,
                                const void *key, size_t key_len, uint64_t size,
                                const mc_master_put_config *cfg, mc_master_replica_list *out)
{
    int rc = do_start(svc, client_id, key, key_len, key_hash(svc, key, key_len), size,
                      cfg, out, false);
    count_op(svc, MC_MASTER_OP_PUT_START, rc);
    return rc;
}

int mc_master_service_put_end(mc_master_service *svc, mc_master_uuid client_id,
                              const void *key, size_t key_len)
{
    int rc = do_end(svc, client_id, key, key_len, key_hash(svc, key, key_len), false);
    count_op(svc, MC_MASTER_OP_PUT_END, rc);
    return rc;
}

int mc_master_service_put_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                 const void *key, size_t key_len)
{
    int rc = do_end(svc, client_id, key, key_len, key_hash(svc, key, key_len), true);
    count_op(svc, MC_MASTER_OP_PUT_REVOKE, rc);
    return rc;
}

int mc_master_service_upsert_start(mc_master_service *svc, mc_master_uuid client_id,
                                   const void *key, size_t key_len, uint64_t size,
                                   const mc_master_put_config *cfg, mc_master_replica_list *out)
{
    int rc = do_start(svc, client_id, key, key_len, key_hash(svc, key, key_len), size,
                      cfg, out, true);
    count_op(svc, MC_MASTER_OP_UPSERT_START, rc);
    return rc;
}

int mc_master_service_upsert_end(mc_master_service *svc, mc_master_uuid client_id,
                                 const void *key, size_t key_len)
{
    int rc = do_end(svc, client_id, key, key_len, key_hash(svc, key, key_len), false);
    count_op(svc, MC_MASTER_OP_UPSERT_END, rc);
    return rc;
}

int mc_master_service_upsert_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                    const void *key, size_t key_len)
{
    int rc = do_end(svc, client_id, key, key_len, key_hash(svc, key, key_len), true);
    count_op(svc, MC_MASTER_OP_UPSERT_REVOKE, rc);
    return rc;
}

/* ---- batches ---- */

static int batch_start(mc_master_service *svc, mc_master_batch_op op, mc_master_uuid client,
                       const mc_master_key *keys, const uint64_t *sizes, size_t n,
                       const mc_master_put_config *cfg, mc_master_replica_list *outs,
                       int *statuses, bool upsert)
{
    if (n && (!keys || !sizes || !outs || !statuses || !cfg))
        return MC_INVALID_PARAMS;
    int first = MC_OK;
    size_t nfail = 0;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = do_start(svc, client, keys[i].data, keys[i].len, ahead_next(svc, &a, i),
                               sizes[i], cfg, &outs[i], upsert);
        if (statuses[i] != MC_OK && nfail++ == 0)
            first = statuses[i];
    }
    count_batch(svc, op, n, nfail);
    return first;
}

static int batch_end(mc_master_service *svc, mc_master_batch_op op, mc_master_uuid client,
                     const mc_master_key *keys, size_t n, int *statuses, bool revoke)
{
    if (n && (!keys || !statuses))
        return MC_INVALID_PARAMS;
    int first = MC_OK;
    size_t nfail = 0;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] =
            do_end(svc, client, keys[i].data, keys[i].len, ahead_next(svc, &a, i), revoke);
        if (statuses[i] != MC_OK && nfail++ == 0)
            first = statuses[i];
    }
    count_batch(svc, op, n, nfail);
    return first;
}

int mc_master_service_batch_put_start(mc_master_service *svc, mc_master_uuid client_id,
                                      const mc_master_key *keys, const uint64_t *sizes,
                                      size_t n, const mc_master_put_config *cfg,
                                      mc_master_replica_list *outs, int *statuses)
{
    return batch_start(svc, MC_MASTER_BATCH_PUT_START, client_id, keys, sizes, n, cfg, outs,
                       statuses, false);
}

int mc_master_service_batch_put_end(mc_master_service *svc, mc_master_uuid client_id,
                                    const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_end(svc, MC_MASTER_BATCH_PUT_END, client_id, keys, n, statuses, false);
}

int mc_master_service_batch_put_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                       const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_end(svc, MC_MASTER_BATCH_PUT_REVOKE, client_id, keys, n, statuses, true);
}

int mc_master_service_batch_upsert_start(mc_master_service *svc, mc_master_uuid client_id,
                                         const mc_master_key *keys, const uint64_t *sizes,
                                         size_t n, const mc_master_put_config *cfg,
                                         mc_master_replica_list *outs, int *statuses)
{
    return batch_start(svc, MC_MASTER_BATCH_UPSERT_START, client_id, keys, sizes, n, cfg,
                       outs, statuses, true);
}

int mc_master_service_batch_upsert_end(mc_master_service *svc, mc_master_uuid client_id,
                                       const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_end(svc, MC_MASTER_BATCH_UPSERT_END, client_id, keys, n, statuses, false);
}

int mc_master_service_batch_upsert_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                          const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_end(svc, MC_MASTER_BATCH_UPSERT_REVOKE, client_id, keys, n, statuses, true);
}

/* ---- reads ---- */

/* Grants a read lease and marks o recently used. Caller holds sh->mu. */
static void grant_lease(shard *sh, obj *o, uint64_t now)
{
    obj_unlist(sh, o);
    o->atime = now;
    o->flags |= F_LEASED;
    obj_list(sh, o);
}

static int do_get(mc_master_service *svc, const void *key, size_t len, uint64_t h,
                  mc_master_replica_list *out)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    uint32_t h32;
    shard *sh = shard_of(svc, h, &h32);
    pthread_mutex_lock(&sh->mu);
    obj *o = ht_find(sh, h32, key, len);
    if (!o) {
        rc = MC_OBJECT_NOT_FOUND;
    } else if (o->flags & F_PROC) {
        rc = MC_REPLICA_IS_NOT_READY;
    } else {
        grant_lease(sh, o, now_ms(svc));
        if (out) {
            fill_list(svc, o, MC_MASTER_REPLICA_COMPLETE, out);
            out->lease_ttl_ms = svc->lease_ttl;
        }
    }
    pthread_mutex_unlock(&sh->mu);
    if (rc && out) {
        out->n = 0;
        out->lease_ttl_ms = 0;
    }
    return rc;
}

int mc_master_service_get_replica_list(mc_master_service *svc, const void *key,
                                       size_t key_len, mc_master_replica_list *out)
{
    int rc = out ? do_get(svc, key, key_len, key_hash(svc, key, key_len), out)
                 : MC_INVALID_PARAMS;
    count_op(svc, MC_MASTER_OP_GET_REPLICA_LIST, rc);
    return rc;
}

int mc_master_service_batch_get_replica_list(mc_master_service *svc,
                                             const mc_master_key *keys, size_t n,
                                             mc_master_replica_list *outs, int *statuses)
{
    if (n && (!keys || !outs || !statuses))
        return MC_INVALID_PARAMS;
    int first = MC_OK;
    size_t nfail = 0;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = do_get(svc, keys[i].data, keys[i].len, ahead_next(svc, &a, i), &outs[i]);
        if (statuses[i] != MC_OK && nfail++ == 0)
            first = statuses[i];
    }
    count_batch(svc, MC_MASTER_BATCH_GET_REPLICA_LIST, n, nfail);
    return first;
}

static int do_exist(mc_master_service *svc, const void *key, size_t len, uint64_t h)
{
    int rc = do_get(svc, key, len, h, NULL);
    if (rc == MC_OK)
        return 1;
    if (rc == MC_OBJECT_NOT_FOUND || rc == MC_REPLICA_IS_NOT_READY)
        return 0;
    return rc;
}

int mc_master_service_exist_key(mc_master_service *svc, const void *key, size_t key_len)
{
    int rc = do_exist(svc, key, key_len, key_hash(svc, key, key_len));
    count_op(svc, MC_MASTER_OP_EXIST_KEY, rc);
    return rc;
}

int mc_master_service_batch_exist_key(mc_master_service *svc, const mc_master_key *keys,
                                      size_t n, int *results)
{
    if (n && (!keys || !results))
        return MC_INVALID_PARAMS;
    size_t nfail = 0;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        results[i] = do_exist(svc, keys[i].data, keys[i].len, ahead_next(svc, &a, i));
        if (results[i] < 0)
            nfail++;
    }
    count_batch(svc, MC_MASTER_BATCH_EXIST_KEY, n, nfail);
    return MC_OK;
}

/* ---- regex ---- */

typedef struct regex {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
} regex;

static int regex_init(regex *r, const char *pattern, size_t len)
{
    memset(r, 0, sizeof(*r));
    if ((!pattern && len) || len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    int err;
    PCRE2_SIZE off;
    r->code = pcre2_compile((PCRE2_SPTR)(pattern ? pattern : ""), len, 0, &err, &off, NULL);
    if (!r->code)
        return MC_INVALID_PARAMS;
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* optional: else the interpreter */
    r->md = pcre2_match_data_create_from_pattern(r->code, NULL);
    r->mctx = pcre2_match_context_create(NULL);
    if (!r->md || !r->mctx)
        abort();
    pcre2_set_match_limit(r->mctx, REGEX_MATCH_LIMIT);
    return MC_OK;
}

static void regex_deinit(regex *r)
{
    pcre2_match_context_free(r->mctx);
    pcre2_match_data_free(r->md);
    pcre2_code_free(r->code);
}

/* A pattern that errors on a key (e.g. hits the match limit) counts as no match. */
static bool regex_match(regex *r, obj *o)
{
    return pcre2_match(r->code, okey(o), o->key_len, 0, 0, r->md, r->mctx) >= 0;
}

int mc_master_service_get_replica_list_by_regex(mc_master_service *svc, const char *pattern,
                                                size_t pattern_len, mc_master_regex_cb cb,
                                                void *ctx)
{
    regex r;
    int rc = regex_init(&r, pattern, pattern_len);
    if (rc == MC_OK) {
        mc_master_replica_list *list = malloc(sizeof(*list));
        if (!list)
            abort();
        bool stop = false;
        for (uint32_t i = 0; i < svc->nshards && !stop; i++) {
            shard *sh = &svc->shards[i];
            pthread_mutex_lock(&sh->mu);
            uint64_t now = now_ms(svc);
            for (uint32_t b = 0; b <= sh->mask && !stop; b++) {
                obj *o = slot_obj(sh->slots[b]);
                if (!o || (o->flags & F_PROC) || !regex_match(&r, o))
                    continue;
                grant_lease(sh, o, now);
                fill_list(svc, o, MC_MASTER_REPLICA_COMPLETE, list);
                list->lease_ttl_ms = svc->lease_ttl;
                if (cb && cb(okey(o), o->key_len, list, ctx))
                    stop = true;
            }
            pthread_mutex_unlock(&sh->mu);
        }
        free(list);
        regex_deinit(&r);
    }
    count_op(svc, MC_MASTER_OP_GET_REPLICA_LIST_BY_REGEX, rc);
    return rc;
}

/* Removes the complete objects that match r (all when NULL), leased ones only with
 * force. */
static uint64_t remove_where(mc_master_service *svc, regex *r, bool force)
{
    uint64_t count = 0;
    objvec hit = {0};
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc);
        hit.n = 0;
        for (uint32_t b = 0; b <= sh->mask; b++) {
            obj *o = slot_obj(sh->slots[b]);
            if (o && !(o->flags & F_PROC) && (force || !leased(svc, o, now)) &&
                (!r || regex_match(r, o)))
                objvec_push(&hit, o);
        }
        for (size_t k = 0; k < hit.n; k++)
            obj_remove(svc, sh, hit.v[k], now);
        count += hit.n;
        pthread_mutex_unlock(&sh->mu);
    }
    free(hit.v);
    return count;
}

int mc_master_service_remove_by_regex(mc_master_service *svc, const char *pattern,
                                      size_t pattern_len, bool force, uint64_t *count)
{
    regex r;
    uint64_t n = 0;
    int rc = regex_init(&r, pattern, pattern_len);
    if (rc == MC_OK) {
        n = remove_where(svc, &r, force);
        regex_deinit(&r);
    }
    if (count)
        *count = n;
    count_op(svc, MC_MASTER_OP_REMOVE_BY_REGEX, rc);
    return rc;
}

int mc_master_service_remove_all(mc_master_service *svc, bool force, uint64_t *count)
{
    uint64_t n = remove_where(svc, NULL, force);
    if (count)
        *count = n;
    count_op(svc, MC_MASTER_OP_REMOVE_ALL, MC_OK);
    return MC_OK;
}

/* ---- remove ---- */

static int do_remove(mc_master_service *svc, const void *key, size_t len, uint64_t h,
                     bool force)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    uint32_t h32;
    shard *sh = shard_of(svc, h, &h32);
    pthread_mutex_lock(&sh->mu);
    obj *o = ht_find(sh, h32, key, len);
    uint64_t now = now_ms(svc);
    if (!o)
        rc = MC_OBJECT_NOT_FOUND;
    else if (o->flags & F_PROC)
        rc = MC_REPLICA_IS_NOT_READY;
    else if (!force && leased(svc, o, now))
        rc = MC_OBJECT_HAS_LEASE;
    else
        obj_remove(svc, sh, o, now);
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

int mc_master_service_remove(mc_master_service *svc, const void *key, size_t key_len,
                             bool force)
{
    int rc = do_remove(svc, key, key_len, key_hash(svc, key, key_len), force);
    count_op(svc, MC_MASTER_OP_REMOVE, rc);
    return rc;
}

int mc_master_service_batch_remove(mc_master_service *svc, const mc_master_key *keys,
                                   size_t n, bool force, int *statuses)
{
    if (n && (!keys || !statuses))
        return MC_INVALID_PARAMS;
    int first = MC_OK;
    size_t nfail = 0;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = do_remove(svc, keys[i].data, keys[i].len, ahead_next(svc, &a, i), force);
        if (statuses[i] != MC_OK && nfail++ == 0)
            first = statuses[i];
    }
    count_batch(svc, MC_MASTER_BATCH_REMOVE, n, nfail);
    return first;
}

/* ---- tick ---- */

static void expire_clients(mc_master_service *svc, uint64_t now)
{
    mc_master_uuid *dead = NULL;
    size_t ndead = 0;
    pthread_mutex_lock(&svc->client_mu);
    for (size_t i = 0; i < svc->nclients;) {
        if (svc->clients[i].deadline <= now) {
            mc_master_uuid *d = realloc(dead, (ndead + 1) * sizeof(*d));
            if (!d)
                abort();
            dead = d;
            dead[ndead++] = svc->clients[i].id;
            svc->clients[i] = svc->clients[--svc->nclients];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&svc->client_mu);
    for (size_t k = 0; k < ndead; k++) {
        cadd(&svc->clients_expired, 1);
        mc_log(MC_LOG_INFO, TAG, "client %016llx%016llx expired; unmounting its segments",
               (unsigned long long)dead[k].first, (unsigned long long)dead[k].second);
        char **names = NULL; /* distinct names of its segments, for on_client_expired */
        size_t nnames = 0;
        for (;;) {
            uint32_t slot = UINT32_MAX;
            pthread_rwlock_wrlock(&svc->seg_lock);
            for (uint32_t i = 0; i < svc->nslots; i++) {
                seg *s = svc->segs[i];
                if (s && !s->unmounting && uuid_eq(s->client, dead[k])) {
                    unmount_mark_locked(svc, s);
                    slot = i;
                    break;
                }
            }
            if (slot != UINT32_MAX && svc->cfg.on_client_expired) {
                const char *name = svc->segs[slot]->name;
                size_t j = 0;
                while (j < nnames && strcmp(names[j], name) != 0)
                    j++;
                if (j == nnames) {
                    char **t = realloc(names, (nnames + 1) * sizeof(*t));
                    if (!t || !(t[nnames] = strdup(name)))
                        abort();
                    names = t;
                    nnames++;
                }
            }
            pthread_rwlock_unlock(&svc->seg_lock);
            if (slot == UINT32_MAX)
                break;
            unmount_finish(svc, slot);
        }
        if (svc->cfg.on_client_expired)
            svc->cfg.on_client_expired(svc->cfg.on_client_expired_ctx, dead[k],
                                       (const char *const *)names, nnames);
        for (size_t j = 0; j < nnames; j++)
            free(names[j]);
        free(names);
    }
    free(dead);
}

static void release_stale_puts(mc_master_service *svc)
{
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc);
        while (sh->proc.head && now - sh->proc.head->atime >= svc->release_ms) {
            obj_erase(svc, sh, sh->proc.head);
            cadd(&svc->put_released, 1);
        }
        pthread_mutex_unlock(&sh->mu);
    }
}

static void sweep_soft_pins(mc_master_service *svc)
{
    uint32_t n = svc->nshards < SOFT_SWEEP_SHARDS ? svc->nshards : SOFT_SWEEP_SHARDS;
    for (uint32_t k = 0; k < n; k++) {
        shard *sh = &svc->shards[svc->sweep_pos++ & (svc->nshards - 1)];
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc);
        for (obj *o = sh->soft.head; o; o = o->next)
            if ((o->flags & F_SOFT) && o->pin <= now)
                set_soft(svc, o, false);
        pthread_mutex_unlock(&sh->mu);
    }
}

void mc_master_service_tick(mc_master_service *svc)
{
    defer_reap(svc, now_ms(svc));
    expire_clients(svc, now_ms(svc));
    release_stale_puts(svc);
    sweep_soft_pins(svc);
    uint64_t cap = cget(&svc->capacity);
    bool need = atomic_exchange(&svc->need_evict, false) && svc->cfg.eviction_ratio > 0;
    bool over = cap && (double)cget(&svc->allocated) >
                           svc->cfg.eviction_high_watermark_ratio * (double)cap;
    if (need || over)
        mc_master_service_evict(svc, 0);
}

/* ---- stats and admin ---- */

void mc_master_service_get_stats(mc_master_service *svc, mc_master_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->allocated_bytes = cget(&svc->allocated);
    out->total_capacity_bytes = cget(&svc->capacity);
    out->key_count = cget(&svc->keys);
    out->soft_pin_key_count = cget(&svc->soft_keys);
    out->processing_key_count = cget(&svc->proc_keys);
    out->processing_bytes = cget(&svc->proc_bytes);
    pthread_mutex_lock(&svc->client_mu);
    out->active_clients = svc->nclients;
    pthread_mutex_unlock(&svc->client_mu);
    pthread_rwlock_rdlock(&svc->seg_lock);
    out->segment_count = svc->nmounted;
    pthread_rwlock_unlock(&svc->seg_lock);
    for (int i = 0; i < MC_MASTER_OP_COUNT; i++) {
        out->requests[i] = cget(&svc->requests[i]);
        out->failures[i] = cget(&svc->failures[i]);
    }
    for (int i = 0; i < MC_MASTER_BATCH_COUNT; i++) {
        out->batch[i].requests = cget(&svc->batch[i].requests);
        out->batch[i].failures = cget(&svc->batch[i].failures);
        out->batch[i].partial_successes = cget(&svc->batch[i].partial);
        out->batch[i].items = cget(&svc->batch[i].items);
        out->batch[i].failed_items = cget(&svc->batch[i].failed_items);
    }
    out->put_start_alloc_failures = cget(&svc->alloc_failures);
    out->put_start_partial_allocations = cget(&svc->partial_allocs);
    out->eviction_attempts = cget(&svc->evict_attempts);
    out->eviction_successes = cget(&svc->evict_successes);
    out->evicted_keys = cget(&svc->evicted_keys);
    out->evicted_bytes = cget(&svc->evicted_bytes);
    out->put_discarded = cget(&svc->put_discarded);
    out->put_released = cget(&svc->put_released);
    out->clients_expired = cget(&svc->clients_expired);
    out->deferred_free_keys = cget(&svc->defer_keys);
    out->deferred_free_bytes = cget(&svc->defer_bytes);
    for (int i = 0; i < MC_MASTER_VALUE_SIZE_BUCKETS; i++) {
        out->value_size_buckets[i] = cget(&svc->vsize[i]);
        out->value_size_count += out->value_size_buckets[i];
    }
    out->value_size_sum = cget(&svc->vsize_sum);
}

size_t mc_master_service_foreach_segment(mc_master_service *svc, mc_master_segment_cb cb,
                                         void *ctx)
{
    size_t n = 0;
    pthread_rwlock_rdlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *s = svc->segs[i];
        if (!s || s->unmounting)
            continue;
        n++;
        mc_master_segment_info info = {
            .id = s->id,
            .client_id = s->client,
            .name = s->name,
            .te_endpoint = s->endpoint,
            .protocol = s->protocol,
            .host_id = s->host_id,
            .base = s->base,
            .size = s->size,
            .used = cget(&s->used),
        };
        if (cb && cb(&info, ctx))
            break;
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    return n;
}

size_t mc_master_service_foreach_key(mc_master_service *svc, mc_master_key_cb cb, void *ctx)
{
    size_t n = 0;
    bool stop = false;
    for (uint32_t i = 0; i < svc->nshards && !stop; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_lock(&sh->mu);
        for (uint32_t b = 0; b <= sh->mask && !stop; b++) {
            obj *o = slot_obj(sh->slots[b]);
            if (o) {
                n++;
                if (cb && cb(okey(o), o->key_len, o->size, !(o->flags & F_PROC), ctx))
                    stop = true;
            }
        }
        pthread_mutex_unlock(&sh->mu);
    }
    return n;
}

int mc_master_service_query_key(mc_master_service *svc, const void *key, size_t key_len,
                                mc_master_key_info *out)
{
    int rc = check_key(key, key_len);
    if (rc || !out)
        return rc ? rc : MC_INVALID_PARAMS;
    memset(out, 0, offsetof(mc_master_key_info, replicas));
    out->replicas.n = 0;
    out->replicas.lease_ttl_ms = 0;
    uint32_t h32;
    shard *sh = shard_of(svc, key_hash(svc, key, key_len), &h32);
    pthread_mutex_lock(&sh->mu);
    obj *o = ht_find(sh, h32, key, key_len);
    if (!o) {
        rc = MC_OBJECT_NOT_FOUND;
    } else {
        uint64_t now = now_ms(svc);
        out->size = o->size;
        out->complete = !(o->flags & F_PROC);
        out->hard_pinned = o->flags & F_HARD;
        if (leased(svc, o, now))
            out->lease_left_ms = o->atime + svc->lease_ttl - now;
        if ((o->flags & F_SOFT) && !(o->flags & F_SOFT_REL) && o->pin > now) {
            out->soft_pinned = true;
            out->soft_pin_left_ms = o->pin - now;
        } else if ((o->flags & F_SOFT) && (o->flags & F_SOFT_REL)) {
            out->soft_pinned = true; /* starts at put_end */
            out->soft_pin_left_ms = o->pin;
        }
        fill_list(svc, o,
                  out->complete ? MC_MASTER_REPLICA_COMPLETE : MC_MASTER_REPLICA_PROCESSING,
                  &out->replicas);
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}
