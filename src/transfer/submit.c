/* submit.c: submit (requests cut into slices and queued on peers, or done at once on
 * the same-host path) and the sync / async / notify helpers built on batches. Must not
 * touch connections or descriptors directly (tcp_client.c, peers.c).
 * See include/mooncake/transfer_engine.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "transfer/internal.h"

/* ---- submit ---- */

/* A request of at least TE_STRIPE_MIN bytes is striped over the connections to its
 * peer (conns_per_peer; issue 17): it is cut into conns_per_peer pieces (rounded up to
 * 64 KiB, never smaller than TE_STRIPE_MIN / 2, never larger than the slice size), so a
 * single 1 MiB get or put moves over every connection at once instead of as one slice
 * on one connection. tcp_client.c spreads the pieces (least-loaded connection first,
 * one lane per I/O loop); each is a slice like any other (own header, reply, retry). */
#define TE_STRIPE_MIN (512u << 10)

static uint64_t slice_len_for(const mc_te *te, uint64_t len)
{
    uint64_t sl = te->slice_size;
    if (te->conns_per_peer < 2 || len < TE_STRIPE_MIN)
        return sl;
    uint64_t piece = (len + te->conns_per_peer - 1) / te->conns_per_peer;
    piece = (piece + 65535) & ~(uint64_t)65535;
    if (piece < TE_STRIPE_MIN / 2)
        piece = TE_STRIPE_MIN / 2;
    return piece < sl ? piece : sl;
}

/* inline_ms: mc_te_submit_inline's budget (ms), or -1 (every slice goes to the lanes). */
static int submit(mc_te *te, mc_te_batch_t id, const mc_te_request *reqs, size_t n,
                  te_peer *notify_peer, const char *nname, const void *nmsg, size_t nlen,
                  int64_t inline_ms)
{
    if (!te || !te->initialized || (n && !reqs))
        return MC_INVALID_PARAMS;
    te_batch *b = mc__te_batch_get(te, id);
    if (!b)
        return MC_INVALID_PARAMS;
    te_peer **peers = n ? mc_xcalloc(n, sizeof *peers) : NULL;
    uint64_t nslices = 0;
    for (size_t i = 0; i < n; i++) {
        const mc_te_request *r = &reqs[i];
        /* peers are never removed (a handle indexes them for the engine's life), so a
         * run of requests to one target looks it up once */
        peers[i] = i && r->target_id == reqs[i - 1].target_id
                       ? peers[i - 1]
                       : mc__te_peer_by_handle(te, r->target_id);
        if (!peers[i] || (r->opcode != MC_TE_OP_READ && r->opcode != MC_TE_OP_WRITE) ||
            (r->length && !r->source) || (notify_peer && peers[i] != notify_peer) ||
            (r->length && (uint64_t)(uintptr_t)r->source > UINT64_MAX - r->length)) {
            free(peers);
            return MC_INVALID_PARAMS;
        }
    }
    pthread_mutex_lock(&b->lock);
    if (b->n + n > b->cap || atomic_load(&b->notify_state) != TE_NOTIFY_NONE) {
        pthread_mutex_unlock(&b->lock);
        free(peers);
        return MC_INVALID_PARAMS;
    }
    size_t first = b->n;
    for (size_t i = 0; i < n; i++) {
        te_task *t = &b->tasks[first + i];
        /* no other thread sees t before b->n covers it (below, under b->lock) */
        atomic_init(&t->state, MC_TE_PENDING);
        atomic_init(&t->error, 0);
        atomic_init(&t->done_bytes, 0);
        atomic_init(&t->slices_left, 0);
        t->length = reqs[i].length;
        t->batch = b;
    }
    b->n += n;
    /* a finished batch submitted to again (pg_comm.c reuses one): its TCP bytes count
     * from here, so that mc_te_wait_batch's poll rule sees this round's only */
    if (__atomic_load_n(&b->terminal, __ATOMIC_RELAXED))
        atomic_store_explicit(&b->tcp_bytes, 0, memory_order_relaxed);
    __atomic_store_n(&b->terminal, false, __ATOMIC_RELAXED); /* read unlocked: batch.c */
    atomic_fetch_add(&b->tasks_left, n + 1); /* + 1: this submit, released at the end */
    if (notify_peer) {
        size_t nl = strlen(nname);
        size_t body = mc__te_notify_body_size(nl, nlen);
        te_slice *s = mc_xcalloc(1, sizeof *s);
        char *buf = mc_xmalloc(body);
        mc__te_notify_encode((uint8_t *)buf, nname, nl, nmsg, nlen);
        s->batch = b;
        s->peer = notify_peer;
        s->op = MC_TE_WOP_NOTIFY;
        s->local = buf;
        s->len = body;
        b->notify = s;
        atomic_store(&b->notify_state, TE_NOTIFY_WAITING);
    }
    pthread_mutex_unlock(&b->lock);

    /* Zero-length and same-host requests complete here; the rest is cut into slices. */
    uint64_t now = mc__te_now_ms(te);
    bool *tcp = n ? mc_xcalloc(n, sizeof *tcp) : NULL;
    nslices = 0;
    te_peer *fresh = NULL; /* the peer whose descriptor was last checked */
    bool shm = false;      /* fresh may take the same-host path (issue 17: a remote peer's
                              requests skip mc__te_shm_try's lock, once per request) */
    for (size_t i = 0; i < n; i++) {
        const mc_te_request *r = &reqs[i];
        te_task *t = &b->tasks[first + i];
        te_peer *p = peers[i];
        if (r->length == 0) {
            mc__te_task_finish(te, t, MC_TE_COMPLETED, 0);
            continue;
        }
        if (p != fresh) { /* looked at once per run of requests to one peer */
            pthread_mutex_lock(&p->lock);
            bool stale = p->stale || !p->have_desc;
            pthread_mutex_unlock(&p->lock);
            if (stale)
                mc__te_peer_refresh(te, p); /* on failure the slices fail and say so */
            fresh = p;
            shm = mc__te_shm_possible(te, p);
        }
        bool done = false;
        uint64_t epoch = r->opcode == MC_TE_OP_WRITE ? r->fence_epoch : 0;
        int sr = mc__te_send_fenced(p, epoch) ? -ESTALE : 0;
        if (sr == 0 && shm)
            sr = mc__te_shm_try(te, p, r->opcode, r->source, r->target_offset, r->length,
                                epoch, &done);
        if (sr == 1 && mc__te_now_ms(te) - p->last_refresh_ms > 1000 &&
            mc__te_peer_refresh(te, p) == MC_OK)
            /* maybe memory the peer shared after we cached its descriptor */
            sr = mc__te_shm_try(te, p, r->opcode, r->source, r->target_offset, r->length,
                                epoch, &done);
        if (sr == -ESTALE) { /* target fence (fence.c): refused before any byte moved */
            if (!done)
                atomic_fetch_add(&te->st.stale_sends, 1);
            mc__te_task_finish(te, t, MC_TE_FAILED, MC_TRANSFER_FAIL);
            continue;
        }
        if (done) {
            atomic_store(&t->done_bytes, r->length);
            mc__te_task_finish(te, t, MC_TE_COMPLETED, 0);
            continue;
        }
        tcp[i] = true;
        atomic_fetch_add_explicit(&b->tcp_bytes, r->length, memory_order_relaxed);
        uint64_t sl = slice_len_for(te, r->length);
        nslices += (r->length + sl - 1) / sl;
    }
    te_chunk *chunk = NULL;
    if (nslices) {
        /* not zeroed: every field of a slice but its wire headers is set below, and the
         * headers are written before they are read (hdr by dispatch, rhdr by the reply) */
        chunk = mc_xmalloc(sizeof *chunk + nslices * sizeof(te_slice));
        chunk->n = nslices;
        pthread_mutex_lock(&b->lock);
        chunk->next = b->chunks;
        b->chunks = chunk;
        pthread_mutex_unlock(&b->lock);
    }
    /* The slices of consecutive requests to one peer go to it as one list (one inbox
     * lock and at most one loop wakeup per run, not per request). With a budget for
     * inline reads, a submission whose TCP slices are one run that fits (tcp_inline.c)
     * is moved by this thread; runs to several peers keep moving in parallel on the
     * I/O threads. */
    size_t used = 0;
    te_slice *run = NULL, *run_last = NULL;
    bool one_run = true;
    for (size_t i = 0; i < n; i++) {
        if (!tcp[i])
            continue;
        const mc_te_request *r = &reqs[i];
        te_task *t = &b->tasks[first + i];
        te_peer *p = peers[i];
        uint64_t sl = slice_len_for(te, r->length);
        uint64_t k = (r->length + sl - 1) / sl;
        atomic_store(&t->slices_left, (uint32_t)k);
        uint64_t deadline = now + te->timeout_ms + r->length / 1000000;
        te_slice *head = &chunk->s[used];
        for (uint64_t j = 0; j < k; j++) {
            te_slice *s = &chunk->s[used++];
            uint64_t off = j * sl;
            s->lane = NULL;
            s->tries = 0;
            s->status = 0;
            s->id = 0;
            s->stale = false;
            s->task = t;
            s->batch = b;
            s->peer = p;
            s->op = r->opcode == MC_TE_OP_WRITE ? MC_TE_WOP_WRITE : MC_TE_WOP_READ;
            s->local = (char *)r->source + off;
            s->remote = r->target_offset + off;
            s->len = r->length - off < sl ? r->length - off : sl;
            s->epoch = s->op == MC_TE_WOP_WRITE ? r->fence_epoch : 0;
            s->deadline_ms = deadline;
            s->next = j + 1 < k ? s + 1 : NULL;
        }
        if (run && run->peer != p) {
            mc__te_peer_enqueue(run->peer, run, run_last);
            run = NULL;
            one_run = false;
        }
        if (run)
            run_last->next = head;
        else
            run = head;
        run_last = &chunk->s[used - 1];
    }
    bool move_here = run && one_run && inline_ms >= 0 && te->inline_reads && !notify_peer &&
                     mc__te_inline_fits(run, run_last);
    if (run && !move_here)
        mc__te_peer_enqueue(run->peer, run, run_last);
    free(tcp);
    free(peers);
    if (move_here) /* never past the slices' own deadline (the transfer timeout) */
        mc__te_inline_run(run->peer, run, run_last,
                          mc_now_ms() + ((uint64_t)inline_ms < te->timeout_ms
                                             ? (uint64_t)inline_ms
                                             : te->timeout_ms));
    mc__te_batch_submit_end(te, b);
    return MC_OK;
}

int mc_te_submit(mc_te *te, mc_te_batch_t batch, const mc_te_request *reqs, size_t n)
{
    return submit(te, batch, reqs, n, NULL, NULL, NULL, 0, -1);
}

int mc_te_submit_inline(mc_te *te, mc_te_batch_t batch, const mc_te_request *reqs, size_t n,
                        uint32_t budget_ms)
{
    return submit(te, batch, reqs, n, NULL, NULL, NULL, 0, budget_ms);
}

int mc_te_submit_with_notify(mc_te *te, mc_te_batch_t batch, const mc_te_request *reqs,
                             size_t n, mc_te_segment_t seg, const char *name, const void *msg,
                             size_t msg_len)
{
    if (!te || !name || strlen(name) > MC_TE_MAX_NOTIFY_NAME || msg_len > MC_TE_MAX_NOTIFY_MSG ||
        (msg_len && !msg) || (n && !reqs))
        return MC_INVALID_PARAMS;
    te_peer *p = mc__te_peer_by_handle(te, n ? reqs[0].target_id : seg);
    if (!p)
        return MC_INVALID_PARAMS;
    return submit(te, batch, reqs, n, p, name, msg, msg_len, -1);
}

/* ---- sync / async helpers ---- */

static int build_reqs(te_peer *p, int opcode, const uint64_t *local, const uint64_t *remote,
                      const uint64_t *lens, size_t n, mc_te_request **out)
{
    if (n && (!local || !remote || !lens))
        return MC_INVALID_PARAMS;
    mc_te_request *r = n ? mc_xcalloc(n, sizeof *r) : NULL;
    for (size_t i = 0; i < n; i++)
        r[i] = (mc_te_request){.opcode = opcode, .source = (void *)(uintptr_t)local[i],
                               .target_id = p->handle, .target_offset = remote[i],
                               .length = lens[i]};
    *out = r;
    return MC_OK;
}

static int run_once(mc_te *te, te_peer *p, const mc_te_request *reqs, size_t n,
                    const char *nname, const void *nmsg, size_t nlen)
{
    mc_te_batch_t b;
    int rc = mc_te_allocate_batch(te, n ? n : 1, &b);
    if (rc != MC_OK)
        return rc;
    rc = nname ? submit(te, b, reqs, n, p, nname, nmsg, nlen, -1) : mc_te_submit(te, b, reqs, n);
    if (rc == MC_OK) {
        mc_te_status st;
        mc_te_wait_batch(te, b, -1, &st);
        rc = st.state == MC_TE_COMPLETED ? MC_OK : (st.error ? st.error : MC_TRANSFER_FAIL);
    }
    mc_te_free_batch(te, b);
    return rc;
}

/* The peer `segment` (opened, its descriptor fetched when needed) and the requests of a
 * transfer_sync/async call on it (*reqs malloc'd: the caller frees). A status code. */
static int open_reqs(mc_te *te, const char *segment, int opcode, const uint64_t *local,
                     const uint64_t *remote, const uint64_t *lens, size_t n, te_peer **p,
                     mc_te_request **reqs)
{
    int rc = mc__te_peer_open(te, segment, false, p);
    return rc != MC_OK ? rc : build_reqs(*p, opcode, local, remote, lens, n, reqs);
}

int mc_te_transfer_sync(mc_te *te, const char *segment, int opcode, const uint64_t *local,
                        const uint64_t *remote, const uint64_t *lens, size_t n,
                        const char *notify_name, const void *notify_msg, size_t notify_len)
{
    if (!te || (opcode != MC_TE_OP_READ && opcode != MC_TE_OP_WRITE))
        return MC_INVALID_PARAMS;
    if (notify_name && (strlen(notify_name) > MC_TE_MAX_NOTIFY_NAME ||
                        notify_len > MC_TE_MAX_NOTIFY_MSG || (notify_len && !notify_msg)))
        return MC_INVALID_PARAMS;
    if (n == 0 && !notify_name)
        return mc__te_valid_segment_name(segment) ? MC_OK : MC_INVALID_PARAMS;
    te_peer *p;
    mc_te_request *reqs;
    int rc = open_reqs(te, segment, opcode, local, remote, lens, n, &p, &reqs);
    if (rc != MC_OK)
        return rc;
    rc = run_once(te, p, reqs, n, notify_name, notify_msg, notify_len);
    if (rc == MC_TRANSFER_FAIL) {
        /* the peer may have restarted: refresh its descriptor and try once more */
        pthread_mutex_lock(&p->lock);
        bool stale = p->stale;
        pthread_mutex_unlock(&p->lock);
        if (stale && mc__te_peer_refresh(te, p) == MC_OK)
            rc = run_once(te, p, reqs, n, notify_name, notify_msg, notify_len);
    }
    free(reqs);
    return rc;
}

int mc_te_transfer_async(mc_te *te, const char *segment, int opcode, const uint64_t *local,
                         const uint64_t *remote, const uint64_t *lens, size_t n,
                         mc_te_batch_t *out)
{
    if (!te || !out || n == 0 || (opcode != MC_TE_OP_READ && opcode != MC_TE_OP_WRITE))
        return MC_INVALID_PARAMS;
    te_peer *p;
    mc_te_request *reqs;
    int rc = open_reqs(te, segment, opcode, local, remote, lens, n, &p, &reqs);
    if (rc != MC_OK)
        return rc;
    mc_te_batch_t b;
    rc = mc_te_allocate_batch(te, n, &b);
    if (rc == MC_OK) {
        rc = mc_te_submit(te, b, reqs, n);
        if (rc != MC_OK)
            mc_te_free_batch(te, b);
        else
            *out = b;
    }
    free(reqs);
    return rc;
}

int mc_te_send_notify(mc_te *te, const char *segment, const char *name, const void *msg,
                      size_t msg_len)
{
    if (!name)
        return MC_INVALID_PARAMS;
    return mc_te_transfer_sync(te, segment, MC_TE_OP_WRITE, NULL, NULL, NULL, 0, name, msg,
                               msg_len);
}
