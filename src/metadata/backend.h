/* backend.h: the key-value backend vtable behind mc_metadata (internal).
 *
 * Adding a backend = one file that defines `int mc__metadata_<name>_open(mc_metadata *md)`
 * (fills md->ops and md->impl from md->conn / md->opts), plus its line in the factory
 * table of metadata.c and its file in meson.build. The generic layer (metadata.c) checks
 * keys and sizes before calling the ops, so backends can trust their arguments:
 * key non-empty, at most MC_METADATA_MAX_KEY bytes, NUL-terminated; len <= max value.
 */
#ifndef MC_METADATA_BACKEND_H
#define MC_METADATA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "mooncake/metadata.h"

typedef struct mc_metadata_ops {
    const char *name;
    /* get: *value = new malloc'd buffer (NUL-terminated, *len bytes before the NUL). */
    int (*get)(mc_metadata *md, const char *key, char **value, size_t *len);
    int (*put)(mc_metadata *md, const char *key, const void *value, size_t len);
    int (*del)(mc_metadata *md, const char *key);
    /* destroy: frees md->impl (not md). */
    void (*destroy)(mc_metadata *md);
} mc_metadata_ops;

struct mc_metadata {
    const mc_metadata_ops *ops; /* immutable after create */
    mc_metadata_conn conn;      /* immutable after create */
    mc_metadata_opts opts;      /* defaults filled in; cluster_id = NULL (see prefix) */
    char *prefix;               /* "mooncake/[cluster/]", immutable after create */
    void *impl;                 /* the backend's own state; the backend guards it */
};

/* Backend constructors, one per kind (the factories[] table in metadata.c): fill
 * md->ops and md->impl from md->conn/md->opts. Return MC_OK, or INTERNAL_ERROR when
 * the backend's state cannot be set up (md->impl then left NULL), or INVALID_PARAMS for
 * a bad option of its own (logged). */
/* Shared by the libcurl backends (HTTP, etcd; defined in backend_http.c). */

/* mc__md_curl_init: curl_global_init once per process (thread-safe). Returns MC_OK, or
 * MC_INTERNAL_ERROR after logging libcurl's reason. */
int mc__md_curl_init(void);

/* A response body collected by libcurl, at most `max` bytes (set by the caller); data is
 * NUL-terminated, owned by the caller (free it); overflow says the peer sent more than
 * max and the transfer was aborted. */
typedef struct mc__md_body {
    char *data;
    size_t len, cap;
    uint64_t max;
    bool overflow;
} mc__md_body;

/* mc__md_body_write: CURLOPT_WRITEFUNCTION for an mc__md_body (CURLOPT_WRITEDATA). */
size_t mc__md_body_write(char *ptr, size_t size, size_t nmemb, void *ud);

/* Shared by the etcd backend and the leader election (election.c; both over etcd's
 * v3 JSON gateway; defined in backend_etcd.c). */

/* mc__md_b64_encode: RFC 4648 base64 of data[0..len), padded; new NUL-terminated string. */
char *mc__md_b64_encode(const void *data, size_t len);
/* mc__md_b64_decode: s[0..len) (padded base64) into a new NUL-terminated buffer
 * (*out, *outlen bytes before the NUL). 0, or -1 for bad base64. */
int mc__md_b64_decode(const char *s, size_t len, char **out, size_t *outlen);
/* mc__md_etcd_call: one POST of req (JSON, borrowed) to `path` ("/v3/kv/txn", ...) on
 * md's endpoints in turn (md must be an etcd client). op/key: for messages. On MC_OK
 * *out is the answer's JSON object (caller decrefs). Returns MC_OK, MC_BUFFER_OVERFLOW,
 * MC_INVALID_PARAMS (a 4xx every member would give), MC_RPC_TIMEOUT / MC_RPC_FAIL (no
 * endpoint answered; logged). Any thread (no shared state but the endpoint cursor). */
int mc__md_etcd_call(mc_metadata *md, const char *path, json_t *req, const char *op,
                     const char *key, json_t **out);
/* A streaming request (the etcd watch): created and run by one thread, stopped from any.
 * mc__md_stream_new: a new one (never NULL). mc__md_stream_free: frees (not while it
 * runs). mc__md_stream_stop: makes the running mc__md_etcd_stream (and every later one on
 * it) return MC_OK at once; any thread. */
typedef struct mc__md_stream mc__md_stream;
mc__md_stream *mc__md_stream_new(void);
void mc__md_stream_free(mc__md_stream *st);
void mc__md_stream_stop(mc__md_stream *st);
bool mc__md_stream_stopped(mc__md_stream *st);
/* mc__md_etcd_stream: one streaming POST of req (JSON, borrowed) to `path` ("/v3/watch")
 * on one endpoint of md (the one that answered last; on a connection failure the cursor
 * moves to the next, so the next call tries another member). The answer is a sequence
 * of newline-delimited JSON objects (the gateway's server streaming): on_msg(ctx, obj)
 * for each (obj borrowed for the call); a nonzero return ends the stream.
 *   max_ms: the stream is ended after this long (the caller polls, then restarts it).
 * Returns MC_OK (stopped, max_ms passed, or on_msg ended it), MC_RPC_FAIL /
 * MC_RPC_TIMEOUT (the endpoint did not answer or the stream broke; logged at most once
 * per endpoint per few seconds, see mc__md_ratelimit), MC_INVALID_PARAMS (a 4xx). One
 * thread per stream. */
int mc__md_etcd_stream(mc_metadata *md, mc__md_stream *st, const char *path, json_t *req,
                       uint32_t max_ms, int (*on_msg)(void *ctx, json_t *obj), void *ctx);

/* A log rate limit: one message per MC__MD_RL_MS per limiter (an endpoint of a client),
 * the rest counted and reported with the next one. mc__md_rl_take: true when a message
 * may be logged now; *suppressed = the messages dropped since the last one logged.
 * Any thread (atomics). */
#define MC__MD_RL_MS 5000u
typedef struct mc__md_ratelimit {
    _Atomic uint64_t next_ms;
    _Atomic unsigned suppressed;
} mc__md_ratelimit;
bool mc__md_rl_take(mc__md_ratelimit *rl, unsigned *suppressed);

/* mc__md_json_i64: an int64 field the gateway writes as a string ("1") or a number;
 * 0 when absent or neither. */
long long mc__md_json_i64(json_t *v);

#ifdef MC_HAVE_HIREDIS
struct redisReply;
/* mc__md_redis_run: one command (argv[0..argc), lens bytes each) on md's Redis
 * connection (md must be a Redis client), connecting (AUTH, SELECT) and reconnecting once
 * as backend_redis.c says; op/key: for messages. On MC_OK *out is the reply (caller
 * freeReplyObject's it; may be an error reply). Else MC_RPC_FAIL / MC_RPC_TIMEOUT /
 * MC_INVALID_PARAMS (a refused login). Thread-safe (one lock per client). Defined in
 * backend_redis.c; used by the leader election (election.c). */
int mc__md_redis_run(mc_metadata *md, int argc, const char **argv, const size_t *lens,
                     const char *op, const char *key, struct redisReply **out);
#endif

int mc__metadata_http_open(mc_metadata *md);
int mc__metadata_p2p_open(mc_metadata *md);
int mc__metadata_etcd_open(mc_metadata *md);
#ifdef MC_HAVE_HIREDIS
int mc__metadata_redis_open(mc_metadata *md);
#endif

/* mc__metadata_write_once: true for the keys the HTTP metadata server keeps write-once
 * (a key containing "rpc_meta", http_server.c do_put): backends without that server
 * rule (etcd, Redis) emulate it: absent -> stored, same bytes -> MC_OK, other bytes ->
 * MC_OBJECT_ALREADY_EXISTS. */
static inline bool mc__metadata_write_once(const char *key)
{
    return strstr(key, "rpc_meta") != NULL;
}

#endif
