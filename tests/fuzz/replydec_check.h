/* replydec_check.h: the property the client's hand-written reply decoder
 * (mc__replydec_unpack, src/client/master_codec.c) and the master's request decoder
 * (mc__pbdec_batch_keys, rpc/pbdec.h) must keep, shared by the libFuzzer
 * target (fuzz_replydec.c) and the unit test (tests/unit/client/test_replydec.c):
 * whenever it returns a message for a body, protobuf-c's protobuf_c_message_unpack
 * returns one too, equal field for field (compared through the descriptors, recursively)
 * and with no unknown fields. Header-only, test code. */
#ifndef MC_TEST_REPLYDEC_CHECK_H
#define MC_TEST_REPLYDEC_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/replydec.h"
#include "master.pb-c.h"
#include "rpc/arena.h"
#include "rpc/pbdec.h"

/* The messages the decoders handle (four replies, mc__replydec_unpack; the master's
 * batch request, mc__pbdec_batch_keys), and one they leave to protobuf-c (index 4). */
static const ProtobufCMessageDescriptor *const replydec_descs[] = {
    &mcrpc__batch_get_replica_list_reply__descriptor,
    &mcrpc__batch_put_start_reply__descriptor,
    &mcrpc__batch_status_reply__descriptor,
    &mcrpc__batch_exist_key_reply__descriptor,
    &mcrpc__get_replica_list_reply__descriptor,
    &mcrpc__batch_keys_request__descriptor,
};
#define REPLYDEC_NDESCS (sizeof replydec_descs / sizeof replydec_descs[0])

static size_t replydec_elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 8;
    }
}

static bool replydec_msg_eq(const ProtobufCMessage *a, const ProtobufCMessage *b);

/* One value of field f at pa / pb. */
static bool replydec_val_eq(const ProtobufCFieldDescriptor *f, const void *pa, const void *pb)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *x = *(char *const *)pa, *y = *(char *const *)pb;
        return (!x && !y) || (x && y && !strcmp(x, y));
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *x = pa, *y = pb;
        return x->len == y->len && (!x->len || !memcmp(x->data, y->data, x->len));
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *x = *(ProtobufCMessage *const *)pa;
        const ProtobufCMessage *y = *(ProtobufCMessage *const *)pb;
        return (!x && !y) || (x && y && replydec_msg_eq(x, y));
    }
    default:
        return !memcmp(pa, pb, replydec_elem_size(f->type));
    }
}

static bool replydec_msg_eq(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
    const ProtobufCMessageDescriptor *d = a->descriptor;
    if (d != b->descriptor || a->n_unknown_fields || b->n_unknown_fields)
        return false;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *fa = (const char *)a + f->offset, *fb = (const char *)b + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t na = *(const size_t *)((const char *)a + f->quantifier_offset);
            size_t nb = *(const size_t *)((const char *)b + f->quantifier_offset);
            if (na != nb)
                return false;
            const char *va = *(char *const *)fa, *vb = *(char *const *)fb;
            size_t es = replydec_elem_size(f->type);
            for (size_t k = 0; k < na; k++)
                if (!replydec_val_eq(f, va + k * es, vb + k * es))
                    return false;
        } else {
            if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
                f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING &&
                memcmp((const char *)a + f->quantifier_offset,
                       (const char *)b + f->quantifier_offset, sizeof(protobuf_c_boolean)))
                return false;
            if (!replydec_val_eq(f, fa, fb))
                return false;
        }
    }
    return true;
}

/* Decodes body both ways. Returns -1 when the property breaks (the decoder accepted
 * what protobuf-c refuses, or they differ), else 1 when the hand decoder took the body
 * and 0 when it left it to protobuf-c. */
static int replydec_check(const ProtobufCMessageDescriptor *desc, const uint8_t *body,
                          size_t len)
{
    mc__arena ar = {0};
    ar.limit = 64u << 20;
    const ProtobufCMessage *fast;
    if (desc == &mcrpc__batch_keys_request__descriptor) {
        const Mcrpc__BatchKeysRequest *k = mc__pbdec_batch_keys(&ar, len, body);
        fast = k ? &k->base : NULL;
    } else {
        fast = mc__replydec_unpack(desc, &ar, len, body);
    }
    ProtobufCMessage *slow = protobuf_c_message_unpack(desc, NULL, len, body);
    int rc = 0;
    if (fast)
        rc = slow && replydec_msg_eq(fast, slow) ? 1 : -1;
    if (slow)
        protobuf_c_message_free_unpacked(slow, NULL);
    mc__arena_destroy(&ar);
    return rc;
}

#endif
