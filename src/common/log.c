/* log.c: see include/mooncake/log.h. Owns the level (a C11 atomic), the sink pointer
 * and the stderr format. Lock rule: g_lock guards only the sink and file pointers and is never
 * held while a message is delivered (the Python sink takes the GIL; code holding the
 * GIL calls mc_log), so log.c takes part in no lock order. */
#include "mooncake/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

_Atomic int mc__log_threshold = MC_LOG_INFO;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mc_log_sink_fn g_sink;  /* guarded by g_lock */
static void *g_sink_ctx;       /* guarded by g_lock */
static FILE *g_file;           /* guarded by g_lock: --log_dir's file, or NULL */
static int g_stderr_level;     /* guarded by g_lock: with g_file, stderr's threshold */
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

static const char *const k_names[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "OFF"};

const char *mc_log_level_name(mc_log_level level)
{
    if ((int)level < 0 || level > MC_LOG_OFF)
        return "?";
    return k_names[level];
}

void mc_log_set_level(mc_log_level level)
{
    if ((int)level < MC_LOG_TRACE)
        level = MC_LOG_TRACE;
    if (level > MC_LOG_OFF)
        level = MC_LOG_OFF;
    atomic_store_explicit(&mc__log_threshold, (int)level, memory_order_relaxed);
}

mc_log_level mc_log_get_level(void)
{
    return (mc_log_level)atomic_load_explicit(&mc__log_threshold, memory_order_relaxed);
}

int mc_log_parse_level(const char *text)
{
    static const struct { const char *name; int level; } names[] = {
        {"trace", MC_LOG_TRACE}, {"debug", MC_LOG_DEBUG}, {"info", MC_LOG_INFO},
        {"warning", MC_LOG_WARN}, {"warn", MC_LOG_WARN}, {"error", MC_LOG_ERROR},
        {"fatal", MC_LOG_OFF}, {"off", MC_LOG_OFF},
    };
    if (!text || !*text)
        return -1;
    if (text[0] >= '0' && text[0] <= '5' && text[1] == '\0')
        return text[0] - '0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(text, names[i].name) == 0)
            return names[i].level;
    return -1;
}

static int apply_env(void)
{
    const char *v = getenv("MC_LOG_LEVEL");
    if (!v)
        return 0;
    int level = mc_log_parse_level(v);
    if (level < 0)
        return -EINVAL;
    mc_log_set_level((mc_log_level)level);
    return 0;
}

static void env_once(void)
{
    (void)apply_env();
}

int mc_log_init_from_env(void)
{
    pthread_once(&g_env_once, env_once);
    return apply_env();
}

void mc_log_set_sink(mc_log_sink_fn fn, void *ctx)
{
    pthread_mutex_lock(&g_lock);
    g_sink = fn;
    g_sink_ctx = ctx;
    pthread_mutex_unlock(&g_lock);
}

void mc_log_set_file(FILE *fp, mc_log_level stderr_level)
{
    pthread_mutex_lock(&g_lock);
    g_file = fp;
    g_stderr_level = (int)stderr_level;
    pthread_mutex_unlock(&g_lock);
}

void mc__log_emit(mc_log_level level, const char *tag, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!tag)
        tag = "";

    /* Copy the sink under the lock, deliver after unlocking: a sink that blocks (the
     * Python one waits for the GIL) must not hold up other threads' mc_log calls. */
    pthread_mutex_lock(&g_lock);
    mc_log_sink_fn sink = g_sink;
    void *ctx = g_sink_ctx;
    FILE *file = g_file;
    int stderr_level = g_stderr_level;
    pthread_mutex_unlock(&g_lock);
    if (sink) {
        sink(level, tag, buf, ctx);
        return;
    }

    /* stderr: the whole line is formatted first and written with one stdio call, which
     * takes the FILE's own lock, so lines from concurrent threads never interleave. */
    struct timespec ts;
    struct tm tm;
    char line[sizeof buf + 128];
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%c%02d%02d %02d:%02d:%02d.%06ld %s] %s\n",
                     mc_log_level_name(level)[0], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, tag, buf);
    if (n >= (int)sizeof line) { /* a truncated line still ends with its newline */
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    if (n <= 0)
        return;
    if (file)
        fwrite(line, 1, (size_t)n, file);
    if (!file || (int)level >= stderr_level)
        fwrite(line, 1, (size_t)n, stderr);
}

/* Read MC_LOG_LEVEL once when the library is loaded, so the first mc_log already
 * honours it without a per-call check. */
__attribute__((constructor)) static void log_ctor(void)
{
    pthread_once(&g_env_once, env_once);
}
