/* Master service, replica copy / move tasks (master/tasks.c) on a fake clock: a copy
 * reserves space on the target, hidden until its executor (the target's owner) reports
 * OK, then the object has one more COMPLETE replica; a move drops its source; a failed
 * report gives the space back; the pending timeout and a target segment unmounted fail
 * the task with a message; the finished table is bounded; the pending limit answers
 * TASK_PENDING_LIMIT_EXCEEDED; an upsert during the copy spoils it; bad arguments get
 * upstream's codes. Segments are address
 * ranges only (never touched: the executor's transfer is not part of this test). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixture.h"

#define OBJ (256 * 1024ull)

/* A (C1, 4 objects) and B (C2, 2 objects) (fixture.h), with the task limits given. */
static mc_master_service *make(uint32_t max_finished, uint32_t max_pending)
{
    mc_master_config cfg;
    fx_config(&cfg, 10);
    cfg.client_ttl_ms = 1000000;
    cfg.max_total_finished_tasks = max_finished;
    cfg.max_total_pending_tasks = max_pending;
    cfg.pending_task_timeout_ms = 5000;
    cfg.processing_task_timeout_ms = 5000;
    mc_master_service *svc = fx_service(&cfg);
    fx_mount_ab(svc, 4 * OBJ, 2 * OBJ);
    return svc;
}

static void put_on_a(mc_master_service *svc, const char *key)
{
    const char *pref[1] = {"A"};
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    c.preferred_segments = pref;
    c.n_preferred = 1;
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_put_start(svc, C1, key, strlen(key), OBJ, &c, &out),
                     MC_OK);
    assert_int_equal(mc_master_service_put_end(svc, C1, key, strlen(key)), MC_OK);
}

/* The segment names of key's replicas as a string ("A", "AB", ...), "" when absent. */
static const char *where(mc_master_service *svc, const char *key)
{
    static char s[16];
    mc_master_replica_list out;
    s[0] = '\0';
    fake_now += 100; /* past the last lease */
    if (mc_master_service_get_replica_list(svc, key, strlen(key), &out) != MC_OK)
        return s;
    for (uint32_t i = 0; i < out.n; i++) {
        assert_int_equal(out.replicas[i].status, MC_MASTER_REPLICA_COMPLETE);
        strcat(s, out.replicas[i].segment_id.first == SA.first ? "A" : "B");
    }
    fake_now += 100;
    return s;
}

static int status_of(mc_master_service *svc, mc_master_uuid id, char *msg)
{
    mc_master_task_info t;
    int rc = mc_master_service_query_task(svc, id, &t);
    if (rc != MC_OK)
        return rc;
    if (msg)
        strcpy(msg, t.message);
    return t.status;
}

static mc_master_uuid copy_to_b(mc_master_service *svc, const char *key)
{
    const char *t[1] = {"B"};
    mc_master_uuid id;
    assert_int_equal(mc_master_service_create_copy_task(svc, key, strlen(key), NULL, t, 1, &id),
                     MC_OK);
    return id;
}

static void copy_then_commit(void **state)
{
    (void)state;
    mc_master_service *svc = make(100, 100);
    put_on_a(svc, "k");
    mc_master_uuid id = copy_to_b(svc, "k");
    mc_master_task_info t;
    assert_int_equal(mc_master_service_query_task(svc, id, &t), MC_OK);
    assert_int_equal(t.status, MC_MASTER_TASK_PENDING);
    assert_int_equal(t.type, MC_MASTER_TASK_REPLICA_COPY);
    assert_true(t.assigned_client.first == C2.first);
    assert_true(t.created_at_ms_epoch > 0);

    mc_master_task_work w;
    uint32_t n = 9;
    /* not C1's work: its target is C2's segment */
    assert_int_equal(mc_master_service_fetch_tasks(svc, C1, &w, &n), MC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(mc_master_service_fetch_tasks(svc, C2, &w, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_true(w.dst_address >= (2ull << 32) && w.dst_address < (2ull << 32) + 2 * OBJ);
    assert_true(w.src_address >= (1ull << 32) && w.src_address < (1ull << 32) + 4 * OBJ);
    assert_int_equal(w.size, OBJ);
    assert_int_equal(w.key_len, 1);
    assert_int_equal(status_of(svc, id, NULL), MC_MASTER_TASK_PROCESSING);
    assert_string_equal(where(svc, "k"), "A"); /* hidden until reported */
    /* only the executor may report */
    assert_int_equal(mc_master_service_mark_task_to_complete(svc, C1, id, 0, MC_OK, NULL),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_mark_task_to_complete(svc, C2, id, 0, MC_OK, NULL),
                     MC_OK);
    assert_int_equal(status_of(svc, id, NULL), MC_MASTER_TASK_SUCCESS);
    assert_string_equal(where(svc, "k"), "AB");
    /* B holds one now */
    const char *t1[1] = {"B"};
    mc_master_uuid id2;
    assert_int_equal(mc_master_service_create_copy_task(svc, "k", 1, NULL, t1, 1, &id2),
                     MC_REPLICA_ALREADY_EXISTS);
    mc_master_service_destroy(svc);
}

static void move_drops_source(void **state)
{
    (void)state;
    mc_master_service *svc = make(100, 100);
    put_on_a(svc, "m");
    const char *t[1] = {"B"};
    mc_master_uuid id;
    assert_int_equal(mc_master_service_create_move_task(svc, "m", 1, "A", t, 1, &id), MC_OK);
    mc_master_task_work w;
    uint32_t n;
    assert_int_equal(mc_master_service_fetch_tasks(svc, C2, &w, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(mc_master_service_mark_task_to_complete(svc, C2, id, 0, MC_OK, NULL),
                     MC_OK);
    assert_int_equal(status_of(svc, id, NULL), MC_MASTER_TASK_SUCCESS);
    assert_string_equal(where(svc, "m"), "B");
    mc_master_service_destroy(svc);
}

static void failure_frees_space(void **state)
{
    (void)state;
    mc_master_service *svc = make(100, 100);
    put_on_a(svc, "f1");
    put_on_a(svc, "f2");
    put_on_a(svc, "f3");
    /* B has room for two: the third copy is refused while two are reserved */
    mc_master_uuid i1 = copy_to_b(svc, "f1"), i2 = copy_to_b(svc, "f2");
    const char *t[1] = {"B"};
    mc_master_uuid i3;
    assert_int_equal(mc_master_service_create_copy_task(svc, "f3", 2, NULL, t, 1, &i3),
                     MC_NO_AVAILABLE_HANDLE);
    mc_master_task_work w;
    uint32_t n;
    assert_int_equal(mc_master_service_fetch_tasks(svc, C2, &w, &n), MC_OK);
    assert_true(n == 1 && w.id.first == i1.first);
    assert_int_equal(mc_master_service_mark_task_to_complete(svc, C2, i1, 0, MC_TRANSFER_FAIL,
                                                             "source unreachable"),
                     MC_OK);
    char msg[256];
    assert_int_equal(status_of(svc, i1, msg), MC_MASTER_TASK_FAILED);
    assert_non_null(strstr(msg, "source unreachable"));
    assert_string_equal(where(svc, "f1"), "A");
    /* its space came back: the third copy fits now */
    assert_int_equal(mc_master_service_create_copy_task(svc, "f3", 2, NULL, t, 1, &i3), MC_OK);
    /* the pending timeout fails the two left */
    fake_now += 6000;
    mc_master_service_tick(svc);
    assert_int_equal(status_of(svc, i2, msg), MC_MASTER_TASK_FAILED);
    assert_non_null(strstr(msg, "not fetched"));
    assert_int_equal(status_of(svc, i3, NULL), MC_MASTER_TASK_FAILED);
    mc_master_service_destroy(svc);
}

static void target_gone_fails(void **state)
{
    (void)state;
    mc_master_service *svc = make(100, 100);
    put_on_a(svc, "g");
    mc_master_uuid id = copy_to_b(svc, "g");
    mc_master_task_work w;
    uint32_t n;
    assert_int_equal(mc_master_service_fetch_tasks(svc, C2, &w, &n), MC_OK);
    assert_int_equal(mc_master_service_unmount_segment(svc, SB, C2), MC_OK);
    mc_master_service_tick(svc);
    char msg[256];
    assert_int_equal(status_of(svc, id, msg), MC_MASTER_TASK_FAILED);
    assert_non_null(strstr(msg, "unmounted"));
    /* a late report of the executor is refused, and nothing changed */
    assert_int_equal(mc_master_service_mark_task_to_complete(svc, C2, id, 0, MC_OK, NULL),
                     MC_INVALID_PARAMS);
    assert_string_equal(where(svc, "g"), "A");
    mc_master_service_destroy(svc);
}

static void upsert_spoils_copy(void **state)
{
    (void)state;
    mc_master_service *svc = make(100, 100);
    put_on_a(svc, "u");
    mc_master_uuid id = copy_to_b(svc, "u");
    mc_master_task_work w;
    uint32_t n;
    assert_int_equal(mc_master_service_fetch_tasks(svc, C2, &w, &n), MC_OK);
    /* the creation's lease lapses; an upsert of the same size rewrites in place while the
     * executor copies: the copy may mix old and new bytes and must not be published */
    fake_now += 1000;
    mc_master_put_config c;
    mc_master_put_config_init(&c);
    mc_master_replica_list out;
    assert_int_equal(mc_master_service_upsert_start(svc, C1, "u", 1, OBJ, &c, &out), MC_OK);
    assert_int_equal(out.replicas[0].address, w.src_address); /* in place indeed */
    assert_int_equal(mc_master_service_upsert_end(svc, C1, "u", 1), MC_OK);
    assert_int_equal(mc_master_service_mark_task_to_complete(svc, C2, id, 0, MC_OK, NULL),
                     MC_OK);
    char msg[256];
    assert_int_equal(status_of(svc, id, msg), MC_MASTER_TASK_FAILED);
    assert_non_null(strstr(msg, "rewritten"));
    assert_string_equal(where(svc, "u"), "A");
    mc_master_service_destroy(svc);
}

static void bounds_and_bad_arguments(void **state)
{
    (void)state;
    mc_master_service *svc = make(2, 1);
    put_on_a(svc, "b");
    const char *t[2] = {"B", "B"};
    const char *none[1] = {"nowhere"};
    const char *self[1] = {"A"};
    mc_master_uuid id;
    assert_int_equal(mc_master_service_create_copy_task(svc, "zz", 2, NULL, t, 1, &id),
                     MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_service_create_copy_task(svc, "b", 1, NULL, none, 1, &id),
                     MC_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_master_service_create_copy_task(svc, "b", 1, NULL, t, 2, &id),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_create_copy_task(svc, "b", 1, NULL, t, 0, &id),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_create_move_task(svc, "b", 1, "A", self, 1, &id),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_master_service_create_move_task(svc, "b", 1, "B", self, 1, &id),
                     MC_REPLICA_NOT_FOUND);
    assert_int_equal(mc_master_service_query_task(svc, (mc_master_uuid){7, 7}, NULL),
                     MC_TASK_NOT_FOUND);
    /* one unfinished task at most */
    mc_master_uuid ids[3];
    ids[0] = copy_to_b(svc, "b");
    assert_int_equal(mc_master_service_create_copy_task(svc, "b", 1, NULL, t, 1, &id),
                     MC_TASK_PENDING_LIMIT_EXCEEDED);
    /* three finished, two kept: the oldest is forgotten */
    for (int i = 0; i < 3; i++) {
        if (i)
            ids[i] = copy_to_b(svc, "b");
        mc_master_task_work w;
        uint32_t n;
        assert_int_equal(mc_master_service_fetch_tasks(svc, C2, &w, &n), MC_OK);
        assert_int_equal(mc_master_service_mark_task_to_complete(svc, C2, ids[i], 0,
                                                                 MC_TRANSFER_FAIL, NULL),
                         MC_OK);
    }
    assert_int_equal(status_of(svc, ids[0], NULL), MC_TASK_NOT_FOUND);
    assert_int_equal(status_of(svc, ids[1], NULL), MC_MASTER_TASK_FAILED);
    assert_int_equal(status_of(svc, ids[2], NULL), MC_MASTER_TASK_FAILED);
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(copy_then_commit),
        cmocka_unit_test(move_drops_source),
        cmocka_unit_test(failure_frees_space),
        cmocka_unit_test(target_gone_fails),
        cmocka_unit_test(upsert_spoils_copy),
        cmocka_unit_test(bounds_and_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
