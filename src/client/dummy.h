/* client/dummy.h: the two ends of the real-client / dummy-client channel
 * (client/dummy_ipc.h has the wire format).
 *
 * Server (dummy_server.c): runs inside the resource-owning client (tools/mooncake_client.c)
 * and serves the dummy clients of this host and uid on the abstract Unix socket of its
 * port, forwarding each request to its mc_store. Each dummy connection has its own
 * thread; the dummy's shared pool (memfd from HELLO) is mapped and registered with the
 * store while the connection lives, and unregistered, unmapped and closed when it ends
 * (a killed dummy leaks nothing: the kernel closes its socket).
 *
 * Dummy side (dummy_client.c): connects, creates and sends the pool, and issues requests;
 * see mc_dummy_client_*. */
#ifndef MOONCAKE_CLIENT_DUMMY_H
#define MOONCAKE_CLIENT_DUMMY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/mc_api.h"
#include "mooncake/store.h"

#define MC_DUMMY_MAX_CONNECTIONS 1024u /* dummy connections one real client serves */

typedef struct mc_dummy_server mc_dummy_server;

/* Counters of a server (atomics; read with mc_dummy_server_stats). */
typedef struct mc_dummy_stats {
    uint64_t connections;   /* dummy connections open now */
    uint64_t pools;         /* dummy pools mapped now */
    uint64_t pool_bytes;    /* bytes of those pools */
    uint64_t requests;      /* requests answered since start */
    uint64_t refused;       /* connections or frames refused (uid, malformed, limits) */
} mc_dummy_stats;

/* mc_dummy_server_start: listens on "\0mooncake_client_<port>.sock" (abstract namespace)
 * and serves requests on the store s (borrowed; set up; must outlive the server) from
 * threads of its own. Returns MC_OK; MC_INVALID_PARAMS (port outside 1..65535);
 * MC_INTERNAL_ERROR (the name is taken: another real client of that port runs on this
 * host, logged). */
MC_API int mc_dummy_server_start(mc_store *s, int port, mc_dummy_server **out);

/* mc_dummy_server_stop: stops accepting, closes every dummy connection (their pools are
 * unregistered and unmapped), joins the threads and frees srv. NULL is a no-op. */
MC_API void mc_dummy_server_stop(mc_dummy_server *srv);

MC_API void mc_dummy_server_stats(mc_dummy_server *srv, mc_dummy_stats *out);

#endif
