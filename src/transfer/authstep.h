/* authstep.h: the cluster-secret handshake (common/auth.h) as a byte-stream machine for
 * the transfer engine's non-blocking connections: which bytes to read next and what to
 * do with them. Pure (no sockets, no engine), so tests/fuzz/fuzz_te_auth.c drives it
 * with arbitrary bytes; peerauth.c moves the bytes. Internal to src/transfer.
 *
 * A connection reads at most mc__te_auth_want() bytes into buf[len..), adds them to
 * len and calls the side's step; the step consumes a whole frame once it is in (or
 * bytes that can no longer become one), writes the frame to send into out and resets
 * len. So nothing past the handshake is ever read from the connection.
 * Threads: one connection, one thread at a time. */
#ifndef MC_TRANSFER_AUTHSTEP_H
#define MC_TRANSFER_AUTHSTEP_H

#include <stddef.h>
#include <stdint.h>

#include "common/auth.h"

typedef struct te_authstep {
    mc_auth_hs hs;
    int step;    /* server: 0 waiting for HELLO, 1 for RESPONSE; client: 0 CHALLENGE, 1 RESULT */
    size_t len;  /* bytes in buf */
    uint8_t buf[MC_AUTH_FRAME_MAX];
} te_authstep;

/* mc__te_authstep_init: 0, or -MC_AUTH_MALFORMED (no secret / bad label). Client side:
 * the HELLO to send lands in out (cap >= MC_AUTH_FRAME_MAX), *olen its length. */
int mc__te_authstep_server_init(te_authstep *a, const mc_auth_secret *s, const char *label);
int mc__te_authstep_client_init(te_authstep *a, const mc_auth_secret *s, const char *label,
                                uint8_t *out, size_t cap, size_t *olen);

/* mc__te_auth_want: bytes to read next (1..MC_AUTH_FRAME_MAX - len): up to the end of the
 * header, then to the end of the body the header announces. */
size_t mc__te_auth_want(const te_authstep *a);

/* The steps, after bytes were added to buf. Return 0 (go on: send out[0..*olen) if any,
 * then read mc__te_auth_want() more), 1 (authenticated: send out, if any, and the port's
 * protocol follows), or a negative mc_auth_code (failed: send out, a RESULT telling the
 * peer why, when *olen > 0, then close). cap >= MC_AUTH_FRAME_MAX. */
int mc__te_authstep_server(te_authstep *a, uint8_t *out, size_t cap, size_t *olen);
int mc__te_authstep_client(te_authstep *a, uint8_t *out, size_t cap, size_t *olen);

#endif
