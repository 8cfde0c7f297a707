/* backend_redis.c: the Redis metadata backend on hiredis. Upstream's RedisStoragePlugin
 * (transfer_metadata_plugin.cpp) stores each metadata key as a plain Redis string
 * (GET / SET / DEL) with the JSON as the value, AUTH from MC_REDIS_PASSWORD and SELECT
 * from MC_REDIS_DB_INDEX; so do we (the URL's password and db first), so upstream
 * engines and ours read each other's entries.
 *
 * One connection per client (impl->c), opened at the first call and guarded by
 * impl->lock: calls serialise on it (metadata is off the data path). A connection error
 * drops it; the command is repeated once on a new connection when the dropped one was
 * made before this call (a restarted server), never after a timeout (the server may be
 * merely slow: repeating would double the wait). Codes and the write-once rule:
 * include/mooncake/metadata.h after mc_metadata_delete. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "backend.h"
#include "common/env.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG "metadata"

typedef struct redis_impl {
    pthread_mutex_t lock;
    redisContext *c;                       /* guarded by lock; NULL = not connected */
    char where[MC_METADATA_MAX_HOST + 16]; /* "h:p" for messages; immutable */
    char user[MC_METADATA_MAX_SECRET];     /* AUTH user ("" = none); immutable */
    char pass[MC_METADATA_MAX_SECRET];     /* AUTH password ("" = no AUTH); immutable */
    int db;                                /* SELECT when > 0; immutable */
    mc__md_ratelimit rl;                   /* connection-failure warnings */
} redis_impl;

static struct timeval tv_ms(uint32_t ms)
{
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

/* The status of a failed I/O on c (the context's error is set). */
static int io_status(const redisContext *c)
{
    if (c->err == REDIS_ERR_IO &&
        (strstr(c->errstr, "temporarily unavailable") || strstr(c->errstr, "timed out")))
        return MC_RPC_TIMEOUT;
#ifdef REDIS_ERR_TIMEOUT
    if (c->err == REDIS_ERR_TIMEOUT)
        return MC_RPC_TIMEOUT;
#endif
    return MC_RPC_FAIL;
}

/* An error reply: a refused login is a configuration error, the rest server trouble. */
static int reply_error(mc_metadata *md, const redisReply *rep, const char *op, const char *key)
{
    redis_impl *r = md->impl;
    mc_log(MC_LOG_WARN, TAG, "redis %s %s on %s: %.*s", op, key, r->where, (int)rep->len,
           rep->str);
    if (strncmp(rep->str, "NOAUTH", 6) == 0 || strncmp(rep->str, "WRONGPASS", 9) == 0 ||
        strncmp(rep->str, "NOPERM", 6) == 0)
        return MC_INVALID_PARAMS;
    return MC_RPC_FAIL;
}

/* Runs one command on c; NULL on an I/O error (c->err set). */
static redisReply *command(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    return redisCommandArgv(c, argc, argv, lens);
}

/* Opens r->c (lock held): connect, timeouts, AUTH, SELECT. */
static int connect_locked(mc_metadata *md)
{
    redis_impl *r = md->impl;
    const mc_metadata_endpoint *ep = &md->conn.endpoints[0];
    redisContext *c = redisConnectWithTimeout(ep->host, ep->port,
                                              tv_ms(md->opts.connect_timeout_ms));
    if (!c)
        mc_oom(sizeof *c);
    if (c->err) {
        int rc = io_status(c);
        unsigned dropped = 0; /* a client retrying a server that is down: one per 5 s */
        if (mc__md_rl_take(&r->rl, &dropped))
            mc_log(MC_LOG_WARN, TAG, "redis %s: cannot connect: %s (%u more not logged in the "
                   "last %u s)", r->where, c->errstr, dropped, MC__MD_RL_MS / 1000);
        redisFree(c);
        return rc;
    }
    redisSetTimeout(c, tv_ms(md->opts.timeout_ms));
    redisEnableKeepAlive(c);
    if (r->pass[0]) {
        const char *argv[3] = {"AUTH", r->user, r->pass};
        size_t lens[3] = {4, strlen(r->user), strlen(r->pass)};
        redisReply *rep = r->user[0] ? command(c, 3, argv, lens)
                                     : command(c, 2, (const char *[]){"AUTH", r->pass},
                                               (size_t[]){4, lens[2]});
        int rc = MC_OK;
        if (!rep) {
            rc = io_status(c);
            mc_log(MC_LOG_WARN, TAG, "redis %s: AUTH: %s", r->where, c->errstr);
        } else if (rep->type == REDIS_REPLY_ERROR) {
            mc_log(MC_LOG_ERROR, TAG, "redis %s: AUTH refused: %.*s (password from %s)",
                   r->where, (int)rep->len, rep->str,
                   md->conn.password[0] ? "the URL" : "MC_REDIS_PASSWORD");
            rc = MC_INVALID_PARAMS;
        }
        if (rep)
            freeReplyObject(rep);
        if (rc != MC_OK) {
            redisFree(c);
            return rc;
        }
    }
    if (r->db > 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->db);
        redisReply *rep = command(c, 2, (const char *[]){"SELECT", db}, (size_t[]){6, strlen(db)});
        int rc = MC_OK;
        if (!rep) {
            rc = io_status(c);
            mc_log(MC_LOG_WARN, TAG, "redis %s: SELECT %s: %s", r->where, db, c->errstr);
        } else if (rep->type == REDIS_REPLY_ERROR) {
            mc_log(MC_LOG_ERROR, TAG, "redis %s: SELECT %s refused: %.*s", r->where, db,
                   (int)rep->len, rep->str);
            rc = MC_INVALID_PARAMS;
        }
        if (rep)
            freeReplyObject(rep);
        if (rc != MC_OK) {
            redisFree(c);
            return rc;
        }
    }
    r->c = c;
    return MC_OK;
}

/* Runs argv under the lock, (re)connecting as the file comment says.
 * On MC_OK *out is the reply (caller frees; may be an error reply). Also the leader
 * election's command runner (mc__md_redis_run, backend.h). */
int mc__md_redis_run(mc_metadata *md, int argc, const char **argv, const size_t *lens,
                     const char *op, const char *key, struct redisReply **out)
{
    redis_impl *r = md->impl;
    int rc = MC_OK;
    pthread_mutex_lock(&r->lock);
    for (int attempt = 0; attempt < 2; attempt++) {
        bool fresh = false;
        if (!r->c) {
            rc = connect_locked(md);
            if (rc != MC_OK)
                break;
            fresh = true;
        }
        redisReply *rep = command(r->c, argc, argv, lens);
        if (rep) {
            pthread_mutex_unlock(&r->lock);
            *out = rep;
            return MC_OK;
        }
        rc = io_status(r->c);
        mc_log(MC_LOG_WARN, TAG, "redis %s %s on %s: %s%s", op, key, r->where, r->c->errstr,
               !fresh && rc != MC_RPC_TIMEOUT && attempt == 0 ? " (reconnecting)" : "");
        redisFree(r->c);
        r->c = NULL;
        if (fresh || rc == MC_RPC_TIMEOUT)
            break;
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

static int redis_get(mc_metadata *md, const char *key, char **value, size_t *len)
{
    redisReply *rep;
    int rc = mc__md_redis_run(md, 2, (const char *[]){"GET", key}, (size_t[]){3, strlen(key)},
                              "get", key, &rep);
    if (rc != MC_OK)
        return rc;
    if (rep->type == REDIS_REPLY_NIL) {
        rc = MC_OBJECT_NOT_FOUND;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        rc = reply_error(md, rep, "get", key);
    } else if (rep->type != REDIS_REPLY_STRING) {
        mc_log(MC_LOG_WARN, TAG, "redis get %s on %s: reply of type %d", key,
               ((redis_impl *)md->impl)->where, rep->type);
        rc = MC_RPC_FAIL;
    } else if ((uint64_t)rep->len > md->opts.max_value_bytes) {
        mc_log(MC_LOG_WARN, TAG, "redis get %s: value larger than %llu bytes", key,
               (unsigned long long)md->opts.max_value_bytes);
        rc = MC_BUFFER_OVERFLOW;
    } else {
        char *v = mc_xmalloc(rep->len + 1);
        memcpy(v, rep->str, rep->len);
        v[rep->len] = '\0';
        *value = v;
        *len = rep->len;
    }
    freeReplyObject(rep);
    return rc;
}

/* SET NX, then on nil GET and compare (see the header); a key deleted between the two
 * is tried again, a few times. */
static int put_once(mc_metadata *md, const char *key, const void *value, size_t len)
{
    size_t klen = strlen(key);
    for (int round = 0; round < 3; round++) {
        redisReply *rep;
        int rc = mc__md_redis_run(md, 4, (const char *[]){"SET", key, value, "NX"},
                                  (size_t[]){3, klen, len, 2}, "put", key, &rep);
        if (rc != MC_OK)
            return rc;
        if (rep->type == REDIS_REPLY_ERROR)
            rc = reply_error(md, rep, "put", key);
        int type = rep->type;
        freeReplyObject(rep);
        if (rc != MC_OK || type != REDIS_REPLY_NIL)
            return rc; /* stored ("OK") or refused */
        char *old = NULL;
        size_t olen = 0;
        rc = redis_get(md, key, &old, &olen);
        if (rc == MC_OK) {
            rc = olen == len && memcmp(old, value, len) == 0 ? MC_OK : MC_OBJECT_ALREADY_EXISTS;
            free(old);
            return rc;
        }
        if (rc == MC_BUFFER_OVERFLOW)
            return MC_OBJECT_ALREADY_EXISTS; /* larger than ours can be: different */
        if (rc != MC_OBJECT_NOT_FOUND)
            return rc;
    }
    return MC_OBJECT_ALREADY_EXISTS; /* another writer keeps racing us */
}

static int redis_put(mc_metadata *md, const char *key, const void *value, size_t len)
{
    if (!value)
        value = "";
    if (mc__metadata_write_once(key))
        return put_once(md, key, value, len);
    redisReply *rep;
    int rc = mc__md_redis_run(md, 3, (const char *[]){"SET", key, value},
                              (size_t[]){3, strlen(key), len}, "put", key, &rep);
    if (rc != MC_OK)
        return rc;
    if (rep->type == REDIS_REPLY_ERROR)
        rc = reply_error(md, rep, "put", key);
    freeReplyObject(rep);
    return rc;
}

static int redis_del(mc_metadata *md, const char *key)
{
    redisReply *rep;
    int rc = mc__md_redis_run(md, 2, (const char *[]){"DEL", key}, (size_t[]){3, strlen(key)},
                              "delete", key, &rep);
    if (rc != MC_OK)
        return rc;
    if (rep->type == REDIS_REPLY_ERROR)
        rc = reply_error(md, rep, "delete", key);
    else if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 1)
        rc = MC_OBJECT_NOT_FOUND;
    freeReplyObject(rep);
    return rc;
}

static void redis_destroy(mc_metadata *md)
{
    redis_impl *r = md->impl;
    if (!r)
        return;
    if (r->c)
        redisFree(r->c);
    pthread_mutex_destroy(&r->lock);
    memset(r->pass, 0, sizeof r->pass);
    free(r);
    md->impl = NULL;
}

static const mc_metadata_ops redis_ops = {
    .name = "redis", .get = redis_get, .put = redis_put, .del = redis_del,
    .destroy = redis_destroy,
};

int mc__metadata_redis_open(mc_metadata *md)
{
    const mc_metadata_conn *conn = &md->conn;
    int db = conn->db;
    if (db < 0) {
        uint64_t v;
        if (mc_env_u64("MC_REDIS_DB_INDEX", 0, 0, INT32_MAX, &v) != 0)
            return MC_INVALID_PARAMS; /* logged by the reader, naming the variable */
        db = (int)v;
    }
    const char *pass = conn->password[0] ? conn->password : mc_env_str("MC_REDIS_PASSWORD");
    if (pass && strlen(pass) >= MC_METADATA_MAX_SECRET) {
        mc_log(MC_LOG_ERROR, TAG, "MC_REDIS_PASSWORD is longer than %d bytes",
               MC_METADATA_MAX_SECRET - 1);
        return MC_INVALID_PARAMS;
    }
    redis_impl *r = mc_xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    const mc_metadata_endpoint *ep = &conn->endpoints[0];
    bool v6 = strchr(ep->host, ':') != NULL;
    snprintf(r->where, sizeof r->where, "%s%s%s:%u", v6 ? "[" : "", ep->host, v6 ? "]" : "",
             (unsigned)ep->port);
    memcpy(r->user, conn->username, sizeof r->user);
    if (pass)
        snprintf(r->pass, sizeof r->pass, "%s", pass);
    r->db = db;
    md->ops = &redis_ops;
    md->impl = r;
    return MC_OK;
}
