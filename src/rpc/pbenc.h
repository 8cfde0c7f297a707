/* rpc/pbenc.h: hand-written encoding of the master's hot batch replies
 * (BatchGetReplicaListReply, BatchPutStartReply: per-key replica lists and their segment
 * table), header-only (issue 17: protobuf-c's generic get_packed_size + pack were about
 * half of the master's batch-get handler). Writes exactly the bytes
 * protobuf_c_message_pack writes for the same structs (fields in number order, proto3
 * zero values and empty strings omitted, sub-messages length-prefixed), which
 * tests/unit/client/test_replydec.c checks on random messages; messages with unknown
 * fields are not handled (mc__pbenc_items_ok). No allocation; any thread. */
#ifndef MOONCAKE_RPC_PBENC_H
#define MOONCAKE_RPC_PBENC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "master.pb-c.h"
#include "rpc/pbwire.h"

/* The fields of the shape both replies share (status 1, items 2, segments 3, view 15). */
typedef struct mc__pbenc_items {
    int32_t status;
    size_t n_items;
    Mcrpc__ReplicaList *const *items;
    size_t n_segments;
    Mcrpc__SegmentRef *const *segments;
    int64_t view;
} mc__pbenc_items;

static inline size_t mc__pbenc_str_len(const char *s)
{
    return s ? strlen(s) : 0;
}

/* True when m (and everything under it) has no unknown fields: the only thing protobuf-c
 * would pack that these encoders do not. */
static inline bool mc__pbenc_items_ok(const ProtobufCMessage *m, const mc__pbenc_items *r)
{
    if (m->n_unknown_fields)
        return false;
    for (size_t i = 0; i < r->n_items; i++) {
        const Mcrpc__ReplicaList *l = r->items[i];
        if (l->base.n_unknown_fields)
            return false;
        for (size_t j = 0; j < l->n_replicas; j++)
            if (l->replicas[j]->base.n_unknown_fields)
                return false;
    }
    for (size_t i = 0; i < r->n_segments; i++)
        if (r->segments[i]->base.n_unknown_fields ||
            (r->segments[i]->id && r->segments[i]->id->base.n_unknown_fields))
            return false;
    return true;
}

/* At least the packed size of r (every length prefix counted at 5 bytes, every varint
 * at 10): the room mc__pbenc_items_pack needs. */
static inline size_t mc__pbenc_items_bound(const mc__pbenc_items *r)
{
    size_t n = 2 * 11;
    for (size_t i = 0; i < r->n_items; i++)
        n += 6 + 2 * 11 + r->items[i]->n_replicas * (6 + 6 * 11);
    for (size_t i = 0; i < r->n_segments; i++) {
        const Mcrpc__SegmentRef *s = r->segments[i];
        n += 6 + (6 + 18) + 2 * 6 + mc__pbenc_str_len(s->transport_endpoint) +
             mc__pbenc_str_len(s->protocol);
    }
    return n;
}

/* A sub-message written as one byte of tag, one byte kept for its length and its body
 * up to end: writes the length there, moving the body up when the length takes more
 * than one byte. Returns the new end. */
static inline uint8_t *mc__pbenc_close(uint8_t *head, uint8_t *end)
{
    size_t len = (size_t)(end - (head + 1));
    if (len < 0x80) {
        *head = (uint8_t)len;
        return end;
    }
    size_t ls = mc__pb_varint_size(len);
    memmove(head + ls, head + 1, len);
    mc__pb_put_varint(head, len);
    return head + ls + len;
}

static inline size_t mc__pbenc_put_u(uint8_t *p, unsigned field, uint64_t v)
{
    if (!v)
        return 0;
    p[0] = MC__PB_TAG(field, MC__PB_VARINT);
    return 1 + mc__pb_put_varint(p + 1, v);
}

static inline size_t mc__pbenc_put_head(uint8_t *p, unsigned field, size_t len)
{
    p[0] = MC__PB_TAG(field, MC__PB_LEN);
    return 1 + mc__pb_put_varint(p + 1, len);
}

static inline size_t mc__pbenc_put_str(uint8_t *p, unsigned field, const char *s)
{
    size_t len = mc__pbenc_str_len(s);
    if (!len)
        return 0;
    size_t n = mc__pbenc_put_head(p, field, len);
    memcpy(p + n, s, len);
    return n + len;
}

static inline size_t mc__pbenc_put_fixed64(uint8_t *p, unsigned field, uint64_t v)
{
    if (!v)
        return 0;
    p[0] = MC__PB_TAG(field, MC__PB_FIXED64);
    for (unsigned i = 0; i < 8; i++)
        p[1 + i] = (uint8_t)(v >> (8 * i));
    return 9;
}

/* Writes r at out (mc__pbenc_items_bound(r) bytes of room); returns the bytes written
 * (protobuf-c's packed size). Each sub-message is written once: its length prefix is
 * filled in after its body (mc__pbenc_close). */
static inline size_t mc__pbenc_items_pack(const mc__pbenc_items *r, uint8_t *out)
{
    uint8_t *p = out;
    p += mc__pbenc_put_u(p, 1, mc__pb_zigzag32(r->status));
    for (size_t i = 0; i < r->n_items; i++) {
        const Mcrpc__ReplicaList *l = r->items[i];
        *p++ = MC__PB_TAG(2, MC__PB_LEN);
        uint8_t *lh = p++;
        p += mc__pbenc_put_u(p, 1, mc__pb_zigzag32(l->status));
        for (size_t j = 0; j < l->n_replicas; j++) {
            const Mcrpc__ReplicaDescriptor *d = l->replicas[j];
            *p++ = MC__PB_TAG(2, MC__PB_LEN);
            uint8_t *dh = p++; /* at most 66 bytes follow: a one-byte length */
            p += mc__pbenc_put_u(p, 1, d->segment);
            p += mc__pbenc_put_u(p, 2, d->address);
            p += mc__pbenc_put_u(p, 3, d->size);
            p += mc__pbenc_put_u(p, 4, mc__pb_int32((int32_t)d->status));
            p += mc__pbenc_put_u(p, 5, d->fence_epoch);
            p += mc__pbenc_put_u(p, 6, mc__pb_int32((int32_t)d->type));
            *dh = (uint8_t)(p - (dh + 1));
        }
        p += mc__pbenc_put_u(p, 3, l->lease_ttl_ms);
        p = mc__pbenc_close(lh, p);
    }
    for (size_t i = 0; i < r->n_segments; i++) {
        const Mcrpc__SegmentRef *s = r->segments[i];
        *p++ = MC__PB_TAG(3, MC__PB_LEN);
        uint8_t *sh = p++;
        if (s->id) {
            *p++ = MC__PB_TAG(1, MC__PB_LEN);
            uint8_t *uh = p++;
            p += mc__pbenc_put_fixed64(p, 1, s->id->first);
            p += mc__pbenc_put_fixed64(p, 2, s->id->second);
            *uh = (uint8_t)(p - (uh + 1));
        }
        p += mc__pbenc_put_str(p, 2, s->transport_endpoint);
        p += mc__pbenc_put_str(p, 3, s->protocol);
        p = mc__pbenc_close(sh, p);
    }
    p += mc__pbenc_put_u(p, 15, (uint64_t)r->view);
    return (size_t)(p - out);
}

/* The shape of a BatchGetReplicaListReply or BatchPutStartReply (m's descriptor says
 * which); false for any other message. */
static inline bool mc__pbenc_items_of(const ProtobufCMessage *m, mc__pbenc_items *r)
{
    if (m->descriptor == &mcrpc__batch_get_replica_list_reply__descriptor) {
        const Mcrpc__BatchGetReplicaListReply *g = (const Mcrpc__BatchGetReplicaListReply *)m;
        *r = (mc__pbenc_items){g->status, g->n_items,    g->items,
                               g->n_segments, g->segments, g->view};
        return true;
    }
    if (m->descriptor == &mcrpc__batch_put_start_reply__descriptor) {
        const Mcrpc__BatchPutStartReply *g = (const Mcrpc__BatchPutStartReply *)m;
        *r = (mc__pbenc_items){g->status, g->n_items,    g->items,
                               g->n_segments, g->segments, g->view};
        return true;
    }
    return false;
}

#endif
