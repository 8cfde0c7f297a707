/* Segment allocator (src/alloc/allocator.c): alignment, bounds, no overlap, full
 * coalescing back to one free block, the invariant checker after every step of a random
 * KV-cache size mix, utilisation when nearly full, bad frees, both placement policies
 * (which block each picks; steady churn with a fixed seed). Metadata only: the
 * ranges handed out are never touched, so segments of many GiB cost nothing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "alloc/allocator.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define GIB (1024ull * 1024 * 1024)

typedef struct blk {
    uint32_t h;
    uint64_t addr, size;
} blk;

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* A KV-cache-like size: log-uniform between 4 KiB and 32 MiB, not a multiple of 64. */
static uint64_t kv_size(void)
{
    unsigned shift = 12 + (unsigned)(rnd() % 14); /* 4 KiB .. 32 MiB */
    uint64_t s = (1ull << shift) + rnd() % (1ull << shift);
    if (s > 32 * MIB)
        s = 32 * MIB;
    return s - rnd() % 61;
}

static int cmp_addr(const void *a, const void *b)
{
    uint64_t x = ((const blk *)a)->addr, y = ((const blk *)b)->addr;
    return x < y ? -1 : x > y;
}

/* Every live block lies in range, is aligned, and overlaps no other. */
static void check_blocks(blk *b, size_t n, uint64_t lo, uint64_t hi, uint64_t align)
{
    blk *s = malloc((n ? n : 1) * sizeof(*s));
    assert_non_null(s);
    memcpy(s, b, n * sizeof(*s));
    qsort(s, n, sizeof(*s), cmp_addr);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(s[i].addr % align, 0);
        assert_true(s[i].addr >= lo);
        assert_true(s[i].addr + s[i].size <= hi);
        if (i)
            assert_true(s[i - 1].addr + s[i - 1].size <= s[i].addr);
    }
    free(s);
}

static void test_create_params(void **state)
{
    (void)state;
    assert_null(mc__alloc_create(0, 4096, 0));
    assert_null(mc__alloc_create(0, 4096, 3));
    assert_null(mc__alloc_create(0, 4096, 8192));
    assert_null(mc__alloc_create(UINT64_MAX - 10, 4096, 64));
    mc__alloc *a = mc__alloc_create(100, 10, 64); /* nothing aligned inside */
    assert_non_null(a);
    assert_int_equal(mc__alloc_capacity(a), 0);
    uint64_t addr;
    assert_int_equal(mc__alloc_alloc(a, 1, &addr), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_check(a), 0);
    mc__alloc_destroy(a);
    mc__alloc_destroy(NULL);
}

static void test_basic_alignment_and_bounds(void **state)
{
    (void)state;
    uint64_t base = 1000, size = 1 * MIB;
    mc__alloc *a = mc__alloc_create(base, size, 64);
    /* usable range: [1024, floor64(1000 + 1 MiB)) */
    uint64_t lo = 1024, hi = (base + size) & ~63ull;
    assert_int_equal(mc__alloc_capacity(a), hi - lo);
    uint64_t addr = 0;
    uint32_t h = mc__alloc_alloc(a, 1, &addr);
    assert_int_not_equal(h, MC__ALLOC_NONE);
    assert_int_equal(addr, lo);
    assert_int_equal(mc__alloc_block_size(a, h), 64);
    assert_int_equal(mc__alloc_used(a), 64);
    uint32_t h2 = mc__alloc_alloc(a, 65, &addr);
    assert_int_equal(addr, lo + 64);
    assert_int_equal(mc__alloc_block_size(a, h2), 128);
    assert_int_equal(mc__alloc_alloc(a, 0, &addr), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_alloc(a, hi - lo, &addr), MC__ALLOC_NONE); /* 192 used */
    assert_int_equal(mc__alloc_alloc(a, UINT64_MAX, &addr), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_check(a), 0);
    assert_int_equal(mc__alloc_free(a, h), 0);
    assert_int_equal(mc__alloc_free(a, h2), 0);
    assert_int_equal(mc__alloc_used(a), 0);
    assert_int_equal(mc__alloc_free_blocks(a), 1);
    /* the whole range is one block again */
    h = mc__alloc_alloc(a, hi - lo, &addr);
    assert_int_not_equal(h, MC__ALLOC_NONE);
    assert_int_equal(addr, lo);
    assert_int_equal(mc__alloc_free_bytes(a), 0);
    assert_false(mc__alloc_can_fit(a, 1));
    assert_true(mc__alloc_can_fit(a, 0));
    mc__alloc_destroy(a);
}

static void test_bad_free(void **state)
{
    (void)state;
    mc__alloc *a = mc__alloc_create(0, 1 * MIB, 64);
    uint64_t addr;
    uint32_t h = mc__alloc_alloc(a, 4096, &addr);
    uint32_t h2 = mc__alloc_alloc(a, 4096, &addr);
    assert_int_equal(mc__alloc_free(a, 12345), -EINVAL);
    assert_int_equal(mc__alloc_free(a, MC__ALLOC_NONE), -EINVAL);
    assert_int_equal(mc__alloc_free(a, h), 0);
    assert_int_equal(mc__alloc_free(a, h), -EINVAL); /* double free */
    assert_int_equal(mc__alloc_check(a), 0);
    assert_int_equal(mc__alloc_used(a), 4096);
    assert_int_equal(mc__alloc_free(a, h2), 0);
    assert_int_equal(mc__alloc_free_blocks(a), 1);
    mc__alloc_destroy(a);
}

/* Equal blocks fill the segment exactly; freeing every other one leaves isolated holes
 * (no merge possible), freeing the rest merges everything back into one block. */
static void test_exact_fill_and_coalesce(void **state)
{
    (void)state;
    const uint64_t bs = 4096, n = 1024;
    mc__alloc *a = mc__alloc_create(1ull << 40, bs * n, 64);
    uint32_t *h = malloc(n * sizeof(*h));
    uint64_t addr;
    for (uint64_t i = 0; i < n; i++) {
        h[i] = mc__alloc_alloc(a, bs, &addr);
        assert_int_not_equal(h[i], MC__ALLOC_NONE);
        assert_int_equal(addr, (1ull << 40) + i * bs); /* first fit from the bottom */
    }
    assert_int_equal(mc__alloc_alloc(a, 64, &addr), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_free_blocks(a), 0);
    for (uint64_t i = 0; i < n; i += 2)
        assert_int_equal(mc__alloc_free(a, h[i]), 0);
    assert_int_equal(mc__alloc_free_blocks(a), n / 2);
    assert_int_equal(mc__alloc_alloc(a, bs + 64, &addr), MC__ALLOC_NONE); /* holes of bs */
    assert_int_equal(mc__alloc_check(a), 0);
    for (uint64_t i = 1; i < n; i += 2)
        assert_int_equal(mc__alloc_free(a, h[i]), 0);
    assert_int_equal(mc__alloc_free_blocks(a), 1);
    assert_int_equal(mc__alloc_largest_free(a), bs * n);
    assert_int_equal(mc__alloc_check(a), 0);
    free(h);
    mc__alloc_destroy(a);
}

/* A block exactly as large as the request, in the request's own size class below the
 * rounded-up search class, is still found (the nearly-full path). */
static void test_exact_class_fallback(void **state)
{
    (void)state;
    mc__alloc *a = mc__alloc_create(0, 99 * 64, 64);
    uint64_t addr;
    uint32_t h = mc__alloc_alloc(a, 99 * 64, &addr);
    assert_int_not_equal(h, MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_free_bytes(a), 0);
    mc__alloc_destroy(a);
}

/* Random churn with KV-cache sizes: invariants hold after every step; everything freed
 * merges back into one block. */
static void test_random_mix_invariants(void **state)
{
    (void)state;
    const uint64_t cap = 2 * GIB;
    const size_t steps = 6000, maxlive = 400;
    mc__alloc *a = mc__alloc_create(4096, cap, 64);
    blk *live = malloc(maxlive * sizeof(*live));
    size_t n = 0;
    for (size_t s = 0; s < steps; s++) {
        bool do_alloc = n == 0 || (n < maxlive && rnd() % 100 < 55);
        if (do_alloc) {
            uint64_t sz = kv_size(), addr;
            uint32_t h = mc__alloc_alloc(a, sz, &addr);
            if (h != MC__ALLOC_NONE) {
                assert_false(mc__alloc_can_fit(a, cap + 1));
                live[n++] = (blk){h, addr, sz};
            }
        } else {
            size_t k = rnd() % n;
            assert_int_equal(mc__alloc_free(a, live[k].h), 0);
            live[k] = live[--n];
        }
        if (s % 97 == 0) {
            assert_int_equal(mc__alloc_check(a), 0);
            check_blocks(live, n, 4096, 4096 + cap, 64);
        }
    }
    assert_int_equal(mc__alloc_check(a), 0);
    check_blocks(live, n, 4096, 4096 + cap, 64);
    assert_int_equal(mc__alloc_used_blocks(a), n);
    while (n)
        assert_int_equal(mc__alloc_free(a, live[--n].h), 0);
    assert_int_equal(mc__alloc_used(a), 0);
    assert_int_equal(mc__alloc_free_blocks(a), 1);
    assert_int_equal(mc__alloc_check(a), 0);
    free(live);
    mc__alloc_destroy(a);
}

/* After churn has fragmented the free space, filling with the same mix until the first
 * failure still uses most of the segment (fragmentation resistance). */
static void test_utilisation_after_churn(void **state)
{
    (void)state;
    const uint64_t cap = 8 * GIB;
    mc__alloc *a = mc__alloc_create(0, cap, 64);
    size_t maxn = 1u << 16, n = 0;
    blk *live = malloc(maxn * sizeof(*live));
    uint64_t addr;
    /* fill to ~70%, then churn 20000 times around that level */
    while (mc__alloc_used(a) < cap / 10 * 7) {
        uint64_t sz = kv_size();
        live[n] = (blk){mc__alloc_alloc(a, sz, &addr), addr, sz};
        assert_int_not_equal(live[n].h, MC__ALLOC_NONE);
        n++;
    }
    for (int s = 0; s < 20000; s++) {
        size_t k = rnd() % n;
        assert_int_equal(mc__alloc_free(a, live[k].h), 0);
        uint64_t sz = kv_size();
        live[k] = (blk){mc__alloc_alloc(a, sz, &addr), addr, sz};
        assert_int_not_equal(live[k].h, MC__ALLOC_NONE);
    }
    /* now fill until the first failure */
    for (;;) {
        uint64_t sz = kv_size();
        uint32_t h = mc__alloc_alloc(a, sz, &addr);
        if (h == MC__ALLOC_NONE)
            break;
        assert_true(n < maxn);
        live[n++] = (blk){h, addr, sz};
    }
    double util = (double)mc__alloc_used(a) / (double)cap;
    assert_true(util > 0.90);
    assert_int_equal(mc__alloc_check(a), 0);
    check_blocks(live, n, 0, cap, 64);
    free(live);
    mc__alloc_destroy(a);
}

/* Placement: an exact fit wins in both policies; otherwise low-address fit takes the
 * lowest-addressed fitting block (in the request's own class and among the next larger
 * classes) where class fit takes the best size in its own class, else the head (the most
 * recently freed block) of the next larger class. Granules of 64 bytes. */
static void test_fit_policies(void **state)
{
    (void)state;
    const uint64_t G = 64;
    /* holes, low to high address: Z 131 g, X 130 g, Y 128 g, then P 256 g, Q 256 g */
    const uint64_t sizes[] = {131, 1, 130, 1, 128, 1, 256, 1, 256, 1};
    const int holes[] = {0, 2, 4, 6, 8};
    for (int fit = MC__ALLOC_FIT_LOW_ADDRESS; fit <= MC__ALLOC_FIT_CLASS; fit++) {
        mc__alloc *a = mc__alloc_create(0, 906 * G, 64); /* the sum of sizes[] */
        assert_int_equal(mc__alloc_set_fit(a, fit), 0);
        uint32_t h[10];
        uint64_t at[10], addr;
        for (int i = 0; i < 10; i++) {
            h[i] = mc__alloc_alloc(a, sizes[i] * G, &at[i]);
            assert_int_not_equal(h[i], MC__ALLOC_NONE);
        }
        assert_int_equal(mc__alloc_free_bytes(a), 0);
        for (int k = 0; k < 5; k++)
            assert_int_equal(mc__alloc_free(a, h[holes[k]]), 0);
        assert_int_equal(mc__alloc_free_blocks(a), 5);
        /* exact size: Y, though Z and X are lower and also fit */
        uint32_t y = mc__alloc_alloc(a, 128 * G, &addr);
        assert_int_equal(addr, at[4]);
        assert_int_equal(mc__alloc_free(a, y), 0);
        /* 129 granules: Z (lowest) or X (best size) */
        uint32_t z = mc__alloc_alloc(a, 129 * G, &addr);
        assert_int_equal(addr, fit == MC__ALLOC_FIT_CLASS ? at[2] : at[0]);
        assert_int_equal(mc__alloc_free(a, z), 0);
        /* 200 granules: only P or Q fit (a larger class): P (lower) or Q (freed last) */
        uint32_t q = mc__alloc_alloc(a, 200 * G, &addr);
        assert_int_equal(addr, fit == MC__ALLOC_FIT_CLASS ? at[8] : at[6]);
        assert_int_equal(mc__alloc_check(a), 0);
        assert_int_equal(mc__alloc_free(a, q), 0);
        for (int i = 0; i < 10; i++)
            if (i % 2)
                assert_int_equal(mc__alloc_free(a, h[i]), 0);
        assert_int_equal(mc__alloc_free_blocks(a), 1);
        assert_int_equal(mc__alloc_check(a), 0);
        mc__alloc_destroy(a);
    }
    mc__alloc *a = mc__alloc_create(0, MIB, 64);
    assert_int_equal(mc__alloc_set_fit(a, 7), -EINVAL);
    assert_int_equal(mc__alloc_set_fit(a, -1), -EINVAL);
    mc__alloc_destroy(a);
}

/* A segment of exactly the sum of sizes[0..n) granules (64 bytes), filled with one
 * block per size in address order: handles in h[], addresses in at[]. */
static mc__alloc *filled(const uint64_t *sizes, int n, uint32_t *h, uint64_t *at)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += sizes[i];
    mc__alloc *a = mc__alloc_create(0, sum * 64, 64);
    assert_non_null(a);
    for (int i = 0; i < n; i++) {
        h[i] = mc__alloc_alloc(a, sizes[i] * 64, &at[i]);
        assert_int_not_equal(h[i], MC__ALLOC_NONE);
    }
    return a;
}

/* Near fit (the default): the lowest-addressed block of g..g+g/10 granules (not the
 * best size among them), an exact fit at once, else the best fit (the smallest block that
 * holds g, not the lowest-addressed). Granules of 64 bytes. */
static void test_near_fit_policy(void **state)
{
    (void)state;
    const uint64_t G = 64;
    /* holes, low to high address: L 300 g, P 150 g, M 140 g, K 135 g, N 200 g, R 260 g */
    const uint64_t sizes[] = {300, 1, 150, 1, 140, 1, 135, 1, 200, 1, 260, 1};
    uint32_t h[12];
    uint64_t at[12], addr;
    mc__alloc *a = filled(sizes, 12, h, at);
    for (int i = 0; i < 12; i += 2)
        assert_int_equal(mc__alloc_free(a, h[i]), 0);
    /* exact size: K */
    uint32_t x = mc__alloc_alloc(a, 135 * G, &addr);
    assert_int_equal(addr, at[6]);
    assert_int_equal(mc__alloc_free(a, x), 0);
    /* 133 g: M and K lie in 133..146; M is lower (K is the better size) */
    x = mc__alloc_alloc(a, 133 * G, &addr);
    assert_int_equal(addr, at[4]);
    assert_int_equal(mc__alloc_free(a, x), 0);
    /* the previous placement takes K (own class, lowest address) */
    assert_int_equal(mc__alloc_set_fit(a, MC__ALLOC_FIT_LOW_ADDRESS), 0);
    x = mc__alloc_alloc(a, 133 * G, &addr);
    assert_int_equal(addr, at[6]);
    assert_int_equal(mc__alloc_free(a, x), 0);
    assert_int_equal(mc__alloc_set_fit(a, MC__ALLOC_FIT_NEAR), 0);
    /* 160 g: nothing in 160..176; the best fit is N (L is lower, P too small) */
    x = mc__alloc_alloc(a, 160 * G, &addr);
    assert_int_equal(addr, at[8]);
    assert_int_equal(mc__alloc_free(a, x), 0);
    /* 250 g: the range 250..275 crosses a power of two; R (260) is in it, L (300) not */
    x = mc__alloc_alloc(a, 250 * G, &addr);
    assert_int_equal(addr, at[10]);
    assert_int_equal(mc__alloc_check(a), 0);
    assert_int_equal(mc__alloc_free(a, x), 0);
    /* 301 g: nothing fits */
    assert_int_equal(mc__alloc_alloc(a, 301 * G, &addr), MC__ALLOC_NONE);
    assert_false(mc__alloc_can_fit(a, 301 * G));
    assert_true(mc__alloc_can_fit(a, 300 * G));
    for (int i = 1; i < 12; i += 2)
        assert_int_equal(mc__alloc_free(a, h[i]), 0);
    assert_int_equal(mc__alloc_free_blocks(a), 1);
    assert_int_equal(mc__alloc_check(a), 0);
    mc__alloc_destroy(a);
}

/* Near fit looks at a few blocks per class; when nothing larger is free, a fitting block
 * behind smaller ones in the request's own class is still found (no false failure). */
static void test_near_fit_own_class_depth(void **state)
{
    (void)state;
    const uint64_t G = 64;
    const uint64_t sizes[] = {132, 1, 132, 1, 132, 1, 132, 1, 132, 1, 135, 1};
    uint32_t h[12];
    uint64_t at[12], addr;
    mc__alloc *a = filled(sizes, 12, h, at);
    /* the 135 g hole first, then five 132 g holes in front of it on the class list */
    assert_int_equal(mc__alloc_free(a, h[10]), 0);
    for (int i = 0; i < 10; i += 2)
        assert_int_equal(mc__alloc_free(a, h[i]), 0);
    assert_true(mc__alloc_can_fit(a, 134 * G));
    uint32_t x = mc__alloc_alloc(a, 134 * G, &addr);
    assert_int_not_equal(x, MC__ALLOC_NONE);
    assert_int_equal(addr, at[10]);
    assert_false(mc__alloc_can_fit(a, 133 * G));
    assert_int_equal(mc__alloc_check(a), 0);
    mc__alloc_destroy(a);
}

/* Steady churn with a fixed seed, both placements: fill until a failure, free random
 * blocks worth 5% of the segment, repeat. After every round: the invariant checker, no
 * two live blocks overlap, accounting matches the live set. At the end every block is
 * freed: one free block again (full coalescing), and one allocation of the whole
 * capacity succeeds (full reuse). The low-address placement keeps more of the segment
 * in use at the failures than the class fit on this seed (a property of the placement,
 * no timing). */
static void test_steady_churn_policies(void **state)
{
    (void)state;
    const uint64_t cap = 8 * GIB;
    const int rounds = 300;
    double mean[3] = {0, 0, 0};
    for (int fit = MC__ALLOC_FIT_LOW_ADDRESS; fit <= MC__ALLOC_FIT_NEAR; fit++) {
        rnd_state = 0x2545f4914f6cdd1dull;
        mc__alloc *a = mc__alloc_create(4096, cap, 64);
        mc__alloc_set_fit(a, fit);
        size_t maxn = 1u << 16, n = 0;
        blk *live = malloc(maxn * sizeof(*live));
        uint64_t used = 0;
        for (int r = 0; r < rounds;) {
            uint64_t sz = kv_size(), addr;
            uint32_t h = mc__alloc_alloc(a, sz, &addr);
            if (h != MC__ALLOC_NONE) {
                assert_true(n < maxn);
                live[n++] = (blk){h, addr, sz};
                used += (sz + 63) & ~63ull;
                continue;
            }
            assert_int_equal(mc__alloc_used(a), used);
            assert_int_equal(mc__alloc_used_blocks(a), n);
            assert_int_equal(mc__alloc_check(a), 0);
            check_blocks(live, n, 4096, 4096 + cap, 64);
            if (r++ >= 20)
                mean[fit] += (double)used / (double)cap / (rounds - 20);
            uint64_t target = used - cap / 20;
            while (used > target) {
                size_t k = rnd() % n;
                assert_int_equal(mc__alloc_free(a, live[k].h), 0);
                used -= (live[k].size + 63) & ~63ull;
                live[k] = live[--n];
            }
        }
        while (n)
            assert_int_equal(mc__alloc_free(a, live[--n].h), 0);
        assert_int_equal(mc__alloc_used(a), 0);
        assert_int_equal(mc__alloc_free_blocks(a), 1);
        assert_int_equal(mc__alloc_check(a), 0);
        uint64_t addr;
        uint32_t all = mc__alloc_alloc(a, cap, &addr);
        assert_int_not_equal(all, MC__ALLOC_NONE);
        assert_int_equal(addr, 4096);
        assert_int_equal(mc__alloc_free_bytes(a), 0);
        free(live);
        mc__alloc_destroy(a);
    }
    print_message("steady churn 8 GiB: near fit %.2f%%, low-address fit %.2f%%, class fit "
                  "%.2f%% in use at the failures\n", 100 * mean[MC__ALLOC_FIT_NEAR],
                  100 * mean[MC__ALLOC_FIT_LOW_ADDRESS], 100 * mean[MC__ALLOC_FIT_CLASS]);
    assert_true(mean[MC__ALLOC_FIT_LOW_ADDRESS] > 0.88);
    assert_true(mean[MC__ALLOC_FIT_LOW_ADDRESS] > mean[MC__ALLOC_FIT_CLASS]);
    assert_true(mean[MC__ALLOC_FIT_NEAR] > mean[MC__ALLOC_FIT_LOW_ADDRESS]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_params),
        cmocka_unit_test(test_basic_alignment_and_bounds),
        cmocka_unit_test(test_bad_free),
        cmocka_unit_test(test_exact_fill_and_coalesce),
        cmocka_unit_test(test_exact_class_fallback),
        cmocka_unit_test(test_random_mix_invariants),
        cmocka_unit_test(test_utilisation_after_churn),
        cmocka_unit_test(test_fit_policies),
        cmocka_unit_test(test_near_fit_policy),
        cmocka_unit_test(test_near_fit_own_class_depth),
        cmocka_unit_test(test_steady_churn_policies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
