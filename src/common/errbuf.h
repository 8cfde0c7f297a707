/* common/errbuf.h: the one way to write a one-line reason into a caller's error buffer
 * (the char *err, size_t errlen pairs of parsers). Pure; thread-safe. */
#ifndef MOONCAKE_COMMON_ERRBUF_H
#define MOONCAKE_COMMON_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* mc_errf: formats into err (errlen bytes, always NUL-terminated); err NULL or errlen 0
 * writes nothing. Callers wrap it to return their own code, e.g.
 *   #define fail(err, errlen, ...) (mc_errf((err), (errlen), __VA_ARGS__), -EINVAL) */
static inline void mc_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline void mc_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

#endif
