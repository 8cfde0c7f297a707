/* dummy_server.c: the real client's side of the dummy-client channel (client/dummy.h,
 * wire format client/dummy_ipc.h). Upstream: RealClient's IPC server for DummyClient
 * (real_client.cpp, "@mooncake_client_<port>.sock").
 *
 * Threads: one accept thread (poll on the listening socket and a stop pipe), one thread
 * per dummy connection. srv->lock guards the connection list; a connection's fields are
 * its thread's, except fd, which stop shuts down to wake the thread. A finished
 * connection thread marks itself done; the accept thread (or stop) joins and frees it. */
#include "client/dummy.h"
#include "net/sock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/dummy_ipc.h"
#include "common/list.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG "dummy-srv"

typedef struct conn {
    mc_list node; /* in srv->conns, under srv->lock */
    struct mc_dummy_server *srv;
    int fd;
    pthread_t th;
    atomic_bool done;
    uint8_t *pool; /* the dummy's shared pool, mapped (NULL: none yet) */
    uint64_t pool_size;
    bool pool_registered;
    pid_t pid;
} conn;

struct mc_dummy_server {
    mc_store *store;
    int lfd;
    int stop_pipe[2];
    pthread_t accept_th;
    pthread_mutex_t lock; /* guards conns, nconns */
    mc_list conns;
    size_t nconns;
    atomic_uint_fast64_t pools, pool_bytes, requests, refused;
};

/* ---- socket helpers ---- */

/* Reads exactly n bytes; file descriptors that come along are appended to fds (at most
 * 4 kept; the rest closed). Returns 0, -EPIPE on EOF, -errno. */
static int recv_all(int fd, uint8_t *p, size_t n, int *fds, int *nfds)
{
    while (n) {
        struct iovec iov = {.iov_base = p, .iov_len = n};
        union {
            char buf[CMSG_SPACE(4 * sizeof(int))];
            struct cmsghdr align;
        } cm;
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (fds) {
            mh.msg_control = cm.buf;
            mh.msg_controllen = sizeof cm.buf;
        }
        ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EPIPE;
        if (fds) {
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                    continue;
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *v = (int *)(void *)CMSG_DATA(c);
                for (size_t i = 0; i < k; i++) {
                    if (*nfds < 4)
                        fds[(*nfds)++] = v[i];
                    else
                        close(v[i]);
                }
            }
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* ---- request handlers: each gets the decoded request and appends its reply fields
 * (after the status it returns) to q->extra ---- */

typedef struct req {
    conn *c;
    mc_dipc_request d;
    mc_dipc_wr extra; /* reply fields after the status */
    int fd;           /* a descriptor that came with HELLO, or -1 */
} req;

/* [off, off + len) of the pool, or NULL (no pool, out of bounds). */
static void *pool_at(conn *c, uint64_t off, uint64_t len)
{
    if (!c->pool || off > c->pool_size || len > c->pool_size - off)
        return NULL;
    return c->pool + off;
}

static void cfg_from(mc_store_replicate_config *cfg, uint32_t replica_num)
{
    mc_store_replicate_config_init(cfg);
    cfg->replica_num = replica_num ? replica_num : 1;
}

static mc_store_key key_of(const mc_dipc_row *r)
{
    return (mc_store_key){r->key, r->key_len};
}

static int64_t op_hello(req *q)
{
    conn *c = q->c;
    uint64_t size = q->d.pool_size;
    if (c->pool)
        return MC_INVALID_PARAMS; /* one pool per connection */
    if (size) {
        struct stat st;
        if (q->fd < 0 || fstat(q->fd, &st) < 0 || (uint64_t)st.st_size < size)
            return MC_INVALID_PARAMS;
        /* A pool its owner could shrink later would fault (SIGBUS) in this process on
         * the next access: only a memfd sealed against shrinking is mapped. */
        int seals = fcntl(q->fd, F_GET_SEALS);
        if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
            mc_log(MC_LOG_WARN, TAG,
                   "refused the pool of dummy pid %d: not a memfd sealed with F_SEAL_SHRINK",
                   (int)c->pid);
            return MC_INVALID_PARAMS;
        }
        void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, q->fd, 0);
        if (p == MAP_FAILED) {
            mc_log(MC_LOG_WARN, TAG, "cannot map the pool of dummy pid %d: %s", (int)c->pid,
                   strerror(errno));
            return MC_INVALID_PARAMS;
        }
        c->pool = p;
        c->pool_size = size;
        c->pool_registered = mc_store_register_buffer(c->srv->store, p, (size_t)size) == MC_OK;
        atomic_fetch_add(&c->srv->pools, 1);
        atomic_fetch_add(&c->srv->pool_bytes, size);
    }
    char name[MC_STORE_NAME_MAX];
    if (mc_store_get_hostname(c->srv->store, name, sizeof name) < 0)
        name[0] = '\0';
    mc_dipc_put_bytes(&q->extra, name, strlen(name));
    return MC_OK;
}

/* put (or upsert) of one object from p (the body or the pool). */
static int64_t put_one(req *q, const mc_dipc_row *row, const void *p, uint64_t size, bool up)
{
    mc_store_replicate_config cfg;
    cfg_from(&cfg, q->d.replica_num);
    mc_store_key k = key_of(row);
    int res = MC_OK;
    int rc = up ? mc_store_batch_upsert_from(q->c->srv->store, &k, 1, &p, &size, &cfg, &res)
                : mc_store_batch_put_from(q->c->srv->store, &k, 1, &p, &size, &cfg, &res);
    return rc != MC_OK ? rc : res;
}

static int64_t op_put(req *q)
{
    if (!q->d.value_len)
        return MC_INVALID_PARAMS;
    /* straight from the request body: the real client may have no local buffer */
    return put_one(q, &q->d.rows[0], q->d.value, q->d.value_len, q->d.op == MC_DIPC_UPSERT);
}

static int64_t op_get(req *q)
{
    const mc_dipc_row *row = &q->d.rows[0];
    void *buf = NULL;
    int64_t r = mc_store_get_alloc(q->c->srv->store, row->key, row->key_len, &buf);
    if (r >= 0 && (uint64_t)r > MC_DIPC_MAX_BODY - 64)
        r = MC_INVALID_PARAMS; /* too large to travel inline: use get_into on the pool */
    if (r >= 0)
        mc_dipc_put_bytes(&q->extra, buf, (size_t)r);
    free(buf);
    return r;
}

static int64_t op_put_from(req *q)
{
    const mc_dipc_row *row = &q->d.rows[0];
    void *p = pool_at(q->c, row->off, row->len);
    if (!p)
        return MC_INVALID_PARAMS;
    if (!row->len)
        return MC_OK; /* upstream put_from: size 0 stores nothing */
    return put_one(q, row, p, row->len, q->d.op == MC_DIPC_UPSERT_FROM);
}

static int64_t op_get_into(req *q)
{
    const mc_dipc_row *row = &q->d.rows[0];
    void *p = pool_at(q->c, row->off, row->len);
    if (!p)
        return MC_INVALID_PARAMS;
    return mc_store_get_into(q->c->srv->store, row->key, row->key_len, p, row->len);
}

/* The batch ops over the pool: rows outside the pool get MC_INVALID_PARAMS, the others
 * go to the store in one call (order kept); replies u32 n, n x i64. */
static int64_t op_batch_pool(req *q, bool put)
{
    uint32_t n = q->d.n, m = 0;
    size_t a = n ? n : 1;
    int64_t *out = mc_xcalloc(a, sizeof *out);
    uint32_t *map = mc_xcalloc(a, sizeof *map);
    mc_store_key *k = mc_xcalloc(a, sizeof *k);
    void **p = mc_xcalloc(a, sizeof *p);
    uint64_t *l = mc_xcalloc(a, sizeof *l);
    int64_t *gres = mc_xcalloc(a, sizeof *gres);
    int *pres = mc_xcalloc(a, sizeof *pres);
    for (uint32_t i = 0; i < n; i++) {
        const mc_dipc_row *row = &q->d.rows[i];
        void *ptr = pool_at(q->c, row->off, row->len);
        if (!ptr) {
            out[i] = MC_INVALID_PARAMS;
            continue;
        }
        if (put && !row->len)
            continue; /* size 0 stores nothing and succeeds */
        map[m] = i;
        k[m] = key_of(row);
        p[m] = ptr;
        l[m++] = row->len;
    }
    int rc = MC_OK;
    if (m && put) {
        mc_store_replicate_config cfg;
        cfg_from(&cfg, q->d.replica_num);
        rc = q->d.op == MC_DIPC_BATCH_UPSERT_FROM
                 ? mc_store_batch_upsert_from(q->c->srv->store, k, m, (const void *const *)p, l,
                                              &cfg, pres)
                 : mc_store_batch_put_from(q->c->srv->store, k, m, (const void *const *)p, l,
                                           &cfg, pres);
    } else if (m) {
        rc = mc_store_batch_get_into(q->c->srv->store, k, m, p, l, gres);
    }
    for (uint32_t j = 0; j < m; j++)
        out[map[j]] = rc != MC_OK ? rc : put ? pres[j] : gres[j];
    mc_dipc_put_u32(&q->extra, n);
    for (uint32_t i = 0; i < n; i++)
        mc_dipc_put_i64(&q->extra, out[i]);
    free(out), free(map), free(k), free(p), free(l), free(gres), free(pres);
    return MC_OK;
}

/* BATCH_IS_EXIST / BATCH_REMOVE: u32 n, n x i64. */
static int64_t op_batch_keys(req *q, bool remove)
{
    uint32_t n = q->d.n;
    mc_store_key *k = mc_xcalloc(n ? n : 1, sizeof *k);
    int *res = mc_xcalloc(n ? n : 1, sizeof *res);
    for (uint32_t i = 0; i < n; i++)
        k[i] = key_of(&q->d.rows[i]);
    int r = !n     ? MC_OK
            : remove ? mc_store_batch_remove(q->c->srv->store, k, n, q->d.force, res)
                     : mc_store_batch_is_exist(q->c->srv->store, k, n, res);
    mc_dipc_put_u32(&q->extra, n);
    for (uint32_t i = 0; i < n; i++)
        mc_dipc_put_i64(&q->extra, r != MC_OK ? r : res[i]);
    free(k);
    free(res);
    return MC_OK;
}

/* BATCH_PUT_MULTI / BATCH_GET_MULTI: each key's segments must lie in the pool (else
 * that key gets MC_INVALID_PARAMS); the others go to the store in one call. Replies
 * u32 n, n x i64. */
static int64_t op_batch_multi(req *q, bool put)
{
    uint32_t n = q->d.n, m = 0;
    size_t a = n ? n : 1;
    int64_t *out = mc_xcalloc(a, sizeof *out);
    uint32_t *map = mc_xcalloc(a, sizeof *map);
    mc_store_key *k = mc_xcalloc(a, sizeof *k);
    const mc_store_iov **iovs = mc_xcalloc(a, sizeof *iovs);
    size_t *cnt = mc_xcalloc(a, sizeof *cnt);
    mc_store_iov *all = mc_xcalloc(q->d.nsegs ? q->d.nsegs : 1, sizeof *all);
    int64_t *gres = mc_xcalloc(a, sizeof *gres);
    int *pres = mc_xcalloc(a, sizeof *pres);
    for (uint32_t i = 0; i < n; i++) {
        const mc_dipc_row *row = &q->d.rows[i];
        bool ok = row->nseg > 0;
        for (uint32_t j = 0; j < row->nseg && ok; j++) {
            const mc_dipc_seg *sg = &q->d.segs[row->seg0 + j];
            all[row->seg0 + j].base = pool_at(q->c, sg->off, sg->len);
            all[row->seg0 + j].len = sg->len;
            ok = all[row->seg0 + j].base != NULL;
        }
        if (!ok) {
            out[i] = MC_INVALID_PARAMS;
            continue;
        }
        map[m] = i;
        k[m] = key_of(row);
        iovs[m] = &all[row->seg0];
        cnt[m++] = row->nseg;
    }
    int rc = MC_OK;
    if (m && put) {
        mc_store_replicate_config cfg;
        cfg_from(&cfg, q->d.replica_num);
        rc = mc_store_batch_put_from_multi_buffers(q->c->srv->store, k, m, iovs, cnt, &cfg,
                                                   pres);
    } else if (m) {
        rc = mc_store_batch_get_into_multi_buffers(q->c->srv->store, k, m, iovs, cnt,
                                                   q->d.prefer_same_node, gres);
    }
    for (uint32_t j = 0; j < m; j++)
        out[map[j]] = rc != MC_OK ? rc : put ? pres[j] : gres[j];
    mc_dipc_put_u32(&q->extra, n);
    for (uint32_t i = 0; i < n; i++)
        mc_dipc_put_i64(&q->extra, out[i]);
    free(out), free(map), free(k), free(iovs), free(cnt), free(all), free(gres), free(pres);
    return MC_OK;
}

/* REPLICA_DESC: one batch lookup (it grants read leases, as on the real client). */
static int64_t op_replica_desc(req *q)
{
    uint32_t n = q->d.n;
    size_t a = n ? n : 1;
    mc_store_key *k = mc_xcalloc(a, sizeof *k);
    mc_store_replica_list *ls = mc_xcalloc(a, sizeof *ls);
    int *res = mc_xcalloc(a, sizeof *res);
    for (uint32_t i = 0; i < n; i++)
        k[i] = key_of(&q->d.rows[i]);
    int rc = n ? mc_store_batch_get_replica_desc(q->c->srv->store, k, n, ls, res) : MC_OK;
    mc_dipc_put_u32(&q->extra, n);
    for (uint32_t i = 0; i < n; i++) {
        int r = rc != MC_OK ? rc : res[i];
        uint32_t cnt = r == MC_OK ? ls[i].n : 0;
        if (cnt > MC_STORE_MAX_REPLICAS)
            cnt = MC_STORE_MAX_REPLICAS;
        mc_dipc_put_i64(&q->extra, r);
        mc_dipc_put_u32(&q->extra, cnt);
        for (uint32_t j = 0; j < cnt; j++) {
            const mc_store_replica_desc *d = &ls[i].replicas[j];
            mc_dipc_put_u32(&q->extra, (uint32_t)d->status);
            mc_dipc_put_u8(&q->extra, (uint8_t)d->replica_type);
            mc_dipc_put_u64(&q->extra, d->size);
            mc_dipc_put_u64(&q->extra, d->buffer_address);
            mc_dipc_put_bytes(&q->extra, d->transport_endpoint,
                              strnlen(d->transport_endpoint, sizeof d->transport_endpoint));
            mc_dipc_put_bytes(&q->extra, d->protocol, strnlen(d->protocol, sizeof d->protocol));
        }
    }
    free(k), free(ls), free(res);
    return MC_OK;
}

static int64_t op_stats(req *q)
{
    mc_dummy_stats st;
    mc_dummy_server_stats(q->c->srv, &st);
    mc_dipc_put_u64(&q->extra, st.connections);
    mc_dipc_put_u64(&q->extra, st.pools);
    mc_dipc_put_u64(&q->extra, st.pool_bytes);
    mc_dipc_put_u64(&q->extra, st.requests);
    mc_dipc_put_u64(&q->extra, st.refused);
    return MC_OK;
}

static int64_t dispatch(req *q)
{
    mc_store *s = q->c->srv->store;
    const mc_dipc_row *row = &q->d.rows[0];
    switch (q->d.op) {
    case MC_DIPC_HELLO: return op_hello(q);
    case MC_DIPC_PUT: return op_put(q);
    case MC_DIPC_GET: return op_get(q);
    case MC_DIPC_PUT_FROM: return op_put_from(q);
    case MC_DIPC_GET_INTO: return op_get_into(q);
    case MC_DIPC_BATCH_PUT_FROM: return op_batch_pool(q, true);
    case MC_DIPC_BATCH_GET_INTO: return op_batch_pool(q, false);
    case MC_DIPC_IS_EXIST: return mc_store_is_exist(s, row->key, row->key_len);
    case MC_DIPC_BATCH_IS_EXIST: return op_batch_keys(q, false);
    case MC_DIPC_REMOVE: return mc_store_remove(s, row->key, row->key_len, q->d.force);
    case MC_DIPC_REMOVE_ALL: return mc_store_remove_all(s, q->d.force);
    case MC_DIPC_GET_SIZE: return mc_store_get_size(s, row->key, row->key_len);
    case MC_DIPC_STATS: return op_stats(q);
    case MC_DIPC_BATCH_REMOVE: return op_batch_keys(q, true);
    case MC_DIPC_UPSERT: return op_put(q);
    case MC_DIPC_UPSERT_FROM: return op_put_from(q);
    case MC_DIPC_BATCH_UPSERT_FROM: return op_batch_pool(q, true);
    case MC_DIPC_REMOVE_BY_REGEX:
        return mc_store_remove_by_regex(s, q->d.value, q->d.value_len, q->d.force);
    case MC_DIPC_BATCH_PUT_MULTI: return op_batch_multi(q, true);
    case MC_DIPC_BATCH_GET_MULTI: return op_batch_multi(q, false);
    case MC_DIPC_REPLICA_DESC: return op_replica_desc(q);
    default: return MC_INVALID_PARAMS;
    }
}

/* ---- connections ---- */

static void conn_release(conn *c)
{
    if (c->pool) {
        if (c->pool_registered)
            mc_store_unregister_buffer(c->srv->store, c->pool);
        munmap(c->pool, (size_t)c->pool_size);
        atomic_fetch_sub(&c->srv->pools, 1);
        atomic_fetch_sub(&c->srv->pool_bytes, c->pool_size);
        c->pool = NULL;
    }
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    mc_dummy_server *srv = c->srv;
    uint8_t hdr[MC_DIPC_HDR];
    uint8_t *body = NULL;
    size_t body_cap = 0;
    for (;;) {
        int fds[4], nfds = 0;
        int rc = recv_all(c->fd, hdr, sizeof hdr, fds, &nfds);
        mc_dipc_hdr h;
        if (rc == 0 && mc_dipc_hdr_parse(hdr, MC_DIPC_MAX_BODY, false, &h) != 0) {
            atomic_fetch_add(&srv->refused, 1);
            mc_log(MC_LOG_WARN, TAG, "dummy pid %d sent a malformed frame header: closing",
                   (int)c->pid);
            rc = -EPROTO;
        }
        if (rc == 0 && h.body_len > body_cap) {
            free(body);
            body_cap = h.body_len;
            body = mc_xmalloc(body_cap);
        }
        if (rc == 0)
            rc = recv_all(c->fd, body, h.body_len, fds, &nfds);
        if (rc != 0) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            break;
        }
        req q = {.c = c, .fd = -1};
        mc_dipc_wr_init(&q.extra);
        if (h.op == MC_DIPC_HELLO && nfds > 0)
            q.fd = fds[0];
        int64_t st;
        if (mc_dipc_decode_request(h.op, body, h.body_len, &q.d) != 0) {
            /* a malformed body gets an answer (the framing is intact) */
            atomic_fetch_add(&srv->refused, 1);
            st = MC_INVALID_PARAMS;
        } else {
            st = dispatch(&q);
        }
        mc_dipc_request_free(&q.d);
        for (int i = 0; i < nfds; i++)
            close(fds[i]); /* a mapped pool keeps its pages without the descriptor */
        /* reply: header, i64 status, then the handler's fields */
        mc_dipc_wr w;
        mc_dipc_wr_init(&w);
        mc_dipc_put_i64(&w, st);
        size_t extra = q.extra.n - MC_DIPC_HDR;
        if (extra)
            memcpy(mc_dipc_wr_reserve(&w, extra), q.extra.p + MC_DIPC_HDR, extra);
        mc_dipc_wr_finish(&w, (uint16_t)(h.op | MC_DIPC_REPLY), h.id);
        mc_dipc_wr_free(&q.extra);
        rc = mc_sock_send_all(c->fd, w.p, w.n, 0); /* blocking, MSG_NOSIGNAL */
        mc_dipc_wr_free(&w);
        atomic_fetch_add(&srv->requests, 1);
        if (rc != 0)
            break;
    }
    free(body);
    conn_release(c);
    atomic_store(&c->done, true);
    return NULL;
}

/* Joins and frees finished connections (all of them when all: stop). */
static void reap_conns(mc_dummy_server *srv, bool all)
{
    mc_list gone;
    mc_list_init(&gone);
    pthread_mutex_lock(&srv->lock);
    conn *c;
    MC_LIST_FOREACH_ENTRY(c, &srv->conns, conn, node)
    {
        if (all)
            shutdown(c->fd, SHUT_RDWR);
        if (all || atomic_load(&c->done)) {
            mc_list_remove(&c->node);
            srv->nconns--;
            mc_list_push_back(&gone, &c->node);
        }
    }
    pthread_mutex_unlock(&srv->lock);
    MC_LIST_FOREACH_ENTRY(c, &gone, conn, node)
    {
        pthread_join(c->th, NULL);
        mc_list_remove(&c->node);
        close(c->fd);
        free(c);
    }
}

static void accept_one(mc_dummy_server *srv)
{
    int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.uid != geteuid()) {
        atomic_fetch_add(&srv->refused, 1);
        mc_log(MC_LOG_WARN, TAG, "refused a dummy client of another user (uid %d)",
               cl == sizeof cr ? (int)cr.uid : -1);
        close(fd);
        return;
    }
    pthread_mutex_lock(&srv->lock);
    bool room = srv->nconns < MC_DUMMY_MAX_CONNECTIONS;
    pthread_mutex_unlock(&srv->lock);
    if (!room) {
        atomic_fetch_add(&srv->refused, 1);
        mc_log(MC_LOG_WARN, TAG, "refused a dummy client: %u connections already",
               MC_DUMMY_MAX_CONNECTIONS);
        close(fd);
        return;
    }
    conn *c = mc_xcalloc(1, sizeof *c);
    mc_list_init(&c->node);
    c->srv = srv;
    c->fd = fd;
    c->pid = cr.pid;
    atomic_init(&c->done, false);
    if (pthread_create(&c->th, NULL, conn_main, c) != 0) {
        close(fd);
        free(c);
        atomic_fetch_add(&srv->refused, 1);
        return;
    }
    pthread_mutex_lock(&srv->lock);
    mc_list_push_back(&srv->conns, &c->node);
    srv->nconns++;
    pthread_mutex_unlock(&srv->lock);
}

static void *accept_main(void *arg)
{
    mc_dummy_server *srv = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = srv->lfd, .events = POLLIN},
                              {.fd = srv->stop_pipe[0], .events = POLLIN}};
        /* the timeout only paces the reaping of finished connections */
        int r = poll(p, 2, 200);
        if (r < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (r > 0 && (p[0].revents & POLLIN))
            accept_one(srv);
        reap_conns(srv, false);
    }
    return NULL;
}

int mc_dummy_server_start(mc_store *s, int port, mc_dummy_server **out)
{
    *out = NULL;
    if (!s || port < 1 || port > 65535)
        return MC_INVALID_PARAMS;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t nl = mc_dipc_socket_name(port, sa.sun_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return MC_INTERNAL_ERROR;
    if (bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + nl)) <
            0 ||
        listen(fd, 128) < 0) {
        mc_log(MC_LOG_ERROR, TAG,
               "cannot listen on the dummy-client socket @%s: %s (another mooncake_client "
               "with --port=%d on this host?)",
               sa.sun_path + 1, strerror(errno), port);
        close(fd);
        return MC_INTERNAL_ERROR;
    }
    mc_dummy_server *srv = mc_xcalloc(1, sizeof *srv);
    srv->store = s;
    srv->lfd = fd;
    if (pipe2(srv->stop_pipe, O_CLOEXEC) < 0) {
        close(fd);
        free(srv);
        return MC_INTERNAL_ERROR;
    }
    pthread_mutex_init(&srv->lock, NULL);
    mc_list_init(&srv->conns);
    if (pthread_create(&srv->accept_th, NULL, accept_main, srv) != 0) {
        close(srv->stop_pipe[0]);
        close(srv->stop_pipe[1]);
        close(fd);
        pthread_mutex_destroy(&srv->lock);
        free(srv);
        return MC_INTERNAL_ERROR;
    }
    mc_log(MC_LOG_INFO, TAG, "serving dummy clients on @%s", sa.sun_path + 1);
    *out = srv;
    return MC_OK;
}

void mc_dummy_server_stop(mc_dummy_server *srv)
{
    if (!srv)
        return;
    ssize_t w = write(srv->stop_pipe[1], "x", 1);
    (void)w;
    pthread_join(srv->accept_th, NULL);
    close(srv->lfd);
    reap_conns(srv, true);
    close(srv->stop_pipe[0]);
    close(srv->stop_pipe[1]);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
}

void mc_dummy_server_stats(mc_dummy_server *srv, mc_dummy_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!srv)
        return;
    pthread_mutex_lock(&srv->lock);
    conn *c;
    MC_LIST_FOREACH_ENTRY(c, &srv->conns, conn, node)
    {
        if (!atomic_load(&c->done))
            out->connections++;
    }
    pthread_mutex_unlock(&srv->lock);
    out->pools = atomic_load(&srv->pools);
    out->pool_bytes = atomic_load(&srv->pool_bytes);
    out->requests = atomic_load(&srv->requests);
    out->refused = atomic_load(&srv->refused);
}
