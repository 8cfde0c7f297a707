/* common/fdio.h: whole-buffer writes to a file descriptor (files, pipes), the loop every
 * writer of a log or snapshot needs once: short writes continue, EINTR retries.
 * Sockets with deadlines use net/sock.h (mc_sock_send_all) instead. */
#ifndef MOONCAKE_COMMON_FDIO_H
#define MOONCAKE_COMMON_FDIO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

/* mc_write_all: writes all n bytes of buf to fd (blocking). 0, or -errno of the failed
 * write(2) (bytes before it may have been written). Thread-safe as write(2) is. */
static inline int mc_write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

#endif
