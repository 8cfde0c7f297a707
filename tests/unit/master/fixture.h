/* fixture.h: the master-service setup the unit tests share. The fake-clock tests
 * (test_master_graceful, test_master_tasks, test_master_replica_clear): a service on a
 * fake millisecond clock starting at FX_T0, and two segments "A" (id SA, owned by client
 * C1, at 4 GiB) and "B" (id SB, owned by C2, at 8 GiB). Segments are address ranges only
 * (never touched). The mutation-log tests (test_master_bootstrap, test_master_oplog,
 * test_master_promote): a service on the real clock (fx_plain_service), one put
 * (fx_put), an object's address (fx_addr_of), keys "k<i>" checked after a copy
 * (fx_expect_keys, fx_put_apart) and log files applied to a standby (fx_apply_listed).
 * Include after <cmocka.h>. Everything is static inline (or a static object a test may
 * use or not), so a test that needs only part of it compiles warning-free. */
#ifndef MC_TEST_MASTER_FIXTURE_H
#define MC_TEST_MASTER_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master_service.h"
#include "master/persist.h"

#define FX_T0 1000000u /* ms: where the fake clock starts */

/* The fake clock's time (ms); tests move it forward by hand. */
static uint64_t fake_now;

static inline uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return fake_now;
}

/* Clients and segment ids of the two segments. */
#define C1 ((mc_master_uuid){1, 1})
#define C2 ((mc_master_uuid){2, 2})
#define SA ((mc_master_uuid){10, 10})
#define SB ((mc_master_uuid){20, 20})

/* fx_config: cfg initialised with the defaults, then 16 shards, the fake clock (reset to
 * FX_T0) and the given read lease (ms). The caller sets the rest (client TTL, task
 * limits) before fx_service. */
static inline void fx_config(mc_master_config *cfg, uint64_t lease_ms)
{
    fake_now = FX_T0;
    mc_master_config_init(cfg);
    cfg->shard_count = 16;
    cfg->clock = fake_clock;
    cfg->default_kv_lease_ttl = lease_ms;
}

/* fx_service: creates the service from cfg (asserting MC_OK). */
static inline mc_master_service *fx_service(const mc_master_config *cfg)
{
    mc_master_service *svc = NULL;
    assert_int_equal(mc_master_service_create(cfg, &svc), MC_OK);
    return svc;
}

/* fx_mount_ab: mounts "A" (size_a bytes, for C1) and "B" (size_b bytes, for C2),
 * asserting both succeed. */
static inline void fx_mount_ab(mc_master_service *svc, uint64_t size_a, uint64_t size_b)
{
    mc_master_segment a = {.id = SA, .name = "A", .base = 1ull << 32, .size = size_a};
    mc_master_segment b = {.id = SB, .name = "B", .base = 2ull << 32, .size = size_b};
    assert_int_equal(mc_master_service_mount_segment(svc, &a, C1), MC_OK);
    assert_int_equal(mc_master_service_mount_segment(svc, &b, C2), MC_OK);
}

/* fx_plain_service: a service with the defaults (the real clock), 4 shards and
 * fence_base as its fence_epoch_base (0: the default, from the clock); asserts MC_OK. */
static inline mc_master_service *fx_plain_service(uint64_t fence_base)
{
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    cfg.shard_count = 4;
    cfg.fence_epoch_base = fence_base;
    return fx_service(&cfg);
}

/* fx_put: put_start then put_end of key (size bytes, default put config) by client c;
 * *addr (when not NULL) gets the first replica's address. MC_OK, or the first error. */
static inline int fx_put(mc_master_service *svc, mc_master_uuid c, const char *key,
                         uint64_t size, uint64_t *addr)
{
    mc_master_put_config pc;
    mc_master_put_config_init(&pc);
    mc_master_replica_list out;
    int rc = mc_master_service_put_start(svc, c, key, strlen(key), size, &pc, &out);
    if (rc)
        return rc;
    if (addr)
        *addr = out.replicas[0].address;
    return mc_master_service_put_end(svc, c, key, strlen(key));
}

/* fx_addr_of: the first replica's address of key (0 unless *rc, the lookup's code, is
 * MC_OK). */
static inline uint64_t fx_addr_of(mc_master_service *svc, const char *key, int *rc)
{
    mc_master_replica_list out;
    *rc = mc_master_service_get_replica_list(svc, key, strlen(key), &out);
    return *rc == MC_OK ? out.replicas[0].address : 0;
}

/* fx_expect_keys: of keys "k0".."k<n-1>" in svc, those with bit i set in gone are not
 * found and every other one is readable at addr[i]. */
static inline void fx_expect_keys(mc_master_service *svc, const uint64_t *addr, int n,
                                  uint64_t gone)
{
    char key[32];
    int rc;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "k%d", i);
        uint64_t at = fx_addr_of(svc, key, &rc);
        if (gone >> i & 1) {
            assert_int_equal(rc, MC_OBJECT_NOT_FOUND);
        } else {
            assert_int_equal(rc, MC_OK);
            assert_int_equal(at, addr[i]);
        }
    }
}

/* fx_put_apart: puts "new" (size bytes, by C1) into svc and asserts it overlaps none of
 * the keys "k<i>" (size + i bytes at addr[i], i < n) not in gone (bit i). Returns its
 * address. */
static inline uint64_t fx_put_apart(mc_master_service *svc, uint64_t size,
                                    const uint64_t *addr, int n, uint64_t gone)
{
    uint64_t na = 0;
    assert_int_equal(fx_put(svc, C1, "new", size, &na), MC_OK);
    for (int i = 0; i < n; i++)
        if (!(gone >> i & 1))
            assert_true(na + size <= addr[i] || na >= addr[i] + size + (uint64_t)i);
    return na;
}

static inline int fx_apply_cb(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    assert_int_equal(mc_master_log_apply(ctx, lsn, rec), MC_OK);
    return 0;
}

/* fx_apply_listed: applies every frame of each file (at most 1 MiB) the shell command
 * ls_cmd prints, one path a line, to svc with mc_master_log_apply (the HA follower's
 * path), asserting each applies and each file parses to its end. Returns the number of
 * files. */
static inline int fx_apply_listed(const char *ls_cmd, mc_master_service *svc)
{
    FILE *ls = popen(ls_cmd, "r");
    assert_non_null(ls);
    uint8_t *all = malloc(1 << 20);
    assert_non_null(all);
    char path[256];
    int files = 0;
    while (fgets(path, sizeof path, ls)) {
        path[strcspn(path, "\n")] = 0;
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        size_t n = fread(all, 1, 1 << 20, f);
        fclose(f);
        assert_true(n >= MC_MASTER_LOG_MAGIC_LEN);
        size_t good;
        assert_int_equal(mc_master_log_parse(all + MC_MASTER_LOG_MAGIC_LEN,
                                             n - MC_MASTER_LOG_MAGIC_LEN, fx_apply_cb, svc,
                                             &good, NULL),
                         MC_MASTER_LOG_END);
        files++;
    }
    pclose(ls);
    free(all);
    return files;
}

#endif
