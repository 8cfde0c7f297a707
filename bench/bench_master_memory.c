/* bench_master_memory: master RSS per object at 1 million objects, by key length.
 *
 *   bench_master_memory [objects=1000000] [key_len ...]   (default key lengths 16 64 256)
 *
 * For each key length, a fresh child process creates a service (default config: 1024
 * shards), mounts one segment large enough (metadata only), and inserts `objects` objects
 * of 4 KiB with put_start + put_end (one replica each). RSS (/proc/self/statm) is read
 * before and after; per object = delta / objects. Target: <= 200 bytes + key length.
 * Peer (another fresh child, same run): the floor of keeping only the keys, i.e.
 * `objects` separate glibc malloc(key_len) blocks plus one pointer each, measured the
 * same way. The
 * put_start+put_end rate on one thread is printed too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "master/master_service.h"
#include "mooncake/mc_time.h"

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (!f || fscanf(f, "%lu %lu", &size, &res) != 2)
        res = 0;
    if (f)
        fclose(f);
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void make_key(char *k, size_t len, size_t i)
{
    memset(k, 'k', len);
    char num[24];
    int n = snprintf(num, sizeof num, "%zu", i);
    size_t off = len > (size_t)n ? len - (size_t)n : 0;
    memcpy(k + off, num, len - off < (size_t)n ? len - off : (size_t)n);
}

/* The peer: the keys alone, one malloc each plus a pointer. Returns bytes/object. */
static double keys_only(size_t objects, size_t klen)
{
    uint64_t r0 = rss_bytes();
    char **keys = malloc(objects * sizeof(*keys));
    for (size_t i = 0; i < objects; i++) {
        keys[i] = malloc(klen);
        make_key(keys[i], klen, i);
    }
    return (double)(rss_bytes() - r0) / (double)objects;
}

static int ours(size_t objects, size_t klen, double peer)
{
    char *key = malloc(klen);
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    mc_master_service *svc;
    uint64_t r1 = rss_bytes();
    if (mc_master_service_create(&cfg, &svc))
        return 1;
    mc_master_segment seg = {.id = {1, 1}, .name = "bench:1", .base = 1ull << 44,
                             .size = 1ull << 42};
    mc_master_uuid client = {1, 1};
    if (mc_master_service_mount_segment(svc, &seg, client))
        return 1;
    mc_master_put_config pc;
    mc_master_put_config_init(&pc);
    mc_master_replica_list *out = malloc(sizeof(*out));
    uint64_t t0 = mc_now_ns();
    for (size_t i = 0; i < objects; i++) {
        make_key(key, klen, i);
        if (mc_master_service_put_start(svc, client, key, klen, 4096, &pc, out) ||
            mc_master_service_put_end(svc, client, key, klen)) {
            fprintf(stderr, "put %zu failed\n", i);
            return 1;
        }
    }
    uint64_t t1 = mc_now_ns();
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    double b = (double)(rss_bytes() - r1) / (double)objects;
    printf("objects=%zu key_len=%zu: master RSS %.1f B/object = key_len + %.1f "
           "(target key_len + 200); keys-only malloc floor %.1f B/object; ratio %.2f; "
           "put_start+put_end %.0f ns/object on 1 thread (keys in index: %llu)\n",
           objects, klen, b, b - (double)klen, peer, b / peer,
           (double)(t1 - t0) / (double)objects, (unsigned long long)st.key_count);
    fflush(stdout);
    mc_master_service_destroy(svc);
    free(out);
    free(key);
    return 0;
}

/* Runs fn in a child (so every measurement starts from a fresh heap); the child sends
 * its figure back through a pipe. */
static int in_child(size_t objects, size_t klen, double peer, double *figure)
{
    int fd[2];
    if (pipe(fd))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        double v = 0;
        int rc = 0;
        if (figure)
            v = keys_only(objects, klen);
        else
            rc = ours(objects, klen, peer);
        if (write(fd[1], &v, sizeof v) != sizeof v)
            rc = 1;
        _exit(rc);
    }
    close(fd[1]);
    double v = 0;
    ssize_t got = pid > 0 ? read(fd[0], &v, sizeof v) : -1;
    close(fd[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) || got != sizeof v)
        return 1;
    if (figure)
        *figure = v;
    return 0;
}

int main(int argc, char **argv)
{
    size_t objects = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    size_t lens[16] = {16, 64, 256};
    size_t nl = 3;
    if (argc > 2) {
        nl = 0;
        for (int i = 2; i < argc && nl < 16; i++)
            lens[nl++] = strtoull(argv[i], NULL, 10);
    }
    if (objects < 1000 || objects > 100000000) {
        fprintf(stderr,
                "usage: bench_master_memory [objects 1000..1e8] [key_len 1..4096 ...]\n");
        return 2;
    }
    for (size_t i = 0; i < nl; i++) {
        if (lens[i] < 1 || lens[i] > MC_MASTER_KEY_MAX) {
            fprintf(stderr, "key_len must be 1..%u\n", MC_MASTER_KEY_MAX);
            return 2;
        }
        double peer;
        if (in_child(objects, lens[i], 0, &peer) || in_child(objects, lens[i], peer, NULL))
            return 1;
    }
    return 0;
}
