/* writes.c: the write path of the master core: put/upsert start, end and revoke, their
 * batch forms, and the release of writes that never finished (upstream PutStart/PutEnd/
 * PutRevoke, Upsert*, upstream-mooncake.md §4.1, §4.3). It decides the object's state
 * transitions; placement.c picks the space, space.c gives space back, evict.c frees room.
 * Layout and locks: master/internal.h. */
#include "master/internal.h"

/* ---- checks and pins ---- */

typedef struct pin_req {
    mc_master_soft_pin_action action;
    uint64_t ttl; /* ENABLE: ms; 0 = not pinned */
} pin_req;

static int check_put(mc_master_service *svc, const mc_master_put_config *cfg, uint64_t size,
                     pin_req *pin)
{
    if (!cfg || cfg->replica_num == 0 || size > MC_MASTER_SEGMENT_MAX_SIZE ||
        cfg->n_preferred > MC_MASTER_MAX_PREFERRED ||
        (cfg->n_preferred && !cfg->preferred_segments))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < cfg->n_preferred; i++)
        if (!cfg->preferred_segments[i] ||
            strnlen(cfg->preferred_segments[i], MC_MASTER_NAME_MAX) >= MC_MASTER_NAME_MAX)
            return MC_INVALID_PARAMS;
    if (cfg->soft_pin != MC_MASTER_SOFT_PIN_PRESERVE &&
        cfg->soft_pin != MC_MASTER_SOFT_PIN_ENABLE &&
        cfg->soft_pin != MC_MASTER_SOFT_PIN_DISABLE)
        return MC_INVALID_PARAMS;
    if (cfg->strategy != MC_MASTER_STRATEGY_DEFAULT &&
        cfg->strategy != MC_MASTER_STRATEGY_RANDOM &&
        cfg->strategy != MC_MASTER_STRATEGY_FREE_RATIO_FIRST)
        return MC_INVALID_PARAMS;
    /* an explicit TTL only with ENABLE, and never above the configured maximum */
    if (cfg->soft_pin_ttl_set &&
        (cfg->soft_pin != MC_MASTER_SOFT_PIN_ENABLE ||
         cfg->soft_pin_ttl_ms > svc->cfg.max_kv_soft_pin_ttl))
        return MC_INVALID_PARAMS;
    pin->action = cfg->soft_pin;
    pin->ttl = cfg->soft_pin_ttl_set ? cfg->soft_pin_ttl_ms : svc->cfg.default_kv_soft_pin_ttl;
    return MC_OK;
}

/* Applies the pins of a new write to o (in flight). old: the object it replaces (for
 * PRESERVE), or NULL. A soft pin's TTL starts at put_end (F_SOFT_REL: `pin` holds the
 * TTL until then). */
static void apply_pins(mc_master_service *svc, obj *o, const obj *old, const pin_req *pin,
                       bool hard)
{
    o->flags = (uint8_t)((o->flags & ~(F_HARD)) | (hard ? F_HARD : 0));
    if (pin->action == MC_MASTER_SOFT_PIN_ENABLE && pin->ttl) {
        mc__set_soft(svc, o, true);
        o->flags |= F_SOFT_REL;
        o->pin = pin->ttl;
    } else if (pin->action == MC_MASTER_SOFT_PIN_PRESERVE && old && (old->flags & F_SOFT)) {
        /* keep the old pin as it is: pending (a TTL) or running (a deadline) */
        mc__set_soft(svc, o, true);
        o->flags = (uint8_t)((o->flags & ~F_SOFT_REL) | (old->flags & F_SOFT_REL));
        o->pin = old->pin;
    } else {
        mc__set_soft(svc, o, false);
    }
}

/* ---- start ---- */

/* Turns the complete object o into a write in flight over its own space (upsert with the
 * same size). Caller holds sh->mu. */
static void restart_in_place(mc_master_service *svc, shard *sh, obj *o, const pin_req *pin,
                             bool hard, mc_master_uuid client, uint64_t now,
                             mc_master_replica_list *out)
{
    mc__log_remove(svc, o); /* its bytes are being rewritten: not restorable any more */
    obj_unlist(o);
    apply_pins(svc, o, o, pin, hard);
    o->flags = (uint8_t)((o->flags | F_PROC) & ~F_LEASED);
    o->atime = now; /* in flight: atime is the start time the timeouts measure */
    o->owner = client;
    obj_list(sh, o); /* into the proc list */
    cadd(&svc->proc_keys, 1);
    cadd(&svc->proc_bytes, obj_bytes(o));
    pthread_rwlock_rdlock(&svc->seg_lock);
    for (uint32_t i = 0; i < o->nrep; i++) /* the new writer's epochs */
        o->reps[i].epoch = mc__fence_epoch_locked(svc, client, svc->segs[o->reps[i].seg]);
    mc__fill_list_locked(svc, o, MC_MASTER_REPLICA_PROCESSING, out);
    pthread_rwlock_unlock(&svc->seg_lock);
    mc__log_put(svc, o); /* a start record: the space is being written */
}

/* Takes the entry of `client`'s put of key (hash h32) off sh's gone list (an unmount
 * dropped every replica of that put in flight: segments.c drop_slot) and frees it.
 * Whether there was one. Called also when a new put of key by client starts: the old
 * entry no longer stands for its latest put (put_end / put_revoke of the new one must
 * not answer REPLICA_IS_GONE for the old one). Caller holds sh->mu. */
static bool take_gone_put(shard *sh, uint32_t h32, const void *key, size_t len,
                          mc_master_uuid client)
{
    obj *o;
    MC_LIST_FOREACH_ENTRY(o, &sh->gone, obj, link) {
        if (o->hash == h32 && o->key_len == len && uuid_eq(o->owner, client) &&
            !memcmp(okey(o), key, len)) {
            mc_list_remove(&o->link);
            free(o);
            return true;
        }
    }
    return false;
}

/* put_start / upsert_start of one key with hash h. */
static int do_start(mc_master_service *svc, mc_master_uuid client, const void *key,
                    size_t len, uint64_t h, uint64_t size, const mc_master_put_config *cfg,
                    mc_master_replica_list *out, bool upsert)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    pin_req pin;
    if (!out || (rc = check_put(svc, cfg, size, &pin)))
        return rc ? rc : MC_INVALID_PARAMS;
    out->n = 0;
    out->lease_ttl_ms = 0;
    uint32_t want = cfg->replica_num < MC_MASTER_MAX_REPLICAS ? cfg->replica_num
                                                              : MC_MASTER_MAX_REPLICAS;
    mc_master_strategy strategy =
        cfg->strategy ? cfg->strategy : svc->cfg.allocation_strategy;
    uint32_t h32;
    shard *sh = shard_of(svc, h, &h32);

    /* At most two attempts: the second only after an inline eviction (sync_eviction). */
    for (int attempt = 0;; attempt++) {
        uint64_t gen = cget(&svc->evict_gen); /* did another thread evict meanwhile? */
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc);
        obj *o = ht_find(sh, h32, key, len);
        /* what is there decides: refuse, pre-empt, replace in place, or place anew */
        if (o && (o->flags & F_PROC)) {
            if (now - o->atime < svc->discard_ms) {
                pthread_mutex_unlock(&sh->mu);
                return MC_OBJECT_ALREADY_EXISTS;
            }
            /* a stale writer (older than the discard timeout): pre-empted */
            mc__obj_erase(svc, sh, o, MC__SPACE_PREEMPTED);
            cadd(&svc->put_discarded, 1);
            o = NULL;
        } else if (o && !upsert) {
            pthread_mutex_unlock(&sh->mu);
            return MC_OBJECT_ALREADY_EXISTS;
        }
        if (o && o->nrep == 0) { /* upsert of a disk-only object: placed anew */
            mc__obj_erase(svc, sh, o, MC__SPACE_REPLACED);
            o = NULL;
        } else if (o) { /* new bytes: the disk copy is stale (offload.c) */
            mc__offload_forget(svc, o);
            mc__tasks_rewritten(svc, o); /* and so is a copy in flight (tasks.c) */
        }
        if (o && o->size == size && !leased(svc, o, now)) {
            /* upsert, same size: the same space is rewritten in place */
            restart_in_place(svc, sh, o, &pin, cfg->with_hard_pin, client, now, out);
            (void)take_gone_put(sh, h32, key, len, client); /* a new put */
            pthread_mutex_unlock(&sh->mu);
            mc__observe_size(svc, size);
            return MC_OK;
        }

        /* Place the replicas (space is reserved as each is placed). o, when not NULL, is
         * the complete object an upsert replaces: with a new size, or under a reader's
         * lease (a reader may be reading its bytes: new space, the old is freed when the
         * lease ends, as a forced removal's; upstream lets an upsert replace a leased
         * object too). */
        alloc_ctx c;
        c.size = size;
        c.want = want;
        c.n = 0;
        c.could_fit = false;
        obj *n = NULL;
        pthread_rwlock_rdlock(&svc->seg_lock);
        mc__place_locked(svc, &c, cfg, strategy);
        for (uint32_t i = 0; i < c.n; i++) /* what the writer puts on its writes */
            c.reps[i].epoch = mc__fence_epoch_locked(svc, client, svc->segs[c.reps[i].seg]);
        if (c.n) {
            n = mc__obj_new(c.n, key, len, h32);
            memcpy(n->reps, c.reps, c.n * sizeof(rep));
            n->size = size;
            mc__fill_list_locked(svc, n, MC_MASTER_REPLICA_PROCESSING, out);
        }
        pthread_rwlock_unlock(&svc->seg_lock);

        if (n) {
            n->atime = now;
            n->owner = client;
            n->flags = F_PROC;
            apply_pins(svc, n, o, &pin, cfg->with_hard_pin);
            if (o && leased(svc, o, now)) /* the old space waits for the lease's end */
                mc__obj_remove(svc, sh, o, now);
            else if (o) /* upsert with a new size: the old space goes */
                mc__obj_erase(svc, sh, o, MC__SPACE_REPLACED);
            mc__ht_insert(sh, n);
            obj_list(sh, n);
            (void)take_gone_put(sh, h32, key, len, client); /* a new put */
            mc__log_put(svc, n); /* a start record: the space is being written */
            cadd(&svc->keys, 1);
            cadd(&svc->proc_keys, 1);
            cadd(&svc->proc_bytes, obj_bytes(n));
            pthread_mutex_unlock(&sh->mu);
            if (c.n < want)
                cadd(&svc->partial_allocs, 1); /* fewer replicas than asked: still OK */
            mc__observe_size(svc, size);
            return MC_OK;
        }
        pthread_mutex_unlock(&sh->mu);

        /* No space. could_fit: some segment would hold it when emptier, so eviction may
         * help (otherwise it never will). */
        if (c.could_fit && attempt == 0 && svc->cfg.sync_eviction) {
            /* Free what lapsed leases released, evict inline and retry once (unless
             * another thread just evicted). */
            mc__defer_reap(svc, now_ms(svc));
            pthread_mutex_lock(&svc->evict_mu);
            if (cget(&svc->evict_gen) == gen) {
                uint64_t t = (uint64_t)(svc->cfg.eviction_ratio * (double)cget(&svc->capacity));
                uint64_t need = size * want;
                mc__evict_locked(svc, t > need ? t : need);
            }
            pthread_mutex_unlock(&svc->evict_mu);
            continue;
        }
        if (c.could_fit)
            atomic_store(&svc->need_evict, true); /* the next tick evicts */
        cadd(&svc->alloc_failures, 1);
        return MC_NO_AVAILABLE_HANDLE;
    }
}

/* ---- end / revoke ---- */

/* put_end / upsert_end (revoke false) or put_revoke / upsert_revoke of one key. A put
 * whose every replica an unmount dropped while it was in flight answers REPLICA_IS_GONE
 * (once, to its writer): nothing of it is stored, and the writer may put it again. */
static int do_end(mc_master_service *svc, mc_master_uuid client, const void *key, size_t len,
                  uint64_t h, bool revoke)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    obj *o;
    shard *sh = lock_key(svc, key, len, h, &o);
    uint32_t h32;
    (void)shard_of(svc, h, &h32);
    /* Our put is not the object there (absent, complete, or another client's in flight:
     * another writer may have put the key since the unmount) and an unmount dropped it:
     * REPLICA_IS_GONE, so the writer puts again (and meets the other put there). */
    if ((!o || !(o->flags & F_PROC) || !uuid_eq(o->owner, client)) &&
        take_gone_put(sh, h32, key, len, client)) {
        rc = MC_REPLICA_IS_GONE; /* its segment was unmounted under it */
    } else if (!o) {
        rc = MC_OBJECT_NOT_FOUND; /* never started, or pre-empted / released since */
    } else if (!(o->flags & F_PROC)) {
        rc = MC_INVALID_WRITE;
    } else if (!uuid_eq(o->owner, client)) {
        rc = MC_ILLEGAL_CLIENT;
    } else if (revoke) {
        mc__obj_erase(svc, sh, o, MC__SPACE_REVOKED);
    } else {
        /* publish: complete, readable, its soft pin's TTL (if pending) starts now */
        uint64_t now = now_ms(svc);
        obj_unlist(o);
        o->flags &= (uint8_t)~(F_PROC | F_LEASED);
        csub(&svc->proc_keys, 1);
        csub(&svc->proc_bytes, obj_bytes(o));
        if (o->flags & F_SOFT_REL) {
            o->flags &= (uint8_t)~F_SOFT_REL;
            o->pin = now + o->pin;
        }
        o->atime = now;
        obj_list(sh, o); /* into the lru or soft list */
        mc__log_put(svc, o); /* the restart / standby view: before the reply */
        mc__offload_put_end(svc, o); /* write-through to a disk tier, if configured */
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

/* One counted single-key call: do_start / do_end on the key's hash, counted under op. */
static int start_op(mc_master_service *svc, mc_master_op op, mc_master_uuid client,
                    const void *key, size_t len, uint64_t size, const mc_master_put_config *cfg,
                    mc_master_replica_list *out, bool upsert)
{
    int rc = do_start(svc, client, key, len, key_hash(svc, key, len), size, cfg, out, upsert);
    if (rc == MC_OK)
        mc__log_wait_starts(svc); /* --ha_sync=sync: the standby knows of the write */
    count_op(svc, op, rc);
    return rc;
}

static int end_op(mc_master_service *svc, mc_master_op op, mc_master_uuid client,
                  const void *key, size_t len, bool revoke)
{
    int rc = do_end(svc, client, key, len, key_hash(svc, key, len), revoke);
    if (rc == MC_OK && !revoke)
        mc__log_wait(svc); /* acknowledged once its log record is safe (--oplog_sync) */
    count_op(svc, op, rc);
    return rc;
}

int mc_master_service_put_start(mc_master_service *svc, mc_master_uuid client_id,
                                const void *key, size_t key_len, uint64_t size,
                                const mc_master_put_config *cfg, mc_master_replica_list *out)
{
    return start_op(svc, MC_MASTER_OP_PUT_START, client_id, key, key_len, size, cfg, out, false);
}

int mc_master_service_put_end(mc_master_service *svc, mc_master_uuid client_id,
                              const void *key, size_t key_len)
{
    return end_op(svc, MC_MASTER_OP_PUT_END, client_id, key, key_len, false);
}

int mc_master_service_put_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                 const void *key, size_t key_len)
{
    return end_op(svc, MC_MASTER_OP_PUT_REVOKE, client_id, key, key_len, true);
}

int mc_master_service_upsert_start(mc_master_service *svc, mc_master_uuid client_id,
                                   const void *key, size_t key_len, uint64_t size,
                                   const mc_master_put_config *cfg, mc_master_replica_list *out)
{
    return start_op(svc, MC_MASTER_OP_UPSERT_START, client_id, key, key_len, size, cfg, out, true);
}

int mc_master_service_upsert_end(mc_master_service *svc, mc_master_uuid client_id,
                                 const void *key, size_t key_len)
{
    return end_op(svc, MC_MASTER_OP_UPSERT_END, client_id, key, key_len, false);
}

int mc_master_service_upsert_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                    const void *key, size_t key_len)
{
    return end_op(svc, MC_MASTER_OP_UPSERT_REVOKE, client_id, key, key_len, true);
}

/* ---- batches: one independent start/end per key, hashes prefetched ahead ---- */

static int batch_start(mc_master_service *svc, mc_master_batch_op op, mc_master_uuid client,
                       const mc_master_key *keys, const uint64_t *sizes, size_t n,
                       const mc_master_put_config *cfg, mc_master_replica_list *outs,
                       int *statuses, bool upsert)
{
    if (n && (!keys || !sizes || !outs || !statuses || !cfg))
        return MC_INVALID_PARAMS;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = do_start(svc, client, keys[i].data, keys[i].len, ahead_next(svc, &a, i),
                               sizes[i], cfg, &outs[i], upsert);
        ahead_done(&a, statuses[i]);
    }
    mc__log_wait_starts(svc); /* one wait for the whole batch: its last record */
    return ahead_end(svc, &a, op);
}

static int batch_end(mc_master_service *svc, mc_master_batch_op op, mc_master_uuid client,
                     const mc_master_key *keys, size_t n, int *statuses, bool revoke)
{
    if (n && (!keys || !statuses))
        return MC_INVALID_PARAMS;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = do_end(svc, client, keys[i].data, keys[i].len, ahead_next(svc, &a, i),
                             revoke);
        ahead_done(&a, statuses[i]);
    }
    if (!revoke)
        mc__log_wait(svc); /* one wait for the whole batch: its last record */
    return ahead_end(svc, &a, op);
}

int mc_master_service_batch_put_start(mc_master_service *svc, mc_master_uuid client_id,
                                      const mc_master_key *keys, const uint64_t *sizes,
                                      size_t n, const mc_master_put_config *cfg,
                                      mc_master_replica_list *outs, int *statuses)
{
    return batch_start(svc, MC_MASTER_BATCH_PUT_START, client_id, keys, sizes, n, cfg, outs,
                       statuses, false);
}

int mc_master_service_batch_put_end(mc_master_service *svc, mc_master_uuid client_id,
                                    const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_end(svc, MC_MASTER_BATCH_PUT_END, client_id, keys, n, statuses, false);
}

int mc_master_service_batch_put_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                       const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_end(svc, MC_MASTER_BATCH_PUT_REVOKE, client_id, keys, n, statuses, true);
}

int mc_master_service_batch_upsert_start(mc_master_service *svc, mc_master_uuid client_id,
                                         const mc_master_key *keys, const uint64_t *sizes,
                                         size_t n, const mc_master_put_config *cfg,
                                         mc_master_replica_list *outs, int *statuses)
{
    return batch_start(svc, MC_MASTER_BATCH_UPSERT_START, client_id, keys, sizes, n, cfg,
                       outs, statuses, true);
}

int mc_master_service_batch_upsert_end(mc_master_service *svc, mc_master_uuid client_id,
                                       const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_end(svc, MC_MASTER_BATCH_UPSERT_END, client_id, keys, n, statuses, false);
}

int mc_master_service_batch_upsert_revoke(mc_master_service *svc, mc_master_uuid client_id,
                                          const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_end(svc, MC_MASTER_BATCH_UPSERT_REVOKE, client_id, keys, n, statuses, true);
}

/* ---- release of writes that never finished (tick) ---- */

void mc__release_stale_puts(mc_master_service *svc)
{
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc);
        /* the proc list is ordered by start time: stop at the first young write */
        mc_list *it;
        while ((it = mc_list_front(&sh->proc)) && now - obj_of(it)->atime >= svc->release_ms) {
            mc__obj_erase(svc, sh, obj_of(it), MC__SPACE_DISCARDED);
            cadd(&svc->put_released, 1);
        }
        /* puts an unmount dropped whose writer never ended nor revoked them (oldest
         * first: atime is the unmount's time) */
        while ((it = mc_list_front(&sh->gone)) && now - obj_of(it)->atime >= svc->release_ms) {
            mc_list_remove(it);
            free(obj_of(it));
        }
        pthread_mutex_unlock(&sh->mu);
    }
}

void mc__discard_client_puts(mc_master_service *svc, mc_master_uuid id)
{
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_lock(&sh->mu);
        obj *o;
        MC_LIST_FOREACH_ENTRY(o, &sh->proc, obj, link) { /* removal-safe walk */
            if (!uuid_eq(o->owner, id))
                continue;
            mc__obj_erase(svc, sh, o, MC__SPACE_DISCARDED);
            cadd(&svc->put_discarded, 1);
        }
        MC_LIST_FOREACH_ENTRY(o, &sh->gone, obj, link) { /* it will not end them now */
            if (uuid_eq(o->owner, id)) {
                mc_list_remove(&o->link);
                free(o);
            }
        }
        pthread_mutex_unlock(&sh->mu);
    }
}
