/* evict.c: approximate-LRU eviction across shards and the watermark rule (upstream
 * BatchEvict, upstream-mooncake.md §4.5). It decides which complete objects go; space.c
 * gives their space back. It never evicts objects in flight, hard-pinned, zero-size or
 * under an active read lease. Layout and locks: master/internal.h.
 *
 * Algorithm: sample up to EVICT_SAMPLE eligible objects from the head (oldest end) of
 * every shard's lists, sort the samples by last access, pick the access-time cutoff whose
 * older samples add up to the bytes still wanted, then evict, shard by shard, every
 * eligible object at or below the cutoff until the target is met; repeat while short and
 * progressing. The first phase never takes soft-pinned objects; the second (only when
 * allowed and still short) takes them too. */
#include "master/internal.h"

#define EVICT_SAMPLE 8    /* eligible objects sampled per shard list per round */
#define EVICT_SKIP_MAX 64 /* ineligible objects skipped per list while sampling */
#define EVICT_ROUNDS 64   /* sampling rounds per phase */

/* 0: not evictable; 1: ordinary candidate; 2: soft-pinned candidate. Clears lapsed soft
 * pins on the way. Caller holds the shard lock. */
static int evict_class(mc_master_service *svc, obj *o, uint64_t now)
{
    if ((o->flags & (F_PROC | F_HARD | F_OFFQ)) || o->size == 0 || o->nrep == 0 ||
        leased(svc, o, now))
        return 0; /* (F_OFFQ: waiting for its offload to the disk tier, offload.c) */
    if (o->flags & F_SOFT) {
        if (o->pin > now)
            return 2;
        mc__set_soft(svc, o, false); /* lapsed: an ordinary candidate now */
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

/* Appends up to EVICT_SAMPLE candidates from the oldest end of list l to out. */
static void sample_list(mc_master_service *svc, mc_list *l, int phase, uint64_t now,
                        sample *out, size_t *n)
{
    int taken = 0, skipped = 0;
    /* bounded skipping: a head clogged with leased objects must not make a round O(n) */
    for (mc_list *it = l->next; it != l && taken < EVICT_SAMPLE && skipped < EVICT_SKIP_MAX;
         it = it->next) {
        obj *o = obj_of(it);
        if (accept(evict_class(svc, o, now), phase)) {
            out[(*n)++] = (sample){o->atime, obj_bytes(o)};
            taken++;
        } else {
            skipped++;
        }
    }
}

/* Evicts accepted objects from the oldest end of l while their access time is at or
 * below cutoff, until `want` bytes went. Returns the bytes freed. */
static uint64_t evict_list(mc_master_service *svc, shard *sh, mc_list *l, int phase,
                           uint64_t now, uint64_t cutoff, uint64_t want)
{
    uint64_t freed = 0, keys = 0;
    mc_list *it = l->next;
    while (it != l && freed < want) {
        obj *o = obj_of(it);
        if (o->atime > cutoff)
            break; /* the list is ordered by access time: the rest is newer */
        mc_list *next = it->next; /* o may be freed below */
        if (accept(evict_class(svc, o, now), phase)) {
            uint64_t got = 0;
            /* the disk tier may keep the object: offloaded (memory dropped, record kept
             * disk-only) or an offload queued (kept in memory until it is on disk) */
            if (mc__offload_evict(svc, sh, o, &got)) {
                freed += got;
                keys += got != 0;
            } else {
                freed += obj_bytes(o);
                keys++;
                mc__obj_erase(svc, sh, o, MC__SPACE_EVICTED);
            }
        }
        it = next;
    }
    cadd(&svc->evicted_keys, keys);
    return freed;
}

/* One eviction phase: 1 = ordinary candidates (the LRU lists, and lapsed pins in the
 * soft lists); 2 = everything evictable in the soft lists, pinned or not. */
static uint64_t evict_phase(mc_master_service *svc, int phase, uint64_t target)
{
    size_t cap = (size_t)svc->nshards * 2 * EVICT_SAMPLE; /* two lists per shard */
    sample *samples = mc_xmalloc(cap * sizeof(*samples));
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
            break; /* nothing evictable anywhere */
        /* the cutoff: the access time by which the oldest samples cover what is missing
         * (all samples when they do not) */
        qsort(samples, n, sizeof(*samples), sample_cmp);
        uint64_t acc = 0, cutoff = samples[n - 1].atime;
        for (size_t i = 0; i < n; i++) {
            acc += samples[i].bytes;
            if (acc >= target - freed) {
                cutoff = samples[i].atime;
                break;
            }
        }
        /* evict up to the cutoff, starting at a random shard so no shard is always
         * emptied first */
        uint64_t got = 0;
        uint32_t start = (uint32_t)(mc__rng() % svc->nshards);
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
            break; /* no progress (e.g. the sampled objects were leased meanwhile) */
    }
    free(samples);
    return freed;
}

uint64_t mc__evict_locked(mc_master_service *svc, uint64_t target)
{
    cadd(&svc->evict_attempts, 1);
    uint64_t freed = evict_phase(svc, 1, target);
    if (freed < target && svc->cfg.allow_evict_soft_pinned_objects)
        freed += evict_phase(svc, 2, target - freed);
    if (freed)
        cadd(&svc->evict_successes, 1);
    cadd(&svc->evicted_bytes, freed);
    atomic_fetch_add(&svc->evict_gen, 1); /* lets a put that failed see a pass ran */
    return freed;
}

uint64_t mc__evict_prefetch_locked(mc_master_service *svc, uint64_t target)
{
    return evict_phase(svc, 1, target); /* mc__offload_evict sees svc->off's prefetch */
}

/* The watermark rule (upstream BatchEvict, §4.5): free max(ratio, used - hw + ratio) of
 * the capacity. */
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
    uint64_t freed = bytes ? mc__evict_locked(svc, bytes) : 0;
    pthread_mutex_unlock(&svc->evict_mu);
    return freed;
}
