/* env.c: see env.h. */
#include "common/env.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "mooncake/log.h"
#include "mooncake/options.h"

#define TAG "env"

const char *mc_env_str(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int bad(const char *name, const char *v, const char *what)
{
    mc_log(MC_LOG_ERROR, TAG, "%s=%s: expected %s (unset it for the default)", name, v, what);
    return -EINVAL;
}

static int out_of_range(const char *name, const char *v, uint64_t min, uint64_t max)
{
    mc_log(MC_LOG_ERROR, TAG, "%s=%s: expected a value in %llu..%llu (unset it for the "
           "default)", name, v, (unsigned long long)min, (unsigned long long)max);
    return -EINVAL;
}

static int range_u64(const char *name, const char *v, uint64_t x, uint64_t min, uint64_t max,
                     uint64_t *out)
{
    if (x < min || x > max)
        return out_of_range(name, v, min, max);
    *out = x;
    return 0;
}

int mc_env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *v = mc_env_str(name);
    *out = def;
    if (!v)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    /* digits only: strtoull would also take leading blanks and a sign (" -1" wraps) */
    if (errno || end == v || *end || *v < '0' || *v > '9') {
        if (errno == ERANGE && end != v && !*end && *v >= '0' && *v <= '9')
            return out_of_range(name, v, min, max); /* digits only, beyond 2^64 */
        return bad(name, v, "a non-negative integer");
    }
    return range_u64(name, v, x, min, max, out);
}

int mc_env_size(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *v = mc_env_str(name);
    *out = def;
    if (!v)
        return 0;
    uint64_t x;
    if (mc_parse_size(v, &x) != 0)
        return bad(name, v, "a size in bytes (e.g. 65536, 64KB, 4GiB)");
    return range_u64(name, v, x, min, max, out);
}

int mc_env_double(const char *name, double def, double min, double max, double *out)
{
    const char *v = mc_env_str(name);
    *out = def;
    if (!v)
        return 0;
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < min || x > max) {
        mc_log(MC_LOG_ERROR, TAG, "%s=%s: expected a number in %g..%g (unset it for the "
               "default)", name, v, min, max);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

int mc_env_bool(const char *name, bool def, bool *out)
{
    const char *v = mc_env_str(name);
    *out = def;
    if (!v)
        return 0;
    bool b;
    if (mc_parse_bool(v, &b) != 0)
        return bad(name, v, "a boolean (1/0, true/false, yes/no, on/off)");
    *out = b;
    return 0;
}
