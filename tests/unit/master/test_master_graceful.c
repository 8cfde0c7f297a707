/* Master service graceful unmount (mc_master_service_unmount_segment_grace; upstream
 * GracefulUnmountSegment) on a fake clock: during the grace period the segment takes no
 * new allocation and its capacity has left the gauges, but its replicas stay readable;
 * the first tick at or after the deadline finishes the unmount (replicas dropped, an
 * object left with none erased); a second unmount during the grace is SEGMENT_NOT_FOUND,
 * another client's is ILLEGAL_CLIENT, a grace above the cap INVALID_PARAMS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixture.h"

#define MIB (1024ull * 1024)

/* A (C1) and B (C2), 16 MiB each (fixture.h). */
static mc_master_service *make2(void)
{
    mc_master_config cfg;
    fx_config(&cfg, 500);
    cfg.client_ttl = 100000000;
    mc_master_service *svc = fx_service(&cfg);
    fx_mount_ab(svc, 16 * MIB, 16 * MIB);
    return svc;
}

/* put key with one replica, preferring segment `pref`; returns the segment id's first
 * word of the replica, or the put's code (negative). */
static int64_t put1(mc_master_service *svc, const char *key, const char *pref)
{
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    c.replica_num = 1;
    const char *prefs[1] = {pref};
    if (pref) {
        c.preferred_segments = prefs;
        c.n_preferred = 1;
    }
    mc_master_replica_list out;
    int rc = mc_master_service_put_start(svc, C1, key, strlen(key), MIB, &c, &out);
    if (rc)
        return rc;
    assert_int_equal(mc_master_service_put_end(svc, C1, key, strlen(key)), MC_OK);
    return (int64_t)out.replicas[0].segment_id.first;
}

static int replicas(mc_master_service *svc, const char *key)
{
    mc_master_replica_list l;
    int rc = mc_master_service_get_replica_list(svc, key, strlen(key), &l);
    return rc == MC_OK ? (int)l.n : rc;
}

static void test_grace_then_unmount(void **state)
{
    (void)state;
    mc_master_service *svc = make2();
    assert_int_equal(put1(svc, "on-a", "A"), 10);
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    uint64_t cap2 = st.total_capacity_bytes;

    assert_int_equal(mc_master_service_unmount_segment_grace(svc, SA, C2, 5000),
                     MC_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_service_unmount_segment_grace(svc, SA, C1, 5000), MC_OK);
    /* in the grace period: readable, no new allocation there, capacity gone */
    assert_int_equal(replicas(svc, "on-a"), 1);
    for (int i = 0; i < 8; i++) {
        char k[16];
        snprintf(k, sizeof k, "new-%d", i);
        assert_int_equal(put1(svc, k, "A"), 20); /* preferred A is skipped: B */
    }
    mc_master_service_get_stats(svc, &st);
    assert_true(st.total_capacity_bytes < cap2);
    assert_int_equal(mc_master_service_unmount_segment(svc, SA, C1), MC_SEGMENT_NOT_FOUND);

    fake_now += 4999;
    mc_master_service_tick(svc);
    assert_int_equal(replicas(svc, "on-a"), 1);
    fake_now += 1;
    mc_master_service_tick(svc);
    assert_int_equal(replicas(svc, "on-a"), MC_OBJECT_NOT_FOUND);
    assert_int_equal(replicas(svc, "new-0"), 1);
    /* the id is free again: a new mount of it works */
    mc_master_segment a = {.id = SA, .name = "A", .base = 1ull << 32, .size = 16 * MIB};
    assert_int_equal(mc_master_service_mount_segment(svc, &a, C1), MC_OK);
    mc_master_service_destroy(svc);
}

static void test_grace_limits(void **state)
{
    (void)state;
    mc_master_service *svc = make2();
    assert_int_equal(mc_master_service_unmount_segment_grace(svc, SB, C2,
                                                             MC_MASTER_MAX_UNMOUNT_GRACE_MS + 1),
                     MC_INVALID_PARAMS);
    mc_master_uuid nope = {99, 99};
    assert_int_equal(mc_master_service_unmount_segment_grace(svc, nope, C2, 10),
                     MC_SEGMENT_NOT_FOUND);
    /* grace 0 is the plain unmount; destroy with a graced segment pending frees it */
    assert_int_equal(put1(svc, "on-b", "B"), 20);
    assert_int_equal(mc_master_service_unmount_segment_grace(svc, SB, C2, 0), MC_OK);
    assert_int_equal(replicas(svc, "on-b"), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_service_unmount_segment_grace(svc, SA, C1, 60000), MC_OK);
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grace_then_unmount),
        cmocka_unit_test(test_grace_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
