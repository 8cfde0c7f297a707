/* peerauth.c: the cluster secret on the transfer engine's ports (data, handshake,
 * same-host socket) and the per-address connection limit of the data port (issue 11,
 * docs/security.md "Transfer engine data and handshake ports").
 *
 * The handshake itself (frames, MACs, nonces) is common/auth.h's; this file drives its
 * step functions from loop threads without ever blocking: a server reads exactly the
 * bytes of the frame it waits for (so nothing of the port's own protocol is consumed
 * before the peer has proved it holds the secret), and its two answers (CHALLENGE, 72
 * bytes; RESULT, 9) go out with one non-blocking send each on a connection that has
 * sent nothing else yet, so they always fit the socket's send buffer (a short send is
 * an I/O failure). Every refusal is counted (mc_te_stats.auth_refused) and logged at
 * most once per 10 s per engine, naming the port, the peer and the reason from this
 * side's point of view (mc_auth_error_text). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "transfer/internal.h"

#define TE_AUTH_LOG_EVERY_MS 10000

bool mc__te_log_limited(mc_te *te)
{
    uint64_t now = mc_now_ms();
    uint64_t last = atomic_load_explicit(&te->auth_log_ms, memory_order_relaxed);
    if (last && now - last < TE_AUTH_LOG_EVERY_MS)
        return false;
    return atomic_compare_exchange_strong(&te->auth_log_ms, &last, now ? now : 1);
}

void mc__te_peer_addr(int fd, char *buf, size_t len)
{
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    snprintf(buf, len, "?");
    if (getpeername(fd, (struct sockaddr *)&sa, &sl) != 0)
        return;
    char hs[INET6_ADDRSTRLEN] = "?";
    if (sa.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&sa;
        inet_ntop(AF_INET, &a->sin_addr, hs, sizeof hs);
        snprintf(buf, len, "%s:%u", hs, ntohs(a->sin_port));
    } else if (sa.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
        inet_ntop(AF_INET6, &a->sin6_addr, hs, sizeof hs);
        snprintf(buf, len, "[%s]:%u", hs, ntohs(a->sin6_port));
    } else if (sa.ss_family == AF_UNIX) {
        snprintf(buf, len, "a local process");
    }
}

/* ---- server side ---- */

te_auth_srv *mc__te_auth_srv_new(te_io *io, const char *label, const char *what)
{
    mc_te *te = io->te;
    if (!te->auth)
        return NULL;
    te_auth_srv *a = mc_xcalloc(1, sizeof *a);
    MC_ASSERT(mc__te_authstep_server_init(&a->st, te->auth, label) == 0);
    a->what = what;
    a->deadline_ms = mc_deadline_ms(te->auth_timeout_ms);
    io->n_authing++;
    return a;
}

void mc__te_auth_srv_free(te_io *io, te_auth_srv *a)
{
    if (!a)
        return;
    io->n_authing--;
    memset(a, 0, sizeof *a);
    free(a);
}

static void refusal(mc_te *te, const char *what, int fd, int code)
{
    atomic_fetch_add_explicit(&te->st.auth_refused, 1, memory_order_relaxed);
    if (!mc__te_log_limited(te))
        return;
    char peer[INET6_ADDRSTRLEN + 16];
    mc__te_peer_addr(fd, peer, sizeof peer);
    mc_log(MC_LOG_WARN, TE_TAG,
           "transfer engine %s: refused a connection from %s (%s): %s (further refusals "
           "within 10 s are only counted: mc_te_stats.auth_refused)",
           what, peer, mc_auth_code_name(code), mc_auth_error_text(code, false));
}

/* One non-blocking send of a short frame; false when it did not all go out. */
static bool send_frame(int fd, const uint8_t *p, size_t n)
{
    return n == 0 || send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n;
}

/* Reads at most what the step wants: 1 (bytes added), 0 (none now), -1 (EOF / error). */
static int read_some(te_authstep *st, int fd)
{
    ssize_t k = recv(fd, st->buf + st->len, mc__te_auth_want(st), MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (k <= 0)
        return -1;
    st->len += (size_t)k;
    return 1;
}

int mc__te_auth_srv_io(mc_te *te, te_auth_srv *a, int fd)
{
    for (;;) {
        int r = read_some(&a->st, fd);
        if (r == 0)
            return 0;
        if (r < 0) {
            refusal(te, a->what, fd, MC_AUTH_IO);
            return -MC_AUTH_IO;
        }
        uint8_t out[MC_AUTH_FRAME_MAX];
        size_t olen = 0;
        int rc = mc__te_authstep_server(&a->st, out, sizeof out, &olen);
        if (rc < 0) { /* counted before the peer can read the RESULT */
            refusal(te, a->what, fd, -rc);
            (void)send_frame(fd, out, olen);
            return rc;
        }
        if (!send_frame(fd, out, olen)) {
            refusal(te, a->what, fd, MC_AUTH_IO);
            return -MC_AUTH_IO;
        }
        if (rc == 1)
            return 1;
    }
}

bool mc__te_auth_expired(mc_te *te, te_auth_srv *a, int fd, uint64_t now_ms)
{
    if (now_ms < a->deadline_ms)
        return false;
    refusal(te, a->what, fd, MC_AUTH_TIMEOUT);
    return true;
}

void mc__te_auth_answer_open(mc_te *te, int fd, const char *what)
{
    uint8_t out[MC_AUTH_HEADER + 1];
    int n = mc_auth_result_frame(MC_AUTH_SERVER_NO_SECRET, out, sizeof out);
    refusal(te, what, fd, MC_AUTH_SERVER_NO_SECRET);
    if (n > 0)
        (void)send_frame(fd, out, (size_t)n);
}

/* ---- client side ---- */

void mc__te_auth_client_log(mc_te *te, const char *what, const char *peer, int code)
{
    atomic_fetch_add_explicit(&te->st.auth_failed, 1, memory_order_relaxed);
    if (code < 0)
        code = -code;
    if (!mc__te_log_limited(te))
        return;
    mc_log(MC_LOG_ERROR, TE_TAG,
           "transfer engine: connecting to %s of peer %s: %s (%s; further failures within "
           "10 s are only counted: mc_te_stats.auth_failed)",
           what, peer, mc_auth_error_text(code, true), mc_auth_code_name(code));
}

int mc__te_auth_cli_start(mc_te *te, te_auth_cli *a, int fd, const char *label)
{
    uint8_t out[MC_AUTH_FRAME_MAX];
    size_t olen = 0;
    int rc = mc__te_authstep_client_init(&a->st, te->auth, label, out, sizeof out, &olen);
    if (rc == 0 && !send_frame(fd, out, olen))
        rc = -MC_AUTH_IO;
    return rc;
}

int mc__te_auth_cli_io(mc_te *te, te_auth_cli *a, int fd, const char *peer)
{
    for (;;) {
        int r = read_some(&a->st, fd);
        if (r == 0)
            return 0;
        int rc = -MC_AUTH_IO;
        if (r > 0) {
            uint8_t out[MC_AUTH_FRAME_MAX];
            size_t olen = 0;
            rc = mc__te_authstep_client(&a->st, out, sizeof out, &olen);
            if (!send_frame(fd, out, olen) && rc >= 0)
                rc = -MC_AUTH_IO;
            if (rc == 1)
                return 1;
            if (rc == 0)
                continue;
        }
        mc__te_auth_client_log(te, "the data port", peer, rc);
        return rc;
    }
}

/* ---- connections per source address ---- */

typedef struct te_ipent {
    struct te_ipent *next;
    te_ipkey k;
    uint32_t n;
} te_ipent;

void mc__te_iplimit_init(te_iplimit *l)
{
    pthread_mutex_init(&l->lock, NULL);
    l->buckets = mc_xcalloc(TE_IP_BUCKETS, sizeof *l->buckets);
}

void mc__te_iplimit_free(te_iplimit *l)
{
    if (!l->buckets)
        return;
    for (size_t i = 0; i < TE_IP_BUCKETS; i++) {
        te_ipent *e = l->buckets[i];
        while (e) {
            te_ipent *next = e->next;
            free(e);
            e = next;
        }
    }
    free(l->buckets);
    l->buckets = NULL;
    pthread_mutex_destroy(&l->lock);
}

static size_t ip_hash(const te_ipkey *k)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof k->a; i++)
        h = (h ^ k->a[i]) * 1099511628211ull;
    return (size_t)(h % TE_IP_BUCKETS);
}

static void key_of(int fd, te_ipkey *k)
{
    memset(k, 0, sizeof *k);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getpeername(fd, (struct sockaddr *)&sa, &sl) != 0)
        return; /* unknown: all such share one key */
    if (sa.ss_family == AF_INET) {
        k->a[10] = k->a[11] = 0xff;
        memcpy(k->a + 12, &((struct sockaddr_in *)&sa)->sin_addr, 4);
    } else if (sa.ss_family == AF_INET6) {
        memcpy(k->a, &((struct sockaddr_in6 *)&sa)->sin6_addr, 16);
    }
}

bool mc__te_iplimit_acquire(te_iplimit *l, int fd, uint32_t max, te_ipkey *k)
{
    key_of(fd, k);
    size_t b = ip_hash(k);
    pthread_mutex_lock(&l->lock);
    te_ipent *e = l->buckets[b];
    while (e && memcmp(&e->k, k, sizeof *k) != 0)
        e = e->next;
    if (e && e->n >= max) {
        pthread_mutex_unlock(&l->lock);
        return false;
    }
    if (!e) {
        e = mc_xcalloc(1, sizeof *e);
        e->k = *k;
        e->next = l->buckets[b];
        l->buckets[b] = e;
    }
    e->n++;
    pthread_mutex_unlock(&l->lock);
    return true;
}

void mc__te_iplimit_release(te_iplimit *l, const te_ipkey *k)
{
    size_t b = ip_hash(k);
    pthread_mutex_lock(&l->lock);
    te_ipent **pp = &l->buckets[b];
    while (*pp && memcmp(&(*pp)->k, k, sizeof *k) != 0)
        pp = &(*pp)->next;
    te_ipent *e = *pp;
    if (e && --e->n == 0) {
        *pp = e->next;
        free(e);
    }
    pthread_mutex_unlock(&l->lock);
}

/* ---- options ---- */

int mc__te_parse_gids(const char *text, uint32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!text)
        return 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        if (*p < '0' || *p > '9')
            goto bad;
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || v > 0xfffffffeul)
            goto bad;
        *out = mc_xrealloc(*out, (*n + 1) * sizeof **out);
        (*out)[(*n)++] = (uint32_t)v;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return 0;
bad:
    free(*out);
    *out = NULL;
    *n = 0;
    return -EINVAL;
}
