/* xfer.c: transfer sets: the engine requests of one step of a store call, submitted in
 * engine batches all at once and then waited for, with failures mapped back to the items
 * they belong to; plus where a replica lives relative to us (own segment, same host).
 * Owns mc__xfer; knows nothing of the write / read protocols (write.c, read.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

typedef mc__xfer xfer;
typedef mc__ep_cache ep_cache;

void mc__xfer_init(xfer *x, mc_store *s)
{
    memset(x, 0, sizeof *x);
    x->s = s;
}

void mc__xfer_reset(xfer *x)
{
    x->n = 0;
    x->until_ms = 0;
}

void mc__xfer_deinit(xfer *x)
{
    free(x->reqs);
    free(x->owner);
    free(x->eps);
}

int mc__xfer_seg(xfer *x, const char *ep, mc_te_segment_t *h)
{
    for (size_t i = 0; i < x->neps; i++)
        if (!strcmp(x->eps[i].name, ep)) {
            *h = x->eps[i].h;
            return x->eps[i].rc;
        }
    if (x->neps == x->capeps) {
        x->capeps = x->capeps ? x->capeps * 2 : 8;
        x->eps = mc_xrealloc(x->eps, x->capeps * sizeof *x->eps);
    }
    /* A failed open is cached too: that segment is not retried within this call. */
    ep_cache *e = &x->eps[x->neps++];
    snprintf(e->name, sizeof e->name, "%s", ep);
    e->h = -1;
    e->rc = mc_te_open_segment(x->s->te, ep, &e->h);
    *h = e->h;
    return e->rc;
}

/* Queues one request; epoch goes on WRITEs only (0 = unfenced). */
static void add_req(xfer *x, int op, void *local, mc_te_segment_t h, uint64_t remote,
                    uint64_t len, size_t owner, uint64_t epoch)
{
    if (len == 0)
        return;
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 16;
        x->reqs = mc_xrealloc(x->reqs, x->cap * sizeof *x->reqs);
        x->owner = mc_xrealloc(x->owner, x->cap * sizeof *x->owner);
    }
    x->reqs[x->n] = (mc_te_request){.opcode = op,
                                    .source = local,
                                    .target_id = h,
                                    .target_offset = remote,
                                    .length = len,
                                    .fence_epoch = op == MC_TE_OP_WRITE ? epoch : 0};
    x->owner[x->n++] = owner;
}

void mc__xfer_add(xfer *x, int op, void *local, mc_te_segment_t h, uint64_t remote,
                  uint64_t len, size_t owner)
{
    add_req(x, op, local, h, remote, len, owner, 0);
}

void mc__xfer_add_write(xfer *x, void *local, mc_te_segment_t h, uint64_t remote, uint64_t len,
                        size_t owner, uint64_t epoch)
{
    add_req(x, MC_TE_OP_WRITE, local, h, remote, len, owner, epoch);
}

bool mc__xfer_all_local(xfer *x)
{
    mc_te_segment_t last = -1;
    for (size_t i = 0; i < x->n; i++) {
        if (x->reqs[i].target_id == last)
            continue;
        last = x->reqs[i].target_id;
        if (!mc_te_segment_is_local(x->s->te, last))
            return false;
    }
    return true;
}

static int te_code(int err)
{
    return err == MC_RPC_TIMEOUT ? MC_RPC_TIMEOUT : MC_TRANSFER_FAIL;
}

/* Waits until batch b is terminal (the engine's transfer timeout always ends it). */
static void wait_terminal(mc_te *te, mc_te_batch_t b, mc_te_status *st)
{
    for (;;) {
        int rc = mc_te_wait_batch(te, b, -1, st);
        if (rc == MC_OK && st->state != MC_TE_PENDING && st->state != MC_TE_WAITING)
            return;
        if (rc == MC_INVALID_PARAMS) {
            st->state = MC_TE_FAILED;
            st->error = MC_INTERNAL_ERROR;
            return;
        }
    }
}

typedef struct pending_batch {
    mc_te_batch_t id;
    size_t first, n; /* requests [first, first+n) */
    int submit_rc;
} pending_batch;

/* Engine batches are of at most MC_TE_MAX_BATCH requests. */
void mc__xfer_run(xfer *x, int *errs, void (*during)(void *), void *ctx)
{
    mc_te *te = x->s->te;
    size_t nb = x->n ? (x->n + MC_TE_MAX_BATCH - 1) / MC_TE_MAX_BATCH : 0;
    pending_batch *pb = nb ? mc_xcalloc(nb, sizeof *pb) : NULL;
    /* Phase 1: submit everything, so all transfers are in flight together. A batch that
     * cannot be allocated or submitted keeps id 0 and its code for phase 3. */
    for (size_t i = 0; i < nb; i++) {
        pb[i].first = i * MC_TE_MAX_BATCH;
        pb[i].n = x->n - pb[i].first < MC_TE_MAX_BATCH ? x->n - pb[i].first : MC_TE_MAX_BATCH;
        pb[i].submit_rc = mc_te_allocate_batch(te, pb[i].n, &pb[i].id);
        if (pb[i].submit_rc == MC_OK) {
            pb[i].submit_rc = mc_te_submit(te, pb[i].id, x->reqs + pb[i].first, pb[i].n);
            if (pb[i].submit_rc != MC_OK) {
                mc_te_free_batch(te, pb[i].id);
                pb[i].id = 0;
            }
        } else {
            pb[i].id = 0;
        }
    }
    /* Phase 2: our own memcpy work overlaps the engine's. */
    if (during)
        during(ctx);
    /* Phase 3: wait for each batch; a failed batch is examined request by request so
     * only the items whose requests failed are marked. */
    for (size_t i = 0; i < nb; i++) {
        if (!pb[i].id) {
            int code = pb[i].submit_rc == MC_INVALID_PARAMS ? MC_TRANSFER_FAIL
                                                            : te_code(pb[i].submit_rc);
            for (size_t k = 0; k < pb[i].n; k++) {
                size_t o = x->owner[pb[i].first + k];
                if (!errs[o])
                    errs[o] = code;
            }
            continue;
        }
        mc_te_status st;
        wait_terminal(te, pb[i].id, &st);
        if (st.state != MC_TE_COMPLETED) {
            for (size_t k = 0; k < pb[i].n; k++) {
                mc_te_status ts;
                size_t o = x->owner[pb[i].first + k];
                if (mc_te_get_transfer_status(te, pb[i].id, k, &ts) != MC_OK ||
                    ts.state != MC_TE_COMPLETED) {
                    if (!errs[o])
                        errs[o] = te_code(ts.error);
                }
            }
        }
        mc_te_free_batch(te, pb[i].id);
    }
    free(pb);
}

/* ---- attempts (read.c): batches of their own, waited for with a deadline ---- */

/* A read attempt's set is waited for right after it is submitted (read.c), so a small
 * read from one TCP peer is moved by this thread (mc_te_submit_inline) for up to this
 * long, then by the I/O threads as before: well inside read.c's HEDGE_DELAY_MS (50 ms),
 * after which a second replica is asked; never past the earliest deadline or hedge
 * time of the attempts in the set (x->until_ms), so the read's own timing holds. */
#define XATT_INLINE_MS 20u

void mc__xatt_start(xfer *x, mc__xatt *a)
{
    mc_te *te = x->s->te;
    memset(a, 0, sizeof *a);
    a->n = x->n;
    uint32_t budget = XATT_INLINE_MS;
    if (x->until_ms) {
        uint64_t now = mc_now_ms();
        uint64_t left = x->until_ms > now ? x->until_ms - now : 0;
        if (left < budget)
            budget = (uint32_t)left;
    }
    size_t nb = x->n ? (x->n + MC_TE_MAX_BATCH - 1) / MC_TE_MAX_BATCH : 0;
    a->ids = nb ? mc_xcalloc(nb, sizeof *a->ids) : NULL;
    for (size_t i = 0; i < nb; i++) {
        size_t first = i * MC_TE_MAX_BATCH;
        size_t n = x->n - first < MC_TE_MAX_BATCH ? x->n - first : MC_TE_MAX_BATCH;
        mc_te_batch_t id;
        int rc = mc_te_allocate_batch(te, n, &id);
        if (rc == MC_OK) {
            rc = mc_te_submit_inline(te, id, x->reqs + first, n, budget);
            if (rc != MC_OK)
                mc_te_free_batch(te, id);
        }
        if (rc != MC_OK) {
            /* the requests from here on failed; what was submitted is ended by
             * mc__xatt_end */
            a->rc = rc == MC_INVALID_PARAMS ? MC_TRANSFER_FAIL : te_code(rc);
            break;
        }
        a->ids[a->nb++] = id;
    }
    a->all_ok = a->rc == MC_OK && a->n == 0;
    x->n = 0;
    x->until_ms = 0;
}

int mc__xatt_wait(mc_te *te, mc__xatt *a, uint64_t until_ms)
{
    for (; a->next < a->nb; a->next++) {
        uint64_t now = mc_now_ms();
        int64_t t = until_ms > now ? (int64_t)(until_ms - now) : 0;
        mc_te_status st;
        int rc = mc_te_wait_batch(te, a->ids[a->next], t, &st);
        if (rc == MC_RPC_TIMEOUT)
            return MC__XATT_PENDING;
        if (rc != MC_OK || st.state != MC_TE_COMPLETED)
            a->any_failed = true;
    }
    a->all_ok = a->rc == MC_OK && !a->any_failed;
    return MC_OK;
}

int mc__xatt_state(mc_te *te, const mc__xatt *a, size_t first, size_t n)
{
    if (a->all_ok)
        return MC_OK;
    int res = MC_OK;
    for (size_t i = first; i < first + n; i++) {
        size_t b = i / MC_TE_MAX_BATCH;
        if (b >= a->nb)
            return a->rc; /* never submitted */
        mc_te_status ts;
        if (mc_te_get_transfer_status(te, a->ids[b], i % MC_TE_MAX_BATCH, &ts) != MC_OK)
            return MC_INTERNAL_ERROR;
        if (ts.state == MC_TE_PENDING || ts.state == MC_TE_WAITING)
            res = MC__XATT_PENDING;
        else if (ts.state != MC_TE_COMPLETED)
            return te_code(ts.error);
    }
    return res;
}

void mc__xatt_end(mc_te *te, mc__xatt *a)
{
    for (size_t i = 0; i < a->nb; i++)
        if (mc_te_free_batch(te, a->ids[i]) != MC_OK)
            mc_te_cancel_batch(te, a->ids[i]); /* in flight: give it up */
    free(a->ids);
    memset(a, 0, sizeof *a);
}

bool mc__in_own_segment(const mc_store *s, const char *ep, uint64_t addr, uint64_t len)
{
    if (!s->seg_base || strcmp(ep, s->name) != 0)
        return false;
    uint64_t base = (uint64_t)(uintptr_t)s->seg_base;
    /* written so that no sum can overflow */
    return addr >= base && len <= s->seg_size && addr - base <= s->seg_size - len;
}

int mc__replica_rank(const mc_store *s, const mc_master_replica *r)
{
    if (r->type != MC_MASTER_REPLICA_MEMORY)
        return 3; /* a disk replica: after every memory one */
    if (mc__in_own_segment(s, r->transport_endpoint, r->address, r->size))
        return 0;
    char h[MC__HOST_MAX];
    int port;
    if (mc__store_split_hostport(r->transport_endpoint, h, sizeof h, &port) == 0 &&
        !strcmp(h, s->host))
        return 1; /* same host: the engine may use shared memory */
    return 2;
}
