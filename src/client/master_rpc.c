/* master_rpc.c: the master client's one-request RPCs (master_client.h): service, segments,
 * single-key put/upsert start/end/revoke, get, regex queries, exist, remove.
 * Each builds its request, runs it with mc__rpc_single / mc__rpc_run (master_conn.c) and
 * decodes the reply with master_codec.c. Batch forms live in master_batch.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "rpc/limits.h"

/* ---- service ---- */

/* Decodes a ping reply's fences into out (MC_RPC_FAIL past the limits, or for an entry
 * without a writer id or with a segment name that does not fit). */
static int take_ping(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__PingReply *r = (const Mcrpc__PingReply *)m;
    mc_master_ping_result *out = user;
    out->view_version = r->view_version;
    out->client_status = (int)r->client_status;
    out->tasks_pending = r->tasks_pending;
    if (r->n_writer_fences > MC_MASTER_MAX_FENCES || r->n_target_fences > MC_MASTER_MAX_FENCES)
        return MC_RPC_FAIL;
    for (size_t i = 0; i < r->n_writer_fences; i++) {
        const Mcrpc__WriterFence *f = r->writer_fences[i];
        if (!f->writer)
            return MC_RPC_FAIL;
        out->writer_fences[i].writer.first = f->writer->first;
        out->writer_fences[i].writer.second = f->writer->second;
        out->writer_fences[i].min_epoch = f->min_epoch;
    }
    for (size_t i = 0; i < r->n_target_fences; i++) {
        const Mcrpc__TargetFence *f = r->target_fences[i];
        const char *seg = f->segment ? f->segment : "";
        size_t n = strnlen(seg, MC_MASTER_NAME_MAX);
        if (n == 0 || n >= MC_MASTER_NAME_MAX)
            return MC_RPC_FAIL;
        memcpy(out->target_fences[i].segment, seg, n + 1);
        out->target_fences[i].min_epoch = f->min_epoch;
    }
    out->n_writer_fences = (uint32_t)r->n_writer_fences;
    out->n_target_fences = (uint32_t)r->n_target_fences;
    return r->status;
}

int mc_master_client_ping(mc_master_client *c, mc_master_uuid client_id,
                          mc_master_ping_result *out)
{
    return mc_master_client_ping_fences(c, client_id, NULL, out);
}

int mc_master_client_ping_fences(mc_master_client *c, mc_master_uuid client_id,
                                 const mc_master_ping_request *acks,
                                 mc_master_ping_result *out)
{
    if (out) {
        out->view_version = 0;
        out->client_status = MC_MASTER_CLIENT_UNDEFINED;
        out->n_writer_fences = out->n_target_fences = 0;
        out->tasks_pending = false;
    }
    if (!c || !out)
        return MC_INVALID_PARAMS;
    size_t no = acks ? acks->n_owner_acks : 0, nw = acks ? acks->n_writer_acks : 0;
    if (no > MC_MASTER_MAX_FENCES || nw > MC_MASTER_MAX_FENCES ||
        (no && !acks->owner_acks) || (nw && !acks->writer_acks))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < nw; i++)
        if (strnlen(acks->writer_acks[i].segment, MC_MASTER_NAME_MAX) >= MC_MASTER_NAME_MAX)
            return MC_INVALID_PARAMS;
    Mcrpc__Uuid id;
    mc__pb_uuid(&id, client_id);
    Mcrpc__PingRequest req = MCRPC__PING_REQUEST__INIT;
    req.client_id = &id;
    /* at most 2 x 64 entries: on the stack */
    Mcrpc__WriterFence ow[MC_MASTER_MAX_FENCES], *owp[MC_MASTER_MAX_FENCES];
    Mcrpc__Uuid owid[MC_MASTER_MAX_FENCES];
    Mcrpc__TargetFence wt[MC_MASTER_MAX_FENCES], *wtp[MC_MASTER_MAX_FENCES];
    for (size_t i = 0; i < no; i++) {
        mcrpc__writer_fence__init(&ow[i]);
        mc__pb_uuid(&owid[i], acks->owner_acks[i].writer);
        ow[i].writer = &owid[i];
        ow[i].min_epoch = acks->owner_acks[i].min_epoch;
        owp[i] = &ow[i];
    }
    for (size_t i = 0; i < nw; i++) {
        mcrpc__target_fence__init(&wt[i]);
        wt[i].segment = (char *)acks->writer_acks[i].segment;
        wt[i].min_epoch = acks->writer_acks[i].min_epoch;
        wtp[i] = &wt[i];
    }
    req.n_owner_acks = no;
    req.owner_acks = no ? owp : NULL;
    req.n_writer_acks = nw;
    req.writer_acks = nw ? wtp : NULL;
    return mc__rpc_single(c, MCRPC__OPCODE__OP_PING, &req.base, &mcrpc__ping_reply__descriptor,
                          take_ping, out);
}

typedef struct buf_out {
    char *buf;
    size_t len;
} buf_out;

static int take_ready(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__ServiceReadyReply *r = (const Mcrpc__ServiceReadyReply *)m;
    buf_out *b = user;
    if (b->buf && b->len) {
        snprintf(b->buf, b->len, "%s", r->version ? r->version : "");
    }
    return r->status;
}

int mc_master_client_service_ready(mc_master_client *c, char *version, size_t len)
{
    if (!c)
        return MC_INVALID_PARAMS;
    if (version && len)
        version[0] = '\0';
    Mcrpc__ServiceReadyRequest req = MCRPC__SERVICE_READY_REQUEST__INIT;
    buf_out b = {version, len};
    return mc__rpc_single(c, MCRPC__OPCODE__OP_SERVICE_READY, &req.base,
                      &mcrpc__service_ready_reply__descriptor, take_ready, &b);
}

static int take_status(void *user, const ProtobufCMessage *m)
{
    (void)user;
    return ((const Mcrpc__StatusReply *)m)->status;
}

/* ---- segments ---- */

int mc_master_client_mount_segment(mc_master_client *c, const mc_master_segment *seg,
                                   mc_master_uuid client_id)
{
    if (!c || !seg)
        return MC_INVALID_PARAMS;
    Mcrpc__Segment ps;
    Mcrpc__Uuid sid, cid;
    if (mc__pb_segment(seg, &ps, &sid) != MC_OK)
        return MC_INVALID_PARAMS;
    mc__pb_uuid(&cid, client_id);
    Mcrpc__MountSegmentRequest req = MCRPC__MOUNT_SEGMENT_REQUEST__INIT;
    req.segment = &ps;
    req.client_id = &cid;
    return mc__rpc_single(c, MCRPC__OPCODE__OP_MOUNT_SEGMENT, &req.base,
                      &mcrpc__status_reply__descriptor, take_status, NULL);
}

/* Remount: segments split into requests of at most MC_MASTER_RPC_MAX_BATCH. */
typedef struct remount_ctx {
    Mcrpc__RemountSegmentRequest req;
    Mcrpc__Segment **ptrs;
    size_t n;
    int first_err;
} remount_ctx;

static const ProtobufCMessage *remount_build(void *ctx, size_t i)
{
    remount_ctx *rc = ctx;
    size_t off = i * MC_MASTER_RPC_MAX_BATCH;
    size_t k = rc->n - off < MC_MASTER_RPC_MAX_BATCH ? rc->n - off : MC_MASTER_RPC_MAX_BATCH;
    rc->req.segments = rc->ptrs + off;
    rc->req.n_segments = k;
    return &rc->req.base;
}

static int remount_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *m)
{
    (void)i;
    remount_ctx *rc = ctx;
    int st = fst ? fst : ((const Mcrpc__StatusReply *)m)->status;
    if (st != MC_OK && rc->first_err == MC_OK)
        rc->first_err = st;
    return MC_OK;
}

int mc_master_client_remount_segments(mc_master_client *c, const mc_master_segment *segs,
                                      size_t n, mc_master_uuid client_id)
{
    if (!c || (n && !segs) || n > 65536)
        return MC_INVALID_PARAMS;
    Mcrpc__Segment *ps = mc_xcalloc(n ? n : 1, sizeof *ps);
    Mcrpc__Uuid *ids = mc_xcalloc(n ? n : 1, sizeof *ids);
    Mcrpc__Segment **ptrs = mc_xcalloc(n ? n : 1, sizeof *ptrs);
    int rc = MC_OK;
    for (size_t i = 0; i < n && rc == MC_OK; i++) {
        rc = mc__pb_segment(&segs[i], &ps[i], &ids[i]);
        ptrs[i] = &ps[i];
    }
    if (rc == MC_OK) {
        Mcrpc__Uuid cid;
        mc__pb_uuid(&cid, client_id);
        remount_ctx ctx = {.ptrs = ptrs, .n = n, .first_err = MC_OK};
        mcrpc__remount_segment_request__init(&ctx.req);
        ctx.req.client_id = &cid;
        /* Zero segments is still one request: a pure client registers itself with it. */
        size_t nreq = n ? (n + MC_MASTER_RPC_MAX_BATCH - 1) / MC_MASTER_RPC_MAX_BATCH : 1;
        rc = mc__rpc_run(c, MCRPC__OPCODE__OP_REMOUNT_SEGMENT, nreq, remount_build,
                     &mcrpc__status_reply__descriptor, remount_reply, &ctx);
        if (rc == MC_OK)
            rc = ctx.first_err;
    }
    free(ps);
    free(ids);
    free(ptrs);
    return rc;
}

int mc_master_client_unmount_segment(mc_master_client *c, mc_master_uuid segment_id,
                                     mc_master_uuid client_id)
{
    return mc_master_client_unmount_segment_grace(c, segment_id, client_id, 0);
}

int mc_master_client_unmount_segment_grace(mc_master_client *c, mc_master_uuid segment_id,
                                           mc_master_uuid client_id, uint64_t grace_ms)
{
    if (!c)
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid sid, cid;
    mc__pb_uuid(&sid, segment_id);
    mc__pb_uuid(&cid, client_id);
    Mcrpc__UnmountSegmentRequest req = MCRPC__UNMOUNT_SEGMENT_REQUEST__INIT;
    req.segment_id = &sid;
    req.client_id = &cid;
    req.grace_period_ms = grace_ms;
    return mc__rpc_single(c, MCRPC__OPCODE__OP_UNMOUNT_SEGMENT, &req.base,
                      &mcrpc__status_reply__descriptor, take_status, NULL);
}

/* ---- writes ---- */

/* Decodes a single-key start/get reply into out: its status when not MC_OK (out emptied),
 * else MC_RPC_FAIL for a bad segment table or replica, else MC_OK. */
static int single_from_pb(int status, Mcrpc__ReplicaDescriptor **v, size_t n, uint64_t lease,
                          Mcrpc__SegmentRef **segs, size_t n_segs, mc_master_replica_list *out)
{
    if (status != MC_OK) {
        out->n = 0;
        return status;
    }
    mc__segtab t;
    int rc = mc__pb_segtab(segs, n_segs, &t);
    if (rc == MC_OK)
        rc = mc__pb_replicas(v, n, lease, &t, out);
    return rc != MC_OK ? rc : status;
}

static int take_put_start(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__PutStartReply *r = (const Mcrpc__PutStartReply *)m;
    return single_from_pb(r->status, r->replicas, r->n_replicas, 0, r->segments,
                          r->n_segments, user);
}

static int start_common(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                        const void *key, size_t key_len, uint64_t size,
                        const mc_master_put_config *cfg, mc_master_replica_list *out)
{
    if (out) {
        out->n = 0;
        out->lease_ttl_ms = 0;
    }
    if (!c || !out || !mc__master_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    Mcrpc__ReplicateConfig pc;
    if (mc__pb_config(cfg, &pc) != MC_OK)
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid cid;
    mc__pb_uuid(&cid, client_id);
    Mcrpc__PutStartRequest req = MCRPC__PUT_START_REQUEST__INIT;
    req.client_id = &cid;
    req.key = mc__pb_key(key, key_len);
    req.size = size;
    req.config = &pc;
    return mc__rpc_single(c, op, &req.base, &mcrpc__put_start_reply__descriptor, take_put_start,
                      out);
}

int mc_master_client_put_start(mc_master_client *c, mc_master_uuid client_id, const void *key,
                               size_t key_len, uint64_t size, const mc_master_put_config *cfg,
                               mc_master_replica_list *out)
{
    return start_common(c, MCRPC__OPCODE__OP_PUT_START, client_id, key, key_len, size, cfg,
                        out);
}

int mc_master_client_upsert_start(mc_master_client *c, mc_master_uuid client_id,
                                  const void *key, size_t key_len, uint64_t size,
                                  const mc_master_put_config *cfg, mc_master_replica_list *out)
{
    return start_common(c, MCRPC__OPCODE__OP_UPSERT_START, client_id, key, key_len, size, cfg,
                        out);
}

static int key_common(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                      const void *key, size_t key_len, bool force)
{
    if (!c || !mc__master_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid cid;
    mc__pb_uuid(&cid, client_id);
    Mcrpc__KeyRequest req = MCRPC__KEY_REQUEST__INIT;
    req.client_id = &cid;
    req.key = mc__pb_key(key, key_len);
    req.force = force;
    return mc__rpc_single(c, op, &req.base, &mcrpc__status_reply__descriptor, take_status,
                          NULL);
}

int mc_master_client_put_end(mc_master_client *c, mc_master_uuid client_id, const void *key,
                             size_t key_len)
{
    return key_common(c, MCRPC__OPCODE__OP_PUT_END, client_id, key, key_len, false);
}

int mc_master_client_put_revoke(mc_master_client *c, mc_master_uuid client_id,
                                const void *key, size_t key_len)
{
    return key_common(c, MCRPC__OPCODE__OP_PUT_REVOKE, client_id, key, key_len, false);
}

int mc_master_client_upsert_end(mc_master_client *c, mc_master_uuid client_id,
                                const void *key, size_t key_len)
{
    return key_common(c, MCRPC__OPCODE__OP_UPSERT_END, client_id, key, key_len, false);
}

int mc_master_client_upsert_revoke(mc_master_client *c, mc_master_uuid client_id,
                                   const void *key, size_t key_len)
{
    return key_common(c, MCRPC__OPCODE__OP_UPSERT_REVOKE, client_id, key, key_len, false);
}

/* ---- reads ---- */

static int take_get(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__GetReplicaListReply *r = (const Mcrpc__GetReplicaListReply *)m;
    return single_from_pb(r->status, r->replicas, r->n_replicas, r->lease_ttl_ms, r->segments,
                          r->n_segments, user);
}

int mc_master_client_get_replica_list(mc_master_client *c, const void *key, size_t key_len,
                                      mc_master_replica_list *out)
{
    if (out) {
        out->n = 0;
        out->lease_ttl_ms = 0;
    }
    if (!c || !out || !mc__master_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    Mcrpc__KeyRequest req = MCRPC__KEY_REQUEST__INIT;
    req.key = mc__pb_key(key, key_len);
    return mc__rpc_single(c, MCRPC__OPCODE__OP_GET_REPLICA_LIST, &req.base,
                      &mcrpc__get_replica_list_reply__descriptor, take_get, out);
}

typedef struct regex_out {
    mc_master_regex_match *v;
    size_t n;
    bool truncated;
} regex_out;

static int take_regex(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__GetReplicaListByRegexReply *r = (const Mcrpc__GetReplicaListByRegexReply *)m;
    regex_out *o = user;
    if (r->status != MC_OK)
        return r->status;
    o->truncated = r->truncated;
    if (r->n_matches == 0)
        return MC_OK;
    mc__segtab t;
    if (mc__pb_segtab(r->segments, r->n_segments, &t) != MC_OK)
        return MC_RPC_FAIL;
    /* n_matches is bounded by the reply's size limit (MC_MASTER_RPC_MAX_REPLY_BODY). */
    o->v = mc_xcalloc(r->n_matches, sizeof *o->v);
    for (size_t i = 0; i < r->n_matches; i++) {
        const Mcrpc__KeyReplicas *k = r->matches[i];
        mc_master_regex_match *d = &o->v[i];
        if (k->key.len > MC_MASTER_KEY_MAX)
            return MC_RPC_FAIL;
        d->key = mc_xmalloc(k->key.len + 1);
        if (k->key.len)
            memcpy(d->key, k->key.data, k->key.len);
        ((char *)d->key)[k->key.len] = '\0';
        d->key_len = k->key.len;
        o->n = i + 1; /* counted before decoding its replicas: free_matches frees the key */
        if (mc__pb_replicas(k->replicas, k->n_replicas, k->lease_ttl_ms, &t, &d->replicas) !=
            MC_OK)
            return MC_RPC_FAIL;
    }
    return MC_OK;
}

int mc_master_client_get_replica_list_by_regex(mc_master_client *c, const char *pattern,
                                               size_t pattern_len,
                                               mc_master_regex_match **matches, size_t *n,
                                               bool *truncated)
{
    if (!c || !matches || !n || (!pattern && pattern_len) || pattern_len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    *matches = NULL;
    *n = 0;
    if (truncated)
        *truncated = false;
    Mcrpc__RegexRequest req = MCRPC__REGEX_REQUEST__INIT;
    req.pattern.len = pattern_len;
    req.pattern.data = (uint8_t *)pattern;
    regex_out o = {0};
    int rc = mc__rpc_single(c, MCRPC__OPCODE__OP_GET_REPLICA_LIST_BY_REGEX, &req.base,
                        &mcrpc__get_replica_list_by_regex_reply__descriptor, take_regex, &o);
    if (rc != MC_OK) {
        mc_master_client_free_matches(o.v, o.n);
        return rc;
    }
    *matches = o.v;
    *n = o.n;
    if (truncated)
        *truncated = o.truncated;
    return MC_OK;
}

void mc_master_client_free_matches(mc_master_regex_match *matches, size_t n)
{
    if (!matches)
        return;
    for (size_t i = 0; i < n; i++)
        free(matches[i].key);
    free(matches);
}

static int take_exist(void *user, const ProtobufCMessage *m)
{
    (void)user;
    const Mcrpc__ExistKeyReply *r = (const Mcrpc__ExistKeyReply *)m;
    if (r->status != MC_OK)
        return r->status;
    return r->exists ? 1 : 0;
}

int mc_master_client_exist_key(mc_master_client *c, const void *key, size_t key_len)
{
    if (!c || !mc__master_key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    Mcrpc__KeyRequest req = MCRPC__KEY_REQUEST__INIT;
    req.key = mc__pb_key(key, key_len);
    return mc__rpc_single(c, MCRPC__OPCODE__OP_EXIST_KEY, &req.base,
                      &mcrpc__exist_key_reply__descriptor, take_exist, NULL);
}

/* ---- removal ---- */

int mc_master_client_remove(mc_master_client *c, const void *key, size_t key_len, bool force)
{
    return key_common(c, MCRPC__OPCODE__OP_REMOVE, (mc_master_uuid){0, 0}, key, key_len,
                      force);
}

static int take_count(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__CountReply *r = (const Mcrpc__CountReply *)m;
    uint64_t *count = user;
    if (count)
        *count = r->count;
    return r->status;
}

int mc_master_client_remove_by_regex(mc_master_client *c, const char *pattern,
                                     size_t pattern_len, bool force, uint64_t *count)
{
    if (count)
        *count = 0;
    if (!c || (!pattern && pattern_len) || pattern_len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    Mcrpc__RegexRequest req = MCRPC__REGEX_REQUEST__INIT;
    req.pattern.len = pattern_len;
    req.pattern.data = (uint8_t *)pattern;
    req.force = force;
    return mc__rpc_single(c, MCRPC__OPCODE__OP_REMOVE_BY_REGEX, &req.base,
                      &mcrpc__count_reply__descriptor, take_count, count);
}

int mc_master_client_remove_all(mc_master_client *c, bool force, uint64_t *count)
{
    if (count)
        *count = 0;
    if (!c)
        return MC_INVALID_PARAMS;
    Mcrpc__RemoveAllRequest req = MCRPC__REMOVE_ALL_REQUEST__INIT;
    req.force = force;
    return mc__rpc_single(c, MCRPC__OPCODE__OP_REMOVE_ALL, &req.base,
                      &mcrpc__count_reply__descriptor, take_count, count);
}
