/* master_conn.c: the master RPC client's connections (master_client.h): a pool of TCP
 * connections, framing, pipelined request/reply (mc__rpc_run), create / destroy.
 * Owns struct mc_master_client; knows no RPC's meaning (master_rpc.c, master_batch.c). */
#include "client/internal.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/env.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "rpc/arena.h"
#include "rpc/limits.h"
#include "rpc/master_rpcs.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "net/frame.h"
#include "net/sock.h"

#define TAG MC__MASTER_TAG

/* Requests in flight on one connection during a split batch. */
#define PIPELINE_WINDOW 8u
/* An idle connection is checked for a close by the master after this many ms idle. */
#define STALE_CHECK_IDLE_MS 10u

typedef struct conn_slot {
    int fd;           /* -1 when closed; owned by whoever holds the slot (busy) */
    bool busy;        /* guarded by the client lock */
    uint64_t next_id; /* request ids on this connection */
    uint64_t last_ms; /* monotonic ms of the last completed call */
    bool fresh;       /* connected, no reply read yet: it may be a handshake RESULT */
    mc__arena ar;     /* reply decoding */
    ProtobufCAllocator alloc;
    uint8_t *sbuf;    /* one packed request */
    size_t scap;
    uint8_t *rbuf;    /* one reply body */
    size_t rcap;
    uint64_t gen;     /* HA: the leader generation fd was connected to */
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
    mc_auth_secret auth; /* len 0 = none */
    /* HA (leader.c, docs/ha.md): NULL for a plain host:port. With a leader lookup,
     * host/port/gen/leader_view are guarded by lock and change when the leader does. */
    mc__leader *leader;
    uint64_t gen;             /* bumped on a leader change: older slots reconnect */
    int64_t leader_view;      /* the view of host:port as the lookup gave it */
    _Atomic int64_t max_view; /* the newest view seen in a lookup or a reply */
    _Atomic uint64_t view_ms; /* mc_now_ms when a newer view than the first was seen */
    void (*on_change)(void *ctx); /* set before calls start */
    void *change_ctx;
};

/* An internal result of recv_one: the reply carries an older view than one already seen
 * (a deposed master's): it may have executed the request. */
#define STALE_VIEW 1

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

static int slot_connect_to(mc_master_client *c, conn_slot *s, const char *host, uint16_t port,
                           uint64_t deadline)
{
    uint64_t left = mc_ms_left(deadline);
    if (left == 0)
        return MC_RPC_TIMEOUT;
    uint64_t t = left < c->connect_timeout_ms ? left : c->connect_timeout_ms;
    int fd = mc_sock_connect_tcp(host, port, (int)t);
    if (fd < 0) {
        mc_log(MC_LOG_DEBUG, TAG, "connect %s (%s:%u): %s", c->address, host, (unsigned)port,
               strerror(-fd));
        return transport_code(fd);
    }
    if (mc_auth_enabled(&c->auth)) {
        char err[256];
        int rc = mc_auth_client_fd(fd, &c->auth, "master-rpc", deadline, err, sizeof err);
        if (rc != MC_AUTH_OK) {
            close(fd);
            if (rc == -MC_AUTH_TIMEOUT || rc == -MC_AUTH_IO) {
                mc_log(MC_LOG_WARN, TAG, "master RPC at %s: the cluster-secret handshake "
                       "did not complete: %s", c->address, err);
                return rc == -MC_AUTH_TIMEOUT ? MC_RPC_TIMEOUT : MC_RPC_FAIL;
            }
            mc_log(MC_LOG_ERROR, TAG, "master RPC at %s refused this client: %s (check that "
                   "this client's MC_AUTH_TOKEN_FILE / auth_token and the master's "
                   "--auth_token_file hold the same secret; docs/security.md)", c->address,
                   err);
            return MC_ILLEGAL_CLIENT;
        }
    }
    s->fd = fd;
    s->fresh = !mc_auth_enabled(&c->auth);
    return MC_OK;
}

/* A fresh connection of a client without a secret whose first reply starts with the
 * handshake's magic: a master that requires the secret answered RESULT. Reads the rest of
 * that frame (hb holds its first `have` bytes) and logs what it says. */
static int refused_by_secret(mc_master_client *c, conn_slot *s, uint8_t *hb, size_t have,
                             uint64_t deadline)
{
    uint8_t f[MC_AUTH_FRAME_MAX];
    memcpy(f, hb, have);
    size_t need = MC_AUTH_HEADER + 1; /* a RESULT */
    if (have < need && mc_sock_recv_all(s->fd, f + have, need - have, deadline) < 0)
        have = 0;
    mc_auth_frame fr;
    int code = MC_AUTH_CLIENT_NO_SECRET;
    if (have && mc_auth_frame_parse(f, need, &fr) > 0 && fr.type == MC_AUTH_RESULT)
        code = fr.code;
    mc_log(MC_LOG_ERROR, TAG, "master RPC at %s refused this client: %s (docs/security.md)",
           c->address, mc_auth_error_text(code, true));
    return MC_ILLEGAL_CLIENT;
}

static int slot_connect(mc_master_client *c, conn_slot *s, uint64_t deadline)
{
    return slot_connect_to(c, s, c->host, c->port, deadline);
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
        /* Prefer an idle slot that is already connected; else any idle one (connected
         * below, outside the lock); else wait for a release. */
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
    /* HA: a connection to an earlier leader is replaced; the address is read here */
    bool old_gen = s->gen != c->gen;
    char host[MC_MASTER_NAME_MAX];
    memcpy(host, c->host, sizeof host);
    uint16_t port = c->port;
    s->gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    if (old_gen)
        slot_close(s);
    /* Checked only after a pause: a master restart takes longer than that, and the poll
     * would cost a syscall per call in a busy loop. */
    if (s->fd >= 0 && mc_now_ms() - s->last_ms >= STALE_CHECK_IDLE_MS && slot_stale(s))
        slot_close(s);
    if (s->fd < 0) {
        int rc = slot_connect_to(c, s, host, port, deadline);
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
    /* The old contents are never needed again: free + malloc, not realloc (no copy). */
    free(*buf);
    *buf = mc_xmalloc(n);
    *cap = n;
}

/* ---- the call machinery ---- */

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

/* HA: the view a reply carries (`int64 view = 15` in every reply message, proto); 0
 * when absent. */
static int64_t reply_view(const ProtobufCMessageDescriptor *desc, const ProtobufCMessage *m)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(desc, 15);
    if (!f || f->type != PROTOBUF_C_TYPE_INT64 || f->label != PROTOBUF_C_LABEL_NONE)
        return 0;
    int64_t v;
    memcpy(&v, (const char *)m + f->offset, sizeof v);
    return v;
}

/* Raises c->max_view to v (never lowers it). */
static void see_view(mc_master_client *c, int64_t v)
{
    int64_t cur = atomic_load(&c->max_view);
    while (v > cur && !atomic_compare_exchange_weak(&c->max_view, &cur, v)) {
    }
    if (v > cur && cur > 0) /* a leader change (not the first view this client learns) */
        atomic_store(&c->view_ms, mc_now_ms());
}

/* HA: a reply from an older view than the newest seen is refused (STALE_VIEW): only the
 * current leader's replies count, so a deposed master's writes are never accepted. */
static int check_view(mc_master_client *c, const ProtobufCMessageDescriptor *desc,
                      const ProtobufCMessage *m)
{
    int64_t v = reply_view(desc, m);
    int64_t max = atomic_load(&c->max_view);
    if (v < max) {
        mc_log(MC_LOG_WARN, TAG, "%s: refused a reply of view %lld (the newest seen is %lld)",
               c->address, (long long)v, (long long)max);
        return STALE_VIEW;
    }
    see_view(c, v);
    return MC_OK;
}

static int recv_one(mc_master_client *c, conn_slot *s, uint16_t op, uint64_t id,
                    const ProtobufCMessageDescriptor *desc, uint64_t deadline, int *frame_status,
                    const ProtobufCMessage **reply)
{
    uint8_t hb[MC_FRAME_HEADER_SIZE];
    int rc;
    if (s->fresh) {
        /* the first bytes of a fresh connection's first reply: a handshake RESULT (9
         * bytes) is shorter than a frame header */
        s->fresh = false;
        rc = mc_sock_recv_all(s->fd, hb, MC_AUTH_HEADER, deadline);
        if (rc < 0)
            return transport_code(rc);
        if (!memcmp(hb, MC_AUTH_MAGIC, 4))
            return refused_by_secret(c, s, hb, MC_AUTH_HEADER, deadline);
        rc = mc_sock_recv_all(s->fd, hb + MC_AUTH_HEADER, sizeof hb - MC_AUTH_HEADER,
                              deadline);
    } else {
        rc = mc_sock_recv_all(s->fd, hb, sizeof hb, deadline);
    }
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
    if (c->leader && h.status == MC_UNAVAILABLE_IN_CURRENT_STATUS)
        return MC_UNAVAILABLE_IN_CURRENT_STATUS; /* not the leader: nothing ran */
    if (h.status != 0)
        return MC_OK;
    /* Decoded into the slot's arena, bounded so that a hostile body cannot make us
     * allocate without limit; the limit is lifted again for the caller's use. */
    mc__arena_reset(&s->ar);
    s->ar.limit = 4u * c->max_reply;
    /* The hot batch replies by hand (master_codec.c); anything that decoder leaves
     * (another message, an unusual encoding) goes to protobuf-c from a clean arena. */
    *reply = mc__replydec_unpack(desc, &s->ar, h.body_len, s->rbuf);
    if (!*reply) {
        mc__arena_reset(&s->ar);
        s->ar.limit = 4u * c->max_reply;
        *reply = protobuf_c_message_unpack(desc, &s->alloc, h.body_len, s->rbuf);
    }
    s->ar.limit = 0;
    if (!*reply) {
        mc_log(MC_LOG_WARN, TAG, "undecodable reply from %s (opcode %u)", c->address,
               (unsigned)op);
        return MC_RPC_FAIL;
    }
    return c->leader ? check_view(c, desc, *reply) : MC_OK;
}

/* Runs nreq requests of one opcode on one connection, pipelined (at most
 * PIPELINE_WINDOW outstanding), handing each reply to on_reply in order. Returns MC_OK
 * (results went to on_reply), or a transport / local code for the whole call. */
static int run_once(mc_master_client *c, uint16_t op, size_t nreq, mc__rpc_build_fn build,
                    const ProtobufCMessageDescriptor *desc, mc__rpc_reply_fn on_reply,
                    void *ctx, uint64_t deadline, size_t *sent_out, size_t *done_out)
{
    conn_slot *s;
    *sent_out = *done_out = 0;
    int rc = acquire(c, deadline, &s);
    if (rc != MC_OK)
        return rc;
    /* Ids are reserved for the whole call: reply i must carry first_id + i. */
    uint64_t first_id = s->next_id;
    s->next_id += nreq;
    size_t sent = 0, done = 0;
    bool ok = true;
    rc = MC_OK;
    while (done < nreq) {
        /* Fill the window, then take one reply; the master answers in order. */
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
        *done_out = done;
    }
out:
    *sent_out = sent;
    if (rc != MC_OK && sent > done)
        ok = false; /* replies still in flight: the connection is out of step */
    if (rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT || rc == MC_ILLEGAL_CLIENT ||
        rc == MC_UNAVAILABLE_IN_CURRENT_STATUS || rc == STALE_VIEW)
        ok = false; /* out of step, refused, or (HA) no longer the leader */
    release(c, s, ok);
    return rc;
}

static const char *op_label(uint16_t op)
{
    switch (op) {
#define MC__RPC_LABEL(ID, CODE, NAME, ...)                                                 \
    case CODE:                                                                             \
        return NAME;
        MC_MASTER_RPC_TABLE(MC__RPC_LABEL)
#undef MC__RPC_LABEL
    default:
        return "?";
    }
}

/* HA: calls that may run twice with the same outcome, so they are resent when the
 * master failed while they were in flight. */
static bool idempotent(uint16_t op)
{
    switch (op) {
    case MC_MASTER_RPC_OPCODE_PING:
    case MC_MASTER_RPC_OPCODE_SERVICE_READY:
    case MC_MASTER_RPC_OPCODE_GET_REPLICA_LIST:
    case MC_MASTER_RPC_OPCODE_GET_REPLICA_LIST_BY_REGEX:
    case MC_MASTER_RPC_OPCODE_BATCH_GET_REPLICA_LIST:
    case MC_MASTER_RPC_OPCODE_EXIST_KEY:
    case MC_MASTER_RPC_OPCODE_BATCH_EXIST_KEY:
    case MC_MASTER_RPC_OPCODE_REMOUNT_SEGMENT:
        return true;
    default:
        return false;
    }
}

/* HA: a new leader (addr, view): the pool moves there (every slot reconnects) and
 * on_change runs. A view older than the one in use is ignored (a slow lookup racing the
 * follow thread). Returns true when the leader changed. Any thread. */
static bool leader_switch(mc_master_client *c, const char *addr, int64_t view,
                          const char *how)
{
    char host[MC_MASTER_NAME_MAX];
    uint16_t port;
    if (mc_sock_parse_hostport(addr, host, sizeof host, &port, MC_MASTER_DEFAULT_PORT) != 0)
        return false;
    see_view(c, view);
    pthread_mutex_lock(&c->lock);
    bool changed = view >= c->leader_view &&
                   (view != c->leader_view || port != c->port || strcmp(host, c->host) != 0);
    if (changed) {
        memcpy(c->host, host, sizeof c->host);
        c->port = port;
        c->leader_view = view;
        c->gen++;
    }
    void (*fn)(void *) = c->on_change; /* under the lock: the follow thread runs already */
    void *fn_ctx = c->change_ctx;
    pthread_mutex_unlock(&c->lock);
    if (changed) {
        mc_log(MC_LOG_INFO, TAG, "%s: the leader is %s (view %lld), found by %s", c->address,
               addr, (long long)view, how);
        if (fn)
            fn(fn_ctx);
    }
    return changed;
}

/* HA: looks the leader up (a call found no serving master). */
static bool leader_refresh(mc_master_client *c)
{
    char addr[MC_MASTER_NAME_MAX];
    int64_t view = 0;
    if (mc__leader_resolve(c->leader, addr, sizeof addr, &view) != MC_OK)
        return false;
    return leader_switch(c, addr, view, "a lookup after a failed call");
}

/* HA: the follow thread's report (leader.c): the idle pool moves at once. */
static void leader_followed(void *ctx, const char *addr, int64_t view, const char *how)
{
    leader_switch(ctx, addr, view, how);
}

#define LEADER_RETRY_MS 100u /* between two lookups while no leader answers */

int mc__rpc_run(mc_master_client *c, uint16_t op, size_t nreq, mc__rpc_build_fn build,
                const ProtobufCMessageDescriptor *desc, mc__rpc_reply_fn on_reply, void *ctx)
{
    uint64_t deadline = mc_deadline_ms(c->timeout_ms);
    size_t sent, done;
    if (!c->leader)
        return run_once(c, op, nreq, build, desc, on_reply, ctx, deadline, &sent, &done);
    /* HA: follow the leader. A call is resent while nothing of it ran (refused by a
     * non-leader, or never sent) or when it is idempotent, until its deadline. */
    bool refused = false; /* some attempt met a non-leader or an older view */
    for (;;) {
        int rc = run_once(c, op, nreq, build, desc, on_reply, ctx, deadline, &sent, &done);
        bool lost = rc == MC_UNAVAILABLE_IN_CURRENT_STATUS || rc == STALE_VIEW ||
                    rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT;
        refused |= rc == MC_UNAVAILABLE_IN_CURRENT_STATUS || rc == STALE_VIEW;
        if (!lost || done > 0)
            return rc == STALE_VIEW ? MC_UNAVAILABLE_IN_CURRENT_STATUS : rc;
        bool unexecuted = rc == MC_UNAVAILABLE_IN_CURRENT_STATUS || sent == 0;
        if (!unexecuted && !idempotent(op)) {
            mc_log(MC_LOG_WARN, TAG,
                   "%s: %s was in flight when its master %s (%s): it may or may not have "
                   "run there; not resent",
                   c->address, op_label(op),
                   rc == STALE_VIEW ? "turned out deposed" : "failed", mc_strerror(rc));
            leader_refresh(c);
            return rc == STALE_VIEW ? MC_UNAVAILABLE_IN_CURRENT_STATUS : rc;
        }
        if (mc_ms_left(deadline) == 0) /* no serving leader answered in time: say why */
            return refused ? MC_UNAVAILABLE_IN_CURRENT_STATUS : rc;
        if (!leader_refresh(c)) {
            uint64_t left = mc_ms_left(deadline);
            mc_sleep_ms(left < LEADER_RETRY_MS ? left : LEADER_RETRY_MS);
        }
    }
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

int mc__rpc_single(mc_master_client *c, uint16_t op, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *desc,
                   int (*take)(void *user, const ProtobufCMessage *reply), void *user)
{
    single_ctx sc = {req, take, user, MC_RPC_FAIL};
    int rc = mc__rpc_run(c, op, 1, single_build, desc, single_reply, &sc);
    return rc != MC_OK ? rc : sc.result;
}
/* ---- create / destroy ---- */

int mc__master_env_timeout(uint32_t *out)
{
    uint64_t v;
    /* One reader, one policy (common/env.h): unset = the default, a bad value fails the
     * create (and the store's setup) naming the variable. 0 ms is not a timeout. */
    int rc = mc_env_u64("MC_RPC_TIMEOUT_MS", MC_MASTER_CLIENT_DEFAULT_TIMEOUT_MS, 1, 86400000u,
                        &v);
    *out = (uint32_t)v;
    return rc;
}

/* HA: address is a leader locator: the lookup client and the first leader (waiting up
 * to timeout_ms for one: a failover may be under way). */
static int leader_open(mc_master_client *c, const char *address, uint32_t timeout_ms)
{
    int rc = mc__leader_create(address, &c->leader);
    if (rc != MC_OK)
        return rc;
    char addr[MC_MASTER_NAME_MAX];
    int64_t view = 0;
    rc = mc__leader_wait(c->leader, timeout_ms, addr, sizeof addr, &view); /* logs */
    if (rc == MC_OK && mc_sock_parse_hostport(addr, c->host, sizeof c->host, &c->port,
                                              MC_MASTER_DEFAULT_PORT) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "%s: the leader key holds '%s', not host:port", address,
               addr);
        rc = MC_RPC_FAIL;
    }
    if (rc != MC_OK) {
        mc__leader_destroy(c->leader);
        return rc == MC_OBJECT_NOT_FOUND ? MC_RPC_FAIL : rc;
    }
    c->leader_view = view;
    atomic_init(&c->max_view, view);
    mc_log(MC_LOG_INFO, TAG, "%s: the leader is %s (view %lld)", address, addr,
           (long long)view);
    return MC_OK;
}

int mc_master_client_create(const char *address, const mc_master_client_opts *opts,
                            mc_master_client **out)
{
    mc_master_client_opts o = {0};
    if (opts)
        o = *opts;
    if (!address || !out || o.max_conns > MC_MASTER_CLIENT_MAX_CONNS)
        return MC_INVALID_PARAMS;
    uint32_t timeout_ms = o.rpc_timeout_ms;
    if (!timeout_ms && mc__master_env_timeout(&timeout_ms) != 0)
        return MC_INVALID_PARAMS; /* logged by the env reader */
    mc_master_client *c = mc_xcalloc(1, sizeof *c);
    if (mc__leader_locator(address)) {
        int lrc = leader_open(c, address, timeout_ms);
        if (lrc != MC_OK) {
            free(c);
            return lrc;
        }
    } else if (mc_sock_parse_hostport(address, c->host, sizeof c->host, &c->port,
                                      MC_MASTER_DEFAULT_PORT) != 0) {
        mc_log(MC_LOG_ERROR, TAG, "master address '%s' is not \"host\", \"host:port\" or "
               "\"[v6]:port\"", address);
        free(c);
        return MC_INVALID_PARAMS;
    }
    c->address = mc_xstrdup(address);
    c->timeout_ms = timeout_ms;
    c->connect_timeout_ms =
        o.connect_timeout_ms ? o.connect_timeout_ms : MC_MASTER_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS;
    c->max_reply = o.max_reply_body ? o.max_reply_body : MC_MASTER_RPC_MAX_REPLY_BODY;
    c->n = o.max_conns ? o.max_conns : MC_MASTER_CLIENT_DEFAULT_MAX_CONNS;
    if (mc_auth_enabled(o.auth))
        c->auth = *o.auth;
    c->slots = mc_xcalloc(c->n, sizeof *c->slots);
    for (unsigned i = 0; i < c->n; i++) {
        c->slots[i].fd = -1;
        c->slots[i].next_id = 1;
        c->slots[i].alloc = mc__arena_allocator(&c->slots[i].ar);
    }
    pthread_mutex_init(&c->lock, NULL);
    mc_cond_init_monotonic(&c->cond);
    int rc = slot_connect(c, &c->slots[0], mc_deadline_ms(c->timeout_ms));
    if (rc != MC_OK) {
        mc_master_client_destroy(c);
        return rc;
    }
    if (c->leader) /* HA: follow the leader by watch / poll (leader.c) */
        mc__leader_follow(c->leader, c->leader_view, leader_followed, c);
    *out = c;
    return MC_OK;
}

void mc_master_client_destroy(mc_master_client *c)
{
    if (!c)
        return;
    mc__leader_destroy(c->leader); /* first: its follow thread calls into c */
    c->leader = NULL;
    for (unsigned i = 0; i < c->n; i++) {
        slot_close(&c->slots[i]);
        mc__arena_destroy(&c->slots[i].ar);
        free(c->slots[i].sbuf);
        free(c->slots[i].rbuf);
    }
    free(c->slots);
    mc_auth_secret_wipe(&c->auth);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c->address);
    free(c);
}

void mc_master_client_set_leader_hook(mc_master_client *c, void (*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&c->lock);
    c->on_change = fn;
    c->change_ctx = ctx;
    pthread_mutex_unlock(&c->lock);
}

bool mc_master_client_view_changed_within(const mc_master_client *c, uint64_t ms)
{
    uint64_t t = atomic_load(&((mc_master_client *)c)->view_ms);
    return t && mc_now_ms() - t <= ms;
}

int64_t mc_master_client_view(const mc_master_client *c)
{
    return atomic_load(&((mc_master_client *)c)->max_view);
}

const char *mc_master_client_address(const mc_master_client *c)
{
    return c->address;
}
