/* common/spin.h: bounded busy-polling before a thread blocks (issue 17).
 *
 * On a virtual machine a thread that blocks and is woken again costs far more than the
 * work it waits for: on the project's 2-core VM a loopback TCP ping-pong takes 115-130 us
 * when both sides block and 14.5 us when both poll, because waking a halted virtual CPU
 * goes through the hypervisor. A small request (a master RPC, a batch of 4 KiB slices)
 * waits several such wakeups. So the waits on the hot path first poll for a short
 * window, then block as before: a calling thread's wait for a reply in mc_sock_recv_all
 * (a master RPC's, also a standby's log fetch and a disk-tier read), its wait for a
 * transfer batch in mc_te_wait_batch (only a batch moving less than 1 MiB over TCP,
 * transfer/internal.h TE_POLL_MAX_TCP_BYTES: a larger one waits for I/O threads that
 * need the CPU a poller would hold), its wait for the replies of a small read it moves
 * itself (transfer/tcp_inline.c), and the master's RPC event loops between requests
 * (mc_loop_set_busy_poll). The transfer engine's I/O loops do not poll (below).
 *
 * The budget comes from MC_BUSY_POLL_US (microseconds, 0..MC_SPIN_MAX_US; 0 turns
 * polling off), read once per process; default MC_SPIN_DEFAULT_US. It bounds the CPU a
 * waiting thread burns per wait; a thread that waits for nothing never polls.
 *
 * Each wait site adapts its own poll window inside the budget (the rule of Linux's
 * haltpoll cpuidle governor, applied per wait site): a wait that ended after the window
 * but within the budget doubles the window (at least to 5/4 of that wait), a wait longer
 * than the budget halves it (below MC_SPIN_MIN_US it is 0: block at once). So a site
 * whose waits are short polls just long enough to catch them, and a site whose waits are
 * long (a large transfer, an idle loop) stops polling after a few of them.
 *
 * Event loops poll only when their owner asks (mc_loop_set_busy_poll, with a cap of its
 * own: the master's RPC loops, capped by mooncake_master's --rpc_busy_poll_us, default
 * 1000; their reply is on every request's path and they otherwise sleep between a
 * client's calls; the replay of docs/performance.md "Session 6" went from 14.3k to
 * 27k blocks/s with it and the larger budget). The transfer engine's I/O loops do not:
 * measured with them polling too, a 4 KiB x 128 TCP put gained 1.5x but a get lost 0.77x
 * (two cores: a polling I/O thread takes the core its peer needs).
 *
 * Cost: a site polls at most its window per wait, and a loop whose requests come closer
 * together than its budget polls all the time (measured: a master RPC thread at 96% of a
 * core from about 1,400 calls/s at the default); an idle loop or site stops polling
 * after a few long waits. MC_BUSY_POLL_US=0 turns all of it off, --rpc_busy_poll_us=0
 * the master's loops only.
 *
 * The budget is thread-safe; a wait site (below) belongs to one thread. */
#ifndef MOONCAKE_COMMON_SPIN_H
#define MOONCAKE_COMMON_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define MC_SPIN_DEFAULT_US 1000u
#define MC_SPIN_MAX_US 10000u
#define MC_SPIN_START_US 50u /* a site's first window */
#define MC_SPIN_MIN_US 4u    /* a window below this is 0 */

/* mc_spin_budget_us: the process's polling budget per wait in microseconds (0: off).
 * An invalid MC_BUSY_POLL_US is logged (tag "env") and polling stays off; mc_te_create
 * refuses it (INVALID_PARAMS), so a store's setup fails on it. */
uint32_t mc_spin_budget_us(void);

/* The history of one wait site on one thread (declare it `static _Thread_local`, or
 * one per event loop; zero-initialised). Owned by that thread. */
typedef struct mc_spin_site {
    uint32_t cap_us; /* set by the owner: this site's budget, at most the process's
                        (0: the process's budget) */
    bool init;      /* win_us set */
    uint32_t win_us; /* the current poll window, <= the site's budget (0: block at once) */
    uint64_t t0_us;  /* when the wait that is blocking now began (mc_now_us)      */
} mc_spin_site;

/* mc_spin_env_check: reads MC_BUSY_POLL_US now (not the once-per-process copy) and
 * returns 0 when it is unset or valid, -EINVAL when not (logged, naming it): what
 * mc_te_create and mooncake_master's start refuse. */
int mc_spin_env_check(void);

/* mc_spin_until: polls ready(arg) until it returns true or the site's window is spent
 * (the whole budget when site is NULL); returns its last answer. ready must be cheap and
 * must not block; it is asked once even when the window is 0. A false answer with a
 * site means the caller now blocks, and calls mc_spin_woke(site, ...) when that wait
 * ends, so that the window adapts (above). */
bool mc_spin_until(mc_spin_site *site, bool (*ready)(void *arg), void *arg);

/* mc_spin_woke: the blocking wait that followed a false mc_spin_until(site) has ended.
 * event: it ended because what it waited for came (false: a timeout or a timer ran out;
 * that changes the window only when the wait was longer than the budget). NULL site or
 * polling off: no-op. */
void mc_spin_woke(mc_spin_site *site, bool event);

/* mc_spin_pause: one pause of a polling loop (the CPU's spin-wait hint). */
void mc_spin_pause(void);

#endif
