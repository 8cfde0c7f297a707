/* te_peer_helper.c: a peer engine in its own process, for test_te_faults (killed,
 * frozen and restarted peers). Usage: te_peer_helper PORT SIZE SEED [shm]
 * Starts a P2PHANDSHAKE engine on 127.0.0.1:PORT (0 = any), registers SIZE bytes filled
 * with te_fill(SEED) (memfd-backed with "shm"), prints "READY <segment> <addr>" and
 * serves until stdin closes. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "te_test_util.h"

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    char host[64];
    int port = atoi(argv[1]);
    size_t size = strtoull(argv[2], NULL, 0);
    uint64_t seed = strtoull(argv[3], NULL, 0);
    int shm = argc > 4;
    if (port)
        snprintf(host, sizeof host, "127.0.0.1:%d", port);
    else
        snprintf(host, sizeof host, "127.0.0.1");
    mc_te *te;
    if (mc_te_create(NULL, &te) != MC_OK ||
        mc_te_initialize(te, host, "P2PHANDSHAKE", "tcp", "") != MC_OK)
        return 1;
    void *mem;
    if (shm) {
        if (mc_te_alloc_shared(te, size, &mem) != MC_OK)
            return 1;
    } else {
        mem = malloc(size);
        if (!mem || mc_te_register_memory(te, mem, size, NULL) != MC_OK)
            return 1;
    }
    te_fill(mem, size, seed);
    printf("READY %s %llu\n", mc_te_segment_name(te), (unsigned long long)(uintptr_t)mem);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    mc_te_destroy(te);
    if (!shm)
        free(mem);
    return 0;
}
