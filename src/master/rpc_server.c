/* rpc_server.c: the master's TCP front end (see rpc_server.h): the listener, the event
 * loops and their connections, and the tick thread. It moves frames only; decoding and
 * the service calls belong to rpc_handler.c, and it never touches service state. */
#include "master/rpc_server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/list.h"
#include "master/persist.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "net/conn.h"
#include "net/loop.h"
#include "net/sock.h"

#define TAG "master-rpc"

typedef struct loop_ctx loop_ctx;

#define DEF_HANDSHAKE_MS 5000u
#define DEF_MAX_CONNS 4096u
#define DEF_MAX_CONNS_IP 256u
#define DEF_MAX_PENDING (256ull << 20)
#define DEF_MAX_UNREAD (128ull << 20)
#define DEF_PAUSE (1ull << 20)
#define REFUSAL_LOG_MS 10000u /* at most one log line per refusal reason per 10 s */

/* Phases of a connection: before PH_RPC its fd is watched by pre_io (the handshake, or
 * the first bytes of an open server); from PH_RPC on it is an mc_conn. */
enum { PH_SNIFF, PH_HELLO, PH_RESPONSE, PH_RPC };

/* One accepted connection; lives on one loop; guarded by that loop's thread. */
typedef struct srv_conn {
    mc_conn *c;   /* PH_RPC */
    int fd;       /* before PH_RPC (owned); -1 after */
    loop_ctx *lc;
    mc_list link; /* in lc->conns */
    int phase;
    uint8_t ip[16]; /* source address (IPv4 as v4-mapped IPv6) for the per-address count */
    mc_auth_hs hs;
    uint8_t in[MC_AUTH_FRAME_MAX]; /* the handshake frame being read */
    size_t have;
    mc_loop_timer *deadline;       /* handshake deadline, or NULL */
    uint64_t reserved;             /* bytes of max_pending taken by the body being read */
    uint64_t last_ms;              /* when it last sent request bytes (idle timeout)     */
    mc_list replies;               /* kept replies (dreply), in request order            */
    mc_list dlink;                 /* in lc->kept while replies is not empty             */
    uint64_t kept_bytes;           /* body bytes in replies (<= max_unread)              */
} srv_conn;

/* A reply kept until its log record is durable (persist.h "deferred
 * acknowledgements"), or queued behind such a reply (lsn 0) so that one connection's
 * replies leave in request order. */
typedef struct dreply {
    mc_list link;
    uint64_t lsn;
    mc_frame_header h;
    size_t len;
    uint8_t body[];
} dreply;

/* Connections per source address: a small table under a lock (touched at accept and
 * close only). */
typedef struct ip_count {
    uint8_t ip[16];
    unsigned n;
} ip_count;

struct loop_ctx {
    mc_master_rpc_server *srv;
    mc_loop *loop;
    mc_master_rpc_handler *h; /* used only on this loop's thread */
    mc_list conns;            /* srv_conn.link; guarded by the loop thread */
    mc_list kept;             /* srv_conn.dlink: connections with kept replies (loop) */
    _Atomic unsigned nkept;   /* entries of kept (read by the log writer's notify)  */
    _Atomic bool posted;      /* a flush_kept task is queued on the loop            */
    bool started;
    mc_loop_timer *idle;      /* the idle-connection sweep, or NULL */
};

struct mc_master_rpc_server {
    mc_master_service *svc;
    loop_ctx *lcs;
    unsigned n;
    int lfd;
    uint16_t port;
    uint32_t max_body;
    unsigned rr;              /* next loop for an accepted connection (loop 0's thread) */
    mc_loop *hk;              /* housekeeping loop: the service tick */
    bool hk_started;
    const mc_auth_secret *auth; /* NULL = open */
    unsigned hs_ms, max_conns, max_conns_ip;
    unsigned idle_ms;         /* 0 = connections may stay idle */
    bool nodelay;
    uint64_t max_pending, max_unread, pause;
    pthread_mutex_t ip_mu;
    ip_count *ips;
    size_t nips, ips_cap;
    /* counters: relaxed atomics */
    uint64_t conns_active, conns_total, conns_bad, frames, frames_refused, authed, pending;
    uint64_t refused[MC_RPC_REFUSED_COUNT];
    uint64_t refused_logged_ms[MC_RPC_REFUSED_COUNT];
    uint64_t bad_logged_ms; /* the last "bad frame" line (log_due) */
};

static const char *const refusal_names[MC_RPC_REFUSED_COUNT] = {
    "conn_limit",      "per_ip_limit",   "handshake_timeout", "client_no_secret",
    "bad_mac",         "wrong_port",     "malformed",         "handshake_closed",
    "server_no_secret", "pending_bytes", "reply_backlog",
};

const char *mc_master_rpc_refusal_name(int reason)
{
    return reason >= 0 && reason < MC_RPC_REFUSED_COUNT ? refusal_names[reason] : "?";
}

static void count(uint64_t *c, int64_t d)
{
    __atomic_add_fetch(c, (uint64_t)d, __ATOMIC_RELAXED);
}

/* Counts a refusal and logs it (at most one line per reason per REFUSAL_LOG_MS, so a
 * flood does not flood the log too). */
/* Whether a rate-limited line may be logged now (at most one per REFUSAL_LOG_MS per
 * slot; any thread). */
static bool log_due(uint64_t *slot)
{
    uint64_t now = mc_now_ms();
    uint64_t last = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (last && now - last < REFUSAL_LOG_MS)
        return false;
    return __atomic_compare_exchange_n(slot, &last, now, false, __ATOMIC_RELAXED,
                                       __ATOMIC_RELAXED);
}

static void refuse(mc_master_rpc_server *srv, int reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(mc_master_rpc_server *srv, int reason, const char *fmt, ...)
{
    __atomic_add_fetch(&srv->refused[reason], 1, __ATOMIC_RELAXED);
    if (!log_due(&srv->refused_logged_ms[reason]))
        return;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mc_log(MC_LOG_WARN, TAG, "refused a connection (%s): %s (further refusals for this "
           "reason in the next %u s are counted in master_rpc_refused_total only)",
           refusal_names[reason], msg, REFUSAL_LOG_MS / 1000);
}

/* ---- per-address counts ---- */

static void peer_ip(int fd, uint8_t ip[16], char *text, size_t tlen)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(ip, 0, 16);
    snprintf(text, tlen, "?");
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        ip[10] = ip[11] = 0xff;
        memcpy(ip + 12, &a->sin_addr, 4);
        const uint8_t *b = ip + 12;
        snprintf(text, tlen, "%u.%u.%u.%u", b[0], b[1], b[2], b[3]);
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        memcpy(ip, &a->sin6_addr, 16);
        snprintf(text, tlen, "an IPv6 address");
    }
}

/* Takes one slot of ip's count; false (nothing taken) when it is at the limit. */
static bool ip_take(mc_master_rpc_server *srv, const uint8_t ip[16])
{
    bool ok = true;
    pthread_mutex_lock(&srv->ip_mu);
    size_t i;
    for (i = 0; i < srv->nips; i++)
        if (!memcmp(srv->ips[i].ip, ip, 16))
            break;
    if (i == srv->nips) {
        if (srv->nips == srv->ips_cap) {
            srv->ips_cap = srv->ips_cap ? srv->ips_cap * 2 : 16;
            srv->ips = mc_xrealloc(srv->ips, srv->ips_cap * sizeof *srv->ips);
        }
        memcpy(srv->ips[i].ip, ip, 16);
        srv->ips[i].n = 0;
        srv->nips++;
    }
    if (srv->ips[i].n >= srv->max_conns_ip)
        ok = false;
    else
        srv->ips[i].n++;
    pthread_mutex_unlock(&srv->ip_mu);
    return ok;
}

static void ip_give(mc_master_rpc_server *srv, const uint8_t ip[16])
{
    pthread_mutex_lock(&srv->ip_mu);
    for (size_t i = 0; i < srv->nips; i++) {
        if (memcmp(srv->ips[i].ip, ip, 16))
            continue;
        if (--srv->ips[i].n == 0)
            srv->ips[i] = srv->ips[--srv->nips]; /* swap-remove: the table stays small */
        break;
    }
    pthread_mutex_unlock(&srv->ip_mu);
}

/* Gives back what a connection holds (its slot, its address count, its pending body). */
static void drop_kept(srv_conn *sc)
{
    mc_list *it;
    while ((it = mc_list_pop_front(&sc->replies)))
        free(MC_CONTAINER_OF(it, dreply, link));
    if (mc_list_linked(&sc->dlink)) {
        mc_list_remove(&sc->dlink);
        mc_list_init(&sc->dlink);
        atomic_fetch_sub(&sc->lc->nkept, 1);
    }
}

static void conn_gone(srv_conn *sc)
{
    mc_master_rpc_server *srv = sc->lc->srv;
    drop_kept(sc);
    if (sc->reserved)
        count(&srv->pending, -(int64_t)sc->reserved);
    sc->reserved = 0;
    mc_list_remove(&sc->link);
    ip_give(srv, sc->ip);
    count(&srv->conns_active, -1);
    free(sc);
}

/* ---- connections ---- */

/* Sends sc's kept replies from the head while they are due. Returns false when the
 * connection went (a failed send frees it: sc is gone). Loop thread. */
static bool flush_kept(srv_conn *sc)
{
    mc_master_service *svc = sc->lc->srv->svc;
    mc_list *it;
    while ((it = mc_list_front(&sc->replies))) {
        dreply *d = MC_CONTAINER_OF(it, dreply, link);
        if (d->lsn && !mc_master_log_is_durable(svc, d->lsn))
            return true; /* the writer's notify brings us back */
        mc_list_remove(it);
        sc->kept_bytes -= d->len;
        int rc = mc_conn_send(sc->c, &d->h, d->body, d->len);
        free(d);
        if (rc)
            return false; /* failure closed (and freed) the connection */
    }
    if (mc_list_linked(&sc->dlink)) {
        mc_list_remove(&sc->dlink);
        mc_list_init(&sc->dlink);
        atomic_fetch_sub(&sc->lc->nkept, 1);
    }
    return true;
}

static void flush_kept_task(void *arg)
{
    loop_ctx *lc = arg;
    atomic_store(&lc->posted, false); /* a notify from now on posts again */
    MC_LIST_FOREACH(it, &lc->kept)
        flush_kept(MC_CONTAINER_OF(it, srv_conn, dlink));
}

/* The log writer's notify (mc_master_log_set_notify): a group was written; every loop
 * with kept replies looks at them on its own thread. */
static void log_notify(void *arg)
{
    mc_master_rpc_server *srv = arg;
    for (unsigned i = 0; i < srv->n; i++) {
        loop_ctx *lc = &srv->lcs[i];
        if (!atomic_load(&lc->nkept) || atomic_exchange(&lc->posted, true))
            continue;
        if (mc_loop_post(lc->loop, flush_kept_task, lc) != 0)
            atomic_store(&lc->posted, false);
    }
}

/* Keeps the reply (copied) behind sc's earlier kept ones; sends what is due. */
static void keep_reply(srv_conn *sc, uint64_t lsn, const mc_frame_header *h,
                       const uint8_t *body, size_t len)
{
    mc_master_rpc_server *srv = sc->lc->srv;
    if (srv->max_unread && sc->kept_bytes + len > srv->max_unread) {
        /* a peer that pipelines behind a reply waiting for the log: the same bound as
         * replies it leaves unread (--rpc_max_unread_reply_bytes) */
        refuse(srv, MC_RPC_REFUSED_REPLY_BACKLOG,
               "its peer queued more than %llu bytes of replies behind one waiting for "
               "the mutation log (--rpc_max_unread_reply_bytes)",
               (unsigned long long)srv->max_unread);
        mc_conn_close(sc->c);
        return;
    }
    sc->kept_bytes += len;
    dreply *d = mc_xmalloc(sizeof *d + len);
    d->lsn = lsn;
    d->h = *h;
    d->len = len;
    if (len)
        memcpy(d->body, body, len);
    mc_list_push_back(&sc->replies, &d->link);
    if (!mc_list_linked(&sc->dlink)) {
        /* counted before the durable check in flush_kept: a group published after the
         * check sees the count and notifies */
        atomic_fetch_add(&sc->lc->nkept, 1);
        mc_list_push_back(&sc->lc->kept, &sc->dlink);
    }
    flush_kept(sc); /* inside on_frame: a failed send only marks the conn closing */
}

static void on_frame(mc_conn *c, const mc_frame_header *hdr, const uint8_t *body, void *arg)
{
    srv_conn *sc = arg;
    mc_master_rpc_server *srv = sc->lc->srv;
    if (hdr->flags & MC_FRAME_REPLY) { /* a client never sends replies */
        count(&srv->conns_bad, 1);
        mc_conn_close(c);
        return;
    }
    if (sc->reserved) { /* the body is in: it leaves the pending budget */
        count(&srv->pending, -(int64_t)sc->reserved);
        sc->reserved = 0;
    }
    /* runs the request on this loop's thread with this loop's handler; the reply points
     * into the handler's buffer, valid until its next request (mc_conn_send copies it) */
    const uint8_t *reply;
    size_t reply_len;
    mc_master_log_defer_begin(); /* a put_end's wait for its log record becomes ours */
    int st = mc_master_rpc_handle(sc->lc->h, hdr->opcode, body, hdr->body_len, &reply,
                                  &reply_len);
    uint64_t lsn = mc_master_log_defer_end();
    count(&srv->frames, 1);
    if (st != 0)
        count(&srv->frames_refused, 1);
    mc_frame_header rh = {
        .version = MC_FRAME_VERSION,
        .flags = MC_FRAME_REPLY,
        .opcode = hdr->opcode,
        .status = st,
        .request_id = hdr->request_id,
    };
    if (lsn || !mc_list_empty(&sc->replies)) {
        keep_reply(sc, lsn, &rh, reply, reply_len); /* sent once its record is durable */
        return;
    }
    mc_conn_send(c, &rh, reply, reply_len); /* failure closes the connection */
}

static void on_close(mc_conn *c, int err, void *arg)
{
    (void)c;
    srv_conn *sc = arg;
    mc_master_rpc_server *srv = sc->lc->srv;
    if (err == -EPROTO || err == -EMSGSIZE || err == -EPROTONOSUPPORT) {
        count(&srv->conns_bad, 1);
        if (log_due(&srv->bad_logged_ms)) {
            const uint8_t *b = sc->ip + 12;
            char who[32];
            static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            if (!memcmp(sc->ip, v4, 12))
                snprintf(who, sizeof who, "%u.%u.%u.%u", b[0], b[1], b[2], b[3]);
            else
                snprintf(who, sizeof who, "an IPv6 address");
            mc_log(MC_LOG_WARN, TAG, "closed a connection from %s: bad frame (%s): it does "
                   "not speak this master's RPC protocol (another program, or a client of "
                   "another version, on --rpc_port?); further bad frames in the next %u s "
                   "are counted in master_rpc_bad_connections_total only", who,
                   strerror(-err), REFUSAL_LOG_MS / 1000);
        }
    } else if (err == -ENOBUFS) {
        refuse(srv, MC_RPC_REFUSED_REPLY_BACKLOG,
               "its peer left more than %llu bytes of replies unread "
               "(--rpc_max_unread_reply_bytes)", (unsigned long long)srv->max_unread);
    }
    conn_gone(sc);
}

/* A request header is in (it counts as activity for the idle timeout). */
static int on_header(mc_conn *c, const mc_frame_header *hdr, void *arg)
{
    (void)c;
    (void)hdr;
    srv_conn *sc = arg;
    sc->last_ms = mc_now_ms();
    return 0;
}

/* The body being read grows its buffer by `add` bytes (net/conn.h: about what the peer
 * sent so far, never what its header merely claims): they come from the pending budget
 * first. A header alone holds nothing, so idle headers cannot starve other peers. */
static int on_body_alloc(mc_conn *c, size_t add, void *arg)
{
    (void)c;
    srv_conn *sc = arg;
    mc_master_rpc_server *srv = sc->lc->srv;
    uint64_t now = __atomic_add_fetch(&srv->pending, add, __ATOMIC_RELAXED);
    if (now > srv->max_pending) {
        count(&srv->pending, -(int64_t)add);
        refuse(srv, MC_RPC_REFUSED_PENDING_BYTES,
               "%llu more bytes of a request body being received would pass the %llu "
               "bytes of request bodies being received at once "
               "(--rpc_max_pending_request_bytes)",
               (unsigned long long)add, (unsigned long long)srv->max_pending);
        return -ENOSPC; /* closes the connection */
    }
    sc->reserved += add;
    return 0;
}

static const mc_conn_callbacks conn_cbs = {on_frame, on_close, on_header, on_body_alloc};

/* ---- before the RPC protocol: the handshake, or an open server's first bytes ---- */

/* Closes a connection that never became an mc_conn. What the peer sent and we did not
 * read is drained first (bounded): closing with unread bytes makes the kernel send a
 * reset, which may destroy the RESULT we just sent before the peer reads it. */
static void pre_close(srv_conn *sc)
{
    uint8_t junk[4096];
    for (int i = 0; i < 16 && recv(sc->fd, junk, sizeof junk, MSG_DONTWAIT) > 0; i++)
        ;
    if (sc->deadline)
        mc_loop_timer_cancel(sc->lc->loop, sc->deadline);
    sc->deadline = NULL;
    mc_loop_del(sc->lc->loop, sc->fd);
    close(sc->fd);
    sc->fd = -1;
    conn_gone(sc);
}

/* The connection becomes an RPC connection (prefix: bytes of its first header read). */
static void to_rpc(srv_conn *sc, const uint8_t *prefix, size_t n)
{
    mc_master_rpc_server *srv = sc->lc->srv;
    if (sc->deadline)
        mc_loop_timer_cancel(sc->lc->loop, sc->deadline);
    sc->deadline = NULL;
    mc_loop_del(sc->lc->loop, sc->fd);
    int fd = sc->fd;
    sc->fd = -1;
    sc->phase = PH_RPC;
    mc_conn_opts o = {.max_body = srv->max_body,
                      .max_backlog = srv->max_unread,
                      .pause_backlog = srv->pause,
                      .prefix = prefix,
                      .prefix_len = n};
    sc->c = mc_conn_create_opts(sc->lc->loop, fd, &o, &conn_cbs, sc);
    if (!sc->c) /* fd already closed by mc_conn_create_opts */
        conn_gone(sc);
}

static int code_reason(int code)
{
    switch (code < 0 ? -code : code) {
    case MC_AUTH_CLIENT_NO_SECRET: return MC_RPC_REFUSED_CLIENT_NO_SECRET;
    case MC_AUTH_BAD_CLIENT_MAC:
    case MC_AUTH_BAD_SERVER_MAC: return MC_RPC_REFUSED_BAD_MAC;
    case MC_AUTH_WRONG_PORT: return MC_RPC_REFUSED_WRONG_PORT;
    case MC_AUTH_TIMEOUT: return MC_RPC_REFUSED_HANDSHAKE_TIMEOUT;
    case MC_AUTH_IO: return MC_RPC_REFUSED_HANDSHAKE_CLOSED;
    default: return MC_RPC_REFUSED_MALFORMED;
    }
}

/* Sends a small handshake frame without waiting: the socket's buffer is empty during the
 * handshake (the peer waits for each answer), so a short write means a broken peer. */
static bool pre_send(srv_conn *sc, const uint8_t *b, size_t n)
{
    ssize_t w = send(sc->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    return w == (ssize_t)n;
}

static void pre_fail(srv_conn *sc, int code, const uint8_t *out, size_t olen)
{
    if (olen)
        (void)pre_send(sc, out, olen);
    else if (code != MC_AUTH_IO && code != MC_AUTH_TIMEOUT) {
        uint8_t r[MC_AUTH_FRAME_MAX];
        int m = mc_auth_result_frame(code, r, sizeof r);
        if (m > 0)
            (void)pre_send(sc, r, (size_t)m);
    }
    char who[64];
    uint8_t ip[16];
    peer_ip(sc->fd, ip, who, sizeof who);
    refuse(sc->lc->srv, code_reason(code), "handshake with %s failed: %s", who,
           mc_auth_error_text(code, false));
    pre_close(sc);
}

static void hs_timeout(void *arg)
{
    srv_conn *sc = arg;
    sc->deadline = NULL; /* one-shot: gone once this returns */
    pre_fail(sc, MC_AUTH_TIMEOUT, NULL, 0);
}

/* One complete handshake frame is in sc->in (n bytes). */
static void pre_frame(srv_conn *sc, size_t n)
{
    uint8_t out[MC_AUTH_FRAME_MAX];
    size_t olen = 0;
    int rc;
    sc->have = 0;
    bool hello = sc->phase == PH_HELLO; /* HELLO -> CHALLENGE, else RESPONSE -> RESULT */
    rc = hello ? mc_auth_server_challenge(&sc->hs, sc->in, n, out, sizeof out, &olen)
               : mc_auth_server_verify(&sc->hs, sc->in, n, out, sizeof out, &olen);
    if (rc) {
        pre_fail(sc, -rc, out, olen);
        return;
    }
    if (!pre_send(sc, out, olen)) {
        pre_fail(sc, MC_AUTH_IO, NULL, 0);
        return;
    }
    if (hello) {
        sc->phase = PH_RESPONSE;
        return;
    }
    count(&sc->lc->srv->authed, 1);
    to_rpc(sc, NULL, 0);
}

static void pre_io(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)loop;
    (void)events;
    srv_conn *sc = arg;
    /* how much to read: never past the current frame (nothing of what follows) */
    size_t want;
    if (sc->phase == PH_SNIFF) {
        want = 4 - sc->have;
    } else if (sc->have < MC_AUTH_HEADER) {
        want = MC_AUTH_HEADER - sc->have;
    } else {
        size_t blen = ((size_t)sc->in[6] << 8) | sc->in[7];
        want = MC_AUTH_HEADER + blen - sc->have;
    }
    ssize_t n = recv(fd, sc->in + sc->have, want, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) { /* closed or failed before speaking the protocol */
        if (sc->phase == PH_SNIFF) /* open: nothing to tell, nothing to count */
            pre_close(sc);
        else
            pre_fail(sc, MC_AUTH_IO, NULL, 0);
        return;
    }
    sc->have += (size_t)n;
    sc->last_ms = mc_now_ms();
    if (sc->phase == PH_SNIFF) {
        /* open server: the RPC's magic "MCRP" and the handshake's "MCAU" share "MC" */
        if (!mc_auth_looks_like_frame(sc->in, sc->have)) {
            to_rpc(sc, sc->in, sc->have);
            return;
        }
        if (sc->have < 4)
            return;
        uint8_t r[MC_AUTH_FRAME_MAX];
        int m = mc_auth_result_frame(MC_AUTH_SERVER_NO_SECRET, r, sizeof r);
        if (m > 0)
            (void)pre_send(sc, r, (size_t)m);
        char who[64];
        uint8_t ip[16];
        peer_ip(fd, ip, who, sizeof who);
        refuse(sc->lc->srv, MC_RPC_REFUSED_SERVER_NO_SECRET, "%s: %s", who,
               mc_auth_error_text(MC_AUTH_SERVER_NO_SECRET, false));
        pre_close(sc);
        return;
    }
    mc_auth_frame f;
    int p = mc_auth_frame_parse(sc->in, sc->have, &f);
    if (p < 0) {
        /* wrong from the magic on: another protocol (a client without the secret) */
        size_t m = sc->have < 4 ? sc->have : 4;
        int code = sc->phase == PH_HELLO && !mc_auth_looks_like_frame(sc->in, m)
                       ? MC_AUTH_CLIENT_NO_SECRET
                       : (p == -EPROTONOSUPPORT ? MC_AUTH_BAD_VERSION : MC_AUTH_MALFORMED);
        pre_fail(sc, code, NULL, 0);
        return;
    }
    if (p > 0)
        pre_frame(sc, (size_t)p);
}

/* Runs on lc's loop: the connection's first phase. */
static void adopt_fd(loop_ctx *lc, int fd, const uint8_t ip[16])
{
    mc_master_rpc_server *srv = lc->srv;
    srv_conn *sc = mc_xcalloc(1, sizeof *sc);
    sc->lc = lc;
    sc->fd = fd;
    mc_list_init(&sc->replies);
    mc_list_init(&sc->dlink);
    memcpy(sc->ip, ip, 16);
    sc->last_ms = mc_now_ms();
    mc_list_push_front(&lc->conns, &sc->link);
    count(&srv->conns_total, 1);
    if (srv->auth) {
        sc->phase = PH_HELLO;
        if (mc_auth_hs_init(&sc->hs, srv->auth, MC_MASTER_RPC_AUTH_LABEL) != 0) {
            pre_close(sc);
            return;
        }
        sc->deadline = mc_loop_timer_add(lc->loop, srv->hs_ms, 0, hs_timeout, sc);
    } else {
        /* open: no deadline (as before: an idle connection is allowed) */
        sc->phase = PH_SNIFF;
    }
    if (mc_loop_add(lc->loop, fd, EPOLLIN | EPOLLRDHUP, pre_io, sc) != 0) {
        if (sc->deadline)
            mc_loop_timer_cancel(lc->loop, sc->deadline);
        sc->deadline = NULL;
        close(fd);
        sc->fd = -1;
        conn_gone(sc);
    }
}

typedef struct handoff {
    loop_ctx *lc;
    int fd;
    uint8_t ip[16];
} handoff;

static void handoff_task(void *arg)
{
    handoff *ho = arg;
    adopt_fd(ho->lc, ho->fd, ho->ip);
    free(ho);
}

static void on_accept(mc_loop *loop, int lfd, uint32_t events, void *arg)
{
    (void)loop;
    (void)events;
    mc_master_rpc_server *srv = arg;
    /* at most 64 accepts per wakeup, so a connect storm cannot starve loop 0's own
     * connections; level-triggered epoll calls again for the rest */
    for (int i = 0; i < 64; i++) {
        int fd = mc_sock_accept(lfd, true);
        if (fd < 0) {
            if (fd != -EAGAIN && fd != -EWOULDBLOCK && fd != -EINTR &&
                fd != -ECONNABORTED)
                mc_log(MC_LOG_WARN, TAG, "accept failed: %s", strerror(-fd));
            return;
        }
        /* the limits, before anything of the connection is kept */
        uint8_t ip[16];
        char who[64];
        peer_ip(fd, ip, who, sizeof who);
        if (__atomic_add_fetch(&srv->conns_active, 1, __ATOMIC_RELAXED) > srv->max_conns) {
            count(&srv->conns_active, -1);
            close(fd);
            refuse(srv, MC_RPC_REFUSED_CONN_LIMIT,
                   "%s: %u connections are open (--rpc_max_connections)", who,
                   srv->max_conns);
            continue;
        }
        if (!ip_take(srv, ip)) {
            count(&srv->conns_active, -1);
            close(fd);
            refuse(srv, MC_RPC_REFUSED_PER_IP_LIMIT,
                   "%s has %u connections open (--rpc_max_connections_per_ip)", who,
                   srv->max_conns_ip);
            continue;
        }
        if (srv->nodelay) /* --rpc_enable_tcp_no_delay (default true) */
            mc_sock_set_nodelay(fd);
        loop_ctx *lc = &srv->lcs[srv->rr++ % srv->n]; /* round robin over the loops */
        if (lc == &srv->lcs[0]) {
            adopt_fd(lc, fd, ip);
            continue;
        }
        /* another loop's connections belong to its thread: hand the fd over */
        handoff *ho = mc_xmalloc(sizeof *ho);
        ho->lc = lc;
        ho->fd = fd;
        memcpy(ho->ip, ip, 16);
        if (mc_loop_post(lc->loop, handoff_task, ho) != 0) { /* loop stopping: drop it */
            close(fd);
            free(ho);
            ip_give(srv, ip);
            count(&srv->conns_active, -1);
        }
    }
}

static void add_listener_task(void *arg)
{
    mc_master_rpc_server *srv = arg;
    int rc = mc_loop_add(srv->lcs[0].loop, srv->lfd, EPOLLIN, on_accept, srv);
    if (rc)
        mc_log(MC_LOG_ERROR, TAG, "cannot watch the listening socket: %s", strerror(-rc));
}

/* Runs on each loop at shutdown: loop 0 also stops accepting. */
static void close_all_task(void *arg)
{
    loop_ctx *lc = arg;
    if (lc == &lc->srv->lcs[0] && lc->srv->lfd >= 0)
        mc_loop_del(lc->loop, lc->srv->lfd);
    mc_list *it;
    while ((it = mc_list_front(&lc->conns))) { /* on_close / pre_close unlink and free */
        srv_conn *sc = MC_CONTAINER_OF(it, srv_conn, link);
        if (sc->phase == PH_RPC)
            mc_conn_close(sc->c);
        else
            pre_close(sc);
    }
}

/* Runs on each loop every sweep period when idle_ms is set: closes its connections that
 * sent nothing for idle_ms (upstream coro_rpc's conn_timeout_duration). */
static void idle_sweep(void *arg)
{
    loop_ctx *lc = arg;
    uint64_t now = mc_now_ms();
    unsigned idle_ms = lc->srv->idle_ms;
    mc_list *it = mc_list_front(&lc->conns);
    while (it) {
        /* closing unlinks and frees it (synchronously: a timer is no conn callback) */
        mc_list *next = it->next == &lc->conns ? NULL : it->next;
        srv_conn *sc = MC_CONTAINER_OF(it, srv_conn, link);
        /* a connection waiting for its kept replies is not idle; one mid-body is while
         * no byte of that body comes */
        uint64_t last = sc->last_ms;
        if (sc->phase == PH_RPC && sc->reserved && mc_conn_last_rx_ms(sc->c) > last)
            last = mc_conn_last_rx_ms(sc->c);
        if (now - last >= idle_ms && mc_list_empty(&sc->replies)) {
            mc_log(MC_LOG_DEBUG, TAG, "closing a connection idle for %llu ms "
                   "(--rpc_conn_timeout_seconds)", (unsigned long long)(now - last));
            if (sc->phase == PH_RPC)
                mc_conn_close(sc->c);
            else
                pre_close(sc);
        }
        it = next;
    }
}

static void tick_task(void *arg)
{
    mc_master_rpc_server *srv = arg;
    mc_master_service_tick(srv->svc);
}

/* ---- lifecycle ---- */

static unsigned default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > 4 ? 4 : (unsigned)n;
}

int mc_master_rpc_server_start(mc_master_service *svc, const mc_master_rpc_server_opts *opts,
                               mc_master_rpc_server **out)
{
    mc_master_rpc_server_opts o = {0};
    if (opts)
        o = *opts;
    if (!svc || !out)
        return -EINVAL;
    mc_master_rpc_server *srv = mc_xcalloc(1, sizeof *srv);
    srv->svc = svc;
    srv->n = o.threads ? o.threads : default_threads();
    srv->max_body = o.max_body ? o.max_body : MC_MASTER_RPC_MAX_BODY;
    if (srv->max_body > MC_MASTER_RPC_MAX_BODY)
        srv->max_body = MC_MASTER_RPC_MAX_BODY;
    srv->lfd = -1;
    srv->auth = mc_auth_enabled(o.auth) ? o.auth : NULL;
    srv->hs_ms = o.handshake_timeout_ms ? o.handshake_timeout_ms : DEF_HANDSHAKE_MS;
    srv->idle_ms = o.idle_timeout_ms;
    srv->nodelay = !o.no_tcp_nodelay;
    srv->max_conns = o.max_connections ? o.max_connections : DEF_MAX_CONNS;
    srv->max_conns_ip = o.max_connections_per_ip ? o.max_connections_per_ip : DEF_MAX_CONNS_IP;
    srv->max_pending = o.max_pending_request_bytes ? o.max_pending_request_bytes
                                                   : DEF_MAX_PENDING;
    srv->max_unread = o.max_unread_reply_bytes ? o.max_unread_reply_bytes : DEF_MAX_UNREAD;
    srv->pause = o.pause_reply_bytes ? o.pause_reply_bytes : DEF_PAUSE;
    if (srv->pause > srv->max_unread / 2)
        srv->pause = srv->max_unread / 2;
    pthread_mutex_init(&srv->ip_mu, NULL);
    unsigned tick_ms = o.tick_ms ? o.tick_ms : 10;
    const char *host = o.host && *o.host ? o.host : "0.0.0.0";

    /* a deep accept queue: under a connection flood the refusals drain it, and a
     * legitimate client's SYN must not be dropped meanwhile (as the HTTP ports) */
    int rc = mc_sock_listen_tcp(host, o.port, 4096, false, &srv->port);
    if (rc < 0) {
        pthread_mutex_destroy(&srv->ip_mu);
        free(srv);
        return rc;
    }
    srv->lfd = rc;
    mc_sock_set_nonblock(srv->lfd, true);

    srv->lcs = mc_xcalloc(srv->n, sizeof *srv->lcs);
    for (unsigned i = 0; i < srv->n; i++) {
        mc_list_init(&srv->lcs[i].conns); /* before any failure: destroy walks them all */
        mc_list_init(&srv->lcs[i].kept);
    }
    for (unsigned i = 0; i < srv->n; i++) {
        loop_ctx *lc = &srv->lcs[i];
        lc->srv = srv;
        rc = mc_loop_create(&lc->loop);
        if (rc)
            goto fail;
        /* every request's reply waits on this loop, which otherwise sleeps between a
         * client's calls: it polls before it sleeps (common/spin.h) */
        mc_loop_set_busy_poll(lc->loop, o.busy_poll_us);
        lc->h = mc_master_rpc_handler_create(svc);
        mc_master_rpc_handler_set_open(lc->h, srv->auth == NULL);
        if (srv->idle_ms) { /* before the loop runs: allowed from this thread */
            uint64_t every = srv->idle_ms / 4;
            every = every < 100 ? 100 : every > 1000 ? 1000 : every;
            lc->idle = mc_loop_timer_add(lc->loop, every, every, idle_sweep, lc);
            if (!lc->idle) {
                rc = -ENOMEM;
                goto fail;
            }
        }
    }
    rc = mc_loop_create(&srv->hk);
    if (rc)
        goto fail;
    if (!mc_loop_timer_add(srv->hk, tick_ms, tick_ms, tick_task, srv)) {
        rc = -ENOMEM;
        goto fail;
    }
    /* replies that wait for their log record are kept, not waited for (persist.h) */
    mc_master_log_set_notify(svc, log_notify, srv);
    add_listener_task(srv); /* before loop 0 runs: allowed from this thread */
    for (unsigned i = 0; i < srv->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "mc-rpc-%u", i % 1000u);
        rc = mc_loop_start_thread(srv->lcs[i].loop, name);
        if (rc)
            goto fail;
        srv->lcs[i].started = true;
    }
    rc = mc_loop_start_thread(srv->hk, "mc-tick");
    if (rc)
        goto fail;
    srv->hk_started = true;
    *out = srv;
    return 0;
fail:
    mc_master_rpc_server_destroy(srv);
    return rc;
}

uint16_t mc_master_rpc_server_port(const mc_master_rpc_server *srv)
{
    return srv->port;
}

unsigned mc_master_rpc_server_threads(const mc_master_rpc_server *srv)
{
    return srv->n;
}

void mc_master_rpc_server_get_stats(mc_master_rpc_server *srv,
                                    mc_master_rpc_server_stats *out)
{
    out->connections_active = __atomic_load_n(&srv->conns_active, __ATOMIC_RELAXED);
    out->connections_total = __atomic_load_n(&srv->conns_total, __ATOMIC_RELAXED);
    out->connections_bad = __atomic_load_n(&srv->conns_bad, __ATOMIC_RELAXED);
    out->frames = __atomic_load_n(&srv->frames, __ATOMIC_RELAXED);
    out->frames_refused = __atomic_load_n(&srv->frames_refused, __ATOMIC_RELAXED);
    out->authenticated_total = __atomic_load_n(&srv->authed, __ATOMIC_RELAXED);
    out->pending_request_bytes = __atomic_load_n(&srv->pending, __ATOMIC_RELAXED);
    for (int i = 0; i < MC_RPC_REFUSED_COUNT; i++)
        out->refused[i] = __atomic_load_n(&srv->refused[i], __ATOMIC_RELAXED);
}

/* Stops one loop after closing its connections (posted tasks run before the stop). */
static void stop_loop(loop_ctx *lc)
{
    if (!lc->loop)
        return;
    if (lc->started) {
        mc_loop_post(lc->loop, close_all_task, lc);
        mc_loop_join(lc->loop);
        lc->started = false;
    } else {
        close_all_task(lc);
    }
}

void mc_master_rpc_server_destroy(mc_master_rpc_server *srv)
{
    if (!srv)
        return;
    mc_master_log_set_notify(srv->svc, NULL, NULL); /* no call into srv after this */
    if (srv->hk_started)
        mc_loop_join(srv->hk);
    /* Loop 0 first: it owns the listener, so no connection is handed off afterwards. */
    if (srv->lcs) {
        for (unsigned i = 0; i < srv->n; i++)
            stop_loop(&srv->lcs[i]);
        for (unsigned i = 0; i < srv->n; i++) {
            mc_loop_destroy(srv->lcs[i].loop);
            mc_master_rpc_handler_destroy(srv->lcs[i].h);
        }
        free(srv->lcs);
    }
    mc_loop_destroy(srv->hk);
    if (srv->lfd >= 0)
        close(srv->lfd);
    pthread_mutex_destroy(&srv->ip_mu);
    free(srv->ips);
    free(srv);
}
