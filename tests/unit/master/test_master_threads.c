/* Master service under concurrency (bounded smoke test, real clock): four writer/reader
 * threads hammer their own keys and a small set of shared keys (put/get/exist/remove/
 * upsert) on segments small enough that eviction runs all the time, while a fifth thread
 * ticks, evicts, and mounts/unmounts an extra segment. Afterwards the index and the
 * allocators must agree exactly: key count, bytes reserved per segment, replica bounds,
 * and everything returns to zero once removed. Every thread runs a fixed number of
 * iterations. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "master/master_service.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define WORKERS 4
#define ITERS 20000
#define SHARED_KEYS 16

static mc_master_service *svc;
static atomic_int unexpected; /* status codes no interleaving may produce */
static atomic_int done_workers;

static uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void expect(bool ok, const char *what, int rc)
{
    if (!ok) {
        fprintf(stderr, "unexpected %s: %d\n", what, rc);
        atomic_fetch_add(&unexpected, 1);
    }
}

/* One heartbeat of client id with the fence protocol (docs/consistency.md): ping, then
 * acknowledge what it handed out (segments here are address ranges: nothing to apply).
 * Revoked writes' space is quarantined until both sides did this. */
static void settle_as(mc_master_uuid id)
{
    mc_master_ping_result *pr = malloc(sizeof *pr), *pr2 = malloc(sizeof *pr2);
    if (!pr || !pr2)
        abort();
    mc_master_service_ping_fences(svc, id, NULL, pr);
    mc_master_ping_request req = {pr->writer_fences, pr->n_writer_fences, pr->target_fences,
                                  pr->n_target_fences};
    int rc = mc_master_service_ping_fences(svc, id, &req, pr2);
    expect(rc == MC_OK, "ping_fences", rc);
    free(pr);
    free(pr2);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    mc_master_uuid me = {100 + (uint64_t)id, 7};
    uint64_t rs = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
    mc_master_put_config cfg;
    mc_master_put_config_init(&cfg);
    mc_master_replica_list out;
    char key[64];
    for (int i = 0; i < ITERS; i++) {
        if (i % 64 == 0)
            settle_as(me); /* this writer's heartbeat */
        uint64_t r = xs(&rs);
        bool shared = r % 4 == 0;
        if (shared)
            snprintf(key, sizeof key, "shared-%d", (int)(r / 4 % SHARED_KEYS));
        else
            snprintf(key, sizeof key, "t%d-%d", id, (int)(r / 4 % 200));
        size_t len = strlen(key);
        uint64_t size = 4 * KIB * (1 + (r >> 20) % 16);
        cfg.replica_num = 1 + (uint32_t)((r >> 30) % 2);
        int rc;
        switch ((r >> 8) % 7) {
        case 0:
        case 1: /* put */
            rc = mc_master_service_put_start(svc, me, key, len, size, &cfg, &out);
            expect(rc == MC_OK || rc == MC_OBJECT_ALREADY_EXISTS ||
                       rc == MC_NO_AVAILABLE_HANDLE,
                   "put_start", rc);
            if (rc == MC_OK) {
                expect(out.n >= 1 && out.n <= cfg.replica_num, "replica count", (int)out.n);
                /* the segment may be unmounted under us: then the object is gone */
                if ((r >> 40) % 8 == 0)
                    rc = mc_master_service_put_revoke(svc, me, key, len);
                else
                    rc = mc_master_service_put_end(svc, me, key, len);
                /* the segment may be unmounted under us: then our object is gone
                 * (REPLICA_IS_GONE, once; OBJECT_NOT_FOUND when it was also released),
                 * and on a shared key another worker may have put (and even finished)
                 * its own object since: then the key is not ours to end (not in flight /
                 * other owner) */
                expect(rc == MC_OK || rc == MC_OBJECT_NOT_FOUND || rc == MC_REPLICA_IS_GONE ||
                           (shared && (rc == MC_INVALID_WRITE || rc == MC_ILLEGAL_CLIENT)),
                       "put_end", rc);
            }
            break;
        case 2: /* get */
            rc = mc_master_service_get_replica_list(svc, key, len, &out);
            expect(rc == MC_OK || rc == MC_OBJECT_NOT_FOUND || rc == MC_REPLICA_IS_NOT_READY,
                   "get", rc);
            if (rc == MC_OK)
                expect(out.n >= 1 && out.replicas[0].status == MC_MASTER_REPLICA_COMPLETE,
                       "get replicas", (int)out.n);
            break;
        case 3:
            rc = mc_master_service_exist_key(svc, key, len);
            expect(rc == 0 || rc == 1, "exist", rc);
            break;
        case 4:
            rc = mc_master_service_remove(svc, key, len, (r >> 12) & 1);
            expect(rc == MC_OK || rc == MC_OBJECT_NOT_FOUND || rc == MC_OBJECT_HAS_LEASE ||
                       rc == MC_REPLICA_IS_NOT_READY,
                   "remove", rc);
            break;
        case 5: /* upsert */
            rc = mc_master_service_upsert_start(svc, me, key, len, size, &cfg, &out);
            expect(rc == MC_OK || rc == MC_OBJECT_ALREADY_EXISTS || rc == MC_OBJECT_HAS_LEASE ||
                       rc == MC_NO_AVAILABLE_HANDLE,
                   "upsert_start", rc);
            if (rc == MC_OK) {
                rc = mc_master_service_upsert_end(svc, me, key, len);
                expect(rc == MC_OK || rc == MC_OBJECT_NOT_FOUND || rc == MC_REPLICA_IS_GONE ||
                           (shared && (rc == MC_INVALID_WRITE || rc == MC_ILLEGAL_CLIENT)),
                       "upsert_end", rc);
            }
            break;
        case 6: { /* a batch (hashes and prefetches ahead while other threads grow tables) */
            char bk[8][32];
            mc_master_key keys[8];
            int res[8];
            for (int k = 0; k < 8; k++) {
                snprintf(bk[k], sizeof bk[k], "t%d-%d", id, (int)((r >> (k * 4)) % 200));
                keys[k] = (mc_master_key){bk[k], strlen(bk[k])};
            }
            rc = mc_master_service_batch_exist_key(svc, keys, 8, res);
            expect(rc == MC_OK, "batch_exist", rc);
            for (int k = 0; k < 8; k++)
                expect(res[k] == 0 || res[k] == 1, "batch_exist item", res[k]);
            break;
        }
        }
    }
    atomic_fetch_add(&done_workers, 1);
    return NULL;
}

static void *housekeeper(void *arg)
{
    (void)arg;
    mc_master_uuid owner = {99, 99};
    mc_master_segment extra = {.id = {50, 50}, .name = "extra:1", .base = 1ull << 40,
                               .size = 2 * MIB};
    bool mounted = false;
    for (int i = 0; atomic_load(&done_workers) < WORKERS && i < 100000; i++) {
        mc_master_service_tick(svc);
        if (i % 7 == 0)
            mc_master_service_evict(svc, 256 * KIB);
        if (i % 5 == 0) {
            int rc = mounted ? mc_master_service_unmount_segment(svc, extra.id, owner)
                             : mc_master_service_mount_segment(svc, &extra, owner);
            expect(rc == MC_OK, mounted ? "unmount" : "mount", rc);
            mounted = !mounted;
        }
        settle_as(owner);
        settle_as((mc_master_uuid){1, 1}); /* the owner of the three segments */
    }
    return NULL;
}

static uint64_t seg_used_sum;
static int sum_used(const mc_master_segment_info *info, void *ctx)
{
    (void)ctx;
    seg_used_sum += info->used;
    return 0;
}

typedef struct key_check {
    size_t n, incomplete;
} key_check;

static int check_key_cb(const void *key, size_t len, uint64_t size, bool complete, void *ctx)
{
    key_check *kc = ctx;
    (void)key, (void)len, (void)size;
    kc->n++;
    if (!complete)
        kc->incomplete++;
    return 0;
}

static void test_threads(void **state)
{
    (void)state;
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    cfg.shard_count = 64;
    cfg.default_kv_lease_ttl = 2; /* ms: leases come and go during the run */
    cfg.client_ttl = 3600;
    assert_int_equal(mc_master_service_create(&cfg, &svc), MC_OK);
    mc_master_uuid owner = {1, 1};
    for (uint64_t s = 0; s < 3; s++) {
        char name[16];
        snprintf(name, sizeof name, "seg:%d", (int)s);
        mc_master_segment seg = {.id = {s + 1, 0}, .name = name, .base = (s + 1) << 32,
                                 .size = 4 * MIB};
        assert_int_equal(mc_master_service_mount_segment(svc, &seg, owner), MC_OK);
    }
    pthread_t th[WORKERS + 1];
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i), 0);
    assert_int_equal(pthread_create(&th[WORKERS], NULL, housekeeper, NULL), 0);
    for (int i = 0; i <= WORKERS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(atomic_load(&unexpected), 0);
    /* the last heartbeats: every quarantine of a revoked write ends */
    for (int i = 0; i < WORKERS; i++)
        settle_as((mc_master_uuid){100 + (uint64_t)i, 7});
    settle_as(owner);
    settle_as((mc_master_uuid){99, 99}); /* the housekeeper's extra segment, if mounted */

    /* the index and the allocators agree */
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    key_check kc = {0, 0};
    assert_int_equal(mc_master_service_foreach_key(svc, check_key_cb, &kc), st.key_count);
    assert_int_equal(kc.incomplete, 0);
    assert_int_equal(st.processing_key_count, 0);
    assert_int_equal(st.processing_bytes, 0);
    seg_used_sum = 0;
    mc_master_service_foreach_segment(svc, sum_used, NULL);
    assert_int_equal(seg_used_sum, st.allocated_bytes);
    assert_true(st.allocated_bytes <= st.total_capacity_bytes);
    assert_true(st.evicted_keys > 0); /* the run did exercise eviction */

    /* everything removed: all space is back */
    uint64_t n;
    assert_int_equal(mc_master_service_remove_all(svc, true, &n), MC_OK);
    assert_int_equal(n, st.key_count);
    mc_master_service_get_stats(svc, &st);
    assert_int_equal(st.key_count, 0);
    /* objects that were still leased keep their space until the lease (2 ms) ends */
    assert_int_equal(st.allocated_bytes, st.deferred_free_bytes);
    for (int i = 0; i < 1000 && st.deferred_free_keys; i++) {
        usleep(1000);
        mc_master_service_tick(svc);
        mc_master_service_get_stats(svc, &st);
    }
    assert_int_equal(st.deferred_free_keys, 0);
    assert_int_equal(st.deferred_free_bytes, 0);
    assert_int_equal(st.allocated_bytes, 0);
    seg_used_sum = 0;
    mc_master_service_foreach_segment(svc, sum_used, NULL);
    assert_int_equal(seg_used_sum, 0);
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
