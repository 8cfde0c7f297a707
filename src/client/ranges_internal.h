/* client/ranges_internal.h: what ranges.c (ranged reads and writes, put/get sessions)
 * needs from the other files of src/client beyond client/internal.h. Kept apart from
 * internal.h so the ranged API does not touch the shared header. Only src/client and
 * tests/unit/client include it. */
#ifndef MOONCAKE_CLIENT_RANGES_INTERNAL_H
#define MOONCAKE_CLIENT_RANGES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "mooncake/store.h"

/* True when one buffer registered with mc_store_register_buffer holds all of
 * [addr, addr+len) (len >= 1). Caller holds life shared. user_buffers.c. */
bool mc__ubuf_holds(mc_store *s, const void *addr, uint64_t len);

#endif
