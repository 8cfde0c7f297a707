/* net/httpd.h: the one embedded HTTP server, over libmicrohttpd. Every HTTP endpoint of
 * the project (the master's admin/metrics port, the HTTP metadata server, and later the
 * REST service) is a pair of callbacks on top of it; nobody else includes microhttpd.h.
 *
 * What it does for its users:
 *   - binds the listening socket itself (mc_sock_listen_tcp), so the caller gets the exact
 *     -errno (-EADDRINUSE, -ENOENT for a host that does not resolve) and port 0 works;
 *     failures are logged at ERROR naming the address ("cannot listen on H:P for the
 *     <what>: ...", "cannot resolve listen host 'H' for the <what>");
 *   - runs libmicrohttpd's own threads: one internal polling thread, or a pool of
 *     `threads` workers;
 *   - routes libmicrohttpd's error lines to mc_log at DEBUG under the caller's tag (the
 *     logger is the first option given, so nothing reaches stderr raw);
 *   - accumulates a request body the head callback asked for, up to max_body bytes
 *     (a larger Content-Length or body is flagged body_too_big; a peer that keeps sending
 *     as much again is cut off), and discards every other body;
 *   - response helpers for bytes, text and JSON.
 *
 * Request flow: head (optional) runs once when the headers are in, before any body: it
 * may answer at once (the connection then closes without reading the body) or return
 * MC_HTTPD_ACCEPT, setting keep_body when it wants the body. handle runs once when the
 * request is complete and must queue a response.
 *
 * Threads: head and handle run on libmicrohttpd's threads, concurrently for different
 * requests (pool mode); a request's callbacks run one at a time. */
#ifndef MC_NET_HTTPD_H
#define MC_NET_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;
struct json_t;

typedef struct mc_httpd mc_httpd;

/* One request. The public fields are the handler's view; the rest are the server's. */
typedef struct mc_httpd_req {
    const char *url;    /* path without the query string; borrowed for the request */
    const char *method; /* "GET", "PUT", ...; borrowed for the request */
    int user;           /* free for the callbacks (e.g. an operation picked by head) */
    bool keep_body;     /* set by head: accumulate the body (up to max_body bytes) */
    char *body;         /* in handle: the body (keep_body), NULL when empty; owned here */
    size_t body_len;    /* its bytes */
    bool body_too_big;  /* in handle: Content-Length or the body exceeded max_body */
    /* private to httpd.c: */
    struct MHD_Connection *conn_;
    mc_httpd *srv_;
    size_t cap_;
    uint64_t discarded_;
    bool answered_;
} mc_httpd_req;

/* Callbacks: return MC_HTTPD_ACCEPT (head only: go on reading the request), the value of
 * an mc_httpd_reply* call (0 queued, -1 not), or -1 to drop the connection. */
#define MC_HTTPD_ACCEPT 1
typedef int (*mc_httpd_fn)(void *ctx, mc_httpd_req *rq);

typedef struct mc_httpd_opts {
    const char *what;          /* "admin HTTP server": named in errors */
    const char *tag;           /* log tag for errors and libmicrohttpd's lines */
    mc_httpd_fn head;          /* optional, see above */
    mc_httpd_fn handle;        /* required */
    void *ctx;                 /* passed to both; borrowed, must outlive the server */
    unsigned threads;          /* 0 or 1: one internal polling thread; more: a pool */
    unsigned max_connections;  /* 0: libmicrohttpd's default */
    unsigned idle_timeout_s;   /* 0: none */
    size_t conn_memory_limit;  /* bytes per connection for headers; 0: default */
    uint64_t max_body;         /* largest kept body in bytes; 0: bodies are discarded
                                  without limit */
    bool caller_reports;       /* a failed listen is logged at DEBUG only: the caller
                                  reports it once, naming its own flags */
} mc_httpd_opts;

/* mc_httpd_start: listens on host:port (host NULL = "0.0.0.0"; port 0 = a free port,
 * see mc_httpd_port) and serves. opts is copied (its strings and ctx are borrowed).
 * Returns 0 and *out, or -errno: -EINVAL (no handle, host ""), -ENOENT (host does not
 * resolve), -EADDRINUSE, -EADDRNOTAVAIL, other -errno from libmicrohttpd's start. */
int mc_httpd_start(const mc_httpd_opts *opts, const char *host, uint16_t port, mc_httpd **out);

/* mc_httpd_port: the bound port. */
uint16_t mc_httpd_port(const mc_httpd *srv);

/* mc_httpd_destroy: stops serving (joins the threads, requests in progress finish or are
 * dropped), closes the listening socket, frees. NULL ok. */
void mc_httpd_destroy(mc_httpd *srv);

/* Request accessors (only inside a callback, for that request). */
bool mc_httpd_method_is(const mc_httpd_req *rq, const char *method);
/* mc_httpd_arg: the URL query argument `name` (decoded; may hold NUL bytes, *len says how
 * many bytes), or NULL when absent. Borrowed for the request. */
const char *mc_httpd_arg(mc_httpd_req *rq, const char *name, size_t *len);
/* mc_httpd_header: the request header `name` (case-insensitive), or NULL. Borrowed. */
const char *mc_httpd_header(mc_httpd_req *rq, const char *name);

/* Responses: each queues one response with `status` and Content-Type ctype and returns
 * 0, or -1 when libmicrohttpd refused it (the connection then closes).
 *   mc_httpd_reply: copies body (len bytes).
 *   mc_httpd_reply_take: takes body (malloc'd; freed here in every case).
 *   mc_httpd_reply_text: copies the NUL-terminated text.
 *   mc_httpd_reply_json: takes j (a reference), answers its compact text as
 *     application/json; NULL j or an encoding failure answers 500. */
int mc_httpd_reply(mc_httpd_req *rq, unsigned status, const char *ctype, const void *body,
                   size_t len);
int mc_httpd_reply_take(mc_httpd_req *rq, unsigned status, const char *ctype, char *body,
                        size_t len);
int mc_httpd_reply_text(mc_httpd_req *rq, unsigned status, const char *ctype,
                        const char *text);
int mc_httpd_reply_json(mc_httpd_req *rq, unsigned status, struct json_t *j);

#endif
