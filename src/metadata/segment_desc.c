/* segment_desc.c: segment descriptor and rpc_meta JSON (jansson), and the host id.
 * Wire format as upstream encodeSegmentDesc/decodeSegmentDesc for protocol "tcp"
 * (transfer_metadata.cpp) and addRpcMetaEntry; mooncake-c adds host_id, shm_socket and
 * per-buffer shm, which upstream ignores. Decoding is stricter than upstream: every field
 * is type-checked and bounded before anything is kept (the JSON comes from peers). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/xalloc.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

static int bad(int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int bad(int code, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

void mc_segment_desc_init(mc_segment_desc *desc)
{
    memset(desc, 0, sizeof *desc);
    desc->tcp_proto_version = 2;
}

void mc_segment_desc_deinit(mc_segment_desc *desc)
{
    if (!desc)
        return;
    free(desc->name);
    free(desc->protocol);
    free(desc->timestamp);
    free(desc->host_id);
    free(desc->shm_socket);
    for (size_t i = 0; i < desc->n_buffers; i++)
        free(desc->buffers[i].name);
    free(desc->buffers);
    mc_segment_desc_init(desc);
}

int mc_segment_desc_set(char **field, const char *value)
{
    if (!field)
        return MC_INVALID_PARAMS;
    char *v = value ? mc_xstrdup(value) : NULL;
    free(*field);
    *field = v;
    return MC_OK;
}

static bool range_ok(uint64_t addr, uint64_t length)
{
    return addr > 0 && length > 0 && addr <= (uint64_t)MC_SEGMENT_MAX_ADDR &&
           length <= (uint64_t)MC_SEGMENT_MAX_ADDR - addr;
}

int mc_segment_desc_add_buffer(mc_segment_desc *desc, const char *name, uint64_t addr,
                               uint64_t length, bool shm)
{
    if (!desc || !name || !*name || strnlen(name, MC_SEGMENT_MAX_NAME + 1) > MC_SEGMENT_MAX_NAME ||
        !range_ok(addr, length))
        return MC_INVALID_PARAMS;
    if (desc->n_buffers >= MC_SEGMENT_MAX_BUFFERS)
        return MC_BUFFER_OVERFLOW;
    mc_buffer_desc *b = mc_xrealloc(desc->buffers, (desc->n_buffers + 1) * sizeof *b);
    desc->buffers = b;
    b[desc->n_buffers] = (mc_buffer_desc){
        .name = mc_xstrdup(name), .addr = addr, .length = length, .shm = shm};
    desc->n_buffers++;
    return MC_OK;
}

int mc_segment_desc_remove_buffer(mc_segment_desc *desc, uint64_t addr)
{
    if (!desc)
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < desc->n_buffers; i++) {
        if (desc->buffers[i].addr != addr)
            continue;
        free(desc->buffers[i].name);
        memmove(&desc->buffers[i], &desc->buffers[i + 1],
                (desc->n_buffers - i - 1) * sizeof desc->buffers[0]);
        desc->n_buffers--;
        return MC_OK;
    }
    return MC_OBJECT_NOT_FOUND;
}

/* upstream getCurrentDateTime: local time "YYYY-mm-dd HH:MM:SS.uuuuuu". */
static void now_string(char *buf, size_t n)
{
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, n, "%s.%06ld", base, (long)tv.tv_usec);
}

static bool str_within(const char *s, size_t max)
{
    return !s || strnlen(s, max + 1) <= max;
}

static int dump(json_t *root, char **json, size_t *len)
{
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        mc_oom(0); /* only fails on OOM for the values we build */
    *json = s;
    if (len)
        *len = strlen(s);
    return MC_OK;
}

int mc_segment_desc_encode(const mc_segment_desc *desc, char **json, size_t *len)
{
    if (!desc || !json || !desc->name || !*desc->name || !desc->protocol ||
        !str_within(desc->name, MC_SEGMENT_MAX_NAME) ||
        !str_within(desc->protocol, MC_SEGMENT_MAX_NAME) ||
        !str_within(desc->timestamp, MC_SEGMENT_MAX_NAME) ||
        !str_within(desc->host_id, MC_SEGMENT_MAX_HOST_ID) ||
        !str_within(desc->shm_socket, MC_SEGMENT_MAX_SHM_SOCKET) ||
        desc->tcp_proto_version < 1 || desc->tcp_proto_version > 255 ||
        desc->n_buffers > MC_SEGMENT_MAX_BUFFERS || (desc->n_buffers && !desc->buffers))
        return MC_INVALID_PARAMS;
    for (size_t i = 0; i < desc->n_buffers; i++) {
        const mc_buffer_desc *b = &desc->buffers[i];
        if (!b->name || !*b->name || !str_within(b->name, MC_SEGMENT_MAX_NAME) ||
            !range_ok(b->addr, b->length))
            return MC_INVALID_PARAMS;
    }
    /* JSON strings must be UTF-8: json_string() returns NULL otherwise. */
    char ts[64];
    const char *stamp = desc->timestamp;
    if (!stamp || !*stamp) {
        now_string(ts, sizeof ts);
        stamp = ts;
    }
    json_t *root = json_object();
    json_t *v;
#define SET(key, val)                                                                      \
    do {                                                                                   \
        v = (val);                                                                         \
        if (!v || json_object_set_new(root, key, v) != 0)                                  \
            goto invalid;                                                                  \
    } while (0)
    SET("name", json_string(desc->name));
    SET("protocol", json_string(desc->protocol));
    SET("tcp_data_port", json_integer(desc->tcp_data_port));
    SET("tcp_proto_version", json_integer(desc->tcp_proto_version));
    SET("timestamp", json_string(stamp));
    if (desc->host_id && *desc->host_id)
        SET("host_id", json_string(desc->host_id));
    if (desc->shm_socket && *desc->shm_socket)
        SET("shm_socket", json_string(desc->shm_socket));
    json_t *arr = json_array();
    if (json_object_set_new(root, "buffers", arr) != 0)
        goto invalid;
    for (size_t i = 0; i < desc->n_buffers; i++) {
        const mc_buffer_desc *b = &desc->buffers[i];
        json_t *o = json_object();
        json_array_append_new(arr, o);
        json_t *name = json_string(b->name);
        if (!name)
            goto invalid;
        json_object_set_new(o, "name", name);
        json_object_set_new(o, "addr", json_integer((json_int_t)b->addr));
        json_object_set_new(o, "length", json_integer((json_int_t)b->length));
        if (b->shm)
            json_object_set_new(o, "shm", json_true());
    }
#undef SET
    return dump(root, json, len);
invalid:
    json_decref(root);
    return MC_INVALID_PARAMS;
}

/* Reads an optional string field within max bytes into *out (new copy). */
static int get_str(json_t *obj, const char *key, size_t max, bool required, bool nonempty,
                   char **out, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return bad(MC_DESERIALIZE_FAIL, err, errlen, "missing field '%s'", key);
        return MC_OK;
    }
    if (!json_is_string(v))
        return bad(MC_DESERIALIZE_FAIL, err, errlen, "field '%s' is not a string", key);
    size_t n = json_string_length(v);
    if (n > max)
        return bad(MC_DESERIALIZE_FAIL, err, errlen, "field '%s' longer than %zu bytes", key,
                   max);
    if (nonempty && n == 0)
        return bad(MC_DESERIALIZE_FAIL, err, errlen, "field '%s' is empty", key);
    *out = mc_xstrdup(json_string_value(v));
    return MC_OK;
}

static int get_int(json_t *obj, const char *key, json_int_t lo, json_int_t hi, json_int_t def,
                   bool required, json_int_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return bad(MC_DESERIALIZE_FAIL, err, errlen, "missing field '%s'", key);
        *out = def;
        return MC_OK;
    }
    if (!json_is_integer(v))
        return bad(MC_DESERIALIZE_FAIL, err, errlen, "field '%s' is not an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return bad(MC_DESERIALIZE_FAIL, err, errlen, "field '%s' = %lld out of range [%lld, %lld]",
                   key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return MC_OK;
}

static json_t *load(const char *json, size_t len, size_t max, int *rc, char *err, size_t errlen)
{
    if (!json) {
        *rc = bad(MC_DESERIALIZE_FAIL, err, errlen, "no input");
        return NULL;
    }
    if (len > max) {
        *rc = bad(MC_BUFFER_OVERFLOW, err, errlen, "descriptor of %zu bytes exceeds %zu", len,
                  max);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        *rc = bad(MC_DESERIALIZE_FAIL, err, errlen, "bad JSON at byte %d: %s", je.position,
                  je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        *rc = bad(MC_DESERIALIZE_FAIL, err, errlen, "top level is not an object");
        return NULL;
    }
    return root;
}

static int decode_buffers(json_t *arr, mc_segment_desc *d, char *err, size_t errlen)
{
    if (!json_is_array(arr))
        return bad(MC_DESERIALIZE_FAIL, err, errlen, "field 'buffers' is not an array");
    size_t n = json_array_size(arr);
    if (n > MC_SEGMENT_MAX_BUFFERS)
        return bad(MC_DESERIALIZE_FAIL, err, errlen, "%zu buffers exceed the limit of %d", n,
                   MC_SEGMENT_MAX_BUFFERS);
    if (n == 0)
        return MC_OK;
    d->buffers = mc_xcalloc(n, sizeof *d->buffers);
    d->n_buffers = n; /* names start NULL, so deinit frees exactly what was kept */
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        char where[64];
        if (!json_is_object(o))
            return bad(MC_DESERIALIZE_FAIL, err, errlen, "buffers[%zu] is not an object", i);
        mc_buffer_desc *b = &d->buffers[i];
        int rc = get_str(o, "name", MC_SEGMENT_MAX_NAME, true, true, &b->name, err, errlen);
        json_int_t addr, length;
        if (rc == MC_OK)
            rc = get_int(o, "addr", 1, INT64_MAX, 0, true, &addr, err, errlen);
        if (rc == MC_OK)
            rc = get_int(o, "length", 1, INT64_MAX, 0, true, &length, err, errlen);
        if (rc != MC_OK) {
            snprintf(where, sizeof where, " (buffers[%zu])", i);
            if (err && strlen(err) + strlen(where) < errlen)
                strcat(err, where);
            return rc;
        }
        if (!range_ok((uint64_t)addr, (uint64_t)length))
            return bad(MC_DESERIALIZE_FAIL, err, errlen,
                       "buffers[%zu]: addr %lld + length %lld overflows", i, (long long)addr,
                       (long long)length);
        b->addr = (uint64_t)addr;
        b->length = (uint64_t)length;
        json_t *shm = json_object_get(o, "shm");
        if (shm && !json_is_boolean(shm))
            return bad(MC_DESERIALIZE_FAIL, err, errlen, "buffers[%zu]: 'shm' is not a bool",
                       i);
        b->shm = shm && json_is_true(shm);
    }
    return MC_OK;
}

int mc_segment_desc_decode(const char *json, size_t len, mc_segment_desc *out, char *err,
                           size_t errlen)
{
    if (!out)
        return MC_INVALID_PARAMS;
    mc_segment_desc_init(out);
    if (err && errlen)
        err[0] = '\0';
    int rc = MC_OK;
    json_t *root = load(json, len, MC_SEGMENT_MAX_JSON, &rc, err, errlen);
    if (!root)
        return rc;
    mc_segment_desc d;
    mc_segment_desc_init(&d);
    json_int_t port = 0, ver = 1;
    rc = get_str(root, "name", MC_SEGMENT_MAX_NAME, true, true, &d.name, err, errlen);
    if (rc == MC_OK)
        rc = get_str(root, "protocol", MC_SEGMENT_MAX_NAME, true, false, &d.protocol, err,
                     errlen);
    if (rc == MC_OK)
        rc = get_int(root, "tcp_data_port", 0, 65535, 0, false, &port, err, errlen);
    if (rc == MC_OK)
        rc = get_int(root, "tcp_proto_version", 1, 255, 1, false, &ver, err, errlen);
    if (rc == MC_OK)
        rc = get_str(root, "timestamp", MC_SEGMENT_MAX_NAME, false, false, &d.timestamp, err,
                     errlen);
    if (rc == MC_OK)
        rc = get_str(root, "host_id", MC_SEGMENT_MAX_HOST_ID, false, false, &d.host_id, err,
                     errlen);
    if (rc == MC_OK)
        rc = get_str(root, "shm_socket", MC_SEGMENT_MAX_SHM_SOCKET, false, false,
                     &d.shm_socket, err, errlen);
    if (rc == MC_OK) {
        json_t *arr = json_object_get(root, "buffers");
        if (arr)
            rc = decode_buffers(arr, &d, err, errlen);
    }
    json_decref(root);
    if (rc != MC_OK) {
        mc_segment_desc_deinit(&d);
        return rc;
    }
    d.tcp_data_port = (uint16_t)port;
    d.tcp_proto_version = (int)ver;
    *out = d;
    return MC_OK;
}

int mc_rpc_meta_encode(const mc_rpc_meta *meta, char **json, size_t *len)
{
    if (!meta || !json || !meta->ip_or_host_name[0] || meta->rpc_port == 0 ||
        strnlen(meta->ip_or_host_name, MC_METADATA_MAX_HOST) >= MC_METADATA_MAX_HOST)
        return MC_INVALID_PARAMS;
    json_t *host = json_string(meta->ip_or_host_name);
    if (!host)
        return MC_INVALID_PARAMS; /* not UTF-8 */
    json_t *root = json_object();
    json_object_set_new(root, "ip_or_host_name", host);
    json_object_set_new(root, "rpc_port", json_integer(meta->rpc_port));
    return dump(root, json, len);
}

int mc_rpc_meta_decode(const char *json, size_t len, mc_rpc_meta *out, char *err,
                       size_t errlen)
{
    if (!out)
        return MC_INVALID_PARAMS;
    memset(out, 0, sizeof *out);
    int rc = MC_OK;
    json_t *root = load(json, len, 65536, &rc, err, errlen);
    if (!root)
        return rc == MC_BUFFER_OVERFLOW ? MC_DESERIALIZE_FAIL : rc;
    char *host = NULL;
    json_int_t port = 0;
    rc = get_str(root, "ip_or_host_name", MC_METADATA_MAX_HOST - 1, true, true, &host, err,
                 errlen);
    if (rc == MC_OK)
        rc = get_int(root, "rpc_port", 1, 65535, 0, true, &port, err, errlen);
    json_decref(root);
    if (rc == MC_OK) {
        memcpy(out->ip_or_host_name, host, strlen(host) + 1);
        out->rpc_port = (uint16_t)port;
    }
    free(host);
    return rc;
}

/* Reads the first line of path into buf (without the newline); false when unreadable. */
static bool read_line(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    if (!ok)
        return false;
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf[0] != '\0';
}

int mc_metadata_host_id(char *buf, size_t buflen)
{
    char machine[128], boot[128];
    if (!read_line("/etc/machine-id", machine, sizeof machine) &&
        !read_line("/var/lib/dbus/machine-id", machine, sizeof machine)) {
        if (gethostname(machine, sizeof machine) != 0)
            snprintf(machine, sizeof machine, "unknown-host");
        machine[sizeof machine - 1] = '\0';
    }
    if (!read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot))
        snprintf(boot, sizeof boot, "unknown-boot");
    if (!buf || buflen == 0)
        return MC_BUFFER_OVERFLOW;
    int n = snprintf(buf, buflen, "%s-%s", machine, boot);
    if (n < 0 || (size_t)n >= buflen || (size_t)n > MC_SEGMENT_MAX_HOST_ID) {
        buf[0] = '\0';
        return MC_BUFFER_OVERFLOW;
    }
    return MC_OK;
}
