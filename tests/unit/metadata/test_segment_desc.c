/* Segment descriptor and rpc_meta JSON: round trips, upstream descriptors without our
 * fields, and rejection of malformed, mistyped, oversized and overflowing input; key
 * helpers with and without a cluster id; the host id. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

static void test_round_trip(void **state)
{
    (void)state;
    mc_segment_desc d, e;
    mc_segment_desc_init(&d);
    assert_int_equal(mc_segment_desc_set(&d.name, "10.0.0.1:15123"), MC_OK);
    assert_int_equal(mc_segment_desc_set(&d.protocol, "tcp"), MC_OK);
    assert_int_equal(mc_segment_desc_set(&d.host_id, "abc-def"), MC_OK);
    assert_int_equal(mc_segment_desc_set(&d.shm_socket, "/tmp/mc.sock"), MC_OK);
    d.tcp_data_port = 40000;
    assert_int_equal(mc_segment_desc_add_buffer(&d, d.name, 0x7f0000001000ull, 1ull << 30, true),
                     MC_OK);
    assert_int_equal(mc_segment_desc_add_buffer(&d, d.name, 4096, 1, false), MC_OK);
    char *json;
    size_t len;
    assert_int_equal(mc_segment_desc_encode(&d, &json, &len), MC_OK);
    assert_int_equal(strlen(json), len);
    assert_non_null(strstr(json, "\"protocol\":\"tcp\""));
    assert_non_null(strstr(json, "\"tcp_proto_version\":2"));
    assert_non_null(strstr(json, "\"timestamp\":\"")); /* filled with the current time */
    char err[256];
    assert_int_equal(mc_segment_desc_decode(json, len, &e, err, sizeof err), MC_OK);
    assert_string_equal(e.name, "10.0.0.1:15123");
    assert_string_equal(e.protocol, "tcp");
    assert_string_equal(e.host_id, "abc-def");
    assert_string_equal(e.shm_socket, "/tmp/mc.sock");
    assert_int_equal(e.tcp_data_port, 40000);
    assert_int_equal(e.tcp_proto_version, 2);
    assert_non_null(e.timestamp);
    assert_int_equal(e.n_buffers, 2);
    assert_int_equal(e.buffers[0].addr, 0x7f0000001000ull);
    assert_int_equal(e.buffers[0].length, 1ull << 30);
    assert_true(e.buffers[0].shm);
    assert_false(e.buffers[1].shm);
    assert_string_equal(e.buffers[1].name, "10.0.0.1:15123");
    free(json);
    /* re-encoding the decoded copy keeps the timestamp and gives the same JSON */
    char *json2;
    assert_int_equal(mc_segment_desc_encode(&e, &json2, &len), MC_OK);
    assert_int_equal(mc_segment_desc_remove_buffer(&e, 4096), MC_OK);
    assert_int_equal(mc_segment_desc_remove_buffer(&e, 4096), MC_OBJECT_NOT_FOUND);
    assert_int_equal(e.n_buffers, 1);
    mc_segment_desc_deinit(&e);
    assert_int_equal(mc_segment_desc_decode(json2, len, &e, err, sizeof err), MC_OK);
    char *json3;
    assert_int_equal(mc_segment_desc_encode(&e, &json3, &len), MC_OK);
    assert_string_equal(json2, json3);
    free(json2);
    free(json3);
    mc_segment_desc_deinit(&e);
    mc_segment_desc_deinit(&d);
    assert_null(d.name);
    assert_int_equal(d.n_buffers, 0);
}

static void test_upstream_descriptor(void **state)
{
    (void)state;
    /* As upstream writes it for TCP (no host_id/shm fields), and an RDMA one with extra
     * fields we ignore; a v1 peer without tcp_proto_version. */
    const char *up = "{\"name\": \"node1:12345\", \"protocol\": \"tcp\", \"tcp_data_port\": 15123,"
                     " \"tcp_proto_version\": 2, \"timestamp\": \"2026-08-01 10:00:00.000001\","
                     " \"buffers\": [{\"name\": \"node1:12345\", \"addr\": 140234567890944,"
                     " \"length\": 1073741824}]}";
    mc_segment_desc d;
    char err[256];
    assert_int_equal(mc_segment_desc_decode(up, strlen(up), &d, err, sizeof err), MC_OK);
    assert_null(d.host_id);
    assert_null(d.shm_socket);
    assert_int_equal(d.n_buffers, 1);
    assert_int_equal(d.buffers[0].addr, 140234567890944ull);
    assert_false(d.buffers[0].shm);
    mc_segment_desc_deinit(&d);
    const char *rdma = "{\"name\":\"n\",\"protocol\":\"rdma\",\"devices\":[{\"name\":\"mlx5_0\","
                       "\"lid\":1,\"gid\":\"fe80::\"}],\"priority_matrix\":{},"
                       "\"buffers\":[{\"name\":\"n\",\"addr\":4096,\"length\":8,\"rkey\":[1],"
                       "\"lkey\":[2]}]}";
    assert_int_equal(mc_segment_desc_decode(rdma, strlen(rdma), &d, err, sizeof err), MC_OK);
    assert_string_equal(d.protocol, "rdma");
    assert_int_equal(d.tcp_proto_version, 1);
    assert_int_equal(d.tcp_data_port, 0);
    mc_segment_desc_deinit(&d);
    const char *nobuf = "{\"name\":\"n\",\"protocol\":\"tcp\"}";
    assert_int_equal(mc_segment_desc_decode(nobuf, strlen(nobuf), &d, err, sizeof err), MC_OK);
    assert_int_equal(d.n_buffers, 0);
    assert_null(d.buffers);
    mc_segment_desc_deinit(&d);
}

static void test_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "null", "[]", "42", "{", "{\"name\":\"n\",\"protocol\":\"tcp\"} trailing",
        "{\"protocol\":\"tcp\"}",                          /* no name */
        "{\"name\":\"\",\"protocol\":\"tcp\"}",            /* empty name */
        "{\"name\":7,\"protocol\":\"tcp\"}",               /* name type */
        "{\"name\":\"n\"}",                                /* no protocol */
        "{\"name\":\"n\",\"protocol\":[\"tcp\",\"cxl\"]}", /* multi-protocol */
        "{\"name\":\"n\",\"name\":\"m\",\"protocol\":\"tcp\"}", /* duplicate key */
        "{\"name\":\"n\\u0000x\",\"protocol\":\"tcp\"}",   /* NUL in a string */
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"tcp_data_port\":65536}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"tcp_data_port\":-1}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"tcp_data_port\":\"80\"}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"tcp_data_port\":80.5}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"tcp_proto_version\":0}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"timestamp\":5}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"host_id\":true}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":{}}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[1]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"addr\":1,\"length\":1}]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"length\":1}]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":1}]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":0,\"length\":1}]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":1,\"length\":0}]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":-4096,\"length\":1}]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":1,\"length\":1,\"shm\":1}]}",
        /* addr + length overflows */
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":9223372036854775807,\"length\":1}]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":4611686018427387904,\"length\":4611686018427387904}]}",
        /* beyond the int64 range of JSON integers we accept */
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":18446744073709551615,\"length\":1}]}",
        "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"b\",\"addr\":1e3,\"length\":1}]}",
        /* invalid UTF-8 */
        "{\"name\":\"n\xff\",\"protocol\":\"tcp\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mc_segment_desc d;
        char err[256] = "";
        int rc = mc_segment_desc_decode(bad[i], strlen(bad[i]), &d, err, sizeof err);
        if (rc != MC_DESERIALIZE_FAIL)
            fail_msg("accepted (%d): %s", rc, bad[i]);
        assert_true(strlen(err) > 0);
        assert_null(d.name); /* nothing kept */
        assert_int_equal(d.n_buffers, 0);
    }
    mc_segment_desc d;
    assert_int_equal(mc_segment_desc_decode(NULL, 0, &d, NULL, 0), MC_DESERIALIZE_FAIL);
}

static void test_limits(void **state)
{
    (void)state;
    char err[256];
    mc_segment_desc d;
    /* input over the byte limit is refused before parsing */
    assert_int_equal(mc_segment_desc_decode("{}", (size_t)MC_SEGMENT_MAX_JSON + 1, &d, err,
                                            sizeof err),
                     MC_BUFFER_OVERFLOW);
    /* one buffer more than the limit */
    size_t cap = 64 + (size_t)(MC_SEGMENT_MAX_BUFFERS + 1) * 40;
    char *big = malloc(cap);
    size_t n = (size_t)snprintf(big, cap, "{\"name\":\"n\",\"protocol\":\"tcp\",\"buffers\":[");
    for (int i = 0; i <= MC_SEGMENT_MAX_BUFFERS; i++)
        n += (size_t)snprintf(big + n, cap - n, "%s{\"name\":\"b\",\"addr\":%d,\"length\":1}",
                              i ? "," : "", i + 1);
    n += (size_t)snprintf(big + n, cap - n, "]}");
    assert_int_equal(mc_segment_desc_decode(big, n, &d, err, sizeof err), MC_DESERIALIZE_FAIL);
    assert_non_null(strstr(err, "buffers"));
    /* exactly the limit decodes */
    char *last = strrchr(big, '{');
    strcpy(last - 1, "]}");
    assert_int_equal(mc_segment_desc_decode(big, strlen(big), &d, err, sizeof err), MC_OK);
    assert_int_equal(d.n_buffers, MC_SEGMENT_MAX_BUFFERS);
    /* ... and add_buffer refuses one more */
    assert_int_equal(mc_segment_desc_add_buffer(&d, "b", 1, 1, false), MC_BUFFER_OVERFLOW);
    mc_segment_desc_deinit(&d);
    free(big);
    /* a deeply nested value inside an ignored field is refused by the parser's depth limit,
     * not by the stack */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    n = (size_t)sprintf(deep, "{\"name\":\"n\",\"protocol\":\"tcp\",\"x\":");
    memset(deep + n, '[', depth);
    memset(deep + n + depth, ']', depth);
    strcpy(deep + n + 2 * depth, "}");
    assert_int_equal(mc_segment_desc_decode(deep, strlen(deep), &d, err, sizeof err),
                     MC_DESERIALIZE_FAIL);
    free(deep);
    /* long strings */
    char *longname = malloc(MC_SEGMENT_MAX_NAME + 64);
    n = (size_t)sprintf(longname, "{\"protocol\":\"tcp\",\"name\":\"");
    memset(longname + n, 'x', MC_SEGMENT_MAX_NAME + 1);
    strcpy(longname + n + MC_SEGMENT_MAX_NAME + 1, "\"}");
    assert_int_equal(mc_segment_desc_decode(longname, strlen(longname), &d, err, sizeof err),
                     MC_DESERIALIZE_FAIL);
    free(longname);
}

static void test_encode_refuses(void **state)
{
    (void)state;
    mc_segment_desc d;
    mc_segment_desc_init(&d);
    char *json = NULL;
    size_t len;
    assert_int_equal(mc_segment_desc_encode(&d, &json, &len), MC_INVALID_PARAMS); /* no name */
    mc_segment_desc_set(&d.name, "n");
    assert_int_equal(mc_segment_desc_encode(&d, &json, &len), MC_INVALID_PARAMS); /* no proto */
    mc_segment_desc_set(&d.protocol, "tcp");
    mc_segment_desc_set(&d.name, "bad\xff");
    assert_int_equal(mc_segment_desc_encode(&d, &json, &len), MC_INVALID_PARAMS); /* UTF-8 */
    mc_segment_desc_set(&d.name, "n");
    char sock[MC_SEGMENT_MAX_SHM_SOCKET + 2];
    memset(sock, 's', sizeof sock - 1);
    sock[sizeof sock - 1] = '\0';
    mc_segment_desc_set(&d.shm_socket, sock);
    assert_int_equal(mc_segment_desc_encode(&d, &json, &len), MC_INVALID_PARAMS);
    mc_segment_desc_set(&d.shm_socket, NULL);
    assert_int_equal(mc_segment_desc_encode(&d, &json, &len), MC_OK);
    free(json);
    assert_int_equal(mc_segment_desc_add_buffer(&d, "b", 0, 1, false), MC_INVALID_PARAMS);
    assert_int_equal(mc_segment_desc_add_buffer(&d, "b", 1, 0, false), MC_INVALID_PARAMS);
    assert_int_equal(mc_segment_desc_add_buffer(&d, "", 1, 1, false), MC_INVALID_PARAMS);
    assert_int_equal(mc_segment_desc_add_buffer(&d, "b", UINT64_MAX - 1, 4, false),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_segment_desc_add_buffer(&d, "b", (uint64_t)INT64_MAX, 1, false),
                     MC_INVALID_PARAMS);
    assert_int_equal(mc_segment_desc_add_buffer(&d, "b", (uint64_t)INT64_MAX - 1, 1, false),
                     MC_OK);
    assert_int_equal(d.n_buffers, 1);
    mc_segment_desc_deinit(&d);
}

static void test_rpc_meta(void **state)
{
    (void)state;
    mc_rpc_meta m = {.ip_or_host_name = "10.0.0.7", .rpc_port = 15001}, r;
    char *json;
    size_t len;
    char err[128];
    assert_int_equal(mc_rpc_meta_encode(&m, &json, &len), MC_OK);
    assert_string_equal(json, "{\"ip_or_host_name\":\"10.0.0.7\",\"rpc_port\":15001}");
    assert_int_equal(mc_rpc_meta_decode(json, len, &r, err, sizeof err), MC_OK);
    assert_string_equal(r.ip_or_host_name, "10.0.0.7");
    assert_int_equal(r.rpc_port, 15001);
    free(json);
    const char *up = "{ \"ip_or_host_name\" : \"host-a\", \"rpc_port\" : 12345, \"extra\": 1 }";
    assert_int_equal(mc_rpc_meta_decode(up, strlen(up), &r, err, sizeof err), MC_OK);
    static const char *const bad[] = {
        "{}", "{\"ip_or_host_name\":\"h\"}", "{\"rpc_port\":1}",
        "{\"ip_or_host_name\":\"\",\"rpc_port\":1}",
        "{\"ip_or_host_name\":\"h\",\"rpc_port\":0}",
        "{\"ip_or_host_name\":\"h\",\"rpc_port\":65536}",
        "{\"ip_or_host_name\":\"h\",\"rpc_port\":\"1\"}",
        "{\"ip_or_host_name\":1,\"rpc_port\":1}", "[]", "x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (mc_rpc_meta_decode(bad[i], strlen(bad[i]), &r, err, sizeof err) !=
            MC_DESERIALIZE_FAIL)
            fail_msg("accepted: %s", bad[i]);
    }
    char longhost[400];
    int n = snprintf(longhost, sizeof longhost, "{\"ip_or_host_name\":\"");
    memset(longhost + n, 'h', MC_METADATA_MAX_HOST);
    strcpy(longhost + n + MC_METADATA_MAX_HOST, "\",\"rpc_port\":1}");
    assert_int_equal(mc_rpc_meta_decode(longhost, strlen(longhost), &r, err, sizeof err),
                     MC_DESERIALIZE_FAIL);
    mc_rpc_meta z = {.ip_or_host_name = "", .rpc_port = 1};
    assert_int_equal(mc_rpc_meta_encode(&z, &json, &len), MC_INVALID_PARAMS);
    z = (mc_rpc_meta){.ip_or_host_name = "h", .rpc_port = 0};
    assert_int_equal(mc_rpc_meta_encode(&z, &json, &len), MC_INVALID_PARAMS);
}

static void test_keys(void **state)
{
    (void)state;
    unsetenv("MC_METADATA_CLUSTER_ID");
    char *k = mc_metadata_key_prefix(NULL);
    assert_string_equal(k, "mooncake/");
    free(k);
    k = mc_metadata_segment_key(NULL, "10.0.0.1:1234");
    assert_string_equal(k, "mooncake/ram/10.0.0.1:1234");
    free(k);
    k = mc_metadata_segment_key(NULL, "nvmeof/x"); /* already a path: no ram/ */
    assert_string_equal(k, "mooncake/nvmeof/x");
    free(k);
    k = mc_metadata_rpc_meta_key(NULL, "10.0.0.1:1234");
    assert_string_equal(k, "mooncake/rpc_meta/10.0.0.1:1234");
    free(k);
    setenv("MC_METADATA_CLUSTER_ID", "prod", 1);
    k = mc_metadata_segment_key(NULL, "s");
    assert_string_equal(k, "mooncake/prod/ram/s");
    free(k);
    setenv("MC_METADATA_CLUSTER_ID", "prod/", 1); /* no doubled slash */
    k = mc_metadata_rpc_meta_key(NULL, "s");
    assert_string_equal(k, "mooncake/prod/rpc_meta/s");
    free(k);
    setenv("MC_METADATA_CLUSTER_ID", "", 1); /* empty = none */
    k = mc_metadata_key_prefix(NULL);
    assert_string_equal(k, "mooncake/");
    free(k);
    k = mc_metadata_key_prefix("explicit"); /* an explicit id wins over the environment */
    assert_string_equal(k, "mooncake/explicit/");
    free(k);
    unsetenv("MC_METADATA_CLUSTER_ID");
    assert_null(mc_metadata_segment_key(NULL, ""));
    assert_null(mc_metadata_segment_key(NULL, NULL));
    assert_null(mc_metadata_rpc_meta_key(NULL, ""));
    char *longname = malloc(MC_METADATA_MAX_KEY + 1);
    memset(longname, 'x', MC_METADATA_MAX_KEY);
    longname[MC_METADATA_MAX_KEY] = '\0';
    assert_null(mc_metadata_segment_key(NULL, longname));
    free(longname);

    /* a client fixes its prefix at create */
    setenv("MC_METADATA_CLUSTER_ID", "c1", 1);
    mc_metadata *md;
    assert_int_equal(mc_metadata_create("P2PHANDSHAKE", &md), MC_OK);
    unsetenv("MC_METADATA_CLUSTER_ID");
    assert_string_equal(mc_metadata_prefix(md), "mooncake/c1/");
    mc_metadata_destroy(md);
    mc_metadata_opts o = {.cluster_id = ""};
    assert_int_equal(mc_metadata_create_opts("P2PHANDSHAKE", &o, &md), MC_OK);
    assert_string_equal(mc_metadata_prefix(md), "mooncake/");
    mc_metadata_destroy(md);
}

static void test_host_id(void **state)
{
    (void)state;
    char a[MC_SEGMENT_MAX_HOST_ID + 1], b[MC_SEGMENT_MAX_HOST_ID + 1];
    assert_int_equal(mc_metadata_host_id(a, sizeof a), MC_OK);
    assert_int_equal(mc_metadata_host_id(b, sizeof b), MC_OK);
    assert_true(strlen(a) > 8);
    assert_string_equal(a, b); /* stable within a boot */
    char small[4];
    assert_int_equal(mc_metadata_host_id(small, sizeof small), MC_BUFFER_OVERFLOW);
    assert_string_equal(small, "");
}

int main(void)
{
    mc_log_set_level(MC_LOG_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),  cmocka_unit_test(test_upstream_descriptor),
        cmocka_unit_test(test_rejects),     cmocka_unit_test(test_limits),
        cmocka_unit_test(test_encode_refuses), cmocka_unit_test(test_rpc_meta),
        cmocka_unit_test(test_keys),        cmocka_unit_test(test_host_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
