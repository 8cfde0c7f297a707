/* replydec.h: the client's hand-written decoder of the master's hot batch replies
 * (master_codec.c). A header of its own, not internal.h, so the fuzz target
 * (tests/fuzz/fuzz_replydec.c) can reach this one function without the client's
 * internals. */
#ifndef MC_CLIENT_REPLYDEC_H
#define MC_CLIENT_REPLYDEC_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "rpc/arena.h"

/* mc__replydec_unpack: hand-written decoding of the master's hot batch replies (issue
 * 17: protobuf-c's generic unpack was 43% of a batch get's client instructions). Decodes
 * body[0..len), a message of type desc, into the same protobuf-c structs that
 * protobuf_c_message_unpack(desc, <a's allocator>, len, body) builds, allocated from
 * arena a (freed by mc__arena_reset; never by protobuf_c_message_free_unpacked).
 * Handles BatchGetReplicaListReply and BatchPutStartReply (replica lists and their
 * segment table), BatchStatusReply and BatchExistKeyReply (packed sint32 lists), in the
 * encoding protobuf-c writes: one-byte tags of the messages' known fields, in any order,
 * each packed list in one piece. Returns NULL for any other descriptor, any other shape
 * (an unknown field, a singular sub-message given twice, an unpacked list, a malformed
 * body) and when a's limit is reached: the caller then resets a and decodes with
 * protobuf-c, which refuses the body or reads it (merging, keeping unknown fields) as
 * before. So the two never disagree: whenever this returns a message, protobuf-c returns
 * an equal one (tests/fuzz/fuzz_replydec.c, tests/unit/client/test_replydec.c).
 * Threads: any; a is the caller's. master_codec.c. */
const ProtobufCMessage *mc__replydec_unpack(const ProtobufCMessageDescriptor *desc,
                                            mc__arena *a, size_t len, const uint8_t *body);

#endif
