/* pg_comm.c: mooncake.pg's data plane (pg_comm.h): mailbox, channels, collectives.
 *
 * Every collective is a sequence of *plans*; a plan is a set of send streams and
 * receive streams that progress independently (a stream is cut into messages of at
 * most slot_bytes; a zero-length stream is one empty message), so no ordering of
 * peers can deadlock. Each collective ends with a closing plan (an empty message to
 * and from every active peer): a rank only returns DONE once every peer has all its
 * data, which is what lets the control plane decide consistently after a failure (see
 * docs/pg.md, "What a collective returns when a rank dies"). */
#include "pg_comm.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/env.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG "pg"
#define LINE 64
#define NCTRL (2 * MC_PG_NSLOT + 3)
#define K_CF(s) (s)
#define K_CA (MC_PG_NSLOT)
#define K_PF(s) (MC_PG_NSLOT + 1 + (s))
#define K_PA (2 * MC_PG_NSLOT + 1)
#define K_SY (2 * MC_PG_NSLOT + 2)
#define SEQ_BITS 40
#define SEQ_MASK ((1ull << SEQ_BITS) - 1)
#define BATCH_CAP 4096
#define NWORDS 4096
#define SMALL_ALLREDUCE (64u << 10)

typedef struct pg_peer {
    char *seg;
    uint64_t base;
    mc_te_segment_t sid;
    bool open;
} pg_peer;

/* A p2p message is (tag, length) in the first P2P_HDR bytes of its first slot, then the
 * payload across as many slots as it needs. A receiver matches messages to posted recvs
 * by (source, tag) in arrival order, as gloo does; a message whose recv is not posted
 * while a later one from the same source is needed is copied aside (an "unexpected"
 * message) until its recv is posted. */
#define P2P_HDR 16

typedef struct p2p_ux p2p_ux;

typedef struct p2p_op {
    int64_t id;
    int send, peer;
    int64_t tag;
    char *buf;
    size_t len, off;
    size_t msgs, nmsg;
    int state; /* 0 pending, 1 done, -1 failed */
    bool matched; /* recv: the channel is delivering a message into it */
    p2p_ux *ux;   /* recv: matched to this unexpected message */
    uint64_t hdr[2];
    uint64_t last_ms;
} p2p_op;

/* an arrived message whose recv was not posted yet */
struct p2p_ux {
    int peer;
    int64_t tag;
    char *buf;
    size_t len;
    bool complete;
    p2p_op *waiter; /* the recv it was matched to, if any */
};

/* the message a source is delivering now (its header was read) */
typedef struct p2p_in {
    bool busy;
    p2p_op *op; /* into a posted recv, or */
    p2p_ux *ux; /* into an unexpected message, or neither: discarded (size mismatch) */
    size_t len, off, msgs, nmsg;
} p2p_in;

struct mc_pg_comm {
    pthread_mutex_t lock;
    mc_te *te;
    int rank, G;
    size_t S, ctrl_sz, region_sz;
    char *base;
    int timeout_ms;
    uint64_t credits; /* slots in use per channel (1..MC_PG_NSLOT, MC_PG_CREDITS) */
    uint64_t epoch, active;
    int nact, mypos;
    int act[MC_PG_MAX_GROUP];
    pg_peer peers[MC_PG_MAX_GROUP];
    uint64_t cs[MC_PG_MAX_GROUP], cr[MC_PG_MAX_GROUP]; /* coll: last sent / consumed */
    uint64_t ps[MC_PG_MAX_GROUP], pr[MC_PG_MAX_GROUP]; /* p2p */
    uint64_t cr_acked[MC_PG_MAX_GROUP];               /* coll: last acked */
    mc_te_batch_t batch;
    size_t bused;
    uint64_t *words; /* staging for flag/ack words (kept valid for TCP slices) */
    size_t widx;
    char *save;
    size_t save_cap;
    /* all_reduce's staged save: byte ranges of the input copied into save (at the same
     * offsets) by the current attempt, each before that part of the input is read for
     * sending or overwritten; a rerun restores exactly these */
    size_t sv_off[MC_PG_MAX_GROUP], sv_len[MC_PG_MAX_GROUP];
    int sv_n;
    p2p_op **ops;
    size_t nops, capops;
    int64_t next_id;
    p2p_in rin[MC_PG_MAX_GROUP];
    p2p_ux **uxs; /* unexpected messages in arrival order */
    size_t nuxs, capuxs;
};

/* ------------------------------------------------------------------------------------ */
/* Layout                                                                               */
/* ------------------------------------------------------------------------------------ */

static inline uint64_t ctrl_off(int src, int k)
{
    return ((uint64_t)src * NCTRL + (uint64_t)k) * LINE;
}

static inline uint64_t cdata_off(const mc_pg_comm *c, int src, int s)
{
    return c->ctrl_sz + ((uint64_t)src * MC_PG_NSLOT + (uint64_t)s) * c->S;
}

static inline uint64_t pdata_off(const mc_pg_comm *c, int src, int s)
{
    return c->ctrl_sz + (uint64_t)c->G * MC_PG_NSLOT * c->S +
           ((uint64_t)src * MC_PG_NSLOT + (uint64_t)s) * c->S;
}

static inline uint64_t load_word(const mc_pg_comm *c, uint64_t off)
{
    return __atomic_load_n((const uint64_t *)(c->base + off), __ATOMIC_ACQUIRE);
}

static inline uint64_t mkword(uint64_t epoch, uint64_t seq)
{
    return (epoch << SEQ_BITS) | (seq & SEQ_MASK);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* ------------------------------------------------------------------------------------ */
/* Writes into a peer's mailbox                                                         */
/* ------------------------------------------------------------------------------------ */

static int batch_renew(mc_pg_comm *c)
{
    if (c->batch) {
        mc_te_wait_batch(c->te, c->batch, c->timeout_ms, NULL);
        if (mc_te_free_batch(c->te, c->batch) != MC_OK)
            mc_log(MC_LOG_WARN, TAG, "abandoning a batch still pending after %d ms",
                   c->timeout_ms);
        c->batch = 0;
    }
    if (mc_te_allocate_batch(c->te, BATCH_CAP, &c->batch) != MC_OK) {
        c->batch = 0;
        return -1;
    }
    c->bused = 0;
    return 0;
}

/* put: len bytes from src into q's mailbox at off; 0 when they landed, -1 otherwise. */
static int put(mc_pg_comm *c, int q, const void *src, uint64_t off, size_t len)
{
    pg_peer *p = &c->peers[q];
    if (!p->open)
        return -1;
    if ((!c->batch || c->bused >= BATCH_CAP) && batch_renew(c) < 0)
        return -1;
    mc_te_request r = {.opcode = MC_TE_OP_WRITE,
                       .source = (void *)src,
                       .target_id = p->sid,
                       .target_offset = p->base + off,
                       .length = len};
    if (mc_te_submit(c->te, c->batch, &r, 1) != MC_OK)
        return -1;
    size_t idx = c->bused++;
    mc_te_status st;
    mc_te_get_transfer_status(c->te, c->batch, idx, &st);
    if (st.state == MC_TE_PENDING || st.state == MC_TE_WAITING) {
        mc_te_wait_batch(c->te, c->batch, c->timeout_ms, NULL);
        mc_te_get_transfer_status(c->te, c->batch, idx, &st);
    }
    return st.state == MC_TE_COMPLETED ? 0 : -1;
}

static int put_word(mc_pg_comm *c, int q, uint64_t off, uint64_t w)
{
    uint64_t *slot = &c->words[c->widx++ % NWORDS];
    *slot = w;
    return put(c, q, slot, off, sizeof w);
}

/* ------------------------------------------------------------------------------------ */
/* Channels                                                                             */
/* ------------------------------------------------------------------------------------ */

/* send_try: one message to q: hlen header bytes (p2p only; 0 for none) then len bytes
 * from src. 1 sent, 0 no credit yet, -1 write failed. */
static int send_try(mc_pg_comm *c, int p2p, int q, const void *hdr, size_t hlen,
                    const void *src, size_t len)
{
    uint64_t *sseq = p2p ? &c->ps[q] : &c->cs[q];
    uint64_t seq = *sseq + 1;
    uint64_t ackw = load_word(c, ctrl_off(q, p2p ? K_PA : K_CA));
    uint64_t consumed = (ackw >> SEQ_BITS) == c->epoch ? (ackw & SEQ_MASK) : 0;
    if (seq - consumed > c->credits)
        return 0;
    int s = (int)(seq % c->credits);
    uint64_t off = p2p ? pdata_off(c, c->rank, s) : cdata_off(c, c->rank, s);
    if (hlen && put(c, q, hdr, off, hlen) < 0)
        return -1;
    if (len && put(c, q, src, off + hlen, len) < 0)
        return -1;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (put_word(c, q, ctrl_off(c->rank, p2p ? K_PF(s) : K_CF(s)), mkword(c->epoch, seq)) < 0)
        return -1;
    *sseq = seq;
    return 1;
}

/* recv_ready: the next message from p, or NULL when it has not arrived. */
static const char *recv_ready(mc_pg_comm *c, int p2p, int p)
{
    uint64_t seq = (p2p ? c->pr[p] : c->cr[p]) + 1;
    int s = (int)(seq % c->credits);
    uint64_t w = load_word(c, ctrl_off(p, p2p ? K_PF(s) : K_CF(s)));
    if (w != mkword(c->epoch, seq))
        return NULL;
    return c->base + (p2p ? pdata_off(c, p, s) : cdata_off(c, p, s));
}

/* recv_consume: the message is used; ack it unless `hold` (then ack_coll later).
 * A failed ack is not an error here: the data arrived, and a sender that went away is
 * noticed by whoever next needs it (a peer that already finished may have exited). */
static int recv_consume(mc_pg_comm *c, int p2p, int p, bool hold)
{
    if (p2p) {
        c->pr[p]++;
        put_word(c, p, ctrl_off(c->rank, K_PA), mkword(c->epoch, c->pr[p]));
        return 0;
    }
    c->cr[p]++;
    if (hold)
        return 0;
    c->cr_acked[p] = c->cr[p];
    put_word(c, p, ctrl_off(c->rank, K_CA), mkword(c->epoch, c->cr[p]));
    return 0;
}

static int ack_coll(mc_pg_comm *c, int p)
{
    if (c->cr_acked[p] == c->cr[p])
        return 0;
    c->cr_acked[p] = c->cr[p];
    put_word(c, p, ctrl_off(c->rank, K_CA), mkword(c->epoch, c->cr[p]));
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Plans                                                                                */
/* ------------------------------------------------------------------------------------ */

/* R_NARY: the streams of a reduction (one per active peer, equal lengths, into one dst):
 * each holds its next message in its slot until every one has it, then all of them and
 * this rank's own contribution are reduced in one pass (src order: active slot order,
 * so the result does not depend on arrival order) and the slots are acked. */
enum { R_COPY, R_NARY, R_HOLD, R_DISCARD };

typedef struct sstream {
    int peer;
    const char *src;
    size_t len, off, msgs, nmsg;
    const size_t *gate; /* when set: only the first *gate bytes of src are ready */
    char *stage;        /* when set: each message is first copied here (same offset) and
                           sent from the copy, which stays in cache for the send */
    size_t *staged;     /* with stage: bytes copied so far */
} sstream;

typedef struct rstream {
    int peer, mode;
    char *dst;
    const char *own; /* R_NARY: this rank's contribution (may equal dst) */
    size_t len, off, msgs, nmsg;
    const char *held; /* R_HOLD, R_NARY: the slot */
} rstream;

typedef struct plan {
    sstream s[2 * MC_PG_MAX_GROUP]; /* all_reduce: two streams per peer */
    rstream r[2 * MC_PG_MAX_GROUP];
    int ns, nr;
    int dtype, op;
    int nary;         /* R_NARY streams */
    size_t nary_done; /* bytes of the R_NARY destination reduced so far */
    char *own_stage;  /* when set: the own contribution is copied here, message by
                         message, before the destination is written (the staged save) */
    size_t *own_staged;
    int avg_div;      /* > 0: divide each reduced message by it (AVG) before it counts */
    bool closing;
} plan;

static size_t nmsgs(const mc_pg_comm *c, size_t len)
{
    return len ? (len + c->S - 1) / c->S : 1;
}

static void plan_send(mc_pg_comm *c, plan *pl, int q, const void *src, size_t len)
{
    sstream *s = &pl->s[pl->ns++];
    *s = (sstream){.peer = q, .src = src, .len = len, .nmsg = nmsgs(c, len)};
}

static void plan_recv(mc_pg_comm *c, plan *pl, int p, int mode, void *dst, const void *own,
                      size_t len)
{
    rstream *r = &pl->r[pl->nr++];
    *r = (rstream){.peer = p, .mode = mode, .dst = dst, .own = own, .len = len,
                   .nmsg = nmsgs(c, len)};
    if (mode == R_NARY)
        pl->nary++;
}

/* Order sends by distance from this rank so peers are not all hit in the same order. */
static void plan_stagger(mc_pg_comm *c, plan *pl)
{
    for (int i = 1; i < pl->ns; i++) {
        sstream t = pl->s[i];
        int dt = (t.peer - c->rank + c->G) % c->G;
        int j = i - 1;
        while (j >= 0 && (pl->s[j].peer - c->rank + c->G) % c->G > dt) {
            pl->s[j + 1] = pl->s[j];
            j--;
        }
        pl->s[j + 1] = t;
    }
}

static void p2p_progress(mc_pg_comm *c);

/* backoff: how a waiting rank gives the CPU away. Spin briefly (a same-host peer usually
 * answers within microseconds), then yield for up to MC_PG_YIELD_US of idleness, then
 * sleep in short naps so that ranks sharing few cores leave them to the peers that have
 * work (what gloo gets from blocking in recv). */
#define MC_PG_YIELD_US 200
static void backoff(unsigned idle, const uint64_t *idle_since)
{
    if (idle < 64) {
        cpu_relax();
    } else if (mc_now_us() - *idle_since < MC_PG_YIELD_US) {
        sched_yield();
    } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* check_sync: 0 nothing; 1 leave with SYNC; 2 (closing plan only) a later collective is
 * being reconciled, so every peer already had this one's data. */
static int check_sync(mc_pg_comm *c, uint64_t seq, bool closing)
{
    for (int i = 0; i < c->nact; i++) {
        int p = c->act[i];
        if (p == c->rank)
            continue;
        uint64_t w = load_word(c, ctrl_off(p, K_SY));
        if (!w)
            continue;
        uint64_t ep = w >> SEQ_BITS, sq = w & SEQ_MASK;
        if (ep > c->epoch || (ep == c->epoch && sq <= seq))
            return 1;
        if (closing && ep == c->epoch && sq > seq)
            return 2;
    }
    return 0;
}

static bool rs_done(const rstream *r)
{
    return r->msgs == r->nmsg;
}

static bool ss_done(const sstream *s)
{
    return s->msgs == s->nmsg;
}

/* One message for stream r has arrived at `msg`. */
static int deliver(mc_pg_comm *c, rstream *r, const char *msg)
{
    size_t n = r->len - r->off < c->S ? r->len - r->off : c->S;
    switch (r->mode) {
    case R_COPY:
        if (n)
            memcpy(r->dst + r->off, msg, n);
        break;
    case R_HOLD:
        r->held = msg;
        break;
    default:
        break;
    }
    r->off += n;
    r->msgs++;
    return recv_consume(c, 0, r->peer, r->mode == R_HOLD);
}

/* nary_step: when every R_NARY stream holds its next message, reduce them with this
 * rank's contribution into dst in one pass and consume them. 1 when it did. */
static bool nary_step(mc_pg_comm *c, plan *pl)
{
    const void *src[MC_PG_MAX_GROUP];
    rstream *rs[MC_PG_MAX_GROUP];
    int nsrc = 0, nr = 0, own_at = -1;
    for (int i = 0; i < c->nact; i++) {
        int p = c->act[i];
        if (p == c->rank) {
            own_at = nsrc++;
            continue;
        }
        rstream *r = NULL;
        for (int j = 0; j < pl->nr; j++)
            if (pl->r[j].peer == p && pl->r[j].mode == R_NARY) {
                r = &pl->r[j];
                break;
            }
        if (!r)
            continue;
        if (rs_done(r) || !r->held)
            return false;
        rs[nr++] = r;
        src[nsrc++] = r->held;
    }
    if (!nr)
        return false;
    rstream *r0 = rs[0];
    size_t n = r0->len - r0->off < c->S ? r0->len - r0->off : c->S;
    if (own_at >= 0) {
        src[own_at] = r0->own + r0->off;
        if (pl->own_stage) {
            memcpy(pl->own_stage + r0->off, r0->own + r0->off, n);
            *pl->own_staged = r0->off + n;
            src[own_at] = pl->own_stage + r0->off;
        }
    }
    if (n) {
        size_t k = n / mc__pg_dtype_size(pl->dtype);
        mc__pg_reduce_n(pl->dtype, pl->op, r0->dst + r0->off, src, nsrc, k);
        if (pl->avg_div > 0)
            mc__pg_scale_avg(pl->dtype, r0->dst + r0->off, k, pl->avg_div);
    }
    for (int i = 0; i < nr; i++) {
        rs[i]->held = NULL;
        rs[i]->off += n;
        rs[i]->msgs++;
        recv_consume(c, 0, rs[i]->peer, false);
    }
    pl->nary_done = r0->off;
    return true;
}

/* same_host: the peer's segment ("host:port") names this engine's host. */
static bool same_host(const mc_pg_comm *c, int q)
{
    const char *a = mc_te_segment_name(c->te), *b = c->peers[q].seg;
    if (!b)
        return false;
    const char *ca = strrchr(a, ':'), *cb = strrchr(b, ':');
    size_t la = ca ? (size_t)(ca - a) : strlen(a), lb = cb ? (size_t)(cb - b) : strlen(b);
    return la == lb && memcmp(a, b, la) == 0;
}

static mc_pg_result run_plan(mc_pg_comm *c, plan *pl, uint64_t seq)
{
    mc_pg_result res = {0};
    uint64_t last[MC_PG_MAX_GROUP];
    uint64_t probed[MC_PG_MAX_GROUP];
    uint64_t now = mc_now_ms();
    for (int i = 0; i < c->G; i++)
        last[i] = probed[i] = now;
    uint64_t probe_after = (uint64_t)c->timeout_ms / 8;
    probe_after = probe_after < 20 ? 20 : probe_after > 200 ? 200 : probe_after;
    unsigned idle = 0;
    uint64_t idle_since = 0;
    for (;;) {
        bool all = true, progress = false;
        uint64_t sblk = 0, rblk = 0, fail = 0, gated = 0;
        for (int i = 0; i < pl->ns; i++) {
            sstream *s = &pl->s[i];
            if (ss_done(s))
                continue;
            all = false;
            uint64_t bit = 1ull << s->peer;
            if (sblk & bit)
                continue;
            sblk |= bit;
            while (!ss_done(s)) {
                size_t n = s->len - s->off < c->S ? s->len - s->off : c->S;
                if (s->gate && s->off + n > *s->gate) {
                    gated |= bit; /* waits on this rank's reduction, not on the peer */
                    break;
                }
                const char *from = s->src + s->off;
                if (s->stage) {
                    if (*s->staged < s->off + n) {
                        memcpy(s->stage + s->off, from, n);
                        *s->staged = s->off + n;
                    }
                    from = s->stage + s->off;
                }
                int rc = send_try(c, 0, s->peer, NULL, 0, from, n);
                if (rc < 0) {
                    fail |= bit;
                    break;
                }
                if (rc == 0)
                    break;
                s->off += n;
                s->msgs++;
                progress = true;
                last[s->peer] = mc_now_ms();
            }
        }
        for (int i = 0; i < pl->nr; i++) {
            rstream *r = &pl->r[i];
            if (rs_done(r))
                continue;
            all = false;
            uint64_t bit = 1ull << r->peer;
            if (rblk & bit)
                continue;
            rblk |= bit;
            if (r->mode == R_NARY) {
                if (!r->held && (r->held = recv_ready(c, 0, r->peer)) != NULL) {
                    progress = true;
                    last[r->peer] = mc_now_ms();
                }
                continue;
            }
            while (!rs_done(r)) {
                const char *msg = recv_ready(c, 0, r->peer);
                if (!msg)
                    break;
                if (deliver(c, r, msg) < 0) {
                    fail |= bit;
                    break;
                }
                progress = true;
                last[r->peer] = mc_now_ms();
            }
        }
        while (pl->nary && nary_step(c, pl)) {
            progress = true;
            for (int i = 0; i < pl->nr; i++) /* the next messages may be there already */
                if (pl->r[i].mode == R_NARY && !rs_done(&pl->r[i]) && !pl->r[i].held)
                    pl->r[i].held = recv_ready(c, 0, pl->r[i].peer);
        }
        if (fail) {
            res.status = MC_PG_FAILED;
            res.suspects = fail;
            res.complete = pl->closing;
            return res;
        }
        /* a finished stream whose peer is still blocked on other streams is fine */
        bool left = false;
        for (int i = 0; i < pl->ns && !left; i++)
            left = !ss_done(&pl->s[i]);
        for (int i = 0; i < pl->nr && !left; i++)
            left = !rs_done(&pl->r[i]);
        if (!left || all) {
            res.status = MC_PG_DONE;
            return res;
        }
        if (progress) {
            idle = 0;
            continue;
        }
        if (idle == 0)
            idle_since = mc_now_us();
        int sy = check_sync(c, seq, pl->closing);
        if (sy) {
            res.status = sy == 1 ? MC_PG_SYNC : MC_PG_DONE;
            res.complete = pl->closing;
            return res;
        }
        idle++;
        if ((idle & 31) == 0) {
            now = mc_now_ms();
            uint64_t stalled = 0, waits = (sblk & ~gated) | rblk;
            for (int q = 0; q < c->G; q++)
                if ((waits >> q) & 1 && now - last[q] > (uint64_t)c->timeout_ms)
                    stalled |= 1ull << q;
            if (stalled) {
                res.status = MC_PG_FAILED;
                res.suspects = stalled;
                res.complete = pl->closing;
                return res;
            }
            /* a same-host peer whose process died refuses the probe at once: no need to
             * wait for the whole timeout */
            uint64_t gone = 0;
            for (int q = 0; q < c->G; q++) {
                if (!(((sblk | rblk) >> q) & 1) || now - last[q] < probe_after ||
                    now - probed[q] < probe_after || !same_host(c, q))
                    continue;
                probed[q] = now;
                if (mc_te_send_probe(c->te, c->peers[q].seg) == MC_RPC_FAIL)
                    gone |= 1ull << q;
            }
            if (gone) {
                res.status = MC_PG_FAILED;
                res.suspects = gone;
                res.complete = pl->closing;
                return res;
            }
            if (c->nops)
                p2p_progress(c);
        }
        backoff(idle, &idle_since);
    }
}

static mc_pg_result closing(mc_pg_comm *c, uint64_t seq)
{
    plan *pl = mc_xcalloc(1, sizeof *pl);
    pl->closing = true;
    for (int i = 0; i < c->nact; i++) {
        int p = c->act[i];
        if (p == c->rank)
            continue;
        plan_send(c, pl, p, NULL, 0);
        plan_recv(c, pl, p, R_DISCARD, NULL, NULL, 0);
    }
    plan_stagger(c, pl);
    mc_pg_result r = run_plan(c, pl, seq);
    free(pl);
    return r;
}

/* run a data plan then the closing one; frees pl */
static mc_pg_result finish(mc_pg_comm *c, plan *pl, uint64_t seq)
{
    plan_stagger(c, pl);
    mc_pg_result r = run_plan(c, pl, seq);
    free(pl);
    if (r.status != MC_PG_DONE)
        return r;
    return closing(c, seq);
}

static bool is_active(const mc_pg_comm *c, int slot)
{
    return slot >= 0 && slot < c->G && ((c->active >> slot) & 1);
}

static mc_pg_result bad_args(void)
{
    mc_pg_result r = {.status = -1};
    return r;
}

/* ------------------------------------------------------------------------------------ */
/* Life cycle                                                                           */
/* ------------------------------------------------------------------------------------ */

mc_pg_comm *mc__pg_comm_create(mc_te *te, int rank, int max_group, size_t slot_bytes,
                               int timeout_ms)
{
    if (!te || max_group < 1 || max_group > MC_PG_MAX_GROUP || rank < 0 ||
        rank >= max_group || slot_bytes < 4096 || slot_bytes > (64u << 20) ||
        slot_bytes % 4096)
        return NULL;
    mc_pg_comm *c = mc_xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->te = te;
    c->rank = rank;
    c->G = max_group;
    c->S = slot_bytes;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    if (mc_env_u64("MC_PG_CREDITS", MC_PG_NSLOT, 1, MC_PG_NSLOT, &c->credits) < 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return NULL;
    }
    c->ctrl_sz = ((size_t)max_group * NCTRL * LINE + 4095) & ~(size_t)4095;
    c->region_sz = c->ctrl_sz + 2 * (size_t)max_group * MC_PG_NSLOT * slot_bytes;
    void *base = NULL;
    int rc = mc_te_alloc_shared(te, c->region_sz, &base);
    if (rc != MC_OK) {
        mc_log(MC_LOG_ERROR, TAG, "cannot allocate a %zu-byte mailbox: %s", c->region_sz,
               mc_strerror(rc));
        pthread_mutex_destroy(&c->lock);
        free(c);
        return NULL;
    }
    c->base = base;
    c->words = mc_xcalloc(NWORDS, sizeof *c->words);
    c->active = 1ull << rank;
    c->nact = 1;
    c->act[0] = rank;
    c->next_id = 1;
    return c;
}

void mc__pg_comm_destroy(mc_pg_comm *c)
{
    if (!c)
        return;
    if (c->batch) {
        mc_te_wait_batch(c->te, c->batch, c->timeout_ms, NULL);
        mc_te_free_batch(c->te, c->batch);
    }
    for (int i = 0; i < c->G; i++) {
        if (c->peers[i].open)
            mc_te_close_segment(c->te, c->peers[i].sid);
        free(c->peers[i].seg);
    }
    for (size_t i = 0; i < c->nops; i++)
        free(c->ops[i]);
    free(c->ops);
    for (size_t i = 0; i < c->nuxs; i++) {
        free(c->uxs[i]->buf);
        free(c->uxs[i]);
    }
    free(c->uxs);
    mc_te_free_shared(c->te, c->base);
    free(c->words);
    free(c->save);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

uint64_t mc__pg_comm_base(const mc_pg_comm *c)
{
    return (uint64_t)(uintptr_t)c->base;
}

size_t mc__pg_comm_size(const mc_pg_comm *c)
{
    return c->region_sz;
}

void mc__pg_comm_set_timeout(mc_pg_comm *c, int timeout_ms)
{
    pthread_mutex_lock(&c->lock);
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    pthread_mutex_unlock(&c->lock);
}

int mc__pg_comm_set_peer(mc_pg_comm *c, int slot, const char *segment, uint64_t base)
{
    if (slot < 0 || slot >= c->G || !segment)
        return MC_INVALID_PARAMS;
    pthread_mutex_lock(&c->lock);
    pg_peer *p = &c->peers[slot];
    int rc = MC_OK;
    if (!p->open || strcmp(p->seg, segment) != 0 || p->base != base) {
        if (p->open)
            mc_te_close_segment(c->te, p->sid);
        p->open = false;
        free(p->seg);
        p->seg = mc_xstrdup(segment);
        p->base = base;
        rc = mc_te_open_segment(c->te, segment, &p->sid);
        p->open = rc == MC_OK;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void mc__pg_comm_set_view(mc_pg_comm *c, uint64_t epoch, uint64_t active)
{
    pthread_mutex_lock(&c->lock);
    c->epoch = epoch;
    c->active = active & (c->G == 64 ? ~0ull : ((1ull << c->G) - 1));
    c->nact = 0;
    c->mypos = -1;
    for (int i = 0; i < c->G; i++) {
        if ((c->active >> i) & 1) {
            if (i == c->rank)
                c->mypos = c->nact;
            c->act[c->nact++] = i;
        }
        c->cs[i] = c->cr[i] = c->ps[i] = c->pr[i] = c->cr_acked[i] = 0;
    }
    for (size_t i = 0; i < c->nops; i++) {
        if (c->ops[i]->state == 0)
            c->ops[i]->state = -1;
        c->ops[i]->ux = NULL;
    }
    for (size_t i = 0; i < c->nuxs; i++) {
        free(c->uxs[i]->buf);
        free(c->uxs[i]);
    }
    c->nuxs = 0;
    memset(c->rin, 0, sizeof c->rin);
    pthread_mutex_unlock(&c->lock);
}

void mc__pg_comm_request_sync(mc_pg_comm *c, uint64_t seq)
{
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->nact; i++) {
        int p = c->act[i];
        if (p != c->rank)
            put_word(c, p, ctrl_off(c->rank, K_SY), mkword(c->epoch, seq));
    }
    pthread_mutex_unlock(&c->lock);
}

int mc__pg_comm_probe(mc_pg_comm *c, int slot)
{
    if (slot < 0 || slot >= c->G)
        return 0;
    pthread_mutex_lock(&c->lock);
    char *seg = c->peers[slot].seg ? mc_xstrdup(c->peers[slot].seg) : NULL;
    pthread_mutex_unlock(&c->lock);
    if (!seg)
        return 0;
    int ok = mc_te_send_probe(c->te, seg) == MC_OK;
    free(seg);
    return ok;
}

/* ------------------------------------------------------------------------------------ */
/* Collectives                                                                          */
/* ------------------------------------------------------------------------------------ */

static void save_input(mc_pg_comm *c, int rerun, void *buf, size_t nbytes)
{
    if (!rerun) {
        if (c->save_cap < nbytes) {
            free(c->save);
            c->save = mc_xmalloc(nbytes);
            c->save_cap = nbytes;
        }
        memcpy(c->save, buf, nbytes);
    } else if (c->save_cap >= nbytes) {
        memcpy(buf, c->save, nbytes);
    }
}

#define LOCKED(expr)                                                                      \
    do {                                                                                  \
        pthread_mutex_lock(&c->lock);                                                     \
        mc_pg_result r_ = (expr);                                                         \
        pthread_mutex_unlock(&c->lock);                                                   \
        return r_;                                                                        \
    } while (0)

static mc_pg_result allreduce_locked(mc_pg_comm *c, uint64_t seq, int rerun, char *buf,
                                     size_t count, int dtype, int op)
{
    size_t esz = mc__pg_dtype_size(dtype);
    size_t nbytes = count * esz;
    int P = c->nact;
    bool small = nbytes <= SMALL_ALLREDUCE && nbytes <= c->S;
    if (rerun && c->sv_n >= 0 && c->save_cap >= nbytes) {
        /* the failed attempt staged its save: restore what it copied (what it did not
         * copy it neither sent nor overwrote) */
        for (int i = 0; i < c->sv_n; i++)
            memcpy(buf + c->sv_off[i], c->save + c->sv_off[i], c->sv_len[i]);
        c->sv_n = 0;
        if (small || P <= 1)
            save_input(c, 0, buf, nbytes);
    } else {
        c->sv_n = -1; /* a whole copy, or nothing staged yet */
        if (small || P <= 1)
            save_input(c, rerun, buf, nbytes);
    }
    if (P <= 1 || count == 0)
        return closing(c, seq);
    plan *pl = mc_xcalloc(1, sizeof *pl);
    pl->dtype = dtype;
    pl->op = op;
    if (small) {
        /* one round: everyone's whole input to everyone, reduce in slot order */
        const char *src[MC_PG_MAX_GROUP];
        for (int i = 0; i < P; i++) {
            int p = c->act[i];
            if (p == c->rank)
                continue;
            plan_send(c, pl, p, buf, nbytes);
            plan_recv(c, pl, p, R_HOLD, NULL, NULL, nbytes);
        }
        plan_stagger(c, pl);
        mc_pg_result r = run_plan(c, pl, seq);
        if (r.status != MC_PG_DONE) {
            free(pl);
            return r;
        }
        for (int i = 0, k = 0; i < P; i++) {
            int p = c->act[i];
            if (p == c->rank) {
                src[i] = buf;
                continue;
            }
            while (pl->r[k].peer != p)
                k++;
            src[i] = pl->r[k].held;
        }
        mc__pg_reduce_n(dtype, op, buf, (const void *const *)src, P, count);
        if (op == MC_PG_AVG)
            mc__pg_scale_avg(dtype, buf, count, P);
        free(pl);
        int fail = 0;
        mc_pg_result res = {0};
        for (int i = 0; i < P; i++)
            if (c->act[i] != c->rank && ack_coll(c, c->act[i]) < 0)
                res.suspects |= 1ull << c->act[i], fail = 1;
        if (fail) {
            res.status = MC_PG_FAILED;
            return res;
        }
        return closing(c, seq);
    }
    /* reduce-scatter then all-gather, one block per active rank */
    size_t base_cnt = count / (size_t)P, rem = count % (size_t)P;
    size_t off[MC_PG_MAX_GROUP], cnt[MC_PG_MAX_GROUP];
    for (int i = 0, o = 0; i < P; i++) {
        cnt[i] = base_cnt + ((size_t)i < rem ? 1 : 0);
        off[i] = (size_t)o;
        o += (int)cnt[i];
    }
    /* one plan, pipelined: the all-gather stream of this rank's block to a peer follows
     * the reduce-scatter stream to it on the same channel and sends each message as soon
     * as that part of the block is reduced (gate: nary_done). Receiving block i's
     * message k overwrites our input there only after peer i reduced it, which needed
     * our message k of block i: it was sent already. */
    int me = c->mypos;
    size_t mylen = cnt[me] * esz;
    char *mine = buf + off[me] * esz;
    if (op == MC_PG_AVG)
        pl->avg_div = P;
    /* the save of the input for a rerun is staged: each message of it is copied into
     * c->save just before it is sent (then sent from the copy, in cache) or, for this
     * rank's own block, before the reduction overwrites it: one read of the input
     * instead of two */
    if (c->save_cap < nbytes) {
        free(c->save);
        c->save = mc_xmalloc(nbytes);
        c->save_cap = nbytes;
    }
    c->sv_n = P;
    for (int i = 0; i < P; i++) {
        c->sv_off[i] = off[i] * esz;
        c->sv_len[i] = 0;
    }
    pl->own_stage = c->save + off[me] * esz;
    pl->own_staged = &c->sv_len[me];
    for (int i = 0; i < P; i++) {
        int p = c->act[i];
        if (p == c->rank)
            continue;
        plan_send(c, pl, p, buf + off[i] * esz, cnt[i] * esz);
        pl->s[pl->ns - 1].stage = c->save + off[i] * esz;
        pl->s[pl->ns - 1].staged = &c->sv_len[i];
        plan_recv(c, pl, p, R_NARY, mine, mine, mylen);
    }
    for (int i = 0; i < P; i++) {
        int p = c->act[i];
        if (p == c->rank)
            continue;
        plan_send(c, pl, p, mine, mylen);
        pl->s[pl->ns - 1].gate = &pl->nary_done;
        plan_recv(c, pl, p, R_COPY, buf + off[i] * esz, NULL, cnt[i] * esz);
    }
    return finish(c, pl, seq);
}

mc_pg_result mc__pg_allreduce(mc_pg_comm *c, uint64_t seq, int rerun, void *buf,
                              size_t count, int dtype, int op)
{
    if (!mc__pg_op_valid(dtype, op) || (count && !buf))
        return bad_args();
    LOCKED(allreduce_locked(c, seq, rerun, buf, count, dtype, op));
}

static mc_pg_result broadcast_locked(mc_pg_comm *c, uint64_t seq, void *buf, size_t nbytes,
                                     int root)
{
    plan *pl = mc_xcalloc(1, sizeof *pl);
    if (root == c->rank) {
        for (int i = 0; i < c->nact; i++)
            if (c->act[i] != c->rank)
                plan_send(c, pl, c->act[i], buf, nbytes);
    } else {
        plan_recv(c, pl, root, R_COPY, buf, NULL, nbytes);
    }
    return finish(c, pl, seq);
}

mc_pg_result mc__pg_broadcast(mc_pg_comm *c, uint64_t seq, void *buf, size_t nbytes,
                              int root)
{
    if (!is_active(c, root) || (nbytes && !buf))
        return bad_args();
    LOCKED(broadcast_locked(c, seq, buf, nbytes, root));
}

static mc_pg_result allgather_locked(mc_pg_comm *c, uint64_t seq, void *const *outs,
                                     const void *in, size_t nbytes)
{
    plan *pl = mc_xcalloc(1, sizeof *pl);
    for (int i = 0; i < c->nact; i++) {
        int p = c->act[i];
        if (p == c->rank)
            continue;
        plan_send(c, pl, p, in, nbytes);
        plan_recv(c, pl, p, R_COPY, outs[p], NULL, nbytes);
    }
    if (outs[c->rank] != in && nbytes)
        memmove(outs[c->rank], in, nbytes);
    return finish(c, pl, seq);
}

mc_pg_result mc__pg_allgather(mc_pg_comm *c, uint64_t seq, void *const *outs,
                              const void *in, size_t nbytes)
{
    if (!outs)
        return bad_args();
    LOCKED(allgather_locked(c, seq, outs, in, nbytes));
}

static mc_pg_result reduce_scatter_locked(mc_pg_comm *c, uint64_t seq, void *out,
                                          const void *const *ins, size_t count, int dtype,
                                          int op)
{
    size_t nbytes = count * mc__pg_dtype_size(dtype);
    plan *pl = mc_xcalloc(1, sizeof *pl);
    pl->dtype = dtype;
    pl->op = op;
    for (int i = 0; i < c->nact; i++) {
        int p = c->act[i];
        if (p == c->rank)
            continue;
        plan_send(c, pl, p, ins[p], nbytes);
        plan_recv(c, pl, p, R_NARY, out, ins[c->rank], nbytes);
    }
    if (c->nact == 1 && out != ins[c->rank] && nbytes)
        memmove(out, ins[c->rank], nbytes);
    plan_stagger(c, pl);
    mc_pg_result r = run_plan(c, pl, seq);
    free(pl);
    if (r.status != MC_PG_DONE)
        return r;
    if (op == MC_PG_AVG)
        mc__pg_scale_avg(dtype, out, count, c->nact);
    return closing(c, seq);
}

mc_pg_result mc__pg_reduce_scatter(mc_pg_comm *c, uint64_t seq, void *out,
                                   const void *const *ins, size_t count, int dtype, int op)
{
    if (!mc__pg_op_valid(dtype, op) || !ins)
        return bad_args();
    LOCKED(reduce_scatter_locked(c, seq, out, ins, count, dtype, op));
}

static mc_pg_result reduce_locked(mc_pg_comm *c, uint64_t seq, int rerun, char *buf,
                                  size_t count, int dtype, int op, int root)
{
    size_t nbytes = count * mc__pg_dtype_size(dtype);
    plan *pl = mc_xcalloc(1, sizeof *pl);
    pl->dtype = dtype;
    pl->op = op;
    if (root == c->rank) {
        save_input(c, rerun, buf, nbytes);
        for (int i = 0; i < c->nact; i++)
            if (c->act[i] != c->rank)
                plan_recv(c, pl, c->act[i], R_NARY, buf, buf, nbytes);
    } else {
        plan_send(c, pl, root, buf, nbytes);
    }
    mc_pg_result r = run_plan(c, pl, seq);
    free(pl);
    if (r.status != MC_PG_DONE)
        return r;
    if (root == c->rank && op == MC_PG_AVG)
        mc__pg_scale_avg(dtype, buf, count, c->nact);
    return closing(c, seq);
}

mc_pg_result mc__pg_reduce(mc_pg_comm *c, uint64_t seq, int rerun, void *buf, size_t count,
                           int dtype, int op, int root)
{
    if (!mc__pg_op_valid(dtype, op) || !is_active(c, root) || (count && !buf))
        return bad_args();
    LOCKED(reduce_locked(c, seq, rerun, buf, count, dtype, op, root));
}

static mc_pg_result gather_locked(mc_pg_comm *c, uint64_t seq, void *const *outs,
                                  const void *in, size_t nbytes, int root)
{
    plan *pl = mc_xcalloc(1, sizeof *pl);
    if (root == c->rank) {
        for (int i = 0; i < c->nact; i++)
            if (c->act[i] != c->rank)
                plan_recv(c, pl, c->act[i], R_COPY, outs[c->act[i]], NULL, nbytes);
        if (outs[c->rank] != in && nbytes)
            memmove(outs[c->rank], in, nbytes);
    } else {
        plan_send(c, pl, root, in, nbytes);
    }
    return finish(c, pl, seq);
}

mc_pg_result mc__pg_gather(mc_pg_comm *c, uint64_t seq, void *const *outs, const void *in,
                           size_t nbytes, int root)
{
    if (!is_active(c, root) || (root == c->rank && !outs))
        return bad_args();
    LOCKED(gather_locked(c, seq, outs, in, nbytes, root));
}

static mc_pg_result scatter_locked(mc_pg_comm *c, uint64_t seq, void *out,
                                   const void *const *ins, size_t nbytes, int root)
{
    plan *pl = mc_xcalloc(1, sizeof *pl);
    if (root == c->rank) {
        for (int i = 0; i < c->nact; i++)
            if (c->act[i] != c->rank)
                plan_send(c, pl, c->act[i], ins[c->act[i]], nbytes);
        if (out != ins[c->rank] && nbytes)
            memmove(out, ins[c->rank], nbytes);
    } else {
        plan_recv(c, pl, root, R_COPY, out, NULL, nbytes);
    }
    return finish(c, pl, seq);
}

mc_pg_result mc__pg_scatter(mc_pg_comm *c, uint64_t seq, void *out, const void *const *ins,
                            size_t nbytes, int root)
{
    if (!is_active(c, root) || (root == c->rank && !ins))
        return bad_args();
    LOCKED(scatter_locked(c, seq, out, ins, nbytes, root));
}

static mc_pg_result alltoall_locked(mc_pg_comm *c, uint64_t seq, void *const *outs,
                                    const size_t *out_lens, const void *const *ins,
                                    const size_t *in_lens)
{
    plan *pl = mc_xcalloc(1, sizeof *pl);
    for (int i = 0; i < c->nact; i++) {
        int p = c->act[i];
        if (p == c->rank)
            continue;
        plan_send(c, pl, p, ins[p], in_lens[p]);
        plan_recv(c, pl, p, R_COPY, outs[p], NULL, out_lens[p]);
    }
    size_t n = in_lens[c->rank] < out_lens[c->rank] ? in_lens[c->rank] : out_lens[c->rank];
    if (outs[c->rank] != ins[c->rank] && n)
        memmove(outs[c->rank], ins[c->rank], n);
    return finish(c, pl, seq);
}

mc_pg_result mc__pg_alltoall(mc_pg_comm *c, uint64_t seq, void *const *outs,
                             const size_t *out_lens, const void *const *ins,
                             const size_t *in_lens)
{
    if (!outs || !ins || !out_lens || !in_lens)
        return bad_args();
    LOCKED(alltoall_locked(c, seq, outs, out_lens, ins, in_lens));
}

static mc_pg_result barrier_locked(mc_pg_comm *c, uint64_t seq)
{
    plan *pl = mc_xcalloc(1, sizeof *pl);
    for (int i = 0; i < c->nact; i++) {
        int p = c->act[i];
        if (p == c->rank)
            continue;
        plan_send(c, pl, p, NULL, 0);
        plan_recv(c, pl, p, R_DISCARD, NULL, NULL, 0);
    }
    return finish(c, pl, seq);
}

mc_pg_result mc__pg_barrier(mc_pg_comm *c, uint64_t seq)
{
    LOCKED(barrier_locked(c, seq));
}

/* ------------------------------------------------------------------------------------ */
/* Point-to-point                                                                       */
/* ------------------------------------------------------------------------------------ */

/* payload bytes in message k of a p2p message of len bytes whose first k messages
 * carried off bytes */
static size_t p2p_chunk(const mc_pg_comm *c, size_t len, size_t off, size_t k)
{
    size_t cap = k == 0 ? c->S - P2P_HDR : c->S;
    return len - off < cap ? len - off : cap;
}

static size_t p2p_nmsgs(const mc_pg_comm *c, size_t len)
{
    size_t first = c->S - P2P_HDR;
    return len <= first ? 1 : 1 + (len - first + c->S - 1) / c->S;
}

static void ux_remove(mc_pg_comm *c, p2p_ux *u)
{
    for (size_t i = 0; i < c->nuxs; i++)
        if (c->uxs[i] == u) {
            memmove(&c->uxs[i], &c->uxs[i + 1], (c->nuxs - i - 1) * sizeof *c->uxs);
            c->nuxs--;
            break;
        }
    free(u->buf);
    free(u);
}

/* a recv matched to an unexpected message that is complete: copy it out */
static void ux_finish(mc_pg_comm *c, p2p_op *o)
{
    p2p_ux *u = o->ux;
    if (u->len != o->len) {
        o->state = -1;
    } else {
        if (u->len)
            memcpy(o->buf, u->buf, u->len);
        o->state = 1;
    }
    o->ux = NULL;
    ux_remove(c, u);
}

/* the earliest posted recv from p with this tag that nothing is delivering into yet */
static p2p_op *match_recv(mc_pg_comm *c, int p, int64_t tag)
{
    for (size_t i = 0; i < c->nops; i++) {
        p2p_op *o = c->ops[i];
        if (!o->send && o->state == 0 && o->peer == p && o->tag == tag && !o->matched &&
            !o->ux)
            return o;
    }
    return NULL;
}

/* drain what source p has delivered into our mailbox (a failed ack is noticed by the
 * sender) */
static void p2p_drain(mc_pg_comm *c, int p, uint64_t now)
{
    p2p_in *in = &c->rin[p];
    const char *msg;
    while ((msg = recv_ready(c, 1, p)) != NULL) {
        const char *payload = msg;
        if (!in->busy) {
            uint64_t h[2];
            memcpy(h, msg, sizeof h);
            payload = msg + P2P_HDR;
            *in = (p2p_in){.busy = true, .len = (size_t)h[1], .nmsg = p2p_nmsgs(c, h[1])};
            p2p_op *o = match_recv(c, p, (int64_t)h[0]);
            if (o) {
                o->matched = true;
                if (o->len == in->len) {
                    in->op = o;
                } else {
                    o->state = -1; /* gloo: the sizes of a send and its recv must match */
                    mc_log(MC_LOG_WARN, TAG, "recv from rank %d tag %lld: %zu bytes posted, "
                           "%zu sent", p, (long long)o->tag, o->len, in->len);
                }
            } else {
                p2p_ux *u = mc_xcalloc(1, sizeof *u);
                u->peer = p;
                u->tag = (int64_t)h[0];
                u->len = in->len;
                u->buf = in->len ? mc_xmalloc(in->len) : NULL;
                if (c->nuxs == c->capuxs) {
                    c->capuxs = c->capuxs ? 2 * c->capuxs : 8;
                    c->uxs = mc_xrealloc(c->uxs, c->capuxs * sizeof *c->uxs);
                }
                c->uxs[c->nuxs++] = u;
                in->ux = u;
            }
        }
        size_t n = p2p_chunk(c, in->len, in->off, in->msgs);
        if (in->op) {
            if (n)
                memcpy(in->op->buf + in->off, payload, n);
            in->op->off += n;
            in->op->msgs++;
        } else if (n && in->ux)
            memcpy(in->ux->buf + in->off, payload, n);
        recv_consume(c, 1, p, false);
        in->off += n;
        in->msgs++;
        for (size_t i = 0; i < c->nops; i++)
            if (!c->ops[i]->send && c->ops[i]->peer == p)
                c->ops[i]->last_ms = now; /* the source is alive */
        if (in->msgs == in->nmsg) {
            if (in->op) {
                in->op->state = 1;
            } else if (in->ux) {
                in->ux->complete = true;
                if (in->ux->waiter)
                    ux_finish(c, in->ux->waiter);
            }
            *in = (p2p_in){0};
        }
    }
}

static void p2p_progress(mc_pg_comm *c)
{
    uint64_t sblk = 0, rwant = 0;
    uint64_t now = mc_now_ms();
    for (size_t i = 0; i < c->nops; i++) {
        p2p_op *o = c->ops[i];
        if (o->state != 0)
            continue;
        uint64_t bit = 1ull << o->peer;
        if (!o->send) {
            rwant |= bit; /* waits on the channel from its peer (also when it waits for
                             an unexpected message still arriving) */
            continue;
        }
        if (sblk & bit)
            continue; /* sends to one peer go in posting order */
        sblk |= bit;
        while (o->msgs < o->nmsg) {
            size_t n = p2p_chunk(c, o->len, o->off, o->msgs);
            int rc = o->msgs == 0
                         ? send_try(c, 1, o->peer, o->hdr, P2P_HDR, o->buf + o->off, n)
                         : send_try(c, 1, o->peer, NULL, 0, o->buf + o->off, n);
            if (rc < 0) {
                o->state = -1;
                break;
            }
            if (rc == 0)
                break;
            o->off += n;
            o->msgs++;
            o->last_ms = now;
        }
        if (o->state == 0 && o->msgs == o->nmsg)
            o->state = 1;
    }
    for (int p = 0; p < c->G; p++)
        if ((rwant >> p) & 1)
            p2p_drain(c, p, now);
}

int64_t mc__pg_p2p_post(mc_pg_comm *c, int send, int peer, int64_t tag, void *buf,
                        size_t nbytes)
{
    if (peer < 0 || peer >= c->G || (nbytes && !buf))
        return -1;
    pthread_mutex_lock(&c->lock);
    if (!is_active(c, peer) || peer == c->rank) {
        pthread_mutex_unlock(&c->lock);
        return -1;
    }
    p2p_op *o = mc_xcalloc(1, sizeof *o);
    o->id = c->next_id++;
    o->send = send;
    o->peer = peer;
    o->tag = tag;
    o->buf = buf;
    o->len = nbytes;
    o->nmsg = p2p_nmsgs(c, nbytes);
    o->hdr[0] = (uint64_t)tag;
    o->hdr[1] = nbytes;
    o->last_ms = mc_now_ms();
    if (c->nops == c->capops) {
        c->capops = c->capops ? 2 * c->capops : 16;
        c->ops = mc_xrealloc(c->ops, c->capops * sizeof *c->ops);
    }
    c->ops[c->nops++] = o;
    if (!send) {
        /* the earliest message from (peer, tag) that arrived before this recv */
        for (size_t i = 0; i < c->nuxs; i++) {
            p2p_ux *u = c->uxs[i];
            if (u->peer == peer && u->tag == tag && !u->waiter) {
                u->waiter = o;
                o->ux = u;
                if (u->complete)
                    ux_finish(c, o);
                break;
            }
        }
    }
    p2p_progress(c);
    int64_t id = o->id;
    pthread_mutex_unlock(&c->lock);
    return id;
}

/* o is terminal and about to be freed: nothing may point at it any more */
static void p2p_forget(mc_pg_comm *c, p2p_op *o)
{
    if (o->ux) {
        o->ux->waiter = NULL;
        ux_remove(c, o->ux); /* its message was claimed by a recv that failed */
        o->ux = NULL;
    }
    for (int p = 0; p < c->G; p++)
        if (c->rin[p].op == o)
            c->rin[p].op = NULL; /* the rest of that message is discarded */
}

static p2p_op *find_op(mc_pg_comm *c, int64_t id, size_t *at)
{
    for (size_t i = 0; i < c->nops; i++)
        if (c->ops[i]->id == id) {
            *at = i;
            return c->ops[i];
        }
    return NULL;
}

int mc__pg_p2p_wait(mc_pg_comm *c, int64_t id, int64_t timeout_ms)
{
    uint64_t start = mc_now_ms();
    unsigned idle = 0;
    uint64_t idle_since = 0;
    bool probed = false;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        size_t at;
        p2p_op *o = find_op(c, id, &at);
        if (!o) {
            pthread_mutex_unlock(&c->lock);
            return -1;
        }
        if (o->state == 0) {
            size_t before = o->msgs;
            p2p_progress(c);
            if (o->msgs != before)
                idle = 0;
        }
        if (o->state == 0 && !is_active(c, o->peer))
            o->state = -1;
        if (o->state != 0) {
            int st = o->state > 0 ? 0 : -1;
            p2p_forget(c, o);
            memmove(&c->ops[at], &c->ops[at + 1], (c->nops - at - 1) * sizeof *c->ops);
            c->nops--;
            free(o);
            pthread_mutex_unlock(&c->lock);
            return st;
        }
        uint64_t now = mc_now_ms();
        if (timeout_ms >= 0 && now - start >= (uint64_t)timeout_ms) {
            pthread_mutex_unlock(&c->lock);
            return 1;
        }
        if (!probed && now - o->last_ms > (uint64_t)c->timeout_ms) {
            /* silent for a whole timeout: fail only if its engine is gone */
            probed = true;
            char *seg = mc_xstrdup(c->peers[o->peer].seg ? c->peers[o->peer].seg : "");
            pthread_mutex_unlock(&c->lock);
            int alive = seg[0] && mc_te_send_probe(c->te, seg) == MC_OK;
            free(seg);
            pthread_mutex_lock(&c->lock);
            o = find_op(c, id, &at);
            if (o && !alive && o->state == 0)
                o->state = -1;
            continue;
        }
        if (idle == 0)
            idle_since = mc_now_us();
        idle++;
        pthread_mutex_unlock(&c->lock);
        backoff(idle, &idle_since);
        pthread_mutex_lock(&c->lock);
    }
}
