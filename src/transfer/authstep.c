/* authstep.c: see authstep.h. */
#include <string.h>

#include "transfer/authstep.h"

int mc__te_authstep_server_init(te_authstep *a, const mc_auth_secret *s, const char *label)
{
    memset(a, 0, sizeof *a);
    return mc_auth_hs_init(&a->hs, s, label) == 0 ? 0 : -MC_AUTH_MALFORMED;
}

int mc__te_authstep_client_init(te_authstep *a, const mc_auth_secret *s, const char *label,
                                uint8_t *out, size_t cap, size_t *olen)
{
    memset(a, 0, sizeof *a);
    *olen = 0;
    if (mc_auth_hs_init(&a->hs, s, label) != 0)
        return -MC_AUTH_MALFORMED;
    return mc_auth_client_hello(&a->hs, out, cap, olen);
}

size_t mc__te_auth_want(const te_authstep *a)
{
    size_t want = MC_AUTH_HEADER;
    if (a->len >= MC_AUTH_HEADER)
        want += ((size_t)a->buf[6] << 8) | a->buf[7];
    if (want > sizeof a->buf)
        want = sizeof a->buf; /* the parser refuses such a header */
    return want > a->len ? want - a->len : 1;
}

/* The frame in buf: its length (> 0), 0 when more bytes are needed, or -1 when the
 * bytes can no longer become a frame (then the whole of buf goes to the step, which
 * answers why). */
static int frame_len(const te_authstep *a, size_t *in_len)
{
    mc_auth_frame f;
    int n = mc_auth_frame_parse(a->buf, a->len, &f);
    if (n == 0 && a->len < sizeof a->buf)
        return 0;
    *in_len = n > 0 ? (size_t)n : a->len;
    return 1;
}

int mc__te_authstep_server(te_authstep *a, uint8_t *out, size_t cap, size_t *olen)
{
    *olen = 0;
    size_t in_len;
    if (!frame_len(a, &in_len))
        return 0;
    int rc = a->step == 0 ? mc_auth_server_challenge(&a->hs, a->buf, in_len, out, cap, olen)
                          : mc_auth_server_verify(&a->hs, a->buf, in_len, out, cap, olen);
    a->len = 0;
    if (rc < 0)
        return rc;
    return a->step++ == 1 ? 1 : 0;
}

int mc__te_authstep_client(te_authstep *a, uint8_t *out, size_t cap, size_t *olen)
{
    *olen = 0;
    size_t in_len;
    if (!frame_len(a, &in_len))
        return 0;
    int rc = a->step == 0 ? mc_auth_client_respond(&a->hs, a->buf, in_len, out, cap, olen)
                          : mc_auth_client_finish(&a->hs, a->buf, in_len);
    a->len = 0;
    if (rc < 0)
        return rc;
    if (a->step++ == 1) {
        memset(&a->hs, 0, sizeof a->hs);
        return 1;
    }
    return 0;
}
