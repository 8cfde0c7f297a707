/* bench_store_ops: a fixed amount of store-client work, for counting instructions per
 * key under `valgrind --tool=callgrind` (driver: bench/bench_store_instr.py), which is
 * repeatable where wall-clock figures on a shared 2-core box are not.
 *
 *   bench_store_ops node MASTER METADATA SEGMENT_BYTES
 *     A store node: sets up a client contributing SEGMENT_BYTES (the segment every value
 *     lands in), prints "ready" and waits until its stdin closes, then closes.
 *   bench_store_ops client MASTER METADATA OP SIZE BATCH ITERS [WARMUP [SETS]]
 *     A pure client (global_segment_size 0) with a registered buffer of BATCH x SIZE.
 *     OP put:   every batch is batch_put_from of BATCH new keys;
 *        get:   SETS (default 1) sets of BATCH keys are put once, batch i is
 *               batch_get_into of set i % SETS (checked);
 *        exist: the same with batch_is_exist (the master's batch_is_exist: one RPC).
 *     SETS 1 reads the same keys every batch (the source stays in the node's caches,
 *     as redis-benchmark's one key does); a large SETS reads a working set spread
 *     over the segment (SETS x BATCH x SIZE bytes), as a cache serving many keys does.
 *     WARMUP batches (default 10) open connections and fault pages in; then it prints
 *     "warm" and waits for one line on stdin (the driver zeroes a master run under
 *     callgrind then), runs ITERS measured batches between CALLGRIND_ZERO_STATS and
 *     CALLGRIND_DUMP_STATS_AT("measured") (no-ops outside valgrind), prints one JSON line
 *     {"op", "size", "batch", "iters", "keys", "seconds"} and waits for one more line
 *     before closing (the driver dumps the master's counters then).
 *     Values are written by the node's segment through the same-host path unless
 *     MC_FORCE_TCP=1 is set in the environment (then over TCP loopback).
 * Exit status 0; 1 when a call fails or a value reads back wrong; 2 on bad arguments. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/callgrind.h>

#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "mooncake/store.h"

static mc_store *open_store(const char *master, const char *md, uint64_t seg)
{
    mc_store_config c;
    mc_store_config_init(&c);
    c.local_hostname = "127.0.0.1";
    c.metadata_server = md;
    c.master_server_addr = master;
    c.global_segment_size = seg;
    c.local_buffer_size = 16ull << 20;
    mc_store *s;
    mc_store_create(&s);
    int rc = mc_store_setup(s, &c);
    if (rc != MC_OK) {
        fprintf(stderr, "bench_store_ops: setup returned %d\n", rc);
        mc_store_destroy(s);
        return NULL;
    }
    return s;
}

static void wait_line(void)
{
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return;
}

typedef struct keyset {
    char (*text)[48];
    mc_store_key *keys;
} keyset;

static void make_keys(keyset *k, size_t batch, const char *tag, uint64_t round)
{
    for (size_t j = 0; j < batch; j++) {
        int n = snprintf(k->text[j], sizeof k->text[j], "%s/%" PRIu64 "/%zu", tag, round, j);
        k->keys[j].data = k->text[j];
        k->keys[j].len = (size_t)n;
    }
}

static int one_batch(mc_store *s, const char *op, keyset *k, size_t batch, uint64_t size,
                     uint8_t *buf, void **ptrs, uint64_t *sizes, int *ires, int64_t *lres,
                     uint64_t round, uint64_t sets)
{
    if (!strcmp(op, "put")) {
        make_keys(k, batch, "p", round);
        int rc = mc_store_batch_put_from(s, k->keys, batch, (const void *const *)ptrs, sizes,
                                         NULL, ires);
        for (size_t j = 0; rc == MC_OK && j < batch; j++)
            if (ires[j] != MC_OK)
                rc = ires[j];
        return rc;
    }
    if (sets > 1) /* get / exist; SETS 1: k holds set 0 already (no formatting per batch) */
        make_keys(k, batch, "g", round % sets);
    if (!strcmp(op, "get")) {
        int rc = mc_store_batch_get_into(s, k->keys, batch, ptrs, sizes, lres);
        for (size_t j = 0; rc == MC_OK && j < batch; j++)
            if (lres[j] != (int64_t)size || buf[j * size] != (uint8_t)j)
                rc = lres[j] < 0 ? (int)lres[j] : MC_INTERNAL_ERROR;
        return rc;
    }
    int rc = mc_store_batch_is_exist(s, k->keys, batch, ires);
    for (size_t j = 0; rc == MC_OK && j < batch; j++)
        if (ires[j] != 1)
            rc = ires[j] < 0 ? ires[j] : MC_OBJECT_NOT_FOUND;
    return rc;
}

static int client(char **argv, int argc)
{
    const char *op = argv[4];
    uint64_t size = strtoull(argv[5], NULL, 10);
    size_t batch = strtoull(argv[6], NULL, 10);
    size_t iters = strtoull(argv[7], NULL, 10);
    size_t warm = argc > 8 ? strtoull(argv[8], NULL, 10) : 10;
    uint64_t sets = argc > 9 ? strtoull(argv[9], NULL, 10) : 1;
    if ((strcmp(op, "put") && strcmp(op, "get") && strcmp(op, "exist")) || size == 0 ||
        batch == 0 || batch > 4096 || iters == 0 || sets == 0 || sets > 1000000)
        return 2;
    mc_store *s = open_store(argv[2], argv[3], 0);
    if (!s)
        return 1;
    uint8_t *buf = aligned_alloc(4096, (size * batch + 4095) / 4096 * 4096);
    void **ptrs = calloc(batch, sizeof(*ptrs));
    uint64_t *sizes = calloc(batch, sizeof(*sizes));
    int *ires = calloc(batch, sizeof(*ires));
    int64_t *lres = calloc(batch, sizeof(*lres));
    keyset k = {calloc(batch, sizeof(*k.text)), calloc(batch, sizeof(*k.keys))};
    for (size_t j = 0; j < batch; j++) {
        ptrs[j] = buf + j * size;
        sizes[j] = size;
        memset(ptrs[j], (int)(uint8_t)j, size);
    }
    int rc = mc_store_register_buffer(s, buf, size * batch);
    if (rc == MC_OK && strcmp(op, "put")) {
        /* the keys that get / exist read */
        for (uint64_t set = 0; rc == MC_OK && set < sets; set++) {
            make_keys(&k, batch, "g", set);
            rc = mc_store_batch_put_from(s, k.keys, batch, (const void *const *)ptrs, sizes,
                                         NULL, ires);
            for (size_t j = 0; rc == MC_OK && j < batch; j++)
                rc = ires[j];
        }
    }
    uint64_t round = 0;
    for (size_t i = 0; rc == MC_OK && i < warm; i++)
        rc = one_batch(s, op, &k, batch, size, buf, ptrs, sizes, ires, lres, ++round, sets);
    if (rc != MC_OK) {
        fprintf(stderr, "bench_store_ops: warm-up %s returned %d\n", op, rc);
        mc_store_destroy(s);
        return 1;
    }
    printf("warm\n");
    fflush(stdout);
    wait_line();
    uint64_t t0 = mc_now_ns();
    CALLGRIND_ZERO_STATS;
    for (size_t i = 0; rc == MC_OK && i < iters; i++)
        rc = one_batch(s, op, &k, batch, size, buf, ptrs, sizes, ires, lres, ++round, sets);
    CALLGRIND_DUMP_STATS_AT("measured");
    uint64_t dt = mc_now_ns() - t0;
    if (rc != MC_OK) {
        fprintf(stderr, "bench_store_ops: %s returned %d\n", op, rc);
        mc_store_destroy(s);
        return 1;
    }
    printf("{\"op\": \"%s\", \"size\": %" PRIu64 ", \"batch\": %zu, \"iters\": %zu, "
           "\"keys\": %zu, \"seconds\": %.6f}\n",
           op, size, batch, iters, iters * batch, (double)dt / 1e9);
    fflush(stdout);
    wait_line();
    mc_store_unregister_buffer(s, buf);
    mc_store_destroy(s);
    free(buf);
    free(ptrs);
    free(sizes);
    free(ires);
    free(lres);
    free(k.text);
    free(k.keys);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "node")) {
        mc_store *s = open_store(argv[2], argv[3], strtoull(argv[4], NULL, 10));
        if (!s)
            return 1;
        printf("ready\n");
        fflush(stdout);
        char line[64];
        while (fgets(line, sizeof line, stdin))
            ;
        mc_store_destroy(s);
        return 0;
    }
    if (argc >= 8 && argc <= 10 && !strcmp(argv[1], "client")) {
        int rc = client(argv, argc);
        if (rc == 2)
            fprintf(stderr, "bench_store_ops client: OP put|get|exist, SIZE > 0, "
                            "BATCH 1..4096, ITERS > 0, SETS 1..1000000\n");
        return rc;
    }
    fprintf(stderr, "usage: bench_store_ops node MASTER METADATA SEGMENT_BYTES\n"
                    "       bench_store_ops client MASTER METADATA OP SIZE BATCH ITERS "
                    "[WARMUP [SETS]]\n");
    return 2;
}
