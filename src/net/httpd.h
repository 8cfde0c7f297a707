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
 *   - refuses a request whose body framing is unsound before the head callback
 *     (reason bad_framing): 400 for a header name that is not a token (whitespace, \v
 *     or \f before its colon), more than one Content-Length or Transfer-Encoding header,
 *     or both (RFC 9112 5.1, 6.3: libmicrohttpd takes one length, our max_body check
 *     could read another, a proxy in front a third); 501 for a Transfer-Encoding other
 *     than chunked (6.1);
 *   - accumulates a request body the head callback asked for, up to max_body bytes
 *     (a larger Content-Length or body is flagged body_too_big; a peer that keeps sending
 *     as much again is cut off), and discards every other body;
 *   - response helpers for bytes, text and JSON;
 *   - authentication (issue 11, docs/security.md): with opts.auth holding the cluster
 *     secret, every request to a path not in opts.open_paths must carry
 *       Authorization: MC-HMAC ts=<unix ms>,nonce=<32 hex>,mac=<64 hex>
 *     (common/auth.h part 3: the mac covers the method, the request-target as sent, ts,
 *     nonce and the SHA-256 of the body), within MC_AUTH_HTTP_WINDOW_MS of this host's
 *     clock, with a nonce not seen before (a replay cache of MC_AUTH_REPLAY_DEFAULT
 *     nonces). The header is checked when the headers are in (missing, malformed, stale:
 *     refused before the head callback and before any body is read), the mac and the
 *     nonce once the body is in, before the handle callback: a refused request never
 *     reaches handle. Refusals are answered 401 (503 when the replay cache is full) with
 *     `WWW-Authenticate: MC-HMAC` and `X-MC-Auth-Error: <code>` (missing, malformed,
 *     stale, bad-mac, replay, server-has-no-secret, replay-cache-full) and a one-line
 *     text that says which side lacks what. Without a secret the server is open, as
 *     upstream, warns once at start, and refuses a signed request to a protected path
 *     (server-has-no-secret: the mixed-cluster case, told to the client);
 *   - bounded resources: at most max_connections connections and max_connections_per_ip
 *     from one source address (refused at accept); an absolute deadline per request that
 *     a trickle of bytes does not extend (slowloris): its request line and headers must
 *     be in within header_timeout_ms of the connection's accept or the end of its
 *     previous request (so an idle keep-alive connection is closed then too), the whole
 *     request, body and response included, within request_timeout_ms of the same moment
 *     (a reaper thread shuts such connections down); at most max_pending_body bytes of
 *     kept bodies over all connections (beyond: 503). Every refusal is counted by reason
 *     (mc_httpd_get_stats), and libmicrohttpd's own refusals too.
 *
 * Request flow: head (optional) runs once when the headers are in, before any body: it
 * may answer at once (the connection then closes without reading the body) or return
 * MC_HTTPD_ACCEPT, setting keep_body when it wants the body. handle runs once when the
 * request is complete and must queue a response. When a declared Content-Length exceeds
 * max_body, handle runs at once with body_too_big set (before the mac could be checked):
 * it must then answer without changing any state.
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
struct mc_auth_secret;
struct mc_auth_http_cred;
struct mc_auth_sha256;

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
    bool started_;                   /* the headers were in: the first call is over */
    bool body_busy_;                 /* max_pending_body reached: answered 503 */
    char *target_;                   /* the request-target as received (malloc'd) */
    struct mc_auth_http_cred *cred_; /* the parsed Authorization (needs a mac check) */
    struct mc_auth_sha256 *sha_;     /* the body's digest in progress */
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
    /* authentication (see the top of this file) */
    const struct mc_auth_secret *auth; /* borrowed, must outlive the server; NULL or no
                                          secret: open */
    const char *const *open_paths;     /* NULL-terminated exact paths answered without
                                          the secret (e.g. "/health"); borrowed */
    const char *open_can;              /* the warning's "anyone who can reach it can ..."
                                          (NULL: no warning when open) */
    /* bounded resources (0: no limit) */
    unsigned max_connections_per_ip;   /* connections from one source address */
    unsigned header_timeout_ms;        /* request line + headers, from accept / the end
                                          of the previous request */
    unsigned request_timeout_ms;       /* the whole request and its response, same start */
    uint64_t max_pending_body;         /* bytes of kept bodies over all connections */
} mc_httpd_opts;

/* Why a connection or a request was refused (mc_httpd_stats.refused). */
typedef enum mc_httpd_refusal {
    MC_HTTPD_R_CONN_LIMIT = 0,    /* max_connections reached at accept */
    MC_HTTPD_R_PER_IP_LIMIT,      /* max_connections_per_ip reached at accept */
    MC_HTTPD_R_LIBRARY_LIMIT,     /* libmicrohttpd's own limit refused an accept */
    MC_HTTPD_R_HEADER_TIMEOUT,    /* headers not in within header_timeout_ms */
    MC_HTTPD_R_REQUEST_TIMEOUT,   /* request not done within request_timeout_ms */
    MC_HTTPD_R_BODY_MEMORY,       /* max_pending_body reached: 503 */
    MC_HTTPD_R_AUTH_MISSING,      /* no MC-HMAC Authorization: 401 */
    MC_HTTPD_R_AUTH_MALFORMED,    /* an MC-HMAC header that does not parse: 401 */
    MC_HTTPD_R_AUTH_STALE,        /* ts outside the window: 401 */
    MC_HTTPD_R_AUTH_BAD_MAC,      /* another secret or a changed request: 401 */
    MC_HTTPD_R_AUTH_REPLAY,       /* a nonce seen before: 401 */
    MC_HTTPD_R_AUTH_CACHE_FULL,   /* the replay cache has no room: 503 */
    MC_HTTPD_R_AUTH_UNEXPECTED,   /* a signed request to a server without a secret: 401 */
    MC_HTTPD_R_BAD_FRAMING,       /* unsound body framing (mc_httpd above): 400 or 501 */
    MC_HTTPD_R_COUNT
} mc_httpd_refusal;

/* mc_httpd_refusal_name: "conn_limit", "per_ip_limit", ... (static; metric labels). */
const char *mc_httpd_refusal_name(int reason);

typedef struct mc_httpd_stats {
    uint64_t connections;                 /* open now */
    uint64_t connections_total;           /* accepted since start */
    uint64_t idle_closed;                 /* keep-alive connections closed when idle */
    uint64_t pending_body_bytes;          /* kept bodies now */
    uint64_t refused[MC_HTTPD_R_COUNT];   /* since start */
} mc_httpd_stats;

/* mc_httpd_get_stats: a snapshot of the counters. Thread-safe. */
void mc_httpd_get_stats(mc_httpd *srv, mc_httpd_stats *out);

/* mc_httpd_metrics_text: the counters in Prometheus text, one family per name under
 * `prefix` (e.g. "http_metadata"): <prefix>_connections (gauge), _connections_total,
 * _idle_closed_total, _pending_body_bytes (gauge), _refused_total{reason="..."} (one
 * sample per mc_httpd_refusal, by mc_httpd_refusal_name). Returns a new malloc'd
 * NUL-terminated string (caller frees); *len (may be NULL) its length. */
char *mc_httpd_metrics_text(mc_httpd *srv, const char *prefix, size_t *len);

/* mc_httpd_auth_enabled: true when the server checks the secret. */
bool mc_httpd_auth_enabled(const mc_httpd *srv);

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
