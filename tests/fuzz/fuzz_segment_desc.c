/* libFuzzer target: segment descriptor and rpc_meta decoding (JSON from peers).
 * Any input must decode or fail cleanly; whatever decodes must satisfy the documented
 * limits and re-encode, and the re-encoding must decode to the same descriptor. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/log.h"
#include "mooncake/metadata.h"
#include "mooncake/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_same(const mc_segment_desc *a, const mc_segment_desc *b)
{
    if (strcmp(a->name, b->name) || strcmp(a->protocol, b->protocol) ||
        a->tcp_data_port != b->tcp_data_port || a->tcp_proto_version != b->tcp_proto_version ||
        a->n_buffers != b->n_buffers)
        abort();
    for (size_t i = 0; i < a->n_buffers; i++) {
        if (strcmp(a->buffers[i].name, b->buffers[i].name) ||
            a->buffers[i].addr != b->buffers[i].addr ||
            a->buffers[i].length != b->buffers[i].length ||
            a->buffers[i].shm != b->buffers[i].shm)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        mc_log_set_level(MC_LOG_OFF);
        quiet = 1;
    }
    mc_segment_desc d;
    char err[256];
    int rc = mc_segment_desc_decode((const char *)data, size, &d, err, sizeof err);
    if (rc == MC_OK) {
        if (!d.name || !*d.name || !d.protocol || d.n_buffers > MC_SEGMENT_MAX_BUFFERS)
            abort();
        for (size_t i = 0; i < d.n_buffers; i++) {
            const mc_buffer_desc *b = &d.buffers[i];
            if (!b->addr || !b->length || b->addr + b->length < b->addr ||
                b->addr + b->length > (uint64_t)MC_SEGMENT_MAX_ADDR)
                abort();
        }
        char *json;
        size_t len;
        /* protocol/name may hold anything valid UTF-8, so encode must succeed */
        if (mc_segment_desc_encode(&d, &json, &len) != MC_OK)
            abort();
        mc_segment_desc e;
        if (mc_segment_desc_decode(json, len, &e, err, sizeof err) != MC_OK)
            abort();
        check_same(&d, &e);
        mc_segment_desc_deinit(&e);
        free(json);
        mc_segment_desc_deinit(&d);
    } else if (rc != MC_DESERIALIZE_FAIL && rc != MC_BUFFER_OVERFLOW) {
        abort();
    } else if (d.name || d.n_buffers || d.buffers) {
        abort(); /* nothing may be kept on failure */
    }
    mc_rpc_meta m;
    if (mc_rpc_meta_decode((const char *)data, size, &m, err, sizeof err) == MC_OK) {
        if (!m.ip_or_host_name[0] || m.rpc_port == 0)
            abort();
    }
    return 0;
}
