/* frame.h: the length-checked frame of the master RPC (DESIGN.md §4).
 *
 * Wire layout, little-endian, MC_FRAME_HEADER_SIZE = 24 bytes:
 *   u32 magic      MC_FRAME_MAGIC ("MCRP")
 *   u8  version    MC_FRAME_VERSION
 *   u8  flags      MC_FRAME_REPLY on replies
 *   u16 opcode     which RPC (proto/master.proto gives the numbers)
 *   i32 status     replies: frame-level status (e.g. unknown opcode -> NOT_SUPPORTED);
 *                  requests: 0
 *   u32 body_len   bytes of protobuf body that follow
 *   u64 request_id chosen by the client; the reply carries the same id (pipelining)
 */
#ifndef MC_NET_FRAME_H
#define MC_NET_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define MC_FRAME_MAGIC 0x5052434Du /* "MCRP" read as little-endian u32 */
#define MC_FRAME_VERSION 1
#define MC_FRAME_HEADER_SIZE 24
#define MC_FRAME_REPLY 0x01
#define MC_FRAME_DEFAULT_MAX_BODY (64u << 20) /* 64 MiB */

typedef struct mc_frame_header {
    uint8_t version;
    uint8_t flags;
    uint16_t opcode;
    int32_t status;
    uint32_t body_len;
    uint64_t request_id;
} mc_frame_header;

/* mc_frame_encode_header: writes the 24-byte header for h into out. */
void mc_frame_encode_header(const mc_frame_header *h, uint8_t out[MC_FRAME_HEADER_SIZE]);

/* mc_frame_decode_header: parses and checks 24 bytes. Returns 0, -EPROTO for a bad
 * magic or unknown flags, -EPROTONOSUPPORT for another version, -EMSGSIZE when
 * body_len > max_body (checked before anyone allocates the body). */
int mc_frame_decode_header(const uint8_t in[MC_FRAME_HEADER_SIZE], uint32_t max_body,
                           mc_frame_header *h);

/* Little-endian load/store helpers shared by the wire formats. */
static inline void mc_put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void mc_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void mc_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t mc_get_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t mc_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
static inline uint64_t mc_get_le64(const uint8_t *p)
{
    return (uint64_t)mc_get_le32(p) | ((uint64_t)mc_get_le32(p + 4) << 32);
}

#endif
