/* backend_etcd.c: the etcd v3 metadata backend, over etcd's HTTP/JSON gateway (served
 * by every etcd >= 3.4 on its client port) with libcurl. Upstream's EtcdStoragePlugin
 * (transfer_metadata_plugin.cpp, USE_ETCD builds) stores the same keys as plain etcd
 * keys with the JSON as the value; so do we, so upstream engines and ours read each
 * other's entries.
 *
 * Each call is one POST of JSON to <endpoint>/v3/kv/{range,put,deleterange,txn}, keys
 * and values base64-encoded (the gateway's encoding of protobuf bytes). One curl easy
 * handle per call (no shared handle, no lock), as backend_http.c. Failover: a call
 * starts at the endpoint that answered last (impl->cur) and moves on to the next on a
 * connection error, a timeout, or a status that another member may not give (404, 408,
 * 5xx). Codes and the write-once rule: include/mooncake/metadata.h after
 * mc_metadata_delete. */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "backend.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"

#define TAG "metadata"
#define BASE_MAX (MC_METADATA_MAX_HOST + 32)
#define ERRS_MAX 1024 /* bytes of the per-endpoint error list in a failure message */

typedef struct etcd_impl {
    size_t n;                                    /* endpoints; immutable */
    char base[MC_METADATA_MAX_ENDPOINTS][BASE_MAX]; /* "http://h:p"; immutable */
    char where[MC_METADATA_MAX_ENDPOINTS][BASE_MAX]; /* "h:p" for messages; immutable */
    uint64_t max_resp;                           /* bytes of one answer; immutable */
    atomic_uint cur;                             /* endpoint that answered last */
    mc__md_ratelimit rl[MC_METADATA_MAX_ENDPOINTS]; /* WARN lines per endpoint */
} etcd_impl;

bool mc__md_rl_take(mc__md_ratelimit *rl, unsigned *suppressed)
{
    uint64_t now = mc_now_ms();
    uint64_t next = atomic_load(&rl->next_ms);
    if (now < next || !atomic_compare_exchange_strong(&rl->next_ms, &next,
                                                      now + MC__MD_RL_MS)) {
        atomic_fetch_add(&rl->suppressed, 1);
        return false;
    }
    *suppressed = atomic_exchange(&rl->suppressed, 0);
    return true;
}

/* ---- base64 (RFC 4648 with padding, what the gateway reads and writes): OpenSSL's
 * EVP_EncodeBlock / EVP_DecodeBlock (libcrypto is linked for the cluster secret) ---- */

char *mc__md_b64_encode(const void *data, size_t len)
{
    char *out = mc_xmalloc((len + 2) / 3 * 4 + 1);
    EVP_EncodeBlock((unsigned char *)out, data, (int)len); /* NUL-terminates */
    return out;
}

/* Decodes s[0..len) into a new NUL-terminated buffer. -1 when s is not padded base64
 * (the gateway always pads) or too long for one call. */
int mc__md_b64_decode(const char *s, size_t len, char **out, size_t *outlen)
{
    if (len % 4 != 0 || len > INT_MAX)
        return -1;
    size_t pad = 0;
    while (pad < 2 && pad < len && s[len - 1 - pad] == '=')
        pad++;
    char *o = mc_xmalloc(len / 4 * 3 + 1);
    int n = EVP_DecodeBlock((unsigned char *)o, (const unsigned char *)s, (int)len);
    if (n < 0 || (size_t)n < pad) {
        free(o);
        return -1;
    }
    n -= (int)pad; /* EVP_DecodeBlock counts the padding as zero bytes */
    o[n] = '\0';
    *out = o;
    *outlen = (size_t)n;
    return 0;
}

/* ---- one request ----------------------------------------------------------------------- */

typedef mc__md_body body;

/* json_post_setopt: sets up easy handle h to POST payload (plen bytes, borrowed until
 * the transfer ends) as JSON to url, over plain HTTP only, no redirects, no signals,
 * md's connect timeout. Returns the request headers: the caller frees them
 * (curl_slist_free_all) after the transfer. The caller sets the write callback and any
 * overall timeout. */
static struct curl_slist *json_post_setopt(mc_metadata *md, CURL *h, const char *url,
                                           const char *payload, size_t plen)
{
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue wait on large values */
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)md->opts.connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)CURLPROTO_HTTP);
#endif
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)plen);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
    return hdrs;
}

/* POSTs payload to base + path. *status: the HTTP status (0 when none came back). */
static CURLcode post(mc_metadata *md, const char *base, const char *path, const char *payload,
                     size_t plen, body *resp, long *status)
{
    *status = 0;
    CURL *h = curl_easy_init();
    if (!h)
        return CURLE_OUT_OF_MEMORY;
    char url[BASE_MAX + 32];
    snprintf(url, sizeof url, "%s%s", base, path);
    struct curl_slist *hdrs = json_post_setopt(md, h, url, payload, plen);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)md->opts.timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mc__md_body_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return rc;
}

/* The gateway's error text: {"error": "...", "message": "...", "code": N}. Borrowed
 * from j (or a static ""). */
static const char *gw_error(json_t *j)
{
    const char *m = json_string_value(json_object_get(j, "message"));
    if (!m || !*m)
        m = json_string_value(json_object_get(j, "error"));
    return m ? m : "";
}

static void errs_add(char *errs, mc__md_ratelimit *rl, const char *where, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));

/* Adds "where: <reason>" to errs, at most once per MC__MD_RL_MS per endpoint (rl): a
 * client retrying an unreachable etcd (a setup waiting 30 s for a leader) would print
 * hundreds of lines otherwise; the dropped ones are counted in the next. */
static void errs_add(char *errs, mc__md_ratelimit *rl, const char *where, const char *fmt,
                     ...)
{
    unsigned dropped = 0;
    if (!mc__md_rl_take(rl, &dropped))
        return;
    size_t used = strlen(errs);
    if (used + 8 >= ERRS_MAX)
        return;
    used += (size_t)snprintf(errs + used, ERRS_MAX - used, "%s%s: ", used ? "; " : "", where);
    if (used >= ERRS_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    used += (size_t)vsnprintf(errs + used, ERRS_MAX - used, fmt, ap);
    va_end(ap);
    if (dropped && used < ERRS_MAX)
        snprintf(errs + used, ERRS_MAX - used, " (%u more failures of it not logged in the "
                 "last %u s)", dropped, MC__MD_RL_MS / 1000);
}

/* One call: POST req to path on the endpoints in turn (see the file comment).
 *   op/key: for messages. On MC_OK *out is the answer's JSON object (caller decrefs).
 * Returns MC_OK, MC_BUFFER_OVERFLOW (answer larger than allowed, or etcd's "too large"),
 * MC_INVALID_PARAMS (another 4xx: the request would fail on every member),
 * MC_RPC_TIMEOUT / MC_RPC_FAIL (no endpoint answered; logged with each one's error). */
int mc__md_etcd_call(mc_metadata *md, const char *path, json_t *req, const char *op,
                     const char *key, json_t **out)
{
    etcd_impl *e = md->impl;
    char *payload = json_dumps(req, JSON_COMPACT);
    if (!payload)
        mc_oom(0);
    size_t plen = strlen(payload);
    char errs[ERRS_MAX] = "";
    int last = MC_RPC_FAIL;
    unsigned start = atomic_load(&e->cur);
    for (size_t i = 0; i < e->n; i++) {
        unsigned ep = (unsigned)((start + i) % e->n);
        const char *where = e->where[ep];
        body resp = {.max = e->max_resp};
        long st;
        CURLcode cc = post(md, e->base[ep], path, payload, plen, &resp, &st);
        json_t *j = NULL;
        if (cc == CURLE_OK && resp.len)
            j = json_loadb(resp.data, resp.len, 0, NULL);
        if (cc == CURLE_OK && st == 200 && json_is_object(j)) {
            free(resp.data);
            free(payload);
            if (ep != start)
                atomic_store(&e->cur, ep);
            *out = j;
            return MC_OK;
        }
        if (cc == CURLE_WRITE_ERROR && resp.overflow) {
            mc_log(MC_LOG_WARN, TAG, "etcd %s %s on %s: answer larger than %llu bytes", op,
                   key, where, (unsigned long long)e->max_resp);
            free(resp.data);
            free(payload);
            return MC_BUFFER_OVERFLOW;
        }
        const char *msg = j ? gw_error(j) : "";
        if (cc == CURLE_OK && st >= 400 && st < 500 && st != 404 && st != 408) {
            /* the request itself is refused: every member would refuse it */
            int rc = strstr(msg, "too large") || strstr(msg, "larger than max")
                         ? MC_BUFFER_OVERFLOW
                         : MC_INVALID_PARAMS;
            mc_log(MC_LOG_WARN, TAG, "etcd %s %s on %s: HTTP %ld: %s", op, key, where, st,
                   *msg ? msg : (resp.data ? resp.data : ""));
            json_decref(j);
            free(resp.data);
            free(payload);
            return rc;
        }
        if (cc == CURLE_OPERATION_TIMEDOUT) {
            errs_add(errs, &e->rl[ep], where, "timed out after %u ms", md->opts.timeout_ms);
            last = MC_RPC_TIMEOUT;
        } else if (cc != CURLE_OK) {
            errs_add(errs, &e->rl[ep], where, "%s", curl_easy_strerror(cc));
            last = MC_RPC_FAIL;
        } else if (st == 404) {
            errs_add(errs, &e->rl[ep], where,
                     "HTTP 404 on %s: not an etcd v3 gateway (etcd >= 3.4)", path);
            last = MC_RPC_FAIL;
        } else if (st == 200) {
            errs_add(errs, &e->rl[ep], where, "the answer is not a JSON object");
            last = MC_RPC_FAIL;
        } else {
            errs_add(errs, &e->rl[ep], where, "HTTP %ld%s%s", st, *msg ? ": " : "", msg);
            last = st == 408 || st == 504 ? MC_RPC_TIMEOUT : MC_RPC_FAIL;
        }
        json_decref(j);
        free(resp.data);
    }
    free(payload);
    if (errs[0]) /* empty: every endpoint's failure was rate-limited */
        mc_log(MC_LOG_WARN, TAG, "etcd %s %s: no endpoint of %s answered: %s", op, key,
               md->conn.url, errs);
    return last;
}

/* An int64 field, which the gateway writes as a string ("1") and may read as either. */
long long mc__md_json_i64(json_t *v)
{
    if (json_is_integer(v))
        return (long long)json_integer_value(v);
    const char *s = json_string_value(v);
    return s ? strtoll(s, NULL, 10) : 0;
}

/* A field under its proto name or its JSON (camelCase) name. */
static json_t *field(json_t *o, const char *proto_name, const char *json_name)
{
    json_t *v = json_object_get(o, proto_name);
    return v ? v : json_object_get(o, json_name);
}

/* The value of the first kv of a range answer (r: the range response object).
 * Returns MC_OK with *value and *len (new buffer), MC_OBJECT_NOT_FOUND (no kvs),
 * MC_BUFFER_OVERFLOW (larger than max_value_bytes), MC_RPC_FAIL (not base64). */
static int first_value(mc_metadata *md, json_t *r, const char *key, char **value, size_t *len)
{
    json_t *kv = json_array_get(json_object_get(r, "kvs"), 0);
    if (!json_is_object(kv))
        return MC_OBJECT_NOT_FOUND;
    json_t *v = json_object_get(kv, "value"); /* absent: an empty value */
    const char *s = v ? json_string_value(v) : "";
    if (!s || mc__md_b64_decode(s, strlen(s), value, len) != 0) {
        mc_log(MC_LOG_WARN, TAG, "etcd get %s on %s: the value is not base64", key,
               md->conn.url);
        return MC_RPC_FAIL;
    }
    if (*len > md->opts.max_value_bytes) {
        mc_log(MC_LOG_WARN, TAG, "etcd get %s: value larger than %llu bytes", key,
               (unsigned long long)md->opts.max_value_bytes);
        free(*value);
        *value = NULL;
        return MC_BUFFER_OVERFLOW;
    }
    return MC_OK;
}

static json_t *key_req(const char *key)
{
    char *k = mc__md_b64_encode(key, strlen(key));
    json_t *req = json_pack("{s:s}", "key", k);
    free(k);
    if (!req)
        mc_oom(0);
    return req;
}

static int etcd_get(mc_metadata *md, const char *key, char **value, size_t *len)
{
    json_t *req = key_req(key), *r = NULL;
    int rc = mc__md_etcd_call(md, "/v3/kv/range", req, "get", key, &r);
    json_decref(req);
    if (rc == MC_OK)
        rc = first_value(md, r, key, value, len);
    json_decref(r);
    return rc;
}

/* Write-once put (mc__metadata_write_once keys): a txn that puts when the key's version
 * is 0 (absent) and otherwise reads it, so "absent" and "the same bytes" both succeed
 * in one round trip, atomically. */
static int put_once(mc_metadata *md, const char *key, const char *k64, const char *v64,
                    const void *value, size_t len)
{
    json_t *req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s}}], s:[{s:{s:s}}]}",
                            "compare", "key", k64, "target", "VERSION", "result", "EQUAL",
                            "version", "0", "success", "request_put", "key", k64, "value",
                            v64, "failure", "request_range", "key", k64);
    if (!req)
        mc_oom(0);
    json_t *r = NULL;
    int rc = mc__md_etcd_call(md, "/v3/kv/txn", req, "put", key, &r);
    json_decref(req);
    if (rc != MC_OK)
        return rc;
    if (json_is_true(json_object_get(r, "succeeded"))) {
        json_decref(r);
        return MC_OK;
    }
    json_t *resp0 = json_array_get(json_object_get(r, "responses"), 0);
    json_t *range = field(resp0, "response_range", "responseRange");
    char *old = NULL;
    size_t olen = 0;
    rc = first_value(md, range, key, &old, &olen);
    if (rc == MC_OK)
        rc = olen == len && memcmp(old, value, len) == 0 ? MC_OK : MC_OBJECT_ALREADY_EXISTS;
    else if (rc == MC_OBJECT_NOT_FOUND || rc == MC_BUFFER_OVERFLOW)
        rc = MC_OBJECT_ALREADY_EXISTS; /* it existed at the txn's revision */
    free(old);
    json_decref(r);
    return rc;
}

static int etcd_put(mc_metadata *md, const char *key, const void *value, size_t len)
{
    char *k64 = mc__md_b64_encode(key, strlen(key));
    char *v64 = mc__md_b64_encode(value ? value : "", len);
    int rc;
    if (mc__metadata_write_once(key)) {
        rc = put_once(md, key, k64, v64, value ? value : "", len);
    } else {
        json_t *req = json_pack("{s:s, s:s}", "key", k64, "value", v64), *r = NULL;
        if (!req)
            mc_oom(len);
        rc = mc__md_etcd_call(md, "/v3/kv/put", req, "put", key, &r);
        json_decref(req);
        json_decref(r);
    }
    free(k64);
    free(v64);
    return rc;
}

static int etcd_del(mc_metadata *md, const char *key)
{
    json_t *req = key_req(key), *r = NULL;
    int rc = mc__md_etcd_call(md, "/v3/kv/deleterange", req, "delete", key, &r);
    json_decref(req);
    if (rc == MC_OK && mc__md_json_i64(json_object_get(r, "deleted")) < 1)
        rc = MC_OBJECT_NOT_FOUND;
    json_decref(r);
    return rc;
}

/* ---- streaming (the watch) ------------------------------------------------------------ */

#define STREAM_LINE_MAX (4u << 20) /* bytes of one streamed message */

struct mc__md_stream {
    pthread_mutex_t mu; /* guards multi's wake-up against its free */
    CURLM *multi;       /* made by the first stream; woken by stop */
    atomic_bool stop;
};

mc__md_stream *mc__md_stream_new(void)
{
    mc__md_stream *st = mc_xcalloc(1, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    atomic_init(&st->stop, false);
    return st;
}

void mc__md_stream_free(mc__md_stream *st)
{
    if (!st)
        return;
    if (st->multi)
        curl_multi_cleanup(st->multi);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

void mc__md_stream_stop(mc__md_stream *st)
{
    atomic_store(&st->stop, true);
    pthread_mutex_lock(&st->mu);
    if (st->multi)
        curl_multi_wakeup(st->multi);
    pthread_mutex_unlock(&st->mu);
}

bool mc__md_stream_stopped(mc__md_stream *st)
{
    return atomic_load(&st->stop);
}

typedef struct stream_ctx {
    body buf;    /* bytes of the message being received (no newline yet) */
    int (*on_msg)(void *ctx, json_t *obj);
    void *ctx;
    bool ended;  /* on_msg asked to end */
    bool bad;    /* a message over STREAM_LINE_MAX or not JSON */
    size_t msgs;
} stream_ctx;

/* Takes every complete line of sc->buf to on_msg; keeps the rest. */
static void stream_lines(stream_ctx *sc)
{
    size_t start = 0;
    for (size_t i = 0; i < sc->buf.len && !sc->ended; i++) {
        if (sc->buf.data[i] != '\n')
            continue;
        size_t len = i - start;
        json_t *j = len ? json_loadb(sc->buf.data + start, len, 0, NULL) : NULL;
        start = i + 1;
        if (!json_is_object(j)) {
            json_decref(j);
            if (len > 1) /* not an empty line */
                sc->bad = true;
            continue;
        }
        sc->msgs++;
        if (sc->on_msg(sc->ctx, j) != 0)
            sc->ended = true;
        json_decref(j);
    }
    memmove(sc->buf.data, sc->buf.data + start, sc->buf.len - start);
    sc->buf.len -= start;
    sc->buf.data[sc->buf.len] = '\0';
}

static size_t stream_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    stream_ctx *sc = ud;
    size_t n = size * nmemb;
    if (sc->buf.len + n + 1 > STREAM_LINE_MAX) {
        sc->bad = true;
        return 0; /* aborts the transfer */
    }
    if (sc->buf.len + n + 1 > sc->buf.cap) {
        size_t cap = sc->buf.cap ? sc->buf.cap : 4096;
        while (cap < sc->buf.len + n + 1)
            cap *= 2;
        sc->buf.data = mc_xrealloc(sc->buf.data, cap);
        sc->buf.cap = cap;
    }
    memcpy(sc->buf.data + sc->buf.len, ptr, n);
    sc->buf.len += n;
    sc->buf.data[sc->buf.len] = '\0';
    stream_lines(sc);
    return sc->ended || sc->bad ? 0 : n;
}

int mc__md_etcd_stream(mc_metadata *md, mc__md_stream *st, const char *path, json_t *req,
                       uint32_t max_ms, int (*on_msg)(void *ctx, json_t *obj), void *ctx)
{
    etcd_impl *e = md->impl;
    if (atomic_load(&st->stop))
        return MC_OK;
    pthread_mutex_lock(&st->mu);
    if (!st->multi)
        st->multi = curl_multi_init();
    CURLM *m = st->multi;
    pthread_mutex_unlock(&st->mu);
    if (!m)
        return MC_INTERNAL_ERROR;
    char *payload = json_dumps(req, JSON_COMPACT);
    if (!payload)
        mc_oom(0);
    unsigned ep = atomic_load(&e->cur) % (unsigned)e->n;
    CURL *h = curl_easy_init();
    if (!h) {
        free(payload);
        return MC_INTERNAL_ERROR;
    }
    char url[BASE_MAX + 32];
    snprintf(url, sizeof url, "%s%s", e->base[ep], path);
    stream_ctx sc = {.on_msg = on_msg, .ctx = ctx};
    struct curl_slist *hdrs = json_post_setopt(md, h, url, payload, strlen(payload));
    /* a member that vanished without a FIN: found by TCP keepalive (and by the caller's
     * poll every max_ms at the latest) */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 2L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, stream_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sc);
    curl_multi_add_handle(m, h);
    uint64_t end = mc_deadline_ms(max_ms);
    int running = 1;
    bool expired = false;
    while (running && !atomic_load(&st->stop)) {
        if (curl_multi_perform(m, &running) != CURLM_OK)
            break;
        if (!running)
            break;
        uint64_t left = mc_ms_left(end);
        if (left == 0) {
            expired = true;
            break;
        }
        curl_multi_poll(m, NULL, 0, left < 1000 ? (int)left : 1000, NULL);
    }
    CURLcode cc = CURLE_OK;
    bool done = false;
    int q;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(m, &q)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == h) {
            cc = msg->data.result;
            done = true;
        }
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(m, h);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(payload);
    int rc = MC_OK;
    unsigned dropped = 0;
    if (atomic_load(&st->stop) || expired || sc.ended) {
        rc = MC_OK;
    } else if (status >= 400 && status < 500 && status != 404 && status != 408) {
        if (mc__md_rl_take(&e->rl[ep], &dropped))
            mc_log(MC_LOG_WARN, TAG, "etcd stream %s on %s: HTTP %ld: %.200s", path,
                   e->where[ep], status, sc.buf.data ? sc.buf.data : "");
        rc = MC_INVALID_PARAMS;
    } else {
        /* the member closed the stream, or did not answer: the next try uses another */
        rc = done && cc == CURLE_OPERATION_TIMEDOUT ? MC_RPC_TIMEOUT : MC_RPC_FAIL;
        if (sc.msgs == 0 && e->n > 1)
            atomic_compare_exchange_strong(&e->cur, &ep, (ep + 1) % (unsigned)e->n);
        if (mc__md_rl_take(&e->rl[ep], &dropped))
            mc_log(MC_LOG_WARN, TAG, "etcd stream %s on %s ended: %s%s (%u more not logged)",
                   path, e->where[ep],
                   done && cc != CURLE_OK ? curl_easy_strerror(cc) : "closed by the peer",
                   sc.bad ? ", an undecodable message" : "", dropped);
    }
    free(sc.buf.data);
    return rc;
}

static void etcd_destroy(mc_metadata *md)
{
    free(md->impl);
    md->impl = NULL;
}

static const mc_metadata_ops etcd_ops = {
    .name = "etcd", .get = etcd_get, .put = etcd_put, .del = etcd_del, .destroy = etcd_destroy,
};

int mc__metadata_etcd_open(mc_metadata *md)
{
    if (mc__md_curl_init() != MC_OK)
        return MC_INTERNAL_ERROR;
    etcd_impl *e = mc_xcalloc(1, sizeof *e);
    e->n = md->conn.n_endpoints;
    for (size_t i = 0; i < e->n; i++) {
        const mc_metadata_endpoint *ep = &md->conn.endpoints[i];
        bool v6 = strchr(ep->host, ':') != NULL;
        snprintf(e->where[i], BASE_MAX, "%s%s%s:%u", v6 ? "[" : "", ep->host, v6 ? "]" : "",
                 (unsigned)ep->port);
        snprintf(e->base[i], BASE_MAX, "http://%s", e->where[i]);
    }
    /* base64 grows values by 4/3; the rest of an answer (header, key) stays far below
     * 64 KiB with keys of at most MC_METADATA_MAX_KEY bytes */
    e->max_resp = md->opts.max_value_bytes / 3 * 4 + 4 + (64u << 10);
    atomic_init(&e->cur, 0);
    md->ops = &etcd_ops;
    md->impl = e;
    return MC_OK;
}
