/* transfer_engine_bench: throughput of the transfer engine between two processes.
 * Flags and output as upstream's `transfer_engine_bench`
 * (mooncake-transfer-engine/example/transfer_engine_bench.cpp; upstream-mooncake.md §6.7):
 *   target:    registers one --buffer_size buffer, prints
 *              "Target ready: segment_id <name>" and serves until SIGINT/SIGTERM;
 *   initiator: --threads threads each loop { allocate a batch of --batch_size requests of
 *              --block_size bytes at offset block_size * (i * threads + thread_id) of the
 *              target's buffer[thread_id % nbuf] and of the local buffer; submit; wait;
 *              free } for --duration seconds (offsets wrap around when the buffers are
 *              smaller than block_size * batch_size * threads; upstream requires them to fit), printing a progress line each second and
 *              finally "Test completed: duration D, batch count N, throughput X GB/s"
 *              plus per-batch latency p50/p99.
 * Defaults differ from upstream where upstream's would not fit this box: --buffer_size
 * 256 MiB (upstream 1 GiB), --metadata_server P2PHANDSHAKE, --local_server_name
 * 127.0.0.1, --protocol tcp. Ours: --use_shm (target memory from a memfd, so an
 * initiator on the same host uses the shared-memory path).
 * Exit status: 0; 1 when a transfer fails or the engine cannot start; 2 on a bad flag. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/options.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "tool_util.h"

static char *mode, *operation, *protocol, *device_name, *metadata_server, *local_server_name,
    *segment_id, *report_unit, *backend, *nic_priority_matrix;
static uint64_t buffer_size, block_size;
static int64_t batch_size, threads, report_precision;
static double duration;
static bool auto_discovery, use_shm;

static const mc_option options[] = {
    {.name = "mode", .type = MC_OPT_STRING, .target = &mode, .def = "initiator",
     .help = "initiator or target"},
    {.name = "operation", .type = MC_OPT_STRING, .target = &operation, .def = "read",
     .help = "read or write"},
    {.name = "protocol", .type = MC_OPT_STRING, .target = &protocol, .def = "tcp",
     .nonempty = true, .help = "transport protocol (tcp; rdma only with MC_FORCE_TCP)"},
    {.name = "device_name", .type = MC_OPT_STRING, .target = &device_name, .def = "",
     .help = "RDMA NIC filter, passed to the engine; its tcp transport (the only one in "
             "mooncake-c) ignores it, as upstream's does"},
    {.name = "metadata_server", .type = MC_OPT_STRING, .target = &metadata_server,
     .def = "P2PHANDSHAKE", .env = "MC_METADATA_SERVER", .nonempty = true,
     .help = "P2PHANDSHAKE, http://host:port/metadata, etcd://host:port, ..."},
    {.name = "local_server_name", .type = MC_OPT_STRING, .target = &local_server_name,
     .def = "127.0.0.1", .nonempty = true,
     .help = "this engine's host[:port] (P2PHANDSHAKE: the segment becomes host:rpc_port)"},
    {.name = "segment_id", .type = MC_OPT_STRING, .target = &segment_id, .def = "",
     .help = "initiator: the target's segment name (printed by the target)"},
    {.name = "buffer_size", .type = MC_OPT_SIZE, .target = &buffer_size, .def = "256mb",
     .bounded = true, .min = 4096, .max = 1099511627776.0, .unit = "bytes",
     .help = "bytes of the registered buffer (upstream default 1 GiB)"},
    {.name = "batch_size", .type = MC_OPT_INT, .target = &batch_size, .def = "128",
     .bounded = true, .min = 1, .max = 65536, .help = "requests per batch"},
    {.name = "block_size", .type = MC_OPT_SIZE, .target = &block_size, .def = "65536",
     .bounded = true, .min = 1, .max = 1073741824.0, .unit = "bytes",
     .help = "bytes per request"},
    {.name = "duration", .type = MC_OPT_DOUBLE, .target = &duration, .def = "10",
     .bounded = true, .min = 0.01, .max = 86400, .unit = "s", .help = "test length"},
    {.name = "threads", .type = MC_OPT_INT, .target = &threads, .def = "12", .bounded = true,
     .min = 1, .max = 1024, .help = "initiator threads"},
    {.name = "auto_discovery", .type = MC_OPT_BOOL, .target = &auto_discovery,
     .def = "false",
     .only_default = "mooncake-c does not implement NIC topology discovery (the engine "
                     "runs the --protocol transport only)",
     .help = "upstream's NIC topology discovery, not implemented: only false is accepted "
             "(true: exit 2)"},
    {.name = "report_unit", .type = MC_OPT_STRING, .target = &report_unit, .def = "GB",
     .help = "GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb (GB = 1e9 bytes, Gb = 1e9 bits)"},
    {.name = "report_precision", .type = MC_OPT_INT, .target = &report_precision, .def = "2",
     .bounded = true, .min = 0, .max = 9, .help = "digits after the decimal point"},
    {.name = "backend", .type = MC_OPT_STRING, .target = &backend, .def = "classic",
     .only_default = "mooncake-c does not implement the TENT backend (its engine is the "
                     "classic one)",
     .help = "engine backend: classic only (tent: exit 2)"},
    {.name = "nic_priority_matrix", .type = MC_OPT_STRING, .target = &nic_priority_matrix,
     .def = "",
     .only_default = "mooncake-c does not implement RDMA NIC priority matrices (the tcp "
                     "transport uses the routing table)",
     .help = "RDMA NIC priority matrix, not implemented: only \"\" is accepted"},
    {.name = "use_shm", .type = MC_OPT_BOOL, .target = &use_shm, .def = "false",
     .help = "target: memfd-backed buffer, so a same-host initiator uses shared memory"},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static double unit_divisor(const char *u, bool *bits)
{
    static const struct {
        const char *name;
        double div;
        bool bits;
    } units[] = {{"GB", 1e9, false}, {"GiB", 1073741824.0, false}, {"Gb", 1e9, true},
                 {"MB", 1e6, false}, {"MiB", 1048576.0, false},    {"Mb", 1e6, true},
                 {"KB", 1e3, false}, {"KiB", 1024.0, false},       {"Kb", 1e3, true}};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (strcmp(u, units[i].name) == 0) {
            *bits = units[i].bits;
            return units[i].div;
        }
    return 0;
}

static double throughput(uint64_t bytes, double secs)
{
    bool bits = false;
    double div = unit_divisor(report_unit, &bits);
    return secs > 0 ? (double)bytes * (bits ? 8.0 : 1.0) / secs / div : 0;
}

typedef struct thr {
    pthread_t th;
    int id;
    mc_te *te;
    mc_te_segment_t seg;
    char *local;
    uint64_t remote;
    int op;
    uint64_t slots; /* blocks that fit the smaller of the two buffers */
    atomic_uint_fast64_t batches;
    uint64_t *lat_us; /* samples, at most cap */
    size_t n_lat, cap_lat;
    int failed;
} thr;

static atomic_int running = 1;

static void *worker(void *arg)
{
    thr *t = arg;
    size_t n = (size_t)batch_size;
    mc_te_request *reqs = calloc(n, sizeof *reqs);
    if (!reqs)
        abort();
    uint64_t slots = t->slots;
    for (size_t i = 0; i < n; i++) {
        uint64_t off = block_size * ((i * (uint64_t)threads + (uint64_t)t->id) % slots);
        reqs[i] = (mc_te_request){.opcode = t->op, .source = t->local + off,
                                  .target_id = t->seg, .target_offset = t->remote + off,
                                  .length = block_size};
    }
    while (atomic_load(&running)) {
        uint64_t t0 = mc_now_us();
        mc_te_batch_t b;
        int rc = mc_te_allocate_batch(t->te, n, &b);
        if (rc == MC_OK)
            rc = mc_te_submit(t->te, b, reqs, n);
        mc_te_status st = {0};
        if (rc == MC_OK)
            rc = mc_te_wait_batch(t->te, b, -1, &st);
        if (rc != MC_OK || st.state != MC_TE_COMPLETED) {
            fprintf(stderr, "transfer failed: %s (state %d, error %s)\n", mc_strerror(rc),
                    (int)st.state, mc_strerror(st.error));
            t->failed = 1;
            atomic_store(&running, 0);
            break;
        }
        mc_te_free_batch(t->te, b);
        uint64_t us = mc_now_us() - t0;
        if (t->n_lat < t->cap_lat)
            t->lat_us[t->n_lat++] = us;
        atomic_fetch_add(&t->batches, 1);
    }
    free(reqs);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static mc_te *start_engine(void)
{
    mc_te *te;
    if (mc_te_create(NULL, &te) != MC_OK)
        return NULL;
    int rc = mc_te_initialize(te, local_server_name, metadata_server, protocol, device_name);
    if (rc != MC_OK) {
        fprintf(stderr, "transfer_engine_bench: cannot start the engine: %s\n",
                mc_strerror(rc));
        mc_te_destroy(te);
        return NULL;
    }
    return te;
}

static int run_target(void)
{
    mc_te *te = start_engine();
    if (!te)
        return 1;
    void *buf = NULL;
    int rc;
    if (use_shm) {
        rc = mc_te_alloc_shared(te, buffer_size, &buf);
    } else {
        buf = malloc(buffer_size);
        rc = buf ? mc_te_register_memory(te, buf, buffer_size, "cpu:0") : MC_NO_AVAILABLE_HANDLE;
    }
    if (rc != MC_OK) {
        fprintf(stderr, "transfer_engine_bench: cannot register %llu bytes: %s\n",
                (unsigned long long)buffer_size, mc_strerror(rc));
        mc_te_destroy(te);
        return 1;
    }
    memset(buf, 0, buffer_size); /* touch it, so the initiator measures the network */
    printf("Target ready: segment_id %s (buffer 0x%llx, %llu bytes%s); Ctrl-C to stop\n",
           mc_te_segment_name(te), (unsigned long long)(uintptr_t)buf,
           (unsigned long long)buffer_size, use_shm ? ", shared memory" : "");
    fflush(stdout);
    while (!stop_flag)
        pause();
    mc_te_destroy(te);
    if (!use_shm)
        free(buf);
    return 0;
}

static int run_initiator(void)
{
    if (!*segment_id) {
        fprintf(stderr, "transfer_engine_bench: --segment_id is required in initiator mode "
                        "(the name the target printed)\n");
        return 2;
    }
    int op = strcmp(operation, "write") == 0 ? MC_TE_OP_WRITE : MC_TE_OP_READ;
    uint64_t span = block_size * (uint64_t)batch_size * (uint64_t)threads;
    if (block_size > buffer_size) {
        fprintf(stderr, "transfer_engine_bench: --block_size exceeds --buffer_size\n");
        return 2;
    }
    mc_te *te = start_engine();
    if (!te)
        return 1;
    char *local = malloc(buffer_size);
    if (!local || mc_te_register_memory(te, local, buffer_size, "cpu:0") != MC_OK) {
        fprintf(stderr, "transfer_engine_bench: cannot register the local buffer\n");
        mc_te_destroy(te);
        return 1;
    }
    memset(local, 1, buffer_size);
    mc_segment_desc desc;
    int rc = mc_te_get_segment_desc(te, segment_id, &desc);
    mc_te_segment_t seg = -1;
    if (rc == MC_OK)
        rc = mc_te_open_segment(te, segment_id, &seg);
    if (rc != MC_OK || desc.n_buffers == 0) {
        fprintf(stderr, "transfer_engine_bench: segment %s: %s\n", segment_id,
                rc != MC_OK ? mc_strerror(rc) : "it has no registered buffer");
        if (rc == MC_OK)
            mc_segment_desc_deinit(&desc);
        mc_te_destroy(te);
        free(local);
        return 1;
    }
    uint64_t room = buffer_size;
    for (size_t i = 0; i < desc.n_buffers; i++)
        if (desc.buffers[i].length < room)
            room = desc.buffers[i].length;
    if (room < block_size) {
        fprintf(stderr, "transfer_engine_bench: the target's buffers are smaller than "
                        "--block_size\n");
        mc_segment_desc_deinit(&desc);
        mc_te_destroy(te);
        free(local);
        return 2;
    }
    if (span > room)
        fprintf(stderr,
                "transfer_engine_bench: block_size * batch_size * threads = %llu bytes "
                "exceeds the buffers (%llu bytes): offsets wrap around (requests overlap)\n",
                (unsigned long long)span, (unsigned long long)room);
    thr *ts = calloc((size_t)threads, sizeof *ts);
    if (!ts)
        abort();
    uint64_t est = (uint64_t)(duration * 200000.0) / (uint64_t)threads + 1024;
    for (int i = 0; i < threads; i++) {
        ts[i].id = i;
        ts[i].te = te;
        ts[i].seg = seg;
        ts[i].local = local;
        ts[i].remote = desc.buffers[(size_t)i % desc.n_buffers].addr;
        ts[i].op = op;
        ts[i].slots = room / block_size;
        ts[i].cap_lat = est > 4000000 ? 4000000 : est;
        ts[i].lat_us = malloc(ts[i].cap_lat * sizeof(uint64_t));
        if (!ts[i].lat_us)
            abort();
    }
    mc_segment_desc_deinit(&desc);
    uint64_t t0 = mc_now_us();
    for (int i = 0; i < threads; i++)
        pthread_create(&ts[i].th, NULL, worker, &ts[i]);
    uint64_t bytes_per_batch = block_size * (uint64_t)batch_size;
    uint64_t next = t0 + 1000000, end = t0 + (uint64_t)(duration * 1e6);
    while (atomic_load(&running) && !stop_flag) {
        uint64_t now = mc_now_us();
        if (now >= end)
            break;
        if (now >= next) {
            uint64_t nb = 0;
            for (int i = 0; i < threads; i++)
                nb += atomic_load(&ts[i].batches);
            double el = (double)(now - t0) / 1e6;
            printf("progress: %.1f s, batch count %llu, throughput %.*f %s/s\n", el,
                   (unsigned long long)nb, (int)report_precision,
                   throughput(nb * bytes_per_batch, el), report_unit);
            fflush(stdout);
            next += 1000000;
        }
        uint64_t wake = next < end ? next : end;
        mc_sleep_ms((wake - now) / 1000 + 1 > 200 ? 200 : (wake - now) / 1000 + 1);
    }
    atomic_store(&running, 0);
    uint64_t nb = 0;
    int failed = 0;
    size_t nlat = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ts[i].th, NULL);
        nb += atomic_load(&ts[i].batches);
        failed |= ts[i].failed;
        nlat += ts[i].n_lat;
    }
    double secs = (double)(mc_now_us() - t0) / 1e6;
    uint64_t *lat = malloc((nlat ? nlat : 1) * sizeof *lat);
    size_t k = 0;
    for (int i = 0; i < threads; i++) {
        memcpy(lat + k, ts[i].lat_us, ts[i].n_lat * sizeof *lat);
        k += ts[i].n_lat;
        free(ts[i].lat_us);
    }
    qsort(lat, nlat, sizeof *lat, cmp_u64);
    int prec = (int)report_precision;
    printf("Test completed: duration %.*f, batch count %llu, throughput %.*f %s/s\n", prec,
           secs, (unsigned long long)nb, prec, throughput(nb * bytes_per_batch, secs),
           report_unit);
    if (nlat)
        printf("Latency per batch (%lld x %llu bytes): p50 %.1f us, p99 %.1f us\n",
               (long long)batch_size, (unsigned long long)block_size,
               (double)lat[nlat / 2], (double)lat[(size_t)((double)(nlat - 1) * 0.99)]);
    mc_te_stats st;
    mc_te_get_stats(te, &st);
    printf("Path: %s (tcp %llu bytes, shared memory %llu bytes)\n",
           st.shm_bytes > st.tcp_bytes_sent + st.tcp_bytes_received ? "same-host shared memory"
                                                                    : "tcp",
           (unsigned long long)(st.tcp_bytes_sent + st.tcp_bytes_received),
           (unsigned long long)st.shm_bytes);
    fflush(stdout);
    free(lat);
    free(ts);
    mc_te_destroy(te);
    free(local);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    mc_log_init_from_env();
    mc_options_main(options, N_OPTIONS, &argc, argv,
                    "Transfer engine benchmark: run --mode=target in one terminal and "
                    "--mode=initiator --segment_id=<printed name> in another.");
    int rc = 2;
    bool bits;
    if (argc > 1) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[1]);
    } else if (mc_tool_refuse_non_defaults(argv[0], options, N_OPTIONS) != 0) {
        /* printed: an upstream flag set to what mooncake-c does not implement */
    } else if (strcmp(mode, "target") != 0 && strcmp(mode, "initiator") != 0) {
        fprintf(stderr, "%s: invalid value '%s' for --mode (initiator or target)\n", argv[0],
                mode);
    } else if (strcmp(operation, "read") != 0 && strcmp(operation, "write") != 0) {
        fprintf(stderr, "%s: invalid value '%s' for --operation (read or write)\n", argv[0],
                operation);
    } else if (unit_divisor(report_unit, &bits) == 0) {
        fprintf(stderr, "%s: invalid value '%s' for --report_unit\n", argv[0], report_unit);
    } else {
        struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        rc = strcmp(mode, "target") == 0 ? run_target() : run_initiator();
    }
    mc_options_free(options, N_OPTIONS);
    return rc;
}
