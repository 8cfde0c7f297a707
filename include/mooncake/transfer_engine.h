/* transfer_engine.h: the transfer engine's C API (src/transfer).
 *
 * An engine moves bytes between memory registered in different processes (and hosts):
 * a local buffer and a range inside a peer's *segment* (everything the peer registered).
 * Upstream equivalent: `mooncake-transfer-engine` (TransferEngine, transfer_engine_c.h;
 * ../shared/reference/upstream-mooncake.md §6) and the Python binding's conventions
 * (§2, `transfer_engine_py.cpp`). Contract for Python: ../shared/API.md §3.
 *
 * Pieces:
 *   - Metadata: each engine publishes its segment descriptor (`mooncake/ram/<name>`)
 *     and rpc_meta (`mooncake/rpc_meta/<name>`) through the metadata backend named by
 *     the connection string (metadata.h). With "P2PHANDSHAKE" nothing is published: the
 *     segment name becomes "<host>:<rpc_port>" and peers fetch descriptors from the
 *     handshake port.
 *   - Handshake port (= rpc port, get_rpc_port): frames `u64 length (LE, counts the type
 *     byte) + u8 type + JSON` as upstream `writeString/readString`; Metadata=1 answers
 *     this engine's descriptor, Notify=2 stores a notification ({"name","notify_msg"}),
 *     Probe=3 answers "{}". Every length is checked against MC_HANDSHAKE_MAX_LENGTH
 *     (env, bytes, default 1 MiB); anything malformed is answered with an error JSON or
 *     the connection is dropped; the daemon keeps serving.
 *   - TCP data path (published as `tcp_data_port`): pooled connections per peer, requests
 *     cut into slices spread over the connections (slices of at most 64 KiB go on the
 *     first connection holding at most 1 MiB with them, so a 4 KiB x 128 batch stays on
 *     one; larger slices go on the least-loaded one), payloads moved straight between
 *     the socket and registered memory. The serving side checks every [addr, addr+len)
 *     against the memory it registered before touching it; bad ranges get an error
 *     reply and the connection stays usable.
 *   - Same-host path: memory from mc_te_alloc_shared / mc_te_allocate_managed_buffer is
 *     a memfd; a peer with the same host_id receives the fd over the owner's Unix socket
 *     (`shm_socket`), maps it once and transfers with one copy (a memcpy; a WRITE with
 *     streaming stores when mc_te_opts.stream_writes is set). Chosen automatically for
 *     buffers flagged shm; MC_FORCE_TCP=1 turns it off. Memory registered from user
 *     pointers always goes over TCP.
 *
 * Return values: public functions return upstream status codes (status.h): MC_OK (0) or
 * a negative MC_* named in each comment. Functions returning a value say so.
 *
 * Threads: every function is thread-safe and may be called from any number of threads at
 * once, except mc_te_destroy (no other call may be in flight). The engine runs its own
 * I/O thread(s); nothing is called back on user threads.
 *
 * Environment (read through common/env.h: unset or empty = the default; a set value that
 * does not parse or is out of range fails the call that reads it with MC_INVALID_PARAMS
 * and an ERROR log naming the variable. MC_TCP_BIND_ADDRESS and MC_MIN/MAX_RPC_PORT are
 * read by mc_te_initialize, the rest by mc_te_create unless an option overrides):
 *   MC_TRANSFER_TIMEOUT      seconds a transfer may take before it fails, plus 1 ns per
 *                            byte (upstream transfer_engine_py: default 30, min 1 here)
 *   MC_FORCE_TCP             1/true/yes/on: never use the same-host shared-memory path
 *                            (0/false/no/off: use it; anything else is an error)
 *   MC_TCP_SLICE_SIZE        bytes per slice on the TCP path (default 1 MiB; 4 KiB..64 MiB)
 *   MC_TE_TCP_CONNECTIONS    pooled TCP connections per peer (default 2; 1..16); the
 *                            next one is opened when a slice finds every open one
 *                            with work queued: any slice over 64 KiB, a small one
 *                            only once every open connection holds 1 MiB
 *   MC_TE_IO_THREADS         I/O threads (1..16; default: one per pooled connection,
 *                            at most the CPUs the process may use, at least 1; a
 *                            peer's connections are spread over min(this, connections)
 *                            threads; a batch of small slices, at most 1 MiB, stays on
 *                            one of them, the same one for a calling thread)
 *   MC_TE_PREFAULT           1: populate each shared segment (a store's global segment)
 *                            when it is created, and map same-host peers' segments with
 *                            MAP_POPULATE, so first accesses take no page faults; the
 *                            whole segment is then resident at once (default 0)
 *   MC_HANDSHAKE_MAX_LENGTH  largest handshake frame in bytes (default 1 MiB; up to 128 MiB)
 *   MC_TCP_BIND_ADDRESS      address the listeners bind (default: local_hostname's host)
 *   MC_MIN_RPC_PORT / MC_MAX_RPC_PORT  range for the rpc port (default 15000..17000)
 *   MC_AUTH_TOKEN_FILE       the cluster secret's token file (common/auth.h; read once by
 *                            mc_te_create when mc_te_opts.auth is NULL)
 *   MC_TE_AUTH_TIMEOUT_MS    ms an accepted connection has to authenticate (default 10000)
 *   MC_TE_MAX_CONNECTIONS    data connections served at once (default 4096)
 *   MC_TE_MAX_CONNECTIONS_PER_IP  of those, from one source address (default 512)
 *   MC_TE_MAX_PENDING_BYTES  reply bytes a served connection may leave unread before the
 *                            engine stops reading its requests (default 64 MiB)
 *   MC_TE_SHM_ALLOWED_GIDS   gids ("100,200") whose processes may use the same-host
 *                            socket besides our own uid (with a secret only)
 *
 * Security (issue 11, docs/security.md): with a cluster secret (mc_te_opts.auth or
 * MC_AUTH_TOKEN_FILE) every connection to the data port, the handshake port and the
 * same-host socket proves it holds the secret (common/auth.h's challenge-response,
 * labels "te-data", "te-handshake", "te-shm") before any byte of the port's protocol is
 * read, and the same-host socket also requires SO_PEERCRED: our uid or an allowed gid.
 * This engine's own connections authenticate the same way. Without one the ports are
 * open as upstream (one WARN at initialize) and a peer that sends a handshake is told
 * the server has no secret; mixed clusters fail at connect with a message on each side.
 */
#ifndef MOONCAKE_TRANSFER_ENGINE_H
#define MOONCAKE_TRANSFER_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/mc_api.h"
#include "mooncake/metadata.h"

typedef struct mc_te mc_te; /* opaque engine */

/* A peer segment opened with mc_te_open_segment (upstream SegmentHandle / SegmentID).
 * >= 0; valid until mc_te_close_segment or mc_te_destroy. */
typedef int64_t mc_te_segment_t;

/* A batch of transfer requests (upstream BatchID). Never 0; ids of freed batches are
 * not reused soon and are refused (MC_INVALID_PARAMS), never dereferenced. */
typedef uint64_t mc_te_batch_t;

/* Opcodes: upstream TransferOpcode, Read = 0, Write = 1. */
enum { MC_TE_OP_READ = 0, MC_TE_OP_WRITE = 1 };

/* Task / batch states: upstream TransferStatusEnum, same numbers. */
typedef enum mc_te_state {
    MC_TE_WAITING = 0,   /* accepted, not started */
    MC_TE_PENDING = 1,   /* in progress */
    MC_TE_INVALID = 2,   /* no such task */
    MC_TE_CANCELED = 3,  /* not used yet */
    MC_TE_COMPLETED = 4, /* every byte moved */
    MC_TE_TIMEOUT = 5,   /* not finished within the transfer timeout */
    MC_TE_FAILED = 6,    /* refused or broken (error says why) */
} mc_te_state;

/* One request (upstream TransferRequest). */
typedef struct mc_te_request {
    int opcode;               /* MC_TE_OP_READ (peer -> source) or MC_TE_OP_WRITE */
    void *source;             /* local memory, length bytes; borrowed until the task is
                                 terminal. Need not be registered for TCP. */
    mc_te_segment_t target_id; /* from mc_te_open_segment */
    uint64_t target_offset;   /* the peer's virtual address (upstream naming) */
    uint64_t length;          /* bytes; 0 completes at once */
    uint64_t fence_epoch;     /* WRITE only (ignored for READ): 0 = unfenced, never
                                 refused; otherwise the writer's fence epoch for the
                                 target segment (the store's ReplicaDescriptor.fence_epoch).
                                 Refused (task FAILED, MC_TRANSFER_FAIL) when below this
                                 engine's target fence for the segment or the owner's
                                 fence for our writer id (mc_te_fence_target /
                                 mc_te_fence_writer). Zero-initialise to leave unfenced. */
} mc_te_request;

/* Status of one task or a whole batch. */
typedef struct mc_te_status {
    mc_te_state state;
    uint64_t transferred_bytes; /* bytes acknowledged so far */
    int error;                  /* MC_OK, or why it failed: MC_INVALID_PARAMS (the peer
                                   refused the address range), MC_TRANSFER_FAIL
                                   (connection lost / peer down), MC_RPC_TIMEOUT */
} mc_te_status;

/* mc_te_clock_fn: a monotonic clock in ms (ctx is mc_te_opts.clock_ctx). Called from any
 * thread, concurrently; must never go backwards. */
typedef uint64_t (*mc_te_clock_fn)(void *ctx);

/* Tunables; zero fields take the environment's value, then the default. */
typedef struct mc_te_opts {
    uint64_t transfer_timeout_ms; /* 0: MC_TRANSFER_TIMEOUT (s) or 30 s */
    uint64_t slice_size;          /* bytes; 0: MC_TCP_SLICE_SIZE or 1 MiB */
    unsigned conns_per_peer;      /* 0: MC_TE_TCP_CONNECTIONS or 2 */
    unsigned io_threads;          /* 0: MC_TE_IO_THREADS or its default (above) */
    uint32_t handshake_max_length; /* bytes; 0: MC_HANDSHAKE_MAX_LENGTH or 1 MiB */
    int force_tcp;                /* -1 or 0: MC_FORCE_TCP; 1: force TCP */
    /* The clock that transfer deadlines (transfer_timeout_ms) and the rate limit on
     * descriptor refreshes (at most one a second for addresses a peer's cached
     * descriptor does not hold) are measured on. NULL = mc_now_ms (CLOCK_MONOTONIC).
     * Tests pass one that they can move forward, as the master's mc_master_config.clock;
     * idle timeouts of served connections and socket timeouts stay on the real clock. */
    mc_te_clock_fn clock;
    void *clock_ctx;              /* passed to clock; borrowed, must outlive the engine */
    /* The cluster secret (common/auth.h). Borrowed: must outlive the engine (the store
     * client passes the one it loaded). NULL: the secret in the file named by
     * MC_AUTH_TOKEN_FILE, loaded once by mc_te_create (a bad file fails the create with
     * MC_INVALID_PARAMS and an ERROR naming the file and what to fix); neither = no
     * secret. Non-NULL with len 0: no secret, whatever the environment says. */
    const struct mc_auth_secret *auth;
    uint64_t auth_timeout_ms;     /* 0: MC_TE_AUTH_TIMEOUT_MS or 10000; an accepted
                                     connection that has not authenticated by then is
                                     closed (counted in auth_refused) */
    unsigned max_connections;     /* data connections served at once; 0:
                                     MC_TE_MAX_CONNECTIONS or 4096; beyond: refused at
                                     accept (conn_limit_refused) */
    unsigned max_connections_per_ip; /* of those from one source address; 0:
                                     MC_TE_MAX_CONNECTIONS_PER_IP or 512 (per_ip_refused);
                                     the handshake port (256 connections in all) takes
                                     this value or 64, whichever is smaller */
    uint64_t max_pending_bytes;   /* bytes; 0: MC_TE_MAX_PENDING_BYTES or 64 MiB: replies
                                     one served connection may leave unread before its
                                     requests stop being read (backpressure), and the
                                     NOTIFY bodies all connections may be receiving at once
                                     (beyond: the NOTIFY is drained and refused, counted in
                                     pending_refused) */
    const char *shm_allowed_gids; /* "gid,gid" (borrowed during create); NULL:
                                     MC_TE_SHM_ALLOWED_GIDS; with a secret the same-host
                                     socket serves our uid and these gids only */
    int stream_writes;            /* 1: the bytes of a WRITE this engine copies into
                                     memory (into a same-host peer's mapping, and a TCP
                                     WRITE's payload from its receive ring into ours) are
                                     written with streaming stores that bypass the caches
                                     (mc_copy_to_segment, src/common/copy.h: about 2x a
                                     memcpy into memory read again much later, as a store
                                     segment; the store client sets it); 0: memcpy, which
                                     leaves the bytes in the shared cache for a reader
                                     that comes at once (mooncake.pg's mailboxes) */
} mc_te_opts;

#define MC_TE_DEFAULT_TIMEOUT_S 30
#define MC_TE_MAX_TIMEOUT_S (86400u * 365) /* MC_TRANSFER_TIMEOUT's largest value */
#define MC_TE_DEFAULT_SLICE (1u << 20)
#define MC_TE_MAX_SLICE (64u << 20)
#define MC_TE_MAX_NOTIFY_NAME 4096      /* bytes of a notification's name */
#define MC_TE_MAX_NOTIFY_MSG (1u << 20) /* bytes of a notification's message */
#define MC_TE_MAX_BATCH (1u << 20)      /* requests in one batch */

/* ---------------------------------------------------------------------------------- */
/* Life cycle                                                                          */
/* ---------------------------------------------------------------------------------- */

/* mc_te_create: a new engine, not yet initialized (upstream TransferEngine()).
 *   opts: NULL = everything from the environment / defaults (the secret included);
 *     borrowed (opts->auth: for the engine's life).
 *   out: receives the engine; free with mc_te_destroy.
 * Returns MC_OK or MC_INVALID_PARAMS (an option or environment value out of range; the
 * reason is logged). */
MC_API int mc_te_create(const mc_te_opts *opts, mc_te **out);

/* mc_te_initialize: starts the engine (upstream TransferEngine::init / Python initialize).
 *   local_hostname: "host" or "host:port" (borrowed). In P2PHANDSHAKE mode the rpc port
 *     is the given port, else a free one in MC_MIN_RPC_PORT..MC_MAX_RPC_PORT, and the
 *     segment name becomes "host:rpc_port". With a metadata server the segment name is
 *     local_hostname as given, the rpc port is a free one in the range, and rpc_meta
 *     publishes {host, rpc_port}.
 *   metadata_conn: "P2PHANDSHAKE", "http://h:p/metadata", ... (metadata.h).
 *   protocol: "tcp" (NULL or "" = tcp). "rdma" falls back to TCP when MC_FORCE_TCP is
 *     set, as upstream without HCAs; otherwise it and any other protocol give
 *     MC_NOT_SUPPORTED with a logged reason.
 *   device: NIC filter (ignored on TCP; may be NULL).
 * Binds the handshake, data and (unless forced TCP) shm Unix-socket listeners and starts
 * the I/O thread(s); publishes an empty descriptor + rpc_meta.
 * A name already in the metadata server (rpc_meta is write-once there) is taken over
 * only when its entries provably belong to a dead engine of this same host: the stale
 * descriptor carries our host id (machine id + boot id) and the previous owner's
 * handshake port, data port and same-host socket all refuse connections (a crashed
 * process restarted under its old local_hostname). Then the stale rpc_meta is replaced
 * (logged as a warning). A live owner, one we cannot prove dead (e.g. SIGSTOPped: its
 * listeners still accept) or one of another host keeps the name.
 * Returns MC_OK; MC_INVALID_PARAMS (bad hostname, connection string, MC_MIN_RPC_PORT or
 * MC_MAX_RPC_PORT, already initialized; or an HTTP metadata URL that is not a metadata endpoint, logged naming
 * the URL); MC_NOT_SUPPORTED; MC_RPC_FAIL / MC_RPC_TIMEOUT (metadata server down:
 * nothing is left running; logged naming the URL); MC_OBJECT_ALREADY_EXISTS (the name is
 * registered by a live or unprovably dead engine, logged with the reason and what to do);
 * MC_INTERNAL_ERROR (cannot bind: the port is taken, logged). */
MC_API int mc_te_initialize(mc_te *te, const char *local_hostname, const char *metadata_conn,
                            const char *protocol, const char *device);

/* mc_te_destroy: stops I/O threads, closes connections, removes the published keys
 * (best effort), unmaps shared/managed memory and peers' mappings, frees everything.
 * Batches still pending are failed first. NULL is a no-op. */
MC_API void mc_te_destroy(mc_te *te);

/* mc_te_get_rpc_port: the handshake (rpc) port, or -1 before initialize. */
MC_API int mc_te_get_rpc_port(const mc_te *te);

/* mc_te_get_data_port: the TCP data port (tcp_data_port), or -1 before initialize. */
MC_API int mc_te_get_data_port(const mc_te *te);

/* mc_te_segment_name: this engine's segment name ("host:rpc_port" in P2P mode), or ""
 * before initialize. Borrowed; valid until mc_te_destroy. */
MC_API const char *mc_te_segment_name(const mc_te *te);

/* ---------------------------------------------------------------------------------- */
/* Memory                                                                              */
/* ---------------------------------------------------------------------------------- */

/* mc_te_register_memory: adds [addr, addr+length) to this engine's segment so peers may
 * read and write it; republishes the descriptor (upstream registerLocalMemory).
 *   addr: non-NULL; length: > 0, addr+length <= INT64_MAX. The memory stays the
 *   caller's (borrowed until unregistered). location: "*", "cpu:N" or NULL (ignored; CPU
 *   memory only). Registering the same addr with the same length again is a no-op;
 *   overlapping ranges are allowed (a request must lie inside one of them).
 * Returns MC_OK; MC_INVALID_PARAMS (NULL/0/overflow, same addr with another length, not
 * initialized); MC_BUFFER_OVERFLOW (too many buffers); metadata errors (MC_RPC_FAIL ...:
 * the registration is kept locally and served anyway). */
MC_API int mc_te_register_memory(mc_te *te, void *addr, size_t length, const char *location);

/* mc_te_unregister_memory: removes the buffer that starts at addr; waits until no
 * serving operation uses it (connections stuck mid-operation on it are closed), then
 * republishes. Returns MC_OK; MC_INVALID_PARAMS (not registered; or memory from
 * mc_te_alloc_shared / managed buffers: free those instead); metadata errors as above. */
MC_API int mc_te_unregister_memory(mc_te *te, void *addr);

/* mc_te_batch_register_memory / mc_te_batch_unregister_memory: n entries at once, one
 * republish (upstream registerLocalMemoryBatch). All-or-nothing validation: on a bad
 * entry nothing changes (MC_INVALID_PARAMS). n == 0 is MC_OK. */
MC_API int mc_te_batch_register_memory(mc_te *te, void *const *addrs, const size_t *lengths,
                                       size_t n, const char *location);
MC_API int mc_te_batch_unregister_memory(mc_te *te, void *const *addrs, size_t n);

/* mc_te_alloc_shared: new zero-filled memory of length bytes (rounded up to the page
 * size) backed by a memfd, registered with the shm flag so same-host peers map it.
 * For the store's segments. *out receives the address; free with mc_te_free_shared.
 * Returns MC_OK; MC_INVALID_PARAMS (length 0, not initialized); MC_NO_AVAILABLE_HANDLE
 * (memfd/mmap failed: out of memory or fds). */
MC_API int mc_te_alloc_shared(mc_te *te, size_t length, void **out);

/* mc_te_free_shared: unregisters (as mc_te_unregister_memory) and unmaps. Peers that
 * mapped it keep a valid mapping until they notice (their requests then fail or go over
 * TCP and are refused). Returns MC_OK or MC_INVALID_PARAMS (not from alloc_shared). */
MC_API int mc_te_free_shared(mc_te *te, void *addr);

/* mc_te_allocate_managed_buffer: length bytes of registered, memfd-backed memory carved
 * from shared chunks (upstream allocate_managed_buffer: size classes, large requests on
 * their own). *out receives the address (zeroed on first use only). Returns MC_OK;
 * MC_INVALID_PARAMS (length 0 or > 1 TiB, not initialized); MC_NO_AVAILABLE_HANDLE. */
MC_API int mc_te_allocate_managed_buffer(mc_te *te, size_t length, void **out);

/* mc_te_free_managed_buffer: returns a block from mc_te_allocate_managed_buffer; length
 * must be the allocated length. Returns MC_OK or MC_INVALID_PARAMS (unknown block). */
MC_API int mc_te_free_managed_buffer(mc_te *te, void *addr, size_t length);

/* ---------------------------------------------------------------------------------- */
/* Peer segments                                                                       */
/* ---------------------------------------------------------------------------------- */

/* mc_te_open_segment: a handle for the peer segment `name` ("ip:port" in P2P mode, the
 * peer's local_hostname with a metadata server). The descriptor is fetched (metadata
 * backend or the peer's handshake port) and cached; opening an open name returns the
 * same handle. The cache is refreshed when a connection to the peer fails (restart) or
 * when an address is not in the cached descriptor. Blocks up to the metadata/handshake
 * timeouts. Returns MC_OK; MC_INVALID_PARAMS (NULL/empty, P2P name not host:port);
 * MC_SEGMENT_NOT_FOUND (no descriptor: unknown peer, peer down); MC_DESERIALIZE_FAIL
 * (bad descriptor); MC_RPC_FAIL / MC_RPC_TIMEOUT (metadata server). */
MC_API int mc_te_open_segment(mc_te *te, const char *name, mc_te_segment_t *out);

/* mc_te_close_segment: releases the handle (the cached peer stays for reuse while
 * batches use it). Returns MC_OK or MC_INVALID_PARAMS. */
MC_API int mc_te_close_segment(mc_te *te, mc_te_segment_t seg);

/* mc_te_segment_is_local: true when requests to segment seg (a handle from
 * mc_te_open_segment) would now take the same-host shared-memory path (a range inside
 * one of the peer's shared buffers is then one copy done inside mc_te_submit by the
 * submitting thread; other ranges still go over TCP); false for the TCP path, for
 * MC_FORCE_TCP, or for an unknown handle. A hint (the path can fall back to TCP later,
 * e.g. when the owner goes away); the store uses it to decide what to overlap with a
 * master RPC. mooncake-c only. */
MC_API bool mc_te_segment_is_local(mc_te *te, mc_te_segment_t seg);

/* mc_te_get_segment_desc: a copy of the (freshly fetched) descriptor of segment `name`;
 * `out` is caller storage, owned by the caller afterwards (mc_segment_desc_deinit).
 * Returns as mc_te_open_segment. */
MC_API int mc_te_get_segment_desc(mc_te *te, const char *name, mc_segment_desc *out);

/* mc_te_get_first_buffer_address: buffers[0].addr of segment `name` (upstream
 * get_first_buffer_address), 0 in *addr when it has no buffer. Returns as open_segment. */
MC_API int mc_te_get_first_buffer_address(mc_te *te, const char *name, uint64_t *addr);

/* mc_te_republish: writes all of this engine's metadata to the metadata service again:
 * `mooncake/rpc_meta/<name>` (its handshake address) and then the segment descriptor
 * (`mooncake/ram/<name>`), as initialize and registration do. For a store client after
 * the master asked it to remount (a restarted master or metadata server lost both).
 * Nothing is sent in P2P mode. Returns OK, or the metadata backend's status (e.g.
 * MC_RPC_FAIL when the server is unreachable; MC_OBJECT_ALREADY_EXISTS when another
 * engine registered our name meanwhile). Thread-safe; serialised with registration. */
MC_API int mc_te_republish(mc_te *te);

/* ---------------------------------------------------------------------------------- */
/* Batches                                                                             */
/* ---------------------------------------------------------------------------------- */

/* mc_te_allocate_batch: a batch that can hold batch_size requests (upstream
 * allocateBatchID). Returns MC_OK; MC_INVALID_PARAMS (0 or > MC_TE_MAX_BATCH, not
 * initialized). */
MC_API int mc_te_allocate_batch(mc_te *te, size_t batch_size, mc_te_batch_t *out);

/* mc_te_submit: appends n requests to the batch and starts them (upstream
 * submitTransfer). Task ids are positions in submit order (0, 1, ...). Same-host shared
 * requests are done (memcpy) before this returns; TCP requests run on the I/O thread.
 * reqs: borrowed for the call; each source buffer until its task is terminal.
 * Returns MC_OK; MC_INVALID_PARAMS (unknown batch, more requests than its size, bad
 * opcode, NULL source with length > 0, unknown segment handle: nothing is submitted).
 * Per-request problems found later (refused range, peer down) show in the status. */
MC_API int mc_te_submit(mc_te *te, mc_te_batch_t batch, const mc_te_request *reqs, size_t n);

/* mc_te_submit_inline: mc_te_submit for a caller that waits for the batch right after
 * (issue 17; mooncake-c only). When the requests that go over TCP are READs to one peer
 * whose slices (MC_TCP_SLICE_SIZE) are each at most 16 KiB, at most 1 MiB and 256 slices
 * together, the calling thread moves them itself before this returns, on a private
 * connection to that peer (up to 4 per peer, pooled, opened and authenticated like the
 * I/O threads' ones), instead of an I/O thread; same-host requests are done as with
 * mc_te_submit, and TCP requests to several peers, larger ones and WRITEs go to the I/O
 * threads as there. budget_ms (at most the transfer timeout) bounds the calling
 * thread's part: what has not arrived by then (and a run that finds no private
 * connection free, or whose connection fails) goes on as with mc_te_submit, with the
 * same timeouts, and the private connection is closed so nothing of it lands later.
 * Opening a private connection (once per connection) may take up to 1 s beyond the
 * budget; after a failed one the peer's descriptor is fetched again (bounded by the
 * metadata timeouts) before the I/O threads take over. A payload reaches its buffer
 * only when its reply says success, as on the I/O threads. reqs: borrowed for the call;
 * each destination until its task is terminal (for a run moved here, by the return).
 * budget_ms: milliseconds (0: give the run up as soon as it would wait). Returns as
 * mc_te_submit; the outcome of each request shows in the status, as there. Counters:
 * mc_te_stats.inline_bytes_received / inline_runs_handed_over. Off with
 * MC_TE_INLINE_READS=0 (then this is mc_te_submit). */
MC_API int mc_te_submit_inline(mc_te *te, mc_te_batch_t batch, const mc_te_request *reqs,
                               size_t n, uint32_t budget_ms);

/* mc_te_submit_with_notify: mc_te_submit, then, once every task of the batch has
 * completed, delivers the notification {name, msg} to the peer of reqs[0] (upstream
 * submitTransferWithNotify; the peer drains it with mc_te_get_notifies). The batch
 * counts as done when the peer has acknowledged the notification; if any task fails, no
 * notification is sent. All requests must target one segment. n may be 0 (notify only).
 *   seg: the target when n == 0 (ignored otherwise). name: <= MC_TE_MAX_NOTIFY_NAME
 *   bytes; msg/msg_len: <= MC_TE_MAX_NOTIFY_MSG bytes; both copied.
 * Returns as mc_te_submit; MC_INVALID_PARAMS also for mixed targets or oversized text. */
MC_API int mc_te_submit_with_notify(mc_te *te, mc_te_batch_t batch, const mc_te_request *reqs,
                                    size_t n, mc_te_segment_t seg, const char *name,
                                    const void *msg, size_t msg_len);

/* mc_te_get_transfer_status: the state of task task_id (upstream getTransferStatus).
 * Returns MC_OK; MC_INVALID_PARAMS (unknown batch or task; out->state = MC_TE_INVALID). */
MC_API int mc_te_get_transfer_status(mc_te *te, mc_te_batch_t batch, size_t task_id,
                                     mc_te_status *out);

/* mc_te_get_batch_status: the batch's state (upstream getBatchTransferStatus): PENDING
 * while any task (or the notification) is not terminal; then COMPLETED when all
 * completed, else the state and error of the first failed task; transferred_bytes sums
 * the tasks. An empty batch is COMPLETED. Returns MC_OK or MC_INVALID_PARAMS. */
MC_API int mc_te_get_batch_status(mc_te *te, mc_te_batch_t batch, mc_te_status *out);

/* mc_te_wait_batch: blocks until the batch is terminal (as get_batch_status) or
 * timeout_ms passes (< 0: no limit besides the engine's own transfer timeout, which
 * always ends a batch). out may be NULL. Returns MC_OK (terminal: see out->state),
 * MC_RPC_TIMEOUT (still pending after timeout_ms), MC_INVALID_PARAMS. */
MC_API int mc_te_wait_batch(mc_te *te, mc_te_batch_t batch, int64_t timeout_ms,
                            mc_te_status *out);

/* mc_te_free_batch: frees a terminal batch (upstream freeBatchID). Returns MC_OK;
 * MC_UNAVAILABLE_IN_CURRENT_STATUS (tasks still pending: refused, nothing changes);
 * MC_INVALID_PARAMS (unknown id). */
MC_API int mc_te_free_batch(mc_te *te, mc_te_batch_t batch);

/* mc_te_cancel_batch: gives batch `batch` up, whatever state it is in, and frees its id
 * (as mc_te_free_batch; the id is invalid afterwards, its statuses can no longer be
 * read: read them first). From the return on, the engine never touches the local
 * memory of the batch's requests again: a READ reply still on its way is received into
 * scratch memory owned by the engine, and WRITE payload not sent yet is sent from a
 * copy taken during the call (so the peer gets the bytes the source held then). The
 * engine keeps the batch's bookkeeping until its last request ends (its reply, its
 * connection closing, or the transfer timeout) and frees it then. Requests already
 * handed to a peer are not recalled (a WRITE may still land there). Blocks only while
 * each I/O thread that carries one of the batch's requests runs one short step
 * (microseconds; it never waits for a peer). Not concurrently with a submit or a wait
 * on the same batch. Not in upstream Mooncake (its freeBatchID refuses a batch with
 * tasks in flight, as mc_te_free_batch does); used by the store's reads to give up a
 * replica that does not answer within its deadline (docs/consistency.md).
 * Returns MC_OK; MC_INVALID_PARAMS (te NULL, unknown id). */
MC_API int mc_te_cancel_batch(mc_te *te, mc_te_batch_t batch);

/* ---------------------------------------------------------------------------------- */
/* Sync / async helpers (what the Python binding calls)                                */
/* ---------------------------------------------------------------------------------- */

/* mc_te_transfer_sync: opens `segment` (cached), moves n ranges (local[i] <-> remote[i],
 * lens[i] bytes) and waits for the end (upstream transfer_sync / batch_transfer_sync).
 * notify_name != NULL: deliver {notify_name, notify_msg} after the data (n may be 0).
 * Returns MC_OK when every byte moved (and the notification was acknowledged); the
 * first failure's error otherwise (MC_INVALID_PARAMS, MC_TRANSFER_FAIL, MC_RPC_TIMEOUT,
 * MC_SEGMENT_NOT_FOUND ...). Arrays are borrowed; n == 0 without notify is MC_OK. */
MC_API int mc_te_transfer_sync(mc_te *te, const char *segment, int opcode,
                               const uint64_t *local, const uint64_t *remote,
                               const uint64_t *lens, size_t n, const char *notify_name,
                               const void *notify_msg, size_t notify_len);

/* mc_te_transfer_async: opens `segment`, allocates a batch of n, submits; *out receives
 * the batch (poll with get_batch_status / wait_batch, then free_batch). Returns as
 * open_segment / submit; on error no batch is left allocated. n must be >= 1. */
MC_API int mc_te_transfer_async(mc_te *te, const char *segment, int opcode,
                                const uint64_t *local, const uint64_t *remote,
                                const uint64_t *lens, size_t n, mc_te_batch_t *out);

/* ---------------------------------------------------------------------------------- */
/* Notifications, probe                                                                */
/* ---------------------------------------------------------------------------------- */

typedef struct mc_te_notify {
    char *name;     /* NUL-terminated, owned by the array */
    char *msg;      /* msg_len bytes plus a NUL (not counted), owned by the array */
    size_t msg_len;
} mc_te_notify;

/* mc_te_get_notifies: drains the notifications received so far, oldest first (upstream
 * getNotifies). *out: new array of *n entries (NULL when 0), free with
 * mc_te_notifies_free. At most 65536 notifications / 256 MiB are kept; beyond that new
 * ones are refused (the sender sees a failure), never dropped silently. Returns MC_OK. */
MC_API int mc_te_get_notifies(mc_te *te, mc_te_notify **out, size_t *n);
MC_API void mc_te_notifies_free(mc_te_notify *v, size_t n);

/* mc_te_send_notify: a notification without data (upstream sendNotifyByName); waits
 * for the peer's acknowledgement. Returns as mc_te_transfer_sync. */
MC_API int mc_te_send_notify(mc_te *te, const char *segment, const char *name,
                             const void *msg, size_t msg_len);

/* mc_te_send_probe: asks the peer's handshake daemon for a Probe answer (upstream
 * send_probe; `server` is the segment name, "ip:port" in P2P mode, resolved through
 * rpc_meta with a metadata server). Does not touch the segment cache. Returns MC_OK
 * when it answered; MC_INVALID_PARAMS (bad name); MC_RPC_FAIL (refused, bad answer);
 * MC_RPC_TIMEOUT. */
MC_API int mc_te_send_probe(mc_te *te, const char *server);

/* ---------------------------------------------------------------------------------- */
/* Introspection                                                                       */
/* ---------------------------------------------------------------------------------- */

typedef struct mc_te_stats {
    uint64_t tcp_bytes_sent, tcp_bytes_received; /* payload bytes as initiator */
    uint64_t shm_bytes;                          /* bytes copied over the same-host path */
    uint64_t served_bytes;                       /* payload bytes served to peers */
    uint64_t refused_requests;                   /* peer requests refused (bad range...) */
    uint64_t tasks_completed, tasks_failed;
    uint64_t connections_opened, connections_failed; /* data connections to peers, the
                                    I/O threads' and mc_te_submit_inline's private ones:
                                    opened counts each socket made; failed, of those,
                                    the ones whose connect or cluster-secret handshake
                                    failed (a private one also when its HELLO is
                                    refused; a lane's HELLO is answered after it is
                                    ready, its refusal fails the lane's requests) */
    uint64_t shm_peers_lost; /* same-host owners seen going away (their Unix socket hung
                                up): their mappings are dropped before the next use */
    uint64_t stale_writes_refused; /* owner side: peers' WRITEs refused by the fence table
                                      (mc_te_fence_writer), each drained, answered -ESTALE */
    uint64_t stale_sends_refused;  /* writer side: our WRITE slices / same-host copies not
                                      started because of mc_te_fence_target */
    /* issue 11 (docs/security.md): refusals on this engine's ports */
    uint64_t auth_refused;       /* served side: connections refused by the secret check on
                                    the data, handshake or same-host port (no or wrong
                                    secret, replay, a handshake to an open engine, the
                                    authentication deadline) */
    uint64_t auth_failed;        /* initiator side: our connections whose handshake failed */
    uint64_t conn_limit_refused; /* connections refused at accept: max_connections (data
                                    port), 256 (handshake port) */
    uint64_t per_ip_refused;     /* ... : max_connections_per_ip (see mc_te_opts) */
    uint64_t peercred_refused;   /* same-host connections of another uid (SO_PEERCRED) */
    uint64_t pending_refused;    /* NOTIFYs refused: max_pending_bytes of bodies in flight */
    /* issue 17: mc_te_submit_inline */
    uint64_t inline_bytes_received;  /* of tcp_bytes_received: moved by the calling thread */
    uint64_t inline_runs_handed_over; /* runs it left to the I/O threads: no private
                                         connection, a failed one, or the budget spent */
} mc_te_stats;

/* mc_te_get_stats: a snapshot of the counters (relaxed reads). */
MC_API void mc_te_get_stats(mc_te *te, mc_te_stats *out);

/* ---------------------------------------------------------------------------------- */
/* Fencing (docs/consistency.md, "The mechanism")                                     */
/* ---------------------------------------------------------------------------------- */
/* A store writer W puts, on every WRITE to segment S, the fence epoch e(W,S) the master
 * handed out with the allocation (mc_te_request.fence_epoch). When the master revokes
 * space, it raises e(W,S) and asks S's owner to fence W (mc_te_fence_writer) and W to
 * fence S (mc_te_fence_target); each acknowledges once its call has returned MC_OK:
 * that return is the acknowledgement, the applied value can also be read back with
 * mc_te_get_writer_fence / mc_te_get_target_fence. Epoch 0 is never refused, so plain
 * transfer-engine users are unaffected. The tables only grow (a lower minimum is
 * ignored); at most 65536 writers and 65536 target segments per engine. Not in upstream
 * Mooncake (its TCP transport has no fencing). Wire: version 2 (src/transfer/wire.h):
 * the request header carries fence_epoch and every data connection starts with a HELLO
 * naming the writer id; a version-1 peer is refused at connect, logged on both sides. */

/* mc_te_set_writer_id: the 128-bit writer id (the store client's uuid: hi = first 8
 * bytes, lo = last 8, as integers) this engine sends in the HELLO of every data
 * connection it opens afterwards; connections already open keep the id they were opened
 * with, so set it before the first transfer. 0,0 (the default) means "no writer id":
 * owners never fence it. Any time after mc_te_create; thread-safe.
 * Returns MC_OK or MC_INVALID_PARAMS (te NULL). */
MC_API int mc_te_set_writer_id(mc_te *te, uint64_t hi, uint64_t lo);

/* mc_te_fence_writer (owner side): from the return on, this engine's data server
 * refuses every WRITE from writer (hi, lo) whose fence_epoch is non-zero and below
 * min_epoch: the payload is drained into scratch, nothing touches memory, the reply is
 * -ESTALE (the writer's task fails with MC_TRANSFER_FAIL) and stale_writes_refused
 * counts it. Covers WRITEs whose bytes are already queued in the kernel when the call
 * returns, and a WRITE whose payload is being received at that moment (the rest of it
 * is drained; bytes that landed before the call remain). Monotonic: a lower min_epoch
 * than the one applied is ignored (still MC_OK). Blocks until every I/O thread has
 * applied it (microseconds while they run; never call it from a thread the engine runs,
 * there is none a user reaches). Any time after mc_te_create, not concurrently with
 * initialize/destroy; thread-safe otherwise.
 * Returns MC_OK (applied: acknowledge it); MC_INVALID_PARAMS (te NULL, hi == lo == 0);
 * MC_BUFFER_OVERFLOW (65536 writers fenced already: logged, nothing changed).
 * min_epoch 0 is MC_OK and does nothing. */
MC_API int mc_te_fence_writer(mc_te *te, uint64_t hi, uint64_t lo, uint64_t min_epoch);

/* mc_te_fence_target (writer side): from the return on, this engine refuses to start a
 * WRITE with a non-zero fence_epoch below min_epoch to segment `segment_name` (the name
 * given to mc_te_open_segment): a same-host copy is not done and a TCP WRITE whose
 * header has not been handed to the socket yet is not sent (a PING goes in its place);
 * the task fails with MC_TRANSFER_FAIL (slice status -ESTALE) and stale_sends_refused
 * counts it. Returns only after every same-host copy to that segment that started
 * before the call has finished (it takes the segment's copy lock exclusively once).
 * TCP bytes already handed to the socket are the owner's to refuse (mc_te_fence_writer).
 * The minimum is kept by name, so it also applies to a segment opened later. Monotonic
 * as mc_te_fence_writer. segment_name borrowed (copied). Thread-safe.
 * Returns MC_OK (applied: acknowledge it); MC_INVALID_PARAMS (te NULL, name NULL, empty
 * or longer than MC_SEGMENT_MAX_NAME); MC_BUFFER_OVERFLOW (65536 segments fenced). */
MC_API int mc_te_fence_target(mc_te *te, const char *segment_name, uint64_t min_epoch);

/* mc_te_get_writer_fence / mc_te_get_target_fence: the minimum epoch applied for writer
 * (hi, lo) / for segment_name (0 when never fenced) into *min_epoch. Thread-safe.
 * Returns MC_OK or MC_INVALID_PARAMS (NULL argument, bad name). */
MC_API int mc_te_get_writer_fence(mc_te *te, uint64_t hi, uint64_t lo, uint64_t *min_epoch);
MC_API int mc_te_get_target_fence(mc_te *te, const char *segment_name, uint64_t *min_epoch);

#endif
