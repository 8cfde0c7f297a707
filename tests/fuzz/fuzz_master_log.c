/* libFuzzer target: the master's mutation log / snapshot parser and its consumers
 * (src/master/oplog_codec.c, snapshot.c, compiled in for coverage).
 * First byte even: the rest is a stream of frames, parsed; every frame that parses must
 * re-encode to a frame that parses to one record again, and is applied to a real
 * service through mc_master_log_apply (the standby path), which must accept or refuse
 * it cleanly. First byte odd: the rest is written as both a snapshot file and a log
 * file of a fresh directory, and a service is restored from it (the restart path): it
 * must start, whatever the bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/master_service.h"
#include "master/oplog_codec.h"
#include "master/persist.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int one(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    (void)lsn;
    (void)rec;
    *(int *)ctx += 1;
    return 0;
}

static int check_and_apply(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    size_t n = mc__log_frame_size(rec);
    uint8_t *buf = malloc(n);
    if (!buf)
        abort();
    if (mc__log_frame_write(buf, lsn, rec) != n)
        abort();
    int count = 0;
    size_t good;
    if (n - MC_MASTER_LOG_HDR <= MC_MASTER_LOG_FRAME_MAX &&
        (mc_master_log_parse(buf, n, one, &count, &good, NULL) != MC_MASTER_LOG_END ||
         count != 1 || good != n))
        abort();
    free(buf);
    int rc = mc_master_log_apply(ctx, lsn, rec);
    if (rc != MC_OK && rc != MC_INVALID_PARAMS && rc != MC_NO_AVAILABLE_HANDLE &&
        rc != MC_SEGMENT_ALREADY_EXISTS)
        abort();
    return 0;
}

static void write_file(const char *path, const char *magic, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    fwrite(magic, 1, MC_MASTER_LOG_MAGIC_LEN, f);
    fwrite(data, 1, size, f);
    fclose(f);
}

/* Empties dir (files only: the persistence writes no subdirectory). */
static void clear_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        mc_log_set_level(MC_LOG_OFF);
        init = 1;
    }
    if (size < 1)
        return 0;
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    cfg.shard_count = 2;
    mc_master_service *svc = NULL;
    if (mc_master_service_create(&cfg, &svc) != MC_OK)
        abort();
    if (!(data[0] & 1)) {
        size_t good;
        mc_master_log_parse(data + 1, size - 1, check_and_apply, svc, &good, NULL);
        if (good > size - 1)
            abort();
    } else {
        char dir[64], path[160];
        snprintf(dir, sizeof dir, "/tmp/fuzz-master-log-%d", (int)getpid());
        mkdir(dir, 0700);
        clear_dir(dir);
        snprintf(path, sizeof path, "%s/snapshot-%020d.snap", dir, 3);
        write_file(path, MC_MASTER_SNAP_MAGIC, data + 1, size - 1);
        snprintf(path, sizeof path, "%s/oplog-%020d.log", dir, 1);
        write_file(path, MC_MASTER_LOG_MAGIC, data + 1, size - 1);
        mc_master_persist_opts o = {.dir = dir, .restore = true, .interval_s = 3600,
                                    .retention = 1, .sync = MC_MASTER_LOG_SYNC_NONE};
        mc_master_persist *p = NULL;
        char err[256];
        if (mc_master_persist_start(svc, &o, &p, NULL, err, sizeof err) != MC_OK)
            abort();
        mc_master_persist_stop(p);
        clear_dir(dir);
        rmdir(dir);
    }
    mc_master_service_destroy(svc);
    return 0;
}
