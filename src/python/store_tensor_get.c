/* store_tensor_get.c: the tensor readers of MooncakeDistributedStore: get_tensor,
 * batch_get_tensor, the *_with_tp forms and get_tensor_into (zero-copy into caller
 * memory). Readers return a torch.Tensor or None (miss, bad object); the codec import
 * error (no torch) is raised even on a miss. */
#include "store_py.h"

#include <string.h>

#include "mooncake/status.h"

/* The key a TP read uses: key itself (tp_size <= 1) or key_tp_<rank> (new bytes in
 * *holder). Returns 0, 1 (bad rank: the read misses), -1. */
static int read_key(mc_store_key *key, long rank, long size, PyObject **holder)
{
    *holder = NULL;
    if (size <= 1)
        return 0;
    if (rank < 0 || rank >= size)
        return 1;
    *holder = mcpy_tp_key(key, rank);
    if (!*holder)
        return -1;
    key->data = PyBytes_AS_STRING(*holder);
    key->len = (size_t)PyBytes_GET_SIZE(*holder);
    return 0;
}

/* A tensor decoded from a handle, or None (bad object). NULL on other errors. */
static PyObject *decode_handle(mcpy_state *st, PyObject *handle, const char *fn)
{
    PyObject *t = mcpy_codec_call(st, "decode", "(O)", handle);
    if (t)
        return t;
    if (mcpy_codec_refused(st, fn) > 0)
        Py_RETURN_NONE;
    return NULL;
}

static PyObject *get_one(PyObject *o, PyObject *a_key, long rank, long size, const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_state *st = mcpy_state_of(o);
    mc_store_key key;
    PyObject *holder;
    if (!st || mcpy_key(a_key, fn, "key", &key) < 0)
        return NULL;
    PyObject *m = mcpy_codec(st); /* ImportError without torch, even on a miss */
    if (!m)
        return NULL;
    Py_DECREF(m);
    int k = read_key(&key, rank, size, &holder);
    if (k < 0)
        return NULL;
    if (k > 0)
        Py_RETURN_NONE;
    mc_store_buffer *b = NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_get_buffer(self->store, key.data, key.len, &b);
    Py_END_ALLOW_THREADS
    Py_XDECREF(holder);
    if (r != MC_OK || !b) {
        mc_store_buffer_free(b);
        Py_RETURN_NONE;
    }
    /* the handle owns the bytes; the decoded tensor views them and keeps the handle */
    PyObject *h = mcpy_buffer_handle_new(st, b);
    if (!h)
        return NULL;
    PyObject *t = decode_handle(st, h, fn);
    Py_DECREF(h);
    return t;
}

static PyObject *get_many(PyObject *o, PyObject *a_keys, long rank, long size, const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_state *st = mcpy_state_of(o);
    mcpy_keys keys;
    if (!st || mcpy_keys_from(a_keys, fn, "keys", &keys) < 0)
        return NULL;
    PyObject *m = mcpy_codec(st);
    if (!m) {
        mcpy_keys_clear(&keys);
        return NULL;
    }
    Py_DECREF(m);
    size_t n = keys.n;
    PyObject *holders = PyList_New(0), *ret = NULL;
    mc_store_buffer **outs = PyMem_Calloc(n ? n : 1, sizeof(*outs));
    int64_t *res = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    bool *skip = PyMem_Calloc(n ? n : 1, sizeof(bool));
    if (!holders || !outs || !res || !skip) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *h;
        int k = read_key(&keys.keys[i], rank, size, &h);
        if (k < 0)
            goto done;
        if (k > 0) {
            skip[i] = true;
            keys.keys[i].len = 0; /* an empty key: the C call refuses it (a miss) */
        }
        if (h) {
            int e = PyList_Append(holders, h);
            Py_DECREF(h);
            if (e < 0)
                goto done;
        }
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_buffer(self->store, keys.keys, n, outs, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyList_New((Py_ssize_t)n);
    if (!ret)
        goto done;
    for (size_t i = 0; i < n; i++) {
        PyObject *t;
        if (skip[i] || res[i] < 0 || !outs[i]) {
            t = Py_NewRef(Py_None);
        } else {
            PyObject *h = mcpy_buffer_handle_new(st, outs[i]);
            outs[i] = NULL;
            t = h ? decode_handle(st, h, fn) : NULL;
            Py_XDECREF(h);
            if (!t) {
                Py_CLEAR(ret);
                goto done;
            }
        }
        PyList_SET_ITEM(ret, (Py_ssize_t)i, t);
    }
done:
    if (outs)
        for (size_t i = 0; i < n; i++)
            mc_store_buffer_free(outs[i]);
    PyMem_Free(outs);
    PyMem_Free(res);
    PyMem_Free(skip);
    Py_XDECREF(holders);
    mcpy_keys_clear(&keys);
    return ret;
}

/* A zero-copy tensor over the object just read into caller memory, or None. */
static PyObject *view_result(mcpy_state *st, uint64_t ptr, int64_t n, const char *fn)
{
    if (n < 0)
        Py_RETURN_NONE;
    PyObject *t = mcpy_codec_call(st, "view_at", "(KL)", (unsigned long long)ptr, (long long)n);
    if (t)
        return t;
    if (mcpy_codec_refused(st, fn) > 0)
        Py_RETURN_NONE;
    return NULL;
}

static PyObject *into_one(PyObject *o, PyObject *a_key, PyObject *a_ptr, PyObject *a_size,
                          long rank, long tsize, const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_state *st = mcpy_state_of(o);
    mc_store_key key;
    uint64_t ptr, size;
    PyObject *holder;
    if (!st || mcpy_key(a_key, fn, "key", &key) < 0 || mcpy_u64(a_ptr, fn, "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_size, fn, "size", &size) < 0)
        return NULL;
    PyObject *m = mcpy_codec(st);
    if (!m)
        return NULL;
    Py_DECREF(m);
    int k = read_key(&key, rank, tsize, &holder);
    if (k < 0)
        return NULL;
    if (k > 0 || (ptr == 0 && size) || ptr + size < ptr) {
        Py_XDECREF(holder);
        Py_RETURN_NONE;
    }
    int64_t n;
    Py_BEGIN_ALLOW_THREADS
    n = mc_store_get_into(self->store, key.data, key.len, (void *)(uintptr_t)ptr, size);
    Py_END_ALLOW_THREADS
    Py_XDECREF(holder);
    return view_result(st, ptr, n, fn);
}

static PyObject *into_many(PyObject *o, PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes,
                           long rank, long tsize, const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_state *st = mcpy_state_of(o);
    mcpy_keys keys;
    uint64_t *ptrs = NULL, *sizes = NULL;
    size_t np = 0, ns = 0;
    int64_t *res = NULL;
    PyObject *ret = NULL, *holders = NULL;
    if (!st || mcpy_keys_ptrs_sizes(a_keys, a_ptrs, a_sizes, fn, &keys, &ptrs, &sizes, &np, &ns) < 0)
        return NULL;
    size_t n = keys.n;
    if (np != n || ns != n || !mc_store_is_setup(self->store)) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto done;
    }
    PyObject *m = mcpy_codec(st);
    if (!m)
        goto done;
    Py_DECREF(m);
    holders = PyList_New(0);
    res = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (!holders || !res) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *h;
        int k = read_key(&keys.keys[i], rank, tsize, &h);
        if (k < 0)
            goto done;
        if (k > 0)
            keys.keys[i].len = 0; /* refused by the C call: a miss */
        if (h) {
            int e = PyList_Append(holders, h);
            Py_DECREF(h);
            if (e < 0)
                goto done;
        }
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_into(self->store, keys.keys, n, (void *const *)ptrs, sizes, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyList_New((Py_ssize_t)n);
    if (!ret)
        goto done;
    for (size_t i = 0; i < n; i++) {
        PyObject *t = view_result(st, ptrs[i], res[i], fn);
        if (!t) {
            Py_CLEAR(ret);
            goto done;
        }
        PyList_SET_ITEM(ret, (Py_ssize_t)i, t);
    }
done:
    PyMem_Free(ptrs);
    PyMem_Free(sizes);
    PyMem_Free(res);
    Py_XDECREF(holders);
    mcpy_keys_clear(&keys);
    return ret;
}

/* ---- the methods: one row per Python method (name, argument flags) ----
 * Every reader takes its arguments through mcpy_tensor_args and goes to get_one /
 * get_many (new tensors) or into_one / into_many (caller memory, MCPY_T_BUF). */
#define MCPY_TENSOR_GET_TABLE(X)                                                           \
    X(get_tensor, 0)                                                                       \
    X(batch_get_tensor, MCPY_T_MANY)                                                       \
    X(get_tensor_with_tp, MCPY_T_TP | MCPY_T_DIM)                                          \
    X(batch_get_tensor_with_tp, MCPY_T_MANY | MCPY_T_TP)                                   \
    X(get_tensor_into, MCPY_T_BUF)                                                         \
    X(batch_get_tensor_into, MCPY_T_MANY | MCPY_T_BUF)                                     \
    X(get_tensor_with_tp_into, MCPY_T_BUF | MCPY_T_TP | MCPY_T_DIM)                        \
    X(batch_get_tensor_with_tp_into, MCPY_T_MANY | MCPY_T_BUF | MCPY_T_TP)

static PyObject *get_method(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                            unsigned flags)
{
    mcpy_targs a;
    if (mcpy_tensor_args(args, kwds, fn, flags, &a) < 0)
        return NULL;
    bool many = flags & MCPY_T_MANY;
    if (flags & MCPY_T_BUF)
        return (many ? into_many : into_one)(o, a.key, a.ptr, a.size, a.tp_rank, a.tp_size, fn);
    return (many ? get_many : get_one)(o, a.key, a.tp_rank, a.tp_size, fn);
}

#define MCPY__GET(NAME, FLAGS)                                                             \
    static PyObject *t_##NAME(PyObject *o, PyObject *a, PyObject *k)                       \
    {                                                                                      \
        return get_method(o, a, k, #NAME, FLAGS);                                          \
    }
MCPY_TENSOR_GET_TABLE(MCPY__GET)
#undef MCPY__GET

PyMethodDef mcpy_tensor_get_methods[] = {
    MCPY_M("get_tensor", t_get_tensor,
      "get_tensor(key) -> torch.Tensor | None: None on a miss or a bad object."),
    MCPY_M("batch_get_tensor", t_batch_get_tensor,
      "batch_get_tensor(keys) -> list[torch.Tensor | None]."),
    MCPY_M("get_tensor_with_tp", t_get_tensor_with_tp,
      "get_tensor_with_tp(key, tp_rank=0, tp_size=1, split_dim=0) -> torch.Tensor | None: "
      "shard tp_rank (key itself when tp_size <= 1)."),
    MCPY_M("batch_get_tensor_with_tp", t_batch_get_tensor_with_tp,
      "batch_get_tensor_with_tp(base_keys, tp_rank=0, tp_size=1) -> list."),
    MCPY_M("get_tensor_into", t_get_tensor_into,
      "get_tensor_into(key, buffer_ptr, size) -> torch.Tensor | None: reads the object "
      "into the caller's buffer and returns a tensor viewing it (no copy)."),
    MCPY_M("batch_get_tensor_into", t_batch_get_tensor_into,
      "batch_get_tensor_into(keys, buffer_ptrs, sizes) -> list: tensor or None per key; "
      "a list of -600 when not set up or the lists differ in length."),
    MCPY_M("get_tensor_with_tp_into", t_get_tensor_with_tp_into,
      "get_tensor_with_tp_into(key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0)."),
    MCPY_M("batch_get_tensor_with_tp_into", t_batch_get_tensor_with_tp_into,
      "batch_get_tensor_with_tp_into(base_keys, buffer_ptrs, sizes, tp_rank=0, "
      "tp_size=1) -> list."),
    {NULL, NULL, 0, NULL},
};
