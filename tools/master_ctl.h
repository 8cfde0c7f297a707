/* master_ctl.h: what the two files of mooncake_master_ctl share: mooncake_master_ctl.c
 * (flags, the JSON commands, main) and master_ctl_bench.c (the `bench` subcommand). Not
 * a library: only these two files include it. */
#ifndef MC_TOOLS_MASTER_CTL_H
#define MC_TOOLS_MASTER_CTL_H

#include <jansson.h>
#include <stdint.h>

#include "client/master_client.h"

/* The bench flags (--op, --batch, --threads, --seconds, --keys, --value_size), filled by
 * mc_options_main in mooncake_master_ctl.c. */
typedef struct mc_ctl_bench_opts {
    char *op; /* "put" or "get" */
    int64_t batch, threads, keys, value_size;
    double seconds;
} mc_ctl_bench_opts;

/* mc_ctl_bench: mounts one metadata-only segment as `client_id`, runs o->threads threads
 * of o->op calls on `cli` for o->seconds, unmounts, and prints one JSON line (calls,
 * items, failures, rates). Returns the exit code: 0, 1 (mount / fill failed), 2 (bad
 * --op). Main thread only. */
int mc_ctl_bench(mc_master_client *cli, mc_master_uuid client_id, const mc_ctl_bench_opts *o);

/* mc_ctl_random_uuid: 128 random bits (getrandom, else time and pid). */
mc_master_uuid mc_ctl_random_uuid(void);

/* mc_ctl_emit: prints r as one compact JSON line on stdout (flushed) and frees r. */
void mc_ctl_emit(json_t *r);

#endif
