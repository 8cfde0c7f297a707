/* fence.c: fence epochs and the quarantine (docs/consistency.md, "The mechanism"): the
 * master half of the rule that the space of a write that will never finish is reused
 * only after every path its writer could still use is fenced. Not in upstream Mooncake
 * (upstream holds such space until put_start_release_timeout_sec instead).
 *
 * Fence records: one per pair (writer client W, segment endpoint S) whose epoch was ever
 * raised, i.e. a write of W to S failed. e(W, S) is the record's `epoch` (fence_base
 * for a pair without a record). put_start hands it out with each replica (rep.epoch);
 * quarantining a replica allocated at epoch e raises e(W, S) to e + 1 unless a raise
 * after e happened already, and keeps the allocation until
 *   - the owner of S acknowledged a writer fence (W, >= e + 1) (owner_acked), and
 *   - W acknowledged a target fence (S, >= e + 1) (writer_acked),
 * or S is unmounted, or W expired (writer_gone) and put_start_release_timeout_sec
 * passed since the quarantine began with the owner's acknowledgement in. Pending
 * fences travel in ping replies; acknowledgements in ping requests (mc__fence_ping).
 *
 * Records are keyed by the segment's transport endpoint, not by segment id: the owner's
 * transfer engine keeps one minimum per writer for all of its memory (mc_te_fence_writer),
 * and a store client has one engine, named by that endpoint. Records are never removed
 * (one per pair that ever failed; a writer that comes back under its id must still get
 * its pending fences).
 *
 * Locks: fence_lock (master/internal.h) guards everything here; taken after seg_lock
 * (read) and before seg.mu. Gauges and counters are relaxed atomics. */
#include "master/internal.h"

#include "mooncake/log.h"

typedef struct fence_rec {
    mc_master_uuid writer;
    mc_master_uuid owner;   /* client of the segment last quarantined on                */
    uint64_t ep_hash;       /* XXH3 of endpoint                                          */
    char *endpoint;         /* the segment's transport endpoint (the engine's name)     */
    uint64_t epoch;         /* e(writer, endpoint): what new writes get                  */
    uint64_t owner_acked;   /* the highest writer fence the owner reported applied      */
    uint64_t writer_acked;  /* the highest target fence the writer reported applied     */
    bool writer_gone;       /* the writer's client expired and did not come back        */
} fence_rec;

/* One quarantined allocation. */
typedef struct quar {
    mc_list link;      /* in svc->quarantine                                            */
    fence_rec *rec;
    uint32_t slot;     /* segment slot (the slot stays taken while this entry lives)    */
    uint32_t handle;   /* allocator handle                                              */
    uint64_t bytes;    /* block size, as `allocated` counts it                          */
    uint64_t epoch;    /* both sides must have applied at least this minimum            */
    uint64_t since;    /* ms: when the quarantine began                                 */
} quar;

static inline bool owner_pending(const fence_rec *r)
{
    return r->owner_acked < r->epoch;
}
static inline bool writer_pending(const fence_rec *r)
{
    return r->writer_acked < r->epoch;
}

static inline unsigned pend(const fence_rec *r)
{
    return (unsigned)owner_pending(r) + (unsigned)writer_pending(r);
}

/* Keeps fence_pending and the issued / acked counters in step with one record's
 * change: `before` = pend(r) before it. issued counts sides becoming pending, acked sides
 * ceasing to be, so issued - acked == fence_pending. */
static void pend_update(mc_master_service *svc, const fence_rec *r, unsigned before)
{
    unsigned after = pend(r);
    if (after > before) {
        cadd(&svc->fence_pending, after - before);
        cadd(&svc->fences_issued, after - before);
    } else if (before > after) {
        csub(&svc->fence_pending, before - after);
        cadd(&svc->fences_acked, before - after);
    }
}

/* ---- the record table (caller holds fence_lock) ---- */

static uint64_t rec_hash(mc_master_uuid w, uint64_t ep_hash)
{
    uint64_t x = w.first * 0x9e3779b97f4a7c15ull ^ (w.second + 0x632be59bd9b4e019ull) ^
                 ep_hash * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 29);
}

static fence_rec *rec_find(mc_master_service *svc, mc_master_uuid w, const char *ep,
                           uint64_t ep_hash)
{
    if (!svc->fidx_cap)
        return NULL;
    size_t m = svc->fidx_cap - 1;
    for (size_t j = rec_hash(w, ep_hash) & m;; j = (j + 1) & m) {
        uint32_t v = svc->fidx[j];
        if (!v)
            return NULL;
        fence_rec *r = svc->frecs[v - 1];
        if (r->ep_hash == ep_hash && uuid_eq(r->writer, w) && !strcmp(r->endpoint, ep))
            return r;
    }
}

static void fidx_put(uint32_t *idx, size_t cap, const fence_rec *r, uint32_t v)
{
    size_t m = cap - 1, j = rec_hash(r->writer, r->ep_hash) & m;
    while (idx[j])
        j = (j + 1) & m;
    idx[j] = v;
}

/* The record of (w, s's endpoint), created at fence_base when absent. Write lock. */
static fence_rec *rec_get(mc_master_service *svc, mc_master_uuid w, const seg *s)
{
    fence_rec *r = rec_find(svc, w, s->endpoint, s->ep_hash);
    if (r)
        return r;
    if ((svc->nfrecs + 1) * 2 > svc->fidx_cap) { /* load <= 1/2: rebuild the index */
        size_t cap = svc->fidx_cap ? svc->fidx_cap * 2 : 64;
        uint32_t *idx = mc_xcalloc(cap, sizeof *idx);
        for (size_t i = 0; i < svc->nfrecs; i++)
            fidx_put(idx, cap, svc->frecs[i], (uint32_t)i + 1);
        free(svc->fidx);
        svc->fidx = idx;
        svc->fidx_cap = cap;
    }
    if (svc->nfrecs == svc->frecs_cap) {
        svc->frecs_cap = svc->frecs_cap ? svc->frecs_cap * 2 : 32;
        svc->frecs = mc_xrealloc(svc->frecs, svc->frecs_cap * sizeof *svc->frecs);
    }
    r = mc_xcalloc(1, sizeof *r);
    r->writer = w;
    r->owner = s->client;
    r->ep_hash = s->ep_hash;
    r->endpoint = mc_xstrdup(s->endpoint);
    r->epoch = r->owner_acked = r->writer_acked = svc->fence_base;
    svc->frecs[svc->nfrecs++] = r;
    fidx_put(svc->fidx, svc->fidx_cap, r, (uint32_t)svc->nfrecs);
    cadd(&svc->nfence, 1);
    return r;
}

/* ---- epochs handed out ---- */

uint64_t mc__fence_epoch_locked(mc_master_service *svc, mc_master_uuid writer, const seg *s)
{
    if (!cget(&svc->nfence))
        return svc->fence_base; /* nothing ever failed: no lock on the put path */
    pthread_rwlock_rdlock(&svc->fence_lock);
    const fence_rec *r = rec_find(svc, writer, s->endpoint, s->ep_hash);
    uint64_t e = r ? r->epoch : svc->fence_base;
    pthread_rwlock_unlock(&svc->fence_lock);
    return e;
}

/* ---- quarantine ---- */

void mc__quarantine_rep_locked(mc_master_service *svc, mc_master_uuid writer, rep *r, seg *s,
                               uint64_t now)
{
    pthread_mutex_lock(&s->mu);
    uint64_t b = mc__alloc_block_size(s->alloc, r->handle);
    pthread_mutex_unlock(&s->mu);
    quar *q = mc_xmalloc(sizeof *q);
    pthread_rwlock_wrlock(&svc->fence_lock);
    fence_rec *f = rec_get(svc, writer, s);
    unsigned before = pend(f);
    if (!uuid_eq(f->owner, s->client)) {
        /* the endpoint belongs to another client now (a restarted owner): what the old
         * one applied says nothing about the new engine */
        f->owner = s->client;
        f->owner_acked = svc->fence_base;
    }
    /* The write was allocated at epoch e (a replica older than the record counts as
     * allocated at the record's epoch). Fencing below e + 1 refuses it; raise only when
     * no raise after e happened yet, so a burst of failures of one writer to one segment
     * costs one raise, not one per failure (each raise also refuses the writer's other
     * writes in flight to that segment). */
    uint64_t e = r->epoch >= svc->fence_base ? r->epoch : f->epoch;
    if (e >= f->epoch)
        f->epoch = e + 1;
    pend_update(svc, f, before);
    if (f->owner_acked >= e + 1 && f->writer_acked >= e + 1) {
        /* both sides applied a fence above this write already (an earlier failure of
         * the same writer to the same segment raised it, and both acknowledged): the
         * old write is refused on every path, so the space is reusable now instead of
         * at the next reap (quar_done's first two rules) */
        pthread_rwlock_unlock(&svc->fence_lock);
        free(q);
        pthread_mutex_lock(&s->mu);
        mc__alloc_free(s->alloc, r->handle);
        pthread_mutex_unlock(&s->mu);
        csub(&s->used, b);
        if (!s->unmounting)
            csub(&svc->allocated, b);
        r->handle = MC__ALLOC_NONE;
        return;
    }
    q->rec = f;
    q->slot = r->seg;
    q->handle = r->handle;
    q->bytes = b;
    q->epoch = e + 1;
    q->since = now;
    mc_list_push_back(&svc->quarantine, &q->link);
    cadd(&svc->quar_bytes, b);
    cadd(&svc->quar_entries, 1);
    pthread_rwlock_unlock(&svc->fence_lock);
    r->handle = MC__ALLOC_NONE;
}

/* Whether q's allocation may be reused now. */
static bool quar_done(const mc_master_service *svc, const quar *q, uint64_t now)
{
    const fence_rec *f = q->rec;
    if (f->owner_acked < q->epoch)
        return false; /* the owner may still receive the old writer's TCP bytes */
    if (f->writer_acked >= q->epoch)
        return true;
    /* a writer that died: nothing of it runs any more, except (residual risk, see
     * docs/consistency.md) a same-host copy paused for longer than the release timeout */
    return f->writer_gone && now - q->since >= svc->release_ms;
}

/* Frees what is done. Caller holds seg_lock (read) and fence_lock (write). */
static void reap_locked(mc_master_service *svc, uint64_t now)
{
    MC_LIST_FOREACH(it, &svc->quarantine) {
        quar *q = MC_CONTAINER_OF(it, quar, link);
        if (!quar_done(svc, q, now))
            continue;
        seg *s = svc->segs[q->slot];
        pthread_mutex_lock(&s->mu);
        mc__alloc_free(s->alloc, q->handle);
        pthread_mutex_unlock(&s->mu);
        csub(&s->used, q->bytes);
        if (!s->unmounting) /* an unmounting segment left the global gauge already */
            csub(&svc->allocated, q->bytes);
        mc_list_remove(it);
        csub(&svc->quar_bytes, q->bytes);
        csub(&svc->quar_entries, 1);
        free(q);
    }
}

void mc__quarantine_reap(mc_master_service *svc, uint64_t now)
{
    if (!cget(&svc->quar_entries))
        return;
    pthread_rwlock_rdlock(&svc->seg_lock);
    pthread_rwlock_wrlock(&svc->fence_lock);
    reap_locked(svc, now);
    pthread_rwlock_unlock(&svc->fence_lock);
    pthread_rwlock_unlock(&svc->seg_lock);
}

void mc__quarantine_drop_slot(mc_master_service *svc, uint32_t slot)
{
    if (!cget(&svc->quar_entries))
        return;
    pthread_rwlock_wrlock(&svc->fence_lock);
    MC_LIST_FOREACH(it, &svc->quarantine) {
        quar *q = MC_CONTAINER_OF(it, quar, link);
        if (q->slot != slot)
            continue;
        mc_list_remove(it);
        csub(&svc->quar_bytes, q->bytes);
        csub(&svc->quar_entries, 1);
        free(q);
    }
    pthread_rwlock_unlock(&svc->fence_lock);
}

/* ---- clients ---- */

void mc__fence_writer_state(mc_master_service *svc, mc_master_uuid id, bool gone)
{
    if (!cget(&svc->nfence))
        return;
    pthread_rwlock_wrlock(&svc->fence_lock);
    for (size_t i = 0; i < svc->nfrecs; i++)
        if (uuid_eq(svc->frecs[i]->writer, id))
            svc->frecs[i]->writer_gone = gone;
    pthread_rwlock_unlock(&svc->fence_lock);
}

/* Records the acknowledgements of client id. Caller holds fence_lock (write). */
static void record_acks(mc_master_service *svc, mc_master_uuid id,
                        const mc_master_ping_request *req)
{
    for (size_t i = 0; i < svc->nfrecs; i++) {
        fence_rec *f = svc->frecs[i];
        unsigned before = pend(f);
        if (uuid_eq(f->owner, id))
            for (size_t k = 0; k < req->n_owner_acks; k++) {
                const mc_master_writer_fence *a = &req->owner_acks[k];
                if (uuid_eq(a->writer, f->writer) && a->min_epoch > f->owner_acked)
                    f->owner_acked = a->min_epoch;
            }
        if (uuid_eq(f->writer, id))
            for (size_t k = 0; k < req->n_writer_acks; k++) {
                const mc_master_target_fence *a = &req->writer_acks[k];
                if (a->min_epoch > f->writer_acked && !strcmp(a->segment, f->endpoint))
                    f->writer_acked = a->min_epoch;
            }
        pend_update(svc, f, before);
    }
}

void mc__fence_ping(mc_master_service *svc, mc_master_uuid id,
                    const mc_master_ping_request *req, mc_master_ping_result *out,
                    uint64_t now)
{
    if (out)
        out->n_writer_fences = out->n_target_fences = 0;
    if (!cget(&svc->nfence))
        return; /* nothing ever failed: nothing to acknowledge or hand out */
    if (req && (req->n_owner_acks || req->n_writer_acks)) {
        pthread_rwlock_rdlock(&svc->seg_lock); /* reap frees into the allocators */
        pthread_rwlock_wrlock(&svc->fence_lock);
        record_acks(svc, id, req);
        reap_locked(svc, now);
        pthread_rwlock_unlock(&svc->fence_lock);
        pthread_rwlock_unlock(&svc->seg_lock);
    }
    if (!out || !cget(&svc->fence_pending))
        return;
    pthread_rwlock_rdlock(&svc->fence_lock);
    for (size_t i = 0; i < svc->nfrecs; i++) {
        const fence_rec *f = svc->frecs[i];
        if (owner_pending(f) && uuid_eq(f->owner, id) &&
            out->n_writer_fences < MC_MASTER_MAX_FENCES) {
            mc_master_writer_fence *w = &out->writer_fences[out->n_writer_fences++];
            w->writer = f->writer;
            w->min_epoch = f->epoch;
        }
        if (writer_pending(f) && uuid_eq(f->writer, id) &&
            out->n_target_fences < MC_MASTER_MAX_FENCES) {
            mc_master_target_fence *t = &out->target_fences[out->n_target_fences++];
            size_t n = strlen(f->endpoint); /* < MC_MASTER_NAME_MAX: checked at mount */
            memcpy(t->segment, f->endpoint, n + 1);
            t->min_epoch = f->epoch;
        }
    }
    pthread_rwlock_unlock(&svc->fence_lock);
}

void mc__fence_raise_base(mc_master_service *svc, uint64_t base)
{
    pthread_rwlock_wrlock(&svc->fence_lock);
    if (base > svc->fence_base)
        svc->fence_base = base;
    pthread_rwlock_unlock(&svc->fence_lock);
}

void mc__fence_destroy(mc_master_service *svc)
{
    mc_list *it;
    while ((it = mc_list_pop_front(&svc->quarantine)))
        free(MC_CONTAINER_OF(it, quar, link));
    for (size_t i = 0; i < svc->nfrecs; i++) {
        free(svc->frecs[i]->endpoint);
        free(svc->frecs[i]);
    }
    free(svc->frecs);
    free(svc->fidx);
    pthread_rwlock_destroy(&svc->fence_lock);
}
