/* snapshot.c: snapshots of the segments and complete objects, the restore at start, and
 * mc_master_log_apply (master/persist.h; docs/ha.md "Mutation log and snapshots").
 *
 * Writing a snapshot (its own thread, every interval_s, or mc_master_persist_snapshot_now):
 *   1. L = the log's last LSN, and the log rotates (its next record opens a new file);
 *   2. the segment table is copied under seg_lock (read), then each shard in turn under
 *      its mutex (and seg_lock for reading, to name each replica's segment by id): the
 *      frames are encoded into memory while the lock is held and written to the
 *      temporary file after it is released, so no index lock is held across disk I/O;
 *   3. end frame, fsync, rename snapshot-<L>.snap.tmp -> snapshot-<L>.snap, fsync dir;
 *   4. retention: snapshots beyond the newest `retention` are deleted, and log files
 *      whose every record is at or below the oldest kept snapshot's L.
 * The copy is fuzzy (shards are copied at different moments), which the replay makes
 * exact: every mutation a shard's copy misses happened after L was read, so its record
 * has an LSN above L and is replayed; records are full states (a key maps to these
 * replicas; a key is gone; a segment is mounted / unmounted), so replaying one the copy
 * already holds changes nothing.
 *
 * Restore: the newest snapshot whose header and end frames are intact, then every log
 * record above its L in LSN order, into a plain map (key -> replicas by segment id); a
 * torn or corrupt frame ends the replay there, the file is truncated at the last whole
 * frame and later files are renamed *.discarded. Then the map is materialised: clients
 * are registered (one client_ttl from now), segments mounted in log order as pending,
 * every replica's range reserved at its address (sorted per segment: O(1) each), and the
 * objects inserted with a read lease from now (a reader of the previous master may be
 * reading). */
#include "master/oplog_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/sync.h"
#include "master/replicate.h"
#include "mooncake/log.h"

struct mc_master_persist {
    mc_master_service *svc;
    char *dir;
    uint64_t interval_ms;
    uint32_t retention;
    mc__oplog *log;
    pthread_mutex_t snap_mu; /* one snapshot at a time */
    pthread_mutex_t mu;      /* stop flag + cond for the periodic thread */
    pthread_cond_t cv;
    bool stop;
    pthread_t thr;
    counter snapshots, snapshot_failures;
    uint64_t snap_lsn; /* LSN of the last snapshot written (snap_mu); UINT64_MAX: none */
};

/* ---- the restore map ---- */

typedef struct rseg {
    mc_master_uuid id, client;
    char *name, *endpoint, *protocol, *host_id;
    uint64_t base, size;
    bool live;
    uint32_t slot;
} rseg;

typedef struct rrep {
    uint32_t seg; /* index in rmap.segs */
    uint64_t addr;
    uint32_t handle;
} rrep;

typedef struct robj {
    struct robj *next;
    uint64_t h;
    uint8_t *key; /* = the bytes after the record (one allocation) */
    uint32_t klen;
    uint64_t size, pin_wall;
    mc_master_uuid writer; /* start entries */
    bool hard, soft;
    uint8_t nrep;
    rrep reps[MC_MASTER_MAX_REPLICAS];
    uint8_t kbuf[];
} robj;

typedef struct rmap {
    rseg *segs;
    size_t nsegs, segs_cap;
    robj **b;
    size_t nb, n;
    /* writes started and not completed (start records without a later put of their
     * key): chained by key like b, the most recent first; may repeat a key */
    robj **wb;
    size_t nwb, nw;
    uint64_t lsn, records; /* last LSN applied; records applied */
    mc_master_service *svc; /* task records go to its inflight.c table (restore) */
} rmap;

static void rmap_free(rmap *m)
{
    for (size_t i = 0; i < m->nsegs; i++) {
        free(m->segs[i].name);
        free(m->segs[i].endpoint);
        free(m->segs[i].protocol);
        free(m->segs[i].host_id);
    }
    free(m->segs);
    for (size_t i = 0; i < m->nb; i++)
        for (robj *o = m->b[i], *nx; o; o = nx) {
            nx = o->next;
            free(o);
        }
    free(m->b);
    for (size_t i = 0; i < m->nwb; i++)
        for (robj *o = m->wb[i], *nx; o; o = nx) {
            nx = o->next;
            free(o);
        }
    free(m->wb);
    mc_master_service *svc = m->svc;
    memset(m, 0, sizeof(*m));
    m->svc = svc;
}

static robj **chain_slot(robj **b, size_t nb, const uint8_t *key, size_t len, uint64_t h)
{
    robj **p = &b[h & (nb - 1)];
    while (*p && !((*p)->h == h && (*p)->klen == len && !memcmp((*p)->key, key, len)))
        p = &(*p)->next;
    return p;
}

static robj **rmap_slot(rmap *m, const uint8_t *key, size_t len, uint64_t h)
{
    return chain_slot(m->b, m->nb, key, len, h);
}

/* Doubles a chained table (keeps each chain's order). */
static void chain_grow(robj ***bp, size_t *nbp)
{
    size_t onb = *nbp, nb = onb ? onb * 2 : 1024;
    robj **ob = *bp, **b = mc_xcalloc(nb, sizeof(*b));
    for (size_t i = 0; i < onb; i++) {
        /* walk in order, append at each new chain's end (keeps most-recent-first) */
        for (robj *o = ob[i], *nx; o; o = nx) {
            nx = o->next;
            robj **t = &b[o->h & (nb - 1)];
            while (*t)
                t = &(*t)->next;
            o->next = NULL;
            *t = o;
        }
    }
    free(ob);
    *bp = b;
    *nbp = nb;
}

static void rmap_grow(rmap *m)
{
    chain_grow(&m->b, &m->nb);
}

/* The most recent unfinished write of key leaves (its put completed it). */
static void writes_pop(rmap *m, const uint8_t *key, size_t len)
{
    if (!m->nwb)
        return;
    uint64_t h = XXH3_64bits(key, len);
    robj **p = chain_slot(m->wb, m->nwb, key, len, h);
    if (*p) {
        robj *o = *p;
        *p = o->next;
        free(o);
        m->nw--;
    }
}

static void rmap_remove(rmap *m, const uint8_t *key, size_t len)
{
    if (!m->nb)
        return;
    uint64_t h = XXH3_64bits(key, len);
    robj **p = rmap_slot(m, key, len, h);
    if (*p) {
        robj *o = *p;
        *p = o->next;
        free(o);
        m->n--;
    }
}

/* The live entry of segment id, or SIZE_MAX. */
static size_t rmap_seg(const rmap *m, mc_master_uuid id)
{
    for (size_t i = m->nsegs; i-- > 0;)
        if (m->segs[i].live && uuid_eq(m->segs[i].id, id))
            return i;
    return SIZE_MAX;
}

static bool str_fits(const char *s, size_t max)
{
    return s && strnlen(s, max) < max;
}

/* Applies one record to the map. Returns 0, or -1 for a record that breaks a rule (a
 * malformed record: the replay stops there). */
static int rmap_apply(rmap *m, const Mclog__LogRecord *rec)
{
    switch (rec->op_case) {
    case MCLOG__LOG_RECORD__OP_START:
    case MCLOG__LOG_RECORD__OP_PUT: {
        bool start = rec->op_case == MCLOG__LOG_RECORD__OP_START;
        const Mclog__LogObject *lo = start ? rec->start : rec->put;
        if (!lo || !lo->key.len || lo->key.len > MC_MASTER_KEY_MAX ||
            lo->n_replicas > MC_MASTER_MAX_REPLICAS)
            return -1;
        if (!start) {
            writes_pop(m, lo->key.data, lo->key.len); /* that write completed */
            rmap_remove(m, lo->key.data, lo->key.len);
        }
        robj tmp = {0};
        for (size_t i = 0; i < lo->n_replicas; i++) {
            const Mclog__LogReplica *r = lo->replicas[i];
            size_t si = rmap_seg(m, (mc_master_uuid){r->seg_hi, r->seg_lo});
            if (si == SIZE_MAX)
                continue; /* its segment went (unmounted): not restorable */
            tmp.reps[tmp.nrep].seg = (uint32_t)si;
            tmp.reps[tmp.nrep].addr = r->addr;
            tmp.reps[tmp.nrep].handle = MC__ALLOC_NONE;
            tmp.nrep++;
        }
        if (!tmp.nrep)
            return 0;
        if (start ? m->nw + 1 > m->nwb : m->n + 1 > m->nb) {
            if (start)
                chain_grow(&m->wb, &m->nwb);
            else
                rmap_grow(m);
        }
        robj *o = mc_xmalloc(sizeof(*o) + lo->key.len);
        *o = tmp;
        o->h = XXH3_64bits(lo->key.data, lo->key.len);
        o->klen = (uint32_t)lo->key.len;
        o->key = o->kbuf;
        memcpy(o->key, lo->key.data, o->klen);
        o->size = lo->size;
        o->hard = lo->hard_pin;
        o->soft = lo->soft_pin;
        o->pin_wall = lo->soft_pin_deadline_ms;
        o->writer = (mc_master_uuid){lo->writer_hi, lo->writer_lo};
        robj **p = start ? &m->wb[o->h & (m->nwb - 1)] : &m->b[o->h & (m->nb - 1)];
        o->next = *p; /* the most recent first */
        *p = o;
        if (start)
            m->nw++;
        else
            m->n++;
        return 0;
    }
    case MCLOG__LOG_RECORD__OP_REMOVE:
        if (!rec->remove.len || rec->remove.len > MC_MASTER_KEY_MAX)
            return -1;
        rmap_remove(m, rec->remove.data, rec->remove.len);
        return 0;
    case MCLOG__LOG_RECORD__OP_MOUNT: {
        const Mclog__LogSegment *ls = rec->mount;
        if (!ls || !str_fits(ls->name, MC_MASTER_NAME_MAX) || !*ls->name ||
            !str_fits(ls->endpoint, MC_MASTER_NAME_MAX) ||
            !str_fits(ls->protocol, MC_MASTER_PROTOCOL_MAX) ||
            !str_fits(ls->host_id, MC_MASTER_NAME_MAX) || !ls->size ||
            ls->size > MC_MASTER_SEGMENT_MAX_SIZE || ls->range_base > UINT64_MAX - ls->size)
            return -1;
        if (rmap_seg(m, (mc_master_uuid){ls->id_hi, ls->id_lo}) != SIZE_MAX)
            return 0; /* mounted already (a replay of what the snapshot holds) */
        if (m->nsegs == m->segs_cap) {
            m->segs_cap = m->segs_cap ? m->segs_cap * 2 : 16;
            m->segs = mc_xrealloc(m->segs, m->segs_cap * sizeof(*m->segs));
        }
        rseg *s = &m->segs[m->nsegs++];
        s->id = (mc_master_uuid){ls->id_hi, ls->id_lo};
        s->client = (mc_master_uuid){ls->client_hi, ls->client_lo};
        s->name = mc_xstrdup(ls->name);
        s->endpoint = mc_xstrdup(ls->endpoint);
        s->protocol = mc_xstrdup(ls->protocol);
        s->host_id = mc_xstrdup(ls->host_id);
        s->base = ls->range_base;
        s->size = ls->size;
        s->live = true;
        s->slot = UINT32_MAX;
        return 0;
    }
    case MCLOG__LOG_RECORD__OP_UNMOUNT: {
        if (!rec->unmount)
            return -1;
        size_t si = rmap_seg(m, (mc_master_uuid){rec->unmount->id_hi, rec->unmount->id_lo});
        if (si != SIZE_MAX)
            m->segs[si].live = false; /* its objects' replicas on it are dropped later */
        return 0;
    }
    case MCLOG__LOG_RECORD__OP_TASK: /* copy / move tasks: inflight.c, adopted after */
    case MCLOG__LOG_RECORD__OP_TASK_END:
        if (m->svc)
            mc__inflight_task(m->svc, rec->op_case == MCLOG__LOG_RECORD__OP_TASK
                                          ? rec->task : rec->task_end,
                              rec->op_case == MCLOG__LOG_RECORD__OP_TASK_END);
        return 0;
    default:
        return 0; /* header / end: structure, checked by the snapshot loader */
    }
}

/* ---- reading files ---- */

static int read_file(const char *path, uint8_t **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *p = mc_xmalloc(n ? n : 1);
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *out = p;
    *len = got;
    return 0;
}

typedef struct snap_check {
    uint64_t lsn, segs, objs;
    bool header, end, bad;
} snap_check;

/* snap_step: the structure of a snapshot, one record at a time: a version-1 header
 * first (its LSN kept), then segments and objects only, then an end frame whose counts
 * match, then nothing. Returns -1 when rec breaks it (s->bad set), 0 for the header or
 * the end, 1 for a segment or an object (counted) to apply. */
static int snap_step(snap_check *s, uint64_t lsn, const Mclog__LogRecord *rec)
{
    if (s->end || (!s->header && (rec->op_case != MCLOG__LOG_RECORD__OP_HEADER ||
                                  !rec->header || rec->header->version != 1))) {
        s->bad = true; /* nothing may follow the end frame, nothing precede the header */
        return -1;
    }
    switch (rec->op_case) {
    case MCLOG__LOG_RECORD__OP_HEADER:
        if (s->header) {
            s->bad = true;
            return -1;
        }
        s->header = true;
        s->lsn = lsn;
        return 0;
    case MCLOG__LOG_RECORD__OP_END:
        s->end = true;
        if (!rec->end || rec->end->segments != s->segs || rec->end->objects != s->objs) {
            s->bad = true;
            return -1;
        }
        return 0;
    case MCLOG__LOG_RECORD__OP_MOUNT:
        s->segs++;
        return 1;
    case MCLOG__LOG_RECORD__OP_PUT:
    case MCLOG__LOG_RECORD__OP_START:
        s->objs++;
        return 1;
    default:
        s->bad = true; /* a snapshot holds segments and objects only */
        return -1;
    }
}

typedef struct snap_load {
    rmap *m;
    uint64_t frames;
    snap_check c;
} snap_load;

static int snap_cb(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    snap_load *s = ctx;
    s->frames++;
    int r = snap_step(&s->c, lsn, rec);
    if (r <= 0)
        return r < 0;
    if (rmap_apply(s->m, rec)) {
        s->c.bad = true;
        return 1;
    }
    return 0;
}

/* Loads snapshot file path into m (emptied first). 0, or -1 when it is not a whole valid
 * snapshot (m is then empty). */
static int load_snapshot(const char *path, rmap *m, uint64_t *lsn)
{
    uint8_t *buf;
    size_t len;
    if (read_file(path, &buf, &len))
        return -1;
    snap_load s = {.m = m};
    int rc = -1;
    if (len >= MC_MASTER_LOG_MAGIC_LEN &&
        !memcmp(buf, MC_MASTER_SNAP_MAGIC, MC_MASTER_LOG_MAGIC_LEN)) {
        mc_master_log_stop why = mc_master_log_parse(buf + MC_MASTER_LOG_MAGIC_LEN,
                                                     len - MC_MASTER_LOG_MAGIC_LEN, snap_cb,
                                                     &s, NULL, NULL);
        if (why == MC_MASTER_LOG_END && s.c.header && s.c.end && !s.c.bad)
            rc = 0;
    }
    free(buf);
    if (rc)
        rmap_free(m);
    else
        *lsn = s.c.lsn;
    return rc;
}

typedef struct log_replay {
    rmap *m;
    uint64_t after; /* the snapshot's LSN: records at or below it are in it */
    bool gap;
} log_replay;

static int log_cb(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    log_replay *r = ctx;
    if (lsn <= r->after || lsn <= r->m->lsn)
        return 0; /* the snapshot (or an earlier file) has it */
    if (r->m->lsn && lsn != r->m->lsn + 1) {
        r->gap = true; /* records are missing: nothing after this can be trusted */
        return 1;
    }
    if (!r->m->lsn && lsn != r->after + 1) {
        r->gap = true;
        return 1;
    }
    if (rmap_apply(r->m, rec)) {
        r->gap = true;
        return 1;
    }
    r->m->lsn = lsn;
    r->m->records++;
    return 0;
}

/* ---- directory listing ---- */

typedef struct fent {
    uint64_t lsn;
    char *path;
} fent;

static int fent_cmp(const void *a, const void *b)
{
    uint64_t x = ((const fent *)a)->lsn, y = ((const fent *)b)->lsn;
    return x < y ? -1 : x > y;
}

/* Files "<prefix><20 digits><suffix>" in dir, ascending by LSN. */
static size_t list_files(const char *dir, const char *prefix, const char *suffix, fent **out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0, cap = 0, lp = strlen(prefix), ls = strlen(suffix);
    fent *v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l != lp + 20 + ls || strncmp(e->d_name, prefix, lp) ||
            strcmp(e->d_name + lp + 20, suffix))
            continue;
        uint64_t lsn = 0;
        bool ok = true;
        for (size_t i = 0; i < 20; i++) {
            char c = e->d_name[lp + i];
            if (c < '0' || c > '9')
                ok = false;
            else
                lsn = lsn * 10 + (uint64_t)(c - '0');
        }
        if (!ok)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            v = mc_xrealloc(v, cap * sizeof(*v));
        }
        v[n].lsn = lsn;
        v[n].path = mc__persist_path(dir, prefix, lsn, suffix);
        n++;
    }
    closedir(d);
    if (n)
        qsort(v, n, sizeof(*v), fent_cmp);
    *out = v;
    return n;
}

static void fents_free(fent *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].path);
    free(v);
}

/* ---- materialising the map into the service ---- */

typedef struct rref {
    uint32_t slot;
    uint64_t addr;
    robj *o;
    uint32_t i;
} rref;

static int rref_cmp(const void *a, const void *b)
{
    const rref *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Inserts a complete object whose replicas' space is reserved (reps: slot, handle,
 * addr) into svc. Caller holds its shard mutex (sh, h32) and no other lock; the key
 * must be absent. */
static void insert_obj(mc_master_service *svc, shard *sh, uint32_t h32, const uint8_t *key,
                       size_t klen, uint64_t size, bool hard, bool soft, uint64_t pin_wall,
                       const rep *reps, uint32_t nrep, uint64_t now, uint64_t wall)
{
    obj *o = mc__obj_new(nrep, key, klen, h32);
    memcpy(o->reps, reps, nrep * sizeof(rep));
    o->size = size;
    o->atime = now;
    o->flags = (uint8_t)(F_LEASED | (hard ? F_HARD : 0));
    if (soft && pin_wall > wall) {
        mc__set_soft(svc, o, true);
        o->pin = now + (pin_wall - wall);
    }
    pthread_rwlock_rdlock(&svc->seg_lock);
    for (uint32_t i = 0; i < nrep; i++) {
        if (reps[i].handle == MC__ALLOC_NONE)
            continue;
        seg *s = svc->segs[reps[i].seg];
        pthread_mutex_lock(&s->mu);
        uint64_t b = mc__alloc_block_size(s->alloc, reps[i].handle);
        pthread_mutex_unlock(&s->mu);
        cadd(&s->used, b);
        cadd(&svc->allocated, b);
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    mc__ht_insert(sh, o);
    obj_list(sh, o);
    cadd(&svc->keys, 1);
}

static void materialise(mc_master_service *svc, rmap *m, mc_master_restore_info *info)
{
    uint64_t now = now_ms(svc), wall = mc_wall_ms();
    /* clients first (touching one confirms its pending segments), then segments in log
     * order, as pending */
    for (size_t i = 0; i < m->nsegs; i++)
        if (m->segs[i].live)
            mc__client_touch(svc, m->segs[i].client, now);
    /* the writers of unfinished writes too: one that does not come back expires, which
     * lets its quarantined ranges go after the release timeout (fence.c) */
    for (size_t b = 0; b < m->nwb; b++)
        for (robj *o = m->wb[b]; o; o = o->next)
            mc__client_touch(svc, o->writer, now);
    for (size_t i = 0; i < m->nsegs; i++) {
        rseg *s = &m->segs[i];
        if (!s->live)
            continue;
        mc_master_segment d = {.id = s->id, .name = s->name, .base = s->base, .size = s->size,
                               .te_endpoint = s->endpoint, .protocol = s->protocol,
                               .host_id = s->host_id};
        int rc = mc__seg_restore(svc, &d, s->client, &s->slot);
        if (rc != MC_OK) {
            mc_log(MC_LOG_WARN, TAG, "restore: segment %s not mounted again: %s", s->name,
                   mc_strerror(rc));
            s->live = false;
        } else {
            info->segments++;
        }
    }
    /* every replica's range, sorted per segment, reserved with one cursor per segment */
    size_t nref = 0, cap = 0;
    rref *refs = NULL;
    for (size_t b = 0; b < m->nb; b++)
        for (robj *o = m->b[b]; o; o = o->next)
            for (uint32_t i = 0; i < o->nrep; i++) {
                if (!m->segs[o->reps[i].seg].live || !o->size)
                    continue;
                if (nref == cap) {
                    cap = cap ? cap * 2 : 1024;
                    refs = mc_xrealloc(refs, cap * sizeof(*refs));
                }
                refs[nref++] = (rref){m->segs[o->reps[i].seg].slot, o->reps[i].addr, o, i};
            }
    if (nref)
        qsort(refs, nref, sizeof(*refs), rref_cmp);
    pthread_rwlock_rdlock(&svc->seg_lock);
    uint32_t cur_slot = UINT32_MAX, cursor = MC__ALLOC_NONE;
    for (size_t k = 0; k < nref; k++) {
        if (refs[k].slot != cur_slot) {
            cur_slot = refs[k].slot;
            cursor = MC__ALLOC_NONE;
        }
        seg *s = svc->segs[cur_slot];
        refs[k].o->reps[refs[k].i].handle =
            mc__alloc_reserve(s->alloc, refs[k].addr, refs[k].o->size, &cursor);
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    free(refs);
    /* the objects whose every live replica got its range */
    for (size_t b = 0; b < m->nb; b++)
        for (robj *o = m->b[b]; o; o = o->next) {
            rep reps[MC_MASTER_MAX_REPLICAS];
            uint32_t n = 0;
            bool ok = true;
            for (uint32_t i = 0; i < o->nrep; i++) {
                const rseg *s = &m->segs[o->reps[i].seg];
                if (!s->live)
                    continue;
                if (o->size && o->reps[i].handle == MC__ALLOC_NONE)
                    ok = false;
                reps[n++] = (rep){.seg = s->slot, .handle = o->reps[i].handle,
                                  .addr = o->reps[i].addr};
            }
            if (!ok || !n) {
                if (n) {
                    mc_log(MC_LOG_WARN, TAG,
                           "restore: an object of %" PRIu64 " bytes overlaps another's "
                           "space: not restored", o->size);
                    info->dropped++;
                }
                pthread_rwlock_rdlock(&svc->seg_lock);
                for (uint32_t i = 0; i < n; i++)
                    if (reps[i].handle != MC__ALLOC_NONE) {
                        seg *s = svc->segs[reps[i].seg];
                        mc__alloc_free(s->alloc, reps[i].handle);
                    }
                pthread_rwlock_unlock(&svc->seg_lock);
                continue;
            }
            uint64_t h = key_hash(svc, o->key, o->klen);
            uint32_t h32;
            shard *sh = shard_of(svc, h, &h32);
            pthread_mutex_lock(&sh->mu);
            if (!ht_find(sh, h32, o->key, o->klen)) {
                insert_obj(svc, sh, h32, o->key, o->klen, o->size, o->hard, o->soft,
                           o->pin_wall, reps, n, now, wall);
                info->objects++;
            }
            pthread_mutex_unlock(&sh->mu);
        }
    /* Writes that started and never completed: the old master's writer may still be
     * sending bytes into their ranges (or their space was in quarantine): reserve each
     * range that is still free (one that overlaps a restored object was reused after a
     * release: the object wins) and quarantine it under its writer, as a discarded write
     * is (fence.c: its writer and the segment's owner get a fence above every epoch of
     * the old master before the range is reused). */
    nref = cap = 0;
    refs = NULL;
    for (size_t b = 0; b < m->nwb; b++)
        for (robj *o = m->wb[b]; o; o = o->next)
            for (uint32_t i = 0; i < o->nrep && o->size; i++) {
                if (!m->segs[o->reps[i].seg].live)
                    continue;
                if (nref == cap) {
                    cap = cap ? cap * 2 : 64;
                    refs = mc_xrealloc(refs, cap * sizeof(*refs));
                }
                refs[nref++] = (rref){m->segs[o->reps[i].seg].slot, o->reps[i].addr, o, i};
            }
    if (nref) /* by address, so one walk along each segment's blocks reserves them all */
        qsort(refs, nref, sizeof(*refs), rref_cmp);
    pthread_rwlock_rdlock(&svc->seg_lock);
    cur_slot = UINT32_MAX;
    cursor = MC__ALLOC_NONE;
    for (size_t k = 0; k < nref; k++) {
        if (refs[k].slot != cur_slot) {
            cur_slot = refs[k].slot;
            cursor = MC__ALLOC_NONE;
        }
        seg *s = svc->segs[cur_slot];
        robj *o = refs[k].o;
        pthread_mutex_lock(&s->mu);
        uint32_t prev = cursor;
        uint32_t hd = mc__alloc_reserve(s->alloc, refs[k].addr, o->size, &cursor);
        uint64_t bytes = hd != MC__ALLOC_NONE ? mc__alloc_block_size(s->alloc, hd) : 0;
        pthread_mutex_unlock(&s->mu);
        if (hd == MC__ALLOC_NONE) {
            cursor = prev; /* still a live block before the next address */
            continue;
        }
        cadd(&s->used, bytes);
        cadd(&svc->allocated, bytes);
        rep r = {.seg = cur_slot, .handle = hd, .addr = refs[k].addr};
        mc__quarantine_rep_locked(svc, o->writer, &r, s, now);
        info->quarantined++;
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    free(refs);
}

/* ---- mc_master_log_apply (a standby's path) ---- */

int mc_master_log_apply(mc_master_service *svc, uint64_t lsn, const Mclog__LogRecord *rec)
{
    (void)lsn;
    if (!svc || !rec)
        return MC_INVALID_PARAMS;
    uint64_t now = now_ms(svc);
    switch (rec->op_case) {
    case MCLOG__LOG_RECORD__OP_PUT: {
        const Mclog__LogObject *lo = rec->put;
        if (!lo || check_key(lo->key.data, lo->key.len) ||
            lo->n_replicas > MC_MASTER_MAX_REPLICAS)
            return MC_INVALID_PARAMS;
        mc__inflight_end(svc, lo); /* that write completed (inflight.c) */
        uint64_t h = key_hash(svc, lo->key.data, lo->key.len);
        uint32_t h32;
        shard *sh = shard_of(svc, h, &h32);
        pthread_mutex_lock(&sh->mu);
        obj *old = ht_find(sh, h32, lo->key.data, lo->key.len);
        if (old)
            mc__obj_erase(svc, sh, old, MC__SPACE_REMOVED);
        rep reps[MC_MASTER_MAX_REPLICAS];
        uint32_t n = 0;
        int rc = MC_OK;
        pthread_rwlock_rdlock(&svc->seg_lock); /* shard.mu -> seg_lock: in order */
        for (size_t i = 0; i < lo->n_replicas && rc == MC_OK; i++) {
            mc_master_uuid id = {lo->replicas[i]->seg_hi, lo->replicas[i]->seg_lo};
            for (uint32_t k = 0; k < svc->nslots; k++) {
                seg *s = svc->segs[k];
                if (!s || s->unmounting || !uuid_eq(s->id, id))
                    continue;
                uint32_t hd = MC__ALLOC_NONE;
                if (lo->size) {
                    pthread_mutex_lock(&s->mu);
                    hd = mc__alloc_reserve(s->alloc, lo->replicas[i]->addr, lo->size, NULL);
                    pthread_mutex_unlock(&s->mu);
                    if (hd == MC__ALLOC_NONE) {
                        rc = MC_NO_AVAILABLE_HANDLE;
                        break;
                    }
                }
                reps[n++] = (rep){.seg = k, .handle = hd, .addr = lo->replicas[i]->addr};
                break;
            }
        }
        if (rc != MC_OK)
            for (uint32_t i = 0; i < n; i++)
                if (reps[i].handle != MC__ALLOC_NONE) {
                    seg *s = svc->segs[reps[i].seg];
                    pthread_mutex_lock(&s->mu);
                    mc__alloc_free(s->alloc, reps[i].handle);
                    pthread_mutex_unlock(&s->mu);
                }
        pthread_rwlock_unlock(&svc->seg_lock);
        if (rc == MC_OK && n) {
            insert_obj(svc, sh, h32, lo->key.data, lo->key.len, lo->size, lo->hard_pin,
                       lo->soft_pin, lo->soft_pin_deadline_ms, reps, n, now, mc_wall_ms());
            mc__log_put(svc, ht_find(sh, h32, lo->key.data, lo->key.len));
        }
        pthread_mutex_unlock(&sh->mu);
        return rc;
    }
    case MCLOG__LOG_RECORD__OP_REMOVE: {
        if (check_key(rec->remove.data, rec->remove.len))
            return MC_INVALID_PARAMS;
        obj *o;
        shard *sh = lock_key(svc, rec->remove.data, rec->remove.len,
                             key_hash(svc, rec->remove.data, rec->remove.len), &o);
        if (o)
            mc__obj_erase(svc, sh, o, MC__SPACE_REMOVED);
        pthread_mutex_unlock(&sh->mu);
        return MC_OK;
    }
    case MCLOG__LOG_RECORD__OP_MOUNT: {
        const Mclog__LogSegment *ls = rec->mount;
        if (!ls)
            return MC_INVALID_PARAMS;
        mc_master_uuid client = {ls->client_hi, ls->client_lo};
        mc_master_segment d = {.id = {ls->id_hi, ls->id_lo}, .name = ls->name,
                               .base = ls->range_base, .size = ls->size,
                               .te_endpoint = ls->endpoint, .protocol = ls->protocol,
                               .host_id = ls->host_id};
        mc__client_touch(svc, client, now);
        uint32_t slot;
        int rc = mc__seg_restore(svc, &d, client, &slot);
        return rc == MC_SEGMENT_ALREADY_EXISTS ? MC_OK : rc;
    }
    case MCLOG__LOG_RECORD__OP_UNMOUNT:
        if (!rec->unmount)
            return MC_INVALID_PARAMS;
        mc__seg_unmount_id(svc, (mc_master_uuid){rec->unmount->id_hi, rec->unmount->id_lo});
        return MC_OK;
    case MCLOG__LOG_RECORD__OP_START: /* a write in flight: kept aside (inflight.c) */
        if (!rec->start || check_key(rec->start->key.data, rec->start->key.len) ||
            rec->start->n_replicas > MC_MASTER_MAX_REPLICAS)
            return MC_INVALID_PARAMS;
        mc__inflight_start(svc, rec->start);
        return MC_OK;
    case MCLOG__LOG_RECORD__OP_TASK: /* copy / move tasks: kept aside (inflight.c) */
    case MCLOG__LOG_RECORD__OP_TASK_END:
        mc__inflight_task(svc, rec->op_case == MCLOG__LOG_RECORD__OP_TASK ? rec->task
                                                                          : rec->task_end,
                          rec->op_case == MCLOG__LOG_RECORD__OP_TASK_END);
        return MC_OK;
    default:
        return MC_OK;
    }
}

/* ---- writing a snapshot ---- */

static int write_buf(int fd, mc__buf *b)
{
    int rc = mc_write_all(fd, b->p, b->len);
    if (rc)
        return rc;
    b->len = 0;
    return 0;
}

static void frame_plain(mc__buf *b, uint64_t lsn, const Mclog__LogRecord *rec)
{
    uint8_t *at = mc__buf_room(b, mc__log_frame_size(rec));
    b->len += mc__log_frame_write(at, lsn, rec);
}

static void retention(mc_master_persist *p)
{
    fent *snaps, *logs;
    size_t ns = list_files(p->dir, "snapshot-", ".snap", &snaps);
    if (ns > p->retention)
        for (size_t i = 0; i < ns - p->retention; i++)
            unlink(snaps[i].path);
    uint64_t keep = ns ? snaps[ns > p->retention ? ns - p->retention : 0].lsn : 0;
    size_t nl = list_files(p->dir, "oplog-", ".log", &logs);
    /* log k holds [lsn_k, lsn_{k+1} - 1]: not needed when all of it is <= keep */
    for (size_t i = 0; i + 1 < nl; i++)
        if (ns && logs[i + 1].lsn <= keep + 1)
            unlink(logs[i].path);
    fents_free(snaps, ns);
    fents_free(logs, nl);
}

/* Encodes svc's segments and objects as a snapshot at lsn (the file's bytes, magic
 * first) into b: the segment table under seg_lock (read), then each shard in turn under
 * its mutex, encoded into memory while the lock is held. flush (NULL: b keeps growing) is
 * called after the segments, after each shard and after the end frame, with no index
 * lock held (it writes b out and empties it). 0 or flush's error; *nsegs, *nobjs. */
static int snap_encode(mc_master_service *svc, uint64_t lsn, mc__buf *b,
                       int (*flush)(void *, mc__buf *), void *ctx, uint64_t *nsegs,
                       uint64_t *nobjs)
{
    *nsegs = *nobjs = 0;
    memcpy(mc__buf_room(b, MC_MASTER_LOG_MAGIC_LEN), MC_MASTER_SNAP_MAGIC,
           MC_MASTER_LOG_MAGIC_LEN);
    b->len += MC_MASTER_LOG_MAGIC_LEN;
    Mclog__SnapshotHeader hd = MCLOG__SNAPSHOT_HEADER__INIT;
    hd.version = 1;
    hd.created_ms = mc_wall_ms();
    Mclog__LogRecord rec = MCLOG__LOG_RECORD__INIT;
    rec.op_case = MCLOG__LOG_RECORD__OP_HEADER;
    rec.header = &hd;
    frame_plain(b, lsn, &rec);
    pthread_rwlock_rdlock(&svc->seg_lock);
    for (uint32_t i = 0; i < svc->nslots; i++) {
        seg *s = svc->segs[i];
        if (s && !s->unmounting) {
            mc__log_encode_mount(s, b, 0);
            (*nsegs)++;
        }
    }
    pthread_rwlock_unlock(&svc->seg_lock);
    int rc = flush ? flush(ctx, b) : 0;
    for (uint32_t k = 0; !rc && k < svc->nshards; k++) {
        shard *sh = &svc->shards[k];
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc), wall = mc_wall_ms();
        pthread_rwlock_rdlock(&svc->seg_lock);
        for (uint32_t i = 0; i <= sh->mask; i++) {
            obj *o = slot_obj(sh->slots[i]);
            if (!o)
                continue; /* a write in flight goes in too, as a start frame */
            mc__log_encode_put_locked(svc, o, now, wall, b);
            (*nobjs)++;
        }
        pthread_rwlock_unlock(&svc->seg_lock);
        pthread_mutex_unlock(&sh->mu);
        rc = flush ? flush(ctx, b) : 0; /* no index lock held across the write */
    }
    if (!rc) {
        Mclog__SnapshotEnd end = MCLOG__SNAPSHOT_END__INIT;
        end.segments = *nsegs;
        end.objects = *nobjs;
        Mclog__LogRecord er = MCLOG__LOG_RECORD__INIT;
        er.op_case = MCLOG__LOG_RECORD__OP_END;
        er.end = &end;
        frame_plain(b, 0, &er);
        rc = flush ? flush(ctx, b) : 0;
    }
    return rc;
}

static int flush_fd(void *ctx, mc__buf *b)
{
    return write_buf(*(const int *)ctx, b);
}

static int take_snapshot(mc_master_persist *p)
{
    mc_master_service *svc = p->svc;
    pthread_mutex_lock(&p->snap_mu);
    pthread_mutex_lock(&p->log->mu);
    uint64_t last = p->log->last_lsn;
    pthread_mutex_unlock(&p->log->mu);
    if (last == p->snap_lsn) { /* nothing changed since the last one */
        pthread_mutex_unlock(&p->snap_mu);
        return MC_OK;
    }
    uint64_t lsn = mc__oplog_rotate(p->log);
    char *path = mc__persist_path(p->dir, "snapshot-", lsn, ".snap");
    char *tmp = mc__persist_path(p->dir, "snapshot-", lsn, ".snap.tmp");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = fd < 0 ? -errno : 0;
    mc__buf b = {0};
    uint64_t nsegs = 0, nobjs = 0;
    if (!rc)
        rc = snap_encode(svc, lsn, &b, flush_fd, &fd, &nsegs, &nobjs);
    if (!rc && fdatasync(fd) != 0)
        rc = -errno;
    if (fd >= 0)
        close(fd);
    if (!rc && rename(tmp, path) != 0)
        rc = -errno;
    if (!rc)
        rc = mc__fsync_dir(p->dir);
    free(b.p);
    if (rc) {
        unlink(tmp);
        cadd(&p->snapshot_failures, 1);
        mc_log(MC_LOG_ERROR, TAG, "snapshot %s: %s", path, strerror(-rc));
    } else {
        cadd(&p->snapshots, 1);
        p->snap_lsn = lsn;
        mc_log(MC_LOG_INFO, TAG, "snapshot %s: %" PRIu64 " segment(s), %" PRIu64 " object(s)",
               path, nsegs, nobjs);
        retention(p);
    }
    free(tmp);
    free(path);
    pthread_mutex_unlock(&p->snap_mu);
    return rc ? MC_INTERNAL_ERROR : MC_OK;
}

/* ---- HA standby bootstrap (replicate.h; docs/ha.md "Bootstrap from a snapshot") ---- */

uint8_t *mc__snapshot_encode(mc_master_service *svc, mc__oplog *log, size_t *len,
                             uint64_t *lsn, uint64_t *nobjs)
{
    uint64_t l = 0;
    if (log) {
        pthread_mutex_lock(&log->mu);
        l = log->last_lsn; /* every record at or below it mutated the index already */
        pthread_mutex_unlock(&log->mu);
    }
    mc__buf b = {0};
    uint64_t nsegs = 0;
    snap_encode(svc, l, &b, NULL, NULL, &nsegs, nobjs);
    *len = b.len;
    *lsn = l;
    return b.p;
}

/* The structure of a snapshot (snap_step), without building anything. */
static int check_cb(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    return snap_step(ctx, lsn, rec) < 0;
}

typedef struct snap_apply {
    mc_master_service *svc;
    uint64_t objs, dropped;
} snap_apply;

static int live_cb(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    snap_apply *a = ctx;
    (void)lsn;
    int rc = mc_master_log_apply(a->svc, 0, rec);
    if (rec->op_case == MCLOG__LOG_RECORD__OP_PUT) {
        if (rc == MC_OK)
            a->objs++;
        else
            a->dropped++; /* a range taken by another object of the fuzzy copy: the log
                           * after the snapshot's LSN settles it */
    }
    return 0;
}

int mc__snapshot_load_live(mc_master_service *svc, const uint8_t *buf, size_t len,
                           uint64_t *lsn, uint64_t *objs, uint64_t *dropped)
{
    snap_check c = {0};
    if (len < MC_MASTER_LOG_MAGIC_LEN ||
        memcmp(buf, MC_MASTER_SNAP_MAGIC, MC_MASTER_LOG_MAGIC_LEN) ||
        mc_master_log_parse(buf + MC_MASTER_LOG_MAGIC_LEN, len - MC_MASTER_LOG_MAGIC_LEN,
                            check_cb, &c, NULL, NULL) != MC_MASTER_LOG_END ||
        !c.header || !c.end || c.bad)
        return MC_INVALID_PARAMS;
    /* the copy replaces what this master held: every segment goes, with its objects */
    for (;;) {
        mc_master_uuid id = {0, 0};
        bool any = false;
        pthread_rwlock_rdlock(&svc->seg_lock);
        for (uint32_t i = 0; i < svc->nslots && !any; i++) {
            seg *s = svc->segs[i];
            if (s && !s->unmounting) {
                id = s->id;
                any = true;
            }
        }
        pthread_rwlock_unlock(&svc->seg_lock);
        if (!any || mc__seg_unmount_id(svc, id) != MC_OK)
            break;
    }
    snap_apply a = {.svc = svc};
    mc_master_log_parse(buf + MC_MASTER_LOG_MAGIC_LEN, len - MC_MASTER_LOG_MAGIC_LEN, live_cb,
                        &a, NULL, NULL);
    *lsn = c.lsn;
    *objs = a.objs;
    *dropped = a.dropped;
    return MC_OK;
}

int mc_master_persist_snapshot_now(mc_master_persist *p)
{
    return take_snapshot(p);
}

static void *snap_main(void *arg)
{
    mc_master_persist *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts = mc_monotonic_in_ms(p->interval_ms);
        int w = 0;
        while (!p->stop && w != ETIMEDOUT)
            w = pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (p->stop)
            break;
        pthread_mutex_unlock(&p->mu);
        take_snapshot(p);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- start / stop ---- */

/* Deletes the snapshot and log files of dir (a start without restore). */
static void clear_dir(const char *dir)
{
    static const char *const kinds[][2] = {{"snapshot-", ".snap"}, {"snapshot-", ".snap.tmp"},
                                           {"oplog-", ".log"}};
    size_t total = 0;
    for (size_t k = 0; k < 3; k++) {
        fent *v;
        size_t n = list_files(dir, kinds[k][0], kinds[k][1], &v);
        for (size_t i = 0; i < n; i++)
            unlink(v[i].path);
        total += n;
        fents_free(v, n);
    }
    if (total)
        mc_log(MC_LOG_WARN, TAG,
               "%s: %zu snapshot/log file(s) of a previous run deleted (started without "
               "--enable_snapshot_restore: the index starts empty)",
               dir, total);
}

/* Loads the newest valid snapshot and replays the logs into m. Returns the next LSN. */
static uint64_t restore_files(const char *dir, rmap *m, mc_master_restore_info *info)
{
    fent *snaps, *logs;
    size_t ns = list_files(dir, "snapshot-", ".snap", &snaps);
    uint64_t slsn = 0;
    for (size_t i = ns; i-- > 0;) {
        if (load_snapshot(snaps[i].path, m, &slsn) == 0) {
            mc_log(MC_LOG_INFO, TAG, "restore: snapshot %s", snaps[i].path);
            break;
        }
        mc_log(MC_LOG_WARN, TAG, "restore: snapshot %s is not whole: skipped", snaps[i].path);
        slsn = 0;
    }
    fents_free(snaps, ns);
    info->snapshot_lsn = slsn;
    size_t nl = list_files(dir, "oplog-", ".log", &logs);
    log_replay r = {.m = m, .after = slsn};
    bool stopped = false;
    for (size_t i = 0; i < nl; i++) {
        if (stopped) {
            size_t n = strlen(logs[i].path) + 16;
            char *to = mc_xmalloc(n);
            snprintf(to, n, "%s.discarded", logs[i].path);
            rename(logs[i].path, to);
            mc_log(MC_LOG_WARN, TAG, "restore: %s follows a cut: renamed to %s",
                   logs[i].path, to);
            free(to);
            continue;
        }
        if (i + 1 < nl && logs[i + 1].lsn <= slsn + 1)
            continue; /* wholly in the snapshot */
        uint8_t *buf;
        size_t len;
        if (read_file(logs[i].path, &buf, &len))
            continue;
        size_t good = 0;
        mc_master_log_stop why = MC_MASTER_LOG_CORRUPT;
        if (len >= MC_MASTER_LOG_MAGIC_LEN &&
            !memcmp(buf, MC_MASTER_LOG_MAGIC, MC_MASTER_LOG_MAGIC_LEN))
            why = mc_master_log_parse_after(buf + MC_MASTER_LOG_MAGIC_LEN,
                                            len - MC_MASTER_LOG_MAGIC_LEN, slsn, log_cb, &r,
                                            &good, NULL);
        free(buf);
        if (why == MC_MASTER_LOG_END)
            continue;
        stopped = true;
        char snap_what[48]; /* what the lines below say was restored before the cut */
        if (slsn)
            snprintf(snap_what, sizeof snap_what, "snapshot LSN %" PRIu64, slsn);
        else
            snprintf(snap_what, sizeof snap_what, "no snapshot");
        if (why == MC_MASTER_LOG_STOPPED) {
            /* m->lsn is 0 when no record was applied: say what was restored instead */
            mc_log(MC_LOG_ERROR, TAG,
                   "restore: %s: records missing or malformed after LSN %" PRIu64
                   ": the replay stops there (restored: %s, %" PRIu64
                   " log record(s) applied)",
                   logs[i].path, m->lsn > slsn ? m->lsn : slsn, snap_what, m->records);
            continue;
        }
        size_t keep = len >= MC_MASTER_LOG_MAGIC_LEN ? MC_MASTER_LOG_MAGIC_LEN + good : 0;
        info->truncated_bytes += len - keep;
        mc_log(MC_LOG_WARN, TAG,
               "restore: %s: %s tail of %zu byte(s) after LSN %" PRIu64 ": truncated "
               "(restored: %s, %" PRIu64 " log record(s) applied)",
               logs[i].path, why == MC_MASTER_LOG_TORN ? "a torn" : "a corrupt", len - keep,
               m->lsn > slsn ? m->lsn : slsn, snap_what, m->records);
        if (truncate(logs[i].path, (off_t)keep) != 0)
            mc_log(MC_LOG_ERROR, TAG, "restore: truncate %s: %s", logs[i].path,
                   strerror(errno));
    }
    fents_free(logs, nl);
    info->records = m->records;
    uint64_t last = m->lsn > slsn ? m->lsn : slsn;
    info->last_lsn = last;
    return last + 1;
}

int mc_master_persist_start(mc_master_service *svc, const mc_master_persist_opts *opts,
                            mc_master_persist **out, mc_master_restore_info *info,
                            char *err, size_t errlen)
{
    mc_master_restore_info scratch;
    if (!info)
        info = &scratch;
    memset(info, 0, sizeof(*info));
    if (!svc || !opts || !out || !opts->dir || !*opts->dir || opts->interval_s == 0 ||
        opts->retention == 0 || opts->sync > MC_MASTER_LOG_SYNC_NONE) {
        snprintf(err, errlen, "invalid snapshot options (a directory, interval >= 1 s and "
                              "retention >= 1 are needed)");
        return MC_INVALID_PARAMS;
    }
    if (mkdir(opts->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: %s", opts->dir, strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    uint64_t next = 1;
    if (opts->restore) {
        rmap m = {.svc = svc};
        next = restore_files(opts->dir, &m, info);
        materialise(svc, &m, info);
        rmap_free(&m);
        mc_log(MC_LOG_INFO, TAG,
               "restore from %s: snapshot LSN %" PRIu64 ", %" PRIu64 " log record(s) to LSN "
               "%" PRIu64 ": %" PRIu64 " segment(s) and %" PRIu64 " object(s) await their "
               "owners (%" PRIu64 " dropped, %" PRIu64 " unfinished write range(s) "
               "quarantined, %" PRIu64 " torn byte(s) cut)",
               opts->dir, info->snapshot_lsn, info->records, info->last_lsn, info->segments,
               info->objects, info->dropped, info->quarantined, info->truncated_bytes);
    } else {
        clear_dir(opts->dir);
    }
    mc_master_persist *p = mc_xcalloc(1, sizeof(*p));
    p->svc = svc;
    p->dir = mc_xstrdup(opts->dir);
    p->interval_ms = opts->interval_s * 1000;
    p->retention = opts->retention;
    p->snap_lsn = UINT64_MAX;
    pthread_mutex_init(&p->snap_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    p->log = mc__oplog_open(svc, opts->dir, next, opts->sync, err, errlen);
    if (!p->log)
        goto fail;
    svc->oplog = p->log; /* from here every mutation is logged */
    if (opts->restore) /* the old master's tasks (inflight.c; logs their failures) */
        mc_master_log_promote(svc);
    if (pthread_create(&p->thr, NULL, snap_main, p) != 0) {
        svc->oplog = NULL;
        mc__oplog_close(p->log);
        snprintf(err, errlen, "cannot start the snapshot thread");
        goto fail;
    }
    if (opts->restore) /* the owners' TTL runs from now, not from when the restore began */
        mc__clients_refresh(svc, now_ms(svc));
    *out = p;
    return MC_OK;
fail:
    pthread_mutex_destroy(&p->snap_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->dir);
    free(p);
    return MC_INTERNAL_ERROR;
}

void mc_master_persist_get_stats(mc_master_persist *p, mc_master_persist_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!p)
        return;
    mc__oplog *l = p->log;
    out->records = cget(&l->records);
    out->bytes = cget(&l->bytes);
    out->groups = cget(&l->groups);
    out->fsyncs = cget(&l->fsyncs);
    out->write_errors = cget(&l->write_errors);
    out->deferred = cget(&l->deferred);
    out->snapshots = cget(&p->snapshots);
    out->snapshot_failures = cget(&p->snapshot_failures);
    pthread_mutex_lock(&l->mu);
    out->last_lsn = l->last_lsn;
    out->durable_lsn = l->durable;
    pthread_mutex_unlock(&l->mu);
}

void mc_master_persist_stop(mc_master_persist *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thr, NULL);
    p->svc->oplog = NULL;
    mc__oplog_close(p->log);
    pthread_mutex_destroy(&p->snap_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->dir);
    free(p);
}
