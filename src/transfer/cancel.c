/* cancel.c: mc_te_cancel_batch: giving a batch up while its requests are in flight.
 *
 * A slice's local memory (READ destination, WRITE source) is used only by the loop of
 * its lane (mc__te_slice_io; a slice never moves to another lane): replies are
 * received into `s->local + offset` and payloads sent from it,
 * the iovecs rebuilt on every call (tcp_client.c). So the cancel runs one step on each
 * loop that carries slices of the batch, and that step points every slice of a task
 * still in flight at engine-owned memory: READs at one scratch area per loop (the bytes
 * are thrown away, so they may share it), WRITEs at a copy of their payload taken then.
 * When every step has run, no loop can touch the caller's memory any more, and the call
 * returns. The batch leaves the id table at once; the slices stay on their connections
 * (wire order is kept: nothing is pulled out of a stream) and end as they would have
 * (reply, connection failure, transfer timeout); the last one frees the batch
 * (mc__te_batch_abandon, batch.c). Same-host copies run inside submit, so they are
 * over before a cancel can start. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "mooncake/status.h"
#include "transfer/internal.h"

/* The caller waits for its steps here. */
typedef struct cancel_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned left;
} cancel_wait;

typedef struct cancel_step {
    te_batch *b;
    te_io *io;
    cancel_wait *w;
} cancel_step;

static void sink_keep(te_batch *b, te_sink *k)
{
    pthread_mutex_lock(&b->lock);
    k->next = b->sinks;
    b->sinks = k;
    pthread_mutex_unlock(&b->lock);
}

static bool task_live(const te_slice *s)
{
    int st = atomic_load(&s->task->state);
    return st == MC_TE_PENDING || st == MC_TE_WAITING;
}

/* Runs on io's loop thread (or after that loop stopped: then nothing reads or writes
 * slices any more and the step changes nothing that matters). */
static void cancel_step_run(void *arg)
{
    cancel_step *st = arg;
    te_batch *b = st->b;
    pthread_mutex_lock(&b->lock);
    te_chunk *chunks = b->chunks; /* complete: no submit runs concurrently with a cancel */
    pthread_mutex_unlock(&b->lock);
    uint64_t max_read = 0;
    for (te_chunk *c = chunks; c; c = c->next)
        for (size_t i = 0; i < c->n; i++) {
            te_slice *s = &c->s[i];
            if (s->task && mc__te_slice_io(s) == st->io && task_live(s) &&
                s->op == MC_TE_WOP_READ && s->len > max_read)
                max_read = s->len;
        }
    char *scratch = NULL;
    if (max_read) {
        te_sink *k = mc_xmalloc(sizeof *k + max_read);
        sink_keep(b, k);
        scratch = k->data;
    }
    for (te_chunk *c = chunks; c; c = c->next)
        for (size_t i = 0; i < c->n; i++) {
            te_slice *s = &c->s[i];
            if (!s->task || mc__te_slice_io(s) != st->io || !task_live(s))
                continue;
            if (s->op == MC_TE_WOP_READ) {
                s->local = scratch;
            } else if (s->op == MC_TE_WOP_WRITE) {
                te_sink *k = mc_xmalloc(sizeof *k + s->len);
                memcpy(k->data, s->local, s->len);
                sink_keep(b, k);
                s->local = k->data;
            }
        }
    pthread_mutex_lock(&st->w->mu);
    if (--st->w->left == 0)
        pthread_cond_broadcast(&st->w->cv);
    pthread_mutex_unlock(&st->w->mu);
    free(st);
}

int mc_te_cancel_batch(mc_te *te, mc_te_batch_t id)
{
    if (!te)
        return MC_INVALID_PARAMS;
    te_batch *b = mc__te_batch_detach(te, id);
    if (!b)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&b->lock);
    bool terminal = b->terminal;
    te_chunk *chunks = b->chunks;
    pthread_mutex_unlock(&b->lock);
    if (!terminal) {
        /* The loops that carry its slices (a queued slice's lane is immutable). */
        te_io *ios[TE_MAX_IO];
        unsigned nio = 0;
        for (te_chunk *c = chunks; c; c = c->next)
            for (size_t i = 0; i < c->n; i++) {
                te_io *io = c->s[i].peer ? mc__te_slice_io(&c->s[i]) : NULL;
                bool seen = !io;
                for (unsigned j = 0; j < nio && !seen; j++)
                    seen = ios[j] == io;
                if (!seen && nio < TE_MAX_IO)
                    ios[nio++] = io;
            }
        cancel_wait w = {.left = nio};
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        for (unsigned j = 0; j < nio; j++) {
            cancel_step *st = mc_xmalloc(sizeof *st);
            *st = (cancel_step){b, ios[j], &w};
            if (mc_loop_in_thread(ios[j]->loop) || mc_loop_post(ios[j]->loop, cancel_step_run,
                                                                st) < 0)
                /* our own loop, or a stopped one (it reads and writes nothing any more):
                 * run the step here */
                cancel_step_run(st);
        }
        pthread_mutex_lock(&w.mu);
        while (w.left)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
    }
    mc__te_batch_abandon(b);
    return MC_OK;
}
