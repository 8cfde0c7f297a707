/* user_buffers.c: memory the caller registers with mc_store_register_buffer: our table
 * of ranges (a treap, O(log n) per call; not given to the engine, see store.h), and the
 * bounds check every zero-copy call runs on its ranges before any RPC or transfer
 * (mc__check_ranges).
 * Owns ubuf_lock and the ubufs table of mc_store; must not move bytes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "client/ranges_internal.h"
#include "common/mix.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MC__STORE_TAG

typedef mc__ubuf ubuf;

/* ---- the treap (caller holds ubuf_lock; written only under it exclusively) ---- */

static uint64_t end_of(const ubuf *u)
{
    return u->base + u->len; /* register_buffer refused ranges that wrap */
}

static void pull(ubuf *u)
{
    uint64_t m = end_of(u);
    if (u->l && u->l->max_end > m)
        m = u->l->max_end;
    if (u->r && u->r->max_end > m)
        m = u->r->max_end;
    u->max_end = m;
}

static ubuf *rot_right(ubuf *t)
{
    ubuf *l = t->l;
    t->l = l->r;
    l->r = t;
    pull(t);
    pull(l);
    return l;
}

static ubuf *rot_left(ubuf *t)
{
    ubuf *r = t->r;
    t->r = r->l;
    r->l = t;
    pull(t);
    pull(r);
    return r;
}

/* Inserts n (its base is not in t). Expected depth O(log n). */
static ubuf *tr_insert(ubuf *t, ubuf *n)
{
    if (!t)
        return n;
    if (n->base < t->base) {
        t->l = tr_insert(t->l, n);
        if (t->l->prio > t->prio)
            return rot_right(t);
    } else {
        t->r = tr_insert(t->r, n);
        if (t->r->prio > t->prio)
            return rot_left(t);
    }
    pull(t);
    return t;
}

/* Joins a and b, every base of a below every base of b. */
static ubuf *tr_merge(ubuf *a, ubuf *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->prio > b->prio) {
        a->r = tr_merge(a->r, b);
        pull(a);
        return a;
    }
    b->l = tr_merge(a, b->l);
    pull(b);
    return b;
}

/* Takes the node with this base out of t into *out (NULL when there is none). */
static ubuf *tr_remove(ubuf *t, uint64_t base, ubuf **out)
{
    if (!t)
        return NULL;
    if (base == t->base) {
        *out = t;
        return tr_merge(t->l, t->r);
    }
    if (base < t->base)
        t->l = tr_remove(t->l, base, out);
    else
        t->r = tr_remove(t->r, base, out);
    pull(t);
    return t;
}

static ubuf *tr_find(ubuf *t, uint64_t base)
{
    while (t && t->base != base)
        t = base < t->base ? t->l : t->r;
    return t;
}

/* Some buffer with base <= a whose end is >= target, or NULL: one walk down the tree.
 * At a node with base <= a, the node and its whole left subtree qualify by base, and
 * the subtree maximum says at once whether the left subtree holds an end that far. */
static const ubuf *tr_stab(const ubuf *t, uint64_t a, uint64_t target)
{
    while (t) {
        if (t->base > a) {
            t = t->l;
            continue;
        }
        if (end_of(t) >= target)
            return t;
        if (t->l && t->l->max_end >= target) {
            /* every base there is <= a: follow the maxima down to one that reaches */
            t = t->l;
            for (;;) {
                if (t->l && t->l->max_end >= target)
                    t = t->l;
                else if (end_of(t) >= target)
                    return t;
                else
                    t = t->r;
            }
        }
        t = t->r;
    }
    return NULL;
}

static void tr_free(ubuf *t)
{
    while (t) {
        tr_free(t->l);
        ubuf *r = t->r;
        free(t);
        t = r;
    }
}

/* Records [base, base+len). MC_OK (also for the same range again), MC_INVALID_PARAMS
 * (same base, another length), MC_BUFFER_OVERFLOW (the table is full; logged). */
static int ubuf_add(mc_store *s, uint64_t base, uint64_t len)
{
    int rc = MC_OK;
    pthread_rwlock_wrlock(&s->ubuf_lock);
    const ubuf *old = tr_find(s->ubuf_root, base);
    if (old) {
        rc = old->len == len ? MC_OK : MC_INVALID_PARAMS;
        if (rc != MC_OK)
            mc_log(MC_LOG_ERROR, TAG,
                   "register_buffer: 0x%llx is registered already with %llu bytes, not %llu "
                   "(unregister it first)",
                   (unsigned long long)base, (unsigned long long)old->len,
                   (unsigned long long)len);
    } else if (s->n_ubufs >= MC_STORE_MAX_USER_BUFFERS) {
        rc = MC_BUFFER_OVERFLOW;
        mc_log(MC_LOG_ERROR, TAG,
               "register_buffer: %u buffers are registered, the limit "
               "(MC_STORE_MAX_USER_BUFFERS); refused with BUFFER_OVERFLOW (unregister "
               "some, or register one larger buffer around them)",
               MC_STORE_MAX_USER_BUFFERS);
    } else {
        ubuf *n = mc_xcalloc(1, sizeof *n);
        n->base = base;
        n->len = len;
        n->max_end = base + len;
        n->prio = mc_splitmix64(s->ubuf_seq++);
        s->ubuf_root = tr_insert(s->ubuf_root, n);
        s->n_ubufs++;
    }
    pthread_rwlock_unlock(&s->ubuf_lock);
    return rc;
}

/* Forgets the buffer that starts at base. MC_OK, or MC_INVALID_PARAMS when none does. */
static int ubuf_remove(mc_store *s, uint64_t base)
{
    ubuf *gone = NULL;
    pthread_rwlock_wrlock(&s->ubuf_lock);
    s->ubuf_root = tr_remove(s->ubuf_root, base, &gone);
    if (gone)
        s->n_ubufs--;
    pthread_rwlock_unlock(&s->ubuf_lock);
    free(gone);
    return gone ? MC_OK : MC_INVALID_PARAMS;
}

void mc__ubuf_clear(mc_store *s)
{
    pthread_rwlock_wrlock(&s->ubuf_lock);
    tr_free(s->ubuf_root);
    s->ubuf_root = NULL;
    s->n_ubufs = 0;
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
    for (size_t p = 0; p < n && rc == MC_OK && s->ubuf_root; p++) {
        uint64_t a = (uint64_t)(uintptr_t)iov[p].base, l = iov[p].len;
        if (!l)
            continue;
        /* A buffer that holds the start (end > a), and whether one of those also holds
         * the end (end >= a + l; a range past the address space fits none). */
        const ubuf *hit = a == UINT64_MAX ? NULL : tr_stab(s->ubuf_root, a, a + 1);
        bool fits = hit && l <= UINT64_MAX - a && tr_stab(s->ubuf_root, a, a + l);
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
    if (!addr || !len || (uint64_t)len > UINT64_MAX - (uint64_t)(uintptr_t)addr)
        return MC_INVALID_PARAMS;
    int rc = mc__store_enter(s);
    if (rc != MC_OK)
        return rc;
    rc = ubuf_add(s, (uint64_t)(uintptr_t)addr, len);
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
    rc = ubuf_remove(s, (uint64_t)(uintptr_t)addr);
    mc__store_leave(s);
    return rc;
}

/* Whether one registration holds all of [addr, addr+len) (len >= 1): the ranged reads'
 * destination check (ranges.c; declared in client/ranges_internal.h). Takes ubuf_lock
 * shared; the caller holds life shared. */
bool mc__ubuf_holds(mc_store *s, const void *addr, uint64_t len)
{
    uint64_t a = (uint64_t)(uintptr_t)addr;
    if (!s || len == 0 || len > UINT64_MAX - a)
        return false;
    pthread_rwlock_rdlock(&s->ubuf_lock);
    bool ok = s->ubuf_root && tr_stab(s->ubuf_root, a, a + len) != NULL;
    pthread_rwlock_unlock(&s->ubuf_lock);
    return ok;
}
