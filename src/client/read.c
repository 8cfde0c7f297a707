/* read.c: the store's reads (include/mooncake/store.h): get into caller memory, into an
 * allocator's buffer, or into a local-buffer handle; one key or a batch. Protocol per
 * chunk of keys (upstream client_service.cpp Get: GetReplicaList, replica choice, lease
 * check): the replica-list RPC, read_prepare (destination), rounds of read_next /
 * read_replica (one attempt on one replica), read_lease_check.
 * Owns nothing of mc_store (reads it under life shared); must not write objects. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define CHUNK_KEYS MC__CHUNK_KEYS

/* Where a read's bytes go: the caller's parts, a buffer from the caller's allocator, or a
 * local-buffer handle (mc_store_buffer). */
enum { DEST_IOV = 0, DEST_ALLOC = 1, DEST_HANDLE = 2 };

/* One key of a read call. */
typedef struct ritem {
    const void *key;
    size_t klen;
    const mc_store_iov *iov; /* DEST_IOV: the caller's; else &one once allocated */
    size_t niov;
    mc_store_iov one;
    void *allocated;         /* DEST_ALLOC: what alloc returned */
    mc_store_buffer *handle; /* DEST_HANDLE */
    int64_t result;          /* size or negative; MC_OK while pending */
    bool active;
} ritem;

/* What a read call does with every item. */
typedef struct read_op {
    int mode; /* DEST_* */
    mc_store_alloc_fn alloc;
    void *ctx;
} read_op;

/* One item's progress through the rounds of read_transfer. */
typedef struct rstate {
    uint64_t size;     /* the object's, from the replica list */
    uint64_t deadline; /* end of the read lease: ms, monotonic */
    uint32_t tried;    /* replica bit mask */
    int last_err;
    int chosen;        /* replica in flight this round, -1 none */
    bool done;         /* bytes are in place */
    bool failed;
} rstate;

/* Copies replica rp (own memory) into the item's destination. */
static void read_own(const ritem *r, const mc_master_replica *rp, uint64_t size)
{
    uint64_t off = 0;
    for (size_t p = 0; p < r->niov && off < size; p++) {
        uint64_t l = r->iov[p].len < size - off ? r->iov[p].len : size - off;
        if (l)
            memcpy(r->iov[p].base, (const char *)(uintptr_t)rp->address + off, (size_t)l);
        off += l;
    }
}

/* Picks the best replica not tried yet; -1 when none is left. */
static int pick_replica(const mc_store *s, const mc_master_replica_list *rl, const rstate *rs)
{
    int best = -1, best_rank = 99;
    for (uint32_t r = 0; r < rl->n; r++) {
        if (rs->tried & (1u << r))
            continue;
        int rank = mc__replica_rank(s, &rl->replicas[r]);
        if (rank < best_rank) {
            best = (int)r;
            best_rank = rank;
        }
    }
    return best;
}

/* ---- one chunk: locate, read replica by replica, lease check ---- */

/* Step 1 for one item: checks the replica list the master returned (rl, answered with
 * code st) and readies the destination (the caller's parts, the allocator's buffer, or
 * a handle). index: the item's position in the call (for the allocator). t0: when the
 * lease started (before the request). Returns MC_OK with q ready, or the item's result. */
static int64_t read_prepare(mc_store *s, ritem *r, size_t index, int st,
                            mc_master_replica_list *rl, uint64_t t0, rstate *q,
                            const read_op *op)
{
    if (st != MC_OK)
        return st;
    if (rl->n == 0 || rl->n > MC_MASTER_MAX_REPLICAS)
        return MC_REPLICA_IS_NOT_READY;
    /* The first replica's size is the object's; a replica that disagrees is never
     * read (marked tried from the start). */
    uint64_t size = rl->replicas[0].size;
    for (uint32_t j = 0; j < rl->n; j++) {
        mc_master_replica *rp = &rl->replicas[j];
        rp->transport_endpoint[sizeof rp->transport_endpoint - 1] = '\0';
        if (rp->size != size)
            q->tried |= 1u << j; /* inconsistent: never read it */
    }
    if (size > MC_STORE_MAX_SEGMENT_SIZE || size > SIZE_MAX)
        return MC_INTERNAL_ERROR;
    q->size = size;
    q->deadline = t0 + rl->lease_ttl_ms;
    if (op->mode == DEST_IOV) {
        /* The caller's parts must hold the whole object (they may be larger). */
        uint64_t cap = 0;
        bool ok = true;
        for (size_t p = 0; p < r->niov; p++) {
            if (r->iov[p].len && !r->iov[p].base)
                ok = false;
            cap += r->iov[p].len > size ? size : r->iov[p].len;
            if (cap >= size)
                break;
        }
        if (!ok || cap < size)
            return MC_INVALID_PARAMS; /* the buffer is smaller than the object */
    } else if (op->mode == DEST_ALLOC) {
        r->allocated = op->alloc(op->ctx, index, size);
        if (!r->allocated && size > 0)
            return MC_INTERNAL_ERROR;
        r->one = (mc_store_iov){r->allocated, size};
        r->iov = &r->one;
        r->niov = 1;
    } else {
        r->handle = mc__lbuf_buffer_new(s->ar, size);
        if (!r->handle)
            return MC_NO_AVAILABLE_HANDLE;
        r->one = (mc_store_iov){r->handle->data, size};
        r->iov = &r->one;
        r->niov = 1;
    }
    if (size == 0)
        q->done = true; /* nothing to move */
    return MC_OK;
}

enum { READ_DONE, READ_QUEUED, READ_SKIP };

/* One attempt on one replica: reads replica rp into item k's destination, at once when
 * it is in our own segment (READ_DONE), else by queuing its requests on x (READ_QUEUED).
 * READ_SKIP (q->last_err set) when its segment cannot be opened. */
static int read_replica(mc__xfer *x, const ritem *r, rstate *q, const mc_master_replica *rp,
                        size_t k)
{
    if (mc__in_own_segment(x->s, rp->transport_endpoint, rp->address, rp->size)) {
        read_own(r, rp, q->size);
        return READ_DONE;
    }
    mc_te_segment_t h;
    if (mc__xfer_seg(x, rp->transport_endpoint, &h) != MC_OK) {
        q->last_err = MC_TRANSFER_FAIL;
        return READ_SKIP;
    }
    /* The object fills the parts in order; the last part used may be larger. */
    uint64_t off = 0;
    for (size_t p = 0; p < r->niov && off < q->size; p++) {
        uint64_t l = r->iov[p].len < q->size - off ? r->iov[p].len : q->size - off;
        mc__xfer_add(x, MC_TE_OP_READ, r->iov[p].base, h, rp->address + off, l, k);
        off += l;
    }
    return READ_QUEUED;
}

/* Starts item k's next attempt, on the best replica not tried yet. Returns true when
 * requests were queued on x (q->chosen set); false when the item is finished: read from
 * our own memory (q->done), or out of replicas (q->failed, result = the last error). */
static bool read_next(mc__xfer *x, ritem *r, rstate *q, const mc_master_replica_list *rl,
                      size_t k)
{
    for (;;) {
        int c = pick_replica(x->s, rl, q);
        if (c < 0) {
            q->failed = true;
            r->result = q->last_err;
            return false;
        }
        q->tried |= 1u << c;
        switch (read_replica(x, r, q, &rl->replicas[c], k)) {
        case READ_DONE:
            q->done = true;
            return false;
        case READ_QUEUED:
            q->chosen = c;
            return true;
        default:
            break; /* this replica is unreachable: the next one */
        }
    }
}

/* Step 2: rounds. Each pending item reads its best untried replica, all items' requests
 * in one transfer set; an item whose transfer failed moves on to its next replica in the
 * following round. Ends when no item has anything in flight. A round lasts as long as
 * its slowest transfer (the engine's timeout bounds it): issue 10 gives each attempt a
 * deadline from the lease time left, here and in read_replica. */
static void read_transfer(mc_store *s, ritem *it, const size_t *idx, size_t m, rstate *rs,
                          const mc_master_replica_list *reps)
{
    int *errs = mc_xmalloc(m * sizeof *errs);
    mc__xfer x;
    mc__xfer_init(&x, s);
    for (;;) {
        mc__xfer_reset(&x);
        bool any = false;
        for (size_t k = 0; k < m; k++) {
            rstate *q = &rs[k];
            if (!q->done && !q->failed && read_next(&x, &it[idx[k]], q, &reps[k], k))
                any = true;
        }
        if (!any)
            break;
        memset(errs, 0, m * sizeof *errs);
        mc__xfer_run(&x, errs, NULL, NULL);
        for (size_t k = 0; k < m; k++) {
            rstate *q = &rs[k];
            if (q->chosen < 0)
                continue;
            q->chosen = -1;
            if (errs[k])
                q->last_err = errs[k];
            else
                q->done = true;
        }
    }
    mc__xfer_deinit(&x);
    free(errs);
}

/* Step 3: the lease check. Bytes read after the lease ran out may have been overwritten
 * (the master may have freed and reused the space), so such a read is LEASE_EXPIRED. */
static void read_lease_check(ritem *it, const size_t *idx, size_t m, const rstate *rs,
                             const mc_master_key *keys)
{
    bool hooked = false;
    for (size_t k = 0; k < m; k++) {
        if (!rs[k].done)
            continue;
        if (!hooked) {
            mc__store_hook(MC__STORE_HOOK_READ_DONE, keys[k].data, keys[k].len);
            hooked = true;
        }
        if (rs[k].size > 0 && mc_now_ms() > rs[k].deadline)
            it[idx[k]].result = MC_LEASE_EXPIRED;
        else
            it[idx[k]].result = (int64_t)rs[k].size;
    }
}

/* Reads the pending items idx[0..m) (a chunk): one (batch) get_replica_list RPC, then
 * the transfer rounds, then the lease check. */
static void read_chunk(mc_store *s, ritem *it, const size_t *idx, size_t m, const read_op *op)
{
    mc_master_key *keys = mc_xmalloc(m * sizeof *keys);
    int *st = mc_xmalloc(m * sizeof *st);
    rstate *rs = mc_xcalloc(m, sizeof *rs);
    mc_master_replica_list *reps = mc_xcalloc(m, sizeof *reps);
    for (size_t k = 0; k < m; k++)
        keys[k] = (mc_master_key){it[idx[k]].key, it[idx[k]].klen};
    uint64_t t0 = mc_now_ms(); /* the lease is measured from before the request */
    if (m == 1)
        st[0] = mc_master_client_get_replica_list(s->mc, keys[0].data, keys[0].len, &reps[0]);
    else
        mc_master_client_batch_get_replica_list(s->mc, keys, m, reps, st);

    for (size_t k = 0; k < m; k++) {
        rs[k].chosen = -1;
        rs[k].last_err = MC_TRANSFER_FAIL;
        int64_t rc = read_prepare(s, &it[idx[k]], idx[k], st[k], &reps[k], t0, &rs[k], op);
        if (rc != MC_OK) {
            it[idx[k]].result = rc;
            rs[k].failed = true;
        }
    }
    read_transfer(s, it, idx, m, rs, reps);
    read_lease_check(it, idx, m, rs, keys);
    free(keys);
    free(st);
    free(rs);
    free(reps);
}

/* Runs the read protocol for items whose result is MC_OK (pending). Caller holds life
 * shared. Duplicate keys are read independently (each into its own destination). */
static void do_read(mc_store *s, ritem *it, size_t n, const read_op *op)
{
    size_t *idx = mc_xmalloc((n ? n : 1) * sizeof *idx);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].result == MC_OK)
            idx[m++] = i;
    for (size_t c = 0; c < m; c += CHUNK_KEYS)
        read_chunk(s, it, idx + c, m - c < CHUNK_KEYS ? m - c : CHUNK_KEYS, op);
    free(idx);
}

/* ---- the public calls ---- */

static int64_t read_single(mc_store *s, const void *key, size_t key_len, ritem *r,
                           const read_op *op)
{
    if (!mc__store_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    r->key = key;
    r->klen = key_len;
    r->result = MC_OK;
    do_read(s, r, 1, op);
    mc__store_leave(s);
    return r->result;
}

int64_t mc_store_get_into(mc_store *s, const void *key, size_t key_len, void *buf, uint64_t cap)
{
    if (cap && !buf)
        return MC_INVALID_PARAMS;
    ritem r = {.one = {buf, cap}};
    r.iov = &r.one;
    r.niov = 1;
    if (mc__check_ranges(s, r.iov, 1, "get_into", 0, NULL) != MC_OK)
        return MC_INVALID_PARAMS;
    read_op op = {.mode = DEST_IOV};
    return read_single(s, key, key_len, &r, &op);
}

int64_t mc_store_get_with(mc_store *s, const void *key, size_t key_len, mc_store_alloc_fn alloc,
                          void *ctx, void **out)
{
    if (out)
        *out = NULL;
    if (!alloc || !out)
        return MC_INVALID_PARAMS;
    ritem r = {0};
    read_op op = {.mode = DEST_ALLOC, .alloc = alloc, .ctx = ctx};
    int64_t rc = read_single(s, key, key_len, &r, &op);
    *out = r.allocated;
    return rc;
}

static void *malloc_alloc(void *ctx, size_t index, uint64_t size)
{
    (void)ctx;
    (void)index;
    if (size >= SIZE_MAX)
        return NULL;
    char *p = malloc((size_t)size + 1);
    if (p)
        p[size] = '\0';
    return p;
}

int64_t mc_store_get_alloc(mc_store *s, const void *key, size_t key_len, void **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    void *p = NULL;
    int64_t rc = mc_store_get_with(s, key, key_len, malloc_alloc, NULL, &p);
    if (rc < 0) {
        free(p);
        p = NULL;
    }
    *out = p;
    return rc;
}

/* Common batch read: mode DEST_IOV uses iovs/iovcnt (or bufs/caps), others alloc. */
static int read_batch(mc_store *s, const mc_store_key *keys, size_t n, void *const *bufs,
                      const uint64_t *caps, const mc_store_iov *const *iovs,
                      const size_t *iovcnt, const read_op *op, ritem **items_out,
                      int64_t *results)
{
    *items_out = NULL;
    if (!results)
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    bool bad = n > MC_STORE_MAX_BATCH || !keys;
    if (op->mode == DEST_IOV && !iovs && (!bufs || !caps))
        bad = true;
    if (op->mode == DEST_IOV && iovs && !iovcnt)
        bad = true;
    if (bad) {
        mc__fill_results64(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    int rc = mc__store_enter(s);
    if (rc != MC_OK) {
        mc__fill_results64(results, n, rc);
        return rc;
    }
    ritem *it = mc_xcalloc(n, sizeof *it);
    bool logged = false;
    for (size_t i = 0; i < n; i++) {
        ritem *r = &it[i];
        r->key = keys[i].data;
        r->klen = keys[i].len;
        r->result = mc__store_key_ok(r->key, r->klen) ? MC_OK : MC_INVALID_PARAMS;
        if (op->mode == DEST_IOV) {
            if (iovs) {
                r->iov = iovs[i];
                r->niov = iovcnt[i];
                if (r->niov > MC_STORE_MAX_PARTS || (r->niov && !r->iov))
                    r->result = MC_INVALID_PARAMS;
            } else {
                r->one = (mc_store_iov){bufs[i], caps[i]};
                r->iov = &r->one;
                r->niov = 1;
                if (caps[i] && !bufs[i])
                    r->result = MC_INVALID_PARAMS;
            }
            if (r->result == MC_OK &&
                mc__check_ranges(s, r->iov, r->niov, "batch get_into", i, &logged) != MC_OK)
                r->result = MC_INVALID_PARAMS;
        }
    }
    do_read(s, it, n, op);
    for (size_t i = 0; i < n; i++)
        results[i] = it[i].result;
    mc__store_leave(s);
    /* The items go back to the caller: the _with / _buffer forms hand out (or free) what
     * each one allocated. */
    *items_out = it;
    return MC_OK;
}

int mc_store_batch_get_into(mc_store *s, const mc_store_key *keys, size_t n, void *const *bufs,
                            const uint64_t *caps, int64_t *results)
{
    read_op op = {.mode = DEST_IOV};
    ritem *it;
    int rc = read_batch(s, keys, n, bufs, caps, NULL, NULL, &op, &it, results);
    free(it);
    return rc;
}

int mc_store_batch_get_into_multi_buffers(mc_store *s, const mc_store_key *keys, size_t n,
                                          const mc_store_iov *const *iovs, const size_t *iovcnt,
                                          bool prefer_same_node, int64_t *results)
{
    (void)prefer_same_node; /* replica choice is always local first */
    read_op op = {.mode = DEST_IOV};
    ritem *it;
    int rc = read_batch(s, keys, n, NULL, NULL, iovs, iovcnt, &op, &it, results);
    free(it);
    return rc;
}

int mc_store_batch_get_with(mc_store *s, const mc_store_key *keys, size_t n,
                            mc_store_alloc_fn alloc, void *ctx, void **outs, int64_t *results)
{
    if (outs)
        for (size_t i = 0; i < n; i++)
            outs[i] = NULL;
    if (!alloc || !outs) {
        mc__fill_results64(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    read_op op = {.mode = DEST_ALLOC, .alloc = alloc, .ctx = ctx};
    ritem *it;
    int rc = read_batch(s, keys, n, NULL, NULL, NULL, NULL, &op, &it, results);
    if (it)
        for (size_t i = 0; i < n; i++)
            outs[i] = it[i].allocated;
    free(it);
    return rc;
}

int mc_store_get_buffer(mc_store *s, const void *key, size_t key_len, mc_store_buffer **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    *out = NULL;
    ritem r = {0};
    read_op op = {.mode = DEST_HANDLE};
    int64_t rc = read_single(s, key, key_len, &r, &op);
    if (rc < 0) {
        mc_store_buffer_free(r.handle);
        return (int)rc;
    }
    *out = r.handle;
    return MC_OK;
}

int mc_store_batch_get_buffer(mc_store *s, const mc_store_key *keys, size_t n,
                              mc_store_buffer **outs, int64_t *results)
{
    if (outs)
        for (size_t i = 0; i < n; i++)
            outs[i] = NULL;
    if (!outs) {
        mc__fill_results64(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    read_op op = {.mode = DEST_HANDLE};
    ritem *it;
    int rc = read_batch(s, keys, n, NULL, NULL, NULL, NULL, &op, &it, results);
    if (it)
        for (size_t i = 0; i < n; i++) {
            if (results[i] >= 0)
                outs[i] = it[i].handle;
            else
                mc_store_buffer_free(it[i].handle);
        }
    free(it);
    return rc;
}
