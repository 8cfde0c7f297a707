/* store_write.c: the write methods of MooncakeDistributedStore: put, put_parts,
 * put_batch, put_from, put_from_with_metadata, batch_put_from,
 * batch_put_from_multi_buffers and their upsert twins. Each converts its arguments with
 * the GIL held, runs the C write with the GIL released, and returns 0 / a negative code
 * (one int per key for batch_*). Reads and tensors live elsewhere. */
#include "store_py.h"

#include <stdio.h>
#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MCPY_TAG

typedef int (*put_fn)(mc_store *, const void *, size_t, const void *, size_t,
                      const mc_store_replicate_config *);
typedef int (*parts_fn)(mc_store *, const void *, size_t, const mc_store_iov *, size_t,
                        const mc_store_replicate_config *);
typedef int (*batch_put_fn)(mc_store *, const mc_store_key *, size_t, const void *const *,
                            const uint64_t *, const mc_store_replicate_config *, int *);
typedef int (*multi_put_fn)(mc_store *, const mc_store_key *, size_t,
                            const mc_store_iov *const *, const size_t *,
                            const mc_store_replicate_config *, int *);

/* The end of the single-key puts: converts the config (a_cfg may be NULL), then, when ok,
 * calls call(key, buf, len) without the GIL, else the result is MC_INVALID_PARAMS. Returns
 * the result as an int, or NULL with the config's exception set. */
static PyObject *put_one(mcpy_state *st, mcpy_store *self, const mc_store_key *key,
                         const void *buf, size_t len, bool ok, PyObject *a_cfg, const char *fn,
                         put_fn call)
{
    mcpy_rc rc;
    if (mcpy_rc_from(st, a_cfg, fn, &rc) < 0)
        return NULL;
    int r = MC_INVALID_PARAMS;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        r = call(self->store, key->data, key->len, buf, len, &rc.c);
        Py_END_ALLOW_THREADS
    }
    mcpy_rc_clear(&rc);
    return PyLong_FromLong(r);
}

/* put(key, value, config=ReplicateConfig()) / upsert. */
static PyObject *do_put(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                        put_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"key", "value", "config", NULL};
    PyObject *a_key, *a_val, *a_cfg = NULL;
    mcpy_state *st = mcpy_method_args(o, args, kwds, "OO|O", fn, kw, &a_key, &a_val, &a_cfg);
    if (!st)
        return NULL;
    mc_store_key key;
    Py_buffer view;
    if (mcpy_key(a_key, fn, "key", &key) < 0)
        return NULL;
    if (mcpy_get_buffer(a_val, fn, "value", &view) < 0)
        return NULL;
    PyObject *ret = put_one(st, self, &key, view.buf, (size_t)view.len, true, a_cfg, fn, call);
    PyBuffer_Release(&view);
    return ret;
}

/* put_parts(key, *parts, config=ReplicateConfig()) / upsert_parts. */
static PyObject *do_put_parts(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                              parts_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_state *st = mcpy_state_of(o);
    if (!st)
        return NULL;
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
    /* every part stays exported (its buffer pinned) until the C call returns */
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
    if (mcpy_rc_from(st, a_cfg, fn, &rc) < 0)
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

/* put_batch(keys, values, config) / upsert_batch: one int, 0 or the first error. */
static PyObject *do_put_batch(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                              batch_put_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"keys", "values", "config", NULL};
    PyObject *a_keys, *a_vals, *a_cfg = NULL;
    mcpy_state *st = mcpy_method_args(o, args, kwds, "OO|O", fn, kw, &a_keys, &a_vals, &a_cfg);
    if (!st)
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
    if (mcpy_rc_from(st, a_cfg, fn, &rc) < 0)
        goto out;
    have_rc = true;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = call(self->store, keys.keys, n, (const void *const *)ptrs, sizes, &rc.c, res);
    Py_END_ALLOW_THREADS
    /* upstream's put_batch returns one int: the first per-key failure */
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

/* put_from(key, buffer_ptr, size, config) / upsert_from: raw memory. */
static PyObject *do_put_from(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                             put_fn call)
{
    mcpy_store *self = (mcpy_store *)o;
    static char *kw[] = {"key", "buffer_ptr", "size", "config", NULL};
    PyObject *a_key, *a_ptr, *a_size, *a_cfg = NULL;
    mcpy_state *st = mcpy_method_args(o, args, kwds, "OOO|O", fn, kw, &a_key, &a_ptr, &a_size,
                                      &a_cfg);
    if (!st)
        return NULL;
    mc_store_key key;
    uint64_t ptr, size;
    if (mcpy_key(a_key, fn, "key", &key) < 0 || mcpy_u64(a_ptr, fn, "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_size, fn, "size", &size) < 0)
        return NULL;
    bool ok = size <= SIZE_MAX && (ptr != 0 || size == 0) && ptr + size >= ptr;
    return put_one(st, self, &key, (const void *)(uintptr_t)ptr, (size_t)size, ok, a_cfg, fn,
                   call);
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
    mcpy_state *st = mcpy_method_args(o, args, kwds, "OOOOO|O", fn, kw, &a_key, &a_ptr, &a_mptr,
                                      &a_size, &a_msize, &a_cfg);
    if (!st)
        return NULL;
    mc_store_key key;
    uint64_t ptr, mptr, size, msize;
    mcpy_rc rc;
    if (mcpy_key(a_key, fn, "key", &key) < 0 || mcpy_u64(a_ptr, fn, "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_mptr, fn, "metadata_buffer_ptr", &mptr) < 0 ||
        mcpy_u64(a_size, fn, "size", &size) < 0 ||
        mcpy_u64(a_msize, fn, "metadata_size", &msize) < 0)
        return NULL;
    if (mcpy_rc_from(st, a_cfg, fn, &rc) < 0)
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
    mcpy_state *st = mcpy_method_args(o, args, kwds, "OOO|O", fn, kw, &a_keys, &a_ptrs, &a_sizes,
                                      &a_cfg);
    if (!st)
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
    if (mcpy_rc_from(st, a_cfg, fn, &rc) < 0)
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

static PyObject *store_batch_put_from_multi_buffers(PyObject *o, PyObject *args,
                                                    PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "batch_put_from_multi_buffers";
    static char *kw[] = {"keys", "all_buffer_ptrs", "all_sizes", "config", NULL};
    PyObject *a_keys, *a_ptrs, *a_sizes, *a_cfg = NULL;
    mcpy_state *st = mcpy_method_args(o, args, kwds, "OOO|O", fn, kw, &a_keys, &a_ptrs, &a_sizes,
                                      &a_cfg);
    if (!st)
        return NULL;
    mcpy_rc rc;
    if (mcpy_rc_from(st, a_cfg, fn, &rc) < 0)
        return NULL;
    /* result arrays sized from the raw argument; multi_parse reports a bad one */
    Py_ssize_t nk = PySequence_Check(a_keys) ? PySequence_Size(a_keys) : 0;
    if (nk < 0)
        PyErr_Clear();
    int *res = PyMem_Calloc(nk > 0 ? (size_t)nk : 1, sizeof(int));
    int *sres = PyMem_Calloc(nk > 0 ? (size_t)nk : 1, sizeof(int));
    PyObject *ret = NULL;
    mcpy_multi_args m;
    int pr;
    if (!res || !sres) {
        PyErr_NoMemory();
        memset(&m, 0, sizeof(m));
        goto out;
    }
    pr = mcpy_multi_parse(&m, a_keys, a_ptrs, a_sizes, fn, res);
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
    mcpy_multi_clear(&m);
    mcpy_rc_clear(&rc);
    PyMem_Free(res);
    PyMem_Free(sres);
    return ret;
}

/* ---- the methods: one row per Python method (name, shared body, C call) ---- */
#define MCPY_WRITE_TABLE(X)                                                                \
    X(put, do_put, mc_store_put)                                                           \
    X(upsert, do_put, mc_store_upsert)                                                     \
    X(put_parts, do_put_parts, mc_store_put_parts)                                         \
    X(upsert_parts, do_put_parts, mc_store_upsert_parts)                                   \
    X(put_batch, do_put_batch, mc_store_batch_put_from)                                    \
    X(upsert_batch, do_put_batch, mc_store_batch_upsert_from)                              \
    X(put_from, do_put_from, mc_store_put)                                                 \
    X(upsert_from, do_put_from, mc_store_upsert)                                           \
    X(batch_put_from, do_batch_put_from, mc_store_batch_put_from)                          \
    X(batch_upsert_from, do_batch_put_from, mc_store_batch_upsert_from)

#define MCPY__WRITE(NAME, BODY, CALL)                                                      \
    static PyObject *store_##NAME(PyObject *o, PyObject *a, PyObject *k)                   \
    {                                                                                      \
        return BODY(o, a, k, #NAME, CALL);                                                 \
    }
MCPY_WRITE_TABLE(MCPY__WRITE)
#undef MCPY__WRITE

PyMethodDef mcpy_write_methods[] = {
    MCPY_M("put", store_put,
      "put(key: str|bytes, value: buffer, config=ReplicateConfig()) -> int: stores a copy "
      "of value. 0 (also when the key exists: the old value is kept), -600 bad key (empty "
      "or > 4096 bytes) or config, -200 no space even after eviction, -800 transfer "
      "failed, -900 master unreachable."),
    MCPY_M("put_parts", store_put_parts,
      "put_parts(key, *parts, config=ReplicateConfig()) -> int: the object is the "
      "concatenation of parts (1-D bytes-like, else RuntimeError). Returns as put."),
    MCPY_M("put_batch", store_put_batch,
      "put_batch(keys, values, config=ReplicateConfig()) -> int: 0 when every put "
      "succeeded, else the first error; -600 when the lists differ in length."),
    MCPY_M("put_from", store_put_from,
      "put_from(key, buffer_ptr: int, size: int, config=ReplicateConfig()) -> int: stores "
      "size bytes at buffer_ptr (registration not required). Returns as put."),
    MCPY_M("put_from_with_metadata", store_put_from_with_metadata,
      "put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size, metadata_size, "
      "config=ReplicateConfig()) -> int: the object is [metadata][data]."),
    MCPY_M("batch_put_from", store_batch_put_from,
      "batch_put_from(keys, buffer_ptrs, sizes, config=ReplicateConfig()) -> list[int]: "
      "0 or a negative code per key; all -600 when the lists differ in length; [] for no "
      "keys."),
    MCPY_M("batch_put_from_multi_buffers", store_batch_put_from_multi_buffers,
      "batch_put_from_multi_buffers(keys, all_buffer_ptrs: list[list[int]], all_sizes: "
      "list[list[int]], config=ReplicateConfig()) -> list[int]: object i is the "
      "concatenation of its buffers. 0 / negative per key (-200 out of space)."),
    MCPY_M("upsert", store_upsert,
      "upsert(key, value, config=ReplicateConfig()) -> int: insert or replace. 0, else "
      "as put; a replaced value a reader holds a lease on stays readable by that reader "
      "until its lease ends (the new value takes new space)."),
    MCPY_M("upsert_parts", store_upsert_parts, "upsert_parts(key, *parts, config=...) -> int."),
    MCPY_M("upsert_batch", store_upsert_batch,
      "upsert_batch(keys, values, config=...) -> int: 0 or the first error."),
    MCPY_M("upsert_from", store_upsert_from,
      "upsert_from(key, buffer_ptr, size, config=...) -> int."),
    MCPY_M("batch_upsert_from", store_batch_upsert_from,
      "batch_upsert_from(keys, buffer_ptrs, sizes, config=...) -> list[int]."),
    {NULL, NULL, 0, NULL},
};
