/* mooncake_http_metadata_server: the standalone HTTP metadata server.
 * Flags as upstream's `mooncake_http_metadata_server` CLI (mooncake-wheel/mooncake/
 * http_metadata_server.py main(): --port 8080 --host 0.0.0.0 --log-level INFO), served
 * by the same C server the master embeds (include/mooncake/metadata.h §4).
 * Trust and limits (issue 11, docs/security.md): --auth_token_file (or MC_AUTH_TOKEN_FILE)
 * names the cluster secret, after which /metadata needs signed requests; --max_keys,
 * --max_connections, --max_connections_per_ip, --header_timeout_ms, --request_timeout_ms
 * and --max_pending_body_size bound what clients can hold; /metrics counts refusals.
 * Prints one line "mooncake_http_metadata_server listening on HOST:PORT" on stdout when
 * ready, serves until SIGINT or SIGTERM, and exits 0. Exits 1 when it cannot listen (the
 * reason, e.g. "Address already in use", is printed), 2 on a bad flag. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"
#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/options.h"
#include "tool_util.h"

static int64_t port;
static char *host;
static char *log_level;
static uint64_t max_body;
static uint64_t max_total;
static int64_t threads;
static char *auth_token_file;
static int64_t max_keys, max_conns, max_conns_ip, header_timeout_ms, request_timeout_ms;
static uint64_t max_pending;
static mc_auth_secret secret; /* outlives the server */

static const mc_option options[] = {
    {.name = "port", .type = MC_OPT_INT, .target = &port, .def = "8080", .bounded = true,
     .min = 0, .max = 65535, .help = "TCP port to listen on (0: pick a free one)"},
    {.name = "host", .type = MC_OPT_STRING, .target = &host, .def = "0.0.0.0", .nonempty = true,
     .help = "address to listen on"},
    {.name = "log_level", .alias = "log-level", .type = MC_OPT_STRING, .target = &log_level,
     .def = "", .help = "TRACE, DEBUG, INFO, WARNING, ERROR (default: MC_LOG_LEVEL or INFO)"},
    {.name = "max_body_size", .type = MC_OPT_SIZE, .target = &max_body, .def = "16mb",
     .bounded = true, .min = 1, .max = 1073741824.0, .unit = "bytes",
     .help = "largest PUT body; larger ones get 413"},
    {.name = "max_total_size", .type = MC_OPT_SIZE, .target = &max_total, .def = "256mb",
     .bounded = true, .min = 1, .max = 1099511627776.0, .unit = "bytes",
     .help = "keys + values kept in memory; beyond it PUT gets 507"},
    {.name = "threads", .type = MC_OPT_INT, .target = &threads, .def = "2", .bounded = true,
     .min = 1, .max = 64, .help = "worker threads"},
    {.name = "auth_token_file", .type = MC_OPT_STRING, .target = &auth_token_file, .def = "",
     .help = "file holding the cluster secret (mode 0600, owned by this user): /metadata "
             "then needs signed requests (docs/security.md). Default: MC_AUTH_TOKEN_FILE; "
             "neither: open, with a warning"},
    {.name = "max_keys", .type = MC_OPT_INT, .target = &max_keys, .def = "100000",
     .bounded = true, .min = 1, .max = 1000000000,
     .help = "keys kept in memory; beyond it PUT of a new key gets 507"},
    {.name = "max_connections", .type = MC_OPT_INT, .target = &max_conns, .def = "1024",
     .bounded = true, .min = 1, .max = 65536, .help = "concurrent connections"},
    {.name = "max_connections_per_ip", .type = MC_OPT_INT, .target = &max_conns_ip,
     .def = "128", .bounded = true, .min = 1, .max = 65536,
     .help = "concurrent connections from one source address"},
    {.name = "header_timeout_ms", .type = MC_OPT_INT, .target = &header_timeout_ms,
     .def = "10000", .bounded = true, .min = 100, .max = 3600000, .unit = "ms",
     .help = "a request line and headers must be in within this of the connection's accept "
             "or its previous request, however the bytes trickle (slowloris)"},
    {.name = "request_timeout_ms", .type = MC_OPT_INT, .target = &request_timeout_ms,
     .def = "60000", .bounded = true, .min = 100, .max = 3600000, .unit = "ms",
     .help = "a whole request, body and response, must be done within this"},
    {.name = "max_pending_body_size", .type = MC_OPT_SIZE, .target = &max_pending,
     .def = "256mb", .bounded = true, .min = 1, .max = 1099511627776.0, .unit = "bytes",
     .help = "PUT bodies held at once over all connections; beyond: 503"},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

int main(int argc, char **argv)
{
    mc_log_init_from_env();
    mc_options_main(options, N_OPTIONS, &argc, argv,
                    "HTTP metadata server for the Mooncake transfer engine: "
                    "GET|PUT|DELETE /metadata?key=K, GET /health.");
    if (argc > 1) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[1]);
        return 2;
    }
    if (log_level && *log_level) {
        int lvl = mc_log_parse_level(log_level);
        if (lvl < 0) {
            fprintf(stderr, "%s: invalid value '%s' for --log-level\n", argv[0], log_level);
            return 2;
        }
        mc_log_set_level((mc_log_level)lvl);
    }

    /* Block the stop signals before any thread starts, so that they all inherit the mask
     * and only sigwait below receives them. */
    sigset_t stop;
    mc_tool_block_stop_signals(&stop);

    char err[512];
    if (mc_auth_load(auth_token_file, &secret, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err);
        mc_options_free(options, N_OPTIONS);
        return 2;
    }
    mc_http_metadata_server_opts o = {.max_body_bytes = max_body,
                                      .max_total_bytes = max_total,
                                      .threads = (unsigned)threads,
                                      .max_keys = (uint64_t)max_keys,
                                      .max_connections = (unsigned)max_conns,
                                      .max_connections_per_ip = (unsigned)max_conns_ip,
                                      .header_timeout_ms = (unsigned)header_timeout_ms,
                                      .request_timeout_ms = (unsigned)request_timeout_ms,
                                      .max_pending_body_bytes = max_pending,
                                      .auth = &secret};
    mc_http_metadata_server *srv = NULL;
    int rc = mc_http_metadata_server_start(host, (uint16_t)port, &o, &srv);
    if (rc != 0) {
        int code = mc_tool_listen_failed(argv[0], "host", host, "port", (long long)port, rc);
        mc_options_free(options, N_OPTIONS);
        return code;
    }
    printf("mooncake_http_metadata_server listening on %s:%u\n", host,
           (unsigned)mc_http_metadata_server_port(srv));
    fflush(stdout);

    int sig = 0;
    while (sigwait(&stop, &sig) != 0) {
    }
    mc_log(MC_LOG_INFO, "http_metadata", "signal %d: stopping", sig);
    mc_http_metadata_server_destroy(srv);
    mc_options_free(options, N_OPTIONS);
    mc_auth_secret_wipe(&secret);
    return 0;
}
