/* allocator.h: offset allocator for one mounted segment (metadata only).
 *
 * A two-level segregated-fit (TLSF-style) allocator over the address range
 * [base, base+size) of a segment that lives in another process: it hands out address
 * ranges and never touches the memory. Sizes are rounded up to the alignment (a power of
 * two, the "granule"); every returned address is a multiple of it.
 *
 * Structure: free blocks are kept in 64 x 32 size classes (first level = power of two,
 * second level = 32 linear steps inside it), each class a doubly-linked list, with one
 * bitmap per level, so finding a class with a large-enough block is two bit scans.
 * Blocks (free and used) are nodes of one pooled array, linked in address order, so a
 * free merges with its free neighbours at once (no fragmentation from unmerged
 * neighbours). No malloc per allocation: the node array grows geometrically.
 * alloc and free are O(1). alloc (the default "near fit"): an exact fit, else the
 * lowest-addressed block of at most size + size/10 (at most 4 blocks looked at in each
 * of the <= 8 classes that range covers), else the best fit (the smallest of at most 4
 * blocks of the next non-empty class; with none, up to 64 blocks of the request's own
 * class, as the other placements look): packing live blocks towards low addresses among
 * near fits lets the free space at higher addresses merge into the large holes that
 * large requests need under churn, and taking a larger block only as the best fit keeps
 * the large holes whole (allocator.c has the measurements; mc__alloc_set_fit selects
 * the two earlier placements for comparison).
 *
 * Upstream uses an offset allocator with the same role (`--memory_allocator=offset`,
 * upstream-mooncake.md §4.6); this is our own implementation.
 *
 * Threads: not thread-safe; the caller serialises (the master holds a per-segment lock).
 */
#ifndef MOONCAKE_ALLOC_ALLOCATOR_H
#define MOONCAKE_ALLOC_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC__ALLOC_NONE UINT32_MAX /* "no handle": allocation failed */

typedef struct mc__alloc mc__alloc;

/* mc__alloc_create: an allocator over [base, base+size) with the given alignment
 * (bytes, a power of two in [1, 4096]). The usable range starts at base rounded up to
 * the alignment and ends at base+size rounded down; it may be empty (then every alloc
 * fails). Returns a new allocator, or NULL when align is not a power of two in range or
 * base+size overflows. Aborts on out-of-memory (small internal allocation). */
mc__alloc *mc__alloc_create(uint64_t base, uint64_t size, uint32_t align);

/* Placement policies (mc__alloc_set_fit). NEAR is the default (see the top of this
 * file). LOW_ADDRESS is the placement of issue 17's first step (an exact fit, else the
 * lowest-addressed fitting block in the request's own class or among a few blocks of the
 * next 2 larger classes); CLASS is the placement before issue 17 (best fit in the
 * request's own class, else the head of the next larger class). Both are kept so that
 * bench_allocator and the tests can compare all three in one run. All keep every
 * guarantee below; only which free block is chosen differs. */
#define MC__ALLOC_FIT_LOW_ADDRESS 0
#define MC__ALLOC_FIT_CLASS 1
#define MC__ALLOC_FIT_NEAR 2

/* mc__alloc_set_fit: selects the placement for later allocations (live blocks stay).
 * Returns 0, or -EINVAL for an unknown policy (nothing changes). */
int mc__alloc_set_fit(mc__alloc *a, int fit);

/* mc__alloc_destroy: frees the allocator's own memory. NULL is fine. */
void mc__alloc_destroy(mc__alloc *a);

/* mc__alloc_alloc: reserves `size` bytes (> 0), rounded up to the alignment.
 * Returns a handle and stores the block's address in *addr, or MC__ALLOC_NONE when no
 * free block is large enough (or size is 0). */
uint32_t mc__alloc_alloc(mc__alloc *a, uint64_t size, uint64_t *addr);

/* mc__alloc_reserve: reserves exactly [addr, addr + size rounded up to the alignment),
 * which must lie in one free block (restoring a master's index from a snapshot, where
 * the replicas' addresses are given). cursor (may be NULL): in/out, the handle of the
 * previous reservation; reserving in ascending address order with the same cursor (and
 * no free in between) makes each call O(1), otherwise a call walks the blocks by
 * address from the start (O(blocks)). Returns the handle, or MC__ALLOC_NONE when
 * size is 0, addr is unaligned or outside the range, or the range overlaps an
 * allocation. */
uint32_t mc__alloc_reserve(mc__alloc *a, uint64_t addr, uint64_t size, uint32_t *cursor);

/* mc__alloc_free: releases the block of `handle` and merges it with free neighbours.
 * Returns 0, or -EINVAL for a handle that is not a live allocation (nothing changes). */
int mc__alloc_free(mc__alloc *a, uint32_t handle);

/* mc__alloc_can_fit: true when an alloc of `size` bytes would succeed now. */
bool mc__alloc_can_fit(const mc__alloc *a, uint64_t size);

/* Accounting, in bytes: capacity (usable range), used (sum of rounded allocation
 * sizes), free (capacity - used). */
uint64_t mc__alloc_capacity(const mc__alloc *a);
uint64_t mc__alloc_used(const mc__alloc *a);
uint64_t mc__alloc_free_bytes(const mc__alloc *a);

/* mc__alloc_block_size: the rounded size (bytes) of a live allocation; 0 otherwise. */
uint64_t mc__alloc_block_size(const mc__alloc *a, uint32_t handle);

/* mc__alloc_free_blocks / mc__alloc_used_blocks: number of free / allocated blocks. */
size_t mc__alloc_free_blocks(const mc__alloc *a);
size_t mc__alloc_used_blocks(const mc__alloc *a);

/* mc__alloc_largest_free: size in bytes of the largest free block (O(number of blocks
 * in the top size class)). */
uint64_t mc__alloc_largest_free(const mc__alloc *a);

/* mc__alloc_check: verifies every internal invariant (address chain covers the range
 * without gaps or overlaps, no two adjacent free blocks, class lists and bitmaps agree,
 * accounting matches). Returns 0, or a negative line-specific code naming the first
 * broken invariant. O(blocks); for tests. */
int mc__alloc_check(const mc__alloc *a);

#endif
