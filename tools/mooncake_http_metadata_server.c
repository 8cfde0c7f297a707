/* mooncake_http_metadata_server: the standalone HTTP metadata server.
 * Flags as upstream's `mooncake_http_metadata_server` CLI (mooncake-wheel/mooncake/
 * http_metadata_server.py main(): --port 8080 --host 0.0.0.0 --log-level INFO), served
 * by the same C server the master embeds (include/mooncake/metadata.h §4).
 * Prints one line "mooncake_http_metadata_server listening on HOST:PORT" on stdout when
 * ready, serves until SIGINT or SIGTERM, and exits 0. Exits 1 when it cannot listen (the
 * reason, e.g. "Address already in use", is printed), 2 on a bad flag. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const mc_option options[] = {
    {.name = "port", .type = MC_OPT_INT, .target = &port, .def = "8080", .bounded = true,
     .min = 0, .max = 65535, .help = "TCP port to listen on (0: pick a free one)"},
    {.name = "host", .type = MC_OPT_STRING, .target = &host, .def = "0.0.0.0",
     .help = "address to listen on"},
    {.name = "log_level", .alias = "log-level", .type = MC_OPT_STRING, .target = &log_level,
     .def = "", .help = "TRACE, DEBUG, INFO, WARNING, ERROR (default: MC_LOG_LEVEL or INFO)"},
    {.name = "max_body_size", .type = MC_OPT_SIZE, .target = &max_body, .def = "16mb",
     .bounded = true, .min = 1, .max = 1073741824.0, .unit = "bytes",
     .help = "largest PUT body; larger ones get 413"},
    {.name = "max_total_size", .type = MC_OPT_SIZE, .target = &max_total, .def = "1gb",
     .bounded = true, .min = 1, .max = 1099511627776.0, .unit = "bytes",
     .help = "keys + values kept in memory; beyond it PUT gets 507"},
    {.name = "threads", .type = MC_OPT_INT, .target = &threads, .def = "2", .bounded = true,
     .min = 1, .max = 64, .help = "worker threads"},
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

    mc_http_metadata_server_opts o = {
        .max_body_bytes = max_body, .max_total_bytes = max_total, .threads = (unsigned)threads};
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
    return 0;
}
