/* Master service (the core files of src/master, listed in master/internal.h) on a fake
 * clock: key validation, the put lifecycle and its error codes, replicas on distinct segments, preferred segments and
 * strategies, zero-size objects, leases, removal, regex, eviction order and exclusions,
 * soft/hard pins, upsert, stale/abandoned writes, client expiry, unmount, batches,
 * stats and the admin helpers. Segments are address ranges only (never touched). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "master/master_service.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)

static uint64_t fake_now;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static const mc_master_uuid C1 = {1, 1}, C2 = {2, 2};

static mc_master_config base_cfg(void)
{
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    cfg.shard_count = 16;
    cfg.clock = fake_clock;
    cfg.default_kv_lease_ttl = 500;
    cfg.client_ttl = 1000000; /* clients never expire, except in test_client_expiry */
    return cfg;
}

static mc_master_service *make(const mc_master_config *cfg)
{
    fake_now = 1000000;
    mc_master_service *svc = NULL;
    mc_master_config c = cfg ? *cfg : base_cfg();
    assert_int_equal(mc_master_service_create(&c, &svc), MC_OK);
    return svc;
}

static void mount(mc_master_service *svc, uint64_t id, const char *name, uint64_t base,
                  uint64_t size, mc_master_uuid client)
{
    mc_master_segment s = {.id = {id, id}, .name = name, .base = base, .size = size};
    assert_int_equal(mc_master_service_mount_segment(svc, &s, client), MC_OK);
}

static mc_master_put_config pcfg(uint32_t replicas)
{
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    c.replica_num = replicas;
    return c;
}

static int put(mc_master_service *svc, const char *key, uint64_t size)
{
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    int rc = mc_master_service_put_start(svc, C1, key, strlen(key), size, &c, &out);
    if (rc)
        return rc;
    return mc_master_service_put_end(svc, C1, key, strlen(key));
}

static int get(mc_master_service *svc, const char *key, mc_master_replica_list *out)
{
    mc_master_replica_list tmp;
    return mc_master_service_get_replica_list(svc, key, strlen(key), out ? out : &tmp);
}

static bool exists_quiet(mc_master_service *svc, const char *key)
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

/* The fence protocol of docs/consistency.md as a store client's heartbeat runs it: each
 * client pings, applies the fences it is handed (nothing to apply here: segments are
 * address ranges) and acknowledges them in its next ping. Since issue 10 the space of a
 * revoked, pre-empted or discarded write is quarantined until then; tests written for
 * the immediate free call this where they expect the space back. */
static void fence_settle(mc_master_service *svc)
{
    static const mc_master_uuid ids[] = {{1, 1}, {2, 2}, {3, 3}};
    mc_master_ping_result *pr = malloc(sizeof *pr);
    assert_non_null(pr);
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        assert_int_equal(mc_master_service_ping_fences(svc, ids[i], NULL, pr), MC_OK);
        mc_master_ping_request req = {pr->writer_fences, pr->n_writer_fences,
                                      pr->target_fences, pr->n_target_fences};
        mc_master_ping_result *pr2 = malloc(sizeof *pr2);
        assert_non_null(pr2);
        assert_int_equal(mc_master_service_ping_fences(svc, ids[i], &req, pr2), MC_OK);
        free(pr2);
    }
    free(pr);
}

/* ---- config and keys ---- */

static void test_config(void **state)
{
    (void)state;
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    assert_int_equal(cfg.default_kv_lease_ttl, 10000);
    assert_int_equal(cfg.default_kv_soft_pin_ttl, 1800000);
    assert_true(cfg.allow_evict_soft_pinned_objects);
    assert_true(cfg.eviction_ratio == 0.05);
    assert_true(cfg.eviction_high_watermark_ratio == 0.90);
    assert_int_equal(cfg.client_ttl, 10);
    assert_int_equal(cfg.put_start_discard_timeout_sec, 30);
    assert_int_equal(cfg.put_start_release_timeout_sec, 600);
    mc_master_service *svc;
    mc_master_config bad = cfg;
    bad.eviction_ratio = 1.5;
    assert_int_equal(mc_master_service_create(&bad, &svc), MC_INVALID_PARAMS);
    bad = cfg;
    bad.shard_count = 3;
    assert_int_equal(mc_master_service_create(&bad, &svc), MC_INVALID_PARAMS);
    bad = cfg;
    bad.alloc_alignment = 48;
    assert_int_equal(mc_master_service_create(&bad, &svc), MC_INVALID_PARAMS);
    bad = cfg;
    bad.put_start_release_timeout_sec = 10; /* below discard */
    assert_int_equal(mc_master_service_create(&bad, &svc), MC_INVALID_PARAMS);
    assert_int_equal(mc_master_strategy_parse("random"), MC_MASTER_STRATEGY_RANDOM);
    assert_int_equal(mc_master_strategy_parse("free_ratio_first"),
                     MC_MASTER_STRATEGY_FREE_RATIO_FIRST);
    assert_int_equal(mc_master_strategy_parse("cxl"), -1);
    assert_string_equal(mc_master_op_name(MC_MASTER_OP_PUT_START), "put_start");
    assert_string_equal(mc_master_batch_op_name(MC_MASTER_BATCH_EXIST_KEY), "batch_exist_key");
    assert_null(mc_master_op_name(MC_MASTER_OP_COUNT));
    mc_master_service_destroy(NULL);
}

static void test_keys(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "h:1", 1 << 20, 64 * MIB, C1);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    char *big = malloc(MC_MASTER_KEY_MAX + 1);
    memset(big, 'k', MC_MASTER_KEY_MAX + 1);
    /* empty, too long, NULL */
    assert_int_equal(mc_master_service_put_start(svc, C1, "", 0, 10, &c, &out),
                     MC_INVALID_PARAMS);
    assert_int_equal(
        mc_master_service_put_start(svc, C1, big, MC_MASTER_KEY_MAX + 1, 10, &c, &out),
        MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_put_start(svc, C1, NULL, 3, 10, &c, &out),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_get_replica_list(svc, "", 0, &out), MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_exist_key(svc, big, MC_MASTER_KEY_MAX + 1),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_remove(svc, "", 0, true), MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_put_end(svc, C1, "", 0), MC_INVALID_PARAMS);
    assert_int_equal(stats(svc).key_count, 0);
    /* the longest key works */
    assert_int_equal(mc_master_service_put_start(svc, C1, big, MC_MASTER_KEY_MAX, 10, &c, &out),
                     MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, big, MC_MASTER_KEY_MAX), MC_OK);
    assert_int_equal(mc_master_service_exist_key(svc, big, MC_MASTER_KEY_MAX), 1);
    /* binary keys: NULs inside; keys equal up to a NUL are distinct */
    const char k1[] = {'a', 0, 'b'}, k2[] = {'a', 0, 'c'}, k3[] = {'a'};
    assert_int_equal(mc_master_service_put_start(svc, C1, k1, 3, 100, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, k1, 3), MC_OK);
    assert_int_equal(mc_master_service_exist_key(svc, k1, 3), 1);
    assert_int_equal(mc_master_service_exist_key(svc, k2, 3), 0);
    assert_int_equal(mc_master_service_exist_key(svc, k3, 1), 0);
    assert_int_equal(mc_master_service_put_start(svc, C1, k2, 3, 200, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, k2, 3), MC_OK);
    mc_master_key_info info;
    assert_int_equal(mc_master_service_query_key(svc, k2, 3, &info), MC_OK);
    assert_int_equal(info.size, 200);
    assert_int_equal(mc_master_service_query_key(svc, k1, 3, &info), MC_OK);
    assert_int_equal(info.size, 100);
    assert_int_equal(stats(svc).key_count, 3);
    free(big);
    mc_master_service_destroy(svc);
}

/* ---- put lifecycle ---- */

static void test_put_lifecycle(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    /* nothing mounted */
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 100, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    mount(svc, 7, "host:1", 0x10000, 16 * MIB, C1);
    c.replica_num = 0;
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 100, &c, &out),
                     MC_INVALID_PARAMS);
    c.replica_num = 1;
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 100, &c, &out), MC_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.replicas[0].status, MC_MASTER_REPLICA_PROCESSING);
    assert_int_equal(out.replicas[0].size, 100);
    assert_int_equal(out.replicas[0].segment_id.first, 7);
    assert_string_equal(out.replicas[0].transport_endpoint, "host:1");
    assert_string_equal(out.replicas[0].protocol, "tcp");
    assert_true(out.replicas[0].address >= 0x10000);
    assert_true(out.replicas[0].address + 100 <= 0x10000 + 16 * MIB);
    assert_int_equal(out.replicas[0].address % 64, 0);
    uint64_t addr = out.replicas[0].address;

    /* in flight: invisible to readers, a second writer is refused */
    assert_int_equal(get(svc, "k", NULL), MC_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_service_exist_key(svc, "k", 1), 0);
    assert_int_equal(mc_master_service_put_start(svc, C2, "k", 1, 100, &c, &out),
                     MC_OBJECT_ALREADY_EXISTS);
    assert_int_equal(stats(svc).processing_key_count, 1);
    /* only the writer may finish it */
    assert_int_equal(mc_master_service_put_end(svc, C2, "k", 1), MC_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_service_put_revoke(svc, C2, "k", 1), MC_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_service_put_end(svc, C1, "k", 1), MC_OK);
    assert_int_equal(stats(svc).processing_key_count, 0);
    assert_int_equal(mc_master_service_put_end(svc, C1, "k", 1), MC_INVALID_WRITE);
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "k", 1), MC_INVALID_WRITE);
    assert_int_equal(mc_master_service_put_end(svc, C1, "nope", 4), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "nope", 4), MC_OBJECT_NOT_FOUND);

    assert_int_equal(get(svc, "k", &out), MC_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.replicas[0].status, MC_MASTER_REPLICA_COMPLETE);
    assert_int_equal(out.replicas[0].address, addr);
    assert_int_equal(out.lease_ttl_ms, 500);
    assert_int_equal(mc_master_service_exist_key(svc, "k", 1), 1);
    /* a complete object is never overwritten by put */
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 100, &c, &out),
                     MC_OBJECT_ALREADY_EXISTS);
    assert_int_equal(get(svc, "missing", &out), MC_OBJECT_NOT_FOUND);
    assert_int_equal(out.n, 0);
    assert_int_equal(mc_master_service_exist_key(svc, "missing", 7), 0);

    /* revoke frees the space */
    mc_master_stats st = stats(svc);
    assert_int_equal(st.allocated_bytes, 128);
    assert_int_equal(mc_master_service_put_start(svc, C1, "r", 1, 5000, &c, &out), MC_OK);
    assert_int_equal(stats(svc).allocated_bytes, 128 + 5056);
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "r", 1), MC_OK);
    fence_settle(svc); /* quarantined until the fences are acknowledged */
    assert_int_equal(stats(svc).allocated_bytes, 128);
    assert_false(exists_quiet(svc, "r"));
    /* too big for any segment: no space, immediately */
    assert_int_equal(mc_master_service_put_start(svc, C1, "huge", 4, 32 * MIB, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    c.replica_num = 1;
    assert_int_equal(mc_master_service_put_start(svc, C1, "over", 4,
                                                 MC_MASTER_SEGMENT_MAX_SIZE + 1, &c, &out),
                     MC_INVALID_PARAMS);

    st = stats(svc);
    assert_int_equal(st.key_count, 1);
    assert_int_equal(st.requests[MC_MASTER_OP_PUT_START], 8);
    assert_int_equal(st.failures[MC_MASTER_OP_PUT_START], 6);
    assert_int_equal(st.put_start_alloc_failures, 2);
    assert_int_equal(st.requests[MC_MASTER_OP_GET_REPLICA_LIST], 3);
    assert_int_equal(st.failures[MC_MASTER_OP_GET_REPLICA_LIST], 2);
    mc_master_service_destroy(svc);
}

static void test_replicas_distinct_and_preferred(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 1ull << 30, 8 * MIB, C1);
    mount(svc, 2, "b:1", 2ull << 30, 8 * MIB, C1);
    mount(svc, 3, "c:1", 3ull << 30, 8 * MIB, C2);
    mount(svc, 4, "c:1", 4ull << 30, 8 * MIB, C2); /* a second chunk of c:1 */
    mc_master_put_config c = pcfg(3);
    mc_master_replica_list out;
    for (int i = 0; i < 20; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(mc_master_service_put_start(svc, C1, k, strlen(k), 1000, &c, &out), 0);
        assert_int_equal(out.n, 3);
        /* distinct segment names */
        for (uint32_t a = 0; a < out.n; a++)
            for (uint32_t b = a + 1; b < out.n; b++)
                assert_string_not_equal(out.replicas[a].transport_endpoint,
                                        out.replicas[b].transport_endpoint);
        assert_int_equal(mc_master_service_put_end(svc, C1, k, strlen(k)), MC_OK);
    }
    assert_int_equal(stats(svc).put_start_partial_allocations, 0);
    /* more than there are names: best effort, counted */
    c.replica_num = 5;
    assert_int_equal(mc_master_service_put_start(svc, C1, "five", 4, 1000, &c, &out), MC_OK);
    assert_int_equal(out.n, 3);
    assert_int_equal(stats(svc).put_start_partial_allocations, 1);
    /* huge replica_num is clamped, still best effort */
    c.replica_num = 1000;
    assert_int_equal(mc_master_service_put_start(svc, C1, "many", 4, 1000, &c, &out), MC_OK);
    assert_int_equal(out.n, 3);
    /* preferred first, unknown names skipped */
    const char *pref[] = {"nosuch:9", "b:1"};
    c.replica_num = 1;
    c.preferred_segments = pref;
    c.n_preferred = 2;
    for (int i = 0; i < 10; i++) {
        char k[16];
        snprintf(k, sizeof k, "p%d", i);
        assert_int_equal(mc_master_service_put_start(svc, C1, k, strlen(k), 1000, &c, &out), 0);
        assert_int_equal(out.n, 1);
        assert_string_equal(out.replicas[0].transport_endpoint, "b:1");
        assert_int_equal(out.replicas[0].segment_id.first, 2);
    }
    c.replica_num = 2;
    assert_int_equal(mc_master_service_put_start(svc, C1, "p2x", 3, 1000, &c, &out), 0);
    assert_int_equal(out.n, 2);
    assert_string_equal(out.replicas[0].transport_endpoint, "b:1");
    /* bad preferred lists */
    const char *badp[] = {NULL};
    c.preferred_segments = badp;
    c.n_preferred = 1;
    assert_int_equal(mc_master_service_put_start(svc, C1, "bad", 3, 1, &c, &out),
                     MC_INVALID_PARAMS);
    c.n_preferred = MC_MASTER_MAX_PREFERRED + 1;
    assert_int_equal(mc_master_service_put_start(svc, C1, "bad", 3, 1, &c, &out),
                     MC_INVALID_PARAMS);
    mc_master_service_destroy(svc);
}

static void test_free_ratio_first(void **state)
{
    (void)state;
    mc_master_config cfg = base_cfg();
    cfg.allocation_strategy = MC_MASTER_STRATEGY_FREE_RATIO_FIRST;
    mc_master_service *svc = make(&cfg);
    mount(svc, 1, "a:1", 0, 8 * MIB, C1);
    mount(svc, 2, "b:1", 1ull << 32, 8 * MIB, C1);
    mc_master_put_config c = pcfg(1);
    const char *pref[] = {"a:1"};
    c.preferred_segments = pref;
    c.n_preferred = 1;
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "fill", 4, 4 * MIB, &c, &out), 0);
    assert_int_equal(out.replicas[0].segment_id.first, 1);
    /* a is half full, b empty: free_ratio_first always picks b */
    c.n_preferred = 0;
    for (int i = 0; i < 8; i++) {
        char k[16];
        snprintf(k, sizeof k, "f%d", i);
        assert_int_equal(mc_master_service_put_start(svc, C1, k, strlen(k), 64 * KIB, &c, &out),
                         0);
        assert_int_equal(out.replicas[0].segment_id.first, 2);
    }
    mc_master_service_destroy(svc);
}

static void test_zero_size(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 4096, 1 * MIB, C1);
    assert_int_equal(put(svc, "empty", 0), MC_OK);
    assert_int_equal(mc_master_service_exist_key(svc, "empty", 5), 1);
    mc_master_replica_list out;
    assert_int_equal(get(svc, "empty", &out), MC_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.replicas[0].size, 0);
    assert_int_equal(out.replicas[0].address, 4096);
    assert_int_equal(stats(svc).allocated_bytes, 0);
    assert_int_equal(put(svc, "empty", 0), MC_OBJECT_ALREADY_EXISTS);
    /* survives eviction passes (frees nothing), removed by remove */
    mc_master_service_evict(svc, 1 * MIB);
    assert_true(exists_quiet(svc, "empty"));
    fake_now += 1000;
    assert_int_equal(mc_master_service_remove(svc, "empty", 5, false), MC_OK);
    assert_int_equal(stats(svc).key_count, 0);
    mc_master_service_destroy(svc);

    /* many old zero-size objects in one shard do not hide the evictable ones */
    mc_master_config cfg = base_cfg();
    cfg.shard_count = 1;
    svc = make(&cfg);
    mount(svc, 1, "a:1", 0, 1 * MIB, C1);
    for (int i = 0; i < 200; i++) {
        char k[16];
        snprintf(k, sizeof k, "z%d", i);
        assert_int_equal(put(svc, k, 0), MC_OK);
    }
    for (int i = 0; i < 16; i++) {
        char k[16];
        snprintf(k, sizeof k, "big%d", i);
        fake_now += 10;
        assert_int_equal(put(svc, k, 64 * KIB), MC_OK);
    }
    assert_int_equal(put(svc, "more", 64 * KIB), MC_OK);
    assert_false(exists_quiet(svc, "big0"));
    assert_int_equal(stats(svc).key_count, 216);
    mc_master_service_destroy(svc);
}

/* ---- leases and removal ---- */

static void test_lease_and_remove(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, C1);
    assert_int_equal(put(svc, "k", 1000), MC_OK);
    /* no lease yet: removable */
    assert_int_equal(mc_master_service_remove(svc, "k", 1, false), MC_OK);
    assert_int_equal(mc_master_service_remove(svc, "k", 1, false), MC_OBJECT_NOT_FOUND);
    assert_int_equal(put(svc, "k", 1000), MC_OK);
    assert_int_equal(get(svc, "k", NULL), MC_OK);
    assert_int_equal(mc_master_service_remove(svc, "k", 1, false), MC_OBJECT_HAS_LEASE);
    fake_now += 499;
    assert_int_equal(mc_master_service_remove(svc, "k", 1, false), MC_OBJECT_HAS_LEASE);
    mc_master_key_info info;
    assert_int_equal(mc_master_service_query_key(svc, "k", 1, &info), MC_OK);
    assert_int_equal(info.lease_left_ms, 1);
    fake_now += 1;
    assert_int_equal(mc_master_service_remove(svc, "k", 1, false), MC_OK);
    /* exist_key grants a lease too; force overrides it */
    assert_int_equal(put(svc, "k", 1000), MC_OK);
    assert_int_equal(mc_master_service_exist_key(svc, "k", 1), 1);
    assert_int_equal(mc_master_service_remove(svc, "k", 1, false), MC_OBJECT_HAS_LEASE);
    assert_int_equal(mc_master_service_remove(svc, "k", 1, true), MC_OK);
    /* a write in flight can't be removed, even with force */
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "w", 1, 10, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_remove(svc, "w", 1, true), MC_REPLICA_IS_NOT_READY);
    /* hard pins don't stop remove */
    c.with_hard_pin = true;
    assert_int_equal(mc_master_service_put_start(svc, C1, "h", 1, 10, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, "h", 1), MC_OK);
    assert_int_equal(mc_master_service_remove(svc, "h", 1, false), MC_OK);
    assert_int_equal(stats(svc).failures[MC_MASTER_OP_REMOVE], 5);
    mc_master_service_destroy(svc);
}

static void test_remove_all(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, C1);
    assert_int_equal(put(svc, "plain", 100), MC_OK);
    assert_int_equal(put(svc, "leased", 100), MC_OK);
    assert_int_equal(get(svc, "leased", NULL), MC_OK);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    c.with_hard_pin = true;
    assert_int_equal(mc_master_service_put_start(svc, C1, "hard", 4, 100, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, "hard", 4), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, C1, "inflight", 8, 100, &c, &out), MC_OK);
    uint64_t n = 99;
    assert_int_equal(mc_master_service_remove_all(svc, false, &n), MC_OK);
    assert_int_equal(n, 2); /* plain, hard */
    assert_true(exists_quiet(svc, "leased"));
    assert_true(exists_quiet(svc, "inflight"));
    assert_int_equal(mc_master_service_remove_all(svc, true, &n), MC_OK);
    assert_int_equal(n, 1); /* leased; the write in flight stays */
    assert_int_equal(stats(svc).key_count, 1);
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "inflight", 8), MC_OK);
    fence_settle(svc); /* the revoked write's quarantine ends */
    /* the leased object's space waits for its lease to end */
    assert_int_equal(stats(svc).allocated_bytes, 128);
    fake_now += 500;
    mc_master_service_tick(svc);
    assert_int_equal(stats(svc).allocated_bytes, 0);
    mc_master_service_destroy(svc);
}

/* A forced remove under a reader's lease must not hand the reader's bytes to a new put
 * before the lease ends (API.md §5): the key goes at once, the space at the deadline. */
static void test_force_remove_defers_free(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL); /* lease 500 ms */
    /* one segment that holds exactly one 4 KiB object: any reuse would be visible */
    mount(svc, 1, "a:1", 1 << 20, 4 * KIB, C1);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 4 * KIB, &c, &out), MC_OK);
    uint64_t addr = out.replicas[0].address;
    assert_int_equal(mc_master_service_put_end(svc, C1, "k", 1), MC_OK);
    uint64_t t0 = fake_now;
    assert_int_equal(get(svc, "k", NULL), MC_OK);        /* lease until t0 + 500 */
    fake_now += 300;
    assert_int_equal(mc_master_service_exist_key(svc, "k", 1), 1); /* now t0 + 800 */
    fake_now += 100;
    assert_int_equal(mc_master_service_remove(svc, "k", 1, true), MC_OK);
    /* gone for new readers and writers... */
    assert_false(exists_quiet(svc, "k"));
    assert_int_equal(get(svc, "k", NULL), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_service_remove(svc, "k", 1, true), MC_OBJECT_NOT_FOUND);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.key_count, 0);
    assert_int_equal(st.allocated_bytes, 4 * KIB); /* ...but its space is still held */
    assert_int_equal(st.deferred_free_keys, 1);
    assert_int_equal(st.deferred_free_bytes, 4 * KIB);
    assert_int_equal(mc_master_service_put_start(svc, C1, "n", 1, 4 * KIB, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 4 * KIB, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    fake_now = t0 + 799;
    mc_master_service_tick(svc);
    assert_int_equal(stats(svc).deferred_free_keys, 1);
    assert_int_equal(mc_master_service_put_start(svc, C1, "n", 1, 4 * KIB, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    /* the last lease ends: the next tick frees the space, and a put reuses it */
    fake_now = t0 + 800;
    mc_master_service_tick(svc);
    st = stats(svc);
    assert_int_equal(st.deferred_free_keys, 0);
    assert_int_equal(st.deferred_free_bytes, 0);
    assert_int_equal(st.allocated_bytes, 0);
    assert_int_equal(mc_master_service_put_start(svc, C1, "n", 1, 4 * KIB, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].address, addr);
    assert_int_equal(mc_master_service_put_end(svc, C1, "n", 1), MC_OK);

    /* Without a lease the space is freed at once, as before. */
    fake_now += 1000;
    assert_int_equal(mc_master_service_remove(svc, "n", 1, false), MC_OK);
    assert_int_equal(stats(svc).allocated_bytes, 0);
    assert_int_equal(stats(svc).deferred_free_keys, 0);

    /* A bigger segment: a put during the lease lands elsewhere, one after it reuses. */
    mount(svc, 2, "b:1", 1ull << 32, 16 * MIB, C1);
    mc_master_uuid a = {1, 1};
    assert_int_equal(mc_master_service_unmount_segment(svc, a, C1), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 64 * KIB, &c, &out), MC_OK);
    addr = out.replicas[0].address;
    assert_int_equal(mc_master_service_put_end(svc, C1, "k", 1), MC_OK);
    assert_int_equal(get(svc, "k", NULL), MC_OK);
    mc_master_key kk = {"k", 1};
    int rs;
    assert_int_equal(mc_master_service_batch_remove(svc, &kk, 1, true, &rs), MC_OK);
    assert_int_equal(rs, MC_OK);
    for (int i = 0; i < 64; i++) { /* every size class near it, several times */
        char key[16];
        snprintf(key, sizeof key, "x%d", i);
        uint64_t sz = (uint64_t)(1 + i % 8) * 16 * KIB;
        assert_int_equal(mc_master_service_put_start(svc, C1, key, strlen(key), sz, &c, &out),
                         MC_OK);
        uint64_t a0 = out.replicas[0].address;
        assert_true(a0 + sz <= addr || a0 >= addr + 64 * KIB);
        assert_int_equal(mc_master_service_put_revoke(svc, C1, key, strlen(key)), MC_OK);
        fence_settle(svc);
    }
    fake_now += 500;
    mc_master_service_tick(svc);
    assert_int_equal(mc_master_service_put_start(svc, C1, "y", 1, 64 * KIB, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].address, addr);
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "y", 1), MC_OK);
    fence_settle(svc);
    assert_int_equal(stats(svc).allocated_bytes, 0);
    mc_master_service_destroy(svc);
}

/* The same for remove_all(force) and remove_by_regex(force), and a deferred object whose
 * segment goes away (or whose service is destroyed) before its lease ends. */
static void test_force_remove_all_regex_defer(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 1 << 20, 8 * KIB, C1);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    assert_int_equal(put(svc, "r1", 4 * KIB), MC_OK);
    assert_int_equal(put(svc, "r2", 4 * KIB), MC_OK);
    assert_int_equal(get(svc, "r1", NULL), MC_OK);
    uint64_t n = 0;
    assert_int_equal(mc_master_service_remove_by_regex(svc, "^r", 2, true, &n), MC_OK);
    assert_int_equal(n, 2);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.key_count, 0);
    assert_int_equal(st.deferred_free_keys, 1); /* r1 (leased); r2 was freed at once */
    assert_int_equal(st.allocated_bytes, 4 * KIB);
    assert_int_equal(put(svc, "a", 4 * KIB), MC_OK); /* r2's space */
    assert_int_equal(get(svc, "a", NULL), MC_OK);    /* (so eviction can't take it) */
    assert_int_equal(put(svc, "b", 4 * KIB), MC_NO_AVAILABLE_HANDLE);
    fake_now += 400;
    assert_int_equal(get(svc, "a", NULL), MC_OK); /* a's lease outlives r1's */
    fake_now += 100;
    mc_master_service_tick(svc); /* frees r1 (and can't evict a) */
    assert_int_equal(put(svc, "b", 4 * KIB), MC_OK);
    assert_int_equal(get(svc, "a", NULL), MC_OK);
    assert_int_equal(mc_master_service_remove_all(svc, true, &n), MC_OK);
    assert_int_equal(n, 2);
    st = stats(svc);
    assert_int_equal(st.deferred_free_keys, 1);
    assert_int_equal(st.allocated_bytes, 4 * KIB);
    assert_int_equal(put(svc, "c", 8 * KIB), MC_NO_AVAILABLE_HANDLE);
    fake_now += 500;
    mc_master_service_tick(svc);
    assert_int_equal(put(svc, "c", 8 * KIB), MC_OK);
    /* unmounting drops the deferred replicas with the segment */
    mount(svc, 2, "b:1", 1ull << 32, 16 * MIB, C2);
    const char *pref[] = {"b:1"};
    c.preferred_segments = pref;
    c.n_preferred = 1;
    c.replica_num = 2;
    assert_int_equal(mc_master_service_put_start(svc, C2, "two", 3, 4 * KIB, &c, &out), MC_OK);
    assert_int_equal(out.n, 1); /* a:1 is full */
    assert_int_equal(mc_master_service_put_end(svc, C2, "two", 3), MC_OK);
    assert_int_equal(get(svc, "two", NULL), MC_OK);
    assert_int_equal(get(svc, "c", NULL), MC_OK);
    assert_int_equal(mc_master_service_remove_all(svc, true, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(stats(svc).deferred_free_keys, 2);
    mc_master_uuid b = {2, 2};
    assert_int_equal(mc_master_service_unmount_segment(svc, b, C2), MC_OK);
    st = stats(svc);
    assert_int_equal(st.deferred_free_keys, 1); /* "c" on a:1 still waits */
    assert_int_equal(st.deferred_free_bytes, 8 * KIB);
    assert_int_equal(st.allocated_bytes, 8 * KIB);
    mount(svc, 3, "c:1", 1ull << 33, 16 * MIB, C2); /* reuses b's slot */
    assert_int_equal(put(svc, "d", 4 * KIB), MC_OK);
    mc_master_service_tick(svc); /* nothing due yet */
    assert_int_equal(stats(svc).deferred_free_keys, 1);
    /* destroyed with a deferred object: nothing leaks (ASan) */
    mc_master_service_destroy(svc);
}

/* The index under load in one shard: growth past 2^16 slots (where an entry's home comes
 * from the object instead of the slot), removal in the middle of clusters, batch calls
 * (which hash ahead), regex removal over the whole table, re-insertion. */
static void check_index(size_t nkeys)
{
    mc_master_config cfg = base_cfg();
    cfg.shard_count = 1;
    mc_master_service *svc = make(&cfg);
    mount(svc, 1, "a:1", 0, 16 * MIB, C1);
    char key[32];
    for (size_t i = 0; i < nkeys; i++) {
        snprintf(key, sizeof key, "key-%zu", i);
        assert_int_equal(put(svc, key, 0), MC_OK);
    }
    assert_int_equal(stats(svc).key_count, nkeys);
    for (size_t i = 0; i < nkeys; i += 3) {
        snprintf(key, sizeof key, "key-%zu", i);
        assert_int_equal(mc_master_service_remove(svc, key, strlen(key), false), MC_OK);
    }
    /* every key answers as it should, one by one and in batches */
    static char bkeys[128][32];
    mc_master_key keys[128];
    int res[128];
    for (size_t i = 0; i < nkeys; i += 128) {
        size_t n = nkeys - i < 128 ? nkeys - i : 128;
        for (size_t k = 0; k < n; k++) {
            snprintf(bkeys[k], sizeof bkeys[k], "key-%zu", i + k);
            keys[k] = (mc_master_key){bkeys[k], strlen(bkeys[k])};
        }
        assert_int_equal(mc_master_service_batch_exist_key(svc, keys, n, res), MC_OK);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(res[k], (i + k) % 3 ? 1 : 0);
        if (i % 1024 == 0)
            assert_int_equal(exists_quiet(svc, bkeys[0]), i % 3 != 0);
    }
    size_t left = nkeys - (nkeys + 2) / 3;
    assert_int_equal(stats(svc).key_count, left);
    assert_int_equal(mc_master_service_foreach_key(svc, NULL, NULL), left);
    /* removed keys can be put again; then remove half of everything by regex */
    for (size_t i = 0; i < nkeys; i += 3) {
        snprintf(key, sizeof key, "key-%zu", i);
        assert_int_equal(put(svc, key, 0), MC_OK);
    }
    fake_now += 1000;
    uint64_t n = 0;
    assert_int_equal(mc_master_service_remove_by_regex(svc, "[02468]$", 8, false, &n), MC_OK);
    assert_int_equal(n, (nkeys + 1) / 2);
    for (size_t i = 0; i < nkeys; i++) {
        snprintf(key, sizeof key, "key-%zu", i);
        assert_int_equal(mc_master_service_exist_key(svc, key, strlen(key)), (int)(i % 2));
    }
    assert_int_equal(mc_master_service_remove_all(svc, true, &n), MC_OK);
    assert_int_equal(n, nkeys / 2);
    assert_int_equal(stats(svc).key_count, 0);
    assert_int_equal(mc_master_service_foreach_key(svc, NULL, NULL), 0);
    mc_master_service_destroy(svc);
}

static void test_index_small(void **state)
{
    (void)state;
    check_index(5000);
}

static void test_index_large(void **state)
{
    (void)state;
    check_index(120000); /* > 3/4 of 2^17 slots: the table reaches 2^18 */
}

typedef struct seen {
    int n;
    char keys[8][32];
} seen;

static int regex_cb(const void *key, size_t len, const mc_master_replica_list *list, void *ctx)
{
    seen *s = ctx;
    assert_true(list->n >= 1);
    assert_int_equal(list->replicas[0].status, MC_MASTER_REPLICA_COMPLETE);
    assert_true(len < 32 && s->n < 8);
    memcpy(s->keys[s->n], key, len);
    s->keys[s->n++][len] = 0;
    return 0;
}

static void test_regex(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, C1);
    assert_int_equal(put(svc, "layer/1", 10), MC_OK);
    assert_int_equal(put(svc, "layer/2", 10), MC_OK);
    assert_int_equal(put(svc, "other/1", 10), MC_OK);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "layer/3", 7, 10, &c, &out), MC_OK);
    seen s = {0};
    assert_int_equal(
        mc_master_service_get_replica_list_by_regex(svc, "^layer/", 7, regex_cb, &s), MC_OK);
    assert_int_equal(s.n, 2); /* the write in flight is not listed */
    /* unanchored search */
    memset(&s, 0, sizeof s);
    assert_int_equal(mc_master_service_get_replica_list_by_regex(svc, "/1", 2, regex_cb, &s),
                     MC_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(mc_master_service_get_replica_list_by_regex(svc, "(", 1, regex_cb, &s),
                     MC_INVALID_PARAMS);
    uint64_t n = 0;
    assert_int_equal(mc_master_service_remove_by_regex(svc, "[", 1, false, &n),
                     MC_INVALID_PARAMS);
    /* regex reads granted leases */
    assert_int_equal(mc_master_service_remove_by_regex(svc, "^layer/", 7, false, &n), MC_OK);
    assert_int_equal(n, 0);
    fake_now += 1000;
    assert_int_equal(mc_master_service_remove_by_regex(svc, "^layer/", 7, false, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_true(exists_quiet(svc, "other/1"));
    assert_true(exists_quiet(svc, "layer/3"));
    /* binary keys are matched as bytes */
    const char bk[] = {'x', 0, 'y'};
    assert_int_equal(mc_master_service_put_start(svc, C1, bk, 3, 10, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, bk, 3), MC_OK);
    assert_int_equal(mc_master_service_remove_by_regex(svc, "x\\x00y", 6, true, &n), MC_OK);
    assert_int_equal(n, 1);
    mc_master_service_destroy(svc);
}

/* A pattern that backtracks past PCRE2's match limit on a key fails the whole call at
 * that key (before: every key paid the limit, 2-4 ms each, and the call answered OK
 * with no match after seconds, long enough over a large index for the master to expire
 * clients); nothing is removed and every object stays. */
static void test_regex_costly_pattern_fails(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, C1);
    char k[80];
    for (int i = 0; i < 64; i++) {
        snprintf(k, sizeof k, "%016x%016x%016x%016x", i * 2654435761u, i + 1, i * 7, i);
        assert_int_equal(put(svc, k, 10), MC_OK);
    }
    static const char bad[] = "^([0-9a-f]|[0-9a-f][0-9a-f])+$\\W";
    seen s = {0};
    assert_int_equal(mc_master_service_get_replica_list_by_regex(svc, bad, strlen(bad),
                                                                 regex_cb, &s),
                     MC_INVALID_PARAMS);
    assert_int_equal(s.n, 0);
    uint64_t n = 99;
    fake_now += 1000;
    assert_int_equal(mc_master_service_remove_by_regex(svc, bad, strlen(bad), true, &n),
                     MC_INVALID_PARAMS);
    assert_int_equal(n, 0);
    for (int i = 0; i < 64; i++) {
        snprintf(k, sizeof k, "%016x%016x%016x%016x", i * 2654435761u, i + 1, i * 7, i);
        assert_true(exists_quiet(svc, k));
    }
    /* a plain pattern over the same keys still works */
    assert_int_equal(mc_master_service_remove_by_regex(svc, "^0000000000000000", 16, true, &n),
                     MC_OK);
    assert_int_equal(n, 1);
    mc_master_service_destroy(svc);
}

/* ---- eviction ---- */

#define OBJ (64 * KIB)

static void fill_keys(mc_master_service *svc, const char *prefix, int from, int to)
{
    for (int i = from; i < to; i++) {
        char k[32];
        snprintf(k, sizeof k, "%s%d", prefix, i);
        fake_now += 10;
        assert_int_equal(put(svc, k, OBJ), MC_OK);
    }
}

static bool has(mc_master_service *svc, const char *prefix, int i)
{
    char k[32];
    snprintf(k, sizeof k, "%s%d", prefix, i);
    return exists_quiet(svc, k);
}

/* One 1 MiB segment holds 16 objects of 64 KiB. The 17th put evicts inline (sync
 * eviction): the least recently used object goes, recently read ones stay. */
static void test_eviction_lru_order(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 1 * MIB, C1);
    fill_keys(svc, "k", 0, 16);
    assert_int_equal(stats(svc).allocated_bytes, 1 * MIB);
    /* read k0..k3 (most recently used now); let the leases lapse */
    for (int i = 0; i < 4; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        fake_now += 10;
        assert_int_equal(get(svc, k, NULL), MC_OK);
    }
    fake_now += 1000;
    assert_int_equal(put(svc, "new", OBJ), MC_OK);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.evicted_keys, 1); /* 5% of 1 MiB rounds up to one object */
    assert_int_equal(st.eviction_attempts, 1);
    assert_false(has(svc, "k", 4)); /* the oldest unread object */
    for (int i = 0; i < 4; i++)
        assert_true(has(svc, "k", i));
    for (int i = 5; i < 16; i++)
        assert_true(has(svc, "k", i));
    /* ask for more: evicted strictly in LRU order */
    assert_int_equal(mc_master_service_evict(svc, 3 * OBJ), 3 * OBJ);
    for (int i = 5; i < 8; i++)
        assert_false(has(svc, "k", i));
    for (int i = 8; i < 16; i++)
        assert_true(has(svc, "k", i));
    for (int i = 0; i < 4; i++)
        assert_true(has(svc, "k", i));
    mc_master_service_destroy(svc);
}

/* Leased, hard-pinned and in-flight objects are never evicted; with nothing evictable a
 * put fails with NO_AVAILABLE_HANDLE and nothing is lost. */
static void test_eviction_exclusions(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 1 * MIB, C1);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    fill_keys(svc, "leased", 0, 6);
    for (int i = 0; i < 6; i++) {
        char k[16];
        snprintf(k, sizeof k, "leased%d", i);
        fake_now += 1;
        assert_int_equal(get(svc, k, NULL), MC_OK);
    }
    c.with_hard_pin = true;
    for (int i = 0; i < 5; i++) {
        char k[16];
        snprintf(k, sizeof k, "hard%d", i);
        assert_int_equal(mc_master_service_put_start(svc, C1, k, strlen(k), OBJ, &c, &out), 0);
        assert_int_equal(mc_master_service_put_end(svc, C1, k, strlen(k)), MC_OK);
    }
    c.with_hard_pin = false;
    for (int i = 0; i < 5; i++) {
        char k[16];
        snprintf(k, sizeof k, "wip%d", i);
        assert_int_equal(mc_master_service_put_start(svc, C1, k, strlen(k), OBJ, &c, &out), 0);
    }
    assert_int_equal(mc_master_service_put_start(svc, C1, "x", 1, OBJ, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(mc_master_service_evict(svc, 1 * MIB), 0);
    mc_master_service_tick(svc);
    assert_int_equal(stats(svc).key_count, 16);
    assert_int_equal(stats(svc).evicted_keys, 0);
    /* once the leases lapse the leased ones are the only candidates */
    fake_now += 1000;
    assert_int_equal(mc_master_service_put_start(svc, C1, "x", 1, OBJ, &c, &out), MC_OK);
    assert_int_equal(stats(svc).evicted_keys, 1);
    assert_false(has(svc, "leased", 0));
    for (int i = 0; i < 5; i++)
        assert_true(has(svc, "hard", i) && has(svc, "wip", i));
    mc_master_service_destroy(svc);
}

/* Upstream's way (no inline eviction): the failed put flags eviction, the next tick
 * evicts, and a later put succeeds. Also the high watermark trigger. */
static void test_eviction_by_tick(void **state)
{
    (void)state;
    mc_master_config cfg = base_cfg();
    cfg.sync_eviction = false;
    mc_master_service *svc = make(&cfg);
    mount(svc, 1, "a:1", 0, 1 * MIB, C1);
    fill_keys(svc, "k", 0, 14); /* 87.5%: under the watermark */
    mc_master_service_tick(svc);
    assert_int_equal(stats(svc).evicted_keys, 0);
    fill_keys(svc, "k", 14, 15); /* 93.75% > 90% */
    mc_master_service_tick(svc);
    /* free max(5%, 93.75 - 90 + 5 = 8.75%) of 1 MiB -> two objects */
    assert_int_equal(stats(svc).evicted_keys, 2);
    assert_false(has(svc, "k", 0));
    assert_false(has(svc, "k", 1));
    fill_keys(svc, "k", 15, 18);
    assert_int_equal(stats(svc).allocated_bytes, 1 * MIB);
    mc_master_service_destroy(svc);

    /* a full segment under a 100% watermark: only the failed put triggers eviction */
    cfg.eviction_high_watermark_ratio = 1.0;
    svc = make(&cfg);
    mount(svc, 1, "a:1", 0, 1 * MIB, C1);
    fill_keys(svc, "k", 0, 16);
    mc_master_service_tick(svc);
    assert_int_equal(stats(svc).evicted_keys, 0);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "y", 1, OBJ, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(stats(svc).evicted_keys, 0); /* nothing inline */
    mc_master_service_tick(svc);
    assert_int_equal(stats(svc).evicted_keys, 1); /* 5% of 1 MiB: one object */
    assert_false(has(svc, "k", 0));
    assert_int_equal(mc_master_service_put_start(svc, C1, "y", 1, OBJ, &c, &out), MC_OK);
    mc_master_service_destroy(svc);
}

static void test_soft_pin(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 1 * MIB, C1);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    /* TTL only with ENABLE, and at most max_kv_soft_pin_ttl */
    c.soft_pin_ttl_set = true;
    c.soft_pin_ttl_ms = 1000;
    assert_int_equal(mc_master_service_put_start(svc, C1, "s", 1, 10, &c, &out),
                     MC_INVALID_PARAMS);
    c.soft_pin = MC_MASTER_SOFT_PIN_ENABLE;
    c.soft_pin_ttl_ms = 24ull * 3600 * 1000 + 1;
    assert_int_equal(mc_master_service_put_start(svc, C1, "s", 1, 10, &c, &out),
                     MC_INVALID_PARAMS);
    c.soft_pin_ttl_ms = 60000;
    for (int i = 0; i < 8; i++) {
        char k[16];
        snprintf(k, sizeof k, "soft%d", i);
        fake_now += 10;
        assert_int_equal(mc_master_service_put_start(svc, C1, k, strlen(k), OBJ, &c, &out), 0);
        assert_int_equal(mc_master_service_put_end(svc, C1, k, strlen(k)), MC_OK);
    }
    assert_int_equal(stats(svc).soft_pin_key_count, 8);
    fill_keys(svc, "plain", 0, 8); /* newer than every soft-pinned object */
    /* ordinary objects go first even though they are more recent */
    assert_int_equal(mc_master_service_evict(svc, 4 * OBJ), 4 * OBJ);
    for (int i = 0; i < 8; i++)
        assert_true(has(svc, "soft", i));
    for (int i = 0; i < 4; i++)
        assert_false(has(svc, "plain", i));
    /* when nothing else is left, soft-pinned ones go (oldest first) */
    assert_int_equal(mc_master_service_evict(svc, 6 * OBJ), 6 * OBJ);
    for (int i = 0; i < 8; i++)
        assert_false(has(svc, "plain", i));
    assert_false(has(svc, "soft", 0));
    assert_false(has(svc, "soft", 1));
    assert_true(has(svc, "soft", 2));
    mc_master_key_info info;
    assert_int_equal(mc_master_service_query_key(svc, "soft2", 5, &info), MC_OK);
    assert_true(info.soft_pinned);
    assert_true(info.soft_pin_left_ms > 0 && info.soft_pin_left_ms <= 60000);
    /* pins lapse after their TTL (reads don't extend it); a tick notices */
    fake_now += 60000;
    assert_int_equal(get(svc, "soft3", NULL), MC_OK);
    fake_now += 1000;
    for (int i = 0; i < 20; i++)
        mc_master_service_tick(svc);
    assert_int_equal(stats(svc).soft_pin_key_count, 0);
    mc_master_service_destroy(svc);

    /* not allowed: soft-pinned objects are never evicted */
    mc_master_config cfg = base_cfg();
    cfg.allow_evict_soft_pinned_objects = false;
    svc = make(&cfg);
    mount(svc, 1, "a:1", 0, 1 * MIB, C1);
    c.soft_pin_ttl_set = false; /* default TTL: 30 min */
    for (int i = 0; i < 16; i++) {
        char k[16];
        snprintf(k, sizeof k, "soft%d", i);
        assert_int_equal(mc_master_service_put_start(svc, C1, k, strlen(k), OBJ, &c, &out), 0);
        assert_int_equal(mc_master_service_put_end(svc, C1, k, strlen(k)), MC_OK);
    }
    assert_int_equal(mc_master_service_put_start(svc, C1, "x", 1, OBJ, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(stats(svc).key_count, 16);
    /* TTL 0 with ENABLE: an ordinary object */
    c.soft_pin_ttl_set = true;
    c.soft_pin_ttl_ms = 0;
    fake_now += 31 * 60 * 1000; /* every default pin has lapsed too */
    assert_int_equal(mc_master_service_put_start(svc, C1, "z", 1, OBJ, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, "z", 1), MC_OK);
    assert_int_equal(mc_master_service_query_key(svc, "z", 1, &info), MC_OK);
    assert_false(info.soft_pinned);
    mc_master_service_destroy(svc);
}

/* ---- upsert ---- */

static void test_upsert(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, C1);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    /* absent: like put */
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "u", 1, 1000, &c, &out), MC_OK);
    uint64_t addr = out.replicas[0].address;
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "u", 1, 1000, &c, &out),
                     MC_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_master_service_upsert_end(svc, C1, "u", 1), MC_OK);
    /* same size: the same space, in flight again */
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "u", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].address, addr);
    assert_int_equal(out.replicas[0].status, MC_MASTER_REPLICA_PROCESSING);
    assert_int_equal(get(svc, "u", NULL), MC_REPLICA_IS_NOT_READY);
    assert_int_equal(stats(svc).allocated_bytes, 1024);
    assert_int_equal(mc_master_service_upsert_end(svc, C1, "u", 1), MC_OK);
    /* a reader's lease: new space (issue 10 fault 6; upstream also replaces a leased
     * object), the old space kept until the lease ends (test_upsert_under_lease) */
    assert_int_equal(get(svc, "u", NULL), MC_OK);
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "u", 1, 1000, &c, &out), MC_OK);
    assert_true(out.replicas[0].address != addr);
    assert_int_equal(mc_master_service_upsert_end(svc, C1, "u", 1), MC_OK);
    fake_now += 1000;
    mc_master_service_tick(svc); /* the lease ended: the old space is back */
    /* another size: new space, the old freed */
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "u", 1, 3000, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].size, 3000);
    assert_int_equal(stats(svc).allocated_bytes, 3008);
    assert_int_equal(stats(svc).key_count, 1);
    assert_int_equal(mc_master_service_upsert_end(svc, C1, "u", 1), MC_OK);
    assert_int_equal(get(svc, "u", &out), MC_OK);
    assert_int_equal(out.replicas[0].size, 3000);
    fake_now += 1000;
    /* put never replaces */
    assert_int_equal(mc_master_service_put_start(svc, C1, "u", 1, 10, &c, &out),
                     MC_OBJECT_ALREADY_EXISTS);
    /* revoked upsert: the object is gone */
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "u", 1, 3000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_upsert_revoke(svc, C1, "u", 1), MC_OK);
    assert_false(exists_quiet(svc, "u"));
    fence_settle(svc);
    assert_int_equal(stats(svc).allocated_bytes, 0);
    /* soft pin PRESERVE keeps the old pin, DISABLE drops it */
    c.soft_pin = MC_MASTER_SOFT_PIN_ENABLE;
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "p", 1, 10, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_upsert_end(svc, C1, "p", 1), MC_OK);
    c.soft_pin = MC_MASTER_SOFT_PIN_PRESERVE;
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "p", 1, 20, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_upsert_end(svc, C1, "p", 1), MC_OK);
    mc_master_key_info info;
    assert_int_equal(mc_master_service_query_key(svc, "p", 1, &info), MC_OK);
    assert_true(info.soft_pinned);
    assert_int_equal(stats(svc).soft_pin_key_count, 1);
    c.soft_pin = MC_MASTER_SOFT_PIN_DISABLE;
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "p", 1, 20, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_upsert_end(svc, C1, "p", 1), MC_OK);
    assert_int_equal(mc_master_service_query_key(svc, "p", 1, &info), MC_OK);
    assert_false(info.soft_pinned);
    assert_int_equal(stats(svc).soft_pin_key_count, 0);
    mc_master_service_destroy(svc);
}

/* ---- stale writers ---- */

static void test_discard_and_release(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL); /* discard 30 s, release 600 s */
    mount(svc, 1, "a:1", 0, 16 * MIB, C1);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 1000, &c, &out), MC_OK);
    fake_now += 29999;
    assert_int_equal(mc_master_service_put_start(svc, C2, "k", 1, 1000, &c, &out),
                     MC_OBJECT_ALREADY_EXISTS);
    fake_now += 1;
    /* the stale write is pre-empted; its writer can no longer finish it */
    assert_int_equal(mc_master_service_put_start(svc, C2, "k", 1, 2000, &c, &out), MC_OK);
    assert_int_equal(stats(svc).put_discarded, 1);
    fence_settle(svc); /* the pre-empted write's quarantine ends */
    assert_int_equal(stats(svc).allocated_bytes, 2048);
    assert_int_equal(mc_master_service_put_end(svc, C1, "k", 1), MC_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_service_put_end(svc, C2, "k", 1), MC_OK);
    /* abandoned writes are released by tick after put_start_release_timeout_sec */
    assert_int_equal(mc_master_service_put_start(svc, C1, "a", 1, 1000, &c, &out), MC_OK);
    fake_now += 10;
    assert_int_equal(mc_master_service_put_start(svc, C1, "b", 1, 1000, &c, &out), MC_OK);
    fake_now += 600000 - 10;
    mc_master_service_tick(svc);
    assert_false(exists_quiet(svc, "a"));
    assert_true(exists_quiet(svc, "b"));
    fake_now += 10;
    mc_master_service_tick(svc);
    assert_false(exists_quiet(svc, "b"));
    fence_settle(svc);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.put_released, 2);
    assert_int_equal(st.allocated_bytes, 2048);
    assert_int_equal(st.processing_key_count, 0);
    assert_int_equal(st.processing_bytes, 0);
    assert_true(exists_quiet(svc, "k"));
    mc_master_service_destroy(svc);
}

/* ---- segments and clients ---- */

static void test_mount_unmount(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mc_master_segment s = {.id = {1, 1}, .name = "a:1", .base = 0, .size = 0};
    assert_int_equal(mc_master_service_mount_segment(svc, &s, C1), MC_INVALID_PARAMS);
    s.size = MC_MASTER_SEGMENT_MAX_SIZE + 1;
    assert_int_equal(mc_master_service_mount_segment(svc, &s, C1), MC_INVALID_PARAMS);
    s.size = 100;
    s.base = UINT64_MAX - 10;
    assert_int_equal(mc_master_service_mount_segment(svc, &s, C1), MC_INVALID_PARAMS);
    s.base = 0;
    s.name = "";
    assert_int_equal(mc_master_service_mount_segment(svc, &s, C1), MC_INVALID_PARAMS);
    char longname[MC_MASTER_NAME_MAX + 1];
    memset(longname, 'n', sizeof longname - 1);
    longname[MC_MASTER_NAME_MAX] = 0;
    s.name = longname;
    assert_int_equal(mc_master_service_mount_segment(svc, &s, C1), MC_INVALID_PARAMS);
    s.name = "a:1";
    s.te_endpoint = "10.0.0.1:5000";
    s.protocol = "rdma";
    s.size = 8 * MIB;
    assert_int_equal(mc_master_service_mount_segment(svc, &s, C1), MC_OK);
    assert_int_equal(mc_master_service_mount_segment(svc, &s, C1), MC_SEGMENT_ALREADY_EXISTS);
    mount(svc, 2, "b:1", 1ull << 32, 8 * MIB, C2);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.segment_count, 2);
    assert_int_equal(st.total_capacity_bytes, 16 * MIB);
    assert_int_equal(st.active_clients, 2);

    mc_master_put_config c = pcfg(2);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "both", 4, 1000, &c, &out), MC_OK);
    assert_int_equal(out.n, 2);
    for (uint32_t i = 0; i < 2; i++)
        if (out.replicas[i].segment_id.first == 1) {
            assert_string_equal(out.replicas[i].transport_endpoint, "10.0.0.1:5000");
            assert_string_equal(out.replicas[i].protocol, "rdma");
        }
    assert_int_equal(mc_master_service_put_end(svc, C1, "both", 4), MC_OK);
    c.replica_num = 1;
    const char *pref[] = {"b:1"};
    c.preferred_segments = pref;
    c.n_preferred = 1;
    assert_int_equal(mc_master_service_put_start(svc, C1, "onlyb", 5, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, "onlyb", 5), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, C1, "wipb", 4, 1000, &c, &out), MC_OK);

    mc_master_uuid b = {2, 2}, nope = {9, 9};
    assert_int_equal(mc_master_service_unmount_segment(svc, nope, C2), MC_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_master_service_unmount_segment(svc, b, C1), MC_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_service_unmount_segment(svc, b, C2), MC_OK);
    assert_int_equal(mc_master_service_unmount_segment(svc, b, C2), MC_SEGMENT_NOT_FOUND);
    /* "both" keeps its replica on a:1, objects only on b:1 are gone */
    assert_int_equal(get(svc, "both", &out), MC_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.replicas[0].segment_id.first, 1);
    assert_false(exists_quiet(svc, "onlyb"));
    assert_false(exists_quiet(svc, "wipb"));
    st = stats(svc);
    assert_int_equal(st.segment_count, 1);
    assert_int_equal(st.total_capacity_bytes, 8 * MIB);
    assert_int_equal(st.allocated_bytes, 1024);
    assert_int_equal(st.processing_key_count, 0);
    /* the slot is reused by a new mount */
    mount(svc, 3, "c:1", 1ull << 33, 8 * MIB, C2);
    assert_int_equal(get(svc, "both", &out), MC_OK);
    assert_int_equal(out.replicas[0].segment_id.first, 1);
    /* remove the last segment: everything on it is gone */
    mc_master_uuid a = {1, 1};
    fake_now += 1000;
    assert_int_equal(mc_master_service_unmount_segment(svc, a, C1), MC_OK);
    assert_false(exists_quiet(svc, "both"));
    assert_int_equal(stats(svc).allocated_bytes, 0);
    mc_master_service_destroy(svc);
}

/* Issue 17: a put in flight whose target segment is unmounted (its owner's close)
 * before its put_end. Its writer's put_end (or put_revoke) says REPLICA_IS_GONE, so the
 * writer knows to put again, never OBJECT_NOT_FOUND; a put that kept a replica on
 * another segment ends with that one; once answered (or its writer expired, or after
 * the release timeout) the master forgets the dropped put. */
/* The unmount tests' service: a:1 (C1's) and b:1 (C2's), 8 MiB each; *c puts one
 * replica, b:1 preferred (static: the list outlives the call). */
static mc_master_service *two_segments_prefer_b(mc_master_put_config *c)
{
    static const char *pref[] = {"b:1"};
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 1ull << 32, 8 * MIB, C1);
    mount(svc, 2, "b:1", 2ull << 32, 8 * MIB, C2);
    *c = pcfg(1);
    c->preferred_segments = pref;
    c->n_preferred = 1;
    return svc;
}

static void test_unmount_during_put(void **state)
{
    (void)state;
    mc_master_put_config c;
    mc_master_service *svc = two_segments_prefer_b(&c);
    mc_master_replica_list out;
    /* two puts of C1 placed only on b:1, one of C2's on b:1, one of C1 on both */
    assert_int_equal(mc_master_service_put_start(svc, C1, "end", 3, 1000, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].segment_id.first, 2);
    assert_int_equal(mc_master_service_put_start(svc, C1, "rev", 3, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, C2, "two", 3, 1000, &c, &out), MC_OK);
    mc_master_put_config c2 = pcfg(2);
    assert_int_equal(mc_master_service_put_start(svc, C1, "both", 4, 1000, &c2, &out), MC_OK);
    assert_int_equal(out.n, 2);
    assert_int_equal(stats(svc).processing_key_count, 4);

    mc_master_uuid b = {2, 2};
    assert_int_equal(mc_master_service_unmount_segment(svc, b, C2), MC_OK);
    assert_int_equal(stats(svc).processing_key_count, 1); /* "both" is still in flight */
    /* only the writer hears why, and only once */
    assert_int_equal(mc_master_service_put_end(svc, C2, "end", 3), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_service_put_end(svc, C1, "end", 3), MC_REPLICA_IS_GONE);
    assert_int_equal(mc_master_service_put_end(svc, C1, "end", 3), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "rev", 3), MC_REPLICA_IS_GONE);
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "rev", 3), MC_OBJECT_NOT_FOUND);
    assert_false(exists_quiet(svc, "end"));
    /* the writer puts again: placed on the segment left, and ends as any put */
    assert_int_equal(mc_master_service_put_start(svc, C1, "end", 3, 1000, &c, &out), MC_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.replicas[0].segment_id.first, 1);
    assert_int_equal(mc_master_service_put_end(svc, C1, "end", 3), MC_OK);
    assert_int_equal(get(svc, "end", &out), MC_OK);
    assert_int_equal(out.replicas[0].segment_id.first, 1);
    /* the put with a replica left publishes that one */
    assert_int_equal(mc_master_service_put_end(svc, C1, "both", 4), MC_OK);
    assert_int_equal(get(svc, "both", &out), MC_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.replicas[0].segment_id.first, 1);
    /* with no segment left a new put says so (as before) */
    assert_int_equal(mc_master_service_put_start(svc, C1, "x", 1, 1000, &c, &out), MC_OK);
    mc_master_uuid a = {1, 1};
    fake_now += 1000;
    assert_int_equal(mc_master_service_unmount_segment(svc, a, C1), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, C1, "x2", 2, 1000, &c, &out),
                     MC_NO_AVAILABLE_HANDLE);
    /* C2's dropped put is never ended: forgotten after the release timeout */
    mc_master_service_tick(svc);
    assert_int_equal(mc_master_service_put_end(svc, C1, "x", 1), MC_REPLICA_IS_GONE);
    fake_now += 601 * 1000;
    mc_master_service_tick(svc);
    assert_int_equal(mc_master_service_put_end(svc, C2, "two", 3), MC_OBJECT_NOT_FOUND);
    assert_int_equal(stats(svc).processing_key_count, 0);
    mc_master_service_destroy(svc);
}

/* The gone entry of a put an unmount dropped (REPLICA_IS_GONE) against other writers
 * of the key, a new put of it by the same writer, and the service's destroy. */
static void test_unmount_during_put_races(void **state)
{
    (void)state;
    mc_master_put_config c;
    mc_master_service *svc = two_segments_prefer_b(&c);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "k", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, C1, "j", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, C1, "left", 4, 1000, &c, &out), MC_OK);
    mc_master_uuid b = {2, 2};
    assert_int_equal(mc_master_service_unmount_segment(svc, b, C2), MC_OK);
    /* another writer puts "k" meanwhile: C1's end still hears why its own put went */
    assert_int_equal(mc_master_service_put_start(svc, C2, "k", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, "k", 1), MC_REPLICA_IS_GONE);
    assert_int_equal(mc_master_service_put_end(svc, C2, "k", 1), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, "k", 1), MC_INVALID_WRITE);
    /* C1 puts "j" again before ending the dropped one: its end is the new put's */
    assert_int_equal(mc_master_service_put_start(svc, C1, "j", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, "j", 1), MC_OK);
    assert_true(exists_quiet(svc, "j"));
    assert_int_equal(mc_master_service_put_revoke(svc, C1, "j", 1), MC_INVALID_WRITE);
    /* "left" is never ended: its entry is freed by destroy (the leak check sees it) */
    mc_master_service_destroy(svc);
}

typedef struct expired_rec {
    int calls;
    mc_master_uuid client;
    size_t n;
    char names[4][32];
} expired_rec;

static void on_expired(void *ctx, mc_master_uuid client, const char *const *names, size_t n)
{
    expired_rec *r = ctx;
    r->calls++;
    r->client = client;
    r->n = n;
    for (size_t i = 0; i < n && i < 4; i++)
        snprintf(r->names[i], sizeof r->names[i], "%s", names[i]);
}

static void test_client_expiry(void **state)
{
    (void)state;
    mc_master_config cfg = base_cfg();
    cfg.client_ttl = 10;
    expired_rec rec;
    memset(&rec, 0, sizeof rec);
    cfg.on_client_expired = on_expired;
    cfg.on_client_expired_ctx = &rec;
    mc_master_service *svc = make(&cfg);
    mc_master_ping_result pr;
    assert_int_equal(mc_master_service_ping(svc, C1, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_NEED_REMOUNT);
    mount(svc, 1, "a:1", 0, 8 * MIB, C1);
    mount(svc, 2, "a:1", 1ull << 32, 8 * MIB, C1);
    mount(svc, 3, "b:1", 1ull << 33, 8 * MIB, C2);
    assert_int_equal(mc_master_service_ping(svc, C1, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_OK);
    const char *pref[] = {"a:1"};
    mc_master_put_config c = pcfg(1);
    c.preferred_segments = pref;
    c.n_preferred = 1;
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C2, "ona", 3, 100, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C2, "ona", 3), MC_OK);
    pref[0] = "b:1";
    assert_int_equal(mc_master_service_put_start(svc, C2, "onb", 3, 100, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C2, "onb", 3), MC_OK);
    /* C2 keeps pinging, C1 goes silent */
    for (int i = 0; i < 11; i++) {
        fake_now += 1000;
        assert_int_equal(mc_master_service_ping(svc, C2, &pr), MC_OK);
        assert_int_equal(pr.client_status, MC_MASTER_CLIENT_OK);
        mc_master_service_tick(svc);
    }
    assert_int_equal(mc_master_service_ping(svc, C1, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_NEED_REMOUNT);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.clients_expired, 1);
    assert_int_equal(st.active_clients, 1);
    assert_int_equal(st.segment_count, 1); /* both of C1's segments are gone */
    assert_false(exists_quiet(svc, "ona"));
    assert_true(exists_quiet(svc, "onb"));
    /* the hook heard of it once, with each segment name once (both were "a:1") */
    assert_int_equal(rec.calls, 1);
    assert_true(rec.client.first == C1.first && rec.client.second == C1.second);
    assert_int_equal(rec.n, 1);
    assert_string_equal(rec.names[0], "a:1");
    /* C1 comes back */
    mc_master_segment segs[2] = {
        {.id = {1, 1}, .name = "a:1", .base = 0, .size = 8 * MIB},
        {.id = {3, 3}, .name = "b:1", .base = 1ull << 33, .size = 8 * MIB}, /* C2's, mounted */
    };
    assert_int_equal(mc_master_service_remount_segments(svc, segs, 2, C1), MC_OK);
    assert_int_equal(mc_master_service_ping(svc, C1, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_OK);
    assert_int_equal(stats(svc).segment_count, 2);
    /* a client with no segments registers by remounting nothing */
    mc_master_uuid c3 = {3, 3};
    assert_int_equal(mc_master_service_remount_segments(svc, NULL, 0, c3), MC_OK);
    assert_int_equal(mc_master_service_ping(svc, c3, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_OK);
    assert_int_equal(stats(svc).active_clients, 3);
    /* a client without segments expires with no names */
    for (int i = 0; i < 11; i++) {
        fake_now += 1000;
        assert_int_equal(mc_master_service_ping(svc, C1, &pr), MC_OK);
        assert_int_equal(mc_master_service_ping(svc, C2, &pr), MC_OK);
        mc_master_service_tick(svc);
    }
    assert_int_equal(rec.calls, 2);
    assert_true(rec.client.first == 3 && rec.client.second == 3);
    assert_int_equal(rec.n, 0);
    mc_master_service_destroy(svc);
}

/* ---- batches, stats, admin ---- */

static void test_batches(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, C1);
    mc_master_key keys[4] = {{"a", 1}, {"b", 1}, {"a", 1}, {"", 0}};
    uint64_t sizes[4] = {100, 200, 300, 10};
    mc_master_replica_list outs[4];
    int st[4];
    mc_master_put_config c = pcfg(1);
    assert_int_equal(mc_master_service_batch_put_start(svc, C1, keys, sizes, 4, &c, outs, st),
                     MC_OBJECT_ALREADY_EXISTS);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OK);
    assert_int_equal(st[2], MC_OBJECT_ALREADY_EXISTS); /* duplicate in the batch */
    assert_int_equal(st[3], MC_INVALID_PARAMS);
    assert_int_equal(outs[1].replicas[0].size, 200);
    assert_int_equal(mc_master_service_batch_put_end(svc, C1, keys, 3, st), MC_INVALID_WRITE);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OK);
    assert_int_equal(st[2], MC_INVALID_WRITE); /* already ended by item 0 */
    mc_master_key q[3] = {{"a", 1}, {"zz", 2}, {"", 0}};
    int ex[3];
    assert_int_equal(mc_master_service_batch_exist_key(svc, q, 3, ex), MC_OK);
    assert_int_equal(ex[0], 1);
    assert_int_equal(ex[1], 0);
    assert_int_equal(ex[2], MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_batch_get_replica_list(svc, q, 3, outs, st),
                     MC_OBJECT_NOT_FOUND);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(outs[0].replicas[0].size, 100);
    assert_int_equal(st[1], MC_OBJECT_NOT_FOUND);
    assert_int_equal(st[2], MC_INVALID_PARAMS);
    /* empty batches */
    assert_int_equal(mc_master_service_batch_put_start(svc, C1, NULL, NULL, 0, &c, NULL, NULL),
                     MC_OK);
    assert_int_equal(mc_master_service_batch_exist_key(svc, NULL, 0, NULL), MC_OK);
    assert_int_equal(mc_master_service_batch_exist_key(svc, NULL, 2, NULL), MC_INVALID_PARAMS);
    fake_now += 1000;
    assert_int_equal(mc_master_service_batch_remove(svc, keys, 2, false, st), MC_OK);
    assert_int_equal(stats(svc).key_count, 0);
    /* upsert batch + revoke batch */
    assert_int_equal(
        mc_master_service_batch_upsert_start(svc, C1, keys, sizes, 2, &c, outs, st), MC_OK);
    assert_int_equal(mc_master_service_batch_upsert_revoke(svc, C1, keys, 2, st), MC_OK);
    assert_int_equal(mc_master_service_batch_put_start(svc, C1, keys, sizes, 2, &c, outs, st),
                     MC_OK);
    assert_int_equal(mc_master_service_batch_put_revoke(svc, C1, keys, 2, st), MC_OK);
    assert_int_equal(
        mc_master_service_batch_upsert_start(svc, C1, keys, sizes, 2, &c, outs, st), MC_OK);
    assert_int_equal(mc_master_service_batch_upsert_end(svc, C1, keys, 2, st), MC_OK);
    mc_master_stats s = stats(svc);
    mc_master_batch_counters *b = &s.batch[MC_MASTER_BATCH_PUT_START];
    assert_int_equal(b->requests, 3);
    assert_int_equal(b->items, 6);
    assert_int_equal(b->failed_items, 2);
    assert_int_equal(b->partial_successes, 1);
    assert_int_equal(b->failures, 0);
    assert_int_equal(s.batch[MC_MASTER_BATCH_EXIST_KEY].failed_items, 1); /* only "" */
    /* a batch of misses is an answered batch: no failed items, no failed request */
    mc_master_key miss[2] = {{"m1", 2}, {"m2", 2}};
    assert_int_equal(mc_master_service_batch_exist_key(svc, miss, 2, ex), MC_OK);
    assert_int_equal(ex[0], 0);
    assert_int_equal(ex[1], 0);
    mc_master_batch_counters be = stats(svc).batch[MC_MASTER_BATCH_EXIST_KEY];
    assert_int_equal(be.requests, 3); /* with the empty batch */
    assert_int_equal(be.items, 5);
    assert_int_equal(be.failed_items, 1);
    assert_int_equal(be.failures, 0);
    assert_int_equal(be.partial_successes, 1);
    assert_int_equal(s.batch[MC_MASTER_BATCH_UPSERT_END].items, 2);
    assert_int_equal(s.key_count, 2);
    assert_int_equal(s.requests[MC_MASTER_OP_PUT_START], 0); /* batches count apart */
    mc_master_service_destroy(svc);
}

/* master_value_size_bytes: every object placed by a put or upsert, in upstream's buckets. */
static void test_value_size_histogram(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 256 * MIB, C1);
    assert_int_equal(mc_master_value_size_bound(0), 4096);
    assert_int_equal(mc_master_value_size_bound(6), 64 * MIB);
    assert_true(mc_master_value_size_bound(7) == UINT64_MAX);
    assert_true(mc_master_value_size_bound(-1) == UINT64_MAX);
    assert_int_equal(put(svc, "z", 0), MC_OK);
    assert_int_equal(put(svc, "a", 4096), MC_OK);         /* le 4096 */
    assert_int_equal(put(svc, "b", 4097), MC_OK);         /* le 65536 */
    assert_int_equal(put(svc, "c", 1 * MIB), MC_OK);      /* le 1 MiB */
    assert_int_equal(put(svc, "d", 100 * MIB), MC_OK);    /* +Inf */
    assert_int_equal(put(svc, "a", 10), MC_OBJECT_ALREADY_EXISTS); /* not placed */
    assert_int_equal(put(svc, "e", 1024 * MIB), MC_NO_AVAILABLE_HANDLE);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "b", 1, 4097, &c, &out), MC_OK);
    mc_master_key keys[2] = {{"x", 1}, {"y", 1}};
    uint64_t sizes[2] = {64 * KIB, 16 * MIB};
    mc_master_replica_list outs[2];
    int st[2];
    assert_int_equal(
        mc_master_service_batch_put_start(svc, C1, keys, sizes, 2, &c, outs, st), MC_OK);
    mc_master_stats s = stats(svc);
    const uint64_t want[MC_MASTER_VALUE_SIZE_BUCKETS] = {2, 3, 0, 1, 0, 1, 0, 1};
    for (int i = 0; i < MC_MASTER_VALUE_SIZE_BUCKETS; i++)
        assert_int_equal(s.value_size_buckets[i], want[i]);
    assert_int_equal(s.value_size_count, 8);
    assert_int_equal(s.value_size_sum,
                     4096 + 4097 + MIB + 100 * MIB + 4097 + 64 * KIB + 16 * MIB);
    mc_master_service_destroy(svc);
}

static int seg_cb(const mc_master_segment_info *info, void *ctx)
{
    int *n = ctx;
    assert_string_equal(info->name, "a:1");
    assert_string_equal(info->te_endpoint, "a:1");
    assert_string_equal(info->protocol, "tcp");
    assert_string_equal(info->host_id, "");
    assert_int_equal(info->size, 8 * MIB);
    assert_int_equal(info->used, 2 * 128);
    (*n)++;
    return 0;
}

static int key_cb(const void *key, size_t len, uint64_t size, bool complete, void *ctx)
{
    int *n = ctx;
    assert_int_equal(len, 2);
    assert_true(memcmp(key, "k", 1) == 0);
    assert_int_equal(size, 100);
    if (complete)
        n[0]++;
    else
        n[1]++;
    return 0;
}

static int key_stop_cb(const void *key, size_t len, uint64_t size, bool complete, void *ctx)
{
    (void)key, (void)len, (void)size, (void)complete, (void)ctx;
    return 1;
}

static void test_admin(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 8 * MIB, C1);
    assert_int_equal(put(svc, "k1", 100), MC_OK);
    mc_master_put_config c = pcfg(1);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, "k2", 2, 100, &c, &out), MC_OK);
    int n = 0;
    assert_int_equal(mc_master_service_foreach_segment(svc, seg_cb, &n), 1);
    assert_int_equal(n, 1);
    int kn[2] = {0, 0};
    assert_int_equal(mc_master_service_foreach_key(svc, key_cb, kn), 2);
    assert_int_equal(kn[0], 1);
    assert_int_equal(kn[1], 1);
    assert_int_equal(mc_master_service_foreach_key(svc, key_stop_cb, NULL), 1);
    mc_master_key_info info;
    assert_int_equal(mc_master_service_query_key(svc, "k2", 2, &info), MC_OK);
    assert_false(info.complete);
    assert_int_equal(info.replicas.n, 1);
    assert_int_equal(info.replicas.replicas[0].status, MC_MASTER_REPLICA_PROCESSING);
    assert_int_equal(mc_master_service_query_key(svc, "k1", 2, &info), MC_OK);
    assert_true(info.complete);
    assert_int_equal(info.lease_left_ms, 0); /* query grants no lease */
    assert_int_equal(mc_master_service_query_key(svc, "k9", 2, &info), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_service_now_ms(svc), fake_now);
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_index_small),
        cmocka_unit_test(test_index_large),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_put_lifecycle),
        cmocka_unit_test(test_replicas_distinct_and_preferred),
        cmocka_unit_test(test_free_ratio_first),
        cmocka_unit_test(test_zero_size),
        cmocka_unit_test(test_lease_and_remove),
        cmocka_unit_test(test_remove_all),
        cmocka_unit_test(test_force_remove_defers_free),
        cmocka_unit_test(test_force_remove_all_regex_defer),
        cmocka_unit_test(test_regex),
        cmocka_unit_test(test_regex_costly_pattern_fails),
        cmocka_unit_test(test_eviction_lru_order),
        cmocka_unit_test(test_eviction_exclusions),
        cmocka_unit_test(test_eviction_by_tick),
        cmocka_unit_test(test_soft_pin),
        cmocka_unit_test(test_upsert),
        cmocka_unit_test(test_discard_and_release),
        cmocka_unit_test(test_mount_unmount),
        cmocka_unit_test(test_unmount_during_put),
        cmocka_unit_test(test_unmount_during_put_races),
        cmocka_unit_test(test_client_expiry),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_value_size_histogram),
        cmocka_unit_test(test_admin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
