/* tcp_server.c: the serving side of the TCP data path (loop threads).
 *
 * Per connection, a state machine reads one request header, checks it (wire.h) and the
 * range against registered memory (regions.c) before anything is touched, then
 * receives a WRITE payload straight into the registered memory (the next header is
 * read in the same recvmsg), or queues a READ reply whose payload is sent straight from
 * it. Refused ranges are answered with -EFAULT (a WRITE payload is read into a scratch
 * buffer and dropped); an unparseable header closes the connection. Replies are
 * gathered into one sendmsg. Reading pauses while too many replies wait to be sent.
 * Fencing: HELLO names the connection's writer; a WRITE with a non-zero epoch below that
 * writer's minimum (fence.c) is drained like a refused range and answered -ESTALE; a
 * header of another wire version is answered -EPROTONOSUPPORT and the connection closed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <stdio.h>

#include "mooncake/log.h"
#include "net/sock.h"
#include "transfer/internal.h"

#define IOV_BATCH 64
#define SCRATCH 65536
#define OUT_MAX_COUNT 4096
#define OUT_MAX_BYTES (64ull << 20)
#define MAX_SCONNS 4096 /* data connections served per engine */

static const char zeros[SCRATCH];

static void sconn_io(mc_loop *loop, int fd, uint32_t events, void *arg);

static void set_events(te_sconn *c, uint32_t ev)
{
    if (c->events != ev && mc_loop_mod(c->io->loop, c->fd, ev) == 0)
        c->events = ev;
}

static void sconn_close(te_sconn *c)
{
    atomic_fetch_sub(&c->io->te->n_sconns, 1);
    mc_loop_del(c->io->loop, c->fd);
    close(c->fd);
    if (c->state == TE_S_PAYLOAD)
        mc__te_region_release(c->cur_reg);
    if (c->state == TE_S_NOTIFY)
        free(c->dst);
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
    if (c->prev)
        c->prev->next = c->next;
    else
        c->io->sconns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

static void out_push(te_sconn *c, int status, uint64_t id, const char *payload, uint64_t len,
                     te_region *reg)
{
    te_out *o = c->out_free;
    if (o)
        c->out_free = o->next;
    else if (!(o = malloc(sizeof *o)))
        abort();
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
            if (off < MC_TE_REP_SIZE) {
                iov[n].iov_base = o->hdr + off;
                iov[n++].iov_len = MC_TE_REP_SIZE - off;
                off = 0;
            } else {
                off -= MC_TE_REP_SIZE;
            }
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
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                set_events(c, (c->events & EPOLLIN) | EPOLLOUT);
                return 0;
            }
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

/* A whole header is in c->hdr. Returns 0, or -1 when the connection must close. */
static int process_header(te_sconn *c)
{
    mc_te *te = c->io->te;
    int rc = mc__te_req_decode(c->hdr, &c->cur);
    c->hdr_off = 0;
    if (rc < 0) {
        mc_log(MC_LOG_DEBUG, TE_TAG, "data port: bad request header (%d), closing", rc);
        return -1;
    }
    mc__te_req *q = &c->cur;
    te_region *r;
    switch (q->op) {
    case MC_TE_WOP_WRITE:
        c->off = 0;
        if (mc__te_write_fenced(te, c, q->epoch)) { /* before any byte touches memory */
            atomic_fetch_add(&te->st.stale_writes, 1);
            c->pending_status = -ESTALE;
            if (q->len == 0)
                out_push(c, -ESTALE, q->id, NULL, 0, NULL);
            else
                c->state = TE_S_DISCARD;
            return 0;
        }
        r = q->len ? mc__te_region_acquire(te, q->addr, q->len) : NULL;
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
        r = q->len ? mc__te_region_acquire(te, q->addr, q->len) : NULL;
        if (r) {
            out_push(c, 0, q->id, (const char *)(uintptr_t)q->addr, q->len, r);
        } else {
            atomic_fetch_add(&te->st.refused, 1);
            out_push(c, q->len ? -EFAULT : -EINVAL, q->id, NULL, q->len, NULL);
        }
        return 0;
    case MC_TE_WOP_NOTIFY:
        c->dst = malloc(q->len); /* bounded by mc__te_req_decode */
        if (!c->dst)
            abort();
        c->off = 0;
        c->state = TE_S_NOTIFY;
        return 0;
    case MC_TE_WOP_PING:
        out_push(c, 0, q->id, NULL, 0, NULL);
        return 0;
    case MC_TE_WOP_HELLO: {
        c->writer_hi = q->addr;
        c->writer_lo = q->len;
        c->fence_gen = 0; /* look the new writer up at its first fenced WRITE */
        out_push(c, 0, q->id, NULL, 0, NULL);
        mc__te_rep rep = {.status = 0, .id = q->id, .len = MC_TE_WIRE_VERSION};
        mc__te_rep_encode(&rep, c->out_tail->hdr); /* the length field is our version */
        return 0;
    }
    }
    return -1;
}

/* The first MC_TE_REQ_PREFIX bytes of a header are in: a header of another wire version
 * is answered (-EPROTONOSUPPORT, length = our version) and the connection closed.
 * Returns 0, or -1 when the caller must close. */
static int check_version(te_sconn *c)
{
    unsigned version = 0;
    uint64_t id = 0;
    if (mc__te_req_prefix(c->hdr, &version, &id) != -EPROTONOSUPPORT)
        return 0; /* ours, or garbage that the full decode refuses */
    char peer[INET6_ADDRSTRLEN + 8] = "?";
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getpeername(c->fd, (struct sockaddr *)&sa, &sl) == 0) {
        char h[INET6_ADDRSTRLEN] = "?";
        const void *a = sa.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&sa)->sin6_addr
                                                 : (const void *)&((struct sockaddr_in *)&sa)->sin_addr;
        unsigned port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                       : ((struct sockaddr_in *)&sa)->sin_port);
        inet_ntop(sa.ss_family, a, h, sizeof h);
        snprintf(peer, sizeof peer, "%s:%u", h, port);
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
            char *n = malloc(nl + 1), *m = malloc(ml + 1);
            if (!n || !m)
                abort();
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
        out_push(c, st, q->id, NULL, 0, NULL);
        break;
    }
    }
    c->state = TE_S_HDR;
}

/* Reads and handles requests. Returns 0, or -1 when c was closed. */
static int sconn_read(te_sconn *c)
{
    for (int round = 0; round < 64; round++) {
        if (c->out_count >= OUT_MAX_COUNT || c->out_bytes >= OUT_MAX_BYTES) {
            set_events(c, EPOLLOUT); /* backpressure: stop reading until replies drain */
            return 0;
        }
        struct iovec iov[2];
        int n = 0;
        uint64_t cur_need = 0;
        if (c->state != TE_S_HDR) {
            cur_need = c->cur.len - c->off;
            if (c->state == TE_S_DISCARD) {
                iov[n].iov_base = c->io->scratch;
                iov[n++].iov_len = cur_need > SCRATCH ? SCRATCH : cur_need;
            } else {
                iov[n].iov_base = c->dst + c->off;
                iov[n++].iov_len = cur_need;
            }
        }
        iov[n].iov_base = c->hdr + c->hdr_off;
        iov[n++].iov_len = MC_TE_REQ_SIZE - c->hdr_off;
        size_t want = 0;
        for (int i = 0; i < n; i++)
            want += iov[i].iov_len;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = recvmsg(c->fd, &mh, MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            sconn_close(c);
            return -1;
        }
        if (k == 0) {
            sconn_close(c);
            return -1;
        }
        uint64_t left = (uint64_t)k;
        if (c->state != TE_S_HDR) {
            uint64_t take = left < cur_need ? left : cur_need;
            c->off += take;
            left -= take;
            if (c->off == c->cur.len)
                finish_current(c);
        }
        if (left) {
            /* these bytes landed in c->hdr after the current payload */
            uint64_t before = c->hdr_off;
            c->hdr_off += left;
            if (before < MC_TE_REQ_PREFIX && c->hdr_off >= MC_TE_REQ_PREFIX &&
                check_version(c) < 0) {
                sconn_close(c);
                return -1;
            }
        }
        if (c->hdr_off == MC_TE_REQ_SIZE && process_header(c) < 0) {
            sconn_close(c);
            return -1;
        }
        if ((size_t)k < want)
            return 0;
    }
    return 0;
}

static void sconn_io(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)loop;
    (void)fd;
    te_sconn *c = arg;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        if (sconn_read(c) < 0)
            return;
    }
    if (c->out_head && sconn_flush(c) < 0)
        return;
    uint32_t ev = 0;
    if (c->out_count < OUT_MAX_COUNT && c->out_bytes < OUT_MAX_BYTES)
        ev |= EPOLLIN;
    if (c->out_head)
        ev |= EPOLLOUT;
    if (ev & EPOLLIN && !(c->events & EPOLLIN) && (events & EPOLLOUT)) {
        /* resumed after backpressure: bytes may already wait */
        set_events(c, ev);
        if (sconn_read(c) < 0)
            return;
        if (c->out_head && sconn_flush(c) < 0)
            return;
        ev = EPOLLIN | (c->out_head ? EPOLLOUT : 0);
    }
    set_events(c, ev);
}

typedef struct adopt {
    te_io *io;
    int fd;
} adopt;

static void sconn_adopt(void *arg)
{
    adopt *a = arg;
    te_sconn *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->io = a->io;
    c->fd = a->fd;
    c->events = EPOLLIN;
    if (mc_loop_add(c->io->loop, c->fd, c->events, sconn_io, c) < 0) {
        atomic_fetch_sub(&c->io->te->n_sconns, 1);
        close(c->fd);
        free(c);
        free(a);
        return;
    }
    c->next = c->io->sconns;
    if (c->next)
        c->next->prev = c;
    c->io->sconns = c;
    free(a);
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
        if (atomic_fetch_add(&te->n_sconns, 1) >= MAX_SCONNS) {
            atomic_fetch_sub(&te->n_sconns, 1);
            close(fd);
            continue;
        }
        mc_sock_set_nodelay(fd);
        mc_sock_set_keepalive(fd, 60, 10, 6);
        unsigned idx = atomic_fetch_add(&te->next_io, 1) % te->nio;
        adopt *a = malloc(sizeof *a);
        if (!a)
            abort();
        a->io = &te->io[idx];
        a->fd = fd;
        if (idx == 0) {
            sconn_adopt(a);
        } else if (mc_loop_post(a->io->loop, sconn_adopt, a) < 0) {
            atomic_fetch_sub(&te->n_sconns, 1);
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

void mc__te_sconn_close_all(te_io *io)
{
    while (io->sconns)
        sconn_close(io->sconns);
}

typedef struct abort_arg {
    te_io *io;
    te_region *r;
} abort_arg;

static void abort_region_task(void *arg)
{
    abort_arg *a = arg;
    te_sconn *c = a->io->sconns;
    while (c) {
        te_sconn *next = c->next;
        bool uses = c->state == TE_S_PAYLOAD && c->cur_reg == a->r;
        for (te_out *o = c->out_head; o && !uses; o = o->next)
            uses = o->reg == a->r;
        if (uses) {
            mc_log(MC_LOG_WARN, TE_TAG,
                   "closing a data connection still using memory being unregistered");
            sconn_close(c);
        }
        c = next;
    }
    free(a);
}

void mc__te_sconn_fence_io(te_io *io)
{
    mc_te *te = io->te;
    for (te_sconn *c = io->sconns; c; c = c->next) {
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
    abort_arg *a = malloc(sizeof *a);
    if (!a)
        abort();
    a->io = io;
    a->r = r;
    if (mc_loop_post(io->loop, abort_region_task, a) < 0)
        free(a);
}
