/* mooncake_master: the metadata service of the Mooncake memory pool.
 *
 * Flags: upstream names and defaults (`mooncake-store/src/master.cpp`; upstream-mooncake.md
 * §5.1, API.md §4) through the options table, plus --config_path (JSON). Each upstream
 * flag is implemented or accepted at its default only (refused otherwise, exit 2):
 * docs/flags.md has the table, `--help` says it per flag. Serves:
 *   - the master RPC (proto/master.proto) on --rpc_address:--rpc_port (50051);
 *   - Prometheus /metrics and the admin routes on --metrics_host:--metrics_port (9003);
 *   - with --enable_http_metadata_server, the transfer engine's HTTP metadata server on
 *     --http_metadata_server_host:--http_metadata_server_port (8080); with
 *     --enable_metadata_cleanup_on_timeout as well, a client that expires (client_ttl)
 *     also loses its `mooncake/[<cluster>/]ram/<segment>` and `.../rpc_meta/<segment>`
 *     keys there (upstream ClientMonitorFunc, upstream-mooncake.md §4.7; the cluster part
 *     comes from MC_METADATA_CLUSTER_ID, as the clients' keys do).
 * Trust (issue 11, docs/security.md): --auth_token_file (or MC_AUTH_TOKEN_FILE) names the
 * cluster secret; with it every RPC connection must complete the handshake of
 * common/auth.h first, and the admin port's key-listing routes and the embedded metadata
 * server's /metadata need signed requests. Without it every server warns once that it is
 * open. The --http_* / --metrics_max_* / --http_metadata_server_max_* flags bound what a
 * peer can hold on the HTTP ports, the --rpc_max_* flags on the RPC port; mounts are
 * checked (base 0, overlaps, names of other live clients: docs/security.md).
 * Restart without HA (issue 12, docs/ha.md "Mutation log and snapshots"): --enable_snapshot
 * logs every metadata mutation and snapshots the index into --snapshot_backup_dir (or
 * MOONCAKE_SNAPSHOT_LOCAL_PATH); --enable_snapshot_restore loads it back at start
 * (src/master/persist.h) and prints a "restored from" line.
 * Prints one line per listener on stdout when ready, then logs the upstream-style summary
 * ("Master Admin Metrics: ...") every --metric_report_interval_sec when
 * --enable_metric_reporting. Stops cleanly on SIGINT/SIGTERM (exit 0).
 * HA (--enable_ha, docs/ha.md, master/ha.h): the master starts as a standby (its RPC
 * answers UNAVAILABLE_IN_CURRENT_STATUS), campaigns for the etcd leader key
 * mooncake-store/<cluster_id>/master_view with its --rpc_address:port, and serves once
 * elected; /health, /role, /leader and the summary line say role and view.
 * Exit codes: 1 when a port cannot be bound (the message names the flag and the reason,
 * e.g. "Address already in use") or etcd refuses the election setup; 2 for a bad flag;
 * 3 when this master was the HA leader and lost its lease (it stopped serving first;
 * restart it to rejoin as a standby). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/spin.h"
#include "common/xalloc.h"
#include "master/admin.h"
#include "master/ha.h"
#include "master/master_service.h"
#include "master/persist.h"
#include "master/rpc_server.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/metadata.h"
#include "mooncake/options.h"
#include "metadata/election.h"
#include "tool_util.h"

#define TAG "master"
#define TICK_MS 10 /* period of the service tick (housekeeping), ms */

/* ---- flags used ---- */
static int64_t rpc_port, rpc_thread_num, metrics_port, http_md_port, client_ttl;
static int64_t rpc_busy_poll_us;
static int64_t discard_timeout, release_timeout, verbosity, report_interval, max_threads;
static char *rpc_address, *metrics_host, *http_md_host, *lease_ttl, *soft_pin_ttl;
static char *max_soft_pin_ttl, *allocation_strategy, *memory_allocator, *config_path;
static char *ha_backend_type, *ha_backend_connstring, *etcd_endpoints, *cluster_id, *ha_sync;
static bool enable_http_md, allow_evict_soft, enable_ha, enable_metric_reporting;
static bool enable_md_cleanup;
static int64_t ha_lease_ttl;
static double eviction_ratio, eviction_hwm;
/* the disk tier (docs/ssd-tier.md, src/master/offload.c) */
static bool enable_offload, offload_on_evict, promotion_on_hit;
static int64_t promotion_threshold, offload_task_timeout;
/* replica copy / move tasks (src/master/tasks.c) */
static int64_t max_finished_tasks, max_pending_tasks, max_processing_tasks;
static int64_t pending_task_timeout, processing_task_timeout;
/* trust and bounded resources (issue 11) */
static char *auth_token_file;
static int64_t md_max_keys, md_max_conns, md_max_conns_ip, admin_max_conns, admin_max_conns_ip;
static int64_t http_header_timeout_ms, http_request_timeout_ms;
static uint64_t md_max_total, md_max_pending;
static int64_t rpc_max_conns, rpc_max_conns_ip, rpc_auth_timeout_ms;
static uint64_t rpc_max_request, rpc_max_pending, rpc_max_unread;
static mc_auth_secret secret; /* outlives every server */
/* snapshots and the mutation log (src/master/persist.h) */
static bool enable_snapshot, enable_snapshot_restore, enable_oplog;
static int64_t snapshot_interval, snapshot_retention;
static char *oplog_sync, *snapshot_store, *snapshot_catalog, *snapshot_dir;

/* RPC sockets and the address (upstream --rpc_interface etc.) */
static char *rpc_interface, *root_fs_dir;
static int64_t rpc_conn_timeout;
static bool rpc_tcp_nodelay;
/* glog's flags, mapped onto mc_log (apply_log_flags) */
static char *log_dir;
static bool logtostderr, alsologtostderr;
static int64_t minloglevel, stderrthreshold;

/* ---- upstream flags accepted at their default only (docs/flags.md) ---- */
/* Their values land here; any other than the default is refused by
 * mc_tool_refuse_non_defaults (exit 2) with the row's text. */
static bool od_b[16];
static int64_t od_i[16];
static double od_d[8];
static uint64_t od_z[8];
static char *od_s[16];

#define OD_HELP "only upstream's default is accepted (another value: exit 2): "
#define OD_BOOL(nm, i, d, why)                                                              \
    {.name = nm, .type = MC_OPT_BOOL, .target = &od_b[i], .def = d, .only_default = why,   \
     .help = OD_HELP why}
#define OD_INT(nm, i, d, why)                                                               \
    {.name = nm, .type = MC_OPT_INT, .target = &od_i[i], .def = d, .only_default = why,    \
     .help = OD_HELP why}
#define OD_DOUBLE(nm, i, d, why)                                                            \
    {.name = nm, .type = MC_OPT_DOUBLE, .target = &od_d[i], .def = d, .only_default = why, \
     .help = OD_HELP why}
#define OD_SIZE(nm, i, d, why)                                                              \
    {.name = nm, .type = MC_OPT_SIZE, .target = &od_z[i], .def = d, .only_default = why,   \
     .unit = "bytes", .help = OD_HELP why}
#define OD_STR(nm, i, d, why)                                                               \
    {.name = nm, .type = MC_OPT_STRING, .target = &od_s[i], .def = d, .only_default = why, \
     .help = OD_HELP why}

#define WHY_NOF "mooncake-c does not implement the NVMe-oF SSD tier this tunes (memory " \
                "eviction: --eviction_ratio, --eviction_high_watermark_ratio)"
#define WHY_TIERQ "mooncake-c does not implement this disk-tier limit (its queues are " \
                  "bounded otherwise, docs/ssd-tier.md)"
#define WHY_KV "mooncake-c does not implement KV event publishing (ZMQ)"
#define WHY_OPLOG "mooncake-c does not implement upstream's polled etcd oplog: standbys " \
                  "pull the leader's mutation log over the master RPC (--ha_sync, docs/ha.md)"
#define WHY_TENANT "mooncake-c does not implement multi-tenant quotas"
#define WHY_CXL "mooncake-c does not implement CXL memory segments"
#define WHY_POD "mooncake-c does not implement Kubernetes label routing"

static const mc_option options[] = {
    {.name = "rpc_port", .alias = "port", .type = MC_OPT_INT, .target = &rpc_port,
     .def = "50051", .bounded = true, .min = 0, .max = 65535,
     .help = "TCP port of the master RPC (0: pick a free one)"},
    {.name = "rpc_address", .type = MC_OPT_STRING, .target = &rpc_address, .def = "0.0.0.0",
     .nonempty = true, .help = "address the RPC listens on"},
    {.name = "rpc_thread_num", .type = MC_OPT_INT, .target = &rpc_thread_num, .def = "0",
     .bounded = true, .min = 0, .max = 64,
     .help = "threads serving RPC connections (0: min(4, CPU cores))"},
    {.name = "rpc_busy_poll_us", .type = MC_OPT_INT, .target = &rpc_busy_poll_us,
     .def = "1000", .bounded = true, .min = 0, .max = 10000, .unit = "us",
     .help = "the most an RPC thread polls for the next request before it sleeps (0: "
             "never; also capped by the environment's MC_BUSY_POLL_US, whose 0 turns every "
             "poll off). It saves a wakeup per request (a replay moved 1.6x the blocks at "
             "1000 as at 0 or 200), but an RPC thread whose requests come closer together "
             "than this keeps one CPU core busy (at 1000, measured: 96% of a core at about "
             "1,400 calls/s on one thread; up to --rpc_thread_num cores): set 0 on a host "
             "the master shares"},
    {.name = "rpc_max_connections", .type = MC_OPT_INT, .target = &rpc_max_conns,
     .def = "4096", .bounded = true, .min = 1, .max = 1000000,
     .help = "open RPC connections in all; more are closed at accept "
             "(master_rpc_refused_total{reason=\"conn_limit\"})"},
    {.name = "rpc_max_connections_per_ip", .type = MC_OPT_INT, .target = &rpc_max_conns_ip,
     .def = "256", .bounded = true, .min = 1, .max = 1000000,
     .help = "open RPC connections from one source address (reason per_ip_limit)"},
    {.name = "rpc_max_request_bytes", .type = MC_OPT_SIZE, .target = &rpc_max_request,
     .def = "16mb", .bounded = true, .min = 65536, .max = 16777216.0, .unit = "bytes",
     .help = "one RPC request body (what one connection may have pending); a larger one "
             "closes the connection before its body is read"},
    {.name = "rpc_max_pending_request_bytes", .type = MC_OPT_SIZE, .target = &rpc_max_pending,
     .def = "256mb", .bounded = true, .min = 65536, .max = 1099511627776.0, .unit = "bytes",
     .help = "RPC request bodies being received, all connections together; a header "
             "beyond it closes its connection (reason pending_bytes)"},
    {.name = "rpc_max_unread_reply_bytes", .type = MC_OPT_SIZE, .target = &rpc_max_unread,
     .def = "128mb", .bounded = true, .min = 1048576, .max = 1099511627776.0,
     .unit = "bytes",
     .help = "replies one RPC connection leaves unread before it is closed (reason "
             "reply_backlog); from 1 MiB (or half this) on it is not read until they drain"},
    {.name = "rpc_auth_timeout_ms", .type = MC_OPT_INT, .target = &rpc_auth_timeout_ms,
     .def = "5000", .bounded = true, .min = 100, .max = 600000, .unit = "ms",
     .help = "with a cluster secret: an RPC connection must complete the handshake within "
             "this of its accept (reason handshake_timeout)"},
    {.name = "max_threads", .type = MC_OPT_INT, .target = &max_threads, .def = "16",
     .bounded = true, .min = 1, .max = 64,
     .help = "deprecated upstream name of the RPC thread count: used when "
             "--rpc_thread_num is 0 and this is not its default 16 (with both at their "
             "defaults: min(4, CPU cores))"},
    {.name = "rpc_interface", .type = MC_OPT_STRING, .target = &rpc_interface, .def = "",
     .help = "network interface (\"eth0\") whose IPv4 address the RPC listens on and, with "
             "--enable_ha, publishes; overrides --rpc_address (an interface without one: "
             "exit 2)"},
    {.name = "rpc_conn_timeout_seconds", .type = MC_OPT_INT, .target = &rpc_conn_timeout,
     .def = "0", .bounded = true, .min = 0, .max = 86400, .unit = "s",
     .help = "close an RPC connection that sent no request for this long (0: never; "
             "store clients ping every second)"},
    {.name = "rpc_enable_tcp_no_delay", .type = MC_OPT_BOOL, .target = &rpc_tcp_nodelay,
     .def = "true",
     .help = "TCP_NODELAY on accepted RPC connections (false: Nagle's algorithm may hold "
             "small replies back)"},
    {.name = "metrics_port", .type = MC_OPT_INT, .target = &metrics_port, .def = "9003",
     .bounded = true, .min = 0, .max = 65535,
     .help = "HTTP port of /metrics, /health, /get_all_keys, /get_all_segments, "
             "/query_key (0: pick a free one)"},
    {.name = "metrics_host", .type = MC_OPT_STRING, .target = &metrics_host, .def = "0.0.0.0",
     .nonempty = true, .help = "address the metrics/admin HTTP server listens on"},
    {.name = "enable_metric_reporting", .type = MC_OPT_BOOL,
     .target = &enable_metric_reporting, .def = "true",
     .help = "log the one-line 'Master Admin Metrics' summary periodically"},
    {.name = "metric_report_interval_sec", .type = MC_OPT_INT, .target = &report_interval,
     .def = "10", .bounded = true, .min = 1, .max = 86400, .unit = "s",
     .help = "period of the summary line (mooncake-c flag; upstream fixes it at 10 s)"},
    {.name = "enable_http_metadata_server", .type = MC_OPT_BOOL, .target = &enable_http_md,
     .def = "false", .help = "run the transfer engine's HTTP metadata server in the master"},
    {.name = "http_metadata_server_port", .type = MC_OPT_INT, .target = &http_md_port,
     .def = "8080", .bounded = true, .min = 0, .max = 65535,
     .help = "port of the embedded HTTP metadata server"},
    {.name = "http_metadata_server_host", .type = MC_OPT_STRING, .target = &http_md_host,
     .def = "0.0.0.0", .nonempty = true,
     .help = "address of the embedded HTTP metadata server"},
    {.name = "auth_token_file", .type = MC_OPT_STRING, .target = &auth_token_file, .def = "",
     .help = "file holding the cluster secret (mode 0600, owned by this user); with it the "
             "RPC port requires the handshake and the HTTP ports check signed requests "
             "(docs/security.md). Default: "
             "MC_AUTH_TOKEN_FILE; neither: open, with a warning"},
    {.name = "http_metadata_server_max_total_size", .type = MC_OPT_SIZE, .target = &md_max_total,
     .def = "256mb", .bounded = true, .min = 1, .max = 1099511627776.0, .unit = "bytes",
     .help = "keys + values the embedded HTTP metadata server keeps; beyond it PUT gets 507"},
    {.name = "http_metadata_server_max_keys", .type = MC_OPT_INT, .target = &md_max_keys,
     .def = "100000", .bounded = true, .min = 1, .max = 1000000000,
     .help = "keys the embedded HTTP metadata server keeps; beyond it PUT gets 507"},
    {.name = "http_metadata_server_max_connections", .type = MC_OPT_INT,
     .target = &md_max_conns, .def = "1024", .bounded = true, .min = 1, .max = 65536,
     .help = "concurrent connections to the embedded HTTP metadata server"},
    {.name = "http_metadata_server_max_connections_per_ip", .type = MC_OPT_INT,
     .target = &md_max_conns_ip, .def = "128", .bounded = true, .min = 1, .max = 65536,
     .help = "concurrent connections to the embedded HTTP metadata server from one address"},
    {.name = "http_metadata_server_max_pending_body_size", .type = MC_OPT_SIZE,
     .target = &md_max_pending, .def = "256mb", .bounded = true, .min = 1,
     .max = 1099511627776.0, .unit = "bytes",
     .help = "PUT bodies the embedded HTTP metadata server holds at once; beyond: 503"},
    {.name = "metrics_max_connections", .type = MC_OPT_INT, .target = &admin_max_conns,
     .def = "1024", .bounded = true, .min = 1, .max = 65536,
     .help = "concurrent connections to the metrics/admin HTTP server"},
    {.name = "metrics_max_connections_per_ip", .type = MC_OPT_INT, .target = &admin_max_conns_ip,
     .def = "32", .bounded = true, .min = 1, .max = 65536,
     .help = "concurrent connections to the metrics/admin HTTP server from one address"},
    {.name = "http_header_timeout_ms", .type = MC_OPT_INT, .target = &http_header_timeout_ms,
     .def = "10000", .bounded = true, .min = 100, .max = 3600000, .unit = "ms",
     .help = "HTTP ports: a request line and headers must be in within this of the "
             "connection's accept or its previous request (slowloris; idle keep-alive "
             "connections close then too)"},
    {.name = "http_request_timeout_ms", .type = MC_OPT_INT, .target = &http_request_timeout_ms,
     .def = "60000", .bounded = true, .min = 100, .max = 3600000, .unit = "ms",
     .help = "HTTP ports: a whole request, body and response, must be done within this of "
             "the same moment"},
    {.name = "enable_metadata_cleanup_on_timeout", .type = MC_OPT_BOOL,
     .target = &enable_md_cleanup, .def = "false",
     .help = "when a client expires (client_ttl), delete its segments' ram/ and rpc_meta/ "
             "keys from the embedded HTTP metadata server"},
    {.name = "default_kv_lease_ttl", .type = MC_OPT_STRING, .target = &lease_ttl,
     .def = "10000", .unit = "ms",
     .help = "read lease granted by get/exist (ms, or a duration: 500ms, 10s, 1m, 1h)"},
    {.name = "default_kv_soft_pin_ttl", .type = MC_OPT_STRING, .target = &soft_pin_ttl,
     .def = "1800000", .unit = "ms", .help = "soft pin duration when a put asks for none"},
    {.name = "max_kv_soft_pin_ttl", .type = MC_OPT_STRING, .target = &max_soft_pin_ttl,
     .def = "86400000", .unit = "ms", .help = "largest soft pin a put may ask for"},
    {.name = "allow_evict_soft_pinned_objects", .type = MC_OPT_BOOL,
     .target = &allow_evict_soft, .def = "true",
     .help = "evict soft-pinned objects when nothing else can be evicted"},
    {.name = "eviction_ratio", .type = MC_OPT_DOUBLE, .target = &eviction_ratio,
     .def = "0.05", .bounded = true, .min = 0, .max = 1,
     .help = "fraction of capacity freed by one eviction pass"},
    {.name = "eviction_high_watermark_ratio", .type = MC_OPT_DOUBLE, .target = &eviction_hwm,
     .def = "0.90", .bounded = true, .min = 0, .max = 1,
     .help = "used fraction above which eviction runs"},
    {.name = "enable_offload", .type = MC_OPT_BOOL, .target = &enable_offload,
     .def = "false",
     .help = "clients may register a disk tier (LOCAL_DISK replicas, docs/ssd-tier.md); "
             "without --offload_on_evict every object is offloaded at put_end"},
    {.name = "offload_on_evict", .type = MC_OPT_BOOL, .target = &offload_on_evict,
     .def = "false",
     .help = "offload an object to its owner's disk when eviction would drop its memory "
             "replica (needs --enable_offload)"},
    {.name = "promotion_on_hit", .type = MC_OPT_BOOL, .target = &promotion_on_hit,
     .def = "false",
     .help = "restore a memory replica of a disk-only object after "
             "--promotion_admission_threshold reads (needs --enable_offload)"},
    {.name = "promotion_admission_threshold", .type = MC_OPT_INT,
     .target = &promotion_threshold, .def = "2", .bounded = true, .min = 1, .max = 1000000,
     .help = "reads of a disk-only object that promote it"},
    {.name = "offload_task_timeout_ms", .type = MC_OPT_INT, .target = &offload_task_timeout,
     .def = "30000", .bounded = true, .min = 1, .max = 86400000, .unit = "ms",
     .help = "an offload or promotion task not reported by its client within this is "
             "given up (ours)"},
    {.name = "client_ttl", .type = MC_OPT_INT, .target = &client_ttl, .def = "10",
     .bounded = true, .min = 1, .max = 31536000, .unit = "s",
     .help = "a client silent this long is dead: its segments are unmounted"},
    {.name = "put_start_discard_timeout_sec", .type = MC_OPT_INT, .target = &discard_timeout,
     .def = "30", .bounded = true, .min = 0, .max = 31536000, .unit = "s",
     .help = "an unfinished put older than this may be replaced by a new put of the key"},
    {.name = "put_start_release_timeout_sec", .type = MC_OPT_INT, .target = &release_timeout,
     .def = "600", .bounded = true, .min = 0, .max = 31536000, .unit = "s",
     .help = "space of an unfinished put is released after this"},
    {.name = "allocation_strategy", .type = MC_OPT_STRING, .target = &allocation_strategy,
     .def = "random", .help = "replica placement: random or free_ratio_first"},
    {.name = "memory_allocator", .type = MC_OPT_STRING, .target = &memory_allocator,
     .def = "offset", .help = "per-segment allocator: offset (cachelib is accepted as offset)"},
    {.name = "enable_ha", .type = MC_OPT_BOOL, .target = &enable_ha, .def = "false",
     .help = "leader election through etcd or Redis: start as a standby, serve once elected "
             "(docs/ha.md; standbys copy the leader's index, see --ha_sync)"},
    {.name = "ha_sync", .type = MC_OPT_STRING, .target = &ha_sync, .def = "async",
     .help = "index replication to the standbys (mooncake-c flag, docs/ha.md): none (a new "
             "leader starts empty), async (standbys pull the log within milliseconds; a "
             "failover may lose the last puts), sync (a put is acknowledged once a standby "
             "fetched its record; with no standby for 2 s, at once, with a WARN)"},
    {.name = "ha_backend_type", .type = MC_OPT_STRING, .target = &ha_backend_type,
     .def = "etcd",
     .help = "HA backend: etcd or redis (k8s is refused: not implemented)"},
    {.name = "ha_backend_connstring", .type = MC_OPT_STRING, .target = &ha_backend_connstring,
     .def = "",
     .help = "where the election runs (with --enable_ha): etcd endpoints \"h:2379;h:2379\", or "
             "\"redis://[:password@]h:6379[/db]\" with --ha_backend_type=redis"},
    {.name = "etcd_endpoints", .type = MC_OPT_STRING, .target = &etcd_endpoints, .def = "",
     .help = "legacy name of --ha_backend_connstring: ';'-separated etcd endpoints"},
    {.name = "cluster_id", .type = MC_OPT_STRING, .target = &cluster_id,
     .def = "mooncake_cluster",
     .help = "cluster name, [0-9A-Za-z_.-]{1,128}: the leader key is "
             "mooncake-store/<cluster_id>/master_view (with --enable_ha); --root_fs_dir "
             "files go to <root_fs_dir>/<cluster_id>"},
    {.name = "ha_lease_ttl_sec", .type = MC_OPT_INT, .target = &ha_lease_ttl, .def = "5",
     .bounded = true, .min = 2, .max = 3600, .unit = "s",
     .help = "etcd lease of the leader (mooncake-c flag): a standby takes over about this "
             "long after the leader dies; the leader stops serving max(TTL/4, 250 ms) "
             "before its lease can lapse"},
    {.name = "v", .type = MC_OPT_INT, .target = &verbosity, .def = "0", .bounded = true,
     .min = 0, .max = 9, .help = "verbose logging (glog -v): 1 = DEBUG, 2+ = TRACE"},
    {.name = "config_path", .type = MC_OPT_STRING, .target = &config_path, .def = "",
     .help = "JSON file of flag -> value (command-line flags override it)"},
    {.name = "log_dir", .type = MC_OPT_STRING, .target = &log_dir, .def = "",
     .help = "glog's: write the log to <log_dir>/mooncake_master.<pid>.log (the directory "
             "must exist); stderr then gets only --stderrthreshold and above. Without it "
             "the log goes to stderr (glog would write files in /tmp)"},
    {.name = "logtostderr", .type = MC_OPT_BOOL, .target = &logtostderr, .def = "false",
     .help = "glog's: log to stderr only, no file even with --log_dir"},
    {.name = "alsologtostderr", .type = MC_OPT_BOOL, .target = &alsologtostderr,
     .def = "false", .help = "glog's: with --log_dir, every message to stderr as well"},
    {.name = "minloglevel", .type = MC_OPT_INT, .target = &minloglevel, .def = "0",
     .bounded = true, .min = 0, .max = 3,
     .help = "glog's: drop messages below 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL (mooncake-c "
             "logs no FATAL: 3 logs nothing); raises the level -v or MC_LOG_LEVEL set"},
    {.name = "stderrthreshold", .type = MC_OPT_INT, .target = &stderrthreshold, .def = "2",
     .bounded = true, .min = 0, .max = 3,
     .help = "glog's: with --log_dir, messages of this severity and above (0 INFO, 1 "
             "WARNING, 2 ERROR, 3 FATAL: none) also go to stderr"},
    {.name = "root_fs_dir", .type = MC_OPT_STRING, .target = &root_fs_dir, .def = "",
     .help = "shared directory for DISK replicas: every new object is also written to "
             "<root_fs_dir>/<cluster_id> by a client (docs/ssd-tier.md; all clients mount it)"},
    /* ---- accepted at upstream's default only (docs/flags.md) ---- */
    OD_DOUBLE("nof_eviction_ratio", 0, "0.05", WHY_NOF),
    OD_DOUBLE("nof_eviction_high_watermark_ratio", 1, "0.90", WHY_NOF),
    OD_SIZE("global_file_segment_size", 0, "9223372036854775807",
            "mooncake-c does not implement a size limit on the shared-FS DISK tier "
            "(--root_fs_dir): the file system bounds it"),
    OD_BOOL("enable_disk_eviction", 0, "true",
            "mooncake-c does not implement switching the disk tier's eviction: the master "
            "never evicts disk replicas, each owner's disk store bounds its files "
            "(docs/ssd-tier.md)"),
    OD_SIZE("quota_bytes", 1, "0",
            "mooncake-c does not implement a disk-tier quota on the master: each owner's "
            "disk store bounds its files (docs/ssd-tier.md)"),
    OD_BOOL("offload_force_evict", 1, "false",
            "mooncake-c does not implement forced eviction of offloaded objects (the disk "
            "tier drops memory only by the eviction rule, docs/ssd-tier.md)"),
    OD_INT("offloading_queue_limit", 0, "50000", WHY_TIERQ),
    OD_DOUBLE("offload_cap_ratio", 2, "0.5", WHY_TIERQ),
    OD_INT("promotion_queue_limit", 1, "50000", WHY_TIERQ),
    OD_INT("promotion_max_per_heartbeat", 2, "1", WHY_TIERQ),
    OD_STR("dynamic_replication_mode", 0, "off",
           "mooncake-c does not implement dynamic replication (observe, enforce): an object "
           "has the replicas its put asked for"),
    OD_BOOL("enable_kv_events", 2, "false", WHY_KV),
    OD_STR("kv_events_bind_endpoint", 1, "", WHY_KV),
    {.name = "enable_oplog", .type = MC_OPT_BOOL, .target = &enable_oplog, .def = "false",
     .help = "the mutation log of every metadata change between snapshots; always on with "
             "--enable_snapshot (alone: refused, the log lives in the snapshot directory)"},
    OD_INT("oplog_poll_interval_ms", 3, "1000", WHY_OPLOG),
    OD_INT("oplog_batch_max_entries", 4, "1024", WHY_OPLOG),
    OD_INT("batch_oplog_retry_timeout_sec", 5, "180", WHY_OPLOG),
    {.name = "enable_snapshot", .type = MC_OPT_BOOL, .target = &enable_snapshot,
     .def = "false",
     .help = "write periodic snapshots of the index and segments plus a log of every "
             "mutation between them into --snapshot_backup_dir (docs/ha.md)"},
    {.name = "enable_snapshot_restore", .type = MC_OPT_BOOL, .target = &enable_snapshot_restore,
     .def = "false",
     .help = "at start, load the newest snapshot and replay the log after it (needs "
             "--enable_snapshot); without it the directory's files are deleted"},
    {.name = "snapshot_interval_seconds", .type = MC_OPT_INT, .target = &snapshot_interval,
     .def = "600", .bounded = true, .min = 1, .max = 31536000, .unit = "s",
     .help = "period of the snapshots (the log covers the time between them)"},
    {.name = "oplog_sync", .type = MC_OPT_STRING, .target = &oplog_sync, .def = "write",
     .help = "when a put_end is acknowledged: fsync (its log record's group was written and "
             "fdatasync'ed), write (written to the kernel: survives kill -9, not a power "
             "loss) or none (at once; the record is written within 2 ms)"},
    OD_INT("snapshot_child_timeout_seconds", 6, "300",
           "mooncake-c does not implement forked snapshot children: a thread of the master "
           "writes each snapshot, there is no child to time out"),
    {.name = "snapshot_retention_count", .type = MC_OPT_INT, .target = &snapshot_retention,
     .def = "2", .bounded = true, .min = 1, .max = 1000,
     .help = "snapshots kept (older ones and the log they cover are deleted)"},
    {.name = "snapshot_object_store_type", .type = MC_OPT_STRING, .target = &snapshot_store,
     .def = "local", .help = "where snapshots go: local (s3 is refused)"},
    {.name = "snapshot_catalog_store_type", .type = MC_OPT_STRING, .target = &snapshot_catalog,
     .def = "embedded", .help = "snapshot catalog: embedded (redis is refused)"},
    {.name = "snapshot_backup_dir", .type = MC_OPT_STRING, .target = &snapshot_dir, .def = "",
     .help = "directory of the snapshots and the mutation log (default: "
             "MOONCAKE_SNAPSHOT_LOCAL_PATH, upstream's local snapshot path)"},
    OD_BOOL("enable_multi_tenants", 3, "false", WHY_TENANT),
    OD_STR("tenant_quota_connector_type", 2, "file", WHY_TENANT),
    OD_STR("tenant_quota_connector_uri", 3, "", WHY_TENANT),
    {.name = "max_total_finished_tasks", .type = MC_OPT_INT, .target = &max_finished_tasks,
     .def = "10000", .bounded = true, .min = 1, .max = 10000000,
     .help = "finished copy / move tasks kept for query_task (the oldest is forgotten)"},
    {.name = "max_total_pending_tasks", .type = MC_OPT_INT, .target = &max_pending_tasks,
     .def = "10000", .bounded = true, .min = 1, .max = 10000000,
     .help = "unfinished copy / move tasks at most (more: TASK_PENDING_LIMIT_EXCEEDED)"},
    {.name = "max_total_processing_tasks", .type = MC_OPT_INT,
     .target = &max_processing_tasks, .def = "10000", .bounded = true, .min = 1,
     .max = 10000000, .help = "copy / move tasks being executed at once at most"},
    {.name = "pending_task_timeout_sec", .type = MC_OPT_INT, .target = &pending_task_timeout,
     .def = "300", .bounded = true, .min = 1, .max = 31536000, .unit = "s",
     .help = "a copy / move task not fetched by its executor within this fails"},
    {.name = "processing_task_timeout_sec", .type = MC_OPT_INT,
     .target = &processing_task_timeout, .def = "300", .bounded = true, .min = 1,
     .max = 31536000, .unit = "s",
     .help = "a copy / move task fetched and not completed within this fails"},
    OD_INT("max_retry_attempts", 7, "10",
           "mooncake-c does not retry failed copy / move tasks (a failed task ends "
           "FAILED with its message; create a new one)"),
    OD_BOOL("enable_cxl", 4, "false", WHY_CXL),
    OD_STR("cxl_path", 4, "/dev/dax0.0", WHY_CXL),
    OD_SIZE("cxl_size", 2, "8gb", WHY_CXL),
    OD_STR("pod_name", 5, "", WHY_POD),
    OD_STR("pod_namespace", 6, "", WHY_POD),
    OD_BOOL("enable_gc", 5, "false",
            "mooncake-c does not implement the v0.3 masters' GC (gone upstream too): "
            "objects are freed by remove, lease expiry and eviction"),
};
#define N_OPTIONS (sizeof options / sizeof options[0])

/* --rpc_interface: the interface's first IPv4 address replaces --rpc_address (upstream:
 * the NIC's address overrides rpc_address). Returns 0, or 2 after printing why. */
static int apply_rpc_interface(const char *prog)
{
    if (!*rpc_interface)
        return 0;
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0) {
        fprintf(stderr, "%s: --rpc_interface=%s: cannot list the interfaces: %s\n", prog,
                rpc_interface, strerror(errno));
        return 2;
    }
    char addr[INET_ADDRSTRLEN] = "";
    bool exists = false;
    char names[512] = "";
    for (struct ifaddrs *i = all; i; i = i->ifa_next) {
        if (!i->ifa_name)
            continue;
        if (strcmp(i->ifa_name, rpc_interface) == 0) {
            exists = true;
            if (!*addr && i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, addr,
                          sizeof addr);
        }
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            strlen(names) + strlen(i->ifa_name) + 3 < sizeof names) {
            if (*names)
                strcat(names, ", ");
            strcat(names, i->ifa_name);
        }
    }
    freeifaddrs(all);
    if (!*addr) {
        fprintf(stderr, "%s: --rpc_interface=%s: %s; interfaces with one: %s (or give "
                "--rpc_address instead)\n", prog, rpc_interface,
                exists ? "the interface has no IPv4 address" : "no such network interface",
                *names ? names : "none");
        return 2;
    }
    free(rpc_address); /* owned by the options table, freed by mc_options_free */
    rpc_address = mc_xstrdup(addr);
    return 0;
}

/* glog's flags -> mc_log (see their help). Returns 0, or 2 after printing why. */
static FILE *log_file;

static int apply_log_flags(const char *prog)
{
    static const mc_log_level glog[4] = {MC_LOG_INFO, MC_LOG_WARN, MC_LOG_ERROR, MC_LOG_OFF};
    if (minloglevel > 0 && glog[minloglevel] > mc_log_get_level())
        mc_log_set_level(glog[minloglevel]);
    if (!*log_dir || logtostderr)
        return 0; /* everything to stderr (glog's logtostderr) */
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/mooncake_master.%ld.log", log_dir,
                     (long)getpid());
    if (n < 0 || (size_t)n >= sizeof path) {
        fprintf(stderr, "%s: --log_dir=%s is too long\n", prog, log_dir);
        return 2;
    }
    log_file = fopen(path, "a");
    if (!log_file) {
        fprintf(stderr, "%s: --log_dir=%s: cannot open %s: %s (the directory must exist "
                "and be writable)\n", prog, log_dir, path, strerror(errno));
        return 2;
    }
    setvbuf(log_file, NULL, _IOLBF, 0); /* each line reaches the file as it is logged */
    mc_log_set_file(log_file, alsologtostderr ? MC_LOG_TRACE : glog[stderrthreshold]);
    fprintf(stderr, "%s: logging to %s\n", prog, path);
    return 0;
}

/* The snapshot flags -> opts (dir borrowed from the flags or the environment). Returns 0,
 * or 2 after printing what is wrong. */
static int persist_flags(const char *prog, mc_master_persist_opts *o)
{
    memset(o, 0, sizeof(*o));
    /* checked whether or not the log is on: a bad value is a typo either way */
    if (!strcmp(oplog_sync, "fsync"))
        o->sync = MC_MASTER_LOG_SYNC_FSYNC;
    else if (!strcmp(oplog_sync, "write"))
        o->sync = MC_MASTER_LOG_SYNC_WRITE;
    else if (!strcmp(oplog_sync, "none"))
        o->sync = MC_MASTER_LOG_SYNC_NONE;
    else {
        fprintf(stderr, "%s: invalid value '%s' for --oplog_sync: fsync, write or none\n", prog,
                oplog_sync);
        return 2;
    }
    /* a value mooncake-c cannot honour is refused with the feature off too */
    if (strcmp(snapshot_store, "local") != 0) {
        fprintf(stderr, "%s: --snapshot_object_store_type=%s: mooncake-c writes snapshots to a "
                        "local directory only (local)\n", prog, snapshot_store);
        return 2;
    }
    if (strcmp(snapshot_catalog, "embedded") != 0) {
        fprintf(stderr, "%s: --snapshot_catalog_store_type=%s: mooncake-c keeps the catalog "
                        "in the snapshot directory only (embedded)\n", prog, snapshot_catalog);
        return 2;
    }
    if (!enable_snapshot) {
        if (enable_snapshot_restore || enable_oplog) {
            fprintf(stderr,
                    "%s: --%s needs --enable_snapshot (the snapshots and the mutation log "
                    "live in its directory, --snapshot_backup_dir)\n",
                    prog, enable_snapshot_restore ? "enable_snapshot_restore" : "enable_oplog");
            return 2;
        }
        return 0;
    }
    const char *dir = *snapshot_dir ? snapshot_dir : getenv("MOONCAKE_SNAPSHOT_LOCAL_PATH");
    if (!dir || !*dir) {
        fprintf(stderr, "%s: --enable_snapshot needs a directory: --snapshot_backup_dir=DIR or "
                        "MOONCAKE_SNAPSHOT_LOCAL_PATH\n", prog);
        return 2;
    }
    o->dir = dir;
    o->restore = enable_snapshot_restore;
    o->interval_s = (uint64_t)snapshot_interval;
    o->retention = (uint32_t)snapshot_retention;
    return 1; /* on */
}

/* Upstream ParseDurationMs: raw milliseconds, or a number with ms/s/m/h. */
static int parse_duration_ms(const char *text, uint64_t *out)
{
    if (!text || !*text)
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || v < 0)
        return -EINVAL;
    double mult = 1;
    if (*end == '\0' || strcmp(end, "ms") == 0)
        mult = 1;
    else if (strcmp(end, "s") == 0)
        mult = 1000;
    else if (strcmp(end, "m") == 0)
        mult = 60000;
    else if (strcmp(end, "h") == 0)
        mult = 3600000;
    else
        return -EINVAL;
    double ms = v * mult;
    if (ms > 1e15)
        return -ERANGE;
    *out = (uint64_t)ms;
    return 0;
}

static int duration_flag(const char *prog, const char *name, const char *text, uint64_t *out)
{
    if (parse_duration_ms(text, out) != 0) {
        fprintf(stderr, "%s: invalid value '%s' for --%s: expected milliseconds or a "
                        "duration like 500ms, 10s, 1m, 1h\n",
                prog, text, name);
        return -1;
    }
    return 0;
}

/* --enable_metadata_cleanup_on_timeout: the service's on_client_expired hook. The server
 * is published once it listens; the hook runs on the tick thread, which stops (with the
 * RPC server) before the metadata server is destroyed. */
static _Atomic(mc_http_metadata_server *) cleanup_md;

static void remove_md_key(mc_http_metadata_server *md, char *key, mc_master_uuid client)
{
    if (!key)
        return;
    int rc = mc_http_metadata_server_remove(md, key);
    mc_log(MC_LOG_INFO, TAG, "client %016llx%016llx expired: metadata key %s %s",
           (unsigned long long)client.first, (unsigned long long)client.second, key,
           rc == MC_OK ? "deleted" : "was absent");
    free(key);
}

static void on_client_expired(void *ctx, mc_master_uuid client, const char *const *names,
                              size_t n)
{
    (void)ctx;
    mc_http_metadata_server *md = atomic_load(&cleanup_md);
    if (!md)
        return;
    for (size_t i = 0; i < n; i++) {
        remove_md_key(md, mc_metadata_segment_key(NULL, names[i]), client);
        remove_md_key(md, mc_metadata_rpc_meta_key(NULL, names[i]), client);
    }
}

/* HA: the HA thread reports that we lost the leadership; main exits with code 3. */
static atomic_bool deposed;

static void on_deposed(void *ctx)
{
    (void)ctx;
    atomic_store(&deposed, true);
    kill(getpid(), SIGTERM); /* wakes main's sigtimedwait (blocked everywhere else) */
}

/* --enable_ha checks: backend etcd, endpoints given, a cluster id upstream accepts, an
 * --rpc_address clients can reach. Returns 0 or 2 after printing why. */
static char ha_conn_buf[4096];

static int ha_flags(const char *prog, const char **conn)
{
    bool redis = strcmp(ha_backend_type, "redis") == 0;
    *conn = *ha_backend_connstring ? ha_backend_connstring : redis ? "" : etcd_endpoints;
    if (!**conn) {
        fprintf(stderr, "%s: --enable_ha needs the %s: --ha_backend_connstring=%s\n", prog,
                redis ? "Redis server" : "etcd endpoints",
                redis ? "redis://h:6379" : "h:2379[;h:2379] (or --etcd_endpoints)");
        return 2;
    }
    bool has_redis = strncmp(*conn, "redis://", 8) == 0;
    if (redis && !has_redis && !strstr(*conn, "://")) {
        snprintf(ha_conn_buf, sizeof ha_conn_buf, "redis://%s", *conn); /* bare h:p */
        *conn = ha_conn_buf;
        has_redis = true;
    }
    if (redis != has_redis) {
        fprintf(stderr, "%s: --ha_backend_type=%s does not match --ha_backend_connstring=%s\n",
                prog, ha_backend_type, *conn);
        return 2;
    }
    if (!mc_election_cluster_id_ok(cluster_id)) {
        fprintf(stderr, "%s: --cluster_id='%s' must be 1..128 of [0-9A-Za-z_.-], not . or "
                "..\n", prog, cluster_id);
        return 2;
    }
    /* never empty: --rpc_address is nonempty, --rpc_interface gives an address */
    if (strcmp(rpc_address, "0.0.0.0") == 0 || strcmp(rpc_address, "::") == 0) {
        fprintf(stderr,
                "%s: --enable_ha publishes --rpc_address for clients to reach the leader: "
                "give this host's routable address (not %s)\n",
                prog, rpc_address);
        return 2;
    }
    return 0;
}

static char *md_metrics(void *ctx, size_t *len)
{
    return mc_http_metadata_server_metrics_text(ctx, len);
}

static void print_summary(mc_master_service *svc, mc_master_stats *prev, uint64_t *prev_ms)
{
    mc_master_stats cur;
    memset(&cur, 0, sizeof cur);
    mc_master_service_get_stats(svc, &cur);
    uint64_t now = mc_now_ms();
    double secs = (double)(now - *prev_ms) / 1000.0;
    char line[4096];
    mc_master_format_summary(prev, &cur, secs, line, sizeof line);
    mc_log(MC_LOG_INFO, TAG, "%s", line);
    *prev = cur;
    *prev_ms = now;
}

int main(int argc, char **argv)
{
    const char *prog = "mooncake_master";
    mc_log_init_from_env();
    mc_options_main(options, N_OPTIONS, &argc, argv,
                    "mooncake_master: the metadata service of the Mooncake memory pool "
                    "(segments, object index, leases, eviction, client liveness).");
    int exit_code = 1;
    mc_master_service *svc = NULL;
    mc_master_rpc_server *rpc = NULL;
    mc_master_persist *persist = NULL;
    mc_master_persist_opts popts;
    mc_master_admin *admin = NULL;
    mc_http_metadata_server *md = NULL;
    mc_master_ha *ha = NULL;
    const char *ha_conn = NULL;

    if (argc > 1) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[1]);
        exit_code = 2;
        goto out;
    }
    if (verbosity >= 2)
        mc_log_set_level(MC_LOG_TRACE);
    else if (verbosity == 1)
        mc_log_set_level(MC_LOG_DEBUG);
    if (apply_log_flags(prog) != 0 || apply_rpc_interface(prog) != 0) {
        exit_code = 2;
        goto out;
    }
    /* the environment's polling budget (common/spin.h): the master polls where it waits
     * for a reply (a standby's log fetch), so a bad value is refused here, as a store's
     * setup refuses it, not only logged at the first such wait */
    if (mc_spin_env_check() < 0) {
        fprintf(stderr, "%s: MC_BUSY_POLL_US: expected microseconds in 0..%u (see the "
                        "line above)\n", prog, MC_SPIN_MAX_US);
        exit_code = 2;
        goto out;
    }
    if (rpc_thread_num == 0 && max_threads != 16)
        rpc_thread_num = max_threads; /* upstream: rpc_thread_num 0 -> max_threads */
    /* a backend mooncake-c cannot run is refused with --enable_ha off too */
    if (strcmp(ha_backend_type, "redis") != 0 && strcmp(ha_backend_type, "etcd") != 0) {
        fprintf(stderr,
                "%s: --ha_backend_type=%s: mooncake-c elects on etcd or redis only%s\n", prog,
                ha_backend_type,
                strcmp(ha_backend_type, "k8s") == 0 ? " (k8s leases are not implemented)" : "");
        exit_code = 2;
        goto out;
    }
    if (enable_ha && ha_flags(prog, &ha_conn) != 0) {
        exit_code = 2;
        goto out;
    }
    if (mc_tool_refuse_non_defaults(prog, options, N_OPTIONS) != 0) {
        exit_code = 2;
        goto out;
    }
    int persist_on = persist_flags(prog, &popts);
    if (persist_on == 2) {
        exit_code = 2;
        goto out;
    }
    if (persist_on && enable_offload) {
        /* the log records memory replicas only: a restore would forget the disk tier's */
        fprintf(stderr, "%s: --enable_snapshot together with --enable_offload is not "
                "implemented in mooncake-c yet (the mutation log does not record LOCAL_DISK "
                "replicas): use one of them (docs/ha.md, docs/ssd-tier.md)\n", prog);
        exit_code = 2;
        goto out;
    }
    if (persist_on && enable_ha) {
        /* a standby would restore a snapshot its leader keeps writing, and a promoted one
         * would need the leader's log (docs/ha.md: the log is the replication stream to
         * come, not wired to the election yet) */
        fprintf(stderr, "%s: --enable_snapshot together with --enable_ha is not implemented "
                "in mooncake-c yet: use one of them (docs/ha.md)\n", prog);
        exit_code = 2;
        goto out;
    }
    {
        char err[512];
        if (mc_auth_load(auth_token_file, &secret, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            exit_code = 2;
            goto out;
        }
    }
    mc_master_ha_sync ha_sync_mode = MC_MASTER_HA_SYNC_ASYNC;
    if (!strcmp(ha_sync, "none"))
        ha_sync_mode = MC_MASTER_HA_SYNC_NONE;
    else if (!strcmp(ha_sync, "sync"))
        ha_sync_mode = MC_MASTER_HA_SYNC_SYNC;
    else if (strcmp(ha_sync, "async") != 0) {
        fprintf(stderr, "%s: invalid value '%s' for --ha_sync: none, async or sync\n", prog,
                ha_sync);
        exit_code = 2;
        goto out;
    }
    if (!enable_ha && ha_sync_mode == MC_MASTER_HA_SYNC_SYNC) {
        fprintf(stderr, "%s: --ha_sync=sync acknowledges puts once a standby has them: it "
                "needs --enable_ha (a master without HA has no standby)\n", prog);
        exit_code = 2;
        goto out;
    }
    if (enable_ha && ha_sync_mode == MC_MASTER_HA_SYNC_SYNC) {
        /* a put_end waiting for the standby holds its RPC loop thread: the standby's
         * fetch (its acknowledgement) must find another loop */
        if (rpc_thread_num == 1) {
            fprintf(stderr, "%s: --ha_sync=sync needs --rpc_thread_num >= 2 (a put waiting "
                    "for the standby holds its RPC thread; the standby's fetch needs "
                    "another)\n", prog);
            exit_code = 2;
            goto out;
        }
        if (rpc_thread_num == 0) {
            long cores = sysconf(_SC_NPROCESSORS_ONLN);
            rpc_thread_num = cores >= 4 ? 4 : 2;
        }
    }
    if (enable_ha && ha_sync_mode != MC_MASTER_HA_SYNC_NONE &&
        (enable_offload || (root_fs_dir && *root_fs_dir))) {
        /* the log records memory replicas only */
        fprintf(stderr, "%s: --ha_sync=%s (index replication) together with %s is not "
                "implemented in mooncake-c yet: add --ha_sync=none (a new leader then starts "
                "empty) or drop it (docs/ha.md)\n", prog, ha_sync,
                enable_offload ? "--enable_offload" : "--root_fs_dir");
        exit_code = 2;
        goto out;
    }

    mc_master_config cfg;
    mc_master_config_init(&cfg);
    if (duration_flag(prog, "default_kv_lease_ttl", lease_ttl, &cfg.default_kv_lease_ttl) ||
        duration_flag(prog, "default_kv_soft_pin_ttl", soft_pin_ttl,
                      &cfg.default_kv_soft_pin_ttl) ||
        duration_flag(prog, "max_kv_soft_pin_ttl", max_soft_pin_ttl,
                      &cfg.max_kv_soft_pin_ttl)) {
        exit_code = 2;
        goto out;
    }
    int strategy = mc_master_strategy_parse(allocation_strategy);
    if (strategy < 0) {
        fprintf(stderr,
                "%s: invalid value '%s' for --allocation_strategy: mooncake-c implements "
                "random and free_ratio_first\n",
                prog, allocation_strategy);
        exit_code = 2;
        goto out;
    }
    if (strcmp(memory_allocator, "offset") != 0) {
        if (strcmp(memory_allocator, "cachelib") != 0) {
            fprintf(stderr, "%s: invalid value '%s' for --memory_allocator: offset or cachelib\n",
                    prog, memory_allocator);
            exit_code = 2;
            goto out;
        }
        mc_log(MC_LOG_WARN, TAG, "--memory_allocator=cachelib: using the offset allocator");
    }
    cfg.allow_evict_soft_pinned_objects = allow_evict_soft;
    cfg.eviction_ratio = eviction_ratio;
    cfg.eviction_high_watermark_ratio = eviction_hwm;
    cfg.client_ttl = (uint64_t)client_ttl;
    /* The master's own stalls (issue 10, fault 4): a tick that comes later than its
     * period plus a margin means this process did not run; the clients then get a grace
     * of one client_ttl. The margin: a stall shorter than half the TTL cannot expire a
     * client that heartbeats at least twice per TTL, and one second keeps scheduling
     * noise on a busy machine from counting. */
    uint64_t ttl_ms = (uint64_t)client_ttl * 1000;
    cfg.stall_threshold_ms = TICK_MS + (ttl_ms / 2 > 1000 ? ttl_ms / 2 : 1000);
    cfg.put_start_discard_timeout_sec = (uint64_t)discard_timeout;
    cfg.put_start_release_timeout_sec = (uint64_t)release_timeout;
    cfg.allocation_strategy = (mc_master_strategy)strategy;
    if ((offload_on_evict || promotion_on_hit) && !enable_offload) {
        fprintf(stderr, "%s: --%s needs --enable_offload (the disk tier)\n", prog,
                offload_on_evict ? "offload_on_evict" : "promotion_on_hit");
        exit_code = 2;
        goto out;
    }
    char fs_dir[MC_MASTER_NAME_MAX];
    if (root_fs_dir && *root_fs_dir) { /* --root_fs_dir: shared-FS DISK replicas */
        const char *root = root_fs_dir;
        size_t rl = strlen(root);
        while (rl > 1 && root[rl - 1] == '/')
            rl--;
        if (!mc_election_cluster_id_ok(cluster_id)) { /* a path component here */
            fprintf(stderr, "%s: with --root_fs_dir, --cluster_id='%s' must be 1..128 of "
                    "[0-9A-Za-z_.-], not . or .. (the directory <root_fs_dir>/<cluster_id>)\n",
                    prog, cluster_id);
            exit_code = 2;
            goto out;
        }
        if (root[0] != '/' || rl + 1 + strlen(cluster_id) >= 200) {
            fprintf(stderr, "%s: --root_fs_dir=%s must be an absolute path, shorter than "
                    "200 bytes with /<cluster_id>\n", prog, root);
            exit_code = 2;
            goto out;
        }
        if (enable_offload) {
            fprintf(stderr, "%s: --root_fs_dir together with --enable_offload is not "
                    "implemented in mooncake-c (one disk tier at a time: shared-FS DISK "
                    "replicas or client-owned LOCAL_DISK ones, docs/ssd-tier.md)\n", prog);
            exit_code = 2;
            goto out;
        }
        if (persist_on) {
            fprintf(stderr, "%s: --root_fs_dir together with --enable_snapshot is not "
                    "implemented in mooncake-c yet (the mutation log does not record DISK "
                    "replicas)\n", prog);
            exit_code = 2;
            goto out;
        }
        snprintf(fs_dir, sizeof fs_dir, "%.*s/%s", (int)rl, root, cluster_id);
        cfg.fs_dir = fs_dir;
        fprintf(stderr, "%s: shared-FS DISK replicas in %s (every client mounts it)\n", prog,
                fs_dir);
    }
    cfg.enable_offload = enable_offload;
    cfg.offload_on_evict = offload_on_evict;
    cfg.promotion_on_hit = promotion_on_hit;
    cfg.promotion_admission_threshold = (uint32_t)promotion_threshold;
    cfg.offload_task_timeout_ms = (uint64_t)offload_task_timeout;
    cfg.max_total_finished_tasks = (uint32_t)max_finished_tasks;
    cfg.max_total_pending_tasks = (uint32_t)max_pending_tasks;
    cfg.max_total_processing_tasks = (uint32_t)max_processing_tasks;
    cfg.pending_task_timeout_ms = (uint64_t)pending_task_timeout * 1000;
    cfg.processing_task_timeout_ms = (uint64_t)processing_task_timeout * 1000;
    cfg.check_segments = true; /* base 0, overlaps, foreign names (docs/security.md) */
    if (enable_md_cleanup && !enable_http_md)
        mc_log(MC_LOG_WARN, TAG,
               "--enable_metadata_cleanup_on_timeout cleans the embedded metadata server "
               "only: without --enable_http_metadata_server it has no effect");
    if (enable_md_cleanup && enable_http_md)
        cfg.on_client_expired = on_client_expired;

    /* Block the stop signals before any thread starts: every thread inherits the mask and
     * only the sigtimedwait below receives them. */
    sigset_t stop;
    mc_tool_block_stop_signals(&stop);

    int rc = mc_master_service_create(&cfg, &svc);
    if (rc != MC_OK) {
        fprintf(stderr, "%s: invalid configuration: %s\n", prog, mc_strerror(rc));
        exit_code = 2;
        goto out;
    }
    if (enable_ha) /* a standby until elected: the gate is shut before the port opens */
        mc_master_service_ha_enable(svc);
    if (persist_on) {
        char err[512];
        mc_master_restore_info ri;
        rc = mc_master_persist_start(svc, &popts, &persist, &ri, err, sizeof err);
        if (rc != MC_OK) {
            fprintf(stderr, "%s: --enable_snapshot: %s\n", prog, err);
            goto out;
        }
        if (popts.restore)
            printf("mooncake_master: restored from %s: snapshot lsn %llu, %llu log records, "
                   "%llu segments, %llu objects, %llu dropped, %llu unfinished writes "
                   "quarantined, %llu torn bytes cut\n",
                   popts.dir, (unsigned long long)ri.snapshot_lsn,
                   (unsigned long long)ri.records, (unsigned long long)ri.segments,
                   (unsigned long long)ri.objects, (unsigned long long)ri.dropped,
                   (unsigned long long)ri.quarantined, (unsigned long long)ri.truncated_bytes);
        printf("mooncake_master: snapshots every %llds into %s (keeping %lld), mutation log "
               "sync %s\n",
               (long long)snapshot_interval, popts.dir, (long long)snapshot_retention,
               oplog_sync);
    }
    mc_master_rpc_server_opts ro = {.host = rpc_address,
                                    .port = (uint16_t)rpc_port,
                                    .threads = (unsigned)rpc_thread_num,
                                    .tick_ms = TICK_MS,
                                    .auth = &secret,
                                    .handshake_timeout_ms = (unsigned)rpc_auth_timeout_ms,
                                    .max_connections = (unsigned)rpc_max_conns,
                                    .max_connections_per_ip = (unsigned)rpc_max_conns_ip,
                                    .max_body = (uint32_t)rpc_max_request,
                                    .max_pending_request_bytes = rpc_max_pending,
                                    .max_unread_reply_bytes = rpc_max_unread,
                                    .idle_timeout_ms = (unsigned)rpc_conn_timeout * 1000u,
                                    .busy_poll_us = (unsigned)rpc_busy_poll_us,
                                    .no_tcp_nodelay = !rpc_tcp_nodelay};
    rc = mc_master_rpc_server_start(svc, &ro, &rpc);
    if (rc != 0) {
        exit_code = mc_tool_listen_failed(prog, "rpc_address", rpc_address, "rpc_port",
                                  (long long)rpc_port, rc);
        goto out;
    }
    if (!mc_auth_enabled(&secret)) {
        char where[320];
        snprintf(where, sizeof where, "%s:%u", rpc_address,
                 (unsigned)mc_master_rpc_server_port(rpc));
        mc_auth_warn_open(TAG, "master RPC", where,
                          "mount and unmount segments, read, write and remove objects, and "
                          "call remove_all");
    }
    if (enable_http_md) {
        mc_http_metadata_server_opts mo = {
            .max_total_bytes = md_max_total,
            .max_keys = (uint64_t)md_max_keys,
            .max_connections = (unsigned)md_max_conns,
            .max_connections_per_ip = (unsigned)md_max_conns_ip,
            .header_timeout_ms = (unsigned)http_header_timeout_ms,
            .request_timeout_ms = (unsigned)http_request_timeout_ms,
            .max_pending_body_bytes = md_max_pending,
            .auth = &secret};
        rc = mc_http_metadata_server_start(http_md_host, (uint16_t)http_md_port, &mo, &md);
        if (rc != 0) {
            exit_code = mc_tool_listen_failed(prog, "http_metadata_server_host", http_md_host,
                                      "http_metadata_server_port", (long long)http_md_port, rc);
            goto out;
        }
        if (enable_md_cleanup)
            atomic_store(&cleanup_md, md);
    }
    mc_master_admin_opts ao = {.auth = &secret,
                               .extra_metrics = md ? md_metrics : NULL,
                               .extra_ctx = md,
                               .max_connections = (unsigned)admin_max_conns,
                               .max_connections_per_ip = (unsigned)admin_max_conns_ip,
                               .header_timeout_ms = (unsigned)http_header_timeout_ms,
                               .request_timeout_ms = (unsigned)http_request_timeout_ms};
    rc = mc_master_admin_start_opts(svc, rpc, metrics_host, (uint16_t)metrics_port, &ao,
                                    &admin);
    if (rc != 0) {
        exit_code = mc_tool_listen_failed(prog, "metrics_host", metrics_host, "metrics_port",
                                  (long long)metrics_port, rc);
        goto out;
    }
    if (enable_ha) {
        char self[MC_ELECTION_ADDR_MAX];
        bool v6 = strchr(rpc_address, ':') != NULL;
        snprintf(self, sizeof self, "%s%s%s:%u", v6 ? "[" : "", rpc_address, v6 ? "]" : "",
                 (unsigned)mc_master_rpc_server_port(rpc));
        mc_master_ha_opts ho = {.conn = ha_conn,
                                .cluster_id = cluster_id,
                                .self = self,
                                .ttl_s = (uint32_t)ha_lease_ttl,
                                .sync = ha_sync_mode,
                                .auth = &secret,
                                .on_deposed = on_deposed};
        rc = mc_master_ha_start(svc, &ho, &ha);
        if (rc != MC_OK) {
            fprintf(stderr, "%s: cannot start the HA election on %s: %s\n", prog,
                    ha_backend_type, mc_strerror(rc));
            exit_code = rc == MC_INVALID_PARAMS || rc == MC_NOT_SUPPORTED ? 2 : 1;
            goto out;
        }
        static mc_metadata_conn shown; /* the canonical form: never a password */
        if (mc_metadata_parse_conn(ha_conn, &shown, NULL, 0) != MC_OK)
            snprintf(shown.url, sizeof shown.url, "%s", ha_backend_type);
        printf("mooncake_master: HA standby of cluster %s, campaigning on %s as %s "
               "(lease %llds)\n",
               cluster_id, shown.url, self, (long long)ha_lease_ttl);
    }
    printf("mooncake_master: RPC listening on %s:%u (%u threads)\n", rpc_address,
           (unsigned)mc_master_rpc_server_port(rpc), mc_master_rpc_server_threads(rpc));
    printf("mooncake_master: metrics on http://%s:%u/metrics (also /health, /get_all_keys, "
           "/get_all_segments, /query_key?key=)\n",
           metrics_host, (unsigned)mc_master_admin_port(admin));
    if (md)
        printf("mooncake_master: HTTP metadata server on http://%s:%u/metadata\n", http_md_host,
               (unsigned)mc_http_metadata_server_port(md));
    printf("mooncake_master: ready (client_ttl %llds, lease %llums, eviction at %.0f%% "
           "frees %.0f%%)\n",
           (long long)client_ttl, (unsigned long long)cfg.default_kv_lease_ttl,
           eviction_hwm * 100, eviction_ratio * 100);
    fflush(stdout);

    mc_master_stats prev;
    memset(&prev, 0, sizeof prev);
    mc_master_service_get_stats(svc, &prev);
    uint64_t prev_ms = mc_now_ms();
    uint64_t interval_ms = (uint64_t)report_interval * 1000;
    int sig = 0;
    for (;;) {
        uint64_t due = prev_ms + interval_ms;
        uint64_t left = mc_ms_left(due);
        struct timespec ts = {(time_t)(left / 1000), (long)(left % 1000) * 1000000L};
        sig = sigtimedwait(&stop, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM)
            break;
        if (sig < 0 && errno != EAGAIN && errno != EINTR) {
            mc_log(MC_LOG_ERROR, TAG, "sigtimedwait: %s", strerror(errno));
            break;
        }
        if (mc_ms_left(due) == 0) {
            if (enable_metric_reporting)
                print_summary(svc, &prev, &prev_ms);
            else
                prev_ms = mc_now_ms();
        }
    }
    if (atomic_load(&deposed)) {
        /* the gate is shut for good; stay one lease so clients still connected get a
         * clear UNAVAILABLE_IN_CURRENT_STATUS rather than a reset, then exit 3 */
        struct timespec ts = {(time_t)ha_lease_ttl, 0};
        (void)sigtimedwait(&stop, NULL, &ts); /* a SIGINT/SIGTERM now ends it early */
        mc_log(MC_LOG_ERROR, TAG, "deposed leader: exiting (code 3)");
        exit_code = 3;
        goto out;
    }
    mc_log(MC_LOG_INFO, TAG, "signal %d: stopping", sig);
    exit_code = 0;
out:
    mc_master_ha_destroy(ha); /* closes the gate, then revokes the lease */
    /* admin reads the RPC server's counters; the RPC server's tick thread may call
     * on_client_expired, which uses the metadata server: stop them in this order */
    mc_master_admin_destroy(admin);
    mc_master_rpc_server_destroy(rpc);
    mc_master_ha_free(ha); /* the replication ring and log: nobody fetches any more */
    mc_master_persist_stop(persist); /* nothing mutates the service any more */
    atomic_store(&cleanup_md, NULL);
    mc_http_metadata_server_destroy(md);
    mc_master_service_destroy(svc);
    mc_options_free(options, N_OPTIONS);
    mc_auth_secret_wipe(&secret);
    if (log_file) {
        mc_log_set_file(NULL, MC_LOG_TRACE);
        fclose(log_file);
    }
    return exit_code;
}
