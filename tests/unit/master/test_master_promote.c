/* A standby promoted with writes in flight on its old leader (master/persist.h
 * mc_master_log_promote, src/master/inflight.c; docs/ha.md "Writes in flight at a
 * failover"): a real leader service logs into a temporary directory; its frames are
 * applied one by one to a standby service (mc_master_log_apply, the HA follower's path);
 * the standby is promoted. The write whose put_end the leader never saw is not
 * readable, its range is quarantined (no new put is placed on it) under a fence above
 * the epoch the old leader gave its writer, the writer's late put_end finds nothing and
 * its retried put succeeds, and the range is freed once the owner and the writer
 * acknowledged the fences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixture.h"
#include "master/master_service.h"
#include "master/oplog_codec.h"
#include "master/persist.h"

static const mc_master_uuid OWNER = {1, 1}, WRITER = {2, 2};
static const mc_master_segment SEG = {.id = {9, 9}, .name = "127.0.0.1:1",
                                      .te_endpoint = "127.0.0.1:1", .base = 1ull << 32,
                                      .size = 16 << 20};
#define LEADER_EPOCH_BASE (1ull << 62) /* above anything the standby's clock gives */
#define W 1000000ull                   /* bytes of the write in flight */

static int start(mc_master_service *svc, mc_master_uuid c, const char *key, uint64_t size,
                 mc_master_replica_list *out)
{
    mc_master_put_config pc;
    mc_master_put_config_init(&pc);
    return mc_master_service_put_start(svc, c, key, strlen(key), size, &pc, out);
}

/* Applies every frame of the log file in dir (the one there is) to svc. */
static void apply_dir(const char *dir, mc_master_service *svc)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls %s/oplog-*.log", dir);
    assert_int_equal(fx_apply_listed(cmd, svc), 1);
}

/* Starts ld's mutation log in dir (every record written before its reply) with *o (set
 * here; the caller may start a restore with it later) and mounts SEG for OWNER. */
static mc_master_persist *log_into(mc_master_service *ld, const char *dir,
                                   mc_master_persist_opts *o)
{
    *o = (mc_master_persist_opts){.dir = dir, .interval_s = 3600, .retention = 2,
                                  .sync = MC_MASTER_LOG_SYNC_WRITE};
    char err[256];
    mc_master_persist *p = NULL;
    assert_int_equal(mc_master_persist_start(ld, o, &p, NULL, err, sizeof err), MC_OK);
    assert_int_equal(mc_master_service_mount_segment(ld, &SEG, OWNER), MC_OK);
    return p;
}

static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

static uint64_t quarantined(mc_master_service *svc)
{
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    return st.quarantined_entries;
}

static void test_promotion_quarantines_writes_in_flight(void **st)
{
    (void)st;
    char dir[64], cmd[128];
    snprintf(dir, sizeof dir, "/tmp/mc-promote-test-%d", (int)getpid());
    /* the standby exists first: its clock-based fence base is below the leader's */
    mc_master_service *sb = fx_plain_service(0);
    mc_master_service *ld = fx_plain_service(LEADER_EPOCH_BASE);
    mc_master_persist_opts o;
    mc_master_persist *p = log_into(ld, dir, &o);
    mc_master_replica_list rl;
    /* complete before the failover */
    assert_int_equal(start(ld, WRITER, "done", 4096, &rl), MC_OK);
    uint64_t done_addr = rl.replicas[0].address;
    assert_int_equal(mc_master_service_put_end(ld, WRITER, "done", 4), MC_OK);
    /* in flight at the failover: replicated put_start, no put_end */
    assert_int_equal(start(ld, WRITER, "inflight", W, &rl), MC_OK);
    uint64_t fl_addr = rl.replicas[0].address;
    assert_true(rl.replicas[0].fence_epoch >= LEADER_EPOCH_BASE);
    uint64_t fl_epoch = rl.replicas[0].fence_epoch;
    mc_master_persist_stop(p);
    mc_master_service_destroy(ld); /* the old leader is gone */

    apply_dir(dir, sb);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_get_replica_list(sb, "inflight", 8, &out),
                     MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_log_promote(sb), 1); /* the one range of "inflight" */
    assert_int_equal(quarantined(sb), 1);
    assert_int_equal(mc_master_log_promote(sb), 0); /* nothing left: a second call is a no-op */

    /* the owner comes back to the new leader */
    assert_int_equal(mc_master_service_remount_segments(sb, &SEG, 1, OWNER), MC_OK);
    assert_int_equal(mc_master_service_get_replica_list(sb, "done", 4, &out), MC_OK);
    assert_int_equal(out.replicas[0].address, done_addr);
    assert_int_equal(mc_master_service_get_replica_list(sb, "inflight", 8, &out),
                     MC_OBJECT_NOT_FOUND); /* never readable */
    assert_int_equal(mc_master_service_exist_key(sb, "inflight", 8), 0);

    /* the writer's late put_end: no such write; its retry is a clean new put */
    assert_int_equal(mc_master_service_put_end(sb, WRITER, "inflight", 8),
                     MC_OBJECT_NOT_FOUND);
    assert_int_equal(start(sb, WRITER, "inflight", W, &rl), MC_OK);
    assert_false(overlaps(rl.replicas[0].address, W, fl_addr, W));
    assert_true(rl.replicas[0].fence_epoch > fl_epoch); /* above the old leader's */
    assert_int_equal(mc_master_service_put_end(sb, WRITER, "inflight", 8), MC_OK);
    assert_int_equal(mc_master_service_get_replica_list(sb, "inflight", 8, &out), MC_OK);

    /* no other put is placed on the quarantined range, however full the segment gets */
    char key[32];
    int placed = 0;
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof key, "fill%d", i);
        if (start(sb, OWNER, key, W, &rl) != MC_OK)
            break;
        placed++;
        assert_false(overlaps(rl.replicas[0].address, W, fl_addr, W));
        assert_int_equal(mc_master_service_put_end(sb, OWNER, key, strlen(key)), MC_OK);
    }
    assert_true(placed >= 10);
    assert_int_equal(quarantined(sb), 1);

    /* the fences: the owner must refuse the writer below the old write's epoch + 1,
     * the writer must not write below it to the segment; once both acknowledged, the
     * range is free again */
    mc_master_ping_result *po = malloc(sizeof *po), *pw = malloc(sizeof *pw);
    assert_non_null(po);
    assert_non_null(pw);
    assert_int_equal(mc_master_service_ping_fences(sb, OWNER, NULL, po), MC_OK);
    assert_int_equal(po->n_writer_fences, 1);
    assert_true(po->writer_fences[0].min_epoch > fl_epoch);
    assert_int_equal(mc_master_service_ping_fences(sb, WRITER, NULL, pw), MC_OK);
    assert_int_equal(pw->n_target_fences, 1);
    assert_string_equal(pw->target_fences[0].segment, SEG.te_endpoint);
    assert_true(pw->target_fences[0].min_epoch > fl_epoch);
    mc_master_ping_request req = {.owner_acks = po->writer_fences,
                                  .n_owner_acks = po->n_writer_fences};
    mc_master_ping_result *r = malloc(sizeof *r);
    assert_non_null(r);
    assert_int_equal(mc_master_service_ping_fences(sb, OWNER, &req, r), MC_OK);
    assert_int_equal(quarantined(sb), 1); /* the writer has not acknowledged yet */
    req = (mc_master_ping_request){.writer_acks = pw->target_fences,
                                   .n_writer_acks = pw->n_target_fences};
    assert_int_equal(mc_master_service_ping_fences(sb, WRITER, &req, r), MC_OK);
    assert_int_equal(quarantined(sb), 0);
    free(po);
    free(pw);
    free(r);
    mc_master_service_destroy(sb);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A write the leader completed, and a write applied twice (a snapshot's frame and the
 * log's): nothing is quarantined for the first, one range for the second. */
static void test_completed_and_duplicate_starts(void **st)
{
    (void)st;
    char dir[64], cmd[128];
    snprintf(dir, sizeof dir, "/tmp/mc-promote-test2-%d", (int)getpid());
    mc_master_service *ld = fx_plain_service(0), *sb = fx_plain_service(0);
    mc_master_persist_opts o;
    mc_master_persist *p = log_into(ld, dir, &o);
    mc_master_replica_list rl;
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(start(ld, WRITER, key, 8192, &rl), MC_OK);
        assert_int_equal(mc_master_service_put_end(ld, WRITER, key, strlen(key)), MC_OK);
    }
    assert_int_equal(start(ld, WRITER, "open", 8192, &rl), MC_OK);
    mc_master_persist_stop(p);
    mc_master_service_destroy(ld);
    apply_dir(dir, sb);
    apply_dir(dir, sb); /* every record twice */
    assert_int_equal(mc_master_log_promote(sb), 1);
    mc_master_service_destroy(sb);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Copy tasks across a failover and a restart (task / task_end records): a finished
 * task is reported as it ended, one in flight ends FAILED with a message, its
 * executor's late report is refused, and its reservation (which the executor may still
 * be filling) is quarantined. */
static const mc_master_uuid OWNER2 = {3, 3};
static const mc_master_segment SEG2 = {.id = {8, 8}, .name = "127.0.0.1:2",
                                       .te_endpoint = "127.0.0.1:2", .base = 1ull << 40,
                                       .size = 16 << 20};

static void check_tasks(mc_master_service *svc, mc_master_uuid done, mc_master_uuid open)
{
    mc_master_task_info ti;
    assert_int_equal(mc_master_service_query_task(svc, done, &ti), MC_OK);
    assert_int_equal(ti.status, MC_MASTER_TASK_SUCCESS);
    assert_int_equal(mc_master_service_query_task(svc, open, &ti), MC_OK);
    assert_int_equal(ti.status, MC_MASTER_TASK_FAILED);
    assert_non_null(strstr(ti.message, "interrupted by a master failover or restart"));
    /* the executor's late report: the task is over */
    assert_int_equal(mc_master_service_mark_task_to_complete(svc, OWNER2, open, 0, MC_OK, ""),
                     MC_INVALID_PARAMS);
    /* the finished copy's replica is the object's; the open one's range is held */
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_remount_segments(svc, &SEG, 1, OWNER), MC_OK);
    assert_int_equal(mc_master_service_remount_segments(svc, &SEG2, 1, OWNER2), MC_OK);
    assert_int_equal(mc_master_service_get_replica_list(svc, "a", 1, &out), MC_OK);
    assert_int_equal(out.n, 2);
    assert_int_equal(mc_master_service_get_replica_list(svc, "b", 1, &out), MC_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(quarantined(svc), 1);
}

static void test_tasks_across_promotion_and_restore(void **st)
{
    (void)st;
    char dir[64], cmd[128];
    snprintf(dir, sizeof dir, "/tmp/mc-promote-test3-%d", (int)getpid());
    mc_master_service *ld = fx_plain_service(0);
    mc_master_persist_opts o;
    mc_master_persist *p = log_into(ld, dir, &o);
    mc_master_replica_list rl;
    assert_int_equal(start(ld, WRITER, "a", 8192, &rl), MC_OK);
    assert_int_equal(mc_master_service_put_end(ld, WRITER, "a", 1), MC_OK);
    assert_int_equal(start(ld, WRITER, "b", 8192, &rl), MC_OK);
    assert_int_equal(mc_master_service_put_end(ld, WRITER, "b", 1), MC_OK);
    assert_int_equal(mc_master_service_mount_segment(ld, &SEG2, OWNER2), MC_OK);
    const char *tg[1] = {SEG2.name};
    mc_master_uuid t1, t2;
    mc_master_task_work w;
    uint32_t n;
    assert_int_equal(mc_master_service_create_copy_task(ld, "a", 1, NULL, tg, 1, &t1), MC_OK);
    assert_int_equal(mc_master_service_fetch_tasks(ld, OWNER2, &w, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(mc_master_service_mark_task_to_complete(ld, OWNER2, t1, 0, MC_OK, ""),
                     MC_OK);
    assert_int_equal(mc_master_service_create_copy_task(ld, "b", 1, NULL, tg, 1, &t2), MC_OK);
    assert_int_equal(mc_master_service_fetch_tasks(ld, OWNER2, &w, &n), MC_OK);
    assert_int_equal(n, 1); /* t2 is being copied by OWNER2 when the leader dies */
    mc_master_persist_stop(p);
    mc_master_service_destroy(ld);

    /* a standby applying the leader's log, promoted */
    mc_master_service *sb = fx_plain_service(0);
    apply_dir(dir, sb);
    mc_master_task_info ti;
    assert_int_equal(mc_master_log_promote(sb), 1); /* t2's reservation */
    check_tasks(sb, t1, t2);
    mc_master_service_destroy(sb);

    /* a restart with restore of the same directory */
    mc_master_service *rs = fx_plain_service(0);
    o.restore = true;
    char err[256];
    assert_int_equal(mc_master_persist_start(rs, &o, &p, NULL, err, sizeof err), MC_OK);
    check_tasks(rs, t1, t2);
    (void)ti;
    mc_master_persist_stop(p);
    mc_master_service_destroy(rs);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_promotion_quarantines_writes_in_flight),
        cmocka_unit_test(test_completed_and_duplicate_starts),
        cmocka_unit_test(test_tasks_across_promotion_and_restore),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
