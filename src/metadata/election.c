/* election.c: leader election over etcd's v3 JSON gateway, or over Redis (see
 * election.h). The HTTP, endpoint failover, base64 and JSON helpers are the etcd
 * backend's, the Redis connection the Redis backend's (backend.h). */
#include "metadata/election.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sys/random.h>
#ifdef MC_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

#include "backend.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG "election"

struct mc_election {
    mc_metadata *md;  /* the etcd or Redis client (endpoints, timeouts) */
    mc_metadata_kind kind;
    char *key;        /* "mooncake-store/<cluster>/master_view" (Redis: "{<cluster>}") */
    char *vkey;       /* Redis: the view counter "mooncake-store/{<cluster>}/view_version" */
    char token[33];   /* our term's random id while we lead (Redis: in the hash; etcd:
                       * the value of tkey, under our lease) */
    char *k64;        /* key in base64 */
    char *tk64;       /* etcd: the term token key "mooncake-store/<cluster>/repl_token",
                       * base64 */
    uint32_t ttl_s;
    long long lease;  /* our lease id; 0 = none */
    int64_t view;     /* create_revision of our key while we lead; 0 otherwise */
    mc__md_stream *stream; /* the watch's (etcd); made at create, stopped from any thread */
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
    /* it is also a path component (<root_fs_dir>/<cluster_id>): not "." nor ".." */
    return strcmp(id, ".") != 0 && strcmp(id, "..") != 0;
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
    bool redis = pc.kind == MC_METADATA_REDIS;
#ifndef MC_HAVE_HIREDIS
    if (redis) {
        free(norm);
        mc_log(MC_LOG_ERROR, TAG, "HA backend '%s': this build has no Redis (hiredis)", conn);
        return MC_NOT_SUPPORTED;
    }
#endif
    if (pc.kind != MC_METADATA_ETCD && !redis) {
        free(norm);
        mc_log(MC_LOG_ERROR, TAG,
               "HA backend '%s' is %s: mooncake-c elects its leader through etcd or Redis "
               "(\"h:2379;h:2379\", \"etcd://h:2379\" or \"redis://h:6379\")",
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
    e->kind = pc.kind;
    /* upstream's keys; Redis wraps the cluster in {} (one hash slot in a cluster) */
    size_t kn = strlen("mooncake-store/{}/view_version") + strlen(cluster_id) + 1;
    e->key = mc_xmalloc(kn);
    if (redis) {
        snprintf(e->key, kn, "mooncake-store/{%s}/master_view", cluster_id);
        e->vkey = mc_xmalloc(kn);
        snprintf(e->vkey, kn, "mooncake-store/{%s}/view_version", cluster_id);
    } else {
        snprintf(e->key, kn, "mooncake-store/%s/master_view", cluster_id);
        char *tkey = mc_xmalloc(kn);
        snprintf(tkey, kn, "mooncake-store/%s/repl_token", cluster_id);
        e->tk64 = mc__md_b64_encode(tkey, strlen(tkey));
        free(tkey);
    }
    e->k64 = mc__md_b64_encode(e->key, strlen(e->key));
    e->ttl_s = ttl_s;
    e->stream = mc__md_stream_new();
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
    mc__md_stream_free(e->stream);
    free(e->key);
    free(e->vkey);
    free(e->k64);
    free(e->tk64);
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

/* ---- Redis: the view is a hash {leader_address, view_version, token} under a PX
 * expiry, written and renewed by Lua scripts so each step is atomic ---- */

#ifdef MC_HAVE_HIREDIS
/* campaign: absent -> the view counter moves to max(counter + 1, server ms) (so a Redis
 * that lost its data on a restart still gives larger views), the hash is written with
 * our address and term token and a PX expiry; present -> the holder's view. */
static const char LUA_CAMPAIGN[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then "
    "  local r = redis.call('HMGET', KEYS[1], 'leader_address', 'view_version') "
    "  return {0, r[1] or '', r[2] or '0'} end "
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
    "local v = redis.call('INCR', KEYS[2]) "
    "if v < now then redis.call('SET', KEYS[2], now) v = now end "
    "redis.call('HSET', KEYS[1], 'leader_address', ARGV[1], 'view_version', v, "
    "  'token', ARGV[2]) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[3]) "
    "return {1, ARGV[1], tostring(v)}";
/* renew: only while the hash is still our term's */
static const char LUA_RENEW[] =
    "if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then "
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
static const char LUA_RESIGN[] =
    "if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then "
    "  return redis.call('DEL', KEYS[1]) end return 0";

static int r_eval(mc_election *e, const char *script, int nargs, const char **args,
                  const char *op, redisReply **out)
{
    const char *argv[8] = {"EVAL", script, "2", e->key, e->vkey};
    size_t lens[8] = {4, strlen(script), 1, strlen(e->key), strlen(e->vkey)};
    for (int i = 0; i < nargs && i < 3; i++) {
        argv[5 + i] = args[i];
        lens[5 + i] = strlen(args[i]);
    }
    int rc = mc__md_redis_run(e->md, 5 + nargs, argv, lens, op, e->key, out);
    if (rc == MC_OK && (*out)->type == REDIS_REPLY_ERROR) {
        mc_log(MC_LOG_WARN, TAG, "redis %s %s: %.*s", op, e->key, (int)(*out)->len,
               (*out)->str);
        freeReplyObject(*out);
        return MC_RPC_FAIL;
    }
    return rc;
}

static int r_view_of(const redisReply *addr, const redisReply *ver, mc_election_view *view)
{
    if (!addr || !ver || addr->type != REDIS_REPLY_STRING || ver->type != REDIS_REPLY_STRING)
        return MC_OBJECT_NOT_FOUND;
    if (addr->len == 0 || addr->len >= MC_ELECTION_ADDR_MAX)
        return MC_RPC_FAIL;
    memcpy(view->leader, addr->str, addr->len);
    view->leader[addr->len] = '\0';
    view->version = strtoll(ver->str, NULL, 10);
    return view->version > 0 ? MC_OK : MC_RPC_FAIL;
}

static int r_read(mc_election *e, mc_election_view *view)
{
    redisReply *r;
    const char *argv[] = {"HMGET", e->key, "leader_address", "view_version"};
    size_t lens[] = {5, strlen(e->key), 14, 12};
    int rc = mc__md_redis_run(e->md, 4, argv, lens, "read view", e->key, &r);
    if (rc != MC_OK)
        return rc;
    rc = r->type == REDIS_REPLY_ARRAY && r->elements == 2
             ? r_view_of(r->element[0], r->element[1], view)
             : MC_RPC_FAIL;
    freeReplyObject(r);
    return rc;
}
#endif

int mc_election_read_view(mc_election *e, mc_election_view *view)
{
#ifdef MC_HAVE_HIREDIS
    if (e->kind == MC_METADATA_REDIS)
        return r_read(e, view);
#endif
    return range(e, view, NULL);
}

int mc_election_resign(mc_election *e)
{
    if (!e->lease)
        return MC_OK;
#ifdef MC_HAVE_HIREDIS
    if (e->kind == MC_METADATA_REDIS) {
        redisReply *r;
        int rc = r_eval(e, LUA_RESIGN, 1, (const char *[]){e->token}, "resign", &r);
        if (rc == MC_OK)
            freeReplyObject(r);
        e->lease = 0;
        e->view = 0;
        return rc;
    }
#endif
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

/* A new random term token in e->token (32 hex digits). MC_OK or MC_INTERNAL_ERROR. */
static int new_token(mc_election *e)
{
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return MC_INTERNAL_ERROR;
    for (int i = 0; i < 16; i++)
        snprintf(e->token + 2 * i, 3, "%02x", rnd[i]);
    return MC_OK;
}

#ifdef MC_HAVE_HIREDIS
static int r_campaign(mc_election *e, const char *self, mc_election_view *view,
                      uint64_t *serve_until_ms)
{
    if (new_token(e) != MC_OK)
        return MC_INTERNAL_ERROR;
    char px[24];
    snprintf(px, sizeof px, "%u", e->ttl_s * 1000u);
    uint64_t t_sent = mc_now_ms();
    redisReply *r;
    int rc = r_eval(e, LUA_CAMPAIGN, 3, (const char *[]){self, e->token, px}, "campaign", &r);
    if (rc != MC_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return MC_RPC_FAIL;
    }
    bool won = r->element[0]->integer == 1;
    rc = r_view_of(r->element[1], r->element[2], view);
    freeReplyObject(r);
    if (rc != MC_OK)
        return won ? MC_RPC_FAIL : rc == MC_OBJECT_NOT_FOUND ? MC_RPC_FAIL : rc;
    if (!won)
        return MC_OBJECT_ALREADY_EXISTS;
    e->lease = 1; /* "we hold the term" */
    e->view = view->version;
    *serve_until_ms = deadline_from(e, t_sent, e->ttl_s);
    mc_log(MC_LOG_INFO, TAG, "elected leader of %s as %s (view %lld, redis PX %s ms)", e->key,
           self, (long long)view->version, px);
    return MC_OK;
}

static int r_renew(mc_election *e, uint64_t *serve_until_ms)
{
    char px[24];
    snprintf(px, sizeof px, "%u", e->ttl_s * 1000u);
    uint64_t t_sent = mc_now_ms();
    redisReply *r;
    int rc = r_eval(e, LUA_RENEW, 2, (const char *[]){e->token, px}, "renew", &r);
    if (rc != MC_OK)
        return rc;
    bool ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (!ok) {
        mc_log(MC_LOG_WARN, TAG, "%s expired or is another master's: leadership lost", e->key);
        e->lease = 0;
        e->view = 0;
        return MC_LEASE_EXPIRED;
    }
    *serve_until_ms = deadline_from(e, t_sent, e->ttl_s);
    return MC_OK;
}
#endif

int mc_election_campaign(mc_election *e, const char *self, mc_election_view *view,
                         uint64_t *serve_until_ms)
{
    if (!self || !*self || strlen(self) >= MC_ELECTION_ADDR_MAX)
        return MC_INVALID_PARAMS;
#ifdef MC_HAVE_HIREDIS
    if (e->kind == MC_METADATA_REDIS)
        return r_campaign(e, self, view, serve_until_ms);
#endif
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
    rc = call(e, "/v3/lease/grant",
              jpack_or_die(json_pack("{s:s, s:s}", "TTL", ttl, "ID", "0")), "lease grant", &r);
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
    if (new_token(e) != MC_OK) {
        drop_lease(e);
        return MC_INTERNAL_ERROR;
    }
    char *v64 = mc__md_b64_encode(self, strlen(self));
    char *t64 = mc__md_b64_encode(e->token, strlen(e->token));
    /* the view and the term token (who may fetch the log: election.h) in one txn, under
     * one lease: the token key's create_revision is the view version */
    json_t *req = jpack_or_die(json_pack(
        "{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}, {s:{s:s, s:s, s:s}}], "
        "s:[{s:{s:s}}]}", "compare", "key", e->k64, "target", "CREATE", "result", "EQUAL",
        "create_revision", "0", "success", "request_put", "key", e->k64, "value", v64,
        "lease", id, "request_put", "key", e->tk64, "value", t64, "lease", id, "failure",
        "request_range", "key", e->k64));
    free(v64);
    free(t64);
    rc = call(e, "/v3/kv/txn", req, "campaign", &r);
    if (rc != MC_OK) {
        drop_lease(e); /* the txn's outcome is unknown: the lease takes the key with it */
        return rc;
    }
    if (json_is_true(json_object_get(r, "succeeded"))) {
        json_t *hdr = json_object_get(r, "header");
        int64_t rev = mc__md_json_i64(json_object_get(hdr, "revision"));
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
#ifdef MC_HAVE_HIREDIS
    if (e->kind == MC_METADATA_REDIS)
        return r_renew(e, serve_until_ms);
#endif
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

/* ---- the watch (etcd) ---- */

bool mc_election_watchable(const mc_election *e)
{
    return e->kind == MC_METADATA_ETCD;
}

void mc_election_watch_stop(mc_election *e)
{
    mc__md_stream_stop(e->stream);
}

typedef struct watch_ctx {
    mc_election *e;
    int64_t *from_rev;
    mc_election_view_fn fn;
    void *ctx;
    int rc; /* MC_RPC_FAIL after a cancel or a compaction */
} watch_ctx;

/* One WatchResponse: {"result": {"header": {"revision"}, "created", "canceled",
 * "compact_revision", "events": [{"type": "DELETE" (absent for a put), "kv": {...}}]}}
 * (a stream error: {"error": {...}}). */
static int watch_msg(void *ud, json_t *obj)
{
    watch_ctx *w = ud;
    json_t *res = json_object_get(obj, "result");
    if (!json_is_object(res)) {
        const char *m = json_string_value(
            json_object_get(json_object_get(obj, "error"), "message"));
        mc_log(MC_LOG_WARN, TAG, "watch of %s: the stream carried an error: %.200s", w->e->key,
               m ? m : "no result");
        w->rc = MC_RPC_FAIL;
        return 1;
    }
    long long compact = mc__md_json_i64(field(res, "compact_revision", "compactRevision"));
    if (json_is_true(json_object_get(res, "canceled")) || compact > 0) {
        mc_log(MC_LOG_INFO, TAG, "watch of %s canceled by etcd%s%lld: reading the view",
               w->e->key, compact > 0 ? ", compacted at revision " : "", compact);
        *w->from_rev = 0;
        w->rc = MC_RPC_FAIL;
        return 1;
    }
    if (json_is_true(json_object_get(res, "created"))) {
        long long rev = mc__md_json_i64(json_object_get(json_object_get(res, "header"),
                                                        "revision"));
        if (*w->from_rev <= 0 && rev > 0)
            *w->from_rev = rev + 1;
        w->fn(w->ctx, NULL);
    }
    json_t *evs = json_object_get(res, "events");
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev) {
        json_t *kv = json_object_get(ev, "kv");
        long long mod = mc__md_json_i64(field(kv, "mod_revision", "modRevision"));
        if (mod > 0)
            *w->from_rev = mod + 1;
        const char *type = json_string_value(json_object_get(ev, "type"));
        if (type && strcmp(type, "PUT") != 0)
            continue; /* DELETE: no leader until the next put */
        json_t *wrap = json_pack("{s:[O]}", "kvs", kv);
        if (!wrap)
            mc_oom(0);
        mc_election_view v;
        int rc = view_of(wrap, &v, NULL);
        json_decref(wrap);
        if (rc == MC_OK)
            w->fn(w->ctx, &v);
        else
            mc_log(MC_LOG_WARN, TAG, "watch of %s: an undecodable view (%s)", w->e->key,
                   mc_strerror(rc));
    }
    return 0;
}

int mc_election_watch(mc_election *e, int64_t *from_rev, uint32_t max_ms,
                      mc_election_view_fn fn, void *ctx)
{
    if (e->kind != MC_METADATA_ETCD)
        return MC_NOT_SUPPORTED;
    json_t *req;
    if (*from_rev > 0) {
        char rev[24];
        snprintf(rev, sizeof rev, "%lld", (long long)*from_rev);
        req = json_pack("{s:{s:s, s:s}}", "create_request", "key", e->k64, "start_revision",
                        rev);
    } else {
        req = json_pack("{s:{s:s}}", "create_request", "key", e->k64);
    }
    if (!req)
        mc_oom(0);
    watch_ctx w = {.e = e, .from_rev = from_rev, .fn = fn, .ctx = ctx, .rc = MC_OK};
    int rc = mc__md_etcd_stream(e->md, e->stream, "/v3/watch", req, max_ms, watch_msg, &w);
    json_decref(req);
    return rc == MC_OK ? w.rc : rc;
}

const char *mc_election_term_token(const mc_election *e)
{
    return e->lease && e->view ? e->token : "";
}

int mc_election_read_token(mc_election *e, int64_t version, char *out, size_t cap)
{
    if (!out || cap < 33)
        return MC_INVALID_PARAMS;
    out[0] = '\0';
#ifdef MC_HAVE_HIREDIS
    if (e->kind == MC_METADATA_REDIS) {
        redisReply *r;
        const char *argv[] = {"HMGET", e->key, "view_version", "token"};
        size_t lens[] = {5, strlen(e->key), 12, 5};
        int rc = mc__md_redis_run(e->md, 4, argv, lens, "read token", e->key, &r);
        if (rc != MC_OK)
            return rc;
        rc = MC_OBJECT_NOT_FOUND;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING && r->element[1]->len < cap &&
            strtoll(r->element[0]->str, NULL, 10) == version) {
            memcpy(out, r->element[1]->str, r->element[1]->len);
            out[r->element[1]->len] = '\0';
            rc = MC_OK;
        }
        freeReplyObject(r);
        return rc;
    }
#endif
    json_t *r = NULL;
    int rc = call(e, "/v3/kv/range", jpack_or_die(json_pack("{s:s}", "key", e->tk64)),
                  "range token", &r);
    if (rc != MC_OK)
        return rc;
    rc = MC_OBJECT_NOT_FOUND;
    json_t *kv = json_array_get(json_object_get(r, "kvs"), 0);
    const char *v = json_is_object(kv) ? json_string_value(json_object_get(kv, "value")) : NULL;
    char *tok = NULL;
    size_t tlen = 0;
    if (v && mc__md_json_i64(field(kv, "create_revision", "createRevision")) == version &&
        mc__md_b64_decode(v, strlen(v), &tok, &tlen) == 0 && tlen > 0 && tlen < cap) {
        memcpy(out, tok, tlen);
        out[tlen] = '\0';
        rc = MC_OK;
    }
    free(tok);
    json_decref(r);
    return rc;
}
