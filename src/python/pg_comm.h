/* pg_comm.h: the data plane of mooncake.pg (the `mooncake-cpu` torch.distributed
 * backend), internal to src/python: a mailbox per rank in memory from the transfer
 * engine, channels with credits between every pair of slots, collective algorithms, and
 * element-wise reductions. The control plane (rendezvous, failure reconciliation,
 * membership proposals) is Python (python/mooncake/pg.py) over torch's store.
 *
 * Upstream: Mooncake PG (mooncake-pg/, "Mooncake EP & Mooncake PG" docs): a rank that
 * stops answering within a timeout is reported, membership changes are applied at a
 * collective boundary. The protocol below is ours.
 *
 * Mailbox (one memfd region per rank, mc_te_alloc_shared, so same-host peers write it
 * with one memcpy and remote peers over TCP), for each source slot p < max_group:
 *   control lines (64 bytes each): coll flag[NSLOT], coll ack, p2p flag[NSLOT], p2p ack,
 *   sync; then coll data[NSLOT] x slot_bytes, p2p data[NSLOT] x p2p_bytes.
 * Only p writes the lines and slots of source p (no write races). A message on channel
 * p->q is: data into q's slot (seq % NSLOT) for p, then (after the data completed) the
 * flag word (epoch << 40 | seq). q consumes in seq order and writes its ack word
 * (epoch << 40 | seq) into p's mailbox; p may reuse a slot once acked (NSLOT credits).
 * Words of another epoch are ignored: a new view (set_view) resets every channel.
 *
 * Failure detection: a peer we wait on that stays silent for timeout_ms is a suspect;
 * a same-host peer silent for timeout/8 (20..200 ms) is probed every such interval, and
 * one whose engine refuses the probe (its process is gone) is a suspect at once.
 * Environment: MC_PG_CREDITS (slots in use per channel, 1..MC_PG_NSLOT, default
 * MC_PG_NSLOT), read at create (a bad value fails create, logged by common/env).
 *
 * Threads: every function takes the comm's mutex; the collectives and waits block the
 * calling thread (the Python binding releases the GIL around them). */
#ifndef MC_PG_COMM_H
#define MC_PG_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/transfer_engine.h"

#define MC_PG_MAX_GROUP 64
#define MC_PG_NSLOT 4

/* dtype codes (the Python side maps torch dtypes to these) */
enum {
    MC_PG_F32 = 0,
    MC_PG_F64 = 1,
    MC_PG_F16 = 2,
    MC_PG_BF16 = 3,
    MC_PG_I8 = 4,
    MC_PG_U8 = 5,
    MC_PG_I16 = 6,
    MC_PG_I32 = 7,
    MC_PG_I64 = 8,
    MC_PG_BOOL = 9,
};

/* reduction ops (torch ReduceOp names) */
enum {
    MC_PG_SUM = 0,
    MC_PG_PROD = 1,
    MC_PG_MIN = 2,
    MC_PG_MAX = 3,
    MC_PG_AVG = 4,
    MC_PG_BAND = 5,
    MC_PG_BOR = 6,
    MC_PG_BXOR = 7,
};

/* Outcome of a collective. */
enum {
    MC_PG_DONE = 0,   /* finished over the view's active ranks */
    MC_PG_FAILED = 1, /* a peer did not answer within the timeout or a write to it failed:
                         `suspects` names them */
    MC_PG_SYNC = 2,   /* a peer asked for reconciliation (its sync word) */
};

typedef struct mc_pg_result {
    int status;        /* MC_PG_DONE / FAILED / SYNC */
    int complete;      /* every data phase finished (only the closing handshake was cut) */
    uint64_t suspects; /* bit per slot (FAILED) */
} mc_pg_result;

typedef struct mc_pg_comm mc_pg_comm;

/* mc__pg_comm_create: a comm for slot `rank` of a group with `max_group` slots
 * (1..MC_PG_MAX_GROUP). te: an initialized engine (borrowed; must outlive the comm).
 * slot_bytes: bytes per collective slot (multiple of 4096, 4 KiB..64 MiB); p2p slots
 * are the same size. timeout_ms: how long a peer may stay silent while we wait on it.
 * Returns NULL (and logs why) when the mailbox cannot be allocated or MC_PG_CREDITS is
 * bad. */
mc_pg_comm *mc__pg_comm_create(mc_te *te, int rank, int max_group, size_t slot_bytes,
                               int timeout_ms);
void mc__pg_comm_destroy(mc_pg_comm *c);

/* The mailbox's address in this process (what peers are told) and its size. */
uint64_t mc__pg_comm_base(const mc_pg_comm *c);
size_t mc__pg_comm_size(const mc_pg_comm *c);
void mc__pg_comm_set_timeout(mc_pg_comm *c, int timeout_ms);

/* mc__pg_comm_set_peer: slot's segment name and mailbox address (copied); opens the
 * segment. Returns MC_OK or the engine's status. */
int mc__pg_comm_set_peer(mc_pg_comm *c, int slot, const char *segment, uint64_t base);

/* mc__pg_comm_set_view: a new view: epoch (> every earlier one), active slots (bit per
 * slot; must include this rank to take part), resets every channel and fails p2p
 * operations still in flight. */
void mc__pg_comm_set_view(mc_pg_comm *c, uint64_t epoch, uint64_t active);

/* mc__pg_comm_request_sync: writes (epoch, seq) into this rank's sync word at every
 * active peer: they leave collective seq (or a later one) with MC_PG_SYNC. */
void mc__pg_comm_request_sync(mc_pg_comm *c, uint64_t seq);

/* mc__pg_comm_probe: 1 when slot's engine answers a probe, 0 when not. */
int mc__pg_comm_probe(mc_pg_comm *c, int slot);

/* ---- collectives: seq is the collective's number (same on every rank); rerun = 1
 * when repeating seq after a reconciliation (inputs restored from the saved copy). ---- */
mc_pg_result mc__pg_allreduce(mc_pg_comm *c, uint64_t seq, int rerun, void *buf,
                              size_t count, int dtype, int op);
mc_pg_result mc__pg_broadcast(mc_pg_comm *c, uint64_t seq, void *buf, size_t nbytes,
                              int root);
/* outs[slot]: where slot's block goes (NULL for inactive slots); in: this rank's block */
mc_pg_result mc__pg_allgather(mc_pg_comm *c, uint64_t seq, void *const *outs,
                              const void *in, size_t nbytes);
/* ins[slot]: this rank's contribution to slot's block; out: this rank's block */
mc_pg_result mc__pg_reduce_scatter(mc_pg_comm *c, uint64_t seq, void *out,
                                   const void *const *ins, size_t count, int dtype, int op);
mc_pg_result mc__pg_reduce(mc_pg_comm *c, uint64_t seq, int rerun, void *buf, size_t count,
                           int dtype, int op, int root);
/* gather: outs used on root only; scatter: ins used on root only */
mc_pg_result mc__pg_gather(mc_pg_comm *c, uint64_t seq, void *const *outs, const void *in,
                           size_t nbytes, int root);
mc_pg_result mc__pg_scatter(mc_pg_comm *c, uint64_t seq, void *out, const void *const *ins,
                            size_t nbytes, int root);
/* all_to_all: block for/from each slot, with byte lengths */
mc_pg_result mc__pg_alltoall(mc_pg_comm *c, uint64_t seq, void *const *outs,
                             const size_t *out_lens, const void *const *ins,
                             const size_t *in_lens);
mc_pg_result mc__pg_barrier(mc_pg_comm *c, uint64_t seq);

/* ---- point-to-point (own channels; no reconciliation) ---- */
/* post: returns an id > 0, or -1 (peer not active / bad arguments). The buffer is
 * borrowed until the operation is terminal. Matching (gloo's): a recv takes the
 * earliest message from `peer` with the same `tag` (FIFO per (peer, tag)); messages
 * with other tags do not cross (one that arrives before its recv is posted, while a
 * later message from that peer is wanted, is copied aside, in heap memory of its size).
 * A send completes once its data is in the peer's mailbox, so it may complete before
 * the recv is posted. The byte counts of a send and its recv must be equal, else the
 * recv fails (and the message is dropped). */
int64_t mc__pg_p2p_post(mc_pg_comm *c, int send, int peer, int64_t tag, void *buf,
                        size_t nbytes);
/* wait: 0 done, 1 still pending after timeout_ms (< 0: until done or failed), -1 failed
 * (peer deactivated, unreachable, view changed). A terminal id is forgotten once waited. */
int mc__pg_p2p_wait(mc_pg_comm *c, int64_t id, int64_t timeout_ms);

/* ---- reductions (pg_reduce.c) ---- */
int mc__pg_reduce2(int dtype, int op, void *dst, const void *a, const void *b, size_t n);
/* mc__pg_reduce_n: dst[i] = ((srcs[0][i] op srcs[1][i]) op ...) op srcs[nsrc-1][i] for n
 * elements, block by block (16 Ki elements, so the destination block stays in L2 while
 * the sources are read once each). dst may equal srcs[0] or overlap any source (then a
 * heap scratch block is used). nsrc >= 1. */
int mc__pg_reduce_n(int dtype, int op, void *dst, const void *const *srcs, int nsrc,
                    size_t n);
int mc__pg_scale_avg(int dtype, void *buf, size_t n, int count);
size_t mc__pg_dtype_size(int dtype);
int mc__pg_op_valid(int dtype, int op);

#endif
