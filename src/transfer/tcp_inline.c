/* tcp_inline.c: the calling thread moves a small READ run itself (issue 17).
 *
 * mc_te_submit_inline's caller waits for its batch at once; for a run of small READs to
 * one peer (mc__te_inline_fits) handing the run to an I/O thread costs two thread
 * handoffs (the I/O thread is woken to send, the caller is woken by it when the replies
 * are in) while the caller only polls. Here the caller sends the run's requests and
 * receives the replies on a connection of its own, then returns with the slices done.
 * Measured on the 2-CPU box (docs/performance.md "Session 17"): a 4 KiB x 128
 * batch_get_into over TCP, p50 per batch, 160-170 us against a bimodal 185-360 us.
 *
 * Private connections are ordinary data connections for the serving side (HELLO first,
 * the cluster secret's handshake before it when one is set; the server's limits apply),
 * pooled per peer (te_peer.inl_*: at most TE_INLINE_CONNS, one caller at a time each) and
 * never registered with an I/O loop. The replies of a run (at most TE_CONN_FILL bytes
 * of payload) are received into the connection's buffer and each payload is copied into
 * the caller's memory only once its header said status 0 (docs/consistency.md "Reads":
 * a failed read leaves the caller's buffer untouched), as the I/O threads do for small
 * payloads (TE_RBUF_COPY_MAX).
 *
 * Anything unusual gives the rest of the run to the lanes, as mc__te_peer_enqueue would
 * have sent it (a READ is idempotent): no private connection (the pool is in use, or
 * one could not be opened: then none is tried for TE_INLINE_RETRY_MS, and once the peer
 * did not answer in time an open waits only for the caller's budget), a socket error,
 * a malformed reply, or the caller's budget (until_ms) spent. The private connection is
 * closed first, so no byte of it lands later; after a socket error the peer's
 * descriptor is fetched again first (a restarted peer has a new data port, and a caller
 * whose reads all went inline has no lane connection that saw it go); the lanes'
 * retries, timeouts and logging then apply as to any slice. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/spin.h"
#include "common/xalloc.h"
#include "mooncake/mc_time.h"
#include "net/sock.h"
#include "transfer/internal.h"

typedef struct te_iconn {
    int fd;
    uint64_t gen; /* the peer's descriptor generation it was opened under */
    char *buf;    /* TE_INLINE_SLICES request headers, then the run's replies */
} te_iconn;

#define REQ_BYTES ((size_t)TE_INLINE_SLICES * MC_TE_REQ_SIZE)
#define BUF_BYTES (REQ_BYTES + (size_t)TE_INLINE_SLICES * MC_TE_REP_SIZE + TE_CONN_FILL)

bool mc__te_inline_fits(const te_slice *first, const te_slice *last)
{
    uint64_t bytes = 0;
    size_t n = 0;
    for (const te_slice *s = first;; s = s->next) {
        if (s->op != MC_TE_WOP_READ || s->len > TE_RBUF_COPY_MAX || ++n > TE_INLINE_SLICES)
            return false;
        bytes += s->len;
        if (s == last)
            break;
    }
    return bytes <= TE_CONN_FILL;
}

/* A new private connection to p (connected, authenticated when the engine has a
 * secret, HELLO answered), or NULL. Counted in mc_te_stats.connections_opened once a
 * socket is made, as the lanes' are, and in connections_failed when it fails before it
 * can serve (connect, handshake, or HELLO refused). */
static te_iconn *iconn_open(te_peer *p, uint64_t until_ms)
{
    mc_te *te = p->te;
    struct sockaddr_storage sa;
    socklen_t salen;
    uint64_t gen;
    int fd = mc__te_data_socket(p, &sa, &salen, &gen);
    if (fd < 0)
        return NULL;
    atomic_fetch_add(&te->st.conn_open, 1);
    mc_sock_set_keepalive(fd, 60, 10, 6); /* as the lanes' connections */
    if (connect(fd, (struct sockaddr *)&sa, salen) < 0) {
        int err = 0;
        socklen_t el = sizeof err;
        if (errno != EINPROGRESS || mc_sock_wait(fd, POLLOUT, until_ms) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err)
            goto fail;
    }
    if (te->auth) { /* the secret's handshake before any request byte (peerauth.c) */
        te_auth_cli a;
        uint64_t auth_until = mc_now_ms() + te->auth_timeout_ms;
        if (auth_until > until_ms)
            auth_until = until_ms;
        int rc = mc__te_auth_cli_start(te, &a, fd, TE_AUTH_DATA);
        while (rc == 0 && (rc = mc__te_auth_cli_io(te, &a, fd, p->name)) == 0)
            if (mc_sock_wait(fd, POLLIN, auth_until) < 0)
                rc = -1;
        if (rc != 1)
            goto fail;
    }
    uint64_t hi, lo;
    mc__te_writer_id(te, &hi, &lo);
    uint8_t req[MC_TE_REQ_SIZE], rep[MC_TE_REP_SIZE];
    uint64_t id = atomic_fetch_add(&te->next_req_id, 1);
    mc__te_req_encode(&(mc__te_req){.op = MC_TE_WOP_HELLO, .id = id, .addr = hi, .len = lo},
                      req);
    mc__te_rep r;
    if (mc_sock_send_all(fd, req, sizeof req, until_ms) < 0 ||
        mc_sock_recv_all(fd, rep, sizeof rep, until_ms) < 0 ||
        mc__te_rep_decode(rep, id, MC_TE_WOP_HELLO, 0, &r) < 0 || r.status != 0)
        goto fail; /* a refusal is logged by the lanes' connection that follows */
    te_iconn *c = mc_xmalloc(sizeof *c);
    c->fd = fd;
    c->gen = gen;
    c->buf = mc_xmalloc(BUF_BYTES);
    return c;
fail:
    close(fd);
    atomic_fetch_add(&te->st.conn_fail, 1);
    return NULL;
}

static void iconn_free(te_iconn *c)
{
    close(c->fd);
    free(c->buf);
    free(c);
}

/* An idle private connection of p, or a new one; NULL when the pool is in use or none
 * can be opened now. Opening one (once per connection) may take up to TE_INLINE_OPEN_MS
 * past the caller's budget: a handshake cut short would read as a refused client on the
 * serving side (peerauth.c counts it and logs it at most every 10 s). But once the peer
 * was slow (inl_slow: it sent nothing in a run's budget of at least TE_INLINE_SLOW_MS,
 * or an open ran out), an open waits only for the caller's budget: a stopped peer
 * accepts connections in its kernel and never answers, and each read would otherwise
 * block a second past its budget, far past the store's hedge. Any failed open stops new
 * ones for TE_INLINE_RETRY_MS; one that ran out of time marks the peer slow, a
 * successful one clears that. */
static te_iconn *iconn_get(te_peer *p, uint64_t until_ms)
{
    te_iconn *c = NULL, *old = NULL;
    bool open = false, slow;
    pthread_mutex_lock(&p->lock);
    slow = p->inl_slow;
    if (p->inl_nidle) {
        c = p->inl_idle[--p->inl_nidle];
        if (c->gen != p->gen) { /* opened before the peer's descriptor changed */
            old = c;
            c = NULL;
            p->inl_open--;
        }
    }
    if (!c && p->inl_open < TE_INLINE_CONNS && mc_now_ms() >= p->inl_retry_ms) {
        p->inl_open++;
        open = true;
    }
    pthread_mutex_unlock(&p->lock);
    if (old)
        iconn_free(old);
    if (open) {
        uint64_t open_until = mc_now_ms() + TE_INLINE_OPEN_MS;
        if (slow || open_until < until_ms)
            open_until = until_ms;
        c = iconn_open(p, open_until);
        uint64_t now = mc_now_ms();
        pthread_mutex_lock(&p->lock);
        if (!c) {
            p->inl_open--;
            p->inl_retry_ms = now + TE_INLINE_RETRY_MS;
            p->inl_slow |= now >= open_until;
        } else {
            p->inl_slow = false;
        }
        pthread_mutex_unlock(&p->lock);
    }
    return c;
}

/* Returns c to p's pool (ok), or closes it; slow: the peer sent nothing in the caller's
 * budget (it is marked slow, see iconn_get). */
static void iconn_put(te_peer *p, te_iconn *c, bool ok, bool slow)
{
    pthread_mutex_lock(&p->lock);
    p->inl_slow |= slow;
    if (ok && p->inl_nidle < TE_INLINE_CONNS) {
        p->inl_idle[p->inl_nidle++] = c;
        c = NULL;
    } else {
        p->inl_open--;
    }
    pthread_mutex_unlock(&p->lock);
    if (c)
        iconn_free(c);
}

void mc__te_inline_close(te_peer *p)
{
    pthread_mutex_lock(&p->lock);
    unsigned n = p->inl_nidle;
    te_iconn *idle[TE_INLINE_CONNS];
    memcpy(idle, p->inl_idle, n * sizeof *idle);
    p->inl_nidle = 0;
    p->inl_open -= n;
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < n; i++)
        iconn_free(idle[i]);
}

/* The run's progress while the caller waits for its socket (spin.h's poll). */
typedef struct run_io {
    int fd;
    const char *req;
    size_t req_len, sent;
    char *in;
    size_t want, got;
    int err; /* a socket error or EOF: -1 */
} run_io;

/* One non-blocking round: sends what is unsent, receives what is there. True when
 * something moved (or failed): the caller looks again at once. */
static bool run_step(void *arg)
{
    run_io *r = arg;
    bool moved = false;
    if (r->sent < r->req_len) {
        ssize_t k = mc_sock_send_nb(r->fd, r->req + r->sent, r->req_len - r->sent);
        if (k < 0) {
            r->err = -1;
            return true;
        }
        r->sent += (size_t)k;
        moved = k > 0;
    }
    if (r->got < r->want) {
        /* asked first without the socket's lock (tcp_poll): a recv that finds nothing
         * still locks the socket, and the peer's packets then wait in its backlog until
         * we let go. Measured (two callers, 4 KiB x 128): 435-560k values/s polling with
         * recv, 650-880k asking poll first (inline off: 640-800k) */
        struct pollfd pf = {.fd = r->fd, .events = POLLIN};
        if (poll(&pf, 1, 0) == 0)
            return moved;
        ssize_t k = mc_sock_recv_nb(r->fd, r->in + r->got, r->want - r->got);
        if (k < 0) { /* an error, or EOF (-ECONNRESET) */
            r->err = -1;
            return true;
        }
        r->got += (size_t)k;
        moved = moved || k > 0;
    }
    return moved;
}

void mc__te_inline_run(te_peer *p, te_slice *first, te_slice *last, uint64_t until_ms)
{
    static _Thread_local mc_spin_site site;
    mc_te *te = p->te;
    last->next = NULL;
    te_iconn *c = iconn_get(p, until_ms);
    if (!c) {
        atomic_fetch_add(&te->st.inline_handed, 1);
        mc__te_peer_enqueue(p, first, last);
        return;
    }
    run_io r = {.fd = c->fd, .req = c->buf, .in = c->buf + REQ_BYTES};
    for (te_slice *s = first; s; s = s->next) {
        s->tries = 1;
        s->id = atomic_fetch_add(&te->next_req_id, 1);
        mc__te_req_encode(&(mc__te_req){.op = MC_TE_WOP_READ, .id = s->id, .addr = s->remote,
                                        .len = s->len},
                          (uint8_t *)c->buf + r.req_len);
        r.req_len += MC_TE_REQ_SIZE;
        r.want += MC_TE_REP_SIZE + s->len;
    }
    te_slice *s = first; /* the first slice whose reply is not parsed yet */
    size_t pos = 0;      /* its reply's offset in r.in */
    /* a budget under TE_INLINE_SLOW_MS (one cut near a lease's end) says nothing about
     * the peer */
    bool ok = true, judge = until_ms >= mc_now_ms() + TE_INLINE_SLOW_MS;
    while (s) {
        bool moved = run_step(&r);
        if (!moved && mc_now_ms() >= until_ms) {
            ok = false; /* the budget is spent */
            break;
        }
        if (!moved && !mc_spin_until(&site, run_step, &r)) {
            bool ev = mc_sock_wait(r.fd, r.sent < r.req_len ? POLLIN | POLLOUT : POLLIN,
                                   until_ms) > 0;
            mc_spin_woke(&site, ev);
            if (!ev) {
                ok = false; /* the budget is spent (or the socket failed) */
                break;
            }
        }
        if (r.err) {
            ok = false;
            break;
        }
        /* every complete reply: decoded, its payload copied out when its status is 0 */
        while (s && r.got - pos >= MC_TE_REP_SIZE + s->len) {
            mc__te_rep rep;
            memcpy(s->rhdr, r.in + pos, MC_TE_REP_SIZE);
            if (mc__te_rep_decode(s->rhdr, s->id, s->op, s->len, &rep) < 0) {
                ok = false; /* malformed: the lanes' connection will say so */
                break;
            }
            if (rep.status == 0) {
                memcpy(s->local, r.in + pos + MC_TE_REP_SIZE, s->len);
                atomic_fetch_add(&te->st.tcp_recv, s->len);
                atomic_fetch_add(&te->st.inline_recv, s->len);
            }
            pos += MC_TE_REP_SIZE + s->len;
            te_slice *next = s->next;
            s->next = NULL;
            s->status = rep.status;
            mc__te_task_slice_done(te, s, rep.status);
            s = next;
        }
        if (!ok)
            break;
    }
    /* slow: the peer sent nothing at all in a budget that said something */
    bool silent = !ok && judge && !r.err && r.got == 0 && mc_now_ms() >= until_ms;
    iconn_put(p, c, ok, silent);
    if (r.err) /* the peer may have restarted (a new data port): what the lanes do next
                  needs its descriptor as it is now (on failure they fail as usual) */
        mc__te_peer_refresh(te, p);
    if (s) { /* the rest goes the usual way, with its retries and timeouts */
        atomic_fetch_add(&te->st.inline_handed, 1);
        for (te_slice *t = s; t; t = t->next) {
            t->tries = 0;
            t->status = 0;
        }
        mc__te_peer_enqueue(p, s, last);
    }
}
