/* offload.c: the master's side of the client-owned disk tier (docs/ssd-tier.md;
 * upstream --enable_offload / --offload_on_evict / --promotion_on_hit, OffloadObject-
 * Heartbeat / NotifyOffloadSuccess, upstream-mooncake.md §4.10). The master does no disk
 * I/O: it keeps, as metadata, which client holds which key on its disk (LOCAL_DISK
 * replicas), and hands its clients tasks through the offload heartbeat they poll.
 *
 * State (struct mc__offload, guarded by its one mutex `mu`, a leaf lock):
 *   clients  the clients that registered a disk tier (their first offload heartbeat),
 *            each with its endpoint and its task list (queued, then handed out with the
 *            time they went: `sent`).
 *   map      key -> owning client and read hits, for every object with F_DISK (a
 *            chained hash table on the key's hash).
 * The object's flags (F_DISK, F_OFFQ, F_NOOFF; master/internal.h) mirror it under the
 * object's shard mutex, so the hot paths (get, eviction) test a flag before looking here.
 *
 * Offload on eviction: when eviction picks an object not on disk whose memory replica is
 * on the segment of a client with a disk tier, a WRITE task is queued for that client and
 * the object is kept (F_OFFQ: not evictable). The client copies the replica (its own
 * memory) to its disk on its own thread and reports; on OK the key gets a LOCAL_DISK
 * replica (F_DISK) and the next eviction drops the memory replica at once, keeping the
 * record disk-only (nrep 0). A refused write (disk full) leaves the memory replica and
 * marks the object F_NOOFF: eviction then takes it as it did without a disk tier. A task
 * not reported within offload_task_timeout_ms is treated as refused.
 * Without offload_on_evict, every object is queued at put_end (write-through).
 *
 * Promotion: a get of a disk-only object counts a hit; at promotion_admission_threshold
 * hits the master reserves a memory replica on the owner's own segment (PROCESSING,
 * hidden from readers, F_DISK|F_OFFQ) and queues a PROMOTE task; the owner reads its disk
 * into that memory and reports; OK publishes the replica (the object is in memory and on
 * disk again), a failure gives the space back. */
#include <stdio.h>

#include "master/internal.h"
#include "mooncake/log.h"

typedef struct dtask {
    mc_list link;
    uint8_t op;       /* mc_master_offload_op */
    uint64_t sent;    /* ms when handed out; 0 = queued */
    uint64_t size, addr;
    uint64_t gen;     /* shared mode: the file's generation (WRITE, DELETE) */
    uint16_t klen;
    uint8_t key[];
} dtask;

typedef struct dclient {
    mc_master_uuid id;
    char endpoint[MC_MASTER_NAME_MAX];
    mc_list tasks; /* oldest first */
    size_t ntasks;
} dclient;

typedef struct dent {
    struct dent *next;
    uint64_t h;
    mc_master_uuid owner;
    uint64_t gen;     /* shared mode: the generation of the key's file */
    uint32_t hits;
    uint16_t klen;
    uint8_t key[];
} dent;

struct mc__offload {
    pthread_mutex_t mu;
    dclient **clients;
    size_t nclients, cap;
    dent **b; /* buckets, power of two */
    size_t nb, count;
    counter queued, requests, successes, failures, hits, preq, pok, pfail, lost;
    counter disk_bytes, disk_only;
    bool prefetch; /* a prefetch pass runs (under evict_mu): queue, never drop */
    bool shared;   /* shared-FS DISK replicas (cfg.fs_dir; shared_fs.c): disk replicas */
                   /* are owned by MC__SHARED_FS_OWNER, WRITEs go to fsdir            */
    char fsdir[MC_MASTER_NAME_MAX];
    size_t rr;     /* shared: the next client handed a DELETE (round robin)           */
    _Atomic uint64_t gen_next; /* shared: the next file generation (starts at the   */
                   /* wall clock in ms x 1024, so a restarted master never reuses one) */
};

#define PREFETCH_MAX_QUEUED 512 /* no prefetch pass while this many tasks are queued */
#define PREFETCH_RATIOS 8       /* the reserve kept on disk ahead of eviction, in ratios */

#define TASK_BUDGET_BYTES (256ull << 20) /* WRITE/PROMOTE bytes per heartbeat reply */

/* ---- helpers (off->mu held) ---- */

static dclient *client_find(struct mc__offload *f, mc_master_uuid id)
{
    for (size_t i = 0; i < f->nclients; i++)
        if (uuid_eq(f->clients[i]->id, id))
            return f->clients[i];
    return NULL;
}

static void task_push(struct mc__offload *f, dclient *c, int op, const void *key, size_t klen,
                      uint64_t size, uint64_t addr)
{
    dtask *t = mc_xmalloc(sizeof *t + klen);
    t->op = (uint8_t)op;
    t->sent = 0;
    t->size = size;
    t->addr = addr;
    t->gen = 0;
    t->klen = (uint16_t)klen;
    memcpy(t->key, key, klen);
    mc_list_push_back(&c->tasks, &t->link);
    c->ntasks++;
    cadd(&f->queued, 1);
}

static void task_free(struct mc__offload *f, dclient *c, dtask *t)
{
    mc_list_remove(&t->link);
    c->ntasks--;
    csub(&f->queued, 1);
    free(t);
}

static dent **map_slot(struct mc__offload *f, uint64_t h, const void *key, size_t klen)
{
    dent **p = &f->b[h & (f->nb - 1)];
    while (*p && !((*p)->h == h && (*p)->klen == klen && memcmp((*p)->key, key, klen) == 0))
        p = &(*p)->next;
    return p;
}

static void map_grow(struct mc__offload *f)
{
    size_t nb = f->nb * 2;
    dent **b = mc_xcalloc(nb, sizeof *b);
    for (size_t i = 0; i < f->nb; i++)
        for (dent *e = f->b[i], *n; e; e = n) {
            n = e->next;
            e->next = b[e->h & (nb - 1)];
            b[e->h & (nb - 1)] = e;
        }
    free(f->b);
    f->b = b;
    f->nb = nb;
}

static dent *map_put(struct mc__offload *f, uint64_t h, const void *key, size_t klen,
                     mc_master_uuid owner)
{
    dent **p = map_slot(f, h, key, klen);
    if (*p) {
        (*p)->owner = owner;
        (*p)->hits = 0;
        return *p;
    }
    if (f->count + 1 > f->nb)
        map_grow(f), p = map_slot(f, h, key, klen);
    dent *e = mc_xmalloc(sizeof *e + klen);
    e->next = NULL;
    e->h = h;
    e->owner = owner;
    e->gen = 0;
    e->hits = 0;
    e->klen = (uint16_t)klen;
    memcpy(e->key, key, klen);
    *p = e;
    f->count++;
    return e;
}

static dent *map_get(struct mc__offload *f, uint64_t h, const void *key, size_t klen)
{
    return *map_slot(f, h, key, klen);
}

static bool map_del(struct mc__offload *f, uint64_t h, const void *key, size_t klen,
                    mc_master_uuid *owner)
{
    dent **p = map_slot(f, h, key, klen);
    if (!*p)
        return false;
    dent *e = *p;
    *p = e->next;
    if (owner)
        *owner = e->owner;
    free(e);
    f->count--;
    return true;
}

/* Removes client c's task (op, key) (handed out, unless any), if there is one: true
 * when one was. off->mu held. */
static bool task_done(struct mc__offload *f, dclient *c, int op, const void *key,
                      size_t klen, bool any, uint64_t gen)
{
    MC_LIST_FOREACH(it, &c->tasks) {
        dtask *t = MC_CONTAINER_OF(it, dtask, link);
        if (t->op == op && (any || (t->sent && t->gen == gen)) && t->klen == klen &&
            memcmp(t->key, key, klen) == 0) {
            task_free(f, c, t);
            return true;
        }
    }
    return false;
}

/* The client a DELETE of a disk replica owned by `owner` goes to: the owner itself, or
 * in shared mode any client polling (round robin; none: the file stays). */
static dclient *delete_target(struct mc__offload *f, mc_master_uuid owner)
{
    if (!f->shared)
        return client_find(f, owner);
    return f->nclients ? f->clients[f->rr++ % f->nclients] : NULL;
}

static uint64_t okhash(mc_master_service *svc, obj *o)
{
    return XXH3_64bits_withSeed(okey(o), o->key_len, svc->seed);
}

/* ---- create / destroy ---- */

void mc__offload_create(mc_master_service *svc)
{
    bool shared = svc->cfg.fs_dir && *svc->cfg.fs_dir;
    if (!svc->cfg.enable_offload && !shared)
        return;
    if (shared) { /* write-through to the shared directory, no promotion (shared_fs.c) */
        svc->cfg.offload_on_evict = false;
        svc->cfg.promotion_on_hit = false;
    }
    if (!svc->cfg.promotion_admission_threshold)
        svc->cfg.promotion_admission_threshold = 1;
    if (!svc->cfg.offload_task_timeout_ms)
        svc->cfg.offload_task_timeout_ms = 30000;
    struct mc__offload *f = mc_xcalloc(1, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->nb = 1024;
    f->b = mc_xcalloc(f->nb, sizeof *f->b);
    f->shared = shared;
    f->gen_next = mc_wall_ms() * 1024;
    if (shared)
        snprintf(f->fsdir, sizeof f->fsdir, "%.*s", (int)MC__SHARED_FS_DIR_MAX,
                 svc->cfg.fs_dir);
    svc->cfg.fs_dir = NULL; /* borrowed for create only */
    svc->off = f;
}

void mc__offload_destroy(mc_master_service *svc)
{
    struct mc__offload *f = svc->off;
    if (!f)
        return;
    for (size_t i = 0; i < f->nclients; i++) {
        dclient *c = f->clients[i];
        while (!mc_list_empty(&c->tasks))
            task_free(f, c, MC_CONTAINER_OF(c->tasks.next, dtask, link));
        free(c);
    }
    free(f->clients);
    for (size_t i = 0; i < f->nb; i++)
        for (dent *e = f->b[i], *n; e; e = n) {
            n = e->next;
            free(e);
        }
    free(f->b);
    pthread_mutex_destroy(&f->mu);
    free(f);
    svc->off = NULL;
}

/* ---- the object side (shard mu held) ---- */

/* The client with a disk tier that owns the segment of one of o's replicas: copies its
 * id into *id. Caller holds sh->mu; takes seg_lock (read) then off->mu. */
static bool disk_owner_of(mc_master_service *svc, obj *o, mc_master_uuid *id, uint64_t *addr)
{
    struct mc__offload *f = svc->off;
    bool found = false;
    pthread_rwlock_rdlock(&svc->seg_lock);
    pthread_mutex_lock(&f->mu);
    for (uint32_t i = 0; i < o->nrep && !found; i++) {
        const seg *s = svc->segs[o->reps[i].seg];
        if (s && !s->unmounting && client_find(f, s->client)) {
            *id = s->client;
            *addr = o->reps[i].addr;
            found = true;
        }
    }
    pthread_mutex_unlock(&f->mu);
    pthread_rwlock_unlock(&svc->seg_lock);
    return found;
}

/* Queues a WRITE of o to the disk of the client owning one of its replicas' segments.
 * Returns true when queued (F_OFFQ set). */
static bool queue_write(mc_master_service *svc, obj *o)
{
    struct mc__offload *f = svc->off;
    mc_master_uuid id;
    uint64_t addr;
    if (!disk_owner_of(svc, o, &id, &addr))
        return false;
    pthread_mutex_lock(&f->mu);
    dclient *c = client_find(f, id);
    if (c) {
        task_push(f, c, MC_MASTER_OFFLOAD_WRITE, okey(o), o->key_len, o->size, addr);
        if (f->shared) /* a new file name per write: a late rename never hits a newer one */
            MC_CONTAINER_OF(c->tasks.prev, dtask, link)->gen = f->gen_next++;
    }
    pthread_mutex_unlock(&f->mu);
    if (!c)
        return false;
    o->flags |= F_OFFQ;
    cadd(&f->requests, 1);
    return true;
}

/* Replaces o (complete, F_DISK) by a disk-only record: its memory replicas' space goes
 * back (EVICTED). Returns the new record. */
static obj *drop_memory(mc_master_service *svc, shard *sh, obj *o)
{
    obj_unlist(o);
    pthread_rwlock_rdlock(&svc->seg_lock);
    mc__space_release_locked(svc, o, MC__SPACE_EVICTED);
    pthread_rwlock_unlock(&svc->seg_lock);
    obj *n = mc__obj_new(0, okey(o), o->key_len, o->hash);
    n->size = o->size;
    n->atime = o->atime;
    n->owner = o->owner;
    n->pin = 0;
    n->flags = o->flags & (uint8_t)~(F_OFFQ | F_NOOFF);
    if (n->flags & F_SOFT) /* a soft pin has no meaning without memory to keep */
        mc__set_soft(svc, n, false);
    mc__ht_remove(sh, o);
    mc__ht_insert(sh, n);
    free(o);
    cadd(&svc->off->disk_only, 1);
    return n;
}

void mc__offload_disk_only(mc_master_service *svc, obj *o)
{
    obj_unlist(o);
    o->flags &= (uint8_t)~(F_OFFQ | F_NOOFF | F_LEASED);
    if (o->flags & F_SOFT)
        mc__set_soft(svc, o, false);
    if (svc->off)
        cadd(&svc->off->disk_only, 1);
}

bool mc__offload_evict(mc_master_service *svc, shard *sh, obj *o, uint64_t *freed)
{
    *freed = 0;
    if (!svc->off)
        return false;
    if (svc->off->prefetch) { /* (evict_mu held) offload ahead of need, drop nothing */
        if (!(o->flags & (F_DISK | F_NOOFF | F_OFFQ)))
            queue_write(svc, o);
        return true;
    }
    if (o->flags & F_DISK) { /* already on disk: drop the memory, keep the record */
        *freed = obj_bytes(o);
        drop_memory(svc, sh, o);
        return true;
    }
    if (!svc->cfg.offload_on_evict || (o->flags & (F_NOOFF | F_OFFQ)))
        return (o->flags & F_OFFQ) != 0; /* queued already (write-through): keep it */
    return queue_write(svc, o);
}

void mc__offload_put_end(mc_master_service *svc, obj *o)
{
    if (!svc->off || svc->cfg.offload_on_evict || o->size == 0)
        return;
    o->flags &= (uint8_t)~(F_NOOFF);
    queue_write(svc, o);
}

void mc__offload_forget(mc_master_service *svc, obj *o)
{
    struct mc__offload *f = svc->off;
    if (!f || !(o->flags & (F_DISK | F_OFFQ | F_NOOFF)))
        return;
    bool disk = o->flags & F_DISK, queued = (o->flags & F_OFFQ) && !disk;
    o->flags &= (uint8_t)~(F_DISK | F_OFFQ | F_NOOFF);
    mc_master_uuid owner;
    pthread_mutex_lock(&f->mu);
    if (queued) /* the WRITE would copy bytes that are changing: its result is refused */
        for (size_t i = 0; i < f->nclients; i++)
            if (task_done(f, f->clients[i], MC_MASTER_OFFLOAD_WRITE, okey(o), o->key_len,
                          true, 0))
                break;
    if (!disk) {
        pthread_mutex_unlock(&f->mu);
        return;
    }
    dent *de = map_get(f, okhash(svc, o), okey(o), o->key_len);
    uint64_t gen = de ? de->gen : 0;
    if (map_del(f, okhash(svc, o), okey(o), o->key_len, &owner)) {
        csub(&f->disk_bytes, o->size);
        if (o->nrep == 0)
            csub(&f->disk_only, 1);
        dclient *c = delete_target(f, owner);
        if (c) {
            task_push(f, c, MC_MASTER_OFFLOAD_DELETE, okey(o), o->key_len, o->size, 0);
            MC_CONTAINER_OF(c->tasks.prev, dtask, link)->gen = gen;
        }
    }
    pthread_mutex_unlock(&f->mu);
}

void mc__offload_fill_locked(mc_master_service *svc, obj *o, mc_master_replica_list *out)
{
    struct mc__offload *f = svc->off;
    if (!f || !(o->flags & F_DISK) || out->n >= MC_MASTER_MAX_REPLICAS)
        return;
    pthread_mutex_lock(&f->mu);
    if (f->shared) {
        dent *se = map_get(f, okhash(svc, o), okey(o), o->key_len);
        if (se)
            mc__shared_fs_desc(f->fsdir, o, se->gen, &out->replicas[out->n++]);
        pthread_mutex_unlock(&f->mu);
        return;
    }
    dent *e = map_get(f, okhash(svc, o), okey(o), o->key_len);
    dclient *c = e ? client_find(f, e->owner) : NULL;
    if (c) {
        mc_master_replica *d = &out->replicas[out->n++];
        memset(d, 0, sizeof *d);
        d->segment_id = c->id;
        d->address = 0;
        d->size = o->size;
        d->status = MC_MASTER_REPLICA_COMPLETE;
        d->type = MC_MASTER_REPLICA_LOCAL_DISK;
        memcpy(d->transport_endpoint, c->endpoint, strlen(c->endpoint) + 1);
        memcpy(d->protocol, "tcp", 4);
    }
    pthread_mutex_unlock(&f->mu);
}

/* Starts a promotion of the disk-only o: a memory replica on its owner's segment.
 * Returns the new record (F_DISK|F_OFFQ, one PROCESSING replica), or o unchanged. */
static obj *promote(mc_master_service *svc, shard *sh, obj *o, mc_master_uuid owner,
                    const char *endpoint)
{
    const char *pref[1] = {endpoint};
    mc_master_put_config cfg;
    mc_master_put_config_init(&cfg);
    cfg.preferred_segments = pref;
    cfg.n_preferred = 1;
    alloc_ctx c = {.size = o->size, .want = 1};
    pthread_rwlock_rdlock(&svc->seg_lock);
    mc__place_locked(svc, &c, &cfg, MC_MASTER_STRATEGY_RANDOM);
    if (c.n && !uuid_eq(c.chosen[0]->client, owner)) { /* only its own memory */
        mc__space_release_rep_locked(svc, o, &c.reps[0], MC__SPACE_EVICTED, 0);
        c.n = 0;
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    if (!c.n) {
        cadd(&svc->off->pfail, 1);
        return o;
    }
    obj *n = mc__obj_new(1, okey(o), o->key_len, o->hash);
    n->reps[0] = c.reps[0];
    n->reps[0].epoch = 0;
    n->size = o->size;
    n->atime = o->atime;
    n->owner = o->owner;
    n->flags = (uint8_t)((o->flags | F_OFFQ) & ~F_NOOFF);
    mc__ht_remove(sh, o);
    mc__ht_insert(sh, n);
    free(o);
    csub(&svc->off->disk_only, 1);
    pthread_mutex_lock(&svc->off->mu);
    dclient *cl = client_find(svc->off, owner);
    if (cl)
        task_push(svc->off, cl, MC_MASTER_OFFLOAD_PROMOTE, okey(n), n->key_len, n->size,
                  n->reps[0].addr);
    pthread_mutex_unlock(&svc->off->mu);
    cadd(&svc->off->preq, 1);
    return n;
}

obj *mc__offload_on_get(mc_master_service *svc, shard *sh, obj *o)
{
    struct mc__offload *f = svc->off;
    if (!f || !(o->flags & F_DISK) || (o->nrep && !(o->flags & F_OFFQ)))
        return o; /* memory replicas readable: not a disk hit */
    cadd(&f->hits, 1);
    if (!svc->cfg.promotion_on_hit || (o->flags & F_OFFQ) || o->size == 0)
        return o;
    pthread_mutex_lock(&f->mu);
    dent *e = map_get(f, okhash(svc, o), okey(o), o->key_len);
    bool go = false;
    mc_master_uuid owner = {0, 0};
    char ep[MC_MASTER_NAME_MAX];
    if (e && ++e->hits >= svc->cfg.promotion_admission_threshold) {
        dclient *c = client_find(f, e->owner);
        if (c) {
            go = true;
            e->hits = 0;
            owner = c->id;
            memcpy(ep, c->endpoint, sizeof ep);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return go ? promote(svc, sh, o, owner, ep) : o;
}

/* ---- RPCs ---- */

static bool endpoint_ok(const char *ep)
{
    return ep && *ep && strnlen(ep, MC_MASTER_NAME_MAX) < MC_MASTER_NAME_MAX;
}

int mc_master_service_offload_heartbeat(mc_master_service *svc, mc_master_uuid client_id,
                                        const char *endpoint, uint32_t max_tasks,
                                        mc_master_offload_tasks *out)
{
    int rc = MC_OK;
    struct mc__offload *f = svc->off;
    if (out) {
        out->n = 0;
        out->keys = NULL;
        out->fresh = false;
        out->fsdir[0] = '\0';
    }
    if (out && max_tasks == 0 && endpoint_ok(endpoint)) {
        /* a probe (client setup): which shared directory, if any; registers nothing,
         * hands out nothing, and is answered without any disk tier too */
        if (f)
            memcpy(out->fsdir, f->fsdir, sizeof out->fsdir);
        count_op(svc, MC_MASTER_OP_OFFLOAD_HEARTBEAT, MC_OK);
        return MC_OK;
    }
    if (!f)
        rc = MC_NOT_SUPPORTED;
    else if (!out || !endpoint_ok(endpoint))
        rc = MC_INVALID_PARAMS;
    if (rc) {
        count_op(svc, MC_MASTER_OP_OFFLOAD_HEARTBEAT, rc);
        return rc;
    }
    memcpy(out->fsdir, f->fsdir, sizeof out->fsdir);
    if (max_tasks > MC_MASTER_MAX_OFFLOAD_TASKS)
        max_tasks = MC_MASTER_MAX_OFFLOAD_TASKS;
    uint64_t now = now_ms(svc);
    pthread_mutex_lock(&f->mu);
    dclient *c = client_find(f, client_id);
    out->fresh = c == NULL;
    if (!c) {
        c = mc_xcalloc(1, sizeof *c);
        c->id = client_id;
        mc_list_init(&c->tasks);
        if (f->nclients == f->cap) {
            f->cap = f->cap ? f->cap * 2 : 8;
            f->clients = mc_xrealloc(f->clients, f->cap * sizeof *f->clients);
        }
        f->clients[f->nclients++] = c;
        mc_log(MC_LOG_INFO, TAG, "client %016llx%016llx registered a disk tier at %s",
               (unsigned long long)client_id.first, (unsigned long long)client_id.second,
               endpoint);
    }
    snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
    size_t kb = 0, kcap = 0;
    uint8_t *keys = NULL;
    uint64_t bytes = 0;
    MC_LIST_FOREACH(it, &c->tasks) {
        if (out->n >= max_tasks || bytes >= TASK_BUDGET_BYTES)
            break;
        dtask *t = MC_CONTAINER_OF(it, dtask, link);
        if (t->sent)
            continue;
        if (kb + t->klen > kcap) {
            kcap = (kb + t->klen) * 2 + 4096;
            keys = mc_xrealloc(keys, kcap);
        }
        memcpy(keys + kb, t->key, t->klen);
        mc_master_offload_item *d = &out->items[out->n++];
        d->op = t->op;
        d->key = (const void *)(uintptr_t)kb; /* an offset until keys stops moving */
        d->key_len = t->klen;
        d->size = t->size;
        d->address = t->addr;
        d->status = MC_OK;
        d->gen = t->gen;
        kb += t->klen;
        if (t->op != MC_MASTER_OFFLOAD_DELETE)
            bytes += t->size;
        t->sent = now ? now : 1;
        if (t->op == MC_MASTER_OFFLOAD_DELETE) /* nothing to confirm */
            task_free(f, c, t);
    }
    pthread_mutex_unlock(&f->mu);
    for (uint32_t i = 0; i < out->n; i++)
        out->items[i].key = keys + (uintptr_t)out->items[i].key;
    out->keys = keys;
    count_op(svc, MC_MASTER_OP_OFFLOAD_HEARTBEAT, MC_OK);
    return MC_OK;
}

/* One WRITE result: status OK records the LOCAL_DISK replica. */
static int end_write(mc_master_service *svc, mc_master_uuid client,
                     const mc_master_offload_item *it)
{
    struct mc__offload *f = svc->off;
    uint64_t h = key_hash(svc, it->key, it->key_len);
    obj *o;
    shard *sh = lock_key(svc, it->key, it->key_len, h, &o);
    int rc = MC_OK;
    if (!o || (o->flags & F_PROC) || !(o->flags & F_OFFQ) || (o->flags & F_DISK) ||
        o->size != it->size) {
        rc = MC_OBJECT_NOT_FOUND; /* removed or replaced meanwhile */
    } else if (it->status != MC_OK) {
        o->flags = (uint8_t)((o->flags & ~F_OFFQ) | F_NOOFF);
        cadd(&f->failures, 1);
    } else {
        o->flags = (uint8_t)((o->flags & ~(F_OFFQ | F_NOOFF)) | F_DISK);
        pthread_mutex_lock(&f->mu);
        map_put(f, h, it->key, it->key_len, f->shared ? MC__SHARED_FS_OWNER : client)->gen =
            it->gen;
        pthread_mutex_unlock(&f->mu);
        cadd(&f->disk_bytes, o->size);
        cadd(&f->successes, 1);
        /* (no eviction asked for here: the watermark rule drops its memory when the pool
         * needs room; asking on every confirmation would empty the pool) */
    }
    bool on_disk = o && (o->flags & F_DISK);
    pthread_mutex_unlock(&sh->mu);
    if (rc == MC_OBJECT_NOT_FOUND && it->status == MC_OK && !on_disk) {
        /* the client wrote a copy nobody will read: tell it to drop it */
        pthread_mutex_lock(&f->mu);
        dclient *c = client_find(f, client);
        if (c) {
            task_push(f, c, MC_MASTER_OFFLOAD_DELETE, it->key, it->key_len, it->size, 0);
            MC_CONTAINER_OF(c->tasks.prev, dtask, link)->gen = it->gen;
        }
        pthread_mutex_unlock(&f->mu);
    }
    return rc;
}

/* One REGISTER: a disk-only object when the key is unknown. */
static int end_register(mc_master_service *svc, mc_master_uuid client,
                        const mc_master_offload_item *it)
{
    struct mc__offload *f = svc->off;
    if (f->shared)
        return MC_NOT_SUPPORTED; /* the shared directory is not re-registered (yet) */
    uint64_t h = key_hash(svc, it->key, it->key_len);
    uint32_t h32;
    shard *sh = shard_of(svc, h, &h32);
    pthread_mutex_lock(&sh->mu);
    obj *o = ht_find(sh, h32, it->key, it->key_len);
    int rc = MC_OK;
    if (o && (o->flags & F_DISK) && !(o->flags & F_PROC) && o->size == it->size) {
        /* a disk copy recorded under the client's previous identity (it was closed and
         * set up again on the same directory before the old one expired): ours now */
        pthread_mutex_lock(&f->mu);
        map_put(f, h, it->key, it->key_len, client);
        pthread_mutex_unlock(&f->mu);
    } else if (o) {
        rc = MC_OBJECT_ALREADY_EXISTS;
    } else {
        o = mc__obj_new(0, it->key, it->key_len, h32);
        o->size = it->size;
        o->atime = now_ms(svc);
        o->owner = client;
        o->flags = F_DISK;
        mc__ht_insert(sh, o);
        cadd(&svc->keys, 1);
        pthread_mutex_lock(&f->mu);
        map_put(f, h, it->key, it->key_len, client);
        pthread_mutex_unlock(&f->mu);
        cadd(&f->disk_bytes, o->size);
        cadd(&f->disk_only, 1);
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

/* One PROMOTE result: publish the memory replica, or give it back. */
static int end_promote(mc_master_service *svc, const mc_master_offload_item *it)
{
    struct mc__offload *f = svc->off;
    uint64_t h = key_hash(svc, it->key, it->key_len);
    obj *o;
    shard *sh = lock_key(svc, it->key, it->key_len, h, &o);
    int rc = MC_OK;
    if (!o || (o->flags & (F_DISK | F_OFFQ)) != (F_DISK | F_OFFQ) || o->nrep != 1 ||
        o->reps[0].addr != it->address) {
        rc = MC_OBJECT_NOT_FOUND;
    } else if (it->status == MC_OK) {
        o->flags &= (uint8_t)~F_OFFQ;
        o->atime = now_ms(svc);
        obj_list(sh, o); /* in memory again: evictable (its disk copy stays) */
        cadd(&f->pok, 1);
    } else {
        /* back to disk-only (the owner read nothing into the space it reports failed) */
        drop_memory(svc, sh, o);
        cadd(&f->pfail, 1);
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

int mc_master_service_offload_end(mc_master_service *svc, mc_master_uuid client_id,
                                  const char *endpoint, const mc_master_offload_item *items,
                                  size_t n, int *statuses)
{
    struct mc__offload *f = svc->off;
    int rc = MC_OK;
    if (!f)
        rc = MC_NOT_SUPPORTED;
    else if (!endpoint_ok(endpoint) || n > MC_MASTER_MAX_OFFLOAD_TASKS || (n && !items))
        rc = MC_INVALID_PARAMS;
    if (!rc) {
        pthread_mutex_lock(&f->mu);
        if (!client_find(f, client_id))
            rc = MC_INVALID_PARAMS; /* no offload heartbeat first */
        pthread_mutex_unlock(&f->mu);
    }
    if (rc) {
        count_op(svc, MC_MASTER_OP_OFFLOAD_END, rc);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        const mc_master_offload_item *it = &items[i];
        int st = check_key(it->key, it->key_len);
        if (!st && (it->op == MC_MASTER_OFFLOAD_WRITE || it->op == MC_MASTER_OFFLOAD_PROMOTE)) {
            /* only the result of a task still handed out counts (not one given up by
             * the timeout, nor one for bytes replaced since) */
            pthread_mutex_lock(&f->mu);
            dclient *c = client_find(f, client_id);
            bool found = c && task_done(f, c, it->op, it->key, it->key_len, false, it->gen);
            if (!found && c && it->op == MC_MASTER_OFFLOAD_WRITE && it->status == MC_OK) {
                task_push(f, c, MC_MASTER_OFFLOAD_DELETE, it->key, it->key_len, it->size, 0);
                MC_CONTAINER_OF(c->tasks.prev, dtask, link)->gen = it->gen;
            }
            pthread_mutex_unlock(&f->mu);
            if (!found)
                st = MC_OBJECT_NOT_FOUND;
        }
        if (!st) {
            switch (it->op) {
            case MC_MASTER_OFFLOAD_WRITE:
                st = end_write(svc, client_id, it);
                break;
            case MC_MASTER_OFFLOAD_REGISTER:
                st = end_register(svc, client_id, it);
                break;
            case MC_MASTER_OFFLOAD_PROMOTE:
                st = end_promote(svc, it);
                break;
            case MC_MASTER_OFFLOAD_DELETE:
                st = MC_OK;
                break;
            default:
                st = MC_INVALID_PARAMS;
            }
        }
        if (statuses)
            statuses[i] = st;
    }
    count_op(svc, MC_MASTER_OP_OFFLOAD_END, MC_OK);
    return MC_OK;
}

/* ---- tick and expiry ---- */

/* A key of a dropped task, to settle after off->mu is released. */
typedef struct gone_key {
    int op;
    uint64_t addr;
    size_t len;
    uint8_t *key;
} gone_key;

static void settle(mc_master_service *svc, gone_key *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mc_master_offload_item it = {.op = g[i].op, .key = g[i].key, .key_len = g[i].len,
                                     .address = g[i].addr, .status = MC_TRANSFER_FAIL};
        if (g[i].op == MC_MASTER_OFFLOAD_WRITE) {
            uint64_t h = key_hash(svc, g[i].key, g[i].len);
            obj *o;
            shard *sh = lock_key(svc, g[i].key, g[i].len, h, &o);
            if (o && (o->flags & F_OFFQ) && !(o->flags & F_DISK)) {
                o->flags = (uint8_t)((o->flags & ~F_OFFQ) | F_NOOFF);
                cadd(&svc->off->failures, 1);
            }
            pthread_mutex_unlock(&sh->mu);
        } else if (g[i].op == MC_MASTER_OFFLOAD_PROMOTE) {
            end_promote(svc, &it);
        }
        free(g[i].key);
    }
    free(g);
}

static void collect(gone_key **g, size_t *n, size_t *cap, const dtask *t)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *g = mc_xrealloc(*g, *cap * sizeof **g);
    }
    (*g)[*n].op = t->op;
    (*g)[*n].addr = t->addr;
    (*g)[*n].len = t->klen;
    (*g)[*n].key = mc_xmalloc(t->klen ? t->klen : 1);
    memcpy((*g)[*n].key, t->key, t->klen);
    (*n)++;
}

/* Offload ahead of need: with offload_on_evict, once the pool is within PREFETCH_RATIOS
 * eviction ratios of the high watermark, the oldest PREFETCH_RATIOS x eviction_ratio of
 * the pool (the objects eviction would take next) are kept on their owners' disks too,
 * so that a put which finds no space can drop memory that is on disk already instead of
 * waiting for an offload (its put would fail meanwhile). A pass queues only what of that
 * reserve is not on disk yet. */
static void prefetch(mc_master_service *svc)
{
    struct mc__offload *f = svc->off;
    double cap = (double)cget(&svc->capacity), used = (double)cget(&svc->allocated);
    double start =
        svc->cfg.eviction_high_watermark_ratio - PREFETCH_RATIOS * svc->cfg.eviction_ratio;
    if (!svc->cfg.offload_on_evict || cap <= 0 || used < start * cap ||
        cget(&f->queued) >= PREFETCH_MAX_QUEUED || svc->cfg.eviction_ratio <= 0)
        return;
    pthread_mutex_lock(&svc->evict_mu);
    f->prefetch = true;
    mc__evict_prefetch_locked(svc, (uint64_t)(PREFETCH_RATIOS * svc->cfg.eviction_ratio * cap));
    f->prefetch = false;
    pthread_mutex_unlock(&svc->evict_mu);
}

void mc__offload_tick(mc_master_service *svc, uint64_t now)
{
    struct mc__offload *f = svc->off;
    if (!f)
        return;
    prefetch(svc);
    if (!cget(&f->queued))
        return;
    uint64_t tmo = svc->cfg.offload_task_timeout_ms;
    gone_key *g = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->nclients; i++) {
        dclient *c = f->clients[i];
        MC_LIST_FOREACH(it, &c->tasks) {
            dtask *t = MC_CONTAINER_OF(it, dtask, link);
            if (t->sent && now >= t->sent + tmo) {
                collect(&g, &n, &cap, t);
                task_free(f, c, t);
            }
        }
    }
    pthread_mutex_unlock(&f->mu);
    if (n)
        mc_log(MC_LOG_WARN, TAG, "%zu offload task(s) not reported within %llu ms: given up",
               n, (unsigned long long)tmo);
    settle(svc, g, n);
}

void mc__offload_client_gone(mc_master_service *svc, mc_master_uuid id)
{
    struct mc__offload *f = svc->off;
    if (!f)
        return;
    gone_key *g = NULL, *d = NULL;
    size_t n = 0, cap = 0, nd = 0, capd = 0;
    pthread_mutex_lock(&f->mu);
    dclient *c = client_find(f, id);
    if (!c) {
        pthread_mutex_unlock(&f->mu);
        return;
    }
    while (!mc_list_empty(&c->tasks)) {
        dtask *t = MC_CONTAINER_OF(c->tasks.next, dtask, link);
        if (t->op != MC_MASTER_OFFLOAD_DELETE)
            collect(&g, &n, &cap, t);
        task_free(f, c, t);
    }
    for (size_t i = 0; i < f->nclients; i++)
        if (f->clients[i] == c) {
            f->clients[i] = f->clients[--f->nclients];
            break;
        }
    free(c);
    /* its disk replicas: the keys, settled below under their shard locks */
    for (size_t i = 0; i < f->nb; i++)
        for (dent *e = f->b[i]; e; e = e->next)
            if (uuid_eq(e->owner, id)) {
                dtask t = {.klen = e->klen};
                if (nd == capd) {
                    capd = capd ? capd * 2 : 16;
                    d = mc_xrealloc(d, capd * sizeof *d);
                }
                d[nd].op = 0;
                d[nd].addr = 0;
                d[nd].len = t.klen;
                d[nd].key = mc_xmalloc(e->klen ? e->klen : 1);
                memcpy(d[nd].key, e->key, e->klen);
                nd++;
            }
    pthread_mutex_unlock(&f->mu);
    settle(svc, g, n);
    uint64_t lost = 0;
    for (size_t i = 0; i < nd; i++) {
        uint64_t h = key_hash(svc, d[i].key, d[i].len);
        obj *o;
        shard *sh = lock_key(svc, d[i].key, d[i].len, h, &o);
        pthread_mutex_lock(&f->mu);
        bool mine = false;
        dent *e = map_get(f, h, d[i].key, d[i].len);
        if (e && uuid_eq(e->owner, id)) {
            mine = true;
            map_del(f, h, d[i].key, d[i].len, NULL);
        }
        pthread_mutex_unlock(&f->mu);
        if (mine && o && (o->flags & F_DISK)) {
            lost++;
            csub(&f->disk_bytes, o->size);
            /* a promotion pending: its one memory replica never got its bytes */
            bool promo = o->nrep && (o->flags & F_OFFQ);
            o->flags &= (uint8_t)~(F_DISK | F_OFFQ);
            if (o->nrep == 0) {
                csub(&f->disk_only, 1);
                mc__obj_erase(svc, sh, o, MC__SPACE_REMOVED);
            } else if (promo) {
                mc__obj_erase(svc, sh, o, MC__SPACE_REMOVED);
            }
        }
        pthread_mutex_unlock(&sh->mu);
        free(d[i].key);
    }
    free(d);
    cadd(&f->lost, lost);
    if (lost)
        mc_log(MC_LOG_INFO, TAG, "client %016llx%016llx gone: %llu disk replica(s) lost",
               (unsigned long long)id.first, (unsigned long long)id.second,
               (unsigned long long)lost);
}

void mc__offload_stats(mc_master_service *svc, mc_master_stats *out)
{
    struct mc__offload *f = svc->off;
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    out->disk_clients = f->nclients;
    out->disk_replica_keys = f->count;
    pthread_mutex_unlock(&f->mu);
    out->disk_only_keys = cget(&f->disk_only);
    out->disk_replica_bytes = cget(&f->disk_bytes);
    out->offload_queued = cget(&f->queued);
    out->offload_requests = cget(&f->requests);
    out->offload_successes = cget(&f->successes);
    out->offload_failures = cget(&f->failures);
    out->disk_hits = cget(&f->hits);
    out->promotion_requests = cget(&f->preq);
    out->promotion_successes = cget(&f->pok);
    out->promotion_failures = cget(&f->pfail);
    out->disk_replicas_lost = cget(&f->lost);
}
