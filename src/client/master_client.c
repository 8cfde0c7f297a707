/* master_client.c: see master_client.h. */
#include "client/master_client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "master.pb-c.h"
#include "rpc/arena.h"
#include "rpc/limits.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "net/frame.h"
#include "net/sock.h"

#define TAG "master-client"

/* Requests in flight on one connection during a split batch. */
#define PIPELINE_WINDOW 8u
/* Bytes of keys per request of a split batch (well under MC_MASTER_RPC_MAX_BODY). */
#define CHUNK_KEY_BYTES (4u << 20)
#define STR_MAX (MC_MASTER_NAME_MAX - 1)
/* An idle connection is checked for a close by the master after this many ms idle. */
#define STALE_CHECK_IDLE_MS 10u

typedef struct conn_slot {
    int fd;           /* -1 when closed; owned by whoever holds the slot (busy) */
    bool busy;        /* guarded by the client lock */
    uint64_t next_id; /* request ids on this connection */
    uint64_t last_ms; /* monotonic ms of the last completed call */
    mc__arena ar;     /* reply decoding */
    ProtobufCAllocator alloc;
    uint8_t *sbuf;    /* one packed request */
    size_t scap;
    uint8_t *rbuf;    /* one reply body */
    size_t rcap;
} conn_slot;

struct mc_master_client {
    char *address;
    char host[MC_MASTER_NAME_MAX];
    uint16_t port;
    uint32_t timeout_ms, connect_timeout_ms, max_reply;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a slot became idle */
    unsigned n;
    conn_slot *slots;
};

/* ---- connections ---- */

static int transport_code(int err)
{
    return err == -ETIMEDOUT ? MC_RPC_TIMEOUT : MC_RPC_FAIL;
}

static void slot_close(conn_slot *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
}

/* An idle connection has nothing to read: any event means the master closed it (or
 * sent something unexpected); either way it cannot be used. */
static bool slot_stale(const conn_slot *s)
{
    struct pollfd p = {.fd = s->fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) != 0;
}

static int slot_connect(mc_master_client *c, conn_slot *s, uint64_t deadline)
{
    uint64_t left = mc_ms_left(deadline);
    if (left == 0)
        return MC_RPC_TIMEOUT;
    uint64_t t = left < c->connect_timeout_ms ? left : c->connect_timeout_ms;
    int fd = mc_sock_connect_tcp(c->host, c->port, (int)t);
    if (fd < 0) {
        mc_log(MC_LOG_DEBUG, TAG, "connect %s: %s", c->address, strerror(-fd));
        return transport_code(fd);
    }
    s->fd = fd;
    return MC_OK;
}

static void abs_timespec(uint64_t deadline_ms, struct timespec *ts)
{
    ts->tv_sec = (time_t)(deadline_ms / 1000);
    ts->tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
}

/* Takes an idle slot (connected if possible), waiting until deadline; connects it when
 * needed. Returns MC_OK with *out, or a transport code. */
static int acquire(mc_master_client *c, uint64_t deadline, conn_slot **out)
{
    conn_slot *s = NULL;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        conn_slot *idle = NULL;
        for (unsigned i = 0; i < c->n; i++) {
            if (c->slots[i].busy)
                continue;
            if (c->slots[i].fd >= 0) {
                s = &c->slots[i];
                break;
            }
            if (!idle)
                idle = &c->slots[i];
        }
        if (!s)
            s = idle;
        if (s)
            break;
        struct timespec ts;
        abs_timespec(deadline, &ts);
        if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT) {
            pthread_mutex_unlock(&c->lock);
            return MC_RPC_TIMEOUT;
        }
    }
    s->busy = true;
    pthread_mutex_unlock(&c->lock);
    /* Checked only after a pause: a master restart takes longer than that, and the poll
     * would cost a syscall per call in a busy loop. */
    if (s->fd >= 0 && mc_now_ms() - s->last_ms >= STALE_CHECK_IDLE_MS && slot_stale(s))
        slot_close(s);
    if (s->fd < 0) {
        int rc = slot_connect(c, s, deadline);
        if (rc != MC_OK) {
            pthread_mutex_lock(&c->lock);
            s->busy = false;
            pthread_cond_signal(&c->cond);
            pthread_mutex_unlock(&c->lock);
            return rc;
        }
    }
    *out = s;
    return MC_OK;
}

static void release(mc_master_client *c, conn_slot *s, bool ok)
{
    if (!ok)
        slot_close(s);
    s->last_ms = mc_now_ms();
    mc__arena_reset(&s->ar);
    pthread_mutex_lock(&c->lock);
    s->busy = false;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static void grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    free(*buf);
    *buf = malloc(n);
    if (!*buf)
        abort();
    *cap = n;
}

/* ---- the call machinery ---- */

/* Builds request i of a call (borrowed until the next build). */
typedef const ProtobufCMessage *(*build_fn)(void *ctx, size_t i);
/* Consumes reply i: frame_status != 0 means no body (reply NULL). Returns MC_OK, or
 * MC_RPC_FAIL for a reply whose contents break the protocol. */
typedef int (*reply_fn)(void *ctx, size_t i, int frame_status, const ProtobufCMessage *reply);

static int send_one(mc_master_client *c, conn_slot *s, uint16_t op, const ProtobufCMessage *m,
                    uint64_t id, uint64_t deadline)
{
    (void)c;
    size_t len = protobuf_c_message_get_packed_size(m);
    if (len > MC_MASTER_RPC_MAX_BODY)
        return MC_INVALID_PARAMS;
    grow(&s->sbuf, &s->scap, MC_FRAME_HEADER_SIZE + len);
    mc_frame_header h = {.version = MC_FRAME_VERSION, .opcode = op, .body_len = (uint32_t)len,
                         .request_id = id};
    mc_frame_encode_header(&h, s->sbuf);
    protobuf_c_message_pack(m, s->sbuf + MC_FRAME_HEADER_SIZE);
    int rc = mc_sock_send_all(s->fd, s->sbuf, MC_FRAME_HEADER_SIZE + len, deadline);
    return rc < 0 ? transport_code(rc) : MC_OK;
}

static int recv_one(mc_master_client *c, conn_slot *s, uint16_t op, uint64_t id,
                    const ProtobufCMessageDescriptor *desc, uint64_t deadline, int *frame_status,
                    const ProtobufCMessage **reply)
{
    uint8_t hb[MC_FRAME_HEADER_SIZE];
    int rc = mc_sock_recv_all(s->fd, hb, sizeof hb, deadline);
    if (rc < 0)
        return transport_code(rc);
    mc_frame_header h;
    if (mc_frame_decode_header(hb, c->max_reply, &h) != 0 || !(h.flags & MC_FRAME_REPLY) ||
        h.opcode != op || h.request_id != id) {
        mc_log(MC_LOG_WARN, TAG, "malformed reply from %s (opcode %u, id %llu)", c->address,
               (unsigned)h.opcode, (unsigned long long)h.request_id);
        return MC_RPC_FAIL;
    }
    grow(&s->rbuf, &s->rcap, h.body_len ? h.body_len : 1);
    if (h.body_len) {
        rc = mc_sock_recv_all(s->fd, s->rbuf, h.body_len, deadline);
        if (rc < 0)
            return transport_code(rc);
    }
    *frame_status = h.status;
    *reply = NULL;
    if (h.status != 0)
        return MC_OK;
    mc__arena_reset(&s->ar);
    s->ar.limit = 4u * c->max_reply;
    *reply = protobuf_c_message_unpack(desc, &s->alloc, h.body_len, s->rbuf);
    s->ar.limit = 0;
    if (!*reply) {
        mc_log(MC_LOG_WARN, TAG, "undecodable reply from %s (opcode %u)", c->address,
               (unsigned)op);
        return MC_RPC_FAIL;
    }
    return MC_OK;
}

/* Runs nreq requests of one opcode on one connection, pipelined (at most
 * PIPELINE_WINDOW outstanding), handing each reply to on_reply in order. Returns MC_OK
 * (results went to on_reply), or a transport / local code for the whole call. */
static int rpc_run(mc_master_client *c, uint16_t op, size_t nreq, build_fn build,
                   const ProtobufCMessageDescriptor *desc, reply_fn on_reply, void *ctx)
{
    uint64_t deadline = mc_deadline_ms(c->timeout_ms);
    conn_slot *s;
    int rc = acquire(c, deadline, &s);
    if (rc != MC_OK)
        return rc;
    uint64_t first_id = s->next_id;
    s->next_id += nreq;
    size_t sent = 0, done = 0;
    bool ok = true;
    rc = MC_OK;
    while (done < nreq) {
        while (sent < nreq && sent - done < PIPELINE_WINDOW) {
            rc = send_one(c, s, op, build(ctx, sent), first_id + sent, deadline);
            if (rc != MC_OK)
                goto out;
            sent++;
        }
        int fst;
        const ProtobufCMessage *reply;
        rc = recv_one(c, s, op, first_id + done, desc, deadline, &fst, &reply);
        if (rc != MC_OK)
            goto out;
        rc = on_reply(ctx, done, fst, reply);
        if (rc != MC_OK)
            goto out;
        done++;
    }
out:
    if (rc != MC_OK && sent > done)
        ok = false; /* replies still in flight: the connection is out of step */
    if (rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT)
        ok = false;
    release(c, s, ok);
    return rc;
}

/* Single request, single reply: the reply's status field is read by on_reply. */
typedef struct single_ctx {
    const ProtobufCMessage *req;
    int (*take)(void *user, const ProtobufCMessage *reply); /* returns the RPC's code */
    void *user;
    int result;
} single_ctx;

static const ProtobufCMessage *single_build(void *ctx, size_t i)
{
    (void)i;
    return ((single_ctx *)ctx)->req;
}

static int single_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *reply)
{
    (void)i;
    single_ctx *sc = ctx;
    if (fst != 0) {
        sc->result = fst;
        return MC_OK;
    }
    sc->result = sc->take(sc->user, reply);
    return sc->result == MC_RPC_FAIL ? MC_RPC_FAIL : MC_OK;
}

static int rpc_single(mc_master_client *c, uint16_t op, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *desc,
                      int (*take)(void *user, const ProtobufCMessage *reply), void *user)
{
    single_ctx sc = {req, take, user, MC_RPC_FAIL};
    int rc = rpc_run(c, op, 1, single_build, desc, single_reply, &sc);
    return rc != MC_OK ? rc : sc.result;
}

/* ---- conversions ---- */

static void uuid_pb(Mcrpc__Uuid *u, mc_master_uuid id)
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

/* A reply's segment table (borrowed from the decoded reply). */
typedef struct segtab {
    Mcrpc__SegmentRef **v;
    size_t n;
} segtab;

/* Checks every entry once: the strings fit mc_master_replica's fields. */
static int segtab_check(Mcrpc__SegmentRef **v, size_t n, segtab *t)
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
static int replicas_from_pb(Mcrpc__ReplicaDescriptor **v, size_t n, uint64_t lease,
                            const segtab *t, mc_master_replica_list *out)
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
static int config_pb(const mc_master_put_config *cfg, Mcrpc__ReplicateConfig *pc)
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
        if (!cfg->preferred_segments[i] || !str_ok(cfg->preferred_segments[i], STR_MAX))
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

static int segment_pb(const mc_master_segment *s, Mcrpc__Segment *ps, Mcrpc__Uuid *id)
{
    mcrpc__segment__init(ps);
    if (!s || !s->name || !str_ok(s->name, STR_MAX) || !str_ok(s->te_endpoint, STR_MAX) ||
        !str_ok(s->protocol, MC_MASTER_PROTOCOL_MAX - 1) || !str_ok(s->host_id, STR_MAX))
        return MC_INVALID_PARAMS;
    uuid_pb(id, s->id);
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
static ProtobufCBinaryData key_pb(const void *key, size_t len)
{
    ProtobufCBinaryData b = {0, NULL};
    if (key && len <= MC_MASTER_KEY_MAX) {
        b.len = len;
        b.data = (uint8_t *)key;
    }
    return b;
}

static bool key_ok(const void *key, size_t len)
{
    return (key || len == 0) && len <= MC_MASTER_KEY_MAX;
}

/* ---- create / destroy ---- */

static uint32_t env_timeout_ms(void)
{
    const char *e = getenv("MC_RPC_TIMEOUT_MS");
    if (!e || !*e)
        return MC_MASTER_CLIENT_DEFAULT_TIMEOUT_MS;
    char *end;
    errno = 0;
    unsigned long v = strtoul(e, &end, 10);
    if (errno || *end || v == 0 || v > 86400000ul) {
        mc_log(MC_LOG_WARN, TAG, "ignoring MC_RPC_TIMEOUT_MS=%s (want 1..86400000 ms)", e);
        return MC_MASTER_CLIENT_DEFAULT_TIMEOUT_MS;
    }
    return (uint32_t)v;
}

int mc_master_client_create(const char *address, const mc_master_client_opts *opts,
                            mc_master_client **out)
{
    mc_master_client_opts o = {0};
    if (opts)
        o = *opts;
    if (!address || !out || o.max_conns > MC_MASTER_CLIENT_MAX_CONNS)
        return MC_INVALID_PARAMS;
    mc_master_client *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    if (mc_sock_parse_hostport(address, c->host, sizeof c->host, &c->port,
                               MC_MASTER_DEFAULT_PORT) != 0) {
        free(c);
        return MC_INVALID_PARAMS;
    }
    c->address = strdup(address);
    if (!c->address)
        abort();
    c->timeout_ms = o.rpc_timeout_ms ? o.rpc_timeout_ms : env_timeout_ms();
    c->connect_timeout_ms =
        o.connect_timeout_ms ? o.connect_timeout_ms : MC_MASTER_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS;
    c->max_reply = o.max_reply_body ? o.max_reply_body : MC_MASTER_RPC_MAX_REPLY_BODY;
    c->n = o.max_conns ? o.max_conns : MC_MASTER_CLIENT_DEFAULT_MAX_CONNS;
    c->slots = calloc(c->n, sizeof *c->slots);
    if (!c->slots)
        abort();
    for (unsigned i = 0; i < c->n; i++) {
        c->slots[i].fd = -1;
        c->slots[i].next_id = 1;
        c->slots[i].alloc = mc__arena_allocator(&c->slots[i].ar);
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = slot_connect(c, &c->slots[0], mc_deadline_ms(c->timeout_ms));
    if (rc != MC_OK) {
        mc_master_client_destroy(c);
        return rc;
    }
    *out = c;
    return MC_OK;
}

void mc_master_client_destroy(mc_master_client *c)
{
    if (!c)
        return;
    for (unsigned i = 0; i < c->n; i++) {
        slot_close(&c->slots[i]);
        mc__arena_destroy(&c->slots[i].ar);
        free(c->slots[i].sbuf);
        free(c->slots[i].rbuf);
    }
    free(c->slots);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c->address);
    free(c);
}

const char *mc_master_client_address(const mc_master_client *c)
{
    return c->address;
}

/* ---- service ---- */

static int take_ping(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__PingReply *r = (const Mcrpc__PingReply *)m;
    mc_master_ping_result *out = user;
    out->view_version = r->view_version;
    out->client_status = (int)r->client_status;
    return r->status;
}

int mc_master_client_ping(mc_master_client *c, mc_master_uuid client_id,
                          mc_master_ping_result *out)
{
    if (out) {
        out->view_version = 0;
        out->client_status = MC_MASTER_CLIENT_UNDEFINED;
    }
    if (!c || !out)
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid id;
    uuid_pb(&id, client_id);
    Mcrpc__PingRequest req = MCRPC__PING_REQUEST__INIT;
    req.client_id = &id;
    out->view_version = 0;
    out->client_status = MC_MASTER_CLIENT_UNDEFINED;
    return rpc_single(c, MCRPC__OPCODE__OP_PING, &req.base, &mcrpc__ping_reply__descriptor,
                      take_ping, out);
}

typedef struct buf_out {
    char *buf;
    size_t len;
} buf_out;

static int take_ready(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__ServiceReadyReply *r = (const Mcrpc__ServiceReadyReply *)m;
    buf_out *b = user;
    if (b->buf && b->len) {
        snprintf(b->buf, b->len, "%s", r->version ? r->version : "");
    }
    return r->status;
}

int mc_master_client_service_ready(mc_master_client *c, char *version, size_t len)
{
    if (!c)
        return MC_INVALID_PARAMS;
    if (version && len)
        version[0] = '\0';
    Mcrpc__ServiceReadyRequest req = MCRPC__SERVICE_READY_REQUEST__INIT;
    buf_out b = {version, len};
    return rpc_single(c, MCRPC__OPCODE__OP_SERVICE_READY, &req.base,
                      &mcrpc__service_ready_reply__descriptor, take_ready, &b);
}

static int take_status(void *user, const ProtobufCMessage *m)
{
    (void)user;
    return ((const Mcrpc__StatusReply *)m)->status;
}

/* ---- segments ---- */

int mc_master_client_mount_segment(mc_master_client *c, const mc_master_segment *seg,
                                   mc_master_uuid client_id)
{
    if (!c || !seg)
        return MC_INVALID_PARAMS;
    Mcrpc__Segment ps;
    Mcrpc__Uuid sid, cid;
    if (segment_pb(seg, &ps, &sid) != MC_OK)
        return MC_INVALID_PARAMS;
    uuid_pb(&cid, client_id);
    Mcrpc__MountSegmentRequest req = MCRPC__MOUNT_SEGMENT_REQUEST__INIT;
    req.segment = &ps;
    req.client_id = &cid;
    return rpc_single(c, MCRPC__OPCODE__OP_MOUNT_SEGMENT, &req.base,
                      &mcrpc__status_reply__descriptor, take_status, NULL);
}

/* Remount: segments split into requests of at most MC_MASTER_RPC_MAX_BATCH. */
typedef struct remount_ctx {
    Mcrpc__RemountSegmentRequest req;
    Mcrpc__Segment **ptrs;
    size_t n;
    int first_err;
} remount_ctx;

static const ProtobufCMessage *remount_build(void *ctx, size_t i)
{
    remount_ctx *rc = ctx;
    size_t off = i * MC_MASTER_RPC_MAX_BATCH;
    size_t k = rc->n - off < MC_MASTER_RPC_MAX_BATCH ? rc->n - off : MC_MASTER_RPC_MAX_BATCH;
    rc->req.segments = rc->ptrs + off;
    rc->req.n_segments = k;
    return &rc->req.base;
}

static int remount_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *m)
{
    (void)i;
    remount_ctx *rc = ctx;
    int st = fst ? fst : ((const Mcrpc__StatusReply *)m)->status;
    if (st != MC_OK && rc->first_err == MC_OK)
        rc->first_err = st;
    return MC_OK;
}

int mc_master_client_remount_segments(mc_master_client *c, const mc_master_segment *segs,
                                      size_t n, mc_master_uuid client_id)
{
    if (!c || (n && !segs) || n > 65536)
        return MC_INVALID_PARAMS;
    Mcrpc__Segment *ps = calloc(n ? n : 1, sizeof *ps);
    Mcrpc__Uuid *ids = calloc(n ? n : 1, sizeof *ids);
    Mcrpc__Segment **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!ps || !ids || !ptrs)
        abort();
    int rc = MC_OK;
    for (size_t i = 0; i < n && rc == MC_OK; i++) {
        rc = segment_pb(&segs[i], &ps[i], &ids[i]);
        ptrs[i] = &ps[i];
    }
    if (rc == MC_OK) {
        Mcrpc__Uuid cid;
        uuid_pb(&cid, client_id);
        remount_ctx ctx = {.ptrs = ptrs, .n = n, .first_err = MC_OK};
        mcrpc__remount_segment_request__init(&ctx.req);
        ctx.req.client_id = &cid;
        size_t nreq = n ? (n + MC_MASTER_RPC_MAX_BATCH - 1) / MC_MASTER_RPC_MAX_BATCH : 1;
        rc = rpc_run(c, MCRPC__OPCODE__OP_REMOUNT_SEGMENT, nreq, remount_build,
                     &mcrpc__status_reply__descriptor, remount_reply, &ctx);
        if (rc == MC_OK)
            rc = ctx.first_err;
    }
    free(ps);
    free(ids);
    free(ptrs);
    return rc;
}

int mc_master_client_unmount_segment(mc_master_client *c, mc_master_uuid segment_id,
                                     mc_master_uuid client_id)
{
    if (!c)
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid sid, cid;
    uuid_pb(&sid, segment_id);
    uuid_pb(&cid, client_id);
    Mcrpc__UnmountSegmentRequest req = MCRPC__UNMOUNT_SEGMENT_REQUEST__INIT;
    req.segment_id = &sid;
    req.client_id = &cid;
    return rpc_single(c, MCRPC__OPCODE__OP_UNMOUNT_SEGMENT, &req.base,
                      &mcrpc__status_reply__descriptor, take_status, NULL);
}

/* ---- writes ---- */

/* Decodes a single-key start/get reply into out: its status when not MC_OK (out emptied),
 * else MC_RPC_FAIL for a bad segment table or replica, else MC_OK. */
static int single_from_pb(int status, Mcrpc__ReplicaDescriptor **v, size_t n, uint64_t lease,
                          Mcrpc__SegmentRef **segs, size_t n_segs, mc_master_replica_list *out)
{
    if (status != MC_OK) {
        out->n = 0;
        return status;
    }
    segtab t;
    int rc = segtab_check(segs, n_segs, &t);
    if (rc == MC_OK)
        rc = replicas_from_pb(v, n, lease, &t, out);
    return rc != MC_OK ? rc : status;
}

static int take_put_start(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__PutStartReply *r = (const Mcrpc__PutStartReply *)m;
    return single_from_pb(r->status, r->replicas, r->n_replicas, 0, r->segments,
                          r->n_segments, user);
}

static int start_common(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                        const void *key, size_t key_len, uint64_t size,
                        const mc_master_put_config *cfg, mc_master_replica_list *out)
{
    if (out) {
        out->n = 0;
        out->lease_ttl_ms = 0;
    }
    if (!c || !out || !key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    Mcrpc__ReplicateConfig pc;
    if (config_pb(cfg, &pc) != MC_OK)
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid cid;
    uuid_pb(&cid, client_id);
    Mcrpc__PutStartRequest req = MCRPC__PUT_START_REQUEST__INIT;
    req.client_id = &cid;
    req.key = key_pb(key, key_len);
    req.size = size;
    req.config = &pc;
    return rpc_single(c, op, &req.base, &mcrpc__put_start_reply__descriptor, take_put_start,
                      out);
}

int mc_master_client_put_start(mc_master_client *c, mc_master_uuid client_id, const void *key,
                               size_t key_len, uint64_t size, const mc_master_put_config *cfg,
                               mc_master_replica_list *out)
{
    return start_common(c, MCRPC__OPCODE__OP_PUT_START, client_id, key, key_len, size, cfg,
                        out);
}

int mc_master_client_upsert_start(mc_master_client *c, mc_master_uuid client_id,
                                  const void *key, size_t key_len, uint64_t size,
                                  const mc_master_put_config *cfg, mc_master_replica_list *out)
{
    return start_common(c, MCRPC__OPCODE__OP_UPSERT_START, client_id, key, key_len, size, cfg,
                        out);
}

static int key_common(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                      const void *key, size_t key_len, bool force)
{
    if (!c || !key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    Mcrpc__Uuid cid;
    uuid_pb(&cid, client_id);
    Mcrpc__KeyRequest req = MCRPC__KEY_REQUEST__INIT;
    req.client_id = &cid;
    req.key = key_pb(key, key_len);
    req.force = force;
    return rpc_single(c, op, &req.base, &mcrpc__status_reply__descriptor, take_status, NULL);
}

int mc_master_client_put_end(mc_master_client *c, mc_master_uuid client_id, const void *key,
                             size_t key_len)
{
    return key_common(c, MCRPC__OPCODE__OP_PUT_END, client_id, key, key_len, false);
}

int mc_master_client_put_revoke(mc_master_client *c, mc_master_uuid client_id,
                                const void *key, size_t key_len)
{
    return key_common(c, MCRPC__OPCODE__OP_PUT_REVOKE, client_id, key, key_len, false);
}

int mc_master_client_upsert_end(mc_master_client *c, mc_master_uuid client_id,
                                const void *key, size_t key_len)
{
    return key_common(c, MCRPC__OPCODE__OP_UPSERT_END, client_id, key, key_len, false);
}

int mc_master_client_upsert_revoke(mc_master_client *c, mc_master_uuid client_id,
                                   const void *key, size_t key_len)
{
    return key_common(c, MCRPC__OPCODE__OP_UPSERT_REVOKE, client_id, key, key_len, false);
}

/* ---- batches: keys split into chunks of <= MC_MASTER_RPC_MAX_BATCH items and
 * CHUNK_KEY_BYTES of key bytes, pipelined on one connection ---- */

typedef struct chunking {
    size_t n;        /* items */
    size_t nchunks;
    size_t *starts;  /* nchunks + 1 offsets */
    ProtobufCBinaryData *keys;
} chunking;

static void chunking_init(chunking *ch, const mc_master_key *keys, size_t n)
{
    ch->n = n;
    ch->keys = calloc(n ? n : 1, sizeof *ch->keys);
    ch->starts = calloc(n + 2, sizeof *ch->starts);
    if (!ch->keys || !ch->starts)
        abort();
    size_t nc = 0, items = 0, bytes = 0;
    ch->starts[0] = 0;
    for (size_t i = 0; i < n; i++) {
        ch->keys[i] = key_pb(keys[i].data, keys[i].len);
        if (items == MC_MASTER_RPC_MAX_BATCH ||
            (items && bytes + ch->keys[i].len > CHUNK_KEY_BYTES)) {
            ch->starts[++nc] = i;
            items = bytes = 0;
        }
        items++;
        bytes += ch->keys[i].len;
    }
    if (n == 0)
        nc = 0; /* no request at all */
    else
        ch->starts[++nc] = n;
    ch->nchunks = nc;
}

static void chunking_free(chunking *ch)
{
    free(ch->keys);
    free(ch->starts);
}

static size_t chunk_len(const chunking *ch, size_t i)
{
    return ch->starts[i + 1] - ch->starts[i];
}

static bool keys_ok(const mc_master_key *keys, size_t n)
{
    return n == 0 || keys;
}

static void fill_status(int *st, size_t n, int code)
{
    for (size_t i = 0; i < n; i++)
        st[i] = code;
}

static int first_failure(const int *st, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (st[i] != MC_OK)
            return st[i];
    return MC_OK;
}

/* Decodes the k per-key items of a batch start/get reply into st[0..k) and outs[0..k)
 * (the lease is taken from each item only when with_lease). MC_RPC_FAIL when the reply
 * has the wrong item count, a bad segment table or a bad replica. */
static int batch_items_from_pb(Mcrpc__ReplicaList **items, size_t n_items,
                               Mcrpc__SegmentRef **segs, size_t n_segs, size_t k,
                               bool with_lease, int *st, mc_master_replica_list *outs)
{
    segtab t;
    if (n_items != k || segtab_check(segs, n_segs, &t) != MC_OK)
        return MC_RPC_FAIL;
    for (size_t j = 0; j < k; j++) {
        const Mcrpc__ReplicaList *it = items[j];
        st[j] = it->status;
        outs[j].n = 0;
        outs[j].lease_ttl_ms = 0;
        if (it->status == MC_OK &&
            replicas_from_pb(it->replicas, it->n_replicas, with_lease ? it->lease_ttl_ms : 0,
                             &t, &outs[j]) != MC_OK)
            return MC_RPC_FAIL;
    }
    return MC_OK;
}

/* batch put/upsert start */
typedef struct bstart_ctx {
    chunking ch;
    Mcrpc__BatchPutStartRequest req;
    const uint64_t *sizes;
    mc_master_replica_list *outs;
    int *st;
} bstart_ctx;

static const ProtobufCMessage *bstart_build(void *ctx, size_t i)
{
    bstart_ctx *b = ctx;
    size_t off = b->ch.starts[i], k = chunk_len(&b->ch, i);
    b->req.keys = b->ch.keys + off;
    b->req.n_keys = k;
    b->req.sizes = (uint64_t *)b->sizes + off;
    b->req.n_sizes = k;
    return &b->req.base;
}

static int bstart_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *m)
{
    bstart_ctx *b = ctx;
    size_t off = b->ch.starts[i], k = chunk_len(&b->ch, i);
    if (fst) {
        fill_status(b->st + off, k, fst);
        return MC_OK;
    }
    const Mcrpc__BatchPutStartReply *r = (const Mcrpc__BatchPutStartReply *)m;
    return batch_items_from_pb(r->items, r->n_items, r->segments, r->n_segments, k, false,
                               b->st + off, b->outs + off);
}

static int batch_start_common(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                              const mc_master_key *keys, const uint64_t *sizes, size_t n,
                              const mc_master_put_config *cfg, mc_master_replica_list *outs,
                              int *statuses)
{
    if (!c || (n && (!keys_ok(keys, n) || !sizes || !outs || !statuses)))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        outs[i].n = 0;
    Mcrpc__ReplicateConfig pc;
    if (config_pb(cfg, &pc) != MC_OK) {
        fill_status(statuses, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    if (n == 0)
        return MC_OK;
    Mcrpc__Uuid cid;
    uuid_pb(&cid, client_id);
    bstart_ctx b = {.sizes = sizes, .outs = outs, .st = statuses};
    chunking_init(&b.ch, keys, n);
    mcrpc__batch_put_start_request__init(&b.req);
    b.req.client_id = &cid;
    b.req.config = &pc;
    int rc = rpc_run(c, op, b.ch.nchunks, bstart_build, &mcrpc__batch_put_start_reply__descriptor,
                     bstart_reply, &b);
    chunking_free(&b.ch);
    if (rc != MC_OK) {
        fill_status(statuses, n, rc);
        return rc;
    }
    return first_failure(statuses, n);
}

int mc_master_client_batch_put_start(mc_master_client *c, mc_master_uuid client_id,
                                     const mc_master_key *keys, const uint64_t *sizes, size_t n,
                                     const mc_master_put_config *cfg,
                                     mc_master_replica_list *outs, int *statuses)
{
    return batch_start_common(c, MCRPC__OPCODE__OP_BATCH_PUT_START, client_id, keys, sizes, n,
                              cfg, outs, statuses);
}

int mc_master_client_batch_upsert_start(mc_master_client *c, mc_master_uuid client_id,
                                        const mc_master_key *keys, const uint64_t *sizes,
                                        size_t n, const mc_master_put_config *cfg,
                                        mc_master_replica_list *outs, int *statuses)
{
    return batch_start_common(c, MCRPC__OPCODE__OP_BATCH_UPSERT_START, client_id, keys, sizes,
                              n, cfg, outs, statuses);
}

/* batch key ops with a BatchStatusReply (end / revoke / remove) or BatchExistKeyReply */
typedef struct bkeys_ctx {
    chunking ch;
    Mcrpc__BatchKeysRequest req;
    int *st;
    bool exist; /* reply is BatchExistKeyReply */
} bkeys_ctx;

static const ProtobufCMessage *bkeys_build(void *ctx, size_t i)
{
    bkeys_ctx *b = ctx;
    b->req.keys = b->ch.keys + b->ch.starts[i];
    b->req.n_keys = chunk_len(&b->ch, i);
    return &b->req.base;
}

static int bkeys_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *m)
{
    bkeys_ctx *b = ctx;
    size_t off = b->ch.starts[i], k = chunk_len(&b->ch, i);
    if (fst) {
        fill_status(b->st + off, k, fst);
        return MC_OK;
    }
    size_t n;
    const int32_t *v;
    if (b->exist) {
        const Mcrpc__BatchExistKeyReply *r = (const Mcrpc__BatchExistKeyReply *)m;
        n = r->n_results;
        v = r->results;
    } else {
        const Mcrpc__BatchStatusReply *r = (const Mcrpc__BatchStatusReply *)m;
        n = r->n_statuses;
        v = r->statuses;
    }
    if (n != k)
        return MC_RPC_FAIL;
    for (size_t j = 0; j < k; j++)
        b->st[off + j] = v[j];
    return MC_OK;
}

static int batch_keys_common(mc_master_client *c, uint16_t op, mc_master_uuid client_id,
                             const mc_master_key *keys, size_t n, bool force, int *statuses,
                             bool exist)
{
    if (!c || (n && (!keys_ok(keys, n) || !statuses)))
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    Mcrpc__Uuid cid;
    uuid_pb(&cid, client_id);
    bkeys_ctx b = {.st = statuses, .exist = exist};
    chunking_init(&b.ch, keys, n);
    mcrpc__batch_keys_request__init(&b.req);
    b.req.client_id = &cid;
    b.req.force = force;
    int rc = rpc_run(c, op, b.ch.nchunks, bkeys_build,
                     exist ? &mcrpc__batch_exist_key_reply__descriptor
                           : &mcrpc__batch_status_reply__descriptor,
                     bkeys_reply, &b);
    chunking_free(&b.ch);
    if (rc != MC_OK) {
        fill_status(statuses, n, rc);
        return rc;
    }
    if (exist)
        return MC_OK; /* per-key codes are in results; the call itself worked */
    return first_failure(statuses, n);
}

int mc_master_client_batch_put_end(mc_master_client *c, mc_master_uuid client_id,
                                   const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_PUT_END, client_id, keys, n, false,
                             statuses, false);
}

int mc_master_client_batch_put_revoke(mc_master_client *c, mc_master_uuid client_id,
                                      const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_PUT_REVOKE, client_id, keys, n, false,
                             statuses, false);
}

int mc_master_client_batch_upsert_end(mc_master_client *c, mc_master_uuid client_id,
                                      const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_UPSERT_END, client_id, keys, n, false,
                             statuses, false);
}

int mc_master_client_batch_upsert_revoke(mc_master_client *c, mc_master_uuid client_id,
                                         const mc_master_key *keys, size_t n, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_UPSERT_REVOKE, client_id, keys, n,
                             false, statuses, false);
}

/* ---- reads ---- */

static int take_get(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__GetReplicaListReply *r = (const Mcrpc__GetReplicaListReply *)m;
    return single_from_pb(r->status, r->replicas, r->n_replicas, r->lease_ttl_ms, r->segments,
                          r->n_segments, user);
}

int mc_master_client_get_replica_list(mc_master_client *c, const void *key, size_t key_len,
                                      mc_master_replica_list *out)
{
    if (out) {
        out->n = 0;
        out->lease_ttl_ms = 0;
    }
    if (!c || !out || !key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    Mcrpc__KeyRequest req = MCRPC__KEY_REQUEST__INIT;
    req.key = key_pb(key, key_len);
    return rpc_single(c, MCRPC__OPCODE__OP_GET_REPLICA_LIST, &req.base,
                      &mcrpc__get_replica_list_reply__descriptor, take_get, out);
}

typedef struct bget_ctx {
    chunking ch;
    Mcrpc__BatchKeysRequest req;
    mc_master_replica_list *outs;
    int *st;
} bget_ctx;

static const ProtobufCMessage *bget_build(void *ctx, size_t i)
{
    bget_ctx *b = ctx;
    b->req.keys = b->ch.keys + b->ch.starts[i];
    b->req.n_keys = chunk_len(&b->ch, i);
    return &b->req.base;
}

static int bget_reply(void *ctx, size_t i, int fst, const ProtobufCMessage *m)
{
    bget_ctx *b = ctx;
    size_t off = b->ch.starts[i], k = chunk_len(&b->ch, i);
    if (fst) {
        fill_status(b->st + off, k, fst);
        return MC_OK;
    }
    const Mcrpc__BatchGetReplicaListReply *r = (const Mcrpc__BatchGetReplicaListReply *)m;
    return batch_items_from_pb(r->items, r->n_items, r->segments, r->n_segments, k, true,
                               b->st + off, b->outs + off);
}

int mc_master_client_batch_get_replica_list(mc_master_client *c, const mc_master_key *keys,
                                            size_t n, mc_master_replica_list *outs,
                                            int *statuses)
{
    if (!c || (n && (!keys_ok(keys, n) || !outs || !statuses)))
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    for (size_t i = 0; i < n; i++)
        outs[i].n = 0;
    bget_ctx b = {.outs = outs, .st = statuses};
    chunking_init(&b.ch, keys, n);
    mcrpc__batch_keys_request__init(&b.req);
    int rc = rpc_run(c, MCRPC__OPCODE__OP_BATCH_GET_REPLICA_LIST, b.ch.nchunks, bget_build,
                     &mcrpc__batch_get_replica_list_reply__descriptor, bget_reply, &b);
    chunking_free(&b.ch);
    if (rc != MC_OK) {
        fill_status(statuses, n, rc);
        return rc;
    }
    return first_failure(statuses, n);
}

typedef struct regex_out {
    mc_master_regex_match *v;
    size_t n;
    bool truncated;
} regex_out;

static int take_regex(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__GetReplicaListByRegexReply *r = (const Mcrpc__GetReplicaListByRegexReply *)m;
    regex_out *o = user;
    if (r->status != MC_OK)
        return r->status;
    o->truncated = r->truncated;
    if (r->n_matches == 0)
        return MC_OK;
    segtab t;
    if (segtab_check(r->segments, r->n_segments, &t) != MC_OK)
        return MC_RPC_FAIL;
    o->v = calloc(r->n_matches, sizeof *o->v);
    if (!o->v)
        abort();
    for (size_t i = 0; i < r->n_matches; i++) {
        const Mcrpc__KeyReplicas *k = r->matches[i];
        mc_master_regex_match *d = &o->v[i];
        if (k->key.len > MC_MASTER_KEY_MAX)
            return MC_RPC_FAIL;
        d->key = malloc(k->key.len + 1);
        if (!d->key)
            abort();
        if (k->key.len)
            memcpy(d->key, k->key.data, k->key.len);
        ((char *)d->key)[k->key.len] = '\0';
        d->key_len = k->key.len;
        o->n = i + 1;
        if (replicas_from_pb(k->replicas, k->n_replicas, k->lease_ttl_ms, &t, &d->replicas) !=
            MC_OK)
            return MC_RPC_FAIL;
    }
    return MC_OK;
}

int mc_master_client_get_replica_list_by_regex(mc_master_client *c, const char *pattern,
                                               size_t pattern_len,
                                               mc_master_regex_match **matches, size_t *n,
                                               bool *truncated)
{
    if (!c || !matches || !n || (!pattern && pattern_len) || pattern_len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    *matches = NULL;
    *n = 0;
    if (truncated)
        *truncated = false;
    Mcrpc__RegexRequest req = MCRPC__REGEX_REQUEST__INIT;
    req.pattern.len = pattern_len;
    req.pattern.data = (uint8_t *)pattern;
    regex_out o = {0};
    int rc = rpc_single(c, MCRPC__OPCODE__OP_GET_REPLICA_LIST_BY_REGEX, &req.base,
                        &mcrpc__get_replica_list_by_regex_reply__descriptor, take_regex, &o);
    if (rc != MC_OK) {
        mc_master_client_free_matches(o.v, o.n);
        return rc;
    }
    *matches = o.v;
    *n = o.n;
    if (truncated)
        *truncated = o.truncated;
    return MC_OK;
}

void mc_master_client_free_matches(mc_master_regex_match *matches, size_t n)
{
    if (!matches)
        return;
    for (size_t i = 0; i < n; i++)
        free(matches[i].key);
    free(matches);
}

static int take_exist(void *user, const ProtobufCMessage *m)
{
    (void)user;
    const Mcrpc__ExistKeyReply *r = (const Mcrpc__ExistKeyReply *)m;
    if (r->status != MC_OK)
        return r->status;
    return r->exists ? 1 : 0;
}

int mc_master_client_exist_key(mc_master_client *c, const void *key, size_t key_len)
{
    if (!c || !key_ok(key, key_len))
        return MC_INVALID_PARAMS;
    Mcrpc__KeyRequest req = MCRPC__KEY_REQUEST__INIT;
    req.key = key_pb(key, key_len);
    return rpc_single(c, MCRPC__OPCODE__OP_EXIST_KEY, &req.base,
                      &mcrpc__exist_key_reply__descriptor, take_exist, NULL);
}

int mc_master_client_batch_exist_key(mc_master_client *c, const mc_master_key *keys, size_t n,
                                     int *results)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_EXIST_KEY, (mc_master_uuid){0, 0},
                             keys, n, false, results, true);
}

/* ---- removal ---- */

int mc_master_client_remove(mc_master_client *c, const void *key, size_t key_len, bool force)
{
    return key_common(c, MCRPC__OPCODE__OP_REMOVE, (mc_master_uuid){0, 0}, key, key_len,
                      force);
}

int mc_master_client_batch_remove(mc_master_client *c, const mc_master_key *keys, size_t n,
                                  bool force, int *statuses)
{
    return batch_keys_common(c, MCRPC__OPCODE__OP_BATCH_REMOVE, (mc_master_uuid){0, 0}, keys,
                             n, force, statuses, false);
}

static int take_count(void *user, const ProtobufCMessage *m)
{
    const Mcrpc__CountReply *r = (const Mcrpc__CountReply *)m;
    uint64_t *count = user;
    if (count)
        *count = r->count;
    return r->status;
}

int mc_master_client_remove_by_regex(mc_master_client *c, const char *pattern,
                                     size_t pattern_len, bool force, uint64_t *count)
{
    if (count)
        *count = 0;
    if (!c || (!pattern && pattern_len) || pattern_len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    Mcrpc__RegexRequest req = MCRPC__REGEX_REQUEST__INIT;
    req.pattern.len = pattern_len;
    req.pattern.data = (uint8_t *)pattern;
    req.force = force;
    return rpc_single(c, MCRPC__OPCODE__OP_REMOVE_BY_REGEX, &req.base,
                      &mcrpc__count_reply__descriptor, take_count, count);
}

int mc_master_client_remove_all(mc_master_client *c, bool force, uint64_t *count)
{
    if (count)
        *count = 0;
    if (!c)
        return MC_INVALID_PARAMS;
    Mcrpc__RemoveAllRequest req = MCRPC__REMOVE_ALL_REQUEST__INIT;
    req.force = force;
    return rpc_single(c, MCRPC__OPCODE__OP_REMOVE_ALL, &req.base,
                      &mcrpc__count_reply__descriptor, take_count, count);
}
