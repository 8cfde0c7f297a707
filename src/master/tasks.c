/* tasks.c: replica copy / move tasks (upstream's task manager: CreateCopyTask,
 * CreateMoveTask, QueryTask, FetchTasks, MarkTaskToComplete; upstream-mooncake.md §1.4,
 * §4; the task-manager flags max_total_{finished,pending,processing}_tasks and
 * {pending,processing}_task_timeout_sec).
 *
 * A task copies the bytes of one complete object into a new memory replica on each of
 * its target segments (a move: one target, then the source replica is dropped). The
 * executor of each target ("part") is the client that OWNS the target segment: it pulls
 * the bytes from a source replica over its transfer engine straight into its own
 * memory. Why the owner and not the creating client: the bytes then cross the network
 * once (source -> target) instead of twice through the creator; the owner is the one
 * process whose death makes the target useless anyway (its segment goes with it, so a
 * dead executor is seen as its target segment leaving: the part fails); and the
 * creator may be a process without a transfer engine path to either segment. The
 * assigned_client of a task is the executor of its first target.
 *
 * Life of a part: at creation the master reserves the space on the target (placement
 * restricted to that segment), kept HERE, outside the object: readers never see it. The
 * executor fetches the part (PENDING -> PROCESSING), transfers and reports; on OK the
 * reservation becomes a replica of the object (the record is rebuilt with one more
 * replica), so it is visible only once its bytes are there. On failure, timeout or a
 * target segment gone, the reservation is given back (quarantined when the executor may
 * still be writing) and the task FAILS with a message. A move's source replica is dropped
 * after its target part committed; an active read lease defers its space like a forced
 * remove (the deferred list of space.c), so a reader still transferring from it finishes
 * first. The object is leased at creation so eviction leaves the source alone while the
 * executor fetches; at commit the source replica must still be the object's (same slot
 * and address), else the copy is refused (the source may have been removed meanwhile). An
 * upsert of the key while a task is unfinished (it may rewrite the source in place) marks
 * the task stale: a stale part never commits.
 *
 * State (struct mc__tasks, one mutex, a leaf): `active` (PENDING / PROCESSING tasks,
 * oldest first) and `done` (SUCCESS / FAILED, oldest first, at most
 * max_total_finished_tasks: the oldest is forgotten past it, and query_task then answers
 * TASK_NOT_FOUND). Lookups by id walk both lists (tasks are rare, control-plane calls). */
#include <stdio.h>

#include "master/internal.h"
#include "mooncake/log.h"

enum { P_PENDING, P_PROCESSING, P_DONE, P_FAILED };

typedef struct tpart {
    int state;
    uint32_t slot;          /* target segment slot                        */
    mc_master_uuid seg_id;  /* ... and its id (a reused slot is detected) */
    mc_master_uuid owner;   /* the executor                               */
    rep r;                  /* the reservation (handle NONE once given up) */
    char endpoint[MC_MASTER_NAME_MAX];
} tpart;

typedef struct task {
    mc_list link; /* in active or done */
    mc_master_task_info info;
    uint64_t created, sent; /* service clock ms (timeouts) */
    uint64_t size;
    uint32_t src_slot;
    mc_master_uuid src_seg_id;
    uint64_t src_addr;
    char src_endpoint[MC_MASTER_NAME_MAX];
    uint32_t nparts, ndone, nfailed;
    bool stale; /* an upsert rewrote the object: no part may commit */
    tpart parts[MC_MASTER_MAX_TASK_TARGETS];
    size_t klen;
    uint8_t *key; /* freed when the task finishes */
} task;

struct mc__tasks {
    pthread_mutex_t mu;
    mc_list active, done;
    size_t nactive, npending, nprocessing, ndone;
    counter unfinished; /* nactive, readable without mu (the upsert hook's fast path) */
};

void mc__tasks_create(mc_master_service *svc)
{
    struct mc__tasks *t = mc_xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    mc_list_init(&t->active);
    mc_list_init(&t->done);
    svc->tasks = t;
}

static void task_free(task *k)
{
    free(k->key);
    free(k);
}

void mc__tasks_destroy(mc_master_service *svc)
{
    struct mc__tasks *t = svc->tasks;
    if (!t)
        return;
    /* reservations of unfinished tasks go with the segments' allocators */
    mc_list *lists[2] = {&t->active, &t->done};
    for (int i = 0; i < 2; i++)
        while (!mc_list_empty(lists[i])) {
            task *k = MC_CONTAINER_OF(lists[i]->next, task, link);
            mc_list_remove(&k->link);
            task_free(k);
        }
    pthread_mutex_destroy(&t->mu);
    free(t);
    svc->tasks = NULL;
}

/* ---- helpers ---- */

static task *find_in(mc_list *l, mc_master_uuid id)
{
    MC_LIST_FOREACH(it, l) {
        task *k = MC_CONTAINER_OF(it, task, link);
        if (uuid_eq(k->info.id, id))
            return k;
    }
    return NULL;
}

/* The slot of the live (mounted, served) segment named or reached at name, or
 * UINT32_MAX. seg_lock held. */
static uint32_t seg_by_name(mc_master_service *svc, const char *name)
{
    for (uint32_t i = 0; i < svc->nslots; i++) {
        const seg *s = svc->segs[i];
        if (s && !s->unmounting && !s->pending &&
            (!strcmp(s->name, name) || !strcmp(s->endpoint, name)))
            return i;
    }
    return UINT32_MAX;
}

static bool seg_same(mc_master_service *svc, uint32_t slot, mc_master_uuid id)
{
    return slot < svc->nslots && svc->segs[slot] && uuid_eq(svc->segs[slot]->id, id);
}

/* Gives a part's reservation back. hold: the executor may still be writing into it
 * (quarantine as a revoked write of its). seg_lock held (read), tasks.mu not. */
static void part_release_locked(mc_master_service *svc, tpart *p, bool hold, uint64_t now)
{
    if (p->r.handle == MC__ALLOC_NONE || !seg_same(svc, p->slot, p->seg_id))
        return; /* nothing reserved, or its segment (and allocator) went */
    obj tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.owner = p->owner;
    mc__space_release_rep_locked(svc, &tmp, &p->r, hold ? MC__SPACE_REVOKED
                                                        : MC__SPACE_REMOVED, now);
}

/* push_done_locked: appends finished task k (taken) to the done list (tasks.mu held) and
 * forgets the oldest finished ones past max_total_finished_tasks. */
static void push_done_locked(mc_master_service *svc, task *k)
{
    struct mc__tasks *t = svc->tasks;
    mc_list_push_back(&t->done, &k->link);
    t->ndone++;
    while (t->ndone > svc->cfg.max_total_finished_tasks && !mc_list_empty(&t->done)) {
        task *old = MC_CONTAINER_OF(t->done.next, task, link);
        mc_list_remove(&old->link);
        t->ndone--;
        task_free(old);
    }
}

/* Moves k to the done list (tasks.mu held), forgetting the oldest finished ones past the
 * bound, and logs its end (held: bit i = part i's reservation is quarantined, its
 * executor may still be writing). */
static void finish_locked(mc_master_service *svc, task *k, int status, const char *msg,
                          uint32_t held)
{
    struct mc__tasks *t = svc->tasks;
    if (k->info.status == MC_MASTER_TASK_PENDING)
        t->npending--;
    else
        t->nprocessing--;
    k->info.status = status;
    k->info.last_updated_at_ms_epoch = mc_wall_ms();
    if (msg)
        snprintf(k->info.message, sizeof k->info.message, "%s", msg);
    mc__log_task_rec lr = {.end = true, .id = k->info.id, .assigned = k->info.assigned_client,
                           .type = k->info.type, .status = status,
                           .message = k->info.message, .held_mask = held,
                           .updated_ms = k->info.last_updated_at_ms_epoch};
    mc__log_task(svc, &lr); /* a promoted standby / a restore reports it so */
    mc_list_remove(&k->link);
    t->nactive--;
    csub(&t->unfinished, 1);
    free(k->key);
    k->key = NULL;
    push_done_locked(svc, k);
}

/* A disk-only object whose memory replica is being promoted (hidden from readers). */
static bool promoting(const obj *o)
{
    return (o->flags & (F_DISK | F_OFFQ)) == (F_DISK | F_OFFQ) && o->nrep;
}

/* ---- creation ---- */

static int create(mc_master_service *svc, int type, const void *key, size_t key_len,
                  const char *source, const char *const *targets, size_t n, mc_master_uuid *id)
{
    mc_master_op op = type == MC_MASTER_TASK_REPLICA_MOVE ? MC_MASTER_OP_CREATE_MOVE_TASK
                                                          : MC_MASTER_OP_CREATE_COPY_TASK;
    struct mc__tasks *t = svc->tasks;
    int rc = check_key(key, key_len);
    if (id)
        *id = (mc_master_uuid){0, 0};
    if (!rc && (!id || !targets || n == 0 || n > MC_MASTER_MAX_TASK_TARGETS ||
                (type == MC_MASTER_TASK_REPLICA_MOVE && (n != 1 || !source || !*source))))
        rc = MC_INVALID_PARAMS;
    for (size_t i = 0; !rc && i < n; i++) {
        if (!targets[i] || !*targets[i] || strlen(targets[i]) >= MC_MASTER_NAME_MAX)
            rc = MC_INVALID_PARAMS;
        else if (type == MC_MASTER_TASK_REPLICA_MOVE && !strcmp(targets[i], source))
            rc = MC_INVALID_PARAMS; /* the same segment */
        for (size_t j = 0; !rc && j < i; j++)
            if (!strcmp(targets[i], targets[j]))
                rc = MC_INVALID_PARAMS;
    }
    if (!rc) {
        pthread_mutex_lock(&t->mu);
        if (t->npending + t->nprocessing >= svc->cfg.max_total_pending_tasks)
            rc = MC_TASK_PENDING_LIMIT_EXCEEDED;
        pthread_mutex_unlock(&t->mu);
    }
    if (rc) {
        count_op(svc, op, rc);
        return rc;
    }
    task *k = mc_xcalloc(1, sizeof *k);
    uint64_t h = key_hash(svc, key, key_len);
    obj *o;
    shard *sh = lock_key(svc, key, key_len, h, &o);
    uint64_t now = now_ms(svc);
    if (!o || (o->flags & F_PROC) || o->nrep == 0 || o->size == 0 || promoting(o)) {
        /* absent, being written, no memory replica, or its one memory replica is a
         * promotion from disk still being filled (offload.c) */
        rc = MC_OBJECT_NOT_FOUND;
    } else if (o->nrep + n > MC_MASTER_MAX_REPLICAS) {
        rc = MC_INVALID_PARAMS;
    }
    if (!rc) {
        pthread_rwlock_rdlock(&svc->seg_lock);
        int src = -1;
        if (type == MC_MASTER_TASK_REPLICA_MOVE) {
            uint32_t ss = seg_by_name(svc, source);
            if (ss == UINT32_MAX)
                rc = MC_SEGMENT_NOT_FOUND;
            for (uint32_t i = 0; !rc && i < o->nrep; i++)
                if (o->reps[i].seg == ss)
                    src = (int)i;
            if (!rc && src < 0)
                rc = MC_REPLICA_NOT_FOUND;
        } else {
            for (uint32_t i = 0; src < 0 && i < o->nrep; i++) {
                const seg *s = svc->segs[o->reps[i].seg];
                if (!s->unmounting && !s->pending)
                    src = (int)i;
            }
            if (src < 0)
                rc = MC_REPLICA_NOT_FOUND;
        }
        for (size_t i = 0; !rc && i < n; i++) {
            uint32_t ts = seg_by_name(svc, targets[i]);
            if (ts == UINT32_MAX) {
                rc = MC_SEGMENT_NOT_FOUND;
                break;
            }
            for (uint32_t j = 0; j < o->nrep; j++)
                if (o->reps[j].seg == ts)
                    rc = type == MC_MASTER_TASK_REPLICA_MOVE ? MC_INVALID_PARAMS
                                                             : MC_REPLICA_ALREADY_EXISTS;
            if (rc)
                break;
            const seg *s = svc->segs[ts];
            const char *pref[1] = {s->name};
            mc_master_put_config cfg;
            mc_master_put_config_init(&cfg);
            cfg.preferred_segments = pref;
            cfg.n_preferred = 1;
            alloc_ctx c = {.size = o->size, .want = 1};
            mc__place_locked(svc, &c, &cfg, MC_MASTER_STRATEGY_RANDOM);
            if (c.n && c.chosen[0] != s) { /* placed elsewhere: not what was asked */
                mc__space_release_rep_locked(svc, o, &c.reps[0], MC__SPACE_EVICTED, 0);
                c.n = 0;
            }
            if (!c.n) {
                rc = MC_NO_AVAILABLE_HANDLE;
                break;
            }
            tpart *p = &k->parts[k->nparts++];
            p->state = P_PENDING;
            p->slot = ts;
            p->seg_id = s->id;
            p->owner = s->client;
            p->r = c.reps[0];
            p->r.epoch = 0;
            snprintf(p->endpoint, sizeof p->endpoint, "%s", s->endpoint);
        }
        if (!rc) {
            const seg *s = svc->segs[o->reps[src].seg];
            k->src_slot = o->reps[src].seg;
            k->src_seg_id = s->id;
            k->src_addr = o->reps[src].addr;
            snprintf(k->src_endpoint, sizeof k->src_endpoint, "%s", s->endpoint);
        } else {
            for (uint32_t i = 0; i < k->nparts; i++)
                part_release_locked(svc, &k->parts[i], false, 0);
        }
        pthread_rwlock_unlock(&svc->seg_lock);
    }
    if (!rc) {
        k->size = o->size;
        grant_lease(sh, o, now); /* keeps eviction off the source until it is fetched */
    }
    pthread_mutex_unlock(&sh->mu);
    if (rc) {
        free(k);
        count_op(svc, op, rc);
        return rc;
    }
    k->klen = key_len;
    k->key = mc_xmalloc(key_len);
    memcpy(k->key, key, key_len);
    k->created = now;
    k->info.id = (mc_master_uuid){mc__rng() | 1, mc__rng()};
    k->info.type = type;
    k->info.status = MC_MASTER_TASK_PENDING;
    k->info.created_at_ms_epoch = k->info.last_updated_at_ms_epoch = mc_wall_ms();
    k->info.assigned_client = k->parts[0].owner;
    *id = k->info.id;
    if (svc->oplog) { /* before it is in the table: its end is logged after this */
        mc__log_task_rec lr = {.id = k->info.id, .assigned = k->info.assigned_client,
                               .type = type, .key = key, .klen = key_len, .size = k->size,
                               .created_ms = k->info.created_at_ms_epoch,
                               .nparts = k->nparts};
        for (uint32_t i = 0; i < k->nparts; i++)
            lr.parts[i] = (mc__log_task_part){k->parts[i].seg_id, k->parts[i].owner,
                                              k->parts[i].r.addr};
        mc__log_task(svc, &lr);
    }
    pthread_mutex_lock(&t->mu);
    mc_list_push_back(&t->active, &k->link);
    t->nactive++;
    cadd(&t->unfinished, 1);
    t->npending++;
    pthread_mutex_unlock(&t->mu);
    mc_log(MC_LOG_INFO, TAG, "%s task %016llx%016llx: %zu target(s), %llu bytes",
           type == MC_MASTER_TASK_REPLICA_MOVE ? "move" : "copy",
           (unsigned long long)k->info.id.first, (unsigned long long)k->info.id.second, n,
           (unsigned long long)k->size);
    count_op(svc, op, MC_OK);
    return MC_OK;
}

int mc_master_service_create_copy_task(mc_master_service *svc, const void *key, size_t key_len,
                                       const char *source, const char *const *targets,
                                       size_t n, mc_master_uuid *id)
{
    (void)source;
    return create(svc, MC_MASTER_TASK_REPLICA_COPY, key, key_len, NULL, targets, n, id);
}

int mc_master_service_create_move_task(mc_master_service *svc, const void *key, size_t key_len,
                                       const char *source, const char *const *targets,
                                       size_t n, mc_master_uuid *id)
{
    return create(svc, MC_MASTER_TASK_REPLICA_MOVE, key, key_len, source, targets, n, id);
}

int mc_master_service_query_task(mc_master_service *svc, mc_master_uuid id,
                                 mc_master_task_info *out)
{
    struct mc__tasks *t = svc->tasks;
    int rc = MC_TASK_NOT_FOUND;
    pthread_mutex_lock(&t->mu);
    task *k = find_in(&t->active, id);
    if (!k)
        k = find_in(&t->done, id);
    if (k && out) {
        *out = k->info;
        rc = MC_OK;
    }
    pthread_mutex_unlock(&t->mu);
    count_op(svc, MC_MASTER_OP_QUERY_TASK, rc);
    return rc;
}

int mc_master_service_fetch_tasks(mc_master_service *svc, mc_master_uuid client_id,
                                  mc_master_task_work *out, uint32_t *n)
{
    struct mc__tasks *t = svc->tasks;
    if (n)
        *n = 0;
    if (!out || !n) {
        count_op(svc, MC_MASTER_OP_FETCH_TASKS, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    uint64_t now = now_ms(svc);
    pthread_mutex_lock(&t->mu);
    MC_LIST_FOREACH(it, &t->active) {
        task *k = MC_CONTAINER_OF(it, task, link);
        for (uint32_t i = 0; i < k->nparts; i++) {
            tpart *p = &k->parts[i];
            if (p->state != P_PENDING || !uuid_eq(p->owner, client_id))
                continue;
            if (k->info.status == MC_MASTER_TASK_PENDING) {
                if (t->nprocessing >= svc->cfg.max_total_processing_tasks)
                    goto out; /* stays pending; fetched when others finish */
                k->info.status = MC_MASTER_TASK_PROCESSING;
                k->info.last_updated_at_ms_epoch = mc_wall_ms();
                k->sent = now;
                t->npending--;
                t->nprocessing++;
            }
            p->state = P_PROCESSING;
            out->id = k->info.id;
            out->part = i;
            out->size = k->size;
            memcpy(out->src_endpoint, k->src_endpoint, sizeof out->src_endpoint);
            out->src_address = k->src_addr;
            memcpy(out->dst_endpoint, p->endpoint, sizeof out->dst_endpoint);
            out->dst_address = p->r.addr;
            out->key_len = k->klen;
            memcpy(out->key, k->key, k->klen);
            *n = 1;
            goto out;
        }
    }
out:
    pthread_mutex_unlock(&t->mu);
    count_op(svc, MC_MASTER_OP_FETCH_TASKS, MC_OK);
    return MC_OK;
}

/* Defers the space of replica r (just taken out of o, whose reader lease is active)
 * until the lease deadline, on the forced-remove list (space.c's deferred frees).
 * Caller holds o's shard mutex and not seg_lock. */
static void defer_rep(mc_master_service *svc, obj *o, rep r)
{
    obj *d = mc__obj_new(1, okey(o), o->key_len, o->hash);
    d->reps[0] = r;
    d->size = o->size;
    d->atime = o->atime;
    d->flags = F_LEASED;
    pthread_rwlock_rdlock(&svc->seg_lock);
    uint64_t b = mc__reps_reserved_locked(svc, d);
    pthread_rwlock_unlock(&svc->seg_lock);
    d->pin = b;
    uint64_t deadline = d->atime + svc->lease_ttl;
    pthread_mutex_lock(&svc->defer_mu);
    mc_list_push_front(&svc->deferred, &d->link);
    if (deadline < svc->defer_min)
        svc->defer_min = deadline;
    cadd(&svc->defer_keys, 1);
    cadd(&svc->defer_bytes, b);
    pthread_mutex_unlock(&svc->defer_mu);
}

/* Publishes part p of task k (a copy of its fields, taken under tasks.mu) as a replica
 * of the object. Returns OK or why not (msg set). */
static int commit(mc_master_service *svc, const task *k, tpart *p, bool move, char *msg,
                  size_t msz)
{
    uint64_t h = key_hash(svc, k->key, k->klen);
    obj *o;
    shard *sh = lock_key(svc, k->key, k->klen, h, &o);
    int rc = MC_OK;
    int src = -1;
    pthread_mutex_lock(&svc->tasks->mu); /* shard.mu -> tasks.mu (a leaf): in order */
    task *live = find_in(&svc->tasks->active, k->info.id);
    bool stale = !live || live->stale;
    pthread_mutex_unlock(&svc->tasks->mu);
    pthread_rwlock_rdlock(&svc->seg_lock);
    if (!o || (o->flags & F_PROC) || o->size != k->size || stale || promoting(o)) {
        rc = MC_OBJECT_NOT_FOUND;
        snprintf(msg, msz, "the object was removed or rewritten during the copy");
    } else if (!seg_same(svc, p->slot, p->seg_id) || svc->segs[p->slot]->unmounting) {
        rc = MC_SEGMENT_NOT_FOUND;
        snprintf(msg, msz, "the target segment %.200s went during the copy", p->endpoint);
    } else {
        for (uint32_t i = 0; i < o->nrep; i++)
            if (o->reps[i].seg == k->src_slot && o->reps[i].addr == k->src_addr)
                src = (int)i;
        if (src < 0 || !seg_same(svc, k->src_slot, k->src_seg_id)) {
            rc = MC_REPLICA_NOT_FOUND;
            snprintf(msg, msz, "the source replica was dropped during the copy");
        } else if (o->nrep >= MC_MASTER_MAX_REPLICAS) {
            rc = MC_INVALID_PARAMS;
            snprintf(msg, msz, "the object has the most replicas allowed");
        }
    }
    if (rc) {
        part_release_locked(svc, p, false, 0);
        pthread_rwlock_unlock(&svc->seg_lock);
        pthread_mutex_unlock(&sh->mu);
        return rc;
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    /* the record gets one more replica: rebuilt (one malloc per object) */
    obj *nw = mc__obj_new(o->nrep + 1u, okey(o), o->key_len, o->hash);
    memcpy(nw->reps, o->reps, o->nrep * sizeof(rep));
    nw->reps[o->nrep] = p->r;
    nw->size = o->size;
    nw->atime = o->atime;
    nw->pin = o->pin;
    nw->owner = o->owner;
    nw->flags = o->flags;
    p->r.handle = MC__ALLOC_NONE; /* the object's now */
    mc__ht_remove(sh, o);
    obj_unlist(o);
    free(o);
    o = nw;
    mc__ht_insert(sh, o);
    if (move) { /* drop the source: at once, or at its reader's lease deadline */
        rep r = o->reps[src];
        uint32_t j = 0;
        for (uint32_t i = 0; i < o->nrep; i++)
            if ((int)i != src)
                o->reps[j++] = o->reps[i];
        memmove(o->reps + j, o->reps + o->nrep, o->key_len);
        o->nrep = (uint8_t)j;
        if (leased(svc, o, now_ms(svc))) {
            defer_rep(svc, o, r);
        } else {
            pthread_rwlock_rdlock(&svc->seg_lock);
            obj tmp;
            memset(&tmp, 0, sizeof tmp);
            mc__space_release_rep_locked(svc, &tmp, &r, MC__SPACE_REMOVED, 0);
            pthread_rwlock_unlock(&svc->seg_lock);
        }
    }
    obj_list(sh, o);
    mc__log_put(svc, o); /* the key now maps to these replicas */
    pthread_mutex_unlock(&sh->mu);
    return MC_OK;
}

int mc_master_service_mark_task_to_complete(mc_master_service *svc, mc_master_uuid client_id,
                                            mc_master_uuid id, uint32_t part, int status,
                                            const char *message)
{
    struct mc__tasks *t = svc->tasks;
    pthread_mutex_lock(&t->mu);
    task *k = find_in(&t->active, id);
    int rc = MC_OK;
    if (!k)
        rc = find_in(&t->done, id) ? MC_INVALID_PARAMS : MC_TASK_NOT_FOUND;
    else if (part >= k->nparts || k->parts[part].state != P_PROCESSING ||
             !uuid_eq(k->parts[part].owner, client_id))
        rc = MC_INVALID_PARAMS;
    if (rc) {
        pthread_mutex_unlock(&t->mu);
        count_op(svc, MC_MASTER_OP_MARK_TASK_TO_COMPLETE, rc);
        return rc;
    }
    /* work on a copy outside tasks.mu (a leaf): the part stays PROCESSING meanwhile, so
     * nothing else touches it but the tick, which skips parts being committed */
    task snap = *k;
    snap.key = mc_xmalloc(k->klen);
    memcpy(snap.key, k->key, k->klen);
    tpart p = k->parts[part];
    k->parts[part].state = P_DONE; /* claimed: the tick leaves it alone */
    pthread_mutex_unlock(&t->mu);

    char msg[MC_MASTER_TASK_MSG_MAX] = "";
    int st;
    if (status == MC_OK) {
        st = commit(svc, &snap, &p, snap.info.type == MC_MASTER_TASK_REPLICA_MOVE, msg,
                    sizeof msg);
    } else {
        pthread_rwlock_rdlock(&svc->seg_lock);
        part_release_locked(svc, &p, false, 0);
        pthread_rwlock_unlock(&svc->seg_lock);
        snprintf(msg, sizeof msg, "executor failed: %.60s%s%.180s", mc_strerror(status),
                 message && *message ? ": " : "", message ? message : "");
        st = status;
    }
    free(snap.key);

    pthread_mutex_lock(&t->mu);
    k = find_in(&t->active, id);
    if (k) {
        k->parts[part].r.handle = MC__ALLOC_NONE;
        if (st != MC_OK) {
            k->parts[part].state = P_FAILED;
            if (!k->nfailed++)
                snprintf(k->info.message, sizeof k->info.message, "%s", msg);
        } else {
            k->ndone++;
        }
        /* finished once every part is: FAILED when any part failed (the replicas of the
         * parts that succeeded stay: each is complete) */
        if (k->ndone + k->nfailed == k->nparts)
            finish_locked(svc, k, k->nfailed ? MC_MASTER_TASK_FAILED : MC_MASTER_TASK_SUCCESS,
                          NULL, 0);
        else
            k->info.last_updated_at_ms_epoch = mc_wall_ms();
    }
    pthread_mutex_unlock(&t->mu);
    count_op(svc, MC_MASTER_OP_MARK_TASK_TO_COMPLETE, MC_OK);
    return MC_OK;
}

void mc__tasks_adopt(mc_master_service *svc, const mc_master_task_info *info)
{
    struct mc__tasks *t = svc->tasks;
    task *k = mc_xcalloc(1, sizeof *k);
    k->info = *info;
    pthread_mutex_lock(&t->mu);
    if (find_in(&t->active, info->id) || find_in(&t->done, info->id)) {
        pthread_mutex_unlock(&t->mu);
        free(k);
        return;
    }
    push_done_locked(svc, k);
    pthread_mutex_unlock(&t->mu);
}

void mc__tasks_rewritten(mc_master_service *svc, obj *o)
{
    struct mc__tasks *t = svc->tasks;
    if (!t || !cget(&t->unfinished))
        return;
    pthread_mutex_lock(&t->mu);
    MC_LIST_FOREACH(it, &t->active) {
        task *k = MC_CONTAINER_OF(it, task, link);
        if (k->klen == o->key_len && memcmp(k->key, okey(o), k->klen) == 0)
            k->stale = true;
    }
    pthread_mutex_unlock(&t->mu);
}

bool mc__tasks_pending_for(mc_master_service *svc, mc_master_uuid id)
{
    struct mc__tasks *t = svc->tasks;
    if (!t || !cget(&t->unfinished))
        return false;
    bool any = false;
    pthread_mutex_lock(&t->mu);
    MC_LIST_FOREACH(it, &t->active) {
        task *k = MC_CONTAINER_OF(it, task, link);
        for (uint32_t i = 0; !any && i < k->nparts; i++)
            any = k->parts[i].state == P_PENDING && uuid_eq(k->parts[i].owner, id);
        if (any)
            break;
    }
    pthread_mutex_unlock(&t->mu);
    return any;
}

/* ---- tick ---- */

void mc__tasks_tick(mc_master_service *svc, uint64_t now)
{
    struct mc__tasks *t = svc->tasks;
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    bool any = t->nactive > 0;
    pthread_mutex_unlock(&t->mu);
    if (!any)
        return;
    tpart *rel = NULL;
    bool *hold = NULL;
    size_t nrel = 0, cap = 0;
    pthread_rwlock_rdlock(&svc->seg_lock); /* seg_lock -> tasks.mu: in order */
    pthread_mutex_lock(&t->mu);
    mc_list *it = t->active.next;
    while (it != &t->active) {
        task *k = MC_CONTAINER_OF(it, task, link);
        it = it->next;
        char msg[MC_MASTER_TASK_MSG_MAX] = "";
        bool fail = false, executing = k->info.status == MC_MASTER_TASK_PROCESSING;
        if (!executing && now >= k->created + svc->cfg.pending_task_timeout_ms) {
            fail = true;
            snprintf(msg, sizeof msg, "not fetched by its executor within %llu ms",
                     (unsigned long long)svc->cfg.pending_task_timeout_ms);
        } else if (executing && now >= k->sent + svc->cfg.processing_task_timeout_ms) {
            fail = true;
            snprintf(msg, sizeof msg, "not completed by its executor within %llu ms",
                     (unsigned long long)svc->cfg.processing_task_timeout_ms);
        }
        for (uint32_t i = 0; !fail && i < k->nparts; i++) {
            tpart *p = &k->parts[i];
            if ((p->state == P_PENDING || p->state == P_PROCESSING) &&
                !seg_same(svc, p->slot, p->seg_id)) {
                fail = true;
                snprintf(msg, sizeof msg, "the executor's target segment %.150s was unmounted "
                         "(its client died or expired)", p->endpoint);
            }
        }
        if (!fail)
            continue;
        bool claimed = false; /* a part being committed now: that call finishes it */
        for (uint32_t i = 0; i < k->nparts; i++)
            claimed |= k->parts[i].state == P_DONE && k->parts[i].r.handle != MC__ALLOC_NONE;
        if (claimed)
            continue;
        uint32_t held = 0;
        for (uint32_t i = 0; i < k->nparts; i++) {
            tpart *p = &k->parts[i];
            if (p->state != P_PENDING && p->state != P_PROCESSING)
                continue;
            if (p->state == P_PROCESSING)
                held |= 1u << i;
            if (nrel == cap) {
                cap = cap ? cap * 2 : 8;
                rel = mc_xrealloc(rel, cap * sizeof *rel);
                hold = mc_xrealloc(hold, cap * sizeof *hold);
            }
            hold[nrel] = p->state == P_PROCESSING; /* it may still be writing */
            rel[nrel++] = *p;
            p->state = P_FAILED;
            p->r.handle = MC__ALLOC_NONE;
        }
        mc_log(MC_LOG_WARN, TAG, "task %016llx%016llx failed: %s",
               (unsigned long long)k->info.id.first, (unsigned long long)k->info.id.second,
               msg);
        finish_locked(svc, k, MC_MASTER_TASK_FAILED, msg, held);
    }
    pthread_mutex_unlock(&t->mu);
    for (size_t i = 0; i < nrel; i++)
        part_release_locked(svc, &rel[i], hold[i], now);
    pthread_rwlock_unlock(&svc->seg_lock);
    free(rel);
    free(hold);
}
