/* metadata.c: the generic client layer over the backend vtable (backend.h), the key
 * helpers and the typed segment/rpc_meta helpers. See include/mooncake/metadata.h §2-3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/env.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG "metadata"

/* ---- keys ------------------------------------------------------------------------ */

char *mc_metadata_key_prefix(const char *cluster_id)
{
    if (!cluster_id)
        cluster_id = mc_env_str("MC_METADATA_CLUSTER_ID");
    if (!cluster_id)
        cluster_id = "";
    size_t cl = strlen(cluster_id);
    bool slash = cl && cluster_id[cl - 1] != '/';
    size_t n = strlen("mooncake/") + cl + (slash ? 1 : 0) + 1;
    char *p = mc_xmalloc(n);
    snprintf(p, n, "mooncake/%s%s", cluster_id, slash ? "/" : "");
    return p;
}

static char *join_key(const char *prefix, const char *mid, const char *name)
{
    if (!name || !*name)
        return NULL;
    size_t n = strlen(prefix) + strlen(mid) + strlen(name);
    if (n > MC_METADATA_MAX_KEY)
        return NULL;
    char *k = mc_xmalloc(n + 1);
    snprintf(k, n + 1, "%s%s%s", prefix, mid, name);
    return k;
}

/* upstream getFullMetadataKey: names holding a '/' are already paths under the prefix. */
static char *segment_key(const char *prefix, const char *segment)
{
    return join_key(prefix, segment && strchr(segment, '/') ? "" : "ram/", segment);
}

char *mc_metadata_segment_key(const char *cluster_id, const char *segment)
{
    char *prefix = mc_metadata_key_prefix(cluster_id);
    char *k = segment_key(prefix, segment);
    free(prefix);
    return k;
}

char *mc_metadata_rpc_meta_key(const char *cluster_id, const char *server)
{
    char *prefix = mc_metadata_key_prefix(cluster_id);
    char *k = join_key(prefix, "rpc_meta/", server);
    free(prefix);
    return k;
}

/* ---- client ---------------------------------------------------------------------- */

typedef int (*open_fn)(mc_metadata *md);

/* One row per backend kind; NULL = recognised but not built. */
static const open_fn factories[] = {
    [MC_METADATA_P2P] = mc__metadata_p2p_open,
    [MC_METADATA_HTTP] = mc__metadata_http_open,
    [MC_METADATA_ETCD] = mc__metadata_etcd_open,
#ifdef MC_HAVE_HIREDIS
    [MC_METADATA_REDIS] = mc__metadata_redis_open,
#else
    [MC_METADATA_REDIS] = NULL,
#endif
};

int mc_metadata_create(const char *conn, mc_metadata **out)
{
    return mc_metadata_create_opts(conn, NULL, out);
}

/* conn for a message: a Redis URL's userinfo (its password) written as "***". */
static const char *redacted(const char *conn, char *buf, size_t len)
{
    const char *at = conn ? strchr(conn, '@') : NULL;
    if (!at || strncmp(conn, "redis://", 8) != 0)
        return conn ? conn : "(null)";
    snprintf(buf, len, "redis://***%s", at);
    return buf;
}

int mc_metadata_create_opts(const char *conn, const mc_metadata_opts *opts, mc_metadata **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    *out = NULL;
    mc_metadata *md = mc_xcalloc(1, sizeof *md);
    char err[256] = "";
    int rc = mc_metadata_parse_conn(conn, &md->conn, err, sizeof err);
    if (rc != MC_OK) {
        char shown[MC_METADATA_MAX_URL];
        mc_log(MC_LOG_ERROR, TAG, "bad metadata server '%s': %s",
               redacted(conn, shown, sizeof shown), err);
        free(md);
        return rc;
    }
    open_fn open = factories[md->conn.kind];
    if (!open) {
        mc_log(MC_LOG_ERROR, TAG,
               "metadata server '%s': the %s backend is not supported in this build "
               "(built without hiredis; use P2PHANDSHAKE, etcd:// or "
               "http://host:port/metadata)",
               md->conn.url, mc_metadata_kind_name(md->conn.kind));
        free(md);
        return MC_NOT_SUPPORTED;
    }
    if (opts)
        md->opts = *opts;
    if (!md->opts.timeout_ms)
        md->opts.timeout_ms = MC_METADATA_DEFAULT_TIMEOUT_MS;
    if (!md->opts.connect_timeout_ms)
        md->opts.connect_timeout_ms = MC_METADATA_DEFAULT_CONNECT_TIMEOUT_MS;
    if (!md->opts.max_value_bytes)
        md->opts.max_value_bytes = MC_METADATA_DEFAULT_MAX_VALUE;
    md->prefix = mc_metadata_key_prefix(opts ? opts->cluster_id : NULL);
    md->opts.cluster_id = NULL;
    rc = open(md);
    if (rc != MC_OK) {
        free(md->prefix);
        free(md);
        return rc;
    }
    *out = md;
    return MC_OK;
}

void mc_metadata_destroy(mc_metadata *md)
{
    if (!md)
        return;
    if (md->ops && md->ops->destroy)
        md->ops->destroy(md);
    free(md->prefix);
    free(md);
}

mc_metadata_kind mc_metadata_kind_of(const mc_metadata *md)
{
    return md->conn.kind;
}

bool mc_metadata_is_p2p(const mc_metadata *md)
{
    return md && md->conn.kind == MC_METADATA_P2P;
}

const mc_metadata_conn *mc_metadata_conn_of(const mc_metadata *md)
{
    return &md->conn;
}

const char *mc_metadata_prefix(const mc_metadata *md)
{
    return md->prefix;
}

static bool key_ok(const char *key)
{
    return key && *key && strnlen(key, MC_METADATA_MAX_KEY + 1) <= MC_METADATA_MAX_KEY;
}

int mc_metadata_get(mc_metadata *md, const char *key, char **value, size_t *len)
{
    if (!md || !key_ok(key) || !value || !len)
        return MC_INVALID_PARAMS;
    return md->ops->get(md, key, value, len);
}

int mc_metadata_put(mc_metadata *md, const char *key, const void *value, size_t len)
{
    if (!md || !key_ok(key) || (!value && len))
        return MC_INVALID_PARAMS;
    if (len > md->opts.max_value_bytes)
        return MC_BUFFER_OVERFLOW;
    return md->ops->put(md, key, value, len);
}

int mc_metadata_delete(mc_metadata *md, const char *key)
{
    if (!md || !key_ok(key))
        return MC_INVALID_PARAMS;
    return md->ops->del(md, key);
}

/* ---- typed helpers --------------------------------------------------------------- */

int mc_metadata_put_segment(mc_metadata *md, const mc_segment_desc *desc)
{
    if (!md || !desc || !desc->name)
        return MC_INVALID_PARAMS;
    if (mc_metadata_is_p2p(md))
        return MC_OK;
    char *key = segment_key(md->prefix, desc->name);
    if (!key)
        return MC_INVALID_PARAMS;
    char *json;
    size_t len;
    int rc = mc_segment_desc_encode(desc, &json, &len);
    if (rc == MC_OK) {
        rc = mc_metadata_put(md, key, json, len);
        free(json);
    }
    free(key);
    return rc;
}

/* Reads key (owned: freed here; NULL -> MC_INVALID_PARAMS) and decodes it into seg, or
 * into meta when seg is NULL. A value that does not decode is logged and its decode
 * error returned. */
static int get_decoded(mc_metadata *md, char *key, mc_segment_desc *seg, mc_rpc_meta *meta)
{
    if (!key)
        return MC_INVALID_PARAMS;
    char *json;
    size_t len;
    int rc = mc_metadata_get(md, key, &json, &len);
    if (rc == MC_OK) {
        char err[256] = "";
        rc = seg ? mc_segment_desc_decode(json, len, seg, err, sizeof err)
                 : mc_rpc_meta_decode(json, len, meta, err, sizeof err);
        if (rc != MC_OK)
            mc_log(MC_LOG_WARN, TAG, "%s %s does not decode: %s",
                   seg ? "segment descriptor" : "rpc_meta", key, err);
        free(json);
    }
    free(key);
    return rc;
}

/* Deletes key (owned: freed here; NULL -> MC_INVALID_PARAMS). */
static int delete_owned(mc_metadata *md, char *key)
{
    if (!key)
        return MC_INVALID_PARAMS;
    int rc = mc_metadata_delete(md, key);
    free(key);
    return rc;
}

int mc_metadata_get_segment(mc_metadata *md, const char *segment, mc_segment_desc *out)
{
    if (!md || !out)
        return MC_INVALID_PARAMS;
    mc_segment_desc_init(out);
    return get_decoded(md, segment_key(md->prefix, segment), out, NULL);
}

int mc_metadata_remove_segment(mc_metadata *md, const char *segment)
{
    if (!md)
        return MC_INVALID_PARAMS;
    return delete_owned(md, segment_key(md->prefix, segment));
}

int mc_metadata_put_rpc_meta(mc_metadata *md, const char *server, const mc_rpc_meta *meta)
{
    if (!md || !meta)
        return MC_INVALID_PARAMS;
    char *key = join_key(md->prefix, "rpc_meta/", server);
    if (!key)
        return MC_INVALID_PARAMS;
    char *json = NULL;
    size_t len;
    int rc = mc_rpc_meta_encode(meta, &json, &len);
    if (rc == MC_OK)
        rc = mc_metadata_put(md, key, json, len);
    free(json);
    free(key);
    return rc;
}

/* "host:port" or "[v6]:port" -> meta (upstream parseHostNameWithPort for P2P names). */
static int split_server_name(const char *server, mc_rpc_meta *out)
{
    mc_metadata_conn c;
    char tmp[MC_METADATA_MAX_HOST + 16];
    size_t n = strlen(server);
    if (n + 8 > sizeof tmp || !strrchr(server, ':'))
        return MC_INVALID_PARAMS;
    memcpy(tmp, "etcd://", 7); /* reuse the endpoint parser */
    memcpy(tmp + 7, server, n + 1);
    if (mc_metadata_parse_conn(tmp, &c, NULL, 0) != MC_OK || c.n_endpoints != 1)
        return MC_INVALID_PARAMS;
    const char *colon = strrchr(server, ':');
    if (colon[-1] != ']' && strchr(server, '[')) /* "[v6]" without a port */
        return MC_INVALID_PARAMS;
    memcpy(out->ip_or_host_name, c.endpoints[0].host, sizeof out->ip_or_host_name);
    out->rpc_port = c.endpoints[0].port;
    return MC_OK;
}

int mc_metadata_get_rpc_meta(mc_metadata *md, const char *server, mc_rpc_meta *out)
{
    if (!md || !out || !server || !*server)
        return MC_INVALID_PARAMS;
    memset(out, 0, sizeof *out);
    if (mc_metadata_is_p2p(md))
        return split_server_name(server, out);
    return get_decoded(md, join_key(md->prefix, "rpc_meta/", server), NULL, out);
}

int mc_metadata_remove_rpc_meta(mc_metadata *md, const char *server)
{
    if (!md)
        return MC_INVALID_PARAMS;
    return delete_owned(md, join_key(md->prefix, "rpc_meta/", server));
}
