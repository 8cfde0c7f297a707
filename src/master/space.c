/* space.c: when and how the space of an object's replicas is given back to the
 * segments' allocators: THE reuse point (mc__space_release_locked), erasing and removing
 * objects, and the deferred frees that hold a force-removed object's space until its
 * readers' leases end. It does not choose space (placement.c) nor decide what to evict
 * (evict.c); it never takes seg_lock for writing. Layout and locks: master/internal.h.
 *
 * Deferred frees: an object removed by force while a reader's lease is active leaves the
 * index at once but keeps its space (on the `deferred` list, its reserved bytes in `pin`)
 * until the lease deadline (atime + lease TTL); tick frees it then. An unmount drops its
 * replicas on that segment like any other replica.
 *
 * Partial drops: batch_replica_clear gives back only the replicas on one named segment
 * (mc__obj_clear_named), one replica at a time through the same rule
 * (mc__space_release_rep_locked); an object left with none is erased.
 *
 * Quarantine: the space of writes that never finished (revoked, pre-empted, discarded)
 * is not given back here but handed to fence.c, which frees it once the old writer is
 * fenced on both sides (docs/consistency.md). */
#include "master/internal.h"

void mc__space_release_rep_locked(mc_master_service *svc, obj *o, rep *r, mc__space_why why,
                                  uint64_t now)
{
    /* A write that never finished may still be sending bytes (a paused writer, a TCP
     * payload queued at a stalled owner): its space goes to quarantine (fence.c) until
     * both sides have fenced the old writer. A complete object's writes all finished
     * before put_end (the writer ends only after every slice was acknowledged): its
     * space is reusable at once. An unmounting segment's memory goes with it anyway. */
    bool hold = why == MC__SPACE_REVOKED || why == MC__SPACE_PREEMPTED ||
                why == MC__SPACE_DISCARDED;
    if (r->handle == MC__ALLOC_NONE)
        return; /* zero-size replica, or already given back */
    seg *s = svc->segs[r->seg];
    if (hold && !s->unmounting) {
        mc__quarantine_rep_locked(svc, o->owner, r, s, now);
        return;
    }
    pthread_mutex_lock(&s->mu);
    uint64_t b = mc__alloc_block_size(s->alloc, r->handle);
    mc__alloc_free(s->alloc, r->handle);
    pthread_mutex_unlock(&s->mu);
    csub(&s->used, b);
    if (!s->unmounting) /* an unmounting segment left the global gauge already */
        csub(&svc->allocated, b);
    r->handle = MC__ALLOC_NONE;
}

void mc__space_release_locked(mc_master_service *svc, obj *o, mc__space_why why)
{
    bool hold = why == MC__SPACE_REVOKED || why == MC__SPACE_PREEMPTED ||
                why == MC__SPACE_DISCARDED;
    uint64_t now = hold ? now_ms(svc) : 0;
    for (uint32_t i = 0; i < o->nrep; i++)
        mc__space_release_rep_locked(svc, o, &o->reps[i], why, now);
}

uint64_t mc__reps_reserved_locked(mc_master_service *svc, const obj *o)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < o->nrep; i++) {
        const rep *r = &o->reps[i];
        if (r->handle == MC__ALLOC_NONE)
            continue;
        seg *s = svc->segs[r->seg];
        pthread_mutex_lock(&s->mu);
        b += mc__alloc_block_size(s->alloc, r->handle);
        pthread_mutex_unlock(&s->mu);
    }
    return b;
}

void mc__obj_erase(mc_master_service *svc, shard *sh, obj *o, mc__space_why why)
{
    if (!(o->flags & F_PROC))
        mc__log_remove(svc, o); /* before its space can go to anyone else */
    mc__offload_forget(svc, o); /* its LOCAL_DISK replica goes with it */
    mc__ht_remove(sh, o);
    obj_unlist(o);
    pthread_rwlock_rdlock(&svc->seg_lock); /* shard.mu -> seg_lock (read): in order */
    mc__space_release_locked(svc, o, why);
    pthread_rwlock_unlock(&svc->seg_lock);
    mc__account_gone(svc, o);
    free(o);
}

void mc__obj_remove(mc_master_service *svc, shard *sh, obj *o, uint64_t now)
{
    if (!leased(svc, o, now)) {
        mc__obj_erase(svc, sh, o, MC__SPACE_REMOVED);
        return;
    }
    /* A reader may still be transferring from this space: the key goes now (new readers
     * miss, a put of the key may start), the space only at the lease deadline, so no put
     * can be given it while the reader may still be reading it. */
    mc__log_remove(svc, o);
    mc__offload_forget(svc, o);
    mc__ht_remove(sh, o);
    obj_unlist(o);
    mc__account_gone(svc, o);
    pthread_rwlock_rdlock(&svc->seg_lock);
    uint64_t b = mc__reps_reserved_locked(svc, o);
    pthread_rwlock_unlock(&svc->seg_lock);
    if (!b) { /* zero-size: nothing to protect */
        free(o);
        return;
    }
    o->pin = b; /* the soft pin is gone with the key: `pin` now holds the bytes kept */
    uint64_t deadline = o->atime + svc->lease_ttl;
    pthread_mutex_lock(&svc->defer_mu);
    mc_list_push_front(&svc->deferred, &o->link);
    if (deadline < svc->defer_min)
        svc->defer_min = deadline; /* lets defer_reap skip the walk until then */
    cadd(&svc->defer_keys, 1);
    cadd(&svc->defer_bytes, b);
    pthread_mutex_unlock(&svc->defer_mu);
}

/* Whether replica r lies on a segment named name (len bytes). seg_lock held (read). */
static bool rep_on_named(mc_master_service *svc, const rep *r, const char *name, size_t len)
{
    const seg *s = svc->segs[r->seg];
    return s && strlen(s->name) == len && memcmp(s->name, name, len) == 0;
}

uint32_t mc__obj_clear_named(mc_master_service *svc, shard *sh, obj *o, const char *name,
                             size_t len)
{
    pthread_rwlock_rdlock(&svc->seg_lock); /* shard.mu -> seg_lock (read): in order */
    uint32_t hit = 0;
    for (uint32_t i = 0; i < o->nrep; i++)
        hit += rep_on_named(svc, &o->reps[i], name, len);
    if (!hit || hit == o->nrep) {
        pthread_rwlock_unlock(&svc->seg_lock);
        if (hit) /* nothing would be left: the object goes, as a remove */
            mc__obj_erase(svc, sh, o, MC__SPACE_CLEARED);
        return hit;
    }
    /* give the matching replicas' space back and compact the others to the front */
    uint32_t j = 0;
    for (uint32_t i = 0; i < o->nrep; i++) {
        if (rep_on_named(svc, &o->reps[i], name, len))
            mc__space_release_rep_locked(svc, o, &o->reps[i], MC__SPACE_CLEARED, 0);
        else
            o->reps[j++] = o->reps[i];
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    uint8_t *key = okey(o);
    memmove(o->reps + j, key, o->key_len); /* the key follows the replicas */
    o->nrep = (uint8_t)j;
    mc__log_put(svc, o); /* the key now maps to the replicas left */
    return hit;
}

void mc__defer_reap(mc_master_service *svc, uint64_t now)
{
    if (!cget(&svc->defer_keys))
        return; /* the common case: nothing deferred, no lock taken */
    pthread_mutex_lock(&svc->defer_mu);
    if (now >= svc->defer_min) {
        uint64_t min = UINT64_MAX; /* recomputed from the objects that stay */
        pthread_rwlock_rdlock(&svc->seg_lock);
        MC_LIST_FOREACH(it, &svc->deferred) {
            obj *o = obj_of(it);
            uint64_t deadline = o->atime + svc->lease_ttl;
            if (deadline > now) {
                if (deadline < min)
                    min = deadline;
                continue;
            }
            mc_list_remove(it);
            mc__space_release_locked(svc, o, MC__SPACE_LEASE_ENDED);
            csub(&svc->defer_bytes, o->pin);
            csub(&svc->defer_keys, 1);
            free(o);
        }
        pthread_rwlock_unlock(&svc->seg_lock);
        svc->defer_min = min;
    }
    pthread_mutex_unlock(&svc->defer_mu);
}

void mc__defer_drop_slot(mc_master_service *svc, uint32_t slot)
{
    pthread_mutex_lock(&svc->defer_mu);
    pthread_rwlock_rdlock(&svc->seg_lock);
    seg *s = svc->segs[slot];
    MC_LIST_FOREACH(it, &svc->deferred) {
        obj *o = obj_of(it);
        /* compact the replicas not on `slot` to the front; the dropped ones only leave
         * the deferred byte counts (their allocator is destroyed with the segment) */
        uint32_t j = 0;
        for (uint32_t i = 0; i < o->nrep; i++) {
            rep *r = &o->reps[i];
            if (r->seg != slot) {
                o->reps[j++] = *r;
                continue;
            }
            if (r->handle != MC__ALLOC_NONE) {
                pthread_mutex_lock(&s->mu);
                uint64_t b = mc__alloc_block_size(s->alloc, r->handle);
                pthread_mutex_unlock(&s->mu);
                o->pin -= b;
                csub(&svc->defer_bytes, b);
            }
        }
        o->nrep = (uint8_t)j; /* the key bytes are not read again */
        if (j)
            continue;
        mc_list_remove(it);
        csub(&svc->defer_bytes, o->pin);
        csub(&svc->defer_keys, 1);
        free(o);
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    pthread_mutex_unlock(&svc->defer_mu);
}

void mc__fill_list_locked(mc_master_service *svc, obj *o, int status,
                          mc_master_replica_list *out)
{
    /* a disk-only object being promoted: its memory replica has no bytes yet */
    bool hide = status == MC_MASTER_REPLICA_COMPLETE && o->nrep &&
                (o->flags & (F_DISK | F_OFFQ)) == (F_DISK | F_OFFQ);
    uint32_t nmem = hide ? 0 : o->nrep;
    out->n = 0;
    for (uint32_t i = 0; i < nmem; i++) {
        const seg *s = svc->segs[o->reps[i].seg];
        if (s->pending && status == MC_MASTER_REPLICA_COMPLETE)
            continue; /* restored, its owner not back yet (snapshot.c): not read from */
        mc_master_replica *d = &out->replicas[out->n++];
        d->segment_id = s->id;
        d->address = o->reps[i].addr;
        d->size = o->size;
        d->status = status;
        /* the epoch matters to the writer of an in-flight object only (gets carry 0) */
        d->fence_epoch = status == MC_MASTER_REPLICA_PROCESSING ? o->reps[i].epoch : 0;
        /* the strings were checked against the descriptor's field sizes at mount */
        memcpy(d->transport_endpoint, s->endpoint, strlen(s->endpoint) + 1);
        memcpy(d->protocol, s->protocol, strlen(s->protocol) + 1);
        d->type = MC_MASTER_REPLICA_MEMORY;
    }
    if (status == MC_MASTER_REPLICA_COMPLETE && (o->flags & F_DISK))
        mc__offload_fill_locked(svc, o, out); /* then its LOCAL_DISK replica */
}

void mc__fill_list(mc_master_service *svc, obj *o, int status, mc_master_replica_list *out)
{
    pthread_rwlock_rdlock(&svc->seg_lock);
    mc__fill_list_locked(svc, o, status, out);
    pthread_rwlock_unlock(&svc->seg_lock);
}
