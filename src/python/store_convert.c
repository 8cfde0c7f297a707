/* store_convert.c: the argument converters and result-list builders of `mooncake.store`
 * (declared in store_py.h). Pure conversions: no store calls, no module state, no GIL
 * release. Error messages follow upstream's pybind11 casts (store_py.h). */
#include "store_py.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

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

/* Keys are copied into a tuple first: the C call runs with the GIL released and must not
 * see the caller's list change under it. */
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

mcpy_state *mcpy_method_args(PyObject *self, PyObject *args, PyObject *kwds, const char *spec,
                             const char *fn, char **kw, ...)
{
    mcpy_state *st = mcpy_state_of(self);
    if (!st)
        return NULL;
    char fmt[96];
    snprintf(fmt, sizeof(fmt), "%s:%s", spec, fn);
    va_list ap;
    va_start(ap, kw);
    int ok = PyArg_VaParseTupleAndKeywords(args, kwds, fmt, kw, ap);
    va_end(ap);
    return ok ? st : NULL;
}

/* (name[, force]) of method fn: the first argument (borrowed) in *obj. */
static int parse_one(PyObject *args, PyObject *kwds, const char *fn, const char *name,
                     int *force, PyObject **obj)
{
    char *kw[] = {(char *)name, force ? "force" : NULL, NULL};
    char fmt[64];
    snprintf(fmt, sizeof(fmt), "O%s:%s", force ? "|p" : "", fn);
    if (force)
        *force = 0;
    return PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw, obj, force) ? 0 : -1;
}

int mcpy_arg_key(PyObject *args, PyObject *kwds, const char *fn, const char *name, int *force,
                 mc_store_key *out)
{
    PyObject *obj;
    if (parse_one(args, kwds, fn, name, force, &obj) < 0)
        return -1;
    return mcpy_key(obj, fn, name, out);
}

int mcpy_arg_keys(PyObject *args, PyObject *kwds, const char *fn, int *force, mcpy_keys *out)
{
    PyObject *obj;
    memset(out, 0, sizeof(*out));
    if (parse_one(args, kwds, fn, "keys", force, &obj) < 0)
        return -1;
    return mcpy_keys_from(obj, fn, "keys", out);
}

int mcpy_u64(PyObject *obj, const char *fn, const char *arg, uint64_t *out)
{
    if (PyFloat_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be int, not %.100s", fn, arg,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    /* floats are refused outright (pybind11 does not truncate them) */
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
    /* two passes: the row tuples and their lengths first, then the flat values */
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
    for (size_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLong(code);
        if (!x) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, x);
    }
    return l;
}

void mcpy_multi_clear(mcpy_multi_args *m)
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
int mcpy_multi_parse(mcpy_multi_args *m, PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes,
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
        mc_log(MC_LOG_ERROR, MCPY_TAG, "%s: %zu keys, %zu pointer rows, %zu size rows", fn, n,
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
