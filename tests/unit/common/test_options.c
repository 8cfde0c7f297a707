/* Options table: defaults, environment override, JSON config file, bounds, bad values
 * rejected with the flag named, gflags spellings, positional arguments kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "mooncake/options.h"

static int64_t port;
static bool ha;
static double ratio;
static char *name;
static uint64_t seg;
static char *cfg;
static char *addr;

static const mc_option tbl[] = {
    {.name = "rpc_port", .alias = "port", .type = MC_OPT_INT, .target = &port, .def = "50051",
     .bounded = true, .min = 1, .max = 65535, .env = "TEST_RPC_PORT", .help = "port"},
    {.name = "enable_ha", .type = MC_OPT_BOOL, .target = &ha, .def = "false", .help = "ha"},
    {.name = "eviction_ratio", .type = MC_OPT_DOUBLE, .target = &ratio, .def = "0.05",
     .bounded = true, .min = 0, .max = 1, .help = "ratio"},
    {.name = "cluster_id", .type = MC_OPT_STRING, .target = &name, .def = "mooncake",
     .env = "TEST_CLUSTER", .help = "id"},
    {.name = "segment_size", .type = MC_OPT_SIZE, .target = &seg, .def = "1gb", .unit = "bytes",
     .help = "size"},
    {.name = "config_path", .type = MC_OPT_STRING, .target = &cfg, .def = "", .help = "cfg"},
    {.name = "master_server_address", .type = MC_OPT_STRING, .target = &addr,
     .def = "127.0.0.1:50051", .nonempty = true, .help = "addr"},
};
#define N (sizeof tbl / sizeof tbl[0])

static int parse(char **args, int *argc_out, char *err)
{
    int argc = 0;
    while (args[argc])
        argc++;
    int rc = mc_options_parse(tbl, N, &argc, args, err, 256);
    if (argc_out)
        *argc_out = argc;
    return rc;
}

static void test_defaults(void **state)
{
    (void)state;
    char err[256];
    char *a[] = {"prog", NULL};
    assert_int_equal(parse(a, NULL, err), MC_OPTS_OK);
    assert_int_equal(port, 50051);
    assert_false(ha);
    assert_true(ratio > 0.049 && ratio < 0.051);
    assert_string_equal(name, "mooncake");
    assert_int_equal(seg, 1073741824ull);
}

static void test_cli_forms(void **state)
{
    (void)state;
    char err[256];
    int argc;
    char *a[] = {"prog", "--port=1234", "pos1", "--enable_ha", "-eviction_ratio", "0.5",
                 "--cluster_id=x y", "--segment_size=64KB", "pos2", NULL};
    assert_int_equal(parse(a, &argc, err), MC_OPTS_OK);
    assert_int_equal(port, 1234);
    assert_true(ha);
    assert_true(ratio == 0.5);
    assert_string_equal(name, "x y");
    assert_int_equal(seg, 65536);
    assert_int_equal(argc, 3);
    assert_string_equal(a[1], "pos1");
    assert_string_equal(a[2], "pos2");
    char *b[] = {"prog", "--enable_ha=true", "--noenable_ha", "--rpc_port", "99", NULL};
    assert_int_equal(parse(b, NULL, err), MC_OPTS_OK);
    assert_false(ha);
    assert_int_equal(port, 99);
}

static void test_errors_name_flag(void **state)
{
    (void)state;
    char err[256];
    char *a[] = {"prog", "--bogus=1", NULL};
    assert_int_equal(parse(a, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "--bogus"));
    char *b[] = {"prog", "--rpc_port=abc", NULL};
    assert_int_equal(parse(b, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "rpc_port"));
    assert_non_null(strstr(err, "abc"));
    /* a leading zero is decimal, as gflags reads it (strtoll's base 0 made it octal:
     * "--rpc_port=010" listened on port 8, "08080" was refused); 0x is hex */
    char *z[] = {"prog", "--rpc_port=010", NULL};
    assert_int_equal(parse(z, NULL, err), MC_OPTS_OK);
    assert_int_equal(port, 10);
    char *z2[] = {"prog", "--rpc_port=08080", NULL};
    assert_int_equal(parse(z2, NULL, err), MC_OPTS_OK);
    assert_int_equal(port, 8080);
    char *z3[] = {"prog", "--rpc_port=0x10", NULL};
    assert_int_equal(parse(z3, NULL, err), MC_OPTS_OK);
    assert_int_equal(port, 16);
    char *c[] = {"prog", "--rpc_port=70000", NULL};
    assert_int_equal(parse(c, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "out of range"));
    char *d[] = {"prog", "--eviction_ratio=1.5", NULL};
    assert_int_equal(parse(d, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "eviction_ratio"));
    char *e[] = {"prog", "--enable_ha=maybe", NULL};
    assert_int_equal(parse(e, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "enable_ha"));
    char *f[] = {"prog", "--rpc_port", NULL};
    assert_int_equal(parse(f, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "rpc_port"));
    char *g[] = {"prog", "--segment_size=12zb", NULL};
    assert_int_equal(parse(g, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "segment_size"));
    /* a non-empty flag refuses "" and names its default; other strings take it */
    char *ne[] = {"prog", "--master_server_address=", NULL};
    assert_int_equal(parse(ne, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "--master_server_address: expected a non-empty value"));
    assert_non_null(strstr(err, "127.0.0.1:50051"));
    char *ne2[] = {"prog", "--master_server_address", "", NULL};
    assert_int_equal(parse(ne2, NULL, err), MC_OPTS_ERROR);
    char *em[] = {"prog", "--cluster_id=", "--master_server_address=h:1", NULL};
    assert_int_equal(parse(em, NULL, err), MC_OPTS_OK);
    assert_string_equal(name, "");
    assert_string_equal(addr, "h:1");
    char *h[] = {"prog", "--help", NULL};
    assert_int_equal(parse(h, NULL, err), MC_OPTS_HELP);
}

static void test_env_and_config(void **state)
{
    (void)state;
    char err[256];
    char path[] = "/tmp/mc_opts_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *json = "{\"rpc_port\": 4000, \"enable_ha\": true, \"cluster_id\": \"fromcfg\","
                       " \"eviction_ratio\": 0.25, \"segment_size\": \"2gb\"}";
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    char arg[64];
    snprintf(arg, sizeof arg, "--config_path=%s", path);
    char *a[] = {"prog", arg, NULL};
    assert_int_equal(parse(a, NULL, err), MC_OPTS_OK);
    assert_int_equal(port, 4000);
    assert_true(ha);
    assert_string_equal(name, "fromcfg");
    assert_int_equal(seg, 2ull << 30);
    /* env beats config, command line beats env */
    setenv("TEST_RPC_PORT", "4100", 1);
    setenv("TEST_CLUSTER", "fromenv", 1);
    char *b[] = {"prog", arg, NULL};
    assert_int_equal(parse(b, NULL, err), MC_OPTS_OK);
    assert_int_equal(port, 4100);
    assert_string_equal(name, "fromenv");
    char *c[] = {"prog", arg, "--port=4200", NULL};
    assert_int_equal(parse(c, NULL, err), MC_OPTS_OK);
    assert_int_equal(port, 4200);
    /* bad env value names the variable and the flag */
    setenv("TEST_RPC_PORT", "0", 1);
    char *d[] = {"prog", NULL};
    assert_int_equal(parse(d, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "TEST_RPC_PORT"));
    assert_non_null(strstr(err, "rpc_port"));
    unsetenv("TEST_RPC_PORT");
    unsetenv("TEST_CLUSTER");
    /* unknown key and wrong type in the config file */
    FILE *fp = fopen(path, "w");
    fputs("{\"nonsense\": 1}", fp);
    fclose(fp);
    char *e[] = {"prog", arg, NULL};
    assert_int_equal(parse(e, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "nonsense"));
    fp = fopen(path, "w");
    fputs("{\"rpc_port\": [1]}", fp);
    fclose(fp);
    char *f[] = {"prog", arg, NULL};
    assert_int_equal(parse(f, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "rpc_port"));
    fp = fopen(path, "w");
    fputs("{not json", fp);
    fclose(fp);
    char *g[] = {"prog", arg, NULL};
    assert_int_equal(parse(g, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, path));
    unlink(path);
    assert_non_null(strstr(err, "(line 1)")); /* a syntax error names its line */
    char *h[] = {"prog", "--config_path=/nonexistent/x.json", NULL};
    assert_int_equal(parse(h, NULL, err), MC_OPTS_ERROR);
    assert_non_null(strstr(err, "/nonexistent/x.json"));
    assert_null(strstr(err, "line")); /* no "(line -1)" when the file cannot be read */
}

static void test_sizes(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(mc_parse_size("4096", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(mc_parse_size("4gb", &v), 0);
    assert_int_equal(v, 4ull << 30);
    assert_int_equal(mc_parse_size("1.5 GiB", &v), 0);
    assert_int_equal(v, 3ull << 29);
    assert_int_equal(mc_parse_size("16M", &v), 0);
    assert_int_equal(v, 16ull << 20);
    assert_int_not_equal(mc_parse_size("-1", &v), 0);
    assert_int_not_equal(mc_parse_size("abc", &v), 0);
    assert_int_not_equal(mc_parse_size("1.5", &v), 0);
    assert_int_not_equal(mc_parse_size("99999999999tb", &v), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_cli_forms),
        cmocka_unit_test(test_errors_name_flag),
        cmocka_unit_test(test_env_and_config),
        cmocka_unit_test(test_sizes),
    };
    int rc = cmocka_run_group_tests_name("options", tests, NULL, NULL);
    mc_options_free(tbl, N);
    return rc;
}
