/* handshake.c: the handshake (rpc) port: server on loop 0, blocking client for user
 * threads, and the store of received notifications.
 * Frames: wire.h (upstream common.h writeString/readString). Server answers:
 *   Metadata (1) -> this engine's descriptor JSON;  Notify (2) -> "{}" once stored, or
 *   {"error": ...};  Probe (3) -> "{}";  anything else -> {"error": ...} of the same type,
 *   then the connection closes. A length of 0 or above MC_HANDSHAKE_MAX_LENGTH closes
 *   the connection without an answer (the stream cannot be resynchronised).
 * With a cluster secret every connection authenticates first (peerauth.c, label
 * "te-handshake"; the server reads nothing of a frame before that), on both sides; an
 * open server answers a handshake HELLO with RESULT SERVER_NO_SECRET (its first bytes,
 * "MCAU", could only start an upstream frame longer than any we accept). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"
#include "mooncake/mc_time.h"
#include "net/frame.h"
#include "net/sock.h"
#include "transfer/internal.h"

#define HS_MAX_CONNS 256
#define HS_MAX_PER_IP 64 /* of those from one source address (or max_connections_per_ip) */
#define HS_IDLE_MS 30000

/* ---- notifications ---- */

int mc__te_notify_push(mc_te *te, char *name, char *msg, size_t msg_len)
{
    pthread_mutex_lock(&te->notify_lock);
    if (te->n_notifies >= TE_MAX_NOTIFIES ||
        te->notify_bytes + msg_len + strlen(name) > TE_MAX_NOTIFY_BYTES) {
        pthread_mutex_unlock(&te->notify_lock);
        return -ENOSPC;
    }
    if (te->n_notifies == te->cap_notifies) {
        te->cap_notifies = te->cap_notifies ? te->cap_notifies * 2 : 16;
        te->notifies = mc_xrealloc(te->notifies, te->cap_notifies * sizeof *te->notifies);
    }
    te->notifies[te->n_notifies++] = (mc_te_notify){.name = name, .msg = msg,
                                                    .msg_len = msg_len};
    te->notify_bytes += msg_len + strlen(name);
    pthread_mutex_unlock(&te->notify_lock);
    return 0;
}

int mc_te_get_notifies(mc_te *te, mc_te_notify **out, size_t *n)
{
    if (!te || !out || !n)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&te->notify_lock);
    *out = te->notifies;
    *n = te->n_notifies;
    te->notifies = NULL;
    te->n_notifies = te->cap_notifies = 0;
    te->notify_bytes = 0;
    pthread_mutex_unlock(&te->notify_lock);
    if (*n == 0) {
        free(*out);
        *out = NULL;
    }
    return MC_OK;
}

void mc_te_notifies_free(mc_te_notify *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].msg);
    }
    free(v);
}

/* ---- server ---- */

static void hs_close(te_hsconn *c)
{
    mc_loop_del(c->io->loop, c->fd);
    close(c->fd);
    mc_list_remove(&c->link);
    c->io->n_hsconns--;
    mc__te_iplimit_release(&c->io->te->hs_ips, &c->ip);
    mc__te_auth_srv_free(c->io, c->auth);
    free(c->in);
    free(c->out);
    free(c);
}

static void hs_reply(te_hsconn *c, uint8_t type, const char *payload, size_t len)
{
    size_t need = c->out_len + MC_TE_HS_PREFIX + len;
    uint8_t *o = mc_xrealloc(c->out, need);
    c->out = o;
    mc__te_hs_encode_prefix(c->out + c->out_len, type, len);
    memcpy(c->out + c->out_len + MC_TE_HS_PREFIX, payload, len);
    c->out_len = need;
}

static void hs_error(te_hsconn *c, uint8_t type, const char *msg)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "{\"error\": \"%s\"}", msg);
    hs_reply(c, type, buf, (size_t)n);
}

static void hs_handle(te_hsconn *c, const mc__te_hs_frame *f)
{
    mc_te *te = c->io->te;
    switch (f->type) {
    case MC_TE_HS_METADATA: {
        pthread_mutex_lock(&te->desc_lock);
        if (te->desc_json)
            hs_reply(c, f->type, te->desc_json, te->desc_json_len);
        else
            hs_error(c, f->type, "no descriptor");
        pthread_mutex_unlock(&te->desc_lock);
        break;
    }
    case MC_TE_HS_NOTIFY: {
        char *name, *msg;
        size_t ml;
        if (mc__te_hs_notify_decode(f->payload, f->payload_len, &name, &msg, &ml) < 0) {
            hs_error(c, f->type, "malformed notify");
            break;
        }
        if (mc__te_notify_push(te, name, msg, ml) < 0) {
            free(name);
            free(msg);
            hs_error(c, f->type, "notify queue full");
            break;
        }
        hs_reply(c, f->type, "{}", 2);
        break;
    }
    case MC_TE_HS_PROBE:
        hs_reply(c, f->type, "{}", 2);
        break;
    default:
        hs_error(c, f->type, "unsupported handshake type");
        c->close_after = true;
        break;
    }
}

/* Returns 0, or -1 when closed. */
static int hs_flush(te_hsconn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t k = mc_sock_send_nb(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (k == 0) {
            mc_loop_mod(c->io->loop, c->fd, EPOLLOUT); /* read again once flushed */
            return 0;
        }
        if (k < 0) {
            hs_close(c);
            return -1;
        }
        c->out_off += (size_t)k;
    }
    c->out_off = c->out_len = 0;
    if (c->close_after) {
        hs_close(c);
        return -1;
    }
    mc_loop_mod(c->io->loop, c->fd, EPOLLIN);
    return 0;
}

/* Handles the whole frames in c->in while the reply backlog is small.
 * Returns 0, or -1 when closed. */
static int hs_process(te_hsconn *c)
{
    mc_te *te = c->io->te;
    if (!c->checked_first && c->in_len >= 4) {
        c->checked_first = true;
        if (!te->auth && mc_auth_looks_like_frame(c->in, 4)) {
            mc__te_auth_answer_open(te, c->fd, "handshake port");
            hs_close(c);
            return -1;
        }
    }
    while (!c->close_after && c->out_len <= (4u << 20)) {
        mc__te_hs_frame f;
        long long used = mc__te_hs_parse(c->in, c->in_len, te->hs_max, &f);
        if (used < 0) {
            mc_log(MC_LOG_DEBUG, TE_TAG, "handshake: bad frame length, closing");
            hs_close(c);
            return -1;
        }
        if (used == 0)
            break;
        hs_handle(c, &f);
        memmove(c->in, c->in + used, c->in_len - (size_t)used);
        c->in_len -= (size_t)used;
    }
    return 0;
}

static void hs_io(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)loop;
    (void)fd;
    te_hsconn *c = arg;
    mc_te *te = c->io->te;
    c->last_ms = mc_now_ms();
    if (c->auth) { /* not authenticated yet: nothing but the handshake is read */
        int rc = mc__te_auth_srv_io(te, c->auth, c->fd);
        if (rc < 0) {
            hs_close(c);
            return;
        }
        if (rc == 0)
            return;
        mc__te_auth_srv_free(c->io, c->auth);
        c->auth = NULL;
        events |= EPOLLIN; /* frames may already wait behind the handshake */
    }
    if (events & EPOLLOUT) {
        if (hs_flush(c) < 0)
            return;
        if (!c->out_len) { /* flushed: frames may wait in the buffer */
            if (hs_process(c) < 0)
                return;
            if (c->out_len)
                hs_flush(c);
            return;
        }
    }
    if (!(events & (EPOLLIN | EPOLLERR | EPOLLHUP)) || c->close_after || c->out_len)
        return;
    while (!c->close_after && c->out_len <= (4u << 20)) {
        if (c->in_len == c->in_cap) {
            /* grow towards the frame being read, never past the limit */
            size_t cap = c->in_cap ? c->in_cap * 2 : 4096;
            size_t limit = (size_t)te->hs_max + 8;
            if (cap > limit)
                cap = limit;
            if (cap <= c->in_cap) { /* cannot happen: parse refuses larger frames first */
                hs_close(c);
                return;
            }
            uint8_t *in = mc_xrealloc(c->in, cap);
            c->in = in;
            c->in_cap = cap;
        }
        ssize_t k = mc_sock_recv_nb(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (k == 0)
            break; /* nothing more now */
        if (k < 0) { /* error or EOF */
            hs_close(c);
            return;
        }
        c->in_len += (size_t)k;
        if (hs_process(c) < 0)
            return;
    }
    if (c->out_len)
        hs_flush(c);
}

static void hs_accept(mc_loop *loop, int lfd, uint32_t events, void *arg)
{
    (void)events;
    te_io *io = arg;
    for (int i = 0; i < 64; i++) {
        int fd = mc_sock_accept(lfd, true);
        if (fd < 0)
            return;
        mc_te *te = io->te;
        if (io->n_hsconns >= HS_MAX_CONNS) {
            atomic_fetch_add(&te->st.conn_limit, 1);
            close(fd);
            continue;
        }
        uint32_t per_ip =
            te->max_conns_per_ip < HS_MAX_PER_IP ? te->max_conns_per_ip : HS_MAX_PER_IP;
        te_ipkey ip;
        if (!mc__te_iplimit_acquire(&te->hs_ips, fd, per_ip, &ip)) {
            atomic_fetch_add(&te->st.ip_limit, 1);
            close(fd);
            continue;
        }
        te_hsconn *c = mc_xcalloc(1, sizeof *c);
        c->io = io;
        c->fd = fd;
        c->ip = ip;
        c->last_ms = mc_now_ms();
        if (mc_loop_add(loop, fd, EPOLLIN, hs_io, c) < 0) {
            mc__te_iplimit_release(&te->hs_ips, &ip);
            close(fd);
            free(c);
            continue;
        }
        c->auth = mc__te_auth_srv_new(io, TE_AUTH_HS, "handshake port");
        mc_list_push_front(&io->hsconns, &c->link);
        io->n_hsconns++;
    }
}

int mc__te_hs_start(mc_te *te)
{
    mc_sock_set_nonblock(te->hs_lfd, true);
    return mc_loop_add(te->io[0].loop, te->hs_lfd, EPOLLIN, hs_accept, &te->io[0]);
}

void mc__te_hs_tick(te_io *io)
{
    uint64_t now = mc_now_ms();
    te_hsconn *c;
    MC_LIST_FOREACH_ENTRY(c, &io->hsconns, te_hsconn, link)
        if (now - c->last_ms > HS_IDLE_MS ||
            (c->auth && mc__te_auth_expired(io->te, c->auth, c->fd, now)))
            hs_close(c);
}

void mc__te_hs_close_all(te_io *io)
{
    te_hsconn *c;
    MC_LIST_FOREACH_ENTRY(c, &io->hsconns, te_hsconn, link)
        hs_close(c); /* unlinks c only */
}

/* ---- client ---- */

/* The reply prefix is an authentication RESULT (it has the same 9 bytes): the peer
 * requires the secret and we have none. Logs why; returns -EACCES. */
_Static_assert(MC_TE_HS_PREFIX == MC_AUTH_HEADER + 1, "a RESULT frame fills the prefix");
static int hs_refused(mc_te *te, const uint8_t *pre, const char *host, uint16_t port)
{
    int code = MC_AUTH_MALFORMED;
    mc_auth_frame f;
    if (mc_auth_frame_parse(pre, MC_TE_HS_PREFIX, &f) > 0 && f.type == MC_AUTH_RESULT)
        code = f.code;
    char peer[MC_METADATA_MAX_HOST + 16];
    snprintf(peer, sizeof peer, "%s:%u", host, port);
    mc__te_auth_client_log(te, "the handshake port", peer, code);
    return -EACCES;
}

int mc__te_hs_request(mc_te *te, const char *host, uint16_t port, uint8_t type,
                      const void *payload, size_t len, uint32_t max_len, uint64_t timeout_ms,
                      char **reply, size_t *reply_len)
{
    uint64_t deadline = mc_deadline_ms(timeout_ms);
    int fd = mc_sock_connect_tcp(host, port,
                                 (int)(timeout_ms < TE_HS_CONNECT_TIMEOUT_MS
                                           ? timeout_ms
                                           : TE_HS_CONNECT_TIMEOUT_MS));
    if (fd < 0)
        return fd;
    if (te->auth) {
        char err[256];
        int a = mc_auth_client_fd(fd, te->auth, TE_AUTH_HS, deadline, err, sizeof err);
        if (a != MC_AUTH_OK) {
            close(fd);
            char peer[MC_METADATA_MAX_HOST + 16];
            snprintf(peer, sizeof peer, "%s:%u", host, port);
            mc__te_auth_client_log(te, "the handshake port", peer, a);
            return a == -MC_AUTH_TIMEOUT ? -ETIMEDOUT : -EACCES;
        }
    }
    uint8_t pre[MC_TE_HS_PREFIX];
    mc__te_hs_encode_prefix(pre, type, len);
    struct iovec iov[2] = {{.iov_base = pre, .iov_len = sizeof pre},
                           {.iov_base = (void *)payload, .iov_len = len}};
    int rc = mc_sock_sendv_all(fd, iov, len ? 2 : 1, deadline);
    uint8_t rp[MC_TE_HS_PREFIX];
    if (rc == 0)
        rc = mc_sock_recv_all(fd, rp, sizeof rp, deadline);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    if (mc_auth_looks_like_frame(rp, 4)) {
        rc = hs_refused(te, rp, host, port);
        close(fd);
        return rc;
    }
    uint64_t flen = mc_get_le64(rp);
    if (flen == 0 || flen > max_len || rp[8] != type) {
        close(fd);
        return -EPROTO;
    }
    size_t plen = (size_t)flen - 1;
    char *buf = mc_xmalloc(plen + 1);
    rc = plen ? mc_sock_recv_all(fd, buf, plen, deadline) : 0;
    close(fd);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[plen] = '\0';
    *reply = buf;
    *reply_len = plen;
    return 0;
}
