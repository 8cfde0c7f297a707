/* master_codec.c: conversions between the master client's types (master_client.h,
 * rpc/master_types.h) and the protobuf wire types (proto/master.proto), both ways.
 * Pure functions: no I/O, no locks, no allocation (the reply decoders allocate from the
 * caller's arena only); the RPC files call them. */
#include <string.h>

#include "client/internal.h"
#include "rpc/limits.h"
#include "rpc/pbdec.h"
#include "rpc/pbwire.h"

void mc__pb_uuid(Mcrpc__Uuid *u, mc_master_uuid id)
{
    mcrpc__uuid__init(u);
    u->first = id.first;
    u->second = id.second;
}

/* Checks every entry once: the strings fit mc_master_replica's fields. */
int mc__pb_segtab(Mcrpc__SegmentRef **v, size_t n, mc__segtab *t)
{
    t->v = v;
    t->n = n;
    t->memo = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = v[i]->transport_endpoint ? v[i]->transport_endpoint : "";
        const char *p = v[i]->protocol ? v[i]->protocol : "";
        if (strnlen(e, MC_MASTER_NAME_MAX) >= MC_MASTER_NAME_MAX ||
            strnlen(p, MC_MASTER_PROTOCOL_MAX) >= MC_MASTER_PROTOCOL_MAX)
            return MC_RPC_FAIL;
    }
    return MC_OK;
}

/* Replica descriptors from the master into out. MC_RPC_FAIL when they break the
 * protocol (too many, a segment index outside the reply's table). */
int mc__pb_replicas(Mcrpc__ReplicaDescriptor **v, size_t n, uint64_t lease, mc__segtab *t,
                    mc_master_replica_list *out)
{
    out->n = 0;
    out->lease_ttl_ms = lease;
    if (n > MC_MASTER_MAX_REPLICAS)
        return MC_RPC_FAIL;
    for (size_t i = 0; i < n; i++) {
        const Mcrpc__ReplicaDescriptor *d = v[i];
        if (d->segment >= t->n)
            return MC_RPC_FAIL;
        const Mcrpc__SegmentRef *sr = t->v[d->segment];
        mc_master_replica *r = &out->replicas[i];
        r->segment_id.first = sr->id ? sr->id->first : 0;
        r->segment_id.second = sr->id ? sr->id->second : 0;
        r->address = d->address;
        r->size = d->size;
        r->status = (int)d->status;
        r->fence_epoch = d->fence_epoch;
        r->type = (int)d->type; /* MEMORY, or LOCAL_DISK (read through its owner) */
        /* Cannot truncate: mc__pb_segtab checked every string of the table (so each
         * has its NUL within the field's size). */
        const char *e = sr->transport_endpoint ? sr->transport_endpoint : "";
        const char *pr = sr->protocol ? sr->protocol : "";
        if (t->memo != (size_t)d->segment + 1) {
            t->elen = strlen(e);
            t->plen = strlen(pr);
            t->memo = (size_t)d->segment + 1;
        }
        memcpy(r->transport_endpoint, e, t->elen + 1);
        memcpy(r->protocol, pr, t->plen + 1);
    }
    out->n = (uint32_t)n;
    return MC_OK;
}

static bool str_ok(const char *s, size_t max)
{
    return !s || strnlen(s, max + 1) <= max;
}

/* cfg -> wire config; INVALID_PARAMS when it cannot be sent. */
int mc__pb_config(const mc_master_put_config *cfg, Mcrpc__ReplicateConfig *pc)
{
    mcrpc__replicate_config__init(pc);
    if (!cfg) {
        pc->replica_num = 1;
        return MC_OK;
    }
    if (cfg->n_preferred > MC_MASTER_MAX_PREFERRED ||
        (cfg->n_preferred && !cfg->preferred_segments))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < cfg->n_preferred; i++)
        if (!cfg->preferred_segments[i] ||
            !str_ok(cfg->preferred_segments[i], MC__MASTER_STR_MAX))
            return MC_INVALID_PARAMS;
    if ((unsigned)cfg->soft_pin > MC_MASTER_SOFT_PIN_DISABLE ||
        (unsigned)cfg->strategy > MC_MASTER_STRATEGY_FREE_RATIO_FIRST)
        return MC_INVALID_PARAMS;
    pc->replica_num = cfg->replica_num;
    pc->n_preferred_segments = cfg->n_preferred;
    pc->preferred_segments = (char **)cfg->preferred_segments;
    pc->soft_pin = (Mcrpc__SoftPinAction)cfg->soft_pin;
    pc->has_soft_pin_ttl = cfg->soft_pin_ttl_set;
    pc->soft_pin_ttl_ms = cfg->soft_pin_ttl_ms;
    pc->with_hard_pin = cfg->with_hard_pin;
    pc->strategy = (Mcrpc__AllocationStrategy)cfg->strategy;
    return MC_OK;
}

int mc__pb_segment(const mc_master_segment *s, Mcrpc__Segment *ps, Mcrpc__Uuid *id)
{
    mcrpc__segment__init(ps);
    if (!s || !s->name || !str_ok(s->name, MC__MASTER_STR_MAX) ||
        !str_ok(s->te_endpoint, MC__MASTER_STR_MAX) ||
        !str_ok(s->protocol, MC_MASTER_PROTOCOL_MAX - 1) ||
        !str_ok(s->host_id, MC__MASTER_STR_MAX))
        return MC_INVALID_PARAMS;
    mc__pb_uuid(id, s->id);
    ps->id = id;
    ps->name = (char *)s->name;
    ps->base_addr = s->base;
    ps->size = s->size;
    ps->te_endpoint = (char *)(s->te_endpoint ? s->te_endpoint : "");
    ps->protocol = (char *)(s->protocol ? s->protocol : "");
    ps->host_id = (char *)(s->host_id ? s->host_id : "");
    return MC_OK;
}

/* A key for the wire. Keys the master would refuse for their length are sent empty
 * (it refuses those too, with the same INVALID_PARAMS), so a batch keeps its per-item
 * results without carrying megabytes of bad keys. */
ProtobufCBinaryData mc__pb_key(const void *key, size_t len)
{
    ProtobufCBinaryData b = {0, NULL};
    if (key && len <= MC_MASTER_KEY_MAX) {
        b.len = len;
        b.data = (uint8_t *)key;
    }
    return b;
}

bool mc__master_key_ok(const void *key, size_t len)
{
    return (key || len == 0) && len <= MC_MASTER_KEY_MAX;
}

/* ---- hand-written decoders of the hot batch replies (mc__replydec_unpack) ----
 * Each decoder walks its message's bytes once to check every tag and count the
 * repeated fields (a tag it does not know, or a field it cannot read as protobuf-c
 * would, returns false before anything is allocated), then once more to fill the
 * structs, allocated per repeated field in one piece. Scalars given twice: the last one
 * counts (as protobuf-c). A false anywhere makes mc__replydec_unpack return NULL. */

#define TAG_V(f) MC__PB_TAG(f, MC__PB_VARINT)
#define TAG_L(f) MC__PB_TAG(f, MC__PB_LEN)
#define TAG_F64(f) MC__PB_TAG(f, MC__PB_FIXED64)

static void *rd_alloc(mc__arena *a, size_t n, size_t size)
{
    if (n > SIZE_MAX / 2 / size)
        return NULL;
    return mc__arena_alloc(a, n * size);
}

/* A length-prefixed field at *pp: its data [*d, *d + *n), *pp past it. */
static bool rd_field(const uint8_t **pp, const uint8_t *end, const uint8_t **d, size_t *n)
{
    if (!mc__pb_len(pp, end, n))
        return false;
    *d = *pp;
    *pp += *n;
    return true;
}

static bool rd_skip_len(const uint8_t **pp, const uint8_t *end)
{
    size_t n;
    if (!mc__pb_len(pp, end, &n))
        return false;
    *pp += n;
    return true;
}

static bool rd_string(mc__arena *a, const uint8_t **pp, const uint8_t *end, char **out)
{
    const uint8_t *d;
    size_t n;
    if (!rd_field(pp, end, &d, &n))
        return false;
    char *s = mc__arena_alloc(a, n + 1);
    if (!s)
        return false;
    memcpy(s, d, n);
    s[n] = 0;
    *out = s;
    return true;
}

static bool rd_segment_ref(mc__arena *a, const uint8_t *p, const uint8_t *end,
                           Mcrpc__SegmentRef *r)
{
    static const Mcrpc__SegmentRef init = MCRPC__SEGMENT_REF__INIT;
    *r = init;
    while (p < end) {
        uint8_t t = *p++;
        const uint8_t *d;
        size_t n;
        if (t == TAG_L(1)) {
            /* protobuf-c merges a sub-message given twice: left to it */
            if (r->id || !rd_field(&p, end, &d, &n))
                return false;
            Mcrpc__Uuid *u = mc__arena_alloc(a, sizeof *u);
            if (!u || !mc__pbdec_uuid(d, d + n, u))
                return false;
            r->id = u;
        } else if (t == TAG_L(2)) {
            if (!rd_string(a, &p, end, &r->transport_endpoint))
                return false;
        } else if (t == TAG_L(3)) {
            if (!rd_string(a, &p, end, &r->protocol))
                return false;
        } else {
            return false;
        }
    }
    return true;
}

static bool rd_replica(const uint8_t *p, const uint8_t *end, Mcrpc__ReplicaDescriptor *r)
{
    static const Mcrpc__ReplicaDescriptor init = MCRPC__REPLICA_DESCRIPTOR__INIT;
    *r = init;
    while (p < end) {
        uint8_t t = *p++;
        uint64_t v;
        if ((t & 7) != MC__PB_VARINT || !mc__pb_varint(&p, end, &v))
            return false;
        switch (t >> 3) {
        case 1:
            r->segment = (uint32_t)v;
            break;
        case 2:
            r->address = v;
            break;
        case 3:
            r->size = v;
            break;
        case 4:
            r->status = (Mcrpc__ReplicaStatus)(int32_t)(uint32_t)v;
            break;
        case 5:
            r->fence_epoch = v;
            break;
        case 6:
            r->type = (Mcrpc__ReplicaType)(int32_t)(uint32_t)v;
            break;
        default:
            return false;
        }
    }
    return true;
}

static bool rd_replica_list(mc__arena *a, const uint8_t *p, const uint8_t *end,
                            Mcrpc__ReplicaList *l)
{
    static const Mcrpc__ReplicaList init = MCRPC__REPLICA_LIST__INIT;
    *l = init;
    size_t n = 0;
    for (const uint8_t *q = p; q < end;) {
        uint8_t t = *q++;
        if (t == TAG_V(1) || t == TAG_V(3)) {
            if (!mc__pb_skip_varint(&q, end))
                return false;
        } else if (t == TAG_L(2)) {
            if (!rd_skip_len(&q, end))
                return false;
            n++;
        } else {
            return false;
        }
    }
    Mcrpc__ReplicaDescriptor *d = NULL;
    if (n) {
        l->replicas = rd_alloc(a, n, sizeof *l->replicas);
        d = rd_alloc(a, n, sizeof *d);
        if (!l->replicas || !d)
            return false;
    }
    while (p < end) {
        uint8_t t = *p++;
        uint64_t v;
        if (t == TAG_L(2)) {
            const uint8_t *f;
            size_t fn;
            if (!rd_field(&p, end, &f, &fn) || !rd_replica(f, f + fn, &d[l->n_replicas]))
                return false;
            l->replicas[l->n_replicas] = &d[l->n_replicas];
            l->n_replicas++;
        } else if (!mc__pb_varint(&p, end, &v)) {
            return false;
        } else if (t == TAG_V(1)) {
            l->status = mc__pb_sint32(v);
        } else {
            l->lease_ttl_ms = v;
        }
    }
    return true;
}

/* The shape BatchGetReplicaListReply and BatchPutStartReply share: status = 1 (sint32),
 * items = 2 (ReplicaList), segments = 3 (SegmentRef), view = 15 (int64). */
static bool rd_items_reply(mc__arena *a, const uint8_t *p, const uint8_t *end,
                           int32_t *status, size_t *n_items, Mcrpc__ReplicaList ***items,
                           size_t *n_segs, Mcrpc__SegmentRef ***segs, int64_t *view)
{
    size_t ni = 0, ns = 0;
    for (const uint8_t *q = p; q < end;) {
        uint8_t t = *q++;
        if (t == TAG_V(1) || t == TAG_V(15)) {
            if (!mc__pb_skip_varint(&q, end))
                return false;
        } else if (t == TAG_L(2) || t == TAG_L(3)) {
            if (!rd_skip_len(&q, end))
                return false;
            if (t == TAG_L(2))
                ni++;
            else
                ns++;
        } else {
            return false;
        }
    }
    Mcrpc__ReplicaList *il = NULL;
    Mcrpc__SegmentRef *sl = NULL;
    if (ni) {
        *items = rd_alloc(a, ni, sizeof **items);
        il = rd_alloc(a, ni, sizeof *il);
        if (!*items || !il)
            return false;
    }
    if (ns) {
        *segs = rd_alloc(a, ns, sizeof **segs);
        sl = rd_alloc(a, ns, sizeof *sl);
        if (!*segs || !sl)
            return false;
    }
    while (p < end) {
        uint8_t t = *p++;
        if (t == TAG_L(2) || t == TAG_L(3)) {
            const uint8_t *f;
            size_t fn;
            if (!rd_field(&p, end, &f, &fn))
                return false;
            if (t == TAG_L(2)) {
                if (!rd_replica_list(a, f, f + fn, &il[*n_items]))
                    return false;
                (*items)[*n_items] = &il[*n_items];
                (*n_items)++;
            } else {
                if (!rd_segment_ref(a, f, f + fn, &sl[*n_segs]))
                    return false;
                (*segs)[*n_segs] = &sl[*n_segs];
                (*n_segs)++;
            }
            continue;
        }
        uint64_t v;
        if (!mc__pb_varint(&p, end, &v))
            return false;
        if (t == TAG_V(1))
            *status = mc__pb_sint32(v);
        else
            *view = (int64_t)v;
    }
    return true;
}

/* The shape BatchStatusReply and BatchExistKeyReply share: status = 1 (sint32), a packed
 * sint32 list = 2 (in one piece), view = 15 (int64). */
static bool rd_codes_reply(mc__arena *a, const uint8_t *p, const uint8_t *end,
                           int32_t *status, size_t *n, int32_t **v, int64_t *view)
{
    bool seen = false;
    while (p < end) {
        uint8_t t = *p++;
        if (t == TAG_L(2)) {
            const uint8_t *f;
            size_t fn;
            if (seen || !rd_field(&p, end, &f, &fn) || fn == 0)
                return false;
            seen = true;
            size_t k = 0;
            for (size_t i = 0; i < fn; i++)
                k += !(f[i] & 0x80);
            int32_t *out = rd_alloc(a, k, sizeof *out);
            if (!out)
                return false;
            const uint8_t *fe = f + fn;
            for (size_t i = 0; i < k; i++) {
                uint64_t x;
                if (!mc__pb_varint(&f, fe, &x))
                    return false;
                out[i] = mc__pb_sint32(x);
            }
            if (f != fe)
                return false;
            *n = k;
            *v = out;
            continue;
        }
        uint64_t x;
        if ((t != TAG_V(1) && t != TAG_V(15)) || !mc__pb_varint(&p, end, &x))
            return false;
        if (t == TAG_V(1))
            *status = mc__pb_sint32(x);
        else
            *view = (int64_t)x;
    }
    return true;
}

/* rd_new: a copy of the message initialiser init (size bytes) in the arena; NULL when
 * the arena is full. */
static void *rd_new(mc__arena *a, const void *init, size_t size)
{
    void *r = mc__arena_alloc(a, size);
    if (r)
        memcpy(r, init, size);
    return r;
}

const ProtobufCMessage *mc__replydec_unpack(const ProtobufCMessageDescriptor *desc,
                                            mc__arena *a, size_t len, const uint8_t *body)
{
    const uint8_t *p = body, *end = body + len;
    if (len && !body)
        return NULL;
    /* each reply: its initialiser copied into the arena, filled by the reader of its shape */
#define RD_REPLY(T, INIT, READ)                                                            \
    do {                                                                                   \
        static const T init = INIT;                                                        \
        T *r = rd_new(a, &init, sizeof init);                                              \
        return r && (READ) ? &r->base : NULL;                                              \
    } while (0)
    if (desc == &mcrpc__batch_get_replica_list_reply__descriptor)
        RD_REPLY(Mcrpc__BatchGetReplicaListReply, MCRPC__BATCH_GET_REPLICA_LIST_REPLY__INIT,
                 rd_items_reply(a, p, end, &r->status, &r->n_items, &r->items,
                                &r->n_segments, &r->segments, &r->view));
    if (desc == &mcrpc__batch_put_start_reply__descriptor)
        RD_REPLY(Mcrpc__BatchPutStartReply, MCRPC__BATCH_PUT_START_REPLY__INIT,
                 rd_items_reply(a, p, end, &r->status, &r->n_items, &r->items,
                                &r->n_segments, &r->segments, &r->view));
    if (desc == &mcrpc__batch_status_reply__descriptor)
        RD_REPLY(Mcrpc__BatchStatusReply, MCRPC__BATCH_STATUS_REPLY__INIT,
                 rd_codes_reply(a, p, end, &r->status, &r->n_statuses, &r->statuses,
                                &r->view));
    if (desc == &mcrpc__batch_exist_key_reply__descriptor)
        RD_REPLY(Mcrpc__BatchExistKeyReply, MCRPC__BATCH_EXIST_KEY_REPLY__INIT,
                 rd_codes_reply(a, p, end, &r->status, &r->n_results, &r->results,
                                &r->view));
#undef RD_REPLY
    return NULL;
}
