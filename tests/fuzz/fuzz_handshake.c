/* fuzz_handshake: the transfer engine's handshake-port parsers over an arbitrary stream:
 * frames (u64 length counting the type byte, u8 type, payload; upstream common.h
 * writeString/readString) split with mc__te_hs_parse under a limit taken from the input,
 * Notify payloads through mc__te_hs_notify_decode (the server), Metadata payloads through
 * mc_segment_desc_decode (the client reading a peer's answer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/metadata.h"
#include "transfer/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint64_t max = 64u << (data[0] % 16); /* 64 B .. 2 MiB */
    data++;
    size--;
    size_t off = 0;
    for (;;) {
        mc__te_hs_frame f;
        long long used = mc__te_hs_parse(data + off, size - off, max, &f);
        if (used <= 0)
            break; /* need more, or the connection is dropped */
        if ((size_t)used > size - off || f.payload_len + 9 != (size_t)used ||
            f.payload_len + 1 > max)
            abort();
        if (f.type == MC_TE_HS_NOTIFY) {
            char *name, *msg;
            size_t ml;
            if (mc__te_hs_notify_decode(f.payload, f.payload_len, &name, &msg, &ml) == 0) {
                if (strlen(name) > 4096 || msg[ml] != '\0')
                    abort();
                free(name);
                free(msg);
            }
        } else if (f.type == MC_TE_HS_METADATA && f.payload_len) {
            mc_segment_desc d;
            mc_segment_desc_init(&d);
            if (mc_segment_desc_decode((const char *)f.payload, f.payload_len, &d, NULL, 0) ==
                0)
                mc_segment_desc_deinit(&d);
        }
        off += (size_t)used;
    }
    return 0;
}
