/* fuzz_te_auth: the transfer engine's handshake stream machine (src/transfer/authstep.c,
 * compiled in with src/common/auth.c for coverage) over arbitrary bytes:
 *   1. a server and a client fed the input as their peer's bytes, in chunks whose sizes
 *      come from the input: neither reads past mc__te_auth_want(), neither authenticates
 *      from bytes that were not made with the secret;
 *   2. a real client and server talking to each other, one byte of their exchange
 *      flipped where the input says: with a flip they never both authenticate, without
 *      one they always do. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/authstep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mc_auth_secret secret;

static void feed(te_authstep *a, bool server, const uint8_t *data, size_t size)
{
    uint8_t out[MC_AUTH_FRAME_MAX];
    size_t off = 0;
    while (off < size) {
        size_t want = mc__te_auth_want(a);
        if (want == 0 || a->len + want > sizeof a->buf)
            abort();
        size_t n = 1 + data[off] % want; /* a chunk no larger than what is wanted */
        off++;
        if (n > size - off)
            n = size - off;
        if (!n)
            break;
        memcpy(a->buf + a->len, data + off, n);
        a->len += n;
        off += n;
        size_t olen = 0;
        int rc = server ? mc__te_authstep_server(a, out, sizeof out, &olen)
                        : mc__te_authstep_client(a, out, sizeof out, &olen);
        if (olen > MC_AUTH_FRAME_MAX)
            abort();
        if (rc == 1)
            abort(); /* random bytes cannot hold a MAC made with the secret */
        if (rc < 0)
            break;
    }
}

/* Moves src's frame to dst byte by byte through dst's step, flipping byte `flip` of the
 * whole exchange (counted by *pos). Returns dst's step result. */
static int deliver(te_authstep *dst, bool server, const uint8_t *frame, size_t len,
                   size_t *pos, size_t flip, uint8_t mask, uint8_t *out, size_t *olen)
{
    int rc = 0;
    *olen = 0;
    for (size_t i = 0; i < len; i++) {
        if (mc__te_auth_want(dst) == 0)
            abort();
        dst->buf[dst->len++] = frame[i] ^ (*pos == flip ? mask : 0);
        (*pos)++; /* counted before the step: the flipped byte was delivered */
        rc = server ? mc__te_authstep_server(dst, out, MC_AUTH_FRAME_MAX, olen)
                    : mc__te_authstep_client(dst, out, MC_AUTH_FRAME_MAX, olen);
        if (rc != 0 || *olen)
            return i + 1 == len || rc < 0 ? rc : -100; /* a step before the frame ended */
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!secret.len)
        mc_auth_secret_set(&secret, "fuzz-secret-of-enough-bytes", 27, NULL, 0);
    if (size < 3)
        return 0;
    te_authstep a;
    uint8_t out[MC_AUTH_FRAME_MAX];
    size_t olen;
    if (mc__te_authstep_server_init(&a, &secret, "te-data") != 0)
        abort();
    feed(&a, true, data + 1, size - 1);
    if (mc__te_authstep_client_init(&a, &secret, "te-data", out, sizeof out, &olen) != 0)
        abort();
    feed(&a, false, data + 1, size - 1);

    /* 2: a real exchange with at most one flipped byte */
    bool do_flip = data[0] & 1;
    size_t flip = do_flip ? ((size_t)data[1] << 8 | data[2]) % 160 : (size_t)-1;
    uint8_t mask = (uint8_t)(data[size - 1] | 1);
    te_authstep c, s;
    uint8_t f1[MC_AUTH_FRAME_MAX], f2[MC_AUTH_FRAME_MAX];
    size_t l1, l2, pos = 0;
    if (mc__te_authstep_client_init(&c, &secret, "te-data", f1, sizeof f1, &l1) != 0 ||
        mc__te_authstep_server_init(&s, &secret, "te-data") != 0)
        abort();
    bool s_done = false, c_done = false;
    int rc = deliver(&s, true, f1, l1, &pos, flip, mask, f2, &l2); /* HELLO -> CHALLENGE */
    if (rc == 0 && l2) {
        rc = deliver(&c, false, f2, l2, &pos, flip, mask, f1, &l1); /* -> RESPONSE */
        if (rc == 0 && l1) {
            rc = deliver(&s, true, f1, l1, &pos, flip, mask, f2, &l2); /* -> RESULT */
            s_done = rc == 1;
            if (rc == 1 && l2)
                c_done = deliver(&c, false, f2, l2, &pos, flip, mask, f1, &l1) == 1;
        }
    }
    bool flipped = do_flip && flip < pos;
    if (flipped && s_done && c_done)
        abort(); /* a changed byte went unnoticed by both */
    if (!flipped && !(s_done && c_done))
        abort(); /* an honest exchange failed */
    return 0;
}
