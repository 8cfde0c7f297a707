/* master_offload.c: the master client's disk-tier RPCs (offload_heartbeat, offload_end;
 * proto/master.proto, master/offload.c; upstream OffloadObjectHeartbeat /
 * NotifyOffloadSuccess, upstream-mooncake.md §4.10). */
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/status.h"

static int take_hb(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__OffloadHeartbeatReply *r = (const Mcrpc__OffloadHeartbeatReply *)m;
    mc_master_offload_tasks *out = user;
    if (r->status != MC_OK)
        return r->status;
    if (r->n_tasks > MC_MASTER_MAX_OFFLOAD_TASKS)
        return MC_RPC_FAIL;
    size_t kb = 0;
    for (size_t i = 0; i < r->n_tasks; i++) {
        if (!r->tasks[i] || r->tasks[i]->key.len == 0 ||
            r->tasks[i]->key.len > MC_MASTER_KEY_MAX)
            return MC_RPC_FAIL;
        kb += r->tasks[i]->key.len;
    }
    uint8_t *keys = r->n_tasks ? mc_xmalloc(kb) : NULL;
    size_t off = 0;
    for (size_t i = 0; i < r->n_tasks; i++) {
        const Mcrpc__OffloadItem *t = r->tasks[i];
        memcpy(keys + off, t->key.data, t->key.len);
        out->items[i] = (mc_master_offload_item){.op = (int)t->op, .key = keys + off,
                                                 .key_len = t->key.len, .size = t->size,
                                                 .address = t->address, .status = MC_OK,
                                                 .gen = t->gen};
        off += t->key.len;
    }
    out->n = (uint32_t)r->n_tasks;
    out->keys = keys;
    out->fresh = r->fresh;
    if (r->fsdir && strlen(r->fsdir) >= sizeof out->fsdir)
        return MC_RPC_FAIL;
    memcpy(out->fsdir, r->fsdir ? r->fsdir : "", r->fsdir ? strlen(r->fsdir) + 1 : 1);
    return MC_OK;
}

int mc_master_client_offload_heartbeat(mc_master_client *c, mc_master_uuid client_id,
                                       const char *endpoint, uint32_t max_tasks,
                                       mc_master_offload_tasks *out)
{
    if (out) {
        out->n = 0;
        out->keys = NULL;
        out->fresh = false;
        out->fsdir[0] = '\0';
    }
    if (!c || !out || !endpoint || strlen(endpoint) > MC__MASTER_STR_MAX)
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid id;
    mc__pb_uuid(&id, client_id);
    Mcrpc__OffloadHeartbeatRequest req = MCRPC__OFFLOAD_HEARTBEAT_REQUEST__INIT;
    req.client_id = &id;
    req.endpoint = (char *)endpoint;
    req.max_tasks = max_tasks;
    return mc__rpc_single(c, MCRPC__OPCODE__OP_OFFLOAD_HEARTBEAT, &req.base,
                          &mcrpc__offload_heartbeat_reply__descriptor, take_hb, out);
}

typedef struct end_out {
    int *st;
    size_t n;
} end_out;

static int take_end(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__BatchStatusReply *r = (const Mcrpc__BatchStatusReply *)m;
    end_out *o = user;
    if (r->status != MC_OK)
        return r->status;
    if (r->n_statuses != o->n)
        return MC_RPC_FAIL;
    if (o->st)
        for (size_t i = 0; i < o->n; i++)
            o->st[i] = r->statuses[i];
    return MC_OK;
}

int mc_master_client_offload_end(mc_master_client *c, mc_master_uuid client_id,
                                 const char *endpoint, const mc_master_offload_item *items,
                                 size_t n, int *statuses)
{
    if (!c || !endpoint || strlen(endpoint) > MC__MASTER_STR_MAX ||
        n > MC_MASTER_MAX_OFFLOAD_TASKS || (n && !items))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        if (!mc__master_key_ok(items[i].key, items[i].key_len))
            return MC_INVALID_PARAMS;
    Mcrpc__Uuid id;
    mc__pb_uuid(&id, client_id);
    Mcrpc__OffloadItem *d = mc_xcalloc(n ? n : 1, sizeof *d);
    Mcrpc__OffloadItem **v = mc_xcalloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; i < n; i++) {
        mcrpc__offload_item__init(&d[i]);
        d[i].op = (uint32_t)items[i].op;
        d[i].key = mc__pb_key(items[i].key, items[i].key_len);
        d[i].size = items[i].size;
        d[i].address = items[i].address;
        d[i].status = items[i].status;
        d[i].gen = items[i].gen;
        v[i] = &d[i];
    }
    Mcrpc__OffloadEndRequest req = MCRPC__OFFLOAD_END_REQUEST__INIT;
    req.client_id = &id;
    req.endpoint = (char *)endpoint;
    req.n_results = n;
    req.results = v;
    end_out o = {statuses, n};
    int rc = mc__rpc_single(c, MCRPC__OPCODE__OP_OFFLOAD_END, &req.base,
                            &mcrpc__batch_status_reply__descriptor, take_end, &o);
    free(v);
    free(d);
    return rc;
}
