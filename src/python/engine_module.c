/* engine_module.c: the `mooncake.engine` extension module (CPython C API, no pybind11).
 *
 * Contract: ../shared/API.md §1 and §3. Upstream: the pybind module `engine` in
 * mooncake-integration/transfer_engine/transfer_engine_py.cpp (TransferEnginePy), whose
 * method names, keyword names, defaults and return conventions are kept here; the
 * engine underneath is ours (include/mooncake/transfer_engine.h).
 *
 * Module items: TransferEngine, TransferOpcode (IntEnum Read=0, Write=1, also exported
 * as module-level Read/Write and as TransferEngine.TransferOpcode, as upstream's
 * export_values), TransferNotify, InnerTransferEngine (the opaque handle get_engine()
 * returns; py_common.h says how mooncake.store reads it), ErrorCode, SUPPORT_* flags.
 *
 * Conventions (API.md §1):
 *   - status methods return 0 or a negative upstream status code (ErrorCode);
 *   - async submits return a batch id (> 0) or 0 on failure; transfer_check_status
 *     returns 1 done / 0 running / -1 failed / -2 timed out;
 *   - wrong argument types or counts raise TypeError naming the argument (an int
 *     argument outside [0, 2**64) is a type error, as pybind11's uint64 conversion);
 *     byte ranges handed to write_bytes_to_buffer/read_bytes_from_buffer that do not
 *     lie inside memory this engine registered or allocated raise ValueError.
 *
 * Local memory: every local range a transfer reads or writes must lie inside memory
 * registered through this object (register_memory, batch_register_memory) or allocated
 * by allocate_managed_buffer, as upstream's contract says ("source must be registered
 * local memory"); anything else returns INVALID_PARAMS instead of touching an
 * arbitrary address. Remote ranges are checked by the peer.
 *
 * Threads: the GIL is released around every call that may block (initialize,
 * (un)registration, which republishes the descriptor, every transfer and wait, segment
 * lookups, probes) and while the engine is destroyed. The tracked-range table is only
 * touched with the GIL held.
 */
#include "py_common.h"

#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"

#define PY_TAG "py.engine"

/* ------------------------------------------------------------------------------------ */
/* Argument helpers: every message names the method and the argument.                  */
/* ------------------------------------------------------------------------------------ */

/* An int in [0, 2**64) (anything with __index__: int, bool, numpy integers). */
static int arg_u64(const char *fn, const char *name, PyObject *o, uint64_t *out)
{
    PyObject *idx = PyNumber_Index(o);
    if (!idx) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be an int, not %.100s", fn,
                     name, Py_TYPE(o)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(idx);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be an int in [0, 2**64), got %R", fn, name,
                     idx);
        Py_DECREF(idx);
        return -1;
    }
    Py_DECREF(idx);
    *out = (uint64_t)v;
    return 0;
}

/* A str (UTF-8) or bytes without NUL characters; None gives NULL when allow_none.
 * The pointer is borrowed from o (valid while o lives). */
static int arg_str(const char *fn, const char *name, PyObject *o, int allow_none,
                   const char **out)
{
    return mc__py_cstr(fn, name, o, allow_none, out);
}

/* A sequence of ints in [0, 2**64) (list, tuple, numpy array...; not str/bytes).
 * *out: PyMem_Malloc'ed array of *n entries (NULL when empty); free with PyMem_Free. */
static int arg_u64_list(const char *fn, const char *name, PyObject *o, uint64_t **out,
                        size_t *n)
{
    *out = NULL;
    *n = 0;
    if (PyUnicode_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o) ||
        !PySequence_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be a list of ints, not %.100s", fn, name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be a list of ints, not %.100s", fn, name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    uint64_t *v = NULL;
    if (len > 0) {
        v = PyMem_Malloc((size_t)len * sizeof(*v));
        if (!v) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *idx = PyNumber_Index(items[i]);
        unsigned long long x = 0;
        if (idx) {
            x = PyLong_AsUnsignedLongLong(idx);
            if (x == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "%s(): argument '%s'[%zd] must be an int in [0, 2**64), got %R",
                             fn, name, i, idx);
                Py_DECREF(idx);
                goto bad;
            }
            Py_DECREF(idx);
        } else {
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument '%s'[%zd] must be an int, not %.100s", fn, name, i,
                         Py_TYPE(items[i])->tp_name);
            goto bad;
        }
        v[i] = (uint64_t)x;
    }
    Py_DECREF(seq);
    *out = v;
    *n = (size_t)len;
    return 0;
bad:
    Py_DECREF(seq);
    PyMem_Free(v);
    return -1;
}

/* ------------------------------------------------------------------------------------ */
/* TransferOpcode                                                                      */
/* ------------------------------------------------------------------------------------ */

/* An opcode: a TransferOpcode member or a plain int 0 (Read) / 1 (Write). */
static int arg_opcode(const char *fn, PyObject *o, int *out)
{
    uint64_t v;
    if (arg_u64(fn, "opcode", o, &v) < 0 || v > 1) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'opcode' must be TransferOpcode.Read or "
                     "TransferOpcode.Write, not %R",
                     fn, o);
        return -1;
    }
    *out = v == 0 ? MC_TE_OP_READ : MC_TE_OP_WRITE;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* TransferNotify                                                                      */
/* ------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *name; /* str or bytes, never NULL after init */
    PyObject *msg;  /* str or bytes, never NULL after init */
} NotifyObject;

static PyTypeObject NotifyType;

static int notify_check_text(const char *what, PyObject *v)
{
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete TransferNotify.%s", what);
        return -1;
    }
    if (!PyUnicode_Check(v) && !PyBytes_Check(v)) {
        PyErr_Format(PyExc_TypeError, "TransferNotify.%s must be str, not %.100s", what,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *notify_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    NotifyObject *self = (NotifyObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->name = PyUnicode_FromString("");
    self->msg = PyUnicode_FromString("");
    if (!self->name || !self->msg) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int notify_init(NotifyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "msg", NULL};
    PyObject *name = NULL, *msg = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:TransferNotify", kwlist, &name, &msg))
        return -1;
    if ((name == NULL) != (msg == NULL)) {
        PyErr_SetString(PyExc_TypeError,
                        "TransferNotify() takes no arguments or both 'name' and 'msg'");
        return -1;
    }
    if (name) {
        if (notify_check_text("name", name) < 0 || notify_check_text("msg", msg) < 0)
            return -1;
        Py_INCREF(name);
        Py_SETREF(self->name, name);
        Py_INCREF(msg);
        Py_SETREF(self->msg, msg);
    }
    return 0;
}

static void notify_dealloc(NotifyObject *self)
{
    Py_XDECREF(self->name);
    Py_XDECREF(self->msg);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *notify_get_name(NotifyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->name);
}

static int notify_set_name(NotifyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (notify_check_text("name", v) < 0)
        return -1;
    Py_INCREF(v);
    Py_SETREF(self->name, v);
    return 0;
}

static PyObject *notify_get_msg(NotifyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->msg);
}

static int notify_set_msg(NotifyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (notify_check_text("msg", v) < 0)
        return -1;
    Py_INCREF(v);
    Py_SETREF(self->msg, v);
    return 0;
}

static PyObject *notify_repr(NotifyObject *self)
{
    return PyUnicode_FromFormat("TransferNotify(name=%R, msg=%R)", self->name, self->msg);
}

static PyObject *notify_richcompare(PyObject *a, PyObject *b, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(a, &NotifyType) ||
        !PyObject_TypeCheck(b, &NotifyType))
        Py_RETURN_NOTIMPLEMENTED;
    NotifyObject *x = (NotifyObject *)a, *y = (NotifyObject *)b;
    int eq = PyObject_RichCompareBool(x->name, y->name, Py_EQ);
    if (eq < 0)
        return NULL;
    if (eq) {
        eq = PyObject_RichCompareBool(x->msg, y->msg, Py_EQ);
        if (eq < 0)
            return NULL;
    }
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

/* The UTF-8 bytes of a notify text (str with surrogateescape, or bytes as they are).
 * Returns a new bytes object or NULL with an exception. */
static PyObject *notify_text_bytes(PyObject *v)
{
    if (PyBytes_Check(v))
        return Py_NewRef(v);
    return PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape");
}

static PyGetSetDef notify_getset[] = {
    {"name", (getter)notify_get_name, (setter)notify_set_name,
     "str: the notification's name (upstream NotifyDesc.name).", NULL},
    {"msg", (getter)notify_get_msg, (setter)notify_set_msg,
     "str: the notification's message (upstream NotifyDesc.notify_msg). Received "
     "messages that are not valid UTF-8 keep their bytes as surrogate escapes: "
     "msg.encode('utf-8', 'surrogateescape') gives them back.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject NotifyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.engine.TransferNotify",
    .tp_basicsize = sizeof(NotifyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "TransferNotify() or TransferNotify(name: str, msg: str)\n\n"
              "A notification delivered to the peer after the data of transfer_sync / "
              "batch_transfer_sync (argument notify=) and returned by get_notifies(). "
              "name and msg are read/write str attributes (bytes are accepted too). "
              "Limits: name <= 4096 bytes, msg <= 1 MiB (UTF-8). "
              "Upstream: TransferEnginePy::TransferNotify.",
    .tp_new = notify_new,
    .tp_init = (initproc)notify_init,
    .tp_dealloc = (destructor)notify_dealloc,
    .tp_repr = (reprfunc)notify_repr,
    .tp_richcompare = notify_richcompare,
    .tp_getset = notify_getset,
};

/* ------------------------------------------------------------------------------------ */
/* InnerTransferEngine: the opaque handle of get_engine()                              */
/* ------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *capsule; /* PyCapsule MC_PY_TE_CAPSULE; its context owns the engine object */
} InnerObject;

static void inner_dealloc(InnerObject *self)
{
    Py_XDECREF(self->capsule);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *inner_get_capsule(InnerObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->capsule);
}

static PyGetSetDef inner_getset[] = {
    {"_mc_te", (getter)inner_get_capsule, NULL,
     "PyCapsule named \"" MC_PY_TE_CAPSULE "\" holding the mc_te * (for mooncake.store).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject InnerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.engine.InnerTransferEngine",
    .tp_basicsize = sizeof(InnerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Opaque handle to an initialized transfer engine, returned by "
              "TransferEngine.get_engine() and accepted by "
              "mooncake.store.MooncakeDistributedStore.setup(engine=...). It keeps the "
              "TransferEngine alive. Cannot be created from Python. "
              "Upstream: InnerTransferEngine (shared_ptr<TransferEngine>).",
    .tp_dealloc = (destructor)inner_dealloc,
    .tp_getset = inner_getset,
};

/* ------------------------------------------------------------------------------------ */
/* TransferEngine                                                                      */
/* ------------------------------------------------------------------------------------ */

enum { RANGE_REGISTERED = 0, RANGE_MANAGED = 1 };

typedef struct {
    uint64_t addr, len;
    int kind; /* RANGE_* */
} py_range;

typedef struct {
    PyObject_HEAD
    mc_te *te;       /* NULL until initialize succeeded; then fixed until dealloc */
    int initializing; /* an initialize call is in flight (GIL released) */
    /* Local memory this object registered or allocated; guarded by the GIL. */
    py_range *ranges;
    size_t nranges, cap;
} TEObject;

static PyTypeObject TEType;

static int ranges_add(TEObject *self, uint64_t addr, uint64_t len, int kind)
{
    for (size_t i = 0; i < self->nranges; i++)
        if (self->ranges[i].addr == addr && self->ranges[i].len == len &&
            self->ranges[i].kind == kind)
            return 0; /* re-registration of the same buffer: no-op, as the engine */
    if (self->nranges == self->cap) {
        size_t ncap = self->cap ? self->cap * 2 : 16;
        py_range *r = PyMem_Realloc(self->ranges, ncap * sizeof(*r));
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        self->ranges = r;
        self->cap = ncap;
    }
    self->ranges[self->nranges++] = (py_range){addr, len, kind};
    return 0;
}

/* Removes the first range of `kind` starting at addr (and of length len when len != 0). */
static void ranges_remove(TEObject *self, uint64_t addr, uint64_t len, int kind)
{
    for (size_t i = 0; i < self->nranges; i++) {
        py_range *r = &self->ranges[i];
        if (r->addr == addr && r->kind == kind && (len == 0 || r->len == len)) {
            self->ranges[i] = self->ranges[--self->nranges];
            return;
        }
    }
}

/* Whether [addr, addr+len) lies inside one tracked range. len 0 is always fine. */
static int ranges_contain(const TEObject *self, uint64_t addr, uint64_t len)
{
    if (len == 0)
        return 1;
    if (addr + len < addr)
        return 0;
    for (size_t i = 0; i < self->nranges; i++) {
        const py_range *r = &self->ranges[i];
        if (addr >= r->addr && addr + len <= r->addr + r->len)
            return 1;
    }
    return 0;
}

static PyObject *te_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    TEObject *self = (TEObject *)type->tp_alloc(type, 0);
    return (PyObject *)self;
}

static int te_init(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {NULL};
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, ":TransferEngine", kwlist))
        return -1;
    return 0;
}

static void te_dealloc(TEObject *self)
{
    mc_te *te = self->te;
    self->te = NULL;
    if (te) {
        Py_BEGIN_ALLOW_THREADS
        mc_te_destroy(te);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(self->ranges);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The engine if initialized; NULL otherwise (no exception: callers return their
 * failure value, as upstream methods called before initialize fail by return code). */
static mc_te *te_of(TEObject *self)
{
    return self->te;
}

static PyObject *ret_int(long v)
{
    return PyLong_FromLong(v);
}

/* ---- initialize ---- */

static PyObject *do_initialize(TEObject *self, const char *fn, const char *host,
                               const char *conn, const char *proto, const char *dev)
{
    if (self->te || self->initializing) {
        mc_log(MC_LOG_ERROR, PY_TAG, "%s: the engine is already initialized", fn);
        return ret_int(MC_INVALID_PARAMS);
    }
    mc_te *te = NULL;
    int rc = mc_te_create(NULL, &te);
    if (rc != MC_OK)
        return ret_int(rc);
    self->initializing = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_initialize(te, host, conn, proto, dev);
    if (rc != MC_OK) {
        mc_te_destroy(te);
        te = NULL;
    }
    Py_END_ALLOW_THREADS
    self->initializing = 0;
    if (rc == MC_OK)
        self->te = te;
    return ret_int(rc);
}

static PyObject *te_initialize(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"local_hostname", "metadata_server", "protocol", "device_name",
                             NULL};
    PyObject *a, *b, *c, *d;
    const char *host, *conn, *proto, *dev;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:initialize", kwlist, &a, &b, &c, &d))
        return NULL;
    if (arg_str("initialize", "local_hostname", a, 0, &host) < 0 ||
        arg_str("initialize", "metadata_server", b, 0, &conn) < 0 ||
        arg_str("initialize", "protocol", c, 1, &proto) < 0 ||
        arg_str("initialize", "device_name", d, 1, &dev) < 0)
        return NULL;
    /* Upstream parseConnectionString: "proto://rest" as given, P2PHANDSHAKE, anything
     * else is etcd. mc_metadata_parse_conn applies the same rules. */
    return do_initialize(self, "initialize", host, conn, proto, dev);
}

static PyObject *te_initialize_ext(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"local_hostname", "metadata_server", "protocol",
                             "device_name", "metadata_type", NULL};
    PyObject *a, *b, *c, *d, *e;
    const char *host, *server, *proto, *dev, *type;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO:initialize_ext", kwlist, &a, &b, &c,
                                     &d, &e))
        return NULL;
    if (arg_str("initialize_ext", "local_hostname", a, 0, &host) < 0 ||
        arg_str("initialize_ext", "metadata_server", b, 0, &server) < 0 ||
        arg_str("initialize_ext", "protocol", c, 1, &proto) < 0 ||
        arg_str("initialize_ext", "device_name", d, 1, &dev) < 0 ||
        arg_str("initialize_ext", "metadata_type", e, 0, &type) < 0)
        return NULL;
    /* Upstream buildConnString: P2PHANDSHAKE and strings with "://" as they are,
     * otherwise metadata_type + "://" + metadata_server. */
    if (strcmp(server, MC_METADATA_P2PHANDSHAKE) == 0 || strstr(server, "://"))
        return do_initialize(self, "initialize_ext", host, server, proto, dev);
    PyObject *conn = PyUnicode_FromFormat("%s://%s", type, server);
    if (!conn)
        return NULL;
    const char *cs = PyUnicode_AsUTF8(conn);
    PyObject *r = cs ? do_initialize(self, "initialize_ext", host, cs, proto, dev) : NULL;
    Py_DECREF(conn);
    return r;
}

static PyObject *te_get_rpc_port(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    mc_te *te = te_of(self);
    return ret_int(te ? mc_te_get_rpc_port(te) : -1);
}

/* ---- memory ---- */

static int is_metadata_error(int rc)
{
    /* The engine keeps (and serves) a registration whose republish failed. */
    return rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT;
}

static PyObject *te_register_memory(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addr", "capacity", "location", NULL};
    PyObject *a, *b, *c = NULL;
    uint64_t addr, len;
    const char *loc = "*";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:register_memory", kwlist, &a, &b, &c))
        return NULL;
    if (arg_u64("register_memory", "buffer_addr", a, &addr) < 0 ||
        arg_u64("register_memory", "capacity", b, &len) < 0 ||
        (c && arg_str("register_memory", "location", c, 0, &loc) < 0))
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(MC_INVALID_PARAMS);
    if (len > SIZE_MAX || addr + len < addr)
        return ret_int(MC_INVALID_PARAMS);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_register_memory(te, (void *)(uintptr_t)addr, (size_t)len, loc);
    Py_END_ALLOW_THREADS
    if ((rc == MC_OK || is_metadata_error(rc)) &&
        ranges_add(self, addr, len, RANGE_REGISTERED) < 0)
        return NULL;
    return ret_int(rc);
}

static PyObject *te_unregister_memory(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addr", NULL};
    PyObject *a;
    uint64_t addr;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:unregister_memory", kwlist, &a))
        return NULL;
    if (arg_u64("unregister_memory", "buffer_addr", a, &addr) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(MC_INVALID_PARAMS);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_unregister_memory(te, (void *)(uintptr_t)addr);
    Py_END_ALLOW_THREADS
    if (rc == MC_OK || is_metadata_error(rc))
        ranges_remove(self, addr, 0, RANGE_REGISTERED);
    return ret_int(rc);
}

static PyObject *te_batch_register_memory(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addresses", "capacities", "location", NULL};
    PyObject *a, *b, *c = NULL, *res = NULL;
    uint64_t *addrs = NULL, *lens = NULL;
    size_t na = 0, nl = 0;
    const char *loc = "*";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:batch_register_memory", kwlist, &a, &b,
                                     &c))
        return NULL;
    if (arg_u64_list("batch_register_memory", "buffer_addresses", a, &addrs, &na) < 0 ||
        arg_u64_list("batch_register_memory", "capacities", b, &lens, &nl) < 0 ||
        (c && arg_str("batch_register_memory", "location", c, 0, &loc) < 0))
        goto out;
    mc_te *te = te_of(self);
    if (!te || na != nl) {
        if (na != nl)
            mc_log(MC_LOG_ERROR, PY_TAG,
                   "batch_register_memory: %zu addresses but %zu capacities", na, nl);
        res = ret_int(MC_INVALID_PARAMS);
        goto out;
    }
    for (size_t i = 0; i < na; i++) {
        if (lens[i] > SIZE_MAX || addrs[i] + lens[i] < addrs[i]) {
            res = ret_int(MC_INVALID_PARAMS);
            goto out;
        }
    }
    /* uint64_t and void * / size_t have the same size on the 64-bit targets we build
     * for (checked at compile time below), so the arrays are passed as they are. */
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_batch_register_memory(te, (void *const *)addrs, (const size_t *)lens, na, loc);
    Py_END_ALLOW_THREADS
    if (rc == MC_OK || is_metadata_error(rc)) {
        for (size_t i = 0; i < na; i++)
            if (ranges_add(self, addrs[i], lens[i], RANGE_REGISTERED) < 0)
                goto out;
    }
    res = ret_int(rc);
out:
    PyMem_Free(addrs);
    PyMem_Free(lens);
    return res;
}

static PyObject *te_batch_unregister_memory(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addresses", NULL};
    PyObject *a, *res = NULL;
    uint64_t *addrs = NULL;
    size_t na = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:batch_unregister_memory", kwlist, &a))
        return NULL;
    if (arg_u64_list("batch_unregister_memory", "buffer_addresses", a, &addrs, &na) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te) {
        res = ret_int(MC_INVALID_PARAMS);
        goto out;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_batch_unregister_memory(te, (void *const *)addrs, na);
    Py_END_ALLOW_THREADS
    if (rc == MC_OK || is_metadata_error(rc))
        for (size_t i = 0; i < na; i++)
            ranges_remove(self, addrs[i], 0, RANGE_REGISTERED);
    res = ret_int(rc);
out:
    PyMem_Free(addrs);
    return res;
}

static PyObject *te_allocate_managed_buffer(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"length", NULL};
    PyObject *a;
    uint64_t len;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:allocate_managed_buffer", kwlist, &a))
        return NULL;
    if (arg_u64("allocate_managed_buffer", "length", a, &len) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te || len == 0 || len > SIZE_MAX)
        return PyLong_FromLong(0);
    void *p = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_allocate_managed_buffer(te, (size_t)len, &p);
    Py_END_ALLOW_THREADS
    if (rc != MC_OK || !p)
        return PyLong_FromLong(0);
    if (ranges_add(self, (uint64_t)(uintptr_t)p, len, RANGE_MANAGED) < 0) {
        mc_te_free_managed_buffer(te, p, (size_t)len);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

static PyObject *te_free_managed_buffer(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addr", "length", NULL};
    PyObject *a, *b;
    uint64_t addr, len;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:free_managed_buffer", kwlist, &a, &b))
        return NULL;
    if (arg_u64("free_managed_buffer", "buffer_addr", a, &addr) < 0 ||
        arg_u64("free_managed_buffer", "length", b, &len) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te || len > SIZE_MAX)
        return ret_int(MC_INVALID_PARAMS);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_free_managed_buffer(te, (void *)(uintptr_t)addr, (size_t)len);
    Py_END_ALLOW_THREADS
    if (rc == MC_OK)
        ranges_remove(self, addr, len, RANGE_MANAGED);
    return ret_int(rc);
}

static PyObject *te_write_bytes_to_buffer(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dest_address", "src", "length", NULL};
    PyObject *a, *b, *c;
    uint64_t addr, len;
    Py_buffer view;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:write_bytes_to_buffer", kwlist, &a, &b,
                                     &c))
        return NULL;
    if (arg_u64("write_bytes_to_buffer", "dest_address", a, &addr) < 0 ||
        arg_u64("write_bytes_to_buffer", "length", c, &len) < 0)
        return NULL;
    if (PyUnicode_Check(b) || PyObject_GetBuffer(b, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "write_bytes_to_buffer(): argument 'src' must be bytes-like, not "
                     "%.100s",
                     Py_TYPE(b)->tp_name);
        return NULL;
    }
    if (len > (uint64_t)view.len) {
        PyErr_Format(PyExc_ValueError,
                     "write_bytes_to_buffer(): length %llu is larger than src (%zd bytes)",
                     (unsigned long long)len, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    if (!ranges_contain(self, addr, len)) {
        PyErr_Format(PyExc_ValueError,
                     "write_bytes_to_buffer(): [0x%llx, +%llu) is not inside memory this "
                     "engine registered or allocated",
                     (unsigned long long)addr, (unsigned long long)len);
        PyBuffer_Release(&view);
        return NULL;
    }
    if (len)
        memcpy((void *)(uintptr_t)addr, view.buf, (size_t)len);
    PyBuffer_Release(&view);
    return ret_int(0);
}

static PyObject *te_read_bytes_from_buffer(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"source_address", "length", NULL};
    PyObject *a, *b;
    uint64_t addr, len;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:read_bytes_from_buffer", kwlist, &a, &b))
        return NULL;
    if (arg_u64("read_bytes_from_buffer", "source_address", a, &addr) < 0 ||
        arg_u64("read_bytes_from_buffer", "length", b, &len) < 0)
        return NULL;
    if (len > (uint64_t)PY_SSIZE_T_MAX || !ranges_contain(self, addr, len)) {
        PyErr_Format(PyExc_ValueError,
                     "read_bytes_from_buffer(): [0x%llx, +%llu) is not inside memory this "
                     "engine registered or allocated",
                     (unsigned long long)addr, (unsigned long long)len);
        return NULL;
    }
    return PyBytes_FromStringAndSize(len ? (const char *)(uintptr_t)addr : "",
                                     (Py_ssize_t)len);
}

/* ---- transfers ---- */

/* Checks the local side of n requests: each [local, local+len) inside tracked memory,
 * and no remote range wrapping around 2**64. Returns MC_OK or MC_INVALID_PARAMS (logged). */
static int check_requests(TEObject *self, const char *fn, const uint64_t *local,
                          const uint64_t *remote, const uint64_t *lens, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == 0)
            continue;
        if (remote[i] + lens[i] < remote[i]) {
            mc_log(MC_LOG_ERROR, PY_TAG,
                   "%s: request %zu: peer range 0x%llx + %llu overflows", fn, i,
                   (unsigned long long)remote[i], (unsigned long long)lens[i]);
            return MC_INVALID_PARAMS;
        }
        if (!ranges_contain(self, local[i], lens[i])) {
            mc_log(MC_LOG_ERROR, PY_TAG,
                   "%s: request %zu: local buffer [0x%llx, +%llu) is not inside memory "
                   "registered with this engine",
                   fn, i, (unsigned long long)local[i], (unsigned long long)lens[i]);
            return MC_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

typedef struct {
    PyObject *name; /* bytes */
    PyObject *msg;  /* bytes */
} notify_bytes;

static int arg_notify(const char *fn, PyObject *o, notify_bytes *out)
{
    out->name = out->msg = NULL;
    if (!o || o == Py_None)
        return 0;
    if (!PyObject_TypeCheck(o, &NotifyType)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'notify' must be TransferNotify or None, not %.100s", fn,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    NotifyObject *n = (NotifyObject *)o;
    out->name = notify_text_bytes(n->name);
    if (!out->name)
        return -1;
    out->msg = notify_text_bytes(n->msg);
    if (!out->msg) {
        Py_CLEAR(out->name);
        return -1;
    }
    if (strlen(PyBytes_AS_STRING(out->name)) != (size_t)PyBytes_GET_SIZE(out->name)) {
        PyErr_Format(PyExc_ValueError, "%s(): notify.name contains a NUL character", fn);
        Py_CLEAR(out->name);
        Py_CLEAR(out->msg);
        return -1;
    }
    return 0;
}

/* A sync transfer of n requests: 0 or a negative status code. */
static PyObject *do_sync(TEObject *self, const char *fn, const char *target, int op,
                         const uint64_t *local, const uint64_t *remote, const uint64_t *lens,
                         size_t n, const notify_bytes *nb)
{
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(MC_INVALID_PARAMS);
    int rc = check_requests(self, fn, local, remote, lens, n);
    if (rc != MC_OK)
        return ret_int(rc);
    const char *nname = nb && nb->name ? PyBytes_AS_STRING(nb->name) : NULL;
    const char *nmsg = nb && nb->msg ? PyBytes_AS_STRING(nb->msg) : NULL;
    size_t nlen = nb && nb->msg ? (size_t)PyBytes_GET_SIZE(nb->msg) : 0;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_transfer_sync(te, target, op, local, remote, lens, n, nname, nmsg, nlen);
    Py_END_ALLOW_THREADS
    return ret_int(rc);
}

/* An async submit of n requests: the batch id, or 0 on any failure. */
static PyObject *do_async(TEObject *self, const char *fn, const char *target, int op,
                          const uint64_t *local, const uint64_t *remote, const uint64_t *lens,
                          size_t n)
{
    mc_te *te = te_of(self);
    if (!te || check_requests(self, fn, local, remote, lens, n) != MC_OK)
        return PyLong_FromLong(0);
    mc_te_batch_t id = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (n == 0)
        rc = mc_te_allocate_batch(te, 1, &id); /* an empty batch: completes at once */
    else
        rc = mc_te_transfer_async(te, target, op, local, remote, lens, n, &id);
    Py_END_ALLOW_THREADS
    if (rc != MC_OK)
        return PyLong_FromLong(0);
    return PyLong_FromUnsignedLongLong((unsigned long long)id);
}

/* Parses (target_hostname, buffer, peer_buffer_address, length) from a, b, c, d. */
static int parse_single(const char *fn, PyObject *a, PyObject *b, PyObject *c, PyObject *d,
                        PyObject *hint, const char **target, uint64_t *local,
                        uint64_t *remote, uint64_t *len)
{
    const char *h;
    if (arg_str(fn, "target_hostname", a, 0, target) < 0 ||
        arg_u64(fn, "buffer", b, local) < 0 ||
        arg_u64(fn, "peer_buffer_address", c, remote) < 0 ||
        arg_u64(fn, "length", d, len) < 0 ||
        (hint && arg_str(fn, "transport_hint", hint, 0, &h) < 0))
        return -1;
    return 0;
}

typedef struct {
    const char *target;
    uint64_t *local, *remote, *lens;
    size_t n;
    int mismatch; /* the three lists have different lengths */
} batch_args;

static void batch_args_free(batch_args *ba)
{
    PyMem_Free(ba->local);
    PyMem_Free(ba->remote);
    PyMem_Free(ba->lens);
}

static int parse_batch(const char *fn, PyObject *a, PyObject *b, PyObject *c, PyObject *d,
                       PyObject *hint, batch_args *ba)
{
    size_t n1 = 0, n2 = 0, n3 = 0;
    const char *h;
    memset(ba, 0, sizeof(*ba));
    if (arg_str(fn, "target_hostname", a, 0, &ba->target) < 0 ||
        arg_u64_list(fn, "buffers", b, &ba->local, &n1) < 0 ||
        arg_u64_list(fn, "peer_buffer_addresses", c, &ba->remote, &n2) < 0 ||
        arg_u64_list(fn, "lengths", d, &ba->lens, &n3) < 0 ||
        (hint && arg_str(fn, "transport_hint", hint, 0, &h) < 0)) {
        batch_args_free(ba);
        return -1;
    }
    ba->n = n1;
    if (n1 != n2 || n1 != n3) {
        mc_log(MC_LOG_ERROR, PY_TAG,
               "%s: buffers, peer_buffer_addresses and lengths have different sizes "
               "(%zu, %zu, %zu)",
               fn, n1, n2, n3);
        ba->mismatch = 1;
    }
    return 0;
}

/* single_run: transfer_sync_{write,read} and transfer_submit_write (async: returns the
 * batch id) with (target_hostname, buffer, peer_buffer_address, length[,
 * transport_hint]); op < 0 (sync only): `opcode` and an optional `notify` follow
 * `length` (transfer_sync). */
static PyObject *single_run(TEObject *self, PyObject *args, PyObject *kw, const char *fn,
                            int op, bool async)
{
    static char *kwlist[] = {"target_hostname", "buffer", "peer_buffer_address", "length",
                             "transport_hint", NULL};
    static char *kwlist_opn[] = {"target_hostname", "buffer", "peer_buffer_address", "length",
                                 "opcode", "notify", "transport_hint", NULL};
    PyObject *a, *b, *c, *d, *e = NULL, *f = NULL, *hint = NULL, *res;
    const char *target;
    uint64_t local, remote, len;
    notify_bytes nb = {NULL, NULL};
    char fmt[64];
    int ok;
    if (op < 0) {
        snprintf(fmt, sizeof(fmt), "OOOOO|OO:%s", fn);
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist_opn, &a, &b, &c, &d, &e, &f,
                                         &hint);
    } else {
        snprintf(fmt, sizeof(fmt), "OOOO|O:%s", fn);
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &a, &b, &c, &d, &hint);
    }
    if (!ok || parse_single(fn, a, b, c, d, hint, &target, &local, &remote, &len) < 0)
        return NULL;
    if (op < 0 && (arg_opcode(fn, e, &op) < 0 || arg_notify(fn, f, &nb) < 0))
        return NULL;
    if (async)
        return do_async(self, fn, target, op, &local, &remote, &len, 1);
    res = do_sync(self, fn, target, op, &local, &remote, &len, 1, &nb);
    Py_XDECREF(nb.name);
    Py_XDECREF(nb.msg);
    return res;
}

static PyObject *te_transfer_sync_write(TEObject *self, PyObject *args, PyObject *kw)
{
    return single_run(self, args, kw, "transfer_sync_write", MC_TE_OP_WRITE, false);
}

static PyObject *te_transfer_sync_read(TEObject *self, PyObject *args, PyObject *kw)
{
    return single_run(self, args, kw, "transfer_sync_read", MC_TE_OP_READ, false);
}

static PyObject *te_transfer_sync(TEObject *self, PyObject *args, PyObject *kw)
{
    return single_run(self, args, kw, "transfer_sync", -1, false);
}

/* batch_run: batch_transfer_{sync,async}_{write,read}(target_hostname, buffers,
 * peer_buffer_addresses, lengths[, transport_hint]); op < 0: an `opcode` argument
 * follows `lengths` (batch_transfer_async), then for sync an optional `notify`
 * (batch_transfer_sync). Unequal list lengths give MC_INVALID_PARAMS (sync) or batch
 * id 0 (async) without transferring anything. */
static PyObject *batch_run(TEObject *self, PyObject *args, PyObject *kw, const char *fn,
                           int op, bool async)
{
    static char *kwlist[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                             "lengths", "transport_hint", NULL};
    static char *kwlist_op[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                                "lengths", "opcode", "transport_hint", NULL};
    static char *kwlist_opn[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                                 "lengths", "opcode", "notify", "transport_hint", NULL};
    PyObject *a, *b, *c, *d, *e = NULL, *f = NULL, *hint = NULL, *res;
    batch_args ba;
    notify_bytes nb = {NULL, NULL};
    char fmt[64];
    int ok;
    bool with_op = op < 0, with_notify = op < 0 && !async;
    snprintf(fmt, sizeof(fmt), "%s|%s:%s", with_op ? "OOOOO" : "OOOO",
             with_notify ? "OO" : "O", fn);
    if (with_notify)
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist_opn, &a, &b, &c, &d, &e, &f,
                                         &hint);
    else if (with_op)
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist_op, &a, &b, &c, &d, &e, &hint);
    else
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &a, &b, &c, &d, &hint);
    if (!ok || parse_batch(fn, a, b, c, d, hint, &ba) < 0)
        return NULL;
    if ((with_op && arg_opcode(fn, e, &op) < 0) ||
        (with_notify && arg_notify(fn, f, &nb) < 0)) {
        batch_args_free(&ba);
        return NULL;
    }
    if (ba.mismatch)
        res = async ? PyLong_FromLong(0) : ret_int(MC_INVALID_PARAMS);
    else if (async)
        res = do_async(self, fn, ba.target, op, ba.local, ba.remote, ba.lens, ba.n);
    else
        res = do_sync(self, fn, ba.target, op, ba.local, ba.remote, ba.lens, ba.n, &nb);
    Py_XDECREF(nb.name);
    Py_XDECREF(nb.msg);
    batch_args_free(&ba);
    return res;
}

static PyObject *te_batch_transfer_sync_write(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_sync_write", MC_TE_OP_WRITE, false);
}

static PyObject *te_batch_transfer_sync_read(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_sync_read", MC_TE_OP_READ, false);
}

static PyObject *te_batch_transfer_sync(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_sync", -1, false);
}

static PyObject *te_batch_transfer_async_write(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_async_write", MC_TE_OP_WRITE, true);
}

static PyObject *te_batch_transfer_async_read(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_async_read", MC_TE_OP_READ, true);
}

static PyObject *te_batch_transfer_async(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_async", -1, true);
}

static PyObject *te_transfer_submit_write(TEObject *self, PyObject *args, PyObject *kw)
{
    return single_run(self, args, kw, "transfer_submit_write", MC_TE_OP_WRITE, true);
}

static PyObject *te_get_batch_transfer_status(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"batch_ids", NULL};
    PyObject *a;
    uint64_t *ids = NULL;
    size_t n = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:get_batch_transfer_status", kwlist, &a))
        return NULL;
    if (arg_u64_list("get_batch_transfer_status", "batch_ids", a, &ids, &n) < 0)
        return NULL;
    mc_te *te = te_of(self);
    int result = te ? MC_OK : MC_INVALID_PARAMS;
    if (te) {
        Py_BEGIN_ALLOW_THREADS
        /* Every batch is waited for (each is bounded by the engine's transfer timeout)
         * and freed, so none is left behind; the first failure is reported. */
        for (size_t i = 0; i < n; i++) {
            mc_te_status st;
            int rc = mc_te_wait_batch(te, ids[i], -1, &st);
            if (rc == MC_OK) {
                mc_te_free_batch(te, ids[i]);
                if (st.state != MC_TE_COMPLETED)
                    rc = st.error != MC_OK ? st.error
                         : st.state == MC_TE_TIMEOUT ? MC_RPC_TIMEOUT
                                                     : MC_TRANSFER_FAIL;
            }
            if (rc != MC_OK && result == MC_OK)
                result = rc;
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(ids);
    return ret_int(result);
}

static PyObject *te_transfer_check_status(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"batch_id", NULL};
    PyObject *a;
    uint64_t id;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:transfer_check_status", kwlist, &a))
        return NULL;
    if (arg_u64("transfer_check_status", "batch_id", a, &id) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(-1);
    mc_te_status st;
    int rc = mc_te_get_batch_status(te, id, &st);
    if (rc != MC_OK)
        return ret_int(-1);
    switch (st.state) {
    case MC_TE_COMPLETED:
        mc_te_free_batch(te, id);
        return ret_int(1);
    case MC_TE_TIMEOUT:
        mc_te_free_batch(te, id);
        return ret_int(-2);
    case MC_TE_WAITING:
    case MC_TE_PENDING:
        return ret_int(0);
    default:
        mc_te_free_batch(te, id);
        return ret_int(-1);
    }
}

/* ---- segments, notifications, probe ---- */

static PyObject *te_get_first_buffer_address(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment_name", NULL};
    PyObject *a;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:get_first_buffer_address", kwlist, &a))
        return NULL;
    if (arg_str("get_first_buffer_address", "segment_name", a, 0, &name) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return PyLong_FromLong(0);
    uint64_t addr = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_get_first_buffer_address(te, name, &addr);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(rc == MC_OK ? (unsigned long long)addr : 0ull);
}

static PyObject *te_get_notifies(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    mc_te *te = te_of(self);
    PyObject *list = PyList_New(0);
    if (!list || !te)
        return list;
    mc_te_notify *v = NULL;
    size_t n = 0;
    if (mc_te_get_notifies(te, &v, &n) != MC_OK)
        return list;
    for (size_t i = 0; i < n; i++) {
        NotifyObject *o = (NotifyObject *)NotifyType.tp_alloc(&NotifyType, 0);
        if (!o)
            goto fail;
        o->name = PyUnicode_DecodeUTF8(v[i].name, (Py_ssize_t)strlen(v[i].name),
                                       "surrogateescape");
        o->msg = PyUnicode_DecodeUTF8(v[i].msg, (Py_ssize_t)v[i].msg_len, "surrogateescape");
        if (!o->name || !o->msg || PyList_Append(list, (PyObject *)o) < 0) {
            Py_DECREF(o);
            goto fail;
        }
        Py_DECREF(o);
    }
    mc_te_notifies_free(v, n);
    return list;
fail:
    /* The drained notifications cannot be put back; they are lost with the error. */
    mc_te_notifies_free(v, n);
    Py_DECREF(list);
    return NULL;
}

static PyObject *te_send_probe(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"peer_server_name", NULL};
    PyObject *a;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:send_probe", kwlist, &a))
        return NULL;
    if (arg_str("send_probe", "peer_server_name", a, 0, &name) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(-1);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_send_probe(te, name);
    Py_END_ALLOW_THREADS
    return ret_int(rc);
}

static PyObject *te_warmup_efa_segment(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment_name", NULL};
    PyObject *a;
    const char *name;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:warmup_efa_segment", kwlist, &a))
        return NULL;
    if (arg_str("warmup_efa_segment", "segment_name", a, 0, &name) < 0)
        return NULL;
    return ret_int(0);
}

static PyObject *te_get_local_topology(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device_name", NULL};
    PyObject *a = NULL;
    const char *dev;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:get_local_topology", kwlist, &a))
        return NULL;
    if (a && arg_str("get_local_topology", "device_name", a, 1, &dev) < 0)
        return NULL;
    /* No RDMA devices here: one entry per NUMA node with empty preferred/available NIC
     * lists (the shape of upstream Topology::toString). */
    PyObject *parts = PyList_New(0);
    if (!parts)
        return NULL;
    for (int node = 0; node < 1024; node++) {
        char path[64];
        snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", node);
        if (node > 0 && access(path, F_OK) != 0)
            break;
        PyObject *s = PyUnicode_FromFormat("\"cpu:%d\": [[], []]", node);
        if (!s || PyList_Append(parts, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(parts);
            return NULL;
        }
        Py_DECREF(s);
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *body = sep ? PyUnicode_Join(sep, parts) : NULL;
    PyObject *res = body ? PyUnicode_FromFormat("{%U}", body) : NULL;
    Py_XDECREF(sep);
    Py_XDECREF(body);
    Py_DECREF(parts);
    return res;
}

static PyObject *te_get_engine(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    mc_te *te = te_of(self);
    if (!te)
        Py_RETURN_NONE;
    PyObject *cap = mc__py_engine_handle_new((struct mc_te *)te, (PyObject *)self);
    if (!cap)
        return NULL;
    InnerObject *h = (InnerObject *)InnerType.tp_alloc(&InnerType, 0);
    if (!h) {
        Py_DECREF(cap);
        return NULL;
    }
    h->capsule = cap;
    return (PyObject *)h;
}

static PyObject *te_get_engine_ptr(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)te_of(self));
}

static PyObject *te_stats(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    mc_te *te = te_of(self);
    mc_te_stats st;
    memset(&st, 0, sizeof(st));
    if (te)
        mc_te_get_stats(te, &st);
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsK}", "tcp_bytes_sent",
                         (unsigned long long)st.tcp_bytes_sent, "tcp_bytes_received",
                         (unsigned long long)st.tcp_bytes_received, "shm_bytes",
                         (unsigned long long)st.shm_bytes, "served_bytes",
                         (unsigned long long)st.served_bytes, "refused_requests",
                         (unsigned long long)st.refused_requests, "tasks_completed",
                         (unsigned long long)st.tasks_completed, "tasks_failed",
                         (unsigned long long)st.tasks_failed, "connections_opened",
                         (unsigned long long)st.connections_opened, "connections_failed",
                         (unsigned long long)st.connections_failed);
}

static PyObject *te_get_capsule(TEObject *self, void *c)
{
    (void)c;
    PyObject *h = te_get_engine(self, NULL);
    if (!h || h == Py_None)
        return h;
    PyObject *cap = Py_NewRef(((InnerObject *)h)->capsule);
    Py_DECREF(h);
    return cap;
}

static PyObject *te_get_segment_name(TEObject *self, void *c)
{
    (void)c;
    mc_te *te = te_of(self);
    return PyUnicode_FromString(te ? mc_te_segment_name(te) : "");
}

#define KW (PyCFunction)(void (*)(void))
#define KWFLAGS (METH_VARARGS | METH_KEYWORDS)

static PyMethodDef te_methods[] = {
    {"initialize", KW te_initialize, KWFLAGS,
     "initialize(local_hostname: str, metadata_server: str, protocol: str, "
     "device_name: str) -> int\n\n"
     "Starts the engine. local_hostname: 'host' or 'host:port' (this engine's segment "
     "name; with P2PHANDSHAKE it becomes 'host:rpc_port'). metadata_server: "
     "'P2PHANDSHAKE', 'http://host:port/metadata', 'etcd://h:p' / bare 'h:p' (etcd), "
     "'redis://h:p'. protocol: 'tcp' ('rdma' without RDMA hardware works only with "
     "MC_FORCE_TCP=1, which falls back to TCP). device_name: NIC filter, ignored on TCP "
     "(None allowed).\n"
     "Returns 0, or a negative ErrorCode: INVALID_PARAMS (-600: bad string, already "
     "initialized), NOT_SUPPORTED (-1012: protocol), RPC_FAIL/RPC_TIMEOUT (-900/-901: "
     "metadata server unreachable), OBJECT_ALREADY_EXISTS (-705: the name is taken), "
     "INTERNAL_ERROR (-1: cannot bind). Upstream returns -1 for every failure. "
     "Upstream: TransferEnginePy::initialize."},
    {"initialize_ext", KW te_initialize_ext, KWFLAGS,
     "initialize_ext(local_hostname, metadata_server, protocol, device_name, "
     "metadata_type: str) -> int\n\n"
     "As initialize, but metadata_server is an address and metadata_type its backend "
     "('http', 'etcd', 'redis'): the connection string is metadata_type + '://' + "
     "metadata_server unless metadata_server is 'P2PHANDSHAKE' or already contains "
     "'://'. Returns as initialize. Upstream: TransferEnginePy::initializeExt."},
    {"get_rpc_port", (PyCFunction)te_get_rpc_port, METH_NOARGS,
     "get_rpc_port() -> int\n\nThe handshake (RPC) port peers use: with P2PHANDSHAKE "
     "peers address this engine as 'ip:port'. -1 before initialize. Upstream: "
     "TransferEnginePy::getRpcPort."},
    {"register_memory", KW te_register_memory, KWFLAGS,
     "register_memory(buffer_addr: int, capacity: int, location: str = '*') -> int\n\n"
     "Adds [buffer_addr, buffer_addr + capacity) bytes of this process's memory to the "
     "engine's segment: peers may then read and write it, and it may be the local side "
     "of transfers. The memory stays the caller's and must stay valid until "
     "unregister_memory. Registering the same address and capacity again is a no-op. "
     "Returns 0 or a negative ErrorCode (INVALID_PARAMS: not initialized, capacity 0, "
     "range overflows, same address with another capacity). Upstream: "
     "TransferEnginePy::registerMemory."},
    {"unregister_memory", KW te_unregister_memory, KWFLAGS,
     "unregister_memory(buffer_addr: int) -> int\n\nRemoves the buffer registered at "
     "buffer_addr (waits until no peer operation uses it). Returns 0 or a negative "
     "ErrorCode (INVALID_PARAMS: not registered). Upstream: "
     "TransferEnginePy::unregisterMemory."},
    {"batch_register_memory", KW te_batch_register_memory, KWFLAGS,
     "batch_register_memory(buffer_addresses: List[int], capacities: List[int], "
     "location: str = '*') -> int\n\n"
     "register_memory for each pair, all or nothing, one descriptor republish. Lists of "
     "different lengths return INVALID_PARAMS (-600). Returns 0 or a negative ErrorCode. "
     "Upstream: TransferEnginePy::batchRegisterMemory."},
    {"batch_unregister_memory", KW te_batch_unregister_memory, KWFLAGS,
     "batch_unregister_memory(buffer_addresses: List[int]) -> int\n\n"
     "unregister_memory for each address. Returns 0 or a negative ErrorCode. Upstream: "
     "TransferEnginePy::batchUnregisterMemory."},
    {"allocate_managed_buffer", KW te_allocate_managed_buffer, KWFLAGS,
     "allocate_managed_buffer(length: int) -> int\n\n"
     "length bytes of engine-owned, registered memory (shared-memory backed, so a "
     "same-host peer copies with one memcpy). Returns the address, or 0 on failure "
     "(length 0, not initialized, out of memory). Free with free_managed_buffer. "
     "Upstream: TransferEnginePy::allocateManagedBuffer."},
    {"free_managed_buffer", KW te_free_managed_buffer, KWFLAGS,
     "free_managed_buffer(buffer_addr: int, length: int) -> int\n\n"
     "Returns a block from allocate_managed_buffer; length must be the allocated length. "
     "Returns 0, or INVALID_PARAMS (-600) for an unknown block (upstream always returns "
     "0). Upstream: TransferEnginePy::freeManagedBuffer."},
    {"write_bytes_to_buffer", KW te_write_bytes_to_buffer, KWFLAGS,
     "write_bytes_to_buffer(dest_address: int, src: bytes, length: int) -> int\n\n"
     "Copies the first length bytes of src to dest_address. [dest_address, +length) "
     "must lie inside memory this engine registered or allocated, and length <= "
     "len(src); otherwise ValueError (nothing is written). Returns 0. Upstream: "
     "TransferEnginePy::writeBytesToBuffer."},
    {"read_bytes_from_buffer", KW te_read_bytes_from_buffer, KWFLAGS,
     "read_bytes_from_buffer(source_address: int, length: int) -> bytes\n\n"
     "A copy of length bytes at source_address, which must lie inside memory this "
     "engine registered or allocated (ValueError otherwise). Upstream: "
     "TransferEnginePy::readBytesFromBuffer."},
    {"transfer_sync_write", KW te_transfer_sync_write, KWFLAGS,
     "transfer_sync_write(target_hostname: str, buffer: int, peer_buffer_address: int, "
     "length: int, transport_hint: str = '') -> int\n\n"
     "Writes length bytes from local buffer (inside memory registered with this engine) "
     "to peer_buffer_address in the peer's registered memory, and waits. "
     "target_hostname is the peer's segment name ('ip:rpc_port' with P2PHANDSHAKE). "
     "Returns 0, or a negative ErrorCode: INVALID_PARAMS (-600: local range not "
     "registered, peer refused the range, overflow), SEGMENT_NOT_FOUND (-101: unknown "
     "peer), TRANSFER_FAIL (-800: connection lost), RPC_TIMEOUT (-901: not done within "
     "MC_TRANSFER_TIMEOUT s + 1 ns/byte). transport_hint is accepted and ignored "
     "(upstream honours it only with TENT). Upstream: TransferEnginePy::transferSyncWrite "
     "(which returns -1 for every failure)."},
    {"transfer_sync_read", KW te_transfer_sync_read, KWFLAGS,
     "transfer_sync_read(target_hostname: str, buffer: int, peer_buffer_address: int, "
     "length: int, transport_hint: str = '') -> int\n\n"
     "Reads length bytes at peer_buffer_address of the peer into local buffer, and "
     "waits. Returns as transfer_sync_write. Upstream: TransferEnginePy::transferSyncRead."},
    {"transfer_sync", KW te_transfer_sync, KWFLAGS,
     "transfer_sync(target_hostname: str, buffer: int, peer_buffer_address: int, "
     "length: int, opcode: TransferOpcode, notify: TransferNotify = None, "
     "transport_hint: str = '') -> int\n\n"
     "transfer_sync_read (opcode Read) or transfer_sync_write (Write); with notify, the "
     "peer receives it (get_notifies) after the data has landed, and the call returns "
     "once the peer acknowledged it. Returns as transfer_sync_write. Upstream: "
     "TransferEnginePy::transferSync."},
    {"batch_transfer_sync_write", KW te_batch_transfer_sync_write, KWFLAGS,
     "batch_transfer_sync_write(target_hostname: str, buffers: List[int], "
     "peer_buffer_addresses: List[int], lengths: List[int], transport_hint: str = '') "
     "-> int\n\n"
     "Writes buffers[i] -> peer_buffer_addresses[i], lengths[i] bytes each, to one peer "
     "and waits for all. Lists of different lengths return INVALID_PARAMS (-600); empty "
     "lists return 0. Returns 0 when every byte moved, else the first failure's negative "
     "ErrorCode (as transfer_sync_write). Upstream: "
     "TransferEnginePy::batchTransferSyncWrite."},
    {"batch_transfer_sync_read", KW te_batch_transfer_sync_read, KWFLAGS,
     "batch_transfer_sync_read(target_hostname, buffers, peer_buffer_addresses, lengths, "
     "transport_hint='') -> int\n\n"
     "Reads peer_buffer_addresses[i] -> buffers[i]. Returns as batch_transfer_sync_write. "
     "Upstream: TransferEnginePy::batchTransferSyncRead."},
    {"batch_transfer_sync", KW te_batch_transfer_sync, KWFLAGS,
     "batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, "
     "opcode: TransferOpcode, notify: TransferNotify = None, transport_hint='') -> int\n\n"
     "batch_transfer_sync_read/write by opcode; notify as in transfer_sync (delivered "
     "after all the data; with empty lists it is sent alone). Upstream: "
     "TransferEnginePy::batchTransferSync."},
    {"batch_transfer_async_write", KW te_batch_transfer_async_write, KWFLAGS,
     "batch_transfer_async_write(target_hostname, buffers, peer_buffer_addresses, "
     "lengths, transport_hint='') -> int\n\n"
     "Starts the writes and returns a batch id (> 0) at once, or 0 on failure (unknown "
     "peer, lists of different lengths, local range not registered, submit refused). "
     "Wait with get_batch_transfer_status([id]) or poll transfer_check_status(id); both "
     "free the batch when it is over. Upstream: TransferEnginePy::batchTransferAsyncWrite."},
    {"batch_transfer_async_read", KW te_batch_transfer_async_read, KWFLAGS,
     "batch_transfer_async_read(target_hostname, buffers, peer_buffer_addresses, "
     "lengths, transport_hint='') -> int\n\n"
     "As batch_transfer_async_write, reading. Upstream: "
     "TransferEnginePy::batchTransferAsyncRead."},
    {"batch_transfer_async", KW te_batch_transfer_async, KWFLAGS,
     "batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, "
     "opcode: TransferOpcode, transport_hint='') -> int\n\n"
     "batch_transfer_async_read/write by opcode. Returns a batch id or 0. Upstream: "
     "TransferEnginePy::batchTransferAsync."},
    {"get_batch_transfer_status", KW te_get_batch_transfer_status, KWFLAGS,
     "get_batch_transfer_status(batch_ids: List[int]) -> int\n\n"
     "Blocks until every listed batch is over (each is bounded by MC_TRANSFER_TIMEOUT s "
     "+ 1 ns per byte) and frees them all. Returns 0 when all completed, else the first "
     "failure's negative ErrorCode (TRANSFER_FAIL, RPC_TIMEOUT, INVALID_PARAMS for an "
     "unknown or already freed id). Upstream: TransferEnginePy::getBatchTransferStatus "
     "(0 / -1; it stops at the first failure)."},
    {"transfer_submit_write", KW te_transfer_submit_write, KWFLAGS,
     "transfer_submit_write(target_hostname: str, buffer: int, peer_buffer_address: int, "
     "length: int, transport_hint: str = '') -> int\n\n"
     "Starts one write and returns its batch id (> 0), or 0 on failure. Poll with "
     "transfer_check_status. Upstream: TransferEnginePy::transferSubmitWrite."},
    {"transfer_check_status", KW te_transfer_check_status, KWFLAGS,
     "transfer_check_status(batch_id: int) -> int\n\n"
     "1: completed (the batch is freed); 0: still running; -1: failed or unknown id "
     "(freed); -2: timed out (freed). Upstream: TransferEnginePy::transferCheckStatus "
     "(which keeps a timed-out batch)."},
    {"get_first_buffer_address", KW te_get_first_buffer_address, KWFLAGS,
     "get_first_buffer_address(segment_name: str) -> int\n\n"
     "The address of the first buffer the named peer segment registered, or 0 when it "
     "has none or cannot be found. Upstream: TransferEnginePy::getFirstBufferAddress."},
    {"get_notifies", (PyCFunction)te_get_notifies, METH_NOARGS,
     "get_notifies() -> List[TransferNotify]\n\nDrains the notifications peers sent to "
     "this engine (transfer_sync/batch_transfer_sync with notify=), oldest first. "
     "Upstream: TransferEnginePy::getNotifies."},
    {"send_probe", KW te_send_probe, KWFLAGS,
     "send_probe(peer_server_name: str) -> int\n\n"
     "Asks the peer's handshake daemon for a Probe answer. Returns 0 when it answered, "
     "non-zero (negative ErrorCode) otherwise. Used by SGLang to clear failed sessions. "
     "Upstream: TransferEnginePy::sendProbe."},
    {"warmup_efa_segment", KW te_warmup_efa_segment, KWFLAGS,
     "warmup_efa_segment(segment_name: str) -> int\n\nNo EFA here: returns 0. Upstream: "
     "TransferEnginePy::warmupEfaSegment (0 without EFA)."},
    {"get_local_topology", KW te_get_local_topology, KWFLAGS,
     "get_local_topology(device_name: str = None) -> str\n\nJSON of the NIC topology: "
     "one 'cpu:N' entry per NUMA node with empty preferred/available RDMA device lists "
     "(this build has no RDMA). Upstream: TransferEnginePy::getLocalTopology."},
    {"get_engine", (PyCFunction)te_get_engine, METH_NOARGS,
     "get_engine() -> InnerTransferEngine\n\nAn opaque handle to this engine for "
     "mooncake.store.MooncakeDistributedStore.setup(engine=...); it keeps this object "
     "alive. None before initialize. Upstream: TransferEnginePy::getEngine."},
    {"get_engine_ptr", (PyCFunction)te_get_engine_ptr, METH_NOARGS,
     "get_engine_ptr() -> int\n\nThe address of the underlying mc_te (0 before "
     "initialize); valid while this object lives. Upstream: "
     "TransferEnginePy::getEnginePtr."},
    {"_stats", (PyCFunction)te_stats, METH_NOARGS,
     "_stats() -> dict\n\nmooncake-c addition (not upstream): a snapshot of the engine's "
     "counters: tcp_bytes_sent/tcp_bytes_received (payload bytes this engine moved over "
     "TCP as initiator), shm_bytes (bytes copied over the same-host path), served_bytes, "
     "refused_requests (peer requests refused: bad range...), tasks_completed, "
     "tasks_failed, connections_opened, connections_failed. All zero before initialize."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef te_getset[] = {
    {"_mc_te", (getter)te_get_capsule, NULL,
     "PyCapsule \"" MC_PY_TE_CAPSULE "\" holding the mc_te * (None before initialize); "
     "see InnerTransferEngine.",
     NULL},
    {"segment_name", (getter)te_get_segment_name, NULL,
     "str: this engine's segment name ('host:rpc_port' with P2PHANDSHAKE), '' before "
     "initialize. mooncake-c addition.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TEType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.engine.TransferEngine",
    .tp_basicsize = sizeof(TEObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "TransferEngine()\n\n"
              "Moves bytes between memory registered in this process and memory "
              "registered by peer engines (other processes or hosts), over TCP or, for "
              "engine-allocated memory on the same host, shared memory. Call "
              "initialize() first. Environment: MC_TRANSFER_TIMEOUT (s, default 30), "
              "MC_FORCE_TCP, MC_TCP_BIND_ADDRESS, MC_MIN_RPC_PORT/MC_MAX_RPC_PORT, "
              "MC_LOG_LEVEL. Upstream: mooncake.engine.TransferEngine "
              "(transfer_engine_py.cpp).",
    .tp_new = te_new,
    .tp_init = (initproc)te_init,
    .tp_dealloc = (destructor)te_dealloc,
    .tp_methods = te_methods,
    .tp_getset = te_getset,
};

/* ------------------------------------------------------------------------------------ */
/* Module                                                                              */
/* ------------------------------------------------------------------------------------ */

_Static_assert(sizeof(uint64_t) == sizeof(void *) && sizeof(uint64_t) == sizeof(size_t),
               "the batch (un)register arrays are passed as uint64_t arrays");

static int add_opcode_enum(PyObject *m)
{
    PyObject *members = NULL, *cls = NULL, *read = NULL, *write = NULL;
    int rc = -1;
    members = Py_BuildValue("[(si)(si)]", "Read", MC_TE_OP_READ, "Write", MC_TE_OP_WRITE);
    if (!members)
        goto out;
    cls = mc__py_int_enum(m, "TransferOpcode", members,
                          "Direction of a transfer: Read (0, peer -> local) or "
                          "Write (1, local -> peer). Upstream: "
                          "TransferEnginePy::TransferOpcode (pybind arithmetic "
                          "enum with export_values).");
    if (!cls)
        goto out;
    read = PyObject_GetAttrString(cls, "Read");
    write = PyObject_GetAttrString(cls, "Write");
    if (!read || !write)
        goto out;
    if (PyModule_AddObjectRef(m, "TransferOpcode", cls) < 0 ||
        PyModule_AddObjectRef(m, "Read", read) < 0 ||
        PyModule_AddObjectRef(m, "Write", write) < 0)
        goto out;
    /* TransferEngine.TransferOpcode, as upstream's adaptor_cls.attr("TransferOpcode"). */
    if (PyDict_SetItemString(TEType.tp_dict, "TransferOpcode", cls) < 0)
        goto out;
    PyType_Modified(&TEType);
    rc = 0;
out:
    Py_XDECREF(members);
    Py_XDECREF(cls);
    Py_XDECREF(read);
    Py_XDECREF(write);
    return rc;
}

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake.engine",
    .m_doc = "Mooncake transfer engine (mooncake-c), a drop-in for upstream's "
             "mooncake.engine.\n\n"
             "TransferEngine: the engine (see its methods). TransferOpcode: Read/Write. "
             "TransferNotify: a notification. InnerTransferEngine: the handle "
             "TransferEngine.get_engine() returns. ErrorCode: upstream status codes as "
             "an IntEnum (methods return them as negative ints). SUPPORT_*: build "
             "flags (all False: no CUDA/EFA/HIP/NVLink here).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit_engine(void);
PyMODINIT_FUNC PyInit_engine(void)
{
    if (PyType_Ready(&NotifyType) < 0 || PyType_Ready(&InnerType) < 0 ||
        PyType_Ready(&TEType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&engine_module);
    if (!m)
        return NULL;
    static const char *const flags[] = {"SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL",
                                        "SUPPORT_INTRA_NVLINK", "SUPPORT_CUDA"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (PyModule_AddObjectRef(m, flags[i], Py_False) < 0)
            goto fail;
    if (PyModule_AddObjectRef(m, "TransferEngine", (PyObject *)&TEType) < 0 ||
        PyModule_AddObjectRef(m, "TransferNotify", (PyObject *)&NotifyType) < 0 ||
        PyModule_AddObjectRef(m, "InnerTransferEngine", (PyObject *)&InnerType) < 0 ||
        add_opcode_enum(m) < 0 || mc__py_add_error_code(m) < 0 || mc__py_route_logs() < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
