/* httpd.c: the one libmicrohttpd wrapper. See httpd.h. Owns the daemon, the listening
 * socket and the per-request state; knows nothing of any route. */
#include "net/httpd.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "net/sock.h"

/* libmicrohttpd 0.9.71 turned the callbacks' int into enum MHD_Result. */
#if MHD_VERSION < 0x00097002
typedef int mhd_result;
#else
typedef enum MHD_Result mhd_result;
#endif

struct mc_httpd {
    struct MHD_Daemon *daemon; /* written by start/destroy only */
    uint16_t port;             /* immutable */
    mc_httpd_opts o;           /* immutable */
};

static mhd_result to_mhd(int rc)
{
    return rc < 0 ? MHD_NO : MHD_YES;
}

/* ---- responses ---- */

static int queue(mc_httpd_req *rq, unsigned status, const char *ctype,
                 struct MHD_Response *r)
{
    if (!r)
        return -1;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    mhd_result rc = MHD_queue_response(rq->conn_, status, r);
    MHD_destroy_response(r);
    return rc == MHD_YES ? 0 : -1;
}

int mc_httpd_reply(mc_httpd_req *rq, unsigned status, const char *ctype, const void *body,
                   size_t len)
{
    return queue(rq, status, ctype,
                 MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY));
}

int mc_httpd_reply_take(mc_httpd_req *rq, unsigned status, const char *ctype, char *body,
                        size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return -1;
    }
    return queue(rq, status, ctype, r);
}

int mc_httpd_reply_text(mc_httpd_req *rq, unsigned status, const char *ctype,
                        const char *text)
{
    return mc_httpd_reply(rq, status, ctype, text, strlen(text));
}

int mc_httpd_reply_json(mc_httpd_req *rq, unsigned status, struct json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return mc_httpd_reply_text(rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain",
                                   "encoding failed\n");
    return mc_httpd_reply_take(rq, status, "application/json", s, strlen(s));
}

/* ---- requests ---- */

bool mc_httpd_method_is(const mc_httpd_req *rq, const char *method)
{
    return strcmp(rq->method, method) == 0;
}

const char *mc_httpd_arg(mc_httpd_req *rq, const char *name, size_t *len)
{
    const char *v = NULL;
    size_t n = 0;
    if (MHD_lookup_connection_value_n(rq->conn_, MHD_GET_ARGUMENT_KIND, name, strlen(name),
                                      &v, &n) != MHD_YES ||
        !v)
        return NULL;
    if (len)
        *len = n;
    return v;
}

const char *mc_httpd_header(mc_httpd_req *rq, const char *name)
{
    return MHD_lookup_connection_value(rq->conn_, MHD_HEADER_KIND, name);
}

/* A Content-Length over max_body (or one that does not parse) flags the body too big
 * before any of it is read. */
static bool declared_too_big(mc_httpd *s, mc_httpd_req *rq)
{
    const char *cl = mc_httpd_header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl)
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(cl, &end, 10);
    return errno || end == cl || n > s->o.max_body;
}

/* Takes one piece of the body. Bodies nobody asked for are dropped; a kept body over
 * max_body is dropped and flagged. A peer that keeps sending as much again as max_body
 * is cut off (MHD_NO). Without max_body every body is dropped without a limit. */
static mhd_result take_body(mc_httpd *s, mc_httpd_req *rq, const char *data, size_t n)
{
    uint64_t max = s->o.max_body;
    if (!rq->keep_body || !max || rq->body_too_big || rq->body_len + n > max) {
        if (rq->keep_body && max)
            rq->body_too_big = true;
        rq->discarded_ += n;
        return max && rq->discarded_ > max ? MHD_NO : MHD_YES;
    }
    if (rq->body_len + n > rq->cap_) {
        size_t cap = rq->cap_ ? rq->cap_ : 4096;
        while (cap < rq->body_len + n)
            cap *= 2;
        if (cap > max)
            cap = (size_t)max;
        char *b = realloc(rq->body, cap); /* bounded by max_body, a peer's size: no abort */
        if (!b)
            return MHD_NO;
        rq->body = b;
        rq->cap_ = cap;
    }
    memcpy(rq->body + rq->body_len, data, n);
    rq->body_len += n;
    return MHD_YES;
}

static mhd_result on_request(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *upload_data,
                             size_t *upload_data_size, void **con_cls)
{
    (void)version;
    mc_httpd *s = cls;
    mc_httpd_req *rq = *con_cls;
    if (!rq) { /* first call: headers only */
        rq = calloc(1, sizeof *rq);
        if (!rq)
            return MHD_NO;
        rq->url = url;
        rq->method = method;
        rq->conn_ = c;
        rq->srv_ = s;
        *con_cls = rq;
        int r = s->o.head ? s->o.head(s->o.ctx, rq) : MC_HTTPD_ACCEPT;
        if (r != MC_HTTPD_ACCEPT) {
            rq->answered_ = true;
            return to_mhd(r);
        }
        if (rq->keep_body && s->o.max_body && declared_too_big(s, rq)) {
            /* answered now: the connection closes without reading the body */
            rq->body_too_big = true;
            rq->answered_ = true;
            return to_mhd(s->o.handle(s->o.ctx, rq));
        }
        return MHD_YES;
    }
    if (rq->answered_)
        return MHD_NO; /* a response is already queued */
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return take_body(s, rq, upload_data, n);
    }
    rq->answered_ = true; /* the request is complete */
    return to_mhd(s->o.handle(s->o.ctx, rq));
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    mc_httpd_req *rq = *con_cls;
    if (rq) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's own lines (a client that hung up mid-request, ...) go to the log at
 * DEBUG under the server's tag, never raw to stderr. */
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    mc_httpd *s = cls;
    if (MC_LOG_DEBUG < mc__log_threshold)
        return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    buf[strcspn(buf, "\n")] = '\0';
    mc_log(MC_LOG_DEBUG, s->o.tag, "libmicrohttpd: %s", buf);
}

/* ---- life cycle ---- */

int mc_httpd_start(const mc_httpd_opts *opts, const char *host, uint16_t port, mc_httpd **out)
{
    if (!opts || !opts->handle || !out)
        return -EINVAL;
    *out = NULL;
    if (!host)
        host = "0.0.0.0";
    if (!*host)
        return -EINVAL;
    const char *what = opts->what ? opts->what : "HTTP server";
    const char *tag = opts->tag ? opts->tag : "httpd";
    uint16_t bound = 0;
    int fd = mc_sock_listen_tcp(host, port, 128, false, &bound);
    if (fd == -ENOENT) {
        mc_log(MC_LOG_ERROR, tag, "cannot resolve listen host '%s' for the %s", host, what);
        return fd;
    }
    if (fd < 0) {
        mc_log(opts->caller_reports ? MC_LOG_DEBUG : MC_LOG_ERROR, tag,
               "cannot listen on %s:%u for the %s: %s", host, (unsigned)port, what,
               strerror(-fd));
        return fd;
    }
    /* pool workers all accept on it: a blocking accept would park one of them */
    mc_sock_set_nonblock(fd, true);
    mc_httpd *s = mc_xcalloc(1, sizeof *s);
    s->o = *opts;
    s->o.what = what;
    s->o.tag = tag;
    s->port = bound;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    /* Options left at 0 keep libmicrohttpd's default (an empty slot ends the array). */
    struct MHD_OptionItem ops[5];
    memset(ops, 0, sizeof ops);
    size_t k = 0;
    if (s->o.threads > 1)
        ops[k++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, s->o.threads, NULL};
    if (s->o.max_connections)
        ops[k++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, s->o.max_connections,
                                           NULL};
    if (s->o.idle_timeout_s)
        ops[k++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, s->o.idle_timeout_s,
                                           NULL};
    if (s->o.conn_memory_limit)
        ops[k++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                                           (intptr_t)s->o.conn_memory_limit, NULL};
    ops[k] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    /* the logger first: libmicrohttpd prints to stderr whatever comes before it */
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_ARRAY,
                                 ops, MHD_OPTION_END);
    if (!s->daemon) {
        int e = errno ? errno : EIO;
        mc_log(MC_LOG_ERROR, tag, "cannot start the %s on %s:%u: %s", what, host,
               (unsigned)bound, strerror(e));
        close(fd);
        free(s);
        return -e;
    }
    *out = s;
    return 0;
}

uint16_t mc_httpd_port(const mc_httpd *srv)
{
    return srv ? srv->port : 0;
}

void mc_httpd_destroy(mc_httpd *srv)
{
    if (!srv)
        return;
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon); /* joins the workers, closes the listening socket */
    free(srv);
}
