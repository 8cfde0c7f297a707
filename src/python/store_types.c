/* store_types.c: the helper types of `mooncake.store` and the argument converters.
 *
 * Upstream: `mooncake-integration/store/store_py.cpp` (PYBIND11_MODULE(store)) binds
 * ReplicateConfig (replica.h), the enums ReplicaStatus / SoftPinAction /
 * ObjectDataType, BufferHandle (client_buffer.h), the replica descriptor classes, and
 * MooncakeHostMemAllocator (shm_helper.h); behaviour summarised in
 * ../shared/reference/upstream-mooncake.md §1.1, §1.2, §1.5, §1.7. */
#include "store_py.h"

#include <structmember.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG "pystore"

/* ================================================================================== */
/* Converters                                                                          */
/* ================================================================================== */

int mcpy_key(PyObject *obj, const char *fn, const char *arg, mc_store_key *out)
{
    if (PyUnicode_Check(obj)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(obj, &n);
        if (!s)
            return -1;
        out->data = s;
        out->len = (size_t)n;
        return 0;
    }
    if (PyBytes_Check(obj)) {
        out->data = PyBytes_AS_STRING(obj);
        out->len = (size_t)PyBytes_GET_SIZE(obj);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be str or bytes, not %.100s", fn,
                 arg, Py_TYPE(obj)->tp_name);
    return -1;
}

PyObject *mcpy_seq_tuple(PyObject *seq, const char *fn, const char *arg)
{
    if (PyUnicode_Check(seq) || PyBytes_Check(seq) || PyByteArray_Check(seq) ||
        !PySequence_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be a list, not %.100s", fn,
                     arg, Py_TYPE(seq)->tp_name);
        return NULL;
    }
    return PySequence_Tuple(seq);
}

int mcpy_keys_from(PyObject *seq, const char *fn, const char *arg, mcpy_keys *out)
{
    memset(out, 0, sizeof(*out));
    PyObject *t = mcpy_seq_tuple(seq, fn, arg);
    if (!t)
        return -1;
    size_t n = (size_t)PyTuple_GET_SIZE(t);
    out->tuple = t;
    out->n = n;
    out->keys = PyMem_Calloc(n ? n : 1, sizeof(mc_store_key));
    if (!out->keys) {
        mcpy_keys_clear(out);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(t, (Py_ssize_t)i);
        if (PyUnicode_Check(k) || PyBytes_Check(k)) {
            if (mcpy_key(k, fn, arg, &out->keys[i]) < 0) {
                mcpy_keys_clear(out);
                return -1;
            }
        } else {
            PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be a list of str, "
                         "item %zu is %.100s", fn, arg, i, Py_TYPE(k)->tp_name);
            mcpy_keys_clear(out);
            return -1;
        }
    }
    return 0;
}

void mcpy_keys_clear(mcpy_keys *k)
{
    Py_CLEAR(k->tuple);
    PyMem_Free(k->keys);
    k->keys = NULL;
    k->n = 0;
}

int mcpy_u64(PyObject *obj, const char *fn, const char *arg, uint64_t *out)
{
    if (PyFloat_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be int, not %.100s", fn, arg,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(obj);
    if (!i)
        return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be a non-negative int below 2**64", fn, arg);
        return -1;
    }
    *out = v;
    return 0;
}

int mcpy_int(PyObject *obj, const char *fn, const char *arg, long long lo, long long hi,
             long long *out)
{
    if (PyFloat_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be int, not %.100s", fn, arg,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(obj);
    if (!i)
        return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if ((v == -1 && PyErr_Occurred()) || overflow || v < lo || v > hi) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be an int in [%lld, %lld]", fn,
                     arg, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int mcpy_u64_list(PyObject *seq, const char *fn, const char *arg, uint64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    PyObject *t = mcpy_seq_tuple(seq, fn, arg);
    if (!t)
        return -1;
    size_t cnt = (size_t)PyTuple_GET_SIZE(t);
    uint64_t *v = PyMem_Calloc(cnt ? cnt : 1, sizeof(uint64_t));
    if (!v) {
        Py_DECREF(t);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < cnt; i++) {
        if (mcpy_u64(PyTuple_GET_ITEM(t, (Py_ssize_t)i), fn, arg, &v[i]) < 0) {
            PyMem_Free(v);
            Py_DECREF(t);
            return -1;
        }
    }
    Py_DECREF(t);
    *out = v;
    *n = cnt;
    return 0;
}

int mcpy_keys_ptrs_sizes(PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes, const char *fn,
                         mcpy_keys *keys, uint64_t **ptrs, uint64_t **sizes, size_t *np,
                         size_t *ns)
{
    *ptrs = *sizes = NULL;
    *np = *ns = 0;
    if (mcpy_keys_from(a_keys, fn, "keys", keys) < 0)
        return -1;
    if (mcpy_u64_list(a_ptrs, fn, "buffer_ptrs", ptrs, np) < 0 ||
        mcpy_u64_list(a_sizes, fn, "sizes", sizes, ns) < 0) {
        PyMem_Free(*ptrs);
        *ptrs = NULL;
        *np = 0;
        mcpy_keys_clear(keys);
        return -1;
    }
    return 0;
}

int mcpy_u64_list2(PyObject *seq, const char *fn, const char *arg, uint64_t **flat,
                   size_t **starts, size_t **counts, size_t *nrows)
{
    *flat = NULL;
    *starts = *counts = NULL;
    *nrows = 0;
    PyObject *t = mcpy_seq_tuple(seq, fn, arg);
    if (!t)
        return -1;
    size_t rows = (size_t)PyTuple_GET_SIZE(t);
    PyObject **inner = PyMem_Calloc(rows ? rows : 1, sizeof(PyObject *));
    size_t *st = PyMem_Calloc(rows ? rows : 1, sizeof(size_t));
    size_t *ct = PyMem_Calloc(rows ? rows : 1, sizeof(size_t));
    uint64_t *v = NULL;
    size_t total = 0;
    int rc = -1;
    if (!inner || !st || !ct) {
        PyErr_NoMemory();
        goto out;
    }
    for (size_t i = 0; i < rows; i++) {
        inner[i] = mcpy_seq_tuple(PyTuple_GET_ITEM(t, (Py_ssize_t)i), fn, arg);
        if (!inner[i])
            goto out;
        st[i] = total;
        ct[i] = (size_t)PyTuple_GET_SIZE(inner[i]);
        total += ct[i];
    }
    v = PyMem_Calloc(total ? total : 1, sizeof(uint64_t));
    if (!v) {
        PyErr_NoMemory();
        goto out;
    }
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < ct[i]; j++)
            if (mcpy_u64(PyTuple_GET_ITEM(inner[i], (Py_ssize_t)j), fn, arg, &v[st[i] + j]) <
                0)
                goto out;
    rc = 0;
out:
    if (inner)
        for (size_t i = 0; i < rows; i++)
            Py_XDECREF(inner[i]);
    PyMem_Free(inner);
    Py_DECREF(t);
    if (rc < 0) {
        PyMem_Free(st);
        PyMem_Free(ct);
        PyMem_Free(v);
        return -1;
    }
    *flat = v;
    *starts = st;
    *counts = ct;
    *nrows = rows;
    return 0;
}

int mcpy_cstr(PyObject *obj, const char *fn, const char *arg, const char **out)
{
    return mc__py_cstr(fn, arg, obj, 0, out);
}

int mcpy_get_buffer(PyObject *obj, const char *fn, const char *arg, Py_buffer *view)
{
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must support the buffer protocol (bytes, "
                     "bytearray, memoryview, numpy array, ...), not %.100s",
                     fn, arg, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s(): argument '%s' must be a contiguous buffer", fn,
                     arg);
        return -1;
    }
    return 0;
}

PyObject *mcpy_int_list(const int *v, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLong(v[i]);
        if (!x) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, x);
    }
    return l;
}

PyObject *mcpy_i64_list(const int64_t *v, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, x);
    }
    return l;
}

PyObject *mcpy_code_list(int code, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l)
        return NULL;
    for (size_t i = 0; i < n; i++)
        PyList_SET_ITEM(l, (Py_ssize_t)i, PyLong_FromLong(code));
    return l;
}

/* ================================================================================== */
/* Enums                                                                               */
/* ================================================================================== */

typedef struct {
    const char *name;
    int value;
} enum_row;

static const enum_row replica_status_rows[] = {
    {"UNDEFINED", 0}, {"INITIALIZED", 1}, {"PROCESSING", 2},
    {"COMPLETE", 3},  {"REMOVED", 4},     {"FAILED", 5},
};
static const enum_row soft_pin_rows[] = {{"PRESERVE", 0}, {"ENABLE", 1}, {"DISABLE", 2}};
static const enum_row data_type_rows[] = {
    {"UNKNOWN", 0},  {"KVCACHE", 1},    {"TENSOR", 2},          {"WEIGHT", 3},
    {"SAMPLE", 4},   {"ACTIVATION", 5}, {"GRADIENT", 6},        {"OPTIMIZER_STATE", 7},
    {"METADATA", 8}, {"GENERAL", 9},
};

static PyObject *replica_status_cls, *soft_pin_cls, *data_type_cls;

/* An enum.IntEnum named `name` with `rows`, added to module (and its members too when
 * export_values, as pybind11's .export_values()). Returns a borrowed-by-static new ref. */
static PyObject *make_enum(PyObject *module, const char *name, const char *doc,
                           const enum_row *rows, size_t n, bool export_values)
{
    PyObject *enum_mod = NULL, *int_enum = NULL, *members = NULL, *cls = NULL;
    PyObject *args = NULL, *kwargs = NULL, *modname = NULL;
    enum_mod = PyImport_ImportModule("enum");
    if (!enum_mod)
        goto fail;
    int_enum = PyObject_GetAttrString(enum_mod, "IntEnum");
    members = PyList_New((Py_ssize_t)n);
    if (!int_enum || !members)
        goto fail;
    for (size_t i = 0; i < n; i++)
        PyList_SET_ITEM(members, (Py_ssize_t)i, Py_BuildValue("(si)", rows[i].name,
                                                               rows[i].value));
    modname = PyModule_GetNameObject(module);
    if (!modname)
        goto fail;
    args = Py_BuildValue("(sO)", name, members);
    kwargs = Py_BuildValue("{sO}", "module", modname);
    if (!args || !kwargs)
        goto fail;
    cls = PyObject_Call(int_enum, args, kwargs);
    if (!cls)
        goto fail;
    PyObject *d = PyUnicode_FromString(doc);
    if (!d || PyObject_SetAttrString(cls, "__doc__", d) < 0)
        PyErr_Clear();
    Py_XDECREF(d);
    if (PyModule_AddObjectRef(module, name, cls) < 0)
        goto fail;
    if (export_values) {
        for (size_t i = 0; i < n; i++) {
            PyObject *m = PyObject_GetAttrString(cls, rows[i].name);
            if (!m || PyModule_AddObject(module, rows[i].name, m) < 0) {
                Py_XDECREF(m);
                goto fail;
            }
        }
    }
    Py_DECREF(enum_mod);
    Py_DECREF(int_enum);
    Py_DECREF(members);
    Py_DECREF(args);
    Py_DECREF(kwargs);
    Py_DECREF(modname);
    return cls;
fail:
    Py_XDECREF(enum_mod);
    Py_XDECREF(int_enum);
    Py_XDECREF(members);
    Py_XDECREF(cls);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(modname);
    return NULL;
}

static PyObject *enum_member(PyObject *cls, int value)
{
    PyObject *r = PyObject_CallFunction(cls, "i", value);
    if (!r) { /* an unknown value: the plain int */
        PyErr_Clear();
        r = PyLong_FromLong(value);
    }
    return r;
}

/* ================================================================================== */
/* ReplicateConfig                                                                     */
/* ================================================================================== */

typedef struct {
    PyObject_HEAD
    unsigned long long replica_num;
    unsigned long long nof_replica_num;
    unsigned long long dfs_replica_num;
    int soft_pin_action;
    bool with_soft_pin;
    bool soft_pin_ttl_set;
    unsigned long long soft_pin_ttl_ms;
    bool with_hard_pin;
    bool prefer_alloc_in_same_node;
    PyObject *preferred_segments;     /* tuple of str */
    PyObject *preferred_segment;      /* str */
    PyObject *preferred_nof_segments; /* tuple of str */
    int data_type;
    PyObject *group_ids; /* tuple of str, or NULL for None */
} rc_object;

static PyObject *rc_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    rc_object *self = (rc_object *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->replica_num = 1;
    self->preferred_segments = PyTuple_New(0);
    self->preferred_nof_segments = PyTuple_New(0);
    self->preferred_segment = PyUnicode_FromString("");
    if (!self->preferred_segments || !self->preferred_nof_segments ||
        !self->preferred_segment) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int rc_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "ReplicateConfig() takes no positional arguments (set attributes, "
                        "or pass them as keywords)");
        return -1;
    }
    if (kwds) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwds, &pos, &k, &v)) {
            if (!PyObject_HasAttr(self, k) || (PyUnicode_Check(k) &&
                                               PyUnicode_READ_CHAR(k, 0) == '_')) {
                PyErr_Format(PyExc_TypeError,
                             "'%U' is an invalid keyword argument for ReplicateConfig()", k);
                return -1;
            }
            if (PyObject_SetAttr(self, k, v) < 0)
                return -1;
        }
    }
    return 0;
}

static void rc_dealloc(PyObject *o)
{
    rc_object *self = (rc_object *)o;
    Py_XDECREF(self->preferred_segments);
    Py_XDECREF(self->preferred_segment);
    Py_XDECREF(self->preferred_nof_segments);
    Py_XDECREF(self->group_ids);
    Py_TYPE(o)->tp_free(o);
}

#define RC_NO_DELETE(v, name)                                                          \
    do {                                                                               \
        if (!(v)) {                                                                    \
            PyErr_SetString(PyExc_TypeError, "cannot delete ReplicateConfig." name);   \
            return -1;                                                                 \
        }                                                                              \
    } while (0)

static int set_u64_attr(PyObject *v, const char *name, unsigned long long *dst)
{
    uint64_t x;
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete ReplicateConfig.%s", name);
        return -1;
    }
    if (PyBool_Check(v) || mcpy_u64(v, "ReplicateConfig", name, &x) < 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "ReplicateConfig.%s must be an int, not bool",
                         name);
        return -1;
    }
    *dst = x;
    return 0;
}

static int set_bool_attr(PyObject *v, const char *name, bool *dst)
{
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete ReplicateConfig.%s", name);
        return -1;
    }
    int t = PyObject_IsTrue(v);
    if (t < 0)
        return -1;
    *dst = t != 0;
    return 0;
}

/* A tuple of str from a list/tuple of str or bytes (bytes decoded as UTF-8). */
static PyObject *str_tuple(PyObject *v, const char *name)
{
    PyObject *t = mcpy_seq_tuple(v, "ReplicateConfig", name);
    if (!t)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    PyObject *out = PyTuple_New(n);
    if (!out) {
        Py_DECREF(t);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(t, i), *s = NULL;
        if (PyUnicode_Check(x))
            s = Py_NewRef(x);
        else if (PyBytes_Check(x))
            s = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x), "strict");
        else
            PyErr_Format(PyExc_TypeError, "ReplicateConfig.%s must be a list of str, item "
                         "%zd is %.100s", name, i, Py_TYPE(x)->tp_name);
        if (!s) {
            Py_DECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, s);
    }
    Py_DECREF(t);
    return out;
}

#define RC_U64(field)                                                                  \
    static PyObject *rc_get_##field(PyObject *o, void *c)                              \
    {                                                                                  \
        (void)c;                                                                       \
        return PyLong_FromUnsignedLongLong(((rc_object *)o)->field);                   \
    }                                                                                  \
    static int rc_set_##field(PyObject *o, PyObject *v, void *c)                       \
    {                                                                                  \
        (void)c;                                                                       \
        return set_u64_attr(v, #field, &((rc_object *)o)->field);                      \
    }
RC_U64(replica_num)
RC_U64(nof_replica_num)
RC_U64(dfs_replica_num)

#define RC_BOOL(field)                                                                 \
    static PyObject *rc_get_##field(PyObject *o, void *c)                              \
    {                                                                                  \
        (void)c;                                                                       \
        return PyBool_FromLong(((rc_object *)o)->field);                               \
    }                                                                                  \
    static int rc_set_##field(PyObject *o, PyObject *v, void *c)                       \
    {                                                                                  \
        (void)c;                                                                       \
        return set_bool_attr(v, #field, &((rc_object *)o)->field);                     \
    }
RC_BOOL(with_soft_pin)
RC_BOOL(with_hard_pin)
RC_BOOL(prefer_alloc_in_same_node)

#define RC_LIST(field)                                                                 \
    static PyObject *rc_get_##field(PyObject *o, void *c)                              \
    {                                                                                  \
        (void)c;                                                                       \
        return PySequence_List(((rc_object *)o)->field);                               \
    }                                                                                  \
    static int rc_set_##field(PyObject *o, PyObject *v, void *c)                       \
    {                                                                                  \
        (void)c;                                                                       \
        RC_NO_DELETE(v, #field);                                                       \
        PyObject *t = str_tuple(v, #field);                                            \
        if (!t)                                                                        \
            return -1;                                                                 \
        Py_SETREF(((rc_object *)o)->field, t);                                         \
        return 0;                                                                      \
    }
RC_LIST(preferred_segments)
RC_LIST(preferred_nof_segments)

static PyObject *rc_get_preferred_segment(PyObject *o, void *c)
{
    (void)c;
    return Py_NewRef(((rc_object *)o)->preferred_segment);
}

static int rc_set_preferred_segment(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    RC_NO_DELETE(v, "preferred_segment");
    PyObject *s;
    if (PyUnicode_Check(v))
        s = Py_NewRef(v);
    else if (PyBytes_Check(v))
        s = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), "strict");
    else {
        PyErr_Format(PyExc_TypeError, "ReplicateConfig.preferred_segment must be str, not "
                     "%.100s", Py_TYPE(v)->tp_name);
        return -1;
    }
    if (!s)
        return -1;
    Py_SETREF(((rc_object *)o)->preferred_segment, s);
    return 0;
}

static int set_enum_attr(PyObject *v, const char *name, int maxv, int *dst)
{
    long long x;
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete ReplicateConfig.%s", name);
        return -1;
    }
    if (PyBool_Check(v) || PyFloat_Check(v) || !PyIndex_Check(v)) {
        PyErr_Format(PyExc_TypeError, "ReplicateConfig.%s must be a %s member, not %.100s",
                     name, name[0] == 's' ? "SoftPinAction" : "ObjectDataType",
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    if (mcpy_int(v, "ReplicateConfig", name, 0, maxv, &x) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "ReplicateConfig.%s must be in 0..%d", name, maxv);
        return -1;
    }
    *dst = (int)x;
    return 0;
}

static PyObject *rc_get_soft_pin_action(PyObject *o, void *c)
{
    (void)c;
    return enum_member(soft_pin_cls, ((rc_object *)o)->soft_pin_action);
}

static int rc_set_soft_pin_action(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    return set_enum_attr(v, "soft_pin_action", 2, &((rc_object *)o)->soft_pin_action);
}

static PyObject *rc_get_data_type(PyObject *o, void *c)
{
    (void)c;
    return enum_member(data_type_cls, ((rc_object *)o)->data_type);
}

static int rc_set_data_type(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    return set_enum_attr(v, "data_type", 9, &((rc_object *)o)->data_type);
}

static PyObject *rc_get_soft_pin_ttl_ms(PyObject *o, void *c)
{
    (void)c;
    rc_object *self = (rc_object *)o;
    if (!self->soft_pin_ttl_set)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(self->soft_pin_ttl_ms);
}

static int rc_set_soft_pin_ttl_ms(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    rc_object *self = (rc_object *)o;
    RC_NO_DELETE(v, "soft_pin_ttl_ms");
    if (v == Py_None) {
        self->soft_pin_ttl_set = false;
        self->soft_pin_ttl_ms = 0;
        return 0;
    }
    unsigned long long x;
    if (set_u64_attr(v, "soft_pin_ttl_ms", &x) < 0)
        return -1;
    self->soft_pin_ttl_set = true;
    self->soft_pin_ttl_ms = x;
    return 0;
}

static PyObject *rc_get_group_ids(PyObject *o, void *c)
{
    (void)c;
    rc_object *self = (rc_object *)o;
    if (!self->group_ids)
        Py_RETURN_NONE;
    return PySequence_List(self->group_ids);
}

static int rc_set_group_ids(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    rc_object *self = (rc_object *)o;
    RC_NO_DELETE(v, "group_ids");
    if (v == Py_None) {
        Py_CLEAR(self->group_ids);
        return 0;
    }
    PyObject *t = str_tuple(v, "group_ids");
    if (!t)
        return -1;
    Py_XSETREF(self->group_ids, t);
    return 0;
}

#define RC_GS(name, doc) {#name, rc_get_##name, rc_set_##name, doc, NULL}
static PyGetSetDef rc_getset[] = {
    RC_GS(replica_num, "int, 1: memory replicas wanted, each on a different segment "
                       "(best effort: fewer is success). 0 is refused by puts (-600)."),
    RC_GS(nof_replica_num, "int, 0: NVMe-oF replicas (not supported: puts with a non-zero "
                           "value return -600)."),
    RC_GS(dfs_replica_num, "int, 0: DFS replicas (not supported: non-zero gives -600)."),
    RC_GS(soft_pin_action, "SoftPinAction, PRESERVE: ENABLE pins the object for "
                           "soft_pin_ttl_ms; DISABLE unpins on upsert (upstream HEAD)."),
    RC_GS(soft_pin_ttl_ms, "int ms or None (master default): only with ENABLE, else the "
                           "put returns -600; 0 = ordinary cache object."),
    RC_GS(with_soft_pin, "bool, False: v0.3.12 spelling of soft_pin_action=ENABLE."),
    RC_GS(with_hard_pin, "bool, False: never evicted (removable with force)."),
    RC_GS(preferred_segments, "list[str], []: segment names ('host:port') tried first, in "
                              "order (the getter returns a copy)."),
    RC_GS(preferred_segment, "str, '': deprecated single preferred segment."),
    RC_GS(preferred_nof_segments, "list[str], []: NVMe-oF segments (unused)."),
    RC_GS(prefer_alloc_in_same_node, "bool, False: local first; only the multi-buffer "
                                     "(and tensor) puts accept it, other puts return -600."),
    RC_GS(data_type, "ObjectDataType, UNKNOWN: tag only."),
    RC_GS(group_ids, "list[str] or None: one group per key of a batch call (length must "
                     "match the keys, else -600); accepted, not used for placement."),
    {NULL, NULL, NULL, NULL, NULL},
};

static const char *const rc_attr_names[] = {
    "replica_num", "nof_replica_num", "dfs_replica_num", "soft_pin_action",
    "soft_pin_ttl_ms", "with_soft_pin", "with_hard_pin", "preferred_segments",
    "preferred_segment", "preferred_nof_segments", "prefer_alloc_in_same_node",
    "data_type", "group_ids", NULL,
};

static const char *enum_name(const enum_row *rows, size_t n, int v)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].value == v)
            return rows[i].name;
    return "?";
}

static PyObject *rc_repr(PyObject *o)
{
    rc_object *self = (rc_object *)o;
    PyObject *segs = PySequence_List(self->preferred_segments);
    PyObject *groups = self->group_ids ? PySequence_List(self->group_ids) : Py_NewRef(Py_None);
    PyObject *ttl = self->soft_pin_ttl_set
                        ? PyUnicode_FromFormat("%llu", self->soft_pin_ttl_ms)
                        : PyUnicode_FromString("default");
    PyObject *r = NULL;
    if (segs && groups && ttl)
        r = PyUnicode_FromFormat(
            "ReplicateConfig: { replica_num: %llu, nof_replica_num: %llu, dfs_replica_num: "
            "%llu, soft_pin_action: %s, soft_pin_ttl_ms: %U, with_soft_pin: %s, "
            "with_hard_pin: %s, preferred_segments: %R, preferred_segment: %R, "
            "prefer_alloc_in_same_node: %s, data_type: %s, group_ids: %R }",
            self->replica_num, self->nof_replica_num, self->dfs_replica_num,
            enum_name(soft_pin_rows, 3, self->soft_pin_action), ttl,
            self->with_soft_pin ? "true" : "false", self->with_hard_pin ? "true" : "false",
            segs, self->preferred_segment, self->prefer_alloc_in_same_node ? "true" : "false",
            enum_name(data_type_rows, 10, self->data_type), groups);
    Py_XDECREF(segs);
    Py_XDECREF(groups);
    Py_XDECREF(ttl);
    return r;
}

/* __reduce__: (ReplicateConfig, (), {attr: value}) so copy/pickle keep every field. */
static PyObject *rc_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *state = PyDict_New();
    if (!state)
        return NULL;
    for (int i = 0; rc_attr_names[i]; i++) {
        PyObject *v = PyObject_GetAttrString(self, rc_attr_names[i]);
        if (!v || PyDict_SetItemString(state, rc_attr_names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(state);
            return NULL;
        }
        Py_DECREF(v);
    }
    return Py_BuildValue("(O()N)", (PyObject *)Py_TYPE(self), state);
}

static PyObject *rc_setstate(PyObject *self, PyObject *state)
{
    if (!PyDict_Check(state)) {
        PyErr_SetString(PyExc_TypeError, "ReplicateConfig state must be a dict");
        return NULL;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(state, &pos, &k, &v))
        if (PyObject_SetAttr(self, k, v) < 0)
            return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef rc_methods[] = {
    {"__reduce__", rc_reduce, METH_NOARGS, NULL},
    {"__setstate__", rc_setstate, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject mcpy_replicate_config_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.ReplicateConfig",
    .tp_basicsize = sizeof(rc_object),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "ReplicateConfig(): per-put placement options (upstream replica.h). Set the "
              "attributes after construction (keywords are accepted as a shortcut); "
              "pass it as the `config` argument of put*/upsert*/pub_tensor*.",
    .tp_new = rc_new,
    .tp_init = rc_init,
    .tp_dealloc = rc_dealloc,
    .tp_getset = rc_getset,
    .tp_methods = rc_methods,
    .tp_repr = rc_repr,
};

int mcpy_rc_from(PyObject *cfg, const char *fn, mcpy_rc *out)
{
    memset(out, 0, sizeof(*out));
    mc_store_replicate_config_init(&out->c);
    if (!cfg || cfg == Py_None)
        return 0;
    if (!PyObject_TypeCheck(cfg, &mcpy_replicate_config_type)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'config' must be ReplicateConfig, not "
                     "%.100s", fn, Py_TYPE(cfg)->tp_name);
        return -1;
    }
    rc_object *r = (rc_object *)cfg;
#define CLAMP32(x) ((x) > UINT32_MAX ? UINT32_MAX : (uint32_t)(x))
    out->c.replica_num = CLAMP32(r->replica_num);
    out->c.nof_replica_num = CLAMP32(r->nof_replica_num);
    out->c.dfs_replica_num = CLAMP32(r->dfs_replica_num);
#undef CLAMP32
    out->c.soft_pin_action = r->soft_pin_action;
    out->c.with_soft_pin = r->with_soft_pin;
    out->c.soft_pin_ttl_set = r->soft_pin_ttl_set;
    out->c.soft_pin_ttl_ms = r->soft_pin_ttl_ms;
    out->c.with_hard_pin = r->with_hard_pin;
    out->c.prefer_alloc_in_same_node = r->prefer_alloc_in_same_node;
    out->c.data_type = r->data_type;
    out->segs = Py_NewRef(r->preferred_segments);
    out->seg = Py_NewRef(r->preferred_segment);
    out->groups = r->group_ids ? Py_NewRef(r->group_ids) : NULL;
    Py_ssize_t ns = PyTuple_GET_SIZE(out->segs);
    out->seg_ptrs = PyMem_Calloc((size_t)ns + 1, sizeof(char *));
    if (!out->seg_ptrs)
        goto nomem;
    for (Py_ssize_t i = 0; i < ns; i++)
        if (mcpy_cstr(PyTuple_GET_ITEM(out->segs, i), fn, "config.preferred_segments",
                      &out->seg_ptrs[i]) < 0)
            goto fail;
    out->c.preferred_segments = out->seg_ptrs;
    out->c.n_preferred_segments = (size_t)ns;
    if (mcpy_cstr(out->seg, fn, "config.preferred_segment", &out->c.preferred_segment) < 0)
        goto fail;
    if (out->groups) {
        Py_ssize_t ng = PyTuple_GET_SIZE(out->groups);
        out->group_ptrs = PyMem_Calloc((size_t)ng + 1, sizeof(char *));
        if (!out->group_ptrs)
            goto nomem;
        for (Py_ssize_t i = 0; i < ng; i++)
            if (mcpy_cstr(PyTuple_GET_ITEM(out->groups, i), fn, "config.group_ids",
                          &out->group_ptrs[i]) < 0)
                goto fail;
        out->c.group_ids = out->group_ptrs;
        out->c.n_group_ids = (size_t)ng;
    }
    return 0;
nomem:
    PyErr_NoMemory();
fail:
    mcpy_rc_clear(out);
    return -1;
}

void mcpy_rc_clear(mcpy_rc *rc)
{
    Py_CLEAR(rc->segs);
    Py_CLEAR(rc->groups);
    Py_CLEAR(rc->seg);
    PyMem_Free(rc->seg_ptrs);
    PyMem_Free(rc->group_ptrs);
    rc->seg_ptrs = NULL;
    rc->group_ptrs = NULL;
}

/* ================================================================================== */
/* BufferHandle                                                                        */
/* ================================================================================== */

typedef struct {
    PyObject_HEAD
    mc_store_buffer *buf; /* owned; freed in dealloc */
} bh_object;

static char bh_empty[1];

PyObject *mcpy_buffer_handle_new(mc_store_buffer *b)
{
    bh_object *self = PyObject_New(bh_object, &mcpy_buffer_handle_type);
    if (!self) {
        mc_store_buffer_free(b);
        return NULL;
    }
    self->buf = b;
    return (PyObject *)self;
}

static void bh_dealloc(PyObject *o)
{
    bh_object *self = (bh_object *)o;
    mc_store_buffer *b = self->buf;
    self->buf = NULL;
    if (b) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_buffer_free(b);
        Py_END_ALLOW_THREADS
    }
    PyObject_Free(o);
}

static PyObject *bh_ptr(PyObject *o, PyObject *unused)
{
    (void)unused;
    bh_object *self = (bh_object *)o;
    return PyLong_FromVoidPtr(self->buf ? mc_store_buffer_data(self->buf) : NULL);
}

static PyObject *bh_size(PyObject *o, PyObject *unused)
{
    (void)unused;
    bh_object *self = (bh_object *)o;
    return PyLong_FromUnsignedLongLong(self->buf ? mc_store_buffer_size(self->buf) : 0);
}

static Py_ssize_t bh_len(PyObject *o)
{
    bh_object *self = (bh_object *)o;
    return self->buf ? (Py_ssize_t)mc_store_buffer_size(self->buf) : 0;
}

static int bh_getbuffer(PyObject *o, Py_buffer *view, int flags)
{
    bh_object *self = (bh_object *)o;
    void *p = self->buf ? mc_store_buffer_data(self->buf) : NULL;
    Py_ssize_t n = self->buf ? (Py_ssize_t)mc_store_buffer_size(self->buf) : 0;
    if (PyBuffer_FillInfo(view, o, p ? p : bh_empty, n, 0, flags) < 0)
        return -1;
    if (flags & PyBUF_FORMAT)
        view->format = "b"; /* upstream exports char, itemsize 1 */
    return 0;
}

static PyObject *bh_repr(PyObject *o)
{
    bh_object *self = (bh_object *)o;
    return PyUnicode_FromFormat("<BufferHandle ptr=%p size=%llu>",
                                self->buf ? mc_store_buffer_data(self->buf) : NULL,
                                (unsigned long long)(self->buf ? mc_store_buffer_size(self->buf)
                                                               : 0));
}

static PyMethodDef bh_methods[] = {
    {"ptr", bh_ptr, METH_NOARGS, "ptr() -> int: address of the bytes (0 when empty)."},
    {"size", bh_size, METH_NOARGS, "size() -> int: number of bytes."},
    {NULL, NULL, 0, NULL},
};

static PyBufferProcs bh_as_buffer = {.bf_getbuffer = bh_getbuffer};
static PySequenceMethods bh_as_seq = {.sq_length = bh_len};

PyTypeObject mcpy_buffer_handle_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.BufferHandle",
    .tp_basicsize = sizeof(bh_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "BufferHandle: an object's bytes in this client's memory (returned by "
              "get_buffer / batch_get_buffer; upstream client_buffer.h). Supports the "
              "buffer protocol (1-D, format 'b', writable): memoryview(h), bytes(h), "
              "numpy.frombuffer(h, ...). The memory is released when the handle and every "
              "view of it are gone, even after the store was closed.",
    .tp_dealloc = bh_dealloc,
    .tp_methods = bh_methods,
    .tp_as_buffer = &bh_as_buffer,
    .tp_as_sequence = &bh_as_seq,
    .tp_repr = bh_repr,
};

/* ================================================================================== */
/* Replica descriptors                                                                 */
/* ================================================================================== */

typedef struct {
    PyObject_HEAD
    unsigned long long size;
    unsigned long long buffer_address;
    PyObject *transport_endpoint;
} desc_object;

typedef struct {
    PyObject_HEAD
    PyObject *buffer_descriptor;
} memdesc_object;

typedef struct {
    PyObject_HEAD
    PyObject *file_path;
    unsigned long long object_size;
} diskdesc_object;

typedef struct {
    PyObject_HEAD
    PyObject *status;
    PyObject *memory; /* MemoryDescriptor or NULL */
    PyObject *disk;   /* DiskDescriptor or NULL */
    bool local_disk;
} replica_object;

static void desc_dealloc(PyObject *o)
{
    Py_XDECREF(((desc_object *)o)->transport_endpoint);
    Py_TYPE(o)->tp_free(o);
}

static void memdesc_dealloc(PyObject *o)
{
    Py_XDECREF(((memdesc_object *)o)->buffer_descriptor);
    Py_TYPE(o)->tp_free(o);
}

static void diskdesc_dealloc(PyObject *o)
{
    Py_XDECREF(((diskdesc_object *)o)->file_path);
    Py_TYPE(o)->tp_free(o);
}

static void replica_dealloc(PyObject *o)
{
    replica_object *r = (replica_object *)o;
    Py_XDECREF(r->status);
    Py_XDECREF(r->memory);
    Py_XDECREF(r->disk);
    Py_TYPE(o)->tp_free(o);
}

static PyObject *desc_repr(PyObject *o)
{
    desc_object *d = (desc_object *)o;
    return PyUnicode_FromFormat("<Descriptor size=%llu buffer_address=%llu "
                                "transport_endpoint=%S>",
                                d->size, d->buffer_address, d->transport_endpoint);
}

static PyMemberDef desc_members[] = {
    {"size", T_ULONGLONG, offsetof(desc_object, size), 0, "bytes"},
    {"buffer_address", T_ULONGLONG, offsetof(desc_object, buffer_address), 0,
     "address of the replica in its owner's process"},
    {"transport_endpoint", T_OBJECT_EX, offsetof(desc_object, transport_endpoint), 0,
     "owner's segment name 'host:port'"},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef memdesc_members[] = {
    {"buffer_descriptor", T_OBJECT_EX, offsetof(memdesc_object, buffer_descriptor), READONLY,
     "Descriptor of the replica's memory"},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef diskdesc_members[] = {
    {"file_path", T_OBJECT_EX, offsetof(diskdesc_object, file_path), 0, "str"},
    {"object_size", T_ULONGLONG, offsetof(diskdesc_object, object_size), 0, "bytes"},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef replica_members[] = {
    {"status", T_OBJECT_EX, offsetof(replica_object, status), READONLY, "ReplicaStatus"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *replica_is_memory(PyObject *o, PyObject *u)
{
    (void)u;
    return PyBool_FromLong(((replica_object *)o)->memory != NULL);
}

static PyObject *replica_is_disk(PyObject *o, PyObject *u)
{
    (void)u;
    replica_object *r = (replica_object *)o;
    return PyBool_FromLong(r->disk != NULL && !r->local_disk);
}

static PyObject *replica_is_local_disk(PyObject *o, PyObject *u)
{
    (void)u;
    replica_object *r = (replica_object *)o;
    return PyBool_FromLong(r->disk != NULL && r->local_disk);
}

static PyObject *replica_get_memory(PyObject *o, PyObject *u)
{
    (void)u;
    replica_object *r = (replica_object *)o;
    if (!r->memory) {
        PyErr_SetString(PyExc_RuntimeError, "not a memory replica");
        return NULL;
    }
    return Py_NewRef(r->memory);
}

static PyObject *replica_get_disk(PyObject *o, PyObject *u)
{
    (void)u;
    replica_object *r = (replica_object *)o;
    if (!r->disk) {
        PyErr_SetString(PyExc_RuntimeError, "not a disk replica");
        return NULL;
    }
    return Py_NewRef(r->disk);
}

static PyObject *replica_repr(PyObject *o)
{
    replica_object *r = (replica_object *)o;
    PyObject *name = PyObject_GetAttrString(r->status, "name"), *res;
    if (!name) {
        PyErr_Clear();
        name = PyObject_Str(r->status);
        if (!name)
            return NULL;
    }
    if (r->memory)
        res = PyUnicode_FromFormat("<ReplicaDescriptor status=%U memory=%R>", name,
                                   ((memdesc_object *)r->memory)->buffer_descriptor);
    else
        res = PyUnicode_FromFormat("<ReplicaDescriptor status=%U>", name);
    Py_DECREF(name);
    return res;
}

static PyMethodDef replica_methods[] = {
    {"is_memory_replica", replica_is_memory, METH_NOARGS, "True for an in-memory replica."},
    {"is_disk_replica", replica_is_disk, METH_NOARGS, "True for a disk replica (never here)."},
    {"is_local_disk_replica", replica_is_local_disk, METH_NOARGS,
     "True for a local-disk replica (never here)."},
    {"get_memory_descriptor", replica_get_memory, METH_NOARGS,
     "MemoryDescriptor; RuntimeError for other replicas."},
    {"get_disk_descriptor", replica_get_disk, METH_NOARGS,
     "DiskDescriptor; RuntimeError for other replicas."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject desc_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.Descriptor",
    .tp_basicsize = sizeof(desc_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Where a memory replica lives (upstream AllocatedBuffer::Descriptor).",
    .tp_dealloc = desc_dealloc,
    .tp_members = desc_members,
    .tp_repr = desc_repr,
};

static PyTypeObject memdesc_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.MemoryDescriptor",
    .tp_basicsize = sizeof(memdesc_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory replica descriptor: buffer_descriptor.",
    .tp_dealloc = memdesc_dealloc,
    .tp_members = memdesc_members,
};

static PyTypeObject diskdesc_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.DiskDescriptor",
    .tp_basicsize = sizeof(diskdesc_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Disk replica descriptor (no disk replicas in mooncake-c yet).",
    .tp_dealloc = diskdesc_dealloc,
    .tp_members = diskdesc_members,
};

static PyTypeObject replica_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.ReplicaDescriptor",
    .tp_basicsize = sizeof(replica_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One replica of an object (get_replica_desc / batch_get_replica_desc).",
    .tp_dealloc = replica_dealloc,
    .tp_members = replica_members,
    .tp_methods = replica_methods,
    .tp_repr = replica_repr,
};

static PyObject *replica_to_py(const mc_store_replica_desc *d)
{
    desc_object *desc = PyObject_New(desc_object, &desc_type);
    if (!desc)
        return NULL;
    desc->size = d->size;
    desc->buffer_address = d->buffer_address;
    desc->transport_endpoint = PyUnicode_DecodeUTF8(
        d->transport_endpoint, (Py_ssize_t)strnlen(d->transport_endpoint, MC_STORE_NAME_MAX),
        "replace");
    if (!desc->transport_endpoint) {
        Py_DECREF(desc);
        return NULL;
    }
    memdesc_object *mem = PyObject_New(memdesc_object, &memdesc_type);
    if (!mem) {
        Py_DECREF(desc);
        return NULL;
    }
    mem->buffer_descriptor = (PyObject *)desc;
    replica_object *r = PyObject_New(replica_object, &replica_type);
    if (!r) {
        Py_DECREF(mem);
        return NULL;
    }
    r->memory = (PyObject *)mem;
    r->disk = NULL;
    r->local_disk = false;
    r->status = enum_member(replica_status_cls, d->status);
    if (!r->status) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

PyObject *mcpy_replica_list_to_py(const mc_store_replica_list *l)
{
    uint32_t n = l->n > MC_STORE_MAX_REPLICAS ? MC_STORE_MAX_REPLICAS : l->n;
    PyObject *list = PyList_New(n);
    if (!list)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        PyObject *r = replica_to_py(&l->replicas[i]);
        if (!r) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, r);
    }
    return list;
}

/* ================================================================================== */
/* MooncakeHostMemAllocator                                                            */
/* ================================================================================== */

/* Every live allocation, process-wide (allocations outlive the allocator objects, as
 * upstream's singleton ShmHelper). Guarded by host_mu. */
typedef struct {
    void *addr;
    size_t size;
    int fd;
} host_alloc;
static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;
static host_alloc *host_allocs;
static size_t host_n, host_cap;

#define HOST_ALLOC_MAX (1ull << 40)

typedef struct {
    PyObject_HEAD
} hostmem_object;

static PyObject *hostmem_alloc(PyObject *self, PyObject *arg)
{
    (void)self;
    uint64_t size;
    if (mcpy_u64(arg, "alloc", "size", &size) < 0)
        return NULL;
    if (size == 0 || size > HOST_ALLOC_MAX)
        return PyLong_FromLong(0);
    void *p = MAP_FAILED;
    int fd;
    Py_BEGIN_ALLOW_THREADS
    fd = memfd_create("mooncake_shm", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED && fd >= 0) {
        close(fd);
        fd = -1;
    }
    if (p != MAP_FAILED) {
        pthread_mutex_lock(&host_mu);
        if (host_n == host_cap) {
            size_t nc = host_cap ? host_cap * 2 : 16;
            host_alloc *na = realloc(host_allocs, nc * sizeof(*na));
            if (na) {
                host_allocs = na;
                host_cap = nc;
            }
        }
        if (host_n < host_cap) {
            host_allocs[host_n++] = (host_alloc){p, (size_t)size, fd};
        } else {
            munmap(p, size);
            close(fd);
            p = MAP_FAILED;
        }
        pthread_mutex_unlock(&host_mu);
    }
    Py_END_ALLOW_THREADS
    if (p == MAP_FAILED) {
        mc_log(MC_LOG_WARN, TAG, "MooncakeHostMemAllocator.alloc(%llu) failed: %s",
               (unsigned long long)size, strerror(errno));
        return PyLong_FromLong(0);
    }
    return PyLong_FromVoidPtr(p);
}

static PyObject *hostmem_free(PyObject *self, PyObject *arg)
{
    (void)self;
    uint64_t addr;
    if (mcpy_u64(arg, "free", "ptr", &addr) < 0)
        return NULL;
    host_alloc found = {NULL, 0, -1};
    pthread_mutex_lock(&host_mu);
    for (size_t i = 0; i < host_n; i++) {
        if ((uintptr_t)host_allocs[i].addr == addr) {
            found = host_allocs[i];
            host_allocs[i] = host_allocs[--host_n];
            break;
        }
    }
    pthread_mutex_unlock(&host_mu);
    if (!found.addr)
        return PyLong_FromLong(MC_INVALID_PARAMS);
    Py_BEGIN_ALLOW_THREADS
    munmap(found.addr, found.size);
    close(found.fd);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(0);
}

static PyMethodDef hostmem_methods[] = {
    {"alloc", hostmem_alloc, METH_O,
     "alloc(size: int) -> int: address of `size` bytes of shared (memfd) host memory, "
     "zero-filled; 0 on failure (size 0 or above 1 TiB, out of memory). Lives until "
     "free(), independent of this object."},
    {"free", hostmem_free, METH_O,
     "free(ptr: int) -> int: releases memory from alloc(); 0, or -600 when ptr did not "
     "come from alloc()."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject hostmem_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.MooncakeHostMemAllocator",
    .tp_basicsize = sizeof(hostmem_object),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "MooncakeHostMemAllocator(): shared host memory for clients that hand "
              "buffers to the store by address (upstream shm_helper.h).",
    .tp_new = PyType_GenericNew,
    .tp_methods = hostmem_methods,
};

/* ================================================================================== */
/* Module init                                                                         */
/* ================================================================================== */

int mcpy_types_init(PyObject *module)
{
    replica_status_cls = make_enum(module, "ReplicaStatus",
                                   "Replica states (upstream replica.h).",
                                   replica_status_rows, 6, true);
    if (!replica_status_cls)
        return -1;
    soft_pin_cls = make_enum(module, "SoftPinAction",
                             "ReplicateConfig.soft_pin_action values (upstream HEAD).",
                             soft_pin_rows, 3, false);
    if (!soft_pin_cls)
        return -1;
    data_type_cls = make_enum(module, "ObjectDataType",
                              "ReplicateConfig.data_type tags (upstream types.h).",
                              data_type_rows, 10, true);
    if (!data_type_cls)
        return -1;
    struct {
        PyTypeObject *t;
        const char *name;
    } types[] = {
        {&mcpy_replicate_config_type, "ReplicateConfig"},
        {&mcpy_buffer_handle_type, "BufferHandle"},
        {&desc_type, "Descriptor"},
        {&memdesc_type, "MemoryDescriptor"},
        {&diskdesc_type, "DiskDescriptor"},
        {&replica_type, "ReplicaDescriptor"},
        {&hostmem_type, "MooncakeHostMemAllocator"},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (PyType_Ready(types[i].t) < 0 ||
            PyModule_AddObjectRef(module, types[i].name, (PyObject *)types[i].t) < 0)
            return -1;
    }
    return 0;
}
