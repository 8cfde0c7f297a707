/* rpc_handler.c: one request body -> master service call -> one reply body (see
 * rpc_server.h). Owns the protobuf <-> service type conversion and the opcode dispatch,
 * generated from the RPC table rpc/master_rpcs.h; no sockets (rpc_server.c) and no
 * service state (it only calls the public mc_master_service_* API).
 * Decoding uses protobuf-c with a per-handler arena (rpc/arena.h), so a request costs no
 * malloc in the steady state; the arena is reset before each request. Replies are built
 * in the same arena and packed into one reusable buffer. The hot batch calls skip
 * protobuf-c's generic code: BatchKeysRequest is decoded by hand (rpc/pbdec.h) and the
 * batch get / put-start replies are packed by hand (rpc/pbenc.h), both giving exactly
 * what protobuf-c gives (anything unusual still goes through protobuf-c). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "master.pb-c.h"
#include "master/rpc_server.h"
#include "rpc/arena.h"
#include "rpc/pbdec.h"
#include "rpc/pbenc.h"
#include "rpc/master_rpcs.h"

#define TAG "master-rpc"

#ifndef MC_VERSION_STRING
#define MC_VERSION_STRING "unknown"
#endif

/* ---- handler ---- */

struct mc_master_rpc_handler {
    mc_master_service *svc;
    mc__arena ar;
    ProtobufCAllocator alloc;
    uint8_t *out; /* reply body */
    size_t out_cap;
    /* the current reply's segment table (arena; reset per request) */
    Mcrpc__SegmentRef **segs;
    size_t nsegs;
    uint32_t *slots; /* open addressing: index + 1, 0 = empty */
    size_t nslots;
    const ProtobufCMessageDescriptor *want_reply; /* the current opcode's reply type */
    bool open; /* the server has no cluster secret (mc_master_rpc_handler_set_open) */
};

void mc_master_rpc_handler_set_open(mc_master_rpc_handler *h, bool open)
{
    h->open = open;
}

mc_master_rpc_handler *mc_master_rpc_handler_create(mc_master_service *svc)
{
    mc_master_rpc_handler *h = mc_xcalloc(1, sizeof *h);
    h->svc = svc;
    h->alloc = mc__arena_allocator(&h->ar);
    return h;
}

void mc_master_rpc_handler_destroy(mc_master_rpc_handler *h)
{
    if (!h)
        return;
    mc__arena_destroy(&h->ar);
    free(h->out);
    free(h);
}

static void *aalloc(mc_master_rpc_handler *h, size_t size)
{
    return mc__arena_alloc(&h->ar, size);
}

/* n elements of size sz; NULL only for n == 0 is fine (callers pass n > 0 or ignore). */
static void *aalloc_n(mc_master_rpc_handler *h, size_t n, size_t sz)
{
    return aalloc(h, n ? n * sz : 1);
}

static char *astrndup(mc_master_rpc_handler *h, const char *s, size_t n)
{
    char *d = aalloc(h, n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

#define STR_MAX (MC_MASTER_NAME_MAX - 1)

static bool str_ok(const char *s, size_t max)
{
    return s && strnlen(s, max + 1) <= max;
}

static mc_master_uuid uuid_from_pb(const Mcrpc__Uuid *u)
{
    mc_master_uuid r = {0, 0};
    if (u) {
        r.first = u->first;
        r.second = u->second;
    }
    return r;
}

static Mcrpc__Uuid *uuid_to_pb(mc_master_rpc_handler *h, mc_master_uuid id)
{
    Mcrpc__Uuid *u = aalloc(h, sizeof *u);
    mcrpc__uuid__init(u);
    u->first = id.first;
    u->second = id.second;
    return u;
}

/* The reply's segment table: each segment replicas refer to is listed once; replicas
 * carry its index. Entries (and their strings, copied) live in the arena. */
static uint64_t uuid_hash(mc_master_uuid id)
{
    uint64_t x = id.first * 0x9e3779b97f4a7c15ull ^ id.second;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 32);
}

/* Doubles the open-addressing index over h->segs (load <= 1/2) and the entry array with
 * it. The old arrays stay in the arena until the request ends (no free in an arena). */
static void segtab_grow(mc_master_rpc_handler *h)
{
    size_t ns = h->nslots ? h->nslots * 2 : 16;
    uint32_t *slots = aalloc_n(h, ns, sizeof *slots);
    memset(slots, 0, ns * sizeof *slots);
    for (size_t i = 0; i < h->nsegs; i++) { /* rehash every entry into the new index */
        mc_master_uuid id = {h->segs[i]->id->first, h->segs[i]->id->second};
        size_t j = uuid_hash(id) & (ns - 1);
        while (slots[j])
            j = (j + 1) & (ns - 1);
        slots[j] = (uint32_t)i + 1;
    }
    h->slots = slots;
    h->nslots = ns;
    size_t cap = ns / 2; /* segtab_index grows before nsegs + 1 passes ns / 2 */
    Mcrpc__SegmentRef **v = aalloc_n(h, cap, sizeof *v);
    if (h->nsegs)
        memcpy(v, h->segs, h->nsegs * sizeof *v);
    h->segs = v;
}

/* The index of r's segment in the reply's table, adding it on first use. */
static uint32_t segtab_index(mc_master_rpc_handler *h, const mc_master_replica *r)
{
    if ((h->nsegs + 1) * 2 > h->nslots)
        segtab_grow(h);
    size_t j = uuid_hash(r->segment_id) & (h->nslots - 1);
    while (h->slots[j]) {
        const Mcrpc__Uuid *u = h->segs[h->slots[j] - 1]->id;
        if (u->first == r->segment_id.first && u->second == r->segment_id.second)
            return h->slots[j] - 1;
        j = (j + 1) & (h->nslots - 1);
    }
    /* first replica on this segment in this reply: j is the empty slot to fill */
    Mcrpc__SegmentRef *ref = aalloc(h, sizeof *ref);
    mcrpc__segment_ref__init(ref);
    ref->id = uuid_to_pb(h, r->segment_id);
    ref->transport_endpoint = astrndup(
        h, r->transport_endpoint, strnlen(r->transport_endpoint, sizeof r->transport_endpoint));
    ref->protocol = astrndup(h, r->protocol, strnlen(r->protocol, sizeof r->protocol));
    uint32_t idx = (uint32_t)h->nsegs++;
    h->segs[idx] = ref;
    h->slots[j] = idx + 1;
    return idx;
}

/* Replica descriptors for a list (the list may be borrowed only for a callback: nothing
 * points into it afterwards). */
static Mcrpc__ReplicaDescriptor **replicas_to_pb(mc_master_rpc_handler *h,
                                                 const mc_master_replica_list *l,
                                                 size_t *n_out)
{
    uint32_t n = l->n <= MC_MASTER_MAX_REPLICAS ? l->n : MC_MASTER_MAX_REPLICAS; /* bound */
    *n_out = n;
    if (n == 0)
        return NULL;
    Mcrpc__ReplicaDescriptor **v = aalloc_n(h, n, sizeof *v);
    Mcrpc__ReplicaDescriptor *d = aalloc_n(h, n, sizeof *d);
    for (uint32_t i = 0; i < n; i++) {
        const mc_master_replica *r = &l->replicas[i];
        mcrpc__replica_descriptor__init(&d[i]);
        d[i].segment = segtab_index(h, r);
        d[i].address = r->address;
        d[i].size = r->size;
        d[i].status = (Mcrpc__ReplicaStatus)r->status;
        d[i].fence_epoch = r->fence_epoch; /* 0 (omitted on the wire) unless in flight */
        d[i].type = (Mcrpc__ReplicaType)r->type; /* MEMORY (omitted) or LOCAL_DISK */
        v[i] = &d[i];
    }
    return v;
}

/* Fills cfg from the request's config (NULL = defaults). Returns 0 or INVALID_PARAMS
 * for structural problems (enum out of range, too many or too long preferred names);
 * the service checks the semantics (replica_num 0, soft-pin combinations). */
static int config_from_pb(mc_master_rpc_handler *h, const Mcrpc__ReplicateConfig *pc,
                          mc_master_put_config *cfg)
{
    mc_master_put_config_init(cfg);
    if (!pc)
        return 0;
    if (pc->n_preferred_segments > MC_MASTER_MAX_PREFERRED)
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < pc->n_preferred_segments; i++)
        if (!str_ok(pc->preferred_segments[i], STR_MAX))
            return MC_INVALID_PARAMS;
    if ((unsigned)pc->soft_pin > MCRPC__SOFT_PIN_ACTION__SOFT_PIN_DISABLE ||
        (unsigned)pc->strategy > MCRPC__ALLOCATION_STRATEGY__STRATEGY_FREE_RATIO_FIRST)
        return MC_INVALID_PARAMS;
    (void)h;
    /* the strings stay in the decoded request (arena), alive until the reply is packed */
    cfg->replica_num = pc->replica_num;
    cfg->preferred_segments = (const char *const *)pc->preferred_segments;
    cfg->n_preferred = pc->n_preferred_segments;
    cfg->soft_pin = (mc_master_soft_pin_action)pc->soft_pin;
    cfg->soft_pin_ttl_set = pc->has_soft_pin_ttl;
    cfg->soft_pin_ttl_ms = pc->soft_pin_ttl_ms;
    cfg->with_hard_pin = pc->with_hard_pin;
    cfg->strategy = (mc_master_strategy)pc->strategy;
    return 0;
}

static int segment_from_pb(const Mcrpc__Segment *s, mc_master_segment *out)
{
    if (!s || !str_ok(s->name, STR_MAX) || !str_ok(s->te_endpoint, STR_MAX) ||
        !str_ok(s->protocol, MC_MASTER_PROTOCOL_MAX - 1) || !str_ok(s->host_id, STR_MAX))
        return MC_INVALID_PARAMS;
    out->id = uuid_from_pb(s->id);
    out->name = s->name;
    out->base = s->base_addr;
    out->size = s->size;
    out->te_endpoint = s->te_endpoint;
    out->protocol = s->protocol;
    out->host_id = s->host_id;
    return 0;
}

/* Keys of a batch request: a view of the decoded bytes (no copy). */
static mc_master_key *keys_from_pb(mc_master_rpc_handler *h, const ProtobufCBinaryData *k,
                                   size_t n)
{
    mc_master_key *keys = aalloc_n(h, n, sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        keys[i].data = k[i].data;
        keys[i].len = k[i].len;
    }
    return keys;
}

/* HA (docs/ha.md): every reply message has `int64 view_version = 15` (proto), which the
 * master sets here for all of them at once: the field's tag and varint appended to the
 * packed body (protobuf reads a field appended to a message as part of it). Nothing
 * without HA (view 0), so those replies stay byte-identical. Returns the bytes added;
 * the caller leaves MC_VIEW_FIELD_MAX bytes of room. */
#define MC_VIEW_FIELD 15
#define MC_VIEW_FIELD_MAX 11 /* one tag byte + a 10-byte varint */

static size_t append_view(mc_master_rpc_handler *h, uint8_t *p, size_t room)
{
    int64_t view = mc_master_service_view(h->svc);
    if (view == 0 || room < MC_VIEW_FIELD_MAX)
        return 0;
    size_t n = 0;
    p[n++] = (uint8_t)(MC_VIEW_FIELD << 3); /* wire type 0: varint */
    uint64_t v = (uint64_t)view;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Packs msg into h->out (grown by doubling). msg must be of the reply type the RPC
 * table gives the opcode: a wrong row is a bug of ours, caught here. */
static int pack_reply(mc_master_rpc_handler *h, const ProtobufCMessage *msg,
                      const uint8_t **reply, size_t *reply_len)
{
    MC_ASSERT(msg->descriptor == h->want_reply);
    /* The hot batch replies by hand (rpc/pbenc.h: the same bytes, about a tenth of
     * protobuf-c's instructions); every other reply through protobuf-c. */
    mc__pbenc_items items;
    bool by_hand = mc__pbenc_items_of(msg, &items) && mc__pbenc_items_ok(msg, &items);
    size_t need = (by_hand ? mc__pbenc_items_bound(&items)
                           : protobuf_c_message_get_packed_size(msg)) +
                  MC_VIEW_FIELD_MAX;
    if (need > h->out_cap) {
        size_t cap = h->out_cap ? h->out_cap : 4096;
        while (cap < need)
            cap *= 2;
        free(h->out); /* nothing to keep: the old reply was sent already */
        h->out = mc_xmalloc(cap);
        h->out_cap = cap;
    }
    size_t got = by_hand ? mc__pbenc_items_pack(&items, h->out)
                         : protobuf_c_message_pack(msg, h->out);
    *reply = h->out;
    *reply_len = got + append_view(h, h->out + got, h->out_cap - got);
    return 0;
}

/* ---- one handler per request shape ----
 *
 * The dispatch (below, generated from rpc/master_rpcs.h) decodes the request with the
 * row's typed unpack function and calls shape_<SHAPE>(h, <HANDLER>, req, reply,
 * reply_len): the compiler checks that the row's request type and service function fit
 * the shape. Every shape starts with DECODED(req); the reply it packs is checked against
 * the row's reply type (pack_reply). */

/* End of decoding: lift the arena's decode limit (the reply is built in the same arena)
 * and refuse a body that did not decode. */
#define DECODED(req)                                                                      \
    h->ar.limit = 0;                                                                      \
    if (!(req))                                                                           \
        return MC_INVALID_PARAMS

#define REPLY(msg) pack_reply(h, &(msg).base, reply, reply_len)
#define OUT const uint8_t **reply, size_t *reply_len

typedef int (*ping_fn)(mc_master_service *, mc_master_uuid, const mc_master_ping_request *,
                       mc_master_ping_result *);

/* The acknowledgements of a ping request (arena copies). INVALID_PARAMS past the limits
 * or for a malformed entry (no writer id, a segment name too long). */
static int acks_from_pb(mc_master_rpc_handler *h, const Mcrpc__PingRequest *req,
                        mc_master_ping_request *out)
{
    if (req->n_owner_acks > MC_MASTER_MAX_FENCES || req->n_writer_acks > MC_MASTER_MAX_FENCES)
        return MC_INVALID_PARAMS;
    mc_master_writer_fence *o = aalloc_n(h, req->n_owner_acks, sizeof *o);
    for (size_t i = 0; i < req->n_owner_acks; i++) {
        const Mcrpc__WriterFence *f = req->owner_acks[i];
        if (!f->writer)
            return MC_INVALID_PARAMS;
        o[i].writer = uuid_from_pb(f->writer);
        o[i].min_epoch = f->min_epoch;
    }
    mc_master_target_fence *t = aalloc_n(h, req->n_writer_acks, sizeof *t);
    for (size_t i = 0; i < req->n_writer_acks; i++) {
        const Mcrpc__TargetFence *f = req->writer_acks[i];
        if (!str_ok(f->segment, STR_MAX))
            return MC_INVALID_PARAMS;
        memcpy(t[i].segment, f->segment, strlen(f->segment) + 1);
        t[i].min_epoch = f->min_epoch;
    }
    out->owner_acks = o;
    out->n_owner_acks = req->n_owner_acks;
    out->writer_acks = t;
    out->n_writer_acks = req->n_writer_acks;
    return 0;
}

static int shape_PING(mc_master_rpc_handler *h, ping_fn fn, const Mcrpc__PingRequest *req,
                      OUT)
{
    DECODED(req);
    mc_master_ping_request acks;
    if (acks_from_pb(h, req, &acks))
        return MC_INVALID_PARAMS;
    mc_master_ping_result *pr = aalloc(h, sizeof *pr); /* large: not on the stack */
    pr->view_version = 0;
    pr->client_status = MC_MASTER_CLIENT_UNDEFINED;
    pr->n_writer_fences = pr->n_target_fences = 0;
    pr->tasks_pending = false;
    Mcrpc__PingReply r = MCRPC__PING_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), &acks, pr);
    r.tasks_pending = pr->tasks_pending;
    r.view_version = mc_master_service_view(h->svc); /* ha_gate.c */
    r.client_status = (Mcrpc__ClientStatus)pr->client_status;
    uint32_t nw = pr->n_writer_fences <= MC_MASTER_MAX_FENCES ? pr->n_writer_fences : 0;
    uint32_t nt = pr->n_target_fences <= MC_MASTER_MAX_FENCES ? pr->n_target_fences : 0;
    if (r.status == MC_OK && nw) {
        r.writer_fences = aalloc_n(h, nw, sizeof *r.writer_fences);
        Mcrpc__WriterFence *w = aalloc_n(h, nw, sizeof *w);
        for (uint32_t i = 0; i < nw; i++) {
            mcrpc__writer_fence__init(&w[i]);
            w[i].writer = uuid_to_pb(h, pr->writer_fences[i].writer);
            w[i].min_epoch = pr->writer_fences[i].min_epoch;
            r.writer_fences[i] = &w[i];
        }
        r.n_writer_fences = nw;
    }
    if (r.status == MC_OK && nt) {
        r.target_fences = aalloc_n(h, nt, sizeof *r.target_fences);
        Mcrpc__TargetFence *t = aalloc_n(h, nt, sizeof *t);
        for (uint32_t i = 0; i < nt; i++) {
            mcrpc__target_fence__init(&t[i]);
            const char *seg = pr->target_fences[i].segment;
            t[i].segment = astrndup(h, seg, strnlen(seg, MC_MASTER_NAME_MAX - 1));
            t[i].min_epoch = pr->target_fences[i].min_epoch;
            r.target_fences[i] = &t[i];
        }
        r.n_target_fences = nt;
    }
    return REPLY(r);
}

/* service_ready is answered here (no service call: the handler column is NULL). */
static int shape_READY(mc_master_rpc_handler *h, const void *unused,
                       const Mcrpc__ServiceReadyRequest *req, OUT)
{
    (void)unused;
    DECODED(req);
    Mcrpc__ServiceReadyReply r = MCRPC__SERVICE_READY_REPLY__INIT;
    r.status = MC_OK;
    r.version = (char *)"mooncake-c " MC_VERSION_STRING;
    return REPLY(r);
}

typedef int (*mount_fn)(mc_master_service *, const mc_master_segment *, mc_master_uuid);

static int shape_MOUNT(mc_master_rpc_handler *h, mount_fn fn,
                       const Mcrpc__MountSegmentRequest *req, OUT)
{
    DECODED(req);
    mc_master_segment seg;
    if (segment_from_pb(req->segment, &seg))
        return MC_INVALID_PARAMS;
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = fn(h->svc, &seg, uuid_from_pb(req->client_id));
    return REPLY(r);
}

typedef int (*remount_fn)(mc_master_service *, const mc_master_segment *, size_t,
                          mc_master_uuid);

static int shape_REMOUNT(mc_master_rpc_handler *h, remount_fn fn,
                         const Mcrpc__RemountSegmentRequest *req, OUT)
{
    DECODED(req);
    if (req->n_segments > MC_MASTER_RPC_MAX_BATCH)
        return MC_INVALID_PARAMS;
    mc_master_segment *segs = aalloc_n(h, req->n_segments, sizeof *segs);
    for (size_t i = 0; i < req->n_segments; i++)
        if (segment_from_pb(req->segments[i], &segs[i]))
            return MC_INVALID_PARAMS; /* one bad segment refuses the whole request */
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = fn(h->svc, segs, req->n_segments, uuid_from_pb(req->client_id));
    return REPLY(r);
}

typedef int (*unmount_fn)(mc_master_service *, mc_master_uuid, mc_master_uuid, uint64_t);

static int shape_UNMOUNT(mc_master_rpc_handler *h, unmount_fn fn,
                         const Mcrpc__UnmountSegmentRequest *req, OUT)
{
    DECODED(req);
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->segment_id), uuid_from_pb(req->client_id),
                  req->grace_period_ms);
    return REPLY(r);
}

typedef int (*start_fn)(mc_master_service *, mc_master_uuid, const void *, size_t, uint64_t,
                        const mc_master_put_config *, mc_master_replica_list *);

static int shape_START(mc_master_rpc_handler *h, start_fn fn, const Mcrpc__PutStartRequest *req,
                       OUT)
{
    DECODED(req);
    mc_master_put_config cfg;
    if (config_from_pb(h, req->config, &cfg))
        return MC_INVALID_PARAMS;
    mc_master_replica_list *out = aalloc(h, sizeof *out); /* large: not on the stack */
    out->n = 0;
    Mcrpc__PutStartReply r = MCRPC__PUT_START_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), req->key.data, req->key.len,
                  req->size, &cfg, out);
    if (r.status == MC_OK)
        r.replicas = replicas_to_pb(h, out, &r.n_replicas);
    r.segments = h->segs; /* filled by replicas_to_pb */
    r.n_segments = h->nsegs;
    return REPLY(r);
}

typedef int (*key_fn)(mc_master_service *, mc_master_uuid, const void *, size_t);

static int shape_KEY(mc_master_rpc_handler *h, key_fn fn, const Mcrpc__KeyRequest *req, OUT)
{
    DECODED(req);
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), req->key.data, req->key.len);
    return REPLY(r);
}

/* n per-key reply items (arena-owned) from a batch's statuses and replica lists; replicas
 * only where st[i] is MC_OK, the lease only when with_lease. */
static Mcrpc__ReplicaList **items_to_pb(mc_master_rpc_handler *h,
                                        const mc_master_replica_list *outs, const int *st,
                                        size_t n, bool with_lease)
{
    Mcrpc__ReplicaList **v = aalloc_n(h, n, sizeof *v);
    Mcrpc__ReplicaList *items = aalloc_n(h, n, sizeof *items);
    for (size_t i = 0; i < n; i++) {
        mcrpc__replica_list__init(&items[i]);
        items[i].status = st[i];
        if (st[i] == MC_OK) {
            items[i].replicas = replicas_to_pb(h, &outs[i], &items[i].n_replicas);
            if (with_lease)
                items[i].lease_ttl_ms = outs[i].lease_ttl_ms;
        }
        v[i] = &items[i];
    }
    return v;
}

/* n statuses for a batch, each preset to INTERNAL_ERROR (what an item the service never
 * reached reports). */
static int *batch_statuses(mc_master_rpc_handler *h, size_t n)
{
    int *st = aalloc_n(h, n, sizeof *st);
    for (size_t i = 0; i < n; i++)
        st[i] = MC_INTERNAL_ERROR;
    return st;
}

/* The keys of a BatchKeysRequest and their statuses (batch_statuses), in the arena: MC_OK,
 * or MC_INVALID_PARAMS (refuse the call) past the batch limit. */
static int batch_keys(mc_master_rpc_handler *h, const Mcrpc__BatchKeysRequest *req, size_t *n,
                      mc_master_key **keys, int **st)
{
    *n = req->n_keys;
    if (*n > MC_MASTER_RPC_MAX_BATCH)
        return MC_INVALID_PARAMS;
    *keys = keys_from_pb(h, req->keys, *n);
    *st = batch_statuses(h, *n);
    return MC_OK;
}

/* DECODED for a BatchKeysRequest, then declares its n keys and their statuses st
 * (batch_keys), refusing the call past the batch limit. */
#define DECODED_KEYS(req, n, keys, st)                                                    \
    DECODED(req);                                                                         \
    size_t n;                                                                             \
    mc_master_key *keys;                                                                  \
    int *st;                                                                              \
    if (batch_keys(h, req, &n, &keys, &st))                                               \
        return MC_INVALID_PARAMS

/* A BatchStatusReply: the call's status and the n per-key ones. */
static int status_reply(mc_master_rpc_handler *h, int status, int *st, size_t n, OUT)
{
    Mcrpc__BatchStatusReply r = MCRPC__BATCH_STATUS_REPLY__INIT;
    r.status = status;
    r.n_statuses = n;
    r.statuses = (int32_t *)st;
    return REPLY(r);
}

typedef int (*batch_start_fn)(mc_master_service *, mc_master_uuid, const mc_master_key *,
                              const uint64_t *, size_t, const mc_master_put_config *,
                              mc_master_replica_list *, int *);

static int shape_BATCH_START(mc_master_rpc_handler *h, batch_start_fn fn,
                             const Mcrpc__BatchPutStartRequest *req, OUT)
{
    DECODED(req);
    size_t n = req->n_keys;
    if (n > MC_MASTER_RPC_MAX_BATCH || req->n_sizes != n)
        return MC_INVALID_PARAMS;
    mc_master_put_config cfg;
    if (config_from_pb(h, req->config, &cfg))
        return MC_INVALID_PARAMS;
    mc_master_key *keys = keys_from_pb(h, req->keys, n);
    mc_master_replica_list *outs = aalloc_n(h, n, sizeof *outs);
    for (size_t i = 0; i < n; i++)
        outs[i].n = 0;
    int *st = batch_statuses(h, n);
    Mcrpc__BatchPutStartReply r = MCRPC__BATCH_PUT_START_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), keys, req->sizes, n, &cfg, outs, st);
    r.n_items = n;
    r.items = items_to_pb(h, outs, st, n, false);
    r.segments = h->segs;
    r.n_segments = h->nsegs;
    return REPLY(r);
}

typedef int (*batch_key_fn)(mc_master_service *, mc_master_uuid, const mc_master_key *,
                            size_t, int *);

static int shape_BATCH_KEY(mc_master_rpc_handler *h, batch_key_fn fn,
                           const Mcrpc__BatchKeysRequest *req, OUT)
{
    DECODED_KEYS(req, n, keys, st);
    return status_reply(h, fn(h->svc, uuid_from_pb(req->client_id), keys, n, st), st, n, reply,
                        reply_len);
}

typedef int (*get_fn)(mc_master_service *, const void *, size_t, mc_master_replica_list *);

static int shape_GET(mc_master_rpc_handler *h, get_fn fn, const Mcrpc__KeyRequest *req, OUT)
{
    DECODED(req);
    mc_master_replica_list *out = aalloc(h, sizeof *out);
    out->n = 0;
    out->lease_ttl_ms = 0;
    Mcrpc__GetReplicaListReply r = MCRPC__GET_REPLICA_LIST_REPLY__INIT;
    r.status = fn(h->svc, req->key.data, req->key.len, out);
    if (r.status == MC_OK) {
        r.replicas = replicas_to_pb(h, out, &r.n_replicas);
        r.lease_ttl_ms = out->lease_ttl_ms;
    }
    r.segments = h->segs;
    r.n_segments = h->nsegs;
    return REPLY(r);
}

typedef int (*batch_get_fn)(mc_master_service *, const mc_master_key *, size_t,
                            mc_master_replica_list *, int *);

static int shape_BATCH_GET(mc_master_rpc_handler *h, batch_get_fn fn,
                           const Mcrpc__BatchKeysRequest *req, OUT)
{
    DECODED_KEYS(req, n, keys, st);
    mc_master_replica_list *outs = aalloc_n(h, n, sizeof *outs);
    for (size_t i = 0; i < n; i++) {
        outs[i].n = 0;
        outs[i].lease_ttl_ms = 0;
    }
    Mcrpc__BatchGetReplicaListReply r = MCRPC__BATCH_GET_REPLICA_LIST_REPLY__INIT;
    r.status = fn(h->svc, keys, n, outs, st);
    r.n_items = n;
    r.items = items_to_pb(h, outs, st, n, true);
    r.segments = h->segs;
    r.n_segments = h->nsegs;
    return REPLY(r);
}

/* get_replica_list_by_regex collection state. */
typedef struct regex_acc {
    mc_master_rpc_handler *h;
    Mcrpc__KeyReplicas **v; /* heap (grows while the service's shard lock is held) */
    size_t n, cap;
    size_t bytes; /* estimated packed size so far */
    bool truncated;
} regex_acc;

/* Called by the service under a shard lock once per match: copies the key and its
 * replicas into the arena, or stops (truncated) before the reply would pass its limit. */
static int regex_collect(const void *key, size_t key_len, const mc_master_replica_list *list,
                         void *ctx)
{
    regex_acc *acc = ctx;
    size_t est = key_len + 16;
    for (uint32_t i = 0; i < list->n && i < MC_MASTER_MAX_REPLICAS; i++)
        est += 32 + strnlen(list->replicas[i].transport_endpoint, MC_MASTER_NAME_MAX) +
               strnlen(list->replicas[i].protocol, MC_MASTER_PROTOCOL_MAX);
    /* (endpoint strings are counted per replica although sent once per segment: a bound) */
    if (acc->bytes + est > MC_MASTER_RPC_MAX_REGEX_REPLY) {
        acc->truncated = true;
        return 1;
    }
    if (acc->n == acc->cap) {
        acc->cap = acc->cap ? acc->cap * 2 : 64;
        acc->v = mc_xrealloc(acc->v, acc->cap * sizeof *acc->v);
    }
    mc_master_rpc_handler *h = acc->h;
    Mcrpc__KeyReplicas *m = aalloc(h, sizeof *m);
    mcrpc__key_replicas__init(m);
    m->key.len = key_len;
    m->key.data = aalloc(h, key_len ? key_len : 1);
    if (key_len)
        memcpy(m->key.data, key, key_len);
    m->replicas = replicas_to_pb(h, list, &m->n_replicas);
    m->lease_ttl_ms = list->lease_ttl_ms;
    acc->v[acc->n++] = m;
    acc->bytes += est;
    return 0;
}

typedef int (*regex_fn)(mc_master_service *, const char *, size_t, mc_master_regex_cb,
                        void *);

static int shape_GET_REGEX(mc_master_rpc_handler *h, regex_fn fn,
                           const Mcrpc__RegexRequest *req, OUT)
{
    DECODED(req);
    if (req->pattern.len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    regex_acc acc = {.h = h};
    Mcrpc__GetReplicaListByRegexReply r = MCRPC__GET_REPLICA_LIST_BY_REGEX_REPLY__INIT;
    r.status = fn(h->svc, (const char *)req->pattern.data, req->pattern.len, regex_collect,
                  &acc);
    if (r.status == MC_OK) {
        r.n_matches = acc.n;
        r.matches = acc.v;
        r.truncated = acc.truncated;
        r.segments = h->segs;
        r.n_segments = h->nsegs;
    }
    int rc = REPLY(r);
    free(acc.v); /* packed already: the reply buffer holds its own copy */
    return rc;
}

typedef int (*exist_fn)(mc_master_service *, const void *, size_t);

static int shape_EXIST(mc_master_rpc_handler *h, exist_fn fn, const Mcrpc__KeyRequest *req,
                       OUT)
{
    DECODED(req);
    Mcrpc__ExistKeyReply r = MCRPC__EXIST_KEY_REPLY__INIT;
    int rc = fn(h->svc, req->key.data, req->key.len); /* 1 / 0 / negative code */
    r.status = rc < 0 ? rc : MC_OK;
    r.exists = rc == 1;
    return REPLY(r);
}

typedef int (*batch_exist_fn)(mc_master_service *, const mc_master_key *, size_t, int *);

static int shape_BATCH_EXIST(mc_master_rpc_handler *h, batch_exist_fn fn,
                             const Mcrpc__BatchKeysRequest *req, OUT)
{
    DECODED_KEYS(req, n, keys, res);
    Mcrpc__BatchExistKeyReply r = MCRPC__BATCH_EXIST_KEY_REPLY__INIT;
    r.status = fn(h->svc, keys, n, res);
    r.n_results = n;
    r.results = (int32_t *)res;
    return REPLY(r);
}

typedef int (*remove_fn)(mc_master_service *, const void *, size_t, bool);

static int shape_REMOVE(mc_master_rpc_handler *h, remove_fn fn, const Mcrpc__KeyRequest *req,
                        OUT)
{
    DECODED(req);
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = fn(h->svc, req->key.data, req->key.len, req->force);
    return REPLY(r);
}

typedef int (*batch_remove_fn)(mc_master_service *, const mc_master_key *, size_t, bool,
                               int *);

static int shape_BATCH_REMOVE(mc_master_rpc_handler *h, batch_remove_fn fn,
                              const Mcrpc__BatchKeysRequest *req, OUT)
{
    DECODED_KEYS(req, n, keys, st);
    return status_reply(h, fn(h->svc, keys, n, req->force, st), st, n, reply, reply_len);
}

typedef int (*batch_clear_fn)(mc_master_service *, mc_master_uuid, const mc_master_key *,
                              size_t, const char *, size_t, int *);

static int shape_BATCH_CLEAR(mc_master_rpc_handler *h, batch_clear_fn fn,
                             const Mcrpc__BatchKeysRequest *req, OUT)
{
    DECODED(req);
    size_t n = req->n_keys;
    if (n > MC_MASTER_RPC_MAX_BATCH || !str_ok(req->segment_name, STR_MAX))
        return MC_INVALID_PARAMS;
    mc_master_key *keys = keys_from_pb(h, req->keys, n);
    int *st = batch_statuses(h, n);
    Mcrpc__BatchStatusReply r = MCRPC__BATCH_STATUS_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), keys, n, req->segment_name,
                  strlen(req->segment_name), st);
    r.n_statuses = n;
    r.statuses = (int32_t *)st;
    return REPLY(r);
}

typedef int (*remove_regex_fn)(mc_master_service *, const char *, size_t, bool, uint64_t *);

static int shape_REMOVE_REGEX(mc_master_rpc_handler *h, remove_regex_fn fn,
                              const Mcrpc__RegexRequest *req, OUT)
{
    DECODED(req);
    if (req->pattern.len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    uint64_t count = 0;
    Mcrpc__CountReply r = MCRPC__COUNT_REPLY__INIT;
    r.status = fn(h->svc, (const char *)req->pattern.data, req->pattern.len, req->force,
                  &count);
    r.count = count;
    return REPLY(r);
}

typedef int (*remove_all_fn)(mc_master_service *, bool, uint64_t *);

static int shape_REMOVE_ALL(mc_master_rpc_handler *h, remove_all_fn fn,
                            const Mcrpc__RemoveAllRequest *req, OUT)
{
    DECODED(req);
    /* Authorisation (docs/security.md): with a secret every connection that reaches this
     * point proved it holds it, and any holder may clear the cache; open, anyone who
     * reaches the port may, as upstream: said once per process. */
    static atomic_bool warned;
    if (h->open && !atomic_exchange(&warned, true))
        mc_log(MC_LOG_WARN, TAG, "remove_all from an unauthenticated connection: this "
               "master has no cluster secret, so anyone who reaches its RPC port may clear "
               "it (set --auth_token_file; docs/security.md). Logged once");
    uint64_t count = 0;
    Mcrpc__CountReply r = MCRPC__COUNT_REPLY__INIT;
    r.status = fn(h->svc, req->force, &count);
    r.count = count;
    return REPLY(r);
}

/* ---- the disk tier (master/offload.c) ---- */

typedef int (*offload_hb_fn)(mc_master_service *, mc_master_uuid, const char *, uint32_t,
                             mc_master_offload_tasks *);

static int shape_OFFLOAD_HB(mc_master_rpc_handler *h, offload_hb_fn fn,
                            const Mcrpc__OffloadHeartbeatRequest *req, OUT)
{
    DECODED(req);
    if (!str_ok(req->endpoint, STR_MAX))
        return MC_INVALID_PARAMS;
    mc_master_offload_tasks *t = aalloc(h, sizeof *t); /* large: not on the stack */
    Mcrpc__OffloadHeartbeatReply r = MCRPC__OFFLOAD_HEARTBEAT_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), req->endpoint, req->max_tasks, t);
    r.fresh = t->fresh;
    if (r.status == MC_OK && t->fsdir[0])
        r.fsdir = astrndup(h, t->fsdir, strnlen(t->fsdir, sizeof t->fsdir));
    r.n_tasks = t->n;
    r.tasks = aalloc_n(h, t->n, sizeof *r.tasks);
    Mcrpc__OffloadItem *d = aalloc_n(h, t->n, sizeof *d);
    for (uint32_t i = 0; i < t->n; i++) {
        const mc_master_offload_item *it = &t->items[i];
        mcrpc__offload_item__init(&d[i]);
        d[i].op = (uint32_t)it->op;
        d[i].key.len = it->key_len;
        d[i].key.data = aalloc(h, it->key_len ? it->key_len : 1);
        memcpy(d[i].key.data, it->key, it->key_len);
        d[i].size = it->size;
        d[i].address = it->address;
        d[i].gen = it->gen;
        r.tasks[i] = &d[i];
    }
    free(t->keys);
    return REPLY(r);
}

typedef int (*offload_end_fn)(mc_master_service *, mc_master_uuid, const char *,
                              const mc_master_offload_item *, size_t, int *);

static int shape_OFFLOAD_END(mc_master_rpc_handler *h, offload_end_fn fn,
                             const Mcrpc__OffloadEndRequest *req, OUT)
{
    DECODED(req);
    size_t n = req->n_results;
    if (!str_ok(req->endpoint, STR_MAX) || n > MC_MASTER_MAX_OFFLOAD_TASKS)
        return MC_INVALID_PARAMS;
    mc_master_offload_item *items = aalloc_n(h, n, sizeof *items);
    int *st = aalloc_n(h, n, sizeof *st);
    for (size_t i = 0; i < n; i++) {
        const Mcrpc__OffloadItem *it = req->results[i];
        items[i] = (mc_master_offload_item){.op = (int)it->op, .key = it->key.data,
                                            .key_len = it->key.len, .size = it->size,
                                            .address = it->address, .status = it->status,
                                            .gen = it->gen};
        st[i] = MC_OK;
    }
    int rc = fn(h->svc, uuid_from_pb(req->client_id), req->endpoint, items, n, st);
    return status_reply(h, rc, st, rc == MC_OK ? n : 0, reply, reply_len);
}

/* ---- replica copy / move tasks (master/tasks.c) ---- */

typedef int (*task_create_fn)(mc_master_service *, const void *, size_t, const char *,
                              const char *const *, size_t, mc_master_uuid *);

static int shape_TASK_CREATE(mc_master_rpc_handler *h, task_create_fn fn,
                             const Mcrpc__CreateTaskRequest *req, OUT)
{
    DECODED(req);
    if (!str_ok(req->source, STR_MAX) || req->n_targets > MC_MASTER_MAX_TASK_TARGETS)
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < req->n_targets; i++)
        if (!str_ok(req->targets[i], STR_MAX))
            return MC_INVALID_PARAMS;
    mc_master_uuid id = {0, 0};
    Mcrpc__CreateTaskReply r = MCRPC__CREATE_TASK_REPLY__INIT;
    r.status = fn(h->svc, req->key.data, req->key.len, req->source,
                  (const char *const *)req->targets, req->n_targets, &id);
    r.id = uuid_to_pb(h, id);
    return REPLY(r);
}

typedef int (*task_query_fn)(mc_master_service *, mc_master_uuid, mc_master_task_info *);

static int shape_TASK_QUERY(mc_master_rpc_handler *h, task_query_fn fn,
                            const Mcrpc__QueryTaskRequest *req, OUT)
{
    DECODED(req);
    mc_master_task_info *t = aalloc(h, sizeof *t);
    memset(t, 0, sizeof *t);
    Mcrpc__QueryTaskReply r = MCRPC__QUERY_TASK_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->id), t);
    if (r.status == MC_OK) {
        r.id = uuid_to_pb(h, t->id);
        r.type = (uint32_t)t->type;
        r.task_status = (uint32_t)t->status;
        r.created_at_ms_epoch = t->created_at_ms_epoch;
        r.last_updated_at_ms_epoch = t->last_updated_at_ms_epoch;
        r.assigned_client = uuid_to_pb(h, t->assigned_client);
        r.message = t->message;
    }
    return REPLY(r);
}

typedef int (*task_fetch_fn)(mc_master_service *, mc_master_uuid, mc_master_task_work *,
                             uint32_t *);

static int shape_TASK_FETCH(mc_master_rpc_handler *h, task_fetch_fn fn,
                            const Mcrpc__FetchTasksRequest *req, OUT)
{
    DECODED(req);
    mc_master_task_work *w = aalloc(h, sizeof *w); /* large: not on the stack */
    uint32_t n = 0;
    Mcrpc__FetchTasksReply r = MCRPC__FETCH_TASKS_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), w, &n);
    if (r.status == MC_OK && n == 1) {
        Mcrpc__TaskWork *d = aalloc(h, sizeof *d);
        mcrpc__task_work__init(d);
        d->id = uuid_to_pb(h, w->id);
        d->part = w->part;
        d->key.data = w->key;
        d->key.len = w->key_len;
        d->size = w->size;
        d->src_endpoint = w->src_endpoint;
        d->src_address = w->src_address;
        d->dst_endpoint = w->dst_endpoint;
        d->dst_address = w->dst_address;
        r.n_tasks = 1;
        r.tasks = aalloc_n(h, 1, sizeof *r.tasks);
        r.tasks[0] = d;
    }
    return REPLY(r);
}

typedef int (*task_mark_fn)(mc_master_service *, mc_master_uuid, mc_master_uuid, uint32_t, int,
                            const char *);

static int shape_TASK_MARK(mc_master_rpc_handler *h, task_mark_fn fn,
                           const Mcrpc__MarkTaskRequest *req, OUT)
{
    DECODED(req);
    if (!str_ok(req->message, STR_MAX))
        return MC_INVALID_PARAMS;
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), uuid_from_pb(req->id), req->part,
                  req->task_status, req->message);
    return REPLY(r);
}

typedef int (*fetch_log_fn)(mc_master_service *, const char *, uint64_t, uint8_t *, size_t,
                            size_t *, uint64_t *, uint64_t *, uint64_t *);

/* FETCH_LOG (HA replication, src/master/replicate.c): whole log frames from from_lsn. */
static int shape_FETCH_LOG(mc_master_rpc_handler *h, fetch_log_fn fn,
                           const Mcrpc__FetchLogRequest *req, OUT)
{
    DECODED(req);
    size_t cap = req->max_bytes && req->max_bytes < (4u << 20) ? req->max_bytes : (4u << 20);
    uint8_t *buf = aalloc(h, cap);
    size_t len = 0;
    Mcrpc__FetchLogReply r = MCRPC__FETCH_LOG_REPLY__INIT;
    r.status = fn(h->svc, req->term_token ? req->term_token : "", req->from_lsn, buf, cap,
                  &len, &r.first_lsn, &r.last_lsn, &r.base_lsn);
    r.frames.data = buf;
    r.frames.len = len;
    return REPLY(r);
}

typedef int (*fetch_snapshot_fn)(mc_master_service *, const char *, uint64_t, uint64_t,
                                 uint8_t *, size_t, mc_master_snapshot_chunk *);

/* FETCH_SNAPSHOT (HA standby bootstrap, src/master/replicate.c): a chunk of the
 * leader's snapshot. */
static int shape_FETCH_SNAPSHOT(mc_master_rpc_handler *h, fetch_snapshot_fn fn,
                                const Mcrpc__FetchSnapshotRequest *req, OUT)
{
    DECODED(req);
    size_t cap = req->max_bytes && req->max_bytes < (4u << 20) ? req->max_bytes : (4u << 20);
    uint8_t *buf = aalloc(h, cap);
    mc_master_snapshot_chunk c = {0};
    Mcrpc__FetchSnapshotReply r = MCRPC__FETCH_SNAPSHOT_REPLY__INIT;
    r.status = fn(h->svc, req->term_token ? req->term_token : "", req->snapshot_id,
                  req->offset, buf, cap, &c);
    r.ready = c.ready;
    r.snapshot_id = c.id;
    r.lsn = c.lsn;
    r.total_bytes = c.total;
    r.offset = c.offset;
    r.data.data = buf;
    r.data.len = c.len;
    return REPLY(r);
}

/* ---- dispatch (generated from rpc/master_rpcs.h) ---- */

/* The table's opcode numbers are the proto's. */
#define MC__RPC_CHECK_CODE(ID, CODE, ...)                                                 \
    _Static_assert(MCRPC__OPCODE__OP_##ID == CODE, "rpc/master_rpcs.h: opcode of " #ID);
MC_MASTER_RPC_TABLE(MC__RPC_CHECK_CODE)
#undef MC__RPC_CHECK_CODE

const char *mc_master_rpc_opcode_name(uint16_t opcode)
{
    switch (opcode) {
#define MC__RPC_NAME(ID, CODE, NAME, ...)                                                 \
    case MCRPC__OPCODE__OP_##ID:                                                          \
        return NAME;
        MC_MASTER_RPC_TABLE(MC__RPC_NAME)
#undef MC__RPC_NAME
    default:
        return NULL;
    }
}

/* BatchKeysRequest (batch get / exist / end / revoke / remove / replica clear) is decoded
 * by hand (rpc/pbdec.h); a body that decoder leaves goes to protobuf-c from a clean
 * arena. */
static Mcrpc__BatchKeysRequest *unpack_batch_keys(mc_master_rpc_handler *h, size_t len,
                                                  const uint8_t *body)
{
    Mcrpc__BatchKeysRequest *r = mc__pbdec_batch_keys(&h->ar, len, body);
    if (r)
        return r;
    size_t limit = h->ar.limit;
    mc__arena_reset(&h->ar);
    h->ar.limit = limit;
    return (mcrpc__batch_keys_request__unpack)(&h->alloc, len, body);
}

/* The table's rows name their request's typed unpack function; this one (a
 * function-like macro of the generated function's name, expanded when the dispatch's
 * pasted name is rescanned) routes to unpack_batch_keys, keeping the row's type. */
#define mcrpc__batch_keys_request__unpack(alloc, len, body) unpack_batch_keys(h, len, body)

static int dispatch(mc_master_rpc_handler *h, uint16_t op, const uint8_t *body, size_t len,
                    const uint8_t **reply, size_t *reply_len)
{
    switch (op) {
        /* The decode limit bounds what a hostile body can make protobuf-c allocate; the
         * shape lifts it (DECODED) once the request is decoded. */
#define MC__RPC_CASE(ID, CODE, NAME, VERB, REQ, REPLY_, SHAPE, HANDLER, COUNT)            \
    case MCRPC__OPCODE__OP_##ID:                                                          \
        h->want_reply = &mcrpc__##REPLY_##__descriptor;                                   \
        h->ar.limit = MC_MASTER_RPC_DECODE_LIMIT;                                         \
        return shape_##SHAPE(h, HANDLER, mcrpc__##REQ##__unpack(&h->alloc, len, body),    \
                             reply, reply_len);
        MC_MASTER_RPC_TABLE(MC__RPC_CASE)
#undef MC__RPC_CASE
    default:
        return MC_NOT_SUPPORTED;
    }
}
#undef mcrpc__batch_keys_request__unpack

int mc_master_rpc_handle(mc_master_rpc_handler *h, uint16_t opcode, const uint8_t *body,
                         size_t len, const uint8_t **reply, size_t *reply_len)
{
    /* per request: the arena and the reply's segment table start empty */
    mc__arena_reset(&h->ar);
    h->segs = NULL;
    h->nsegs = 0;
    h->slots = NULL;
    h->nslots = 0;
    *reply = h->out;
    *reply_len = 0;
    if (len > MC_MASTER_RPC_MAX_BODY)
        return MC_INVALID_PARAMS;
    static const uint8_t empty[1];
    if (!body)
        body = empty; /* protobuf-c wants a pointer even for an empty body */
    /* HA fencing (ha_gate.c): a standby, or a leader past its lease deadline, runs
     * nothing; the client looks the leader up again */
    int rc = mc_master_service_serving(h->svc) ? dispatch(h, opcode, body, len, reply,
                                                          reply_len)
                                               : MC_UNAVAILABLE_IN_CURRENT_STATUS;
    if (rc != 0) { /* a refused request gets no body */
        *reply = h->out;
        *reply_len = 0;
    }
    return rc;
}
