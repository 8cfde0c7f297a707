/* inflight.c: a standby's copy of its leader's writes in flight, and their quarantine
 * when the standby is promoted (master/persist.h mc_master_log_promote; docs/ha.md
 * "Replication to the standbys", "Writes in flight at a failover").
 *
 * A `start` record (put_start / upsert_start on the leader: key, writer, size, replicas
 * with their fence epochs) is kept here instead of in the index: the write is not an
 * object (nothing may read it) and its space is not reserved while the standby follows
 * (the leader's later records may reuse that space once its own quarantine of the write
 * ended; those releases are not logged). A `put` record of the key whose replicas are
 * the write's (its put_end) forgets it. What is left at promotion was in flight on the
 * old leader, whose writer may still be sending bytes into those ranges through its
 * transfer engine: each range still free is reserved and quarantined under its writer
 * exactly as a revoked write is on a single master (fence.c: freed once the segment's
 * owner and the writer acknowledged a fence above the write's epoch, or the writer
 * expired and put_start_release_timeout_sec passed with the owner fenced). A range a
 * copied object occupies is left to the object (the old leader reused it after its own
 * quarantine). The writer's late put_end then finds no write (OBJECT_NOT_FOUND) and its
 * client's retried put starts afresh. Not in upstream (its standbys copy no writes).
 *
 * Locks: im.mu, a leaf; promotion takes seg_lock (read) then the fence / segment locks
 * as the quarantine does, without im.mu. Entries are a few per write in flight, plus one
 * per write the leader revoked or discarded without a later put of its key (freed at the
 * promotion; bounded by the leader's failed writes). */
#include "master/oplog_internal.h"

#include <inttypes.h>
#include <stdio.h>

#include "mooncake/log.h"

typedef struct iw_rep {
    mc_master_uuid seg;
    uint64_t addr, epoch;
} iw_rep;

typedef struct iw { /* one write in flight on the leader */
    struct iw *next;
    uint64_t h;
    mc_master_uuid writer;
    uint64_t size;
    uint32_t nrep, klen;
    iw_rep reps[MC_MASTER_MAX_REPLICAS];
    uint8_t key[];
} iw;

/* A copy / move task of the leader (task / task_end records), oldest first. */
typedef struct itask {
    struct itask *next;
    mc_master_task_info info; /* status PENDING until its task_end */
    bool ended;
    uint64_t size;
    uint32_t nparts, held; /* held: parts whose reservation stays quarantined */
    mc__log_task_part parts[MC_MASTER_MAX_TASK_TARGETS];
} itask;

struct mc__inflight {
    pthread_mutex_t mu;
    iw **b;
    size_t nb, n;
    itask *th, *tt; /* tasks, oldest first */
    size_t ntasks;
};

static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;

static struct mc__inflight *get(mc_master_service *svc)
{
    pthread_mutex_lock(&create_mu);
    struct mc__inflight *im = svc->inflight;
    if (!im) {
        im = mc_xcalloc(1, sizeof *im);
        pthread_mutex_init(&im->mu, NULL);
        im->nb = 64;
        im->b = mc_xcalloc(im->nb, sizeof *im->b);
        svc->inflight = im;
    }
    pthread_mutex_unlock(&create_mu);
    return im;
}

static bool same_key(const iw *w, uint64_t h, const uint8_t *key, size_t len)
{
    return w->h == h && w->klen == len && !memcmp(w->key, key, len);
}

/* Whether every replica of lo is one of w's (same segment and address). */
static bool reps_within(const iw *w, const Mclog__LogObject *lo)
{
    for (size_t i = 0; i < lo->n_replicas; i++) {
        const Mclog__LogReplica *r = lo->replicas[i];
        bool found = false;
        for (uint32_t k = 0; k < w->nrep && !found; k++)
            found = w->reps[k].seg.first == r->seg_hi && w->reps[k].seg.second == r->seg_lo &&
                    w->reps[k].addr == r->addr;
        if (!found)
            return false;
    }
    return true;
}

static void grow(struct mc__inflight *im)
{
    size_t nb = im->nb * 2;
    iw **b = mc_xcalloc(nb, sizeof *b);
    for (size_t i = 0; i < im->nb; i++)
        for (iw *w = im->b[i], *nx; w; w = nx) {
            nx = w->next;
            w->next = b[w->h & (nb - 1)];
            b[w->h & (nb - 1)] = w;
        }
    free(im->b);
    im->b = b;
    im->nb = nb;
}

void mc__inflight_start(mc_master_service *svc, const Mclog__LogObject *lo)
{
    if (!lo || !lo->key.len || lo->key.len > MC_MASTER_KEY_MAX || !lo->size ||
        !lo->n_replicas || lo->n_replicas > MC_MASTER_MAX_REPLICAS)
        return; /* no space to hold (a zero-size write), or malformed */
    struct mc__inflight *im = get(svc);
    uint64_t h = XXH3_64bits(lo->key.data, lo->key.len);
    iw *w = mc_xcalloc(1, sizeof *w + lo->key.len);
    w->h = h;
    w->writer = (mc_master_uuid){lo->writer_hi, lo->writer_lo};
    w->size = lo->size;
    w->klen = (uint32_t)lo->key.len;
    memcpy(w->key, lo->key.data, lo->key.len);
    for (size_t i = 0; i < lo->n_replicas; i++)
        w->reps[w->nrep++] = (iw_rep){{lo->replicas[i]->seg_hi, lo->replicas[i]->seg_lo},
                                      lo->replicas[i]->addr, lo->replicas[i]->epoch};
    pthread_mutex_lock(&im->mu);
    /* the same record applied twice (a snapshot and the log after it): keep one */
    for (iw *o = im->b[h & (im->nb - 1)]; o; o = o->next)
        if (same_key(o, h, w->key, w->klen) && uuid_eq(o->writer, w->writer) &&
            o->size == w->size && o->nrep == w->nrep && reps_within(o, lo)) {
            pthread_mutex_unlock(&im->mu);
            free(w);
            return;
        }
    if (im->n + 1 > im->nb)
        grow(im);
    w->next = im->b[h & (im->nb - 1)];
    im->b[h & (im->nb - 1)] = w;
    im->n++;
    pthread_mutex_unlock(&im->mu);
}

void mc__inflight_end(mc_master_service *svc, const Mclog__LogObject *lo)
{
    struct mc__inflight *im = svc->inflight; /* set by this (the applying) thread */
    if (!im || !lo || !lo->key.len || !lo->n_replicas)
        return; /* (a put without memory replicas completes no write's ranges) */
    uint64_t h = XXH3_64bits(lo->key.data, lo->key.len);
    pthread_mutex_lock(&im->mu);
    for (iw **p = &im->b[h & (im->nb - 1)]; *p;) {
        iw *w = *p;
        if (same_key(w, h, lo->key.data, lo->key.len) && reps_within(w, lo)) {
            *p = w->next; /* completed (or its space is the object's now) */
            free(w);
            im->n--;
        } else {
            p = &w->next;
        }
    }
    pthread_mutex_unlock(&im->mu);
}

/* ---- tasks ---- */

static itask *task_find(struct mc__inflight *im, mc_master_uuid id)
{
    for (itask *k = im->th; k; k = k->next)
        if (uuid_eq(k->info.id, id))
            return k;
    return NULL;
}

/* Forgets the oldest finished tasks with nothing held past max (im->mu held). */
static void task_trim(struct mc__inflight *im, size_t max)
{
    size_t finished = 0;
    for (itask *k = im->th; k; k = k->next)
        finished += k->ended && !k->held;
    for (itask **p = &im->th; *p && finished > max;) {
        itask *k = *p;
        if (k->ended && !k->held) {
            *p = k->next;
            free(k);
            im->ntasks--;
            finished--;
        } else {
            p = &k->next;
        }
    }
    im->tt = NULL;
    for (itask *k = im->th; k; k = k->next)
        im->tt = k;
}

void mc__inflight_task(mc_master_service *svc, const Mclog__LogTask *lt, bool end)
{
    if (!lt || (!end && (!lt->n_parts || lt->n_parts > MC_MASTER_MAX_TASK_TARGETS)))
        return;
    struct mc__inflight *im = get(svc);
    mc_master_uuid id = {lt->id_hi, lt->id_lo};
    pthread_mutex_lock(&im->mu);
    itask *k = task_find(im, id);
    if (!k) { /* a task_end without its task: created before the snapshot a restore
               * started from; reported as it ended */
        k = mc_xcalloc(1, sizeof *k);
        k->info.id = id;
        k->info.type = (int)lt->type;
        k->info.status = MC_MASTER_TASK_PENDING;
        k->info.assigned_client = (mc_master_uuid){lt->assigned_hi, lt->assigned_lo};
        if (im->tt)
            im->tt->next = k;
        else
            im->th = k;
        im->tt = k;
        im->ntasks++;
    }
    if (!end) {
        if (!k->nparts) {
            k->info.created_at_ms_epoch = k->info.last_updated_at_ms_epoch = lt->created_ms;
            k->size = lt->size;
            for (size_t i = 0; i < lt->n_parts; i++)
                k->parts[k->nparts++] = (mc__log_task_part){
                    {lt->parts[i]->seg_hi, lt->parts[i]->seg_lo},
                    {lt->parts[i]->executor_hi, lt->parts[i]->executor_lo},
                    lt->parts[i]->addr};
        }
    } else {
        k->ended = true;
        k->info.status = lt->status == MC_MASTER_TASK_SUCCESS ? MC_MASTER_TASK_SUCCESS
                                                              : MC_MASTER_TASK_FAILED;
        k->info.last_updated_at_ms_epoch = lt->updated_ms;
        snprintf(k->info.message, sizeof k->info.message, "%s",
                 lt->message ? lt->message : "");
        k->held = lt->held_parts & ((1u << k->nparts) - 1u);
        task_trim(im, svc->cfg.max_total_finished_tasks);
    }
    pthread_mutex_unlock(&im->mu);
}

/* Takes every entry out of the table (a list through next). */
static iw *take_all(mc_master_service *svc, size_t *n)
{
    struct mc__inflight *im = svc->inflight;
    iw *all = NULL;
    *n = 0;
    if (!im)
        return NULL;
    pthread_mutex_lock(&im->mu);
    for (size_t i = 0; i < im->nb; i++)
        for (iw *w = im->b[i], *nx; w; w = nx) {
            nx = w->next;
            w->next = all;
            all = w;
        }
    memset(im->b, 0, im->nb * sizeof *im->b);
    *n = im->n;
    im->n = 0;
    pthread_mutex_unlock(&im->mu);
    return all;
}

/* Reserves [addr, + size) of segment seg_id if it is free and quarantines it under
 * writer. Returns 1 when quarantined, 0 when the range is taken (an object copied from
 * the leader holds it) or its segment went. Caller holds seg_lock for reading. */
static int hold_range(mc_master_service *svc, mc_master_uuid writer, mc_master_uuid seg_id,
                      uint64_t addr, uint64_t size, uint64_t epoch, uint64_t now)
{
    seg *s = NULL;
    uint32_t slot = 0;
    for (uint32_t k = 0; k < svc->nslots && !s; k++)
        if (svc->segs[k] && !svc->segs[k]->unmounting && uuid_eq(svc->segs[k]->id, seg_id)) {
            s = svc->segs[k];
            slot = k;
        }
    if (!s || !size)
        return 0;
    pthread_mutex_lock(&s->mu);
    uint32_t hd = mc__alloc_reserve(s->alloc, addr, size, NULL);
    uint64_t bytes = hd != MC__ALLOC_NONE ? mc__alloc_block_size(s->alloc, hd) : 0;
    pthread_mutex_unlock(&s->mu);
    if (hd == MC__ALLOC_NONE)
        return 0;
    cadd(&s->used, bytes);
    cadd(&svc->allocated, bytes);
    rep r = {.seg = slot, .handle = hd, .addr = addr, .epoch = epoch};
    mc__quarantine_rep_locked(svc, writer, &r, s, now);
    return 1;
}

/* The leader's tasks into svc's task table: finished ones as they ended, unfinished
 * ones FAILED (logged so); the reservations an executor may still be filling (every
 * part of an unfinished task, the held parts of a finished one) quarantined under it. */
static uint64_t promote_tasks(mc_master_service *svc, uint64_t now)
{
    struct mc__inflight *im = svc->inflight;
    if (!im)
        return 0;
    pthread_mutex_lock(&im->mu);
    itask *all = im->th;
    im->th = im->tt = NULL;
    im->ntasks = 0;
    pthread_mutex_unlock(&im->mu);
    uint64_t held = 0, failed = 0;
    for (itask *k = all; k; k = k->next)
        for (uint32_t i = 0; i < k->nparts; i++)
            if (!k->ended || (k->held & (1u << i)))
                mc__client_touch(svc, k->parts[i].executor, now);
    pthread_rwlock_rdlock(&svc->seg_lock);
    for (itask *k = all; k; k = k->next)
        for (uint32_t i = 0; i < k->nparts; i++)
            if (!k->ended || (k->held & (1u << i)))
                held += (uint64_t)hold_range(svc, k->parts[i].executor, k->parts[i].seg,
                                             k->parts[i].addr, k->size, 0, now);
    pthread_rwlock_unlock(&svc->seg_lock);
    for (itask *k = all, *nx; k; k = nx) {
        nx = k->next;
        if (!k->ended) {
            k->info.status = MC_MASTER_TASK_FAILED;
            k->info.last_updated_at_ms_epoch = mc_wall_ms();
            snprintf(k->info.message, sizeof k->info.message,
                     "interrupted by a master failover or restart while in flight (its "
                     "executor's report is refused; the replicas it had added stay): "
                     "create it again");
            mc__log_task_rec lr = {.end = true, .id = k->info.id,
                                   .assigned = k->info.assigned_client,
                                   .type = k->info.type, .status = k->info.status,
                                   .message = k->info.message,
                                   .held_mask = (1u << k->nparts) - 1u,
                                   .updated_ms = k->info.last_updated_at_ms_epoch};
            mc__log_task(svc, &lr); /* the next standby / restore sees it ended */
            failed++;
        }
        if (k->info.created_at_ms_epoch || k->ended)
            mc__tasks_adopt(svc, &k->info);
        free(k);
    }
    if (held || failed)
        mc_log(MC_LOG_INFO, TAG,
               "promotion: %" PRIu64 " task(s) in flight failed, %" PRIu64 " task "
               "reservation(s) quarantined until their executors are fenced", failed, held);
    return held;
}

uint64_t mc_master_log_promote(mc_master_service *svc)
{
    if (!svc)
        return 0;
    uint64_t tq = promote_tasks(svc, now_ms(svc));
    size_t n;
    iw *all = take_all(svc, &n);
    /* fences above every epoch the old leader can have handed out: at least its logged
     * ones, and (clocks of the same order) its wall-clock based fence_base */
    uint64_t base = mc_wall_ms() << 10;
    for (iw *w = all; w; w = w->next)
        for (uint32_t i = 0; i < w->nrep; i++)
            if (w->reps[i].epoch >= base)
                base = w->reps[i].epoch + 1;
    mc__fence_raise_base(svc, base);
    if (!all)
        return tq;
    uint64_t now = now_ms(svc), quarantined = 0, taken = 0;
    /* the writers become known clients: one that never reaches this master expires,
     * which lets its quarantined ranges go after the release timeout */
    for (iw *w = all; w; w = w->next)
        mc__client_touch(svc, w->writer, now);
    pthread_rwlock_rdlock(&svc->seg_lock);
    for (iw *w = all; w; w = w->next)
        for (uint32_t i = 0; i < w->nrep; i++) {
            /* 0: its segment went (with the space), or an object copied from the
             * leader holds the range (the leader reused it legitimately) */
            int q = hold_range(svc, w->writer, w->reps[i].seg, w->reps[i].addr, w->size,
                               w->reps[i].epoch, now);
            quarantined += (uint64_t)q;
            taken += (uint64_t)!q;
        }
    pthread_rwlock_unlock(&svc->seg_lock);
    for (iw *w = all, *nx; w; w = nx) {
        nx = w->next;
        free(w);
    }
    mc_log(MC_LOG_INFO, TAG,
           "promotion: %zu write(s) in flight on the old leader: %" PRIu64 " range(s) "
           "quarantined until their writers are fenced, %" PRIu64 " already reused",
           n, quarantined, taken);
    return quarantined + tq;
}

void mc__inflight_destroy(mc_master_service *svc)
{
    struct mc__inflight *im = svc->inflight;
    if (!im)
        return;
    size_t n;
    for (iw *w = take_all(svc, &n), *nx; w; w = nx) {
        nx = w->next;
        free(w);
    }
    for (itask *k = im->th, *nx; k; k = nx) {
        nx = k->next;
        free(k);
    }
    free(im->b);
    pthread_mutex_destroy(&im->mu);
    free(im);
    svc->inflight = NULL;
}
