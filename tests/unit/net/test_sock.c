/* Sockets: host:port parsing (good and bad), TCP listen/connect on loopback, full
 * send/recv with deadlines, EOF and timeout errors, fd passing over a Unix socket. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "mooncake/mc_time.h"
#include "net/sock.h"

static void test_hostport(void **state)
{
    (void)state;
    char host[64];
    uint16_t port;
    assert_int_equal(mc_sock_parse_hostport("127.0.0.1:8080", host, sizeof host, &port, 0), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(mc_sock_parse_hostport("[::1]:9", host, sizeof host, &port, 0), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 9);
    assert_int_equal(mc_sock_parse_hostport("localhost", host, sizeof host, &port, 50051), 0);
    assert_int_equal(port, 50051);
    assert_int_equal(mc_sock_parse_hostport("localhost", host, sizeof host, &port, 0), -EINVAL);
    assert_int_equal(mc_sock_parse_hostport("h:0", host, sizeof host, &port, 0), -EINVAL);
    assert_int_equal(mc_sock_parse_hostport("h:65536", host, sizeof host, &port, 0), -EINVAL);
    assert_int_equal(mc_sock_parse_hostport("h:12x", host, sizeof host, &port, 0), -EINVAL);
    assert_int_equal(mc_sock_parse_hostport(":80", host, sizeof host, &port, 0), -EINVAL);
    assert_int_equal(mc_sock_parse_hostport("", host, sizeof host, &port, 0), -EINVAL);
    assert_int_equal(mc_sock_parse_hostport("[::1", host, sizeof host, &port, 0), -EINVAL);
    char small[4];
    assert_int_equal(mc_sock_parse_hostport("longhost:1", small, sizeof small, &port, 0), -EINVAL);
}

/* The one parser's flags: bare IPv6, strict hosts, length-bounded input, -1 = no port. */
static void test_split_hostport(void **state)
{
    (void)state;
    char host[64], err[128];
    int port;
    assert_int_equal(mc_sock_split_hostport("h:80,x", 4, 0, host, sizeof host, &port, NULL, 0),
                     0);
    assert_string_equal(host, "h");
    assert_int_equal(port, 80);
    assert_int_equal(mc_sock_split_hostport("[::1]", 5, 0, host, sizeof host, &port, NULL, 0),
                     0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, -1);
    /* bare IPv6: a host without a port only when asked for */
    assert_int_equal(mc_sock_split_hostport("fe80::1", 7, MC_HOSTPORT_BARE_V6, host,
                                            sizeof host, &port, NULL, 0),
                     0);
    assert_string_equal(host, "fe80::1");
    assert_int_equal(port, -1);
    err[0] = '\0';
    assert_int_equal(mc_sock_split_hostport("fe80::1", 7, 0, host, sizeof host, &port, err,
                                            sizeof err),
                     -EINVAL);
    assert_non_null(strstr(err, "fe80::1"));
    /* strict hosts */
    const char *bad[] = {"a b:1", "a/b:1", "u@h:1", "[abc]:1", "[]:1", "h: 80", "h:+80",
                         "h:123456", "h:0", "h:", ":1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(mc_sock_split_hostport(bad[i], strlen(bad[i]), MC_HOSTPORT_CHECK_HOST,
                                                host, sizeof host, &port, err, sizeof err),
                         -EINVAL);
        assert_true(strlen(err) > 0);
    }
    /* without CHECK_HOST, a non-IPv6 name in brackets is still a host */
    assert_int_equal(mc_sock_split_hostport("[abc]:1", 7, 0, host, sizeof host, &port, NULL, 0),
                     0);
    assert_string_equal(host, "abc");
}

static void test_tcp(void **state)
{
    (void)state;
    uint16_t port = 0;
    int lfd = mc_sock_listen_tcp("127.0.0.1", 0, 16, false, &port);
    assert_true(lfd >= 0);
    assert_true(port > 0);
    int busy = mc_sock_listen_tcp("127.0.0.1", port, 16, false, NULL);
    assert_int_equal(busy, -EADDRINUSE);
    int cfd = mc_sock_connect_tcp("127.0.0.1", port, 2000);
    assert_true(cfd >= 0);
    int sfd = mc_sock_accept(lfd, false);
    assert_true(sfd >= 0);
    size_t n = 8 << 20;
    char *out = malloc(n), *in = malloc(n);
    for (size_t i = 0; i < n; i++)
        out[i] = (char)(i * 7);
    /* a writer that must wait for the reader: use a child thread-free approach by
     * sending from the child process */
    pid_t pid = fork();
    if (pid == 0) {
        int rc = mc_sock_send_all(cfd, out, n, mc_deadline_ms(5000));
        _exit(rc == 0 ? 0 : 1);
    }
    assert_int_equal(mc_sock_recv_all(sfd, in, n, mc_deadline_ms(5000)), 0);
    assert_memory_equal(in, out, n);
    /* nothing more arrives: timeout */
    assert_int_equal(mc_sock_recv_all(sfd, in, 1, mc_deadline_ms(50)), -ETIMEDOUT);
    close(cfd);
    int status;
    waitpid(pid, &status, 0);
    assert_int_equal(status, 0);
    /* peer closed: EOF is an error for a full read */
    assert_int_equal(mc_sock_recv_all(sfd, in, 1, mc_deadline_ms(1000)), -ECONNRESET);
    close(sfd);
    close(lfd);
    /* nobody listens any more */
    assert_true(mc_sock_connect_tcp("127.0.0.1", port, 1000) < 0);
    assert_int_equal(mc_sock_connect_tcp("no-such-host.invalid", 1, 1000), -ENOENT);
    free(out);
    free(in);
}

static void test_fd_passing(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "@mc-test-sock-%d", (int)getpid());
    int lfd = mc_sock_listen_unix(path, 4);
    assert_true(lfd >= 0);
    int cfd = mc_sock_connect_unix(path, 1000);
    assert_true(cfd >= 0);
    int sfd = mc_sock_accept(lfd, false);
    assert_true(sfd >= 0);
    int mfd = memfd_create("t", MFD_CLOEXEC);
    assert_true(mfd >= 0);
    assert_int_equal(ftruncate(mfd, 4096), 0);
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    strcpy(p, "shared bytes");
    assert_int_equal(mc_sock_send_fds(sfd, "X", 1, &mfd, 1), 0);
    int got[4], ngot = 0;
    char b;
    assert_int_equal(mc_sock_recv_fds(cfd, &b, 1, got, 4, &ngot), 1);
    assert_int_equal(ngot, 1);
    char *q = mmap(NULL, 4096, PROT_READ, MAP_SHARED, got[0], 0);
    assert_string_equal(q, "shared bytes");
    munmap(p, 4096);
    munmap(q, 4096);
    close(got[0]);
    close(mfd);
    assert_int_equal(mc_sock_send_fds(sfd, "X", 0, NULL, 0), -EINVAL);
    close(cfd);
    close(sfd);
    close(lfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostport),
        cmocka_unit_test(test_split_hostport),
        cmocka_unit_test(test_tcp),
        cmocka_unit_test(test_fd_passing),
    };
    return cmocka_run_group_tests_name("sock", tests, NULL, NULL);
}
