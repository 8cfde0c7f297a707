/* mc_api.h: export macro for the public C API.
 * Everything is built with -fvisibility=hidden; only declarations marked MC_API are
 * exported from shared objects (the CPython extension modules link the static libs). */
#ifndef MOONCAKE_MC_API_H
#define MOONCAKE_MC_API_H

#if defined(__GNUC__) || defined(__clang__)
#define MC_API __attribute__((visibility("default")))
#else
#define MC_API
#endif

#endif
