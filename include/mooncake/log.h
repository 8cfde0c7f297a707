/* log.h: leveled logging with a settable sink.
 *
 * mc_log(level, tag, fmt, ...) checks the level before any formatting happens, so a
 * disabled mc_log costs one load and one compare. The initial level comes from the
 * environment variable MC_LOG_LEVEL (upstream name, see upstream-mooncake.md §6.6):
 * TRACE, DEBUG, INFO, WARNING (or WARN), ERROR, FATAL/OFF, case-insensitive, or 0..5.
 * The default is INFO. Messages go to stderr unless a sink is set (the Python modules
 * route them to `logging`). No per-operation logging on hot paths (CONTRIBUTING.md).
 */
#ifndef MOONCAKE_LOG_H
#define MOONCAKE_LOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "mooncake/mc_api.h"

typedef enum mc_log_level {
    MC_LOG_TRACE = 0,
    MC_LOG_DEBUG = 1,
    MC_LOG_INFO = 2,
    MC_LOG_WARN = 3,
    MC_LOG_ERROR = 4,
    MC_LOG_OFF = 5,
} mc_log_level;

/* A sink receives each formatted message (no trailing newline). msg is borrowed for
 * the duration of the call. Called from any thread, possibly from several at once, and
 * never with log.c's lock held: a sink may take its own locks (the Python sink takes the
 * GIL) while other threads holding those locks call mc_log. A sink must be thread-safe
 * and must not call mc_log_set_sink. */
typedef void (*mc_log_sink_fn)(mc_log_level level, const char *tag, const char *msg,
                               void *ctx);

/* The current threshold; read by the mc_log macro without a lock (relaxed loads: a
 * level change reaches other threads soon, not in any order with other memory). */
MC_API extern _Atomic int mc__log_threshold;

/* mc_log_set_level: messages below level are dropped before formatting. */
MC_API void mc_log_set_level(mc_log_level level);
MC_API mc_log_level mc_log_get_level(void);

/* mc_log_parse_level: "info", "WARNING", "3", ... -> level; -1 when not recognised. */
MC_API int mc_log_parse_level(const char *text);

/* mc_log_init_from_env: applies MC_LOG_LEVEL if set and valid (called lazily by the
 * first mc_log, and by programs at start). Returns 0, or -EINVAL when the variable is
 * set to something unrecognised (the level is then left unchanged). */
MC_API int mc_log_init_from_env(void);

/* mc_log_set_sink: routes messages to fn(ctx); NULL restores stderr. A message being
 * delivered while the sink changes may still go to the old sink, so the old ctx must
 * stay valid (the sinks in this tree use static or NULL contexts). */
MC_API void mc_log_set_sink(mc_log_sink_fn fn, void *ctx);

/* mc_log_set_file: glog-style file output (mooncake_master --log_dir): with fp set,
 * messages that would go to stderr (no sink set) are written to fp, one line per
 * message with one stdio call, and stderr gets only those at stderr_level or above
 * (MC_LOG_OFF: none). fp is borrowed: the caller keeps it open until it calls
 * mc_log_set_file(NULL, ...), which restores plain stderr. Call it at start-up or
 * shutdown (a message being delivered meanwhile may still use the old fp). A sink set
 * with mc_log_set_sink takes precedence over both. */
MC_API void mc_log_set_file(FILE *fp, mc_log_level stderr_level);

/* mc_log_level_name: "TRACE".."ERROR". */
MC_API const char *mc_log_level_name(mc_log_level level);

/* mc__log_emit: formats and delivers; use the mc_log macro instead. */
MC_API void mc__log_emit(mc_log_level level, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define mc_log(level, tag, ...)                                                        \
    do {                                                                               \
        if ((int)(level) >= atomic_load_explicit(&mc__log_threshold,                   \
                                                 memory_order_relaxed))                \
            mc__log_emit((level), (tag), __VA_ARGS__);                                 \
    } while (0)

#endif
