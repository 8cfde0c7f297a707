/* test_master_bootstrap.c: the HA standby bootstrap's two halves in snapshot.c
 * (master/replicate.h; docs/ha.md "Bootstrap from a snapshot"): a leader's index encoded
 * as a snapshot in memory, and a standby's index replaced by it (what it held before is
 * gone, every object of the leader is at its address, once its owner remounts); a
 * buffer that is not a whole snapshot changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixture.h"
#include "master/master_service.h"
#include "master/replicate.h"

static const mc_master_segment SEG = {.id = {9, 9}, .name = "127.0.0.1:1", .base = 1ull << 32,
                                      .size = 64 << 20};
static const mc_master_segment OLD = {.id = {5, 5}, .name = "127.0.0.1:2", .base = 1ull << 33,
                                      .size = 64 << 20};

static void test_encode_and_replace(void **st)
{
    (void)st;
    mc_master_service *leader = fx_plain_service(0);
    assert_int_equal(mc_master_service_mount_segment(leader, &SEG, C1), MC_OK);
    uint64_t addr[30];
    char key[32];
    for (int i = 0; i < 30; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(fx_put(leader, C1, key, 5000 + (uint64_t)i, &addr[i]), MC_OK);
    }
    assert_int_equal(mc_master_service_remove(leader, "k7", 2, true), MC_OK);
    size_t len = 0;
    uint64_t lsn = 1, nobjs = 0;
    uint8_t *snap = mc__snapshot_encode(leader, NULL, &len, &lsn, &nobjs);
    assert_non_null(snap);
    assert_int_equal(lsn, 0); /* no log: LSN 0 */
    assert_int_equal(nobjs, 29);

    /* a standby with state of its own (an older copy): another segment and key */
    mc_master_service *sb = fx_plain_service(0);
    assert_int_equal(mc_master_service_mount_segment(sb, &OLD, C2), MC_OK);
    assert_int_equal(fx_put(sb, C2, "stale", 4096, NULL), MC_OK);
    int rc;
    /* not a whole snapshot: refused, nothing changed */
    uint64_t got = 7, objs = 0, dropped = 0;
    assert_int_equal(mc__snapshot_load_live(sb, snap, len - 3, &got, &objs, &dropped),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc__snapshot_load_live(sb, snap + 1, len - 1, &got, &objs, &dropped),
                     MC_INVALID_PARAMS);
    assert_int_equal(got, 7);
    fx_addr_of(sb, "stale", &rc);
    assert_int_equal(rc, MC_OK);

    assert_int_equal(mc__snapshot_load_live(sb, snap, len, &got, &objs, &dropped), MC_OK);
    assert_int_equal(got, 0);
    assert_int_equal(objs, 29);
    assert_int_equal(dropped, 0);
    free(snap);
    fx_addr_of(sb, "stale", &rc);
    assert_int_equal(rc, MC_OBJECT_NOT_FOUND); /* the older copy is gone with its segment */
    /* the copied segment is pending until its owner remounts (as after a restore) */
    assert_int_equal(mc_master_service_remount_segments(sb, &SEG, 1, C1), MC_OK);
    fx_expect_keys(sb, addr, 30, 1ull << 7);
    /* the copied space is taken: a new put does not land on a copied object */
    fx_put_apart(sb, 5000, addr, 30, 1ull << 7);
    mc_master_service_destroy(sb);
    mc_master_service_destroy(leader);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_and_replace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
