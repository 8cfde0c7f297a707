/* store_setup.c: the lifecycle methods of MooncakeDistributedStore: setup (keyword and
 * dict forms), init_all, close, get_hostname, health_check. The object itself (new,
 * dealloc) is store_module.c's; data methods live in the other store_*.c files.
 * Contract: ../shared/API.md §2; upstream store_py.cpp setup / RealClient::setup_internal. */
#include "store_py.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/log.h"
#include "mooncake/options.h"
#include "mooncake/status.h"

#define TAG MCPY_TAG

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

/* The dict form's aliases: the names the config files and clients write (LMCache's
 * MooncakeStoreConfig passes master_server_address / device_name straight through from
 * its YAML extra_config; SGLang and vLLM files use them too) for upstream's setup-dict
 * names. When a dict holds both, upstream's name wins and a differing alias is logged. */
static const char *const setup_dict_aliases[][2] = {
    {"master_server_address", "master_server_addr"},
    {"device_name", "rdma_devices"},
    {NULL, NULL},
};

/* setup(config: dict): every value goes through str() (upstream ConfigDict). */
static PyObject *setup_dict(mcpy_store *self, PyObject *dict)
{
    static const char *const known[] = {
        "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
        "protocol", "rdma_devices", "master_server_addr", "ipc_socket_path",
        "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
        "client_http_port", "auth_token", "auth_token_file", "storage_root_dir", NULL,
    };
    enum { N = 16 }; /* val[i] is the str() of known[i], borrowed from strs[i] */
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
        const char *alias = NULL; /* set when ks is an alias of known[idx] */
        for (int a = 0; idx < 0 && setup_dict_aliases[a][0]; a++)
            if (!strcmp(ks, setup_dict_aliases[a][0]))
                for (int i = 0; known[i]; i++)
                    if (!strcmp(setup_dict_aliases[a][1], known[i])) {
                        idx = i;
                        alias = ks;
                    }
        PyObject *w = alias ? PyDict_GetItemString(dict, known[idx]) : NULL;
        if (w) { /* upstream's name is in the dict too: it wins */
            if (PyObject_RichCompareBool(w, v, Py_EQ) != 1)
                mc_log(MC_LOG_WARN, TAG, "setup(config): both '%s' and '%s' given; using "
                                         "'%s'", alias, known[idx], known[idx]);
            PyErr_Clear();
            continue;
        }
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
    /* sizes and bools in the options syntax (mooncake/options.h), as upstream's
     * ConfigDict strings: "16MB", "1gb", "true", "0", ... */
    if (val[2] && mc_parse_size(val[2], &cfg.global_segment_size) < 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup(config): bad global_segment_size '%s'", val[2]);
        bad = 1;
    }
    if (val[3] && mc_parse_size(val[3], &cfg.local_buffer_size) < 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup(config): bad local_buffer_size '%s'", val[3]);
        bad = 1;
    }
    if (val[4] && *val[4])
        cfg.protocol = val[4];
    if (val[5])
        cfg.rdma_devices = val[5];
    if (val[6] && *val[6])
        cfg.master_server_addr = val[6];
    if (val[8] && mc_parse_bool(val[8], &cfg.enable_ssd_offload) < 0) {
        mc_log(MC_LOG_ERROR, TAG, "setup(config): bad enable_ssd_offload '%s'", val[8]);
        bad = 1;
    }
    if (val[9])
        cfg.ssd_offload_path = val[9];
    if (val[10] && *val[10])
        cfg.tenant_id = val[10];
    if (val[11] && mc_parse_bool(val[11], &cfg.enable_client_http_server) < 0) {
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
    if (val[13] && *val[13])
        cfg.auth_token = val[13];
    if (val[14] && *val[14])
        cfg.auth_token_file = val[14];
    if (val[15] && *val[15]) /* LMCache's key: the shared-FS directory (docs/ssd-tier.md) */
        cfg.storage_root_dir = val[15];
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

/* A bool keyword of setup(): what upstream's pybind11 bool takes (True/False, or an
 * object with __bool__ such as an int or numpy.bool_); a str or bytes ("false" would be
 * true) is a TypeError naming the keyword. Returns 0/1, or -1 with the error set. */
static int flag_arg(PyObject *o, const char *name)
{
    if (PyUnicode_Check(o) || PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "setup(): %s must be a bool, not %s", name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    return PyObject_IsTrue(o);
}

/* setup(...) keyword form, or setup(config: dict) / setup(config=dict) (dispatched on
 * the argument shape before any parsing, as upstream's two pybind11 overloads). */
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
                         "client_http_port", "auth_token", "auth_token_file", NULL};
    PyObject *a_host, *a_meta, *a_gseg, *a_lbuf, *a_proto, *a_dev, *a_master;
    PyObject *a_engine = Py_None, *a_ssd = Py_False, *a_ssd_path = NULL, *a_tenant = NULL;
    PyObject *a_http = Py_False, *a_http_port = NULL, *a_token = NULL, *a_token_file = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO|OOOOOO$OO:setup", kw, &a_host,
                                     &a_meta, &a_gseg, &a_lbuf, &a_proto, &a_dev, &a_master,
                                     &a_engine, &a_ssd, &a_ssd_path, &a_tenant, &a_http,
                                     &a_http_port, &a_token, &a_token_file))
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
    if ((t = flag_arg(a_ssd, "enable_ssd_offload")) < 0)
        return NULL;
    cfg.enable_ssd_offload = t;
    if ((t = flag_arg(a_http, "enable_client_http_server")) < 0)
        return NULL;
    cfg.enable_client_http_server = t;
    /* engine=: the capsule keeps the TransferEngine alive while the store uses it */
    PyObject *keep = NULL;
    if (a_engine != Py_None) {
        struct mc_te *te;
        if (mc__py_engine_handle_get(a_engine, &te, &keep) < 0)
            return NULL;
        cfg.engine = te;
    }
    /* auth_token: the secret itself, str or bytes (no NUL inside); None = not given */
    PyObject *tok_bytes = NULL;
    if (a_token && a_token != Py_None) {
        if (PyUnicode_Check(a_token)) {
            tok_bytes = PyUnicode_AsUTF8String(a_token);
            if (!tok_bytes) {
                Py_XDECREF(keep);
                return NULL;
            }
        } else if (PyBytes_Check(a_token)) {
            tok_bytes = Py_NewRef(a_token);
        } else {
            PyErr_SetString(PyExc_TypeError, "setup(): auth_token must be str or bytes");
            Py_XDECREF(keep);
            return NULL;
        }
        if ((size_t)PyBytes_GET_SIZE(tok_bytes) != strlen(PyBytes_AS_STRING(tok_bytes))) {
            Py_DECREF(tok_bytes);
            PyErr_SetString(PyExc_ValueError, "setup(): auth_token must not contain NUL");
            Py_XDECREF(keep);
            return NULL;
        }
        cfg.auth_token = PyBytes_AS_STRING(tok_bytes);
    }
    if (a_token_file && a_token_file != Py_None &&
        mcpy_cstr(a_token_file, "setup", "auth_token_file", &cfg.auth_token_file) < 0) {
        Py_XDECREF(tok_bytes);
        Py_XDECREF(keep);
        return NULL;
    }
    PyObject *ret = run_setup(self, &cfg, keep);
    Py_XDECREF(tok_bytes);
    return ret;
}

/* init_all(protocol, device_name, mount_segment_size=16 MiB): legacy setup. */
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

/* close(): idempotent; the engine reference goes once the store is really down. */
static PyObject *store_close(PyObject *o, PyObject *unused)
{
    (void)unused;
    mcpy_store *self = (mcpy_store *)o;
    int rc;
    mcpy_sessions_drop(self); /* open put sessions are revoked, get sessions dropped */
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

static PyObject *store_get_client_http_port(PyObject *o, PyObject *unused)
{
    (void)unused;
    int rc;
    /* takes the store's call lock: not while holding the GIL (see get_hostname) */
    Py_BEGIN_ALLOW_THREADS
    rc = mc_store_client_http_port(((mcpy_store *)o)->store);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
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

PyMethodDef mcpy_setup_methods[] = {
    MCPY_M("setup", store_setup,
      "setup(local_hostname: str, metadata_server: str, global_segment_size: int, "
      "local_buffer_size: int, protocol: str, rdma_devices: str, master_server_addr: str, "
      "engine=None, enable_ssd_offload=False, ssd_offload_path='', tenant_id='default', "
      "enable_client_http_server=False, client_http_port=9300, *, "
      "auth_token: str | bytes | None = None, auth_token_file: str | None = None) -> int\n"
      "setup(config: dict) -> int\n\n"
      "auth_token: the cluster secret itself (str or bytes); auth_token_file: a token file "
      "(mode 0600); neither: the file MC_AUTH_TOKEN_FILE names; none: open (docs/"
      "security.md). "
      "Connects to the master and contributes global_segment_size bytes (0: none) to the "
      "pool. local_hostname without ':port' gets a free port in 12300-14300. engine: the "
      "handle of mooncake.engine.TransferEngine().get_engine() to share. The dict form "
      "takes the same names (values through str(); sizes like '16MB'; the aliases "
      "master_server_address and device_name are read as master_server_addr and "
      "rdma_devices, upstream's names winning when both are given; "
      "local_hostname and metadata_server required; defaults 16 MiB / 16 MiB, tcp, "
      "127.0.0.1:50051). Returns 0 or a negative ErrorCode (-600 bad argument, e.g. a "
      "metadata URL without /metadata; -900 master or metadata server unreachable, the "
      "log names the address and what to check; ...). Restarted under its old "
      "local_hostname 'host:port', a client takes over its own stale metadata entries "
      "when the previous owner provably is gone (same host id, its ports refuse "
      "connections); a live owner under that name keeps it and setup returns -705. "
      "Unknown keywords raise TypeError naming them. "
      "(upstream store_py.cpp setup / RealClient::setup_internal)"),
    MCPY_M("init_all", store_init_all,
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
    {"get_client_http_port", store_get_client_http_port, METH_NOARGS,
     "get_client_http_port() -> int: the port of the client HTTP server (setup with "
     "enable_client_http_server=True; client_http_port=0 picks a free one): GET /health, "
     "/metrics, /metrics/summary. 0 when set up without it, -600 when not set up. "
     "mooncake-c only (upstream has no getter)."},
    {"health_check", store_health_check, METH_NOARGS,
     "health_check() -> int: 0 healthy, 1 not set up / closed, 2 master unreachable (last "
     "heartbeat failed)."},
    {NULL, NULL, 0, NULL},
};
