/* user_buffers.c: memory the caller registers with mc_store_register_buffer: the engine
 * registration and our sorted table of ranges, and the bounds check every zero-copy call
 * runs on its ranges before any RPC or transfer (mc__check_ranges).
 * Owns ubuf_lock and the ubufs table of mc_store; must not move bytes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MC__STORE_TAG

typedef mc__ubuf ubuf;

static void ubuf_rebuild_locked(mc_store *s)
{
    uint64_t m = 0;
    for (size_t i = 0; i < s->n_ubufs; i++) {
        if (s->ubufs[i].base + s->ubufs[i].len > m)
            m = s->ubufs[i].base + s->ubufs[i].len;
        s->ubuf_max_end[i] = m;
    }
}

/* Index of the last buffer with base <= addr, or -1. Caller holds ubuf_lock. */
static long ubuf_find_le(const mc_store *s, uint64_t addr)
{
    size_t lo = 0, hi = s->n_ubufs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->ubufs[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

/* Records [base, base+len) (the engine accepted it; the same base again is a no-op). */
static void ubuf_add(mc_store *s, uint64_t base, uint64_t len)
{
    pthread_rwlock_wrlock(&s->ubuf_lock);
    long i = ubuf_find_le(s, base);
    if (i < 0 || s->ubufs[i].base != base) {
        if (s->n_ubufs == s->cap_ubufs) {
            s->cap_ubufs = s->cap_ubufs ? s->cap_ubufs * 2 : 16;
            s->ubufs = mc_xrealloc(s->ubufs, s->cap_ubufs * sizeof *s->ubufs);
            s->ubuf_max_end =
                mc_xrealloc(s->ubuf_max_end, s->cap_ubufs * sizeof *s->ubuf_max_end);
        }
        /* Insert after the last one with a smaller base (keeps the table sorted), then
         * recompute the prefix maxima (O(n): registration is not on the data path). */
        size_t at = (size_t)(i + 1);
        memmove(s->ubufs + at + 1, s->ubufs + at, (s->n_ubufs - at) * sizeof *s->ubufs);
        s->ubufs[at] = (ubuf){base, len};
        s->n_ubufs++;
        ubuf_rebuild_locked(s);
    }
    pthread_rwlock_unlock(&s->ubuf_lock);
}

/* Forgets the buffer that starts at base (its memory is plain caller memory again). */
static void ubuf_remove(mc_store *s, uint64_t base)
{
    pthread_rwlock_wrlock(&s->ubuf_lock);
    long i = ubuf_find_le(s, base);
    if (i >= 0 && s->ubufs[i].base == base) {
        memmove(s->ubufs + i, s->ubufs + i + 1,
                (s->n_ubufs - (size_t)i - 1) * sizeof *s->ubufs);
        s->n_ubufs--;
        ubuf_rebuild_locked(s);
    }
    pthread_rwlock_unlock(&s->ubuf_lock);
}


void mc__ubuf_clear(mc_store *s)
{
    pthread_rwlock_wrlock(&s->ubuf_lock);
    free(s->ubufs);
    free(s->ubuf_max_end);
    s->ubufs = NULL;
    s->ubuf_max_end = NULL;
    s->n_ubufs = s->cap_ubufs = 0;
    pthread_rwlock_unlock(&s->ubuf_lock);
}

/* The check every zero-copy path runs on the caller's ranges before any RPC or transfer
 * (the `op` it names in the log). Memory that was never registered (or was
 * unregistered) is the caller's and is used as given (upstream: over TCP unregistered
 * memory works). A range that starts inside a buffer registered with
 * mc_store_register_buffer must end inside one of the registered buffers that hold its
 * start: the registration is the caller's statement of how large that buffer is, so
 * running past it is a bad argument, not a transfer to attempt. Returns MC_OK, or
 * MC_INVALID_PARAMS; the first refusal of a call is logged (*logged, when given, says
 * a line was already written for this call). */
int mc__check_ranges(mc_store *s, const mc_store_iov *iov, size_t n, const char *op,
                     size_t index, bool *logged)
{
    if (!s)
        return MC_OK; /* the call itself reports the NULL store */
    int rc = MC_OK;
    pthread_rwlock_rdlock(&s->ubuf_lock);
    for (size_t p = 0; p < n && rc == MC_OK && s->n_ubufs; p++) {
        uint64_t a = (uint64_t)(uintptr_t)iov[p].base, l = iov[p].len;
        if (!l)
            continue;
        const ubuf *hit = NULL;
        bool fits = false;
        /* Walk back from the last buffer starting at or before a; once the prefix
         * maximum of the ends is <= a no earlier buffer can contain a. The range fits
         * when any buffer that holds its start also holds its end. */
        for (long i = ubuf_find_le(s, a); i >= 0 && s->ubuf_max_end[i] > a && !fits; i--) {
            const ubuf *u = &s->ubufs[i];
            if (a >= u->base + u->len)
                continue; /* ends before a; an earlier one may still hold it */
            hit = u;
            fits = l <= u->base + u->len - a;
        }
        if (hit && !fits) {
            rc = MC_INVALID_PARAMS;
            char which[40] = "";
            if (logged)
                snprintf(which, sizeof which, " (key #%zu of the batch)", index);
            if (!logged || !*logged)
                mc_log(MC_LOG_ERROR, TAG,
                       "%s%s: the range 0x%llx + %llu bytes starts inside the buffer "
                       "registered at 0x%llx (%llu bytes) and runs past its end by %llu "
                       "bytes; refused with INVALID_PARAMS before any transfer (register the "
                       "whole buffer, or pass a size that fits)",
                       op, which, (unsigned long long)a, (unsigned long long)l,
                       (unsigned long long)hit->base, (unsigned long long)hit->len,
                       (unsigned long long)(a + l < a ? l : a + l - (hit->base + hit->len)));
            if (logged)
                *logged = true;
        }
    }
    pthread_rwlock_unlock(&s->ubuf_lock);
    return rc;
}

int mc_store_register_buffer(mc_store *s, void *addr, size_t len)
{
    if (!addr || !len)
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    rc = mc_te_register_memory(s->te, addr, len, NULL);
    if (rc == MC_OK) /* recorded only once the engine accepted it */
        ubuf_add(s, (uint64_t)(uintptr_t)addr, len);
    mc__store_leave(s);
    return rc;
}

int mc_store_unregister_buffer(mc_store *s, void *addr)
{
    if (!addr)
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    rc = mc_te_unregister_memory(s->te, addr);
    if (rc == MC_OK)
        ubuf_remove(s, (uint64_t)(uintptr_t)addr);
    mc__store_leave(s);
    return rc;
}
