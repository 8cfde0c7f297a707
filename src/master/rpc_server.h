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
} mc_master_rpc_server_opts;

/* Connection and frame counters (monotonic, relaxed atomics). */
typedef struct mc_master_rpc_server_stats {
    uint64_t connections_active;
    uint64_t connections_total;   /* accepted                                             */
    uint64_t connections_bad;     /* closed for a bad header or an oversized body         */
    uint64_t frames;              /* requests executed or refused                         */
    uint64_t frames_refused;      /* replied with a non-zero frame status                 */
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
