/* sock.c: see sock.h. */
#include "net/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/spin.h"
#include "mooncake/mc_time.h"

/* hp_fail: the reason into err, and -EINVAL */
#define hp_fail(err, errlen, ...) (mc_errf((err), (errlen), __VA_ARGS__), -EINVAL)

int mc_sock_split_hostport(const char *s, size_t len, unsigned flags, char *out,
                           size_t hostlen, int *port_out, char *err, size_t errlen)
{
    if (!s || len == 0)
        return hp_fail(err, errlen, "empty address");
    if (!out || hostlen == 0 || !port_out)
        return hp_fail(err, errlen, "no room for the host");
    const int w = len > 256 ? 256 : (int)len; /* how much of the text errors quote */
    const char *host = s, *port = NULL;
    size_t hlen, plen = 0;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close)
            return hp_fail(err, errlen, "unterminated '[' in address '%.*s'", w, s);
        host = s + 1;
        hlen = (size_t)(close - host);
        size_t rest = len - (size_t)(close + 1 - s);
        if (rest) {
            if (close[1] != ':')
                return hp_fail(err, errlen, "junk after ']' in address '%.*s'", w, s);
            port = close + 2;
            plen = rest - 1;
        }
        if ((flags & MC_HOSTPORT_CHECK_HOST) && (hlen == 0 || !memchr(host, ':', hlen)))
            return hp_fail(err, errlen, "bad IPv6 address in address '%.*s'", w, s);
    } else {
        const char *colon = memchr(s, ':', len);
        bool several = colon && memchr(colon + 1, ':', len - (size_t)(colon + 1 - s));
        if (several && !(flags & MC_HOSTPORT_BARE_V6))
            return hp_fail(err, errlen,
                           "address '%.*s' has several ':' (write IPv6 as [addr]:port)", w, s);
        if (colon && !several) {
            hlen = (size_t)(colon - s);
            port = colon + 1;
            plen = len - hlen - 1;
        } else {
            hlen = len; /* a host alone, or a bare IPv6 address */
        }
    }
    if (hlen == 0)
        return hp_fail(err, errlen, "empty host in address '%.*s'", w, s);
    if (hlen >= hostlen)
        return hp_fail(err, errlen, "host name longer than %zu bytes", hostlen - 1);
    if (flags & MC_HOSTPORT_CHECK_HOST) {
        for (size_t i = 0; i < hlen; i++) {
            unsigned char c = (unsigned char)host[i];
            if (c <= ' ' || c == 0x7f || c == '/' || c == '@' || c == ',' || c == '[' ||
                c == ']')
                return hp_fail(err, errlen, "bad character in host '%.*s'", (int)hlen, host);
        }
    }
    long p = -1;
    if (port) {
        if (plen == 0 || plen > 5)
            return hp_fail(err, errlen, "bad port in address '%.*s'", w, s);
        p = 0;
        for (size_t i = 0; i < plen; i++) {
            if (port[i] < '0' || port[i] > '9')
                return hp_fail(err, errlen, "bad port in address '%.*s'", w, s);
            p = p * 10 + (port[i] - '0');
        }
        if (p == 0 || p > 65535)
            return hp_fail(err, errlen, "port out of range 1..65535 in address '%.*s'", w, s);
    }
    memcpy(out, host, hlen);
    out[hlen] = '\0';
    *port_out = (int)p;
    return 0;
}

int mc_sock_parse_hostport(const char *text, char *host, size_t hostlen, uint16_t *port,
                           uint16_t default_port)
{
    if (!text || !port)
        return -EINVAL;
    int p;
    int rc = mc_sock_split_hostport(text, strlen(text), MC_HOSTPORT_BARE_V6, host, hostlen,
                                    &p, NULL, 0);
    if (rc)
        return rc;
    if (p < 0) {
        if (!default_port)
            return -EINVAL;
        *port = default_port;
        return 0;
    }
    *port = (uint16_t)p;
    return 0;
}

int mc_sock_set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

int mc_sock_set_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 ? -errno : 0;
}

int mc_sock_set_bufsize(int fd, int sndbuf, int rcvbuf)
{
    if (sndbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) < 0)
        return -errno;
    if (rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) < 0)
        return -errno;
    return 0;
}

int mc_sock_set_keepalive(int fd, int idle_s, int interval_s, int count)
{
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count) < 0)
        return -errno;
    return 0;
}

static int resolve(const char *host, uint16_t port, int passive, struct addrinfo **res)
{
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    hints.ai_flags |= AI_NUMERICSERV;
    char ports[8];
    snprintf(ports, sizeof ports, "%u", (unsigned)port);
    if (passive && (!host || !*host))
        host = "0.0.0.0";
    int e = getaddrinfo(host, ports, &hints, res);
    if (e == EAI_SYSTEM)
        return -errno;
    if (e == EAI_NONAME || e == EAI_FAIL || e == EAI_NODATA)
        return -ENOENT;
    return e ? -EINVAL : 0;
}

int mc_sock_listen_tcp(const char *host, uint16_t port, int backlog, bool reuseport,
                       uint16_t *bound_port)
{
    struct addrinfo *res;
    int rc = resolve(host, port, 1, &res);
    if (rc)
        return rc;
    int fd = -1;
    rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (reuseport)
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, backlog > 0 ? backlog : 512) == 0) {
            rc = 0;
            break;
        }
        rc = -errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (rc)
        return rc;
    if (bound_port) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
            rc = -errno;
            close(fd);
            return rc;
        }
        *bound_port = ntohs(ss.ss_family == AF_INET6
                                ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                : ((struct sockaddr_in *)&ss)->sin_port);
    }
    return fd;
}

int mc_sock_wait(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        int timeout = -1;
        if (deadline_ms) {
            uint64_t left = mc_ms_left(deadline_ms);
            if (!left)
                return -ETIMEDOUT;
            timeout = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, timeout);
        if (n > 0)
            return 1;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

int mc_sock_connect_tcp(const char *host, uint16_t port, int timeout_ms)
{
    struct addrinfo *res;
    int rc = resolve(host, port, 0, &res);
    if (rc)
        return rc;
    uint64_t deadline = timeout_ms > 0 ? mc_deadline_ms((uint64_t)timeout_ms) : 0;
    int fd = -1;
    rc = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            rc = 0;
        } else if (errno == EINPROGRESS) {
            rc = mc_sock_wait(fd, POLLOUT, deadline);
            if (rc == 1) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                rc = -err;
            }
        } else {
            rc = -errno;
        }
        if (rc == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (rc)
        return rc;
    mc_sock_set_nonblock(fd, false);
    mc_sock_set_nodelay(fd);
    return fd;
}

int mc_sock_accept(int lfd, bool nonblock)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0));
    return fd < 0 ? -errno : fd;
}

int mc_sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ms)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    return mc_sock_sendv_all(fd, &iov, 1, deadline_ms);
}

/* After a failed send/recv of the *_all calls: 0 to try again (EINTR, or the fd became
 * ready within the deadline), else the error to return (-ETIMEDOUT, -errno). */
static int retry_after(int fd, short events, uint64_t deadline_ms)
{
    if (errno == EINTR)
        return 0;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        int w = mc_sock_wait(fd, events, deadline_ms);
        return w < 0 ? w : 0;
    }
    return -errno;
}

int mc_sock_sendv_all(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms)
{
    while (iovcnt > 0 && iov->iov_len == 0) {
        iov++;
        iovcnt--;
    }
    while (iovcnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | (deadline_ms ? MSG_DONTWAIT : 0));
        if (n < 0) {
            int rc = retry_after(fd, POLLOUT, deadline_ms);
            if (rc < 0)
                return rc;
            continue;
        }
        size_t left = (size_t)n;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static bool fd_readable(void *arg)
{
    struct pollfd p = {.fd = *(int *)arg, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* The wait site of mc_sock_recv_all on this thread (common/spin.h). */
static _Thread_local mc_spin_site recv_site;

/* Polls fd for readability for the site's window (common/spin.h). */
static bool spin_readable(int fd)
{
    return mc_spin_budget_us() && mc_spin_until(&recv_site, fd_readable, &fd);
}

int mc_sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ms)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, deadline_ms ? MSG_DONTWAIT : 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            return -ECONNRESET;
        } else {
            int e = errno; /* what recv said (the poll below may change errno) */
            bool polled = false; /* a poll gave up: the wait below ends the site's wait
                                    (mc_spin_woke is a no-op with polling off) */
            if (e == EAGAIN || e == EWOULDBLOCK) {
                if (spin_readable(fd))
                    continue; /* data came while polling (common/spin.h) */
                polled = true;
            }
            errno = e;
            int rc = retry_after(fd, POLLIN, deadline_ms);
            if (polled)
                mc_spin_woke(&recv_site, rc == 0);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* One non-blocking sendmsg/recvmsg: bytes, 0 would block, -errno (recv EOF: -ECONNRESET). */
static ssize_t msg_nb(int fd, struct iovec *iov, int n, bool send)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    for (;;) {
        ssize_t k = send ? sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT)
                         : recvmsg(fd, &mh, MSG_DONTWAIT);
        if (k > 0)
            return k;
        if (k == 0)
            return send ? 0 : -ECONNRESET;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
    }
}

ssize_t mc_sock_sendv_nb(int fd, const struct iovec *iov, int n)
{
    return msg_nb(fd, (struct iovec *)iov, n, true); /* sendmsg only reads iov */
}

ssize_t mc_sock_recvv_nb(int fd, struct iovec *iov, int n)
{
    return msg_nb(fd, iov, n, false);
}

ssize_t mc_sock_send_nb(int fd, const void *buf, size_t len)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    return msg_nb(fd, &iov, 1, true);
}

ssize_t mc_sock_recv_nb(int fd, void *buf, size_t len)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    return msg_nb(fd, &iov, 1, false);
}

static int unix_addr(const char *path, struct sockaddr_un *sa, socklen_t *len)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof sa->sun_path)
        return -ENAMETOOLONG;
    memcpy(sa->sun_path, path, n);
    if (path[0] == '@')
        sa->sun_path[0] = '\0'; /* abstract namespace */
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    return 0;
}

int mc_sock_listen_unix(const char *path, int backlog)
{
    struct sockaddr_un sa;
    socklen_t sl;
    int rc = unix_addr(path, &sa, &sl);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, backlog > 0 ? backlog : 64) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int mc_sock_connect_unix(const char *path, int timeout_ms)
{
    (void)timeout_ms; /* a local connect does not block for long */
    struct sockaddr_un sa;
    socklen_t sl;
    int rc = unix_addr(path, &sa, &sl);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sl) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

#define MAX_FDS 16

int mc_sock_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
    if (len == 0 || nfds < 0 || nfds > MAX_FDS)
        return -EINVAL;
    union {
        char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        memset(&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    for (;;) {
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n >= 0) {
            if ((size_t)n == len)
                return 0;
            /* the fds went with the first byte; send the rest plainly */
            return mc_sock_send_all(fd, (const char *)buf + n, len - (size_t)n, 0);
        }
        if (errno != EINTR)
            return -errno;
    }
}

ssize_t mc_sock_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf};
    *nfds = 0;
    ssize_t n;
    do {
        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int cnt = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int *in = (int *)CMSG_DATA(c);
        for (int i = 0; i < cnt; i++) {
            if (*nfds < max_fds)
                fds[(*nfds)++] = in[i];
            else
                close(in[i]);
        }
    }
    return n;
}
