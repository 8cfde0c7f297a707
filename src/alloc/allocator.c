/* allocator.c: see allocator.h. Two-level segregated fit over granules (alignment units).
 *
 * Size class of g granules (g >= 1):
 *   g < SL_COUNT:  fl = 0, sl = g                        (exact small classes)
 *   otherwise:     f = floor(log2 g), fl = f - SL_BITS + 1,
 *                  sl = (g >> (f - SL_BITS)) - SL_COUNT
 * Placement (MC__ALLOC_FIT_NEAR, the default; find_near): an exact fit; else the
 * lowest-addressed block of g..g+g/NEAR_DIV granules among the first NEAR_SCAN blocks of
 * each class that range covers; else the best fit, the smallest among the first
 * NEAR_SCAN blocks of the first class above it. Preferring low addresses among near fits
 * packs live blocks towards the segment's start and lets the free space at higher
 * addresses merge into large holes; taking a larger block only as the best fit keeps the
 * large holes that the large requests (the ones that fail first under churn) need whole.
 * bench_allocator (steady churn: fill until a failure, free 5% at random, repeat;
 * log-uniform 4 KiB..32 MiB), in use at the failure, 16 GiB / 64 GiB segment: class fit
 * 90.6% / 94.3%, low-address fit 92.9% / 96.2%, near fit 94.4% / 96.5%. At the failure
 * (near fit, 16 GiB) the failing request is 16-32 MiB in 95% of the failures and the free
 * space lies in holes of 1-32 MiB (80% of it), each smaller than that request: a
 * matching limit (freed holes and new requests come from the same size distribution),
 * not unmerged neighbours. Measured with an exhaustive scan (every free block) and no
 * better than near fit: the near range at g/32, g/16, g/8, g/5, g/2 (93.7, 94.5, 94.4,
 * 94.0, 92.1%), plain best fit (90.6%), address-ordered first fit (91.5%), large
 * requests from the top end of the segment or of the hole (91.9-94.6%), the remainder next
 * to the larger or smaller neighbour (94.4, 94.7%), the largest hole when it stays
 * >= 32 MiB (94.5%); earlier: size-class rounding, two-ended placement (<= 91.5%).
 * MC__ALLOC_FIT_LOW_ADDRESS (the previous default, kept for comparison): a block of
 * exactly g granules among the first EXACT_SCAN_MAX blocks of g's own class; else the
 * lowest-addressed block that fits among those; else the lowest-addressed among the
 * first LOW_SCAN blocks of each of the next LOW_CLASSES non-empty higher classes.
 * MC__ALLOC_FIT_CLASS (the placement before issue 17, kept for comparison): the best fit
 * among the first EXACT_SCAN_MAX blocks of g's own class, else the head of the first
 * non-empty higher class ("good fit", two bit scans).
 */
#include "alloc/allocator.h"

#include "common/xalloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SL_BITS 5
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 64
#define USED_BIT (1ull << 63)
#define EXACT_SCAN_MAX 64 /* blocks examined in the request's own class */
#define LOW_CLASSES 2     /* higher classes examined for the lowest address */
#define LOW_SCAN 8        /* blocks examined in each of them */
#define NEAR_DIV 10       /* near fit: at most g + g/NEAR_DIV granules */
#define NEAR_SCAN 4       /* near fit: blocks examined per class */

typedef struct node {
    uint64_t off;  /* granules from the aligned base */
    uint64_t size; /* granules; USED_BIT set while allocated */
    uint32_t prev_phys, next_phys; /* neighbours by address, MC__ALLOC_NONE at the ends */
    uint32_t prev_free, next_free; /* class list links (free blocks); pool free stack */
} node;

struct mc__alloc {
    uint64_t base;     /* aligned base address */
    uint64_t granules; /* usable capacity in granules */
    uint32_t shift;    /* log2(alignment) */
    uint64_t used;     /* granules allocated */
    size_t n_free, n_used;
    uint64_t fl_bitmap;
    uint32_t sl_bitmap[FL_COUNT];
    uint32_t heads[FL_COUNT][SL_COUNT];
    node *nodes;
    uint32_t nodes_len, nodes_cap;
    uint32_t pool_free; /* stack of recycled node indices, linked by next_free */
    int fit;            /* MC__ALLOC_FIT_* */
};

static inline unsigned fls64(uint64_t x) /* index of the highest set bit; x != 0 */
{
    return 63u - (unsigned)__builtin_clzll(x);
}

static inline void mapping(uint64_t g, unsigned *fl, unsigned *sl)
{
    if (g < SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)g;
    } else {
        unsigned f = fls64(g);
        *fl = f - SL_BITS + 1;
        *sl = (unsigned)(g >> (f - SL_BITS)) - SL_COUNT;
    }
}

static uint32_t node_new(mc__alloc *a)
{
    if (a->pool_free != MC__ALLOC_NONE) {
        uint32_t i = a->pool_free;
        a->pool_free = a->nodes[i].next_free;
        return i;
    }
    if (a->nodes_len == a->nodes_cap) {
        uint32_t cap = a->nodes_cap ? a->nodes_cap + a->nodes_cap / 2 : 64;
        MC_ASSERT(cap > a->nodes_cap && cap < MC__ALLOC_NONE); /* 4 billion blocks */
        a->nodes = mc_xrealloc(a->nodes, (size_t)cap * sizeof(node));
        a->nodes_cap = cap;
    }
    return a->nodes_len++;
}

static void node_release(mc__alloc *a, uint32_t i)
{
    a->nodes[i].size = 0;
    a->nodes[i].next_free = a->pool_free;
    a->pool_free = i;
}

static void free_insert(mc__alloc *a, uint32_t i)
{
    node *n = &a->nodes[i];
    unsigned fl, sl;
    mapping(n->size, &fl, &sl);
    uint32_t head = a->heads[fl][sl];
    n->prev_free = MC__ALLOC_NONE;
    n->next_free = head;
    if (head != MC__ALLOC_NONE)
        a->nodes[head].prev_free = i;
    a->heads[fl][sl] = i;
    a->fl_bitmap |= 1ull << fl;
    a->sl_bitmap[fl] |= 1u << sl;
    a->n_free++;
}

static void free_remove(mc__alloc *a, uint32_t i)
{
    node *n = &a->nodes[i];
    unsigned fl, sl;
    mapping(n->size, &fl, &sl);
    if (n->prev_free != MC__ALLOC_NONE)
        a->nodes[n->prev_free].next_free = n->next_free;
    else
        a->heads[fl][sl] = n->next_free;
    if (n->next_free != MC__ALLOC_NONE)
        a->nodes[n->next_free].prev_free = n->prev_free;
    if (a->heads[fl][sl] == MC__ALLOC_NONE) {
        a->sl_bitmap[fl] &= ~(1u << sl);
        if (!a->sl_bitmap[fl])
            a->fl_bitmap &= ~(1ull << fl);
    }
    a->n_free--;
}

mc__alloc *mc__alloc_create(uint64_t base, uint64_t size, uint32_t align)
{
    if (align == 0 || align > 4096 || (align & (align - 1)))
        return NULL;
    if (size > UINT64_MAX - base)
        return NULL;
    mc__alloc *a = mc_xcalloc(1, sizeof(*a));
    a->shift = (uint32_t)__builtin_ctz(align);
    uint64_t end = base + size;
    uint64_t abase = (base + (align - 1)) & ~(uint64_t)(align - 1);
    if (abase < base) /* rounding overflowed */
        abase = end;
    a->base = abase;
    a->granules = abase < end ? (end - abase) >> a->shift : 0;
    memset(a->heads, 0xff, sizeof(a->heads));
    a->pool_free = MC__ALLOC_NONE;
    a->fit = MC__ALLOC_FIT_NEAR;
    if (a->granules) {
        uint32_t i = node_new(a);
        node *n = &a->nodes[i];
        n->off = 0;
        n->size = a->granules;
        n->prev_phys = n->next_phys = MC__ALLOC_NONE;
        free_insert(a, i);
    }
    return a;
}

int mc__alloc_set_fit(mc__alloc *a, int fit)
{
    if (fit != MC__ALLOC_FIT_LOW_ADDRESS && fit != MC__ALLOC_FIT_CLASS && fit != MC__ALLOC_FIT_NEAR)
        return -EINVAL;
    a->fit = fit;
    return 0;
}

void mc__alloc_destroy(mc__alloc *a)
{
    if (!a)
        return;
    free(a->nodes);
    free(a);
}

/* The next non-empty class at or above (*fl, sl-bits in *bm): advances *fl and *bm to
 * it and returns its second-level index, or -1 when there is none. *bm holds the
 * not-yet-visited second-level bits of *fl. */
static int next_class(const mc__alloc *a, unsigned *fl, uint32_t *bm)
{
    if (!*bm) {
        uint64_t fb = *fl + 1 < FL_COUNT ? a->fl_bitmap & (~0ull << (*fl + 1)) : 0;
        if (!fb)
            return -1;
        *fl = (unsigned)__builtin_ctzll(fb);
        *bm = a->sl_bitmap[*fl];
    }
    int sl = __builtin_ctz(*bm);
    *bm &= *bm - 1;
    return sl;
}

/* MC__ALLOC_FIT_NEAR: the lowest-addressed block of g..g+g/NEAR_DIV granules among the
 * first NEAR_SCAN blocks of each class that can hold such a block (an exact fit at
 * once); else the best fit: the smallest block among the first NEAR_SCAN of the first
 * class above those that holds a block of at least g (the lowest address on a tie);
 * else (no larger class) the lowest-addressed fitting block among the first
 * EXACT_SCAN_MAX of g's own class, as far as the other placements look. */
static uint32_t find_near(const mc__alloc *a, uint64_t g)
{
    unsigned fl, sl, lfl, lsl;
    mapping(g, &fl, &sl);
    if (fl >= FL_COUNT)
        return MC__ALLOC_NONE;
    uint64_t limit = g + g / NEAR_DIV;
    mapping(limit, &lfl, &lsl);
    uint32_t near = MC__ALLOC_NONE, fit = MC__ALLOC_NONE;
    uint64_t near_off = UINT64_MAX, fit_size = UINT64_MAX, fit_off = UINT64_MAX;
    uint32_t bm = a->sl_bitmap[fl] & (~0u << sl);
    int c;
    while ((c = next_class(a, &fl, &bm)) >= 0) {
        bool beyond = fl > lfl || (fl == lfl && (unsigned)c > lsl);
        if (beyond && (near != MC__ALLOC_NONE || fit != MC__ALLOC_NONE))
            break;
        uint32_t i = a->heads[fl][c];
        for (int k = 0; i != MC__ALLOC_NONE && k < NEAR_SCAN; k++) {
            const node *n = &a->nodes[i];
            if (n->size == g)
                return i;
            if (n->size > g && n->size <= limit) {
                if (n->off < near_off) {
                    near = i;
                    near_off = n->off;
                }
            } else if (n->size > g && near == MC__ALLOC_NONE &&
                       (n->size < fit_size || (n->size == fit_size && n->off < fit_off))) {
                fit = i;
                fit_size = n->size;
                fit_off = n->off;
            }
            i = n->next_free;
        }
        if (beyond)
            break; /* the first class above the near range: the best fit is here */
    }
    if (near == MC__ALLOC_NONE && fit == MC__ALLOC_NONE) {
        /* only g's own class can still hold a fitting block (past the first NEAR_SCAN,
         * among smaller ones): look as far as the other placements do */
        mapping(g, &fl, &sl);
        uint32_t i = a->heads[fl][sl];
        for (int k = 0; i != MC__ALLOC_NONE && k < EXACT_SCAN_MAX; k++) {
            const node *n = &a->nodes[i];
            if (n->size >= g && n->off < near_off) {
                near = i;
                near_off = n->off;
            }
            i = n->next_free;
        }
    }
    return near != MC__ALLOC_NONE ? near : fit;
}

/* A free block of at least g granules, or NONE (placement: see the top of the file). */
static uint32_t find_block(const mc__alloc *a, uint64_t g)
{
    if (a->fit == MC__ALLOC_FIT_NEAR)
        return find_near(a, g);
    unsigned fl, sl;
    mapping(g, &fl, &sl);
    if (fl >= FL_COUNT)
        return MC__ALLOC_NONE;
    bool low = a->fit == MC__ALLOC_FIT_LOW_ADDRESS;
    if (a->sl_bitmap[fl] & (1u << sl)) {
        /* own class: exact size first; else best size (class fit) or lowest address */
        uint32_t best = MC__ALLOC_NONE, i = a->heads[fl][sl];
        uint64_t best_key = UINT64_MAX;
        for (int k = 0; i != MC__ALLOC_NONE && k < EXACT_SCAN_MAX; k++) {
            const node *n = &a->nodes[i];
            if (n->size == g)
                return i;
            uint64_t key = low ? n->off : n->size;
            if (n->size > g && key < best_key) {
                best = i;
                best_key = key;
            }
            i = n->next_free;
        }
        if (best != MC__ALLOC_NONE)
            return best;
    }
    if (++sl == SL_COUNT) {
        sl = 0;
        if (++fl >= FL_COUNT)
            return MC__ALLOC_NONE;
    }
    uint32_t bm = a->sl_bitmap[fl] & (~0u << sl);
    int c = next_class(a, &fl, &bm);
    if (c < 0)
        return MC__ALLOC_NONE;
    if (!low)
        return a->heads[fl][c];
    uint32_t best = MC__ALLOC_NONE;
    uint64_t best_off = UINT64_MAX;
    for (int classes = 0; c >= 0;) {
        uint32_t i = a->heads[fl][c];
        for (int k = 0; i != MC__ALLOC_NONE && k < LOW_SCAN; k++) {
            if (a->nodes[i].off < best_off) {
                best = i;
                best_off = a->nodes[i].off;
            }
            i = a->nodes[i].next_free;
        }
        if (++classes == LOW_CLASSES)
            break;
        c = next_class(a, &fl, &bm);
    }
    return best;
}

static inline uint64_t to_granules(const mc__alloc *a, uint64_t size)
{
    uint64_t mask = (1ull << a->shift) - 1;
    if (size > UINT64_MAX - mask)
        return UINT64_MAX;
    return (size + mask) >> a->shift;
}

/* Splits free block i (taken off its class list) at g granules: i keeps the first g,
 * a new free block (inserted) gets the rest. Returns i. */
static uint32_t split_front(mc__alloc *a, uint32_t i, uint64_t g)
{
    if (a->nodes[i].size > g) {
        uint32_t r = node_new(a); /* may move a->nodes */
        node *n = &a->nodes[i];
        node *rn = &a->nodes[r];
        rn->off = n->off + g;
        rn->size = n->size - g;
        rn->prev_phys = i;
        rn->next_phys = n->next_phys;
        if (n->next_phys != MC__ALLOC_NONE)
            a->nodes[n->next_phys].prev_phys = r;
        n->next_phys = r;
        n->size = g;
        free_insert(a, r);
    }
    return i;
}

uint32_t mc__alloc_alloc(mc__alloc *a, uint64_t size, uint64_t *addr)
{
    if (size == 0)
        return MC__ALLOC_NONE;
    uint64_t g = to_granules(a, size);
    if (g > a->granules - a->used)
        return MC__ALLOC_NONE;
    uint32_t i = find_block(a, g);
    if (i == MC__ALLOC_NONE)
        return MC__ALLOC_NONE;
    free_remove(a, i);
    split_front(a, i, g);
    node *n = &a->nodes[i];
    n->size |= USED_BIT;
    a->used += g;
    a->n_used++;
    if (addr)
        *addr = a->base + (n->off << a->shift);
    return i;
}


uint32_t mc__alloc_reserve(mc__alloc *a, uint64_t addr, uint64_t size, uint32_t *cursor)
{
    uint64_t mask = (1ull << a->shift) - 1;
    if (size == 0 || addr < a->base || ((addr - a->base) & mask))
        return MC__ALLOC_NONE;
    uint64_t goff = (addr - a->base) >> a->shift, g = to_granules(a, size);
    if (goff >= a->granules || g > a->granules - goff || !a->nodes_len)
        return MC__ALLOC_NONE;
    /* the block holding goff: from the cursor (a live block at or before it) or from the
     * first block (node 0 always holds offset 0: merges and splits keep the lower node) */
    uint32_t i = 0;
    if (cursor && *cursor < a->nodes_len && (a->nodes[*cursor].size & USED_BIT) &&
        a->nodes[*cursor].off <= goff)
        i = *cursor;
    while (i != MC__ALLOC_NONE &&
           a->nodes[i].off + (a->nodes[i].size & ~USED_BIT) <= goff)
        i = a->nodes[i].next_phys;
    if (i == MC__ALLOC_NONE || (a->nodes[i].size & USED_BIT) ||
        a->nodes[i].off + a->nodes[i].size < goff + g)
        return MC__ALLOC_NONE; /* overlaps an allocation */
    free_remove(a, i);
    uint64_t lead = goff - a->nodes[i].off;
    if (lead) { /* i keeps [off, goff) free; the rest becomes the block to take */
        split_front(a, i, lead);
        uint32_t r = a->nodes[i].next_phys;
        free_insert(a, i);
        free_remove(a, r);
        i = r;
    }
    split_front(a, i, g);
    node *n = &a->nodes[i];
    n->size |= USED_BIT;
    a->used += g;
    a->n_used++;
    if (cursor)
        *cursor = i;
    return i;
}

static inline bool live(const mc__alloc *a, uint32_t h)
{
    return h < a->nodes_len && (a->nodes[h].size & USED_BIT);
}

int mc__alloc_free(mc__alloc *a, uint32_t h)
{
    if (!live(a, h))
        return -EINVAL;
    node *n = &a->nodes[h];
    n->size &= ~USED_BIT;
    a->used -= n->size;
    a->n_used--;
    /* merge with the previous block */
    uint32_t p = n->prev_phys;
    if (p != MC__ALLOC_NONE && !(a->nodes[p].size & USED_BIT)) {
        free_remove(a, p);
        node *pn = &a->nodes[p];
        pn->size += n->size;
        pn->next_phys = n->next_phys;
        if (n->next_phys != MC__ALLOC_NONE)
            a->nodes[n->next_phys].prev_phys = p;
        node_release(a, h);
        h = p;
        n = pn;
    }
    /* merge with the next block */
    uint32_t x = n->next_phys;
    if (x != MC__ALLOC_NONE && !(a->nodes[x].size & USED_BIT)) {
        free_remove(a, x);
        node *xn = &a->nodes[x];
        n->size += xn->size;
        n->next_phys = xn->next_phys;
        if (xn->next_phys != MC__ALLOC_NONE)
            a->nodes[xn->next_phys].prev_phys = h;
        node_release(a, x);
    }
    free_insert(a, h);
    return 0;
}

bool mc__alloc_can_fit(const mc__alloc *a, uint64_t size)
{
    if (size == 0)
        return true;
    uint64_t g = to_granules(a, size);
    if (g > a->granules - a->used)
        return false;
    return find_block(a, g) != MC__ALLOC_NONE;
}

uint64_t mc__alloc_capacity(const mc__alloc *a)
{
    return a->granules << a->shift;
}

uint64_t mc__alloc_used(const mc__alloc *a)
{
    return a->used << a->shift;
}

uint64_t mc__alloc_free_bytes(const mc__alloc *a)
{
    return (a->granules - a->used) << a->shift;
}

uint64_t mc__alloc_block_size(const mc__alloc *a, uint32_t h)
{
    if (!live(a, h))
        return 0;
    return (a->nodes[h].size & ~USED_BIT) << a->shift;
}

size_t mc__alloc_free_blocks(const mc__alloc *a)
{
    return a->n_free;
}

size_t mc__alloc_used_blocks(const mc__alloc *a)
{
    return a->n_used;
}

uint64_t mc__alloc_largest_free(const mc__alloc *a)
{
    if (!a->fl_bitmap)
        return 0;
    unsigned fl = fls64(a->fl_bitmap);
    unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]);
    uint64_t best = 0;
    for (uint32_t i = a->heads[fl][sl]; i != MC__ALLOC_NONE; i = a->nodes[i].next_free)
        if (a->nodes[i].size > best)
            best = a->nodes[i].size;
    return best << a->shift;
}

int mc__alloc_check(const mc__alloc *a)
{
    if (a->granules == 0)
        return a->nodes_len == 0 && a->used == 0 ? 0 : -1;
    /* node 0 is the block at offset 0, for the allocator's whole life */
    uint32_t i = 0, prev = MC__ALLOC_NONE;
    uint64_t off = 0, used = 0;
    size_t nfree = 0, nused = 0;
    bool prev_free = false;
    while (i != MC__ALLOC_NONE) {
        if (i >= a->nodes_len)
            return -2;
        const node *n = &a->nodes[i];
        uint64_t sz = n->size & ~USED_BIT;
        bool is_used = n->size & USED_BIT;
        if (n->off != off || sz == 0)
            return -3; /* gap, overlap or empty block */
        if (n->prev_phys != prev)
            return -4;
        if (!is_used && prev_free)
            return -5; /* two adjacent free blocks: a merge was missed */
        if (is_used) {
            used += sz;
            nused++;
        } else {
            nfree++;
            unsigned fl, sl;
            mapping(sz, &fl, &sl);
            uint32_t j = a->heads[fl][sl];
            while (j != MC__ALLOC_NONE && j != i)
                j = a->nodes[j].next_free;
            if (j != i)
                return -6; /* free block missing from its class list */
        }
        prev_free = !is_used;
        off += sz;
        if (off > a->granules)
            return -7;
        prev = i;
        i = n->next_phys;
    }
    if (off != a->granules)
        return -8;
    if (used != a->used || nused != a->n_used || nfree != a->n_free)
        return -9;
    /* every class list entry is free and in the right class; bitmaps agree */
    size_t listed = 0;
    for (unsigned fl = 0; fl < FL_COUNT; fl++) {
        for (unsigned sl = 0; sl < SL_COUNT; sl++) {
            uint32_t j = a->heads[fl][sl], jp = MC__ALLOC_NONE;
            bool bit = (a->sl_bitmap[fl] >> sl) & 1;
            if (bit != (j != MC__ALLOC_NONE))
                return -10;
            for (; j != MC__ALLOC_NONE; jp = j, j = a->nodes[j].next_free) {
                const node *n = &a->nodes[j];
                unsigned f2, s2;
                if (n->size & USED_BIT)
                    return -11;
                mapping(n->size, &f2, &s2);
                if (f2 != fl || s2 != sl || n->prev_free != jp)
                    return -12;
                if (++listed > a->n_free)
                    return -13;
            }
        }
        if (((a->fl_bitmap >> fl) & 1) != (a->sl_bitmap[fl] != 0))
            return -14;
    }
    return listed == a->n_free ? 0 : -15;
}
