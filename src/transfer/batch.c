/* batch.c: batch ids, task and batch state, completion and waiting.
 * Batch ids are (generation << 32 | slot + 1): a stale or forged id is refused after a
 * table lookup, never dereferenced. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "transfer/internal.h"

/* The batch of id in the table, or NULL; caller holds te->batch_lock. */
static te_batch *lookup_locked(mc_te *te, uint64_t id)
{
    uint64_t slot = id & 0xffffffffu;
    if (slot >= 1 && slot <= te->n_bslots && te->bslots[slot - 1] &&
        te->bslots[slot - 1]->id == id)
        return te->bslots[slot - 1];
    return NULL;
}

te_batch *mc__te_batch_get(mc_te *te, uint64_t id)
{
    pthread_mutex_lock(&te->batch_lock);
    te_batch *b = lookup_locked(te, id);
    pthread_mutex_unlock(&te->batch_lock);
    return b;
}

int mc_te_allocate_batch(mc_te *te, size_t batch_size, mc_te_batch_t *out)
{
    if (!te || !out || batch_size == 0 || batch_size > MC_TE_MAX_BATCH)
        return MC_INVALID_PARAMS;
    if (!te->initialized)
        return MC_INVALID_PARAMS;
    te_batch *b = mc_xcalloc(1, sizeof *b);
    /* not zeroed (issue 17: a 128-task batch's memset was ~40 instructions per request):
     * submit sets every field of a task before it counts in b->n, and nothing reads a
     * task at or past b->n */
    b->tasks = mc_xmalloc(batch_size * sizeof *b->tasks);
    b->cap = batch_size;
    b->te = te;
    __atomic_store_n(&b->terminal, true, __ATOMIC_RELEASE); /* read unlocked: batch_done */
    pthread_mutex_init(&b->lock, NULL);
    mc_cond_init_monotonic(&b->cond); /* waits use mc_deadline_ms */

    pthread_mutex_lock(&te->batch_lock);
    size_t slot;
    if (te->n_bfree) {
        slot = te->bfree[--te->n_bfree];
    } else {
        if (te->n_bslots >= 0xfffffff0u) {
            pthread_mutex_unlock(&te->batch_lock);
            pthread_mutex_destroy(&b->lock);
            pthread_cond_destroy(&b->cond);
            free(b->tasks);
            free(b);
            return MC_NO_AVAILABLE_HANDLE;
        }
        slot = te->n_bslots++;
        te->bslots = mc_xrealloc(te->bslots, te->n_bslots * sizeof *te->bslots);
        te->bgen = mc_xrealloc(te->bgen, te->n_bslots * sizeof *te->bgen);
        te->bfree = mc_xrealloc(te->bfree, te->n_bslots * sizeof *te->bfree);
        te->bgen[slot] = 0;
    }
    if (++te->bgen[slot] == 0)
        te->bgen[slot] = 1;
    b->id = ((uint64_t)te->bgen[slot] << 32) | (uint64_t)(slot + 1);
    te->bslots[slot] = b;
    pthread_mutex_unlock(&te->batch_lock);
    *out = b->id;
    return MC_OK;
}

static void batch_free(te_batch *b)
{
    te_chunk *c = b->chunks;
    while (c) {
        te_chunk *next = c->next;
        free(c);
        c = next;
    }
    if (b->notify) {
        free(b->notify->local);
        free(b->notify);
    }
    while (b->sinks) {
        te_sink *next = b->sinks->next;
        free(b->sinks);
        b->sinks = next;
    }
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    free(b->tasks);
    free(b);
}

int mc_te_free_batch(mc_te *te, mc_te_batch_t id)
{
    if (!te)
        return MC_INVALID_PARAMS;
    uint64_t slot = id & 0xffffffffu;
    pthread_mutex_lock(&te->batch_lock);
    te_batch *b = lookup_locked(te, id);
    if (!b) {
        pthread_mutex_unlock(&te->batch_lock);
        return MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&b->lock);
    bool busy = !b->terminal || b->waiters; /* another thread still waits on it */
    pthread_mutex_unlock(&b->lock);
    if (busy) {
        pthread_mutex_unlock(&te->batch_lock);
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    te->bslots[slot - 1] = NULL;
    te->bfree[te->n_bfree++] = (uint32_t)(slot - 1);
    pthread_mutex_unlock(&te->batch_lock);
    batch_free(b);
    return MC_OK;
}

te_batch *mc__te_batch_detach(mc_te *te, uint64_t id)
{
    uint64_t slot = id & 0xffffffffu;
    pthread_mutex_lock(&te->batch_lock);
    te_batch *b = lookup_locked(te, id);
    if (b) {
        te->bslots[slot - 1] = NULL;
        te->bfree[te->n_bfree++] = (uint32_t)(slot - 1);
    }
    pthread_mutex_unlock(&te->batch_lock);
    return b;
}

void mc__te_batch_abandon(te_batch *b)
{
    pthread_mutex_lock(&b->lock);
    bool now = b->terminal && !b->waiters;
    if (!now)
        b->orphan = true; /* freed when it turns terminal, or by its last waiter */
    pthread_mutex_unlock(&b->lock);
    if (now)
        batch_free(b);
}

/* Marks b terminal. Always the last thing its caller does with b: an orphan (cancel.c)
 * is freed here. */
static void batch_terminal(te_batch *b)
{
    pthread_mutex_lock(&b->lock);
    __atomic_store_n(&b->terminal, true, __ATOMIC_RELEASE); /* read unlocked: batch_done */
    bool orphan = b->orphan && !b->waiters; /* else its last waiter frees it */
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    if (orphan)
        batch_free(b);
}

/* Every task is terminal (and no submit is in progress). */
static void all_tasks_done(mc_te *te, te_batch *b)
{
    int expect = TE_NOTIFY_WAITING;
    if (atomic_compare_exchange_strong(&b->notify_state, &expect, TE_NOTIFY_SENT)) {
        bool failed = false;
        pthread_mutex_lock(&b->lock);
        size_t n = b->n;
        pthread_mutex_unlock(&b->lock);
        for (size_t i = 0; i < n && !failed; i++)
            failed = atomic_load(&b->tasks[i].state) != MC_TE_COMPLETED;
        if (failed) {
            atomic_store(&b->notify_state, TE_NOTIFY_FAILED);
            batch_terminal(b);
            return;
        }
        te_slice *s = b->notify;
        s->deadline_ms = mc__te_now_ms(te) + te->timeout_ms;
        s->tries = 0;
        mc__te_peer_enqueue(s->peer, s, s);
        return;
    }
    batch_terminal(b);
}

static void tasks_left_dec(mc_te *te, te_batch *b)
{
    if (atomic_fetch_sub(&b->tasks_left, 1) == 1)
        all_tasks_done(te, b);
}

void mc__te_batch_submit_end(mc_te *te, te_batch *b)
{
    tasks_left_dec(te, b);
}

void mc__te_task_finish(mc_te *te, te_task *t, int state, int err)
{
    if (state != MC_TE_COMPLETED) {
        int zero = 0;
        atomic_compare_exchange_strong(&t->error, &zero, err ? err : MC_TRANSFER_FAIL);
        atomic_fetch_add(&te->st.failed, 1);
    } else {
        atomic_fetch_add(&te->st.done, 1);
    }
    atomic_store(&t->state, state);
    tasks_left_dec(te, t->batch);
}

static int slice_err_status(int err)
{
    switch (err) {
    case -EFAULT:
    case -EINVAL:
        return MC_INVALID_PARAMS;
    case -ETIMEDOUT:
        return MC_RPC_TIMEOUT;
    default:
        return MC_TRANSFER_FAIL;
    }
}

void mc__te_task_slice_done(mc_te *te, te_slice *s, int status)
{
    if (!s->task) { /* the batch's notification */
        te_batch *b = s->batch;
        atomic_store(&b->notify_state, status == 0 ? TE_NOTIFY_DONE : TE_NOTIFY_FAILED);
        if (status)
            s->status = status;
        batch_terminal(b);
        return;
    }
    te_task *t = s->task;
    if (status == 0) {
        atomic_fetch_add(&t->done_bytes, s->len);
    } else {
        int zero = 0;
        atomic_compare_exchange_strong(&t->error, &zero, slice_err_status(status));
    }
    if (atomic_fetch_sub(&t->slices_left, 1) == 1) {
        int err = atomic_load(&t->error);
        if (!err)
            mc__te_task_finish(te, t, MC_TE_COMPLETED, 0);
        else
            mc__te_task_finish(te, t, err == MC_RPC_TIMEOUT ? MC_TE_TIMEOUT : MC_TE_FAILED, err);
    }
}

int mc_te_get_transfer_status(mc_te *te, mc_te_batch_t id, size_t task_id, mc_te_status *out)
{
    if (!te || !out)
        return MC_INVALID_PARAMS;
    memset(out, 0, sizeof *out);
    out->state = MC_TE_INVALID;
    te_batch *b = mc__te_batch_get(te, id);
    if (!b)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&b->lock);
    size_t n = b->n;
    pthread_mutex_unlock(&b->lock);
    if (task_id >= n)
        return MC_INVALID_PARAMS;
    te_task *t = &b->tasks[task_id];
    out->state = atomic_load(&t->state);
    out->transferred_bytes = atomic_load(&t->done_bytes);
    out->error = out->state == MC_TE_COMPLETED ? MC_OK : atomic_load(&t->error);
    return MC_OK;
}

static void batch_status_locked(te_batch *b, mc_te_status *out)
{
    memset(out, 0, sizeof *out);
    uint64_t bytes = 0;
    mc_te_state st = MC_TE_COMPLETED;
    int err = MC_OK;
    for (size_t i = 0; i < b->n; i++) {
        te_task *t = &b->tasks[i];
        bytes += atomic_load(&t->done_bytes);
        int s = atomic_load(&t->state);
        if (s != MC_TE_COMPLETED && st == MC_TE_COMPLETED) {
            st = (mc_te_state)s;
            err = atomic_load(&t->error);
        }
    }
    if (!b->terminal) {
        st = MC_TE_PENDING;
        err = MC_OK;
    } else if (st == MC_TE_COMPLETED && atomic_load(&b->notify_state) == TE_NOTIFY_FAILED) {
        bool any_failed = false;
        for (size_t i = 0; i < b->n; i++)
            any_failed |= atomic_load(&b->tasks[i].state) != MC_TE_COMPLETED;
        if (!any_failed) {
            st = MC_TE_FAILED;
            err = b->notify && b->notify->status == -ETIMEDOUT ? MC_RPC_TIMEOUT
                                                               : MC_TRANSFER_FAIL;
        }
    }
    out->state = st;
    out->error = err;
    out->transferred_bytes = bytes;
}

int mc_te_get_batch_status(mc_te *te, mc_te_batch_t id, mc_te_status *out)
{
    if (!te || !out)
        return MC_INVALID_PARAMS;
    te_batch *b = mc__te_batch_get(te, id);
    if (!b) {
        memset(out, 0, sizeof *out);
        out->state = MC_TE_INVALID;
        return MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&b->lock);
    batch_status_locked(b, out);
    pthread_mutex_unlock(&b->lock);
    return MC_OK;
}

/* The batch of id with one more waiter (counted under the table lock, so that
 * mc_te_free_batch, which looks it up under that lock, sees the waiter), or NULL. */
static te_batch *batch_get_waiting(mc_te *te, uint64_t id)
{
    pthread_mutex_lock(&te->batch_lock);
    te_batch *b = lookup_locked(te, id);
    if (b) {
        pthread_mutex_lock(&b->lock);
        b->waiters++;
        pthread_mutex_unlock(&b->lock);
    }
    pthread_mutex_unlock(&te->batch_lock);
    return b;
}

/* Whether b is terminal, read without its lock (the polling of mc_te_wait_batch). */
static bool batch_done(void *arg)
{
    te_batch *b = arg;
    return __atomic_load_n(&b->terminal, __ATOMIC_ACQUIRE);
}

int mc_te_wait_batch(mc_te *te, mc_te_batch_t id, int64_t timeout_ms, mc_te_status *out)
{
    if (!te)
        return MC_INVALID_PARAMS;
    te_batch *b = batch_get_waiting(te, id);
    if (!b)
        return MC_INVALID_PARAMS;
    struct timespec ts;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
    }
    int rc = MC_OK;
    /* a short poll before blocking: a small batch often ends within it (common/spin.h);
     * not for one that moves many bytes over TCP (TE_POLL_MAX_TCP_BYTES) */
    static _Thread_local mc_spin_site site;
    bool poll = atomic_load_explicit(&b->tcp_bytes, memory_order_relaxed) <
                TE_POLL_MAX_TCP_BYTES;
    /* blocked: it polled and now blocks (the site's window learns from that wait only) */
    bool blocked = timeout_ms != 0 && poll && !mc_spin_until(&site, batch_done, b);
    pthread_mutex_lock(&b->lock);
    while (!b->terminal) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&b->cond, &b->lock);
        } else if (pthread_cond_timedwait(&b->cond, &b->lock, &ts) == ETIMEDOUT) {
            if (!b->terminal)
                rc = MC_RPC_TIMEOUT;
            break;
        }
    }
    if (blocked)
        mc_spin_woke(&site, b->terminal);
    mc_te_status tmp;
    batch_status_locked(b, out ? out : &tmp);
    /* the last waiter of a batch cancelled meanwhile frees it (mc__te_batch_abandon) */
    bool last = --b->waiters == 0 && b->orphan && b->terminal;
    pthread_mutex_unlock(&b->lock);
    if (last)
        batch_free(b);
    return rc;
}

void mc__te_batches_free_all(mc_te *te)
{
    for (size_t i = 0; i < te->n_bslots; i++)
        if (te->bslots[i])
            batch_free(te->bslots[i]);
    free(te->bslots);
    free(te->bgen);
    free(te->bfree);
    te->bslots = NULL;
    te->bgen = NULL;
    te->bfree = NULL;
    te->n_bslots = te->n_bfree = 0;
}
