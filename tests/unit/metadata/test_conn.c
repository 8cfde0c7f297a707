/* Connection strings: every upstream form, defaults, etcd lists, Redis URLs with
 * credentials and a db, and bad strings refused with a reason that names the problem;
 * mc_metadata_create picks the backend (no network traffic at create). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

static void test_p2p(void **state)
{
    (void)state;
    mc_metadata_conn c;
    assert_int_equal(mc_metadata_parse_conn("P2PHANDSHAKE", &c, NULL, 0), MC_OK);
    assert_int_equal(c.kind, MC_METADATA_P2P);
    assert_int_equal(c.n_endpoints, 0);
    /* upstream compares exactly: anything else without "://" is an etcd endpoint */
    assert_int_equal(mc_metadata_parse_conn("p2phandshake", &c, NULL, 0), MC_OK);
    assert_int_equal(c.kind, MC_METADATA_ETCD);
    assert_string_equal(mc_metadata_kind_name(MC_METADATA_P2P), "p2p");
}

static void test_http(void **state)
{
    (void)state;
    mc_metadata_conn c;
    assert_int_equal(mc_metadata_parse_conn("http://10.0.0.1:8080/metadata", &c, NULL, 0),
                     MC_OK);
    assert_int_equal(c.kind, MC_METADATA_HTTP);
    assert_string_equal(c.url, "http://10.0.0.1:8080/metadata");
    assert_int_equal(c.n_endpoints, 1);
    assert_string_equal(c.endpoints[0].host, "10.0.0.1");
    assert_int_equal(c.endpoints[0].port, 8080);
    assert_int_equal(mc_metadata_parse_conn("http://meta.example/any/path?x=1", &c, NULL, 0),
                     MC_OK);
    assert_string_equal(c.endpoints[0].host, "meta.example");
    assert_int_equal(c.endpoints[0].port, 80);
    assert_int_equal(mc_metadata_parse_conn("https://h", &c, NULL, 0), MC_OK);
    assert_int_equal(c.endpoints[0].port, 443);
    assert_int_equal(mc_metadata_parse_conn("http://[::1]:9/metadata", &c, NULL, 0), MC_OK);
    assert_string_equal(c.endpoints[0].host, "::1");
    assert_int_equal(c.endpoints[0].port, 9);
}

static void test_etcd_and_redis(void **state)
{
    (void)state;
    mc_metadata_conn c;
    assert_int_equal(mc_metadata_parse_conn("10.0.0.1:2379", &c, NULL, 0), MC_OK);
    assert_int_equal(c.kind, MC_METADATA_ETCD);
    assert_int_equal(c.n_endpoints, 1);
    assert_string_equal(c.endpoints[0].host, "10.0.0.1");
    assert_int_equal(c.endpoints[0].port, 2379);
    assert_int_equal(mc_metadata_parse_conn("etcd://a:1,b:2,[fe80::1]:3,d", &c, NULL, 0),
                     MC_OK);
    assert_int_equal(c.kind, MC_METADATA_ETCD);
    assert_int_equal(c.n_endpoints, 4);
    assert_string_equal(c.endpoints[1].host, "b");
    assert_int_equal(c.endpoints[1].port, 2);
    assert_string_equal(c.endpoints[2].host, "fe80::1");
    assert_int_equal(c.endpoints[3].port, 2379);
    assert_int_equal(mc_metadata_parse_conn("redis://10.0.0.2:6380", &c, NULL, 0), MC_OK);
    assert_int_equal(c.kind, MC_METADATA_REDIS);
    assert_int_equal(c.endpoints[0].port, 6380);
    assert_int_equal(mc_metadata_parse_conn("redis://r", &c, NULL, 0), MC_OK);
    assert_int_equal(c.endpoints[0].port, 6379);
}

static void test_etcd_lists(void **state)
{
    (void)state;
    mc_metadata_conn c;
    /* ';' separates as in upstream's etcd locators; the canonical url is for messages */
    assert_int_equal(mc_metadata_parse_conn("etcd://a:1;b;[::1]:3", &c, NULL, 0), MC_OK);
    assert_int_equal(c.n_endpoints, 3);
    assert_string_equal(c.endpoints[1].host, "b");
    assert_int_equal(c.endpoints[1].port, 2379);
    assert_string_equal(c.url, "etcd://a:1,b:2379,[::1]:3");
    assert_int_equal(c.db, -1);
    assert_int_equal(mc_metadata_parse_conn("192.168.0.1:2379", &c, NULL, 0), MC_OK);
    assert_int_equal(c.kind, MC_METADATA_ETCD);
    assert_string_equal(c.url, "etcd://192.168.0.1:2379");
    /* exactly MC_METADATA_MAX_ENDPOINTS is fine */
    char buf[512] = "";
    for (int i = 0; i < MC_METADATA_MAX_ENDPOINTS; i++)
        strcat(buf, i ? ",h:1" : "h:1");
    assert_int_equal(mc_metadata_parse_conn(buf, &c, NULL, 0), MC_OK);
    assert_int_equal(c.n_endpoints, MC_METADATA_MAX_ENDPOINTS);
    /* the errors name what is wrong */
    char err[256];
    static const struct {
        const char *conn, *reason;
    } bad[] = {
        {"127.0.0.1:8080/metadata", "http://HOST:PORT/metadata"},
        {"etcd://h:1/v3", "has a path"},
        {"etcd://u:p@h:1", "credentials"},
        {"etcd://a:1;;b:2", "empty"},
        {"etcd://a:1,b:0", "port"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(mc_metadata_parse_conn(bad[i].conn, &c, err, sizeof err),
                         MC_INVALID_PARAMS);
        if (!strstr(err, bad[i].reason))
            fail_msg("'%s': reason '%s' lacks '%s'", bad[i].conn, err, bad[i].reason);
    }
}

static void test_redis_urls(void **state)
{
    (void)state;
    mc_metadata_conn c;
    assert_int_equal(mc_metadata_parse_conn("redis://10.0.0.2:6380", &c, NULL, 0), MC_OK);
    assert_string_equal(c.password, "");
    assert_string_equal(c.username, "");
    assert_int_equal(c.db, -1);
    assert_string_equal(c.url, "redis://10.0.0.2:6380");
    assert_int_equal(mc_metadata_parse_conn("redis://:s3cret@h:1/7", &c, NULL, 0), MC_OK);
    assert_int_equal(c.kind, MC_METADATA_REDIS);
    assert_string_equal(c.endpoints[0].host, "h");
    assert_int_equal(c.endpoints[0].port, 1);
    assert_string_equal(c.password, "s3cret");
    assert_string_equal(c.username, "");
    assert_int_equal(c.db, 7);
    assert_string_equal(c.url, "redis://h:1/7"); /* never the password */
    /* a user (Redis 6 ACL), percent-escapes, '@' and ':' inside the password */
    assert_int_equal(mc_metadata_parse_conn("redis://app:p%40ss:w@rd@[::1]/0", &c, NULL, 0),
                     MC_OK);
    assert_string_equal(c.username, "app");
    assert_string_equal(c.password, "p@ss:w@rd");
    assert_string_equal(c.endpoints[0].host, "::1");
    assert_int_equal(c.endpoints[0].port, 6379);
    assert_int_equal(c.db, 0);
    assert_string_equal(c.url, "redis://[::1]:6379/0");
    assert_int_equal(mc_metadata_parse_conn("redis://h/", &c, NULL, 0), MC_OK);
    assert_int_equal(c.db, -1);
    assert_int_equal(mc_metadata_parse_conn("redis://h:1/2147483647", &c, NULL, 0), MC_OK);
    assert_int_equal(c.db, 2147483647);

    char err[256];
    char longpw[MC_METADATA_MAX_SECRET + 32] = "redis://:";
    memset(longpw + 9, 'x', MC_METADATA_MAX_SECRET);
    strcpy(longpw + 9 + MC_METADATA_MAX_SECRET, "@h:1");
    const struct {
        const char *conn, *reason;
    } bad[] = {
        {"redis://a:1,b:2", "one redis endpoint"},
        {"redis://a:1;b:2", "one redis endpoint"},
        {"redis://h:1/x", "not a decimal index"},
        {"redis://h:1/0/1", "not a decimal index"},
        {"redis://h:1/-1", "not a decimal index"},
        {"redis://h:1/2147483648", "larger than"},
        {"redis://h:1/99999999999", "not a decimal index"},
        {"redis://h:1?db=1", "query"},
        {"redis://h:1/0#x", "fragment"},
        {"redis://secret@h:1", "need a ':'"},
        {"redis://u:@h:1", "empty redis password"},
        {"redis://:p%4@h:1", "%-escape"},
        {"redis://:p%00@h:1", "%00"},
        {"redis://:pw@", "empty"},
        {"redis://:pw@h:0", "port"},
        {longpw, "longer than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        int rc = mc_metadata_parse_conn(bad[i].conn, &c, err, sizeof err);
        if (rc != MC_INVALID_PARAMS)
            fail_msg("'%s' was accepted", bad[i].conn);
        if (!strstr(err, bad[i].reason))
            fail_msg("'%s': reason '%s' lacks '%s'", bad[i].conn, err, bad[i].reason);
        assert_null(strstr(err, "s3cret"));
    }
}

static void test_bad_strings(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "://x", "ftp://h:1", "http://", "http://:80/m", "http://h:0/m", "http://h:65536/m",
        "http://h:8x/m", "http://u:p@h:1/m", "http://h:1/m#frag", "etcd://", "etcd://a:1,",
        "etcd://,a:1", "a:1,,b:2", "a::1:2379", "[::1", "[::1]x", "[]:1", "redis://a:1,b:2",
        "http://h :1/m", "http://h:1/m\n", " P2PHANDSHAKE", "h:123456",
        "h:-1", "etcd://a/b:1",
    };
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mc_metadata_conn c;
        err[0] = '\0';
        int rc = mc_metadata_parse_conn(bad[i], &c, err, sizeof err);
        if (rc != MC_INVALID_PARAMS)
            fail_msg("'%s' was accepted", bad[i]);
        assert_true(strlen(err) > 0);
    }
    assert_int_equal(mc_metadata_parse_conn(NULL, &(mc_metadata_conn){0}, NULL, 0),
                     MC_INVALID_PARAMS);
    /* too many endpoints, too long a host, too long a URL */
    char buf[4096] = "etcd://";
    for (int i = 0; i <= MC_METADATA_MAX_ENDPOINTS; i++)
        strcat(buf, i ? ",h:1" : "h:1");
    assert_int_equal(mc_metadata_parse_conn(buf, &(mc_metadata_conn){0}, err, sizeof err),
                     MC_INVALID_PARAMS);
    memset(buf, 'a', 300);
    buf[300] = '\0';
    assert_int_equal(mc_metadata_parse_conn(buf, &(mc_metadata_conn){0}, err, sizeof err),
                     MC_INVALID_PARAMS);
    char url[MC_METADATA_MAX_URL + 32] = "http://h:1/";
    memset(url + 11, 'p', MC_METADATA_MAX_URL);
    url[11 + MC_METADATA_MAX_URL] = '\0';
    assert_int_equal(mc_metadata_parse_conn(url, &(mc_metadata_conn){0}, err, sizeof err),
                     MC_INVALID_PARAMS);
}

static void test_create(void **state)
{
    (void)state;
    mc_metadata *md = NULL;
    assert_int_equal(mc_metadata_create("P2PHANDSHAKE", &md), MC_OK);
    assert_true(mc_metadata_is_p2p(md));
    assert_int_equal(mc_metadata_kind_of(md), MC_METADATA_P2P);
    /* P2P: puts and deletes are no-ops, gets find nothing */
    assert_int_equal(mc_metadata_put(md, "k", "v", 1), MC_OK);
    char *v = NULL;
    size_t n = 0;
    assert_int_equal(mc_metadata_get(md, "k", &v, &n), MC_OBJECT_NOT_FOUND);
    assert_null(v);
    assert_int_equal(mc_metadata_delete(md, "k"), MC_OK);
    /* P2P rpc_meta comes from the name itself, as upstream getRpcMetaEntry */
    mc_rpc_meta m;
    assert_int_equal(mc_metadata_get_rpc_meta(md, "10.1.2.3:15123", &m), MC_OK);
    assert_string_equal(m.ip_or_host_name, "10.1.2.3");
    assert_int_equal(m.rpc_port, 15123);
    assert_int_equal(mc_metadata_get_rpc_meta(md, "[::1]:7", &m), MC_OK);
    assert_string_equal(m.ip_or_host_name, "::1");
    assert_int_equal(mc_metadata_get_rpc_meta(md, "nohost", &m), MC_INVALID_PARAMS);
    assert_int_equal(mc_metadata_get_rpc_meta(md, "[::1]", &m), MC_INVALID_PARAMS);
    mc_segment_desc d;
    assert_int_equal(mc_metadata_get_segment(md, "10.1.2.3:15123", &d), MC_OBJECT_NOT_FOUND);
    mc_metadata_destroy(md);

    assert_int_equal(mc_metadata_create("http://127.0.0.1:1/metadata", &md), MC_OK);
    assert_false(mc_metadata_is_p2p(md));
    assert_int_equal(mc_metadata_kind_of(md), MC_METADATA_HTTP);
    assert_string_equal(mc_metadata_conn_of(md)->url, "http://127.0.0.1:1/metadata");
    mc_metadata_destroy(md);

    /* etcd and Redis are built (no traffic at create: nothing listens on port 1) */
    const char *built[] = {"etcd://127.0.0.1:1", "127.0.0.1:1,127.0.0.1:2",
                           "redis://:pw@127.0.0.1:1/3"};
    mc_metadata_kind kinds[] = {MC_METADATA_ETCD, MC_METADATA_ETCD, MC_METADATA_REDIS};
    for (size_t i = 0; i < 3; i++) {
        md = NULL;
        assert_int_equal(mc_metadata_create(built[i], &md), MC_OK);
        assert_int_equal(mc_metadata_kind_of(md), kinds[i]);
        assert_false(mc_metadata_is_p2p(md));
        mc_metadata_destroy(md);
    }
    /* a bad MC_REDIS_DB_INDEX fails the create (the URL's db wins over it) */
    setenv("MC_REDIS_DB_INDEX", "seven", 1);
    md = (mc_metadata *)1;
    assert_int_equal(mc_metadata_create("redis://127.0.0.1:1", &md), MC_INVALID_PARAMS);
    assert_null(md);
    assert_int_equal(mc_metadata_create("redis://127.0.0.1:1/2", &md), MC_OK);
    mc_metadata_destroy(md);
    unsetenv("MC_REDIS_DB_INDEX");
    md = (mc_metadata *)1;
    assert_int_equal(mc_metadata_create("bogus://x", &md), MC_INVALID_PARAMS);
    assert_null(md);
    mc_metadata_destroy(NULL);
}

int main(void)
{
    mc_log_set_level(MC_LOG_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p2p),           cmocka_unit_test(test_http),
        cmocka_unit_test(test_etcd_and_redis), cmocka_unit_test(test_etcd_lists),
        cmocka_unit_test(test_redis_urls),     cmocka_unit_test(test_bad_strings),
        cmocka_unit_test(test_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
