/* mooncake_master_ctl: talk to a mooncake_master over its RPC (mooncake-c tool; upstream
 * has no equivalent). Three uses:
 *
 *   mooncake_master_ctl [--master=H:P] CMD ARG...    one command; the words form a JSON
 *                                                    array (each word parsed as JSON when
 *                                                    it is, else taken as a string)
 *   mooncake_master_ctl [--master=H:P]               JSON commands on stdin, one per line;
 *                                                    one JSON result per line on stdout
 *   mooncake_master_ctl [--master=H:P] bench ...     metadata throughput (bench/;
 *                                                    master_ctl_bench.c)
 *
 * Commands (a JSON array: name, then arguments). KEY is a JSON string (NUL allowed as
 * \u0000) or {"hex": "6b6579"} for arbitrary bytes; KEYS an array of KEY; UUID a
 * "hex-hex" string (two 16-digit halves) or [first, second]; CFG an object
 * {"replica_num", "preferred_segments", "soft_pin": "enable"|"disable"|"preserve",
 * "soft_pin_ttl_ms", "with_hard_pin", "strategy": "random"|"free_ratio_first"}; SEG an
 * object {"id": UUID (default: random), "name", "base", "size", "te_endpoint",
 * "protocol", "host_id"}.
 *   ["ping"] ["service_ready"] ["client"] ["set_client", UUID] ["sleep", MS]
 *   ["mount", SEG] ["remount", [SEG...]] ["unmount", UUID]
 *   ["put_start", KEY, SIZE, CFG?] ["put_end", KEY] ["put_revoke", KEY] (upsert_* alike)
 *   ["batch_put_start", KEYS, SIZES, CFG?] ["batch_put_end", KEYS] ["batch_put_revoke",
 *   KEYS] (batch_upsert_* alike) ["get", KEY] ["batch_get", KEYS] ["get_regex", PATTERN]
 *   ["exist", KEY] ["batch_exist", KEYS] ["remove", KEY, FORCE?] ["batch_remove", KEYS,
 *   FORCE?] ["remove_regex", PATTERN, FORCE?] ["remove_all", FORCE?]
 *   ["batch_replica_clear", KEYS, SEGMENT_NAME?] (as the current client; "" or absent:
 *   the whole objects)
 * Every result has "status" (the upstream code returned by the client library) and
 * "status_name"; calls that return data add it ("replicas", "items", "statuses",
 * "results", "matches", "count", "client_status", ...). A malformed command gives
 * {"error": "..."} and the tool goes on with the next line.
 *
 * Exit: 0 when every command ran (whatever the status codes), 1 when the master cannot
 * be reached at start, 2 for bad flags. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "client/master_client.h"
#include "common/auth.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/options.h"
#include "rpc/master_rpcs.h"
#include "master_ctl.h"

static char *master_addr;
static char *client_id_text;
static int64_t rpc_timeout_ms;
static mc_ctl_bench_opts bench_opts; /* the bench flags (master_ctl_bench.c) */

static const mc_option options[] = {
    {.name = "master", .alias = "master_server_addr", .type = MC_OPT_STRING,
     .target = &master_addr, .def = "127.0.0.1:50051", .env = "MOONCAKE_MASTER",
     .nonempty = true, .help = "master RPC address host:port"},
    {.name = "client_id", .type = MC_OPT_STRING, .target = &client_id_text, .def = "",
     .help = "client UUID as hex-hex (default: random)"},
    {.name = "rpc_timeout_ms", .type = MC_OPT_INT, .target = &rpc_timeout_ms, .def = "0",
     .bounded = true, .min = 0, .max = 86400000, .unit = "ms",
     .help = "per-call deadline (0: MC_RPC_TIMEOUT_MS or 30000)"},
    {.name = "op", .type = MC_OPT_STRING, .target = &bench_opts.op, .def = "put",
     .help = "bench: put (put_start+put_end pairs) or get (get_replica_list)"},
    {.name = "batch", .type = MC_OPT_INT, .target = &bench_opts.batch, .def = "1", .bounded = true,
     .min = 1, .max = 65536, .help = "bench: keys per call (1 = the single-key RPCs)"},
    {.name = "threads", .type = MC_OPT_INT, .target = &bench_opts.threads, .def = "1",
     .bounded = true, .min = 1, .max = 64, .help = "bench: client threads"},
    {.name = "seconds", .type = MC_OPT_DOUBLE, .target = &bench_opts.seconds, .def = "2",
     .bounded = true, .min = 0.1, .max = 3600, .unit = "s", .help = "bench: duration"},
    {.name = "keys", .type = MC_OPT_INT, .target = &bench_opts.keys, .def = "100000",
     .bounded = true, .min = 1, .max = 100000000, .help = "bench get: objects read from"},
    {.name = "value_size", .type = MC_OPT_INT, .target = &bench_opts.value_size, .def = "64",
     .bounded = true, .min = 0, .max = 1 << 30, .unit = "bytes",
     .help = "bench: object size given to put_start"},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

static mc_master_client *cli;
static mc_master_uuid client_id;

/* ---- JSON helpers ---- */

typedef struct keybuf {
    void *data;
    size_t len;
    bool owned;
} keybuf;

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool key_from_json(json_t *j, keybuf *k)
{
    k->owned = false;
    if (json_is_string(j)) {
        k->data = (void *)json_string_value(j);
        k->len = json_string_length(j);
        return true;
    }
    json_t *hex = json_is_object(j) ? json_object_get(j, "hex") : NULL;
    if (!json_is_string(hex))
        return false;
    const char *h = json_string_value(hex);
    size_t n = strlen(h);
    if (n % 2)
        return false;
    uint8_t *b = mc_xmalloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(h[2 * i]), lo = hexval(h[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return false;
        }
        b[i] = (uint8_t)(hi * 16 + lo);
    }
    k->data = b;
    k->len = n / 2;
    k->owned = true;
    return true;
}

static void key_free(keybuf *k)
{
    if (k->owned)
        free(k->data);
}

/* Keys array -> mc_master_key[] (+ buffers to free). */
typedef struct keyarr {
    mc_master_key *keys;
    keybuf *bufs;
    size_t n;
} keyarr;

static void keys_free(keyarr *ka)
{
    for (size_t i = 0; i < ka->n; i++)
        key_free(&ka->bufs[i]);
    free(ka->keys);
    free(ka->bufs);
}

/* Fills *ka from a JSON array of KEY; false (nothing left to free) when j is not one. */
static bool keys_from_json(json_t *j, keyarr *ka)
{
    memset(ka, 0, sizeof *ka);
    if (!json_is_array(j))
        return false;
    size_t n = json_array_size(j);
    ka->keys = mc_xcalloc(n ? n : 1, sizeof *ka->keys);
    ka->bufs = mc_xcalloc(n ? n : 1, sizeof *ka->bufs);
    for (size_t i = 0; i < n; i++) {
        if (!key_from_json(json_array_get(j, i), &ka->bufs[i])) {
            ka->n = i;
            keys_free(ka);
            return false;
        }
        ka->keys[i].data = ka->bufs[i].data;
        ka->keys[i].len = ka->bufs[i].len;
    }
    ka->n = n;
    return true;
}

static json_t *key_to_json(const void *data, size_t len)
{
    json_t *s = json_stringn(data, len);
    if (s)
        return s;
    static const char hx[] = "0123456789abcdef";
    char *h = mc_xmalloc(len * 2 + 1);
    for (size_t i = 0; i < len; i++) {
        h[2 * i] = hx[((const uint8_t *)data)[i] >> 4];
        h[2 * i + 1] = hx[((const uint8_t *)data)[i] & 15];
    }
    h[len * 2] = '\0';
    json_t *o = json_pack("{s:s}", "hex", h);
    free(h);
    return o;
}

mc_master_uuid mc_ctl_random_uuid(void)
{
    mc_master_uuid u = {0, 0};
    if (getrandom(&u, sizeof u, 0) != (ssize_t)sizeof u) {
        u.first = mc_now_ns();
        u.second = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
    }
    return u;
}

static bool uuid_from_text(const char *t, mc_master_uuid *u)
{
    char *end;
    errno = 0;
    unsigned long long a = strtoull(t, &end, 16);
    if (errno || *end != '-')
        return false;
    unsigned long long b = strtoull(end + 1, &end, 16);
    if (errno || *end)
        return false;
    u->first = a;
    u->second = b;
    return true;
}

static bool uuid_from_json(json_t *j, mc_master_uuid *u)
{
    if (json_is_string(j))
        return uuid_from_text(json_string_value(j), u);
    if (json_is_array(j) && json_array_size(j) == 2 &&
        json_is_integer(json_array_get(j, 0)) && json_is_integer(json_array_get(j, 1))) {
        u->first = (uint64_t)json_integer_value(json_array_get(j, 0));
        u->second = (uint64_t)json_integer_value(json_array_get(j, 1));
        return true;
    }
    return false;
}

static json_t *uuid_to_json(mc_master_uuid u)
{
    char b[40];
    snprintf(b, sizeof b, "%016" PRIx64 "-%016" PRIx64, u.first, u.second);
    return json_string(b);
}

static json_t *replicas_to_json(const mc_master_replica_list *l)
{
    json_t *a = json_array();
    for (uint32_t i = 0; i < l->n; i++) {
        const mc_master_replica *r = &l->replicas[i];
        json_array_append_new(
            a, json_pack("{s:o,s:s,s:I,s:I,s:i,s:s}", "segment_id", uuid_to_json(r->segment_id),
                         "endpoint", r->transport_endpoint, "address", (json_int_t)r->address,
                         "size", (json_int_t)r->size, "status", r->status, "protocol",
                         r->protocol));
        if (r->type != MC_MASTER_REPLICA_MEMORY) /* LOCAL_DISK (docs/ssd-tier.md) */
            json_object_set_new(json_array_get(a, json_array_size(a) - 1), "type",
                                json_integer(r->type));
    }
    return a;
}

/* Config: strings inside point into j (kept alive by the command). */
typedef struct cfgbuf {
    mc_master_put_config cfg;
    const char *pref[MC_MASTER_MAX_PREFERRED + 8];
} cfgbuf;

static bool cfg_from_json(json_t *j, cfgbuf *cb, const mc_master_put_config **out)
{
    mc_master_put_config *c = &cb->cfg;
    memset(c, 0, sizeof *c);
    c->replica_num = 1;
    *out = c;
    if (!j || json_is_null(j))
        return true;
    if (!json_is_object(j))
        return false;
    json_t *v;
    if ((v = json_object_get(j, "replica_num")))
        c->replica_num = (uint32_t)json_integer_value(v);
    if ((v = json_object_get(j, "preferred_segments"))) {
        size_t n = json_array_size(v);
        if (n > sizeof cb->pref / sizeof cb->pref[0])
            n = sizeof cb->pref / sizeof cb->pref[0];
        for (size_t i = 0; i < n; i++)
            cb->pref[i] = json_string_value(json_array_get(v, i));
        c->preferred_segments = cb->pref;
        c->n_preferred = n;
    }
    if ((v = json_object_get(j, "soft_pin"))) {
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            c->soft_pin = !strcmp(s, "enable")    ? MC_MASTER_SOFT_PIN_ENABLE
                          : !strcmp(s, "disable") ? MC_MASTER_SOFT_PIN_DISABLE
                                                  : MC_MASTER_SOFT_PIN_PRESERVE;
        } else if (json_is_true(v)) {
            c->soft_pin = MC_MASTER_SOFT_PIN_ENABLE;
        } else {
            c->soft_pin = (mc_master_soft_pin_action)json_integer_value(v);
        }
    }
    if ((v = json_object_get(j, "soft_pin_ttl_ms"))) {
        c->soft_pin_ttl_set = true;
        c->soft_pin_ttl_ms = (uint64_t)json_integer_value(v);
    }
    if ((v = json_object_get(j, "with_hard_pin")))
        c->with_hard_pin = json_is_true(v);
    if ((v = json_object_get(j, "strategy"))) {
        const char *s = json_string_value(v) ? json_string_value(v) : "";
        c->strategy = !strcmp(s, "random")             ? MC_MASTER_STRATEGY_RANDOM
                      : !strcmp(s, "free_ratio_first") ? MC_MASTER_STRATEGY_FREE_RATIO_FIRST
                      : !strcmp(s, "default")          ? MC_MASTER_STRATEGY_DEFAULT
                                                       : (mc_master_strategy)99;
    }
    return true;
}

static bool seg_from_json(json_t *j, mc_master_segment *s)
{
    memset(s, 0, sizeof *s);
    if (!json_is_object(j))
        return false;
    json_t *id = json_object_get(j, "id");
    if (id) {
        if (!uuid_from_json(id, &s->id))
            return false;
    } else {
        s->id = mc_ctl_random_uuid();
    }
    s->name = json_string_value(json_object_get(j, "name"));
    s->base = (uint64_t)json_integer_value(json_object_get(j, "base"));
    s->size = (uint64_t)json_integer_value(json_object_get(j, "size"));
    s->te_endpoint = json_string_value(json_object_get(j, "te_endpoint"));
    s->protocol = json_string_value(json_object_get(j, "protocol"));
    s->host_id = json_string_value(json_object_get(j, "host_id"));
    return s->name != NULL;
}

static json_t *result(int status)
{
    const char *name = mc_status_name(status);
    return json_pack("{s:i,s:s}", "status", status, "status_name",
                     name ? name : (status == 1 ? "TRUE" : "?"));
}

static json_t *err(const char *msg)
{
    return json_pack("{s:s}", "error", msg);
}

static json_t *statuses_json(const int *st, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(st[i]));
    return a;
}

/* ---- commands ----
 *
 * The RPC commands come from the RPC table (rpc/master_rpcs.h): each row's VERB names
 * its command and its SHAPE picks the runner below (cmd_<SHAPE>); rows that share a
 * shape (put_end / put_revoke / ...) differ only in the client call, chosen by opcode.
 * "client", "set_client" and "sleep" are the tool's own (no RPC). */

typedef struct rpc_cmd {
    const char *verb;
    uint16_t opcode;
    json_t *(*run)(uint16_t opcode, json_t *a1, json_t *a2, json_t *a3);
} rpc_cmd;

typedef int (*kfn)(mc_master_client *, mc_master_uuid, const void *, size_t);
typedef int (*sfn)(mc_master_client *, mc_master_uuid, const void *, size_t, uint64_t,
                   const mc_master_put_config *, mc_master_replica_list *);
typedef int (*bsfn)(mc_master_client *, mc_master_uuid, const mc_master_key *,
                    const uint64_t *, size_t, const mc_master_put_config *,
                    mc_master_replica_list *, int *);
typedef int (*bkfn)(mc_master_client *, mc_master_uuid, const mc_master_key *, size_t, int *);

/* result(status) with the list's "replicas" (and, with lease, its "lease_ttl_ms"). */
static json_t *list_result(int status, const mc_master_replica_list *l, bool lease)
{
    json_t *r = result(status);
    json_object_set_new(r, "replicas", replicas_to_json(l));
    if (lease)
        json_object_set_new(r, "lease_ttl_ms", json_integer((json_int_t)l->lease_ttl_ms));
    return r;
}

/* r with "items": one list_result per key of a batch. Returns r. */
static json_t *with_items(json_t *r, const int *st, const mc_master_replica_list *outs,
                          size_t n, bool lease)
{
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, list_result(st[i], &outs[i], lease));
    json_object_set_new(r, "items", items);
    return r;
}

static json_t *cmd_PING(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a1, (void)a2, (void)a3;
    mc_master_ping_result pr;
    int rc = mc_master_client_ping(cli, client_id, &pr);
    json_t *r = result(rc);
    json_object_set_new(r, "view_version", json_integer(pr.view_version));
    json_object_set_new(r, "client_status",
                        json_string(pr.client_status == MC_MASTER_CLIENT_OK ? "OK"
                                    : pr.client_status == MC_MASTER_CLIENT_NEED_REMOUNT
                                        ? "NEED_REMOUNT"
                                        : "UNDEFINED"));
    return r;
}

static json_t *cmd_READY(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a1, (void)a2, (void)a3;
    char v[128];
    int rc = mc_master_client_service_ready(cli, v, sizeof v);
    json_t *r = result(rc);
    json_object_set_new(r, "version", json_string(v));
    return r;
}

static json_t *cmd_MOUNT(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    mc_master_segment s;
    if (!seg_from_json(a1, &s))
        return err("mount SEG (an object with at least a name)");
    json_t *r = result(mc_master_client_mount_segment(cli, &s, client_id));
    json_object_set_new(r, "segment_id", uuid_to_json(s.id)); /* it may have been random */
    return r;
}

static json_t *cmd_REMOUNT(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    size_t n = json_array_size(a1);
    if (!json_is_array(a1))
        return err("remount [SEG...]");
    mc_master_segment *segs = mc_xcalloc(n ? n : 1, sizeof *segs);
    for (size_t i = 0; i < n; i++)
        if (!seg_from_json(json_array_get(a1, i), &segs[i])) {
            free(segs);
            return err("remount: bad SEG");
        }
    json_t *r = result(mc_master_client_remount_segments(cli, segs, n, client_id));
    free(segs);
    return r;
}

static json_t *cmd_UNMOUNT(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    mc_master_uuid sid;
    if (!uuid_from_json(a1, &sid))
        return err("unmount UUID");
    return result(mc_master_client_unmount_segment(cli, sid, client_id));
}

static json_t *cmd_START(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    keybuf k;
    cfgbuf cb;
    const mc_master_put_config *cfg;
    if (!json_is_integer(a2) || !cfg_from_json(a3, &cb, &cfg) || !key_from_json(a1, &k))
        return err("put_start KEY SIZE CFG?"); /* (upsert_start's usage is the same) */
    sfn fn = op == MC_MASTER_RPC_OPCODE_PUT_START ? mc_master_client_put_start
                                                  : mc_master_client_upsert_start;
    mc_master_replica_list out;
    int rc = fn(cli, client_id, k.data, k.len, (uint64_t)json_integer_value(a2), cfg, &out);
    key_free(&k);
    return list_result(rc, &out, false);
}

static json_t *cmd_KEY(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)a2, (void)a3;
    kfn fn = op == MC_MASTER_RPC_OPCODE_PUT_END      ? mc_master_client_put_end
             : op == MC_MASTER_RPC_OPCODE_PUT_REVOKE ? mc_master_client_put_revoke
             : op == MC_MASTER_RPC_OPCODE_UPSERT_END ? mc_master_client_upsert_end
                                                     : mc_master_client_upsert_revoke;
    keybuf k;
    if (!key_from_json(a1, &k))
        return err("expected KEY");
    int rc = fn(cli, client_id, k.data, k.len);
    key_free(&k);
    return result(rc);
}

static json_t *cmd_BATCH_START(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    keyarr ka;
    cfgbuf cb;
    const mc_master_put_config *cfg;
    if (!json_is_array(a2) || !cfg_from_json(a3, &cb, &cfg))
        return err("batch_put_start KEYS SIZES CFG?");
    if (!keys_from_json(a1, &ka))
        return err("batch_put_start KEYS SIZES CFG? (as many sizes as keys)");
    if (json_array_size(a2) != ka.n) {
        keys_free(&ka);
        return err("batch_put_start KEYS SIZES CFG? (as many sizes as keys)");
    }
    size_t n = ka.n;
    uint64_t *sizes = mc_xcalloc(n ? n : 1, sizeof *sizes);
    mc_master_replica_list *outs = mc_xcalloc(n ? n : 1, sizeof *outs);
    int *st = mc_xcalloc(n ? n : 1, sizeof *st);
    for (size_t i = 0; i < n; i++)
        sizes[i] = (uint64_t)json_integer_value(json_array_get(a2, i));
    bsfn fn = op == MC_MASTER_RPC_OPCODE_BATCH_PUT_START ? mc_master_client_batch_put_start
                                                        : mc_master_client_batch_upsert_start;
    int rc = fn(cli, client_id, ka.keys, sizes, n, cfg, outs, st);
    json_t *r = with_items(result(rc), st, outs, n, false);
    free(sizes);
    free(outs);
    free(st);
    keys_free(&ka);
    return r;
}

/* The commands that take KEYS (and FORCE for batch_remove) and give one int per key:
 * batch_{put,upsert}_{end,revoke} ("statuses"), batch_exist ("results": 1 / 0 / a code),
 * batch_remove ("statuses"). */
static json_t *keys_ints(uint16_t op, json_t *a1, json_t *a2, const char *usage)
{
    keyarr ka;
    if (!keys_from_json(a1, &ka))
        return err(usage);
    int *st = mc_xcalloc(ka.n ? ka.n : 1, sizeof *st);
    const char *field = "statuses";
    int rc;
    switch (op) {
    case MC_MASTER_RPC_OPCODE_BATCH_EXIST_KEY:
        rc = mc_master_client_batch_exist_key(cli, ka.keys, ka.n, st);
        field = "results";
        break;
    case MC_MASTER_RPC_OPCODE_BATCH_REMOVE:
        rc = mc_master_client_batch_remove(cli, ka.keys, ka.n, json_is_true(a2), st);
        break;
    default: {
        bkfn fn = op == MC_MASTER_RPC_OPCODE_BATCH_PUT_END ? mc_master_client_batch_put_end
                  : op == MC_MASTER_RPC_OPCODE_BATCH_PUT_REVOKE
                      ? mc_master_client_batch_put_revoke
                  : op == MC_MASTER_RPC_OPCODE_BATCH_UPSERT_END
                      ? mc_master_client_batch_upsert_end
                      : mc_master_client_batch_upsert_revoke;
        rc = fn(cli, client_id, ka.keys, ka.n, st);
    }
    }
    json_t *r = result(rc);
    json_object_set_new(r, field, statuses_json(st, ka.n));
    free(st);
    keys_free(&ka);
    return r;
}

static json_t *cmd_BATCH_KEY(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)a2, (void)a3;
    return keys_ints(op, a1, NULL, "expected KEYS");
}

static json_t *cmd_BATCH_EXIST(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)a2, (void)a3;
    return keys_ints(op, a1, NULL, "batch_exist KEYS");
}

static json_t *cmd_BATCH_REMOVE(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)a3;
    return keys_ints(op, a1, a2, "batch_remove KEYS FORCE?");
}

static json_t *cmd_BATCH_CLEAR(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a3;
    keyarr ka;
    if ((a2 && !json_is_string(a2)) || !keys_from_json(a1, &ka))
        return err("batch_replica_clear KEYS SEGMENT_NAME?");
    int *st = mc_xcalloc(ka.n ? ka.n : 1, sizeof *st);
    int rc = mc_master_client_batch_replica_clear(cli, client_id, ka.keys, ka.n,
                                                  a2 ? json_string_value(a2) : NULL, st);
    json_t *r = result(rc);
    json_object_set_new(r, "statuses", statuses_json(st, ka.n));
    free(st);
    keys_free(&ka);
    return r;
}

static json_t *cmd_GET(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    keybuf k;
    if (!key_from_json(a1, &k))
        return err("get KEY");
    mc_master_replica_list out;
    int rc = mc_master_client_get_replica_list(cli, k.data, k.len, &out);
    key_free(&k);
    return list_result(rc, &out, true);
}

static json_t *cmd_BATCH_GET(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    keyarr ka;
    if (!keys_from_json(a1, &ka))
        return err("batch_get KEYS");
    mc_master_replica_list *outs = mc_xcalloc(ka.n ? ka.n : 1, sizeof *outs);
    int *st = mc_xcalloc(ka.n ? ka.n : 1, sizeof *st);
    int rc = mc_master_client_batch_get_replica_list(cli, ka.keys, ka.n, outs, st);
    json_t *r = with_items(result(rc), st, outs, ka.n, true);
    free(outs);
    free(st);
    keys_free(&ka);
    return r;
}

static json_t *cmd_GET_REGEX(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    if (!json_is_string(a1))
        return err("get_regex PATTERN");
    mc_master_regex_match *m = NULL;
    size_t n = 0;
    bool trunc = false;
    int rc = mc_master_client_get_replica_list_by_regex(cli, json_string_value(a1),
                                                        json_string_length(a1), &m, &n, &trunc);
    json_t *r = result(rc);
    json_t *ms = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(ms, json_pack("{s:o,s:o}", "key",
                                            key_to_json(m[i].key, m[i].key_len), "replicas",
                                            replicas_to_json(&m[i].replicas)));
    json_object_set_new(r, "matches", ms);
    json_object_set_new(r, "truncated", json_boolean(trunc));
    mc_master_client_free_matches(m, n);
    return r;
}

static json_t *cmd_EXIST(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    keybuf k;
    if (!key_from_json(a1, &k))
        return err("exist KEY");
    int rc = mc_master_client_exist_key(cli, k.data, k.len);
    key_free(&k);
    json_t *r = result(rc < 0 ? rc : MC_OK);
    json_object_set_new(r, "exists", json_integer(rc)); /* 1 / 0 (or the error code) */
    return r;
}

static json_t *cmd_REMOVE(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a3;
    keybuf k;
    if (!key_from_json(a1, &k))
        return err("remove KEY FORCE?");
    int rc = mc_master_client_remove(cli, k.data, k.len, json_is_true(a2));
    key_free(&k);
    return result(rc);
}

static json_t *count_result(int rc, uint64_t count)
{
    json_t *r = result(rc);
    json_object_set_new(r, "count", json_integer((json_int_t)count));
    return r;
}

static json_t *cmd_REMOVE_REGEX(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a3;
    if (!json_is_string(a1))
        return err("remove_regex PATTERN FORCE?");
    uint64_t count = 0;
    int rc = mc_master_client_remove_by_regex(cli, json_string_value(a1),
                                              json_string_length(a1), json_is_true(a2), &count);
    return count_result(rc, count);
}

static json_t *cmd_REMOVE_ALL(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    uint64_t count = 0;
    int rc = mc_master_client_remove_all(cli, json_is_true(a1), &count);
    return count_result(rc, count);
}

/* offload_heartbeat ENDPOINT MAX? -> {"status", "fresh", "tasks": [{op, key, size,
 * address}]} (keys as text, lossy for binary keys). */
static json_t *cmd_OFFLOAD_HB(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a3;
    if (!json_is_string(a1) || (a2 && !json_is_integer(a2)))
        return err("offload_heartbeat ENDPOINT MAX_TASKS?");
    mc_master_offload_tasks *t = mc_xmalloc(sizeof *t);
    int rc = mc_master_client_offload_heartbeat(
        cli, client_id, json_string_value(a1),
        a2 ? (uint32_t)json_integer_value(a2) : MC_MASTER_MAX_OFFLOAD_TASKS, t);
    json_t *r = result(rc);
    json_t *a = json_array();
    for (uint32_t i = 0; rc == MC_OK && i < t->n; i++)
        json_array_append_new(a, json_pack("{s:i,s:s%,s:I,s:I}", "op", t->items[i].op, "key",
                                           (const char *)t->items[i].key, t->items[i].key_len,
                                           "size", (json_int_t)t->items[i].size, "address",
                                           (json_int_t)t->items[i].address));
    json_object_set_new(r, "tasks", a);
    json_object_set_new(r, "fresh", json_boolean(t->fresh));
    free(t->keys);
    free(t);
    return r;
}

/* offload_end ENDPOINT [[OP, KEY, SIZE, STATUS], ...] -> {"status", "statuses"}. */
static json_t *cmd_FETCH_LOG(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a1, (void)a2, (void)a3;
    return err("fetch_log is the standbys' replication RPC (docs/ha.md): watch it with "
               "/metrics (master_ha_repl_*) instead");
}

static json_t *cmd_FETCH_SNAPSHOT(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a1, (void)a2, (void)a3;
    return err("fetch_snapshot is the standbys' bootstrap RPC (docs/ha.md): watch it with "
               "/metrics (master_ha_repl_*) instead");
}

static json_t *cmd_OFFLOAD_END(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a3;
    if (!json_is_string(a1) || !json_is_array(a2) ||
        json_array_size(a2) > MC_MASTER_MAX_OFFLOAD_TASKS)
        return err("offload_end ENDPOINT [[OP, KEY, SIZE, STATUS], ...]");
    size_t n = json_array_size(a2);
    mc_master_offload_item *it = mc_xcalloc(n ? n : 1, sizeof *it);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(a2, i);
        const char *k = json_string_value(json_array_get(e, 1));
        it[i] = (mc_master_offload_item){
            .op = (int)json_integer_value(json_array_get(e, 0)), .key = k,
            .key_len = k ? strlen(k) : 0, .size = (uint64_t)json_integer_value(json_array_get(e, 2)),
            .status = (int)json_integer_value(json_array_get(e, 3))};
    }
    int *st = mc_xcalloc(n ? n : 1, sizeof *st);
    int rc = mc_master_client_offload_end(cli, client_id, json_string_value(a1), it, n, st);
    json_t *r = result(rc);
    json_object_set_new(r, "statuses", statuses_json(st, rc == MC_OK ? n : 0));
    free(st);
    free(it);
    return r;
}

static json_t *uuid_json(mc_master_uuid u)
{
    return json_pack("[I,I]", (json_int_t)u.first, (json_int_t)u.second);
}

static bool uuid_arg(json_t *a, mc_master_uuid *u)
{
    if (!json_is_array(a) || json_array_size(a) != 2)
        return false;
    u->first = (uint64_t)json_integer_value(json_array_get(a, 0));
    u->second = (uint64_t)json_integer_value(json_array_get(a, 1));
    return true;
}

/* create_copy_task KEY [TARGET, ...] / create_move_task KEY SOURCE TARGET ->
 * {"status", "id": [hi, lo]}. */
static json_t *cmd_TASK_CREATE(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    bool move = op == MC_MASTER_RPC_OPCODE_CREATE_MOVE_TASK;
    if (!json_is_string(a1) || (move ? !json_is_string(a2) || !json_is_string(a3)
                                     : !json_is_array(a2) ||
                                           json_array_size(a2) > MC_MASTER_MAX_TASK_TARGETS))
        return err(move ? "create_move_task KEY SOURCE TARGET"
                        : "create_copy_task KEY [TARGET, ...]");
    const char *t[MC_MASTER_MAX_TASK_TARGETS];
    size_t n = 0;
    if (move)
        t[n++] = json_string_value(a3);
    else
        for (; n < json_array_size(a2); n++)
            t[n] = json_string_value(json_array_get(a2, n));
    const char *k = json_string_value(a1);
    mc_master_uuid id;
    int rc = mc_master_client_create_task(cli, move ? MC_MASTER_TASK_REPLICA_MOVE
                                                    : MC_MASTER_TASK_REPLICA_COPY,
                                          k, strlen(k), move ? json_string_value(a2) : NULL,
                                          t, n, &id);
    json_t *r = result(rc);
    json_object_set_new(r, "id", uuid_json(id));
    return r;
}

/* query_task [HI, LO] -> {"status", "type", "task_status", "message", ...}. */
static json_t *cmd_TASK_QUERY(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a2, (void)a3;
    mc_master_uuid id;
    if (!uuid_arg(a1, &id))
        return err("query_task [HI, LO]");
    mc_master_task_info t;
    int rc = mc_master_client_query_task(cli, id, &t);
    json_t *r = result(rc);
    if (rc == MC_OK) {
        json_object_set_new(r, "type", json_integer(t.type));
        json_object_set_new(r, "task_status", json_integer(t.status));
        json_object_set_new(r, "created_at_ms_epoch", json_integer((json_int_t)t.created_at_ms_epoch));
        json_object_set_new(r, "last_updated_at_ms_epoch",
                            json_integer((json_int_t)t.last_updated_at_ms_epoch));
        json_object_set_new(r, "assigned_client", uuid_json(t.assigned_client));
        json_object_set_new(r, "message", json_string(t.message));
    }
    return r;
}

/* fetch_tasks -> {"status", "tasks": [{id, part, key, size, src, src_address, dst,
 * dst_address}]} (as the client set with "client"). */
static json_t *cmd_TASK_FETCH(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op, (void)a1, (void)a2, (void)a3;
    mc_master_task_work *w = mc_xmalloc(sizeof *w);
    uint32_t n = 0;
    int rc = mc_master_client_fetch_tasks(cli, client_id, w, &n);
    json_t *r = result(rc);
    json_t *a = json_array();
    if (rc == MC_OK && n)
        json_array_append_new(
            a, json_pack("{s:o,s:i,s:s%,s:I,s:s,s:I,s:s,s:I}", "id", uuid_json(w->id), "part",
                         (int)w->part, "key", (const char *)w->key, w->key_len, "size",
                         (json_int_t)w->size, "src", w->src_endpoint, "src_address",
                         (json_int_t)w->src_address, "dst", w->dst_endpoint, "dst_address",
                         (json_int_t)w->dst_address));
    json_object_set_new(r, "tasks", a);
    free(w);
    return r;
}

/* mark_task_to_complete [HI, LO] PART STATUS -> {"status"}. */
static json_t *cmd_TASK_MARK(uint16_t op, json_t *a1, json_t *a2, json_t *a3)
{
    (void)op;
    mc_master_uuid id;
    if (!uuid_arg(a1, &id) || !json_is_integer(a2) || !json_is_integer(a3))
        return err("mark_task_to_complete [HI, LO] PART STATUS");
    return result(mc_master_client_mark_task_to_complete(
        cli, client_id, id, (uint32_t)json_integer_value(a2), (int)json_integer_value(a3),
        "from mooncake_master_ctl"));
}

/* The verb list: one command per RPC, generated from the table. */
static const rpc_cmd rpc_cmds[] = {
#define MC__CMD(ID, CODE, NAME, VERB, REQ, REPLY, SHAPE, HANDLER, COUNT)                       \
    {VERB, CODE, cmd_##SHAPE},
    MC_MASTER_RPC_TABLE(MC__CMD)
#undef MC__CMD
};

static json_t *run(json_t *cmd)
{
    if (!json_is_array(cmd) || !json_is_string(json_array_get(cmd, 0)))
        return err("a command is a JSON array whose first item is the command name");
    const char *name = json_string_value(json_array_get(cmd, 0));
    json_t *a1 = json_array_get(cmd, 1), *a2 = json_array_get(cmd, 2),
           *a3 = json_array_get(cmd, 3); /* NULL where absent */

    for (size_t i = 0; i < sizeof rpc_cmds / sizeof rpc_cmds[0]; i++)
        if (!strcmp(name, rpc_cmds[i].verb))
            return rpc_cmds[i].run(rpc_cmds[i].opcode, a1, a2, a3);
    /* the tool's own commands */
    if (!strcmp(name, "client")) {
        json_t *r = result(MC_OK);
        json_object_set_new(r, "client_id", uuid_to_json(client_id));
        return r;
    }
    if (!strcmp(name, "set_client")) {
        if (!uuid_from_json(a1, &client_id))
            return err("set_client UUID");
        return result(MC_OK);
    }
    if (!strcmp(name, "sleep")) {
        mc_sleep_ms((uint64_t)json_integer_value(a1));
        return result(MC_OK);
    }
    return err("unknown command");
}

void mc_ctl_emit(json_t *r)
{
    char *s = json_dumps(r, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(r);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    free(s);
}

int main(int argc, char **argv)
{
    mc_log_init_from_env();
    mc_options_main(options, N_OPTIONS, &argc, argv,
                    "mooncake_master_ctl: run master RPCs (one command from the arguments, "
                    "JSON lines from stdin, or `bench`).");
    int code = 0;
    if (*client_id_text) {
        if (!uuid_from_text(client_id_text, &client_id)) {
            fprintf(stderr, "mooncake_master_ctl: --client_id wants hex-hex\n");
            mc_options_free(options, N_OPTIONS);
            return 2;
        }
    } else {
        client_id = mc_ctl_random_uuid();
    }
    int64_t conns = bench_opts.threads > 4 ? bench_opts.threads : 4;
    /* the cluster secret, as every client: the file MC_AUTH_TOKEN_FILE names (none: no
     * handshake; docs/security.md) */
    static mc_auth_secret secret;
    char aerr[512];
    if (mc_auth_load(NULL, &secret, aerr, sizeof aerr) != 0) {
        fprintf(stderr, "mooncake_master_ctl: %s\n", aerr);
        mc_options_free(options, N_OPTIONS);
        return 2;
    }
    mc_master_client_opts o = {.rpc_timeout_ms = (uint32_t)rpc_timeout_ms,
                               .max_conns = (uint32_t)conns,
                               .auth = &secret};
    int rc = mc_master_client_create(master_addr, &o, &cli);
    mc_auth_secret_wipe(&secret); /* copied by the client */
    if (rc != MC_OK) {
        fprintf(stderr, "mooncake_master_ctl: cannot reach the master at %s: %s\n",
                master_addr, mc_strerror(rc));
        mc_options_free(options, N_OPTIONS);
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "bench")) {
        code = mc_ctl_bench(cli, client_id, &bench_opts);
    } else if (argc > 1) {
        json_t *cmd = json_array();
        for (int i = 1; i < argc; i++) {
            json_t *v = json_loads(argv[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            json_array_append_new(cmd, v && i > 1 ? v : json_string(argv[i]));
            if (v && i == 1)
                json_decref(v);
        }
        mc_ctl_emit(run(cmd));
        json_decref(cmd);
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, stdin)) > 0) {
            if (len == 1 && line[0] == '\n')
                continue;
            json_error_t je;
            json_t *cmd = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
            if (!cmd) {
                mc_ctl_emit(err(je.text));
                continue;
            }
            mc_ctl_emit(run(cmd));
            json_decref(cmd);
        }
        free(line);
    }
    mc_master_client_destroy(cli);
    mc_options_free(options, N_OPTIONS);
    return code;
}
