/* tool_util.c: see tool_util.h. */
#include "tool_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
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
