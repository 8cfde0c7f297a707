/* master_tasks.c: the master client's replica-task RPCs (create_copy_task,
 * create_move_task, query_task, fetch_tasks, mark_task_to_complete; proto/master.proto,
 * master/tasks.c; upstream CreateCopyTask / CreateMoveTask / QueryTask / FetchTasks /
 * MarkTaskToComplete). */
#include <stdio.h>
#include <string.h>

#include "client/internal.h"
#include "mooncake/status.h"

static mc_master_uuid uuid_of(const Mcrpc__Uuid *u)
{
    return u ? (mc_master_uuid){u->first, u->second} : (mc_master_uuid){0, 0};
}

static int take_create(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__CreateTaskReply *r = (const Mcrpc__CreateTaskReply *)m;
    if (r->status == MC_OK)
        *(mc_master_uuid *)user = uuid_of(r->id);
    return r->status;
}

int mc_master_client_create_task(mc_master_client *c, int type, const void *key, size_t key_len,
                                 const char *source, const char *const *targets, size_t n,
                                 mc_master_uuid *id)
{
    if (id)
        *id = (mc_master_uuid){0, 0};
    if (!c || !id || !key || key_len == 0 || key_len > MC_MASTER_KEY_MAX ||
        n > MC_MASTER_MAX_TASK_TARGETS || (n && !targets) ||
        (source && strlen(source) > MC__MASTER_STR_MAX))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        if (!targets[i] || strlen(targets[i]) > MC__MASTER_STR_MAX)
            return MC_INVALID_PARAMS;
    Mcrpc__CreateTaskRequest req = MCRPC__CREATE_TASK_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = key_len;
    req.source = (char *)(source ? source : "");
    req.n_targets = n;
    req.targets = (char **)targets;
    uint16_t op = type == MC_MASTER_TASK_REPLICA_MOVE ? MCRPC__OPCODE__OP_CREATE_MOVE_TASK
                                                      : MCRPC__OPCODE__OP_CREATE_COPY_TASK;
    return mc__rpc_single(c, op, &req.base, &mcrpc__create_task_reply__descriptor, take_create,
                          id);
}

static int take_query(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__QueryTaskReply *r = (const Mcrpc__QueryTaskReply *)m;
    mc_master_task_info *o = user;
    if (r->status != MC_OK)
        return r->status;
    o->id = uuid_of(r->id);
    o->type = (int)r->type;
    o->status = (int)r->task_status;
    o->created_at_ms_epoch = r->created_at_ms_epoch;
    o->last_updated_at_ms_epoch = r->last_updated_at_ms_epoch;
    o->assigned_client = uuid_of(r->assigned_client);
    snprintf(o->message, sizeof o->message, "%s", r->message ? r->message : "");
    return MC_OK;
}

int mc_master_client_query_task(mc_master_client *c, mc_master_uuid id, mc_master_task_info *out)
{
    if (!c || !out)
        return MC_INVALID_PARAMS;
    memset(out, 0, sizeof *out);
    Mcrpc__Uuid u;
    mc__pb_uuid(&u, id);
    Mcrpc__QueryTaskRequest req = MCRPC__QUERY_TASK_REQUEST__INIT;
    req.id = &u;
    return mc__rpc_single(c, MCRPC__OPCODE__OP_QUERY_TASK, &req.base,
                          &mcrpc__query_task_reply__descriptor, take_query, out);
}

typedef struct fetch_out {
    mc_master_task_work *w;
    uint32_t *n;
} fetch_out;

static int take_fetch(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__FetchTasksReply *r = (const Mcrpc__FetchTasksReply *)m;
    fetch_out *o = user;
    if (r->status != MC_OK)
        return r->status;
    if (r->n_tasks > 1)
        return MC_RPC_FAIL;
    if (r->n_tasks == 0)
        return MC_OK;
    const Mcrpc__TaskWork *t = r->tasks[0];
    if (!t || t->key.len == 0 || t->key.len > MC_MASTER_KEY_MAX || !t->src_endpoint ||
        !t->dst_endpoint || strlen(t->src_endpoint) > MC__MASTER_STR_MAX ||
        strlen(t->dst_endpoint) > MC__MASTER_STR_MAX)
        return MC_RPC_FAIL;
    mc_master_task_work *w = o->w;
    w->id = uuid_of(t->id);
    w->part = t->part;
    w->size = t->size;
    snprintf(w->src_endpoint, sizeof w->src_endpoint, "%s", t->src_endpoint);
    w->src_address = t->src_address;
    snprintf(w->dst_endpoint, sizeof w->dst_endpoint, "%s", t->dst_endpoint);
    w->dst_address = t->dst_address;
    w->key_len = t->key.len;
    memcpy(w->key, t->key.data, t->key.len);
    *o->n = 1;
    return MC_OK;
}

int mc_master_client_fetch_tasks(mc_master_client *c, mc_master_uuid client_id,
                                 mc_master_task_work *out, uint32_t *n)
{
    if (n)
        *n = 0;
    if (!c || !out || !n)
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid u;
    mc__pb_uuid(&u, client_id);
    Mcrpc__FetchTasksRequest req = MCRPC__FETCH_TASKS_REQUEST__INIT;
    req.client_id = &u;
    fetch_out o = {out, n};
    return mc__rpc_single(c, MCRPC__OPCODE__OP_FETCH_TASKS, &req.base,
                          &mcrpc__fetch_tasks_reply__descriptor, take_fetch, &o);
}

static int take_st(void *user, const ProtobufCMessage *m)
{
    (void)user;
    return ((const Mcrpc__StatusReply *)m)->status;
}

int mc_master_client_mark_task_to_complete(mc_master_client *c, mc_master_uuid client_id,
                                           mc_master_uuid id, uint32_t part, int status,
                                           const char *message)
{
    if (!c)
        return MC_INVALID_PARAMS;
    char msg[MC__MASTER_STR_MAX + 1];
    snprintf(msg, sizeof msg, "%s", message ? message : "");
    Mcrpc__Uuid cu, tu;
    mc__pb_uuid(&cu, client_id);
    mc__pb_uuid(&tu, id);
    Mcrpc__MarkTaskRequest req = MCRPC__MARK_TASK_REQUEST__INIT;
    req.client_id = &cu;
    req.id = &tu;
    req.part = part;
    req.task_status = status;
    req.message = msg;
    return mc__rpc_single(c, MCRPC__OPCODE__OP_MARK_TASK_TO_COMPLETE, &req.base,
                          &mcrpc__status_reply__descriptor, take_st, NULL);
}
