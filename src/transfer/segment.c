/* segment.c: this engine's own segment: its descriptor and publishing, memory
 * registration (user memory) and memfd-backed shared memory. Must not touch peers or
 * the data path. See include/mooncake/transfer_engine.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"
#include "transfer/internal.h"

/* ---- own descriptor ---- */

static char *segment_key(mc_te *te)
{
    const char *prefix = mc_metadata_prefix(te->md);
    const char *mid = strchr(te->name, '/') ? "" : "ram/";
    size_t n = strlen(prefix) + strlen(mid) + strlen(te->name) + 1;
    char *k = mc_xmalloc(n);
    snprintf(k, n, "%s%s%s", prefix, mid, te->name);
    return k;
}

/* Our rpc_meta value: {host, handshake port}. */
mc_rpc_meta mc__te_own_rpc_meta(const mc_te *te)
{
    mc_rpc_meta meta = {.rpc_port = (uint16_t)te->rpc_port};
    snprintf(meta.ip_or_host_name, sizeof meta.ip_or_host_name, "%s", te->host);
    return meta;
}

MC_API int mc_te_republish(mc_te *te)
{
    /* All of our metadata: a restarted metadata server (e.g. the one embedded in a
     * restarted master) lost rpc_meta as well as the descriptor, and without rpc_meta a
     * peer that has not cached our address cannot open our segment. Writing the same
     * value again is accepted by the write-once rule ("metadata unchanged"). */
    if (!te->p2p) {
        mc_rpc_meta meta = mc__te_own_rpc_meta(te);
        int rc = mc_metadata_put_rpc_meta(te->md, te->name, &meta);
        if (rc != MC_OK) {
            mc_log(MC_LOG_ERROR, TE_TAG, "republishing rpc_meta for %s to the metadata "
                   "server %s failed: %s", te->name, mc_metadata_conn_of(te->md)->url,
                   mc_strerror(rc));
            return rc;
        }
    }
    return mc__te_publish(te);
}

int mc__te_publish(mc_te *te)
{
    pthread_mutex_lock(&te->publish_lock);
    pthread_mutex_lock(&te->desc_lock);
    char *json = NULL;
    size_t len = 0;
    int rc = mc_segment_desc_encode(&te->desc, &json, &len);
    if (rc == MC_OK) {
        free(te->desc_json);
        te->desc_json = json;
        te->desc_json_len = len;
    }
    char *copy = NULL;
    if (rc == MC_OK && !te->p2p) {
        copy = mc_xmalloc(len + 1);
        memcpy(copy, json, len + 1);
    }
    pthread_mutex_unlock(&te->desc_lock);
    if (copy) {
        char *key = segment_key(te);
        rc = mc_metadata_put(te->md, key, copy, len);
        if (rc != MC_OK)
            mc_log(MC_LOG_ERROR, TE_TAG, "publishing %s failed: %s", key, mc_strerror(rc));
        free(key);
        free(copy);
    }
    pthread_mutex_unlock(&te->publish_lock);
    return rc;
}

/* ---- memory ---- */

static bool range_ok(const void *addr, size_t len)
{
    uint64_t a = (uint64_t)(uintptr_t)addr;
    return addr && len && a <= (uint64_t)MC_SEGMENT_MAX_ADDR &&
           (uint64_t)len <= (uint64_t)MC_SEGMENT_MAX_ADDR - a;
}

int mc_te_batch_register_memory(mc_te *te, void *const *addrs, const size_t *lengths,
                                size_t n, const char *location)
{
    (void)location;
    if (!te || !te->initialized || (n && (!addrs || !lengths)))
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    if (n > MC_SEGMENT_MAX_BUFFERS)
        return MC_BUFFER_OVERFLOW;
    for (size_t i = 0; i < n; i++)
        if (!range_ok(addrs[i], lengths[i]))
            return MC_INVALID_PARAMS;
    bool *added = mc_xcalloc(n, sizeof *added);
    int rc = MC_OK;
    size_t i;
    for (i = 0; i < n; i++) {
        int e = mc__te_region_add(te, (uint64_t)(uintptr_t)addrs[i], lengths[i], TE_REG_USER,
                                  -1);
        if (e == -EEXIST)
            continue;
        if (e < 0) {
            rc = e == -ENOSPC ? MC_BUFFER_OVERFLOW : MC_INVALID_PARAMS;
            break;
        }
        added[i] = true;
    }
    if (rc != MC_OK) {
        for (size_t j = 0; j < i; j++) {
            te_region *r;
            if (added[j] && mc__te_region_remove(te, (uint64_t)(uintptr_t)addrs[j],
                                                 1 << TE_REG_USER, &r) == 0)
                mc__te_region_drain(te, r);
        }
        free(added);
        return rc;
    }
    pthread_mutex_lock(&te->desc_lock);
    for (i = 0; i < n; i++)
        if (added[i])
            mc_segment_desc_add_buffer(&te->desc, te->name, (uint64_t)(uintptr_t)addrs[i],
                                       lengths[i], false);
    pthread_mutex_unlock(&te->desc_lock);
    free(added);
    return mc__te_publish(te);
}

int mc_te_register_memory(mc_te *te, void *addr, size_t length, const char *location)
{
    return mc_te_batch_register_memory(te, &addr, &length, 1, location);
}

static bool has_region(mc_te *te, uint64_t base, int kind)
{
    bool found = false;
    pthread_rwlock_rdlock(&te->reg_lock);
    for (size_t i = 0; i < te->n_regs && !found; i++)
        found = te->regs[i]->base == base && te->regs[i]->kind == kind;
    pthread_rwlock_unlock(&te->reg_lock);
    return found;
}

int mc_te_batch_unregister_memory(mc_te *te, void *const *addrs, size_t n)
{
    if (!te || !te->initialized || (n && !addrs))
        return MC_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    for (size_t i = 0; i < n; i++)
        if (!has_region(te, (uint64_t)(uintptr_t)addrs[i], TE_REG_USER))
            return MC_INVALID_PARAMS;
    te_region **rs = mc_xcalloc(n, sizeof *rs);
    for (size_t i = 0; i < n; i++) {
        uint64_t a = (uint64_t)(uintptr_t)addrs[i];
        if (mc__te_region_remove(te, a, 1 << TE_REG_USER, &rs[i]) == 0) {
            pthread_mutex_lock(&te->desc_lock);
            mc_segment_desc_remove_buffer(&te->desc, a);
            pthread_mutex_unlock(&te->desc_lock);
        }
    }
    int rc = mc__te_publish(te);
    for (size_t i = 0; i < n; i++)
        if (rs[i])
            mc__te_region_drain(te, rs[i]);
    free(rs);
    return rc;
}

int mc_te_unregister_memory(mc_te *te, void *addr)
{
    return mc_te_batch_unregister_memory(te, &addr, 1);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* MC_TE_PREFAULT (issue 17): populates a new shared segment's pages before it is
 * registered, so the first puts into it do not pay a page fault per 4 KiB (the replay's
 * slow first seconds). MADV_POPULATE_WRITE where the kernel has it, else one write of 0
 * per page: the memfd is new and zero-filled, and no peer has it yet, so the writes
 * change no byte. The memory is committed at once (size bytes of RSS). */
static void prefault(void *p, uint64_t size, size_t pg)
{
    if (madvise(p, size, MADV_POPULATE_WRITE) == 0)
        return;
    volatile char *c = p;
    for (uint64_t off = 0; off < size; off += pg)
        c[off] = 0;
}

int mc__te_shared_create(mc_te *te, uint64_t len, int kind, void **out)
{
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t size = (len + (uint64_t)pg - 1) & ~((uint64_t)pg - 1);
    int fd = memfd_create("mooncake-te", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return MC_NO_AVAILABLE_HANDLE;
    if (ftruncate(fd, (off_t)size) < 0) {
        close(fd);
        return MC_NO_AVAILABLE_HANDLE;
    }
    /* peers get this fd: they must never be able to shrink it under us (SIGBUS) */
    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return MC_NO_AVAILABLE_HANDLE;
    }
    if (te->prefault)
        prefault(p, size, (size_t)pg);
    int e = mc__te_region_add(te, (uint64_t)(uintptr_t)p, size, kind, fd);
    if (e < 0) {
        munmap(p, size);
        close(fd);
        return e == -ENOSPC ? MC_BUFFER_OVERFLOW : MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&te->desc_lock);
    mc_segment_desc_add_buffer(&te->desc, te->name, (uint64_t)(uintptr_t)p, size,
                               te->shm_lfd >= 0);
    pthread_mutex_unlock(&te->desc_lock);
    *out = p;
    int rc = mc__te_publish(te);
    if (rc != MC_OK)
        mc_log(MC_LOG_WARN, TE_TAG, "shared memory registered locally only: %s",
               mc_strerror(rc));
    return MC_OK;
}

int mc__te_shared_destroy(mc_te *te, void *addr, int kind)
{
    te_region *r;
    if (mc__te_region_remove(te, (uint64_t)(uintptr_t)addr, 1 << kind, &r) < 0)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&te->desc_lock);
    mc_segment_desc_remove_buffer(&te->desc, (uint64_t)(uintptr_t)addr);
    pthread_mutex_unlock(&te->desc_lock);
    mc__te_publish(te);
    mc__te_region_drain(te, r);
    return MC_OK;
}

int mc_te_alloc_shared(mc_te *te, size_t length, void **out)
{
    if (!te || !out || !te->initialized || length == 0 ||
        length > (uint64_t)MC_SEGMENT_MAX_ADDR / 2)
        return MC_INVALID_PARAMS;
    return mc__te_shared_create(te, length, TE_REG_SHARED, out);
}

int mc_te_free_shared(mc_te *te, void *addr)
{
    if (!te || !addr || !te->initialized)
        return MC_INVALID_PARAMS;
    /* managed buffers' dedicated regions are freed through free_managed_buffer */
    pthread_mutex_lock(&te->managed_lock);
    int rc = mc__te_shared_destroy(te, addr, TE_REG_SHARED);
    pthread_mutex_unlock(&te->managed_lock);
    return rc;
}
