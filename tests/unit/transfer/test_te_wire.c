/* test_te_wire.c: the data-port header, reply header, range check and handshake frame
 * parsers (src/transfer/wire.c), without sockets. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mooncake/transfer_engine.h"
#include "net/frame.h"
#include "transfer/wire.h"

static void test_req_roundtrip(void **state)
{
    (void)state;
    uint8_t buf[MC_TE_REQ_SIZE];
    mc__te_req in = {.op = MC_TE_WOP_WRITE, .id = 0x1122334455667788ull,
                     .addr = 0x7f0000001000ull, .len = 4096, .epoch = 0x0102030405060708ull};
    mc__te_req_encode(&in, buf);
    assert_int_equal(mc_get_le32(buf), MC_TE_REQ_MAGIC);
    mc__te_req out;
    assert_int_equal(mc__te_req_decode(buf, &out), 0);
    assert_int_equal(out.op, in.op);
    assert_true(out.id == in.id && out.addr == in.addr && out.len == in.len &&
                out.epoch == in.epoch);
    /* little-endian on the wire regardless of the host; version 2, 40 bytes */
    assert_int_equal(MC_TE_REQ_SIZE, 40);
    assert_int_equal(buf[4], 2);
    assert_int_equal(buf[8], 0x88);
    assert_int_equal(buf[24], 0x00);
    assert_int_equal(buf[25], 0x10);
    assert_int_equal(buf[32], 0x08);
    assert_int_equal(buf[39], 0x01);
}

/* HELLO: the writer id in addr/length, no other limit; its reply carries the server's
 * version in the length field. Other versions are recognised from the first 16 bytes. */
static void test_hello_and_versions(void **state)
{
    (void)state;
    uint8_t buf[MC_TE_REQ_SIZE];
    mc__te_req in = {.op = MC_TE_WOP_HELLO, .id = 9, .addr = UINT64_MAX, .len = UINT64_MAX - 1};
    mc__te_req_encode(&in, buf);
    mc__te_req out;
    assert_int_equal(mc__te_req_decode(buf, &out), 0);
    assert_true(out.op == MC_TE_WOP_HELLO && out.addr == UINT64_MAX &&
                out.len == UINT64_MAX - 1 && out.epoch == 0);
    /* an epoch on anything but WRITE is malformed */
    const uint8_t ops[] = {MC_TE_WOP_READ, MC_TE_WOP_PING, MC_TE_WOP_HELLO, MC_TE_WOP_NOTIFY};
    for (size_t i = 0; i < sizeof ops; i++) {
        mc__te_req q = {.op = ops[i], .id = 1, .addr = 4096, .len = ops[i] == MC_TE_WOP_NOTIFY ? 8 : 0,
                        .epoch = 1};
        mc__te_req_encode(&q, buf);
        assert_int_equal(mc__te_req_decode(buf, &out), -EBADMSG);
    }
    mc__te_rep r = {.status = 0, .id = 9, .len = MC_TE_WIRE_VERSION}, ro;
    uint8_t rb[MC_TE_REP_SIZE];
    mc__te_rep_encode(&r, rb);
    assert_int_equal(mc__te_rep_decode(rb, 9, MC_TE_WOP_HELLO, 0, &ro), 0);
    assert_int_equal(ro.len, MC_TE_WIRE_VERSION);
    r = (mc__te_rep){.status = -EPROTONOSUPPORT, .id = 9, .len = 3};
    mc__te_rep_encode(&r, rb);
    assert_int_equal(mc__te_rep_decode(rb, 9, MC_TE_WOP_HELLO, 0, &ro), 0);
    assert_int_equal(ro.status, -EPROTONOSUPPORT);
    assert_int_equal(ro.len, 3);
    /* prefixes */
    unsigned v = 0;
    uint64_t id = 0;
    mc__te_req_encode(&in, buf);
    assert_int_equal(mc__te_req_prefix(buf, &v, &id), 0);
    buf[4] = 1; /* a version-1 header */
    assert_int_equal(mc__te_req_prefix(buf, &v, &id), -EPROTONOSUPPORT);
    assert_int_equal(v, 1);
    assert_int_equal(id, 9);
    buf[0] ^= 1;
    assert_int_equal(mc__te_req_prefix(buf, &v, &id), -EPROTO);
}

static void test_req_rejects(void **state)
{
    (void)state;
    uint8_t buf[MC_TE_REQ_SIZE];
    mc__te_req r = {.op = MC_TE_WOP_READ, .id = 1, .addr = 4096, .len = 1};
    mc__te_req out;

    mc__te_req_encode(&r, buf);
    buf[0] ^= 0xff; /* magic */
    assert_int_equal(mc__te_req_decode(buf, &out), -EPROTO);

    mc__te_req_encode(&r, buf);
    buf[4] = 9; /* version */
    assert_int_equal(mc__te_req_decode(buf, &out), -EPROTONOSUPPORT);

    mc__te_req_encode(&r, buf);
    buf[6] = 1; /* reserved bits */
    assert_int_equal(mc__te_req_decode(buf, &out), -EPROTO);

    r.op = 0;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), -EBADMSG);
    r.op = 200;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), -EBADMSG);

    r.op = MC_TE_WOP_WRITE;
    r.len = MC_TE_MAX_WIRE_LEN + 1;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), -EMSGSIZE);
    r.len = UINT64_MAX;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), -EMSGSIZE);
    r.len = MC_TE_MAX_WIRE_LEN;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), 0);

    r.op = MC_TE_WOP_NOTIFY;
    r.len = 3;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), -EMSGSIZE);
    r.len = mc__te_notify_max_body() + 1;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), -EMSGSIZE);

    r.op = MC_TE_WOP_PING;
    r.len = 1;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), -EMSGSIZE);
    r.len = 0;
    mc__te_req_encode(&r, buf);
    assert_int_equal(mc__te_req_decode(buf, &out), 0);
}

static void test_rep(void **state)
{
    (void)state;
    uint8_t buf[MC_TE_REP_SIZE];
    mc__te_rep r = {.status = -EFAULT, .id = 7, .len = 100}, out;
    mc__te_rep_encode(&r, buf);
    assert_int_equal(mc__te_rep_decode(buf, 7, MC_TE_WOP_READ, 100, &out), 0);
    assert_int_equal(out.status, -EFAULT);
    /* wrong id, wrong length for the op, positive status, bad magic */
    assert_int_equal(mc__te_rep_decode(buf, 8, MC_TE_WOP_READ, 100, &out), -EPROTO);
    assert_int_equal(mc__te_rep_decode(buf, 7, MC_TE_WOP_READ, 99, &out), -EPROTO);
    assert_int_equal(mc__te_rep_decode(buf, 7, MC_TE_WOP_WRITE, 100, &out), -EPROTO);
    r.status = 5;
    mc__te_rep_encode(&r, buf);
    assert_int_equal(mc__te_rep_decode(buf, 7, MC_TE_WOP_READ, 100, &out), -EPROTO);
    r.status = 0;
    r.len = 0;
    mc__te_rep_encode(&r, buf);
    assert_int_equal(mc__te_rep_decode(buf, 7, MC_TE_WOP_WRITE, 100, &out), 0);
    buf[1] ^= 1;
    assert_int_equal(mc__te_rep_decode(buf, 7, MC_TE_WOP_WRITE, 100, &out), -EPROTO);
}

static void test_range_inside(void **state)
{
    (void)state;
    uint64_t base = 0x10000, size = 0x1000;
    assert_true(mc__te_range_inside(base, size, base, size));
    assert_true(mc__te_range_inside(base, size, base + size - 1, 1));
    assert_true(mc__te_range_inside(base, size, base + 10, 20));
    assert_false(mc__te_range_inside(base, size, base, 0));        /* empty */
    assert_false(mc__te_range_inside(base, size, base - 1, 2));    /* starts before */
    assert_false(mc__te_range_inside(base, size, base + size, 1)); /* starts at the end */
    assert_false(mc__te_range_inside(base, size, base + 1, size)); /* ends after */
    /* overflow: addr + len wraps around */
    assert_false(mc__te_range_inside(base, size, base + 8, UINT64_MAX - 4));
    assert_false(mc__te_range_inside(base, size, UINT64_MAX, 2));
    assert_false(mc__te_range_inside(UINT64_MAX - 10, 10, UINT64_MAX - 5, 10));
    assert_true(mc__te_range_inside(UINT64_MAX - 10, 10, UINT64_MAX - 5, 5));
}

static void test_notify_body(void **state)
{
    (void)state;
    const char *name = "peer-1";
    const char msg[] = "hello\0world";
    size_t n = mc__te_notify_body_size(strlen(name), sizeof msg);
    uint8_t *b = malloc(n);
    mc__te_notify_encode(b, name, strlen(name), msg, sizeof msg);
    const char *on;
    const uint8_t *om;
    size_t onl, oml;
    assert_int_equal(mc__te_notify_decode(b, n, &on, &onl, &om, &oml), 0);
    assert_int_equal(onl, strlen(name));
    assert_memory_equal(on, name, onl);
    assert_int_equal(oml, sizeof msg);
    assert_memory_equal(om, msg, oml);
    /* short body, name longer than the body, NUL in the name */
    assert_int_equal(mc__te_notify_decode(b, 3, &on, &onl, &om, &oml), -EBADMSG);
    mc_put_le32(b, (uint32_t)n);
    assert_int_equal(mc__te_notify_decode(b, n, &on, &onl, &om, &oml), -EBADMSG);
    mc_put_le32(b, (uint32_t)strlen(name));
    b[5] = 0;
    assert_int_equal(mc__te_notify_decode(b, n, &on, &onl, &om, &oml), -EBADMSG);
    free(b);
}

static void test_hs_parse(void **state)
{
    (void)state;
    uint8_t buf[64];
    mc__te_hs_frame f;
    mc__te_hs_encode_prefix(buf, MC_TE_HS_PROBE, 2);
    memcpy(buf + 9, "{}", 2);
    /* every prefix of the frame asks for more */
    for (size_t i = 0; i < 11; i++)
        assert_int_equal(mc__te_hs_parse(buf, i, 1024, &f), 0);
    assert_int_equal(mc__te_hs_parse(buf, 11, 1024, &f), 11);
    assert_int_equal(f.type, MC_TE_HS_PROBE);
    assert_int_equal(f.payload_len, 2);
    assert_memory_equal(f.payload, "{}", 2);
    /* two frames back to back: the first is returned */
    mc__te_hs_encode_prefix(buf + 11, MC_TE_HS_METADATA, 0);
    assert_int_equal(mc__te_hs_parse(buf, 20, 1024, &f), 11);
    assert_int_equal(mc__te_hs_parse(buf + 11, 9, 1024, &f), 9);
    assert_int_equal(f.type, MC_TE_HS_METADATA);
    assert_int_equal(f.payload_len, 0);
    /* zero length, over the limit, absurd */
    mc_put_le64(buf, 0);
    assert_int_equal(mc__te_hs_parse(buf, 9, 1024, &f), -EPROTO);
    mc_put_le64(buf, 1025);
    assert_int_equal(mc__te_hs_parse(buf, 8, 1024, &f), -EMSGSIZE);
    mc_put_le64(buf, UINT64_MAX);
    assert_int_equal(mc__te_hs_parse(buf, 8, UINT64_MAX, &f), -EMSGSIZE);
}

static void test_hs_notify_json(void **state)
{
    (void)state;
    char *n, *m;
    size_t ml;
    const char *ok = "{\"name\": \"a\", \"notify_msg\": \"b\\u0000c\"}";
    assert_int_equal(mc__te_hs_notify_decode((const uint8_t *)ok, strlen(ok), &n, &m, &ml), 0);
    assert_string_equal(n, "a");
    assert_int_equal(ml, 3);
    assert_memory_equal(m, "b\0c", 3);
    free(n);
    free(m);
    const char *bad[] = {"", "[]", "{\"name\": 1}", "{\"notify_msg\": \"x\"}",
                         "{\"name\": \"a\\u0000b\"}", "{\"name\": \"a\", \"name\": \"b\"}",
                         "{\"name\": \"a\", \"notify_msg\": 3}", "{\"name\": \"a\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(
            mc__te_hs_notify_decode((const uint8_t *)bad[i], strlen(bad[i]), &n, &m, &ml),
            -EBADMSG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_req_roundtrip), cmocka_unit_test(test_req_rejects),
        cmocka_unit_test(test_rep),           cmocka_unit_test(test_range_inside),
        cmocka_unit_test(test_notify_body),   cmocka_unit_test(test_hs_parse),
        cmocka_unit_test(test_hs_notify_json), cmocka_unit_test(test_hello_and_versions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
