/* fuzz_te_header: the transfer engine's data-port parsers (src/transfer/wire.c) over an
 * arbitrary byte stream, as the serving side reads it: the version check on the first
 * 16 bytes, a 40-byte (wire version 2) request header, then for WRITE `len` payload bytes
 * and for NOTIFY a body (u32 name length, name, message); HELLO carries the writer id.
 * Also reply headers as the initiator checks them, and the overflow-safe range check.
 * Invariants: an accepted header re-encodes to the same bytes, its length respects the
 * per-op limit and only a WRITE carries a fence epoch; the prefix check agrees with the
 * full decode about the version; a decoded notify body lies inside the input. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/transfer_engine.h"
#include "net/frame.h"
#include "transfer/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (size - off >= MC_TE_REQ_SIZE) {
        mc__te_req q;
        const uint8_t *h = data + off;
        off += MC_TE_REQ_SIZE;
        unsigned version = 0;
        uint64_t vid = 0;
        int pre = mc__te_req_prefix(h, &version, &vid);
        int rc = mc__te_req_decode(h, &q);
        /* the server checks the prefix first: it must agree with the full decode */
        if ((rc == -EPROTONOSUPPORT && pre != -EPROTONOSUPPORT) ||
            (pre == 0 && rc == -EPROTONOSUPPORT) || (pre == -EPROTO && rc != -EPROTO))
            abort();
        if (pre == -EPROTONOSUPPORT && (version == MC_TE_WIRE_VERSION || vid != mc_get_le64(h + 8)))
            abort();
        if (rc < 0)
            break; /* the server closes the connection */
        if (q.epoch && q.op != MC_TE_WOP_WRITE)
            abort();
        uint8_t again[MC_TE_REQ_SIZE];
        mc__te_req_encode(&q, again);
        if (memcmp(again, h, MC_TE_REQ_SIZE) != 0)
            abort();
        if ((q.op == MC_TE_WOP_WRITE || q.op == MC_TE_WOP_READ) && q.len > MC_TE_MAX_WIRE_LEN)
            abort();
        /* the bounds check against a registration made of input bytes */
        uint64_t base = q.id, len = q.addr;
        if (mc__te_range_inside(base, len, q.addr, q.len)) {
            if (q.addr < base || q.addr - base + q.len > len || q.len == 0)
                abort();
        }
        if (q.op == MC_TE_WOP_WRITE) {
            if (q.len > size - off)
                break;
            off += (size_t)q.len;
        } else if (q.op == MC_TE_WOP_NOTIFY) {
            if (q.len > size - off)
                break;
            const char *name;
            const uint8_t *msg;
            size_t nl, ml;
            if (mc__te_notify_decode(data + off, (size_t)q.len, &name, &nl, &msg, &ml) == 0) {
                if ((const uint8_t *)name < data + off || msg + ml > data + off + q.len ||
                    nl > MC_TE_MAX_NOTIFY_NAME || ml > MC_TE_MAX_NOTIFY_MSG ||
                    memchr(name, 0, nl))
                    abort();
            }
            off += (size_t)q.len;
        }
    }
    /* reply headers, checked against an expectation taken from the input */
    if (size >= MC_TE_REP_SIZE + 17) {
        mc__te_rep r;
        uint64_t id, req_len;
        memcpy(&id, data + MC_TE_REP_SIZE, 8);
        memcpy(&req_len, data + MC_TE_REP_SIZE + 8, 8);
        uint8_t op = data[MC_TE_REP_SIZE + 16];
        if (mc__te_rep_decode(data, id, op, req_len, &r) == 0) {
            if (r.id != id || r.status > 0 ||
                (op != MC_TE_WOP_HELLO && r.len != (op == MC_TE_WOP_READ ? req_len : 0)))
                abort();
        }
    }
    return 0;
}
