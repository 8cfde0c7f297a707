/* status.c: lookups over the one status table (include/mooncake/status.h). */
#include "mooncake/status.h"

#include <errno.h>
#include <string.h>

static const mc_status_info k_table[] = {
#define MC__STATUS_ROW(name, value, msg) {#name, (value), (msg)},
    MC_STATUS_TABLE(MC__STATUS_ROW)
#undef MC__STATUS_ROW
};

const mc_status_info *mc_status_table(size_t *count)
{
    if (count)
        *count = sizeof k_table / sizeof k_table[0];
    return k_table;
}

static const mc_status_info *find_value(int status)
{
    for (size_t i = 0; i < sizeof k_table / sizeof k_table[0]; i++)
        if (k_table[i].value == status)
            return &k_table[i];
    return NULL;
}

const char *mc_strerror(int status)
{
    const mc_status_info *row = find_value(status);
    return row ? row->msg : "unknown status code";
}

const char *mc_status_name(int status)
{
    const mc_status_info *row = find_value(status);
    return row ? row->name : NULL;
}

int mc_status_from_name(const char *name)
{
    if (!name)
        return 1;
    for (size_t i = 0; i < sizeof k_table / sizeof k_table[0]; i++)
        if (strcmp(k_table[i].name, name) == 0)
            return k_table[i].value;
    return 1;
}

int mc_status_from_errno(int err)
{
    switch (err) {
    case 0:
        return MC_OK;
    case -ETIMEDOUT:
        return MC_RPC_TIMEOUT;
    case -EINVAL:
    case -EFAULT:
    case -ERANGE:
    case -E2BIG:
        return MC_INVALID_PARAMS;
    case -ENOMEM:
    case -ENOSPC:
        return MC_NO_AVAILABLE_HANDLE;
    case -ENOENT:
        return MC_OBJECT_NOT_FOUND;
    case -ECONNREFUSED:
    case -ECONNRESET:
    case -EPIPE:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
    case -ENOTCONN:
    case -EIO:
        return MC_TRANSFER_FAIL;
    default:
        return MC_INTERNAL_ERROR;
    }
}
