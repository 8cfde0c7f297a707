/* segments.c: the segment slot table (mount, remount, unmount, listing) and the client
 * table (heartbeats, expiry, which unmounts an expired client's segments). It is the only
 * file that takes seg_lock for writing or touches the client table; it never gives space
 * back to an allocator (an unmounted segment's allocator is destroyed whole). Layout and
 * locks: master/internal.h. */
#include "master/internal.h"

#include "mooncake/log.h"

#define REMOUNT_MAX 65536u

/* ---- clients ---- */

void mc__client_touch(mc_master_service *svc, mc_master_uuid id, uint64_t now)
{
    pthread_mutex_lock(&svc->client_mu);
    /* a linear scan: clients are few (one per store process) and touched on mount and
     * remount only; heartbeats go through ping */
    size_t i;
    for (i = 0; i < svc->nclients; i++)
        if (uuid_eq(svc->clients[i].id, id))
            break;
    if (i == svc->nclients) {
        if (svc->nclients == svc->clients_cap) {
            svc->clients_cap = svc->clients_cap ? svc->clients_cap * 2 : 16;
            svc->clients = mc_xrealloc(svc->clients, svc->clients_cap * sizeof(*svc->clients));
        }
        svc->clients[svc->nclients++].id = id;
    }
    svc->clients[i].deadline = now + svc->client_ttl_ms;
    svc->clients[i].graced = false;
    pthread_mutex_unlock(&svc->client_mu);
    mc__seg_confirm(svc, id); /* a restored client's segments are served again */
    mc__fence_writer_state(svc, id, false); /* back: it will acknowledge its fences */
}

void mc__clients_refresh(mc_master_service *svc, uint64_t now)
{
    pthread_mutex_lock(&svc->client_mu);
    for (size_t i = 0; i < svc->nclients; i++)
        if (svc->clients[i].deadline < now + svc->client_ttl_ms)
            svc->clients[i].deadline = now + svc->client_ttl_ms;
    pthread_mutex_unlock(&svc->client_mu);
    atomic_store_explicit(&svc->last_tick, now, memory_order_relaxed); /* not a stall */
}

/* The tick is overdue by more than the stall threshold: the master (or its tick thread)
 * is stalled or has just resumed, and the tick that notices it has not run yet. */
static bool tick_overdue(mc_master_service *svc, uint64_t now)
{
    uint64_t last = cget(&svc->last_tick);
    return svc->stall_ms && now > last && now - last > svc->stall_ms;
}

void mc__grace_clients(mc_master_service *svc, uint64_t now, uint64_t gap_ms)
{
    size_t n = 0, total;
    uint64_t until = now + svc->client_ttl_ms;
    pthread_mutex_lock(&svc->client_mu);
    total = svc->nclients;
    for (size_t i = 0; i < svc->nclients; i++) {
        client_rec *c = &svc->clients[i];
        if (c->graced || c->deadline >= until)
            continue; /* graced already and silent since, or its deadline is later */
        c->deadline = until;
        c->graced = true;
        n++;
    }
    pthread_mutex_unlock(&svc->client_mu);
    mc_log(MC_LOG_WARN, TAG,
           "the master was stalled for %llu ms (no housekeeping turn for longer than %llu "
           "ms: SIGSTOP, a paused VM or swapping?): %zu of %zu client(s) get a grace of "
           "one client_ttl (%llu ms) before they can expire",
           (unsigned long long)gap_ms, (unsigned long long)svc->stall_ms, n, total,
           (unsigned long long)svc->client_ttl_ms);
}

/* Whether client id owns a segment restored and not confirmed yet. */
static bool client_has_pending(mc_master_service *svc, mc_master_uuid id)
{
    bool any = false;
    pthread_rwlock_rdlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots && !any; i++) {
        seg *s = svc->segs[i];
        any = s && s->pending && uuid_eq(s->client, id);
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    return any;
}

int mc_master_service_ping(mc_master_service *svc, mc_master_uuid client_id,
                           mc_master_ping_result *out)
{
    return mc_master_service_ping_fences(svc, client_id, NULL, out);
}

int mc_master_service_ping_fences(mc_master_service *svc, mc_master_uuid client_id,
                                  const mc_master_ping_request *req,
                                  mc_master_ping_result *out)
{
    if (req && (req->n_owner_acks > MC_MASTER_MAX_FENCES ||
                req->n_writer_acks > MC_MASTER_MAX_FENCES ||
                (req->n_owner_acks && !req->owner_acks) ||
                (req->n_writer_acks && !req->writer_acks))) {
        count_op(svc, MC_MASTER_OP_PING, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    if (req)
        for (size_t i = 0; i < req->n_writer_acks; i++)
            if (strnlen(req->writer_acks[i].segment, MC_MASTER_NAME_MAX) >=
                MC_MASTER_NAME_MAX) {
                count_op(svc, MC_MASTER_OP_PING, MC_INVALID_PARAMS);
                return MC_INVALID_PARAMS;
            }
    uint64_t now = now_ms(svc);
    int status = MC_MASTER_CLIENT_NEED_REMOUNT;
    pthread_mutex_lock(&svc->client_mu);
    for (size_t i = 0; i < svc->nclients; i++) {
        if (uuid_eq(svc->clients[i].id, client_id)) {
            /* a client past its deadline but not yet expired by tick must remount too:
             * tick is about to drop its segments. Except while the tick is overdue past
             * the stall threshold: the master itself was stalled, this ping was queued
             * meanwhile, and the tick that notices the stall will not expire a client
             * that pinged (its deadline is extended here first). */
            if (svc->clients[i].deadline > now || tick_overdue(svc, now)) {
                svc->clients[i].deadline = now + svc->client_ttl_ms;
                svc->clients[i].graced = false;
                status = MC_MASTER_CLIENT_OK;
            }
            break;
        }
    }
    pthread_mutex_unlock(&svc->client_mu);
    /* A restored client (snapshot.c) must remount before its segments are served
     * again: the remount also makes it republish its segment descriptor, which a
     * master-embedded metadata server lost with the previous master. */
    if (status == MC_MASTER_CLIENT_OK && cget(&svc->npending) &&
        client_has_pending(svc, client_id))
        status = MC_MASTER_CLIENT_NEED_REMOUNT;
    /* fences go to any caller, NEED_REMOUNT too: a writer that comes back under its id
     * after expiring gets its pending ones with its first ping */
    mc__fence_ping(svc, client_id, req, out, now);
    if (out) {
        out->view_version = 0;
        out->client_status = status;
        out->tasks_pending = mc__tasks_pending_for(svc, client_id); /* tasks.c */
    }
    count_op(svc, MC_MASTER_OP_PING, MC_OK);
    return MC_OK;
}

/* ---- mount ---- */

static bool str_ok(const char *s, size_t max, bool required)
{
    if (!s || !*s)
        return !required;
    return strnlen(s, max) < max;
}

void mc__seg_free(seg *s)
{
    mc__alloc_destroy(s->alloc);
    pthread_mutex_destroy(&s->mu);
    free(s->strings);
    free(s);
}

static void unmount_mark_locked(mc_master_service *svc, seg *s);
static void unmount_finish(mc_master_service *svc, uint32_t slot);

/* cfg.check_segments, under the table's write lock: s (not in the table yet, its id not
 * mounted) against every live segment. A segment's client is live while it is mounted
 * (an expired client's segments are unmounted at its expiry). */
static int check_against_live(mc_master_service *svc, const seg *s)
{
    for (uint32_t i = 0; i < svc->nslots; i++) {
        const seg *o = svc->segs[i];
        if (!o || o->unmounting)
            continue;
        bool mine = uuid_eq(o->client, s->client);
        if (mine && s->base < o->base + o->size && o->base < s->base + s->size) {
            mc_log(MC_LOG_WARN, TAG,
                   "mount of segment %s [0x%llx, +%llu) by client %016llx%016llx refused: it "
                   "overlaps its segment %s [0x%llx, +%llu)", s->name,
                   (unsigned long long)s->base, (unsigned long long)s->size,
                   (unsigned long long)s->client.first, (unsigned long long)s->client.second,
                   o->name, (unsigned long long)o->base, (unsigned long long)o->size);
            return MC_INVALID_PARAMS;
        }
        if (!mine && o->name_hash == s->name_hash && !strcmp(o->name, s->name) &&
            !(*s->host_id && !strcmp(o->host_id, s->host_id))) {
            mc_log(MC_LOG_WARN, TAG,
                   "mount of segment %s by client %016llx%016llx refused: the name is "
                   "mounted by live client %016llx%016llx %s", s->name,
                   (unsigned long long)s->client.first, (unsigned long long)s->client.second,
                   (unsigned long long)o->client.first, (unsigned long long)o->client.second,
                   *s->host_id ? "from another host" : "(and this mount names no host)");
            return MC_ILLEGAL_CLIENT;
        }
    }
    return MC_OK;
}

static int mount_one(mc_master_service *svc, const mc_master_segment *d, mc_master_uuid client)
{
    if (!d || !str_ok(d->name, MC_MASTER_NAME_MAX, true) ||
        !str_ok(d->te_endpoint, MC_MASTER_NAME_MAX, false) ||
        !str_ok(d->protocol, MC_MASTER_PROTOCOL_MAX, false) ||
        !str_ok(d->host_id, MC_MASTER_NAME_MAX, false) || d->size == 0 ||
        d->size > MC_MASTER_SEGMENT_MAX_SIZE || d->base > UINT64_MAX - d->size)
        return MC_INVALID_PARAMS;
    if (svc->cfg.check_segments && d->base == 0) {
        mc_log(MC_LOG_WARN, TAG, "mount of segment %s by client %016llx%016llx refused: "
               "base address 0 (no mapped memory starts there)", d->name,
               (unsigned long long)client.first, (unsigned long long)client.second);
        return MC_INVALID_PARAMS;
    }
    /* defaults: the endpoint is the segment name, the protocol tcp */
    const char *ep = d->te_endpoint && *d->te_endpoint ? d->te_endpoint : d->name;
    const char *proto = d->protocol && *d->protocol ? d->protocol : "tcp";
    const char *host = d->host_id ? d->host_id : "";
    size_t ln = strlen(d->name) + 1, le = strlen(ep) + 1, lp = strlen(proto) + 1,
           lh = strlen(host) + 1;

    /* Build the whole record before taking the table lock: the four strings in one
     * buffer, the allocator over [base, base + size). */
    seg *s = mc_xcalloc(1, sizeof(*s));
    s->strings = mc_xmalloc(ln + le + lp + lh);
    char *p = s->strings;
    memcpy(p, d->name, ln);
    s->name = p;
    memcpy(p += ln, ep, le);
    s->endpoint = p;
    memcpy(p += le, proto, lp);
    s->protocol = p;
    memcpy(p += lp, host, lh);
    s->host_id = p;
    s->name_hash = XXH3_64bits(s->name, ln - 1);
    s->ep_hash = XXH3_64bits(s->endpoint, le - 1);
    s->id = d->id;
    s->client = client;
    s->base = d->base;
    s->size = d->size;
    s->alloc = mc__alloc_create(d->base, d->size, svc->cfg.alloc_alignment);
    s->capacity = mc__alloc_capacity(s->alloc);
    pthread_mutex_init(&s->mu, NULL);

    pthread_rwlock_wrlock(&svc->seg_lock);
    /* one pass: refuse a duplicate id and remember the first free slot */
    uint32_t freeslot = UINT32_MAX;
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *o = svc->segs[i];
        if (!o) {
            if (freeslot == UINT32_MAX)
                freeslot = i;
        } else if (uuid_eq(o->id, d->id)) {
            pthread_rwlock_unlock(&svc->seg_lock);
            mc__seg_free(s);
            return MC_SEGMENT_ALREADY_EXISTS;
        }
    }
    if (svc->cfg.check_segments) {
        int rc = check_against_live(svc, s);
        if (rc != MC_OK) {
            pthread_rwlock_unlock(&svc->seg_lock);
            mc__seg_free(s);
            return rc;
        }
    }
    if (freeslot == UINT32_MAX) {
        if (svc->nslots == svc->slots_cap) {
            svc->slots_cap = svc->slots_cap ? svc->slots_cap * 2 : 16;
            svc->segs = mc_xrealloc(svc->segs, svc->slots_cap * sizeof(*svc->segs));
        }
        freeslot = svc->nslots++;
    }
    svc->segs[freeslot] = s;
    svc->nmounted++;
    mc__log_mount(svc, s);
    cadd(&svc->capacity, s->capacity);
    /* A segment of the same name and host mounted by another client belonged to a
     * previous engine of that name on that host: the name (its metadata entries, or in
     * P2P mode the bound port it is made of) now leads to the new engine, which took it
     * over only after finding the old one gone. The old segment's replicas would be read
     * from, and written to, the new process at the old addresses: unmount it now rather
     * than at its client's expiry. Its client's expiry then names no segment, so
     * --enable_metadata_cleanup_on_timeout does not delete the new owner's keys. An
     * unknown host (empty host id) proves nothing: left alone. */
    uint32_t stale[8], nstale = 0;
    if (*s->host_id) {
        for (uint32_t i = 0; i < svc->nslots && nstale < 8; i++) {
            seg *o = svc->segs[i];
            if (o && o != s && !o->unmounting && !uuid_eq(o->client, client) &&
                o->name_hash == s->name_hash && !strcmp(o->name, s->name) &&
                !strcmp(o->host_id, s->host_id)) {
                mc_log(MC_LOG_WARN, TAG,
                       "segment %s mounted by client %016llx%016llx from the same host as "
                       "client %016llx%016llx's: unmounting the older one (a previous "
                       "engine of that name)",
                       s->name, (unsigned long long)client.first,
                       (unsigned long long)client.second, (unsigned long long)o->client.first,
                       (unsigned long long)o->client.second);
                unmount_mark_locked(svc, o);
                stale[nstale++] = i;
            }
        }
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    for (uint32_t k = 0; k < nstale; k++)
        unmount_finish(svc, stale[k]); /* without the table lock: it takes shard mutexes */
    return MC_OK;
}

int mc__seg_restore(mc_master_service *svc, const mc_master_segment *d, mc_master_uuid client,
                    uint32_t *slot)
{
    int rc = mount_one(svc, d, client);
    if (rc != MC_OK)
        return rc;
    pthread_rwlock_wrlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *s = svc->segs[i];
        if (s && !s->unmounting && uuid_eq(s->id, d->id)) {
            if (!s->pending) {
                s->pending = true;
                cadd(&svc->npending, 1);
            }
            *slot = i;
            break;
        }
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    return MC_OK;
}

void mc__seg_confirm(mc_master_service *svc, mc_master_uuid id)
{
    if (!cget(&svc->npending))
        return;
    pthread_rwlock_wrlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *s = svc->segs[i];
        if (s && s->pending && uuid_eq(s->client, id)) {
            s->pending = false;
            csub(&svc->npending, 1);
            mc_log(MC_LOG_INFO, TAG, "restored segment %s: its owner is back, served again",
                   s->name);
        }
    }
    pthread_rwlock_unlock(&svc->seg_lock);
}

int mc_master_service_mount_segment(mc_master_service *svc, const mc_master_segment *seg_desc,
                                    mc_master_uuid client_id)
{
    int rc = mount_one(svc, seg_desc, client_id);
    if (rc == MC_OK || rc == MC_SEGMENT_ALREADY_EXISTS)
        mc__client_touch(svc, client_id, now_ms(svc));
    count_op(svc, MC_MASTER_OP_MOUNT_SEGMENT, rc);
    return rc;
}

int mc_master_service_remount_segments(mc_master_service *svc, const mc_master_segment *segs,
                                       size_t n, mc_master_uuid client_id)
{
    int rc = MC_OK;
    if (n > REMOUNT_MAX || (n && !segs)) {
        rc = MC_INVALID_PARAMS;
    } else {
        /* the client is alive first, so a remount with no segments re-registers it */
        mc__client_touch(svc, client_id, now_ms(svc));
        for (size_t i = 0; i < n; i++) {
            int r = mount_one(svc, &segs[i], client_id);
            if (r != MC_OK && r != MC_SEGMENT_ALREADY_EXISTS) {
                rc = r;
                break;
            }
        }
    }
    count_op(svc, MC_MASTER_OP_REMOUNT_SEGMENT, rc);
    return rc;
}

/* ---- unmount ---- */

/* Drops every replica on `slot` from the objects of one shard (space is not given back:
 * the allocator goes away); objects left without replicas are erased. A put in flight
 * left without a replica is kept on the shard's gone list (its key and writer): its
 * writer's put_end or put_revoke then answers REPLICA_IS_GONE (writes.c do_end), which
 * tells the writer to put again from put_start (client/write.c do_write), rather than
 * OBJECT_NOT_FOUND. One that keeps a replica elsewhere stays in flight with fewer
 * replicas, and its put_end publishes those. */
static void drop_slot(mc_master_service *svc, shard *sh, uint32_t slot)
{
    objvec gone = {0};
    pthread_mutex_lock(&sh->mu);
    uint64_t now = now_ms(svc);
    for (uint32_t b = 0; b <= sh->mask; b++) {
        obj *o = slot_obj(sh->slots[b]);
        if (!o)
            continue;
        uint32_t j = 0;
        for (uint32_t i = 0; i < o->nrep; i++)
            if (o->reps[i].seg != slot)
                o->reps[j++] = o->reps[i];
        uint32_t dropped = o->nrep - j;
        if (!dropped)
            continue;
        uint8_t *key = okey(o);
        memmove(o->reps + j, key, o->key_len); /* the key follows the replicas */
        if (o->flags & F_PROC)
            csub(&svc->proc_bytes, o->size * dropped);
        o->nrep = (uint8_t)j;
        if (!j && (o->flags & F_DISK))
            mc__offload_disk_only(svc, o); /* its disk replica stays (offload.c) */
        else if (!j) /* removed after the walk: a removal moves entries between slots */
            mc__objvec_push(&gone, o);
    }
    for (size_t k = 0; k < gone.n; k++) {
        obj *o = gone.v[k];
        mc__ht_remove(sh, o);
        obj_unlist(o);
        mc__account_gone(svc, o);
        if (o->flags & F_PROC) {
            o->atime = now; /* the unmount: when the tick may forget it */
            mc_list_push_back(&sh->gone, &o->link);
        } else {
            free(o);
        }
    }
    pthread_mutex_unlock(&sh->mu);
    free(gone.v);
}

/* Unmounts the segment in `slot`, which the caller marked unmounting: the slot stays
 * taken (so no mount reuses it) until no replica names it any more. */
static void unmount_finish(mc_master_service *svc, uint32_t slot)
{
    for (uint32_t i = 0; i < svc->nshards; i++)
        drop_slot(svc, &svc->shards[i], slot);
    mc__defer_drop_slot(svc, slot);
    mc__quarantine_drop_slot(svc, slot); /* its memory is gone with it */
    pthread_rwlock_wrlock(&svc->seg_lock);
    seg *s = svc->segs[slot];
    svc->segs[slot] = NULL;
    pthread_rwlock_unlock(&svc->seg_lock);
    mc__seg_free(s);
}

/* Marks the segment unmounting (under the write lock): placement skips it from now on,
 * and its capacity and reserved bytes leave the global gauges at once. The caller then
 * finishes with unmount_finish. */
static void unmount_mark_locked(mc_master_service *svc, seg *s)
{
    mc__log_unmount(svc, s);
    if (s->pending) {
        s->pending = false;
        csub(&svc->npending, 1);
    }
    s->unmounting = true;
    svc->nmounted--;
    csub(&svc->capacity, s->capacity);
    csub(&svc->allocated, cget(&s->used));
}

int mc_master_service_unmount_segment_grace(mc_master_service *svc, mc_master_uuid segment_id,
                                            mc_master_uuid client_id, uint64_t grace_ms)
{
    int rc = MC_SEGMENT_NOT_FOUND;
    uint32_t slot = 0;
    if (grace_ms > MC_MASTER_MAX_UNMOUNT_GRACE_MS) {
        count_op(svc, MC_MASTER_OP_UNMOUNT_SEGMENT, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    uint64_t now = now_ms(svc);
    pthread_rwlock_wrlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *s = svc->segs[i];
        if (s && !s->unmounting && uuid_eq(s->id, segment_id)) {
            if (!uuid_eq(s->client, client_id)) {
                rc = MC_ILLEGAL_CLIENT;
            } else {
                unmount_mark_locked(svc, s);
                /* graceful: the tick (mc__graceful_unmount_reap) finishes it later */
                s->grace_deadline = grace_ms ? now + grace_ms : 0;
                slot = i;
                rc = MC_OK;
            }
            break;
        }
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    if (rc == MC_OK && !grace_ms)
        unmount_finish(svc, slot); /* without the table lock: it takes shard mutexes */
    count_op(svc, MC_MASTER_OP_UNMOUNT_SEGMENT, rc);
    return rc;
}

int mc_master_service_unmount_segment(mc_master_service *svc, mc_master_uuid segment_id,
                                      mc_master_uuid client_id)
{
    return mc_master_service_unmount_segment_grace(svc, segment_id, client_id, 0);
}

void mc__graceful_unmount_reap(mc_master_service *svc, uint64_t now)
{
    uint32_t due[16];
    for (;;) {
        uint32_t n = 0;
        /* claim (deadline to 0) under the write lock, finish without it */
        pthread_rwlock_wrlock(&svc->seg_lock);
        for (uint32_t i = 0; i < svc->nslots && n < 16; i++) {
            seg *s = svc->segs[i];
            if (s && s->unmounting && s->grace_deadline && s->grace_deadline <= now) {
                s->grace_deadline = 0;
                due[n++] = i;
            }
        }
        pthread_rwlock_unlock(&svc->seg_lock);
        for (uint32_t k = 0; k < n; k++)
            unmount_finish(svc, due[k]);
        if (n < 16)
            return;
    }
}

int mc__seg_unmount_id(mc_master_service *svc, mc_master_uuid id)
{
    uint32_t slot = UINT32_MAX;
    pthread_rwlock_wrlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *s = svc->segs[i];
        if (s && !s->unmounting && uuid_eq(s->id, id)) {
            unmount_mark_locked(svc, s);
            slot = i;
            break;
        }
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    if (slot == UINT32_MAX)
        return MC_SEGMENT_NOT_FOUND;
    unmount_finish(svc, slot);
    return MC_OK;
}

/* ---- expiry ---- */

/* Adds name to the set names[0..*n) unless it is there. */
static void name_set_add(char ***names, size_t *n, const char *name)
{
    for (size_t j = 0; j < *n; j++)
        if (!strcmp((*names)[j], name))
            return;
    *names = mc_xrealloc(*names, (*n + 1) * sizeof(**names));
    (*names)[(*n)++] = mc_xstrdup(name);
}

/* Unmounts every segment of an expired client, one at a time (each unmount walks every
 * shard without the table lock). Returns the distinct segment names in *names (when
 * wanted; the caller frees them). */
static void unmount_client(mc_master_service *svc, mc_master_uuid id, bool want_names,
                           char ***names, size_t *nnames)
{
    for (;;) {
        uint32_t slot = UINT32_MAX;
        pthread_rwlock_wrlock(&svc->seg_lock);
        for (uint32_t i = 0; i < svc->nslots; i++) {
            seg *s = svc->segs[i];
            if (s && !s->unmounting && uuid_eq(s->client, id)) {
                unmount_mark_locked(svc, s);
                slot = i;
                break;
            }
        }
        if (slot != UINT32_MAX && want_names)
            name_set_add(names, nnames, svc->segs[slot]->name);
        pthread_rwlock_unlock(&svc->seg_lock);
        if (slot == UINT32_MAX)
            return;
        unmount_finish(svc, slot);
    }
}

void mc__expire_clients(mc_master_service *svc, uint64_t now)
{
    /* Collect the dead under client_mu, then unmount without it (client_mu is never held
     * with another lock). */
    mc_master_uuid *dead = NULL;
    size_t ndead = 0;
    pthread_mutex_lock(&svc->client_mu);
    for (size_t i = 0; i < svc->nclients;) {
        if (svc->clients[i].deadline <= now) {
            dead = mc_xrealloc(dead, (ndead + 1) * sizeof(*dead));
            dead[ndead++] = svc->clients[i].id;
            svc->clients[i] = svc->clients[--svc->nclients]; /* swap-remove; i again */
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&svc->client_mu);
    for (size_t k = 0; k < ndead; k++) {
        cadd(&svc->clients_expired, 1);
        mc_log(MC_LOG_INFO, TAG, "client %016llx%016llx expired; unmounting its segments",
               (unsigned long long)dead[k].first, (unsigned long long)dead[k].second);
        char **names = NULL; /* distinct names of its segments, for on_client_expired */
        size_t nnames = 0;
        /* gone: its quarantined space may be freed after the release timeout once the
         * owners fenced it; its unfinished puts are discarded now (quarantined), so the
         * keys are free for other writers (issue 10 fault 6) */
        unmount_client(svc, dead[k], svc->cfg.on_client_expired != NULL, &names, &nnames);
        mc__discard_client_puts(svc, dead[k]);
        mc__offload_client_gone(svc, dead[k]); /* its disk tier goes with it */
        mc__fence_writer_state(svc, dead[k], true);
        if (svc->cfg.on_client_expired)
            svc->cfg.on_client_expired(svc->cfg.on_client_expired_ctx, dead[k],
                                       (const char *const *)names, nnames);
        for (size_t j = 0; j < nnames; j++)
            free(names[j]);
        free(names);
    }
    free(dead);
}

/* ---- listing ---- */

size_t mc_master_service_foreach_segment(mc_master_service *svc, mc_master_segment_cb cb,
                                         void *ctx)
{
    size_t n = 0;
    pthread_rwlock_rdlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *s = svc->segs[i];
        if (!s || s->unmounting)
            continue;
        n++;
        mc_master_segment_info info = {
            .id = s->id,
            .client_id = s->client,
            .name = s->name,
            .te_endpoint = s->endpoint,
            .protocol = s->protocol,
            .host_id = s->host_id,
            .base = s->base,
            .size = s->size,
            .used = cget(&s->used),
        };
        if (cb && cb(&info, ctx))
            break;
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    return n;
}
