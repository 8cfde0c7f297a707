/* shared_fs.c: shared-FS DISK replicas, the client's side (upstream --root_fs_dir with
 * its DISK replicas written by the clients, upstream-mooncake.md §4.10; docs/ssd-tier.md
 * "Shared-FS DISK replicas"; the master's side is src/master/shared_fs.c + offload.c).
 *
 * At setup the client probes the master (an offload heartbeat with max_tasks 0: it
 * registers nothing) for its directory, "<root_fs_dir>/<cluster_id>" ("": none). With
 * one, the directory must be usable here: setup creates the cluster subdirectory when
 * missing and writes, fsyncs and unlinks a probe file; a failure fails setup, naming the
 * directory. With a global segment the client then runs one writer thread that polls the
 * master for WRITE / DELETE tasks (the disk tier's channel, offload_heartbeat /
 * offload_end): a WRITE names an object whose memory replica is in our own segment (the
 * master keeps it there, not evictable, until the result comes back), which the thread
 * copies into the object's file; a DELETE unlinks a file the master dropped. Never on
 * the transfer engine's threads, never on the master.
 *
 * One file per object, "<dir>/<32 hex digits of XXH3-128(key)>-<16 hex digits of the
 * write's generation>.mcsf" (the master computes the same name for the descriptor; the
 * generation comes with the WRITE task and is new per write, so a late rename of an
 * older write of the key never replaces a newer file): several writers on a shared file system need no
 * shared state (no appender per bucket file, no cross-host locks, no compaction), a
 * create is one rename and a delete one unlink, each atomic per object, and any reader
 * opens a file by name. Layout (little-endian):
 *    0  4  magic "MCSF"      4  2 version 1      6  2 flags 0
 *    8  4  key_len          12  4 hdr_sum: low 32 bits of XXH3-64 over bytes 4..47 (with
 *                                  hdr_sum = 0) and the key
 *   16  8  value_len        24  8 checksum: XXH3-64 of key || value
 *   32 16  reserved 0       48    key, then value
 * A file is written under a temporary name in the same directory, fsynced, renamed into
 * place and the directory fsynced: a reader sees no file or a whole one. A torn or
 * corrupt file fails its header or checksum check: the read fails (CHECKSUM_MISMATCH),
 * never returns its bytes. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "client/internal.h"
#include "common/env.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"
#include "net/frame.h"

#define TAG MC__STORE_TAG

#define FS_MAGIC 0x4653434Du /* "MCSF" */
#define FS_HDR 48u

#define FS_NAME_MAX 64 /* "<32 hex>-<16 hex>.mcsf" and its NUL */

/* The file name of key, generation gen (as master/shared_fs.c names it). */
static void fs_name(const void *key, size_t klen, uint64_t gen, char out[FS_NAME_MAX])
{
    XXH128_hash_t h = XXH3_128bits(key, klen);
    snprintf(out, FS_NAME_MAX, "%016llx%016llx-%016llx.mcsf", (unsigned long long)h.high64,
             (unsigned long long)h.low64, (unsigned long long)gen);
}

static uint32_t hdr_sum(const uint8_t *hdr, const void *key, size_t klen)
{
    uint8_t h[FS_HDR];
    memcpy(h, hdr, FS_HDR);
    memset(h + 12, 0, 4);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, h + 4, FS_HDR - 4);
    XXH3_64bits_update(&st, key, klen);
    return (uint32_t)XXH3_64bits_digest(&st);
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* One file being written: phase one (write_begin) writes it under its temporary name
 * and starts its writeback; phase two (write_finish) waits for it (fsync) and renames it
 * into place. A poll's WRITEs all go through phase one before any goes through phase
 * two, so their device writes overlap instead of one fsync after another. */
typedef struct fs_write {
    int fd; /* -1: failed or finished */
    int status;
    bool synced; /* made durable by the batch's syncfs: no fsync of its own */
    char tmp[PATH_MAX], path[PATH_MAX];
} fs_write;

static void write_begin(fs_write *w, const char *dir, const void *key, size_t klen,
                        uint64_t gen, const void *val, uint64_t size)
{
    char name[FS_NAME_MAX];
    static _Atomic unsigned seq;
    fs_name(key, klen, gen, name);
    snprintf(w->path, sizeof w->path, "%s/%s", dir, name);
    snprintf(w->tmp, sizeof w->tmp, "%s/.tmp-%s-%ld-%u", dir, name, (long)getpid(),
             atomic_fetch_add(&seq, 1));
    uint8_t hdr[FS_HDR] = {0};
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, key, klen);
    XXH3_64bits_update(&st, val, (size_t)size);
    mc_put_le32(hdr, FS_MAGIC);
    hdr[4] = 1; /* version 1, flags 0 */
    mc_put_le32(hdr + 8, (uint32_t)klen);
    mc_put_le64(hdr + 16, size);
    mc_put_le64(hdr + 24, XXH3_64bits_digest(&st));
    mc_put_le32(hdr + 12, hdr_sum(hdr, key, klen));
    w->status = MC_OK;
    w->synced = false;
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        w->status = MC_FILE_OPEN_FAIL;
        return;
    }
    if (write_all(w->fd, hdr, sizeof hdr) || write_all(w->fd, key, klen) ||
        write_all(w->fd, val, (size_t)size)) {
        w->status = MC_FILE_WRITE_FAIL;
        close(w->fd);
        w->fd = -1;
        unlink(w->tmp);
        return;
    }
    /* start the writeback now (a hint: the fsync below is what counts) */
    (void)sync_file_range(w->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

static int write_finish(fs_write *w)
{
    if (w->fd < 0)
        return w->status;
    if (!w->synced && fsync(w->fd) != 0)
        w->status = MC_FILE_WRITE_FAIL;
    if (close(w->fd) != 0)
        w->status = MC_FILE_WRITE_FAIL;
    w->fd = -1;
    if (w->status == MC_OK && rename(w->tmp, w->path) != 0)
        w->status = MC_FILE_WRITE_FAIL;
    if (w->status != MC_OK)
        unlink(w->tmp);
    return w->status;
}

/* Writes one object file (key, value of size bytes) into dir; MC_OK or FILE_WRITE_FAIL /
 * FILE_OPEN_FAIL. */
static int write_file(const char *dir, const void *key, size_t klen, const void *val,
                      uint64_t size)
{
    fs_write *w = mc_xmalloc(sizeof *w);
    write_begin(w, dir, key, klen, 0, val, size);
    int rc = write_finish(w);
    free(w);
    return rc;
}

static int read_exact(int fd, void *p, size_t n, uint64_t off)
{
    char *c = p;
    while (n) {
        ssize_t r = pread(fd, c, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int mc__shared_fs_read(mc_store *s, const char *path, const void *key, size_t klen,
                       const mc_store_iov *iov, size_t niov, uint64_t size)
{
    char name[FS_NAME_MAX];
    fs_name(key, klen, 0, name);
    size_t pl = strnlen(path, MC_MASTER_NAME_MAX), nl = strlen(name);
    /* "<dir>/<this key's 32 hex digits>-<16 hex digits>.mcsf": never read another file */
    if (pl <= nl || path[pl - nl - 1] != '/' || memcmp(path + pl - nl, name, 33) != 0 ||
        strcmp(path + pl - 5, ".mcsf") != 0 || strspn(path + pl - nl + 33, "0123456789abcdef") != 16)
        return MC_INVALID_PARAMS;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        atomic_fetch_add(&s->fs_read_failures, 1);
        return errno == ENOENT ? MC_OBJECT_NOT_FOUND : MC_FILE_OPEN_FAIL;
    }
    int rc = MC_OK;
    uint8_t hdr[FS_HDR], kb[MC_MASTER_KEY_MAX];
    if (read_exact(fd, hdr, sizeof hdr, 0) != 0 || mc_get_le32(hdr) != FS_MAGIC ||
        hdr[4] != 1 || hdr[5] != 0 || mc_get_le32(hdr + 8) != klen ||
        read_exact(fd, kb, klen, FS_HDR) != 0 || hdr_sum(hdr, kb, klen) != mc_get_le32(hdr + 12)) {
        rc = MC_CHECKSUM_MISMATCH; /* torn or damaged header */
    } else if (memcmp(kb, key, klen) != 0 || mc_get_le64(hdr + 16) != size) {
        rc = MC_OBJECT_NOT_FOUND; /* another object's file (or another size): not ours */
    } else {
        XXH3_state_t st;
        XXH3_64bits_reset(&st);
        XXH3_64bits_update(&st, key, klen);
        uint64_t off = 0;
        for (size_t p = 0; p < niov && off < size; p++) {
            uint64_t l = iov[p].len < size - off ? iov[p].len : size - off;
            if (l && read_exact(fd, iov[p].base, (size_t)l, FS_HDR + klen + off) != 0) {
                rc = MC_CHECKSUM_MISMATCH; /* shorter than its header says: torn */
                break;
            }
            XXH3_64bits_update(&st, iov[p].base, (size_t)l);
            off += l;
        }
        if (rc == MC_OK && (off != size || XXH3_64bits_digest(&st) != mc_get_le64(hdr + 24)))
            rc = MC_CHECKSUM_MISMATCH;
    }
    close(fd);
    if (rc == MC_CHECKSUM_MISMATCH)
        mc_log(MC_LOG_WARN, TAG, "shared-FS replica %s does not verify: not returned", path);
    atomic_fetch_add(rc == MC_OK ? &s->fs_reads : &s->fs_read_failures, 1);
    return rc;
}

/* ---- the writer thread ---- */

static bool own_range(const mc_store *s, uint64_t addr, uint64_t size)
{
    uint64_t base = (uint64_t)(uintptr_t)s->seg_base;
    return s->seg_base && addr >= base && size <= s->seg_size && addr - base <= s->seg_size - size;
}

typedef struct fs_ctx {
    mc_store *s;
    uint32_t interval_ms;
} fs_ctx;

static uint32_t fs_poll(mc_store *s, mc_master_offload_tasks *t, mc_master_offload_item *res)
{
    int rc = mc_master_client_offload_heartbeat(s->mc, s->client_id, s->name,
                                                MC_MASTER_MAX_OFFLOAD_TASKS, t);
    if (rc != MC_OK)
        return 0;
    size_t nres = 0;
    bool wrote = false;
    fs_write *ws = NULL;
    if (strcmp(t->fsdir, s->fs_dir) != 0) { /* another master (a failover) or none */
        free(t->keys);
        t->keys = NULL;
        return 0;
    }
    if (t->n)
        ws = mc_xmalloc(t->n * sizeof *ws);
    for (uint32_t i = 0; i < t->n; i++) { /* phase one of every WRITE */
        const mc_master_offload_item *it = &t->items[i];
        mc_master_offload_item *r = &res[i];
        *r = *it;
        ws[i].fd = -1;
        if (it->op != MC_MASTER_OFFLOAD_WRITE)
            continue;
        if (!own_range(s, it->address, it->size))
            r->status = MC_INVALID_PARAMS;
        else
            write_begin(&ws[i], s->fs_dir, it->key, it->key_len, it->gen,
                        (const void *)(uintptr_t)it->address, it->size);
    }
    /* several files: one syncfs of the shared file system makes them all durable (one
     * journal commit instead of one per file); a failed syncfs leaves each its fsync */
    uint32_t open_n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        open_n += ws[i].fd >= 0;
    for (uint32_t i = 0; open_n > 1 && i < t->n; i++)
        if (ws[i].fd >= 0) {
            bool ok = syncfs(ws[i].fd) == 0;
            for (uint32_t j = i; ok && j < t->n; j++)
                ws[j].synced = ws[j].fd >= 0;
            break;
        }
    for (uint32_t i = 0; i < t->n; i++) {
        const mc_master_offload_item *it = &t->items[i];
        if (it->op == MC_MASTER_OFFLOAD_WRITE) {
            mc_master_offload_item *r = &res[nres++];
            int st = res[i].status == MC_OK ? write_finish(&ws[i]) : res[i].status;
            *r = *it;
            r->status = st;
            wrote |= r->status == MC_OK;
            atomic_fetch_add(r->status == MC_OK ? &s->fs_writes : &s->fs_write_failures, 1);
            if (r->status != MC_OK)
                mc_log(MC_LOG_WARN, TAG, "writing a %llu-byte object to %s failed: %s",
                       (unsigned long long)it->size, s->fs_dir, mc_strerror(r->status));
        } else if (it->op == MC_MASTER_OFFLOAD_DELETE) {
            char name[FS_NAME_MAX], path[PATH_MAX];
            fs_name(it->key, it->key_len, it->gen, name);
            snprintf(path, sizeof path, "%s/%s", s->fs_dir, name);
            unlink(path); /* ENOENT: gone already */
        }
    }
    free(ws);
    /* the renames of this batch are durable before the master records them */
    if (wrote && fsync_dir(s->fs_dir) != 0)
        for (size_t i = 0; i < nres; i++)
            res[i].status = MC_FILE_WRITE_FAIL;
    if (nres) {
        rc = mc_master_client_offload_end(s->mc, s->client_id, s->name, res, nres, NULL);
        if (rc != MC_OK)
            mc_log(MC_LOG_WARN, TAG, "reporting %zu shared-FS write(s) failed: %s", nres,
                   mc_strerror(rc));
    }
    uint32_t n = t->n;
    free(t->keys);
    t->keys = NULL;
    return n;
}

static void *fs_main(void *arg)
{
    fs_ctx *cx = arg;
    mc_store *s = cx->s;
    uint32_t interval = cx->interval_ms;
    free(cx);
    mc_master_offload_tasks *t = mc_xmalloc(sizeof *t);
    mc_master_offload_item *res = mc_xmalloc(MC_MASTER_MAX_OFFLOAD_TASKS * sizeof *res);
    pthread_mutex_lock(&s->off_mu);
    while (!s->fs_stop) {
        pthread_mutex_unlock(&s->off_mu);
        uint32_t n = fs_poll(s, t, res);
        pthread_mutex_lock(&s->off_mu);
        if (n)
            continue; /* more may be waiting */
        struct timespec ts = mc_monotonic_in_ms(interval);
        while (!s->fs_stop && pthread_cond_timedwait(&s->off_cond, &s->off_mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&s->off_mu);
    free(res);
    free(t);
    return NULL;
}

/* ---- setup ---- */

/* The master's root of dir ("<root>/<cluster_id>"): dir without its last component. */
static void root_of(const char *dir, char *out, size_t n)
{
    snprintf(out, n, "%s", dir);
    char *sl = strrchr(out, '/');
    if (sl && sl != out)
        *sl = '\0';
}

int mc__shared_fs_start(mc_store *s, const mc_store_config *c, uint32_t hb_ms)
{
    const char *want = c->storage_root_dir && *c->storage_root_dir ? c->storage_root_dir : NULL;
    s->fs_dir[0] = '\0';
    if (s->disk && want) {
        mc_log(MC_LOG_ERROR, TAG, "setup: storage_root_dir together with a LOCAL_DISK tier "
                                  "(enable_ssd_offload) is not implemented");
        return MC_INVALID_PARAMS;
    }
    mc_master_offload_tasks *t = mc_xmalloc(sizeof *t);
    int rc = mc_master_client_offload_heartbeat(s->mc, s->client_id, s->name, 0, t);
    if (rc == MC_OK)
        snprintf(s->fs_dir, sizeof s->fs_dir, "%s", t->fsdir);
    free(t->keys);
    free(t);
    if (s->disk && s->fs_dir[0]) {
        mc_log(MC_LOG_ERROR, TAG, "setup: the master runs with --root_fs_dir (%s): a "
               "client-owned disk tier (enable_ssd_offload / MOONCAKE_OFFLOAD_FILE_STORAGE_"
               "PATH) is not implemented together with it", s->fs_dir);
        s->fs_dir[0] = '\0';
        return MC_INVALID_PARAMS;
    }
    if (s->disk)
        return MC_OK; /* the client-owned tier: no shared directory */
    if (!s->fs_dir[0]) {
        if (want) {
            mc_log(MC_LOG_ERROR, TAG, "setup: storage_root_dir=%s, but the master at %s runs "
                   "without --root_fs_dir (%s): no shared-FS replicas", want,
                   c->master_server_addr ? c->master_server_addr : "?",
                   rc == MC_OK ? "no directory" : mc_strerror(rc));
            return MC_INVALID_PARAMS;
        }
        return MC_OK;
    }
    char root[MC_MASTER_NAME_MAX];
    root_of(s->fs_dir, root, sizeof root);
    struct stat a, b;
    if (want && (stat(want, &a) != 0 || stat(root, &b) != 0 || a.st_dev != b.st_dev ||
                 a.st_ino != b.st_ino)) {
        mc_log(MC_LOG_ERROR, TAG, "setup: storage_root_dir=%s is not the master's "
               "--root_fs_dir=%s here (not the same directory: mount it at that path)", want,
               root);
        s->fs_dir[0] = '\0';
        return MC_INVALID_PARAMS;
    }
    if (mkdir(s->fs_dir, 0755) != 0 && errno != EEXIST) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot create the shared-FS directory %s (is the "
               "master's --root_fs_dir=%s mounted here?): %s", s->fs_dir, root, strerror(errno));
        s->fs_dir[0] = '\0';
        return MC_FILE_OPEN_FAIL;
    }
    static const char probe_key[] = "\x01mooncake-c shared-fs probe";
    char pname[FS_NAME_MAX], ppath[PATH_MAX];
    char probe[64];
    snprintf(probe, sizeof probe, "%s-%ld", probe_key, (long)getpid());
    fs_name(probe, strlen(probe), 0, pname);
    snprintf(ppath, sizeof ppath, "%s/%s", s->fs_dir, pname);
    rc = write_file(s->fs_dir, probe, strlen(probe), "probe", 5);
    unlink(ppath);
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "setup: the shared-FS directory %s is not writable here: %s",
               s->fs_dir, strerror(errno));
        s->fs_dir[0] = '\0';
        return rc;
    }
    if (!s->seg_base) {
        mc_log(MC_LOG_INFO, TAG, "shared-FS DISK replicas readable from %s", s->fs_dir);
        return MC_OK; /* no segment: nothing of ours to write */
    }
    uint64_t poll_ms = hb_ms < 100 ? hb_ms : 100;
    if (mc_env_u64("MC_OFFLOAD_POLL_MS", poll_ms, 10, 60000, &poll_ms) != 0)
        return MC_INVALID_PARAMS;
    /* one poll now: registers us before setup returns, so the objects put from here on
     * that land in our segment are written (the master queues WRITEs only for clients
     * it knows) */
    mc_master_offload_tasks *t0 = mc_xmalloc(sizeof *t0);
    mc_master_offload_item *r0 = mc_xmalloc(MC_MASTER_MAX_OFFLOAD_TASKS * sizeof *r0);
    fs_poll(s, t0, r0);
    free(r0);
    free(t0);
    fs_ctx *cx = mc_xmalloc(sizeof *cx);
    cx->s = s;
    cx->interval_ms = (uint32_t)poll_ms;
    pthread_mutex_lock(&s->off_mu);
    s->fs_stop = false;
    pthread_mutex_unlock(&s->off_mu);
    if (pthread_create(&s->fs_thread, NULL, fs_main, cx) != 0) {
        free(cx);
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot start the shared-FS writer");
        return MC_INTERNAL_ERROR;
    }
    s->fs_started = true;
    mc_log(MC_LOG_INFO, TAG, "shared-FS DISK replicas in %s (writing this client's objects, "
           "polling every %u ms)", s->fs_dir, (unsigned)poll_ms);
    return MC_OK;
}

void mc__shared_fs_stop(mc_store *s)
{
    pthread_mutex_lock(&s->off_mu);
    s->fs_stop = true;
    pthread_cond_broadcast(&s->off_cond);
    pthread_mutex_unlock(&s->off_mu);
    if (s->fs_started)
        pthread_join(s->fs_thread, NULL);
    s->fs_started = false;
}
