/* client/dummy_ipc.h: the local IPC channel between a resource-owning store client (the
 * `mooncake_client` program, "real client") and the dummy clients of the same host and
 * user (upstream: RealClient's IPC server and DummyClient, "@mooncake_client_<port>.sock"
 * plus shared memory, upstream-mooncake.md §1.3 setup_dummy).
 *
 * Transport: a SOCK_STREAM Unix socket in the abstract namespace, named
 * "\0mooncake_client_<port>.sock" (<port> = the real client's --port, 50052 by default).
 * The server admits only peers of its own uid (SO_PEERCRED). Bulk data lives in a pool of
 * shared memory the dummy creates (memfd) and passes with SCM_RIGHTS in its HELLO; the
 * real client maps it and registers it with its transfer engine, so a dummy's get_into /
 * put_from on its pool moves the bytes straight between the pool and the replicas (no
 * copy through the socket).
 *
 * Frame (little-endian): a 16-byte header, then body_len bytes of body.
 *   u32 magic MC_DIPC_MAGIC, u16 version MC_DIPC_VERSION, u16 op, u32 request id,
 *   u32 body_len (<= MC_DIPC_MAX_BODY).
 * A reply carries the request's op with MC_DIPC_REPLY set and the same id; its body
 * starts with an i64 status (MC_OK, a negative status code, or for byte counts the count).
 * Body fields are read and written in order with the mc_dipc_rd / mc_dipc_wr helpers:
 * u8, u32, u64, i64, and bytes (u32 length + data). Every length and count is checked
 * against what is left of the body and against the limits below before use.
 *
 * Everything here is plain data handling (no sockets): the server (dummy_server.c), the
 * dummy side (dummy_client.c) and the fuzz target (tests/fuzz/fuzz_dummy_ipc.c) share it.
 * Threads: the functions keep no state besides their arguments. */
#ifndef MOONCAKE_CLIENT_DUMMY_IPC_H
#define MOONCAKE_CLIENT_DUMMY_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/mc_api.h"

#define MC_DIPC_MAGIC 0x4344434du /* "MCDC" */
#define MC_DIPC_VERSION 1u
#define MC_DIPC_HDR 16u
#define MC_DIPC_MAX_BODY (64u << 20) /* bytes: inline values (put / get) fit in this */
#define MC_DIPC_MAX_BATCH 65536u     /* keys per batch request */
#define MC_DIPC_MAX_POOL (1ull << 40) /* bytes of one dummy's shared pool */
#define MC_DIPC_REPLY 0x8000u
#define MC_DIPC_DEFAULT_PORT 50052

/* Operations. Request body -> reply body (after the i64 status). */
enum {
    MC_DIPC_HELLO = 1,      /* u64 pool_size (+ the memfd with SCM_RIGHTS when > 0; it
                               must carry F_SEAL_SHRINK) -> bytes real client's segment
                               name */
    MC_DIPC_PUT = 2,        /* key, bytes value, u32 replica_num -> (status) */
    MC_DIPC_GET = 3,        /* key -> bytes value (status: its size, or negative) */
    MC_DIPC_PUT_FROM = 4,   /* key, u64 pool offset, u64 size, u32 replica_num -> */
    MC_DIPC_GET_INTO = 5,   /* key, u64 pool offset, u64 capacity -> (status: bytes) */
    MC_DIPC_BATCH_PUT_FROM = 6, /* u32 n, n x (key, u64 off, u64 size), u32 replica_num
                                   -> u32 n, n x i64 */
    MC_DIPC_BATCH_GET_INTO = 7, /* u32 n, n x (key, u64 off, u64 cap) -> u32 n, n x i64 */
    MC_DIPC_IS_EXIST = 8,   /* key -> (status: 1 / 0 / negative) */
    MC_DIPC_BATCH_IS_EXIST = 9, /* u32 n, n x key -> u32 n, n x i64 */
    MC_DIPC_REMOVE = 10,    /* key, u8 force -> */
    MC_DIPC_REMOVE_ALL = 11, /* u8 force -> (status: count) */
    MC_DIPC_GET_SIZE = 12,  /* key -> (status: size) */
    MC_DIPC_STATS = 13,     /* -> u64 connections, u64 pools mapped, u64 pool bytes,
                               u64 requests served, u64 frames refused */
    MC_DIPC_BATCH_REMOVE = 14, /* u32 n, n x key, u8 force -> u32 n, n x i64 */
    MC_DIPC_UPSERT = 15,    /* as PUT, replacing */
    MC_DIPC_UPSERT_FROM = 16, /* as PUT_FROM, replacing */
    MC_DIPC_BATCH_UPSERT_FROM = 17, /* as BATCH_PUT_FROM, replacing */
    MC_DIPC_REMOVE_BY_REGEX = 18, /* bytes pattern (<= MC_DIPC_KEY_MAX), u8 force ->
                                     (status: count) */
    /* The scatter-gather forms (upstream batch_put_from_multi_buffers /
     * batch_get_into_multi_buffers) over the pool: object i is the concatenation of its
     * segments, each (u64 pool offset, u64 length), at most MC_DIPC_MAX_SEGS per key. */
    MC_DIPC_BATCH_PUT_MULTI = 19, /* u32 n, n x (key, u32 k, k x (u64 off, u64 len)),
                                     u32 replica_num -> u32 n, n x i64 */
    MC_DIPC_BATCH_GET_MULTI = 20, /* u32 n, n x (key, u32 k, k x (u64 off, u64 len)),
                                     u8 prefer_same_node -> u32 n, n x i64 (bytes read) */
    MC_DIPC_REPLICA_DESC = 21, /* u32 n, n x key -> u32 n, n x (i64 result, u32 count,
                                  count x (u32 status, u8 replica_type, u64 size,
                                  u64 buffer_address, bytes endpoint, bytes protocol)) */
    MC_DIPC_OP_MAX = 21,
};

#define MC_DIPC_MAX_SEGS 4096u /* segments per key of the multi-buffer ops */

/* The abstract socket name for port (sun_path bytes, leading NUL included): written to
 * out (>= 108 bytes); returns its length. */
MC_API size_t mc_dipc_socket_name(int port, char *out);

/* A frame header. */
typedef struct mc_dipc_hdr {
    uint32_t magic;
    uint16_t version, op;
    uint32_t id, body_len;
} mc_dipc_hdr;

/* mc_dipc_hdr_parse: decodes 16 bytes and checks magic, version, body_len <= max_body,
 * and op (1..MC_DIPC_OP_MAX, with MC_DIPC_REPLY when reply, without it otherwise).
 * Returns 0, or -EPROTO / -EMSGSIZE (body too large). */
MC_API int mc_dipc_hdr_parse(const uint8_t *buf, size_t max_body, bool reply, mc_dipc_hdr *out);
MC_API void mc_dipc_hdr_write(uint8_t *buf, uint16_t op, uint32_t id, uint32_t body_len);

/* A bounds-checked reader over a body (borrowed). Any read past the end sets bad and
 * yields zeros / empty; check bad (or mc_dipc_rd_done) once at the end. */
typedef struct mc_dipc_rd {
    const uint8_t *p;
    size_t n, off;
    bool bad;
} mc_dipc_rd;
static inline void mc_dipc_rd_init(mc_dipc_rd *r, const void *p, size_t n)
{
    r->p = (const uint8_t *)p;
    r->n = n;
    r->off = 0;
    r->bad = false;
}
MC_API uint8_t mc_dipc_u8(mc_dipc_rd *r);
MC_API uint32_t mc_dipc_u32(mc_dipc_rd *r);
MC_API uint64_t mc_dipc_u64(mc_dipc_rd *r);
MC_API int64_t mc_dipc_i64(mc_dipc_rd *r);
/* bytes: *len receives the length (<= max, else bad); returns a pointer into the body. */
MC_API const void *mc_dipc_bytes(mc_dipc_rd *r, size_t max, size_t *len);
/* A count of items each at least min_item bytes long: refused (bad) above max or above
 * what the rest of the body can hold. */
MC_API uint32_t mc_dipc_count(mc_dipc_rd *r, uint32_t max, size_t min_item);
/* True when the whole body was read and nothing was bad. */
static inline bool mc_dipc_rd_done(const mc_dipc_rd *r)
{
    return !r->bad && r->off == r->n;
}

/* ---- requests, decoded (what the real client reads; the fuzz target's subject) ---- */

#define MC_DIPC_KEY_MAX 4096u /* bytes per key (= MC_STORE_KEY_MAX) */

typedef struct mc_dipc_row {
    const void *key; /* into the body; 1..MC_DIPC_KEY_MAX bytes */
    size_t key_len;
    uint64_t off, len; /* pool offset and length (bytes) for the pool ops; else 0 */
    uint32_t seg0, nseg; /* the multi-buffer ops: segs[seg0 .. seg0 + nseg) */
} mc_dipc_row;

typedef struct mc_dipc_seg {
    uint64_t off, len; /* bytes of the pool */
} mc_dipc_seg;

typedef struct mc_dipc_request {
    uint16_t op;
    uint64_t pool_size;   /* HELLO */
    const void *value;    /* PUT, UPSERT: into the body; REMOVE_BY_REGEX: the pattern */
    size_t value_len;
    uint32_t replica_num; /* PUT, PUT_FROM, BATCH_PUT_FROM */
    bool force;           /* REMOVE, REMOVE_ALL, BATCH_REMOVE */
    uint32_t n;           /* rows used (single-key ops: 1; STATS/HELLO/REMOVE_ALL: 0) */
    mc_dipc_row *rows;    /* malloc'd (never NULL after a successful decode) */
    bool prefer_same_node; /* BATCH_GET_MULTI */
    uint32_t nsegs;       /* BATCH_PUT_MULTI / BATCH_GET_MULTI: all rows' segments */
    mc_dipc_seg *segs;    /* malloc'd or NULL */
} mc_dipc_request;

/* mc_dipc_decode_request: decodes the body of request op (without MC_DIPC_REPLY) as the
 * layout of the op table above says; the whole body must be consumed. Pointers in *out
 * borrow body. Returns 0, or -EPROTO (malformed: a length past the end, an empty or
 * too-long key, a count above MC_DIPC_MAX_BATCH or what the body can hold, trailing
 * bytes, an unknown op); *out needs mc_dipc_request_free either way. */
MC_API int mc_dipc_decode_request(uint16_t op, const void *body, size_t len,
                                  mc_dipc_request *out);
MC_API void mc_dipc_request_free(mc_dipc_request *r);

/* A growable writer; the first MC_DIPC_HDR bytes are reserved for the header. */
typedef struct mc_dipc_wr {
    uint8_t *p;
    size_t n, cap;
} mc_dipc_wr;
MC_API void mc_dipc_wr_init(mc_dipc_wr *w);
MC_API void mc_dipc_wr_free(mc_dipc_wr *w);
/* Makes room for len more bytes and returns where they go (n is advanced). */
MC_API uint8_t *mc_dipc_wr_reserve(mc_dipc_wr *w, size_t len);
MC_API void mc_dipc_put_u8(mc_dipc_wr *w, uint8_t v);
MC_API void mc_dipc_put_u32(mc_dipc_wr *w, uint32_t v);
MC_API void mc_dipc_put_u64(mc_dipc_wr *w, uint64_t v);
MC_API void mc_dipc_put_i64(mc_dipc_wr *w, int64_t v);
MC_API void mc_dipc_put_bytes(mc_dipc_wr *w, const void *p, size_t len);
/* Fills the reserved header (body = everything after it). */
MC_API void mc_dipc_wr_finish(mc_dipc_wr *w, uint16_t op, uint32_t id);

#endif
