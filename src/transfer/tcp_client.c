/* tcp_client.c: the initiator side of the TCP data path (loop thread).
 *
 * A peer's connections are spread over its lanes (te_lane: one per I/O loop, up to
 * min(io threads, conns_per_peer), each owning its share of conns_per_peer). Slices
 * reach a lane's loop through the lane's inbox (any thread; mc__te_peer_enqueue spreads
 * a submission over the lanes, or keeps a batch of small slices on the calling thread's
 * lane) and are spread over that lane's connections:
 * small slices fill one connection up to TE_CONN_FILL bytes first, larger ones go
 * least-loaded first (internal.h says why). Each connection keeps its
 * slices in wire order: requests are written with sendmsg straight from the source
 * buffers (headers and payloads gathered, many slices per call); replies come back in
 * the same order and, since their layout is fixed (wire.h), are scattered with one
 * recvmsg straight into the reply headers and READ destinations. A broken connection
 * hands its slices to another connection once (a WRITE only if none of it was handed
 * to the socket: the old connection might still deliver it); past their deadline they
 * fail. Every connection starts with a HELLO (our writer id; the reply carries the
 * server's wire version). A READ reply's header is decoded before its payload is
 * received: only a successful payload lands in the caller's buffer, a refused one is
 * drained into scratch. A WRITE refused by the target fence (fence.c) before its header
 * was sent goes out as a PING instead (keeping the wire order) and fails -ESTALE.
 * With a cluster secret a connection authenticates (peerauth.c, state TE_CC_AUTH)
 * before its HELLO: no request byte is sent before the server has accepted our proof
 * and proved its own. A failed handshake fails the connection's slices (no retry: the
 * next connection would fail the same way) and is logged with the reason; so is the
 * RESULT an engine with a secret answers our HELLO with when we have none. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "net/sock.h"
#include "transfer/internal.h"

#define IOV_BATCH 256 /* iovecs per request sendmsg: 127 small WRITEs or 255 READs (UIO_MAXIOV 1024) */
#define MAX_TRIES 2
#define SCRATCH 65536 /* io->scratch */

static void cconn_io(mc_loop *loop, int fd, uint32_t events, void *arg);
static void dispatch(te_lane *l, te_slice *list);

static uint64_t send_len(const te_slice *s)
{
    return MC_TE_REQ_SIZE + (s->op == MC_TE_WOP_WRITE || s->op == MC_TE_WOP_NOTIFY ? s->len : 0);
}

/* A WRITE refused by the target fence: it becomes a PING (no payload). */
static void make_stale(mc_te *te, te_slice *s)
{
    s->stale = true;
    s->op = MC_TE_WOP_PING;
    mc__te_req req = {.op = MC_TE_WOP_PING, .id = s->id};
    mc__te_req_encode(&req, s->hdr);
    atomic_fetch_add(&te->st.stale_sends, 1);
}

static uint64_t recv_len(const te_slice *s)
{
    return MC_TE_REP_SIZE + (s->op == MC_TE_WOP_READ ? s->len : 0);
}

static void set_events(te_cconn *c, uint32_t ev)
{
    if (c->events != ev && mc_loop_mod(c->io->loop, c->fd, ev) == 0)
        c->events = ev;
}

static void cconn_unlink(te_cconn *c)
{
    te_lane *l = c->lane;
    unsigned last = l->nconns - 1;
    l->conns[c->idx] = l->conns[last];
    l->conns[c->idx]->idx = c->idx;
    l->conns[last] = NULL;
    l->nconns--;
    mc_list_remove(&c->link);
}

/* Closes c; its slices are retried elsewhere (once), or fail with err / -ETIMEDOUT when
 * their deadline has passed. retry=false fails them all (shutdown). */
static void cconn_fail(te_cconn *c, int err, bool retry)
{
    te_peer *p = c->peer;
    mc_te *te = p->te;
    mc_loop_del(c->io->loop, c->fd);
    close(c->fd);
    cconn_unlink(c);
    if (!c->ever_ready)
        atomic_fetch_add(&te->st.conn_fail, 1);
    else if (c->head == &c->hello && (err == -ECONNRESET || err == -EPIPE))
        mc_log(MC_LOG_WARN, TE_TAG,
               "peer %s closed the data connection without answering HELLO (an engine "
               "speaking transfer wire version 1 does that; this one speaks version %d)",
               p->name, MC_TE_WIRE_VERSION);
    if (err != -ETIMEDOUT && err != -ECANCELED) {
        pthread_mutex_lock(&p->lock);
        p->stale = true;
        pthread_mutex_unlock(&p->lock);
    }
    uint64_t now = mc__te_now_ms(te);
    te_slice *again = NULL, **tail = &again;
    te_slice *s = c->head;
    bool past = false; /* at or after send_cur */
    while (s) {
        te_slice *next = s->next;
        s->next = NULL;
        bool sent = !past; /* (some of) s was handed to the socket */
        if (s == c->send_cur) {
            sent = c->send_off > 0;
            past = true;
        }
        if (s == &c->hello) {
            s = next;
            continue;
        }
        if (s->stale) {
            mc__te_task_slice_done(te, s, -ESTALE);
        } else if (retry && s->tries < MAX_TRIES && now < s->deadline_ms &&
                   !(sent && s->op == MC_TE_WOP_WRITE)) {
            *tail = s;
            tail = &s->next;
        } else {
            mc__te_task_slice_done(te, s, now >= s->deadline_ms ? -ETIMEDOUT : err);
        }
        s = next;
    }
    te_lane *l = c->lane;
    free(c->auth);
    free(c->in.buf);
    free(c);
    if (again)
        dispatch(l, again); /* a slice stays on its lane */
}

int mc__te_data_socket(te_peer *p, struct sockaddr_storage *sa, socklen_t *salen,
                       uint64_t *gen)
{
    pthread_mutex_lock(&p->lock);
    *sa = p->data_sa;
    *salen = p->data_salen;
    if (gen)
        *gen = p->gen;
    pthread_mutex_unlock(&p->lock);
    if (!*salen)
        return -1;
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0)
        mc_sock_set_nodelay(fd);
    return fd;
}

static te_cconn *cconn_new(te_lane *l)
{
    te_peer *p = l->peer;
    mc_te *te = p->te;
    struct sockaddr_storage sa;
    socklen_t salen;
    int fd = mc__te_data_socket(p, &sa, &salen, NULL);
    if (fd < 0)
        return NULL;
    atomic_fetch_add(&te->st.conn_open, 1); /* failed ones are counted of these */
    mc_sock_set_keepalive(fd, 60, 10, 6);
    int state = te->auth ? TE_CC_AUTH : TE_CC_READY;
    if (connect(fd, (struct sockaddr *)&sa, salen) < 0) {
        if (errno != EINPROGRESS) {
            close(fd);
            atomic_fetch_add(&te->st.conn_fail, 1);
            pthread_mutex_lock(&p->lock);
            p->stale = true;
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        state = TE_CC_CONNECTING;
    }
    te_cconn *c = mc_xcalloc(1, sizeof *c);
    c->in.buf = mc_xmalloc(TE_RBUF_SIZE);
    c->peer = p;
    c->lane = l;
    c->io = l->io;
    c->fd = fd;
    c->state = state;
    c->ever_ready = state == TE_CC_READY;
    c->events = EPOLLIN | (state == TE_CC_CONNECTING ? EPOLLOUT : 0);
    if (state == TE_CC_AUTH) { /* connected at once: the handshake's HELLO goes first */
        c->auth = mc_xmalloc(sizeof *c->auth);
        if (mc__te_auth_cli_start(te, c->auth, fd, TE_AUTH_DATA) != 0) {
            close(fd);
            free(c->auth);
            free(c->in.buf);
            free(c);
            atomic_fetch_add(&te->st.conn_fail, 1);
            return NULL;
        }
    }
    if (mc_loop_add(c->io->loop, fd, c->events, cconn_io, c) < 0) {
        close(fd);
        free(c->auth);
        free(c->in.buf);
        free(c);
        atomic_fetch_add(&te->st.conn_fail, 1);
        return NULL;
    }
    c->idx = l->nconns;
    l->conns[l->nconns++] = c;
    mc_list_push_front(&c->io->cconns, &c->link);
    /* HELLO first: the server learns which writer this connection's WRITEs come from */
    uint64_t hi, lo;
    mc__te_writer_id(te, &hi, &lo);
    te_slice *h = &c->hello;
    h->peer = p;
    h->lane = l;
    h->op = MC_TE_WOP_HELLO;
    h->tries = 1;
    h->id = atomic_fetch_add(&te->next_req_id, 1);
    h->deadline_ms = mc_now_ms() + te->timeout_ms;
    mc__te_req req = {.op = MC_TE_WOP_HELLO, .id = h->id, .addr = hi, .len = lo};
    mc__te_req_encode(&req, h->hdr);
    c->head = c->tail = c->send_cur = h;
    return c;
}

/* The connection a slice of len bytes goes on: a small slice (at most TE_FILL_SLICE_MAX)
 * goes on the lane's first connection that holds at most TE_CONN_FILL bytes with it;
 * anything else on the least-loaded connection, a new one opened while the least-loaded
 * has work queued and the lane may open more. NULL when none can be opened. */
static te_cconn *pick(te_lane *l, uint64_t len)
{
    te_cconn *best = NULL;
    if (len <= TE_FILL_SLICE_MAX)
        for (unsigned i = 0; i < l->nconns; i++)
            if (l->conns[i]->queued + len <= TE_CONN_FILL)
                return l->conns[i];
    for (unsigned i = 0; i < l->nconns; i++)
        if (!best || l->conns[i]->queued < best->queued)
            best = l->conns[i];
    if (!best || (best->queued > 0 && l->nconns < l->max_conns)) {
        te_cconn *c = cconn_new(l);
        if (c)
            best = c;
    }
    return best;
}

/* Writes what the socket takes. Returns 0, or -1 when c was closed. */
static int cconn_flush(te_cconn *c)
{
    mc_te *te = c->peer->te;
    while (c->send_cur) {
        struct iovec iov[IOV_BATCH];
        int n = 0;
        uint64_t off = c->send_off;
        for (te_slice *s = c->send_cur; s && n < IOV_BATCH - 1; s = s->next, off = 0) {
            if (off == 0 && s->op == MC_TE_WOP_WRITE && mc__te_send_fenced(s->peer, s->epoch))
                make_stale(te, s); /* nothing of it sent yet: refuse it now */
            off = mc__te_iov_hdr(iov, &n, s->hdr, MC_TE_REQ_SIZE, off);
            uint64_t plen = send_len(s) - MC_TE_REQ_SIZE;
            if (plen > off) {
                iov[n].iov_base = s->local + off;
                iov[n++].iov_len = plen - off;
            }
        }
        ssize_t k = mc_sock_sendv_nb(c->fd, iov, n);
        if (k == 0) { /* the socket is full: wait for EPOLLOUT */
            set_events(c, EPOLLIN | EPOLLOUT);
            return 0;
        }
        if (k < 0) {
            cconn_fail(c, (int)k, true);
            return -1;
        }
        uint64_t left = (uint64_t)k;
        while (left && c->send_cur) {
            uint64_t rem = send_len(c->send_cur) - c->send_off;
            if (left >= rem) {
                left -= rem;
                if (c->send_cur->op == MC_TE_WOP_WRITE)
                    atomic_fetch_add(&te->st.tcp_sent, c->send_cur->len);
                c->send_cur = c->send_cur->next;
                c->send_off = 0;
            } else {
                c->send_off += left;
                left = 0;
            }
        }
    }
    set_events(c, EPOLLIN);
    return 0;
}

/* s's reply header is complete in s->rhdr: decodes it. Returns 0, or -1 when c was
 * closed (a malformed reply, or a refused HELLO). */
static int reply_header(te_cconn *c, te_slice *s)
{
    mc__te_rep rep;
    if (mc__te_rep_decode(s->rhdr, s->id, s->op, s->len, &rep) < 0) {
        mc_log(MC_LOG_WARN, TE_TAG, "peer %s: malformed reply, closing", c->peer->name);
        cconn_fail(c, -EPROTO, false);
        return -1;
    }
    s->status = rep.status;
    c->in.big = s->op == MC_TE_WOP_READ && s->len > TE_RBUF_COPY_MAX;
    if (s == &c->hello && rep.status != 0) {
        if (rep.status == -EPROTONOSUPPORT)
            mc_log(MC_LOG_ERROR, TE_TAG,
                   "peer %s speaks transfer wire version %llu, this engine speaks "
                   "version %d: refused (upgrade the older side)",
                   c->peer->name, (unsigned long long)rep.len, MC_TE_WIRE_VERSION);
        else
            mc_log(MC_LOG_WARN, TE_TAG, "peer %s refused HELLO (%d), closing", c->peer->name,
                   rep.status);
        cconn_fail(c, rep.status == -EPROTONOSUPPORT ? -EPROTONOSUPPORT : -EPROTO, false);
        return -1;
    }
    return 0;
}

/* head's reply is complete: takes it off the connection and finishes it. */
static void reply_done(te_cconn *c, te_slice *s)
{
    mc_te *te = c->peer->te;
    c->head = s->next;
    if (!c->head)
        c->tail = NULL;
    c->recv_off = 0;
    c->queued -= s->len;
    s->next = NULL;
    if (s == &c->hello)
        return;
    if (s->op == MC_TE_WOP_READ && s->status == 0)
        atomic_fetch_add(&te->st.tcp_recv, s->len);
    mc__te_task_slice_done(te, s, s->stale ? -ESTALE : s->status);
}

/* Consumes what c->in holds, reply by reply in wire order: header bytes into the head
 * slice's rhdr (decoded once complete), then a READ's payload, copied into the caller's
 * buffer only when its status is 0 (else dropped). Bytes that no request sent so far
 * can be answered by are a protocol error. Returns 0, or -1 when c was closed. */
/* Our HELLO was answered with an authentication RESULT (the server requires the
 * secret and we have none): returns 0 while the frame is incomplete, else logs why and
 * fails c (returns -1). */
static int hello_refused(te_cconn *c, te_slice *s)
{
    mc_auth_frame f;
    int n = mc_auth_frame_parse(s->rhdr, (size_t)c->recv_off, &f);
    if (n == 0 && c->recv_off < MC_TE_REP_SIZE)
        return 0;
    int code = n > 0 && f.type == MC_AUTH_RESULT ? f.code : MC_AUTH_MALFORMED;
    mc__te_auth_client_log(c->peer->te, "the data port", c->peer->name, code);
    cconn_fail(c, -EACCES, false);
    return -1;
}

static int cconn_parse(te_cconn *c)
{
    te_rbuf *in = &c->in;
    while (in->pos < in->len) {
        te_slice *s = c->head;
        if (!s || s == c->send_cur) {
            cconn_fail(c, -EPROTO, true); /* nothing is expected: garbage */
            return -1;
        }
        size_t avail = in->len - in->pos;
        const char *p = in->buf + in->pos;
        if (c->recv_off < MC_TE_REP_SIZE) {
            size_t take = MC_TE_REP_SIZE - (size_t)c->recv_off;
            if (take > avail)
                take = avail;
            memcpy(s->rhdr + c->recv_off, p, take);
            c->recv_off += take;
            in->pos += take;
            if (s == &c->hello && c->recv_off >= 4 && mc_auth_looks_like_frame(s->rhdr, 4))
                return hello_refused(c, s);
            if (c->recv_off < MC_TE_REP_SIZE)
                return 0;
            if (reply_header(c, s) < 0)
                return -1;
        } else {
            uint64_t off = c->recv_off - MC_TE_REP_SIZE;
            size_t take = s->len - off < avail ? (size_t)(s->len - off) : avail;
            if (s->status == 0) /* only a successful payload reaches the caller's buffer */
                memcpy(s->local + off, p, take);
            c->recv_off += take;
            in->pos += take;
        }
        if (c->recv_off == recv_len(s))
            reply_done(c, s);
    }
    return 0;
}

/* Reads replies. Returns 0, or -1 when c was closed. */
static int cconn_recv(te_cconn *c)
{
    te_rbuf *in = &c->in;
    for (int round = 0; round < 16; round++) {
        /* what is left unparsed is a partial header, or nothing: move it to the front */
        size_t rest = in->len - in->pos;
        if (in->pos) {
            memmove(in->buf, in->buf + in->pos, rest);
            in->pos = 0;
            in->len = rest;
        }
        struct iovec iov[2];
        int n = 0;
        uint64_t direct = 0; /* bytes asked for straight into the head READ's buffer */
        te_slice *s = c->head;
        if (s && s != c->send_cur && s->op == MC_TE_WOP_READ &&
            c->recv_off >= MC_TE_REP_SIZE && s->status == 0) {
            direct = recv_len(s) - c->recv_off; /* its header is decoded: status 0 */
            iov[n].iov_base = s->local + (c->recv_off - MC_TE_REP_SIZE);
            iov[n++].iov_len = direct;
        }
        size_t room = TE_RBUF_SIZE - in->len;
        if (in->big && room > MC_TE_REP_SIZE - rest)
            room = MC_TE_REP_SIZE - rest; /* after a large READ: the next header only */
        iov[n].iov_base = in->buf + in->len;
        iov[n++].iov_len = room;
        ssize_t k = mc_sock_recvv_nb(c->fd, iov, n);
        if (k == 0)
            return 0; /* nothing more now */
        if (k < 0) {
            cconn_fail(c, (int)k, true); /* EOF: -ECONNRESET */
            return -1;
        }
        uint64_t left = (uint64_t)k;
        if (direct) {
            uint64_t take = left < direct ? left : direct;
            c->recv_off += take;
            left -= take;
            if (c->recv_off == recv_len(s))
                reply_done(c, s);
        }
        in->len += left;
        if (cconn_parse(c) < 0)
            return -1;
        if ((uint64_t)k < direct + room)
            return 0; /* drained */
    }
    return 0;
}

static void cconn_io(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)loop;
    (void)fd;
    te_cconn *c = arg;
    if (c->state == TE_CC_CONNECTING) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            cconn_fail(c, -err, true);
            return;
        }
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        mc_te *te = c->peer->te;
        if (te->auth) {
            c->state = TE_CC_AUTH;
            c->auth = mc_xmalloc(sizeof *c->auth);
            if (mc__te_auth_cli_start(te, c->auth, c->fd, TE_AUTH_DATA) != 0) {
                mc__te_auth_client_log(te, "the data port", c->peer->name, MC_AUTH_IO);
                cconn_fail(c, -EACCES, false);
                return;
            }
            set_events(c, EPOLLIN);
            return;
        }
        c->state = TE_CC_READY;
        c->ever_ready = true;
        if (cconn_flush(c) < 0)
            return;
    }
    if (c->state == TE_CC_AUTH) {
        if (!(events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
            return;
        int rc = mc__te_auth_cli_io(c->peer->te, c->auth, c->fd, c->peer->name);
        if (rc < 0) {
            cconn_fail(c, -EACCES, false);
            return;
        }
        if (rc == 0)
            return;
        free(c->auth);
        c->auth = NULL;
        c->state = TE_CC_READY;
        c->ever_ready = true;
        cconn_flush(c); /* HELLO and what was queued meanwhile */
        return;
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        if (cconn_recv(c) < 0)
            return;
    }
    if (events & EPOLLOUT)
        cconn_flush(c);
}

/* Assigns slices (a NULL-terminated list) to l's connections and starts sending.
 * Loop thread of l. */
static void dispatch(te_lane *l, te_slice *list)
{
    te_peer *p = l->peer;
    mc_te *te = p->te;
    while (list) {
        te_slice *s = list;
        list = s->next;
        s->next = NULL;
        if (s->op == MC_TE_WOP_WRITE && mc__te_send_fenced(p, s->epoch)) {
            atomic_fetch_add(&te->st.stale_sends, 1);
            mc__te_task_slice_done(te, s, -ESTALE);
            continue;
        }
        te_cconn *c = pick(l, s->len);
        if (!c) {
            mc__te_task_slice_done(te, s, -ECONNREFUSED);
            continue;
        }
        s->tries++;
        s->id = atomic_fetch_add(&te->next_req_id, 1);
        mc__te_req req = {.op = s->op, .id = s->id, .addr = s->remote, .len = s->len,
                          .epoch = s->op == MC_TE_WOP_WRITE ? s->epoch : 0};
        mc__te_req_encode(&req, s->hdr);
        if (c->tail)
            c->tail->next = s;
        else
            c->head = s;
        c->tail = s;
        if (!c->send_cur) {
            c->send_cur = s;
            c->send_off = 0;
        }
        c->queued += s->len;
    }
    for (unsigned i = 0; i < l->nconns;) {
        te_cconn *c = l->conns[i];
        if (c->state == TE_CC_READY && c->send_cur && !(c->events & EPOLLOUT)) {
            unsigned before = l->nconns;
            cconn_flush(c);
            if (l->nconns < before)
                continue; /* c closed: slot i now holds another connection */
        }
        i++;
    }
}

static void lane_kick(void *arg)
{
    te_lane *l = arg;
    te_peer *p = l->peer;
    pthread_mutex_lock(&p->lock);
    te_slice *list = l->inbox_head;
    l->inbox_head = l->inbox_tail = NULL;
    l->kick_posted = false;
    pthread_mutex_unlock(&p->lock);
    dispatch(l, list);
}

/* Takes l's inbox under its peer's lock (clearing kick_posted when clear_kick) and fails
 * every slice in it with -ECANCELED. */
static void cancel_inbox(te_lane *l, bool clear_kick)
{
    te_peer *p = l->peer;
    pthread_mutex_lock(&p->lock);
    te_slice *list = l->inbox_head;
    l->inbox_head = l->inbox_tail = NULL;
    if (clear_kick)
        l->kick_posted = false;
    pthread_mutex_unlock(&p->lock);
    while (list) {
        te_slice *s = list;
        list = s->next;
        s->next = NULL;
        mc__te_task_slice_done(p->te, s, -ECANCELED);
    }
}

void mc__te_peer_lanes_init(te_peer *p)
{
    mc_te *te = p->te;
    unsigned n = te->nio < te->conns_per_peer ? te->nio : te->conns_per_peer;
    if (n < 1)
        n = 1;
    unsigned home = (unsigned)(p->io - te->io);
    for (unsigned i = 0; i < n; i++) {
        te_lane *l = &p->lanes[i];
        l->peer = p;
        l->io = &te->io[(home + i) % te->nio];
        l->max_conns = te->conns_per_peer / n + (i < te->conns_per_peer % n);
    }
    p->nlanes = n;
    atomic_init(&p->next_lane, 0);
}

static void lane_enqueue(te_lane *l, te_slice *first, te_slice *last)
{
    te_peer *p = l->peer;
    for (te_slice *s = first;; s = s->next) {
        s->lane = l;
        if (s == last)
            break;
    }
    last->next = NULL;
    pthread_mutex_lock(&p->lock);
    if (l->inbox_tail)
        l->inbox_tail->next = first;
    else
        l->inbox_head = first;
    l->inbox_tail = last;
    bool post = !l->kick_posted;
    l->kick_posted = true;
    pthread_mutex_unlock(&p->lock);
    if (post && mc_loop_post(l->io->loop, lane_kick, l) < 0)
        cancel_inbox(l, true); /* the loop is shutting down: fail what the inbox holds */
}

/* The lane a thread's small submissions go to (mc__te_peer_enqueue): threads are
 * numbered in the order they first submit one, process-wide, and thread k uses lane
 * k mod lanes. Best effort: an I/O loop thread that sends a batch's NOTIFY (batch.c)
 * takes a number too, so two callers can share a lane; nothing depends on the spread
 * but the speed. */
static unsigned thread_lane_seq(void)
{
    static atomic_uint next;
    static _Thread_local unsigned mine; /* 0: not numbered yet */
    if (!mine)
        mine = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) + 1;
    return mine - 1;
}

/* One lane: everything there. Several: a list of small slices that one connection would
 * take whole (every slice at most TE_FILL_SLICE_MAX, together at most TE_CONN_FILL: the
 * lane's own fill rule, pick) goes whole to the submitting thread's lane; another
 * single slice goes to the next lane in turn; a longer list is cut into one contiguous
 * run per lane, starting at the next lane in turn. Issue 17 (docs/performance.md,
 * Session 16): with two lanes on a 2-CPU box, a 4 KiB x 128 batch cut in two, or
 * batches alternating between the lanes, cost a second wakeup, sendmsg and recvmsg and
 * the threads' warm CPUs on both sides for no gain, while large batches and striped
 * pieces gain from moving on both lanes' threads; threads that each submit small
 * batches still spread over the lanes. */
void mc__te_peer_enqueue(te_peer *p, te_slice *first, te_slice *last)
{
    unsigned nl = p->nlanes;
    if (nl == 1) {
        lane_enqueue(&p->lanes[0], first, last);
        return;
    }
    size_t n = 1;
    uint64_t bytes = first->len;
    bool small = first->len <= TE_FILL_SLICE_MAX;
    for (te_slice *s = first; s != last; s = s->next) {
        n++;
        bytes += s->next->len;
        small = small && s->next->len <= TE_FILL_SLICE_MAX;
    }
    if (small && bytes <= TE_CONN_FILL) {
        lane_enqueue(&p->lanes[thread_lane_seq() % nl], first, last);
        return;
    }
    unsigned start = atomic_fetch_add_explicit(&p->next_lane, 1, memory_order_relaxed);
    if (n == 1) {
        lane_enqueue(&p->lanes[start % nl], first, last);
        return;
    }
    size_t per = (n + nl - 1) / nl;
    te_slice *s = first;
    for (unsigned i = 0; s; i++) {
        te_slice *run = s, *end = s;
        for (size_t k = 1; k < per && end != last; k++)
            end = end->next;
        s = end == last ? NULL : end->next;
        lane_enqueue(&p->lanes[(start + i) % nl], run, end);
    }
}

void mc__te_cconn_tick(te_io *io)
{
    /* Failing a connection retries its slices on others, which may close them too: so
     * after each failure the walk starts again (expired slices are never retried, so it
     * ends). */
    uint64_t now = mc__te_now_ms(io->te);
    te_cconn *c;
again:
    MC_LIST_FOREACH_ENTRY(c, &io->cconns, te_cconn, link) {
        if (c->head && now >= c->head->deadline_ms) {
            cconn_fail(c, -ETIMEDOUT, true);
            goto again;
        }
    }
}

/* Shutdown (loops stopped): closes every client connection of p and fails their
 * slices, plus what its lanes' inboxes hold. */
void mc__te_peer_close_conns(te_peer *p)
{
    for (unsigned i = 0; i < p->nlanes; i++) {
        te_lane *l = &p->lanes[i];
        while (l->nconns)
            cconn_fail(l->conns[0], -ECANCELED, false);
        cancel_inbox(l, false);
    }
}
