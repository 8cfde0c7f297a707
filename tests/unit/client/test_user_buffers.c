/* test_user_buffers.c: the register_buffer table (src/client/user_buffers.c) on its own:
 * a store struct brought "up" by hand (no master, no engine: register_buffer touches
 * neither), random overlapping registrations and removals checked against a brute-force
 * model of the bounds check, 20000 registrations in and out, and the limit
 * (MC_STORE_MAX_USER_BUFFERS, MC_BUFFER_OVERFLOW). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client/internal.h"
#include "mooncake/status.h"
#include "mooncake/store.h"

static mc_store *fake_store(void)
{
    mc_store *s = calloc(1, sizeof *s);
    pthread_rwlock_init(&s->life, NULL);
    pthread_rwlock_init(&s->ubuf_lock, NULL);
    atomic_store(&s->up, true);
    return s;
}

static void fake_free(mc_store *s)
{
    mc__ubuf_clear(s);
    pthread_rwlock_destroy(&s->ubuf_lock);
    pthread_rwlock_destroy(&s->life);
    free(s);
}

typedef struct range {
    uint64_t base, len;
    bool live;
} range;

/* The rule, by brute force: refused when some live range holds a and none of those
 * also holds [a, a + l). */
static int model(const range *rs, size_t n, uint64_t a, uint64_t l)
{
    bool hit = false, fits = false;
    for (size_t i = 0; i < n; i++) {
        if (!rs[i].live || rs[i].base > a || a >= rs[i].base + rs[i].len)
            continue;
        hit = true;
        fits |= a + l <= rs[i].base + rs[i].len;
    }
    return hit && !fits ? MC_INVALID_PARAMS : MC_OK;
}

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void test_random_against_model(void **state)
{
    (void)state;
    mc_store *s = fake_store();
    enum { N = 600 };
    range rs[N] = {{0}};
    uint64_t x = 88172645463325252ull;
    const uint64_t B = 0x100000; /* addresses in [B, B + 64 KiB) so ranges overlap */
    for (int step = 0; step < 20000; step++) {
        size_t i = rnd(&x) % N;
        if (rs[i].live) {
            assert_int_equal(mc_store_unregister_buffer(s, (void *)(uintptr_t)rs[i].base),
                             MC_OK);
            rs[i].live = false;
        } else {
            uint64_t base = B + rnd(&x) % 65536, len = 1 + rnd(&x) % 4096;
            bool taken = false;
            for (size_t j = 0; j < N; j++)
                taken |= rs[j].live && rs[j].base == base;
            int rc = mc_store_register_buffer(s, (void *)(uintptr_t)base, len);
            if (taken) {
                assert_true(rc == MC_OK || rc == MC_INVALID_PARAMS); /* same / other len */
            } else {
                assert_int_equal(rc, MC_OK);
                rs[i] = (range){base, len, true};
            }
        }
        for (int q = 0; q < 8; q++) {
            uint64_t a = B - 64 + rnd(&x) % (65536 + 8192), l = 1 + rnd(&x) % 8192;
            mc_store_iov iov = {(void *)(uintptr_t)a, l};
            bool logged = true; /* keep the log quiet */
            assert_int_equal(mc__check_ranges(s, &iov, 1, "test", 0, &logged),
                             model(rs, N, a, l));
        }
    }
    fake_free(s);
}

static void test_basic_rules(void **state)
{
    (void)state;
    mc_store *s = fake_store();
    char *p = (char *)(uintptr_t)0x7000000;
    assert_int_equal(mc_store_register_buffer(s, p, 100), MC_OK);
    assert_int_equal(mc_store_register_buffer(s, p, 100), MC_OK);            /* again */
    assert_int_equal(mc_store_register_buffer(s, p, 200), MC_INVALID_PARAMS); /* other len */
    assert_int_equal(mc_store_register_buffer(s, NULL, 100), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_register_buffer(s, p, 0), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_register_buffer(s, (void *)(uintptr_t)(UINT64_MAX - 10), 100),
                     MC_INVALID_PARAMS); /* wraps */
    mc_store_iov in = {p + 10, 90}, out = {p + 10, 91}, after = {p + 100, 5000};
    assert_int_equal(mc__check_ranges(s, &in, 1, "t", 0, NULL), MC_OK);
    assert_int_equal(mc__check_ranges(s, &out, 1, "t", 0, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mc__check_ranges(s, &after, 1, "t", 0, NULL), MC_OK); /* not inside */
    assert_int_equal(mc_store_unregister_buffer(s, p + 1), MC_INVALID_PARAMS);
    assert_int_equal(mc_store_unregister_buffer(s, p), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(s, p), MC_INVALID_PARAMS);
    assert_int_equal(mc__check_ranges(s, &out, 1, "t", 0, NULL), MC_OK); /* plain memory */
    atomic_store(&s->up, false); /* not set up: refused */
    assert_int_equal(mc_store_register_buffer(s, p, 100), MC_INVALID_PARAMS);
    fake_free(s);
}

static void test_many_and_the_limit(void **state)
{
    (void)state;
    mc_store *s = fake_store();
    const uint64_t B = 0x10000000;
    /* 20000 in and out, in an order that would degenerate an unbalanced tree */
    for (uint64_t i = 0; i < 20000; i++)
        assert_int_equal(mc_store_register_buffer(s, (void *)(uintptr_t)(B + 64 * i), 64),
                         MC_OK);
    mc_store_iov a = {(void *)(uintptr_t)(B + 64 * 12345 + 8), 56};
    mc_store_iov b = {(void *)(uintptr_t)(B + 64 * 12345 + 8), 57};
    assert_int_equal(mc__check_ranges(s, &a, 1, "t", 0, NULL), MC_OK);
    assert_int_equal(mc__check_ranges(s, &b, 1, "t", 0, NULL), MC_INVALID_PARAMS);
    for (uint64_t i = 0; i < 20000; i++)
        assert_int_equal(mc_store_unregister_buffer(s, (void *)(uintptr_t)(B + 64 * i)),
                         MC_OK);
    assert_int_equal(mc__check_ranges(s, &b, 1, "t", 0, NULL), MC_OK);
    /* the limit: a named code, nothing changes */
    for (uint64_t i = 0; i < MC_STORE_MAX_USER_BUFFERS; i++)
        assert_int_equal(mc_store_register_buffer(s, (void *)(uintptr_t)(B + 16 * i), 16),
                         MC_OK);
    void *more = (void *)(uintptr_t)(B + 16ull * MC_STORE_MAX_USER_BUFFERS);
    assert_int_equal(mc_store_register_buffer(s, more, 16), MC_BUFFER_OVERFLOW);
    assert_int_equal(mc_store_register_buffer(s, (void *)(uintptr_t)B, 16), MC_OK); /* held */
    assert_int_equal(mc_store_unregister_buffer(s, (void *)(uintptr_t)B), MC_OK);
    assert_int_equal(mc_store_register_buffer(s, more, 16), MC_OK); /* room again */
    fake_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_rules),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_many_and_the_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
