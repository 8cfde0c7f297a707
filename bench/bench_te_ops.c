/* bench_te_ops: a fixed amount of transfer-engine work, for counting instructions per
 * request under `valgrind --tool=callgrind` (driver: bench/bench_te_instr.py), which is
 * repeatable where wall-clock figures on a shared 2-core box are not.
 *
 *   bench_te_ops PATH OP BLOCK BATCH ITERS [WARMUP]
 *     PATH  tcp (both engines forced onto TCP loopback) or shm (the target's buffer is
 *           memfd-backed: the same-host path)
 *     OP    write or read
 *     Two engines in this process (target and initiator, P2PHANDSHAKE on 127.0.0.1, the
 *     engine's defaults otherwise: MC_TE_TCP_CONNECTIONS / MC_TE_IO_THREADS apply). WARMUP
 *     batches (default 20) open the connections and fault the buffers in; then ITERS
 *     batches of BATCH requests of BLOCK bytes each, each allocated, submitted, waited for
 *     and freed as transfer_engine_bench does. Only those ITERS batches are counted: the
 *     callgrind counters are zeroed before them (CALLGRIND_ZERO_STATS) and dumped after
 *     (CALLGRIND_DUMP_STATS_AT "measured"); both are no-ops outside valgrind. Every thread
 *     of both engines is counted (callgrind sums threads), so a figure covers initiator
 *     and target; kernel work (system calls) is not counted by callgrind, which is why
 *     the driver also reports the recvmsg/sendmsg calls made.
 * Prints one JSON line: {"path", "op", "block", "batch", "iters", "requests", "seconds",
 * "GBps"} (seconds: the measured part, wall clock). Exit status 0, 1 when a transfer
 * fails, 2 on bad arguments. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/callgrind.h>

#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"

static mc_te *engine(int force_tcp)
{
    mc_te_opts o = {.force_tcp = force_tcp ? 1 : 0};
    mc_te *te;
    if (mc_te_create(&o, &te) != MC_OK)
        return NULL;
    if (mc_te_initialize(te, "127.0.0.1", "P2PHANDSHAKE", "tcp", "") != MC_OK) {
        mc_te_destroy(te);
        return NULL;
    }
    return te;
}

static int run_batch(mc_te *te, const mc_te_request *reqs, size_t n)
{
    mc_te_batch_t b;
    int rc = mc_te_allocate_batch(te, n, &b);
    if (rc != MC_OK)
        return rc;
    rc = mc_te_submit(te, b, reqs, n);
    mc_te_status st = {0};
    if (rc == MC_OK)
        rc = mc_te_wait_batch(te, b, -1, &st);
    if (rc == MC_OK && st.state != MC_TE_COMPLETED)
        rc = st.error ? st.error : MC_TRANSFER_FAIL;
    mc_te_free_batch(te, b);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 7) {
        fprintf(stderr, "usage: %s tcp|shm write|read BLOCK BATCH ITERS [WARMUP]\n", argv[0]);
        return 2;
    }
    int tcp = strcmp(argv[1], "tcp") == 0, shm = strcmp(argv[1], "shm") == 0;
    int wr = strcmp(argv[2], "write") == 0, rd = strcmp(argv[2], "read") == 0;
    size_t block = strtoull(argv[3], NULL, 0), batch = strtoull(argv[4], NULL, 0);
    long iters = atol(argv[5]), warm = argc > 6 ? atol(argv[6]) : 20;
    if ((!tcp && !shm) || (!wr && !rd) || !block || !batch || iters < 1 || warm < 0)
        return 2;
    mc_te *tgt = engine(tcp), *ini = engine(tcp);
    if (!tgt || !ini)
        return 1;
    size_t span = block * batch;
    void *remote = NULL;
    if (shm) {
        if (mc_te_alloc_shared(tgt, span, &remote) != MC_OK)
            return 1;
    } else {
        remote = malloc(span);
        if (!remote || mc_te_register_memory(tgt, remote, span, "cpu:0") != MC_OK)
            return 1;
    }
    memset(remote, 1, span);
    char *local = malloc(span);
    if (!local || mc_te_register_memory(ini, local, span, "cpu:0") != MC_OK)
        return 1;
    memset(local, 2, span);
    mc_te_segment_t seg;
    if (mc_te_open_segment(ini, mc_te_segment_name(tgt), &seg) != MC_OK)
        return 1;
    mc_te_request *reqs = calloc(batch, sizeof *reqs);
    for (size_t i = 0; i < batch; i++)
        reqs[i] = (mc_te_request){.opcode = wr ? MC_TE_OP_WRITE : MC_TE_OP_READ,
                                  .source = local + i * block, .target_id = seg,
                                  .target_offset = (uint64_t)(uintptr_t)remote + i * block,
                                  .length = block};
    for (long i = 0; i < warm; i++)
        if (run_batch(ini, reqs, batch) != MC_OK) {
            fprintf(stderr, "bench_te_ops: warm-up transfer failed\n");
            return 1;
        }
    CALLGRIND_ZERO_STATS;
    uint64_t t0 = mc_now_us();
    for (long i = 0; i < iters; i++)
        if (run_batch(ini, reqs, batch) != MC_OK) {
            fprintf(stderr, "bench_te_ops: transfer failed\n");
            return 1;
        }
    uint64_t us = mc_now_us() - t0;
    CALLGRIND_DUMP_STATS_AT("measured");
    double secs = (double)us / 1e6;
    printf("{\"path\": \"%s\", \"op\": \"%s\", \"block\": %zu, \"batch\": %zu, \"iters\": %ld, "
           "\"requests\": %llu, \"seconds\": %.4f, \"GBps\": %.4f}\n",
           argv[1], argv[2], block, batch, iters, (unsigned long long)(iters * (long)batch),
           secs, secs > 0 ? (double)(block * batch) * (double)iters / secs / 1e9 : 0.0);
    free(reqs);
    mc_te_destroy(ini);
    mc_te_destroy(tgt);
    if (!shm)
        free(remote);
    free(local);
    return 0;
}
