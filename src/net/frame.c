/* frame.c: see frame.h. */
#include "net/frame.h"

#include <errno.h>

void mc_frame_encode_header(const mc_frame_header *h, uint8_t out[MC_FRAME_HEADER_SIZE])
{
    mc_put_le32(out, MC_FRAME_MAGIC);
    out[4] = h->version ? h->version : MC_FRAME_VERSION;
    out[5] = h->flags;
    mc_put_le16(out + 6, h->opcode);
    mc_put_le32(out + 8, (uint32_t)h->status);
    mc_put_le32(out + 12, h->body_len);
    mc_put_le64(out + 16, h->request_id);
}

int mc_frame_decode_header(const uint8_t in[MC_FRAME_HEADER_SIZE], uint32_t max_body,
                           mc_frame_header *h)
{
    if (mc_get_le32(in) != MC_FRAME_MAGIC)
        return -EPROTO;
    h->version = in[4];
    h->flags = in[5];
    h->opcode = mc_get_le16(in + 6);
    h->status = (int32_t)mc_get_le32(in + 8);
    h->body_len = mc_get_le32(in + 12);
    h->request_id = mc_get_le64(in + 16);
    if (h->version != MC_FRAME_VERSION)
        return -EPROTONOSUPPORT;
    if (h->flags & ~MC_FRAME_REPLY)
        return -EPROTO;
    if (h->body_len > max_body)
        return -EMSGSIZE;
    return 0;
}
