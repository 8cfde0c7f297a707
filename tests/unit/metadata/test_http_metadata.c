/* The HTTP metadata server and the curl backend against each other on 127.0.0.1:
 * every status code of the contract (200/400/404/405/413/507, rpc_meta write-once),
 * percent-encoded keys, binary and empty values, the typed helpers, a taken port
 * (EADDRINUSE), a dead and a silent server (RPC_FAIL / RPC_TIMEOUT), concurrent
 * clients, and stop. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <curl/curl.h>

#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

typedef struct fixture {
    mc_http_metadata_server *srv;
    mc_metadata *md;
    char url[128];
} fixture;

static int setup_opts(void **state, const mc_http_metadata_server_opts *o)
{
    fixture *f = calloc(1, sizeof *f);
    if (mc_http_metadata_server_start("127.0.0.1", 0, o, &f->srv) != 0)
        return -1;
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%u/metadata",
             (unsigned)mc_http_metadata_server_port(f->srv));
    mc_metadata_opts mo = {.timeout_ms = 5000, .cluster_id = ""};
    if (mc_metadata_create_opts(f->url, &mo, &f->md) != MC_OK)
        return -1;
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_opts(state, NULL);
}

static int teardown(void **state)
{
    fixture *f = *state;
    mc_metadata_destroy(f->md);
    mc_http_metadata_server_destroy(f->srv);
    free(f);
    return 0;
}

/* ---- a raw HTTP client, to see status codes and headers ------------------------- */

typedef struct raw_resp {
    long status;
    char body[4096];
    size_t len;
    char ctype[128];
} raw_resp;

static size_t raw_data(char *p, size_t s, size_t n, void *ud)
{
    raw_resp *r = ud;
    size_t k = s * n;
    size_t room = sizeof r->body - 1 - r->len;
    memcpy(r->body + r->len, p, k < room ? k : room);
    r->len += k < room ? k : room;
    r->body[r->len] = '\0';
    return k;
}

static void raw(const fixture *f, const char *method, const char *path_query, const char *body,
                size_t len, raw_resp *r)
{
    memset(r, 0, sizeof *r);
    char url[8192];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s",
             (unsigned)mc_http_metadata_server_port(f->srv), path_query);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, raw_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    char *ct = NULL;
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(r->ctype, sizeof r->ctype, "%s", ct);
    curl_easy_cleanup(h);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_put_get_delete(void **state)
{
    fixture *f = *state;
    char *v = NULL;
    size_t n = 0;
    assert_int_equal(mc_metadata_get(f->md, "mooncake/ram/a", &v, &n), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_metadata_put(f->md, "mooncake/ram/a", "{\"x\":1}", 7), MC_OK);
    assert_int_equal(mc_metadata_get(f->md, "mooncake/ram/a", &v, &n), MC_OK);
    assert_int_equal(n, 7);
    assert_string_equal(v, "{\"x\":1}");
    free(v);
    /* overwrite (not rpc_meta): allowed */
    assert_int_equal(mc_metadata_put(f->md, "mooncake/ram/a", "{}", 2), MC_OK);
    assert_int_equal(mc_metadata_get(f->md, "mooncake/ram/a", &v, &n), MC_OK);
    assert_string_equal(v, "{}");
    free(v);
    assert_int_equal(mc_http_metadata_server_count(f->srv), 1);
    assert_int_equal(mc_metadata_delete(f->md, "mooncake/ram/a"), MC_OK);
    assert_int_equal(mc_metadata_delete(f->md, "mooncake/ram/a"), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_metadata_get(f->md, "mooncake/ram/a", &v, &n), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_http_metadata_server_count(f->srv), 0);
    /* binary with NUL bytes, and an empty value */
    const char bin[] = {'a', 0, 'b', (char)0xff, 0};
    assert_int_equal(mc_metadata_put(f->md, "bin", bin, sizeof bin), MC_OK);
    assert_int_equal(mc_metadata_get(f->md, "bin", &v, &n), MC_OK);
    assert_int_equal(n, sizeof bin);
    assert_memory_equal(v, bin, sizeof bin);
    free(v);
    assert_int_equal(mc_metadata_put(f->md, "empty", NULL, 0), MC_OK);
    assert_int_equal(mc_metadata_get(f->md, "empty", &v, &n), MC_OK);
    assert_int_equal(n, 0);
    assert_string_equal(v, "");
    free(v);
    /* bad keys never leave the client */
    assert_int_equal(mc_metadata_put(f->md, "", "x", 1), MC_INVALID_PARAMS);
    assert_int_equal(mc_metadata_get(f->md, NULL, &v, &n), MC_INVALID_PARAMS);
    assert_int_equal(mc_metadata_put(f->md, "k", NULL, 3), MC_INVALID_PARAMS);
}

static void test_encoded_keys(void **state)
{
    fixture *f = *state;
    static const char *const keys[] = {
        "mooncake/ram/10.0.0.1:1234", "a b", "a+b", "100%", "x&key=y", "q?r", "h#f", "=",
        "caf\xc3\xa9", " lead", "trail ", "a/b/c@d",
    };
    size_t nk = sizeof keys / sizeof keys[0];
    for (size_t i = 0; i < nk; i++) {
        char val[64];
        snprintf(val, sizeof val, "v%zu", i);
        assert_int_equal(mc_metadata_put(f->md, keys[i], val, strlen(val)), MC_OK);
    }
    assert_int_equal(mc_http_metadata_server_count(f->srv), nk); /* all distinct */
    for (size_t i = 0; i < nk; i++) {
        char val[64], *v;
        size_t n;
        snprintf(val, sizeof val, "v%zu", i);
        assert_int_equal(mc_metadata_get(f->md, keys[i], &v, &n), MC_OK);
        assert_string_equal(v, val);
        free(v);
    }
    /* the server decodes %XX and '+' itself */
    raw_resp r;
    raw(f, "GET", "/metadata?key=a%20b", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "v1");
    raw(f, "GET", "/metadata?key=a+b", NULL, 0, &r);
    assert_string_equal(r.body, "v1");
    raw(f, "GET", "/metadata?key=a%2Bb", NULL, 0, &r);
    assert_string_equal(r.body, "v2");
    raw(f, "GET", "/metadata?other=1&key=100%25", NULL, 0, &r);
    assert_string_equal(r.body, "v3");
    /* a key of exactly the limit works, one more byte is refused by both sides */
    char *k = malloc(MC_METADATA_MAX_KEY + 2);
    memset(k, 'k', MC_METADATA_MAX_KEY + 1);
    k[MC_METADATA_MAX_KEY] = '\0';
    assert_int_equal(mc_metadata_put(f->md, k, "1", 1), MC_OK);
    k[MC_METADATA_MAX_KEY] = 'k';
    k[MC_METADATA_MAX_KEY + 1] = '\0';
    assert_int_equal(mc_metadata_put(f->md, k, "1", 1), MC_INVALID_PARAMS);
    char path[MC_METADATA_MAX_KEY + 64];
    snprintf(path, sizeof path, "/metadata?key=%s", k);
    raw(f, "PUT", path, "1", 1, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.body, "metadata key too long");
    free(k);
}

static void test_status_codes(void **state)
{
    fixture *f = *state;
    raw_resp r;
    raw(f, "GET", "/health", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "OK");
    raw(f, "PUT", "/metadata?key=k1", "{\"a\":1}", 7, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "metadata updated");
    raw(f, "GET", "/metadata?key=k1", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"a\":1}");
    assert_string_equal(r.ctype, "application/json");
    raw(f, "GET", "/metadata?key=nope", NULL, 0, &r);
    assert_int_equal(r.status, 404);
    assert_string_equal(r.body, "metadata not found");
    static const char *const missing[] = {"/metadata", "/metadata?key=", "/metadata?key",
                                          "/metadata?key=%20%09", "/metadata?kee=k1",
                                          "/metadata?key=+"};
    static const char *const methods[] = {"GET", "PUT", "DELETE"};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        for (size_t m = 0; m < 3; m++) {
            raw(f, methods[m], missing[i], m == 1 ? "x" : NULL, 1, &r);
            if (r.status != 400)
                fail_msg("%s %s -> %ld", methods[m], missing[i], r.status);
            assert_string_equal(r.body, "Missing key parameter");
            assert_string_equal(r.ctype, "application/json");
        }
    }
    raw(f, "GET", "/metadata?key=a%00b", NULL, 0, &r);
    assert_int_equal(r.status, 400);
    raw(f, "POST", "/metadata?key=k1", "x", 1, &r);
    assert_int_equal(r.status, 405);
    assert_string_equal(r.body, "Method not allowed");
    raw(f, "PATCH", "/metadata?key=k1", NULL, 0, &r);
    assert_int_equal(r.status, 405);
    raw(f, "DELETE", "/health", NULL, 0, &r);
    assert_int_equal(r.status, 405);
    raw(f, "GET", "/other", NULL, 0, &r);
    assert_int_equal(r.status, 404);
    raw(f, "GET", "/metadata/extra?key=k1", NULL, 0, &r);
    assert_int_equal(r.status, 404);
    raw(f, "DELETE", "/metadata?key=k1", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "metadata deleted");
    raw(f, "DELETE", "/metadata?key=k1", NULL, 0, &r);
    assert_int_equal(r.status, 404);
    assert_string_equal(r.body, "metadata not found");
    assert_int_equal(mc_http_metadata_server_count(f->srv), 0);
}

static void test_rpc_meta_write_once(void **state)
{
    fixture *f = *state;
    raw_resp r;
    const char *k = "/metadata?key=mooncake/rpc_meta/n1";
    raw(f, "PUT", k, "{\"p\":1}", 7, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "metadata updated");
    raw(f, "PUT", k, "{\"p\":1}", 7, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "metadata unchanged");
    raw(f, "PUT", k, "{\"p\":2}", 7, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.body, "Duplicate rpc_meta key not allowed");
    raw(f, "GET", k, NULL, 0, &r);
    assert_string_equal(r.body, "{\"p\":1}"); /* the first value stays */
    /* through the client: the refusal has its own code */
    assert_int_equal(mc_metadata_put(f->md, "mooncake/rpc_meta/n1", "{\"p\":2}", 7),
                     MC_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_metadata_put(f->md, "mooncake/rpc_meta/n1", "{\"p\":1}", 7), MC_OK);
    /* after a delete the key can be written again */
    assert_int_equal(mc_metadata_delete(f->md, "mooncake/rpc_meta/n1"), MC_OK);
    assert_int_equal(mc_metadata_put(f->md, "mooncake/rpc_meta/n1", "{\"p\":2}", 7), MC_OK);
    /* other keys are plain overwrites */
    assert_int_equal(mc_metadata_put(f->md, "mooncake/ram/n1", "1", 1), MC_OK);
    assert_int_equal(mc_metadata_put(f->md, "mooncake/ram/n1", "2", 1), MC_OK);
}

static void test_typed_helpers(void **state)
{
    fixture *f = *state;
    mc_segment_desc d, e;
    mc_segment_desc_init(&d);
    mc_segment_desc_set(&d.name, "127.0.0.1:17001");
    mc_segment_desc_set(&d.protocol, "tcp");
    d.tcp_data_port = 17002;
    assert_int_equal(mc_segment_desc_add_buffer(&d, d.name, 0x10000, 4096, false), MC_OK);
    assert_int_equal(mc_metadata_put_segment(f->md, &d), MC_OK);
    raw_resp r;
    raw(f, "GET", "/metadata?key=mooncake/ram/127.0.0.1:17001", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(mc_metadata_get_segment(f->md, "127.0.0.1:17001", &e), MC_OK);
    assert_int_equal(e.tcp_data_port, 17002);
    assert_int_equal(e.n_buffers, 1);
    assert_int_equal(e.buffers[0].addr, 0x10000);
    mc_segment_desc_deinit(&e);
    assert_int_equal(mc_metadata_remove_segment(f->md, "127.0.0.1:17001"), MC_OK);
    assert_int_equal(mc_metadata_get_segment(f->md, "127.0.0.1:17001", &e),
                     MC_OBJECT_NOT_FOUND);
    assert_null(e.name);
    /* a stored value that is not a descriptor */
    assert_int_equal(mc_metadata_put(f->md, "mooncake/ram/junk", "{\"name\":1}", 10), MC_OK);
    assert_int_equal(mc_metadata_get_segment(f->md, "junk", &e), MC_DESERIALIZE_FAIL);
    assert_null(e.name);
    mc_segment_desc_deinit(&d);

    mc_rpc_meta m = {.ip_or_host_name = "127.0.0.1", .rpc_port = 17001}, got;
    assert_int_equal(mc_metadata_put_rpc_meta(f->md, "127.0.0.1:17001", &m), MC_OK);
    assert_int_equal(mc_metadata_put_rpc_meta(f->md, "127.0.0.1:17001", &m), MC_OK);
    assert_int_equal(mc_metadata_get_rpc_meta(f->md, "127.0.0.1:17001", &got), MC_OK);
    assert_string_equal(got.ip_or_host_name, "127.0.0.1");
    assert_int_equal(got.rpc_port, 17001);
    m.rpc_port = 17003;
    assert_int_equal(mc_metadata_put_rpc_meta(f->md, "127.0.0.1:17001", &m),
                     MC_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_metadata_remove_rpc_meta(f->md, "127.0.0.1:17001"), MC_OK);
    assert_int_equal(mc_metadata_get_rpc_meta(f->md, "127.0.0.1:17001", &got),
                     MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_metadata_remove_rpc_meta(f->md, "127.0.0.1:17001"),
                     MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_metadata_put_rpc_meta(f->md, "", &m), MC_INVALID_PARAMS);
}

static void test_size_limits(void **state)
{
    (void)state;
    void *st = NULL;
    mc_http_metadata_server_opts o = {.max_body_bytes = 1024, .max_total_bytes = 3500};
    assert_int_equal(setup_opts(&st, &o), 0);
    fixture *f = st;
    char *big = malloc(3u << 20);
    memset(big, 'x', 3u << 20);
    assert_int_equal(mc_metadata_put(f->md, "k", big, 1024), MC_OK);
    assert_int_equal(mc_metadata_put(f->md, "k2", big, 1025), MC_BUFFER_OVERFLOW);
    /* big enough for curl's Expect: 100-continue path: refused before the body travels */
    assert_int_equal(mc_metadata_put(f->md, "k2", big, 3u << 20), MC_BUFFER_OVERFLOW);
    raw_resp r;
    raw(f, "PUT", "/metadata?key=k3", big, 2048, &r);
    assert_int_equal(r.status, 413);
    assert_int_equal(mc_http_metadata_server_count(f->srv), 1); /* nothing stored */
    /* the store as a whole: 3500 bytes of keys + values (k: 1025, k4, k5: 1002 each) */
    assert_int_equal(mc_metadata_put(f->md, "k4", big, 1000), MC_OK);
    assert_int_equal(mc_metadata_put(f->md, "k5", big, 1000), MC_OK);
    raw(f, "PUT", "/metadata?key=k6", big, 1000, &r);
    assert_int_equal(r.status, 507);
    assert_int_equal(mc_http_metadata_server_count(f->srv), 3);
    /* replacing a value counts only the difference; deleting frees space */
    assert_int_equal(mc_metadata_put(f->md, "k5", big, 900), MC_OK);
    assert_int_equal(mc_metadata_delete(f->md, "k4"), MC_OK);
    assert_int_equal(mc_metadata_put(f->md, "k6", big, 1000), MC_OK);
    /* a client whose limit is below the stored value refuses to take it */
    mc_metadata *small;
    mc_metadata_opts so = {.max_value_bytes = 100};
    assert_int_equal(mc_metadata_create_opts(f->url, &so, &small), MC_OK);
    char *v;
    size_t n;
    assert_int_equal(mc_metadata_get(small, "k", &v, &n), MC_BUFFER_OVERFLOW);
    assert_int_equal(mc_metadata_put(small, "k7", big, 101), MC_BUFFER_OVERFLOW);
    mc_metadata_destroy(small);
    free(big);
    /* the server still serves */
    raw(f, "GET", "/health", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    teardown(&st);
}

static void test_port_taken(void **state)
{
    fixture *f = *state;
    mc_http_metadata_server *other = NULL;
    int rc = mc_http_metadata_server_start("127.0.0.1", mc_http_metadata_server_port(f->srv),
                                           NULL, &other);
    assert_int_equal(rc, -EADDRINUSE);
    assert_null(other);
    assert_int_equal(mc_http_metadata_server_start("no.such.host.invalid", 0, NULL, &other),
                     -ENOENT);
    assert_int_equal(mc_http_metadata_server_start("", 0, NULL, &other), -EINVAL);
    /* the first one is unharmed */
    raw_resp r;
    raw(f, "GET", "/health", NULL, 0, &r);
    assert_int_equal(r.status, 200);
}

static void test_unreachable(void **state)
{
    (void)state;
    /* a port nobody listens on: bind one, read its number, close it */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    getsockname(s, (struct sockaddr *)&a, &al);
    close(s);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metadata", (unsigned)ntohs(a.sin_port));
    mc_metadata *md;
    assert_int_equal(mc_metadata_create(url, &md), MC_OK);
    char *v;
    size_t n;
    assert_int_equal(mc_metadata_get(md, "k", &v, &n), MC_RPC_FAIL);
    assert_int_equal(mc_metadata_put(md, "k", "v", 1), MC_RPC_FAIL);
    mc_metadata_destroy(md);

    /* a server that accepts connections (the kernel's backlog) but never answers */
    s = socket(AF_INET, SOCK_STREAM, 0);
    a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    al = sizeof a;
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s, 8), 0);
    getsockname(s, (struct sockaddr *)&a, &al);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metadata", (unsigned)ntohs(a.sin_port));
    mc_metadata_opts o = {.timeout_ms = 300};
    assert_int_equal(mc_metadata_create_opts(url, &o, &md), MC_OK);
    assert_int_equal(mc_metadata_get(md, "k", &v, &n), MC_RPC_TIMEOUT);
    mc_metadata_destroy(md);
    close(s);
}

typedef struct worker_arg {
    fixture *f;
    int id;
    int errors;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    for (int i = 0; i < 100; i++) {
        char key[64], val[64], *v;
        size_t n;
        snprintf(key, sizeof key, "mooncake/ram/t%d-%d", w->id, i);
        snprintf(val, sizeof val, "{\"t\":%d,\"i\":%d}", w->id, i);
        if (mc_metadata_put(w->f->md, key, val, strlen(val)) != MC_OK)
            w->errors++;
        if (mc_metadata_get(w->f->md, key, &v, &n) != MC_OK) {
            w->errors++;
            continue;
        }
        if (strcmp(v, val) != 0)
            w->errors++;
        free(v);
        if (i % 2 && mc_metadata_delete(w->f->md, key) != MC_OK)
            w->errors++;
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    fixture *f = *state;
    enum { T = 4 };
    pthread_t th[T];
    worker_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (worker_arg){.f = f, .id = i};
        pthread_create(&th[i], NULL, worker, &args[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].errors, 0);
    }
    assert_int_equal(mc_http_metadata_server_count(f->srv), T * 50);
}

static void test_stop(void **state)
{
    fixture *f = *state;
    assert_int_equal(mc_metadata_put(f->md, "k", "v", 1), MC_OK);
    mc_http_metadata_server_stop(f->srv);
    mc_http_metadata_server_stop(f->srv); /* idempotent */
    char *v;
    size_t n;
    assert_int_equal(mc_metadata_get(f->md, "k", &v, &n), MC_RPC_FAIL);
    assert_int_equal(mc_http_metadata_server_count(f->srv), 1);
    assert_int_equal(mc_http_metadata_server_remove(f->srv, "k"), MC_OK);
    assert_int_equal(mc_http_metadata_server_remove(f->srv, "k"), MC_OBJECT_NOT_FOUND);
    assert_int_equal(mc_http_metadata_server_count(f->srv), 0);
    /* the port is free again */
    mc_http_metadata_server *again;
    assert_int_equal(mc_http_metadata_server_start("127.0.0.1",
                                                   mc_http_metadata_server_port(f->srv), NULL,
                                                   &again),
                     0);
    mc_http_metadata_server_destroy(again);
}

int main(void)
{
    mc_log_set_level(MC_LOG_OFF);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_encoded_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_codes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_meta_write_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_typed_helpers, setup, teardown),
        cmocka_unit_test(test_size_limits),
        cmocka_unit_test_setup_teardown(test_port_taken, setup, teardown),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
