/* mooncake_client: the resource-owning store client as a process of its own (upstream
 * mooncake-store/src/real_client_main.cpp, console script `mooncake_client`). It sets up
 * one store client that contributes --global_segment_size bytes to the pool and serves
 * the dummy clients of this host and user (MooncakeDistributedStore.setup_dummy) on the
 * abstract Unix socket "@mooncake_client_<--port>.sock" (src/client/dummy.h), until
 * SIGINT or SIGTERM.
 *
 * Flags are upstream's (names, defaults); the ones asking for features mooncake-c does not
 * implement are refused with exit 2 when set to anything but their "off" value. */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/dummy.h"
#include "mooncake/log.h"
#include "mooncake/options.h"
#include "mooncake/status.h"
#include "mooncake/store.h"
#include "tool_util.h"

#define TAG "mooncake_client"

static char *host, *metadata_server, *master_addr, *protocol, *device_names, *tenant_id;
static int64_t port, threads, http_port;
static uint64_t segment_size, local_buffer_size;
static bool enable_offload, enable_http_server;

static const mc_option options[] = {
    {.name = "host", .type = MC_OPT_STRING, .target = &host, .def = "0.0.0.0", .nonempty = true,
     .help = "local hostname: the host part of this client's segment name (a free port in "
             "12300..14300 is added)"},
    {.name = "port", .type = MC_OPT_INT, .target = &port, .def = "50052", .bounded = true,
     .min = 1, .max = 65535,
     .help = "service port: dummy clients reach this client on the abstract Unix socket "
             "@mooncake_client_<port>.sock (setup_dummy's server_address names it)"},
    {.name = "global_segment_size", .type = MC_OPT_SIZE, .target = &segment_size,
     .def = "4GB", .bounded = true, .min = 0, .max = 1125899906842624.0, .unit = "bytes",
     .help = "memory this client contributes to the pool (0: none)"},
    {.name = "local_buffer_size", .type = MC_OPT_SIZE, .target = &local_buffer_size,
     .def = "0", .bounded = true, .min = 0, .max = 1099511627776.0, .unit = "bytes",
     .help = "local buffer of this client (dummy requests do not need one)"},
    {.name = "master_server_address", .type = MC_OPT_STRING, .target = &master_addr,
     .def = "127.0.0.1:50051", .nonempty = true, .help = "host:port of mooncake_master"},
    {.name = "metadata_server", .type = MC_OPT_STRING, .target = &metadata_server,
     .def = "http://127.0.0.1:8080/metadata", .nonempty = true,
     .help = "metadata service: http://h:p/metadata, etcd://h:p, redis://h:p or "
             "P2PHANDSHAKE"},
    {.name = "protocol", .type = MC_OPT_STRING, .target = &protocol, .def = "tcp",
     .nonempty = true, .help = "transfer protocol (tcp; rdma as the store's setup allows)"},
    {.name = "device_names", .type = MC_OPT_STRING, .target = &device_names, .def = "",
     .help = "RDMA device filter passed to the transfer engine (\"\": all); its tcp "
             "transport ignores it, as upstream's does"},
    {.name = "threads", .type = MC_OPT_INT, .target = &threads, .def = "1", .bounded = true,
     .min = 1, .max = 1024,
     .help = "upstream's RPC thread count; here each dummy connection has its own thread, "
             "so only 1 (the default) is accepted"},
    {.name = "tenant_id", .type = MC_OPT_STRING, .target = &tenant_id, .def = "default",
     .only_default = "mooncake-c does not implement tenants (the master has no "
                     "multi-tenant quotas: its --enable_multi_tenants is refused)",
     .help = "tenant of this client: tenants are not implemented, only upstream's default "
             "is accepted (another value: exit 2)"},
    {.name = "enable_offload", .type = MC_OPT_BOOL, .target = &enable_offload, .def = "false",
     .help = "a disk tier for the dummy clients: not in mooncake_client yet, only false is "
             "accepted (store clients: setup(enable_ssd_offload=True))"},
    {.name = "enable_http_server", .type = MC_OPT_BOOL, .target = &enable_http_server,
     .def = "false",
     .help = "the client's HTTP server (/health, /metrics): not implemented in mooncake-c, "
             "only false is accepted"},
    {.name = "http_port", .type = MC_OPT_INT, .target = &http_port, .def = "9300",
     .bounded = true, .min = 0, .max = 65535,
     .only_default = "mooncake-c does not implement the client's HTTP server "
                     "(--enable_http_server) this port is for",
     .help = "port of the client's HTTP server, which mooncake-c does not implement: only "
             "the default is accepted (another value: exit 2)"},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

static int refuse(const char *prog)
{
    if (enable_offload) {
        fprintf(stderr,
                "%s: --enable_offload=true: mooncake-c's mooncake_client does not run a disk tier for "
                "its dummy clients yet; drop the flag (a store client gets one with "
                "setup(enable_ssd_offload=True, ssd_offload_path=...), docs/ssd-tier.md)\n",
                prog);
        return 2;
    }
    if (enable_http_server) {
        fprintf(stderr,
                "%s: --enable_http_server=true asks for the client's HTTP server (/health, "
                "/metrics), which mooncake-c does not implement; drop the flag (the master's "
                "--metrics_port serves the cluster's metrics)\n",
                prog);
        return 2;
    }
    if (threads != 1) {
        fprintf(stderr,
                "%s: --threads=%lld: mooncake-c serves each dummy client on a thread of its "
                "own, a fixed RPC thread count is not implemented; drop the flag\n",
                prog, (long long)threads);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *prog = "mooncake_client";
    mc_log_init_from_env();
    mc_options_main(options, N_OPTIONS, &argc, argv,
                    "mooncake_client: a store client that owns a segment of the pool and "
                    "serves the dummy clients (setup_dummy) of this host and user.");
    int code = 1;
    mc_store *store = NULL;
    mc_dummy_server *srv = NULL;
    if (argc > 1) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[1]);
        code = 2;
        goto out;
    }
    if ((code = refuse(prog)) != 0 ||
        (code = mc_tool_refuse_non_defaults(prog, options, N_OPTIONS)) != 0)
        goto out;
    code = 1;
    sigset_t stop;
    mc_tool_block_stop_signals(&stop);

    mc_store_config cfg;
    mc_store_config_init(&cfg);
    cfg.local_hostname = host;
    cfg.metadata_server = metadata_server;
    cfg.global_segment_size = segment_size;
    cfg.local_buffer_size = local_buffer_size;
    cfg.protocol = protocol;
    cfg.rdma_devices = device_names;
    cfg.master_server_addr = master_addr;
    cfg.tenant_id = tenant_id;
    if (mc_store_create(&store) != MC_OK)
        goto out;
    int rc = mc_store_setup(store, &cfg);
    if (rc != MC_OK) {
        fprintf(stderr, "%s: setting up the store client failed: %s (%d)\n", prog,
                mc_strerror(rc), rc);
        goto out;
    }
    rc = mc_dummy_server_start(store, (int)port, &srv);
    if (rc != MC_OK) {
        fprintf(stderr,
                "%s: cannot serve dummy clients on @mooncake_client_%lld.sock (is another "
                "mooncake_client running with --port=%lld?)\n",
                prog, (long long)port, (long long)port);
        goto out;
    }
    char name[MC_STORE_NAME_MAX];
    if (mc_store_get_hostname(store, name, sizeof name) < 0)
        name[0] = '\0';
    printf("mooncake_client ready: segment %s (%llu bytes), dummy clients on "
           "@mooncake_client_%lld.sock\n",
           name, (unsigned long long)segment_size, (long long)port);
    fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    mc_log(MC_LOG_INFO, TAG, "signal %d: stopping", sig);
    code = 0;
out:
    mc_dummy_server_stop(srv);
    if (store)
        mc_store_destroy(store);
    mc_options_free(options, N_OPTIONS);
    return code;
}
