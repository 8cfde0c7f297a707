/* tasks.c: the executor side of replica copy / move tasks (master/tasks.c; upstream's
 * client polls FetchTasks and answers MarkTaskToComplete).
 *
 * A client with a global segment runs one task thread. It asks the master for work
 * (mc_master_client_fetch_tasks, a dedicated RPC like the disk tier's offload heartbeat,
 * so a long copy never delays the liveness ping) when the heartbeat's ping reply says a
 * task waits for it (tasks_pending: the heartbeat kicks this thread, so an idle client
 * costs the master no extra RPC), and otherwise every MC_TASK_POLL_MS (10..600000,
 * default 5000: the fallback should a hint be lost); while work comes it asks again at
 * once. A part names a replica the
 * master reserved in OUR segment (hidden from readers until we report) and a source
 * replica: the thread READs the source straight into the reserved memory over the
 * transfer engine (a memcpy when the source is in our own segment too), then reports the
 * result, which the master turns into a COMPLETE replica (or frees). The master's
 * processing timeout covers a lost report. Only parts whose target is the global
 * segment are executed; a part in an extra segment (mount_segment) is reported
 * INVALID_PARAMS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/internal.h"
#include "common/env.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MC__STORE_TAG

static int run_part(mc_store *s, const mc_master_task_work *w, char *msg, size_t msz)
{
    if (!mc__in_own_segment(s, w->dst_endpoint, w->dst_address, w->size)) {
        snprintf(msg, msz, "the target is not this client's global segment");
        return MC_INVALID_PARAMS;
    }
    void *dst = (void *)(uintptr_t)w->dst_address;
    if (mc__in_own_segment(s, w->src_endpoint, w->src_address, w->size)) {
        memmove(dst, (const void *)(uintptr_t)w->src_address, w->size);
        return MC_OK;
    }
    mc__xfer x;
    mc__xfer_init(&x, s);
    mc_te_segment_t h;
    int rc = mc__xfer_seg(&x, w->src_endpoint, &h);
    if (rc != MC_OK) {
        snprintf(msg, msz, "cannot open the source segment %.150s: %.60s", w->src_endpoint,
                 mc_strerror(rc));
        mc__xfer_deinit(&x);
        return MC_TRANSFER_FAIL;
    }
    mc__xfer_add(&x, MC_TE_OP_READ, dst, h, w->src_address, w->size, 0);
    int err = MC_OK;
    mc__xfer_run(&x, &err, NULL, NULL);
    mc__xfer_deinit(&x);
    if (err != MC_OK)
        snprintf(msg, msz, "reading the source replica at %.150s failed: %.60s", w->src_endpoint,
                 mc_strerror(err));
    return err;
}

static void *task_main(void *arg)
{
    mc_store *s = arg;
    mc_master_task_work *w = mc_xmalloc(sizeof *w);
    pthread_mutex_lock(&s->task_mu);
    while (!s->task_stop) {
        pthread_mutex_unlock(&s->task_mu);
        uint32_t n = 0;
        if (mc_master_client_fetch_tasks(s->mc, s->client_id, w, &n) != MC_OK)
            n = 0;
        if (n) {
            char msg[MC_MASTER_TASK_MSG_MAX] = "";
            int st = run_part(s, w, msg, sizeof msg);
            int rc = mc_master_client_mark_task_to_complete(s->mc, s->client_id, w->id,
                                                            w->part, st, msg);
            if (rc != MC_OK)
                mc_log(MC_LOG_WARN, TAG, "reporting a replica task failed: %s",
                       mc_strerror(rc));
            atomic_fetch_add(st == MC_OK ? &s->tasks_done : &s->tasks_failed, 1);
        }
        pthread_mutex_lock(&s->task_mu);
        if (n) /* more may be waiting: ask again at once */
            continue;
        struct timespec ts = mc_monotonic_in_ms(s->task_poll_ms);
        while (!s->task_stop && !s->task_kick &&
               pthread_cond_timedwait(&s->task_cond, &s->task_mu, &ts) == 0) {
        }
        s->task_kick = false;
    }
    pthread_mutex_unlock(&s->task_mu);
    free(w);
    return NULL;
}

int mc__tasks_start(mc_store *s)
{
    if (!s->seg_base)
        return MC_OK; /* no segment: never a target */
    uint64_t ms = 5000;
    if (mc_env_u64("MC_TASK_POLL_MS", 5000, 10, 600000, &ms) != 0)
        return MC_INVALID_PARAMS; /* the variable was named in the log */
    s->task_poll_ms = (uint32_t)ms;
    s->task_stop = false;
    if (pthread_create(&s->task_thread, NULL, task_main, s) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup: cannot start the replica-task thread");
        return MC_INTERNAL_ERROR;
    }
    s->task_started = true;
    return MC_OK;
}

void mc__tasks_kick(mc_store *s)
{
    pthread_mutex_lock(&s->task_mu);
    s->task_kick = true;
    pthread_cond_broadcast(&s->task_cond);
    pthread_mutex_unlock(&s->task_mu);
}

void mc__tasks_stop(mc_store *s)
{
    pthread_mutex_lock(&s->task_mu);
    s->task_stop = true;
    pthread_cond_broadcast(&s->task_cond);
    pthread_mutex_unlock(&s->task_mu);
    if (s->task_started)
        pthread_join(s->task_thread, NULL);
    s->task_started = false;
}

/* ---- the store API (include/mooncake/store.h) ---- */

int mc_store_create_copy_task(mc_store *s, const void *key, size_t key_len,
                              const char *const *targets, size_t n, uint64_t id[2])
{
    if (!id)
        return MC_INVALID_PARAMS;
    id[0] = id[1] = 0;
    if (!key || key_len == 0 || key_len > MC_MASTER_KEY_MAX || !targets || n == 0 ||
        n > MC_MASTER_MAX_TASK_TARGETS)
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        if (!targets[i] || !*targets[i] || strlen(targets[i]) >= MC_STORE_NAME_MAX)
            return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    mc_master_uuid u;
    rc = mc_master_client_create_task(s->mc, MC_MASTER_TASK_REPLICA_COPY, key, key_len, NULL,
                                      targets, n, &u);
    mc__store_leave(s);
    if (rc == MC_OK) {
        id[0] = u.first;
        id[1] = u.second;
    }
    return rc;
}

int mc_store_create_move_task(mc_store *s, const void *key, size_t key_len, const char *source,
                              const char *target, uint64_t id[2])
{
    if (!id)
        return MC_INVALID_PARAMS;
    id[0] = id[1] = 0;
    if (!key || key_len == 0 || key_len > MC_MASTER_KEY_MAX || !source || !*source ||
        !target || !*target || strlen(source) >= MC_STORE_NAME_MAX ||
        strlen(target) >= MC_STORE_NAME_MAX)
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    mc_master_uuid u;
    const char *t[1] = {target};
    rc = mc_master_client_create_task(s->mc, MC_MASTER_TASK_REPLICA_MOVE, key, key_len, source,
                                      t, 1, &u);
    mc__store_leave(s);
    if (rc == MC_OK) {
        id[0] = u.first;
        id[1] = u.second;
    }
    return rc;
}

int mc_store_query_task(mc_store *s, const uint64_t id[2], mc_store_task_info *out)
{
    if (!id || !out)
        return MC_INVALID_PARAMS;
    memset(out, 0, sizeof *out);
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    mc_master_task_info t;
    rc = mc_master_client_query_task(s->mc, (mc_master_uuid){id[0], id[1]}, &t);
    mc__store_leave(s);
    if (rc != MC_OK)
        return rc;
    out->id[0] = t.id.first;
    out->id[1] = t.id.second;
    out->type = t.type;
    out->status = t.status;
    out->created_at_ms_epoch = t.created_at_ms_epoch;
    out->last_updated_at_ms_epoch = t.last_updated_at_ms_epoch;
    out->assigned_client[0] = t.assigned_client.first;
    out->assigned_client[1] = t.assigned_client.second;
    snprintf(out->message, sizeof out->message, "%s", t.message);
    return MC_OK;
}
