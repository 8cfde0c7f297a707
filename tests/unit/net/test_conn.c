/* Framed connections: frames round-trip (pipelined, large), a bad magic, another
 * version or an oversized body closes the server side with the right error before the
 * body is buffered, and the loop keeps serving a new connection afterwards. With
 * mc_conn_create_opts: bytes read before the conn existed (prefix) start its first
 * frame, and a peer that does not read its replies is not read either until it does
 * (back-pressure), after which every reply arrives in order. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "mooncake/mc_time.h"
#include "net/conn.h"
#include "net/sock.h"

static int g_closed_err;
static int g_closed;

static void echo_frame(mc_conn *c, const mc_frame_header *hdr, const uint8_t *body, void *arg)
{
    (void)arg;
    mc_frame_header r = *hdr;
    r.flags = MC_FRAME_REPLY;
    r.status = (int32_t)hdr->opcode;
    mc_conn_send(c, &r, body, hdr->body_len);
}

static void on_close(mc_conn *c, int err, void *arg)
{
    (void)c;
    (void)arg;
    g_closed++;
    g_closed_err = err;
}

static const mc_conn_callbacks cbs = {echo_frame, on_close, NULL};

typedef struct {
    mc_loop *loop;
    int lfd;
} server;

static void on_accept(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)events;
    (void)arg;
    int cfd = mc_sock_accept(fd, true);
    if (cfd >= 0)
        mc_conn_create(loop, cfd, 1 << 20, 0, &cbs, NULL);
}

static void add_listener(void *arg)
{
    server *s = arg;
    mc_loop_add(s->loop, s->lfd, EPOLLIN, on_accept, NULL);
}

static void send_frame(int fd, uint16_t op, uint64_t id, const void *body, uint32_t len)
{
    uint8_t h[MC_FRAME_HEADER_SIZE];
    mc_frame_header hdr = {.version = MC_FRAME_VERSION, .opcode = op, .request_id = id,
                           .body_len = len};
    mc_frame_encode_header(&hdr, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, mc_deadline_ms(2000)), 0);
    if (len)
        assert_int_equal(mc_sock_send_all(fd, body, len, mc_deadline_ms(2000)), 0);
}

static void recv_frame(int fd, mc_frame_header *hdr, uint8_t *body, uint32_t max)
{
    uint8_t h[MC_FRAME_HEADER_SIZE];
    assert_int_equal(mc_sock_recv_all(fd, h, sizeof h, mc_deadline_ms(2000)), 0);
    assert_int_equal(mc_frame_decode_header(h, max, hdr), 0);
    if (hdr->body_len)
        assert_int_equal(mc_sock_recv_all(fd, body, hdr->body_len, mc_deadline_ms(2000)), 0);
}

static int wait_closed(int n)
{
    for (int i = 0; i < 200 && __atomic_load_n(&g_closed, __ATOMIC_SEQ_CST) < n; i++)
        mc_sleep_ms(10);
    return __atomic_load_n(&g_closed, __ATOMIC_SEQ_CST);
}

static void test_conn(void **state)
{
    (void)state;
    server s;
    uint16_t port;
    assert_int_equal(mc_loop_create(&s.loop), 0);
    s.lfd = mc_sock_listen_tcp("127.0.0.1", 0, 16, false, &port);
    assert_true(s.lfd >= 0);
    assert_int_equal(mc_loop_start_thread(s.loop, "srv"), 0);
    assert_int_equal(mc_loop_post(s.loop, add_listener, &s), 0);

    /* pipelined frames, answered in order with the same ids */
    int fd = mc_sock_connect_tcp("127.0.0.1", port, 2000);
    assert_true(fd >= 0);
    static uint8_t big[1 << 20], back[1 << 20];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 13);
    send_frame(fd, 7, 100, "abc", 3);
    send_frame(fd, 8, 101, NULL, 0);
    send_frame(fd, 9, 102, big, sizeof big);
    mc_frame_header hdr;
    recv_frame(fd, &hdr, back, sizeof back);
    assert_int_equal(hdr.request_id, 100);
    assert_int_equal(hdr.status, 7);
    assert_int_equal(hdr.flags, MC_FRAME_REPLY);
    assert_memory_equal(back, "abc", 3);
    recv_frame(fd, &hdr, back, sizeof back);
    assert_int_equal(hdr.request_id, 101);
    assert_int_equal(hdr.body_len, 0);
    recv_frame(fd, &hdr, back, sizeof back);
    assert_int_equal(hdr.request_id, 102);
    assert_memory_equal(back, big, sizeof big);
    close(fd);
    assert_int_equal(wait_closed(1), 1);
    assert_int_equal(g_closed_err, 0);

    /* garbage: bad magic */
    fd = mc_sock_connect_tcp("127.0.0.1", port, 2000);
    uint8_t junk[MC_FRAME_HEADER_SIZE];
    memset(junk, 0xAB, sizeof junk);
    assert_int_equal(mc_sock_send_all(fd, junk, sizeof junk, 0), 0);
    assert_int_equal(wait_closed(2), 2);
    assert_int_equal(g_closed_err, -EPROTO);
    close(fd);

    /* oversized body: refused from the header alone */
    fd = mc_sock_connect_tcp("127.0.0.1", port, 2000);
    uint8_t h[MC_FRAME_HEADER_SIZE];
    mc_frame_header over = {.version = MC_FRAME_VERSION, .body_len = (1u << 20) + 1};
    mc_frame_encode_header(&over, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, 0), 0);
    assert_int_equal(wait_closed(3), 3);
    assert_int_equal(g_closed_err, -EMSGSIZE);
    close(fd);

    /* other version */
    fd = mc_sock_connect_tcp("127.0.0.1", port, 2000);
    mc_frame_header v2 = {.version = 2};
    mc_frame_encode_header(&v2, h);
    assert_int_equal(mc_sock_send_all(fd, h, sizeof h, 0), 0);
    assert_int_equal(wait_closed(4), 4);
    assert_int_equal(g_closed_err, -EPROTONOSUPPORT);
    close(fd);

    /* truncated frame then close: reset mid-frame */
    fd = mc_sock_connect_tcp("127.0.0.1", port, 2000);
    assert_int_equal(mc_sock_send_all(fd, h, 10, 0), 0);
    close(fd);
    assert_int_equal(wait_closed(5), 5);
    assert_int_equal(g_closed_err, -ECONNRESET);

    /* still serving */
    fd = mc_sock_connect_tcp("127.0.0.1", port, 2000);
    send_frame(fd, 1, 5, "ok", 2);
    recv_frame(fd, &hdr, back, sizeof back);
    assert_int_equal(hdr.request_id, 5);
    close(fd);
    wait_closed(6);

    assert_int_equal(mc_loop_join(s.loop), 0);
    mc_loop_destroy(s.loop);
    close(s.lfd);
}

/* ---- mc_conn_create_opts: bytes read before (prefix), and back-pressure ---- */

static uint8_t g_big[1 << 20];
static int g_frames;

static void big_reply(mc_conn *c, const mc_frame_header *hdr, const uint8_t *body, void *arg)
{
    (void)body;
    (void)arg;
    __atomic_add_fetch(&g_frames, 1, __ATOMIC_SEQ_CST);
    mc_frame_header r = *hdr;
    r.flags = MC_FRAME_REPLY;
    mc_conn_send(c, &r, g_big, sizeof g_big);
}

static const mc_conn_callbacks big_cbs = {big_reply, on_close, NULL};

static void on_accept_opts(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)events;
    (void)arg;
    int cfd = mc_sock_accept(fd, true);
    if (cfd < 0)
        return;
    /* the first 4 bytes of the first header are read here, as a server that sniffs its
     * peer's first bytes does; the conn gets them as its prefix */
    uint8_t pre[4];
    /* the accepted socket is non-blocking: wait (2 s at most) for the peer's bytes */
    if (mc_sock_recv_all(cfd, pre, sizeof pre, mc_deadline_ms(2000)) != 0) {
        close(cfd);
        return;
    }
    mc_conn_opts o = {.max_body = 1 << 20, .max_backlog = 64u << 20,
                      .pause_backlog = 256u << 10, .prefix = pre, .prefix_len = sizeof pre};
    mc_conn_create_opts(loop, cfd, &o, &big_cbs, NULL);
}

static void add_listener_opts(void *arg)
{
    server *s = arg;
    mc_loop_add(s->loop, s->lfd, EPOLLIN, on_accept_opts, NULL);
}

static void test_conn_opts(void **state)
{
    (void)state;
    server s;
    uint16_t port;
    g_closed = 0;
    assert_int_equal(mc_loop_create(&s.loop), 0);
    s.lfd = mc_sock_listen_tcp("127.0.0.1", 0, 16, false, &port);
    assert_true(s.lfd >= 0);
    assert_int_equal(mc_loop_start_thread(s.loop, "srv"), 0);
    assert_int_equal(mc_loop_post(s.loop, add_listener_opts, &s), 0);
    int fd = mc_sock_connect_tcp("127.0.0.1", port, 2000);
    assert_true(fd >= 0);
    /* 32 requests of 1 MiB replies, none read until all are sent: the server stops
     * reading once 256 KiB of replies wait (its peer is not reading), and takes the
     * rest once they drain; every reply arrives, in order */
    for (uint64_t i = 0; i < 32; i++)
        send_frame(fd, 3, 1000 + i, "x", 1);
    static uint8_t back[1 << 20];
    for (uint64_t i = 0; i < 32; i++) {
        mc_frame_header hdr;
        recv_frame(fd, &hdr, back, sizeof back);
        assert_int_equal(hdr.request_id, 1000 + i);
        assert_int_equal(hdr.body_len, sizeof g_big);
    }
    assert_int_equal(__atomic_load_n(&g_frames, __ATOMIC_SEQ_CST), 32);
    close(fd);
    assert_int_equal(wait_closed(1), 1);
    assert_int_equal(g_closed_err, 0);
    assert_int_equal(mc_loop_join(s.loop), 0);
    mc_loop_destroy(s.loop);
    close(s.lfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conn),
        cmocka_unit_test(test_conn_opts),
    };
    return cmocka_run_group_tests_name("conn", tests, NULL, NULL);
}
