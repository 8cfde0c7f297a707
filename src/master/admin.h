/* admin.h: the master's observability: Prometheus text, the periodic one-line summary,
 * and the HTTP admin server on --metrics_port (libmicrohttpd).
 *
 * Upstream: `master_admin_service.cpp` (HTTP routes, summary line) and
 * `master_metric_manager.cpp` (metric names); upstream-mooncake.md §4.11, §5.2, §5.3.
 *
 * Routes (GET only; anything else 405; unknown paths 404):
 *   /metrics          Prometheus text format 0.0.4: upstream names (master_allocated_bytes,
 *                     master_key_count, master_<op>_requests_total, master_batch_<op>_*,
 *                     master_successful_evictions_total, the master_value_size_bytes
 *                     histogram with upstream's buckets, ...) plus ours: master_rpc_*
 *                     (connections, frames), master_deferred_free_{bytes,key_count}.
 *   /metrics/summary  the summary line (as logged) over the time since the last call.
 *   /health           200 {"status":"ok","role":"leader","state":"serving","ready":true}.
 *   /get_all_segments one mounted segment name per line (text/plain; upstream's format).
 *   /get_all_keys     one key per line (text/plain); bytes outside printable ASCII and
 *                     the backslash are written as \xNN so every key stays on one line.
 *   /query_key?key=K  200 JSON {"key","size","complete","hard_pinned","soft_pinned",
 *                     "lease_left_ms","soft_pin_left_ms","replicas":[{"segment_id",
 *                     "transport_endpoint","address","size","status","protocol"}]};
 *                     404 {"error":"OBJECT_NOT_FOUND"}; 400 for a missing or bad key.
 *
 * Trust (issue 11, docs/security.md): with a cluster secret (opts.auth) the routes that
 * list or reveal keys and segments (/get_all_keys, /get_all_segments, /query_key) need a
 * signed request (src/net/httpd.h: MC-HMAC, 401 otherwise); /metrics, /metrics/summary
 * and /health stay open for scrapers and probes (they give counts, never names).
 * /metrics also carries the admin server's own connection and refusal counters
 * (master_admin_http_*) and what opts.extra_metrics adds (the master: the embedded HTTP
 * metadata server's http_metadata_*). Connections are bounded as opts says.
 */
#ifndef MOONCAKE_MASTER_ADMIN_H
#define MOONCAKE_MASTER_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "master/master_service.h"
#include "master/rpc_server.h"
#include "mooncake/mc_api.h"

/* mc_master_metrics_text: the /metrics body. rpc may be NULL (no master_rpc_ lines).
 * Returns a new malloc'd NUL-terminated string (caller frees); *len gets its length. */
MC_API char *mc_master_metrics_text(mc_master_service *svc, mc_master_rpc_server *rpc,
                                    size_t *len);

/* mc_master_format_summary: the upstream-style one-line summary ("Master Admin Metrics:
 * role=leader, state=serving, service_ready=true, master={Mem Storage: used / total
 * (pct) | Keys: N (soft-pinned: M) | Clients: C | Requests (Success/Total per sec): ...
 * | Batch Requests ...: ... | Eviction: ... | Discard: ...}"). Rates are the counter
 * deltas between prev and cur over secs seconds (prev NULL = since start); storage,
 * keys and clients are cur's values. Writes at most len bytes into buf (always
 * NUL-terminated when len > 0); returns the length it needed (as snprintf). */
MC_API size_t mc_master_format_summary(const mc_master_stats *prev, const mc_master_stats *cur,
                                       double secs, char *buf, size_t len);

/* mc_master_format_bytes: "94.09 MB" style (powers of 1024: B, KB, MB, GB, TB). */
MC_API void mc_master_format_bytes(uint64_t bytes, char *buf, size_t len);

typedef struct mc_master_admin mc_master_admin;
struct mc_auth_secret;

#define MC_MASTER_ADMIN_DEFAULT_MAX_CONNECTIONS 1024u
#define MC_MASTER_ADMIN_DEFAULT_MAX_PER_IP 32u
#define MC_MASTER_ADMIN_DEFAULT_HEADER_TIMEOUT_MS 10000u
#define MC_MASTER_ADMIN_DEFAULT_REQUEST_TIMEOUT_MS 60000u

/* Options of the admin server; zero fields take the defaults above. */
typedef struct mc_master_admin_opts {
    const struct mc_auth_secret *auth;  /* borrowed, outlives the server; NULL: open */
    /* more /metrics text (the embedded HTTP metadata server's counters): returns a new
     * malloc'd string and its length; runs on the admin server's thread; NULL: none */
    char *(*extra_metrics)(void *ctx, size_t *len);
    void *extra_ctx; /* borrowed, outlives the server */
    unsigned max_connections;
    unsigned max_connections_per_ip;
    unsigned header_timeout_ms;
    unsigned request_timeout_ms;
} mc_master_admin_opts;

/* mc_master_admin_start_opts: mc_master_admin_start with options (NULL: defaults, open).
 * Same returns. */
MC_API int mc_master_admin_start_opts(mc_master_service *svc, mc_master_rpc_server *rpc,
                                      const char *host, uint16_t port,
                                      const mc_master_admin_opts *opts, mc_master_admin **out);

/* mc_master_admin_start: serves the routes above on host:port in background threads.
 *   svc (borrowed) must outlive the server; rpc (borrowed, may be NULL) adds its counters.
 *   host: NULL/"" = "0.0.0.0". port 0 = a free port (see _port).
 * Returns 0, -EADDRINUSE (port taken), -EINVAL (bad host), other -errno. */
MC_API int mc_master_admin_start(mc_master_service *svc, mc_master_rpc_server *rpc,
                                 const char *host, uint16_t port, mc_master_admin **out);

/* mc_master_admin_port: the bound port. */
MC_API uint16_t mc_master_admin_port(const mc_master_admin *a);

/* mc_master_admin_destroy: stops serving (requests in progress finish) and frees. NULL ok. */
MC_API void mc_master_admin_destroy(mc_master_admin *a);

#endif
