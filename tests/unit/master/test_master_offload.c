/* Master service, the disk tier (master/offload.c, docs/ssd-tier.md) on a fake clock: a
 * client registers its tier with an offload heartbeat; eviction asks it for a WRITE of
 * an object in its segment and keeps the object until the result comes; OK records a
 * LOCAL_DISK replica (descriptor type, the owner's endpoint), the next eviction keeps the
 * record disk-only; a refused WRITE keeps the memory replica and eviction falls back;
 * REGISTER creates unknown keys and refuses known ones; a remove queues a DELETE; the
 * owner's expiry drops its disk replicas; without --enable_offload the RPCs are refused.
 * Segments are address ranges only (never touched). */
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
#define OBJ (256 * KIB)

static uint64_t fake_now;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static const mc_master_uuid C1 = {1, 1};

static mc_master_service *make(bool offload)
{
    fake_now = 1000000;
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    cfg.shard_count = 16;
    cfg.clock = fake_clock;
    cfg.default_kv_lease_ttl = 10;
    cfg.client_ttl_ms = 1000;
    cfg.eviction_high_watermark_ratio = 1.0; /* only the passes the test asks for */
    cfg.enable_offload = offload;
    cfg.offload_on_evict = offload;
    mc_master_service *svc = NULL;
    assert_int_equal(mc_master_service_create(&cfg, &svc), MC_OK);
    /* 1 MiB: four objects */
    mc_master_segment a = {.id = {10, 10}, .name = "A", .base = 1ull << 32, .size = 4 * OBJ};
    assert_int_equal(mc_master_service_mount_segment(svc, &a, C1), MC_OK);
    return svc;
}

static int put(mc_master_service *svc, const char *key)
{
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    mc_master_replica_list out;
    int rc = mc_master_service_put_start(svc, C1, key, strlen(key), OBJ, &c, &out);
    if (rc == MC_OK)
        assert_int_equal(mc_master_service_put_end(svc, C1, key, strlen(key)), MC_OK);
    return rc;
}

/* The replica types of key: bit 0 memory, bit 1 local disk; -1 when absent. */
static int kinds(mc_master_service *svc, const char *key)
{
    mc_master_replica_list out;
    fake_now += 100; /* past the last lease */
    if (mc_master_service_get_replica_list(svc, key, strlen(key), &out) != MC_OK)
        return -1;
    int k = 0;
    for (uint32_t i = 0; i < out.n; i++) {
        if (out.replicas[i].type == MC_MASTER_REPLICA_LOCAL_DISK) {
            assert_string_equal(out.replicas[i].transport_endpoint, "a:9");
            assert_int_equal(out.replicas[i].address, 0);
            assert_int_equal(out.replicas[i].size, OBJ);
            k |= 2;
        } else {
            k |= 1;
        }
    }
    fake_now += 100; /* the lease just granted lapses */
    return k;
}

static mc_master_offload_tasks *poll_tasks(mc_master_service *svc)
{
    mc_master_offload_tasks *t = malloc(sizeof *t);
    assert_int_equal(mc_master_service_offload_heartbeat(svc, C1, "a:9", 256, t), MC_OK);
    return t;
}

/* A poll whose tasks the test does not look at: its keys and the struct go. */
static void drop(mc_master_offload_tasks *t)
{
    free(t->keys);
    free(t);
}

static void report(mc_master_service *svc, const mc_master_offload_tasks *t, int status)
{
    static mc_master_offload_item r[MC_MASTER_MAX_OFFLOAD_TASKS];
    static int st[MC_MASTER_MAX_OFFLOAD_TASKS];
    size_t n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->items[i].op == MC_MASTER_OFFLOAD_WRITE) {
            r[n] = t->items[i];
            r[n++].status = status;
        }
    assert_int_equal(mc_master_service_offload_end(svc, C1, "a:9", r, n, st), MC_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(st[i], MC_OK);
}

static void test_offload_on_evict(void **state)
{
    (void)state;
    mc_master_service *svc = make(true);
    mc_master_offload_tasks *t = poll_tasks(svc);
    assert_true(t->fresh);
    assert_int_equal(t->n, 0);
    drop(t);
    char key[16];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(put(svc, key), MC_OK);
        fake_now += 10;
    }
    /* no room: the inline eviction asks for an offload and keeps the object */
    assert_int_equal(put(svc, "k4"), MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(kinds(svc, "k0"), 1);
    t = poll_tasks(svc);
    assert_false(t->fresh);
    assert_true(t->n >= 1);
    assert_int_equal(t->items[0].op, MC_MASTER_OFFLOAD_WRITE);
    assert_int_equal(t->items[0].key_len, 2);
    assert_memory_equal(t->items[0].key, "k0", 2);
    assert_int_equal(t->items[0].size, OBJ);
    assert_int_equal(t->items[0].address, 1ull << 32 | (t->items[0].address & 0xfffff));
    /* handed out once only */
    mc_master_offload_tasks *t2 = poll_tasks(svc);
    assert_int_equal(t2->n, 0);
    free(t2);
    report(svc, t, MC_OK);
    assert_int_equal(kinds(svc, "k0"), 3); /* memory and local disk */
    /* the next eviction drops the memory, keeps the record: disk-only (a pass over
     * everything: k0 was just read, so it is the most recent object now; the others are
     * queued for offload, not dropped) */
    assert_int_equal(mc_master_service_evict(svc, 4 * OBJ), OBJ);
    assert_int_equal(kinds(svc, "k0"), 2);
    assert_int_equal(put(svc, "k4"), MC_OK);
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    assert_int_equal(st.disk_clients, 1);
    assert_int_equal(st.disk_only_keys, 1);
    assert_int_equal(st.disk_replica_bytes, OBJ);
    assert_true(st.offload_successes >= 1);
    assert_true(st.disk_hits >= 1);
    /* a re-put of a disk-only key is refused (it exists); a remove queues a DELETE */
    assert_int_equal(put(svc, "k0"), MC_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_master_service_remove(svc, "k0", 2, false), MC_OK);
    free(t->keys);
    free(t);
    t = poll_tasks(svc);
    bool del = false;
    for (uint32_t i = 0; i < t->n; i++)
        del |= t->items[i].op == MC_MASTER_OFFLOAD_DELETE && t->items[i].key_len == 2 &&
               !memcmp(t->items[i].key, "k0", 2);
    assert_true(del);
    free(t->keys);
    free(t);
    mc_master_service_destroy(svc);
}

static void test_refused_offload_keeps_memory_then_falls_back(void **state)
{
    (void)state;
    mc_master_service *svc = make(true);
    drop(poll_tasks(svc));
    char key[16];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(put(svc, key), MC_OK);
        fake_now += 10;
    }
    assert_int_equal(put(svc, "k4"), MC_NO_AVAILABLE_HANDLE);
    mc_master_offload_tasks *t = poll_tasks(svc);
    assert_true(t->n >= 1);
    report(svc, t, MC_NO_AVAILABLE_HANDLE); /* the disk is full */
    assert_int_equal(kinds(svc, "k0"), 1);   /* the memory replica is kept */
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    assert_true(st.offload_failures >= 1);
    /* eviction then takes the refused objects as without a disk tier (each put that
     * finds no space asks for the next offload first: refused as well) */
    int rc = MC_NO_AVAILABLE_HANDLE;
    for (int round = 0; round < 6 && (rc = put(svc, "k4")) != MC_OK; round++) {
        free(t->keys);
        free(t);
        t = poll_tasks(svc);
        report(svc, t, MC_NO_AVAILABLE_HANDLE);
    }
    assert_int_equal(rc, MC_OK);
    free(t->keys);
    free(t);
    mc_master_service_destroy(svc);
}

static void test_register_and_expiry(void **state)
{
    (void)state;
    mc_master_service *svc = make(true);
    drop(poll_tasks(svc));
    assert_int_equal(put(svc, "mem"), MC_OK);
    mc_master_offload_item r[2] = {
        {.op = MC_MASTER_OFFLOAD_REGISTER, .key = "disk", .key_len = 4, .size = OBJ},
        {.op = MC_MASTER_OFFLOAD_REGISTER, .key = "mem", .key_len = 3, .size = OBJ},
    };
    int st[2];
    assert_int_equal(mc_master_service_offload_end(svc, C1, "a:9", r, 2, st), MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OBJECT_ALREADY_EXISTS); /* a newer copy is known */
    assert_int_equal(kinds(svc, "disk"), 2);
    assert_int_equal(kinds(svc, "mem"), 1);
    /* the owner expires: its disk replicas go (the disk-only object with them) */
    fake_now += 5000;
    mc_master_service_tick(svc);
    assert_int_equal(kinds(svc, "disk"), -1);
    mc_master_stats s;
    mc_master_service_get_stats(svc, &s);
    assert_int_equal(s.disk_replicas_lost, 1);
    assert_int_equal(s.disk_clients, 0);
    mc_master_service_destroy(svc);
}

static void test_refused_without_enable_offload(void **state)
{
    (void)state;
    mc_master_service *svc = make(false);
    mc_master_offload_tasks *t = malloc(sizeof *t);
    assert_int_equal(mc_master_service_offload_heartbeat(svc, C1, "a:9", 8, t),
                     MC_NOT_SUPPORTED);
    assert_int_equal(mc_master_service_offload_end(svc, C1, "a:9", NULL, 0, NULL),
                     MC_NOT_SUPPORTED);
    free(t);
    /* eviction as before */
    char key[16];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(put(svc, key), MC_OK);
        fake_now += 10;
    }
    assert_int_equal(put(svc, "k4"), MC_OK);
    mc_master_service_destroy(svc);
}

/* Shared-FS DISK replicas (cfg.fs_dir, master/shared_fs.c): a probe registers nothing;
 * every put is queued for the client holding its memory replica; OK records a DISK
 * replica (its path in the descriptor), kept when the owner expires (disk-only); a remove
 * hands a DELETE to a polling client. */
static void test_shared_fs_mode(void **state)
{
    (void)state;
    fake_now = 1000000;
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    cfg.shard_count = 16;
    cfg.clock = fake_clock;
    cfg.default_kv_lease_ttl = 10;
    cfg.client_ttl_ms = 1000;
    char dir[] = "/shared/c1";
    cfg.fs_dir = dir;
    mc_master_service *svc = NULL;
    assert_int_equal(mc_master_service_create(&cfg, &svc), MC_OK);
    dir[1] = 'X'; /* copied at create */
    mc_master_segment a = {.id = {10, 10}, .name = "A", .base = 1ull << 32, .size = 4 * OBJ};
    assert_int_equal(mc_master_service_mount_segment(svc, &a, C1), MC_OK);
    mc_master_offload_tasks *t = malloc(sizeof *t);
    assert_int_equal(mc_master_service_offload_heartbeat(svc, C1, "a:9", 0, t), MC_OK);
    assert_string_equal(t->fsdir, "/shared/c1");
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    assert_int_equal(st.disk_clients, 0); /* the probe registered nothing */
    free(t);
    drop(poll_tasks(svc));
    assert_int_equal(put(svc, "k0"), MC_OK);
    t = poll_tasks(svc);
    assert_string_equal(t->fsdir, "/shared/c1");
    assert_int_equal(t->n, 1);
    assert_int_equal(t->items[0].op, MC_MASTER_OFFLOAD_WRITE);
    assert_int_equal(t->items[0].address, 1ull << 32);
    report(svc, t, MC_OK);
    free(t->keys);
    free(t);
    mc_master_replica_list out;
    fake_now += 100;
    assert_int_equal(mc_master_service_get_replica_list(svc, "k0", 2, &out), MC_OK);
    assert_int_equal(out.n, 2);
    assert_int_equal(out.replicas[0].type, MC_MASTER_REPLICA_MEMORY);
    assert_int_equal(out.replicas[1].type, MC_MASTER_REPLICA_DISK);
    assert_int_equal(out.replicas[1].size, OBJ);
    assert_int_equal(strncmp(out.replicas[1].transport_endpoint, "/shared/c1/", 11), 0);
    assert_int_equal(strlen(out.replicas[1].transport_endpoint), 11 + 32 + 1 + 16 + 5);
    /* the owner expires: the DISK replica stays, disk-only */
    fake_now += 5000;
    mc_master_service_tick(svc);
    fake_now += 100;
    assert_int_equal(mc_master_service_get_replica_list(svc, "k0", 2, &out), MC_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.replicas[0].type, MC_MASTER_REPLICA_DISK);
    /* a remove hands a DELETE to a client that polls */
    drop(poll_tasks(svc)); /* C1 is back, polling */
    fake_now += 100;
    assert_int_equal(mc_master_service_remove(svc, "k0", 2, false), MC_OK);
    t = poll_tasks(svc);
    assert_int_equal(t->n, 1);
    assert_int_equal(t->items[0].op, MC_MASTER_OFFLOAD_DELETE);
    free(t->keys);
    free(t);
    /* a write overtaken by a newer one of the key: each has its own generation (file
     * name); the late report is refused and its file deleted, never listed */
    mc_master_segment b = {.id = {11, 11}, .name = "A", .base = 1ull << 33, .size = 4 * OBJ};
    assert_int_equal(mc_master_service_mount_segment(svc, &b, C1), MC_OK); /* C1 is back */
    assert_int_equal(put(svc, "k1"), MC_OK);
    t = poll_tasks(svc);
    assert_int_equal(t->n, 1);
    mc_master_offload_item old = t->items[0];
    old.key = "k1";
    fake_now += 100;
    assert_int_equal(mc_master_service_remove(svc, "k1", 2, false), MC_OK);
    assert_int_equal(put(svc, "k1"), MC_OK);
    mc_master_offload_tasks *t2 = poll_tasks(svc);
    assert_int_equal(t2->n, 1);
    assert_int_equal(t2->items[0].op, MC_MASTER_OFFLOAD_WRITE);
    assert_true(t2->items[0].gen != old.gen);
    int st1 = MC_OK;
    assert_int_equal(mc_master_service_offload_end(svc, C1, "a:9", &old, 1, &st1), MC_OK);
    assert_int_equal(st1, MC_OBJECT_NOT_FOUND);
    report(svc, t2, MC_OK);
    char want[MC_MASTER_NAME_MAX];
    snprintf(want, sizeof want, "-%016llx.mcsf", (unsigned long long)t2->items[0].gen);
    fake_now += 100;
    assert_int_equal(mc_master_service_get_replica_list(svc, "k1", 2, &out), MC_OK);
    assert_int_equal(out.replicas[out.n - 1].type, MC_MASTER_REPLICA_DISK);
    const char *ep = out.replicas[out.n - 1].transport_endpoint;
    assert_string_equal(ep + strlen(ep) - strlen(want), want);
    free(t->keys);
    free(t);
    free(t2->keys);
    free(t2);
    t = poll_tasks(svc); /* the DELETE of the late write's file */
    assert_int_equal(t->n, 1);
    assert_int_equal(t->items[0].op, MC_MASTER_OFFLOAD_DELETE);
    assert_true(t->items[0].gen == old.gen);
    free(t->keys);
    free(t);
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offload_on_evict),
        cmocka_unit_test(test_refused_offload_keeps_memory_then_falls_back),
        cmocka_unit_test(test_register_and_expiry),
        cmocka_unit_test(test_refused_without_enable_offload),
        cmocka_unit_test(test_shared_fs_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
