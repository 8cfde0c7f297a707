/* http_server.c: the embeddable HTTP metadata server on libmicrohttpd.
 * Semantics of upstream's master-embedded server (mooncake-store/src/
 * http_metadata_server.cpp; upstream-mooncake.md §7, API.md §4): an in-memory map of
 * opaque bodies keyed by the `key` query parameter at /metadata, write-once rpc_meta
 * keys (an identical rewrite is 200 "metadata unchanged"), /health. Sizes are bounded:
 * bodies (413), the whole store (507), keys (400).
 *
 * Threads: libmicrohttpd runs `threads` workers; the store is one jansson object (a
 * seeded hash table) under store_lock. We bind the listening socket ourselves so that
 * the caller gets the exact errno (EADDRINUSE) and port 0 works. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

#define TAG "http_metadata"

#if MHD_VERSION < 0x00097002
typedef int mhd_result;
#else
typedef enum MHD_Result mhd_result;
#endif

struct mc_http_metadata_server {
    struct MHD_Daemon *daemon; /* NULL once stopped; written by start/stop only */
    uint16_t port;             /* immutable */
    mc_http_metadata_server_opts opts; /* immutable, defaults filled */
    pthread_mutex_t store_lock;
    json_t *store;             /* key -> json string holding the raw body; store_lock */
    uint64_t total_bytes;      /* sum of key + body lengths; store_lock */
};

/* Per-request state, kept in MHD's con_cls between handler calls. */
typedef struct request {
    int op;             /* OP_* */
    char *body;         /* PUT body so far */
    size_t len, cap;
    uint64_t discarded; /* bytes dropped (over the limit, or a body on GET/DELETE) */
    bool too_big;
} request;

enum { OP_ANSWERED = 1, OP_HEALTH, OP_GET, OP_PUT, OP_DELETE };

static mhd_result reply(struct MHD_Connection *c, unsigned status, const char *body, size_t len,
                        const char *ctype)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    mhd_result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* Every /metadata response is application/json, as upstream's Python server does. */
static mhd_result msg(struct MHD_Connection *c, unsigned status, const char *text)
{
    return reply(c, status, text, strlen(text), "application/json");
}

/* Looks up `key`; returns NULL and queues the 400 when it is missing or unusable. */
static const char *get_key(struct MHD_Connection *c, size_t *klen, mhd_result *queued)
{
    const char *v = NULL;
    size_t n = 0;
    if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "key", 3, &v, &n) != MHD_YES ||
        !v) {
        *queued = msg(c, MHD_HTTP_BAD_REQUEST, "Missing key parameter");
        return NULL;
    }
    bool blank = true;
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\0') {
            *queued = msg(c, MHD_HTTP_BAD_REQUEST, "metadata key contains a NUL byte");
            return NULL;
        }
        if (!isspace((unsigned char)v[i]))
            blank = false;
    }
    if (blank) {
        *queued = msg(c, MHD_HTTP_BAD_REQUEST, "Missing key parameter");
        return NULL;
    }
    if (n > MC_METADATA_MAX_KEY) {
        *queued = msg(c, MHD_HTTP_BAD_REQUEST, "metadata key too long");
        return NULL;
    }
    *klen = n;
    return v;
}

static mhd_result do_get(mc_http_metadata_server *s, struct MHD_Connection *c, const char *key)
{
    pthread_mutex_lock(&s->store_lock);
    json_t *v = json_object_get(s->store, key);
    mhd_result rc;
    if (v)
        rc = reply(c, MHD_HTTP_OK, json_string_value(v), json_string_length(v),
                   "application/json");
    else
        rc = msg(c, MHD_HTTP_NOT_FOUND, "metadata not found");
    pthread_mutex_unlock(&s->store_lock);
    return rc;
}

static mhd_result do_put(mc_http_metadata_server *s, struct MHD_Connection *c, const char *key,
                         size_t klen, request *rq)
{
    const char *body = rq->body ? rq->body : "";
    pthread_mutex_lock(&s->store_lock);
    json_t *old = json_object_get(s->store, key);
    if (old && strstr(key, "rpc_meta")) {
        bool same = json_string_length(old) == rq->len &&
                    memcmp(json_string_value(old), body, rq->len) == 0;
        pthread_mutex_unlock(&s->store_lock);
        if (same)
            return msg(c, MHD_HTTP_OK, "metadata unchanged");
        return msg(c, MHD_HTTP_BAD_REQUEST, "Duplicate rpc_meta key not allowed");
    }
    uint64_t freed = old ? klen + json_string_length(old) : 0;
    uint64_t total = s->total_bytes - freed + klen + rq->len;
    if (total > s->opts.max_total_bytes) {
        pthread_mutex_unlock(&s->store_lock);
        return msg(c, 507, "metadata store full");
    }
    json_t *v = json_stringn_nocheck(body, rq->len);
    if (!v || json_object_set_new_nocheck(s->store, key, v) != 0)
        abort(); /* allocation failure */
    s->total_bytes = total;
    pthread_mutex_unlock(&s->store_lock);
    return msg(c, MHD_HTTP_OK, "metadata updated");
}

static mhd_result do_delete(mc_http_metadata_server *s, struct MHD_Connection *c,
                            const char *key, size_t klen)
{
    pthread_mutex_lock(&s->store_lock);
    json_t *old = json_object_get(s->store, key);
    if (old) {
        s->total_bytes -= klen + json_string_length(old);
        json_object_del(s->store, key);
    }
    pthread_mutex_unlock(&s->store_lock);
    return old ? msg(c, MHD_HTTP_OK, "metadata deleted")
               : msg(c, MHD_HTTP_NOT_FOUND, "metadata not found");
}

/* First call for a request (headers in, no body yet): classifies it and answers at
 * once when it can be refused without its body (the connection then closes). Requests
 * that will succeed are answered on the last call, which keeps the connection alive. */
static mhd_result first_call(mc_http_metadata_server *s, struct MHD_Connection *c,
                             const char *url, const char *method, request *rq)
{
    rq->op = OP_ANSWERED;
    if (strcmp(url, "/health") == 0) {
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
            return msg(c, MHD_HTTP_METHOD_NOT_ALLOWED, "Method not allowed");
        rq->op = OP_HEALTH;
        return MHD_YES;
    }
    if (strcmp(url, "/metadata") != 0)
        return msg(c, MHD_HTTP_NOT_FOUND, "not found");
    int op = strcmp(method, "GET") == 0      ? OP_GET
             : strcmp(method, "PUT") == 0    ? OP_PUT
             : strcmp(method, "DELETE") == 0 ? OP_DELETE
                                             : 0;
    if (!op)
        return msg(c, MHD_HTTP_METHOD_NOT_ALLOWED, "Method not allowed");
    size_t klen;
    mhd_result queued;
    if (!get_key(c, &klen, &queued))
        return queued;
    if (op == OP_PUT) {
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno || end == cl || n > s->opts.max_body_bytes)
                return msg(c, MHD_HTTP_CONTENT_TOO_LARGE, "metadata body too large");
        }
    }
    rq->op = op;
    return MHD_YES;
}

/* Takes one piece of the body. A PUT body over the limit (possible with chunked
 * encoding) is dropped and answered 413 at the end; bodies of other requests are
 * ignored. A peer that keeps sending as much again is cut off. */
static mhd_result take_body(mc_http_metadata_server *s, request *rq, const char *data, size_t n)
{
    if (rq->op != OP_PUT || rq->too_big || rq->len + n > s->opts.max_body_bytes) {
        rq->too_big = rq->op == OP_PUT;
        rq->discarded += n;
        return rq->discarded > s->opts.max_body_bytes ? MHD_NO : MHD_YES;
    }
    if (rq->len + n > rq->cap) {
        size_t cap = rq->cap ? rq->cap : 4096;
        while (cap < rq->len + n)
            cap *= 2;
        if (cap > s->opts.max_body_bytes)
            cap = s->opts.max_body_bytes;
        char *b = realloc(rq->body, cap);
        if (!b)
            return MHD_NO;
        rq->body = b;
        rq->cap = cap;
    }
    memcpy(rq->body + rq->len, data, n);
    rq->len += n;
    return MHD_YES;
}

static mhd_result handler(void *cls, struct MHD_Connection *c, const char *url,
                          const char *method, const char *version, const char *upload_data,
                          size_t *upload_data_size, void **con_cls)
{
    (void)version;
    mc_http_metadata_server *s = cls;
    request *rq = *con_cls;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq)
            return MHD_NO;
        *con_cls = rq;
        return first_call(s, c, url, method, rq);
    }
    if (rq->op == OP_ANSWERED)
        return MHD_NO; /* a response is already queued; MHD does not call again */
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return take_body(s, rq, upload_data, n);
    }
    /* The request is complete. */
    int op = rq->op;
    rq->op = OP_ANSWERED;
    if (op == OP_HEALTH)
        return reply(c, MHD_HTTP_OK, "OK", 2, "text/plain");
    size_t klen;
    mhd_result queued;
    const char *key = get_key(c, &klen, &queued);
    if (!key)
        return queued;
    switch (op) {
    case OP_GET:
        return do_get(s, c, key);
    case OP_DELETE:
        return do_delete(s, c, key, klen);
    default:
        if (rq->too_big)
            return msg(c, MHD_HTTP_CONTENT_TOO_LARGE, "metadata body too large");
        return do_put(s, c, key, klen, rq);
    }
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    request *rq = *con_cls;
    if (rq) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (MC_LOG_DEBUG < mc__log_threshold)
        return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    buf[strcspn(buf, "\n")] = '\0';
    mc_log(MC_LOG_DEBUG, TAG, "libmicrohttpd: %s", buf);
}

/* Binds and listens on host:port; returns the fd or -errno (-ENOENT, logged here: host
 * is not an address and does not resolve, as the net layer's mc_sock_listen_tcp). */
static int bind_listen(const char *host, uint16_t port, uint16_t *bound)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", (unsigned)port);
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai != 0) {
        mc_log(MC_LOG_ERROR, TAG, "cannot resolve listen host '%s': %s", host,
               gai_strerror(gai));
        return -ENOENT;
    }
    int err = -EADDRNOTAVAIL;
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
        if (fd < 0) {
            err = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
            break;
        err = -errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return err;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        err = -errno;
        close(fd);
        return err;
    }
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

int mc_http_metadata_server_start(const char *host, uint16_t port,
                                  const mc_http_metadata_server_opts *opts,
                                  mc_http_metadata_server **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!host)
        host = "0.0.0.0";
    if (!*host)
        return -EINVAL;
    mc_http_metadata_server_opts o = {0};
    if (opts)
        o = *opts;
    if (!o.max_body_bytes)
        o.max_body_bytes = MC_HTTP_METADATA_DEFAULT_MAX_BODY;
    if (!o.max_total_bytes)
        o.max_total_bytes = MC_HTTP_METADATA_DEFAULT_MAX_TOTAL;
    if (!o.threads)
        o.threads = 2;
    if (!o.max_connections)
        o.max_connections = 1024;
    if (!o.idle_timeout_s)
        o.idle_timeout_s = 30;
    if (o.threads > 64 || o.max_body_bytes > SIZE_MAX / 2)
        return -EINVAL;

    uint16_t bound = 0;
    int fd = bind_listen(host, port, &bound);
    if (fd < 0) {
        /* not logged: the caller reports it once, naming its own flags (the master's
         * --http_metadata_server_port, the standalone server's --port); logging here too
         * printed the same error twice. A name that does not resolve was logged with the
         * resolver's reason, which the caller does not have. */
        mc_log(MC_LOG_DEBUG, TAG, "cannot listen on %s:%u: %s", host, (unsigned)port,
               strerror(-fd));
        return fd;
    }
    mc_http_metadata_server *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->opts = o;
    s->port = bound;
    s->store = json_object();
    pthread_mutex_init(&s->store_lock, NULL);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    /* the logger first: libmicrohttpd prints to stderr whatever comes before it */
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, handler, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, s,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int)o.threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)o.max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o.idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_NOTIFY_COMPLETED,
        completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        int e = errno ? errno : EIO;
        mc_log(MC_LOG_ERROR, TAG, "cannot start the HTTP server on %s:%u: %s", host,
               (unsigned)bound, strerror(e));
        close(fd);
        json_decref(s->store);
        pthread_mutex_destroy(&s->store_lock);
        free(s);
        return -e;
    }
    mc_log(MC_LOG_INFO, TAG, "HTTP metadata server listening on %s:%u", host, (unsigned)bound);
    *out = s;
    return 0;
}

uint16_t mc_http_metadata_server_port(const mc_http_metadata_server *srv)
{
    return srv ? srv->port : 0;
}

size_t mc_http_metadata_server_count(mc_http_metadata_server *srv)
{
    pthread_mutex_lock(&srv->store_lock);
    size_t n = json_object_size(srv->store);
    pthread_mutex_unlock(&srv->store_lock);
    return n;
}

int mc_http_metadata_server_remove(mc_http_metadata_server *srv, const char *key)
{
    if (!srv || !key)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&srv->store_lock);
    json_t *old = json_object_get(srv->store, key);
    if (old) {
        srv->total_bytes -= strlen(key) + json_string_length(old);
        json_object_del(srv->store, key);
    }
    pthread_mutex_unlock(&srv->store_lock);
    return old ? MC_OK : MC_OBJECT_NOT_FOUND;
}

void mc_http_metadata_server_stop(mc_http_metadata_server *srv)
{
    if (!srv || !srv->daemon)
        return;
    MHD_stop_daemon(srv->daemon); /* joins the workers and closes the listening socket */
    srv->daemon = NULL;
}

void mc_http_metadata_server_destroy(mc_http_metadata_server *srv)
{
    if (!srv)
        return;
    mc_http_metadata_server_stop(srv);
    json_decref(srv->store);
    pthread_mutex_destroy(&srv->store_lock);
    free(srv);
}
