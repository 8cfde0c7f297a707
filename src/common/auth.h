/* common/auth.h: the cluster secret and everything that proves a peer holds it. The one
 * place of mooncake-c that touches cryptography (OpenSSL libcrypto: HMAC-SHA-256,
 * SHA-256, CRYPTO_memcmp; nonces from getrandom(2)). No home-made primitives.
 * docs/security.md is the user's view (threat model, deployment); this header is the
 * contract for the ports that reuse it.
 *
 * Four parts:
 *   1. The secret: loaded from a token file (--auth_token_file / MC_AUTH_TOKEN_FILE),
 *      which must be a regular file owned by the service user (or root) and readable
 *      by its owner only (as ssh refuses a private key that group or others can read).
 *      One trailing "\n" (or "\r\n") is stripped; what is left must be
 *      MC_AUTH_SECRET_MIN..MC_AUTH_SECRET_MAX bytes. An empty secret (len 0) means
 *      "none configured": the servers are open, as upstream, and say so once at start.
 *   2. The connection handshake for framed TCP ports (master RPC, transfer engine data
 *      and handshake ports, the same-host socket): a mutual challenge-response, the
 *      client speaking first, bound to both sides' nonces and to the port's label so a
 *      recorded handshake proves nothing on another connection or another port:
 *
 *        C -> S  HELLO      client_nonce[32], label            "I hold a secret"
 *        S -> C  CHALLENGE  server_nonce[32], server_mac[32]   the server proves it
 *        C -> S  RESPONSE   client_mac[32]                     the client proves it
 *        S -> C  RESULT     code (0 = accepted)
 *
 *        server_mac = HMAC-SHA-256(secret, "mooncake-auth-v1 server" 0x00 label 0x00
 *                                          client_nonce server_nonce)
 *        client_mac = the same with "client".
 *
 *      Either side may answer any step with a RESULT carrying an error code instead
 *      (then closes). A server with a secret whose peer's first bytes are not a HELLO
 *      (a client without a secret speaking its protocol at once) answers RESULT
 *      CLIENT_NO_SECRET; a server without a secret that sees a HELLO answers RESULT
 *      SERVER_NO_SECRET (mc_auth_looks_like_frame tells it). So a mixed cluster fails at
 *      connect, and each side's message (mc_auth_error_text) says which side lacks it.
 *
 *      Frame (every integer big-endian; a pure, length-checked parser, fuzzed by
 *      tests/fuzz/fuzz_auth.c):
 *        0  magic "MCAU" (4 bytes)    4  version (1 byte) = 1
 *        5  type  (1 byte)            6  body length (2 bytes) <= MC_AUTH_FRAME_MAX_BODY
 *        8  body:  HELLO      32 + 1 + n bytes: client nonce, label length n (1..32),
 *                             label (printable ASCII)
 *                  CHALLENGE  64 bytes: server nonce, server mac
 *                  RESPONSE   32 bytes: client mac
 *                  RESULT     1 byte: an mc_auth_code
 *
 *      The same steps come as pure message functions (mc_auth_client_hello,
 *      mc_auth_server_challenge, mc_auth_client_respond, mc_auth_server_verify,
 *      mc_auth_client_finish) for an event-loop server that reads frames itself, and
 *      as blocking helpers over a connected fd with a deadline (mc_auth_client_fd,
 *      mc_auth_server_fd).
 *   3. HTTP request signatures (HTTP has no handshake a server library lets us hook):
 *        Authorization: MC-HMAC ts=<unix ms>,nonce=<32 hex>,mac=<64 hex>
 *        mac = HMAC-SHA-256(secret, "MC-HMAC-v1\n" METHOD "\n" TARGET "\n" TS "\n"
 *                                   NONCE "\n" hex(SHA-256(body)))
 *      TARGET is the request-target exactly as sent (path and query, still
 *      percent-encoded), TS and NONCE exactly as in the header (lowercase hex; TS
 *      decimal without leading zeros). A server accepts |now - ts| <= the window
 *      (MC_AUTH_HTTP_WINDOW_MS) and each nonce once (a bounded replay cache, part 4).
 *   4. The replay cache: nonces seen within the window, bounded in entries.
 *
 * Threads: everything here is thread-safe (a secret is read-only once loaded; an
 * mc_auth_hs belongs to one connection; the replay cache has its own lock).
 * Errors: -errno for files and I/O; mc_auth_code values for the handshake. */
#ifndef MOONCAKE_COMMON_AUTH_H
#define MOONCAKE_COMMON_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- 1. the secret ---- */

#define MC_AUTH_SECRET_MIN 16   /* bytes: shorter token files are refused */
#define MC_AUTH_SECRET_MAX 1024 /* bytes */
#define MC_AUTH_ENV "MC_AUTH_TOKEN_FILE"

/* A loaded secret; len 0 = none configured. Plain data: copy it by value; wipe it with
 * mc_auth_secret_wipe when done. */
typedef struct mc_auth_secret {
    size_t len;
    uint8_t key[MC_AUTH_SECRET_MAX];
} mc_auth_secret;

/* mc_auth_load: loads the token file `path`; path NULL or "" = the file named by the
 * environment variable MC_AUTH_TOKEN_FILE; neither set = no secret (out->len = 0,
 * returns 0). Checks, each refused with a one-line reason in err (errlen bytes, may be
 * NULL) and logged at ERROR (tag "auth"), naming the file and where it came from:
 * not a regular file or a symlink (-EINVAL), owned by another uid than the effective
 * one or root (-EPERM), readable or writable by group or others (-EPERM: "permissions
 * 0644 for 'F' are too open: ... chmod 600 F"), unreadable (-errno), shorter than
 * MC_AUTH_SECRET_MIN or longer than MC_AUTH_SECRET_MAX after stripping one trailing
 * newline (-EINVAL). out: caller's storage, zeroed on error. */
int mc_auth_load(const char *path, mc_auth_secret *out, char *err, size_t errlen);

/* mc_auth_secret_set: a secret from bytes given in memory (a setup() keyword). Same
 * length rules as a file (one trailing newline stripped); 0 or -EINVAL with err. */
int mc_auth_secret_set(mc_auth_secret *out, const void *bytes, size_t len, char *err,
                       size_t errlen);

/* mc_auth_enabled: true when s holds a secret (s may be NULL). */
bool mc_auth_enabled(const mc_auth_secret *s);

/* mc_auth_secret_wipe: zeroes the key (OPENSSL_cleanse, not optimised away). NULL ok. */
void mc_auth_secret_wipe(mc_auth_secret *s);

/* mc_auth_warn_open: logs the one WARN a server prints at start when it has no secret:
 * "<what> on <where> is open: no cluster secret is configured (--auth_token_file or
 * MC_AUTH_TOKEN_FILE), so anyone who can reach it can <can>". */
void mc_auth_warn_open(const char *tag, const char *what, const char *where, const char *can);

/* ---- primitives (libcrypto) ---- */

#define MC_AUTH_MAC_LEN 32   /* HMAC-SHA-256 */
#define MC_AUTH_NONCE_LEN 32 /* handshake nonces */

/* mc_auth_hmac: HMAC-SHA-256 over the concatenation of n parts (parts[i], lens[i]
 * bytes). 0, or -EINVAL (no secret), -ENOMEM. */
int mc_auth_hmac(const mc_auth_secret *s, const void *const *parts, const size_t *lens,
                 size_t n, uint8_t mac[MC_AUTH_MAC_LEN]);

/* mc_auth_equal: constant-time comparison of n bytes (CRYPTO_memcmp): true if equal. */
bool mc_auth_equal(const void *a, const void *b, size_t n);

/* mc_auth_random: n random bytes from getrandom(2). 0 or -errno. */
int mc_auth_random(void *buf, size_t n);

/* Streaming SHA-256 (request bodies). _new returns NULL on OOM; _final writes the
 * digest and frees; _free frees without a digest. NULL ok for _update/_free. */
typedef struct mc_auth_sha256 mc_auth_sha256;
mc_auth_sha256 *mc_auth_sha256_new(void);
void mc_auth_sha256_update(mc_auth_sha256 *h, const void *data, size_t n);
void mc_auth_sha256_final(mc_auth_sha256 *h, uint8_t out[32]);
void mc_auth_sha256_free(mc_auth_sha256 *h);

/* mc_auth_hex: 2n lowercase hex digits of in[0..n) plus a NUL into out (2n+1 bytes). */
void mc_auth_hex(const uint8_t *in, size_t n, char *out);

/* ---- 2. the connection handshake ---- */

#define MC_AUTH_MAGIC "MCAU"
#define MC_AUTH_VERSION 1
#define MC_AUTH_HEADER 8
#define MC_AUTH_FRAME_MAX_BODY 128
#define MC_AUTH_FRAME_MAX (MC_AUTH_HEADER + MC_AUTH_FRAME_MAX_BODY)
#define MC_AUTH_LABEL_MAX 32

enum { MC_AUTH_HELLO = 1, MC_AUTH_CHALLENGE = 2, MC_AUTH_RESPONSE = 3, MC_AUTH_RESULT = 4 };

/* Outcome codes: on the wire in RESULT (one byte), and returned (negated) by the step
 * functions. */
typedef enum mc_auth_code {
    MC_AUTH_OK = 0,
    MC_AUTH_CLIENT_NO_SECRET = 1, /* the server has a secret, the client sent no HELLO */
    MC_AUTH_SERVER_NO_SECRET = 2, /* the client sent a HELLO, the server has no secret */
    MC_AUTH_BAD_CLIENT_MAC = 3,   /* the client's proof is wrong: another secret */
    MC_AUTH_BAD_SERVER_MAC = 4,   /* the server's proof is wrong: another secret */
    MC_AUTH_WRONG_PORT = 5,       /* the labels differ: a client of another port */
    MC_AUTH_MALFORMED = 6,        /* a frame that does not parse, or out of order */
    MC_AUTH_BAD_VERSION = 7,      /* another handshake version */
    MC_AUTH_TIMEOUT = 8,          /* local only: the deadline passed */
    MC_AUTH_IO = 9,               /* local only: the connection failed or closed */
    MC_AUTH_CODE_COUNT
} mc_auth_code;

/* mc_auth_code_name: "ok", "client-no-secret", ... (static), "?" when unknown. */
const char *mc_auth_code_name(int code);

/* mc_auth_error_text: one sentence for a log line or an exception, from the point of
 * view of the side that prints it (client_side true: the connecting side), e.g. for
 * MC_AUTH_CLIENT_NO_SECRET on the client: "the server requires the cluster secret
 * and this client has none (set MC_AUTH_TOKEN_FILE ...)". Static string. */
const char *mc_auth_error_text(int code, bool client_side);

/* A parsed frame; pointers borrow the parsed buffer. */
typedef struct mc_auth_frame {
    uint8_t type;
    const uint8_t *nonce; /* HELLO: client nonce; CHALLENGE: server nonce */
    const uint8_t *mac;   /* CHALLENGE: server mac; RESPONSE: client mac */
    const char *label;    /* HELLO: label_len bytes, not NUL-terminated */
    size_t label_len;
    uint8_t code;         /* RESULT */
} mc_auth_frame;

/* mc_auth_frame_parse: parses the frame at the start of buf (len bytes). Pure.
 * Returns the frame's total length (> 0) and fills *out; 0 when the bytes so far are a
 * valid prefix and more are needed (at most MC_AUTH_FRAME_MAX in all); -EBADMSG when
 * they can no longer become a valid frame (wrong magic, unknown type, a body length
 * that does not fit the type, a bad label, an unknown result code); -EPROTONOSUPPORT
 * for another version. */
int mc_auth_frame_parse(const uint8_t *buf, size_t len, mc_auth_frame *out);

/* mc_auth_looks_like_frame: true when buf (len >= 1 bytes) starts like a frame (a
 * prefix of the magic, or the whole magic): what an open server checks its first
 * bytes against to tell a HELLO from its own protocol. */
bool mc_auth_looks_like_frame(const uint8_t *buf, size_t len);

/* mc_auth_result_frame: writes a RESULT frame with `code` (MC_AUTH_HEADER + 1 bytes)
 * into out (cap bytes). Returns its length, or -ENOBUFS. */
int mc_auth_result_frame(int code, uint8_t *out, size_t cap);

/* One side of one handshake (caller's storage, one connection, one thread at a time). */
typedef struct mc_auth_hs {
    const mc_auth_secret *secret; /* borrowed for the handshake */
    char label[MC_AUTH_LABEL_MAX + 1];
    uint8_t client_nonce[MC_AUTH_NONCE_LEN];
    uint8_t server_nonce[MC_AUTH_NONCE_LEN];
    int state; /* private */
} mc_auth_hs;

/* mc_auth_hs_init: starts a handshake for the port `label` (1..MC_AUTH_LABEL_MAX
 * printable bytes, e.g. "master-rpc", "te-data"), with `secret` (borrowed until done;
 * must hold a secret). 0 or -EINVAL. */
int mc_auth_hs_init(mc_auth_hs *hs, const mc_auth_secret *secret, const char *label);

/* The steps. Each takes the peer's complete frame (in, in_len: exactly one frame as
 * mc_auth_frame_parse measured it) and writes the frame to send into out (cap >=
 * MC_AUTH_FRAME_MAX bytes), *out_len its length (0: nothing to send). They return
 * MC_AUTH_OK to go on (or, for the last step of each side, done: authenticated), or a
 * negative mc_auth_code: the handshake failed; *out_len may still hold a RESULT to send
 * before closing (so the peer learns why).
 *   client: mc_auth_client_hello -> send; read a frame -> mc_auth_client_respond ->
 *           send; read a frame -> mc_auth_client_finish (OK: authenticated).
 *   server: read a frame -> mc_auth_server_challenge -> send; read a frame ->
 *           mc_auth_server_verify -> send (OK: authenticated).
 * A RESULT received in place of the expected frame returns its code (negated). */
int mc_auth_client_hello(mc_auth_hs *hs, uint8_t *out, size_t cap, size_t *out_len);
int mc_auth_server_challenge(mc_auth_hs *hs, const uint8_t *in, size_t in_len, uint8_t *out,
                             size_t cap, size_t *out_len);
int mc_auth_client_respond(mc_auth_hs *hs, const uint8_t *in, size_t in_len, uint8_t *out,
                           size_t cap, size_t *out_len);
int mc_auth_server_verify(mc_auth_hs *hs, const uint8_t *in, size_t in_len, uint8_t *out,
                          size_t cap, size_t *out_len);
int mc_auth_client_finish(mc_auth_hs *hs, const uint8_t *in, size_t in_len);

/* mc_auth_client_fd / mc_auth_server_fd: the whole handshake over a connected,
 * blocking or non-blocking stream socket fd (poll(2) waits), before any other byte of
 * the port's protocol. deadline_ms: mc_now_ms() clock; the handshake fails with
 * MC_AUTH_TIMEOUT past it. The server reads exactly the handshake's bytes (a byte
 * that is not a frame fails it with CLIENT_NO_SECRET, answered to the peer); nothing
 * of the protocol that follows is consumed. Returns MC_AUTH_OK or a negative
 * mc_auth_code; err (errlen bytes, may be NULL) gets the reason from this side's point
 * of view (mc_auth_error_text, plus the errno for I/O). Does not close fd. */
int mc_auth_client_fd(int fd, const mc_auth_secret *secret, const char *label,
                      uint64_t deadline_ms, char *err, size_t errlen);
int mc_auth_server_fd(int fd, const mc_auth_secret *secret, const char *label,
                      uint64_t deadline_ms, char *err, size_t errlen);

/* ---- 3. HTTP request signatures ---- */

#define MC_AUTH_HTTP_SCHEME "MC-HMAC"
#define MC_AUTH_HTTP_WINDOW_MS 30000u /* accepted clock difference, either way */
#define MC_AUTH_HTTP_NONCE_HEX 32     /* 16 random bytes */
#define MC_AUTH_HTTP_MAX_HEADER 256   /* bytes of the Authorization value we accept */

/* The fields of one Authorization header; strings borrow nothing (copied, NUL-ended). */
typedef struct mc_auth_http_cred {
    uint64_t ts_ms;
    char ts[24];                                 /* as sent (canonical decimal) */
    char nonce[MC_AUTH_HTTP_NONCE_HEX + 1];      /* lowercase hex */
    uint8_t nonce_bytes[MC_AUTH_HTTP_NONCE_HEX / 2];
    uint8_t mac[MC_AUTH_MAC_LEN];
} mc_auth_http_cred;

/* mc_auth_http_parse: parses an Authorization header value (len bytes, need not be
 * NUL-terminated): "MC-HMAC" then, after spaces, ts=, nonce= and mac= in any order,
 * each once, separated by commas (spaces around them allowed). ts: 1..16 digits, no
 * leading zero; nonce: exactly 32 lowercase hex digits; mac: exactly 64. Pure.
 * Returns 0, -ENOENT (another scheme: not an MC-HMAC header), -EBADMSG (malformed). */
int mc_auth_http_parse(const char *value, size_t len, mc_auth_http_cred *out);

/* mc_auth_http_mac: the mac of a request (see the formula above). body_sha256: the
 * SHA-256 of the body (of zero bytes when none). target: NUL-terminated. 0 or -errno. */
int mc_auth_http_mac(const mc_auth_secret *s, const char *method, const char *target,
                     const char *ts, const char *nonce, const uint8_t body_sha256[32],
                     uint8_t mac[MC_AUTH_MAC_LEN]);

/* mc_auth_http_verify: recomputes the mac of a request for cr's ts and nonce and
 * compares it with cr->mac in constant time. 0 (it matches), -EACCES (it does not:
 * another secret, or the request was changed), -EIO. Does not look at the clock or the
 * replay cache: the caller checks the window first and records the nonce after. */
int mc_auth_http_verify(const mc_auth_secret *s, const mc_auth_http_cred *cr,
                        const char *method, const char *target, const uint8_t body_sha256[32]);

/* mc_auth_http_sign: the Authorization value for a request, with a fresh nonce and
 * now_ms (wall clock, mc_wall_ms) as ts. body may be NULL when len is 0. out: cap >=
 * MC_AUTH_HTTP_MAX_HEADER bytes, NUL-terminated. 0 or -errno. */
int mc_auth_http_sign(const mc_auth_secret *s, const char *method, const char *target,
                      const void *body, size_t len, uint64_t now_ms, char *out, size_t cap);

/* mc_auth_http_target: the request-target of an absolute URL (what an HTTP client puts
 * in its request line): from the first '/' or '?' after "scheme://authority" (a query
 * alone gets "/" in front), "/" when there is none, without any "#fragment". Returns a
 * new malloc'd string. */
char *mc_auth_http_target(const char *url);

/* ---- 4. the replay cache ---- */

typedef struct mc_auth_replay mc_auth_replay;

#define MC_AUTH_REPLAY_DEFAULT 131072 /* entries (24 bytes each) */

/* mc_auth_replay_create: a cache of up to `capacity` nonces (0: the default; rounded up
 * to a power of two). Never NULL (aborts on OOM). _destroy: NULL ok. */
mc_auth_replay *mc_auth_replay_create(size_t capacity);
void mc_auth_replay_destroy(mc_auth_replay *r);

/* mc_auth_replay_check: records a nonce that stays refusable until expiry_ms (the
 * moment its request would be refused as stale anyway; same clock as now_ms). Returns 0
 * (first time: recorded), -EEXIST (seen before and not expired: a replay), -ENOSPC (no
 * room among the slots it may use: every one holds a live nonce; refuse the request).
 * The work is bounded (a fixed number of probes). Thread-safe. */
int mc_auth_replay_check(mc_auth_replay *r, const uint8_t nonce[16], uint64_t expiry_ms,
                         uint64_t now_ms);

#endif
