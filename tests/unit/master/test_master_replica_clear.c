/* Master service batch_replica_clear (upstream BatchReplicaClear) on a fake clock: who
 * may clear (the object's writer only), what blocks it (an active read lease, a write in
 * flight; pins do not), clearing one segment's replicas (the others stay readable) or
 * the whole object, an object left with no replica erased, the space coming back, and
 * the batch family's metrics. Segments are address ranges only (never touched). */
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

static mc_master_service *make(void)
{
    mc_master_config cfg;
    fx_config(&cfg, 500);
    cfg.client_ttl = 1000000;
    return fx_service(&cfg);
}

/* Two segments "A" (owned by C1) and "B" (owned by C2), 16 MiB each. */
static mc_master_service *make2(void)
{
    mc_master_service *svc = make();
    fx_mount_ab(svc, 16 * MIB, 16 * MIB);
    return svc;
}

static int put_n(mc_master_service *svc, mc_master_uuid who, const char *key, uint64_t size,
                 uint32_t replicas, bool hard_pin)
{
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    c.replica_num = replicas;
    c.with_hard_pin = hard_pin;
    mc_master_replica_list out;
    int rc = mc_master_service_put_start(svc, who, key, strlen(key), size, &c, &out);
    if (rc)
        return rc;
    return mc_master_service_put_end(svc, who, key, strlen(key));
}

static mc_master_key K(const char *s)
{
    return (mc_master_key){s, strlen(s)};
}

static int clear1(mc_master_service *svc, mc_master_uuid who, const char *key,
                  const char *seg)
{
    mc_master_key k = K(key);
    int st = 1;
    int rc = mc_master_service_batch_replica_clear(svc, who, &k, 1, seg, seg ? strlen(seg) : 0,
                                                   &st);
    assert_int_equal(rc, st);
    return st;
}

static bool present(mc_master_service *svc, const char *key)
{
    mc_master_key_info info;
    return mc_master_service_query_key(svc, key, strlen(key), &info) == MC_OK;
}

static mc_master_stats stats(mc_master_service *svc)
{
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    return st;
}

/* Clearing segment A's replica keeps B's (readable, same address), gives A's space back;
 * clearing B's then leaves none, so the object is erased. */
static void test_clear_one_segment(void **state)
{
    (void)state;
    mc_master_service *svc = make2();
    assert_int_equal(put_n(svc, C1, "k", MIB, 2, false), MC_OK);
    mc_master_replica_list before;
    assert_int_equal(mc_master_service_get_replica_list(svc, "k", 1, &before), MC_OK);
    assert_int_equal(before.n, 2);
    uint64_t alloc2 = stats(svc).allocated_bytes;
    fake_now += 1000; /* the get's lease ended */

    assert_int_equal(clear1(svc, C1, "k", "A"), MC_OK);
    mc_master_replica_list after;
    assert_int_equal(mc_master_service_get_replica_list(svc, "k", 1, &after), MC_OK);
    assert_int_equal(after.n, 1);
    assert_true(after.replicas[0].segment_id.first == 20);
    for (uint32_t i = 0; i < before.n; i++)
        if (before.replicas[i].segment_id.first == 20)
            assert_true(before.replicas[i].address == after.replicas[0].address);
    assert_true(stats(svc).allocated_bytes < alloc2);
    assert_int_equal(stats(svc).key_count, 1);
    fake_now += 1000;

    /* A has no replica of k any more */
    assert_int_equal(clear1(svc, C1, "k", "A"), MC_REPLICA_NOT_FOUND);
    assert_int_equal(clear1(svc, C1, "k", "nosuch"), MC_REPLICA_NOT_FOUND);
    assert_true(present(svc, "k"));

    assert_int_equal(clear1(svc, C1, "k", "B"), MC_OK);
    assert_false(present(svc, "k"));
    assert_int_equal(stats(svc).key_count, 0);
    assert_int_equal(stats(svc).allocated_bytes, 0);
    assert_int_equal(clear1(svc, C1, "k", NULL), MC_OBJECT_NOT_FOUND);
    /* the key is free for a new put, whose space is the one given back */
    assert_int_equal(put_n(svc, C1, "k", MIB, 2, false), MC_OK);
    assert_int_equal(stats(svc).allocated_bytes, alloc2);
    mc_master_service_destroy(svc);
}

/* segment_name "" / NULL clears the whole object, like a remove. */
static void test_clear_all(void **state)
{
    (void)state;
    mc_master_service *svc = make2();
    assert_int_equal(put_n(svc, C1, "a", MIB, 2, false), MC_OK);
    assert_int_equal(put_n(svc, C1, "b", MIB, 1, false), MC_OK);
    mc_master_key keys[3] = {K("a"), K("missing"), K("b")};
    int st[3];
    assert_int_equal(mc_master_service_batch_replica_clear(svc, C1, keys, 3, "", 0, st),
                     MC_OBJECT_NOT_FOUND);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OBJECT_NOT_FOUND);
    assert_int_equal(st[2], MC_OK);
    assert_false(present(svc, "a"));
    assert_false(present(svc, "b"));
    mc_master_stats s = stats(svc);
    assert_int_equal(s.key_count, 0);
    assert_int_equal(s.allocated_bytes, 0);
    assert_int_equal(s.deferred_free_keys, 0);
    const mc_master_batch_counters *c = &s.batch[MC_MASTER_BATCH_REPLICA_CLEAR];
    assert_int_equal(c->requests, 1);
    assert_int_equal(c->items, 3);
    assert_int_equal(c->failed_items, 1);
    assert_int_equal(c->partial_successes, 1);
    assert_string_equal(mc_master_batch_op_name(MC_MASTER_BATCH_REPLICA_CLEAR),
                        "batch_replica_clear");
    /* an empty batch is fine */
    assert_int_equal(mc_master_service_batch_replica_clear(svc, C1, NULL, 0, NULL, 0, NULL),
                     MC_OK);
    mc_master_service_destroy(svc);
}

/* Only the writer may clear; a lease or a write in flight blocks; pins do not. */
static void test_clear_rules(void **state)
{
    (void)state;
    mc_master_service *svc = make2();
    assert_int_equal(put_n(svc, C1, "mine", MIB, 2, false), MC_OK);
    assert_int_equal(clear1(svc, C2, "mine", NULL), MC_ILLEGAL_CLIENT);
    assert_int_equal(clear1(svc, C2, "mine", "B"), MC_ILLEGAL_CLIENT);
    assert_true(present(svc, "mine"));

    /* a reader's lease blocks until it ends */
    mc_master_replica_list rl;
    assert_int_equal(mc_master_service_get_replica_list(svc, "mine", 4, &rl), MC_OK);
    assert_int_equal(clear1(svc, C1, "mine", NULL), MC_OBJECT_HAS_LEASE);
    assert_int_equal(clear1(svc, C1, "mine", "A"), MC_OBJECT_HAS_LEASE);
    fake_now += 499;
    assert_int_equal(clear1(svc, C1, "mine", NULL), MC_OBJECT_HAS_LEASE);
    fake_now += 1;
    assert_int_equal(clear1(svc, C1, "mine", NULL), MC_OK);

    /* a write in flight is its writer's own to end or revoke */
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    c.replica_num = 1;
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "inflight", 8, MIB, &c, &out), MC_OK);
    assert_int_equal(clear1(svc, C1, "inflight", NULL), MC_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "inflight", 8), MC_OK);

    /* a hard pin does not stop it */
    assert_int_equal(put_n(svc, C1, "pinned", MIB, 2, true), MC_OK);
    assert_int_equal(clear1(svc, C1, "pinned", "B"), MC_OK);
    assert_true(present(svc, "pinned"));
    assert_int_equal(clear1(svc, C1, "pinned", NULL), MC_OK);
    assert_false(present(svc, "pinned"));

    /* bad arguments */
    char longname[300];
    memset(longname, 'x', sizeof longname);
    mc_master_key k = K("mine");
    int st = 1;
    assert_int_equal(mc_master_service_batch_replica_clear(svc, C1, &k, 1, longname,
                                                           sizeof longname, &st),
                     MC_INVALID_PARAMS);
    assert_int_equal(st, MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_batch_replica_clear(svc, C1, NULL, 1, NULL, 0, &st),
                     MC_INVALID_PARAMS);
    mc_master_key empty = {"", 0};
    assert_int_equal(mc_master_service_batch_replica_clear(svc, C1, &empty, 1, NULL, 0, &st),
                     MC_INVALID_PARAMS);
    assert_int_equal(st, MC_INVALID_PARAMS);
    mc_master_service_destroy(svc);
}

/* After a partial clear the remaining replica survives an unmount of the cleared
 * segment and reads fine. */
static void test_clear_then_unmount(void **state)
{
    (void)state;
    mc_master_service *svc = make2();
    assert_int_equal(put_n(svc, C1, "k", MIB, 2, false), MC_OK);
    assert_int_equal(clear1(svc, C1, "k", "A"), MC_OK);
    assert_int_equal(mc_master_service_unmount_segment(svc, (mc_master_uuid){10, 10}, C1),
                     MC_OK);
    mc_master_replica_list rl;
    assert_int_equal(mc_master_service_get_replica_list(svc, "k", 1, &rl), MC_OK);
    assert_int_equal(rl.n, 1);
    assert_true(rl.replicas[0].segment_id.first == 20);
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clear_one_segment),
        cmocka_unit_test(test_clear_all),
        cmocka_unit_test(test_clear_rules),
        cmocka_unit_test(test_clear_then_unmount),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
