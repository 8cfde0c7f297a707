/* object_index.c: the object index of the master core: each shard's open-addressing
 * hash table, object records (one malloc each) and the gauges of objects entering and
 * leaving the index. It never touches segments or allocator space (space.c does) and
 * takes no lock itself: callers hold the shard mutex. Layout: master/internal.h. */
#include "master/internal.h"

#include "mooncake/log.h"

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

/* Stores s at its home or the first empty slot after it (the table has room). */
static void ht_place(uint64_t *slots, uint32_t m, uint64_t s, uint32_t home)
{
    uint32_t i = home;
    while (slots[i])
        i = (i + 1) & m;
    slots[i] = s;
}

/* Doubles the table. The new table is published with atomic stores because batch calls
 * read slots/mask without the lock to prefetch (ht_prefetch). */
static void ht_grow(shard *sh)
{
    uint32_t n = (sh->mask + 1) * 2, m = n - 1;
    uint64_t *t = mc_xcalloc(n, sizeof(*t));
    for (uint32_t i = 0; i <= sh->mask; i++) {
        uint64_t s = sh->slots[i];
        if (s)
            ht_place(t, m, s, slot_home(s, m)); /* homes come from the tags: no obj reads */
    }
    free(sh->slots);
    __atomic_store_n(&sh->slots, t, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->mask, m, __ATOMIC_RELAXED);
}

void mc__ht_insert(shard *sh, obj *o)
{
    /* keep the load at or below 3/4; past 2^30 slots the table stops growing */
    if ((uint64_t)(sh->count + 1) * 4 > (uint64_t)(sh->mask + 1) * 3 && sh->mask < (1u << 30))
        ht_grow(sh);
    ht_place(sh->slots, sh->mask, slot_make(o), o->hash & sh->mask);
    sh->count++;
}

/* Removes o: its slot is refilled by shifting the rest of its cluster back (backward-shift
 * deletion, so lookups never need tombstones). */
void mc__ht_remove(shard *sh, obj *o)
{
    uint32_t m = sh->mask, i = o->hash & m;
    while (slot_obj(sh->slots[i]) != o)
        i = (i + 1) & m;
    /* i is the hole; scan the rest of the cluster for an entry that may move into it */
    for (uint32_t j = i;;) {
        j = (j + 1) & m;
        uint64_t s = sh->slots[j];
        if (!s)
            break;
        /* s may fill the hole at i unless its home lies cyclically in (i, j] */
        if (((j - slot_home(s, m)) & m) >= ((j - i) & m)) {
            sh->slots[i] = s;
            i = j; /* s's old slot is the new hole */
        }
    }
    sh->slots[i] = 0;
    sh->count--;
}

void mc__objvec_push(objvec *ov, obj *o)
{
    if (ov->n == ov->cap) {
        ov->cap = ov->cap ? ov->cap * 2 : 64;
        ov->v = mc_xrealloc(ov->v, ov->cap * sizeof(*ov->v));
    }
    ov->v[ov->n++] = o;
}

obj *mc__obj_new(uint32_t nrep, const void *key, size_t len, uint32_t h32)
{
    obj *o = mc_xmalloc(sizeof(obj) + nrep * sizeof(rep) + len);
    if ((uintptr_t)o & ~SLOT_PTR) { /* the hash table keeps a tag in the top 16 bits */
        mc_log(MC_LOG_ERROR, TAG, "heap address %p above 2^48: unsupported platform", o);
        abort();
    }
    memset(o, 0, sizeof(obj));
    mc_list_init(&o->link);
    o->nrep = (uint8_t)nrep;
    o->key_len = (uint16_t)len;
    o->hash = h32;
    memcpy(okey(o), key, len); /* the key sits after the replicas (see okey) */
    return o;
}

void mc__set_soft(mc_master_service *svc, obj *o, bool on)
{
    if (on && !(o->flags & F_SOFT)) {
        o->flags |= F_SOFT;
        cadd(&svc->soft_keys, 1);
    } else if (!on && (o->flags & F_SOFT)) {
        /* a pending pin (F_SOFT_REL) goes with it. The object stays in whichever list
         * holds it; the next relink puts it in the LRU list. */
        o->flags &= (uint8_t)~(F_SOFT | F_SOFT_REL);
        csub(&svc->soft_keys, 1);
    }
}

void mc__account_gone(mc_master_service *svc, obj *o)
{
    csub(&svc->keys, 1);
    if (o->flags & F_SOFT)
        csub(&svc->soft_keys, 1);
    if (o->flags & F_PROC) {
        csub(&svc->proc_keys, 1);
        csub(&svc->proc_bytes, obj_bytes(o));
    }
}
