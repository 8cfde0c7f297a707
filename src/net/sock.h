/* sock.h: socket helpers (TCP, Unix, fd passing, deadline-bounded full reads/writes).
 * Internal to the project. All functions return -errno on failure. Deadlines are
 * absolute monotonic times in ms (mc_deadline_ms()); 0 means "no deadline". */
#ifndef MC_NET_SOCK_H
#define MC_NET_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* mc_sock_split_hostport: the one host:port parser. Splits text[0..len) (need not be
 * NUL-terminated) written as "host", "host:port", "[v6]" or "[v6]:port" into host
 * (NUL-terminated, brackets removed, at most hostlen-1 bytes) and *port (1..65535, or -1
 * when the text has none). The port is 1 to 5 decimal digits, nothing else.
 * flags:
 *   MC_HOSTPORT_BARE_V6: an unbracketed text with several ':' is a bare IPv6 host without
 *     a port (else it is refused: "write IPv6 as [addr]:port").
 *   MC_HOSTPORT_CHECK_HOST: the host may not hold whitespace, control bytes, '/', '@',
 *     ',', '[' or ']', and what is inside brackets must be an IPv6 address (have a ':').
 * Returns 0, or -EINVAL with a one-line reason quoting the text in err (errlen bytes,
 * NUL-terminated; err may be NULL). Pure function; thread-safe. */
#define MC_HOSTPORT_BARE_V6 1u
#define MC_HOSTPORT_CHECK_HOST 2u
int mc_sock_split_hostport(const char *text, size_t len, unsigned flags, char *host,
                           size_t hostlen, int *port, char *err, size_t errlen);

/* mc_sock_parse_hostport: mc_sock_split_hostport of the NUL-terminated text with
 * MC_HOSTPORT_BARE_V6. When the text has no port, *port is set to default_port (or
 * -EINVAL when default_port is 0). -EINVAL on malformed text or port out of range. */
int mc_sock_parse_hostport(const char *text, char *host, size_t hostlen, uint16_t *port,
                           uint16_t default_port);

/* mc_sock_listen_tcp: bound, listening TCP socket on host:port (host NULL or "" or
 * "0.0.0.0" = any IPv4). port 0 picks a free port; *bound_port (if non-NULL) receives
 * the actual port. SO_REUSEADDR is set; reuseport sets SO_REUSEPORT. Close-on-exec,
 * blocking. Returns the fd, or -errno (-EADDRINUSE when the port is taken). */
int mc_sock_listen_tcp(const char *host, uint16_t port, int backlog, bool reuseport,
                       uint16_t *bound_port);

/* mc_sock_connect_tcp: connects to host:port (name resolved with getaddrinfo) within
 * timeout_ms (0 = OS default). Returns a blocking, TCP_NODELAY fd or -errno
 * (-ETIMEDOUT, -ECONNREFUSED, -EHOSTUNREACH, -ENOENT for an unknown name). */
int mc_sock_connect_tcp(const char *host, uint16_t port, int timeout_ms);

/* mc_sock_accept: accept4 with close-on-exec (and non-blocking when nonblock). */
int mc_sock_accept(int lfd, bool nonblock);

int mc_sock_set_nonblock(int fd, bool on);
int mc_sock_set_nodelay(int fd);
/* mc_sock_set_bufsize: SO_SNDBUF/SO_RCVBUF in bytes (0 leaves one unchanged). */
int mc_sock_set_bufsize(int fd, int sndbuf, int rcvbuf);
/* mc_sock_set_keepalive: enables TCP keepalive (idle/interval in s, count probes). */
int mc_sock_set_keepalive(int fd, int idle_s, int interval_s, int count);

/* mc_sock_send_all / mc_sock_recv_all: move exactly len bytes, waiting with poll() when
 * the fd is non-blocking or a deadline is given. recv returns -ECONNRESET when the peer
 * closes before len bytes; both return -ETIMEDOUT past the deadline. */
int mc_sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ms);
int mc_sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ms);

/* mc_sock_sendv_all: like send_all over an iovec array (modified in place). */
int mc_sock_sendv_all(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms);

/* mc_sock_sendv_nb / mc_sock_recvv_nb: one non-blocking sendmsg (MSG_NOSIGNAL) or
 * recvmsg over iov[0..n) (not modified), retried on EINTR, for event-loop code that
 * keeps its own buffers and offsets. Returns the bytes moved (> 0), 0 when the socket
 * would block (EAGAIN), or -errno; recv returns -ECONNRESET when the peer has closed
 * (EOF). mc_sock_send_nb / mc_sock_recv_nb: the same over one buffer. Any thread; the
 * caller serialises calls on one fd. */
ssize_t mc_sock_sendv_nb(int fd, const struct iovec *iov, int n);
ssize_t mc_sock_recvv_nb(int fd, struct iovec *iov, int n);
ssize_t mc_sock_send_nb(int fd, const void *buf, size_t len);
ssize_t mc_sock_recv_nb(int fd, void *buf, size_t len);

/* mc_sock_wait: poll(fd, events) until ready or deadline. 1 ready, -ETIMEDOUT, -errno. */
int mc_sock_wait(int fd, short events, uint64_t deadline_ms);

/* Unix stream sockets. path starting with '@' = Linux abstract namespace (no file).
 * listen: returns fd or -errno (-EADDRINUSE). connect: blocking fd or -errno. */
int mc_sock_listen_unix(const char *path, int backlog);
int mc_sock_connect_unix(const char *path, int timeout_ms);

/* mc_sock_send_fds: sends len bytes (len ≥ 1) with nfds (≤ 16) file descriptors attached
 * (SCM_RIGHTS). Returns 0 or -errno. */
int mc_sock_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds);

/* mc_sock_recv_fds: receives up to len bytes and up to max_fds descriptors (close-on-exec).
 * *nfds receives the count. Returns bytes received (0 = peer closed) or -errno.
 * Descriptors beyond max_fds are closed. */
ssize_t mc_sock_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *nfds);

#endif
