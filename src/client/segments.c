/* segments.c: the extra segments of a store client (include/mooncake/store.h,
 * mc_store_mount_segment & co.): memory the client maps (a file or /dev/shm object) or
 * allocates after setup, registers with its transfer engine and mounts on the master
 * beside the global segment of setup. Upstream: RealClient::mount_segment /
 * unmount_segment / allocate_and_mount_segment / unmount_and_free_segment
 * (real_client.cpp) and the master's GracefulUnmountSegment.
 *
 * State: s->xsegs (list of xseg), s->n_xsegs, guarded by s->xseg_lock. No master RPC or
 * engine call runs under that lock: a record is claimed (state) under it, then worked
 * on outside. Segment calls hold life shared (mc__store_enter); teardown holds it
 * exclusively, after the heartbeat (the other reader, mc__xseg_fill) has stopped. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG MC__STORE_TAG

/* After a graceful unmount the memory stays registered this much past the grace period:
 * the master finishes the unmount at its first tick after the deadline (10-100 ms). */
#define XSEG_TICK_SLACK_MS 1000u

enum { XS_MOUNTED, XS_BUSY, XS_RETIRING };

typedef struct xseg {
    mc_list node;          /* in s->xsegs */
    mc_master_uuid id;
    void *base;
    uint64_t size;         /* bytes */
    bool shared;           /* mc_te_alloc_shared (else mmap of a file + register) */
    bool file;             /* mapped from a file: dev/ino/off say which bytes */
    dev_t dev;
    ino_t ino;
    uint64_t off;          /* bytes into the file */
    int state;             /* XS_*, under xseg_lock */
    uint64_t release_at;   /* ms (mc_now_ms), XS_RETIRING only */
    char protocol[MC_STORE_PROTOCOL_MAX];
} xseg;

void mc__xseg_init(mc_store *s)
{
    pthread_mutex_init(&s->xseg_lock, NULL);
    mc_list_init(&s->xsegs);
    s->n_xsegs = 0;
}

void mc__xseg_deinit(mc_store *s)
{
    pthread_mutex_destroy(&s->xseg_lock);
}

static void id_format(mc_master_uuid id, char *out)
{
    snprintf(out, MC_STORE_SEGMENT_ID_LEN, "%016" PRIx64 "-%016" PRIx64, (uint64_t)id.first,
             (uint64_t)id.second);
}

static bool id_parse(const char *txt, mc_master_uuid *id)
{
    if (!txt || strlen(txt) != MC_STORE_SEGMENT_ID_LEN - 1 || txt[16] != '-')
        return false;
    uint64_t v[2] = {0, 0};
    for (int part = 0; part < 2; part++) {
        const char *p = txt + part * 17;
        for (int i = 0; i < 16; i++) {
            char c = p[i];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0)
                return false;
            v[part] = v[part] << 4 | (uint64_t)d;
        }
    }
    id->first = v[0];
    id->second = v[1];
    return true;
}

static mc_master_uuid new_id(void)
{
    uint64_t v[2];
    if (getrandom(v, sizeof v, 0) != (ssize_t)sizeof v) {
        /* getrandom without GRND_NONBLOCK only fails before the pool is ready: fall
         * back to the clock and address entropy, uniqueness is what matters here */
        v[0] = mc_now_ns() ^ (uint64_t)(uintptr_t)&v;
        v[1] = mc_now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    }
    return (mc_master_uuid){v[0], v[1]};
}

/* Releases x's memory (unregistered first, so the engine refuses late reads). */
static void xseg_release(mc_store *s, xseg *x)
{
    if (x->base) {
        if (x->shared) {
            mc_te_free_shared(s->te, x->base);
        } else {
            mc_te_unregister_memory(s->te, x->base);
            munmap(x->base, x->size);
        }
    }
    free(x);
}

/* Releases the retiring segments whose time has come (all of them when `all`). */
static void reap(mc_store *s, bool all)
{
    mc_list done;
    mc_list_init(&done);
    uint64_t now = mc_now_ms();
    pthread_mutex_lock(&s->xseg_lock);
    xseg *x;
    MC_LIST_FOREACH_ENTRY(x, &s->xsegs, xseg, node)
    {
        if (x->state == XS_RETIRING && (all || now >= x->release_at)) {
            mc_list_remove(&x->node);
            s->n_xsegs--;
            mc_list_push_back(&done, &x->node);
        }
    }
    pthread_mutex_unlock(&s->xseg_lock);
    MC_LIST_FOREACH_ENTRY(x, &done, xseg, node)
    {
        mc_list_remove(&x->node);
        xseg_release(s, x);
    }
}

static bool protocol_ok(const mc_store *s, const char *protocol)
{
    return !protocol || !*protocol || !strcmp(protocol, s->protocol);
}

/* Common tail of both mounts: registers nothing (the caller did), mounts x on the master
 * and links it. On failure x is released. */
static int mount_finish(mc_store *s, xseg *x, char *id_out, const char *path)
{
    pthread_mutex_lock(&s->xseg_lock);
    bool room = s->n_xsegs < MC_STORE_MAX_EXTRA_SEGMENTS;
    /* Two segments over the same bytes of a file would let the master place two objects
     * on one range: each write would overwrite the other's bytes (wrong bytes on a get).
     * Checked under the lock with the insertion, so two concurrent mounts cannot both
     * pass. Every state counts: a retiring segment's objects are still readable. */
    const xseg *alias = NULL;
    if (x->file) {
        const xseg *y;
        MC_LIST_FOREACH_ENTRY(y, &s->xsegs, xseg, node)
        {
            if (y->file && y->dev == x->dev && y->ino == x->ino && x->off < y->off + y->size &&
                y->off < x->off + x->size) {
                alias = y;
                break;
            }
        }
    }
    if (alias) {
        uint64_t aoff = alias->off, aend = alias->off + alias->size;
        pthread_mutex_unlock(&s->xseg_lock);
        mc_log(MC_LOG_ERROR, TAG,
               "mount_segment: [%" PRIu64 ", %" PRIu64 ") of %s overlaps bytes [%" PRIu64
               ", %" PRIu64 ") of the same file that this client has mounted already (two "
               "segments over the same memory would overwrite each other's objects); unmount "
               "that segment or mount another range",
               x->off, x->off + x->size, path ? path : "", aoff, aend);
        xseg_release(s, x);
        return MC_INVALID_PARAMS;
    }
    if (room) {
        x->state = XS_BUSY;
        mc_list_push_back(&s->xsegs, &x->node);
        s->n_xsegs++;
    }
    pthread_mutex_unlock(&s->xseg_lock);
    if (!room) {
        mc_log(MC_LOG_ERROR, TAG, "mount_segment: %u extra segments are mounted already",
               MC_STORE_MAX_EXTRA_SEGMENTS);
        xseg_release(s, x);
        return MC_INVALID_PARAMS;
    }
    x->id = new_id();
    mc_master_segment seg;
    memset(&seg, 0, sizeof seg);
    seg.id = x->id;
    seg.name = s->name;
    seg.base = (uint64_t)(uintptr_t)x->base;
    seg.size = x->size;
    seg.te_endpoint = s->name;
    seg.protocol = x->protocol;
    seg.host_id = s->host_id;
    int rc = mc_master_client_mount_segment(s->mc, &seg, s->client_id);
    pthread_mutex_lock(&s->xseg_lock);
    if (rc == MC_OK) {
        x->state = XS_MOUNTED;
    } else {
        mc_list_remove(&x->node);
        s->n_xsegs--;
    }
    pthread_mutex_unlock(&s->xseg_lock);
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "mount_segment: the master refused the segment: %s",
               mc_strerror(rc));
        xseg_release(s, x);
        return rc;
    }
    id_format(x->id, id_out);
    return MC_OK;
}

int mc_store_mount_segment(mc_store *s, const char *path, uint64_t size, uint64_t offset,
                           const char *protocol, const char *location, char *id_out)
{
    if (!id_out)
        return MC_INVALID_PARAMS;
    id_out[0] = '\0';
    long page = sysconf(_SC_PAGESIZE);
    if (!path || !*path || size < MC_STORE_MIN_SEGMENT_SIZE ||
        size > MC_STORE_MAX_SEGMENT_SIZE || size > SIZE_MAX || offset % (uint64_t)page ||
        offset > (uint64_t)INT64_MAX - size) {
        mc_log(MC_LOG_ERROR, TAG,
               "mount_segment: bad arguments (path '%s', size %" PRIu64 ", offset %" PRIu64
               "): size must be %u..%llu bytes and offset a multiple of %ld",
               path ? path : "", size, offset, MC_STORE_MIN_SEGMENT_SIZE,
               (unsigned long long)MC_STORE_MAX_SEGMENT_SIZE, page);
        return MC_INVALID_PARAMS;
    }
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    reap(s, false);
    if (!protocol_ok(s, protocol)) {
        mc_log(MC_LOG_ERROR, TAG,
               "mount_segment: protocol '%s' differs from this client's '%s' (one transport "
               "per client)",
               protocol, s->protocol);
        rc = MC_INVALID_PARAMS;
        goto out;
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        mc_log(MC_LOG_ERROR, TAG, "mount_segment: cannot open %s: %s", path, strerror(errno));
        rc = MC_INVALID_PARAMS;
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < offset + size) {
        mc_log(MC_LOG_ERROR, TAG,
               "mount_segment: %s holds %lld bytes, fewer than offset + size = %" PRIu64, path,
               (long long)st.st_size, offset + size);
        close(fd);
        rc = MC_INVALID_PARAMS;
        goto out;
    }
    void *base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
    int merr = errno;
    close(fd);
    if (base == MAP_FAILED) {
        mc_log(MC_LOG_ERROR, TAG, "mount_segment: cannot map %s: %s", path, strerror(merr));
        rc = MC_INVALID_PARAMS;
        goto out;
    }
    rc = mc_te_register_memory(s->te, base, (size_t)size,
                               location && *location ? location : NULL);
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "mount_segment: registering %s with the engine failed: %s",
               path, mc_strerror(rc));
        munmap(base, (size_t)size);
        goto out;
    }
    xseg *x = mc_xcalloc(1, sizeof *x);
    mc_list_init(&x->node);
    x->base = base;
    x->size = size;
    x->file = true;
    x->dev = st.st_dev;
    x->ino = st.st_ino;
    x->off = offset;
    snprintf(x->protocol, sizeof x->protocol, "%s", s->protocol);
    rc = mount_finish(s, x, id_out, path);
out:
    mc__store_leave(s);
    return rc;
}

int mc_store_allocate_and_mount_segment(mc_store *s, uint64_t size, const char *protocol,
                                        const char *location, char *id_out,
                                        uint64_t *allocated)
{
    if (allocated)
        *allocated = 0;
    if (!id_out)
        return MC_INVALID_PARAMS;
    id_out[0] = '\0';
    if (size < MC_STORE_MIN_SEGMENT_SIZE || size > MC_STORE_MAX_SEGMENT_SIZE ||
        size > SIZE_MAX) {
        mc_log(MC_LOG_ERROR, TAG,
               "allocate_and_mount_segment: size %" PRIu64 " must be %u..%llu bytes", size,
               MC_STORE_MIN_SEGMENT_SIZE, (unsigned long long)MC_STORE_MAX_SEGMENT_SIZE);
        return MC_INVALID_PARAMS;
    }
    (void)location; /* CPU memory only: every location means host memory */
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    reap(s, false);
    if (!protocol_ok(s, protocol)) {
        mc_log(MC_LOG_ERROR, TAG,
               "allocate_and_mount_segment: protocol '%s' differs from this client's '%s'",
               protocol, s->protocol);
        rc = MC_INVALID_PARAMS;
        goto out;
    }
    void *base = NULL;
    rc = mc_te_alloc_shared(s->te, (size_t)size, &base);
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "allocate_and_mount_segment: cannot allocate %" PRIu64
               " bytes: %s", size, mc_strerror(rc));
        goto out;
    }
    xseg *x = mc_xcalloc(1, sizeof *x);
    mc_list_init(&x->node);
    x->base = base;
    x->size = size;
    x->shared = true;
    snprintf(x->protocol, sizeof x->protocol, "%s", s->protocol);
    rc = mount_finish(s, x, id_out, NULL);
    if (rc == MC_OK && allocated)
        *allocated = size;
out:
    mc__store_leave(s);
    return rc;
}

int mc_store_unmount_segment(mc_store *s, const char *id, uint64_t grace_ms)
{
    mc_master_uuid uid;
    if (!id_parse(id, &uid) || grace_ms > 24ull * 3600 * 1000) {
        mc_log(MC_LOG_ERROR, TAG, "unmount_segment: bad segment id '%s' or grace period",
               id ? id : "");
        return MC_INVALID_PARAMS;
    }
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    reap(s, false);
    xseg *x, *found = NULL;
    pthread_mutex_lock(&s->xseg_lock);
    MC_LIST_FOREACH_ENTRY(x, &s->xsegs, xseg, node)
    {
        if (x->state == XS_MOUNTED && x->id.first == uid.first && x->id.second == uid.second) {
            x->state = XS_BUSY;
            found = x;
            break;
        }
    }
    pthread_mutex_unlock(&s->xseg_lock);
    if (!found) {
        rc = MC_SEGMENT_NOT_FOUND;
        goto out;
    }
    rc = mc_master_client_unmount_segment_grace(s->mc, uid, s->client_id, grace_ms);
    /* SEGMENT_NOT_FOUND: the master forgot it (restart before a remount): ours to free */
    bool gone = rc == MC_OK || rc == MC_SEGMENT_NOT_FOUND;
    pthread_mutex_lock(&s->xseg_lock);
    if (!gone) {
        found->state = XS_MOUNTED;
    } else if (grace_ms && rc == MC_OK) {
        found->state = XS_RETIRING;
        found->release_at = mc_now_ms() + grace_ms + XSEG_TICK_SLACK_MS;
        found = NULL; /* released later by reap */
    } else {
        mc_list_remove(&found->node);
        s->n_xsegs--;
    }
    pthread_mutex_unlock(&s->xseg_lock);
    if (gone && found)
        xseg_release(s, found);
    if (!gone)
        mc_log(MC_LOG_ERROR, TAG, "unmount_segment %s: %s", id, mc_strerror(rc));
    else
        rc = MC_OK;
out:
    mc__store_leave(s);
    return rc;
}

size_t mc_store_extra_segment_count(mc_store *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->xseg_lock);
    size_t n = s->n_xsegs;
    pthread_mutex_unlock(&s->xseg_lock);
    return n;
}

size_t mc__xseg_fill(mc_store *s, mc_master_segment *segs, size_t cap)
{
    size_t n = 0;
    xseg *x;
    pthread_mutex_lock(&s->xseg_lock);
    MC_LIST_FOREACH_ENTRY(x, &s->xsegs, xseg, node)
    {
        if (n == cap)
            break;
        if (x->state != XS_MOUNTED)
            continue;
        mc_master_segment *g = &segs[n++];
        memset(g, 0, sizeof *g);
        g->id = x->id;
        g->name = s->name;
        g->base = (uint64_t)(uintptr_t)x->base;
        g->size = x->size;
        g->te_endpoint = s->name;
        g->protocol = x->protocol;
        g->host_id = s->host_id;
    }
    pthread_mutex_unlock(&s->xseg_lock);
    return n;
}

void mc__xseg_teardown(mc_store *s)
{
    bool master_ok = s->mc && atomic_load(&s->ping_ok);
    pthread_mutex_lock(&s->xseg_lock);
    mc_list all;
    mc_list_init(&all);
    mc_list_splice_back(&all, &s->xsegs);
    s->n_xsegs = 0;
    pthread_mutex_unlock(&s->xseg_lock);
    xseg *x;
    MC_LIST_FOREACH_ENTRY(x, &all, xseg, node)
    {
        if (x->state == XS_MOUNTED && master_ok) {
            int r = mc_master_client_unmount_segment(s->mc, x->id, s->client_id);
            if (r != MC_OK && r != MC_SEGMENT_NOT_FOUND)
                mc_log(MC_LOG_WARN, TAG, "close: unmounting an extra segment failed: %s",
                       mc_strerror(r));
        }
        mc_list_remove(&x->node);
        xseg_release(s, x);
    }
}
