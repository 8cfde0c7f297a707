/* client_http.c: the store client's counters (mc__cstats: puts, gets, removes and their
 * bytes, failures by status) and its optional HTTP server, the one upstream's client
 * starts when setup is given enable_client_http_server=True (real_client.cpp
 * setup_internal; port client_http_port, default 9300):
 *   GET /health            200 "OK" while the store is set up (503 otherwise)
 *   GET /metrics           Prometheus text 0.0.4 of the counters below
 *   GET /metrics/summary   one human line
 * Upstream's names are kept where its client has them (ClientMetric / TransferMetric:
 * mooncake_transfer_read_bytes, mooncake_transfer_write_bytes); the others are ours,
 * under mooncake_client_*. The server is net/httpd.c (libmicrohttpd), bounded like the
 * master's admin port; with a cluster secret every path but these three needs a signed
 * request (docs/security.md: counts, never names, are open).
 *
 * Life: mc__chttp_start runs last in setup and mc__chttp_stop first in teardown, both
 * under life exclusive, so every field a handler reads (te, ar, seg_size, name, auth) is
 * fixed while the server runs; handlers take no store lock (taking life there would
 * deadlock teardown, which joins the server's threads holding it). */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "net/httpd.h"

#define TAG MC__STORE_TAG

/* The rows of MC_STATUS_TABLE, counted at compile time: each has a failure slot. */
#define MC__CSTATS_ROW(name, value, msg) +1
enum { N_STATUS = 0 MC_STATUS_TABLE(MC__CSTATS_ROW) };
#undef MC__CSTATS_ROW
_Static_assert(N_STATUS < MC__CSTATS_SLOTS, "MC__CSTATS_SLOTS must exceed the status rows");
#define OTHER_SLOT (MC__CSTATS_SLOTS - 1)

static const char *const op_names[MC__OP_COUNT] = {"put", "get", "remove"};

/* Bounds of the server (the admin port's, scaled to a per-process endpoint). */
#define CHTTP_MAX_CONNECTIONS 64u
#define CHTTP_MAX_PER_IP 16u
#define CHTTP_HEADER_TIMEOUT_MS 10000u
#define CHTTP_REQUEST_TIMEOUT_MS 60000u

/* Answered without the cluster secret: counts, never key or segment names. */
static const char *const open_paths[] = {"/health", "/metrics", "/metrics/summary", NULL};

/* ---- counters ---- */

void mc__cstats_reset(mc_store *s)
{
    mc__cstats *c = &s->cstats;
    for (int op = 0; op < MC__OP_COUNT; op++) {
        atomic_store_explicit(&c->done[op], 0, memory_order_relaxed);
        atomic_store_explicit(&c->bytes[op], 0, memory_order_relaxed);
        for (int i = 0; i < MC__CSTATS_SLOTS; i++)
            atomic_store_explicit(&c->failed[op][i], 0, memory_order_relaxed);
    }
}

/* The slot of status code rc (< 0): its table row, or OTHER_SLOT. */
static int status_slot(int64_t rc)
{
    size_t n = 0;
    const mc_status_info *t = mc_status_table(&n);
    for (size_t i = 0; i < n && i < OTHER_SLOT; i++)
        if (t[i].value == rc)
            return (int)i;
    return OTHER_SLOT;
}

void mc__cstats_count(mc_store *s, int op, int64_t rc, uint64_t bytes)
{
    if (!s || op < 0 || op >= MC__OP_COUNT)
        return;
    mc__cstats *c = &s->cstats;
    atomic_fetch_add_explicit(&c->done[op], 1, memory_order_relaxed);
    if (rc >= 0)
        atomic_fetch_add_explicit(&c->bytes[op], bytes, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&c->failed[op][status_slot(rc)], 1, memory_order_relaxed);
}

static uint64_t ld(atomic_uint_fast64_t *v)
{
    return (uint64_t)atomic_load_explicit(v, memory_order_relaxed);
}

static uint64_t failed_total(mc_store *s, int op)
{
    uint64_t t = 0;
    for (int i = 0; i < MC__CSTATS_SLOTS; i++)
        t += ld(&s->cstats.failed[op][i]);
    return t;
}

/* Local buffer capacity and bytes in use (0, 0 without one). */
static void lbuf_usage(mc_store *s, uint64_t *cap, uint64_t *used)
{
    *cap = *used = 0;
    mc__lbuf *a = s->ar;
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    *cap = mc__alloc_capacity(a->alloc);
    *used = mc__alloc_used(a->alloc);
    pthread_mutex_unlock(&a->lock);
}

/* ---- /metrics ---- */

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one sample without labels. */
static void one(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
    family(f, name, type, help);
    fprintf(f, "%s %" PRIu64 "\n", name, v);
}

/* A counter family with one label: a sample per (value, count) of ls[0..n). */
typedef struct {
    const char *value;
    uint64_t v;
} labelled;

static void by_label(FILE *f, const char *name, const char *help, const char *label,
                     const labelled *ls, size_t n)
{
    family(f, name, "counter", help);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, ls[i].value, ls[i].v);
}

#define BY_LABEL(f, name, help, label, ...)                                              \
    do {                                                                                 \
        const labelled ls_[] = {__VA_ARGS__};                                            \
        by_label(f, name, help, label, ls_, sizeof ls_ / sizeof ls_[0]);                 \
    } while (0)

static char *metrics_text(mc_store *s, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        mc_oom(4096);
    size_t nst = 0;
    const mc_status_info *st = mc_status_table(&nst);

    /* upstream's names (TransferMetric): object bytes of the completed puts / gets */
    one(f, "mooncake_transfer_read_bytes", "counter",
        "Object bytes read by successful gets of this client",
        ld(&s->cstats.bytes[MC__OP_GET]));
    one(f, "mooncake_transfer_write_bytes", "counter",
        "Object bytes written by successful puts of this client",
        ld(&s->cstats.bytes[MC__OP_PUT]));

    family(f, "mooncake_client_requests_total", "counter",
           "Items completed (a batch of n keys counts n), ok or not, by operation");
    for (int op = 0; op < MC__OP_COUNT; op++)
        fprintf(f, "mooncake_client_requests_total{op=\"%s\"} %" PRIu64 "\n", op_names[op],
                ld(&s->cstats.done[op]));
    /* the sum per operation is a family of its own, so sum() over the statuses of
     * mooncake_client_failures_total counts each failure once */
    family(f, "mooncake_client_failed_requests_total", "counter",
           "Items that failed, by operation (every status)");
    for (int op = 0; op < MC__OP_COUNT; op++)
        fprintf(f, "mooncake_client_failed_requests_total{op=\"%s\"} %" PRIu64 "\n",
                op_names[op], failed_total(s, op));
    family(f, "mooncake_client_failures_total", "counter",
           "Items that failed, by operation and status (only statuses seen)");
    for (int op = 0; op < MC__OP_COUNT; op++) {
        for (int i = 0; i < MC__CSTATS_SLOTS; i++) {
            uint64_t v = ld(&s->cstats.failed[op][i]);
            if (!v)
                continue;
            const char *nm = i < (int)nst && i != OTHER_SLOT ? st[i].name : "OTHER";
            fprintf(f, "mooncake_client_failures_total{op=\"%s\",status=\"%s\"} %" PRIu64 "\n",
                    op_names[op], nm, v);
        }
    }

    mc_te_stats ts;
    memset(&ts, 0, sizeof ts);
    if (s->te)
        mc_te_get_stats(s->te, &ts);
    BY_LABEL(f, "mooncake_client_engine_bytes_total",
             "Payload bytes moved by this client's transfer engine, by path", "path",
             {"tcp_sent", ts.tcp_bytes_sent}, {"tcp_received", ts.tcp_bytes_received},
             {"shm", ts.shm_bytes}, {"served", ts.served_bytes});
    BY_LABEL(f, "mooncake_client_engine_tasks_total", "Transfer engine tasks finished, by result",
             "result", {"completed", ts.tasks_completed}, {"failed", ts.tasks_failed});
    one(f, "mooncake_client_engine_inline_bytes_total", "counter",
        "Of tcp_received: bytes a reading thread received itself on a private connection "
        "(mc_te_submit_inline)", ts.inline_bytes_received);
    one(f, "mooncake_client_engine_inline_handed_over_total", "counter",
        "Small read runs the reading thread left to the I/O threads (no private "
        "connection free, one failed, or its budget spent)", ts.inline_runs_handed_over);
    BY_LABEL(f, "mooncake_client_engine_connections_total",
             "Data connections this engine opened to peers, by result (failed: of those "
             "opened, the ones whose connect or cluster-secret handshake failed; a reading "
             "thread's private one also when its HELLO was refused or its time ran out)",
             "result", {"opened", ts.connections_opened}, {"failed", ts.connections_failed});
    one(f, "mooncake_client_engine_auth_failed_total", "counter",
        "Our connections whose cluster-secret handshake failed (check that both sides "
        "have the same secret: --auth_token_file / MC_AUTH_TOKEN_FILE)", ts.auth_failed);
    one(f, "mooncake_client_engine_stale_sends_refused_total", "counter",
        "Our WRITE slices / same-host copies not started: the target fenced this writer",
        ts.stale_sends_refused);
    /* what this engine refused to its peers (mc_te_stats, served side) */
    BY_LABEL(f, "mooncake_client_engine_refused_total",
             "Peer requests and connections this engine refused, by reason", "reason",
             {"bad_request", ts.refused_requests}, {"stale_write", ts.stale_writes_refused},
             {"auth", ts.auth_refused}, {"connection_limit", ts.conn_limit_refused},
             {"per_ip_limit", ts.per_ip_refused}, {"peer_uid", ts.peercred_refused},
             {"pending_bytes", ts.pending_refused});

    uint64_t cap, used;
    lbuf_usage(s, &cap, &used);
    one(f, "mooncake_client_segment_mounted_bytes", "gauge",
        "Bytes of the global segment this client mounted on the master (0: none)",
        s->seg_mounted ? s->seg_size : 0);
    one(f, "mooncake_client_local_buffer_bytes", "gauge",
        "Capacity of the local buffer puts and gets stage through", cap);
    one(f, "mooncake_client_local_buffer_used_bytes", "gauge",
        "Bytes of the local buffer in use now", used);
    one(f, "mooncake_client_master_reachable", "gauge",
        "1 when the last heartbeat to the master succeeded", atomic_load(&s->ping_ok) ? 1 : 0);
    one(f, "mooncake_client_remounts_total", "counter",
        "NEED_REMOUNT answers handled (the master had forgotten our segments)",
        (uint64_t)atomic_load(&s->remounts));
    if (fclose(f) != 0 || !buf)
        mc_oom(n);
    size_t hlen = 0;
    char *h = mc_httpd_metrics_text(s->http, "mooncake_client_http", &hlen);
    buf = mc_xrealloc(buf, n + hlen + 1);
    memcpy(buf + n, h, hlen);
    n += hlen;
    buf[n] = '\0';
    free(h);
    *len = n;
    return buf;
}

/* ---- /metrics/summary ---- */

/* "1.5 MiB" style (binary units). */
static void human(char *out, size_t cap, uint64_t v)
{
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double d = (double)v;
    int i = 0;
    while (d >= 1024.0 && i < 5) {
        d /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(out, cap, "%" PRIu64 " B", v);
    else
        snprintf(out, cap, "%.1f %s", d, u[i]);
}

static char *summary_text(mc_store *s, size_t *len)
{
    char pb[32], gb[32], seg[32], lc[32], lu[32];
    human(pb, sizeof pb, ld(&s->cstats.bytes[MC__OP_PUT]));
    human(gb, sizeof gb, ld(&s->cstats.bytes[MC__OP_GET]));
    human(seg, sizeof seg, s->seg_mounted ? s->seg_size : 0);
    uint64_t cap, used;
    lbuf_usage(s, &cap, &used);
    human(lc, sizeof lc, cap);
    human(lu, sizeof lu, used);
    char *line = NULL;
    int n = asprintf(&line,
                     "Client Metrics: client=%s, master=%s, put=%" PRIu64 " (failed %" PRIu64
                     ", %s), get=%" PRIu64 " (failed %" PRIu64 ", %s), remove=%" PRIu64
                     " (failed %" PRIu64 "), segment=%s, local_buffer=%s/%s\n",
                     s->name, atomic_load(&s->ping_ok) ? "reachable" : "unreachable",
                     ld(&s->cstats.done[MC__OP_PUT]), failed_total(s, MC__OP_PUT), pb,
                     ld(&s->cstats.done[MC__OP_GET]), failed_total(s, MC__OP_GET), gb,
                     ld(&s->cstats.done[MC__OP_REMOVE]), failed_total(s, MC__OP_REMOVE), seg,
                     lu, lc);
    if (n < 0)
        mc_oom(256);
    *len = (size_t)n;
    return line;
}

/* ---- the server ---- */

static int handler(void *ctx, mc_httpd_req *rq)
{
    mc_store *s = ctx;
    if (!mc_httpd_method_is(rq, "GET") && !mc_httpd_method_is(rq, "HEAD"))
        return mc_httpd_reply_text(rq, 405, "text/plain", "Method not allowed\n");
    bool known = strcmp(rq->url, "/health") == 0 || strcmp(rq->url, "/metrics") == 0 ||
                 strcmp(rq->url, "/metrics/summary") == 0;
    if (!known)
        return mc_httpd_reply_text(rq, 404, "text/plain", "not found\n");
    /* up is stored (seq_cst) after setup assigned s->http and cleared before teardown
     * stops the server, which lets requests in progress finish first: seen true, every
     * field read below is in place */
    if (!atomic_load(&s->up))
        return mc_httpd_reply_text(rq, 503, "text/plain", "not set up\n");
    if (strcmp(rq->url, "/health") == 0)
        return mc_httpd_reply_text(rq, 200, "text/plain", "OK");
    if (strcmp(rq->url, "/metrics") == 0) {
        size_t len;
        char *body = metrics_text(s, &len);
        return mc_httpd_reply_take(rq, 200, "text/plain; version=0.0.4", body, len);
    }
    size_t len;
    char *body = summary_text(s, &len); /* /metrics/summary */
    return mc_httpd_reply_take(rq, 200, "text/plain", body, len);
}

/* A loopback name: served on 127.0.0.1 (never on every interface by accident). */
static bool loopback_name(const char *h)
{
    return strcmp(h, "localhost") == 0 || strcmp(h, "localhost.localdomain") == 0 ||
           strcmp(h, "ip6-localhost") == 0 || strncmp(h, "127.", 4) == 0;
}

int mc__chttp_start(mc_store *s, const mc_store_config *c)
{
    if (!c->enable_client_http_server)
        return MC_OK;
    const char *host = loopback_name(s->host) ? "127.0.0.1" : s->host;
    mc_httpd_opts ho = {.what = "client HTTP server",
                        .tag = TAG,
                        .handle = handler,
                        .ctx = s,
                        .max_connections = CHTTP_MAX_CONNECTIONS,
                        .idle_timeout_s = 30,
                        .caller_reports = true,
                        .auth = mc_auth_enabled(&s->auth) ? &s->auth : NULL,
                        .open_paths = open_paths,
                        .open_can = NULL, /* every route is a count: no warning when open */
                        .max_connections_per_ip = CHTTP_MAX_PER_IP,
                        .header_timeout_ms = CHTTP_HEADER_TIMEOUT_MS,
                        .request_timeout_ms = CHTTP_REQUEST_TIMEOUT_MS};
    int port = c->client_http_port;
    int rc = mc_httpd_start(&ho, host, (uint16_t)port, &s->http);
    if (rc != 0) {
        s->http = NULL;
        const char *why = rc == -EADDRINUSE ? "the port is already in use"
                          : rc == -ENOENT   ? "the host name does not resolve"
                                            : strerror(-rc);
        mc_log(MC_LOG_ERROR, TAG,
               "setup: the client HTTP server cannot listen on %s:%d (client_http_port %d): "
               "%s; give another client_http_port (0 picks a free one) or "
               "enable_client_http_server=False",
               host, port, port, why);
        return rc == -ENOENT || rc == -EINVAL ? MC_INVALID_PARAMS : MC_INTERNAL_ERROR;
    }
    mc_log(MC_LOG_INFO, TAG, "client HTTP server of %s on %s:%u (/health, /metrics, "
           "/metrics/summary%s)", s->name, host, (unsigned)mc_httpd_port(s->http),
           ho.auth ? "; other paths need signed requests" : "");
    return MC_OK;
}

void mc__chttp_stop(mc_store *s)
{
    mc_httpd_destroy(s->http); /* joins its threads, closes the listening socket */
    s->http = NULL;
}

int mc_store_client_http_port(mc_store *s)
{
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    rc = s->http ? (int)mc_httpd_port(s->http) : 0;
    mc__store_leave(s);
    return rc;
}
