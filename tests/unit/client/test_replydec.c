/* The client's hand-written decoder of the master's batch replies (mc__replydec_unpack,
 * src/client/master_codec.c) against protobuf-c's unpack: random valid messages of the
 * four decoded types, packed by protobuf-c, must be taken by the hand decoder and decode
 * equal both ways (replydec_check.h); random corruptions of them (byte flips, cuts,
 * inserted bytes) and encodings the hand decoder leaves alone (unknown fields, an id
 * given twice, unpacked lists) must never decode differently. The master's hand-written
 * encoder of the same replies (rpc/pbenc.h) must write protobuf-c's bytes for random
 * messages. Deterministic (fixed
 * seed). With MC_REPLYDEC_CORPUS=DIR it also writes a few of the valid bodies there as
 * seeds for fuzz_replydec (first byte: the type's index in replydec_descs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../fuzz/replydec_check.h"
#include "rpc/pbenc.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A value with every varint length: small, mid, extreme. */
static uint64_t rnd_u64(void)
{
    switch (rnd() % 5) {
    case 0:
        return 0;
    case 1:
        return rnd() % 128;
    case 2:
        return rnd() % 100000;
    case 3:
        return UINT64_MAX - rnd() % 3;
    default:
        return rnd();
    }
}

static int32_t rnd_i32(void)
{
    switch (rnd() % 4) {
    case 0:
        return 0;
    case 1:
        return -(int32_t)(rnd() % 1000);
    case 2:
        return (int32_t)(rnd() % 1000);
    default:
        return (int32_t)(uint32_t)rnd();
    }
}

static char *rnd_str(char *buf, size_t cap)
{
    size_t n = rnd() % cap;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)('a' + rnd() % 26);
    buf[n] = 0;
    return buf;
}

#define MAXN 40

/* Storage for one random message (protobuf-c structs pointing into it). */
typedef struct gen {
    Mcrpc__ReplicaList lists[MAXN], *plists[MAXN];
    Mcrpc__ReplicaDescriptor descs[MAXN][3], *pdescs[MAXN][3];
    Mcrpc__SegmentRef segs[MAXN], *psegs[MAXN];
    Mcrpc__Uuid ids[MAXN];
    char strs[MAXN][2][24];
    int32_t codes[MAXN];
    union {
        Mcrpc__BatchGetReplicaListReply get;
        Mcrpc__BatchPutStartReply put;
        Mcrpc__BatchStatusReply st;
        Mcrpc__BatchExistKeyReply ex;
    } m;
} gen;

static void gen_items(gen *g, size_t *n_items, Mcrpc__ReplicaList ***items, size_t *n_segs,
                      Mcrpc__SegmentRef ***segs)
{
    size_t ni = rnd() % MAXN, ns = rnd() % 4;
    for (size_t i = 0; i < ni; i++) {
        Mcrpc__ReplicaList *l = &g->lists[i];
        mcrpc__replica_list__init(l);
        l->status = rnd_i32();
        l->lease_ttl_ms = rnd_u64();
        l->n_replicas = rnd() % 4;
        l->replicas = l->n_replicas ? g->pdescs[i] : NULL;
        for (size_t j = 0; j < l->n_replicas; j++) {
            Mcrpc__ReplicaDescriptor *d = &g->descs[i][j];
            mcrpc__replica_descriptor__init(d);
            d->segment = (uint32_t)rnd_u64();
            d->address = rnd_u64();
            d->size = rnd_u64();
            d->status = (Mcrpc__ReplicaStatus)rnd_i32();
            d->fence_epoch = rnd_u64();
            d->type = (Mcrpc__ReplicaType)(rnd() % 3);
            g->pdescs[i][j] = d;
        }
        g->plists[i] = l;
    }
    for (size_t i = 0; i < ns; i++) {
        Mcrpc__SegmentRef *s = &g->segs[i];
        mcrpc__segment_ref__init(s);
        if (rnd() % 4) {
            mcrpc__uuid__init(&g->ids[i]);
            g->ids[i].first = rnd_u64();
            g->ids[i].second = rnd_u64();
            s->id = &g->ids[i];
        }
        s->transport_endpoint = rnd_str(g->strs[i][0], sizeof g->strs[i][0]);
        s->protocol = rnd_str(g->strs[i][1], sizeof g->strs[i][1]);
        g->psegs[i] = s;
    }
    *n_items = ni;
    *items = ni ? g->plists : NULL;
    *n_segs = ns;
    *segs = ns ? g->psegs : NULL;
}

static void gen_codes(gen *g, size_t *n, int32_t **v)
{
    *n = rnd() % MAXN;
    for (size_t i = 0; i < *n; i++)
        g->codes[i] = rnd_i32();
    *v = *n ? g->codes : NULL;
}

static uint8_t keybytes[MAXN][32];
static ProtobufCBinaryData keys[MAXN];
static Mcrpc__BatchKeysRequest kreq;
static Mcrpc__Uuid kid;
static char kseg[24];

static ProtobufCMessage *gen_keys_request(void)
{
    mcrpc__batch_keys_request__init(&kreq);
    if (rnd() % 4) {
        mcrpc__uuid__init(&kid);
        kid.first = rnd_u64();
        kid.second = rnd_u64();
        kreq.client_id = &kid;
    }
    kreq.n_keys = rnd() % MAXN;
    for (size_t i = 0; i < kreq.n_keys; i++) {
        keys[i].len = rnd() % sizeof keybytes[i];
        for (size_t j = 0; j < keys[i].len; j++)
            keybytes[i][j] = (uint8_t)rnd();
        keys[i].data = keys[i].len ? keybytes[i] : NULL;
    }
    kreq.keys = kreq.n_keys ? keys : NULL;
    kreq.force = rnd() % 2;
    if (rnd() % 2)
        kreq.segment_name = rnd_str(kseg, sizeof kseg);
    return &kreq.base;
}

/* A random message of replydec_descs[which], packed into buf; its length. */
static size_t gen_packed(gen *g, unsigned which, uint8_t *buf, size_t cap)
{
    ProtobufCMessage *m;
    switch (which) {
    case 0:
        mcrpc__batch_get_replica_list_reply__init(&g->m.get);
        gen_items(g, &g->m.get.n_items, &g->m.get.items, &g->m.get.n_segments,
                  &g->m.get.segments);
        g->m.get.status = rnd_i32();
        g->m.get.view = (int64_t)rnd_u64();
        m = &g->m.get.base;
        break;
    case 1:
        mcrpc__batch_put_start_reply__init(&g->m.put);
        gen_items(g, &g->m.put.n_items, &g->m.put.items, &g->m.put.n_segments,
                  &g->m.put.segments);
        g->m.put.status = rnd_i32();
        g->m.put.view = (int64_t)rnd_u64();
        m = &g->m.put.base;
        break;
    case 2:
        mcrpc__batch_status_reply__init(&g->m.st);
        gen_codes(g, &g->m.st.n_statuses, &g->m.st.statuses);
        g->m.st.status = rnd_i32();
        g->m.st.view = (int64_t)rnd_u64();
        m = &g->m.st.base;
        break;
    case 5:
        m = gen_keys_request();
        break;
    default:
        mcrpc__batch_exist_key_reply__init(&g->m.ex);
        gen_codes(g, &g->m.ex.n_results, &g->m.ex.results);
        g->m.ex.status = rnd_i32();
        g->m.ex.view = (int64_t)rnd_u64();
        m = &g->m.ex.base;
        break;
    }
    size_t n = protobuf_c_message_get_packed_size(m);
    assert_true(n <= cap);
    protobuf_c_message_pack(m, buf);
    return n;
}

#define BUFCAP 16384

static void write_seed(const char *dir, unsigned which, unsigned k, const uint8_t *b, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/valid-%u-%u", dir, which, k);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    uint8_t t = (uint8_t)which;
    fwrite(&t, 1, 1, f);
    fwrite(b, 1, n, f);
    fclose(f);
}

/* Valid messages: always taken by the hand decoder, equal to protobuf-c's. */
static void test_valid_messages(void **state)
{
    (void)state;
    static gen g;
    static uint8_t buf[BUFCAP];
    const char *corpus = getenv("MC_REPLYDEC_CORPUS");
    for (unsigned it = 0; it < 2500; it++) {
        unsigned which = it % 5 == 4 ? 5 : it % 5;
        size_t n = gen_packed(&g, which, buf, sizeof buf);
        int rc = replydec_check(replydec_descs[which], buf, n);
        if (rc != 1)
            fail_msg("iteration %u (type %u, %zu bytes): check %d", it, which, n, rc);
        if (corpus && it < 40)
            write_seed(corpus, which, it, buf, n);
    }
}

/* The master's hand-written encoder (rpc/pbenc.h) writes protobuf-c's bytes. */
static void test_encoder_matches_protobuf_c(void **state)
{
    (void)state;
    static gen g;
    static uint8_t buf[BUFCAP], mine[BUFCAP];
    for (unsigned it = 0; it < 2000; it++) {
        unsigned which = it % 2; /* the two replica-list replies */
        size_t n = gen_packed(&g, which, buf, sizeof buf);
        const ProtobufCMessage *m = which ? &g.m.put.base : &g.m.get.base;
        mc__pbenc_items r = {0};
        assert_true(mc__pbenc_items_of(m, &r));
        assert_true(mc__pbenc_items_ok(m, &r));
        assert_true(mc__pbenc_items_bound(&r) >= n);
        assert_true(mc__pbenc_items_bound(&r) <= sizeof mine);
        memset(mine, 0xa5, sizeof mine);
        assert_int_equal(mc__pbenc_items_pack(&r, mine), n);
        if (memcmp(mine, buf, n))
            fail_msg("iteration %u (type %u, %zu bytes): the encodings differ", it, which, n);
    }
    /* other messages are left to protobuf-c */
    mcrpc__batch_status_reply__init(&g.m.st);
    mc__pbenc_items r = {0};
    assert_false(mc__pbenc_items_of(&g.m.st.base, &r));
}

/* Corrupted messages: whatever the hand decoder takes, protobuf-c reads the same. */
static void test_corrupted_messages(void **state)
{
    (void)state;
    static gen g;
    static uint8_t buf[BUFCAP + 16];
    unsigned taken = 0, left = 0;
    for (unsigned it = 0; it < 7500; it++) {
        unsigned which = it % 5 == 4 ? 5 : it % 5;
        size_t n = gen_packed(&g, which, buf, BUFCAP);
        switch (rnd() % 4) {
        case 0: /* flip one to three bytes */
            for (unsigned k = 0, m = 1 + rnd() % 3; n && k < m; k++)
                buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
            break;
        case 1: /* cut */
            n = n ? rnd() % n : 0;
            break;
        case 2: /* a random byte written somewhere */
            if (n)
                buf[rnd() % n] = (uint8_t)rnd();
            break;
        default: { /* bytes inserted */
            size_t at = n ? rnd() % n : 0, k = 1 + rnd() % 4;
            memmove(buf + at + k, buf + at, n - at);
            for (size_t i = 0; i < k; i++)
                buf[at + i] = (uint8_t)rnd();
            n += k;
            break;
        }
        }
        int rc = replydec_check(replydec_descs[which], buf, n);
        if (rc < 0)
            fail_msg("corruption %u (type %u, %zu bytes): the decoders disagree", it, which, n);
        if (rc)
            taken++;
        else
            left++;
    }
    /* both outcomes were exercised */
    assert_true(taken > 0);
    assert_true(left > 0);
}

/* protobuf-c reads body as a desc. */
static bool slow_ok(const ProtobufCMessageDescriptor *desc, const uint8_t *body, size_t n)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, n, body);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    return m != NULL;
}

/* Encodings protobuf-c reads that the hand decoder leaves to it (rc 0), and bodies that
 * it takes with last-wins scalars (rc 1). */
static void test_left_to_protobuf_c(void **state)
{
    (void)state;
    const ProtobufCMessageDescriptor *get = replydec_descs[0], *st = replydec_descs[2];
    /* an unknown field (field 4, varint) */
    static const uint8_t unknown[] = {0x08, 0x02, 0x20, 0x01};
    assert_true(slow_ok(get, unknown, sizeof unknown));
    assert_int_equal(replydec_check(get, unknown, sizeof unknown), 0);
    /* a segment whose id is given twice (protobuf-c merges the two) */
    static const uint8_t twice[] = {0x1a, 0x0d, 0x0a, 0x09, 0x09, 1, 0, 0, 0, 0, 0, 0, 0,
                                    0x0a, 0x00};
    assert_true(slow_ok(get, twice, sizeof twice));
    assert_int_equal(replydec_check(get, twice, sizeof twice), 0);
    /* statuses unpacked (one varint per tag) */
    static const uint8_t unpacked[] = {0x10, 0x02, 0x10, 0x04};
    assert_true(slow_ok(st, unpacked, sizeof unpacked));
    assert_int_equal(replydec_check(st, unpacked, sizeof unpacked), 0);
    /* a two-byte tag for field 1 */
    static const uint8_t longtag[] = {0x88, 0x00, 0x02};
    assert_true(slow_ok(get, longtag, sizeof longtag));
    assert_int_equal(replydec_check(get, longtag, sizeof longtag), 0);
    /* a request whose force is a two-byte varint */
    static const uint8_t force2[] = {0x18, 0x81, 0x00};
    assert_true(slow_ok(replydec_descs[5], force2, sizeof force2));
    assert_int_equal(replydec_check(replydec_descs[5], force2, sizeof force2), 0);
    /* another message type is never decoded by hand */
    static const uint8_t plain[] = {0x08, 0x02};
    assert_int_equal(replydec_check(replydec_descs[4], plain, sizeof plain), 0);
    /* status given twice: the last counts, both ways */
    static const uint8_t last[] = {0x08, 0x02, 0x08, 0x05, 0x78, 0x07};
    assert_int_equal(replydec_check(get, last, sizeof last), 1);
    /* an empty body is an empty message, both ways */
    assert_int_equal(replydec_check(get, NULL, 0), 1);
    assert_int_equal(replydec_check(st, NULL, 0), 1);
}

/* The arena's limit: a body the limit cannot hold is not decoded by hand. */
static void test_arena_limit(void **state)
{
    (void)state;
    static gen g;
    static uint8_t buf[BUFCAP];
    size_t n;
    do
        n = gen_packed(&g, 0, buf, sizeof buf);
    while (g.m.get.n_items < 8);
    mc__arena ar = {0};
    ar.limit = 64;
    assert_null(mc__replydec_unpack(replydec_descs[0], &ar, n, buf));
    mc__arena_destroy(&ar);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_messages),
        cmocka_unit_test(test_encoder_matches_protobuf_c),
        cmocka_unit_test(test_corrupted_messages),
        cmocka_unit_test(test_left_to_protobuf_c),
        cmocka_unit_test(test_arena_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
