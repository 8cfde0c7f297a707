/* query.c: the store's metadata calls (include/mooncake/store.h): exist, size, replica
 * descriptors, remove (one key, a batch, a regex, all). Each is one master RPC (batches:
 * one per chunk of keys) under life shared; no bytes move.
 * Owns nothing of mc_store; must not touch the engine or the local buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/status.h"

#define CHUNK_KEYS MC__CHUNK_KEYS

int mc_store_is_exist(mc_store *s, const void *key, size_t key_len)
{
    if (!mc__store_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    rc = mc_master_client_exist_key(s->mc, key, key_len);
    mc__store_leave(s);
    return rc;
}

size_t mc__conv_keys(const mc_store_key *keys, size_t n, mc_master_key *mk, size_t *map,
                     int *res)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!mc__store_key_ok(keys[i].data, keys[i].len)) {
            res[i] = MC_INVALID_PARAMS;
            continue;
        }
        mk[m] = (mc_master_key){keys[i].data, keys[i].len};
        map[m++] = i;
    }
    return m;
}

typedef int (*batch_key_fn)(mc_store *s, const mc_master_key *keys, size_t n, bool force,
                            int *results, void *outs, size_t *map);

static int keyed_batch(mc_store *s, const mc_store_key *keys, size_t n, bool force,
                       int *results, void *outs, batch_key_fn fn)
{
    if (!results)
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    if (n > MC_STORE_MAX_BATCH || !keys) {
        mc__fill_results(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    int rc = mc__store_enter_batch(s, results, n);
    if (rc != MC_OK)
        return rc;
    mc_master_key *mk = mc_xmalloc(n * sizeof *mk);
    size_t *map = mc_xmalloc(n * sizeof *map);
    int *r = mc_xmalloc(n * sizeof *r);
    /* Invalid keys are answered here and never sent; the valid ones go in chunks, and
     * map[] puts each chunk's results back at the caller's positions. */
    size_t m = mc__conv_keys(keys, n, mk, map, results);
    for (size_t c = 0; c < m; c += CHUNK_KEYS) {
        size_t k = m - c < CHUNK_KEYS ? m - c : CHUNK_KEYS;
        fn(s, mk + c, k, force, r, outs, map + c);
        for (size_t j = 0; j < k; j++)
            results[map[c + j]] = r[j];
    }
    free(mk);
    free(map);
    free(r);
    mc__store_leave(s);
    return MC_OK;
}

static int exist_fn(mc_store *s, const mc_master_key *keys, size_t n, bool force, int *results,
                    void *outs, size_t *map)
{
    (void)force;
    (void)outs;
    (void)map;
    return mc_master_client_batch_exist_key(s->mc, keys, n, results);
}

int mc_store_batch_is_exist(mc_store *s, const mc_store_key *keys, size_t n, int *results)
{
    return keyed_batch(s, keys, n, false, results, NULL, exist_fn);
}

void mc__conv_replica_list(const mc_master_replica_list *in, mc_store_replica_list *out)
{
    memset(out, 0, sizeof *out);
    out->n = in->n > MC_STORE_MAX_REPLICAS ? MC_STORE_MAX_REPLICAS : in->n;
    out->lease_ttl_ms = in->lease_ttl_ms;
    for (uint32_t i = 0; i < out->n; i++) {
        const mc_master_replica *r = &in->replicas[i];
        mc_store_replica_desc *d = &out->replicas[i];
        d->status = r->status;
        d->is_memory = r->type == MC_MASTER_REPLICA_MEMORY;
        d->replica_type = r->type;
        d->size = r->size;
        d->buffer_address = r->address;
        snprintf(d->transport_endpoint, sizeof d->transport_endpoint, "%.*s",
                 (int)(sizeof r->transport_endpoint - 1), r->transport_endpoint);
        snprintf(d->protocol, sizeof d->protocol, "%.*s", (int)(sizeof r->protocol - 1),
                 r->protocol);
    }
}

int64_t mc_store_get_size(mc_store *s, const void *key, size_t key_len)
{
    if (!mc__store_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    mc_master_replica_list *rl = mc_xmalloc(sizeof *rl); /* large: not on the stack */
    rc = mc_master_client_get_replica_list(s->mc, key, key_len, rl);
    int64_t out = rc;
    if (rc == MC_OK)
        out = rl->n ? (int64_t)rl->replicas[0].size : MC_REPLICA_IS_NOT_READY;
    free(rl);
    mc__store_leave(s);
    return out;
}

int mc_store_get_replica_desc(mc_store *s, const void *key, size_t key_len,
                              mc_store_replica_list *out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    memset(out, 0, sizeof *out);
    if (!mc__store_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    mc_master_replica_list *rl = mc_xmalloc(sizeof *rl);
    rc = mc_master_client_get_replica_list(s->mc, key, key_len, rl);
    if (rc == MC_OK)
        mc__conv_replica_list(rl, out);
    free(rl);
    mc__store_leave(s);
    return rc;
}

static int desc_fn(mc_store *s, const mc_master_key *keys, size_t n, bool force, int *results,
                   void *outs, size_t *map)
{
    (void)force;
    mc_master_replica_list *rl = mc_xcalloc(n, sizeof *rl);
    int rc = mc_master_client_batch_get_replica_list(s->mc, keys, n, rl, results);
    mc_store_replica_list *o = outs; /* indexed by the caller's positions: map[j] */
    for (size_t j = 0; j < n; j++)
        if (results[j] == MC_OK)
            mc__conv_replica_list(&rl[j], &o[map[j]]);
    free(rl);
    return rc;
}

int mc_store_batch_get_replica_desc(mc_store *s, const mc_store_key *keys, size_t n,
                                    mc_store_replica_list *outs, int *results)
{
    if (!results)
        return MC_INVALID_PARAMS;
    if (!outs || n > MC_STORE_MAX_BATCH) {
        mc__fill_results(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    memset(outs, 0, n * sizeof *outs);
    return keyed_batch(s, keys, n, false, results, outs, desc_fn);
}

int mc_store_remove(mc_store *s, const void *key, size_t key_len, bool force)
{
    if (!mc__store_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    rc = mc_master_client_remove(s->mc, key, key_len, force);
    mc__cstats_count(s, MC__OP_REMOVE, rc, 0); /* client_http.c's counters */
    mc__store_leave(s);
    return rc;
}

static int remove_fn(mc_store *s, const mc_master_key *keys, size_t n, bool force, int *results,
                     void *outs, size_t *map)
{
    (void)outs;
    (void)map;
    return mc_master_client_batch_remove(s->mc, keys, n, force, results);
}

int mc_store_batch_remove(mc_store *s, const mc_store_key *keys, size_t n, bool force,
                          int *results)
{
    int rc = keyed_batch(s, keys, n, force, results, NULL, remove_fn);
    if (rc == MC_OK && results) /* the items ran (not set up: nothing counted) */
        for (size_t i = 0; i < n; i++)
            mc__cstats_count(s, MC__OP_REMOVE, results[i], 0);
    return rc;
}

static int clear_fn(mc_store *s, const mc_master_key *keys, size_t n, bool force, int *results,
                    void *outs, size_t *map)
{
    (void)force;
    (void)map;
    const char *segment_name = outs; /* keyed_batch passes it through untouched */
    return mc_master_client_batch_replica_clear(s->mc, s->client_id, keys, n, segment_name,
                                                results);
}

int mc_store_batch_replica_clear(mc_store *s, const mc_store_key *keys, size_t n,
                                 const char *segment_name, int *results)
{
    if (!results)
        return MC_INVALID_PARAMS;
    if (segment_name && strlen(segment_name) >= MC_STORE_NAME_MAX) {
        mc__fill_results(results, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    return keyed_batch(s, keys, n, false, results, (void *)segment_name, clear_fn);
}

int64_t mc_store_remove_by_regex(mc_store *s, const char *pattern, size_t pattern_len,
                                 bool force)
{
    if ((!pattern && pattern_len) || pattern_len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    uint64_t count = 0;
    rc = mc_master_client_remove_by_regex(s->mc, pattern ? pattern : "", pattern_len, force,
                                          &count);
    mc__store_leave(s);
    return rc == MC_OK ? (int64_t)count : rc;
}

int64_t mc_store_remove_all(mc_store *s, bool force)
{
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    uint64_t count = 0;
    rc = mc_master_client_remove_all(s->mc, force, &count);
    mc__store_leave(s);
    return rc == MC_OK ? (int64_t)count : rc;
}
