/* Master service, fence epochs and quarantine (src/master/fence.c, docs/consistency.md)
 * on a fake clock: the epochs put_start hands out and how a failure raises them; the
 * space of a revoked / pre-empted / discarded write held until the segment's owner and
 * the writer both acknowledged their fence in a ping, and never handed to another
 * put_start before; unmount frees it; a writer whose client expired has its puts
 * discarded at once and its quarantine freed after the release timeout once the owner
 * fenced; acknowledgements count only from the client the fence was for; an upsert
 * replaces an object under a read lease in new space. Segments are address ranges only. */
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

/* OWNER mounts the segments; W1 and W2 write. */
static const mc_master_uuid OWNER = {9, 9}, W1 = {1, 1}, W2 = {2, 2};

static mc_master_config base_cfg(void)
{
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    cfg.shard_count = 16;
    cfg.clock = fake_clock;
    cfg.default_kv_lease_ttl = 500;
    cfg.client_ttl = 1000000; /* clients never expire, except in the expiry tests */
    cfg.fence_epoch_base = 1; /* epochs start at 1 (the default derives it from the clock) */
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

static mc_master_stats stats(mc_master_service *svc)
{
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    return st;
}

static int start(mc_master_service *svc, mc_master_uuid w, const char *key, uint64_t size,
                 mc_master_replica_list *out)
{
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    return mc_master_service_put_start(svc, w, key, strlen(key), size, &c, out);
}

static bool exists_quiet(mc_master_service *svc, const char *key)
{
    mc_master_key_info info;
    return mc_master_service_query_key(svc, key, strlen(key), &info) == MC_OK;
}

/* A ping of id with no acknowledgements; the caller frees the result. */
static mc_master_ping_result *ping(mc_master_service *svc, mc_master_uuid id)
{
    mc_master_ping_result *pr = malloc(sizeof *pr);
    assert_non_null(pr);
    assert_int_equal(mc_master_service_ping_fences(svc, id, NULL, pr), MC_OK);
    return pr;
}

/* id acknowledges what pr handed it (both kinds, or only one); returns the reply. */
static mc_master_ping_result *ack(mc_master_service *svc, mc_master_uuid id,
                                  const mc_master_ping_result *pr, bool owner_side,
                                  bool writer_side)
{
    mc_master_ping_request req = {0};
    if (owner_side) {
        req.owner_acks = pr->writer_fences;
        req.n_owner_acks = pr->n_writer_fences;
    }
    if (writer_side) {
        req.writer_acks = pr->target_fences;
        req.n_writer_acks = pr->n_target_fences;
    }
    mc_master_ping_result *r = malloc(sizeof *r);
    assert_non_null(r);
    assert_int_equal(mc_master_service_ping_fences(svc, id, &req, r), MC_OK);
    return r;
}

/* One full heartbeat of id: ping, apply (nothing to apply here), acknowledge. */
static void heartbeat(mc_master_service *svc, mc_master_uuid id)
{
    mc_master_ping_result *pr = ping(svc, id);
    free(ack(svc, id, pr, true, true));
    free(pr);
}

/* ---- epochs ---- */

static void test_epochs(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, OWNER);
    mount(svc, 2, "b:1", 1ull << 32, 16 * MIB, OWNER);
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    c.replica_num = 2;
    mc_master_replica_list out;
    /* never raised: the base epoch on every replica */
    assert_int_equal(mc_master_service_put_start(svc, W1, "k", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(out.n, 2);
    assert_int_equal(out.replicas[0].fence_epoch, 1);
    assert_int_equal(out.replicas[1].fence_epoch, 1);
    assert_int_equal(mc_master_service_put_end(svc, W1, "k", 1), MC_OK);
    /* a get reports no epoch: only writers use them */
    assert_int_equal(mc_master_service_get_replica_list(svc, "k", 1, &out), MC_OK);
    assert_int_equal(out.replicas[0].fence_epoch, 0);
    /* a revoke raises e(W1, a) and e(W1, b) to 2; W2's pairs are untouched */
    assert_int_equal(mc_master_service_put_start(svc, W1, "r", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_revoke(svc, W1, "r", 1), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, W1, "n", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].fence_epoch, 2);
    assert_int_equal(out.replicas[1].fence_epoch, 2);
    assert_int_equal(mc_master_service_put_start(svc, W2, "m", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].fence_epoch, 1);
    /* two failures of puts started at the same epoch cost one raise, not two */
    assert_int_equal(mc_master_service_put_start(svc, W2, "m2", 2, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_put_revoke(svc, W2, "m", 1), MC_OK);
    assert_int_equal(mc_master_service_put_revoke(svc, W2, "m2", 2), MC_OK);
    assert_int_equal(mc_master_service_put_start(svc, W2, "m3", 2, 1000, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].fence_epoch, 2);
    /* an upsert in place hands out the new writer's epochs */
    assert_int_equal(mc_master_service_upsert_start(svc, W1, "k", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].fence_epoch, 2);
    /* the config: fence_epoch_base 0 derives the base from the wall clock (a restarted
     * master must pass every epoch handed out before) */
    mc_master_config cfg = base_cfg();
    cfg.fence_epoch_base = 0;
    mc_master_service *svc2 = make(&cfg);
    mount(svc2, 1, "a:1", 0, 16 * MIB, OWNER);
    assert_int_equal(start(svc2, W1, "k", 10, &out), MC_OK);
    assert_true(out.replicas[0].fence_epoch > (1ull << 40));
    mc_master_service_destroy(svc2);
    mc_master_service_destroy(svc);
}

/* ---- quarantine until both acknowledgements ---- */

static void test_quarantine_until_both_acks(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, OWNER);
    mc_master_replica_list out;
    assert_int_equal(start(svc, W1, "r", 5000, &out), MC_OK);
    /* nothing pending yet: pings hand out nothing */
    mc_master_ping_result *pr = ping(svc, OWNER);
    assert_int_equal(pr->n_writer_fences + pr->n_target_fences, 0);
    free(pr);
    assert_int_equal(mc_master_service_put_revoke(svc, W1, "r", 1), MC_OK);
    assert_false(exists_quiet(svc, "r")); /* the key is gone at once */
    mc_master_stats st = stats(svc);
    assert_int_equal(st.allocated_bytes, 5056); /* the space is not */
    assert_int_equal(st.quarantined_bytes, 5056);
    assert_int_equal(st.quarantined_entries, 1);
    assert_int_equal(st.fences_pending, 2);
    assert_int_equal(st.fences_issued, 2);
    assert_int_equal(st.fences_acked, 0);
    /* the owner is told to fence W1 at 2, W1 to fence a:1 at 2 */
    mc_master_ping_result *po = ping(svc, OWNER);
    assert_int_equal(po->n_writer_fences, 1);
    assert_int_equal(po->n_target_fences, 0);
    assert_int_equal(po->writer_fences[0].writer.first, W1.first);
    assert_int_equal(po->writer_fences[0].writer.second, W1.second);
    assert_int_equal(po->writer_fences[0].min_epoch, 2);
    mc_master_ping_result *pw = ping(svc, W1);
    assert_int_equal(pw->n_writer_fences, 0);
    assert_int_equal(pw->n_target_fences, 1);
    assert_string_equal(pw->target_fences[0].segment, "a:1");
    assert_int_equal(pw->target_fences[0].min_epoch, 2);
    /* an acknowledgement from a client the fence was not for changes nothing */
    free(ack(svc, W2, po, true, false));
    free(ack(svc, W2, pw, false, true));
    free(ack(svc, OWNER, pw, false, true)); /* the owner is not the writer */
    assert_int_equal(stats(svc).fences_pending, 2);
    /* the writer's alone is not enough */
    free(ack(svc, W1, pw, false, true));
    st = stats(svc);
    assert_int_equal(st.fences_pending, 1);
    assert_int_equal(st.quarantined_bytes, 5056);
    mc_master_service_tick(svc);
    assert_int_equal(stats(svc).quarantined_bytes, 5056);
    /* fences are sent again until acknowledged */
    mc_master_ping_result *again = ping(svc, OWNER);
    assert_int_equal(again->n_writer_fences, 1);
    free(again);
    again = ping(svc, W1);
    assert_int_equal(again->n_target_fences, 0); /* acknowledged already */
    free(again);
    /* the owner's acknowledgement frees it, in that ping */
    free(ack(svc, OWNER, po, true, false));
    st = stats(svc);
    assert_int_equal(st.allocated_bytes, 0);
    assert_int_equal(st.quarantined_bytes, 0);
    assert_int_equal(st.quarantined_entries, 0);
    assert_int_equal(st.fences_pending, 0);
    assert_int_equal(st.fences_issued, 2);
    assert_int_equal(st.fences_acked, 2);
    free(po);
    free(pw);
    /* an acknowledgement in the other order frees as well */
    assert_int_equal(start(svc, W1, "r", 5000, &out), MC_OK);
    assert_int_equal(out.replicas[0].fence_epoch, 2);
    assert_int_equal(mc_master_service_put_revoke(svc, W1, "r", 1), MC_OK);
    heartbeat(svc, OWNER);
    assert_int_equal(stats(svc).quarantined_bytes, 5056);
    heartbeat(svc, W1);
    assert_int_equal(stats(svc).quarantined_bytes, 0);
    assert_int_equal(stats(svc).allocated_bytes, 0);
    /* bad acknowledgement lists */
    mc_master_ping_request bad = {NULL, 1, NULL, 0};
    mc_master_ping_result *r = malloc(sizeof *r);
    assert_int_equal(mc_master_service_ping_fences(svc, W1, &bad, r), MC_INVALID_PARAMS);
    bad = (mc_master_ping_request){NULL, MC_MASTER_MAX_FENCES + 1, NULL, 0};
    assert_int_equal(mc_master_service_ping_fences(svc, W1, &bad, r), MC_INVALID_PARAMS);
    mc_master_target_fence tf;
    memset(tf.segment, 'x', sizeof tf.segment); /* not NUL-terminated */
    tf.min_epoch = 5;
    bad = (mc_master_ping_request){NULL, 0, &tf, 1};
    assert_int_equal(mc_master_service_ping_fences(svc, W1, &bad, r), MC_INVALID_PARAMS);
    free(r);
    mc_master_service_destroy(svc);
}

/* The space of a revoked put is not given to the next put_start before both acks. */
static void test_revoked_space_not_reused_before_acks(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 1 * MIB, OWNER); /* room for exactly one 1 MiB object */
    mc_master_replica_list out;
    assert_int_equal(start(svc, W1, "old", 1 * MIB, &out), MC_OK);
    uint64_t addr = out.replicas[0].address;
    assert_int_equal(mc_master_service_put_revoke(svc, W1, "old", 3), MC_OK);
    /* another writer, the same writer, after a tick: no space (eviction finds nothing) */
    assert_int_equal(start(svc, W2, "new", 1 * MIB, &out), MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(start(svc, W1, "new", 1 * MIB, &out), MC_NO_AVAILABLE_HANDLE);
    fake_now += 10 * 60 * 1000; /* the release timeout too: the writer is alive */
    mc_master_service_tick(svc);
    assert_int_equal(start(svc, W2, "new", 1 * MIB, &out), MC_NO_AVAILABLE_HANDLE);
    heartbeat(svc, W1);
    assert_int_equal(start(svc, W2, "new", 1 * MIB, &out), MC_NO_AVAILABLE_HANDLE);
    heartbeat(svc, OWNER);
    assert_int_equal(start(svc, W2, "new", 1 * MIB, &out), MC_OK);
    assert_int_equal(out.replicas[0].address, addr);
    assert_int_equal(mc_master_service_put_end(svc, W2, "new", 3), MC_OK);

    /* the same for a stale put pre-empted by put_start (discard timeout 30 s): W2's new
     * put of the key gets other space, the old stays held */
    mc_master_service_destroy(svc);
    svc = make(NULL);
    mount(svc, 1, "a:1", 0, 2 * MIB, OWNER);
    assert_int_equal(start(svc, W1, "k", 1 * MIB, &out), MC_OK);
    addr = out.replicas[0].address;
    fake_now += 30000;
    mc_master_put_config hard;
    mc_master_put_config_init(&hard);
    hard.with_hard_pin = true; /* k2 below must not get its room by evicting k */
    assert_int_equal(mc_master_service_put_start(svc, W2, "k", 1, 1 * MIB, &hard, &out), MC_OK);
    assert_true(out.replicas[0].address != addr);
    assert_int_equal(stats(svc).put_discarded, 1);
    assert_int_equal(stats(svc).quarantined_bytes, 1 * MIB);
    assert_int_equal(mc_master_service_put_end(svc, W1, "k", 1), MC_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_service_put_end(svc, W2, "k", 1), MC_OK);
    assert_int_equal(start(svc, W2, "k2", 1 * MIB, &out), MC_NO_AVAILABLE_HANDLE);
    heartbeat(svc, W1);
    heartbeat(svc, OWNER);
    assert_int_equal(stats(svc).quarantined_bytes, 0);
    assert_int_equal(start(svc, W2, "k2", 1 * MIB, &out), MC_OK);
    assert_int_equal(out.replicas[0].address, addr);

    /* and a put released by tick after the release timeout (600 s) */
    assert_int_equal(mc_master_service_put_end(svc, W2, "k2", 2), MC_OK);
    assert_int_equal(mc_master_service_remove(svc, "k2", 2, true), MC_OK);
    assert_int_equal(mc_master_service_remove(svc, "k", 1, true), MC_OK);
    assert_int_equal(start(svc, W1, "z", 1 * MIB, &out), MC_OK);
    fake_now += 600000;
    mc_master_service_tick(svc);
    assert_false(exists_quiet(svc, "z"));
    assert_int_equal(stats(svc).put_released, 1);
    assert_int_equal(stats(svc).quarantined_bytes, 1 * MIB);
    heartbeat(svc, OWNER);
    heartbeat(svc, W1);
    assert_int_equal(stats(svc).quarantined_bytes, 0);
    mc_master_service_destroy(svc);
}

/* ---- unmount ---- */

static void test_unmount_frees_quarantine(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, OWNER);
    mount(svc, 2, "b:1", 1ull << 32, 16 * MIB, W2);
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    c.replica_num = 2;
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, W1, "r", 1, 4096, &c, &out), MC_OK);
    assert_int_equal(out.n, 2);
    assert_int_equal(mc_master_service_put_revoke(svc, W1, "r", 1), MC_OK);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.quarantined_entries, 2);
    assert_int_equal(st.quarantined_bytes, 8192);
    /* a:1 goes: its entry with it (its memory is gone), b:1's stays */
    mc_master_uuid a = {1, 1};
    assert_int_equal(mc_master_service_unmount_segment(svc, a, OWNER), MC_OK);
    st = stats(svc);
    assert_int_equal(st.quarantined_entries, 1);
    assert_int_equal(st.quarantined_bytes, 4096);
    assert_int_equal(st.allocated_bytes, 4096);
    /* b:1's owner is W2: the owner fence goes to it */
    mc_master_ping_result *pr = ping(svc, W2);
    assert_int_equal(pr->n_writer_fences, 1);
    free(pr);
    mc_master_uuid b = {2, 2};
    assert_int_equal(mc_master_service_unmount_segment(svc, b, W2), MC_OK);
    st = stats(svc);
    assert_int_equal(st.quarantined_entries, 0);
    assert_int_equal(st.quarantined_bytes, 0);
    assert_int_equal(st.allocated_bytes, 0);
    /* acknowledgements after that are harmless */
    heartbeat(svc, W1);
    heartbeat(svc, W2);
    mc_master_service_destroy(svc);
}

/* ---- a writer whose client expires ---- */

/* Lets ms pass in 1 s steps with the live clients' heartbeats (full, or only pings
 * without acknowledgements when !acks) and a tick after each. */
static void advance(mc_master_service *svc, uint64_t ms, bool acks)
{
    for (uint64_t t = 0; t < ms; t += 1000) {
        fake_now += 1000;
        if (acks) {
            heartbeat(svc, OWNER);
            heartbeat(svc, W2);
        } else {
            free(ping(svc, OWNER));
        }
        mc_master_service_tick(svc);
    }
}

static void test_expired_writer(void **state)
{
    (void)state;
    mc_master_config cfg = base_cfg();
    cfg.client_ttl_ms = 10000;
    cfg.put_start_discard_timeout_sec = 30;
    cfg.put_start_release_timeout_sec = 60;
    mc_master_service *svc = make(&cfg);
    mount(svc, 1, "a:1", 0, 16 * MIB, OWNER);
    assert_int_equal(mc_master_service_remount_segments(svc, NULL, 0, W1), MC_OK);
    assert_int_equal(mc_master_service_remount_segments(svc, NULL, 0, W2), MC_OK);
    mc_master_replica_list out;
    assert_int_equal(start(svc, W1, "k", 1 * MIB, &out), MC_OK);
    /* W1 falls silent (a kill -9 mid-put); the others ping */
    advance(svc, 11000, true);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.clients_expired, 1);
    /* its put is discarded at expiry, long before the discard timeout: the key is free */
    assert_false(exists_quiet(svc, "k"));
    assert_int_equal(st.put_discarded, 1);
    assert_int_equal(st.quarantined_bytes, 1 * MIB);
    assert_int_equal(start(svc, W2, "k", 1 * MIB, &out), MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, W2, "k", 1), MC_OK);
    /* the owner fenced W1 (its heartbeats above); W1 never acknowledges: freed once the
     * release timeout has passed since the quarantine began */
    advance(svc, 58000, true); /* 59 s after the quarantine began (at expiry, 10 s) */
    assert_int_equal(stats(svc).quarantined_bytes, 1 * MIB);
    advance(svc, 1000, true);
    st = stats(svc);
    assert_int_equal(st.quarantined_bytes, 0);
    assert_int_equal(st.allocated_bytes, 1 * MIB); /* W2's object */
    assert_int_equal(st.fences_pending, 1); /* W1's own fence, should it come back */
    mc_master_service_destroy(svc);
}

/* Without the owner's acknowledgement the release timeout does not free: TCP bytes of
 * the dead writer may still sit in the owner's socket. A writer that comes back under
 * its id gets its fences with its first ping and then counts as alive again. */
static void test_expired_writer_needs_owner_fence(void **state)
{
    (void)state;
    mc_master_config cfg = base_cfg();
    cfg.client_ttl_ms = 10000;
    cfg.put_start_release_timeout_sec = 60;
    mc_master_service *svc = make(&cfg);
    mount(svc, 1, "a:1", 0, 16 * MIB, OWNER);
    assert_int_equal(mc_master_service_remount_segments(svc, NULL, 0, W1), MC_OK);
    mc_master_replica_list out;
    assert_int_equal(start(svc, W1, "k", 4096, &out), MC_OK);
    advance(svc, 11000, false); /* the owner pings but does not acknowledge */
    assert_int_equal(stats(svc).clients_expired, 1);
    advance(svc, 120000, false);
    assert_int_equal(stats(svc).quarantined_bytes, 4096);
    /* W1 resumes: its first ping says NEED_REMOUNT and hands it its fence */
    mc_master_ping_result *pr = ping(svc, W1);
    assert_int_equal(pr->client_status, MC_MASTER_CLIENT_NEED_REMOUNT);
    assert_int_equal(pr->n_target_fences, 1);
    assert_string_equal(pr->target_fences[0].segment, "a:1");
    assert_int_equal(pr->target_fences[0].min_epoch, 2);
    assert_int_equal(mc_master_service_remount_segments(svc, NULL, 0, W1), MC_OK);
    free(ack(svc, W1, pr, true, true));
    free(pr);
    assert_int_equal(stats(svc).quarantined_bytes, 4096); /* the owner still has not */
    heartbeat(svc, OWNER);
    assert_int_equal(stats(svc).quarantined_bytes, 0);
    mc_master_service_destroy(svc);
}

/* ---- upsert under a read lease ---- */

static void test_upsert_under_lease(void **state)
{
    (void)state;
    mc_master_service *svc = make(NULL);
    mount(svc, 1, "a:1", 0, 16 * MIB, OWNER);
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_upsert_start(svc, W1, "u", 1, 1000, &c, &out), MC_OK);
    uint64_t addr = out.replicas[0].address;
    assert_int_equal(mc_master_service_upsert_end(svc, W1, "u", 1), MC_OK);
    assert_int_equal(mc_master_service_get_replica_list(svc, "u", 1, &out), MC_OK);
    /* the reader's bytes stay: new space, the old kept until the lease ends */
    assert_int_equal(mc_master_service_upsert_start(svc, W2, "u", 1, 1000, &c, &out), MC_OK);
    assert_true(out.replicas[0].address != addr);
    mc_master_stats st = stats(svc);
    assert_int_equal(st.key_count, 1);
    assert_int_equal(st.allocated_bytes, 2048);
    assert_int_equal(st.deferred_free_keys, 1);
    assert_int_equal(st.deferred_free_bytes, 1024);
    assert_int_equal(mc_master_service_upsert_end(svc, W2, "u", 1), MC_OK);
    fake_now += 500;
    mc_master_service_tick(svc);
    st = stats(svc);
    assert_int_equal(st.allocated_bytes, 1024);
    assert_int_equal(st.deferred_free_keys, 0);
    /* a revoked upsert that had replaced a leased object: both spaces handled */
    assert_int_equal(mc_master_service_get_replica_list(svc, "u", 1, &out), MC_OK);
    assert_int_equal(mc_master_service_upsert_start(svc, W1, "u", 1, 1000, &c, &out), MC_OK);
    assert_int_equal(mc_master_service_upsert_revoke(svc, W1, "u", 1), MC_OK);
    assert_false(exists_quiet(svc, "u"));
    fake_now += 500;
    mc_master_service_tick(svc);
    heartbeat(svc, W1);
    heartbeat(svc, OWNER);
    assert_int_equal(stats(svc).allocated_bytes, 0);
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_quarantine_until_both_acks),
        cmocka_unit_test(test_revoked_space_not_reused_before_acks),
        cmocka_unit_test(test_unmount_frees_quarantine),
        cmocka_unit_test(test_expired_writer),
        cmocka_unit_test(test_expired_writer_needs_owner_fence),
        cmocka_unit_test(test_upsert_under_lease),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
