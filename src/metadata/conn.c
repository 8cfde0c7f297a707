/* conn.c: metadata connection strings (see include/mooncake/metadata.h, §1).
 * Classification as upstream's extractProtocolFromConnString (transfer_metadata.cpp):
 * the scheme before "://", "etcd" when there is none; P2PHANDSHAKE matched exactly. */
#include <stdarg.h>
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

static int parse_list(const char *s, uint16_t def, bool allow_many, mc_metadata_conn *out,
                      char *err, size_t errlen)
{
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (comma && !allow_many)
            return fail(err, errlen, "only one endpoint is allowed here");
        if (out->n_endpoints == MC_METADATA_MAX_ENDPOINTS)
            return fail(err, errlen, "more than %d endpoints", MC_METADATA_MAX_ENDPOINTS);
        int rc = parse_hostport(p, len, def, &out->endpoints[out->n_endpoints], err, errlen);
        if (rc)
            return rc;
        out->n_endpoints++;
        if (!comma)
            return MC_OK;
        p = comma + 1;
    }
}

int mc_metadata_parse_conn(const char *conn, mc_metadata_conn *out, char *err, size_t errlen)
{
    if (!out)
        return fail(err, errlen, "no output");
    memset(out, 0, sizeof *out);
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
        return parse_list(conn, 2379, true, out, err, errlen);
    }
    size_t slen = (size_t)(sep - conn);
    const char *rest = sep + 3;
    if (slen == 4 && strncmp(conn, "etcd", 4) == 0) {
        out->kind = MC_METADATA_ETCD;
        return parse_list(rest, 2379, true, out, err, errlen);
    }
    if (slen == 5 && strncmp(conn, "redis", 5) == 0) {
        out->kind = MC_METADATA_REDIS;
        /* A trailing "/" or "/<db>" is not part of upstream's form; refuse it clearly. */
        if (strchr(rest, '/'))
            return fail(err, errlen, "redis connection string takes no path: '%s' "
                                     "(use MC_REDIS_DB_INDEX)", conn);
        return parse_list(rest, 6379, false, out, err, errlen);
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
