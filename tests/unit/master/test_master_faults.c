/* Faults of issue 10 in the master core, on a fake clock.
 * Fault 4, the master's own stalls: a jump of the clock between two ticks longer than
 * stall_threshold_ms gives every client a grace of one client_ttl instead of expiring
 * them all; pings queued during the stall are taken; one grace per silence (a dead client
 * is not kept alive by repeated stalls); a long tick is not a stall; with the threshold
 * at 0 (off) the old behaviour stays.
 * Fault 5, a name taken over: a segment mounted under the name and host id of another
 * client's segment unmounts that older one (its replicas would now resolve to the new
 * engine); without a host id, or from another host, both stay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "master/master_service.h"

#define MIB (1024ull * 1024)
#define TTL 10000   /* ms */
#define STALL 1010  /* ms: a 10 ms tick + 1 s */

static uint64_t fake_now;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static const mc_master_uuid C1 = {1, 1}, C2 = {2, 2}, C3 = {3, 3};

static uint64_t expire_advance; /* ms the expiry hook moves the clock (a long tick) */
static int expired_calls;
static void on_expired(void *ctx, mc_master_uuid c, const char *const *names, size_t n)
{
    (void)ctx, (void)c, (void)names, (void)n;
    expired_calls++;
    fake_now += expire_advance;
}

static mc_master_service *make(uint64_t stall_ms)
{
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    cfg.shard_count = 16;
    cfg.clock = fake_clock;
    cfg.client_ttl_ms = TTL;
    cfg.stall_threshold_ms = stall_ms;
    cfg.on_client_expired = on_expired;
    fake_now = 1000000;
    expire_advance = 0;
    expired_calls = 0;
    mc_master_service *svc = NULL;
    assert_int_equal(mc_master_service_create(&cfg, &svc), MC_OK);
    return svc;
}

static void mount(mc_master_service *svc, uint64_t id, const char *name, mc_master_uuid c)
{
    mc_master_segment s = {.id = {id, id}, .name = name, .base = id << 32, .size = 8 * MIB};
    assert_int_equal(mc_master_service_mount_segment(svc, &s, c), MC_OK);
}

/* An object of `key` on the segment `seg`, written by client c. */
static void put_on(mc_master_service *svc, mc_master_uuid c, const char *key, const char *seg)
{
    mc_master_put_config pc;
    mc_master_put_config_init(&pc);
    const char *pref[] = {seg};
    pc.preferred_segments = pref;
    pc.n_preferred = 1;
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, c, key, strlen(key), 100, &pc, &out),
                     MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, c, key, strlen(key)), MC_OK);
}

static bool has(mc_master_service *svc, const char *key)
{
    mc_master_key_info info;
    return mc_master_service_query_key(svc, key, strlen(key), &info) == MC_OK;
}

static int ping(mc_master_service *svc, mc_master_uuid c)
{
    mc_master_ping_result pr;
    assert_int_equal(mc_master_service_ping(svc, c, &pr), MC_OK);
    return pr.client_status;
}

static uint64_t active(mc_master_service *svc)
{
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    return st.active_clients;
}

/* Two clients with one object each on their own segment, one tick done. */
static mc_master_service *two_clients(uint64_t stall_ms)
{
    mc_master_service *svc = make(stall_ms);
    mount(svc, 1, "a:1", C1);
    mount(svc, 2, "b:1", C2);
    put_on(svc, C1, "on-a", "a:1");
    put_on(svc, C2, "on-b", "b:1");
    mc_master_service_tick(svc);
    return svc;
}

/* Ticks every `step` ms for `ms` ms, C1 pinging at each turn. */
static void run(mc_master_service *svc, uint64_t ms, uint64_t step)
{
    for (uint64_t t = 0; t < ms; t += step) {
        fake_now += step;
        assert_int_equal(ping(svc, C1), MC_MASTER_CLIENT_OK);
        mc_master_service_tick(svc);
    }
}

static void test_stall_longer_than_ttl_expires_nobody(void **state)
{
    (void)state;
    mc_master_service *svc = two_clients(STALL);
    fake_now += 12000; /* the master did not run for 12 s (> client_ttl) */
    mc_master_service_tick(svc);
    assert_int_equal(expired_calls, 0);
    assert_int_equal(active(svc), 2);
    assert_true(has(svc, "on-a") && has(svc, "on-b"));
    /* the grace is one client_ttl from the tick that noticed the stall: C1 pings and
     * stays, silent C2 goes when the grace ends, not before */
    run(svc, TTL - 1000, 1000);
    assert_int_equal(expired_calls, 0);
    assert_true(has(svc, "on-b"));
    run(svc, 1000, 1000);
    assert_int_equal(expired_calls, 1);
    assert_false(has(svc, "on-b"));
    assert_true(has(svc, "on-a"));
    assert_int_equal(ping(svc, C2), MC_MASTER_CLIENT_NEED_REMOUNT);
    mc_master_service_destroy(svc);
}

static void test_without_stall_detection_everyone_expires(void **state)
{
    (void)state;
    mc_master_service *svc = two_clients(0); /* off: the behaviour the fault reported */
    fake_now += 12000;
    mc_master_service_tick(svc);
    assert_int_equal(expired_calls, 2);
    assert_false(has(svc, "on-a") || has(svc, "on-b"));
    mc_master_service_destroy(svc);
}

static void test_ping_queued_during_the_stall_is_taken(void **state)
{
    (void)state;
    /* The RPC threads may read the queued pings before the tick notices the stall: the
     * ping must not be answered NEED_REMOUNT (which would make the client remount). */
    mc_master_service *svc = two_clients(STALL);
    fake_now += 12000;
    assert_int_equal(ping(svc, C1), MC_MASTER_CLIENT_OK);
    mc_master_service_tick(svc);
    assert_int_equal(expired_calls, 0);
    mc_master_service_destroy(svc);
    /* without stall detection the same late ping is refused */
    svc = two_clients(0);
    fake_now += 12000;
    assert_int_equal(ping(svc, C1), MC_MASTER_CLIENT_NEED_REMOUNT);
    mc_master_service_destroy(svc);
}

static void test_one_grace_per_silence(void **state)
{
    (void)state;
    /* Repeated stalls cannot keep a dead client forever: silent C2 gets the first
     * grace only; C1, which pinged in between, gets each. */
    mc_master_service *svc = two_clients(STALL);
    fake_now += 12000;
    mc_master_service_tick(svc);
    run(svc, 3000, 1000);
    assert_int_equal(expired_calls, 0);
    fake_now += 12000; /* a second stall, past C2's grace */
    mc_master_service_tick(svc);
    assert_int_equal(expired_calls, 1);
    assert_false(has(svc, "on-b"));
    assert_true(has(svc, "on-a"));
    assert_int_equal(ping(svc, C1), MC_MASTER_CLIENT_OK);
    mc_master_service_destroy(svc);
}

static void test_short_gap_is_not_a_stall(void **state)
{
    (void)state;
    /* Gaps below the threshold change nothing: silent C2 expires at its deadline. */
    mc_master_service *svc = two_clients(STALL);
    run(svc, TTL, 1000); /* 1000 ms between ticks < 1010 */
    assert_int_equal(expired_calls, 1);
    assert_false(has(svc, "on-b"));
    mc_master_service_destroy(svc);
}

static void test_a_long_tick_is_not_a_stall(void **state)
{
    (void)state;
    /* A tick that itself takes long (here: the expiry hook of C3 takes 5 s) is measured
     * from its end: the next tick is on time, so silent C2, whose deadline passed during
     * the long tick, is expired by it and gets no grace. */
    mc_master_service *svc = make(STALL);
    mount(svc, 1, "a:1", C1);
    mount(svc, 3, "c:1", C3);
    mc_master_service_tick(svc);
    run(svc, 3000, 1000);
    mount(svc, 2, "b:1", C2); /* C2's deadline: 3 s after C3's */
    put_on(svc, C2, "on-b", "b:1");
    expire_advance = 5000;
    run(svc, TTL - 3000, 1000); /* C3 expires at the last turn; its hook takes 5 s */
    assert_int_equal(expired_calls, 1);
    expire_advance = 0;
    assert_true(has(svc, "on-b")); /* C2's deadline passed during that tick */
    run(svc, 10, 10);
    assert_int_equal(expired_calls, 2);
    assert_false(has(svc, "on-b"));
    assert_int_equal(ping(svc, C1), MC_MASTER_CLIENT_OK);
    mc_master_service_destroy(svc);
}

/* ---- fault 5: a segment name taken over by a new engine of the same host ---- */

static void mount_host(mc_master_service *svc, uint64_t id, const char *name,
                       const char *host, mc_master_uuid c)
{
    mc_master_segment s = {.id = {id, id}, .name = name, .base = id << 32, .size = 8 * MIB,
                           .host_id = host};
    assert_int_equal(mc_master_service_mount_segment(svc, &s, c), MC_OK);
}

static uint64_t segments(mc_master_service *svc)
{
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    return st.segment_count;
}

static void test_same_name_same_host_replaces_the_old_segment(void **state)
{
    (void)state;
    mc_master_service *svc = make(0);
    mount_host(svc, 1, "h:1", "host-a", C1);       /* the old engine (crashed)    */
    put_on(svc, C1, "old", "h:1");
    mount_host(svc, 2, "h:1", "host-a", C2);       /* restarted under its name    */
    assert_int_equal(segments(svc), 1);
    assert_false(has(svc, "old"));                 /* its replicas went with it   */
    put_on(svc, C2, "new", "h:1");
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_get_replica_list(svc, "new", 3, &out), MC_OK);
    mc_master_service_destroy(svc);
}

static void test_same_name_other_host_or_no_host_id_stays(void **state)
{
    (void)state;
    mc_master_service *svc = make(0);
    mount_host(svc, 1, "h:1", "host-a", C1);
    mount_host(svc, 2, "h:1", "host-b", C2);       /* another host: proves nothing */
    assert_int_equal(segments(svc), 2);
    mount(svc, 3, "n:1", C1);                      /* no host id                   */
    mount(svc, 4, "n:1", C2);
    assert_int_equal(segments(svc), 4);
    mount_host(svc, 5, "h:1", "host-a", C1);       /* the same client: its own     */
    assert_int_equal(segments(svc), 5);
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stall_longer_than_ttl_expires_nobody),
        cmocka_unit_test(test_without_stall_detection_everyone_expires),
        cmocka_unit_test(test_ping_queued_during_the_stall_is_taken),
        cmocka_unit_test(test_one_grace_per_silence),
        cmocka_unit_test(test_short_gap_is_not_a_stall),
        cmocka_unit_test(test_a_long_tick_is_not_a_stall),
        cmocka_unit_test(test_same_name_same_host_replaces_the_old_segment),
        cmocka_unit_test(test_same_name_other_host_or_no_host_id_stays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
