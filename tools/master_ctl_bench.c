/* master_ctl_bench.c: `mooncake_master_ctl bench`: metadata RPC throughput against a
 * running master (put_start+put_end pairs or get_replica_list, single-key or batched),
 * as bench/bench_master.py drives it. It owns only the bench threads; flags, the client
 * connection and output come from mooncake_master_ctl.c (master_ctl.h). */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "master_ctl.h"

#define KEY_LEN 40

static mc_master_client *cli;
static mc_master_uuid client_id;
static const mc_ctl_bench_opts *opt;

typedef struct bench_thread {
    pthread_t th;
    unsigned idx;
    uint64_t deadline_ms;
    uint64_t calls, items, failures;
} bench_thread;

/* The per-call arrays of a bench loop: b keys (names in `names`), sizes, replica lists
 * and statuses. */
typedef struct bench_bufs {
    size_t b;
    char *names;
    mc_master_key *keys;
    uint64_t *sizes;
    mc_master_replica_list *outs;
    int *st;
} bench_bufs;

static void bufs_init(bench_bufs *bb, size_t b)
{
    bb->b = b;
    bb->names = mc_xmalloc(b * KEY_LEN);
    bb->keys = mc_xmalloc(b * sizeof *bb->keys);
    bb->sizes = mc_xmalloc(b * sizeof *bb->sizes);
    bb->outs = mc_xmalloc(b * sizeof *bb->outs);
    bb->st = mc_xmalloc(b * sizeof *bb->st);
}

static void bufs_free(bench_bufs *bb)
{
    free(bb->names);
    free(bb->keys);
    free(bb->sizes);
    free(bb->outs);
    free(bb->st);
}

/* keys[i] = "bench/<tid>/<16 hex digits of seq>" of --value_size bytes, without printf
 * (cheap: the bench shares the CPUs with the master it measures). */
static void set_key(bench_bufs *bb, size_t i, unsigned tid, uint64_t seq)
{
    static const char hx[] = "0123456789abcdef";
    char *buf = bb->names + i * KEY_LEN;
    memcpy(buf, "bench/", 6);
    char *p = buf + 6;
    char t[12];
    int n = 0;
    do {
        t[n++] = (char)('0' + tid % 10);
        tid /= 10;
    } while (tid && n < 10);
    while (n)
        *p++ = t[--n];
    *p++ = '/';
    for (int k = 15; k >= 0; k--)
        *p++ = hx[(seq >> (4 * k)) & 15];
    *p = '\0';
    bb->keys[i].data = buf;
    bb->keys[i].len = (size_t)(p - buf);
    bb->sizes[i] = (uint64_t)opt->value_size;
}

static void *bench_put(void *arg)
{
    bench_thread *t = arg;
    bench_bufs bb;
    bufs_init(&bb, (size_t)opt->batch);
    size_t b = bb.b;
    uint64_t seq = 0;
    while (mc_now_ms() < t->deadline_ms) {
        for (size_t i = 0; i < b; i++)
            set_key(&bb, i, t->idx, seq++);
        if (b == 1) {
            int rc = mc_master_client_put_start(cli, client_id, bb.keys[0].data,
                                                bb.keys[0].len, bb.sizes[0], NULL, &bb.outs[0]);
            if (rc == MC_OK)
                rc = mc_master_client_put_end(cli, client_id, bb.keys[0].data, bb.keys[0].len);
            t->failures += rc != MC_OK;
        } else {
            mc_master_client_batch_put_start(cli, client_id, bb.keys, bb.sizes, b, NULL,
                                             bb.outs, bb.st);
            size_t ok = 0; /* end only the keys whose start succeeded */
            for (size_t i = 0; i < b; i++)
                if (bb.st[i] == MC_OK)
                    bb.keys[ok++] = bb.keys[i];
                else
                    t->failures++;
            mc_master_client_batch_put_end(cli, client_id, bb.keys, ok, bb.st);
            for (size_t i = 0; i < ok; i++)
                t->failures += bb.st[i] != MC_OK;
        }
        t->calls++;
        t->items += b;
    }
    bufs_free(&bb);
    return NULL;
}

static void *bench_get(void *arg)
{
    bench_thread *t = arg;
    bench_bufs bb;
    bufs_init(&bb, (size_t)opt->batch);
    size_t b = bb.b;
    uint64_t x = 0x9e3779b97f4a7c15ull * (t->idx + 1);
    while (mc_now_ms() < t->deadline_ms) {
        for (size_t i = 0; i < b; i++) {
            x ^= x << 13; /* xorshift64: a key bench_fill wrote */
            x ^= x >> 7;
            x ^= x << 17;
            set_key(&bb, i, 0, x % (uint64_t)opt->keys);
        }
        if (b == 1) {
            int rc = mc_master_client_get_replica_list(cli, bb.keys[0].data, bb.keys[0].len,
                                                       &bb.outs[0]);
            t->failures += rc != MC_OK;
        } else {
            mc_master_client_batch_get_replica_list(cli, bb.keys, b, bb.outs, bb.st);
            for (size_t i = 0; i < b; i++)
                t->failures += bb.st[i] != MC_OK;
        }
        t->calls++;
        t->items += b;
    }
    bufs_free(&bb);
    return NULL;
}

/* Fills keys bench/0/0 .. bench/0/(keys-1) for the get bench. */
static int bench_fill(void)
{
    bench_bufs bb;
    bufs_init(&bb, 1024);
    uint64_t total = (uint64_t)opt->keys;
    int rc = MC_OK;
    for (uint64_t base = 0; base < total && rc == MC_OK; base += bb.b) {
        size_t n = total - base < bb.b ? (size_t)(total - base) : bb.b;
        for (size_t i = 0; i < n; i++)
            set_key(&bb, i, 0, base + i);
        rc = mc_master_client_batch_put_start(cli, client_id, bb.keys, bb.sizes, n, NULL,
                                              bb.outs, bb.st);
        if (rc == MC_OK || rc == MC_OBJECT_ALREADY_EXISTS)
            rc = mc_master_client_batch_put_end(cli, client_id, bb.keys, n, bb.st);
        if (rc == MC_INVALID_WRITE) /* already complete from an earlier run */
            rc = MC_OK;
    }
    bufs_free(&bb);
    return rc;
}

int mc_ctl_bench(mc_master_client *c, mc_master_uuid id, const mc_ctl_bench_opts *o)
{
    cli = c;
    client_id = id;
    opt = o;
    bool put = strcmp(o->op, "put") == 0;
    if (!put && strcmp(o->op, "get") != 0) {
        fprintf(stderr, "mooncake_master_ctl: --op must be put or get\n");
        return 2;
    }
    /* One large segment (metadata only: the master never touches the memory). */
    mc_master_segment seg = {.id = mc_ctl_random_uuid(),
                             .name = "127.0.0.1:1",
                             .base = 1ull << 40,
                             .size = 1ull << 40};
    int rc = mc_master_client_mount_segment(cli, &seg, client_id);
    if (rc != MC_OK) {
        fprintf(stderr, "mooncake_master_ctl: mount failed: %s\n", mc_strerror(rc));
        return 1;
    }
    if (!put && (rc = bench_fill()) != MC_OK) {
        fprintf(stderr, "mooncake_master_ctl: filling %lld keys failed: %s\n",
                (long long)o->keys, mc_strerror(rc));
        return 1;
    }
    unsigned n = (unsigned)o->threads;
    bench_thread *ts = mc_xcalloc(n, sizeof *ts);
    uint64_t t0 = mc_now_ns();
    uint64_t deadline = mc_now_ms() + (uint64_t)(o->seconds * 1000);
    for (unsigned i = 0; i < n; i++) {
        ts[i].idx = i + 1;
        ts[i].deadline_ms = deadline;
        pthread_create(&ts[i].th, NULL, put ? bench_put : bench_get, &ts[i]);
    }
    uint64_t calls = 0, items = 0, failures = 0;
    for (unsigned i = 0; i < n; i++) {
        pthread_join(ts[i].th, NULL);
        calls += ts[i].calls;
        items += ts[i].items;
        failures += ts[i].failures;
    }
    double secs = (double)(mc_now_ns() - t0) / 1e9;
    free(ts);
    mc_master_client_unmount_segment(cli, seg.id, client_id);
    json_t *r = json_pack("{s:s,s:I,s:I,s:f,s:I,s:I,s:I,s:f,s:f}", "op", o->op, "batch",
                          (json_int_t)o->batch, "threads", (json_int_t)n, "seconds", secs,
                          "calls", (json_int_t)calls, "items", (json_int_t)items, "failures",
                          (json_int_t)failures, "calls_per_s", (double)calls / secs,
                          "items_per_s", (double)items / secs);
    mc_ctl_emit(r);
    return 0;
}
