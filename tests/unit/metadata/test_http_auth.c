/* The HTTP metadata server and the curl backend with a cluster secret (issue 11), on
 * 127.0.0.1: the right secret works; no secret, another secret, and a server without
 * one fail the client's call with MC_ILLEGAL_CLIENT and a log line that says which side
 * lacks the secret; nothing is stored by a refused request; /health and /metrics stay
 * open; the refusal counters count. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <curl/curl.h>

#include "common/auth.h"
#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

/* The last ERROR line of the metadata client (tag "metadata"). */
static char last_error[1024];

static void sink(mc_log_level level, const char *tag, const char *msg, void *ctx)
{
    (void)ctx;
    if (level >= MC_LOG_ERROR && strcmp(tag, "metadata") == 0)
        snprintf(last_error, sizeof last_error, "%s", msg);
}

static mc_auth_secret secret_a, secret_b;

typedef struct pair {
    mc_http_metadata_server *srv;
    mc_metadata *md;
    char url[128];
} pair;

/* A server holding server_secret (NULL: open) and a client holding client_secret. */
static void start_pair(pair *p, const mc_auth_secret *server_secret,
                       const mc_auth_secret *client_secret)
{
    mc_http_metadata_server_opts o = {.auth = server_secret};
    assert_int_equal(mc_http_metadata_server_start("127.0.0.1", 0, &o, &p->srv), 0);
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%u/metadata",
             (unsigned)mc_http_metadata_server_port(p->srv));
    static const mc_auth_secret none;
    mc_metadata_opts mo = {.timeout_ms = 5000, .cluster_id = "",
                           .auth_secret = client_secret ? client_secret : &none};
    assert_int_equal(mc_metadata_create_opts(p->url, &mo, &p->md), MC_OK);
    last_error[0] = '\0';
}

static void stop_pair(pair *p)
{
    mc_metadata_destroy(p->md);
    mc_http_metadata_server_destroy(p->srv);
}

static long plain_get(const char *url)
{
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    long st = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_cleanup(h);
    return st;
}

static void test_right_secret_works(void **state)
{
    (void)state;
    pair p;
    start_pair(&p, &secret_a, &secret_a);
    assert_int_equal(mc_metadata_put(p.md, "mooncake/ram/a", "{\"x\":1}", 7), MC_OK);
    char *v = NULL;
    size_t n = 0;
    assert_int_equal(mc_metadata_get(p.md, "mooncake/ram/a", &v, &n), MC_OK);
    assert_int_equal(n, 7);
    free(v);
    assert_int_equal(mc_metadata_delete(p.md, "mooncake/ram/a"), MC_OK);
    assert_int_equal(mc_metadata_get(p.md, "mooncake/ram/a", &v, &n), MC_OBJECT_NOT_FOUND);
    /* /health and /metrics answer anyone */
    char url[160];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/health",
             (unsigned)mc_http_metadata_server_port(p.srv));
    assert_int_equal(plain_get(url), 200);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics",
             (unsigned)mc_http_metadata_server_port(p.srv));
    assert_int_equal(plain_get(url), 200);
    /* ... but /metadata does not */
    assert_int_equal(plain_get(p.url), 401);
    stop_pair(&p);
}

static void test_client_without_secret(void **state)
{
    (void)state;
    pair p;
    start_pair(&p, &secret_a, NULL);
    assert_int_equal(mc_metadata_put(p.md, "mooncake/ram/a", "x", 1), MC_ILLEGAL_CLIENT);
    assert_non_null(strstr(last_error, "requires the cluster secret and this client has none"));
    assert_int_equal(mc_http_metadata_server_count(p.srv), 0); /* nothing stored */
    size_t len;
    char *m = mc_http_metadata_server_metrics_text(p.srv, &len);
    assert_non_null(strstr(m, "http_metadata_refused_total{reason=\"auth_missing\"} 1"));
    free(m);
    stop_pair(&p);
}

static void test_other_secret(void **state)
{
    (void)state;
    pair p;
    start_pair(&p, &secret_a, &secret_b);
    assert_int_equal(mc_metadata_put(p.md, "mooncake/ram/a", "x", 1), MC_ILLEGAL_CLIENT);
    assert_non_null(strstr(last_error, "another cluster secret"));
    assert_int_equal(mc_http_metadata_server_count(p.srv), 0);
    stop_pair(&p);
}

static void test_server_without_secret(void **state)
{
    (void)state;
    pair p;
    start_pair(&p, NULL, &secret_a);
    assert_int_equal(mc_metadata_put(p.md, "mooncake/ram/a", "x", 1), MC_ILLEGAL_CLIENT);
    assert_non_null(strstr(last_error, "has no cluster secret configured but this client has"));
    assert_int_equal(mc_http_metadata_server_count(p.srv), 0);
    stop_pair(&p);
    /* both open: as today */
    start_pair(&p, NULL, NULL);
    assert_int_equal(mc_metadata_put(p.md, "mooncake/ram/a", "x", 1), MC_OK);
    stop_pair(&p);
}

static void test_key_cap_507(void **state)
{
    (void)state;
    mc_http_metadata_server_opts o = {.auth = &secret_a, .max_keys = 2};
    mc_http_metadata_server *srv;
    assert_int_equal(mc_http_metadata_server_start("127.0.0.1", 0, &o, &srv), 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metadata",
             (unsigned)mc_http_metadata_server_port(srv));
    mc_metadata_opts mo = {.timeout_ms = 5000, .cluster_id = "", .auth_secret = &secret_a};
    mc_metadata *md;
    assert_int_equal(mc_metadata_create_opts(url, &mo, &md), MC_OK);
    assert_int_equal(mc_metadata_put(md, "k1", "x", 1), MC_OK);
    assert_int_equal(mc_metadata_put(md, "k2", "x", 1), MC_OK);
    assert_int_equal(mc_metadata_put(md, "k3", "x", 1), MC_RPC_FAIL); /* 507 */
    assert_int_equal(mc_metadata_put(md, "k2", "y", 1), MC_OK);       /* not a new key */
    assert_int_equal(mc_metadata_delete(md, "k1"), MC_OK);
    assert_int_equal(mc_metadata_put(md, "k3", "x", 1), MC_OK);
    mc_metadata_destroy(md);
    mc_http_metadata_server_destroy(srv);
}

int main(void)
{
    mc_log_set_sink(sink, NULL);
    const char *a = "unit-test-cluster-secret-AAAAAAAA";
    const char *b = "unit-test-cluster-secret-BBBBBBBB";
    if (mc_auth_secret_set(&secret_a, a, strlen(a), NULL, 0) ||
        mc_auth_secret_set(&secret_b, b, strlen(b), NULL, 0))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_right_secret_works),
        cmocka_unit_test(test_client_without_secret),
        cmocka_unit_test(test_other_secret),
        cmocka_unit_test(test_server_without_secret),
        cmocka_unit_test(test_key_cap_507),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
