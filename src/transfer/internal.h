/* internal.h: the transfer engine's one internal header (src/transfer only; no other
 * module includes it: the store client uses the public mc_te_republish instead).
 *
 * Files: engine.c (create, initialize, shutdown, destroy, stats), segment.c (our own
 * descriptor, publishing, memory registration, shared memfd memory), regions.c (the
 * registered-range table), managed.c (managed buffers), peers.c (peer table, descriptor
 * fetch and cache, probe), submit.c (submit and the sync/async helpers), batch.c
 * (batches and task states), tcp_client.c / tcp_server.c (the TCP data path, initiator
 * and serving side), handshake.c (handshake port, notifications), shm.c (same-host path),
 * wire.c (data-port and handshake framing), peerauth.c (the cluster secret on every port,
 * the per-address connection limit), authstep.c (the handshake as a byte-stream machine).
 *
 * Threads: user threads call the public API; each engine runs `nio` I/O loops (net/loop.h).
 * Loop 0 owns the listeners (handshake, data, shm); accepted data connections are
 * spread over the loops; a peer's client connections are spread over its lanes, one
 * lane per loop (te_lane), starting at its home loop.
 * Loop-owned state is marked "loop"; anything else names its guard.
 *
 * Lock order (outer first; a thread holding one takes only locks after it in its chain):
 *   te->managed_lock > te->publish_lock > te->desc_lock
 *   peer->refresh_lock > peer->lock > peer->shm_rw (rwlock)
 *   te->batch_lock > batch->lock
 *   te->seg_lock, te->reg_lock (rwlock), te->notify_lock: leaves, held around table
 *   lookups only; nothing is taken under them.
 * The chains do not nest into each other (no peer lock is held while publishing, no
 * batch lock while touching a peer: batch.c queues a notify slice after unlocking).
 * peer->lock may be held across a same-host map request (blocking Unix-socket I/O with a
 * deadline, user threads only) and while posting to a loop (net/loop's own lock).
 * Loop threads take only reg_lock (read), desc_lock (handshake answers), peer->lock
 * (inbox, stale flag), batch->lock and notify_lock, and never block on I/O under any.
 * te->data_ips.lock / te->hs_ips.lock (peerauth.c) are leaves, held around one table
 * update at accept and at close.
 * te->fence.lock (fence.c) is a leaf: taken under seg_lock (new peers read the target
 * table) and by loop threads (per-connection fence cache refresh), never held while
 * taking another lock.
 */
#ifndef MC_TRANSFER_INTERNAL_H
#define MC_TRANSFER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/auth.h"
#include "common/copy.h"
#include "common/list.h"
#include "mooncake/mc_time.h"
#include "mooncake/metadata.h"
#include "mooncake/transfer_engine.h"
#include "net/loop.h"
#include "transfer/authstep.h"
#include "transfer/wire.h"

#define TE_TAG "te"
#define TE_MAX_IO 16
#define TE_MAX_CONNS 16
#define TE_MAX_NOTIFIES 65536
#define TE_MAX_NOTIFY_BYTES (256ull << 20)
#define TE_HS_CONNECT_TIMEOUT_MS 5000
#define TE_TICK_MS 100

typedef struct mc_te mc_te;
typedef struct te_io te_io;

/* ---- registered memory ---- */

enum { TE_REG_USER = 0, TE_REG_SHARED = 1, TE_REG_MANAGED_CHUNK = 2 };

typedef struct te_region {
    uint64_t base, len;
    int kind;          /* TE_REG_* */
    int memfd;         /* shared kinds: the memfd (owned); -1 otherwise */
    atomic_int refs;   /* 1 for the table + one per serving operation using it */
    atomic_bool dead;  /* removed from the table; waiting for refs to drain */
} te_region;

/* ---- batches ---- */

typedef struct te_batch te_batch;

typedef struct te_task {
    _Atomic int state;              /* mc_te_state */
    _Atomic int error;              /* first error (status code) */
    _Atomic uint64_t done_bytes;
    _Atomic uint32_t slices_left;
    uint64_t length;
    te_batch *batch;
} te_task;

typedef struct te_slice te_slice;
typedef struct te_peer te_peer;
typedef struct te_lane te_lane;

struct te_slice {
    te_slice *next;
    te_task *task;     /* NULL for a notify slice */
    te_batch *batch;   /* the batch (notify slices use it to finish) */
    te_peer *peer;
    te_lane *lane;     /* the lane (and so the loop) carrying it: set when it is queued
                          (tcp_client.c), never changed afterwards (retries stay on it) */
    uint8_t op;        /* MC_TE_WOP_* */
    uint8_t tries;     /* connection attempts used */
    int status;        /* 0 or -errno from the reply */
    char *local;       /* local memory (WRITE source / READ destination / NOTIFY body) */
    uint64_t remote, len;
    uint64_t deadline_ms;
    uint64_t id;
    uint64_t epoch;    /* WRITE: the request's fence_epoch (0 = unfenced) */
    bool stale;        /* refused by the target fence: sent as a PING, fails -ESTALE */
    uint8_t hdr[MC_TE_REQ_SIZE];
    uint8_t rhdr[MC_TE_REP_SIZE];
};

typedef struct te_chunk {
    struct te_chunk *next;
    size_t n;
    te_slice s[];
} te_chunk;

enum { TE_NOTIFY_NONE = 0, TE_NOTIFY_WAITING, TE_NOTIFY_SENT, TE_NOTIFY_DONE, TE_NOTIFY_FAILED };

struct te_batch {
    uint64_t id;
    size_t cap;
    size_t n;                  /* tasks submitted; guarded by lock */
    te_task *tasks;            /* cap entries */
    atomic_size_t tasks_left;  /* tasks not terminal (+1 per submit in progress) */
    _Atomic int notify_state;  /* TE_NOTIFY_* */
    te_slice *notify;          /* owned; body in notify->local (owned) */
    te_chunk *chunks;          /* slice storage; guarded by lock; freed with the batch */
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* broadcast when the batch becomes terminal */
    bool terminal;             /* written under lock; mc_te_wait_batch polls it unlocked
                                  (__atomic loads and stores) */
    bool orphan;               /* guarded by lock: cancelled (cancel.c), out of the id
                                  table; freed by whoever makes it terminal, or by its
                                  last waiter when one still waits then */
    unsigned waiters;          /* guarded by lock (raised under the table lock too):
                                  threads inside mc_te_wait_batch; while any, the batch
                                  is not freed (mc_te_free_batch refuses) */
    struct te_sink *sinks;     /* guarded by lock: memory cancelled slices point at
                                  (cancel.c); freed with the batch */
    _Atomic uint64_t tcp_bytes; /* bytes of its requests that went to the TCP path
                                  since it was last terminal (submit.c);
                                  mc_te_wait_batch polls only while this is below
                                  TE_POLL_MAX_TCP_BYTES */
    mc_te *te;
};

/* mc_te_wait_batch polls (common/spin.h) only for a batch that moves fewer bytes than
 * this over TCP. A larger one waits for the I/O threads (ours and the peer's) to copy
 * its bytes: a polling caller would take the CPU they need (measured on the 2-CPU box,
 * docs/performance.md "Session 7": a 1 MiB get over TCP went 2.84 -> 3.36 GB/s, medians
 * of 8 alternated runs, without that poll), and its wakeup is small next to its
 * transfer. The total decides, not the request size: a wait lasts as long as the
 * batch's bytes take to move. 1 MiB: smaller batches (a 4 KiB x 128 one is 512 KiB)
 * poll as before, since no gain was measured for them. */
#define TE_POLL_MAX_TCP_BYTES (1u << 20)

/* How a lane places slices on its connections (tcp_client.c pick). A slice of at most
 * TE_FILL_SLICE_MAX bytes goes on the lane's first connection that holds at most
 * TE_CONN_FILL bytes with it; a larger one (and a small one when every connection is that
 * full) on the least-loaded connection. A lane's connections share one I/O loop, so a
 * second connection adds no thread on either side; what it adds for a batch of small
 * values is a second sendmsg, recvmsg and wakeup per batch on both sides. Measured
 * (docs/performance.md "Session 11", 2-CPU box, alternated runs): a 4 KiB x 128 store get
 * over TCP went 346-375k -> 488-509k values/s and the engine's 4 KiB x 128 batch 3.13 ->
 * 4.14 GB/s, with 64 KiB to 1 MiB blocks unchanged, when such a batch stayed on one
 * connection instead of alternating between two. Large batches and striped pieces
 * (submit.c, at least 256 KiB) still spread over every connection. The cost: a
 * connection that is slow but still moving keeps taking small slices until it holds
 * TE_CONN_FILL bytes (or the transfer timeout closes it), where least-loaded placement
 * would have routed them around it. */
#define TE_CONN_FILL (1u << 20)
#define TE_FILL_SLICE_MAX (64u << 10)

/* ---- peers ---- */

/* Inline reads (tcp_inline.c, mc_te_submit_inline; issue 17): a run of READ slices to
 * one peer, each at most TE_RBUF_COPY_MAX bytes, together at most TE_CONN_FILL bytes and
 * TE_INLINE_SLICES slices, is moved by the submitting thread itself on a private
 * connection (at most TE_INLINE_CONNS per peer, pooled), not handed to an I/O thread. */
#define TE_INLINE_CONNS 4
#define TE_INLINE_SLICES 256
#define TE_INLINE_RETRY_MS 1000 /* after a private connection could not be opened */
#define TE_INLINE_OPEN_MS 1000  /* opening one may take this long past the caller's budget */
#define TE_INLINE_SLOW_MS 5     /* a budget this long without a reply byte marks the peer slow */

typedef struct te_map {
    uint64_t base, len;  /* the owner's range */
    char *ptr;           /* our mapping; unmapped under shm_rw (write) */
} te_map;

typedef struct te_range {
    uint64_t addr, len;
    bool shm;
} te_range;

/* A connection's receive buffer (tcp_server.c, tcp_client.c; loop-owned): bytes read
 * from the socket ahead of the parser. buf[pos..len) is not parsed yet. */
#define TE_RBUF_SIZE (256u << 10)
/* Payloads up to this size are copied out of the receive buffer; after a larger one the
 * next read asks for one header only, so large payloads keep going straight from the
 * socket into their destination (no extra copy). */
#define TE_RBUF_COPY_MAX (16u << 10)

typedef struct te_rbuf {
    char *buf;               /* TE_RBUF_SIZE bytes */
    size_t pos, len;
    bool big;                /* the last request (reply) parsed carried > TE_RBUF_COPY_MAX */
} te_rbuf;

/* A client connection to a peer's data port (loop-owned). */
typedef struct te_cconn {
    mc_list link;            /* in io->cconns; loop */
    te_peer *peer;
    te_lane *lane;
    te_io *io;               /* lane->io */
    int fd;
    int state;               /* TE_CC_* */
    unsigned idx;            /* slot in lane->conns */
    te_slice *head, *tail;   /* every slice on this connection, in wire order */
    te_slice *send_cur;      /* first slice not fully sent (NULL: all sent) */
    uint64_t send_off;       /* bytes of send_cur already sent (header + payload) */
    uint64_t recv_off;       /* bytes of head's reply already received */
    te_rbuf in;              /* reply bytes read ahead (headers, small READ payloads) */
    uint64_t queued;         /* bytes of slices on the connection (load metric) */
    uint32_t events;         /* current epoll mask */
    bool ever_ready;
    te_slice hello;          /* the HELLO request, first on the connection (no task) */
    struct te_auth_cli *auth; /* TE_CC_AUTH: the handshake in progress */
} te_cconn;

/* CONNECTING -> (AUTH, with a secret) -> READY: no transfer byte is sent before READY. */
enum { TE_CC_CONNECTING = 1, TE_CC_READY = 2, TE_CC_AUTH = 3 };

/* A lane: the share of a peer's TCP connections one I/O loop owns (tcp_client.c). A
 * peer has min(io threads, conns_per_peer) lanes on consecutive loops starting at its
 * home loop, so its connections are spread over the engine's I/O threads; submitted
 * slices are spread over the lanes, but for a batch of small slices, which stays whole on
 * the calling thread's lane (mc__te_peer_enqueue); a slice stays on its lane (and its
 * loop) for good. */
struct te_lane {
    te_peer *peer;             /* immutable */
    te_io *io;                 /* immutable */
    unsigned max_conns;        /* immutable: this lane's share of conns_per_peer */
    /* guarded by peer->lock: */
    te_slice *inbox_head, *inbox_tail;
    bool kick_posted;
    /* loop (io): */
    te_cconn *conns[TE_MAX_CONNS];
    unsigned nconns;
};

struct te_peer {
    mc_te *te;
    char *name;                /* immutable */
    int64_t handle;            /* index in te->peers; immutable */
    te_io *io;                 /* home loop; immutable */
    pthread_mutex_t refresh_lock; /* serialises descriptor fetches (taken before lock) */
    _Atomic uint64_t last_refresh_ms; /* written under refresh_lock */
    pthread_mutex_t lock;
    /* guarded by lock: */
    mc_segment_desc desc;
    bool have_desc;
    bool stale;                /* a connection failed: refetch before the next use */
    uint64_t gen;              /* bumped on every refresh */
    char host[MC_METADATA_MAX_HOST];
    struct sockaddr_storage data_sa;
    socklen_t data_salen;
    bool same_host;
    int shm_fd;                /* Unix connection to the owner's shm socket, -1 if none */
    atomic_bool shm_dead;      /* set by the loop when shm_fd hangs up */
    /* The same-host fast path reads these under shm_rw (read) and copies while holding
     * it, so a mapping is never unmapped under a copy; changes take shm_rw (write) with
     * lock held. */
    pthread_rwlock_t shm_rw;
    bool shm_ok;               /* same host and a shm socket: try the memfd path */
    te_range *shm_bufs;        /* the descriptor's buffers (shm flag per buffer) */
    size_t n_shm_bufs;
    te_map **maps;
    size_t n_maps, cap_maps;
    /* Target fence (fence.c): WRITEs with a non-zero epoch below it are refused. Raised
     * with shm_rw held for writing; read under shm_rw (read) by same-host copies and
     * atomically by the loop before a TCP WRITE header is sent. Monotonic. */
    _Atomic uint64_t fence_min;
    /* Private connections of callers moving their own small reads (tcp_inline.c):
     * guarded by lock. inl_idle holds the idle ones; inl_open counts them all (idle and
     * in use), at most TE_INLINE_CONNS; none is tried before inl_retry_ms after one
     * could not be opened. inl_slow: the peer sent nothing in a caller's budget, or an
     * open ran out (a stopped or stuck process); until an open succeeds, opening waits
     * only for the caller's budget. */
    struct te_iconn *inl_idle[TE_INLINE_CONNS];
    unsigned inl_nidle, inl_open;
    uint64_t inl_retry_ms;
    bool inl_slow;
    te_lane lanes[TE_MAX_IO];  /* nlanes used; see te_lane */
    unsigned nlanes;           /* immutable */
    atomic_uint next_lane;     /* where the next submitted slices start */
    /* loop (home loop, io): */
    bool shm_watched;          /* shm_fd registered on the loop; loop */
    int shm_watch_fd;          /* fd registered (loop) */
};

/* ---- server-side connections ---- */

/* A source address (IPv4 as v4-mapped IPv6), the key of the per-address limit. */
typedef struct te_ipkey {
    uint8_t a[16];
} te_ipkey;

/* Connections per source address (peerauth.c): a small chained hash, own lock (a leaf;
 * taken by loop 0 at accept and by any loop at close). */
typedef struct te_iplimit {
    pthread_mutex_t lock;
    struct te_ipent **buckets; /* TE_IP_BUCKETS; lock */
} te_iplimit;
#define TE_IP_BUCKETS 1024

typedef struct te_out {
    struct te_out *next;
    uint8_t hdr[MC_TE_REP_SIZE];
    const char *payload;  /* READ data, or NULL for zeros (refused read) */
    uint64_t len;         /* payload bytes */
    te_region *reg;       /* ref held while payload is pending */
} te_out;

enum { TE_S_HDR = 0, TE_S_PAYLOAD, TE_S_DISCARD, TE_S_NOTIFY };

typedef struct te_sconn {
    mc_list link;            /* in io->sconns; loop */
    te_io *io;
    int fd;
    int state;               /* TE_S_* */
    te_rbuf in;              /* request bytes read ahead (headers, small payloads) */
    mc__te_req cur;
    te_region *cur_reg;      /* ref held in TE_S_PAYLOAD */
    te_region *pin;          /* a ref held during one I/O callback (tcp_server.c
                                sconn_acquire): later requests in the same region take
                                their ref without the table lookup; NULL between them */
    char *dst;               /* TE_S_PAYLOAD: destination; TE_S_NOTIFY: body buffer */
    uint64_t off;            /* payload bytes received */
    int pending_status;      /* status to answer after a discard */
    te_out *out_head, *out_tail, *out_free;
    uint64_t out_off;        /* bytes of out_head sent */
    size_t out_count;
    uint64_t out_bytes;
    uint32_t events;
    bool closing;
    uint64_t writer_hi, writer_lo; /* from HELLO (0,0 until then) */
    uint64_t fence_gen;      /* te->fence.gen when fence_min was looked up; 0 = never */
    uint64_t fence_min;      /* the writer's minimum epoch at fence_gen */
    struct te_auth_srv *auth; /* non-NULL while the peer has not authenticated yet */
    te_ipkey ip;             /* source address, counted in te->data_ips */
    size_t notify_held;      /* bytes of te->notify_pending this connection holds: the
                                NOTIFY body's buffer (dst), which grows as its bytes come */
} te_sconn;

typedef struct te_hsconn {
    mc_list link;            /* in io->hsconns; loop */
    te_io *io;
    int fd;
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_off;
    uint64_t last_ms;
    bool close_after;
    bool checked_first;      /* open server: the first bytes were looked at (HELLO?) */
    te_ipkey ip;             /* source address, counted in te->hs_ips */
    struct te_auth_srv *auth; /* non-NULL while the peer has not authenticated yet */
} te_hsconn;

typedef struct te_shmconn {
    mc_list link;            /* in io->shmconns; loop */
    te_io *io;
    int fd;
    uint8_t in[16];
    size_t in_len;
    struct te_auth_srv *auth; /* non-NULL while the peer has not authenticated yet */
} te_shmconn;

struct te_io {
    mc_te *te;
    mc_loop *loop;
    unsigned idx;
    mc_loop_timer *tick;
    mc_list sconns;         /* te_sconn.link; loop */
    mc_list cconns;         /* te_cconn.link; loop */
    mc_list hsconns;        /* te_hsconn.link; loop (io 0) */
    size_t n_hsconns;
    mc_list shmconns;       /* te_shmconn.link; loop (io 0) */
    size_t n_authing;       /* connections of this loop still authenticating; loop */
    char *scratch;          /* 64 KiB discard buffer; loop */
};

/* ---- the engine ---- */

struct mc_te {
    /* options, immutable after create */
    uint64_t timeout_ms;
    uint64_t slice_size;
    unsigned conns_per_peer;
    unsigned nio;
    uint32_t hs_max;
    bool force_tcp;
    bool prefault; /* MC_TE_PREFAULT: shared segments populated at creation (issue 17) */
    bool stream_writes; /* mc_te_opts.stream_writes: WRITE copies by mc_copy_to_segment */
    bool inline_reads;  /* MC_TE_INLINE_READS (default on): mc_te_submit_inline's caller moves
                           small READ runs itself (tcp_inline.c) */
    /* issue 11: the cluster secret and per-peer bounds (immutable after create) */
    const mc_auth_secret *auth;    /* NULL: open (no secret); else borrowed or auth_own */
    mc_auth_secret *auth_own;      /* loaded from MC_AUTH_TOKEN_FILE at create; owned */
    uint64_t auth_timeout_ms;      /* an unauthenticated connection's deadline */
    uint32_t max_conns, max_conns_per_ip; /* data port, served connections */
    uint64_t max_pending;          /* per served connection: unread reply bytes */
    uint32_t *shm_gids;            /* gids allowed on the same-host socket besides our uid */
    size_t n_shm_gids;
    te_iplimit data_ips;           /* served data connections per source address */
    te_iplimit hs_ips;             /* handshake-port connections per source address */
    _Atomic uint64_t notify_pending; /* NOTIFY body bytes being received, all connections */
    _Atomic uint64_t auth_log_ms;  /* rate limit of refusal log lines (peerauth.c) */
    mc_te_clock_fn clock;   /* NULL = mc_now_ms; see mc__te_now_ms */
    void *clock_ctx;

    /* set by initialize, immutable afterwards */
    bool initialized;
    mc_metadata *md;
    bool p2p;
    char name[MC_SEGMENT_MAX_NAME + 1];
    char host[MC_METADATA_MAX_HOST];
    char host_id[MC_SEGMENT_MAX_HOST_ID];
    char shm_path[MC_SEGMENT_MAX_SHM_SOCKET + 1];
    int rpc_port, data_port;
    int hs_lfd, data_lfd, shm_lfd;
    te_io io[TE_MAX_IO];
    atomic_uint next_io;
    atomic_int n_sconns; /* data connections being served */

    /* own descriptor */
    pthread_mutex_t publish_lock; /* serialises republishing */
    pthread_mutex_t desc_lock;    /* guards desc, desc_json */
    mc_segment_desc desc;
    char *desc_json;
    size_t desc_json_len;

    /* registered memory */
    pthread_rwlock_t reg_lock;
    te_region **regs;      /* sorted by base; guarded by reg_lock */
    uint64_t *max_end;     /* prefix max of base+len; guarded by reg_lock */
    size_t n_regs, cap_regs;

    /* managed buffers (managed.c); guarded by managed_lock */
    pthread_mutex_t managed_lock;
    struct te_managed *managed;

    /* peers (segments) */
    pthread_mutex_t seg_lock;
    te_peer **peers;       /* guarded by seg_lock; entries immutable once set */
    size_t n_peers, cap_peers;

    /* batches */
    pthread_mutex_t batch_lock;
    te_batch **bslots;     /* guarded by batch_lock */
    uint32_t *bgen;
    size_t n_bslots;
    uint32_t *bfree;
    size_t n_bfree;

    /* notifications received */
    pthread_mutex_t notify_lock;
    mc_te_notify *notifies;
    size_t n_notifies, cap_notifies;
    uint64_t notify_bytes;

    atomic_uint_fast64_t next_req_id;
    struct {
        atomic_uint_fast64_t tcp_sent, tcp_recv, shm, served, refused, done, failed, conn_open,
            conn_fail, shm_lost;
        atomic_uint_fast64_t stale_writes, stale_sends; /* fence refusals (fence.c) */
        atomic_uint_fast64_t auth_refused, auth_failed, conn_limit, ip_limit, peercred,
            pending_limit; /* issue 11 (peerauth.c) */
        atomic_uint_fast64_t inline_recv, inline_handed; /* tcp_inline.c */
    } st;

    /* fencing (fence.c) */
    struct te_fence {
        pthread_mutex_t lock;
        uint64_t writer_hi, writer_lo;  /* our id, sent in HELLO; guarded by lock */
        struct te_wfence *writers;      /* owner table, sorted by (hi, lo); lock */
        size_t n_writers, cap_writers;
        struct te_tfence *targets;      /* target table by segment name; lock */
        size_t n_targets, cap_targets;
        _Atomic uint64_t gen;           /* bumped (under lock) on every owner-table change */
    } fence;
};

/* mc__te_now_ms: the engine's clock (mc_te_opts.clock) in ms: transfer deadlines and the
 * descriptor refresh rate limit are measured on it. Any thread. */
static inline uint64_t mc__te_now_ms(const mc_te *te)
{
    return te->clock ? te->clock(te->clock_ctx) : mc_now_ms();
}

/* mc__te_write_copy: copies the n bytes of a WRITE into memory this engine reaches (a
 * same-host peer's mapping, or our own region from a TCP receive ring; dst..dst+n
 * already checked by the caller): streaming stores when the engine was created with
 * mc_te_opts.stream_writes (common/copy.h), else memcpy. Any thread. */
static inline void mc__te_write_copy(const mc_te *te, void *dst, const void *src, size_t n)
{
    if (te->stream_writes)
        mc_copy_to_segment(dst, src, n);
    else
        memcpy(dst, src, n);
}

/* mc__te_iov_hdr: the header step of the send loops (tcp_client.c requests, tcp_server.c
 * replies), which gather [header][payload] records into an iovec starting `off` bytes
 * into the first record: when off < size the header's unsent part hdr[off..size) is
 * appended as iov[(*n)++] and 0 is returned, else nothing is appended and off - size
 * (the offset into the payload) is returned. The caller leaves room in iov. */
static inline uint64_t mc__te_iov_hdr(struct iovec *iov, int *n, uint8_t *hdr, uint64_t size,
                                      uint64_t off)
{
    if (off >= size)
        return off - size;
    iov[*n].iov_base = hdr + off;
    iov[(*n)++].iov_len = size - off;
    return 0;
}

/* segment.c: publishes our descriptor (no-op put in P2P mode); a status code. Takes
 * publish_lock then desc_lock. */
int mc__te_publish(mc_te *te);
mc_rpc_meta mc__te_own_rpc_meta(const mc_te *te); /* segment.c: {host, handshake port} */

/* segment.c: memfd-backed memory, registered (kind TE_REG_SHARED or _MANAGED_CHUNK) and
 * published with the shm flag. Returns a status code. */
int mc__te_shared_create(mc_te *te, uint64_t len, int kind, void **out);
int mc__te_shared_destroy(mc_te *te, void *addr, int kind);

/* peers.c: the peer of a handle (NULL when none; peers live until mc_te_destroy). */
te_peer *mc__te_peer_by_handle(mc_te *te, int64_t h);
/* peers.c: fetches p's descriptor again (takes refresh_lock, then p->lock). Status. */
int mc__te_peer_refresh(mc_te *te, te_peer *p);
/* peers.c: the peer called name (created on first use), its descriptor fetched when it
 * has none, is stale, or force_refresh. MC_INVALID_PARAMS for a bad name or an engine
 * not initialized; the fetch's status otherwise. */
int mc__te_peer_open(mc_te *te, const char *name, bool force_refresh, te_peer **out);
/* peers.c: a segment name we accept (non-empty, at most MC_SEGMENT_MAX_NAME bytes). */
bool mc__te_valid_segment_name(const char *name);

/* managed.c */
void mc__te_managed_free_all(mc_te *te);

/* regions.c */
te_region *mc__te_region_acquire(mc_te *te, uint64_t addr, uint64_t len);
void mc__te_region_release(te_region *r);
int mc__te_region_add(mc_te *te, uint64_t base, uint64_t len, int kind, int memfd);
int mc__te_region_remove(mc_te *te, uint64_t base, int kind_mask, te_region **out);
void mc__te_region_drain(mc_te *te, te_region *r);
void mc__te_regions_free_all(mc_te *te);

/* batch.c */
te_batch *mc__te_batch_get(mc_te *te, uint64_t id);
void mc__te_task_slice_done(mc_te *te, te_slice *s, int status);
void mc__te_task_finish(mc_te *te, te_task *t, int state, int err);
void mc__te_batch_submit_end(mc_te *te, te_batch *b);
void mc__te_batches_fail_all(mc_te *te);
void mc__te_batches_free_all(mc_te *te);
/* Takes batch id out of the id table whatever its state (NULL: unknown id). */
te_batch *mc__te_batch_detach(mc_te *te, uint64_t id);
/* A detached batch: freed now when terminal, else marked orphan (freed when it turns
 * terminal, on the thread that finishes its last slice). */
void mc__te_batch_abandon(te_batch *b);

/* cancel.c: memory handed to a cancelled batch's slices (freed with the batch). */
typedef struct te_sink {
    struct te_sink *next;
    char data[];
} te_sink;

/* tcp_client.c */
/* Sets up p's lanes (p->io, p->te set). peers.c, when the peer is created. */
void mc__te_peer_lanes_init(te_peer *p);
/* Queues slices first..last (linked by next) for p, spread over its lanes. Any thread. */
void mc__te_peer_enqueue(te_peer *p, te_slice *first, te_slice *last);
/* The loop that carries s: its lane's (its peer's home loop before it is queued). */
static inline te_io *mc__te_slice_io(const te_slice *s)
{
    return s->lane ? s->lane->io : s->peer->io;
}
void mc__te_cconn_tick(te_io *io);
void mc__te_peer_close_conns(te_peer *p); /* loop thread */

/* tcp_client.c: a non-blocking TCP_NODELAY socket for p's data address, copied to *sa /
 * *salen (and p->gen to *gen when gen is not NULL) under p->lock; -1 when p has no
 * address yet or socket() failed. Not connected. */
int mc__te_data_socket(te_peer *p, struct sockaddr_storage *sa, socklen_t *salen,
                       uint64_t *gen);

/* tcp_inline.c */
/* True when the slices first..last (linked, all to one peer) form a run the caller may
 * move itself (the limits above; READs only). */
bool mc__te_inline_fits(const te_slice *first, const te_slice *last);
/* Moves the run first..last to peer p on one of p's private connections, on the calling
 * thread, finishing each slice (mc__te_task_slice_done) as its reply arrives. What is not
 * done by until_ms (mc_now_ms clock), or when no private connection can be had or one
 * fails, goes to p's lanes as mc__te_peer_enqueue would have sent it (the private
 * connection is closed first, so nothing of it lands later). */
void mc__te_inline_run(te_peer *p, te_slice *first, te_slice *last, uint64_t until_ms);
/* Closes p's idle private connections (engine shutdown). */
void mc__te_inline_close(te_peer *p);

/* tcp_server.c */
int mc__te_data_accept_start(mc_te *te);
void mc__te_sconn_tick(te_io *io);
void mc__te_sconn_close_all(te_io *io);
void mc__te_io_abort_region(te_io *io, te_region *r);
/* Loop thread of io: WRITEs whose payload is being received into memory and whose
 * writer is now fenced switch to draining into scratch (reply -ESTALE). */
void mc__te_sconn_fence_io(te_io *io);

/* fence.c */
void mc__te_fence_init(mc_te *te);
void mc__te_fence_free(mc_te *te);
void mc__te_writer_id(mc_te *te, uint64_t *hi, uint64_t *lo);
/* The target table's minimum for segment `name` (0 when none); takes fence.lock. */
uint64_t mc__te_target_min(mc_te *te, const char *name);
/* Looks up c's writer in the owner table: c->fence_min, c->fence_gen. Loop thread. */
void mc__te_fence_refresh(mc_te *te, te_sconn *c);

/* mc__te_write_fenced: true when a WRITE with `epoch` on server connection c must be
 * refused by the owner's fence table. Loop thread. Epoch 0: no memory access at all;
 * otherwise one acquire load of te->fence.gen and two compares, unless the table
 * changed since c last looked (then one lookup under fence.lock). */
static inline bool mc__te_write_fenced(mc_te *te, te_sconn *c, uint64_t epoch)
{
    if (!epoch)
        return false;
    if (atomic_load_explicit(&te->fence.gen, memory_order_acquire) != c->fence_gen)
        mc__te_fence_refresh(te, c);
    return epoch < c->fence_min;
}

/* mc__te_send_fenced: true when a WRITE with `epoch` to peer p must not be started
 * (target fence). Any thread; one acquire load when epoch != 0. */
static inline bool mc__te_send_fenced(te_peer *p, uint64_t epoch)
{
    return epoch && epoch < atomic_load_explicit(&p->fence_min, memory_order_acquire);
}

/* handshake.c */
int mc__te_hs_start(mc_te *te);
void mc__te_hs_tick(te_io *io);
void mc__te_hs_close_all(te_io *io);
/* A blocking request on a peer's handshake port (user threads): with te's secret the
 * connection authenticates first (-EACCES when refused, logged). */
int mc__te_hs_request(mc_te *te, const char *host, uint16_t port, uint8_t type,
                      const void *payload, size_t len, uint32_t max_len, uint64_t timeout_ms,
                      char **reply, size_t *reply_len);
/* notify store (handshake.c): 0 or -ENOSPC when full. Takes name/msg on success. */
int mc__te_notify_push(mc_te *te, char *name, char *msg, size_t msg_len);

/* peerauth.c: the cluster secret on the engine's ports (docs/security.md).
 * Port labels of the handshake (mc_auth_hs_init): */
#define TE_AUTH_DATA "te-data"
#define TE_AUTH_HS "te-handshake"
#define TE_AUTH_SHM "te-shm"

/* The server side of one connection's handshake, driven by a loop thread from the
 * connection's readiness events (never blocks): it reads only the handshake's bytes. */
typedef struct te_auth_srv {
    te_authstep st;
    const char *what;       /* "data port", ... (static) */
    uint64_t deadline_ms;   /* mc_now_ms clock */
} te_auth_srv;

/* The client side on a non-blocking connection (tcp_client.c, loop thread). */
typedef struct te_auth_cli {
    te_authstep st;
} te_auth_cli;

/* mc__te_auth_srv_new: a handshake for a connection accepted on io's loop (counted in
 * io->n_authing until freed). NULL when te has no secret. */
te_auth_srv *mc__te_auth_srv_new(te_io *io, const char *label, const char *what);
/* mc__te_auth_srv_free: NULL ok; uncounts it from io->n_authing. */
void mc__te_auth_srv_free(te_io *io, te_auth_srv *a);
/* mc__te_auth_srv_io: reads what fd has of the handshake (never past the frame being
 * read) and answers. Returns 1 (authenticated: the port's protocol follows), 0 (wait
 * for more), or a negative mc_auth_code (refused: counted, logged rate-limited, the
 * RESULT already sent; the caller closes). */
int mc__te_auth_srv_io(mc_te *te, te_auth_srv *a, int fd);
/* mc__te_auth_expired: an unauthenticated connection past its deadline: counts and
 * logs it (the caller closes). */
bool mc__te_auth_expired(mc_te *te, te_auth_srv *a, int fd, uint64_t now_ms);
/* mc__te_auth_answer_open: an open server (no secret) saw a HELLO: answers RESULT
 * SERVER_NO_SECRET, counts and logs it. The caller closes. */
void mc__te_auth_answer_open(mc_te *te, int fd, const char *what);
/* Client side, non-blocking: _start sends the HELLO (0 or a negative mc_auth_code);
 * _io reads and answers: 1 authenticated, 0 wait, a negative code: failed (logged). */
int mc__te_auth_cli_start(mc_te *te, te_auth_cli *a, int fd, const char *label);
int mc__te_auth_cli_io(mc_te *te, te_auth_cli *a, int fd, const char *peer);
/* mc__te_auth_client_log: logs a failed client handshake (rate-limited). */
void mc__te_auth_client_log(mc_te *te, const char *what, const char *peer, int code);
/* Formats fd's peer address ("ip:port", "?" when unknown) into buf. */
void mc__te_peer_addr(int fd, char *buf, size_t len);
/* mc__te_log_limited: true at most once per 10 s per engine (refusal log lines). */
bool mc__te_log_limited(mc_te *te);

/* Per-address connection limit: fills *k with fd's source address and counts it;
 * false (nothing counted) when `max` connections from it are already open. */
void mc__te_iplimit_init(te_iplimit *l);
void mc__te_iplimit_free(te_iplimit *l);
bool mc__te_iplimit_acquire(te_iplimit *l, int fd, uint32_t max, te_ipkey *k);
void mc__te_iplimit_release(te_iplimit *l, const te_ipkey *k);
/* Parses a list of gids ("100,200", spaces allowed; NULL/"" = none): 0 or -EINVAL. */
int mc__te_parse_gids(const char *text, uint32_t **out, size_t *n);

/* shm.c */
int mc__te_shm_start(mc_te *te);
void mc__te_shm_tick(te_io *io);
void mc__te_shm_close_all(te_io *io);
/* Whether mc__te_shm_try can move anything to p now (not forced onto TCP, and p is on
 * this host with a shm socket). submit.c asks once per run of requests to one peer: a
 * run started while it is false goes over TCP, which is always correct. */
bool mc__te_shm_possible(mc_te *te, te_peer *p);
/* Same-host copy. Returns 0 (*handled says whether it was done), 1 (range unknown: a
 * newer descriptor may have it), or -ESTALE (*handled true: a WRITE refused by the
 * target fence, checked under shm_rw before the copy). */
int mc__te_shm_try(mc_te *te, te_peer *p, int op, char *local, uint64_t remote, uint64_t len,
                   uint64_t epoch, bool *handled);
void mc__te_peer_shm_reset(te_peer *p); /* peer->lock held */
void mc__te_shm_watch(te_peer *p);

#endif
