/* bench/bench_disk.c: the disk store (src/disk) against the file system's own sequential
 * O_DIRECT throughput, measured in the same run on the same directory.
 *
 *   build/debug/bench/bench_disk [--dir DIR] [--total-mb N] [--obj-kb K] [--qd Q]
 *                                [--io uring|threads] [--reps R] [--peer fio|dd]
 *
 * Write: N MiB of K KiB objects put through mc_disk_put_async with Q requests in flight
 * (offload: what the client does when the master asks it to move objects to disk), vs
 * `fio --rw=write --direct=1 --bs=K --iodepth=Q` (or `dd oflag=direct bs=K`, queue depth
 * 1, when fio is missing) writing the same bytes to a file in DIR. Read: every object
 * read back through mc_disk_get_async (Q in flight, verified), vs fio --rw=read
 * --direct=1 on the peer's file. One round = peer write, our write, our read, peer read,
 * back to back; R rounds (default 5). A shared disk's throughput drifts by tens of per
 * cent within seconds, so each round's ratio compares neighbours, and the medians over
 * the rounds are reported: ours, the peer's, and the median of the per-round ratios
 * (target >= 0.70 both ways), plus the file system type and whether the store used
 * O_DIRECT. Never run by the tests. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "disk/disk.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

typedef struct window {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inflight, failed;
} window;

static void win_cb(void *ctx, int status, uint64_t size)
{
    (void)size;
    window *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->inflight--;
    w->failed += status != MC_OK;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void win_wait_below(window *w, int n)
{
    pthread_mutex_lock(&w->mu);
    while (w->inflight >= n)
        pthread_cond_wait(&w->cv, &w->mu);
    w->inflight++;
    pthread_mutex_unlock(&w->mu);
}

static void win_drain(window *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->inflight > 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static double now_s(void) { return (double)mc_now_ns() / 1e9; }

static const char *fs_name(const char *dir)
{
    struct statfs f;
    if (statfs(dir, &f) != 0)
        return "?";
    switch ((unsigned long)f.f_type) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x01021994: return "tmpfs";
    case 0x794c7630: return "overlay";
    case 0x9123683E: return "btrfs";
    default: return "other";
    }
}

/* runs cmd, returns its stdout (malloc'ed) or NULL */
static char *run(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    for (size_t n; (n = fread(out + len, 1, cap - len - 1, p)) > 0;) {
        len += n;
        if (cap - len < 4096)
            out = realloc(out, cap *= 2);
    }
    out[len] = '\0';
    int rc = pclose(p);
    if (rc != 0) {
        fprintf(stderr, "bench_disk: `%s` failed (%d):\n%s\n", cmd, rc, out);
        free(out);
        return NULL;
    }
    return out;
}

/* fio's JSON: bytes/s of jobs[0].<section> */
static double fio_bw(const char *json, const char *section)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\" : {", section);
    const char *p = strstr(json, pat);
    if (!p)
        return 0;
    p = strstr(p, "\"bw_bytes\" : ");
    return p ? strtod(p + 13, NULL) : 0;
}

static bool have_fio(void) { return system("fio --version >/dev/null 2>&1") == 0; }

/* bytes/s of the peer writing (write=true) or reading `file` */
static double peer(bool use_fio, bool write, const char *file, uint64_t total, uint64_t obj,
                   int qd)
{
    char cmd[1024];
    if (use_fio) {
        snprintf(cmd, sizeof cmd,
                 "fio --name=peer --filename=%s --rw=%s --direct=1 --bs=%llu --size=%llu "
                 "--ioengine=libaio --iodepth=%d --numjobs=1 --output-format=json 2>&1",
                 file, write ? "write" : "read", (unsigned long long)obj,
                 (unsigned long long)total, qd);
        char *out = run(cmd);
        if (!out)
            return 0;
        double bw = fio_bw(out, write ? "write" : "read");
        free(out);
        return bw;
    }
    snprintf(cmd, sizeof cmd, "dd %s=%s %s=%s bs=%llu count=%llu %s 2>&1",
             write ? "if" : "of", write ? "/dev/zero" : "/dev/null", write ? "of" : "if", file,
             (unsigned long long)obj, (unsigned long long)(total / obj),
             write ? "oflag=direct" : "iflag=direct");
    double t0 = now_s();
    char *out = run(cmd);
    double t = now_s() - t0;
    free(out);
    return out ? (double)total / t : 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double *t = malloc((size_t)n * sizeof *t);
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    double m = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    free(t);
    return m;
}

typedef struct run_opts {
    const char *dir;
    uint64_t total, obj;
    int qd;
    mc_disk_io_kind io;
} run_opts;

/* our write and read throughput (bytes/s), on a fresh store in dir/store */
static int ours(const run_opts *o, double *wbw, double *rbw, mc_disk_metrics *mout)
{
    char sdir[1024];
    snprintf(sdir, sizeof sdir, "%s/store", o->dir);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sdir);
    if (system(cmd) != 0)
        return -1;
    mc_disk_config c;
    mc_disk_config_default(&c);
    c.dir = sdir;
    c.io = o->io;
    c.queue_depth = (unsigned)o->qd;
    c.io_threads = (unsigned)(o->qd < 8 ? o->qd : 8);
    mc_disk_store *s;
    int rc = mc_disk_open(&c, &s);
    if (rc != MC_OK) {
        fprintf(stderr, "bench_disk: mc_disk_open %s: %s\n", sdir, mc_strerror(rc));
        return -1;
    }
    uint64_t n = o->total / o->obj;
    /* Q source buffers, like the memory replicas being offloaded */
    unsigned char **src = calloc((size_t)o->qd, sizeof *src);
    for (int i = 0; i < o->qd; i++) {
        src[i] = malloc(o->obj);
        for (uint64_t j = 0; j < o->obj; j++)
            src[i][j] = (unsigned char)(j * 31 + (uint64_t)i);
    }
    window w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        char key[64];
        int kl = snprintf(key, sizeof key, "bench-object-%08llu", (unsigned long long)i);
        win_wait_below(&w, o->qd);
        struct iovec v = {src[i % (uint64_t)o->qd], o->obj};
        if (mc_disk_put_async(s, key, (size_t)kl, &v, 1, win_cb, &w) != MC_OK) {
            win_cb(&w, MC_INTERNAL_ERROR, 0);
        }
    }
    win_drain(&w);
    *wbw = (double)(n * o->obj) / (now_s() - t0);
    int wfail = w.failed;
    w.failed = 0;
    unsigned char **dst = calloc((size_t)o->qd, sizeof *dst);
    for (int i = 0; i < o->qd; i++)
        dst[i] = malloc(o->obj);
    t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        char key[64];
        int kl = snprintf(key, sizeof key, "bench-object-%08llu", (unsigned long long)i);
        win_wait_below(&w, o->qd);
        unsigned char *d = dst[i % (uint64_t)o->qd];
        if (mc_disk_get_async(s, key, (size_t)kl, d, o->obj, win_cb, &w) != MC_OK)
            win_cb(&w, MC_INTERNAL_ERROR, 0);
    }
    win_drain(&w);
    *rbw = (double)(n * o->obj) / (now_s() - t0);
    mc_disk_get_metrics(s, mout);
    mc_disk_close(s);
    for (int i = 0; i < o->qd; i++) {
        free(src[i]);
        free(dst[i]);
    }
    free(src);
    free(dst);
    if (wfail || w.failed) {
        fprintf(stderr, "bench_disk: %d puts and %d gets failed\n", wfail, w.failed);
        return -1;
    }
    if (system(cmd) != 0)
        fprintf(stderr, "bench_disk: could not remove %s\n", sdir);
    return 0;
}

int main(int argc, char **argv)
{
    run_opts o = {.dir = "/tmp/mc_bench_disk", .total = 512ull << 20, .obj = 1u << 20,
                  .qd = 16, .io = MC_DISK_IO_AUTO};
    int reps = 5;
    const char *peer_kind = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dir") && v)
            o.dir = v, i++;
        else if (!strcmp(a, "--total-mb") && v)
            o.total = strtoull(v, NULL, 10) << 20, i++;
        else if (!strcmp(a, "--obj-kb") && v)
            o.obj = strtoull(v, NULL, 10) << 10, i++;
        else if (!strcmp(a, "--qd") && v)
            o.qd = atoi(v), i++;
        else if (!strcmp(a, "--reps") && v)
            reps = atoi(v), i++;
        else if (!strcmp(a, "--io") && v)
            o.io = !strcmp(v, "threads") ? MC_DISK_IO_THREADS : MC_DISK_IO_URING, i++;
        else if (!strcmp(a, "--peer") && v)
            peer_kind = v, i++;
        else {
            fprintf(stderr, "usage: %s [--dir DIR] [--total-mb N] [--obj-kb K] [--qd Q] "
                            "[--io uring|threads] [--reps R] [--peer fio|dd]\n", argv[0]);
            return 2;
        }
    }
    if (o.qd < 1 || o.obj == 0 || o.total < o.obj || reps < 1) {
        fprintf(stderr, "bench_disk: bad arguments\n");
        return 2;
    }
    mkdir(o.dir, 0755);
    bool use_fio = peer_kind ? !strcmp(peer_kind, "fio") : have_fio();
    if (use_fio && !have_fio()) {
        fprintf(stderr, "bench_disk: fio not found (apt-get install fio), use --peer dd\n");
        return 2;
    }
    char pfile[1024];
    snprintf(pfile, sizeof pfile, "%s/peer.dat", o.dir);
    double *pw = calloc((size_t)reps, sizeof *pw), *pr = calloc((size_t)reps, sizeof *pr);
    double *ow = calloc((size_t)reps, sizeof *ow), *orr = calloc((size_t)reps, sizeof *orr);
    double *rw = calloc((size_t)reps, sizeof *rw), *rr = calloc((size_t)reps, sizeof *rr);
    mc_disk_metrics m = {0};
    for (int r = 0; r < reps; r++) {
        unlink(pfile);
        pw[r] = peer(use_fio, true, pfile, o.total, o.obj, o.qd);
        if (ours(&o, &ow[r], &orr[r], &m) != 0)
            return 1;
        pr[r] = peer(use_fio, false, pfile, o.total, o.obj, o.qd);
        if (pw[r] <= 0 || pr[r] <= 0)
            return 1;
        rw[r] = ow[r] / pw[r];
        rr[r] = orr[r] / pr[r];
        printf("round %d: write ours %5.0f MB/s peer %5.0f MB/s (%.2f) | read ours %5.0f MB/s "
               "peer %5.0f MB/s (%.2f)\n",
               r + 1, ow[r] / 1e6, pw[r] / 1e6, rw[r], orr[r] / 1e6, pr[r] / 1e6, rr[r]);
        fflush(stdout);
    }
    unlink(pfile);
    const char *peer_name = use_fio ? "fio libaio O_DIRECT" : "dd O_DIRECT (qd 1)";
    printf("\nbench_disk: %s (%s), %llu MiB of %llu KiB objects per round, %d in flight, "
           "engine %s, O_DIRECT %s, median of %d rounds\n",
           o.dir, fs_name(o.dir), (unsigned long long)(o.total >> 20),
           (unsigned long long)(o.obj >> 10), o.qd, m.io_backend ? m.io_backend : "?",
           m.direct_io ? "yes" : "no", reps);
    printf("%-34s %12s %12s %8s\n", "", "ours MB/s", "peer MB/s", "ratio");
    printf("%-34s %12.0f %12.0f %8.2f   (peer: %s seq write, bs = object)\n",
           "offload write (put, 1 object)", median(ow, reps) / 1e6, median(pw, reps) / 1e6,
           median(rw, reps), peer_name);
    printf("%-34s %12.0f %12.0f %8.2f   (peer: %s seq read, bs = object)\n",
           "disk read (get, verified)", median(orr, reps) / 1e6, median(pr, reps) / 1e6,
           median(rr, reps), peer_name);
    printf("store: %llu objects, read latency mean %.0f us (queueing included), %llu reads\n",
           (unsigned long long)m.objects,
           m.read_lat_count ? (double)m.read_lat_sum_us / (double)m.read_lat_count : 0.0,
           (unsigned long long)m.read_lat_count);
    return 0;
}
