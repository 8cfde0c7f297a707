/* remove.c: removal on request: remove, batch remove, remove by regex and remove all
 * (upstream Remove / BatchRemove / RemoveByRegex / RemoveAll). It picks what goes and
 * honours leases; batch replica clear (upstream BatchReplicaClear) drops a client's own
 * unleased objects, or only their replicas on one segment; space.c (mc__obj_remove,
 * mc__obj_clear_named) decides whether the space goes now or after
 * the last reader's lease. Writes in flight are never removed here. Layout and locks:
 * master/internal.h. */
#include "master/internal.h"

/* Removes the complete objects that match r (all when NULL), leased ones only with
 * force. Returns how many were removed. When r's matching fails (mc__regex_match) the
 * walk stops and the shard it failed in loses nothing (shards walked before it have
 * lost their matches: keys the caller asked to remove). */
static uint64_t remove_where(mc_master_service *svc, mc__regex *r, bool force)
{
    uint64_t count = 0;
    objvec hit = {0};
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc);
        /* collect first, remove after the walk: a removal shifts entries between slots */
        hit.n = 0;
        for (uint32_t b = 0; b <= sh->mask; b++) {
            obj *o = slot_obj(sh->slots[b]);
            if (o && !(o->flags & F_PROC) && (force || !leased(svc, o, now)) &&
                (!r || mc__regex_match(r, o)))
                mc__objvec_push(&hit, o);
            else if (r && mc__regex_match_failed(r))
                break;
        }
        if (r && mc__regex_match_failed(r)) {
            pthread_mutex_unlock(&sh->mu);
            break;
        }
        for (size_t k = 0; k < hit.n; k++)
            mc__obj_remove(svc, sh, hit.v[k], now);
        count += hit.n;
        pthread_mutex_unlock(&sh->mu);
    }
    free(hit.v);
    return count;
}

int mc_master_service_remove_by_regex(mc_master_service *svc, const char *pattern,
                                      size_t pattern_len, bool force, uint64_t *count)
{
    mc__regex *r;
    uint64_t n = 0;
    int rc = mc__regex_create(pattern, pattern_len, &r);
    if (rc == MC_OK) {
        n = remove_where(svc, r, force);
        rc = mc__regex_failed(r, "remove_by_regex");
        mc__regex_destroy(r);
    }
    if (count)
        *count = n;
    mc__log_wait(svc); /* an acknowledged removal stays removed after a restart */
    count_op(svc, MC_MASTER_OP_REMOVE_BY_REGEX, rc);
    return rc;
}

int mc_master_service_remove_all(mc_master_service *svc, bool force, uint64_t *count)
{
    uint64_t n = remove_where(svc, NULL, force);
    if (count)
        *count = n;
    mc__log_wait(svc);
    count_op(svc, MC_MASTER_OP_REMOVE_ALL, MC_OK);
    return MC_OK;
}

/* One key's removal. */
static int do_remove(mc_master_service *svc, const void *key, size_t len, uint64_t h,
                     bool force)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    obj *o;
    shard *sh = lock_key(svc, key, len, h, &o);
    uint64_t now = now_ms(svc);
    if (!o)
        rc = MC_OBJECT_NOT_FOUND;
    else if (o->flags & F_PROC)
        rc = MC_REPLICA_IS_NOT_READY; /* even with force: its writer owns it */
    else if (!force && leased(svc, o, now))
        rc = MC_OBJECT_HAS_LEASE;
    else
        mc__obj_remove(svc, sh, o, now); /* hard pins do not stop a removal */
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

int mc_master_service_remove(mc_master_service *svc, const void *key, size_t key_len,
                             bool force)
{
    int rc = do_remove(svc, key, key_len, key_hash(svc, key, key_len), force);
    if (rc == MC_OK)
        mc__log_wait(svc);
    count_op(svc, MC_MASTER_OP_REMOVE, rc);
    return rc;
}

int mc_master_service_batch_remove(mc_master_service *svc, const mc_master_key *keys,
                                   size_t n, bool force, int *statuses)
{
    if (n && (!keys || !statuses))
        return MC_INVALID_PARAMS;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = do_remove(svc, keys[i].data, keys[i].len, ahead_next(svc, &a, i), force);
        ahead_done(&a, statuses[i]);
    }
    mc__log_wait(svc);
    return ahead_end(svc, &a, MC_MASTER_BATCH_REMOVE);
}

/* One key of batch_replica_clear. */
static int do_clear(mc_master_service *svc, mc_master_uuid client, const void *key,
                    size_t len, uint64_t h, const char *seg_name, size_t seg_len)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    uint32_t h32;
    shard *sh = shard_of(svc, h, &h32);
    pthread_mutex_lock(&sh->mu);
    obj *o = ht_find(sh, h32, key, len);
    uint64_t now = now_ms(svc);
    if (!o)
        rc = MC_OBJECT_NOT_FOUND;
    else if (!uuid_eq(o->owner, client))
        rc = MC_ILLEGAL_CLIENT; /* only the object's writer may clear it */
    else if (o->flags & F_PROC)
        rc = MC_REPLICA_IS_NOT_READY; /* a write in flight is its writer's to end */
    else if (leased(svc, o, now))
        rc = MC_OBJECT_HAS_LEASE; /* a reader may be transferring from it */
    else if (!seg_len)
        mc__obj_erase(svc, sh, o, MC__SPACE_CLEARED); /* pins do not stop it */
    else if (!mc__obj_clear_named(svc, sh, o, seg_name, seg_len))
        rc = MC_REPLICA_NOT_FOUND; /* no replica on that segment */
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

int mc_master_service_batch_replica_clear(mc_master_service *svc, mc_master_uuid client_id,
                                          const mc_master_key *keys, size_t n,
                                          const char *segment_name, size_t segment_name_len,
                                          int *statuses)
{
    if ((n && (!keys || !statuses)) || (segment_name_len && !segment_name) ||
        segment_name_len >= MC_MASTER_NAME_MAX) {
        if (n && statuses)
            for (size_t i = 0; i < n; i++)
                statuses[i] = MC_INVALID_PARAMS;
        mc__count_batch(svc, MC_MASTER_BATCH_REPLICA_CLEAR, n, n);
        return MC_INVALID_PARAMS;
    }
    int first = MC_OK;
    size_t nfail = 0;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = do_clear(svc, client_id, keys[i].data, keys[i].len,
                               ahead_next(svc, &a, i), segment_name, segment_name_len);
        if (statuses[i] != MC_OK && nfail++ == 0)
            first = statuses[i];
    }
    mc__log_wait(svc);
    mc__count_batch(svc, MC_MASTER_BATCH_REPLICA_CLEAR, n, nfail);
    return first;
}
