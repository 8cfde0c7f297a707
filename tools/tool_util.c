/* tool_util.c: see tool_util.h. */
#include "tool_util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mc_tool_block_stop_signals(sigset_t *stop)
{
    sigemptyset(stop);
    sigaddset(stop, SIGINT);
    sigaddset(stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, stop, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int mc_tool_listen_failed(const char *prog, const char *host_flag, const char *host,
                          const char *port_flag, long long port, int rc)
{
    if (rc == -ENOENT || rc == -EINVAL) {
        fprintf(stderr,
                "%s: invalid address '%s' for --%s: not an IP address or a host name that "
                "resolves\n",
                prog, host, host_flag);
        return 2;
    }
    if (rc == -EADDRNOTAVAIL)
        fprintf(stderr, "%s: cannot listen on %s (--%s): not an address of this machine\n",
                prog, host, host_flag);
    else if (rc == -EADDRINUSE)
        fprintf(stderr,
                "%s: cannot listen on %s:%lld (--%s, --%s): %s: another process (another "
                "mooncake_master?) holds that port; stop it or pass another --%s\n",
                prog, host, port, host_flag, port_flag, strerror(-rc), port_flag);
    else
        fprintf(stderr, "%s: cannot listen on %s:%lld (--%s, --%s): %s\n", prog, host, port,
                host_flag, port_flag, strerror(-rc));
    return 1;
}

/* Whether row o holds its default; *shown receives the value as text. */
static bool at_default(const mc_option *o, char *shown, size_t len)
{
    const char *d = o->def ? o->def : "";
    switch (o->type) {
    case MC_OPT_BOOL: {
        bool v = *(const bool *)o->target, dv = false;
        snprintf(shown, len, "%s", v ? "true" : "false");
        return mc_parse_bool(d, &dv) == 0 && v == dv;
    }
    case MC_OPT_INT: {
        int64_t v = *(const int64_t *)o->target;
        snprintf(shown, len, "%" PRId64, v);
        return v == strtoll(d, NULL, 10);
    }
    case MC_OPT_DOUBLE: {
        double v = *(const double *)o->target;
        snprintf(shown, len, "%g", v);
        return v == strtod(d, NULL);
    }
    case MC_OPT_SIZE: {
        uint64_t v = *(const uint64_t *)o->target, dv = 0;
        snprintf(shown, len, "%" PRIu64, v);
        return mc_parse_size(d, &dv) == 0 && v == dv;
    }
    case MC_OPT_STRING: {
        const char *v = *(char *const *)o->target;
        snprintf(shown, len, "%s", v ? v : "");
        return strcmp(v ? v : "", d) == 0;
    }
    }
    return false;
}

int mc_tool_refuse_non_defaults(const char *prog, const mc_option *tbl, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const mc_option *o = &tbl[i];
        char shown[256];
        if (!o->only_default || at_default(o, shown, sizeof shown))
            continue;
        fprintf(stderr,
                "%s: --%s=%s is refused: %s; only upstream's default --%s=%s is accepted: "
                "drop the flag\n",
                prog, o->name, shown, o->only_default, o->name, o->def ? o->def : "");
        return 2;
    }
    return 0;
}
