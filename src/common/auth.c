/* auth.c: the cluster secret, the connection handshake, HTTP signatures and the replay
 * cache. See auth.h. Crypto: OpenSSL libcrypto only. */
#include "common/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/env.h"
#include "common/errbuf.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"

#define TAG "auth"

/* ---- 1. the secret ---- */

bool mc_auth_enabled(const mc_auth_secret *s)
{
    return s && s->len > 0;
}

void mc_auth_secret_wipe(mc_auth_secret *s)
{
    if (s) {
        OPENSSL_cleanse(s->key, sizeof s->key);
        s->len = 0;
    }
}

int mc_auth_secret_set(mc_auth_secret *out, const void *bytes, size_t len, char *err,
                       size_t errlen)
{
    memset(out, 0, sizeof *out);
    const uint8_t *b = bytes;
    if (len && b[len - 1] == '\n') {
        len--;
        if (len && b[len - 1] == '\r')
            len--;
    }
    if (len < MC_AUTH_SECRET_MIN) {
        mc_errf(err, errlen, "the cluster secret is %zu bytes: at least %d are required", len,
                MC_AUTH_SECRET_MIN);
        return -EINVAL;
    }
    if (len > MC_AUTH_SECRET_MAX) {
        mc_errf(err, errlen, "the cluster secret is %zu bytes: at most %d are allowed", len,
                MC_AUTH_SECRET_MAX);
        return -EINVAL;
    }
    memcpy(out->key, b, len);
    out->len = len;
    return 0;
}

int mc_auth_load(const char *path, mc_auth_secret *out, char *err, size_t errlen)
{
    char why[320] = "";
    memset(out, 0, sizeof *out);
    const char *from = "--auth_token_file";
    if (!path || !*path) {
        path = mc_env_str(MC_AUTH_ENV);
        from = MC_AUTH_ENV;
    }
    if (!path)
        return 0;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        rc = -errno;
        if (errno == ELOOP)
            snprintf(why, sizeof why, "it is a symbolic link (name the file itself)");
        else
            snprintf(why, sizeof why, "%s", strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(why, sizeof why, "%s", strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(why, sizeof why, "not a regular file");
        goto fail;
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
        rc = -EPERM;
        snprintf(why, sizeof why,
                 "owned by uid %u, not by this process's user (uid %u) or root: chown it to "
                 "the service user",
                 (unsigned)st.st_uid, (unsigned)geteuid());
        goto fail;
    }
    if (st.st_mode & 077) {
        rc = -EPERM;
        snprintf(why, sizeof why,
                 "permissions %04o are too open: the token file must be readable by its "
                 "owner only (chmod 600 %s)",
                 (unsigned)(st.st_mode & 07777), path);
        goto fail;
    }
    uint8_t buf[MC_AUTH_SECRET_MAX + 3];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof buf - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            snprintf(why, sizeof why, "%s", strerror(errno));
            OPENSSL_cleanse(buf, sizeof buf);
            goto fail;
        }
        if (r == 0 || (n += (size_t)r) == sizeof buf)
            break;
    }
    rc = mc_auth_secret_set(out, buf, n, why, sizeof why);
    OPENSSL_cleanse(buf, sizeof buf);
    if (rc != 0)
        goto fail;
    close(fd);
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    mc_auth_secret_wipe(out);
    mc_errf(err, errlen, "cannot use the token file '%s' (%s): %s", path, from, why);
    mc_log(MC_LOG_ERROR, TAG, "cannot use the token file '%s' (%s): %s", path, from, why);
    return rc;
}

void mc_auth_warn_open(const char *tag, const char *what, const char *where, const char *can)
{
    mc_log(MC_LOG_WARN, tag,
           "%s on %s is open: no cluster secret is configured (--auth_token_file or "
           "MC_AUTH_TOKEN_FILE), so anyone who can reach it can %s",
           what, where, can);
}

/* ---- primitives ---- */

int mc_auth_hmac(const mc_auth_secret *s, const void *const *parts, const size_t *lens,
                 size_t n, uint8_t mac[MC_AUTH_MAC_LEN])
{
    if (!mc_auth_enabled(s))
        return -EINVAL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += lens[i];
    uint8_t small[1024];
    uint8_t *buf = total <= sizeof small ? small : malloc(total);
    if (!buf)
        return -ENOMEM;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (lens[i])
            memcpy(buf + off, parts[i], lens[i]);
        off += lens[i];
    }
    unsigned int mlen = 0;
    uint8_t *r = HMAC(EVP_sha256(), s->key, (int)s->len, buf, total, mac, &mlen);
    if (buf != small)
        free(buf);
    return r && mlen == MC_AUTH_MAC_LEN ? 0 : -EIO;
}

bool mc_auth_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

int mc_auth_random(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

struct mc_auth_sha256 {
    EVP_MD_CTX *ctx;
};

mc_auth_sha256 *mc_auth_sha256_new(void)
{
    mc_auth_sha256 *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        free(h);
        return NULL;
    }
    return h;
}

void mc_auth_sha256_update(mc_auth_sha256 *h, const void *data, size_t n)
{
    if (h && n)
        EVP_DigestUpdate(h->ctx, data, n);
}

void mc_auth_sha256_final(mc_auth_sha256 *h, uint8_t out[32])
{
    unsigned int n = 0;
    EVP_DigestFinal_ex(h->ctx, out, &n);
    mc_auth_sha256_free(h);
}

void mc_auth_sha256_free(mc_auth_sha256 *h)
{
    if (h) {
        EVP_MD_CTX_free(h->ctx);
        free(h);
    }
}

void mc_auth_hex(const uint8_t *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int unhex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* ---- 2. the handshake ---- */

static const char *const code_names[MC_AUTH_CODE_COUNT] = {
    "ok",           "client-no-secret", "server-no-secret", "bad-client-mac",
    "bad-server-mac", "wrong-port",     "malformed",        "bad-version",
    "timeout",      "io",
};

const char *mc_auth_code_name(int code)
{
    if (code < 0)
        code = -code;
    return code < MC_AUTH_CODE_COUNT ? code_names[code] : "?";
}

const char *mc_auth_error_text(int code, bool client_side)
{
    if (code < 0)
        code = -code;
    switch (code) {
    case MC_AUTH_OK:
        return "authenticated";
    case MC_AUTH_CLIENT_NO_SECRET:
        return client_side ? "the server requires the cluster secret and this client has "
                             "none (set MC_AUTH_TOKEN_FILE, --auth_token_file or the "
                             "auth_token setup option)"
                           : "the client did not authenticate: it has no cluster secret "
                             "configured but this server requires one";
    case MC_AUTH_SERVER_NO_SECRET:
        return client_side ? "the server has no cluster secret configured but this client "
                             "has one: configure the same secret on the server "
                             "(--auth_token_file / MC_AUTH_TOKEN_FILE), or none on the "
                             "client"
                           : "the client sent an authentication handshake but this server "
                             "has no cluster secret configured (--auth_token_file / "
                             "MC_AUTH_TOKEN_FILE)";
    case MC_AUTH_BAD_CLIENT_MAC:
        return client_side ? "the server refused this client's cluster secret: the two "
                             "hold different secrets"
                           : "the client's proof of the cluster secret is wrong: it holds "
                             "another secret";
    case MC_AUTH_BAD_SERVER_MAC:
        return client_side ? "the server's proof of the cluster secret is wrong: it holds "
                             "another secret (or it is not the server you meant)"
                           : "the client refused this server's proof of the cluster "
                             "secret: the two hold different secrets";
    case MC_AUTH_WRONG_PORT:
        return "the handshake is for another port (the client connected to a port of "
               "another kind)";
    case MC_AUTH_MALFORMED:
        return "the peer's authentication handshake is malformed";
    case MC_AUTH_BAD_VERSION:
        return "the peer speaks another version of the authentication handshake";
    case MC_AUTH_TIMEOUT:
        return "the authentication handshake did not finish in time";
    case MC_AUTH_IO:
        return "the connection failed during the authentication handshake";
    default:
        return "unknown authentication error";
    }
}

bool mc_auth_looks_like_frame(const uint8_t *buf, size_t len)
{
    size_t n = len < 4 ? len : 4;
    return n > 0 && memcmp(buf, MC_AUTH_MAGIC, n) == 0;
}

int mc_auth_frame_parse(const uint8_t *buf, size_t len, mc_auth_frame *out)
{
    memset(out, 0, sizeof *out);
    size_t m = len < 4 ? len : 4;
    if (memcmp(buf, MC_AUTH_MAGIC, m) != 0)
        return -EBADMSG;
    if (len < 5)
        return 0;
    if (buf[4] != MC_AUTH_VERSION)
        return -EPROTONOSUPPORT;
    if (len < 6)
        return 0;
    uint8_t type = buf[5];
    if (type < MC_AUTH_HELLO || type > MC_AUTH_RESULT)
        return -EBADMSG;
    if (len < MC_AUTH_HEADER)
        return 0;
    size_t blen = ((size_t)buf[6] << 8) | buf[7];
    switch (type) {
    case MC_AUTH_HELLO:
        if (blen < MC_AUTH_NONCE_LEN + 2 || blen > MC_AUTH_NONCE_LEN + 1 + MC_AUTH_LABEL_MAX)
            return -EBADMSG;
        break;
    case MC_AUTH_CHALLENGE:
        if (blen != MC_AUTH_NONCE_LEN + MC_AUTH_MAC_LEN)
            return -EBADMSG;
        break;
    case MC_AUTH_RESPONSE:
        if (blen != MC_AUTH_MAC_LEN)
            return -EBADMSG;
        break;
    default:
        if (blen != 1)
            return -EBADMSG;
    }
    if (len < MC_AUTH_HEADER + blen)
        return 0;
    const uint8_t *b = buf + MC_AUTH_HEADER;
    out->type = type;
    switch (type) {
    case MC_AUTH_HELLO: {
        size_t ll = b[MC_AUTH_NONCE_LEN];
        if (ll == 0 || ll > MC_AUTH_LABEL_MAX || MC_AUTH_NONCE_LEN + 1 + ll != blen)
            return -EBADMSG;
        const char *label = (const char *)b + MC_AUTH_NONCE_LEN + 1;
        for (size_t i = 0; i < ll; i++)
            if (label[i] < 0x21 || label[i] > 0x7e)
                return -EBADMSG;
        out->nonce = b;
        out->label = label;
        out->label_len = ll;
        break;
    }
    case MC_AUTH_CHALLENGE:
        out->nonce = b;
        out->mac = b + MC_AUTH_NONCE_LEN;
        break;
    case MC_AUTH_RESPONSE:
        out->mac = b;
        break;
    default:
        if (b[0] >= MC_AUTH_TIMEOUT) /* local-only codes never travel */
            return -EBADMSG;
        out->code = b[0];
    }
    return (int)(MC_AUTH_HEADER + blen);
}

static size_t put_header(uint8_t *out, uint8_t type, size_t blen)
{
    memcpy(out, MC_AUTH_MAGIC, 4);
    out[4] = MC_AUTH_VERSION;
    out[5] = type;
    out[6] = (uint8_t)(blen >> 8);
    out[7] = (uint8_t)blen;
    return MC_AUTH_HEADER;
}

int mc_auth_result_frame(int code, uint8_t *out, size_t cap)
{
    if (code < 0)
        code = -code;
    if (cap < MC_AUTH_HEADER + 1)
        return -ENOBUFS;
    put_header(out, MC_AUTH_RESULT, 1);
    out[MC_AUTH_HEADER] = (uint8_t)(code < MC_AUTH_TIMEOUT ? code : MC_AUTH_MALFORMED);
    return MC_AUTH_HEADER + 1;
}

enum {
    ST_INIT = 0,
    ST_C_SENT_HELLO,
    ST_C_SENT_RESPONSE,
    ST_S_SENT_CHALLENGE,
    ST_DONE,
    ST_FAILED,
};

int mc_auth_hs_init(mc_auth_hs *hs, const mc_auth_secret *secret, const char *label)
{
    memset(hs, 0, sizeof *hs);
    size_t n = label ? strlen(label) : 0;
    if (!mc_auth_enabled(secret) || n == 0 || n > MC_AUTH_LABEL_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (label[i] < 0x21 || label[i] > 0x7e)
            return -EINVAL;
    hs->secret = secret;
    memcpy(hs->label, label, n + 1);
    return 0;
}

static int role_mac(const mc_auth_hs *hs, const char *role, uint8_t mac[MC_AUTH_MAC_LEN])
{
    static const uint8_t zero = 0;
    const void *parts[] = {role, &zero, hs->label, &zero, hs->client_nonce, hs->server_nonce};
    const size_t lens[] = {strlen(role), 1, strlen(hs->label), 1, MC_AUTH_NONCE_LEN,
                           MC_AUTH_NONCE_LEN};
    return mc_auth_hmac(hs->secret, parts, lens, 6, mac);
}

/* Fails the handshake with code; queues a RESULT telling the peer when tell. */
static int fail_hs(mc_auth_hs *hs, int code, bool tell, uint8_t *out, size_t cap,
                   size_t *out_len)
{
    hs->state = ST_FAILED;
    if (out_len)
        *out_len = 0;
    if (tell && out) {
        int n = mc_auth_result_frame(code, out, cap);
        if (n > 0 && out_len)
            *out_len = (size_t)n;
    }
    return -code;
}

/* Parses exactly one frame of in; a RESULT from the peer, a malformed frame or one of
 * another type fails the handshake (the code to return lands in *rc). */
static bool take_frame(mc_auth_hs *hs, const uint8_t *in, size_t in_len, uint8_t want,
                       mc_auth_frame *f, int *rc, uint8_t *out, size_t cap, size_t *out_len)
{
    int n = in_len ? mc_auth_frame_parse(in, in_len, f) : -EBADMSG;
    if (n == -EPROTONOSUPPORT) {
        *rc = fail_hs(hs, MC_AUTH_BAD_VERSION, true, out, cap, out_len);
        return false;
    }
    if (n <= 0 || (size_t)n != in_len) {
        *rc = fail_hs(hs, MC_AUTH_MALFORMED, true, out, cap, out_len);
        return false;
    }
    if (f->type == MC_AUTH_RESULT && want != MC_AUTH_RESULT) {
        /* the peer refused: do not answer a refusal */
        *rc = fail_hs(hs, f->code ? f->code : MC_AUTH_MALFORMED, false, out, cap, out_len);
        return false;
    }
    if (f->type != want) {
        *rc = fail_hs(hs, MC_AUTH_MALFORMED, true, out, cap, out_len);
        return false;
    }
    return true;
}

int mc_auth_client_hello(mc_auth_hs *hs, uint8_t *out, size_t cap, size_t *out_len)
{
    *out_len = 0;
    size_t ll = strlen(hs->label);
    size_t blen = MC_AUTH_NONCE_LEN + 1 + ll;
    if (hs->state != ST_INIT || !hs->secret)
        return fail_hs(hs, MC_AUTH_MALFORMED, false, NULL, 0, NULL);
    if (cap < MC_AUTH_HEADER + blen)
        return fail_hs(hs, MC_AUTH_IO, false, NULL, 0, NULL);
    if (mc_auth_random(hs->client_nonce, MC_AUTH_NONCE_LEN) != 0)
        return fail_hs(hs, MC_AUTH_IO, false, NULL, 0, NULL);
    size_t o = put_header(out, MC_AUTH_HELLO, blen);
    memcpy(out + o, hs->client_nonce, MC_AUTH_NONCE_LEN);
    o += MC_AUTH_NONCE_LEN;
    out[o++] = (uint8_t)ll;
    memcpy(out + o, hs->label, ll);
    *out_len = o + ll;
    hs->state = ST_C_SENT_HELLO;
    return MC_AUTH_OK;
}

int mc_auth_server_challenge(mc_auth_hs *hs, const uint8_t *in, size_t in_len, uint8_t *out,
                             size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (hs->state != ST_INIT || !hs->secret || cap < MC_AUTH_FRAME_MAX)
        return fail_hs(hs, MC_AUTH_MALFORMED, false, NULL, 0, NULL);
    if (in_len && !mc_auth_looks_like_frame(in, in_len))
        return fail_hs(hs, MC_AUTH_CLIENT_NO_SECRET, true, out, cap, out_len);
    mc_auth_frame f;
    int rc;
    if (!take_frame(hs, in, in_len, MC_AUTH_HELLO, &f, &rc, out, cap, out_len))
        return rc;
    if (f.label_len != strlen(hs->label) || memcmp(f.label, hs->label, f.label_len) != 0)
        return fail_hs(hs, MC_AUTH_WRONG_PORT, true, out, cap, out_len);
    memcpy(hs->client_nonce, f.nonce, MC_AUTH_NONCE_LEN);
    if (mc_auth_random(hs->server_nonce, MC_AUTH_NONCE_LEN) != 0)
        return fail_hs(hs, MC_AUTH_IO, false, NULL, 0, NULL);
    uint8_t mac[MC_AUTH_MAC_LEN];
    if (role_mac(hs, "mooncake-auth-v1 server", mac) != 0)
        return fail_hs(hs, MC_AUTH_IO, false, NULL, 0, NULL);
    size_t o = put_header(out, MC_AUTH_CHALLENGE, MC_AUTH_NONCE_LEN + MC_AUTH_MAC_LEN);
    memcpy(out + o, hs->server_nonce, MC_AUTH_NONCE_LEN);
    memcpy(out + o + MC_AUTH_NONCE_LEN, mac, MC_AUTH_MAC_LEN);
    *out_len = o + MC_AUTH_NONCE_LEN + MC_AUTH_MAC_LEN;
    hs->state = ST_S_SENT_CHALLENGE;
    return MC_AUTH_OK;
}

int mc_auth_client_respond(mc_auth_hs *hs, const uint8_t *in, size_t in_len, uint8_t *out,
                           size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (hs->state != ST_C_SENT_HELLO || cap < MC_AUTH_FRAME_MAX)
        return fail_hs(hs, MC_AUTH_MALFORMED, false, NULL, 0, NULL);
    mc_auth_frame f;
    int rc;
    if (!take_frame(hs, in, in_len, MC_AUTH_CHALLENGE, &f, &rc, out, cap, out_len))
        return rc;
    memcpy(hs->server_nonce, f.nonce, MC_AUTH_NONCE_LEN);
    uint8_t want[MC_AUTH_MAC_LEN];
    if (role_mac(hs, "mooncake-auth-v1 server", want) != 0)
        return fail_hs(hs, MC_AUTH_IO, false, NULL, 0, NULL);
    if (!mc_auth_equal(want, f.mac, MC_AUTH_MAC_LEN))
        return fail_hs(hs, MC_AUTH_BAD_SERVER_MAC, true, out, cap, out_len);
    uint8_t mac[MC_AUTH_MAC_LEN];
    if (role_mac(hs, "mooncake-auth-v1 client", mac) != 0)
        return fail_hs(hs, MC_AUTH_IO, false, NULL, 0, NULL);
    size_t o = put_header(out, MC_AUTH_RESPONSE, MC_AUTH_MAC_LEN);
    memcpy(out + o, mac, MC_AUTH_MAC_LEN);
    *out_len = o + MC_AUTH_MAC_LEN;
    hs->state = ST_C_SENT_RESPONSE;
    return MC_AUTH_OK;
}

int mc_auth_server_verify(mc_auth_hs *hs, const uint8_t *in, size_t in_len, uint8_t *out,
                          size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (hs->state != ST_S_SENT_CHALLENGE || cap < MC_AUTH_FRAME_MAX)
        return fail_hs(hs, MC_AUTH_MALFORMED, false, NULL, 0, NULL);
    mc_auth_frame f;
    int rc;
    if (!take_frame(hs, in, in_len, MC_AUTH_RESPONSE, &f, &rc, out, cap, out_len))
        return rc;
    uint8_t want[MC_AUTH_MAC_LEN];
    if (role_mac(hs, "mooncake-auth-v1 client", want) != 0)
        return fail_hs(hs, MC_AUTH_IO, false, NULL, 0, NULL);
    if (!mc_auth_equal(want, f.mac, MC_AUTH_MAC_LEN))
        return fail_hs(hs, MC_AUTH_BAD_CLIENT_MAC, true, out, cap, out_len);
    int n = mc_auth_result_frame(MC_AUTH_OK, out, cap);
    *out_len = (size_t)n;
    hs->state = ST_DONE;
    return MC_AUTH_OK;
}

int mc_auth_client_finish(mc_auth_hs *hs, const uint8_t *in, size_t in_len)
{
    if (hs->state != ST_C_SENT_RESPONSE)
        return fail_hs(hs, MC_AUTH_MALFORMED, false, NULL, 0, NULL);
    mc_auth_frame f;
    int rc;
    if (!take_frame(hs, in, in_len, MC_AUTH_RESULT, &f, &rc, NULL, 0, NULL))
        return rc;
    if (f.code != MC_AUTH_OK)
        return fail_hs(hs, f.code, false, NULL, 0, NULL);
    hs->state = ST_DONE;
    return MC_AUTH_OK;
}

/* ---- blocking helpers ---- */

static int wait_fd(int fd, short ev, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t left = mc_ms_left(deadline_ms);
        if (left == 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = ev};
        int r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r > 0)
            return 0;
    }
}

static int send_all(int fd, const uint8_t *p, size_t n, uint64_t deadline_ms)
{
    /* poll first, then a non-blocking send: the deadline holds on a blocking fd too */
    while (n) {
        int rc = wait_fd(fd, POLLOUT, deadline_ms);
        if (rc)
            return rc;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        return w < 0 ? -errno : -EPIPE;
    }
    return 0;
}

static int recv_exact(int fd, uint8_t *p, size_t n, uint64_t deadline_ms)
{
    while (n) {
        int rc = wait_fd(fd, POLLIN, deadline_ms);
        if (rc)
            return rc;
        ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0)
            return -ECONNRESET;
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
            continue;
        return -errno;
    }
    return 0;
}

/* Reads one frame: the header, then exactly its body. Returns its length, or a negative
 * mc_auth_code; *bad is set when the bytes are not a frame (the first byte already). */
static int read_frame(int fd, uint8_t *buf, uint64_t deadline_ms, int *io_errno, bool *bad)
{
    *bad = false;
    mc_auth_frame f;
    /* byte by byte through the magic: a peer that speaks another protocol is told at
     * its first byte and nothing more of it is read */
    for (size_t got = 0; got < MC_AUTH_HEADER; got++) {
        int rc = recv_exact(fd, buf + got, 1, deadline_ms);
        if (rc) {
            *io_errno = -rc;
            return rc == -ETIMEDOUT ? -MC_AUTH_TIMEOUT : -MC_AUTH_IO;
        }
        int p = mc_auth_frame_parse(buf, got + 1, &f);
        if (p < 0) {
            *bad = got < 4;
            return p == -EPROTONOSUPPORT ? -MC_AUTH_BAD_VERSION : -MC_AUTH_MALFORMED;
        }
    }
    size_t blen = ((size_t)buf[6] << 8) | buf[7];
    int rc = recv_exact(fd, buf + MC_AUTH_HEADER, blen, deadline_ms);
    if (rc) {
        *io_errno = -rc;
        return rc == -ETIMEDOUT ? -MC_AUTH_TIMEOUT : -MC_AUTH_IO;
    }
    int n = mc_auth_frame_parse(buf, MC_AUTH_HEADER + blen, &f);
    if (n <= 0)
        return -MC_AUTH_MALFORMED;
    return n;
}

static int fd_fail(int code, bool client_side, int io_errno, char *err, size_t errlen)
{
    if (code < 0)
        code = -code;
    if (code == MC_AUTH_IO && io_errno)
        mc_errf(err, errlen, "%s: %s", mc_auth_error_text(code, client_side),
                strerror(io_errno));
    else
        mc_errf(err, errlen, "%s", mc_auth_error_text(code, client_side));
    return -code;
}

int mc_auth_client_fd(int fd, const mc_auth_secret *secret, const char *label,
                      uint64_t deadline_ms, char *err, size_t errlen)
{
    mc_auth_hs hs;
    if (mc_auth_hs_init(&hs, secret, label) != 0)
        return fd_fail(MC_AUTH_MALFORMED, true, 0, err, errlen);
    uint8_t out[MC_AUTH_FRAME_MAX], in[MC_AUTH_FRAME_MAX];
    size_t olen = 0;
    int io = 0;
    bool bad;
    int rc = mc_auth_client_hello(&hs, out, sizeof out, &olen);
    if (rc == 0 && (io = -send_all(fd, out, olen, deadline_ms)) != 0)
        rc = io == ETIMEDOUT ? -MC_AUTH_TIMEOUT : -MC_AUTH_IO;
    int n = rc ? rc : read_frame(fd, in, deadline_ms, &io, &bad);
    if (n < 0)
        return fd_fail(n, true, io, err, errlen);
    rc = mc_auth_client_respond(&hs, in, (size_t)n, out, sizeof out, &olen);
    if (olen) {
        int s = send_all(fd, out, olen, deadline_ms);
        if (rc == 0 && s) {
            io = -s;
            rc = s == -ETIMEDOUT ? -MC_AUTH_TIMEOUT : -MC_AUTH_IO;
        }
    }
    if (rc)
        return fd_fail(rc, true, io, err, errlen);
    n = read_frame(fd, in, deadline_ms, &io, &bad);
    if (n < 0)
        return fd_fail(n, true, io, err, errlen);
    rc = mc_auth_client_finish(&hs, in, (size_t)n);
    OPENSSL_cleanse(&hs, sizeof hs);
    return rc ? fd_fail(rc, true, 0, err, errlen) : MC_AUTH_OK;
}

int mc_auth_server_fd(int fd, const mc_auth_secret *secret, const char *label,
                      uint64_t deadline_ms, char *err, size_t errlen)
{
    mc_auth_hs hs;
    if (mc_auth_hs_init(&hs, secret, label) != 0)
        return fd_fail(MC_AUTH_MALFORMED, false, 0, err, errlen);
    uint8_t out[MC_AUTH_FRAME_MAX], in[MC_AUTH_FRAME_MAX];
    size_t olen = 0;
    int io = 0;
    bool bad = false;
    int n = read_frame(fd, in, deadline_ms, &io, &bad);
    int rc;
    if (n < 0) {
        int code = bad ? MC_AUTH_CLIENT_NO_SECRET : -n;
        if (code != MC_AUTH_IO && code != MC_AUTH_TIMEOUT) {
            int m = mc_auth_result_frame(code, out, sizeof out);
            (void)send_all(fd, out, (size_t)m, mc_deadline_ms(100));
        }
        return fd_fail(code, false, io, err, errlen);
    }
    rc = mc_auth_server_challenge(&hs, in, (size_t)n, out, sizeof out, &olen);
    if (olen) {
        int s = send_all(fd, out, olen, deadline_ms);
        if (rc == 0 && s) {
            io = -s;
            rc = s == -ETIMEDOUT ? -MC_AUTH_TIMEOUT : -MC_AUTH_IO;
        }
    }
    if (rc)
        return fd_fail(rc, false, io, err, errlen);
    n = read_frame(fd, in, deadline_ms, &io, &bad);
    if (n < 0) {
        if (-n == MC_AUTH_MALFORMED || -n == MC_AUTH_BAD_VERSION) {
            int m = mc_auth_result_frame(-n, out, sizeof out);
            (void)send_all(fd, out, (size_t)m, mc_deadline_ms(100));
        }
        return fd_fail(n, false, io, err, errlen);
    }
    rc = mc_auth_server_verify(&hs, in, (size_t)n, out, sizeof out, &olen);
    if (olen) {
        int s = send_all(fd, out, olen, deadline_ms);
        if (rc == 0 && s) {
            io = -s;
            rc = s == -ETIMEDOUT ? -MC_AUTH_TIMEOUT : -MC_AUTH_IO;
        }
    }
    OPENSSL_cleanse(&hs, sizeof hs);
    return rc ? fd_fail(rc, false, io, err, errlen) : MC_AUTH_OK;
}

/* ---- 3. HTTP signatures ---- */

static const char *skip_sp(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

int mc_auth_http_parse(const char *value, size_t len, mc_auth_http_cred *out)
{
    memset(out, 0, sizeof *out);
    const size_t sl = sizeof MC_AUTH_HTTP_SCHEME - 1;
    if (len < sl || memcmp(value, MC_AUTH_HTTP_SCHEME, sl) != 0 ||
        (len > sl && value[sl] != ' ' && value[sl] != '\t'))
        return -ENOENT;
    if (len > MC_AUTH_HTTP_MAX_HEADER)
        return -EBADMSG;
    const char *p = value + sl, *end = value + len;
    bool have_ts = false, have_nonce = false, have_mac = false;
    for (;;) {
        p = skip_sp(p, end);
        const char *eq = p;
        while (eq < end && *eq != '=' && *eq != ',')
            eq++;
        if (eq >= end || *eq != '=')
            return -EBADMSG;
        size_t klen = (size_t)(eq - p);
        const char *v = eq + 1, *ve = v;
        while (ve < end && *ve != ',' && *ve != ' ' && *ve != '\t')
            ve++;
        size_t vlen = (size_t)(ve - v);
        if (klen == 2 && memcmp(p, "ts", 2) == 0) {
            if (have_ts || vlen == 0 || vlen > 16 || (v[0] == '0' && vlen > 1))
                return -EBADMSG;
            uint64_t t = 0;
            for (size_t i = 0; i < vlen; i++) {
                if (v[i] < '0' || v[i] > '9')
                    return -EBADMSG;
                t = t * 10 + (uint64_t)(v[i] - '0');
            }
            memcpy(out->ts, v, vlen);
            out->ts[vlen] = '\0';
            out->ts_ms = t;
            have_ts = true;
        } else if (klen == 5 && memcmp(p, "nonce", 5) == 0) {
            if (have_nonce || vlen != MC_AUTH_HTTP_NONCE_HEX)
                return -EBADMSG;
            for (size_t i = 0; i < vlen; i += 2) {
                int hi = unhex(v[i]), lo = unhex(v[i + 1]);
                if (hi < 0 || lo < 0)
                    return -EBADMSG;
                out->nonce_bytes[i / 2] = (uint8_t)(hi << 4 | lo);
            }
            memcpy(out->nonce, v, vlen);
            out->nonce[vlen] = '\0';
            have_nonce = true;
        } else if (klen == 3 && memcmp(p, "mac", 3) == 0) {
            if (have_mac || vlen != 2 * MC_AUTH_MAC_LEN)
                return -EBADMSG;
            for (size_t i = 0; i < vlen; i += 2) {
                int hi = unhex(v[i]), lo = unhex(v[i + 1]);
                if (hi < 0 || lo < 0)
                    return -EBADMSG;
                out->mac[i / 2] = (uint8_t)(hi << 4 | lo);
            }
            have_mac = true;
        } else {
            return -EBADMSG;
        }
        p = skip_sp(ve, end);
        if (p == end)
            break;
        if (*p != ',')
            return -EBADMSG;
        p++;
    }
    return have_ts && have_nonce && have_mac ? 0 : -EBADMSG;
}

int mc_auth_http_mac(const mc_auth_secret *s, const char *method, const char *target,
                     const char *ts, const char *nonce, const uint8_t body_sha256[32],
                     uint8_t mac[MC_AUTH_MAC_LEN])
{
    char bh[65];
    mc_auth_hex(body_sha256, 32, bh);
    static const char nl = '\n';
    const char *head = "MC-HMAC-v1\n";
    const void *parts[] = {head, method, &nl, target, &nl, ts, &nl, nonce, &nl, bh};
    const size_t lens[] = {strlen(head), strlen(method), 1, strlen(target), 1, strlen(ts),
                           1, strlen(nonce), 1, 64};
    return mc_auth_hmac(s, parts, lens, 10, mac);
}

int mc_auth_http_verify(const mc_auth_secret *s, const mc_auth_http_cred *cr,
                        const char *method, const char *target, const uint8_t body_sha256[32])
{
    uint8_t want[MC_AUTH_MAC_LEN];
    if (mc_auth_http_mac(s, method, target, cr->ts, cr->nonce, body_sha256, want) != 0)
        return -EIO;
    return mc_auth_equal(want, cr->mac, MC_AUTH_MAC_LEN) ? 0 : -EACCES;
}

int mc_auth_http_sign(const mc_auth_secret *s, const char *method, const char *target,
                      const void *body, size_t len, uint64_t now_ms, char *out, size_t cap)
{
    if (!mc_auth_enabled(s) || cap < MC_AUTH_HTTP_MAX_HEADER)
        return -EINVAL;
    uint8_t nb[MC_AUTH_HTTP_NONCE_HEX / 2];
    int rc = mc_auth_random(nb, sizeof nb);
    if (rc)
        return rc;
    char nonce[MC_AUTH_HTTP_NONCE_HEX + 1], ts[24];
    mc_auth_hex(nb, sizeof nb, nonce);
    snprintf(ts, sizeof ts, "%llu", (unsigned long long)now_ms);
    uint8_t bh[32];
    mc_auth_sha256 *h = mc_auth_sha256_new();
    if (!h)
        return -ENOMEM;
    mc_auth_sha256_update(h, body, len);
    mc_auth_sha256_final(h, bh);
    uint8_t mac[MC_AUTH_MAC_LEN];
    rc = mc_auth_http_mac(s, method, target, ts, nonce, bh, mac);
    if (rc)
        return rc;
    char mh[2 * MC_AUTH_MAC_LEN + 1];
    mc_auth_hex(mac, sizeof mac, mh);
    snprintf(out, cap, MC_AUTH_HTTP_SCHEME " ts=%s,nonce=%s,mac=%s", ts, nonce, mh);
    return 0;
}

char *mc_auth_http_target(const char *url)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    p += strcspn(p, "/?#");
    size_t n = strcspn(p, "#");
    if (n == 0)
        return mc_xstrdup("/");
    if (*p == '?') {
        char *t = mc_xmalloc(n + 2);
        t[0] = '/';
        memcpy(t + 1, p, n);
        t[n + 1] = '\0';
        return t;
    }
    return mc_xstrndup(p, n);
}

/* ---- 4. the replay cache ---- */

#define REPLAY_PROBES 64

typedef struct replay_slot {
    uint8_t nonce[16];
    uint64_t expiry_ms; /* 0: never used */
} replay_slot;

struct mc_auth_replay {
    pthread_mutex_t lock;
    size_t mask;
    uint64_t seed;
    replay_slot *slots; /* lock */
};

mc_auth_replay *mc_auth_replay_create(size_t capacity)
{
    if (!capacity)
        capacity = MC_AUTH_REPLAY_DEFAULT;
    size_t n = REPLAY_PROBES;
    while (n < capacity)
        n <<= 1;
    mc_auth_replay *r = mc_xcalloc(1, sizeof *r);
    r->slots = mc_xcalloc(n, sizeof *r->slots);
    r->mask = n - 1;
    if (mc_auth_random(&r->seed, sizeof r->seed) != 0)
        r->seed = mc_now_ns();
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

void mc_auth_replay_destroy(mc_auth_replay *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r->slots);
    free(r);
}

int mc_auth_replay_check(mc_auth_replay *r, const uint8_t nonce[16], uint64_t expiry_ms,
                         uint64_t now_ms)
{
    uint64_t h;
    memcpy(&h, nonce, sizeof h);
    h ^= r->seed;
    h *= 0x9E3779B97F4A7C15ull; /* the nonces are random; this only spreads the seed */
    size_t start = (size_t)(h >> 17) & r->mask;
    pthread_mutex_lock(&r->lock);
    replay_slot *free_slot = NULL;
    for (size_t i = 0; i < REPLAY_PROBES; i++) {
        replay_slot *s = &r->slots[(start + i) & r->mask];
        bool live = s->expiry_ms && s->expiry_ms > now_ms;
        if (live && memcmp(s->nonce, nonce, 16) == 0) {
            pthread_mutex_unlock(&r->lock);
            return -EEXIST;
        }
        if (!live && !free_slot)
            free_slot = s;
    }
    if (!free_slot) {
        pthread_mutex_unlock(&r->lock);
        return -ENOSPC;
    }
    memcpy(free_slot->nonce, nonce, 16);
    free_slot->expiry_ms = expiry_ms > now_ms ? expiry_ms : now_ms + 1;
    pthread_mutex_unlock(&r->lock);
    return 0;
}
