/* ranges.c: ranged reads and writes and the steps of the session APIs
 * (include/mooncake/store.h "Ranged I/O and sessions"): leases (batch_get_replica_list
 * without a transfer), fragment reads from a lease, reservations (batch_put_start without
 * a transfer), fragment writes into a reservation, commit (put_end) and abort
 * (put_revoke). Stateless: leases and reservations are the caller's values.
 * Owns nothing of mc_store (reads it under life shared); does not use read.c or write.c,
 * whose one-call protocols it splits into steps. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "client/ranges_internal.h"
#include "common/copy.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG MC__STORE_TAG

/* ---- shared checks ---- */

/* Checks the fragments of one item against an object of `size` bytes: each gets
 * MC_INVALID_PARAMS (and is left out) when it is malformed, else MC_OK (pending). Returns
 * the first refusal's code or MC_OK. */
static int64_t check_frags(mc_store *s, mc_store_range *r, size_t nr, uint64_t size,
                           const char *op, size_t index, bool *logged)
{
    int64_t first = MC_OK;
    for (size_t k = 0; k < nr; k++) {
        mc_store_range *f = &r[k];
        f->result = MC_OK;
        bool bad = (f->len && !f->buf) || f->offset > size || f->len > size - f->offset;
        if (!bad && f->len) {
            mc_store_iov iov = {f->buf, f->len};
            bad = mc__check_ranges(s, &iov, 1, op, index, logged) != MC_OK;
        } else if (bad && (!logged || !*logged)) {
            mc_log(MC_LOG_ERROR, TAG,
                   "%s: fragment %zu of item %zu (offset %llu, %llu bytes) lies outside "
                   "the object of %llu bytes or has no buffer; refused with INVALID_PARAMS",
                   op, k, index, (unsigned long long)f->offset, (unsigned long long)f->len,
                   (unsigned long long)size);
            if (logged)
                *logged = true;
        }
        if (bad) {
            f->result = MC_INVALID_PARAMS;
            if (first == MC_OK)
                first = MC_INVALID_PARAMS;
        }
    }
    return first;
}

/* Every fragment still pending (MC_OK) gets `code`. */
static void fail_frags(mc_store_range *r, size_t nr, int64_t code)
{
    for (size_t k = 0; k < nr; k++)
        if (r[k].result == MC_OK)
            r[k].result = code;
}

/* The item's result: sum of lengths, or the first fragment's negative code. Pending
 * fragments become their length. */
static int64_t fold_frags(mc_store_range *r, size_t nr)
{
    int64_t sum = 0, bad = 0;
    for (size_t k = 0; k < nr; k++) {
        if (r[k].result == MC_OK)
            r[k].result = (int64_t)r[k].len;
        if (r[k].result < 0 && !bad)
            bad = r[k].result;
        else if (r[k].result > 0)
            sum += r[k].result;
    }
    return bad ? bad : sum;
}

/* How close a replica is (as mc__replica_rank, for a public descriptor). */
static int desc_rank(const mc_store *s, const mc_store_replica_desc *d)
{
    if (mc__in_own_segment(s, d->transport_endpoint, d->buffer_address, d->size))
        return 0;
    char h[MC__HOST_MAX];
    int port;
    if (mc__store_split_hostport(d->transport_endpoint, h, sizeof h, &port) == 0 &&
        !strcmp(h, s->host))
        return 1;
    return 2;
}

/* The common argument check of the batch calls: MC_OK, or the code every result gets. */
static int batch_args(size_t n, const void *a, const void *b, const void *c, void *results)
{
    if (!results || (n && (!a || !b || !c)) || n > MC_STORE_MAX_BATCH)
        return MC_INVALID_PARAMS;
    return MC_OK;
}

/* The opening of the batch calls that hold the store: checks the arguments (batch_args)
 * and enters the store. true: entered (the caller calls mc__store_leave), n > 0. false:
 * the call returns *rc (MC_OK when n == 0, else the code every result then holds). wide:
 * results is int64_t[n], else int[n]. */
static bool batch_enter(mc_store *s, size_t n, const void *a, const void *b, const void *c,
                        void *results, bool wide, int *rc)
{
    *rc = batch_args(n, a, b, c, results);
    if (*rc == MC_OK)
        return n > 0 && (*rc = wide ? mc__store_enter_batch64(s, results, n)
                                    : mc__store_enter_batch(s, results, n)) == MC_OK;
    if (wide)
        mc__fill_results64(results, n, *rc);
    else
        mc__fill_results(results, n, *rc);
    return false;
}

/* ---- leases and ranged reads ---- */

int mc_store_batch_get_lease(mc_store *s, const mc_store_key *keys, size_t n,
                             mc_store_lease *outs, int *results)
{
    int rc;
    if (!batch_enter(s, n, keys, outs, results, results, false, &rc))
        return rc;
    mc_master_key *mk = mc_xmalloc(n * sizeof *mk);
    mc_master_replica_list *reps = mc_xcalloc(n, sizeof *reps);
    int *st = mc_xmalloc(n * sizeof *st);
    size_t *map = mc_xmalloc(n * sizeof *map);
    memset(outs, 0, n * sizeof *outs);
    size_t m = mc__conv_keys(keys, n, mk, map, results);
    uint64_t t0 = mc_now_ms(); /* the lease runs from before the request */
    if (m)
        (void)mc_master_client_batch_get_replica_list(s->mc, mk, m, reps, st);
    for (size_t k = 0; k < m; k++) {
        size_t i = map[k];
        results[i] = st[k];
        if (st[k] != MC_OK)
            continue;
        if (reps[k].n == 0) {
            results[i] = MC_REPLICA_IS_NOT_READY;
            continue;
        }
        mc__conv_replica_list(&reps[k], &outs[i].replicas);
        outs[i].size = reps[k].replicas[0].size;
        outs[i].deadline_ms = t0 + reps[k].lease_ttl_ms;
    }
    mc__store_leave(s);
    free(mk);
    free(reps);
    free(st);
    free(map);
    return MC_OK;
}

/* Item i of a ranged read. */
typedef struct ritem {
    const mc_store_lease *l;
    mc_store_range *r;
    size_t nr;
    uint32_t tried; /* replica bit mask */
    int err;        /* last replica's failure */
    int64_t code;   /* the item failed as a whole (its result) */
    bool done, failed;
} ritem;

/* The best replica of q not tried yet whose size matches the lease; -1 when none. */
static int next_replica(const mc_store *s, const ritem *q)
{
    int best = -1, best_rank = 99;
    const mc_store_replica_list *rl = &q->l->replicas;
    for (uint32_t j = 0; j < rl->n && j < MC_STORE_MAX_REPLICAS; j++) {
        if ((q->tried & (1u << j)) || rl->replicas[j].size != q->l->size)
            continue;
        int rk = desc_rank(s, &rl->replicas[j]);
        if (rk < best_rank) {
            best = (int)j;
            best_rank = rk;
        }
    }
    return best;
}

/* Starts item i on its best untried replica: from own memory at once (q->done), else its
 * fragments are queued on x (returns true). Out of replicas: q->failed. */
static bool read_start(mc__xfer *x, ritem *q, size_t i)
{
    for (;;) {
        int c = next_replica(x->s, q);
        if (c < 0) {
            fail_frags(q->r, q->nr, q->err ? q->err : MC_TRANSFER_FAIL);
            q->failed = true;
            return false;
        }
        q->tried |= 1u << c;
        const mc_store_replica_desc *d = &q->l->replicas.replicas[c];
        if (mc__in_own_segment(x->s, d->transport_endpoint, d->buffer_address, d->size)) {
            for (size_t k = 0; k < q->nr; k++)
                if (q->r[k].result == MC_OK && q->r[k].len)
                    memcpy(q->r[k].buf,
                           (const char *)(uintptr_t)d->buffer_address + q->r[k].offset,
                           (size_t)q->r[k].len);
            q->done = true;
            return false;
        }
        mc_te_segment_t h;
        if (mc__xfer_seg(x, d->transport_endpoint, &h) != MC_OK) {
            q->err = MC_TRANSFER_FAIL;
            continue;
        }
        for (size_t k = 0; k < q->nr; k++)
            if (q->r[k].result == MC_OK)
                mc__xfer_add(x, MC_TE_OP_READ, q->r[k].buf, h, d->buffer_address + q->r[k].offset,
                             q->r[k].len, i);
        return true;
    }
}

int mc_store_batch_read_ranges(mc_store *s, const mc_store_lease *const *leases, size_t n,
                               mc_store_range *const *ranges, const size_t *nranges,
                               int64_t *results)
{
    int rc;
    if (!batch_enter(s, n, leases, ranges, nranges, results, true, &rc))
        return rc;
    ritem *it = mc_xcalloc(n, sizeof *it);
    int *errs = mc_xcalloc(n, sizeof *errs);
    bool logged = false;
    uint64_t now = mc_now_ms();
    for (size_t i = 0; i < n; i++) {
        ritem *q = &it[i];
        q->l = leases[i];
        q->r = ranges[i];
        q->nr = q->r ? nranges[i] : 0;
        if ((nranges[i] && !q->r) || !q->l || q->nr > MC_STORE_MAX_PARTS) {
            q->code = MC_INVALID_PARAMS;
            for (size_t k = 0; k < q->nr; k++)
                q->r[k].result = MC_INVALID_PARAMS;
            q->failed = true;
            continue;
        }
        check_frags(s, q->r, q->nr, q->l->size, "read ranges", i, &logged);
        if (mc__lease_over(now, q->l->deadline_ms)) {
            q->code = MC_LEASE_EXPIRED;
            fail_frags(q->r, q->nr, MC_LEASE_EXPIRED);
            q->failed = true;
        }
    }
    /* Rounds: each pending item reads its pending fragments from its best untried
     * replica (own memory at once, the others in one engine batch per round). */
    mc__xfer x;
    mc__xfer_init(&x, s);
    for (;;) {
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            if (it[i].done || it[i].failed)
                continue;
            errs[i] = 0;
            any |= read_start(&x, &it[i], i);
        }
        if (!any)
            break;
        mc__xfer_run(&x, errs, NULL, NULL);
        mc__xfer_reset(&x);
        for (size_t i = 0; i < n; i++) {
            ritem *q = &it[i];
            if (q->done || q->failed)
                continue;
            if (errs[i] == 0)
                q->done = true;
            else
                q->err = errs[i];
        }
    }
    mc__xfer_deinit(&x);
    /* The lease check: bytes that arrived after the lease ended may be another object's. */
    mc__store_hook(MC__STORE_HOOK_READ_DONE, "", 0);
    now = mc_now_ms();
    for (size_t i = 0; i < n; i++) {
        ritem *q = &it[i];
        if (q->done && mc__lease_over(now, q->l->deadline_ms) && q->l->size > 0) {
            q->code = MC_LEASE_EXPIRED;
            fail_frags(q->r, q->nr, MC_LEASE_EXPIRED);
        }
        int64_t folded = fold_frags(q->r, q->nr);
        results[i] = q->code && folded >= 0 ? q->code : folded;
    }
    mc__store_leave(s);
    free(it);
    free(errs);
    return MC_OK;
}

int mc_store_batch_get_ranges(mc_store *s, const mc_store_key *keys, size_t n,
                              mc_store_range *const *ranges, const size_t *nranges,
                              int64_t *results)
{
    int rc = batch_args(n, keys, ranges, nranges, results);
    if (rc != MC_OK) {
        mc__fill_results64(results, n, rc);
        return rc;
    }
    if (n == 0)
        return MC_OK;
    mc_store_lease *ls = mc_xcalloc(n, sizeof *ls);
    const mc_store_lease **lp = mc_xcalloc(n, sizeof *lp);
    int *st = mc_xmalloc(n * sizeof *st);
    rc = mc_store_batch_get_lease(s, keys, n, ls, st);
    if (rc == MC_OK) {
        for (size_t i = 0; i < n; i++)
            lp[i] = st[i] == MC_OK ? &ls[i] : NULL;
        rc = mc_store_batch_read_ranges(s, lp, n, ranges, nranges, results);
        for (size_t i = 0; rc == MC_OK && i < n; i++)
            if (st[i] != MC_OK) {
                for (size_t k = 0; ranges[i] && k < nranges[i]; k++)
                    ranges[i][k].result = st[i];
                results[i] = st[i];
            }
    } else {
        mc__fill_results64(results, n, rc);
    }
    free(ls);
    free(lp);
    free(st);
    return rc;
}

bool mc_store_buffer_holds(mc_store *s, const void *addr, uint64_t len)
{
    if (mc__store_enter(s) != MC_OK)
        return false;
    bool ok = mc__ubuf_holds(s, addr, len);
    mc__store_leave(s);
    return ok;
}

/* ---- reservations and ranged writes ---- */

int mc_store_batch_put_reserve(mc_store *s, const mc_store_key *keys, const uint64_t *sizes,
                               size_t n, const mc_store_replicate_config *cfg,
                               mc_store_reservation *outs, int *results)
{
    int rc;
    if (!batch_enter(s, n, keys, sizes, outs, results, false, &rc))
        return rc;
    mc__put_cfg pc;
    if (mc__put_cfg_conv(s, cfg, n, true, &pc) != MC_OK) {
        mc__store_leave(s);
        mc__fill_results(results, n, MC_INVALID_PARAMS);
        return MC_OK;
    }
    mc_master_key *mk = mc_xmalloc(n * sizeof *mk);
    uint64_t *msz = mc_xmalloc(n * sizeof *msz);
    mc_master_replica_list *reps = mc_xcalloc(n, sizeof *reps);
    int *st = mc_xmalloc(n * sizeof *st);
    size_t *map = mc_xmalloc(n * sizeof *map);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        if (!mc__store_key_ok(keys[i].data, keys[i].len) || sizes[i] > MC_STORE_MAX_SEGMENT_SIZE) {
            results[i] = MC_INVALID_PARAMS;
            continue;
        }
        /* a key twice in one call: the later positions are refused (one reservation) */
        bool dup = false;
        for (size_t k = 0; k < m && !dup; k++)
            dup = mk[k].len == keys[i].len && !memcmp(mk[k].data, keys[i].data, keys[i].len);
        if (dup) {
            results[i] = MC_OBJECT_ALREADY_EXISTS;
            continue;
        }
        mk[m] = (mc_master_key){keys[i].data, keys[i].len};
        msz[m] = sizes[i];
        map[m++] = i;
    }
    if (m)
        (void)mc_master_client_batch_put_start(s->mc, s->client_id, mk, msz, m, &pc.m, reps, st);
    for (size_t k = 0; k < m; k++) {
        size_t i = map[k];
        results[i] = st[k];
        if (st[k] != MC_OK)
            continue;
        bool ok = reps[k].n > 0;
        for (uint32_t j = 0; j < reps[k].n; j++)
            if (reps[k].replicas[j].size != msz[k])
                ok = false;
        if (!ok) { /* the master broke the protocol: give the space back */
            mc_master_client_put_revoke(s->mc, s->client_id, mk[k].data, mk[k].len);
            results[i] = MC_INTERNAL_ERROR;
            continue;
        }
        mc__conv_replica_list(&reps[k], &outs[i].replicas);
        outs[i].size = msz[k];
        for (uint32_t j = 0; j < outs[i].replicas.n; j++)
            outs[i].fence_epochs[j] = reps[k].replicas[j].fence_epoch;
    }
    mc__store_leave(s);
    free(mk);
    free(msz);
    free(reps);
    free(st);
    free(map);
    return MC_OK;
}

/* Item i of a ranged write (for the own-memory copies run while the engine works). */
typedef struct witem {
    const mc_store_reservation *res;
    mc_store_range *r;
    size_t nr;
    bool active;
} witem;

typedef struct wctx {
    mc_store *s;
    witem *it;
    size_t n;
} wctx;

static void write_own(void *arg)
{
    wctx *c = arg;
    for (size_t i = 0; i < c->n; i++) {
        witem *w = &c->it[i];
        if (!w->active)
            continue;
        const mc_store_replica_list *rl = &w->res->replicas;
        for (uint32_t j = 0; j < rl->n && j < MC_STORE_MAX_REPLICAS; j++) {
            const mc_store_replica_desc *d = &rl->replicas[j];
            if (!mc__in_own_segment(c->s, d->transport_endpoint, d->buffer_address, d->size))
                continue;
            /* our own segment's fence, as write.c's write_own: a copy into space the
             * master has given up must not run */
            if (mc__own_fence_enter(c->s, w->res->fence_epochs[j]) != MC_OK) {
                for (size_t k = 0; k < w->nr; k++)
                    if (w->r[k].result == MC_OK)
                        w->r[k].result = MC_TRANSFER_FAIL;
                break;
            }
            for (size_t k = 0; k < w->nr; k++)
                if (w->r[k].result == MC_OK && w->r[k].len)
                    mc_copy_to_segment((char *)(uintptr_t)d->buffer_address + w->r[k].offset,
                                       w->r[k].buf, (size_t)w->r[k].len);
            mc__own_fence_leave(c->s);
        }
    }
}

int mc_store_batch_write_ranges(mc_store *s, const mc_store_reservation *const *res, size_t n,
                                mc_store_range *const *ranges, const size_t *nranges,
                                int64_t *results)
{
    int rc;
    if (!batch_enter(s, n, res, ranges, nranges, results, true, &rc))
        return rc;
    witem *it = mc_xcalloc(n, sizeof *it);
    int *errs = mc_xcalloc(n, sizeof *errs);
    bool logged = false;
    mc__xfer x;
    mc__xfer_init(&x, s);
    for (size_t i = 0; i < n; i++) {
        witem *w = &it[i];
        w->res = res[i];
        w->r = ranges[i];
        w->nr = w->r ? nranges[i] : 0;
        if ((nranges[i] && !w->r) || !w->res || w->nr > MC_STORE_MAX_PARTS) {
            for (size_t k = 0; w->r && k < w->nr; k++)
                w->r[k].result = MC_INVALID_PARAMS;
            errs[i] = MC_INVALID_PARAMS;
            continue;
        }
        check_frags(s, w->r, w->nr, w->res->size, "write ranges", i, &logged);
        const mc_store_replica_list *rl = &w->res->replicas;
        if (rl->n == 0 || rl->n > MC_STORE_MAX_REPLICAS) {
            errs[i] = MC_INVALID_PARAMS;
            continue;
        }
        for (uint32_t j = 0; j < rl->n && !errs[i]; j++) {
            const mc_store_replica_desc *d = &rl->replicas[j];
            if (d->size != w->res->size) {
                errs[i] = MC_INVALID_PARAMS;
                break;
            }
            if (mc__in_own_segment(s, d->transport_endpoint, d->buffer_address, d->size))
                continue; /* write_own */
            mc_te_segment_t h;
            if (mc__xfer_seg(&x, d->transport_endpoint, &h) != MC_OK) {
                errs[i] = MC_TRANSFER_FAIL;
                break;
            }
            for (size_t k = 0; k < w->nr; k++)
                if (w->r[k].result == MC_OK)
                    mc__xfer_add_write(&x, w->r[k].buf, h, d->buffer_address + w->r[k].offset,
                                       w->r[k].len, i, w->res->fence_epochs[j]);
        }
        w->active = errs[i] == 0;
    }
    wctx c = {s, it, n};
    mc__xfer_run(&x, errs, write_own, &c);
    mc__xfer_deinit(&x);
    for (size_t i = 0; i < n; i++) {
        witem *w = &it[i];
        if (errs[i] && w->r)
            fail_frags(w->r, w->nr, errs[i]);
        results[i] = w->nr ? fold_frags(w->r, w->nr) : (errs[i] ? errs[i] : 0);
    }
    mc__store_leave(s);
    free(it);
    free(errs);
    return MC_OK;
}

typedef int (*keys_rpc)(mc_master_client *, mc_master_uuid, const mc_master_key *, size_t,
                        int *);

static int keyed(mc_store *s, const mc_store_key *keys, size_t n, int *results, keys_rpc rpc)
{
    int rc;
    if (!batch_enter(s, n, keys, keys, keys, results, false, &rc))
        return rc;
    mc_master_key *mk = mc_xmalloc(n * sizeof *mk);
    int *st = mc_xmalloc(n * sizeof *st);
    size_t *map = mc_xmalloc(n * sizeof *map);
    size_t m = mc__conv_keys(keys, n, mk, map, results);
    if (m)
        (void)rpc(s->mc, s->client_id, mk, m, st);
    for (size_t k = 0; k < m; k++)
        results[map[k]] = st[k];
    mc__store_leave(s);
    free(mk);
    free(st);
    free(map);
    return MC_OK;
}

int mc_store_batch_put_commit(mc_store *s, const mc_store_key *keys, size_t n, int *results)
{
    return keyed(s, keys, n, results, mc_master_client_batch_put_end);
}

int mc_store_batch_put_abort(mc_store *s, const mc_store_key *keys, size_t n, int *results)
{
    return keyed(s, keys, n, results, mc_master_client_batch_put_revoke);
}
