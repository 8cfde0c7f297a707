/* fixture.h: the master-service setup the fake-clock unit tests share (test_master_graceful,
 * test_master_tasks, test_master_replica_clear): a service on a fake millisecond clock
 * starting at FX_T0, and two segments "A" (id SA, owned by client C1, at 4 GiB) and "B"
 * (id SB, owned by C2, at 8 GiB). Segments are address ranges only (never touched).
 * Include after <cmocka.h>. Everything is static inline (or a static object a test may
 * use or not), so a test that needs only part of it compiles warning-free. */
#ifndef MC_TEST_MASTER_FIXTURE_H
#define MC_TEST_MASTER_FIXTURE_H

#include <stdint.h>

#include "master/master_service.h"

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

#endif
