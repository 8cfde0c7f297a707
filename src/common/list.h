/* common/list.h: the one intrusive doubly-linked list (circular, with a sentinel head).
 * Embed an mc_list in a struct, link it into a head, get the struct back with
 * MC_CONTAINER_OF. Owns no memory; not thread-safe (the owner's lock guards it).
 * All operations are O(1) except mc_list_count. */
#ifndef MOONCAKE_COMMON_LIST_H
#define MOONCAKE_COMMON_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mc_list {
    struct mc_list *prev, *next;
} mc_list;

#define MC_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* mc_list_init: an empty list (head) or an unlinked node (mc_list_linked() false). */
static inline void mc_list_init(mc_list *h) { h->prev = h->next = h; }
static inline bool mc_list_empty(const mc_list *h) { return h->next == h; }
/* mc_list_linked: a node initialised with mc_list_init is linked into some list. */
static inline bool mc_list_linked(const mc_list *n) { return n->next != n; }

static inline void mc__list_between(mc_list *n, mc_list *prev, mc_list *next)
{
    n->prev = prev;
    n->next = next;
    prev->next = n;
    next->prev = n;
}
/* mc_list_push_back / push_front: links n (unlinked) at the tail / head of h. */
static inline void mc_list_push_back(mc_list *h, mc_list *n) { mc__list_between(n, h->prev, h); }
static inline void mc_list_push_front(mc_list *h, mc_list *n) { mc__list_between(n, h, h->next); }
/* mc_list_remove: unlinks n and leaves it unlinked (safe to remove twice). */
static inline void mc_list_remove(mc_list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
/* mc_list_front / back: the first / last node, NULL when empty. */
static inline mc_list *mc_list_front(const mc_list *h) { return mc_list_empty(h) ? NULL : h->next; }
static inline mc_list *mc_list_back(const mc_list *h) { return mc_list_empty(h) ? NULL : h->prev; }
/* mc_list_pop_front: unlinks and returns the first node, NULL when empty. */
static inline mc_list *mc_list_pop_front(mc_list *h)
{
    mc_list *n = mc_list_front(h);
    if (n)
        mc_list_remove(n);
    return n;
}
/* mc_list_move_back: moves n (linked anywhere) to the tail of h (LRU touch). */
static inline void mc_list_move_back(mc_list *h, mc_list *n)
{
    mc_list_remove(n);
    mc_list_push_back(h, n);
}
/* mc_list_splice_back: moves every node of from to the tail of h; from ends empty. */
static inline void mc_list_splice_back(mc_list *h, mc_list *from)
{
    if (mc_list_empty(from))
        return;
    mc_list *first = from->next, *last = from->prev;
    first->prev = h->prev;
    h->prev->next = first;
    last->next = h;
    h->prev = last;
    mc_list_init(from);
}
static inline size_t mc_list_count(const mc_list *h)
{
    size_t n = 0;
    for (const mc_list *p = h->next; p != h; p = p->next)
        n++;
    return n;
}

/* MC_LIST_FOREACH(it, head): it runs over the nodes; it may be removed (not others).
 * MC_LIST_FOREACH_ENTRY(var, head, type, member): var runs over the containing structs. */
#define MC_LIST_FOREACH(it, head)                                                        \
    for (mc_list *it = (head)->next, *it##_next_ = it->next; it != (head);               \
         it = it##_next_, it##_next_ = it->next)
#define MC_LIST_FOREACH_ENTRY(var, head, type, member)                                   \
    for (mc_list *var##_it_ = (head)->next, *var##_nx_ = var##_it_->next;                \
         var##_it_ != (head) && ((var) = MC_CONTAINER_OF(var##_it_, type, member), 1);    \
         var##_it_ = var##_nx_, var##_nx_ = var##_it_->next)

#endif
