/* common/list.h: push/pop order, removal (twice is safe), move (LRU touch), splice,
 * front/back on empty lists, and iteration that removes the current node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/list.h"

typedef struct item {
    int v;
    mc_list link;
} item;

static int val(mc_list *n)
{
    return MC_CONTAINER_OF(n, item, link)->v;
}

/* Checks that h holds exactly want[0..n) in order, both ways round. */
static void expect(mc_list *h, const int *want, size_t n)
{
    assert_int_equal(mc_list_count(h), n);
    size_t i = 0;
    item *it;
    MC_LIST_FOREACH_ENTRY(it, h, item, link)
        assert_int_equal(it->v, want[i++]);
    assert_int_equal(i, n);
    for (mc_list *p = h->prev; p != h; p = p->prev)
        assert_int_equal(val(p), want[--i]);
}

static void test_basic(void **state)
{
    (void)state;
    mc_list h;
    mc_list_init(&h);
    assert_true(mc_list_empty(&h));
    assert_null(mc_list_front(&h));
    assert_null(mc_list_back(&h));
    assert_null(mc_list_pop_front(&h));
    item a[5];
    for (int i = 0; i < 5; i++) {
        a[i].v = i;
        mc_list_init(&a[i].link);
        assert_false(mc_list_linked(&a[i].link));
    }
    mc_list_push_back(&h, &a[1].link);
    mc_list_push_back(&h, &a[2].link);
    mc_list_push_front(&h, &a[0].link);
    expect(&h, (int[]){0, 1, 2}, 3);
    assert_true(mc_list_linked(&a[1].link));
    assert_int_equal(val(mc_list_front(&h)), 0);
    assert_int_equal(val(mc_list_back(&h)), 2);
    mc_list_remove(&a[1].link);
    assert_false(mc_list_linked(&a[1].link));
    mc_list_remove(&a[1].link); /* twice: a no-op */
    expect(&h, (int[]){0, 2}, 2);
    mc_list_move_back(&h, &a[0].link); /* LRU touch */
    expect(&h, (int[]){2, 0}, 2);
    assert_int_equal(val(mc_list_pop_front(&h)), 2);
    assert_int_equal(val(mc_list_pop_front(&h)), 0);
    assert_true(mc_list_empty(&h));
}

static void test_splice_and_removing_walk(void **state)
{
    (void)state;
    mc_list h, other;
    mc_list_init(&h);
    mc_list_init(&other);
    item a[6];
    for (int i = 0; i < 6; i++) {
        a[i].v = i;
        mc_list_push_back(i < 3 ? &h : &other, &a[i].link);
    }
    mc_list_splice_back(&h, &other);
    assert_true(mc_list_empty(&other));
    expect(&h, (int[]){0, 1, 2, 3, 4, 5}, 6);
    mc_list_splice_back(&h, &other); /* empty: nothing moves */
    expect(&h, (int[]){0, 1, 2, 3, 4, 5}, 6);
    /* removing the current node while walking */
    MC_LIST_FOREACH(n, &h)
        if (val(n) % 2)
            mc_list_remove(n);
    expect(&h, (int[]){0, 2, 4}, 3);
    item *it;
    MC_LIST_FOREACH_ENTRY(it, &h, item, link)
        mc_list_remove(&it->link);
    assert_true(mc_list_empty(&h));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_splice_and_removing_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
