/* backend_http.c: the HTTP metadata backend on libcurl.
 * Requests as upstream's HTTPStoragePlugin (transfer_metadata_plugin.cpp):
 * `GET|PUT|DELETE <url>?key=<curl-escaped key>` (or `&key=` when the URL already has a
 * query), PUT bodies sent as application/json. One easy handle per call, so calls from
 * any number of threads are independent (no shared handle, no lock).
 * With a cluster secret every request carries `Authorization: MC-HMAC ...` over its
 * method, target and body (src/common/auth.h part 3); a 401 is logged from this side's
 * point of view (which side lacks the secret, or that they differ). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "backend.h"
#include "common/auth.h"
#include "common/xalloc.h"
#include "mooncake/mc_time.h"
#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG "metadata"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int mc__md_curl_init(void)
{
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        mc_log(MC_LOG_ERROR, TAG, "curl_global_init failed: %s", curl_easy_strerror(curl_init_rc));
        return MC_INTERNAL_ERROR;
    }
    return MC_OK;
}

typedef mc__md_body body;

size_t mc__md_body_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    body *b = ud;
    size_t n = size * nmemb;
    if ((uint64_t)b->len + n > b->max) {
        b->overflow = true;
        return 0; /* aborts the transfer: CURLE_WRITE_ERROR */
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->data = mc_xrealloc(b->data, cap);
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* The backend's state: the secret, when there is one (md->impl; immutable). */
typedef struct http_impl {
    mc_auth_secret secret;
} http_impl;

/* Keeps the X-MC-Auth-Error header of a response (what a 401 says went wrong). */
typedef struct auth_hdr {
    char code[32];
} auth_hdr;

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
    auth_hdr *a = ud;
    size_t n = size * nmemb;
    static const char name[] = "x-mc-auth-error:";
    if (n > sizeof name - 1 && strncasecmp(ptr, name, sizeof name - 1) == 0) {
        const char *v = ptr + sizeof name - 1;
        const char *end = ptr + n;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        size_t k = 0;
        while (v + k < end && v[k] != '\r' && v[k] != '\n' && k + 1 < sizeof a->code)
            k++;
        memcpy(a->code, v, k);
        a->code[k] = '\0';
    }
    return n;
}

/* Performs one request. On return *status is the HTTP status (0 when none came back).
 * The response body is left in resp (caller frees resp->data). */
static int do_request(mc_metadata *md, const char *method, const char *key, const void *in,
                      size_t in_len, body *resp, long *status, auth_hdr *ah)
{
    *status = 0;
    int irc = mc__md_curl_init();
    if (irc != MC_OK)
        return irc;
    CURL *h = curl_easy_init();
    if (!h)
        return MC_INTERNAL_ERROR;
    char *esc = curl_easy_escape(h, key, (int)strlen(key));
    if (!esc) {
        curl_easy_cleanup(h);
        return MC_INTERNAL_ERROR;
    }
    const char *url = md->conn.url;
    size_t ulen = strlen(url) + strlen(esc) + 8;
    char *full = mc_xmalloc(ulen);
    snprintf(full, ulen, "%s%ckey=%s", url, strchr(url, '?') ? '&' : '?', esc);
    curl_free(esc);

    /* curl sends "Expect: 100-continue" for bodies over 1 MiB, so a server that refuses
     * the size (413) answers before the body travels. */
    struct curl_slist *hdrs = NULL;
    if (in)
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    http_impl *impl = md->impl;
    if (impl) {
        /* the request-target as curl sends it (PATH_AS_IS: no dot-segment squashing) */
        char *target = mc_auth_http_target(full);
        char value[MC_AUTH_HTTP_MAX_HEADER], line[MC_AUTH_HTTP_MAX_HEADER + 32];
        int src = mc_auth_http_sign(&impl->secret, method, target, in_len ? in : NULL, in_len,
                                    mc_wall_ms(), value, sizeof value);
        free(target);
        if (src != 0) {
            curl_slist_free_all(hdrs);
            curl_easy_cleanup(h);
            free(full);
            return MC_INTERNAL_ERROR;
        }
        snprintf(line, sizeof line, "Authorization: %s", value);
        hdrs = curl_slist_append(hdrs, line);
    }

    curl_easy_setopt(h, CURLOPT_URL, full);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)md->opts.timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)md->opts.connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mc__md_body_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, ah);
    if (strcmp(method, "GET") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (in) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)in_len);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, in_len ? in : "");
    }

    CURLcode rc = curl_easy_perform(h);
    int ret = MC_OK;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    } else if (rc == CURLE_WRITE_ERROR && resp->overflow) {
        ret = MC_BUFFER_OVERFLOW;
        mc_log(MC_LOG_WARN, TAG, "%s %s: value larger than %llu bytes", method, key,
               (unsigned long long)md->opts.max_value_bytes);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        ret = MC_RPC_TIMEOUT;
        mc_log(MC_LOG_WARN, TAG, "%s %s on %s: timed out", method, key, url);
    } else {
        ret = MC_RPC_FAIL;
        mc_log(MC_LOG_WARN, TAG, "%s %s on %s: %s", method, key, url, curl_easy_strerror(rc));
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(full);
    return ret;
}

/* Maps an HTTP status that is not 200 to a status code. A 404 to a PUT is not a missing
 * key (a metadata server stores any key it is given): the URL's path is not a metadata
 * endpoint, typically http://host:port without /metadata. That is a configuration error
 * (INVALID_PARAMS), logged naming the URL. */
static int map_status(mc_metadata *md, long st, const body *resp, const char *method,
                      const char *key, const auth_hdr *ah)
{
    switch (st) {
    case 401:
        if (!md->impl)
            mc_log(MC_LOG_ERROR, TAG,
                   "metadata server %s refused %s %s: it requires the cluster secret and "
                   "this client has none (set MC_AUTH_TOKEN_FILE to the cluster's token file)",
                   md->conn.url, method, key);
        else if (strcmp(ah->code, "server-has-no-secret") == 0)
            mc_log(MC_LOG_ERROR, TAG,
                   "metadata server %s refused %s %s: it has no cluster secret configured "
                   "but this client has one (configure the same --auth_token_file on the "
                   "server, or unset MC_AUTH_TOKEN_FILE here)",
                   md->conn.url, method, key);
        else
            mc_log(MC_LOG_ERROR, TAG,
                   "metadata server %s refused %s %s (%s): %s", md->conn.url, method, key,
                   ah->code[0] ? ah->code : "401",
                   strcmp(ah->code, "bad-mac") == 0
                       ? "it holds another cluster secret than this client"
                   : strcmp(ah->code, "stale") == 0
                       ? "the clocks of this host and the server differ by more than 30 s"
                       : (resp->data ? resp->data : "authentication failed"));
        return MC_ILLEGAL_CLIENT;
    case 404:
        if (strcmp(method, "PUT") == 0) {
            mc_log(MC_LOG_ERROR, TAG,
                   "metadata server %s answered 404 Not Found to PUT %s: that URL is not a "
                   "metadata endpoint. The HTTP metadata server (mooncake_master "
                   "--enable_http_metadata_server, mooncake_http_metadata_server) serves the "
                   "path /metadata: use http://HOST:PORT/metadata",
                   md->conn.url, key);
            return MC_INVALID_PARAMS;
        }
        return MC_OBJECT_NOT_FOUND;
    case 400:
        if (resp->data && strstr(resp->data, "Duplicate"))
            return MC_OBJECT_ALREADY_EXISTS;
        return MC_INVALID_PARAMS;
    case 413:
        return MC_BUFFER_OVERFLOW;
    default:
        mc_log(MC_LOG_WARN, TAG, "%s %s on %s: HTTP status %ld", method, key, md->conn.url,
               st);
        return MC_RPC_FAIL;
    }
}

static int http_get(mc_metadata *md, const char *key, char **value, size_t *len)
{
    body resp = {.max = md->opts.max_value_bytes};
    long st;
    auth_hdr ah = {{0}};
    int rc = do_request(md, "GET", key, NULL, 0, &resp, &st, &ah);
    if (rc == MC_OK && st != 200)
        rc = map_status(md, st, &resp, "GET", key, &ah);
    if (rc != MC_OK) {
        free(resp.data);
        return rc;
    }
    if (!resp.data) {
        resp.data = mc_xmalloc(1);
        resp.data[0] = '\0';
    }
    *value = resp.data;
    *len = resp.len;
    return MC_OK;
}

static int http_put(mc_metadata *md, const char *key, const void *value, size_t len)
{
    body resp = {.max = 65536};
    long st;
    auth_hdr ah = {{0}};
    int rc = do_request(md, "PUT", key, value ? value : "", len, &resp, &st, &ah);
    if (rc == MC_OK && st != 200)
        rc = map_status(md, st, &resp, "PUT", key, &ah);
    free(resp.data);
    return rc;
}

static int http_del(mc_metadata *md, const char *key)
{
    body resp = {.max = 65536};
    long st;
    auth_hdr ah = {{0}};
    int rc = do_request(md, "DELETE", key, NULL, 0, &resp, &st, &ah);
    if (rc == MC_OK && st != 200)
        rc = map_status(md, st, &resp, "DELETE", key, &ah);
    free(resp.data);
    return rc;
}

static void http_destroy(mc_metadata *md)
{
    http_impl *impl = md->impl;
    if (impl) {
        mc_auth_secret_wipe(&impl->secret);
        free(impl);
        md->impl = NULL;
    }
}

static const mc_metadata_ops http_ops = {
    .name = "http", .get = http_get, .put = http_put, .del = http_del, .destroy = http_destroy,
};

int mc__metadata_http_open(mc_metadata *md)
{
    if (mc__md_curl_init() != MC_OK)
        return MC_INTERNAL_ERROR;
    md->ops = &http_ops;
    md->impl = NULL;
    mc_auth_secret secret;
    if (md->opts.auth_secret) {
        secret = *md->opts.auth_secret;
    } else if (mc_auth_load(NULL, &secret, NULL, 0) != 0) {
        return MC_INVALID_PARAMS; /* the reason is logged, naming the file and variable */
    }
    md->opts.auth_secret = NULL; /* borrowed only for the create */
    if (mc_auth_enabled(&secret)) {
        http_impl *impl = mc_xcalloc(1, sizeof *impl);
        impl->secret = secret;
        md->impl = impl;
    }
    mc_auth_secret_wipe(&secret);
    return MC_OK;
}
