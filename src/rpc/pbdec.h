/* rpc/pbdec.h: hand-written decoding of the master's hot batch request
 * (BatchKeysRequest: batch get, exist, end, revoke, remove, replica clear), header-only,
 * into the same protobuf-c structs protobuf_c_message_unpack builds, allocated from an
 * arena (issue 17: protobuf-c's generic unpack was 42% of the master's batch_is_exist
 * handler). Same contract as the client's reply decoders (mc__replydec_unpack,
 * src/client/master_codec.c; readers in rpc/pbwire.h): NULL for anything but the
 * encoding protobuf-c writes (one-byte tags of known fields, the client id once, force
 * as a one-byte varint) or when the arena's limit is reached, and the caller then resets
 * the arena and decodes with protobuf-c; whenever it returns a message, protobuf-c
 * returns an equal one (tests/unit/client/test_replydec.c). No I/O; any thread. */
#ifndef MOONCAKE_RPC_PBDEC_H
#define MOONCAKE_RPC_PBDEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "master.pb-c.h"
#include "rpc/arena.h"
#include "rpc/pbwire.h"

/* A Uuid's bytes [p, end) into u. */
static inline bool mc__pbdec_uuid(const uint8_t *p, const uint8_t *end, Mcrpc__Uuid *u)
{
    static const Mcrpc__Uuid init = MCRPC__UUID__INIT;
    *u = init;
    while (p < end) {
        uint8_t t = *p++;
        if (t == MC__PB_TAG(1, MC__PB_FIXED64)) {
            if (!mc__pb_fixed64(&p, end, &u->first))
                return false;
        } else if (t == MC__PB_TAG(2, MC__PB_FIXED64)) {
            if (!mc__pb_fixed64(&p, end, &u->second))
                return false;
        } else {
            return false;
        }
    }
    return true;
}

/* A length-delimited field at *pp copied into a, NUL-terminated (protobuf-c's string). */
static inline bool mc__pbdec_string(mc__arena *a, const uint8_t **pp, const uint8_t *end,
                                    char **out)
{
    size_t n;
    if (!mc__pb_len(pp, end, &n))
        return false;
    char *s = mc__arena_alloc(a, n + 1);
    if (!s)
        return false;
    memcpy(s, *pp, n);
    s[n] = 0;
    *pp += n;
    *out = s;
    return true;
}

static inline Mcrpc__BatchKeysRequest *mc__pbdec_batch_keys(mc__arena *a, size_t len,
                                                            const uint8_t *body)
{
    if (len && !body)
        return NULL;
    const uint8_t *p = body, *end = body + len;
    size_t nk = 0;
    for (const uint8_t *q = p; q < end;) {
        uint8_t t = *q++;
        size_t n;
        if (t == MC__PB_TAG(1, MC__PB_LEN) || t == MC__PB_TAG(2, MC__PB_LEN) ||
            t == MC__PB_TAG(4, MC__PB_LEN)) {
            if (!mc__pb_len(&q, end, &n))
                return NULL;
            q += n;
            nk += t == MC__PB_TAG(2, MC__PB_LEN);
        } else if (t == MC__PB_TAG(3, MC__PB_VARINT)) {
            if (q >= end || *q++ >= 0x80) /* a bool of more bytes: left to protobuf-c */
                return NULL;
        } else {
            return NULL;
        }
    }
    static const Mcrpc__BatchKeysRequest init = MCRPC__BATCH_KEYS_REQUEST__INIT;
    Mcrpc__BatchKeysRequest *r = mc__arena_alloc(a, sizeof *r);
    if (!r)
        return NULL;
    *r = init;
    if (nk) {
        if (nk > SIZE_MAX / 2 / sizeof *r->keys)
            return NULL;
        r->keys = mc__arena_alloc(a, nk * sizeof *r->keys);
        if (!r->keys)
            return NULL;
    }
    while (p < end) {
        uint8_t t = *p++;
        size_t n;
        if (t == MC__PB_TAG(3, MC__PB_VARINT)) {
            r->force = *p++ != 0;
        } else if (t == MC__PB_TAG(4, MC__PB_LEN)) {
            if (!mc__pbdec_string(a, &p, end, &r->segment_name))
                return NULL;
        } else {
            if (!mc__pb_len(&p, end, &n))
                return NULL;
            if (t == MC__PB_TAG(2, MC__PB_LEN)) {
                ProtobufCBinaryData *k = &r->keys[r->n_keys++];
                k->len = n;
                k->data = NULL;
                if (n) {
                    k->data = mc__arena_alloc(a, n);
                    if (!k->data)
                        return NULL;
                    memcpy(k->data, p, n);
                }
            } else { /* the client id, once (protobuf-c merges a second one) */
                if (r->client_id)
                    return NULL;
                Mcrpc__Uuid *u = mc__arena_alloc(a, sizeof *u);
                if (!u || !mc__pbdec_uuid(p, p + n, u))
                    return NULL;
                r->client_id = u;
            }
            p += n;
        }
    }
    return r;
}

#endif
