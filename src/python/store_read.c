/* store_read.c: the read methods of MooncakeDistributedStore: get, get_batch,
 * get_buffer, batch_get_buffer, get_into, batch_get_into, batch_get_into_multi_buffers.
 * Data methods return b"" / None / a negative code on failure (never raise for a miss);
 * the C read runs with the GIL released. Tensor reads are store_tensor_get.c's. */
#include "store_py.h"

#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MCPY_TAG

/* Allocator for get/get_batch: a bytes object of the object's size, made with the GIL
 * taken back for the moment (the C call runs on this thread with the GIL released). */
typedef struct {
    PyObject **objs;
    size_t n;
} bytes_ctx;

/* Runs inside mc_store_get_with on this thread (GIL released, store call lock held):
 * takes the GIL only for the allocation, never while waiting on a store lock. */
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
    mc_store_key key;
    if (mcpy_arg_key(args, kwds, "get", "key", NULL, &key) < 0)
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
    mcpy_keys keys;
    if (mcpy_arg_keys(args, kwds, "get_batch", NULL, &keys) < 0)
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
    mc_store_key key;
    if (mcpy_arg_key(args, kwds, "get_buffer", "key", NULL, &key) < 0)
        return NULL;
    mcpy_state *st = mcpy_state_of(o);
    if (!st)
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
    return mcpy_buffer_handle_new(st, b);
}

static PyObject *store_batch_get_buffer(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_state *st = mcpy_state_of(o);
    mcpy_keys keys;
    if (!st || mcpy_arg_keys(args, kwds, "batch_get_buffer", NULL, &keys) < 0)
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
            h = mcpy_buffer_handle_new(st, outs[i]); /* frees outs[i] on failure */
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
    mcpy_multi_args m;
    memset(&m, 0, sizeof(m));
    int pr;
    if (!codes || !sres || !res) {
        PyErr_NoMemory();
        goto out;
    }
    pr = mcpy_multi_parse(&m, a_keys, a_ptrs, a_sizes, fn, codes);
    if (pr < 0)
        goto out;
    if (pr > 0) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, m.keys.n);
        goto out;
    }
    /* rows refused by the parser keep their code; the others get the C call's result */
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
    mcpy_multi_clear(&m);
    PyMem_Free(codes);
    PyMem_Free(sres);
    PyMem_Free(res);
    return ret;
}

PyMethodDef mcpy_read_methods[] = {
    MCPY_M("get", store_get,
      "get(key) -> bytes: a copy of the object; b'' on a miss, on any error, when not set "
      "up (and for a zero-length object)."),
    MCPY_M("get_batch", store_get_batch,
      "get_batch(keys) -> list[bytes]: b'' per miss; [] for no keys."),
    MCPY_M("get_buffer", store_get_buffer,
      "get_buffer(key) -> BufferHandle | None: the object's bytes in this client's memory "
      "(no further copy); None on a miss or error. A zero-length object gives an empty "
      "handle."),
    MCPY_M("batch_get_buffer", store_batch_get_buffer,
      "batch_get_buffer(keys) -> list[BufferHandle | None]."),
    MCPY_M("get_into", store_get_into,
      "get_into(key, buffer_ptr: int, size: int) -> int: reads the object into the "
      "size-byte buffer at buffer_ptr; returns the object's size (the buffer may be "
      "larger), -600 when the buffer is smaller, -704 miss, -707 lease expired during the "
      "read, -800 transfer failed; after any negative code the buffer's contents are "
      "undefined (part of a failed transfer may have landed)."),
    MCPY_M("batch_get_into", store_batch_get_into,
      "batch_get_into(keys, buffer_ptrs, sizes) -> list[int]: bytes or a negative code per "
      "key; duplicate keys fill each buffer; all -600 when the lists differ in length."),
    MCPY_M("batch_get_into_multi_buffers", store_batch_get_into_multi_buffers,
      "batch_get_into_multi_buffers(keys, all_buffer_ptrs, all_sizes, "
      "prefer_alloc_in_same_node=False) -> list[int]: scatters object i over its buffers "
      "in order; its size, or -600 when they hold fewer bytes, or as get_into."),
    {NULL, NULL, 0, NULL},
};
