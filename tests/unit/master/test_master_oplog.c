/* The master's mutation log and snapshots (src/master/oplog_codec.c, oplog.c,
 * snapshot.c; master/persist.h): the frame codec (round trip, every torn cut, every
 * flipped byte), the allocator's exact-range reservation the restore uses, and a real
 * service persisted into a temporary directory, restored from it (snapshot + log) and
 * replayed frame by frame into a third service through mc_master_log_apply (the standby
 * path). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "alloc/allocator.h"
#include "fixture.h"
#include "master/master_service.h"
#include "master/oplog_codec.h"
#include "master/persist.h"


/* ---- codec ---- */

static size_t frame_put(uint8_t *out, uint64_t lsn, const char *key, uint64_t addr)
{
    Mclog__LogReplica r = MCLOG__LOG_REPLICA__INIT;
    r.seg_hi = 7;
    r.seg_lo = 8;
    r.addr = addr;
    Mclog__LogReplica *rp[1] = {&r};
    Mclog__LogObject o = MCLOG__LOG_OBJECT__INIT;
    o.key.data = (uint8_t *)key;
    o.key.len = strlen(key);
    o.size = 4096;
    o.n_replicas = 1;
    o.replicas = rp;
    Mclog__LogRecord rec = MCLOG__LOG_RECORD__INIT;
    rec.op_case = MCLOG__LOG_RECORD__OP_PUT;
    rec.put = &o;
    assert_true(mc__log_frame_size(&rec) < 256);
    return mc__log_frame_write(out, lsn, &rec);
}

static size_t frame_remove(uint8_t *out, uint64_t lsn, const char *key)
{
    Mclog__LogRecord rec = MCLOG__LOG_RECORD__INIT;
    rec.op_case = MCLOG__LOG_RECORD__OP_REMOVE;
    rec.remove.data = (uint8_t *)key;
    rec.remove.len = strlen(key);
    return mc__log_frame_write(out, lsn, &rec);
}

typedef struct seen {
    int n;
    uint64_t lsn[8];
    int kind[8];
    uint64_t addr[8];
} seen;

static int collect(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    seen *s = ctx;
    if (s->n < 8) {
        s->lsn[s->n] = lsn;
        s->kind[s->n] = rec->op_case;
        s->addr[s->n] = rec->op_case == MCLOG__LOG_RECORD__OP_PUT ? rec->put->replicas[0]->addr
                                                                   : 0;
    }
    s->n++;
    return 0;
}

static void test_codec_round_trip(void **st)
{
    (void)st;
    uint8_t buf[1024];
    size_t a = frame_put(buf, 5, "alpha", 4096);
    size_t b = frame_remove(buf + a, 6, "alpha");
    size_t c = frame_put(buf + a + b, 7, "beta", 8192);
    seen s = {0};
    size_t good;
    uint64_t frames;
    assert_int_equal(mc_master_log_parse(buf, a + b + c, collect, &s, &good, &frames),
                     MC_MASTER_LOG_END);
    assert_int_equal(good, a + b + c);
    assert_int_equal(frames, 3);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.lsn[0], 5);
    assert_int_equal(s.lsn[2], 7);
    assert_int_equal(s.kind[1], MCLOG__LOG_RECORD__OP_REMOVE);
    assert_int_equal(s.addr[2], 8192);

    /* every cut inside a frame is torn, and good stops at the last whole frame */
    for (size_t cut = 0; cut <= a + b + c; cut++) {
        seen t = {0};
        mc_master_log_stop why = mc_master_log_parse(buf, cut, collect, &t, &good, NULL);
        size_t whole = cut >= a + b + c ? a + b + c : cut >= a + b ? a + b : cut >= a ? a : 0;
        assert_int_equal(good, whole);
        assert_int_equal(why, cut == whole ? MC_MASTER_LOG_END : MC_MASTER_LOG_TORN);
    }
    /* every flipped byte of the second frame stops the parse at the first */
    for (size_t i = a; i < a + b; i++) {
        uint8_t bad[1024];
        memcpy(bad, buf, a + b + c);
        bad[i] ^= 0x5a;
        seen t = {0};
        mc_master_log_stop why = mc_master_log_parse(bad, a + b + c, collect, &t, &good, NULL);
        assert_int_not_equal(why, MC_MASTER_LOG_END);
        assert_int_equal(good, a);
        assert_int_equal(t.n, 1);
    }
}

/* ---- allocator: exact ranges ---- */

static void test_alloc_reserve(void **st)
{
    (void)st;
    mc__alloc *a = mc__alloc_create(1 << 20, 1 << 20, 64);
    uint32_t cur = MC__ALLOC_NONE;
    /* ascending with a cursor, then one out of order without */
    for (uint64_t i = 0; i < 64; i++)
        assert_int_not_equal(mc__alloc_reserve(a, (1 << 20) + i * 8192, 4000, &cur),
                             MC__ALLOC_NONE);
    assert_int_not_equal(mc__alloc_reserve(a, (1 << 20) + 4096, 100, NULL), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_check(a), 0);
    /* overlaps, unaligned and out-of-range addresses are refused */
    assert_int_equal(mc__alloc_reserve(a, (1 << 20) + 8192, 64, NULL), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_reserve(a, (1 << 20) + 4000, 64, NULL), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_reserve(a, (1 << 20) + 4100, 64, NULL), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_reserve(a, 1 << 19, 64, NULL), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_reserve(a, (2 << 20) - 64, 128, NULL), MC__ALLOC_NONE);
    assert_int_equal(mc__alloc_used_blocks(a), 65);
    assert_int_equal(mc__alloc_used(a), 64 * 4032 + 128);
    /* what is left is allocatable as usual */
    uint64_t addr;
    assert_int_not_equal(mc__alloc_alloc(a, 400000, &addr), MC__ALLOC_NONE);
    assert_true(addr >= (1 << 20) + 63 * 8192 + 4032);
    assert_int_equal(mc__alloc_check(a), 0);
    mc__alloc_destroy(a);
}

/* ---- a service persisted, restored, and replayed ---- */

static char dir[64];

static const mc_master_segment SEG = {.id = {9, 9}, .name = "127.0.0.1:1", .base = 1ull << 32,
                                      .size = 64 << 20};

static void test_persist_restore_apply(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/mc-oplog-test-%d", (int)getpid());
    mc_master_persist_opts o = {.dir = dir, .interval_s = 3600, .retention = 2,
                                .sync = MC_MASTER_LOG_SYNC_WRITE};
    char err[256];
    mc_master_service *a = fx_plain_service(0);
    mc_master_persist *p = NULL;
    assert_int_equal(mc_master_persist_start(a, &o, &p, NULL, err, sizeof err), MC_OK);
    assert_int_equal(mc_master_service_mount_segment(a, &SEG, C1), MC_OK);
    uint64_t addr[20];
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(fx_put(a, C1, key, 10000 + (uint64_t)i, &addr[i]), MC_OK);
        if (i == 9) /* the first half in a snapshot, the rest in the log after it */
            assert_int_equal(mc_master_persist_snapshot_now(p), MC_OK);
    }
    assert_int_equal(mc_master_service_remove(a, "k3", 2, true), MC_OK);
    assert_int_equal(mc_master_service_remove(a, "k15", 3, true), MC_OK);
    /* a write in flight at the stop: its range must not be handed out after the restore */
    mc_master_put_config pc;
    mc_master_put_config_init(&pc);
    mc_master_replica_list fl;
    assert_int_equal(mc_master_service_put_start(a, C1, "inflight", 8, 20000, &pc, &fl), MC_OK);
    uint64_t fl_addr = fl.replicas[0].address;
    mc_master_persist_stop(p);
    mc_master_service_destroy(a);

    /* restore: pending until the owner remounts, then every key at its address */
    mc_master_service *b = fx_plain_service(0);
    mc_master_restore_info ri;
    o.restore = true;
    assert_int_equal(mc_master_persist_start(b, &o, &p, &ri, err, sizeof err), MC_OK);
    assert_int_equal(ri.objects, 18);
    assert_int_equal(ri.segments, 1);
    assert_int_equal(ri.quarantined, 1);
    assert_true(ri.snapshot_lsn > 0);
    int rc;
    fx_addr_of(b, "k0", &rc);
    assert_int_equal(rc, MC_REPLICA_IS_NOT_READY);
    mc_master_ping_result pr;
    assert_int_equal(mc_master_service_ping(b, C1, &pr), MC_OK);
    assert_int_equal(pr.client_status, MC_MASTER_CLIENT_NEED_REMOUNT);
    assert_int_equal(mc_master_service_remount_segments(b, &SEG, 1, C1), MC_OK);
    fx_expect_keys(b, addr, 20, 1ull << 3 | 1ull << 15);
    /* a new put never lands on restored space */
    uint64_t na = fx_put_apart(b, 10000, addr, 20, 1ull << 3 | 1ull << 15);
    assert_true(na + 10000 <= fl_addr || na >= fl_addr + 20000);
    fx_addr_of(b, "inflight", &rc);
    assert_int_equal(rc, MC_OBJECT_NOT_FOUND); /* never completed: not an object */
    mc_master_persist_stop(p);
    mc_master_service_destroy(b);

    /* the standby path: a snapshot's frames, then the log after it, applied one by one
     * (the log the snapshot covers was deleted by retention) */
    mc_master_service *c = fx_plain_service(0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls %s/snapshot-*.snap; ls %s/oplog-*.log", dir, dir);
    int files = fx_apply_listed(cmd, c);
    assert_true(files >= 2);
    assert_int_equal(mc_master_service_remount_segments(c, &SEG, 1, C1), MC_OK);
    assert_int_equal(fx_addr_of(c, "k19", &rc), addr[19]);
    assert_int_equal(fx_addr_of(c, "new", &rc), na);
    fx_addr_of(c, "k3", &rc);
    assert_int_equal(rc, MC_OBJECT_NOT_FOUND);
    mc_master_service_destroy(c);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- concurrent mutations while snapshots are taken: the restore equals the end state */

#define NKEYS 1500
#define NTHREADS 3
#define OPS 20000

static mc_master_service *race_svc;
static mc_master_persist *race_p;
static volatile int race_stop;

static void *race_worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    char key[32];
    for (int i = 0; i < OPS; i++) {
        int k = (int)(rand_r(&seed) % NKEYS), what = (int)(rand_r(&seed) % 10);
        snprintf(key, sizeof key, "r%d", k);
        mc_master_put_config c;
        mc_master_put_config_init(&c);
        c.replica_num = 1 + rand_r(&seed) % 2;
        mc_master_replica_list out;
        uint64_t size = 512 + rand_r(&seed) % 8192;
        if (what < 5) {
            if (mc_master_service_put_start(race_svc, C1, key, strlen(key), size, &c, &out) ==
                MC_OK)
                mc_master_service_put_end(race_svc, C1, key, strlen(key));
        } else if (what < 7) {
            if (mc_master_service_upsert_start(race_svc, C1, key, strlen(key),
                                               what == 5 ? size : 4096, &c, &out) == MC_OK)
                mc_master_service_upsert_end(race_svc, C1, key, strlen(key));
        } else if (what < 9) {
            mc_master_service_remove(race_svc, key, strlen(key), true);
        } else {
            mc_master_key mk = {key, strlen(key)};
            int st;
            mc_master_service_batch_replica_clear(race_svc, C1, &mk, 1, "127.0.0.1:2", 11, &st);
        }
    }
    return NULL;
}

static void *race_snapshots(void *arg)
{
    (void)arg;
    while (!race_stop)
        assert_int_equal(mc_master_persist_snapshot_now(race_p), MC_OK);
    return NULL;
}

typedef struct state {
    int rc;
    uint32_t n;
    uint64_t addr[MC_MASTER_MAX_REPLICAS];
} state;

static void dump(mc_master_service *svc, state *st)
{
    char key[32];
    for (int k = 0; k < NKEYS; k++) {
        snprintf(key, sizeof key, "r%d", k);
        mc_master_replica_list out;
        st[k].rc = mc_master_service_get_replica_list(svc, key, strlen(key), &out);
        st[k].n = st[k].rc == MC_OK ? (uint32_t)out.n : 0;
        for (uint32_t i = 0; i < st[k].n; i++)
            st[k].addr[i] = out.replicas[i].address;
    }
}

static void test_concurrent_snapshot_and_log(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/mc-oplog-race-%d", (int)getpid());
    mc_master_persist_opts o = {.dir = dir, .interval_s = 3600, .retention = 2,
                                .sync = MC_MASTER_LOG_SYNC_NONE};
    char err[256];
    race_svc = fx_plain_service(0);
    assert_int_equal(mc_master_persist_start(race_svc, &o, &race_p, NULL, err, sizeof err),
                     MC_OK);
    mc_master_segment s1 = SEG, s2 = SEG;
    s2.id = (mc_master_uuid){10, 10};
    s2.name = "127.0.0.1:2";
    s2.base = 1ull << 40;
    assert_int_equal(mc_master_service_mount_segment(race_svc, &s1, C1), MC_OK);
    assert_int_equal(mc_master_service_mount_segment(race_svc, &s2, C1), MC_OK);
    pthread_t w[NTHREADS], sn;
    race_stop = 0;
    assert_int_equal(pthread_create(&sn, NULL, race_snapshots, NULL), 0);
    for (uintptr_t i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&w[i], NULL, race_worker, (void *)(i + 1)), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(w[i], NULL);
    race_stop = 1;
    pthread_join(sn, NULL);
    static state before[NKEYS], after[NKEYS];
    dump(race_svc, before);
    mc_master_persist_stop(race_p);
    mc_master_service_destroy(race_svc);

    mc_master_service *b = fx_plain_service(0);
    o.restore = true;
    mc_master_restore_info ri;
    mc_master_persist *p = NULL;
    assert_int_equal(mc_master_persist_start(b, &o, &p, &ri, err, sizeof err), MC_OK);
    assert_int_equal(ri.dropped, 0);
    fprintf(stderr, "race: snapshot lsn %llu, %llu records after it, %llu objects\n",
            (unsigned long long)ri.snapshot_lsn, (unsigned long long)ri.records,
            (unsigned long long)ri.objects);
    mc_master_segment both[2] = {s1, s2};
    assert_int_equal(mc_master_service_remount_segments(b, both, 2, C1), MC_OK);
    dump(b, after);
    int present = 0;
    for (int k = 0; k < NKEYS; k++) {
        assert_int_equal(after[k].rc, before[k].rc);
        assert_int_equal(after[k].n, before[k].n);
        for (uint32_t i = 0; i < before[k].n; i++) /* replica order is kept */
            assert_int_equal(after[k].addr[i], before[k].addr[i]);
        present += before[k].rc == MC_OK;
    }
    assert_true(present > 0 && present < NKEYS);
    mc_master_persist_stop(p);
    mc_master_service_destroy(b);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_alloc_reserve),
        cmocka_unit_test(test_persist_restore_apply),
        cmocka_unit_test(test_concurrent_snapshot_and_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
