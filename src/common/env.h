/* common/env.h: the one reader of environment variables, with one policy: an unset or
 * empty variable means "use the default"; a set variable that does not parse or is out
 * of range is an error: the reader logs "NAME=value: expected ..." at ERROR (tag "env")
 * and returns -EINVAL, and the caller fails the call that read it (create / setup), with
 * INVALID_PARAMS where it returns a status. Never a silent default.
 * Sizes accept the options syntax ("4GB", "512MiB", plain bytes; mc_parse_size); bools
 * accept 1/0, true/false, yes/no, on/off (mc_parse_bool).
 * Thread-safe as getenv is (read-only use of the environment). */
#ifndef MOONCAKE_COMMON_ENV_H
#define MOONCAKE_COMMON_ENV_H

#include <stdbool.h>
#include <stdint.h>

/* mc_env_str: the variable's value, or NULL when unset or empty. Borrowed (environ). */
const char *mc_env_str(const char *name);
/* mc_env_u64: *out = the value in [min, max], or def when unset. 0 or -EINVAL. */
int mc_env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *out);
/* mc_env_size: like mc_env_u64 with size suffixes (bytes). */
int mc_env_size(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *out);
/* mc_env_double: *out = the value in [min, max], or def when unset. 0 or -EINVAL. */
int mc_env_double(const char *name, double def, double min, double max, double *out);
/* mc_env_bool: *out = the value, or def when unset. 0 or -EINVAL. */
int mc_env_bool(const char *name, bool def, bool *out);

#endif
