/* httpd.c: the one libmicrohttpd wrapper. See httpd.h. Owns the daemon, the listening
 * socket and the per-request state; knows nothing of any route. */
#include "net/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/list.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "net/sock.h"

/* libmicrohttpd 0.9.71 turned the callbacks' int into enum MHD_Result. */
#if MHD_VERSION < 0x00097002
typedef int mhd_result;
#else
typedef enum MHD_Result mhd_result;
#endif

/* One accepted connection, from libmicrohttpd's STARTED notice to its CLOSED one. */
enum { PH_ACCEPTED = 0, PH_HEADERS, PH_REQUEST, PH_IDLE };
typedef struct conn_ent {
    mc_list node;       /* in mc_httpd.conns; lock */
    int fd;             /* immutable; valid until the CLOSED notice (which unlinks first) */
    uint8_t addr[16];   /* source address (IPv4: 4 bytes), for the per-address limit */
    uint8_t addr_len;
    uint8_t phase;      /* PH_*; lock */
    bool shut;          /* the reaper shut it down; lock */
    uint64_t start_ms;  /* accept or the end of the previous request (mc_now_ms); lock */
} conn_ent;

struct mc_httpd {
    struct MHD_Daemon *daemon; /* written by start/destroy only */
    uint16_t port;             /* immutable */
    mc_httpd_opts o;           /* immutable */
    bool auth;                 /* immutable: o.auth holds a secret */
    mc_auth_replay *replay;    /* immutable pointer (own lock); NULL when !auth */
    pthread_mutex_t lock;      /* guards conns, nconns and the conn_ent fields */
    mc_list conns;
    size_t nconns;
    pthread_t reaper;          /* runs when a deadline is set */
    bool reaper_running;       /* immutable after start */
    pthread_cond_t stop_cv;    /* lock */
    bool stopping;             /* lock */
    _Atomic uint64_t pending_body;
    _Atomic uint64_t conns_total, idle_closed;
    _Atomic uint64_t refused[MC_HTTPD_R_COUNT];
    _Atomic uint64_t last_log_ms[MC_HTTPD_R_COUNT]; /* rate limit of refusal lines */
};

static const char *const refusal_names[MC_HTTPD_R_COUNT] = {
    "conn_limit",   "per_ip_limit", "library_limit",   "header_timeout", "request_timeout",
    "body_memory",  "auth_missing", "auth_malformed",  "auth_stale",     "auth_bad_mac",
    "auth_replay",  "auth_cache_full", "auth_unexpected", "bad_framing",
};

const char *mc_httpd_refusal_name(int reason)
{
    return reason >= 0 && reason < MC_HTTPD_R_COUNT ? refusal_names[reason] : "?";
}

static void count(mc_httpd *s, int reason)
{
    atomic_fetch_add(&s->refused[reason], 1);
}

/* One WARN line per reason per 10 s at most: a flood must not flood the log. */
static bool log_due(mc_httpd *s, int reason)
{
    uint64_t now = mc_now_ms(), last = atomic_load(&s->last_log_ms[reason]);
    if (last && now - last < 10000)
        return false;
    return atomic_compare_exchange_strong(&s->last_log_ms[reason], &last, now);
}

static void peer_text(struct MHD_Connection *c, char *buf, size_t len)
{
    snprintf(buf, len, "?");
    const union MHD_ConnectionInfo *ci =
        c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS) : NULL;
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, buf,
                  (socklen_t)len);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, buf,
                  (socklen_t)len);
}

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

/* Queues a refusal: status, the auth headers when it is an auth refusal, one line. */
static int refuse_counted(mc_httpd *s, mc_httpd_req *rq, int reason, unsigned status,
                          const char *code, const char *text);

static int refuse(mc_httpd *s, mc_httpd_req *rq, int reason, unsigned status,
                  const char *code, const char *text)
{
    count(s, reason);
    return refuse_counted(s, rq, reason, status, code, text);
}

/* The same, for a refusal counted when it happened (a body that could not be held). */
static int refuse_counted(mc_httpd *s, mc_httpd_req *rq, int reason, unsigned status,
                          const char *code, const char *text)
{
    if (log_due(s, reason)) {
        char peer[64];
        peer_text(rq->conn_, peer, sizeof peer);
        mc_log(MC_LOG_WARN, s->o.tag, "the %s refused %s %s from %s: %s (%s; such lines are "
               "logged once per 10 s, all are counted)",
               s->o.what, rq->method, rq->url, peer, text, refusal_names[reason]);
    }
    rq->answered_ = true;
    char body[512];
    snprintf(body, sizeof body, "%s\n", text);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return -1;
    if (code) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, MC_AUTH_HTTP_SCHEME);
        MHD_add_response_header(r, "X-MC-Auth-Error", code);
    }
    if (status == 503)
        MHD_add_response_header(r, "Retry-After", "1");
    return queue(rq, status, "text/plain", r);
}

static bool is_open_path(const mc_httpd *s, const char *url)
{
    for (const char *const *p = s->o.open_paths; p && *p; p++)
        if (strcmp(*p, url) == 0)
            return true;
    return false;
}

/* Headers in: checks the Authorization header (not yet the mac, which needs the body).
 * Returns MC_HTTPD_ACCEPT to go on, or the result of the refusal queued. */
static int auth_headers(mc_httpd *s, mc_httpd_req *rq)
{
    if (is_open_path(s, rq->url))
        return MC_HTTPD_ACCEPT;
    const char *h = mc_httpd_header(rq, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!s->auth) {
        if (h && strncmp(h, MC_AUTH_HTTP_SCHEME " ", sizeof MC_AUTH_HTTP_SCHEME) == 0)
            return refuse(s, rq, MC_HTTPD_R_AUTH_UNEXPECTED, 401, "server-has-no-secret",
                          "the request is signed with a cluster secret but this server has "
                          "none configured: configure the same secret on the server "
                          "(--auth_token_file / MC_AUTH_TOKEN_FILE), or none on the client");
        return MC_HTTPD_ACCEPT;
    }
    mc_auth_http_cred cr;
    int rc = h ? mc_auth_http_parse(h, strlen(h), &cr) : -ENOENT;
    if (rc == -ENOENT)
        return refuse(s, rq, MC_HTTPD_R_AUTH_MISSING, 401, "missing",
                      "this server requires the cluster secret and the request carries no "
                      "MC-HMAC Authorization: the client has no secret configured (set "
                      "MC_AUTH_TOKEN_FILE or --auth_token_file to the cluster's token file)");
    if (rc != 0)
        return refuse(s, rq, MC_HTTPD_R_AUTH_MALFORMED, 401, "malformed",
                      "the MC-HMAC Authorization header does not parse (expected "
                      "'MC-HMAC ts=<unix ms>,nonce=<32 hex>,mac=<64 hex>')");
    uint64_t now = mc_wall_ms();
    uint64_t skew = now > cr.ts_ms ? now - cr.ts_ms : cr.ts_ms - now;
    if (skew > MC_AUTH_HTTP_WINDOW_MS)
        return refuse(s, rq, MC_HTTPD_R_AUTH_STALE, 401, "stale",
                      "the request's timestamp is more than 30 s away from this server's "
                      "clock: a replayed request, or clocks out of sync (run NTP)");
    rq->cred_ = mc_xmalloc(sizeof cr);
    *rq->cred_ = cr;
    rq->sha_ = mc_auth_sha256_new();
    if (!rq->sha_)
        return -1;
    return MC_HTTPD_ACCEPT;
}

/* The request is complete: the mac over its body, then its nonce. 0 when it passes,
 * else the result of the refusal queued (with rc_out set). */
static bool auth_complete(mc_httpd *s, mc_httpd_req *rq, int *rc_out)
{
    if (!rq->cred_)
        return true;
    uint8_t digest[32];
    mc_auth_sha256_final(rq->sha_, digest);
    rq->sha_ = NULL;
    const char *target = rq->target_ ? rq->target_ : rq->url;
    if (mc_auth_http_verify(s->o.auth, rq->cred_, rq->method, target, digest) != 0) {
        *rc_out = refuse(s, rq, MC_HTTPD_R_AUTH_BAD_MAC, 401, "bad-mac",
                         "the request's MC-HMAC signature is wrong: the client holds another "
                         "cluster secret (or the request was changed on the way)");
        return false;
    }
    uint64_t now = mc_wall_ms();
    uint64_t expiry = rq->cred_->ts_ms + MC_AUTH_HTTP_WINDOW_MS + 1;
    int r = mc_auth_replay_check(s->replay, rq->cred_->nonce_bytes, expiry, now);
    if (r == -EEXIST) {
        *rc_out = refuse(s, rq, MC_HTTPD_R_AUTH_REPLAY, 401, "replay",
                         "the request's nonce was used before: a replayed request (each "
                         "request needs a fresh nonce)");
        return false;
    }
    if (r != 0) {
        *rc_out = refuse(s, rq, MC_HTTPD_R_AUTH_CACHE_FULL, 503, "replay-cache-full",
                         "too many signed requests within the replay window: retry");
        return false;
    }
    return true;
}

typedef struct framing {
    unsigned content_length, transfer_encoding;
    bool bad_name;       /* a header name that is not a token (RFC 9110 5.6.2) */
    bool other_encoding; /* a Transfer-Encoding other than exactly "chunked" */
} framing;

static mhd_result scan_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    (void)kind;
    framing *f = cls;
    /* tchar: whitespace before the colon (kept in the name by libmicrohttpd), \v and \f
     * are not (an obs-fold line is joined by libmicrohttpd before we see it) */
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    if (!*key || key[strspn(key, tchar)] != '\0')
        f->bad_name = true;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        f->content_length++;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->transfer_encoding++;
        /* as libmicrohttpd compares it: "chunked " with a trailing space is not chunked
         * to it (the request hung until its deadline), so it is refused here */
        f->other_encoding |= !value || strcasecmp(value, "chunked") != 0;
    }
    return MHD_YES;
}

/* How a request's body is framed, checked before anything reads it (RFC 9112): a
 * header name that is not a token, e.g. with whitespace before its colon (5.1;
 * libmicrohttpd keeps it under another name, so `Content-Length : 3` or
 * `Content-Length\v: 3` framed no body while a proxy could read 3), more
 * than one Content-Length or Transfer-Encoding, or both (6.3): 400; a Transfer-Encoding
 * other than chunked (6.1; libmicrohttpd left such a request unanswered until the
 * request deadline): 501. Returns the status and sets *text, or 0 when it is sound. */
static unsigned framing_refusal(mc_httpd_req *rq, const char **text)
{
    framing f = {0};
    MHD_get_connection_values(rq->conn_, MHD_HEADER_KIND, scan_framing, &f);
    if (f.bad_name) {
        *text = "invalid header name: only token characters, and no whitespace before "
                "the colon";
        return 400;
    }
    if (f.content_length > 1 || f.transfer_encoding > 1 ||
        (f.content_length && f.transfer_encoding)) {
        *text = "ambiguous body length: send one Content-Length header or "
                "Transfer-Encoding, not both and not twice";
        return 400;
    }
    if (f.other_encoding) {
        *text = "unsupported Transfer-Encoding: only chunked (or a Content-Length) is "
                "accepted";
        return 501;
    }
    return 0;
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
    mc_auth_sha256_update(rq->sha_, data, n);
    uint64_t max = s->o.max_body;
    if (rq->body_busy_) {
        rq->discarded_ += n;
        return max && rq->discarded_ > max ? MHD_NO : MHD_YES;
    }
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
        uint64_t grow = cap - rq->cap_;
        uint64_t held = atomic_fetch_add(&s->pending_body, grow) + grow;
        if (s->o.max_pending_body && held > s->o.max_pending_body) {
            /* every connection's kept bodies together are bounded: this one waits */
            atomic_fetch_sub(&s->pending_body, grow);
            rq->body_busy_ = true;
            count(s, MC_HTTPD_R_BODY_MEMORY);
            rq->discarded_ += n;
            return MHD_YES;
        }
        char *b = realloc(rq->body, cap); /* bounded by max_body, a peer's size: no abort */
        if (!b) {
            atomic_fetch_sub(&s->pending_body, grow);
            return MHD_NO;
        }
        rq->body = b;
        rq->cap_ = cap;
    }
    memcpy(rq->body + rq->body_len, data, n);
    rq->body_len += n;
    return MHD_YES;
}

static conn_ent *ent_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The request line is in (libmicrohttpd's URI log callback, before it splits and
 * decodes the URI): the per-request state starts here, with the raw target the mac
 * covers. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    mc_httpd *s = cls;
    mc_httpd_req *rq = calloc(1, sizeof *rq);
    if (!rq)
        return NULL;
    rq->target_ = strdup(uri ? uri : "");
    conn_ent *e = ent_of(c);
    if (e) {
        pthread_mutex_lock(&s->lock);
        e->phase = PH_HEADERS;
        pthread_mutex_unlock(&s->lock);
    }
    return rq;
}

static void free_req(mc_httpd *s, mc_httpd_req *rq)
{
    if (rq->cap_)
        atomic_fetch_sub(&s->pending_body, rq->cap_);
    mc_auth_sha256_free(rq->sha_);
    free(rq->cred_);
    free(rq->target_);
    free(rq->body);
    free(rq);
}

static mhd_result on_request(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *upload_data,
                             size_t *upload_data_size, void **con_cls)
{
    (void)version;
    mc_httpd *s = cls;
    mc_httpd_req *rq = *con_cls;
    if (!rq) { /* no URI callback ran (it could not allocate) */
        rq = calloc(1, sizeof *rq);
        if (!rq)
            return MHD_NO;
        *con_cls = rq;
    }
    if (!rq->started_) { /* first call: headers only */
        rq->started_ = true;
        rq->url = url;
        rq->method = method;
        rq->conn_ = c;
        rq->srv_ = s;
        conn_ent *e = ent_of(c);
        if (e) {
            pthread_mutex_lock(&s->lock);
            e->phase = PH_REQUEST; /* now request_timeout_ms bounds it */
            pthread_mutex_unlock(&s->lock);
        }
        const char *why;
        unsigned bad = framing_refusal(rq, &why);
        if (bad)
            return to_mhd(refuse(s, rq, MC_HTTPD_R_BAD_FRAMING, bad, NULL, why));
        int r = auth_headers(s, rq);
        if (r != MC_HTTPD_ACCEPT)
            return to_mhd(r);
        r = s->o.head ? s->o.head(s->o.ctx, rq) : MC_HTTPD_ACCEPT;
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
    int rc;
    if (!auth_complete(s, rq, &rc))
        return to_mhd(rc);
    if (rq->body_busy_)
        return to_mhd(refuse_counted(s, rq, MC_HTTPD_R_BODY_MEMORY, 503, NULL,
                             "the server holds too many request bodies now: retry"));
    return to_mhd(s->o.handle(s->o.ctx, rq));
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    mc_httpd *s = cls;
    mc_httpd_req *rq = *con_cls;
    if (rq) {
        free_req(s, rq);
        *con_cls = NULL;
    }
    conn_ent *e = c ? ent_of(c) : NULL;
    if (e) { /* the next request's deadlines count from now */
        pthread_mutex_lock(&s->lock);
        e->phase = PH_IDLE;
        e->start_ms = mc_now_ms();
        pthread_mutex_unlock(&s->lock);
    }
}

/* ---- connections: limits at accept, deadlines ---- */

static size_t addr_key(const struct sockaddr *sa, uint8_t out[16])
{
    if (sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return 4;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return 16;
    }
    return 0;
}

/* Accept policy: the total and per-address limits, counted (libmicrohttpd's own limit
 * is set above ours, as a backstop). */
static mhd_result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    mc_httpd *s = cls;
    uint8_t key[16];
    size_t klen = addr ? addr_key(addr, key) : 0;
    int refuse_reason = -1;
    pthread_mutex_lock(&s->lock);
    if (s->o.max_connections && s->nconns >= s->o.max_connections) {
        refuse_reason = MC_HTTPD_R_CONN_LIMIT;
    } else if (s->o.max_connections_per_ip && klen) {
        size_t same = 0;
        MC_LIST_FOREACH(it, &s->conns)
        {
            conn_ent *e = MC_CONTAINER_OF(it, conn_ent, node);
            if (e->addr_len == klen && memcmp(e->addr, key, klen) == 0)
                same++;
        }
        if (same >= s->o.max_connections_per_ip)
            refuse_reason = MC_HTTPD_R_PER_IP_LIMIT;
    }
    pthread_mutex_unlock(&s->lock);
    if (refuse_reason < 0)
        return MHD_YES;
    count(s, refuse_reason);
    if (log_due(s, refuse_reason)) {
        char peer[64] = "?";
        if (klen == 4)
            inet_ntop(AF_INET, key, peer, sizeof peer);
        else if (klen == 16)
            inet_ntop(AF_INET6, key, peer, sizeof peer);
        mc_log(MC_LOG_WARN, s->o.tag,
               "the %s refused a connection from %s: %s (%u) reached (such lines are logged "
               "once per 10 s, all are counted)",
               s->o.what, peer,
               refuse_reason == MC_HTTPD_R_CONN_LIMIT ? "the connection limit"
                                                      : "the per-address connection limit",
               refuse_reason == MC_HTTPD_R_CONN_LIMIT ? s->o.max_connections
                                                      : s->o.max_connections_per_ip);
    }
    return MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    mc_httpd *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fi =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        conn_ent *e = calloc(1, sizeof *e);
        if (!e)
            return; /* untracked: libmicrohttpd's idle timeout still applies */
        e->fd = fi ? (int)fi->connect_fd : -1;
        if (ai && ai->client_addr)
            e->addr_len = (uint8_t)addr_key(ai->client_addr, e->addr);
        e->start_ms = mc_now_ms();
        e->phase = PH_ACCEPTED;
        pthread_mutex_lock(&s->lock);
        mc_list_push_back(&s->conns, &e->node);
        s->nconns++;
        pthread_mutex_unlock(&s->lock);
        atomic_fetch_add(&s->conns_total, 1);
        *socket_context = e;
        return;
    }
    conn_ent *e = *socket_context;
    if (!e)
        return;
    /* unlinked before libmicrohttpd closes the fd: the reaper (under the same lock)
     * never shuts down a descriptor number that was reused */
    pthread_mutex_lock(&s->lock);
    mc_list_remove(&e->node);
    s->nconns--;
    pthread_mutex_unlock(&s->lock);
    *socket_context = NULL;
    free(e);
}

/* The reaper: shuts down every connection past its deadline (libmicrohttpd then sees
 * the end of the stream and closes it on its own thread). */
static void *reaper_main(void *arg)
{
    mc_httpd *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->stop_cv, &s->lock, &ts);
        if (s->stopping)
            break;
        uint64_t now = mc_now_ms();
        MC_LIST_FOREACH(it, &s->conns)
        {
            conn_ent *e = MC_CONTAINER_OF(it, conn_ent, node);
            if (e->shut || e->fd < 0)
                continue;
            unsigned limit = e->phase == PH_REQUEST ? s->o.request_timeout_ms
                                                    : s->o.header_timeout_ms;
            if (!limit || now - e->start_ms < limit)
                continue;
            shutdown(e->fd, SHUT_RDWR);
            e->shut = true;
            if (e->phase == PH_IDLE)
                atomic_fetch_add(&s->idle_closed, 1);
            else
                count(s, e->phase == PH_REQUEST ? MC_HTTPD_R_REQUEST_TIMEOUT
                                                : MC_HTTPD_R_HEADER_TIMEOUT);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

void mc_httpd_get_stats(mc_httpd *srv, mc_httpd_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&srv->lock);
    out->connections = srv->nconns;
    pthread_mutex_unlock(&srv->lock);
    out->connections_total = atomic_load(&srv->conns_total);
    out->idle_closed = atomic_load(&srv->idle_closed);
    out->pending_body_bytes = atomic_load(&srv->pending_body);
    for (int i = 0; i < MC_HTTPD_R_COUNT; i++)
        out->refused[i] = atomic_load(&srv->refused[i]);
}

char *mc_httpd_metrics_text(mc_httpd *srv, const char *prefix, size_t *len)
{
    mc_httpd_stats st;
    mc_httpd_get_stats(srv, &st);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        mc_oom(4096);
    fprintf(f,
            "# HELP %s_connections_open Open connections of the %s\n"
            "# TYPE %s_connections_open gauge\n%s_connections_open %llu\n",
            prefix, srv->o.what, prefix, prefix, (unsigned long long)st.connections);
    fprintf(f,
            "# HELP %s_connections_total Connections accepted\n"
            "# TYPE %s_connections_total counter\n%s_connections_total %llu\n",
            prefix, prefix, prefix, (unsigned long long)st.connections_total);
    fprintf(f,
            "# HELP %s_idle_closed_total Keep-alive connections closed when idle past the "
            "header deadline\n# TYPE %s_idle_closed_total counter\n%s_idle_closed_total %llu\n",
            prefix, prefix, prefix, (unsigned long long)st.idle_closed);
    fprintf(f,
            "# HELP %s_pending_body_bytes Request body bytes held now\n"
            "# TYPE %s_pending_body_bytes gauge\n%s_pending_body_bytes %llu\n",
            prefix, prefix, prefix, (unsigned long long)st.pending_body_bytes);
    fprintf(f,
            "# HELP %s_refused_total Connections and requests refused, by reason\n"
            "# TYPE %s_refused_total counter\n",
            prefix, prefix);
    for (int i = 0; i < MC_HTTPD_R_COUNT; i++)
        fprintf(f, "%s_refused_total{reason=\"%s\"} %llu\n", prefix, refusal_names[i],
                (unsigned long long)st.refused[i]);
    if (fclose(f) != 0 || !buf)
        mc_oom(n);
    if (len)
        *len = n;
    return buf;
}

bool mc_httpd_auth_enabled(const mc_httpd *srv)
{
    return srv && srv->auth;
}

/* libmicrohttpd's own lines (a client that hung up mid-request, ...) go to the log at
 * DEBUG under the server's tag, never raw to stderr. */
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    mc_httpd *s = cls;
    if (strstr(fmt, "connection limit") || strstr(fmt, "too many connections"))
        count(s, MC_HTTPD_R_LIBRARY_LIMIT);
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
    /* A deep accept queue: a flood of connections from one address is refused after
     * accept (counted, per_ip_limit); with a short queue the flood fills it first and the
     * kernel drops everyone else's SYN (a 1 s retransmit for a legitimate client). The
     * kernel caps this at net.core.somaxconn. */
    int fd = mc_sock_listen_tcp(host, port, 4096, false, &bound);
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
    s->auth = mc_auth_enabled(s->o.auth);
    if (s->auth)
        s->replay = mc_auth_replay_create(0);
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    mc_list_init(&s->conns);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    /* Options left at 0 keep libmicrohttpd's default (an empty slot ends the array). */
    struct MHD_OptionItem ops[5];
    memset(ops, 0, sizeof ops);
    size_t k = 0;
    if (s->o.threads > 1)
        ops[k++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, s->o.threads, NULL};
    if (s->o.max_connections) /* ours refuses first (counted); this is the backstop */
        ops[k++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT,
                                           s->o.max_connections + 16 + 2 * s->o.threads, NULL};
    if (s->o.idle_timeout_s)
        ops[k++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, s->o.idle_timeout_s,
                                           NULL};
    if (s->o.conn_memory_limit)
        ops[k++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                                           (intptr_t)s->o.conn_memory_limit, NULL};
    ops[k] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    /* the logger first: libmicrohttpd prints to stderr whatever comes before it */
    s->daemon = MHD_start_daemon(flags, 0, on_accept, s, on_request, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                                 MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_ARRAY,
                                 ops, MHD_OPTION_END);
    if (!s->daemon) {
        int e = errno ? errno : EIO;
        mc_log(MC_LOG_ERROR, tag, "cannot start the %s on %s:%u: %s", what, host,
               (unsigned)bound, strerror(e));
        close(fd);
        mc_auth_replay_destroy(s->replay);
        pthread_cond_destroy(&s->stop_cv);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return -e;
    }
    if ((s->o.header_timeout_ms || s->o.request_timeout_ms) &&
        pthread_create(&s->reaper, NULL, reaper_main, s) == 0)
        s->reaper_running = true;
    if (!s->auth && s->o.open_can) {
        char where[320];
        snprintf(where, sizeof where, "%s:%u", host, (unsigned)bound);
        mc_auth_warn_open(tag, what, where, s->o.open_can);
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
    if (srv->reaper_running) {
        pthread_mutex_lock(&srv->lock);
        srv->stopping = true;
        pthread_cond_signal(&srv->stop_cv);
        pthread_mutex_unlock(&srv->lock);
        pthread_join(srv->reaper, NULL);
    }
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon); /* joins the workers, closes the listening socket */
    mc_auth_replay_destroy(srv->replay);
    pthread_cond_destroy(&srv->stop_cv);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
}
