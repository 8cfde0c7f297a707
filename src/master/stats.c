/* stats.c: what the master core reports: per-operation and batch counters, the value
 * size histogram, the stats snapshot, and the admin queries over the index (foreach_key,
 * query_key; foreach_segment lives with the segments). Nothing here changes an object,
 * grants a lease or moves space. Layout and locks: master/internal.h. */
#include "master/internal.h"

/* Metric stems, generated from the one RPC table (rpc/master_rpcs.h). */
static const char *const op_names[] = {
#define MC__OPN(ID, CODE, NAME, VERB, REQ, REPLY, SHAPE, HANDLER, COUNT)                     \
    MC__RPC_IF_OP_##COUNT(NAME, )
    MC_MASTER_RPC_TABLE(MC__OPN)
#undef MC__OPN
};
static const char *const batch_names[] = {
#define MC__BN(ID, CODE, NAME, VERB, REQ, REPLY, SHAPE, HANDLER, COUNT)                      \
    MC__RPC_IF_BATCH_##COUNT(NAME, )
    MC_MASTER_RPC_TABLE(MC__BN)
#undef MC__BN
};
_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == MC_MASTER_OP_COUNT, "op names");
_Static_assert(sizeof(batch_names) / sizeof(batch_names[0]) == MC_MASTER_BATCH_COUNT,
               "batch names");

const char *mc_master_op_name(int op)
{
    return op >= 0 && op < MC_MASTER_OP_COUNT ? op_names[op] : NULL;
}

const char *mc_master_batch_op_name(int op)
{
    return op >= 0 && op < MC_MASTER_BATCH_COUNT ? batch_names[op] : NULL;
}

void mc__count_batch(mc_master_service *svc, mc_master_batch_op op, size_t n, size_t nfail)
{
    cadd(&svc->batch[op].requests, 1);
    cadd(&svc->batch[op].items, n);
    cadd(&svc->batch[op].failed_items, nfail);
    /* a batch fails when every item failed, succeeds partially when some did */
    if (nfail && nfail == n)
        cadd(&svc->batch[op].failures, 1);
    else if (nfail)
        cadd(&svc->batch[op].partial, 1);
}

/* master_value_size_bytes: upstream's buckets (`master_metric_manager.cpp`). */
static const uint64_t vsize_bounds[MC_MASTER_VALUE_SIZE_BUCKETS - 1] = {
    4096, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
};

uint64_t mc_master_value_size_bound(int i)
{
    return i >= 0 && i < MC_MASTER_VALUE_SIZE_BUCKETS - 1 ? vsize_bounds[i] : UINT64_MAX;
}

void mc__observe_size(mc_master_service *svc, uint64_t size)
{
    int i = 0; /* the first bucket whose bound holds size; the last one (+Inf) otherwise */
    while (i < MC_MASTER_VALUE_SIZE_BUCKETS - 1 && size > vsize_bounds[i])
        i++;
    cadd(&svc->vsize[i], 1);
    cadd(&svc->vsize_sum, size);
}

void mc_master_service_get_stats(mc_master_service *svc, mc_master_stats *out)
{
    /* each counter is read on its own (relaxed): the snapshot is not atomic as a whole,
     * e.g. allocated_bytes may already include a put that key_count does not yet */
    memset(out, 0, sizeof(*out));
    mc_master_service_ha_info(svc, out); /* ha_gate.c */
    mc__oplog_fill_stats(svc, out);      /* oplog.c */
    out->allocated_bytes = cget(&svc->allocated);
    out->total_capacity_bytes = cget(&svc->capacity);
    out->key_count = cget(&svc->keys);
    out->soft_pin_key_count = cget(&svc->soft_keys);
    out->processing_key_count = cget(&svc->proc_keys);
    out->processing_bytes = cget(&svc->proc_bytes);
    /* the two locks one after the other, never together (see the lock order) */
    pthread_mutex_lock(&svc->client_mu);
    out->active_clients = svc->nclients;
    pthread_mutex_unlock(&svc->client_mu);
    pthread_rwlock_rdlock(&svc->seg_lock);
    out->segment_count = svc->nmounted;
    pthread_rwlock_unlock(&svc->seg_lock);
    for (int i = 0; i < MC_MASTER_OP_COUNT; i++) {
        out->requests[i] = cget(&svc->requests[i]);
        out->failures[i] = cget(&svc->failures[i]);
    }
    for (int i = 0; i < MC_MASTER_BATCH_COUNT; i++) {
        out->batch[i].requests = cget(&svc->batch[i].requests);
        out->batch[i].failures = cget(&svc->batch[i].failures);
        out->batch[i].partial_successes = cget(&svc->batch[i].partial);
        out->batch[i].items = cget(&svc->batch[i].items);
        out->batch[i].failed_items = cget(&svc->batch[i].failed_items);
    }
    out->put_start_alloc_failures = cget(&svc->alloc_failures);
    out->put_start_partial_allocations = cget(&svc->partial_allocs);
    out->eviction_attempts = cget(&svc->evict_attempts);
    out->eviction_successes = cget(&svc->evict_successes);
    out->evicted_keys = cget(&svc->evicted_keys);
    out->evicted_bytes = cget(&svc->evicted_bytes);
    out->put_discarded = cget(&svc->put_discarded);
    out->put_released = cget(&svc->put_released);
    out->clients_expired = cget(&svc->clients_expired);
    out->deferred_free_keys = cget(&svc->defer_keys);
    out->deferred_free_bytes = cget(&svc->defer_bytes);
    out->quarantined_bytes = cget(&svc->quar_bytes);
    out->quarantined_entries = cget(&svc->quar_entries);
    out->fences_pending = cget(&svc->fence_pending);
    out->fences_issued = cget(&svc->fences_issued);
    out->fences_acked = cget(&svc->fences_acked);
    for (int i = 0; i < MC_MASTER_VALUE_SIZE_BUCKETS; i++) {
        out->value_size_buckets[i] = cget(&svc->vsize[i]);
        out->value_size_count += out->value_size_buckets[i]; /* the count is their sum */
    }
    out->value_size_sum = cget(&svc->vsize_sum);
    mc__offload_stats(svc, out); /* the disk tier's gauges and counters */
}

size_t mc_master_service_foreach_key(mc_master_service *svc, mc_master_key_cb cb, void *ctx)
{
    size_t n = 0;
    bool stop = false;
    for (uint32_t i = 0; i < svc->nshards && !stop; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_lock(&sh->mu); /* one shard at a time: writers elsewhere go on */
        for (uint32_t b = 0; b <= sh->mask && !stop; b++) {
            obj *o = slot_obj(sh->slots[b]);
            if (o) { /* in flight too (complete = false) */
                n++;
                if (cb && cb(okey(o), o->key_len, o->size, !(o->flags & F_PROC), ctx))
                    stop = true;
            }
        }
        pthread_mutex_unlock(&sh->mu);
    }
    return n;
}

int mc_master_service_query_key(mc_master_service *svc, const void *key, size_t key_len,
                                mc_master_key_info *out)
{
    int rc = check_key(key, key_len);
    if (rc || !out)
        return rc ? rc : MC_INVALID_PARAMS;
    memset(out, 0, offsetof(mc_master_key_info, replicas)); /* the list is large: no memset */
    out->replicas.n = 0;
    out->replicas.lease_ttl_ms = 0;
    obj *o;
    shard *sh = lock_key(svc, key, key_len, key_hash(svc, key, key_len), &o);
    if (!o) {
        rc = MC_OBJECT_NOT_FOUND;
    } else {
        uint64_t now = now_ms(svc);
        out->size = o->size;
        out->complete = !(o->flags & F_PROC);
        out->hard_pinned = o->flags & F_HARD;
        if (leased(svc, o, now))
            out->lease_left_ms = o->atime + svc->lease_ttl - now;
        /* a running pin reports its time left; a pending one (F_SOFT_REL) its whole TTL */
        if ((o->flags & F_SOFT) && !(o->flags & F_SOFT_REL) && o->pin > now) {
            out->soft_pinned = true;
            out->soft_pin_left_ms = o->pin - now;
        } else if ((o->flags & F_SOFT) && (o->flags & F_SOFT_REL)) {
            out->soft_pinned = true; /* starts at put_end */
            out->soft_pin_left_ms = o->pin;
        }
        mc__fill_list(svc, o,
                      out->complete ? MC_MASTER_REPLICA_COMPLETE : MC_MASTER_REPLICA_PROCESSING,
                      &out->replicas);
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}
