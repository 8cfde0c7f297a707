/* regions.c: the table of registered memory and the serving-side bounds check.
 * A sorted array of regions plus the prefix maximum of their ends, so a lookup is a
 * binary search followed by a short walk left (overlapping registrations are allowed). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "transfer/internal.h"

static void rebuild_max_end(mc_te *te)
{
    uint64_t m = 0;
    for (size_t i = 0; i < te->n_regs; i++) {
        uint64_t e = te->regs[i]->base + te->regs[i]->len;
        if (e > m)
            m = e;
        te->max_end[i] = m;
    }
}

/* index of the last region with base <= addr, or -1 */
static long find_le(mc_te *te, uint64_t addr)
{
    size_t lo = 0, hi = te->n_regs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (te->regs[mid]->base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

te_region *mc__te_region_acquire(mc_te *te, uint64_t addr, uint64_t len)
{
    te_region *hit = NULL;
    pthread_rwlock_rdlock(&te->reg_lock);
    for (long i = find_le(te, addr); i >= 0 && te->max_end[i] > addr; i--) {
        te_region *r = te->regs[i];
        if (mc__te_range_inside(r->base, r->len, addr, len)) {
            atomic_fetch_add(&r->refs, 1);
            hit = r;
            break;
        }
    }
    pthread_rwlock_unlock(&te->reg_lock);
    return hit;
}

static void region_free(te_region *r)
{
    if (r->kind != TE_REG_USER) {
        munmap((void *)(uintptr_t)r->base, r->len);
        if (r->memfd >= 0)
            close(r->memfd);
    }
    free(r);
}

void mc__te_region_release(te_region *r)
{
    if (r)
        atomic_fetch_sub(&r->refs, 1);
}

int mc__te_region_add(mc_te *te, uint64_t base, uint64_t len, int kind, int memfd)
{
    if (base == 0 || len == 0 || base > (uint64_t)MC_SEGMENT_MAX_ADDR ||
        len > (uint64_t)MC_SEGMENT_MAX_ADDR - base)
        return -EINVAL;
    pthread_rwlock_wrlock(&te->reg_lock);
    long i = find_le(te, base);
    if (i >= 0 && te->regs[i]->base == base) {
        int rc = te->regs[i]->len == len && te->regs[i]->kind == kind ? -EEXIST : -EINVAL;
        pthread_rwlock_unlock(&te->reg_lock);
        return rc;
    }
    if (te->n_regs >= MC_SEGMENT_MAX_BUFFERS) {
        pthread_rwlock_unlock(&te->reg_lock);
        mc_log(MC_LOG_ERROR, TE_TAG,
               "registering 0x%llx (%llu bytes): %u regions are registered, the limit "
               "(MC_SEGMENT_MAX_BUFFERS, the most a segment descriptor lists); refused "
               "with BUFFER_OVERFLOW (unregister some, or register one larger range)",
               (unsigned long long)base, (unsigned long long)len, MC_SEGMENT_MAX_BUFFERS);
        return -ENOSPC;
    }
    if (te->n_regs == te->cap_regs) {
        te->cap_regs = te->cap_regs ? te->cap_regs * 2 : 16;
        te->regs = mc_xrealloc(te->regs, te->cap_regs * sizeof *te->regs);
        te->max_end = mc_xrealloc(te->max_end, te->cap_regs * sizeof *te->max_end);
    }
    te_region *r = mc_xcalloc(1, sizeof *r);
    r->base = base;
    r->len = len;
    r->kind = kind;
    r->memfd = memfd;
    atomic_init(&r->refs, 1);
    size_t at = (size_t)(i + 1);
    memmove(te->regs + at + 1, te->regs + at, (te->n_regs - at) * sizeof *te->regs);
    te->regs[at] = r;
    te->n_regs++;
    rebuild_max_end(te);
    pthread_rwlock_unlock(&te->reg_lock);
    return 0;
}

int mc__te_region_remove(mc_te *te, uint64_t base, int kind_mask, te_region **out)
{
    pthread_rwlock_wrlock(&te->reg_lock);
    long i = find_le(te, base);
    if (i < 0 || te->regs[i]->base != base || !((1 << te->regs[i]->kind) & kind_mask)) {
        pthread_rwlock_unlock(&te->reg_lock);
        return -ENOENT;
    }
    te_region *r = te->regs[i];
    memmove(te->regs + i, te->regs + i + 1, (te->n_regs - (size_t)i - 1) * sizeof *te->regs);
    te->n_regs--;
    rebuild_max_end(te);
    atomic_store(&r->dead, true);
    pthread_rwlock_unlock(&te->reg_lock);
    *out = r;
    return 0;
}

/* Waits until no serving operation uses r (closing connections that hold it after a
 * short grace), then frees it (and unmaps shared memory). */
void mc__te_region_drain(mc_te *te, te_region *r)
{
    atomic_fetch_sub(&r->refs, 1); /* the table's reference */
    uint64_t start = mc_now_ms();
    bool aborted = false;
    while (atomic_load(&r->refs) > 0) {
        if (!aborted && mc_now_ms() - start > 200 && te->initialized) {
            for (unsigned i = 0; i < te->nio; i++)
                mc__te_io_abort_region(&te->io[i], r);
            aborted = true;
        }
        mc_sleep_ms(1);
    }
    region_free(r);
}

void mc__te_regions_free_all(mc_te *te)
{
    for (size_t i = 0; i < te->n_regs; i++)
        region_free(te->regs[i]);
    free(te->regs);
    free(te->max_end);
    te->regs = NULL;
    te->max_end = NULL;
    te->n_regs = te->cap_regs = 0;
}
