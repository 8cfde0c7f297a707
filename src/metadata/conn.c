/* conn.c: metadata connection strings (see include/mooncake/metadata.h, §1).
 * Classification as upstream's extractProtocolFromConnString (transfer_metadata.cpp):
 * the scheme before "://", "etcd" when there is none; P2PHANDSHAKE matched exactly.
 * Redis URLs take the usual [[user]:password@]host[:port][/db] on top of upstream's
 * "redis://host:port" (upstream reads the password and db from MC_REDIS_PASSWORD and
 * MC_REDIS_DB_INDEX, which the Redis backend still honours). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"
#include "net/sock.h"

/* fail: the reason into err, and MC_INVALID_PARAMS */
#define fail(err, errlen, ...) (mc_errf((err), (errlen), __VA_ARGS__), MC_INVALID_PARAMS)

const char *mc_metadata_kind_name(mc_metadata_kind kind)
{
    switch (kind) {
    case MC_METADATA_P2P: return "p2p";
    case MC_METADATA_HTTP: return "http";
    case MC_METADATA_ETCD: return "etcd";
    case MC_METADATA_REDIS: return "redis";
    }
    return "?";
}

/* Parses "host[:port]" or "[v6]:port" from s[0..len) into ep; port defaults to def.
 * The one host:port parser (net/sock.h), strict about hosts and IPv6 brackets. */
static int parse_hostport(const char *s, size_t len, uint16_t def, mc_metadata_endpoint *ep,
                          char *err, size_t errlen)
{
    int port;
    if (mc_sock_split_hostport(s, len, MC_HOSTPORT_CHECK_HOST, ep->host, sizeof ep->host,
                               &port, err, errlen) < 0)
        return MC_INVALID_PARAMS;
    ep->port = port < 0 ? def : (uint16_t)port;
    return MC_OK;
}

/* Appends "h:p" (IPv6 in brackets) of ep to out->url after sep; cut at the field. */
static void url_add(mc_metadata_conn *out, const char *sep, const mc_metadata_endpoint *ep)
{
    size_t used = strlen(out->url);
    bool v6 = strchr(ep->host, ':') != NULL;
    snprintf(out->url + used, sizeof out->url - used, "%s%s%s%s:%u", sep, v6 ? "[" : "",
             ep->host, v6 ? "]" : "", (unsigned)ep->port);
}

/* The etcd list: host[:port] items separated by ',' or ';'. */
static int parse_etcd_list(const char *s, mc_metadata_conn *out, char *err, size_t errlen)
{
    const char *p = s;
    snprintf(out->url, sizeof out->url, "etcd://");
    for (;;) {
        size_t len = strcspn(p, ",;");
        const char *item_end = p + len;
        if (out->n_endpoints == MC_METADATA_MAX_ENDPOINTS)
            return fail(err, errlen, "more than %d endpoints", MC_METADATA_MAX_ENDPOINTS);
        if (memchr(p, '@', len))
            return fail(err, errlen,
                        "credentials in etcd endpoint '%.*s' are not supported (etcd "
                        "authentication is not implemented)", (int)(len > 64 ? 64 : len), p);
        if (memchr(p, '/', len) || memchr(p, '?', len))
            return fail(err, errlen,
                        "etcd endpoint '%.*s' has a path: etcd endpoints are host:port "
                        "(for the HTTP metadata server write http://HOST:PORT/metadata)",
                        (int)(len > 64 ? 64 : len), p);
        mc_metadata_endpoint *ep = &out->endpoints[out->n_endpoints];
        int rc = parse_hostport(p, len, 2379, ep, err, errlen);
        if (rc)
            return rc;
        url_add(out, out->n_endpoints ? "," : "", ep);
        out->n_endpoints++;
        if (!*item_end)
            return MC_OK;
        p = item_end + 1;
    }
}

/* Percent-decodes s[0..len) into out (outlen bytes with the NUL). */
static int pct_decode(const char *s, size_t len, char *out, size_t outlen, const char *what,
                      char *err, size_t errlen)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            unsigned v = 0;
            for (int k = 1; k <= 2; k++) {
                char h = i + (size_t)k < len ? s[i + (size_t)k] : '\0';
                int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (d < 0)
                    return fail(err, errlen, "bad %%-escape in the redis %s", what);
                v = v * 16 + (unsigned)d;
            }
            if (v == 0)
                return fail(err, errlen, "%%00 in the redis %s", what);
            c = (unsigned char)v;
            i += 2;
        }
        if (o + 1 >= outlen)
            return fail(err, errlen, "redis %s longer than %zu bytes", what, outlen - 1);
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return MC_OK;
}

/* "redis://" + rest: [[user]:password@]host[:port][/db] */
static int parse_redis(const char *rest, mc_metadata_conn *out, char *err, size_t errlen)
{
    size_t alen = strcspn(rest, "/?#");
    if (rest[alen] == '?' || rest[alen] == '#' || strpbrk(rest + alen, "?#"))
        return fail(err, errlen, "redis connection string takes no query or fragment");
    const char *auth = rest, *hp = rest;
    const char *at = NULL;
    for (const char *q = rest; q < rest + alen; q++)
        if (*q == '@')
            at = q;
    if (at) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (!colon)
            return fail(err, errlen, "redis credentials need a ':' "
                                     "(redis://:PASSWORD@host or redis://USER:PASSWORD@host)");
        int rc = pct_decode(auth, (size_t)(colon - auth), out->username, sizeof out->username,
                            "user name", err, errlen);
        if (rc)
            return rc;
        rc = pct_decode(colon + 1, (size_t)(at - colon - 1), out->password,
                        sizeof out->password, "password", err, errlen);
        if (rc)
            return rc;
        if (!out->password[0])
            return fail(err, errlen, "empty redis password after ':'");
        hp = at + 1;
    }
    size_t hlen = (size_t)(rest + alen - hp);
    if (memchr(hp, ',', hlen) || memchr(hp, ';', hlen))
        return fail(err, errlen, "only one redis endpoint is allowed");
    int rc = parse_hostport(hp, hlen, 6379, &out->endpoints[0], err, errlen);
    if (rc)
        return rc;
    out->n_endpoints = 1;
    const char *path = rest + alen;
    if (*path == '/' && path[1]) {
        const char *d = path + 1;
        size_t dl = strlen(d);
        long long v = 0;
        if (dl > 10 || strspn(d, "0123456789") != dl)
            return fail(err, errlen,
                        "redis db '%.*s' is not a decimal index (redis://HOST:PORT/DB)",
                        (int)(dl > 16 ? 16 : dl), d);
        for (size_t i = 0; i < dl; i++)
            v = v * 10 + (d[i] - '0');
        if (v > INT32_MAX)
            return fail(err, errlen, "redis db %lld is larger than %d", v, INT32_MAX);
        out->db = (int)v;
    }
    snprintf(out->url, sizeof out->url, "redis://");
    url_add(out, "", &out->endpoints[0]);
    if (out->db >= 0) {
        size_t used = strlen(out->url);
        snprintf(out->url + used, sizeof out->url - used, "/%d", out->db);
    }
    return MC_OK;
}

int mc_metadata_parse_conn(const char *conn, mc_metadata_conn *out, char *err, size_t errlen)
{
    if (!out)
        return fail(err, errlen, "no output");
    memset(out, 0, sizeof *out);
    out->db = -1;
    if (!conn || !*conn)
        return fail(err, errlen, "empty metadata connection string");
    for (const char *c = conn; *c; c++) {
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return fail(err, errlen,
                        "metadata connection string contains whitespace or a control "
                        "character");
    }
    if (strcmp(conn, MC_METADATA_P2PHANDSHAKE) == 0) {
        out->kind = MC_METADATA_P2P;
        return MC_OK;
    }
    const char *sep = strstr(conn, "://");
    if (!sep) {
        out->kind = MC_METADATA_ETCD;
        return parse_etcd_list(conn, out, err, errlen);
    }
    size_t slen = (size_t)(sep - conn);
    const char *rest = sep + 3;
    if (slen == 4 && strncmp(conn, "etcd", 4) == 0) {
        out->kind = MC_METADATA_ETCD;
        return parse_etcd_list(rest, out, err, errlen);
    }
    if (slen == 5 && strncmp(conn, "redis", 5) == 0) {
        out->kind = MC_METADATA_REDIS;
        return parse_redis(rest, out, err, errlen);
    }
    if ((slen == 4 && strncmp(conn, "http", 4) == 0) ||
        (slen == 5 && strncmp(conn, "https", 5) == 0)) {
        out->kind = MC_METADATA_HTTP;
        size_t ulen = strlen(conn);
        if (ulen >= MC_METADATA_MAX_URL)
            return fail(err, errlen, "URL longer than %d bytes", MC_METADATA_MAX_URL - 1);
        size_t alen = strcspn(rest, "/?#");
        const char *at = memchr(rest, '@', alen);
        if (at)
            return fail(err, errlen, "credentials in the metadata URL are not supported");
        if (rest[alen] == '#')
            return fail(err, errlen, "fragment in the metadata URL");
        int rc = parse_hostport(rest, alen, slen == 4 ? 80 : 443, &out->endpoints[0], err,
                                errlen);
        if (rc)
            return rc;
        out->n_endpoints = 1;
        if (strchr(rest + alen, '#'))
            return fail(err, errlen, "fragment in the metadata URL");
        memcpy(out->url, conn, ulen + 1);
        return MC_OK;
    }
    return fail(err, errlen, "unknown metadata scheme '%.*s' (expected P2PHANDSHAKE, http://, "
                             "etcd:// or redis://)", (int)(slen > 32 ? 32 : slen), conn);
}
