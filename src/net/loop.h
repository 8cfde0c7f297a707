/* loop.h: our epoll event loop (src/net). Internal to the project.
 *
 * One loop = one thread (the "loop thread") that runs mc_loop_run(). I/O handlers and
 * timers run on that thread. Other threads talk to it only through mc_loop_post() and
 * mc_loop_stop(), which are thread-safe (an eventfd wakes the loop).
 *
 * Errors are -errno. Handlers are level-triggered unless EPOLLET is passed in events.
 */
#ifndef MC_NET_LOOP_H
#define MC_NET_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

typedef struct mc_loop mc_loop;
typedef struct mc_loop_timer mc_loop_timer;

/* I/O handler: events is the epoll mask (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP, ...). */
typedef void (*mc_loop_io_fn)(mc_loop *loop, int fd, uint32_t events, void *arg);
/* Task or timer callback. */
typedef void (*mc_loop_task_fn)(void *arg);

/* mc_loop_create: new loop in *out. Returns 0 or -errno (epoll/eventfd failures). */
int mc_loop_create(mc_loop **out);

/* mc_loop_destroy: frees the loop; it must not be running (join its thread first).
 * Pending posted tasks are dropped without running; live timers are freed. Registered
 * fds are NOT closed (their owners close them). NULL is a no-op. */
void mc_loop_destroy(mc_loop *loop);

/* mc_loop_add: watch fd for events, calling fn(loop, fd, events, arg). One registration
 * per fd. Loop thread, or any thread before the loop runs. -EEXIST, -errno from epoll. */
int mc_loop_add(mc_loop *loop, int fd, uint32_t events, mc_loop_io_fn fn, void *arg);

/* mc_loop_mod: changes the event mask of a registered fd. -ENOENT if not registered. */
int mc_loop_mod(mc_loop *loop, int fd, uint32_t events);

/* mc_loop_del: stops watching fd. Safe inside that fd's own handler: no further event
 * for this registration is delivered, even later in the same epoll batch. Does not close
 * fd. -ENOENT if not registered. Loop thread only (once running). */
int mc_loop_del(mc_loop *loop, int fd);

/* mc_loop_timer_add: runs fn(arg) after delay_ms, then every interval_ms if non-zero.
 * Returns a handle (owned by the loop; valid until cancelled or, for one-shot timers,
 * until fn has run), or NULL on OOM. Loop thread, or before the loop runs. */
mc_loop_timer *mc_loop_timer_add(mc_loop *loop, uint64_t delay_ms, uint64_t interval_ms,
                                 mc_loop_task_fn fn, void *arg);

/* mc_loop_timer_cancel: cancels a live timer (also from inside its own callback).
 * Loop thread only. NULL is a no-op. */
void mc_loop_timer_cancel(mc_loop *loop, mc_loop_timer *t);

/* mc_loop_post: runs fn(arg) on the loop thread soon, in post order. Any thread.
 * Returns 0, or -ESHUTDOWN once the loop has been stopped (fn will not run). */
int mc_loop_post(mc_loop *loop, mc_loop_task_fn fn, void *arg);

/* mc_loop_run: runs the loop on the calling thread until mc_loop_stop(). Returns 0, or
 * -errno if epoll_wait fails unexpectedly. */
int mc_loop_run(mc_loop *loop);

/* mc_loop_set_busy_poll: with cap_us > 0, the loop polls its fds (epoll_wait without
 * sleeping) before it sleeps, for a window of at most cap_us microseconds (and at most
 * the process's MC_BUSY_POLL_US budget; its 0 turns this off too); the window adapts to
 * how soon events came after earlier sleeps (common/spin.h). For a loop on every
 * request's path that otherwise sleeps between a client's calls (the master's RPC
 * loops). A loop whose events come closer together than the cap polls all the time.
 * 0: off (the default). Call before mc_loop_run or from the loop thread. */
void mc_loop_set_busy_poll(mc_loop *loop, uint32_t cap_us);

/* mc_loop_stop: asks the loop to return from mc_loop_run after the current iteration.
 * Any thread; idempotent. Tasks posted before the stop still run. */
void mc_loop_stop(mc_loop *loop);

/* mc_loop_start_thread / mc_loop_join: run the loop on a new thread named name (≤15
 * chars), and later stop+join it. 0 or -errno. */
int mc_loop_start_thread(mc_loop *loop, const char *name);
int mc_loop_join(mc_loop *loop);

/* mc_loop_in_thread: true when called on the loop's own thread. */
bool mc_loop_in_thread(const mc_loop *loop);

/* mc_loop_now_ms: the loop's cached monotonic time (updated each iteration). */
uint64_t mc_loop_now_ms(const mc_loop *loop);

#endif
