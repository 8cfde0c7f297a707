/* The HA serve gate of the master service (ha_gate.c; docs/ha.md): without HA a service
 * always serves with view 0; with HA it serves only as LEADER before its lease deadline
 * (monotonic ms), never as STANDBY or DEPOSED; the view and leader land in the stats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "master/master_service.h"
#include "mooncake/mc_time.h"

static void test_gate(void **state)
{
    (void)state;
    mc_master_service *svc;
    assert_int_equal(mc_master_service_create(NULL, &svc), MC_OK);
    mc_master_stats st;
    mc_master_service_get_stats(svc, &st);
    assert_true(mc_master_service_serving(svc)); /* no HA: always */
    assert_int_equal(mc_master_service_view(svc), 0);
    assert_int_equal(st.role, MC_MASTER_ROLE_LEADER);
    assert_int_equal(st.view_version, 0);

    mc_master_service_ha_enable(svc);
    assert_false(mc_master_service_serving(svc)); /* a standby until elected */
    mc_master_service_ha_set(svc, MC_MASTER_ROLE_STANDBY, 7, "10.0.0.2:50051", 0);
    assert_false(mc_master_service_serving(svc));
    mc_master_service_get_stats(svc, &st);
    assert_int_equal(st.role, MC_MASTER_ROLE_STANDBY);
    assert_int_equal(st.view_version, 7);
    assert_string_equal(st.leader, "10.0.0.2:50051");

    uint64_t now = mc_now_ms();
    mc_master_service_ha_set(svc, MC_MASTER_ROLE_LEADER, 9, "10.0.0.1:50051", now + 60000);
    assert_true(mc_master_service_serving(svc));
    assert_int_equal(mc_master_service_view(svc), 9);
    mc_master_service_ha_extend(svc, now - 1); /* the deadline passed: fenced */
    assert_false(mc_master_service_serving(svc));
    mc_master_service_ha_extend(svc, now + 60000);
    assert_true(mc_master_service_serving(svc));

    mc_master_service_ha_set(svc, MC_MASTER_ROLE_DEPOSED, 9, NULL, now + 60000);
    assert_false(mc_master_service_serving(svc));
    mc_master_service_ha_extend(svc, now + 60000); /* a deposed master is never re-opened */
    assert_false(mc_master_service_serving(svc));
    mc_master_service_get_stats(svc, &st);
    assert_string_equal(st.leader, "10.0.0.1:50051"); /* NULL kept it */
    assert_string_equal(mc_master_role_name(st.role), "deposed");
    mc_master_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gate)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
