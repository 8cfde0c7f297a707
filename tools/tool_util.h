/* tool_util.h: the start-up steps the tools (mooncake_master,
 * mooncake_http_metadata_server, mooncake_client, transfer_engine_bench) share: blocking
 * the stop signals before any thread starts, naming a listen failure, refusing upstream
 * flags set to a value mooncake-c does not implement. Not a library: compiled into each tool that uses it. */
#ifndef MC_TOOLS_TOOL_UTIL_H
#define MC_TOOLS_TOOL_UTIL_H

#include <signal.h>
#include <stddef.h>

#include "mooncake/options.h"

/* mc_tool_block_stop_signals: fills *stop with SIGINT and SIGTERM and blocks them in the
 * calling thread (threads started later inherit the mask, so only the main thread's
 * sigwait / sigtimedwait on *stop receives them); ignores SIGPIPE. Call from main before
 * starting any thread. */
void mc_tool_block_stop_signals(sigset_t *stop);

/* mc_tool_listen_failed: prints to stderr why `prog` cannot listen on host:port (the
 * flags --host_flag / --port_flag named), rc being a start function's -errno (-ENOENT or
 * -EINVAL: not an address; -EADDRNOTAVAIL: not one of this machine). Returns the exit
 * code: 2 for a bad address (a usage error), else 1. */
int mc_tool_listen_failed(const char *prog, const char *host_flag, const char *host,
                          const char *port_flag, long long port, int rc);

/* mc_tool_refuse_non_defaults: after mc_options_main, checks every row of tbl whose
 * only_default is set (options.h): its value (parsed, so "0.050" equals "0.05" and
 * --noflag equals false) must equal the row's default. The first that differs is printed
 * to stderr as "prog: --name=value is refused: <only_default>; only upstream's default
 * --name=<def> is accepted: drop the flag" and 2 (the exit code) is returned; 0 when all
 * are at their defaults. */
int mc_tool_refuse_non_defaults(const char *prog, const mc_option *tbl, size_t n);

#endif
