/* http_server.c: the embeddable HTTP metadata server (routes and store only; the HTTP
 * plumbing is net/httpd.h). Must not touch libmicrohttpd directly.
 * Semantics of upstream's master-embedded server (mooncake-store/src/
 * http_metadata_server.cpp; upstream-mooncake.md §7, API.md §4): an in-memory map of
 * opaque bodies keyed by the `key` query parameter at /metadata, write-once rpc_meta
 * keys (an identical rewrite is 200 "metadata unchanged"), /health. Sizes are bounded:
 * bodies (413), the whole store in bytes and in keys (507), keys (400). With a cluster
 * secret every /metadata request is signed (the checks are net/httpd.h's, before any of
 * this runs); /health and /metrics stay open. Deleted entries are freed and, after a
 * large delete, the heap is trimmed so the memory goes back to the system.
 *
 * Threads: the HTTP server runs `threads` workers; the store is one jansson object (a
 * seeded hash table) under store_lock. */
#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"
#include "net/httpd.h"

#define TAG "http_metadata"

struct mc_http_metadata_server {
    mc_httpd *httpd;           /* NULL once stopped; written by start/stop only */
    uint16_t port;             /* immutable */
    mc_http_metadata_server_opts opts; /* immutable, defaults filled */
    pthread_mutex_t store_lock;
    json_t *store;             /* key -> json string holding the raw body; store_lock */
    uint64_t total_bytes;      /* sum of key + body lengths; store_lock */
    uint64_t freed_since_trim; /* bytes deleted since the last malloc_trim; store_lock */
    _Atomic uint64_t full_refusals; /* 507s */
};

/* After this many bytes deleted the heap is trimmed (glibc keeps freed memory for reuse
 * otherwise: the master's RSS stayed at 294 MB after deleting 1 GB, issue 11). */
#define TRIM_AFTER_BYTES (8u << 20)

/* Called without store_lock. */
static void maybe_trim(mc_http_metadata_server *s, uint64_t freed)
{
    bool trim = false;
    pthread_mutex_lock(&s->store_lock);
    s->freed_since_trim += freed;
    if (s->freed_since_trim >= TRIM_AFTER_BYTES) {
        s->freed_since_trim = 0;
        trim = true;
    }
    pthread_mutex_unlock(&s->store_lock);
    if (trim)
        malloc_trim(0);
}

/* The operation of a request (mc_httpd_req.user), picked when its headers are in. */
enum { OP_HEALTH = 1, OP_GET, OP_PUT, OP_DELETE, OP_METRICS };

/* Paths answered without the cluster secret. */
static const char *const open_paths[] = {"/health", "/metrics", NULL};

/* Every /metadata response is application/json, as upstream's Python server does. */
static int msg(mc_httpd_req *rq, unsigned status, const char *text)
{
    return mc_httpd_reply_text(rq, status, "application/json", text);
}

/* Looks up `key`; returns NULL and queues the 400 when it is missing or unusable. */
static const char *get_key(mc_httpd_req *rq, size_t *klen, int *queued)
{
    size_t n = 0;
    const char *v = mc_httpd_arg(rq, "key", &n);
    if (!v) {
        *queued = msg(rq, 400, "Missing key parameter");
        return NULL;
    }
    bool blank = true;
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\0') {
            *queued = msg(rq, 400, "metadata key contains a NUL byte");
            return NULL;
        }
        if (!isspace((unsigned char)v[i]))
            blank = false;
    }
    if (blank) {
        *queued = msg(rq, 400, "Missing key parameter");
        return NULL;
    }
    if (n > MC_METADATA_MAX_KEY) {
        *queued = msg(rq, 400, "metadata key too long");
        return NULL;
    }
    *klen = n;
    return v;
}

static int do_get(mc_http_metadata_server *s, mc_httpd_req *rq, const char *key)
{
    pthread_mutex_lock(&s->store_lock);
    json_t *v = json_object_get(s->store, key);
    int rc;
    if (v)
        rc = mc_httpd_reply(rq, 200, "application/json", json_string_value(v),
                            json_string_length(v));
    else
        rc = msg(rq, 404, "metadata not found");
    pthread_mutex_unlock(&s->store_lock);
    return rc;
}

static int do_put(mc_http_metadata_server *s, mc_httpd_req *rq, const char *key, size_t klen)
{
    const char *body = rq->body ? rq->body : "";
    size_t len = rq->body_len;
    pthread_mutex_lock(&s->store_lock);
    json_t *old = json_object_get(s->store, key);
    if (old && strstr(key, "rpc_meta")) {
        bool same = json_string_length(old) == len &&
                    memcmp(json_string_value(old), body, len) == 0;
        pthread_mutex_unlock(&s->store_lock);
        if (same)
            return msg(rq, 200, "metadata unchanged");
        return msg(rq, 400, "Duplicate rpc_meta key not allowed");
    }
    uint64_t freed = old ? klen + json_string_length(old) : 0;
    uint64_t total = s->total_bytes - freed + klen + len;
    if (total > s->opts.max_total_bytes ||
        (!old && json_object_size(s->store) >= s->opts.max_keys)) {
        pthread_mutex_unlock(&s->store_lock);
        atomic_fetch_add(&s->full_refusals, 1);
        return msg(rq, 507, "metadata store full");
    }
    json_t *v = json_stringn_nocheck(body, len);
    if (!v || json_object_set_new_nocheck(s->store, key, v) != 0)
        mc_oom(len); /* bounded by max_body_bytes: an allocation failure */
    s->total_bytes = total;
    pthread_mutex_unlock(&s->store_lock);
    return msg(rq, 200, "metadata updated");
}

static int do_delete(mc_http_metadata_server *s, mc_httpd_req *rq, const char *key,
                     size_t klen)
{
    pthread_mutex_lock(&s->store_lock);
    json_t *old = json_object_get(s->store, key);
    uint64_t freed = 0;
    if (old) {
        freed = klen + json_string_length(old);
        s->total_bytes -= freed;
        json_object_del(s->store, key);
    }
    pthread_mutex_unlock(&s->store_lock);
    if (freed)
        maybe_trim(s, freed);
    return old ? msg(rq, 200, "metadata deleted") : msg(rq, 404, "metadata not found");
}

/* Headers in, no body yet: classifies the request and answers at once when it can be
 * refused without its body (the connection then closes). Requests that will succeed
 * are answered in on_request, which keeps the connection alive. A PUT's body is kept
 * (up to max_body_bytes; a larger Content-Length is answered 413 at once by httpd). */
static int on_head(void *ctx, mc_httpd_req *rq)
{
    (void)ctx;
    if (strcmp(rq->url, "/health") == 0) {
        if (!mc_httpd_method_is(rq, "GET") && !mc_httpd_method_is(rq, "HEAD"))
            return msg(rq, 405, "Method not allowed");
        rq->user = OP_HEALTH;
        return MC_HTTPD_ACCEPT;
    }
    if (strcmp(rq->url, "/metrics") == 0) {
        if (!mc_httpd_method_is(rq, "GET") && !mc_httpd_method_is(rq, "HEAD"))
            return msg(rq, 405, "Method not allowed");
        rq->user = OP_METRICS;
        return MC_HTTPD_ACCEPT;
    }
    if (strcmp(rq->url, "/metadata") != 0)
        return msg(rq, 404, "not found");
    int op = mc_httpd_method_is(rq, "GET")      ? OP_GET
             : mc_httpd_method_is(rq, "PUT")    ? OP_PUT
             : mc_httpd_method_is(rq, "DELETE") ? OP_DELETE
                                                : 0;
    if (!op)
        return msg(rq, 405, "Method not allowed");
    size_t klen;
    int queued;
    if (!get_key(rq, &klen, &queued))
        return queued;
    rq->user = op;
    rq->keep_body = op == OP_PUT;
    return MC_HTTPD_ACCEPT;
}

/* The request is complete (or its body was refused as too large). */
static int on_request(void *ctx, mc_httpd_req *rq)
{
    mc_http_metadata_server *s = ctx;
    if (rq->user == OP_HEALTH)
        return mc_httpd_reply(rq, 200, "text/plain", "OK", 2);
    if (rq->user == OP_METRICS) {
        size_t n;
        char *t = mc_http_metadata_server_metrics_text(s, &n);
        return mc_httpd_reply_take(rq, 200, "text/plain; version=0.0.4", t, n);
    }
    size_t klen;
    int queued;
    const char *key = get_key(rq, &klen, &queued);
    if (!key)
        return queued;
    switch (rq->user) {
    case OP_GET:
        return do_get(s, rq, key);
    case OP_DELETE:
        return do_delete(s, rq, key, klen);
    default:
        if (rq->body_too_big)
            return msg(rq, 413, "metadata body too large");
        return do_put(s, rq, key, klen);
    }
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
    if (!o.max_keys)
        o.max_keys = MC_HTTP_METADATA_DEFAULT_MAX_KEYS;
    if (!o.max_connections_per_ip)
        o.max_connections_per_ip = MC_HTTP_METADATA_DEFAULT_MAX_PER_IP;
    if (!o.header_timeout_ms)
        o.header_timeout_ms = MC_HTTP_METADATA_DEFAULT_HEADER_TIMEOUT_MS;
    if (!o.request_timeout_ms)
        o.request_timeout_ms = MC_HTTP_METADATA_DEFAULT_REQUEST_TIMEOUT_MS;
    if (!o.max_pending_body_bytes)
        o.max_pending_body_bytes = MC_HTTP_METADATA_DEFAULT_MAX_PENDING_BODY;
    if (o.threads > 64 || o.max_body_bytes > SIZE_MAX / 2)
        return -EINVAL;

    mc_http_metadata_server *s = mc_xcalloc(1, sizeof *s);
    s->opts = o;
    s->store = json_object();
    if (!s->store)
        mc_oom(sizeof(json_t));
    pthread_mutex_init(&s->store_lock, NULL);
    mc_httpd_opts ho = {.what = "HTTP metadata server",
                        .tag = TAG,
                        .head = on_head,
                        .handle = on_request,
                        .ctx = s,
                        .threads = o.threads,
                        .max_connections = o.max_connections,
                        .idle_timeout_s = o.idle_timeout_s,
                        .conn_memory_limit = 64 * 1024,
                        .max_body = o.max_body_bytes,
                        .auth = o.auth,
                        .open_paths = open_paths,
                        .open_can = "read, overwrite and delete the transfer engine's metadata "
                                    "(segment descriptors and RPC addresses)",
                        .max_connections_per_ip = o.max_connections_per_ip,
                        .header_timeout_ms = o.header_timeout_ms,
                        .request_timeout_ms = o.request_timeout_ms,
                        .max_pending_body = o.max_pending_body_bytes,
                        /* the master / standalone tool reports a failed listen once,
                         * naming its own port flag (logging here too printed it twice) */
                        .caller_reports = true};
    int rc = mc_httpd_start(&ho, host, port, &s->httpd);
    if (rc != 0) {
        json_decref(s->store);
        pthread_mutex_destroy(&s->store_lock);
        free(s);
        return rc;
    }
    s->port = mc_httpd_port(s->httpd);
    mc_log(MC_LOG_INFO, TAG, "HTTP metadata server listening on %s:%u (%s)", host,
           (unsigned)s->port,
           mc_httpd_auth_enabled(s->httpd) ? "requests must be signed with the cluster secret"
                                           : "open");
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
    uint64_t freed = 0;
    if (old) {
        freed = strlen(key) + json_string_length(old);
        srv->total_bytes -= freed;
        json_object_del(srv->store, key);
    }
    pthread_mutex_unlock(&srv->store_lock);
    if (freed)
        maybe_trim(srv, freed);
    return old ? MC_OK : MC_OBJECT_NOT_FOUND;
}

char *mc_http_metadata_server_metrics_text(mc_http_metadata_server *srv, size_t *len)
{
    pthread_mutex_lock(&srv->store_lock);
    uint64_t keys = json_object_size(srv->store), bytes = srv->total_bytes;
    pthread_mutex_unlock(&srv->store_lock);
    char *h = srv->httpd ? mc_httpd_metrics_text(srv->httpd, "http_metadata", NULL) : NULL;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        mc_oom(4096);
    fprintf(f,
            "# HELP http_metadata_keys Keys stored\n# TYPE http_metadata_keys gauge\n"
            "http_metadata_keys %llu\n"
            "# HELP http_metadata_max_keys Keys the store may hold (beyond: 507)\n"
            "# TYPE http_metadata_max_keys gauge\nhttp_metadata_max_keys %llu\n"
            "# HELP http_metadata_bytes Bytes of keys and values stored\n"
            "# TYPE http_metadata_bytes gauge\nhttp_metadata_bytes %llu\n"
            "# HELP http_metadata_max_bytes Bytes the store may hold (beyond: 507)\n"
            "# TYPE http_metadata_max_bytes gauge\nhttp_metadata_max_bytes %llu\n"
            "# HELP http_metadata_store_full_total PUTs refused with 507\n"
            "# TYPE http_metadata_store_full_total counter\n"
            "http_metadata_store_full_total %llu\n%s",
            (unsigned long long)keys, (unsigned long long)srv->opts.max_keys,
            (unsigned long long)bytes, (unsigned long long)srv->opts.max_total_bytes,
            (unsigned long long)atomic_load(&srv->full_refusals), h ? h : "");
    free(h);
    if (fclose(f) != 0 || !buf)
        mc_oom(n);
    if (len)
        *len = n;
    return buf;
}

void mc_http_metadata_server_stop(mc_http_metadata_server *srv)
{
    if (!srv || !srv->httpd)
        return;
    mc_httpd_destroy(srv->httpd); /* joins the workers and closes the listening socket */
    srv->httpd = NULL;
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
