/* placement.c: choosing segments for a new object's replicas and reserving their space
 * (upstream AllocationStrategy: random, free-ratio-first; preferred segments first). It
 * only takes space (space.c gives it back) and never changes the slot table; callers
 * hold seg_lock for reading. Layout and locks: master/internal.h. */
#include "master/internal.h"

static _Thread_local uint64_t rng_state;

uint64_t mc__rng(void)
{
    uint64_t x = rng_state;
    if (!x) /* first use on this thread: seed from the clock and the thread's storage */
        x = (mc_now_ns() ^ (uint64_t)(uintptr_t)&rng_state) | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 2685821657736338717ull;
}

/* Replicas go to distinct segment names (one name per store process, which may mount
 * several segments): true when s's name already holds a replica of this object. */
static bool name_taken(const alloc_ctx *c, const seg *s)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->chosen[i]->name_hash == s->name_hash && !strcmp(c->chosen[i]->name, s->name))
            return true;
    return false;
}

/* Tries one replica on slot; true when it was placed there. */
static bool try_slot(mc_master_service *svc, alloc_ctx *c, uint32_t slot)
{
    seg *s = svc->segs[slot];
    if (!s || s->unmounting || s->pending || name_taken(c, s))
        return false;
    rep r = {slot, MC__ALLOC_NONE, s->base}; /* a zero-size replica sits at the base */
    if (c->size) {
        if (s->capacity < c->size)
            return false; /* too small even when empty: eviction would not help here */
        c->could_fit = true;
        pthread_mutex_lock(&s->mu);
        r.handle = mc__alloc_alloc(s->alloc, c->size, &r.addr);
        uint64_t b = r.handle != MC__ALLOC_NONE ? mc__alloc_block_size(s->alloc, r.handle) : 0;
        pthread_mutex_unlock(&s->mu);
        if (r.handle == MC__ALLOC_NONE)
            return false; /* full (or fragmented) now: the caller may evict and retry */
        cadd(&s->used, b); /* block size: what the allocator really reserved */
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

/* qsort order: highest free ratio first. */
static int ratio_cmp(const void *a, const void *b)
{
    double x = ((const ratio_slot *)a)->free_ratio, y = ((const ratio_slot *)b)->free_ratio;
    return x < y ? 1 : x > y ? -1 : 0;
}

void mc__place_locked(mc_master_service *svc, alloc_ctx *c, const mc_master_put_config *cfg,
                      mc_master_strategy strategy)
{
    uint32_t ns = svc->nslots;
    /* 1. preferred segments, by name, in the caller's order (one replica each) */
    for (size_t p = 0; p < cfg->n_preferred && c->n < c->want; p++) {
        const char *name = cfg->preferred_segments[p];
        uint64_t h = XXH3_64bits(name, strlen(name));
        for (uint32_t i = 0; i < ns; i++) {
            const seg *s = svc->segs[i];
            if (s && s->name_hash == h && !strcmp(s->name, name) && try_slot(svc, c, i))
                break;
        }
    }
    /* 2. free-ratio-first: sample 6 candidates per missing replica from a random start
     * (not the whole table: placement stays O(replicas)), emptiest first */
    if (c->n < c->want && ns && strategy == MC_MASTER_STRATEGY_FREE_RATIO_FIRST) {
        ratio_slot cand[6 * MC_MASTER_MAX_REPLICAS];
        uint32_t m = 6 * (c->want - c->n), k = 0;
        uint32_t start = (uint32_t)(mc__rng() % ns);
        for (uint32_t i = 0; i < ns && k < m; i++) {
            uint32_t slot = (start + i) % ns;
            const seg *s = svc->segs[slot];
            if (!s || s->unmounting || s->pending || !s->capacity)
                continue;
            cand[k].free_ratio = 1.0 - (double)cget((counter *)&s->used) / (double)s->capacity;
            cand[k++].slot = slot;
        }
        qsort(cand, k, sizeof(cand[0]), ratio_cmp);
        for (uint32_t i = 0; i < k && c->n < c->want; i++)
            try_slot(svc, c, cand[i].slot);
    }
    /* 3. random (and the fallback of the others): every slot once from a random start */
    if (c->n < c->want && ns) {
        uint32_t start = (uint32_t)(mc__rng() % ns);
        for (uint32_t i = 0; i < ns && c->n < c->want; i++)
            try_slot(svc, c, (start + i) % ns);
    }
}
