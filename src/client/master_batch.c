/* master_batch.c: the master client's batch RPCs (master_client.h): batch put/upsert
 * start/end/revoke, batch get, batch exist, batch remove. Keys are split into chunks of
 * at most MC_MASTER_RPC_MAX_BATCH items and CHUNK_KEY_BYTES of key bytes, pipelined on
 * one connection (mc__rpc_run); per-key results come back in the callers' order.
 * Single-key forms live in master_rpc.c. */
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "rpc/limits.h"

/* Bytes of keys per request of a split batch (well under MC_MASTER_RPC_MAX_BODY). */
#define CHUNK_KEY_BYTES (4u << 20)

typedef struct chunking {
    size_t n;        /* items */
    size_t nchunks;
    size_t *starts;  /* nchunks + 1 offsets */
    ProtobufCBinaryData *keys;
} chunking;

/* Splits keys into chunks of at most max_items keys (<= MC_MASTER_RPC_MAX_BATCH) and
 * CHUNK_KEY_BYTES of key bytes. */
static void chunking_split(chunking *ch, const mc_master_key *keys, size_t n, size_t max_items)
{
    ch->n = n;
    ch->keys = mc_xcalloc(n ? n : 1, sizeof *ch->keys);
    ch->starts = mc_xcalloc(n + 2, sizeof *ch->starts);
    size_t nc = 0, items = 0, bytes = 0;
    ch->starts[0] = 0;
    for (size_t i = 0; i < n; i++) {
        ch->keys[i] = mc__pb_key(keys[i].data, keys[i].len);
        /* A chunk closes when it is full by count, or when this key would push it past
         * the byte budget (a chunk always takes at least one key, however long). */
        if (items == max_items ||
            (items && bytes + ch->keys[i].len > CHUNK_KEY_BYTES)) {
            ch->starts[++nc] = i;
            items = bytes = 0;
        }
        items++;
        bytes += ch->keys[i].len;
    }
    if (n == 0)
        nc = 0; /* no request at all */
    else
        ch->starts[++nc] = n;
    ch->nchunks = nc;
}

static void chunking_init(chunking *ch, const mc_master_key *keys, size_t n)
{
    chunking_split(ch, keys, n, MC_MASTER_RPC_MAX_BATCH);
}

static void chunking_free(chunking *ch)
{
    free(ch->keys);
    free(ch->starts);
}

static size_t chunk_len(const chunking *ch, size_t i)
{
    return ch->starts[i + 1] - ch->starts[i];
}

static bool keys_ok(const mc_master_key *keys, size_t n)
{
    return n == 0 || keys;
}

static void fill_status(int *st, size_t n, int code)
{
    for (size_t i = 0; i < n; i++)
        st[i] = code;
}

static int first_failure(const int *st, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (st[i] != MC_OK)
            return st[i];
    return MC_OK;
}

/* The start of a reply callback: chunk i's offset and key count; true when the frame
 * failed (fst != 0), its statuses then set to fst. */
static bool chunk_failed(const chunking *ch, int *st, size_t i, int fst, size_t *off,
                         size_t *k)
{
    *off = ch->starts[i];
    *k = chunk_len(ch, i);
    if (fst)
        fill_status(st + *off, *k, fst);
    return fst != 0;
}

/* Runs one request per chunk of ch (mc__rpc_run) and frees ch. A failed run sets all n
 * statuses to its code, returned; MC_OK when every chunk was answered. */
static int run_chunks(mc_master_client *c, uint16_t op, chunking *ch, mc__rpc_build_fn build,
                      const ProtobufCMessageDescriptor *desc, mc__rpc_reply_fn reply, void *ctx,
                      int *statuses, size_t n)
{
    int rc = mc__rpc_run(c, op, ch->nchunks, build, desc, reply, ctx);
    chunking_free(ch);
    if (rc != MC_OK)
        fill_status(statuses, n, rc);
    return rc;
}

/* A chunked BatchKeysRequest (the first member of the contexts that send one). */
typedef struct keys_req {
    chunking ch;
    Mcrpc__BatchKeysRequest req;
} keys_req;

static const ProtobufCMessage *keys_build(void *ctx, size_t i)
{
    keys_req *b = ctx;
    b->req.keys = b->ch.keys + b->ch.starts[i];
    b->req.n_keys = chunk_len(&b->ch, i);
    return &b->req.base;
}

/* Decodes the k per-key items of a batch start/get reply into st[0..k) and outs[0..k)
 * (the lease is taken from each item only when with_lease). MC_RPC_FAIL when the reply
 * has the wrong item count, a bad segment table or a bad replica. */
static int batch_items_from_pb(Mcrpc__ReplicaList **items, size_t n_items,
                               Mcrpc__SegmentRef **segs, size_t n_segs, size_t k,
                               bool with_lease, int *st, mc_master_replica_list *outs)
{
    mc__segtab t;
    if (n_items != k || mc__pb_segtab(segs, n_segs, &t) != MC_OK)
        return MC_RPC_FAIL;
    for (size_t j = 0; j < k; j++) {
        const Mcrpc__ReplicaList *it = items[j];
        st[j] = it->status;
        outs[j].n = 0;
        outs[j].lease_ttl_ms = 0;
        if (it->status == MC_OK &&
            mc__pb_replicas(it->replicas, it->n_replicas, with_lease ? it->lease_ttl_ms : 0,
                             &t, &outs[j]) != MC_OK)
            return MC_RPC_FAIL;
    }
    return MC_OK;
}

/* batch put/upsert start */
typedef struct bstart_ctx {
    chunking ch;
    Mcrpc__BatchPutStartRequest req;
    const uint64_t *sizes;
    mc_master_replica_list *outs;
    int *st;
} bstart_ctx;

static const ProtobufCMessage *bstart_build(void *ctx, size_t i)
{
    bstart_ctx *b = ctx;
    size_t off = b->ch.starts[i], k = chunk_len(&b->ch, i);
    b->req.keys = b->ch.keys + off;
    b->req.n_keys = k;
    b->req.sizes = (uint64_t *)b->sizes + off;
    b->req.n_sizes = k;
    return &b->req.base;
}

static int bstart_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *m)
{
    bstart_ctx *b = ctx;
    size_t off, k;
    if (chunk_failed(&b->ch, b->st, i, fst, &off, &k))
        return MC_OK;
    const Mcrpc__BatchPutStartReply *r = (const Mcrpc__BatchPutStartReply *)m;
    return batch_items_from_pb(r->items, r->n_items, r->segments, r->n_segments, k, false,
                               b->st + off, b->outs + off);
}

static int batch_start_common(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                              const mc_master_key *keys, const uint64_t *sizes, size_t n,
                              const mc_master_put_config *cfg, mc_master_replica_list *outs,
                              int *statuses)
{
    if (!c || (n && (!keys_ok(keys, n) || !sizes || !outs || !statuses)))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        outs[i].n = 0;
    Mcrpc__ReplicateConfig pc;
    if (mc__pb_config(cfg, &pc) != MC_OK) {
        fill_status(statuses, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    if (n == 0)
        return MC_OK;
    Mcrpc__Uuid cid;
    mc__pb_uuid(&cid, client_id);
    bstart_ctx b = {.sizes = sizes, .outs = outs, .st = statuses};
    chunking_init(&b.ch, keys, n);
    mcrpc__batch_put_start_request__init(&b.req);
    b.req.client_id = &cid;
    b.req.config = &pc;
    int rc = run_chunks(c, op, &b.ch, bstart_build, &mcrpc__batch_put_start_reply__descriptor,
                        bstart_reply, &b, statuses, n);
    return rc != MC_OK ? rc : first_failure(statuses, n);
}

int mc_master_client_batch_put_start(mc_master_client *c, mc_master_uuid client_id,
                                     const mc_master_key *keys, const uint64_t *sizes, size_t n,
                                     const mc_master_put_config *cfg,
                                     mc_master_replica_list *outs, int *statuses)
{
    return batch_start_common(c, MCRPC__OPCODE__OP_BATCH_PUT_START, client_id, keys, sizes, n,
                              cfg, outs, statuses);
}

int mc_master_client_batch_upsert_start(mc_master_client *c, mc_master_uuid client_id,
                                        const mc_master_key *keys, const uint64_t *sizes,
                                        size_t n, const mc_master_put_config *cfg,
                                        mc_master_replica_list *outs, int *statuses)
{
    return batch_start_common(c, MCRPC__OPCODE__OP_BATCH_UPSERT_START, client_id, keys, sizes,
                              n, cfg, outs, statuses);
}

/* batch key ops with a BatchStatusReply (end / revoke / remove) or BatchExistKeyReply */
typedef struct bkeys_ctx {
    keys_req kr;
    int *st;
    bool exist; /* reply is BatchExistKeyReply */
} bkeys_ctx;

static int bkeys_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *m)
{
    bkeys_ctx *b = ctx;
    size_t off, k;
    if (chunk_failed(&b->kr.ch, b->st, i, fst, &off, &k))
        return MC_OK;
    size_t n;
    const int32_t *v;
    if (b->exist) {
        const Mcrpc__BatchExistKeyReply *r = (const Mcrpc__BatchExistKeyReply *)m;
        n = r->n_results;
        v = r->results;
    } else {
        const Mcrpc__BatchStatusReply *r = (const Mcrpc__BatchStatusReply *)m;
        n = r->n_statuses;
        v = r->statuses;
    }
    if (n != k)
        return MC_RPC_FAIL;
    for (size_t j = 0; j < k; j++)
        b->st[off + j] = v[j];
    return MC_OK;
}

static int batch_keys_run(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                          const mc_master_key *keys, size_t n, bool force,
                          const char *segment_name, int *statuses, bool exist)
{
    if (!c || (n && (!keys_ok(keys, n) || !statuses)))
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    Mcrpc__Uuid cid;
    mc__pb_uuid(&cid, client_id);
    bkeys_ctx b = {.st = statuses, .exist = exist};
    chunking_init(&b.kr.ch, keys, n);
    mcrpc__batch_keys_request__init(&b.kr.req);
    b.kr.req.client_id = &cid;
    b.kr.req.force = force;
    if (segment_name) /* NULL: the proto default "" */
        b.kr.req.segment_name = (char *)segment_name;
    int rc = run_chunks(c, op, &b.kr.ch, keys_build,
                        exist ? &mcrpc__batch_exist_key_reply__descriptor
                              : &mcrpc__batch_status_reply__descriptor,
                        bkeys_reply, &b, statuses, n);
    if (rc != MC_OK)
        return rc;
    if (exist)
        return MC_OK; /* per-key codes are in results; the call itself worked */
    return first_failure(statuses, n);
}

static int batch_keys_common(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                             const mc_master_key *keys, size_t n, bool force, int *statuses,
                             bool exist)
{
    return batch_keys_run(c, op, client_id, keys, n, force, NULL, statuses, exist);
}

int mc_master_client_batch_put_end(mc_master_client *c, mc_master_uuid client_id,
                                   const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_PUT_END, client_id, keys, n, false,
                             statuses, false);
}

int mc_master_client_batch_put_revoke(mc_master_client *c, mc_master_uuid client_id,
                                      const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_PUT_REVOKE, client_id, keys, n, false,
                             statuses, false);
}

int mc_master_client_batch_upsert_end(mc_master_client *c, mc_master_uuid client_id,
                                      const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_UPSERT_END, client_id, keys, n, false,
                             statuses, false);
}

int mc_master_client_batch_upsert_revoke(mc_master_client *c, mc_master_uuid client_id,
                                         const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_UPSERT_REVOKE, client_id, keys, n,
                             false, statuses, false);
}

typedef struct bget_ctx {
    keys_req kr;
    mc_master_replica_list *outs;
    int *st;
    mc_master_chunk_fn on_chunk; /* NULL: none */
    void *chunk_ctx;
} bget_ctx;

static int bget_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *m)
{
    bget_ctx *b = ctx;
    size_t off, k;
    int rc = MC_OK;
    if (!chunk_failed(&b->kr.ch, b->st, i, fst, &off, &k)) {
        const Mcrpc__BatchGetReplicaListReply *r = (const Mcrpc__BatchGetReplicaListReply *)m;
        rc = batch_items_from_pb(r->items, r->n_items, r->segments, r->n_segments, k, true,
                                 b->st + off, b->outs + off);
    }
    if (rc == MC_OK && b->on_chunk)
        b->on_chunk(b->chunk_ctx, off, k);
    return rc;
}

int mc_master_client_batch_get_replica_list(mc_master_client *c, const mc_master_key *keys,
                                            size_t n, mc_master_replica_list *outs,
                                            int *statuses)
{
    return mc_master_client_batch_get_replica_list_each(c, keys, n, outs, statuses,
                                                        MC_MASTER_RPC_MAX_BATCH, NULL, NULL);
}

int mc_master_client_batch_get_replica_list_each(mc_master_client *c, const mc_master_key *keys,
                                                 size_t n, mc_master_replica_list *outs,
                                                 int *statuses, size_t per_request,
                                                 mc_master_chunk_fn on_chunk, void *ctx)
{
    if (!c || (n && (!keys_ok(keys, n) || !outs || !statuses)) || per_request == 0)
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    for (size_t i = 0; i < n; i++)
        outs[i].n = 0;
    bget_ctx b = {.outs = outs, .st = statuses, .on_chunk = on_chunk, .chunk_ctx = ctx};
    chunking_split(&b.kr.ch, keys, n,
                   per_request < MC_MASTER_RPC_MAX_BATCH ? per_request : MC_MASTER_RPC_MAX_BATCH);
    mcrpc__batch_keys_request__init(&b.kr.req);
    int rc = run_chunks(c, MCRPC__OPCODE__OP_BATCH_GET_REPLICA_LIST, &b.kr.ch, keys_build,
                        &mcrpc__batch_get_replica_list_reply__descriptor, bget_reply, &b,
                        statuses, n);
    return rc != MC_OK ? rc : first_failure(statuses, n);
}

int mc_master_client_batch_exist_key(mc_master_client *c, const mc_master_key *keys, size_t n,
                                     int *results)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_EXIST_KEY, (mc_master_uuid){0, 0},
                             keys, n, false, results, true);
}

int mc_master_client_batch_remove(mc_master_client *c, const mc_master_key *keys, size_t n,
                                  bool force, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_REMOVE, (mc_master_uuid){0, 0}, keys,
                             n, force, statuses, false);
}


int mc_master_client_batch_replica_clear(mc_master_client *c, mc_master_uuid client_id,
                                         const mc_master_key *keys, size_t n,
                                         const char *segment_name, int *statuses)
{
    if (segment_name && strlen(segment_name) >= MC_MASTER_NAME_MAX) {
        if (n && statuses)
            fill_status(statuses, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    return batch_keys_run(c, MCRPC__OPCODE__OP_BATCH_REPLICA_CLEAR, client_id, keys, n, false,
                          segment_name, statuses, false);
}
