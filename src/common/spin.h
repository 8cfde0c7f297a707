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
 * The budget comes from MC_BUSY_POLL_US (microseconds, 0..1000; 0 turns polling off),
 * read once per process; default MC_SPIN_DEFAULT_US. It bounds the CPU a waiting thread
 * burns per wait; a thread that waits for nothing never polls.
 * Thread-safe. */
#ifndef MOONCAKE_COMMON_SPIN_H
#define MOONCAKE_COMMON_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define MC_SPIN_DEFAULT_US 50u
#define MC_SPIN_MAX_US 1000u

/* mc_spin_budget_us: the process's polling budget per wait in microseconds (0: off).
 * An invalid MC_BUSY_POLL_US is logged (tag "env") and polling stays off; mc_te_create
 * refuses it (INVALID_PARAMS), so a store's setup fails on it. */
uint32_t mc_spin_budget_us(void);

/* The history of one wait site on one thread (declare it `static _Thread_local`,
 * zero-initialised): a poll that ran out of budget makes the next MC_SPIN_BACKOFF waits
 * at that site block at once, so a site whose waits are long (a large transfer) stops
 * burning its budget each time, and one whose waits are short keeps polling. */
typedef struct mc_spin_site {
    int skip; /* waits left that do not poll */
} mc_spin_site;

#define MC_SPIN_BACKOFF 8

/* mc_spin_env_check: reads MC_BUSY_POLL_US now (not the once-per-process copy) and
 * returns 0 when it is unset or valid, -EINVAL when not (logged, naming it): what
 * mc_te_create and mooncake_master's start refuse. */
int mc_spin_env_check(void);

/* mc_spin_until: polls ready(arg) until it returns true or the budget is spent; returns
 * its last answer. ready must be cheap and must not block. site: the wait site's
 * history (above), or NULL to always poll. */
bool mc_spin_until(mc_spin_site *site, bool (*ready)(void *arg), void *arg);

/* mc_spin_pause: one pause of a polling loop (the CPU's spin-wait hint). */
void mc_spin_pause(void);

#endif
