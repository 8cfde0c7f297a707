/* common/mix.h: splitmix64, the 64-bit finaliser of Steele, Lea and Flood's SplitMix
 * generator (the constants of Java's SplittableRandom, also used by xoshiro's seeding):
 * a bijection of uint64_t whose every output bit depends on every input bit. Used where
 * a value must be spread, not kept secret (it is not a cryptographic hash): the client's
 * user-buffer tree priorities (client/user_buffers.c) and the trace replay's block
 * seeds (src/python/replay_codec.c; blocks.py computes the same in numpy). Header only,
 * so an extension module that links no mooncake library can use it. */
#ifndef MOONCAKE_COMMON_MIX_H
#define MOONCAKE_COMMON_MIX_H

#include <stdint.h>

/* mc_splitmix64: the finaliser of x (any value; wraps modulo 2**64). */
static inline uint64_t mc_splitmix64(uint64_t x)
{
    uint64_t z = x + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

#endif
