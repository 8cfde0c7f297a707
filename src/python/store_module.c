/* store_module.c: the `mooncake.store` extension module (CPython C API, no pybind11) and
 * its main class, MooncakeDistributedStore, over the C store client (mooncake/store.h).
 *
 * Contract: ../shared/API.md §1, §2, §5 (return conventions are load-bearing: clients
 * test them literally); upstream: mooncake-integration/store/store_py.cpp, semantics in
 * ../shared/reference/upstream-mooncake.md §1 and §3. Every method that may block (the
 * master RPCs, transfers, setup, close) runs with the GIL released. Arguments are
 * converted first (TypeError naming the argument for a wrong type, as pybind11's casts),
 * then the C call runs, then the result is converted: status methods return 0 or a
 * negative ErrorCode, byte-count methods the object's size, existence 1/0/negative,
 * data methods b"" and handle methods None on failure; batch methods return one entry
 * per key ([] for empty input).
 *
 * Other pieces: store_types.c (ReplicateConfig, enums, BufferHandle, descriptors,
 * MooncakeHostMemAllocator, converters), store_tensor.c (tensor API). */
#include "store_py.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG "pystore"

/* ================================================================================== */
/* Construction, setup, close                                                          */
/* ================================================================================== */

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    mcpy_store *self = (mcpy_store *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    if (mc_store_create(&self->store) != MC_OK || !self->store) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_RuntimeError, "cannot create the store client");
        return NULL;
    }
    return (PyObject *)self;
}

static int store_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "MooncakeDistributedStore() takes no arguments "
                                         "(call setup(...) next)");
        return -1;
    }
    return 0;
}

static void store_dealloc(PyObject *o)
{
    mcpy_store *self = (mcpy_store *)o;
    if (self->weakreflist)
        PyObject_ClearWeakRefs(o);
    mc_store *s = self->store;
    self->store = NULL;
    if (s) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_destroy(s); /* closes first: unmounts, stops threads */
        Py_END_ALLOW_THREADS
    }
    Py_CLEAR(self->engine_keep);
    Py_TYPE(o)->tp_free(o);
}

/* Parses upstream's byte-size strings (try_string_to_byte_size): a non-negative number
 * (fractions and exponents allowed) with an optional case-insensitive unit B, KB, MB,
 * GB, TB (or K, M, G, T; powers of 1024), spaces allowed around. Returns 0 or -1. */
static int parse_size(const char *s, uint64_t *out)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s || *s == '-')
        return -1;
    if (!strcasecmp(s, "infinite")) {
        *out = UINT64_MAX;
        return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0)
        return -1;
    /* strtod also takes "inf", "nan", hex: only plain decimal numbers */
    for (const char *p = s; p < end; p++)
        if (!strchr("0123456789.eE+", *p))
            return -1;
    while (*end == ' ' || *end == '\t')
        end++;
    char unit[4] = {0};
    size_t ul = 0;
    while (*end && *end != ' ' && *end != '\t' && ul < 3)
        unit[ul++] = (char)*end++;
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end)
        return -1;
    double mult;
    if (ul == 0 || !strcasecmp(unit, "b"))
        mult = 1;
    else if (!strcasecmp(unit, "kb") || !strcasecmp(unit, "k"))
        mult = 1024.0;
    else if (!strcasecmp(unit, "mb") || !strcasecmp(unit, "m"))
        mult = 1024.0 * 1024;
    else if (!strcasecmp(unit, "gb") || !strcasecmp(unit, "g"))
        mult = 1024.0 * 1024 * 1024;
    else if (!strcasecmp(unit, "tb") || !strcasecmp(unit, "t"))
        mult = 1024.0 * 1024 * 1024 * 1024;
    else
        return -1;
    double b = v * mult;
    if (b >= 18446744073709551616.0)
        return -1;
    *out = (uint64_t)b;
    return 0;
}

static int parse_bool_str(const char *s, bool *out)
{
    static const char *const t[] = {"1", "true", "yes", "on", NULL};
    static const char *const f[] = {"0", "false", "no", "off", "", NULL};
    for (int i = 0; t[i]; i++)
        if (!strcasecmp(s, t[i]))
            return *out = true, 0;
    for (int i = 0; f[i]; i++)
        if (!strcasecmp(s, f[i]))
            return *out = false, 0;
    return -1;
}

/* Runs mc_store_setup with the GIL released; keeps `keep` (engine capsule) on success. */
static PyObject *run_setup(mcpy_store *self, mc_store_config *cfg, PyObject *keep)
{
    int rc;
    if (self->busy_setup) {
        Py_XDECREF(keep);
        mc_log(MC_LOG_ERROR, TAG, "setup() is already running on this store");
        return PyLong_FromLong(MC_INVALID_PARAMS);
    }
    self->busy_setup = true;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_store_setup(self->store, cfg);
    Py_END_ALLOW_THREADS
    self->busy_setup = false;
    if (rc == MC_OK && keep)
        Py_XSETREF(self->engine_keep, keep);
    else
        Py_XDECREF(keep);
    return PyLong_FromLong(rc);
}

/* setup(config: dict): every value goes through str() (upstream ConfigDict). */
static PyObject *setup_dict(mcpy_store *self, PyObject *dict)
{
    static const char *const known[] = {
        "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
        "protocol", "rdma_devices", "master_server_addr", "ipc_socket_path",
        "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
        "client_http_port", NULL,
    };
    enum { N = 13 };
    PyObject *strs[N] = {0};
    const char *val[N] = {0};
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    PyObject *ret = NULL;
    while (PyDict_Next(dict, &pos, &k, &v)) {
        if (!PyUnicode_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "setup(): config keys must be str");
            goto out;
        }
        const char *ks = PyUnicode_AsUTF8(k);
        if (!ks)
            goto out;
        int idx = -1;
        for (int i = 0; known[i]; i++)
            if (!strcmp(ks, known[i]))
                idx = i;
        if (idx < 0) {
            mc_log(MC_LOG_DEBUG, TAG, "setup(config): ignoring unknown key '%s'", ks);
            continue;
        }
        PyObject *sv = PyObject_Str(v);
        if (!sv)
            goto out;
        Py_XSETREF(strs[idx], sv);
        if (mcpy_cstr(sv, "setup", known[idx], &val[idx]) < 0)
            goto out;
    }
    mc_store_config cfg;
    mc_store_config_init(&cfg);
    int bad = 0;
    if (!val[0] || !*val[0] || !val[1] || !*val[1]) {
        mc_log(MC_LOG_ERROR, TAG, "setup(config): local_hostname and metadata_server are "
                                  "required");
        bad = 1;
    }
    cfg.local_hostname = val[0];
    cfg.metadata_server = val[1];
    if (val[2] && parse_size(val[2], &cfg.global_segment_size) < 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup(config): bad global_segment_size '%s'", val[2]);
        bad = 1;
    }
    if (val[3] && parse_size(val[3], &cfg.local_buffer_size) < 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup(config): bad local_buffer_size '%s'", val[3]);
        bad = 1;
    }
    if (val[4] && *val[4])
        cfg.protocol = val[4];
    if (val[5])
        cfg.rdma_devices = val[5];
    if (val[6] && *val[6])
        cfg.master_server_addr = val[6];
    if (val[8] && parse_bool_str(val[8], &cfg.enable_ssd_offload) < 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup(config): bad enable_ssd_offload '%s'", val[8]);
        bad = 1;
    }
    if (val[9])
        cfg.ssd_offload_path = val[9];
    if (val[10] && *val[10])
        cfg.tenant_id = val[10];
    if (val[11] && parse_bool_str(val[11], &cfg.enable_client_http_server) < 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup(config): bad enable_client_http_server '%s'",
               val[11]);
        bad = 1;
    }
    if (val[12]) {
        char *end;
        errno = 0;
        long p = strtol(val[12], &end, 10);
        if (end == val[12] || *end || errno || p < 0 || p > 65535) {
            mc_log(MC_LOG_ERROR, TAG, "setup(config): bad client_http_port '%s'", val[12]);
            bad = 1;
        } else {
            cfg.client_http_port = (int)p;
        }
    }
    if (bad) {
        ret = PyLong_FromLong(MC_INVALID_PARAMS);
        goto out;
    }
    ret = run_setup(self, &cfg, NULL);
out:
    for (int i = 0; i < N; i++)
        Py_XDECREF(strs[i]);
    return ret;
}

static PyObject *store_setup(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    Py_ssize_t na = PyTuple_GET_SIZE(args), nk = kwds ? PyDict_GET_SIZE(kwds) : 0;
    if (na == 1 && nk == 0 && PyDict_Check(PyTuple_GET_ITEM(args, 0)))
        return setup_dict(self, PyTuple_GET_ITEM(args, 0));
    if (na == 0 && nk == 1) {
        PyObject *c = PyDict_GetItemString(kwds, "config");
        if (c && PyDict_Check(c))
            return setup_dict(self, c);
    }
    static char *kw[] = {"local_hostname", "metadata_server", "global_segment_size",
                         "local_buffer_size", "protocol", "rdma_devices",
                         "master_server_addr", "engine", "enable_ssd_offload",
                         "ssd_offload_path", "tenant_id", "enable_client_http_server",
                         "client_http_port", NULL};
    PyObject *a_host, *a_meta, *a_gseg, *a_lbuf, *a_proto, *a_dev, *a_master;
    PyObject *a_engine = Py_None, *a_ssd = Py_False, *a_ssd_path = NULL, *a_tenant = NULL;
    PyObject *a_http = Py_False, *a_http_port = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO|OOOOOO:setup", kw, &a_host, &a_meta,
                                     &a_gseg, &a_lbuf, &a_proto, &a_dev, &a_master, &a_engine,
                                     &a_ssd, &a_ssd_path, &a_tenant, &a_http, &a_http_port))
        return NULL;
    mc_store_config cfg;
    mc_store_config_init(&cfg);
    long long port = 9300;
    int t;
    if (mcpy_cstr(a_host, "setup", "local_hostname", &cfg.local_hostname) < 0 ||
        mcpy_cstr(a_meta, "setup", "metadata_server", &cfg.metadata_server) < 0 ||
        mcpy_u64(a_gseg, "setup", "global_segment_size", &cfg.global_segment_size) < 0 ||
        mcpy_u64(a_lbuf, "setup", "local_buffer_size", &cfg.local_buffer_size) < 0 ||
        mcpy_cstr(a_proto, "setup", "protocol", &cfg.protocol) < 0 ||
        mcpy_cstr(a_dev, "setup", "rdma_devices", &cfg.rdma_devices) < 0 ||
        mcpy_cstr(a_master, "setup", "master_server_addr", &cfg.master_server_addr) < 0)
        return NULL;
    if (a_ssd_path && mcpy_cstr(a_ssd_path, "setup", "ssd_offload_path",
                                &cfg.ssd_offload_path) < 0)
        return NULL;
    if (a_tenant && mcpy_cstr(a_tenant, "setup", "tenant_id", &cfg.tenant_id) < 0)
        return NULL;
    if (a_http_port && mcpy_int(a_http_port, "setup", "client_http_port", INT32_MIN,
                                INT32_MAX, &port) < 0)
        return NULL;
    cfg.client_http_port = (int)port;
    if ((t = PyObject_IsTrue(a_ssd)) < 0)
        return NULL;
    cfg.enable_ssd_offload = t;
    if ((t = PyObject_IsTrue(a_http)) < 0)
        return NULL;
    cfg.enable_client_http_server = t;
    PyObject *keep = NULL;
    if (a_engine != Py_None) {
        struct mc_te *te;
        if (mc__py_engine_handle_get(a_engine, &te, &keep) < 0)
            return NULL;
        cfg.engine = te;
    }
    return run_setup(self, &cfg, keep);
}

static PyObject *store_init_all(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"protocol", "device_name", "mount_segment_size", NULL};
    PyObject *a_proto, *a_dev, *a_size = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:init_all", kw, &a_proto, &a_dev,
                                     &a_size))
        return NULL;
    mc_store_config cfg;
    mc_store_config_init(&cfg);
    if (mcpy_cstr(a_proto, "init_all", "protocol", &cfg.protocol) < 0 ||
        mcpy_cstr(a_dev, "init_all", "device_name", &cfg.rdma_devices) < 0)
        return NULL;
    cfg.global_segment_size = 16u << 20;
    if (a_size && mcpy_u64(a_size, "init_all", "mount_segment_size",
                           &cfg.global_segment_size) < 0)
        return NULL;
    if (mc_store_is_setup(self->store))
        return PyLong_FromLong(MC_INVALID_PARAMS);
    /* upstream RealClient::initAll's fixed values */
    cfg.local_hostname = "localhost:12345";
    cfg.metadata_server = "127.0.0.1:2379";
    cfg.local_buffer_size = 1ull << 30;
    return run_setup(self, &cfg, NULL);
}

static PyObject *store_close(PyObject *o, PyObject *unused)
{
    (void)unused;
    mcpy_store *self = (mcpy_store *)o;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_store_close(self->store);
    Py_END_ALLOW_THREADS
    if (!mc_store_is_setup(self->store))
        Py_CLEAR(self->engine_keep);
    return PyLong_FromLong(rc);
}

static PyObject *store_get_hostname(PyObject *o, PyObject *unused)
{
    (void)unused;
    mcpy_store *self = (mcpy_store *)o;
    char buf[MC_STORE_NAME_MAX];
    buf[0] = 0;
    int n;
    /* takes the store's call lock: never wait for it holding the GIL (a get_with
     * allocator holding that lock may be waiting for the GIL) */
    Py_BEGIN_ALLOW_THREADS
    n = mc_store_get_hostname(self->store, buf, sizeof(buf));
    Py_END_ALLOW_THREADS
    if (n < 0)
        return PyUnicode_FromString("");
    return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strnlen(buf, sizeof(buf)), "replace");
}

static PyObject *store_health_check(PyObject *o, PyObject *unused)
{
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_store_health_check(((mcpy_store *)o)->store);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

/* ================================================================================== */
/* Writes                                                                              */
/* ================================================================================== */

typedef int (*put_fn)(mc_store *, const void *, size_t, const void *, size_t,
                      const mc_store_replicate_config *);
typedef int (*parts_fn)(mc_store *, const void *, size_t, const mc_store_iov *, size_t,
                        const mc_store_replicate_config *);
typedef int (*batch_put_fn)(mc_store *, const mc_store_key *, size_t, const void *const *,
                            const uint64_t *, const mc_store_replicate_config *, int *);
typedef int (*multi_put_fn)(mc_store *, const mc_store_key *, size_t,
                            const mc_store_iov *const *, const size_t *,
                            const mc_store_replicate_config *, int *);

/* put(key, value, config=ReplicateConfig()) / upsert. */
static PyObject *do_put(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                        put_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"key", "value", "config", NULL};
    PyObject *a_key, *a_val, *a_cfg = NULL;
    char fmt[32];
    snprintf(fmt, sizeof(fmt), "OO|O:%s", fn);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw, &a_key, &a_val, &a_cfg))
        return NULL;
    mc_store_key key;
    Py_buffer view;
    mcpy_rc rc;
    if (mcpy_key(a_key, fn, "key", &key) < 0)
        return NULL;
    if (mcpy_get_buffer(a_val, fn, "value", &view) < 0)
        return NULL;
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = call(self->store, key.data, key.len, view.buf, (size_t)view.len, &rc.c);
    Py_END_ALLOW_THREADS
    mcpy_rc_clear(&rc);
    PyBuffer_Release(&view);
    return PyLong_FromLong(r);
}

static PyObject *store_put(PyObject *o, PyObject *a, PyObject *k)
{
    return do_put(o, a, k, "put", mc_store_put);
}

static PyObject *store_upsert(PyObject *o, PyObject *a, PyObject *k)
{
    return do_put(o, a, k, "upsert", mc_store_upsert);
}

/* put_parts(key, *parts, config=ReplicateConfig()) / upsert_parts. */
static PyObject *do_put_parts(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                              parts_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    PyObject *a_cfg = NULL;
    if (kwds) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwds, &pos, &k, &v)) {
            if (!PyUnicode_Check(k) || PyUnicode_CompareWithASCIIString(k, "config")) {
                PyErr_Format(PyExc_TypeError, "%R is an invalid keyword argument for %s()", k,
                             fn);
                return NULL;
            }
            a_cfg = v;
        }
    }
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    if (na < 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'key' (pos 1)", fn);
        return NULL;
    }
    mc_store_key key;
    if (mcpy_key(PyTuple_GET_ITEM(args, 0), fn, "key", &key) < 0)
        return NULL;
    size_t np = (size_t)(na - 1);
    if (np > MC_STORE_MAX_PARTS)
        return PyLong_FromLong(MC_INVALID_PARAMS);
    Py_buffer *views = PyMem_Calloc(np ? np : 1, sizeof(Py_buffer));
    mc_store_iov *iov = PyMem_Calloc(np ? np : 1, sizeof(mc_store_iov));
    size_t got = 0;
    PyObject *ret = NULL;
    mcpy_rc rc;
    bool have_rc = false;
    if (!views || !iov) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < np; got++) {
        PyObject *p = PyTuple_GET_ITEM(args, (Py_ssize_t)got + 1);
        if (!PyObject_CheckBuffer(p)) {
            PyErr_Format(PyExc_TypeError, "%s(): parts must be bytes-like, part %zu is %.100s",
                         fn, got, Py_TYPE(p)->tp_name);
            goto out;
        }
        if (PyObject_GetBuffer(p, &views[got], PyBUF_FULL_RO) < 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_RuntimeError, "parts must be 1-D bytes-like");
            goto out;
        }
        Py_buffer *v = &views[got];
        if (v->ndim > 1 || v->itemsize != 1 || !PyBuffer_IsContiguous(v, 'C')) {
            PyBuffer_Release(v);
            PyErr_SetString(PyExc_RuntimeError, "parts must be 1-D bytes-like");
            goto out;
        }
        iov[got].base = v->buf;
        iov[got].len = (uint64_t)v->len;
    }
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0)
        goto out;
    have_rc = true;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = call(self->store, key.data, key.len, iov, np, &rc.c);
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLong(r);
out:
    if (have_rc)
        mcpy_rc_clear(&rc);
    for (size_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(iov);
    return ret;
}

static PyObject *store_put_parts(PyObject *o, PyObject *a, PyObject *k)
{
    return do_put_parts(o, a, k, "put_parts", mc_store_put_parts);
}

static PyObject *store_upsert_parts(PyObject *o, PyObject *a, PyObject *k)
{
    return do_put_parts(o, a, k, "upsert_parts", mc_store_upsert_parts);
}

/* put_batch(keys, values, config) / upsert_batch: one int, 0 or the first error. */
static PyObject *do_put_batch(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                              batch_put_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"keys", "values", "config", NULL};
    PyObject *a_keys, *a_vals, *a_cfg = NULL;
    char fmt[32];
    snprintf(fmt, sizeof(fmt), "OO|O:%s", fn);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw, &a_keys, &a_vals, &a_cfg))
        return NULL;
    mcpy_keys keys;
    if (mcpy_keys_from(a_keys, fn, "keys", &keys) < 0)
        return NULL;
    PyObject *vals = mcpy_seq_tuple(a_vals, fn, "values");
    if (!vals) {
        mcpy_keys_clear(&keys);
        return NULL;
    }
    size_t n = keys.n, got = 0;
    PyObject *ret = NULL;
    Py_buffer *views = NULL;
    const void **ptrs = NULL;
    uint64_t *sizes = NULL;
    int *res = NULL;
    mcpy_rc rc;
    bool have_rc = false;
    if ((size_t)PyTuple_GET_SIZE(vals) != n) {
        mc_log(MC_LOG_ERROR, TAG, "%s: %zu keys but %zd values", fn, n,
               PyTuple_GET_SIZE(vals));
        ret = PyLong_FromLong(MC_INVALID_PARAMS);
        goto out;
    }
    if (n == 0) {
        ret = PyLong_FromLong(0);
        goto out;
    }
    views = PyMem_Calloc(n, sizeof(Py_buffer));
    ptrs = PyMem_Calloc(n, sizeof(void *));
    sizes = PyMem_Calloc(n, sizeof(uint64_t));
    res = PyMem_Calloc(n, sizeof(int));
    if (!views || !ptrs || !sizes || !res) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < n; got++) {
        if (mcpy_get_buffer(PyTuple_GET_ITEM(vals, (Py_ssize_t)got), fn, "values",
                            &views[got]) < 0)
            goto out;
        ptrs[got] = views[got].buf;
        sizes[got] = (uint64_t)views[got].len;
    }
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0)
        goto out;
    have_rc = true;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = call(self->store, keys.keys, n, (const void *const *)ptrs, sizes, &rc.c, res);
    Py_END_ALLOW_THREADS
    if (r == MC_OK)
        for (size_t i = 0; i < n; i++)
            if (res[i] != MC_OK) {
                r = res[i];
                break;
            }
    ret = PyLong_FromLong(r);
out:
    if (have_rc)
        mcpy_rc_clear(&rc);
    for (size_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(ptrs);
    PyMem_Free(sizes);
    PyMem_Free(res);
    Py_DECREF(vals);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_put_batch(PyObject *o, PyObject *a, PyObject *k)
{
    return do_put_batch(o, a, k, "put_batch", mc_store_batch_put_from);
}

static PyObject *store_upsert_batch(PyObject *o, PyObject *a, PyObject *k)
{
    return do_put_batch(o, a, k, "upsert_batch", mc_store_batch_upsert_from);
}

/* put_from(key, buffer_ptr, size, config) / upsert_from: raw memory. */
static PyObject *do_put_from(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                             put_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"key", "buffer_ptr", "size", "config", NULL};
    PyObject *a_key, *a_ptr, *a_size, *a_cfg = NULL;
    char fmt[32];
    snprintf(fmt, sizeof(fmt), "OOO|O:%s", fn);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw, &a_key, &a_ptr, &a_size, &a_cfg))
        return NULL;
    mc_store_key key;
    uint64_t ptr, size;
    mcpy_rc rc;
    if (mcpy_key(a_key, fn, "key", &key) < 0 || mcpy_u64(a_ptr, fn, "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_size, fn, "size", &size) < 0)
        return NULL;
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0)
        return NULL;
    int r;
    if (size > SIZE_MAX || (ptr == 0 && size > 0) || ptr + size < ptr) {
        r = MC_INVALID_PARAMS;
    } else {
        Py_BEGIN_ALLOW_THREADS
        r = call(self->store, key.data, key.len, (const void *)(uintptr_t)ptr, (size_t)size,
                 &rc.c);
        Py_END_ALLOW_THREADS
    }
    mcpy_rc_clear(&rc);
    return PyLong_FromLong(r);
}

static PyObject *store_put_from(PyObject *o, PyObject *a, PyObject *k)
{
    return do_put_from(o, a, k, "put_from", mc_store_put);
}

static PyObject *store_upsert_from(PyObject *o, PyObject *a, PyObject *k)
{
    return do_put_from(o, a, k, "upsert_from", mc_store_upsert);
}

/* put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size, metadata_size,
 * config): the object is [metadata][data] (upstream: two slices). */
static PyObject *store_put_from_with_metadata(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "put_from_with_metadata";
    static char *kw[] = {"key", "buffer_ptr", "metadata_buffer_ptr", "size", "metadata_size",
                         "config", NULL};
    PyObject *a_key, *a_ptr, *a_mptr, *a_size, *a_msize, *a_cfg = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|O:put_from_with_metadata", kw, &a_key,
                                     &a_ptr, &a_mptr, &a_size, &a_msize, &a_cfg))
        return NULL;
    mc_store_key key;
    uint64_t ptr, mptr, size, msize;
    mcpy_rc rc;
    if (mcpy_key(a_key, fn, "key", &key) < 0 || mcpy_u64(a_ptr, fn, "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_mptr, fn, "metadata_buffer_ptr", &mptr) < 0 ||
        mcpy_u64(a_size, fn, "size", &size) < 0 ||
        mcpy_u64(a_msize, fn, "metadata_size", &msize) < 0)
        return NULL;
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0)
        return NULL;
    int r;
    if ((ptr == 0 && size) || (mptr == 0 && msize) || ptr + size < ptr || mptr + msize < mptr) {
        r = MC_INVALID_PARAMS;
    } else {
        mc_store_iov iov[2] = {{(void *)(uintptr_t)mptr, msize}, {(void *)(uintptr_t)ptr, size}};
        Py_BEGIN_ALLOW_THREADS
        r = mc_store_put_parts(self->store, key.data, key.len, iov, 2, &rc.c);
        Py_END_ALLOW_THREADS
    }
    mcpy_rc_clear(&rc);
    return PyLong_FromLong(r);
}

/* batch_put_from(keys, buffer_ptrs, sizes, config) / batch_upsert_from: List[int]. */
static PyObject *do_batch_put_from(PyObject *o, PyObject *args, PyObject *kwds,
                                   const char *fn, batch_put_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"keys", "buffer_ptrs", "sizes", "config", NULL};
    PyObject *a_keys, *a_ptrs, *a_sizes, *a_cfg = NULL;
    char fmt[40];
    snprintf(fmt, sizeof(fmt), "OOO|O:%s", fn);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw, &a_keys, &a_ptrs, &a_sizes, &a_cfg))
        return NULL;
    mcpy_keys keys;
    uint64_t *ptrs = NULL, *sizes = NULL;
    size_t np = 0, ns = 0;
    int *res = NULL;
    PyObject *ret = NULL;
    mcpy_rc rc;
    bool have_rc = false;
    if (mcpy_keys_ptrs_sizes(a_keys, a_ptrs, a_sizes, fn, &keys, &ptrs, &sizes, &np, &ns) < 0)
        return NULL;
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0)
        goto out;
    have_rc = true;
    size_t n = keys.n;
    if (np != n || ns != n) {
        mc_log(MC_LOG_ERROR, TAG, "%s: %zu keys, %zu pointers, %zu sizes", fn, n, np, ns);
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto out;
    }
    if (n == 0) {
        ret = PyList_New(0);
        goto out;
    }
    res = PyMem_Calloc(n, sizeof(int));
    if (!res) {
        PyErr_NoMemory();
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    call(self->store, keys.keys, n, (const void *const *)ptrs, sizes, &rc.c, res);
    Py_END_ALLOW_THREADS
    ret = mcpy_int_list(res, n);
out:
    if (have_rc)
        mcpy_rc_clear(&rc);
    PyMem_Free(ptrs);
    PyMem_Free(sizes);
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_batch_put_from(PyObject *o, PyObject *a, PyObject *k)
{
    return do_batch_put_from(o, a, k, "batch_put_from", mc_store_batch_put_from);
}

static PyObject *store_batch_upsert_from(PyObject *o, PyObject *a, PyObject *k)
{
    return do_batch_put_from(o, a, k, "batch_upsert_from", mc_store_batch_upsert_from);
}

/* Scatter-gather arguments: keys[i] <-> iovs of all_buffer_ptrs[i] / all_sizes[i]. Rows
 * whose two lists differ in length get INVALID_PARAMS and are left out of the C call
 * (sel/nsel: the positions that go in). */
typedef struct {
    mcpy_keys keys;
    uint64_t *ptrs, *sizes;
    size_t *pst, *pct, *sst, *sct;
    size_t nprow, nsrow;
    mc_store_key *sel_keys;
    mc_store_iov *iov;
    const mc_store_iov **iovs;
    size_t *iovcnt;
    size_t *sel;
    size_t nsel;
} multi_args;

static void multi_clear(multi_args *m)
{
    mcpy_keys_clear(&m->keys);
    PyMem_Free(m->ptrs);
    PyMem_Free(m->sizes);
    PyMem_Free(m->pst);
    PyMem_Free(m->pct);
    PyMem_Free(m->sst);
    PyMem_Free(m->sct);
    PyMem_Free(m->sel_keys);
    PyMem_Free(m->iov);
    PyMem_Free(m->iovs);
    PyMem_Free(m->iovcnt);
    PyMem_Free(m->sel);
    memset(m, 0, sizeof(*m));
}

/* Returns -1 (exception), 0 (ready), 1 (outer lengths mismatch: all INVALID_PARAMS). */
static int multi_parse(multi_args *m, PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes,
                       const char *fn, int *res)
{
    memset(m, 0, sizeof(*m));
    if (mcpy_keys_from(a_keys, fn, "keys", &m->keys) < 0)
        return -1;
    if (mcpy_u64_list2(a_ptrs, fn, "all_buffer_ptrs", &m->ptrs, &m->pst, &m->pct,
                       &m->nprow) < 0 ||
        mcpy_u64_list2(a_sizes, fn, "all_sizes", &m->sizes, &m->sst, &m->sct, &m->nsrow) < 0)
        return -1;
    size_t n = m->keys.n;
    if (m->nprow != n || m->nsrow != n) {
        mc_log(MC_LOG_ERROR, TAG, "%s: %zu keys, %zu pointer rows, %zu size rows", fn, n,
               m->nprow, m->nsrow);
        return 1;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += m->pct[i];
    m->sel_keys = PyMem_Calloc(n ? n : 1, sizeof(mc_store_key));
    m->iov = PyMem_Calloc(total ? total : 1, sizeof(mc_store_iov));
    m->iovs = PyMem_Calloc(n ? n : 1, sizeof(mc_store_iov *));
    m->iovcnt = PyMem_Calloc(n ? n : 1, sizeof(size_t));
    m->sel = PyMem_Calloc(n ? n : 1, sizeof(size_t));
    if (!m->sel_keys || !m->iov || !m->iovs || !m->iovcnt || !m->sel) {
        PyErr_NoMemory();
        return -1;
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        bool ok = m->pct[i] == m->sct[i] && m->pct[i] <= MC_STORE_MAX_PARTS;
        for (size_t j = 0; ok && j < m->pct[i]; j++) {
            uint64_t p = m->ptrs[m->pst[i] + j], s = m->sizes[m->sst[i] + j];
            if ((p == 0 && s > 0) || p + s < p)
                ok = false;
        }
        if (!ok) {
            res[i] = MC_INVALID_PARAMS;
            continue;
        }
        size_t k = m->nsel++;
        m->sel[k] = i;
        m->sel_keys[k] = m->keys.keys[i];
        m->iovs[k] = &m->iov[at];
        m->iovcnt[k] = m->pct[i];
        for (size_t j = 0; j < m->pct[i]; j++) {
            m->iov[at].base = (void *)(uintptr_t)m->ptrs[m->pst[i] + j];
            m->iov[at].len = m->sizes[m->sst[i] + j];
            at++;
        }
    }
    return 0;
}

static PyObject *store_batch_put_from_multi_buffers(PyObject *o, PyObject *args,
                                                    PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "batch_put_from_multi_buffers";
    static char *kw[] = {"keys", "all_buffer_ptrs", "all_sizes", "config", NULL};
    PyObject *a_keys, *a_ptrs, *a_sizes, *a_cfg = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|O:batch_put_from_multi_buffers", kw,
                                     &a_keys, &a_ptrs, &a_sizes, &a_cfg))
        return NULL;
    mcpy_rc rc;
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0)
        return NULL;
    Py_ssize_t nk = PySequence_Check(a_keys) ? PySequence_Size(a_keys) : 0;
    if (nk < 0)
        PyErr_Clear();
    int *res = PyMem_Calloc(nk > 0 ? (size_t)nk : 1, sizeof(int));
    int *sres = PyMem_Calloc(nk > 0 ? (size_t)nk : 1, sizeof(int));
    PyObject *ret = NULL;
    multi_args m;
    int pr;
    if (!res || !sres) {
        PyErr_NoMemory();
        memset(&m, 0, sizeof(m));
        goto out;
    }
    pr = multi_parse(&m, a_keys, a_ptrs, a_sizes, fn, res);
    if (pr < 0)
        goto out;
    if (pr > 0) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, m.keys.n);
        goto out;
    }
    if (m.nsel) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_put_from_multi_buffers(self->store, m.sel_keys, m.nsel, m.iovs,
                                              m.iovcnt, &rc.c, sres);
        Py_END_ALLOW_THREADS
    }
    for (size_t k = 0; k < m.nsel; k++)
        res[m.sel[k]] = sres[k];
    ret = mcpy_int_list(res, m.keys.n);
out:
    multi_clear(&m);
    mcpy_rc_clear(&rc);
    PyMem_Free(res);
    PyMem_Free(sres);
    return ret;
}

/* ================================================================================== */
/* Reads                                                                               */
/* ================================================================================== */

/* Allocator for get/get_batch: a bytes object of the object's size, made with the GIL
 * taken back for the moment (the C call runs on this thread with the GIL released). */
typedef struct {
    PyObject **objs;
    size_t n;
} bytes_ctx;

static void *alloc_bytes(void *ctx, size_t index, uint64_t size)
{
    bytes_ctx *c = ctx;
    if (index >= c->n || size > (uint64_t)PY_SSIZE_T_MAX)
        return NULL;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!b)
        PyErr_Clear();
    Py_XSETREF(c->objs[index], b);
    PyGILState_Release(g);
    return b ? PyBytes_AS_STRING(b) : NULL;
}

static PyObject *store_get(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"key", NULL};
    PyObject *a_key;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get", kw, &a_key))
        return NULL;
    mc_store_key key;
    if (mcpy_key(a_key, "get", "key", &key) < 0)
        return NULL;
    PyObject *obj = NULL;
    bytes_ctx ctx = {&obj, 1};
    void *out = NULL;
    int64_t r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_get_with(self->store, key.data, key.len, alloc_bytes, &ctx, &out);
    Py_END_ALLOW_THREADS
    if (r < 0 || !obj || PyBytes_GET_SIZE(obj) != r) {
        Py_XDECREF(obj);
        return PyBytes_FromStringAndSize("", 0);
    }
    return obj;
}

static PyObject *store_get_batch(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"keys", NULL};
    PyObject *a_keys;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_batch", kw, &a_keys))
        return NULL;
    mcpy_keys keys;
    if (mcpy_keys_from(a_keys, "get_batch", "keys", &keys) < 0)
        return NULL;
    size_t n = keys.n;
    PyObject **objs = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    void **outs = PyMem_Calloc(n ? n : 1, sizeof(void *));
    int64_t *res = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    PyObject *ret = NULL;
    if (!objs || !outs || !res) {
        PyErr_NoMemory();
        goto out;
    }
    if (n) {
        bytes_ctx ctx = {objs, n};
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_with(self->store, keys.keys, n, alloc_bytes, &ctx, outs, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyList_New((Py_ssize_t)n);
    if (!ret)
        goto out;
    for (size_t i = 0; i < n; i++) {
        PyObject *b = objs[i];
        if (res[i] < 0 || !b || PyBytes_GET_SIZE(b) != res[i])
            b = PyBytes_FromStringAndSize("", 0);
        else
            objs[i] = NULL;
        PyList_SET_ITEM(ret, (Py_ssize_t)i, b);
    }
out:
    if (objs)
        for (size_t i = 0; i < n; i++)
            Py_XDECREF(objs[i]);
    PyMem_Free(objs);
    PyMem_Free(outs);
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_get_buffer(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"key", NULL};
    PyObject *a_key;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_buffer", kw, &a_key))
        return NULL;
    mc_store_key key;
    if (mcpy_key(a_key, "get_buffer", "key", &key) < 0)
        return NULL;
    mc_store_buffer *b = NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_get_buffer(self->store, key.data, key.len, &b);
    Py_END_ALLOW_THREADS
    if (r != MC_OK || !b) {
        mc_store_buffer_free(b);
        Py_RETURN_NONE;
    }
    return mcpy_buffer_handle_new(b);
}

static PyObject *store_batch_get_buffer(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"keys", NULL};
    PyObject *a_keys;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:batch_get_buffer", kw, &a_keys))
        return NULL;
    mcpy_keys keys;
    if (mcpy_keys_from(a_keys, "batch_get_buffer", "keys", &keys) < 0)
        return NULL;
    size_t n = keys.n;
    mc_store_buffer **outs = PyMem_Calloc(n ? n : 1, sizeof(mc_store_buffer *));
    int64_t *res = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    PyObject *ret = NULL;
    if (!outs || !res) {
        PyErr_NoMemory();
        goto out;
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_buffer(self->store, keys.keys, n, outs, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyList_New((Py_ssize_t)n);
    if (!ret)
        goto out;
    for (size_t i = 0; i < n; i++) {
        PyObject *h;
        if (res[i] < 0 || !outs[i]) {
            mc_store_buffer_free(outs[i]);
            h = Py_NewRef(Py_None);
        } else {
            h = mcpy_buffer_handle_new(outs[i]);
            if (!h) {
                for (size_t j = i + 1; j < n; j++)
                    mc_store_buffer_free(outs[j]);
                Py_CLEAR(ret);
                break;
            }
        }
        outs[i] = NULL;
        PyList_SET_ITEM(ret, (Py_ssize_t)i, h);
    }
out:
    if (!ret && outs)
        for (size_t i = 0; i < n; i++)
            mc_store_buffer_free(outs[i]);
    PyMem_Free(outs);
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_get_into(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"key", "buffer_ptr", "size", NULL};
    PyObject *a_key, *a_ptr, *a_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:get_into", kw, &a_key, &a_ptr, &a_size))
        return NULL;
    mc_store_key key;
    uint64_t ptr, size;
    if (mcpy_key(a_key, "get_into", "key", &key) < 0 ||
        mcpy_u64(a_ptr, "get_into", "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_size, "get_into", "size", &size) < 0)
        return NULL;
    int64_t r;
    if ((ptr == 0 && size) || ptr + size < ptr) {
        r = MC_INVALID_PARAMS;
    } else {
        Py_BEGIN_ALLOW_THREADS
        r = mc_store_get_into(self->store, key.data, key.len, (void *)(uintptr_t)ptr, size);
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLongLong(r);
}

static PyObject *store_batch_get_into(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "batch_get_into";
    static char *kw[] = {"keys", "buffer_ptrs", "sizes", NULL};
    PyObject *a_keys, *a_ptrs, *a_sizes;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:batch_get_into", kw, &a_keys, &a_ptrs,
                                     &a_sizes))
        return NULL;
    mcpy_keys keys;
    uint64_t *ptrs = NULL, *sizes = NULL;
    size_t np = 0, ns = 0;
    int64_t *res = NULL;
    PyObject *ret = NULL;
    if (mcpy_keys_ptrs_sizes(a_keys, a_ptrs, a_sizes, fn, &keys, &ptrs, &sizes, &np, &ns) < 0)
        return NULL;
    size_t n = keys.n;
    if (np != n || ns != n) {
        mc_log(MC_LOG_ERROR, TAG, "%s: %zu keys, %zu pointers, %zu sizes", fn, n, np, ns);
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto out;
    }
    res = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (!res) {
        PyErr_NoMemory();
        goto out;
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_into(self->store, keys.keys, n, (void *const *)ptrs, sizes, res);
        Py_END_ALLOW_THREADS
    }
    ret = mcpy_i64_list(res, n);
out:
    PyMem_Free(ptrs);
    PyMem_Free(sizes);
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_batch_get_into_multi_buffers(PyObject *o, PyObject *args,
                                                    PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "batch_get_into_multi_buffers";
    static char *kw[] = {"keys", "all_buffer_ptrs", "all_sizes", "prefer_alloc_in_same_node",
                         NULL};
    PyObject *a_keys, *a_ptrs, *a_sizes;
    int prefer = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|p:batch_get_into_multi_buffers", kw,
                                     &a_keys, &a_ptrs, &a_sizes, &prefer))
        return NULL;
    Py_ssize_t nk = PySequence_Check(a_keys) ? PySequence_Size(a_keys) : 0;
    if (nk < 0)
        PyErr_Clear();
    int *codes = PyMem_Calloc(nk > 0 ? (size_t)nk : 1, sizeof(int));
    int64_t *sres = PyMem_Calloc(nk > 0 ? (size_t)nk : 1, sizeof(int64_t));
    int64_t *res = PyMem_Calloc(nk > 0 ? (size_t)nk : 1, sizeof(int64_t));
    PyObject *ret = NULL;
    multi_args m;
    memset(&m, 0, sizeof(m));
    int pr;
    if (!codes || !sres || !res) {
        PyErr_NoMemory();
        goto out;
    }
    pr = multi_parse(&m, a_keys, a_ptrs, a_sizes, fn, codes);
    if (pr < 0)
        goto out;
    if (pr > 0) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, m.keys.n);
        goto out;
    }
    for (size_t i = 0; i < m.keys.n; i++)
        res[i] = codes[i];
    if (m.nsel) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_into_multi_buffers(self->store, m.sel_keys, m.nsel, m.iovs,
                                              m.iovcnt, prefer != 0, sres);
        Py_END_ALLOW_THREADS
    }
    for (size_t k = 0; k < m.nsel; k++)
        res[m.sel[k]] = sres[k];
    ret = mcpy_i64_list(res, m.keys.n);
out:
    multi_clear(&m);
    PyMem_Free(codes);
    PyMem_Free(sres);
    PyMem_Free(res);
    return ret;
}

/* ================================================================================== */
/* Queries and removal                                                                 */
/* ================================================================================== */

static PyObject *store_is_exist(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", NULL};
    PyObject *a_key;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:is_exist", kw, &a_key))
        return NULL;
    mc_store_key key;
    if (mcpy_key(a_key, "is_exist", "key", &key) < 0)
        return NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_is_exist(((mcpy_store *)o)->store, key.data, key.len);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(r);
}

static PyObject *store_get_size(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", NULL};
    PyObject *a_key;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_size", kw, &a_key))
        return NULL;
    mc_store_key key;
    if (mcpy_key(a_key, "get_size", "key", &key) < 0)
        return NULL;
    int64_t r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_get_size(((mcpy_store *)o)->store, key.data, key.len);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(r);
}

typedef int (*batch_int_fn)(mcpy_store *, const mc_store_key *, size_t, bool, int *);

static int bi_exist(mcpy_store *s, const mc_store_key *k, size_t n, bool f, int *r)
{
    (void)f;
    return mc_store_batch_is_exist(s->store, k, n, r);
}

static int bi_remove(mcpy_store *s, const mc_store_key *k, size_t n, bool f, int *r)
{
    return mc_store_batch_remove(s->store, k, n, f, r);
}

static PyObject *do_batch_int(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                              bool has_force, batch_int_fn call)
{
    static char *kw_force[] = {"keys", "force", NULL};
    static char *kw_plain[] = {"keys", NULL};
    PyObject *a_keys;
    int force = 0;
    char fmt[40];
    snprintf(fmt, sizeof(fmt), "O%s:%s", has_force ? "|p" : "", fn);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, has_force ? kw_force : kw_plain, &a_keys,
                                     &force))
        return NULL;
    mcpy_keys keys;
    if (mcpy_keys_from(a_keys, fn, "keys", &keys) < 0)
        return NULL;
    size_t n = keys.n;
    int *res = PyMem_Calloc(n ? n : 1, sizeof(int));
    PyObject *ret = NULL;
    if (!res) {
        PyErr_NoMemory();
    } else {
        if (n) {
            Py_BEGIN_ALLOW_THREADS
            call((mcpy_store *)o, keys.keys, n, force != 0, res);
            Py_END_ALLOW_THREADS
        }
        ret = mcpy_int_list(res, n);
    }
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_batch_is_exist(PyObject *o, PyObject *a, PyObject *k)
{
    return do_batch_int(o, a, k, "batch_is_exist", false, bi_exist);
}

static PyObject *store_batch_remove(PyObject *o, PyObject *a, PyObject *k)
{
    return do_batch_int(o, a, k, "batch_remove", true, bi_remove);
}

static PyObject *store_remove(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "force", NULL};
    PyObject *a_key;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:remove", kw, &a_key, &force))
        return NULL;
    mc_store_key key;
    if (mcpy_key(a_key, "remove", "key", &key) < 0)
        return NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_remove(((mcpy_store *)o)->store, key.data, key.len, force != 0);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(r);
}

static PyObject *store_remove_by_regex(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"regex_pattern", "force", NULL};
    PyObject *a_pat;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:remove_by_regex", kw, &a_pat, &force))
        return NULL;
    mc_store_key pat;
    if (mcpy_key(a_pat, "remove_by_regex", "regex_pattern", &pat) < 0)
        return NULL;
    int64_t r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_remove_by_regex(((mcpy_store *)o)->store, pat.data, pat.len, force != 0);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(r);
}

static PyObject *store_remove_all(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:remove_all", kw, &force))
        return NULL;
    int64_t r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_remove_all(((mcpy_store *)o)->store, force != 0);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(r);
}

static PyObject *store_get_replica_desc(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", NULL};
    PyObject *a_key;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_replica_desc", kw, &a_key))
        return NULL;
    mc_store_key key;
    if (mcpy_key(a_key, "get_replica_desc", "key", &key) < 0)
        return NULL;
    mc_store_replica_list *l = PyMem_Calloc(1, sizeof(*l));
    if (!l)
        return PyErr_NoMemory();
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_get_replica_desc(((mcpy_store *)o)->store, key.data, key.len, l);
    Py_END_ALLOW_THREADS
    if (r != MC_OK)
        l->n = 0;
    PyObject *ret = mcpy_replica_list_to_py(l);
    PyMem_Free(l);
    return ret;
}

static PyObject *store_batch_get_replica_desc(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"keys", NULL};
    PyObject *a_keys;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:batch_get_replica_desc", kw, &a_keys))
        return NULL;
    mcpy_keys keys;
    if (mcpy_keys_from(a_keys, "batch_get_replica_desc", "keys", &keys) < 0)
        return NULL;
    size_t n = keys.n;
    mc_store_replica_list *ls = PyMem_Calloc(n ? n : 1, sizeof(*ls));
    int *res = PyMem_Calloc(n ? n : 1, sizeof(int));
    PyObject *ret = NULL;
    if (!ls || !res) {
        PyErr_NoMemory();
        goto out;
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_replica_desc(((mcpy_store *)o)->store, keys.keys, n, ls, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyDict_New();
    if (!ret)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (res[i] != MC_OK)
            continue;
        PyObject *l = mcpy_replica_list_to_py(&ls[i]);
        if (!l || PyDict_SetItem(ret, PyTuple_GET_ITEM(keys.tuple, (Py_ssize_t)i), l) < 0) {
            Py_XDECREF(l);
            Py_CLEAR(ret);
            goto out;
        }
        Py_DECREF(l);
    }
out:
    PyMem_Free(ls);
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

/* ================================================================================== */
/* Registration                                                                        */
/* ================================================================================== */

static PyObject *store_register_buffer(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"buffer_ptr", "size", NULL};
    PyObject *a_ptr, *a_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:register_buffer", kw, &a_ptr, &a_size))
        return NULL;
    uint64_t ptr, size;
    if (mcpy_u64(a_ptr, "register_buffer", "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_size, "register_buffer", "size", &size) < 0)
        return NULL;
    int r;
    if (ptr == 0 || size == 0 || ptr + size < ptr || size > SIZE_MAX) {
        r = MC_INVALID_PARAMS;
    } else {
        Py_BEGIN_ALLOW_THREADS
        r = mc_store_register_buffer(((mcpy_store *)o)->store, (void *)(uintptr_t)ptr,
                                     (size_t)size);
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLong(r);
}

static PyObject *store_unregister_buffer(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"buffer_ptr", NULL};
    PyObject *a_ptr;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:unregister_buffer", kw, &a_ptr))
        return NULL;
    uint64_t ptr;
    if (mcpy_u64(a_ptr, "unregister_buffer", "buffer_ptr", &ptr) < 0)
        return NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_unregister_buffer(((mcpy_store *)o)->store, (void *)(uintptr_t)ptr);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(r);
}

/* ================================================================================== */
/* Method table                                                                        */
/* ================================================================================== */

#define KW (METH_VARARGS | METH_KEYWORDS)
#define M(name, fn, doc) {name, (PyCFunction)(void (*)(void))fn, KW, doc}

static PyMethodDef store_methods[] = {
    M("setup", store_setup,
      "setup(local_hostname: str, metadata_server: str, global_segment_size: int, "
      "local_buffer_size: int, protocol: str, rdma_devices: str, master_server_addr: str, "
      "engine=None, enable_ssd_offload=False, ssd_offload_path='', tenant_id='default', "
      "enable_client_http_server=False, client_http_port=9300) -> int\n"
      "setup(config: dict) -> int\n\n"
      "Connects to the master and contributes global_segment_size bytes (0: none) to the "
      "pool. local_hostname without ':port' gets a free port in 12300-14300. engine: the "
      "handle of mooncake.engine.TransferEngine().get_engine() to share. The dict form "
      "takes the same names (values through str(); sizes like '16MB'; "
      "local_hostname and metadata_server required; defaults 16 MiB / 16 MiB, tcp, "
      "127.0.0.1:50051). Returns 0 or a negative ErrorCode (-600 bad argument, -900 "
      "master unreachable, ...). Unknown keywords raise TypeError naming them. "
      "(upstream store_py.cpp setup / RealClient::setup_internal)"),
    M("init_all", store_init_all,
      "init_all(protocol, device_name, mount_segment_size=16 MiB) -> int: legacy setup "
      "with upstream's fixed values (localhost:12345, etcd 127.0.0.1:2379, 1 GiB local "
      "buffer). -600 when already set up."),
    {"close", store_close, METH_NOARGS,
     "close() -> int: unmounts this client's segment (its replicas disappear), stops its "
     "threads, releases its memory. Idempotent (0 when not set up); also runs when the "
     "object is garbage-collected. BufferHandles stay valid."},
    {"get_hostname", store_get_hostname, METH_NOARGS,
     "get_hostname() -> str: this client's segment name 'host:port' (usable as "
     "ReplicateConfig.preferred_segment); '' when not set up."},
    {"health_check", store_health_check, METH_NOARGS,
     "health_check() -> int: 0 healthy, 1 not set up / closed, 2 master unreachable (last "
     "heartbeat failed)."},
    M("put", store_put,
      "put(key: str|bytes, value: buffer, config=ReplicateConfig()) -> int: stores a copy "
      "of value. 0 (also when the key exists: the old value is kept), -600 bad key (empty "
      "or > 4096 bytes) or config, -200 no space even after eviction, -800 transfer "
      "failed, -900 master unreachable."),
    M("put_parts", store_put_parts,
      "put_parts(key, *parts, config=ReplicateConfig()) -> int: the object is the "
      "concatenation of parts (1-D bytes-like, else RuntimeError). Returns as put."),
    M("put_batch", store_put_batch,
      "put_batch(keys, values, config=ReplicateConfig()) -> int: 0 when every put "
      "succeeded, else the first error; -600 when the lists differ in length."),
    M("put_from", store_put_from,
      "put_from(key, buffer_ptr: int, size: int, config=ReplicateConfig()) -> int: stores "
      "size bytes at buffer_ptr (registration not required). Returns as put."),
    M("put_from_with_metadata", store_put_from_with_metadata,
      "put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size, metadata_size, "
      "config=ReplicateConfig()) -> int: the object is [metadata][data]."),
    M("batch_put_from", store_batch_put_from,
      "batch_put_from(keys, buffer_ptrs, sizes, config=ReplicateConfig()) -> list[int]: "
      "0 or a negative code per key; all -600 when the lists differ in length; [] for no "
      "keys."),
    M("batch_put_from_multi_buffers", store_batch_put_from_multi_buffers,
      "batch_put_from_multi_buffers(keys, all_buffer_ptrs: list[list[int]], all_sizes: "
      "list[list[int]], config=ReplicateConfig()) -> list[int]: object i is the "
      "concatenation of its buffers. 0 / negative per key (-200 out of space)."),
    M("upsert", store_upsert,
      "upsert(key, value, config=ReplicateConfig()) -> int: insert or replace. 0, -706 "
      "while a reader holds a lease on the old value, else as put."),
    M("upsert_parts", store_upsert_parts, "upsert_parts(key, *parts, config=...) -> int."),
    M("upsert_batch", store_upsert_batch,
      "upsert_batch(keys, values, config=...) -> int: 0 or the first error."),
    M("upsert_from", store_upsert_from,
      "upsert_from(key, buffer_ptr, size, config=...) -> int."),
    M("batch_upsert_from", store_batch_upsert_from,
      "batch_upsert_from(keys, buffer_ptrs, sizes, config=...) -> list[int]."),
    M("get", store_get,
      "get(key) -> bytes: a copy of the object; b'' on a miss, on any error, when not set "
      "up (and for a zero-length object)."),
    M("get_batch", store_get_batch,
      "get_batch(keys) -> list[bytes]: b'' per miss; [] for no keys."),
    M("get_buffer", store_get_buffer,
      "get_buffer(key) -> BufferHandle | None: the object's bytes in this client's memory "
      "(no further copy); None on a miss or error. A zero-length object gives an empty "
      "handle."),
    M("batch_get_buffer", store_batch_get_buffer,
      "batch_get_buffer(keys) -> list[BufferHandle | None]."),
    M("get_into", store_get_into,
      "get_into(key, buffer_ptr: int, size: int) -> int: reads the object into the "
      "size-byte buffer at buffer_ptr; returns the object's size (the buffer may be "
      "larger), -600 when the buffer is smaller, -704 miss, -707 lease expired during the "
      "read (buffer contents undefined), -800 transfer failed."),
    M("batch_get_into", store_batch_get_into,
      "batch_get_into(keys, buffer_ptrs, sizes) -> list[int]: bytes or a negative code per "
      "key; duplicate keys fill each buffer; all -600 when the lists differ in length."),
    M("batch_get_into_multi_buffers", store_batch_get_into_multi_buffers,
      "batch_get_into_multi_buffers(keys, all_buffer_ptrs, all_sizes, "
      "prefer_alloc_in_same_node=False) -> list[int]: scatters object i over its buffers "
      "in order; its size, or -600 when they hold fewer bytes, or as get_into."),
    M("is_exist", store_is_exist,
      "is_exist(key) -> int: 1 exists, 0 absent (or still being written), negative on "
      "error. Grants a read lease (so remove() without force gets -706 for a while)."),
    M("batch_is_exist", store_batch_is_exist,
      "batch_is_exist(keys) -> list[int]: 1 / 0 / negative per key."),
    M("get_size", store_get_size,
      "get_size(key) -> int: the object's size in bytes, or -704 on a miss."),
    M("remove", store_remove,
      "remove(key, force=False) -> int: 0, -704 miss, -706 a read lease is active (unless "
      "force), -703 a write is in flight."),
    M("batch_remove", store_batch_remove,
      "batch_remove(keys, force=False) -> list[int]."),
    M("remove_by_regex", store_remove_by_regex,
      "remove_by_regex(regex_pattern: str, force=False) -> int: number of objects removed "
      "whose key matches (search, PCRE2), leased ones skipped unless force; -600 bad "
      "pattern."),
    M("remove_all", store_remove_all,
      "remove_all(force=False) -> int: number removed; leased objects skipped unless "
      "force."),
    M("register_buffer", store_register_buffer,
      "register_buffer(buffer_ptr: int, size: int) -> int: registers memory with the "
      "transfer engine (not required for put_from/get_into here). 0 or negative."),
    M("unregister_buffer", store_unregister_buffer,
      "unregister_buffer(buffer_ptr: int) -> int: 0, or -600 when not registered."),
    M("get_replica_desc", store_get_replica_desc,
      "get_replica_desc(key) -> list[ReplicaDescriptor]: [] on a miss or error."),
    M("batch_get_replica_desc", store_batch_get_replica_desc,
      "batch_get_replica_desc(keys) -> dict[key, list[ReplicaDescriptor]]: missing keys "
      "omitted."),
    {NULL, NULL, 0, NULL},
};

PyTypeObject mcpy_store_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.MooncakeDistributedStore",
    .tp_basicsize = sizeof(mcpy_store),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "MooncakeDistributedStore(): a client of the distributed KV cache. Call "
              "setup(...) first; every method then talks to the master and moves bytes "
              "client to client. Methods release the GIL and are thread-safe. Return "
              "conventions follow upstream exactly (see each method).",
    .tp_new = store_new,
    .tp_init = store_init,
    .tp_dealloc = store_dealloc,
    .tp_weaklistoffset = offsetof(mcpy_store, weakreflist),
};

/* ================================================================================== */
/* Module functions                                                                    */
/* ================================================================================== */

/* bind_to_numa_node(node): runs the calling thread on the CPUs of NUMA node `node` and
 * prefers its memory (upstream: numa_run_on_node + numa_set_preferred). Bad input or a
 * missing node only logs a warning; returns None. */
static PyObject *mod_bind_to_numa_node(PyObject *m, PyObject *arg)
{
    (void)m;
    long long node;
    if (mcpy_int(arg, "bind_to_numa_node", "node", INT32_MIN, INT32_MAX, &node) < 0)
        return NULL;
    if (node < 0 || node >= 1024) {
        mc_log(MC_LOG_WARN, TAG, "bind_to_numa_node: invalid node %lld", node);
        Py_RETURN_NONE;
    }
    char path[96], list[4096];
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%lld/cpulist", node);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(list, sizeof(list), f)) {
        if (f)
            fclose(f);
        mc_log(MC_LOG_WARN, TAG, "bind_to_numa_node: node %lld not found", node);
        Py_RETURN_NONE;
    }
    fclose(f);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (char *p = list; *p && *p != '\n';) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p)
            break;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && c < CPU_SETSIZE; c++)
            if (c >= 0)
                CPU_SET((int)c, &set);
        p = (*end == ',') ? end + 1 : end;
    }
    if (CPU_COUNT(&set) == 0 || sched_setaffinity(0, sizeof(set), &set) != 0)
        mc_log(MC_LOG_WARN, TAG, "bind_to_numa_node: cannot run on node %lld", node);
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
    mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
    /* MPOL_PREFERRED = 1 */
    if (syscall(SYS_set_mempolicy, 1, mask, 1024ul + 1) != 0)
        mc_log(MC_LOG_DEBUG, TAG, "bind_to_numa_node: set_mempolicy: %s", strerror(errno));
    Py_RETURN_NONE;
}

static PyMethodDef module_funcs[] = {
    {"bind_to_numa_node", mod_bind_to_numa_node, METH_O,
     "bind_to_numa_node(node: int) -> None: run this thread on NUMA node `node`'s CPUs "
     "and prefer its memory; a bad node only logs a warning."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef store_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake.store",
    .m_doc = "Mooncake distributed KV-cache store (mooncake-c).\n\n"
             "MooncakeDistributedStore: the client (setup, put/get, batch and zero-copy "
             "forms, tensors). ReplicateConfig: placement options. BufferHandle, "
             "ReplicaDescriptor, MooncakeHostMemAllocator, bind_to_numa_node. Enums: "
             "ErrorCode, ReplicaStatus, SoftPinAction, ObjectDataType.",
    .m_size = -1,
    .m_methods = module_funcs,
};

/* Adds the tensor methods (store_tensor.c) to the class's method table. */
static PyMethodDef *all_store_methods(void)
{
    size_t a = 0, b = 0;
    while (store_methods[a].ml_name)
        a++;
    while (mcpy_tensor_methods[b].ml_name)
        b++;
    static PyMethodDef *all;
    if (!all) {
        all = PyMem_Calloc(a + b + 1, sizeof(PyMethodDef));
        if (!all)
            return NULL;
        memcpy(all, store_methods, a * sizeof(PyMethodDef));
        memcpy(all + a, mcpy_tensor_methods, b * sizeof(PyMethodDef));
    }
    return all;
}

PyMODINIT_FUNC PyInit_store(void);
PyMODINIT_FUNC PyInit_store(void)
{
    PyObject *m = PyModule_Create(&store_module);
    if (!m)
        return NULL;
    if (mc__py_add_error_code(m) < 0 || mc__py_route_logs() < 0 || mcpy_types_init(m) < 0)
        goto fail;
    if (!mcpy_store_type.tp_methods) {
        mcpy_store_type.tp_methods = all_store_methods();
        if (!mcpy_store_type.tp_methods) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    if (PyType_Ready(&mcpy_store_type) < 0 ||
        PyModule_AddObjectRef(m, "MooncakeDistributedStore", (PyObject *)&mcpy_store_type) < 0)
        goto fail;
    if (PyModule_AddFunctions(m, mcpy_tensor_module_funcs) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
