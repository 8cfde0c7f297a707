/* admin.c: Prometheus text, the summary line and the HTTP admin routes. See admin.h.
 * The HTTP plumbing is net/httpd.h; this file must not touch libmicrohttpd directly. */
#include "master/admin.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "net/httpd.h"

#define TAG "master-admin"

/* ---- a growable text buffer (aborts on OOM: sizes here are ours, not a peer's) ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t more)
{
    if (b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more + 1)
        cap *= 2;
    b->p = mc_xrealloc(b->p, cap);
    b->cap = cap;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    sb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void sb_add(sbuf *b, const void *data, size_t n)
{
    sb_reserve(b, n);
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* ---- Prometheus text ---- */

static void metric(sbuf *b, const char *name, const char *type, const char *help,
                   uint64_t value)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type,
              name, value);
}

char *mc_master_metrics_text(mc_master_service *svc, mc_master_rpc_server *rpc, size_t *len)
{
    mc_master_stats st;
    memset(&st, 0, sizeof st);
    mc_master_service_get_stats(svc, &st);
    sbuf b = {0};
    metric(&b, "master_allocated_bytes", "gauge", "Bytes reserved in all mounted segments",
           st.allocated_bytes);
    metric(&b, "master_total_capacity_bytes", "gauge", "Bytes of all mounted segments",
           st.total_capacity_bytes);
    metric(&b, "master_nof_allocated_bytes", "gauge", "NVMe-oF bytes reserved (none here)", 0);
    metric(&b, "master_total_nof_capacity_bytes", "gauge", "NVMe-oF capacity (none here)", 0);
    metric(&b, "master_allocated_file_size_bytes", "gauge", "File bytes reserved (none here)",
           0);
    metric(&b, "master_total_file_capacity_bytes", "gauge", "File capacity (none here)", 0);
    if (st.view_version) { /* HA index replication (docs/ha.md "Replication") */
        metric(&b, "master_ha_repl_last_lsn", "gauge",
               "Last mutation-log LSN this master logged or copied", st.repl_last_lsn);
        metric(&b, "master_ha_repl_applied_lsn", "gauge",
               "Last LSN applied from the leader (standby)", st.repl_applied_lsn);
        metric(&b, "master_ha_repl_acked_lsn", "gauge",
               "Highest LSN a standby acknowledged (leader)", st.repl_acked_lsn);
        metric(&b, "master_ha_repl_fetches_total", "counter",
               "FETCH_LOG requests served to standbys", st.repl_fetches);
        metric(&b, "master_ha_repl_snapshots_loaded_total", "counter",
               "Leader snapshots this master loaded as a standby (bootstraps)",
               st.repl_snapshots_loaded);
        metric(&b, "master_ha_sync_degraded_total", "counter",
               "Puts acknowledged in --ha_sync=sync without a standby's acknowledgement",
               st.repl_sync_degraded);
    }
    if (st.oplog_on) { /* the mutation log (docs/ha.md "Group commit") */
        metric(&b, "master_oplog_records_total", "counter", "Mutation-log records appended",
               st.oplog_records);
        metric(&b, "master_oplog_groups_total", "counter",
               "Mutation-log groups written (one write() each)", st.oplog_groups);
        metric(&b, "master_oplog_fsyncs_total", "counter",
               "fdatasync calls of the mutation log (one per group with --oplog_sync=fsync)",
               st.oplog_fsyncs);
        metric(&b, "master_oplog_deferred_acks_total", "counter",
               "Acknowledgements sent by the RPC server once their record was durable "
               "(no RPC thread waited)",
               st.oplog_deferred);
    }
    metric(&b, "master_key_count", "gauge", "Objects in the index (complete and in flight)",
           st.key_count);
    metric(&b, "master_soft_pin_key_count", "gauge", "Objects soft-pinned now",
           st.soft_pin_key_count);
    metric(&b, "master_active_clients", "gauge", "Clients alive (pinging within client_ttl)",
           st.active_clients);
    metric(&b, "master_segment_count", "gauge", "Mounted segments", st.segment_count);
    metric(&b, "master_put_start_discarded_staging_size", "gauge",
           "Bytes reserved by puts in flight", st.processing_bytes);
    metric(&b, "master_deferred_free_bytes", "gauge",
           "Bytes of force-removed objects kept until their readers' leases end (part of "
           "master_allocated_bytes)",
           st.deferred_free_bytes);
    metric(&b, "master_deferred_free_key_count", "gauge",
           "Force-removed objects whose space waits for their readers' leases to end",
           st.deferred_free_keys);
    metric(&b, "master_quarantined_bytes", "gauge",
           "Bytes of writes that never finished, kept until their writer is fenced on both "
           "sides (part of master_allocated_bytes; docs/consistency.md)",
           st.quarantined_bytes);
    metric(&b, "master_quarantined_entries", "gauge",
           "Quarantined allocations (one per replica of a failed write)",
           st.quarantined_entries);
    metric(&b, "master_fences_pending", "gauge",
           "Fences handed out in ping replies and not yet acknowledged", st.fences_pending);
    /* upstream's histogram: cumulative buckets, then _sum and _count */
    sb_printf(&b, "# HELP master_value_size_bytes Distribution of object value sizes\n"
                  "# TYPE master_value_size_bytes histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < MC_MASTER_VALUE_SIZE_BUCKETS; i++) {
        cum += st.value_size_buckets[i];
        if (i < MC_MASTER_VALUE_SIZE_BUCKETS - 1)
            sb_printf(&b, "master_value_size_bytes_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n",
                      mc_master_value_size_bound(i), cum);
        else
            sb_printf(&b, "master_value_size_bytes_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
    }
    sb_printf(&b,
              "master_value_size_bytes_sum %" PRIu64 "\nmaster_value_size_bytes_count %" PRIu64
              "\n",
              st.value_size_sum, st.value_size_count);
    for (int op = 0; op < MC_MASTER_OP_COUNT; op++) {
        char name[128], help[160];
        const char *stem = mc_master_op_name(op);
        snprintf(name, sizeof name, "master_%s_requests_total", stem);
        snprintf(help, sizeof help, "Total %s requests", stem);
        metric(&b, name, "counter", help, st.requests[op]);
        snprintf(name, sizeof name, "master_%s_failures_total", stem);
        snprintf(help, sizeof help, "Total failed %s requests", stem);
        metric(&b, name, "counter", help, st.failures[op]);
    }
    for (int op = 0; op < MC_MASTER_BATCH_COUNT; op++) {
        const char *stem = mc_master_batch_op_name(op);
        const mc_master_batch_counters *c = &st.batch[op];
        static const char *const suffix[] = {"requests", "failures", "partial_successes",
                                             "items", "failed_items"};
        const uint64_t vals[] = {c->requests, c->failures, c->partial_successes, c->items,
                                 c->failed_items};
        for (int k = 0; k < 5; k++) {
            char name[128], help[160];
            snprintf(name, sizeof name, "master_%s_%s_total", stem, suffix[k]);
            snprintf(help, sizeof help, "Total %s %s", stem, suffix[k]);
            metric(&b, name, "counter", help, vals[k]);
        }
    }
    metric(&b, "master_put_start_alloc_failures_total", "counter",
           "put_start allocations that found no space", st.put_start_alloc_failures);
    metric(&b, "master_put_start_partial_allocations_total", "counter",
           "put_start allocations with fewer replicas than asked",
           st.put_start_partial_allocations);
    metric(&b, "master_successful_evictions_total", "counter",
           "Eviction passes that freed something", st.eviction_successes);
    metric(&b, "master_attempted_evictions_total", "counter", "Eviction passes run",
           st.eviction_attempts);
    metric(&b, "master_evicted_key_count", "counter", "Objects evicted", st.evicted_keys);
    metric(&b, "master_evicted_size_bytes", "counter", "Bytes evicted", st.evicted_bytes);
    metric(&b, "master_put_start_discard_cnt", "counter",
           "Stale in-flight puts pre-empted by a newer put_start or discarded at their "
           "client's expiry",
           st.put_discarded);
    metric(&b, "master_put_start_release_cnt", "counter",
           "In-flight puts released after put_start_release_timeout_sec", st.put_released);
    metric(&b, "master_clients_expired_total", "counter",
           "Clients expired after client_ttl without a ping", st.clients_expired);
    metric(&b, "master_fences_issued_total", "counter",
           "Fences issued (one per side of a writer/segment pair whose epoch was raised)",
           st.fences_issued);
    metric(&b, "master_fences_acked_total", "counter",
           "Fences acknowledged by the side they were for", st.fences_acked);
    /* the disk tier (docs/ssd-tier.md; ours: upstream's master has no such metrics) */
    metric(&b, "master_disk_tier_clients", "gauge", "Clients with a registered disk tier",
           st.disk_clients);
    metric(&b, "master_disk_replica_keys", "gauge", "Objects with a LOCAL_DISK replica",
           st.disk_replica_keys);
    metric(&b, "master_disk_only_keys", "gauge", "Objects on disk only (no memory replica)",
           st.disk_only_keys);
    metric(&b, "master_disk_replica_bytes", "gauge", "Bytes of objects on disk tiers",
           st.disk_replica_bytes);
    metric(&b, "master_offload_queued", "gauge", "Disk-tier tasks waiting or handed out",
           st.offload_queued);
    metric(&b, "master_offload_requests_total", "counter", "Offloads asked of clients",
           st.offload_requests);
    metric(&b, "master_offload_successes_total", "counter",
           "Offloads confirmed (LOCAL_DISK replica recorded)", st.offload_successes);
    metric(&b, "master_offload_failures_total", "counter",
           "Offloads refused (disk full), failed or timed out", st.offload_failures);
    metric(&b, "master_disk_hits_total", "counter",
           "Gets of objects readable from a disk tier only", st.disk_hits);
    metric(&b, "master_promotion_requests_total", "counter", "Promotions asked of clients",
           st.promotion_requests);
    metric(&b, "master_promotion_successes_total", "counter", "Promotions completed",
           st.promotion_successes);
    metric(&b, "master_promotion_failures_total", "counter",
           "Promotions that failed or found no memory", st.promotion_failures);
    metric(&b, "master_disk_replicas_lost_total", "counter",
           "LOCAL_DISK replicas dropped with their expired client", st.disk_replicas_lost);
    if (rpc) {
        mc_master_rpc_server_stats rs;
        mc_master_rpc_server_get_stats(rpc, &rs);
        metric(&b, "master_rpc_connections_open", "gauge", "Open RPC connections",
               rs.connections_active);
        metric(&b, "master_rpc_connections_total", "counter", "Accepted RPC connections",
               rs.connections_total);
        metric(&b, "master_rpc_bad_connections_total", "counter",
               "RPC connections closed for a malformed or oversized frame",
               rs.connections_bad);
        metric(&b, "master_rpc_frames_total", "counter", "RPC requests received", rs.frames);
        metric(&b, "master_rpc_refused_frames_total", "counter",
               "RPC requests refused (unknown opcode or undecodable body)",
               rs.frames_refused);
        metric(&b, "master_rpc_authenticated_total", "counter",
               "RPC connections that proved they hold the cluster secret",
               rs.authenticated_total);
        metric(&b, "master_rpc_pending_request_bytes", "gauge",
               "Bytes of RPC request bodies being received", rs.pending_request_bytes);
        sb_printf(&b, "# HELP master_rpc_refused_total RPC connections refused or closed by "
                      "the handshake or a limit, by reason\n"
                      "# TYPE master_rpc_refused_total counter\n");
        for (int i = 0; i < MC_RPC_REFUSED_COUNT; i++)
            sb_printf(&b, "master_rpc_refused_total{reason=\"%s\"} %" PRIu64 "\n",
                      mc_master_rpc_refusal_name(i), rs.refused[i]);
        /* HA replication fetches without the term token (replicate.c; docs/ha.md "Who
         * may fetch"): refused per request, not per connection */
        sb_printf(&b, "master_rpc_refused_total{reason=\"fetch_not_standby\"} %" PRIu64 "\n",
                  st.repl_refused);
    }
    if (len)
        *len = b.len;
    if (!b.p)
        b.p = mc_xstrdup("");
    return b.p;
}

/* ---- summary line ---- */

void mc_master_format_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", bytes);
    else
        snprintf(buf, len, "%.2f %s", v, units[u]);
}

static uint64_t delta(uint64_t cur, uint64_t prev)
{
    return cur >= prev ? cur - prev : 0;
}

/* HA (ha_gate.c): what a role means for serving. */
static const char *ha_state(int role)
{
    return role == MC_MASTER_ROLE_LEADER    ? "serving"
           : role == MC_MASTER_ROLE_STANDBY ? "waiting"
                                            : "fenced";
}

size_t mc_master_format_summary(const mc_master_stats *prev, const mc_master_stats *cur,
                                double secs, char *buf, size_t len)
{
    static const mc_master_stats zero;
    if (!prev)
        prev = &zero;
    if (!(secs > 0))
        secs = 1;
    sbuf b = {0};
    char used[32], total[32], staging[32], evsize[32];
    mc_master_format_bytes(cur->allocated_bytes, used, sizeof used);
    mc_master_format_bytes(cur->total_capacity_bytes, total, sizeof total);
    mc_master_format_bytes(cur->processing_bytes, staging, sizeof staging);
    mc_master_format_bytes(delta(cur->evicted_bytes, prev->evicted_bytes), evsize,
                           sizeof evsize);
    double pct = cur->total_capacity_bytes
                     ? 100.0 * (double)cur->allocated_bytes / (double)cur->total_capacity_bytes
                     : 0.0;
    sb_printf(&b, "Master Admin Metrics: role=%s, state=%s, service_ready=%s, ",
              mc_master_role_name(cur->role), ha_state(cur->role),
              cur->role == MC_MASTER_ROLE_LEADER ? "true" : "false");
    sb_printf(&b,
              "master={Mem Storage: %s / %s (%.1f%%) | SSD Storage: 0 B / 0 B | Keys: %" PRIu64
              " (soft-pinned: %" PRIu64 ") | Clients: %" PRIu64
              " | Requests (Success/Total per sec): ",
              used, total, pct, cur->key_count, cur->soft_pin_key_count, cur->active_clients);
    static const struct {
        const char *label;
        int op;
    } ops[] = {
        {"PutStart", MC_MASTER_OP_PUT_START},   {"PutEnd", MC_MASTER_OP_PUT_END},
        {"PutRevoke", MC_MASTER_OP_PUT_REVOKE}, {"Get", MC_MASTER_OP_GET_REPLICA_LIST},
        {"Exist", MC_MASTER_OP_EXIST_KEY},      {"Del", MC_MASTER_OP_REMOVE},
        {"DelAll", MC_MASTER_OP_REMOVE_ALL},    {"Ping", MC_MASTER_OP_PING},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int op = ops[i].op;
        uint64_t tot = delta(cur->requests[op], prev->requests[op]);
        uint64_t fail = delta(cur->failures[op], prev->failures[op]);
        uint64_t ok = tot >= fail ? tot - fail : 0;
        sb_printf(&b, "%s%s=%.2f/%.2f", i ? ", " : "", ops[i].label, (double)ok / secs,
                  (double)tot / secs);
    }
    sb_printf(&b, " | Batch Requests (per sec, Req=Success/PartialSuccess/Total, "
                  "Item=Success/Total): ");
    static const struct {
        const char *label;
        int op;
    } bops[] = {
        {"PutStart", MC_MASTER_BATCH_PUT_START},   {"PutEnd", MC_MASTER_BATCH_PUT_END},
        {"PutRevoke", MC_MASTER_BATCH_PUT_REVOKE}, {"Get", MC_MASTER_BATCH_GET_REPLICA_LIST},
        {"ExistKey", MC_MASTER_BATCH_EXIST_KEY},   {"Remove", MC_MASTER_BATCH_REMOVE},
        {"Clear", MC_MASTER_BATCH_REPLICA_CLEAR},
    };
    for (size_t i = 0; i < sizeof bops / sizeof bops[0]; i++) {
        const mc_master_batch_counters *c = &cur->batch[bops[i].op];
        const mc_master_batch_counters *p = &prev->batch[bops[i].op];
        uint64_t req = delta(c->requests, p->requests);
        uint64_t fail = delta(c->failures, p->failures);
        uint64_t part = delta(c->partial_successes, p->partial_successes);
        uint64_t ok = req >= fail + part ? req - fail - part : 0;
        uint64_t items = delta(c->items, p->items);
        uint64_t bad = delta(c->failed_items, p->failed_items);
        uint64_t iok = items >= bad ? items - bad : 0;
        sb_printf(&b, "%s%s:(Req=%.2f/%.2f/%.2f, Item=%.2f/%.2f)", i ? ", " : "",
                  bops[i].label, (double)ok / secs, (double)part / secs, (double)req / secs,
                  (double)iok / secs, (double)items / secs);
    }
    uint64_t released = delta(cur->put_released, prev->put_released);
    uint64_t discarded = delta(cur->put_discarded, prev->put_discarded);
    sb_printf(&b,
              " | Eviction: Success/Attempts=%" PRIu64 "/%" PRIu64 ", AllocFail=%" PRIu64
              ", PartialAlloc=%" PRIu64 ", keys=%" PRIu64 ", size=%s | Discard: "
              "Released/Total=%" PRIu64 "/%" PRIu64 ", StagingSize=%s}",
              delta(cur->eviction_successes, prev->eviction_successes),
              delta(cur->eviction_attempts, prev->eviction_attempts),
              delta(cur->put_start_alloc_failures, prev->put_start_alloc_failures),
              delta(cur->put_start_partial_allocations, prev->put_start_partial_allocations),
              delta(cur->evicted_keys, prev->evicted_keys), evsize, released,
              released + discarded, staging);
    if (cur->view_version) /* HA: upstream appends the leader and the view */
        sb_printf(&b, ", leader=%s, view_version=%lld", cur->leader,
                  (long long)cur->view_version);
    size_t need = b.len;
    if (len) {
        size_t n = need < len - 1 ? need : len - 1;
        if (n)
            memcpy(buf, b.p, n);
        buf[n] = '\0';
    }
    free(b.p);
    return need;
}

/* ---- HTTP ---- */

/* Routes answered without the cluster secret (counts, never names). */
static const char *const open_paths[] = {"/metrics",  "/metrics/summary", "/health",
                                         "/role",     "/leader",          NULL};

struct mc_master_admin {
    mc_master_service *svc;
    mc_master_rpc_server *rpc;
    char *(*extra_metrics)(void *ctx, size_t *len); /* immutable; NULL */
    void *extra_ctx;
    mc_httpd *httpd;
    pthread_mutex_t lock;         /* guards last/last_ms (/metrics/summary) */
    mc_master_stats last;
    uint64_t last_ms;
};

static int seg_cb(const mc_master_segment_info *info, void *ctx)
{
    sbuf *b = ctx;
    sb_printf(b, "%s\n", info->name ? info->name : "");
    return 0;
}

static void escape_key(sbuf *b, const uint8_t *k, size_t n)
{
    sb_reserve(b, n * 4 + 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = k[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
            b->p[b->len++] = (char)ch;
        } else {
            static const char hex[] = "0123456789abcdef";
            b->p[b->len++] = '\\';
            b->p[b->len++] = 'x';
            b->p[b->len++] = hex[ch >> 4];
            b->p[b->len++] = hex[ch & 15];
        }
    }
    b->p[b->len] = '\0';
}

static int key_cb(const void *key, size_t key_len, uint64_t size, bool complete, void *ctx)
{
    (void)size;
    (void)complete;
    sbuf *b = ctx;
    escape_key(b, key, key_len);
    sb_add(b, "\n", 1);
    return 0;
}

static char *uuid_text(mc_master_uuid id, char *buf, size_t len)
{
    snprintf(buf, len, "%016" PRIx64 "-%016" PRIx64, id.first, id.second);
    return buf;
}

static int do_query_key(mc_master_admin *a, mc_httpd_req *c)
{
    size_t n = 0;
    const char *v = mc_httpd_arg(c, "key", &n);
    if (!v || n == 0) {
        json_t *j = json_pack("{s:s}", "error", "missing key parameter");
        return mc_httpd_reply_json(c, 400, j);
    }
    mc_master_key_info info;
    memset(&info, 0, sizeof info);
    int rc = mc_master_service_query_key(a->svc, v, n, &info);
    if (rc != MC_OK) {
        const char *name = mc_status_name(rc);
        json_t *j = json_pack("{s:s,s:i}", "error", name ? name : "?", "code", rc);
        return mc_httpd_reply_json(c, rc == MC_OBJECT_NOT_FOUND ? 404 : 400, j);
    }
    json_t *reps = json_array();
    for (uint32_t i = 0; i < info.replicas.n && i < MC_MASTER_MAX_REPLICAS; i++) {
        const mc_master_replica *r = &info.replicas.replicas[i];
        char id[40];
        json_array_append_new(
            reps, json_pack("{s:s,s:s,s:I,s:I,s:i,s:s}", "segment_id",
                            uuid_text(r->segment_id, id, sizeof id), "transport_endpoint",
                            r->transport_endpoint, "address", (json_int_t)r->address, "size",
                            (json_int_t)r->size, "status", r->status, "protocol",
                            r->protocol));
    }
    json_t *j = json_pack("{s:s%,s:I,s:b,s:b,s:b,s:I,s:I,s:O}", "key", v, n, "size",
                          (json_int_t)info.size, "complete", info.complete, "hard_pinned",
                          info.hard_pinned, "soft_pinned", info.soft_pinned, "lease_left_ms",
                          (json_int_t)info.lease_left_ms, "soft_pin_left_ms",
                          (json_int_t)info.soft_pin_left_ms, "replicas", reps);
    if (!j) { /* key not valid UTF-8: show it escaped */
        sbuf kb = {0};
        escape_key(&kb, (const uint8_t *)v, n);
        j = json_pack("{s:s,s:I,s:b,s:b,s:b,s:I,s:I,s:O}", "key", kb.p ? kb.p : "", "size",
                      (json_int_t)info.size, "complete", info.complete, "hard_pinned",
                      info.hard_pinned, "soft_pinned", info.soft_pinned, "lease_left_ms",
                      (json_int_t)info.lease_left_ms, "soft_pin_left_ms",
                      (json_int_t)info.soft_pin_left_ms, "replicas", reps);
        free(kb.p);
    }
    json_decref(reps);
    if (!j)
        return mc_httpd_reply_text(c, 500, "text/plain", "encoding failed\n");
    return mc_httpd_reply_json(c, 200, j);
}

/* /health, /role, /leader (upstream names; HA: docs/ha.md). /health answers 200 with
 * {"status","role","state","ready","view_version","leader"}; ready (and "status":"ok")
 * only on a serving leader, so a load balancer's probe finds the leader. /role:
 * {"role","view_version"}. /leader: {"leader","view_version"} ("leader" "" when
 * unknown). A leader whose lease deadline passed reports state "fenced". */
static int do_ha_route(mc_master_admin *a, mc_httpd_req *c, const char *url)
{
    mc_master_stats st;
    memset(&st, 0, sizeof st);
    mc_master_service_ha_info(a->svc, &st);
    bool serving = mc_master_service_serving(a->svc);
    const char *state = st.role == MC_MASTER_ROLE_LEADER && !serving ? "fenced"
                                                                     : ha_state(st.role);
    json_t *j;
    if (strcmp(url, "/role") == 0)
        j = json_pack("{s:s,s:I}", "role", mc_master_role_name(st.role), "view_version",
                      (json_int_t)st.view_version);
    else if (strcmp(url, "/leader") == 0)
        j = json_pack("{s:s,s:I}", "leader", st.leader, "view_version",
                      (json_int_t)st.view_version);
    else
        j = json_pack("{s:s,s:s,s:s,s:b,s:I,s:s}", "status", serving ? "ok" : "unavailable",
                      "role", mc_master_role_name(st.role), "state",
                      serving ? "serving" : state, "ready", serving, "view_version",
                      (json_int_t)st.view_version, "leader", st.leader);
    return mc_httpd_reply_json(c, 200, j);
}

/* A complete request (any body was discarded by httpd). */
static int handler(void *ctx, mc_httpd_req *c)
{
    mc_master_admin *a = ctx;
    const char *url = c->url;
    if (!mc_httpd_method_is(c, "GET") && !mc_httpd_method_is(c, "HEAD"))
        return mc_httpd_reply_text(c, 405, "text/plain", "Method not allowed\n");
    if (strcmp(url, "/metrics") == 0) {
        size_t len, hlen, mlen = 0;
        char *body = mc_master_metrics_text(a->svc, a->rpc, &len);
        char *h = mc_httpd_metrics_text(a->httpd, "master_admin_http", &hlen);
        char *m = a->extra_metrics ? a->extra_metrics(a->extra_ctx, &mlen) : NULL;
        body = mc_xrealloc(body, len + hlen + mlen + 1);
        memcpy(body + len, h, hlen);
        if (m)
            memcpy(body + len + hlen, m, mlen);
        len += hlen + mlen;
        body[len] = '\0';
        free(h);
        free(m);
        return mc_httpd_reply_take(c, 200, "text/plain; version=0.0.4", body, len);
    }
    if (strcmp(url, "/metrics/summary") == 0) {
        mc_master_stats cur;
        memset(&cur, 0, sizeof cur);
        mc_master_service_get_stats(a->svc, &cur);
        uint64_t now = mc_now_ms();
        pthread_mutex_lock(&a->lock);
        double secs = (double)(now - a->last_ms) / 1000.0;
        size_t need = mc_master_format_summary(&a->last, &cur, secs, NULL, 0);
        char *line = mc_xmalloc(need + 2);
        mc_master_format_summary(&a->last, &cur, secs, line, need + 1);
        a->last = cur;
        a->last_ms = now;
        pthread_mutex_unlock(&a->lock);
        strcat(line, "\n");
        return mc_httpd_reply_take(c, 200, "text/plain", line, need + 1);
    }
    if (strcmp(url, "/health") == 0 || strcmp(url, "/role") == 0 ||
        strcmp(url, "/leader") == 0)
        return do_ha_route(a, c, url);
    if (strcmp(url, "/get_all_segments") == 0) {
        sbuf b = {0};
        sb_reserve(&b, 0);
        b.p[0] = '\0';
        mc_master_service_foreach_segment(a->svc, seg_cb, &b);
        return mc_httpd_reply_take(c, 200, "text/plain", b.p, b.len);
    }
    if (strcmp(url, "/get_all_keys") == 0) {
        sbuf b = {0};
        sb_reserve(&b, 0);
        b.p[0] = '\0';
        mc_master_service_foreach_key(a->svc, key_cb, &b);
        return mc_httpd_reply_take(c, 200, "text/plain", b.p, b.len);
    }
    if (strcmp(url, "/query_key") == 0)
        return do_query_key(a, c);
    return mc_httpd_reply_text(c, 404, "text/plain", "not found\n");
}

int mc_master_admin_start(mc_master_service *svc, mc_master_rpc_server *rpc, const char *host,
                          uint16_t port, mc_master_admin **out)
{
    return mc_master_admin_start_opts(svc, rpc, host, port, NULL, out);
}

static unsigned or_default(unsigned v, unsigned def)
{
    return v ? v : def;
}

int mc_master_admin_start_opts(mc_master_service *svc, mc_master_rpc_server *rpc,
                               const char *host, uint16_t port,
                               const mc_master_admin_opts *opts, mc_master_admin **out)
{
    if (!svc || !out)
        return -EINVAL;
    mc_master_admin_opts o = {0};
    if (opts)
        o = *opts;
    const char *h = host && *host ? host : "0.0.0.0";
    mc_master_admin *a = mc_xcalloc(1, sizeof *a);
    a->svc = svc;
    a->rpc = rpc;
    a->extra_metrics = o.extra_metrics;
    a->extra_ctx = o.extra_ctx;
    pthread_mutex_init(&a->lock, NULL);
    a->last_ms = mc_now_ms();
    mc_master_service_get_stats(svc, &a->last);
    mc_httpd_opts ho = {.what = "admin HTTP server",
                        .tag = TAG,
                        .handle = handler,
                        .ctx = a,
                        .max_connections = or_default(
                            o.max_connections, MC_MASTER_ADMIN_DEFAULT_MAX_CONNECTIONS),
                        .idle_timeout_s = 30,
                        .auth = o.auth,
                        .open_paths = open_paths,
                        .open_can = "list every key and segment name (/get_all_keys, "
                                    "/get_all_segments, /query_key)",
                        .max_connections_per_ip = or_default(
                            o.max_connections_per_ip, MC_MASTER_ADMIN_DEFAULT_MAX_PER_IP),
                        .header_timeout_ms = or_default(
                            o.header_timeout_ms, MC_MASTER_ADMIN_DEFAULT_HEADER_TIMEOUT_MS),
                        .request_timeout_ms = or_default(
                            o.request_timeout_ms, MC_MASTER_ADMIN_DEFAULT_REQUEST_TIMEOUT_MS)};
    int rc = mc_httpd_start(&ho, h, port, &a->httpd);
    if (rc != 0) {
        pthread_mutex_destroy(&a->lock);
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

uint16_t mc_master_admin_port(const mc_master_admin *a)
{
    return mc_httpd_port(a->httpd);
}

void mc_master_admin_destroy(mc_master_admin *a)
{
    if (!a)
        return;
    mc_httpd_destroy(a->httpd); /* joins its threads, closes the listening socket */
    pthread_mutex_destroy(&a->lock);
    free(a);
}
