/* disk/record.c: the record header (internal.h "record format") and its checksums.
 * XXH3-64 (libxxhash's 64-bit xxhash; faster than the classic XXH64 on long values,
 * which matters at 1 MiB per record) over key || value; the header's own sum covers
 * every field but the magic, plus the key. */
#include <errno.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "disk/internal.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the record format is little-endian");

static void put16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint16_t get16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void layout(const mc__rec_hdr *h, unsigned char *p, uint32_t hdr_sum)
{
    put32(p + 0, h->magic);
    put16(p + 4, h->version);
    put16(p + 6, h->flags);
    put32(p + 8, h->key_len);
    put32(p + 12, hdr_sum);
    put64(p + 16, h->value_len);
    put64(p + 24, h->seq);
    put64(p + 32, h->checksum);
    put64(p + 40, 0);
}

static uint32_t hdr_sum(const mc__rec_hdr *h, const void *key)
{
    unsigned char tmp[MC__REC_HDR];
    layout(h, tmp, 0);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, tmp + 4, MC__REC_HDR - 4);
    XXH3_64bits_update(&st, key, h->key_len);
    return (uint32_t)XXH3_64bits_digest(&st);
}

void mc__rec_encode(mc__rec_hdr *h, const void *key, void *out)
{
    h->hdr_sum = hdr_sum(h, key);
    layout(h, out, h->hdr_sum);
}

int mc__rec_decode(const void *in, mc__rec_hdr *h, uint64_t max_value)
{
    const unsigned char *p = in;
    h->magic = get32(p + 0);
    h->version = get16(p + 4);
    h->flags = get16(p + 6);
    h->key_len = get32(p + 8);
    h->hdr_sum = get32(p + 12);
    h->value_len = get64(p + 16);
    h->seq = get64(p + 24);
    h->checksum = get64(p + 32);
    if (h->magic != MC__REC_LIVE && h->magic != MC__REC_DEAD)
        return -EBADMSG;
    if (h->version != MC__REC_VERSION || h->flags != 0 || get64(p + 40) != 0)
        return -EBADMSG;
    if (h->key_len == 0 || h->key_len > MC_DISK_MAX_KEY_LEN || h->value_len > max_value)
        return -EBADMSG;
    return 0;
}

bool mc__rec_hdr_ok(const mc__rec_hdr *h, const void *key)
{
    return hdr_sum(h, key) == h->hdr_sum;
}

uint64_t mc__rec_checksum(const void *key, size_t klen, const void *value, uint64_t vlen)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, key, klen);
    if (vlen)
        XXH3_64bits_update(&st, value, (size_t)vlen);
    return XXH3_64bits_digest(&st);
}
