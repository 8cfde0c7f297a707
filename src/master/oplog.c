/* oplog.c: the master's mutation log (master/persist.h, docs/ha.md "Mutation log and
 * snapshots").
 *
 * Appending: a hook (internal.h mc__log_*) encodes its record (protobuf-c,
 * proto/master_log.proto) on the caller's thread while the caller still holds the lock
 * that orders the mutation (the key's shard mutex, or seg_lock for writing), then takes
 * the log mutex only to give it the next LSN and copy the frame in. So for any one key
 * (or segment) the log order is the order of its mutations, and a removal is in the log
 * before the space it freed can be given to a new object's put_end.
 *
 * Group commit: one writer thread takes every pending frame at once (woken when a caller
 * waits for its record, when 256 KiB are pending, or 2 ms after the first), writes them with
 * one write() and (sync FSYNC) one fdatasync(), then publishes the last LSN of the
 * group as durable. A put_end waits (mc__log_wait, after its shard lock is released)
 * until its own record is durable; the puts that arrive while a group is being written
 * form the next group. No disk I/O happens on the callers' threads.
 *
 * Prefix property: records are written in LSN order to one file at a time, so after a
 * crash the file holds a prefix of the log plus possibly a torn last group, which the
 * restore detects (length, checksum) and truncates. Any record after the cut was never
 * acknowledged (its group's write had not finished).
 *
 * An I/O error (disk full, ...) is logged as an error once; the log then stops (the
 * failed flag): later put_ends are acknowledged without a durable record and the next
 * restore serves what was written before the error. */
#include "master/oplog_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fdio.h"
#include "master/replicate.h"
#include "mooncake/log.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The log and LSN of this thread's last appended record (mc__log_wait). */
static _Thread_local mc__oplog *tl_log;
static _Thread_local uint64_t tl_lsn;
/* Deferred acknowledgements (mc_master_log_defer_begin): this thread's request may
 * leave its wait to the caller; tl_deferred = the LSN its reply must wait for. */
static _Thread_local bool tl_defer_ok;
static _Thread_local uint64_t tl_deferred;
/* Guards every service's log_notify (set by the RPC server, called by writers). */
static pthread_mutex_t notify_mu = PTHREAD_MUTEX_INITIALIZER;

uint8_t *mc__buf_room(mc__buf *b, size_t n)
{
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n)
            cap *= 2;
        b->p = mc_xrealloc(b->p, cap);
        b->cap = cap;
    }
    return b->p + b->len;
}

char *mc__persist_path(const char *dir, const char *prefix, uint64_t lsn, const char *suffix)
{
    size_t n = strlen(dir) + strlen(prefix) + strlen(suffix) + 24;
    char *p = mc_xmalloc(n);
    snprintf(p, n, "%s/%s%020" PRIu64 "%s", dir, prefix, lsn, suffix);
    return p;
}

int mc__fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

/* ---- encoding ---- */

static void put_frame(mc__buf *b, uint64_t lsn, const Mclog__LogRecord *rec)
{
    uint8_t *at = mc__buf_room(b, mc__log_frame_size(rec));
    b->len += mc__log_frame_write(at, lsn, rec);
}

size_t mc__log_encode_put_locked(mc_master_service *svc, obj *o, uint64_t now, uint64_t wall,
                                 mc__buf *b)
{
    Mclog__LogReplica reps[MC_MASTER_MAX_REPLICAS];
    Mclog__LogReplica *rp[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->nrep && n < MC_MASTER_MAX_REPLICAS; i++) {
        const seg *s = svc->segs[o->reps[i].seg];
        mclog__log_replica__init(&reps[n]);
        reps[n].seg_hi = s->id.first;
        reps[n].seg_lo = s->id.second;
        reps[n].addr = o->reps[i].addr;
        if (o->flags & F_PROC)
            reps[n].epoch = o->reps[i].epoch; /* the fence a promoted standby raises past */
        rp[n] = &reps[n];
        n++;
    }
    Mclog__LogObject lo = MCLOG__LOG_OBJECT__INIT;
    lo.key.data = okey(o);
    lo.key.len = o->key_len;
    lo.size = o->size;
    lo.hard_pin = (o->flags & F_HARD) != 0;
    if ((o->flags & F_SOFT) && !(o->flags & F_SOFT_REL)) {
        lo.soft_pin = true;
        lo.soft_pin_deadline_ms = wall + (o->pin > now ? o->pin - now : 0);
    }
    lo.n_replicas = n;
    lo.replicas = rp;
    Mclog__LogRecord rec = MCLOG__LOG_RECORD__INIT;
    if (o->flags & F_PROC) { /* a write in flight: its writer, for the quarantine */
        lo.writer_hi = o->owner.first;
        lo.writer_lo = o->owner.second;
        rec.op_case = MCLOG__LOG_RECORD__OP_START;
        rec.start = &lo;
    } else {
        rec.op_case = MCLOG__LOG_RECORD__OP_PUT;
        rec.put = &lo;
    }
    size_t before = b->len;
    put_frame(b, 0, &rec);
    return b->len - before - MC_MASTER_LOG_HDR;
}

static void seg_record(const seg *s, Mclog__LogSegment *ls)
{
    mclog__log_segment__init(ls);
    ls->id_hi = s->id.first;
    ls->id_lo = s->id.second;
    ls->client_hi = s->client.first;
    ls->client_lo = s->client.second;
    ls->name = (char *)s->name;
    ls->endpoint = (char *)s->endpoint;
    ls->protocol = (char *)s->protocol;
    ls->host_id = (char *)s->host_id;
    ls->range_base = s->base;
    ls->size = s->size;
}

void mc__log_encode_mount(const seg *s, mc__buf *b, uint64_t lsn)
{
    Mclog__LogSegment ls;
    seg_record(s, &ls);
    Mclog__LogRecord rec = MCLOG__LOG_RECORD__INIT;
    rec.op_case = MCLOG__LOG_RECORD__OP_MOUNT;
    rec.mount = &ls;
    put_frame(b, lsn, &rec);
}

/* ---- appending ---- */

/* Per-thread scratch for one frame (frames are small: a key and <= 8 replicas), freed
 * when the thread exits (a key's destructor holds its current buffer). */
static _Thread_local mc__buf tl_scratch;
static _Thread_local void *tl_registered;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_key_make(void)
{
    MC_ASSERT(pthread_key_create(&scratch_key, free) == 0);
}

/* Appends the frame in tl_scratch (lsn still 0) with the next LSN. */
static void append_scratch(mc__oplog *l)
{
    if (tl_scratch.p != tl_registered) { /* new or moved: the exit destructor frees it */
        pthread_once(&scratch_once, scratch_key_make);
        pthread_setspecific(scratch_key, tl_scratch.p);
        tl_registered = tl_scratch.p;
    }
    size_t flen = tl_scratch.len;
    pthread_mutex_lock(&l->mu);
    while (l->pend.len > OPLOG_PENDING_MAX && !l->failed && !l->stop)
        pthread_cond_wait(&l->done, &l->mu); /* the writer is behind: back-pressure */
    if (l->failed || l->stop) {
        pthread_mutex_unlock(&l->mu);
        tl_scratch.len = 0;
        return;
    }
    uint64_t lsn = ++l->last_lsn;
    uint8_t *at = mc__buf_room(&l->pend, flen);
    memcpy(at, tl_scratch.p, flen);
    mc__log_frame_seal(at, lsn, flen - MC_MASTER_LOG_HDR);
    /* Wake the writer only when it sleeps with nothing pending (it then lingers for
     * more), or when the group is large: most records join a group without a syscall.
     * A caller that waits for its record kicks the writer (mc__log_wait_slow). */
    bool wake = (l->pend.len == 0 && l->writer_idle) ||
                (l->pend.len < OPLOG_KICK_BYTES && l->pend.len + flen >= OPLOG_KICK_BYTES);
    if (l->pend.len == 0)
        l->pend_since = mono_ns();
    l->pend.len += flen;
    if (wake)
        pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
    cadd(&l->records, 1);
    cadd(&l->bytes, flen);
    tl_scratch.len = 0;
    tl_log = l;
    tl_lsn = lsn;
}

void mc__log_put_slow(mc_master_service *svc, obj *o)
{
    tl_scratch.len = 0;
    pthread_rwlock_rdlock(&svc->seg_lock); /* shard.mu -> seg_lock (read): in order */
    mc__log_encode_put_locked(svc, o, now_ms(svc), mc_wall_ms(), &tl_scratch);
    pthread_rwlock_unlock(&svc->seg_lock);
    append_scratch(svc->oplog);
}

void mc__log_remove_slow(mc_master_service *svc, const obj *o)
{
    Mclog__LogRecord rec = MCLOG__LOG_RECORD__INIT;
    rec.op_case = MCLOG__LOG_RECORD__OP_REMOVE;
    rec.remove.data = okey((obj *)o);
    rec.remove.len = o->key_len;
    tl_scratch.len = 0;
    put_frame(&tl_scratch, 0, &rec);
    append_scratch(svc->oplog);
}

void mc__log_mount_slow(mc_master_service *svc, const seg *s)
{
    tl_scratch.len = 0;
    mc__log_encode_mount(s, &tl_scratch, 0);
    append_scratch(svc->oplog);
}

void mc__log_unmount_slow(mc_master_service *svc, const seg *s)
{
    Mclog__LogSegment ls = MCLOG__LOG_SEGMENT__INIT;
    ls.id_hi = s->id.first;
    ls.id_lo = s->id.second;
    Mclog__LogRecord rec = MCLOG__LOG_RECORD__INIT;
    rec.op_case = MCLOG__LOG_RECORD__OP_UNMOUNT;
    rec.unmount = &ls;
    tl_scratch.len = 0;
    put_frame(&tl_scratch, 0, &rec);
    append_scratch(svc->oplog);
}

void mc__log_task_slow(mc_master_service *svc, const mc__log_task_rec *t)
{
    Mclog__LogTaskPart parts[MC_MASTER_MAX_TASK_TARGETS];
    Mclog__LogTaskPart *pp[MC_MASTER_MAX_TASK_TARGETS];
    Mclog__LogTask lt = MCLOG__LOG_TASK__INIT;
    lt.id_hi = t->id.first;
    lt.id_lo = t->id.second;
    lt.type = (uint32_t)t->type;
    lt.assigned_hi = t->assigned.first;
    lt.assigned_lo = t->assigned.second;
    Mclog__LogRecord rec = MCLOG__LOG_RECORD__INIT;
    if (!t->end) {
        lt.key.data = (uint8_t *)t->key;
        lt.key.len = t->klen;
        lt.size = t->size;
        lt.created_ms = t->created_ms;
        for (uint32_t i = 0; i < t->nparts && i < MC_MASTER_MAX_TASK_TARGETS; i++) {
            mclog__log_task_part__init(&parts[i]);
            parts[i].seg_hi = t->parts[i].seg.first;
            parts[i].seg_lo = t->parts[i].seg.second;
            parts[i].executor_hi = t->parts[i].executor.first;
            parts[i].executor_lo = t->parts[i].executor.second;
            parts[i].addr = t->parts[i].addr;
            pp[i] = &parts[i];
            lt.n_parts++;
        }
        lt.parts = pp;
        rec.op_case = MCLOG__LOG_RECORD__OP_TASK;
        rec.task = &lt;
    } else {
        lt.status = t->status;
        lt.message = (char *)(t->message ? t->message : "");
        lt.held_parts = t->held_mask;
        lt.updated_ms = t->updated_ms;
        rec.op_case = MCLOG__LOG_RECORD__OP_TASK_END;
        rec.task_end = &lt;
    }
    tl_scratch.len = 0;
    put_frame(&tl_scratch, 0, &rec);
    append_scratch(svc->oplog);
}

void mc__log_wait_starts(mc_master_service *svc)
{
    mc__oplog *l = svc->oplog;
    if (l && l->repl && mc__repl_sync(l->repl))
        mc__log_wait_slow(svc);
}

void mc__log_wait_slow(mc_master_service *svc)
{
    mc__oplog *l = svc->oplog;
    if (tl_log != l || !tl_lsn || l->sync == MC_MASTER_LOG_SYNC_NONE)
        return;
    uint64_t lsn = tl_lsn;
    tl_lsn = 0;
    pthread_mutex_lock(&l->mu);
    if (l->durable < lsn && !l->kick) {
        l->kick = true; /* someone waits: the writer writes the group now */
        pthread_cond_signal(&l->wake);
    }
    if (tl_defer_ok && !l->repl && atomic_load(&svc->log_defer)) {
        /* the RPC server sends the reply once the record is durable: this thread goes
         * on with other requests (the writer notifies it, mc_master_log_set_notify) */
        if (l->durable < lsn && !l->failed && !l->stop) {
            if (lsn > l->defer_max)
                l->defer_max = lsn;
            if (lsn > tl_deferred)
                tl_deferred = lsn;
            cadd(&l->deferred, 1);
        }
        pthread_mutex_unlock(&l->mu);
        return;
    }
    while (l->durable < lsn && !l->failed && !l->stop)
        pthread_cond_wait(&l->done, &l->mu);
    pthread_mutex_unlock(&l->mu);
    if (l->repl)
        mc__repl_wait_acked(l->repl, lsn); /* --ha_sync=sync: a standby has it */
}

/* ---- the writer ---- */

static int open_log_file(mc__oplog *l, uint64_t first, char *err, size_t errlen)
{
    if (!l->dir)
        return 0; /* HA replication only: no file */
    char *path = mc__persist_path(l->dir, "oplog-", first, ".log");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = 0;
    if (fd < 0 || write(fd, MC_MASTER_LOG_MAGIC, MC_MASTER_LOG_MAGIC_LEN) !=
                      (ssize_t)MC_MASTER_LOG_MAGIC_LEN ||
        fdatasync(fd) != 0 || mc__fsync_dir(l->dir) != 0) {
        rc = -errno;
        if (err)
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    free(path);
    if (fd >= 0) {
        if (l->fd >= 0)
            close(l->fd);
        l->fd = fd;
    }
    return rc;
}

/* Waits (l->mu held) until the pending group should be written: a caller waits for it
 * (kick), it is large, it lingered OPLOG_LINGER_NS, or a rotation or stop is asked. */
static void writer_wait(mc__oplog *l)
{
    for (;;) {
        if (l->stop || l->rotate || l->kick || l->pend.len >= OPLOG_KICK_BYTES)
            return;
        if (!l->pend.len) {
            l->writer_idle = true;
            pthread_cond_wait(&l->wake, &l->mu);
            l->writer_idle = false;
            continue;
        }
        uint64_t due = l->pend_since + OPLOG_LINGER_NS, now = mono_ns();
        if (now >= due)
            return;
        struct timespec ts = {(time_t)(due / 1000000000ull), (long)(due % 1000000000ull)};
        pthread_cond_timedwait(&l->wake, &l->mu, &ts);
    }
}

static void *writer_main(void *arg)
{
    mc__oplog *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        writer_wait(l);
        if (!l->pend.len && l->stop)
            break;
        l->kick = false; /* this group holds every record waited for so far */
        mc__buf group = l->pend;
        l->pend = l->spare;
        l->pend.len = 0;
        uint64_t last = l->last_lsn;
        bool rotate = l->rotate;
        l->rotate = false;
        bool failed = l->failed;
        pthread_cond_broadcast(&l->done); /* room in the buffer again */
        pthread_mutex_unlock(&l->mu);

        int rc = 0;
        if (!failed && group.len && l->fd >= 0) {
            rc = mc_write_all(l->fd, group.p, group.len);
            if (!rc && l->sync == MC_MASTER_LOG_SYNC_FSYNC) {
                rc = fdatasync(l->fd) ? -errno : 0;
                cadd(&l->fsyncs, 1);
            }
            cadd(&l->groups, 1);
        }
        if (!failed && !rc && rotate && l->fd >= 0) {
            /* every record <= last is in the file now: the next one starts at last + 1 */
            rc = fdatasync(l->fd) ? -errno : 0;
            if (!rc)
                rc = open_log_file(l, last + 1, NULL, 0);
        }
        if (!rc && !failed && group.len && l->repl)
            mc__repl_append(l->repl, group.p, group.len, last); /* standbys may fetch it */
        if (rc) {
            cadd(&l->write_errors, 1);
            mc_log(MC_LOG_ERROR, TAG,
                   "mutation log in %s: %s: logging stops (puts are acknowledged without a "
                   "durable record; a restore serves what was written before this)",
                   l->dir, strerror(-rc));
        }
        pthread_mutex_lock(&l->mu);
        if (rc)
            l->failed = true;
        l->spare = group;
        l->spare.len = 0;
        /* a deferred reply may be due: some reply waits above the old watermark (this
         * group may have passed it; a spurious notify costs one look per loop) */
        bool notify = l->defer_max > l->durable;
        if (last > l->durable)
            l->durable = last;
        pthread_cond_broadcast(&l->done);
        if (notify) {
            pthread_mutex_lock(&notify_mu);
            if (l->svc->log_notify)
                l->svc->log_notify(l->svc->log_notify_arg);
            pthread_mutex_unlock(&notify_mu);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

mc__oplog *mc__oplog_open(mc_master_service *svc, const char *dir, uint64_t first_lsn,
                          mc_master_log_sync sync, char *err, size_t errlen)
{
    mc__oplog *l = mc_xcalloc(1, sizeof(*l));
    l->svc = svc;
    l->dir = dir ? mc_xstrdup(dir) : NULL;
    l->sync = sync;
    l->fd = -1;
    l->last_lsn = l->durable = first_lsn - 1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the linger deadline's clock */
    pthread_cond_init(&l->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&l->done, NULL);
    if (open_log_file(l, first_lsn, err, errlen) != 0 ||
        pthread_create(&l->thr, NULL, writer_main, l) != 0) {
        if (l->fd >= 0)
            close(l->fd);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->wake);
        pthread_cond_destroy(&l->done);
        free(l->dir);
        free(l);
        return NULL;
    }
    return l;
}

void mc__oplog_fill_stats(mc_master_service *svc, mc_master_stats *out)
{
    mc__oplog *l = svc->oplog;
    if (!l)
        return;
    out->oplog_on = true;
    out->oplog_records = cget(&l->records);
    out->oplog_groups = cget(&l->groups);
    out->oplog_fsyncs = cget(&l->fsyncs);
    out->oplog_deferred = cget(&l->deferred);
}

/* ---- deferred acknowledgements (the RPC server; persist.h) ---- */

void mc_master_log_defer_begin(void)
{
    tl_defer_ok = true;
    tl_deferred = 0;
}

uint64_t mc_master_log_defer_end(void)
{
    tl_defer_ok = false;
    uint64_t lsn = tl_deferred;
    tl_deferred = 0;
    return lsn;
}

bool mc_master_log_is_durable(mc_master_service *svc, uint64_t lsn)
{
    mc__oplog *l = svc->oplog;
    if (!l || !lsn)
        return true;
    pthread_mutex_lock(&l->mu);
    bool done = l->durable >= lsn || l->failed || l->stop;
    pthread_mutex_unlock(&l->mu);
    return done;
}

void mc_master_log_set_notify(mc_master_service *svc, void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&notify_mu);
    svc->log_notify = fn;
    svc->log_notify_arg = arg;
    atomic_store(&svc->log_defer, fn != NULL);
    pthread_mutex_unlock(&notify_mu);
}

void mc__oplog_set_repl(mc__oplog *l, struct mc__repl *r)
{
    pthread_mutex_lock(&l->mu);
    l->repl = r;
    pthread_mutex_unlock(&l->mu);
}

uint64_t mc__oplog_rotate(mc__oplog *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t last = l->last_lsn;
    l->rotate = true;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
    return last;
}

void mc__oplog_close(mc__oplog *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->wake);
    pthread_cond_broadcast(&l->done);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thr, NULL);
    if (l->fd >= 0) {
        if (fdatasync(l->fd) != 0)
            mc_log(MC_LOG_ERROR, TAG, "mutation log in %s: fsync at close: %s", l->dir,
                   strerror(errno));
        close(l->fd);
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->wake);
    pthread_cond_destroy(&l->done);
    free(l->pend.p);
    free(l->spare.p);
    free(l->dir);
    free(l);
}
