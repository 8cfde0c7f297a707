/* tests/unit/disk/test_disk.c: the disk store (src/disk) on real files in temporary
 * directories under /tmp (removed afterwards). Every behaviour test runs twice, once
 * per I/O engine (io_uring, thread pool), chosen by the config field; one test checks
 * the MOONCAKE_OFFLOAD_USE_URING switch. Covered: round trips of many sizes, restart,
 * a flipped byte (value and header), a torn tail, compaction, the capacity limit (with
 * and without LRU eviction), a real ENOSPC on a small tmpfs (root only; skipped with the
 * reason otherwise), replace/delete across restarts, the directory lock, many async
 * requests in flight, metrics. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "disk/disk.h"
#include "disk/internal.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

static mc_disk_io_kind g_io;
static char g_dir[256];

/* ------------------------------------------------------------------ helpers */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static void fill(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = mix(seed * 0x9E3779B97F4A7C15ULL + i);
        memcpy(b + i, &v, 8);
    }
    for (; i < n; i++)
        b[i] = (unsigned char)mix(seed + i);
}

static unsigned char *make_value(size_t n, uint64_t seed)
{
    unsigned char *p = malloc(n ? n : 1);
    assert_non_null(p);
    fill(p, n, seed);
    return p;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static int setup(void **state)
{
    g_io = *(mc_disk_io_kind *)*state;
    snprintf(g_dir, sizeof g_dir, "/tmp/mc_disk_test.XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rm_rf(g_dir);
    unsetenv("MOONCAKE_OFFLOAD_USE_URING");
    return 0;
}

static void config(mc_disk_config *c, const char *dir)
{
    mc_disk_config_default(c);
    c->dir = dir;
    c->io = g_io;
}

static mc_disk_store *open_cfg(const mc_disk_config *c)
{
    mc_disk_store *s = NULL;
    assert_int_equal(mc_disk_open(c, &s), MC_OK);
    assert_non_null(s);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    if (g_io == MC_DISK_IO_THREADS)
        assert_string_equal(m.io_backend, "threads");
    else if (mc__disk_io_uring_built())
        assert_string_equal(m.io_backend, "io_uring"); /* this machine allows io_uring */
    return s;
}

static mc_disk_store *open_dir(const char *dir)
{
    mc_disk_config c;
    config(&c, dir);
    return open_cfg(&c);
}

static void key_of(char *k, size_t n, int i) { snprintf(k, n, "key-%05d", i); }

static void put_obj(mc_disk_store *s, int i, size_t n)
{
    char k[32];
    key_of(k, sizeof k, i);
    unsigned char *v = make_value(n, (uint64_t)i + 1000);
    assert_int_equal(mc_disk_put(s, k, strlen(k), v, n), MC_OK);
    free(v);
}

/* the object reads back byte for byte */
static void check_obj(mc_disk_store *s, int i, size_t n)
{
    char k[32];
    key_of(k, sizeof k, i);
    unsigned char *want = make_value(n, (uint64_t)i + 1000);
    unsigned char *got = malloc(n + 16);
    uint64_t size = 12345;
    assert_int_equal(mc_disk_get(s, k, strlen(k), got, n + 16, &size), MC_OK);
    assert_int_equal(size, n);
    assert_memory_equal(got, want, n);
    free(want);
    free(got);
}

static int get_status(mc_disk_store *s, int i, size_t cap)
{
    char k[32];
    key_of(k, sizeof k, i);
    unsigned char *got = malloc(cap ? cap : 1);
    int rc = mc_disk_get(s, k, strlen(k), got, cap, NULL);
    free(got);
    return rc;
}

/* the one bucket file of dir (tests that make exactly one) */
static void bucket_path(const char *dir, uint64_t id, char *out, size_t n)
{
    snprintf(out, n, "%s/bucket-%016llx.mcd", dir, (unsigned long long)id);
}

static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

static uint64_t foot_of(int i, size_t n)
{
    char k[32];
    key_of(k, sizeof k, i);
    return mc__rec_foot(strlen(k), n);
}

/* ------------------------------------------------------------------ tests */
static void test_roundtrip_sizes(void **state)
{
    (void)state;
    mc_disk_store *s = open_dir(g_dir);
    const size_t sizes[] = {0, 1, 4096 - 48 - 9, 4096 - 48 - 8, 4096, 65537, (1u << 20) + 3,
                            16u << 20};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    for (int i = 0; i < n; i++)
        put_obj(s, i, sizes[i]);
    for (int i = 0; i < n; i++)
        check_obj(s, i, sizes[i]);
    /* a destination one byte short is refused before any I/O */
    assert_int_equal(get_status(s, 6, sizes[6] - 1), MC_BUFFER_OVERFLOW);
    assert_int_equal(get_status(s, 999, 16), MC_OBJECT_NOT_FOUND);
    uint64_t sz = 0;
    char k[32];
    key_of(k, sizeof k, 7);
    assert_int_equal(mc_disk_lookup(s, k, strlen(k), &sz), MC_OK);
    assert_int_equal(sz, 16u << 20);
    /* a put from several vectors is one object */
    unsigned char *a = make_value(5000, 1), *b = make_value(7, 2);
    unsigned char *c = malloc(5007), *got = malloc(5007);
    memcpy(c, a, 5000);
    memcpy(c + 5000, b, 7);
    struct iovec iov[2] = {{a, 5000}, {b, 7}};
    assert_int_equal(mc_disk_putv(s, "vec", 3, iov, 2), MC_OK);
    uint64_t size;
    assert_int_equal(mc_disk_get(s, "vec", 3, got, 5007, &size), MC_OK);
    assert_int_equal(size, 5007);
    assert_memory_equal(got, c, 5007);
    free(a), free(b), free(c), free(got);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, n + 1);
    assert_int_equal(m.write_ops, n + 1);
    assert_int_equal(m.read_ops, n + 1);
    assert_int_equal(m.read_lat_count, n + 1);
    assert_int_equal(m.checksum_failures, 0);
    assert_true(m.used_bytes >= m.live_bytes && m.live_bytes > (17u << 20));
    mc_disk_close(s);
}

static void test_bad_args(void **state)
{
    (void)state;
    mc_disk_config c;
    config(&c, g_dir);
    c.low_watermark = 0.95; /* above high */
    mc_disk_store *s = NULL;
    assert_int_equal(mc_disk_open(&c, &s), MC_INVALID_PARAMS);
    assert_null(s);
    config(&c, g_dir);
    c.max_object_bytes = 1000;
    s = open_cfg(&c);
    char big[1001] = {0};
    assert_int_equal(mc_disk_put(s, "k", 1, big, 1001), MC_INVALID_PARAMS);
    assert_int_equal(mc_disk_put(s, "", 0, big, 1), MC_INVALID_PARAMS);
    char longkey[MC_DISK_MAX_KEY_LEN + 1];
    memset(longkey, 'x', sizeof longkey);
    assert_int_equal(mc_disk_put(s, longkey, sizeof longkey, big, 1), MC_INVALID_PARAMS);
    assert_int_equal(mc_disk_put(s, longkey, MC_DISK_MAX_KEY_LEN, big, 1000), MC_OK);
    char got[1000];
    uint64_t n;
    assert_int_equal(mc_disk_get(s, longkey, MC_DISK_MAX_KEY_LEN, got, sizeof got, &n), MC_OK);
    assert_int_equal(n, 1000);
    assert_int_equal(mc_disk_delete(s, "nope", 4), MC_OBJECT_NOT_FOUND);
    /* a second store on the same directory is refused */
    mc_disk_store *s2 = NULL;
    assert_int_equal(mc_disk_open(&c, &s2), MC_FILE_LOCK_FAIL);
    mc_disk_close(s);
}

static void test_restart_keeps_objects(void **state)
{
    (void)state;
    mc_disk_config c;
    config(&c, g_dir);
    c.bucket_size_bytes = 1u << 20; /* several buckets */
    mc_disk_store *s = open_cfg(&c);
    const int n = 60;
    for (int i = 0; i < n; i++)
        put_obj(s, i, (size_t)(i * 7919) % 200000);
    mc_disk_metrics m0;
    mc_disk_get_metrics(s, &m0);
    assert_true(m0.buckets > 3);
    mc_disk_close(s);
    for (int round = 0; round < 2; round++) {
        s = open_cfg(&c);
        mc_disk_metrics m;
        mc_disk_get_metrics(s, &m);
        assert_int_equal(m.objects, n + round);
        assert_int_equal(m.live_bytes, m0.live_bytes + (uint64_t)round * foot_of(n, 777));
        assert_int_equal(m.torn_truncations, 0);
        assert_int_equal(m.corrupt_skipped, 0);
        for (int i = 0; i < n; i++)
            check_obj(s, i, (size_t)(i * 7919) % 200000);
        if (round == 0)
            put_obj(s, n, 777); /* appends after a restart survive the next one */
        mc_disk_close(s);
    }
    s = open_cfg(&c);
    check_obj(s, n, 777);
    mc_disk_close(s);
}

static void test_replace_and_delete(void **state)
{
    (void)state;
    mc_disk_store *s = open_dir(g_dir);
    put_obj(s, 1, 3000);
    put_obj(s, 2, 5000);
    /* a second put of key 1 replaces it (newest wins) */
    char k[32];
    key_of(k, sizeof k, 1);
    unsigned char *v2 = make_value(9000, 4242);
    assert_int_equal(mc_disk_put(s, k, strlen(k), v2, 9000), MC_OK);
    unsigned char got[9000];
    uint64_t n;
    assert_int_equal(mc_disk_get(s, k, strlen(k), got, sizeof got, &n), MC_OK);
    assert_int_equal(n, 9000);
    assert_memory_equal(got, v2, 9000);
    assert_int_equal(mc_disk_delete(s, "key-00002", 9), MC_OK);
    assert_int_equal(get_status(s, 2, 5000), MC_OBJECT_NOT_FOUND);
    mc_disk_close(s);
    s = open_dir(g_dir);
    assert_int_equal(mc_disk_get(s, k, strlen(k), got, sizeof got, &n), MC_OK);
    assert_int_equal(n, 9000);
    assert_memory_equal(got, v2, 9000);
    assert_int_equal(get_status(s, 2, 5000), MC_OBJECT_NOT_FOUND);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, 1);
    mc_disk_close(s);
    free(v2);
}

static void flip_byte(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

static void test_flipped_byte(void **state)
{
    (void)state;
    mc_disk_store *s = open_dir(g_dir);
    const size_t sz = 20000;
    for (int i = 0; i < 10; i++)
        put_obj(s, i, sz); /* one at a time: records lie in put order in bucket 1 */
    char path[512];
    bucket_path(g_dir, 1, path, sizeof path);
    uint64_t foot = foot_of(0, sz);
    /* a byte of object 3's value, while the store is open */
    flip_byte(path, 3 * foot + MC__REC_HDR + 9 + 12345);
    assert_int_equal(get_status(s, 3, sz), MC_CHECKSUM_MISMATCH);
    assert_int_equal(get_status(s, 3, sz), MC_OBJECT_NOT_FOUND); /* dropped */
    for (int i = 0; i < 10; i++)
        if (i != 3)
            check_obj(s, i, sz);
    /* a byte of object 6's header */
    flip_byte(path, 6 * foot + 17);
    assert_int_equal(get_status(s, 6, sz), MC_CHECKSUM_MISMATCH);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.checksum_failures, 2);
    assert_int_equal(m.objects, 8);
    mc_disk_close(s);
    /* after a restart: 3 stays dead, and the flipped header is skipped, not trusted */
    s = open_dir(g_dir);
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, 8);
    assert_int_equal(get_status(s, 3, sz), MC_OBJECT_NOT_FOUND);
    assert_int_equal(get_status(s, 6, sz), MC_OBJECT_NOT_FOUND);
    for (int i = 0; i < 10; i++)
        if (i != 3 && i != 6)
            check_obj(s, i, sz);
    mc_disk_close(s);
    /* damage found only on open: a header flipped while closed is skipped and counted;
     * a value flipped while closed fails on read (the open verifies the newest buckets,
     * so here it is already caught on open) */
    flip_byte(path, 8 * foot + 20);
    flip_byte(path, 1 * foot + MC__REC_HDR + 9 + 7);
    s = open_dir(g_dir);
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, 6);
    assert_true(m.corrupt_skipped >= 1);
    assert_int_equal(get_status(s, 8, sz), MC_OBJECT_NOT_FOUND);
    assert_int_equal(get_status(s, 1, sz), MC_OBJECT_NOT_FOUND);
    for (int i = 0; i < 10; i++)
        if (i != 1 && i != 3 && i != 6 && i != 8)
            check_obj(s, i, sz);
    mc_disk_close(s);
}

static void test_torn_tail(void **state)
{
    (void)state;
    mc_disk_store *s = open_dir(g_dir);
    const size_t sz = 50000;
    for (int i = 0; i < 5; i++)
        put_obj(s, i, sz);
    mc_disk_close(s);
    char path[512];
    bucket_path(g_dir, 1, path, sizeof path);
    uint64_t foot = foot_of(0, sz);
    /* cut the last record in the middle of its value */
    assert_int_equal(truncate(path, (off_t)(4 * foot + 30000)), 0);
    s = open_dir(g_dir);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, 4);
    assert_int_equal(m.torn_truncations, 1);
    for (int i = 0; i < 4; i++)
        check_obj(s, i, sz);
    assert_int_equal(get_status(s, 4, sz), MC_OBJECT_NOT_FOUND);
    mc_disk_close(s); /* (an open store preallocates the bucket; close gives it back) */
    assert_int_equal((uint64_t)file_size(path), 4 * foot);
    s = open_dir(g_dir);
    put_obj(s, 4, sz); /* appends continue where the tail was cut */
    check_obj(s, 4, sz);
    mc_disk_close(s);
    assert_int_equal((uint64_t)file_size(path), 5 * foot);
    /* cut inside the header of the last record */
    assert_int_equal(truncate(path, (off_t)(4 * foot + 20)), 0);
    s = open_dir(g_dir);
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, 4);
    assert_int_equal(m.torn_truncations, 1);
    mc_disk_close(s);
    assert_int_equal((uint64_t)file_size(path), 4 * foot);
    /* a never-written (zero) tail: a crash while the bucket was preallocated, or after
     * the file grew and before the data landed: cut, not counted as torn */
    assert_int_equal(truncate(path, (off_t)(4 * foot + (3u << 20))), 0);
    s = open_dir(g_dir);
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, 4);
    assert_int_equal(m.torn_truncations, 0);
    for (int i = 0; i < 4; i++)
        check_obj(s, i, sz);
    mc_disk_close(s);
    assert_int_equal((uint64_t)file_size(path), 4 * foot);
    /* a hole before a record that landed (writes complete out of order): the record
     * after the hole is kept */
    s = open_dir(g_dir);
    put_obj(s, 5, sz);
    mc_disk_close(s);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char *rec = malloc(foot);
    assert_int_equal(pread(fd, rec, foot, (off_t)(4 * foot)), (ssize_t)foot);
    int mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    assert_int_equal(fallocate(fd, mode, (off_t)(4 * foot), (off_t)foot), 0);
    assert_int_equal(pwrite(fd, rec, foot, (off_t)(5 * foot)), (ssize_t)foot);
    close(fd);
    free(rec);
    s = open_dir(g_dir);
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, 5);
    assert_int_equal(m.torn_truncations, 0);
    check_obj(s, 5, sz);
    mc_disk_close(s);
}

static void test_compaction(void **state)
{
    (void)state;
    mc_disk_config c;
    config(&c, g_dir);
    c.bucket_size_bytes = 512u << 10;
    mc_disk_store *s = open_cfg(&c);
    const int n = 64;
    const size_t sz = 60000; /* 8 records per bucket */
    for (int i = 0; i < n; i++)
        put_obj(s, i, sz);
    mc_disk_metrics m0, m;
    mc_disk_get_metrics(s, &m0);
    assert_true(m0.buckets >= 8);
    /* keep every 4th object: every bucket falls to 25% live */
    for (int i = 0; i < n; i++) {
        if (i % 4 == 0)
            continue;
        char k[32];
        key_of(k, sizeof k, i);
        assert_int_equal(mc_disk_delete(s, k, strlen(k)), MC_OK);
    }
    int done = mc_disk_maintain(s);
    assert_true(done >= 1);
    mc_disk_get_metrics(s, &m);
    assert_true(m.compactions >= 1);
    assert_true(m.compacted_bytes > 0);
    assert_true(m.used_bytes < m0.used_bytes / 2);
    assert_int_equal(m.objects, n / 4);
    assert_int_equal(m.live_bytes, (uint64_t)(n / 4) * foot_of(0, sz));
    for (int i = 0; i < n; i += 4)
        check_obj(s, i, sz);
    mc_disk_close(s);
    /* the bucket files on disk shrank too, and a restart sees the same objects */
    s = open_cfg(&c);
    mc_disk_metrics m2;
    mc_disk_get_metrics(s, &m2);
    assert_int_equal(m2.objects, n / 4);
    assert_int_equal(m2.used_bytes, m.used_bytes);
    for (int i = 0; i < n; i++) {
        if (i % 4 == 0)
            check_obj(s, i, sz);
        else
            assert_int_equal(get_status(s, i, sz), MC_OBJECT_NOT_FOUND);
    }
    mc_disk_close(s);
}

static void test_capacity_refusal(void **state)
{
    (void)state;
    mc_disk_config c;
    config(&c, g_dir);
    c.capacity_bytes = 1u << 20;
    c.enable_eviction = false;
    mc_disk_store *s = open_cfg(&c);
    const size_t sz = 100000;
    int stored = 0, rc = MC_OK;
    for (int i = 0; i < 20; i++) {
        char k[32];
        key_of(k, sizeof k, i);
        unsigned char *v = make_value(sz, (uint64_t)i + 1000);
        rc = mc_disk_put(s, k, strlen(k), v, sz);
        free(v);
        if (rc != MC_OK)
            break;
        stored++;
    }
    assert_int_equal(rc, MC_NO_AVAILABLE_HANDLE);
    assert_int_equal((uint64_t)stored, (1u << 20) / foot_of(0, sz));
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_true(m.used_bytes <= c.capacity_bytes);
    assert_int_equal(m.full_refusals, 1);
    assert_int_equal(m.objects, stored);
    for (int i = 0; i < stored; i++)
        check_obj(s, i, sz);
    assert_int_equal(get_status(s, stored, sz), MC_OBJECT_NOT_FOUND);
    /* deleting makes room once the space is reclaimed */
    for (int i = 0; i < stored; i++) {
        char k[32];
        key_of(k, sizeof k, i);
        assert_int_equal(mc_disk_delete(s, k, strlen(k)), MC_OK);
    }
    put_obj(s, 100, sz);
    check_obj(s, 100, sz);
    mc_disk_close(s);

    /* the key limit */
    rm_rf(g_dir);
    config(&c, g_dir);
    c.max_keys = 3;
    c.enable_eviction = false;
    s = open_cfg(&c);
    for (int i = 0; i < 3; i++)
        put_obj(s, i, 10);
    unsigned char v[10] = {0};
    assert_int_equal(mc_disk_put(s, "more", 4, v, 10), MC_KEYS_ULTRA_LIMIT);
    mc_disk_close(s);
}

static void test_eviction_lru(void **state)
{
    (void)state;
    mc_disk_config c;
    config(&c, g_dir);
    c.capacity_bytes = 2u << 20;
    c.high_watermark = 1.0; /* no background eviction: only the put that needs room */
    c.low_watermark = 0.5;
    mc_disk_store *s = open_cfg(&c);
    const size_t sz = 128u << 10;
    const uint64_t foot = foot_of(0, sz);
    const int fit = (int)((2u << 20) / foot); /* 15 */
    for (int i = 0; i < fit; i++)
        put_obj(s, i, sz);
    check_obj(s, 0, sz); /* 0 becomes the most recently used */
    put_obj(s, fit, sz); /* needs room: evicts from the LRU end down to the low watermark */
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_true(m.evictions >= 1);
    assert_true(m.used_bytes <= c.capacity_bytes);
    assert_true(m.live_bytes + foot <= (uint64_t)(0.5 * (2u << 20)) + foot);
    check_obj(s, 0, sz);
    check_obj(s, fit, sz);
    assert_int_equal(get_status(s, 1, sz), MC_OBJECT_NOT_FOUND);
    /* the survivors are the most recently used */
    int survivors = 0;
    for (int i = 1; i < fit; i++)
        survivors += get_status(s, i, sz) == MC_OK;
    assert_int_equal((uint64_t)survivors + 2, m.objects);
    for (int i = fit - survivors; i < fit; i++)
        check_obj(s, i, sz);
    /* many more puts never fail and never exceed the capacity */
    for (int i = fit + 1; i < 4 * fit; i++)
        put_obj(s, i, sz);
    mc_disk_get_metrics(s, &m);
    assert_true(m.used_bytes <= c.capacity_bytes);
    assert_int_equal(m.full_refusals, 0);
    check_obj(s, 4 * fit - 1, sz);
    mc_disk_close(s);
}

/* a real ENOSPC: a 1 MiB tmpfs (needs root and mount permission) */
static void test_enospc_tmpfs(void **state)
{
    (void)state;
    char mnt[300];
    snprintf(mnt, sizeof mnt, "%s/tmpfs", g_dir);
    assert_int_equal(mkdir(mnt, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        printf("SKIP test_enospc_tmpfs: mount -t tmpfs -o size=1m: %s (needs root and "
               "CAP_SYS_ADMIN)\n", strerror(errno));
        skip();
    }
    char dir[320];
    snprintf(dir, sizeof dir, "%s/store", mnt);
    mc_disk_store *s = open_dir(dir);
    const size_t sz = 150000;
    int stored = 0, rc = MC_OK;
    for (int i = 0; i < 20; i++) {
        char k[32];
        key_of(k, sizeof k, i);
        unsigned char *v = make_value(sz, (uint64_t)i + 1000);
        rc = mc_disk_put(s, k, strlen(k), v, sz);
        free(v);
        if (rc != MC_OK)
            break;
        stored++;
    }
    assert_int_equal(rc, MC_NO_AVAILABLE_HANDLE);
    assert_true(stored >= 3);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.full_refusals, 1);
    assert_int_equal(m.objects, stored);
    for (int i = 0; i < stored; i++)
        check_obj(s, i, sz);
    /* a smaller object still fits in what the failed one gave back */
    mc_disk_close(s);
    s = open_dir(dir);
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, stored);
    assert_int_equal(m.torn_truncations, 0);
    for (int i = 0; i < stored; i++)
        check_obj(s, i, sz);
    mc_disk_close(s);
    assert_int_equal(umount(mnt), 0);
}

typedef struct async_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, failed;
} async_ctx;

static void async_cb(void *ctx, int status, uint64_t size)
{
    (void)size;
    async_ctx *a = ctx;
    pthread_mutex_lock(&a->mu);
    a->done++;
    a->failed += status != MC_OK;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void wait_done(async_ctx *a, int n)
{
    uint64_t deadline = mc_deadline_ms(60000);
    pthread_mutex_lock(&a->mu);
    while (a->done < n && mc_ms_left(deadline) > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    }
    int d = a->done;
    pthread_mutex_unlock(&a->mu);
    assert_int_equal(d, n);
}

static void test_async_many(void **state)
{
    (void)state;
    mc_disk_store *s = open_dir(g_dir);
    enum { N = 128 };
    const size_t sz = 70000;
    unsigned char *vals[N], *outs[N];
    char keys[N][32];
    async_ctx a = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    for (int i = 0; i < N; i++) {
        key_of(keys[i], sizeof keys[i], i);
        vals[i] = make_value(sz + (size_t)i, (uint64_t)i);
        struct iovec v = {vals[i], sz + (size_t)i};
        assert_int_equal(mc_disk_put_async(s, keys[i], strlen(keys[i]), &v, 1, async_cb, &a),
                         MC_OK);
    }
    wait_done(&a, N);
    assert_int_equal(a.failed, 0);
    a.done = 0;
    for (int i = 0; i < N; i++) {
        outs[i] = malloc(sz + (size_t)i);
        assert_int_equal(mc_disk_get_async(s, keys[i], strlen(keys[i]), outs[i], sz + (size_t)i,
                                           async_cb, &a),
                         MC_OK);
    }
    wait_done(&a, N);
    assert_int_equal(a.failed, 0);
    for (int i = 0; i < N; i++) {
        assert_memory_equal(outs[i], vals[i], sz + (size_t)i);
        free(outs[i]);
        free(vals[i]);
    }
    /* close waits for requests in flight: their callbacks run before it returns */
    a.done = 0;
    unsigned char *v = make_value(sz, 9);
    for (int i = 0; i < 16; i++) {
        struct iovec iv = {v, sz};
        char k[32];
        snprintf(k, sizeof k, "late-%d", i);
        assert_int_equal(mc_disk_put_async(s, k, strlen(k), &iv, 1, async_cb, &a), MC_OK);
    }
    mc_disk_close(s);
    assert_int_equal(a.done, 16);
    free(v);
    s = open_dir(g_dir);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_int_equal(m.objects, N + 16);
    mc_disk_close(s);
}

static void test_metrics_text(void **state)
{
    (void)state;
    mc_disk_store *s = open_dir(g_dir);
    put_obj(s, 1, 1000);
    check_obj(s, 1, 1000);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    size_t need = mc_disk_metrics_prometheus(&m, NULL, 0);
    char *buf = malloc(need + 1);
    assert_int_equal(mc_disk_metrics_prometheus(&m, buf, need + 1), need);
    assert_non_null(strstr(buf, "mooncake_ssd_write_ops_total 1\n"));
    assert_non_null(strstr(buf, "mooncake_ssd_read_bytes_total 1000\n"));
    assert_non_null(strstr(buf, "mooncake_ssd_read_latency_us_count 1\n"));
    assert_non_null(strstr(buf, "mooncake_ssd_objects 1\n"));
    free(buf);
    mc_disk_close(s);
}

/* the runtime switch: upstream's MOONCAKE_OFFLOAD_USE_URING picks the engine; O_DIRECT
 * off works wherever the file system is */
static void test_env_switch(void **state)
{
    (void)state;
    mc_disk_config c;
    mc_disk_config_default(&c);
    setenv("MOONCAKE_OFFLOAD_USE_URING", "false", 1);
    setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", g_dir, 1);
    setenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "64MiB", 1);
    assert_int_equal(mc_disk_config_from_env(&c), MC_OK);
    assert_int_equal(c.io, MC_DISK_IO_THREADS);
    assert_string_equal(c.dir, g_dir);
    assert_int_equal(c.capacity_bytes, 64u << 20);
    c.direct = MC_DISK_DIRECT_OFF;
    mc_disk_store *s = NULL;
    assert_int_equal(mc_disk_open(&c, &s), MC_OK);
    mc_disk_metrics m;
    mc_disk_get_metrics(s, &m);
    assert_string_equal(m.io_backend, "threads");
    assert_false(m.direct_io);
    put_obj(s, 1, 123456);
    check_obj(s, 1, 123456);
    mc_disk_close(s);
    setenv("MOONCAKE_OFFLOAD_USE_URING", "true", 1);
    assert_int_equal(mc_disk_config_from_env(&c), MC_OK);
    assert_int_equal(c.io, MC_DISK_IO_URING);
    c.direct = MC_DISK_DIRECT_AUTO;
    assert_int_equal(mc_disk_open(&c, &s), MC_OK);
    mc_disk_get_metrics(s, &m);
    if (mc__disk_io_uring_built())
        assert_string_equal(m.io_backend, "io_uring");
    printf("# /tmp: O_DIRECT %s, engine %s\n", m.direct_io ? "yes" : "no", m.io_backend);
    check_obj(s, 1, 123456); /* written buffered, read back with O_DIRECT (if any) */
    mc_disk_close(s);
    setenv("MOONCAKE_OFFLOAD_USE_URING", "maybe", 1);
    assert_int_equal(mc_disk_config_from_env(&c), MC_INVALID_PARAMS);
    unsetenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
    unsetenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES");
}

/* The engine on its own: io_uring_queue_init refusing (here: more entries than the
 * kernel allows) falls back to the thread pool, which then does the I/O. */
typedef struct eng_op {
    mc__disk_op op;
    async_ctx *a;
    int64_t res;
} eng_op;

static bool eng_start(mc__disk_op *op)
{
    (void)op;
    return true;
}

static void eng_done(mc__disk_op *op, int64_t res)
{
    eng_op *e = (eng_op *)op;
    e->res = res;
    async_cb(e->a, res >= 0 ? MC_OK : MC_INTERNAL_ERROR, (uint64_t)res);
}

static void test_io_fallback(void **state)
{
    (void)state;
    mc__disk_io *io = NULL;
    assert_int_equal(mc__disk_io_create(MC_DISK_IO_URING, 2, 1u << 20, &io), 0);
    assert_string_equal(mc__disk_io_name(io), "threads");
    char path[300];
    snprintf(path, sizeof path, "%s/engine.dat", g_dir);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    assert_true(fd >= 0);
    unsigned char *w = make_value(3 * 4096, 7), r[3 * 4096];
    async_ctx a = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    eng_op wo = {.op = {.start = eng_start, .done = eng_done, .fd = fd, .write = true, .buf = w,
                        .len = sizeof r, .off = 4096},
                 .a = &a};
    mc__disk_io_submit(io, &wo.op);
    wait_done(&a, 1);
    eng_op ro = {.op = {.start = eng_start, .done = eng_done, .fd = fd, .write = false,
                        .buf = r, .len = sizeof r + 4096, .off = 4096}, /* past the end */
                 .a = &a};
    mc__disk_io_submit(io, &ro.op);
    wait_done(&a, 2);
    assert_int_equal(a.failed, 0);
    assert_int_equal(wo.res, (int64_t)sizeof r);
    assert_int_equal(ro.res, (int64_t)sizeof r);
    assert_memory_equal(r, w, sizeof r);
    mc__disk_io_destroy(io);
    close(fd);
    free(w);
}

/* Puts, gets and deletes from three threads while compaction runs over and over: every
 * read that succeeds returns a version that was written for that key, byte for byte,
 * and nothing ever fails a checksum. */
enum { CK = 64, CSZ = 24000 };
typedef struct conc {
    mc_disk_store *s;
    _Atomic bool stop;
    _Atomic int reads_ok;
} conc;

static void conc_value(unsigned char *v, int key, uint32_t ver)
{
    fill(v, CSZ, (uint64_t)key * 1000003u + ver);
    memcpy(v, &ver, sizeof ver);
}

static void *conc_writer(void *arg)
{
    conc *c = arg;
    unsigned char *v = malloc(CSZ);
    uint32_t ver = 1;
    while (!c->stop) {
        int k = (int)(mix(ver) % CK);
        char key[32];
        key_of(key, sizeof key, k);
        conc_value(v, k, ver);
        int rc = mc_disk_put(c->s, key, strlen(key), v, CSZ);
        if (rc != MC_OK) {
            fprintf(stderr, "put: %d\n", rc);
            abort();
        }
        ver++;
    }
    free(v);
    return NULL;
}

static void *conc_reader(void *arg)
{
    conc *c = arg;
    unsigned char *v = malloc(CSZ), *want = malloc(CSZ);
    uint64_t i = 0;
    while (!c->stop) {
        int k = (int)(mix(i++ + 77) % CK);
        char key[32];
        key_of(key, sizeof key, k);
        uint64_t n = 0;
        int rc = mc_disk_get(c->s, key, strlen(key), v, CSZ, &n);
        if (rc == MC_OBJECT_NOT_FOUND)
            continue;
        if (rc != MC_OK || n != CSZ) {
            fprintf(stderr, "get: %d\n", rc);
            abort();
        }
        uint32_t ver;
        memcpy(&ver, v, sizeof ver);
        conc_value(want, k, ver);
        if (memcmp(v, want, CSZ) != 0)
            abort();
        c->reads_ok++;
    }
    free(v);
    free(want);
    return NULL;
}

static void *conc_deleter(void *arg)
{
    conc *c = arg;
    uint64_t i = 0;
    while (!c->stop) {
        char key[32];
        key_of(key, sizeof key, (int)(mix(i++ + 5) % CK));
        mc_disk_delete(c->s, key, strlen(key));
        usleep(200);
    }
    return NULL;
}

static void test_concurrent_compaction(void **state)
{
    (void)state;
    mc_disk_config cfg;
    config(&cfg, g_dir);
    cfg.bucket_size_bytes = 256u << 10;
    cfg.compact_live_ratio = 0.9;
    conc c = {.s = open_cfg(&cfg)};
    pthread_t t[3];
    pthread_create(&t[0], NULL, conc_writer, &c);
    pthread_create(&t[1], NULL, conc_reader, &c);
    pthread_create(&t[2], NULL, conc_deleter, &c);
    mc_disk_metrics m;
    uint64_t deadline = mc_deadline_ms(30000);
    do {
        mc_disk_maintain(c.s);
        mc_disk_get_metrics(c.s, &m);
    } while ((m.compactions < 20 || c.reads_ok < 200) && mc_ms_left(deadline) > 0);
    c.stop = true;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    mc_disk_get_metrics(c.s, &m);
    assert_true(m.compactions >= 20);
    assert_int_equal(m.checksum_failures, 0);
    /* what is left reads back, and again after a restart */
    uint64_t objects = m.objects;
    mc_disk_close(c.s);
    c.s = open_cfg(&cfg);
    mc_disk_get_metrics(c.s, &m);
    assert_int_equal(m.objects, objects);
    c.stop = false;
    c.reads_ok = 0;
    unsigned char *v = malloc(CSZ), *want = malloc(CSZ);
    for (int k = 0; k < CK; k++) {
        char key[32];
        key_of(key, sizeof key, k);
        uint64_t n;
        int rc = mc_disk_get(c.s, key, strlen(key), v, CSZ, &n);
        if (rc == MC_OBJECT_NOT_FOUND)
            continue;
        assert_int_equal(rc, MC_OK);
        uint32_t ver;
        memcpy(&ver, v, sizeof ver);
        conc_value(want, k, ver);
        assert_memory_equal(v, want, CSZ);
        c.reads_ok++;
    }
    assert_int_equal((uint64_t)c.reads_ok, objects);
    free(v);
    free(want);
    mc_disk_close(c.s);
}

static mc_disk_io_kind k_uring = MC_DISK_IO_URING, k_threads = MC_DISK_IO_THREADS;

#define BOTH(f)                                                                          \
    {#f "(io_uring)", f, setup, teardown, &k_uring},                                     \
        {#f "(threads)", f, setup, teardown, &k_threads}

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_roundtrip_sizes),
        BOTH(test_bad_args),
        BOTH(test_restart_keeps_objects),
        BOTH(test_replace_and_delete),
        BOTH(test_flipped_byte),
        BOTH(test_torn_tail),
        BOTH(test_compaction),
        BOTH(test_capacity_refusal),
        BOTH(test_eviction_lru),
        BOTH(test_enospc_tmpfs),
        BOTH(test_async_many),
        BOTH(test_concurrent_compaction),
        cmocka_unit_test_prestate_setup_teardown(test_io_fallback, setup, teardown, &k_uring),
        cmocka_unit_test_prestate_setup_teardown(test_metrics_text, setup, teardown, &k_uring),
        cmocka_unit_test_prestate_setup_teardown(test_env_switch, setup, teardown, &k_uring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
