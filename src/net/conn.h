/* conn.h: a framed, non-blocking connection on an mc_loop (src/net).
 *
 * Reads frames (frame.h) and hands each whole frame to on_frame; queues outgoing frames
 * and flushes them when the socket is writable. A frame whose header is bad or whose
 * body exceeds max_body closes the connection (on_close gets the -errno) before any body
 * bytes are buffered. Loop-thread only, except where noted.
 */
#ifndef MC_NET_CONN_H
#define MC_NET_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "net/frame.h"
#include "net/loop.h"

typedef struct mc_conn mc_conn;

typedef struct mc_conn_callbacks {
    /* A whole frame arrived. body is borrowed (valid during the call); body_len ==
     * hdr->body_len. The handler may call mc_conn_send and mc_conn_close. */
    void (*on_frame)(mc_conn *c, const mc_frame_header *hdr, const uint8_t *body,
                     void *arg);
    /* The connection closed: err = 0 (peer closed cleanly or mc_conn_close), or -errno
     * (-EPROTO bad frame, -EMSGSIZE too large, -ECONNRESET, -ENOBUFS write backlog).
     * Called exactly once; the conn is freed right after it returns. May be NULL. */
    void (*on_close)(mc_conn *c, int err, void *arg);
    /* A frame header arrived (checked, body_len <= max_body), before its body is
     * read. Return 0 to go on, or -errno to close the connection with that error.
     * May be NULL. */
    int (*on_header)(mc_conn *c, const mc_frame_header *hdr, void *arg);
    /* The body being read needs `add` more bytes of buffer: its first 4 KiB (or the
     * whole body when smaller), then a doubling each time the bytes received fill it,
     * up to body_len. So a connection holds at most about twice what its peer sent
     * (plus 4 KiB), whatever its header claims. Return 0 to go on, or -errno to close
     * the connection (a server's budget for bodies being received). The bytes are
     * given back by the frame's on_frame or the connection's on_close. May be NULL. */
    int (*on_body_alloc)(mc_conn *c, size_t add, void *arg);
} mc_conn_callbacks;

/* Extra settings of mc_conn_create_opts (all 0 = the defaults of mc_conn_create). */
typedef struct mc_conn_opts {
    uint32_t max_body;     /* bytes of one incoming body; 0 = MC_FRAME_DEFAULT_MAX_BODY   */
    size_t max_backlog;    /* queued outgoing bytes beyond which the conn closes with
                              -ENOBUFS; 0 = 256 MiB                                       */
    size_t pause_backlog;  /* queued outgoing bytes at or above which the conn stops
                              reading (no new request is taken while the peer does not
                              read its replies); reading resumes below it; 0 = never     */
    const uint8_t *prefix; /* bytes already read from fd (the start of the first frame's
                              header, at most MC_FRAME_HEADER_SIZE); copied             */
    size_t prefix_len;
} mc_conn_opts;

/* mc_conn_create: takes ownership of fd (made non-blocking; closed when the conn is
 * freed), registers it on loop. max_body bounds incoming bodies; max_backlog bounds
 * queued outgoing bytes (0 = 256 MiB). Returns NULL (fd closed) on failure. */
mc_conn *mc_conn_create(mc_loop *loop, int fd, uint32_t max_body, size_t max_backlog,
                        const mc_conn_callbacks *cbs, void *arg);

/* mc_conn_create_opts: mc_conn_create with the settings of o (borrowed). */
mc_conn *mc_conn_create_opts(mc_loop *loop, int fd, const mc_conn_opts *o,
                             const mc_conn_callbacks *cbs, void *arg);

/* mc_conn_backlog: queued outgoing bytes not yet written. */
size_t mc_conn_backlog(const mc_conn *c);

/* mc_conn_send: queues header + body (copied) and flushes what the socket takes now.
 * hdr->body_len is set from len. Returns 0, -ENOBUFS (backlog exceeded: the conn is
 * being closed), -EPIPE (already closing), -EMSGSIZE (len > UINT32_MAX). */
int mc_conn_send(mc_conn *c, mc_frame_header *hdr, const void *body, size_t len);

/* mc_conn_close: closes after the current callback returns; on_close(c, 0). Queued
 * output that has not been written is dropped. Idempotent. */
void mc_conn_close(mc_conn *c);

/* mc_conn_last_rx_ms: mc_now_ms() when a read on c last returned bytes (header or
 * body), or when c was created. */
uint64_t mc_conn_last_rx_ms(const mc_conn *c);

/* mc_conn_fd / mc_conn_loop: accessors. */
int mc_conn_fd(const mc_conn *c);
mc_loop *mc_conn_loop(const mc_conn *c);

/* mc_conn_set_arg: replaces the callback argument. */
void mc_conn_set_arg(mc_conn *c, void *arg);

#endif
