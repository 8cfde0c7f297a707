/* shared_fs.c: the names of shared-FS DISK replicas (upstream --root_fs_dir, §4.10 of
 * upstream-mooncake.md; docs/ssd-tier.md "Shared-FS DISK replicas").
 *
 * With cfg.fs_dir the master runs offload.c in its shared mode: every object put is
 * queued (at put_end) as a WRITE for the client whose segment holds its memory replica;
 * that client writes the object to "<fs_dir>/<name>" and reports through offload_end,
 * and the master records a DISK replica (F_DISK, owned by MC__SHARED_FS_OWNER). Readers
 * get a DISK descriptor whose transport_endpoint is the file's path and read it from the
 * shared directory themselves. The master never opens the directory: the name is a
 * function of the key alone, computed here and by the client. */
#include <stdio.h>

#include "master/internal.h"

void mc__shared_fs_path(const char *dir, const void *key, size_t len, uint64_t gen, char *out,
                        mc_master_uuid *id)
{
    XXH128_hash_t h = XXH3_128bits(key, len);
    snprintf(out, MC_MASTER_NAME_MAX, "%s/%016llx%016llx-%016llx.mcsf", dir,
             (unsigned long long)h.high64, (unsigned long long)h.low64,
             (unsigned long long)gen);
    if (id)
        *id = (mc_master_uuid){h.high64, h.low64 ^ gen};
}

void mc__shared_fs_desc(const char *dir, obj *o, uint64_t gen, mc_master_replica *d)
{
    memset(d, 0, sizeof *d);
    mc__shared_fs_path(dir, okey(o), o->key_len, gen, d->transport_endpoint, &d->segment_id);
    d->address = 0;
    d->size = o->size;
    d->status = MC_MASTER_REPLICA_COMPLETE;
    d->type = MC_MASTER_REPLICA_DISK;
    memcpy(d->protocol, "file", 5);
}
