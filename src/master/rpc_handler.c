/* rpc_handler.c: one request body -> master service call -> one reply body.
 * See rpc_server.h. Decoding uses protobuf-c with a per-handler arena (rpc_arena.h), so a
 * request costs no malloc in the steady state; the arena is reset before each request.
 * Replies are built in the same arena and packed into one reusable buffer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master.pb-c.h"
#include "rpc/arena.h"
#include "master/rpc_server.h"

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
};

mc_master_rpc_handler *mc_master_rpc_handler_create(mc_master_service *svc)
{
    mc_master_rpc_handler *h = calloc(1, sizeof *h);
    if (!h)
        abort();
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

static void segtab_grow(mc_master_rpc_handler *h)
{
    size_t ns = h->nslots ? h->nslots * 2 : 16;
    uint32_t *slots = aalloc_n(h, ns, sizeof *slots);
    memset(slots, 0, ns * sizeof *slots);
    for (size_t i = 0; i < h->nsegs; i++) {
        mc_master_uuid id = {h->segs[i]->id->first, h->segs[i]->id->second};
        size_t j = uuid_hash(id) & (ns - 1);
        while (slots[j])
            j = (j + 1) & (ns - 1);
        slots[j] = (uint32_t)i + 1;
    }
    h->slots = slots;
    h->nslots = ns;
    size_t cap = ns / 2;
    Mcrpc__SegmentRef **v = aalloc_n(h, cap, sizeof *v);
    if (h->nsegs)
        memcpy(v, h->segs, h->nsegs * sizeof *v);
    h->segs = v;
}

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
    uint32_t n = l->n <= MC_MASTER_MAX_REPLICAS ? l->n : MC_MASTER_MAX_REPLICAS;
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

/* Packs msg into h->out. */
static int pack_reply(mc_master_rpc_handler *h, const ProtobufCMessage *msg,
                      const uint8_t **reply, size_t *reply_len)
{
    size_t need = protobuf_c_message_get_packed_size(msg);
    if (need > h->out_cap) {
        size_t cap = h->out_cap ? h->out_cap : 4096;
        while (cap < need)
            cap *= 2;
        free(h->out);
        h->out = malloc(cap);
        if (!h->out)
            abort();
        h->out_cap = cap;
    }
    size_t got = protobuf_c_message_pack(msg, h->out);
    *reply = h->out;
    *reply_len = got;
    return 0;
}

#define UNPACK(type, var)                                                                 \
    h->ar.limit = MC_MASTER_RPC_DECODE_LIMIT;                                             \
    type *var = (type *)protobuf_c_message_unpack(&type##_descriptor_, &h->alloc, len,   \
                                                  body);                                  \
    h->ar.limit = 0;                                                                      \
    if (!var)                                                                             \
        return MC_INVALID_PARAMS

/* protobuf-c descriptor names follow the lower-case type; map the macro argument. */
#define Mcrpc__PingRequest_descriptor_ mcrpc__ping_request__descriptor
#define Mcrpc__ServiceReadyRequest_descriptor_ mcrpc__service_ready_request__descriptor
#define Mcrpc__MountSegmentRequest_descriptor_ mcrpc__mount_segment_request__descriptor
#define Mcrpc__RemountSegmentRequest_descriptor_ mcrpc__remount_segment_request__descriptor
#define Mcrpc__UnmountSegmentRequest_descriptor_ mcrpc__unmount_segment_request__descriptor
#define Mcrpc__PutStartRequest_descriptor_ mcrpc__put_start_request__descriptor
#define Mcrpc__KeyRequest_descriptor_ mcrpc__key_request__descriptor
#define Mcrpc__BatchPutStartRequest_descriptor_ mcrpc__batch_put_start_request__descriptor
#define Mcrpc__BatchKeysRequest_descriptor_ mcrpc__batch_keys_request__descriptor
#define Mcrpc__RegexRequest_descriptor_ mcrpc__regex_request__descriptor
#define Mcrpc__RemoveAllRequest_descriptor_ mcrpc__remove_all_request__descriptor

#define REPLY(msg) pack_reply(h, &(msg).base, reply, reply_len)

/* ---- one function per request shape ---- */

static int do_ping(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                   const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__PingRequest, req);
    mc_master_ping_result pr = {0, MC_MASTER_CLIENT_UNDEFINED};
    Mcrpc__PingReply r = MCRPC__PING_REPLY__INIT;
    r.status = mc_master_service_ping(h->svc, uuid_from_pb(req->client_id), &pr);
    r.view_version = pr.view_version;
    r.client_status = (Mcrpc__ClientStatus)pr.client_status;
    return REPLY(r);
}

static int do_service_ready(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                            const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__ServiceReadyRequest, req);
    (void)req;
    Mcrpc__ServiceReadyReply r = MCRPC__SERVICE_READY_REPLY__INIT;
    r.status = MC_OK;
    r.version = (char *)"mooncake-c " MC_VERSION_STRING;
    return REPLY(r);
}

static int do_mount(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                    const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__MountSegmentRequest, req);
    mc_master_segment seg;
    if (segment_from_pb(req->segment, &seg))
        return MC_INVALID_PARAMS;
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = mc_master_service_mount_segment(h->svc, &seg, uuid_from_pb(req->client_id));
    return REPLY(r);
}

static int do_remount(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                      const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__RemountSegmentRequest, req);
    if (req->n_segments > MC_MASTER_RPC_MAX_BATCH)
        return MC_INVALID_PARAMS;
    mc_master_segment *segs = aalloc_n(h, req->n_segments, sizeof *segs);
    for (size_t i = 0; i < req->n_segments; i++)
        if (segment_from_pb(req->segments[i], &segs[i]))
            return MC_INVALID_PARAMS;
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = mc_master_service_remount_segments(h->svc, segs, req->n_segments,
                                                  uuid_from_pb(req->client_id));
    return REPLY(r);
}

static int do_unmount(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                      const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__UnmountSegmentRequest, req);
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = mc_master_service_unmount_segment(h->svc, uuid_from_pb(req->segment_id),
                                                 uuid_from_pb(req->client_id));
    return REPLY(r);
}

typedef int (*start_fn)(mc_master_service *, mc_master_uuid, const void *, size_t, uint64_t,
                        const mc_master_put_config *, mc_master_replica_list *);

static int do_start(mc_master_rpc_handler *h, start_fn fn, const uint8_t *body, size_t len,
                    const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__PutStartRequest, req);
    mc_master_put_config cfg;
    if (config_from_pb(h, req->config, &cfg))
        return MC_INVALID_PARAMS;
    mc_master_replica_list *out = aalloc(h, sizeof *out);
    out->n = 0;
    Mcrpc__PutStartReply r = MCRPC__PUT_START_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), req->key.data, req->key.len,
                  req->size, &cfg, out);
    if (r.status == MC_OK)
        r.replicas = replicas_to_pb(h, out, &r.n_replicas);
    r.segments = h->segs;
    r.n_segments = h->nsegs;
    return REPLY(r);
}

typedef int (*key_fn)(mc_master_service *, mc_master_uuid, const void *, size_t);

static int do_key_op(mc_master_rpc_handler *h, key_fn fn, const uint8_t *body, size_t len,
                     const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__KeyRequest, req);
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), req->key.data, req->key.len);
    return REPLY(r);
}

typedef int (*batch_start_fn)(mc_master_service *, mc_master_uuid, const mc_master_key *,
                              const uint64_t *, size_t, const mc_master_put_config *,
                              mc_master_replica_list *, int *);

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

static int do_batch_start(mc_master_rpc_handler *h, batch_start_fn fn, const uint8_t *body,
                          size_t len, const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__BatchPutStartRequest, req);
    size_t n = req->n_keys;
    if (n > MC_MASTER_RPC_MAX_BATCH || req->n_sizes != n)
        return MC_INVALID_PARAMS;
    mc_master_put_config cfg;
    if (config_from_pb(h, req->config, &cfg))
        return MC_INVALID_PARAMS;
    mc_master_key *keys = keys_from_pb(h, req->keys, n);
    mc_master_replica_list *outs = aalloc_n(h, n, sizeof *outs);
    int *st = aalloc_n(h, n, sizeof *st);
    for (size_t i = 0; i < n; i++) {
        outs[i].n = 0;
        st[i] = MC_INTERNAL_ERROR;
    }
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

static int do_batch_key_op(mc_master_rpc_handler *h, batch_key_fn fn, const uint8_t *body,
                           size_t len, const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__BatchKeysRequest, req);
    size_t n = req->n_keys;
    if (n > MC_MASTER_RPC_MAX_BATCH)
        return MC_INVALID_PARAMS;
    mc_master_key *keys = keys_from_pb(h, req->keys, n);
    int *st = aalloc_n(h, n, sizeof *st);
    for (size_t i = 0; i < n; i++)
        st[i] = MC_INTERNAL_ERROR;
    Mcrpc__BatchStatusReply r = MCRPC__BATCH_STATUS_REPLY__INIT;
    r.status = fn(h->svc, uuid_from_pb(req->client_id), keys, n, st);
    r.n_statuses = n;
    r.statuses = (int32_t *)st;
    return REPLY(r);
}

static int do_get(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                  const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__KeyRequest, req);
    mc_master_replica_list *out = aalloc(h, sizeof *out);
    out->n = 0;
    out->lease_ttl_ms = 0;
    Mcrpc__GetReplicaListReply r = MCRPC__GET_REPLICA_LIST_REPLY__INIT;
    r.status = mc_master_service_get_replica_list(h->svc, req->key.data, req->key.len, out);
    if (r.status == MC_OK) {
        r.replicas = replicas_to_pb(h, out, &r.n_replicas);
        r.lease_ttl_ms = out->lease_ttl_ms;
    }
    r.segments = h->segs;
    r.n_segments = h->nsegs;
    return REPLY(r);
}

static int do_batch_get(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                        const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__BatchKeysRequest, req);
    size_t n = req->n_keys;
    if (n > MC_MASTER_RPC_MAX_BATCH)
        return MC_INVALID_PARAMS;
    mc_master_key *keys = keys_from_pb(h, req->keys, n);
    mc_master_replica_list *outs = aalloc_n(h, n, sizeof *outs);
    int *st = aalloc_n(h, n, sizeof *st);
    for (size_t i = 0; i < n; i++) {
        outs[i].n = 0;
        outs[i].lease_ttl_ms = 0;
        st[i] = MC_INTERNAL_ERROR;
    }
    Mcrpc__BatchGetReplicaListReply r = MCRPC__BATCH_GET_REPLICA_LIST_REPLY__INIT;
    r.status = mc_master_service_batch_get_replica_list(h->svc, keys, n, outs, st);
    r.n_items = n;
    r.items = items_to_pb(h, outs, st, n, true);
    r.segments = h->segs;
    r.n_segments = h->nsegs;
    return REPLY(r);
}

/* get_replica_list_by_regex collection state. */
typedef struct regex_acc {
    mc_master_rpc_handler *h;
    Mcrpc__KeyReplicas **v;
    size_t n, cap;
    size_t bytes;
    bool truncated;
} regex_acc;

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
        size_t cap = acc->cap ? acc->cap * 2 : 64;
        Mcrpc__KeyReplicas **v = realloc(acc->v, cap * sizeof *v);
        if (!v)
            abort();
        acc->v = v;
        acc->cap = cap;
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

static int do_get_regex(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                        const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__RegexRequest, req);
    if (req->pattern.len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    regex_acc acc = {.h = h};
    Mcrpc__GetReplicaListByRegexReply r = MCRPC__GET_REPLICA_LIST_BY_REGEX_REPLY__INIT;
    r.status = mc_master_service_get_replica_list_by_regex(
        h->svc, (const char *)req->pattern.data, req->pattern.len, regex_collect, &acc);
    if (r.status == MC_OK) {
        r.n_matches = acc.n;
        r.matches = acc.v;
        r.truncated = acc.truncated;
        r.segments = h->segs;
        r.n_segments = h->nsegs;
    }
    int rc = REPLY(r);
    free(acc.v);
    return rc;
}

static int do_exist(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                    const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__KeyRequest, req);
    Mcrpc__ExistKeyReply r = MCRPC__EXIST_KEY_REPLY__INIT;
    int rc = mc_master_service_exist_key(h->svc, req->key.data, req->key.len);
    r.status = rc < 0 ? rc : MC_OK;
    r.exists = rc == 1;
    return REPLY(r);
}

static int do_batch_exist(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                          const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__BatchKeysRequest, req);
    size_t n = req->n_keys;
    if (n > MC_MASTER_RPC_MAX_BATCH)
        return MC_INVALID_PARAMS;
    mc_master_key *keys = keys_from_pb(h, req->keys, n);
    int *res = aalloc_n(h, n, sizeof *res);
    for (size_t i = 0; i < n; i++)
        res[i] = MC_INTERNAL_ERROR;
    Mcrpc__BatchExistKeyReply r = MCRPC__BATCH_EXIST_KEY_REPLY__INIT;
    r.status = mc_master_service_batch_exist_key(h->svc, keys, n, res);
    r.n_results = n;
    r.results = (int32_t *)res;
    return REPLY(r);
}

static int do_remove(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                     const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__KeyRequest, req);
    Mcrpc__StatusReply r = MCRPC__STATUS_REPLY__INIT;
    r.status = mc_master_service_remove(h->svc, req->key.data, req->key.len, req->force);
    return REPLY(r);
}

static int do_batch_remove(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                           const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__BatchKeysRequest, req);
    size_t n = req->n_keys;
    if (n > MC_MASTER_RPC_MAX_BATCH)
        return MC_INVALID_PARAMS;
    mc_master_key *keys = keys_from_pb(h, req->keys, n);
    int *st = aalloc_n(h, n, sizeof *st);
    for (size_t i = 0; i < n; i++)
        st[i] = MC_INTERNAL_ERROR;
    Mcrpc__BatchStatusReply r = MCRPC__BATCH_STATUS_REPLY__INIT;
    r.status = mc_master_service_batch_remove(h->svc, keys, n, req->force, st);
    r.n_statuses = n;
    r.statuses = (int32_t *)st;
    return REPLY(r);
}

static int do_remove_regex(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                           const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__RegexRequest, req);
    if (req->pattern.len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    uint64_t count = 0;
    Mcrpc__CountReply r = MCRPC__COUNT_REPLY__INIT;
    r.status = mc_master_service_remove_by_regex(h->svc, (const char *)req->pattern.data,
                                                 req->pattern.len, req->force, &count);
    r.count = count;
    return REPLY(r);
}

static int do_remove_all(mc_master_rpc_handler *h, const uint8_t *body, size_t len,
                         const uint8_t **reply, size_t *reply_len)
{
    UNPACK(Mcrpc__RemoveAllRequest, req);
    uint64_t count = 0;
    Mcrpc__CountReply r = MCRPC__COUNT_REPLY__INIT;
    r.status = mc_master_service_remove_all(h->svc, req->force, &count);
    r.count = count;
    return REPLY(r);
}

/* ---- dispatch ---- */

const char *mc_master_rpc_opcode_name(uint16_t opcode)
{
    switch (opcode) {
    case MCRPC__OPCODE__OP_PING: return "ping";
    case MCRPC__OPCODE__OP_SERVICE_READY: return "service_ready";
    case MCRPC__OPCODE__OP_MOUNT_SEGMENT: return "mount_segment";
    case MCRPC__OPCODE__OP_REMOUNT_SEGMENT: return "remount_segment";
    case MCRPC__OPCODE__OP_UNMOUNT_SEGMENT: return "unmount_segment";
    case MCRPC__OPCODE__OP_PUT_START: return "put_start";
    case MCRPC__OPCODE__OP_PUT_END: return "put_end";
    case MCRPC__OPCODE__OP_PUT_REVOKE: return "put_revoke";
    case MCRPC__OPCODE__OP_BATCH_PUT_START: return "batch_put_start";
    case MCRPC__OPCODE__OP_BATCH_PUT_END: return "batch_put_end";
    case MCRPC__OPCODE__OP_BATCH_PUT_REVOKE: return "batch_put_revoke";
    case MCRPC__OPCODE__OP_UPSERT_START: return "upsert_start";
    case MCRPC__OPCODE__OP_UPSERT_END: return "upsert_end";
    case MCRPC__OPCODE__OP_UPSERT_REVOKE: return "upsert_revoke";
    case MCRPC__OPCODE__OP_BATCH_UPSERT_START: return "batch_upsert_start";
    case MCRPC__OPCODE__OP_BATCH_UPSERT_END: return "batch_upsert_end";
    case MCRPC__OPCODE__OP_BATCH_UPSERT_REVOKE: return "batch_upsert_revoke";
    case MCRPC__OPCODE__OP_GET_REPLICA_LIST: return "get_replica_list";
    case MCRPC__OPCODE__OP_BATCH_GET_REPLICA_LIST: return "batch_get_replica_list";
    case MCRPC__OPCODE__OP_GET_REPLICA_LIST_BY_REGEX: return "get_replica_list_by_regex";
    case MCRPC__OPCODE__OP_EXIST_KEY: return "exist_key";
    case MCRPC__OPCODE__OP_BATCH_EXIST_KEY: return "batch_exist_key";
    case MCRPC__OPCODE__OP_REMOVE: return "remove";
    case MCRPC__OPCODE__OP_BATCH_REMOVE: return "batch_remove";
    case MCRPC__OPCODE__OP_REMOVE_BY_REGEX: return "remove_by_regex";
    case MCRPC__OPCODE__OP_REMOVE_ALL: return "remove_all";
    default: return NULL;
    }
}

static int dispatch(mc_master_rpc_handler *h, uint16_t op, const uint8_t *body, size_t len,
                    const uint8_t **reply, size_t *reply_len)
{
    switch (op) {
    case MCRPC__OPCODE__OP_PING:
        return do_ping(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_SERVICE_READY:
        return do_service_ready(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_MOUNT_SEGMENT:
        return do_mount(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_REMOUNT_SEGMENT:
        return do_remount(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_UNMOUNT_SEGMENT:
        return do_unmount(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_PUT_START:
        return do_start(h, mc_master_service_put_start, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_PUT_END:
        return do_key_op(h, mc_master_service_put_end, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_PUT_REVOKE:
        return do_key_op(h, mc_master_service_put_revoke, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_BATCH_PUT_START:
        return do_batch_start(h, mc_master_service_batch_put_start, body, len, reply,
                              reply_len);
    case MCRPC__OPCODE__OP_BATCH_PUT_END:
        return do_batch_key_op(h, mc_master_service_batch_put_end, body, len, reply,
                               reply_len);
    case MCRPC__OPCODE__OP_BATCH_PUT_REVOKE:
        return do_batch_key_op(h, mc_master_service_batch_put_revoke, body, len, reply,
                               reply_len);
    case MCRPC__OPCODE__OP_UPSERT_START:
        return do_start(h, mc_master_service_upsert_start, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_UPSERT_END:
        return do_key_op(h, mc_master_service_upsert_end, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_UPSERT_REVOKE:
        return do_key_op(h, mc_master_service_upsert_revoke, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_BATCH_UPSERT_START:
        return do_batch_start(h, mc_master_service_batch_upsert_start, body, len, reply,
                              reply_len);
    case MCRPC__OPCODE__OP_BATCH_UPSERT_END:
        return do_batch_key_op(h, mc_master_service_batch_upsert_end, body, len, reply,
                               reply_len);
    case MCRPC__OPCODE__OP_BATCH_UPSERT_REVOKE:
        return do_batch_key_op(h, mc_master_service_batch_upsert_revoke, body, len, reply,
                               reply_len);
    case MCRPC__OPCODE__OP_GET_REPLICA_LIST:
        return do_get(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_BATCH_GET_REPLICA_LIST:
        return do_batch_get(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_GET_REPLICA_LIST_BY_REGEX:
        return do_get_regex(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_EXIST_KEY:
        return do_exist(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_BATCH_EXIST_KEY:
        return do_batch_exist(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_REMOVE:
        return do_remove(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_BATCH_REMOVE:
        return do_batch_remove(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_REMOVE_BY_REGEX:
        return do_remove_regex(h, body, len, reply, reply_len);
    case MCRPC__OPCODE__OP_REMOVE_ALL:
        return do_remove_all(h, body, len, reply, reply_len);
    default:
        return MC_NOT_SUPPORTED;
    }
}

int mc_master_rpc_handle(mc_master_rpc_handler *h, uint16_t opcode, const uint8_t *body,
                         size_t len, const uint8_t **reply, size_t *reply_len)
{
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
        body = empty;
    int rc = dispatch(h, opcode, body, len, reply, reply_len);
    if (rc != 0) {
        *reply = h->out;
        *reply_len = 0;
    }
    return rc;
}
