/* managed.c: allocate_managed_buffer / free_managed_buffer (upstream: a buddy allocator
 * over 2 GiB registered chunks with size classes 8 KiB..256 MiB). Here: power-of-two
 * classes 4 KiB..64 MiB carved from 256 MiB memfd chunks (sparse: pages cost memory
 * only when touched), so every managed buffer is on the same-host path; larger requests
 * get their own memfd region. Freed blocks go to their class's free list. Live blocks
 * are tracked in a hash table, so a bad free is refused, never trusted. */
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "mooncake/status.h"
#include "transfer/internal.h"

#define CHUNK (256ull << 20)
#define MIN_SHIFT 12
#define MAX_SHIFT 26
#define NCLASS (MAX_SHIFT - MIN_SHIFT + 1)
#define MAX_MANAGED (1ull << 40)

typedef struct mchunk {
    mc_list link; /* in te_managed.chunks */
    uint64_t base, used;
} mchunk;

typedef struct vec {
    uint64_t *v;
    size_t n, cap;
} vec;

typedef struct block {
    uint64_t addr; /* 0 = empty, 1 = tombstone */
    uint64_t len;  /* class size, or the dedicated region's length */
    int cls;       /* -1 = dedicated region */
} block;

struct te_managed {
    mc_list chunks; /* mchunk.link, newest first */
    vec free[NCLASS];
    block *tab;
    size_t cap, used; /* used counts live + tombstones */
};

static size_t hash(uint64_t a, size_t cap)
{
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdULL;
    a ^= a >> 33;
    return (size_t)a & (cap - 1);
}

static void tab_put(struct te_managed *m, block b);

static void tab_grow(struct te_managed *m)
{
    block *old = m->tab;
    size_t oc = m->cap;
    m->cap = oc ? oc * 2 : 256;
    m->tab = mc_xcalloc(m->cap, sizeof *m->tab);
    m->used = 0;
    for (size_t i = 0; i < oc; i++)
        if (old[i].addr > 1)
            tab_put(m, old[i]);
    free(old);
}

static void tab_put(struct te_managed *m, block b)
{
    if ((m->used + 1) * 2 > m->cap)
        tab_grow(m);
    size_t i = hash(b.addr, m->cap);
    while (m->tab[i].addr > 1)
        i = (i + 1) & (m->cap - 1);
    if (m->tab[i].addr == 0)
        m->used++;
    m->tab[i] = b;
}

static block *tab_find(struct te_managed *m, uint64_t addr)
{
    if (!m->cap)
        return NULL;
    size_t i = hash(addr, m->cap);
    while (m->tab[i].addr != 0) {
        if (m->tab[i].addr == addr)
            return &m->tab[i];
        i = (i + 1) & (m->cap - 1);
    }
    return NULL;
}

static struct te_managed *get(mc_te *te)
{
    if (!te->managed) {
        te->managed = mc_xcalloc(1, sizeof *te->managed);
        mc_list_init(&te->managed->chunks);
    }
    return te->managed;
}

int mc_te_allocate_managed_buffer(mc_te *te, size_t length, void **out)
{
    if (!te || !out || length == 0 || length > MAX_MANAGED || !te->initialized)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&te->managed_lock);
    struct te_managed *m = get(te);
    int rc = MC_OK;
    if (length > (1ull << MAX_SHIFT)) {
        void *p;
        rc = mc__te_shared_create(te, length, TE_REG_SHARED, &p);
        if (rc == MC_OK) {
            tab_put(m, (block){.addr = (uint64_t)(uintptr_t)p, .len = length, .cls = -1});
            *out = p;
        }
        pthread_mutex_unlock(&te->managed_lock);
        return rc;
    }
    int cls = 0;
    while ((1ull << (MIN_SHIFT + cls)) < length)
        cls++;
    uint64_t size = 1ull << (MIN_SHIFT + cls), addr = 0;
    vec *fl = &m->free[cls];
    if (fl->n) {
        addr = fl->v[--fl->n];
    } else {
        mchunk *c;
        MC_LIST_FOREACH_ENTRY(c, &m->chunks, mchunk, link) {
            if (CHUNK - c->used >= size) {
                addr = c->base + c->used;
                c->used += size;
                break;
            }
        }
        if (!addr) {
            void *p;
            rc = mc__te_shared_create(te, CHUNK, TE_REG_MANAGED_CHUNK, &p);
            if (rc != MC_OK) {
                pthread_mutex_unlock(&te->managed_lock);
                return rc;
            }
            c = mc_xcalloc(1, sizeof *c);
            c->base = (uint64_t)(uintptr_t)p;
            c->used = size;
            mc_list_push_front(&m->chunks, &c->link);
            addr = c->base;
        }
    }
    tab_put(m, (block){.addr = addr, .len = size, .cls = cls});
    pthread_mutex_unlock(&te->managed_lock);
    *out = (void *)(uintptr_t)addr;
    return MC_OK;
}

int mc_te_free_managed_buffer(mc_te *te, void *addr, size_t length)
{
    if (!te || !addr || !te->initialized)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&te->managed_lock);
    struct te_managed *m = get(te);
    block *b = tab_find(m, (uint64_t)(uintptr_t)addr);
    bool ok = b && (b->cls < 0 ? length == b->len || length == 0
                               : length <= b->len && (length == 0 || length > b->len / 2 ||
                                                      b->cls == 0));
    if (!ok) {
        pthread_mutex_unlock(&te->managed_lock);
        return MC_INVALID_PARAMS;
    }
    block blk = *b;
    b->addr = 1; /* tombstone */
    int rc = MC_OK;
    if (blk.cls < 0) {
        rc = mc__te_shared_destroy(te, addr, TE_REG_SHARED);
    } else {
        vec *fl = &m->free[blk.cls];
        if (fl->n == fl->cap) {
            fl->cap = fl->cap ? fl->cap * 2 : 64;
            fl->v = mc_xrealloc(fl->v, fl->cap * sizeof *fl->v);
        }
        fl->v[fl->n++] = blk.addr;
    }
    pthread_mutex_unlock(&te->managed_lock);
    return rc;
}

/* Chunks and dedicated regions are freed with the region table. */
void mc__te_managed_free_all(mc_te *te)
{
    struct te_managed *m = te->managed;
    if (!m)
        return;
    mc_list *it;
    while ((it = mc_list_pop_front(&m->chunks)))
        free(MC_CONTAINER_OF(it, mchunk, link));
    for (int i = 0; i < NCLASS; i++)
        free(m->free[i].v);
    free(m->tab);
    free(m);
    te->managed = NULL;
}
