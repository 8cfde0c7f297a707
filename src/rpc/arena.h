/* rpc/arena.h: a bump allocator for protobuf-c (ProtobufCAllocator), header-only, shared
 * by the master's RPC handler and the client library. Decoding a request or reply then
 * costs no malloc in the steady state: free is a no-op and mc__arena_reset drops
 * everything at once. One arena per thread / connection (not thread-safe).
 * Memory handed out is bounded by what the caller asks for; decoders only ask in
 * proportion to the (already length-checked) input, but a body of empty sub-messages
 * expands ~40x into structs: set `limit` while decoding. Aborts on OOM (CONTRIBUTING.md). */
#ifndef MOONCAKE_RPC_ARENA_H
#define MOONCAKE_RPC_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct mc__arena_blk {
    struct mc__arena_blk *next;
    size_t cap, used;
    max_align_t data[]; /* cap bytes */
} mc__arena_blk;

typedef struct mc__arena {
    mc__arena_blk *head; /* the current block (first in the list) */
    size_t total;        /* bytes handed out since the last reset */
    size_t limit;        /* when non-zero, allocations past it fail (return NULL): set it
                            while decoding input, where protobuf-c handles NULL as a
                            decode error, to bound the memory a small body can claim */
} mc__arena;

#define MC__ARENA_MIN_BLOCK (64u << 10)
#define MC__ARENA_KEEP_MAX (16u << 20) /* largest block kept across resets */

static inline mc__arena_blk *mc__arena_blk_new(size_t cap, mc__arena_blk *next)
{
    mc__arena_blk *b = malloc(sizeof *b + cap);
    if (!b)
        abort();
    b->next = next;
    b->cap = cap;
    b->used = 0;
    return b;
}

/* mc__arena_alloc: size bytes, 16-byte aligned; NULL only past a->limit. */
static inline void *mc__arena_alloc(void *ctx, size_t size)
{
    mc__arena *a = ctx;
    if (size > SIZE_MAX / 2)
        return NULL;
    size = size ? (size + 15u) & ~(size_t)15u : 16u;
    if (a->limit && (a->total > a->limit || size > a->limit - a->total))
        return NULL;
    mc__arena_blk *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = b ? b->cap * 2 : MC__ARENA_MIN_BLOCK;
        while (cap < size)
            cap *= 2;
        b = a->head = mc__arena_blk_new(cap, b);
    }
    void *p = (uint8_t *)b->data + b->used;
    b->used += size;
    a->total += size;
    return p;
}

static inline void mc__arena_free(void *ctx, void *p)
{
    (void)ctx;
    (void)p;
}

/* mc__arena_reset: forgets every allocation; keeps one block as large as the last
 * round needed (at most MC__ARENA_KEEP_MAX) so the next round needs no malloc. */
static inline void mc__arena_reset(mc__arena *a)
{
    mc__arena_blk *b = a->head;
    if (!b)
        return;
    if (b->next) {
        size_t want = a->total > MC__ARENA_KEEP_MAX ? MC__ARENA_KEEP_MAX : a->total;
        while (b) {
            mc__arena_blk *n = b->next;
            free(b);
            b = n;
        }
        a->head = want > MC__ARENA_MIN_BLOCK ? mc__arena_blk_new(want, NULL) : NULL;
    } else {
        b->used = 0;
    }
    a->total = 0;
}

static inline void mc__arena_destroy(mc__arena *a)
{
    mc__arena_blk *b = a->head;
    while (b) {
        mc__arena_blk *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
    a->total = 0;
}

/* mc__arena_allocator: a ProtobufCAllocator over a (borrowed; must outlive it). */
static inline ProtobufCAllocator mc__arena_allocator(mc__arena *a)
{
    ProtobufCAllocator al = {mc__arena_alloc, mc__arena_free, a};
    return al;
}

#endif
