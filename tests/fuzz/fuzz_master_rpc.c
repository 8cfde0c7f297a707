/* libFuzzer target: the master's request path for bytes from the network. The input is
 * a stream of frames (src/net/frame.h headers with protobuf bodies, proto/master.proto):
 * each header is checked as the server checks it (a bad one ends the stream, as the
 * server closes the connection), each body goes through mc_master_rpc_handle against a
 * real master service with one mounted segment. Every input must either be refused
 * (frame status INVALID_PARAMS / NOT_SUPPORTED, empty reply) or produce a reply that
 * decodes as the opcode's reply message. Seeds: tests/fuzz/corpus/master_rpc. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master.pb-c.h"
#include "master/rpc_server.h"
#include "mooncake/log.h"
#include "mooncake/status.h"
#include "net/frame.h"
#include "rpc/master_rpcs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_BODY (1u << 20)

static mc_master_service *svc;
static mc_master_rpc_handler *h;
static unsigned runs;

static void init(void)
{
    mc_log_set_level(MC_LOG_OFF);
    mc_master_config cfg;
    mc_master_config_init(&cfg);
    if (mc_master_service_create(&cfg, &svc) != MC_OK)
        abort();
    mc_master_segment seg = {.id = {1, 1}, .name = "127.0.0.1:1", .base = 1u << 20,
                             .size = 1u << 30};
    if (mc_master_service_mount_segment(svc, &seg, (mc_master_uuid){1, 2}) != MC_OK)
        abort();
    h = mc_master_rpc_handler_create(svc);
}

/* The reply message each opcode answers with (NULL for unknown opcodes), from the RPC
 * table (rpc/master_rpcs.h), as the handler's dispatch is. */
static const ProtobufCMessageDescriptor *reply_desc(uint16_t op)
{
    switch (op) {
#define MC__REPLY(ID, CODE, NAME, VERB, REQ, REPLY, SHAPE, HANDLER, COUNT)                     \
    case MCRPC__OPCODE__OP_##ID:                                                             \
        return &mcrpc__##REPLY##__descriptor;
        MC_MASTER_RPC_TABLE(MC__REPLY)
#undef MC__REPLY
    default:
        return NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!svc)
        init();
    /* Keep the index small across runs: the fuzzer, not the service, is under test. */
    if (++runs % 1024 == 0)
        mc_master_service_remove_all(svc, true, NULL);
    while (size >= MC_FRAME_HEADER_SIZE) {
        mc_frame_header hdr;
        if (mc_frame_decode_header(data, FUZZ_MAX_BODY, &hdr) != 0)
            return 0; /* the server closes the connection here */
        data += MC_FRAME_HEADER_SIZE;
        size -= MC_FRAME_HEADER_SIZE;
        if (hdr.body_len > size)
            return 0; /* truncated: the server waits for more */
        const uint8_t *reply;
        size_t reply_len;
        int st = mc_master_rpc_handle(h, hdr.opcode, data, hdr.body_len, &reply, &reply_len);
        const ProtobufCMessageDescriptor *d = reply_desc(hdr.opcode);
        if (st != 0) {
            if (reply_len != 0 || (st != MC_INVALID_PARAMS && st != MC_NOT_SUPPORTED) ||
                (st == MC_NOT_SUPPORTED && d))
                abort();
        } else {
            if (!d)
                abort();
            ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, reply_len, reply);
            if (!m)
                abort(); /* our own reply must decode */
            protobuf_c_message_free_unpacked(m, NULL);
        }
        data += hdr.body_len;
        size -= hdr.body_len;
    }
    return 0;
}
