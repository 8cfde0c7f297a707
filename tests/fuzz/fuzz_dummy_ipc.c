/* fuzz_dummy_ipc: the real client's reading of dummy-client frames (src/client/dummy_ipc.c)
 * over an arbitrary byte stream, as dummy_server.c reads a connection: a 16-byte header
 * (refused: the connection closes), then body_len bytes decoded as the header's request.
 * Invariants: an accepted header re-encodes to the same 16 bytes and its body_len is
 * within the limit; every decoded key and value lies inside the body, keys are
 * 1..MC_DIPC_KEY_MAX bytes, counts are within MC_DIPC_MAX_BATCH (segments per key within
 * MC_DIPC_MAX_SEGS, inside the decoded segment list); a request that decodes
 * re-encodes (with the writer) to the same body. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/dummy_ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool inside(const void *p, size_t n, const uint8_t *body, size_t len)
{
    const uint8_t *q = p;
    return n == 0 || (q >= body && q <= body + len && n <= (size_t)(body + len - q));
}

/* Re-encodes a decoded request with the writer (the dummy side's encoding). */
static void encode(const mc_dipc_request *r, mc_dipc_wr *w)
{
    const mc_dipc_row *row = &r->rows[0];
    switch (r->op) {
    case MC_DIPC_HELLO: mc_dipc_put_u64(w, r->pool_size); break;
    case MC_DIPC_PUT:
    case MC_DIPC_UPSERT:
        mc_dipc_put_bytes(w, row->key, row->key_len);
        mc_dipc_put_bytes(w, r->value, r->value_len);
        mc_dipc_put_u32(w, r->replica_num);
        break;
    case MC_DIPC_GET:
    case MC_DIPC_IS_EXIST:
    case MC_DIPC_GET_SIZE: mc_dipc_put_bytes(w, row->key, row->key_len); break;
    case MC_DIPC_PUT_FROM:
    case MC_DIPC_UPSERT_FROM:
    case MC_DIPC_GET_INTO:
        mc_dipc_put_bytes(w, row->key, row->key_len);
        mc_dipc_put_u64(w, row->off);
        mc_dipc_put_u64(w, row->len);
        if (r->op != MC_DIPC_GET_INTO)
            mc_dipc_put_u32(w, r->replica_num);
        break;
    case MC_DIPC_REMOVE_BY_REGEX:
        mc_dipc_put_bytes(w, r->value, r->value_len);
        mc_dipc_put_u8(w, r->force);
        break;
    case MC_DIPC_BATCH_PUT_FROM:
    case MC_DIPC_BATCH_UPSERT_FROM:
    case MC_DIPC_BATCH_GET_INTO:
    case MC_DIPC_BATCH_IS_EXIST:
    case MC_DIPC_REPLICA_DESC:
    case MC_DIPC_BATCH_REMOVE: {
        bool ranged = r->op == MC_DIPC_BATCH_PUT_FROM || r->op == MC_DIPC_BATCH_GET_INTO ||
                      r->op == MC_DIPC_BATCH_UPSERT_FROM;
        mc_dipc_put_u32(w, r->n);
        for (uint32_t i = 0; i < r->n; i++) {
            mc_dipc_put_bytes(w, r->rows[i].key, r->rows[i].key_len);
            if (ranged) {
                mc_dipc_put_u64(w, r->rows[i].off);
                mc_dipc_put_u64(w, r->rows[i].len);
            }
        }
        if (r->op == MC_DIPC_BATCH_PUT_FROM || r->op == MC_DIPC_BATCH_UPSERT_FROM)
            mc_dipc_put_u32(w, r->replica_num);
        if (r->op == MC_DIPC_BATCH_REMOVE)
            mc_dipc_put_u8(w, r->force);
        break;
    }
    case MC_DIPC_REMOVE:
        mc_dipc_put_bytes(w, row->key, row->key_len);
        mc_dipc_put_u8(w, r->force);
        break;
    case MC_DIPC_REMOVE_ALL: mc_dipc_put_u8(w, r->force); break;
    case MC_DIPC_BATCH_PUT_MULTI:
    case MC_DIPC_BATCH_GET_MULTI:
        mc_dipc_put_u32(w, r->n);
        for (uint32_t i = 0; i < r->n; i++) {
            mc_dipc_put_bytes(w, r->rows[i].key, r->rows[i].key_len);
            mc_dipc_put_u32(w, r->rows[i].nseg);
            for (uint32_t j = 0; j < r->rows[i].nseg; j++) {
                mc_dipc_put_u64(w, r->segs[r->rows[i].seg0 + j].off);
                mc_dipc_put_u64(w, r->segs[r->rows[i].seg0 + j].len);
            }
        }
        if (r->op == MC_DIPC_BATCH_PUT_MULTI)
            mc_dipc_put_u32(w, r->replica_num);
        else
            mc_dipc_put_u8(w, r->prefer_same_node);
        break;
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (size - off >= MC_DIPC_HDR) {
        mc_dipc_hdr h;
        const uint8_t *hb = data + off;
        off += MC_DIPC_HDR;
        if (mc_dipc_hdr_parse(hb, MC_DIPC_MAX_BODY, false, &h) != 0)
            break; /* the server closes the connection */
        uint8_t again[MC_DIPC_HDR];
        mc_dipc_hdr_write(again, h.op, h.id, h.body_len);
        if (memcmp(again, hb, MC_DIPC_HDR) != 0 || h.body_len > MC_DIPC_MAX_BODY)
            abort();
        if (h.body_len > size - off)
            break; /* the server waits for the rest */
        const uint8_t *body = data + off;
        off += h.body_len;
        mc_dipc_request r;
        int rc = mc_dipc_decode_request(h.op, body, h.body_len, &r);
        if (rc == 0) {
            if (r.n > MC_DIPC_MAX_BATCH || !r.rows)
                abort();
            bool keyed = r.op != MC_DIPC_HELLO && r.op != MC_DIPC_STATS &&
                         r.op != MC_DIPC_REMOVE_ALL && r.op != MC_DIPC_REMOVE_BY_REGEX;
            for (uint32_t i = 0; keyed && i < r.n; i++)
                if (!r.rows[i].key_len || r.rows[i].key_len > MC_DIPC_KEY_MAX ||
                    !inside(r.rows[i].key, r.rows[i].key_len, body, h.body_len))
                    abort();
            if (!inside(r.value, r.value_len, body, h.body_len))
                abort();
            /* the multi-buffer rows' segments: each row's range inside segs */
            for (uint32_t i = 0; i < r.n; i++)
                if (r.rows[i].nseg > MC_DIPC_MAX_SEGS ||
                    (size_t)r.rows[i].seg0 + r.rows[i].nseg > r.nsegs)
                    abort();
            mc_dipc_wr w;
            mc_dipc_wr_init(&w);
            encode(&r, &w);
            size_t n = w.n - MC_DIPC_HDR;
            /* force is a byte read as a bool: only 0/1 re-encode identically */
            bool has_force = r.op == MC_DIPC_REMOVE || r.op == MC_DIPC_REMOVE_ALL ||
                             r.op == MC_DIPC_BATCH_REMOVE || r.op == MC_DIPC_REMOVE_BY_REGEX ||
                             r.op == MC_DIPC_BATCH_GET_MULTI; /* prefer_same_node too */
            if (n != h.body_len)
                abort();
            if (!has_force && memcmp(w.p + MC_DIPC_HDR, body, n) != 0)
                abort();
            mc_dipc_wr_free(&w);
        }
        mc_dipc_request_free(&r);
    }
    return 0;
}
