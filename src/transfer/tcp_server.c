/* tcp_server.c: the serving side of the TCP data path (loop threads).
 *
 * Per connection, bytes are read into a receive buffer (te_rbuf, TE_RBUF_SIZE) and
 * every complete request header in it is parsed in turn: each is checked (wire.h), and
 * so is its range against registered memory (regions.c) and, for a WRITE, the writer's
 * fence (fence.c), before anything is touched. A WRITE payload then goes into the
 * registered memory: the part already in the buffer is copied out of it, the rest is
 * received straight into the memory (with the next header read behind it in the same
 * recvmsg); after a payload larger than TE_RBUF_COPY_MAX the next read asks for one
 * header only, so large payloads are never copied twice. A READ queues a reply whose
 * payload is sent straight from the registered memory. So a stream of small requests
 * costs one recvmsg per buffer-full, not one per request. Refused ranges are answered
 * with -EFAULT and a fenced WRITE with -ESTALE; either payload is drained (consumed and
 * dropped, memory untouched). An unparseable header closes the connection; a header of
 * another wire version is answered -EPROTONOSUPPORT and the connection closed. Replies
 * are queued and gathered into one sendmsg after the read; parsing pauses while too
 * many replies wait to be sent. HELLO (the connection's writer id) is handled in one
 * place, sconn_hello.
 *
 * Before all that, with a cluster secret, a connection authenticates (peerauth.c): until
 * it has, only the handshake's own bytes are read from it (no request header is looked
 * at), and it is closed when the handshake fails or its deadline passes. An engine
 * without a secret that sees a handshake where the first header should be answers
 * RESULT SERVER_NO_SECRET (looked at only when the header's version byte is not ours,
 * so the open path costs nothing). Accepting counts connections in all and per source
 * address (max_connections, max_connections_per_ip) and refuses beyond them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <stdio.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "net/sock.h"
#include "transfer/internal.h"

#define IOV_BATCH 256 /* iovecs per reply sendmsg (headers and READ payloads) */
#define SCRATCH 65536
#define OUT_MAX_COUNT 4096

static const char zeros[SCRATCH];

static void sconn_io(mc_loop *loop, int fd, uint32_t events, void *arg);

static void set_events(te_sconn *c, uint32_t ev)
{
    if (c->events != ev && mc_loop_mod(c->io->loop, c->fd, ev) == 0)
        c->events = ev;
}

static void notify_unhold(te_sconn *c)
{
    if (c->notify_held) {
        atomic_fetch_sub(&c->io->te->notify_pending, c->notify_held);
        c->notify_held = 0;
    }
}

/* Makes room in a NOTIFY body's buffer for `more` bytes after c->off: the buffer
 * (c->notify_held bytes) starts at NOTIFY_FIRST and doubles, up to the body's length
 * (bounded by mc__te_req_decode), each step taken from te->notify_pending (bodies being
 * received, all connections: at most max_pending bytes). So a header alone holds at
 * most NOTIFY_FIRST bytes whatever length it claims, and a connection about twice what
 * it sent. Past the budget the body is drained instead and answered -ENOSPC. */
#define NOTIFY_FIRST 4096u
static void notify_room(te_sconn *c, uint64_t more)
{
    mc_te *te = c->io->te;
    uint64_t len = c->cur.len, need = c->off + more;
    if (need <= c->notify_held)
        return;
    uint64_t cap = c->notify_held ? c->notify_held : NOTIFY_FIRST;
    while (cap < need)
        cap *= 2;
    if (cap > len)
        cap = len;
    uint64_t add = cap - c->notify_held;
    if (atomic_fetch_add(&te->notify_pending, add) + add > te->max_pending) {
        atomic_fetch_sub(&te->notify_pending, add);
        atomic_fetch_add(&te->st.pending_limit, 1);
        free(c->dst);
        c->dst = NULL;
        notify_unhold(c);
        c->pending_status = -ENOSPC;
        c->state = TE_S_DISCARD; /* drains the rest of the body (cur.len - off) */
        return;
    }
    c->dst = mc_xrealloc(c->dst, cap);
    c->notify_held = cap;
}

/* The region holding [addr, addr+len) with a ref taken for the caller, or NULL (not
 * registered, or unregistered meanwhile). Issue 17: the first lookup of an I/O callback
 * takes a second ref, c->pin, dropped when the callback ends (sconn_unpin); while it is
 * held the region cannot be freed (mc__te_region_drain waits for every ref), so a later
 * request inside it takes its ref with one atomic add and a check that it was not
 * unregistered since (dead), instead of the table's lock and search. The pin is never
 * held across an epoll wait, so an unregister waits for it at most one callback. */
static te_region *sconn_acquire(te_sconn *c, uint64_t addr, uint64_t len)
{
    te_region *r = c->pin;
    if (r && mc__te_range_inside(r->base, r->len, addr, len)) {
        atomic_fetch_add(&r->refs, 1);
        if (!atomic_load(&r->dead))
            return r;
        atomic_fetch_sub(&r->refs, 1); /* unregistered: as the table says, refused */
        return NULL;
    }
    r = mc__te_region_acquire(c->io->te, addr, len);
    if (r && !c->pin) {
        atomic_fetch_add(&r->refs, 1);
        c->pin = r;
    }
    return r;
}

static void sconn_unpin(te_sconn *c)
{
    mc__te_region_release(c->pin);
    c->pin = NULL;
}

static void sconn_close(te_sconn *c)
{
    sconn_unpin(c);
    atomic_fetch_sub(&c->io->te->n_sconns, 1);
    mc__te_iplimit_release(&c->io->te->data_ips, &c->ip);
    mc__te_auth_srv_free(c->io, c->auth);
    notify_unhold(c);
    mc_loop_del(c->io->loop, c->fd);
    close(c->fd);
    if (c->state == TE_S_PAYLOAD)
        mc__te_region_release(c->cur_reg);
    if (c->state == TE_S_NOTIFY)
        free(c->dst);
    free(c->in.buf);
    te_out *o = c->out_head;
    while (o) {
        te_out *next = o->next;
        mc__te_region_release(o->reg);
        free(o);
        o = next;
    }
    o = c->out_free;
    while (o) {
        te_out *next = o->next;
        free(o);
        o = next;
    }
    mc_list_remove(&c->link);
    free(c);
}

static void out_push(te_sconn *c, int status, uint64_t id, const char *payload, uint64_t len,
                     te_region *reg)
{
    te_out *o = c->out_free;
    if (o)
        c->out_free = o->next;
    else
        o = mc_xmalloc(sizeof *o);
    mc__te_rep rep = {.status = status, .id = id, .len = len};
    mc__te_rep_encode(&rep, o->hdr);
    o->payload = payload;
    o->len = len;
    o->reg = reg;
    o->next = NULL;
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    c->out_count++;
    c->out_bytes += MC_TE_REP_SIZE + len;
}

/* Sends queued replies. Returns 0, or -1 when c was closed. */
static int sconn_flush(te_sconn *c)
{
    mc_te *te = c->io->te;
    while (c->out_head) {
        struct iovec iov[IOV_BATCH];
        int n = 0;
        uint64_t off = c->out_off;
        for (te_out *o = c->out_head; o && n < IOV_BATCH - 1; o = o->next, off = 0) {
            off = mc__te_iov_hdr(iov, &n, o->hdr, MC_TE_REP_SIZE, off);
            if (o->len > off) {
                if (o->payload) {
                    iov[n].iov_base = (void *)(o->payload + off);
                    iov[n++].iov_len = o->len - off;
                } else {
                    uint64_t z = o->len - off;
                    iov[n].iov_base = (void *)zeros;
                    iov[n++].iov_len = z > SCRATCH ? SCRATCH : z;
                    break; /* zeros are sent one piece at a time */
                }
            }
        }
        ssize_t k = mc_sock_sendv_nb(c->fd, iov, n);
        if (k == 0) { /* the socket is full: wait for EPOLLOUT */
            set_events(c, (c->events & EPOLLIN) | EPOLLOUT);
            return 0;
        }
        if (k < 0) {
            sconn_close(c);
            return -1;
        }
        uint64_t left = (uint64_t)k;
        while (left && c->out_head) {
            te_out *o = c->out_head;
            uint64_t rem = MC_TE_REP_SIZE + o->len - c->out_off;
            if (left >= rem) {
                left -= rem;
                c->out_head = o->next;
                if (!c->out_head)
                    c->out_tail = NULL;
                c->out_off = 0;
                c->out_count--;
                c->out_bytes -= MC_TE_REP_SIZE + o->len;
                if (o->reg) {
                    atomic_fetch_add(&te->st.served, o->len);
                    mc__te_region_release(o->reg);
                }
                o->next = c->out_free;
                c->out_free = o;
            } else {
                c->out_off += left;
                left = 0;
            }
        }
    }
    return 0;
}

/* HELLO: the initiator names the writer whose WRITEs this connection carries (the
 * fence table's key). The one place the HELLO is handled. Returns 0. */
static int sconn_hello(te_sconn *c, const mc__te_req *q)
{
    c->writer_hi = q->addr;
    c->writer_lo = q->len;
    c->fence_gen = 0; /* look the new writer up at its first fenced WRITE */
    out_push(c, 0, q->id, NULL, 0, NULL);
    mc__te_rep rep = {.status = 0, .id = q->id, .len = MC_TE_WIRE_VERSION};
    mc__te_rep_encode(&rep, c->out_tail->hdr); /* the length field is our version */
    return 0;
}

/* A whole header is at h. Returns 0, or -1 when the connection must close. Nothing is
 * written to memory here: the checks come first, the payload (if any) is consumed by
 * the caller in the state this leaves. */
static int process_header(te_sconn *c, const uint8_t *h)
{
    mc_te *te = c->io->te;
    int rc = mc__te_req_decode(h, &c->cur);
    if (rc < 0) {
        mc_log(MC_LOG_DEBUG, TE_TAG, "data port: bad request header (%d), closing", rc);
        return -1;
    }
    mc__te_req *q = &c->cur;
    te_region *r;
    c->in.big = false;
    switch (q->op) {
    case MC_TE_WOP_WRITE:
        c->off = 0;
        c->in.big = q->len > TE_RBUF_COPY_MAX;
        if (mc__te_write_fenced(te, c, q->epoch)) { /* before any byte touches memory */
            atomic_fetch_add(&te->st.stale_writes, 1);
            c->pending_status = -ESTALE;
            if (q->len == 0)
                out_push(c, -ESTALE, q->id, NULL, 0, NULL);
            else
                c->state = TE_S_DISCARD;
            return 0;
        }
        r = q->len ? sconn_acquire(c, q->addr, q->len) : NULL;
        if (r) {
            c->cur_reg = r;
            c->dst = (char *)(uintptr_t)q->addr;
            c->state = TE_S_PAYLOAD;
        } else {
            atomic_fetch_add(&te->st.refused, 1);
            c->pending_status = q->len ? -EFAULT : -EINVAL;
            if (q->len == 0)
                out_push(c, c->pending_status, q->id, NULL, 0, NULL);
            else
                c->state = TE_S_DISCARD;
        }
        return 0;
    case MC_TE_WOP_READ:
        r = q->len ? sconn_acquire(c, q->addr, q->len) : NULL;
        if (r) {
            out_push(c, 0, q->id, (const char *)(uintptr_t)q->addr, q->len, r);
        } else {
            atomic_fetch_add(&te->st.refused, 1);
            out_push(c, q->len ? -EFAULT : -EINVAL, q->id, NULL, q->len, NULL);
        }
        return 0;
    case MC_TE_WOP_NOTIFY:
        c->off = 0;
        c->in.big = q->len > TE_RBUF_COPY_MAX;
        c->dst = NULL;
        c->state = TE_S_NOTIFY; /* notify_room gives it its first buffer */
        notify_room(c, 1);
        return 0;
    case MC_TE_WOP_PING:
        out_push(c, 0, q->id, NULL, 0, NULL);
        return 0;
    case MC_TE_WOP_HELLO:
        return sconn_hello(c, q);
    }
    return -1;
}

/* The first MC_TE_REQ_PREFIX bytes of a header are at h: a header of another wire
 * version is answered (-EPROTONOSUPPORT, length = our version) and the connection
 * closed. Returns 0, or -1 when the caller must close. */
static int check_version(te_sconn *c, const uint8_t *h)
{
    unsigned version = 0;
    uint64_t id = 0;
    mc_te *te = c->io->te;
    if (!te->auth && mc_auth_looks_like_frame(h, 4)) {
        /* a client with a secret, an engine without: say so, on both sides */
        mc__te_auth_answer_open(te, c->fd, "data port");
        return -1;
    }
    if (mc__te_req_prefix(h, &version, &id) != -EPROTONOSUPPORT)
        return 0; /* ours, or garbage that the full decode refuses */
    char peer[INET6_ADDRSTRLEN + 8] = "?";
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getpeername(c->fd, (struct sockaddr *)&sa, &sl) == 0) {
        char hs[INET6_ADDRSTRLEN] = "?";
        const void *a = sa.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&sa)->sin6_addr
                                                 : (const void *)&((struct sockaddr_in *)&sa)->sin_addr;
        unsigned port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                       : ((struct sockaddr_in *)&sa)->sin_port);
        inet_ntop(sa.ss_family, a, hs, sizeof hs);
        snprintf(peer, sizeof peer, "%s:%u", hs, port);
    }
    mc_log(MC_LOG_ERROR, TE_TAG,
           "data connection from %s: it speaks transfer wire version %u, this engine speaks "
           "version %d: refused (upgrade the older side)",
           peer, version, MC_TE_WIRE_VERSION);
    uint8_t out[MC_TE_REP_SIZE];
    mc__te_rep rep = {.status = -EPROTONOSUPPORT, .id = id, .len = MC_TE_WIRE_VERSION};
    mc__te_rep_encode(&rep, out);
    if (!c->out_head) /* a fresh connection: 24 bytes always fit in the send buffer */
        (void)send(c->fd, out, sizeof out, MSG_NOSIGNAL | MSG_DONTWAIT);
    return -1;
}

static void finish_current(te_sconn *c)
{
    mc_te *te = c->io->te;
    mc__te_req *q = &c->cur;
    switch (c->state) {
    case TE_S_PAYLOAD:
        atomic_fetch_add(&te->st.served, q->len);
        mc__te_region_release(c->cur_reg);
        c->cur_reg = NULL;
        out_push(c, 0, q->id, NULL, 0, NULL);
        break;
    case TE_S_DISCARD:
        out_push(c, c->pending_status, q->id, NULL, 0, NULL);
        break;
    case TE_S_NOTIFY: {
        const char *name;
        const uint8_t *msg;
        size_t nl, ml;
        int st = mc__te_notify_decode((const uint8_t *)c->dst, q->len, &name, &nl, &msg, &ml);
        if (st == 0) {
            char *n = mc_xmalloc(nl + 1), *m = mc_xmalloc(ml + 1);
            memcpy(n, name, nl);
            n[nl] = '\0';
            memcpy(m, msg, ml);
            m[ml] = '\0';
            st = mc__te_notify_push(te, n, m, ml);
            if (st < 0) {
                free(n);
                free(m);
            }
        }
        free(c->dst);
        c->dst = NULL;
        notify_unhold(c);
        out_push(c, st, q->id, NULL, 0, NULL);
        break;
    }
    }
    c->state = TE_S_HDR;
}

static bool backpressured(const te_sconn *c)
{
    return c->out_count >= OUT_MAX_COUNT || c->out_bytes >= c->io->te->max_pending;
}

/* Whether c->in holds something sconn_parse would consume: payload bytes of the current
 * request, or a complete request header. */
static bool parse_pending(const te_sconn *c)
{
    size_t avail = c->in.len - c->in.pos;
    return c->state != TE_S_HDR ? avail > 0 : avail >= MC_TE_REQ_SIZE;
}

/* Consumes what c->in holds: payload bytes of the current request (copied into its
 * destination, or dropped when draining), then every complete header after them. Stops
 * at a partial header, or before a header while too many replies are queued.
 * Returns 0, or -1 when the connection must close. */
static int sconn_parse(te_sconn *c)
{
    te_rbuf *in = &c->in;
    for (;;) {
        size_t avail = in->len - in->pos;
        const uint8_t *p = (const uint8_t *)in->buf + in->pos;
        if (c->state != TE_S_HDR) {
            if (!avail)
                return 0;
            uint64_t need = c->cur.len - c->off;
            size_t take = avail < need ? avail : (size_t)need;
            if (c->state == TE_S_NOTIFY)
                notify_room(c, take); /* may turn it into TE_S_DISCARD */
            if (c->state == TE_S_PAYLOAD) /* checked, in range */
                mc__te_write_copy(c->io->te, c->dst + c->off, p, take);
            else if (c->state == TE_S_NOTIFY)
                memcpy(c->dst + c->off, p, take);
            c->off += take;
            in->pos += take;
            if (c->off == c->cur.len)
                finish_current(c);
            continue;
        }
        if (avail < MC_TE_REQ_PREFIX || backpressured(c))
            return 0;
        if (p[4] != MC_TE_WIRE_VERSION && check_version(c, p) < 0)
            return -1;
        if (avail < MC_TE_REQ_SIZE)
            return 0;
        in->pos += MC_TE_REQ_SIZE;
        if (process_header(c, p) < 0)
            return -1;
    }
}

/* Reads and handles requests. Returns 0, or -1 when c was closed. */
static int sconn_read(te_sconn *c)
{
    te_rbuf *in = &c->in;
    for (int round = 0; round < 64; round++) {
        if (sconn_parse(c) < 0) {
            sconn_close(c);
            return -1;
        }
        if (backpressured(c)) {
            set_events(c, EPOLLOUT); /* stop reading until replies drain */
            return 0;
        }
        /* what is left unparsed is a partial header, or nothing: move it to the front */
        size_t rest = in->len - in->pos;
        if (in->pos) {
            memmove(in->buf, in->buf + in->pos, rest);
            in->pos = 0;
            in->len = rest;
        }
        struct iovec iov[2];
        int n = 0;
        uint64_t direct = 0; /* bytes asked for straight into the current destination */
        if (c->state == TE_S_NOTIFY && c->off == c->notify_held)
            notify_room(c, 1); /* may turn it into TE_S_DISCARD */
        if (c->state == TE_S_PAYLOAD || c->state == TE_S_NOTIFY) {
            direct = c->cur.len - c->off; /* the buffer is empty here */
            if (c->state == TE_S_NOTIFY && direct > c->notify_held - c->off)
                direct = c->notify_held - c->off; /* what its buffer has room for */
            iov[n].iov_base = c->dst + c->off;
            iov[n++].iov_len = direct;
        }
        size_t room = TE_RBUF_SIZE - in->len;
        if (in->big && c->state != TE_S_DISCARD && room > MC_TE_REQ_SIZE - rest)
            room = MC_TE_REQ_SIZE - rest; /* after a large payload: the next header only */
        iov[n].iov_base = in->buf + in->len;
        iov[n++].iov_len = room;
        ssize_t k = mc_sock_recvv_nb(c->fd, iov, n);
        if (k == 0)
            return 0; /* nothing more now */
        if (k < 0) { /* error or EOF */
            sconn_close(c);
            return -1;
        }
        uint64_t left = (uint64_t)k;
        if (direct) {
            uint64_t take = left < direct ? left : direct;
            c->off += take;
            left -= take;
            if (c->off == c->cur.len)
                finish_current(c);
        }
        in->len += left;
        if ((uint64_t)k < direct + room) { /* drained the socket: parse and stop */
            if (sconn_parse(c) < 0) {
                sconn_close(c);
                return -1;
            }
            return 0;
        }
    }
    return 0;
}

/* One I/O callback's work. Returns 0, or -1 when c was closed. */
static int sconn_io_events(te_sconn *c, uint32_t events)
{
    if (c->auth) { /* not authenticated yet: nothing but the handshake is read */
        int rc = mc__te_auth_srv_io(c->io->te, c->auth, c->fd);
        if (rc < 0) {
            sconn_close(c);
            return -1;
        }
        if (rc == 0)
            return 0;
        mc__te_auth_srv_free(c->io, c->auth);
        c->auth = NULL;
        events |= EPOLLIN; /* requests may already wait behind the handshake */
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        if (sconn_read(c) < 0)
            return -1;
    }
    if (c->out_head && sconn_flush(c) < 0)
        return -1;
    /* What parsing left in c->in under backpressure is parsed as soon as the replies
     * drained, in whichever callback that happens: epoll cannot see bytes already read,
     * so waiting for EPOLLIN would wait for ever once the initiator has sent its whole
     * batch (a READ batch of more than max_pending bytes on one connection hung until
     * its timeout when EPOLLIN was armed again by the drain; issue 17, session 16). Each
     * round parses until the buffer holds no complete header or the budget is queued
     * again, so it ends; no socket read here (level-triggered EPOLLIN brings new bytes). */
    while (!backpressured(c) && parse_pending(c)) {
        if (sconn_parse(c) < 0) {
            sconn_close(c);
            return -1;
        }
        if (c->out_head && sconn_flush(c) < 0)
            return -1;
    }
    set_events(c, (backpressured(c) ? 0 : EPOLLIN) | (c->out_head ? EPOLLOUT : 0));
    return 0;
}

static void sconn_io(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)loop;
    (void)fd;
    te_sconn *c = arg;
    if (sconn_io_events(c, events) == 0)
        sconn_unpin(c); /* never held between callbacks */
}

typedef struct adopt {
    te_io *io;
    int fd;
    te_ipkey ip;
} adopt;

static void sconn_adopt(void *arg)
{
    adopt *a = arg;
    te_sconn *c = mc_xcalloc(1, sizeof *c);
    c->io = a->io;
    c->fd = a->fd;
    c->ip = a->ip;
    c->events = EPOLLIN;
    c->in.buf = mc_xmalloc(TE_RBUF_SIZE);
    if (mc_loop_add(c->io->loop, c->fd, c->events, sconn_io, c) < 0) {
        atomic_fetch_sub(&c->io->te->n_sconns, 1);
        mc__te_iplimit_release(&c->io->te->data_ips, &c->ip);
        close(c->fd);
        free(c->in.buf);
        free(c);
        free(a);
        return;
    }
    c->auth = mc__te_auth_srv_new(c->io, TE_AUTH_DATA, "data port");
    mc_list_push_front(&c->io->sconns, &c->link);
    free(a);
}

static void refused_log(mc_te *te, int fd, const char *limit, uint32_t value)
{
    if (!mc__te_log_limited(te))
        return;
    char peer[INET6_ADDRSTRLEN + 16];
    mc__te_peer_addr(fd, peer, sizeof peer);
    mc_log(MC_LOG_WARN, TE_TAG,
           "data port: refused a connection from %s: %s (%u) reached (further refusals "
           "within 10 s are only counted in mc_te_stats)",
           peer, limit, value);
}

static void data_accept(mc_loop *loop, int lfd, uint32_t events, void *arg)
{
    (void)loop;
    (void)events;
    mc_te *te = arg;
    for (int i = 0; i < 64; i++) {
        int fd = mc_sock_accept(lfd, true);
        if (fd < 0)
            return;
        if (atomic_fetch_add(&te->n_sconns, 1) >= (int)te->max_conns) {
            atomic_fetch_sub(&te->n_sconns, 1);
            atomic_fetch_add(&te->st.conn_limit, 1);
            refused_log(te, fd, "max_connections", te->max_conns);
            close(fd);
            continue;
        }
        te_ipkey ip;
        if (!mc__te_iplimit_acquire(&te->data_ips, fd, te->max_conns_per_ip, &ip)) {
            atomic_fetch_sub(&te->n_sconns, 1);
            atomic_fetch_add(&te->st.ip_limit, 1);
            refused_log(te, fd, "max_connections_per_ip", te->max_conns_per_ip);
            close(fd);
            continue;
        }
        mc_sock_set_nodelay(fd);
        mc_sock_set_keepalive(fd, 60, 10, 6);
        unsigned idx = atomic_fetch_add(&te->next_io, 1) % te->nio;
        adopt *a = mc_xmalloc(sizeof *a);
        a->io = &te->io[idx];
        a->fd = fd;
        a->ip = ip;
        if (idx == 0) {
            sconn_adopt(a);
        } else if (mc_loop_post(a->io->loop, sconn_adopt, a) < 0) {
            atomic_fetch_sub(&te->n_sconns, 1);
            mc__te_iplimit_release(&te->data_ips, &a->ip);
            close(fd);
            free(a);
        }
    }
}

int mc__te_data_accept_start(mc_te *te)
{
    mc_sock_set_nonblock(te->data_lfd, true);
    return mc_loop_add(te->io[0].loop, te->data_lfd, EPOLLIN, data_accept, te);
}

void mc__te_sconn_tick(te_io *io)
{
    if (!io->n_authing) /* the usual case: nothing to walk */
        return;
    uint64_t now = mc_now_ms();
    te_sconn *c;
    MC_LIST_FOREACH_ENTRY(c, &io->sconns, te_sconn, link)
        if (c->auth && mc__te_auth_expired(io->te, c->auth, c->fd, now))
            sconn_close(c); /* unlinks c only */
}

void mc__te_sconn_close_all(te_io *io)
{
    te_sconn *c;
    MC_LIST_FOREACH_ENTRY(c, &io->sconns, te_sconn, link)
        sconn_close(c); /* unlinks c only */
}

typedef struct abort_arg {
    te_io *io;
    te_region *r;
} abort_arg;

static void abort_region_task(void *arg)
{
    abort_arg *a = arg;
    te_sconn *c;
    MC_LIST_FOREACH_ENTRY(c, &a->io->sconns, te_sconn, link) {
        bool uses = c->state == TE_S_PAYLOAD && c->cur_reg == a->r;
        for (te_out *o = c->out_head; o && !uses; o = o->next)
            uses = o->reg == a->r;
        if (uses) {
            mc_log(MC_LOG_WARN, TE_TAG,
                   "closing a data connection still using memory being unregistered");
            sconn_close(c);
        }
    }
    free(a);
}

void mc__te_sconn_fence_io(te_io *io)
{
    mc_te *te = io->te;
    te_sconn *c;
    MC_LIST_FOREACH_ENTRY(c, &io->sconns, te_sconn, link) {
        if (c->state != TE_S_PAYLOAD || !mc__te_write_fenced(te, c, c->cur.epoch))
            continue;
        /* the rest of this payload is drained; what arrived before the fence stays */
        atomic_fetch_add(&te->st.stale_writes, 1);
        mc__te_region_release(c->cur_reg);
        c->cur_reg = NULL;
        c->pending_status = -ESTALE;
        c->state = TE_S_DISCARD;
    }
}

void mc__te_io_abort_region(te_io *io, te_region *r)
{
    abort_arg *a = mc_xmalloc(sizeof *a);
    a->io = io;
    a->r = r;
    if (mc_loop_post(io->loop, abort_region_task, a) < 0)
        free(a);
}
