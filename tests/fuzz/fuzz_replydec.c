/* libFuzzer target: the client's hand-written decoder of the master's batch replies
 * (mc__replydec_unpack, src/client/master_codec.c, compiled in for coverage) against
 * protobuf-c's unpack on the same bytes, and the master's BatchKeysRequest decoder
 * (rpc/pbdec.h) likewise. The first input byte picks the message type (replydec_descs:
 * the five decoded by hand and one left alone), the rest is the body. Whenever the hand decoder returns a message, protobuf-c must return an equal one
 * (replydec_check.h); a difference aborts. Seeds: tests/fuzz/corpus/replydec. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "replydec_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const ProtobufCMessageDescriptor *desc = replydec_descs[data[0] % REPLYDEC_NDESCS];
    if (replydec_check(desc, data + 1, size - 1) < 0)
        abort();
    return 0;
}
