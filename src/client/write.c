/* write.c: the store's writes (include/mooncake/store.h): put / upsert of one key or a
 * batch, from one buffer or parts. Protocol per chunk of keys (upstream
 * client_service.cpp Put: PutStart, transfer, PutEnd / PutRevoke): write_start (one RPC),
 * write_transfer (one transfer set: write_replica queues one replica's requests, each
 * WRITE carrying the replica's fence epoch; write_own copies into our own segment under
 * its fence), write_finish (write_end for the written, write_revoke for the failed: safe
 * however late a write of ours lands, since the master quarantines a revoked put's
 * space until we and the owner have fenced it; docs/consistency.md), and for a put that
 * lost a race with another writer's put in flight, settle_contested (read your writes).
 * A chunk's put that a leader change, or an unmount of its target segment
 * (REPLICA_IS_GONE), explains is put once more from put_start (do_write).
 * Owns nothing of mc_store (reads it under life shared); must not read objects. */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/copy.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG MC__STORE_TAG
#define CHUNK_KEYS MC__CHUNK_KEYS
/* An item's status while its put lost the race for the key to a put in flight (never a
 * status code: those are <= 0). */
#define ST_CONTESTED 1

/* ---- replicate config -> the master's put config ---- */

static void pref_add(mc__put_cfg *p, const char *name)
{
    if (!name || !*name || p->m.n_preferred >= MC_MASTER_MAX_PREFERRED)
        return;
    for (size_t i = 0; i < p->m.n_preferred; i++)
        if (!strcmp(p->pref[i], name))
            return;
    p->pref[p->m.n_preferred++] = name;
}

int mc__put_cfg_conv(mc_store *s, const mc_store_replicate_config *c, size_t nkeys,
                     bool same_node_ok, mc__put_cfg *out)
{
    memset(out, 0, sizeof *out);
    out->m.replica_num = 1;
    out->m.preferred_segments = out->pref;
    if (!c)
        return MC_OK;
    const char *why = NULL;
    if (c->replica_num == 0)
        why = "replica_num must be >= 1";
    else if (c->nof_replica_num || c->dfs_replica_num)
        why = "NVMe-oF and DFS replicas are not supported (nof/dfs_replica_num must be 0)";
    else if (c->n_preferred_segments > MC_STORE_MAX_PREFERRED)
        why = "too many preferred_segments";
    else if (c->n_preferred_segments && !c->preferred_segments)
        why = "preferred_segments is NULL";
    else if (c->soft_pin_action < MC_STORE_SOFT_PIN_PRESERVE ||
             c->soft_pin_action > MC_STORE_SOFT_PIN_DISABLE)
        why = "soft_pin_action must be PRESERVE, ENABLE or DISABLE";
    else if (c->soft_pin_ttl_set && c->soft_pin_action != MC_STORE_SOFT_PIN_ENABLE &&
             !(c->soft_pin_action == MC_STORE_SOFT_PIN_PRESERVE && c->with_soft_pin))
        why = "soft_pin_ttl_ms is set but the soft pin is not enabled (soft_pin_action "
              "ENABLE or with_soft_pin; the master refuses a TTL otherwise, as upstream)";
    else if (c->prefer_alloc_in_same_node && !same_node_ok)
        why = "prefer_alloc_in_same_node is only accepted by the multi-buffer puts (as "
              "upstream)";
    else if ((c->group_ids || c->n_group_ids) && (!c->group_ids || c->n_group_ids != nkeys))
        why = "group_ids must have one entry per key";
    else if (c->preferred_segment && strlen(c->preferred_segment) >= MC_STORE_NAME_MAX)
        why = "preferred_segment is too long";
    for (size_t i = 0; !why && i < c->n_preferred_segments; i++)
        if (!c->preferred_segments[i] || !*c->preferred_segments[i] ||
            strlen(c->preferred_segments[i]) >= MC_STORE_NAME_MAX)
            why = "a preferred_segments entry is empty or too long";
    if (why) {
        mc_log(MC_LOG_WARN, TAG, "ReplicateConfig: %s", why);
        return MC_INVALID_PARAMS;
    }
    /* More replicas than the store can describe are capped, not refused (as upstream). */
    out->m.replica_num =
        c->replica_num > MC_STORE_MAX_REPLICAS ? MC_STORE_MAX_REPLICAS : c->replica_num;
    if (c->prefer_alloc_in_same_node)
        pref_add(out, s->name);
    for (size_t i = 0; i < c->n_preferred_segments; i++)
        pref_add(out, c->preferred_segments[i]);
    pref_add(out, c->preferred_segment);
    /* The legacy with_soft_pin flag means ENABLE unless an action was given. */
    int act = c->soft_pin_action;
    if (act == MC_STORE_SOFT_PIN_PRESERVE && c->with_soft_pin)
        act = MC_STORE_SOFT_PIN_ENABLE;
    out->m.soft_pin = (mc_master_soft_pin_action)act;
    out->m.soft_pin_ttl_set = c->soft_pin_ttl_set;
    out->m.soft_pin_ttl_ms = c->soft_pin_ttl_ms;
    out->m.with_hard_pin = c->with_hard_pin;
    out->m.strategy = MC_MASTER_STRATEGY_DEFAULT;
    return MC_OK;
}

/* ---- items ---- */

typedef struct witem {
    const void *key;
    size_t klen;
    const mc_store_iov *iov;
    size_t niov;
    mc_store_iov one; /* for single-buffer sources */
    uint64_t size;
    size_t first;     /* first position with the same key (== own index when unique) */
    int status;       /* result; INVALID_PARAMS etc. set before the RPCs */
    bool active;      /* goes to the master */
    bool master_lost; /* the put_revoke after a failed write reached no leader (RPC fail
                         or timeout, or only a standby / deposed master answered) */
} witem;

static uint64_t key_hash(const void *k, size_t n)
{
    const unsigned char *p = k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Marks, for every active item, the first position holding the same key; later ones
 * become inactive. */
static void dedupe(witem *it, size_t n)
{
    for (size_t i = 0; i < n; i++)
        it[i].first = i;
    if (n < 2)
        return;
    size_t cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    /* open addressing, linear probing, load <= 1/2; tab holds item indexes */
    size_t *tab = mc_xmalloc(cap * sizeof *tab);
    for (size_t i = 0; i < cap; i++)
        tab[i] = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (!it[i].active)
            continue;
        size_t j = (size_t)key_hash(it[i].key, it[i].klen) & (cap - 1);
        for (;;) {
            size_t t = tab[j];
            if (t == SIZE_MAX) {
                tab[j] = i;
                break;
            }
            if (it[t].klen == it[i].klen && !memcmp(it[t].key, it[i].key, it[i].klen)) {
                it[i].first = t;
                it[i].active = false;
                break;
            }
            j = (j + 1) & (cap - 1);
        }
    }
    free(tab);
}

/* ---- one chunk through the protocol: start, write, end or revoke ---- */

/* The state of one chunk (write_chunk). Arrays have m entries indexed by k, the position
 * in the chunk; the item is it[idx[k]]. */
typedef struct wchunk {
    mc_store *s;
    bool upsert;
    witem *it;
    const size_t *idx;
    size_t m;
    mc_master_key *keys;
    uint64_t *sizes;
    int *st;                      /* per-key codes of the last RPC */
    bool *skip;                   /* not started: refused, or (put) ALREADY_EXISTS */
    int *werr;                    /* started: 0 = every replica written, else why not */
    mc_master_replica_list *reps; /* where to write (the start RPC's reply) */
} wchunk;

/* put_start / upsert_start of keys[0..n) (one RPC, batched when n > 1): per-key codes
 * in st, replica lists in reps. */
static void start_call(mc_store *s, bool upsert, const mc_master_key *keys,
                       const uint64_t *sizes, size_t n, const mc_master_put_config *cfg,
                       mc_master_replica_list *reps, int *st)
{
    if (n == 1) {
        st[0] = upsert ? mc_master_client_upsert_start(s->mc, s->client_id, keys[0].data,
                                                       keys[0].len, sizes[0], cfg, &reps[0])
                       : mc_master_client_put_start(s->mc, s->client_id, keys[0].data,
                                                    keys[0].len, sizes[0], cfg, &reps[0]);
    } else if (upsert) {
        /* the call's own code is the first failure; the per-key codes carry everything */
        (void)mc_master_client_batch_upsert_start(s->mc, s->client_id, keys, sizes, n, cfg,
                                                  reps, st);
    } else {
        (void)mc_master_client_batch_put_start(s->mc, s->client_id, keys, sizes, n, cfg,
                                               reps, st);
    }
}

typedef struct restart_ctx {
    wchunk *c;
    const mc_master_put_config *cfg;
} restart_ctx;

/* the remount window (internal.h): put_start again for the keys refused NO_AVAILABLE_HANDLE */
static void restart_call(void *ctx, const size_t *map, size_t n, const mc_master_key *keys,
                         mc_master_replica_list *reps, int *st)
{
    restart_ctx *r = ctx;
    uint64_t *sizes = mc_xmalloc(n * sizeof *sizes);
    for (size_t j = 0; j < n; j++)
        sizes[j] = r->c->sizes[map[j]];
    start_call(r->c->s, r->c->upsert, keys, sizes, n, r->cfg, reps, st);
    free(sizes);
}

/* Step 1: put_start / upsert_start for the whole chunk (one RPC, batched when m > 1; in
 * the remount window the keys refused for want of space are asked again).
 * Marks the items that have nothing to write. Returns how many were started. */
static size_t write_start(wchunk *c, const mc_master_put_config *cfg)
{
    start_call(c->s, c->upsert, c->keys, c->sizes, c->m, cfg, c->reps, c->st);
    restart_ctx rc = {c, cfg};
    mc__remount_retry(c->s, MC_NO_AVAILABLE_HANDLE, c->keys, c->m, c->reps, c->st,
                      restart_call, &rc);
    size_t started = 0;
    for (size_t k = 0; k < c->m; k++) {
        witem *w = &c->it[c->idx[k]];
        if (c->st[k] == MC_OK) {
            w->status = MC_OK;
            started++;
        } else if (c->st[k] == MC_OBJECT_ALREADY_EXISTS && !c->upsert) {
            /* the old value stays (API.md §5): 0 once it is readable, which
             * settle_contested finds out (it may be another writer's put in flight) */
            w->status = ST_CONTESTED;
            c->skip[k] = true; /* nothing to write or end */
        } else {
            w->status = c->st[k];
            c->skip[k] = true;
        }
    }
    return started;
}

/* Copies the started items into the replicas that live in this client's own segment
 * (mc_copy_to_segment: streaming stores, common/copy.h); runs while the engine moves
 * the other replicas (mc__xfer_run's `during`). */
static void write_own(void *arg)
{
    wchunk *c = arg;
    for (size_t k = 0; k < c->m; k++) {
        witem *w = &c->it[c->idx[k]];
        if (c->skip[k] || c->werr[k] || w->status != MC_OK)
            continue;
        const mc_master_replica_list *rl = &c->reps[k];
        for (uint32_t r = 0; r < rl->n; r++) {
            const mc_master_replica *rp = &rl->replicas[r];
            if (rp->size == 0 || !mc__in_own_segment(c->s, rp->transport_endpoint, rp->address,
                                                     rp->size))
                continue;
            /* Our own segment's fence: a copy whose epoch was fenced (the master has
             * given this space up) must not run, and a fence waits for a copy in
             * progress (docs/consistency.md). */
            if (mc__own_fence_enter(c->s, rp->fence_epoch) != MC_OK) {
                c->werr[k] = MC_TRANSFER_FAIL;
                break;
            }
            /* the parts are laid out back to back in the replica */
            uint64_t off = 0;
            for (size_t p = 0; p < w->niov; p++) {
                if (w->iov[p].len)
                    mc_copy_to_segment((char *)(uintptr_t)rp->address + off,
                                       w->iov[p].base, (size_t)w->iov[p].len);
                off += w->iov[p].len;
            }
            mc__own_fence_leave(c->s);
        }
    }
}

/* One attempt on one replica: queues on x the requests that write item k's parts into
 * replica rp (a replica in our own segment is left to write_own). Returns MC_OK, or why
 * this replica cannot be written (the item then fails as a whole). */
static int write_replica(wchunk *c, mc__xfer *x, size_t k, mc_master_replica *rp)
{
    const witem *w = &c->it[c->idx[k]];
    rp->transport_endpoint[sizeof rp->transport_endpoint - 1] = '\0';
    if (rp->size != w->size)
        return MC_INTERNAL_ERROR; /* the master gave a wrong size */
    if (rp->size == 0 ||
        mc__in_own_segment(c->s, rp->transport_endpoint, rp->address, rp->size))
        return MC_OK; /* nothing to move, or write_own copies it */
    mc_te_segment_t h;
    if (mc__xfer_seg(x, rp->transport_endpoint, &h) != MC_OK)
        return MC_TRANSFER_FAIL;
    uint64_t off = 0;
    for (size_t p = 0; p < w->niov; p++) {
        mc__xfer_add_write(x, w->iov[p].base, h, rp->address + off, w->iov[p].len, k,
                           rp->fence_epoch);
        off += w->iov[p].len;
    }
    return MC_OK;
}

/* Step 2: writes every started item to all of its replicas in one transfer set (own
 * copies overlap it). werr[k] gets why item k failed, 0 when every replica was written. */
static void write_transfer(wchunk *c)
{
    mc__xfer x;
    mc__xfer_init(&x, c->s);
    for (size_t k = 0; k < c->m; k++) {
        if (c->skip[k])
            continue;
        mc_master_replica_list *rl = &c->reps[k];
        if (rl->n == 0) {
            c->werr[k] = MC_INTERNAL_ERROR; /* started with no replica: a master bug */
            continue;
        }
        /* The first replica that cannot be written fails the item; requests already
         * queued for its earlier replicas still run (the item is revoked anyway). */
        for (uint32_t r = 0; r < rl->n && !c->werr[k]; r++)
            c->werr[k] = write_replica(c, &x, k, &rl->replicas[r]);
    }
    mc__xfer_run(&x, c->werr, write_own, c);
    mc__xfer_deinit(&x);
}

/* Step 3a: put_end / upsert_end for the n written items keys[0..n) (chunk positions
 * pos[]); each item's status becomes the end's code. */
static void write_end(wchunk *c, const mc_master_key *keys, const size_t *pos, size_t n)
{
    mc_store *s = c->s;
    if (n == 1)
        c->st[0] = c->upsert ? mc_master_client_upsert_end(s->mc, s->client_id, keys[0].data,
                                                           keys[0].len)
                             : mc_master_client_put_end(s->mc, s->client_id, keys[0].data,
                                                        keys[0].len);
    else if (c->upsert)
        (void)mc_master_client_batch_upsert_end(s->mc, s->client_id, keys, n, c->st);
    else
        (void)mc_master_client_batch_put_end(s->mc, s->client_id, keys, n, c->st);
    for (size_t j = 0; j < n; j++)
        c->it[c->idx[pos[j]]].status = c->st[j];
}

/* Step 3b: put_revoke / upsert_revoke for the n items keys[0..n) whose write failed or
 * timed out, at once. Their status stays the write's failure; the revoke's own outcome is
 * only logged (the master also discards a put that is never ended). A slice of ours may
 * still land after this (queued at a stalled owner): the master keeps the space in
 * quarantine until the owner and we have applied the fence it raises (heartbeat.c). */
static void write_revoke(wchunk *c, const mc_master_key *keys, size_t n)
{
    mc_store *s = c->s;
    if (n == 1)
        c->st[0] = c->upsert ? mc_master_client_upsert_revoke(s->mc, s->client_id, keys[0].data,
                                                              keys[0].len)
                             : mc_master_client_put_revoke(s->mc, s->client_id, keys[0].data,
                                                           keys[0].len);
    else if (c->upsert)
        (void)mc_master_client_batch_upsert_revoke(s->mc, s->client_id, keys, n, c->st);
    else
        (void)mc_master_client_batch_put_revoke(s->mc, s->client_id, keys, n, c->st);
    for (size_t j = 0; j < n; j++)
        if (c->st[j] != MC_OK)
            mc_log(MC_LOG_DEBUG, TAG, "put_revoke after a failed write: %s",
                   mc_strerror(c->st[j]));
}

/* Whether code st of a put_revoke (or any master call) means the master did not answer. */
static bool master_unreached(int st)
{
    return st == MC_RPC_FAIL || st == MC_RPC_TIMEOUT;
}

/* Whether code st means no leader took the call: it did not answer, or only a standby
 * or a deposed master did (a new leader is being, or was, elected). */
static bool leader_unreached(int st)
{
    return master_unreached(st) || st == MC_UNAVAILABLE_IN_CURRENT_STATUS;
}

/* Step 3: sorts the started items into written (end) and failed (revoke). */
static void write_finish(wchunk *c)
{
    size_t m = c->m;
    mc_master_key *ek = mc_xmalloc(m * sizeof *ek), *rk = mc_xmalloc(m * sizeof *rk);
    size_t *ei = mc_xmalloc(m * sizeof *ei);
    size_t ne = 0, nr = 0;
    for (size_t k = 0; k < m; k++) {
        if (c->skip[k])
            continue;
        if (c->werr[k]) {
            c->it[c->idx[k]].status = c->werr[k];
            rk[nr++] = c->keys[k];
        } else {
            ek[ne] = c->keys[k];
            ei[ne++] = k;
        }
    }
    if (ne)
        write_end(c, ek, ei, ne);
    if (nr) {
        write_revoke(c, rk, nr);
        /* rk[j] is the j-th failed item in chunk order (the loop above) */
        for (size_t k = 0, j = 0; k < m && j < nr; k++)
            if (!c->skip[k] && c->werr[k]) {
                /* the target segment was unmounted under the write: that explains the
                 * failed transfer, and the put may go again (do_write) */
                if (c->st[j] == MC_REPLICA_IS_GONE)
                    c->it[c->idx[k]].status = MC_REPLICA_IS_GONE;
                c->it[c->idx[k]].master_lost = leader_unreached(c->st[j++]);
            }
    }
    free(ek);
    free(rk);
    free(ei);
}

/* Processes the active items idx[0..m) (a chunk): start, write, end / revoke. */
static void write_chunk(mc_store *s, bool upsert, witem *it, const size_t *idx, size_t m,
                        const mc_master_put_config *cfg)
{
    wchunk c = {
        .s = s,
        .upsert = upsert,
        .it = it,
        .idx = idx,
        .m = m,
        .keys = mc_xmalloc(m * sizeof(mc_master_key)),
        .sizes = mc_xmalloc(m * sizeof(uint64_t)),
        .st = mc_xmalloc(m * sizeof(int)),
        .skip = mc_xcalloc(m, sizeof(bool)),
        .werr = mc_xcalloc(m, sizeof(int)),
        .reps = mc_xmalloc(m * sizeof(mc_master_replica_list)), /* n set below; see
                                                                   read.c read_chunk */
    };
    for (size_t k = 0; k < m; k++) {
        c.keys[k] = (mc_master_key){it[idx[k]].key, it[idx[k]].klen};
        c.sizes[k] = it[idx[k]].size;
        c.reps[k].n = 0;
        c.reps[k].lease_ttl_ms = 0;
    }
    if (write_start(&c, cfg) > 0) {
        size_t first = 0;
        while (c.skip[first])
            first++;
        mc__store_hook(MC__STORE_HOOK_PUT_STARTED, c.keys[first].data, c.keys[first].len);
        write_transfer(&c);
        write_finish(&c);
    }
    free(c.keys);
    free(c.sizes);
    free(c.st);
    free(c.skip);
    free(c.werr);
    free(c.reps);
}

/* ---- a put that lost the race for its key (issue 10 fault 6) ---- */

/* The puts (not upserts) whose put_start found the key taken (ST_CONTESTED) return 0
 * only once the key is readable, so that a put returning 0 always means read-your-writes:
 * a complete object (the old value, kept as upstream does) -> 0 at once; another writer's
 * put in flight -> wait for its put_end, and when that put goes away instead (revoked,
 * discarded, its client expired) put ours. Bounded by race_wait_ms (the transfer
 * timeout: longer than a live writer's transfer may take); then REPLICA_IS_NOT_READY
 * (-703, "write in progress": the other put is still in flight, nothing of ours was
 * written). exist_key grants a read lease on the object, as any exist does. */
static void settle_contested(mc_store *s, witem *it, size_t n, const mc_master_put_config *cfg)
{
    size_t *idx = mc_xmalloc(n * sizeof *idx);
    mc_master_key *keys = mc_xmalloc(n * sizeof *keys);
    int *res = mc_xmalloc(n * sizeof *res);
    uint64_t deadline = 0, wait = 1;
    for (;;) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (it[i].active && it[i].status == ST_CONTESTED)
                idx[m++] = i;
        if (!m)
            break;
        for (size_t j = 0; j < m; j++)
            keys[j] = (mc_master_key){it[idx[j]].key, it[idx[j]].klen};
        int rc = m == 1 ? (res[0] = mc_master_client_exist_key(s->mc, keys[0].data,
                                                                 keys[0].len),
                           MC_OK)
                        : mc_master_client_batch_exist_key(s->mc, keys, m, res);
        size_t left = 0;
        for (size_t j = 0; j < m; j++) {
            witem *w = &it[idx[j]];
            int r = rc != MC_OK ? rc : res[j];
            if (r == 1)
                w->status = MC_OK; /* readable: the put's promise holds */
            else if (r < 0)
                w->status = r; /* cannot tell: say why */
            else
                idx[left++] = idx[j]; /* absent, or a put in flight */
        }
        if (!left)
            break;
        uint64_t now = mc_now_ms();
        if (!deadline)
            deadline = now + s->race_wait_ms;
        if (now >= deadline) {
            for (size_t j = 0; j < left; j++)
                it[idx[j]].status = MC_REPLICA_IS_NOT_READY;
            mc_log(MC_LOG_WARN, TAG,
                   "put: %zu key(s) still written by another client after %llu ms; not "
                   "stored (REPLICA_IS_NOT_READY)",
                   left, (unsigned long long)s->race_wait_ms);
            break;
        }
        mc_sleep_ms(wait);
        wait = wait * 2 > 50 ? 50 : wait * 2;
        /* again: the other put may be gone (then ours goes in), or still in flight */
        for (size_t c = 0; c < left; c += CHUNK_KEYS)
            write_chunk(s, false, it, idx + c, left - c < CHUNK_KEYS ? left - c : CHUNK_KEYS,
                        cfg);
    }
    free(idx);
    free(keys);
    free(res);
}

/* The codes of a put that a leader change can explain (do_write): the call to the old
 * leader failed, the new one does not know the put's start, or the transfer failed (the
 * promotion fenced the range being written: the owner then refuses the slices). */
static bool redo_after_switch(int st)
{
    return st == MC_OBJECT_NOT_FOUND || leader_unreached(st) || st == MC_TRANSFER_FAIL;
}

/* Whether some of the put's items failed in a way a leader change explains and the view
 * moved past v0 (the view when the put began): at once when it moved already; when the
 * master did not answer (a call, or the put_revoke after a failed transfer) and no new
 * view is known yet, it waits for one, polling every MC__REMOUNT_POLL_MS for at most
 * MC__REMOUNT_WINDOW_MS (about an election). A transfer that failed while the view
 * stayed put (a dead owner) is not done again. */
static bool switch_settled(mc_store *s, const witem *it, const size_t *idx, size_t m,
                           int64_t v0)
{
    bool any = false, gone = false;
    for (size_t k = 0; k < m; k++) {
        const witem *w = &it[idx[k]];
        any |= redo_after_switch(w->status);
        gone |= leader_unreached(w->status) || (w->status == MC_TRANSFER_FAIL && w->master_lost);
    }
    if (!any)
        return false;
    uint64_t t0 = mc_now_ms();
    while (mc_master_client_view(s->mc) <= v0) {
        if (!gone || mc_now_ms() - t0 >= MC__REMOUNT_WINDOW_MS)
            return false;
        mc_sleep_ms(MC__REMOUNT_POLL_MS);
    }
    return true;
}

/* Whether item w is put once more from put_start after its first attempt (do_write):
 * its segment was unmounted under it (REPLICA_IS_GONE: from put_end, or from the
 * put_revoke after the transfer failed), or a leader change explains its failure and
 * the view moved (switched: switch_settled). */
static bool redo_once(const witem *w, bool switched)
{
    return w->status == MC_REPLICA_IS_GONE || (switched && redo_after_switch(w->status));
}

/* Runs the write protocol for items[0..n) whose status is MC_OK (the others keep their
 * status). Caller holds life shared. */
static void do_write(mc_store *s, bool upsert, witem *it, size_t n,
                     const mc_master_put_config *cfg)
{
    /* A key given twice in one call is written once (at its first position); the
     * later positions copy that one's result at the end. */
    for (size_t i = 0; i < n; i++)
        it[i].active = it[i].status == MC_OK;
    dedupe(it, n);
    size_t *idx = mc_xmalloc((n ? n : 1) * sizeof *idx);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].active)
            idx[m++] = i;
    int64_t v0 = mc_master_client_view(s->mc); /* 0: not HA */
    for (size_t c = 0; c < m; c += CHUNK_KEYS)
        write_chunk(s, upsert, it, idx + c, m - c < CHUNK_KEYS ? m - c : CHUNK_KEYS, cfg);
    /* Once more from put_start, at most once per call, for two causes:
     * - A leader change during the put (docs/ha.md "The remount window"): a put whose
     *   put_start or put_end reached the old leader and failed (the call failed, or the
     *   new leader never saw the start: OBJECT_NOT_FOUND) goes again through the new
     *   leader. Safe: the first attempt never became readable there (a complete copy
     *   would make the new put_start find the key: ST_CONTESTED, settled below), and its
     *   range is quarantined by the promotion, never reused under us.
     * - The put's target segment was unmounted while it was in flight (its owner closed:
     *   issue 17; REPLICA_IS_GONE from put_end, or from the revoke of a transfer that
     *   failed): the master placed it on another segment next time, or says why not
     *   (NO_AVAILABLE_HANDLE, ...). Safe: the caller's bytes are still in its buffers;
     *   the first attempt is nothing at the master (never readable), and its range went
     *   away with the segment's allocator, so no other put is placed under a late slice
     *   of it while that memory stays unmounted (docs/consistency.md "Unmount under a
     *   put"). */
    bool switched = m && v0 > 0 && switch_settled(s, it, idx, m, v0);
    size_t r = 0, ngone = 0;
    for (size_t k = 0; k < m; k++)
        if (redo_once(&it[idx[k]], switched)) {
            ngone += it[idx[k]].status == MC_REPLICA_IS_GONE;
            it[idx[k]].status = MC_OK;
            it[idx[k]].master_lost = false;
            idx[r++] = idx[k];
        }
    if (ngone)
        mc_log(MC_LOG_WARN, TAG,
               "%s: %zu key(s) lost their target segment to an unmount while in flight "
               "(REPLICA_IS_GONE: its owner closed or unmounted it); putting them once "
               "more from put_start",
               upsert ? "upsert" : "put", ngone);
    for (size_t c = 0; c < r; c += CHUNK_KEYS)
        write_chunk(s, upsert, it, idx + c, r - c < CHUNK_KEYS ? r - c : CHUNK_KEYS, cfg);
    if (!upsert && m)
        settle_contested(s, it, n, cfg);
    for (size_t i = 0; i < n; i++)
        if (it[i].first != i)
            it[i].status = it[it[i].first].status;
    free(idx);
}

/* ---- the public calls ---- */

/* Checks parts and sums their lengths; MC_OK or MC_INVALID_PARAMS. */
static int iov_total(const mc_store_iov *iov, size_t n, uint64_t *total)
{
    if (n > MC_STORE_MAX_PARTS || (n && !iov))
        return MC_INVALID_PARAMS;
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) {
        if (iov[i].len && !iov[i].base)
            return MC_INVALID_PARAMS;
        if (iov[i].len > MC_STORE_MAX_SEGMENT_SIZE || t + iov[i].len > MC_STORE_MAX_SEGMENT_SIZE)
            return MC_INVALID_PARAMS;
        t += iov[i].len;
    }
    *total = t;
    return MC_OK;
}

static int write_single(mc_store *s, bool upsert, const void *key, size_t key_len,
                        const mc_store_iov *parts, size_t nparts,
                        const mc_store_replicate_config *cfg)
{
    if (!mc__store_key_ok(key, key_len)) {
        mc_log(MC_LOG_WARN, TAG, "put: the key must be 1..%u bytes (got %zu)",
               MC_STORE_KEY_MAX, key ? key_len : 0);
        return MC_INVALID_PARAMS;
    }
    witem w = {.key = key, .klen = key_len, .iov = parts, .niov = nparts};
    if (iov_total(parts, nparts, &w.size) != MC_OK ||
        mc__check_ranges(s, parts, nparts, upsert ? "upsert" : "put", 0, NULL) != MC_OK)
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    mc__put_cfg pc;
    rc = mc__put_cfg_conv(s, cfg, 1, false, &pc);
    if (rc == MC_OK) {
        w.status = MC_OK;
        do_write(s, upsert, &w, 1, &pc.m);
        rc = w.status;
    }
    mc__cstats_count(s, MC__OP_PUT, rc, w.size); /* client_http.c's counters */
    mc__store_leave(s);
    return rc;
}

int mc_store_put(mc_store *s, const void *key, size_t key_len, const void *value, size_t len,
                 const mc_store_replicate_config *cfg)
{
    if (len && !value)
        return MC_INVALID_PARAMS;
    mc_store_iov one = {(void *)(uintptr_t)value, len};
    return write_single(s, false, key, key_len, &one, 1, cfg);
}

int mc_store_put_parts(mc_store *s, const void *key, size_t key_len, const mc_store_iov *parts,
                       size_t nparts, const mc_store_replicate_config *cfg)
{
    return write_single(s, false, key, key_len, parts, nparts, cfg);
}

int mc_store_upsert(mc_store *s, const void *key, size_t key_len, const void *value, size_t len,
                    const mc_store_replicate_config *cfg)
{
    if (len && !value)
        return MC_INVALID_PARAMS;
    mc_store_iov one = {(void *)(uintptr_t)value, len};
    return write_single(s, true, key, key_len, &one, 1, cfg);
}

int mc_store_upsert_parts(mc_store *s, const void *key, size_t key_len,
                          const mc_store_iov *parts, size_t nparts,
                          const mc_store_replicate_config *cfg)
{
    return write_single(s, true, key, key_len, parts, nparts, cfg);
}

/* Batch writes: values/sizes (single buffers) or iovs/iovcnt (multi). */
static int write_batch(mc_store *s, bool upsert, const mc_store_key *keys, size_t n,
                       const void *const *values, const uint64_t *sizes,
                       const mc_store_iov *const *iovs, const size_t *iovcnt,
                       const mc_store_replicate_config *cfg, bool same_node_ok, int *results)
{
    if (!results)
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    if (n > MC_STORE_MAX_BATCH || !keys || (!iovs && (!values || !sizes)) ||
        (iovs && !iovcnt)) {
        mc__fill_results(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    int rc = mc__store_enter_batch(s, results, n);
    if (rc != MC_OK)
        return rc;
    mc__put_cfg pc;
    rc = mc__put_cfg_conv(s, cfg, n, same_node_ok, &pc);
    if (rc != MC_OK) {
        mc__store_leave(s);
        mc__fill_results(results, n, rc);
        return rc;
    }
    witem *it = mc_xcalloc(n, sizeof *it);
    bool logged = false;
    for (size_t i = 0; i < n; i++) {
        witem *w = &it[i];
        w->key = keys[i].data;
        w->klen = keys[i].len;
        w->status = mc__store_key_ok(w->key, w->klen) ? MC_OK : MC_INVALID_PARAMS;
        if (iovs) {
            w->iov = iovs[i];
            w->niov = iovcnt[i];
        } else {
            w->one = (mc_store_iov){(void *)(uintptr_t)values[i], sizes[i]};
            w->iov = &w->one;
            w->niov = 1;
        }
        if (w->status == MC_OK && iov_total(w->iov, w->niov, &w->size) != MC_OK)
            w->status = MC_INVALID_PARAMS;
        if (w->status == MC_OK &&
            mc__check_ranges(s, w->iov, w->niov, upsert ? "batch upsert" : "batch put", i,
                         &logged) != MC_OK)
            w->status = MC_INVALID_PARAMS;
    }
    /* Items refused above keep their status; do_write runs the others. */
    do_write(s, upsert, it, n, &pc.m);
    for (size_t i = 0; i < n; i++) {
        results[i] = it[i].status;
        mc__cstats_count(s, MC__OP_PUT, it[i].status, it[i].size);
    }
    free(it);
    mc__store_leave(s);
    return MC_OK;
}

int mc_store_batch_put_from(mc_store *s, const mc_store_key *keys, size_t n,
                            const void *const *values, const uint64_t *sizes,
                            const mc_store_replicate_config *cfg, int *results)
{
    return write_batch(s, false, keys, n, values, sizes, NULL, NULL, cfg, false, results);
}

int mc_store_batch_put_from_multi_buffers(mc_store *s, const mc_store_key *keys, size_t n,
                                          const mc_store_iov *const *iovs, const size_t *iovcnt,
                                          const mc_store_replicate_config *cfg, int *results)
{
    return write_batch(s, false, keys, n, NULL, NULL, iovs, iovcnt, cfg, true, results);
}

int mc_store_batch_upsert_from(mc_store *s, const mc_store_key *keys, size_t n,
                               const void *const *values, const uint64_t *sizes,
                               const mc_store_replicate_config *cfg, int *results)
{
    return write_batch(s, true, keys, n, values, sizes, NULL, NULL, cfg, false, results);
}

int mc_store_batch_upsert_from_multi_buffers(mc_store *s, const mc_store_key *keys, size_t n,
                                             const mc_store_iov *const *iovs,
                                             const size_t *iovcnt,
                                             const mc_store_replicate_config *cfg,
                                             int *results)
{
    return write_batch(s, true, keys, n, NULL, NULL, iovs, iovcnt, cfg, true, results);
}
