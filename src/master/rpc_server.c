/* rpc_server.c: the master's TCP front end (see rpc_server.h): the listener, the event
 * loops and their connections, and the tick thread. It moves frames only; decoding and
 * the service calls belong to rpc_handler.c, and it never touches service state. */
#include "master/rpc_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/list.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "net/conn.h"
#include "net/loop.h"
#include "net/sock.h"

#define TAG "master-rpc"

typedef struct loop_ctx loop_ctx;

/* One accepted connection; lives on one loop; guarded by that loop's thread. */
typedef struct srv_conn {
    mc_conn *c;
    loop_ctx *lc;
    mc_list link; /* in lc->conns */
} srv_conn;

struct loop_ctx {
    mc_master_rpc_server *srv;
    mc_loop *loop;
    mc_master_rpc_handler *h; /* used only on this loop's thread */
    mc_list conns;            /* srv_conn.link; guarded by the loop thread */
    bool started;
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
    /* counters: relaxed atomics */
    uint64_t conns_active, conns_total, conns_bad, frames, frames_refused;
};

static void count(uint64_t *c, int64_t d)
{
    __atomic_add_fetch(c, (uint64_t)d, __ATOMIC_RELAXED);
}

/* ---- connections ---- */

static void on_frame(mc_conn *c, const mc_frame_header *hdr, const uint8_t *body, void *arg)
{
    srv_conn *sc = arg;
    mc_master_rpc_server *srv = sc->lc->srv;
    if (hdr->flags & MC_FRAME_REPLY) { /* a client never sends replies */
        count(&srv->conns_bad, 1);
        mc_conn_close(c);
        return;
    }
    /* runs the request on this loop's thread with this loop's handler; the reply points
     * into the handler's buffer, valid until its next request (mc_conn_send copies it) */
    const uint8_t *reply;
    size_t reply_len;
    int st = mc_master_rpc_handle(sc->lc->h, hdr->opcode, body, hdr->body_len, &reply,
                                  &reply_len);
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
    mc_conn_send(c, &rh, reply, reply_len); /* failure closes the connection */
}

static void on_close(mc_conn *c, int err, void *arg)
{
    (void)c;
    srv_conn *sc = arg;
    mc_master_rpc_server *srv = sc->lc->srv;
    if (err == -EPROTO || err == -EMSGSIZE || err == -EPROTONOSUPPORT) {
        count(&srv->conns_bad, 1);
        mc_log(MC_LOG_DEBUG, TAG, "connection closed: bad frame (%s)", strerror(-err));
    }
    mc_list_remove(&sc->link);
    count(&srv->conns_active, -1);
    free(sc);
}

static const mc_conn_callbacks conn_cbs = {on_frame, on_close};

/* Runs on lc's loop: wraps fd into a connection. */
static void adopt_fd(loop_ctx *lc, int fd)
{
    srv_conn *sc = mc_xcalloc(1, sizeof *sc);
    sc->lc = lc;
    mc_list_push_front(&lc->conns, &sc->link);
    count(&lc->srv->conns_active, 1);
    count(&lc->srv->conns_total, 1);
    /* 0 backlog limit = the conn default (256 MiB of queued replies). */
    sc->c = mc_conn_create(lc->loop, fd, lc->srv->max_body, 0, &conn_cbs, sc);
    if (!sc->c) { /* fd already closed by mc_conn_create */
        mc_list_remove(&sc->link);
        count(&lc->srv->conns_active, -1);
        free(sc);
    }
}

typedef struct handoff {
    loop_ctx *lc;
    int fd;
} handoff;

static void handoff_task(void *arg)
{
    handoff *ho = arg;
    adopt_fd(ho->lc, ho->fd);
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
        mc_sock_set_nodelay(fd);
        loop_ctx *lc = &srv->lcs[srv->rr++ % srv->n]; /* round robin over the loops */
        if (lc == &srv->lcs[0]) {
            adopt_fd(lc, fd);
            continue;
        }
        /* another loop's connections belong to its thread: hand the fd over */
        handoff *ho = mc_xmalloc(sizeof *ho);
        ho->lc = lc;
        ho->fd = fd;
        if (mc_loop_post(lc->loop, handoff_task, ho) != 0) { /* loop stopping: drop it */
            close(fd);
            free(ho);
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
    while ((it = mc_list_front(&lc->conns))) /* on_close unlinks and frees it */
        mc_conn_close(MC_CONTAINER_OF(it, srv_conn, link)->c);
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
    unsigned tick_ms = o.tick_ms ? o.tick_ms : 10;
    const char *host = o.host && *o.host ? o.host : "0.0.0.0";

    int rc = mc_sock_listen_tcp(host, o.port, 1024, false, &srv->port);
    if (rc < 0) {
        free(srv);
        return rc;
    }
    srv->lfd = rc;
    mc_sock_set_nonblock(srv->lfd, true);

    srv->lcs = mc_xcalloc(srv->n, sizeof *srv->lcs);
    for (unsigned i = 0; i < srv->n; i++)
        mc_list_init(&srv->lcs[i].conns); /* before any failure: destroy walks them all */
    for (unsigned i = 0; i < srv->n; i++) {
        loop_ctx *lc = &srv->lcs[i];
        lc->srv = srv;
        rc = mc_loop_create(&lc->loop);
        if (rc)
            goto fail;
        lc->h = mc_master_rpc_handler_create(svc);
    }
    rc = mc_loop_create(&srv->hk);
    if (rc)
        goto fail;
    if (!mc_loop_timer_add(srv->hk, tick_ms, tick_ms, tick_task, srv)) {
        rc = -ENOMEM;
        goto fail;
    }
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
    free(srv);
}
