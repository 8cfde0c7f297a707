/* fuzz_auth: the authentication parsers of src/common/auth.c over arbitrary bytes (the
 * first byte picks one):
 *   0  the handshake frame parser: an accepted frame's length lies within the input and
 *      MC_AUTH_FRAME_MAX, every strict prefix of it is "need more" (0), and parsing is
 *      deterministic; a rejected prefix stays rejected when bytes are added;
 *   1  the HTTP Authorization parser: an accepted value has a canonical ts that prints
 *      back to the same digits, a 32-digit lowercase hex nonce whose bytes agree;
 *   2  the handshake steps as a server and as a client fed the input as the peer's
 *      frames (split where each frame ends): no crash, no success without the secret's
 *      proof (the input cannot forge a mac), and every frame written parses back.
 * Seeds: tests/fuzz/corpus/auth. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_written(const uint8_t *out, size_t n)
{
    if (!n)
        return;
    mc_auth_frame f;
    if (mc_auth_frame_parse(out, n, &f) != (int)n)
        abort();
}

static void fuzz_frames(const uint8_t *d, size_t n)
{
    mc_auth_frame f, g;
    int r = mc_auth_frame_parse(d, n, &f);
    if (r > 0) {
        if ((size_t)r > n || r > MC_AUTH_FRAME_MAX)
            abort();
        for (size_t i = 1; i < (size_t)r; i++)
            if (mc_auth_frame_parse(d, i, &g) != 0)
                abort();
        if (mc_auth_frame_parse(d, (size_t)r, &g) != r || g.type != f.type)
            abort();
        if (f.type == MC_AUTH_HELLO &&
            (f.label_len == 0 || f.label_len > MC_AUTH_LABEL_MAX ||
             f.label + f.label_len > (const char *)d + r))
            abort();
    } else if (r < 0 && n) {
        /* a rejected prefix is rejected however it continues */
        uint8_t more[MC_AUTH_FRAME_MAX + 8];
        size_t m = n < MC_AUTH_FRAME_MAX ? n : MC_AUTH_FRAME_MAX;
        memcpy(more, d, m);
        memset(more + m, 0, 8);
        if (mc_auth_frame_parse(more, m + 8, &g) >= 0)
            abort();
    }
}

static void fuzz_http(const uint8_t *d, size_t n)
{
    mc_auth_http_cred cr;
    if (mc_auth_http_parse((const char *)d, n, &cr) != 0)
        return;
    char ts[32];
    snprintf(ts, sizeof ts, "%llu", (unsigned long long)cr.ts_ms);
    if (strcmp(ts, cr.ts) != 0 || strlen(cr.nonce) != MC_AUTH_HTTP_NONCE_HEX)
        abort();
    char hex[MC_AUTH_HTTP_NONCE_HEX + 1];
    mc_auth_hex(cr.nonce_bytes, sizeof cr.nonce_bytes, hex);
    if (strcmp(hex, cr.nonce) != 0)
        abort();
}

/* The next frame of the input (at least one byte), as a reader would cut it. */
static size_t next_frame(const uint8_t *d, size_t n)
{
    mc_auth_frame f;
    int r = mc_auth_frame_parse(d, n, &f);
    return r > 0 ? (size_t)r : n;
}

static void fuzz_steps(const uint8_t *d, size_t n)
{
    static mc_auth_secret s;
    if (!s.len)
        mc_auth_secret_set(&s, "fuzz-cluster-secret-0123456789", 30, NULL, 0);
    uint8_t out[MC_AUTH_FRAME_MAX];
    size_t olen, k;
    /* as a server */
    mc_auth_hs hs;
    mc_auth_hs_init(&hs, &s, "fuzz");
    k = next_frame(d, n);
    int rc = mc_auth_server_challenge(&hs, d, k, out, sizeof out, &olen);
    check_written(out, olen);
    if (rc == 0 && k < n) {
        size_t k2 = next_frame(d + k, n - k);
        rc = mc_auth_server_verify(&hs, d + k, k2, out, sizeof out, &olen);
        check_written(out, olen);
        if (rc == 0) /* the input would have had to forge the client's mac */
            abort();
    }
    /* as a client */
    mc_auth_hs_init(&hs, &s, "fuzz");
    mc_auth_client_hello(&hs, out, sizeof out, &olen);
    k = next_frame(d, n);
    rc = mc_auth_client_respond(&hs, d, k, out, sizeof out, &olen);
    check_written(out, olen);
    if (rc == 0) /* the server's mac over a fresh client nonce cannot be in the input */
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0:
        fuzz_frames(d, n);
        break;
    case 1:
        fuzz_http(d, n);
        break;
    default:
        fuzz_steps(d, n);
    }
    return 0;
}
