/* rpc/pbwire.h: readers of the protobuf wire format (varints, length prefixes, fixed64),
 * header-only, for the hand-written decoders of the hot batch messages
 * (src/client/master_replydec.c). Each reader takes a cursor *pp below end, advances
 * it past what it read and returns true, or returns false (and leaves *pp alone) where
 * protobuf-c 1.4's unpack could refuse or read the bytes differently; a hand decoder
 * then hands the whole body to protobuf-c instead, so its results never differ from
 * protobuf_c_message_unpack's (which it must equal field for field: fuzz_replydec).
 * Values are read as protobuf-c reads them: a uint32 / int32 / enum is the varint's low
 * 32 bits, a sint32 its low 32 bits un-zigzagged, a varint is at most 10 bytes, a length
 * prefix at most 5 bytes and at most INT_MAX. The writers (mc__pb_put_*) write what
 * protobuf-c's pack writes for the same value (the master's hand-written encoders of its
 * hot batch replies, src/master/rpc_handler.c, are byte-identical to protobuf-c's).
 * No allocation, no I/O; any thread. */
#ifndef MOONCAKE_RPC_PBWIRE_H
#define MOONCAKE_RPC_PBWIRE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Tag bytes of the one-byte tags (field number <= 15) the decoders accept. */
#define MC__PB_TAG(field, wire) ((uint8_t)(((field) << 3) | (wire)))
#define MC__PB_VARINT 0
#define MC__PB_FIXED64 1
#define MC__PB_LEN 2

/* A varint of at most 10 bytes: its low 64 bits. */
static inline bool mc__pb_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *out = *p;
        *pp = p + 1;
        return true;
    }
    uint64_t v = 0;
    if (end - p >= 10) { /* no bound to check per byte */
        for (unsigned shift = 0; shift < 70; shift += 7) {
            uint8_t b = *p++;
            v |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80)) {
                *out = v;
                *pp = p;
                return true;
            }
        }
        return false;
    }
    for (unsigned i = 0, shift = 0; i < 10 && p < end; i++, shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            *pp = p;
            return true;
        }
    }
    return false;
}

/* Skips a varint (as mc__pb_varint reads it). */
static inline bool mc__pb_skip_varint(const uint8_t **pp, const uint8_t *end)
{
    const uint8_t *p = *pp;
    for (unsigned i = 0; i < 10 && p < end; i++)
        if (!(*p++ & 0x80)) {
            *pp = p;
            return true;
        }
    return false;
}

/* A length prefix (at most 5 bytes, at most INT_MAX) whose bytes all lie before end:
 * *pp is left at the first byte of the field's data, *len its length. */
static inline bool mc__pb_len(const uint8_t **pp, const uint8_t *end, size_t *len)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { /* the common one-byte prefix */
        if (*p > end - p - 1)
            return false;
        *len = *p;
        *pp = p + 1;
        return true;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < 5 && p < end; i++) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (v > INT_MAX || v > (uint64_t)(end - p))
                return false;
            *len = (size_t)v;
            *pp = p;
            return true;
        }
    }
    return false;
}

/* Eight little-endian bytes (fixed64). */
static inline bool mc__pb_fixed64(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (end - p < 8)
        return false;
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    *out = v;
    *pp = p + 8;
    return true;
}

static inline int32_t mc__pb_sint32(uint64_t v)
{
    uint32_t u = (uint32_t)v;
    return (int32_t)((u >> 1) ^ (0u - (u & 1u)));
}

/* Bytes of v as a varint (1..10). */
static inline size_t mc__pb_varint_size(uint64_t v)
{
    /* 7 bits a byte: (bit width * 9 + 64) / 64 = ceil(bit width / 7), 1 for 0 */
    unsigned bits = 64u - (unsigned)__builtin_clzll(v | 1);
    return (bits * 9u + 64u) / 64u;
}

/* Writes v as a varint at p; returns the bytes written. */
static inline size_t mc__pb_put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* A sint32 as protobuf-c zigzags it; an int32 / enum as it widens it (a negative one
 * takes 10 bytes). */
static inline uint64_t mc__pb_zigzag32(int32_t v)
{
    return ((uint32_t)v << 1) ^ (0u - ((uint32_t)v >> 31));
}

static inline uint64_t mc__pb_int32(int32_t v)
{
    return (uint64_t)(int64_t)v;
}

#endif
