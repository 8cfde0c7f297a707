/* fence.c: fence epochs (docs/consistency.md, "The mechanism"): the owner's table of
 * writer id -> minimum accepted epoch, the writer's table of segment name -> minimum
 * epoch it may still write with, and this engine's own writer id (sent in HELLO).
 *
 * Owner side: every server connection caches its writer's minimum together with the
 * table generation it read (te_sconn.fence_gen / fence_min); a WRITE header with a
 * non-zero epoch costs one acquire load of te->fence.gen and two compares while the
 * table is unchanged (mc__te_write_fenced, internal.h). mc_te_fence_writer bumps the
 * generation under the lock and then runs a barrier task on every I/O loop, which turns
 * a stale WRITE whose payload is already being received into a drain (reply -ESTALE):
 * once it returns, no byte of a refused write reaches memory, whether its header was
 * parsed before the call or is still queued in the kernel.
 *
 * Writer side: the minimum is kept by name (so a fence on a segment not opened yet is
 * remembered) and copied into the peer (te_peer.fence_min) under the peer's shm_rw
 * taken for writing, which waits for every same-host copy in progress (they hold it
 * for reading and check the minimum under it). TCP WRITEs check it when they are
 * submitted, dispatched and just before their header is first handed to the socket. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"
#include "transfer/internal.h"

#define TE_MAX_FENCES 65536 /* entries per table */

typedef struct te_wfence {
    uint64_t hi, lo, min;
} te_wfence;

typedef struct te_tfence {
    char *name;
    uint64_t min;
} te_tfence;

void mc__te_fence_init(mc_te *te)
{
    pthread_mutex_init(&te->fence.lock, NULL);
    atomic_init(&te->fence.gen, 1); /* connections start at 0: their first check looks */
}

void mc__te_fence_free(mc_te *te)
{
    free(te->fence.writers);
    for (size_t i = 0; i < te->fence.n_targets; i++)
        free(te->fence.targets[i].name);
    free(te->fence.targets);
    pthread_mutex_destroy(&te->fence.lock);
}

/* ---- writer id ---- */

MC_API int mc_te_set_writer_id(mc_te *te, uint64_t hi, uint64_t lo)
{
    if (!te)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&te->fence.lock);
    te->fence.writer_hi = hi;
    te->fence.writer_lo = lo;
    pthread_mutex_unlock(&te->fence.lock);
    return MC_OK;
}

void mc__te_writer_id(mc_te *te, uint64_t *hi, uint64_t *lo)
{
    pthread_mutex_lock(&te->fence.lock);
    *hi = te->fence.writer_hi;
    *lo = te->fence.writer_lo;
    pthread_mutex_unlock(&te->fence.lock);
}

/* ---- owner table ---- */

/* Index of (hi, lo) in the sorted table, or where it would go (*found false). lock. */
static size_t wfind(mc_te *te, uint64_t hi, uint64_t lo, bool *found)
{
    size_t a = 0, b = te->fence.n_writers;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        const te_wfence *e = &te->fence.writers[m];
        if (e->hi < hi || (e->hi == hi && e->lo < lo))
            a = m + 1;
        else
            b = m;
    }
    *found = a < te->fence.n_writers && te->fence.writers[a].hi == hi &&
             te->fence.writers[a].lo == lo;
    return a;
}

void mc__te_fence_refresh(mc_te *te, te_sconn *c)
{
    pthread_mutex_lock(&te->fence.lock);
    bool found;
    size_t i = wfind(te, c->writer_hi, c->writer_lo, &found);
    c->fence_min = found ? te->fence.writers[i].min : 0;
    c->fence_gen = atomic_load_explicit(&te->fence.gen, memory_order_relaxed);
    pthread_mutex_unlock(&te->fence.lock);
}

typedef struct fence_barrier {
    pthread_mutex_t m;
    pthread_cond_t cv;
    unsigned left;
} fence_barrier;

typedef struct barrier_arg {
    fence_barrier *b;
    te_io *io;
} barrier_arg;

static void barrier_done(fence_barrier *b)
{
    pthread_mutex_lock(&b->m);
    if (--b->left == 0)
        pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->m);
}

static void barrier_task(void *arg)
{
    barrier_arg *a = arg;
    mc__te_sconn_fence_io(a->io);
    barrier_done(a->b);
}

/* Runs mc__te_sconn_fence_io on every I/O loop and waits until each has. */
static void fence_loops(mc_te *te)
{
    if (!te->initialized)
        return; /* no loop runs, nothing is being served */
    fence_barrier b = {.left = te->nio};
    pthread_mutex_init(&b.m, NULL);
    pthread_cond_init(&b.cv, NULL);
    barrier_arg args[TE_MAX_IO];
    for (unsigned i = 0; i < te->nio; i++) {
        args[i] = (barrier_arg){.b = &b, .io = &te->io[i]};
        if (mc_loop_in_thread(te->io[i].loop))
            barrier_task(&args[i]);
        else if (mc_loop_post(te->io[i].loop, barrier_task, &args[i]) < 0)
            barrier_done(&b); /* stopped: it serves nothing any more */
    }
    pthread_mutex_lock(&b.m);
    while (b.left)
        pthread_cond_wait(&b.cv, &b.m);
    pthread_mutex_unlock(&b.m);
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.m);
}

MC_API int mc_te_fence_writer(mc_te *te, uint64_t hi, uint64_t lo, uint64_t min_epoch)
{
    if (!te || (hi == 0 && lo == 0))
        return MC_INVALID_PARAMS;
    if (min_epoch == 0)
        return MC_OK; /* every epoch is >= 0: nothing to refuse */
    pthread_mutex_lock(&te->fence.lock);
    bool found;
    size_t i = wfind(te, hi, lo, &found);
    if (!found) {
        if (te->fence.n_writers >= TE_MAX_FENCES) {
            pthread_mutex_unlock(&te->fence.lock);
            mc_log(MC_LOG_ERROR, TE_TAG, "fence table full (%d writers): cannot fence %016llx%016llx",
                   TE_MAX_FENCES, (unsigned long long)hi, (unsigned long long)lo);
            return MC_BUFFER_OVERFLOW;
        }
        if (te->fence.n_writers == te->fence.cap_writers) {
            te->fence.cap_writers = te->fence.cap_writers ? te->fence.cap_writers * 2 : 16;
            te->fence.writers = mc_xrealloc(te->fence.writers,
                                            te->fence.cap_writers * sizeof *te->fence.writers);
        }
        memmove(&te->fence.writers[i + 1], &te->fence.writers[i],
                (te->fence.n_writers - i) * sizeof *te->fence.writers);
        te->fence.writers[i] = (te_wfence){.hi = hi, .lo = lo, .min = 0};
        te->fence.n_writers++;
    }
    if (min_epoch > te->fence.writers[i].min) {
        te->fence.writers[i].min = min_epoch;
        atomic_fetch_add_explicit(&te->fence.gen, 1, memory_order_seq_cst);
    }
    pthread_mutex_unlock(&te->fence.lock);
    /* Also when nothing changed: a concurrent call that raised it may still be running
     * its barrier, and this call must not return before the minimum is applied. */
    fence_loops(te);
    return MC_OK;
}

MC_API int mc_te_get_writer_fence(mc_te *te, uint64_t hi, uint64_t lo, uint64_t *min_epoch)
{
    if (!te || !min_epoch)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&te->fence.lock);
    bool found;
    size_t i = wfind(te, hi, lo, &found);
    *min_epoch = found ? te->fence.writers[i].min : 0;
    pthread_mutex_unlock(&te->fence.lock);
    return MC_OK;
}

/* ---- target table ---- */

static te_tfence *tfind(mc_te *te, const char *name)
{
    for (size_t i = 0; i < te->fence.n_targets; i++)
        if (strcmp(te->fence.targets[i].name, name) == 0)
            return &te->fence.targets[i];
    return NULL;
}

uint64_t mc__te_target_min(mc_te *te, const char *name)
{
    pthread_mutex_lock(&te->fence.lock);
    te_tfence *t = tfind(te, name);
    uint64_t v = t ? t->min : 0;
    pthread_mutex_unlock(&te->fence.lock);
    return v;
}

static bool valid_segment_name(const char *name)
{
    return name && *name && strlen(name) <= MC_SEGMENT_MAX_NAME;
}

MC_API int mc_te_fence_target(mc_te *te, const char *segment_name, uint64_t min_epoch)
{
    if (!te || !valid_segment_name(segment_name))
        return MC_INVALID_PARAMS;
    if (min_epoch == 0)
        return MC_OK;
    pthread_mutex_lock(&te->fence.lock);
    te_tfence *t = tfind(te, segment_name);
    if (!t) {
        if (te->fence.n_targets >= TE_MAX_FENCES) {
            pthread_mutex_unlock(&te->fence.lock);
            mc_log(MC_LOG_ERROR, TE_TAG, "target fence table full (%d segments): cannot fence %s",
                   TE_MAX_FENCES, segment_name);
            return MC_BUFFER_OVERFLOW;
        }
        if (te->fence.n_targets == te->fence.cap_targets) {
            te->fence.cap_targets = te->fence.cap_targets ? te->fence.cap_targets * 2 : 16;
            te->fence.targets = mc_xrealloc(te->fence.targets,
                                            te->fence.cap_targets * sizeof *te->fence.targets);
        }
        t = &te->fence.targets[te->fence.n_targets++];
        *t = (te_tfence){.name = mc_xstrdup(segment_name), .min = 0};
    }
    if (min_epoch > t->min)
        t->min = min_epoch;
    uint64_t min = t->min;
    pthread_mutex_unlock(&te->fence.lock);

    /* A peer created from here on reads the table (peer_get, under seg_lock); one that
     * exists already gets the minimum here. */
    te_peer *p = NULL;
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < te->n_peers && !p; i++)
        if (strcmp(te->peers[i]->name, segment_name) == 0)
            p = te->peers[i];
    pthread_mutex_unlock(&te->seg_lock);
    if (p) {
        /* exclusive: waits for the same-host copies in progress (they hold it shared) */
        pthread_rwlock_wrlock(&p->shm_rw);
        if (min > atomic_load_explicit(&p->fence_min, memory_order_relaxed))
            atomic_store_explicit(&p->fence_min, min, memory_order_seq_cst);
        pthread_rwlock_unlock(&p->shm_rw);
    }
    return MC_OK;
}

MC_API int mc_te_get_target_fence(mc_te *te, const char *segment_name, uint64_t *min_epoch)
{
    if (!te || !valid_segment_name(segment_name) || !min_epoch)
        return MC_INVALID_PARAMS;
    *min_epoch = mc__te_target_min(te, segment_name);
    return MC_OK;
}
