/* loop.c: see loop.h. */
#include "net/loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/list.h"
#include "common/spin.h"
#include "common/xalloc.h"
#include "mooncake/mc_time.h"

typedef struct handler {
    int fd;
    uint32_t events;
    mc_loop_io_fn fn;
    void *arg;
    bool dead;            /* set by mc_loop_del; freed after the current batch */
    struct handler *next; /* hash chain, or the graveyard list once dead */
} handler;

struct mc_loop_timer {
    uint64_t due_ms;
    uint64_t interval_ms;
    uint64_t seq; /* FIFO order among timers with the same due time */
    mc_loop_task_fn fn;
    void *arg;
    bool cancelled;
    size_t heap_index;
};

typedef struct task {
    mc_loop_task_fn fn;
    void *arg;
    mc_list link; /* in mc_loop.tasks */
} task;

#define HANDLER_BUCKETS 1024

struct mc_loop {
    int epfd;
    int wakefd;
    pthread_t thread;      /* valid while running */
    bool has_thread;       /* started by mc_loop_start_thread */
    volatile int running;  /* 1 while mc_loop_run is on some thread */
    pthread_t run_thread;  /* the thread inside mc_loop_run */
    uint64_t now_ms;
    handler *buckets[HANDLER_BUCKETS]; /* loop thread only */
    handler *graveyard;                /* loop thread only */
    mc_loop_timer **heap;              /* loop thread only; min-heap on (due, seq) */
    size_t heap_len, heap_cap;
    uint64_t timer_seq;
    pthread_mutex_t task_lock;
    mc_list tasks;               /* FIFO of task.link; guarded by task_lock */
    bool stopping;               /* guarded by task_lock */
    bool stopped;                /* guarded by task_lock: posts refused */
    mc_spin_site spin;           /* loop thread only: its poll window; spin.cap_us > 0:
                                    it polls (mc_loop_set_busy_poll) */
};

static handler **bucket_of(mc_loop *loop, int fd)
{
    return &loop->buckets[(unsigned)fd % HANDLER_BUCKETS];
}

static handler *find_handler(mc_loop *loop, int fd)
{
    for (handler *h = *bucket_of(loop, fd); h; h = h->next)
        if (h->fd == fd)
            return h;
    return NULL;
}

int mc_loop_create(mc_loop **out)
{
    mc_loop *loop = mc_xcalloc(1, sizeof *loop);
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0) {
        int e = -errno;
        free(loop);
        return e;
    }
    loop->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (loop->wakefd < 0) {
        int e = -errno;
        close(loop->epfd);
        free(loop);
        return e;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wakefd, &ev) < 0) {
        int e = -errno;
        close(loop->wakefd);
        close(loop->epfd);
        free(loop);
        return e;
    }
    pthread_mutex_init(&loop->task_lock, NULL);
    mc_list_init(&loop->tasks);
    loop->now_ms = mc_now_ms();
    *out = loop;
    return 0;
}

static void free_graveyard(mc_loop *loop)
{
    while (loop->graveyard) {
        handler *h = loop->graveyard;
        loop->graveyard = h->next;
        free(h);
    }
}

void mc_loop_destroy(mc_loop *loop)
{
    if (!loop)
        return;
    for (size_t b = 0; b < HANDLER_BUCKETS; b++) {
        handler *h = loop->buckets[b];
        while (h) {
            handler *next = h->next;
            free(h);
            h = next;
        }
    }
    free_graveyard(loop);
    for (size_t i = 0; i < loop->heap_len; i++)
        free(loop->heap[i]);
    free(loop->heap);
    task *t;
    MC_LIST_FOREACH_ENTRY(t, &loop->tasks, task, link)
        free(t);
    pthread_mutex_destroy(&loop->task_lock);
    close(loop->wakefd);
    close(loop->epfd);
    free(loop);
}

int mc_loop_add(mc_loop *loop, int fd, uint32_t events, mc_loop_io_fn fn, void *arg)
{
    if (fd < 0 || !fn)
        return -EINVAL;
    if (find_handler(loop, fd))
        return -EEXIST;
    handler *h = mc_xcalloc(1, sizeof *h);
    h->fd = fd;
    h->events = events;
    h->fn = fn;
    h->arg = arg;
    struct epoll_event ev = {.events = events, .data.ptr = h};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int e = -errno;
        free(h);
        return e;
    }
    h->next = *bucket_of(loop, fd);
    *bucket_of(loop, fd) = h;
    return 0;
}

int mc_loop_mod(mc_loop *loop, int fd, uint32_t events)
{
    handler *h = find_handler(loop, fd);
    if (!h)
        return -ENOENT;
    struct epoll_event ev = {.events = events, .data.ptr = h};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
        return -errno;
    h->events = events;
    return 0;
}

int mc_loop_del(mc_loop *loop, int fd)
{
    handler **pp = bucket_of(loop, fd);
    while (*pp && (*pp)->fd != fd)
        pp = &(*pp)->next;
    handler *h = *pp;
    if (!h)
        return -ENOENT;
    *pp = h->next;
    /* EBADF/ENOENT are fine here: the owner may have closed the fd already. */
    (void)epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
    h->dead = true;
    h->next = loop->graveyard;
    loop->graveyard = h;
    return 0;
}

/* ---- timers: binary min-heap on (due_ms, seq) ---- */

static bool timer_less(const mc_loop_timer *a, const mc_loop_timer *b)
{
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->seq < b->seq);
}

static void heap_swap(mc_loop *loop, size_t i, size_t j)
{
    mc_loop_timer *t = loop->heap[i];
    loop->heap[i] = loop->heap[j];
    loop->heap[j] = t;
    loop->heap[i]->heap_index = i;
    loop->heap[j]->heap_index = j;
}

static void heap_up(mc_loop *loop, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!timer_less(loop->heap[i], loop->heap[p]))
            break;
        heap_swap(loop, i, p);
        i = p;
    }
}

static void heap_down(mc_loop *loop, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < loop->heap_len && timer_less(loop->heap[l], loop->heap[m]))
            m = l;
        if (r < loop->heap_len && timer_less(loop->heap[r], loop->heap[m]))
            m = r;
        if (m == i)
            return;
        heap_swap(loop, i, m);
        i = m;
    }
}

static void heap_push(mc_loop *loop, mc_loop_timer *t)
{
    if (loop->heap_len == loop->heap_cap) {
        loop->heap_cap = loop->heap_cap ? loop->heap_cap * 2 : 16;
        loop->heap = mc_xrealloc(loop->heap, loop->heap_cap * sizeof *loop->heap);
    }
    t->heap_index = loop->heap_len;
    loop->heap[loop->heap_len++] = t;
    heap_up(loop, t->heap_index);
}

static mc_loop_timer *heap_pop(mc_loop *loop)
{
    mc_loop_timer *top = loop->heap[0];
    loop->heap_len--;
    if (loop->heap_len) {
        loop->heap[0] = loop->heap[loop->heap_len];
        loop->heap[0]->heap_index = 0;
        heap_down(loop, 0);
    }
    return top;
}

mc_loop_timer *mc_loop_timer_add(mc_loop *loop, uint64_t delay_ms, uint64_t interval_ms,
                                 mc_loop_task_fn fn, void *arg)
{
    mc_loop_timer *t = mc_xcalloc(1, sizeof *t);
    t->due_ms = mc_now_ms() + delay_ms;
    t->interval_ms = interval_ms;
    t->seq = loop->timer_seq++;
    t->fn = fn;
    t->arg = arg;
    heap_push(loop, t);
    return t;
}

void mc_loop_timer_cancel(mc_loop *loop, mc_loop_timer *t)
{
    (void)loop;
    if (t)
        t->cancelled = true; /* removed (and freed) lazily when it reaches the top */
}

static int run_timers(mc_loop *loop)
{
    /* Returns the epoll timeout in ms until the next live timer (-1 = none). */
    for (;;) {
        while (loop->heap_len && loop->heap[0]->cancelled)
            free(heap_pop(loop));
        if (!loop->heap_len)
            return -1;
        mc_loop_timer *t = loop->heap[0];
        uint64_t now = mc_now_ms();
        loop->now_ms = now;
        if (t->due_ms > now) {
            uint64_t wait = t->due_ms - now;
            return wait > 60000 ? 60000 : (int)wait;
        }
        heap_pop(loop);
        if (t->interval_ms) {
            t->due_ms = now + t->interval_ms;
            t->seq = loop->timer_seq++;
            heap_push(loop, t);
            t->fn(t->arg); /* may cancel t: it stays in the heap until popped */
        } else {
            t->fn(t->arg);
            free(t);
        }
    }
}

/* ---- posted tasks ---- */

int mc_loop_post(mc_loop *loop, mc_loop_task_fn fn, void *arg)
{
    task *t = mc_xmalloc(sizeof *t);
    t->fn = fn;
    t->arg = arg;
    pthread_mutex_lock(&loop->task_lock);
    if (loop->stopped) {
        pthread_mutex_unlock(&loop->task_lock);
        free(t);
        return -ESHUTDOWN;
    }
    bool was_empty = mc_list_empty(&loop->tasks);
    mc_list_push_back(&loop->tasks, &t->link);
    pthread_mutex_unlock(&loop->task_lock);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t n = write(loop->wakefd, &one, sizeof one);
        (void)n; /* EAGAIN: the counter is already non-zero, the loop will wake */
    }
    return 0;
}

static void run_tasks(mc_loop *loop)
{
    mc_list batch;
    mc_list_init(&batch);
    pthread_mutex_lock(&loop->task_lock);
    mc_list_splice_back(&batch, &loop->tasks);
    pthread_mutex_unlock(&loop->task_lock);
    mc_list *it;
    while ((it = mc_list_pop_front(&batch))) {
        task *t = MC_CONTAINER_OF(it, task, link);
        t->fn(t->arg);
        free(t);
    }
}

void mc_loop_stop(mc_loop *loop)
{
    pthread_mutex_lock(&loop->task_lock);
    loop->stopping = true;
    pthread_mutex_unlock(&loop->task_lock);
    uint64_t one = 1;
    ssize_t n = write(loop->wakefd, &one, sizeof one);
    (void)n;
}

void mc_loop_set_busy_poll(mc_loop *loop, uint32_t cap_us)
{
    loop->spin.cap_us = cap_us;
}

typedef struct loop_poll {
    mc_loop *loop;
    struct epoll_event *evs;
    int n;
} loop_poll;

static bool loop_events(void *arg)
{
    loop_poll *p = arg;
    p->n = epoll_wait(p->loop->epfd, p->evs, 128, 0);
    return p->n != 0; /* events, or an error for the caller to see */
}

/* epoll_wait for a loop that polls first (mc_loop_set_busy_poll, common/spin.h). */
static int wait_events(mc_loop *loop, struct epoll_event *evs, int timeout)
{
    if (!loop->spin.cap_us || timeout == 0 || !mc_spin_budget_us())
        return epoll_wait(loop->epfd, evs, 128, timeout);
    loop_poll p = {.loop = loop, .evs = evs};
    uint64_t t0 = mc_now_us();
    if (mc_spin_until(&loop->spin, loop_events, &p))
        return p.n;
    if (timeout > 0) { /* the poll's time counts against the next timer's */
        uint64_t polled_ms = (mc_now_us() - t0) / 1000;
        timeout = polled_ms >= (uint64_t)timeout ? 0 : timeout - (int)polled_ms;
    }
    int n = epoll_wait(loop->epfd, evs, 128, timeout);
    int e = errno; /* mc_loop_run reads it (EINTR) */
    mc_spin_woke(&loop->spin, n > 0);
    errno = e;
    return n;
}

int mc_loop_run(mc_loop *loop)
{
    struct epoll_event evs[128];
    int rc = 0;
    loop->run_thread = pthread_self();
    __atomic_store_n(&loop->running, 1, __ATOMIC_RELEASE);
    for (;;) {
        int timeout = run_timers(loop);
        pthread_mutex_lock(&loop->task_lock);
        bool stopping = loop->stopping;
        bool have_tasks = !mc_list_empty(&loop->tasks);
        pthread_mutex_unlock(&loop->task_lock);
        if (stopping)
            break;
        if (have_tasks)
            timeout = 0;
        int n = wait_events(loop, evs, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        loop->now_ms = mc_now_ms();
        for (int i = 0; i < n; i++) {
            handler *h = evs[i].data.ptr;
            if (!h) {
                uint64_t v;
                ssize_t r = read(loop->wakefd, &v, sizeof v);
                (void)r;
                continue;
            }
            if (h->dead)
                continue;
            h->fn(loop, h->fd, evs[i].events, h->arg);
        }
        free_graveyard(loop);
        run_tasks(loop);
    }
    /* Tasks posted before the stop still run; later posts are refused. */
    pthread_mutex_lock(&loop->task_lock);
    loop->stopped = true;
    pthread_mutex_unlock(&loop->task_lock);
    run_tasks(loop);
    free_graveyard(loop);
    __atomic_store_n(&loop->running, 0, __ATOMIC_RELEASE);
    return rc;
}

static void *loop_thread_main(void *arg)
{
    mc_loop_run(arg);
    return NULL;
}

int mc_loop_start_thread(mc_loop *loop, const char *name)
{
    int e = pthread_create(&loop->thread, NULL, loop_thread_main, loop);
    if (e)
        return -e;
    if (name)
        pthread_setname_np(loop->thread, name);
    loop->has_thread = true;
    return 0;
}

int mc_loop_join(mc_loop *loop)
{
    if (!loop->has_thread)
        return -EINVAL;
    mc_loop_stop(loop);
    int e = pthread_join(loop->thread, NULL);
    loop->has_thread = false;
    return -e;
}

bool mc_loop_in_thread(const mc_loop *loop)
{
    return __atomic_load_n(&loop->running, __ATOMIC_ACQUIRE) &&
           pthread_equal(loop->run_thread, pthread_self());
}

uint64_t mc_loop_now_ms(const mc_loop *loop)
{
    return loop->now_ms;
}
