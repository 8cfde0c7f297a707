/* rpc_server.h: the master's RPC front end (framed protobuf over TCP, proto/master.proto).
 *
 * Two layers:
 *   1. mc_master_rpc_handler: decodes one request body for an opcode, runs it against a
 *      mc_master_service, and encodes the reply body. No sockets: the server and the
 *      fuzz target (tests/fuzz/fuzz_master_rpc.c) both drive it. One handler per thread.
 *   2. mc_master_rpc_server: N event loops (src/net) serving one TCP port. One listener
 *      on loop 0 accepts and hands each connection to a loop round-robin (the port is
 *      bound once, without SO_REUSEPORT, so a second master on the same port fails
 *      with -EADDRINUSE instead of silently sharing it). Each loop reads pipelined
 *      frames and answers them in order, with the request's id. A housekeeping thread
 *      calls mc_master_service_tick every tick_ms (upstream's eviction thread wakes every
 *      10 ms and the client monitor every 1 s; upstream-mooncake.md §4.5, §4.7).
 *
 * Trust (issue 11, docs/security.md): with opts.auth holding the cluster secret, every
 * accepted connection first completes the server side of the common/auth.h handshake
 * (label MC_MASTER_RPC_AUTH_LABEL), driven by the step functions on the connection's
 * loop (never a blocking wait), within opts.handshake_timeout_ms of its accept; no byte
 * of a request is parsed before it succeeds. A peer whose first bytes are not a HELLO
 * (a client without the secret) gets RESULT client-no-secret; a wrong proof gets
 * bad-client-mac; each refusal closes the connection and is counted by reason. Without
 * a secret the server is open (as upstream; the master warns once at start); a HELLO
 * then gets RESULT server-no-secret, so a client holding a secret is told at connect.
 *
 * Bounded resources (each an option; 0 = the default): connections in all
 * (max_connections, 4096) and per source address (max_connections_per_ip, 256), both
 * refused at accept; the bodies of requests being received, all connections together
 * (max_pending_request_bytes, 256 MiB; one connection holds at most one body of at most
 * max_body); replies a peer leaves unread: past pause_reply_bytes (1 MiB) the connection
 * is not read any more until its peer reads, past max_unread_reply_bytes (128 MiB) it is
 * closed. Every refusal counts in mc_master_rpc_server_stats.refused[reason].
 *
 * Bad input (upstream has no equivalent: coro_rpc is its own protocol): a frame whose
 * header is bad or whose body_len is past max_body closes that connection before any
 * body byte is buffered; a body that does not decode, or that breaks a limit below,
 * gets a reply with frame status INVALID_PARAMS and no body; an unknown opcode gets
 * NOT_SUPPORTED. Other connections are never affected.
 */
#ifndef MOONCAKE_MASTER_RPC_SERVER_H
#define MOONCAKE_MASTER_RPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/auth.h"
#include "master/master_service.h"
#include "rpc/limits.h"
#include "mooncake/mc_api.h"

/* ---------------------------------------------------------------------------------- */
/* 1. Handler                                                                          */
/* ---------------------------------------------------------------------------------- */

typedef struct mc_master_rpc_handler mc_master_rpc_handler;

/* mc_master_rpc_handler_create: a handler over svc (borrowed; must outlive it). Not
 * thread-safe: one per thread. Returns a new handler (aborts on OOM). */
MC_API mc_master_rpc_handler *mc_master_rpc_handler_create(mc_master_service *svc);

/* mc_master_rpc_handler_destroy: frees the handler and its buffers. NULL is a no-op. */
MC_API void mc_master_rpc_handler_destroy(mc_master_rpc_handler *h);

/* mc_master_rpc_handle: executes one request.
 *   opcode: frame opcode (Mcrpc__Opcode); body/len: the request body (borrowed; len
 *   bytes, len <= MC_MASTER_RPC_MAX_BODY, NULL allowed when len is 0).
 *   reply / reply_len: receive the reply body, owned by the handler and valid until the
 *   next call on it (empty when the frame status is not 0).
 * Returns the frame status: 0 (the reply body holds the opcode's reply message, whose
 * own status field carries the RPC result), MC_NOT_SUPPORTED (unknown opcode) or
 * MC_INVALID_PARAMS (undecodable body or a limit exceeded). Never crashes on any input. */
MC_API int mc_master_rpc_handle(mc_master_rpc_handler *h, uint16_t opcode,
                                const uint8_t *body, size_t len, const uint8_t **reply,
                                size_t *reply_len);

/* mc_master_rpc_handler_set_open: tells the handler its server has no cluster secret
 * (default false): remove_all then logs one WARN per process that anyone may call it. */
MC_API void mc_master_rpc_handler_set_open(mc_master_rpc_handler *h, bool open);

/* mc_master_rpc_opcode_name: "put_start", "batch_get_replica_list", ... for a valid
 * opcode; NULL otherwise (static strings). */
MC_API const char *mc_master_rpc_opcode_name(uint16_t opcode);

/* ---------------------------------------------------------------------------------- */
/* 2. Server                                                                           */
/* ---------------------------------------------------------------------------------- */

typedef struct mc_master_rpc_server mc_master_rpc_server;

typedef struct mc_master_rpc_server_opts {
    const char *host;    /* bind address; NULL or "" = "0.0.0.0" (upstream --rpc_address)  */
    uint16_t port;       /* 0 = pick a free port (read it with _port)                      */
    unsigned threads;    /* event loops serving requests; 0 = min(4, online CPUs), >= 1     */
    uint32_t max_body;   /* bytes of one request body; 0 = MC_MASTER_RPC_MAX_BODY          */
    unsigned tick_ms;    /* period of mc_master_service_tick; 0 = 10                        */
    const mc_auth_secret *auth; /* the cluster secret (borrowed; must outlive the server);
                                   NULL or empty = open                                   */
    unsigned handshake_timeout_ms;     /* accept to authenticated; 0 = 5000               */
    unsigned max_connections;          /* open connections in all; 0 = 4096               */
    unsigned max_connections_per_ip;   /* from one source address; 0 = 256                */
    uint64_t max_pending_request_bytes;/* request bodies being received, all connections;
                                          0 = 256 MiB                                     */
    uint64_t max_unread_reply_bytes;   /* queued replies of one connection beyond which it
                                          is closed; 0 = 128 MiB                          */
    uint64_t pause_reply_bytes;        /* queued replies of one connection at which it is
                                          not read until they drain; 0 = 1 MiB (at most
                                          half of max_unread_reply_bytes)                 */
    unsigned idle_timeout_ms;          /* a connection that sent no request byte for this
                                          long is closed (checked every
                                          min(1 s, max(100 ms, this / 4))); 0 = never
                                          (upstream --rpc_conn_timeout_seconds)            */
    unsigned busy_poll_us;             /* the most a loop polls for the next request before
                                          it sleeps, us (common/spin.h; also capped by
                                          MC_BUSY_POLL_US); 0 = never (mooncake_master's
                                          --rpc_busy_poll_us, default 1000)                */
    bool no_tcp_nodelay;               /* true: accepted sockets keep Nagle's algorithm
                                          (upstream --rpc_enable_tcp_no_delay=false);
                                          false (default) = TCP_NODELAY                   */
} mc_master_rpc_server_opts;

#define MC_MASTER_RPC_AUTH_LABEL "master-rpc"

/* Why a connection was refused or closed by a limit (the reason label of
 * master_rpc_refused_total). */
typedef enum mc_master_rpc_refusal {
    MC_RPC_REFUSED_CONN_LIMIT,        /* max_connections reached, at accept             */
    MC_RPC_REFUSED_PER_IP_LIMIT,      /* max_connections_per_ip reached, at accept      */
    MC_RPC_REFUSED_HANDSHAKE_TIMEOUT, /* not authenticated within handshake_timeout_ms  */
    MC_RPC_REFUSED_CLIENT_NO_SECRET,  /* first bytes were no HELLO                      */
    MC_RPC_REFUSED_BAD_MAC,           /* a wrong proof: another secret, or a replay     */
    MC_RPC_REFUSED_WRONG_PORT,        /* a client of another port (label)               */
    MC_RPC_REFUSED_MALFORMED,         /* a handshake frame that does not parse          */
    MC_RPC_REFUSED_HANDSHAKE_CLOSED,  /* the peer closed or failed during the handshake */
    MC_RPC_REFUSED_SERVER_NO_SECRET,  /* a HELLO to this open server                    */
    MC_RPC_REFUSED_PENDING_BYTES,     /* max_pending_request_bytes reached              */
    MC_RPC_REFUSED_REPLY_BACKLOG,     /* max_unread_reply_bytes passed                  */
    MC_RPC_REFUSED_COUNT
} mc_master_rpc_refusal;

/* mc_master_rpc_refusal_name: "conn_limit", "per_ip_limit", ... (static), "?" else. */
MC_API const char *mc_master_rpc_refusal_name(int reason);

/* Connection and frame counters (monotonic, relaxed atomics). */
typedef struct mc_master_rpc_server_stats {
    uint64_t connections_active;
    uint64_t connections_total;   /* accepted                                             */
    uint64_t connections_bad;     /* closed for a bad header or an oversized body         */
    uint64_t frames;              /* requests executed or refused                         */
    uint64_t frames_refused;      /* replied with a non-zero frame status                 */
    uint64_t authenticated_total; /* connections that completed the handshake             */
    uint64_t pending_request_bytes; /* gauge: request bodies being received               */
    uint64_t refused[MC_RPC_REFUSED_COUNT]; /* by mc_master_rpc_refusal                   */
} mc_master_rpc_server_stats;

/* mc_master_rpc_server_start: binds host:port, starts the loops and the tick thread.
 *   svc: borrowed; must outlive the server. opts: borrowed (NULL = all defaults).
 *   *out: the running server; stop/free it with mc_master_rpc_server_destroy.
 * Returns 0, or -errno: -EADDRINUSE (port taken), -EADDRNOTAVAIL / -EINVAL (bad host),
 * -EACCES, or a loop/thread creation error. Nothing is left running on failure. */
MC_API int mc_master_rpc_server_start(mc_master_service *svc,
                                      const mc_master_rpc_server_opts *opts,
                                      mc_master_rpc_server **out);

/* mc_master_rpc_server_port: the bound port. mc_master_rpc_server_threads: loop count. */
MC_API uint16_t mc_master_rpc_server_port(const mc_master_rpc_server *srv);
MC_API unsigned mc_master_rpc_server_threads(const mc_master_rpc_server *srv);

/* mc_master_rpc_server_get_stats: a snapshot of the counters. Any thread. */
MC_API void mc_master_rpc_server_get_stats(mc_master_rpc_server *srv,
                                           mc_master_rpc_server_stats *out);

/* mc_master_rpc_server_destroy: stops accepting, closes every connection (replies not
 * yet written are dropped), joins the threads and frees the server. The service is
 * untouched. NULL is a no-op. Not from a server thread. */
MC_API void mc_master_rpc_server_destroy(mc_master_rpc_server *srv);

#endif
