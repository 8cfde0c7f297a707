/* store_internal.h: internals of the store client shared with its tests.
 *
 * Test hooks: deterministic ways for tests to stop at the points where the protocol's
 * failure cases happen (a writer dying between put_start and put_end, a read that
 * outlives its lease). Production code never sets them. */
#ifndef MOONCAKE_CLIENT_STORE_INTERNAL_H
#define MOONCAKE_CLIENT_STORE_INTERNAL_H

#include <stddef.h>

/* Hook points (the `point` argument). */
#define MC__STORE_HOOK_PUT_STARTED "put_started" /* after put_start succeeded, before any
                                                    byte is written */
#define MC__STORE_HOOK_READ_DONE "read_done"     /* after a read's transfer finished, before
                                                    the lease check */

/* Called at each hook point with the key of the item (for batches: the first key of the
 * call). NULL (the default) = no hook. Set it before the calls it should see; read
 * without a lock. */
typedef void (*mc__store_hook_fn)(const char *point, const void *key, size_t key_len);
extern mc__store_hook_fn mc__store_test_hook;

#endif
