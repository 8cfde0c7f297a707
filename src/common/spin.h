/* common/spin.h: bounded busy-polling before a thread blocks (issue 17).
 *
 * On a virtual machine a thread that blocks and is woken again costs far more than the
 * work it waits for: on the project's 2-core VM a loopback TCP ping-pong takes 115-130 us
 * when both sides block and 14.5 us when both poll, because waking a halted virtual CPU
 * goes through the hypervisor. A small request (a master RPC, a batch of 4 KiB slices)
 * waits several such wakeups. So the two waits of a calling thread on the hot path (a
 * reply in mc_sock_recv_all: a master RPC's, also a standby's log fetch and a disk-tier
 * read; a transfer batch's completion in mc_te_wait_batch) first poll for a short
 * budget, then block as before. Event loops do
 * not poll: on two cores, a polling I/O thread takes the core the peer it waits for
 * needs (measured: no gain over polling in the callers only).
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
 * Event loops poll only when their owner asks (mc_loop_set_busy_poll: the master's RPC
 * loops): on two cores an I/O thread that polls takes the core the peer it waits for
 * needs, but the master's reply is on every request's path and its loop otherwise sleeps
 * between a client's calls (a replay: 15.7k -> 25k blocks/s, docs/performance.md).
 * Thread-safe. */
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
    bool init;      /* win_us set */
    uint32_t win_us; /* the current poll window, <= the budget (0: block at once) */
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
