/* bench_allocator: the master's segment allocator (src/master/allocator.c) under a
 * KV-cache size mix, against glibc malloc/free of the same sizes in the same run.
 *
 *   bench_allocator [segment_gib=16] [ops=1000000]
 *
 * Size mix: log-uniform between 4 KiB and 32 MiB (not multiples of the 64-byte
 * alignment). Latency: the segment is filled to 70%, then each step frees a random live
 * block and allocates a new one (steady-state churn); the same sequence of sizes and
 * victims is replayed with malloc/free, twice: glibc as configured by default (blocks of
 * 128 KiB+ start out as mmap, the heap top is trimmed: syscalls) and glibc tuned to stay
 * in user space (M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD off). Steps are timed in
 * batches of 16 (the clock costs ~20 ns, as much as a step); median and p99 are over
 * batches, per step (= one alloc + one free).
 * Utilisation (bytes allocated, incl. 64-byte rounding, over segment bytes) when an
 * allocation first fails: (a) filling an empty segment; (b) steady state as in the
 * master: fill until an allocation fails, record, free random blocks worth 5% of the
 * segment (eviction_ratio), repeat; mean and minimum over 2000 failures after 100 warm-up
 * ones. The allocator never touches the segment's memory; malloc writes a header per
 * block, so its working set stays small.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/allocator.h"
#include "mooncake/mc_time.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define GIB (1024ull * 1024 * 1024)
#define BATCH 16

static uint64_t rs = 0x243f6a8885a308d3ull;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static uint64_t kv_size(void)
{
    unsigned shift = 12 + (unsigned)(rnd() % 13); /* 4 KiB .. 16 MiB base */
    uint64_t s = (1ull << shift) + rnd() % (1ull << shift);
    return s > 32 * MIB ? 32 * MIB : s - rnd() % 61;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct step {
    uint32_t victim; /* index into the live array */
    uint64_t size;   /* new allocation */
} step;

static void report(const char *who, uint64_t *batch_ns, size_t nb, double *median,
                   uint64_t seg_gib)
{
    qsort(batch_ns, nb, sizeof(*batch_ns), cmp_u64);
    *median = (double)batch_ns[nb / 2] / BATCH;
    double p99 = (double)batch_ns[nb * 99 / 100] / BATCH;
    printf("alloc+free %-14s segment=%lluGiB mix=4KiB-32MiB fill=70%% steps=%zu: "
           "median %.1f ns, p99 %.1f ns per step\n",
           who, (unsigned long long)seg_gib, nb * BATCH, *median, p99);
}

static double glibc_run(const char *who, const uint64_t *pre, size_t npre, const step *steps,
                        size_t nb, uint64_t *batch_ns, uint64_t seg_gib)
{
    void **p = malloc(npre * sizeof(*p));
    for (size_t i = 0; i < npre; i++)
        p[i] = malloc(pre[i]);
    for (size_t b = 0; b < nb; b++) {
        uint64_t t0 = mc_now_ns();
        for (size_t k = b * BATCH; k < (b + 1) * BATCH; k++) {
            uint32_t v = steps[k].victim;
            free(p[v]);
            p[v] = malloc(steps[k].size);
        }
        batch_ns[b] = mc_now_ns() - t0;
    }
    double median;
    report(who, batch_ns, nb, &median, seg_gib);
    for (size_t i = 0; i < npre; i++)
        free(p[i]);
    free(p);
    return median;
}

int main(int argc, char **argv)
{
    uint64_t seg_gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 16;
    size_t ops = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
    if (seg_gib < 1 || seg_gib > 1024 || ops < BATCH * 100) {
        fprintf(stderr, "usage: bench_allocator [segment_gib 1..1024] [ops >= 1600]\n");
        return 2;
    }
    uint64_t cap = seg_gib * GIB;
    size_t nb = ops / BATCH;
    ops = nb * BATCH;

    /* ---- the workload: prefill sizes, then (victim, size) steps ---- */
    size_t maxlive = (size_t)(cap / (4 * KIB)) + 1;
    uint64_t *pre = malloc(maxlive * sizeof(*pre));
    size_t npre = 0;
    uint64_t sum = 0;
    while (sum < cap / 10 * 7) {
        pre[npre] = kv_size();
        sum += pre[npre++];
    }
    step *steps = malloc(ops * sizeof(*steps));
    for (size_t i = 0; i < ops; i++) {
        steps[i].victim = (uint32_t)(rnd() % npre);
        steps[i].size = kv_size();
    }
    uint64_t *batch_ns = malloc(nb * sizeof(*batch_ns));

    /* ---- ours ---- */
    mc__alloc *a = mc__alloc_create(1ull << 44, cap, 64);
    uint32_t *h = malloc(npre * sizeof(*h));
    uint64_t addr;
    for (size_t i = 0; i < npre; i++)
        h[i] = mc__alloc_alloc(a, pre[i], &addr);
    size_t fails = 0;
    for (size_t b = 0; b < nb; b++) {
        uint64_t t0 = mc_now_ns();
        for (size_t k = b * BATCH; k < (b + 1) * BATCH; k++) {
            uint32_t v = steps[k].victim;
            if (h[v] != MC__ALLOC_NONE)
                mc__alloc_free(a, h[v]);
            h[v] = mc__alloc_alloc(a, steps[k].size, &addr);
        }
        batch_ns[b] = mc_now_ns() - t0;
    }
    for (size_t i = 0; i < npre; i++)
        fails += h[i] == MC__ALLOC_NONE;
    double ours;
    report("mc__alloc", batch_ns, nb, &ours, seg_gib);
    if (mc__alloc_check(a))
        printf("INVARIANT BROKEN\n");
    printf("  (live blocks %zu, failed allocations at the end %zu, free blocks %zu)\n", npre,
           fails, mc__alloc_free_blocks(a));
    mc__alloc_destroy(a);

    /* ---- peer: glibc malloc/free, same sizes and victims; default, then tuned ---- */
    double peer = glibc_run("glibc malloc", pre, npre, steps, nb, batch_ns, seg_gib);
    printf("ratio ours/glibc (median): %.3f\n", ours / peer);
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, -1);
    double tuned = glibc_run("glibc tuned", pre, npre, steps, nb, batch_ns, seg_gib);
    printf("ratio ours/glibc-tuned (median): %.3f\n", ours / tuned);

    /* ---- utilisation at the first failure ---- */
    a = mc__alloc_create(0, cap, 64);
    uint64_t used_req = 0;
    for (;;) {
        uint64_t s = kv_size();
        if (mc__alloc_alloc(a, s, &addr) == MC__ALLOC_NONE)
            break;
        used_req += s;
    }
    printf("utilisation at first failure, empty segment=%lluGiB: %.2f%% of segment "
           "(%.2f%% requested bytes, the rest is 64-byte rounding)\n",
           (unsigned long long)seg_gib, 100.0 * (double)mc__alloc_used(a) / (double)cap,
           100.0 * (double)used_req / (double)cap);
    mc__alloc_destroy(a);

    a = mc__alloc_create(0, cap, 64);
    size_t nl = 0;
    uint32_t *live = malloc(maxlive * sizeof(*live));
    double usum = 0, umin = 1;
    int failures = 0, warmup = 100, rounds = 2000;
    while (failures < warmup + rounds) {
        uint32_t x = mc__alloc_alloc(a, kv_size(), &addr);
        if (x != MC__ALLOC_NONE) {
            live[nl++] = x;
            continue;
        }
        double u = (double)mc__alloc_used(a) / (double)cap;
        if (failures++ >= warmup) {
            usum += u;
            if (u < umin)
                umin = u;
        }
        uint64_t target = mc__alloc_used(a) - cap / 20;
        while (mc__alloc_used(a) > target && nl) {
            size_t v = rnd() % nl;
            mc__alloc_free(a, live[v]);
            live[v] = live[--nl];
        }
    }
    printf("utilisation at failure, steady state (fill until failure, free 5%% at random, "
           "repeat), segment=%lluGiB: mean %.2f%%, min %.2f%% over %d failures "
           "(free blocks at the end: %zu)\n",
           (unsigned long long)seg_gib, 100.0 * usum / rounds, 100.0 * umin, rounds,
           mc__alloc_free_blocks(a));
    int rc = mc__alloc_check(a);
    mc__alloc_destroy(a);
    free(live);
    free(h);
    free(pre);
    free(steps);
    free(batch_ns);
    return rc ? 1 : 0;
}
