/* wire.c: see wire.h. */
#include "transfer/wire.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/transfer_engine.h"
#include "net/frame.h"

uint64_t mc__te_notify_max_body(void)
{
    return 4 + MC_TE_MAX_NOTIFY_NAME + MC_TE_MAX_NOTIFY_MSG;
}

void mc__te_req_encode(const mc__te_req *r, uint8_t out[MC_TE_REQ_SIZE])
{
    mc_put_le32(out, MC_TE_REQ_MAGIC);
    out[4] = MC_TE_WIRE_VERSION;
    out[5] = r->op;
    mc_put_le16(out + 6, 0);
    mc_put_le64(out + 8, r->id);
    mc_put_le64(out + 16, r->addr);
    mc_put_le64(out + 24, r->len);
    mc_put_le64(out + 32, r->epoch);
}

int mc__te_req_prefix(const uint8_t in[MC_TE_REQ_PREFIX], unsigned *version, uint64_t *id)
{
    if (mc_get_le32(in) != MC_TE_REQ_MAGIC)
        return -EPROTO;
    if (in[4] == MC_TE_WIRE_VERSION)
        return 0;
    *version = in[4];
    *id = mc_get_le64(in + 8);
    return -EPROTONOSUPPORT;
}

int mc__te_req_decode(const uint8_t in[MC_TE_REQ_SIZE], mc__te_req *r)
{
    if (mc_get_le32(in) != MC_TE_REQ_MAGIC || mc_get_le16(in + 6) != 0)
        return -EPROTO;
    if (in[4] != MC_TE_WIRE_VERSION)
        return -EPROTONOSUPPORT;
    r->op = in[5];
    r->id = mc_get_le64(in + 8);
    r->addr = mc_get_le64(in + 16);
    r->len = mc_get_le64(in + 24);
    r->epoch = mc_get_le64(in + 32);
    if (r->epoch && r->op != MC_TE_WOP_WRITE)
        return -EBADMSG;
    switch (r->op) {
    case MC_TE_WOP_HELLO:
        return 0;
    case MC_TE_WOP_WRITE:
    case MC_TE_WOP_READ:
        return r->len > MC_TE_MAX_WIRE_LEN ? -EMSGSIZE : 0;
    case MC_TE_WOP_NOTIFY:
        return r->len < 4 || r->len > mc__te_notify_max_body() ? -EMSGSIZE : 0;
    case MC_TE_WOP_PING:
        return r->len != 0 ? -EMSGSIZE : 0;
    default:
        return -EBADMSG;
    }
}

void mc__te_rep_encode(const mc__te_rep *r, uint8_t out[MC_TE_REP_SIZE])
{
    mc_put_le32(out, MC_TE_REP_MAGIC);
    mc_put_le32(out + 4, (uint32_t)r->status);
    mc_put_le64(out + 8, r->id);
    mc_put_le64(out + 16, r->len);
}

int mc__te_rep_decode(const uint8_t in[MC_TE_REP_SIZE], uint64_t id, uint8_t op,
                      uint64_t req_len, mc__te_rep *r)
{
    if (mc_get_le32(in) != MC_TE_REP_MAGIC)
        return -EPROTO;
    r->status = (int32_t)mc_get_le32(in + 4);
    r->id = mc_get_le64(in + 8);
    r->len = mc_get_le64(in + 16);
    if (r->id != id || r->status > 0)
        return -EPROTO;
    if (op != MC_TE_WOP_HELLO && r->len != (op == MC_TE_WOP_READ ? req_len : 0))
        return -EPROTO;
    return 0;
}

size_t mc__te_notify_body_size(size_t name_len, size_t msg_len)
{
    return 4 + name_len + msg_len;
}

void mc__te_notify_encode(uint8_t *out, const char *name, size_t name_len, const void *msg,
                          size_t msg_len)
{
    mc_put_le32(out, (uint32_t)name_len);
    if (name_len)
        memcpy(out + 4, name, name_len);
    if (msg_len)
        memcpy(out + 4 + name_len, msg, msg_len);
}

int mc__te_notify_decode(const uint8_t *body, size_t len, const char **name,
                         size_t *name_len, const uint8_t **msg, size_t *msg_len)
{
    if (len < 4)
        return -EBADMSG;
    uint32_t nl = mc_get_le32(body);
    if (nl > MC_TE_MAX_NOTIFY_NAME || nl > len - 4)
        return -EBADMSG;
    if (nl && memchr(body + 4, '\0', nl))
        return -EBADMSG;
    size_t ml = len - 4 - nl;
    if (ml > MC_TE_MAX_NOTIFY_MSG)
        return -EBADMSG;
    *name = (const char *)body + 4;
    *name_len = nl;
    *msg = body + 4 + nl;
    *msg_len = ml;
    return 0;
}

long long mc__te_hs_parse(const uint8_t *buf, size_t len, uint64_t max_len,
                          mc__te_hs_frame *f)
{
    if (len < 8)
        return 0;
    uint64_t flen = mc_get_le64(buf);
    if (flen == 0)
        return -EPROTO;
    if (flen > max_len || flen > MC_TE_HS_LIMIT)
        return -EMSGSIZE;
    if (len - 8 < flen)
        return 0;
    f->type = buf[8];
    f->payload = buf + MC_TE_HS_PREFIX;
    f->payload_len = (size_t)flen - 1;
    return (long long)(8 + flen);
}

void mc__te_hs_encode_prefix(uint8_t out[MC_TE_HS_PREFIX], uint8_t type, size_t payload_len)
{
    mc_put_le64(out, (uint64_t)payload_len + 1);
    out[8] = type;
}

int mc__te_hs_notify_decode(const uint8_t *json, size_t len, char **name, char **msg,
                            size_t *msg_len)
{
    json_error_t jerr;
    json_t *root = json_loadb((const char *)json, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root)
        return -EBADMSG;
    int rc = -EBADMSG;
    json_t *jn = json_object_get(root, "name");
    json_t *jm = json_object_get(root, "notify_msg");
    if (!jm)
        jm = json_object_get(root, "msg");
    if (!json_is_object(root) || !json_is_string(jn) || (jm && !json_is_string(jm)))
        goto out;
    size_t nl = json_string_length(jn);
    const char *ns = json_string_value(jn);
    if (nl > MC_TE_MAX_NOTIFY_NAME || memchr(ns, '\0', nl))
        goto out;
    size_t ml = jm ? json_string_length(jm) : 0;
    if (ml > MC_TE_MAX_NOTIFY_MSG)
        goto out;
    *name = malloc(nl + 1);
    *msg = malloc(ml + 1);
    if (!*name || !*msg)
        abort();
    memcpy(*name, ns, nl + 1);
    if (ml)
        memcpy(*msg, json_string_value(jm), ml);
    (*msg)[ml] = '\0';
    *msg_len = ml;
    rc = 0;
out:
    json_decref(root);
    return rc;
}
