/* read.c: the store's reads (include/mooncake/store.h): get into caller memory, into an
 * allocator's buffer, or into a local-buffer handle; one key or a batch. Protocol per
 * chunk of keys (upstream client_service.cpp Get: GetReplicaList, replica choice, lease
 * check): the replica-list RPC, read_prepare (destination), read_transfer (attempts on
 * replicas, each with a deadline from the lease time left, plus a hedge for small
 * values), read_lease_check. A large same-host batch gets its replica lists in pipelined
 * pieces and starts each piece's copies as its answer comes (read_chunk, read_early).
 * Owns nothing of mc_store (writes only its read_local hint; reads it under life shared);
 * must not write objects.
 *
 * Reads that route around a stuck node (docs/consistency.md, issue 10): an attempt is
 * the requests of one item on one replica; the attempts started in one round are
 * submitted together as one set of engine batches (xfer.c, mc__xatt), each attempt's
 * state read from its own requests. Its deadline is a share of the lease time left:
 * with r replicas still untried after it, (lease left) / (r + 1), so the ones after it
 * still get time inside the lease; the last replica gets all that is left. It is never
 * longer than the engine's transfer timeout, which ends a batch by itself. An attempt
 * past its deadline is given up and the next replica is tried; every set still running
 * when the call ends is cancelled (mc_te_cancel_batch: late replies go to the engine's
 * scratch, never into the destination after the call returned).
 * Hedge: a value of at most HEDGE_MAX_BYTES with another replica left also starts the
 * next replica HEDGE_DELAY_MS after the first (or at half its deadline when that comes
 * sooner) if the first has not finished; the first one to complete wins, the other is
 * given up. Both read the same complete object into the same destination, so the bytes
 * are the same whichever lands. Chosen because for small values the second request
 * costs little and turns a stuck node into a 50 ms delay instead of half the lease;
 * large values are not hedged (it would double the traffic of every slow read), they
 * move on at the deadline. The delay is well above a small read's time on a loaded LAN
 * (1 MiB at 1 Gb/s is 8 ms), so a healthy cluster hedges rarely.
 * A miss caused by timeouts says so: LEASE_EXPIRED when the lease ran out, else
 * TRANSFER_FAIL (never OBJECT_NOT_FOUND, never the engine's RPC_TIMEOUT). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define CHUNK_KEYS MC__CHUNK_KEYS
#define HEDGE_MAX_BYTES (1ull << 20) /* values up to this size are hedged */
#define HEDGE_DELAY_MS 50u           /* after this long without an answer */
/* Keys per replica-list request of a pipelined chunk (read_chunk; issue 17: 4 KiB x 128
 * same-host get, 32 against 16, 24, 48, 64 and unsplit: docs/performance.md). */
#define PIPE_KEYS 32u

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

/* One attempt of an item on one replica: requests [first, first+n) of set `set` of the
 * call (read_transfer's sets). */
typedef struct rattempt {
    size_t set, first, n;
    uint64_t deadline; /* ms, monotonic: given up when still running then */
    bool live;
} rattempt;

/* The sets one call submitted: one per round that started attempts. A set is ended
 * (cancelled when still running) only when the call ends: an attempt given up earlier
 * may still write the same object's bytes into its destination until then (both
 * replicas are complete copies of the same put, and the lease check refuses bytes
 * that came too late), never after the call returned. */
typedef struct rsets {
    mc__xatt *v;
    size_t *live; /* attempts of each set still looked at */
    bool *over;   /* every request of the set ended */
    size_t n, cap;
} rsets;

/* One item's progress through read_transfer. */
typedef struct rstate {
    uint64_t size;     /* the object's, from the replica list */
    uint64_t deadline; /* end of the read lease: ms, monotonic */
    uint32_t tried;    /* replica bit mask */
    int last_err;
    bool timed_out;    /* an attempt ran past its deadline or the engine's timeout */
    rattempt att[2];   /* the first attempt in flight and a hedge */
    uint64_t hedge_at; /* when the hedge may start (ms); 0: none planned */
    bool done;         /* bytes are in place */
    bool failed;
    bool from_disk;    /* read from a disk replica: verified by its checksum, the lease */
                       /* (which guards memory from reuse) does not apply...           */
    bool mem_late;     /* ...unless a memory attempt into the same buffer was still  */
                       /* running when given up or when the disk copy was in: its    */
                       /* bytes may land until the call's sets end, after the copy,  */
                       /* so past the lease the copy is read again then (lease check) */
    int8_t disk_rep;   /* from_disk: the replica that gave the copy */
    bool prepared;     /* read_start ran: its replica list has been taken */
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
    int best = -1, best_rank = 99, left = 0;
    for (uint32_t r = 0; r < rl->n; r++)
        if (!(rs->tried & (1u << r))) {
            best = (int)r;
            left++;
        }
    if (left <= 1)
        return best; /* nothing to rank (one replica: the common case) */
    best = -1;
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

/* Reads disk replica rp (LOCAL_DISK: our own disk tier, or another client's through its
 * disk-read server, offload.c; DISK: a file in the shared directory) into item r's
 * destination; the record is verified there. Blocks the caller's thread. Returns MC_OK
 * or the read's code. */
static int read_disk(mc_store *s, const ritem *r, const rstate *q, const mc_master_replica *rp)
{
    if (rp->type == MC_MASTER_REPLICA_LOCAL_DISK)
        return mc__offload_is_own(s, rp)
                   ? mc__offload_read_own(s, r->key, r->klen, r->iov, r->niov, q->size)
                   : mc__offload_read_remote(s, rp, r->key, r->klen, r->iov, r->niov, q->size,
                                             q->deadline);
    return mc__shared_fs_read(s, rp->transport_endpoint, r->key, r->klen, r->iov, r->niov,
                              q->size);
}

/* One attempt on one replica: reads replica rp into item k's destination, at once when
 * it is in our own segment or on disk (READ_DONE), else by queuing its requests on x for
 * set `set` (READ_QUEUED, a filled in). READ_SKIP (q->last_err set) when its segment
 * cannot be opened or its disk read failed. */
static int read_replica(mc__xfer *x, const ritem *r, rstate *q, const mc_master_replica *rp,
                        size_t k, rattempt *a, rsets *ss)
{
    if (rp->type == MC_MASTER_REPLICA_LOCAL_DISK || rp->type == MC_MASTER_REPLICA_DISK) {
        int rc = read_disk(x->s, r, q, rp);
        if (rc == MC_OK) {
            q->from_disk = true;
            return READ_DONE;
        }
        q->last_err = rc;
        return READ_SKIP;
    }
    if (rp->type != MC_MASTER_REPLICA_MEMORY) {
        q->last_err = MC_OBJECT_NOT_FOUND;
        return READ_SKIP;
    }
    if (mc__in_own_segment(x->s, rp->transport_endpoint, rp->address, rp->size)) {
        read_own(r, rp, q->size);
        return READ_DONE;
    }
    mc_te_segment_t h;
    if (mc__xfer_seg(x, rp->transport_endpoint, &h) != MC_OK) {
        q->last_err = MC_TRANSFER_FAIL;
        return READ_SKIP;
    }
    a->set = ss->n; /* the set this round submits */
    a->first = x->n;
    /* The object fills the parts in order; the last part used may be larger. */
    uint64_t off = 0;
    for (size_t p = 0; p < r->niov && off < q->size; p++) {
        uint64_t l = r->iov[p].len < q->size - off ? r->iov[p].len : q->size - off;
        mc__xfer_add(x, MC_TE_OP_READ, r->iov[p].base, h, rp->address + off, l, k);
        off += l;
    }
    a->n = x->n - a->first;
    a->live = true;
    ss->live[a->set]++;
    return READ_QUEUED;
}

/* Stops looking at attempt j of q (it stays in flight until its set ends). */
static void read_drop(rstate *q, int j, rsets *ss)
{
    if (q->att[j].live) {
        q->att[j].live = false;
        ss->live[q->att[j].set]--;
    }
}

/* The item's result when no replica is left: a timeout says so. */
static int64_t read_failure(const rstate *q)
{
    if (q->timed_out || q->last_err == MC_RPC_TIMEOUT)
        return mc__lease_over(mc_now_ms(), q->deadline) ? MC_LEASE_EXPIRED : MC_TRANSFER_FAIL;
    return q->last_err;
}

/* Starts an attempt of item k on the best replica not tried yet, in slot j (0: the
 * item has nothing in flight; 1: a hedge next to slot 0). Returns true when one was
 * queued; false when none was: the item is finished (read from our own memory:
 * q->done; out of replicas or lease with nothing else in flight: q->failed, result
 * set), or, for a hedge, no replica is left to hedge on. */
static bool read_next(mc__xfer *x, ritem *r, rstate *q, const mc_master_replica_list *rl,
                      size_t k, int j, rsets *ss)
{
    for (;;) {
        uint64_t now = mc_now_ms();
        int c = pick_replica(x->s, rl, q);
        /* a disk replica is read whatever the lease says (the lease guards memory from
         * reuse; a disk record is verified by its checksum); when a memory attempt may
         * land after it (mem_late), read_lease_check reads it again past the lease */
        bool disk = c >= 0 && rl->replicas[c].type != MC_MASTER_REPLICA_MEMORY;
        if (c < 0 || (mc__lease_over(now, q->deadline) && !disk)) {
            if (j == 0) {
                q->failed = true;
                r->result = c < 0 ? read_failure(q) : MC_LEASE_EXPIRED;
            }
            return false;
        }
        q->tried |= 1u << c;
        unsigned rest = 0; /* replicas left after this one */
        for (uint32_t i = 0; i < rl->n; i++)
            rest += !(q->tried & (1u << i));
        /* bytes are trusted only while now + 1 < deadline (mc__lease_over): the
         * attempts share the time until deadline - 1 */
        uint64_t share = q->deadline > now + 1 ? (q->deadline - 1 - now) / (rest + 1) : 0;
        rattempt *a = &q->att[j];
        a->deadline = now + (share ? share : 1);
        switch (read_replica(x, r, q, &rl->replicas[c], k, a, ss)) {
        case READ_DONE:
            q->done = true;
            if (q->from_disk) {
                q->disk_rep = (int8_t)c; /* read again past the lease when mem_late */
                q->mem_late |= q->att[0].live || q->att[1].live; /* a hedge or failover */
            }
            read_drop(q, 0, ss);
            read_drop(q, 1, ss);
            return false;
        case READ_QUEUED: {
            q->hedge_at = 0;
            if (j == 0 && rest > 0 && q->size <= HEDGE_MAX_BYTES)
                q->hedge_at = now + (share / 2 < HEDGE_DELAY_MS ? share / 2 : HEDGE_DELAY_MS);
            uint64_t due = q->hedge_at && q->hedge_at < a->deadline ? q->hedge_at : a->deadline;
            if (!x->until_ms || due < x->until_ms)
                x->until_ms = due; /* bounds the set's inline budget (xfer.c) */
            return true;
        }
        default:
            break; /* this replica is unreachable: the next one */
        }
    }
}

/* Looks at attempt j of item q when there is something to decide: its set is over, its
 * deadline passed, or (first attempt) the hedge is due. Finishes the item when the
 * attempt completed; gives the attempt up when it failed or ran past its deadline. */
static void read_check(mc_te *te, rstate *q, int j, rsets *ss, uint64_t now)
{
    rattempt *a = &q->att[j];
    if (!ss->over[a->set] && now < a->deadline && !(j == 0 && q->hedge_at && now >= q->hedge_at))
        return;
    int rc = mc__xatt_state(te, &ss->v[a->set], a->first, a->n);
    if (rc == MC_OK) {
        q->done = true;
        read_drop(q, 0, ss);
        read_drop(q, 1, ss); /* a hedge still in flight is cancelled with its set */
        return;
    }
    if (rc == MC__XATT_PENDING) {
        if (now < a->deadline)
            return;
        q->timed_out = true; /* give this replica up */
        q->mem_late = true;  /* still running: it may land until the sets end */
        q->last_err = MC_TRANSFER_FAIL;
    } else {
        q->last_err = rc;
        if (rc == MC_RPC_TIMEOUT)
            q->timed_out = true;
        /* one request failed: the attempt's other parts may still be running */
        q->mem_late |= a->n > 1 && !ss->over[a->set];
    }
    read_drop(q, j, ss);
}

/* Waits until `next` (ms) or until a set with attempts still looked at is over. One
 * such set: a plain wait on it. Several (a hedge or a failover next to the first
 * round): a look at each, then a short wait on the newest (the engine has no wait for
 * any of several batches), so an early answer is seen within a few ms. */
static void read_wait(mc_te *te, rsets *ss, uint64_t next)
{
    size_t nlive = 0, last = 0;
    for (size_t i = 0; i < ss->n; i++)
        if (ss->live[i] && !ss->over[i]) {
            nlive++;
            last = i;
        }
    if (nlive == 0)
        return;
    if (nlive == 1) {
        ss->over[last] = mc__xatt_wait(te, &ss->v[last], next) == MC_OK;
        return;
    }
    bool any = false;
    for (size_t i = 0; i < ss->n; i++)
        if (ss->live[i] && !ss->over[i] && mc__xatt_wait(te, &ss->v[i], 0) == MC_OK)
            any = ss->over[i] = true;
    if (!any) {
        uint64_t soon = mc_now_ms() + 2;
        ss->over[last] = mc__xatt_wait(te, &ss->v[last], soon < next ? soon : next) == MC_OK;
    }
}

/* The transfer side of one chunk: the requests being queued for the next set and the
 * sets submitted so far. */
typedef struct rrun {
    mc__xfer x;
    rsets ss;
} rrun;

static void rrun_init(rrun *r, mc_store *s)
{
    mc__xfer_init(&r->x, s);
    memset(&r->ss, 0, sizeof r->ss);
}

/* Readies set ss->n for the attempts of a new round (room and zeroed counters), unless
 * it is open already: requests queued for it and not submitted yet (read_early). */
static void rsets_next(rrun *r)
{
    rsets *ss = &r->ss;
    if (r->x.n)
        return;
    if (ss->n == ss->cap) {
        ss->cap = ss->cap ? ss->cap * 2 : 4;
        ss->v = mc_xrealloc(ss->v, ss->cap * sizeof *ss->v);
        ss->live = mc_xrealloc(ss->live, ss->cap * sizeof *ss->live);
        ss->over = mc_xrealloc(ss->over, ss->cap * sizeof *ss->over);
    }
    ss->live[ss->n] = 0;
    ss->over[ss->n] = false;
}

/* Submits what the round queued as one set. */
static void rrun_submit(rrun *r)
{
    if (r->x.n) {
        mc__xatt_start(&r->x, &r->ss.v[r->ss.n]);
        r->ss.n++;
    }
}

/* Ends every set (cancelled when still running), so nothing lands after the call
 * returned, and frees the run. */
static void rrun_end(mc_te *te, rrun *r)
{
    for (size_t i = 0; i < r->ss.n; i++)
        mc__xatt_end(te, &r->ss.v[i]);
    free(r->ss.v);
    free(r->ss.live);
    free(r->ss.over);
    mc__xfer_deinit(&r->x);
}

/* Sets the store's read_local hint from one round: its queued requests all on the
 * same-host path, or (nothing queued) `own` items read from our own memory. A round that
 * moved nothing (misses, refusals, empty values) leaves the hint as it was. Returns
 * whether every queued request is on the same-host path (true when none is). */
static bool hint_update(mc_store *s, mc__xfer *x, size_t own)
{
    bool local = mc__xfer_all_local(x);
    if (x->n || own)
        atomic_store_explicit(&s->read_local, local, memory_order_relaxed);
    return local;
}

/* True when read_next finished item q at once from our own memory. */
static bool read_own_done(const rstate *q)
{
    return q->done && !q->from_disk && q->size > 0;
}

/* Step 2: the attempts. Each pending item reads its best untried replica; the attempts
 * started in one round are submitted together as one set (so a batch get keeps the
 * engine's batching). Each turn looks at what is due (a set over, a deadline, a hedge
 * time), starts what follows (the next replica after a failure or a timeout, a hedge),
 * then waits until the earliest deadline or hedge time or until a set is over. Ends
 * when no item has anything in flight. Items whose first attempt read_early started
 * (run's earlier sets) go on from there. The caller ends the sets (rrun_end). learn: the
 * first round's path becomes the store's read_local hint (a pipelined chunk's pieces
 * set it in read_early instead). */
static void read_transfer(mc_store *s, ritem *it, const size_t *idx, size_t m, rstate *rs,
                          const mc_master_replica_list *reps, rrun *run, bool learn)
{
    mc__xfer *x = &run->x;
    rsets *ss = &run->ss;
    rrun_submit(run); /* what read_early queued and left */
    bool first = learn;
    size_t own = 0;
    for (;;) {
        uint64_t now = mc_now_ms();
        for (size_t k = 0; k < m; k++)
            for (int j = 0; j < 2; j++)
                if (!rs[k].done && rs[k].att[j].live)
                    read_check(s->te, &rs[k], j, ss, now);
        rsets_next(run);
        uint64_t next = UINT64_MAX;
        bool any = false;
        for (size_t k = 0; k < m; k++) {
            rstate *q = &rs[k];
            if (q->done || q->failed)
                continue;
            if (!q->att[0].live && q->att[1].live) { /* keep the one in flight in slot 0 */
                q->att[0] = q->att[1];
                q->att[1].live = false;
            }
            if (!q->att[0].live && !read_next(x, &it[idx[k]], q, &reps[k], k, 0, ss)) {
                own += read_own_done(q);
                continue; /* finished */
            }
            if (q->hedge_at && now >= q->hedge_at && !q->att[1].live) {
                q->hedge_at = 0;
                read_next(x, &it[idx[k]], q, &reps[k], k, 1, ss);
            }
            for (int j = 0; j < 2; j++)
                if (q->att[j].live && q->att[j].deadline < next)
                    next = q->att[j].deadline;
            if (q->hedge_at && q->hedge_at < next)
                next = q->hedge_at;
            any = true;
        }
        if (first) /* the first round's path: the hint */
            hint_update(s, x, own);
        first = false;
        rrun_submit(run);
        if (!any)
            break;
        read_wait(s->te, ss, next);
    }
}

/* Step 3: the lease check, after every transfer of the chunk ended (rrun_end). Bytes
 * read after the lease ran out may have been overwritten (the master may have freed and
 * reused the space), so such a read is LEASE_EXPIRED. A disk copy is not subject to the
 * lease, except that a memory attempt into its buffer may have landed after it
 * (mem_late): past the lease it is then read again from the same disk replica, now that
 * nothing else can land: its bytes are the result, or LEASE_EXPIRED when it fails. */
static void read_lease_check(mc_store *s, ritem *it, const size_t *idx, size_t m,
                             const rstate *rs, const mc_master_replica_list *reps,
                             const mc_master_key *keys)
{
    bool hooked = false;
    uint64_t now = 0; /* read once, after the hook: every transfer of the chunk has ended
                         by then, so it bounds when each item's bytes landed */
    for (size_t k = 0; k < m; k++) {
        const rstate *q = &rs[k];
        if (!q->done)
            continue;
        if (!hooked) {
            mc__store_hook(MC__STORE_HOOK_READ_DONE, keys[k].data, keys[k].len);
            hooked = true;
            now = mc_now_ms();
        }
        ritem *r = &it[idx[k]];
        r->result = (int64_t)q->size;
        if (q->size == 0 || (q->from_disk && !q->mem_late) || !mc__lease_over(now, q->deadline))
            continue;
        if (!q->from_disk) {
            r->result = MC_LEASE_EXPIRED;
            continue;
        }
        if (read_disk(s, r, q, &reps[k].replicas[q->disk_rep]) != MC_OK)
            r->result = MC_LEASE_EXPIRED; /* as a memory read past its lease */
    }
}

static void reread_call(void *ctx, const size_t *map, size_t n, const mc_master_key *keys,
                        mc_master_replica_list *reps, int *st);

/* Step 1 for item k of a chunk: takes its replica list (answered with st) and readies
 * its destination; a refused item gets its result and is finished. */
static void read_start(mc_store *s, ritem *it, const size_t *idx, size_t k, int st,
                       mc_master_replica_list *rl, uint64_t t0, rstate *q, const read_op *op)
{
    q->last_err = MC_TRANSFER_FAIL;
    int64_t rc = read_prepare(s, &it[idx[k]], idx[k], st, rl, t0, q, op);
    if (rc != MC_OK) {
        it[idx[k]].result = rc;
        q->failed = true;
    }
    q->prepared = true;
}

/* A read chunk whose replica lists come in pieces (read_early). */
typedef struct rpipe {
    mc_store *s;
    ritem *it;
    const size_t *idx;
    rstate *rs;
    mc_master_replica_list *reps;
    const int *st;
    uint64_t t0;
    const read_op *op;
    rrun *run;
} rpipe;

static bool has_memory_replica(const mc_master_replica_list *rl)
{
    for (uint32_t r = 0; r < rl->n && r < MC_MASTER_MAX_REPLICAS; r++)
        if (rl->replicas[r].type == MC_MASTER_REPLICA_MEMORY)
            return true;
    return false;
}

/* The master answered items [off, off + k) of a pipelined chunk while it still serves
 * the rest (mc_master_client_batch_get_replica_list_each): their first attempts start
 * now, as one set, so their bytes move (a same-host copy, engine requests) while the
 * later replica lists are made. Left for after the call: items refused as not ready
 * while a view change is recent (the remount window asks again for them) and items with
 * no memory replica (a disk read blocks, and this runs while a master connection is
 * held). */
static void read_early(void *arg, size_t off, size_t k)
{
    rpipe *p = arg;
    for (size_t j = off; j < off + k; j++)
        if (p->st[j] == MC_REPLICA_IS_NOT_READY &&
            mc_master_client_view_changed_within(p->s->mc, MC__REMOUNT_WINDOW_MS))
            return;
    rsets_next(p->run);
    size_t own = 0;
    for (size_t j = off; j < off + k; j++) {
        rstate *q = &p->rs[j];
        if (p->st[j] == MC_OK && !has_memory_replica(&p->reps[j]))
            continue;
        read_start(p->s, p->it, p->idx, j, p->st[j], &p->reps[j], p->t0, q, p->op);
        if (!q->done && !q->failed &&
            !read_next(&p->run->x, &p->it[p->idx[j]], q, &p->reps[j], j, 0, &p->run->ss))
            own += read_own_done(q);
    }
    if (hint_update(p->s, &p->run->x, own))
        rrun_submit(p->run);
    mc__store_hook(MC__STORE_HOOK_READ_PIECE, p->it[p->idx[off]].key, p->it[p->idx[off]].klen);
}

/* Asks again, once, for the n items of keys[0..m) whose status is `code` (call: the
 * request, ctx its argument) and puts the answers in their places of reps and st. */
static void ask_again(int code, const mc_master_key *keys, size_t m,
                      mc_master_replica_list *reps, int *st, size_t n, mc__remount_call call,
                      void *ctx)
{
    size_t *map = mc_xmalloc(n * sizeof *map);
    mc_master_key *sk = mc_xmalloc(n * sizeof *sk);
    mc_master_replica_list *sr = mc_xmalloc(n * sizeof *sr);
    int *ss = mc_xmalloc(n * sizeof *ss);
    size_t j = 0;
    for (size_t k = 0; k < m && j < n; k++)
        if (st[k] == code) {
            map[j] = k;
            sk[j] = keys[k];
            sr[j].n = 0;
            sr[j].lease_ttl_ms = 0;
            j++;
        }
    call(ctx, map, j, sk, sr, ss);
    for (size_t i = 0; i < j; i++) {
        mc_master_replica_list *d = &reps[map[i]];
        st[map[i]] = ss[i];
        d->n = sr[i].n <= MC_MASTER_MAX_REPLICAS ? sr[i].n : 0;
        d->lease_ttl_ms = sr[i].lease_ttl_ms;
        memcpy(d->replicas, sr[i].replicas, d->n * sizeof d->replicas[0]);
    }
    free(map);
    free(sk);
    free(sr);
    free(ss);
}

static size_t count_code(const int *st, size_t m, int code)
{
    size_t n = 0;
    for (size_t k = 0; k < m; k++)
        n += st[k] == code;
    return n;
}

/* Reads the pending items idx[0..m) (a chunk): the (batch) get_replica_list RPC (asked
 * again in the remount window), then the transfer rounds, then the lease check. A chunk
 * of at least 2 x PIPE_KEYS keys read into caller memory or local-buffer handles asks
 * for its replica lists in requests of PIPE_KEYS keys, pipelined, and starts each
 * piece's transfers as soon as its answer is in (read_early): the copy or transfer of
 * the first keys overlaps the master's work on the rest (issue 17). Reads into an
 * allocator's buffers are not pipelined: the allocator is the caller's code and would
 * run while a master connection is held. */
static void read_chunk(mc_store *s, ritem *it, const size_t *idx, size_t m, const read_op *op)
{
    mc_master_key *keys = mc_xmalloc(m * sizeof *keys);
    int *st = mc_xmalloc(m * sizeof *st);
    rstate *rs = mc_xcalloc(m, sizeof *rs);
    /* Not zeroed: a list is ~2.5 KiB (8 replicas with their endpoints) and only n and the
     * lease are read before the decode fills replicas[0..n) (issue 17: zeroing 128 lists
     * was ~40% of a 4 KiB x 128 batch_get_into's client instructions). */
    mc_master_replica_list *reps = mc_xmalloc(m * sizeof *reps);
    for (size_t k = 0; k < m; k++) {
        keys[k] = (mc_master_key){it[idx[k]].key, it[idx[k]].klen};
        reps[k].n = 0;
        reps[k].lease_ttl_ms = 0;
    }
    rrun run;
    rrun_init(&run, s);
    uint64_t t0 = mc_now_ms(); /* the lease is measured from before the request */
    /* only a chunk that could be pipelined reads or sets the hint */
    bool pipeable = m >= 2 * PIPE_KEYS && op->mode != DEST_ALLOC;
    bool piped = pipeable && atomic_load_explicit(&s->read_local, memory_order_relaxed);
    if (m == 1) {
        st[0] = mc_master_client_get_replica_list(s->mc, keys[0].data, keys[0].len, &reps[0]);
    } else if (piped) {
        rpipe p = {s, it, idx, rs, reps, st, t0, op, &run};
        int rc = mc_master_client_batch_get_replica_list_each(s->mc, keys, m, reps, st,
                                                              PIPE_KEYS, read_early, &p);
        for (size_t k = 0; k < m; k++)
            if (rs[k].prepared)
                st[k] = MC_OK; /* taken: the retries below leave it alone */
        /* A call that failed as a whole after some pieces were answered is not resent by
         * the master client (it resends to a new leader only while nothing of a call
         * ran): the items still holding its code are asked for once more in one plain
         * request, which follows a leader change as an unpipelined read does. */
        size_t n;
        if ((rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT ||
             rc == MC_UNAVAILABLE_IN_CURRENT_STATUS) && (n = count_code(st, m, rc)) > 0)
            ask_again(rc, keys, m, reps, st, n, reread_call, s);
    } else {
        mc_master_client_batch_get_replica_list(s->mc, keys, m, reps, st);
    }
    mc__remount_retry(s, MC_REPLICA_IS_NOT_READY, keys, m, reps, st, reread_call, s);

    for (size_t k = 0; k < m; k++)
        if (!rs[k].prepared)
            read_start(s, it, idx, k, st[k], &reps[k], t0, &rs[k], op);
    read_transfer(s, it, idx, m, rs, reps, &run, pipeable && !piped);
    rrun_end(s->te, &run);
    read_lease_check(s, it, idx, m, rs, reps, keys);
    free(keys);
    free(st);
    free(rs);
    free(reps);
}

/* ---- the remount window (internal.h) ---- */

void mc__remount_retry(mc_store *s, int code, const mc_master_key *keys, size_t m,
                       mc_master_replica_list *reps, int *st, mc__remount_call call,
                       void *ctx)
{
    uint64_t t_start = mc_now_ms();
    for (;;) {
        size_t n = count_code(st, m, code);
        if (!n || !mc_master_client_view_changed_within(s->mc, MC__REMOUNT_WINDOW_MS) ||
            mc_now_ms() - t_start >= MC__REMOUNT_RETRY_MS)
            break;
        mc_sleep_ms(MC__REMOUNT_POLL_MS);
        ask_again(code, keys, m, reps, st, n, call, ctx);
    }
}

/* get_replica_list for the keys still refused in the remount window */
static void reread_call(void *ctx, const size_t *map, size_t n, const mc_master_key *keys,
                        mc_master_replica_list *reps, int *st)
{
    (void)map;
    mc_store *s = ctx;
    if (n == 1)
        st[0] = mc_master_client_get_replica_list(s->mc, keys[0].data, keys[0].len, &reps[0]);
    else
        mc_master_client_batch_get_replica_list(s->mc, keys, n, reps, st);
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
    mc__cstats_count(s, MC__OP_GET, r->result, r->result > 0 ? (uint64_t)r->result : 0);
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
    int rc = mc__store_enter_batch64(s, results, n);
    if (rc != MC_OK)
        return rc;
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
    for (size_t i = 0; i < n; i++) {
        results[i] = it[i].result;
        mc__cstats_count(s, MC__OP_GET, it[i].result,
                         it[i].result > 0 ? (uint64_t)it[i].result : 0);
    }
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
