/* local_buffer.c: the store's local buffer: one mmap'd arena (registered with the engine
 * by setup), sliced by the offset allocator (src/alloc) into mc_store_buffer handles that
 * get_buffer / buffer_alloc return; handles fall back to malloc'd memory when it is full.
 * Owns mc__lbuf and mc_store_buffer; must not touch the rest of mc_store. The arena is
 * refcounted so a handle freed after close (or destroy) stays valid. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "client/internal.h"
#include "common/xalloc.h"
#include "mooncake/status.h"

#define ARENA_ALIGN 64u /* local buffer slices */

mc__lbuf *mc__lbuf_create(uint64_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    mc__lbuf *a = mc_xcalloc(1, sizeof *a);
    a->alloc = mc__alloc_create((uint64_t)(uintptr_t)p, size, ARENA_ALIGN);
    if (!a->alloc) {
        munmap(p, size);
        free(a);
        return NULL;
    }
    atomic_init(&a->refs, 1);
    pthread_mutex_init(&a->lock, NULL);
    a->base = p;
    a->size = size;
    return a;
}

void mc__lbuf_unref(mc__lbuf *a)
{
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    mc__alloc_destroy(a->alloc);
    munmap(a->base, a->size);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

mc_store_buffer *mc__lbuf_take(mc__lbuf *a, uint64_t size)
{
    if (!a || size == 0)
        return NULL;
    uint64_t addr = 0;
    pthread_mutex_lock(&a->lock);
    uint32_t h = mc__alloc_alloc(a->alloc, size, &addr);
    pthread_mutex_unlock(&a->lock);
    if (h == MC__ALLOC_NONE)
        return NULL;
    mc_store_buffer *b = mc_xcalloc(1, sizeof *b);
    atomic_fetch_add(&a->refs, 1); /* the handle's reference: it may outlive the store */
    b->data = (void *)(uintptr_t)addr;
    b->size = size;
    b->ar = a;
    b->handle = h;
    return b;
}

mc_store_buffer *mc__lbuf_buffer_new(mc__lbuf *a, uint64_t size)
{
    if (size > 0) {
        mc_store_buffer *b = mc__lbuf_take(a, size);
        if (b)
            return b;
    }
    mc_store_buffer *b = mc_xcalloc(1, sizeof *b);
    if (size > 0) {
        /* The size is an object's (from the master): a failure is an error, not an abort. */
        if (size > SIZE_MAX || !(b->data = malloc((size_t)size))) {
            free(b);
            return NULL;
        }
    }
    b->size = size;
    return b;
}

void mc_store_buffer_free(mc_store_buffer *b)
{
    if (!b)
        return;
    if (b->ar) {
        pthread_mutex_lock(&b->ar->lock);
        mc__alloc_free(b->ar->alloc, b->handle);
        pthread_mutex_unlock(&b->ar->lock);
        mc__lbuf_unref(b->ar);
    } else {
        free(b->data);
    }
    free(b);
}

void *mc_store_buffer_data(const mc_store_buffer *b)
{
    return b ? b->data : NULL;
}

uint64_t mc_store_buffer_size(const mc_store_buffer *b)
{
    return b ? b->size : 0;
}

int mc_store_buffer_alloc(mc_store *s, uint64_t size, mc_store_buffer **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    *out = NULL;
    if (size == 0)
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    mc_store_buffer *b = mc__lbuf_take(s->ar, size);
    mc__store_leave(s);
    if (!b)
        return MC_NO_AVAILABLE_HANDLE;
    *out = b;
    return MC_OK;
}

int mc_store_local_buffer_info(mc_store *s, void **base, uint64_t *size, uint64_t *used)
{
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    if (base)
        *base = s->ar ? s->ar->base : NULL;
    if (size)
        *size = s->ar ? s->ar->size : 0;
    if (used) {
        *used = 0;
        if (s->ar) {
            pthread_mutex_lock(&s->ar->lock);
            *used = mc__alloc_used(s->ar->alloc);
            pthread_mutex_unlock(&s->ar->lock);
        }
    }
    mc__store_leave(s);
    return MC_OK;
}
