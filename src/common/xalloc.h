/* common/xalloc.h: allocation helpers that abort on out-of-memory, naming the size and
 * the call site, and MC_ASSERT for invariants. For small internal allocations only
 * (CONTRIBUTING.md "Errors and ownership"): any size that comes from a peer or from
 * Python is checked against a maximum first and fails with a status instead.
 * Every helper returns memory owned by the caller (free() it); none returns NULL.
 * A zero size is allowed and returns a unique pointer (malloc(1)'s). */
#ifndef MOONCAKE_COMMON_XALLOC_H
#define MOONCAKE_COMMON_XALLOC_H

#include <stddef.h>

#define mc_xmalloc(n) mc__xmalloc((n), __FILE__, __LINE__)
#define mc_xcalloc(count, size) mc__xcalloc((count), (size), __FILE__, __LINE__)
#define mc_xrealloc(p, n) mc__xrealloc((p), (n), __FILE__, __LINE__)
#define mc_xstrdup(s) mc__xstrdup((s), __FILE__, __LINE__)
#define mc_xstrndup(s, n) mc__xstrndup((s), (n), __FILE__, __LINE__)

/* mc_oom: reports "out of memory allocating N bytes at FILE:LINE" on stderr and aborts.
 * For allocations made by other means (a library's constructor returning NULL). */
#define mc_oom(n) mc__oom((n), __FILE__, __LINE__)

/* MC_ASSERT: an invariant of our own code (never of input). Checked in every build type;
 * on failure prints the expression and the call site on stderr and aborts. */
#define MC_ASSERT(cond)                                                                  \
    ((cond) ? (void)0 : mc__assert_fail(#cond, __FILE__, __LINE__, __func__))

void *mc__xmalloc(size_t n, const char *file, int line);
void *mc__xcalloc(size_t count, size_t size, const char *file, int line);
void *mc__xrealloc(void *p, size_t n, const char *file, int line);
char *mc__xstrdup(const char *s, const char *file, int line);
char *mc__xstrndup(const char *s, size_t n, const char *file, int line);
_Noreturn void mc__oom(size_t n, const char *file, int line);
_Noreturn void mc__assert_fail(const char *expr, const char *file, int line,
                               const char *func);

#endif
