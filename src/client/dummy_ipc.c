/* dummy_ipc.c: frames and body fields of the real-client / dummy-client IPC channel
 * (client/dummy_ipc.h). Pure data handling; fuzzed by tests/fuzz/fuzz_dummy_ipc.c. */
#include "client/dummy_ipc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

size_t mc_dipc_socket_name(int port, char *out)
{
    out[0] = '\0';
    int n = snprintf(out + 1, 100, "mooncake_client_%d.sock", port);
    return 1 + (size_t)n;
}

static uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t ld64(const uint8_t *p)
{
    return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static void st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void st64(uint8_t *p, uint64_t v)
{
    st32(p, (uint32_t)v);
    st32(p + 4, (uint32_t)(v >> 32));
}

int mc_dipc_hdr_parse(const uint8_t *buf, size_t max_body, bool reply, mc_dipc_hdr *out)
{
    out->magic = ld32(buf);
    out->version = (uint16_t)(buf[4] | buf[5] << 8);
    out->op = (uint16_t)(buf[6] | buf[7] << 8);
    out->id = ld32(buf + 8);
    out->body_len = ld32(buf + 12);
    if (out->magic != MC_DIPC_MAGIC || out->version != MC_DIPC_VERSION)
        return -EPROTO;
    if (!!(out->op & MC_DIPC_REPLY) != reply)
        return -EPROTO;
    uint16_t op = out->op & (uint16_t)~MC_DIPC_REPLY;
    if (op < 1 || op > MC_DIPC_OP_MAX)
        return -EPROTO;
    if (out->body_len > max_body)
        return -EMSGSIZE;
    return 0;
}

void mc_dipc_hdr_write(uint8_t *buf, uint16_t op, uint32_t id, uint32_t body_len)
{
    st32(buf, MC_DIPC_MAGIC);
    buf[4] = (uint8_t)MC_DIPC_VERSION;
    buf[5] = 0;
    buf[6] = (uint8_t)op;
    buf[7] = (uint8_t)(op >> 8);
    st32(buf + 8, id);
    st32(buf + 12, body_len);
}

static const uint8_t *take(mc_dipc_rd *r, size_t len)
{
    if (r->bad || len > r->n - r->off) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += len;
    return p;
}

uint8_t mc_dipc_u8(mc_dipc_rd *r)
{
    const uint8_t *p = take(r, 1);
    return p ? p[0] : 0;
}

uint32_t mc_dipc_u32(mc_dipc_rd *r)
{
    const uint8_t *p = take(r, 4);
    return p ? ld32(p) : 0;
}

uint64_t mc_dipc_u64(mc_dipc_rd *r)
{
    const uint8_t *p = take(r, 8);
    return p ? ld64(p) : 0;
}

int64_t mc_dipc_i64(mc_dipc_rd *r)
{
    return (int64_t)mc_dipc_u64(r);
}

const void *mc_dipc_bytes(mc_dipc_rd *r, size_t max, size_t *len)
{
    uint32_t l = mc_dipc_u32(r);
    *len = 0;
    if (r->bad || l > max) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = take(r, l);
    if (p)
        *len = l;
    return p;
}

uint32_t mc_dipc_count(mc_dipc_rd *r, uint32_t max, size_t min_item)
{
    uint32_t n = mc_dipc_u32(r);
    if (r->bad || n > max || (min_item && n > (r->n - r->off) / min_item)) {
        r->bad = true;
        return 0;
    }
    return n;
}

void mc_dipc_wr_init(mc_dipc_wr *w)
{
    w->cap = 256;
    w->p = mc_xmalloc(w->cap);
    w->n = MC_DIPC_HDR;
}

void mc_dipc_wr_free(mc_dipc_wr *w)
{
    free(w->p);
    w->p = NULL;
    w->n = w->cap = 0;
}

uint8_t *mc_dipc_wr_reserve(mc_dipc_wr *w, size_t len)
{
    if (len > w->cap - w->n) {
        size_t c = w->cap;
        while (len > c - w->n)
            c *= 2;
        w->p = mc_xrealloc(w->p, c);
        w->cap = c;
    }
    uint8_t *p = w->p + w->n;
    w->n += len;
    return p;
}

void mc_dipc_put_u8(mc_dipc_wr *w, uint8_t v)
{
    *mc_dipc_wr_reserve(w, 1) = v;
}

void mc_dipc_put_u32(mc_dipc_wr *w, uint32_t v)
{
    st32(mc_dipc_wr_reserve(w, 4), v);
}

void mc_dipc_put_u64(mc_dipc_wr *w, uint64_t v)
{
    st64(mc_dipc_wr_reserve(w, 8), v);
}

void mc_dipc_put_i64(mc_dipc_wr *w, int64_t v)
{
    mc_dipc_put_u64(w, (uint64_t)v);
}

void mc_dipc_put_bytes(mc_dipc_wr *w, const void *p, size_t len)
{
    mc_dipc_put_u32(w, (uint32_t)len);
    if (len)
        memcpy(mc_dipc_wr_reserve(w, len), p, len);
}

void mc_dipc_wr_finish(mc_dipc_wr *w, uint16_t op, uint32_t id)
{
    mc_dipc_hdr_write(w->p, op, id, (uint32_t)(w->n - MC_DIPC_HDR));
}

/* ---- requests ---- */

static bool rd_key(mc_dipc_rd *r, mc_dipc_row *row)
{
    size_t len;
    const void *p = mc_dipc_bytes(r, MC_DIPC_KEY_MAX, &len);
    row->key = p;
    row->key_len = len;
    if (!p || !len)
        r->bad = true;
    return !r->bad;
}

/* u32 n, then n rows of (key[, u64 off, u64 len]) */
static void rd_rows(mc_dipc_rd *r, mc_dipc_request *q, bool ranged)
{
    q->n = mc_dipc_count(r, MC_DIPC_MAX_BATCH, ranged ? 4 + 1 + 16 : 4 + 1);
    if (r->bad)
        return;
    free(q->rows);
    q->rows = mc_xcalloc(q->n ? q->n : 1, sizeof *q->rows);
    for (uint32_t i = 0; i < q->n && !r->bad; i++) {
        rd_key(r, &q->rows[i]);
        if (ranged) {
            q->rows[i].off = mc_dipc_u64(r);
            q->rows[i].len = mc_dipc_u64(r);
        }
    }
}

/* u32 n, then n rows of (key, u32 k, k x (u64 off, u64 len)): the segments of all rows
 * go to q->segs in order. */
static void rd_multi_rows(mc_dipc_rd *r, mc_dipc_request *q)
{
    q->n = mc_dipc_count(r, MC_DIPC_MAX_BATCH, 4 + 1 + 4);
    if (r->bad)
        return;
    free(q->rows);
    q->rows = mc_xcalloc(q->n ? q->n : 1, sizeof *q->rows);
    size_t cap = 0;
    for (uint32_t i = 0; i < q->n && !r->bad; i++) {
        mc_dipc_row *row = &q->rows[i];
        rd_key(r, row);
        uint32_t k = mc_dipc_count(r, MC_DIPC_MAX_SEGS, 16);
        if (r->bad)
            break;
        row->seg0 = q->nsegs;
        row->nseg = k;
        if ((size_t)q->nsegs + k > cap) {
            cap = ((size_t)q->nsegs + k) * 2;
            q->segs = mc_xrealloc(q->segs, cap * sizeof *q->segs);
        }
        for (uint32_t j = 0; j < k; j++) {
            q->segs[q->nsegs].off = mc_dipc_u64(r);
            q->segs[q->nsegs++].len = mc_dipc_u64(r);
        }
    }
}

int mc_dipc_decode_request(uint16_t op, const void *body, size_t len, mc_dipc_request *out)
{
    memset(out, 0, sizeof *out);
    out->op = op;
    out->rows = mc_xcalloc(1, sizeof *out->rows);
    mc_dipc_rd r;
    mc_dipc_rd_init(&r, body, len);
    mc_dipc_row *row = &out->rows[0];
    switch (op) {
    case MC_DIPC_HELLO:
        out->pool_size = mc_dipc_u64(&r);
        if (out->pool_size > MC_DIPC_MAX_POOL)
            r.bad = true;
        break;
    case MC_DIPC_PUT:
    case MC_DIPC_UPSERT:
        out->n = 1;
        rd_key(&r, row);
        out->value = mc_dipc_bytes(&r, MC_DIPC_MAX_BODY, &out->value_len);
        out->replica_num = mc_dipc_u32(&r);
        break;
    case MC_DIPC_GET:
    case MC_DIPC_IS_EXIST:
    case MC_DIPC_GET_SIZE:
        out->n = 1;
        rd_key(&r, row);
        break;
    case MC_DIPC_PUT_FROM:
    case MC_DIPC_UPSERT_FROM:
    case MC_DIPC_GET_INTO:
        out->n = 1;
        rd_key(&r, row);
        row->off = mc_dipc_u64(&r);
        row->len = mc_dipc_u64(&r);
        if (op != MC_DIPC_GET_INTO)
            out->replica_num = mc_dipc_u32(&r);
        break;
    case MC_DIPC_REMOVE_BY_REGEX:
        out->value = mc_dipc_bytes(&r, MC_DIPC_KEY_MAX, &out->value_len);
        out->force = mc_dipc_u8(&r) != 0;
        break;
    case MC_DIPC_BATCH_PUT_FROM:
    case MC_DIPC_BATCH_UPSERT_FROM:
        rd_rows(&r, out, true);
        out->replica_num = mc_dipc_u32(&r);
        break;
    case MC_DIPC_BATCH_GET_INTO:
        rd_rows(&r, out, true);
        break;
    case MC_DIPC_BATCH_IS_EXIST:
    case MC_DIPC_REPLICA_DESC:
        rd_rows(&r, out, false);
        break;
    case MC_DIPC_BATCH_PUT_MULTI:
        rd_multi_rows(&r, out);
        out->replica_num = mc_dipc_u32(&r);
        break;
    case MC_DIPC_BATCH_GET_MULTI:
        rd_multi_rows(&r, out);
        out->prefer_same_node = mc_dipc_u8(&r) != 0;
        break;
    case MC_DIPC_BATCH_REMOVE:
        rd_rows(&r, out, false);
        out->force = mc_dipc_u8(&r) != 0;
        break;
    case MC_DIPC_REMOVE:
        out->n = 1;
        rd_key(&r, row);
        out->force = mc_dipc_u8(&r) != 0;
        break;
    case MC_DIPC_REMOVE_ALL:
        out->force = mc_dipc_u8(&r) != 0;
        break;
    case MC_DIPC_STATS:
        break;
    default:
        r.bad = true;
    }
    return mc_dipc_rd_done(&r) ? 0 : -EPROTO;
}

void mc_dipc_request_free(mc_dipc_request *r)
{
    free(r->rows);
    r->rows = NULL;
    r->n = 0;
    free(r->segs);
    r->segs = NULL;
    r->nsegs = 0;
}
