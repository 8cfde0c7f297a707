/* master_codec.c: conversions between the master client's types (master_client.h,
 * rpc/master_types.h) and the protobuf wire types (proto/master.proto), both ways.
 * Pure functions: no I/O, no locks, no allocation; the RPC files call them. */
#include <string.h>

#include "client/internal.h"
#include "rpc/limits.h"

void mc__pb_uuid(Mcrpc__Uuid *u, mc_master_uuid id)
{
    mcrpc__uuid__init(u);
    u->first = id.first;
    u->second = id.second;
}

static bool copy_str(char *dst, size_t cap, const char *src)
{
    if (!src)
        src = "";
    size_t n = strnlen(src, cap);
    if (n >= cap)
        return false;
    memcpy(dst, src, n + 1);
    return true;
}

/* Checks every entry once: the strings fit mc_master_replica's fields. */
int mc__pb_segtab(Mcrpc__SegmentRef **v, size_t n, mc__segtab *t)
{
    t->v = v;
    t->n = n;
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
int mc__pb_replicas(Mcrpc__ReplicaDescriptor **v, size_t n, uint64_t lease,
                    const mc__segtab *t, mc_master_replica_list *out)
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
        /* Cannot truncate: mc__pb_segtab checked every string of the table. */
        copy_str(r->transport_endpoint, sizeof r->transport_endpoint, sr->transport_endpoint);
        copy_str(r->protocol, sizeof r->protocol, sr->protocol);
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
