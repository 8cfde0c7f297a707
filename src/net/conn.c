/* conn.c: see conn.h. */
#include "net/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "mooncake/mc_time.h"
#include "net/sock.h"

struct mc_conn {
    mc_loop *loop;
    int fd;
    uint32_t max_body;
    size_t max_backlog;
    size_t pause_backlog; /* 0 = never pause reading */
    bool paused;          /* not reading: the peer leaves too many replies unread */
    mc_conn_callbacks cbs;
    void *arg;
    /* input: header bytes first, then the body once its length is known */
    uint8_t hdr_buf[MC_FRAME_HEADER_SIZE];
    size_t hdr_have;
    mc_frame_header hdr;
    uint8_t *body;
    size_t body_have;
    size_t body_cap;      /* bytes allocated for body: grows as they arrive */
    uint64_t last_rx_ms;  /* when a recv last returned bytes (mc_conn_last_rx_ms) */
    /* output queue: one flat buffer, [out_off, out_len) pending */
    uint8_t *out;
    size_t out_off, out_len, out_cap;
    bool want_write;
    int depth;     /* >0 while inside a callback */
    bool closing;  /* close requested */
    int close_err;
};

/* A body's buffer starts at this size (or the body's, when smaller) and doubles while
 * its bytes arrive: what a connection holds follows what its peer sent, not what its
 * header claims (a header alone must not hold max_body bytes of a server's budget). */
#define BODY_FIRST 4096u

/* Makes room for more body bytes: the first chunk or a doubling, capped at body_len.
 * on_body_alloc may refuse (-errno closes the connection). */
static int body_grow(mc_conn *c)
{
    size_t want = c->body_cap ? c->body_cap * 2 : BODY_FIRST;
    if (want > c->hdr.body_len)
        want = c->hdr.body_len;
    if (c->cbs.on_body_alloc) {
        int rc = c->cbs.on_body_alloc(c, want - c->body_cap, c->arg);
        if (rc)
            return rc;
    }
    c->body = mc_xrealloc(c->body, want);
    c->body_cap = want;
    return 0;
}

static void conn_free(mc_conn *c)
{
    mc_loop_del(c->loop, c->fd);
    close(c->fd);
    if (c->cbs.on_close)
        c->cbs.on_close(c, c->close_err, c->arg);
    free(c->body);
    free(c->out);
    free(c);
}

static void conn_fail(mc_conn *c, int err)
{
    if (!c->closing) {
        c->closing = true;
        c->close_err = err;
    }
}

static int flush(mc_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        return n < 0 ? -errno : -EPIPE;
    }
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    bool want = c->out_len > 0;
    bool pause = c->pause_backlog && c->out_len - c->out_off >= c->pause_backlog;
    if (want != c->want_write || pause != c->paused) {
        c->want_write = want;
        c->paused = pause;
        /* paused: no EPOLLIN nor EPOLLRDHUP (level-triggered, they would fire at once
         * again); EPOLLHUP / EPOLLERR always come */
        mc_loop_mod(c->loop, c->fd,
                    (pause ? 0 : EPOLLIN | EPOLLRDHUP) | (want ? EPOLLOUT : 0));
    }
    return 0;
}

/* Reads what is available; delivers whole frames. Returns 0, or -errno to close. */
static int on_readable(mc_conn *c)
{
    for (int rounds = 0; rounds < 64 && !c->closing && !c->paused; rounds++) {
        void *dst;
        size_t want;
        if (c->hdr_have < MC_FRAME_HEADER_SIZE) {
            dst = c->hdr_buf + c->hdr_have;
            want = MC_FRAME_HEADER_SIZE - c->hdr_have;
        } else {
            if (c->body_have == c->body_cap) {
                int rc = body_grow(c);
                if (rc)
                    return rc;
            }
            dst = c->body + c->body_have;
            want = c->body_cap - c->body_have;
        }
        ssize_t n = want ? recv(c->fd, dst, want, MSG_DONTWAIT) : 0;
        if (want && n == 0)
            return c->hdr_have == 0 ? 1 : -ECONNRESET; /* 1: clean EOF */
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -errno;
        }
        if (n > 0)
            c->last_rx_ms = mc_now_ms();
        if (c->hdr_have < MC_FRAME_HEADER_SIZE) {
            c->hdr_have += (size_t)n;
            if (c->hdr_have < MC_FRAME_HEADER_SIZE)
                continue;
            int rc = mc_frame_decode_header(c->hdr_buf, c->max_body, &c->hdr);
            if (rc)
                return rc;
            if (c->cbs.on_header && (rc = c->cbs.on_header(c, &c->hdr, c->arg)) != 0)
                return rc;
            c->body_have = 0;
            c->body_cap = 0;
        } else {
            c->body_have += (size_t)n;
        }
        if (c->hdr_have == MC_FRAME_HEADER_SIZE && c->body_have == c->hdr.body_len) {
            uint8_t *body = c->body;
            mc_frame_header hdr = c->hdr;
            c->body = NULL;
            c->hdr_have = 0;
            c->body_have = 0;
            c->body_cap = 0;
            c->cbs.on_frame(c, &hdr, body ? body : (const uint8_t *)"", c->arg);
            free(body);
        }
    }
    return 0;
}

static void on_io(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)loop;
    (void)fd;
    mc_conn *c = arg;
    c->depth++;
    if (events & EPOLLOUT) {
        int rc = flush(c);
        if (rc)
            conn_fail(c, rc);
    }
    if (!c->closing && c->paused && (events & (EPOLLHUP | EPOLLERR)))
        conn_fail(c, -ECONNRESET);
    if (!c->closing && !c->paused &&
        (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        int rc = on_readable(c);
        if (rc == 1)
            conn_fail(c, 0);
        else if (rc)
            conn_fail(c, rc);
    }
    c->depth--;
    if (c->closing && c->depth == 0)
        conn_free(c);
}

mc_conn *mc_conn_create(mc_loop *loop, int fd, uint32_t max_body, size_t max_backlog,
                        const mc_conn_callbacks *cbs, void *arg)
{
    mc_conn_opts o = {.max_body = max_body, .max_backlog = max_backlog};
    return mc_conn_create_opts(loop, fd, &o, cbs, arg);
}

mc_conn *mc_conn_create_opts(mc_loop *loop, int fd, const mc_conn_opts *o,
                             const mc_conn_callbacks *cbs, void *arg)
{
    if (o->prefix_len >= MC_FRAME_HEADER_SIZE || mc_sock_set_nonblock(fd, true) < 0) {
        close(fd);
        return NULL;
    }
    mc_conn *c = mc_xcalloc(1, sizeof *c);
    c->loop = loop;
    c->fd = fd;
    c->max_body = o->max_body ? o->max_body : MC_FRAME_DEFAULT_MAX_BODY;
    c->max_backlog = o->max_backlog ? o->max_backlog : (256u << 20);
    c->pause_backlog = o->pause_backlog;
    c->last_rx_ms = mc_now_ms();
    if (o->prefix_len) {
        memcpy(c->hdr_buf, o->prefix, o->prefix_len);
        c->hdr_have = o->prefix_len;
    }
    c->cbs = *cbs;
    c->arg = arg;
    if (mc_loop_add(loop, fd, EPOLLIN | EPOLLRDHUP, on_io, c) < 0) {
        close(fd);
        free(c);
        return NULL;
    }
    return c;
}

int mc_conn_send(mc_conn *c, mc_frame_header *hdr, const void *body, size_t len)
{
    if (c->closing)
        return -EPIPE;
    if (len > UINT32_MAX)
        return -EMSGSIZE;
    size_t need = MC_FRAME_HEADER_SIZE + len;
    if (c->out_len - c->out_off + need > c->max_backlog) {
        conn_fail(c, -ENOBUFS);
        if (c->depth == 0)
            conn_free(c);
        return -ENOBUFS;
    }
    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_len + need > c->out_cap) {
        if (c->out_off) { /* compact first */
            memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
            c->out_len -= c->out_off;
            c->out_off = 0;
        }
        if (c->out_len + need > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 4096;
            while (cap < c->out_len + need)
                cap *= 2;
            c->out = mc_xrealloc(c->out, cap);
            c->out_cap = cap;
        }
    }
    hdr->body_len = (uint32_t)len;
    mc_frame_encode_header(hdr, c->out + c->out_len);
    if (len)
        memcpy(c->out + c->out_len + MC_FRAME_HEADER_SIZE, body, len);
    c->out_len += need;
    int rc = flush(c);
    if (rc) {
        conn_fail(c, rc);
        if (c->depth == 0)
            conn_free(c);
        return rc;
    }
    return 0;
}

void mc_conn_close(mc_conn *c)
{
    conn_fail(c, 0);
    if (c->depth == 0)
        conn_free(c);
}

size_t mc_conn_backlog(const mc_conn *c)
{
    return c->out_len - c->out_off;
}

uint64_t mc_conn_last_rx_ms(const mc_conn *c)
{
    return c->last_rx_ms;
}

int mc_conn_fd(const mc_conn *c)
{
    return c->fd;
}

mc_loop *mc_conn_loop(const mc_conn *c)
{
    return c->loop;
}

void mc_conn_set_arg(mc_conn *c, void *arg)
{
    c->arg = arg;
}
