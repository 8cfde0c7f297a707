/* wire.h: the transfer engine's wire formats, as pure functions (no sockets), so unit
 * tests and libFuzzer targets can drive them directly. Internal to src/transfer.
 *
 * Data port (TCP), little-endian, one request header per slice (wire version 2):
 *   u32 magic MC_TE_REQ_MAGIC ("MCTE")   u8 version (2)   u8 op   u16 reserved (0)
 *   u64 request_id   u64 addr (the server's virtual address)   u64 length
 *   u64 fence_epoch (WRITE: 0 = unfenced, else the writer's epoch for this segment;
 *                    0 for every other op)
 * followed, for WRITE, by `length` payload bytes and, for NOTIFY, by the notify body
 * (u32 name_len, name, message). HELLO (op 5) is the first request the initiator sends
 * on every data connection: addr = the writer id's high 64 bits, length = its low 64
 * bits (the store client's uuid; 0,0 when unset), no payload. The server answers every
 * request, in order, with
 *   u32 magic MC_TE_REP_MAGIC ("MCTR")   i32 status (0 or -errno)   u64 request_id
 *   u64 length
 * and, for READ, exactly `length` bytes (the data, or zeros when status != 0), so the
 * stream layout never depends on the outcome. The initiator decodes each READ reply's
 * header before it receives the payload: only a status-0 payload goes into the caller's
 * buffer, anything else into scratch. A HELLO reply's length is the server's wire
 * version. A READ/WRITE whose range is not inside registered memory gets status -EFAULT;
 * a WRITE refused by the owner's fence table (fence.c) gets -ESTALE (both payloads are
 * consumed and dropped, memory untouched); an unparseable header closes the connection.
 * A header of another wire version (checked once its first 16 bytes are in) is answered
 * with status -EPROTONOSUPPORT, length = the server's version, and the connection is
 * closed; so a version-1 initiator sees a reply it cannot parse and closes, and a
 * version-2 initiator reaching a version-1 server (which closes without answering)
 * sees its HELLO unanswered: both sides log the peer and the versions.
 *
 * Handshake port (upstream common.h writeString/readString): u64 length (LE; counts
 * the type byte) + u8 type + payload (JSON), length in 1..max.
 */
#ifndef MC_TRANSFER_WIRE_H
#define MC_TRANSFER_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_TE_REQ_MAGIC 0x4554434Du /* "MCTE" read as LE u32 */
#define MC_TE_REP_MAGIC 0x5254434Du /* "MCTR" */
#define MC_TE_WIRE_VERSION 2
#define MC_TE_REQ_SIZE 40
#define MC_TE_REQ_PREFIX 16 /* magic .. request_id: same place in versions 1 and 2 */
#define MC_TE_REP_SIZE 24
#define MC_TE_MAX_WIRE_LEN (64ull << 20) /* largest READ/WRITE length on the wire */

enum {
    MC_TE_WOP_WRITE = 1,
    MC_TE_WOP_READ = 2,
    MC_TE_WOP_NOTIFY = 3,
    MC_TE_WOP_PING = 4,
    MC_TE_WOP_HELLO = 5,
};

typedef struct mc__te_req {
    uint8_t op;
    uint64_t id;
    uint64_t addr;
    uint64_t len;
    uint64_t epoch; /* fence_epoch (WRITE only; 0 otherwise) */
} mc__te_req;

typedef struct mc__te_rep {
    int32_t status;
    uint64_t id;
    uint64_t len;
} mc__te_rep;

/* Largest NOTIFY body: u32 + name + message. */
uint64_t mc__te_notify_max_body(void);

void mc__te_req_encode(const mc__te_req *r, uint8_t out[MC_TE_REQ_SIZE]);

/* mc__te_req_decode: parses and checks a request header. Returns 0; -EPROTO (bad
 * magic or reserved bits); -EPROTONOSUPPORT (version); -EBADMSG (unknown op, or a
 * non-zero fence_epoch on an op other than WRITE); -EMSGSIZE (READ/WRITE length >
 * MC_TE_MAX_WIRE_LEN, NOTIFY body larger than mc__te_notify_max_body() or shorter than
 * 4, PING with a length). HELLO takes any addr/length (the writer id). */
int mc__te_req_decode(const uint8_t in[MC_TE_REQ_SIZE], mc__te_req *r);

/* mc__te_req_prefix: checks the first MC_TE_REQ_PREFIX bytes of a header (any version).
 * Returns 0 (magic and version MC_TE_WIRE_VERSION); -EPROTO (bad magic); or
 * -EPROTONOSUPPORT with *version and *id set (another version's header). */
int mc__te_req_prefix(const uint8_t in[MC_TE_REQ_PREFIX], unsigned *version, uint64_t *id);

void mc__te_rep_encode(const mc__te_rep *r, uint8_t out[MC_TE_REP_SIZE]);

/* mc__te_rep_decode: parses a reply header and checks it against what was asked:
 * request id `id`, and the length a reply to op must carry (READ: req_len; HELLO: any,
 * it is the server's wire version; others 0).
 * Returns 0 (r filled; r->status may be an error from the peer), -EPROTO otherwise. */
int mc__te_rep_decode(const uint8_t in[MC_TE_REP_SIZE], uint64_t id, uint8_t op,
                      uint64_t req_len, mc__te_rep *r);

/* mc__te_range_inside: true when len > 0 and [addr, addr+len) lies inside
 * [base, base+size), computed without overflow. */
static inline bool mc__te_range_inside(uint64_t base, uint64_t size, uint64_t addr,
                                       uint64_t len)
{
    if (len == 0 || addr < base)
        return false;
    uint64_t off = addr - base;
    return off <= size && len <= size - off;
}

/* NOTIFY body: u32 name_len, name (no NUL inside), message bytes. */
size_t mc__te_notify_body_size(size_t name_len, size_t msg_len);
void mc__te_notify_encode(uint8_t *out, const char *name, size_t name_len, const void *msg,
                          size_t msg_len);
/* mc__te_notify_decode: borrowed pointers into body. Returns 0 or -EBADMSG (short body,
 * name too long or holding a NUL, message too long). */
int mc__te_notify_decode(const uint8_t *body, size_t len, const char **name,
                         size_t *name_len, const uint8_t **msg, size_t *msg_len);

/* ---- handshake frames ---- */

enum {
    MC_TE_HS_CONNECTION = 0,
    MC_TE_HS_METADATA = 1,
    MC_TE_HS_NOTIFY = 2,
    MC_TE_HS_PROBE = 3,
};

#define MC_TE_HS_PREFIX 9 /* u64 length + u8 type */
#define MC_TE_HS_DEFAULT_MAX (1u << 20)
#define MC_TE_HS_LIMIT (128u << 20)

typedef struct mc__te_hs_frame {
    uint8_t type;
    const uint8_t *payload; /* borrowed from the input */
    size_t payload_len;
} mc__te_hs_frame;

/* mc__te_hs_parse: looks for one frame at the start of buf[0..len).
 * Returns the frame's total size (> 0, f filled) when complete; 0 when more bytes are
 * needed; -EPROTO when the length field is 0; -EMSGSIZE when it exceeds max_len. */
long long mc__te_hs_parse(const uint8_t *buf, size_t len, uint64_t max_len,
                          mc__te_hs_frame *f);

/* mc__te_hs_encode_prefix: writes the 9-byte prefix for a payload of payload_len. */
void mc__te_hs_encode_prefix(uint8_t out[MC_TE_HS_PREFIX], uint8_t type, size_t payload_len);

/* mc__te_hs_notify_decode: {"name": str, "notify_msg": str} (upstream NotifyDesc; "msg"
 * accepted too) -> new malloc'd name/msg (NUL-terminated). Limits as NOTIFY.
 * Returns 0 or -EBADMSG. */
int mc__te_hs_notify_decode(const uint8_t *json, size_t len, char **name, char **msg,
                            size_t *msg_len);

#endif
