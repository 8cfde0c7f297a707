/* xalloc.c: see xalloc.h. Messages go straight to stderr (no mc_log: logging may itself
 * need memory, and the process is about to abort). */
#include "common/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void mc__oom(size_t n, const char *file, int line)
{
    fprintf(stderr, "mooncake: out of memory allocating %zu bytes at %s:%d\n", n, file, line);
    abort();
}

_Noreturn void mc__assert_fail(const char *expr, const char *file, int line, const char *func)
{
    fprintf(stderr, "mooncake: assertion failed: %s at %s:%d (%s)\n", expr, file, line, func);
    abort();
}

void *mc__xmalloc(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        mc__oom(n, file, line);
    return p;
}

void *mc__xcalloc(size_t count, size_t size, const char *file, int line)
{
    if (size && count > (size_t)-1 / size)
        mc__oom((size_t)-1, file, line);
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        mc__oom(count * size, file, line);
    return p;
}

void *mc__xrealloc(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        mc__oom(n, file, line);
    return q;
}

char *mc__xstrdup(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    char *p = mc__xmalloc(n, file, line);
    memcpy(p, s, n);
    return p;
}

char *mc__xstrndup(const char *s, size_t n, const char *file, int line)
{
    size_t len = strnlen(s, n);
    char *p = mc__xmalloc(len + 1, file, line);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}
