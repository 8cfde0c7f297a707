/* election.c: leader election over etcd's v3 JSON gateway (see election.h). The HTTP,
 * endpoint failover, base64 and JSON helpers are the etcd backend's (backend.h). */
#include "metadata/election.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backend.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG "election"

struct mc_election {
    mc_metadata *md;  /* the etcd client (endpoints, timeouts) */
    char *key;        /* "mooncake-store/<cluster>/master_view" */
    char *k64;        /* key in base64 */
    uint32_t ttl_s;
    long long lease;  /* our lease id; 0 = none */
    int64_t view;     /* create_revision of our key while we lead; 0 otherwise */
};

bool mc_election_cluster_id_ok(const char *id)
{
    if (!id)
        return false;
    size_t n = strlen(id);
    if (n < 1 || n > MC_ELECTION_CLUSTER_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

uint32_t mc_election_margin_ms(uint32_t ttl_s)
{
    uint32_t m = ttl_s * 1000u / 4u;
    return m > 250u ? m : 250u;
}

/* Upstream's endpoint lists also write each member as "http://h:p" ("endpoints without a
 * scheme mean http"): "etcd://" first, then per item "http://" and a trailing '/' are
 * dropped, giving "etcd://h:p;h:p". NULL when conn has no "http://" item (used as is). */
static char *etcd_conn(const char *conn)
{
    const char *body = strncmp(conn, "etcd://", 7) == 0 ? conn + 7 : conn;
    if (!strstr(body, "http://"))
        return NULL;
    size_t n = strlen(body);
    char *out = mc_xmalloc(n + 8);
    size_t o = (size_t)snprintf(out, n + 8, "etcd://");
    const char *p = body;
    while (*p) {
        size_t len = strcspn(p, ";,");
        const char *item = p;
        if (len >= 7 && strncmp(item, "http://", 7) == 0) {
            item += 7;
            len -= 7;
        }
        while (len && item[len - 1] == '/')
            len--;
        memcpy(out + o, item, len);
        o += len;
        p = item + len;
        while (*p == '/')
            p++;
        if (*p == ';' || *p == ',') {
            out[o++] = ';';
            p++;
        }
    }
    out[o] = '\0';
    return out;
}

int mc_election_create(const char *conn, const char *cluster_id, uint32_t ttl_s,
                       mc_election **out)
{
    if (!conn || !out)
        return MC_INVALID_PARAMS;
    if (!mc_election_cluster_id_ok(cluster_id)) {
        mc_log(MC_LOG_ERROR, TAG, "cluster id '%s' is not [0-9A-Za-z_.-]{1,128}",
               cluster_id ? cluster_id : "");
        return MC_INVALID_PARAMS;
    }
    if (ttl_s < MC_ELECTION_MIN_TTL_S || ttl_s > MC_ELECTION_MAX_TTL_S) {
        mc_log(MC_LOG_ERROR, TAG, "lease TTL %u s: must be %u..%u", ttl_s,
               MC_ELECTION_MIN_TTL_S, MC_ELECTION_MAX_TTL_S);
        return MC_INVALID_PARAMS;
    }
    char *norm = etcd_conn(conn);
    mc_metadata_conn pc;
    char err[256] = "";
    int prc = mc_metadata_parse_conn(norm ? norm : conn, &pc, err, sizeof err);
    if (prc != MC_OK) {
        free(norm);
        mc_log(MC_LOG_ERROR, TAG, "HA backend '%s': %s", conn, err);
        return MC_INVALID_PARAMS;
    }
    if (pc.kind != MC_METADATA_ETCD) {
        free(norm);
        mc_log(MC_LOG_ERROR, TAG,
               "HA backend '%s' is %s: mooncake-c elects its leader through etcd only "
               "(give etcd endpoints: \"h:2379;h:2379\" or \"etcd://h:2379\")",
               conn, mc_metadata_kind_name(pc.kind));
        return MC_NOT_SUPPORTED;
    }
    uint32_t t = ttl_s * 1000u / 3u;
    if (t < 200)
        t = 200;
    mc_metadata_opts mo = {.timeout_ms = t, .connect_timeout_ms = t, .cluster_id = ""};
    mc_election *e = mc_xcalloc(1, sizeof *e);
    int rc = mc_metadata_create_opts(norm ? norm : conn, &mo, &e->md);
    free(norm);
    if (rc != MC_OK) {
        free(e);
        return rc;
    }
    size_t kn = strlen("mooncake-store//master_view") + strlen(cluster_id) + 1;
    e->key = mc_xmalloc(kn);
    snprintf(e->key, kn, "mooncake-store/%s/master_view", cluster_id);
    e->k64 = mc__md_b64_encode(e->key, strlen(e->key));
    e->ttl_s = ttl_s;
    *out = e;
    return MC_OK;
}

void mc_election_destroy(mc_election *e)
{
    if (!e)
        return;
    if (e->lease)
        mc_election_resign(e);
    mc_metadata_destroy(e->md);
    free(e->key);
    free(e->k64);
    free(e);
}

const char *mc_election_key(const mc_election *e)
{
    return e->key;
}

static json_t *jpack_or_die(json_t *j)
{
    if (!j)
        mc_oom(0);
    return j;
}

static int call(mc_election *e, const char *path, json_t *req, const char *op, json_t **out)
{
    int rc = mc__md_etcd_call(e->md, path, req, op, e->key, out);
    json_decref(req);
    return rc;
}

/* A field under its proto name or its JSON (camelCase) name. */
static json_t *field(json_t *o, const char *proto_name, const char *json_name)
{
    json_t *v = json_object_get(o, proto_name);
    return v ? v : json_object_get(o, json_name);
}

/* The view in a range answer r (or a txn's response_range). MC_OK, MC_OBJECT_NOT_FOUND
 * (no kvs), MC_RPC_FAIL (undecodable). *lease: the key's lease id. */
static int view_of(json_t *r, mc_election_view *view, long long *lease)
{
    json_t *kv = json_array_get(json_object_get(r, "kvs"), 0);
    if (!json_is_object(kv))
        return MC_OBJECT_NOT_FOUND;
    const char *v = json_string_value(json_object_get(kv, "value"));
    char *addr = NULL;
    size_t alen = 0;
    if (!v || mc__md_b64_decode(v, strlen(v), &addr, &alen) != 0 || alen == 0 ||
        alen >= MC_ELECTION_ADDR_MAX) {
        free(addr);
        return MC_RPC_FAIL;
    }
    memcpy(view->leader, addr, alen + 1);
    free(addr);
    view->version = mc__md_json_i64(field(kv, "create_revision", "createRevision"));
    if (lease)
        *lease = mc__md_json_i64(json_object_get(kv, "lease"));
    return view->version > 0 ? MC_OK : MC_RPC_FAIL;
}

static int range(mc_election *e, mc_election_view *view, long long *lease)
{
    json_t *r = NULL;
    int rc = call(e, "/v3/kv/range", jpack_or_die(json_pack("{s:s}", "key", e->k64)),
                  "range", &r);
    if (rc == MC_OK)
        rc = view_of(r, view, lease);
    json_decref(r);
    return rc;
}

int mc_election_read_view(mc_election *e, mc_election_view *view)
{
    return range(e, view, NULL);
}

int mc_election_resign(mc_election *e)
{
    if (!e->lease)
        return MC_OK;
    char id[32];
    snprintf(id, sizeof id, "%lld", e->lease);
    json_t *r = NULL;
    int rc = call(e, "/v3/lease/revoke", jpack_or_die(json_pack("{s:s}", "ID", id)), "revoke",
                  &r);
    json_decref(r);
    e->lease = 0;
    e->view = 0;
    return rc;
}

static void drop_lease(mc_election *e)
{
    if (e->lease)
        mc_election_resign(e);
}

static uint64_t deadline_from(const mc_election *e, uint64_t t_sent, long long ttl_s)
{
    if (ttl_s <= 0)
        return 0;
    if ((uint64_t)ttl_s > e->ttl_s)
        ttl_s = e->ttl_s; /* never trust more than we asked for */
    uint64_t span = (uint64_t)ttl_s * 1000u;
    uint64_t m = mc_election_margin_ms(e->ttl_s);
    return span > m ? t_sent + span - m : 0;
}

int mc_election_campaign(mc_election *e, const char *self, mc_election_view *view,
                         uint64_t *serve_until_ms)
{
    if (!self || !*self || strlen(self) >= MC_ELECTION_ADDR_MAX)
        return MC_INVALID_PARAMS;
    int rc = range(e, view, NULL);
    if (rc == MC_OK)
        return MC_OBJECT_ALREADY_EXISTS;
    if (rc != MC_OBJECT_NOT_FOUND)
        return rc;
    /* no leader: a lease, then the create-if-absent txn */
    drop_lease(e);
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%u", e->ttl_s);
    uint64_t t_sent = mc_now_ms();
    json_t *r = NULL;
    rc = call(e, "/v3/lease/grant", jpack_or_die(json_pack("{s:s, s:s}", "TTL", ttl, "ID", "0")),
              "lease grant", &r);
    if (rc != MC_OK)
        return rc;
    long long lease = mc__md_json_i64(json_object_get(r, "ID"));
    long long granted = mc__md_json_i64(json_object_get(r, "TTL"));
    json_decref(r);
    if (lease == 0 || granted <= 0) {
        mc_log(MC_LOG_WARN, TAG, "etcd granted no lease for %s", e->key);
        return MC_RPC_FAIL;
    }
    e->lease = lease;
    char id[32];
    snprintf(id, sizeof id, "%lld", lease);
    char *v64 = mc__md_b64_encode(self, strlen(self));
    json_t *req = jpack_or_die(json_pack(
        "{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}], s:[{s:{s:s}}]}", "compare", "key",
        e->k64, "target", "CREATE", "result", "EQUAL", "create_revision", "0", "success",
        "request_put", "key", e->k64, "value", v64, "lease", id, "failure", "request_range",
        "key", e->k64));
    free(v64);
    rc = call(e, "/v3/kv/txn", req, "campaign", &r);
    if (rc != MC_OK) {
        drop_lease(e); /* the txn's outcome is unknown: the lease takes the key with it */
        return rc;
    }
    if (json_is_true(json_object_get(r, "succeeded"))) {
        int64_t rev = mc__md_json_i64(json_object_get(json_object_get(r, "header"), "revision"));
        json_decref(r);
        if (rev <= 0) {
            drop_lease(e);
            return MC_RPC_FAIL;
        }
        snprintf(view->leader, sizeof view->leader, "%s", self);
        view->version = rev;
        e->view = rev;
        *serve_until_ms = deadline_from(e, t_sent, granted);
        mc_log(MC_LOG_INFO, TAG, "elected leader of %s as %s (view %lld, lease %lld, TTL %u s)",
               e->key, self, (long long)rev, lease, e->ttl_s);
        return MC_OK;
    }
    /* lost the race: the failure branch read the winner */
    json_t *resp0 = json_array_get(json_object_get(r, "responses"), 0);
    rc = view_of(field(resp0, "response_range", "responseRange"), view, NULL);
    json_decref(r);
    drop_lease(e);
    return rc == MC_OK ? MC_OBJECT_ALREADY_EXISTS : MC_RPC_FAIL;
}

int mc_election_renew(mc_election *e, uint64_t *serve_until_ms)
{
    if (!e->lease || !e->view)
        return MC_LEASE_EXPIRED;
    char id[32];
    snprintf(id, sizeof id, "%lld", e->lease);
    uint64_t t_sent = mc_now_ms();
    json_t *r = NULL;
    int rc = call(e, "/v3/lease/keepalive", jpack_or_die(json_pack("{s:s}", "ID", id)),
                  "keepalive", &r);
    if (rc != MC_OK)
        return rc;
    json_t *res = json_object_get(r, "result");
    long long ttl = mc__md_json_i64(json_object_get(res ? res : r, "TTL"));
    json_decref(r);
    if (ttl <= 0) {
        mc_log(MC_LOG_WARN, TAG, "lease %lld of %s expired: leadership lost", e->lease, e->key);
        e->lease = 0;
        e->view = 0;
        return MC_LEASE_EXPIRED;
    }
    mc_election_view v;
    long long klease = 0;
    rc = range(e, &v, &klease);
    if (rc == MC_OK && (v.version != e->view || klease != e->lease))
        rc = MC_OBJECT_ALREADY_EXISTS;
    if (rc == MC_OBJECT_NOT_FOUND || rc == MC_OBJECT_ALREADY_EXISTS) {
        mc_log(MC_LOG_WARN, TAG, "%s is %s: leadership lost", e->key,
               rc == MC_OBJECT_NOT_FOUND ? "gone" : "another master's now");
        drop_lease(e);
        return MC_LEASE_EXPIRED;
    }
    if (rc != MC_OK)
        return rc;
    *serve_until_ms = deadline_from(e, t_sent, ttl);
    return MC_OK;
}
