/* Status table: every row round-trips value <-> name <-> message; a sample of upstream
 * numbers (API.md §1) is checked literally; names and values are unique. The Python
 * side is checked against the full upstream list in tests/integration/test_status_codes.py. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "mooncake/status.h"

static void test_roundtrip(void **state)
{
    (void)state;
    size_t n;
    const mc_status_info *t = mc_status_table(&n);
    assert_true(n >= 70);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(mc_status_name(t[i].value), t[i].name);
        assert_int_equal(mc_status_from_name(t[i].name), t[i].value);
        assert_string_equal(mc_strerror(t[i].value), t[i].msg);
        for (size_t j = i + 1; j < n; j++) {
            assert_int_not_equal(t[i].value, t[j].value);
            assert_true(strcmp(t[i].name, t[j].name) != 0);
        }
    }
}

static void test_upstream_numbers(void **state)
{
    (void)state;
    assert_int_equal(MC_OK, 0);
    assert_int_equal(MC_INTERNAL_ERROR, -1);
    assert_int_equal(MC_BUFFER_OVERFLOW, -10);
    assert_int_equal(MC_SEGMENT_NOT_FOUND, -101);
    assert_int_equal(MC_NO_AVAILABLE_HANDLE, -200);
    assert_int_equal(MC_INVALID_KEY, -400);
    assert_int_equal(MC_INVALID_PARAMS, -600);
    assert_int_equal(MC_OBJECT_NOT_FOUND, -704);
    assert_int_equal(MC_OBJECT_HAS_LEASE, -706);
    assert_int_equal(MC_LEASE_EXPIRED, -707);
    assert_int_equal(MC_TRANSFER_FAIL, -800);
    assert_int_equal(MC_RPC_TIMEOUT, -901);
    assert_int_equal(MC_ETCD_OPERATION_ERROR, -1000);
    assert_int_equal(MC_TENANT_NOT_EMPTY, -1702);
}

static void test_unknown(void **state)
{
    (void)state;
    assert_null(mc_status_name(12345));
    assert_string_equal(mc_strerror(12345), "unknown status code");
    assert_int_equal(mc_status_from_name("NOPE"), 1);
    assert_int_equal(mc_status_from_name(NULL), 1);
}

static void test_from_errno(void **state)
{
    (void)state;
    assert_int_equal(mc_status_from_errno(0), MC_OK);
    assert_int_equal(mc_status_from_errno(-ETIMEDOUT), MC_RPC_TIMEOUT);
    assert_int_equal(mc_status_from_errno(-EINVAL), MC_INVALID_PARAMS);
    assert_int_equal(mc_status_from_errno(-ENOSPC), MC_NO_AVAILABLE_HANDLE);
    assert_int_equal(mc_status_from_errno(-ECONNRESET), MC_TRANSFER_FAIL);
    assert_int_equal(mc_status_from_errno(-EBADF), MC_INTERNAL_ERROR);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_upstream_numbers),
        cmocka_unit_test(test_unknown),
        cmocka_unit_test(test_from_errno),
    };
    return cmocka_run_group_tests_name("status", tests, NULL, NULL);
}
